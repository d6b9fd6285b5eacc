//! Why selection leaves a tag out ([`Exclusion`]) and why it leaves a reference where it is
//! ([`HoldReason`]): typed, each carrying what it names (the tag, the range, the platforms, the
//! ages), so that callers match on the reason and only the edges (reports, logs, the command
//! line) render its words, through `Display`.

use std::fmt;
use std::time::Duration;

use crate::image::Platform;
use crate::version::Family;

use super::skip::{SkipReason, Skipped, joined};

/// Why a tag is not a candidate for a reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exclusion {
    /// Does not match `allowTags`.
    NotAllowed,
    /// Matches this `ignoreTags` glob.
    Ignored { glob: String },
    /// semver: the tag does not read as a version.
    NotAVersion,
    /// semver: a pre-release, and the policy does not take them.
    PreRelease,
    /// semver: another variant family than the current tag's.
    OtherFamily { family: Family, current: Family },
    /// semver: outside `range`.
    OutOfRange { range: String },
    /// regex: the pattern does not match.
    NoMatch,
    /// regex: the sort group is missing or cannot be read in the policy's order.
    NoSortKey { value: Option<String> },
    /// newestBuild: the registry gave no build time.
    NoBuildTime,
    /// newestBuild: the tag has no image for any of the policy's platforms.
    NoImageForPlatform { platforms: Vec<Platform> },
    /// The image was inspected and refused (`tagpilot tags` with platforms): what it lacks, or
    /// why else it was passed over, beside the policy's `platforms`.
    Skipped {
        platforms: Vec<Platform>,
        reason: SkipReason,
    },
    /// digest: not the followed tag.
    NotTheTag,
    /// `minAge`: the tag has not existed long enough yet (`age: None`: unknown).
    TooYoung {
        age: Option<Duration>,
        min_age: Duration,
    },
}

impl fmt::Display for Exclusion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Exclusion::NotAllowed => f.write_str("filtered by allowTags"),
            Exclusion::Ignored { glob } => write!(f, "filtered by ignoreTags {glob:?}"),
            Exclusion::NotAVersion => f.write_str("not a version"),
            Exclusion::PreRelease => f.write_str("pre-release"),
            Exclusion::OtherFamily { family, current } => {
                write!(f, "other variant family {family} (current is {current})")
            }
            Exclusion::OutOfRange { range } => write!(f, "out of range {range:?}"),
            Exclusion::NoMatch => f.write_str("does not match the pattern"),
            Exclusion::NoSortKey { value: Some(v) } => {
                write!(f, "sort key {v:?} cannot be ordered")
            }
            Exclusion::NoSortKey { value: None } => f.write_str("sort group did not match"),
            Exclusion::NoBuildTime => f.write_str("no build time"),
            Exclusion::NoImageForPlatform { platforms } => {
                write!(f, "no image for {}", joined(platforms, " or "))
            }
            Exclusion::Skipped {
                reason: SkipReason::MissingPlatforms { missing, offered },
                ..
            } => write!(
                f,
                "no image for {} (offers {})",
                joined(missing, " or "),
                joined(offered, ", ")
            ),
            Exclusion::Skipped { platforms, reason } => {
                write!(f, "no image for {} ({reason})", joined(platforms, " or "))
            }
            Exclusion::NotTheTag => f.write_str("not the followed tag"),
            Exclusion::TooYoung { age, min_age } => Young(*age, *min_age).fmt(f),
        }
    }
}

impl Exclusion {
    /// The exclusion as a hold's summary counts it: one glob, family or sort key stands for
    /// all (`3 filtered by ignoreTags`), ages as they are shown.
    fn tallied(&self) -> Exclusion {
        match self {
            Exclusion::Ignored { .. } => Exclusion::Ignored {
                glob: String::new(),
            },
            Exclusion::NoSortKey { .. } => Exclusion::NoSortKey { value: None },
            Exclusion::OtherFamily { current, .. } => {
                // Precision past `x.y.z` reads alike.
                let current = Family {
                    parts: current.parts.clamp(1, 3),
                    suffix: current.suffix.clone(),
                };
                Exclusion::OtherFamily {
                    family: current.clone(),
                    current,
                }
            }
            Exclusion::TooYoung { age, min_age } => Exclusion::TooYoung {
                age: age.map(shown),
                min_age: shown(*min_age),
            },
            other => other.clone(),
        }
    }
}

