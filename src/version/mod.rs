//! Versions and version constraints: the vocabulary both policies (a `semver.range`) and tag
//! selection (ordering, families) speak. A leaf: it imports nothing of the crate, so `policy`
//! and `select` can both stand on it without importing each other.
//!
//! Reading container tags as versions, and telling pre-releases from variant families.
//!
//! Registries mix many lines of images under one repository: `1.25.3`, `1.25.3-alpine`,
//! `1.25-bookworm`, `1.26.0-rc.1`. semver would call every suffix a pre-release; for container
//! tags most suffixes name a variant (a base image, a flavour) that a file must never silently
//! leave. So a suffix is a pre-release only when it reads as one, and every other suffix, together
//! with the number of version parts, names a [`Family`]:
//!
//! - `1.2.3-rc.1`, `1.2.3-beta2`, `1.2.3rc1`, `2.0.0-beta.2`, `1.2.3-SNAPSHOT`: pre-releases of
//!   the plain `x.y.z` family (keywords `alpha`, `beta`, `rc`, `pre`, `preview`, `dev`,
//!   `snapshot`, any case, optionally followed by numbers with `.`, `-` or `_` separators).
//! - `1.2.3-rc.1-alpine`: a pre-release of the `x.y.z-alpine` family.
//! - PEP 440's `a` and `b` attached to the numbers (`3.8.0b1`, `3.8.0a2-alpine`; `rc` is a
//!   keyword already): pre-releases, as Renovate's docker versioning reads them. Pre-releases of
//!   one version order alphabetically (`a1` < `b1` < `b5` < `rc1`), as there; their numbers
//!   order as numbers (`rc2` < `rc10`), where Renovate compares strings.
//! - `1.25-bookworm`: family `x.y-bookworm`; `1.25.3-alpine3.19`: family `x.y.z-alpine3.19`. The
//!   suffix is compared literally, so a file on `alpine3.19` stays on `alpine3.19` builds: the
//!   base OS release is part of what the user pinned, as in Renovate's docker versioning.
//! - The number of parts is part of the family (as in Renovate): a file on the floating tag
//!   `1.25` moves to `1.27`, not to `1.27.3`; one on `16` moves to `17`.
//! - Not versions: `latest`, `stable`, `1.2.3.4`, `17.0.9_9-jdk` (use the regex strategy).
//!
//! Known limitation, documented rather than guessed at: suffixes that carry their own counters
//! (`1.25.3-debian-12-r4`, `1.2.3-1`) are distinct families per counter value; use the regex
//! strategy for such repositories.

mod constraint;

use std::fmt;

use semver::{Prerelease, Version};

pub use constraint::Constraint;

#[derive(Debug, thiserror::Error)]
pub enum VersionError {
    #[error("invalid version constraint {constraint:?}")]
    InvalidConstraint {
        constraint: String,
        #[source]
        reason: ConstraintReason,
    },
}

/// What is wrong in a constraint's text.
#[derive(Debug, thiserror::Error)]
pub enum ConstraintReason {
    #[error("the constraint is empty")]
    Empty,
    #[error("an alternative between `||` is empty")]
    EmptyAlternative,
    #[error("expected a version after {operator:?}, found {found:?}")]
    MissingVersion { operator: String, found: String },
    #[error(
        "{found:?} is neither a version nor an operator; ranges join comparisons with commas or \
         spaces (>=1.25, <2) and alternatives with ||"
    )]
    NotAnOperator { found: String },
    #[error("hyphen range {lower:?} - … has no upper version")]
    NoUpperVersion { lower: String },
    #[error("unexpected {found:?} after version {token:?}")]
    Unexpected { found: char, token: String },
    #[error("{token:?} is not a version")]
    NotAVersion {
        token: String,
        #[source]
        why: NotAVersion,
    },
}

/// Why one version in a constraint does not read as a version.
#[derive(Debug, thiserror::Error)]
pub enum NotAVersion {
    #[error("more than three parts")]
    TooManyParts,
    #[error("each part must be a number or x, X, *")]
    BadPart,
    #[error("number too large")]
    TooLarge,
    #[error("empty pre-release after '-'")]
    EmptyPrerelease,
    #[error(transparent)]
    Semver(#[from] semver::Error),
}

/// The variant line a tag belongs to: how many version parts it has, and its non-pre-release
/// suffix (empty for plain versions).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Family {
    /// 1 (`16`), 2 (`1.25`) or 3 (`1.25.3`).
    pub parts: u8,
    /// `alpine`, `slim-bookworm`, `windowsservercore-ltsc2022`, or empty.
    pub suffix: String,
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(["x", "x.y", "x.y.z"][usize::from(self.parts.clamp(1, 3)) - 1])?;
        if !self.suffix.is_empty() {
            write!(f, "-{}", self.suffix)?;
        }
        Ok(())
    }
}

/// A tag read as a version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagVersion {
    /// Missing parts are 0; `pre` holds the normalised pre-release (`rc.1` for `-RC1`), never the
    /// family suffix.
    pub version: Version,
    pub family: Family,
    pub v_prefix: bool,
}

