//! Leader election (`tagpilot run --leader-elect`) against the scripted Kubernetes API of
//! `support::kube`: acquiring a free Lease, renewing it, following while another replica
//! holds it, losing it (taken by another holder, a renewal refused, a renewal that hangs),
//! and giving it up at shutdown. Each test states the exact requests, in order.
//!
//! The election keeps time by a manual clock: the test moves it from one wake-up of the
//! election to the next once the election waits on it, so nothing here waits for time to
//! pass, and a request in flight never sees the clock move. "Another replica" renews on that
//! clock too, every second, just before the clock reaches each second. Requests still time
//! out on real time, generously (a loaded machine must not time out a request the double
//! answers at once); a renewal that hangs moves the clock by as long as the lease's own
//! timeouts would let it hang. The last test runs the service in-process on the same kind of
//! clock, shared with its loop: a follower writes nothing to a real bare repository, and the
//! same process writes once it leads.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;

use tagpilot::clock::Clock;
use tagpilot::run::Stopped;
use tagpilot::run::lease::{Elector, LEADER_LABEL, LeaderElection, PodName, Role};
use tokio::sync::watch;

use crate::daemon;
use crate::support::git::DEPLOYMENT_PATH;
use crate::support::kube::{Fault, LeaseApi, ManualClock, NAMESPACE, cluster};
use crate::support::service::{self, Service};

const ME: &str = "tagpilot-0";
const OTHER: &str = "tagpilot-1";
/// Renewed a second before expiry; each request gives up after a quarter second.
const DURATION: Duration = Duration::from_secs(3);
/// How long the test's requests may take in real time before they give up.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// How long, in real time, the election may take to next wait on the clock (a safety net:
/// a broken election fails the test rather than hanging it).
const REAL_LIMIT: Duration = crate::support::PATIENCE;

fn settings_for(duration: Duration) -> LeaderElection {
    LeaderElection {
        lease_name: "tagpilot".to_string(),
        lease_namespace: Some(NAMESPACE.to_string()),
        identity: ME.to_string(),
        lease_duration: duration,
        pod: Some(PodName {
            namespace: NAMESPACE.to_string(),
            name: ME.to_string(),
        }),
    }
}

/// Another replica, renewing the Lease every second of the test's clock for `duration`.
struct Other {
    identity: &'static str,
    duration: Duration,
    /// When it renews next.
    next: Timestamp,
}

/// The scripted API, and the clock the election keeps.
struct Harness {
    server: wiremock::MockServer,
    api: LeaseApi,
    clock: ManualClock,
}

impl Harness {
    async fn new() -> Harness {
        let (server, api) = LeaseApi::start().await;
        // Whole seconds: a Lease's times are written in microseconds.
        let clock = ManualClock::starting_at(Timestamp::from_second(1_800_000_000).unwrap());
        Harness { server, api, clock }
    }

    async fn start(&self) -> Elector {
        self.start_for(DURATION).await
    }

    async fn start_for(&self, duration: Duration) -> Elector {
        let client = cluster(&self.server, REQUEST_TIMEOUT).await;
        Elector::start_with_clock(client, settings_for(duration), Arc::new(self.clock.clone()))
            .await
            .unwrap()
    }

    /// Another replica takes or renews the Lease now, and then every second while the clock
    /// is driven with it.
    fn other(&self, identity: &'static str, duration: Duration) -> Other {
        let now = self.clock.wall();
        self.api.hold_by_at(identity, duration, now);
        Other {
            identity,
            duration,
            next: now + Duration::from_secs(1),
        }
    }

