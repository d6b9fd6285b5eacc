//! `tagpilot run` across restarts and faults: the service in-process
//! (`tests/it/support/service.rs`) with its `--state-dir`, real registries and bare
//! repositories, and HTTP doubles only where a real server cannot produce
//! the fault (429/503 answers, a registry that never answers). No timing is asserted: each test
//! checks outcomes (commits, counts, exit codes) and the order they came in.

use std::time::Duration;

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::daemon::{deployment, hanging_registry, setup_with, tag_reached};
use crate::support::git::{
    BareRepo, DEPLOYMENT_PATH, HTTP_PASSWORD_ENV, HTTP_USER, HttpGitServer, write_executable,
};
use crate::support::registry::{Auth, ImageSpec, TestRegistry};
use crate::support::service::{self, Service, Signal, eventually};
use tagpilot::run::Stopped;

fn policy(name: &str, image: &str, repository: &str, spec: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n{spec}  targets:\n    - repository: {repository}\n      paths: [\"apps/**\"]\n"
    )
}

fn semver() -> &'static str {
    "  strategy:\n    semver: {range: \"*\"}\n"
}

/// How many of the registry's logged requests start with `prefix`.
fn count(registry: &TestRegistry, prefix: &str) -> usize {
    registry
        .requests()
        .iter()
        .filter(|r| r.starts_with(prefix))
        .count()
}

/// A metric's value in `/metrics` text, 0 when absent.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn a_restart_fetches_no_image_metadata_it_already_has() {
    service::run(false, |logs| async move {
        let s = setup_with(TestRegistry::start_with_access_log(Auth::None).await).await;
        // Build times, so newestBuild reads every tag's manifest and config.
        s.registry
            .push_image(
                "shop/api",
                "1.0.0",
                ImageSpec::default().created("2024-01-01T00:00:00Z"),
            )
            .await;
        s.registry
            .push_image(
                "shop/api",
                "1.1.0",
                ImageSpec::default().created("2024-02-01T00:00:00Z"),
            )
            .await;
        std::fs::write(
            s.dir.path().join("policies/api.yaml"),
            policy(
                "api",
                &s.registry.image("shop/api"),
                "manifests",
                "  strategy:\n    newestBuild: {}\n",
            ),
        )
        .unwrap();
        let (blobs, by_digest, listings) = (
            "GET /v2/shop/api/blobs/",
            "GET /v2/shop/api/manifests/sha256:",
            "GET /v2/shop/api/tags/list",
        );
        let before = (count(&s.registry, blobs), count(&s.registry, by_digest));

        let first = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        first.ready().await;
        tag_reached(&s, &first, "1.1.0", Duration::ZERO).await;
        let (stopped, log) = first.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        let fetched = (count(&s.registry, blobs), count(&s.registry, by_digest));
        assert!(
            fetched.0 >= before.0 + 2 && fetched.1 >= before.1 + 2,
            "the first run read both configs and manifests: {before:?} → {fetched:?}"
        );
        let listed = count(&s.registry, listings);

        let second = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        second.ready().await;
        let metrics = second.text("/metrics").await;
        let (stopped, log) = second.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        assert!(
            count(&s.registry, listings) > listed,
            "the second run asked the registry for tags"
        );
        assert_eq!(
            (count(&s.registry, blobs), count(&s.registry, by_digest)),
            fetched,
            "the second run fetched configs or manifests it already had:\n{:#?}",
            s.registry.requests()
        );
        assert!(
            metric(&metrics, "tagpilot_metadata_cache_hits_total") >= 4.0,
            "{metrics}"
        );
    });
}

#[test]
fn a_corrupt_state_file_is_moved_aside_and_the_daemon_works_on() {
    service::run(false, |logs| async move {
        let s = setup_with(TestRegistry::start(Auth::None).await).await;
        let state = s.dir.path().join("state");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::write(state.join("state.redb"), vec![0x42; 32 * 1024]).unwrap();

        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        daemon.ready().await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        assert!(log.contains("moving it aside"), "{log}");
        let aside = std::fs::read_dir(&state)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with("state.redb.corrupt-")
            })
            .count();
        assert_eq!(aside, 1);
    });
}

