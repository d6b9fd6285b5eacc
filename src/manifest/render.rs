//! Writing a new value into a scalar in the scalar's own quoting style.
//!
//! The rule for plain scalars: a plain scalar stays plain when the new text is safe to write
//! plain (no `: `, ` #`, leading indicator, surrounding spaces, line break, or flow indicator
//! inside a flow collection) and reads as a string. A new value that would read as a number,
//! bool, null or timestamp (under YAML 1.1 or 1.2, since Helm and kubectl use YAML 1.1
//! resolvers) is double-quoted: tag `1.10` written plain would become the float `1.1`. This holds
//! even when the old plain text already read as a number (`tag: 1.9`): an image tag is a string,
//! and leaving `1.10` plain would pull `1.1`. An explicitly tagged scalar (`!!str 1.2`) stays
//! plain because its tag decides its type.
//! Single-quoted scalars stay single-quoted unless the value holds a character only double quotes
//! can escape; double-quoted scalars are escaped.

use std::sync::LazyLock;

use granit_parser::ScalarStyle;
use regex::Regex;

/// The quoting a written scalar ends up with; verification checks the parser reads it back so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quote {
    Plain,
    Single,
    Double,
}

impl Quote {
    pub fn of(style: ScalarStyle) -> Option<Quote> {
        match style {
            ScalarStyle::Plain => Some(Quote::Plain),
            ScalarStyle::SingleQuoted => Some(Quote::Single),
            ScalarStyle::DoubleQuoted => Some(Quote::Double),
            _ => None,
        }
    }
}

/// How the scalar being replaced is written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Context {
    pub quote: Quote,
    pub in_flow: bool,
    pub tagged: bool,
}

/// Renders `value` for the given context; returns the source text and the quoting it uses.
pub(crate) fn render(value: &str, cx: Context) -> (String, Quote) {
    match cx.quote {
        Quote::Plain => {
            let type_ok = cx.tagged || reads_as_string(value);
            if type_ok && plain_safe(value, cx.in_flow) {
                (value.to_string(), Quote::Plain)
            } else {
                (double_quoted(value), Quote::Double)
            }
        }
        Quote::Single if !value.chars().any(needs_escape) => {
            (format!("'{}'", value.replace('\'', "''")), Quote::Single)
        }
        Quote::Single | Quote::Double => (double_quoted(value), Quote::Double),
    }
}

fn needs_escape(c: char) -> bool {
    c.is_control() || c == '\u{feff}' || c == '\u{2028}' || c == '\u{2029}' || c == '\u{85}'
}

fn double_quoted(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            c if needs_escape(c) => {
                let n = c as u32;
                if n <= 0xff {
                    out.push_str(&format!("\\x{n:02x}"));
                } else {
                    out.push_str(&format!("\\u{n:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Whether `value` can be written as a plain scalar and read back as the same text.
pub(crate) fn plain_safe(value: &str, in_flow: bool) -> bool {
    let Some(first) = value.chars().next() else {
        return false;
    };
    if "-?:,[]{}#&*!|>'\"%@`".contains(first) || first.is_whitespace() {
        return false;
    }
    if value.ends_with(char::is_whitespace) || value.ends_with(':') {
        return false;
    }
    if value.contains(": ")
        || value.contains(" #")
        || value.contains(":\t")
        || value.contains("\t#")
    {
        return false;
    }
    if value.chars().any(|c| needs_escape(c) || c == '\t') {
        return false;
    }
    if in_flow && value.contains([',', '[', ']', '{', '}']) {
        return false;
    }
    // `---` / `...` at a line start are document markers; a leading `-` is already excluded.
    !value.starts_with("...")
}

static NON_STRING: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?x)^(?:
          ~ | null | Null | NULL
        | y | Y | yes | Yes | YES | n | N | no | No | NO
        | true | True | TRUE | false | False | FALSE
        | on | On | ON | off | Off | OFF
        | [-+]? (?: [0-9][0-9_]* (?: \.[0-9_]* )? | \.[0-9][0-9_]* ) (?: [eE][-+]?[0-9]+ )?
        | [-+]? 0x [0-9a-fA-F_]+ | [-+]? 0o [0-7_]+ | [-+]? 0b [01_]+
        | [-+]? [0-9][0-9_]* (?: :[0-5]?[0-9] )+ (?: \.[0-9_]* )?
        | [-+]? \. (?: inf | Inf | INF ) | \. (?: nan | NaN | NAN )
        | [0-9]{4}-[0-9]{1,2}-[0-9]{1,2} (?: (?:[Tt]|[\ \t]+) .* )?
        )$",
    )
    .expect("static regex")
});

/// Whether a plain scalar with this text reads as a string under YAML 1.1 and 1.2 resolvers.
pub(crate) fn reads_as_string(plain: &str) -> bool {
    !plain.is_empty() && !NON_STRING.is_match(plain)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cx(quote: Quote) -> Context {
        Context {
            quote,
            in_flow: false,
            tagged: false,
        }
    }

    #[test]
    fn plain_stays_plain_for_ordinary_values() {
        assert_eq!(
            render("1.2.4", cx(Quote::Plain)),
            ("1.2.4".into(), Quote::Plain)
        );
        let r = "ghcr.io/a/b:1.2@sha256:0123";
        assert_eq!(render(r, cx(Quote::Plain)).0, r);
    }

    #[test]
    fn plain_value_that_would_read_as_number_is_quoted() {
        assert_eq!(
            render("1.10", cx(Quote::Plain)),
            ("\"1.10\"".into(), Quote::Double)
        );
        for v in [
            "7",
            "1e3",
            "true",
            "no",
            "null",
            "~",
            "0x1f",
            "2024-01-02",
            ".inf",
            "1:20",
        ] {
            assert_eq!(render(v, cx(Quote::Plain)).1, Quote::Double, "{v}");
        }
        for v in [
            "v1.10",
            "1.2.3",
            "latest",
            "main-abc123",
            "1.2-alpine",
            "2024-01-02-abc",
        ] {
            assert!(reads_as_string(v), "{v}");
        }
    }

    #[test]
    fn only_an_explicit_tag_keeps_a_numeric_looking_value_plain() {
        let c = Context {
            tagged: true,
            ..cx(Quote::Plain)
        };
        assert_eq!(render("1.3", c), ("1.3".into(), Quote::Plain));
    }

    #[test]
    fn unsafe_plain_text_is_double_quoted() {
        for v in ["a: b", "a #b", "-x", "", " a", "a\nb", "@x", "...x"] {
            assert_eq!(render(v, cx(Quote::Plain)).1, Quote::Double, "{v:?}");
        }
        let flow = Context {
            in_flow: true,
            ..cx(Quote::Plain)
        };
        assert_eq!(render("a,b", flow).1, Quote::Double);
        assert_eq!(render("a,b", cx(Quote::Plain)).1, Quote::Plain);
    }

    #[test]
    fn quoted_styles_escape() {
        assert_eq!(render("it's", cx(Quote::Single)).0, "'it''s'");
        assert_eq!(render("a\"b\\c", cx(Quote::Double)).0, r#""a\"b\\c""#);
        assert_eq!(
            render("a\nb", cx(Quote::Single)),
            ("\"a\\nb\"".into(), Quote::Double)
        );
        assert_eq!(render("é", cx(Quote::Double)).0, "\"é\"");
        assert_eq!(render("\u{7}", cx(Quote::Double)).0, "\"\\x07\"");
    }
}
