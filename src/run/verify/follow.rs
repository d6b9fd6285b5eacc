//! Following one Application after a change reached its base branch, until verification
//! concludes (issue 19): every state the watch delivers is judged by
//! [`crate::verification::judge`]; a stale status gets one refresh request per sync; whatever
//! is not concluded when the timeout runs out fails as timed out.
//!
//! Time is read from tokio's clock (the wall time at the start plus tokio's elapsed time), so a
//! test with paused time runs the timeout without waiting for it.

use std::future::Future;
use std::time::Duration;

use futures_util::{Stream, StreamExt as _};
use jiff::Timestamp;

use crate::kubernetes::{Cluster, KubeError};
use crate::verification::{Failure, Observed, ObservedError, Verdict, Waiting, judge};

/// What a follow needs to know about the change.
pub struct FollowedChange<'a> {
    /// `namespace/name` of the Application, for errors and logs.
    pub application: &'a str,
    /// Whether a revision (commit) contains the change.
    pub contains_change: &'a (dyn Fn(&str) -> bool + Sync),
    /// When the change reached the base branch: the timeout counts from there.
    pub since: Timestamp,
    pub timeout: Duration,
    /// Notified after each fetch of the change's repository: the state last seen is judged
    /// again, since a revision the clone did not have (a commit pushed on top of the change
    /// before the fetch) may now be known to contain the change, and Argo CD need not write
    /// its status again for that. `None`: judged on watch events only.
    pub fetched: Option<&'a tokio::sync::Notify>,
}

/// How a follow ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Followed {
    /// [`Verdict::Verified`] or [`Verdict::Failed`]; never `Waiting`.
    pub verdict: Verdict,
    /// The Application as last seen (its health message goes into a revert's description).
    pub last: Option<Observed>,
    /// How many refreshes were asked of Argo CD for stale statuses.
    pub refreshes: u32,
}

/// Why a follow could not conclude.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error("Application {0} was deleted while its change was being verified")]
    Gone(String),
    #[error("Application {application} cannot be judged")]
    Unreadable {
        application: String,
        #[source]
        source: ObservedError,
    },
}

/// Follows the Application `namespace/name` through one watch of the cluster.
pub async fn follow_application(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    change: &FollowedChange<'_>,
) -> Result<Followed, FollowError> {
    let states = cluster.watch_application(namespace, name);
    follow(
        states,
        || cluster.refresh_application(namespace, name),
        change,
    )
    .await
}

/// Judges each state of `states` until a verdict; `refresh` asks Argo CD to refresh.
pub async fn follow<S, R, F>(
    states: S,
    mut refresh: R,
    change: &FollowedChange<'_>,
) -> Result<Followed, FollowError>
where
    S: Stream<Item = Result<Option<serde_json::Value>, KubeError>>,
    R: FnMut() -> F,
    F: Future<Output = Result<(), KubeError>>,
{
    let started = (tokio::time::Instant::now(), Timestamp::now());
    let now = || {
        let elapsed = jiff::SignedDuration::try_from(started.0.elapsed()).unwrap_or_default();
        started.1.checked_add(elapsed).unwrap_or(started.1)
    };
    let spent = Duration::try_from(now().duration_since(change.since)).unwrap_or_default();
    let deadline = started.0 + change.timeout.saturating_sub(spent);
    let mut states = std::pin::pin!(states);
    let mut followed = Followed {
        verdict: Verdict::Waiting(Waiting::NotDeployed),
        last: None,
        refreshes: 0,
    };
    // The sync a refresh was asked for: one request per finished operation, not per event.
    let mut refreshed_for = None;
    loop {
        let next = tokio::select! {
            next = tokio::time::timeout_at(deadline, states.next()) => Next::Watched(next),
            () = fetched_again(change.fetched), if followed.last.is_some() => Next::Fetched,
        };
        let observed = match next {
            // The state seen last, judged again now that the clone knows more revisions.
            Next::Fetched => {
                let Some(last) = followed.last.clone() else {
                    continue;
                };
                tracing::debug!(
                    application = change.application,
                    "the repository was fetched: judging the last state seen again"
                );
                last
            }
            Next::Watched(next) => match watched(next, change)? {
                Event::State(observed) => *observed,
                // The watch resumes with backoff; the timeout bounds how long that may take.
                Event::Resumed => continue,
                // The timeout ran out while nothing changed: judge what was seen last, at the
                // end.
                Event::TimedOut => {
                    let waiting = match &followed.verdict {
                        Verdict::Waiting(waiting) => waiting.clone(),
                        _ => Waiting::NotDeployed,
                    };
                    followed.verdict = Verdict::Failed(Failure::TimedOut {
                        after: change.timeout,
                        waiting,
                    });
                    return Ok(followed);
                }
            },
        };
        let verdict = judge(
            &observed,
            change.contains_change,
            change.since,
            now(),
            change.timeout,
        );
        let finished = observed
            .last_operation
            .as_ref()
            .and_then(|op| op.finished_at);
        followed.last = Some(observed);
        match verdict {
            Verdict::Waiting(Waiting::StaleStatus) if refreshed_for != Some(finished) => {
                refreshed_for = Some(finished);
                followed.refreshes += 1;
                if let Err(err) = refresh().await {
                    tracing::warn!(
                        application = change.application,
                        "{}",
                        crate::error_chain::Chain(&err)
                    );
                }
                followed.verdict = Verdict::Waiting(Waiting::StaleStatus);
            }
            Verdict::Waiting(waiting) => followed.verdict = Verdict::Waiting(waiting),
            concluded => {
                followed.verdict = concluded;
                return Ok(followed);
            }
        }
    }
}

/// What woke the follower: the watch (or its timeout), or a fetch of the repository.
enum Next<T> {
    Watched(T),
    Fetched,
}

/// What one wake of the watch says.
enum Event {
    /// A state of the Application, to judge (boxed: the other variants are empty).
    State(Box<Observed>),
    /// An error the watch resumes from.
    Resumed,
    TimedOut,
}

/// Reads what the watch (under the timeout) delivered.
fn watched<E>(
    next: Result<Option<Result<Option<serde_json::Value>, KubeError>>, E>,
    change: &FollowedChange<'_>,
) -> Result<Event, FollowError> {
    let state = match next {
        Err(_) => return Ok(Event::TimedOut),
        Ok(None) | Ok(Some(Ok(None))) => {
            return Err(FollowError::Gone(change.application.to_string()));
        }
        Ok(Some(Err(err))) => {
            tracing::warn!(
                application = change.application,
                "{}",
                crate::error_chain::Chain(&err)
            );
            return Ok(Event::Resumed);
        }
        Ok(Some(Ok(Some(state)))) => state,
    };
    Observed::from_application(&state)
        .map(|observed| Event::State(Box::new(observed)))
        .map_err(|source| FollowError::Unreadable {
            application: change.application.to_string(),
            source,
        })
}

/// Returns once `fetched` is notified; never without one.
async fn fetched_again(fetched: Option<&tokio::sync::Notify>) {
    match fetched {
        Some(fetched) => fetched.notified().await,
        None => std::future::pending().await,
    }
}
