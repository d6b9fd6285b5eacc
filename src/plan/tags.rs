//! `tagpilot tags`: an image's tags in a policy's order, the one it would choose marked.
//!
//! The policy is one the user configured (named, or the only one following the image) or one
//! the command line describes; either way its tags go through the same filters, inspections
//! (build times, platforms, ages) and selection as a plan's, so what `tags` marks is what
//! `plan` would choose for a reference on the same tag.

use std::collections::HashSet;

use crate::image::{ImageError, Repository};
use crate::policy::{ImagePolicy, PolicyError, RegexOrder, Strategy};
use crate::registry::{Registry, RegistryError};
use crate::select::{self, Decision, Exclusion, RankedTag, TagCandidate};

use super::decide::choose_passing;
use super::{Inspector, Progress};

/// Why `tags` cannot use the policy it was asked for.
#[derive(Debug, thiserror::Error)]
pub enum TagsError {
    #[error("no policy named `{name}`; the policies are: {}", list_or_none(known))]
    UnknownPolicy { name: String, known: Vec<String> },
    #[error("`{name}` names {} policies ({}); name one as namespace:name", matches.len(), matches.join(", "))]
    AmbiguousPolicy { name: String, matches: Vec<String> },
    #[error("policy `{policy}` follows {follows}, not {image}")]
    OtherImage {
        policy: String,
        follows: String,
        image: String,
    },
    #[error(transparent)]
    Policy(#[from] PolicyError),
    #[error("--order")]
    Order(#[source] PolicyError),
    #[error("--alphabetical takes asc or desc, not {0:?}")]
    Alphabetical(String),
    #[error("--platform")]
    Platform(#[source] ImageError),
}

/// A policy of `tagpilot tags`'s own, as its strategy flags describe it (they mirror a
/// policy's `spec`; semver when none is given).
#[derive(Debug, Clone, Copy, Default)]
pub struct AdhocPolicy<'a> {
    pub semver: Option<&'a str>,
    pub prerelease: bool,
    pub regex: Option<&'a str>,
    pub sort_by: Option<&'a str>,
    /// How `regex` sort keys compare: `numerical`, `alphabetical` or `semver`; `None`: only
    /// a key of digits has an order (numerical).
    pub order: Option<&'a str>,
    pub newest_build: bool,
    /// `desc` or `asc`.
    pub alphabetical: Option<&'a str>,
    pub allow_tags: Option<&'a str>,
    pub ignore_tags: &'a [String],
    pub platforms: &'a [String],
}

impl AdhocPolicy<'_> {
    /// Whether any flag describes a policy (`--sort-by` and `--order` need `--regex`).
    pub fn given(&self) -> bool {
        self.semver.is_some()
            || self.prerelease
            || self.regex.is_some()
            || self.newest_build
            || self.alphabetical.is_some()
            || self.allow_tags.is_some()
            || !self.ignore_tags.is_empty()
            || !self.platforms.is_empty()
    }

    /// The policy for `repository`.
    pub fn policy(&self, repository: &str) -> Result<ImagePolicy, TagsError> {
        let strategy = if let Some(pattern) = self.regex {
            let order: Option<RegexOrder> = self
                .order
                .map(str::parse)
                .transpose()
                .map_err(TagsError::Order)?;
            Strategy::regex(pattern, self.sort_by, order)?
        } else if self.newest_build {
            Strategy::NewestBuild
        } else if let Some(order) = self.alphabetical {
            match order {
                "desc" => Strategy::Alphabetical { descending: true },
                "asc" => Strategy::Alphabetical { descending: false },
                other => return Err(TagsError::Alphabetical(other.to_string())),
            }
        } else {
            Strategy::semver(self.semver, self.prerelease)?
        };
        let mut policy = ImagePolicy::adhoc(repository, strategy)?;
        if let Some(allow) = self.allow_tags {
            policy.set_allow_tags(allow)?;
        }
        if !self.ignore_tags.is_empty() {
            policy.set_ignore_tags(self.ignore_tags)?;
        }
        for p in self.platforms {
            policy
                .platforms
                .push(p.parse().map_err(TagsError::Platform)?);
        }
        Ok(policy)
    }
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Which configured policy `tags` uses for an image.
#[derive(Debug)]
pub enum PolicyChoice<'a> {
    /// The policy named with `--policy`.
    Named(&'a ImagePolicy),
    /// No policy named, and exactly one configured policy follows the image: that one.
    OnlyOne(&'a ImagePolicy),
    /// No policy named, and several follow the image: none is taken without a name.
    Several(Vec<&'a ImagePolicy>),
    /// A pattern policy follows the image (named, or the one that owns it: no policy names
    /// the image exactly, and no other pattern of as high a priority matches it): its instance
    /// for the image, and why it was taken.
    Pattern(Box<ImagePolicy>, String),
    /// No policy named, and none follows the image.
    None,
}

impl PolicyChoice<'_> {
    /// What `tagpilot tags` says about the choice for `repository`: a line for the listing
    /// when a configured policy orders it, a note for stderr when several could and none was
    /// taken; nothing when the flags' own policy is used.
    pub fn announcement(&self, repository: &Repository) -> Announcement {
        match self {
            PolicyChoice::Named(p) => Announcement::Policy(format!("policy {}", policy_label(p))),
            PolicyChoice::OnlyOne(p) => Announcement::Policy(format!(
                "policy {}: the only configured policy following {repository} (pass strategy flags or --policy to use another)",
                policy_label(p)
            )),
            PolicyChoice::Several(ps) => Announcement::Note(format!(
                "note: {} configured policies follow {repository}: {}; pass --policy NAME to use one (listed by semver meanwhile)",
                ps.len(),
                ps.iter()
                    .map(|p| policy_label(p))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            PolicyChoice::Pattern(p, why) => {
                Announcement::Policy(format!("policy {}: {why}", policy_label(p)))
            }
            PolicyChoice::None => Announcement::Nothing,
        }
    }

    /// The configured policy chosen, if one was.
    pub fn policy(&self) -> Option<&ImagePolicy> {
        match self {
            PolicyChoice::Named(p) | PolicyChoice::OnlyOne(p) => Some(p),
            PolicyChoice::Pattern(p, _) => Some(p),
            PolicyChoice::Several(_) | PolicyChoice::None => None,
        }
    }
}

/// What `tagpilot tags` says about the policy it orders tags by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Announcement {
    /// The configured policy used: printed above the listing.
    Policy(String),
    /// Several configured policies could apply and none was taken: printed on stderr.
    Note(String),
    Nothing,
}

/// A policy as a user finds it: `name` (or `namespace:name`, as Flux markers name it) and
/// where its name is written, `file:line`.
pub fn policy_label(p: &ImagePolicy) -> String {
    // A policy tagpilot made of an Application's image (`<app>/<alias>`) is written nowhere.
    if p.source.line == 0
        && let Some((app, _)) = p.name.split_once('/')
    {
        let app = match &p.namespace {
            Some(ns) => format!("{ns}/{app}"),
            None => app.to_string(),
        };
        return format!("{} (an image of Application {app})", p.name);
    }
    let file = &p.source.file;
    // `./policies/api.yaml` when tagpilot.yaml was found in the working directory.
    let file = file.strip_prefix(".").unwrap_or(file);
    let pattern = match &p.instance {
        Some(i) => format!(", pattern {}", i.pattern),
        None => String::new(),
    };
    format!(
        "{} ({}:{}{pattern})",
        qualified_name(p),
        file.display(),
        p.source.line
    )
}

fn qualified_name(p: &ImagePolicy) -> String {
    match &p.namespace {
        Some(ns) => format!("{ns}:{}", p.name),
        None => p.name.clone(),
    }
}

/// The policies `name` names: `name`, or `namespace:name` / `namespace/name`. An Argo CD
/// Application's image is the policy `<app>/<alias>` in the Application's namespace, so
/// `argocd/payments/pay` and `payments/pay` both name the image `pay` of `argocd/payments`.
pub fn named<'a>(policies: &'a [ImagePolicy], name: &str) -> Vec<&'a ImagePolicy> {
    let qualified = name.split_once([':', '/']).map(|(ns, n)| (Some(ns), n));
    policies
        .iter()
        .filter(|p| {
            p.name == name
                || qualified.is_some_and(|(ns, n)| p.name == n && p.namespace.as_deref() == ns)
        })
        .collect()
}

/// The configured policy for `image`: the one called `name` (`name`, `namespace:name` or
/// `namespace/name`), which must follow `image`; without a name, the only policy following it.
pub fn configured_policy<'a>(
    policies: &'a [ImagePolicy],
    image: &Repository,
    name: Option<&str>,
) -> Result<PolicyChoice<'a>, TagsError> {
    let Some(name) = name else {
        let following: Vec<&ImagePolicy> = policies
            .iter()
            .filter(|p| p.pattern.is_none() && &p.image == image)
            .collect();
        return Ok(match following.as_slice() {
            [] => pattern_choice(policies, image),
            [one] => PolicyChoice::OnlyOne(one),
            _ => PolicyChoice::Several(following),
        });
    };
    let matches = named(policies, name);
    let policy = match matches.as_slice() {
        [one] => *one,
        [] => {
            let mut known: Vec<String> = policies.iter().map(qualified_name).collect();
            known.sort();
            known.dedup();
            return Err(TagsError::UnknownPolicy {
                name: name.to_string(),
                known,
            });
        }
        _ => {
            return Err(TagsError::AmbiguousPolicy {
                name: name.to_string(),
                matches: matches.iter().map(|p| policy_label(p)).collect(),
            });
        }
    };
    if let Some(pattern) = &policy.pattern
        && pattern.matches(image)
    {
        let why = format!("its pattern {pattern} matches {image}");
        return Ok(PolicyChoice::Pattern(Box::new(policy.instance(image)), why));
    }
    if policy.pattern.is_some() || &policy.image != image {
        return Err(TagsError::OtherImage {
            policy: qualified_name(policy),
            follows: policy.image.to_string(),
            image: image.to_string(),
        });
    }
    Ok(PolicyChoice::Named(policy))
}

