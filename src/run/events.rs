//! What the service tells whoever started it, as it happens: cycles and re-checks finished
//! (with how the last one ended), and liveness and readiness as `/livez` and `/readyz` report
//! them. One [`tokio::sync::watch`]: an observer (a test, an embedding) waits for the state it
//! needs instead of polling the HTTP endpoints or reading the log.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::metrics::CycleResult;

/// The service's progress so far, as an observer sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Full cycles finished (whatever their result).
    pub cycles: u64,
    /// Re-checks finished, including those that found nothing to read.
    pub rechecks: u64,
    /// How the last full cycle ended; `None` before the first one.
    pub last_cycle: Option<CycleResult>,
    /// The wait before the next cycle, on the service's clock, as decided after the last one
    /// (the interval with jitter, or a backoff); zero before the first.
    pub next_cycle_in: Duration,
    /// As `/livez`: the loop runs.
    pub live: bool,
    /// As `/readyz`: live, and ready (a cycle heard from a registry, or the election joined),
    /// and not draining.
    pub ready: bool,
    /// [`super::serve`] has returned (stopped, or failed to start).
    pub stopped: bool,
}

/// The sending side, handed to [`super::serve`]; [`Events::subscribe`] gives observers.
#[derive(Debug, Clone)]
pub struct Events(Arc<watch::Sender<Progress>>);

impl Default for Events {
    fn default() -> Self {
        Events(Arc::new(watch::Sender::new(Progress::default())))
    }
}

impl Events {
    pub fn new() -> Events {
        Events::default()
    }

    /// A receiver that sees every later change (and the current state at once).
    pub fn subscribe(&self) -> watch::Receiver<Progress> {
        self.0.subscribe()
    }

    /// The progress now.
    pub fn now(&self) -> Progress {
        *self.0.borrow()
    }

    pub(super) fn cycle_finished(&self, result: CycleResult) {
        self.0.send_modify(|p| {
            p.cycles += 1;
            p.last_cycle = Some(result);
        });
    }

    pub(super) fn next_cycle_in(&self, wait: Duration) {
        self.0.send_modify(|p| p.next_cycle_in = wait);
    }

    pub(super) fn recheck_finished(&self) {
        self.0.send_modify(|p| p.rechecks += 1);
    }

    pub(super) fn stopped(&self) {
        self.0.send_modify(|p| p.stopped = true);
    }

    /// Health changed: `live` and `ready` as the endpoints now answer.
    pub(super) fn health(&self, live: bool, ready: bool) {
        self.0.send_if_modified(|p| {
            let changed = p.live != live || p.ready != ready;
            p.live = live;
            p.ready = ready;
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observers_see_cycles_rechecks_and_health() {
        let events = Events::new();
        let mut seen = events.subscribe();
        assert_eq!(*seen.borrow_and_update(), Progress::default());
        events.health(true, false);
        events.cycle_finished(CycleResult::Ok);
        events.recheck_finished();
        assert!(seen.has_changed().unwrap());
        assert_eq!(
            *seen.borrow_and_update(),
            Progress {
                cycles: 1,
                rechecks: 1,
                last_cycle: Some(CycleResult::Ok),
                next_cycle_in: Duration::ZERO,
                live: true,
                ready: false,
                stopped: false,
            }
        );
        // The same health again wakes nobody.
        events.health(true, false);
        assert!(!seen.has_changed().unwrap());
    }
}
