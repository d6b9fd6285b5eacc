use std::cmp::Ordering;

use jiff::Timestamp;

use super::{FieldKey, FieldWrite, HeldTag, HoldReason, rollback};

/// Semver order, as a semver policy compares its tags.
fn semver(a: &str, b: &str) -> Ordering {
    semver::Version::parse(a)
        .unwrap()
        .cmp(&semver::Version::parse(b).unwrap())
}

fn key() -> FieldKey {
    FieldKey {
        repository: Some("manifests".into()),
        policy: "api".into(),
        file: "apps/api/deployment.yaml".into(),
        field: "Deployment/api container api".into(),
    }
}

fn now() -> Timestamp {
    "2026-11-25T10:00:00Z".parse().unwrap()
}

fn write(by_tagpilot: bool, from: &str, to: &str) -> FieldWrite {
    FieldWrite {
        commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
        author: "Dana Ops <dana@example.com>".into(),
        by_tagpilot,
        from: from.into(),
        to: to.into(),
    }
}

#[test]
fn a_failed_tag_blocks_itself_only() {
    let held = HeldTag {
        key: key(),
        tag: "1.3.0".into(),
        reason: HoldReason::Failed {
            application: "argocd/shop-api".into(),
            failure: "health Degraded after the sync".into(),
        },
        since: now(),
    };
    assert!(held.blocks("1.3.0", &semver));
    assert!(
        !held.blocks("1.3.1", &semver),
        "a newer tag may be proposed"
    );
    assert!(
        !held.blocks("1.2.5", &semver),
        "so may an older one the field does not run yet"
    );
    assert!(
        !held.outlived_by("2.0.0", &semver),
        "a failed tag stays held"
    );
}

#[test]
fn a_persons_rollback_is_held_at_their_value_until_a_newer_tag_appears() {
    let held = rollback(
        &key(),
        "1.3.0",
        &write(false, "1.3.0", "1.2.0"),
        now(),
        &semver,
    )
    .expect("a person moved the field back");
    assert_eq!(held.tag, "1.3.0");
    assert_eq!(
        held.reason.to_string(),
        "rolled back to 1.2.0 by Dana Ops <dana@example.com> in 4b825dc642cb"
    );
    for blocked in ["1.3.0", "1.2.9", "1.2.1"] {
        assert!(
            held.blocks(blocked, &semver),
            "{blocked} is not newer than 1.3.0"
        );
    }
    assert!(!held.blocks("1.3.1", &semver));
    assert!(!held.outlived_by("1.3.0", &semver));
    assert!(held.outlived_by("1.4.0", &semver));
}

#[test]
fn tagpilots_own_commits_and_moves_forward_are_not_rollbacks() {
    assert_eq!(
        rollback(
            &key(),
            "1.3.0",
            &write(true, "1.3.0", "1.2.0"),
            now(),
            &semver
        ),
        None,
        "tagpilot's revert carries its trailer"
    );
    assert_eq!(
        rollback(
            &key(),
            "1.3.0",
            &write(false, "1.3.0", "1.4.0"),
            now(),
            &semver
        ),
        None,
        "a person moving forward is not a rollback"
    );
    assert_eq!(
        rollback(
            &key(),
            "1.3.0",
            &write(false, "1.1.0", "1.0.0"),
            now(),
            &semver
        ),
        None,
        "the field no longer held tagpilot's value"
    );
}

#[test]
fn holds_survive_serialisation_as_the_state_store_keeps_them() {
    let held = rollback(
        &key(),
        "1.3.0",
        &write(false, "1.3.0", "1.2.0"),
        now(),
        &semver,
    )
    .unwrap();
    let json = serde_json::to_string(&held).unwrap();
    assert!(json.contains(r#""kind":"rolledBack""#), "{json}");
    assert_eq!(serde_json::from_str::<HeldTag>(&json).unwrap(), held);
    assert_eq!(
        held.key.to_string(),
        "manifests:apps/api/deployment.yaml Deployment/api container api (policy api)"
    );
}
