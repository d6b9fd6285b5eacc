//! [`super`]'s tests: sources' plans of one file joined, and the fields they disagree on held.

use std::path::Path;

use super::*;
use crate::manifest::Update;
use crate::plan::Change;

const FILE: &str = "apps/web.yaml";
const TEXT: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: registry.example/api:1.0.0\n        - name: web\n          image: registry.example/web:2.0.0\n";

/// One source's plan of `FILE`: `policy` moves `image` to `tag`.
fn part(policy: &str, image: &str, tag: &str) -> Plan {
    let fields = manifest::scan(Path::new(FILE), TEXT, &[]).unwrap();
    let field = fields
        .iter()
        .find(|f| f.repository().is_some_and(|r| r.to_string() == image))
        .unwrap();
    let edits = field
        .edits(&Update {
            name: image,
            tag: Some(tag),
            digest: None,
        })
        .unwrap();
    Plan {
        changes: vec![Change {
            repository: Some("manifests".into()),
            policy: policy.into(),
            image: image.into(),
            file: FILE.into(),
            line: field.line,
            field: "Deployment/web container".into(),
            strategy: "semver",
            from: field.current().0.unwrap().into(),
            to: tag.into(),
            source: None,
            labels: Vec::new(),
            promotion: None,
        }],
        files: vec![FileUpdate {
            path: FILE.into(),
            original: TEXT.into(),
            updated: String::new(),
            edits: vec![(policy.into(), edits)],
        }],
        ..Plan::default()
    }
}

const LABELLED: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\n  labels:\n    app.kubernetes.io/version: 1.0.0\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: registry.example/api:1.0.0\n        - name: web\n          image: registry.example/web:1.0.0\n";

/// One source's plan of `LABELLED`: `policy` moves `image` to `tag`, and the version
/// label follows, as the planner makes it.
fn labelled_part(policy: &str, image: &str, tag: &str) -> Plan {
    let path = Path::new(FILE);
    let fields = manifest::scan(path, LABELLED, &[]).unwrap();
    let field = fields
        .iter()
        .find(|f| f.repository().is_some_and(|r| r.to_string() == image))
        .unwrap();
    let mut edits = field
        .edits(&Update {
            name: image,
            tag: Some(tag),
            digest: None,
        })
        .unwrap();
    let defaults = crate::config::version_labels::VersionLabels::defaults();
    let moves = [manifest::ImageMove {
        field,
        tag,
        labels: &defaults,
    }];
    let found = manifest::version_labels(path, LABELLED, &fields, &moves).unwrap();
    let mut labels = Vec::new();
    for moved in found.moved {
        edits.push(moved.edit);
        labels.push(crate::change::LabelChange {
            label: moved.label.to_string(),
            line: moved.label.line,
            from: moved.from,
            to: moved.to,
        });
    }
    let mut plan = part(policy, image, tag);
    plan.changes[0].line = field.line;
    plan.changes[0].labels = labels;
    plan.files[0].original = LABELLED.into();
    plan.files[0].edits = vec![(policy.into(), edits)];
    plan
}

#[test]
fn a_version_label_two_sources_move_apart_is_left_with_a_warning_and_the_images_move() {
    let plan = merge(
        Some("manifests"),
        vec![
            labelled_part("api", "registry.example/api", "1.1.0"),
            labelled_part("shop/web", "registry.example/web", "1.2.0"),
        ],
        &names,
    );
    assert!(plan.holds.is_empty(), "{:?}", plan.holds);
    assert_eq!(
        plan.files[0].updated,
        LABELLED
            .replace("api:1.0.0", "api:1.1.0")
            .replace("web:1.0.0", "web:1.2.0"),
        "both images move, the label stays"
    );
    assert_eq!(plan.changes.len(), 2);
    assert!(plan.changes.iter().all(|c| c.labels.is_empty()));
    assert_eq!(plan.findings.len(), 1);
    let finding = &plan.findings[0];
    assert_eq!(finding.searched, format!("{FILE}:6"));
    assert!(
        finding
            .message
            .contains("app.kubernetes.io/version left alone: sources disagree")
            && finding.message.contains("api (source of api) wants 1.1.0")
            && finding
                .message
                .contains("shop/web (source of shop/web) wants 1.2.0"),
        "{}",
        finding.message
    );

    // One source alone moves the label with its image.
    let alone = merge(
        Some("manifests"),
        vec![labelled_part("api", "registry.example/api", "1.1.0")],
        &names,
    );
    assert!(
        alone.files[0]
            .updated
            .contains("app.kubernetes.io/version: 1.1.0")
    );
    assert_eq!(alone.changes[0].labels.len(), 1);
}

