//! Scanning and editing whole files: workloads, markers, and edits that must be refused.
//! Kustomize and Helm values are in `values.rs`.

mod chart_versions;
mod charts;
mod labels;
mod values;

use super::*;

const D1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const D2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

fn scan_ok(name: &str, src: &str) -> Vec<ImageField> {
    scan(Path::new(name), src, &[]).unwrap()
}

fn tag(t: &str) -> Update<'_> {
    Update {
        name: "unused.example/x",
        tag: Some(t),
        digest: None,
    }
}

/// Applies one field's update and returns the new text.
fn edit(name: &str, src: &str, index: usize, update: &Update<'_>) -> String {
    let fields = scan_ok(name, src);
    let edits = fields[index].edits(update).unwrap();
    apply_edits(Path::new(name), src, &edits).unwrap()
}

/// Moves one field to a new tag, under the field's own repository name.
fn retag(name: &str, src: &str, index: usize, t: &str) -> String {
    let field = &scan_ok(name, src)[index];
    let image = repo(field);
    edit(
        name,
        src,
        index,
        &Update {
            name: &image,
            tag: Some(t),
            digest: None,
        },
    )
}

fn repo(f: &ImageField) -> String {
    f.repository().map(|r| r.to_string()).unwrap_or_default()
}

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  template:
    spec:
      initContainers:
        - name: init
          image: busybox:1.36
      containers:
        - name: app # the app
          image: 127.0.0.1:5000/shop/api:1.2.3
        - name: sidecar
          image: \"docker.io/envoyproxy/envoy:v1.29.0\"
      ephemeralContainers:
        - name: debug
          image: 'ghcr.io/org/debug:1.0.0'
";

#[test]
fn finds_every_container_kind_of_a_deployment() {
    let fields = scan_ok("web.yaml", DEPLOYMENT);
    let got: Vec<_> = fields
        .iter()
        .map(|f| match &f.kind {
            FieldKind::Container {
                resource,
                container,
            } => (
                resource.as_str(),
                container.as_str(),
                repo(f),
                f.current().0.unwrap().to_string(),
                f.line,
            ),
            k => panic!("{k:?}"),
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                "Deployment/web",
                "init",
                "registry-1.docker.io/library/busybox".into(),
                "1.36".into(),
                10
            ),
            (
                "Deployment/web",
                "app",
                "127.0.0.1:5000/shop/api".into(),
                "1.2.3".into(),
                13
            ),
            (
                "Deployment/web",
                "sidecar",
                "registry-1.docker.io/envoyproxy/envoy".into(),
                "v1.29.0".into(),
                15
            ),
            (
                "Deployment/web",
                "debug",
                "ghcr.io/org/debug".into(),
                "1.0.0".into(),
                18
            ),
        ]
    );
    assert_eq!(fields[1].column, 18);
}

#[test]
fn edit_changes_only_the_scalar_and_keeps_quotes_and_comments() {
    let out = retag("web.yaml", DEPLOYMENT, 1, "1.3.0");
    assert_eq!(out, DEPLOYMENT.replace("api:1.2.3", "api:1.3.0"));
    let out = retag("web.yaml", DEPLOYMENT, 2, "v1.30.1");
    assert_eq!(
        out,
        DEPLOYMENT.replace(
            "\"docker.io/envoyproxy/envoy:v1.29.0\"",
            "\"docker.io/envoyproxy/envoy:v1.30.1\""
        )
    );
    let out = retag("web.yaml", DEPLOYMENT, 3, "1.1.0");
    assert_eq!(
        out,
        DEPLOYMENT.replace("'ghcr.io/org/debug:1.0.0'", "'ghcr.io/org/debug:1.1.0'")
    );
}

#[test]
fn name_is_kept_as_written_and_digest_pinned() {
    let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n    - image: docker.io/nginx:1.25@sha256:1111111111111111111111111111111111111111111111111111111111111111\n";
    let fields = scan_ok("pod.yaml", src);
    assert_eq!(fields[0].current(), (Some("1.25"), Some(D1)));
    assert_eq!(
        fields[0].kind,
        FieldKind::Container {
            resource: "Pod".into(),
            container: "#0".into()
        }
    );
    let out = edit(
        "pod.yaml",
        src,
        0,
        &Update {
            name: "nginx",
            tag: Some("1.26"),
            digest: Some(D2),
        },
    );
    assert_eq!(
        out,
        src.replace(&format!("1.25@{D1}"), &format!("1.26@{D2}"))
    );
    // An update without a digest drops the stale one from a whole reference.
    let out = edit(
        "pod.yaml",
        src,
        0,
        &Update {
            name: "nginx",
            tag: Some("1.26"),
            digest: None,
        },
    );
    assert_eq!(out, src.replace(&format!("1.25@{D1}"), "1.26"));
}

