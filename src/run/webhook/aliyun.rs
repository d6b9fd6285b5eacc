//! Alibaba Cloud Container Registry's webhooks, for Image Updater's `type=aliyun-acr` only:
//! `{"push_data": {"tag"}, "repository": {"repo_full_name", "region"}}`, sent for pushes. The
//! payload does not name an Enterprise instance's host, so as Image Updater does, the host is
//! `?registry_url=` when given, else `registry.<region>.aliyuncs.com`. Repository names are
//! lower-cased, as image references must be (the documented example writes `repoTest`).

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
    repo_full_name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    region: Option<String>,
}

pub fn parse(body: &[u8], registry_url: Option<&str>) -> Result<Parsed, PayloadError> {
    let payload: Payload = super::json(body, "an Alibaba Cloud Container Registry webhook")?;
    let r = &payload.repository;
    let path = match (&r.repo_full_name, &r.namespace, &r.name) {
        (Some(full), _, _) => full.clone(),
        (None, Some(namespace), Some(name)) => format!("{namespace}/{name}"),
        _ => {
            return Err(PayloadError::missing(
                "an Alibaba Cloud webhook",
                "repository.repo_full_name",
            ));
        }
    };
    let host = match (registry_url, &r.region) {
        (Some(url), _) => url.to_string(),
        (None, Some(region)) => format!("registry.{region}.aliyuncs.com"),
        (None, None) => {
            return Err(PayloadError::NoRegion);
        }
    };
    Ok(Parsed::Pushed(vec![repository(
        &host,
        &path.to_ascii_lowercase(),
    )?]))
}
