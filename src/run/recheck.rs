//! From notifications to re-checks: the image repositories webhooks hint at wait here until the
//! loop takes them as one batch and re-checks only what uses them.
//!
//! - **Coalesced.** The first hint after a quiet spell opens a window of `debounce`; every hint
//!   that comes within it (the child manifests and the index of a multi-arch push, a burst of
//!   retries, pushes to several repositories) joins one batch when it closes.
//! - **Rate-limited per repository.** A repository is re-checked at most `burst` times per
//!   `min_interval` (a sliding window); hints beyond that wait for the next allowed time and
//!   are handled together then, never dropped. The burst keeps a push that follows another
//!   within seconds as quick as the first.
//! - **Covered by full cycles.** A full cycle reads every repository, so the hints that came
//!   before it started are answered by it ([`Rechecks::full_cycle_starts`]).
//!
//! The loop runs batches between its interval cycles and never delays one for them
//! (`super::cycles`), and every request still goes through the registry client's
//! per-registry rate limit, so a flood of notifications can neither starve the interval cycle
//! nor push a registry past its limit.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::clock::{Clock, SystemClock};
use crate::config::RecheckConfig;
use crate::image::Repository;

/// Hints waiting to be re-checked.
#[derive(Debug)]
pub struct Rechecks {
    pace: RecheckConfig,
    state: Mutex<State>,
    /// Woken by every hint; `notify_one` keeps a wake-up for a waiter that comes later.
    wake: Notify,
    /// The loop's clock: debounce windows and rate limits are kept on it.
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct State {
    /// Each waiting repository and when it may be re-checked.
    waiting: BTreeMap<Repository, Instant>,
    /// When each repository's re-checks within the last `min_interval` started, oldest first
    /// (at most `burst`; pruned once older).
    last: HashMap<Repository, VecDeque<Instant>>,
    /// When the open debounce window closes.
    window: Option<Instant>,
}

impl Default for Rechecks {
    fn default() -> Self {
        Rechecks::new(RecheckConfig::default())
    }
}

impl Rechecks {
    pub fn new(pace: RecheckConfig) -> Rechecks {
        Rechecks::with_clock(pace, Arc::new(SystemClock))
    }

