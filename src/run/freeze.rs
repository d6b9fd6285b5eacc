//! The emergency freeze over the service's HTTP port (`tagpilot freeze` / `unfreeze`):
//!
//! - `GET /freeze`: whether writes are frozen, by whom, why and since when (JSON);
//! - `POST /freeze` with `{"by": …, "reason": …}` freezes every write at once: each target not
//!   yet written, in the cycle running now too, is planned and held, named;
//! - `POST /unfreeze` lifts it; the next cycle writes what waited.
//!
//! Both changes need the bearer token of `holds.freezeToken`; without one configured, both
//! are refused: a freeze is never taken (or lifted) unauthenticated. A verification's revert
//! is not held by a freeze: it undoes what failed. The freeze lives in this process: a
//! restart lifts it, and says so in its log.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::http::Shared;
use crate::clock::Clock;
use crate::windows::{Freeze, FreezeSwitch};

/// The freeze and what it takes to change it.
#[derive(Debug, Default)]
pub struct Freezer {
    pub switch: FreezeSwitch,
    /// `holds.freezeToken`; `None`: freezing over HTTP is off.
    pub token: Option<super::webhook::Secret>,
    /// The service's clock, which dates a freeze; `None`: the system's.
    pub clock: Option<Arc<dyn Clock>>,
}

/// The body of `POST /freeze`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FreezeRequest {
    by: String,
    reason: String,
}

/// `GET /freeze`: `{"frozen": false}` or `{"frozen": true, "by", "reason", "since"}`.
pub(super) async fn show(State(shared): State<Arc<Shared>>) -> Response {
    let body = match shared.freeze.switch.current() {
        None => serde_json::json!({"frozen": false}),
        Some(f) => serde_json::json!({
            "frozen": true, "by": f.by, "reason": f.reason, "since": f.since.to_string(),
        }),
    };
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// `POST /freeze`: 200 once frozen; 403 without `holds.freezeToken`, 401 without it sent, 400
/// for a body without `by` and `reason`.
pub(super) async fn freeze(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if let Some(refused) = refused(&shared.freeze, &headers) {
        return refused;
    }
    let request = body
        .ok()
        .and_then(|b| serde_json::from_slice::<FreezeRequest>(&b).ok())
        .filter(|r| !r.by.trim().is_empty() && !r.reason.trim().is_empty());
    let Some(request) = request else {
        return (
            StatusCode::BAD_REQUEST,
            "say who freezes and why as JSON: {\"by\": …, \"reason\": …}",
        )
            .into_response();
    };
    let since = match &shared.freeze.clock {
        Some(clock) => clock.wall(),
        None => crate::clock::SystemClock.wall(),
    };
    let freeze = Freeze {
        by: request.by.trim().to_string(),
        reason: request.reason.trim().to_string(),
        since,
    };
    tracing::warn!(by = %freeze.by, reason = %freeze.reason, "writes frozen (POST /freeze)");
    let text = format!(
        "frozen by {} since {}: {}; every write waits until unfrozen",
        freeze.by, freeze.since, freeze.reason
    );
    shared.metrics.set_frozen(true);
    shared.freeze.switch.freeze(freeze);
    (StatusCode::OK, text).into_response()
}

/// `POST /unfreeze`: 200 whether or not writes were frozen, saying which.
pub(super) async fn unfreeze(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    if let Some(refused) = refused(&shared.freeze, &headers) {
        return refused;
    }
    shared.metrics.set_frozen(false);
    match shared.freeze.switch.unfreeze() {
        Some(f) => {
            tracing::warn!(by = %f.by, reason = %f.reason, "writes unfrozen (POST /unfreeze)");
            let text = format!(
                "unfrozen (frozen by {} since {}: {})",
                f.by, f.since, f.reason
            );
            (StatusCode::OK, text).into_response()
        }
        None => (StatusCode::OK, "not frozen").into_response(),
    }
}

/// The answer to a request without the freeze token, if it has not got it.
fn refused(freezer: &Freezer, headers: &HeaderMap) -> Option<Response> {
    let Some(token) = &freezer.token else {
        return Some(
            (
                StatusCode::FORBIDDEN,
                "freezing over HTTP is off: configure holds.freezeToken in tagpilot.yaml",
            )
                .into_response(),
        );
    };
    let sent = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if sent.is_some_and(|sent| token.matches(sent.trim().as_bytes())) {
        return None;
    }
    tracing::warn!("a freeze or unfreeze was refused: no or the wrong bearer token");
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            "freezing needs the token of holds.freezeToken as Authorization: Bearer <token>",
        )
            .into_response(),
    )
}