    /// Moves the clock from one wake-up to the next (the election's, and `other`'s renewals)
    /// until `done` holds once the election waits, and answers whether it did before the
    /// clock had to pass `limit`.
    async fn drive(
        &self,
        mut other: Option<&mut Other>,
        limit: Timestamp,
        done: impl Fn() -> bool,
    ) -> bool {
        loop {
            let wake = tokio::time::timeout(REAL_LIMIT, self.clock.next_wake()).await;
            if done() {
                return true;
            }
            let Ok(mut next) = wake else {
                return false;
            };
            if let Some(o) = other.as_deref_mut() {
                next = next.min(o.next);
                if next <= limit && o.next == next {
                    self.api.hold_by_at(o.identity, o.duration, next);
                    o.next += Duration::from_secs(1);
                }
            }
            if next > limit {
                return false;
            }
            self.clock.advance_to(next);
        }
    }

    /// Lets `by` pass on the clock, with `other` renewing.
    async fn run_for(&self, by: Duration, other: Option<&mut Other>) {
        let limit = self.clock.wall() + by;
        self.drive(other, limit, || false).await;
        self.clock.advance_to(limit);
    }

    /// Drives the clock (at most `within` on it) until the role is `want`; the journal is in
    /// the failure message.
    async fn wait_role(
        &self,
        roles: &mut watch::Receiver<Role>,
        want: Role,
        other: Option<&mut Other>,
        within: Duration,
    ) {
        let limit = self.clock.wall() + within;
        let reached = self.drive(other, limit, || *roles.borrow() == want).await;
        assert!(
            reached,
            "never {want:?} within {within:?}; now {:?}; requests:\n{}",
            *roles.borrow(),
            self.api.journal().join("\n")
        );
    }

    /// Drives the clock until the journal has `n` lines matching `pred`.
    async fn wait_journal(
        &self,
        what: &str,
        n: usize,
        other: Option<&mut Other>,
        pred: impl Fn(&str) -> bool,
    ) {
        let limit = self.clock.wall() + Duration::from_secs(15);
        let count = || self.api.journal().iter().filter(|l| pred(l)).count() >= n;
        assert!(
            self.drive(other, limit, count).await,
            "fewer than {n} {what}; requests:\n{}",
            self.api.journal().join("\n")
        );
    }
}

const UNLABEL: &str = "PATCH pod/tagpilot-0 tagpilot.dev/leader=null";
const LABEL: &str = "PATCH pod/tagpilot-0 tagpilot.dev/leader=true";
const TAKE: &str = "APPLY lease acquireTime,holder=tagpilot-0,leaseDurationSeconds,renewTime by tagpilot-tagpilot-0";
const COUNT_TRANSITION: &str = "PATCH lease leaseTransitions by tagpilot-tagpilot-0";
const RENEW: &str = "PATCH lease leaseDurationSeconds,renewTime by tagpilot-tagpilot-0";
const RELEASE: &str =
    "PATCH lease acquireTime,holder=null,leaseDurationSeconds,renewTime by tagpilot-tagpilot-0";

#[tokio::test]
async fn acquires_a_free_lease_labels_its_pod_renews_and_releases_at_shutdown() {
    let h = Harness::new().await;
    let api = &h.api;
    let elector = h.start().await;
    let mut roles = elector.roles();
    h.wait_role(&mut roles, Role::Leading, None, Duration::from_secs(10))
        .await;
    assert_eq!(api.holder().as_deref(), Some(ME));
    // Renewed twice: more than two durations' worth of leading on one acquisition.
    h.wait_journal("renewals", 2, None, |l| l == RENEW).await;
    assert_eq!(*roles.borrow(), Role::Leading);

    elector.stop().await;
    assert_eq!(api.holder(), None, "the Lease was not given up");
    assert_eq!(api.pod_labels(ME).get(LEADER_LABEL), None);
    let journal = api.journal();
    // Up to the second renewal the order is fixed; after it, whether the renewal was read back
    // before the stop began depends on the scheduler, so reads are left out of the tail.
    let second_renewal = journal
        .iter()
        .enumerate()
        .filter(|(_, l)| *l == RENEW)
        .nth(1)
        .map(|(i, _)| i)
        .expect("two renewals");
    assert_eq!(
        journal[..=second_renewal],
        [
            // A label a restarted container left behind goes first.
            UNLABEL,
            // The Lease does not exist yet: created empty, read (by the wait for a change,
            // then by the attempt to take it), and taken by server-side apply.
            "GET lease",
            "POST lease",
            "GET lease",
            "GET lease",
            TAKE,
            COUNT_TRANSITION,
            "GET lease",
            LABEL,
            // Renewals, a grace period before each expiry, each read back.
            RENEW,
            "GET lease",
            RENEW,
        ]
    );
    let writes_after: Vec<&String> = journal[second_renewal + 1..]
        .iter()
        .filter(|l| *l != "GET lease")
        .collect();
    // Shutdown: writes stop and the label goes first, then the Lease is given up.
    assert_eq!(writes_after, [UNLABEL, RELEASE], "{journal:?}");
}

