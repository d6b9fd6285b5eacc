//! Adding an `images:` entry to a kustomization, as Argo CD Image Updater does for
//! `write-back-target: kustomization` when the kustomization names the image nowhere.
//!
//! The rest of this module only replaces scalars an entry already has. Image Updater instead
//! adds `images:` (or appends to it) an entry `{name, [newName,] newTag[, digest]}` (its
//! `imagesFilter` over kustomize's `types.Image`, in `pkg/argocd/git.go`), so Applications
//! configured through Image Updater get that here; tagpilot's own policies keep the
//! only-existing-keys rule. The entry is spliced into the original text (nothing else is
//! re-serialised) and the result is parsed again: it must be the original event stream with
//! exactly the new entry's events added, at the end of `images:` or of the top-level mapping.
//! Pure.

use std::borrow::Cow;
use std::ops::Range;
use std::path::Path;

use granit_parser::{Event, Parser, ScalarStyle, StructureStyle};

use super::ManifestError;
use super::render::{self, Context, Quote};
use super::tree;

/// One kustomize `images:` entry, in the keys Image Updater writes, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KustomizeImage {
    pub name: String,
    pub new_name: Option<String>,
    pub new_tag: Option<String>,
    pub digest: Option<String>,
}

impl KustomizeImage {
    fn pairs(&self) -> Vec<(&'static str, &str)> {
        let mut out = vec![("name", self.name.as_str())];
        out.extend(self.new_name.as_deref().map(|v| ("newName", v)));
        out.extend(self.new_tag.as_deref().map(|v| ("newTag", v)));
        out.extend(self.digest.as_deref().map(|v| ("digest", v)));
        out
    }
}

type Events<'a> = Vec<(Event<'a>, Range<usize>)>;

fn events<'a>(path: &Path, src: &'a str) -> Result<Events<'a>, ManifestError> {
    Parser::new_from_str_with_options(src, tree::options())
        .map(|next| {
            next.map(|(e, span)| (e, span.byte_range().unwrap_or(0..0)))
                .map_err(|e| ManifestError::unreadable(path, tree::failure(&e)))
        })
        .filter(|e| !matches!(e, Ok((Event::Comment(..) | Event::Anchor(..), _))))
        .collect()
}

/// The kustomization `text` with `image` added to its `images:` (created at the end of the
/// top-level mapping when missing). Refused, with the reason, when the file is not one block
/// mapping, when `images:` is not a block sequence, or when the result does not read back as
/// exactly the original plus the entry.
pub fn add_kustomize_image(
    path: &Path,
    text: &str,
    image: &KustomizeImage,
) -> Result<String, ManifestError> {
    let cannot = |offset: usize, reason: &str| {
        let (line, column) = line_column(text, offset);
        ManifestError::CannotInsert {
            file: path.to_path_buf(),
            line,
            column,
            key: "images".into(),
            reason: reason.to_string(),
        }
    };
    let before = events(path, text)?;
    let docs = before
        .iter()
        .filter(|(e, _)| matches!(e, Event::DocumentStart(..)))
        .count();
    if docs != 1 {
        return Err(cannot(
            0,
            "the kustomization is not exactly one YAML document",
        ));
    }
    // The top-level mapping: the event after DocumentStart.
    let top = before
        .iter()
        .position(|(e, _)| matches!(e, Event::DocumentStart(..)))
        .map(|i| i + 1)
        .filter(|&i| matches!(before[i].0, Event::MappingStart(StructureStyle::Block, ..)))
        .ok_or_else(|| cannot(0, "its top level is not a block mapping"))?;
    let top_end = matching_end(&before, top);
    // The top-level keys and their values' event indices.
    let mut images = None;
    let mut i = top + 1;
    while i < top_end {
        let value = i + 1;
        if matches!(&before[i].0, Event::Scalar(k, ..) if k == "images") {
            images = Some(value);
        }
        i = skip(&before, value);
    }
    let pairs = image.pairs();
    let (at, block, expected) = match images {
        Some(seq) => {
            let Event::SequenceStart(StructureStyle::Block, 0, _) = before[seq].0 else {
                return Err(cannot(
                    before[seq].1.start,
                    "`images:` is not a block sequence (empty, flow style, anchored or aliased)",
                ));
            };
            let seq_end = matching_end(&before, seq);
            let last = last_content(&before[seq..seq_end])
                .ok_or_else(|| cannot(before[seq].1.start, "`images:` has no entries"))?;
            // The new item lines up with the existing ones: at the `-` of the first.
            let first = before[seq + 1].1.start;
            let line_start = text[..first].rfind('\n').map_or(0, |n| n + 1);
            let dash = text[line_start..first]
                .rfind('-')
                .map(|d| line_start + d)
                .ok_or_else(|| cannot(first, "`images:` entries are not `- ` items"))?;
            let indent = column_of(text, dash);
            (
                end_of_line(text, last),
                item(&pairs, indent),
                expected_events(&pairs, false),
            )
        }
        None => {
            let last = last_content(&before[top..top_end])
                .ok_or_else(|| cannot(before[top].1.start, "the mapping is empty"))?;
            let key_indent = column_of(text, before[top + 1].1.start);
            let indent = key_indent + if wide_sequences(text) { 2 } else { 0 };
            (
                end_of_line(text, last),
                format!(
                    "{}images:\n{}",
                    " ".repeat(key_indent),
                    item(&pairs, indent)
                ),
                expected_events(&pairs, true),
            )
        }
    };
    let mut out = String::with_capacity(text.len() + block.len() + 1);
    out.push_str(&text[..at]);
    if !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str(&block);
    out.push_str(&text[at..]);
    verify(path, text, &before, &out, &expected)
        .map_err(|reason| cannot(at, &reason.to_string()))?;
    Ok(out)
}

