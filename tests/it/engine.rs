//! The engine's promises across sources: a repository named by policy files and by
//! Applications is one target (one plan, one commit), sources that disagree on a field hold
//! it, Applications on a pull-request repository get pull requests, and a branch named after
//! the changes costs one plan.

use std::path::Path;
use std::sync::atomic::Ordering;

use serde_json::json;
use tagpilot::config;
use tagpilot::engine::{self, Cycle};
use tagpilot::git::RepoCache;
use tagpilot::plan::{Progress, RepositoryStatus};
use tagpilot::policy;
use tagpilot::registry::{MemoryRegistry, Registry};

use crate::argocd::{Scans, deployment, directory_app, hex_sha256, repo_with};
use crate::support::git::{BareRepo, HTTP_PASSWORD_ENV, set_test_secrets};
use crate::support::github::{
    BRANCH, PULLS, expect_create, expect_edit, expect_list_open, expect_no_pulls_yet, pull,
};

/// `tagpilot.yaml` with the repository `manifests` (plus `write`), Applications from its
/// `argocd/` folder, and `policies` as policy files under `policies/`.
pub(crate) fn setup(
    dir: &Path,
    repo: &BareRepo,
    repository_extra: &str,
    policies: &[(&str, &str)],
) -> config::Config {
    let text = format!(
        "repositories:\n  - name: manifests\n    url: {}\n    branch: main\n{repository_extra}applications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/*.yaml\"]\n",
        repo.file_url()
    );
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    for (name, text) in policies {
        std::fs::write(dir.join("policies").join(name), text).unwrap();
    }
    let path = dir.join("tagpilot.yaml");
    std::fs::write(&path, text).unwrap();
    config::load(&path).unwrap()
}

/// A policy file for `image` on the repository `manifests` under `paths`.
fn policy_file(name: &str, image: &str, range: &str, paths: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n  strategy:\n    semver: {{range: \"{range}\"}}\n  targets:\n    - repository: manifests\n      paths: [\"{paths}\"]\n"
    )
}

/// A repository with the Directory Application `web` (`image_list`, `extra` annotation lines)
/// over `apps/web`, whose Deployment runs `registry.example/shop/api:1.0.0`.
fn web_app_on_api_1_0_0(image_list: &str, extra: &str) -> BareRepo {
    repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", image_list, extra),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
    ])
}

/// One cycle as `tagpilot apply` (or `plan`) runs it, without a local directory.
async fn cycle(
    config: &config::Config,
    dir: &Path,
    registry: &impl Registry,
    progress: &dyn Progress,
    dry_run: bool,
) -> Cycle {
    let policies = policy::load(config).expect("policies load");
    let cache = RepoCache::new(dir.join("cache"));
    let input = engine::Input {
        config,
        policies: &policies,
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = engine::Context {
        registry,
        cache: Some(&cache),
        progress,
        cancel: Default::default(),
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    engine::run(
        &input,
        &context,
        engine::Options {
            dry_run,
            ..Default::default()
        },
    )
    .await
    .expect("engine cycle")
}

#[tokio::test]
async fn a_repository_named_by_a_policy_file_and_two_applications_gets_one_plan_and_one_commit() {
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", "api=registry.example/shop/api", ""),
        ),
        (
            "argocd/jobs.yaml".into(),
            directory_app("jobs", "worker=registry.example/shop/worker", ""),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/jobs/deployment.yaml".into(),
            deployment("registry.example/shop/worker:3.0.0"),
        ),
        (
            "apps/cron/deployment.yaml".into(),
            deployment("registry.example/shop/cron:1.0.0"),
        ),
    ]);
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        &repo,
        "",
        &[(
            "cron.yaml",
            &policy_file("cron", "registry.example/shop/cron", "^1", "apps/cron/**"),
        )],
    );
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/worker: {tags: [\"3.0.0\", \"3.1.0\"]}\nregistry.example/shop/cron: {tags: [\"1.0.0\", \"1.2.0\"]}\n",
    )
    .unwrap();
    let scans = Scans::default();
    let applied = cycle(&config, dir.path(), &registry, &scans, false).await;

    assert!(
        applied.plan.problems.is_empty(),
        "{:?}",
        applied.plan.problems
    );
    assert_eq!(
        applied.repositories.len(),
        1,
        "one target: {:?}",
        applied.repositories
    );
    let outcome = &applied.repositories[0];
    assert_eq!(outcome.status, RepositoryStatus::Pushed);
    assert_eq!(
        outcome.commits.len(),
        1,
        "one commit: {:?}",
        outcome.commits
    );
    assert_eq!(
        outcome.sources,
        vec![
            format!(
                "policy file {}",
                dir.path().join("policies/cron.yaml").display()
            ),
            "Application jobs (git)".to_string(),
            "Application web (git)".to_string(),
        ]
    );
    assert_eq!(
        scans.0.load(Ordering::Relaxed),
        2,
        "one walk for the policy files, one for the Applications' images, on one checkout"
    );
    assert_eq!(repo.rev("main~1").unwrap(), before, "one commit on main");
    assert!(
        repo.show("main", "apps/web/deployment.yaml")
            .contains("api:1.1.0")
    );
    assert!(
        repo.show("main", "apps/jobs/deployment.yaml")
            .contains("worker:3.1.0")
    );
    assert!(
        repo.show("main", "apps/cron/deployment.yaml")
            .contains("cron:1.2.0")
    );
    let mut changed: Vec<&str> = applied
        .plan
        .changes
        .iter()
        .map(|c| c.policy.as_str())
        .collect();
    changed.sort();
    assert_eq!(changed, ["cron", "jobs/worker", "web/api"]);
    assert_eq!(registry.tag_list_calls(), 3, "one listing per image");

    let table = tagpilot::report::Report::new(&applied.plan, None)
        .with_repositories(&applied.repositories)
        .table();
    assert!(table.contains("named by: policy file"), "{table}");
    assert!(table.contains("Application jobs (git)"), "{table}");

    // The commit carried the new texts; the plan kept none of its own beside them (a large
    // file's memory, issue 17), and the report still counts the files from the changes.
    assert!(applied.plan.files.is_empty(), "{:?}", applied.plan.files);
    assert!(table.contains("3 changes in 3 files"), "{table}");
}