fn names(policy: &str) -> String {
    format!("source of {policy}")
}

#[test]
fn edits_of_different_fields_from_two_sources_are_joined_in_one_file() {
    let plan = merge(
        Some("manifests"),
        vec![
            part("api", "registry.example/api", "1.1.0"),
            part("shop/web", "registry.example/web", "2.1.0"),
        ],
        &names,
    );
    assert!(plan.holds.is_empty() && plan.problems.is_empty());
    assert_eq!(plan.files.len(), 1);
    let text = &plan.files[0].updated;
    assert!(
        text.contains("api:1.1.0") && text.contains("web:2.1.0"),
        "{text}"
    );
    assert_eq!(plan.changes.len(), 2);
}

#[test]
fn two_sources_on_one_field_with_one_value_make_one_edit() {
    let plan = merge(
        Some("manifests"),
        vec![
            part("api", "registry.example/api", "1.1.0"),
            part("shop/api", "registry.example/api", "1.1.0"),
        ],
        &names,
    );
    assert!(plan.holds.is_empty(), "{:?}", plan.holds);
    assert_eq!(
        plan.files[0].updated,
        TEXT.replace("api:1.0.0", "api:1.1.0")
    );
    assert_eq!(plan.changes.len(), 2, "each source's change is reported");
}

#[test]
fn two_sources_on_one_field_with_two_values_hold_it_and_keep_the_rest() {
    let plan = merge(
        Some("manifests"),
        vec![
            part("api", "registry.example/api", "1.1.0"),
            part("shop/api", "registry.example/api", "1.2.0"),
            part("shop/web", "registry.example/web", "2.1.0"),
        ],
        &names,
    );
    let held: Vec<(&str, &str)> = plan
        .holds
        .iter()
        .map(|h| (h.policy.as_str(), h.current.as_str()))
        .collect();
    assert_eq!(held, [("api", "1.0.0"), ("shop/api", "1.0.0")]);
    for h in &plan.holds {
        let reason = h.reason.to_string();
        assert!(
            reason.contains("api (source of api) wants 1.1.0")
                && reason.contains("shop/api (source of shop/api) wants 1.2.0"),
            "{}",
            h.reason
        );
        assert_eq!(h.line, 10);
    }
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(plan.changes[0].policy, "shop/web");
    assert_eq!(
        plan.files[0].updated,
        TEXT.replace("web:2.0.0", "web:2.1.0"),
        "the other field still moves"
    );
}

/// One source's plan of `FILE` that finds `image` already where it wants it.
fn up_to_date(policy: &str, image: &str) -> Plan {
    let moved = part(policy, image, "9.9.9");
    let c = &moved.changes[0];
    Plan {
        up_to_date: 1,
        claims: vec![Claim {
            policy: policy.into(),
            image: image.into(),
            file: FILE.into(),
            line: c.line,
            current: c.from.clone(),
        }],
        ..Plan::default()
    }
}

#[test]
fn a_source_up_to_date_on_a_field_another_moves_holds_it_and_both_are_named() {
    let plan = merge(
        Some("manifests"),
        vec![
            up_to_date("shop/api", "registry.example/api"),
            part("api", "registry.example/api", "1.1.0"),
            part("shop/web", "registry.example/web", "2.1.0"),
        ],
        &names,
    );
    let held: Vec<(&str, &str, usize)> = plan
        .holds
        .iter()
        .map(|h| (h.policy.as_str(), h.current.as_str(), h.line))
        .collect();
    assert_eq!(held, [("api", "1.0.0", 10), ("shop/api", "1.0.0", 10)]);
    for h in &plan.holds {
        let reason = h.reason.to_string();
        assert!(
            reason.contains("api (source of api) wants 1.1.0")
                && reason.contains("shop/api (source of shop/api) is up to date at 1.0.0"),
            "{}",
            h.reason
        );
    }
    assert_eq!(plan.up_to_date, 0, "a held field is not up to date");
    assert_eq!(plan.changes.len(), 1);
    assert_eq!(plan.changes[0].policy, "shop/web");
    assert_eq!(
        plan.files[0].updated,
        TEXT.replace("web:2.0.0", "web:2.1.0"),
        "the other field still moves"
    );

    // Up to date on another image of the file claims nothing of this one.
    let apart = merge(
        Some("manifests"),
        vec![
            up_to_date("shop/web", "registry.example/web"),
            part("api", "registry.example/api", "1.1.0"),
        ],
        &names,
    );
    assert!(apart.holds.is_empty(), "{:?}", apart.holds);
    assert_eq!(apart.up_to_date, 1);
    assert_eq!(
        apart.files[0].updated,
        TEXT.replace("api:1.0.0", "api:1.1.0")
    );
}
