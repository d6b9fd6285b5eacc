//! Version labels that follow a moving image: where they are read, which follow, which are
//! left alone and why, and that their edits keep quoting and pass verification with the image's.

use super::*;
use crate::config::version_labels::VersionLabels;

/// Moves every container field of `src` whose image is in `to` (repository name → new tag),
/// follows the labels with `labels`, and returns the new text and what was left.
fn follow(src: &str, to: &[(&str, &str)], labels: &VersionLabels) -> (String, Vec<LeftLabel>) {
    let path = Path::new("w.yaml");
    let fields = scan(path, src, &[]).unwrap();
    let mut edits = Vec::new();
    let mut moves = Vec::new();
    for field in &fields {
        let name = repo(field);
        let Some((_, tag)) = to.iter().find(|(image, _)| name.ends_with(image)) else {
            continue;
        };
        edits.extend(
            field
                .edits(&Update {
                    name: &name,
                    tag: Some(tag),
                    digest: None,
                })
                .unwrap(),
        );
        moves.push(ImageMove { field, tag, labels });
    }
    let found = version_labels(path, src, &fields, &moves).unwrap();
    edits.extend(found.moved.iter().map(|m| m.edit.clone()));
    (apply_edits(path, src, &edits).unwrap(), found.left)
}

const ROLLOUT: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: web
  labels:
    app.kubernetes.io/version: \"1.2.3\"
    tags.datadoghq.com/version: '1.2.3'
  annotations:
    tags.datadoghq.com/web.version: v1.2.3 # the tag itself
    tags.datadoghq.com/proxy.version: \"1.27.0\"
spec:
  selector:
    matchLabels: {app: web, version: 1.2.3}
  template:
    metadata:
      labels: {app: web, version: 1.2.3, app.kubernetes.io/version: 1.2.2}
    spec:
      containers:
        - name: web
          image: r.example/web:v1.2.3
        - name: proxy
          image: r.example/envoy:v1.27.0
";

#[test]
fn labels_follow_the_tag_or_its_version_in_their_own_quoting() {
    let (out, left) = follow(ROLLOUT, &[("web", "v1.3.0")], &VersionLabels::defaults());
    let want = ROLLOUT
        .replace(
            "app.kubernetes.io/version: \"1.2.3\"",
            "app.kubernetes.io/version: \"1.3.0\"",
        )
        .replace(
            "tags.datadoghq.com/version: '1.2.3'",
            "tags.datadoghq.com/version: '1.3.0'",
        )
        .replace(
            "web.version: v1.2.3 # the tag itself",
            "web.version: v1.3.0 # the tag itself",
        )
        .replace("web:v1.2.3", "web:v1.3.0");
    assert_eq!(out, want);
    assert!(
        out.contains("matchLabels: {app: web, version: 1.2.3}"),
        "the selector is never touched"
    );
    let reasons: Vec<(String, &LeftReason)> = left
        .iter()
        .map(|l| (l.label.to_string(), &l.reason))
        .collect();
    assert_eq!(
        reasons,
        [
            (
                "Rollout/web spec.template.metadata.labels version".to_string(),
                &LeftReason::Selector
            ),
            (
                "Rollout/web spec.template.metadata.labels app.kubernetes.io/version".to_string(),
                &LeftReason::Disagrees {
                    value: "1.2.2".into(),
                    tags: vec!["v1.2.3".into(), "1.2.3".into()]
                }
            ),
        ]
    );
    assert_eq!(left[0].label.line, 16);
}

