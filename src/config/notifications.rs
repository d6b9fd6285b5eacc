//! `notifications:` in `tagpilot.yaml`: where `tagpilot run` tells people what it did, what
//! waits and what it refused, and which of those each place hears.
//!
//! ```yaml
//! notifications:
//!   coalesce: 10s              # events within this long after the first: one message per sink
//!   unreachableAfter: 10m      # a registry or remote failing this long is told, once
//!   sinks:
//!     - name: deploys
//!       slack:
//!         webhookUrl: {secretEnv: SLACK_WEBHOOK_URL}
//!       events: [failed, reverted, held]
//!       repositories: ["shop-*"]
//!     - name: ci
//!       webhook:
//!         url: https://ci.example.com/hooks/tagpilot
//!         secret: {secretRef: {name: tagpilot-notify, key: hmac}}
//!     - name: argo-events
//!       cloudEvents: {url: http://webhook-eventsource-svc.argo-events:12000/tagpilot, mode: binary}
//!     - name: platform
//!       teams:
//!         url: {secretFile: /var/run/secrets/teams-url}
//! ```
//!
//! A URL that carries a credential (Slack's and Teams' webhooks) and every key are secrets:
//! read from the environment, a file or a Kubernetes Secret, never written here. Structure
//! only: whether the secrets can be read and the templates render is checked by
//! `tagpilot run` when it starts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// `notifications:`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NotificationsConfig {
    /// Events arriving within this long of the first one waiting are sent to a sink as one
    /// message (default 10s).
    #[serde(default = "default_coalesce", deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub coalesce: Duration,
    /// A registry or remote repository failing for this long is told (once per outage), and
    /// told again when it answers (default 10m).
    #[serde(default = "default_unreachable", deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub unreachable_after: Duration,
    /// How often a message a sink refuses is sent again before it is given up (default 5).
    #[serde(default = "default_attempts")]
    pub attempts: u32,
    /// The wait before the first retry; doubled after each (default 1s, at most 5m).
    #[serde(default = "default_backoff", deserialize_with = "duration")]
    #[schemars(with = "String")]
    pub backoff: Duration,
    /// Events waiting per sink at most; past it new events are dropped and counted, so a sink
    /// that is down for long never grows memory (default 1000).
    #[serde(default = "default_queue")]
    pub queue: usize,
    #[serde(default)]
    pub sinks: Vec<SinkConfig>,
}

/// One place notifications go, and which events it hears.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SinkConfig {
    /// The sink's name in logs and in `tagpilot_notifications_total{sink}`.
    pub name: String,
    /// A generic HTTP webhook: the events as JSON, signed with HMAC-SHA256.
    #[serde(default)]
    pub webhook: Option<WebhookSink>,
    /// CloudEvents over HTTP (structured or binary content mode).
    #[serde(default)]
    pub cloud_events: Option<CloudEventsSink>,
    /// Slack: an incoming webhook, or `chat.postMessage` with a bot token.
    #[serde(default)]
    pub slack: Option<SlackSink>,
    /// Microsoft Teams: a Workflows (Power Automate) webhook taking an Adaptive Card.
    #[serde(default)]
    pub teams: Option<TeamsSink>,
    /// The event types this sink hears (default: every one): `update_written`,
    /// `pull_request_merged`, `verified`, `failed`, `reverted`, `held`, `promotion_waiting`,
    /// `promotion_written`, `candidate_refused`, `unreachable`, `recovered`.
    #[serde(default)]
    pub events: Option<Vec<String>>,
    /// Globs of `repositories[].name` whose events this sink hears (default: every one).
    #[serde(default)]
    pub repositories: Option<Vec<String>>,
    /// Globs of policy names whose events this sink hears (default: every one).
    #[serde(default)]
    pub policies: Option<Vec<String>>,
    /// The text of each event type (minijinja), replacing its default; see the book.
    #[serde(default)]
    pub templates: BTreeMap<String, String>,
}

