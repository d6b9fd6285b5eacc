use super::*;
use crate::files::Directory;

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
spec:
  template:
    spec:
      containers:
        - name: api
          image: registry.example/shop/api:1.1.0
        - name: web
          image: registry.example/shop/web:2.0.0
";

const KUSTOMIZATION: &str = "\
images:
  - name: registry.example/shop/worker
    newTag: 3.1.0 # pinned by tagpilot
";

fn tree(files: &[(&str, &str)]) -> (tempfile::TempDir, Directory) {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let files = Directory::open(dir.path()).unwrap();
    (dir, files)
}

fn change(image: &str, file: &str, line: usize, field: &str, from: &str, to: &str) -> Change {
    Change {
        repository: Some("manifests".into()),
        policy: image.rsplit('/').next().unwrap().into(),
        image: image.into(),
        file: file.into(),
        line,
        field: field.into(),
        strategy: "semver",
        from: from.into(),
        to: to.into(),
        source: None,
        labels: Vec::new(),
        promotion: None,
    }
}

fn api(from: &str, to: &str) -> Change {
    change(
        "registry.example/shop/api",
        "apps/api.yaml",
        10,
        "Deployment/api container api",
        from,
        to,
    )
}

#[test]
fn the_field_goes_back_and_a_persons_later_edit_of_the_same_file_stays() {
    // Since the update, a person moved the web image and added a label in the same file.
    let edited = DEPLOYMENT
        .replace("web:2.0.0", "web:2.0.1")
        .replace("  name: api\n", "  name: api\n  labels: {team: shop}\n");
    let (_dir, files) = tree(&[("apps/api.yaml", &edited)]);
    let plan = plan_revert(&files, "revert", &[api("1.0.0", "1.1.0")]);
    assert_eq!(plan.left, []);
    let group = plan.group.expect("a revert");
    assert_eq!(
        group.files[Path::new("apps/api.yaml")],
        edited.replace("api:1.1.0", "api:1.0.0"),
        "only the field the update changed is set back"
    );
    let reverse = &group.changes[0];
    assert_eq!(
        (reverse.from.as_str(), reverse.to.as_str()),
        ("1.1.0", "1.0.0")
    );
    assert_eq!(reverse.line, 11, "the field's line on the new tip");
    assert_eq!(reverse.policy, "api");
}

#[test]
fn a_field_moved_on_since_is_left_and_named_while_the_others_go_back() {
    let moved = DEPLOYMENT.replace("api:1.1.0", "api:1.2.0");
    let (_dir, files) = tree(&[
        ("apps/api.yaml", &moved),
        ("apps/kustomization.yaml", KUSTOMIZATION),
    ]);
    let worker = change(
        "registry.example/shop/worker",
        "apps/kustomization.yaml",
        3,
        "kustomize image registry.example/shop/worker",
        "3.0.0",
        "3.1.0",
    );
    let plan = plan_revert(&files, "revert", &[api("1.0.0", "1.1.0"), worker]);
    assert_eq!(plan.left.len(), 1);
    let left = &plan.left[0];
    assert_eq!(
        left.reason,
        LeftReason::MovedOn {
            now: "1.2.0".into()
        }
    );
    assert_eq!(
        left.to_string(),
        "apps/api.yaml (Deployment/api container api): holds 1.2.0, not 1.1.0 as the update \
         left it; moved on since, left as it is"
    );
    let group = plan.group.expect("the worker goes back");
    assert_eq!(group.files.len(), 1, "the moved-on file is not written");
    assert_eq!(
        group.files[Path::new("apps/kustomization.yaml")],
        KUSTOMIZATION.replace("3.1.0", "3.0.0"),
        "the comment after the tag stays"
    );
}

#[test]
fn nothing_to_write_when_every_field_is_back_already_or_gone() {
    let (_dir, files) = tree(&[(
        "apps/api.yaml",
        &DEPLOYMENT.replace("api:1.1.0", "api:1.0.0"),
    )]);
    let gone = change(
        "registry.example/x",
        "apps/gone.yaml",
        1,
        "Pod/x container x",
        "1",
        "2",
    );
    let renamed = Change {
        field: "Deployment/api container renamed".into(),
        ..api("1.0.0", "1.1.0")
    };
    let plan = plan_revert(&files, "revert", &[api("1.0.0", "1.1.0"), gone, renamed]);
    assert_eq!(plan.group, None);
    let reasons: Vec<&LeftReason> = plan.left.iter().map(|l| &l.reason).collect();
    assert_eq!(
        reasons,
        [
            &LeftReason::AlreadyBack,
            &LeftReason::FieldGone,
            &LeftReason::FileGone
        ]
    );
}

