//! `tagpilot run` end to end: the real binary, a real registry, a bare git repository over
//! file://, and its HTTP endpoints on a free port of 127.0.0.1.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::support::git::{
    BareRepo, DEPLOYMENT_PATH, HTTP_PASSWORD_ENV, HTTP_USER, HttpGitServer, set_test_secrets,
    write_executable,
};
use crate::support::registry::{Auth, ImageSpec, TestRegistry};
use crate::support::service::{self, Logs, Service, Signal};
use tagpilot::run::Stopped;

pub(crate) struct Setup {
    pub(crate) registry: TestRegistry,
    pub(crate) repo: BareRepo,
    pub(crate) dir: tempfile::TempDir,
}

pub(crate) fn deployment(registry: &TestRegistry, api: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {}:{api}\n",
        registry.image("shop/api"),
    )
}

/// A registry with `shop/api` 1.0.0 and 1.1.0, a bare repository whose Deployment is on 1.0.0,
/// and a tagpilot.yaml with one policy pushing to it.
pub(crate) async fn setup() -> Setup {
    setup_with(TestRegistry::start(Auth::None).await).await
}

pub(crate) async fn setup_with(registry: TestRegistry) -> Setup {
    registry
        .push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let repo = BareRepo::new();
    repo.push_change(
        "main",
        DEPLOYMENT_PATH,
        &deployment(&registry, "1.0.0"),
        "old tag",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "registries:\n{}policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    write:\n      mode: push\n",
        registry.registries_yaml(),
        repo.file_url()
    );
    std::fs::write(dir.path().join("tagpilot.yaml"), config).unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    std::fs::write(
        dir.path().join("policies/api.yaml"),
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n",
            registry.image("shop/api")
        ),
    )
    .unwrap();
    Setup {
        registry,
        repo,
        dir,
    }
}

/// A running `tagpilot run`, killed (by its own id) if a test ends without stopping it.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) base: String,
    log: std::path::PathBuf,
}

impl Daemon {
    /// Starts `tagpilot run --interval 1s` in `dir` with its state in `dir/state`.
    pub(crate) fn start(dir: &Path) -> Daemon {
        Daemon::start_with(dir, "1s", &[])
    }