#[test]
fn cronjob_rollout_and_multi_document_files() {
    let src = "\
---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly}
spec:
  jobTemplate:
    spec:
      template:
        spec:
          containers: [{name: job, image: 'ghcr.io/a/job:1.0.0'}]
...
---
apiVersion: argoproj.io/v1alpha1
kind: Rollout
metadata:
  name: canary
spec:
  template:
    spec:
      containers:
        - {name: app, image: ghcr.io/a/app:2.0.0}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: x}
data:
  image: ghcr.io/a/not-a-container:1.0.0
";
    let fields = scan_ok("all.yaml", src);
    let kinds: Vec<_> = fields.iter().map(|f| f.kind.clone()).collect();
    assert_eq!(
        kinds,
        [
            FieldKind::Container {
                resource: "CronJob/nightly".into(),
                container: "job".into()
            },
            FieldKind::Container {
                resource: "Rollout/canary".into(),
                container: "app".into()
            },
        ]
    );
    let out = retag("all.yaml", src, 1, "2.1.0");
    assert_eq!(out, src.replace("app:2.0.0", "app:2.1.0"));
    let out = retag("all.yaml", src, 0, "1.10");
    assert_eq!(out, src.replace("job:1.0.0", "job:1.10"));
}

#[test]
fn crlf_bom_and_non_ascii_survive() {
    let src = "\u{feff}# Größe: ünïcödé\r\napiVersion: v1\r\nkind: Pod\r\nmetadata: {name: café}\r\nspec:\r\n  containers:\r\n  - name: app\r\n    image: ghcr.io/a/app:1.0.0 # 日本語\r\n";
    let fields = scan_ok("pod.yaml", src);
    assert_eq!((fields[0].line, fields[0].column), (8, 12));
    assert_eq!(
        fields[0].kind,
        FieldKind::Container {
            resource: "Pod/café".into(),
            container: "app".into()
        }
    );
    let out = retag("pod.yaml", src, 0, "1.0.1");
    assert_eq!(out, src.replace("app:1.0.0", "app:1.0.1"));
}

#[test]
fn anchors_are_kept_and_values_aliases_read_are_not_fields() {
    // An anchor no alias reads is written like any value, and keeps its anchor.
    let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - name: a\n    image: &img ghcr.io/a/app:1.0.0\n";
    let out = retag("pod.yaml", src, 0, "1.1.0");
    assert_eq!(out, src.replace("app:1.0.0", "app:1.1.0"));
    // One an alias reads is not: the alias would move with it. It is handed back, named.
    let src = format!("{src}  - name: b\n    image: *img\n");
    let scanned = scan_with_markers(Path::new("pod.yaml"), &src, &[]).unwrap();
    assert!(scanned.fields.is_empty(), "{:?}", scanned.fields);
    let [dropped] = scanned.dropped.as_slice() else {
        panic!("{:?}", scanned.dropped)
    };
    assert_eq!(
        (dropped.line, &dropped.kind),
        (
            6,
            &FieldKind::Container {
                resource: "Pod".into(),
                container: "a".into()
            }
        )
    );
    assert!(dropped.reason.contains("an alias reads it"), "{dropped:?}");
}

#[test]
fn values_that_are_not_image_references_are_not_fields() {
    let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - image: \"{{ .Values.image }}\"\n  - image: $(IMG)\n  - image: ''\n  - image:\n";
    assert!(scan_ok("pod.yaml", src).is_empty());
}

