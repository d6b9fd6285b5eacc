//! `versionLabels:` — which labels and annotations carry an image's version and follow its tag
//! when tagpilot moves the image (issue 21). Set in `tagpilot.yaml` for every policy and every
//! Application, or per policy (`ImagePolicy` `spec.versionLabels`, which wins for its images).
//!
//! Written as `false` (off), `true` (the defaults), or `{keys: [...], podLabels: [...]}`: a
//! list written replaces its default, a list left out keeps it. A key may hold `<container>`
//! once, read as the name of the container whose image moved (Datadog's
//! `tags.datadoghq.com/<container>.version`). A value that cannot be read is an error at its
//! `file:line:column`, never a default.

use serde::Deserialize;
use serde::de::{self, MapAccess, Visitor};

/// The placeholder for a container's name in a key.
pub const CONTAINER: &str = "<container>";

/// Which keys follow an image's tag; both lists empty means off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionLabels {
    /// Labels and annotations of the resource (`metadata`) and of its Pod template (CronJob:
    /// also of its `jobTemplate`).
    pub keys: Vec<String>,
    /// Labels of the Pod template only (`version`, as Istio reads it).
    pub pod_labels: Vec<String>,
}

impl VersionLabels {
    /// `app.kubernetes.io/version`, Datadog's unified service tagging
    /// (`tags.datadoghq.com/version`, `tags.datadoghq.com/<container>.version`), and `version`
    /// among the Pod template's labels.
    pub fn defaults() -> VersionLabels {
        VersionLabels {
            keys: vec![
                "app.kubernetes.io/version".into(),
                "tags.datadoghq.com/version".into(),
                format!("tags.datadoghq.com/{CONTAINER}.version"),
            ],
            pod_labels: vec!["version".into()],
        }
    }

    pub fn off() -> VersionLabels {
        VersionLabels {
            keys: Vec::new(),
            pod_labels: Vec::new(),
        }
    }

    pub fn is_off(&self) -> bool {
        self.keys.is_empty() && self.pod_labels.is_empty()
    }
}

impl Default for VersionLabels {
    fn default() -> Self {
        VersionLabels::defaults()
    }
}

/// The map form as written.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Written {
    #[serde(default)]
    keys: Option<Vec<String>>,
    #[serde(default)]
    pod_labels: Option<Vec<String>>,
}

/// Why a key cannot be one: empty, spaces, or more than one `<container>` or another `<…>`.
fn check_key(key: &str) -> Result<(), KeyError> {
    let rest = key.replacen(CONTAINER, "", 1);
    let key = key.to_string();
    if key.trim().is_empty() {
        return Err(KeyError::Empty);
    }
    if key.contains(char::is_whitespace) {
        return Err(KeyError::Space { key });
    }
    if rest.contains('<') || rest.contains('>') {
        return Err(KeyError::OtherPlaceholder { key });
    }
    if rest.is_empty() {
        return Err(KeyError::OnlyContainer { key });
    }
    Ok(())
}

/// Why a `versionLabels` key cannot be one.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("versionLabels: a key is empty")]
    Empty,
    #[error("versionLabels: key {key:?} holds a space")]
    Space { key: String },
    #[error(
        "versionLabels: key {key:?} may hold {} once and no other <…>",
        CONTAINER
    )]
    OtherPlaceholder { key: String },
    #[error("versionLabels: key {key:?} is nothing but {}", CONTAINER)]
    OnlyContainer { key: String },
}

impl<'de> Deserialize<'de> for VersionLabels {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Read;
        impl<'de> Visitor<'de> for Read {
            type Value = VersionLabels;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("false, true, or {keys: [...], podLabels: [...]}")
            }

