//! Go-templated YAML (helmfile's `helmfile.yaml.gotmpl`, values files ending `.yaml.gotmpl` or
//! `.yaml.tpl`): read as YAML with every line a template expression takes turned into a
//! comment of the same length, so that byte offsets, lines and columns stay those of the file.
//!
//! A value on a line with no template expression is then edited as YAML, and verified the same
//! way; a line with one is never edited (what it renders to is known only to the template), and
//! is handed back for the planner to name where it mentions a policy's image or chart.

use std::path::Path;

/// Whether `path` is a Go-templated YAML file tagpilot reads this way.
pub fn is_templated(path: &Path) -> bool {
    path.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.ends_with(".gotmpl") || n.ends_with(".yaml.tpl") || n.ends_with(".yml.tpl")
    })
}

/// `path`'s text as the scanner reads it: `Some` masked text for a Go-templated file (see
/// [`mask`]), with the lines masked as written; `None` and no lines for any other file.
pub(crate) fn read(path: &Path, src: &str) -> (Option<String>, Vec<super::TemplatedLine>) {
    if !is_templated(path) {
        return (None, Vec::new());
    }
    let (text, lines) = mask(src);
    let written: Vec<&str> = src.lines().collect();
    let templated = lines
        .iter()
        .filter_map(|&line| {
            Some(super::TemplatedLine {
                line,
                text: written.get(line - 1)?.to_string(),
            })
        })
        .collect();
    (Some(text), templated)
}

/// `src` with each line a template expression takes (one holding `{{`, or inside an
/// expression left open on an earlier line) replaced by `#` and spaces to its length, and
/// those lines (1-based).
pub(crate) fn mask(src: &str) -> (String, Vec<usize>) {
    let mut out = String::with_capacity(src.len());
    let mut masked = Vec::new();
    let mut open = false;
    for (i, line) in src.split_inclusive('\n').enumerate() {
        let body = line.trim_end_matches(['\n', '\r']);
        let templated = open || body.contains("{{");
        if templated {
            // Still open at the end of this line: the next line is the expression's too.
            open = match (body.rfind("{{"), body.rfind("}}")) {
                (Some(o), Some(c)) => o > c,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => open,
            };
            masked.push(i + 1);
            if !body.is_empty() {
                out.push('#');
                out.extend(std::iter::repeat_n(' ', body.len() - 1));
            }
            out.push_str(&line[body.len()..]);
        } else {
            out.push_str(line);
        }
    }
    (out, masked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_lines_become_comments_of_their_length() {
        let src = "releases:\n{{- range .Values.apps }}\n- name: x\n  version: {{ .v }}\n  values: {{ toYaml\n  .Values\n  }}\n  chart: a/b\n{{- end }}\n";
        let (masked, lines) = mask(src);
        assert_eq!(masked.len(), src.len());
        assert_eq!(lines, [2, 4, 5, 6, 7, 9]);
        assert!(masked.contains("- name: x\n#"));
        assert!(masked.contains("  chart: a/b\n"));
        assert!(!masked.contains("{{"));
        assert!(is_templated(Path::new("a/helmfile.yaml.gotmpl")));
        assert!(is_templated(Path::new("values.yaml.tpl")));
        assert!(!is_templated(Path::new("values.yaml")));
    }
}
