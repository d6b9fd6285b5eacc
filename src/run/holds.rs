//! The held tags over the service's HTTP port, while this process holds the state directory's
//! lock (one process per store, so the command line cannot open it):
//!
//! - `GET /holds`: read-only, for `tagpilot holds --url`;
//! - `POST /holds/release`: releases one hold, as `tagpilot holds release` does with the service
//!   stopped, for a bearer token the operator configured (`holds.releaseToken`); without one
//!   the route refuses every request. The release is durable at once, and the next cycle plans
//!   without the hold.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::http::Shared;
use crate::holds::{FieldKey, HoldSelector};
use crate::report::holds::{holds_json, views};

/// 200 with the holds as `tagpilot holds --format json` prints them; 404 without a state
/// directory (no holds are kept), 503 when the store cannot read them.
pub(super) async fn list(State(shared): State<Arc<Shared>>) -> Response {
    let Some(state) = shared.state.as_ref() else {
        return no_state_dir();
    };
    let json = state
        .holds()
        .map_err(|e| e.to_string())
        .and_then(|holds| holds_json(&views(&holds)).map_err(|e| e.to_string()));
    match json {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e).into_response(),
    }
}

fn no_state_dir() -> Response {
    (
        StatusCode::NOT_FOUND,
        "no --state-dir: this process keeps no holds",
    )
        .into_response()
}

/// The body of `POST /holds/release`: the hold's `id` as `tagpilot holds` lists it, or its
/// `policy`, `file` and `field` (and `repository`), as `tagpilot holds release` takes them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReleaseRequest {
    id: Option<String>,
    repository: Option<String>,
    policy: Option<String>,
    file: Option<String>,
    field: Option<String>,
}

impl ReleaseRequest {
    fn selector(self) -> Option<HoldSelector> {
        match self {
            ReleaseRequest { id: Some(id), .. } => Some(HoldSelector::Id(id)),
            ReleaseRequest {
                id: None,
                repository,
                policy: Some(policy),
                file: Some(file),
                field: Some(field),
            } => Some(HoldSelector::Field(FieldKey {
                repository,
                policy,
                file,
                field,
            })),
            _ => None,
        }
    }
}

/// `POST /holds/release`. Refused (403) unless `holds.releaseToken` is configured, and (401)
/// unless the request carries it as `Authorization: Bearer <token>`; only then is the body
/// read. 200 names the hold released; 404 when nothing is held there (or no `--state-dir`),
/// 400 for a body that names no hold, 503 when the store cannot write.
pub(super) async fn release(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let Some(token) = &shared.release_token else {
        return (
            StatusCode::FORBIDDEN,
            "releasing holds over HTTP is off: configure holds.releaseToken in tagpilot.yaml",
        )
            .into_response();
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if !sent.is_some_and(|sent| token.matches(sent.trim().as_bytes())) {
        tracing::warn!("a hold release was refused: no or the wrong bearer token");
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "a hold release needs the token of holds.releaseToken as Authorization: Bearer <token>",
        )
            .into_response();
    }
    let Some(state) = shared.state.as_ref() else {
        return no_state_dir();
    };
    let which = body
        .ok()
        .and_then(|b| serde_json::from_slice::<ReleaseRequest>(&b).ok())
        .and_then(ReleaseRequest::selector);
    let Some(which) = which else {
        return (
            StatusCode::BAD_REQUEST,
            "name the hold to release as JSON: {\"id\": …}, or {\"policy\": …, \"file\": …, \"field\": …} (and \"repository\")",
        )
            .into_response();
    };
    match state.release_selected(&which) {
        Ok(Some(released)) => {
            tracing::info!(field = %released.key, tag = %released.tag, reason = %released.reason, "hold released over HTTP (POST /holds/release)");
            let text = format!(
                "released {}: {} held: {}",
                released.key, released.tag, released.reason
            );
            (StatusCode::OK, text).into_response()
        }
        Ok(None) => (
            StatusCode::NOT_FOUND,
            format!("no hold {which}; GET /holds lists them"),
        )
            .into_response(),
        Err(e) => (
            StatusCode::SERVICE_UNAVAILABLE,
            crate::error_chain::chain(&e),
        )
            .into_response(),
    }
}
