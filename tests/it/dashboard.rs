//! The dashboard issue on the GitHub and GitLab doubles, each speaking its forge's issue API:
//! opened once, rewritten in place (same number, new body), a ticked box releasing a hold so
//! the next cycle's plan moves the field, closed when the repository opts out.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};
use tagpilot::config::{self, Config};
use tagpilot::engine::{self, Cycle};
use tagpilot::git::RepoCache;
use tagpilot::holds::{FieldKey, HeldTag, HoldReason};
use tagpilot::policy::{self, ImagePolicy};
use tagpilot::registry::MemoryRegistry;
use tagpilot::run::http::Shared;
use tagpilot::run::metrics::CycleResult;
use tagpilot::state::State;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use crate::support::git::{BareRepo, DEPLOYMENT_PATH, HTTP_PASSWORD_ENV, set_test_secrets};
use crate::support::github::AUTH;
use crate::support::gitlab::PRIVATE_TOKEN;

/// What differs between the two forges' issue APIs.
struct Api {
    /// The issues of `acme/manifests`.
    issues: &'static str,
    forge: fn(&str) -> String,
    /// The query that lists the open ones.
    open: &'static str,
    /// The number's field, the body's field, the edit method.
    number: &'static str,
    text: &'static str,
    edit: &'static str,
    closing: Value,
    authed: fn(&'static str, String) -> MockBuilder,
}

const GITHUB: fn() -> Api = || Api {
    issues: "/repos/acme/manifests/issues",
    forge: |uri| {
        format!(
            "github: {{apiUrl: '{uri}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}"
        )
    },
    open: "open",
    number: "number",
    text: "body",
    edit: "PATCH",
    closing: json!({"state": "closed"}),
    authed: |m, p| {
        Mock::given(method(m))
            .and(path(p))
            .and(header("authorization", AUTH))
    },
};

const GITLAB: fn() -> Api = || Api {
    issues: "/api/v4/projects/acme%2Fmanifests/issues",
    forge: |uri| {
        format!(
            "gitlab: {{apiUrl: '{uri}/api/v4', tokenEnv: {HTTP_PASSWORD_ENV}, project: acme/manifests}}"
        )
    },
    open: "opened",
    number: "iid",
    text: "description",
    edit: "PUT",
    closing: json!({"state_event": "close"}),
    authed: |m, p| {
        Mock::given(method(m))
            .and(path(p))
            .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
    },
};

impl Api {
    fn issue(&self, number: u64, body: &str) -> Value {
        let mut issue = json!({
            "html_url": format!("https://forge.example/acme/manifests/issues/{number}"),
            "web_url": format!("https://forge.example/acme/manifests/issues/{number}"),
            "state": self.open,
        });
        issue[self.number] = number.into();
        issue[self.text] = body.into();
        issue
    }
}

fn setup(dir: &Path, repo: &BareRepo, forge: &str, dashboard: bool) -> (Config, Vec<ImagePolicy>) {
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
            "policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    forge: {{{forge}}}\n    write: {{dashboard: {dashboard}}}\n",
            repo.file_url()
        ),
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    let policies = policy::load(&config).unwrap();
    (config, policies)
}

/// One full cycle as `tagpilot run` makes it: ticked boxes first, the engine, the status
/// board recorded, the dashboards kept.
async fn cycle(
    config: &Config,
    policies: &[ImagePolicy],
    cache: &RepoCache,
    shared: &Shared,
) -> Cycle {
    let state = shared.state.as_deref();
    tagpilot::run::dashboard::release_ticked(&config.repositories, state).await;
    let registry =
        MemoryRegistry::from_yaml("registry.example/api: {tags: [\"1.0.0\", \"1.3.0\"]}\n")
            .unwrap();
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
        state,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let cycle = engine::run(&input, &context, engine::Options::default())
        .await
        .expect("engine cycle");
    let now = jiff::Timestamp::now();
    let took = std::time::Duration::ZERO;
    shared
        .status
        .record(true, Ok(&cycle), CycleResult::Ok, took, Vec::new(), now);
    tagpilot::run::dashboard::keep(&config.repositories, shared, Some(&cycle), now).await;
    cycle
}

fn the_hold() -> HeldTag {
    HeldTag {
        key: FieldKey {
            repository: Some("manifests".into()),
            policy: "api".into(),
            file: DEPLOYMENT_PATH.into(),
            field: "Deployment/api container api".into(),
        },
        tag: "1.3.0".into(),
        reason: HoldReason::Manual { by: "alice".into() },
        since: "2026-01-02T03:04:05Z".parse().unwrap(),
    }
}

fn sent_body(server_requests: &[wiremock::Request], api: &Api, m: &str, at: &str) -> Vec<String> {
    server_requests
        .iter()
        .filter(|r| r.method.as_str() == m && r.url.path() == at)
        .filter_map(|r| serde_json::from_slice::<Value>(&r.body).ok())
        .filter_map(|v| v[api.text].as_str().map(str::to_owned))
        .collect()
}

