//! `.argocd-source.yaml` and `.argocd-source-<app>.yaml`: Argo CD's parameter-override files,
//! which its repo server merges into a source before rendering it (`mergeSourceParameters` in
//! `reposerver/repository/repository.go`). Read here, in Image Updater's shape, for the two
//! parts that need them: the write-back that rewrites them (`crate::argocd::plan::override_file`)
//! and the rendered diff that must show what they change ([`merged_source`]). Pure: texts in,
//! a source out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Application, Source};

/// Argo CD's parameter-override file, in Image Updater's shape. Keys tagpilot does not know are
/// kept as they were.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OverrideFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmOverrides>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeOverrides>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelmOverrides {
    #[serde(default)]
    pub parameters: Vec<OverrideParameter>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideParameter {
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub forcestring: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KustomizeOverrides {
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl OverrideFile {
    /// An empty file is an empty override, as Argo CD reads it.
    pub fn parse(text: &str) -> Result<OverrideFile, serde_saphyr::Error> {
        if text.trim().is_empty() {
            return Ok(OverrideFile::default());
        }
        crate::yaml_error::from_str(text)
    }
}

/// An override file that cannot be merged into its source.
#[derive(Debug, thiserror::Error)]
pub enum OverrideError {
    #[error("override file {file}")]
    NotYaml {
        file: String,
        source: Box<serde_saphyr::Error>,
    },
    #[error("override file {file} does not fit an Application source: {message}")]
    Shape { file: String, message: String },
}

/// The override file names Argo CD reads in a source's directory, in the order it merges them:
/// `.argocd-source.yaml` for every Application of the path, then the Application's own
/// ([`Application::override_file_name`]).
pub fn file_names(app: &Application) -> [String; 2] {
    [".argocd-source.yaml".to_owned(), app.override_file_name()]
}

/// `source` with the override files merged into it as Argo CD merges them: each file, in
/// order, a JSON merge patch (RFC 7396) over the source, so a file's `helm.parameters` or
/// `kustomize.images` replace the source's whole list; `repoURL`, `path`, `chart` and
/// `targetRevision` stay the source's own. `files` are (name, text) of the files that exist.
pub fn merged_source(source: &Source, files: &[(String, String)]) -> Result<Source, OverrideError> {
    if files.is_empty() {
        return Ok(source.clone());
    }
    let mut merged = serde_json::to_value(source).expect("a source serialises");
    for (file, text) in files {
        // The project's reading of the file first, so that a broken one is named as the
        // write-back names it; then the text itself as the patch, as Argo CD applies it.
        OverrideFile::parse(text).map_err(|source| OverrideError::NotYaml {
            file: file.clone(),
            source: Box::new(source),
        })?;
        if text.trim().is_empty() {
            continue;
        }
        let mut patch: Value =
            crate::yaml_error::from_str(text).map_err(|source| OverrideError::NotYaml {
                file: file.clone(),
                source: Box::new(source),
            })?;
        go_field_names(&mut patch);
        merge_patch(&mut merged, &patch);
    }
    let mut out: Source = serde_json::from_value(merged).map_err(|e| OverrideError::Shape {
        file: files
            .iter()
            .map(|(f, _)| f.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        message: e.to_string(),
    })?;
    out.repo_url.clone_from(&source.repo_url);
    out.path.clone_from(&source.path);
    out.chart.clone_from(&source.chart);
    out.target_revision.clone_from(&source.target_revision);
    Ok(out)
}

/// Argo CD reads the files with Go's JSON decoder, which matches field names whatever their
/// case: Image Updater writes `forcestring`, the Application's field is `forceString`.
fn go_field_names(patch: &mut Value) {
    let Some(params) = patch
        .pointer_mut("/helm/parameters")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for p in params.iter_mut().filter_map(Value::as_object_mut) {
        let other: Vec<String> = p
            .keys()
            .filter(|k| k.eq_ignore_ascii_case("forceString") && *k != "forceString")
            .cloned()
            .collect();
        for key in other {
            if let Some(v) = p.remove(&key) {
                p.insert("forceString".into(), v);
            }
        }
    }
}

/// RFC 7396: objects merge key by key, `null` removes a key, anything else replaces.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::HelmParameter;

    fn source(yaml: &str) -> Source {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn helm_parameters_of_an_override_file_replace_the_sources_and_keep_the_rest() {
        let s = source(
            "repoURL: https://git.example/m\npath: charts/api\ntargetRevision: main\n\
             helm:\n  releaseName: shop\n  parameters:\n  - {name: env, value: prod}\n",
        );
        let files = [
            (
                ".argocd-source.yaml".to_owned(),
                "helm:\n  valueFiles: [values-prod.yaml]\n".to_owned(),
            ),
            (
                ".argocd-source-api.yaml".to_owned(),
                "helm:\n  parameters:\n  - name: image.tag\n    value: 1.2.0\n    forcestring: true\n\
                 path: elsewhere\ntargetRevision: other\n"
                    .to_owned(),
            ),
        ];
        let merged = merged_source(&s, &files).unwrap();
        let helm = merged.helm.unwrap();
        assert_eq!(
            helm.parameters,
            vec![HelmParameter {
                name: "image.tag".into(),
                value: "1.2.0".into(),
                force_string: true,
            }]
        );
        assert_eq!(helm.release_name.as_deref(), Some("shop"));
        assert_eq!(helm.value_files, vec!["values-prod.yaml"]);
        // What says where the source is stays the Application's.
        assert_eq!(merged.path.as_deref(), Some("charts/api"));
        assert_eq!(merged.target_revision.as_deref(), Some("main"));
    }

    #[test]
    fn kustomize_images_of_an_override_file_are_set_and_an_empty_file_changes_nothing() {
        let s = source("repoURL: https://git.example/m\npath: apps/prod\n");
        let files = [
            (".argocd-source.yaml".to_owned(), "\n".to_owned()),
            (
                ".argocd-source-api.yaml".to_owned(),
                "kustomize:\n  images:\n  - r.example/shop/api:1.2.0\n".to_owned(),
            ),
        ];
        let merged = merged_source(&s, &files).unwrap();
        assert_eq!(
            merged.kustomize.unwrap().images,
            vec!["r.example/shop/api:1.2.0"]
        );
        assert!(merged.helm.is_none());
    }

    #[test]
    fn a_broken_override_file_is_named() {
        let s = source("repoURL: https://git.example/m\npath: apps/prod\n");
        let files = [(
            "apps/prod/.argocd-source-api.yaml".to_owned(),
            "kustomize: [\n".to_owned(),
        )];
        let e = merged_source(&s, &files).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("override file apps/prod/.argocd-source-api.yaml"),
            "{e}"
        );
        let files = [(
            "x/.argocd-source.yaml".to_owned(),
            "helm: {parameters: 3}\n".to_owned(),
        )];
        assert!(merged_source(&s, &files).is_err());
    }
}
