//! Promotion between environments (issue 20) over a real git remote: environments that follow
//! others (`promote:`) take what their upstreams run once it has soaked, through the one
//! engine cycle. Time is the test's: every commit is dated and each cycle decides at a time the
//! test sets (`engine::Options::now`), so no test waits for a soak time to pass.

use std::path::Path;

use jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};
use tagpilot::argocd::read::cluster::Loaded;
use tagpilot::config;
use tagpilot::engine::{self, Cycle};
use tagpilot::git::RepoCache;
use tagpilot::holds::{FieldKey, HeldTag, HoldReason};
use tagpilot::plan::PromotionStatus;
use tagpilot::policy;
use tagpilot::registry::MemoryRegistry;
use tagpilot::report;
use tagpilot::state::{PendingVerification, State, VerifiedField};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::git::BareRepo;

const IMAGE: &str = "registry.example/shop";

fn deployment(tag: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: shop\nspec:\n  template:\n    spec:\n      containers:\n        - name: shop\n          image: {IMAGE}:{tag}\n"
    )
}

fn file(env: &str) -> String {
    format!("envs/{env}/deployment.yaml")
}

/// Another writer commits `files` (environment, tag) to `main`, dated `at`.
fn push_at(repo: &BareRepo, files: &[(&str, &str)], at: Timestamp, message: &str) {
    let files: Vec<(String, String)> = files
        .iter()
        .map(|(env, tag)| (file(env), deployment(tag)))
        .collect();
    repo.commit_dated(&files, at, message);
}

/// A policy on the repository `manifests` for the environment `env`, with `extra` spec lines.
fn env_policy(env: &str, range: &str, extra: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: shop-{env}\nspec:\n  image: {IMAGE}\n  strategy:\n    semver: {{range: \"{range}\"}}\n{extra}  targets:\n    - repository: manifests\n      paths: [\"envs/{env}/**\"]\n"
    )
}

/// `promote:` from the policy of `upstream`. The scenarios' repository pushes, so the
/// promotions say `write: push` (a promotion is a pull request by default).
fn promote_from_policy(upstream: &str, after: &str) -> String {
    format!(
        "  promote:\n    from:\n      - policy: shop-{upstream}\n    after: {after}\n    write: push\n"
    )
}

struct Scenario {
    dir: tempfile::TempDir,
    repo: BareRepo,
    config: config::Config,
    registry: MemoryRegistry,
    /// The time the scenario's story is told from.
    t0: Timestamp,
}

impl Scenario {
    /// `policies` (file name, text) over a repository whose environments all run 1.0.0 since
    /// ten hours before `t0`, and a registry with 1.0.0 to 1.3.0.
    fn new(envs: &[&str], policies: &[(&str, String)]) -> Scenario {
        // A fixed time, so that the reports are golden.
        let t0: Timestamp = "2026-01-05T12:00:00Z".parse().unwrap();
        let repo = BareRepo::new();
        let all: Vec<(&str, &str)> = envs.iter().map(|e| (*e, "1.0.0")).collect();
        push_at(
            &repo,
            &all,
            t0 - SignedDuration::from_hours(10),
            "environments",
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("policies")).unwrap();
        for (name, text) in policies {
            std::fs::write(dir.path().join("policies").join(name), text).unwrap();
        }
        let path = dir.path().join("tagpilot.yaml");
        std::fs::write(
            &path,
            format!(
                "repositories:\n  - name: manifests\n    url: {}\n    branch: main\npolicies: policies/\n",
                repo.file_url()
            ),
        )
        .unwrap();
        let config = config::load(&path).unwrap();
        let registry = MemoryRegistry::from_yaml(&format!(
            "{IMAGE}: {{tags: [\"1.0.0\", \"1.1.0\", \"1.2.0\", \"1.3.0\"]}}\n"
        ))
        .unwrap();
        Scenario {
            dir,
            repo,
            config,
            registry,
            t0,
        }
    }

    fn at(&self, minutes: i64) -> Timestamp {
        self.t0 + SignedDuration::from_mins(minutes)
    }

    /// One cycle deciding at `t0 + minutes`.
    async fn cycle(&self, minutes: i64, dry_run: bool, state: Option<&State>) -> Cycle {
        self.cycle_in(minutes, dry_run, state, None).await
    }

    /// [`Scenario::cycle`] with the Applications of a cluster.
    async fn cycle_in(
        &self,
        minutes: i64,
        dry_run: bool,
        state: Option<&State>,
        cluster: Option<&Loaded>,
    ) -> Cycle {
        let policies = policy::load(&self.config).expect("policies load");
        let cache = RepoCache::new(self.dir.path().join("cache"));
        let input = engine::Input {
            config: &self.config,
            policies: &policies,
            broken_policies: &[],
            local: None,
            cluster,
        };
        // The cycle decides at `t0 + minutes`: its clock is set there, not waited for.
        let clock = tagpilot::clock::ManualClock::starting_at(self.at(minutes));
        let context = engine::Context {
            registry: &self.registry,
            cache: Some(&cache),
            progress: &(),
            cancel: Default::default(),
            state,
            clock: &clock,
            freeze: None,
        };
        let options = engine::Options {
            dry_run,
            ..Default::default()
        };
        engine::run(&input, &context, options).await.expect("cycle")
    }

    async fn plan(&self, minutes: i64) -> Cycle {
        self.cycle(minutes, true, None).await
    }

    /// This scenario with `applications.fromCluster` in its `tagpilot.yaml`: a cycle reads
    /// which files each cluster Application deploys.
    fn reading_applications_from_the_cluster(self) -> Scenario {
        let path = self.dir.path().join("tagpilot.yaml");
        let text = std::fs::read_to_string(&path).unwrap();
        std::fs::write(
            &path,
            format!("{text}applications:\n  fromCluster:\n    namespaces: [argocd]\n"),
        )
        .unwrap();
        Scenario {
            config: config::load(&path).unwrap(),
            ..self
        }
    }

    /// The Application `argocd/shop-staging`, deploying `envs/staging` of this scenario's
    /// repository and running `tag` healthy for two hours, served by `server` and loaded as the
    /// cluster's.
    async fn staging_deployed_from_the_cluster(&self, server: &MockServer, tag: &str) -> Loaded {
        let mut app = env_app("staging", tag, self.at(-120), "Healthy");
        app["spec"]["source"]["repoURL"] = json!(self.repo.file_url());
        let deployed: tagpilot::application::Application =
            serde_json::from_value(app.clone()).unwrap();
        let loaded = loaded(server, vec![deployed]).await;
        serve_apps(server, &[app]).await;
        loaded
    }
}

/// The cycle's report in every format, against `tests/golden/promotion/<case>/plan.*`: its
/// changes, holds and promotions (not the repository's outcome, whose commit ids and remote
/// path differ per run).
fn golden(cycle: &Cycle, case: &str) {
    let plan = tagpilot::plan::Plan {
        changes: cycle.plan.changes.clone(),
        holds: cycle.plan.holds.clone(),
        promotions: cycle.plan.promotions.clone(),
        up_to_date: cycle.plan.up_to_date,
        policies_used: cycle.plan.policies_used,
        ..Default::default()
    };
    let dir = crate::golden::case_dir("promotion", case);
    crate::golden::assert_text(&dir.join("plan.txt"), &report::table(&plan));
    crate::golden::assert_text(&dir.join("plan.json"), &report::json(&plan).unwrap());
    crate::golden::assert_text(&dir.join("plan.md"), &report::markdown(&plan));
}

/// The promotions row of `env`'s policy.
fn row<'c>(cycle: &'c Cycle, env: &str) -> &'c tagpilot::plan::Promotion {
    let policy = format!("shop-{env}");
    cycle
        .plan
        .promotions
        .iter()
        .find(|p| p.policy == policy)
        .unwrap_or_else(|| panic!("no promotion of {policy}: {:#?}", cycle.plan.promotions))
}

