//! Version constraints in the syntax of Go's Masterminds semver (v3), which Argo CD Image Updater
//! uses: users' existing `image-list` annotations carry these strings, so a drop-in must read
//! them exactly as Masterminds does, not as Cargo or npm would.
//!
//! - `,` or whitespace between comparisons means AND, `||` means OR.
//! - Operators `=` (or none), `!=`, `>`, `<`, `>=` (`=>`), `<=` (`=<`), `~` (`~>`), `^`.
//! - Partial versions and wildcards: `1.2` is `1.2.x`; `1.x`, `1.*`, `*`. With `=` or no
//!   operator a partial version matches the whole prefix (`1.2` = `>=1.2.0, <1.3.0`); `>1.2`
//!   means `>=1.3.0`; `<=1.2` means `<1.3.0`; `<1.2` and `>=1.2` mean `<1.2.0` / `>=1.2.0`.
//! - `~1.2.3` = `>=1.2.3, <1.3.0`; `~1.2` = `>=1.2.0, <1.3.0`; `~1` = `>=1.0.0, <2.0.0`.
//! - `^1.2.3` = `>=1.2.3, <2.0.0`; `^0.2.3` = `>=0.2.3, <0.3.0`; `^0.0.3` = `>=0.0.3, <0.0.4`;
//!   `^0.0` = `<0.1.0`; `^0` = `<1.0.0`.
//! - Hyphen ranges `1.2 - 1.4.5` = `>=1.2, <=1.4.5` (spaces around `-` required).
//! - A `v` prefix is allowed. A pre-release version satisfies a comparison only when that
//!   comparison's own version has a pre-release (`>=1.2.3-0`), unless the caller includes
//!   pre-releases (the policy's `prerelease: true`).
//!
//! Versions are compared by `semver::Version` precedence (build metadata ignored), never by hand.

use std::cmp::Ordering;
use std::fmt;

use semver::{BuildMetadata, Prerelease, Version};

use super::{ConstraintReason, NotAVersion, VersionError};

/// A parsed constraint; [`fmt::Display`] gives it back as written.
#[derive(Debug, Clone)]
pub struct Constraint {
    raw: String,
    /// OR of ANDs.
    alternatives: Vec<Vec<Comparator>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Gt,
    Lt,
    Ge,
    Le,
    Tilde,
    Caret,
}

/// Which part of the comparison's version was a wildcard or missing; everything after it is too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dirty {
    None,
    Patch,
    Minor,
    Major,
}

#[derive(Debug, Clone)]
struct Comparator {
    op: Op,
    /// Missing and wildcard parts are 0.
    base: Version,
    dirty: Dirty,
}

impl Constraint {
    pub fn parse(s: &str) -> Result<Constraint, VersionError> {
        let err = |reason: ConstraintReason| VersionError::InvalidConstraint {
            constraint: s.to_string(),
            reason,
        };
        if s.trim().is_empty() {
            return Err(err(ConstraintReason::Empty));
        }
        let mut alternatives = Vec::new();
        for alternative in s.split("||") {
            let comparators = parse_and(alternative).map_err(err)?;
            if comparators.is_empty() {
                return Err(err(ConstraintReason::EmptyAlternative));
            }
            alternatives.push(comparators);
        }
        Ok(Constraint {
            raw: s.to_string(),
            alternatives,
        })
    }

    /// The constraint as written.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// Masterminds' `Check`: pre-releases only where a comparison names one.
    pub fn matches(&self, v: &Version) -> bool {
        self.matches_with(v, false)
    }

    /// Whether a comparison names a pre-release (`2.x-0`, `>=1.2.3-rc.1`): Masterminds then
    /// lets pre-releases through that comparison, which is how Image Updater users ask for them.
    pub fn names_prerelease(&self) -> bool {
        self.alternatives
            .iter()
            .flatten()
            .any(|c| !c.base.pre.is_empty())
    }

    /// [`Constraint::matches`], optionally letting pre-releases be compared like releases
    /// (Masterminds' `IncludePrerelease`).
    pub fn matches_with(&self, v: &Version, include_prerelease: bool) -> bool {
        self.alternatives
            .iter()
            .any(|all| all.iter().all(|c| c.matches(v, include_prerelease)))
    }
}