const PRERELEASE_WORDS: [&str; 7] = ["alpha", "beta", "preview", "pre", "rc", "dev", "snapshot"];
/// PEP 440's alpha and beta, as Python images tag them (`3.8.0a2`, `3.8.0b1`).
const PEP440_WORDS: [&str; 2] = ["a", "b"];

impl TagVersion {
    /// Reads `tag` as a version, or `None` when it is not one.
    pub fn parse(tag: &str) -> Option<TagVersion> {
        let (v_prefix, s) = match tag.strip_prefix('v') {
            Some(rest) => (true, rest),
            None => (false, tag),
        };
        let mut numbers = Vec::with_capacity(3);
        let mut rest = s;
        loop {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            if digits == 0 {
                return None;
            }
            numbers.push(rest[..digits].parse::<u64>().ok()?);
            rest = &rest[digits..];
            let next_is_number =
                rest.starts_with('.') && rest[1..].starts_with(|c: char| c.is_ascii_digit());
            if numbers.len() == 3 || !next_is_number {
                break;
            }
            rest = &rest[1..];
        }
        let (pre, suffix) = split_suffix(rest)?;
        let mut version = Version::new(
            numbers[0],
            *numbers.get(1).unwrap_or(&0),
            *numbers.get(2).unwrap_or(&0),
        );
        version.pre = pre;
        Some(TagVersion {
            version,
            family: Family {
                parts: numbers.len() as u8,
                suffix,
            },
            v_prefix,
        })
    }

    pub fn is_prerelease(&self) -> bool {
        !self.version.pre.is_empty()
    }
}

/// Splits what follows the numbers into a pre-release and a family suffix; `None` when it is
/// neither (`.4` of `1.2.3.4`, `_9-jdk`).
fn split_suffix(rest: &str) -> Option<(Prerelease, String)> {
    if rest.is_empty() {
        return Some((Prerelease::EMPTY, String::new()));
    }
    if let Some(found) = prerelease(rest) {
        return Some(found);
    }
    let suffix = rest.strip_prefix('-')?;
    valid_suffix(suffix).then(|| (Prerelease::EMPTY, suffix.to_string()))
}

fn valid_suffix(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_alphanumeric())
        && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// `[-._]?WORD([-._]?NUMBER)*(-FAMILY)?`, case-insensitive, with the whole word required (so
