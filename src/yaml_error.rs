//! YAML errors as tagpilot shows them: `file:line:column: what is wrong`, then serde-saphyr's
//! snippet. One rendering for every file tagpilot reads (`tagpilot.yaml`, policies, Argo CD
//! Applications), so a user greps one shape. A leaf: it imports nothing of the crate.

use std::path::Path;

/// serde-saphyr's message for `e`, reshaped so that the first line reads
/// `file:line:column: what is wrong` (greppable, one line per problem in a list), followed by
/// serde-saphyr's snippet. `line_offset` is the number of lines before the parsed text in its file.
/// Returns the line and column (0 when unknown) too.
pub(crate) fn render(
    e: &serde_saphyr::Error,
    path: &Path,
    line_offset: usize,
    context: Option<&str>,
) -> (usize, usize, String) {
    let name = path.display().to_string();
    let rendered = e.render_with_options(serde_saphyr::render_options! {
        line_offset: line_offset as u64,
        source_name: Some(&name),
    });
    let (line, column) = e
        .location()
        .map(|l| (l.line() as usize + line_offset, l.column() as usize))
        .unwrap_or((line_offset + 1, 0));
    let mut lines = rendered.lines();
    let first = lines.next().unwrap_or_default();
    let what = strip_location(first.strip_prefix("error: ").unwrap_or(first));
    let place = if column > 0 {
        format!("{name}:{line}:{column}")
    } else {
        format!("{name}:{line}")
    };
    let mut message = match context {
        Some(c) => format!("{place}: {c}: {what}"),
        None => format!("{place}: {what}"),
    };
    for l in lines {
        message.push('\n');
        message.push_str(l);
    }
    (line, column, message)
}

/// `line 1 column 13: expected …` → `expected …`.
fn strip_location(s: &str) -> &str {
    if let Some(rest) = s.strip_prefix("line ")
        && let Some(i) = rest.find(": ")
        && rest[..i]
            .split(" column ")
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        return &rest[i + 2..];
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_prefix_is_stripped_only_when_it_is_one() {
        assert_eq!(
            strip_location("line 1 column 13: expected string"),
            "expected string"
        );
        assert_eq!(
            strip_location("line of sight: clear"),
            "line of sight: clear"
        );
    }
}
