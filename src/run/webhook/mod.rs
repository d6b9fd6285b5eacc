//! Registry push notifications: `POST /webhooks/<kind>` for each registry's own format, and
//! Argo CD Image Updater's `POST /webhook?type=<type>` ([`image_updater`]) so that a registry
//! already pointed at Image Updater needs no change.
//!
//! A notification is only a hint. What it yields is the image repositories that were pushed to
//! (registry host and path, normalised as policies name theirs); the loop then re-checks the
//! policies and Applications that use them ([`super::recheck`]), reading the registry again. A
//! tag or digest in the payload is never trusted, and never even kept.
//!
//! Every request is checked in one order ([`answer`]): a secret must be configured for the kind
//! (else 401: a kind is never open), the secret the request carries is compared in constant time
//! (401), the body must fit [`BODY_LIMIT`] (413), then it is parsed (400 with the reason). Only
//! then are hints returned. Each kind's file says what it reads and what it ignores.
//!
//! Pure: no I/O, no clock; the HTTP side is in [`super::http`].

mod acr;
mod aliyun;
mod cloudevents;
mod distribution;
mod dockerhub;
mod gar;
mod ghcr;
mod harbor;
pub mod image_updater;
mod quay;
pub mod secrets;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};

use crate::image::Repository;

pub use secrets::{Secret, Secrets, WebhookError};

/// Bodies larger than this are refused (413). The largest documented payload, GitHub's
/// `package` event, is about 20 KiB; distribution batches a few events of under 1 KiB each.
pub const BODY_LIMIT: usize = 256 * 1024;

/// The notification formats tagpilot reads, each on `/webhooks/<name>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// CNCF distribution's `notifications.endpoints` (also GitLab's registry).
    Distribution,
    DockerHub,
    /// GitHub `package` and `registry_package` events, for ghcr.io.
    Ghcr,
    Harbor,
    Quay,
    /// Google Artifact Registry, through a Pub/Sub push subscription.
    Gar,
    CloudEvents,
}

impl Kind {
    pub const ALL: [Kind; 7] = [
        Kind::Distribution,
        Kind::DockerHub,
        Kind::Ghcr,
        Kind::Harbor,
        Kind::Quay,
        Kind::Gar,
        Kind::CloudEvents,
    ];

    /// The name in `/webhooks/<name>`, under `webhooks:` and in the metric's `kind` label.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Distribution => "distribution",
            Kind::DockerHub => "dockerhub",
            Kind::Ghcr => "ghcr",
            Kind::Harbor => "harbor",
            Kind::Quay => "quay",
            Kind::Gar => "gar",
            Kind::CloudEvents => "cloudevents",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Where a request of this kind may carry its secret; any one of them must hold it.
    fn carriers(self) -> &'static [Carrier] {
        match self {
            // What `notifications.endpoints[].headers` sends.
            Kind::Distribution => &[Carrier::Bearer],
            // Docker Hub, Quay and Pub/Sub push can set nothing but the URL.
            Kind::DockerHub | Kind::Quay | Kind::Gar => &[Carrier::Query],
            Kind::Ghcr => &[Carrier::HubSignature],
            // Harbor's "Auth Header" is sent as `Authorization` exactly as typed.
            Kind::Harbor => &[Carrier::Header("authorization"), Carrier::Bearer],
            // EventBridge API destinations send a header of one's choice; others the URL.
            Kind::CloudEvents => &[
                Carrier::Query,
                Carrier::Header("x-webhook-secret"),
                Carrier::Bearer,
            ],
        }
    }

    fn parse(self, request: &Request<'_>) -> Result<Parsed, PayloadError> {
        match self {
            Kind::Distribution => distribution::parse(request.body),
            Kind::DockerHub => dockerhub::parse(request.body),
            Kind::Ghcr => ghcr::parse(request.header("x-github-event"), request.body),
            Kind::Harbor => harbor_payload(request.body),
            Kind::Quay => quay::parse(request.body),
            Kind::Gar => gar::parse(request.body),
            Kind::CloudEvents => cloudevents::parse(request.headers, request.body),
        }
    }
}

/// Where a request carries the secret.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    /// `Authorization: Bearer <secret>`.
    Bearer,
    /// A header whose whole value is the secret.
    Header(&'static str),
    /// `?secret=<secret>` in the URL.
    Query,
    /// `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>` (GitHub).
    HubSignature,
}