#[tokio::test]
async fn two_sources_that_want_different_tags_for_one_field_hold_it_and_name_both() {
    let repo = web_app_on_api_1_0_0("api=registry.example/shop/api:2.x", "");
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        &repo,
        "",
        &[(
            "api.yaml",
            &policy_file("api", "registry.example/shop/api", "^1", "apps/web/**"),
        )],
    );
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\", \"2.0.0\"]}\n",
    )
    .unwrap();
    let applied = cycle(&config, dir.path(), &registry, &(), false).await;

    assert!(
        applied.plan.changes.is_empty(),
        "{:?}",
        applied.plan.changes
    );
    assert_eq!(repo.rev("main").unwrap(), before, "nothing written");
    assert_eq!(applied.repositories[0].status, RepositoryStatus::UpToDate);
    let holds = &applied.plan.holds;
    assert_eq!(holds.len(), 2, "{holds:?}");
    for h in holds {
        assert_eq!(h.file, "apps/web/deployment.yaml");
        assert_eq!(h.current, "1.0.0");
        let reason = h.reason.to_string();
        assert!(
            reason.contains("api (policy file") && reason.contains("wants 1.1.0"),
            "{}",
            reason
        );
        assert!(
            reason.contains("web/api (Application web (git)) wants 2.0.0"),
            "{}",
            reason
        );
    }
    let image = &applied.applications.as_ref().unwrap()[0].images[0];
    assert_eq!(image.status, "held", "{image:?}");
}

/// An Application up to date on its field still claims it: a broader policy file moving the
/// field past the Application's range is a conflict, held and named, not a silent push the
/// Application then reports as "not moving backwards" (issue 28).
#[tokio::test]
async fn a_source_already_at_its_best_tag_still_holds_a_field_another_source_moves() {
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", "api=registry.example/shop/api:~2.4", ""),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:2.4.6"),
        ),
    ]);
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        &repo,
        "",
        &[(
            "api.yaml",
            &policy_file("api", "registry.example/shop/api", "^2", "apps/**"),
        )],
    );
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"2.4.0\", \"2.4.6\", \"2.5.0\"]}\n",
    )
    .unwrap();
    let applied = cycle(&config, dir.path(), &registry, &(), false).await;

    assert!(
        applied.plan.changes.is_empty(),
        "{:?}",
        applied.plan.changes
    );
    assert_eq!(repo.rev("main").unwrap(), before, "nothing written");
    let holds = &applied.plan.holds;
    assert_eq!(holds.len(), 2, "{holds:?}");
    for h in holds {
        assert_eq!(
            (h.file.as_str(), h.current.as_str()),
            ("apps/web/deployment.yaml", "2.4.6")
        );
        let reason = h.reason.to_string();
        assert!(
            reason.contains("api (policy file")
                && reason.contains("wants 2.5.0")
                && reason.contains("web/api (Application web (git)) is up to date at 2.4.6"),
            "{}",
            reason
        );
    }
    let image = &applied.applications.as_ref().unwrap()[0].images[0];
    assert_eq!(image.status, "held", "{image:?}");
}

#[tokio::test]
async fn two_sources_that_agree_on_a_field_make_one_edit() {
    let repo = web_app_on_api_1_0_0("api=registry.example/shop/api", "");
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        &repo,
        "",
        &[(
            "api.yaml",
            &policy_file("api", "registry.example/shop/api", "^1", "apps/web/**"),
        )],
    );
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let applied = cycle(&config, dir.path(), &registry, &(), false).await;
    assert!(applied.plan.holds.is_empty(), "{:?}", applied.plan.holds);
    assert!(
        applied.plan.problems.is_empty(),
        "{:?}",
        applied.plan.problems
    );
    assert_eq!(
        applied.plan.changes.len(),
        2,
        "each source reports its change"
    );
    assert_eq!(
        repo.show("main", "apps/web/deployment.yaml"),
        deployment("registry.example/shop/api:1.1.0")
    );
    // One edit, one line in the commit message; both sources in its trailers.
    let message = crate::support::git::git(&repo.path(), &["log", "-1", "--format=%B", "main"]);
    assert_eq!(
        message
            .matches("registry.example/shop/api: 1.0.0 -> 1.1.0 (apps/web/deployment.yaml)")
            .count(),
        1,
        "{message}"
    );
    assert!(message.contains("update 1 image(s)"), "{message}");
    assert!(
        message.contains("Tagpilot-Policy: api\n") && message.contains("Tagpilot-Policy: web/api"),
        "{message}"
    );
}

