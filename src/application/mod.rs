//! The parts of an Argo CD `Application` tagpilot reads, and reading them from YAML files.
//!
//! The types are lenient on purpose (no `deny_unknown_fields`): an Application has many fields
//! tagpilot does not care about, and a newer Argo CD adds more. Pure apart from
//! [`read_documents`]'s caller handing it text.

pub mod override_file;

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// `argoproj.io/v1alpha1` `Application`, as far as tagpilot reads it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Application {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: Metadata,
    /// Shared, not copied: the deployers index ([`crate::affected::Deployers`]) keeps every
    /// Application's spec beside the resolved ones, thousands of them.
    #[serde(default, with = "shared")]
    pub spec: std::sync::Arc<Spec>,
    #[serde(default)]
    pub status: Option<Status>,
    /// Where it was read from (`argocd/apps/web.yaml:12`, `cluster`), for reports.
    #[serde(skip)]
    pub origin: String,
    /// Read from a file: the line each of `metadata.annotations`' keys is written on, in the
    /// map's order (0 where it was not found), so a warning about one names its own line. Gone
    /// with the annotations once they are read.
    #[serde(skip)]
    pub annotation_lines: Vec<usize>,
}

/// An [`Arc`](std::sync::Arc)'d field read and written as its value (serde's own impls need its
/// `rc` feature, which would rebuild every dependency that uses serde).
mod shared {
    use std::sync::Arc;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<T: Serialize, S: Serializer>(value: &Arc<T>, s: S) -> Result<S::Ok, S::Error> {
        T::serialize(value, s)
    }

    pub fn deserialize<'de, T: Deserialize<'de>, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Arc<T>, D::Error> {
        T::deserialize(d).map(Arc::new)
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The objects that own this one; an ApplicationSet's controller owns the Applications it
    /// generates and puts back any change made to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owner_references: Vec<OwnerReference>,
}

/// `metadata.ownerReferences[]`, as far as tagpilot reads it.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerReference {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default)]
    pub source: Option<Source>,
    #[serde(default)]
    pub sources: Vec<Source>,
    /// Where it deploys to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub destination: Option<Destination>,
}

/// `spec.destination`: the cluster (by `server` URL or by `name`) and the namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Destination {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    #[serde(default)]
    pub summary: Option<Summary>,
    /// `Helm`, `Kustomize`, `Directory`, `Plugin`: what Argo CD detected (single source).
    #[serde(default)]
    pub source_type: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    /// The images the live resources run, as Argo CD last saw them.
    #[serde(default)]
    pub images: Vec<String>,
}

