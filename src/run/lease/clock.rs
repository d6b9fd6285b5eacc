//! The wall clock leader election keeps time by: when to renew the Lease, when another replica's
//! Lease expires, how long to wait before trying again. A parameter of
//! [`super::Elector::start_with_clock`], so that a test decides when time passes.
//!
//! Wall-clock time ([`SystemTime`]), not the monotonic instant of the loop's
//! [`crate::run::clock::Clock`]: a Lease's expiry is its
//! `renewTime`, written by whichever replica renewed it last, plus `leaseDurationSeconds`, and
//! only a wall clock can be compared with a time another process wrote.
//!
//! Why a trait rather than tokio's paused time: paused time advances by itself whenever the
//! runtime is idle, and a runtime waiting on a real socket (the Kubernetes API, or the test
//! double standing in for it) is idle, so under `start_paused` every request timeout would
//! fire at once. Production uses [`SystemClock`]; the lease's tests run on real time and move
//! a manual clock by hand (`tests/it/support/kube.rs`). Request timeouts stay on tokio's
//! time: they bound real waits, not the election's schedule.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

/// Tells the (wall-clock) time and sleeps until a moment of it.
pub trait WallClock: Send + Sync + std::fmt::Debug {
    /// Now, on this clock.
    fn now(&self) -> SystemTime;

    /// Completes once [`WallClock::now`] has reached `deadline` (at once if it already has).
    fn sleep_until(&self, deadline: SystemTime) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Completes once `duration` has passed on this clock.
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.sleep_until(self.now() + duration)
    }
}

/// The system's wall clock; sleeps on tokio's timer.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep_until(&self, deadline: SystemTime) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        // A deadline already past (or a clock stepped forward) is no wait at all.
        let wait = deadline
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        Box::pin(tokio::time::sleep(wait))
    }
}
