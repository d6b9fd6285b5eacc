//! Tag selection: given a policy, the tag a file is on now, and the registry's tags, which tag
//! should the file be on?
//!
//! Pure code, no I/O: everything it needs is passed in, so every rule is unit-tested without a
//! registry. Why a tag is left out ([`Exclusion`]) and why a reference stays ([`HoldReason`])
//! are typed values (`reasons`), matched on by the planner and its tests; their words are
//! rendered only where they are shown. It must never move a reference backwards by the policy's own order unless the policy
//! says `allowDowngrade: true`, and never move it out of its variant family (see
//! [`crate::version`]).
//!
//! Rules that are choices, documented here because users will ask:
//! - A current tag the strategy cannot read as one of its versions (`latest` or a CI placeholder
//!   such as `TAG` under semver, a tag the regex does not match, a tag without a build time under
//!   newestBuild, another tag than the followed one under digest, anything that is not tag syntax
//!   such as `${TAG}`) is held, with the reason: its authors may not mean it as a version at all,
//!   and a CI step may substitute it. `replaceUnreadableTags: true` on the policy replaces it by
//!   the best candidate instead, as Argo CD Image Updater does; under semver such a file is then
//!   treated as being on the plain `x.y.z` family.
//! - A current tag that ranks above every candidate (a file pinned above the range, or on a tag
//!   the filters now exclude) stays: `Hold` with the reason.
//! - A candidate that ranks equal to the current tag (`v1.2.0` vs `1.2.0`) is not a change.
//! - Digest: the choice is always the followed tag; the planner compares its digest with the
//!   file's, since the tag name alone cannot say whether the image moved.
//! - `minAge`: a tag younger than the policy's `minAge` (its age is data on the candidate,
//!   unknown counting as too young) is not a candidate. When that leaves the reference where it
//!   is while a newer tag waits, the decision is a hold naming that tag and its age, not "up to
//!   date". A current tag that is itself too young stays.

use std::cmp::Ordering;

// Re-exported where they were before they moved to their own leaf module.
pub use crate::version::{self, Constraint, Family, TagVersion};

use crate::image::is_valid_tag;
use crate::policy::{ImagePolicy, RegexOrder, Strategy};

mod reasons;
mod skip;
pub use reasons::{Exclusion, HoldReason, PassedOver, Tally, Unreadable};
pub use skip::{SkipReason, Skipped, held_by_skips, missing_platforms, no_wanted_platform};

/// A tag as seen in the registry, with metadata where the strategy needed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagCandidate {
    pub tag: String,
    /// Build time, from the image config or the `org.opencontainers.image.created` annotation.
    pub created: Option<jiff::Timestamp>,
    pub digest: Option<String>,
    /// The registry said the tag has no image for any of the policy's `platforms`, so there is
    /// no build time to have (see `registry::ImageInfo::offers_any`).
    pub no_image_for_platform: bool,
    /// How long the tag has existed, for `minAge`: since its build under newestBuild, since
    /// tagpilot first saw it otherwise. `None` is unknown (no memory of first sightings), which
    /// `minAge` takes as too young.
    pub age: Option<std::time::Duration>,
}

impl TagCandidate {
    /// A candidate with only a name (what every strategy but newestBuild needs).
    pub fn new(tag: impl Into<String>) -> Self {
        TagCandidate {
            tag: tag.into(),
            created: None,
            digest: None,
            no_image_for_platform: false,
            age: None,
        }
    }
}

/// The outcome for one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Move to this tag.
    Update(TagCandidate),
    /// The file is already on the best tag.
    UpToDate,
    /// Nothing to do, and why (no candidate in range, pinned above range, …).
    Hold(HoldReason),
}

/// One line of `tagpilot tags`: a tag in policy order, whether the policy would choose it, and
/// why not when it is out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankedTag {
    pub tag: String,
    /// The tag the reference would end on (the update, or the current tag when up to date).
    pub chosen: bool,
    /// The reference's current tag.
    pub current: bool,
    pub excluded: Option<Exclusion>,
}

/// Tags that pass `allowTags`, `ignoreTags` and the strategy's own filter (version, pre-release,
/// range, pattern), in registry order. Variant families and build times depend on the reference
/// and the registry, so they are left to [`choose`]: this is the set worth fetching metadata for.
pub fn filter_tags<'a>(policy: &ImagePolicy, tags: &'a [String]) -> Vec<&'a str> {
    let cx = Context {
        policy,
        family: FamilyRule::Any,
        need_time: false,
    };
    tags.iter()
        .map(String::as_str)
        .filter(|t| cx.evaluate(t, None).is_ok())
        .collect()
}

