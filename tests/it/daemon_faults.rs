//! `tagpilot run` under faults it must outlive: a registry that paginates for ever, no registry
//! reachable, a state directory whose disk fills up. The service in-process
//! (`tests/it/support/service.rs`), the real registry and a bare git repository, as in
//! `daemon.rs`. Where cycles must follow one another, each look at the service moves its
//! clock by `step`, as time passing would.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::daemon::{Setup, setup, tag_reached};
use crate::registry_faults::endless_registry;
use crate::support::git::{BareRepo, DEPLOYMENT_PATH};
use crate::support::registry::ImageSpec;
use crate::support::service::{self, Service};

/// The value of the sample `name` (with its labels) in `/metrics`, if there is one.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// Waits until `/metrics` has `name` at `want` or more, and returns the text: looked at after
/// each cycle (`step` the interval: letting cycles run one after another) or each cycle or
/// re-check (`step` zero: the clock not moved).
async fn wait_for_metric(daemon: &Service, name: &str, want: f64, step: Duration) -> String {
    let text = std::cell::RefCell::new(String::new());
    let what = format!("{name} reaching {want}");
    let reached = || async {
        let metrics = daemon.text("/metrics").await;
        let reached = sample(&metrics, name).is_some_and(|v| v >= want);
        *text.borrow_mut() = metrics;
        reached
    };
    if step.is_zero() {
        daemon.after_events(&what, reached).await;
    } else {
        daemon.after_cycles(&what, reached).await;
    }
    text.into_inner()
}

/// Adds a registry entry to `dir/tagpilot.yaml`, first under `registries:`.
fn add_registry(dir: &Path, entry: &str) {
    let path = dir.join("tagpilot.yaml");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replacen("registries:\n", &format!("registries:\n{entry}"), 1),
    )
    .unwrap();
}

/// Adds a policy `name` for `image` on the `manifests` repository.
fn add_policy(dir: &Path, name: &str, image: &str, extra: &str) {
    std::fs::write(
        dir.join(format!("policies/{name}.yaml")),
        format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n  strategy:\n    semver: {{range: \"*\"}}\n{extra}  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n"
        ),
    )
    .unwrap();
}

/// One registry paginates its tag list for ever; the cycle still writes the image on the real
/// registry, and the endless one costs one named error after exactly `maxPages` requests.
#[test]
fn a_registry_that_paginates_for_ever_costs_one_error_and_other_images_are_written() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let (endless, served) = endless_registry("shop/web", 2, Duration::ZERO).await;
        let host = endless.address().to_string();
        add_registry(
            s.dir.path(),
            &format!("  - host: {host}\n    insecure: true\n    tagList: {{maxPages: 25}}\n"),
        );
        add_policy(s.dir.path(), "web", &format!("{host}/shop/web"), "");
        s.repo.push_change(
            "main",
            "apps/web/deployment.yaml",
            &format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: {host}/shop/web:0.0.1\n"
            ),
            "web on the endless registry",
        );

        // One cycle only, so that the requests counted are that cycle's.
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let metrics = wait_for_metric(
            &daemon,
            "tagpilot_updates_total{policy=\"web\",result=\"failed\"}",
            1.0,
            Duration::ZERO,
        )
        .await;
        assert_eq!(served.load(Ordering::SeqCst), 25, "stopped at maxPages");
        assert_eq!(
            sample(
                &metrics,
                "tagpilot_updates_total{policy=\"api\",result=\"pushed\"}"
            ),
            Some(1.0),
            "{metrics}"
        );
        let log = daemon.log();
        assert!(
            log.contains(&format!(
                "registry {host} paginated the tag list of repository shop/web past 25 pages"
            )),
            "{log}"
        );
        assert!(
            s.repo
                .show("main", "apps/web/deployment.yaml")
                .contains(":0.0.1"),
            "the endless image is left alone"
        );
    });
}

/// A registry on a port where nothing listens: every request fails. The port stays bound (and
/// not listening, so connections are refused) by the returned socket, so nothing else can
/// take it while the test runs.
fn unreachable_setup() -> (BareRepo, tempfile::TempDir, tokio::net::TcpSocket) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let host = socket.local_addr().unwrap().to_string();
    let repo = BareRepo::new();
    repo.push_change(
        "main",
        DEPLOYMENT_PATH,
        &format!("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {host}/shop/api:1.0.0\n"),
        "an image on a registry that is not there",
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
    add_policy(dir.path(), "api", &format!("{host}/shop/api"), "");
    (repo, dir, socket)
}

/// A cycle in which no registry answers is counted as such, the registry's gauge says it is
/// down, and a replica that never heard from a registry does not become ready.
#[test]
fn a_cycle_in_which_no_registry_answers_is_not_ok_and_never_makes_the_process_ready() {
    service::run(false, |logs| async move {
        let (_repo, dir, _unreachable) = unreachable_setup();
        let daemon = Service::start(dir.path(), Duration::from_secs(1), &logs).await;
        daemon.live().await;
        let metrics = wait_for_metric(
            &daemon,
            "tagpilot_cycles_total{result=\"registries_unreachable\"}",
            2.0,
            daemon.interval,
        )
        .await;
        assert_eq!(
            sample(&metrics, "tagpilot_cycles_total{result=\"ok\"}"),
            Some(0.0),
            "{metrics}"
        );
        assert!(
            metrics.contains("tagpilot_registry_up{registry=\"127.0.0.1:"),
            "{metrics}"
        );
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("tagpilot_registry_up{") && l.ends_with(" 0")),
            "{metrics}"
        );
        assert_eq!(daemon.status("/readyz").await, Some(503));
        assert_eq!(daemon.status("/livez").await, Some(200));
        assert!(
            daemon.log().contains("no registry answered this cycle"),
            "{}",
            daemon.log()
        );
    });
}

