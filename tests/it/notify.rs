//! Notifications (issue 33) against a real HTTP receiver on 127.0.0.1: each sink's request as
//! its receiver reads it (the webhook's HMAC checked as a receiver would), a burst told in one
//! message, a refusing sink retried, nothing told twice after a restart, and a cycle's pushed
//! update told by the running service.

use std::sync::Arc;
use std::time::Duration;

use hmac::{Hmac, Mac};
use tagpilot::clock::ManualClock;
use tagpilot::config::notifications::NotificationsConfig;
use tagpilot::run::http::Shared;
use tagpilot::run::notify::Notifier;
use tagpilot::run::notify::event::{Kind, Notice};
use tagpilot::state::State;

use crate::daemon::setup;
use crate::support::receiver::{Received, Receiver};
use crate::support::service::{self, Service};

const KEY: &str = "hmac-key-of-the-test";

fn notice(kind: Kind, policy: &str, to: &str) -> Notice {
    let mut n = Notice::new(kind, jiff::Timestamp::from_second(1_800_000_000).unwrap());
    n.repository = Some("manifests".into());
    n.policy = Some(policy.into());
    n.image = Some("ghcr.io/shop/api".into());
    n.from = Some("1.0.0".into());
    n.to = Some(to.into());
    n.link = Some("https://git.example/shop/pull/7".into());
    n.with_id(None)
}

/// Whether `received` carries the HMAC-SHA256 of its body under [`KEY`], checked as a
/// receiver checks it.
fn signed(received: &Received) -> bool {
    let Some(hex_mac) = received
        .header("x-tagpilot-signature-256")
        .strip_prefix("sha256=")
    else {
        return false;
    };
    let mut mac = Hmac::<sha2_for_hmac::Sha256>::new_from_slice(KEY.as_bytes()).unwrap();
    mac.update(&received.body);
    mac.verify_slice(&hex::decode(hex_mac).unwrap()).is_ok()
}

fn config(yaml: &str) -> NotificationsConfig {
    serde_saphyr::from_str(yaml).unwrap()
}

async fn start(
    config: &NotificationsConfig,
    dir: &std::path::Path,
    shared: &Arc<Shared>,
    clock: &Arc<ManualClock>,
) -> Notifier {
    Notifier::start(config, dir, None, shared.clone(), clock.clone(), None)
        .await
        .unwrap()
}

fn shared_with_state(dir: &std::path::Path) -> Arc<Shared> {
    Arc::new(Shared {
        state: Some(Arc::new(State::open(&dir.join("state")).unwrap())),
        ..Shared::default()
    })
}

/// The next request taken (2xx), moving the clock to each wake the sink sleeps for (its
/// coalescing window, its backoff) meanwhile; returns the refused ones before it too.
async fn taken(receiver: &mut Receiver, clock: &ManualClock) -> (Vec<Received>, Received) {
    let mut refused = Vec::new();
    let drive = async {
        loop {
            tokio::select! {
                r = receiver.next() => {
                    if r.refused { refused.push(r) } else { return r }
                }
                wake = clock.next_wake() => clock.advance_to(wake),
            }
        }
    };
    let taken = tokio::time::timeout(crate::support::PATIENCE, drive)
        .await
        .expect("no message taken within PATIENCE");
    (refused, taken)
}

