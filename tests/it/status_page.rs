//! The status page (issue 33) of a running `tagpilot run` with real data — a cycle that pushed
//! an update, a hold in its state store, the registry and remote it talked to — as JSON, and
//! rendered in a real headless browser (Debian's `chromium`, which `scripts/test.sh`
//! installs): its DOM is read back and a screenshot taken.

use std::path::Path;
use std::time::Duration;

use tagpilot::holds::{FieldKey, HeldTag, HoldReason};
use tagpilot::state::State;

use crate::daemon::setup;
use crate::support::git::DEPLOYMENT_PATH;
use crate::support::service::{self, Service};

/// Runs headless Chromium on `url` with `args` (`--dump-dom`, `--screenshot=…`); its stdout.
/// A process of its own awaited without blocking: the service it reads runs on this thread.
async fn chromium(profile: &Path, args: &[String], url: &str) -> String {
    let run = tokio::process::Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            &format!("--user-data-dir={}", profile.display()),
        ])
        .args(args)
        .arg(url)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(crate::support::PATIENCE, run)
        .await
        .expect("chromium did not finish within PATIENCE")
        .expect("chromium runs (scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_status_page_renders_a_running_service_s_data_in_a_headless_browser() {
    service::run(false, |logs| async move {
        let s = setup().await;
        {
            let state = State::open(&s.dir.path().join("state")).unwrap();
            state
                .hold(&HeldTag {
                    key: FieldKey {
                        repository: Some("manifests".into()),
                        policy: "api".into(),
                        file: DEPLOYMENT_PATH.into(),
                        field: "Deployment/api container api".into(),
                    },
                    tag: "0.9.0".into(),
                    reason: HoldReason::Manual {
                        by: "ops@example.com".into(),
                    },
                    since: jiff::Timestamp::from_second(1_800_000_000).unwrap(),
                })
                .unwrap();
        }
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.cycle_done(1).await;

        let status: serde_json::Value =
            serde_json::from_str(&daemon.text("/ui/status.json").await).unwrap();
        let field = &status["fields"][0];
        assert_eq!(field["policy"], "api", "{status}");
        assert_eq!(field["current"], "1.0.0");
        assert_eq!(field["candidate"], "1.1.0");
        assert_eq!(field["state"], "pushed");
        assert_eq!(status["holds"][0]["tag"], "0.9.0");
        assert_eq!(status["cycles"][0]["result"], "ok");
        let endpoints = status["endpoints"].as_array().unwrap();
        assert!(
            endpoints
                .iter()
                .any(|e| e["kind"] == "registry" && e["up"] == true),
            "{status}"
        );
        assert!(
            endpoints
                .iter()
                .any(|e| e["kind"] == "remote" && e["name"] == "manifests")
        );

        let url = format!("{}/ui", daemon.base);
        let profile = tempfile::tempdir().unwrap();
        let dom = chromium(profile.path(), &["--dump-dom".into()], &url).await;
        for shown in [
            "Policies and images (1)",
            "1.1.0",
            "pushed",
            "Holds (1)",
            "ops@example.com",
            "Registries and remotes (2)",
            "Last cycles (1)",
        ] {
            assert!(dom.contains(shown), "{shown:?} not in the page:\n{dom}");
        }
        assert!(!dom.contains("<script"), "no script on the page");

        let shot = Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
        let _ = std::fs::remove_file(&shot);
        chromium(
            profile.path(),
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1280,900".into(),
            ],
            &url,
        )
        .await;
        let png = std::fs::read(&shot).expect("the screenshot was written");
        assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "a PNG");
        // A blank page compresses to a few hundred bytes; tables of text do not.
        assert!(png.len() > 20_000, "{} bytes", png.len());
        eprintln!("screenshot: {}", shot.display());
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, tagpilot::run::Stopped::Drained, "{log}");
    });
}
