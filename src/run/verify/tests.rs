use super::*;
use crate::affected::contains_file;

#[test]
fn the_failed_changes_are_the_fields_followed_from_their_old_tag_to_the_failed_one() {
    let field = VerifiedField {
        key: FieldKey {
            repository: Some("manifests".into()),
            policy: "api".into(),
            file: "apps/api/deployment.yaml".into(),
            field: "Deployment/api container api".into(),
        },
        image: "registry.example/api".into(),
        line: 10,
        from: "1.0.0".into(),
        to: "1.1.0".into(),
        on_failure: OnFailure::Revert,
        promoted_at: None,
    };
    let pending = PendingVerification {
        application: "argocd/shop-api".into(),
        repository: "manifests".into(),
        commit: "c".into(),
        status_commit: "c".into(),
        since: Timestamp::UNIX_EPOCH,
        timeout: Duration::from_secs(60),
        fields: vec![field.clone()],
    };
    let changes = failed_changes(&pending, &[field]);
    assert_eq!(changes.len(), 1);
    let c = &changes[0];
    assert_eq!(
        (
            c.repository.as_deref(),
            c.policy.as_str(),
            c.image.as_str(),
            c.file.as_str(),
            c.line,
            c.field.as_str(),
            c.from.as_str(),
            c.to.as_str()
        ),
        (
            Some("manifests"),
            "api",
            "registry.example/api",
            "apps/api/deployment.yaml",
            10,
            "Deployment/api container api",
            "1.0.0",
            "1.1.0"
        )
    );
}

#[test]
fn a_source_contains_the_files_under_its_path_only() {
    assert!(contains_file("apps/api", "apps/api/deployment.yaml"));
    assert!(contains_file("./apps/api/", "apps/api/deployment.yaml"));
    assert!(contains_file("", "apps/api/deployment.yaml"));
    assert!(contains_file(".", "x.yaml"));
    assert!(!contains_file("apps/api", "apps/api-v2/deployment.yaml"));
    assert!(!contains_file("apps/web", "apps/api/deployment.yaml"));
}
