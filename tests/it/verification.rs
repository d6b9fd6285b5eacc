//! Following an Application after a change (issue 19): the Kubernetes API double scripts the
//! Application's status over time, as Argo CD sets it (`status.sync.revision`,
//! `status.operationState`, `status.reconciledAt`, `status.health`), and tagpilot follows it
//! through one watch: a listing, then the changes.

use std::time::Duration;

use futures_util::{StreamExt as _, stream};
use serde_json::{Value, json};
use tagpilot::run::verify::follow::{
    FollowError, Followed, FollowedChange, follow, follow_application,
};
use tagpilot::verification::{Failure, Verdict, Waiting};
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::kube::cluster;

const APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications";
const CHANGE: &str = "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291";
const BEFORE: &str = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d";

fn contains_change(revision: &str) -> bool {
    revision == CHANGE
}

fn change(timeout: Duration) -> FollowedChange<'static> {
    FollowedChange {
        application: "argocd/shop-api",
        contains_change: &contains_change,
        since: jiff::Timestamp::now(),
        timeout,
        fetched: None,
    }
}

/// The Application `argocd/shop-api` at resource version `version`: synced to `revision` by an
/// operation that ended `phase` at `finished`, reconciled at `reconciled`, with `health`.
fn application(
    version: u32,
    revision: &str,
    finished: &str,
    reconciled: &str,
    health: Value,
) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "shop-api", "namespace": "argocd", "resourceVersion": version.to_string()},
        "spec": {"source": {"repoURL": "https://git.example/shop.git", "path": "apps/api"}},
        "status": {
            "sync": {"status": "Synced", "revision": revision},
            "health": health,
            "operationState": {
                "phase": "Succeeded",
                "startedAt": "2026-11-25T10:00:10Z",
                "finishedAt": finished,
                "syncResult": {"revision": revision}
            },
            "reconciledAt": reconciled
        }
    })
}

/// The listing a watch starts from, and the watch events after it (one JSON object a line, as
/// the API server streams them).
async fn script(server: &MockServer, listed: Value, events: &[(&str, Value)]) {
    let version = listed["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    Mock::given(method("GET"))
        .and(path(APP))
        .and(wiremock::matchers::query_param_is_missing("watch"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "ApplicationList",
            "metadata": {"resourceVersion": version},
            "items": [listed],
        })))
        .mount(server)
        .await;
    let body: String = events
        .iter()
        .map(|(kind, object)| format!("{}\n", json!({"type": kind, "object": object})))
        .collect();
    Mock::given(method("GET"))
        .and(path(APP))
        .and(query_param("watch", "true"))
        .and(query_param("resourceVersion", version.as_str()))
        .respond_with(ResponseTemplate::new(200).set_body_string(body))
        .mount(server)
        .await;
}

/// Follows `argocd/shop-api` on `server` through the real client, with a minute's timeout.
async fn follow_shop_api(server: &MockServer) -> Followed {
    let cluster = cluster(server, Duration::from_secs(5)).await;
    follow_application(
        &cluster,
        "argocd",
        "shop-api",
        &change(Duration::from_secs(60)),
    )
    .await
    .unwrap()
}

fn healthy() -> Value {
    json!({"status": "Healthy"})
}

