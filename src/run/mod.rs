//! `tagpilot run`: the engine's cycle ([`crate::engine::run`], the same call as `tagpilot apply`)
//! on an interval, with what a long-running process needs around it.
//!
//! ```text
//!            ┌── pace: interval ± jitter; backoff with jitter after a failed cycle
//! signals ─▶ loop ── engine::run(config, policies reloaded, registry client, clone cache)
//!            │   │        └─▶ metrics (cycles, updates, errors), health (ready after one cycle)
//!            │   └─ between cycles: re-checks of only the repositories notifications named
//!  --listen ─┴── /livez  /readyz  /metrics  POST /webhooks/<kind>  POST /webhook?type=
//!                                                  └─▶ recheck: coalesced, rate-limited hints
//!
//!  --leader-elect: lease ── Leading ─▶ cycles and re-checks run; Following ─▶ none starts, one
//!                           in flight starts no further target, webhooks get 503
//! ```
//!
//! What lives across cycles is built once here: the [`Session`] (the registry client with its
//! caches, the clone cache, the cluster connection), the cancellation token and, with
//! `--state-dir`, the state store ([`crate::state`]),
//! which outlives the process (metadata by digest, first-seen times, last proposals, webhook
//! deliveries) and is flushed to disk after each cycle. Policies are read again every cycle, so a changed or added
//! policy file takes effect without a restart, and a broken one is reported without stopping the
//! others. The local directory is not a target: `tagpilot run` writes to configured repositories
//! and Applications, never to the directory its policies are read from.

pub mod health;
pub mod http;
pub mod lease;
pub mod lock;
pub mod memory;
pub mod metrics;
pub mod pace;
pub mod recheck;
pub mod signal;
pub mod webhook;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::argocd::FromCluster;
use crate::argocd::cluster::{self, Cluster, Loaded};
use crate::config::Config;
use crate::engine::{self, Cycle, EngineError};
use crate::image::Repository;
use crate::policy;
use crate::session::{self, Session, SessionError};
use crate::state::{State, StateError};

use self::http::Shared;
use self::lease::{Elector, LeaderElection, LeaseError, Role};
use self::lock::{LockError, StateLock};
use self::metrics::CycleResult;
use self::pace::Pacer;
use self::recheck::Rechecks;
use self::webhook::{Secrets, WebhookError};

/// How `tagpilot run` was asked to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The time between two cycles (before jitter).
    pub interval: Duration,
    /// Where `/livez`, `/readyz` and `/metrics` are served.
    pub listen: SocketAddr,
    /// Where state is kept; one process per directory.
    pub state_dir: Option<PathBuf>,
    /// Where clones are kept (default: the user's cache directory).
    pub cache_dir: Option<PathBuf>,
    /// `--leader-elect`: only the replica holding the Lease writes.
    pub leader_election: Option<LeaderElection>,
    /// `--image-updater-metrics`: `/metrics` also exports Argo CD Image Updater's series.
    pub image_updater_metrics: bool,
}

/// How the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// A signal asked it to stop, and the write in flight finished.
    Drained,
    /// A second signal came before that.
    Aborted,
}