#[tokio::test]
async fn applications_on_a_pull_request_repository_open_a_pull_request_and_then_update_it() {
    set_test_secrets();
    let server = wiremock::MockServer::start().await;
    let repo = web_app_on_api_1_0_0("api=registry.example/shop/api", "");
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let forge = format!(
        "    forge:\n      github: {{apiUrl: '{}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      branch: {BRANCH}\n      title: 'Update images'\n",
        server.uri()
    );
    let config = setup(dir.path(), &repo, &forge, &[]);
    let registry = |tags: &str| {
        MemoryRegistry::from_yaml(&format!("registry.example/shop/api: {{tags: [{tags}]}}\n"))
            .unwrap()
    };

    expect_no_pulls_yet(&server).await;
    expect_create(
        &server,
        7,
        json!({"head": BRANCH, "base": "main", "title": "Update images"}),
    )
    .await;
    let opened = cycle(
        &config,
        dir.path(),
        &registry("\"1.0.0\", \"1.1.0\""),
        &(),
        false,
    )
    .await;
    assert!(
        opened.plan.problems.is_empty(),
        "{:?}",
        opened.plan.problems
    );
    let outcome = &opened.repositories[0];
    assert_eq!(
        outcome.status,
        RepositoryStatus::PullRequests,
        "{outcome:?}"
    );
    assert_eq!(outcome.pull_requests[0].status, "opened");
    assert_eq!(outcome.pull_requests[0].number, Some(7));
    assert_eq!(
        repo.rev("main").unwrap(),
        before,
        "the base is never pushed"
    );
    assert!(
        repo.show(BRANCH, "apps/web/deployment.yaml")
            .contains("api:1.1.0")
    );
    let requests = server.received_requests().await.unwrap();
    let body: serde_json::Value = requests
        .iter()
        .find(|r| r.method.as_str() == "POST" && r.url.path() == PULLS)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .unwrap();
    let body = body["body"].as_str().unwrap().to_owned();
    server.verify().await;
    server.reset().await;

    // A newer tag: the same pull request is updated in place.
    expect_list_open(&server, json!([pull(7, &body, false)])).await;
    expect_edit(&server, 7).await;
    let updated = cycle(
        &config,
        dir.path(),
        &registry("\"1.0.0\", \"1.1.0\", \"1.2.0\""),
        &(),
        false,
    )
    .await;
    let outcome = &updated.repositories[0];
    assert_eq!(outcome.pull_requests[0].status, "updated", "{outcome:?}");
    assert!(
        repo.show(BRANCH, "apps/web/deployment.yaml")
            .contains("api:1.2.0")
    );
    assert_eq!(repo.rev("main").unwrap(), before);
    server.verify().await;
}

/// What changed inside the image: the real registry's images name their source repository and
/// revision in their labels, so the pull request links the comparison and lists the commits
/// GitHub's compare API gives, and the commit message carries the link.
#[tokio::test]
async fn a_pull_request_says_what_changed_inside_the_image() {
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};
    const SOURCE: &str = "https://github.com/acme/api";
    const OLD: &str = "1111111111111111111111111111111111111111";
    const NEW: &str = "2222222222222222222222222222222222222222";
    set_test_secrets();
    let reg = TestRegistry::start(Auth::None).await;
    for (tag, revision) in [("1.0.0", OLD), ("1.1.0", NEW)] {
        let spec = ImageSpec::default()
            .label("org.opencontainers.image.source", SOURCE)
            .label("org.opencontainers.image.revision", revision);
        reg.push_tags("shop/api", &[tag], spec).await;
    }
    let image = reg.image("shop/api");
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", &format!("api={image}"), ""),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment(&format!("{image}:1.0.0")),
        ),
    ]);
    let server = wiremock::MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let forge = format!(
        "    forge:\n      github: {{apiUrl: '{}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      branch: {BRANCH}\n      title: 'Update images'\n",
        server.uri()
    );
    let config = setup(dir.path(), &repo, &forge, &[]);
    expect_no_pulls_yet(&server).await;
    expect_create(&server, 7, json!({"head": BRANCH, "base": "main"})).await;
    // The token reads the source repository: its commits between the two revisions.
    wiremock::Mock::given(wiremock::matchers::method("GET"))
        .and(wiremock::matchers::path(format!(
            "/repos/acme/api/compare/{OLD}...{NEW}"
        )))
        .respond_with(wiremock::ResponseTemplate::new(200).set_body_json(json!({
            "total_commits": 2,
            "commits": [
                {"sha": "a", "commit": {"message": "Fix the checkout rounding\n\nLong text."}},
                {"sha": "b", "commit": {"message": "Add retries to the payment call"}},
            ],
        })))
        .expect(1)
        .mount(&server)
        .await;

    let run = cycle(&config, dir.path(), &reg.client(), &(), false).await;
    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let change = &run.plan.changes[0];
    let source = change
        .source
        .as_ref()
        .expect("the change says what changed");
    let compare = format!("{SOURCE}/compare/{OLD}...{NEW}");
    assert_eq!(source.compare_url, compare);
    let requests = server.received_requests().await.unwrap();
    let body: serde_json::Value = requests
        .iter()
        .find(|r| r.method.as_str() == "POST" && r.url.path() == PULLS)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .unwrap();
    let body = body["body"].as_str().unwrap();
    assert!(
        body.contains(&format!("[1111111...2222222]({compare})")),
        "{body}"
    );
    assert!(
        body.contains("  - Fix the checkout rounding\n  - Add retries to the payment call\n"),
        "{body}"
    );
    let message = crate::support::git::git(&repo.path(), &["log", "-1", "--format=%B", BRANCH]);
    assert!(message.contains(&compare), "{message}");
    server.verify().await;
}

