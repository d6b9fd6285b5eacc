//! `tagpilot plan` and `tagpilot apply` over configured repositories, end to end: the real
//! binary, a real registry, and bare git repositories over file://.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::support::bin::{output_text, run_tagpilot};
use crate::support::git::{BareRepo, DEPLOYMENT_PATH, git};
use crate::support::registry::{Auth, ImageSpec, TestRegistry};

struct Setup {
    registry: TestRegistry,
    repo: BareRepo,
    dir: tempfile::TempDir,
}

fn deployment(registry: &TestRegistry, api: &str, web: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {}:{api}  # the API\n        - name: web\n          image: \"{}:{web}\"\n",
        registry.image("shop/api"),
        registry.image("shop/web")
    )
}

/// A registry with two repositories, a bare repo whose Deployment is on old tags, and a
/// tagpilot.yaml with one policy per image targeting the repository.
async fn setup(write: &str) -> Setup {
    let registry = TestRegistry::start(Auth::None).await;
    registry
        .push_tags(
            "shop/api",
            &["1.0.0", "1.1.0", "1.2.0", "2.0.0"],
            ImageSpec::default(),
        )
        .await;
    registry
        .push_tags("shop/web", &["2.0.0", "2.1.0"], ImageSpec::default())
        .await;
    let repo = BareRepo::new();
    repo.push_change(
        "main",
        DEPLOYMENT_PATH,
        &deployment(&registry, "1.0.0", "2.0.0"),
        "old tags",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "registries:\n{}policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    write:\n{write}",
        registry.registries_yaml(),
        repo.file_url()
    );
    std::fs::write(dir.path().join("tagpilot.yaml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    for (name, range) in [("api", "<2.0.0"), ("web", "*")] {
        std::fs::write(
            dir.path().join(format!("policies/{name}.yaml")),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"{range}\"}}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n",
                registry.image(&format!("shop/{name}"))
            ),
        )
        .unwrap();
    }
    Setup {
        registry,
        repo,
        dir,
    }
}

fn tagpilot(dir: &Path, args: &[&str]) -> Output {
    run_tagpilot(dir, args, &[])
}

#[tokio::test]
async fn plan_over_a_repository_writes_nothing_and_names_repository_files() {
    let s = setup("      mode: push\n").await;
    let before = s.repo.rev("main").unwrap();
    let out = tagpilot(s.dir.path(), &["plan", "--exit-code"]);
    assert_eq!(out.status.code(), Some(2), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("manifests:apps/api/deployment.yaml"),
        "{stdout}"
    );
    assert!(stdout.contains("would push"), "{stdout}");
    assert_eq!(s.repo.rev("main").unwrap(), before, "plan pushed something");
    // The commit it would push was built in memory: nothing loose in the clone cache.
    assert_eq!(
        loose_objects(&s.dir.path().join("cache")),
        Vec::<PathBuf>::new()
    );
    drop(s.registry);
}

/// Loose object files under `dir` (`objects/ab/cdef…`): what libgit2 writes outside packs.
fn loose_objects(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(walkdir::DirEntry::into_path)
        .filter(|p| {
            let parent = p
                .parent()
                .and_then(Path::file_name)
                .and_then(|n| n.to_str());
            let objects = p.parent().and_then(Path::parent).and_then(Path::file_name);
            objects.is_some_and(|n| n == "objects")
                && parent.is_some_and(|n| n.len() == 2 && n.bytes().all(|b| b.is_ascii_hexdigit()))
        })
        .collect()
}

