//! Verification in `tagpilot run` (issue 19), in-process: a real registry and a bare
//! repository over file://, the Kubernetes API double scripting the Argo CD Application that
//! deploys `apps/api` (synced to whatever the base branch's tip is, with the health the test
//! sets), and the GitHub double taking the `tagpilot/verify` statuses.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tagpilot::holds::HoldReason;
use tagpilot::state::State;
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::daemon::{Setup, setup, tag_reached};
use crate::support::forge_double::{ForgeDouble, GitHubApi};
use crate::support::git::{
    HTTP_PASSWORD_ENV, HTTP_USER, HttpGitServer, set_test_secrets, write_executable,
};
use crate::support::service::{self, Service};

const ALL_APPS: &str = "/apis/argoproj.io/v1alpha1/applications";
const APPS: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications";

/// The Argo CD Application `argocd/shop-api` as the Kubernetes API double serves it: its
/// source is the test's repository at `apps/api`, it is synced to the base branch's tip by an
/// operation that succeeded, reconciled after it, and its health is whatever the test set.
struct ArgoCd {
    server: MockServer,
    health: Arc<Mutex<Value>>,
    /// How long a request to the double may take; a watch open longer is ended and
    /// started again from a new listing.
    timeout: Duration,
    /// How many watches of the Application were asked for, as they come.
    watches: tokio::sync::watch::Receiver<usize>,
}

impl ArgoCd {
    async fn start(s: &Setup, health: Value) -> ArgoCd {
        ArgoCd::start_at(s, &s.repo.file_url(), health).await
    }

    /// The Application's source at `url` (the address tagpilot.yaml gives the repository).
    async fn start_at(s: &Setup, url: &str, health: Value) -> ArgoCd {
        let server = MockServer::start().await;
        let health = Arc::new(Mutex::new(health));
        let list = {
            let (repo, url, health) = (s.repo.path(), url.to_string(), health.clone());
            move |_: &Request| {
                let tip = tip(&repo);
                let app = application(&url, &tip, health.lock().unwrap().clone());
                ResponseTemplate::new(200).set_body_json(json!({
                    "apiVersion": "argoproj.io/v1alpha1",
                    "kind": "ApplicationList",
                    "metadata": {"resourceVersion": "7"},
                    "items": [app],
                }))
            }
        };
        for at in [ALL_APPS, APPS] {
            Mock::given(method("GET"))
                .and(path(at))
                .and(query_param_is_missing("watch"))
                .respond_with(list.clone())
                .mount(&server)
                .await;
        }
        // The watch after the listing: nothing changes while it is open (the test sets the
        // health before the follower lists).
        let (watched, watches) = tokio::sync::watch::channel(0);
        Mock::given(method("GET"))
            .and(path(APPS))
            .and(query_param("watch", "true"))
            .respond_with(move |_: &Request| {
                watched.send_modify(|n| *n += 1);
                ResponseTemplate::new(200).set_delay(Duration::from_secs(120))
            })
            .mount(&server)
            .await;
        ArgoCd {
            server,
            health,
            timeout: Duration::from_secs(5),
            watches,
        }
    }

    async fn cluster(&self) -> tagpilot::kubernetes::Cluster {
        crate::support::kube::cluster(&self.server, self.timeout).await
    }

    /// Waits (bounded) until a watch of the Application is asked for: the follower has judged
    /// the state it listed first.
    async fn watched(&mut self) {
        let asked = self.watches.wait_for(|n| *n > 0);
        match tokio::time::timeout(crate::support::PATIENCE, asked).await {
            Ok(Ok(_)) => {}
            _ => panic!("the Application was never watched"),
        }
    }
}

/// The base branch's tip of the bare repository at `repo`.
fn tip(repo: &std::path::Path) -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "main"])
        .current_dir(repo)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn application(url: &str, revision: &str, health: Value) -> Value {
    json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Application",
        "metadata": {"name": "shop-api", "namespace": "argocd", "resourceVersion": "7"},
        "spec": {"source": {"repoURL": url, "path": "apps/api", "targetRevision": "main"}},
        "status": {
            "sync": {"status": "Synced", "revision": revision},
            "health": health,
            "operationState": {
                "phase": "Succeeded",
                "startedAt": "2026-11-25T10:00:10Z",
                "finishedAt": "2026-11-25T10:00:30Z",
                "syncResult": {"revision": revision}
            },
            "reconciledAt": "2026-11-25T10:00:31Z"
        }
    })
}