/// The pattern policy that follows `image` when no policy names it exactly: the only pattern
/// matching it, or the one of highest priority; several of the highest are none.
fn pattern_choice<'a>(policies: &'a [ImagePolicy], image: &Repository) -> PolicyChoice<'a> {
    let mut matching: Vec<&ImagePolicy> = policies
        .iter()
        .filter(|p| p.pattern.as_ref().is_some_and(|pt| pt.matches(image)))
        .collect();
    matching.sort_by_key(|p| std::cmp::Reverse(p.priority));
    match matching.as_slice() {
        [] => PolicyChoice::None,
        [one] => PolicyChoice::Pattern(
            Box::new(one.instance(image)),
            format!(
                "its pattern {} matches {image}, and no policy names the image exactly",
                one.image_name
            ),
        ),
        [first, second, ..] if first.priority > second.priority => PolicyChoice::Pattern(
            Box::new(first.instance(image)),
            format!(
                "its pattern {} matches {image} with priority {}, above every other pattern \
                 matching it ({} has {})",
                first.image_name, first.priority, second.name, second.priority
            ),
        ),
        _ => {
            let top = matching[0].priority;
            PolicyChoice::Several(
                matching
                    .into_iter()
                    .take_while(|p| p.priority == top)
                    .collect(),
            )
        }
    }
}

