//! Version labels through a whole cycle where the golden `rewrite` cases do not reach: an
//! Argo CD Application's images, which take `tagpilot.yaml`'s `versionLabels` (an Application
//! cannot set its own), committed with the image to a real git repository.

use tagpilot::config;
use tagpilot::git::RepoCache;
use tagpilot::registry::MemoryRegistry;

use crate::argocd::{directory_app, repo_with};
use crate::support::engine::cycle;

const DEPLOYMENT: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: api
  labels:
    app.kubernetes.io/version: \"1.0.0\"
    example.com/release: \"1.0.0\"
spec:
  selector:
    matchLabels: {app: api}
  template:
    metadata:
      labels: {app: api, version: 1.0.0}
    spec:
      containers:
        - name: api
          image: registry.example/shop/api:1.0.0
";

/// Runs one cycle (applying) over an Application on `DEPLOYMENT` with `version_labels` as
/// `tagpilot.yaml`'s, and returns the Deployment as committed and the cycle's label warnings.
async fn applied(version_labels: &str) -> (String, usize) {
    let repo = repo_with(&[
        (
            "argocd/shop.yaml".into(),
            directory_app("shop", "api=registry.example/shop/api", ""),
        ),
        ("apps/shop/api.yaml".into(), DEPLOYMENT.into()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "repositories:\n  - name: manifests\n    url: {}\n    branch: main\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/*.yaml\"]\n{version_labels}",
            repo.file_url()
        ),
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let run = cycle(&config, None, &cache, &registry, &(), false).await;
    for r in &run.repositories {
        assert!(r.error.is_none(), "{}: {:?}", r.repository, r.error);
    }
    assert_eq!(run.plan.changes.len(), 1, "{:?}", run.plan.changes);
    let warnings = run
        .plan
        .findings
        .iter()
        .filter(|f| f.kind == tagpilot::plan::FindingKind::VersionLabelLeft)
        .count();
    (repo.show("main", "apps/shop/api.yaml"), warnings)
}

#[tokio::test]
async fn an_applications_image_moves_its_version_labels_as_tagpilot_yaml_says() {
    // The defaults: the standard label and the Pod's `version` follow; a key outside them
    // does not.
    let (text, warnings) = applied("").await;
    assert_eq!(
        text,
        DEPLOYMENT
            .replace("version: \"1.0.0\"", "version: \"1.1.0\"")
            .replace("version: 1.0.0}", "version: 1.1.0}")
            .replace("api:1.0.0", "api:1.1.0")
    );
    assert_eq!(warnings, 0);

    // tagpilot.yaml's keys count for the Application's policy.
    let (text, _) =
        applied("versionLabels:\n  keys: [example.com/release]\n  podLabels: []\n").await;
    assert_eq!(
        text,
        DEPLOYMENT
            .replace("release: \"1.0.0\"", "release: \"1.1.0\"")
            .replace("api:1.0.0", "api:1.1.0")
    );

    // Off: only the image moves.
    let (text, _) = applied("versionLabels: false\n").await;
    assert_eq!(text, DEPLOYMENT.replace("api:1.0.0", "api:1.1.0"));
}