/// The tag `env`'s field moves to in the plan, if it moves.
fn moves_to(cycle: &Cycle, env: &str) -> Option<String> {
    let policy = format!("shop-{env}");
    cycle
        .plan
        .changes
        .iter()
        .find(|c| c.policy == policy)
        .map(|c| c.to.clone())
}

#[tokio::test]
async fn three_environments_promote_in_order_each_after_its_soak_time() {
    let s = Scenario::new(
        &["dev", "staging", "prod"],
        &[
            ("dev.yaml", env_policy("dev", "1.x", "")),
            (
                "staging.yaml",
                env_policy("staging", "1.x", &promote_from_policy("dev", "1h")),
            ),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_policy("staging", "2h")),
            ),
        ],
    );
    // dev took 1.1.0 half an hour ago.
    push_at(&s.repo, &[("dev", "1.1.0")], s.at(-30), "dev: 1.1.0");

    // Now: dev follows the registry (1.3.0); staging waits for dev's soak; prod runs what
    // staging runs.
    let now = s.plan(0).await;
    assert_eq!(moves_to(&now, "dev").as_deref(), Some("1.3.0"));
    assert_eq!(moves_to(&now, "staging"), None, "{:#?}", now.plan.changes);
    let staging = row(&now, "staging");
    assert_eq!(staging.status, PromotionStatus::Waits);
    assert_eq!(
        staging.waits,
        vec!["1.1.0 soaks in policy shop-dev: 30m left".to_string()]
    );
    assert_eq!(staging.upstreams[0].tag.as_deref(), Some("1.1.0"));
    assert_eq!(
        staging.upstreams[0].since.as_deref(),
        Some(
            s.at(-30)
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string()
                .as_str()
        )
    );
    assert!(
        now.plan
            .holds
            .iter()
            .any(|h| h.policy == "shop-staging" && h.reason.to_string().contains("30m left")),
        "a wait is a named hold: {:#?}",
        now.plan.holds
    );
    assert_eq!(row(&now, "prod").status, PromotionStatus::UpToDate);

    // An hour on, staging takes 1.1.0, with its evidence; prod still waits on staging.
    let later = s.plan(60).await;
    assert_eq!(moves_to(&later, "staging").as_deref(), Some("1.1.0"));
    let change = later
        .plan
        .changes
        .iter()
        .find(|c| c.policy == "shop-staging")
        .unwrap();
    let evidence = &change.promotion.as_ref().expect("evidence").upstreams[0];
    assert_eq!(evidence.upstream, "policy shop-dev");
    assert_eq!(evidence.healthy_for, "1h 30m");
    assert_eq!(
        evidence.verification,
        "on the base branch, no cluster access"
    );
    assert_eq!(row(&later, "prod").status, PromotionStatus::UpToDate);

    // Staging's promotion merged an hour in; prod waits two hours from there, then takes it.
    push_at(&s.repo, &[("staging", "1.1.0")], s.at(60), "staging: 1.1.0");
    let soaking = s.plan(120).await;
    golden(&soaking, "three-environments");
    assert_eq!(moves_to(&soaking, "prod"), None);
    assert_eq!(
        row(&soaking, "prod").waits,
        vec!["1.1.0 soaks in policy shop-staging: 1h left".to_string()]
    );
    let soaked = s.plan(180).await;
    assert_eq!(moves_to(&soaked, "prod").as_deref(), Some("1.1.0"));
    assert_eq!(row(&soaked, "prod").status, PromotionStatus::Promote);
    assert_eq!(row(&soaked, "prod").tag.as_deref(), Some("1.1.0"));

    // Written for real: one commit moves staging and prod... and dev, to what each may take.
    let applied = s.cycle(180, false, None).await;
    assert!(!applied.failed, "{:#?}", applied.plan.problems);
    assert!(s.repo.show("main", &file("prod")).contains(":1.1.0"));
    assert!(s.repo.show("main", &file("dev")).contains(":1.3.0"));
}

#[tokio::test]
async fn a_tag_that_failed_in_staging_never_reaches_prod() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_policy("staging", "1h")),
            ),
        ],
    );
    // Staging runs 1.2.0 since long ago; its verification failed and held it there (issue 19,
    // `onFailure: hold` leaves the change in place).
    push_at(
        &s.repo,
        &[("staging", "1.2.0")],
        s.at(-600),
        "staging: 1.2.0",
    );
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    state
        .hold(&HeldTag {
            key: FieldKey {
                repository: Some("manifests".into()),
                policy: "shop-staging".into(),
                file: file("staging"),
                field: "Deployment/shop container shop".into(),
            },
            tag: "1.2.0".into(),
            reason: HoldReason::Failed {
                application: "argocd/shop-staging".into(),
                failure: "health Degraded after the sync".into(),
            },
            since: s.at(-500),
        })
        .unwrap();

    for minutes in [0, 600, 6000] {
        let cycle = s.cycle(minutes, true, Some(&state)).await;
        assert_eq!(moves_to(&cycle, "prod"), None, "{:#?}", cycle.plan.changes);
        let prod = row(&cycle, "prod");
        assert_eq!(prod.status, PromotionStatus::Waits);
        assert!(
            prod.waits[0].starts_with("1.2.0 is held: in policy shop-staging: held: "),
            "{:?}",
            prod.waits
        );
        assert!(
            prod.waits[0].contains("health Degraded"),
            "{:?}",
            prod.waits
        );
    }
    // Without the hold the same plan would promote it: the hold is what stops it.
    assert_eq!(moves_to(&s.plan(0).await, "prod").as_deref(), Some("1.2.0"));
}

fn fan_in_policy(fan_in: &str) -> String {
    env_policy(
        "prod",
        "1.x",
        &format!(
            "  promote:\n    from:\n      - path: envs/staging-eu/deployment.yaml\n      - path: envs/staging-us/deployment.yaml\n    after: 1h\n    fanIn: {fan_in}\n    write: push\n"
        ),
    )
}