impl Constraint {
    /// Whether any version at all meets the constraint (`>=2, <1` meets none), pre-releases
    /// counted when `include_prerelease`. Every comparison's answer changes only at its own
    /// version or the next patch, minor or major after it, so the least version an AND group
    /// admits is 0.0.0 or one of those: trying them decides it, without a registry.
    pub fn admits_some_version(&self, include_prerelease: bool) -> bool {
        let mut candidates = vec![Version::new(0, 0, 0)];
        for c in self.alternatives.iter().flatten() {
            let b = &c.base;
            let mut base = b.clone();
            base.build = BuildMetadata::EMPTY;
            candidates.push(base);
            candidates.extend([
                Version::new(b.major, b.minor, b.patch),
                Version::new(b.major, b.minor, b.patch.saturating_add(1)),
                Version::new(b.major, b.minor.saturating_add(1), 0),
                Version::new(b.major.saturating_add(1), 0, 0),
            ]);
        }
        if include_prerelease && let Ok(zero) = Prerelease::new("0") {
            let pre: Vec<Version> = candidates
                .iter()
                .filter(|v| v.pre.is_empty())
                .map(|v| Version {
                    pre: zero.clone(),
                    ..v.clone()
                })
                .collect();
            candidates.extend(pre);
        }
        candidates
            .iter()
            .any(|v| self.matches_with(v, include_prerelease))
    }
}

impl std::str::FromStr for Constraint {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Constraint::parse(s)
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

impl Comparator {
    fn matches(&self, v: &Version, include_prerelease: bool) -> bool {
        // Masterminds skips the pre-release gate only for exact `=` / `!=` comparisons.
        let gated = !(matches!(self.op, Op::Eq | Op::Ne) && self.dirty == Dirty::None);
        if gated && !include_prerelease && !v.pre.is_empty() && self.base.pre.is_empty() {
            return false;
        }
        let b = &self.base;
        let ord = v.cmp_precedence(b);
        match (self.op, self.dirty) {
            (Op::Eq, Dirty::None) => ord == Ordering::Equal,
            (Op::Eq, _) | (Op::Tilde, _) => self.tilde(v, ord),
            (Op::Ne, Dirty::None) => ord != Ordering::Equal,
            (Op::Ne, Dirty::Major) => false,
            (Op::Ne, Dirty::Minor) => v.major != b.major,
            (Op::Ne, Dirty::Patch) => v.major != b.major || v.minor != b.minor,
            (Op::Gt, Dirty::None | Dirty::Major) => ord == Ordering::Greater,
            (Op::Gt, Dirty::Minor) => v.major > b.major,
            (Op::Gt, Dirty::Patch) => {
                v.major > b.major || (v.major == b.major && v.minor > b.minor)
            }
            (Op::Lt, _) => ord == Ordering::Less,
            (Op::Ge, _) => ord != Ordering::Less,
            (Op::Le, Dirty::None) => ord != Ordering::Greater,
            (Op::Le, Dirty::Major) => true,
            (Op::Le, Dirty::Minor) => v.major <= b.major,
            (Op::Le, Dirty::Patch) => {
                v.major < b.major || (v.major == b.major && v.minor <= b.minor)
            }
            (Op::Caret, _) => self.caret(v, ord),
        }
    }

    fn tilde(&self, v: &Version, ord: Ordering) -> bool {
        let b = &self.base;
        if ord == Ordering::Less {
            return false;
        }
        // `*`, `~*` and `~0.0.0` accept everything.
        if b.major == 0
            && b.minor == 0
            && b.patch == 0
            && matches!(self.dirty, Dirty::None | Dirty::Major)
        {
            return true;
        }
        v.major == b.major && (self.dirty == Dirty::Minor || v.minor == b.minor)
    }

