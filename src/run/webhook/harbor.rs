//! Harbor's webhooks, "Default" format: `{"type": "PUSH_ARTIFACT", "event_data": {"resources":
//! [{"resource_url"}], "repository"}}`. Each resource's `resource_url` (`host/project/repo:tag`
//! or `…@sha256:…`) names the pushed repository with the host Harbor is reached at. Every other
//! event type (pulls, deletes, scans, quotas, replication, retention) is accepted and ignored.
//! A Harbor policy set to the "CloudEvents" format is read as a CloudEvent
//! ([`super::cloudevents`]).

use serde::Deserialize;

use super::{Parsed, PayloadError, repository_of_reference};

#[derive(Debug, Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    event_data: Option<EventData>,
}

/// `event_data` of the Default format, and `data` of the CloudEvents one.
#[derive(Debug, Deserialize)]
pub struct EventData {
    #[serde(default)]
    resources: Vec<Resource>,
}

#[derive(Debug, Deserialize)]
struct Resource {
    #[serde(default)]
    resource_url: Option<String>,
}

/// Harbor's own payload, read already as JSON (a CloudEvent goes to `cloudevents` instead:
/// [`super::harbor_payload`] decides).
pub fn parse(value: serde_json::Value) -> Result<Parsed, PayloadError> {
    let payload: Payload = serde_json::from_value(value).map_err(|source| PayloadError::NotA {
        what: "a Harbor webhook",
        source,
    })?;
    if payload.kind != "PUSH_ARTIFACT" {
        return Ok(Parsed::Ignored(format!(
            "a {} event, not a push (PUSH_ARTIFACT)",
            payload.kind
        )));
    }
    let data = payload
        .event_data
        .ok_or_else(|| PayloadError::missing("a PUSH_ARTIFACT event", "event_data"))?;
    pushed(&data)
}

/// The repositories of a push's resources.
pub fn pushed(data: &EventData) -> Result<Parsed, PayloadError> {
    if data.resources.is_empty() {
        return Err(PayloadError::missing("a Harbor push", "resources"));
    }
    let mut hints = Vec::new();
    for r in &data.resources {
        let url = r.resource_url.as_deref().ok_or_else(|| {
            PayloadError::missing("a Harbor push resource", "resource_url (the registry host)")
        })?;
        hints.push(repository_of_reference(url)?);
    }
    Ok(Parsed::Pushed(hints))
}