    /// Paced by `clock` rather than tokio's.
    pub fn with_clock(pace: RecheckConfig, clock: Arc<dyn Clock>) -> Rechecks {
        Rechecks {
            pace,
            state: Mutex::default(),
            wake: Notify::new(),
            clock,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds the repositories a notification hinted at.
    pub fn hint(&self, repositories: impl IntoIterator<Item = Repository>) {
        let now = self.clock.now();
        let mut state = self.state();
        let window = match state.window {
            Some(end) if end > now => end,
            _ => now + self.pace.debounce,
        };
        state.window = Some(window);
        for repository in repositories {
            let allowed = match state.last.get(&repository) {
                Some(recent) if recent.len() >= self.pace.burst.get() => {
                    recent[recent.len() - self.pace.burst.get()] + self.pace.min_interval
                }
                _ => now,
            };
            let ready = window.max(allowed);
            // A repository already waiting keeps its time: later hints join it.
            state.waiting.entry(repository).or_insert(ready);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// A full cycle starts and reads every repository: the hints so far are answered by it.
    pub fn full_cycle_starts(&self) {
        self.state().waiting.clear();
    }

    /// How many repositories wait.
    pub fn waiting(&self) -> usize {
        self.state().waiting.len()
    }

    /// Waits for the next batch: every waiting repository whose time has come, once the first
    /// one's has. Cancel-safe: a batch is taken only when this returns.
    pub async fn next_batch(&self) -> BTreeSet<Repository> {
        loop {
            let earliest = self.state().waiting.values().min().copied();
            match earliest {
                None => self.wake.notified().await,
                Some(at) if at > self.clock.now() => {
                    tokio::select! {
                        () = self.clock.sleep_until(at) => {}
                        // A hint may bring an earlier time (a new repository); look again.
                        () = self.wake.notified() => {}
                    }
                }
                Some(_) => {
                    let batch = self.take_ready(self.clock.now());
                    if !batch.is_empty() {
                        return batch;
                    }
                }
            }
        }
    }

    fn take_ready(&self, now: Instant) -> BTreeSet<Repository> {
        let mut state = self.state();
        let ready: BTreeSet<Repository> = state
            .waiting
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(r, _)| r.clone())
            .collect();
        let (keep, burst) = (self.pace.min_interval, self.pace.burst.get());
        for r in &ready {
            state.waiting.remove(r);
            let recent = state.last.entry(r.clone()).or_default();
            recent.push_back(now);
            while recent.len() > burst {
                recent.pop_front();
            }
        }
        state.last.retain(|_, recent| {
            recent.retain(|at| now.saturating_duration_since(*at) < keep);
            !recent.is_empty()
        });
        ready
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn repo(s: &str) -> Repository {
        Repository::parse(s).unwrap()
    }

    fn pace(debounce_ms: u64, min_interval_s: u64) -> Rechecks {
        paced(debounce_ms, min_interval_s, 1)
    }

    fn paced(debounce_ms: u64, min_interval_s: u64, burst: usize) -> Rechecks {
        Rechecks::new(RecheckConfig {
            debounce: Duration::from_millis(debounce_ms),
            min_interval: Duration::from_secs(min_interval_s),
            burst: std::num::NonZeroUsize::new(burst).unwrap(),
        })
    }

    fn set(names: &[&str]) -> BTreeSet<Repository> {
        names.iter().map(|n| repo(n)).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_hints_is_one_batch() {
        let r = pace(200, 10);
        for _ in 0..50 {
            r.hint([repo("r.example/shop/api")]);
            tokio::time::advance(Duration::from_millis(2)).await;
        }
        r.hint([repo("r.example/shop/web")]);
        assert_eq!(
            r.next_batch().await,
            set(&["r.example/shop/api", "r.example/shop/web"])
        );
        assert_eq!(r.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_repository_is_rechecked_at_most_once_per_min_interval_and_later_hints_wait() {
        let r = pace(100, 10);
        let started = SystemClock.now();
        r.hint([repo("r.example/shop/api")]);
        assert_eq!(r.next_batch().await, set(&["r.example/shop/api"]));
        // Right after: another push of the same repository, and one of another.
        r.hint([repo("r.example/shop/api")]);
        r.hint([repo("r.example/shop/api"), repo("r.example/shop/web")]);
        assert_eq!(r.next_batch().await, set(&["r.example/shop/web"]));
        // The repository re-checked a moment ago waits out its interval, once for both hints.
        assert_eq!(r.next_batch().await, set(&["r.example/shop/api"]));
        assert!(SystemClock.since(started) >= Duration::from_secs(10));
        assert_eq!(r.waiting(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_rechecks_goes_at_once_and_the_next_waits_for_the_oldest_to_age_out() {
        let r = paced(100, 10, 3);
        let started = SystemClock.now();
        for _ in 0..3 {
            r.hint([repo("r.example/shop/api")]);
            assert_eq!(r.next_batch().await, set(&["r.example/shop/api"]));
        }
        // Three pushes a debounce apart: each answered at once.
        assert!(
            SystemClock.since(started) < Duration::from_secs(1),
            "{:?}",
            SystemClock.since(started)
        );
        r.hint([repo("r.example/shop/api")]);
        assert_eq!(r.next_batch().await, set(&["r.example/shop/api"]));
        // The fourth waited until the first of the three was min_interval old.
        let waited = SystemClock.since(started);
        assert!(
            waited >= Duration::from_secs(10) && waited < Duration::from_secs(11),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_cycle_answers_the_hints_before_it() {
        let r = pace(100, 10);
        r.hint([repo("r.example/shop/api")]);
        r.full_cycle_starts();
        assert_eq!(r.waiting(), 0);
        let next = tokio::time::timeout(Duration::from_secs(60), r.next_batch()).await;
        assert!(next.is_err(), "a batch came with nothing waiting: {next:?}");
        // A hint after the cycle started is still re-checked.
        r.hint([repo("r.example/shop/web")]);
        assert_eq!(r.next_batch().await, set(&["r.example/shop/web"]));
    }
}