    fn caret(&self, v: &Version, ord: Ordering) -> bool {
        let b = &self.base;
        if self.dirty == Dirty::Major {
            return true;
        }
        if ord == Ordering::Less {
            return false;
        }
        if b.major > 0 || self.dirty == Dirty::Minor {
            return v.major == b.major;
        }
        if v.major > 0 {
            return false;
        }
        if b.minor > 0 || self.dirty == Dirty::Patch {
            return v.minor == b.minor;
        }
        v.minor == 0 && v.patch == b.patch
    }
}

const OPERATORS: [(&str, Op); 12] = [
    ("!=", Op::Ne),
    (">=", Op::Ge),
    ("=>", Op::Ge),
    ("<=", Op::Le),
    ("=<", Op::Le),
    ("~>", Op::Tilde),
    (">", Op::Gt),
    ("<", Op::Lt),
    ("=", Op::Eq),
    ("~", Op::Tilde),
    ("^", Op::Caret),
    ("", Op::Eq),
];

/// One AND group: comparisons separated by commas and/or whitespace, or a hyphen range.
fn parse_and(s: &str) -> Result<Vec<Comparator>, ConstraintReason> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        rest = rest.trim_start_matches(|c: char| c.is_whitespace() || c == ',');
        if rest.is_empty() {
            return Ok(out);
        }
        let (op_text, op) = OPERATORS
            .iter()
            .find(|(text, _)| rest.starts_with(text))
            .copied()
            .unwrap_or(("", Op::Eq));
        rest = rest[op_text.len()..].trim_start();
        let (token, after) = take_version(rest);
        if token.is_empty() && op_text.is_empty() {
            // `&&`, `and`, `;`: a way of joining comparisons that Masterminds does not have.
            let found = rest.split_whitespace().next().unwrap_or_default();
            return Err(ConstraintReason::NotAnOperator {
                found: found.to_string(),
            });
        }
        if token.is_empty() {
            let found = rest.split_whitespace().next().unwrap_or("end of input");
            return Err(ConstraintReason::MissingVersion {
                operator: op_text.to_string(),
                found: found.to_string(),
            });
        }
        let (base, dirty) = parse_partial(token)?;
        rest = after;
        // `A - B` (spaces required, bare versions only) is `>=A, <=B`.
        if op_text.is_empty() {
            let trimmed = rest.trim_start();
            if trimmed.len() < rest.len()
                && trimmed.starts_with('-')
                && trimmed[1..].starts_with(char::is_whitespace)
            {
                let (upper, after_upper) = take_version(trimmed[1..].trim_start());
                if upper.is_empty() {
                    return Err(ConstraintReason::NoUpperVersion {
                        lower: token.to_string(),
                    });
                }
                let (upper_base, upper_dirty) = parse_partial(upper)?;
                out.push(Comparator {
                    op: Op::Ge,
                    base,
                    dirty,
                });
                out.push(Comparator {
                    op: Op::Le,
                    base: upper_base,
                    dirty: upper_dirty,
                });
                rest = after_upper;
                continue;
            }
        }
        if !(rest.is_empty() || rest.starts_with(|c: char| c.is_whitespace() || c == ',')) {
            return Err(ConstraintReason::Unexpected {
                found: rest.chars().next().unwrap_or(' '),
                token: token.to_string(),
            });
        }
        out.push(Comparator { op, base, dirty });
    }
}

fn take_version(s: &str) -> (&str, &str) {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || ".*+-".contains(c)))
        .unwrap_or(s.len());
    s.split_at(end)
}

