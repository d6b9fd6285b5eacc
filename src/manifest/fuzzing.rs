//! The editor's promise as one checkable property, shared by the fuzz target
//! (`fuzz/fuzz_targets/editor.rs`, run by hand with cargo fuzz) and the property test over
//! real-world manifests (`tests/it/editor_fuzz.rs`, part of every `cargo test`), so the two hold
//! the editor to the same thing and cannot drift apart.
//!
//! The promise: whatever the editor is asked to do with whatever text, it does not panic, and
//! every text it returns
//! - differs from the input only inside the spans of the edits it produced, and those bring no
//!   line break or comment with them;
//! - scans again, finding the same fields in the same order;
//! - holds the requested values in the edited fields (asking again yields no edit) and the old
//!   values in the others.
//!
//! The version labels that follow the edited images (the default `versionLabels`) are edited
//! with them, as the planner edits them, and held to the same promise.
//!
//! A refusal (an error from [`scan`], [`ImageField::edits`] or [`apply_edits`]) keeps the promise:
//! refusing is how the editor avoids guessing.
//!
//! Not API: hidden from the docs, and free to change together with its two callers.

use std::path::Path;

use super::{Edit, FieldKind, ImageField, ImageMove, Update, apply_edits, scan, version_labels};
use crate::config::version_labels::VersionLabels;

/// The name written where a field names no repository of its own (markers name a policy).
const PLACEHOLDER_NAME: &str = "ghcr.io/x/y";

/// What to write into one field. A field left without a request is not edited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Request<'a> {
    /// The image name to write; `None` keeps the field's own repository.
    pub name: Option<&'a str>,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

/// What one check exercised, so that a test can tell a vacuous run from a real one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Checked {
    /// The input was YAML the editor reads.
    pub scanned: bool,
    /// Image fields found in the input.
    pub fields: usize,
    /// Edited texts the editor returned, each checked against the promise.
    pub accepted: usize,
    /// Edits the editor refused with an error.
    pub refused: usize,
}

impl Checked {
    fn add(&mut self, other: Checked) {
        self.scanned |= other.scanned;
        self.fields += other.fields;
        self.accepted += other.accepted;
        self.refused += other.refused;
    }
}

/// A broken promise: what went wrong, with the input and the text the editor returned.
#[derive(Debug, thiserror::Error)]
#[error("{file}: {what}\n---- input ----\n{src}\n---- edited ----\n{out}")]
pub struct Broken {
    file: String,
    what: String,
    src: String,
    out: String,
}

