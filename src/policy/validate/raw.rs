//! The documents as written: what serde reads, every value with its span, before any check.

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::policy::{HelmPaths, RegexOrder};

/// Just enough of a document to name it in an error about the rest.
#[derive(Deserialize)]
pub(super) struct NameOnly {
    pub(super) metadata: Option<NameOnlyMetadata>,
}

#[derive(Deserialize)]
pub(super) struct NameOnlyMetadata {
    pub(super) name: Option<String>,
}

/// What a document says it is, read before anything else.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Header {
    #[serde(default)]
    pub(super) api_version: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) kind: Option<Spanned<String>>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawDocument {
    /// `tagpilot.dev/v1alpha1`.
    #[schemars(with = "String", extend("const" = "tagpilot.dev/v1alpha1"))]
    pub(super) api_version: Spanned<String>,
    /// `ImagePolicy`.
    #[schemars(with = "String", extend("const" = "ImagePolicy"))]
    pub(super) kind: Spanned<String>,
    pub(super) metadata: RawMetadata,
    #[schemars(with = "RawSpec")]
    pub(super) spec: Spanned<RawSpec>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetadata {
    #[schemars(with = "String")]
    pub(super) name: Spanned<String>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) namespace: Option<Spanned<String>>,
    // Accepted so policies can be kept next to Kubernetes resources and labelled like them.
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    pub(super) annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSpec {
    /// One repository (`registry.example/shop/cart`), or a pattern over repositories
    /// (`registry.example/shop/**`: `*` one path segment, `**` any number); a chart policy
    /// sets `chart` instead.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) image: Option<Spanned<String>>,
    /// The Helm chart the policy follows, instead of an image.
    #[serde(default)]
    #[schemars(with = "Option<RawChart>")]
    pub(super) chart: Option<Spanned<RawChart>>,
    /// With a pattern `image`: patterns (or repositories) of the same registry it leaves out.
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) exclude: Vec<Spanned<String>>,
    /// With a pattern `image`: of two patterns matching one reference, the higher priority
    /// wins (default 0). A policy naming one image exactly always wins over a pattern.
    #[serde(default)]
    #[schemars(with = "Option<i32>")]
    pub(super) priority: Option<Spanned<i32>>,
    #[schemars(with = "RawStrategy")]
    pub(super) strategy: Spanned<RawStrategy>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) allow_tags: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) ignore_tags: Vec<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) platforms: Vec<Spanned<String>>,
    #[serde(default)]
    pub(super) pin_digest: bool,
    #[serde(default)]
    pub(super) allow_downgrade: bool,
    #[serde(default)]
    pub(super) replace_unreadable_tags: bool,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) min_age: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) verify: Option<crate::config::verify::VerifyConfig>,
    /// Issue 22: the cosign signatures a tag's image must carry.
    #[serde(default)]
    #[schemars(with = "Option<crate::config::signatures::SignaturesConfig>")]
    pub(super) signatures: Option<Spanned<crate::config::signatures::SignaturesConfig>>,
    #[serde(default)]
    pub(super) version_labels: Option<crate::config::version_labels::VersionLabels>,
    #[schemars(with = "Option<RawPromote>")]
    pub(super) promote: Option<Spanned<RawPromote>>,
    #[serde(default)]
    #[schemars(with = "Vec<RawTarget>")]
    pub(super) targets: Vec<Spanned<RawTarget>>,
}

/// Every strategy is an optional key so that "none" and "two" can be reported as such rather than
/// as serde's enum errors. A key written with no value (`newestBuild:`) counts as present.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawStrategy {
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Option<RawSemver>>")]
    pub(super) semver: Option<Spanned<Option<RawSemver>>>,
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Option<RawRegex>>")]
    pub(super) regex: Option<Spanned<Option<RawRegex>>>,
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Option<RawEmpty>>")]
    pub(super) newest_build: Option<Spanned<Option<RawEmpty>>>,
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Option<RawDigest>>")]
    pub(super) digest: Option<Spanned<Option<RawDigest>>>,
    #[serde(default, deserialize_with = "present")]
    #[schemars(with = "Option<Option<RawAlphabetical>>")]
    pub(super) alphabetical: Option<Spanned<Option<RawAlphabetical>>>,
}

fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmpty {}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSemver {
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) range: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) prerelease: bool,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRegex {
    #[schemars(with = "String")]
    pub(super) pattern: Spanned<String>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) sort_by: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) order: Option<RegexOrder>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDigest {
    #[schemars(with = "String")]
    pub(super) tag: Spanned<String>,
}

#[derive(Deserialize, Clone, Copy, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(super) enum SortOrder {
    Asc,
    Desc,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAlphabetical {
    #[serde(default)]
    pub(super) order: Option<SortOrder>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawTarget {
    #[serde(default)]
    #[schemars(with = "Vec<String>")]
    pub(super) paths: Vec<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) repository: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<HelmPaths>")]
    pub(super) helm: Option<Spanned<HelmPaths>>,
    #[serde(default)]
    pub(super) kustomize: Option<RawKustomize>,
}

#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawKustomize {
    #[schemars(with = "String")]
    pub(super) image_name: Spanned<String>,
}

/// `promote:` as written; `fanIn` and `after` are strings so that a wrong value is said in the
/// policy's own words at its line.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawPromote {
    #[serde(default)]
    #[schemars(with = "Vec<RawUpstream>")]
    pub(super) from: Vec<Spanned<RawUpstream>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) after: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) fan_in: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) write: Option<Spanned<String>>,
}

/// One `promote.from[]` entry: exactly one of `application`, `path`, `policy`.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawUpstream {
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) application: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) namespace: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) path: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) policy: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(super) repository: Option<Spanned<String>>,
}

/// `spec.chart`: an OCI reference (`oci://host/path/chart`), or an HTTP chart repository and
/// the chart's name.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct RawChart {
    /// `oci://host/path/chart` (or `oci://host/path` with `name`), or `https://host/path`.
    pub(super) repository: String,
    /// The chart's name; required for an HTTP chart repository.
    #[serde(default)]
    pub(super) name: Option<String>,
}
