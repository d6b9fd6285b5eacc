//! `tagpilot run` in-process: [`tagpilot::run::serve`] on a listener bound to 127.0.0.1:0,
//! stopped through its [`Shutdown`], with time on a [`ManualClock`] the test moves and logs
//! captured per test.
//!
//! The runtime runs on real time: the registries and git servers the service talks to are real
//! processes, and tokio's paused time would jump ahead while it waits on them, firing every
//! HTTP timeout at once. The loop's own schedule (the interval, re-check pacing) is on the
//! manual clock instead, so a test says when "an interval later" is. Waits are on the events
//! `serve` publishes ([`Progress`]: cycles and re-checks finished, liveness, readiness): a
//! condition (a status, a metric, a commit) is looked at again each time the service has
//! finished something, never on a timer; each wait is bounded by [`super::PATIENCE`] so a
//! broken build fails instead of hanging. What no event marks (a verification's verdict, a
//! re-check's debounce on the clock, a write in the middle of a cycle) is still polled.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tagpilot::run::clock::Clock;
use tagpilot::run::{Events, Progress, RunError, Settings, Shutdown, Stopped};

/// A clock that moves only when the test says so.
#[derive(Debug)]
pub struct ManualClock {
    start: tokio::time::Instant,
    /// The time of day at `start`, in whole seconds (as commits are dated): it moves only
    /// with the clock, so a test knows what a promotion is decided and measured at.
    start_wall: jiff::Timestamp,
    moved: tokio::sync::watch::Sender<Duration>,
    /// How many sleeps on this clock are pending: the loop, between cycles, waits on one.
    sleeping: Arc<tokio::sync::watch::Sender<usize>>,
}

/// Counts one pending sleep for as long as it lives.
struct Sleeping(Arc<tokio::sync::watch::Sender<usize>>);

impl Drop for Sleeping {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

impl ManualClock {
    pub fn new() -> Arc<ManualClock> {
        Arc::new(ManualClock {
            start: tokio::time::Instant::now(),
            start_wall: jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap(),
            moved: tokio::sync::watch::Sender::new(Duration::ZERO),
            sleeping: Arc::new(tokio::sync::watch::Sender::new(0)),
        })
    }

    /// Waits (bounded) until something sleeps on this clock: the loop has finished its cycle
    /// and waits for the next one, so moving the clock now moves that wait.
    pub async fn parked(&self) {
        let mut sleeping = self.sleeping.subscribe();
        let parked = sleeping.wait_for(|n| *n > 0);
        tokio::time::timeout(super::PATIENCE, parked)
            .await
            .expect("the loop never waited for its next cycle")
            .unwrap();
    }