const DEGRADED_MESSAGE: &str = "Deployment \"api\" exceeded its progress deadline";

fn degraded() -> Value {
    json!({"status": "Degraded", "message": DEGRADED_MESSAGE})
}

/// `verify:` (and a GitHub `forge:` for the statuses) on the setup's repository.
fn configure(s: &Setup, verify: &str, forge_uri: &str) {
    set_test_secrets();
    let file = s.dir.path().join("tagpilot.yaml");
    let config = std::fs::read_to_string(&file).unwrap().replace(
        "    write:\n      mode: push\n",
        &format!(
            "    write:\n      mode: push\n    verify: {verify}\n    forge:\n      {}\n",
            GitHubApi::forge_yaml(forge_uri)
        ),
    );
    std::fs::write(file, config).unwrap();
}

/// Accepts every `tagpilot/verify` status of `state` on the forge double.
async fn accept_status(forge: &MockServer, state: &str) {
    Mock::given(method("POST"))
        .and(wiremock::matchers::header(
            "authorization",
            crate::support::github::AUTH,
        ))
        .and(wiremock::matchers::path_regex(
            "^/repos/acme/manifests/statuses/[0-9a-f]{40}$",
        ))
        .and(wiremock::matchers::body_partial_json(
            json!({"state": state, "context": "tagpilot/verify"}),
        ))
        .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1})))
        .mount(forge)
        .await;
}

