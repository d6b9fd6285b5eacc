//! The planner honours held tags: a held tag is never proposed again for that policy and field.

use std::path::Path;

use crate::files::Directory;
use crate::holds::{FieldKey, HeldTag, HoldReason, Holds};
use crate::image::Repository;
use crate::policy::ImagePolicy;
use crate::registry::MemoryRegistry;

use super::{Plan, plan_files_held};

const API: &str = "127.0.0.1:5000/shop/api";

fn policies() -> Vec<ImagePolicy> {
    let yaml = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {API}\n  strategy: {{semver: {{}}}}\n  targets: [{{repository: manifests, paths: [\"**\"]}}]\n"
    );
    crate::policy::parse_file(Path::new("policies.yaml"), &yaml).expect("valid policy")
}

/// Two containers on one image: a hold on one field leaves the other alone.
fn manifest() -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {API}:1.2.0\n        - name: worker\n          image: {API}:1.2.0\n"
    )
}

fn held(tag: &str, reason: HoldReason) -> HeldTag {
    HeldTag {
        key: FieldKey {
            repository: Some("manifests".into()),
            policy: "api".into(),
            file: "deploy.yaml".into(),
            field: "Deployment/api container api".into(),
        },
        tag: tag.into(),
        reason,
        since: "2026-11-25T10:00:00Z".parse().unwrap(),
    }
}

fn rolled_back() -> HoldReason {
    HoldReason::RolledBack {
        to: "1.2.0".into(),
        commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
        author: "Dana Ops <dana@example.com>".into(),
    }
}

async fn plan_with(tags: &[&str], holds: &Holds) -> Plan {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("deploy.yaml"), manifest()).unwrap();
    let files = Directory::open(dir.path()).unwrap();
    let registry = MemoryRegistry::new();
    registry.add_tags(&Repository::parse(API).unwrap(), tags);
    let (plan, _) = plan_files_held(&files, "manifests", &policies(), &registry, &(), holds)
        .await
        .unwrap();
    plan
}

fn moves(plan: &Plan) -> Vec<(&str, &str)> {
    plan.changes
        .iter()
        .map(|c| (c.field.as_str(), c.to.as_str()))
        .collect()
}

#[tokio::test]
async fn a_failed_tag_is_skipped_for_the_next_best_on_its_field_only() {
    let failed = HoldReason::Failed {
        application: "argocd/api".into(),
        failure: "health Degraded".into(),
    };
    let holds = Holds::known([held("1.3.0", failed)]);
    let plan = plan_with(&["1.2.0", "1.2.9", "1.3.0"], &holds).await;
    assert_eq!(
        moves(&plan),
        [
            ("Deployment/api container api", "1.2.9"),
            ("Deployment/api container worker", "1.3.0"),
        ]
    );
}

#[tokio::test]
async fn a_rollback_holds_the_field_at_the_persons_value_and_says_who() {
    let holds = Holds::known([held("1.3.0", rolled_back())]);
    let plan = plan_with(&["1.2.0", "1.2.9", "1.3.0"], &holds).await;
    assert_eq!(moves(&plan), [("Deployment/api container worker", "1.3.0")]);
    assert_eq!(plan.holds.len(), 1, "{:?}", plan.holds);
    assert_eq!(
        plan.holds[0].reason.to_string(),
        "held: rolled back to 1.2.0 by Dana Ops <dana@example.com> in 4b825dc642cb since \
         2026-11-25T10:00:00Z; 1.3.0 is not proposed again"
    );
    assert!(
        matches!(&plan.holds[0].reason,
            crate::plan::HoldReason::HeldTag { held, chosen }
                if held.tag == "1.3.0" && chosen == "1.3.0"),
        "{:?}",
        plan.holds[0].reason
    );
    assert!(plan.ended_holds.is_empty());
}

#[tokio::test]
async fn a_rollback_hold_ends_when_a_newer_tag_appears() {
    let hold = held("1.3.0", rolled_back());
    let holds = Holds::known([hold.clone()]);
    let plan = plan_with(&["1.2.0", "1.3.0", "1.4.0"], &holds).await;
    assert_eq!(
        moves(&plan),
        [
            ("Deployment/api container api", "1.4.0"),
            ("Deployment/api container worker", "1.4.0"),
        ]
    );
    assert_eq!(plan.ended_holds, [hold]);
}

#[tokio::test]
async fn unknown_holds_hold_every_change_and_name_the_store() {
    let holds = Holds::unknown("the held tags in /state/tagpilot.redb cannot be read");
    let plan = plan_with(&["1.2.0", "1.3.0"], &holds).await;
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    assert_eq!(plan.holds.len(), 2);
    assert_eq!(plan.problems.len(), 1, "{:?}", plan.problems);
    assert!(
        plan.problems[0]
            .reason
            .to_string()
            .contains("/state/tagpilot.redb"),
        "{}",
        plan.problems[0].reason
    );
}

#[tokio::test]
async fn a_field_that_still_runs_its_failed_tag_is_held_and_named() {
    // `onFailure: hold` leaves the failed 1.2.0 in place, and nothing newer replaces it.
    let failed = HoldReason::Failed {
        application: "argocd/api".into(),
        failure: "health Degraded".into(),
    };
    let holds = Holds::known([held("1.2.0", failed)]);
    let plan = plan_with(&["1.1.0", "1.2.0"], &holds).await;
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    let reasons: Vec<String> = plan.holds.iter().map(|h| h.reason.to_string()).collect();
    let held: Vec<(&str, usize, &str)> = plan
        .holds
        .iter()
        .zip(&reasons)
        .map(|(h, reason)| (h.file.as_str(), h.line, reason.as_str()))
        .collect();
    assert_eq!(
        held,
        [(
            "deploy.yaml",
            10,
            "still runs 1.2.0: failed in Application argocd/api: health Degraded (held since \
             2026-11-25T10:00:00Z); no newer tag to replace it"
        )]
    );
    assert_eq!(plan.up_to_date, 1, "the worker container");
}