#[test]
fn templates_are_parse_errors_naming_the_place() {
    let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n{{- range .Values.c }}\n  - image: {{ .image }}\n{{- end }}\n";
    let err = scan(Path::new("chart/templates/pod.yaml"), src, &[]).unwrap_err();
    let ManifestError::Parse { line, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(*line >= 5, "{err}");
    assert!(
        err.to_string().starts_with("chart/templates/pod.yaml:"),
        "{err}"
    );
}

#[test]
fn block_scalars_are_refused() {
    let src = "apiVersion: v1\nkind: Pod\nspec:\n  containers:\n  - image: |\n      ghcr.io/a/app:1.0.0\n";
    let fields = scan_ok("pod.yaml", src);
    let err = fields[0].edits(&tag("1.1.0")).unwrap_err();
    assert_eq!(err.label(), "block_scalar");
    assert!(err.to_string().starts_with("pod.yaml:6:7:"), "{err}");
}

#[test]
fn markers() {
    let src = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    tags.datadoghq.com/version: \"1.2.3\" # tagpilot: checkout-api:tag
spec:
  template:
    spec:
      containers:
        - name: app
          image: ghcr.io/a/app:1.2.3 # {\"$imagepolicy\": \"flux-system:checkout-api\"}
          env:
            - name: IMG
              value: ghcr.io/a/app # {\"$imagepolicy\": \"flux-system:checkout-api:name\"}
            - name: TAG
              value: '1.2.3'   # tagpilot: shop:checkout-api:tag
            - name: DIGEST
              value: \"\" # tagpilot: checkout-api:digest
            - name: NOT
              value: x # just a comment: tagpilot: x
";
    let fields = scan_ok("web.yaml", src);
    let got: Vec<_> = fields
        .iter()
        .map(|f| (f.kind.clone(), f.current(), f.repository().is_none()))
        .collect();
    let m = |p: &str, ns: Option<&str>, part| FieldKind::Marker {
        policy: p.into(),
        namespace: ns.map(String::from),
        part,
    };
    assert_eq!(
        got,
        [
            (
                m("checkout-api", None, MarkerPart::Tag),
                (Some("1.2.3"), None),
                true
            ),
            (
                m("checkout-api", Some("flux-system"), MarkerPart::Whole),
                (Some("1.2.3"), None),
                true
            ),
            (
                m("checkout-api", Some("flux-system"), MarkerPart::Name),
                (None, None),
                true
            ),
            (
                m("checkout-api", Some("shop"), MarkerPart::Tag),
                (Some("1.2.3"), None),
                true
            ),
            (
                m("checkout-api", None, MarkerPart::Digest),
                (None, None),
                true
            ),
        ]
    );
    let update = Update {
        name: "127.0.0.1:5000/shop/checkout-api",
        tag: Some("1.3.0"),
        digest: Some(D1),
    };
    let edits: Vec<Edit> = fields
        .iter()
        .flat_map(|f| f.edits(&update).unwrap())
        .collect();
    let out = apply_edits(Path::new("web.yaml"), src, &edits).unwrap();
    let want = src
        .replace("\"1.2.3\" #", "\"1.3.0\" #")
        .replace(
            "ghcr.io/a/app:1.2.3",
            &format!("127.0.0.1:5000/shop/checkout-api:1.3.0@{D1}"),
        )
        .replace(
            "value: ghcr.io/a/app #",
            "value: 127.0.0.1:5000/shop/checkout-api #",
        )
        .replace("'1.2.3'", "'1.3.0'")
        .replace("value: \"\"", &format!("value: \"{D1}\""));
    assert_eq!(out, want);
}

#[test]
fn overlapping_or_stale_edits_are_refused() {
    let fields = scan_ok("web.yaml", DEPLOYMENT);
    let mut edits = fields[1].edits(&tag("2.0.0")).unwrap();
    edits.extend(fields[1].edits(&tag("3.0.0")).unwrap());
    let err = apply_edits(Path::new("web.yaml"), DEPLOYMENT, &edits).unwrap_err();
    assert_eq!(err.label(), "bad_edit");
    // Edits made for one text do not verify against another.
    let edits = fields[1].edits(&tag("2.0.0")).unwrap();
    let other = DEPLOYMENT.replace("name: web", "name: webby");
    let err = apply_edits(Path::new("web.yaml"), &other, &edits).unwrap_err();
    assert_eq!(err.label(), "verification", "{err}");
}

#[test]
fn verification_rejects_an_insertion_into_the_wrong_place() {
    let src = "images:\n  - name: ghcr.io/a/api\n";
    let fields = scan_ok("kustomization.yaml", src);
    let mut edits = fields[0].edits(&tag("1.0.0")).unwrap();
    // Same text, one level too shallow: it lands in the root mapping.
    edits[0].text = "\nnewTag: 1.0.0".into();
    let err = apply_edits(Path::new("kustomization.yaml"), src, &edits).unwrap_err();
    assert_eq!(err.label(), "verification", "{err}");
    // A replacement that reads back differently.
    let fields = scan_ok("web.yaml", DEPLOYMENT);
    let mut edits = fields[1].edits(&tag("2.0.0")).unwrap();
    edits[0].text = "a: b".into();
    let err = apply_edits(Path::new("web.yaml"), DEPLOYMENT, &edits).unwrap_err();
    assert_eq!(err.label(), "verification", "{err}");
}

#[test]
fn no_change_means_no_edits() {
    let fields = scan_ok("web.yaml", DEPLOYMENT);
    let update = Update {
        name: "127.0.0.1:5000/shop/api",
        tag: Some("1.2.3"),
        digest: None,
    };
    assert!(fields[1].edits(&update).unwrap().is_empty());
    assert_eq!(
        apply_edits(Path::new("web.yaml"), DEPLOYMENT, &[]).unwrap(),
        DEPLOYMENT
    );
}
