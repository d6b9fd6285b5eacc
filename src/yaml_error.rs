//! YAML errors as tagpilot shows them: `file:line:column: what is wrong`, then serde-saphyr's
//! snippet. One rendering for every file tagpilot reads (`tagpilot.yaml`, policies, Argo CD
//! Applications), so a user greps one shape. A leaf: it imports nothing of the crate.

use std::path::Path;

/// The options of every serde-saphyr read of a user's file (`tagpilot.yaml`, policies,
/// Applications, override files, rendered resources): serde-saphyr's budget, except that
/// comments are buffered without a count. The reader holds back the comments between a value
/// and what follows it until it knows where the next entry belongs; its default of 32 refused
/// valid files with a longer commented-out block as "too many buffered comments", which is no
/// YAML error. What it buffers is bounded by the file. The budget's other limits stay, and a
/// breach reads as one ("budget breached: …").
pub(crate) fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_buffered_comment_events: usize::MAX,
        },
    }
}

/// `serde_saphyr::from_str` with [`options`].
pub(crate) fn from_str<'de, T: serde::Deserialize<'de>>(
    text: &'de str,
) -> Result<T, serde_saphyr::Error> {
    serde_saphyr::from_str_with_options(text, options())
}

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

    /// A commented-out block of a few hundred lines (as real values files and configurations
    /// have) between a key and its nested value, where the reader looks ahead past them: every
    /// file serde-saphyr reads for tagpilot is read, not refused as "too many buffered
    /// comments".
    #[test]
    fn every_reader_reads_hundreds_of_comment_lines_in_a_row() {
        let block: String = (0..400)
            .map(|i| format!("#   {i}: commented out\n"))
            .collect();
        let config = format!(
            "registries:\n{block}  - host: 127.0.0.1:5000\n    insecure: true\n{block}policies: policies/\n{block}"
        );
        crate::config::parse(Path::new("tagpilot.yaml"), &config).unwrap();
        let policy = format!(
            "{block}apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\n{block}spec:\n{block}  image: ghcr.io/a/api\n  strategy:\n    semver: {{range: \">=1.0.0\"}}\n{block}  targets:\n    - paths: [\"apps/**\"]\n{block}"
        );
        let policies = crate::policy::parse_file(Path::new("api.yaml"), &policy).unwrap();
        assert_eq!(policies.len(), 1);
        let app = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: api=ghcr.io/a/api\nspec:\n{block}  source: {{repoURL: https://git.example/m.git, path: apps/web}}\n{block}"
        );
        let apps = crate::application::read_documents(Path::new("web.yaml"), &app).unwrap();
        assert_eq!(apps.len(), 1);
        let overrides = format!(
            "helm:\n{block}  parameters:\n  - name: image.tag\n    value: 1.0.0\n{block}    forcestring: true\n{block}"
        );
        crate::application::override_file::OverrideFile::parse(&overrides).unwrap();
    }

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
