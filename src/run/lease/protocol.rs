//! The Lease protocol: `kube-lease-manager`'s (0.13), request for request, keeping time by the
//! [`Clock`] it is handed rather than the system's, so that its waits can be tested without
//! waiting. It reads the clock's time of day ([`Clock::wall`]), not its monotonic instant: a
//! Lease's expiry is its `renewTime`, written by whichever replica renewed it last, plus
//! `leaseDurationSeconds`, and only a time of day can be compared with a time another process
//! wrote.
//!
//! Its decisions are pure functions of what this replica last read of the Lease, the time,
//! and who this replica is ([`next_step`], [`claim`], [`may_release`]); [`Manager`] only reads
//! and writes the Lease around them:
//! - a replica re-reads the Lease only once what it read has expired (or after writing it);
//! - a free Lease is taken by server-side apply, so two replicas cannot both take it (the
//!   second one's apply conflicts on `holderIdentity`), then its transitions are counted;
//! - the holder renews a grace period before expiry;
//! - a Lease whose holder let it expire is first forced free (and the replica waits a random
//!   moment, so that not every follower tries to take it at once), then taken like a free one.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::clock::Clock;

/// What one replica needs to know to take part.
#[derive(Debug, Clone)]
pub struct Params {
    /// Who this replica is in `holderIdentity`.
    pub identity: String,
    /// The field manager of this replica's writes (server-side apply tells replicas apart by it).
    pub field_manager: String,
    /// How long a lease is valid without renewal.
    pub duration: Duration,
    /// How long before expiry the holder renews.
    pub grace: Duration,
}

/// The holder read from a Lease that names none but has a renewal or acquisition time: an
/// inconsistent Lease, treated as held by nobody known and already expired, so that it is
/// forced free and taken.
const UNKNOWN_HOLDER: &str = "<inconsistent Lease: no holderIdentity>";

/// What this replica last read of the Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The Lease's `holderIdentity`.
    pub holder: Option<String>,
    /// `renewTime` plus `leaseDurationSeconds`; a moment already past when either is missing.
    pub expiry: SystemTime,
    /// The Lease's `leaseTransitions`.
    pub transitions: i32,
}

impl Seen {
    /// Nothing known: no holder, expired as of `now` (so the next look reads the Lease).
    pub fn nothing(now: SystemTime) -> Seen {
        Seen {
            holder: None,
            expiry: now,
            transitions: 0,
        }
    }

    /// What a Lease's `spec` says, read at `now`.
    pub fn read(spec: Option<&LeaseSpec>, now: SystemTime) -> Seen {
        let Some(spec) = spec else {
            return Seen::nothing(now);
        };
        let transitions = spec.lease_transitions.unwrap_or(0);
        if spec.holder_identity.is_none()
            && (spec.renew_time.is_some() || spec.acquire_time.is_some())
        {
            return Seen {
                holder: Some(UNKNOWN_HOLDER.to_string()),
                expiry: now,
                transitions,
            };
        }
        let expiry = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(secs)) => {
                SystemTime::from(renewed.0) + Duration::from_secs(u64::try_from(secs).unwrap_or(0))
            }
            _ => now,
        };
        Seen {
            holder: spec.holder_identity.clone(),
            expiry,
            transitions,
        }
    }

    /// Whether the lease read has run out by `now` (a lease is valid strictly before expiry).
    pub fn expired(&self, now: SystemTime) -> bool {
        now >= self.expiry
    }

    /// Whether `identity` holds it.
    pub fn held_by(&self, identity: &str) -> bool {
        self.holder.as_deref() == Some(identity)
    }
}

/// What a replica does next, when the role it reports already matches what it read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// This replica holds the Lease: renew it at `at`, a grace period before expiry.
    Renew { at: SystemTime },
    /// Nobody holds it: take it now.
    Take,
    /// Another holder let it expire: force it free now, and take it on a later step.
    ForceFree,
    /// Another holder's lease is valid: read it again once it expires, at `until`.
    Wait { until: SystemTime },
}

