//! CNCF distribution's notifications (`application/vnd.docker.distribution.events.v1+json` from
//! 2.x, `…v2+json` from 3.0; the envelope is the same): `{"events": [{"action", "target",
//! "request"}, …]}`, as the reference registry and GitLab's registry send them to
//! `notifications.endpoints`.
//!
//! A hint is a `push` of a **manifest**: its `target.repository` at `request.host` (the host the
//! pusher wrote, so the one images are named by). Accepted and ignored: `pull`, `mount` and
//! `delete` events, and pushes of blobs (layers and configs arrive as events of their own before
//! their manifest, which is what a tag points to).

use serde::Deserialize;

use super::{Parsed, PayloadError, repository};

/// What a manifest push carries as `target.mediaType`; a URL naming `/manifests/` or `/blobs/`
/// decides first.
const MANIFEST_TYPES: [&str; 7] = [
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.oci.artifact.manifest.v1+json",
];

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
    #[serde(default)]
    request: RequestRecord,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Target {
    repository: String,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    tag: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct RequestRecord {
    #[serde(default)]
    host: Option<String>,
}

impl Target {
    fn is_manifest(&self) -> bool {
        if let Some(url) = &self.url {
            if url.contains("/manifests/") {
                return true;
            }
            if url.contains("/blobs/") {
                return false;
            }
        }
        // GitLab's registry sends `"tag": ""` with its blob pushes (Image Updater's
        // gitlab_test.go): no tag.
        self.tag.as_deref().is_some_and(|t| !t.is_empty())
            || self
                .media_type
                .as_deref()
                .is_some_and(|m| MANIFEST_TYPES.contains(&m))
    }
}

pub fn parse(body: &[u8]) -> Result<Parsed, PayloadError> {
    let envelope: Envelope = super::json(body, "a distribution notification envelope")?;
    let mut pushed = Vec::new();
    let mut ids = Vec::new();
    for event in &envelope.events {
        if event.action != "push" || !event.target.is_manifest() {
            continue;
        }
        ids.extend(event.id.clone());
        let host = event
            .request
            .host
            .clone()
            .or_else(|| url_host(event.target.url.as_deref()?))
            .ok_or_else(|| PayloadError::NoRegistryHost {
                repository: event.target.repository.clone(),
            })?;
        pushed.push(repository(&host, &event.target.repository)?);
    }
    if pushed.is_empty() {
        return Ok(Parsed::Ignored(
            "no manifest pushes (pulls, mounts, deletes and blob pushes are not read)".into(),
        ));
    }
    if ids.is_empty() {
        return Ok(Parsed::Pushed(pushed));
    }
    Ok(Parsed::Delivered(pushed, ids))
}

/// `host[:port]` of a URL.
fn url_host(url: &str) -> Option<String> {
    let url = url::Url::parse(url).ok()?;
    let host = url.host_str()?;
    Some(match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_string(),
    })
}