#[tokio::test]
async fn fan_in_all_waits_for_every_upstream_and_any_takes_the_newest() {
    let envs = ["staging-eu", "staging-us", "prod"];
    let all = Scenario::new(&envs, &[("prod.yaml", fan_in_policy("all"))]);
    push_at(
        &all.repo,
        &[("staging-eu", "1.2.0"), ("staging-us", "1.1.0")],
        all.at(-120),
        "staging",
    );
    let cycle = all.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec![
            "the upstreams run different tags (envs/staging-eu/deployment.yaml runs 1.2.0, \
             envs/staging-us/deployment.yaml runs 1.1.0)"
                .to_string()
        ]
    );
    // Once both run 1.2.0 (and have for an hour), prod takes it.
    push_at(
        &all.repo,
        &[("staging-us", "1.2.0")],
        all.at(-60),
        "us: 1.2.0",
    );
    assert_eq!(
        moves_to(&all.plan(0).await, "prod").as_deref(),
        Some("1.2.0")
    );

    let any = Scenario::new(&envs, &[("prod.yaml", fan_in_policy("any"))]);
    push_at(
        &any.repo,
        &[("staging-eu", "1.2.0"), ("staging-us", "1.1.0")],
        any.at(-120),
        "staging",
    );
    let cycle = any.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
    let change = cycle
        .plan
        .changes
        .iter()
        .find(|c| c.policy == "shop-prod")
        .unwrap();
    let evidence = &change.promotion.as_ref().unwrap().upstreams;
    assert_eq!(
        evidence.len(),
        1,
        "only the upstream that runs it: {evidence:?}"
    );
    assert_eq!(evidence[0].upstream, "envs/staging-eu/deployment.yaml");
}

#[tokio::test]
async fn an_upstream_that_reverts_is_not_followed_to_the_reverted_tag_and_soaks_again() {
    let s = Scenario::new(
        &["dev", "staging"],
        &[
            ("dev.yaml", env_policy("dev", "1.x", "")),
            (
                "staging.yaml",
                env_policy("staging", "1.x", &promote_from_policy("dev", "1h")),
            ),
        ],
    );
    push_at(&s.repo, &[("dev", "1.2.0")], s.at(-360), "dev: 1.2.0");
    push_at(&s.repo, &[("dev", "1.3.0")], s.at(-180), "dev: 1.3.0");
    // Soaked: staging would take 1.3.0.
    assert_eq!(
        moves_to(&s.plan(0).await, "staging").as_deref(),
        Some("1.3.0")
    );
    // dev reverts to 1.2.0: staging does not take 1.3.0, and 1.2.0 counts from the revert.
    push_at(
        &s.repo,
        &[("dev", "1.2.0")],
        s.at(-10),
        "Revert \"dev: 1.3.0\"",
    );
    let cycle = s.plan(0).await;
    assert_eq!(
        moves_to(&cycle, "staging"),
        None,
        "{:#?}",
        cycle.plan.changes
    );
    assert_eq!(
        row(&cycle, "staging").waits,
        vec!["1.2.0 soaks in policy shop-dev: 50m left".to_string()]
    );
    // Once 1.2.0 has soaked from the revert, staging takes it (and never 1.3.0).
    let soaked = s.plan(50).await;
    assert_eq!(moves_to(&soaked, "staging").as_deref(), Some("1.2.0"));
    assert_eq!(row(&soaked, "staging").status, PromotionStatus::Promote);
}

#[tokio::test]
async fn the_downstream_keeps_its_own_range_and_never_moves_backwards() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy("prod", "<1.2", &promote_from_policy("staging", "1h")),
            ),
        ],
    );
    push_at(
        &s.repo,
        &[("staging", "1.2.0"), ("prod", "1.1.0")],
        s.at(-120),
        "envs",
    );
    let cycle = s.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert!(
        row(&cycle, "prod").waits[0]
            .starts_with("1.2.0 is not allowed here: policy shop-prod: out of range"),
        "{:?}",
        row(&cycle, "prod").waits
    );
    // Staging behind prod: up to date, never backwards.
    push_at(&s.repo, &[("staging", "1.0.0")], s.at(-100), "staging back");
    let cycle = s.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(row(&cycle, "prod").status, PromotionStatus::UpToDate);
}

#[tokio::test]
async fn a_promotion_is_a_pull_request_unless_its_policy_says_push() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy(
                    "prod",
                    "1.x",
                    "  promote:\n    from:\n      - policy: shop-staging\n",
                ),
            ),
        ],
    );
    push_at(
        &s.repo,
        &[("staging", "1.2.0")],
        s.at(-120),
        "staging: 1.2.0",
    );
    let cycle = s.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    // Its upstreams were read: the wait names the push, not an unreadable upstream.
    let prod = row(&cycle, "prod");
    assert_eq!(prod.upstreams[0].tag.as_deref(), Some("1.2.0"));
    assert_eq!(
        prod.waits,
        vec![
            "1.2.0 is ready to promote, but a promotion is a pull request, and repository \
             manifests writes by pushing (set its write.mode: pull-request, or promote.write: push)"
                .to_string()
        ]
    );
}

// === an Application upstream, through the Kubernetes API double ===

const STAGING_APP: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/shop-staging";

/// The Application `argocd/shop-staging` as Argo CD reports it: running `tag`, its last sync
/// finished at `finished`, with `health` since then.
fn staging_app(tag: &str, finished: Timestamp, health: &str) -> Value {
    let revision = "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291";
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "shop-staging", "namespace": "argocd", "resourceVersion": "7"},
        "spec": {"source": {"repoURL": "https://git.example/shop.git", "path": "envs/staging"}},
        "status": {
            "sync": {"status": "Synced", "revision": revision},
            "health": {
                "status": health,
                "message": "Deployment \"shop\" exceeded its progress deadline",
                "lastTransitionTime": finished.to_string()
            },
            "operationState": {
                "phase": "Succeeded",
                "startedAt": (finished - SignedDuration::from_mins(1)).to_string(),
                "finishedAt": finished.to_string(),
                "syncResult": {"revision": revision}
            },
            "reconciledAt": (finished + SignedDuration::from_mins(1)).to_string(),
            "summary": {"images": [format!("{IMAGE}:{tag}"), "redis:7.2"]}
        }
    })
}

async fn serve(server: &MockServer, app: Value) {
    server.reset().await;
    Mock::given(method("GET"))
        .and(path(STAGING_APP))
        .respond_with(ResponseTemplate::new(200).set_body_json(app))
        .mount(server)
        .await;
}

