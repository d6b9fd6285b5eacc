//! Change windows and the emergency freeze (issue 34) on `tagpilot run`: a write a closed
//! window keeps out is planned, held and named, and written by the first cycle after it opens;
//! a freeze holds every write, says who and why, and lifting it writes what waited. The
//! service in-process on a manual clock, the real registry, a bare repository over file://.

use std::time::Duration;

use crate::daemon::{deployment, metric, setup, tag_reached};
use crate::support::git::DEPLOYMENT_PATH;
use crate::support::registry::ImageSpec;
use crate::support::service::{self, ManualClock, Service};
use tagpilot::clock::Clock;

fn append(dir: &std::path::Path, yaml: &str) {
    let config = dir.join("tagpilot.yaml");
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(yaml);
    std::fs::write(&config, text).unwrap();
}

#[test]
fn a_deny_window_holds_the_write_named_until_it_closes_and_the_next_cycle_writes_it() {
    service::run(false, |logs| async move {
        let s = setup().await;
        let clock = std::sync::Arc::new(ManualClock::starting_now());
        // A deny window that opened at the start of this minute and lasts two hours.
        let now = clock.wall();
        let opened = jiff::Timestamp::from_second(now.as_second() - now.as_second() % 60).unwrap();
        let at = opened.to_zoned(jiff::tz::TimeZone::UTC);
        append(
            s.dir.path(),
            &format!(
                "windows:\n  - name: release-freeze\n    kind: deny\n    cron: '{} {} * * *'\n    duration: 2h\n    repositories: [manifests]\n",
                at.minute(),
                at.hour()
            ),
        );
        let closes = opened + jiff::SignedDuration::from_hours(2);
        let settings = service::settings(s.dir.path(), Duration::from_secs(3600));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let daemon =
            Service::start_on_clock(listener, s.dir.path(), settings, &logs, clock.clone());
        daemon.ready().await;
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.0.0"),
            "written while the window was closed"
        );
        let log = daemon.log();
        let want = format!("waiting for the window that opens at {closes} (release-freeze)");
        assert!(
            log.lines()
                .any(|l| l.contains("update held") && l.contains(&want)),
            "{want} is not said:\n{log}"
        );
        let metrics = daemon.text("/metrics").await;
        assert_eq!(
            metric(&metrics, "tagpilot_changes_waiting_for_window"),
            1,
            "{metrics}"
        );

        // The window closes; the loop's next cycle is an hour and more away, and comes now.
        clock.advance_to(closes);
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let metrics = daemon.text("/metrics").await;
        assert_eq!(
            metric(&metrics, "tagpilot_changes_waiting_for_window"),
            0,
            "{metrics}"
        );
    });
}

#[test]
fn a_freeze_holds_every_write_saying_who_and_why_and_unfreezing_writes_what_waited() {
    service::run(false, |logs| async move {
        let s = setup().await;
        std::fs::write(s.dir.path().join("freeze-token"), "stop-the-line\n").unwrap();
        append(
            s.dir.path(),
            "holds:\n  freezeToken:\n    secretFile: freeze-token\n",
        );
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.ready().await;
        tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;

        // Without the token, nothing is frozen.
        let refused = reqwest::Client::new()
            .post(format!("{}/freeze", daemon.base))
            .body(r#"{"by": "mallory", "reason": "why not"}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status().as_u16(), 401);

        use tagpilot::cli::freeze::{FreezeArgs, UnfreezeArgs, freeze, unfreeze};
        let token_file = Some(s.dir.path().join("freeze-token"));
        let frozen = freeze(&FreezeArgs {
            url: daemon.base.clone(),
            reason: "incident 4711".into(),
            by: "alice".into(),
            token_file: token_file.clone(),
        })
        .await
        .unwrap();
        assert!(frozen.contains("frozen by alice"), "{frozen}");
        let shown: serde_json::Value = serde_json::from_str(&daemon.text("/freeze").await).unwrap();
        assert_eq!(shown["frozen"], true);
        assert_eq!(shown["by"], "alice");
        assert_eq!(shown["reason"], "incident 4711");

        s.registry
            .push_tags("shop/api", &["1.2.0"], ImageSpec::default())
            .await;
        let cycle = daemon.next_cycle().await;
        daemon.cycle_done(cycle).await;
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            deployment(&s.registry, "1.1.0"),
            "written while frozen"
        );
        let log = daemon.log();
        assert!(
            log.lines().any(|l| l.contains("update held")
                && l.contains("frozen by alice since")
                && l.contains("incident 4711")),
            "the hold does not say who froze and why:\n{log}"
        );
        let metrics = daemon.text("/metrics").await;
        assert_eq!(metric(&metrics, "tagpilot_frozen"), 1, "{metrics}");

        let lifted = unfreeze(&UnfreezeArgs {
            url: daemon.base.clone(),
            token_file,
        })
        .await
        .unwrap();
        assert!(lifted.starts_with("unfrozen"), "{lifted}");
        daemon.next_cycle().await;
        tag_reached(&s, &daemon, "1.2.0", Duration::ZERO).await;
    });
}
