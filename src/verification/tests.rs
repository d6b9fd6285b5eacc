//! Application statuses shaped as Argo CD writes them (`types.go`: `status.sync`,
//! `status.health`, `status.operationState`, `status.reconciledAt`, `status.conditions`), and
//! the verdict for each step of a deployment.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Value, json};

use super::{Failure, Observed, ObservedError, Verdict, Waiting, judge};

/// The commit that carries the change, and one before it.
const CHANGE: &str = "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291";
const BEFORE: &str = "1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d";

fn contains_change(revision: &str) -> bool {
    revision == CHANGE
}

fn at(text: &str) -> Timestamp {
    text.parse().unwrap()
}

/// An Application synced to `revision` by an operation that ended `phase` at 10:00:30, last
/// reconciled at `reconciled`, with health `health`.
fn application(revision: &str, phase: &str, reconciled: &str, health: &str) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "shop-api", "namespace": "argocd"},
        "status": {
            "sync": {"status": "Synced", "revision": revision},
            "health": {"status": health},
            "operationState": {
                "phase": phase,
                "message": "successfully synced (all tasks run)",
                "startedAt": "2026-11-25T10:00:10Z",
                "finishedAt": "2026-11-25T10:00:30Z",
                "syncResult": {"revision": revision},
                "operation": {"sync": {"revision": revision}}
            },
            "reconciledAt": reconciled
        }
    })
}

fn verdict(application: &Value, now: &str) -> Verdict {
    let observed = Observed::from_application(application).unwrap();
    judge(
        &observed,
        &contains_change,
        at("2026-11-25T10:00:00Z"),
        at(now),
        Duration::from_secs(600),
    )
}

#[test]
fn synced_then_progressing_then_healthy_is_verified_only_at_the_end() {
    let mut before = application(BEFORE, "Succeeded", "2026-11-25T09:59:00Z", "Healthy");
    before["status"]["operationState"]["finishedAt"] = json!("2026-11-25T09:58:00Z");
    assert_eq!(
        verdict(&before, "2026-11-25T10:00:05Z"),
        Verdict::Waiting(Waiting::NotDeployed),
        "healthy on the old revision says nothing about the change"
    );
    let mut syncing = before.clone();
    syncing["operation"] = json!({"sync": {"revision": CHANGE}});
    syncing["status"]["operationState"]["phase"] = json!("Running");
    syncing["status"]["operationState"]["finishedAt"] = Value::Null;
    assert_eq!(
        verdict(&syncing, "2026-11-25T10:00:15Z"),
        Verdict::Waiting(Waiting::OperationRunning)
    );
    let progressing = application(CHANGE, "Succeeded", "2026-11-25T10:00:40Z", "Progressing");
    assert_eq!(
        verdict(&progressing, "2026-11-25T10:00:45Z"),
        Verdict::Waiting(Waiting::Health {
            status: "Progressing".into()
        })
    );
    let healthy = application(CHANGE, "Succeeded", "2026-11-25T10:01:40Z", "Healthy");
    assert_eq!(verdict(&healthy, "2026-11-25T10:01:45Z"), Verdict::Verified);
}

#[test]
fn degraded_after_the_sync_fails_and_quotes_the_health_message() {
    let mut degraded = application(CHANGE, "Succeeded", "2026-11-25T10:01:00Z", "Degraded");
    degraded["status"]["health"]["message"] =
        json!("Deployment \"api\" exceeded its progress deadline");
    let verdict = verdict(&degraded, "2026-11-25T10:01:05Z");
    assert_eq!(
        verdict,
        Verdict::Failed(Failure::Health {
            status: "Degraded".into(),
            message: "Deployment \"api\" exceeded its progress deadline".into()
        })
    );
    let Verdict::Failed(failure) = verdict else {
        unreachable!()
    };
    assert_eq!(
        failure.to_string(),
        "health Degraded after the sync: Deployment \"api\" exceeded its progress deadline"
    );
}

#[test]
fn missing_after_the_sync_fails() {
    let missing = application(CHANGE, "Succeeded", "2026-11-25T10:01:00Z", "Missing");
    assert!(matches!(
        verdict(&missing, "2026-11-25T10:01:05Z"),
        Verdict::Failed(Failure::Health { status, .. }) if status == "Missing"
    ));
}

#[test]
fn degraded_before_the_change_is_deployed_is_not_the_change_failing() {
    // The Application was already broken on the old revision: nothing to blame the change for.
    let broken_before = application(BEFORE, "Succeeded", "2026-11-25T10:00:40Z", "Degraded");
    assert_eq!(
        verdict(&broken_before, "2026-11-25T10:00:45Z"),
        Verdict::Waiting(Waiting::NotDeployed)
    );
}

#[test]
fn a_status_reconciled_before_the_sync_finished_is_stale_whatever_it_says() {
    // Kargo's first check: the health shown predates the operation, so it is not trusted.
    let stale = application(CHANGE, "Succeeded", "2026-11-25T10:00:20Z", "Healthy");
    assert_eq!(
        verdict(&stale, "2026-11-25T10:00:35Z"),
        Verdict::Waiting(Waiting::StaleStatus)
    );
    let stale_degraded = application(CHANGE, "Succeeded", "2026-11-25T10:00:20Z", "Degraded");
    assert_eq!(
        verdict(&stale_degraded, "2026-11-25T10:00:35Z"),
        Verdict::Waiting(Waiting::StaleStatus)
    );
    // Reconciled at the very moment the sync finished is fresh.
    let fresh = application(CHANGE, "Succeeded", "2026-11-25T10:00:30Z", "Healthy");
    assert_eq!(verdict(&fresh, "2026-11-25T10:00:35Z"), Verdict::Verified);
}