#[tokio::test]
async fn prod_takes_what_the_staging_application_has_verified_and_kept_healthy() {
    let s = Scenario::new(
        &["prod"],
        &[(
            "prod.yaml",
            env_policy(
                "prod",
                "1.x",
                "  promote:\n    from:\n      - application: shop-staging\n    after: 2h\n    write: push\n",
            ),
        )],
    );
    let server = MockServer::start().await;
    let loaded = Loaded {
        cluster: crate::support::kube::cluster(&server, std::time::Duration::from_secs(5)).await,
        argocd_namespace: "argocd".into(),
        apps: Vec::new(),
        updaters: Vec::new(),
        registry_credentials: Default::default(),
        problems: Vec::new(),
        cosign_keys: Default::default(),
    };
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    let plan = |minutes| s.cycle_in(minutes, true, Some(&state), Some(&loaded));

    // Synced an hour ago and healthy since: an hour of soak left.
    serve(&server, staging_app("1.2.0", s.at(-60), "Healthy")).await;
    let cycle = plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None, "{:#?}", cycle.plan.problems);
    let prod = row(&cycle, "prod");
    assert_eq!(
        prod.waits,
        vec!["1.2.0 soaks in application shop-staging: 1h left".to_string()]
    );
    assert_eq!(
        prod.upstreams[0].verification,
        format!("verified at {}", s.at(-60).strftime("%Y-%m-%dT%H:%M:%SZ"))
    );

    // Two hours on: verified and soaked, prod takes it, with the evidence.
    let cycle = plan(60).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
    let change = cycle
        .plan
        .changes
        .iter()
        .find(|c| c.policy == "shop-prod")
        .unwrap();
    let evidence = &change.promotion.as_ref().unwrap().upstreams[0];
    assert_eq!(evidence.upstream, "application shop-staging");
    assert_eq!(evidence.healthy_for, "2h");
    // What the promotion's lead time counts from, once verified in prod.
    assert_eq!(evidence.healthy_since, Some(s.at(-60)));

    // A verification of 1.2.0 under way in staging (issue 19's record): not verified yet.
    let pending = PendingVerification {
        application: "argocd/shop-staging".into(),
        repository: "manifests".into(),
        commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        status_commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        since: s.at(-61),
        timeout: std::time::Duration::from_secs(900),
        fields: vec![VerifiedField {
            key: FieldKey {
                repository: Some("manifests".into()),
                policy: "shop-staging".into(),
                file: file("staging"),
                field: "Deployment/shop container shop".into(),
            },
            image: IMAGE.into(),
            line: 10,
            from: "1.1.0".into(),
            to: "1.2.0".into(),
            on_failure: tagpilot::config::verify::OnFailure::Hold,
            promoted_at: None,
        }],
    };
    state.start_verification(&pending).unwrap();
    let cycle = plan(60).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.2.0 is not verified in application shop-staging yet".to_string()]
    );
    state.end_verification(&pending).unwrap();

    // Degraded in staging: failed there, never taken.
    serve(&server, staging_app("1.2.0", s.at(-60), "Degraded")).await;
    let cycle = plan(600).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert!(
        row(&cycle, "prod").waits[0].starts_with("1.2.0 failed in application shop-staging: "),
        "{:?}",
        row(&cycle, "prod").waits
    );
}

#[tokio::test]
async fn an_application_upstream_soaks_from_when_it_was_first_healthy_not_from_its_sync() {
    let s = Scenario::new(
        &["prod"],
        &[(
            "prod.yaml",
            env_policy(
                "prod",
                "1.x",
                "  promote:\n    from:\n      - application: shop-staging\n    after: 1h\n    write: push\n",
            ),
        )],
    );
    let server = MockServer::start().await;
    let loaded = loaded(&server, Vec::new()).await;
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    // Cycles that write: what a cycle first sees is recorded by `tagpilot run`, never by a
    // dry run.
    let plan = |minutes| s.cycle_in(minutes, false, Some(&state), Some(&loaded));
    let waits = |cycle: &Cycle| row(cycle, "prod").waits.clone();

    // Synced two hours ago, Progressing for 90 minutes of them: Argo CD says since when it is
    // Healthy, and the soak counts from then.
    let mut app = staging_app("1.2.0", s.at(-120), "Healthy");
    app["status"]["health"]["lastTransitionTime"] = json!(s.at(-30).to_string());
    serve(&server, app).await;
    let cycle = plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        waits(&cycle),
        ["1.2.0 soaks in application shop-staging: 30m left"]
    );

    // An Argo CD that does not say: from the first cycle that saw it Healthy after its sync.
    let mut app = staging_app("1.3.0", s.at(-120), "Healthy");
    app["status"]["health"] = json!({"status": "Healthy"});
    serve(&server, app.clone()).await;
    // A dry run (`tagpilot plan --state-dir`) soaks from what the store remembers, or from
    // now, and records nothing.
    let dry = s.cycle_in(-30, true, Some(&state), Some(&loaded)).await;
    assert_eq!(
        waits(&dry),
        ["1.3.0 soaks in application shop-staging: 1h left"]
    );
    let synced = Some(s.at(-120));
    assert_eq!(
        state.seen_healthy_at("argocd/shop-staging", "1.3.0", synced),
        None
    );
    assert_eq!(
        waits(&plan(0).await),
        ["1.3.0 soaks in application shop-staging: 1h left"]
    );
    assert_eq!(
        state.seen_healthy_at("argocd/shop-staging", "1.3.0", synced),
        Some(s.at(0))
    );
    assert_eq!(
        waits(&plan(45).await),
        ["1.3.0 soaks in application shop-staging: 15m left"]
    );
    // Progressing again: not soaking, and the soak starts again once it is Healthy.
    serve(&server, staging_app("1.3.0", s.at(-120), "Progressing")).await;
    assert_eq!(
        waits(&plan(50).await),
        ["1.3.0 is not verified in application shop-staging yet"]
    );
    serve(&server, app).await;
    assert_eq!(
        waits(&plan(60).await),
        ["1.3.0 soaks in application shop-staging: 1h left"]
    );
    assert_eq!(moves_to(&plan(120).await, "prod").as_deref(), Some("1.3.0"));
}

#[tokio::test]
async fn a_tag_whose_verification_failed_in_the_staging_application_is_held_for_prod() {
    let s = Scenario::new(
        &["prod"],
        &[(
            "prod.yaml",
            env_policy(
                "prod",
                "1.x",
                "  promote:\n    from:\n      - application: shop-staging\n        namespace: argocd\n    after: 1h\n    write: push\n",
            ),
        )],
    );
    let server = MockServer::start().await;
    let loaded = Loaded {
        cluster: crate::support::kube::cluster(&server, std::time::Duration::from_secs(5)).await,
        argocd_namespace: "argocd".into(),
        apps: Vec::new(),
        updaters: Vec::new(),
        registry_credentials: Default::default(),
        problems: Vec::new(),
        cosign_keys: Default::default(),
    };
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    // 1.3.0 failed its verification in staging (held by issue 19); staging was rolled back to
    // 1.2.0, which is healthy. Prod takes 1.2.0, and 1.3.0 never.
    state
        .hold(&HeldTag {
            key: FieldKey {
                repository: Some("manifests".into()),
                policy: "shop-staging".into(),
                file: file("staging"),
                field: "Deployment/shop container shop".into(),
            },
            tag: "1.3.0".into(),
            reason: HoldReason::Failed {
                application: "argocd/shop-staging".into(),
                failure: "health Degraded after the sync".into(),
            },
            since: s.at(-300),
        })
        .unwrap();
    serve(&server, staging_app("1.3.0", s.at(-240), "Healthy")).await;
    let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec![
            "1.3.0 failed in application argocd/shop-staging: failed in argocd/shop-staging: \
             health Degraded after the sync"
                .to_string()
        ]
    );
    serve(&server, staging_app("1.2.0", s.at(-120), "Healthy")).await;
    let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
}

#[tokio::test]
async fn an_upstream_in_another_configured_repository_is_read_from_its_base_branch() {
    // prod lives in `manifests`; staging in a second repository, `staging`.
    let s = Scenario::new(
        &["prod"],
        &[(
            "prod.yaml",
            env_policy(
                "prod",
                "1.x",
                "  promote:\n    from:\n      - path: envs/staging/deployment.yaml\n        repository: staging\n    after: 1h\n    write: push\n",
            ),
        )],
    );
    let staging = BareRepo::new();
    push_at(
        &staging,
        &[("staging", "1.2.0")],
        s.at(-90),
        "staging: 1.2.0",
    );
    let text = std::fs::read_to_string(s.config.path.as_ref().unwrap()).unwrap();
    let path = s.dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        text.replace(
            "policies: policies/\n",
            &format!(
                "  - name: staging\n    url: {}\n    branch: main\npolicies: policies/\n",
                staging.file_url()
            ),
        ),
    )
    .unwrap();
    let s = Scenario {
        config: config::load(&path).unwrap(),
        ..s
    };
    let cycle = s.plan(0).await;
    assert_eq!(
        moves_to(&cycle, "prod").as_deref(),
        Some("1.2.0"),
        "{:#?}",
        cycle.plan.promotions
    );
    let evidence = &cycle.plan.changes[0].promotion.as_ref().unwrap().upstreams[0];
    assert_eq!(evidence.upstream, "staging:envs/staging/deployment.yaml");
    assert_eq!(evidence.healthy_for, "1h 30m");
}