/// `- name: …` and the other keys, the item's `-` at `indent`.
fn item(pairs: &[(&str, &str)], indent: usize) -> String {
    let mut out = String::new();
    for (n, (key, value)) in pairs.iter().enumerate() {
        let (text, _) = render::render(
            value,
            Context {
                quote: Quote::Plain,
                in_flow: false,
                tagged: false,
            },
        );
        let lead = if n == 0 {
            format!("{}- ", " ".repeat(indent))
        } else {
            " ".repeat(indent + 2)
        };
        out.push_str(&format!("{lead}{key}: {text}\n"));
    }
    out
}

/// Image Updater's kustomize writer keeps the file's sequence indentation (kyaml's
/// `PreserveSeqIndent`): "wide" (`- ` indented under its key) when any block sequence under a
/// key is, else "compact".
fn wide_sequences(text: &str) -> bool {
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        let trimmed = line.trim_end();
        if !trimmed.ends_with(':') || trimmed.trim_start().starts_with('#') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let next = lines[n + 1..]
            .iter()
            .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if let Some(next) = next
            && next.trim_start().starts_with("- ")
        {
            return next.len() - next.trim_start().len() > indent;
        }
    }
    false
}

fn expected_events(pairs: &[(&str, &str)], with_key: bool) -> Vec<Event<'static>> {
    let mut out = Vec::new();
    let scalar = |v: &str| Event::Scalar(Cow::Owned(v.to_string()), ScalarStyle::Plain, 0, None);
    if with_key {
        out.push(scalar("images"));
        out.push(Event::SequenceStart(StructureStyle::Block, 0, None));
    }
    out.push(Event::MappingStart(StructureStyle::Block, 0, None));
    for (k, v) in pairs {
        out.push(scalar(k));
        out.push(scalar(v));
    }
    out.push(Event::MappingEnd);
    if with_key {
        out.push(Event::SequenceEnd);
    }
    out
}

