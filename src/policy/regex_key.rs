//! Which part of a tag a `regex` policy orders by, and in which order: decided from the
//! pattern as the regex engine parses it (its HIR), never guessed.
//!
//! The key is the group `sortBy` names (by name, or by number as Flux's `$1`); without
//! `sortBy`, the only capture group, or the whole tag when there is none. Several groups and no
//! `sortBy` is refused: any of them could be meant. Without `order`, the key is read as a
//! number only when the pattern lets it hold nothing but digits; any other key needs an
//! explicit order, since text order moves `main-118` to `main-99`. An explicit `numerical`
//! on a key that can never be all digits would exclude every tag, and is refused too.
//!
//! Used by policy validation and by `tagpilot tags`' own flags alike, so that `check`, `plan`
//! and `tags` refuse the same settings.

use regex_syntax::hir::{Class, Hir, HirKind};

use super::{RegexOrder, ValueError};

/// The resolved sort key of a regex policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegexKey {
    /// The capture group the key is; 0 is the whole match.
    pub group: usize,
    pub order: RegexOrder,
    /// `order` was not written: read from the pattern (its key holds only digits).
    pub implied: bool,
}

/// The key and order of `pattern` (already compiled as `compiled`) under `sortBy` and
/// `order` as written, or why they cannot be decided.
pub fn resolve(
    pattern: &str,
    compiled: &regex::Regex,
    sort_by: Option<&str>,
    order: Option<RegexOrder>,
) -> Result<RegexKey, ValueError> {
    let groups = compiled.captures_len() - 1;
    let group = match sort_by {
        Some(written) => named_or_numbered(compiled, written)?,
        None if groups == 0 => 0,
        None if groups == 1 => 1,
        None => {
            return Err(ValueError::SeveralGroups {
                groups: group_names(compiled),
            });
        }
    };
    // The pattern compiled, so it parses; a parser that disagrees is no reason to guess.
    let hir = regex_syntax::Parser::new()
        .parse(pattern)
        .map_err(|e| ValueError::Syntax(Box::new(e)))?;
    let key_hir = match group {
        0 => Some(&hir),
        n => find_group(&hir, n),
    };
    let (only_digits, may_be_digits) = match key_hir {
        Some(h) => (only_digits(h), digits(h).nonempty),
        None => (false, true),
    };
    let key = describe(compiled, group);
    match order {
        Some(RegexOrder::Numerical) if !may_be_digits => Err(ValueError::NeverANumber { key }),
        Some(order) => Ok(RegexKey {
            group,
            order,
            implied: false,
        }),
        None if only_digits => Ok(RegexKey {
            group,
            order: RegexOrder::Numerical,
            implied: true,
        }),
        None => Err(ValueError::AmbiguousOrder { key }),
    }
}

/// A regex error in one line with where it is in the pattern: `at 7 ("(?P<ts>\d+$"): unclosed
/// group`. The regex crate's own text spans several lines with a caret diagram.
pub(crate) fn position(pattern: &str, error: &regex::Error) -> String {
    let why = error
        .to_string()
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or_default()
        .trim()
        .trim_start_matches("error: ")
        .to_string();
    let span = match regex_syntax::Parser::new().parse(pattern) {
        Err(regex_syntax::Error::Parse(e)) => Some(*e.span()),
        Err(regex_syntax::Error::Translate(e)) => Some(*e.span()),
        _ => None,
    };
    match span {
        Some(span) => {
            let column = pattern[..span.start.offset].chars().count() + 1;
            format!(
                "{why}, at character {column}:\n    {pattern}\n    {}^",
                " ".repeat(column - 1)
            )
        }
        None => why,
    }
}

/// How messages name the key: `group "ts"`, `group 1`, or the whole tag.
pub fn describe(compiled: &regex::Regex, group: usize) -> String {
    match (group, compiled.capture_names().nth(group).flatten()) {
        (0, _) => "the whole tag (the pattern has no capture group)".to_string(),
        (_, Some(name)) => format!("group {name:?}"),
        (n, None) => format!("group {n}"),
    }
}