/// Whether `choose` needs `created` on the candidates (newest build).
pub fn needs_build_time(policy: &ImagePolicy) -> bool {
    matches!(policy.strategy, Strategy::NewestBuild)
}

/// Whether `a` ranks below `b` by the policy's own order, for tags the order can read from
/// their names alone; `None` when it cannot (newestBuild needs build times, digest has no
/// order, a tag the strategy does not read).
pub fn ranks_below(policy: &ImagePolicy, a: &str, b: &str) -> Option<bool> {
    if matches!(
        policy.strategy,
        Strategy::NewestBuild | Strategy::Digest { .. }
    ) {
        return None;
    }
    let cx = Context {
        policy,
        family: FamilyRule::Any,
        need_time: false,
    };
    let (ka, kb) = (cx.evaluate(a, None).ok()?, cx.evaluate(b, None).ok()?);
    Some(selection_order(policy, &ka, &kb) == Ordering::Greater)
}

/// Picks the tag for a reference currently on `current` (None when the file names no tag).
pub fn choose(
    policy: &ImagePolicy,
    current: Option<&str>,
    candidates: &[TagCandidate],
) -> Decision {
    Selection::new(policy, current, candidates).decision()
}

/// The candidates in policy order, best first, then the excluded ones in registry order with
/// the reason; the one [`choose`] would end on is marked `chosen`.
pub fn rank(
    policy: &ImagePolicy,
    current: Option<&str>,
    candidates: &[TagCandidate],
) -> Vec<RankedTag> {
    let selection = Selection::new(policy, current, candidates);
    let chosen = match selection.decision() {
        Decision::Update(c) => Some(c.tag),
        Decision::UpToDate => current.map(str::to_string),
        Decision::Hold(_) => None,
    };
    let line = |tag: &str, excluded: Option<Exclusion>| RankedTag {
        tag: tag.to_string(),
        chosen: chosen.as_deref() == Some(tag),
        current: current == Some(tag),
        excluded,
    };
    let mut out: Vec<RankedTag> = selection
        .eligible
        .iter()
        .map(|(c, _)| line(&c.tag, None))
        .collect();
    out.extend(
        selection
            .excluded
            .iter()
            .map(|(c, why)| line(&c.tag, Some(why.clone()))),
    );
    out
}

/// Why `current` is not a version `policy`'s strategy can read, as a hold reason
/// ([`HoldReason::Unreadable`]); `None` when it is one. Under newestBuild a tag reads only when it is among `candidates` with a build time.
/// `replaceUnreadableTags` is not looked at here; [`choose`] and the planner's digest path do.
pub fn unreadable_current(
    policy: &ImagePolicy,
    current: &str,
    candidates: &[TagCandidate],
) -> Option<HoldReason> {
    let why = if !is_valid_tag(current) {
        Unreadable::NotATag
    } else {
        match &policy.strategy {
            Strategy::Semver { .. } if TagVersion::parse(current).is_some() => return None,
            Strategy::Semver { .. } => Unreadable::NotAVersion,
            Strategy::Regex {
                pattern,
                group,
                order,
                ..
            } => match regex_key(pattern, *group, *order, current) {
                Ok(_) => return None,
                Err(Exclusion::NoMatch) => Unreadable::NoMatch {
                    pattern: pattern.as_str().to_string(),
                },
                Err(why) => Unreadable::NoSortKey(why),
            },
            Strategy::NewestBuild => {
                let built = candidates
                    .iter()
                    .any(|c| c.tag == current && c.created.is_some());
                if built {
                    return None;
                }
                Unreadable::NoBuildTime
            }
            Strategy::Digest { tag } if tag == current => return None,
            Strategy::Digest { tag } => Unreadable::NotTheFollowedTag { tag: tag.clone() },
            Strategy::Alphabetical { .. } => return None,
        }
    };
    Some(HoldReason::Unreadable {
        current: current.to_string(),
        why,
    })
}

// === impl Selection ===

