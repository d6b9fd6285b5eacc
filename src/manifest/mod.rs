//! Finding image fields in YAML files and editing them surgically.
//!
//! tagpilot's promise is that `apply` changes not one byte besides the image fields, so this
//! module never re-serialises YAML: it reads granit-parser's events with their byte spans, finds
//! the scalars that hold images ([`scan`]), produces byte replacements for exactly those scalars
//! ([`ImageField::edits`]), and splices them into the original text ([`apply_edits`]). Every
//! edited text is parsed again and compared, event by event, with the original; anything but the
//! intended values (and an intended inserted key) is an error and no text comes out.
//!
//! Pure: no I/O. It must never guess: a block scalar holding an image, an alias, a value an
//! alias reads (writing it would move the alias too), or an empty value is refused with an
//! error naming `file:line:column` rather than rewritten; a reference it reads and cannot write
//! is handed back as a [`DroppedReference`] for the planner to name. A YAML null (`null`, `~`)
//! is an empty value, never the text `null`.
//!
//! What counts as a field:
//! - containers (`containers`, `initContainers`, `ephemeralContainers`) of Pod templates in
//!   Deployment, StatefulSet, DaemonSet, ReplicaSet, ReplicationController, Job, CronJob, Pod,
//!   PodTemplate and Argo Rollout documents (also inside `kind: List`);
//! - `images:` entries of `kustomization.yaml`, `kustomization.yml` and `Kustomization` files,
//!   whatever their `kind` (`Kustomization`, or `Component` for kustomize components). An entry is written only in the keys it already has (`newTag`,
//!   `digest`); only an entry with nothing but a `name` gets them added. An entry that pins
//!   neither (only `newName` or `tagSuffix`) is a field that is never written: the planner holds
//!   it, naming what it has instead. (Image Updater's rule, a whole
//!   entry added for an image `images:` does not name, is [`add_kustomize_image`], for
//!   Applications only.);
//! - in documents that are not Kubernetes resources (Helm values: not both `apiVersion` and
//!   `kind` as values, so a chart's own `kind: Deployment` setting is values), `image:`
//!   holding either a `{registry, repository, tag, digest}` map (registry, tag and digest
//!   optional; the image is `<registry>/<repository>`, as the chart composes it) or a whole
//!   reference string, at any depth (a name without tag or digest with a `tag` key beside it,
//!   ingress-nginx's `{registry, image, tag, digest}`, is read as the map is); plus the
//!   explicit [`HelmPaths`] passed to [`scan`], in any document;
//! - any scalar with a marker comment after it on its line: `# tagpilot: [ns:]policy[:part]` or
//!   Flux's `# {"$imagepolicy": "ns:policy[:part]"}`, part being `tag`, `name` or `digest`;
//! - a chart's version where teams pin it ([`FieldKind::Chart`], `detect/chart.rs`): Argo CD
//!   Application sources, `Chart.yaml` dependencies, kustomize `helmCharts`, Flux `HelmRelease`
//!   and `OCIRepository`, helmfile releases; keyed by the chart (`policy::chart`), so only a
//!   chart policy owns one.
//!
//! A Go-templated file (helmfile's `.gotmpl`, `.yaml.tpl`) is read with each line a template
//! expression takes as a comment of its length (`template.rs`): its literal lines are fields as
//! in any file, its template lines are handed back ([`Scanned::templated`]) and never edited.
//!
//! A scalar belongs to at most one field. A marker wins over every other reading of its scalar
//! (a Flux-marked container image is a marker field, not also a container field), and a
//! structured field one of whose scalars carries a marker is dropped; explicit Helm paths win
//! over the conventional Helm shapes. Values that are not valid image references (`$(IMG)`,
//! `"{{ .Values.image }}"`) are not fields.

mod add;
mod detect;
mod edit;
#[doc(hidden)]
pub mod fuzzing;
mod helm_path;
mod labels;
mod render;
mod template;
mod tree;
mod verify;

use std::ops::Range;
use std::path::{Path, PathBuf};

use crate::image::Repository;
use crate::policy::HelmPaths;

use render::Quote;

