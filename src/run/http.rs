//! The HTTP side of `tagpilot run`: `/livez`, `/readyz`, `/metrics` and
//! `POST /webhooks/distribution`.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::sync::Notify;

use super::health::Health;

use super::metrics::Metrics;
use super::webhook::{self, Secret, Verdict};

/// What the handlers read; the loop writes it.
#[derive(Debug, Default)]
pub struct Shared {
    pub health: Health,
    pub metrics: Metrics,
    /// The secret webhooks must carry; without one every notification is refused.
    pub webhook_secret: Option<Secret>,
    /// The `--state-dir` database, where deliveries already handled are remembered.
    pub state: Option<Arc<crate::state::State>>,
    /// Asks the loop for a cycle now. `notify_one` keeps at most one wake-up, so a burst of
    /// notifications during a cycle gives one more cycle, not one each.
    pub trigger: Notify,
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route(
            "/webhooks/distribution",
            post(distribution).layer(DefaultBodyLimit::max(webhook::BODY_LIMIT)),
        )
        .with_state(shared)
}

async fn distribution(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> (StatusCode, String) {
    let (verdict, status, text) = webhook::distribution(
        shared.webhook_secret.as_ref(),
        shared.state.as_deref(),
        &headers,
        body,
    );
    shared.metrics.webhook("distribution", verdict);
    if verdict == Verdict::Accepted {
        shared.trigger.notify_one();
    }
    (status, text)
}

async fn livez(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    status(shared.health.is_live(), "live", "not live")
}

async fn readyz(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    status(
        shared.health.is_ready(),
        "ready",
        "not ready: no cycle has completed yet, or shutting down",
    )
}

fn status(ok: bool, yes: &'static str, no: &'static str) -> (StatusCode, &'static str) {
    if ok {
        (StatusCode::OK, yes)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, no)
    }
}

async fn metrics(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        shared.metrics.render(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves the router on a free port of 127.0.0.1 and returns its address.
    async fn serve(shared: Arc<Shared>) -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, router(shared)).await });
        format!("http://{addr}")
    }

    async fn get(base: &str, path: &str) -> (StatusCode, String) {
        let response = reqwest::get(format!("{base}{path}")).await.unwrap();
        let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
        (status, response.text().await.unwrap())
    }

    #[tokio::test]
    async fn endpoints_follow_the_loop() {
        let shared = Arc::new(Shared::default());
        let base = serve(shared.clone()).await;
        assert_eq!(
            get(&base, "/livez").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        shared.health.set_live(true);
        assert_eq!(get(&base, "/livez").await.0, StatusCode::OK);
        assert_eq!(
            get(&base, "/readyz").await.0,
            StatusCode::SERVICE_UNAVAILABLE
        );
        shared.health.cycle_completed();
        assert_eq!(get(&base, "/readyz").await.0, StatusCode::OK);
        let (status, text) = get(&base, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("# TYPE tagpilot_cycles counter"), "{text}");
        assert_eq!(get(&base, "/nothing").await.0, StatusCode::NOT_FOUND);
    }
}