#[tokio::test]
async fn follows_while_another_replica_renews_and_takes_over_once_it_stops() {
    let h = Harness::new().await;
    let api = &h.api;
    let mut other = h.other(OTHER, DURATION);
    let elector = h.start().await;
    let mut roles = elector.roles();
    h.wait_role(
        &mut roles,
        Role::Following,
        Some(&mut other),
        Duration::from_secs(5),
    )
    .await;
    // Longer than the Lease lasts: only the other replica's renewals keep this one out.
    h.run_for(DURATION + Duration::from_secs(1), Some(&mut other))
        .await;
    assert_eq!(*roles.borrow(), Role::Following);
    assert_eq!(api.holder().as_deref(), Some(OTHER));
    let journal = api.journal();
    assert!(
        journal
            .iter()
            .all(|l| !l.starts_with("APPLY") && l != LABEL),
        "a follower tried to take a held Lease or labelled itself:\n{}",
        journal.join("\n")
    );

    // The other replica stops renewing (the clock runs on without it): once its Lease has
    // expired, this one takes over.
    h.wait_role(&mut roles, Role::Leading, None, Duration::from_secs(10))
        .await;
    assert_eq!(api.holder().as_deref(), Some(ME));
    h.wait_journal("labels", 1, None, |l| l == LABEL).await;
    let journal = api.journal();
    let forced = journal
        .iter()
        .position(|l| l == RELEASE)
        .expect("the expired Lease is forced free first");
    let taken = journal.iter().position(|l| l == TAKE).expect("then taken");
    assert!(forced < taken, "{}", journal.join("\n"));
    elector.stop().await;
}

#[tokio::test]
async fn a_lease_taken_by_another_holder_stops_leading_and_removes_the_label() {
    let h = Harness::new().await;
    let api = &h.api;
    let elector = h.start().await;
    let mut roles = elector.roles();
    h.wait_role(&mut roles, Role::Leading, None, Duration::from_secs(10))
        .await;
    h.wait_journal("labels", 1, None, |l| l == LABEL).await;

    api.clear_journal();
    let mut other = h.other(OTHER, Duration::from_secs(60));
    h.wait_role(
        &mut roles,
        Role::Following,
        Some(&mut other),
        Duration::from_secs(5),
    )
    .await;
    h.wait_journal("label removals", 1, Some(&mut other), |l| l == UNLABEL)
        .await;
    assert_eq!(api.pod_labels(ME).get(LEADER_LABEL), None);
    assert_eq!(api.holder().as_deref(), Some(OTHER));
    // The renewal found the other holder on reading the Lease back.
    assert_eq!(
        api.journal(),
        vec![RENEW, "GET lease", UNLABEL],
        "exactly one renewal, then the step down"
    );
    // The other replica still holds the Lease (the clock has not passed its expiry).
    elector.stop().await;
    assert_eq!(
        api.holder().as_deref(),
        Some(OTHER),
        "released a Lease it did not hold"
    );
}

