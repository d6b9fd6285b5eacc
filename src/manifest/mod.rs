//! Finding image fields in YAML files and editing them surgically.
//!
//! tagpilot's promise is that `apply` changes not one byte besides the image fields, so this
//! module never re-serialises YAML: it reads granit-parser's events with their byte spans, finds
//! the scalars that hold images ([`scan`]), produces byte replacements for exactly those scalars
//! ([`ImageField::edits`]), and splices them into the original text ([`apply_edits`]). Every
//! edited text is parsed again and compared, event by event, with the original; anything but the
//! intended values (and an intended inserted key) is an error and no text comes out.
//!
//! Pure: no I/O. It must never guess: a block scalar holding an image, an alias, or an empty
//! value is refused with an error naming `file:line:column` rather than rewritten.
//!
//! What counts as a field:
//! - containers (`containers`, `initContainers`, `ephemeralContainers`) of Pod templates in
//!   Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job, CronJob, Pod,
//!   PodTemplate and Argo Rollout documents (also inside `kind: List`);
//! - `images:` entries of `kustomization.yaml`, `kustomization.yml` and `Kustomization` files;
//! - in documents without `apiVersion` and `kind` (Helm values), `image:` holding either a
//!   `{registry, repository, tag, digest}` map (registry, tag and digest optional) or a whole
//!   reference string, at any depth; plus the explicit [`HelmPaths`] passed to [`scan`], in any
//!   document;
//! - any scalar with a marker comment after it on its line: `# tagpilot: [ns:]policy[:part]` or
//!   Flux's `# {"$imagepolicy": "ns:policy[:part]"}`, part being `tag`, `name` or `digest`.
//!
//! A scalar belongs to at most one field. A marker wins over every other reading of its scalar
//! (a Flux-marked container image is a marker field, not also a container field), and a
//! structured field one of whose scalars carries a marker is dropped; explicit Helm paths win
//! over the conventional Helm shapes. Values that are not valid image references (`$(IMG)`,
//! `"{{ .Values.image }}"`) are not fields.

mod detect;
mod render;
mod tree;
mod verify;

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::image::{ImageRef, Repository};
use crate::policy::HelmPaths;

use render::{Context, Quote};

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// The file is not YAML tagpilot can read (a Helm template, say); it is left alone.
    #[error("{}:{line}:{column}: not valid YAML, left alone: {message}", file.display())]
    Parse {
        file: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error(
        "{}:{line}:{column}: the image is written as a block scalar (`|` or `>`); tagpilot does not rewrite those",
        file.display()
    )]
    BlockScalar {
        file: PathBuf,
        line: usize,
        column: usize,
    },
    #[error("{}:{line}:{column}: {what} has an empty value; write a value there first", file.display())]
    EmptyValue {
        file: PathBuf,
        line: usize,
        column: usize,
        what: String,
    },
    #[error("{}:{line}:{column}: cannot add `{key}` here: {reason}", file.display())]
    CannotInsert {
        file: PathBuf,
        line: usize,
        column: usize,
        key: String,
        reason: String,
    },
    #[error("{}: edit at byte {offset} is out of range, overlaps another edit, or splits a character", file.display())]
    BadEdit { file: PathBuf, offset: usize },
    #[error("{}:{line}:{column}: the edit was dropped because the result failed verification: {reason}", file.display())]
    Verification {
        file: PathBuf,
        line: usize,
        column: usize,
        reason: String,
    },
}

impl ManifestError {
    /// A short, stable label for metrics and reports.
    pub fn label(&self) -> &'static str {
        match self {
            ManifestError::Parse { .. } => "parse",
            ManifestError::BlockScalar { .. } => "block_scalar",
            ManifestError::EmptyValue { .. } => "empty_value",
            ManifestError::CannotInsert { .. } => "cannot_insert",
            ManifestError::BadEdit { .. } => "bad_edit",
            ManifestError::Verification { .. } => "verification",
        }
    }
}

/// Where in a file an image (or a part of one) is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A container of a workload (`Deployment/web`, container `app`). Unnamed containers are
    /// named by position (`#0`); unnamed resources by kind alone.
    Container { resource: String, container: String },
    /// A `kustomization.yaml` `images:` entry, by its `name`.
    Kustomize { name: String },
    /// Helm values at a dotted path (`image`, `worker.image`, `images[1].repository`): the
    /// `image` key for the conventional shapes, the `image` or `repository` path for explicit ones.
    HelmValues { path: String },
    /// A scalar with a tagpilot or Flux marker comment naming a policy.
    Marker {
        policy: String,
        namespace: Option<String>,
        part: MarkerPart,
    },
}

