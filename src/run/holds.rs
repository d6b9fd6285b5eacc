//! `GET /holds`: the held tags, read-only, for `tagpilot holds --url` while this process holds
//! the state directory's lock (one process per store, so the command line cannot open it).
//! Releasing goes through the store's owner: an Application's release annotation, applied by
//! the next cycle, or `tagpilot holds release` once the service is stopped.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::http::Shared;
use crate::report::holds::{holds_json, views};

/// 200 with the holds as `tagpilot holds --format json` prints them; 404 without a state
/// directory (no holds are kept), 503 when the store cannot read them.
pub(super) async fn list(State(shared): State<Arc<Shared>>) -> Response {
    let Some(state) = shared.state.as_ref() else {
        return (
            StatusCode::NOT_FOUND,
            "no --state-dir: this process keeps no holds",
        )
            .into_response();
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
