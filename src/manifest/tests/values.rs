//! Kustomize `images:` entries and Helm values, conventional and explicit.

use super::*;

const KUSTOMIZATION: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
images:
  - name: ghcr.io/a/api
    newTag: 1.0.0 # pinned
  - name: app
    newName: 127.0.0.1:5000/shop/app
  - {name: ghcr.io/a/flow, newName: ghcr.io/a/flow2}
  - name: ghcr.io/a/pinned
    newTag: \"2.0.0\"
    digest: sha256:1111111111111111111111111111111111111111111111111111111111111111
  - name: ghcr.io/a/suffixed
    tagSuffix: CONTAINER_IMAGES_TAG_SUFFIX
  - name: ghcr.io/a/bare
  - {name: ghcr.io/a/digested, digest: sha256:1111111111111111111111111111111111111111111111111111111111111111}
";

#[test]
fn kustomize_entries() {
    let fields = scan_ok("base/kustomization.yaml", KUSTOMIZATION);
    let got: Vec<_> = fields
        .iter()
        .map(|f| (f.kind.clone(), repo(f), f.current(), f.line))
        .collect();
    let k = |n: &str| FieldKind::Kustomize { name: n.into() };
    assert_eq!(
        got,
        [
            (
                k("ghcr.io/a/api"),
                "ghcr.io/a/api".into(),
                (Some("1.0.0"), None),
                5
            ),
            // Entries with only `newName` or `tagSuffix` pin no version: fields never written
            // (the planner holds them at their line), the image being the one that runs.
            (k("app"), "127.0.0.1:5000/shop/app".into(), (None, None), 6),
            (
                k("ghcr.io/a/flow"),
                "ghcr.io/a/flow2".into(),
                (None, None),
                8
            ),
            (
                k("ghcr.io/a/pinned"),
                "ghcr.io/a/pinned".into(),
                (Some("2.0.0"), Some(D1)),
                10
            ),
            (
                k("ghcr.io/a/suffixed"),
                "ghcr.io/a/suffixed".into(),
                (None, None),
                12
            ),
            (
                k("ghcr.io/a/bare"),
                "ghcr.io/a/bare".into(),
                (None, None),
                14
            ),
            (
                k("ghcr.io/a/digested"),
                "ghcr.io/a/digested".into(),
                (None, Some(D1)),
                15
            ),
        ]
    );
    let pins: Vec<Pins> = fields.iter().map(ImageField::pins).collect();
    let both = Pins {
        tag: true,
        digest: true,
    };
    let tag_only = Pins {
        tag: true,
        digest: false,
    };
    let digest_only = Pins {
        tag: false,
        digest: true,
    };
    let neither = Pins {
        tag: false,
        digest: false,
    };
    assert_eq!(
        pins,
        [tag_only, neither, neither, both, neither, both, digest_only]
    );
    let instead: Vec<_> = fields.iter().map(ImageField::pins_nothing).collect();
    let (name, suffix) = (Some("only `newName`"), Some("only `tagSuffix`"));
    assert_eq!(instead, [None, name, name, None, suffix, None, None]);
    // The same content under another file name is not a kustomization.
    assert!(scan_ok("images.yaml", KUSTOMIZATION).is_empty());
    assert_eq!(scan_ok("Kustomization", KUSTOMIZATION).len(), 7);
}

#[test]
fn kustomize_edits_and_insertions() {
    let name = "kustomization.yaml";
    let out = retag(name, KUSTOMIZATION, 0, "1.1.0");
    assert_eq!(
        out,
        KUSTOMIZATION.replace("newTag: 1.0.0 # pinned", "newTag: 1.1.0 # pinned")
    );
    // Only an entry with nothing but its name gets keys added.
    let update = Update {
        name: "x",
        tag: Some("3.0.0"),
        digest: Some(D2),
    };
    let out = edit(name, KUSTOMIZATION, 5, &update);
    assert_eq!(
        out,
        KUSTOMIZATION.replace(
            "  - name: ghcr.io/a/bare\n",
            &format!("  - name: ghcr.io/a/bare\n    newTag: 3.0.0\n    digest: {D2}\n")
        )
    );
    // A digest-only entry gets its digest, never a `newTag`; a tag-only one its tag, never a
    // digest.
    let out = edit(name, KUSTOMIZATION, 6, &update);
    assert_eq!(
        out,
        KUSTOMIZATION.replace(
            &format!("digested, digest: {D1}}}"),
            &format!("digested, digest: {D2}}}")
        )
    );
    let out = edit(name, KUSTOMIZATION, 0, &update);
    assert_eq!(
        out,
        KUSTOMIZATION.replace("newTag: 1.0.0 # pinned", "newTag: 3.0.0 # pinned")
    );
    // Dropping a digest empties it rather than leave a stale pin.
    let out = retag(name, KUSTOMIZATION, 3, "2.1.0");
    assert_eq!(
        out,
        KUSTOMIZATION.replace("\"2.0.0\"", "\"2.1.0\"").replacen(
            &format!("digest: {D1}"),
            "digest: \"\"",
            1
        )
    );
}