/// The statuses the forge double received, as (commit, state, description).
async fn statuses(forge: &MockServer) -> Vec<(String, String, String)> {
    forge
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().contains("/statuses/"))
        .map(|r| {
            let body: Value = serde_json::from_slice(&r.body).unwrap();
            (
                r.url.path().rsplit('/').next().unwrap().to_string(),
                body["state"].as_str().unwrap_or_default().to_string(),
                body["description"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

async fn start(s: &Setup, argocd: &ArgoCd, logs: &service::Logs) -> Service {
    let mut settings = service::settings(s.dir.path(), Duration::from_secs(3600));
    settings.cluster = Some(argocd.cluster().await);
    Service::start_with(s.dir.path(), settings, logs).await
}

/// The usual start: a registry and a repository ([`setup`]), the GitHub double taking the
/// `tagpilot/verify` statuses `states`, `verify` on the repository, the Application at
/// `health`, and the service running.
async fn scenario(
    logs: &service::Logs,
    verify: &str,
    states: &[&str],
    health: Value,
) -> (Setup, MockServer, ArgoCd, Service) {
    let s = setup().await;
    let forge = MockServer::start().await;
    for state in states {
        accept_status(&forge, state).await;
    }
    configure(&s, verify, &forge.uri());
    let argocd = ArgoCd::start(&s, health).await;
    let service = start(&s, &argocd, logs).await;
    (s, forge, argocd, service)
}

/// The metric `tagpilot_verifications_total{result="…"}`.
async fn verifications(service: &Service, result: &str) -> f64 {
    let text = service.text("/metrics").await;
    let prefix = format!("tagpilot_verifications_total{{result=\"{result}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until verification's steps, as the service publishes them, satisfy `done`.
async fn until_verification(
    service: &Service,
    what: &str,
    done: impl Fn(&tagpilot::run::Verifications) -> bool,
) {
    service.until(what, |p| done(&p.verifications)).await;
}

#[test]
fn a_push_followed_to_a_healthy_application_is_verified_and_its_commit_gets_success() {
    service::run(false, |logs| async move {
        let (s, forge, _argocd, daemon) = scenario(
            &logs,
            "{onFailure: hold, timeout: 10m}",
            &["pending", "success"],
            json!({"status": "Healthy"}),
        )
        .await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let pushed = s.repo.rev("main").unwrap();
        until_verification(&daemon, "the change verified", |v| v.verified >= 1).await;
        assert_eq!(verifications(&daemon, "verified").await, 1.0);
        // Pending, then success.
        until_verification(&daemon, "the success status sent", |v| v.statuses >= 2).await;
        assert!(
            statuses(&forge)
                .await
                .iter()
                .any(|(_, state, _)| state == "success")
        );
        let metrics = daemon.text("/metrics").await;
        assert!(
            metrics.contains("tagpilot_verification_time_to_healthy_seconds_count 1"),
            "{metrics}"
        );
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, tagpilot::run::Stopped::Drained, "{log}");
        let sent = statuses(&forge).await;
        assert_eq!(
            sent.iter()
                .map(|(c, st, _)| (c.as_str(), st.as_str()))
                .collect::<Vec<_>>(),
            vec![(pushed.as_str(), "pending"), (pushed.as_str(), "success")],
            "pending when following starts, success once healthy, on the pushed commit"
        );
        assert!(
            log.contains(
                "verified: the Application runs api: apps/api/deployment.yaml 1.0.0 → 1.1.0 healthy"
            ),
            "{log}"
        );
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(state.holds().unwrap().is_empty(), "nothing held");
        assert!(
            state.verifications().unwrap().is_empty(),
            "nothing left pending"
        );
    });
}

#[test]
fn a_push_whose_application_turns_degraded_holds_the_tag_and_fails_the_commit_with_the_health_message()
 {
    service::run(false, |logs| async move {
        let (s, forge, _argocd, daemon) = scenario(
            &logs,
            "{onFailure: hold}",
            &["pending", "failure"],
            degraded(),
        )
        .await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the change failed", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "failed").await, 1.0);
        // Pending, then failure.
        until_verification(&daemon, "the failure status sent", |v| v.statuses >= 2).await;
        assert!(
            statuses(&forge)
                .await
                .iter()
                .any(|(_, state, _)| state == "failure")
        );
        // The next cycle has nothing to propose: the field runs the held tag.
        daemon.next_cycle().await;
        let (_, log) = daemon.terminate().await;
        let failure = statuses(&forge)
            .await
            .into_iter()
            .find(|(_, state, _)| state == "failure")
            .unwrap();
        assert!(
            failure.2.contains("argocd/shop-api") && failure.2.contains("Degraded"),
            "{failure:?}"
        );
        let state = State::open(&s.dir.path().join("state")).unwrap();
        let holds = state.holds().unwrap();
        assert_eq!(holds.len(), 1, "{holds:?}\n{log}");
        let held = &holds[0];
        assert_eq!(
            (
                held.key.repository.as_deref(),
                held.key.policy.as_str(),
                held.key.file.as_str(),
                held.tag.as_str()
            ),
            (
                Some("manifests"),
                "api",
                "apps/api/deployment.yaml",
                "1.1.0"
            )
        );
        match &held.reason {
            HoldReason::Failed {
                application,
                failure,
            } => {
                assert_eq!(application, "argocd/shop-api");
                assert!(failure.contains(DEGRADED_MESSAGE), "{failure}");
            }
            other => panic!("held for {other:?}"),
        }
        assert!(state.verifications().unwrap().is_empty());
    });
}

#[test]
fn report_mode_reports_a_failure_and_holds_nothing() {
    service::run(false, |logs| async move {
        let (s, _forge, _argocd, daemon) = scenario(
            &logs,
            "{onFailure: report}",
            &["pending", "failure"],
            degraded(),
        )
        .await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the change failed", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "failed").await, 1.0);
        let (_, log) = daemon.terminate().await;
        assert!(
            log.contains("verification failed for api: apps/api/deployment.yaml 1.0.0 → 1.1.0")
                && log.contains(DEGRADED_MESSAGE),
            "{log}"
        );
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(state.holds().unwrap().is_empty(), "report holds nothing");
    });
}

#[test]
fn a_change_not_healthy_within_its_timeout_fails_as_timed_out() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "failure").await;
        configure(&s, "{onFailure: hold, timeout: 2s}", &forge.uri());
        let mut argocd = ArgoCd::start(
            &s,
            json!({"status": "Progressing", "message": "Waiting for rollout to finish"}),
        )
        .await;
        let daemon = start(&s, &argocd, &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        // The timeout runs on the service's clock: moved past it rather than waited out, once
        // the follower has judged the state it listed (and watches for the next).
        argocd.watched().await;
        daemon.clock.advance(Duration::from_secs(2));
        until_verification(&daemon, "the change timed out", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "timed_out").await, 1.0);
        let (_, log) = daemon.terminate().await;
        assert!(
            log.contains(
                "not healthy within 2s; still waiting for health Healthy (it is Progressing)"
            ),
            "{log}"
        );
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert_eq!(
            state.holds().unwrap().len(),
            1,
            "a timeout holds like a failure"
        );
    });
}

#[test]
fn a_restart_resumes_a_verification_under_way() {
    service::run(false, |logs| async move {
        let (s, _forge, argocd, first) = scenario(
            &logs,
            "{onFailure: hold, timeout: 10m}",
            &["pending", "success"],
            json!({"status": "Progressing"}),
        )
        .await;
        tag_reached(&s, &first, "1.1.0", Duration::ZERO).await;
        until_verification(&first, "following started", |v| v.following >= 1).await;
        assert!(
            logs.text()
                .contains("following the change in its Application")
        );
        let (_, log) = first.terminate().await;
        {
            let state = State::open(&s.dir.path().join("state")).unwrap();
            let pending = state.verifications().unwrap();
            assert_eq!(pending.len(), 1, "{log}");
            assert_eq!(pending[0].application, "argocd/shop-api");
            assert_eq!(pending[0].commit, s.repo.rev("main").unwrap());
        }
        *argocd.health.lock().unwrap() = json!({"status": "Healthy"});
        let second = start(&s, &argocd, &logs).await;
        until_verification(&second, "the resumed change verified", |v| v.verified >= 1).await;
        assert_eq!(verifications(&second, "verified").await, 1.0);
        let (_, log) = second.terminate().await;
        assert!(log.contains("resuming verifications under way"), "{log}");
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(state.verifications().unwrap().is_empty());
    });
}

#[test]
fn a_merged_pull_request_is_followed_from_its_merge_commit_and_its_head_gets_the_status() {
    use crate::support::github::{AUTH, PULLS, created, ok_json, pull, pull_path};
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "success").await;
        configure(&s, "{onFailure: hold, timeout: 10m}", &forge.uri());
        let file = s.dir.path().join("tagpilot.yaml");
        let config = std::fs::read_to_string(&file).unwrap().replace(
            "      mode: push\n",
            "      mode: pull-request\n      group: policy\n",
        );
        std::fs::write(&file, config).unwrap();
        let authed = |m: &str, at: &str| {
            Mock::given(method(m))
                .and(path(at.to_string()))
                .and(wiremock::matchers::header("authorization", AUTH))
        };
        authed("GET", PULLS)
            .respond_with(ok_json(json!([])))
            .mount(&forge)
            .await;
        authed("POST", PULLS)
            .respond_with(created(pull(7, "", false)))
            .mount(&forge)
            .await;
        let bare = s.repo.path();
        authed("GET", &pull_path(7))
            .respond_with(move |_: &Request| {
                let tip = tip(&bare);
                ResponseTemplate::new(200).set_body_json(GitHubApi::merged_proposal(7, &tip, &tip))
            })
            .mount(&forge)
            .await;
        let argocd = ArgoCd::start(&s, json!({"status": "Healthy"})).await;
        let daemon = start(&s, &argocd, &logs).await;
        daemon
            .after_events("the pull request opened", || async {
                s.repo.rev("tagpilot/api").is_some()
            })
            .await;
        assert_eq!(
            verifications(&daemon, "verified").await,
            0.0,
            "not merged yet"
        );
        // A reviewer merges: the base branch fast-forwards to the pull request's head.
        let head = s.repo.rev("tagpilot/api").unwrap();
        let status = std::process::Command::new("git")
            .args(["update-ref", "refs/heads/main", &head])
            .current_dir(s.repo.path())
            .status()
            .unwrap();
        assert!(status.success());
        daemon.next_cycle().await;
        until_verification(&daemon, "the merged change verified", |v| v.verified >= 1).await;
        assert_eq!(verifications(&daemon, "verified").await, 1.0);
        // Pending, then success.
        until_verification(&daemon, "the success status sent", |v| v.statuses >= 2).await;
        assert!(
            statuses(&forge)
                .await
                .iter()
                .any(|(_, state, _)| state == "success")
        );
        let (_, log) = daemon.terminate().await;
        assert!(log.contains("pull request merged"), "{log}");
        let sent = statuses(&forge).await;
        assert!(
            sent.iter().all(|(commit, _, _)| commit == &head),
            "statuses on the pull request's head: {sent:?}"
        );
    });
}