/// Every tag of the policy's image: the candidates in policy order, best first, then the tags
/// its filters or strategy leave out, each with the reason. The one a reference on `current`
/// would end on is marked.
pub async fn rank_tags<R: Registry>(
    registry: &R,
    policy: &ImagePolicy,
    current: Option<&str>,
    progress: &dyn Progress,
) -> Result<Vec<RankedTag>, RegistryError> {
    let tags = registry.list_tags(&policy.image).await?;
    let inspector = Inspector::new(registry);
    let mut candidates = inspector.candidates(policy, &tags, progress).await?;
    // Tags the filters dropped are listed too, with the reason, so keep them as bare candidates.
    let kept: HashSet<String> = candidates.iter().map(|c| c.tag.clone()).collect();
    for tag in tags.iter().filter(|t| !kept.contains(*t)) {
        candidates.push(TagCandidate::new(tag.as_str()));
    }
    let mut ranked = select::rank(policy, current, &candidates);
    if !policy.platforms.is_empty() {
        mark_skipped(policy, current, &candidates, &inspector, &mut ranked).await?;
    }
    Ok(ranked)
}

/// Marks what a plan would choose once the tags without a required platform are passed over,
/// and each tag passed over with what its image lacks.
async fn mark_skipped<R: Registry>(
    policy: &ImagePolicy,
    current: Option<&str>,
    candidates: &[TagCandidate],
    inspector: &Inspector<'_, R>,
    ranked: &mut [RankedTag],
) -> Result<(), RegistryError> {
    let (decision, skipped) = choose_passing(policy, current, candidates, inspector).await?;
    let chosen = match decision {
        Decision::Update(c) => Some(c.tag),
        Decision::UpToDate => current.map(str::to_string),
        Decision::Hold(_) => None,
    };
    for r in ranked.iter_mut() {
        r.chosen = chosen.as_deref() == Some(r.tag.as_str());
        if let Some(s) = skipped.iter().find(|s| s.tag == r.tag) {
            r.excluded = Some(Exclusion::Skipped {
                platforms: policy.platforms.clone(),
                reason: s.reason.clone(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(name: &str, namespace: Option<&str>, image: &str) -> ImagePolicy {
        let mut p = ImagePolicy::adhoc(image, Strategy::semver(None, false).unwrap()).unwrap();
        p.name = name.to_string();
        p.namespace = namespace.map(str::to_string);
        p
    }

    fn repo(image: &str) -> Repository {
        Repository::parse(image).unwrap()
    }

    #[test]
    fn the_only_policy_following_the_image_is_taken_without_a_name() {
        let policies = [
            policy("api", None, "ghcr.io/acme/api"),
            policy("web", None, "ghcr.io/acme/web"),
        ];
        match configured_policy(&policies, &repo("ghcr.io/acme/api"), None).unwrap() {
            PolicyChoice::OnlyOne(p) => assert_eq!(p.name, "api"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            configured_policy(&policies, &repo("ghcr.io/acme/db"), None).unwrap(),
            PolicyChoice::None
        ));
    }

    /// Issue 31: `tags` says which policy an image follows and why: an exact policy over a
    /// pattern, a pattern alone, the higher priority of two, and none between equals.
    #[test]
    fn tags_take_the_exact_policy_then_the_pattern_and_say_why() {
        let pattern = |name: &str, written: &str, priority: i32| {
            let mut p = policy(name, None, "ghcr.io/acme/x");
            p.pattern = Some(crate::policy::ImagePattern::parse(written).unwrap());
            p.image_name = written.to_string();
            p.priority = priority;
            p
        };
        let mut policies = vec![
            policy("api", None, "ghcr.io/acme/api"),
            pattern("acme", "ghcr.io/acme/*", 0),
        ];
        assert!(matches!(
            configured_policy(&policies, &repo("ghcr.io/acme/api"), None).unwrap(),
            PolicyChoice::OnlyOne(p) if p.name == "api"
        ));
        let web = repo("ghcr.io/acme/web");
        match configured_policy(&policies, &web, None).unwrap() {
            PolicyChoice::Pattern(p, why) => {
                assert_eq!(p.name, "acme@acme/web");
                assert_eq!(p.image, web);
                assert!(why.contains("no policy names the image exactly"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        policies.push(pattern("web", "ghcr.io/acme/w*", 5));
        match configured_policy(&policies, &web, None).unwrap() {
            PolicyChoice::Pattern(p, why) => {
                assert_eq!(p.name, "web@acme/web");
                assert!(why.contains("priority 5"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        policies.push(pattern("tie", "ghcr.io/acme/**", 5));
        assert!(matches!(
            configured_policy(&policies, &web, None).unwrap(),
            PolicyChoice::Several(ps) if ps.len() == 2
        ));
        assert!(matches!(
            configured_policy(&policies, &web, Some("acme")).unwrap(),
            PolicyChoice::Pattern(p, _) if p.name == "acme@acme/web"
        ));
        assert!(configured_policy(&policies, &repo("ghcr.io/other/web"), Some("acme")).is_err());
    }

    #[test]
    fn strategy_flags_make_a_policy_of_their_own() {
        let none = AdhocPolicy {
            order: Some("alphabetical"),
            ..AdhocPolicy::default()
        };
        assert!(!none.given());
        assert!(matches!(
            none.policy("ghcr.io/acme/api").unwrap().strategy,
            Strategy::Semver { .. }
        ));
        let platforms = ["linux/arm64".to_string()];
        let newest = AdhocPolicy {
            newest_build: true,
            platforms: &platforms,
            ..none
        };
        assert!(newest.given());
        let policy = newest.policy("ghcr.io/acme/api").unwrap();
        assert!(matches!(policy.strategy, Strategy::NewestBuild));
        assert_eq!(policy.platforms.len(), 1);
        let sideways = AdhocPolicy {
            alphabetical: Some("sideways"),
            ..none
        };
        let err = sideways.policy("ghcr.io/acme/api").unwrap_err();
        assert_eq!(
            err.to_string(),
            "--alphabetical takes asc or desc, not \"sideways\""
        );
        let bad = ["linux".to_string()];
        let bad_platform = AdhocPolicy {
            platforms: &bad,
            ..none
        };
        assert!(matches!(
            bad_platform.policy("ghcr.io/acme/api"),
            Err(TagsError::Platform(_))
        ));
    }

    #[test]
    fn the_choice_is_announced_on_the_listing_and_several_as_a_note() {
        let policies = [
            policy("api-stable", None, "ghcr.io/acme/api"),
            policy("api-next", Some("apps"), "ghcr.io/acme/api"),
        ];
        let api = repo("ghcr.io/acme/api");
        let named = configured_policy(&policies, &api, Some("apps:api-next")).unwrap();
        let Announcement::Policy(line) = named.announcement(&api) else {
            panic!("{named:?}")
        };
        assert!(line.starts_with("policy apps:api-next ("), "{line}");
        assert_eq!(named.policy().map(|p| p.name.as_str()), Some("api-next"));
        let several = configured_policy(&policies, &api, None).unwrap();
        let Announcement::Note(note) = several.announcement(&api) else {
            panic!("{several:?}")
        };
        assert!(
            note.starts_with("note: 2 configured policies follow ghcr.io/acme/api: api-stable ("),
            "{note}"
        );
        assert!(note.contains("pass --policy NAME"), "{note}");
        assert!(several.policy().is_none());
        assert_eq!(PolicyChoice::None.announcement(&api), Announcement::Nothing);
    }

    #[test]
    fn two_policies_on_one_image_are_not_guessed_between() {
        let policies = [
            policy("api-stable", None, "ghcr.io/acme/api"),
            policy("api-next", None, "ghcr.io/acme/api"),
        ];
        match configured_policy(&policies, &repo("ghcr.io/acme/api"), None).unwrap() {
            PolicyChoice::Several(ps) => assert_eq!(ps.len(), 2),
            other => panic!("{other:?}"),
        }
        match configured_policy(&policies, &repo("ghcr.io/acme/api"), Some("api-next")).unwrap() {
            PolicyChoice::Named(p) => assert_eq!(p.name, "api-next"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_named_policy_is_found_by_namespace_and_must_follow_the_image() {
        let policies = [
            policy("api", Some("team-a"), "ghcr.io/acme/api"),
            policy("api", Some("team-b"), "ghcr.io/acme/api"),
            policy("web", None, "ghcr.io/acme/web"),
        ];
        let api = repo("ghcr.io/acme/api");
        let err = configured_policy(&policies, &api, Some("api")).unwrap_err();
        assert!(matches!(err, TagsError::AmbiguousPolicy { .. }), "{err}");
        for name in ["team-b:api", "team-b/api"] {
            match configured_policy(&policies, &api, Some(name)).unwrap() {
                PolicyChoice::Named(p) => assert_eq!(p.namespace.as_deref(), Some("team-b")),
                other => panic!("{other:?}"),
            }
        }
        let err = configured_policy(&policies, &api, Some("web")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "policy `web` follows ghcr.io/acme/web, not ghcr.io/acme/api"
        );
        let err = configured_policy(&policies, &api, Some("db")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "no policy named `db`; the policies are: team-a:api, team-b:api, web"
        );
    }
}
