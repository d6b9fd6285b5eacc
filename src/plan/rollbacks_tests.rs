//! A person's rollbacks found in commits given as text.

use std::path::Path;

use crate::holds::HoldReason;
use crate::policy::ImagePolicy;

use super::rollbacks::{Commit, Reading, field_moves, find};

const IMAGE: &str = "registry.example/api";

fn deployment(api: &str, web: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {IMAGE}:{api}\n        - name: web\n          image: registry.example/web:{web}\n"
    )
}

fn policies() -> Vec<ImagePolicy> {
    let yaml = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {IMAGE}\n  strategy: {{semver: {{}}}}\n"
    );
    crate::policy::parse_file(Path::new("policies.yaml"), &yaml).unwrap()
}

fn commit(id: &str, policies: &[&str], before: &str, after: &str) -> Commit {
    Commit {
        commit: id.into(),
        author: "Dana Ops <dana@example.com>".into(),
        policies: policies.iter().map(|p| p.to_string()).collect(),
        files: vec![(
            "deploy.yaml".into(),
            Some(before.to_string()),
            Some(after.to_string()),
        )],
    }
}

#[test]
fn field_moves_pair_fields_by_name_and_see_only_tags_that_changed() {
    let moves = field_moves(
        "deploy.yaml",
        Some(&deployment("1.3.0", "2.0.0")),
        Some(&deployment("1.2.0", "2.0.0")),
        &[],
    );
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0].field, "Deployment/api container api");
    assert_eq!(
        (moves[0].from.as_str(), moves[0].to.as_str()),
        ("1.3.0", "1.2.0")
    );
    assert!(field_moves("deploy.yaml", None, Some(&deployment("1", "2")), &[]).is_empty());
}

fn found(commits: &[Commit], last_own: &dyn Fn(&str, &str) -> Option<Commit>) -> Vec<String> {
    found_with(&policies(), commits, last_own)
}

fn found_with(
    policies: &[ImagePolicy],
    commits: &[Commit],
    last_own: &dyn Fn(&str, &str) -> Option<Commit>,
) -> Vec<String> {
    let policy = |name: &str| policies.iter().find(|p| p.name == name);
    let reading = Reading {
        repository: "manifests",
        policies,
        policy: &policy,
        last_own,
        now: "2026-11-25T10:00:00Z".parse().unwrap(),
    };
    find(&reading, commits)
        .into_iter()
        .map(|h| match h.reason {
            HoldReason::RolledBack { to, commit, .. } => {
                format!("{} {}->{to} in {commit}", h.key.field, h.tag)
            }
            other => format!("{other}"),
        })
        .collect()
}

#[test]
fn a_person_moving_back_what_tagpilot_set_is_a_rollback_tagpilot_itself_is_not() {
    let none = |_: &str, _: &str| None;
    let tagpilot = commit(
        "t1",
        &["api"],
        &deployment("1.2.0", "2"),
        &deployment("1.3.0", "2"),
    );
    let person = commit(
        "p1",
        &[],
        &deployment("1.3.0", "2"),
        &deployment("1.2.0", "2"),
    );
    assert_eq!(
        found(&[tagpilot.clone(), person.clone()], &none),
        ["Deployment/api container api 1.3.0->1.2.0 in p1"]
    );
    // tagpilot's own revert carries its trailer.
    let revert = commit(
        "t2",
        &["api"],
        &deployment("1.3.0", "2"),
        &deployment("1.2.0", "2"),
    );
    assert!(found(&[tagpilot.clone(), revert], &none).is_empty());
    // A person moving forward, or moving a field tagpilot never set, is no rollback.
    let forward = commit(
        "p2",
        &[],
        &deployment("1.3.0", "2"),
        &deployment("1.4.0", "2"),
    );
    assert!(found(&[tagpilot, forward], &none).is_empty());
    assert!(found(std::slice::from_ref(&person), &none).is_empty());
    // tagpilot's write before the commits read this cycle is looked up in the history.
    let earlier = move |at: &str, path: &str| {
        assert_eq!((at, path), ("p1", "deploy.yaml"));
        Some(commit(
            "t0",
            &["api"],
            &deployment("1.2.0", "2"),
            &deployment("1.3.0", "2"),
        ))
    };
    assert_eq!(
        found(&[person], &earlier),
        ["Deployment/api container api 1.3.0->1.2.0 in p1"]
    );
}

/// A Helm value only the policy's `helm:` paths make a field is read the same way.
#[test]
fn a_rollback_of_a_helm_value_named_by_the_policy_is_found() {
    let yaml = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {IMAGE}\n  strategy: {{semver: {{}}}}\n  targets:\n    - repository: manifests\n      paths: [\"values.yaml\"]\n      helm: {{repository: api.where, tag: api.version}}\n"
    );
    let policies = crate::policy::parse_file(Path::new("policies.yaml"), &yaml).unwrap();
    let values = |tag: &str| format!("api:\n  where: {IMAGE}\n  version: {tag}\n");
    let file = |id: &str, trailers: &[&str], from: &str, to: &str| Commit {
        files: vec![("values.yaml".into(), Some(values(from)), Some(values(to)))],
        ..commit(id, trailers, "", "")
    };
    let none = |_: &str, _: &str| None;
    let commits = [
        file("t1", &["api"], "1.2.0", "1.3.0"),
        file("p1", &[], "1.3.0", "1.2.0"),
    ];
    assert_eq!(
        found_with(&policies, &commits, &none),
        ["helm value api.where 1.3.0->1.2.0 in p1"]
    );
}
