//! What passes down to a promoting environment from the environments above it (issue 20): the
//! tags held there (failed, rolled back by a person, held by hand), through a whole chain, and
//! whether an upstream's change in git is still being verified.
//!
//! An upstream is read as the fields it runs its tag in ([`Behind`]): a `policy:` upstream,
//! every field of that policy; a `path:` upstream, every field of that file and the
//! whole-policy holds of the policies whose targets write it; an Application, the failures
//! verified in it, the policies of its own `image-list`, the fields of the files its sources
//! contain and the whole-policy holds of the policies whose targets may write there. The policies behind an upstream that promote in turn bring their own
//! upstreams, so a tag held in dev is held for prod. Each hold passes down as its own tag
//! only: a rollback upstream blocks there every tag up to the one rolled back from, but the
//! tag the upstream runs after it is what it offers.
//!
//! Pure, as the rest of [`crate::promotion`]: the caller gathers the policies, the holds, the
//! Applications it read ([`Above`]) and the state store's verification records ([`Verifying`],
//! [`Ended`]) as plain data; nothing here reads the store, the cluster or git.

use std::collections::BTreeSet;
use std::path::Path;

use jiff::Timestamp;

use super::Verification;
use crate::affected::{contains_file, normalise_url, source_deploys};
use crate::application::Application;
use crate::config::repository::RepositoryConfig;
use crate::holds::{FieldKey, HeldTag, HoldReason, Holds, hold_reason};
use crate::image::Repository;
use crate::policy::{ImagePolicy, Upstream as UpstreamRef};

/// Why what is held above cannot be said.
#[derive(Debug, thiserror::Error)]
pub enum AboveError {
    /// The held tags could not be read (the state store); never read as "none held".
    #[error("the tags held upstream are unknown: {why}")]
    HeldUnknown { why: String },
}

/// An Application read this cycle with the policies of its own `image-list`: their holds pass
/// down from it.
#[derive(Debug, Clone, Copy)]
pub struct Managed<'a> {
    pub app: &'a Application,
    pub policies: &'a [Option<ImagePolicy>],
}

/// One field of a verification under way, as the state store keeps it.
#[derive(Debug, Clone, Copy)]
pub struct Verifying<'a> {
    pub key: &'a FieldKey,
    /// The image it follows; empty in records older than the field.
    pub image: &'a str,
    /// The tag being verified.
    pub to: &'a str,
}

/// A verification of one field that ended: verified, or in an error.
#[derive(Debug, Clone, Copy)]
pub struct Ended<'a> {
    pub key: &'a FieldKey,
    pub tag: &'a str,
    pub at: Timestamp,
    /// Why it ended without a verdict (its Application could not be followed).
    pub error: Option<&'a str>,
}

/// The fields an upstream runs its tag in, as holds and verifications name fields.
#[derive(Debug, Default)]
pub struct Behind {
    /// Policies all of whose fields are the upstream's.
    whole: BTreeSet<String>,
    /// Files (repository, path) that are the upstream's.
    files: BTreeSet<(String, String)>,
    /// Directories (repository, path) an Application's sources deploy.
    dirs: BTreeSet<(String, String)>,
    /// Policies writing those files: their whole-policy holds (an Application's annotation).
    writers: BTreeSet<String>,
    /// Applications (`namespace/name`) whose failed verifications pass down.
    applications: BTreeSet<String>,
}

impl Behind {
    /// Whether `key` is one of the upstream's fields.
    pub fn has(&self, key: &FieldKey) -> bool {
        let in_files = key.repository.as_ref().is_some_and(|repo| {
            !key.file.is_empty()
                && (self.files.contains(&(repo.clone(), key.file.clone()))
                    || self
                        .dirs
                        .iter()
                        .any(|(r, dir)| r == repo && contains_file(dir, &key.file)))
        });
        self.whole.contains(&key.policy)
            || in_files
            || (key.is_whole_policy() && self.writers.contains(&key.policy))
    }

    fn holds(&self, held: &HeldTag) -> bool {
        let failed_here = matches!(&held.reason, HoldReason::Failed { application, .. }
            if self.applications.contains(application));
        failed_here || self.has(&held.key)
    }

    /// The promoting policies behind it.
    fn policies(&self) -> impl Iterator<Item = &String> {
        self.whole.iter().chain(&self.writers)
    }

