//! The one source of time (leaf). Everything that asks what time it is — the loop's schedule,
//! leader election, `minAge`, steady proposals, holds, rollbacks, promotions, verification,
//! the state store's stamps, a registry's `Retry-After` — asks a [`Clock`] it was handed, and
//! nothing outside this module calls a `now()` of its own (`clock::time_comes_from_one_clock`
//! holds that). Production keeps [`SystemClock`]; tests keep a [`ManualClock`] and move it,
//! rather than wait for time to pass.
//!
//! Two readings, moved together: a monotonic [`Clock::now`] for deadlines and durations within
//! this process (the interval, re-check pacing, a verification's timeout), and the time of day
//! [`Clock::wall`] for what is compared with a time written elsewhere or kept across restarts
//! (a Lease's `renewTime`, a tag's age, a hold's date).
//!
//! Why a trait rather than tokio's paused time alone: paused time advances by itself whenever
//! the runtime is idle, and a runtime waiting on a real socket (a registry, a git server, the
//! Kubernetes API) is idle, so under `start_paused` every I/O timeout would fire at once. Pure
//! I/O deadlines (a request's timeout through `tokio::time::timeout`) therefore stay on tokio's
//! timers: they bound real waits, not tagpilot's schedule, and read no time themselves.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use tokio::time::Instant;

/// A sleep on a [`Clock`].
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// Tells the time and sleeps until a deadline.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, monotonic: for deadlines and durations within this process.
    fn now(&self) -> Instant;

    /// The time of day: for what is compared with a time another process wrote, or kept
    /// across restarts.
    fn wall(&self) -> Timestamp;

    /// Completes once [`Clock::now`] reaches `deadline` (at once if it has).
    fn sleep_until(&self, deadline: Instant) -> Sleep<'_>;

    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        self.sleep_until(self.now() + duration)
    }

    /// How long ago `since` was on this clock (zero if it is not past).
    fn since(&self, since: Instant) -> Duration {
        self.now().saturating_duration_since(since)
    }
}

/// The system's time: tokio's monotonic clock (paused in a unit test that pauses it) and the
/// system's time of day.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wall(&self) -> Timestamp {
        Timestamp::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep<'_> {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}

/// The system clock, shared: what a part that is handed no clock of its own keeps.
pub fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

/// Real elapsed time of blocking work (a tool's child process, a render), read on a thread
/// outside the runtime's schedule: it bounds or reports a real wait, which a manual clock would
/// never end, and tokio's paused time would not advance while a thread blocks.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    pub fn start() -> Stopwatch {
        Stopwatch(std::time::Instant::now())
    }

    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// A clock that stands still until a test moves it, both readings together, and tells the
/// test when someone sleeps on it (and until when), so that the test moves it exactly to the
/// next wake-up. Public because the integration tests drive the library with it.
#[derive(Debug, Clone)]
pub struct ManualClock {
    inner: Arc<ManualInner>,
}

#[derive(Debug)]
struct ManualInner {
    /// The monotonic reading at the start; the clock reads it plus `moved`.
    start: Instant,
    /// The time of day at the start.
    start_wall: Timestamp,
    moved: tokio::sync::watch::Sender<Duration>,
    /// The deadlines (as offsets from the start) of the sleepers waiting now, by sleeper.
    sleepers: tokio::sync::watch::Sender<std::collections::BTreeMap<u64, Duration>>,
    next_sleeper: std::sync::atomic::AtomicU64,
}

/// Takes a sleeper off the list when its sleep ends or is dropped (a `select!` that lost).
struct Asleep {
    inner: Arc<ManualInner>,
    id: u64,
}

impl Drop for Asleep {
    fn drop(&mut self) {
        self.inner.sleepers.send_modify(|s| {
            s.remove(&self.id);
        });
    }
}

