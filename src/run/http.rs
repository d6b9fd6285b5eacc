//! The HTTP side of `tagpilot run`: `/livez`, `/readyz`, `/metrics`, the registries'
//! notifications on `POST /webhooks/<kind>` and Argo CD Image Updater's `POST /webhook?type=`.
//! A notification is answered at once; the re-check it asks for runs in the loop.

use std::sync::Arc;

use super::health::Health;
use super::metrics::Metrics;
use super::recheck::Rechecks;
use super::webhook::{self, Answer, Kind, Secrets, Verdict, image_updater};
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};

/// What the handlers read; the loop writes it.
#[derive(Debug, Default)]
pub struct Shared {
    pub health: Health,
    /// Cycles and re-checks finished, told to whoever started the service.
    pub events: super::events::Events,
    pub metrics: Metrics,
    /// The secrets notifications must carry, by kind; a kind without one is refused.
    pub secrets: Secrets,
    /// The repositories notifications hinted at, waiting for the loop to re-check them.
    pub rechecks: Rechecks,
    /// The `--state-dir` database, where deliveries already handled are remembered.
    pub state: Option<Arc<crate::state::State>>,
    /// `holds.releaseToken`: the bearer token `POST /holds/release` takes; `None`: it refuses.
    pub release_token: Option<webhook::Secret>,
    /// The emergency freeze (`POST /freeze`), read by every target a cycle plans.
    pub freeze: super::freeze::Freezer,
    /// Where cycles and verification hand the events people are told (`notifications:`).
    pub notices: super::notify::Outbox,
    /// What the status page (`/ui`) shows of the last cycles.
    pub status: super::status::StatusBoard,
}

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/livez", get(livez))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .route("/holds", get(super::holds::list))
        .route("/ui", get(super::status::html))
        .route("/ui/status.json", get(super::status::json))
        .route(
            "/holds/release",
            post(super::holds::release).layer(DefaultBodyLimit::max(webhook::BODY_LIMIT)),
        )
        .route(
            "/freeze",
            get(super::freeze::show).post(super::freeze::freeze),
        )
        .route("/unfreeze", post(super::freeze::unfreeze))
        .route(
            "/webhooks/{kind}",
            post(registry_webhook).layer(DefaultBodyLimit::max(webhook::BODY_LIMIT)),
        )
        .route(
            "/webhook",
            post(image_updater_webhook).layer(DefaultBodyLimit::max(webhook::BODY_LIMIT)),
        )
        .layer(axum::middleware::from_fn_with_state(
            shared.clone(),
            followers_refuse_webhooks,
        ))
        .with_state(shared)
}

/// A follower does not act on notifications: it answers 503 so that the sender retries, and
/// the retry reaches the leader (the webhook Service selects the leader's label). Counted
/// as `result="not_leader"`.
async fn followers_refuse_webhooks(
    State(shared): State<Arc<Shared>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // `/webhooks/<kind>` and Image Updater's `/webhook`; a release too, since the leader's
    // store is the one its cycles read.
    let path = request.uri().path();
    let writes = ["/holds/release", "/freeze", "/unfreeze"];
    let changes_state = writes.contains(&path) && request.method() == axum::http::Method::POST;
    if shared.health.is_following() && (path.starts_with("/webhook") || changes_state) {
        shared.metrics.webhook_not_leader();
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "not the leader: another replica handles notifications",
        )
            .into_response();
    }
    next.run(request).await
}