/// Leads, then makes Lease patches fail with `fault`, and checks that the role turned to
/// following before the Lease expired. A six-second Lease: renewed two seconds before expiry,
/// each request given half a second; a renewal that hangs moves the clock on by all three
/// of its timeouts (connecting, sending, waiting for the answer).
async fn steps_down_before_expiry(fault: Fault) {
    let duration = Duration::from_secs(6);
    let h = Harness::new().await;
    let api = &h.api;
    let elector = h.start_for(duration).await;
    let mut roles = elector.roles();
    h.wait_role(&mut roles, Role::Leading, None, Duration::from_secs(10))
        .await;
    h.wait_journal("labels", 1, None, |l| l == LABEL).await;

    api.advance_while_hanging(&h.clock, settings_for(duration).request_timeout() * 3);
    api.set_fault(Some(fault));
    let expiry = api.expiry().expect("a held Lease has an expiry");
    h.wait_role(&mut roles, Role::Following, None, duration * 2)
        .await;
    let stepped_down = h.clock.wall();
    // Not a speed test: the order of two events. Another replica may take the Lease only
    // after `expiry`; this one stopped writing before that, and the renewal that failed was
    // the only one attempted.
    assert!(
        stepped_down < expiry,
        "stepped down at {stepped_down}, after the Lease expired at {expiry}:\n{}",
        api.journal().join("\n")
    );
    assert_eq!(
        api.expiry(),
        Some(expiry),
        "the failed renewal changed the Lease"
    );

    // Once the API answers again, the Lease (still naming this replica) is renewed and held.
    api.set_fault(None);
    h.wait_role(&mut roles, Role::Leading, None, Duration::from_secs(10))
        .await;
    assert_eq!(api.holder().as_deref(), Some(ME));
    elector.stop().await;
}

#[tokio::test]
async fn a_refused_renewal_stops_leading_before_the_lease_expires() {
    steps_down_before_expiry(Fault::ServerError).await;
}

#[tokio::test]
async fn a_renewal_that_hangs_stops_leading_before_the_lease_expires() {
    steps_down_before_expiry(Fault::Hang).await;
}

/// `tagpilot run --leader-elect` in-process, as a Deployment's replica runs it (the scripted
/// API for its cluster, its Pod named): while another replica holds the Lease it is ready but
/// writes nothing and refuses webhooks; once the Lease is free it takes it, labels its Pod, and
/// the first cycle pushes to the real bare repository; a drain gives the Lease and the label
/// up. The service's clock is the election's: the test moves it past a whole Lease instead of
/// waiting one out, and "another replica" renews on it.
#[test]
fn a_follower_writes_nothing_and_the_same_process_writes_once_it_leads() {
    service::run(false, |logs| async move {
        let s = daemon::setup().await;
        let commits_before = s.repo.subjects("main").len();
        let (server, api) = LeaseApi::start().await;
        let clock = service::manual_clock();
        api.hold_by_at(OTHER, DURATION, clock.wall());
        daemon::with_webhooks(s.dir.path(), "");
        let mut settings = service::settings(s.dir.path(), Duration::from_secs(1));
        settings.leader_election = Some(settings_for(DURATION));
        settings.cluster = Some(cluster(&server, REQUEST_TIMEOUT).await);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let replica =
            Service::start_on_clock(listener, s.dir.path(), settings, &logs, clock.clone());
        let webhook = |replica: &Service| {
            daemon::notify(
                replica.base.clone(),
                daemon::push_event(&s.registry.host(), "shop/api"),
            )
        };

        // A follower is ready (it stands by), but leads nothing and writes nothing.
        replica.ready().await;
        assert_eq!(webhook(&replica).await, 503);
        // Several intervals, and more than a Lease's duration, on the clock; the other replica
        // renews at each second of it (before the election, on this one thread, sees it move).
        for _ in 0..=DURATION.as_secs() {
            clock.advance(Duration::from_secs(1));
            api.hold_by_at(OTHER, DURATION, clock.wall());
            service::settle().await;
        }
        let metrics = replica.text("/metrics").await;
        assert!(metrics.contains("tagpilot_leader 0"), "{metrics}");
        assert!(
            metrics.contains("tagpilot_cycles_total{result=\"ok\"} 0"),
            "a follower ran a cycle:\n{metrics}"
        );
        assert!(
            metrics
                .contains("tagpilot_webhook_requests_total{kind=\"any\",result=\"not_leader\"} 1"),
            "{metrics}"
        );
        assert_eq!(
            s.repo.subjects("main").len(),
            commits_before,
            "a follower pushed:\n{}",
            replica.log()
        );
        assert_eq!(
            s.repo.show("main", DEPLOYMENT_PATH),
            daemon::deployment(&s.registry, "1.0.0")
        );
        assert_eq!(api.pod_labels(ME).get(LEADER_LABEL), None);

        // The other replica goes away (it renews no more): the clock moves from one wake-up
        // of the election to the next (the loop sleeps on none while it follows) until this
        // one has taken the expired Lease; it labels its Pod and writes.
        loop {
            let wake = tokio::time::timeout(crate::support::PATIENCE, clock.next_wake()).await;
            if api.holder().as_deref() == Some(ME) {
                break;
            }
            let wake =
                wake.unwrap_or_else(|_| panic!("the election sleeps no more:\n{}", replica.log()));
            clock.advance_to(wake);
        }
        daemon::tag_reached(&s, &replica, "1.1.0", Duration::ZERO).await;
        assert_eq!(api.holder().as_deref(), Some(ME));
        assert_eq!(
            api.pod_labels(ME).get(LEADER_LABEL).map(String::as_str),
            Some("true")
        );
        let metrics = replica.text("/metrics").await;
        assert!(metrics.contains("tagpilot_leader 1"), "{metrics}");
        assert_eq!(webhook(&replica).await, 202);

        let (stopped, log) = replica.terminate().await;
        assert_eq!(stopped, Stopped::Drained, "{log}");
        assert_eq!(
            api.holder(),
            None,
            "the Lease was not given up at exit:\n{log}"
        );
        assert_eq!(api.pod_labels(ME).get(LEADER_LABEL), None, "{log}");
    });
}

