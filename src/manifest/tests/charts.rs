//! Shapes from real charts' values files that tagpilot misread (issue 28): YAML nulls, empty
//! tags, a registry apart from the name, long comment blocks, anchors that aliases read.

use super::*;

fn scanned(src: &str, helm: &[HelmPaths]) -> Scanned {
    scan_with_markers(Path::new("values.yaml"), src, helm).unwrap()
}

fn images(fields: &[ImageField]) -> Vec<(String, Option<&str>, bool)> {
    fields
        .iter()
        .map(|f| (repo(f), f.current().0, f.empty_tag()))
        .collect()
}

fn docker_hub(name: &str) -> String {
    Repository::parse(name).unwrap().to_string()
}

/// tempo-distributed's memcached, exporter and gateway images: `registry: null` (and `~`, and
/// nothing) is no registry, never a registry called `null`; a null tag or digest is empty.
#[test]
fn yaml_nulls_are_absent_values() {
    let src = "\
memcached:
  image:
    # -- The Docker registry for the Memcached image. Overrides `global.image.registry`
    registry: null
    # -- Optional list of imagePullSecrets. Overrides `global.image.pullSecrets`
    pullSecrets: []
    # -- Memcached Docker image repository
    repository: memcached
    # -- Memcached Docker image tag
    tag: 1.6.33-alpine
memcachedExporter:
  image:
    registry: ~
    repository: prom/memcached-exporter
    tag: v0.15.0
gateway:
  image:
    registry:
    repository: nginxinc/nginx-unprivileged
    tag: 1.27-alpine
    digest: NULL
tempo:
  image:
    registry: null
    repository: grafana/tempo
    tag: null
";
    let fields = scan_ok("values.yaml", src);
    assert_eq!(
        images(&fields),
        [
            (docker_hub("memcached"), Some("1.6.33-alpine"), false),
            (
                docker_hub("prom/memcached-exporter"),
                Some("v0.15.0"),
                false
            ),
            (
                docker_hub("nginxinc/nginx-unprivileged"),
                Some("1.27-alpine"),
                false
            ),
            (docker_hub("grafana/tempo"), None, true),
        ]
    );
    assert_eq!(fields[2].current(), (Some("1.27-alpine"), None));
    // A null is written over like any value; a quoted "null" is a string.
    let out = retag("values.yaml", src, 3, "2.6.0");
    assert_eq!(out, src.replace("tag: null", "tag: 2.6.0"));
    let quoted = "image:\n  registry: \"null\"\n  repository: grafana/tempo\n  tag: 2.6.0\n";
    assert_eq!(
        repo(&scan_ok("values.yaml", quoted)[0]),
        docker_hub("null/grafana/tempo")
    );
    // A kustomize entry's `newName: null` renames nothing, and a null `newTag` is empty.
    let k = "images:\n- name: ghcr.io/a/api\n  newName: null\n  newTag: ~\n";
    let fields = scan_ok("kustomization.yaml", k);
    assert_eq!(repo(&fields[0]), "ghcr.io/a/api");
    assert_eq!(fields[0].current(), (None, None));
}

/// grafana's, alertmanager's and kube-prometheus-stack's `tag: ""`: the chart's appVersion.
#[test]
fn an_empty_helm_tag_is_known_as_empty() {
    let src = "\
image:
  # -- The Docker registry
  registry: docker.io
  # -- Docker image repository
  repository: grafana/grafana
  # Overrides the Grafana image tag whose default is the chart appVersion
  tag: \"\"
  sha: \"\"
  pullPolicy: IfNotPresent
sidecar:
  image:
    repository: kiwigrid/k8s-sidecar
    tag:
init:
  image:
    repository: library/busybox
";
    let fields = scan_ok("values.yaml", src);
    assert_eq!(
        images(&fields),
        [
            (docker_hub("grafana/grafana"), None, true),
            (docker_hub("kiwigrid/k8s-sidecar"), None, true),
            // No tag key is not an empty tag, but the chart's default all the same.
            (docker_hub("library/busybox"), None, false),
        ]
    );
    assert!(fields[2].missing_tag() && !fields[0].missing_tag());
    // A kustomize entry's empty `newTag` is not Helm's appVersion.
    let k = scan_ok(
        "kustomization.yaml",
        "images:\n- name: a/b\n  newTag: \"\"\n",
    );
    assert!(!k[0].empty_tag());
}