pub use add::{KustomizeImage, add_kustomize_image};
pub use edit::apply_edits;
pub use helm_path::{explain_helm_path, helm_image_name, helm_value};
pub use labels::{
    ImageMove, Label, LeftLabel, LeftReason, MovedLabel, VersionLabelEdits, version_labels,
};

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
    /// Collections nested deeper than the YAML reader's limit: no manifest is, and walking it
    /// would only cost stack. Left alone.
    #[error(
        "{}:{line}:{column}: nested deeper than {limit} levels, left alone",
        file.display()
    )]
    TooDeep {
        file: PathBuf,
        line: usize,
        column: usize,
        limit: usize,
    },
    /// Valid YAML, perhaps, but past one of the reader's limits (see [`tree::failure`]): left
    /// alone, and said to be a limit, never invalid YAML.
    #[error(
        "{}:{line}:{column}: exceeds tagpilot's limit of {limit}, left alone",
        file.display()
    )]
    OverLimit {
        file: PathBuf,
        line: usize,
        column: usize,
        limit: String,
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
    /// The error for a file the YAML reader stopped on: too deep, or not valid YAML.
    pub(crate) fn unreadable(path: &Path, f: tree::ParseFailure) -> ManifestError {
        let file = path.to_path_buf();
        if f.too_deep {
            let options = tree::options();
            ManifestError::TooDeep {
                file,
                line: f.line,
                column: f.column,
                limit: options.block_nesting_limit.max(options.flow_nesting_limit),
            }
        } else if let Some(limit) = f.over_limit {
            ManifestError::OverLimit {
                file,
                line: f.line,
                column: f.column,
                limit,
            }
        } else {
            ManifestError::Parse {
                file,
                line: f.line,
                column: f.column,
                message: f.message,
            }
        }
    }

    /// A short, stable label for metrics and reports.
    pub fn label(&self) -> &'static str {
        match self {
            ManifestError::Parse { .. } => "parse",
            ManifestError::TooDeep { .. } => "too_deep",
            ManifestError::OverLimit { .. } => "over_limit",
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
    /// A chart's version where a team pins it (issue 32): `place` names it as reports do
    /// (`Application/web source targetRevision`, `helmfile release web`).
    Chart { place: String },
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
    /// The key is absent and its authors pin the image by other means (a kustomize entry with
    /// only `newName`, `tagSuffix` or `digest`): never added. `only` names what an entry that
    /// pins neither tag nor digest has instead (`` only `newName` ``), so its hold can say it.
    Unpinned {
        only: Option<&'static str>,
    },
}

/// Which parts of a reference a field lets tagpilot write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pins {
    pub tag: bool,
    pub digest: bool,
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

/// The Helm charts among a checkout's files: the directories holding a `Chart.yaml`.
///
/// A chart's `templates/` are Go templates that only sometimes parse as YAML; an image written
/// there literally is the chart author's, released with the chart, so tagpilot never edits a
/// template. It edits the chart's values files instead.
#[derive(Debug, Clone, Default)]
pub struct HelmCharts {
    roots: std::collections::BTreeSet<PathBuf>,
}

impl HelmCharts {
    /// From every file path of a checkout (relative or not, as long as they agree).
    pub fn from_paths<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Self {
        let roots = paths
            .into_iter()
            .filter(|p| p.as_ref().file_name().is_some_and(|n| n == "Chart.yaml"))
            .map(|p| {
                p.as_ref()
                    .parent()
                    .map(Path::to_path_buf)
                    .unwrap_or_default()
            })
            .collect();
        HelmCharts { roots }
    }

    /// The chart whose `templates/` holds `path`, if any.
    pub fn template_of(&self, path: &Path) -> Option<&Path> {
        path.ancestors()
            .skip(1)
            .filter(|dir| dir.file_name().is_some_and(|n| n == "templates"))
            .find_map(|dir| {
                let chart = dir.parent().unwrap_or(Path::new(""));
                self.roots.get(chart).map(PathBuf::as_path)
            })
    }
}

/// Finds every image field in a YAML file. `helm` lists explicit value paths that apply to it.
pub fn scan(path: &Path, src: &str, helm: &[HelmPaths]) -> Result<Vec<ImageField>, ManifestError> {
    scan_with_markers(path, src, helm).map(|s| s.fields)
}

/// What a scan of one file found: its fields, and what it read and cannot act on.
#[derive(Debug, Default)]
pub struct Scanned {
    pub fields: Vec<ImageField>,
    /// Marker comments that resolve to no field, each with the reason.
    pub unresolved: Vec<UnresolvedMarker>,
    /// Image references read in the shapes above that cannot be written, each with the reason.
    pub dropped: Vec<DroppedReference>,
    /// In a Go-templated file (helmfile's `.gotmpl`, `.yaml.tpl`), the lines a template
    /// expression takes: read as YAML comments, never edited; the planner names those that
    /// mention a policy's image or chart.
    pub templated: Vec<TemplatedLine>,
}

/// A line of a Go-templated file that a template expression takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplatedLine {
    /// 1-based.
    pub line: usize,
    pub text: String,
}

pub use template::is_templated;

/// [`scan`], and what it read and cannot act on: marker comments that resolve to no field, and
/// references it cannot write.
pub fn scan_with_markers(
    path: &Path,
    src: &str,
    helm: &[HelmPaths],
) -> Result<Scanned, ManifestError> {
    detect::fields(path, src, helm).map_err(|f| ManifestError::unreadable(path, f))
}

/// An image reference in one of the shapes tagpilot reads whose tag or digest it cannot write:
/// an alias, a value an alias elsewhere reads (writing it would move that place too), a
/// collection, or a value that is not a tag. The planner names it against the policy that
/// follows its image, so it is never a silent "no reference".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DroppedReference {
    pub kind: FieldKind,
    /// 1-based, of the value that cannot be written (or of the name, when that is the reason).
    pub line: usize,
    pub column: usize,
    /// The image, where its name could be read.
    pub repository: Option<Repository>,
    pub reason: String,
    /// Byte offset of the name scalar: a reference another reading took is not dropped.
    name_at: usize,
}

/// A marker comment (tagpilot's or Flux's) that resolves to no field: nothing would be written
/// where it stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnresolvedMarker {
    pub line: usize,
    pub column: usize,
    /// The comment as written, without `#`.
    pub marker: String,
    pub reason: String,
}

#[cfg(test)]
mod tests;
