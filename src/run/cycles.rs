//! The loop itself: a full cycle every interval (with backoff after a failed one), and between
//! cycles the re-checks notifications asked for. Time is kept on the [`Clock`] the service was
//! given; stopping is the [`super::Shutdown`]'s drain (finish, start nothing new) or abort.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::argocd::FromCluster;
use crate::argocd::read::cluster::{self, Cluster, Loaded};
use crate::engine::{self, Cycle, EngineError};
use crate::image::Repository;
use crate::policy;
use crate::session::Session;

use super::Stopped;
use super::http::Shared;
use super::lease::{self, Role};
use super::memory;
use super::metrics::CycleResult;
use super::pace::Pacer;
use crate::clock::Clock;

/// What every cycle uses.
pub(super) struct Daemon<'a> {
    /// The configuration, the registry client, the clone cache and the state store.
    pub(super) session: &'a Session,
    pub(super) cluster: Option<(Cluster, FromCluster)>,
    /// With `applications.fromCluster`, the `ImageUpdater` resources, watched rather than
    /// listed every cycle.
    pub(super) updaters: Option<cluster::UpdaterWatch>,
    pub(super) shared: &'a Shared,
    /// With `--leader-elect`, the election's verdicts: cycles run only while leading.
    pub(super) roles: Option<tokio::sync::watch::Receiver<Role>>,
    /// When the next cycle is due, and how long one took.
    pub(super) clock: Arc<dyn Clock>,
    /// With `verify:` on some repository, what follows the changes pushed to Applications.
    pub(super) verifier: Option<Arc<super::verify::Verifier>>,
    /// The policies named as not served (their targets are the local directory).
    pub(super) not_served: super::unserved::NotServed,
    /// Since when registries and remotes fail, for `notifications:`.
    pub(super) outages: super::notify::derive::Outages,
}

/// Cancels `cancel` when this replica stops leading (never without `--leader-elect`), then
/// waits forever: raced against a cycle, it stops further targets and lets the cycle finish.
async fn cancel_when_lease_lost(
    roles: Option<tokio::sync::watch::Receiver<Role>>,
    cancel: CancellationToken,
) {
    lease_lost(roles).await;
    tracing::warn!("lost the Lease: no further target starts");
    cancel.cancel();
    std::future::pending::<()>().await;
}

/// Waits until this replica stops leading; never without `--leader-elect`.
async fn lease_lost(roles: Option<tokio::sync::watch::Receiver<Role>>) {
    match roles {
        Some(mut roles) => lease::not_leading(&mut roles).await,
        None => std::future::pending().await,
    }
}

/// An abort came: the loop stops without waiting for anything.
struct Aborted;

