//! Registry push notifications: `POST /webhooks/distribution`, the envelope CNCF distribution
//! (the reference registry, self-hosted GitLab's registry) sends to its
//! `notifications.endpoints`. A valid push notification asks the loop for a cycle at once;
//! many of them while a cycle runs still give one more cycle. The payload is only a hint:
//! the cycle reads the registry again and never trusts a tag or digest it was sent.

use std::path::Path;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::WebhooksConfig;
use crate::state::State;

/// Bodies larger than this are refused (413). Distribution sends a few events per request,
/// each well under a kilobyte.
pub const BODY_LIMIT: usize = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhooks: give exactly one of secretEnv, secretFile")]
    SecretSource,
    #[error("webhooks.secretEnv: the environment variable {0} is not set")]
    SecretEnvUnset(String),
    #[error("webhooks.secretFile {}: {source}", path.display())]
    SecretFile {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("webhooks: the secret is empty")]
    EmptySecret,
}

/// The webhook secret, kept only as its SHA-256 so that comparing takes the same time whatever
/// the length and content of what a caller sent.
#[derive(Clone)]
pub struct Secret([u8; 32]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    pub fn new(text: &str) -> Result<Secret, WebhookError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(WebhookError::EmptySecret);
        }
        Ok(Secret(Sha256::digest(text.as_bytes()).into()))
    }

    /// Reads the secret `webhooks:` names, from the environment or a file under `base_dir`.
    pub fn load(config: &WebhooksConfig, base_dir: &Path) -> Result<Secret, WebhookError> {
        match (&config.secret_env, &config.secret_file) {
            (Some(var), None) => {
                let text =
                    std::env::var(var).map_err(|_| WebhookError::SecretEnvUnset(var.clone()))?;
                Secret::new(&text)
            }
            (None, Some(file)) => {
                let path = base_dir.join(file);
                let text = std::fs::read_to_string(&path)
                    .map_err(|source| WebhookError::SecretFile { path, source })?;
                Secret::new(&text)
            }
            _ => Err(WebhookError::SecretSource),
        }
    }

    fn matches(&self, sent: &[u8]) -> bool {
        let sent: [u8; 32] = Sha256::digest(sent).into();
        self.0.ct_eq(&sent).into()
    }
}

/// What became of a notification, as `tagpilot_webhook_requests_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A push: a cycle is on its way.
    Accepted,
    /// Valid, but no push in it (pulls, deletes, mounts): nothing to do.
    Ignored,
    Unauthorized,
    Malformed,
    TooLarge,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Ignored => "ignored",
            Verdict::Unauthorized => "unauthorized",
            Verdict::Malformed => "malformed",
            Verdict::TooLarge => "too_large",
        }
    }
}

/// distribution's envelope: `{"events": [{"action": "push", "target": {"repository": …}}]}`;
/// fields tagpilot does not use are ignored.
#[derive(Debug, Deserialize)]
struct Envelope {
    events: Vec<Event>,
}

#[derive(Debug, Deserialize)]
struct Event {
    /// distribution gives every event an id, and sends it again when it retries a delivery.
    #[serde(default)]
    id: Option<String>,
    action: String,
    target: Target,
}

#[derive(Debug, Deserialize)]
struct Target {
    repository: String,
}