async fn a_dashboard_is_kept_in_place_releases_ticked_holds_and_closes(api: Api) {
    set_test_secrets();
    let server = MockServer::start().await;
    let repo = BareRepo::new();
    let dir = tempfile::tempdir().unwrap();
    let forge = (api.forge)(&server.uri());
    let (config, policies) = setup(dir.path(), &repo, &forge, true);
    let cache = RepoCache::new(dir.path().join("cache"));
    let state = State::open(&dir.path().join("state")).unwrap();
    let held = the_hold();
    state.hold(&held).unwrap();
    let shared = Shared {
        state: Some(Arc::new(state)),
        ..Default::default()
    };
    let number = 5;
    let issue_path = format!("{}/{number}", api.issues);

    // First cycle: no dashboard yet, so one is opened, listing the hold with its box.
    let list = (api.authed)("GET", api.issues.into())
        .and(query_param("state", api.open))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!([])))
        .expect(1)
        .named("list open issues")
        .mount_as_scoped(&server)
        .await;
    let open = (api.authed)("POST", api.issues.into())
        .and(body_partial_json(json!({"title": "tagpilot dashboard"})))
        .respond_with(ResponseTemplate::new(201).set_body_json(api.issue(number, "")))
        .expect(1)
        .named("open the dashboard")
        .mount_as_scoped(&server)
        .await;
    let first = cycle(&config, &policies, &cache, &shared).await;
    assert!(
        first.plan.changes.is_empty(),
        "held: {:?}",
        first.plan.changes
    );
    let requests = server.received_requests().await.unwrap();
    let opened = sent_body(&requests, &api, "POST", api.issues);
    drop((list, open));
    assert_eq!(opened.len(), 1);
    let id = held.key.id();
    let unticked =
        format!("- [ ] <!-- tagpilot:release:{id} --> release hold on {DEPLOYMENT_PATH}");
    assert!(opened[0].contains(&unticked), "{}", opened[0]);
    let store = shared.state.as_deref().unwrap();
    assert_eq!(store.dashboard_issue("manifests"), Some(number));

    // A person ticks the box. The next cycle reads the issue by its number, releases the
    // hold before planning, moves the field, and rewrites the same issue: no second one.
    let ticked = opened[0].replace("- [ ] <!--", "- [x] <!--");
    (api.authed)("GET", issue_path.clone())
        .respond_with(ResponseTemplate::new(200).set_body_json(api.issue(number, &ticked)))
        .mount(&server)
        .await;
    let edit = (api.authed)(api.edit, issue_path.clone())
        .respond_with(ResponseTemplate::new(200).set_body_json(api.issue(number, "")))
        .named("edit the dashboard")
        .mount_as_scoped(&server)
        .await;
    let second = cycle(&config, &policies, &cache, &shared).await;
    let to: Vec<&str> = second.plan.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(to, ["1.3.0"], "the released hold no longer blocks 1.3.0");
    assert!(store.holds().unwrap().is_empty());
    assert!(
        repo.show("main", DEPLOYMENT_PATH)
            .contains("registry.example/api:1.3.0")
    );
    let requests = server.received_requests().await.unwrap();
    assert!(
        sent_body(&requests, &api, "POST", api.issues).len() == 1,
        "opened once only"
    );
    let edited = sent_body(&requests, &api, api.edit, &issue_path);
    assert_eq!(edited.len(), 1, "edited in place");
    assert!(edited[0].contains("## Holds\n\nNone."), "{}", edited[0]);
    assert!(
        edited[0].starts_with("<!-- tagpilot:dashboard -->"),
        "{}",
        edited[0]
    );
    assert_eq!(store.dashboard_issue("manifests"), Some(number));

    // Opted out: the issue is closed and forgotten.
    drop(edit);
    let (off, _) = setup(dir.path(), &repo, &forge, false);
    (api.authed)(api.edit, issue_path.clone())
        .and(body_partial_json(api.closing.clone()))
        .respond_with(ResponseTemplate::new(200).set_body_json(api.issue(number, "")))
        .expect(1)
        .named("close the dashboard")
        .mount(&server)
        .await;
    cycle(&off, &policies, &cache, &shared).await;
    assert_eq!(store.dashboard_issue("manifests"), None);
    server.verify().await;
}

#[tokio::test]
async fn github_dashboard_issue() {
    a_dashboard_is_kept_in_place_releases_ticked_holds_and_closes(GITHUB()).await;
}

#[tokio::test]
async fn gitlab_dashboard_issue() {
    a_dashboard_is_kept_in_place_releases_ticked_holds_and_closes(GITLAB()).await;
}
