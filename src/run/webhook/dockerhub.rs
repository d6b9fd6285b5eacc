//! Docker Hub's repository webhooks: `{"push_data": {"tag"}, "repository": {"repo_name"}}`.
//! Docker Hub sends them for pushes only, and signs nothing: the secret goes in the URL.

use serde::Deserialize;

use super::{Parsed, PayloadError, repository};

#[derive(Debug, Deserialize)]
struct Payload {
    /// Required, never read: it is what makes this a push notification.
    #[serde(rename = "push_data")]
    _push_data: serde::de::IgnoredAny,
    repository: Repo,
}

#[derive(Debug, Deserialize)]
struct Repo {
    #[serde(default)]
    repo_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
}

pub fn parse(body: &[u8]) -> Result<Parsed, PayloadError> {
    let payload: Payload = super::json(body, "a Docker Hub webhook")?;
    let r = &payload.repository;
    let path = match (&r.repo_name, &r.namespace, &r.name) {
        (Some(full), _, _) => full.clone(),
        (None, Some(namespace), Some(name)) => format!("{namespace}/{name}"),
        _ => {
            return Err(PayloadError::missing(
                "a Docker Hub webhook",
                "repository.repo_name",
            ));
        }
    };
    Ok(Parsed::Pushed(vec![repository("docker.io", &path)?]))
}
