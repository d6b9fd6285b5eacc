//! A registry's pull quota: what manifest GETs cost where a registry counts them (Docker Hub:
//! `ratelimit-limit: 100;w=21600` and `ratelimit-remaining: 12;w=21600` on its answers, a 429
//! past the limit). HEADs and tag listings cost nothing there, so only manifest GETs are
//! spent against it.
//!
//! The client reads the headers on every answer, and keeps its own estimate between them: each
//! GET it lets go takes one from what is left before the answer says anew, so requests in
//! flight together never overdraw it. Once what is left is down to [`RESERVE`], further manifest
//! GETs are not sent: each fails at once as deferred, named ("deferred: registry-1.docker.io
//! quota, 2 left of 100, resets within 6h"), and the policy that needed it is held with that
//! problem, as any registry problem holds it. tagpilot never learns of a limit from a 429.
//!
//! A registry that sends no headers is not limited here (its rate limit, `rateLimit`, still
//! applies to every request).

use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;
use reqwest::header::HeaderMap;

/// How many counted requests are kept back once a registry says how many are left: a person's
/// `docker pull` on the same address should not be the one that meets the 429.
pub const RESERVE: u64 = 2;

/// What one registry's quota is known to be.
#[derive(Debug, Default)]
pub(super) struct Quota(Mutex<QuotaState>);

#[derive(Debug, Default, Clone, Copy)]
struct QuotaState {
    /// `ratelimit-limit`, and its window (`w=`).
    limit: Option<u64>,
    window: Option<Duration>,
    /// What is left: the last `ratelimit-remaining`, less the GETs let go since.
    left: Option<u64>,
    /// When the registry last said it.
    said_at: Option<Timestamp>,
    spent: u64,
    heads: u64,
    deferred: u64,
}

/// A manifest GET not sent: what was left when it was asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deferral {
    pub left: u64,
    pub limit: Option<u64>,
    /// The window the registry counts in: it has reset within this long.
    pub window: Option<Duration>,
}

/// A registry's quota as the metrics and `plan` show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaView {
    pub registry: String,
    /// Manifest GETs sent (counted against the quota where the registry counts).
    pub spent: u64,
    /// Manifest HEADs sent (free where the registry counts GETs).
    pub heads: u64,
    /// Manifest GETs deferred for the quota.
    pub deferred: u64,
    /// What is left and of how many, where the registry says.
    pub left: Option<u64>,
    pub limit: Option<u64>,
}

impl Quota {
    fn state(&self) -> std::sync::MutexGuard<'_, QuotaState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a manifest GET may go now; taken from what is left if so.
    pub(super) fn admit(&self, now: Timestamp) -> Result<(), Deferral> {
        let mut s = self.state();
        // The window has passed since the registry last said: what is left is unknown again,
        // and the next answer says it.
        if let (Some(at), Some(window)) = (s.said_at, s.window)
            && now.duration_since(at).as_secs_f64() >= window.as_secs_f64()
        {
            s.left = None;
        }
        match s.left {
            Some(left) if left <= RESERVE => {
                s.deferred += 1;
                Err(Deferral {
                    left,
                    limit: s.limit,
                    window: s.window,
                })
            }
            Some(left) => {
                s.left = Some(left - 1);
                s.spent += 1;
                Ok(())
            }
            None => {
                s.spent += 1;
                Ok(())
            }
        }
    }

    /// Counts a manifest HEAD.
    pub(super) fn head(&self) {
        self.state().heads += 1;
    }

    /// Reads what an answer says of the quota, if anything.
    pub(super) fn observe(&self, headers: &HeaderMap, now: Timestamp) {
        let read = |name: &str| {
            let value = headers.get(name)?.to_str().ok()?;
            let (count, rest) = value.split_once(';').unwrap_or((value, ""));
            let count = count.trim().parse::<u64>().ok()?;
            let window = rest
                .split(';')
                .find_map(|p| p.trim().strip_prefix("w=")?.parse::<u64>().ok())
                .map(Duration::from_secs);
            Some((count, window))
        };
        let (Some((remaining, w)), limit) = (read("ratelimit-remaining"), read("ratelimit-limit"))
        else {
            return;
        };
        let mut s = self.state();
        // What the registry says is left counts the GETs it has answered; those let go since
        // and not yet answered are already taken from the estimate, so the lower one stands,
        // unless the window began anew.
        let renewed = s.said_at.zip(s.window).is_some_and(|(at, window)| {
            now.duration_since(at).as_secs_f64() >= window.as_secs_f64()
        });
        s.left = Some(match s.left {
            Some(left) if !renewed => left.min(remaining),
            _ => remaining,
        });
        s.said_at = Some(now);
        s.window = w.or(limit.and_then(|(_, w)| w)).or(s.window);
        if let Some((limit, _)) = limit {
            s.limit = Some(limit);
        }
    }

    pub(super) fn view(&self, registry: &str) -> QuotaView {
        let s = *self.state();
        QuotaView {
            registry: registry.to_string(),
            spent: s.spent,
            heads: s.heads,
            deferred: s.deferred,
            left: s.left,
            limit: s.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(limit: u64, remaining: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            "ratelimit-limit",
            format!("{limit};w=21600").parse().unwrap(),
        );
        h.insert(
            "ratelimit-remaining",
            format!("{remaining};w=21600").parse().unwrap(),
        );
        h
    }

    #[test]
    fn gets_are_taken_from_what_is_left_and_deferred_at_the_reserve_until_the_window_passes() {
        let q = Quota::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        assert!(q.admit(t0).is_ok(), "unknown: let go");
        q.observe(&headers(100, 5), t0);
        // 5 left, 2 kept back: three more go, the fourth is deferred.
        for _ in 0..3 {
            assert!(q.admit(t0).is_ok());
        }
        let deferred = q.admit(t0).unwrap_err();
        assert_eq!(deferred.left, 2);
        assert_eq!(deferred.limit, Some(100));
        // An answer of a GET sent before says more is left: the lower estimate stands.
        q.observe(&headers(100, 4), t0);
        assert!(q.admit(t0).is_err());
        let view = q.view("registry-1.docker.io");
        assert_eq!((view.spent, view.deferred, view.left), (4, 2, Some(2)));
        // Six hours on, the window has passed: the next GET goes and its answer says anew.
        let later = t0 + jiff::SignedDuration::from_hours(6);
        assert!(q.admit(later).is_ok());
        q.observe(&headers(100, 99), later);
        assert_eq!(q.view("r").left, Some(99));
    }

    #[test]
    fn a_registry_that_sends_no_headers_is_not_limited_here() {
        let q = Quota::default();
        let t0: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        for _ in 0..500 {
            q.observe(&HeaderMap::new(), t0);
            assert!(q.admit(t0).is_ok());
        }
        assert_eq!(q.view("r").left, None);
    }
}