impl Daemon<'_> {
    /// Runs cycles until `drain` (after the cycle in flight) or `abort` (at once).
    pub(super) async fn cycles(
        &self,
        interval: Duration,
        drain: CancellationToken,
        abort: CancellationToken,
    ) -> Stopped {
        let mut pacer = Pacer::new(interval);
        self.shared.health.set_live(true);
        let mut roles = self.roles.clone();
        while !drain.is_cancelled() {
            if let Some(roles) = &mut roles
                && *roles.borrow() != Role::Leading
            {
                tracing::info!("following: waiting for the Lease");
                tokio::select! {
                    () = lease::leading(roles) => {}
                    () = drain.cancelled() => break,
                }
            }
            let Ok(succeeded) = self.full_cycle(&drain, &abort).await else {
                return Stopped::Aborted;
            };
            // A target that failed is retried next interval; backing off for it would delay
            // every other target too. Only a cycle that could not run at all backs off.
            let wait = pacer.next_wait(succeeded);
            tracing::debug!(wait = %humantime::format_duration(round(wait)), "next cycle");
            self.shared.events.next_cycle_in(wait);
            let next_cycle = self.clock.now() + wait;
            if self
                .recheck_until(next_cycle, succeeded, &drain, &abort)
                .await
                .is_err()
            {
                return Stopped::Aborted;
            }
        }
        Stopped::Drained
    }

    /// One full cycle, recorded in the metrics, health and log; whether it succeeded (could
    /// run at all).
    async fn full_cycle(
        &self,
        drain: &CancellationToken,
        abort: &CancellationToken,
    ) -> Result<bool, Aborted> {
        let started = self.clock.now();
        let policies = policy::load_all(&self.session.config);
        self.not_served
            .check(&policies.policies, &self.shared.metrics);
        // A store that went down (a full disk) is opened again as soon as it can be. The
        // metric waits for the flush at the end: a full disk may let the file open and
        // still refuse the writes.
        if let Some(state) = &self.shared.state {
            state.recover();
        }
        // Boxes ticked on dashboard issues since the last cycle: released before this plan.
        let repositories = &self.session.config.repositories;
        if self.leading() {
            let state = self.shared.state.as_deref();
            tokio::select! {
                _ = Box::pin(super::dashboard::release_ticked(repositories, state)) => {}
                () = abort.cancelled() => return Err(Aborted),
            }
        }
        self.session.registry.start_cycle();
        // Every repository is read now: the hints so far are answered by this cycle.
        self.shared.rechecks.full_cycle_starts();
        // Losing the lease cancels like a signal does: no further target starts, the
        // write in flight finishes.
        let cancel = drain.child_token();
        let lost = cancel_when_lease_lost(self.roles.clone(), cancel.clone());
        let cycle = Box::pin(self.cycle(&policies, None, cancel.clone()));
        let result = tokio::select! {
            r = cycle => r,
            () = lost => unreachable!("waits forever after cancelling"),
            () = abort.cancelled() => return Err(Aborted),
        };
        let took = self.clock.now().saturating_duration_since(started);
        let kind = self.report(Ran::Cycle, &result, &policies, took);
        if self.leading() {
            let (cycle, now) = (result.as_ref().ok(), self.clock.wall());
            tokio::select! {
                () = Box::pin(super::dashboard::keep(repositories, self.shared, cycle, now)) => {}
                () = abort.cancelled() => return Err(Aborted),
            }
        }
        if let Ok(cycle) = &result {
            let waiting = cycle.plan.holds.iter().filter(|h| {
                matches!(
                    h.reason,
                    crate::plan::HoldReason::WindowClosed { .. }
                        | crate::plan::HoldReason::Frozen { .. }
                )
            });
            self.shared.metrics.set_waiting_for_window(waiting.count());
        }
        self.shared
            .metrics
            .record_metadata_hits(self.session.registry.metadata_cache_hits());
        if let Some(state) = &self.shared.state {
            // Up means this cycle's writes worked. Read before the flush: the flush opens a
            // store that went down again, and on a full disk the file may open (and an empty,
            // durable commit succeed) while every write that needs a page still fails.
            let wrote = state.is_up();
            state.flush();
            self.shared
                .metrics
                .set_state_up(state.path(), wrote && state.is_up());
            // Unknown holds (the store down) leave the last count standing.
            if let Ok(holds) = state.holds() {
                self.shared.metrics.set_holds(&holds);
            }
        }
        // Ready after the first cycle that ran and heard from a registry: a replica that
        // reaches none (a wrong proxy, a network policy) keeps a rollout from replacing one
        // that does. Once ready, it stays so: registries going away is not this replica's
        // fault, and taking it out of the Service would only cost it the webhooks that
        // say they are back. `tagpilot_registry_up` is what to alert on.
        if matches!(kind, CycleResult::Ok | CycleResult::Partial) {
            self.shared.health.cycle_completed();
        }
        // After the metrics, the state's flush and readiness: what an observer waits for.
        self.shared.events.cycle_finished(kind);
        drop((result, policies));
        memory::release_freed();
        Ok(kind != CycleResult::Error)
    }

    /// Whether this replica leads (always, without `--leader-elect`): only the leader acts on
    /// and writes the dashboard issues.
    fn leading(&self) -> bool {
        self.roles
            .as_ref()
            .is_none_or(|roles| *roles.borrow() == Role::Leading)
    }

    /// Until the next cycle is due, re-checks what notifications name, as they come. The next
    /// cycle's time does not move for them, so they never starve it. A backoff (the last
    /// cycle not `succeeded`) is never cut short: a flood of notifications must not become a
    /// flood of requests to a failing registry; their hints wait for the next cycle.
    async fn recheck_until(
        &self,
        next_cycle: tokio::time::Instant,
        succeeded: bool,
        drain: &CancellationToken,
        abort: &CancellationToken,
    ) -> Result<(), Aborted> {
        loop {
            let batch = async {
                if succeeded {
                    self.shared.rechecks.next_batch().await
                } else {
                    std::future::pending().await
                }
            };
            tokio::select! {
                () = self.clock.sleep_until(next_cycle) => return Ok(()),
                () = drain.cancelled() => return Ok(()),
                // Losing the lease ends the wait too: the loop then waits to lead again.
                () = lease_lost(self.roles.clone()) => return Ok(()),
                images = batch => {
                    let cancel = drain.child_token();
                    let lost = cancel_when_lease_lost(self.roles.clone(), cancel.clone());
                    let recheck = Box::pin(self.recheck(&images, cancel));
                    tokio::select! {
                        () = recheck => self.shared.events.recheck_finished(),
                        () = lost => unreachable!("waits forever after cancelling"),
                        () = abort.cancelled() => return Err(Aborted),
                    }
                }
            }
        }
    }

    /// Re-checks the policies and Applications that use `images`, after notifications: their
    /// tag lists are read fresh, every other repository is left alone.
    async fn recheck(&self, images: &BTreeSet<Repository>, drain: CancellationToken) {
        let started = self.clock.now();
        let names: Vec<String> = images.iter().map(ToString::to_string).collect();
        let policies = policy::load_all(&self.session.config);
        // Applications are only known once read; without them, a repository no policy uses
        // costs nothing at all.
        if self.session.config.applications.is_none()
            && !policies
                .policies
                .iter()
                .any(|p| images.iter().any(|i| p.follows(i)))
        {
            tracing::info!(repositories = ?names, "no policy uses the notified repositories");
            return;
        }
        self.session.registry.forget_tags(images);
        let result = self.cycle(&policies, Some(images), drain).await;
        let took = self.clock.now().saturating_duration_since(started);
        self.report(Ran::Recheck(&names), &result, &policies, took);
        drop((result, policies));
        memory::release_freed();
    }

    /// Reports what a cycle or a re-check did, the one way for both: the registries' answers
    /// decide its result (no registry answering is an outage, whichever ran), the metrics
    /// count it, each problem, finding and skipped file is logged, and what it pushed and
    /// fetched goes to verification. Returns the result.
    fn report(
        &self,
        ran: Ran<'_>,
        result: &Result<Cycle, EngineError>,
        policies: &policy::Loaded,
        took: Duration,
    ) -> CycleResult {
        let metrics = &self.shared.metrics;
        metrics.set_configured_policies(policies.policies.iter().map(|p| p.name.as_str()));
        let answered = metrics.record_registry(&self.session.registry.responses());
        metrics.record_quotas(&self.session.registry.quotas());
        let kind = CycleResult::of(result).given(answered);
        match ran {
            Ran::Cycle => metrics.record_cycle_as(kind, result, &policies.errors, took),
            Ran::Recheck(_) => metrics.record_recheck_as(kind, result),
        }
        metrics.record_signatures(&self.session.registry.signature_verifications());
        log_outcome(ran, result, kind, took);
        self.verify(result, policies);
        self.notify(matches!(ran, Ran::Cycle), result, kind, took);
        kind
    }

    /// Keeps what a cycle or re-check found for the status page, and hands what it did,
    /// waits for and refused to the notification sinks (without waiting for them), with the
    /// registries and remotes that failed too long.
    fn notify(
        &self,
        full: bool,
        result: &Result<Cycle, EngineError>,
        kind: CycleResult,
        took: Duration,
    ) {
        let config = &self.session.config;
        let now = self.clock.wall();
        let cycle = result.as_ref().ok();
        let unreachable_after = config
            .notifications
            .as_ref()
            .map_or(Duration::MAX, |n| n.unreachable_after);
        let outages = self.outages.observe(
            &self.session.registry.responses(),
            cycle,
            unreachable_after,
            now,
        );
        let endpoints = self
            .outages
            .endpoints()
            .into_iter()
            .map(|(kind, name, up, since)| super::status::Endpoint {
                kind,
                name,
                up,
                since,
            })
            .collect();
        self.shared
            .status
            .record(full, cycle.ok_or(()), kind, took, endpoints, now);
        if config.notifications.is_none() {
            return;
        }
        let mut notices = cycle
            .map(|c| super::notify::derive::from_cycle(c, &config.repositories, now))
            .unwrap_or_default();
        notices.extend(outages);
        self.shared.notices.send(self.shared, notices);
    }

    /// Follows what a cycle or re-check pushed, when verification is configured.
    fn verify(&self, result: &Result<Cycle, EngineError>, policies: &policy::Loaded) {
        if let (Some(verifier), Ok(cycle)) = (&self.verifier, result) {
            verifier.after_cycle(cycle, policies);
        }
    }

    /// One cycle: the Applications of the cluster read again, then the engine.
    /// One cycle, of everything or (`only_images`) of what uses those image repositories.
    async fn cycle(
        &self,
        policies: &policy::Loaded,
        only_images: Option<&BTreeSet<Repository>>,
        cancel: CancellationToken,
    ) -> Result<Cycle, EngineError> {
        let loaded: Option<Loaded> = match &self.cluster {
            Some((cluster, from)) => {
                Some(cluster::load_watched(cluster.clone(), from, self.updaters.as_ref()).await?)
            }
            None => None,
        };
        let input = self.session.input(policies, None, loaded.as_ref());
        let mut context = self.session.context(&(), cancel);
        context.freeze = Some(&self.shared.freeze.switch);
        let options = engine::Options {
            dry_run: false,
            only_images,
            diff: false,
            rendered: false,
            tools: None,
        };
        engine::run(&input, &context, options).await
    }
}