#[test]
fn a_policy_verify_applies_to_its_changes_in_a_repository_without_one() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "failure").await;
        // The repository's `verify:` only to get the `forge:` block in; then taken out.
        configure(&s, "{onFailure: hold}", &forge.uri());
        let file = s.dir.path().join("tagpilot.yaml");
        let config = std::fs::read_to_string(&file)
            .unwrap()
            .replace("    verify: {onFailure: hold}\n", "");
        std::fs::write(&file, config).unwrap();
        let policy = s.dir.path().join("policies/api.yaml");
        let text = std::fs::read_to_string(&policy).unwrap().replace(
            "  targets:\n",
            "  verify: {onFailure: report, timeout: 5m}\n  targets:\n",
        );
        std::fs::write(&policy, text).unwrap();
        let argocd = ArgoCd::start(&s, degraded()).await;
        let daemon = start(&s, &argocd, &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the change failed", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "failed").await, 1.0);
        daemon.terminate().await;
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(
            state.holds().unwrap().is_empty(),
            "the policy's `report` applies, not a default hold"
        );
    });
}

#[test]
fn an_application_that_cannot_be_followed_is_named_and_the_loop_goes_on() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "failure").await;
        configure(&s, "{onFailure: hold}", &forge.uri());
        // Listed across namespaces, but gone when its follower looks for it.
        let server = MockServer::start().await;
        let (url, repo) = (s.repo.file_url(), s.repo.path());
        Mock::given(method("GET"))
            .and(path(ALL_APPS))
            .respond_with(move |_: &Request| {
                let app = application(&url, &tip(&repo), json!({"status": "Healthy"}));
                ResponseTemplate::new(200).set_body_json(json!({
                    "kind": "ApplicationList",
                    "metadata": {"resourceVersion": "7"},
                    "items": [app],
                }))
            })
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path(APPS))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "kind": "ApplicationList",
                "metadata": {"resourceVersion": "8"},
                "items": [],
            })))
            .mount(&server)
            .await;
        let argocd = ArgoCd {
            server,
            health: Arc::new(Mutex::new(Value::Null)),
            timeout: Duration::from_secs(5),
            watches: tokio::sync::watch::channel(0).1,
        };
        let daemon = start(&s, &argocd, &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the verification ended in an error", |v| {
            v.errors >= 1
        })
        .await;
        assert_eq!(verifications(&daemon, "error").await, 1.0);
        let next = daemon.next_cycle().await;
        daemon.cycle_done(next).await;
        let (_, log) = daemon.terminate().await;
        assert!(
            log.contains(
                "Application argocd/shop-api was deleted while its change was being verified"
            ),
            "{log}"
        );
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(state.holds().unwrap().is_empty(), "an error holds nothing");
        assert!(state.verifications().unwrap().is_empty());
        // Kept for promotions (issue 20): the field's tag is not verified, and says why.
        let ended = state.verified_tags().unwrap();
        assert_eq!(ended.len(), 1, "{ended:?}");
        assert_eq!(
            (ended[0].key.policy.as_str(), ended[0].tag.as_str()),
            ("api", "1.1.0")
        );
        let error = ended[0].error.as_deref().unwrap_or_default();
        assert!(
            error.contains(
                "Application argocd/shop-api was deleted while its change was being verified"
            ),
            "{error}"
        );
    });
}

