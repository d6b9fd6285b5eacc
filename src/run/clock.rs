//! The clock the loop keeps time by: when the next cycle is due, when a re-check may run, how
//! long a cycle took. A parameter of [`super::serve`], so that a test decides when time passes.
//!
//! Why a trait rather than tokio's paused time alone: paused time advances by itself whenever
//! the runtime is idle, and a runtime waiting on a real socket (a registry, a git server) is
//! idle, so under `start_paused` every HTTP timeout would fire at once. Production uses
//! [`TokioClock`]; unit tests of pure pacing pause tokio's time and use it too; the service's
//! tests, which talk to real servers, run on real time and move this clock by hand (a manual
//! clock in `tests/it/support/service.rs`). Timeouts of I/O (registry requests, the lease)
//! stay on tokio's time: they bound real waits, not the loop's schedule.

use std::future::Future;
use std::pin::Pin;

use tokio::time::Instant;

/// Tells the time and sleeps until a deadline.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, on this clock.
    fn now(&self) -> Instant;

    /// The time of day on this clock: what promotions (issue 20) are decided at, and what a
    /// promotion's verification downstream is recorded and its lead time measured at. Real
    /// time unless a test keeps it.
    fn wall(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }

    /// Completes once [`Clock::now`] reaches `deadline`.
    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
}

/// Tokio's clock: real time, or paused time in a test that pauses it.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(tokio::time::sleep_until(deadline))
    }
}
