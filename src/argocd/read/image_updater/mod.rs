//! Argo CD Image Updater's `ImageUpdater` resources (`argocd-image-updater.argoproj.io/v1alpha1`),
//! the configuration of Image Updater 1.x: which Applications a resource selects, and what its
//! settings say for each of them.
//!
//! Pure. A selected Application's settings are read from the resource's typed fields into the
//! settings' typed input and checked by the one reader annotations go through too
//! ([`super::settings::read`]; never written out as annotation strings and parsed back), so a
//! setting means the same whichever way it is written, and a resource and the equivalent
//! annotations plan alike. What the reader cannot honour is reported under the resource's
//! field (`ImageUpdater argocd/web:
//! spec.applicationRefs[0].images[1].commonUpdateSettings.allowTags`).
//!
//! Which configuration counts, per Application:
//! - no `ImageUpdater` resource at all: its annotations, as Image Updater 0.x read them;
//! - otherwise, as Image Updater 1.x: only the resources in the Application's namespace count.
//!   Of each resource the most specific matching `applicationRefs` entry applies (an exact name,
//!   then more literal characters, then label selectors); `useAnnotations: true` makes the
//!   Application's annotations its configuration. An Application no resource selects is not
//!   updated, and the report says why. Two resources selecting one Application is a conflict,
//!   reported, and neither applies.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::application::{DocumentError, read_objects};

/// `apiVersion` of the resources this module reads.
pub const API_VERSION: &str = "argocd-image-updater.argoproj.io/v1alpha1";
/// `kind` of the resources this module reads.
pub const KIND: &str = "ImageUpdater";
/// The namespace of a resource or an Application read from git that names none: Argo CD's and
/// Image Updater's usual one.
pub const DEFAULT_NAMESPACE: &str = "argocd";

/// One `ImageUpdater` resource.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdater {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: UpdaterSpec,
    /// The status as last written (from the cluster), to write only what changed.
    #[serde(default)]
    pub status: Option<serde_json::Value>,
    /// Where it was read from (`argocd/updaters.yaml:12`, `cluster`), for reports.
    #[serde(skip)]
    pub origin: String,
}

/// The metadata tagpilot reads; lenient, like every Kubernetes object's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub generation: Option<i64>,
}

/// `spec`. Unknown fields are refused: a misspelt setting must not be silently dropped.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdaterSpec {
    /// Removed upstream in 2026 (Applications are looked up in the resource's own namespace);
    /// still read, with a warning, so an older resource keeps working.
    pub namespace: Option<String>,
    pub common_update_settings: Option<CommonUpdateSettings>,
    pub write_back_config: Option<WriteBackConfig>,
    pub application_refs: Vec<ApplicationRef>,
    pub images_verification: Option<ImagesVerification>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationRef {
    /// A glob over Application names, as Go's `filepath.Match` reads it.
    pub name_pattern: String,
    #[serde(default)]
    pub label_selectors: Option<LabelSelector>,
    #[serde(default)]
    pub use_annotations: Option<bool>,
    #[serde(default)]
    pub images_verification: Option<ImagesVerification>,
    #[serde(default)]
    pub common_update_settings: Option<CommonUpdateSettings>,
    #[serde(default)]
    pub write_back_config: Option<WriteBackConfig>,
    #[serde(default)]
    pub images: Vec<ImageConfig>,
}

/// A Kubernetes `LabelSelector`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageConfig {
    pub alias: String,
    /// `registry/image` with a starting tag or a constraint after `:`, as in `image-list`.
    pub image_name: String,
    #[serde(default)]
    pub common_update_settings: Option<CommonUpdateSettings>,
    #[serde(default)]
    pub manifest_targets: Option<ManifestTarget>,
    #[serde(default)]
    pub images_verification: Option<ImagesVerification>,
}

/// Settings inherited spec → ref → image, field by field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CommonUpdateSettings {
    pub update_strategy: Option<String>,
    pub force_update: Option<bool>,
    pub allow_tags: Option<String>,
    pub ignore_tags: Option<Vec<String>>,
    pub pull_secret: Option<String>,
    pub platforms: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteBackConfig {
    pub method: Option<String>,
    pub git_config: Option<GitConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct GitConfig {
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub write_back_target: Option<String>,
    pub pull_request: Option<PullRequest>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PullRequest {
    pub github: Option<Empty>,
    pub gitlab: Option<Empty>,
    pub labels: Vec<String>,
}

/// `github: {}`: the provider's settings, none so far.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ManifestTarget {
    pub helm: Option<HelmTarget>,
    pub kustomize: Option<KustomizeTarget>,
    pub plugin: Option<HelmTarget>,
}

/// `helm:` (value paths) and `plugin:` (environment variable names) have the same three fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HelmTarget {
    pub name: Option<String>,
    pub tag: Option<String>,
    pub spec: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KustomizeTarget {
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ImagesVerification {
    pub enabled: Option<bool>,
    pub cosign_key: Option<SecretRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretRef {
    pub secret_name: String,
    pub key: String,
}

impl ImageUpdater {
    /// `namespace/name`, as reports and status name it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace(), self.metadata.name)
    }

    /// The namespace whose Applications it selects.
    pub fn namespace(&self) -> &str {
        self.metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE)
    }
}

impl crate::application::Object for ImageUpdater {
    fn kind_and_api_version(&self) -> (&str, &str) {
        (&self.kind, &self.api_version)
    }
}

/// Reads every `ImageUpdater` document of a (multi-document) YAML text; other documents are
/// skipped. An `ImageUpdater` with an unknown or mistyped field makes the file an error that
/// names the file, line and column.
pub fn read_documents(path: &Path, text: &str) -> Result<Vec<ImageUpdater>, DocumentError> {
    let found = read_objects(path, text, KIND, |kind, api_version| {
        kind == KIND && api_version.starts_with("argocd-image-updater.argoproj.io/")
    })?;
    Ok(found
        .into_iter()
        .map(|(line, mut u): (usize, ImageUpdater)| {
            u.origin = format!("{}:{line}", path.display());
            u
        })
        .collect())
}

mod select;
mod settings;
#[cfg(test)]
mod tests;

pub use select::{ConfiguredBy, Selected, Selection, UnreadAnnotations, labels_match, select};
pub use settings::valid_alias;