/// The binary as a Deployment's replica runs it, configured by its environment alone:
/// `TAGPILOT_LEADER_ELECT`, the downward API's `POD_NAME` and `POD_NAMESPACE`, and a
/// `KUBECONFIG` reaching the scripted API. It takes the free Lease as its Pod, labels the Pod
/// and says it leads; SIGTERM gives both up. (What a leader and a follower do is held
/// in-process above; this holds that the binary reads its environment into that election.)
#[tokio::test]
async fn the_binary_takes_the_lease_as_the_pod_its_environment_names() {
    let (server, api) = LeaseApi::start().await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig, crate::support::kube::kubeconfig(&server)).unwrap();
    std::fs::write(dir.path().join("tagpilot.yaml"), "policies: policies/\n").unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    let replica = daemon::Daemon::start_with(
        dir.path(),
        "1h",
        &[
            ("TAGPILOT_LEADER_ELECT", "true"),
            ("KUBECONFIG", kubeconfig.to_str().unwrap()),
            ("POD_NAME", ME),
            ("POD_NAMESPACE", NAMESPACE),
        ],
    );
    let labelled =
        |api: &LeaseApi| api.pod_labels(ME).get(LEADER_LABEL).map(String::as_str) == Some("true");
    api.until("the Pod labelled leader", labelled).await;
    assert_eq!(api.holder().as_deref(), Some(ME));
    replica.wait_for_metric("tagpilot_leader 1").await;

    let (status, log) = replica.terminate();
    assert_eq!(status.code(), Some(0), "{log}");
    assert_eq!(
        api.holder(),
        None,
        "the Lease was not given up at exit:\n{log}"
    );
    assert_eq!(api.pod_labels(ME).get(LEADER_LABEL), None, "{log}");
}

#[test]
fn a_lease_too_short_or_not_in_whole_seconds_is_refused_before_anything_starts() {
    for (duration, reason) in [("2s", "at least 3s"), ("3500ms", "whole seconds")] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tagpilot"))
            .args(["run", "--leader-elect", "--lease-duration", duration])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("--lease-duration") && stderr.contains(reason),
            "{stderr}"
        );
    }
}
