//! `tagpilot run`: the engine's cycle ([`crate::engine::run`], the same call as `tagpilot apply`)
//! on an interval, with what a long-running process needs around it.
//!
//! ```text
//!            ┌── pace: interval ± jitter; backoff with jitter after a failed cycle
//! signals ─▶ loop ── engine::run(config, policies reloaded, registry client, clone cache)
//!            │            └─▶ metrics (cycles, updates, errors), health (ready after one cycle)
//!  --listen ─┴── /livez  /readyz  /metrics  POST /webhooks/distribution (a cycle now)
//! ```
//!
//! What lives across cycles is built once here: the registry client with its caches, the clone
//! cache, the cancellation token and, with `--state-dir`, the state store ([`crate::state`]),
//! which outlives the process (metadata by digest, first-seen times, last proposals, webhook
//! deliveries) and is flushed to disk after each cycle. Policies are read again every cycle, so a changed or added
//! policy file takes effect without a restart, and a broken one is reported without stopping the
//! others. The local directory is not a target: `tagpilot run` writes to configured repositories
//! and Applications, never to the directory its policies are read from.

pub mod health;
pub mod http;
pub mod lock;
pub mod metrics;
pub mod pace;
pub mod signal;
pub mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::argocd::cluster::{self, Cluster, Loaded};
use crate::argocd::{ArgoError, FromCluster};
use crate::config::Config;
use crate::engine::{self, Cycle, EngineError};
use crate::git::RepoCache;
use crate::policy;
use crate::registry::{ClientOptions, RegistryClient, RegistryError};
use crate::state::{State, StateError};

use self::http::Shared;
use self::lock::{LockError, StateLock};
use self::metrics::CycleResult;
use self::pace::Pacer;
use self::webhook::{Secret, WebhookError};

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
    #[error("listening on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("handling SIGTERM and SIGINT: {0}")]
    Signals(#[source] std::io::Error),
    #[error("setting up registry access: {0}")]
    Registry(#[from] RegistryError),
    #[error("reading Applications from the cluster: {0}")]
    Cluster(#[from] ArgoError),
    #[error("no cache directory for clones of configured repositories: pass --cache-dir")]
    NoCacheDir,
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
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
    let webhook_secret = config
        .webhooks
        .as_ref()
        .map(|w| Secret::load(w, config.base_dir()))
        .transpose()?;
    let drain = CancellationToken::new();
    let abort = signal::watch(drain.clone()).map_err(RunError::Signals)?;

    let shared = Arc::new(Shared {
        webhook_secret,
        state: state.clone(),
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

    let from_cluster = config
        .applications
        .as_ref()
        .and_then(|a| a.from_cluster.clone());
    let cluster = match &from_cluster {
        Some(from) => {
            let cluster = Cluster::connect().await.map_err(ArgoError::from)?;
            // The pull secrets Applications name reach the registry client like any other
            // credentials; they are read once, at start.
            let first = cluster::load(cluster.clone(), from).await?;
            Some((cluster, from.clone(), first.registry_credentials))
        }
        None => None,
    };
    let mut client_options = ClientOptions::from_config(&config);
    if let Some((_, _, credentials)) = &cluster {
        client_options.credentials = credentials.clone();
    }
    let mut registry = RegistryClient::new(client_options)?;
    if let Some(state) = &state {
        registry = registry.with_store(state.clone());
    }
    let cache = engine::repo_cache(settings.cache_dir.as_deref()).ok_or(RunError::NoCacheDir)?;

    let daemon = Daemon {
        config: &config,
        registry: &registry,
        cache: &cache,
        cluster: cluster.map(|(c, from, _)| (c, from)),
        shared: &shared,
    };
    let stopped = daemon.cycles(settings.interval, drain, abort).await;
    shared.health.set_live(false);
    stop_serving.cancel();
    // The server only stops on `stop_serving`; its own failure is not worth an error at exit.
    let _ = server.await;
    drop(lock);
    Ok(stopped)
}

/// What every cycle uses.
struct Daemon<'a> {
    config: &'a Config,
    registry: &'a RegistryClient,
    cache: &'a RepoCache,
    cluster: Option<(Cluster, FromCluster)>,
    shared: &'a Shared,
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
        while !drain.is_cancelled() {
            let started = Instant::now();
            let policies = policy::load_all(self.config);
            self.registry.start_cycle();
            let cycle = Box::pin(self.cycle(&policies, drain.clone()));
            let result = tokio::select! {
                r = cycle => r,
                () = abort.cancelled() => return Stopped::Aborted,
            };
            let took = started.elapsed();
            self.shared
                .metrics
                .record_cycle(&result, &policies.errors, took);
            self.shared
                .metrics
                .record_registry(&self.registry.responses());
            self.shared
                .metrics
                .record_metadata_hits(self.registry.metadata_cache_hits());
            if let Some(state) = &self.shared.state {
                state.flush();
            }
            let kind = CycleResult::of(&result);
            log_cycle(&result, kind, took);
            if matches!(kind, CycleResult::Ok | CycleResult::Partial) {
                self.shared.health.cycle_completed();
            }
            // A target that failed is retried next interval; backing off for it would delay
            // every other target too. Only a cycle that could not run at all backs off.
            let succeeded = kind != CycleResult::Error;
            let wait = pacer.next_wait(succeeded);
            tracing::debug!(wait = %humantime::format_duration(round(wait)), "next cycle");
            // A webhook starts the next cycle early, but never cuts a backoff short: a flood of
            // notifications must not turn into a flood of requests to a failing registry.
            let webhook = async {
                if succeeded {
                    self.shared.trigger.notified().await;
                } else {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = webhook => tracing::debug!("cycle asked for by a webhook"),
                () = drain.cancelled() => {}
            }
        }
        Stopped::Drained
    }

    /// One cycle: the Applications of the cluster read again, then the engine.
    async fn cycle(
        &self,
        policies: &policy::Loaded,
        cancel: CancellationToken,
    ) -> Result<Cycle, EngineError> {
        let loaded: Option<Loaded> = match &self.cluster {
            Some((cluster, from)) => Some(cluster::load(cluster.clone(), from).await?),
            None => None,
        };
        let input = engine::Input {
            config: self.config,
            policies: &policies.policies,
            broken_policies: &policies.errors,
            local: None,
            cluster: loaded.as_ref(),
        };
        let context = engine::Context {
            registry: self.registry,
            cache: Some(self.cache),
            progress: &(),
            cancel,
            state: self.shared.state.as_deref(),
        };
        engine::run(&input, &context, engine::Options { dry_run: false }).await
    }
}

/// One line per cycle, and one per problem it met.
fn log_cycle(result: &Result<Cycle, EngineError>, kind: CycleResult, took: Duration) {
    let took = humantime::format_duration(round(took)).to_string();
    match result {
        Err(e) => tracing::error!(error = %e, %took, "cycle failed"),
        Ok(cycle) => {
            let plan = &cycle.plan;
            for p in &plan.problems {
                tracing::warn!(
                    repository = p.repository.as_deref(),
                    policy = p.policy.as_deref(),
                    image = p.image.as_deref(),
                    "{}",
                    p.message
                );
            }
            for r in &plan.repositories {
                if let Some(error) = &r.error {
                    tracing::warn!(repository = %r.repository, "{error}");
                }
            }
            tracing::info!(
                result = ?kind,
                changes = plan.changes.len(),
                holds = plan.holds.len(),
                problems = plan.problems.len(),
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