            fn visit_bool<E: de::Error>(self, on: bool) -> Result<VersionLabels, E> {
                Ok(if on {
                    VersionLabels::defaults()
                } else {
                    VersionLabels::off()
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<VersionLabels, A::Error> {
                let written = Written::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let defaults = VersionLabels::defaults();
                let labels = VersionLabels {
                    keys: written.keys.unwrap_or(defaults.keys),
                    pod_labels: written.pod_labels.unwrap_or(defaults.pod_labels),
                };
                for key in labels.keys.iter().chain(&labels.pod_labels) {
                    check_key(key).map_err(de::Error::custom)?;
                }
                for key in &labels.pod_labels {
                    if key.contains(CONTAINER) {
                        return Err(de::Error::custom(format!(
                            "versionLabels: podLabels key {key:?} cannot name a container: a Pod template's labels are the Pod's, not one container's"
                        )));
                    }
                }
                Ok(labels)
            }
        }
        d.deserialize_any(Read)
    }
}

// === impl JsonSchema for VersionLabels ===

/// `false`, `true` (the defaults), or the map form: what the hand-written reader above takes.
impl schemars::JsonSchema for VersionLabels {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "VersionLabels".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let written = generator.subschema_for::<Written>();
        schemars::json_schema!({
            "description": "Which labels and annotations follow an image's version: false, true (the defaults), or {keys, podLabels}",
            "anyOf": [{"type": "boolean"}, written]
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<VersionLabels, serde_saphyr::Error> {
        serde_saphyr::from_str(yaml)
    }

    #[test]
    fn version_labels_read_as_off_defaults_or_lists_that_replace_their_default() {
        assert_eq!(read("false\n").unwrap(), VersionLabels::off());
        assert!(read("false\n").unwrap().is_off());
        assert_eq!(read("true\n").unwrap(), VersionLabels::defaults());
        let keys = read("keys: [app.kubernetes.io/version]\n").unwrap();
        assert_eq!(keys.keys, ["app.kubernetes.io/version"]);
        assert_eq!(
            keys.pod_labels,
            ["version"],
            "an unwritten list keeps its default"
        );
        let none = read("{keys: [], podLabels: []}\n").unwrap();
        assert!(none.is_off());
        let dd = read("keys: [\"dd/<container>.v\"]\n").unwrap();
        assert_eq!(dd.keys, ["dd/<container>.v"]);
    }

    #[test]
    fn an_unreadable_version_labels_value_is_an_error_not_a_default() {
        for yaml in [
            "keys: app.kubernetes.io/version\n",
            "key: [a]\n",
            "keys: [\"\"]\n",
            "keys: [\"a b\"]\n",
            "keys: [\"<container>\"]\n",
            "keys: [\"x/<container>.<container>\"]\n",
            "keys: [\"x/<name>\"]\n",
            "podLabels: [\"<container>-version\"]\n",
            "sometimes\n",
            "[a]\n",
        ] {
            assert!(read(yaml).is_err(), "{yaml}");
        }
    }

    #[test]
    fn an_unreadable_version_labels_names_its_file_and_line_in_tagpilot_yaml_and_in_a_policy() {
        let path = std::path::Path::new("tagpilot.yaml");
        let err = crate::config::parse(
            path,
            "registries: []\nversionLabels:\n  keys: [\"a/<name>\"]\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("tagpilot.yaml:3:"), "{err}");
        assert!(err.contains("a/<name>"), "{err}");
        let set = crate::config::parse(path, "versionLabels: false\n").unwrap();
        assert_eq!(set.version_labels, Some(VersionLabels::off()));
        assert_eq!(
            crate::config::parse(path, "registries: []\n")
                .unwrap()
                .version_labels,
            None,
            "unset: the defaults"
        );

        let policy = |labels: &str| {
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: r.example/api\n  strategy: {{semver: {{}}}}\n  versionLabels: {labels}\n"
            )
        };
        let errors =
            crate::policy::parse_file(std::path::Path::new("p.yaml"), &policy("sometimes"))
                .expect_err("an unreadable versionLabels is no policy");
        let text = errors.to_string();
        assert!(text.contains("p.yaml:8"), "{text}");
        let policies =
            crate::policy::parse_file(std::path::Path::new("p.yaml"), &policy("false")).unwrap();
        assert_eq!(policies[0].version_labels, Some(VersionLabels::off()));

        // A policy that says nothing takes tagpilot.yaml's; one that says something keeps it.
        let mut policies = vec![
            crate::policy::parse_file(std::path::Path::new("p.yaml"), &policy("true"))
                .unwrap()
                .remove(0),
            crate::policy::parse_file(
                std::path::Path::new("q.yaml"),
                &policy("true").replace("  versionLabels: true\n", ""),
            )
            .unwrap()
            .remove(0),
        ];
        assert_eq!(policies[1].version_labels, None);
        crate::policy::ImagePolicy::default_version_labels(
            &mut policies,
            Some(&VersionLabels::off()),
        );
        assert_eq!(policies[0].version_labels, Some(VersionLabels::defaults()));
        assert_eq!(policies[1].version_labels, Some(VersionLabels::off()));
    }
}