/// What became of a notification, as `tagpilot_webhook_requests_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// A push: its repositories are re-checked.
    Accepted,
    /// Valid, but nothing pushed (a pull, a delete, a blob, a test delivery): nothing to do.
    Ignored,
    Unauthorized,
    Malformed,
    TooLarge,
    /// `/webhooks/<kind>` or `/webhook?type=` named no kind tagpilot reads.
    UnknownKind,
}

impl Verdict {
    pub const ALL: [Verdict; 6] = [
        Verdict::Accepted,
        Verdict::Ignored,
        Verdict::Unauthorized,
        Verdict::Malformed,
        Verdict::TooLarge,
        Verdict::UnknownKind,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Verdict::Accepted => "accepted",
            Verdict::Ignored => "ignored",
            Verdict::Unauthorized => "unauthorized",
            Verdict::Malformed => "malformed",
            Verdict::TooLarge => "too_large",
            Verdict::UnknownKind => "unknown_kind",
        }
    }
}

/// What a payload says, once parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// These image repositories were pushed to.
    Pushed(Vec<Repository>),
    /// The same, in a delivery the sender names with these ids and sends again until it is
    /// answered (distribution's event ids): one seen before is not acted on twice.
    Delivered(Vec<Repository>, Vec<String>),
    /// Nothing was pushed; the reason is answered to the sender.
    Ignored(String),
}

/// One request, as the parsers see it.
pub struct Request<'a> {
    pub headers: &'a HeaderMap,
    /// The URL's query parameters, decoded.
    pub query: &'a [(String, String)],
    pub body: &'a [u8],
}

impl Request<'_> {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    fn query(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The answer to one request, and the repositories it hints at (empty unless accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    pub verdict: Verdict,
    pub status: StatusCode,
    pub text: String,
    pub hints: Vec<Repository>,
    /// The ids the sender gave this delivery ([`Parsed::Delivered`]); empty when it gives none.
    pub deliveries: Vec<String>,
    /// What was wrong with a malformed body ([`PayloadError::label`]), for the log.
    pub error: Option<&'static str>,
}

impl Answer {
    fn refuse(verdict: Verdict, status: StatusCode, text: impl Into<String>) -> Answer {
        Answer {
            verdict,
            status,
            text: text.into(),
            hints: Vec::new(),
            deliveries: Vec::new(),
            error: None,
        }
    }

    pub fn unknown_kind(text: impl Into<String>, status: StatusCode) -> Answer {
        Answer::refuse(Verdict::UnknownKind, status, text)
    }
}

/// Answers a notification of `kind` on `/webhooks/<kind>`.
pub fn handle(
    kind: Kind,
    secrets: &Secrets,
    headers: &HeaderMap,
    query: &[(String, String)],
    body: Result<Bytes, BytesRejection>,
) -> Answer {
    answer(
        Check {
            name: kind.name(),
            secret_key: kind.name(),
            carriers: kind.carriers(),
        },
        secrets,
        headers,
        query,
        body,
        |request| kind.parse(request),
    )
}

/// How one endpoint checks its requests.
struct Check<'a> {
    /// For messages: `ghcr`, `docker.io`.
    name: &'a str,
    /// The key under `webhooks:` that holds its secret.
    secret_key: &'a str,
    carriers: &'a [Carrier],
}

