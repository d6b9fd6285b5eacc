//! `tagpilot run`: the engine's cycle ([`crate::engine::run`], the same call as `tagpilot apply`)
//! on an interval, with what a long-running process needs around it.
//!
//! ```text
//!             ┌── pace: interval ± jitter (on the clock); backoff after a failed cycle
//! shutdown ─▶ loop ── engine::run(config, policies reloaded, registry client, clone cache)
//!             │   │        └─▶ metrics (cycles, updates, errors), health (ready after one cycle)
//!             │   └─ between cycles: re-checks of only the repositories notifications named
//!  listener ──┴── /livez  /readyz  /metrics  POST /webhooks/<kind>  POST /webhook?type=
//!             │                                     └─▶ recheck: coalesced, rate-limited hints
//!             └── /ui  /ui/status.json: the status page, from what the loop keeps (status/)
//!  each cycle and verdict ─▶ notify::Outbox ─▶ a task per sink: coalesce, retry, told once
//!  write.dashboard: before each full cycle, holds ticked on the issue released; after it, the
//!  issue rewritten from the status page's data (dashboard/)
//!
//!  --leader-elect: lease ── Leading ─▶ cycles and re-checks run; Following ─▶ none starts, one
//!                           in flight starts no further target, webhooks get 503
//! ```
//!
//! The listener, the shutdown, the clock and the [`Events`] it publishes its progress on
//! (cycles and re-checks finished, liveness, readiness) are [`serve`]'s parameters, so a test
//! runs the service in-process, sets its time and waits on those events; [`main`] is the
//! binary's wiring of them (`--listen`, signals, the system's clock). The clock
//! ([`crate::clock`]) is the service's one time source: the loop's schedule, the lease,
//! verification timeouts, the state store's stamps, metrics' timestamps and, through the
//! session, the registry client and every cycle read it. What lives across cycles is built once here: the [`Session`] (the registry client with its
//! caches, the clone cache, the cluster connection) and, with
//! `--state-dir`, the state store ([`crate::state`]),
//! which outlives the process (metadata by digest, first-seen times, last proposals, webhook
//! deliveries) and is flushed to disk after each cycle. Policies are read again every cycle, so a changed or added
//! policy file takes effect without a restart, and a broken one is reported without stopping the
//! others. The local directory is not a target: `tagpilot run` writes to configured repositories
//! and Applications, never to the directory its policies are read from.

mod cycles;
pub mod dashboard;
pub mod events;
pub mod freeze;
pub mod health;
mod holds;
pub mod http;
pub mod lease;
pub mod lock;
pub mod memory;
pub mod metrics;
pub mod notify;
pub mod pace;
pub mod recheck;
pub mod signal;
pub mod status;
mod unserved;
pub mod verify;
pub mod webhook;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::session::{self, Session, SessionError};
use crate::state::{State, StateError};

use self::cycles::Daemon;
pub use self::events::{Events, Notices, Progress, Verifications};
use self::http::Shared;
use self::lease::{Elector, LeaderElection, LeaseError, Role};
use self::lock::{LockError, StateLock};
use self::recheck::Rechecks;
pub use self::signal::Shutdown;
use self::webhook::{Secrets, WebhookError};
use crate::clock::{Clock, SystemClock};