/// The group `written` names: a group's name, or a number from 1 to the number of groups.
fn named_or_numbered(compiled: &regex::Regex, written: &str) -> Result<usize, ValueError> {
    if let Some(i) = compiled.capture_names().position(|n| n == Some(written)) {
        return Ok(i);
    }
    let groups = compiled.captures_len() - 1;
    if let Ok(n) = written.parse::<usize>()
        && (1..=groups).contains(&n)
    {
        return Ok(n);
    }
    Err(ValueError::UnknownGroup {
        group: written.to_string(),
        groups: group_names(compiled),
    })
}

/// Each capture group as `sortBy` may name it: its name, else its number.
fn group_names(compiled: &regex::Regex) -> Vec<String> {
    compiled
        .capture_names()
        .enumerate()
        .skip(1)
        .map(|(i, n)| n.map_or_else(|| i.to_string(), str::to_string))
        .collect()
}

fn find_group(hir: &Hir, index: usize) -> Option<&Hir> {
    match hir.kind() {
        HirKind::Capture(c) if c.index as usize == index => Some(&*c.sub),
        HirKind::Capture(c) => find_group(&c.sub, index),
        HirKind::Repetition(r) => find_group(&r.sub, index),
        HirKind::Concat(hs) | HirKind::Alternation(hs) => {
            hs.iter().find_map(|h| find_group(h, index))
        }
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => None,
    }
}