#[test]
fn a_digest_pinned_reference_goes_back_to_its_old_tag_and_digest() {
    let old = "sha256:".to_owned() + &"a".repeat(64);
    let new = "sha256:".to_owned() + &"b".repeat(64);
    let text = DEPLOYMENT.replace("api:1.1.0", &format!("api:1.1.0@{new}"));
    let (_dir, files) = tree(&[("apps/api.yaml", &text)]);
    let failed = api(&format!("1.0.0@{old}"), &format!("1.1.0@{new}"));
    let plan = plan_revert(&files, "revert", &[failed]);
    assert_eq!(plan.left, []);
    assert_eq!(
        plan.group.unwrap().files[Path::new("apps/api.yaml")],
        DEPLOYMENT.replace("api:1.1.0", &format!("api:1.0.0@{old}"))
    );
}

#[test]
fn an_applications_override_is_left_and_said_to_be_no_manifest_field() {
    let (_dir, files) = tree(&[("apps/api.yaml", DEPLOYMENT)]);
    let override_change = Change {
        file: "apps/.argocd-source-shop.yaml".into(),
        field: "argocd-source helm".into(),
        ..api("1.0.0", "1.1.0")
    };
    let plan = plan_revert(&files, "revert", &[override_change, api("1.0.0", "1.1.0")]);
    assert_eq!(plan.left.len(), 1);
    assert_eq!(plan.left[0].reason, LeftReason::NotAManifestField);
    let said = plan.left[0].to_string();
    assert!(
        said.starts_with("apps/.argocd-source-shop.yaml (argocd-source helm): an Application's"),
        "{said}"
    );
    assert_eq!(
        plan.group.unwrap().changes.len(),
        1,
        "the manifest's field goes back"
    );
}

#[test]
fn the_version_labels_the_update_moved_go_back_with_their_field_and_no_others() {
    let text = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  labels:
    app.kubernetes.io/version: \"1.1.0\"
    tags.datadoghq.com/version: 1.1.0
    example.com/built: 1.1.0
spec:
  template:
    metadata:
      labels:
        version: 1.2.0
    spec:
      containers:
        - name: api
          image: registry.example/shop/api:1.1.0
";
    let (_dir, files) = tree(&[("apps/api.yaml", text)]);
    let label = |key: &str, line| crate::change::LabelChange {
        label: format!("Deployment/api metadata.labels {key}"),
        line,
        from: "1.0.0".into(),
        to: "1.1.0".into(),
    };
    let failed = Change {
        line: 17,
        labels: vec![
            label("app.kubernetes.io/version", 6),
            label("tags.datadoghq.com/version", 7),
            crate::change::LabelChange {
                label: "Deployment/api spec.template.metadata.labels version".into(),
                line: 13,
                from: "1.0.0".into(),
                to: "1.1.0".into(),
            },
        ],
        ..api("1.0.0", "1.1.0")
    };
    let plan = plan_revert(&files, "revert", &[failed]);
    let group = plan.group.expect("a revert");
    assert_eq!(
        group.files[Path::new("apps/api.yaml")],
        text.replace("\"1.1.0\"", "\"1.0.0\"")
            .replace(
                "datadoghq.com/version: 1.1.0",
                "datadoghq.com/version: 1.0.0"
            )
            .replace("api:1.1.0", "api:1.0.0"),
        "a label the update did not move stays, and so does one a person moved on since"
    );
    let back: Vec<(&str, &str, &str)> = group.changes[0]
        .labels
        .iter()
        .map(|l| (l.label.as_str(), l.from.as_str(), l.to.as_str()))
        .collect();
    assert_eq!(
        back,
        [
            (
                "Deployment/api metadata.labels app.kubernetes.io/version",
                "1.1.0",
                "1.0.0"
            ),
            (
                "Deployment/api metadata.labels tags.datadoghq.com/version",
                "1.1.0",
                "1.0.0"
            ),
        ]
    );
}