#[test]
fn revert_mode_writes_the_reverse_change_and_holds_the_failed_tag() {
    service::run(false, |logs| async move {
        let (s, _forge, _argocd, daemon) = scenario(
            &logs,
            "{onFailure: revert}",
            &["pending", "failure"],
            degraded(),
        )
        .await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the change failed", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "failed").await, 1.0);
        // The reverse change, pushed to the base branch by the engine's revert writer: the
        // field is back on 1.0.0, in a commit tagpilot marks as its own revert.
        let before = crate::daemon::deployment(&s.registry, "1.0.0");
        until_verification(&daemon, "the revert done", |v| v.reverts >= 1).await;
        assert_eq!(
            s.repo.show("main", crate::support::git::DEPLOYMENT_PATH),
            before,
            "{}",
            daemon.log()
        );
        let message =
            crate::support::git::git(&s.repo.path(), &["log", "-1", "--format=%B", "main"]);
        assert!(message.starts_with("revert"), "{message}");
        assert!(message.contains("Tagpilot-Revert: "), "{message}");
        assert!(message.contains("Tagpilot-Policy: api"), "{message}");
        let metrics = daemon.text("/metrics").await;
        assert!(
            metrics.contains("tagpilot_reverts_total{result=\"written\"} 1"),
            "{metrics}"
        );
        let (_, log) = daemon.terminate().await;
        let state = State::open(&s.dir.path().join("state")).unwrap();
        let holds = state.holds().unwrap();
        assert_eq!(holds.len(), 1, "{log}");
        assert_eq!(holds[0].tag, "1.1.0");
    });
}