#[tokio::test]
async fn each_sink_sends_what_its_receiver_reads() {
    let mut receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), format!("{KEY}\n")).unwrap();
    std::fs::write(
        dir.path().join("slack"),
        format!("{}/slack-hook", receiver.base),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("teams"),
        format!("{}/teams-flow", receiver.base),
    )
    .unwrap();
    std::fs::write(dir.path().join("token"), "xoxb-test").unwrap();
    let base = &receiver.base;
    let config = config(&format!(
        "coalesce: 0s\nsinks:\n\
         - {{name: hook, webhook: {{url: \"{base}/hook\", secret: {{secretFile: key}}}}}}\n\
         - {{name: ce, cloudEvents: {{url: \"{base}/ce\"}}}}\n\
         - {{name: ce-binary, cloudEvents: {{url: \"{base}/ce-binary\", mode: binary}}}}\n\
         - {{name: slack, slack: {{webhookUrl: {{secretFile: slack}}}}}}\n\
         - {{name: slack-api, slack: {{token: {{secretFile: token}}, channel: \"#deploys\", apiUrl: \"{base}/api\"}}}}\n\
         - {{name: teams, teams: {{url: {{secretFile: teams}}}}}}\n"
    ));
    let clock = Arc::new(ManualClock::starting_now());
    let shared = Arc::new(Shared::default());
    let notifier = start(&config, dir.path(), &shared, &clock).await;
    let burst = vec![
        notice(Kind::UpdateWritten, "api", "1.1.0"),
        notice(Kind::Failed, "web", "2.0.0"),
    ];
    shared.notices.send(&shared, burst.clone());
    // Six sinks; binary CloudEvents is one request per event.
    let mut got = std::collections::BTreeMap::<String, Vec<Received>>::new();
    for _ in 0..7 {
        let r = receiver.next().await;
        got.entry(r.path.clone()).or_default().push(r);
    }
    notifier.stop().await;

    let hook = &got["/hook"][0];
    assert!(signed(hook), "the HMAC verifies");
    let body = hook.json();
    assert_eq!(body["events"][0]["type"], "update_written");
    assert_eq!(body["events"][0]["id"], burst[0].id.as_str());
    assert_eq!(body["events"][1]["type"], "failed");
    assert!(
        body["text"]
            .as_str()
            .unwrap()
            .starts_with("tagpilot: 2 events")
    );

    let ce = &got["/ce"][0];
    assert_eq!(
        ce.header("content-type"),
        "application/cloudevents-batch+json"
    );
    let batch = ce.json();
    assert_eq!(batch.as_array().unwrap().len(), 2);
    assert_eq!(batch[0]["specversion"], "1.0");
    assert_eq!(batch[0]["type"], "dev.tagpilot.update_written");
    assert_eq!(batch[0]["source"], "tagpilot");
    assert_eq!(batch[0]["data"]["to"], "1.1.0");

    let binary = &got["/ce-binary"];
    assert_eq!(binary.len(), 2);
    let types: Vec<&str> = binary.iter().map(|r| r.header("ce-type")).collect();
    assert!(types.contains(&"dev.tagpilot.failed"), "{types:?}");
    assert!(binary.iter().all(|r| r.header("ce-specversion") == "1.0"
        && !r.header("ce-id").is_empty()
        && r.header("content-type") == "application/json"));

    let slack = got["/slack-hook"][0].json();
    let text = slack["text"].as_str().unwrap();
    assert!(
        text.contains("api: ghcr.io/shop/api 1.0.0 → 1.1.0 written to manifests"),
        "{text}"
    );
    let api = &got["/api/chat.postMessage"][0];
    assert_eq!(api.header("authorization"), "Bearer xoxb-test");
    assert_eq!(api.json()["channel"], "#deploys");

    let teams = got["/teams-flow"][0].json();
    let card = &teams["attachments"][0];
    assert_eq!(
        card["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(card["content"]["type"], "AdaptiveCard");
    assert_eq!(card["content"]["body"][0]["text"], "tagpilot: 2 events");
    let metrics = shared.metrics.render();
    assert!(
        metrics.contains("tagpilot_notifications_total{sink=\"teams\",result=\"sent\"} 1"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_burst_is_one_message_a_refusing_sink_is_retried_and_a_restart_tells_nothing_twice() {
    let mut receiver = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("key"), KEY).unwrap();
    let config = config(&format!(
        "coalesce: 10s\nbackoff: 1s\nattempts: 5\nsinks:\n\
         - {{name: hook, webhook: {{url: \"{}/hook\", secret: {{secretFile: key}}}}, events: [update_written, held]}}\n",
        receiver.base
    ));
    let clock = Arc::new(ManualClock::starting_now());
    let shared = shared_with_state(dir.path());
    let notifier = start(&config, dir.path(), &shared, &clock).await;
    receiver.refuse_next(2);

    let first = notice(Kind::UpdateWritten, "api", "1.1.0");
    let later = notice(Kind::Held, "web", "2.0.0");
    shared.notices.send(&shared, vec![first.clone()]);
    // The sink waits out its coalescing window: an event within it joins the same message.
    clock.next_wake().await;
    shared.notices.send(
        &shared,
        vec![later.clone(), notice(Kind::Verified, "api", "1.1.0")],
    );
    let (refused, message) = taken(&mut receiver, &clock).await;
    assert_eq!(refused.len(), 2, "two refusals, then taken");
    assert!(signed(&message));
    let ids: Vec<String> = message.json()["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    // Verified is not among the sink's event types.
    assert_eq!(ids, [first.id.clone(), later.id.clone()]);
    // Counted once the sink has its answer (after the receiver had the request).
    let mut progress = shared.events.subscribe();
    tokio::time::timeout(
        crate::support::PATIENCE,
        progress.wait_for(|p| p.notices.sent == 1),
    )
    .await
    .expect("the message counted as sent")
    .unwrap();
    let metrics = shared.metrics.render();
    assert!(
        metrics.contains("tagpilot_notifications_total{sink=\"hook\",result=\"retried\"} 2"),
        "{metrics}"
    );
    notifier.stop().await;
    drop(shared);

    // A restart on the same state directory: the events found again are not told again.
    let shared = shared_with_state(dir.path());
    let notifier = start(&config, dir.path(), &shared, &clock).await;
    let new = notice(Kind::UpdateWritten, "api", "1.2.0");
    shared
        .notices
        .send(&shared, vec![first.clone(), later.clone(), new.clone()]);
    let (_, message) = taken(&mut receiver, &clock).await;
    let events = message.json()["events"].clone();
    assert_eq!(events.as_array().unwrap().len(), 1, "{events}");
    assert_eq!(events[0]["id"], new.id.as_str());
    notifier.stop().await;
    assert!(receiver.try_next().is_none());
}

#[test]
fn a_cycle_s_pushed_update_is_told_with_its_commit() {
    service::run(false, |logs| async move {
        let mut receiver = Receiver::start().await;
        let s = setup().await;
        std::fs::write(s.dir.path().join("key"), KEY).unwrap();
        let config = std::fs::read_to_string(s.dir.path().join("tagpilot.yaml")).unwrap();
        std::fs::write(
            s.dir.path().join("tagpilot.yaml"),
            format!(
                "{config}notifications:\n  coalesce: 0s\n  sinks:\n    - name: hook\n      webhook:\n        url: {}/hook\n        secret: {{secretFile: key}}\n",
                receiver.base
            ),
        )
        .unwrap();
        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        daemon.cycle_done(1).await;
        let message = receiver.next().await;
        assert!(signed(&message));
        let event = &message.json()["events"][0];
        assert_eq!(event["type"], "update_written", "{event}");
        assert_eq!(event["policy"], "api");
        assert_eq!(event["from"], "1.0.0");
        assert_eq!(event["to"], "1.1.0");
        assert_eq!(event["repository"], "manifests");
        assert_eq!(event["link"], s.repo.rev("main").unwrap().as_str());
        daemon
            .until("the message counted", |p| p.notices.sent == 1)
            .await;
        let (stopped, log) = daemon.terminate().await;
        assert_eq!(stopped, tagpilot::run::Stopped::Drained, "{log}");
        assert!(!log.contains(KEY), "the key is never logged");
    });
}