#[tokio::test]
async fn synced_then_progressing_then_healthy_is_verified_through_one_watch() {
    let server = MockServer::start().await;
    script(
        &server,
        application(1, BEFORE, "2026-11-25T09:00:00Z", "2026-11-25T09:00:05Z", healthy()),
        &[
            (
                "MODIFIED",
                application(2, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:00:31Z", json!({"status": "Progressing", "message": "Waiting for rollout to finish: 1 of 2 updated replicas are available..."})),
            ),
            (
                "MODIFIED",
                application(3, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:01:10Z", healthy()),
            ),
        ],
    )
    .await;
    let followed = follow_shop_api(&server).await;
    assert_eq!(followed.verdict, Verdict::Verified);
    assert_eq!(followed.refreshes, 0);
    let requests = server.received_requests().await.unwrap();
    let gets: Vec<_> = requests
        .iter()
        .filter(|r| r.method.as_str() == "GET")
        .collect();
    assert!(
        gets.iter().all(|r| r
            .url
            .query()
            .unwrap_or_default()
            .contains("metadata.name%3Dshop-api")),
        "one Application is watched, by name: {gets:?}"
    );
    assert_eq!(
        gets.iter()
            .filter(|r| !r.url.query().unwrap_or_default().contains("watch=true"))
            .count(),
        1,
        "one listing, then the watch; no polling"
    );
}

#[tokio::test]
async fn synced_then_degraded_fails_with_the_health_message() {
    let server = MockServer::start().await;
    script(
        &server,
        application(1, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:00:31Z", json!({"status": "Progressing"})),
        &[(
            "MODIFIED",
            application(2, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:05:31Z", json!({"status": "Degraded", "message": "Deployment \"api\" exceeded its progress deadline"})),
        )],
    )
    .await;
    let followed = follow_shop_api(&server).await;
    assert_eq!(
        followed.verdict,
        Verdict::Failed(Failure::Health {
            status: "Degraded".into(),
            message: "Deployment \"api\" exceeded its progress deadline".into()
        })
    );
}

#[tokio::test]
async fn a_stale_status_asks_argo_cd_for_one_refresh_and_waits_for_a_fresh_one() {
    let server = MockServer::start().await;
    // Reconciled before the sync finished: "Healthy" here is the old revision's health.
    script(
        &server,
        application(
            1,
            CHANGE,
            "2026-11-25T10:00:30Z",
            "2026-11-25T10:00:20Z",
            healthy(),
        ),
        &[
            // The refresh annotation lands; the controller has not compared yet.
            (
                "MODIFIED",
                application(
                    2,
                    CHANGE,
                    "2026-11-25T10:00:30Z",
                    "2026-11-25T10:00:20Z",
                    healthy(),
                ),
            ),
            (
                "MODIFIED",
                application(
                    3,
                    CHANGE,
                    "2026-11-25T10:00:30Z",
                    "2026-11-25T10:00:40Z",
                    healthy(),
                ),
            ),
        ],
    )
    .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{APP}/shop-api")))
        .respond_with(ResponseTemplate::new(200).set_body_json(application(
            2,
            CHANGE,
            "2026-11-25T10:00:30Z",
            "2026-11-25T10:00:20Z",
            healthy(),
        )))
        .expect(1)
        .mount(&server)
        .await;
    let followed = follow_shop_api(&server).await;
    assert_eq!(followed.verdict, Verdict::Verified);
    assert_eq!(
        followed.refreshes, 1,
        "one refresh per sync, not one per event"
    );
    let patches: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "PATCH")
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(
        patches,
        vec![json!({"metadata": {"annotations": {"argocd.argoproj.io/refresh": "normal"}}})]
    );
    server.verify().await;
}

#[tokio::test]
async fn a_rollout_paused_at_a_step_then_aborted_fails() {
    let server = MockServer::start().await;
    script(
        &server,
        application(1, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:00:31Z", json!({"status": "Suspended", "message": "Rollout is paused"})),
        &[(
            "MODIFIED",
            application(2, CHANGE, "2026-11-25T10:00:30Z", "2026-11-25T10:03:00Z", json!({"status": "Degraded", "message": "Rollout aborted update to revision 7: Metric \"error-rate\" assessed Failed"})),
        )],
    )
    .await;
    let followed = follow_shop_api(&server).await;
    let Verdict::Failed(failure) = followed.verdict else {
        panic!("{:?}", followed.verdict)
    };
    assert_eq!(
        failure.to_string(),
        "health Degraded after the sync: Rollout aborted update to revision 7: Metric \"error-rate\" assessed Failed"
    );
}

/// The timeout runs on tokio's clock: paused, it passes without waiting. The states come from a
/// scripted stream (no socket, so paused time cannot jump past a response in flight).
#[tokio::test(start_paused = true)]
async fn a_canary_still_paused_at_the_timeout_fails_naming_what_it_waited_for() {
    let paused = application(
        1,
        CHANGE,
        "2026-11-25T10:00:30Z",
        "2026-11-25T10:00:31Z",
        json!({"status": "Suspended"}),
    );
    let states = stream::iter([Ok(Some(paused))]).chain(stream::pending());
    let started = tokio::time::Instant::now();
    let followed = follow(
        states,
        || async { Ok(()) },
        &change(Duration::from_secs(15 * 60)),
    )
    .await
    .unwrap();
    assert_eq!(
        followed.verdict,
        Verdict::Failed(Failure::TimedOut {
            after: Duration::from_secs(15 * 60),
            waiting: Waiting::Health {
                status: "Suspended".into()
            }
        })
    );
    assert_eq!(
        started.elapsed(),
        Duration::from_secs(15 * 60),
        "it waited exactly the timeout"
    );
}

#[tokio::test]
async fn an_application_deleted_while_followed_is_an_error_naming_it() {
    let gone = stream::iter([Ok(None)]);
    let err = follow(gone, || async { Ok(()) }, &change(Duration::from_secs(60)))
        .await
        .unwrap_err();
    assert!(matches!(err, FollowError::Gone(_)));
    assert_eq!(
        err.to_string(),
        "Application argocd/shop-api was deleted while its change was being verified"
    );
}
