//! How a cycle's (or a re-check's) outcome, and the registry client's answers, become the series.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::change::Change;
use crate::engine::{Cycle, EngineError};
use crate::plan::{Plan, RepositoryStatus};
use crate::policy::PolicyError;
use crate::registry::ResponseCount;

use super::labels::{
    FINDING_KINDS, KindLabel, RegistryLabel, RegistryStatusLabels, ResultLabel, SKIP_KINDS,
    SkipLabel, UpdateLabels, finding_labels,
};
use super::result::reachable;
use super::{CycleResult, Metrics, RegistriesAnswered, unix_now};

impl Metrics {
    /// Counts one cycle: its result, its duration, its updates and its errors.
    pub fn record_cycle(
        &self,
        result: &Result<Cycle, EngineError>,
        broken_policies: &[PolicyError],
        took: Duration,
    ) {
        self.record_cycle_as(CycleResult::of(result), result, broken_policies, took);
    }

    /// [`Metrics::record_cycle`] with the result as `kind`: [`CycleResult::of`] the cycle,
    /// [`given`](CycleResult::given) the registries' answers.
    pub fn record_cycle_as(
        &self,
        kind: CycleResult,
        result: &Result<Cycle, EngineError>,
        broken_policies: &[PolicyError],
        took: Duration,
    ) {
        self.cycles
            .get_or_create(&ResultLabel {
                result: kind.label(),
            })
            .inc();
        self.cycle_duration.observe(took.as_secs_f64());
        if kind == CycleResult::Ok {
            self.last_success.set(unix_now());
        }
        if let (Some(series), Ok(cycle)) = (&self.image_updater, result) {
            // A cancelled cycle did not read everything it watches; what it wrote counts.
            series.record(cycle, !cycle.cancelled);
        }
        if let Ok(cycle) = result
            && !cycle.cancelled
        {
            self.record_findings(cycle);
        }
        for e in broken_policies {
            // `syntax` or `invalid` alone would not say what was invalid.
            self.errors
                .get_or_create(&KindLabel {
                    kind: format!("policy_{}", e.metric_label()),
                })
                .inc();
        }
        self.record_outcome(result);
    }

    /// Sets the gauges of a full cycle's findings and skipped files: what it found, not a sum
    /// over cycles, so a fixed policy or file drops out at the next cycle.
    fn record_findings(&self, cycle: &Cycle) {
        for kind in FINDING_KINDS {
            let n = cycle
                .plan
                .findings
                .iter()
                .filter(|f| f.kind == kind)
                .count();
            self.findings
                .get_or_create(&finding_labels(kind))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        for kind in SKIP_KINDS {
            let n = cycle.plan.skipped.iter().filter(|s| s.kind == kind).count();
            self.skipped_files
                .get_or_create(&SkipLabel {
                    reason: kind.label(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Counts one re-check after notifications: its result, its updates and its errors. It is
    /// not a cycle: `tagpilot_cycles_total` and the last successful cycle stay the interval's.
    pub fn record_recheck(&self, result: &Result<Cycle, EngineError>) {
        self.record_recheck_as(CycleResult::of(result), result);
    }

    /// [`Metrics::record_recheck`] with the result as `kind`, decided as a cycle's is
    /// ([`Metrics::record_cycle_as`]): a re-check no registry answered is
    /// `registries_unreachable`, not `ok`.
    pub fn record_recheck_as(&self, kind: CycleResult, result: &Result<Cycle, EngineError>) {
        self.rechecks
            .get_or_create(&ResultLabel {
                result: kind.label(),
            })
            .inc();
        if let (Some(series), Ok(cycle)) = (&self.image_updater, result) {
            series.record(cycle, false);
        }
        self.record_outcome(result);
    }

    /// The updates and errors of a cycle or a re-check.
    fn record_outcome(&self, result: &Result<Cycle, EngineError>) {
        match result {
            Err(e) => self.error(e.metric_label()),
            Ok(cycle) => {
                for (policy, result) in updates(cycle) {
                    self.updates
                        .get_or_create(&UpdateLabels {
                            policy: self.policy_label(policy),
                            result,
                        })
                        .inc();
                }
                let failed_repositories = cycle
                    .plan
                    .repositories
                    .iter()
                    .filter(|r| r.status == RepositoryStatus::Failed)
                    .count();
                for _ in 0..failed_repositories {
                    self.error("repository");
                }
            }
        }
    }

    /// Adds the registry client's answers since the last call (its counts only grow), sets
    /// each registry asked since then up or down, and says how many were asked and answered.
    pub fn record_registry(&self, responses: &[ResponseCount]) -> RegistriesAnswered {
        let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
        // Registry → whether any of its new answers shows it reachable.
        let mut asked: BTreeMap<&str, bool> = BTreeMap::new();
        for r in responses {
            let before = seen
                .insert((r.registry.clone(), r.request, r.status.clone()), r.count)
                .unwrap_or(0);
            let new = r.count.saturating_sub(before);
            if new == 0 {
                continue;
            }
            *asked.entry(&r.registry).or_default() |= reachable(&r.status);
            self.registry_requests
                .get_or_create(&RegistryStatusLabels {
                    registry: r.registry.clone(),
                    status: r.status.clone(),
                })
                .inc_by(new);
            if r.request == "tag_list" {
                self.tag_listings
                    .get_or_create(&RegistryLabel {
                        registry: r.registry.clone(),
                    })
                    .inc_by(new);
            }
        }
        let now = unix_now();
        for (registry, up) in &asked {
            let label = RegistryLabel {
                registry: registry.to_string(),
            };
            self.registry_up.get_or_create(&label).set(i64::from(*up));
            if *up {
                self.registry_last_reachable.get_or_create(&label).set(now);
            }
        }
        RegistriesAnswered {
            asked: asked.len(),
            reachable: asked.values().filter(|up| **up).count(),
        }
    }
}

/// Each update of a cycle as (policy, result): a change is `pushed`, `pull_request` or `failed`
/// by what happened to its repository, and `proposed` where nothing was written (the local
/// directory is not a target of `tagpilot run`); a hold is `held`; a problem naming a policy is
/// `failed`.
pub(super) fn updates(cycle: &Cycle) -> Vec<(&str, &'static str)> {
    let plan = &cycle.plan;
    let mut out = Vec::new();
    for change in &plan.changes {
        out.push((change.policy.as_str(), change_result(plan, change)));
    }
    for hold in &plan.holds {
        out.push((hold.policy.as_str(), "held"));
    }
    for problem in &plan.problems {
        if let Some(policy) = &problem.policy {
            out.push((policy.as_str(), "failed"));
        }
    }
    out
}

/// What became of `change`, by what happened to its repository: `pushed`, `pull_request`,
/// `failed`, or `proposed` where nothing was written.
pub fn change_result(plan: &Plan, change: &Change) -> &'static str {
    let status = change.repository.as_deref().and_then(|name| {
        plan.repositories
            .iter()
            .find(|r| r.repository == name)
            .map(|r| r.status)
    });
    match status {
        Some(RepositoryStatus::Pushed) => "pushed",
        Some(RepositoryStatus::PullRequests) => "pull_request",
        Some(RepositoryStatus::Failed) => "failed",
        Some(RepositoryStatus::WouldPush | RepositoryStatus::UpToDate) | None => "proposed",
    }
}