/// Checks one distribution notification: the secret first, then the body. Returns the verdict
/// and the answer to send; the repositories pushed are only logged. With `deliveries`, a
/// notification whose every push event was handled before (a retried delivery) is ignored.
pub fn distribution(
    secret: Option<&Secret>,
    deliveries: Option<&State>,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> (Verdict, StatusCode, String) {
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    let authorized = match (secret, sent) {
        (Some(secret), Some(sent)) => secret.matches(sent),
        _ => false,
    };
    if !authorized {
        let reason = if secret.is_none() {
            "no webhook secret is configured (webhooks.secretEnv or secretFile)"
        } else {
            "wrong or missing Authorization: Bearer secret"
        };
        return (
            Verdict::Unauthorized,
            StatusCode::UNAUTHORIZED,
            reason.to_string(),
        );
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return (
                Verdict::TooLarge,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {BODY_LIMIT} bytes"),
            );
        }
        Err(e) => return (Verdict::Malformed, e.status(), e.body_text()),
    };
    let envelope: Envelope = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => {
            return (
                Verdict::Malformed,
                StatusCode::BAD_REQUEST,
                format!("not a distribution notification envelope: {e}"),
            );
        }
    };
    let pushes: Vec<&Event> = envelope
        .events
        .iter()
        .filter(|e| e.action == "push")
        .collect();
    if pushes.is_empty() {
        return (
            Verdict::Ignored,
            StatusCode::ACCEPTED,
            "no push events".to_string(),
        );
    }
    // Every event is recorded (no short-circuit), so a partly new delivery still marks all.
    let fresh: Vec<&Event> = pushes
        .into_iter()
        .filter(|e| match (deliveries, &e.id) {
            (Some(state), Some(id)) => !state.seen_delivery("distribution", id),
            _ => true,
        })
        .collect();
    if fresh.is_empty() {
        return (
            Verdict::Ignored,
            StatusCode::ACCEPTED,
            "already handled: every event id was seen before".to_string(),
        );
    }
    let mut pushed: Vec<&str> = fresh.iter().map(|e| e.target.repository.as_str()).collect();
    pushed.sort_unstable();
    pushed.dedup();
    tracing::info!(repositories = ?pushed, "push notification: checking now");
    (
        Verdict::Accepted,
        StatusCode::ACCEPTED,
        "a cycle will run".to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    /// An event as distribution's documentation shows one (docs/notifications.md), trimmed.
    const PUSH: &str = r#"{"events":[{"id":"320678d8-ca14-430f-8bb6-4ca139cd83f7","timestamp":"2016-03-09T14:44:26.402973972-08:00","action":"push","target":{"mediaType":"application/vnd.docker.distribution.manifest.v2+json","size":708,"digest":"sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf","length":708,"repository":"hello-world","url":"http://192.168.100.227:5000/v2/hello-world/manifests/sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf","tag":"latest"},"request":{"id":"6df24a34-0959-4923-81ca-14f09767db19","addr":"192.168.64.11:42961","host":"192.168.100.227:5000","method":"PUT","useragent":"curl/7.38.0"},"actor":{},"source":{"addr":"xtal.local:5000","instanceID":"a53db899-3b4b-4a62-a067-8dd013beaca4"}}]}"#;

    fn bearer(secret: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {secret}")).unwrap(),
        );
        headers
    }

    fn secret() -> Secret {
        Secret::new("s3cret").unwrap()
    }

    #[test]
    fn a_push_with_the_right_secret_is_accepted() {
        let (verdict, status, _) = distribution(
            Some(&secret()),
            None,
            &bearer("s3cret"),
            Ok(Bytes::from(PUSH)),
        );
        assert_eq!((verdict, status), (Verdict::Accepted, StatusCode::ACCEPTED));
    }

    #[test]
    fn a_wrong_or_missing_secret_is_refused_before_the_body_is_read() {
        for headers in [bearer("s3cre"), bearer("s3cret2"), HeaderMap::new()] {
            let (verdict, status, _) =
                distribution(Some(&secret()), None, &headers, Ok(Bytes::from("not json")));
            assert_eq!(
                (verdict, status),
                (Verdict::Unauthorized, StatusCode::UNAUTHORIZED)
            );
        }
        let (verdict, _, reason) = distribution(None, None, &bearer(""), Ok(Bytes::from(PUSH)));
        assert_eq!(verdict, Verdict::Unauthorized);
        assert!(reason.contains("no webhook secret"), "{reason}");
    }

    #[test]
    fn a_malformed_body_is_refused_with_the_reason() {
        let (verdict, status, reason) = distribution(
            Some(&secret()),
            None,
            &bearer("s3cret"),
            Ok(Bytes::from(r#"{"events": [{"action": "push"}]}"#)),
        );
        assert_eq!(
            (verdict, status),
            (Verdict::Malformed, StatusCode::BAD_REQUEST)
        );
        assert!(reason.contains("target"), "{reason}");
    }

    #[test]
    fn a_delivery_sent_again_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let send = |body: &str| {
            distribution(
                Some(&secret()),
                Some(&state),
                &bearer("s3cret"),
                Ok(Bytes::from(body.to_string())),
            )
        };
        assert_eq!(send(PUSH).0, Verdict::Accepted);
        let (verdict, status, reason) = send(PUSH);
        assert_eq!((verdict, status), (Verdict::Ignored, StatusCode::ACCEPTED));
        assert!(reason.contains("already handled"), "{reason}");
        let other = PUSH.replace("320678d8-ca14", "420678d8-ca14");
        assert_eq!(send(&other).0, Verdict::Accepted, "a new event id");
    }

    #[test]
    fn pulls_are_ignored() {
        let pull = PUSH.replace(r#""action":"push""#, r#""action":"pull""#);
        let (verdict, status, _) = distribution(
            Some(&secret()),
            None,
            &bearer("s3cret"),
            Ok(Bytes::from(pull)),
        );
        assert_eq!((verdict, status), (Verdict::Ignored, StatusCode::ACCEPTED));
    }

    #[test]
    fn the_secret_comes_from_the_environment_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "from-file\n").unwrap();
        let config = WebhooksConfig {
            secret_env: None,
            secret_file: Some("secret".into()),
        };
        assert!(
            Secret::load(&config, dir.path())
                .unwrap()
                .matches(b"from-file")
        );
        let unset = WebhooksConfig {
            secret_env: Some("TAGPILOT_TEST_UNSET_WEBHOOK_SECRET".into()),
            secret_file: None,
        };
        let err = Secret::load(&unset, dir.path()).unwrap_err();
        assert!(
            err.to_string()
                .contains("TAGPILOT_TEST_UNSET_WEBHOOK_SECRET"),
            "{err}"
        );
        let both = WebhooksConfig {
            secret_env: Some("X".into()),
            secret_file: Some("secret".into()),
        };
        assert!(matches!(
            Secret::load(&both, dir.path()),
            Err(WebhookError::SecretSource)
        ));
    }
}
