//! Quay's "Repository Push" notification: `{"repository", "docker_url", "updated_tags"}`.
//! `docker_url` carries the host (`quay.io`, or a self-hosted Quay's). Quay's other events
//! (builds queued, started, failed; vulnerabilities found) carry no `updated_tags` and are
//! accepted and ignored. Quay signs nothing: the secret goes in the URL.

use serde::Deserialize;

use super::{Parsed, PayloadError, repository};

#[derive(Debug, Deserialize)]
struct Payload {
    #[serde(default)]
    repository: Option<String>,
    #[serde(default)]
    docker_url: Option<String>,
    /// A list of tags (current documentation) or a map of tag to image (older examples).
    #[serde(default)]
    updated_tags: Option<serde_json::Value>,
}

pub fn parse(body: &[u8]) -> Result<Parsed, PayloadError> {
    let payload: Payload = super::json(body, "a Quay notification")?;
    let unnamed = || PayloadError::missing("a Quay notification", "repository or docker_url");
    if payload.repository.is_none() && payload.docker_url.is_none() {
        return Err(unnamed());
    }
    if payload.updated_tags.is_none() {
        return Ok(Parsed::Ignored(
            "not a repository push (no updated_tags)".into(),
        ));
    }
    let hint = match (&payload.docker_url, &payload.repository) {
        (Some(url), _) => {
            let url = url
                .trim_start_matches("https://")
                .trim_start_matches("http://");
            let (host, path) = url
                .split_once('/')
                .ok_or_else(|| PayloadError::NoRepositoryIn {
                    field: "docker_url",
                    value: url.to_string(),
                })?;
            repository(host, path)?
        }
        (None, Some(path)) => repository("quay.io", path)?,
        (None, None) => return Err(unnamed()),
    };
    Ok(Parsed::Pushed(vec![hint]))
}
