//! What the service tells whoever started it, as it happens: cycles and re-checks finished
//! (with how the last one ended), notifications answered, notification messages sent (or
//! given up), verification's steps (a change
//! followed, its verdict, its commit status sent, its revert done), and liveness and readiness
//! as `/livez` and `/readyz` report them. One [`tokio::sync::watch`]: an observer (a test, an
//! embedding) waits for the state it needs instead of polling the HTTP endpoints or reading
//! the log.

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
    /// Webhook requests answered, whatever the answer; the re-check an accepted one asks for
    /// is waiting (on the clock: the debounce, a repository's rate limit) by then.
    pub notifications: u64,
    /// Verification's steps so far (`verify:`).
    pub verifications: Verifications,
    /// Notification messages to sinks whose sending has ended (`notifications:`).
    pub notices: Notices,
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

/// Verification's steps, each counted per change followed in an Application.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verifications {
    /// Changes that started being followed in an Application after a cycle (not those a
    /// restart resumed).
    pub following: u64,
    /// Concluded: the Application runs the change healthy.
    pub verified: u64,
    /// Concluded: the change failed, or was not healthy within its timeout (its hold, if
    /// `onFailure` asks for one, is recorded by then).
    pub failed: u64,
    /// Ended without a verdict: the Application went away, no cluster answered, no
    /// Application deploys the commit.
    pub errors: u64,
    /// `tagpilot/verify` commit statuses whose sending has ended (set, refused, or no forge
    /// to set them on).
    pub statuses: u64,
    /// Reverts of failed changes that have ended (written or not).
    pub reverts: u64,
}

/// Notification messages, each counted once its sending has ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Notices {
    /// Taken by their sink.
    pub sent: u64,
    /// Given up after every try.
    pub failed: u64,
}

/// One step of verification, as [`Events::verification`] counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Step {
    Following,
    Verified,
    Failed,
    Error,
    StatusSent,
    Reverted,
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

    pub(super) fn notification_answered(&self) {
        self.0.send_modify(|p| p.notifications += 1);
    }

    pub(super) fn verification(&self, step: Step) {
        self.0.send_modify(|p| {
            let v = &mut p.verifications;
            let counted = match step {
                Step::Following => &mut v.following,
                Step::Verified => &mut v.verified,
                Step::Failed => &mut v.failed,
                Step::Error => &mut v.errors,
                Step::StatusSent => &mut v.statuses,
                Step::Reverted => &mut v.reverts,
            };
            *counted += 1;
        });
    }

    pub(super) fn notification_sent(&self) {
        self.0.send_modify(|p| p.notices.sent += 1);
    }

    pub(super) fn notification_failed(&self) {
        self.0.send_modify(|p| p.notices.failed += 1);
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
    fn observers_see_cycles_rechecks_notifications_verifications_and_health() {
        let events = Events::new();
        let mut seen = events.subscribe();
        assert_eq!(*seen.borrow_and_update(), Progress::default());
        events.health(true, false);
        events.cycle_finished(CycleResult::Ok);
        events.recheck_finished();
        events.notification_answered();
        events.verification(Step::Following);
        events.verification(Step::Failed);
        events.verification(Step::Reverted);
        assert!(seen.has_changed().unwrap());
        assert_eq!(
            *seen.borrow_and_update(),
            Progress {
                cycles: 1,
                rechecks: 1,
                notifications: 1,
                verifications: Verifications {
                    following: 1,
                    failed: 1,
                    reverts: 1,
                    ..Verifications::default()
                },
                notices: Notices::default(),
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