/// `image: {registry, repository, tag}` named by explicit paths (Image Updater's
/// `helm.image-name: image.repository`): the image is the one the chart composes.
#[test]
fn an_explicit_name_path_beside_a_registry_is_the_composed_image() {
    let src = "\
image:
  registry: registry.example
  repository: team/app
  tag: 1.0.0
other:
  registry: null
  repository: team/other
  tag: 2.0.0
";
    let paths = |name: &str, tag: &str| HelmPaths {
        repository: Some(name.into()),
        tag: Some(tag.into()),
        ..Default::default()
    };
    let s = scanned(
        src,
        &[
            paths("image.repository", "image.tag"),
            paths("other.repository", "other.tag"),
        ],
    );
    assert_eq!(
        images(&s.fields),
        [
            (
                "registry.example/team/app".to_string(),
                Some("1.0.0"),
                false
            ),
            (docker_hub("team/other"), Some("2.0.0"), false),
        ]
    );
    assert_eq!(
        helm_image_name(src, "image.repository").as_deref(),
        Some("registry.example/team/app")
    );
    assert_eq!(
        helm_image_name(src, "other.repository").as_deref(),
        Some("team/other")
    );
    // A registry is only read: an alias of a scalar reads as that scalar.
    let aliased = "global:\n  registry: &registry registry.example\nimage:\n  registry: *registry\n  repository: team/app\n  tag: 1.0.0\n";
    assert_eq!(
        repo(&scan_ok("values.yaml", aliased)[0]),
        "registry.example/team/app"
    );
    assert_eq!(
        helm_image_name(aliased, "image.repository").as_deref(),
        Some("registry.example/team/app")
    );
    // An explicit registry path still wins.
    let s = scanned(
        src,
        &[HelmPaths {
            registry: Some("other.registry".into()),
            ..paths("image.repository", "image.tag")
        }],
    );
    assert_eq!(repo(&s.fields[0]), docker_hub("team/app"));
}

/// A values file with a long commented-out block (the opentelemetry-demo chart's has about a
/// hundred lines in a row) is valid YAML, read and edited like any other.
#[test]
fn hundreds_of_comment_lines_in_a_row_are_read() {
    let block: String = (0..400)
        .map(|i| format!("#   line {i} of a block\n"))
        .collect();
    let src = format!(
        "{block}components:\n  api:\n    image:\n      repository: ghcr.io/a/api\n      tag: 1.0.0\n{block}    env: []\n{block}  web:\n{block}    image: ghcr.io/a/web:1.0.0\n{block}list:\n{block}- image: ghcr.io/a/job:1.0.0\n{block}- x\n{block}"
    );
    let fields = scan_ok("values.yaml", &src);
    assert_eq!(fields.len(), 3, "{fields:?}");
    let out = retag("values.yaml", &src, 0, "1.1.0");
    assert_eq!(out, src.replace("tag: 1.0.0", "tag: 1.1.0"));
    let out = retag("values.yaml", &src, 1, "1.1.0");
    assert_eq!(out, src.replace("web:1.0.0", "web:1.1.0"));
    assert_eq!(explain_helm_path(&src, "components.api.image.tag"), None);
}

/// A value an alias reads is never written: the alias would move with it, and it may be another
/// image's. Each such reference is named with its place and why; an anchor no alias reads is
/// written as any value.
#[test]
fn values_an_alias_reads_are_dropped_with_the_reason() {
    let src = "\
image:
  repository: ghcr.io/a/app
  tag: &app-image 1.0.0
worker:
  image:
    repository: ghcr.io/a/worker
    tag: *app-image
lone:
  image:
    repository: ghcr.io/a/lone
    tag: &unused 1.0.0
base: &base
  image: ghcr.io/a/base:1.0.0
copy: *base
";
    let s = scanned(src, &[]);
    assert_eq!(
        images(&s.fields),
        [("ghcr.io/a/lone".to_string(), Some("1.0.0"), false)]
    );
    let dropped: Vec<_> = s
        .dropped
        .iter()
        .map(|d| (repo_of(d), d.line, d.reason.as_str()))
        .collect();
    assert_eq!(dropped.len(), 3, "{dropped:?}");
    assert_eq!((dropped[0].0.as_str(), dropped[0].1), ("ghcr.io/a/app", 3));
    assert!(
        dropped[0].2.contains("`tag` carries a YAML anchor"),
        "{dropped:?}"
    );
    assert_eq!(
        (dropped[1].0.as_str(), dropped[1].1),
        ("ghcr.io/a/worker", 7)
    );
    assert!(
        dropped[1].2.contains("`tag` is a YAML alias"),
        "{dropped:?}"
    );
    assert_eq!(
        (dropped[2].0.as_str(), dropped[2].1),
        ("ghcr.io/a/base", 13)
    );
    assert!(dropped[2].2.contains("an alias reads it"), "{dropped:?}");
    let out = retag("values.yaml", src, 0, "1.1.0");
    assert_eq!(out, src.replace("&unused 1.0.0", "&unused 1.1.0"));
    // The same rule through an explicit path (Image Updater's `helm.image-tag`).
    let paths = [HelmPaths {
        repository: Some("image.repository".into()),
        tag: Some("image.tag".into()),
        ..Default::default()
    }];
    let s = scanned(src, &paths);
    assert!(!s.fields.iter().any(|f| repo(f) == "ghcr.io/a/app"));
    assert!(s.dropped.iter().any(|d| repo_of(d) == "ghcr.io/a/app"));
    assert!(
        explain_helm_path(src, "image.tag")
            .is_some_and(|why| why.contains("`image.tag` carries a YAML anchor")),
    );
    assert_eq!(explain_helm_path(src, "lone.image.tag"), None);
}