#[test]
fn kustomize_insertion_after_a_comment_with_crlf_and_at_end_of_file() {
    let src = "images:\r\n- name: ghcr.io/a/api # the api\r\n- name: ghcr.io/a/web";
    let out = retag("kustomization.yml", src, 0, "1.0.0");
    assert_eq!(
        out,
        "images:\r\n- name: ghcr.io/a/api # the api\r\n  newTag: 1.0.0\r\n- name: ghcr.io/a/web"
    );
    let out = retag("kustomization.yml", src, 1, "1.0.0");
    assert_eq!(out, format!("{src}\r\n  newTag: 1.0.0"));
}

const VALUES: &str = "\
# podinfo-ish values
replicaCount: 1
image:
  repository: ghcr.io/stefanprodan/podinfo
  tag: 6.14.1
  pullPolicy: IfNotPresent
redis:
  image:
    registry: docker.io
    repository: bitnami/redis
    tag: '7.2'
    digest: \"\"
sidecars:
  - name: proxy
    image: envoyproxy/envoy:v1.29.0
worker: {image: {repository: ghcr.io/a/worker}}
notAnImage:
  image: \"{{ .Values.x }}\"
";

#[test]
fn helm_conventional_shapes() {
    let fields = scan_ok("values.yaml", VALUES);
    let got: Vec<_> = fields
        .iter()
        .map(|f| (f.kind.clone(), repo(f), f.current(), f.line))
        .collect();
    let h = |p: &str| FieldKind::HelmValues { path: p.into() };
    assert_eq!(
        got,
        [
            (
                h("image"),
                "ghcr.io/stefanprodan/podinfo".into(),
                (Some("6.14.1"), None),
                5
            ),
            (
                h("redis.image"),
                "registry-1.docker.io/bitnami/redis".into(),
                (Some("7.2"), None),
                11
            ),
            (
                h("sidecars[0].image"),
                "registry-1.docker.io/envoyproxy/envoy".into(),
                (Some("v1.29.0"), None),
                15
            ),
            (
                h("worker.image"),
                "ghcr.io/a/worker".into(),
                (None, None),
                16
            ),
        ]
    );
    let out = retag("values.yaml", VALUES, 0, "6.15");
    assert_eq!(out, VALUES.replace("tag: 6.14.1", "tag: \"6.15\""));
    let out = edit(
        "values.yaml",
        VALUES,
        1,
        &Update {
            name: "x",
            tag: Some("7.4"),
            digest: Some(D1),
        },
    );
    assert_eq!(
        out,
        VALUES
            .replace("'7.2'", "'7.4'")
            .replace("digest: \"\"", &format!("digest: \"{D1}\""))
    );
    let out = retag("values.yaml", VALUES, 2, "v1.30.0");
    assert_eq!(out, VALUES.replace("envoy:v1.29.0", "envoy:v1.30.0"));
    let out = retag("values.yaml", VALUES, 3, "1.0.0");
    assert_eq!(
        out,
        VALUES.replace("ghcr.io/a/worker}}", "ghcr.io/a/worker, tag: 1.0.0}}")
    );
    // A document with apiVersion/kind is not Helm values.
    assert!(scan_ok("v.yaml", &format!("apiVersion: v1\nkind: X\n{VALUES}")).is_empty());
}