/// Which part of an image a marked scalar holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerPart {
    /// The whole reference, `name[:tag][@digest]`.
    Whole,
    Name,
    Tag,
    Digest,
}

/// What to write into a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    /// The image name as the policy writes it; used only where the field's own name does not
    /// already name the same repository (whole-reference markers, `:name` markers).
    pub name: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

/// A replacement of the bytes at `span` by `text` (an insertion when the span is empty).
///
/// Edits come only from [`ImageField::edits`]: each carries what the parser must read back at
/// that place, which [`apply_edits`] checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub span: Range<usize>,
    pub text: String,
    expect: Expect,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expect {
    /// The scalar at `span` reads back as `value` in `quote` style.
    Replace { value: String, quote: Quote },
    /// A plain `key` and a `value` in `quote` style are added at the end of the mapping whose
    /// start event is at byte `mapping`.
    Insert {
        mapping: usize,
        key: String,
        value: String,
        quote: Quote,
    },
}

/// An image field found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageField {
    pub kind: FieldKind,
    /// 1-based line and column (in characters) of the field's main scalar: the tag where a field
    /// is split over several keys and has one, else the image or name.
    pub line: usize,
    pub column: usize,
    file: PathBuf,
    repository: Option<Repository>,
    tag: Option<String>,
    digest: Option<String>,
    shape: Shape,
}

/// One scalar in the source.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Slot {
    range: Range<usize>,
    value: String,
    /// `None` for block scalars, which are never rewritten.
    quote: Option<Quote>,
    in_flow: bool,
    tagged: bool,
    line: usize,
    column: usize,
}

