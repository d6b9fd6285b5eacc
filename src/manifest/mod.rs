//! Finding image fields in YAML files and editing them surgically.
//!
//! INTERFACE SKETCH — filled in by the YAML work.

use std::ops::Range;
use std::path::Path;

use crate::image::{ImageRef, Repository};
use crate::policy::HelmPaths;

#[derive(Debug, thiserror::Error)]
pub enum ManifestError {}

/// One scalar in the source, by byte span.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    pub span: Range<usize>,
    pub value: String,
    pub line: usize,
    pub column: usize,
}

/// Where in a file an image (or a part of one) is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A container of a workload (`Deployment/web`, container `app`).
    Container { resource: String, container: String },
    /// A `kustomization.yaml` `images:` entry, by its `name`.
    Kustomize { name: String },
    /// Helm values at a dotted path (`image`, `worker.image`).
    HelmValues { path: String },
    /// A scalar with a tagpilot or Flux marker comment naming a policy.
    Marker { policy: String, namespace: Option<String>, part: MarkerPart },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerPart {
    Whole,
    Name,
    Tag,
    Digest,
}

/// An image field found in a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageField {
    pub kind: FieldKind,
    /// 1-based line and column of the field's main scalar.
    pub line: usize,
    pub column: usize,
}

/// What to write into a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update<'a> {
    pub name: &'a str,
    pub tag: Option<&'a str>,
    pub digest: Option<&'a str>,
}

/// A replacement of the bytes at `span` by `text` (an insertion when the span is empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edit {
    pub span: Range<usize>,
    pub text: String,
}

impl ImageField {
    /// The repository the field refers to; `None` for markers (they name a policy instead).
    pub fn repository(&self) -> Option<&Repository> {
        todo!()
    }
    /// The tag and digest the field holds now.
    pub fn current(&self) -> (Option<&str>, Option<&str>) {
        todo!()
    }
    pub fn edits(&self, _update: &Update<'_>) -> Vec<Edit> {
        todo!()
    }
}

/// Finds every image field in a YAML file. `helm` lists explicit value paths that apply to it.
pub fn scan(_path: &Path, _src: &str, _helm: &[HelmPaths]) -> Result<Vec<ImageField>, ManifestError> {
    todo!()
}

/// Applies edits and checks the result re-parses to the same document except at the edits.
pub fn apply_edits(_src: &str, _edits: &[Edit]) -> Result<String, ManifestError> {
    let _ = ImageRef::parse;
    todo!()
}