/// Why `tagpilot run` could not start. Once running, failed cycles are logged, counted and
/// retried, never returned.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    StateDir(#[from] LockError),
    #[error(transparent)]
    State(#[from] StateError),
    #[error("listening on {addr}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("handling SIGTERM and SIGINT")]
    Signals(#[source] std::io::Error),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("no cache directory for clones of configured repositories: pass --cache-dir")]
    NoCacheDir,
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
    #[error(transparent)]
    LeaderElection(#[from] LeaseError),
}

/// Runs cycles until a signal stops them; serves health and metrics on `settings.listen`
/// meanwhile.
pub async fn serve(config: Config, settings: Settings) -> Result<Stopped, RunError> {
    // The lock first: a second process must fail on it, not on a port already taken.
    let lock = settings
        .state_dir
        .as_deref()
        .map(StateLock::acquire)
        .transpose()?;
    if let Some(lock) = &lock {
        tracing::info!(dir = %lock.dir().display(), "state directory locked");
    }
    // Behind the lock, so a second process is refused by the lock's clear message first; redb
    // holds its own lock on the file as well.
    let state = lock
        .as_ref()
        .map(|l| State::open(l.dir()).map(Arc::new))
        .transpose()?;
    let secrets = config
        .webhooks
        .as_ref()
        .map(|w| Secrets::load(w, config.base_dir()))
        .transpose()?
        .unwrap_or_default();
    let pace = config
        .webhooks
        .as_ref()
        .map(|w| w.recheck)
        .unwrap_or_default();
    let drain = CancellationToken::new();
    let abort = signal::watch(drain.clone()).map_err(RunError::Signals)?;

    let shared = Arc::new(Shared {
        secrets,
        rechecks: Rechecks::new(pace),
        state: state.clone(),
        metrics: metrics::Metrics::with_image_updater(settings.image_updater_metrics),
        ..Shared::default()
    });
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: settings.listen,
            source,
        })?;
    tracing::info!(addr = %settings.listen, "serving /livez, /readyz and /metrics");
    let stop_serving = CancellationToken::new();
    let server = tokio::spawn(
        axum::serve(listener, http::router(shared.clone()))
            .with_graceful_shutdown(stop_serving.clone().cancelled_owned())
            .into_future(),
    );
    // Out of the Service as soon as shutdown starts, even in the middle of a cycle.
    tokio::spawn({
        let drain = drain.clone();
        let shared = shared.clone();
        async move {
            drain.cancelled().await;
            shared.health.draining();
        }
    });

    // The pull secrets Applications name reach the registry client like any other
    // credentials; they are read once, at start.
    let mut session = Session::open(
        config,
        session::Options {
            cache_dir: settings.cache_dir,
            read_cluster: true,
            state,
        },
    )
    .await?;
    if session.cache.is_none() {
        return Err(RunError::NoCacheDir);
    }
    // Every cycle reads the Applications again; the first reading gave its credentials and
    // need not be kept for the life of the process.
    session.applications = None;
    let from_cluster = session
        .config
        .applications
        .as_ref()
        .and_then(|a| a.from_cluster.clone());
    let cluster = session.cluster.clone().zip(from_cluster);

    let elector = match settings.leader_election {
        Some(election) => Some(Elector::start(election).await?),
        None => {
            shared.metrics.set_leader(true);
            None
        }
    };
    if let Some(elector) = &elector {
        tokio::spawn(follow_role(elector.roles(), shared.clone(), drain.clone()));
    }

    // The watches run for as long as the loop does.
    let updaters = cluster.as_ref().map(|(c, from)| {
        let (watch, drive) = c.watch_image_updaters(&from.namespaces);
        (watch, tokio::spawn(drive))
    });
    let daemon = Daemon {
        session: &session,
        updaters: updaters.as_ref().map(|(w, _)| w.clone()),
        cluster,
        shared: &shared,
        roles: elector.as_ref().map(Elector::roles),
    };
    let stopped = daemon.cycles(settings.interval, drain, abort).await;
    if let Some((_, watching)) = updaters {
        watching.abort();
    }
    // The last write has finished: hand the Lease over now rather than at its expiry. After
    // an abort nothing waits, not even for that.
    if let Some(elector) = elector
        && stopped == Stopped::Drained
    {
        elector.stop().await;
    }
    shared.health.set_live(false);
    stop_serving.cancel();
    // The server only stops on `stop_serving`; its own failure is not worth an error at exit.
    let _ = server.await;
    drop(lock);
    Ok(stopped)
}

/// Mirrors the election in health (ready once joined, webhooks refused while following) and
/// in `tagpilot_leader`. Once shutdown has started, readiness is not given back.
async fn follow_role(
    mut roles: tokio::sync::watch::Receiver<Role>,
    shared: Arc<Shared>,
    drain: CancellationToken,
) {
    let mut joined = false;
    loop {
        let role = *roles.borrow_and_update();
        if !joined && role != Role::Joining && !drain.is_cancelled() {
            joined = true;
            shared.health.joined_election();
        }
        shared.health.set_following(role != Role::Leading);
        shared.metrics.set_leader(role == Role::Leading);
        if roles.changed().await.is_err() {
            return;
        }
    }
}

