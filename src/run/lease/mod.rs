//! Leader election for `tagpilot run --leader-elect`: replicas take turns holding one
//! `coordination.k8s.io/v1` Lease, and only the holder writes.
//!
//! The protocol is `kube-lease-manager`'s (server-side apply to take a free Lease, so two
//! replicas cannot both take it; renewals a grace period before expiry), ported request for
//! request into [`protocol`] so that it keeps time by a [`Clock`] a test can move: its
//! decisions are pure functions of the Lease read, the time and the identity. This module
//! turns its answers into a [`Role`] the loop can wait on, and keeps the leader's Pod labelled
//! `tagpilot.dev/leader=true` so that the webhook Service, which selects that label, sends
//! registry notifications to the one replica that acts on them.
//!
//! The promise: **a replica that loses the lease stops writing before another can take it.**
//! With a lease of `duration` seconds, the holder renews `grace` seconds before expiry (a
//! third of the duration) and every request gives up after a quarter of the grace (connect,
//! send, answer: three quarters at most). So a renewal that fails or hangs is known while the
//! lease is still valid, the role turns to [`Role::Following`] at once, and the loop starts no
//! further target (the engine's cancellation token); another replica may take over only after
//! expiry, and then only after forcing the expired Lease free. What is in flight at that moment
//! is at most one push, which carries a lease on the branch tip of its own.
//!
//! What it must never do: report [`Role::Leading`] after an error from the Lease API, or keep
//! the Pod label while not leading (it is removed at start too, in case a restarted container
//! left it behind).

mod protocol;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use self::protocol::{Manager, Params, ProtocolError};
use crate::clock::Clock;
use crate::kubernetes::{Cluster, KubeError};

/// The label the leader keeps on its own Pod; the webhook Service selects `"true"`.
pub const LEADER_LABEL: &str = "tagpilot.dev/leader";

/// The shortest lease: one second of grace needs at least three.
pub const MIN_LEASE_DURATION: Duration = Duration::from_secs(3);

/// `--lease-duration`: whole seconds (the Lease counts in seconds), at least the minimum.
pub fn parse_lease_duration(text: &str) -> Result<Duration, LeaseDurationError> {
    let d = humantime::parse_duration(text)?;
    if d < MIN_LEASE_DURATION {
        return Err(LeaseDurationError::TooShort);
    }
    if d.subsec_nanos() != 0 {
        return Err(LeaseDurationError::Fraction);
    }
    Ok(d)
}

/// Why `--lease-duration` cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum LeaseDurationError {
    #[error("the Lease must last at least {}s", MIN_LEASE_DURATION.as_secs())]
    TooShort,
    #[error("the Lease counts in whole seconds")]
    Fraction,
    /// Not a duration in humantime's words: its own message says where.
    #[error(transparent)]
    Unreadable(#[from] humantime::DurationError),
}

/// How `--leader-elect` was asked to run.
#[derive(Debug, Clone)]
pub struct LeaderElection {
    /// The Lease's name (`--lease-name`).
    pub lease_name: String,
    /// The Lease's namespace: `--lease-namespace`, else `$POD_NAMESPACE`, else the
    /// kubeconfig's (or service account's) namespace when `None`.
    pub lease_namespace: Option<String>,
    /// Who this replica is in the Lease's `holderIdentity`: the Pod's name in a cluster.
    pub identity: String,
    /// How long a lease is valid without renewal (`--lease-duration`, whole seconds).
    pub lease_duration: Duration,
    /// The Pod to label while leading, when running in one (`$POD_NAMESPACE`, `$POD_NAME`).
    pub pod: Option<PodName>,
}

/// A Pod by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodName {
    pub namespace: String,
    pub name: String,
}

impl LeaderElection {
    /// The election's settings from the flags, with this replica's identity and Pod from the
    /// downward API (`$POD_NAME`, `$POD_NAMESPACE`) when running in a Pod.
    pub fn from_environment(
        lease_name: String,
        lease_namespace: Option<String>,
        lease_duration: Duration,
    ) -> LeaderElection {
        let env = |name| std::env::var(name).ok().filter(|v: &String| !v.is_empty());
        let pod_namespace = env("POD_NAMESPACE");
        let pod = env("POD_NAME");
        // Two processes on one host (outside a cluster) must not share an identity.
        let identity = pod.clone().unwrap_or_else(|| {
            let host = env("HOSTNAME")
                .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
                .map(|h| h.trim().to_string())
                .unwrap_or_else(|| "tagpilot".to_string());
            format!("{host}-{}", std::process::id())
        });
        let lease_namespace = lease_namespace.or(pod_namespace.clone());
        let pod = pod.map(|name| PodName {
            namespace: pod_namespace
                .clone()
                .or(lease_namespace.clone())
                .unwrap_or_else(|| "default".to_string()),
            name,
        });
        LeaderElection {
            lease_name,
            lease_namespace,
            identity,
            lease_duration,
            pod,
        }
    }

