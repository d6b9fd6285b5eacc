//! When the next cycle starts: one interval after a good cycle, sooner and then later and later
//! after failed ones. Both waits carry jitter, so replicas and restarts do not fall into step and
//! hit a registry together.

use std::time::Duration;

/// The shortest retry after a failed cycle (or the interval, when that is shorter).
const FIRST_RETRY: Duration = Duration::from_secs(5);
/// Failed cycles never wait longer than this (or the interval, when that is longer): a registry
/// that is down for an hour is still noticed coming back within minutes.
const LONGEST_RETRY: Duration = Duration::from_secs(5 * 60);
/// How far a wait may move either way, as a fraction of it.
const INTERVAL_JITTER: f64 = 0.1;

/// Why `--interval` cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum IntervalError {
    #[error("the interval must be longer than zero")]
    Zero,
    /// Not a duration in humantime's words: its own message says where.
    #[error(transparent)]
    Unreadable(#[from] humantime::DurationError),
}

/// `--interval`: a duration in humantime's words (`2m`, `90s`); zero would spin without pause.
pub fn parse_interval(text: &str) -> Result<Duration, IntervalError> {
    match humantime::parse_duration(text)? {
        d if d.is_zero() => Err(IntervalError::Zero),
        d => Ok(d),
    }
}

/// The waits between cycles: the interval with jitter after a success, and exponential backoff
/// with jitter after consecutive failures, back to the interval once a cycle succeeds.
#[derive(Debug)]
pub struct Pacer {
    interval: Duration,
    first_retry: Duration,
    longest_retry: Duration,
    /// Failed cycles since the last good one.
    failures: u32,
    rng: fastrand::Rng,
}

impl Pacer {
    pub fn new(interval: Duration) -> Self {
        Pacer {
            interval,
            first_retry: FIRST_RETRY.min(interval),
            longest_retry: LONGEST_RETRY.max(interval),
            failures: 0,
            rng: fastrand::Rng::new(),
        }
    }

    /// How long to wait after a cycle that `succeeded` or not.
    pub fn next_wait(&mut self, succeeded: bool) -> Duration {
        if succeeded {
            self.failures = 0;
            let spread = 1.0 + INTERVAL_JITTER * (2.0 * self.rng.f64() - 1.0);
            return self.interval.mul_f64(spread);
        }
        self.failures = self.failures.saturating_add(1);
        // 1, 2, 4, … times the first retry; the exponent is capped so the product cannot overflow.
        let factor = 1u32 << (self.failures - 1).min(20);
        let ceiling = self
            .first_retry
            .saturating_mul(factor)
            .min(self.longest_retry);
        // "Equal jitter": at least half the backoff, so retries still spread out but never
        // collapse to an immediate retry.
        ceiling.mul_f64(0.5 + 0.5 * self.rng.f64())
    }

    /// Consecutive failed cycles so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, SystemClock};

    /// Sleeps the pacer's wait on tokio's clock and returns how long it took.
    async fn waited(pacer: &mut Pacer, succeeded: bool) -> Duration {
        let start = SystemClock.now();
        tokio::time::sleep(pacer.next_wait(succeeded)).await;
        SystemClock.since(start)
    }

    #[tokio::test(start_paused = true)]
    async fn a_good_cycle_waits_about_one_interval() {
        let mut pacer = Pacer::new(Duration::from_secs(120));
        for _ in 0..50 {
            let w = waited(&mut pacer, true).await;
            assert!(
                w >= Duration::from_secs(108) && w <= Duration::from_secs(132),
                "{w:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn failures_back_off_exponentially_and_a_success_resets() {
        let mut pacer = Pacer::new(Duration::from_secs(120));
        let mut ceilings = Vec::new();
        for _ in 0..9 {
            ceilings.push(waited(&mut pacer, false).await);
        }
        let bounds = [5, 10, 20, 40, 80, 160, 300, 300, 300];
        for (w, ceiling) in ceilings.iter().zip(bounds) {
            let ceiling = Duration::from_secs(ceiling);
            assert!(
                *w >= ceiling / 2 && *w <= ceiling,
                "{w:?} not in {ceiling:?}/2.."
            );
        }
        assert_eq!(pacer.failures(), 9);

        let w = waited(&mut pacer, true).await;
        assert!(w >= Duration::from_secs(108), "{w:?}");
        assert_eq!(pacer.failures(), 0);
        let w = waited(&mut pacer, false).await;
        assert!(
            w <= Duration::from_secs(5),
            "back to the first retry: {w:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_interval_bounds_the_first_retry() {
        let mut pacer = Pacer::new(Duration::from_secs(1));
        assert!(waited(&mut pacer, false).await <= Duration::from_secs(1));
        for _ in 0..30 {
            pacer.next_wait(false);
        }
        assert!(waited(&mut pacer, false).await <= LONGEST_RETRY);
    }
}