/// The next step from what was read, `now`, for the replica `identity`.
pub fn next_step(seen: &Seen, identity: &str, grace: Duration, now: SystemTime) -> Step {
    match &seen.holder {
        _ if seen.held_by(identity) => Step::Renew {
            at: seen.expiry.checked_sub(grace).unwrap_or(now),
        },
        None => Step::Take,
        Some(_) if seen.expired(now) => Step::ForceFree,
        Some(_) => Step::Wait { until: seen.expiry },
    }
}

/// A write that claims the Lease for this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Held by this replica: a new `renewTime`.
    Renew,
    /// Free: take it (server-side apply), then count the transition.
    Take,
}

/// Which claim to write, if any, from what was read just before (another holder: none).
pub fn claim(seen: &Seen, identity: &str) -> Option<Claim> {
    match &seen.holder {
        _ if seen.held_by(identity) => Some(Claim::Renew),
        None => Some(Claim::Take),
        Some(_) => None,
    }
}

/// Whether this replica may clear the Lease: it holds it, the lease read has expired, or it
/// forces it (an expired holder's Lease, read again just before).
pub fn may_release(seen: &Seen, identity: &str, now: SystemTime, force: bool) -> bool {
    force || seen.held_by(identity) || seen.expired(now)
}

#[derive(Debug, thiserror::Error)]
pub enum ProtocolError {
    #[error("cannot read the Lease")]
    Read(#[source] kube::Error),
    #[error("the Lease does not exist")]
    Missing,
    #[error("cannot create the Lease")]
    Create(#[source] kube::Error),
    #[error("cannot write the Lease")]
    Write(#[source] kube::Error),
    #[error("another replica wrote the Lease at the same time")]
    Conflict,
    #[error("the clock reads a time a Lease cannot hold")]
    Time(#[source] k8s_openapi::jiff::Error),
}

/// Between two attempts to write after a conflict: from `CONFLICT_MIN`, doubling with jitter,
/// up to `CONFLICT_MAX`.
const CONFLICT_MIN: Duration = Duration::from_millis(100);
const CONFLICT_MAX: Duration = Duration::from_secs(5);

/// After forcing an expired Lease free, a random wait in this range before trying to take it.
const AFTER_FORCE_FREE_MS: std::ops::RangeInclusive<u64> = 100..=1000;

/// One replica's side of the protocol over one Lease.
pub struct Manager {
    api: Api<Lease>,
    name: String,
    params: Params,
    clock: Arc<dyn Clock>,
    seen: Seen,
    /// What [`Manager::changed`] last answered.
    leading: bool,
}

impl Manager {
    /// Makes sure the Lease exists (creating it empty when it does not) and starts knowing
    /// nothing of it.
    pub async fn connect(
        api: Api<Lease>,
        name: &str,
        params: Params,
        clock: Arc<dyn Clock>,
    ) -> Result<Manager, ProtocolError> {
        let seen = Seen::nothing(SystemTime::from(clock.wall()));
        let manager = Manager {
            api,
            name: name.to_string(),
            params,
            clock,
            seen,
            leading: false,
        };
        manager.create().await?;
        Ok(manager)
    }

    /// Waits until this replica starts or stops holding the Lease, taking it once it is free
    /// and renewing it while held; answers whether it holds it now.
    pub async fn changed(&mut self) -> Result<bool, ProtocolError> {
        let mut backoff = CONFLICT_MIN;
        loop {
            self.sync(false).await?;
            let holding = self.seen.held_by(&self.params.identity);
            if holding != self.leading {
                self.leading = holding;
                return Ok(holding);
            }
            match self.step().await {
                Ok(()) => backoff = CONFLICT_MIN,
                Err(ProtocolError::Conflict) => {
                    let wait = jitter(backoff);
                    self.clock.sleep(wait).await;
                    backoff = (wait * 2).min(CONFLICT_MAX);
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The clock's time of day, as the Lease's times are compared with it.
    fn now(&self) -> SystemTime {
        SystemTime::from(self.clock.wall())
    }

    /// Sleeps on the clock until its time of day reaches `at` (at once if it has).
    async fn sleep_until(&self, at: SystemTime) {
        let wait = at.duration_since(self.now()).unwrap_or(Duration::ZERO);
        self.clock.sleep(wait).await;
    }

    /// Gives the Lease up if this replica holds it (or it has expired); another holder's is
    /// left alone.
    pub async fn release(&mut self) -> Result<(), ProtocolError> {
        self.release_if(false).await
    }

    async fn step(&mut self) -> Result<(), ProtocolError> {
        let now = self.now();
        match next_step(&self.seen, &self.params.identity, self.params.grace, now) {
            Step::Renew { at } => {
                self.sleep_until(at).await;
                self.claim().await
            }
            Step::Take => self.claim().await,
            Step::ForceFree => {
                tracing::debug!(holder = ?self.seen.holder, "forcing an expired Lease free");
                let freed = self.release_if(true).await;
                let wait = fastrand::u64(AFTER_FORCE_FREE_MS);
                self.clock.sleep(Duration::from_millis(wait)).await;
                freed
            }
            Step::Wait { until } => {
                self.sleep_until(until).await;
                Ok(())
            }
        }
    }

    /// Re-reads the Lease when forced or when what was read has expired.
    async fn sync(&mut self, force: bool) -> Result<(), ProtocolError> {
        if !force && !self.seen.expired(self.now()) {
            return Ok(());
        }
        match self.get().await {
            Ok(lease) => {
                self.seen = Seen::read(lease.spec.as_ref(), self.now());
                Ok(())
            }
            Err(ProtocolError::Missing) => {
                self.seen = Seen::nothing(self.now());
                Err(ProtocolError::Missing)
            }
            Err(e) => Err(e),
        }
    }

    /// Renews or takes the Lease, as [`claim`] decides from a fresh enough reading, and reads
    /// it back.
    async fn claim(&mut self) -> Result<(), ProtocolError> {
        self.sync(false).await?;
        let now = MicroTime(Timestamp::try_from(self.now()).map_err(ProtocolError::Time)?);
        let duration = self.params.duration.as_secs();
        match claim(&self.seen, &self.params.identity) {
            Some(Claim::Renew) => {
                let spec = json!({"renewTime": now, "leaseDurationSeconds": duration});
                self.patch(Patch::Strategic(lease_patch(spec))).await?;
            }
            Some(Claim::Take) => {
                let spec = json!({
                    "acquireTime": now,
                    "renewTime": now,
                    "holderIdentity": self.params.identity,
                    "leaseDurationSeconds": duration,
                });
                self.patch(Patch::Apply(lease_patch(spec))).await?;
                let spec = json!({"leaseTransitions": self.seen.transitions + 1});
                self.patch(Patch::Strategic(lease_patch(spec))).await?;
            }
            None => return Ok(()),
        }
        self.sync(true).await
    }

    /// Clears the Lease when [`may_release`] allows it, and reads it back.
    async fn release_if(&mut self, force: bool) -> Result<(), ProtocolError> {
        self.sync(false).await?;
        let now = self.now();
        if may_release(&self.seen, &self.params.identity, now, force) {
            let spec = json!({
                "acquireTime": null,
                "renewTime": null,
                "holderIdentity": null,
                "leaseDurationSeconds": null,
            });
            self.patch(Patch::Strategic(lease_patch(spec))).await?;
        }
        self.sync(true).await
    }

    async fn patch(&self, patch: Patch<Value>) -> Result<(), ProtocolError> {
        let params = PatchParams {
            field_manager: Some(self.params.field_manager.clone()),
            ..PatchParams::default()
        };
        match self.api.patch(&self.name, &params, &patch).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 && status.reason == "Conflict" => {
                Err(ProtocolError::Conflict)
            }
            Err(e) => Err(ProtocolError::Write(e)),
        }
    }

    async fn get(&self) -> Result<Lease, ProtocolError> {
        match self.api.get(&self.name).await {
            Ok(lease) => Ok(lease),
            Err(kube::Error::Api(status)) if status.code == 404 => Err(ProtocolError::Missing),
            Err(e) => Err(ProtocolError::Read(e)),
        }
    }

    /// Reads the Lease, creating it empty when it does not exist (another replica creating it
    /// at the same moment is no error).
    async fn create(&self) -> Result<(), ProtocolError> {
        match self.get().await {
            Err(ProtocolError::Missing) => {}
            other => return other.map(drop),
        }
        let empty = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                ..ObjectMeta::default()
            },
            spec: None,
        };
        match self.api.create(&PostParams::default(), &empty).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status))
                if status.code == 409 && status.reason == "AlreadyExists" =>
            {
                self.get().await.map(drop)
            }
            Err(e) => Err(ProtocolError::Create(e)),
        }
    }
}

/// A patch of the Lease's `spec`.
fn lease_patch(spec: Value) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "spec": spec})
}

