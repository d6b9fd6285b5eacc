//! An Argo CD Application as a promotion's upstream: the tag it runs is the one its live status
//! reports (`status.summary.images`); it is verified when issue 19's verification has nothing
//! under way for it and its last sync succeeded and stayed `Healthy` (verified at the sync's
//! end), pending while a verification of that tag is under way, and failed when that tag's
//! verification failed there (held in the state store) or the Application is `Degraded` or
//! `Missing`. The tags that failed there, and every other hold on its fields, are held below
//! ([`super::above`]). Its failures are kept in the state store: without one the promotion
//! waits, named, rather than read "none failed".

use std::time::Duration;

use jiff::Timestamp;

use super::Sources;
use super::above::Above;
use crate::image::ImageRef;
use crate::policy::ImagePolicy;
use crate::promotion::{Upstream, Verification};
use crate::verification::{self, Observed, Verdict};

/// Reads the Application `namespace/name` (namespace `None`: Argo CD's) for `policy`'s image.
pub(super) async fn read(
    shown: String,
    (name, namespace): (&str, Option<&str>),
    policy: &ImagePolicy,
    sources: &Sources<'_>,
    above: &Above<'_>,
) -> Result<Upstream, String> {
    let Some(cluster) = sources.cluster else {
        return Err(format!(
            "{shown}: an Application upstream is read from the cluster, and this cycle has no \
             access to one (applications.fromCluster)"
        ));
    };
    if sources.state.is_none() {
        return Err(format!(
            "{shown}: the tags that failed there are kept in the state store, and this cycle \
             has none (--state-dir): held tags unknown"
        ));
    }
    let namespace = namespace.unwrap_or(sources.namespace);
    let id = format!("{namespace}/{name}");
    let object = cluster
        .application(namespace, name)
        .await
        .map_err(|e| format!("{shown}: {}", crate::error_chain::chain(&e)))?
        .ok_or_else(|| format!("{shown}: no such Application"))?;
    let observed = Observed::from_application(&object)
        .map_err(|e| format!("{shown}: {}", crate::error_chain::chain(&e)))?;
    let failed = above.failed_in(&id, &policy.image);
    let Some(tag) = running_tag(&object, policy) else {
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
        None => judged(&observed, sources.now),
    };
    Ok(Upstream {
        name: shown,
        tag: Some(tag),
        since,
        verification,
    })
}

/// The one tag of the policy's image the Application's live resources run.
fn running_tag(object: &serde_json::Value, policy: &ImagePolicy) -> Option<String> {
    let images = object.pointer("/status/summary/images")?.as_array()?;
    let mut tags: Vec<String> = images
        .iter()
        .filter_map(|i| ImageRef::parse(i.as_str()?).ok())
        .filter(|r| r.repository == policy.image)
        .filter_map(|r| r.tag)
        .collect();
    tags.sort();
    tags.dedup();
    // Two tags of one image at once: a rollout under way; nothing is offered until it settles.
    match tags.len() {
        1 => tags.pop(),
        _ => None,
    }
}

/// The live status judged as issue 19's verification judges it, with no change to wait for:
/// verified at the end of its last sync, failed, or not yet.
fn judged(observed: &Observed, now: Timestamp) -> Verification {
    match verification::judge(observed, &|_| true, now, now, Duration::MAX) {
        Verdict::Verified => {
            let at = observed
                .last_operation
                .as_ref()
                .and_then(|o| o.finished_at)
                .or(observed.reconciled_at);
            match at {
                Some(at) => Verification::Verified { at },
                None => Verification::Pending,
            }
        }
        Verdict::Failed(failure) => Verification::Failed {
            reason: failure.to_string(),
        },
        Verdict::Waiting(_) => Verification::Pending,
    }
}

/// Whether a verification of `tag` is under way in the Application.
fn verifying(id: &str, tag: &str, sources: &Sources<'_>) -> Result<bool, String> {
    let Some(state) = sources.state else {
        return Ok(false);
    };
    let pending = state.verifications().map_err(|e| {
        format!(
            "verifications under way unknown: {}",
            crate::error_chain::chain(&e)
        )
    })?;
    Ok(pending
        .iter()
        .any(|v| v.application == id && v.fields.iter().any(|f| f.to == tag)))
}
