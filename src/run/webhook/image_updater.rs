//! Argo CD Image Updater's endpoint, `POST /webhook?type=<type>` (or the `X-Registry-Type`
//! header), so that registries already pointed at Image Updater need no change. Each type reads
//! the payload and checks the secret exactly as Image Updater does:
//!
//! | type | payload | secret |
//! |---|---|---|
//! | `docker.io` | Docker Hub | `?secret=` |
//! | `quay.io` | Quay | `?secret=` |
//! | `aliyun-acr` | Alibaba Cloud (`?registry_url=` for the host) | `?secret=` |
//! | `ghcr.io` | GitHub `package` events, `published` container packages | `X-Hub-Signature-256` |
//! | `harbor` | Harbor, `PUSH_ARTIFACT` | `Authorization` equal to the secret |
//! | `acr` | Azure Container Registry, `action: push` | `Authorization` equal to the secret |
//! | `cloudevents` | CloudEvents (ECR through EventBridge) | `?secret=` or `X-Webhook-Secret` |
//! | `gitlab` | GitLab's container registry: distribution's envelope, manifest pushes | `Authorization` equal to the secret |
//!
//! The secret of a type is the one of the matching kind under `webhooks:` (`dockerhub`, `quay`,
//! `aliyunAcr`, `ghcr`, `harbor`, `acr`, `cloudevents`; `distribution` for `gitlab`, whose
//! registry speaks distribution's format). A type with none is refused, which is
//! Image Updater's default since 1.3 too. What differs on purpose: answers are tagpilot's (202
//! when accepted, 401 for a wrong secret, where Image Updater answers 200 and 400), which
//! registries treat alike; and a valid delivery tagpilot does not act on (a GitHub `ping`) is
//! accepted and ignored rather than refused.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};

use super::{
    Answer, Carrier, Check, Parsed, PayloadError, Request, Secrets, acr, aliyun, cloudevents,
    distribution, dockerhub, ghcr, quay,
};

/// Image Updater's registry types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    DockerHub,
    Quay,
    AliyunAcr,
    Ghcr,
    Harbor,
    Acr,
    CloudEvents,
    GitLab,
}

impl Type {
    pub const ALL: [Type; 8] = [
        Type::DockerHub,
        Type::Ghcr,
        Type::Harbor,
        Type::Quay,
        Type::AliyunAcr,
        Type::Acr,
        Type::CloudEvents,
        Type::GitLab,
    ];

    /// As Image Updater spells it, and as the metric's `kind` label shows it.
    pub fn name(self) -> &'static str {
        match self {
            Type::DockerHub => "docker.io",
            Type::Quay => "quay.io",
            Type::AliyunAcr => "aliyun-acr",
            Type::Ghcr => "ghcr.io",
            Type::Harbor => "harbor",
            Type::Acr => "acr",
            Type::CloudEvents => "cloudevents",
            Type::GitLab => "gitlab",
        }
    }

    pub fn from_name(name: &str) -> Option<Type> {
        Type::ALL.into_iter().find(|t| t.name() == name)
    }

    /// The key under `webhooks:` whose secret this type checks.
    fn secret_key(self) -> &'static str {
        match self {
            Type::DockerHub => "dockerhub",
            Type::Quay => "quay",
            Type::AliyunAcr => "aliyunAcr",
            Type::Ghcr => "ghcr",
            Type::Harbor => "harbor",
            Type::Acr => "acr",
            Type::CloudEvents => "cloudevents",
            Type::GitLab => "distribution",
        }
    }

    fn carriers(self) -> &'static [Carrier] {
        match self {
            Type::DockerHub | Type::Quay | Type::AliyunAcr => &[Carrier::Query],
            Type::Ghcr => &[Carrier::HubSignature],
            // GitLab's registry sends its notification secret as the whole header, as GitLab's
            // own endpoint compares it (`lib/api/container_registry_event.rb`).
            Type::Harbor | Type::Acr | Type::GitLab => &[Carrier::Header("authorization")],
            Type::CloudEvents => &[Carrier::Query, Carrier::Header("x-webhook-secret")],
        }
    }

    fn parse(self, request: &Request<'_>) -> Result<Parsed, PayloadError> {
        match self {
            Type::DockerHub => dockerhub::parse(request.body),
            Type::Quay => quay::parse(request.body),
            Type::AliyunAcr => aliyun::parse(request.body, request.query("registry_url")),
            Type::Ghcr => ghcr::parse_as(
                request.header("x-github-event"),
                request.body,
                ghcr::Accept::PublishedPackages,
            ),
            Type::Harbor => super::harbor_payload(request.body),
            Type::Acr => acr::parse(request.body),
            Type::CloudEvents => cloudevents::parse(request.headers, request.body),
            Type::GitLab => distribution::parse(request.body),
        }
    }
}

/// The type a request names: `?type=` first, then `X-Registry-Type`, as Image Updater reads it.
pub fn requested_type<'a>(
    headers: &'a HeaderMap,
    query: &'a [(String, String)],
) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, v)| k == "type" && !v.is_empty())
        .map(|(_, v)| v.as_str())
        .or_else(|| {
            headers
                .get("x-registry-type")
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
        })
}

/// Answers one request to `/webhook`; the type it named comes back for the metric's label.
pub fn handle(
    secrets: &Secrets,
    headers: &HeaderMap,
    query: &[(String, String)],
    body: Result<Bytes, BytesRejection>,
) -> (Option<Type>, Answer) {
    let names: Vec<&str> = Type::ALL.iter().map(|t| t.name()).collect();
    let Some(name) = requested_type(headers, query) else {
        return (
            None,
            Answer::unknown_kind(
                format!(
                    "missing registry type: ?type= or X-Registry-Type, one of {}",
                    names.join(", ")
                ),
                StatusCode::BAD_REQUEST,
            ),
        );
    };
    let Some(kind) = Type::from_name(name) else {
        return (
            None,
            Answer::unknown_kind(
                format!(
                    "unknown registry type {name:?}: one of {}",
                    names.join(", ")
                ),
                StatusCode::BAD_REQUEST,
            ),
        );
    };
    let answer = super::answer(
        Check {
            name: kind.name(),
            secret_key: kind.secret_key(),
            carriers: kind.carriers(),
        },
        secrets,
        headers,
        query,
        body,
        |request| kind.parse(request),
    );
    (Some(kind), answer)
}