    fn extend(&mut self, other: Behind) {
        self.whole.extend(other.whole);
        self.files.extend(other.files);
        self.dirs.extend(other.dirs);
        self.writers.extend(other.writers);
        self.applications.extend(other.applications);
    }
}

/// What a cycle knows of the environments above a promoting one.
pub struct Above<'a> {
    /// The policy files' policies.
    pub policies: &'a [ImagePolicy],
    pub holds: &'a Holds,
    /// The Applications with an `image-list` of their own, with its policies.
    pub managed: &'a [Managed<'a>],
    /// Every Application read this cycle that deploys something: what an Application
    /// upstream's sources contain.
    pub deployers: &'a [Application],
    pub repositories: &'a [RepositoryConfig],
    /// Argo CD's namespace: an Application upstream's when it names none.
    pub namespace: &'a str,
}

impl Above<'_> {
    /// The fields behind `upstream` of a policy that promotes into `repository`.
    pub fn behind(&self, upstream: &UpstreamRef, repository: &str) -> Behind {
        let mut behind = Behind::default();
        match upstream {
            UpstreamRef::Policy { name, .. } => {
                behind.whole.insert(name.clone());
            }
            UpstreamRef::Path {
                path,
                repository: repo,
            } => {
                let repo = repo.as_deref().unwrap_or(repository);
                behind.writers = self
                    .policies
                    .iter()
                    .filter(|p| {
                        p.targets.iter().any(|t| {
                            t.repository.as_deref() == Some(repo) && t.matches(Path::new(path))
                        })
                    })
                    .map(|p| p.name.clone())
                    .collect();
                behind.files.insert((repo.to_string(), path.clone()));
            }
            UpstreamRef::Application { name, namespace } => {
                let namespace = namespace.as_deref().unwrap_or(self.namespace);
                let id = format!("{namespace}/{name}");
                let is_it = |app: &crate::application::Application| {
                    app.metadata.name == *name
                        && app.metadata.namespace.as_deref().unwrap_or(self.namespace) == namespace
                };
                for managed in self.managed.iter().filter(|m| is_it(m.app)) {
                    let own = managed.policies.iter().flatten();
                    behind.whole.extend(own.map(|p| p.name.clone()));
                }
                for app in self.deployers.iter().filter(|a| is_it(a)) {
                    for (i, source) in app.sources().into_iter().enumerate() {
                        let url = normalise_url(&source.repo_url);
                        let repo = self
                            .repositories
                            .iter()
                            .find(|r| normalise_url(&r.url) == url);
                        let Some(repo) = repo else { continue };
                        // A `ref:` source deploys only the value files its siblings name.
                        let deploys = source_deploys(app, i);
                        for file in deploys.value_files {
                            behind.writers.extend(self.writers_under(&repo.name, &file));
                            behind.files.insert((repo.name.clone(), file));
                        }
                        if let Some(dir) = deploys.dir {
                            // The policies writing what it deploys: their own upstreams
                            // are the chain above this Application.
                            behind.writers.extend(self.writers_under(&repo.name, &dir));
                            behind.dirs.insert((repo.name.clone(), dir));
                        }
                    }
                }
                behind.applications.insert(id);
            }
        }
        behind
    }

    /// The policies with a target that may write under `dir` of the repository `repo`.
    fn writers_under<'p>(
        &'p self,
        repo: &'p str,
        dir: &'p str,
    ) -> impl Iterator<Item = String> + 'p {
        self.policies
            .iter()
            .filter(move |p| {
                p.targets
                    .iter()
                    .any(|t| t.repository.as_deref() == Some(repo) && t.may_write_under(dir))
            })
            .map(|p| p.name.clone())
    }

    /// The fields behind `upstream` and every environment above it, and how many promoting
    /// links lie above (`0`: none of the policies behind it promotes).
    pub fn chain(&self, upstream: &UpstreamRef, repository: &str) -> (Behind, usize) {
        let mut all = self.behind(upstream, repository);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut level: Vec<String> = all.policies().cloned().collect();
        let mut stage = 0;
        loop {
            let promoting: Vec<&ImagePolicy> = level
                .iter()
                .filter(|name| seen.insert((*name).clone()))
                .filter_map(|name| self.policies.iter().find(|p| &p.name == name))
                .filter(|p| p.promote.is_some())
                .collect();
            if promoting.is_empty() {
                return (all, stage);
            }
            stage += 1;
            let mut next = Vec::new();
            for p in promoting {
                let repo = p
                    .targets
                    .iter()
                    .find_map(|t| t.repository.as_deref())
                    .unwrap_or(repository);
                for up in p.promote.iter().flat_map(|pr| &pr.from) {
                    let behind = self.behind(up, repo);
                    next.extend(behind.policies().cloned());
                    all.extend(behind);
                }
            }
            level = next;
        }
    }

    /// The tags held in `behind` for `image`, with why; `Err` when the holds are unknown (the
    /// state store could not be read): never read as "none held".
    pub fn held(
        &self,
        behind: &Behind,
        image: &Repository,
    ) -> Result<Vec<(String, String)>, AboveError> {
        if let Some(why) = self.holds.unknown_because() {
            return Err(AboveError::HeldUnknown {
                why: why.to_string(),
            });
        }
        Ok(self
            .holds
            .all()
            .into_iter()
            .filter(|h| self.of_image(&h.key.policy, image) && behind.holds(h))
            .map(|h| {
                let why = format!("in policy {}: {}", h.key.policy, hold_reason(h, &h.tag));
                (h.tag.clone(), why)
            })
            .collect())
    }

    /// The tags that failed verification in the Application `id`, with why.
    pub fn failed_in(&self, id: &str, image: &Repository) -> Vec<(String, String)> {
        self.holds
            .all()
            .into_iter()
            .filter(|h| self.of_image(&h.key.policy, image))
            .filter_map(|h| match &h.reason {
                HoldReason::Failed {
                    application,
                    failure,
                } if application == id => {
                    Some((h.tag.clone(), format!("failed in {id}: {failure}")))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether `policy` follows `image`; a policy this cycle does not know counts, so that a
    /// hold is never dropped for want of its policy.
    fn of_image(&self, policy: &str, image: &Repository) -> bool {
        let known = self.policies.iter().find(|p| p.name == policy).or_else(|| {
            self.managed
                .iter()
                .flat_map(|m| m.policies.iter().flatten())
                .find(|p| p.name == policy)
        });
        known.is_none_or(|p| &p.image == image)
    }
}

/// Whether a `path:` or `policy:` upstream's tag, on its base branch since `since`, was
/// verified where it runs (issue 19's records: `under_way`, `ended`): under way, not yet;
/// ended in an error after `since` (on any of its fields), errored: never read as verified,
/// until a later verification of that field ends verified and replaces the record; verified
/// after `since`, from then; otherwise no verification followed it, and the soak counts from
/// the commit. (A tag whose verification failed is held, and passes down as a hold.)
pub fn verification_in_git(
    (under_way, ended): (&[Verifying<'_>], &[Ended<'_>]),
    behind: &Behind,
    image: &Repository,
    tag: &str,
    since: Option<Timestamp>,
) -> Verification {
    let image_text = image.to_string();
    let pending = under_way
        .iter()
        .any(|f| f.to == tag && behind.has(f.key) && (f.image.is_empty() || f.image == image_text));
    if pending {
        return Verification::Pending;
    }
    let ended: Vec<&Ended<'_>> = ended
        .iter()
        .filter(|v| v.tag == tag && behind.has(v.key))
        .filter(|v| since.is_none_or(|since| v.at >= since))
        .collect();
    let errored = ended
        .iter()
        .filter_map(|v| Some((v.at, v.error?)))
        .max_by_key(|(at, _)| *at);
    if let Some((_, error)) = errored {
        return Verification::Errored {
            reason: error.to_string(),
        };
    }
    match ended.iter().map(|v| v.at).max() {
        Some(at) => Verification::Verified { at },
        None => Verification::FromGit,
    }
}

/// When a verification of `tag` in the fields `behind` last ended verified, not before
/// `synced` (the Application's last sync): since when an Application upstream is known healthy
/// with it, when Argo CD does not say.
pub fn verified_since(
    ended: &[Ended<'_>],
    behind: &Behind,
    tag: &str,
    synced: Option<Timestamp>,
) -> Option<Timestamp> {
    ended
        .iter()
        .filter(|v| v.tag == tag && v.error.is_none() && behind.has(v.key))
        .filter(|v| synced.is_none_or(|synced| v.at >= synced))
        .map(|v| v.at)
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IMAGE: &str = "registry.example/shop/api";

    /// `shop-<env>` on `envs/<env>/**` of `manifests`, following `promote` (spec lines).
    fn env(name: &str, promote: &str) -> String {
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: shop-{name}\n\
             spec:\n  image: {IMAGE}\n  strategy:\n    semver: {{range: \"1.x\"}}\n{promote}  \
             targets:\n    - repository: manifests\n      paths: [\"envs/{name}/**\"]\n"
        )
    }

    /// dev → staging → prod, each promoting from the one before, and `other` on another image.
    fn policies() -> Vec<ImagePolicy> {
        let from = |up: &str| format!("  promote:\n    from:\n      - policy: shop-{up}\n");
        let other = env("other", "").replace(IMAGE, "registry.example/shop/web");
        let text = [
            env("dev", ""),
            env("staging", &from("dev")),
            env("prod", &from("staging")),
            other,
        ]
        .join("---\n");
        crate::policy::parse_file(Path::new("policies.yaml"), &text).unwrap()
    }

    fn repositories() -> Vec<RepositoryConfig> {
        let yaml = "name: manifests\nurl: https://git.example/acme/manifests.git\nbranch: main\n";
        vec![serde_saphyr::from_str(yaml).unwrap()]
    }

    fn key(policy: &str, file: &str) -> FieldKey {
        FieldKey {
            repository: Some("manifests".into()),
            policy: policy.into(),
            file: file.into(),
            field: "Deployment/api container api".into(),
        }
    }

    fn held(key: FieldKey, tag: &str, reason: HoldReason) -> HeldTag {
        HeldTag {
            key,
            tag: tag.into(),
            reason,
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
        }
    }

    fn image() -> Repository {
        Repository::parse(IMAGE).unwrap()
    }

    fn above<'a>(
        policies: &'a [ImagePolicy],
        holds: &'a Holds,
        repositories: &'a [RepositoryConfig],
        (managed, deployers): (&'a [Managed<'a>], &'a [Application]),
    ) -> Above<'a> {
        Above {
            policies,
            holds,
            managed,
            deployers,
            repositories,
            namespace: "argocd",
        }
    }

    #[test]
    fn a_tag_held_two_environments_up_is_held_below_and_another_image_s_is_not() {
        let policies = policies();
        let manual = HoldReason::Manual { by: "ops".into() };
        let holds = Holds::known([
            held(
                key("shop-dev", "envs/dev/api.yaml"),
                "1.4.0",
                manual.clone(),
            ),
            held(key("shop-other", "envs/other/api.yaml"), "1.5.0", manual),
        ]);
        let repositories = repositories();
        let above = above(&policies, &holds, &repositories, (&[], &[]));
        let staging = UpstreamRef::Policy {
            name: "shop-staging".into(),
            repository: None,
        };
        let (behind, stage) = above.chain(&staging, "manifests");
        // staging promotes from dev: one promoting link above prod's upstream.
        assert_eq!(stage, 1);
        assert!(behind.has(&key("shop-dev", "envs/dev/api.yaml")));
        assert!(!behind.has(&key("shop-prod", "envs/prod/api.yaml")));
        let tags: Vec<String> = above
            .held(&behind, &image())
            .unwrap()
            .into_iter()
            .map(|(tag, why)| format!("{tag}: {why}"))
            .collect();
        assert_eq!(tags.len(), 1, "{tags:?}");
        assert!(
            tags[0].starts_with("1.4.0: in policy shop-dev: "),
            "{tags:?}"
        );

        // Held tags that cannot be read are never "none held".
        let unknown = Holds::unknown("the state store is down");
        let above = Above {
            holds: &unknown,
            ..above
        };
        let err = above.held(&behind, &image()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the tags held upstream are unknown: the state store is down"
        );
    }

    #[test]
    fn an_application_upstream_is_its_own_policies_the_files_it_deploys_and_its_failures() {
        let policies = policies();
        let failed = HoldReason::Failed {
            application: "argocd/shop-staging".into(),
            failure: "Degraded".into(),
        };
        let holds = Holds::known([held(key("web/api", "elsewhere.yaml"), "1.3.0", failed)]);
        let repositories = repositories();
        let app = crate::application::read_documents(
            Path::new("app.yaml"),
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop-staging\n  \
             namespace: argocd\nspec:\n  source: {repoURL: 'https://git.example/acme/manifests', \
             path: envs/staging}\n",
        )
        .unwrap()
        .remove(0);
        let own = vec![None, Some(policies[0].clone())];
        let managed = [Managed {
            app: &app,
            policies: &own,
        }];
        let deployers = [app.clone()];
        let above = above(&policies, &holds, &repositories, (&managed, &deployers));
        let upstream = UpstreamRef::Application {
            name: "shop-staging".into(),
            namespace: None,
        };
        let behind = above.behind(&upstream, "manifests");
        // Its own image-list's policy, whole.
        assert!(behind.has(&key("shop-dev", "anywhere.yaml")));
        // The files its source deploys, and the policies that write there.
        assert!(behind.has(&key("shop-prod", "envs/staging/api.yaml")));
        assert!(!behind.has(&key("shop-prod", "envs/prod/api.yaml")));
        assert_eq!(
            above.failed_in("argocd/shop-staging", &image()),
            [(
                "1.3.0".to_string(),
                "failed in argocd/shop-staging: Degraded".to_string()
            )]
        );
        // A failure there passes down whatever field it was on.
        let held = above.held(&behind, &image()).unwrap();
        assert_eq!(held.len(), 1, "{held:?}");
        assert_eq!(held[0].0, "1.3.0");
    }

    #[test]
    fn a_git_upstream_is_verified_once_a_verification_after_its_commit_ends_well() {
        let policies = policies();
        let holds = Holds::none();
        let repositories = repositories();
        let above = above(&policies, &holds, &repositories, (&[], &[]));
        let upstream = UpstreamRef::Policy {
            name: "shop-staging".into(),
            repository: None,
        };
        let behind = above.behind(&upstream, "manifests");
        let at = |t: &str| -> Timestamp { format!("2026-11-25T{t}:00Z").parse().unwrap() };
        let field = key("shop-staging", "envs/staging/api.yaml");
        let elsewhere = key("shop-prod", "envs/prod/api.yaml");
        let since = Some(at("10:00"));
        let decide = |under_way: &[Verifying<'_>], ended: &[Ended<'_>]| {
            verification_in_git((under_way, ended), &behind, &image(), "1.4.0", since)
        };
        let verifying = Verifying {
            key: &field,
            image: IMAGE,
            to: "1.4.0",
        };
        let ended = |key, at, error| Ended {
            key,
            tag: "1.4.0",
            at,
            error,
        };
        assert_eq!(decide(&[], &[]), Verification::FromGit);
        assert_eq!(decide(&[verifying], &[]), Verification::Pending);
        // Another field's verification, or another image's, is not this upstream's.
        let other = Verifying {
            key: &elsewhere,
            ..verifying
        };
        let web = Verifying {
            image: "registry.example/shop/web",
            ..verifying
        };
        assert_eq!(decide(&[other, web], &[]), Verification::FromGit);
        // One that ended before the commit says nothing of it.
        assert_eq!(
            decide(&[], &[ended(&field, at("09:00"), None)]),
            Verification::FromGit
        );
        assert_eq!(
            decide(&[], &[ended(&field, at("10:30"), None)]),
            Verification::Verified { at: at("10:30") }
        );
        assert_eq!(
            decide(
                &[],
                &[
                    ended(&field, at("10:30"), None),
                    ended(&field, at("10:40"), Some("not followed"))
                ]
            ),
            Verification::Errored {
                reason: "not followed".into()
            }
        );
        // Since when an Application upstream is healthy, when Argo CD does not say: the last
        // verification that ended well after its sync.
        let records = [
            ended(&field, at("10:30"), None),
            ended(&field, at("10:50"), Some("not followed")),
            ended(&field, at("09:00"), None),
        ];
        assert_eq!(
            verified_since(&records, &behind, "1.4.0", since),
            Some(at("10:30"))
        );
        assert_eq!(
            verified_since(&records, &behind, "1.4.0", Some(at("11:00"))),
            None
        );
    }
}