/// Where a missing key can be added: after a sibling entry of its mapping.
#[derive(Debug, Clone, PartialEq, Eq)]
struct InsertAt {
    /// Byte offset of the mapping's start event (its first key for block mappings).
    mapping: usize,
    flow: bool,
    /// Where the new pair goes: in a flow mapping just past the sibling's value, in a block mapping
    /// at the end of that value's line (after any comment). `None` when the sibling's value is not
    /// a flow scalar, so its end is not known exactly.
    pos: Option<usize>,
    /// The line break to start the new line with (the one ending the sibling's line).
    eol: &'static str,
    /// Column (0-based, characters) of the mapping's keys.
    indent: usize,
    line: usize,
    column: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Present(Slot),
    /// The key holds an empty (null) value.
    Empty {
        line: usize,
        column: usize,
    },
    /// The key is absent; it is added to `at` under `key` when needed.
    Missing {
        key: String,
        at: Option<InsertAt>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// One scalar holding `name[:tag][@digest]`; `name` is the name as written there.
    Whole { slot: Slot, name: String },
    /// Tag and digest in their own keys (kustomize `newTag`/`digest`, Helm `tag`/`digest`).
    Split { tag: Part, digest: Part },
    /// A marked scalar holding one part of an image.
    Single { slot: Slot, part: OnePart },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnePart {
    Name,
    Tag,
    Digest,
}

// === impl ImageField ===

impl ImageField {
    /// The repository the field refers to; `None` for markers (they name a policy instead).
    pub fn repository(&self) -> Option<&Repository> {
        self.repository.as_ref()
    }

    /// The tag and digest the field holds now.
    pub fn current(&self) -> (Option<&str>, Option<&str>) {
        (self.tag.as_deref(), self.digest.as_deref())
    }

    /// The file the field was found in, as passed to [`scan`].
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The byte edits that make this field hold `update`; empty when it already does.
    ///
    /// Whole references keep the name as written when it names the same repository as
    /// `update.name`. Split fields change only the parts that differ: a missing tag or digest key
    /// is added to the entry's mapping, a tag-less update leaves the tag alone, and a digest-less
    /// update empties an existing digest (`""`), because a stale digest would override the new
    /// tag. Markers receive only their part.
    pub fn edits(&self, update: &Update<'_>) -> Result<Vec<Edit>, ManifestError> {
        let mut out = Vec::new();
        match &self.shape {
            Shape::Whole { slot, name } => {
                let same = match (ImageRef::parse(name), Repository::parse(update.name)) {
                    (Ok(a), Ok(b)) => a.repository == b,
                    _ => false,
                };
                let name = if same { name.as_str() } else { update.name };
                let value = ImageRef::render(name, update.tag, update.digest);
                self.replace(slot, &value, &mut out)?;
            }
            Shape::Split { tag, digest } => {
                if let Some(t) = update.tag {
                    self.write_part(tag, t, &mut out)?;
                }
                match update.digest {
                    Some(d) => self.write_part(digest, d, &mut out)?,
                    None => match digest {
                        Part::Present(slot) if !slot.value.is_empty() => {
                            self.replace(slot, "", &mut out)?;
                        }
                        _ => {}
                    },
                }
            }
            Shape::Single { slot, part } => {
                let value = match part {
                    OnePart::Name => Some(update.name),
                    OnePart::Tag => update.tag,
                    OnePart::Digest => update.digest,
                };
                if let Some(value) = value {
                    self.replace(slot, value, &mut out)?;
                }
            }
        }
        Ok(out)
    }

    fn replace(&self, slot: &Slot, value: &str, out: &mut Vec<Edit>) -> Result<(), ManifestError> {
        if slot.value == value {
            return Ok(());
        }
        let Some(quote) = slot.quote else {
            return Err(ManifestError::BlockScalar {
                file: self.file.clone(),
                line: slot.line,
                column: slot.column,
            });
        };
        let cx = Context {
            quote,
            in_flow: slot.in_flow,
            tagged: slot.tagged,
        };
        let (text, quote) = render::render(value, cx);
        out.push(Edit {
            span: slot.range.clone(),
            text,
            expect: Expect::Replace {
                value: value.to_string(),
                quote,
            },
        });
        Ok(())
    }

    fn write_part(
        &self,
        part: &Part,
        value: &str,
        out: &mut Vec<Edit>,
    ) -> Result<(), ManifestError> {
        match part {
            Part::Present(slot) => self.replace(slot, value, out),
            Part::Empty { line, column } => Err(ManifestError::EmptyValue {
                file: self.file.clone(),
                line: *line,
                column: *column,
                what: format!("the value for {value:?}"),
            }),
            Part::Missing { key, at } => {
                let cannot = |reason: &str, line, column| ManifestError::CannotInsert {
                    file: self.file.clone(),
                    line,
                    column,
                    key: key.clone(),
                    reason: reason.to_string(),
                };
                let Some(at) = at else {
                    return Err(cannot(
                        "its parent mapping does not exist",
                        self.line,
                        self.column,
                    ));
                };
                let Some(pos) = at.pos else {
                    return Err(cannot(
                        "the mapping's last value is not a plain scalar",
                        at.line,
                        at.column,
                    ));
                };
                let cx = Context {
                    quote: Quote::Plain,
                    in_flow: at.flow,
                    tagged: false,
                };
                let (text, quote) = render::render(value, cx);
                let expect = Expect::Insert {
                    mapping: at.mapping,
                    key: key.clone(),
                    value: value.to_string(),
                    quote,
                };
                let text = if at.flow {
                    format!(", {key}: {text}")
                } else {
                    format!("{}{}{key}: {text}", at.eol, " ".repeat(at.indent))
                };
                out.push(Edit {
                    span: pos..pos,
                    text,
                    expect,
                });
                Ok(())
            }
        }
    }
}

/// Finds every image field in a YAML file. `helm` lists explicit value paths that apply to it.
pub fn scan(path: &Path, src: &str, helm: &[HelmPaths]) -> Result<Vec<ImageField>, ManifestError> {
    let parsed = tree::parse(src).map_err(|f| ManifestError::Parse {
        file: path.to_path_buf(),
        line: f.line,
        column: f.column,
        message: f.message,
    })?;
    Ok(detect::fields(path, src, &parsed, helm))
}

/// Applies edits (from any fields of this one file) and checks the result re-parses to the same
/// document except at the edits. Returns the new text, or an error and no text.
pub fn apply_edits(path: &Path, src: &str, edits: &[Edit]) -> Result<String, ManifestError> {
    let mut edits: Vec<Edit> = edits.to_vec();
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    let mut out = String::with_capacity(src.len() + 64);
    let mut pos = 0;
    for e in &edits {
        let bad = ManifestError::BadEdit {
            file: path.to_path_buf(),
            offset: e.span.start,
        };
        if e.span.start < pos
            || e.span.end < e.span.start
            || e.span.end > src.len()
            || !src.is_char_boundary(e.span.start)
            || !src.is_char_boundary(e.span.end)
        {
            return Err(bad);
        }
        out.push_str(&src[pos..e.span.start]);
        out.push_str(&e.text);
        pos = e.span.end;
    }
    out.push_str(&src[pos..]);
    if edits.is_empty() {
        return Ok(out);
    }
    verify::verify(src, &out, &edits).map_err(|m| {
        let (line, column) = line_column(src, m.offset);
        ManifestError::Verification {
            file: path.to_path_buf(),
            line,
            column,
            reason: m.reason,
        }
    })?;
    Ok(out)
}

/// 1-based line and character column of a byte offset.
fn line_column(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..]
        .trim_start_matches('\u{feff}')
        .chars()
        .count()
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    fn scan_ok(name: &str, src: &str) -> Vec<ImageField> {
        scan(Path::new(name), src, &[]).unwrap()
    }

    fn tag(t: &str) -> Update<'_> {
        Update {
            name: "unused.example/x",
            tag: Some(t),
            digest: None,
        }
    }