/// `v?N(.N(.N)?)?(-pre)?(+build)?` where each N may be `x`, `X` or `*`.
fn parse_partial(token: &str) -> Result<(Version, Dirty), ConstraintReason> {
    let bad = |why: NotAVersion| ConstraintReason::NotAVersion {
        token: token.to_string(),
        why,
    };
    let body = token.strip_prefix('v').unwrap_or(token);
    let (numbers, pre, build) = {
        let numbers_end = body.find(['-', '+']).unwrap_or(body.len());
        let (numbers, tail) = body.split_at(numbers_end);
        let (pre, build) = match tail.strip_prefix('-') {
            Some(t) => match t.split_once('+') {
                Some((p, b)) => (p, Some(b)),
                None => (t, None),
            },
            None => ("", tail.strip_prefix('+')),
        };
        (numbers, pre, build)
    };
    let parts: Vec<&str> = numbers.split('.').collect();
    if parts.len() > 3 {
        return Err(bad(NotAVersion::TooManyParts));
    }
    let mut values = [0u64; 3];
    let mut dirty = None;
    for (i, part) in parts.iter().enumerate() {
        if matches!(*part, "x" | "X" | "*") {
            dirty.get_or_insert(i);
            continue;
        }
        if part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad(NotAVersion::BadPart));
        }
        // As in Masterminds, once a part is a wildcard the rest are ignored (`1.x.3` is `1.x`).
        if dirty.is_none() {
            values[i] = part.parse().map_err(|_| bad(NotAVersion::TooLarge))?;
        }
    }
    let dirty = match dirty.unwrap_or(parts.len()) {
        0 => Dirty::Major,
        1 => Dirty::Minor,
        2 => Dirty::Patch,
        _ => Dirty::None,
    };
    let mut version = Version::new(values[0], values[1], values[2]);
    if body.len() > numbers.len() && body[numbers.len()..].starts_with('-') {
        if pre.is_empty() {
            return Err(bad(NotAVersion::EmptyPrerelease));
        }
        version.pre = Prerelease::new(pre).map_err(|e| bad(NotAVersion::Semver(e)))?;
    }
    if let Some(b) = build {
        version.build = BuildMetadata::new(b).map_err(|e| bad(NotAVersion::Semver(e)))?;
    }
    Ok((version, dirty))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(constraint: &str, version: &str) -> bool {
        let c = Constraint::parse(constraint).unwrap_or_else(|e| panic!("{constraint}: {e}"));
        let v = Version::parse(version).unwrap();
        c.matches(&v)
    }

    /// Issue 28: a range no version can meet is found offline, whatever its spelling.
    #[test]
    fn a_range_that_admits_no_version_is_known_without_tags() {
        for none in [
            ">=2, <1",
            ">2.0.0 <2.0.1",
            "<0.0.0",
            "~1.2 >=1.3",
            "1.x !=1.x",
            "^2 <2",
        ] {
            let c = Constraint::parse(none).unwrap();
            assert!(!c.admits_some_version(false), "{none}");
        }
        for some in [
            ">=1.2, <2",
            "~1.27",
            "^0.0.3",
            "!=1.0.0",
            ">1.2.0 <1.3",
            "<1.0.0-rc.1",
            "*",
            ">=2, <1 || 3.x",
            ">1.0.0 !=1.0.1 <1.0.3",
        ] {
            let c = Constraint::parse(some).unwrap();
            assert!(c.admits_some_version(false), "{some}");
        }
        // Only a pre-release lies between: met when the policy takes pre-releases.
        let c = Constraint::parse(">2.0.0 <2.0.1").unwrap();
        assert!(c.admits_some_version(true));
    }

    /// Issue 28: `&&` said `expected a version after ""`.
    #[test]
    fn a_joiner_that_is_no_operator_is_named() {
        let err = Constraint::parse(">= 1.25 && < 2").unwrap_err();
        let text = crate::error_chain::chain(&err);
        assert!(
            text.contains("\"&&\" is neither a version nor an operator"),
            "{text}"
        );
        assert!(text.contains("commas or spaces"), "{text}");
    }

    /// Examples from the Masterminds README and its constraint tests.
    #[test]
    fn masterminds_examples() {
        let cases: &[(&str, &str, bool)] = &[
            ("=2.0.0", "1.2.3", false),
            ("=2.0.0", "2.0.0", true),
            ("4.1", "4.1.0", true),
            ("4.1", "4.1.9", true),
            ("4.1", "4.2.0", false),
            ("!=4.1.0", "4.1.0", false),
            ("!=4.1.0", "4.1.1", true),
            ("!=4.x", "5.1.0", true),
            ("!=4.x", "4.1.0", false),
            ("!=4.1.x", "4.2.0", true),
            ("!=4.1.x", "4.1.2", false),
            (">1.1", "4.1.0", true),
            (">1.1", "1.1.9", false),
            (">1.1", "1.2.0", true),
            (">11", "11.1.0", false),
            (">11", "12.0.0", true),
            (">0", "0.1.0", false),
            ("<1.1", "1.0.9", true),
            ("<1.1", "1.1.0", false),
            ("<=1.1", "1.1.1", true),
            ("<=1.1", "1.2.0", false),
            ("<=1.1.x", "1.1.9", true),
            (">=1.1", "1.1.0", true),
            (">=1.1", "1.0.9", false),
            ("=>1.1", "1.1.0", true),
            ("=<1.1", "1.1.5", true),
            ("*", "4.1.0", true),
            ("1.x", "1.9.9", true),
            ("1.x", "2.0.0", false),
            ("1.*", "1.0.0", true),
            ("1.2.x", "1.2.7", true),
            ("1.2.x", "1.3.0", false),
            (">= 1.2.x", "1.2.0", true),
            ("<= 2.x", "2.9.9", true),
            ("<= 2.x", "3.0.0", false),
            ("~1.2.3", "1.2.3", true),
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            ("~1.2.3", "1.2.2", false),
            ("~1", "1.9.0", true),
            ("~1", "2.0.0", false),
            ("~2.3", "2.3.5", true),
            ("~2.3", "2.4.0", false),
            ("~1.x", "1.5.0", true),
            ("~1.26", "1.26.3", true),
            ("~1.26", "1.27.0", false),
            ("~0", "0.9.0", true),
            ("~0", "1.0.0", false),
            ("~>1.2", "1.2.5", true),
            ("^1.2.3", "1.8.0", true),
            ("^1.2.3", "2.0.0", false),
            ("^1.2.3", "1.2.2", false),
            ("^1.2", "1.2.0", true),
            ("^1.2.x", "1.9.0", true),
            ("^2.x", "2.1.0", true),
            ("^2.x", "3.0.0", false),
            ("^1.0", "1.99.0", true),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            ("^0.2", "0.2.0", true),
            ("^0.2", "0.3.0", false),
            ("^0.0.3", "0.0.3", true),
            ("^0.0.3", "0.0.4", false),
            ("^0.0", "0.0.9", true),
            ("^0.0", "0.1.0", false),
            ("^0", "0.9.9", true),
            ("^0", "1.0.0", false),
            ("^*", "7.0.0", true),
            ("v1.2.3", "1.2.3", true),
            ("^v1.2", "1.4.0", true),
        ];
        for (c, v, want) in cases {
            assert_eq!(check(c, v), *want, "{c} vs {v}");
        }
    }

    #[test]
    fn and_or_and_hyphen_ranges() {
        assert!(check(">=1.2.0, <2.0.0", "1.9.9"));
        assert!(!check(">=1.2.0, <2.0.0", "2.0.0"));
        assert!(check(">=1.2 <2.0", "1.5.0"));
        assert!(!check(">=1.2 <2.0", "2.0.0"));
        assert!(check(">= 1.2, < 3.0.0 || >= 4.2.3", "4.2.3"));
        assert!(!check(">= 1.2, < 3.0.0 || >= 4.2.3", "3.5.0"));
        assert!(check("1.2 - 1.4.5", "1.4.5"));
        assert!(!check("1.2 - 1.4.5", "1.4.6"));
        assert!(check("1.2 - 1.4", "1.4.9"));
        assert!(!check("1.2 - 1.4", "1.5.0"));
        assert!(!check("1.2 - 1.4", "1.1.9"));
        assert!(check("2.3.4 - 4.5", "4.5.2"));
        assert!(check("1.2 - 1.4 || 3.x", "3.1.0"));
    }

    #[test]
    fn prereleases_only_where_asked_for() {
        assert!(!check(">=1.2.3", "1.3.0-beta.1"));
        assert!(check(">=1.2.3-0", "1.3.0-beta.1"));
        assert!(!check("*", "1.0.0-rc.1"));
        assert!(!check("^1.0", "1.5.0-rc.1"));
        let c = Constraint::parse("^1.0").unwrap();
        assert!(c.matches_with(&Version::parse("1.5.0-rc.1").unwrap(), true));
        // The caret's upper bound is the major version itself, pre-releases of 2.0.0 included.
        assert!(!c.matches_with(&Version::parse("2.0.0-rc.1").unwrap(), true));
        let lt = Constraint::parse("<2.0.0").unwrap();
        assert!(lt.matches_with(&Version::parse("2.0.0-rc.1").unwrap(), true));
    }

    #[test]
    fn rejects_garbage_with_the_constraint_in_the_message() {
        for bad in [
            "",
            "  ",
            ">=",
            "1.2.3.4",
            ">=1.2 ||",
            "abc",
            ">=1.2, <<2",
            "1.2 -",
            "~>",
            "1.2.3-",
            ">=1.2.3-01",
        ] {
            let err = Constraint::parse(bad).expect_err(bad).to_string();
            assert!(err.contains(&format!("{bad:?}")), "{err}");
        }
        assert_eq!(Constraint::parse(" >=1.0 ").unwrap().to_string(), " >=1.0 ");
    }
}