/// One source of an Application.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Source {
    #[serde(rename = "repoURL", default)]
    pub repo_url: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub target_revision: Option<String>,
    /// Set for charts from a Helm repository (no git path to write to).
    #[serde(default)]
    pub chart: Option<String>,
    /// Multi-source: the name other sources use in `$<ref>/…` value files.
    #[serde(rename = "ref", default)]
    pub reference: Option<String>,
    // Boxed: most sources set one of the three, or none, and every Application of a cycle is
    // held (twice: resolved, and as a deployer); inline they were most of its size.
    #[serde(default)]
    pub helm: Option<Box<HelmSource>>,
    #[serde(default)]
    pub kustomize: Option<Box<KustomizeSource>>,
    #[serde(default)]
    pub directory: Option<Box<DirectorySource>>,
    /// A config management plugin (helmfile through Argo CD's plugin sidecar, say): kept as
    /// written, so a render can name the source it does not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugin: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmSource {
    #[serde(default)]
    pub value_files: Vec<String>,
    #[serde(default)]
    pub parameters: Vec<HelmParameter>,
    /// The release name; default the Application's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_name: Option<String>,
    /// Values as a YAML string (`values: |`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<String>,
    /// Values as an object; takes precedence over `values`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values_object: Option<serde_json::Value>,
    /// The namespace `helm template` renders into; default the destination's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ignore_missing_value_files: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub skip_crds: bool,
    /// Options tagpilot does not model (`fileParameters`, `kubeVersion`, …): kept so that a
    /// render can say it did not apply them.
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmParameter {
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force_string: bool,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeSource {
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,
    /// The namespace every resource is set to (`kustomize edit set namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_annotations: BTreeMap<String, String>,
    /// Options tagpilot does not model (`patches`, `components`, `replicas`, …).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DirectorySource {
    #[serde(default)]
    pub recurse: bool,
    #[serde(default)]
    pub include: Option<String>,
    #[serde(default)]
    pub exclude: Option<String>,
    /// Options tagpilot does not model (`jsonnet`).
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl Application {
    /// An Application in `argocd` with these labels and annotations and no spec, for unit
    /// tests of what is read from its metadata.
    #[cfg(test)]
    pub(crate) fn in_argocd(
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Application {
        let pairs = |kv: &[(&str, &str)]| {
            kv.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let mut a = Application::default();
        a.metadata.name = name.to_string();
        a.metadata.namespace = Some("argocd".to_string());
        a.metadata.labels = pairs(labels);
        a.metadata.annotations = pairs(annotations);
        a
    }

    /// Every source: `spec.sources` when set (multi-source), else `spec.source`.
    pub fn sources(&self) -> Vec<&Source> {
        if !self.spec.sources.is_empty() {
            self.spec.sources.iter().collect()
        } else {
            self.spec.source.iter().collect()
        }
    }

    pub fn is_multi_source(&self) -> bool {
        !self.spec.sources.is_empty()
    }

    /// The ApplicationSet that generated this Application, by name, if one owns it.
    pub fn application_set(&self) -> Option<&str> {
        self.metadata
            .owner_references
            .iter()
            .find(|o| o.kind == "ApplicationSet" && o.api_version.starts_with("argoproj.io/"))
            .map(|o| o.name.as_str())
    }

    /// The Application as far as naming the ones a change deploys and rendering them read it
    /// ([`crate::affected`]): name, namespace and spec; annotations, labels and status dropped.
    pub fn deployed_view(&self) -> Application {
        Application {
            metadata: Metadata {
                name: self.metadata.name.clone(),
                namespace: self.metadata.namespace.clone(),
                ..Default::default()
            },
            spec: self.spec.clone(),
            ..Default::default()
        }
    }

    /// The `.argocd-source-<app>.yaml` name Argo CD merges for this Application
    /// ([`override_file`]): `<ns>_<app>` for one outside Argo CD's own namespace ("apps in
    /// any namespace").
    pub fn override_file_name(&self) -> String {
        match self.metadata.namespace.as_deref() {
            Some(ns) if ns != "argocd" => {
                format!(".argocd-source-{ns}_{}.yaml", self.metadata.name)
            }
            _ => format!(".argocd-source-{}.yaml", self.metadata.name),
        }
    }

    /// `namespace/name`, or `name` when no namespace is known.
    pub fn id(&self) -> String {
        match &self.metadata.namespace {
            Some(ns) => format!("{ns}/{}", self.metadata.name),
            None => self.metadata.name.clone(),
        }
    }
}

/// A YAML document that is not YAML, or not an Application's shape. `message` is serde-saphyr's,
/// rendered with `file:line:column` and a snippet. `yaml` is that error as serde-saphyr gave it;
/// it is no `source()`, since the message already says it with the file's own line numbers.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DocumentError {
    pub message: String,
    pub yaml: Box<serde_saphyr::Error>,
}

impl DocumentError {
    fn new(
        source: serde_saphyr::Error,
        path: &Path,
        line_offset: usize,
        context: Option<&str>,
    ) -> DocumentError {
        let message = crate::yaml_error::render(&source, path, line_offset, context).2;
        DocumentError {
            message,
            yaml: Box::new(source),
        }
    }
}

/// Reads every `kind: Application` document of a (multi-document) YAML text. Documents of other
/// kinds are skipped; a document that is not YAML makes the whole file an error.
pub fn read_documents(path: &Path, text: &str) -> Result<Vec<Application>, DocumentError> {
    let found = read_objects(path, text, "Application", |kind, api_version| {
        kind == "Application" && api_version.starts_with("argoproj.io/")
    })?;
    Ok(found
        .into_iter()
        .map(|(line, mut app): (usize, Application)| {
            app.origin = format!("{}:{line}", path.display());
            app
        })
        .collect())
}

/// Reads the documents of a (multi-document) YAML text whose `kind` and `apiVersion` `wanted`
/// accepts, each with the line it starts on. Other documents are skipped; a document that is
/// not YAML, or a wanted one that does not fit `T`, makes the whole file an error whose message
/// names `what`, the file, the line and the column.
pub fn read_objects<T: serde::de::DeserializeOwned + Object>(
    path: &Path,
    text: &str,
    what: &str,
    wanted: impl Fn(&str, &str) -> bool,
) -> Result<Vec<(usize, T)>, DocumentError> {
    #[derive(Deserialize)]
    struct Head {
        #[serde(default)]
        kind: Option<String>,
        #[serde(rename = "apiVersion", default)]
        api_version: Option<String>,
    }
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut out = Vec::new();
    let mut line = 1;
    for doc in split_documents(text) {
        let start = line;
        line += doc.matches('\n').count() + 1;
        if doc
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
        {
            continue;
        }
        // Thousands of Applications: most documents are the wanted kind, and their top-level
        // lines say so. Then the object is read at once and its own `kind` and `apiVersion`
        // checked: one parse instead of two. Whatever else comes of it (it does not fit, or is
        // another kind after all) is read the careful way below, so errors and skips stay.
        if looks_wanted(doc, &wanted)
            && let Ok(object) = crate::yaml_error::from_str::<T>(doc)
        {
            let (kind, api_version) = object.kind_and_api_version();
            if wanted(kind, api_version) {
                let mut object = object;
                object.locate(doc, start);
                out.push((start, object));
                continue;
            }
        }
        let head: Head = crate::yaml_error::from_str(doc)
            .map_err(|e| DocumentError::new(e, path, start - 1, None))?;
        if !wanted(
            head.kind.as_deref().unwrap_or_default(),
            head.api_version.as_deref().unwrap_or_default(),
        ) {
            continue;
        }
        let mut object: T = crate::yaml_error::from_str(doc)
            .map_err(|e| DocumentError::new(e, path, start - 1, Some(what)))?;
        object.locate(doc, start);
        out.push((start, object));
    }
    Ok(out)
}

/// An object [`read_objects`] reads: its `kind` and `apiVersion` as read from its document.
pub trait Object {
    fn kind_and_api_version(&self) -> (&str, &str);

    /// Notes where parts of the object are written in `doc`, whose first line is `start`.
    fn locate(&mut self, _doc: &str, _start: usize) {}
}

impl Object for Application {
    fn kind_and_api_version(&self) -> (&str, &str) {
        (&self.kind, &self.api_version)
    }

    fn locate(&mut self, doc: &str, start: usize) {
        self.annotation_lines = self
            .metadata
            .annotations
            .keys()
            .map(|key| key_line(doc, key).map_or(0, |l| start + l))
            .collect();
    }
}

/// The 0-based line of `doc` where `key` is written as a mapping key (plain or quoted, block or
/// flow style): its first occurrence followed, after an optional closing quote, by `:`.
fn key_line(doc: &str, key: &str) -> Option<usize> {
    doc.match_indices(key).find_map(|(at, _)| {
        let after = doc[at + key.len()..].trim_start_matches(['"', '\'']);
        let before = doc[..at].trim_end_matches(['"', '\'']);
        let starts_key = before.ends_with(|c: char| c.is_whitespace() || c == '{' || c == ',')
            || before.is_empty();
        (after.starts_with(':') && starts_key).then(|| doc[..at].matches('\n').count())
    })
}

/// Whether the document's unindented `kind:` and `apiVersion:` lines, read as plain text, are
/// ones `wanted` takes. Only a hint of what parsing it will say: [`read_objects`] checks the
/// parsed object's own.
fn looks_wanted(doc: &str, wanted: &impl Fn(&str, &str) -> bool) -> bool {
    let (mut kind, mut api_version) = (None, None);
    for line in doc.lines() {
        if let Some(v) = line.strip_prefix("kind:") {
            kind = Some(v.trim());
        } else if let Some(v) = line.strip_prefix("apiVersion:") {
            api_version = Some(v.trim());
        }
    }
    matches!((kind, api_version), (Some(k), Some(a)) if wanted(k, a))
}

/// Splits at `---` lines, keeping line counts (the separator line is dropped).
fn split_documents(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for l in text.split_inclusive('\n') {
        let bare = l.trim_end_matches(['\n', '\r']);
        if bare == "---" || bare.starts_with("--- ") {
            out.push(&text[start..pos]);
            start = pos + l.len();
        }
        pos += l.len();
    }
    out.push(&text[start..]);
    out
}

/// Where an Application came from decides what `write-back-method: argocd` can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Git,
    Cluster,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_applications_from_multi_document_files_with_their_lines() {
        let text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\nspec:\n  sources:\n    - repoURL: https://git.example/m.git\n      path: apps/web\n      directory: {recurse: true, exclude: '*.json'}\n";
        let apps = read_documents(Path::new("apps.yaml"), text).unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].origin, "apps.yaml:5");
        assert_eq!(apps[0].id(), "argocd/web");
        let s = apps[0].sources();
        assert_eq!(s[0].path.as_deref(), Some("apps/web"));
        assert!(s[0].directory.as_ref().unwrap().recurse);
        assert!(apps[0].is_multi_source());
    }

    /// Each annotation key's own line, in block and flow style, plain and quoted, in the second
    /// document of a file; a key that is only a value's text elsewhere is not taken for it.
    #[test]
    fn each_annotation_key_is_located_on_its_own_line() {
        let text = "kind: ConfigMap\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  labels: {note: \"x/image-lst\"}\n  annotations:\n    \"x/image-lst\": a=r/a\n    x/b: '1'\n";
        let apps = read_documents(Path::new("apps.yaml"), text).unwrap();
        let keys: Vec<&str> = apps[0]
            .metadata
            .annotations
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, ["x/b", "x/image-lst"]);
        assert_eq!(apps[0].annotation_lines, [10, 9]);
        assert_eq!(key_line("a: {k: 1, x/c: 2}\n", "x/c"), Some(0));
        assert_eq!(key_line("a: x/c\n", "x/c"), None);
    }

    #[test]
    fn an_application_generated_by_an_applicationset_names_it() {
        let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop-prod\n  ownerReferences:\n    - apiVersion: argoproj.io/v1alpha1\n      kind: ApplicationSet\n      name: shop\n      uid: 1\n";
        let apps = read_documents(Path::new("apps.yaml"), text).unwrap();
        assert_eq!(apps[0].application_set(), Some("shop"));
        let plain = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: web}\n";
        let apps = read_documents(Path::new("apps.yaml"), plain).unwrap();
        assert_eq!(apps[0].application_set(), None);
    }

    /// A document read at once because its lines look like an Application's, but that does not
    /// fit, is read the careful way: the same error as before, naming the file and line; and a
    /// document whose lines say another kind is skipped without reading it as one.
    #[test]
    fn a_document_that_looks_like_an_application_but_does_not_fit_is_an_error_as_before() {
        let wanted = |k: &str, a: &str| k == "Application" && a.starts_with("argoproj.io/");
        let text = "kind: ConfigMap\napiVersion: v1\n---\nkind: Application\napiVersion: argoproj.io/v1alpha1\nmetadata: {namespace: argocd}\n";
        let docs = split_documents(text);
        assert!(!looks_wanted(docs[0], &wanted) && looks_wanted(docs[1], &wanted));
        let err = read_documents(Path::new("a.yaml"), text)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("a.yaml:6:12: Application: missing field `name`"),
            "{err}"
        );
    }

    #[test]
    fn a_broken_document_names_the_file_and_line() {
        let err = read_documents(
            Path::new("a.yaml"),
            "kind: X\n---\napiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: [\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("a.yaml:"), "{err}");
    }
}
