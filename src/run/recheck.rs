//! From notifications to re-checks: the image repositories webhooks hint at wait here until the
//! loop takes them as one batch and re-checks only what uses them.
//!
//! - **Coalesced.** The first hint after a quiet spell opens a window of `debounce`; every hint
//!   that comes within it (the child manifests and the index of a multi-arch push, a burst of
//!   retries, pushes to several repositories) joins one batch when it closes.
//! - **Joined, not queued.** The loop runs one re-check at a time (`super::cycles`), so hints
//!   that come while one is in flight, or while their repository is limited, wait in one entry
//!   per repository and all join the next re-check of it: a burst of pushes to one image
//!   becomes as few re-checks (and so commits) as the limit allows, each reading every tag that
//!   has arrived.
//! - **Rate-limited per repository, evenly.** A repository is re-checked at most `burst` times
//!   at once and then once per `min_interval / burst` (a token bucket holding `burst`, filled
//!   at that rate), never dropped. A sliding window would let `burst` go and then hold the
//!   next push for most of `min_interval`; the bucket spaces the ones beyond the burst evenly.
//!   The defaults never bind on pushes that come one after another (a re-check plus the
//!   debounce is longer than the spacing): they bound a sender that floods.
//! - **Covered by full cycles.** A full cycle reads every repository, so the hints that came
//!   before it started are answered by it ([`Rechecks::full_cycle_starts`]).
//!
//! The loop runs batches between its interval cycles and never delays one for them
//! (`super::cycles`), and every request still goes through the registry client's
//! per-registry rate limit, so a flood of notifications can neither starve the interval cycle
//! nor push a registry past its limit.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
    /// Per repository, when its bucket is full again: each re-check moves it on by one
    /// spacing (`min_interval / burst`) from now or from where it stood, whichever is later;
    /// pruned once past.
    full_at: HashMap<Repository, Instant>,
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
            let allowed = self.allowed(&state, &repository, now);
            let ready = window.max(allowed);
            // A repository already waiting keeps its time: later hints join it.
            state.waiting.entry(repository).or_insert(ready);
        }
        drop(state);
        self.wake.notify_one();
    }

    /// How long apart re-checks of one repository go once its burst is spent.
    fn spacing(&self) -> Duration {
        let burst = u32::try_from(self.pace.burst.get()).unwrap_or(u32::MAX);
        self.pace.min_interval / burst
    }

    /// The earliest a re-check of `repository` may start: now while its bucket holds a
    /// re-check, else when it holds one again.
    fn allowed(&self, state: &State, repository: &Repository, now: Instant) -> Instant {
        let Some(full_at) = state.full_at.get(repository) else {
            return now;
        };
        // The bucket is empty by `burst` spacings before it is full, and holds one again one
        // spacing after that.
        let room = self.pace.min_interval.saturating_sub(self.spacing());
        full_at.checked_sub(room).map_or(now, |at| at.max(now))
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
        let spacing = self.spacing();
        for r in &ready {
            state.waiting.remove(r);
            let full_at = state.full_at.entry(r.clone()).or_insert(now);
            *full_at = (*full_at).max(now) + spacing;
        }
        state.full_at.retain(|_, full_at| *full_at > now);
        ready
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::ManualClock;

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
    async fn a_burst_of_rechecks_goes_at_once_and_the_next_waits_one_spacing_not_a_window() {
        let r = paced(100, 9, 3);
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
        // The fourth waited one spacing (9 s / 3) after the burst began, not the whole 9 s.
        let waited = SystemClock.since(started);
        assert!(
            waited >= Duration::from_secs(3) && waited < Duration::from_secs(4),
            "{waited:?}"
        );
    }

    /// The service's own clock, moved by the test: every sleep is seen and passed exactly.
    fn manual(debounce_ms: u64, min_interval_s: u64, burst: usize) -> (Rechecks, ManualClock) {
        let clock = ManualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let pace = RecheckConfig {
            debounce: Duration::from_millis(debounce_ms),
            min_interval: Duration::from_secs(min_interval_s),
            burst: std::num::NonZeroUsize::new(burst).unwrap(),
        };
        (Rechecks::with_clock(pace, Arc::new(clock.clone())), clock)
    }

    /// Takes the next batch, moving `clock` to each wake-up it sleeps for.
    async fn next(r: &Rechecks, clock: &ManualClock) -> BTreeSet<Repository> {
        let batch = r.next_batch();
        tokio::pin!(batch);
        loop {
            tokio::select! {
                b = &mut batch => return b,
                at = clock.next_wake() => clock.advance_to(at),
            }
        }
    }

    #[tokio::test]
    async fn pushes_during_a_recheck_in_flight_join_the_next_one() {
        let (r, clock) = manual(100, 5, 3);
        r.hint([repo("r.example/shop/api")]);
        assert_eq!(next(&r, &clock).await, set(&["r.example/shop/api"]));
        // The re-check is in flight (the loop runs one at a time): five more tags arrive, and
        // another image's.
        for _ in 0..5 {
            clock.advance(Duration::from_millis(30));
            r.hint([repo("r.example/shop/api")]);
        }
        r.hint([repo("r.example/shop/web")]);
        assert_eq!(r.waiting(), 2, "one entry per repository, not one per push");
        // It ends: one re-check takes them all, at once since the debounce has passed.
        clock.advance(Duration::from_millis(200));
        let at = clock.now();
        assert_eq!(
            next(&r, &clock).await,
            set(&["r.example/shop/api", "r.example/shop/web"])
        );
        assert_eq!(clock.since(at), Duration::ZERO);
        assert_eq!(r.waiting(), 0);
    }

    #[tokio::test]
    async fn pushes_one_after_another_are_never_held_by_the_default_limit() {
        let clock = ManualClock::starting_at("2026-01-01T00:00:00Z".parse().unwrap());
        let pace = RecheckConfig::default();
        let r = Rechecks::with_clock(pace, Arc::new(clock.clone()));
        // Twenty tags of one image, each pushed as the previous re-check ends (a re-check
        // plus its push take some tens of milliseconds): each waits the debounce only.
        for _ in 0..20 {
            r.hint([repo("r.example/shop/api")]);
            let hinted = clock.now();
            assert_eq!(next(&r, &clock).await, set(&["r.example/shop/api"]));
            assert_eq!(clock.since(hinted), pace.debounce);
            clock.advance(Duration::from_millis(50));
        }
    }

    #[tokio::test]
    async fn a_flood_to_one_repository_becomes_evenly_spaced_rechecks_each_taking_all_so_far() {
        let (r, clock) = manual(0, 4, 2);
        let started = clock.now();
        let mut starts = Vec::new();
        // A push every 100 ms for 10 s; the loop takes a batch whenever one is due.
        for _ in 0..100 {
            r.hint([repo("r.example/shop/api")]);
            let now = clock.now();
            if r.waiting() == 1 && r.state().waiting.values().all(|at| *at <= now) {
                assert_eq!(next(&r, &clock).await, set(&["r.example/shop/api"]));
                starts.push(clock.since(started));
            }
            clock.advance(Duration::from_millis(100));
        }
        // Two at once, then one per 2 s: 0, 0, 2, 4, 6, 8 (s); never one per push.
        let seconds: Vec<u64> = starts.iter().map(Duration::as_secs).collect();
        assert_eq!(seconds, [0, 0, 2, 4, 6, 8], "{starts:?}");
        assert_eq!(
            r.waiting(),
            1,
            "the pushes since the last wait for the next"
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