fn repo_of(d: &DroppedReference) -> String {
    d.repository
        .as_ref()
        .map(|r| r.to_string())
        .unwrap_or_default()
}

/// A limit of the reader that remains (a directive over 1024 bytes) is named as a limit, never
/// as invalid YAML.
#[test]
fn a_file_past_a_limit_of_the_reader_is_named_as_a_limit() {
    let src = format!(
        "%TAG !e! tag:example.com,2000:{}\n---\nimage: ghcr.io/a/app:1.0.0\n",
        "a".repeat(2000)
    );
    let err = scan(Path::new("values.yaml"), &src, &[]).unwrap_err();
    assert_eq!(err.label(), "over_limit", "{err}");
    assert!(
        err.to_string()
            .contains("exceeds tagpilot's limit of 1024 bytes in a directive"),
        "{err}"
    );
}

/// prometheus-blackbox-exporter's values choose the chart's workload with a top-level
/// `kind: Deployment`: without `apiVersion` they are values, and their images are read. A
/// Deployment (both keys) is read as a resource, its `image:` maps not as values.
#[test]
fn a_top_level_kind_without_api_version_is_helm_values() {
    let values = "kind: Deployment\nimage:\n  registry: quay.io\n  repository: prometheus/blackbox-exporter\n  tag: v0.25.0\n";
    let fields = scan_ok("values.yaml", values);
    assert_eq!(fields.len(), 1, "{fields:?}");
    assert_eq!(repo(&fields[0]), "quay.io/prometheus/blackbox-exporter");
    assert_eq!(fields[0].current(), (Some("v0.25.0"), None));
    let resource = format!("apiVersion: apps/v1\n{values}");
    assert!(scan_ok("values.yaml", &resource).is_empty());
}

/// ingress-nginx's `{registry, image, tag, digest}` and argo-cd's redis exporter's
/// `{image, tag}`: the name with its tag beside it is the image the chart runs at that tag,
/// not an implicit `latest`; the digest moves with the tag. A name carrying its own tag stays
/// a whole reference.
#[test]
fn a_helm_image_name_with_its_tag_beside_it_is_read_at_the_tag() {
    let src = format!(
        "controller:\n  image:\n    registry: registry.k8s.io\n    image: ingress-nginx/controller\n    tag: \"v1.15.1\"\n    digest: {D1}\nexporter:\n  image: ghcr.io/oliver006/redis_exporter\n  tag: v1.75.0\nwhole:\n  image: ghcr.io/a/b:1.0\n  tag: ignored\n"
    );
    let fields = scan_ok("values.yaml", &src);
    let got: Vec<_> = fields
        .iter()
        .map(|f| (repo(f), f.current(), f.line, f.implicit_latest()))
        .collect();
    assert_eq!(
        got,
        [
            (
                "registry.k8s.io/ingress-nginx/controller".to_string(),
                (Some("v1.15.1"), Some(D1)),
                5,
                false
            ),
            (
                "ghcr.io/oliver006/redis_exporter".to_string(),
                (Some("v1.75.0"), None),
                9,
                false
            ),
            ("ghcr.io/a/b".to_string(), (Some("1.0"), None), 11, false),
        ]
    );
    let update = Update {
        name: "registry.k8s.io/ingress-nginx/controller",
        tag: Some("v1.15.2"),
        digest: Some(D2),
    };
    let out = edit("values.yaml", &src, 0, &update);
    assert_eq!(out, src.replace("v1.15.1", "v1.15.2").replace(D1, D2));
    let out = retag("values.yaml", &src, 1, "v1.76.0");
    assert_eq!(out, src.replace("v1.75.0", "v1.76.0"));
}