    /// Applies one field's update and returns the new text.
    fn edit(name: &str, src: &str, index: usize, update: &Update<'_>) -> String {
        let fields = scan_ok(name, src);
        let edits = fields[index].edits(update).unwrap();
        apply_edits(Path::new(name), src, &edits).unwrap()
    }

    /// Moves one field to a new tag, under the field's own repository name.
    fn retag(name: &str, src: &str, index: usize, t: &str) -> String {
        let field = &scan_ok(name, src)[index];
        let image = repo(field);
        edit(
            name,
            src,
            index,
            &Update {
                name: &image,
                tag: Some(t),
                digest: None,
            },
        )
    }

    fn repo(f: &ImageField) -> String {
        f.repository().map(|r| r.to_string()).unwrap_or_default()
    }

    const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      initContainers:
        - name: init
          image: busybox:1.36
      containers:
        - name: app # the app
          image: 127.0.0.1:5000/shop/api:1.2.3
        - name: sidecar
          image: \"docker.io/envoyproxy/envoy:v1.29.0\"
      ephemeralContainers:
        - name: debug
          image: 'ghcr.io/org/debug:1.0.0'
";

    #[test]
    fn finds_every_container_kind_of_a_deployment() {
        let fields = scan_ok("web.yaml", DEPLOYMENT);
        let got: Vec<_> = fields
            .iter()
            .map(|f| match &f.kind {
                FieldKind::Container {
                    resource,
                    container,
                } => (
                    resource.as_str(),
                    container.as_str(),
                    repo(f),
                    f.current().0.unwrap().to_string(),
                    f.line,
                ),
                k => panic!("{k:?}"),
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "Deployment/web",
                    "init",
                    "registry-1.docker.io/library/busybox".into(),
                    "1.36".into(),
                    10
                ),
                (
                    "Deployment/web",
                    "app",
                    "127.0.0.1:5000/shop/api".into(),
                    "1.2.3".into(),
                    13
                ),
                (
                    "Deployment/web",
                    "sidecar",
                    "registry-1.docker.io/envoyproxy/envoy".into(),
                    "v1.29.0".into(),
                    15
                ),
                (
                    "Deployment/web",
                    "debug",
                    "ghcr.io/org/debug".into(),
                    "1.0.0".into(),
                    18
                ),
            ]
        );
        assert_eq!(fields[1].column, 18);
    }

    #[test]
    fn edit_changes_only_the_scalar_and_keeps_quotes_and_comments() {
        let out = retag("web.yaml", DEPLOYMENT, 1, "1.3.0");
        assert_eq!(out, DEPLOYMENT.replace("api:1.2.3", "api:1.3.0"));
        let out = retag("web.yaml", DEPLOYMENT, 2, "v1.30.1");
        assert_eq!(
            out,
            DEPLOYMENT.replace(
                "\"docker.io/envoyproxy/envoy:v1.29.0\"",
                "\"docker.io/envoyproxy/envoy:v1.30.1\""
            )
        );
        let out = retag("web.yaml", DEPLOYMENT, 3, "1.1.0");
        assert_eq!(
            out,
            DEPLOYMENT.replace("'ghcr.io/org/debug:1.0.0'", "'ghcr.io/org/debug:1.1.0'")
        );
    }

    #[test]
    fn name_is_kept_as_written_and_digest_pinned() {
        let src = "kind: Pod\nspec:\n  containers:\n    - image: docker.io/nginx:1.25@sha256:1111111111111111111111111111111111111111111111111111111111111111\n";
        let fields = scan_ok("pod.yaml", src);
        assert_eq!(fields[0].current(), (Some("1.25"), Some(D1)));
        assert_eq!(
            fields[0].kind,
            FieldKind::Container {
                resource: "Pod".into(),
                container: "#0".into()
            }
        );
        let out = edit(
            "pod.yaml",
            src,
            0,
            &Update {
                name: "nginx",
                tag: Some("1.26"),
                digest: Some(D2),
            },
        );
        assert_eq!(
            out,
            src.replace(&format!("1.25@{D1}"), &format!("1.26@{D2}"))
        );
        // An update without a digest drops the stale one from a whole reference.
        let out = edit(
            "pod.yaml",
            src,
            0,
            &Update {
                name: "nginx",
                tag: Some("1.26"),
                digest: None,
            },
        );
        assert_eq!(out, src.replace(&format!("1.25@{D1}"), "1.26"));
    }

    #[test]
    fn cronjob_rollout_and_multi_document_files() {
        let src = "\
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job, image: 'ghcr.io/a/job:1.0.0'}]
...
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: canary
spec:
  template:
    spec:
      containers:
        - {name: app, image: ghcr.io/a/app:2.0.0}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
data:
  image: ghcr.io/a/not-a-container:1.0.0
";
        let fields = scan_ok("all.yaml", src);
        let kinds: Vec<_> = fields.iter().map(|f| f.kind.clone()).collect();
        assert_eq!(
            kinds,
            [
                FieldKind::Container {
                    resource: "CronJob/nightly".into(),
                    container: "job".into()
                },
                FieldKind::Container {
                    resource: "Rollout/canary".into(),
                    container: "app".into()
                },
            ]
        );
        let out = retag("all.yaml", src, 1, "2.1.0");
        assert_eq!(out, src.replace("app:2.0.0", "app:2.1.0"));
        let out = retag("all.yaml", src, 0, "1.10");
        assert_eq!(out, src.replace("job:1.0.0", "job:1.10"));
    }

    #[test]
    fn crlf_bom_and_non_ascii_survive() {
        let src = "\u{feff}# Größe: ünïcödé\r\nkind: Pod\r\nmetadata: {name: café}\r\nspec:\r\n  containers:\r\n  - name: app\r\n    image: ghcr.io/a/app:1.0.0 # 日本語\r\n";
        let fields = scan_ok("pod.yaml", src);
        assert_eq!((fields[0].line, fields[0].column), (7, 12));
        assert_eq!(
            fields[0].kind,
            FieldKind::Container {
                resource: "Pod/café".into(),
                container: "app".into()
            }
        );
        let out = retag("pod.yaml", src, 0, "1.0.1");
        assert_eq!(out, src.replace("app:1.0.0", "app:1.0.1"));
    }

    #[test]
    fn anchors_are_kept_and_aliases_are_not_fields() {
        let src = "kind: Pod\nspec:\n  containers:\n  - name: a\n    image: &img ghcr.io/a/app:1.0.0\n  - name: b\n    image: *img\n";
        let fields = scan_ok("pod.yaml", src);
        assert_eq!(fields.len(), 1);
        let out = retag("pod.yaml", src, 0, "1.1.0");
        assert_eq!(out, src.replace("app:1.0.0", "app:1.1.0"));
    }

    #[test]
    fn values_that_are_not_image_references_are_not_fields() {
        let src = "kind: Pod\nspec:\n  containers:\n  - image: \"{{ .Values.image }}\"\n  - image: $(IMG)\n  - image: ''\n  - image:\n";
        assert!(scan_ok("pod.yaml", src).is_empty());
    }

    #[test]
    fn templates_are_parse_errors_naming_the_place() {
        let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n{{- range .Values.c }}\n  - image: {{ .image }}\n{{- end }}\n";
        let err = scan(Path::new("chart/templates/pod.yaml"), src, &[]).unwrap_err();
        let ManifestError::Parse { line, .. } = &err else {
            panic!("{err:?}")
        };
        assert!(*line >= 5, "{err}");
        assert!(
            err.to_string().starts_with("chart/templates/pod.yaml:"),
            "{err}"
        );
    }

    #[test]
    fn block_scalars_are_refused() {
        let src = "kind: Pod\nspec:\n  containers:\n  - image: |\n      ghcr.io/a/app:1.0.0\n";
        let fields = scan_ok("pod.yaml", src);
        let err = fields[0].edits(&tag("1.1.0")).unwrap_err();
        assert_eq!(err.label(), "block_scalar");
        assert!(err.to_string().starts_with("pod.yaml:5:7:"), "{err}");
    }

    const KUSTOMIZATION: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
