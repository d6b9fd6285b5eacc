//! What `tagpilot run` tells its operator and lets them do while it runs (issue 28): policies it
//! does not serve, a re-check's outage and problems reported as a cycle's are, and a hold
//! released over its HTTP port. The service in-process (`tests/it/support/service.rs`), the
//! real registry and a bare repository over file://, as in `daemon.rs`.

use std::time::Duration;

use tagpilot::holds::{FieldKey, HeldTag, HoldReason};
use tagpilot::state::State;

use crate::daemon::{deployment, metric, push_event, setup, tag_reached, with_webhooks};
use crate::support::git::DEPLOYMENT_PATH;
use crate::support::service::{self, Service};

/// A policy whose target names no repository is the local directory's, which `tagpilot run`
/// never writes: it is named at start-up and counted, not planned in silence every cycle.
#[test]
fn a_policy_whose_target_is_the_local_directory_is_named_as_not_served() {
    service::run(false, |logs| async move {
        let s = setup().await;
        std::fs::write(
            s.dir.path().join("policies/local.yaml"),
            format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: local\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - paths: [\"apps/**\"]\n",
                s.registry.image("shop/api")
            ),
        )
        .unwrap();
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        let metrics = daemon.text("/metrics").await;
        assert_eq!(
            metric(
                &metrics,
                "tagpilot_policies_not_served{reason=\"local_directory\"}"
            ),
            1,
            "{metrics}"
        );
        let log = daemon.log();
        let warning = log
            .lines()
            .find(|l| l.contains("not served by tagpilot run"))
            .unwrap_or_else(|| panic!("no warning:\n{log}"));
        for want in ["WARN", "policies=local", "local directory", "repository:"] {
            assert!(warning.contains(want), "{want} missing: {warning}");
        }
        // The policy with a repository is served as before.
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
    });
}

/// A re-check after a notification, with the registry gone: counted as an outage as a cycle
/// is, and its problem logged by name, not only counted.
#[test]
fn a_recheck_no_registry_answers_is_an_outage_and_names_its_problem() {
    service::run(false, |logs| async move {
        let s = setup().await;
        with_webhooks(s.dir.path(), "");
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let host = s.registry.host();
        let crate::daemon::Setup {
            registry,
            repo: _repo,
            dir: _dir,
        } = s;
        drop(registry);

        assert_eq!(
            crate::daemon::notify(daemon.base.clone(), push_event(&host, "shop/api")).await,
            202
        );
        let outage = "tagpilot_webhook_rechecks_total{result=\"registries_unreachable\"}";
        // Past the debounce window; an hour between cycles, so no cycle runs meanwhile.
        daemon.clock.advance(Duration::from_millis(250));
        daemon.until("the re-check", |p| p.rechecks >= 1).await;
        let metrics = daemon.text("/metrics").await;
        assert_eq!(metric(&metrics, outage), 1, "{metrics}");
        assert_eq!(
            metric(&metrics, "tagpilot_webhook_rechecks_total{result=\"ok\"}"),
            0,
            "{metrics}"
        );
        let log = daemon.log();
        assert!(
            log.lines().any(|l| l.contains("WARN")
                && l.contains("policy=\"api\"")
                && l.contains(&format!("{host}/shop/api"))),
            "the problem is not named:\n{log}"
        );
        assert!(log.contains("no registry answered this re-check"), "{log}");
    });
}

/// A hold from a policy file is released over the service's port with the configured token,
/// and the next cycle proposes the tag; no token, or the wrong one, releases nothing.
#[test]
fn a_hold_is_released_over_http_with_the_token_and_the_next_cycle_moves() {
    service::run(false, |logs| async move {
        let s = setup().await;
        std::fs::write(s.dir.path().join("holds-token"), "let-me-release\n").unwrap();
        let config = s.dir.path().join("tagpilot.yaml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str("holds:\n  releaseToken:\n    secretFile: holds-token\n");
        std::fs::write(&config, text).unwrap();
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
                    tag: "1.1.0".into(),
                    reason: HoldReason::Manual {
                        by: "the test".into(),
                    },
                    since: jiff::Timestamp::now(),
                })
                .unwrap();
        }
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.0.0"),
            "the held tag was proposed"
        );
        let listed: serde_json::Value = serde_json::from_str(&daemon.text("/holds").await).unwrap();
        let id = listed[0]["id"].as_str().unwrap().to_string();

        let url = format!("{}/holds/release", daemon.base);
        let body = format!("{{\"id\": \"{id}\"}}");
        let client = reqwest::Client::new();
        let release = |token: Option<&str>| {
            let mut request = client.post(&url).body(body.clone());
            if let Some(token) = token {
                request = request.header("Authorization", format!("Bearer {token}"));
            }
            request.send()
        };
        for refused in [None, Some("let-me-in")] {
            let answer = release(refused).await.unwrap();
            assert_eq!(answer.status().as_u16(), 401, "{refused:?}");
        }
        let listed: serde_json::Value = serde_json::from_str(&daemon.text("/holds").await).unwrap();
        assert_eq!(
            listed.as_array().unwrap().len(),
            1,
            "released without the token"
        );

        // `tagpilot holds release --url … --token-file …`, as an operator runs it.
        use tagpilot::cli::holds::{HoldsAction, HoldsArgs, HoldsFormat, ReleaseArgs, holds};
        let released = holds(HoldsArgs {
            action: Some(HoldsAction::Release(ReleaseArgs {
                id: Some(id),
                policy: None,
                file: None,
                field: None,
                repository: None,
                token_file: Some(s.dir.path().join("holds-token")),
            })),
            state_dir: None,
            url: Some(daemon.base.clone()),
            format: HoldsFormat::Table,
        })
        .await;
        assert!(released.is_ok(), "{released:?}");
        assert_eq!(daemon.text("/holds").await.trim(), "[]");
        daemon.next_cycle().await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let (_, log) = daemon.terminate().await;
        let line = log
            .lines()
            .find(|l| l.contains("hold released over HTTP"))
            .unwrap_or_else(|| panic!("the release is not logged:\n{log}"));
        assert!(
            line.contains("manifests:apps/api/deployment.yaml Deployment/api container api")
                && line.contains("1.1.0"),
            "{line}"
        );
        // As `tagpilot holds release` leaves it: gone from the store for good.
        let state = State::open(&s.dir.path().join("state")).unwrap();
        assert!(state.holds().unwrap().is_empty());
    });
}
