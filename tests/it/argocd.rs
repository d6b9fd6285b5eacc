//! Argo CD Applications end to end through the library: Application manifests in a test git
//! repository (file:// bare repository), the in-memory registry, the real git writer.
//! The golden case lives in `tests/golden-argocd/` (set `TAGPILOT_BLESS=1` to rewrite
//! `plan.txt` and `out/` after a deliberate change).

use std::path::{Path, PathBuf};

use tagpilot::argocd;
use tagpilot::config;
use tagpilot::git::{RepoCache, WriteOptions};
use tagpilot::registry::MemoryRegistry;

use crate::support::git::{BareRepo, git};

const GOLDEN: &str = "tests/golden-argocd";

fn golden() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(GOLDEN)
}

/// Every file under `dir`, relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(dir)
        .sort_by_file_name()
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            e.path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    out.sort();
    out
}

/// Pushes the files of `tree` (with `REPO_URL` replaced) to `main` in one commit.
fn push_tree(repo: &BareRepo, tree: &Path, extra: &[(&str, String)]) {
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &[
            "clone",
            "-q",
            "-b",
            "main",
            repo.path().to_str().unwrap(),
            "w",
        ],
    );
    let w = work.path().join("w");
    let mut all: Vec<(String, String)> = files(tree)
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(tree.join(&f)).unwrap();
            (f, text.replace("REPO_URL", &repo.file_url()))
        })
        .collect();
    all.extend(extra.iter().map(|(f, t)| (f.to_string(), t.clone())));
    for (f, text) in all {
        let p = w.join(&f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(&w, &["add", "."]);
    git(&w, &["commit", "-q", "-m", "seed"]);
    git(&w, &["push", "-q", "origin", "main"]);
}

fn tagpilot_yaml(dir: &Path, repo: &BareRepo, paths: &str) -> config::Config {
    let text = format!(
        "repositories:\n  - name: manifests\n    url: {}\n    branch: main\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [{paths}]\n",
        repo.file_url()
    );
    let path = dir.join("tagpilot.yaml");
    std::fs::write(&path, text).unwrap();
    config::load(&path).unwrap()
}

async fn run(
    config: &config::Config,
    dir: &Path,
    registry: &MemoryRegistry,
    dry_run: bool,
) -> argocd::Run {
    let cache = RepoCache::new(dir.join("cache"));
    argocd::run(config, &cache, registry, &(), WriteOptions { dry_run })
        .await
        .expect("argocd run")
}

fn bless() -> bool {
    std::env::var_os("TAGPILOT_BLESS").is_some()
}

#[tokio::test]
async fn golden_applications_plan_then_apply_in_one_commit() {
    let repo = BareRepo::new();
    push_tree(&repo, &golden().join("in"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/**\"");
    let registry = MemoryRegistry::from_yaml(
        &std::fs::read_to_string(golden().join("registry.yaml")).unwrap(),
    )
    .unwrap();
    let before = repo.rev("main").unwrap();

    let planned = run(&config, dir.path(), &registry, true).await;
    assert_eq!(repo.rev("main").unwrap(), before, "plan pushed something");
    let text = argocd::report::text(&planned.applications).replace(&repo.file_url(), "REPO_URL");
    let expected_path = golden().join("plan.txt");
    if bless() {
        std::fs::write(&expected_path, &text).unwrap();
    }
    pretty_assertions::assert_eq!(text, std::fs::read_to_string(&expected_path).unwrap());

    let applied = run(&config, dir.path(), &registry, false).await;
    for r in &applied.repositories {
        assert!(r.result.is_ok(), "{}: {:?}", r.repository, r.result);
    }
    let subjects = repo.subjects("main");
    assert_eq!(
        repo.rev("main~1").as_deref(),
        Some(before.as_str()),
        "one commit for every app on the repository: {subjects:?}"
    );
    // Exactly the files in `out/` changed (or were created), with exactly that content.
    let out = golden().join("out");
    let changed: Vec<String> = git(&repo.path(), &["diff", "--name-only", "main~1", "main"])
        .lines()
        .map(str::to_owned)
        .collect();
    if bless() {
        let _ = std::fs::remove_dir_all(&out);
        for f in &changed {
            let p = out.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, repo.show("main", f)).unwrap();
        }
    }
    assert_eq!(changed, files(&out));
    for f in &changed {
        pretty_assertions::assert_eq!(
            repo.show("main", f),
            std::fs::read_to_string(out.join(f)).unwrap(),
            "{f}"
        );
    }
    // A second run finds nothing left to do.
    let again = run(&config, dir.path(), &registry, false).await;
    assert!(again.plan.changes.is_empty(), "{:?}", again.plan.changes);
}

#[tokio::test]
async fn five_apps_on_one_repository_make_one_commit_and_one_tag_listing() {
    let repo = BareRepo::new();
    let mut tree = Vec::new();
    for n in 1..=5 {
        tree.push((
            format!("argocd/app{n}.yaml"),
            format!(
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: app{n}\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: registry.example/shop/api:1.x\n    argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  source: {{repoURL: {}, path: apps/app{n}, directory: {{}}}}\n",
                repo.file_url()
            ),
        ));
        tree.push((
            format!("apps/app{n}/deployment.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: registry.example/shop/api:1.0.0\n".to_string(),
        ));
    }
    let extra: Vec<(&str, String)> = tree.iter().map(|(f, t)| (f.as_str(), t.clone())).collect();
    let empty = tempfile::tempdir().unwrap();
    push_tree(&repo, empty.path(), &extra);
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\", \"2.0.0\"]}\n",
    )
    .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert_eq!(applied.repositories.len(), 1);
    assert!(applied.repositories[0].result.is_ok());
    assert_eq!(applied.plan.changes.len(), 5, "{:?}", applied.plan.changes);
    assert_eq!(
        registry.tag_list_calls(),
        1,
        "one listing for the shared image"
    );
    assert_eq!(
        repo.rev("main~1").as_deref(),
        Some(before.as_str()),
        "one commit"
    );
    for n in 1..=5 {
        assert!(
            repo.show("main", &format!("apps/app{n}/deployment.yaml"))
                .contains("api:1.1.0")
        );
    }
}