// === examples/promotion ===

/// Another writer commits the kustomization of `env` in the example's repository at `tag`.
fn set_example_env(repo: &BareRepo, env: &str, tag: &str, at: Timestamp) {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/promotion/environments");
    let original =
        std::fs::read_to_string(example.join(format!("envs/{env}/kustomization.yaml"))).unwrap();
    let text = original.replace("newTag: 1.0.0", &format!("newTag: {tag}"));
    repo.commit_dated(&[(format!("envs/{env}/kustomization.yaml"), text)], at, env);
}

/// `examples/promotion` planned as shipped: its repository's content pushed to a real remote,
/// its `tagpilot.yaml` pointed there, its policies as written.
#[tokio::test]
async fn the_promotion_example_plans_dev_staging_and_prod() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/promotion");
    let t0: Timestamp = "2026-01-05T12:00:00Z".parse().unwrap();
    let repo = BareRepo::new();
    let files: Vec<(String, String)> = walkdir::WalkDir::new(example.join("environments"))
        .into_iter()
        .map(Result::unwrap)
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            let rel = e.path().strip_prefix(example.join("environments")).unwrap();
            (
                rel.to_string_lossy().into_owned(),
                std::fs::read_to_string(e.path()).unwrap(),
            )
        })
        .collect();
    repo.commit_dated(&files, t0 - SignedDuration::from_hours(10), "environments");
    set_example_env(&repo, "dev", "1.1.0", t0 - SignedDuration::from_mins(90));

    let dir = tempfile::tempdir().unwrap();
    let config_text = std::fs::read_to_string(example.join("tagpilot.yaml"))
        .unwrap()
        .replace("file:///srv/git/environments.git", &repo.file_url())
        .replace(
            "policies: policies/",
            &format!("policies: {}", example.join("policies").display()),
        );
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(&path, config_text).unwrap();
    let s = Scenario {
        config: config::load(&path).unwrap(),
        registry: MemoryRegistry::from_yaml(
            "127.0.0.1:5000/acme/shop: {tags: [\"1.0.0\", \"1.1.0\", \"1.2.0\"]}\n",
        )
        .unwrap(),
        dir,
        repo,
        t0,
    };
    let cycle = s.plan(0).await;
    assert!(cycle.plan.problems.is_empty(), "{:#?}", cycle.plan.problems);
    assert_eq!(moves_to(&cycle, "dev").as_deref(), Some("1.2.0"));
    assert_eq!(moves_to(&cycle, "staging").as_deref(), Some("1.1.0"));
    assert_eq!(row(&cycle, "prod").status, PromotionStatus::UpToDate);

    set_example_env(
        &s.repo,
        "staging",
        "1.1.0",
        t0 - SignedDuration::from_mins(30),
    );
    let cycle = s.plan(0).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.1.0 soaks in policy shop-staging: 1h 30m left".to_string()]
    );
}

// === a promotion's pull request ===

/// On a pull-request repository (the default for promotions), staging's promotion is a pull
/// request whose body carries the evidence.
#[tokio::test]
async fn a_promotion_s_pull_request_carries_its_evidence() {
    use crate::support::git::{HTTP_PASSWORD_ENV, set_test_secrets};
    use crate::support::github::{BRANCH, PULLS, expect_create, expect_no_pulls_yet};

    set_test_secrets();
    let server = MockServer::start().await;
    let s = Scenario::new(
        &["dev", "staging"],
        &[
            ("dev.yaml", env_policy("dev", "<1.2", "")),
            (
                "staging.yaml",
                env_policy(
                    "staging",
                    "1.x",
                    "  promote:\n    from:\n      - policy: shop-dev\n    after: 1h\n",
                ),
            ),
        ],
    );
    push_at(&s.repo, &[("dev", "1.1.0")], s.at(-90), "dev: 1.1.0");
    let path = s.dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        format!(
            "repositories:\n  - name: manifests\n    url: {}\n    branch: main\n    forge:\n      github: {{apiUrl: '{}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      branch: {BRANCH}\npolicies: policies/\n",
            s.repo.file_url(),
            server.uri()
        ),
    )
    .unwrap();
    // The images say where their source is, so the evidence links what changed in it.
    let registry = MemoryRegistry::from_yaml(&format!(
        "{IMAGE}: {{tags: [\"1.0.0\", \"1.1.0\", \"1.2.0\"], source: \"https://github.com/acme/shop\", revisions: {{\"1.0.0\": v1.0.0, \"1.1.0\": v1.1.0, \"1.2.0\": v1.2.0}}}}\n"
    ))
    .unwrap();
    let s = Scenario {
        config: config::load(&path).unwrap(),
        registry,
        ..s
    };
    expect_no_pulls_yet(&server).await;
    expect_create(&server, 7, json!({"head": BRANCH, "base": "main"})).await;
    let cycle = s.cycle(0, false, None).await;
    assert!(!cycle.failed, "{:#?}", cycle.plan.problems);
    assert_eq!(moves_to(&cycle, "staging").as_deref(), Some("1.1.0"));
    assert!(s.repo.show(BRANCH, &file("staging")).contains(":1.1.0"));
    let created: Vec<Value> = server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path() == PULLS)
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .collect();
    assert_eq!(created.len(), 1);
    let body = created[0]["body"].as_str().unwrap();
    assert!(
        body.contains(&format!(
            "**Promotion evidence**\n\n- `{IMAGE}` `1.0.0` → `1.1.0` in `envs/staging/deployment.yaml:10`, promoted from:\n  - policy shop-dev runs `1.1.0` since 2026-01-05T10:30:00Z; healthy for 1h 30m; on the base branch, no cluster access\n  - compare: [v1.0.0...v1.1.0](https://github.com/acme/shop/compare/v1.0.0...v1.1.0)\n"
        )),
        "{body}"
    );
}

// === what passes down: holds and verifications upstream ===

fn held(env: &str, tag: &str, reason: HoldReason, since: Timestamp) -> HeldTag {
    HeldTag {
        key: FieldKey {
            repository: Some("manifests".into()),
            policy: format!("shop-{env}"),
            file: file(env),
            field: "Deployment/shop container shop".into(),
        },
        tag: tag.into(),
        reason,
        since,
    }
}

fn failed_in(env: &str) -> HoldReason {
    HoldReason::Failed {
        application: format!("argocd/shop-{env}"),
        failure: "health Degraded after the sync".into(),
    }
}