/// An exclusion in a hold's summary: the words of [`Exclusion`] without what differs per tag.
struct Tallied<'a>(&'a Exclusion);

impl fmt::Display for Tallied<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Exclusion::Ignored { .. } => f.write_str("filtered by ignoreTags"),
            Exclusion::OtherFamily { current, .. } => write!(f, "not in family {current}"),
            Exclusion::NoSortKey { .. } => f.write_str("sort key cannot be ordered"),
            other => other.fmt(f),
        }
    }
}

/// How many of a selection's tags were left out for one reason, in a hold's summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tally {
    /// The reason, as the summary counts it (one glob, family or sort key for all).
    pub excluded: Exclusion,
    pub count: usize,
}

/// Counts `excluded` by reason, in first-seen order.
pub(super) fn tally<'a>(excluded: impl IntoIterator<Item = &'a Exclusion>) -> Vec<Tally> {
    let mut tallies: Vec<Tally> = Vec::new();
    for why in excluded {
        let key = why.tallied();
        match tallies.iter_mut().find(|t| t.excluded == key) {
            Some(t) => t.count += 1,
            None => tallies.push(Tally {
                excluded: key,
                count: 1,
            }),
        }
    }
    tallies
}

/// Why a current tag is not a version the policy's strategy can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unreadable {
    /// Not tag syntax at all (`${TAG}`).
    NotATag,
    /// semver: not a version.
    NotAVersion,
    /// regex: the policy's pattern, as written, does not match it.
    NoMatch { pattern: String },
    /// regex: it matches, but has no sort key the policy's order reads.
    NoSortKey(Exclusion),
    /// newestBuild: the registry lists no build time for it.
    NoBuildTime,
    /// digest: another tag than the one the policy follows.
    NotTheFollowedTag { tag: String },
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unreadable::NotATag => f.write_str("is not a tag a registry can hold (a placeholder?)"),
            Unreadable::NotAVersion => f.write_str("is not a version semver can read"),
            // As written: Debug would double every backslash.
            Unreadable::NoMatch { pattern } => {
                write!(f, "does not match the policy's pattern `{pattern}`")
            }
            Unreadable::NoSortKey(why) => {
                write!(f, "has no sort key the policy can order: {why}")
            }
            Unreadable::NoBuildTime => f.write_str("has no build time among the registry's tags"),
            Unreadable::NotTheFollowedTag { tag } => write!(f, "is not the followed tag {tag:?}"),
        }
    }
}

/// The candidates a policy passed over after ranking (a required platform missing, a
/// signature refused): the newest, and how many more.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PassedOver {
    pub newest: Skipped,
    pub more: usize,
}

impl fmt::Display for PassedOver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "newer tag {}", self.newest)?;
        match self.more {
            0 => Ok(()),
            n => write!(f, " ({n} more skipped)"),
        }
    }
}

