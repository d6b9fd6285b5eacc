//! CloudEvents 1.0 over HTTP, in structured mode (`Content-Type: application/cloudevents+json`,
//! or plain JSON that carries `specversion`, as EventBridge API destinations send it) and in
//! binary mode (the attributes in `ce-*` headers, the body is `data`).
//!
//! The event types read, and what of them:
//! - `harbor.artifact.pushed` (Harbor's CloudEvents format): `data.resources[].resource_url`.
//! - `com.amazon.ecr.image.push` (ECR through an EventBridge input transformer, as Argo CD Image
//!   Updater documents it): `data.repositoryName` at
//!   `<data.registryId or the account in source>.dkr.ecr.<region in source>.amazonaws.com`, from
//!   `source: urn:aws:ecr:<region>:<account>:repository/<name>`.
//! - `google.cloud.pubsub.topic.v1.messagePublished` (Eventarc delivering the `gcr` topic):
//!   Artifact Registry's message in `data.message.data`, as [`super::gar`] reads it.
//! - Any other type naming `image` or `container` (and not a pull or delete) whose data names
//!   `repository` or `repositoryName` and `registry` or `registryUrl`, as Image Updater reads
//!   them.
//!
//! Every other valid event (Harbor's pulls, deletes and scans; unknown types) is accepted and
//! ignored. An event without `specversion`, `id`, `source` or `type` is malformed.

use axum::http::HeaderMap;
use serde::Deserialize;
use serde_json::Value;

use super::{Parsed, PayloadError, gar, harbor, repository};

/// The attributes tagpilot reads, wherever they came from.
#[derive(Debug, Default, Deserialize)]
struct Event {
    #[serde(default)]
    specversion: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    source: Option<String>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    data: Option<Value>,
}

pub fn parse(headers: &HeaderMap, body: &[u8]) -> Result<Parsed, PayloadError> {
    if headers.contains_key("ce-specversion") {
        parse_binary(headers, body)
    } else {
        parse_structured(body)
    }
}

pub fn parse_structured(body: &[u8]) -> Result<Parsed, PayloadError> {
    let event: Event = super::json(body, "a CloudEvent")?;
    read(event)
}

fn parse_binary(headers: &HeaderMap, body: &[u8]) -> Result<Parsed, PayloadError> {
    let attribute = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let data = if body.iter().all(u8::is_ascii_whitespace) {
        None
    } else {
        Some(super::json(body, "a CloudEvent's JSON data")?)
    };
    read(Event {
        specversion: attribute("ce-specversion"),
        id: attribute("ce-id"),
        source: attribute("ce-source"),
        kind: attribute("ce-type"),
        data,
    })
}

fn read(event: Event) -> Result<Parsed, PayloadError> {
    let required = [
        ("specversion", &event.specversion),
        ("id", &event.id),
        ("source", &event.source),
        ("type", &event.kind),
    ];
    for (name, value) in required {
        if value.as_deref().is_none_or(str::is_empty) {
            return Err(PayloadError::NotACloudEvent { attribute: name });
        }
    }
    if event.specversion.as_deref() != Some("1.0") {
        return Err(PayloadError::UnsupportedSpecversion {
            version: event.specversion.unwrap_or_default(),
        });
    }
    let kind = event.kind.as_deref().unwrap_or_default();
    let source = event.source.as_deref().unwrap_or_default();
    let data = event.data.unwrap_or(Value::Null);
    match kind {
        "harbor.artifact.pushed" => {
            let data: harbor::EventData =
                serde_json::from_value(data).map_err(|source| PayloadError::BadEventData {
                    kind: kind.to_string(),
                    field: "data",
                    source,
                })?;
            harbor::pushed(&data)
        }
        "com.amazon.ecr.image.push" => ecr(source, &data),
        "google.cloud.pubsub.topic.v1.messagePublished" => {
            let message: gar::PubsubMessage = serde_json::from_value(data["message"].clone())
                .map_err(|source| PayloadError::BadEventData {
                    kind: kind.to_string(),
                    field: "data.message",
                    source,
                })?;
            gar::from_message(&message)
        }
        other if generic(other) => generic_push(other, &data),
        other => Ok(Parsed::Ignored(format!(
            "CloudEvents of type {other} are not read"
        ))),
    }
}

/// ECR's registry is `<account>.dkr.ecr.<region>.amazonaws.com`.
fn ecr(source: &str, data: &Value) -> Result<Parsed, PayloadError> {
    let fields: Vec<&str> = source.split(':').collect();
    let (region, account, resource) = match fields.as_slice() {
        ["urn" | "arn", "aws", "ecr", region, account, resource] => (*region, *account, *resource),
        _ => {
            return Err(PayloadError::NotAnEcrSource {
                value: source.to_string(),
            });
        }
    };
    let account = data["registryId"].as_str().unwrap_or(account);
    let name = data["repositoryName"]
        .as_str()
        .or_else(|| resource.strip_prefix("repository/"))
        .ok_or_else(|| PayloadError::missing("an ECR push", "data.repositoryName"))?;
    let host = format!("{account}.dkr.ecr.{region}.amazonaws.com");
    Ok(Parsed::Pushed(vec![repository(&host, name)?]))
}

/// Image Updater's catch-all: a type about images or containers, but not a pull or a delete.
fn generic(kind: &str) -> bool {
    let kind = kind.to_ascii_lowercase();
    (kind.contains("image") || kind.contains("container"))
        && !["pull", "delet", "scan"].iter().any(|w| kind.contains(w))
}

fn generic_push(kind: &str, data: &Value) -> Result<Parsed, PayloadError> {
    let field = |names: [&str; 2]| names.iter().find_map(|n| data[*n].as_str());
    let name = field(["repositoryName", "repository"]).ok_or_else(|| {
        PayloadError::missing(
            format!("a {kind} event"),
            "data.repository or repositoryName",
        )
    })?;
    let registry = field(["registryUrl", "registry"]).ok_or_else(|| {
        PayloadError::missing(format!("a {kind} event"), "data.registry or registryUrl")
    })?;
    let registry = registry
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    Ok(Parsed::Pushed(vec![repository(registry, name)?]))
}
