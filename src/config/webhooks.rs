//! `webhooks:` in `tagpilot.yaml`: the secrets registry notifications must carry, one for every
//! kind or one per kind, and how re-checks after a notification are paced.
//!
//! ```yaml
//! webhooks:
//!   secretEnv: TAGPILOT_WEBHOOK_SECRET    # every kind, unless it has its own
//!   ghcr:
//!     secretFile: /secrets/github-webhook # GitHub signs with its own secret
//!   recheck:
//!     debounce: 100ms                     # notifications gathered into one re-check
//!     minInterval: 5s                     # per image repository: `burst` at once, then
//!     burst: 50                           # one per minInterval / burst
//! ```
//!
//! Structure only: whether the variable is set and the file readable is checked by
//! `tagpilot run` when it starts.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// The kinds that can have a secret of their own, as written under `webhooks:`: the endpoints
/// `/webhooks/<kind>`, and `acr`/`aliyunAcr`, which only Argo CD Image Updater's endpoint
/// (`/webhook?type=…`) takes.
pub const SECRET_KINDS: [&str; 9] = [
    "distribution",
    "dockerhub",
    "ghcr",
    "harbor",
    "quay",
    "gar",
    "cloudevents",
    "acr",
    "aliyunAcr",
];

/// `webhooks:`.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhooksConfig {
    /// The environment variable holding the secret of every kind without its own.
    #[serde(default)]
    pub secret_env: Option<String>,
    /// A file holding that secret (a mounted Secret); relative to the config file.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    #[serde(default)]
    pub distribution: Option<SecretSource>,
    #[serde(default)]
    pub dockerhub: Option<SecretSource>,
    #[serde(default)]
    pub ghcr: Option<SecretSource>,
    #[serde(default)]
    pub harbor: Option<SecretSource>,
    #[serde(default)]
    pub quay: Option<SecretSource>,
    #[serde(default)]
    pub gar: Option<SecretSource>,
    #[serde(default)]
    pub cloudevents: Option<SecretSource>,
    /// Azure Container Registry, through Image Updater's endpoint only.
    #[serde(default)]
    pub acr: Option<SecretSource>,
    /// Alibaba Cloud Container Registry, through Image Updater's endpoint only.
    #[serde(default)]
    pub aliyun_acr: Option<SecretSource>,
    #[serde(default)]
    pub recheck: RecheckConfig,
}

/// Where one secret comes from: exactly one of the two.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretSource {
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Relative to the config file.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
}

impl SecretSource {
    pub fn is_complete(&self) -> bool {
        self.secret_env.is_some() != self.secret_file.is_some()
    }
}

/// How notifications become re-checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecheckConfig {
    /// How long notifications are gathered after the first before one re-check of them all:
    /// a push of many blobs and manifests sends many.
    #[serde(default = "default_debounce", deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub debounce: Duration,
    /// At most `burst` re-checks of an image repository at once, then one per `minInterval /
    /// burst` (a token bucket); later notifications for it join the next allowed one.
    #[serde(default = "default_min_interval", deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub min_interval: Duration,
    /// How many re-checks of one image repository may start at once before the next waits
    /// one spacing (`min_interval / burst`): pushes one after another are answered as they
    /// come, a flood is spaced evenly.
    #[serde(default = "default_burst")]
    pub burst: std::num::NonZeroUsize,
}

impl Default for RecheckConfig {
    fn default() -> Self {
        RecheckConfig {
            debounce: default_debounce(),
            min_interval: default_min_interval(),
            burst: default_burst(),
        }
    }
}

fn default_debounce() -> Duration {
    Duration::from_millis(100)
}

fn default_min_interval() -> Duration {
    Duration::from_secs(5)
}

fn default_burst() -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(50).expect("50 is not 0")
}

/// `200ms`, `10s`, `1m 30s`: humantime's spelling, as the `--interval` flag takes it.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a duration: {e}")))
}

impl WebhooksConfig {
    /// The secret configured for `kind` (one of [`SECRET_KINDS`]): its own, else the shared one.
    pub fn secret_for(&self, kind: &str) -> Option<SecretSource> {
        self.own(kind).clone().or_else(|| self.shared())
    }

    /// The secret `kind` has of its own.
    fn own(&self, kind: &str) -> &Option<SecretSource> {
        match kind {
            "distribution" => &self.distribution,
            "dockerhub" => &self.dockerhub,
            "ghcr" => &self.ghcr,
            "harbor" => &self.harbor,
            "quay" => &self.quay,
            "gar" => &self.gar,
            "cloudevents" => &self.cloudevents,
            "acr" => &self.acr,
            "aliyunAcr" => &self.aliyun_acr,
            _ => &None,
        }
    }

    /// `secretEnv`/`secretFile` at the top, for every kind without its own.
    pub fn shared(&self) -> Option<SecretSource> {
        let shared = SecretSource {
            secret_env: self.secret_env.clone(),
            secret_file: self.secret_file.clone(),
        };
        (shared != SecretSource::default()).then_some(shared)
    }

    /// What is wrong with the structure, by key under `webhooks:` (`""`: `webhooks:` itself).
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        if self.secret_env.is_some() && self.secret_file.is_some() {
            out.push((
                "",
                "webhooks: give one of secretEnv, secretFile, not both".into(),
            ));
        }
        let mut any = self.shared().is_some();
        for kind in SECRET_KINDS {
            if let Some(own) = self.own(kind) {
                any = true;
                if !own.is_complete() {
                    out.push((
                        kind,
                        format!("webhooks.{kind} needs exactly one of secretEnv, secretFile"),
                    ));
                }
            }
        }
        if !any {
            out.push((
                "",
                "webhooks need a secret: secretEnv or secretFile for every kind, or one under a kind (ghcr: {secretEnv: …})".into(),
            ));
        }
        if self.recheck.debounce > Duration::from_secs(60) {
            out.push((
                "recheck",
                "webhooks.recheck.debounce must be at most 1m: a push should reach a commit in seconds".into(),
            ));
        }
        out
    }
}