    fn duration_secs(&self) -> u64 {
        self.lease_duration.as_secs()
    }

    /// Seconds before expiry at which the holder renews: a third of the lease.
    fn grace_secs(&self) -> u64 {
        (self.duration_secs() / 3).max(1)
    }

    /// How long each step of one request to the API may take: a quarter of the grace, so
    /// that connecting, sending and waiting for the answer together fit inside it.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.grace_secs()) / 4
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("--lease-duration must be at least {}s, not {}s", MIN_LEASE_DURATION.as_secs(), .0.as_secs())]
    TooShort(Duration),
    #[error("leader election")]
    Kube(#[from] KubeError),
}

/// What this replica is in the election.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The Lease has not been read yet.
    Joining,
    /// Another replica holds the Lease (or nobody does yet): no writes.
    Following,
    /// This replica holds the Lease and renews it: it writes.
    Leading,
}

/// The election running in the background; [`Elector::roles`] tells the loop what it is.
pub struct Elector {
    roles: watch::Receiver<Role>,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("role", &*self.roles.borrow())
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// Connects to the API, removes a leftover leader label from this replica's Pod, and
    /// starts taking part in the election. Fails when the API cannot be reached or the label
    /// cannot be removed (missing RBAC shows here, at start, not at the first failover).
    pub async fn start(
        settings: LeaderElection,
        clock: Arc<dyn Clock>,
    ) -> Result<Elector, LeaseError> {
        if settings.lease_duration < MIN_LEASE_DURATION {
            return Err(LeaseError::TooShort(settings.lease_duration));
        }
        let cluster = Cluster::connect_with_timeout(settings.request_timeout()).await?;
        Elector::start_with_clock(cluster, settings, clock).await
    }

    /// [`Elector::start`] through `cluster` (tests build one against a local URL; its requests
    /// should give up after [`LeaderElection::request_timeout`]), keeping time by `clock`: when
    /// to renew, when another holder's lease expires, how long to wait after an error (the
    /// service's clock; tests move a manual clock).
    pub async fn start_with_clock(
        cluster: Cluster,
        settings: LeaderElection,
        clock: Arc<dyn Clock>,
    ) -> Result<Elector, LeaseError> {
        if settings.lease_duration < MIN_LEASE_DURATION {
            return Err(LeaseError::TooShort(settings.lease_duration));
        }
        let namespace = settings
            .lease_namespace
            .clone()
            .unwrap_or_else(|| cluster.default_namespace().to_string());
        let election = Election {
            cluster,
            namespace,
            settings,
            clock,
        };
        election.label(false).await?;
        let (tx, roles) = watch::channel(Role::Joining);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move { election.run(tx, stop).await }
        });
        Ok(Elector { roles, stop, task })
    }

    /// The role now and every change from here on.
    pub fn roles(&self) -> watch::Receiver<Role> {
        self.roles.clone()
    }

    /// Leaves the election: gives the Lease up (so another replica takes over at once rather
    /// than after expiry) and removes the Pod label. Call it after the last write finished.
    pub async fn stop(self) {
        self.stop.cancel();
        // The task logs its own failures; a panic in it is not worth failing the exit for.
        let _ = self.task.await;
    }
}