/// A strategy's sort key for one tag. Keys of one selection are always the same variant.
#[derive(Debug, Clone)]
enum Key {
    Version {
        version: semver::Version,
        parts: u8,
    },
    /// Digits without leading zeros, so that length then bytes is numeric order at any size.
    Number(String),
    Text(String),
    Time(jiff::Timestamp),
}

impl Key {
    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Version { version: a, .. }, Key::Version { version: b, .. }) => {
                a.cmp_precedence(b)
            }
            (Key::Number(a), Key::Number(b)) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
            (Key::Text(a), Key::Text(b)) => a.cmp(b),
            (Key::Time(a), Key::Time(b)) => a.cmp(b),
            // Unreachable by construction; keep the order total anyway.
            _ => Ordering::Equal,
        }
    }
}

enum FamilyRule {
    /// `filter_tags`: families depend on the reference, not checked here.
    Any,
    /// No comparable current tag: plain versions of any precision.
    Plain,
    Exactly(Family),
    /// The current tag's suffix at any precision (`keep_precision: false`).
    Suffix(String),
}

struct Context<'p> {
    policy: &'p ImagePolicy,
    family: FamilyRule,
    need_time: bool,
}

impl Context<'_> {
    fn evaluate(&self, tag: &str, created: Option<jiff::Timestamp>) -> Result<Key, Exclusion> {
        let policy = self.policy;
        if let Some(allow) = &policy.allow_tags
            && !allow.is_match(tag)
        {
            return Err(Exclusion::NotAllowed);
        }
        if let Some(&i) = policy.ignore_set.matches(tag).first() {
            let glob = policy.ignore_tags.get(i).cloned().unwrap_or_default();
            return Err(Exclusion::Ignored { glob });
        }
        match &policy.strategy {
            Strategy::Semver { range, prerelease } => {
                let tv = TagVersion::parse(tag).ok_or(Exclusion::NotAVersion)?;
                // A range that names a pre-release (`2.x-0`) admits them where it names one, as
                // Masterminds does; the range below decides.
                if tv.is_prerelease()
                    && !prerelease
                    && !range.as_ref().is_some_and(Constraint::names_prerelease)
                {
                    return Err(Exclusion::PreRelease);
                }
                match &self.family {
                    FamilyRule::Any => {}
                    FamilyRule::Plain if tv.family.suffix.is_empty() => {}
                    FamilyRule::Exactly(f) if *f == tv.family => {}
                    FamilyRule::Suffix(s) if *s == tv.family.suffix => {}
                    FamilyRule::Suffix(s) => {
                        let current = Family {
                            parts: tv.family.parts,
                            suffix: s.clone(),
                        };
                        return Err(Exclusion::OtherFamily {
                            family: tv.family,
                            current,
                        });
                    }
                    FamilyRule::Plain => {
                        let current = Family {
                            parts: tv.family.parts,
                            suffix: String::new(),
                        };
                        return Err(Exclusion::OtherFamily {
                            family: tv.family,
                            current,
                        });
                    }
                    FamilyRule::Exactly(f) => {
                        return Err(Exclusion::OtherFamily {
                            family: tv.family,
                            current: f.clone(),
                        });
                    }
                }
                if let Some(range) = range
                    && !range.matches_with(&tv.version, *prerelease)
                {
                    return Err(Exclusion::OutOfRange {
                        range: range.to_string(),
                    });
                }
                Ok(Key::Version {
                    version: tv.version,
                    parts: tv.family.parts,
                })
            }
            Strategy::Regex {
                pattern,
                group,
                order,
                ..
            } => regex_key(pattern, *group, *order, tag),
            Strategy::NewestBuild => match created {
                Some(t) => Ok(Key::Time(t)),
                None if self.need_time => Err(Exclusion::NoBuildTime),
                None => Ok(Key::Text(tag.to_string())),
            },
            Strategy::Digest { tag: followed } if followed == tag => Ok(Key::Text(tag.to_string())),
            Strategy::Digest { .. } => Err(Exclusion::NotTheTag),
            Strategy::Alphabetical { .. } => Ok(Key::Text(tag.to_string())),
        }
    }
}

