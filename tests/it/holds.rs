//! Holds end to end over real git remotes: a person's rollback held at their value (naming who
//! and which commit), never proposed again, kept across a restart, ended by a newer tag.

use std::path::Path;

use tagpilot::config::{self, Config};
use tagpilot::engine::{self, Cycle};
use tagpilot::git::RepoCache;
use tagpilot::holds::HoldReason;
use tagpilot::plan::RepositoryStatus;
use tagpilot::policy::{self, ImagePolicy};
use tagpilot::registry::MemoryRegistry;
use tagpilot::state::State;

use crate::support::git::{BareRepo, DEPLOYMENT_PATH};

struct Setup {
    config: Config,
    policies: Vec<ImagePolicy>,
    cache: RepoCache,
}

fn setup(dir: &Path, repo: &BareRepo) -> Setup {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(
        dir.join("policies/api.yaml"),
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: registry.example/api\n  strategy:\n    semver: {range: \"*\"}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n",
    )
    .unwrap();
    let path = dir.join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    let policies = policy::load(&config).unwrap();
    Setup {
        config,
        policies,
        cache: RepoCache::new(dir.join("cache")),
    }
}

async fn cycle(setup: &Setup, state: &State, tags: &str) -> Cycle {
    let registry =
        MemoryRegistry::from_yaml(&format!("registry.example/api: {{tags: [{tags}]}}\n")).unwrap();
    let input = engine::Input {
        config: &setup.config,
        policies: &setup.policies,
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = engine::Context {
        registry: &registry,
        cache: Some(&setup.cache),
        progress: &(),
        cancel: Default::default(),
        state: Some(state),
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    engine::run(&input, &context, engine::Options::default())
        .await
        .expect("engine cycle")
}

/// A person, without tagpilot's trailer, moves the api image back from 1.3.0 to 1.2.0.
fn roll_back(repo: &BareRepo) -> String {
    let text = repo.show("main", DEPLOYMENT_PATH);
    assert!(text.contains("registry.example/api:1.3.0"), "{text}");
    repo.push_change(
        "main",
        DEPLOYMENT_PATH,
        &text.replace("registry.example/api:1.3.0", "registry.example/api:1.2.0"),
        "api 1.3.0 breaks checkout; back to 1.2.0",
    );
    repo.rev("main").unwrap()
}

#[tokio::test]
async fn a_persons_rollback_is_held_across_restarts_until_a_newer_tag_appears() {
    let repo = BareRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let setup = setup(dir.path(), &repo);
    let state_dir = dir.path().join("state");
    let tags = "\"1.0.0\", \"1.2.0\", \"1.3.0\"";
    let state = State::open(&state_dir).unwrap();

    // tagpilot pushes 1.3.0; a cycle later the branch is as it left it.
    let pushed = cycle(&setup, &state, tags).await;
    assert_eq!(pushed.repositories[0].status, RepositoryStatus::Pushed);
    let idle = cycle(&setup, &state, tags).await;
    assert!(idle.plan.changes.is_empty(), "{:?}", idle.plan.changes);

    // A person rolls it back; the next cycle holds the field at their value, naming them and
    // their commit, and does not propose 1.3.0 again.
    let rollback = roll_back(&repo);
    let held = cycle(&setup, &state, tags).await;
    assert!(held.plan.changes.is_empty(), "{:?}", held.plan.changes);
    assert_eq!(repo.rev("main").unwrap(), rollback, "nothing was pushed");
    assert_eq!(
        held.plan.holds_found.len(),
        1,
        "{:?}",
        held.plan.holds_found
    );
    let found = &held.plan.holds_found[0];
    assert_eq!(found.tag, "1.3.0");
    assert_eq!(
        found.reason,
        HoldReason::RolledBack {
            to: "1.2.0".into(),
            commit: rollback.clone(),
            author: "Other Writer <other@example.org>".into(),
        }
    );
    assert_eq!(found.key.field, "Deployment/api container api");
    assert_eq!(found.key.file, DEPLOYMENT_PATH);
    let reason = held.plan.holds[0].reason.to_string();
    assert!(
        reason.starts_with(&format!(
            "held: rolled back to 1.2.0 by Other Writer <other@example.org> in {}",
            &rollback[..12]
        )),
        "{reason}"
    );
    assert_eq!(state.holds().unwrap(), std::slice::from_ref(found));

    // A restart: the store opened again still holds it, and the next cycle honours it.
    drop(state);
    let state = State::open(&state_dir).unwrap();
    assert_eq!(state.holds().unwrap(), std::slice::from_ref(found));
    let after_restart = cycle(&setup, &state, tags).await;
    assert!(
        after_restart.plan.changes.is_empty(),
        "{:?}",
        after_restart.plan.changes
    );
    assert!(after_restart.plan.holds_found.is_empty());
    assert_eq!(after_restart.plan.holds.len(), 1);
    assert_eq!(repo.rev("main").unwrap(), rollback);

    // 1.4.0 appears: the hold ends, and 1.4.0 is pushed.
    let newer = cycle(&setup, &state, "\"1.2.0\", \"1.3.0\", \"1.4.0\"").await;
    let to: Vec<&str> = newer.plan.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(to, ["1.4.0"]);
    assert_eq!(newer.plan.ended_holds, std::slice::from_ref(found));
    assert!(state.holds().unwrap().is_empty());
    assert!(
        repo.show("main", DEPLOYMENT_PATH)
            .contains("registry.example/api:1.4.0")
    );
}

fn tagpilot(dir: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_tagpilot"))
        .current_dir(dir)
        .args(args)
        .env_remove("TAGPILOT_STATE_DIR")
        .output()
        .expect("run tagpilot")
}

fn text(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn a_rollback_hold() -> tagpilot::holds::HeldTag {
    tagpilot::holds::HeldTag {
        key: tagpilot::holds::FieldKey {
            repository: Some("manifests".into()),
            policy: "api".into(),
            file: DEPLOYMENT_PATH.into(),
            field: "Deployment/api container api".into(),
        },
        tag: "1.3.0".into(),
        reason: HoldReason::RolledBack {
            to: "1.2.0".into(),
            commit: "4b825dc642cb6eb9a060e54bf8d69288fbee4904".into(),
            author: "Dana Ops <dana@example.com>".into(),
        },
        since: "2026-11-25T10:00:00Z".parse().unwrap(),
    }
}

/// `tagpilot holds` lists what the store holds (table and JSON) and `holds release --id`
/// releases it; while a service holds the directory the command says how to reach it instead.
#[test]
fn holds_are_listed_and_released_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let state_dir = dir.path().join("state");
    let held = a_rollback_hold();
    {
        let state = State::open(&state_dir).unwrap();
        state.hold(&held).unwrap();
    }
    let dir_arg = state_dir.to_str().unwrap();
    let listed = tagpilot(dir.path(), &["holds", "--state-dir", dir_arg]);
    assert!(listed.status.success(), "{}", text(&listed));
    let table = String::from_utf8_lossy(&listed.stdout);
    for expected in [
        "ID",
        "WHO",
        held.key.id().as_str(),
        "api",
        "manifests:apps/api/deployment.yaml Deployment/api container api",
        "1.3.0",
        "rolled back to 1.2.0 by Dana Ops <dana@example.com> in 4b825dc642cb",
        "2026-11-25T10:00:00Z",
    ] {
        assert!(table.contains(expected), "{expected:?} in\n{table}");
    }
    let json = tagpilot(
        dir.path(),
        &["holds", "--state-dir", dir_arg, "--format", "json"],
    );
    let views: Vec<tagpilot::holds::HoldView> = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(views, [held.view()]);

    // A running service owns the directory: the command names it and the way around.
    {
        let _service = tagpilot::run::lock::StateLock::acquire(&state_dir).unwrap();
        let busy = tagpilot(dir.path(), &["holds", "--state-dir", dir_arg]);
        assert!(!busy.status.success());
        assert!(
            text(&busy).contains("in use by a running `tagpilot run`"),
            "{}",
            text(&busy)
        );
    }

    let id = held.key.id();
    let released = tagpilot(
        dir.path(),
        &["holds", "release", "--state-dir", dir_arg, "--id", &id],
    );
    assert!(released.status.success(), "{}", text(&released));
    assert!(text(&released).contains("released"), "{}", text(&released));
    let again = tagpilot(
        dir.path(),
        &["holds", "release", "--state-dir", dir_arg, "--id", &id],
    );
    assert!(!again.status.success());
    assert!(text(&again).contains("no hold with id"), "{}", text(&again));
    let empty = tagpilot(dir.path(), &["holds", "--state-dir", dir_arg]);
    assert_eq!(String::from_utf8_lossy(&empty.stdout), "No held tags.\n");
}

/// While `tagpilot run` owns the store, `tagpilot holds --url` reads its `GET /holds`.
#[tokio::test]
async fn a_running_service_lists_its_holds_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&dir.path().join("state")).unwrap();
    let held = a_rollback_hold();
    state.hold(&held).unwrap();
    let shared = std::sync::Arc::new(tagpilot::run::http::Shared {
        state: Some(std::sync::Arc::new(state)),
        ..Default::default()
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let kept = shared.clone();
    tokio::spawn(async move { axum::serve(listener, tagpilot::run::http::router(shared)).await });
    let dir_path = dir.path().to_path_buf();
    let url_arg = url.clone();
    let out = tokio::task::spawn_blocking(move || {
        tagpilot(&dir_path, &["holds", "--url", &url_arg, "--format", "json"])
    })
    .await
    .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let views: Vec<tagpilot::holds::HoldView> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(views, [held.view()]);
    // A release needs a token; a service configured with none refuses it, never releases
    // unauthenticated.
    let dir_path = dir.path().to_path_buf();
    let id = held.key.id();
    let (without, refused) = tokio::task::spawn_blocking(move || {
        let release = ["holds", "release", "--url", &url, "--id", &id];
        let without = tagpilot(&dir_path, &release);
        let refused = std::process::Command::new(env!("CARGO_BIN_EXE_tagpilot"))
            .current_dir(&dir_path)
            .args(release)
            .env("TAGPILOT_HOLDS_TOKEN", "a-token")
            .output()
            .unwrap();
        (without, refused)
    })
    .await
    .unwrap();
    assert!(!without.status.success());
    assert!(
        text(&without).contains("needs the service's holds.releaseToken"),
        "{}",
        text(&without)
    );
    assert!(!refused.status.success());
    assert!(
        text(&refused).contains("answered 403")
            && text(&refused).contains("configure holds.releaseToken"),
        "{}",
        text(&refused)
    );
    let holds = kept.state.as_ref().unwrap().holds().unwrap();
    assert_eq!(holds.len(), 1, "released without a configured token");
}

/// An Application's `tagpilot.dev/hold` holds a tag of its image (the next-best is proposed),
/// and `tagpilot.dev/release-hold` releases a hold the store keeps, in the next cycle.
#[tokio::test]
async fn an_application_annotation_holds_and_releases() {
    use crate::argocd::{deployment, directory_app, repo_with};
    let repo = repo_with(&[
        (
            "argocd/web.yaml".into(),
            directory_app(
                "web",
                "api=registry.example/shop/api",
                "    tagpilot.dev/hold: api=1.2.0\n    tagpilot.dev/release-hold: api=1.1.0\n",
            ),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment("registry.example/shop/api:1.0.0"),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "repositories:\n  - name: manifests\n    url: {}\n    branch: main\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/*.yaml\"]\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let setup = Setup {
        config: config::load(&path).unwrap(),
        policies: Vec::new(),
        cache: RepoCache::new(dir.path().join("cache")),
    };
    let state = State::open(&dir.path().join("state")).unwrap();
    // 1.1.0 failed before; the annotation releases that hold.
    let failed = tagpilot::holds::HeldTag {
        key: tagpilot::holds::FieldKey {
            repository: Some("manifests".into()),
            policy: "web/api".into(),
            file: "apps/web/deployment.yaml".into(),
            field: "Deployment/app container app".into(),
        },
        tag: "1.1.0".into(),
        reason: HoldReason::Failed {
            application: "argocd/web".into(),
            failure: "health Degraded".into(),
        },
        since: "2026-11-25T10:00:00Z".parse().unwrap(),
    };
    state.hold(&failed).unwrap();
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\", \"1.2.0\"]}\n",
    )
    .unwrap();
    let input = engine::Input {
        config: &setup.config,
        policies: &[],
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = engine::Context {
        registry: &registry,
        cache: Some(&setup.cache),
        progress: &(),
        cancel: Default::default(),
        state: Some(&state),
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let run = engine::run(&input, &context, engine::Options::default())
        .await
        .expect("engine cycle");
    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let to: Vec<&str> = run.plan.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(
        to,
        ["1.1.0"],
        "1.2.0 is held by the annotation; 1.1.0 released"
    );
    assert!(state.holds().unwrap().is_empty(), "{:?}", state.holds());
    let skipped: Vec<_> = run
        .applications
        .iter()
        .flatten()
        .flat_map(|a| a.skipped_annotations.iter())
        .collect();
    assert!(skipped.is_empty(), "{skipped:?}");
}

/// `tagpilot plan --state-dir` honours and shows the store's holds: the failed tag is not
/// proposed, and the hold names why; without the store the same plan proposes it.
#[tokio::test]
async fn plan_with_the_state_dir_honours_its_holds() {
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.2.3", "1.3.0"], ImageSpec::default())
        .await;
    let image = reg.image("shop/api");
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "tagpilot.yaml",
        &format!(
            "registries:\n{}policies: policies/\n",
            reg.registries_yaml()
        ),
    );
    write(
        "policies/api.yaml",
        &format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {image}\n  strategy:\n    semver: {{range: \"1.x\"}}\n"
        ),
    );
    write(
        "apps/api/deployment.yaml",
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:1.2.3\n"
        ),
    );
    let state_dir = dir.path().join("state");
    State::open(&state_dir)
        .unwrap()
        .hold(&tagpilot::holds::HeldTag {
            key: tagpilot::holds::FieldKey {
                repository: None,
                policy: "api".into(),
                file: "apps/api/deployment.yaml".into(),
                field: "Deployment/api container api".into(),
            },
            tag: "1.3.0".into(),
            reason: HoldReason::Failed {
                application: "argocd/api".into(),
                failure: "health Degraded after the sync".into(),
            },
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
        })
        .unwrap();
    // What a `tagpilot run` left under way in the same store: the plan shows it.
    let field = |to: &str| tagpilot::state::VerifiedField {
        key: tagpilot::holds::FieldKey {
            repository: Some("manifests".into()),
            policy: "web".into(),
            file: "apps/web/deployment.yaml".into(),
            field: "Deployment/web container web".into(),
        },
        image: "registry.example/shop/web".into(),
        line: 9,
        from: "2.0.0".into(),
        to: to.into(),
        on_failure: tagpilot::config::verify::OnFailure::Hold,
        promoted_at: None,
    };
    State::open(&state_dir)
        .unwrap()
        .start_verification(&tagpilot::state::PendingVerification {
            application: "argocd/shop-web".into(),
            repository: "manifests".into(),
            commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
            status_commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
            timeout: std::time::Duration::from_secs(900),
            fields: vec![field("2.1.0")],
        })
        .unwrap();
    let plan = |args: Vec<String>| {
        let dir = dir.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = tagpilot(&dir, &args);
            serde_json::from_slice::<serde_json::Value>(&out.stdout)
                .unwrap_or_else(|e| panic!("{e}: {}", text(&out)))
        })
    };
    let json = vec!["plan".to_string(), "--format".into(), "json".into()];
    let free = plan(json.clone()).await.unwrap();
    assert_eq!(free["changes"][0]["to"], "1.3.0", "{free:#}");
    let mut with_store = json;
    with_store.extend(["--state-dir".to_string(), state_dir.display().to_string()]);
    let held = plan(with_store).await.unwrap();
    assert_eq!(held["changes"], serde_json::json!([]), "{held:#}");
    assert_eq!(
        held["holds"][0]["reason"],
        "held: failed in Application argocd/api: health Degraded after the sync since \
         2026-11-25T10:00:00Z; 1.3.0 is not proposed again",
        "{held:#}"
    );
    let pending = held["verifications_pending"][0]
        .as_str()
        .unwrap_or_default();
    assert!(
        pending.starts_with("argocd/shop-web: manifests 8f2c1d0 since 2026-11-25T10:00:00Z")
            && pending.contains("2.0.0 → 2.1.0"),
        "{held:#}"
    );
    assert!(
        free.get("verifications_pending").is_none(),
        "without the store, nothing is said to be under way: {free:#}"
    );
}

/// The annotation's hold also keeps the tag out of an `.argocd-source-<app>.yaml` file, the way
/// Image Updater writes a Helm Application without a write-back target.
#[tokio::test]
async fn an_annotation_hold_reaches_argocd_source_files() {
    use crate::argocd::repo_with;
    let repo = repo_with(&[
        (
            "argocd/shop.yaml".into(),
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: api=registry.example/shop/api\n    argocd-image-updater.argoproj.io/write-back-method: git\n    tagpilot.dev/hold: api=1.2.0\nspec:\n  source: {repoURL: REPO_URL, path: apps/shop, helm: {}}\n".into(),
        ),
        (
            "apps/shop/values.yaml".into(),
            "image:\n  repository: registry.example/shop/api\n  tag: 1.0.0\n".into(),
        ),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "repositories:\n  - name: manifests\n    url: {}\n    branch: main\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/*.yaml\"]\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    let registry = MemoryRegistry::from_yaml(
        "registry.example/shop/api: {tags: [\"1.0.0\", \"1.1.0\", \"1.2.0\"]}\n",
    )
    .unwrap();
    let run = crate::support::engine::cycle(&config, None, &cache, &registry, &(), true).await;
    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let changes: Vec<(&str, &str)> = run
        .plan
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(changes, [("apps/shop/.argocd-source-shop.yaml", "1.1.0")]);
}