#[test]
fn min_age_holds_a_new_tag_by_when_it_was_first_seen() {
    service::run(false, |logs| async move {
        let s = setup_with(TestRegistry::start(Auth::None).await).await;
        std::fs::write(
            s.dir.path().join("policies/api.yaml"),
            policy(
                "api",
                &s.registry.image("shop/api"),
                "manifests",
                &format!("{}  minAge: 1h\n", semver()),
            ),
        )
        .unwrap();
        // What an earlier run remembered: 1.0.0 and 1.1.0 were first seen two hours ago.
        {
            use tagpilot::registry::MetadataStore;
            let state = tagpilot::state::State::open(&s.dir.path().join("state")).unwrap();
            let two_hours_ago = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(2);
            state.first_seen(
                &s.registry.repository("shop/api"),
                &["1.0.0", "1.1.0"],
                two_hours_ago,
            );
            state.flush();
        }
        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;

        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        daemon.ready().await;
        // 1.1.0 is old enough; 1.2.0, first seen now, is held.
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        // Cycles follow one another, as the interval passes, until two have held it.
        daemon
            .after_cycles("1.2.0 held twice", || async {
                metric(
                    &daemon.text("/metrics").await,
                    "tagpilot_updates_total{policy=\"api\",result=\"held\"}",
                ) >= 2.0
            })
            .await;
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.1.0"),
            "the young 1.2.0 went out"
        );
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

/// `tagpilot.yaml` with one registry per `(host, timeout)` and one repository per
/// `(name, url)`, all pushing to `main`.
fn config(registries: &[(&str, Option<&str>)], repositories: &[(&str, String)]) -> String {
    let mut yaml = String::from("registries:\n");
    for (host, timeout) in registries {
        yaml.push_str(&format!("  - host: {host}\n    insecure: true\n"));
        if let Some(t) = timeout {
            yaml.push_str(&format!("    timeout: {t}\n"));
        }
    }
    yaml.push_str("policies: policies/\nrepositories:\n");
    for (name, url) in repositories {
        yaml.push_str(&format!(
            "  - name: {name}\n    url: {url}\n    branch: main\n    write:\n      mode: push\n"
        ));
    }
    yaml
}

fn deployment_on(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}\n"
    )
}

/// Two repositories: `slow` follows an image on a registry that never answers, `healthy` one on
/// a real registry. Returns the directory, both repositories and the real registry.
async fn two_registries(
    hanging_host: &str,
    timeout: &str,
) -> (tempfile::TempDir, BareRepo, BareRepo, TestRegistry) {
    let registry = TestRegistry::start(Auth::None).await;
    registry
        .push_tags("shop/web", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let (slow, healthy) = (BareRepo::new(), BareRepo::new());
    slow.push_change(
        "main",
        DEPLOYMENT_PATH,
        &deployment_on(&format!("{hanging_host}/shop/api:1.0.0")),
        "on the hanging registry",
    );
    healthy.push_change(
        "main",
        DEPLOYMENT_PATH,
        &deployment_on(&registry.image("shop/web:1.0.0")),
        "on the real registry",
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tagpilot.yaml"),
        config(
            &[(hanging_host, Some(timeout)), (&registry.host(), None)],
            // The hanging one first: targets taken one after the other would wait on it.
            &[("slow", slow.file_url()), ("healthy", healthy.file_url())],
        ),
    )
    .unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies/api.yaml"),
        policy("api", &format!("{hanging_host}/shop/api"), "slow", semver()),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("policies/web.yaml"),
        policy("web", &registry.image("shop/web"), "healthy", semver()),
    )
    .unwrap();
    (dir, slow, healthy, registry)
}

