//! `verify:` — whether tagpilot follows a change that reached a base branch to a healthy Argo
//! CD Application, and what it does when the change fails there (issue 19). Set per repository
//! (`repositories[].verify`) or per policy (`ImagePolicy` `spec.verify`, which wins for its
//! changes). Absent means off: a change is written and not followed, as before.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `verify: {onFailure: hold, timeout: 15m}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
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
}