/// Commits the staging environment's Deployment on `tag` to the base branch, dated `at`.
fn commit_staging(s: &Setup, tag: &str, at: jiff::Timestamp) {
    let deployment = crate::daemon::deployment(&s.registry, tag);
    s.repo.commit_dated(
        &[("envs/staging/deployment.yaml".to_string(), deployment)],
        at,
        "staging runs it",
    );
}

/// The value of the series `name` (no labels) on `/metrics`.
fn series(metrics: &str, name: &str) -> Option<f64> {
    let prefix = format!("{name} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix)?.trim().parse().ok())
}

#[test]
fn a_pushed_promotion_verified_downstream_measures_its_lead_time_from_the_upstream() {
    use tagpilot::clock::Clock;
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "success").await;
        configure(&s, "{onFailure: hold, timeout: 10m}", &forge.uri());
        // Staging (policy `staging`, `envs/staging`) has run 1.1.0 for three hours; prod (policy
        // `api`, `apps/api`, which the Application deploys) follows it after an hour's soak.
        let staged = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(3);
        commit_staging(&s, "1.1.0", staged);
        std::fs::write(
            s.dir.path().join("policies/staging.yaml"),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: staging\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: manifests\n      paths: [\"envs/staging/**\"]\n",
                s.registry.image("shop/api")
            ),
        )
        .unwrap();
        let prod = s.dir.path().join("policies/api.yaml");
        let text = std::fs::read_to_string(&prod).unwrap().replace(
            "  targets:\n",
            "  promote:\n    from:\n      - policy: staging\n    after: 1h\n    write: push\n  targets:\n",
        );
        std::fs::write(&prod, text).unwrap();
        let argocd = ArgoCd::start(&s, json!({"status": "Healthy"})).await;
        let daemon = start(&s, &argocd, &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        until_verification(&daemon, "the promotion verified", |v| v.verified >= 1).await;
        assert_eq!(verifications(&daemon, "verified").await, 1.0);
        let metrics = daemon.text("/metrics").await;
        // From the commit that set 1.1.0 in staging (no verification followed it there) to
        // its promotion verified in prod, at the service clock's time, which never moved.
        let lead = daemon.clock.wall().as_second() - staged.as_second();
        assert!(lead >= 3 * 3600, "{lead}");
        assert_eq!(
            series(&metrics, "tagpilot_promotion_lead_time_seconds_count"),
            Some(1.0),
            "{metrics}"
        );
        assert_eq!(
            series(&metrics, "tagpilot_promotion_lead_time_seconds_sum"),
            Some(lead as f64),
            "{metrics}"
        );
        let (_, log) = daemon.terminate().await;
        let message =
            crate::support::git::git(&s.repo.path(), &["log", "-1", "--format=%B", "main"]);
        assert!(message.contains("1.1.0"), "{message}\n{log}");
    });
}