fn regex_key(
    pattern: &regex::Regex,
    group: usize,
    order: RegexOrder,
    tag: &str,
) -> Result<Key, Exclusion> {
    let caps = pattern.captures(tag).ok_or(Exclusion::NoMatch)?;
    let value = caps
        .get(group)
        .ok_or(Exclusion::NoSortKey { value: None })?
        .as_str();
    let unreadable = || Exclusion::NoSortKey {
        value: Some(value.to_string()),
    };
    match order {
        RegexOrder::Alphabetical => Ok(Key::Text(value.to_string())),
        RegexOrder::Numerical => {
            if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
                return Err(unreadable());
            }
            let trimmed = value.trim_start_matches('0');
            Ok(Key::Number(if trimmed.is_empty() {
                "0".into()
            } else {
                trimmed.to_string()
            }))
        }
        RegexOrder::Semver => {
            let tv = TagVersion::parse(value).ok_or_else(unreadable)?;
            Ok(Key::Version {
                version: tv.version,
                parts: tv.family.parts,
            })
        }
    }
}

struct Selection<'a> {
    policy: &'a ImagePolicy,
    current: Option<&'a str>,
    current_key: Option<Key>,
    candidates: &'a [TagCandidate],
    /// Best first.
    eligible: Vec<(&'a TagCandidate, Key)>,
    excluded: Vec<(&'a TagCandidate, Exclusion)>,
    /// Tags that would be eligible but for `minAge`, best first (also among `excluded`).
    young: Vec<(&'a TagCandidate, Key)>,
}

impl<'a> Selection<'a> {
    fn new(
        policy: &'a ImagePolicy,
        current: Option<&'a str>,
        candidates: &'a [TagCandidate],
    ) -> Self {
        let current_version = match (&policy.strategy, current) {
            (Strategy::Semver { .. }, Some(c)) => TagVersion::parse(c),
            _ => None,
        };
        let family = match &current_version {
            Some(tv) if !policy.keep_precision => FamilyRule::Suffix(tv.family.suffix.clone()),
            Some(tv) => FamilyRule::Exactly(tv.family.clone()),
            None => FamilyRule::Plain,
        };
        let cx = Context {
            policy,
            family,
            need_time: true,
        };
        let current_key = current.and_then(|c| match &policy.strategy {
            Strategy::Semver { .. } => current_version.map(|tv| Key::Version {
                version: tv.version,
                parts: tv.family.parts,
            }),
            Strategy::Regex {
                pattern,
                group,
                order,
                ..
            } => regex_key(pattern, *group, *order, c).ok(),
            Strategy::NewestBuild => candidates
                .iter()
                .find(|k| k.tag == c)
                .and_then(|k| k.created)
                .map(Key::Time),
            Strategy::Alphabetical { .. } => Some(Key::Text(c.to_string())),
            Strategy::Digest { .. } => None,
        });
        let mut eligible = Vec::new();
        let mut excluded = Vec::new();
        let mut young = Vec::new();
        for candidate in candidates {
            match cx.evaluate(&candidate.tag, candidate.created) {
                Ok(key) => match policy.min_age {
                    Some(min_age) if candidate.age.is_none_or(|age| age < min_age) => {
                        let why = Exclusion::TooYoung {
                            age: candidate.age,
                            min_age,
                        };
                        excluded.push((candidate, why));
                        young.push((candidate, key));
                    }
                    _ => eligible.push((candidate, key)),
                },
                Err(Exclusion::NoBuildTime) if candidate.no_image_for_platform => {
                    let platforms = policy.platforms.clone();
                    excluded.push((candidate, Exclusion::NoImageForPlatform { platforms }));
                }
                Err(why) => excluded.push((candidate, why)),
            }
        }
        let mut selection = Selection {
            policy,
            current,
            current_key,
            candidates,
            eligible,
            excluded,
            young,
        };
        let current_tag = current.map(str::to_string);
        let order = |(a, ka): &(&TagCandidate, Key), (b, kb): &(&TagCandidate, Key)| {
            selection_order(policy, ka, kb)
                // Among equals: more precise versions, then the current tag (no churn between
                // synonyms), then the tag itself so the order is total.
                .then_with(|| match (ka, kb) {
                    (Key::Version { parts: pa, .. }, Key::Version { parts: pb, .. }) => pb.cmp(pa),
                    _ => Ordering::Equal,
                })
                .then_with(|| {
                    (Some(&b.tag) == current_tag.as_ref())
                        .cmp(&(Some(&a.tag) == current_tag.as_ref()))
                })
                .then_with(|| b.tag.cmp(&a.tag))
        };
        selection.eligible.sort_by(order);
        selection.young.sort_by(order);
        selection
    }

    /// The decision, and when `minAge` held back a tag that would have been chosen, a hold
    /// that names it instead of a silent "up to date". A current tag that is itself too young
    /// (put there by hand) stays where it is.
    fn decision(&self) -> Decision {
        let decision = self.decision_by_rank();
        let Some(min_age) = self.policy.min_age else {
            return decision;
        };
        if matches!(decision, Decision::Update(_)) {
            return decision;
        }
        let current_is_young = self
            .current
            .is_some_and(|c| self.young.iter().any(|(y, _)| y.tag == c));
        let newer = self.young.iter().find(|(y, key)| {
            Some(y.tag.as_str()) != self.current
                && self
                    .current_key
                    .as_ref()
                    .is_none_or(|current| selection_order(self.policy, key, current).is_lt())
        });
        // A hold for another reason (an unreadable current tag) is the one to show.
        let other_hold =
            matches!(decision, Decision::Hold(_)) && !self.eligible.is_empty() && !current_is_young;
        match newer {
            Some((tag, _)) if !other_hold => Decision::Hold(HoldReason::TooYoung {
                tag: tag.tag.clone(),
                age: tag.age,
                min_age,
            }),
            None if current_is_young => Decision::UpToDate,
            _ => decision,
        }
    }

    fn decision_by_rank(&self) -> Decision {
        if let Strategy::Digest { tag } = &self.policy.strategy {
            return match self.eligible.first() {
                Some((c, _)) => match self
                    .current
                    .and_then(|current| unreadable_current(self.policy, current, self.candidates))
                {
                    Some(why) if !self.policy.replace_unreadable_tags => Decision::Hold(why),
                    _ => Decision::Update((*c).clone()),
                },
                None => match self.excluded.iter().find(|(c, _)| &c.tag == tag) {
                    Some((_, why)) => Decision::Hold(HoldReason::FollowedTagExcluded {
                        tag: tag.clone(),
                        why: why.clone(),
                    }),
                    None => Decision::Hold(HoldReason::FollowedTagMissing { tag: tag.clone() }),
                },
            };
        }
        let Some((best, best_key)) = self.eligible.first() else {
            return Decision::Hold(self.nothing_eligible());
        };
        let Some(current) = self.current else {
            return Decision::Update((*best).clone());
        };
        if best.tag == current {
            return Decision::UpToDate;
        }
        if let Some(why) = unreadable_current(self.policy, current, self.candidates) {
            return match self.policy.replace_unreadable_tags {
                true => Decision::Update((*best).clone()),
                false => Decision::Hold(why),
            };
        }
        let Some(current_key) = &self.current_key else {
            // Unreachable: a readable current tag has a key. Keep the old answer anyway.
            return Decision::Update((*best).clone());
        };
        match selection_order(self.policy, best_key, current_key) {
            Ordering::Less => Decision::Update((*best).clone()),
            Ordering::Equal => Decision::UpToDate,
            Ordering::Greater if self.policy.allow_downgrade => Decision::Update((*best).clone()),
            Ordering::Greater => Decision::Hold(HoldReason::AboveBest {
                current: current.to_string(),
                best: best.tag.clone(),
            }),
        }
    }

    fn nothing_eligible(&self) -> HoldReason {
        let total = self.excluded.len();
        if total == 0 {
            return HoldReason::NoTags;
        }
        if matches!(self.policy.strategy, Strategy::NewestBuild)
            && self
                .excluded
                .iter()
                .all(|(_, why)| matches!(why, Exclusion::NoBuildTime))
        {
            return HoldReason::NoBuildTimes { total };
        }
        if let Some((_, Exclusion::NoImageForPlatform { platforms })) = self.excluded.first()
            && self
                .excluded
                .iter()
                .all(|(_, why)| matches!(why, Exclusion::NoImageForPlatform { .. }))
        {
            return HoldReason::NoImageForPlatform {
                platforms: platforms.clone(),
                total,
            };
        }
        HoldReason::NoneFits {
            total,
            tallies: reasons::tally(self.excluded.iter().map(|(_, why)| why)),
        }
    }
}

/// `Less` when `a` is better than `b` by the policy's order.
fn selection_order(policy: &ImagePolicy, a: &Key, b: &Key) -> Ordering {
    match policy.strategy {
        Strategy::Alphabetical { descending: false } => a.cmp(b),
        _ => b.cmp(a),
    }
}

#[cfg(test)]
mod tests;