/// Regression: a person's rollback in staging held every tag up to the one rolled back from
/// for prod too, so prod waited forever on "1.2.0 is held".
#[tokio::test]
async fn a_person_s_rollback_in_staging_holds_for_prod_only_the_tag_rolled_back_from() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_policy("staging", "3h")),
            ),
        ],
    );
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    // tagpilot moves staging to 1.3.0 (its commit carries its trailer).
    let written = s.cycle(-300, false, Some(&state)).await;
    assert!(!written.failed, "{:#?}", written.plan.problems);
    assert!(s.repo.show("main", &file("staging")).contains(":1.3.0"));
    // A person rolls staging back to 1.2.0.
    push_at(
        &s.repo,
        &[("staging", "1.2.0")],
        s.at(-120),
        "staging: back to 1.2.0",
    );
    let noticed = s.cycle(0, false, Some(&state)).await;
    assert!(!noticed.failed, "{:#?}", noticed.plan.problems);
    let holds = state.holds().unwrap();
    assert!(
        holds.iter().any(|h| h.key.policy == "shop-staging"
            && h.tag == "1.3.0"
            && matches!(h.reason, HoldReason::RolledBack { .. })),
        "{holds:#?}"
    );
    assert_eq!(moves_to(&noticed, "prod"), None);
    assert_eq!(
        row(&noticed, "prod").waits,
        vec!["1.2.0 soaks in policy shop-staging: 1h left".to_string()]
    );
    // Soaked: prod takes 1.2.0, what staging runs, and 1.3.0 never.
    for minutes in [60, 600] {
        let cycle = s.cycle(minutes, true, Some(&state)).await;
        assert_eq!(
            moves_to(&cycle, "prod").as_deref(),
            Some("1.2.0"),
            "{:#?}",
            row(&cycle, "prod")
        );
        assert_eq!(moves_to(&cycle, "staging"), None, "staging stays held");
    }
}

/// A tag held upstream is held for prod, however prod reaches that upstream: a path it
/// follows, or a policy it follows through another promoting one. Without the hold, prod
/// takes it.
#[tokio::test]
async fn a_tag_held_upstream_is_held_for_prod() {
    struct Case {
        name: &'static str,
        envs: &'static [&'static str],
        policies: Vec<(&'static str, String)>,
        /// The environments that run 1.2.0 (since ten hours ago).
        running: &'static [&'static str],
        /// Where 1.2.0 is held, why, and since when (minutes from now).
        held: (&'static str, HoldReason, i64),
        /// How prod's wait starts.
        wait: &'static str,
        /// The report lists the promoting policies, upstream first (where the case says).
        chain: Option<&'static [&'static str]>,
    }
    let cases = [
        Case {
            name: "in the file of a path upstream",
            envs: &["staging", "prod"],
            policies: vec![
                ("staging.yaml", env_policy("staging", "1.x", "")),
                (
                    "prod.yaml",
                    env_policy(
                        "prod",
                        "1.x",
                        "  promote:\n    from:\n      - path: envs/staging/deployment.yaml\n    after: 1h\n    write: push\n",
                    ),
                ),
            ],
            running: &["staging"],
            held: ("staging", failed_in("staging"), -500),
            wait: "1.2.0 is held: in policy shop-staging: held: failed in Application argocd/shop-staging",
            chain: None,
        },
        Case {
            name: "in dev, through staging",
            envs: &["dev", "staging", "prod"],
            policies: vec![
                ("dev.yaml", env_policy("dev", "1.x", "")),
                (
                    "staging.yaml",
                    env_policy("staging", "1.x", &promote_from_policy("dev", "1h")),
                ),
                (
                    "prod.yaml",
                    env_policy("prod", "1.x", &promote_from_policy("staging", "1h")),
                ),
            ],
            // 1.2.0 ran in dev and staging, then a person held it in dev.
            running: &["dev", "staging"],
            held: ("dev", HoldReason::Manual { by: "Dana".into() }, -60),
            wait: "1.2.0 is held: in policy shop-dev: held: held by Dana since ",
            chain: Some(&["shop-staging", "shop-prod"]),
        },
    ];
    for case in cases {
        let name = case.name;
        let s = Scenario::new(case.envs, &case.policies);
        let running: Vec<(&str, &str)> = case.running.iter().map(|env| (*env, "1.2.0")).collect();
        push_at(&s.repo, &running, s.at(-600), "1.2.0");
        assert_eq!(
            moves_to(&s.plan(0).await, "prod").as_deref(),
            Some("1.2.0"),
            "{name}"
        );
        let state_dir = tempfile::tempdir().unwrap();
        let state = State::open(state_dir.path()).unwrap();
        let (env, reason, since) = case.held;
        state
            .hold(&held(env, "1.2.0", reason, s.at(since)))
            .unwrap();
        let cycle = s.cycle(0, true, Some(&state)).await;
        assert_eq!(moves_to(&cycle, "prod"), None, "{name}");
        let waits = &row(&cycle, "prod").waits;
        assert!(waits[0].starts_with(case.wait), "{name}: {waits:?}");
        if let Some(chain) = case.chain {
            // Each with since when it runs its tag.
            let policies: Vec<&str> = cycle
                .plan
                .promotions
                .iter()
                .map(|p| p.policy.as_str())
                .collect();
            assert_eq!(policies, chain, "{name}");
            let since = s.at(-600).strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
            assert_eq!(
                row(&cycle, "prod").since.as_deref(),
                Some(since.as_str()),
                "{name}"
            );
        }
    }
}