#[test]
fn a_paused_canary_is_in_progress_and_an_aborted_one_fails() {
    // Argo CD's Rollout health: pauseConditions make it Suspended; an abort makes it Degraded.
    let mut paused = application(CHANGE, "Succeeded", "2026-11-25T10:02:00Z", "Suspended");
    paused["status"]["health"]["message"] = json!("Rollout is paused");
    assert_eq!(
        verdict(&paused, "2026-11-25T10:02:05Z"),
        Verdict::Waiting(Waiting::Health {
            status: "Suspended".into()
        })
    );
    let mut aborted = application(CHANGE, "Succeeded", "2026-11-25T10:04:00Z", "Degraded");
    aborted["status"]["health"]["message"] =
        json!("Rollout aborted update to revision 2: Metric \"error-rate\" assessed Failed");
    assert!(matches!(
        verdict(&aborted, "2026-11-25T10:04:05Z"),
        Verdict::Failed(Failure::Health { message, .. }) if message.contains("aborted")
    ));
}

#[test]
fn waiting_past_the_timeout_fails_and_says_what_it_waited_for() {
    let paused = application(CHANGE, "Succeeded", "2026-11-25T10:09:00Z", "Suspended");
    assert_eq!(
        verdict(&paused, "2026-11-25T10:09:59Z"),
        Verdict::Waiting(Waiting::Health {
            status: "Suspended".into()
        }),
        "one second before the timeout it still waits"
    );
    let verdict = verdict(&paused, "2026-11-25T10:10:00Z");
    let Verdict::Failed(failure) = verdict else {
        panic!("{verdict:?}")
    };
    assert_eq!(
        failure.to_string(),
        "not healthy within 10m; still waiting for health Healthy (it is Suspended)"
    );
    // A verdict reached in time is kept, however late it is read.
    let healthy = application(CHANGE, "Succeeded", "2026-11-25T10:01:00Z", "Healthy");
    assert_eq!(verdict_late(&healthy), Verdict::Verified);
}

fn verdict_late(application: &Value) -> Verdict {
    verdict(application, "2026-11-25T11:00:00Z")
}

#[test]
fn a_failed_sync_of_the_change_fails_it_and_a_failed_sync_of_another_revision_does_not() {
    let mut failed = application(BEFORE, "Failed", "2026-11-25T10:00:40Z", "Healthy");
    failed["status"]["operationState"]["syncResult"] = json!({"revision": CHANGE});
    failed["status"]["operationState"]["message"] =
        json!("one or more objects failed to apply: admission webhook denied the request");
    assert_eq!(
        verdict(&failed, "2026-11-25T10:00:45Z"),
        Verdict::Failed(Failure::Operation {
            phase: "Failed".into(),
            message: "one or more objects failed to apply: admission webhook denied the request"
                .into()
        })
    );
    let other = application(BEFORE, "Error", "2026-11-25T10:00:40Z", "Healthy");
    assert_eq!(
        verdict(&other, "2026-11-25T10:00:45Z"),
        Verdict::Waiting(Waiting::NotDeployed)
    );
}

#[test]
fn a_comparison_error_fails_before_anything_else() {
    let mut app = application(BEFORE, "Succeeded", "2026-11-25T10:00:40Z", "Healthy");
    app["status"]["conditions"] = json!([{
        "type": "ComparisonError",
        "message": "Failed to load target state: kustomize build failed",
        "lastTransitionTime": "2026-11-25T10:00:40Z"
    }]);
    assert_eq!(
        verdict(&app, "2026-11-25T10:00:45Z"),
        Verdict::Failed(Failure::Condition {
            kind: "ComparisonError".into(),
            message: "Failed to load target state: kustomize build failed".into()
        })
    );
    // A warning condition is not a failure.
    app["status"]["conditions"] = json!([{"type": "SyncError", "message": "retrying"}]);
    assert_eq!(
        verdict(&app, "2026-11-25T10:00:45Z"),
        Verdict::Waiting(Waiting::NotDeployed)
    );
}

#[test]
fn a_multi_source_application_is_verified_when_any_of_its_revisions_has_the_change() {
    let mut app = application(CHANGE, "Succeeded", "2026-11-25T10:01:00Z", "Healthy");
    app["status"]["sync"] = json!({"status": "Synced", "revisions": ["7.3.1", CHANGE]});
    app["status"]["operationState"]["syncResult"] = json!({"revisions": ["7.3.1", CHANGE]});
    assert_eq!(verdict(&app, "2026-11-25T10:01:05Z"), Verdict::Verified);
}

#[test]
fn a_sync_not_yet_started_keeps_waiting_even_when_the_revision_moved() {
    // The controller has seen the new revision (sync.revision) but the auto-sync has not run:
    // the last operation is still the old one, so its success says nothing about the change.
    let mut app = application(BEFORE, "Succeeded", "2026-11-25T10:00:40Z", "Healthy");
    app["status"]["sync"] = json!({"status": "OutOfSync", "revision": CHANGE});
    assert_eq!(
        verdict(&app, "2026-11-25T10:00:45Z"),
        Verdict::Waiting(Waiting::NotDeployed)
    );
}

#[test]
fn an_application_that_is_not_one_or_has_a_bad_time_is_an_error_naming_the_field() {
    let err = Observed::from_application(&json!({"status": {"sync": "Synced"}})).unwrap_err();
    assert!(matches!(err, ObservedError::Shape(_)), "{err}");
    let mut app = application(CHANGE, "Succeeded", "yesterday", "Healthy");
    app["status"]["reconciledAt"] = json!("yesterday");
    let err = Observed::from_application(&app).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Application's reconciledAt `yesterday` is not an RFC 3339 time"
    );
}