/// How `tagpilot run` was asked to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The time between two cycles (before jitter).
    pub interval: Duration,
    /// Where `/livez`, `/readyz` and `/metrics` are served: bound by [`main`]; [`serve`] is
    /// handed a listener instead.
    pub listen: SocketAddr,
    /// Where state is kept; one process per directory.
    pub state_dir: Option<PathBuf>,
    /// Where clones are kept (default: the user's cache directory).
    pub cache_dir: Option<PathBuf>,
    /// `--leader-elect`: only the replica holding the Lease writes.
    pub leader_election: Option<LeaderElection>,
    /// `--image-updater-metrics`: `/metrics` also exports Argo CD Image Updater's series.
    pub image_updater_metrics: bool,
    /// The cluster whose Argo CD Applications verification follows (`verify:`), and where
    /// leader election keeps its Lease; `None`: the session's (`applications.fromCluster`), else
    /// kube-rs's default (`$KUBECONFIG`, in-cluster). Its requests should give up after
    /// [`LeaderElection::request_timeout`] when it keeps the Lease.
    pub cluster: Option<crate::kubernetes::Cluster>,
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
    #[error("reading the address of the listener handed over")]
    Address(#[source] std::io::Error),
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error("no cache directory for clones of configured repositories: pass --cache-dir")]
    NoCacheDir,
    #[error(transparent)]
    Webhooks(#[from] WebhookError),
    /// `holds.releaseToken` could not be read (its message names the key).
    #[error(transparent)]
    ReleaseToken(WebhookError),
    /// `holds.freezeToken` could not be read (its message names the key).
    #[error(transparent)]
    FreezeToken(WebhookError),
    #[error(transparent)]
    LeaderElection(#[from] LeaseError),
    #[error("notifications.sinks")]
    Notifications(#[from] notify::NotifyError),
}

/// `tagpilot run` as the binary runs it: takes the state directory's lock, listens on
/// `settings.listen`, turns SIGTERM and SIGINT into the [`Shutdown`] (the first drains, the
/// second aborts) and keeps time by the system's clock; then [`serve`]s.
pub async fn main(config: Config, settings: Settings) -> Result<Stopped, RunError> {
    // The lock first: a second process must fail on it, not on a port already taken.
    let lock = lock_state_dir(settings.state_dir.as_deref())?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .map_err(|source| RunError::Listen {
            addr: settings.listen,
            source,
        })?;
    let shutdown = Shutdown::new();
    signal::watch(shutdown.clone()).map_err(RunError::Signals)?;
    let service = Service {
        listener,
        shutdown,
        clock: Arc::new(SystemClock),
        events: Events::new(),
    };
    serve_locked(config, settings, lock, service).await
}

/// Runs cycles until `shutdown` stops them; serves health, metrics and webhooks on `listener`
/// meanwhile, keeps all its time on `clock` (the interval, re-check pacing, the lease,
/// verification timeouts, the time of day each cycle decides at), and publishes on `events`
/// each cycle and re-check finished and each change of liveness or readiness.
/// `settings.listen` is not used: the caller bound the listener. Returns once the write in
/// flight has finished after a drain, or at once after an abort.
pub async fn serve(
    config: Config,
    settings: Settings,
    listener: tokio::net::TcpListener,
    shutdown: Shutdown,
    clock: Arc<dyn Clock>,
    events: Events,
) -> Result<Stopped, RunError> {
    let ended = events.clone();
    let served = async {
        let lock = lock_state_dir(settings.state_dir.as_deref())?;
        let service = Service {
            listener,
            shutdown,
            clock,
            events,
        };
        // Boxed: the service's whole state would otherwise sit inline in every caller's future.
        Box::pin(serve_locked(config, settings, lock, service)).await
    }
    .await;
    ended.stopped();
    served
}

/// What the service is handed rather than builds: where it listens, what stops it, the
/// clock it keeps time by, and where it tells its progress.
struct Service {
    listener: tokio::net::TcpListener,
    shutdown: Shutdown,
    clock: Arc<dyn Clock>,
    events: Events,
}

/// One process per state directory.
fn lock_state_dir(dir: Option<&std::path::Path>) -> Result<Option<StateLock>, RunError> {
    let lock = dir.map(StateLock::acquire).transpose()?;
    if let Some(lock) = &lock {
        tracing::info!(dir = %lock.dir().display(), "state directory locked");
    }
    Ok(lock)
}

/// The phases of a run: what the handlers share, the HTTP server, the loop, and the server
/// stopped last, so `/livez` answers until the loop has ended.
async fn serve_locked(
    config: Config,
    settings: Settings,
    lock: Option<StateLock>,
    service: Service,
) -> Result<Stopped, RunError> {
    // Behind the lock, so a second process is refused by the lock's clear message first; redb
    // holds its own lock on the file as well.
    let state = lock
        .as_ref()
        .map(|l| State::open_with_clock(l.dir(), service.clock.clone()).map(Arc::new))
        .transpose()?;
    let shared = Arc::new(shared(
        &config,
        &settings,
        state,
        service.clock.clone(),
        service.events,
    )?);
    let server = Server::start(service.listener, shared.clone(), &service.shutdown)?;
    let stopped = run_loop(config, settings, &shared, &service.shutdown, service.clock).await;
    shared.health.set_live(false);
    server.stop().await;
    drop(lock);
    stopped
}

/// What the loop and the HTTP handlers share: health, metrics, webhook secrets, the re-checks
/// waiting and the state store.
fn shared(
    config: &Config,
    settings: &Settings,
    state: Option<Arc<State>>,
    clock: Arc<dyn Clock>,
    events: Events,
) -> Result<Shared, RunError> {
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
    let release_token = config
        .holds
        .as_ref()
        .and_then(|h| h.release_token.as_ref())
        .map(|source| webhook::Secret::load(source, "holds.releaseToken", config.base_dir()))
        .transpose()
        .map_err(RunError::ReleaseToken)?;
    let freeze_token = config
        .holds
        .as_ref()
        .and_then(|h| h.freeze_token.as_ref())
        .map(|source| webhook::Secret::load(source, "holds.freezeToken", config.base_dir()))
        .transpose()
        .map_err(RunError::FreezeToken)?;
    Ok(Shared {
        secrets,
        release_token,
        freeze: freeze::Freezer {
            token: freeze_token,
            clock: Some(clock.clone()),
            ..Default::default()
        },
        rechecks: Rechecks::with_clock(pace, clock.clone()),
        state,
        metrics: metrics::Metrics::with_image_updater(settings.image_updater_metrics)
            .with_clock(clock),
        health: health::Health::observed(events.clone()),
        events,
        notices: notify::Outbox::default(),
        status: status::StatusBoard::default(),
    })
}

/// `/livez`, `/readyz`, `/metrics` and the webhooks, served until [`Server::stop`].
struct Server {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Server {
    fn start(
        listener: tokio::net::TcpListener,
        shared: Arc<Shared>,
        shutdown: &Shutdown,
    ) -> Result<Server, RunError> {
        let addr = listener.local_addr().map_err(RunError::Address)?;
        tracing::info!(%addr, "serving /livez, /readyz and /metrics");
        let stop = CancellationToken::new();
        let task = tokio::spawn(
            axum::serve(listener, http::router(shared.clone()))
                .with_graceful_shutdown(stop.clone().cancelled_owned())
                .into_future(),
        );
        // Out of the Service as soon as shutdown starts, even in the middle of a cycle.
        let drain = shutdown.draining();
        tokio::spawn(async move {
            drain.cancelled().await;
            shared.health.draining();
        });
        Ok(Server { stop, task })
    }

    async fn stop(self) {
        self.stop.cancel();
        // The server only stops on `stop`; its own failure is not worth an error at exit.
        let _ = self.task.await;
    }
}

/// Opens the session, joins the election if asked, and runs cycles until the shutdown.
async fn run_loop(
    config: Config,
    settings: Settings,
    shared: &Arc<Shared>,
    shutdown: &Shutdown,
    clock: Arc<dyn Clock>,
) -> Result<Stopped, RunError> {
    // The pull secrets Applications name reach the registry client like any other
    // credentials; they are read once, at start.
    let mut session = Session::open(
        config,
        session::Options {
            cache_dir: settings.cache_dir,
            read_cluster: true,
            state: shared.state.clone(),
            clock: Some(clock.clone()),
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
    let verifier = verify::Verifier::start(
        settings.cluster.clone().or_else(|| session.cluster.clone()),
        from_cluster.clone(),
        &session.config.repositories,
        session.cache.clone(),
        shared.clone(),
        clock.clone(),
    );
    let cluster = session.cluster.clone().zip(from_cluster);

    let elector = match settings.leader_election {
        Some(election) => Some(match settings.cluster.clone() {
            Some(cluster) => Elector::start_with_clock(cluster, election, clock.clone()).await?,
            None => Elector::start(election, clock.clone()).await?,
        }),
        None => {
            shared.metrics.set_leader(true);
            None
        }
    };
    let notifier = match &session.config.notifications {
        // Boxed: reading the secrets (a Kubernetes Secret) is a large future, and `serve`'s
        // own must stay small for the callers that hold it.
        Some(notifications) => Some(
            Box::pin(notify::Notifier::start(
                notifications,
                session.config.base_dir(),
                settings.cluster.as_ref().or(session.cluster.as_ref()),
                shared.clone(),
                clock.clone(),
                elector.as_ref().map(Elector::roles),
            ))
            .await?,
        ),
        None => None,
    };
    if let Some(elector) = &elector {
        tokio::spawn(follow_role(
            elector.roles(),
            shared.clone(),
            shutdown.draining(),
        ));
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
        shared,
        roles: elector.as_ref().map(Elector::roles),
        clock,
        verifier: verifier.clone(),
        not_served: unserved::NotServed::default(),
        outages: notify::derive::Outages::default(),
    };
    let stopped = daemon
        .cycles(settings.interval, shutdown.draining(), shutdown.aborting())
        .await;
    if let Some((_, watching)) = updaters {
        watching.abort();
    }
    if let Some(verifier) = &verifier {
        verifier.stop().await;
    }
    // What the sinks hold is sent before the Lease is handed over.
    if let Some(notifier) = notifier {
        notifier.stop().await;
    }
    // The last write has finished: hand the Lease over now rather than at its expiry. After
    // an abort nothing waits, not even for that.
    if let Some(elector) = elector
        && stopped == Stopped::Drained
    {
        elector.stop().await;
    }
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