#[test]
fn a_registry_that_hangs_delays_only_the_repository_that_needs_it() {
    service::run(false, |logs| async move {
        let (host, accepted) = hanging_registry();
        // Longer than the test: the hanging registry is still hanging when the other commit lands.
        let (dir, slow, healthy, registry) = two_registries(&host, "10m").await;
        let daemon = Service::start(dir.path(), Duration::from_secs(1), &logs).await;
        daemon.live().await;
        let want = deployment_on(&registry.image("shop/web:1.1.0"));
        // Polled: the write is in the middle of a cycle that does not end (the hanging
        // registry holds it), and a push over file:// runs no hook that could tell.
        eventually("the healthy repository written", &logs, || {
            let written = healthy.show("main", DEPLOYMENT_PATH) == want;
            async move { written }
        })
        .await;
        // Meanwhile the first cycle is still waiting on the hanging registry.
        assert!(*accepted.borrow() >= 1);
        assert_eq!(
            daemon.status("/readyz").await,
            Some(503),
            "{}",
            daemon.log()
        );
        assert_eq!(slow.subjects("main").len(), 2, "nothing pushed to slow");
    });
}

#[test]
fn a_registry_that_hangs_past_its_timeout_is_reported_and_the_cycle_completes() {
    service::run(false, |logs| async move {
        let (host, _) = hanging_registry();
        let (dir, slow, healthy, registry) = two_registries(&host, "1s").await;
        let daemon = Service::start(dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        assert_eq!(
            healthy.show("main", DEPLOYMENT_PATH),
            deployment_on(&registry.image("shop/web:1.1.0"))
        );
        assert_eq!(slow.subjects("main").len(), 2, "nothing pushed to slow");
        let metrics = daemon.text("/metrics").await;
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        assert!(
            log.contains(&format!("registry {host} did not answer within 1s")),
            "{log}"
        );
        assert!(
            metric(
                &metrics,
                "tagpilot_updates_total{policy=\"api\",result=\"failed\"}"
            ) >= 1.0,
            "{metrics}"
        );
    });
}

/// A registry double whose tag list first answers `status` (with `Retry-After: 1` when
/// `retry_after`), then the tags.
async fn refusing_once(status: u16, retry_after: bool) -> MockServer {
    let server = MockServer::start().await;
    let mut refusal = ResponseTemplate::new(status);
    if retry_after {
        refusal = refusal.insert_header("Retry-After", "1");
    }
    Mock::given(method("GET"))
        .and(path("/v2/shop/api/tags/list"))
        .respond_with(refusal)
        .up_to_n_times(1)
        .with_priority(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/shop/api/tags/list"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"name": "shop/api", "tags": ["1.0.0", "1.1.0"]})),
        )
        .with_priority(2)
        .mount(&server)
        .await;
    server
}

#[test]
fn a_429_with_retry_after_and_a_503_are_waited_out_and_the_update_lands() {
    service::run(false, |logs| async move {
        for (status, retry_after) in [(429, true), (503, false)] {
            let server = refusing_once(status, retry_after).await;
            let host = server.address().to_string();
            let repo = BareRepo::new();
            repo.push_change(
                "main",
                DEPLOYMENT_PATH,
                &deployment_on(&format!("{host}/shop/api:1.0.0")),
                "on the double",
            );
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(
                dir.path().join("tagpilot.yaml"),
                config(&[(&host, None)], &[("manifests", repo.file_url())]),
            )
            .unwrap();
            std::fs::create_dir_all(dir.path().join("policies")).unwrap();
            std::fs::write(
                dir.path().join("policies/api.yaml"),
                policy("api", &format!("{host}/shop/api"), "manifests", semver()),
            )
            .unwrap();
            let daemon = Service::start(dir.path(), Duration::from_secs(3600), &logs).await;
            daemon.ready().await;
            assert_eq!(
                repo.show("main", DEPLOYMENT_PATH),
                deployment_on(&format!("{host}/shop/api:1.1.0")),
                "{status}: the first cycle waited and retried:\n{}",
                daemon.log()
            );
            let metrics = daemon.text("/metrics").await;
            let (stopped, log) = daemon.terminate().await;
            assert_eq!(stopped, Stopped::Drained, "{log}");
            for want in [
                format!(
                    "tagpilot_registry_requests_total{{registry=\"{host}\",status=\"{status}\"}} 1"
                ),
                format!("tagpilot_registry_requests_total{{registry=\"{host}\",status=\"200\"}}"),
                "tagpilot_cycles_total{result=\"ok\"} 1".to_string(),
            ] {
                assert!(metrics.contains(&want), "{want} missing:\n{metrics}");
            }
            server.verify().await;
        }
    });
}

#[test]
fn sigterm_during_a_push_finishes_it_and_exits_0() {
    service::run(false, |logs| async move {
        crate::support::git::set_test_secrets();
        let s = setup_with(TestRegistry::start(Auth::None).await).await;
        // The push waits in the server's pre-receive hook, long enough for a signal to arrive.
        let mut started = Signal::at(&s.dir.path().join("push-started"));
        write_executable(
            &s.repo.path().join("hooks/pre-receive"),
            &format!(
                "#!/bin/sh\ncat >/dev/null\necho started > '{}'\nsleep 2\nexit 0\n",
                started.path().display()
            ),
        );
        let server = HttpGitServer::start(s.repo.dir.path());
        let config = s.dir.path().join("tagpilot.yaml");
        let text = std::fs::read_to_string(&config).unwrap().replace(
            &format!("url: {}", s.repo.file_url()),
            &format!(
                "url: {}\n    auth: {{username: {HTTP_USER}, passwordEnv: {HTTP_PASSWORD_ENV}}}",
                server.url("origin.git")
            ),
        );
        std::fs::write(&config, text).unwrap();
        let before = s.repo.rev("main").unwrap();

        let mut daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.live().await;
        started.received("the push starting", &logs).await;
        daemon.shutdown.drain("SIGTERM");
        let stopped = daemon.stopped().await;
        assert_eq!(stopped, Stopped::Drained, "{}", daemon.log());
        // The push in flight was finished, whole: one new commit with the new tag.
        let after = s.repo.rev("main").unwrap();
        assert_ne!(after, before, "the push in flight was dropped");
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.1.0")
        );
        assert_eq!(
            s.repo.subjects("main").len(),
            3,
            "{:?}",
            s.repo.subjects("main")
        );
    });
}