/// A wait between `base` and twice `base`, so that replicas that conflicted once do not
/// conflict again in step.
fn jitter(base: Duration) -> Duration {
    base.mul_f64(1.0 + fastrand::f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: &str = "tagpilot-0";
    const OTHER: &str = "tagpilot-1";
    const GRACE: Duration = Duration::from_secs(1);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn held(holder: &str, renewed: u64, secs: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_string()),
            renew_time: Some(MicroTime(Timestamp::try_from(at(renewed)).unwrap())),
            lease_duration_seconds: Some(secs),
            lease_transitions: Some(4),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn the_expiry_is_the_renewal_plus_the_duration_and_a_lease_ends_at_it() {
        let seen = Seen::read(Some(&held(OTHER, 10, 3)), at(11));
        assert_eq!(seen.expiry, at(13));
        assert_eq!(seen.transitions, 4);
        assert!(!seen.expired(at(12)));
        assert!(seen.expired(at(13)));
    }

    #[test]
    fn an_empty_or_missing_spec_is_free_and_already_expired() {
        for spec in [None, Some(LeaseSpec::default())] {
            let seen = Seen::read(spec.as_ref(), at(5));
            assert_eq!(seen, Seen::nothing(at(5)));
            assert!(seen.expired(at(5)));
            assert_eq!(next_step(&seen, ME, GRACE, at(5)), Step::Take);
            assert_eq!(claim(&seen, ME), Some(Claim::Take));
        }
    }

    #[test]
    fn a_lease_with_times_but_no_holder_is_forced_free_before_it_is_taken() {
        let mut spec = held(OTHER, 10, 3);
        spec.holder_identity = None;
        let seen = Seen::read(Some(&spec), at(11));
        assert!(seen.expired(at(11)));
        assert_eq!(next_step(&seen, ME, GRACE, at(11)), Step::ForceFree);
        assert_eq!(claim(&seen, ME), None);
    }

    #[test]
    fn the_holder_renews_a_grace_period_before_expiry() {
        let seen = Seen::read(Some(&held(ME, 10, 3)), at(10));
        assert_eq!(
            next_step(&seen, ME, GRACE, at(10)),
            Step::Renew { at: at(12) }
        );
        assert_eq!(claim(&seen, ME), Some(Claim::Renew));
        // Still its own once expired: it renews at once (the API says whether that worked).
        assert_eq!(
            next_step(&seen, ME, GRACE, at(20)),
            Step::Renew { at: at(12) }
        );
    }

    #[test]
    fn a_follower_waits_for_a_valid_lease_and_forces_an_expired_one_free() {
        let seen = Seen::read(Some(&held(OTHER, 10, 3)), at(10));
        assert_eq!(
            next_step(&seen, ME, GRACE, at(10)),
            Step::Wait { until: at(13) }
        );
        assert_eq!(next_step(&seen, ME, GRACE, at(13)), Step::ForceFree);
        assert_eq!(
            claim(&seen, ME),
            None,
            "another holder's Lease is never claimed"
        );
    }

    #[test]
    fn only_the_holder_or_anyone_after_expiry_or_by_force_clears_the_lease() {
        let other = Seen::read(Some(&held(OTHER, 10, 3)), at(10));
        assert!(!may_release(&other, ME, at(12), false));
        assert!(may_release(&other, ME, at(13), false));
        assert!(may_release(&other, ME, at(12), true));
        let mine = Seen::read(Some(&held(ME, 10, 3)), at(10));
        assert!(may_release(&mine, ME, at(11), false));
    }

    #[test]
    fn a_conflict_waits_between_one_and_two_times_the_backoff() {
        for _ in 0..100 {
            let wait = jitter(CONFLICT_MIN);
            assert!(wait >= CONFLICT_MIN && wait <= CONFLICT_MIN * 2, "{wait:?}");
        }
    }
}