images:
  - name: ghcr.io/a/api
    newTag: 1.0.0 # pinned
  - name: app
    newName: 127.0.0.1:5000/shop/app
  - {name: ghcr.io/a/flow, newName: ghcr.io/a/flow2}
  - name: ghcr.io/a/pinned
    newTag: \"2.0.0\"
    digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
";

    #[test]
    fn kustomize_entries() {
        let fields = scan_ok("base/kustomization.yaml", KUSTOMIZATION);
        let got: Vec<_> = fields
            .iter()
            .map(|f| (f.kind.clone(), repo(f), f.current(), f.line))
            .collect();
        let k = |n: &str| FieldKind::Kustomize { name: n.into() };
        assert_eq!(
            got,
            [
                (
                    k("ghcr.io/a/api"),
                    "ghcr.io/a/api".into(),
                    (Some("1.0.0"), None),
                    5
                ),
                (k("app"), "127.0.0.1:5000/shop/app".into(), (None, None), 6),
                (
                    k("ghcr.io/a/flow"),
                    "ghcr.io/a/flow2".into(),
                    (None, None),
                    8
                ),
                (
                    k("ghcr.io/a/pinned"),
                    "ghcr.io/a/pinned".into(),
                    (Some("2.0.0"), Some(D1)),
                    10
                ),
            ]
        );
        // The same content under another file name is not a kustomization.
        assert!(scan_ok("images.yaml", KUSTOMIZATION).is_empty());
        assert_eq!(scan_ok("Kustomization", KUSTOMIZATION).len(), 4);
    }

    #[test]
    fn kustomize_edits_and_insertions() {
        let name = "kustomization.yaml";
        let out = retag(name, KUSTOMIZATION, 0, "1.1.0");
        assert_eq!(
            out,
            KUSTOMIZATION.replace("newTag: 1.0.0 # pinned", "newTag: 1.1.0 # pinned")
        );
        let out = retag(name, KUSTOMIZATION, 1, "1.10");
        assert_eq!(
            out,
            KUSTOMIZATION.replace(
                "newName: 127.0.0.1:5000/shop/app\n",
                "newName: 127.0.0.1:5000/shop/app\n    newTag: \"1.10\"\n"
            )
        );
        let out = edit(
            name,
            KUSTOMIZATION,
            2,
            &Update {
                name: "x",
                tag: Some("3.0.0"),
                digest: Some(D2),
            },
        );
        assert_eq!(
            out,
            KUSTOMIZATION.replace("flow2}", &format!("flow2, newTag: 3.0.0, digest: {D2}}}"))
        );
        // Dropping a digest empties it rather than leave a stale pin.
        let out = retag(name, KUSTOMIZATION, 3, "2.1.0");
        assert_eq!(
            out,
            KUSTOMIZATION
                .replace("\"2.0.0\"", "\"2.1.0\"")
                .replace(&format!("digest: {D1}"), "digest: \"\"")
        );
    }

    #[test]
    fn kustomize_insertion_after_a_comment_with_crlf_and_at_end_of_file() {
        let src = "images:\r\n- name: ghcr.io/a/api # the api\r\n- name: ghcr.io/a/web";
        let out = retag("kustomization.yml", src, 0, "1.0.0");
        assert_eq!(
            out,
            "images:\r\n- name: ghcr.io/a/api # the api\r\n  newTag: 1.0.0\r\n- name: ghcr.io/a/web"
        );
        let out = retag("kustomization.yml", src, 1, "1.0.0");
        assert_eq!(out, format!("{src}\r\n  newTag: 1.0.0"));
    }

    const VALUES: &str = "\
# podinfo-ish values
replicaCount: 1
image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.14.1
  pullPolicy: IfNotPresent
