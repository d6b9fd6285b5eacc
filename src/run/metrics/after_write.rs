//! The series about what follows a write (issue 19): verifications of changes in Argo CD
//! Applications, reverts of the ones that failed, and the tags held. Registered together, after
//! the cycle's own series, so `/metrics` shows them side by side.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

use super::labels::ResultLabel;
use super::{Metrics, Registrar, holds, registered};

/// How a verification ends, as `tagpilot_verifications_total` counts it.
pub const VERIFICATION_RESULTS: [&str; 4] = ["verified", "failed", "timed_out", "error"];

pub(super) struct AfterWrite {
    /// Verifications of changes in Argo CD Applications, by how they ended.
    pub(super) verifications: Family<ResultLabel, Counter>,
    /// Reverts of failed changes (`onFailure: revert`), by how they ended.
    pub(super) reverts: Family<ResultLabel, Counter>,
    /// From a change reaching its base branch to its Application verified healthy.
    pub(super) time_to_healthy: Histogram,
    /// From a tag verified upstream to its promotion verified downstream (issue 20).
    pub(super) promotion_lead_time: Histogram,
    /// Verifications under way: a change followed in one Application.
    pub(super) verifications_pending: Gauge,
    /// The held tags after the last full cycle, by reason ([`holds`]).
    pub(super) holds: Family<holds::ReasonLabel, Gauge>,
}

impl AfterWrite {
    pub(super) fn register(registry: &mut Registrar) -> AfterWrite {
        AfterWrite {
            verifications: registered(
                registry,
                "tagpilot_verifications",
                "Changes followed to an Argo CD Application, by how they ended (verified, failed, timed_out, error)",
                Family::default(),
            ),
            reverts: registered(
                registry,
                "tagpilot_reverts",
                "Reverts of changes that failed verification (onFailure: revert), by result (written, or why not)",
                Family::default(),
            ),
            // From ten seconds (a sync and a rollout of one Pod) to about three hours.
            time_to_healthy: registered(
                registry,
                "tagpilot_verification_time_to_healthy_seconds",
                "Time from a change reaching its base branch (push or merge) to its Application verified healthy",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    10.0, 2.0, 11,
                )),
            ),
            // From a minute to about a fortnight: soak times are hours, promotions wait on
            // reviews.
            promotion_lead_time: registered(
                registry,
                "tagpilot_promotion_lead_time_seconds",
                "Time from a tag verified healthy upstream (or, from git, set there) to its promotion verified healthy downstream",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    60.0, 2.0, 15,
                )),
            ),
            verifications_pending: registered(
                registry,
                "tagpilot_verifications_pending",
                "Verifications under way: changes being followed in an Argo CD Application (also kept in --state-dir)",
                Gauge::default(),
            ),
            holds: registered(
                registry,
                "tagpilot_holds",
                "Tags held, never proposed again for their field, after the last full cycle, by reason (failed, rolled_back, manual)",
                Family::default(),
            ),
        }
    }

    /// Every verification result and a written revert at zero, so `rate()` and `absent()` in
    /// alerts work before the first one.
    pub(super) fn start_at_zero(&self) {
        for result in VERIFICATION_RESULTS {
            self.verifications
                .get_or_create(&ResultLabel { result })
                .inc_by(0);
        }
        self.reverts
            .get_or_create(&ResultLabel { result: "written" })
            .inc_by(0);
    }
}

impl Metrics {
    /// A verification ended with `result` (one of [`VERIFICATION_RESULTS`]); a verified one
    /// after `healthy_after` since its change reached the base branch.
    pub fn record_verification(
        &self,
        result: &'static str,
        healthy_after: Option<std::time::Duration>,
    ) {
        self.after_write
            .verifications
            .get_or_create(&ResultLabel { result })
            .inc();
        if let Some(took) = healthy_after {
            self.after_write.time_to_healthy.observe(took.as_secs_f64());
        }
    }

    /// A verified change's promotions (fields with `promoted_at`): each one's lead time, from
    /// the tag healthy upstream to `now`, verified here.
    pub fn record_promotion_lead_times(
        &self,
        fields: &[crate::state::VerifiedField],
        now: jiff::Timestamp,
    ) {
        for at in fields.iter().filter_map(|f| f.promoted_at) {
            if let Ok(took) = std::time::Duration::try_from(now.duration_since(at)) {
                self.after_write
                    .promotion_lead_time
                    .observe(took.as_secs_f64());
            }
        }
    }

    /// One revert of a failed change ended: `written`, or the error's metric label.
    pub fn record_revert(&self, result: &'static str) {
        self.after_write
            .reverts
            .get_or_create(&ResultLabel { result })
            .inc();
    }

    /// How many verifications are under way.
    pub fn set_verifications_pending(&self, pending: usize) {
        self.after_write
            .verifications_pending
            .set(i64::try_from(pending).unwrap_or(i64::MAX));
    }
}
