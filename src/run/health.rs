//! Liveness and readiness of the loop, as `/livez` and `/readyz` report them.

use std::sync::atomic::{AtomicBool, Ordering};

use super::events::Events;

/// Set by the loop, read by the HTTP handlers; each change is also published on `events`.
#[derive(Debug, Default)]
pub struct Health {
    live: AtomicBool,
    ready: AtomicBool,
    /// With `--leader-elect`: another replica leads, so webhooks are refused (503) for the
    /// sender to retry and reach the leader. `false` without leader election.
    following: AtomicBool,
    /// Where liveness and readiness are published for whoever started the service.
    events: Events,
}

impl Health {
    /// Health that publishes its changes on `events`.
    pub fn observed(events: Events) -> Health {
        Health {
            events,
            ..Health::default()
        }
    }

    /// The loop has started (or stopped: `false`).
    pub fn set_live(&self, live: bool) {
        self.live.store(live, Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        self.events.health(self.is_live(), self.is_ready());
    }

    /// A cycle completed, and heard from a registry: from now on the process is ready. Only
    /// shutdown takes it back, so one failed cycle, or registries that go away, do not take a
    /// replica out of a Service.
    pub fn cycle_completed(&self) {
        self.ready.store(true, Ordering::Relaxed);
        self.publish();
    }

    /// Shutdown started: not ready any more, though still live while the last write finishes.
    pub fn draining(&self) {
        self.ready.store(false, Ordering::Relaxed);
        self.publish();
    }

    /// With `--leader-elect`: this replica has read the Lease and knows its role. From then on
    /// it is ready, leader or follower: a follower stands by for a failover (a rolling update
    /// waits for that), and a new leader must receive webhooks from its first moment rather
    /// than after its first cycle.
    pub fn joined_election(&self) {
        self.ready.store(true, Ordering::Relaxed);
        self.publish();
    }

    /// With `--leader-elect`: whether another replica leads (webhooks are refused meanwhile).
    pub fn set_following(&self, following: bool) {
        self.following.store(following, Ordering::Relaxed);
    }

    pub fn is_following(&self) -> bool {
        self.following.load(Ordering::Relaxed)
    }

    pub fn is_live(&self) -> bool {
        self.live.load(Ordering::Relaxed)
    }

    pub fn is_ready(&self) -> bool {
        self.live.load(Ordering::Relaxed) && self.ready.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_after_a_completed_cycle_and_until_draining() {
        let health = Health::default();
        assert!(!health.is_live() && !health.is_ready());
        health.set_live(true);
        assert!(health.is_live() && !health.is_ready());
        health.cycle_completed();
        assert!(health.is_ready());
        health.draining();
        assert!(health.is_live() && !health.is_ready());
    }

    #[test]
    fn every_change_is_published() {
        let events = Events::new();
        let health = Health::observed(events.clone());
        health.set_live(true);
        assert!(events.now().live && !events.now().ready);
        health.cycle_completed();
        assert!(events.now().ready);
        health.draining();
        assert!(events.now().live && !events.now().ready);
        health.set_live(false);
        assert!(!events.now().live);
    }
}