#[tokio::test]
async fn apply_pushes_one_commit_and_a_second_apply_pushes_nothing() {
    let s = setup("      mode: push\n").await;
    let out = tagpilot(s.dir.path(), &["apply"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let file = s.repo.show("main", DEPLOYMENT_PATH);
    assert_eq!(
        file,
        deployment(&s.registry, "1.2.0", "2.1.0"),
        "only the tags changed"
    );
    let subjects = s.repo.subjects("main");
    assert_eq!(subjects.len(), 3, "{subjects:?}");
    let message = git(&s.repo.path(), &["log", "-1", "--format=%B", "main"]);
    assert!(
        message.contains("Tagpilot-Policy: api") && message.contains("Tagpilot-Policy: web"),
        "{message}"
    );

    let head = s.repo.rev("main").unwrap();
    let again = tagpilot(s.dir.path(), &["apply"]);
    assert_eq!(again.status.code(), Some(0), "{}", output_text(&again));
    assert!(
        String::from_utf8_lossy(&again.stdout).contains("up to date"),
        "{}",
        output_text(&again)
    );
    assert_eq!(
        s.repo.rev("main").unwrap(),
        head,
        "the second apply made a commit"
    );
}

#[tokio::test]
async fn group_by_policy_makes_one_commit_per_policy() {
    let s = setup("      mode: push\n      group: policy\n").await;
    let out = tagpilot(s.dir.path(), &["apply"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(
        s.repo.subjects("main").len(),
        4,
        "two policy commits on top of two"
    );
    // The first commit (policy `api`) moves only the API image; the second adds the web image.
    let first = s.repo.show("main~1", DEPLOYMENT_PATH);
    assert_eq!(first, deployment(&s.registry, "1.2.0", "2.0.0"));
    assert_eq!(
        s.repo.show("main", DEPLOYMENT_PATH),
        deployment(&s.registry, "1.2.0", "2.1.0")
    );
}

#[tokio::test]
async fn a_failing_repository_is_reported_and_the_others_are_still_written() {
    let s = setup("      mode: push\n").await;
    let config_path = s.dir.path().join("tagpilot.yaml");
    let config = std::fs::read_to_string(&config_path).unwrap()
        + "  - name: broken\n    url: file:///nonexistent/tagpilot-test/repo.git\n    branch: main\n";
    std::fs::write(&config_path, config).unwrap();
    let out = tagpilot(s.dir.path(), &["apply"]);
    assert_eq!(out.status.code(), Some(1), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("broken") && stdout.contains("failed"),
        "{stdout}"
    );
    assert_eq!(
        s.repo.show("main", DEPLOYMENT_PATH),
        deployment(&s.registry, "1.2.0", "2.1.0")
    );
}

/// `plan --diff` shows a repository's files as its commits would leave them: with one commit
/// per policy, the file both policies edit is shown once, with both edits, and the diff applies
/// to a checkout of the base to give exactly what `apply` then pushes.
#[tokio::test]
async fn plan_diff_shows_the_repository_files_as_the_planned_commits_leave_them() {
    let s = setup("      mode: push\n      group: policy\n").await;
    let before = s.repo.rev("main").unwrap();
    let out = tagpilot(s.dir.path(), &["plan", "--diff"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let (api, web) = (s.registry.image("shop/api"), s.registry.image("shop/web"));
    let expected = format!(
        "# repository manifests\n--- a/{DEPLOYMENT_PATH}\n+++ b/{DEPLOYMENT_PATH}\n@@ -7,6 +7,6 @@\n     spec:\n       containers:\n         - name: api\n-          image: {api}:1.0.0  # the API\n+          image: {api}:1.2.0  # the API\n         - name: web\n-          image: \"{web}:2.0.0\"\n+          image: \"{web}:2.1.0\"\n"
    );
    assert!(
        stdout.ends_with(&expected),
        "expected the diff at the end:\n{expected}\n--- got\n{stdout}"
    );
    assert_eq!(s.repo.rev("main").unwrap(), before, "plan pushed something");

    // The diff is the commits' net effect: applied to a checkout of the base, it gives the tree
    // `apply` pushes.
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &[
            "clone",
            "-q",
            "-b",
            "main",
            s.repo.path().to_str().unwrap(),
            "w",
        ],
    );
    let w = work.path().join("w");
    let patch = w.join("plan.diff");
    let diff = &stdout[stdout.find("# repository").unwrap()..];
    std::fs::write(&patch, diff).unwrap();
    git(&w, &["apply", patch.to_str().unwrap()]);
    let out = tagpilot(s.dir.path(), &["apply"]);
    assert_eq!(out.status.code(), Some(0), "{}", output_text(&out));
    assert_eq!(
        std::fs::read_to_string(w.join(DEPLOYMENT_PATH)).unwrap(),
        s.repo.show("main", DEPLOYMENT_PATH)
    );
}