/// `-predator` and `-devel` are families, not pre-releases).
fn prerelease(rest: &str) -> Option<(Prerelease, String)> {
    let body = rest.strip_prefix(['-', '.', '_']).unwrap_or(rest);
    let lower = body.to_ascii_lowercase();
    let attached = body.len() == rest.len();
    let word = PRERELEASE_WORDS
        .iter()
        .find(|w| lower.starts_with(*w))
        .or_else(|| {
            // PEP 440's short spellings, only attached to the numbers and with a number
            // (`3.8.0b1`), where Renovate's docker versioning reads a pre-release: `-b1` after
            // a hyphen is a variant there, and so here.
            PEP440_WORDS.iter().find(|w| {
                attached
                    && lower.starts_with(*w)
                    && lower[w.len()..].starts_with(|c: char| c.is_ascii_digit())
            })
        })?;
    let mut ids = vec![word.to_string()];
    let mut tail = &body[word.len()..];
    loop {
        let after_sep = tail.strip_prefix(['-', '.', '_']).unwrap_or(tail);
        let digits = after_sep.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            break;
        }
        ids.push(after_sep[..digits].parse::<u64>().ok()?.to_string());
        tail = &after_sep[digits..];
    }
    let suffix = match tail {
        "" => String::new(),
        t => {
            let s = t.strip_prefix('-')?;
            if !valid_suffix(s) {
                return None;
            }
            s.to_string()
        }
    };
    Some((Prerelease::new(&ids.join(".")).ok()?, suffix))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(tag: &str) -> Option<(String, String, String)> {
        TagVersion::parse(tag).map(|t| {
            let v = &t.version;
            (
                format!("{}.{}.{}", v.major, v.minor, v.patch),
                v.pre.to_string(),
                t.family.to_string(),
            )
        })
    }

    fn p(v: &str, pre: &str, family: &str) -> Option<(String, String, String)> {
        Some((v.to_string(), pre.to_string(), family.to_string()))
    }

    #[test]
    fn plain_and_partial_versions() {
        assert_eq!(parts("1.2.3"), p("1.2.3", "", "x.y.z"));
        assert_eq!(parts("v1.2.3"), p("1.2.3", "", "x.y.z"));
        assert_eq!(parts("1.2"), p("1.2.0", "", "x.y"));
        assert_eq!(parts("16"), p("16.0.0", "", "x"));
        assert!(TagVersion::parse("v1.2").unwrap().v_prefix);
    }

    #[test]
    fn prerelease_spellings() {
        assert_eq!(parts("1.2.3-rc1"), p("1.2.3", "rc.1", "x.y.z"));
        assert_eq!(parts("1.2.3-rc.1"), p("1.2.3", "rc.1", "x.y.z"));
        assert_eq!(parts("2.0.0-beta.2"), p("2.0.0", "beta.2", "x.y.z"));
        assert_eq!(parts("1.2.3-beta2"), p("1.2.3", "beta.2", "x.y.z"));
        assert_eq!(parts("1.2.3rc1"), p("1.2.3", "rc.1", "x.y.z"));
        assert_eq!(parts("1.2.3-RC.01"), p("1.2.3", "rc.1", "x.y.z"));
        assert_eq!(parts("1.2.3-alpha.1.2"), p("1.2.3", "alpha.1.2", "x.y.z"));
        assert_eq!(parts("1.2.3-SNAPSHOT"), p("1.2.3", "snapshot", "x.y.z"));
        assert_eq!(parts("1.2.3-dev"), p("1.2.3", "dev", "x.y.z"));
        assert_eq!(parts("1.2.3-pre"), p("1.2.3", "pre", "x.y.z"));
        assert_eq!(
            parts("1.2.3-rc.1-alpine"),
            p("1.2.3", "rc.1", "x.y.z-alpine")
        );
    }

    /// Renovate's docker versioning (lib/modules/versioning/docker/index.spec.ts): `isStable`
    /// is false for `3.7.0b1` and `3.8.0b1-alpine`; `isCompatible("3.8.0b1-alpine",
    /// "3.7.0-alpine")` and `isCompatible("3.7.0b1", "3.7.0")` are true, so they are of the
    /// family of those; "sorts unstable" orders `3.7.0b1 < 3.7.0b5 < 3.7.0 < 3.8.0 < 3.8.2`
    /// and `3.8.0b1-alpine < 3.8.0-alpine`. The issue's `3.8.0rc2-alpine` is a pre-release of
    /// 3.8.0 in the alpine family, above its `b1`.
    #[test]
    fn pep440_prereleases_as_renovate_reads_them() {
        assert_eq!(parts("3.7.0b1"), p("3.7.0", "b.1", "x.y.z"));
        assert_eq!(parts("3.8.0b1-alpine"), p("3.8.0", "b.1", "x.y.z-alpine"));
        assert_eq!(parts("3.8.0rc2-alpine"), p("3.8.0", "rc.2", "x.y.z-alpine"));
        assert_eq!(parts("3.8.0a2"), p("3.8.0", "a.2", "x.y.z"));
        // After a hyphen, a variant (Renovate: a suffix).
        assert_eq!(parts("3.8.0-b1"), p("3.8.0", "", "x.y.z-b1"));
        let order = |tags: &[&str]| {
            let mut v: Vec<TagVersion> =
                tags.iter().map(|t| TagVersion::parse(t).unwrap()).collect();
            v.sort_by(|a, b| a.version.cmp_precedence(&b.version));
            v.iter().map(|t| t.version.to_string()).collect::<Vec<_>>()
        };
        assert_eq!(
            order(&["3.8.2", "3.7.0", "3.7.0b5", "3.8.0", "3.7.0b1"]),
            ["3.7.0-b.1", "3.7.0-b.5", "3.7.0", "3.8.0", "3.8.2"]
        );
        assert_eq!(
            order(&[
                "3.8.0-alpine",
                "3.8.0rc2-alpine",
                "3.8.0b1-alpine",
                "3.8.0a1-alpine"
            ]),
            ["3.8.0-a.1", "3.8.0-b.1", "3.8.0-rc.2", "3.8.0"]
        );
        assert!(TagVersion::parse("3.8.0b1-alpine").unwrap().is_prerelease());
        assert!(!TagVersion::parse("3.8.0-alpine").unwrap().is_prerelease());
    }

    #[test]
    fn variant_families() {
        assert_eq!(parts("1.2.3-alpine"), p("1.2.3", "", "x.y.z-alpine"));
        assert_eq!(parts("1.25-bookworm"), p("1.25.0", "", "x.y-bookworm"));
        assert_eq!(
            parts("1.25.3-alpine3.19"),
            p("1.25.3", "", "x.y.z-alpine3.19")
        );
        assert_eq!(
            parts("3.12.1-slim-bookworm"),
            p("3.12.1", "", "x.y.z-slim-bookworm")
        );
        assert_eq!(
            parts("8.0.1-windowsservercore-ltsc2022"),
            p("8.0.1", "", "x.y.z-windowsservercore-ltsc2022")
        );
        // Whole words only: these merely start like a pre-release keyword.
        assert_eq!(parts("1.2.3-predator"), p("1.2.3", "", "x.y.z-predator"));
        assert_eq!(parts("1.2.3-devel"), p("1.2.3", "", "x.y.z-devel"));
        assert_eq!(
            parts("1.2.3-alpine-rc1"),
            p("1.2.3", "", "x.y.z-alpine-rc1")
        );
    }

    #[test]
    fn not_versions() {
        for tag in [
            "latest",
            "stable",
            "",
            "v",
            "1.2.3.4",
            "17.0.9_9-jdk",
            "1.2.3-",
            "1.2.3-rc.1-",
            "abc1.2",
            "1.2.3+b",
        ] {
            assert_eq!(TagVersion::parse(tag), None, "{tag}");
        }
    }
}