/// `POST /webhooks/<kind>`.
async fn registry_webhook(
    State(shared): State<Arc<Shared>>,
    Path(kind): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> (StatusCode, String) {
    let Some(kind) = Kind::from_name(&kind) else {
        shared.metrics.webhook("unknown", Verdict::UnknownKind);
        shared.events.notification_answered();
        let kinds: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
        return (
            StatusCode::NOT_FOUND,
            format!("no webhook kind {kind:?}: one of {}", kinds.join(", ")),
        );
    };
    let query = decode(query.as_deref());
    let answer = webhook::handle(kind, &shared.secrets, &headers, &query, body);
    respond(&shared, kind.name(), answer)
}

/// `POST /webhook?type=<type>`, Argo CD Image Updater's endpoint.
async fn image_updater_webhook(
    State(shared): State<Arc<Shared>>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> (StatusCode, String) {
    let query = decode(query.as_deref());
    let (kind, answer) = image_updater::handle(&shared.secrets, &headers, &query, body);
    respond(&shared, kind.map_or("unknown", |k| k.name()), answer)
}

/// Counts the answer, hands its hints to the loop, publishes it, and sends it.
fn respond(shared: &Shared, kind: &'static str, mut answer: Answer) -> (StatusCode, String) {
    // A delivery the sender retries (it got no answer in time) is acted on once. Every id is
    // recorded, so a partly new delivery marks them all.
    if answer.verdict == Verdict::Accepted
        && !answer.deliveries.is_empty()
        && let Some(state) = &shared.state
    {
        let seen: Vec<bool> = answer
            .deliveries
            .iter()
            .map(|id| state.seen_delivery(kind, id))
            .collect();
        if seen.iter().all(|s| *s) {
            answer.verdict = Verdict::Ignored;
            answer.text = "already handled: every event id was seen before".to_string();
            answer.hints.clear();
        }
    }
    shared.metrics.webhook(kind, answer.verdict);
    match answer.verdict {
        Verdict::Accepted => {
            let repositories: Vec<String> = answer.hints.iter().map(ToString::to_string).collect();
            tracing::info!(kind, ?repositories, "push notification: re-checking");
            shared.rechecks.hint(answer.hints);
        }
        // The reason, never the request: its URL may carry the secret.
        verdict => {
            tracing::debug!(kind, result = verdict.label(), error = answer.error, reason = %answer.text, "notification not acted on")
        }
    }
    // After the hint: an observer that sees this can move the clock past its debounce.
    shared.events.notification_answered();
    (answer.status, answer.text)
}

/// The URL's query parameters, decoded.
fn decode(query: Option<&str>) -> Vec<(String, String)> {
    url::form_urlencoded::parse(query.unwrap_or_default().as_bytes())
        .into_owned()
        .collect()
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

    async fn post(url: String, headers: &[(&str, &str)], body: Vec<u8>) -> (u16, String) {
        // A connection of its own: after a 413 the server drops it.
        let mut request = reqwest::Client::new()
            .post(url)
            .header("connection", "close")
            .body(body);
        for (k, v) in headers {
            request = request.header(*k, *v);
        }
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[tokio::test]
    async fn notifications_are_answered_counted_and_handed_to_the_loop() {
        let shared = Arc::new(Shared {
            secrets: Secrets::shared(webhook::Secret::new("s3cret").unwrap()),
            ..Shared::default()
        });
        let base = serve(shared.clone()).await;
        let push = br#"{"events":[{"action":"push","target":{"repository":"shop/api","tag":"1.2.0"},"request":{"host":"r.example:5000"}}]}"#.to_vec();
        let bearer = [("authorization", "Bearer s3cret")];

        let (status, text) = post(
            format!("{base}/webhooks/distribution"),
            &bearer,
            push.clone(),
        )
        .await;
        assert_eq!(status, 202, "{text}");
        assert_eq!(shared.rechecks.waiting(), 1);

        let (status, text) = post(format!("{base}/webhooks/gitlab"), &bearer, push.clone()).await;
        assert_eq!(status, 404);
        assert!(
            text.contains("distribution, dockerhub, ghcr, harbor, quay, gar, cloudevents"),
            "{text}"
        );

        let huge = vec![b' '; webhook::BODY_LIMIT + 1];
        let (status, _) = post(
            format!("{base}/webhooks/distribution"),
            &bearer,
            huge.clone(),
        )
        .await;
        assert_eq!(status, 413);
        let (status, _) = post(
            format!("{base}/webhook?type=harbor"),
            &[("authorization", "s3cret")],
            huge,
        )
        .await;
        assert_eq!(status, 413);

        let (status, _) = post(
            format!("{base}/webhooks/distribution"),
            &[("authorization", "Bearer nope")],
            push.clone(),
        )
        .await;
        assert_eq!(status, 401);
        let (status, text) = post(
            format!("{base}/webhooks/distribution"),
            &bearer,
            b"[]".to_vec(),
        )
        .await;
        assert_eq!(status, 400, "{text}");

        let dockerhub =
            br#"{"push_data":{"tag":"1"},"repository":{"repo_name":"shop/web"}}"#.to_vec();
        let (status, text) = post(
            format!("{base}/webhook?type=docker.io&secret=s3cret"),
            &[],
            dockerhub,
        )
        .await;
        assert_eq!(status, 202, "{text}");
        assert_eq!(shared.rechecks.waiting(), 2);

        let (_, metrics) = get(&base, "/metrics").await;
        for line in [
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"accepted\"} 1",
            "tagpilot_webhook_requests_total{kind=\"unknown\",result=\"unknown_kind\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"too_large\"} 1",
            "tagpilot_webhook_requests_total{kind=\"harbor\",result=\"too_large\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"unauthorized\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"malformed\"} 1",
            "tagpilot_webhook_requests_total{kind=\"docker.io\",result=\"accepted\"} 1",
        ] {
            assert!(metrics.contains(line), "{line} missing from\n{metrics}");
        }
        assert!(!metrics.contains("s3cret"), "{metrics}");
    }
}
