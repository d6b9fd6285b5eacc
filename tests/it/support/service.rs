//! `tagpilot run` in-process: [`tagpilot::run::serve`] on a listener bound to 127.0.0.1:0,
//! stopped through its [`Shutdown`], with time on a [`ManualClock`] the test moves and logs
//! captured per test.
//!
//! The runtime runs on real time: the registries and git servers the service talks to are real
//! processes, and tokio's paused time would jump ahead while it waits on them, firing every
//! HTTP timeout at once. The loop's own schedule (the interval, re-check pacing) is on the
//! manual clock instead, so a test says when "an interval later" is, and when a re-check's
//! debounce has passed. Waits are on the events `serve` publishes ([`Progress`]: cycles and
//! re-checks finished, notifications answered, verification's steps, liveness, readiness): a
//! condition (a status, a metric, a commit) is looked at again each time the service has
//! finished something, never on a timer; each wait is bounded by [`super::PATIENCE`] so a
//! broken build fails instead of hanging. What happens in another process in the middle of a
//! cycle (a git hook, a registry taking a connection) is told by that process
//! ([`Signal`]), not polled.

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tagpilot::run::{Events, Progress, RunError, Settings, Shutdown, Stopped};

/// The service's time: the library's manual clock, reading the time of day at the start in
/// whole seconds (as commits are dated), so a test knows what a promotion is decided and
/// measured at. It moves only when the test says so.
pub use tagpilot::clock::ManualClock;

/// A manual clock for a service, reading the time of day now.
pub fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::starting_now())
}

/// Waits (bounded) until something sleeps on `clock`: the loop has finished its cycle and
/// waits for the next one, so moving the clock now moves that wait.
pub async fn parked(clock: &ManualClock) {
    tokio::time::timeout(super::PATIENCE, clock.parked())
        .await
        .expect("the loop never waited for its next cycle");
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
    super::listen_to_every_callsite();
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
    /// How many answered notifications the clock has been moved past the re-check pace of
    /// ([`Service::after_notifications`]).
    paced: AtomicU64,
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
        Service::start_on_clock(listener, dir, settings, logs, manual_clock())
    }

    /// [`Service::start_on`], keeping time by `clock` (which the test may share with doubles
    /// that keep time too).
    pub fn start_on_clock(
        listener: tokio::net::TcpListener,
        dir: &Path,
        settings: Settings,
        logs: &Logs,
        clock: Arc<ManualClock>,
    ) -> Service {
        let base = format!("http://{}", listener.local_addr().unwrap());
        let interval = settings.interval;
        let config = tagpilot::session::load_config(Some(&dir.join("tagpilot.yaml"))).unwrap();
        let shutdown = Shutdown::new();
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
            paced: AtomicU64::new(0),
            task: Some(task),
        }
    }

    /// Once the loop waits for its next cycle, moves the clock past it (the wait it decided:
    /// interval and jitter, or a backoff): one more cycle starts. Returns that cycle's number
    /// (see [`Service::cycle_done`]).
    pub async fn next_cycle(&self) -> u64 {
        parked(&self.clock).await;
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
    pub async fn after_events<F, Fut>(&self, what: &str, check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        self.watch(what, None, check).await;
    }

    /// [`Service::after_events`], moving the clock on by `pace` whenever a notification has
    /// been answered that it was not yet moved for: the re-check the notification asks for is
    /// due then. `pace`: the debounce, or the re-check interval a repository may have to wait
    /// out, whichever is longer (the interval between cycles is longer still).
    pub async fn after_notifications<F, Fut>(&self, what: &str, pace: Duration, check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        self.watch(what, Some(pace), check).await;
    }

    async fn watch<F, Fut>(&self, what: &str, pace: Option<Duration>, mut check: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let mut progress = self.events.subscribe();
        let checked = async {
            let _ = progress.wait_for(|p| p.cycles > 0 || p.stopped).await;
            loop {
                progress.mark_unchanged();
                let answered = progress.borrow().notifications;
                if let Some(pace) = pace
                    && self.paced.swap(answered, Ordering::SeqCst) < answered
                {
                    self.clock.advance(pace);
                }
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

/// Polls `check` until it says true, for at most [`super::PATIENCE`], then fails naming `what`
/// with the log. Only for what nothing tells: a write in the middle of a cycle that does not
/// end, to a repository over file:// (whose pushes run no hooks that could say so).
pub async fn eventually<F, Fut>(what: &str, logs: &Logs, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + super::PATIENCE;
    while !check().await {
        assert!(
            std::time::Instant::now() < deadline,
            "not within {:?}: {what}\n{}",
            super::PATIENCE,
            logs.text()
        );
        // A poll, not a timing assumption: the condition decides, the bound only fails it.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Something another process tells the test once (a git hook started, a registry took a
/// connection): a named pipe that process writes a line to, read here without polling. Opened
/// for reading and writing, so that it never reads the end of the file while no one has written
/// yet, and a writer never blocks.
pub struct Signal {
    path: std::path::PathBuf,
    pipe: tokio::net::unix::pipe::Receiver,
}

impl Signal {
    /// A new pipe at `path`.
    pub fn at(path: &Path) -> Signal {
        let made = std::process::Command::new("mkfifo")
            .arg(path)
            .status()
            .expect("run mkfifo");
        assert!(made.success(), "mkfifo {}", path.display());
        let pipe = tokio::net::unix::pipe::OpenOptions::new()
            .read_write(true)
            .open_receiver(path)
            .unwrap();
        Signal {
            path: path.to_path_buf(),
            pipe,
        }
    }

    /// Where a shell writes to it: `echo > '<path>'`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits (bounded by [`super::PATIENCE`]) for a line; fails naming `what`, with the log.
    pub async fn received(&mut self, what: &str, logs: &Logs) {
        use tokio::io::AsyncReadExt as _;
        let mut byte = [0u8; 1];
        match tokio::time::timeout(super::PATIENCE, self.pipe.read(&mut byte)).await {
            Ok(Ok(1)) => {}
            other => panic!(
                "not within {:?}: {what} ({other:?})\n{}",
                super::PATIENCE,
                logs.text()
            ),
        }
    }
}