    /// Moves the clock `by` ahead, waking every sleep that is then due.
    pub fn advance(&self, by: Duration) {
        self.moved.send_modify(|offset| *offset += by);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> tokio::time::Instant {
        self.start + *self.moved.borrow()
    }

    fn wall(&self) -> jiff::Timestamp {
        let moved = jiff::SignedDuration::try_from(*self.moved.borrow()).unwrap();
        self.start_wall + moved
    }

    fn sleep_until(
        &self,
        deadline: tokio::time::Instant,
    ) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        let mut moved = self.moved.subscribe();
        self.sleeping.send_modify(|n| *n += 1);
        let sleeping = Sleeping(self.sleeping.clone());
        Box::pin(async move {
            let _sleeping = sleeping;
            while self.now() < deadline {
                if moved.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

/// The log lines of one test, as the binary would write them to stderr.
#[derive(Debug, Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn dispatch(&self, json: bool) -> tracing::Dispatch {
        let logs = self.clone();
        let builder = tracing_subscriber::fmt()
            .with_env_filter("info")
            .with_ansi(false)
            .with_writer(move || logs.clone());
        if json {
            tracing::Dispatch::new(builder.json().finish())
        } else {
            tracing::Dispatch::new(builder.finish())
        }
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    /// A runtime thread's logger, for as long as the thread runs.
    static LOGGING: std::cell::RefCell<Option<tracing::dispatcher::DefaultGuard>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `test` on a runtime of its own (one thread, and a `LocalSet` for [`Service`]'s task)
/// whose every thread (the test's, the blocking pool's
/// that git runs on) logs to the test's [`Logs`]: text lines, or JSON lines if `json`.
pub fn run<F, Fut>(json: bool, test: F)
where
    F: FnOnce(Logs) -> Fut,
    Fut: Future<Output = ()>,
{
    let logs = Logs::default();
    let dispatch = logs.dispatch(json);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_start({
            let dispatch = dispatch.clone();
            move || {
                let guard = tracing::dispatcher::set_default(&dispatch);
                LOGGING.with(|logging| *logging.borrow_mut() = Some(guard));
            }
        })
        .on_thread_stop(|| {
            // The guard back out of the thread's storage, dropped: the logger is reset.
            drop(LOGGING.with(|logging| logging.borrow_mut().take()));
        })
        .build()
        .unwrap();
    let _logging = tracing::dispatcher::set_default(&dispatch);
    let local = tokio::task::LocalSet::new();
    runtime.block_on(local.run_until(test(logs)));
}

/// A `tagpilot run` of the test's, serving on a port of its own.
pub struct Service {
    pub base: String,
    /// The time between cycles the service was started with.
    pub interval: Duration,
    pub shutdown: Shutdown,
    pub clock: Arc<ManualClock>,
    pub logs: Logs,
    /// What `serve` publishes as it goes.
    pub events: Events,
    task: Option<tokio::task::JoinHandle<Result<Stopped, RunError>>>,
}

/// How a test starts the service: `tagpilot.yaml` in `dir`, state in `dir/state`, clones in
/// `dir/cache`.
pub fn settings(dir: &Path, interval: Duration) -> Settings {
    Settings {
        interval,
        listen: "127.0.0.1:0".parse().unwrap(),
        state_dir: Some(dir.join("state")),
        cache_dir: Some(dir.join("cache")),
        leader_election: None,
        image_updater_metrics: false,
        cluster: None,
    }
}

impl Service {
    /// Serves `dir/tagpilot.yaml` with `interval` between cycles.
    pub async fn start(dir: &Path, interval: Duration, logs: &Logs) -> Service {
        Service::start_with(dir, settings(dir, interval), logs).await
    }

    pub async fn start_with(dir: &Path, settings: Settings, logs: &Logs) -> Service {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        Service::start_on(listener, dir, settings, logs)
    }

    /// On a listener the test bound (and may have told a registry about).
    pub fn start_on(
        listener: tokio::net::TcpListener,
        dir: &Path,
        settings: Settings,
        logs: &Logs,
    ) -> Service {
        let base = format!("http://{}", listener.local_addr().unwrap());
        let interval = settings.interval;
        let config = tagpilot::session::load_config(Some(&dir.join("tagpilot.yaml"))).unwrap();
        let shutdown = Shutdown::new();
        let clock = ManualClock::new();
        let events = Events::new();
        // A local task: `serve`'s future is not `Send` (the Argo CD credentials lookup holds a
        // `&dyn Fn` across an await), and the test's runtime has one thread anyway.
        let task = tokio::task::spawn_local(tagpilot::run::serve(
            config,
            settings,
            listener,
            shutdown.clone(),
            clock.clone(),
            events.clone(),
        ));
        Service {
            base,
            interval,
            shutdown,
            clock,
            logs: logs.clone(),
            events,
            task: Some(task),
        }
    }

    /// Once the loop waits for its next cycle, moves the clock past it (the wait it decided:
    /// interval and jitter, or a backoff): one more cycle starts. Returns that cycle's number
    /// (see [`Service::cycle_done`]).
    pub async fn next_cycle(&self) -> u64 {
        self.clock.parked().await;
        let now = self.events.now();
        self.clock.advance(now.next_cycle_in.max(self.interval * 2));
        now.cycles + 1
    }

    /// Waits until `done` holds of the service's progress, and returns that progress; fails
    /// naming `what`, with the log, after [`super::PATIENCE`] or if `serve` returned.
    pub async fn until(&self, what: &str, mut done: impl FnMut(&Progress) -> bool) -> Progress {
        let mut progress = self.events.subscribe();
        let seen = progress.wait_for(|p| done(p) || p.stopped);
        match tokio::time::timeout(super::PATIENCE, seen).await {
            Ok(Ok(p)) if !p.stopped || done(&p) => *p,
            Ok(_) => panic!("serve returned before {what}:\n{}", self.log()),
            Err(_) => panic!(
                "not within {:?}: {what} ({:?})\n{}",
                super::PATIENCE,
                self.events.now(),
                self.log()
            ),
        }
    }

    /// Waits until the service is ready, and `/readyz` says so.
    pub async fn ready(&self) {
        self.until("ready", |p| p.ready).await;
        assert_eq!(self.status("/readyz").await, Some(200), "{}", self.log());
    }

    /// Waits until the loop runs, and `/livez` says so.
    pub async fn live(&self) {
        self.until("live", |p| p.live).await;
        assert_eq!(self.status("/livez").await, Some(200), "{}", self.log());
    }

    /// Waits until cycle `n` (counted from 1) has finished: its writes, metrics and state are
    /// all done.
    pub async fn cycle_done(&self, n: u64) -> Progress {
        self.until(&format!("cycle {n} done"), |p| p.cycles >= n)
            .await
    }

    /// Until `check` holds: looked at once the first cycle has finished, then after each
    /// further cycle or re-check, or change of health (the clock is not moved: the test moves
    /// it, or nothing more is due). Bounded by [`super::PATIENCE`] in all.
    pub async fn after_events<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let mut progress = self.events.subscribe();
        let checked = async {
            let _ = progress.wait_for(|p| p.cycles > 0 || p.stopped).await;
            loop {
                progress.mark_unchanged();
                if check().await {
                    return true;
                }
                if progress.borrow().stopped || progress.changed().await.is_err() {
                    return false;
                }
            }
        };
        self.bounded(what, checked).await;
    }

    /// Until `check` holds: looked at once the first cycle has finished, then after each
    /// further cycle, which this lets run by moving the clock an interval on. Bounded by
    /// [`super::PATIENCE`] in all.
    pub async fn after_cycles<F, Fut>(&self, what: &str, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let checked = async {
            let mut next = 1;
            loop {
                let p = self
                    .until(&format!("cycle {next}"), |p| p.cycles >= next)
                    .await;
                if check().await {
                    return true;
                }
                if p.stopped {
                    return false;
                }
                next = self.next_cycle().await;
            }
        };
        self.bounded(what, checked).await;
    }

    async fn bounded(&self, what: &str, checked: impl Future<Output = bool>) {
        match tokio::time::timeout(super::PATIENCE, checked).await {
            Ok(true) => {}
            Ok(false) => panic!("serve returned before {what}:\n{}", self.log()),
            Err(_) => panic!(
                "not within {:?}: {what} ({:?})\n{}",
                super::PATIENCE,
                self.events.now(),
                self.log()
            ),
        }
    }

    pub fn log(&self) -> String {
        self.logs.text()
    }

    /// The status of `GET path`, or `None` while nothing answers.
    pub async fn status(&self, path: &str) -> Option<u16> {
        let response = reqwest::get(format!("{}{path}", self.base)).await.ok()?;
        Some(response.status().as_u16())
    }

    pub async fn text(&self, path: &str) -> String {
        reqwest::get(format!("{}{path}", self.base))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Whether `serve` has returned.
    pub fn has_stopped(&self) -> bool {
        self.task.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Drains, as a first SIGTERM does, and waits for `serve` to return: how it stopped, and
    /// the log.
    pub async fn terminate(mut self) -> (Stopped, String) {
        self.shutdown.drain("SIGTERM");
        let stopped = self.stopped().await;
        (stopped, self.log())
    }

    /// Waits (bounded) for `serve` to return, and says how it stopped.
    pub async fn stopped(&mut self) -> Stopped {
        match self.stopped_within(super::PATIENCE).await {
            Some(stopped) => stopped,
            None => panic!("serve did not return:\n{}", self.log()),
        }
    }

    /// How `serve` stopped, if it returns within `bound`.
    pub async fn stopped_within(&mut self, bound: Duration) -> Option<Stopped> {
        let task = self.task.as_mut().expect("serve still running");
        let joined = tokio::time::timeout(bound, task).await.ok()?;
        self.task = None;
        Some(
            joined
                .unwrap()
                .unwrap_or_else(|e| panic!("serve failed: {e}\n{}", self.log())),
        )
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        // A test that ends without stopping the service stops it now.
        if let Some(task) = self.task.take() {
            self.shutdown.abort("the test's end");
            task.abort();
        }
    }
}

/// Lets every task that is ready run: on a test's runtime (one thread, see [`run`]) a task
/// yielding goes behind every task already woken, so what a drain set in motion has happened
/// when this returns, short of waiting for I/O.
pub async fn settle() {
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
}

/// Polls `check` until it says true, for at most [`super::PATIENCE`], then fails naming `what` with the log.
pub async fn eventually<F, Fut>(what: &str, logs: &Logs, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(super::PATIENCE, what, logs, &mut check).await;
}

/// [`eventually`] within `bound`.
pub async fn within<F, Fut>(bound: Duration, what: &str, logs: &Logs, check: &mut F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + bound;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "not within {bound:?}: {what}\n{}",
            logs.text()
        );
        // A poll, not a timing assumption: the condition decides, the bound only fails it.
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