/// What [`Daemon::report`] reports on.
#[derive(Debug, Clone, Copy)]
enum Ran<'a> {
    /// A full cycle, every interval.
    Cycle,
    /// A re-check of what uses the image repositories notifications named (these).
    Recheck(&'a [String]),
}

/// One line per cycle or re-check, and one per problem it met.
fn log_outcome(
    ran: Ran<'_>,
    result: &Result<Cycle, EngineError>,
    kind: CycleResult,
    took: Duration,
) {
    let took = humantime::format_duration(round(took)).to_string();
    let (what, repositories) = match ran {
        Ran::Cycle => ("cycle", None),
        Ran::Recheck(names) => ("re-check", Some(names)),
    };
    match result {
        Err(e) => tracing::error!(
            repositories = repositories.map(tracing::field::debug),
            error = %crate::error_chain::Chain(e),
            %took,
            "{what} failed"
        ),
        Ok(cycle) => {
            let plan = &cycle.plan;
            // One line per update, with what `tagpilot_updates_total` counts without: the
            // policy (an Application's image among thousands), the image and the repository.
            for c in &plan.changes {
                tracing::info!(
                    repository = c.repository.as_deref(),
                    policy = %c.policy,
                    image = %c.image,
                    file = %c.file,
                    line = c.line,
                    from = %c.from,
                    to = %c.to,
                    result = super::metrics::change_result(cycle, c),
                    "update"
                );
            }
            for h in &plan.holds {
                tracing::info!(
                    repository = h.repository.as_deref(),
                    policy = %h.policy,
                    file = %h.file,
                    line = h.line,
                    current = %h.current,
                    "update held: {}",
                    h.reason
                );
            }
            for p in &plan.problems {
                tracing::warn!(
                    repository = p.repository.as_deref(),
                    policy = p.policy.as_deref(),
                    image = p.image.as_deref(),
                    file = p.file.as_deref(),
                    line = p.line,
                    "{}",
                    p.reason
                );
            }
            for f in &plan.findings {
                tracing::warn!(
                    finding = f.kind.label(),
                    severity = ?f.severity,
                    repository = f.repository.as_deref(),
                    application = f.application.as_deref(),
                    policy = f.policy.as_deref(),
                    image = %f.image,
                    searched = %f.searched,
                    "{}",
                    f.message
                );
            }
            // As `tagpilot plan` lists them: each skipped file, with the reason.
            for s in &plan.skipped {
                tracing::info!(
                    repository = s.repository.as_deref(),
                    file = %s.file,
                    reason = s.kind.label(),
                    "file skipped: {}",
                    s.reason
                );
            }
            for r in &cycle.repositories {
                if let Some(error) = &r.error {
                    tracing::warn!(repository = %r.repository, "{error}");
                }
            }
            if kind == CycleResult::RegistriesUnreachable {
                tracing::error!(
                    repositories = repositories.map(tracing::field::debug),
                    "no registry answered this {what}; nothing was decided on a tag list"
                );
            }
            tracing::info!(
                repositories = repositories.map(tracing::field::debug),
                result = ?kind,
                changes = plan.changes.len(),
                holds = plan.holds.len(),
                problems = plan.problems.len(),
                findings = plan.findings.len(),
                skipped = plan.skipped.len(),
                up_to_date = plan.up_to_date,
                %took,
                "{what} done"
            );
        }
    }
}

/// Durations in logs to the millisecond; nanoseconds are noise to a reader.
fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}