impl ManualClock {
    /// A clock whose time of day reads `wall`.
    pub fn starting_at(wall: Timestamp) -> ManualClock {
        ManualClock {
            inner: Arc::new(ManualInner {
                start: Instant::now(),
                start_wall: wall,
                moved: tokio::sync::watch::Sender::new(Duration::ZERO),
                sleepers: tokio::sync::watch::Sender::new(Default::default()),
                next_sleeper: Default::default(),
            }),
        }
    }

    /// A clock reading the system's time of day now, in whole seconds (as commits and Leases
    /// are dated), so that a test can compare what it wrote with what it reads.
    pub fn starting_now() -> ManualClock {
        let second = Timestamp::now().as_second();
        ManualClock::starting_at(Timestamp::from_second(second).unwrap_or(Timestamp::UNIX_EPOCH))
    }

    /// Moves the clock on by `by`, waking whoever sleeps until then.
    pub fn advance(&self, by: Duration) {
        self.inner.moved.send_modify(|moved| *moved += by);
    }

    /// Moves the clock's time of day to `to`, unless it reads later already.
    pub fn advance_to(&self, to: Timestamp) {
        let target = to.duration_since(self.inner.start_wall);
        let target = Duration::try_from(target).unwrap_or(Duration::ZERO);
        self.inner
            .moved
            .send_modify(|moved| *moved = (*moved).max(target));
    }

    /// Waits until someone sleeps on the clock past its time now, and answers the time of day
    /// of the earliest such deadline (sleepers already due are waking up, not waiting).
    pub async fn next_wake(&self) -> Timestamp {
        let mut sleepers = self.inner.sleepers.subscribe();
        loop {
            let moved = *self.inner.moved.borrow();
            let next = sleepers
                .borrow_and_update()
                .values()
                .copied()
                .filter(|d| *d > moved)
                .min();
            if let Some(next) = next {
                return self.wall_at(next);
            }
            if sleepers.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits until something sleeps on this clock (a loop between cycles waits on one).
    pub async fn parked(&self) {
        let mut sleepers = self.inner.sleepers.subscribe();
        // The sender lives as long as the clock, which outlives this borrow of it.
        let _ = sleepers.wait_for(|s| !s.is_empty()).await;
    }

    fn wall_at(&self, moved: Duration) -> Timestamp {
        let moved = SignedDuration::try_from(moved).unwrap_or(SignedDuration::MAX);
        self.inner
            .start_wall
            .checked_add(moved)
            .unwrap_or(Timestamp::MAX)
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        self.inner.start + *self.inner.moved.borrow()
    }

    fn wall(&self) -> Timestamp {
        self.wall_at(*self.inner.moved.borrow())
    }

    fn sleep_until(&self, deadline: Instant) -> Sleep<'_> {
        let target = deadline.saturating_duration_since(self.inner.start);
        let mut moved = self.inner.moved.subscribe();
        Box::pin(async move {
            if *moved.borrow_and_update() >= target {
                return;
            }
            let id = self
                .inner
                .next_sleeper
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            self.inner.sleepers.send_modify(|s| {
                s.insert(id, target);
            });
            let _asleep = Asleep {
                inner: self.inner.clone(),
                id,
            };
            // The sender lives as long as the clock, which outlives this borrow of it.
            let _ = moved.wait_for(|moved| *moved >= target).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_moves_both_readings_and_wakes_its_sleepers() {
        let start: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let clock = ManualClock::starting_at(start);
        let began = clock.now();
        let sleeper = {
            let clock = clock.clone();
            tokio::spawn(async move { clock.sleep(Duration::from_secs(60)).await })
        };
        assert_eq!(
            clock.next_wake().await,
            start + SignedDuration::from_secs(60)
        );
        clock.advance(Duration::from_secs(30));
        assert!(!sleeper.is_finished());
        clock.advance_to(start + SignedDuration::from_secs(60));
        sleeper.await.unwrap();
        assert_eq!(clock.since(began), Duration::from_secs(60));
        assert_eq!(clock.wall(), start + SignedDuration::from_secs(60));
        // Never backwards.
        clock.advance_to(start);
        assert_eq!(clock.wall(), start + SignedDuration::from_secs(60));
    }
}
