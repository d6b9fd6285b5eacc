//! `ImagePolicy` documents: which image a policy follows, how it picks a tag, and which files it
//! may rewrite.
//!
//! Loading validates everything that can be checked without the network (strategy shape, regexes,
//! ranges, globs, duplicate names) and reports every problem with `file:line:column`.

use std::path::PathBuf;

use crate::image::{Platform, Repository};

/// Where a policy was defined, for error messages and reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLocation {
    pub file: PathBuf,
    pub line: usize,
}

impl std::fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// A validated policy, ready for selection.
#[derive(Debug, Clone)]
pub struct ImagePolicy {
    pub name: String,
    /// `metadata.namespace`; Flux markers name policies as `namespace:name`.
    pub namespace: Option<String>,
    pub source: SourceLocation,
    /// The repository the policy follows, normalised.
    pub image: Repository,
    /// `spec.image` exactly as written (what a `:name` marker receives).
    pub image_name: String,
    pub strategy: Strategy,
    pub allow_tags: Option<regex::Regex>,
    /// `ignoreTags` globs, kept as written for reports and compiled for matching.
    pub ignore_tags: Vec<String>,
    pub ignore_set: globset::GlobSet,
    pub platforms: Vec<Platform>,
    pub pin_digest: bool,
    pub allow_downgrade: bool,
    /// Empty means every file under the root.
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone)]
pub enum Strategy {
    Semver { range: Option<crate::select::Constraint>, prerelease: bool },
    Regex { pattern: regex::Regex, sort_by: Option<String>, order: RegexOrder },
    NewestBuild,
    Digest { tag: String },
    Alphabetical { descending: bool },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegexOrder {
    Numerical,
    Alphabetical,
    Semver,
}

/// Which files a policy may rewrite, and how to find the image in Helm values there.
#[derive(Debug, Clone)]
pub struct Target {
    /// Globs relative to the root, as written.
    pub paths: Vec<String>,
    pub path_set: globset::GlobSet,
    pub helm: Option<HelmPaths>,
}

/// Explicit dotted value paths (`image.repository`, `images[1].tag`) into a Helm values file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelmPaths {
    pub registry: Option<String>,
    pub repository: Option<String>,
    pub tag: Option<String>,
    pub digest: Option<String>,
    /// A single value holding the whole `repo:tag` reference.
    pub image: Option<String>,
}
