//! `verify:` — whether tagpilot follows a change that reached a base branch to a healthy Argo
//! CD Application, and what it does when the change fails there (issue 19). Set per repository
//! (`repositories[].verify`) or per policy (`ImagePolicy` `spec.verify`, which wins for its
//! changes). Absent means off: a change is written and not followed, as before.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `verify: {onFailure: hold, timeout: 15m}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct VerifyConfig {
    /// What a failed verification does; default `hold`.
    #[serde(default)]
    pub on_failure: OnFailure,
    /// How long a change may take to be synced and healthy (`15m`, `1h`); default 15 minutes.
    #[serde(
        default = "VerifyConfig::default_timeout",
        deserialize_with = "super::required_duration"
    )]
    #[schemars(with = "String")]
    pub timeout: Duration,
}

impl VerifyConfig {
    fn default_timeout() -> Duration {
        Duration::from_secs(15 * 60)
    }
}

impl Default for VerifyConfig {
    fn default() -> Self {
        VerifyConfig {
            on_failure: OnFailure::default(),
            timeout: VerifyConfig::default_timeout(),
        }
    }
}

/// What happens to a change whose Application failed.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum OnFailure {
    /// Write the reverse change and hold the failed tag.
    Revert,
    /// Hold the failed tag; leave the change in place.
    #[default]
    Hold,
    /// Only report it: log, metric, commit status.
    Report,
}

impl OnFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Revert => "revert",
            OnFailure::Hold => "hold",
            OnFailure::Report => "report",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<VerifyConfig, serde_saphyr::Error> {
        serde_saphyr::from_str(yaml)
    }

    #[test]
    fn verify_reads_its_mode_and_timeout_with_defaults() {
        let v = read("onFailure: revert\ntimeout: 5m\n").unwrap();
        assert_eq!(v.on_failure, OnFailure::Revert);
        assert_eq!(v.timeout, Duration::from_secs(300));
        let v = read("onFailure: report\n").unwrap();
        assert_eq!(v.timeout, Duration::from_secs(900));
        assert_eq!(read("{}\n").unwrap(), VerifyConfig::default());
    }

    #[test]
    fn an_unreadable_verify_value_is_an_error_not_a_default() {
        for yaml in [
            "onFailure: rollback\n",
            "timeout: soon\n",
            "timeout: 0s\n",
            "onFailur: hold\n",
        ] {
            assert!(read(yaml).is_err(), "{yaml}");
        }
    }

    #[test]
    fn an_unreadable_verify_names_its_file_and_line_in_tagpilot_yaml_and_in_a_policy() {
        let path = std::path::Path::new("tagpilot.yaml");
        let err = crate::config::parse(
            path,
            "repositories:\n  - name: manifests\n    url: file:///m.git\n    verify:\n      onFailure: rollback\n",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("tagpilot.yaml:5:"), "{err}");
        assert!(err.contains("rollback"), "{err}");
        let ok = crate::config::parse(
            path,
            "repositories:\n  - name: manifests\n    url: file:///m.git\n    verify: {onFailure: report, timeout: 20m}\n",
        )
        .unwrap();
        assert_eq!(
            ok.repositories[0].verify,
            Some(VerifyConfig {
                on_failure: OnFailure::Report,
                timeout: Duration::from_secs(1200)
            })
        );
        assert_eq!(
            crate::config::parse(path, "repositories:\n  - name: m\n    url: file:///m.git\n")
                .unwrap()
                .repositories[0]
                .verify,
            None,
            "off by default"
        );

        let policy = |verify: &str| {
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: r.example/api\n  strategy: {{semver: {{}}}}\n  verify:\n{verify}"
            )
        };
        let errors = crate::policy::parse_file(
            std::path::Path::new("p.yaml"),
            &policy("    timeout: soon\n"),
        )
        .expect_err("an unreadable timeout is no policy");
        let text = errors.to_string();
        assert!(text.contains("p.yaml:9"), "{text}");
        let policies = crate::policy::parse_file(
            std::path::Path::new("p.yaml"),
            &policy("    onFailure: revert\n"),
        )
        .unwrap();
        assert_eq!(
            policies[0].verify.map(|v| v.on_failure),
            Some(OnFailure::Revert)
        );
    }
}