/// Argo CD syncs a commit someone pushed on top of tagpilot's before tagpilot's clone has it,
/// and the Application turns Degraded. The follower cannot tell then that the revision contains
/// the change; the next fetch can, and the state seen last is judged again after it, without
/// Argo CD writing its status again (the watch stays silent here, for longer than the test).
#[test]
fn a_revision_on_top_of_the_change_is_judged_again_after_the_next_fetch() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let server = HttpGitServer::start(s.repo.dir.path());
        let url = server.url("origin.git");
        // Someone else's commit lands on top of tagpilot's push as it is received (once).
        let marker = s.dir.path().join("pushed-on-top");
        write_executable(
            &s.repo.path().join("hooks/post-receive"),
            &format!(
                "#!/bin/sh\n[ -e '{m}' ] && exit 0\ntouch '{m}'\nexport GIT_AUTHOR_NAME=Dana GIT_AUTHOR_EMAIL=dana@example.com GIT_COMMITTER_NAME=Dana GIT_COMMITTER_EMAIL=dana@example.com\nc=$(git commit-tree 'main^{{tree}}' -p main -m 'another change')\ngit update-ref refs/heads/main \"$c\"\n",
                m = marker.display()
            ),
        );
        let file = s.dir.path().join("tagpilot.yaml");
        let config = std::fs::read_to_string(&file).unwrap().replace(
            &format!("    url: {}\n", s.repo.file_url()),
            &format!(
                "    url: {url}\n    auth: {{username: {HTTP_USER}, passwordEnv: {HTTP_PASSWORD_ENV}}}\n"
            ),
        );
        std::fs::write(&file, config).unwrap();
        let forge = MockServer::start().await;
        accept_status(&forge, "pending").await;
        accept_status(&forge, "failure").await;
        configure(&s, "{onFailure: hold, timeout: 24h}", &forge.uri());
        let mut argocd = ArgoCd::start_at(&s, &url, degraded()).await;
        argocd.timeout = Duration::from_secs(300);
        let daemon = start(&s, &argocd, &logs).await;

        // The follower judged the first state (then watched for the next).
        argocd.watched().await;
        assert!(marker.exists());
        assert_eq!(verifications(&daemon, "failed").await, 0.0);
        // The next cycle fetches the commit on top; the change is judged again.
        daemon.next_cycle().await;
        until_verification(&daemon, "the change failed", |v| v.failed >= 1).await;
        assert_eq!(verifications(&daemon, "failed").await, 1.0);
        let (_, log) = daemon.terminate().await;
        assert!(
            log.contains("verification failed for api: apps/api/deployment.yaml 1.0.0 → 1.1.0")
                && log.contains(DEGRADED_MESSAGE),
            "{log}"
        );
    });
}

/// A revert is never held by a freeze (issue 34): the freeze comes while the change is being
/// followed, the Application then turns Degraded, and the reverse change is written all the
/// same, while everything else waits.
#[test]
fn a_revert_is_written_during_a_freeze() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let forge = MockServer::start().await;
        for state in ["pending", "failure"] {
            accept_status(&forge, state).await;
        }
        configure(&s, "{onFailure: revert}", &forge.uri());
        std::fs::write(s.dir.path().join("freeze-token"), "stop-the-line\n").unwrap();
        let file = s.dir.path().join("tagpilot.yaml");
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str("holds:\n  freezeToken:\n    secretFile: freeze-token\n");
        std::fs::write(&file, text).unwrap();
        let mut argocd = ArgoCd::start(&s, json!({"status": "Progressing"})).await;
        let daemon = start(&s, &argocd, &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        argocd.watched().await;

        use tagpilot::cli::freeze::{FreezeArgs, freeze};
        freeze(&FreezeArgs {
            url: daemon.base.clone(),
            reason: "incident 4711".into(),
            by: "alice".into(),
            token_file: Some(s.dir.path().join("freeze-token")),
        })
        .await
        .unwrap();
        *argocd.health.lock().unwrap() = degraded();
        // The next cycle (frozen: it writes nothing) fetches, and the follower judges again.
        daemon.next_cycle().await;
        until_verification(&daemon, "the revert done", |v| v.reverts >= 1).await;
        assert_eq!(
            s.repo.show("main", crate::support::git::DEPLOYMENT_PATH),
            crate::daemon::deployment(&s.registry, "1.0.0"),
            "{}",
            daemon.log()
        );
        let message =
            crate::support::git::git(&s.repo.path(), &["log", "-1", "--format=%B", "main"]);
        assert!(message.contains("Tagpilot-Revert: "), "{message}");
        let shown: Value = serde_json::from_str(&daemon.text("/freeze").await).unwrap();
        assert_eq!(shown["frozen"], true, "the revert lifted the freeze");
    });
}