/// Why selection leaves a reference where it is: the "and why" of [`super::Decision::Hold`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// The registry lists no tag for the image.
    NoTags,
    /// newestBuild: no tag has a build time to order by.
    NoBuildTimes { total: usize },
    /// newestBuild: no tag has an image for the policy's platforms.
    NoImageForPlatform {
        platforms: Vec<Platform>,
        total: usize,
    },
    /// Every tag is left out by the policy; how many for each reason, in first-seen order.
    NoneFits { total: usize, tallies: Vec<Tally> },
    /// The current tag is not a version the strategy can read; it is left as written.
    Unreadable { current: String, why: Unreadable },
    /// digest: the followed tag is listed, but left out.
    FollowedTagExcluded { tag: String, why: Exclusion },
    /// digest: the followed tag is not listed.
    FollowedTagMissing { tag: String },
    /// The current tag ranks above the best candidate, and the policy does not move back.
    AboveBest { current: String, best: String },
    /// `minAge`: a newer tag would be chosen but has not existed long enough.
    TooYoung {
        tag: String,
        age: Option<Duration>,
        min_age: Duration,
    },
    /// Newer tags were passed over (see [`PassedOver`]); `held` is why else the reference
    /// stays, when it would have anyway.
    PassedOver {
        held: Option<Box<HoldReason>>,
        passed: PassedOver,
    },
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::NoTags => f.write_str("the registry has no tags"),
            HoldReason::NoBuildTimes { total } => {
                write!(f, "none of the {total} tags has a build time")
            }
            HoldReason::NoImageForPlatform { platforms, total } => write!(
                f,
                "no image for {} in any of the {total} tags",
                joined(platforms, " or ")
            ),
            HoldReason::NoneFits { total, tallies } => {
                write!(f, "no tag fits the policy ({total} tags: ")?;
                for (i, t) in tallies.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{} {}", t.count, Tallied(&t.excluded))?;
                }
                f.write_str(")")
            }
            HoldReason::Unreadable { current, why } => write!(
                f,
                "current tag {current:?} {why}; left as written (replaceUnreadableTags: true \
                 would replace it)"
            ),
            HoldReason::FollowedTagExcluded { tag, why } => write!(f, "tag {tag:?} is {why}"),
            HoldReason::FollowedTagMissing { tag } => {
                write!(f, "tag {tag:?} is not in the registry")
            }
            HoldReason::AboveBest { current, best } => write!(
                f,
                "current tag {current:?} ranks above the best candidate {best:?}; not moving \
                 backwards (allowDowngrade: true would)"
            ),
            HoldReason::TooYoung { tag, age, min_age } => {
                write!(f, "newer tag {tag} is {}", Young(*age, *min_age))
            }
            HoldReason::PassedOver { held: None, passed } => passed.fmt(f),
            HoldReason::PassedOver {
                held: Some(held),
                passed,
            } => write!(f, "{held}; {passed}"),
        }
    }
}

/// `12m old, minAge 30m`, or why the age is unknown.
struct Young(Option<Duration>, Duration);

impl fmt::Display for Young {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let min_age = short_duration(self.1);
        match self.0 {
            Some(age) => write!(f, "{} old, minAge {min_age}", short_duration(age)),
            None => write!(
                f,
                "of unknown age (tagpilot remembers when it first saw a tag only with a \
                 --state-dir that takes writes), minAge {min_age}"
            ),
        }
    }
}

/// A duration as it is shown: whole seconds, and whole minutes from ten minutes on.
fn shown(d: Duration) -> Duration {
    let secs = d.as_secs();
    Duration::from_secs(if secs >= 600 { secs - secs % 60 } else { secs })
}

