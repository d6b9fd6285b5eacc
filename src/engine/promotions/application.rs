//! An Argo CD Application as a promotion's upstream: the tag it runs is the one its live status
//! reports (`status.summary.images`); it is verified when issue 19's verification has nothing
//! under way for it and its last sync succeeded and it is `Healthy`, pending while a
//! verification of that tag is under way, and failed when that tag's verification failed there
//! (held in the state store) or the Application is `Degraded` or `Missing`. Its soak counts
//! from when it was first `Healthy` after that sync, never from the sync's end (a rollout still
//! `Progressing` is not soaking): Argo CD's `status.health.lastTransitionTime`, else the end of
//! a verification of the tag there, else the first cycle that saw it so (kept in the state
//! store). The tags that failed there, and every other hold on its fields, are held below
//! ([`crate::promotion::above`]). Its failures are kept in the state store: without one the promotion
//! waits, named, rather than read "none failed".

use std::time::Duration;

use jiff::Timestamp;

use super::{GatherError, Sources};
use crate::policy::ImagePolicy;
use crate::promotion::above::{Above, Behind};
use crate::promotion::{Upstream, Verification, upstream};
use crate::state::{State, StateError};
use crate::verification::{self, Observed, Verdict};

/// Reads the Application `namespace/name` (namespace `None`: Argo CD's) for `policy`'s image.
pub(super) async fn read(
    shown: String,
    (name, namespace): (&str, Option<&str>),
    policy: &ImagePolicy,
    sources: &Sources<'_>,
    (above, behind): (&Above<'_>, &Behind),
) -> Result<Upstream, GatherError> {
    let Some(cluster) = sources.cluster else {
        return Err(GatherError::NoCluster { upstream: shown });
    };
    let Some(state) = sources.state else {
        return Err(GatherError::NoState { upstream: shown });
    };
    let namespace = namespace.unwrap_or(sources.namespace);
    let id = format!("{namespace}/{name}");
    let object = match cluster.application(namespace, name).await {
        Ok(Some(object)) => object,
        Ok(None) => return Err(GatherError::NoApplication { upstream: shown }),
        Err(source) => {
            let upstream = shown;
            let source = Box::new(source);
            return Err(GatherError::Cluster { upstream, source });
        }
    };
    let observed = match Observed::from_application(&object) {
        Ok(observed) => observed,
        Err(source) => {
            let upstream = shown;
            return Err(GatherError::Observed { upstream, source });
        }
    };
    let failed = above.failed_in(&id, &policy.image);
    let Some(tag) = upstream::running_tag(&object, &policy.image) else {
        return Ok(Upstream {
            name: shown,
            tag: None,
            since: None,
            verification: Verification::Pending,
        });
    };
    let since = observed.last_operation.as_ref().and_then(|o| o.finished_at);
    let verification = match failed.iter().find(|(t, _)| *t == tag) {
        Some((_, why)) => Verification::Failed {
            reason: why.clone(),
        },
        None if verifying(&id, &tag, sources)? => Verification::Pending,
        None => {
            let seen = Seen {
                id: &id,
                tag: &tag,
                behind,
                state,
                now: sources.now,
                record: sources.record,
            };
            match judged(&observed, &seen) {
                Ok(verification) => verification,
                Err(source) => {
                    let upstream = shown;
                    let source = Box::new(source);
                    return Err(GatherError::State { upstream, source });
                }
            }
        }
    };
    Ok(Upstream {
        name: shown,
        tag: Some(tag),
        since,
        verification,
    })
}

/// The Application running `tag`, as a cycle sees it at `now`.
struct Seen<'a> {
    id: &'a str,
    tag: &'a str,
    behind: &'a Behind,
    state: &'a State,
    now: Timestamp,
    /// Whether the first time it is seen `Healthy` is recorded (not in a dry run).
    record: bool,
}

/// The live status judged as issue 19's verification judges it, with no change to wait for:
/// verified since it was first `Healthy` after its last sync, failed, or not yet. Unhealthy,
/// the time it was first seen healthy is forgotten: a soak is time spent healthy.
fn judged(observed: &Observed, seen: &Seen<'_>) -> Result<Verification, StateError> {
    let verdict = verification::judge(observed, &|_| true, seen.now, seen.now, Duration::MAX);
    if !matches!(verdict, Verdict::Verified) && seen.record {
        seen.state.seen_unhealthy(seen.id);
    }
    Ok(match verdict {
        Verdict::Verified => Verification::Verified {
            at: healthy_since(observed, seen)?,
        },
        Verdict::Failed(failure) => Verification::Failed {
            reason: failure.to_string(),
        },
        Verdict::Waiting(_) => Verification::Pending,
    })
}

/// Since when an Application judged verified has been `Healthy` after its last sync: Argo
/// CD's `health.lastTransitionTime` (not before the sync ended); else when a verification of
/// the tag there ended verified after the sync; else when a cycle first saw it `Healthy`.
fn healthy_since(observed: &Observed, seen: &Seen<'_>) -> Result<Timestamp, StateError> {
    let synced = observed.last_operation.as_ref().and_then(|o| o.finished_at);
    if let Some(since) = observed.health_since {
        return Ok(synced.map_or(since, |synced| since.max(synced)));
    }
    let verified = seen.state.verified_tags()?;
    let ended = super::ended(&verified);
    match crate::promotion::above::verified_since(&ended, seen.behind, seen.tag, synced) {
        Some(at) => Ok(at),
        None if seen.record => seen
            .state
            .first_seen_healthy(seen.id, seen.tag, synced, seen.now),
        // A dry run soaks from what the store remembers, or from now, and remembers nothing.
        None => Ok(seen
            .state
            .seen_healthy_at(seen.id, seen.tag, synced)
            .unwrap_or(seen.now)),
    }
}

/// Whether a verification of `tag` is under way in the Application.
fn verifying(id: &str, tag: &str, sources: &Sources<'_>) -> Result<bool, GatherError> {
    let Some(state) = sources.state else {
        return Ok(false);
    };
    let pending = state
        .verifications()
        .map_err(|e| GatherError::Verifying(Box::new(e)))?;
    Ok(pending
        .iter()
        .any(|v| v.application == id && v.fields.iter().any(|f| f.to == tag)))
}
