//! Argo CD Applications end to end through the library: Application manifests in a test git
//! repository (file:// bare repository), the in-memory registry, the real git writer.
//! The golden case lives in `tests/golden/argocd/applications/` (set `TAGPILOT_BLESS=1` to
//! rewrite `plan.txt`, `plan.md`, `plan.diff` and `out/` after a deliberate change).

use std::path::{Path, PathBuf};

use tagpilot::config;
use tagpilot::engine::Cycle;
use tagpilot::git::RepoCache;
use tagpilot::plan::RepositoryStatus;
use tagpilot::registry::MemoryRegistry;

use crate::golden::{self, bless};
use crate::support::engine::{cycle, cycle_with};
use crate::support::git::{BareRepo, git};

fn golden() -> PathBuf {
    golden::case_dir("argocd", "applications")
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
) -> Cycle {
    let cache = RepoCache::new(dir.join("cache"));
    cycle(config, None, &cache, registry, &(), dry_run).await
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
    let text = tagpilot::report::applications::text(planned.applications.as_deref().unwrap())
        .replace(&repo.file_url(), "REPO_URL");
    golden::assert_text(&golden().join("plan.txt"), &text);
    let markdown =
        tagpilot::report::applications_markdown(planned.applications.as_deref().unwrap())
            .replace(&repo.file_url(), "REPO_URL");
    golden::assert_text(&golden().join("plan.md"), &markdown);

    let applied = run(&config, dir.path(), &registry, false).await;
    for r in &applied.repositories {
        assert!(r.error.is_none(), "{}: {:?}", r.repository, r.error);
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

/// `plan --diff` over the golden case's repository: every file its commit would change, in
/// place (Directory manifests, Helm values, a kustomization) and `.argocd-source-<app>.yaml`
/// files it creates, as `tests/golden/argocd/applications/plan.diff` states. Applied to a
/// checkout of the base, the diff gives exactly the files `apply` then commits.
#[tokio::test]
async fn golden_applications_plan_diff_is_what_apply_commits() {
    let repo = BareRepo::new();
    push_tree(&repo, &golden().join("in"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/**\"");
    let registry = MemoryRegistry::from_yaml(
        &std::fs::read_to_string(golden().join("registry.yaml")).unwrap(),
    )
    .unwrap();
    let before = repo.rev("main").unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let options = tagpilot::engine::Options {
        dry_run: true,
        diff: true,
        ..Default::default()
    };
    let planned = cycle_with(&config, None, &cache, &registry, &(), options).await;
    // As `tagpilot plan` shows it: the plan's `files` are the local directory's (none here).
    let shown = tagpilot::plan::Plan {
        files: planned.local_files,
        ..planned.plan
    };
    let diff = tagpilot::report::diff(&shown);
    golden::assert_text(&golden().join("plan.diff"), &diff);
    assert!(
        diff.contains("--- /dev/null\n+++ b/apps/overlay/.argocd-source-team-a_overlay.yaml\n"),
        "{diff}"
    );

    let applied = run(&config, dir.path(), &registry, false).await;
    for r in &applied.repositories {
        assert!(r.error.is_none(), "{}: {:?}", r.repository, r.error);
    }
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
    git(&w, &["checkout", "-q", &before]);
    std::fs::write(work.path().join("plan.diff"), &diff).unwrap();
    git(
        &w,
        &["apply", work.path().join("plan.diff").to_str().unwrap()],
    );
    let changed = git(&repo.path(), &["diff", "--name-only", &before, "main"]);
    assert!(!changed.is_empty());
    for f in changed.lines() {
        pretty_assertions::assert_eq!(
            std::fs::read_to_string(w.join(f)).unwrap(),
            repo.show("main", f),
            "{f}"
        );
    }
}

/// The Applications of the `applications` golden case, configured by `ImageUpdater` resources
/// instead of annotations (`tests/golden/argocd/image-updater/`): name patterns, a label
/// selector, per-image settings, Helm and kustomize targets, a field not honoured, and git
/// write-back to a branch of its own. The same files change in the same way.
#[tokio::test]
async fn image_updater_resources_give_the_same_updates_as_the_annotations() {
    let case = golden::case_dir("argocd", "image-updater");
    let registry =
        MemoryRegistry::from_yaml(&std::fs::read_to_string(case.join("registry.yaml")).unwrap())
            .unwrap();

    // Once from annotations, to main ...
    let annotated = BareRepo::new();
    push_tree(&annotated, &golden().join("in"), &[]);
    let dir_a = tempfile::tempdir().unwrap();
    let config_a = tagpilot_yaml(dir_a.path(), &annotated, "\"argocd/**\"");
    let by_annotations = run(&config_a, dir_a.path(), &registry, false).await;

    // ... once from resources, to the branch `image-updates` they name.
    let repo = BareRepo::new();
    push_tree(&repo, &case.join("in"), &[]);
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/**\"");
    let planned = run(&config, dir.path(), &registry, true).await;
    let text = tagpilot::report::applications::text(planned.applications.as_deref().unwrap())
        .replace(&repo.file_url(), "REPO_URL");
    golden::assert_text(&case.join("plan.txt"), &text);
    assert!(
        planned.plan.problems.is_empty(),
        "{:?}",
        planned.plan.problems
    );
    let by_resources = run(&config, dir.path(), &registry, false).await;
    for r in &by_resources.repositories {
        assert!(r.error.is_none(), "{}: {:?}", r.repository, r.error);
    }
    assert_eq!(repo.rev("main").unwrap(), before, "main is left alone");
    assert_eq!(
        repo.rev("image-updates~1").as_deref(),
        Some(before.as_str()),
        "one commit on the branch for every app"
    );

    // The same plan: every change the same file, from the same value to the same value.
    let changes = |c: &Cycle| {
        let mut v: Vec<(String, String, String)> = c
            .plan
            .changes
            .iter()
            .map(|c| (c.file.clone(), c.from.clone(), c.to.clone()))
            .collect();
        v.sort();
        v
    };
    assert!(!changes(&by_annotations).is_empty());
    pretty_assertions::assert_eq!(changes(&by_resources), changes(&by_annotations));
    // And the same files written, byte for byte.
    let changed = |r: &BareRepo, branch: &str| -> Vec<(String, String)> {
        git(&r.path(), &["diff", "--name-only", "main~1", branch])
            .lines()
            .map(|f| (f.to_string(), r.show(branch, f)))
            .collect()
    };
    let annotated_files = changed(&annotated, "main");
    let resource_files: Vec<(String, String)> = git(
        &repo.path(),
        &["diff", "--name-only", "main", "image-updates"],
    )
    .lines()
    .map(|f| (f.to_string(), repo.show("image-updates", f)))
    .collect();
    pretty_assertions::assert_eq!(resource_files, annotated_files);
}

/// `tagpilot migrate-annotations` prints resources that, in place of the annotations, update
/// the same files to the same content.
#[tokio::test]
async fn migrated_annotations_update_the_same_files() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tagpilot"))
        .arg("migrate-annotations")
        .arg(golden().join("in/argocd"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resources = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        resources.matches("kind: ImageUpdater").count(),
        5,
        "{resources}"
    );

    // The same Applications without annotations, and the printed resources.
    let repo = BareRepo::new();
    push_tree(
        &repo,
        &golden::case_dir("argocd", "image-updater").join("in"),
        &[("argocd/image-updaters.yaml", resources)],
    );
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/**\"");
    let registry = MemoryRegistry::from_yaml(
        &std::fs::read_to_string(golden().join("registry.yaml")).unwrap(),
    )
    .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert!(
        applied.plan.problems.is_empty(),
        "{:?}",
        applied.plan.problems
    );
    let changed: Vec<String> = git(&repo.path(), &["diff", "--name-only", "main~1", "main"])
        .lines()
        .map(str::to_owned)
        .collect();
    let expected = golden().join("out");
    assert_eq!(changed, files(&expected));
    for f in &changed {
        pretty_assertions::assert_eq!(
            repo.show("main", f),
            std::fs::read_to_string(expected.join(f)).unwrap(),
            "{f}"
        );
    }
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
    assert!(applied.repositories[0].error.is_none());
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

/// A repository whose Applications are the given `(path, content)` files, pushed to `main`.
pub(crate) fn repo_with(files: &[(String, String)]) -> BareRepo {
    let repo = BareRepo::new();
    let extra: Vec<(&str, String)> = files
        .iter()
        .map(|(f, t)| (f.as_str(), t.replace("REPO_URL", &repo.file_url())))
        .collect();
    let empty = tempfile::tempdir().unwrap();
    push_tree(&repo, empty.path(), &extra);
    repo
}

pub(crate) fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n        - name: x\n          image: {image}\n"
    )
}

/// A Directory app on `apps/<name>` with these extra annotation lines.
pub(crate) fn directory_app(name: &str, image_list: &str, extra: &str) -> String {
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: {image_list}\n    argocd-image-updater.argoproj.io/write-back-method: git\n{extra}spec:\n  source: {{repoURL: REPO_URL, path: apps/{name}, directory: {{}}}}\n"
    )
}

pub(crate) fn hex_sha256(text: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn status(run: &Cycle, repository: &str) -> (String, RepositoryStatus) {
    let r = run
        .repositories
        .iter()
        .find(|r| r.repository.starts_with(repository))
        .unwrap_or_else(|| {
            let names: Vec<&str> = run
                .repositories
                .iter()
                .map(|r| r.repository.as_str())
                .collect();
            panic!(
                "no report for {repository} in {names:?}; problems {:?}",
                run.plan.problems
            )
        });
    assert!(r.error.is_none(), "write-back failed: {:?}", r.error);
    (r.branch.clone(), r.status)
}

#[tokio::test]
async fn git_branch_templates_name_the_branch_after_the_changes() {
    let branch_key = "    argocd-image-updater.argoproj.io/git-branch: ";
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app(
                "web",
                "api=registry.example/shop/api",
                &format!("{branch_key}\"main:image-updater-{{{{.SHA256}}}}\"\n"),
            ),
        ),
        (
            "argocd/jobs.yaml".into(),
            directory_app(
                "jobs",
                "worker=registry.example/shop/worker",
                &format!(
                    "{branch_key}\":jobs{{{{.AppName}}}}{{{{range .Images}}}}-{{{{.Alias}}}}-{{{{.NewTag}}}}{{{{end}}}}\"\n"
                ),
            ),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/jobs/deployment.yaml".into(),
            deployment("registry.example/shop/worker:3.0.0"),
        ),
    ]);
    let main = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = |api: &str| {
        MemoryRegistry::from_yaml(&format!(
            "registry.example/shop/api: {{tags: [\"1.0.0\", {api}]}}\nregistry.example/shop/worker: {{tags: [\"3.0.0\", \"3.1.0\"]}}\n"
        ))
        .unwrap()
    };
    let first = format!(
        "image-updater-{}",
        // Image Updater hashes the image name without its registry host.
        hex_sha256("shop/api-1.0.0-1.1.0,")
    );

    let applied = run(&config, dir.path(), &registry("\"1.1.0\""), false).await;
    assert!(
        applied.plan.problems.is_empty(),
        "{:?}",
        applied.plan.problems
    );
    let (branch, pushed) = status(&applied, "manifests@main:image-updater-");
    assert_eq!(branch, first);
    assert_eq!(pushed, RepositoryStatus::Pushed);
    assert!(
        repo.show(&first, "apps/web/deployment.yaml")
            .contains("api:1.1.0")
    );
    assert_eq!(
        status(&applied, "manifests@main:jobs").0,
        "jobs-worker-3.1.0"
    );
    assert!(
        repo.show("jobs-worker-3.1.0", "apps/jobs/deployment.yaml")
            .contains("worker:3.1.0")
    );
    assert_eq!(repo.rev("main").unwrap(), main, "the base is never written");

    // Nothing new: the same name, and nothing pushed.
    let tip = repo.rev(&first).unwrap();
    let again = run(&config, dir.path(), &registry("\"1.1.0\""), false).await;
    assert_eq!(
        status(&again, "manifests@main:image-updater-"),
        (first.clone(), RepositoryStatus::UpToDate)
    );
    assert_eq!(repo.rev(&first).unwrap(), tip);

    // Another set of updates goes to another branch; the first is left as it was.
    let newer = run(
        &config,
        dir.path(),
        &registry("\"1.1.0\", \"1.2.0\""),
        false,
    )
    .await;
    let second = format!("image-updater-{}", hex_sha256("shop/api-1.0.0-1.2.0,"));
    assert_eq!(status(&newer, "manifests@main:image-updater-").0, second);
    assert!(
        repo.show(&second, "apps/web/deployment.yaml")
            .contains("api:1.2.0")
    );
    assert_eq!(repo.rev(&first).unwrap(), tip);
}

#[tokio::test]
async fn an_unknown_git_branch_field_is_refused_and_nothing_is_written() {
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app(
                "web",
                "registry.example/shop/api",
                "    tagpilot.dev/git-branch: \"main:updates-{{.Commit}}\"\n",
            ),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
    ]);
    let main = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert!(applied.repositories.is_empty());
    let problems: Vec<String> = applied
        .plan
        .problems
        .iter()
        .map(|p| p.reason.to_string())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("tagpilot.dev/git-branch") && p.contains("nothing is written")),
        "{problems:?}"
    );
    let skipped = &applied.applications.as_ref().unwrap()[0].skipped_annotations;
    assert!(
        skipped
            .iter()
            .any(|s| s.key == "tagpilot.dev/git-branch"
                && s.reason.contains("unknown field .Commit")),
        "{skipped:?}"
    );
    assert_eq!(repo.rev("main").unwrap(), main);
}

/// Counts the planner's walks of a checkout (its "scanning manifests" phase).
#[derive(Default)]
pub(crate) struct Scans(pub(crate) std::sync::atomic::AtomicUsize);

impl tagpilot::plan::Progress for Scans {
    fn phase(&self, name: &str, _total: u64) {
        if name == "scanning manifests" {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn a_repository_s_apps_are_planned_in_one_walk_with_each_image_reported() {
    let repo = repo_with(&[
        (
            "argocd/shop.yaml".into(),
            directory_app(
                "shop",
                "api=registry.example/shop/api, web=registry.example/shop/web",
                "",
            ),
        ),
        (
            "argocd/jobs.yaml".into(),
            directory_app("jobs", "worker=registry.example/shop/worker", ""),
        ),
        (
            "argocd/lost.yaml".into(),
            directory_app("lost", "cron=registry.example/shop/cron", ""),
        ),
        (
            "apps/shop/api.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/shop/web.yaml".into(),
            deployment("registry.example/shop/web:2.0.0"),
        ),
        (
            "apps/jobs/worker.yaml".into(),
            deployment("registry.example/shop/worker:3.0.0"),
        ),
        (
            "apps/lost/readme.yaml".into(),
            "note: nothing here\n".into(),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/web: {tags: [\"2.0.0\"]}\nregistry.example/shop/worker: {tags: [\"3.0.0\", \"3.1.0\"]}\nregistry.example/shop/cron: {tags: [\"1.0.0\"]}\n",
    )
    .unwrap();
    let scans = Scans::default();
    let cache = RepoCache::new(dir.path().join("cache"));
    let planned = cycle(&config, None, &cache, &registry, &scans, true).await;
    assert_eq!(
        scans.0.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "four images of three apps, one walk of the checkout"
    );
    let statuses: Vec<(String, String)> = planned
        .applications
        .iter()
        .flatten()
        .flat_map(|a| a.images.iter())
        .map(|i| (i.alias.clone(), i.status.to_string()))
        .collect();
    let s = |a: &str, st: &str| (a.to_string(), st.to_string());
    assert_eq!(
        statuses,
        vec![
            s("worker", "update"),
            s("cron", "not found"),
            s("api", "update"),
            s("web", "up to date"),
        ]
    );
    assert_eq!(planned.plan.changes.len(), 2, "{:?}", planned.plan.changes);
    // The image not found is a named finding, a warning, saying what was searched; the
    // Applications' in-place walk adds no policy finding of its own.
    let findings = &planned.plan.findings;
    assert_eq!(findings.len(), 1, "{findings:?}");
    let f = &findings[0];
    assert_eq!(
        f.kind,
        tagpilot::plan::FindingKind::ApplicationImageNotFound
    );
    assert_eq!(f.severity, tagpilot::plan::Severity::Warning);
    assert_eq!(f.application.as_deref(), Some("lost"));
    assert_eq!(f.image, "registry.example/shop/cron");
    assert!(
        f.searched.starts_with("source 1 (directory) at ")
            && f.searched.contains(
                ":apps/lost (no reference to registry.example/shop/cron in apps/lost/readme.yaml)"
            ),
        "{}",
        f.searched
    );
    assert!(!planned.plan.has_problems(), "{:?}", planned.plan.problems);
}

// === the `argocd-iu` golden suite ===

/// One case of `tests/golden/argocd-iu/`: Applications configured as teams configure Image
/// Updater, each expected to give exactly what Image Updater commits (each case's `README.md`
/// cites the Image Updater code or test it comes from). A case holds `in/` (pushed to `main` of
/// a fresh repository, `REPO_URL` replaced), `registry.yaml`, `plan.txt` (the Applications
/// section, then every problem and repository error of the plan), `out/` (every file the write
/// changes, with its content), and optionally `paths.txt` (the `applications.fromGit` paths),
/// `branches.txt` (branches that exist before, at `main`, one per line) and `branch.txt` (the
/// branch the write must land on; default `main`). A second cycle must find nothing to do.
async fn run_iu_case(case: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let read = |name: &str| std::fs::read_to_string(case.join(name)).ok();
    let repo = BareRepo::new();
    push_tree(&repo, &case.join("in"), &[]);
    for b in read("branches.txt").unwrap_or_default().lines() {
        git(&repo.path(), &["branch", b.trim(), "main"]);
    }
    let dir = tempfile::tempdir().unwrap();
    let paths = read("paths.txt").unwrap_or_else(|| "\"argocd/**\"".into());
    let config = tagpilot_yaml(dir.path(), &repo, paths.trim());
    let registry = MemoryRegistry::from_yaml(&read("registry.yaml").unwrap_or_default()).unwrap();
    let before = repo.rev("main").unwrap();
    let branches_before = git(
        &repo.path(),
        &["branch", "--list", "--format=%(refname:short)"],
    );

    let planned = run(&config, dir.path(), &registry, true).await;
    let mut text = planned
        .applications
        .as_deref()
        .map(tagpilot::report::applications::text)
        .unwrap_or_default();
    for p in &planned.plan.problems {
        text.push_str(&format!(
            "problem: {}{}\n",
            p.file
                .as_deref()
                .map(|f| format!("{f}: "))
                .unwrap_or_default(),
            p.reason
        ));
    }
    for r in &planned.repositories {
        if let Some(e) = &r.error {
            text.push_str(&format!("repository {}: {e}\n", r.repository));
        }
    }
    failures.extend(golden::check_text(
        &case.join("plan.txt"),
        &text.replace(&repo.file_url(), "REPO_URL"),
    ));
    if repo.rev("main").unwrap() != before {
        failures.push("plan pushed to main".into());
    }

    run(&config, dir.path(), &registry, false).await;
    let branch = read("branch.txt").unwrap_or_else(|| "main".into());
    let branch = branch.trim();
    let out = case.join("out");
    let changed: Vec<String> = match repo.rev(branch) {
        Some(_) => git(&repo.path(), &["diff", "--name-only", &before, branch])
            .lines()
            .map(str::to_owned)
            .collect(),
        None => {
            failures.push(format!("branch {branch} was not written"));
            Vec::new()
        }
    };
    if bless() {
        let _ = std::fs::remove_dir_all(&out);
        for f in &changed {
            let p = out.join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, repo.show(branch, f)).unwrap();
        }
    }
    let expected = if out.exists() {
        files(&out)
    } else {
        Vec::new()
    };
    if changed != expected {
        failures.push(format!("changed {changed:?}, expected {expected:?}"));
    }
    for f in changed.iter().filter(|f| expected.contains(f)) {
        let want = std::fs::read_to_string(out.join(f)).unwrap();
        let got = repo.show(branch, f);
        if got != want {
            failures.push(format!(
                "{f} differs:\n{}",
                similar::TextDiff::from_lines(&want, &got)
                    .unified_diff()
                    .header("expected", "actual")
            ));
        }
    }
    // Only the expected branch is new: an existing one is updated, never duplicated.
    let branches_after = git(
        &repo.path(),
        &["branch", "--list", "--format=%(refname:short)"],
    );
    let mut new: Vec<&str> = branches_after
        .lines()
        .filter(|b| !branches_before.lines().any(|o| o == *b))
        .collect();
    new.retain(|b| *b != branch);
    if !new.is_empty() {
        failures.push(format!("unexpected new branches: {new:?}"));
    }
    if branch != "main" && repo.rev("main").unwrap() != before {
        failures.push("the base branch was written".into());
    }

    // The base stays where it was when the write goes to another branch, so the same changes
    // are planned again; that branch already holds them.
    let again = run(&config, dir.path(), &registry, false).await;
    let pushed: Vec<&str> = again
        .repositories
        .iter()
        .filter(|r| r.status != RepositoryStatus::UpToDate)
        .map(|r| r.repository.as_str())
        .collect();
    if (branch == "main" && !again.plan.changes.is_empty()) || !pushed.is_empty() {
        failures.push(format!(
            "a second cycle still writes {pushed:?}: {:?}",
            again.plan.changes
        ));
    }
    failures
}

golden::golden_suite! { "argocd-iu", run_iu_case, every_image_updater_case_has_its_test, {
    golden_iu_branch_template_host_port => "branch-template-host-port",
    golden_iu_existing_argocd_source => "existing-argocd-source",
    golden_iu_kustomization_with_other_images => "kustomization-with-other-images",
    golden_iu_kustomization_without_images => "kustomization-without-images",
    golden_iu_multi_source_ref_values => "multi-source-ref-values",
    golden_iu_templated_file_name => "templated-file-name",
} }

/// A rendered branch name git would refuse is named before anything is pushed, whether the
/// name is known before the plan or only from the changes (Image Updater would hand it to git,
/// whose push then fails).
#[tokio::test]
async fn a_branch_name_git_refuses_is_a_named_problem_and_nothing_is_pushed() {
    let branch_key = "    argocd-image-updater.argoproj.io/git-branch: ";
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app(
                "web",
                "api=registry.example/shop/api",
                &format!("{branch_key}\"main:updates..{{{{.SHA256}}}}\"\n"),
            ),
        ),
        (
            "argocd/jobs.yaml".into(),
            directory_app(
                "jobs",
                "worker=registry.example/shop/worker",
                &format!("{branch_key}\"main:jobs updates\"\n"),
            ),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/jobs/deployment.yaml".into(),
            deployment("registry.example/shop/worker:3.0.0"),
        ),
    ]);
    let main = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/worker: {tags: [\"3.0.0\", \"3.1.0\"]}\n",
    )
    .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    let failed = applied
        .repositories
        .iter()
        .find(|r| r.repository.contains("updates.."))
        .expect("the web target is reported");
    assert_eq!(failed.status, RepositoryStatus::Failed);
    let error = failed.error.as_deref().unwrap_or_default();
    assert!(
        error.contains("git-branch") && error.contains("`..`"),
        "{error}"
    );
    let problems: Vec<String> = applied
        .plan
        .problems
        .iter()
        .map(|p| p.reason.to_string())
        .collect();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("\"jobs updates\"") && p.contains("a space")),
        "{problems:?}"
    );
    let branches = git(
        &repo.path(),
        &["branch", "--list", "--format=%(refname:short)"],
    );
    assert_eq!(branches.trim(), "main", "nothing but main: {branches}");
    assert_eq!(repo.rev("main").unwrap(), main);
}

/// A Helm app on `apps/<name>/values.yaml` written in place, with these extra annotation lines.
fn helm_app(name: &str, image_list: &str, extra: &str) -> String {
    format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: {image_list}\n    argocd-image-updater.argoproj.io/write-back-method: git\n    argocd-image-updater.argoproj.io/write-back-target: helmvalues:values.yaml\n{extra}spec:\n  source: {{repoURL: REPO_URL, path: apps/{name}, helm: {{}}}}\n"
    )
}

/// Image Updater's Helm write-back (`setHelmValue`, `resolveHelmScalarNode` and
/// `patchHelmValuesInPlace` in its `pkg/argocd/update.go`), case by case:
/// - a literal dotted key (`image.tag:` at the top level) is read when the nested path is not
///   there, and patched in place: the same bytes here;
/// - a missing tag key beside an existing name key is created at the end of its mapping (Image
///   Updater re-serialises the file to do it; tagpilot adds the one line, which is the same
///   result for a file in go-yaml's layout);
/// - a target naming only a tag path keeps the default name path `image.name`, which is missing:
///   Image Updater would create it, rewriting the whole file; tagpilot holds with the reason;
/// - two aliases sharing one name key for two images: Image Updater writes each name there in
///   turn; tagpilot updates the image the key holds and names the other as a problem;
/// - paths it refuses ("id %d is out of range", "id provided when … is not an yaml array") and
///   paths through an alias are problems naming the file, the path and why.
#[tokio::test]
async fn helm_paths_follow_image_updater_or_say_why_not() {
    let iu = "    argocd-image-updater.argoproj.io/";
    let repo = repo_with(&[
        (
            "argocd/dotted.yaml".into(),
            helm_app(
                "dotted",
                "api=registry.example/shop/api",
                &format!("{iu}api.helm.image-name: image.repository\n{iu}api.helm.image-tag: image.tag\n"),
            ),
        ),
        (
            "apps/dotted/values.yaml".into(),
            "# flat keys\nimage.repository: registry.example/shop/api\nimage.tag: 1.0.0 # pinned\n".into(),
        ),
        (
            "argocd/missing.yaml".into(),
            helm_app(
                "missing",
                "api=registry.example/shop/api",
                &format!("{iu}api.helm.image-name: image.repository\n{iu}api.helm.image-tag: image.version\n"),
            ),
        ),
        (
            "apps/missing/values.yaml".into(),
            "image:\n  repository: registry.example/shop/api\n".into(),
        ),
        (
            "argocd/tagonly.yaml".into(),
            helm_app(
                "tagonly",
                "api=registry.example/shop/api",
                &format!("{iu}api.helm.image-tag: app.tag\n"),
            ),
        ),
        ("apps/tagonly/values.yaml".into(), "app:\n  tag: 1.0.0\n".into()),
        (
            "argocd/shared.yaml".into(),
            helm_app(
                "shared",
                "api=registry.example/shop/api, worker=registry.example/shop/worker",
                &format!(
                    "{iu}api.helm.image-name: image.repository\n{iu}api.helm.image-tag: image.tag\n{iu}worker.helm.image-name: image.repository\n{iu}worker.helm.image-tag: worker.tag\n"
                ),
            ),
        ),
        (
            "apps/shared/values.yaml".into(),
            "image:\n  repository: registry.example/shop/api\n  tag: 1.0.0\nworker:\n  tag: 3.0.0\n".into(),
        ),
        (
            "argocd/refused.yaml".into(),
            helm_app(
                "refused",
                "a=registry.example/shop/api, b=registry.example/shop/worker, c=registry.example/shop/ui",
                &format!(
                    "{iu}a.helm.image-spec: images[2].img\n{iu}b.helm.image-spec: image[0]\n{iu}c.helm.image-spec: ui.img\n"
                ),
            ),
        ),
        (
            "apps/refused/values.yaml".into(),
            "images:\n  - img: registry.example/shop/api:1.0.0\nimage:\n  ref: x\nbase: &base\n  img: registry.example/shop/ui:1.0.0\nui: *base\n".into(),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/worker: {tags: [\"3.0.0\", \"3.1.0\"]}\nregistry.example/shop/ui: {tags: [\"1.0.0\", \"1.1.0\"]}\n",
    )
    .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert_eq!(
        repo.show("main", "apps/dotted/values.yaml"),
        "# flat keys\nimage.repository: registry.example/shop/api\nimage.tag: 1.1.0 # pinned\n"
    );
    assert_eq!(
        repo.show("main", "apps/missing/values.yaml"),
        "image:\n  repository: registry.example/shop/api\n  version: 1.1.0\n"
    );
    assert_eq!(
        repo.show("main", "apps/shared/values.yaml"),
        "image:\n  repository: registry.example/shop/api\n  tag: 1.1.0\nworker:\n  tag: 3.0.0\n"
    );
    assert_eq!(
        repo.show("main", "apps/tagonly/values.yaml"),
        "app:\n  tag: 1.0.0\n"
    );
    let problem = |app: &str, alias: &str| -> String {
        let policy = format!("{app}/{alias}");
        applied
            .plan
            .problems
            .iter()
            .find(|p| p.policy.as_deref() == Some(policy.as_str()))
            .map(|p| format!("{}: {}", p.file.as_deref().unwrap_or_default(), p.reason))
            .unwrap_or_else(|| panic!("no problem for {policy}: {:?}", applied.plan.problems))
    };
    let p = problem("tagonly", "api");
    assert!(
        p.contains("apps/tagonly/values.yaml")
            && p.contains("`image.name`")
            && p.contains("no key `image`"),
        "{p}"
    );
    let p = problem("shared", "worker");
    assert!(
        p.contains("`image.repository`") && p.contains("holds registry.example/shop/api"),
        "{p}"
    );
    let p = problem("refused", "a");
    assert!(
        p.contains("`images[2].img`") && p.contains("out of range"),
        "{p}"
    );
    let p = problem("refused", "b");
    assert!(p.contains("`image` is a mapping, not a list"), "{p}");
    let p = problem("refused", "c");
    assert!(p.contains("`ui` is a YAML alias"), "{p}");
}

/// Real charts' values shapes under Image Updater's Helm write-back:
/// - an empty tag (grafana's `tag: ""`, the chart's appVersion) is replaced, as Image Updater
///   replaces it (tagpilot's own policies hold it; see the `helm-chart-values` golden case);
/// - `helm.image-name` on a name key with a `registry` beside it names the image the chart
///   composes, `<registry>/<name>`, read through a long commented-out block: the tag moves
///   (before, "another image's name key" for the only image);
/// - a tag that carries an anchor another image's tag aliases is held with a problem naming
///   the file, the path and why (writing it would move the other image too).
#[tokio::test]
async fn helm_values_of_real_charts_are_read_as_their_charts_compose_them() {
    let iu = "    argocd-image-updater.argoproj.io/";
    let named =
        format!("{iu}api.helm.image-name: image.repository\n{iu}api.helm.image-tag: image.tag\n");
    let block: String = (0..300)
        .map(|i| format!("#   commented out {i}\n"))
        .collect();
    let split = format!(
        "image:\n  registry: registry.example\n  repository: shop/api\n  tag: 1.0.0\n{block}pullPolicy: IfNotPresent\n"
    );
    let anchored = "image:\n  repository: registry.example/shop/api\n  tag: &app-image 1.0.0\nworker:\n  repository: registry.example/shop/worker\n  tag: *app-image\n";
    let repo = repo_with(&[
        (
            "argocd/empty.yaml".into(),
            helm_app("empty", "api=registry.example/shop/api", ""),
        ),
        (
            "apps/empty/values.yaml".into(),
            "image:\n  registry: registry.example\n  repository: shop/api\n  # the chart's appVersion\n  tag: \"\"\n".into(),
        ),
        (
            "argocd/split.yaml".into(),
            helm_app("split", "api=registry.example/shop/api", &named),
        ),
        ("apps/split/values.yaml".into(), split.clone()),
        (
            "argocd/anchored.yaml".into(),
            helm_app("anchored", "api=registry.example/shop/api", &named),
        ),
        ("apps/anchored/values.yaml".into(), anchored.into()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/worker: {tags: [\"1.0.0\", \"1.1.0\"]}\n",
    )
    .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert_eq!(
        repo.show("main", "apps/empty/values.yaml"),
        "image:\n  registry: registry.example\n  repository: shop/api\n  # the chart's appVersion\n  tag: \"1.1.0\"\n"
    );
    assert_eq!(
        repo.show("main", "apps/split/values.yaml"),
        split.replace("tag: 1.0.0", "tag: 1.1.0")
    );
    assert_eq!(repo.show("main", "apps/anchored/values.yaml"), anchored);
    let problems: Vec<String> = applied
        .plan
        .problems
        .iter()
        .map(|p| {
            format!(
                "{} {}:{}: {}",
                p.policy.as_deref().unwrap_or_default(),
                p.file.as_deref().unwrap_or_default(),
                p.line.unwrap_or_default(),
                p.reason
            )
        })
        .collect();
    let [anchor] = problems.as_slice() else {
        panic!("one problem, the anchored tag's: {problems:?}")
    };
    assert!(
        anchor.starts_with("anchored/api apps/anchored/values.yaml:3: ")
            && anchor.contains("`image.tag` carries a YAML anchor")
            && anchor.contains("an alias reads it"),
        "{anchor}"
    );
}

/// Image Updater adds a kustomization `images:` entry for an image it does not name (its
/// `imagesFilter`, `pkg/argocd/git.go`), `name` being the `kustomize.image-name` with the image
/// as `newName` when one is set (`parseImageOverride`). When the same cycle also edits that
/// kustomization in place, the entry waits for the next cycle rather than one write hiding the
/// other; tagpilot's own policies never add entries.
#[tokio::test]
async fn kustomization_entries_are_added_after_in_place_edits_and_with_aliases() {
    let iu = "    argocd-image-updater.argoproj.io/";
    let kustomize_app = |name: &str, list: &str, extra: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  annotations:\n{iu}image-list: {list}\n{iu}write-back-method: git\n{iu}write-back-target: kustomization\n{extra}spec:\n  source: {{repoURL: REPO_URL, path: apps/{name}}}\n"
        )
    };
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            kustomize_app(
                "web",
                "web=registry.example/shop/web, api=registry.example/shop/api",
                "",
            ),
        ),
        (
            "apps/web/kustomization.yaml".into(),
            "resources: [deployment.yaml]\nimages:\n- name: registry.example/shop/web\n  newTag: 2.0.0\n".into(),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "argocd/jobs.yaml".into(),
            kustomize_app(
                "jobs",
                "worker=registry.example/shop/worker",
                &format!("{iu}worker.kustomize.image-name: worker\n"),
            ),
        ),
        (
            "apps/jobs/kustomization.yaml".into(),
            "resources:\n  - deployment.yaml\n".into(),
        ),
        (
            "apps/jobs/deployment.yaml".into(),
            deployment("registry.example/shop/worker:3.0.0"),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/web: {tags: [\"2.0.0\", \"2.1.0\"]}\nregistry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/worker: {tags: [\"3.0.0\", \"3.1.0\"]}\n",
    )
    .unwrap();
    let first = run(&config, dir.path(), &registry, false).await;
    assert_eq!(
        repo.show("main", "apps/web/kustomization.yaml"),
        "resources: [deployment.yaml]\nimages:\n- name: registry.example/shop/web\n  newTag: 2.1.0\n"
    );
    assert!(
        first.plan.holds.iter().any(|h| h.policy == "web/api"
            && h.reason.to_string().contains("gets other edits this cycle")),
        "{:?}",
        first.plan.holds
    );
    assert_eq!(
        repo.show("main", "apps/jobs/kustomization.yaml"),
        "resources:\n  - deployment.yaml\nimages:\n  - name: worker\n    newName: registry.example/shop/worker\n    newTag: 3.1.0\n"
    );
    let second = run(&config, dir.path(), &registry, false).await;
    assert!(second.plan.holds.is_empty(), "{:?}", second.plan.holds);
    assert_eq!(
        repo.show("main", "apps/web/kustomization.yaml"),
        "resources: [deployment.yaml]\nimages:\n- name: registry.example/shop/web\n  newTag: 2.1.0\n- name: registry.example/shop/api\n  newTag: 1.1.0\n"
    );
    let third = run(&config, dir.path(), &registry, false).await;
    assert!(third.plan.changes.is_empty(), "{:?}", third.plan.changes);
}

/// A template that renders empty when nothing changes (`{{range .Images}}` over no changes) is
/// not a refused branch name: with nothing to write, no branch is named.
#[tokio::test]
async fn a_branch_template_over_no_changes_is_not_a_problem() {
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app(
                "web",
                "api=registry.example/shop/api",
                "    argocd-image-updater.argoproj.io/git-branch: \"main:{{range .Images}}{{.Alias}}{{end}}\"\n",
            ),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\"]}\n").unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert!(
        applied.plan.problems.is_empty(),
        "{:?}",
        applied.plan.problems
    );
    for r in &applied.repositories {
        assert!(r.error.is_none(), "{}: {:?}", r.repository, r.error);
    }
}

/// The commit names every Application whose sources contain the changed file, annotated or
/// not, each source of a multi-source Application counted, with its destination; an
/// Application of another path is not named.
#[tokio::test]
async fn the_commit_names_the_applications_that_deploy_the_changed_files() {
    let repo = deployed_repo();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert!(applied.repositories[0].error.is_none());
    assert_eq!(applied.plan.changes.len(), 1, "{:?}", applied.plan.changes);
    let message = repo.message("main");
    assert!(
        message.contains(
            "Argo CD Applications:\n\
             - api -> https://kubernetes.default.svc, namespace shop\n\
             - argocd/api-prod -> prod, namespace shop-prod\n"
        ),
        "{message}"
    );
    assert!(
        message.contains("Tagpilot-Application: api\nTagpilot-Application: argocd/api-prod"),
        "{message}"
    );
    assert!(!message.contains("argocd/web"), "{message}");
}

/// An Application whose source tracks another revision than the branch changed (a release
/// branch) is not named in the commit, and the report says why instead of leaving it out
/// silently.
#[tokio::test]
async fn an_application_on_another_revision_is_not_named_but_found() {
    let repo = repo_with(&[
        (
            "argocd/api.yaml".into(),
            directory_app("api", "registry.example/shop/api:1.x", "")
                + "  destination: {namespace: shop}\n",
        ),
        (
            "argocd/api-release.yaml".into(),
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: api-release\n  \
             namespace: argocd\nspec:\n  destination: {namespace: shop-release}\n  \
             source: {repoURL: REPO_URL, path: apps/api, targetRevision: release-1}\n"
                .into(),
        ),
        (
            "apps/api/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    assert_eq!(applied.plan.changes.len(), 1, "{:?}", applied.plan.changes);
    let message = repo.message("main");
    assert!(
        message.lines().any(|l| l == "Tagpilot-Application: api"),
        "{message}"
    );
    assert!(!message.contains("api-release"), "{message}");
    let found: Vec<_> = applied
        .plan
        .findings
        .iter()
        .filter(|f| f.kind == tagpilot::plan::FindingKind::ApplicationOnOtherRevision)
        .collect();
    assert_eq!(found.len(), 1, "{:?}", applied.plan.findings);
    assert_eq!(found[0].application.as_deref(), Some("argocd/api-release"));
    assert_eq!(
        found[0].searched,
        "source 1 on targetRevision `release-1`, not branch `main`, containing apps/api/deployment.yaml"
    );
    assert_eq!(found[0].image, "registry.example/shop/api");
}

/// A repository with an annotated Directory Application `api` on `apps/api`, an unannotated
/// multi-source `api-prod` whose second source is `apps/api`, and a `web` on `apps/web`.
fn deployed_repo() -> BareRepo {
    let app = |name: &str, spec: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  namespace: argocd\nspec:\n{spec}"
        )
    };
    repo_with(&[
        (
            "argocd/api.yaml".into(),
            directory_app("api", "registry.example/shop/api:1.x", "")
                + "  destination: {server: 'https://kubernetes.default.svc', namespace: shop}\n",
        ),
        (
            "argocd/api-prod.yaml".into(),
            app(
                "api-prod",
                "  destination: {name: prod, namespace: shop-prod}\n  sources:\n    - {repoURL: 'https://charts.example', chart: base, targetRevision: 1.0.0}\n    - {repoURL: REPO_URL, path: apps/api}\n",
            ),
        ),
        (
            "argocd/web.yaml".into(),
            app(
                "web",
                "  destination: {name: prod, namespace: web}\n  source: {repoURL: REPO_URL, path: apps/web}\n",
            ),
        ),
        (
            "apps/api/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/web:1.0.0"),
        ),
    ])
}

/// `plan --diff --rendered`: each Application the change deploys, rendered before and after,
/// shows the diff of its resources; nothing is written.
#[tokio::test]
async fn plan_diff_rendered_shows_each_application_s_rendered_resources() {
    let repo = deployed_repo();
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let options = tagpilot::engine::Options {
        dry_run: true,
        diff: true,
        rendered: true,
        ..Default::default()
    };
    let planned =
        crate::support::engine::cycle_with(&config, None, &cache, &registry, &(), options).await;
    let diff = tagpilot::report::diff(&planned.plan);
    for app in ["api", "argocd/api-prod"] {
        assert!(
            diff.contains(&format!(
                "# repository manifests, manifests: Application {app} rendered\n\
                 --- a/Deployment/x\n+++ b/Deployment/x\n"
            )),
            "{diff}"
        );
    }
    assert!(
        diff.contains("-      - image: registry.example/shop/api:1.0.0\n+      - image: registry.example/shop/api:1.1.0\n"),
        "{diff}"
    );
    assert!(!diff.contains("Application argocd/web"), "{diff}");
    assert_eq!(repo.rev("main").unwrap(), before, "plan writes nothing");
}

/// An Image Updater-style write-back changes no manifest, only the parameters Argo CD merges
/// from `.argocd-source-<app>.yaml`: the rendered diff of the Application still shows the image
/// it will deploy (the same rendering the pull-request comment carries).
#[tokio::test]
async fn the_rendered_diff_of_an_override_file_write_back_shows_the_image_change() {
    let repo = chart_app_with_git_write_back();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let tools = crate::render::tools();
    let options = tagpilot::engine::Options {
        dry_run: true,
        diff: true,
        rendered: true,
        tools: Some(&tools),
        ..Default::default()
    };
    let planned =
        crate::support::engine::cycle_with(&config, None, &cache, &registry, &(), options).await;
    assert!(
        planned.plan.changes[0]
            .file
            .ends_with(".argocd-source-shop.yaml"),
        "{:?}",
        planned.plan.changes
    );
    let diff = tagpilot::report::diff(&planned.plan);
    assert!(
        diff.contains("Application argocd/shop rendered\n--- a/Deployment/shop\n")
            && diff.contains(
                "-      - image: registry.example/shop/api:1.0.0\n+      - image: registry.example/shop/api:1.1.0\n"
            ),
        "{diff}"
    );
}

/// A repository with the Helm Application `argocd/shop` over `apps/shop` (its chart's values on
/// `registry.example/shop/api:1.0.0`), under Image Updater's annotations with a git write-back:
/// an update is written to `apps/shop/.argocd-source-shop.yaml`, no manifest changes.
pub(crate) fn chart_app_with_git_write_back() -> BareRepo {
    let app = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  \
               namespace: argocd\n  annotations:\n    \
               argocd-image-updater.argoproj.io/image-list: api=registry.example/shop/api:1.x\n    \
               argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  \
               destination: {namespace: shop}\n  source:\n    repoURL: REPO_URL\n    \
               targetRevision: main\n    path: apps/shop\n    helm: {}\n";
    repo_with(&[
        ("argocd/shop.yaml".into(), app.to_owned()),
        (
            "apps/shop/Chart.yaml".into(),
            "apiVersion: v2\nname: shop\nversion: 0.1.0\n".into(),
        ),
        (
            "apps/shop/values.yaml".into(),
            "image:\n  name: registry.example/shop/api\n  tag: 1.0.0\n".into(),
        ),
        (
            "apps/shop/templates/deployment.yaml".into(),
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"{{ .Values.image.name }}:{{ .Values.image.tag }}\"\n".into(),
        ),
    ])
}

/// A registry whose `shop/api` has `1.0.0` and `1.1.0` for linux/amd64 and linux/arm64, and a
/// newer `1.2.0` for linux/amd64 only.
async fn amd64_only_newest() -> crate::support::registry::TestRegistry {
    use crate::support::registry::{Auth, ImageSpec, IndexSpec, TestRegistry};
    let reg = TestRegistry::start(Auth::None).await;
    let both = || {
        IndexSpec::new()
            .platform("linux/amd64", ImageSpec::default())
            .platform("linux/arm64", ImageSpec::default())
    };
    reg.push_index("shop/api", "1.0.0", both()).await;
    reg.push_index("shop/api", "1.1.0", both()).await;
    reg.push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    reg
}

/// A dry-run cycle over `files` (`REPO_URL` replaced) pushed to a new repository's `main`,
/// whose `argocd/` Applications are read from git, with the real registry.
async fn plan_applications(
    reg: &crate::support::registry::TestRegistry,
    files: &[(&str, String)],
) -> Cycle {
    let repo = BareRepo::new();
    let files: Vec<(&str, String)> = files
        .iter()
        .map(|(f, t)| (*f, t.replace("REPO_URL", &repo.file_url())))
        .collect();
    let seed = tempfile::tempdir().unwrap();
    push_tree(&repo, seed.path(), &files);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/**\"");
    let cache = RepoCache::new(dir.path().join("cache"));
    let planned = cycle(&config, None, &cache, &reg.client(), &(), true).await;
    assert!(
        planned.plan.problems.is_empty(),
        "{:?}",
        planned.plan.problems
    );
    planned
}

/// The plan's changes as (file, from, to), and its skipped tags as `tag: why`.
fn changes_and_skips(planned: &Cycle) -> (Vec<(&str, &str, &str)>, Vec<String>) {
    let changes = planned
        .plan
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.from.as_str(), c.to.as_str()))
        .collect();
    let skipped = planned
        .plan
        .skipped_tags
        .iter()
        .flat_map(|s| s.tags.iter().map(|t| t.0.to_string()))
        .collect();
    (changes, skipped)
}

/// An `ImageUpdater` resource's `platforms`: a newer tag pushed for amd64 only offers none of
/// `linux/arm64`, so it is passed over for an older one offering it, and the report names it.
#[tokio::test]
async fn image_updater_platforms_pass_over_a_tag_without_one() {
    let reg = amd64_only_newest().await;
    let image = reg.image("shop/api");
    let app = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: plain\n  \
               namespace: argocd\nspec:\n  source:\n    repoURL: REPO_URL\n    targetRevision: \
               HEAD\n    path: apps/plain\n";
    let updater = format!(
        "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata:\n  \
         name: shop\n  namespace: argocd\nspec:\n  writeBackConfig:\n    method: git\n  \
         applicationRefs:\n    - namePattern: plain\n      images:\n        - alias: api\n          \
         imageName: {image}:1.x\n          commonUpdateSettings:\n            platforms: \
         [linux/arm64]\n"
    );
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    \
         spec:\n      containers:\n        - name: api\n          image: {image}:1.0.0\n"
    );
    let planned = plan_applications(
        &reg,
        &[
            ("argocd/plain.yaml", app.to_string()),
            ("argocd/image-updater.yaml", updater),
            ("apps/plain/deployment.yaml", deployment),
        ],
    )
    .await;
    let (changes, skipped) = changes_and_skips(&planned);
    assert_eq!(changes, [("apps/plain/deployment.yaml", "1.0.0", "1.1.0")]);
    assert_eq!(
        skipped,
        ["1.2.0: no linux/arm64 image (offers linux/amd64)"]
    );
    let table = tagpilot::report::table(&planned.plan);
    assert!(table.contains("Skipped tags:"), "{table}");
}

/// The `<alias>.platforms` annotation, for an image written to `.argocd-source-<app>.yaml`:
/// the override takes the older tag offering the platform, and the report names the newer.
#[tokio::test]
async fn the_platforms_annotation_holds_for_override_files_too() {
    let reg = amd64_only_newest().await;
    let image = reg.image("shop/api");
    let app = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  \
         namespace: argocd\n  annotations:\n    \
         argocd-image-updater.argoproj.io/image-list: api={image}:1.x\n    \
         argocd-image-updater.argoproj.io/api.platforms: linux/arm64\n    \
         argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  source:\n    \
         repoURL: REPO_URL\n    targetRevision: main\n    path: apps/shop\n    helm: {{}}\n"
    );
    let planned = plan_applications(
        &reg,
        &[
            ("argocd/shop.yaml", app),
            (
                "apps/shop/Chart.yaml",
                "apiVersion: v2\nname: shop\nversion: 0.1.0\n".to_string(),
            ),
            (
                "apps/shop/values.yaml",
                format!("image:\n  name: {image}\n  tag: 1.0.0\n"),
            ),
        ],
    )
    .await;
    let (changes, skipped) = changes_and_skips(&planned);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].0.ends_with(".argocd-source-shop.yaml"),
        "{changes:?}"
    );
    assert_eq!((changes[0].1, changes[0].2), ("1.0.0", "1.1.0"));
    assert_eq!(
        skipped,
        ["1.2.0: no linux/arm64 image (offers linux/amd64)"]
    );
}

/// Image Updater's `platforms` want any one of them (its `WantsPlatform` accepts an image or an
/// index entry for any listed platform): with `linux/arm64, linux/amd64`, the amd64-only
/// `1.2.0` is taken, from the annotation and from an `ImageUpdater` resource alike. A policy
/// file's `platforms:` still requires every one (`tests/it/platforms.rs`).
#[tokio::test]
async fn image_updater_platforms_take_a_tag_offering_any_one_of_them() {
    let reg = amd64_only_newest().await;
    let image = reg.image("shop/api");
    let annotated = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: annotated\n  \
         namespace: argocd\n  annotations:\n    \
         argocd-image-updater.argoproj.io/image-list: api={image}:1.x\n    \
         argocd-image-updater.argoproj.io/api.platforms: linux/arm64, linux/amd64\n    \
         argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  source:\n    \
         repoURL: REPO_URL\n    targetRevision: HEAD\n    path: apps/annotated\n"
    );
    let plain = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: plain\n  \
                 namespace: argocd\nspec:\n  source:\n    repoURL: REPO_URL\n    \
                 targetRevision: HEAD\n    path: apps/plain\n";
    let updater = format!(
        "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata:\n  \
         name: shop\n  namespace: argocd\nspec:\n  writeBackConfig:\n    method: git\n  \
         applicationRefs:\n    - namePattern: plain\n      images:\n        - alias: api\n          \
         imageName: {image}:1.x\n          commonUpdateSettings:\n            platforms: \
         [linux/arm64, linux/amd64]\n    - namePattern: annotated\n      useAnnotations: true\n"
    );
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    \
         spec:\n      containers:\n        - name: api\n          image: {image}:1.0.0\n"
    );
    let planned = plan_applications(
        &reg,
        &[
            ("argocd/annotated.yaml", annotated),
            ("argocd/plain.yaml", plain.to_string()),
            ("argocd/image-updater.yaml", updater),
            ("apps/annotated/deployment.yaml", deployment.clone()),
            ("apps/plain/deployment.yaml", deployment),
        ],
    )
    .await;
    let (changes, skipped) = changes_and_skips(&planned);
    assert_eq!(
        changes,
        [
            ("apps/annotated/deployment.yaml", "1.0.0", "1.2.0"),
            ("apps/plain/deployment.yaml", "1.0.0", "1.2.0"),
        ]
    );
    assert!(skipped.is_empty(), "{skipped:?}");
}

/// Issue 28: a `write-back-target` that cannot be read (`helmvalue:`, a typo) holds the
/// Application with a problem naming the annotation and its value; nothing is written, and no
/// `.argocd-source-<app>.yaml` appears (where Image Updater would fall back). An unknown key
/// beside it is a warning naming the nearest known key and the line the key is on, not only a
/// note.
#[tokio::test]
async fn an_unreadable_write_back_target_holds_the_application_and_a_typo_is_a_warning() {
    let iu = "    argocd-image-updater.argoproj.io/";
    let repo = repo_with(&[
        (
            "argocd/typo.yaml".into(),
            helm_app("typo", "api=registry.example/shop/api", "")
                .replace("helmvalues:values.yaml", "helmvalue:values.yaml"),
        ),
        (
            "apps/typo/values.yaml".into(),
            "image:\n  name: registry.example/shop/api\n  tag: 1.0.0\n".into(),
        ),
        (
            "argocd/pay.yaml".into(),
            helm_app(
                "pay",
                "pay=registry.example/shop/api",
                &format!("{iu}pay.helm.image-tga: image.tag\n"),
            ),
        ),
        (
            "apps/pay/values.yaml".into(),
            "image:\n  name: registry.example/shop/api\n  tag: 1.0.0\n".into(),
        ),
        // A misspelt image-list: not managed, and said so.
        (
            "argocd/lst.yaml".into(),
            helm_app("lst", "api=registry.example/shop/api", "")
                .replace("/image-list:", "/image-lst:")
                .replace("    argocd-image-updater.argoproj.io/write-back-method: git\n", "")
                .replace(
                    "    argocd-image-updater.argoproj.io/write-back-target: helmvalues:values.yaml\n",
                    "",
                ),
        ),
    ]);
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;

    let files: Vec<&str> = applied
        .plan
        .changes
        .iter()
        .map(|c| c.file.as_str())
        .collect();
    assert_eq!(
        files,
        ["apps/pay/values.yaml"],
        "only the readable app moves"
    );
    assert_ne!(repo.rev("main").unwrap(), before);
    let tree = git(&repo.path(), &["ls-tree", "-r", "--name-only", "main"]);
    assert!(
        !repo.show("main", "apps/typo/values.yaml").contains("1.1.0")
            && !tree.contains(".argocd-source"),
        "nothing written for the held app: {tree}"
    );
    let problems: Vec<String> = applied
        .plan
        .problems
        .iter()
        .map(|p| p.reason.to_string())
        .collect();
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("application typo: ")
            && problems[0].contains(
                "argocd-image-updater.argoproj.io/write-back-target `helmvalue:values.yaml` \
                 cannot be read"
            ),
        "{problems:?}"
    );
    let warnings: Vec<String> = applied
        .plan
        .findings
        .iter()
        .filter(|f| f.kind == tagpilot::plan::FindingKind::UnknownAnnotation)
        .map(tagpilot::report::finding_text)
        .collect();
    assert_eq!(
        warnings,
        [
            "application pay: nothing reads annotation \
             argocd-image-updater.argoproj.io/pay.helm.image-tga; did you mean \
             argocd-image-updater.argoproj.io/pay.helm.image-tag?; at manifests:argocd/pay.yaml:9",
            "application lst: nothing reads annotation \
             argocd-image-updater.argoproj.io/image-lst: the Application has no image-list; did \
             you mean argocd-image-updater.argoproj.io/image-list?; at manifests:argocd/lst.yaml:6",
        ]
    );
}

/// Issue 28: two multi-source Applications read `$values/…` files from one repository through a
/// `ref:` source. A change to one's values file names that one only: a `ref:` source deploys
/// exactly the value files its siblings name, not the whole repository.
#[tokio::test]
async fn a_change_in_a_ref_source_names_only_the_applications_whose_value_files_it_changes() {
    let app = |name: &str, annotations: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  \
             namespace: argocd\n{annotations}spec:\n  destination: {{namespace: shop-{name}}}\n  \
             sources:\n    - {{repoURL: 'https://charts.example', chart: shop, targetRevision: 1.0.0, \
             helm: {{valueFiles: [$values/envs/{name}/values.yaml]}}}}\n    - {{repoURL: REPO_URL, \
             targetRevision: main, ref: values}}\n"
        )
    };
    let values = "image:\n  name: registry.example/shop/api\n  tag: 1.0.0\n".to_string();
    let repo = repo_with(&[
        (
            "argocd/prod.yaml".into(),
            app(
                "prod",
                "  annotations:\n    argocd-image-updater.argoproj.io/image-list: \
                 api=registry.example/shop/api\n    \
                 argocd-image-updater.argoproj.io/write-back-method: git\n    \
                 argocd-image-updater.argoproj.io/write-back-target: \
                 helmvalues:$values/envs/prod/values.yaml\n",
            ),
        ),
        ("argocd/staging.yaml".into(), app("staging", "")),
        ("envs/prod/values.yaml".into(), values.clone()),
        ("envs/staging/values.yaml".into(), values),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = run(&config, dir.path(), &registry, false).await;
    let files: Vec<&str> = applied
        .plan
        .changes
        .iter()
        .map(|c| c.file.as_str())
        .collect();
    assert_eq!(files, ["envs/prod/values.yaml"]);
    let message = repo.message("main");
    assert!(
        message
            .contains("Argo CD Applications:\n- argocd/prod -> in-cluster, namespace shop-prod\n"),
        "{message}"
    );
    assert!(
        message
            .lines()
            .any(|l| l == "Tagpilot-Application: argocd/prod")
            && !message.contains("staging"),
        "{message}"
    );
}

/// Issue 28: an Application read from git whose source is in a repository outside
/// `repositories:` cannot direct tagpilot's writes there: a problem names the Application, its
/// file and line and the repository, and the repository is not even cloned. Named in
/// `applications.allowRepositories` (a glob over the normalised URL), it is written.
#[tokio::test]
async fn an_application_writes_only_to_configured_or_allowed_repositories() {
    let elsewhere = repo_with(&[(
        "apps/api/deployment.yaml".into(),
        deployment("registry.example/shop/api:1.0.0"),
    )]);
    let before = elsewhere.rev("main").unwrap();
    let repo = repo_with(&[(
        "argocd/api.yaml".into(),
        directory_app("api", "registry.example/shop/api", "")
            .replace("REPO_URL", &elsewhere.file_url()),
    )]);
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = tagpilot_yaml(dir.path(), &repo, "\"argocd/*.yaml\"");
    let refused = run(&config, dir.path(), &registry, false).await;

    assert!(
        refused.plan.changes.is_empty(),
        "{:?}",
        refused.plan.changes
    );
    assert_eq!(elsewhere.rev("main").unwrap(), before, "nothing pushed");
    let problems: Vec<String> = refused
        .plan
        .problems
        .iter()
        .map(|p| p.reason.to_string())
        .collect();
    assert_eq!(
        problems,
        [format!(
            "application api: {} is not in tagpilot.yaml `repositories:` nor allowed by \
             `applications.allowRepositories` (read from manifests:argocd/api.yaml:1); nothing \
             is cloned or written for it",
            elsewhere.file_url()
        )]
    );
    let cloned: Vec<String> = std::fs::read_dir(dir.path().join("cache/repos"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        cloned.iter().all(|c| c.starts_with("manifests-")),
        "only the configured repository is cloned: {cloned:?}"
    );

    // Allowed by a glob over its normalised URL (a file:// URL is its path).
    let path = tagpilot::affected::normalise_url(&elsewhere.file_url());
    let parent = path.rsplit_once('/').unwrap().0;
    let text = std::fs::read_to_string(dir.path().join("tagpilot.yaml")).unwrap()
        + &format!("  allowRepositories: [\"{parent}/*\"]\n");
    std::fs::write(dir.path().join("tagpilot.yaml"), text).unwrap();
    let config = config::load(&dir.path().join("tagpilot.yaml")).unwrap();
    let allowed = run(&config, dir.path(), &registry, false).await;
    assert!(
        allowed.plan.problems.is_empty(),
        "{:?}",
        allowed.plan.problems
    );
    assert_eq!(
        elsewhere.show("main", "apps/api/deployment.yaml"),
        deployment("registry.example/shop/api:1.1.0")
    );
}