/// The checks every notification goes through, in order; `parse` runs only on an authorized
/// body that fits.
fn answer(
    check: Check<'_>,
    secrets: &Secrets,
    headers: &HeaderMap,
    query: &[(String, String)],
    body: Result<Bytes, BytesRejection>,
    parse: impl FnOnce(&Request<'_>) -> Result<Parsed, PayloadError>,
) -> Answer {
    let Some(secret) = secrets.get(check.secret_key) else {
        return Answer::refuse(
            Verdict::Unauthorized,
            StatusCode::UNAUTHORIZED,
            format!(
                "no secret is configured for {} notifications (webhooks.secretEnv or secretFile, or webhooks.{}): they are all refused",
                check.name, check.secret_key
            ),
        );
    };
    let signed = check.carriers.contains(&Carrier::HubSignature);
    // Secrets sent as such are checked before the body is even looked at.
    if !signed && !carried(check.carriers, secret, headers, query) {
        return Answer::refuse(
            Verdict::Unauthorized,
            StatusCode::UNAUTHORIZED,
            format!("wrong or missing secret: {}", describe(check.carriers)),
        );
    }
    let body = match body {
        Ok(b) => b,
        Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return Answer::refuse(
                Verdict::TooLarge,
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is larger than {BODY_LIMIT} bytes"),
            );
        }
        Err(e) => return Answer::refuse(Verdict::Malformed, e.status(), e.body_text()),
    };
    if signed {
        let signature = headers
            .get("x-hub-signature-256")
            .and_then(|v| v.to_str().ok());
        if !signature.is_some_and(|s| secret.signed(&body, s)) {
            return Answer::refuse(
                Verdict::Unauthorized,
                StatusCode::UNAUTHORIZED,
                format!("wrong or missing signature: {}", describe(check.carriers)),
            );
        }
    }
    let request = Request {
        headers,
        query,
        body: &body,
    };
    let (mut hints, deliveries) = match parse(&request) {
        Err(error) => {
            let mut answer =
                Answer::refuse(Verdict::Malformed, StatusCode::BAD_REQUEST, render(&error));
            answer.error = Some(error.label());
            return answer;
        }
        Ok(Parsed::Ignored(why)) => {
            return Answer::refuse(Verdict::Ignored, StatusCode::ACCEPTED, why);
        }
        Ok(Parsed::Pushed(hints)) => (hints, Vec::new()),
        Ok(Parsed::Delivered(hints, ids)) => (hints, ids),
    };
    hints.sort_unstable();
    hints.dedup();
    if hints.is_empty() {
        return Answer::refuse(Verdict::Ignored, StatusCode::ACCEPTED, "nothing pushed");
    }
    let names: Vec<String> = hints.iter().map(ToString::to_string).collect();
    Answer {
        verdict: Verdict::Accepted,
        status: StatusCode::ACCEPTED,
        text: format!("re-checking {}", names.join(", ")),
        hints,
        deliveries,
        error: None,
    }
}

/// Whether one of the header or query carriers holds the secret.
fn carried(
    carriers: &[Carrier],
    secret: &Secret,
    headers: &HeaderMap,
    query: &[(String, String)],
) -> bool {
    carriers.iter().any(|c| match c {
        Carrier::Bearer => headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
            .is_some_and(|sent| secret.matches(sent)),
        Carrier::Header(name) => headers
            .get(*name)
            .is_some_and(|v| secret.matches(v.as_bytes())),
        Carrier::Query => query
            .iter()
            .any(|(k, v)| k == "secret" && secret.matches(v.as_bytes())),
        Carrier::HubSignature => false,
    })
}

/// Where the secret is expected, for the 401's text.
fn describe(carriers: &[Carrier]) -> String {
    let ways: Vec<String> = carriers
        .iter()
        .map(|c| match c {
            Carrier::Bearer => "Authorization: Bearer <secret>".to_string(),
            Carrier::Header(name) => format!("{name}: <secret>"),
            Carrier::Query => "?secret=<secret>".to_string(),
            Carrier::HubSignature => {
                "X-Hub-Signature-256: sha256=<HMAC-SHA256 of the body>".to_string()
            }
        })
        .collect();
    format!("expected {}", ways.join(" or "))
}

