//! Azure Container Registry's webhooks, for Image Updater's `type=acr` only: one event per
//! request, `{"action": "push", "target": {"repository"}, "request": {"host"}}`. Other actions
//! (`delete`, `chart_push`, `chart_delete`) are accepted and ignored.

use serde::Deserialize;

use super::{Parsed, PayloadError, repository};

#[derive(Debug, Deserialize)]
struct Event {
    action: String,
    target: Target,
    #[serde(default)]
    request: Option<RequestRecord>,
}

#[derive(Debug, Deserialize)]
struct Target {
    repository: String,
}

#[derive(Debug, Deserialize)]
struct RequestRecord {
    host: String,
}

pub fn parse(body: &[u8]) -> Result<Parsed, PayloadError> {
    let event: Event = super::json(body, "an Azure Container Registry webhook")?;
    if event.action != "push" {
        return Ok(Parsed::Ignored(format!(
            "a {} event, not a push",
            event.action
        )));
    }
    let host = event
        .request
        .ok_or_else(|| PayloadError::missing("an Azure Container Registry push", "request.host"))?
        .host;
    Ok(Parsed::Pushed(vec![repository(
        &host,
        &event.target.repository,
    )?]))
}