/// Waits until `roles` says [`Role::Leading`].
pub async fn leading(roles: &mut watch::Receiver<Role>) {
    // An error means the election task is gone: never leading again.
    if roles.wait_for(|r| *r == Role::Leading).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Waits until `roles` says anything but [`Role::Leading`].
pub async fn not_leading(roles: &mut watch::Receiver<Role>) {
    let _ = roles.wait_for(|r| *r != Role::Leading).await;
}

/// The background side of an [`Elector`].
struct Election {
    cluster: Cluster,
    namespace: String,
    settings: LeaderElection,
    clock: Arc<dyn Clock>,
}

/// Between two attempts to reach the Lease after an error.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Election {
    #[tracing::instrument(name = "election", skip_all, fields(lease = %self.lease_id(), identity = %self.settings.identity))]
    async fn run(self, tx: watch::Sender<Role>, stop: CancellationToken) {
        let mut retry = RETRY_MIN;
        loop {
            let manager = tokio::select! {
                m = self.manager() => m,
                () = stop.cancelled() => return,
            };
            let mut manager = match manager {
                Ok(m) => m,
                Err(e) => {
                    tracing::warn!(error = %crate::error_chain::Chain(&e), retry_in = ?retry, "cannot read the Lease");
                    tokio::select! {
                        () = self.clock.sleep(retry) => {}
                        () = stop.cancelled() => return,
                    }
                    retry = (retry * 2).min(RETRY_MAX);
                    continue;
                }
            };
            // The Lease has been read: this replica knows where it stands.
            tx.send_if_modified(|r| {
                let joined = *r == Role::Joining;
                if joined {
                    *r = Role::Following;
                }
                joined
            });
            loop {
                tokio::select! {
                    biased;
                    () = stop.cancelled() => {
                        self.step_down(&tx).await;
                        match manager.release().await {
                            Ok(()) => tracing::info!("Lease released"),
                            Err(e) => tracing::warn!(error = %crate::error_chain::Chain(&e), "cannot release the Lease; it expires on its own"),
                        }
                        return;
                    }
                    changed = manager.changed() => match changed {
                        Ok(true) => {
                            retry = RETRY_MIN;
                            tracing::info!("leading: this replica writes");
                            tx.send_replace(Role::Leading);
                            if let Err(e) = self.label(true).await {
                                tracing::warn!(error = %crate::error_chain::Chain(&e), "webhooks will not reach this leader until it is labelled");
                            }
                        }
                        Ok(false) => {
                            retry = RETRY_MIN;
                            self.step_down(&tx).await;
                        }
                        Err(e) => {
                            // After an error the manager still believes what it believed
                            // before; a new one reads the Lease afresh. Writes stop first.
                            self.step_down(&tx).await;
                            tracing::warn!(error = %crate::error_chain::Chain(&e), retry_in = ?retry, "the Lease could not be renewed or read");
                            tokio::select! {
                                () = self.clock.sleep(retry) => {}
                                () = stop.cancelled() => return,
                            }
                            retry = (retry * 2).min(RETRY_MAX);
                            break;
                        }
                    }
                }
            }
        }
    }

    /// Stops writes (the role first, at once) and then takes the Pod label off.
    async fn step_down(&self, tx: &watch::Sender<Role>) {
        let was_leading = tx.send_replace(Role::Following) == Role::Leading;
        if was_leading {
            tracing::warn!("not leading any more: no further writes");
            if let Err(e) = self.label(false).await {
                tracing::warn!(error = %crate::error_chain::Chain(&e), "the leader label stays on this Pod until it can be removed");
            }
        }
    }

    async fn manager(&self) -> Result<Manager, ProtocolError> {
        let s = &self.settings;
        let params = Params {
            identity: s.identity.clone(),
            field_manager: format!("tagpilot-{}", s.identity),
            duration: Duration::from_secs(s.duration_secs()),
            grace: Duration::from_secs(s.grace_secs()),
        };
        let api = kube::Api::namespaced(self.cluster.client(), &self.namespace);
        Manager::connect(api, &s.lease_name, params, self.clock.clone()).await
    }

    /// Puts the leader label on this replica's Pod, or takes it off.
    async fn label(&self, leading: bool) -> Result<(), KubeError> {
        let Some(pod) = &self.settings.pod else {
            return Ok(());
        };
        self.cluster
            .label_pod(
                &pod.namespace,
                &pod.name,
                LEADER_LABEL,
                leading.then_some("true"),
            )
            .await
    }

    fn lease_id(&self) -> String {
        format!("{}/{}", self.namespace, self.settings.lease_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(secs: u64) -> LeaderElection {
        LeaderElection {
            lease_name: "tagpilot".into(),
            lease_namespace: None,
            identity: "a".into(),
            lease_duration: Duration::from_secs(secs),
            pod: None,
        }
    }

    #[test]
    fn a_renewal_that_fails_or_hangs_is_known_before_the_lease_expires() {
        for secs in [3, 4, 15, 60, 3600] {
            let s = settings(secs);
            let grace = Duration::from_secs(s.grace_secs());
            assert!(s.grace_secs() < s.duration_secs(), "{secs}s");
            // Connecting, sending and waiting for the answer each give up after the timeout.
            assert!(s.request_timeout() * 3 < grace, "{secs}s");
            assert!(!s.request_timeout().is_zero(), "{secs}s");
        }
    }

    #[tokio::test]
    async fn a_lease_shorter_than_three_seconds_is_refused_naming_the_flag() {
        let err = Elector::start(settings(2), crate::clock::system())
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--lease-duration") && err.contains("2s"),
            "{err}"
        );
    }
}
