//! GitHub Packages' webhooks for ghcr.io: the `package` event (repository, organization and app
//! webhooks) and the older `registry_package` one, the same payload under another key. Signed
//! with `X-Hub-Signature-256`, checked before this reads a byte.
//!
//! A hint is a `published` or `updated` **container** package: the repository of its
//! `package_version.package_url` (`ghcr.io/Owner/name:tag`), else `ghcr.io/<owner>/<name>`,
//! lower-cased as image references are. Other packages (npm, Maven, …), other actions and other
//! events (`ping` when the webhook is created) are accepted and ignored.

use serde::Deserialize;

use super::{Parsed, PayloadError, repository, repository_of_reference};

#[derive(Debug, Deserialize)]
struct Package {
    name: String,
    #[serde(default)]
    package_type: Option<String>,
    #[serde(default)]
    ecosystem: Option<String>,
    owner: Owner,
    #[serde(default)]
    package_version: Option<Version>,
    #[serde(default)]
    registry: Option<Registry>,
}

#[derive(Debug, Deserialize)]
struct Owner {
    login: String,
}

#[derive(Debug, Deserialize)]
struct Version {
    #[serde(default)]
    package_url: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Registry {
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

impl Package {
    /// GitHub's own examples disagree on where this shows (`package_type: CONTAINER`,
    /// `ecosystem: docker`, `registry.type: CONTAINER`); any of them is enough.
    fn is_container(&self) -> bool {
        let is = |v: &Option<String>, names: &[&str]| {
            v.as_deref()
                .is_some_and(|v| names.iter().any(|n| v.eq_ignore_ascii_case(n)))
        };
        is(&self.package_type, &["container", "docker"])
            || is(&self.ecosystem, &["container", "docker"])
            || is(
                &self.registry.as_ref().and_then(|r| r.kind.clone()),
                &["container"],
            )
    }
}

/// Which deliveries count, for Image Updater's stricter `ghcr.io` type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Accept {
    /// `package` and `registry_package` events, `published` and `updated`.
    Pushes,
    /// `package` events, `published` only, as Image Updater reads them.
    PublishedPackages,
}

pub fn parse(event: Option<&str>, body: &[u8]) -> Result<Parsed, PayloadError> {
    parse_as(event, body, Accept::Pushes)
}

pub fn parse_as(event: Option<&str>, body: &[u8], accept: Accept) -> Result<Parsed, PayloadError> {
    let event = event.ok_or(PayloadError::MissingHeader {
        header: "X-GitHub-Event",
    })?;
    let key = match (event, accept) {
        ("package", _) => "package",
        ("registry_package", Accept::Pushes) => "registry_package",
        (other, _) => {
            return Ok(Parsed::Ignored(format!(
                "a GitHub {other} event, not a package push"
            )));
        }
    };
    let mut value: serde_json::Value = super::json(body, "a GitHub webhook")?;
    let action = value
        .get("action")
        .and_then(|a| a.as_str())
        .unwrap_or_default()
        .to_string();
    let package: Package = serde_json::from_value(value[key].take()).map_err(|source| {
        PayloadError::NotAGitHubEvent {
            event: event.to_string(),
            key,
            source,
        }
    })?;
    let pushed = match accept {
        Accept::Pushes => matches!(action.as_str(), "published" | "updated"),
        Accept::PublishedPackages => action == "published",
    };
    if !pushed {
        return Ok(Parsed::Ignored(format!(
            "a package {action:?} action, not a push"
        )));
    }
    if !package.is_container() {
        return Ok(Parsed::Ignored(format!(
            "package {} is not a container image",
            package.name
        )));
    }
    let url = package
        .package_version
        .as_ref()
        .and_then(|v| v.package_url.as_deref())
        .map(|u| u.trim_end_matches(':').to_ascii_lowercase())
        .filter(|u| u.contains('/'));
    let hint = match url {
        Some(url) => repository_of_reference(&url)?,
        None => repository(
            "ghcr.io",
            &format!("{}/{}", package.owner.login, package.name).to_ascii_lowercase(),
        )?,
    };
    Ok(Parsed::Pushed(vec![hint]))
}
