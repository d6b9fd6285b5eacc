//! Google Artifact Registry, through a Pub/Sub push subscription on the `gcr` topic. Pub/Sub
//! POSTs `{"message": {"data": base64, "messageId", …}, "subscription"}`; Artifact Registry's
//! message in `data` is `{"action": "INSERT" | "DELETE", "digest": "host/project/repo/image@sha256:…",
//! "tag": "host/project/repo/image:tag"}`. An `INSERT` is a push (a new image or a new tag);
//! a `DELETE` is accepted and ignored.
//!
//! Pub/Sub can also sign its pushes with a Google-issued OIDC token; tagpilot does not verify
//! those (it would need Google's keys). The secret goes in the push endpoint's URL.

use base64::Engine;
use serde::Deserialize;

use super::{Parsed, PayloadError, repository_of_reference};

#[derive(Debug, Deserialize)]
struct Push {
    message: PubsubMessage,
}

/// A Pub/Sub message, as push deliveries and Eventarc's CloudEvents carry it.
#[derive(Debug, Deserialize)]
pub struct PubsubMessage {
    #[serde(default)]
    data: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Notification {
    action: String,
    #[serde(default)]
    digest: Option<String>,
    #[serde(default)]
    tag: Option<String>,
}

pub fn parse(body: &[u8]) -> Result<Parsed, PayloadError> {
    let push: Push = super::json(body, "a Pub/Sub push message")?;
    from_message(&push.message)
}

/// Artifact Registry's notification inside a Pub/Sub message.
pub fn from_message(message: &PubsubMessage) -> Result<Parsed, PayloadError> {
    let data = message
        .data
        .as_deref()
        .ok_or_else(|| PayloadError::missing("a Pub/Sub message", "data"))?;
    let data = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|source| PayloadError::NotBase64 {
            field: "message.data",
            source,
        })?;
    let n: Notification = super::json(&data, "an Artifact Registry notification")?;
    if n.action != "INSERT" {
        return Ok(Parsed::Ignored(format!(
            "an Artifact Registry {} notification, not a push (INSERT)",
            n.action
        )));
    }
    let reference = n
        .tag
        .or(n.digest)
        .ok_or_else(|| PayloadError::missing("an Artifact Registry INSERT", "tag or digest"))?;
    Ok(Parsed::Pushed(vec![repository_of_reference(&reference)?]))
}