/// Scans `src` as the file `path`, then asks for the edits `requests` describe (field `i` gets
/// `requests[i % requests.len()]`), one field at a time and all at once, and checks every text
/// the editor returns against the promise in the module doc.
pub fn check(path: &Path, src: &str, requests: &[Option<Request<'_>>]) -> Result<Checked, Broken> {
    let mut checked = Checked::default();
    let Ok(fields) = scan(path, src, &[]) else {
        return Ok(checked);
    };
    checked.scanned = true;
    checked.fields = fields.len();
    let names: Vec<String> = fields
        .iter()
        .map(|f| {
            f.repository()
                .map_or_else(|| PLACEHOLDER_NAME.to_string(), ToString::to_string)
        })
        .collect();
    let updates: Vec<Option<Update<'_>>> = names
        .iter()
        .enumerate()
        .map(|(i, own)| {
            let request = requests.get(i.checked_rem(requests.len())?).copied()??;
            Some(Update {
                name: request.name.unwrap_or(own),
                tag: request.tag,
                digest: request.digest,
            })
        })
        .collect();

    // One field at a time, as a plan that moves one image of the file does...
    for (i, update) in updates.iter().enumerate() {
        if update.is_some() {
            let mut only = vec![None; updates.len()];
            only[i] = update.clone();
            checked.add(attempt(path, src, &fields, &only)?);
        }
    }
    // ...and every requested field at once, as a plan that moves them all does.
    if updates.iter().flatten().count() > 1 {
        checked.add(attempt(path, src, &fields, &updates)?);
    }
    Ok(checked)
}

/// Decodes a fuzzer's input: the first byte chooses the request, the rest is the file's text.
///
/// Bits of the first byte: 0 the file name (`values.yaml` or `kustomization.yaml`, which
/// changes what counts as a field), 1–2 the tag, 3 pin a digest, 4 write another name, 5–6 edit
/// every first to fourth field, 7 no tag at all.
pub fn check_bytes(data: &[u8]) -> Result<Checked, Broken> {
    const TAGS: [&str; 4] = ["1.10", "2.0.0", "v3", "true"];
    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
    let Some((&selector, rest)) = data.split_first() else {
        return Ok(Checked::default());
    };
    let Ok(src) = std::str::from_utf8(rest) else {
        return Ok(Checked::default());
    };
    let path = Path::new(if selector & 1 == 0 {
        "values.yaml"
    } else {
        "kustomization.yaml"
    });
    let request = Request {
        name: (selector & 0x10 != 0).then_some("registry.example:5000/other/name"),
        tag: (selector & 0x80 == 0).then_some(TAGS[usize::from((selector >> 1) & 3)]),
        digest: (selector & 0x08 != 0).then_some(DIGEST),
    };
    let mut requests = vec![None; usize::from((selector >> 5) & 3) + 1];
    requests[0] = Some(request);
    check(path, src, &requests)
}

/// Applies the edits for `updates` (parallel to `fields`) and checks the result. A field whose
/// edits are refused is left out, as the planner leaves it out and edits the others.
fn attempt(
    path: &Path,
    src: &str,
    fields: &[ImageField],
    updates: &[Option<Update<'_>>],
) -> Result<Checked, Broken> {
    let mut checked = Checked::default();
    let mut edits = Vec::new();
    let mut edited = Vec::with_capacity(fields.len());
    for (field, update) in fields.iter().zip(updates) {
        let accepted = match update.as_ref().map(|u| field.edits(u)) {
            Some(Ok(e)) => {
                edits.extend(e);
                update.as_ref()
            }
            Some(Err(_)) => {
                checked.refused += 1;
                None
            }
            None => None,
        };
        edited.push(accepted);
    }
    if edited.iter().all(Option::is_none) {
        return Ok(checked);
    }
    let labels = VersionLabels::defaults();
    let moves: Vec<ImageMove<'_>> = fields
        .iter()
        .zip(&edited)
        .filter_map(|(field, update)| {
            Some(ImageMove {
                field,
                tag: (*update)?.tag?,
                labels: &labels,
            })
        })
        .collect();
    match version_labels(path, src, fields, &moves) {
        Ok(found) => edits.extend(found.moved.into_iter().map(|m| m.edit)),
        Err(e) => {
            return Err(Broken {
                file: path.display().to_string(),
                what: format!("the version labels of a text that scanned cannot be read: {e}"),
                src: src.to_string(),
                out: String::new(),
            });
        }
    }
    let Ok(out) = apply_edits(path, src, &edits) else {
        checked.refused += 1;
        return Ok(checked);
    };
    checked.accepted += 1;
    let broken = |what: String| Broken {
        file: path.display().to_string(),
        what,
        src: src.to_string(),
        out: out.clone(),
    };

    // Only the bytes inside the edits changed, and the edits bring no new line or comment.
    let mut sorted: Vec<&Edit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.span.start, e.span.end));
    sorted.dedup();
    let mut rebuilt = String::with_capacity(out.len());
    let mut pos = 0;
    for e in &sorted {
        let Some(between) = src.get(pos..e.span.start) else {
            return Err(broken(format!(
                "the edit at {:?} overlaps another or splits a character, yet it was applied",
                e.span
            )));
        };
        rebuilt.push_str(between);
        rebuilt.push_str(&e.text);
        pos = e.span.end;
    }
    rebuilt.push_str(src.get(pos..).unwrap_or_default());
    if rebuilt != out {
        return Err(broken("bytes outside the edited spans changed".into()));
    }
    // An added key starts its own line (an insertion's leading line break); nothing else may.
    if let Some(e) = sorted.iter().find(|e| {
        e.text
            .trim_start_matches(['\r', '\n'])
            .contains(['\r', '\n', '#'])
    }) {
        return Err(broken(format!(
            "the edit at {:?} writes a line break or a comment: {:?}",
            e.span, e.text
        )));
    }

    // The result reads back as the same fields, holding what was asked.
    let again = match scan(path, &out, &[]) {
        Ok(again) => again,
        Err(e) => return Err(broken(format!("the edited text no longer scans: {e}"))),
    };
    let kinds = |fs: &[ImageField]| {
        fs.iter()
            .map(|f| f.kind.clone())
            .collect::<Vec<FieldKind>>()
    };
    if kinds(&again) != kinds(fields) {
        return Err(broken(format!(
            "the fields changed: before {:?}, after {:?}",
            kinds(fields),
            kinds(&again)
        )));
    }
    for ((old, new), update) in fields.iter().zip(&again).zip(&edited) {
        match update {
            None if new.current() != old.current() => {
                return Err(broken(format!(
                    "{:?} was not edited, yet its tag and digest went from {:?} to {:?}",
                    old.kind,
                    old.current(),
                    new.current()
                )));
            }
            None => {}
            Some(update) => match new.edits(update) {
                Ok(more) if more.is_empty() => {}
                more => {
                    return Err(broken(format!(
                        "{:?} does not hold {update:?} after its edit: asking again gives {more:?}",
                        old.kind
                    )));
                }
            },
        }
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_promise_is_counted() {
        let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: a\n      image: nginx:1.0 # pinned\n    - name: b\n      image: redis:7\n";
        let request = Request {
            tag: Some("1.10"),
            ..Request::default()
        };
        let checked = check(Path::new("pod.yaml"), src, &[Some(request)]).unwrap();
        // Two fields alone, then both at once.
        assert_eq!(
            checked,
            Checked {
                scanned: true,
                fields: 2,
                accepted: 3,
                refused: 0
            }
        );
    }

    #[test]
    fn version_labels_move_with_their_image_under_the_promise() {
        let src = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\n  labels: {app.kubernetes.io/version: \"1.0\"}\nspec:\n  template:\n    spec:\n      containers:\n        - name: a\n          image: nginx:1.0\n";
        let request = Request {
            tag: Some("1.10"),
            ..Request::default()
        };
        let checked = check(Path::new("d.yaml"), src, &[Some(request)]).unwrap();
        assert_eq!((checked.fields, checked.accepted), (1, 1));
    }

    #[test]
    fn refusals_and_unreadable_input_keep_the_promise() {
        let block = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - name: a\n      image: |\n        nginx:1.0\n";
        let request = Request {
            tag: Some("2.0.0"),
            ..Request::default()
        };
        let checked = check(Path::new("pod.yaml"), block, &[Some(request)]).unwrap();
        assert_eq!((checked.accepted, checked.refused), (0, 1));
        assert!(!check_bytes(b"\x00{{ .Values }}: [").unwrap().scanned);
        assert_eq!(check_bytes(&[]).unwrap(), Checked::default());
    }

    #[test]
    fn bytes_decode_to_a_file_name_and_a_request() {
        let kustomization = b"\x01images:\n  - name: nginx\n    newTag: 1.0\n";
        assert_eq!(check_bytes(kustomization).unwrap().accepted, 1);
        // As `values.yaml` the same text holds no field.
        let values = b"\x00images:\n  - name: nginx\n    newTag: 1.0\n";
        assert_eq!(check_bytes(values).unwrap().fields, 0);
    }
}