#[test]
fn a_key_no_container_names_follows_only_when_every_moving_image_agrees() {
    let src = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: shop
  labels:
    app.kubernetes.io/version: 1.2.3
spec:
  template:
    metadata:
      labels:
        tags.datadoghq.com/api.version: 1.2.3
        tags.datadoghq.com/worker.version: 1.2.3
    spec:
      containers:
        - name: api
          image: r.example/api:1.2.3
        - name: worker
          image: r.example/worker:1.2.3
";
    // Both move to one version: the resource's version is theirs.
    let (out, left) = follow(
        src,
        &[("api", "1.3.0"), ("worker", "1.3.0")],
        &VersionLabels::defaults(),
    );
    assert_eq!(out, src.replace("1.2.3", "1.3.0"));
    assert!(left.is_empty(), "{left:?}");

    // Apart: only the keys that name a container follow.
    let (out, left) = follow(
        src,
        &[("api", "1.3.0"), ("worker", "1.2.4")],
        &VersionLabels::defaults(),
    );
    assert!(out.contains("app.kubernetes.io/version: 1.2.3"), "{out}");
    assert!(out.contains("api.version: 1.3.0") && out.contains("worker.version: 1.2.4"));
    assert_eq!(left.len(), 1);
    assert!(
        matches!(&left[0].reason, LeftReason::Ambiguous { moving } if moving.len() == 2),
        "{left:?}"
    );
    assert_eq!(left[0].moves, [0, 1]);

    // One moving image among unmoved ones is no ambiguity.
    let (out, left) = follow(src, &[("api", "1.3.0")], &VersionLabels::defaults());
    assert!(out.contains("app.kubernetes.io/version: 1.3.0"), "{out}");
    assert!(out.contains("worker.version: 1.2.3"), "{out}");
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn cronjob_labels_follow_at_every_level_and_switched_off_nothing_does() {
    let src = "\
apiVersion: batch/v1
kind: CronJob
metadata:
  name: nightly
  labels: {app.kubernetes.io/version: \"1.2.3\"}
spec:
  jobTemplate:
    metadata:
      labels:
        app.kubernetes.io/version: \"1.2.3\"
    spec:
      template:
        metadata:
          labels:
            version: 1.2.3
          annotations:
            version: 1.2.3
        spec:
          containers:
            - name: report
              image: r.example/report:1.2.3
";
    let (out, left) = follow(src, &[("report", "1.3.0")], &VersionLabels::defaults());
    let want = src
        .replacen("1.2.3", "1.3.0", 2)
        .replacen("version: 1.2.3", "version: 1.3.0", 1)
        .replace("report:1.2.3", "report:1.3.0");
    assert_eq!(out, want, "`version` follows among Pod labels only");
    assert!(left.is_empty(), "{left:?}");

    let (out, left) = follow(src, &[("report", "1.3.0")], &VersionLabels::off());
    assert_eq!(out, src.replace("report:1.2.3", "report:1.3.0"));
    assert!(left.is_empty());
}

#[test]
fn a_label_that_is_a_marked_field_an_alias_or_an_anchor_is_not_followed_as_a_label() {
    let src = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app.kubernetes.io/version: &v 1.2.3
    tags.datadoghq.com/version: *v
  annotations:
    example.com/version: 1.2.3 # tagpilot: web:tag
spec:
  template:
    spec:
      containers:
        - name: web
          image: r.example/web:1.2.3
";
    let labels = VersionLabels {
        keys: vec![
            "app.kubernetes.io/version".into(),
            "tags.datadoghq.com/version".into(),
            "example.com/version".into(),
        ],
        pod_labels: Vec::new(),
    };
    let (out, left) = follow(src, &[("web", "1.3.0")], &labels);
    assert_eq!(out, src.replace("web:1.2.3", "web:1.3.0"));
    let what: Vec<&LeftReason> = left.iter().map(|l| &l.reason).collect();
    assert_eq!(
        what,
        [
            &LeftReason::Unwritable {
                what: "anchored (aliases elsewhere read it too)"
            },
            &LeftReason::Unwritable { what: "an alias" },
        ],
        "the marked annotation is its own field, not also a label"
    );
}

#[test]
fn a_digest_only_move_or_a_resource_without_moves_leaves_every_label() {
    let src = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app.kubernetes.io/version: 1.2.3}
spec:
  template:
    spec:
      containers:
        - name: web
          image: r.example/web:1.2.3
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: other
  labels: {app.kubernetes.io/version: 1.2.3}
spec:
  template:
    spec:
      containers:
        - name: other
          image: r.example/other:1.2.3
";
    let (out, left) = follow(src, &[("web", "1.2.3")], &VersionLabels::defaults());
    assert_eq!(out, src);
    assert!(left.is_empty());
    // A label someone moved ahead of its image already holds what it would get: no warning.
    let ahead = src.replacen("version: 1.2.3", "version: 1.4.0", 1);
    let (out, left) = follow(
        &ahead,
        &[("r.example/web", "1.4.0")],
        &VersionLabels::defaults(),
    );
    assert_eq!(out, ahead.replacen("web:1.2.3", "web:1.4.0", 1));
    assert!(left.is_empty(), "{left:?}");
    let (out, _) = follow(
        src,
        &[("r.example/web", "1.4.0")],
        &VersionLabels::defaults(),
    );
    assert_eq!(
        out,
        src.replacen("1.2.3", "1.4.0", 2),
        "only the moving image's own resource"
    );
}

#[test]
fn a_pod_label_a_service_or_budget_in_the_file_selects_by_stays_with_it() {
    let src = "\
apiVersion: v1
kind: Service
metadata:
  name: web-stable
spec:
  selector: {app: web, version: 1.2.3}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: web
spec:
  minAvailable: 1
  selector:
    matchLabels: {app: web, release: 1.2.3}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {version: 1.2.3}
spec:
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web, version: 1.2.3, tags.datadoghq.com/version: 1.2.3, release: 1.2.3}
    spec:
      containers:
        - name: web
          image: r.example/web:1.2.3
";
    let labels = VersionLabels {
        pod_labels: vec!["version".into(), "release".into()],
        ..VersionLabels::defaults()
    };
    let (out, left) = follow(src, &[("web", "1.3.0")], &labels);
    assert_eq!(
        out,
        src.replace(
            "tags.datadoghq.com/version: 1.2.3",
            "tags.datadoghq.com/version: 1.3.0"
        )
        .replace("web:1.2.3", "web:1.3.0"),
        "the Service's selector and the Pod label it selects by stay; the resource's own \
         `version` is no Pod label and not a key"
    );
    assert_eq!(left.len(), 2, "{left:?}");
    assert_eq!(
        left[0].reason,
        LeftReason::SelectedBy {
            by: "Service/web-stable".into()
        }
    );
    assert_eq!(
        left[1].reason,
        LeftReason::SelectedBy {
            by: "PodDisruptionBudget/web".into()
        }
    );
    assert!(
        left[0]
            .reason
            .to_string()
            .contains("Service/web-stable in the same file selects Pods by it")
    );
}