/// Why a body is not a notification tagpilot reads: answered as a 400, with its causes
/// ([`render`]). Each message says its own part; a JSON, base64 or image-reference error below
/// it comes from `source()`.
#[derive(Debug, thiserror::Error)]
pub enum PayloadError {
    /// The body (or a part of it) does not deserialise into `what` the endpoint reads.
    #[error("not {what}")]
    NotA {
        what: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A GitHub event whose `key` (`package`, `registry_package`) does not read as a package.
    #[error("not a GitHub {event} event: {key}")]
    NotAGitHubEvent {
        event: String,
        key: &'static str,
        #[source]
        source: serde_json::Error,
    },
    /// A CloudEvent of type `kind` whose `field` does not read as that type's data.
    #[error("{kind} {field}")]
    BadEventData {
        kind: String,
        field: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("{field} is not base64")]
    NotBase64 {
        field: &'static str,
        #[source]
        source: base64::DecodeError,
    },
    #[error("no {header} header")]
    MissingHeader { header: &'static str },
    /// `what` (a push, a resource, a webhook) lacks `field`, which names the repository or host.
    #[error("{what} without {field}")]
    MissingField { what: String, field: &'static str },
    #[error("not a CloudEvent: no {attribute}")]
    NotACloudEvent { attribute: &'static str },
    #[error("CloudEvents specversion {version:?} is not 1.0")]
    UnsupportedSpecversion { version: String },
    #[error("source {value:?} is not urn:aws:ecr:<region>:<account>:repository/<name>")]
    NotAnEcrSource { value: String },
    #[error("a push to {repository} names no registry host (request.host)")]
    NoRegistryHost { repository: String },
    /// Alibaba Cloud names the host only by its region.
    #[error("an Alibaba Cloud webhook without repository.region: pass ?registry_url=<host>")]
    NoRegion,
    #[error("{field} {value:?} names no repository")]
    NoRepositoryIn { field: &'static str, value: String },
    #[error("no image repository in {host:?} and {path:?}")]
    NoRepository { host: String, path: String },
    #[error("{name} is not an image repository")]
    NotARepository {
        name: String,
        #[source]
        source: crate::image::ImageError,
    },
    #[error("{reference:?} is not an image reference")]
    NotAReference {
        reference: String,
        #[source]
        source: crate::image::ImageError,
    },
}

impl PayloadError {
    /// A bounded name for the variant, for metrics and log fields.
    pub fn label(&self) -> &'static str {
        match self {
            PayloadError::NotA { .. } => "not_json",
            PayloadError::NotAGitHubEvent { .. } => "not_a_github_event",
            PayloadError::BadEventData { .. } => "bad_event_data",
            PayloadError::NotBase64 { .. } => "not_base64",
            PayloadError::MissingHeader { .. } => "missing_header",
            PayloadError::MissingField { .. } => "missing_field",
            PayloadError::NotACloudEvent { .. } => "not_a_cloudevent",
            PayloadError::UnsupportedSpecversion { .. } => "unsupported_specversion",
            PayloadError::NotAnEcrSource { .. } => "not_an_ecr_source",
            PayloadError::NoRegistryHost { .. } => "no_registry_host",
            PayloadError::NoRegion => "no_region",
            PayloadError::NoRepositoryIn { .. } => "no_repository_in",
            PayloadError::NoRepository { .. } => "no_repository",
            PayloadError::NotARepository { .. } => "not_a_repository",
            PayloadError::NotAReference { .. } => "not_a_reference",
        }
    }

    /// `what` without `field`.
    fn missing(what: impl Into<String>, field: &'static str) -> PayloadError {
        PayloadError::MissingField {
            what: what.into(),
            field,
        }
    }
}

/// An error and its causes on one line (`not a Harbor webhook: missing field `type` at line 1
/// column 2`), for the answer's body: the sender has no other way to read the cause.
pub fn render(error: &(dyn std::error::Error + 'static)) -> String {
    crate::error_chain::chain(error)
}

/// The image repository at `host` and `path`, as a policy naming `host/path` would have it
/// (lower-cased host, Docker Hub's spellings folded).
fn repository(host: &str, path: &str) -> Result<Repository, PayloadError> {
    let host = host.trim().trim_end_matches('/');
    let path = path.trim().trim_matches('/');
    if host.is_empty() || path.is_empty() {
        return Err(PayloadError::NoRepository {
            host: host.to_string(),
            path: path.to_string(),
        });
    }
    let name = format!("{host}/{path}");
    Repository::parse(&name).map_err(|source| PayloadError::NotARepository { name, source })
}

/// The repository of an image reference with a host (`ghcr.io/o/app:1.0`, `host/p@sha256:…`).
fn repository_of_reference(reference: &str) -> Result<Repository, PayloadError> {
    let image =
        crate::image::ImageRef::parse(reference).map_err(|source| PayloadError::NotAReference {
            reference: reference.to_string(),
            source,
        })?;
    Ok(image.repository)
}

/// A JSON body into `T`, or the reason it is not a `what`.
fn json<'a, T: serde::Deserialize<'a>>(
    body: &'a [u8],
    what: &'static str,
) -> Result<T, PayloadError> {
    serde_json::from_slice(body).map_err(|source| PayloadError::NotA { what, source })
}

/// Harbor sends its own payload, or a structured CloudEvent when its webhook policy chose
/// CloudEvents (`specversion` tells them apart).
pub(super) fn harbor_payload(body: &[u8]) -> Result<Parsed, PayloadError> {
    let value: serde_json::Value = json(body, "a Harbor webhook")?;
    if value.get("specversion").is_some() {
        return cloudevents::parse_structured(body);
    }
    harbor::parse(value)
}

#[cfg(test)]
mod tests;