/// A character a tag may hold (`[A-Za-z0-9_.-]`); only these matter, since a pattern is only
/// ever matched against tags.
fn in_tag(c: u32) -> bool {
    char::from_u32(c).is_some_and(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

fn is_digit(c: u32) -> bool {
    (u32::from(b'0')..=u32::from(b'9')).contains(&c)
}

/// Each `(start, end)` range of a class, as code points.
fn ranges(class: &Class) -> Vec<(u32, u32)> {
    match class {
        Class::Unicode(u) => u
            .ranges()
            .iter()
            .map(|r| (r.start() as u32, r.end() as u32))
            .collect(),
        Class::Bytes(b) => b
            .ranges()
            .iter()
            .map(|r| (u32::from(r.start()), u32::from(r.end())))
            .collect(),
    }
}

/// Whether every tag text `hir` can match is made of ASCII digits (`\d` counts: its other
/// digits cannot be in a tag).
fn only_digits(hir: &Hir) -> bool {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => true,
        HirKind::Literal(l) => l.0.iter().all(u8::is_ascii_digit),
        HirKind::Class(c) => ranges(c)
            .into_iter()
            .all(|(a, b)| (a..=b.min(0x7f)).all(|c| !in_tag(c) || is_digit(c))),
        HirKind::Repetition(r) => r.max == Some(0) || only_digits(&r.sub),
        HirKind::Capture(c) => only_digits(&c.sub),
        HirKind::Concat(hs) | HirKind::Alternation(hs) => hs.iter().all(only_digits),
    }
}

/// What `hir` can match among digit strings.
#[derive(Clone, Copy)]
struct Digits {
    /// The empty string.
    empty: bool,
    /// Some non-empty string of ASCII digits.
    nonempty: bool,
}

fn digits(hir: &Hir) -> Digits {
    match hir.kind() {
        HirKind::Empty | HirKind::Look(_) => Digits {
            empty: true,
            nonempty: false,
        },
        HirKind::Literal(l) => Digits {
            empty: l.0.is_empty(),
            nonempty: !l.0.is_empty() && l.0.iter().all(u8::is_ascii_digit),
        },
        HirKind::Class(c) => Digits {
            empty: false,
            nonempty: ranges(c)
                .into_iter()
                .any(|(a, b)| a <= u32::from(b'9') && b >= u32::from(b'0')),
        },
        HirKind::Repetition(r) => {
            let sub = digits(&r.sub);
            Digits {
                empty: r.min == 0 || sub.empty,
                nonempty: sub.nonempty && r.max != Some(0),
            }
        }
        HirKind::Capture(c) => digits(&c.sub),
        HirKind::Concat(hs) => {
            let parts: Vec<Digits> = hs.iter().map(digits).collect();
            Digits {
                empty: parts.iter().all(|d| d.empty),
                nonempty: parts.iter().all(|d| d.empty || d.nonempty)
                    && parts.iter().any(|d| d.nonempty),
            }
        }
        HirKind::Alternation(hs) => {
            let parts: Vec<Digits> = hs.iter().map(digits).collect();
            Digits {
                empty: parts.iter().any(|d| d.empty),
                nonempty: parts.iter().any(|d| d.nonempty),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(
        pattern: &str,
        sort_by: Option<&str>,
        order: Option<RegexOrder>,
    ) -> Result<RegexKey, String> {
        let compiled = regex::Regex::new(pattern).unwrap();
        resolve(pattern, &compiled, sort_by, order).map_err(|e| e.to_string())
    }

    /// Issue 28: `main-(\d+)-[0-9a-f]+` without `sortBy` sorted the whole tag as text, moving
    /// `main-118-…` to `main-99-…`. The one group is the key, and it holds only digits.
    #[test]
    fn the_only_group_is_the_key_and_digits_are_numerical() {
        let k = key(r"main-(\d+)-[0-9a-f]+", None, None).unwrap();
        assert_eq!(
            (k.group, k.order, k.implied),
            (1, RegexOrder::Numerical, true)
        );
        let k = key(r"^b-(?P<n>[0-9]{3,})$", None, None).unwrap();
        assert_eq!((k.group, k.order), (1, RegexOrder::Numerical));
        let k = key(r"^\d+$", None, None).unwrap();
        assert_eq!((k.group, k.order), (0, RegexOrder::Numerical));
        let k = key(r"^(?:v|r)-(\d+|\d+0)(?:-rc)?$", None, None).unwrap();
        assert_eq!(k.order, RegexOrder::Numerical);
    }

    #[test]
    fn a_key_that_can_hold_more_than_digits_needs_an_order() {
        for (pattern, what) in [
            (r"main-([0-9a-f]+)", "group 1"),
            (r"^release-(?P<v>\d+\.\d+)$", "group \"v\""),
            (r"^main-\d+$", "the whole tag"),
            (r"^(?i)b-(\d+x?)$", "group 1"),
            (r"^(.+)$", "group 1"),
        ] {
            let err = key(pattern, None, None).unwrap_err();
            assert!(
                err.contains(what) && err.contains("set order:"),
                "{pattern}: {err}"
            );
        }
        let k = key(r"^release-(?P<v>\d+\.\d+)$", None, Some(RegexOrder::Semver)).unwrap();
        assert_eq!(
            (k.group, k.order, k.implied),
            (1, RegexOrder::Semver, false)
        );
        let k = key(r"^main-\d+$", None, Some(RegexOrder::Alphabetical)).unwrap();
        assert_eq!(k.group, 0);
    }

    #[test]
    fn several_groups_need_sort_by_and_sort_by_takes_a_name_or_a_number() {
        let err = key(r"^(?P<sha>[0-9a-f]{7})-(\d+)$", None, None).unwrap_err();
        assert!(err.contains("sha, 2") && err.contains("sortBy"), "{err}");
        let k = key(r"^(?P<sha>[0-9a-f]{7})-(\d+)$", Some("2"), None).unwrap();
        assert_eq!((k.group, k.order), (2, RegexOrder::Numerical));
        let k = key(r"^(?P<sha>[0-9a-f]{7})-(?P<ts>\d+)$", Some("ts"), None).unwrap();
        assert_eq!(k.group, 2);
        let err = key(r"^(?P<sha>[0-9a-f]{7})-(\d+)$", Some("3"), None).unwrap_err();
        assert!(err.contains("sha, 2"), "{err}");
        assert!(!err.contains("(?P<3>"), "{err}");
        let err = key(r"^main-\d+$", Some("1"), None).unwrap_err();
        assert!(err.contains("no capture group"), "{err}");
        assert!(!err.contains("(?P<1>"), "{err}");
    }

    /// Issue 28: `order: numerical` on a key that is never a number excluded every tag, and
    /// `plan` then said the registry had none.
    #[test]
    fn numerical_on_a_key_that_is_never_digits_is_refused() {
        let err = key(r"^main-[0-9a-f]+$", None, Some(RegexOrder::Numerical)).unwrap_err();
        assert!(err.contains("never only digits"), "{err}");
        assert!(key(r"^(.+)$", None, Some(RegexOrder::Numerical)).is_ok());
        assert!(key(r"^v?(\d+)$", None, Some(RegexOrder::Numerical)).is_ok());
    }
}