/// A registry that timed out in a cycle is marked down for the rest of it. A registry
/// notification for one of its images is a reason to ask again: the re-check sends its request,
/// and with no answer again it counts as an outage, never as a success that asked nothing.
#[test]
fn a_recheck_asks_a_registry_the_last_cycle_marked_down_again() {
    service::run(false, |logs| async move {
        let (host, accepted) = hanging_registry();
        let (dir, _slow, _healthy, _registry) = two_registries(&host, "1s").await;
        crate::daemon::with_webhooks(dir.path(), "");
        let daemon = Service::start(dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        let asked = *accepted.borrow();
        assert!(asked >= 1, "{}", daemon.log());

        let event = crate::daemon::push_event(&host, "shop/api");
        assert_eq!(crate::daemon::notify(daemon.base.clone(), event).await, 202);
        let outage = "tagpilot_webhook_rechecks_total{result=\"registries_unreachable\"}";
        // Past the debounce window; an hour between cycles, so no cycle runs meanwhile.
        daemon.clock.advance(Duration::from_millis(250));
        daemon.until("the re-check", |p| p.rechecks >= 1).await;
        let metrics = daemon.text("/metrics").await;
        assert_eq!(metric(&metrics, outage), 1.0, "{metrics}");
        assert_eq!(
            metric(&metrics, "tagpilot_webhook_rechecks_total{result=\"ok\"}"),
            0.0,
            "{metrics}"
        );
        assert!(
            *accepted.borrow() > asked,
            "the re-check did not ask the registry again"
        );
    });
}