/// The new text's events are the original's with `expected` inserted in one place.
fn verify(
    path: &Path,
    old_text: &str,
    before: &Events<'_>,
    new: &str,
    expected: &[Event<'static>],
) -> Result<(), NotReadBack> {
    let _ = old_text;
    let after = events(path, new).map_err(NotReadBack::DoesNotParse)?;
    if after.len() != before.len() + expected.len() {
        return Err(NotReadBack::Differs);
    }
    let same = |a: &Event<'_>, b: &Event<'_>| match (a, b) {
        // The value's quoting is the renderer's choice; its text must be the same.
        (Event::Scalar(v1, _, a1, t1), Event::Scalar(v2, _, a2, t2)) => {
            v1 == v2 && a1 == a2 && t1 == t2
        }
        _ => a == b,
    };
    let prefix = before
        .iter()
        .zip(&after)
        .take_while(|((a, _), (b, _))| same(a, b))
        .count();
    let inserted = &after[prefix..prefix + expected.len()];
    let rest_ok = before[prefix..]
        .iter()
        .zip(&after[prefix + expected.len()..])
        .all(|((a, _), (b, _))| same(a, b));
    let entry_ok = inserted.iter().zip(expected).all(|((a, _), b)| same(a, b));
    if rest_ok && entry_ok {
        Ok(())
    } else {
        Err(NotReadBack::Differs)
    }
}

/// Why an added entry is refused after splicing: the reason of its
/// [`ManifestError::CannotInsert`].
#[derive(Debug, thiserror::Error)]
enum NotReadBack {
    /// The reason is one line in the file's error, so the parse error is part of it.
    #[error("the result does not parse: {0}")]
    DoesNotParse(ManifestError),
    #[error("the result does not read back as the original plus the entry")]
    Differs,
}

/// The index of the end event matching the collection start at `start`.
fn matching_end(events: &Events<'_>, start: usize) -> usize {
    let mut depth = 0usize;
    for (i, (e, _)) in events.iter().enumerate().skip(start) {
        match e {
            Event::MappingStart(..) | Event::SequenceStart(..) => depth += 1,
            Event::MappingEnd | Event::SequenceEnd => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    events.len()
}

/// The index after the node starting at `i`.
fn skip(events: &Events<'_>, i: usize) -> usize {
    match events.get(i).map(|(e, _)| e) {
        Some(Event::MappingStart(..) | Event::SequenceStart(..)) => matching_end(events, i) + 1,
        _ => i + 1,
    }
}

/// The end offset of the last scalar or alias among `events` (the last text a collection holds).
fn last_content(events: &[(Event<'_>, Range<usize>)]) -> Option<usize> {
    events
        .iter()
        .filter(|(e, _)| matches!(e, Event::Scalar(..) | Event::Alias(..)))
        .map(|(_, r)| r.end)
        .max()
}

/// The offset after the line break that ends the line holding `offset` (the text's end when
/// the last line has none).
fn end_of_line(text: &str, offset: usize) -> usize {
    text[offset..]
        .find('\n')
        .map_or(text.len(), |n| offset + n + 1)
}

fn column_of(text: &str, offset: usize) -> usize {
    let start = text[..offset].rfind('\n').map_or(0, |n| n + 1);
    text[start..offset].chars().count()
}

fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let line = text[..offset].matches('\n').count() + 1;
    (line, column_of(text, offset) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, new_name: Option<&str>, tag: &str) -> KustomizeImage {
        KustomizeImage {
            name: name.into(),
            new_name: new_name.map(Into::into),
            new_tag: Some(tag.into()),
            digest: None,
        }
    }

    fn add(text: &str, e: &KustomizeImage) -> Result<String, String> {
        add_kustomize_image(Path::new("kustomization.yaml"), text, e).map_err(|e| e.to_string())
    }

    /// Image Updater's `imagesFilter` (`kyaml.LookupCreate(SequenceNode, "images")` then an
    /// `ElementSetter` keyed by `name`) appends `images:` at the end of the mapping, entries in
    /// kustomize's `types.Image` order, sequences indented as the file indents them.
    #[test]
    fn a_kustomization_without_images_gets_them_at_the_end_in_its_sequence_style() {
        let compact = "resources:\n- deployment.yaml\n";
        assert_eq!(
            add(compact, &entry("r.example/shop/api", None, "1.2.0")).unwrap(),
            "resources:\n- deployment.yaml\nimages:\n- name: r.example/shop/api\n  newTag: 1.2.0\n"
        );
        let wide = "resources:\n  - deployment.yaml # the app\n";
        assert_eq!(
            add(wide, &entry("api", Some("r.example/shop/api"), "1.2.0")).unwrap(),
            "resources:\n  - deployment.yaml # the app\nimages:\n  - name: api\n    newName: r.example/shop/api\n    newTag: 1.2.0\n"
        );
        // No final line break: one is added before the new key.
        assert_eq!(
            add("resources: [a.yaml]", &entry("x", None, "1.10")).unwrap(),
            "resources: [a.yaml]\nimages:\n- name: x\n  newTag: \"1.10\"\n"
        );
    }

    #[test]
    fn an_entry_is_appended_to_other_images_lined_up_with_them() {
        let compact = "resources: [d.yaml]\nimages:\n- name: r.example/shop/web\n  newTag: 2.1.0\n";
        assert_eq!(
            add(compact, &entry("r.example/shop/api", None, "1.1.0")).unwrap(),
            format!("{compact}- name: r.example/shop/api\n  newTag: 1.1.0\n")
        );
        let text = "images:\n  - name: busybox\n    newTag: \"1.36\"\nresources:\n  - d.yaml\n";
        assert_eq!(
            add(text, &entry("r.example/shop/api", None, "1.2.0")).unwrap(),
            "images:\n  - name: busybox\n    newTag: \"1.36\"\n  - name: r.example/shop/api\n    newTag: 1.2.0\nresources:\n  - d.yaml\n"
        );
    }

    #[test]
    fn shapes_that_cannot_take_an_entry_are_refused_with_the_reason() {
        let e = entry("x", None, "1.0.0");
        assert!(
            add("images: []\n", &e)
                .unwrap_err()
                .contains("not a block sequence")
        );
        assert!(
            add("images: &i\n- name: y\n", &e)
                .unwrap_err()
                .contains("anchored")
        );
        assert!(
            add("a: 1\n---\nb: 2\n", &e)
                .unwrap_err()
                .contains("one YAML document")
        );
        assert!(
            add("- a\n", &e)
                .unwrap_err()
                .contains("not a block mapping")
        );
        assert!(
            add("{a: 1}\n", &e)
                .unwrap_err()
                .contains("not a block mapping")
        );
    }
}