/// Registries that go away after the first cycle: cycles count as `registries_unreachable`,
/// `tagpilot_registry_up` drops to 0 while its last-reachable time stays, and the replica
/// stays ready (see the README on `/readyz`).
#[test]
fn a_registry_that_goes_away_shows_in_the_metrics_and_the_process_stays_ready() {
    service::run(false, |logs| async move {
        let Setup {
            registry,
            repo: _repo,
            dir,
        } = setup().await;
        let host = registry.host();
        let daemon = Service::start(dir.path(), Duration::from_secs(1), &logs).await;
        daemon.ready().await;
        let up = format!("tagpilot_registry_up{{registry=\"{host}\"}}");
        let metrics = wait_for_metric(&daemon, &up, 1.0, Duration::ZERO).await;
        let reachable =
            format!("tagpilot_registry_last_reachable_timestamp_seconds{{registry=\"{host}\"}}");
        assert!(
            sample(&metrics, &reachable).is_some_and(|t| t > 1.7e9),
            "{metrics}"
        );

        drop(registry);
        let metrics = wait_for_metric(
            &daemon,
            "tagpilot_cycles_total{result=\"registries_unreachable\"}",
            1.0,
            daemon.interval,
        )
        .await;
        // The gauge is set with the cycle's count; a scrape may fall between the two.
        let metrics = if sample(&metrics, &up) == Some(0.0) {
            metrics
        } else {
            let text = std::cell::RefCell::new(String::new());
            daemon
                .after_events("the registry's gauge at 0", || async {
                    let metrics = daemon.text("/metrics").await;
                    let down = sample(&metrics, &up) == Some(0.0);
                    *text.borrow_mut() = metrics;
                    down
                })
                .await;
            text.into_inner()
        };
        assert_eq!(sample(&metrics, &up), Some(0.0), "{metrics}");
        assert!(sample(&metrics, &reachable).is_some(), "{metrics}");
        assert_eq!(daemon.status("/readyz").await, Some(200));
    });
}

/// A tmpfs of `bytes` mounted on `dir` (created), unmounted on drop; `None`, with a message,
/// where `mount` is not allowed.
struct SmallDisk {
    dir: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, bytes: u64) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(SmallDisk {
                dir: dir.to_path_buf(),
            }),
            Ok(o) => {
                eprintln!(
                    "skipped: cannot mount a small tmpfs to fill ({})",
                    String::from_utf8_lossy(&o.stderr).trim()
                );
                None
            }
            Err(e) => {
                eprintln!("skipped: cannot run mount to make a small tmpfs ({e})");
                None
            }
        }
    }

    /// Writes `dir/filler` until the disk is full.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let chunk = vec![0u8; 16 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.dir)
            .status();
    }
}

/// The state directory's disk fills up: the store goes down and says so; once the disk has
/// room again, it is opened again without a restart, and `minAge` policies move again.
/// (Before, redb's handle refused every write after the first ENOSPC, first-seen times were
/// "now" in every cycle, and 1.2.39 was never old enough until a restart.)
#[test]
fn a_full_state_disk_takes_the_store_down_and_it_recovers_without_a_restart() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let Some(disk) = SmallDisk::mount(&s.dir.path().join("state"), 4 << 20) else {
            return;
        };
        add_policy(
            s.dir.path(),
            "api",
            &s.registry.image("shop/api"),
            "  minAge: 2s\n",
        );
        let daemon = Service::start(s.dir.path(), Duration::from_secs(1), &logs).await;
        daemon.live().await;
        let state = format!(
            "tagpilot_state_store_up{{dir=\"{}\"}}",
            s.dir.path().join("state").display()
        );
        tag_reached(&s, &daemon, "1.1.0", daemon.interval).await;
        let metrics = wait_for_metric(&daemon, &state, 1.0, daemon.interval).await;
        assert_eq!(sample(&metrics, &state), Some(1.0));

        disk.fill();
        // New tags make the store write: many, so that redb needs pages the disk does not have.
        let tags: Vec<String> = (0..40).map(|i| format!("1.2.{i}")).collect();
        let tags: Vec<&str> = tags.iter().map(String::as_str).collect();
        s.registry
            .push_tags("shop/api", &tags, ImageSpec::default())
            .await;
        daemon
            .after_cycles("the store saying it is down", || async {
                sample(&daemon.text("/metrics").await, &state) == Some(0.0)
            })
            .await;
        assert!(
            daemon
                .log()
                .contains("the state database is down after an I/O error"),
            "{}",
            daemon.log()
        );
        disk.free();
        wait_for_metric(&daemon, &state, 1.0, daemon.interval).await;
        // `minAge` is on the wall clock: cycles follow one another until 1.2.39 is 2 s old.
        tag_reached(&s, &daemon, "1.2.39", daemon.interval).await;
        assert!(
            daemon.log().contains("the state database works again"),
            "{}",
            daemon.log()
        );
    });
}
