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
    assert_eq!(pushed.plan.repositories[0].status, RepositoryStatus::Pushed);
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
    let reason = &held.plan.holds[0].reason;
    assert!(
        reason.starts_with(&format!(
            "held: rolled back to 1.2.0 by Other Writer <other@example.org> in {}",
            &rollback[..12]
        )),
        "{reason}"
    );
    assert_eq!(state.holds().unwrap(), [found.clone()]);

    // A restart: the store opened again still holds it, and the next cycle honours it.
    drop(state);
    let state = State::open(&state_dir).unwrap();
    assert_eq!(state.holds().unwrap(), [found.clone()]);
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
    assert_eq!(newer.plan.ended_holds, [found.clone()]);
    assert!(state.holds().unwrap().is_empty());
    assert!(
        repo.show("main", DEPLOYMENT_PATH)
            .contains("registry.example/api:1.4.0")
    );
}