redis:
  image:
    registry: docker.io
    repository: bitnami/redis
    tag: '7.2'
    digest: \"\"
sidecars:
  - name: proxy
    image: envoyproxy/envoy:v1.29.0
worker: {image: {repository: ghcr.io/a/worker}}
notAnImage:
  image: \"{{ .Values.x }}\"
";

    #[test]
    fn helm_conventional_shapes() {
        let fields = scan_ok("values.yaml", VALUES);
        let got: Vec<_> = fields
            .iter()
            .map(|f| (f.kind.clone(), repo(f), f.current(), f.line))
            .collect();
        let h = |p: &str| FieldKind::HelmValues { path: p.into() };
        assert_eq!(
            got,
            [
                (
                    h("image"),
                    "ghcr.io/stefanprodan/podinfo".into(),
                    (Some("6.14.1"), None),
                    5
                ),
                (
                    h("redis.image"),
                    "registry-1.docker.io/bitnami/redis".into(),
                    (Some("7.2"), None),
                    11
                ),
                (
                    h("sidecars[0].image"),
                    "registry-1.docker.io/envoyproxy/envoy".into(),
                    (Some("v1.29.0"), None),
                    15
                ),
                (
                    h("worker.image"),
                    "ghcr.io/a/worker".into(),
                    (None, None),
                    16
                ),
            ]
        );
        let out = retag("values.yaml", VALUES, 0, "6.15");
        assert_eq!(out, VALUES.replace("tag: 6.14.1", "tag: \"6.15\""));
        let out = edit(
            "values.yaml",
            VALUES,
            1,
            &Update {
                name: "x",
                tag: Some("7.4"),
                digest: Some(D1),
            },
        );
        assert_eq!(
            out,
            VALUES
                .replace("'7.2'", "'7.4'")
                .replace("digest: \"\"", &format!("digest: \"{D1}\""))
        );
        let out = retag("values.yaml", VALUES, 2, "v1.30.0");
        assert_eq!(out, VALUES.replace("envoy:v1.29.0", "envoy:v1.30.0"));
        let out = retag("values.yaml", VALUES, 3, "1.0.0");
        assert_eq!(
            out,
            VALUES.replace("ghcr.io/a/worker}}", "ghcr.io/a/worker, tag: 1.0.0}}")
        );
        // A document with apiVersion/kind is not Helm values.
        assert!(scan_ok("v.yaml", &format!("apiVersion: v1\nkind: X\n{VALUES}")).is_empty());
    }

    #[test]
    fn missing_keys_are_added_after_their_siblings() {
        let src = "image:\n  repository: ghcr.io/a/x # repo\n  tag: 1.0.0\n  pullSecrets: []\n";
        let update = Update {
            name: "ghcr.io/a/x",
            tag: Some("1.0.0"),
            digest: Some(D1),
        };
        let out = edit("values.yaml", src, 0, &update);
        assert_eq!(
            out,
            src.replace("tag: 1.0.0\n", &format!("tag: 1.0.0\n  digest: {D1}\n"))
        );
        let src = "image:\n  repository: ghcr.io/a/x\n  pullSecrets: []\n";
        let out = edit("values.yaml", src, 0, &update);
        let want = format!(
            "image:\n  repository: ghcr.io/a/x\n  tag: 1.0.0\n  digest: {D1}\n  pullSecrets: []\n"
        );
        assert_eq!(out, want);
    }

    #[test]
    fn helm_explicit_paths() {
        let src = "app:\n  images:\n    - repo: ghcr.io/a/one\n      version: 1.0.0\n    - repo: ghcr.io/a/two\nfull: ghcr.io/a/three:3.0.0\n";
        let paths = [
            HelmPaths {
                repository: Some("app.images[1].repo".into()),
                tag: Some("app.images[1].version".into()),
                ..Default::default()
            },
            HelmPaths {
                repository: Some("app.images[0].repo".into()),
                tag: Some("app.images[0].version".into()),
                ..Default::default()
            },
            HelmPaths {
                image: Some("full".into()),
                ..Default::default()
            },
        ];
        let fields = scan(Path::new("values-prod.yaml"), src, &paths).unwrap();
        let got: Vec<_> = fields
            .iter()
            .map(|f| (f.kind.clone(), repo(f), f.current()))
            .collect();
        let h = |p: &str| FieldKind::HelmValues { path: p.into() };
        assert_eq!(
            got,
            [
                (
                    h("app.images[0].repo"),
                    "ghcr.io/a/one".into(),
                    (Some("1.0.0"), None)
                ),
                (
                    h("app.images[1].repo"),
                    "ghcr.io/a/two".into(),
                    (None, None)
                ),
                (h("full"), "ghcr.io/a/three".into(), (Some("3.0.0"), None)),
            ]
        );
        let f = &fields[1];
        let out = apply_edits(Path::new("v.yaml"), src, &f.edits(&tag("2.0.0")).unwrap()).unwrap();
        assert_eq!(
            out,
            src.replace(
                "repo: ghcr.io/a/two\n",
                "repo: ghcr.io/a/two\n      version: 2.0.0\n"
            )
        );
        // Explicit paths win over the conventional reading of the same scalar.
        let src = "image:\n  repository: ghcr.io/a/x\n  tag: 1.0.0\n";
        let paths = [HelmPaths {
            repository: Some("image.repository".into()),
            tag: Some("image.tag".into()),
            ..Default::default()
        }];
        let fields = scan(Path::new("values.yaml"), src, &paths).unwrap();
        assert_eq!(fields.len(), 1);
        assert_eq!(fields[0].kind, h("image.repository"));
    }

    #[test]
    fn markers() {
        let src = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    tags.datadoghq.com/version: \"1.2.3\" # tagpilot: checkout-api:tag
spec:
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/a/app:1.2.3 # {\"$imagepolicy\": \"flux-system:checkout-api\"}
          env:
            - name: IMG
              value: ghcr.io/a/app # {\"$imagepolicy\": \"flux-system:checkout-api:name\"}
            - name: TAG
              value: '1.2.3'   # tagpilot: shop:checkout-api:tag
            - name: DIGEST
              value: \"\" # tagpilot: checkout-api:digest
            - name: NOT
              value: x # just a comment: tagpilot: x
";
        let fields = scan_ok("web.yaml", src);
        let got: Vec<_> = fields
            .iter()
            .map(|f| (f.kind.clone(), f.current(), f.repository().is_none()))
            .collect();
        let m = |p: &str, ns: Option<&str>, part| FieldKind::Marker {
            policy: p.into(),
            namespace: ns.map(String::from),
            part,
        };
        assert_eq!(
            got,
            [
                (
                    m("checkout-api", None, MarkerPart::Tag),
                    (Some("1.2.3"), None),
                    true
                ),
                (
                    m("checkout-api", Some("flux-system"), MarkerPart::Whole),
                    (Some("1.2.3"), None),
                    true
                ),
                (
                    m("checkout-api", Some("flux-system"), MarkerPart::Name),
                    (None, None),
                    true
                ),
                (
                    m("checkout-api", Some("shop"), MarkerPart::Tag),
                    (Some("1.2.3"), None),
                    true
                ),
                (
                    m("checkout-api", None, MarkerPart::Digest),
                    (None, None),
                    true
                ),
            ]
        );
        let update = Update {
            name: "127.0.0.1:5000/shop/checkout-api",
            tag: Some("1.3.0"),
            digest: Some(D1),
        };
        let edits: Vec<Edit> = fields
            .iter()
            .flat_map(|f| f.edits(&update).unwrap())
            .collect();
        let out = apply_edits(Path::new("web.yaml"), src, &edits).unwrap();
        let want = src
            .replace("\"1.2.3\" #", "\"1.3.0\" #")
            .replace(
                "ghcr.io/a/app:1.2.3",
                &format!("127.0.0.1:5000/shop/checkout-api:1.3.0@{D1}"),
            )
            .replace(
                "value: ghcr.io/a/app #",
                "value: 127.0.0.1:5000/shop/checkout-api #",
            )
            .replace("'1.2.3'", "'1.3.0'")
            .replace("value: \"\"", &format!("value: \"{D1}\""));
        assert_eq!(out, want);
    }

    #[test]
    fn overlapping_or_stale_edits_are_refused() {
        let fields = scan_ok("web.yaml", DEPLOYMENT);
        let mut edits = fields[1].edits(&tag("2.0.0")).unwrap();
        edits.extend(fields[1].edits(&tag("3.0.0")).unwrap());
        let err = apply_edits(Path::new("web.yaml"), DEPLOYMENT, &edits).unwrap_err();
        assert_eq!(err.label(), "bad_edit");
        // Edits made for one text do not verify against another.
        let edits = fields[1].edits(&tag("2.0.0")).unwrap();
        let other = DEPLOYMENT.replace("name: web", "name: webby");
        let err = apply_edits(Path::new("web.yaml"), &other, &edits).unwrap_err();
        assert_eq!(err.label(), "verification", "{err}");
    }

    #[test]
    fn verification_rejects_an_insertion_into_the_wrong_place() {
        let src = "images:\n  - name: ghcr.io/a/api\n";
        let fields = scan_ok("kustomization.yaml", src);
        let mut edits = fields[0].edits(&tag("1.0.0")).unwrap();
        // Same text, one level too shallow: it lands in the root mapping.
        edits[0].text = "\nnewTag: 1.0.0".into();
        let err = apply_edits(Path::new("kustomization.yaml"), src, &edits).unwrap_err();
        assert_eq!(err.label(), "verification", "{err}");
        // A replacement that reads back differently.
        let fields = scan_ok("web.yaml", DEPLOYMENT);
        let mut edits = fields[1].edits(&tag("2.0.0")).unwrap();
        edits[0].text = "a: b".into();
        let err = apply_edits(Path::new("web.yaml"), DEPLOYMENT, &edits).unwrap_err();
        assert_eq!(err.label(), "verification", "{err}");
    }

    #[test]
    fn no_change_means_no_edits() {
        let fields = scan_ok("web.yaml", DEPLOYMENT);
        let update = Update {
            name: "127.0.0.1:5000/shop/api",
            tag: Some("1.2.3"),
            digest: None,
        };
        assert!(fields[1].edits(&update).unwrap().is_empty());
        assert_eq!(
            apply_edits(Path::new("web.yaml"), DEPLOYMENT, &[]).unwrap(),
            DEPLOYMENT
        );
    }
}