/// A duration as a person reads it: `12m`, `1h 5m`, `40s`; seconds only under ten minutes.
fn short_duration(d: Duration) -> humantime::FormattedDuration {
    humantime::format_duration(shown(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn platforms(list: &[&str]) -> Vec<Platform> {
        list.iter().map(|p| p.parse().unwrap()).collect()
    }

    #[test]
    fn each_hold_reason_renders_its_words() {
        let minute = Duration::from_secs(60);
        let cases: Vec<(HoldReason, &str)> = vec![
            (HoldReason::NoTags, "the registry has no tags"),
            (
                HoldReason::NoBuildTimes { total: 3 },
                "none of the 3 tags has a build time",
            ),
            (
                HoldReason::NoImageForPlatform {
                    platforms: platforms(&["linux/arm64", "linux/amd64"]),
                    total: 2,
                },
                "no image for linux/arm64 or linux/amd64 in any of the 2 tags",
            ),
            (
                HoldReason::NoneFits {
                    total: 3,
                    tallies: tally(&[
                        Exclusion::Ignored {
                            glob: "*-rc".into(),
                        },
                        Exclusion::OutOfRange {
                            range: "~1.2".into(),
                        },
                        Exclusion::Ignored {
                            glob: "dev-*".into(),
                        },
                    ]),
                },
                "no tag fits the policy (3 tags: 2 filtered by ignoreTags, 1 out of range \"~1.2\")",
            ),
            (
                HoldReason::Unreadable {
                    current: "latest".into(),
                    why: Unreadable::NotAVersion,
                },
                "current tag \"latest\" is not a version semver can read; left as written \
                 (replaceUnreadableTags: true would replace it)",
            ),
            (
                HoldReason::Unreadable {
                    current: "build-x".into(),
                    why: Unreadable::NoMatch {
                        pattern: r"^build-(\d+)$".into(),
                    },
                },
                "current tag \"build-x\" does not match the policy's pattern `^build-(\\d+)$`; \
                 left as written (replaceUnreadableTags: true would replace it)",
            ),
            (
                HoldReason::FollowedTagExcluded {
                    tag: "stable".into(),
                    why: Exclusion::NotAllowed,
                },
                "tag \"stable\" is filtered by allowTags",
            ),
            (
                HoldReason::FollowedTagMissing {
                    tag: "stable".into(),
                },
                "tag \"stable\" is not in the registry",
            ),
            (
                HoldReason::AboveBest {
                    current: "2.0.0".into(),
                    best: "1.9.0".into(),
                },
                "current tag \"2.0.0\" ranks above the best candidate \"1.9.0\"; not moving \
                 backwards (allowDowngrade: true would)",
            ),
            (
                HoldReason::TooYoung {
                    tag: "1.3.0".into(),
                    age: Some(12 * minute + Duration::from_secs(7)),
                    min_age: 30 * minute,
                },
                "newer tag 1.3.0 is 12m old, minAge 30m",
            ),
            (
                HoldReason::PassedOver {
                    held: Some(Box::new(HoldReason::NoTags)),
                    passed: PassedOver {
                        newest: Skipped {
                            tag: "1.4.0".into(),
                            reason: SkipReason::Unsigned,
                        },
                        more: 2,
                    },
                },
                "the registry has no tags; newer tag 1.4.0: not signed (no cosign signature \
                 found) (2 more skipped)",
            ),
        ];
        for (reason, words) in cases {
            assert_eq!(reason.to_string(), words, "{reason:?}");
        }
    }

    #[test]
    fn a_summary_counts_ages_as_they_are_shown() {
        let young = |secs| Exclusion::TooYoung {
            age: Some(Duration::from_secs(secs)),
            min_age: Duration::from_secs(1800),
        };
        // 720 s and 750 s both show as 12m; 30 s and 40 s are shown apart.
        let tallies = tally(&[young(720), young(750), young(30), young(40)]);
        let counts: Vec<usize> = tallies.iter().map(|t| t.count).collect();
        assert_eq!(counts, [2, 1, 1]);
    }

    #[test]
    fn a_tag_passed_over_in_tags_says_what_it_lacks() {
        let refused = Exclusion::Skipped {
            platforms: platforms(&["linux/arm64"]),
            reason: SkipReason::MissingPlatforms {
                missing: platforms(&["linux/arm64"]),
                offered: platforms(&["linux/amd64", "linux/s390x"]),
            },
        };
        assert_eq!(
            refused.to_string(),
            "no image for linux/arm64 (offers linux/amd64, linux/s390x)"
        );
        let unsigned = Exclusion::Skipped {
            platforms: platforms(&["linux/arm64"]),
            reason: SkipReason::Unsigned,
        };
        assert_eq!(
            unsigned.to_string(),
            "no image for linux/arm64 (not signed (no cosign signature found))"
        );
    }
}