#[test]
fn missing_keys_are_added_after_their_siblings() {
    let src = "image:\n  repository: ghcr.io/a/x # repo\n  tag: 1.0.0\n  pullSecrets: []\n";
    let update = Update {
        name: "ghcr.io/a/x",
        tag: Some("1.0.0"),
        digest: Some(D1),
    };
    let out = edit("values.yaml", src, 0, &update);
    assert_eq!(
        out,
        src.replace("tag: 1.0.0\n", &format!("tag: 1.0.0\n  digest: {D1}\n"))
    );
    let src = "image:\n  repository: ghcr.io/a/x\n  pullSecrets: []\n";
    let out = edit("values.yaml", src, 0, &update);
    let want = format!(
        "image:\n  repository: ghcr.io/a/x\n  tag: 1.0.0\n  digest: {D1}\n  pullSecrets: []\n"
    );
    assert_eq!(out, want);
}

#[test]
fn helm_explicit_paths() {
    let src = "app:\n  images:\n    - repo: ghcr.io/a/one\n      version: 1.0.0\n    - repo: ghcr.io/a/two\nfull: ghcr.io/a/three:3.0.0\n";
    let paths = [
        HelmPaths {
            repository: Some("app.images[1].repo".into()),
            tag: Some("app.images[1].version".into()),
            ..Default::default()
        },
        HelmPaths {
            repository: Some("app.images[0].repo".into()),
            tag: Some("app.images[0].version".into()),
            ..Default::default()
        },
        HelmPaths {
            image: Some("full".into()),
            ..Default::default()
        },
    ];
    let fields = scan(Path::new("values-prod.yaml"), src, &paths).unwrap();
    let got: Vec<_> = fields
        .iter()
        .map(|f| (f.kind.clone(), repo(f), f.current()))
        .collect();
    let h = |p: &str| FieldKind::HelmValues { path: p.into() };
    assert_eq!(
        got,
        [
            (
                h("app.images[0].repo"),
                "ghcr.io/a/one".into(),
                (Some("1.0.0"), None)
            ),
            (
                h("app.images[1].repo"),
                "ghcr.io/a/two".into(),
                (None, None)
            ),
            (h("full"), "ghcr.io/a/three".into(), (Some("3.0.0"), None)),
        ]
    );
    let f = &fields[1];
    let out = apply_edits(Path::new("v.yaml"), src, &f.edits(&tag("2.0.0")).unwrap()).unwrap();
    assert_eq!(
        out,
        src.replace(
            "repo: ghcr.io/a/two\n",
            "repo: ghcr.io/a/two\n      version: 2.0.0\n"
        )
    );
    // Explicit paths win over the conventional reading of the same scalar.
    let src = "image:\n  repository: ghcr.io/a/x\n  tag: 1.0.0\n";
    let paths = [HelmPaths {
        repository: Some("image.repository".into()),
        tag: Some("image.tag".into()),
        ..Default::default()
    }];
    let fields = scan(Path::new("values.yaml"), src, &paths).unwrap();
    assert_eq!(fields.len(), 1);
    assert_eq!(fields[0].kind, h("image.repository"));
}

#[test]
fn a_marker_on_a_placeholder_keeps_the_kustomize_entry_from_being_a_field() {
    // Editing the entry would make the placeholder a valid reference, and the marker would take
    // the scalar over: the field would change kind between two runs.
    let src = "images:\n- name: ghcr.io/a/api\n  newTag: CONTAINER_IMAGES_TAG # {\"$imagepolicy\": \"flux-system:api\"}\n";
    assert!(scan_ok("kustomization.yaml", src).is_empty());
}

#[test]
fn a_marker_on_the_resource_s_own_name_is_named_and_never_written() {
    // `currencyservice` reads as docker.io's image: written, the Deployment would be renamed.
    let src = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: currencyservice # {\"$imagepolicy\": \"flux-system:api\"}\nspec:\n  template:\n    spec:\n      containers:\n        - name: server\n          image: ghcr.io/a/api:1.0 # {\"$imagepolicy\": \"flux-system:api\"}\n";
    let scanned =
        crate::manifest::scan_with_markers(Path::new("deployment.yaml"), src, &[]).unwrap();
    assert_eq!(scanned.fields.len(), 1, "{:?}", scanned.fields);
    assert_eq!(scanned.fields[0].line, 10);
    assert_eq!(scanned.unresolved.len(), 1);
    assert_eq!(scanned.unresolved[0].line, 4);
    assert!(
        scanned.unresolved[0].reason.contains("would rename it"),
        "{:?}",
        scanned.unresolved[0]
    );
}