/// ingress-nginx's controller: `digestChroot` pins the chroot variant's digest beside `digest`.
/// tagpilot cannot look that one up, so the reference is handed back with the reason, never
/// moved with the chroot digest left on the old image.
#[test]
fn a_second_digest_beside_the_tag_holds_the_reference_with_the_reason() {
    let src = format!(
        "controller:\n  image:\n    registry: registry.k8s.io\n    image: ingress-nginx/controller\n    tag: \"v1.15.1\"\n    digest: {D1}\n    digestChroot: {D2}\n"
    );
    let scanned = scanned(&src, &[]);
    assert!(scanned.fields.is_empty(), "{:?}", scanned.fields);
    assert_eq!(scanned.dropped.len(), 1);
    assert_eq!(scanned.dropped[0].line, 5);
    assert!(
        scanned.dropped[0]
            .reason
            .starts_with("`digestChroot` pins another digest"),
        "{}",
        scanned.dropped[0].reason
    );
    // An empty one pins nothing: the reference moves as before.
    let src = src.replace(&format!("digestChroot: {D2}"), "digestChroot: \"\"");
    assert_eq!(scanned_fields(&src), 1);
}

fn scanned_fields(src: &str) -> usize {
    scanned(src, &[]).fields.len()
}

/// A registry the values set for all of a chart's images (`global.image.registry`, as
/// ingress-nginx and Grafana write it; `global.imageRegistry`, as Bitnami does) is read
/// differently by each chart: as the registry of the images that name none, or over every
/// image's own. Where the two readings make different images, the reference is named against a
/// policy following either, never guessed; where they agree, it is read as before.
#[test]
fn a_global_registry_that_makes_another_image_is_named_not_guessed() {
    let src = "\
global:
  image:
    registry: registry.k8s.io
controller:
  image:
    image: ingress-nginx/controller
    tag: v1.15.1
defaultBackend:
  image:
    registry: registry.k8s.io
    image: defaultbackend-amd64
    tag: \"1.5\"
";
    let s = scanned(src, &[]);
    assert_eq!(
        images(&s.fields),
        [(
            "registry.k8s.io/defaultbackend-amd64".to_string(),
            Some("1.5"),
            false
        )]
    );
    let dropped: Vec<_> = s.dropped.iter().map(|d| (repo_of(d), d.line)).collect();
    assert_eq!(
        dropped,
        [
            (docker_hub("ingress-nginx/controller"), 6),
            ("registry.k8s.io/ingress-nginx/controller".to_string(), 6)
        ]
    );
    assert!(
        s.dropped[0].reason.starts_with(
            "no registry is named beside it and the values set \
             `global.image.registry: registry.k8s.io` (line 3)"
        ),
        "{}",
        s.dropped[0].reason
    );
    assert!(
        s.dropped[0]
            .reason
            .contains("`registry: global.image.registry`")
    );

    // The registry the policy's paths name is read as written: the user chose it.
    let paths = [HelmPaths {
        registry: Some("global.image.registry".into()),
        repository: Some("controller.image.image".into()),
        tag: Some("controller.image.tag".into()),
        ..Default::default()
    }];
    let s = scanned(src, &paths);
    assert!(
        s.fields
            .iter()
            .any(|f| repo(f) == "registry.k8s.io/ingress-nginx/controller"),
        "{:?}",
        images(&s.fields)
    );
}

/// Bitnami's `global.imageRegistry` over an image's own `registry`: named, with both; empty (as
/// Bitnami's charts ship it) it sets nothing, and a global registry that makes the same image
/// (tempo-distributed's `docker.io` over `registry: null`) changes nothing either.
#[test]
fn a_global_registry_is_named_only_where_it_makes_another_image() {
    let bitnami = |global: &str| {
        format!(
            "global:\n  imageRegistry: {global}\nimage:\n  registry: docker.io\n  \
             repository: bitnami/nginx\n  tag: 1.27.3\n"
        )
    };
    let s = scanned(&bitnami("\"\""), &[]);
    assert_eq!(
        images(&s.fields),
        [(docker_hub("bitnami/nginx"), Some("1.27.3"), false)]
    );
    assert!(s.dropped.is_empty(), "{:?}", s.dropped);

    let s = scanned(&bitnami("mirror.example.com"), &[]);
    assert!(s.fields.is_empty(), "{:?}", images(&s.fields));
    let repos: Vec<String> = s.dropped.iter().map(repo_of).collect();
    assert_eq!(
        repos,
        [
            "mirror.example.com/bitnami/nginx".to_string(),
            docker_hub("bitnami/nginx"),
        ]
    );
    assert!(
        s.dropped[0].reason.starts_with(
            "beside `registry: docker.io`, the values set \
             `global.imageRegistry: mirror.example.com` (line 2)"
        ),
        "{}",
        s.dropped[0].reason
    );

    let tempo = "global:\n  image:\n    registry: docker.io\ntempo:\n  image:\n    \
                 registry: null\n    repository: grafana/tempo\n    tag: 2.7.1\n";
    let s = scanned(tempo, &[]);
    assert_eq!(
        images(&s.fields),
        [(docker_hub("grafana/tempo"), Some("2.7.1"), false)]
    );
    assert!(s.dropped.is_empty(), "{:?}", s.dropped);
}