/// What every cycle uses.
struct Daemon<'a> {
    /// The configuration, the registry client, the clone cache and the state store.
    session: &'a Session,
    cluster: Option<(Cluster, FromCluster)>,
    /// With `applications.fromCluster`, the `ImageUpdater` resources, watched rather than
    /// listed every cycle.
    updaters: Option<cluster::UpdaterWatch>,
    shared: &'a Shared,
    /// With `--leader-elect`, the election's verdicts: cycles run only while leading.
    roles: Option<tokio::sync::watch::Receiver<Role>>,
}

/// Cancels `cancel` when this replica stops leading (never without `--leader-elect`), then
/// waits forever: raced against a cycle, it stops further targets and lets the cycle finish.
async fn cancel_when_lease_lost(
    roles: Option<tokio::sync::watch::Receiver<Role>>,
    cancel: CancellationToken,
) {
    match roles {
        Some(mut roles) => lease::not_leading(&mut roles).await,
        None => std::future::pending().await,
    }
    tracing::warn!("lost the Lease: no further target starts");
    cancel.cancel();
    std::future::pending::<()>().await;
}

impl Daemon<'_> {
    async fn cycles(
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
            let started = Instant::now();
            let policies = policy::load_all(&self.session.config);
            // A store that went down (a full disk) is opened again as soon as it can be. The
            // metric waits for the flush at the end: a full disk may let the file open and
            // still refuse the writes.
            if let Some(state) = &self.shared.state {
                state.recover();
            }
            self.session.registry.start_cycle();
            // Every repository is read now: the hints so far are answered by this cycle.
            self.shared.rechecks.full_cycle_starts();
            // Losing the lease cancels like a signal does: no further target starts, the
            // write in flight finishes.
            let cancel = drain.child_token();
            let lost = cancel_when_lease_lost(roles.clone(), cancel.clone());
            let cycle = Box::pin(self.cycle(&policies, None, cancel.clone()));
            let result = tokio::select! {
                r = cycle => r,
                () = lost => unreachable!("waits forever after cancelling"),
                () = abort.cancelled() => return Stopped::Aborted,
            };
            let took = started.elapsed();
            let answered = self
                .shared
                .metrics
                .record_registry(&self.session.registry.responses());
            let kind = CycleResult::of(&result).given(answered);
            self.shared
                .metrics
                .record_cycle_as(kind, &result, &policies.errors, took);
            self.shared
                .metrics
                .record_metadata_hits(self.session.registry.metadata_cache_hits());
            if let Some(state) = &self.shared.state {
                state.flush();
                self.shared
                    .metrics
                    .set_state_up(state.path(), state.is_up());
            }
            log_cycle(&result, kind, took);
            // Ready after the first cycle that ran and heard from a registry: a replica that
            // reaches none (a wrong proxy, a network policy) keeps a rollout from replacing one
            // that does. Once ready, it stays so: registries going away is not this replica's
            // fault, and taking it out of the Service would only cost it the webhooks that
            // say they are back. `tagpilot_registry_up` is what to alert on.
            if matches!(kind, CycleResult::Ok | CycleResult::Partial) {
                self.shared.health.cycle_completed();
            }
            drop((result, policies));
            memory::release_freed();
            // A target that failed is retried next interval; backing off for it would delay
            // every other target too. Only a cycle that could not run at all backs off.
            let succeeded = kind != CycleResult::Error;
            let wait = pacer.next_wait(succeeded);
            tracing::debug!(wait = %humantime::format_duration(round(wait)), "next cycle");
            // Until the next cycle is due, re-check what notifications name, as they come. The
            // next cycle's time does not move for them, so they never starve it. A backoff is
            // never cut short: a flood of notifications must not become a flood of requests to
            // a failing registry; their hints wait for the next cycle.
            let next_cycle = tokio::time::Instant::now() + wait;
            loop {
                let batch = async {
                    if succeeded {
                        self.shared.rechecks.next_batch().await
                    } else {
                        std::future::pending().await
                    }
                };
                // Losing the lease ends the wait too: the loop then waits to lead again.
                let lost = async {
                    match roles.clone() {
                        Some(mut roles) => lease::not_leading(&mut roles).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    () = tokio::time::sleep_until(next_cycle) => break,
                    () = drain.cancelled() => break,
                    () = lost => break,
                    images = batch => {
                        let cancel = drain.child_token();
                        let lost = cancel_when_lease_lost(roles.clone(), cancel.clone());
                        let recheck = Box::pin(self.recheck(&images, cancel));
                        tokio::select! {
                            () = recheck => {}
                            () = lost => unreachable!("waits forever after cancelling"),
                            () = abort.cancelled() => return Stopped::Aborted,
                        }
                    }
                }
            }
        }
        Stopped::Drained
    }

    /// Re-checks the policies and Applications that use `images`, after notifications: their
    /// tag lists are read fresh, every other repository is left alone.
    async fn recheck(&self, images: &BTreeSet<Repository>, drain: CancellationToken) {
        let started = Instant::now();
        let names: Vec<String> = images.iter().map(ToString::to_string).collect();
        let policies = policy::load_all(&self.session.config);
        // Applications are only known once read; without them, a repository no policy uses
        // costs nothing at all.
        if self.session.config.applications.is_none()
            && !policies.policies.iter().any(|p| images.contains(&p.image))
        {
            tracing::info!(repositories = ?names, "no policy uses the notified repositories");
            return;
        }
        self.session.registry.forget_tags(images);
        let result = self.cycle(&policies, Some(images), drain).await;
        self.shared.metrics.record_recheck(&result);
        self.shared
            .metrics
            .record_registry(&self.session.registry.responses());
        let took = humantime::format_duration(round(started.elapsed())).to_string();
        match &result {
            Err(e) => {
                tracing::error!(repositories = ?names, error = %crate::error_chain::Chain(e), %took, "re-check failed")
            }
            Ok(cycle) => tracing::info!(
                repositories = ?names,
                result = ?CycleResult::of(&result),
                changes = cycle.plan.changes.len(),
                problems = cycle.plan.problems.len(),
                %took,
                "re-check done"
            ),
        }
        drop((result, policies));
        memory::release_freed();
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
        let context = self.session.context(&(), cancel);
        let options = engine::Options {
            dry_run: false,
            only_images,
            diff: false,
        };
        engine::run(&input, &context, options).await
    }
}