#[tokio::test]
async fn a_git_upstream_s_change_under_verification_is_not_verified_until_it_ends_verified() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_policy("staging", "1h")),
            ),
        ],
    );
    push_at(
        &s.repo,
        &[("staging", "1.2.0")],
        s.at(-120),
        "staging: 1.2.0",
    );
    // Without a state store: the soak counts from the commit.
    assert_eq!(moves_to(&s.plan(0).await, "prod").as_deref(), Some("1.2.0"));

    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    let pending = PendingVerification {
        application: "argocd/shop-staging".into(),
        repository: "manifests".into(),
        commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        status_commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        since: s.at(-120),
        timeout: std::time::Duration::from_secs(7200),
        fields: vec![VerifiedField {
            key: held("staging", "1.2.0", failed_in("staging"), s.at(0)).key,
            image: IMAGE.into(),
            line: 10,
            from: "1.0.0".into(),
            to: "1.2.0".into(),
            on_failure: tagpilot::config::verify::OnFailure::Hold,
            promoted_at: None,
        }],
    };
    state.start_verification(&pending).unwrap();
    let cycle = s.cycle(0, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.2.0 is not verified in policy shop-staging yet".to_string()]
    );
    // Verified half an hour ago: the soak counts from there.
    state.end_verification(&pending).unwrap();
    state.record_verified(&pending, s.at(-30)).unwrap();
    let cycle = s.cycle(0, true, Some(&state)).await;
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.2.0 soaks in policy shop-staging: 30m left".to_string()]
    );
    let verified = format!("verified at {}", s.at(-30).strftime("%Y-%m-%dT%H:%M:%SZ"));
    assert_eq!(row(&cycle, "prod").upstreams[0].verification, verified);
    let cycle = s.cycle(30, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
    // Failed instead: held, never taken.
    state
        .hold(&held("staging", "1.2.0", failed_in("staging"), s.at(10)))
        .unwrap();
    let cycle = s.cycle(600, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert!(row(&cycle, "prod").waits[0].starts_with("1.2.0 is held: "));
}

#[tokio::test]
async fn a_git_upstream_s_verification_that_ended_in_an_error_is_never_read_as_verified() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[
            ("staging.yaml", env_policy("staging", "1.x", "")),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_policy("staging", "1h")),
            ),
        ],
    );
    push_at(
        &s.repo,
        &[("staging", "1.2.0")],
        s.at(-120),
        "staging: 1.2.0",
    );
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    let pending = PendingVerification {
        application: "argocd/shop-staging".into(),
        repository: "manifests".into(),
        commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        status_commit: "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291".into(),
        since: s.at(-120),
        timeout: std::time::Duration::from_secs(7200),
        fields: vec![VerifiedField {
            key: held("staging", "1.2.0", failed_in("staging"), s.at(0)).key,
            image: IMAGE.into(),
            line: 10,
            from: "1.0.0".into(),
            to: "1.2.0".into(),
            on_failure: tagpilot::config::verify::OnFailure::Hold,
            promoted_at: None,
        }],
    };
    // Its Application could not be followed: two hours after the commit, prod still waits,
    // named, where without the record the soak would have counted from the commit.
    let error = "Application argocd/shop-staging was deleted while its change was being verified";
    state
        .record_verification_error(&pending, s.at(-90), error)
        .unwrap();
    let cycle = s.cycle(0, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    let waits = &row(&cycle, "prod").waits;
    assert_eq!(
        waits,
        &vec![format!(
            "1.2.0's verification in policy shop-staging ended in an error: {error}"
        )]
    );
    assert_eq!(
        row(&cycle, "prod").upstreams[0].verification,
        format!("ended in an error: {error}")
    );
    // The report says it too, as it says every wait.
    let markdown = report::markdown(&cycle.plan);
    assert!(
        markdown.contains("1.2.0's verification in policy shop-staging ended in an error"),
        "{markdown}"
    );
    // Hours later it still waits: an error never turns into "verified" with time.
    let cycle = s.cycle(600, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    // A later verification of the field that ends verified ends the wait; the soak counts
    // from it.
    state.record_verified(&pending, s.at(620)).unwrap();
    let cycle = s.cycle(630, true, Some(&state)).await;
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.2.0 soaks in policy shop-staging: 50m left".to_string()]
    );
    let cycle = s.cycle(680, true, Some(&state)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
}

// === environments as Applications, through the Kubernetes API double ===

/// The Application `argocd/shop-<env>` as Argo CD reports it: synced to a revision of
/// `envs/<env>`, its last sync finished at `finished` (`phase: Succeeded`), `health`, and the
/// images its live resources run.
fn env_app(env: &str, tag: &str, finished: Timestamp, health: &str) -> Value {
    let mut app = staging_app(tag, finished, health);
    app["metadata"]["name"] = json!(format!("shop-{env}"));
    app["spec"]["source"]["path"] = json!(format!("envs/{env}"));
    app
}

/// Serves each Application at its path, as the API server would.
async fn serve_apps(server: &MockServer, apps: &[Value]) {
    server.reset().await;
    for app in apps {
        let name = app["metadata"]["name"].as_str().unwrap();
        Mock::given(method("GET"))
            .and(path(format!(
                "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/{name}"
            )))
            .respond_with(ResponseTemplate::new(200).set_body_json(app))
            .mount(server)
            .await;
    }
}

async fn loaded(server: &MockServer, apps: Vec<tagpilot::application::Application>) -> Loaded {
    Loaded {
        cluster: crate::support::kube::cluster(server, std::time::Duration::from_secs(5)).await,
        argocd_namespace: "argocd".into(),
        apps,
        updaters: Vec::new(),
        registry_credentials: Default::default(),
        problems: Vec::new(),
        cosign_keys: Default::default(),
    }
}

fn promote_from_apps(apps: &[&str], after: &str, fan_in: &str) -> String {
    let from: String = apps
        .iter()
        .map(|a| format!("      - application: shop-{a}\n"))
        .collect();
    format!(
        "  promote:\n    from:\n{from}    after: {after}\n    fanIn: {fan_in}\n    write: push\n"
    )
}

#[tokio::test]
async fn dev_staging_and_prod_as_applications_each_take_what_the_one_above_verified() {
    let s = Scenario::new(
        &["dev", "staging", "prod"],
        &[
            ("dev.yaml", env_policy("dev", "1.x", "")),
            (
                "staging.yaml",
                env_policy("staging", "1.x", &promote_from_apps(&["dev"], "1h", "all")),
            ),
            (
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_apps(&["staging"], "2h", "all")),
            ),
        ],
    );
    let server = MockServer::start().await;
    let loaded = loaded(&server, Vec::new()).await;
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    // dev runs 1.2.0 healthy for 90 minutes; staging 1.1.0 for an hour.
    serve_apps(
        &server,
        &[
            env_app("dev", "1.2.0", s.at(-90), "Healthy"),
            env_app("staging", "1.1.0", s.at(-60), "Healthy"),
        ],
    )
    .await;
    let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "dev").as_deref(), Some("1.3.0"));
    assert_eq!(moves_to(&cycle, "staging").as_deref(), Some("1.2.0"));
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.1.0 soaks in application shop-staging: 1h left".to_string()]
    );
    // An hour on, prod takes what staging has kept healthy for two hours.
    let cycle = s.cycle_in(60, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.1.0"));
    // Without a state store, the tags failed in an Application are unknown: named, it waits.
    let cycle = s.cycle_in(60, true, None, Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert!(
        row(&cycle, "prod").waits[0].contains("held tags unknown"),
        "{:?}",
        row(&cycle, "prod").waits
    );
}

#[tokio::test]
async fn fan_in_over_two_applications_all_waits_and_any_takes_the_newest() {
    let apps = ["staging-eu", "staging-us"];
    let server = MockServer::start().await;
    let loaded = loaded(&server, Vec::new()).await;
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    for (fan_in, expected) in [("all", None), ("any", Some("1.2.0"))] {
        let s = Scenario::new(
            &["prod"],
            &[(
                "prod.yaml",
                env_policy("prod", "1.x", &promote_from_apps(&apps, "1h", fan_in)),
            )],
        );
        serve_apps(
            &server,
            &[
                env_app("staging-eu", "1.2.0", s.at(-120), "Healthy"),
                env_app("staging-us", "1.1.0", s.at(-120), "Healthy"),
            ],
        )
        .await;
        let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
        assert_eq!(moves_to(&cycle, "prod").as_deref(), expected, "{fan_in}");
        if fan_in == "all" {
            assert_eq!(
                row(&cycle, "prod").waits,
                vec![
                    "the upstreams run different tags (application shop-staging-eu runs \
                     1.2.0, application shop-staging-us runs 1.1.0)"
                        .to_string()
                ]
            );
            // Both on 1.2.0: `all` takes it.
            serve_apps(
                &server,
                &[
                    env_app("staging-eu", "1.2.0", s.at(-120), "Healthy"),
                    env_app("staging-us", "1.2.0", s.at(-90), "Healthy"),
                ],
            )
            .await;
            let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
            assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
        }
    }
}

#[tokio::test]
async fn an_application_that_reverts_is_not_followed_to_the_reverted_tag_and_soaks_again() {
    let s = Scenario::new(
        &["prod"],
        &[(
            "prod.yaml",
            env_policy("prod", "1.x", &promote_from_apps(&["staging"], "1h", "all")),
        )],
    );
    let server = MockServer::start().await;
    let loaded = loaded(&server, Vec::new()).await;
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    serve_apps(
        &server,
        &[env_app("staging", "1.3.0", s.at(-300), "Healthy")],
    )
    .await;
    let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.3.0"));
    // Staging is synced back to 1.2.0 twenty minutes ago: prod does not take 1.3.0, and 1.2.0
    // soaks from that sync.
    serve_apps(
        &server,
        &[env_app("staging", "1.2.0", s.at(-20), "Healthy")],
    )
    .await;
    let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    assert_eq!(
        row(&cycle, "prod").waits,
        vec!["1.2.0 soaks in application shop-staging: 40m left".to_string()]
    );
    let cycle = s.cycle_in(40, true, Some(&state), Some(&loaded)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"));
}

/// Prod follows the staging *Application* (the cycle reads the cluster's Applications: which
/// files it deploys). A tag held upstream of it is held for prod: by hand on a file the staging
/// Application deploys; or in dev, where the policy writing what that Application deploys
/// promotes from, so the hold reaches prod through the Application link too (before, the chain
/// stopped at an Application upstream).
#[tokio::test]
async fn a_tag_held_upstream_of_the_staging_application_is_held_for_prod() {
    struct Case {
        name: &'static str,
        envs: &'static [&'static str],
        policies: Vec<(&'static str, String)>,
        /// The environments whose files run 1.2.0 (since ten hours ago), if any.
        running: &'static [&'static str],
        /// Where 1.2.0 is held by hand (an hour ago).
        held_in: &'static str,
        /// How prod's wait starts.
        wait: &'static str,
    }
    let prod = || env_policy("prod", "1.x", &promote_from_apps(&["staging"], "1h", "all"));
    let cases = [
        Case {
            name: "on a file the staging Application deploys",
            envs: &["staging", "prod"],
            policies: vec![
                ("staging.yaml", env_policy("staging", "1.x", "")),
                ("prod.yaml", prod()),
            ],
            running: &[],
            held_in: "staging",
            wait: "1.2.0 is held: in policy shop-staging: held: held by Dana since ",
        },
        Case {
            name: "in dev, through the staging Application",
            envs: &["dev", "staging", "prod"],
            policies: vec![
                ("dev.yaml", env_policy("dev", "1.x", "")),
                (
                    "staging.yaml",
                    env_policy("staging", "1.x", &promote_from_policy("dev", "1h")),
                ),
                ("prod.yaml", prod()),
            ],
            running: &["dev", "staging"],
            held_in: "dev",
            wait: "1.2.0 is held: in policy shop-dev: held: held by Dana since ",
        },
    ];
    for case in cases {
        let name = case.name;
        let s = Scenario::new(case.envs, &case.policies).reading_applications_from_the_cluster();
        if !case.running.is_empty() {
            let running: Vec<(&str, &str)> =
                case.running.iter().map(|env| (*env, "1.2.0")).collect();
            push_at(&s.repo, &running, s.at(-600), "1.2.0");
        }
        let server = MockServer::start().await;
        let loaded = s.staging_deployed_from_the_cluster(&server, "1.2.0").await;
        let state_dir = tempfile::tempdir().unwrap();
        let state = State::open(state_dir.path()).unwrap();
        let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
        assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.2.0"), "{name}");

        let by_hand = HoldReason::Manual { by: "Dana".into() };
        state
            .hold(&held(case.held_in, "1.2.0", by_hand, s.at(-60)))
            .unwrap();
        let cycle = s.cycle_in(0, true, Some(&state), Some(&loaded)).await;
        assert_eq!(moves_to(&cycle, "prod"), None, "{name}");
        let waits = &row(&cycle, "prod").waits;
        assert!(waits[0].starts_with(case.wait), "{name}: {waits:?}");
    }
}

#[tokio::test]
async fn a_tagpilot_hold_annotation_on_the_staging_application_holds_that_tag_for_prod() {
    let s = Scenario::new(
        &["staging", "prod"],
        &[(
            "prod.yaml",
            env_policy("prod", "1.x", &promote_from_apps(&["staging"], "1h", "all")),
        )],
    );
    // The cycle reads the cluster's Applications: which files the staging Application deploys.
    let s = s.reading_applications_from_the_cluster();
    // The staging Application as the API server serves it: what Argo CD and kubectl set
    // besides the spec and status, its Image Updater `image-list`, and a person's hold.
    let application = |hold: Option<&str>| {
        let mut app = env_app("staging", "1.3.0", s.at(-120), "Healthy");
        app["spec"]["source"]["repoURL"] = json!(s.repo.file_url());
        app["spec"]["source"]["targetRevision"] = json!("main");
        app["spec"]["project"] = json!("default");
        app["spec"]["destination"] =
            json!({"server": "https://kubernetes.default.svc", "namespace": "shop-staging"});
        let mut annotations = json!({
            "argocd-image-updater.argoproj.io/image-list": format!("shop={IMAGE}:1.x"),
            "kubectl.kubernetes.io/last-applied-configuration": "{\"apiVersion\":\"argoproj.io/v1alpha1\",\"kind\":\"Application\"}",
        });
        if let Some(hold) = hold {
            annotations["tagpilot.dev/hold"] = json!(hold);
        }
        let metadata = &mut app["metadata"];
        metadata["annotations"] = annotations;
        metadata["uid"] = json!("0b9e4f1c-3c1e-4d8a-9a55-7f0b2f6a1c11");
        metadata["generation"] = json!(12);
        metadata["creationTimestamp"] = json!("2026-01-02T09:00:00Z");
        metadata["finalizers"] = json!(["resources-finalizer.argocd.argoproj.io"]);
        app["status"]["sourceType"] = json!("Directory");
        app["status"]["resources"] = json!([{
            "group": "apps", "version": "v1", "kind": "Deployment",
            "namespace": "shop-staging", "name": "shop",
            "status": "Synced", "health": {"status": "Healthy"}
        }]);
        app
    };
    let server = MockServer::start().await;
    let state_dir = tempfile::tempdir().unwrap();
    let state = State::open(state_dir.path()).unwrap();
    let cycle_with = |app: Value| {
        let server = &server;
        let state = &state;
        let s = &s;
        async move {
            let deployed: tagpilot::application::Application =
                serde_json::from_value(app.clone()).unwrap();
            let loaded = loaded(server, vec![deployed]).await;
            serve_apps(server, &[app]).await;
            s.cycle_in(0, true, Some(state), Some(&loaded)).await
        }
    };
    // Without the annotation, prod takes what staging ran healthy for two hours.
    let cycle = cycle_with(application(None)).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.3.0"));
    // A person holds 1.3.0 on the staging Application: prod waits, and says why.
    let cycle = cycle_with(application(Some("shop=1.3.0"))).await;
    assert_eq!(moves_to(&cycle, "prod"), None);
    let waits = &row(&cycle, "prod").waits;
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(
        waits[0].starts_with(
            "1.3.0 is held: in policy shop-staging/shop: held: held by tagpilot.dev/hold on \
             Application argocd/shop-staging since "
        ),
        "{waits:?}"
    );
    // A hold on another tag holds only that one.
    let cycle = cycle_with(application(Some("shop=1.4.0"))).await;
    assert_eq!(moves_to(&cycle, "prod").as_deref(), Some("1.3.0"));
}