/// `webhook:`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookSink {
    pub url: String,
    /// The HMAC-SHA256 key: `X-Tagpilot-Signature-256: sha256=<hex>` of the body.
    pub secret: NotifySecret,
}

/// `cloudEvents:`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CloudEventsSink {
    pub url: String,
    /// `structured` (default): a batch of events as `application/cloudevents-batch+json`;
    /// `binary`: one request per event, its attributes as `ce-` headers.
    #[serde(default)]
    pub mode: CloudEventsMode,
    /// The events' `source` attribute (default `tagpilot`).
    #[serde(default)]
    pub source: Option<String>,
    /// Sent as `Authorization: Bearer <token>`, when set.
    #[serde(default)]
    pub token: Option<NotifySecret>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum CloudEventsMode {
    #[default]
    Structured,
    Binary,
}

/// `slack:`: exactly one of `webhookUrl`, or `token` with `channel`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SlackSink {
    /// An incoming webhook's URL (it is the credential).
    #[serde(default)]
    pub webhook_url: Option<NotifySecret>,
    /// A bot token for `chat.postMessage`.
    #[serde(default)]
    pub token: Option<NotifySecret>,
    /// The channel `chat.postMessage` posts to.
    #[serde(default)]
    pub channel: Option<String>,
    /// Slack's Web API (default `https://slack.com/api`).
    #[serde(default)]
    pub api_url: Option<String>,
}

/// `teams:`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TeamsSink {
    /// The workflow's HTTP trigger URL (it carries its signature: a credential).
    pub url: NotifySecret,
}

/// Where one secret comes from: exactly one of the three.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NotifySecret {
    #[serde(default)]
    pub secret_env: Option<String>,
    /// Relative to the config file.
    #[serde(default)]
    pub secret_file: Option<PathBuf>,
    /// A key of a Kubernetes Secret, read through the cluster `tagpilot run` talks to.
    #[serde(default)]
    pub secret_ref: Option<SecretRef>,
}

/// A key of a Kubernetes Secret.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretRef {
    /// Default: the namespace tagpilot runs in (`POD_NAMESPACE`), else `default`.
    #[serde(default)]
    pub namespace: Option<String>,
    pub name: String,
    pub key: String,
}

fn default_coalesce() -> Duration {
    Duration::from_secs(10)
}

fn default_unreachable() -> Duration {
    Duration::from_secs(600)
}

fn default_attempts() -> u32 {
    5
}

fn default_backoff() -> Duration {
    Duration::from_secs(1)
}

fn default_queue() -> usize {
    1000
}

/// `200ms`, `10s`, `1m 30s`.
fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text)
        .map_err(|e| serde::de::Error::custom(format!("{text:?} is not a duration: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_read_with_their_routes_and_defaults() {
        let yaml = "sinks:\n  - name: ci\n    webhook:\n      url: http://127.0.0.1:1/h\n      secret: {secretEnv: HMAC}\n    events: [failed]\n    repositories: [\"shop-*\"]\n  - name: chat\n    slack: {token: {secretRef: {name: s, key: token}}, channel: \"#d\"}\n";
        let config: NotificationsConfig = serde_saphyr::from_str(yaml).unwrap();
        assert_eq!(config.coalesce, Duration::from_secs(10));
        assert_eq!(config.attempts, 5);
        assert_eq!(config.sinks.len(), 2);
        assert_eq!(
            config.sinks[0].events.as_deref(),
            Some(&["failed".to_string()][..])
        );
        let slack = config.sinks[1].slack.as_ref().unwrap();
        assert_eq!(
            slack
                .token
                .as_ref()
                .unwrap()
                .secret_ref
                .as_ref()
                .unwrap()
                .key,
            "token"
        );
        let typo = "sinks:\n  - name: ci\n    webhok: {}\n";
        assert!(serde_saphyr::from_str::<NotificationsConfig>(typo).is_err());
    }
}