/// One line per cycle, and one per problem it met.
fn log_cycle(result: &Result<Cycle, EngineError>, kind: CycleResult, took: Duration) {
    let took = humantime::format_duration(round(took)).to_string();
    match result {
        Err(e) => tracing::error!(error = %crate::error_chain::Chain(e), %took, "cycle failed"),
        Ok(cycle) => {
            let plan = &cycle.plan;
            for p in &plan.problems {
                tracing::warn!(
                    repository = p.repository.as_deref(),
                    policy = p.policy.as_deref(),
                    image = p.image.as_deref(),
                    file = p.file.as_deref(),
                    line = p.line,
                    "{}",
                    p.message
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
            for r in &plan.repositories {
                if let Some(error) = &r.error {
                    tracing::warn!(repository = %r.repository, "{error}");
                }
            }
            if kind == CycleResult::RegistriesUnreachable {
                tracing::error!(
                    "no registry answered this cycle; nothing was decided on a tag list"
                );
            }
            tracing::info!(
                result = ?kind,
                changes = plan.changes.len(),
                holds = plan.holds.len(),
                problems = plan.problems.len(),
                findings = plan.findings.len(),
                skipped = plan.skipped.len(),
                up_to_date = plan.up_to_date,
                %took,
                "cycle done"
            );
        }
    }
}

/// Durations in logs to the millisecond; nanoseconds are noise to a reader.
fn round(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}