#[tokio::test]
async fn a_branch_named_after_the_changes_is_planned_once() {
    let key = "argocd-image-updater.argoproj.io/git-branch";
    let repo = web_app_on_api_1_0_0(
        "api=registry.example/shop/api",
        &format!("    {key}: \"main:image-updater-{{{{.SHA256}}}}\"\n"),
    );
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), &repo, "", &[]);
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    // Image Updater hashes the image name without its registry host.
    let branch = format!("image-updater-{}", hex_sha256("shop/api-1.0.0-1.1.0,"));
    for dry_run in [true, false] {
        let scans = Scans::default();
        let run = cycle(&config, dir.path(), &registry, &scans, dry_run).await;
        assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
        assert_eq!(run.repositories[0].branch, branch);
        assert_eq!(
            scans.0.load(Ordering::Relaxed),
            1,
            "the branch is named from the one plan (dry run: {dry_run})"
        );
    }
    assert!(
        repo.show(&branch, "apps/web/deployment.yaml")
            .contains("api:1.1.0")
    );
}

#[tokio::test]
async fn a_cancelled_cycle_starts_no_repository_target() {
    let repo = web_app_on_api_1_0_0("api=registry.example/shop/api", "");
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), &repo, "", &[]);
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let cancel = tokio_util::sync::CancellationToken::new();
    cancel.cancel();
    let input = engine::Input {
        config: &config,
        policies: &[],
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = engine::Context {
        registry: &registry,
        cache: Some(&cache),
        progress: &(),
        cancel,
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let cycle = engine::run(
        &input,
        &context,
        engine::Options {
            dry_run: false,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(cycle.cancelled);
    assert!(cycle.repositories.is_empty());
    assert_eq!(
        repo.rev("main").unwrap(),
        before,
        "nothing written once cancelled"
    );
}

/// A registry that holds each tag listing until `bound` listings are in flight at once (or
/// every listing still to come is), and records the most it saw. The listing of `last` waits
/// instead until every other listing has finished: a slow repository at the head of the
/// list, which must hold up no other (`head_waited_out` says whether it had to wait out
/// `PATIENCE` instead, as it did when a finished target waited in the planner's window until
/// the head was reported).
struct Gate {
    inner: MemoryRegistry,
    bound: usize,
    total: usize,
    last: tagpilot::image::Repository,
    /// Listings in flight, finished, and how often `bound` were in flight at once, as they
    /// change: what each held listing waits on.
    listings: tokio::sync::watch::Sender<Listings>,
    most: std::sync::atomic::AtomicUsize,
    head_waited_out: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Listings {
    in_flight: usize,
    finished: usize,
    full: usize,
}

impl tagpilot::registry::Registry for Gate {
    fn clock(&self) -> &dyn tagpilot::clock::Clock {
        self.inner.clock()
    }

    async fn list_tags(
        &self,
        repo: &tagpilot::image::Repository,
    ) -> Result<Vec<String>, tagpilot::registry::RegistryError> {
        let mut started = Listings::default();
        self.listings.send_modify(|l| {
            l.in_flight += 1;
            if l.in_flight >= self.bound {
                l.full += 1;
            }
            started = *l;
        });
        self.most.fetch_max(started.in_flight, Ordering::SeqCst);
        // Released once `bound` listings were in flight at once with this one (the others
        // may have finished by the time it looks), or every listing still to come is. Never
        // hangs: a planner that runs repositories one at a time waits out the bound and then
        // shows as one in flight at most.
        let mut listings = self.listings.subscribe();
        let released = listings.wait_for(|l| {
            if *repo == self.last {
                return l.finished + 1 >= self.total;
            }
            started.in_flight >= self.bound
                || l.full > started.full
                || l.in_flight + l.finished >= self.total
        });
        let waited_out = tokio::time::timeout(crate::support::PATIENCE, released)
            .await
            .is_err();
        if waited_out && *repo == self.last {
            self.head_waited_out.store(true, Ordering::SeqCst);
        }
        let listed = self.inner.list_tags(repo).await;
        self.listings.send_modify(|l| {
            l.in_flight -= 1;
            l.finished += 1;
        });
        listed
    }

    async fn inspect(
        &self,
        repo: &tagpilot::image::Repository,
        reference: &str,
        platforms: &[tagpilot::image::Platform],
    ) -> Result<tagpilot::registry::ImageInfo, tagpilot::registry::RegistryError> {
        self.inner.inspect(repo, reference, platforms).await
    }

    fn requires_signatures(&self, repo: &tagpilot::image::Repository) -> bool {
        self.inner.requires_signatures(repo)
    }

    async fn verify_signatures(
        &self,
        repo: &tagpilot::image::Repository,
        digest: &str,
        required: Option<&tagpilot::config::signatures::Requirement>,
    ) -> Result<tagpilot::registry::SignatureVerdict, tagpilot::registry::RegistryError> {
        self.inner.verify_signatures(repo, digest, required).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repositories_are_planned_concurrently_within_the_bound_and_reported_in_order() {
    const REPOS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    let mut repos = Vec::new();
    let mut yaml = String::from("concurrency:\n  repositories: 2\nrepositories:\n");
    let mut registry_yaml = String::new();
    for k in 0..REPOS {
        let image = format!("registry.example/shop/svc{k}");
        let repo = repo_with(&[(
            "apps/svc/deployment.yaml".into(),
            deployment(&format!("{image}:1.0.0")),
        )]);
        yaml.push_str(&format!(
            "  - name: m{k}\n    url: {}\n    branch: main\n",
            repo.file_url()
        ));
        std::fs::write(
            dir.path().join("policies").join(format!("svc{k}.yaml")),
            policy_file(&format!("svc{k}"), &image, "1.x", "apps/**")
                .replace("repository: manifests", &format!("repository: m{k}")),
        )
        .unwrap();
        registry_yaml.push_str(&format!("{image}: {{tags: [\"1.0.0\", \"1.1.0\"]}}\n"));
        repos.push(repo);
    }
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(&path, yaml).unwrap();
    let config = config::load(&path).unwrap();
    assert_eq!(config.concurrency.repositories, 2);
    let registry = Gate {
        inner: MemoryRegistry::from_yaml(&registry_yaml).unwrap(),
        bound: 2,
        total: REPOS,
        last: tagpilot::image::Repository::parse("registry.example/shop/svc0").unwrap(),
        listings: tokio::sync::watch::Sender::new(Listings::default()),
        most: Default::default(),
        head_waited_out: Default::default(),
    };
    let policies = policy::load(&config).expect("policies load");
    let cache = RepoCache::new(dir.path().join("cache"));
    let input = engine::Input {
        config: &config,
        policies: &policies,
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = engine::Context {
        registry: &registry,
        cache: Some(&cache),
        progress: &(),
        cancel: Default::default(),
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let options = engine::Options {
        dry_run: true,
        ..Default::default()
    };
    let planned = engine::run(&input, &context, options)
        .await
        .expect("engine cycle");
    assert_eq!(
        registry.most.load(Ordering::SeqCst),
        2,
        "two repositories in flight at once, never more"
    );
    assert!(
        !registry.head_waited_out.load(Ordering::SeqCst),
        "m0's slow listing held up the repositories after it"
    );
    // m0's plan ended after every other's; the report keeps the configured order.
    let names: Vec<&str> = planned
        .repositories
        .iter()
        .map(|r| r.repository.as_str())
        .collect();
    assert_eq!(names, ["m0", "m1", "m2", "m3", "m4"]);
    assert_eq!(
        planned.plan.changes.len(),
        REPOS,
        "{:?}",
        planned.plan.problems
    );
    assert!(
        planned.plan.problems.is_empty(),
        "{:?}",
        planned.plan.problems
    );
}

/// A re-check after a push notification (`Options::only_images`): the policies and
/// Applications that use the notified repositories are planned, nothing else is listed, and a
/// target none of them names is not even fetched (`elsewhere` has no repository behind it).
#[tokio::test]
async fn a_recheck_plans_only_what_uses_the_notified_repositories() {
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", "registry.example/shop/api", ""),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
        (
            "apps/db/deployment.yaml".into(),
            deployment("registry.example/shop/db:1.0.0"),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = format!("file://{}/nothing-here.git", dir.path().display());
    let cache_policy = policy_file("cache", "registry.example/shop/cache", "*", "apps/**")
        .replace("repository: manifests", "repository: elsewhere");
    let config = setup(
        dir.path(),
        &repo,
        &format!("  - name: elsewhere\n    url: {elsewhere}\n    branch: main\n"),
        &[
            (
                "db.yaml",
                &policy_file("db", "registry.example/shop/db", "*", "apps/db/**"),
            ),
            ("cache.yaml", &cache_policy),
        ],
    );
    let policies = policy::load(&config).expect("policies load");
    let cache = RepoCache::new(dir.path().join("cache"));
    let recheck = |images: &[&str]| {
        let images: std::collections::BTreeSet<_> = images
            .iter()
            .map(|i| tagpilot::image::Repository::parse(i).unwrap())
            .collect();
        let registry = MemoryRegistry::from_yaml(
            "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/db: {tags: [\"1.0.0\", \"1.1.0\"]}\nregistry.example/shop/cache: {tags: [\"1.0.0\"]}\n",
        )
        .unwrap();
        let (config, policies, cache) = (&config, &policies, &cache);
        async move {
            let input = engine::Input {
                config,
                policies,
                broken_policies: &[],
                local: None,
                cluster: None,
            };
            let context = engine::Context {
                registry: &registry,
                cache: Some(cache),
                progress: &(),
                cancel: Default::default(),
                state: None,
                clock: &tagpilot::clock::SystemClock,
                freeze: None,
            };
            let options = engine::Options {
                dry_run: true,
                only_images: Some(&images),
                ..Default::default()
            };
            let cycle = engine::run(&input, &context, options).await.unwrap();
            (cycle, registry.tag_list_calls())
        }
    };
    let summary = |cycle: &Cycle| {
        let changes: Vec<(String, String)> = cycle
            .plan
            .changes
            .iter()
            .map(|c| (c.file.clone(), c.to.clone()))
            .collect();
        let targets: Vec<&str> = cycle
            .repositories
            .iter()
            .map(|r| r.repository.as_str())
            .collect();
        (changes, targets.join(","))
    };

    let (db, listed) = recheck(&["registry.example/shop/db"]).await;
    assert_eq!(
        summary(&db),
        (
            vec![("apps/db/deployment.yaml".into(), "1.1.0".into())],
            "manifests".into()
        ),
        "{:#?}",
        db.plan
    );
    assert_eq!(listed, 1, "only shop/db is listed");

    let (api, listed) = recheck(&["registry.example/shop/api"]).await;
    assert_eq!(
        summary(&api),
        (
            vec![("apps/web/deployment.yaml".into(), "1.1.0".into())],
            "manifests".into()
        ),
        "{:#?}",
        api.plan
    );
    assert_eq!(listed, 1, "only shop/api is listed");

    let (unused, listed) = recheck(&["registry.example/shop/unused"]).await;
    assert_eq!(
        summary(&unused),
        (vec![], String::new()),
        "{:#?}",
        unused.plan
    );
    assert_eq!(listed, 0);
    assert!(
        unused.plan.problems.is_empty(),
        "{:#?}",
        unused.plan.problems
    );

    // Without the restriction, `elsewhere` is a target, and it cannot be fetched.
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/cache: {tags: [\"1.0.0\"]}\n").unwrap();
    let all = cycle(&config, dir.path(), &registry, &(), true).await;
    assert!(
        all.repositories
            .iter()
            .any(|r| r.repository == "elsewhere" && r.status == RepositoryStatus::Failed),
        "{:#?}",
        all.repositories
    );
}

/// Issue 17: an untagged reference is an implicit `latest`, and no registry is asked for a
/// placeholder tag. With the real registry's access log: an Application configured for Image
/// Updater replaces the untagged reference (as Image Updater does: its `update.go` gives an
/// untagged live image an empty tag, which any candidate replaces), a policy file holds its own
/// untagged reference as it holds `latest`, and no request names `(none)` (describing the
/// change used to ask for the manifest of the tag `(none)`).
#[tokio::test]
async fn an_untagged_reference_is_an_implicit_latest_and_no_placeholder_is_requested() {
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};
    let reg = TestRegistry::start_with_access_log(Auth::None).await;
    reg.push_tags(
        "shop/api",
        &["1.0.0", "1.1.0", "latest"],
        ImageSpec::default(),
    )
    .await;
    reg.push_tags("shop/worker", &["2.0.0", "latest"], ImageSpec::default())
        .await;
    let api = reg.image("shop/api");
    let worker = reg.image("shop/worker");
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app("web", &format!("api={api}"), ""),
        ),
        ("apps/web/deployment.yaml".into(), deployment(&api)),
        ("jobs/deployment.yaml".into(), deployment(&worker)),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = setup(
        dir.path(),
        &repo,
        "",
        &[(
            "worker.yaml",
            &policy_file("worker", &worker, ">=1.0.0", "jobs/**"),
        )],
    );
    let run = cycle(&config, dir.path(), &reg.client(), &(), true).await;
    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let changes: Vec<(&str, &str, &str)> = run
        .plan
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.from.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(changes, [("apps/web/deployment.yaml", "(none)", "1.1.0")]);
    let holds: Vec<(&str, String)> = run
        .plan
        .holds
        .iter()
        .map(|h| (h.file.as_str(), h.reason.to_string()))
        .collect();
    assert_eq!(holds.len(), 1, "{holds:?}");
    assert_eq!(holds[0].0, "jobs/deployment.yaml");
    assert!(
        holds[0]
            .1
            .starts_with("the reference has no tag, which is an implicit \"latest\""),
        "{}",
        holds[0].1
    );
    let requests = reg.requests();
    // Issue 34: an old version that is none names no source to compare with, so the new
    // image is not asked about either (it used to be, for a compare link that cannot be).
    assert!(
        !requests
            .iter()
            .any(|r| r.contains("/v2/shop/api/manifests/")),
        "the change was described without an old image: {requests:?}"
    );
    let placeholders: Vec<&String> = requests
        .iter()
        .filter(|r| r.contains("none") || r.contains("%28"))
        .collect();
    assert!(placeholders.is_empty(), "{placeholders:?}");
}

/// Issue 17, "Filters fail closed": an `allow-tags` regexp with a typo used to let every tag
/// through, and the image moved. Now nothing moves, and the plan has a problem that names the
/// Application, the annotation and its value.
#[tokio::test]
async fn an_allow_tags_regexp_that_does_not_compile_holds_the_image_with_a_problem() {
    let key = "argocd-image-updater.argoproj.io/api.allow-tags";
    let repo = web_app_on_api_1_0_0(
        "api=registry.example/shop/api",
        &format!("    {key}: 'regexp:^1\\.(\\d+'\n"),
    );
    let before = repo.rev("main").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = setup(dir.path(), &repo, "", &[]);
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    let run = cycle(&config, dir.path(), &registry, &(), false).await;
    assert!(run.plan.changes.is_empty(), "{:?}", run.plan.changes);
    let problems: Vec<String> = run
        .plan
        .problems
        .iter()
        .map(|p| p.reason.to_string())
        .collect();
    assert_eq!(
        problems,
        [format!(
            "application web: image \"api\": {key} `regexp:^1\\.(\\d+` cannot be read: invalid \
             regexp: error: unclosed group; the image is not updated"
        )]
    );
    assert_eq!(repo.rev("main").unwrap(), before, "nothing was pushed");
}

/// A proposal counts once it was written. A push the remote refused (a hook) proposed nothing:
/// the next cycle proposes what the registry offers then, even a lower tag, instead of holding
/// against the refused one as if it had been proposed (`writeback::records`).
#[tokio::test]
async fn a_refused_push_is_not_recorded_as_proposed_and_the_next_cycle_proposes_again() {
    set_test_secrets();
    let repo = BareRepo::new();
    repo.protect();
    let server = crate::support::git::HttpGitServer::start(repo.dir.path());
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies/api.yaml"),
        policy_file("api", "registry.example/api", "*", "apps/**"),
    )
    .unwrap();
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    auth: {{username: {}, passwordEnv: {HTTP_PASSWORD_ENV}}}\n",
            server.url("origin.git"),
            crate::support::git::HTTP_USER,
        ),
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    let policies = policy::load(&config).unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let state = tagpilot::state::State::open(&dir.path().join("state")).unwrap();
    let run = async |tags: &str| {
        let registry =
            MemoryRegistry::from_yaml(&format!("registry.example/api: {{tags: [{tags}]}}\n"))
                .unwrap();
        let input = engine::Input {
            config: &config,
            policies: &policies,
            broken_policies: &[],
            local: None,
            cluster: None,
        };
        let context = engine::Context {
            registry: &registry,
            cache: Some(&cache),
            progress: &(),
            cancel: Default::default(),
            state: Some(&state),
            clock: &tagpilot::clock::SystemClock,
            freeze: None,
        };
        engine::run(&input, &context, engine::Options::default())
            .await
            .expect("engine cycle")
    };

    // 1.3.0 is planned, and the hook refuses the push.
    let refused = run("\"1.0.0\", \"1.3.0\"").await;
    assert_eq!(
        refused.repositories[0].status,
        RepositoryStatus::Failed,
        "{:?}",
        refused.repositories
    );
    assert_eq!(state.last_proposal("manifests", "api"), None);

    // The hook is gone, and the registry now lists 1.2.9 as its newest (1.3.0 withdrawn, or a
    // lagging replica): 1.2.9 is proposed and pushed, not held against a refused 1.3.0.
    std::fs::remove_file(repo.path().join("hooks/pre-receive")).unwrap();
    let pushed = run("\"1.0.0\", \"1.2.9\"").await;
    assert!(pushed.plan.holds.is_empty(), "{:?}", pushed.plan.holds);
    assert_eq!(
        pushed.repositories[0].status,
        RepositoryStatus::Pushed,
        "{:?}",
        pushed.repositories
    );
    assert!(
        repo.show("main", crate::support::git::DEPLOYMENT_PATH)
            .contains("registry.example/api:1.2.9")
    );
    let recorded = state.last_proposal("manifests", "api").expect("recorded");
    assert_eq!(recorded.changes[0].to, "1.2.9");
}

/// `write.group: repository` with `write.renderedDiff`: two policies' changes land in one pull
/// request, and its one review comment renders what lands together. The Application `shop`
/// deploys both policies' files, so its render shows both images moving (rendered per policy,
/// it showed only the later policy's); `edge` deploys one of web's files; the pull request
/// body names both Applications.
#[tokio::test]
async fn a_merged_pull_request_gets_one_review_comment_rendering_every_policy_s_change() {
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};
    set_test_secrets();
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    reg.push_tags("shop/web", &["2.0.0", "2.1.0"], ImageSpec::default())
        .await;
    let (api, web) = (reg.image("shop/api"), reg.image("shop/web"));
    let app = |name: &str| {
        format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\nspec:\n  \
             destination: {{name: in-cluster, namespace: {name}}}\n  \
             source: {{repoURL: REPO_URL, path: apps/{name}, directory: {{}}}}\n"
        )
    };
    let named =
        |name: &str, image: &str| deployment(image).replace("name: x", &format!("name: {name}"));
    let repo = repo_with(&[
        ("argocd/shop.yaml".into(), app("shop")),
        ("argocd/edge.yaml".into(), app("edge")),
        (
            "apps/shop/api.yaml".into(),
            named("api", &format!("{api}:1.0.0")),
        ),
        (
            "apps/shop/web.yaml".into(),
            named("web", &format!("{web}:2.0.0")),
        ),
        (
            "apps/edge/web.yaml".into(),
            named("edge", &format!("{web}:2.0.0")),
        ),
    ]);
    let server = wiremock::MockServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let forge = format!(
        "    forge:\n      github: {{apiUrl: '{}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      group: repository\n      branch: {BRANCH}\n      title: 'Update images'\n      renderedDiff: true\n",
        server.uri()
    );
    let config = setup(
        dir.path(),
        &repo,
        &forge,
        &[
            ("api.yaml", &policy_file("api", &api, "*", "apps/**")),
            ("web.yaml", &policy_file("web", &web, "*", "apps/**")),
        ],
    );
    expect_no_pulls_yet(&server).await;
    expect_create(&server, 7, json!({"head": BRANCH, "base": "main"})).await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path(
            crate::support::github::comments_path(7),
        ))
        .respond_with(crate::support::github::created(json!({"id": 1})))
        .expect(1)
        .mount(&server)
        .await;
    let opened = cycle(&config, dir.path(), &reg.client(), &(), false).await;
    assert!(
        opened.plan.problems.is_empty(),
        "{:?}",
        opened.plan.problems
    );
    assert_eq!(opened.plan.changes.len(), 3, "{:?}", opened.plan.changes);
    let requests = server.received_requests().await.unwrap();
    let sent = |path: &str| -> String {
        let body: serde_json::Value = requests
            .iter()
            .find(|r| r.method.as_str() == "POST" && r.url.path() == path)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .unwrap();
        body["body"].as_str().unwrap().to_owned()
    };
    let moved = |image: &str, from: &str, to: &str| {
        format!("-      - image: {image}:{from}\n+      - image: {image}:{to}\n")
    };
    let comment = sent(&crate::support::github::comments_path(7));
    // Shop's part of the comment: up to edge's, whichever comes first.
    let at = comment.find("<code>shop</code>").expect("shop is rendered");
    let shop = comment[at..].split("<code>edge</code>").next().unwrap();
    assert!(
        shop.contains("2 resources change")
            && shop.contains("#### `Deployment/api`")
            && shop.contains(&moved(&api, "1.0.0", "1.1.0"))
            && shop.contains("#### `Deployment/web`")
            && shop.contains(&moved(&web, "2.0.0", "2.1.0")),
        "{comment}"
    );
    assert!(
        comment.contains("<code>edge</code>") && comment.contains("#### `Deployment/edge`"),
        "{comment}"
    );
    let body = sent(PULLS);
    assert!(
        body.contains("| `shop` |") && body.contains("| `edge` |"),
        "{body}"
    );
    server.verify().await;
}

/// `write.renderedDiff`: the engine renders the Application the change deploys (a plain
/// directory here) before and after, and the pull request gets the diff as a comment.
#[tokio::test]
async fn a_pull_request_gets_the_rendered_diff_of_the_applications_it_deploys() {
    set_test_secrets();
    let server = wiremock::MockServer::start().await;
    let repo = web_app_on_api_1_0_0("api=registry.example/shop/api", "");
    let dir = tempfile::tempdir().unwrap();
    let forge = format!(
        "    forge:\n      github: {{apiUrl: '{}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      branch: {BRANCH}\n      title: 'Update images'\n      renderedDiff: true\n",
        server.uri()
    );
    let config = setup(dir.path(), &repo, &forge, &[]);
    let registry =
        MemoryRegistry::from_yaml("registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\"]}\n")
            .unwrap();
    expect_no_pulls_yet(&server).await;
    expect_create(
        &server,
        7,
        json!({"head": BRANCH, "base": "main", "title": "Update images"}),
    )
    .await;
    wiremock::Mock::given(wiremock::matchers::method("POST"))
        .and(wiremock::matchers::path(
            crate::support::github::comments_path(7),
        ))
        .respond_with(crate::support::github::created(json!({"id": 1})))
        .expect(1)
        .mount(&server)
        .await;
    let opened = cycle(&config, dir.path(), &registry, &(), false).await;
    assert!(
        opened.plan.problems.is_empty(),
        "{:?}",
        opened.plan.problems
    );
    let requests = server.received_requests().await.unwrap();
    let comment: serde_json::Value = requests
        .iter()
        .find(|r| r.method.as_str() == "POST" && r.url.path().ends_with("/comments"))
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .unwrap();
    let comment = comment["body"].as_str().unwrap();
    assert!(
        comment.contains("<code>web</code>") && comment.contains("1 resource changes"),
        "{comment}"
    );
    assert!(
        comment.contains("#### `Deployment/x`")
            && comment.contains(
                "-      - image: registry.example/shop/api:1.0.0\n+      - image: registry.example/shop/api:1.1.0\n"
            ),
        "{comment}"
    );
    server.verify().await;
}