    /// Listens on a port of 127.0.0.1 the kernel picks (`--listen 127.0.0.1:0`), read back
    /// from the log, so no other process can take it in between.
    pub(crate) fn start_with(dir: &Path, interval: &str, env: &[(&str, &str)]) -> Daemon {
        let log = tempfile::Builder::new()
            .prefix("daemon-")
            .suffix(".log")
            .tempfile_in(dir)
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let mut child = daemon_command(dir, 0)
            .env("TAGPILOT_INTERVAL", interval)
            .envs(env.iter().copied())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start tagpilot run");
        let addr = listening_on(&log, &mut child);
        Daemon {
            child,
            base: format!("http://{addr}"),
            log,
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The status of `GET path`, or `None` while nothing listens.
    pub(crate) async fn status(&self, path: &str) -> Option<u16> {
        let response = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        Some(response.status().as_u16())
    }

    pub(crate) async fn text(&self, path: &str) -> String {
        reqwest::get(format!("{}{path}", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Waits until `GET path` answers `want`, and returns every status seen before.
    ///
    /// A bounded poll, kept on purpose: this is the binary in a process of its own, whose
    /// only way of telling what it has done is its HTTP endpoints (and its log); the tests of
    /// `run` that need no flag or environment of the binary's run in-process and wait on
    /// [`tagpilot::run::Events`] instead.
    pub(crate) async fn wait_for(&mut self, path: &str, want: u16) -> Vec<Option<u16>> {
        let deadline = Instant::now() + crate::support::PATIENCE;
        let mut seen = Vec::new();
        loop {
            let status = self.status(path).await;
            if status == Some(want) {
                return seen;
            }
            if let Ok(Some(exit)) = self.child.try_wait() {
                panic!("tagpilot run exited with {exit}:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "{path} never answered {want} (saw {seen:?}):\n{}",
                self.log()
            );
            if seen.last() != Some(&status) {
                seen.push(status);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Waits (bounded, by the same poll as [`Daemon::wait_for`]) until `/metrics` has the
    /// line `series`, and returns the metrics.
    pub(crate) async fn wait_for_metric(&self, series: &str) -> String {
        let deadline = Instant::now() + crate::support::PATIENCE;
        loop {
            let metrics = self.text("/metrics").await;
            if metrics.lines().any(|l| l == series) {
                return metrics;
            }
            assert!(
                Instant::now() < deadline,
                "no {series} in /metrics:\n{metrics}\nlog:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM and waits for the exit (killed, and failed, if none comes within
    /// [`crate::support::PATIENCE`]).
    pub(crate) fn terminate(mut self) -> (ExitStatus, String) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let (exited, exit) = std::sync::mpsc::channel::<()>();
        let watchdog = std::thread::spawn(move || {
            let late = matches!(
                exit.recv_timeout(crate::support::PATIENCE),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout)
            );
            if late {
                let _ = Command::new("kill").args(["-KILL", &pid]).status();
            }
            late
        });
        let status = self.child.wait().unwrap();
        drop(exited);
        assert!(
            !watchdog.join().unwrap(),
            "no exit within {:?} of SIGTERM:\n{}",
            crate::support::PATIENCE,
            self.log()
        );
        (status, self.log())
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The address the process at `log` says it serves on, once it says so: `--listen
/// 127.0.0.1:0` lets the kernel pick the port, and only the log says which it picked, so the
/// log is read again until it does (a bounded poll; a binary of its own tells nothing else).
fn listening_on(log: &Path, child: &mut Child) -> String {
    let deadline = Instant::now() + crate::support::PATIENCE;
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        let addr = text
            .lines()
            .filter(|l| l.contains("serving /livez"))
            .find_map(|l| {
                let rest = l
                    .split_once("addr=")
                    .or_else(|| l.split_once("\"addr\":\""))?
                    .1;
                let end = rest
                    .find(|c: char| c != '.' && c != ':' && !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                Some(rest[..end].to_string())
            });
        if let Some(addr) = addr {
            return addr;
        }
        if let Ok(Some(exit)) = child.try_wait() {
            panic!("tagpilot run exited with {exit}:\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "never said where it listens:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `tagpilot run` in `dir` on `port`; cache, state, `HOME` and git config all kept in `dir`.
pub(crate) fn daemon_command(dir: &Path, port: u16) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tagpilot"));
    command
        .current_dir(dir)
        .arg("run")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("TAGPILOT_STATE_DIR", dir.join("state"))
        .env("TAGPILOT_CACHE_DIR", dir.join("cache"))
        .env("HOME", dir)
        .env("DOCKER_CONFIG", dir.join("docker"))
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    command
}

#[tokio::test]
async fn ready_after_the_first_cycle_then_a_pushed_tag_reaches_the_repository_and_sigterm_exits_0()
{
    let s = setup().await;
    let mut daemon = Daemon::start(s.dir.path());

    // Not ready until the first cycle has pushed 1.1.0; ready from then on. Whether a 503 is
    // seen first depends on how fast the first cycle is against this test's polling (the
    // in-process `sigterm_waits_for_the_cycle_in_flight_and_a_second_signal_aborts` holds a
    // cycle open and sees it); here, nothing but "not listening yet" or 503 comes before 200.
    let before = daemon.wait_for("/readyz", 200).await;
    assert!(
        before.iter().all(|s| matches!(s, None | Some(503))),
        "/readyz answered something other than 503 before the first cycle: {before:?}"
    );
    assert_eq!(
        s.repo.show("main", DEPLOYMENT_PATH),
        deployment(&s.registry, "1.1.0"),
        "ready before the first cycle was done"
    );
    assert_eq!(daemon.status("/livez").await, Some(200));

    // A new tag in the registry reaches a commit by the interval's polling alone (no webhook
    // is set up). The bound is a failure bound, not a timing: a loaded CI machine is slow.
    s.registry
        .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
        .await;
    daemon
        .wait_for_metric("tagpilot_updates_total{policy=\"api\",result=\"pushed\"} 2")
        .await;
    assert_eq!(
        s.repo.show("main", DEPLOYMENT_PATH),
        deployment(&s.registry, "1.2.0"),
        "{}",
        daemon.log()
    );
    let subjects = s.repo.subjects("main");
    assert_eq!(subjects.len(), 4, "one commit per new tag: {subjects:?}");

    let metrics = daemon.text("/metrics").await;
    for want in [
        "tagpilot_cycles_total{result=\"ok\"}",
        "tagpilot_cycle_duration_seconds_count",
        "tagpilot_last_successful_cycle_timestamp_seconds",
        "tagpilot_updates_total{policy=\"api\",result=\"pushed\"} 2",
        &format!(
            "tagpilot_registry_requests_total{{registry=\"{}\",status=\"200\"}}",
            s.registry.host()
        ),
        &format!(
            "tagpilot_tag_listings_total{{registry=\"{}\"}}",
            s.registry.host()
        ),
    ] {
        assert!(metrics.contains(want), "{want} missing:\n{metrics}");
    }

    let (status, log) = daemon.terminate();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(log.contains("shutting down"), "{log}");
}

/// Waits until the bare repository's Deployment is on `tag`: looked at after each cycle or
/// re-check the service finishes. `step` zero: the test moved the clock already (or nothing
/// more is due); the service's interval: cycles are let run one after another; shorter: the
/// re-check pace (debounce, or a repository's re-check interval), which the clock is moved by
/// after each notification answered.
pub(crate) async fn tag_reached(s: &Setup, service: &Service, tag: &str, step: Duration) {
    let want = deployment(&s.registry, tag);
    let what = format!("{tag} pushed");
    let on = || {
        let on = s.repo.show("main", DEPLOYMENT_PATH) == want;
        async move { on }
    };
    if step.is_zero() {
        service.after_events(&what, on).await;
    } else if step >= service.interval {
        service.after_cycles(&what, on).await;
    } else {
        service.after_notifications(&what, step, on).await;
    }
}

#[test]
fn a_second_process_on_the_same_state_dir_refuses_to_start_naming_it() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let first = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        first.live().await;

        // A second service on the same directory: refused before it serves anything.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let config =
            tagpilot::session::load_config(Some(&s.dir.path().join("tagpilot.yaml"))).unwrap();
        let second = tagpilot::run::serve(
            config,
            service::settings(s.dir.path(), Duration::from_secs(1)),
            listener,
            tagpilot::run::Shutdown::new(),
            service::manual_clock(),
            tagpilot::run::Events::new(),
        )
        .await;
        let Err(error) = second else {
            panic!("a second service started on the same state directory")
        };
        let stderr = error_chain(&error);
        let state = s.dir.path().join("state");
        assert!(
            stderr.contains(&format!("state directory {}", state.display())),
            "{stderr}"
        );

        // The first is unaffected, and stops cleanly.
        assert_eq!(first.status("/livez").await, Some(200));
        let (stopped, log) = first.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

/// An error and its causes, as the binary prints them.
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!("\n  caused by: {cause}"));
        source = cause.source();
    }
    text
}

/// A manifest push as distribution sends it to `notifications.endpoints`, for `repository` at
/// `host`.
/// Posts a registry's notification (`body`, see [`push_event`]) to the service at `base`, as
/// the distribution registry sends it, with the test secret; the HTTP status it answers.
pub(crate) async fn notify(base: String, body: String) -> u16 {
    reqwest::Client::new()
        .post(format!("{base}/webhooks/distribution"))
        .header("Authorization", "Bearer s3cret")
        .header(
            "Content-Type",
            "application/vnd.docker.distribution.events.v2+json",
        )
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

pub(crate) fn push_event(host: &str, repository: &str) -> String {
    format!(
        r#"{{"events":[{{"id":"e1","timestamp":"2026-01-01T00:00:00Z","action":"push","target":{{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf","repository":"{repository}","url":"http://{host}/v2/{repository}/manifests/sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf","tag":"1.2.0"}},"request":{{"id":"r1","host":"{host}","method":"PUT"}},"actor":{{}},"source":{{}}}}]}}"#
    )
}

/// The value of the metric line starting with `name` (`0` when absent).
pub(crate) fn metric(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map_or(0, |v| v.parse().unwrap())
}

/// `/metrics` once `name` has reached `want`: looked at after each cycle or re-check (a
/// re-check's count comes after its write, and before its event).
async fn metric_reaches(service: &Service, name: &str, want: u64) -> String {
    let text = std::cell::RefCell::new(String::new());
    service
        .after_events(&format!("{name} {want}"), || async {
            let metrics = service.text("/metrics").await;
            let reached = metric(&metrics, name) >= want;
            *text.borrow_mut() = metrics;
            reached
        })
        .await;
    text.into_inner()
}

/// Adds `webhooks:` with the secret `s3cret` in the file `webhook-secret` (and `extra` lines
/// under it): a file rather than the environment, which is the whole test binary's.
pub(crate) fn with_webhooks(dir: &Path, extra: &str) {
    std::fs::write(dir.join("webhook-secret"), "s3cret").unwrap();
    let config = dir.join("tagpilot.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str("webhooks:\n  secretFile: webhook-secret\n");
    text.push_str(extra);
    std::fs::write(&config, text).unwrap();
}

#[test]
fn a_burst_of_notifications_is_one_recheck_and_bad_ones_start_nothing() {
    service::run(false, |logs| async move {
        let s = setup().await;
        with_webhooks(s.dir.path(), "");
        // An hour between cycles: only a webhook can bring 1.2.0 in during the test.
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;

        let url = format!("{}/webhooks/distribution", daemon.base);
        let client = reqwest::Client::new();
        let post = |secret: &str, body: String| {
            client
                .post(&url)
                .header("Authorization", format!("Bearer {secret}"))
                .header(
                    "Content-Type",
                    "application/vnd.docker.distribution.events.v2+json",
                )
                .body(body)
                .send()
        };
        let event = push_event(&s.registry.host(), "shop/api");
        let wrong = post("s3cre", event.clone()).await.unwrap();
        assert_eq!(wrong.status().as_u16(), 401);
        let malformed = post("s3cret", "{\"events\": 1}".to_string()).await.unwrap();
        assert_eq!(malformed.status().as_u16(), 400);
        let reason = malformed.text().await.unwrap();
        assert!(
            reason.contains("not a distribution notification"),
            "{reason}"
        );
        // The server answers 413 before reading the whole body and drops the connection, so the
        // oversized request goes on a connection of its own, not one the next request would reuse.
        let huge = reqwest::Client::new()
            .post(&url)
            .header("Authorization", "Bearer s3cret")
            .header("Connection", "close")
            .body("x".repeat(1 << 20))
            .send()
            .await
            .unwrap();
        assert_eq!(huge.status().as_u16(), 413);
        let unknown = client
            .post(format!("{}/webhooks/unknown", daemon.base))
            .body(event.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(unknown.status().as_u16(), 404);
        // None of those started anything: a hint would be due once the clock passes the
        // debounce window, and it has not moved.
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.1.0")
        );
        let metrics = daemon.text("/metrics").await;
        assert_eq!(
            metric(&metrics, "tagpilot_webhook_rechecks_total{result=\"ok\"}"),
            0
        );

        // A burst of valid notifications (one push sends one per manifest, each with its own event
        // id): answered at once, and one re-check brings the new tag in.
        for i in 0..5 {
            let ok = post(
                "s3cret",
                event.replace("\"id\":\"e1\"", &format!("\"id\":\"e{i}\"")),
            )
            .await
            .unwrap();
            assert_eq!(ok.status().as_u16(), 202);
        }
        // A delivery sent again (distribution retries until it gets a 2xx) is recognised by its
        // event id and triggers nothing more.
        let again = post("s3cret", event.replace("\"id\":\"e1\"", "\"id\":\"e4\""))
            .await
            .unwrap();
        assert_eq!(again.status().as_u16(), 202);
        assert!(again.text().await.unwrap().contains("already handled"));
        // The debounce window closes (and no interval passes: it is an hour).
        tag_reached(&s, &daemon, "1.2.0", Duration::from_millis(250)).await;
        let metrics =
            metric_reaches(&daemon, "tagpilot_webhook_rechecks_total{result=\"ok\"}", 1).await;
        for want in [
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"accepted\"} 5",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"unauthorized\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"malformed\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"too_large\"} 1",
            "tagpilot_webhook_requests_total{kind=\"unknown\",result=\"unknown_kind\"} 1",
            "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"ignored\"} 1",
        ] {
            assert!(metrics.contains(want), "{want} missing:\n{metrics}");
        }
        // One interval cycle, one re-check, and so two listings of shop/api in all: the five
        // notifications were coalesced (the re-check that took them waits out its interval, 5 s by
        // default, before any other).
        assert_eq!(
            metric(&metrics, "tagpilot_cycles_total{result=\"ok\"}"),
            1,
            "{metrics}"
        );
        assert_eq!(
            metric(&metrics, "tagpilot_webhook_rechecks_total{result=\"ok\"}"),
            1,
            "{metrics}"
        );
        let listings = format!(
            "tagpilot_tag_listings_total{{registry=\"{}\"}}",
            s.registry.host()
        );
        assert_eq!(metric(&metrics, &listings), 2, "{metrics}");
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

/// Two manifest repositories, one per image: `api` deploys `shop/api` and `web` deploys
/// `shop/web`, each on 1.0.0, with a policy each; the registry has 1.0.0 and 1.1.0 of both.
async fn two_images_two_repositories() -> (TestRegistry, BareRepo, BareRepo, tempfile::TempDir) {
    let registry = TestRegistry::start(Auth::None).await;
    let dir = tempfile::tempdir().unwrap();
    let mut repositories = String::new();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    let mut repos = Vec::new();
    for name in ["api", "web"] {
        registry
            .push_tags(
                &format!("shop/{name}"),
                &["1.0.0", "1.1.0"],
                ImageSpec::default(),
            )
            .await;
        let repo = BareRepo::new();
        repo.push_change(
            "main",
            DEPLOYMENT_PATH,
            &image_deployment(&registry.image(&format!("shop/{name}")), "1.0.0"),
            "old tag",
        );
        repositories.push_str(&format!(
            "  - name: {name}\n    url: {}\n    branch: main\n    write:\n      mode: push\n",
            repo.file_url()
        ));
        std::fs::write(
            dir.path().join(format!("policies/{name}.yaml")),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: {name}\n      paths: [\"apps/**\"]\n",
                registry.image(&format!("shop/{name}"))
            ),
        )
        .unwrap();
        repos.push(repo);
    }
    std::fs::write(
        dir.path().join("tagpilot.yaml"),
        format!(
            "registries:\n{}policies: policies/\nrepositories:\n{repositories}",
            registry.registries_yaml()
        ),
    )
    .unwrap();
    let web = repos.pop().unwrap();
    let api = repos.pop().unwrap();
    (registry, api, web, dir)
}

fn image_deployment(image: &str, tag: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n        - name: x\n          image: {image}:{tag}\n"
    )
}

#[test]
fn a_recheck_reads_and_writes_only_what_uses_the_notified_repository() {
    service::run(false, |logs| async move {
        let (registry, api, web, dir) = two_images_two_repositories().await;
        with_webhooks(dir.path(), "");
        let daemon = Service::start(dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        let on = |repo: &BareRepo, name: &str, tag: &str| {
            repo.show("main", DEPLOYMENT_PATH) == image_deployment(&registry.image(name), tag)
        };
        assert!(on(&api, "shop/api", "1.1.0") && on(&web, "shop/web", "1.1.0"));
        let listings = format!(
            "tagpilot_tag_listings_total{{registry=\"{}\"}}",
            registry.host()
        );
        assert_eq!(metric(&daemon.text("/metrics").await, &listings), 2);

        // Both images get a new tag; only shop/api is notified.
        for name in ["shop/api", "shop/web"] {
            registry
                .push_tags(name, &["1.2.0"], ImageSpec::default())
                .await;
        }
        let notify = |repository: &str| {
            // Each notification its own delivery: a repeated event id would be ignored.
            let body = push_event(&registry.host(), repository)
                .replace("\"id\":\"e1\"", &format!("\"id\":\"{repository}\""));
            notify(daemon.base.clone(), body)
        };
        assert_eq!(notify("shop/api").await, 202);
        // The debounce window closes; no interval passes (it is an hour).
        daemon
            .after_notifications("a re-check", Duration::from_millis(250), || {
                let done = on(&api, "shop/api", "1.2.0");
                async move { done }
            })
            .await;
        let metrics =
            metric_reaches(&daemon, "tagpilot_webhook_rechecks_total{result=\"ok\"}", 1).await;
        assert_eq!(
            metric(&metrics, &listings),
            3,
            "one more listing, shop/api's:\n{metrics}"
        );
        assert!(on(&web, "shop/web", "1.1.0"), "the re-check wrote to web");
        // The first cycle's commit and no other.
        assert_eq!(web.subjects("main").len(), 3, "{:?}", web.subjects("main"));

        // A repository no policy uses: accepted, and nothing is read or written.
        assert_eq!(notify("shop/unused").await, 202);
        // Past the debounce (shop/unused has no re-check interval to wait out yet).
        let rechecks = daemon.events.now().rechecks;
        daemon.clock.advance(Duration::from_secs(1));
        daemon
            .until("the unused repository answered", |p| p.rechecks > rechecks)
            .await;
        assert!(
            logs.text()
                .contains("no policy uses the notified repositories"),
            "{}",
            logs.text()
        );
        let metrics = daemon.text("/metrics").await;
        assert_eq!(metric(&metrics, &listings), 3, "{metrics}");
        assert_eq!(
            metric(&metrics, "tagpilot_webhook_rechecks_total{result=\"ok\"}"),
            1,
            "{metrics}"
        );
        assert!(on(&web, "shop/web", "1.1.0"));
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

/// A documented payload of `tests/fixtures/webhooks/`, with its registry host and repository
/// replaced by the test registry's `shop/api`.
fn fixture(name: &str, replace: &[(&str, &str)]) -> String {
    let path = format!(
        "{}/tests/fixtures/webhooks/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (from, to) in replace {
        assert!(text.contains(from), "{from} not in {name}");
        text = text.replace(from, to);
    }
    text
}

/// `sha256=<hex>`, as GitHub signs a body.
fn github_signature(secret: &str, body: &str) -> String {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<sha2_for_hmac::Sha256>::new_from_slice(secret.as_bytes()).unwrap();
    mac.update(body.as_bytes());
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A notification to send: path and query, headers, body.
type Case<'a> = (String, Vec<(&'a str, String)>, String);

#[test]
fn every_kind_with_its_documented_payload_gets_a_pushed_tag_committed() {
    service::run(false, |logs| async move {
        let s = setup().await;
        with_webhooks(
            s.dir.path(),
            "  recheck:\n    debounce: 20ms\n    minInterval: 0s\n",
        );
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        let host = s.registry.host();
        let image = s.registry.image("shop/api");
        let gar_data = {
            use base64::Engine as _;
            let message = format!(
                r#"{{"action":"INSERT","digest":"{image}@sha256:6ec128e26cd5b1a1a4e9b1c5d0b2f4c2a8f1d6e3b7c9a0f2e4d6b8c0a2e4f6a8","tag":"{image}:1.1"}}"#
            );
            base64::engine::general_purpose::STANDARD.encode(message)
        };
        let gar = fixture("gar-pubsub-push.json", &[]);
        let gar_documented: serde_json::Value = serde_json::from_str(&gar).unwrap();
        let gar = gar.replace(
            gar_documented["message"]["data"].as_str().unwrap(),
            &gar_data,
        );
        let ghcr = fixture(
            "ghcr-package-published.json",
            &[("ghcr.io/Codertocat/hello-world:", &format!("{image}:"))],
        );
        let harbor_swap = [
            ("localhost/harbor/alpine", image.as_str()),
            ("\"harbor/alpine\"", "\"shop/api\""),
        ];
        let cases: Vec<Case<'_>> = vec![
            (
                "/webhooks/distribution".into(),
                vec![("authorization", "Bearer s3cret".into())],
                fixture(
                    "distribution-push.v2.json",
                    &[
                        ("registrycluster.local", &host),
                        ("library/test", "shop/api"),
                    ],
                ),
            ),
            (
                "/webhooks/harbor".into(),
                vec![("authorization", "s3cret".into())],
                fixture("harbor-push-artifact.json", &harbor_swap),
            ),
            (
                "/webhooks/quay?secret=s3cret".into(),
                vec![],
                fixture(
                    "quay-repository-push.json",
                    &[("quay.io/dgangaia/test", &image)],
                ),
            ),
            ("/webhooks/gar?secret=s3cret".into(), vec![], gar),
            (
                "/webhooks/cloudevents".into(),
                vec![
                    ("x-webhook-secret", "s3cret".into()),
                    ("content-type", "application/cloudevents+json".into()),
                ],
                fixture("cloudevents-harbor-artifact-pushed.json", &harbor_swap),
            ),
            (
                "/webhooks/ghcr".into(),
                vec![
                    ("x-github-event", "package".into()),
                    ("x-hub-signature-256", github_signature("s3cret", &ghcr)),
                ],
                ghcr.clone(),
            ),
            (
                "/webhook?type=acr".into(),
                vec![("authorization", "s3cret".into())],
                fixture(
                    "acr-push.json",
                    &[
                        ("myregistry.azurecr.io", &host),
                        ("\"hello-world\"", "\"shop/api\""),
                    ],
                ),
            ),
            (
                format!("/webhook?type=aliyun-acr&secret=s3cret&registry_url={host}"),
                vec![],
                fixture(
                    "aliyun-acr-push.json",
                    &[("namespace/repoTest", "shop/api")],
                ),
            ),
            (
                "/webhook?type=ghcr.io".into(),
                vec![
                    ("x-github-event", "package".into()),
                    ("x-hub-signature-256", github_signature("s3cret", &ghcr)),
                ],
                ghcr,
            ),
        ];
        for (i, (path, headers, body)) in cases.into_iter().enumerate() {
            let tag = format!("1.{}.0", i + 2);
            s.registry
                .push_tags("shop/api", &[&tag], ImageSpec::default())
                .await;
            let mut request = reqwest::Client::new()
                .post(format!("{}{path}", daemon.base))
                .body(body);
            for (k, v) in &headers {
                request = request.header(*k, v);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let text = response.text().await.unwrap();
            assert_eq!(status, 202, "{path}: {text}");
            assert!(text.contains(&image), "{path}: {text}");
            // Past the 20 ms debounce; no interval passes (it is an hour).
            tag_reached(&s, &daemon, &tag, Duration::from_millis(50)).await;
        }
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

/// A "registry" that accepts connections and never answers, so a cycle hangs in its first
/// request; returns its host and how many connections it has taken (as they come).
pub(crate) fn hanging_registry() -> (String, tokio::sync::watch::Receiver<usize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = listener.local_addr().unwrap().to_string();
    let (counter, accepted) = tokio::sync::watch::channel(0);
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            counter.send_modify(|n| *n += 1);
            held.push(stream);
        }
    });
    (host, accepted)
}

/// Waits (bounded) until the hanging registry has taken `n` connections.
pub(crate) async fn connections(accepted: &mut tokio::sync::watch::Receiver<usize>, n: usize) {
    let taken = accepted.wait_for(|taken| *taken >= n);
    match tokio::time::timeout(crate::support::PATIENCE, taken).await {
        Ok(Ok(_)) => {}
        _ => panic!("the hanging registry took no {n} connections"),
    }
}

#[test]
fn sigterm_waits_for_the_cycle_in_flight_and_a_second_signal_aborts() {
    service::run(false, |logs| async move {
        let (host, mut accepted) = hanging_registry();
        let repo = BareRepo::new();
        repo.push_change(
            "main",
            DEPLOYMENT_PATH,
            &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {host}/shop/api:1.0.0\n"),
            "an image on the hanging registry",
        );
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpilot.yaml"),
            format!(
                "registries:\n  - host: {host}\n    insecure: true\npolicies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    write:\n      mode: push\n",
                repo.file_url()
            ),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("policies")).unwrap();
        std::fs::write(
            dir.path().join("policies/api.yaml"),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\nspec:\n  image: {host}/shop/api\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n"
            ),
        )
        .unwrap();
        let mut daemon = Service::start(dir.path(), Duration::from_secs(1), &logs).await;
        daemon.live().await;
        // The cycle asking the registry.
        connections(&mut accepted, 1).await;
        assert_eq!(daemon.status("/readyz").await, Some(503));

        // The first signal waits for the cycle in flight, and takes the process out of service.
        daemon.shutdown.drain("SIGTERM");
        service::settle().await;
        assert!(
            !daemon.has_stopped(),
            "exited before the cycle in flight ended:\n{}",
            daemon.log()
        );
        assert_eq!(daemon.status("/livez").await, Some(200));

        // The second one does not wait.
        daemon.shutdown.abort("SIGTERM");
        let stopped = daemon.stopped().await;
        assert_eq!(stopped, Stopped::Aborted, "{}", daemon.log());
        assert!(daemon.log().contains("aborting"), "{}", daemon.log());
    });
}

/// The README promises that a second signal aborts: the process is gone at once even while a
/// push waits on the remote, here a pre-receive hook that does not return (git http-backend,
/// whose hooks run as on any git server). Before, the process waited for the push to finish.
#[test]
fn a_second_sigterm_exits_at_once_while_a_push_waits_in_a_slow_remote_hook() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let server = HttpGitServer::start(s.repo.dir.path());
        let mut started = Signal::at(&s.dir.path().join("hook-started"));
        let release = s.dir.path().join("hook-release");
        // Says it started, then waits until the test lets it go (at most two minutes, longer
        // than the test waits for the process to go), so nothing outlives the test.
        write_executable(
            &s.repo.path().join("hooks/pre-receive"),
            &format!(
                "#!/bin/sh\necho started > '{}'\ni=0\nwhile [ ! -e '{}' ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done\nexit 1\n",
                started.path().display(),
                release.display()
            ),
        );
        std::fs::write(
            s.dir.path().join("tagpilot.yaml"),
            format!(
                "registries:\n{}policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    auth: {{username: {HTTP_USER}, passwordEnv: {HTTP_PASSWORD_ENV}}}\n    write:\n      mode: push\n",
                s.registry.registries_yaml(),
                server.url("origin.git")
            ),
        )
        .unwrap();
        // The password by environment, as the binary would get it.
        set_test_secrets();
        let mut daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.live().await;
        started.received("the push reaching the hook", &logs).await;

        // The first signal waits for the write in flight.
        daemon.shutdown.drain("SIGTERM");
        service::settle().await;
        assert!(
            !daemon.has_stopped(),
            "exited before the push in flight ended:\n{}",
            daemon.log()
        );

        // The second one does not: gone while the hook still holds the push (it holds it for
        // two minutes unless released; the bound is inside that, and generous for a loaded CI).
        daemon.shutdown.abort("SIGTERM");
        let stopped = daemon.stopped_within(crate::support::PATIENCE).await;
        let hook_still_waiting = !release.exists();
        std::fs::write(&release, "").unwrap();
        let Some(stopped) = stopped else {
            panic!(
                "still running {:?} after the second SIGTERM:\n{}",
                crate::support::PATIENCE,
                daemon.log()
            );
        };
        assert!(hook_still_waiting);
        assert_eq!(stopped, Stopped::Aborted, "{}", daemon.log());
        assert!(daemon.log().contains("aborting"), "{}", daemon.log());
    });
}

/// A registry whose notifications go to a `tagpilot run` (an hour between cycles, so only a
/// notification can bring a new tag in) that expects the secret `s3cret`; the registry sends
/// `sent`. Returns them once the first cycle has pushed 1.1.0.
async fn notified_daemon(sent: &str, logs: &Logs) -> (Setup, Service) {
    // Bound before the registry starts, so the address it notifies is this test's for good.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let notifications = format!(
        "notifications:\n  endpoints:\n    - name: tagpilot\n      url: http://127.0.0.1:{port}/webhooks/distribution\n      headers:\n        Authorization: [\"Bearer {sent}\"]\n      timeout: 1s\n      threshold: 3\n      backoff: 100ms\n"
    );
    let s = setup_with(TestRegistry::start_with(Auth::None, &notifications).await).await;
    // The registry still delivers the notifications of the set-up pushes once tagpilot listens,
    // and they get a re-check of their own; a second re-check of shop/api within the default
    // 5 s would wait out the rest of it.
    with_webhooks(s.dir.path(), "  recheck:\n    minInterval: 500ms\n");
    let settings = service::settings(s.dir.path(), Duration::from_secs(3600));
    let daemon = Service::start_on(listener, s.dir.path(), settings, logs);
    daemon.ready().await;
    tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
    (s, daemon)
}

#[test]
fn a_registry_notifying_tagpilot_gets_a_pushed_tag_committed_within_seconds() {
    service::run(false, |logs| async move {
        let (s, daemon) = notified_daemon("s3cret", &logs).await;
        let pushed = Instant::now();
        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;
        // The clock moves on as the registry's notifications are answered: past the debounce
        // and the re-check interval (500 ms) of the set-up pushes' notifications, never a full
        // interval.
        tag_reached(&s, &daemon, "1.2.0", Duration::from_millis(500)).await;
        eprintln!("push to commit: {:?}", pushed.elapsed());
        let metrics = daemon.text("/metrics").await;
        assert!(
            metrics.contains(
                "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"accepted\"}"
            ),
            "{metrics}"
        );
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

#[test]
fn a_registry_sending_the_wrong_secret_triggers_nothing() {
    service::run(false, |logs| async move {
        let (s, daemon) = notified_daemon("not-the-secret", &logs).await;
        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;
        daemon
            .until("a notification", |p| p.notifications > 0)
            .await;
        let metrics = daemon.text("/metrics").await;
        assert!(
            metrics.contains(
                "tagpilot_webhook_requests_total{kind=\"distribution\",result=\"unauthorized\"}"
            ),
            "{metrics}"
        );
        // Past any debounce and re-check interval: a hint would be due now; none was taken.
        daemon.clock.advance(Duration::from_secs(10));
        service::settle().await;
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.1.0"),
            "a notification with the wrong secret started a cycle"
        );
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

#[test]
fn policies_are_read_again_each_cycle_and_a_broken_one_stops_only_itself() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        daemon.ready().await;

        std::fs::write(
            s.dir.path().join("policies/broken.yaml"),
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: [not, a, map\n",
        )
        .unwrap();
        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;
        // The next interval's cycle.
        daemon.next_cycle().await;
        tag_reached(&s, &daemon, "1.2.0", Duration::ZERO).await;
        daemon
            .after_events("a policy error counted", || async {
                daemon
                    .text("/metrics")
                    .await
                    .contains("tagpilot_errors_total{kind=\"policy_syntax\"}")
            })
            .await;
        assert!(daemon.log().contains("broken.yaml"), "{}", daemon.log());
        assert_eq!(daemon.status("/readyz").await, Some(200));
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
    });
}

#[test]
fn findings_and_skipped_files_are_logged_and_in_the_metrics() {
    service::run(false, |logs| async move {
        let s = setup().await;
        // `aps/**` for `apps/**`: its targets match no file of the repository.
        std::fs::write(
            s.dir.path().join("policies/typo.yaml"),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: typo\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: manifests\n      paths: [\"aps/**\"]\n",
                s.registry.image("shop/worker")
            ),
        )
        .unwrap();
        s.repo
            .push_change("main", "apps/broken.yaml", "items: [unclosed\n", "broken");
        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        daemon.ready().await;
        // The rest still runs.
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;

        let metrics = daemon.text("/metrics").await;
        for (name, want) in [
            (
                "tagpilot_findings{kind=\"no_files\",severity=\"problem\"}",
                1,
            ),
            (
                "tagpilot_findings{kind=\"image_not_found\",severity=\"warning\"}",
                0,
            ),
            ("tagpilot_skipped_files{reason=\"invalid_yaml\"}", 1),
            ("tagpilot_skipped_files{reason=\"helm_template\"}", 0),
        ] {
            assert!(metrics.contains(name), "{name} missing:\n{metrics}");
            assert_eq!(metric(&metrics, name), want, "{name}:\n{metrics}");
        }
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        let finding = log
            .lines()
            .find(|l| l.contains("finding=\"no_files\""))
            .unwrap_or_else(|| panic!("no finding logged:\n{log}"));
        for want in ["policy=\"typo\"", "paths aps/** in repository manifests"] {
            assert!(finding.contains(want), "{want} missing: {finding}");
        }
        let skipped = log
            .lines()
            .find(|l| l.contains("file skipped"))
            .unwrap_or_else(|| panic!("no skipped file logged:\n{log}"));
        for want in [
            "apps/broken.yaml",
            "reason=\"invalid_yaml\"",
            "not valid YAML",
        ] {
            assert!(skipped.contains(want), "{want} missing: {skipped}");
        }
    });
}

/// Each push is one log line with the repository, the branch, the commit (short id) and the
/// changes as fields, and a sentence saying the same: here as JSON, as a log collector reads it.
#[test]
fn each_pushed_commit_is_logged_with_repository_commit_and_changes() {
    service::run(true, |logs| async move {
        let s = setup().await;
        // The log as `TAGPILOT_LOG_FORMAT=json` writes it.
        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let commit = s.repo.rev("main").unwrap()[..7].to_string();
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");

        let writes: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|l| l["fields"]["commit"].is_string())
            .collect();
        assert_eq!(writes.len(), 1, "one push, one line:\n{log}");
        let fields = &writes[0]["fields"];
        let changes = "api: apps/api/deployment.yaml 1.0.0 → 1.1.0";
        assert_eq!(writes[0]["level"], "INFO", "{log}");
        assert_eq!(fields["repository"], "manifests", "{log}");
        assert_eq!(fields["branch"], "main", "{log}");
        assert_eq!(fields["commit"], commit.as_str(), "{log}");
        assert_eq!(fields["changes"], changes, "{log}");
        assert_eq!(
            fields["message"],
            format!("pushed {commit} to manifests (main): {changes}"),
            "{log}"
        );
    });
}
