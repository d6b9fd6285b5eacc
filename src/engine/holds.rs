//! Held tags in a cycle ([`crate::holds`]): read once from the state store before planning,
//! with the holds and releases Applications ask for by annotation, handed to the planners as a
//! plain value, and the rollback holds a newer tag outlived named at the end (the write-back
//! releases them). Without a
//! state store only the annotations hold; with one that cannot be read the holds are unknown,
//! and the planners hold every change that could be held.

use crate::argocd::resolve::{self, Resolved};
use crate::holds::{FieldKey, HeldTag, HoldReason, Holds};
use crate::plan::Plan;
use crate::state::State;

/// The holds this cycle honours. Releases asked for by annotation are applied first (unless
/// dry-running: then they are only left out of this plan). An annotation's hold is dated `now`,
/// the cycle's time.
pub fn read(
    state: Option<&State>,
    resolved: Option<&Resolved>,
    dry_run: bool,
    now: jiff::Timestamp,
) -> Holds {
    let stored = match state {
        Some(state) => state.holds(),
        None => Ok(Vec::new()),
    };
    let holds = match stored {
        Ok(mut stored) => {
            if let Some(resolved) = resolved {
                release_asked(state.filter(|_| !dry_run), resolved, &mut stored);
            }
            Holds::known(stored)
        }
        Err(e) => Holds::unknown(e.to_string()),
    };
    holds.with(resolved.map(|r| annotated(r, now)).unwrap_or_default())
}

/// `tagpilot.dev/hold`: each `<alias>=<tag>` holds that tag for every field of the alias's
/// policy, for as long as the annotation is there.
fn annotated(resolved: &Resolved, since: jiff::Timestamp) -> Vec<HeldTag> {
    let mut out = Vec::new();
    for app in &resolved.apps {
        for request in &app.annotations.holds {
            out.push(HeldTag {
                key: FieldKey::whole_policy(resolve::policy_name(&app.app, &request.alias)),
                tag: request.tag.clone(),
                reason: HoldReason::Manual {
                    by: format!("tagpilot.dev/hold on Application {}", app.app.id()),
                },
                since,
            });
        }
    }
    out
}

/// `tagpilot.dev/release-hold`: each `<alias>=<tag>` releases the holds on the alias's policy
/// whose tag it names, from the store (`state`, unless dry-running) and from `stored`.
fn release_asked(state: Option<&State>, resolved: &Resolved, stored: &mut Vec<HeldTag>) {
    for app in &resolved.apps {
        for request in &app.annotations.releases {
            let policy = resolve::policy_name(&app.app, &request.alias);
            stored.retain(|held| {
                let asked = held.key.policy == policy && held.tag == request.tag;
                if !asked {
                    return true;
                }
                tracing::info!(field = %held.key, tag = %held.tag, reason = %held.reason, application = %app.app.id(), "hold released by tagpilot.dev/release-hold");
                if let Some(state) = state
                    && let Err(e) = state.release(&held.key)
                {
                    tracing::warn!(field = %held.key, error = %e, "a hold the annotation releases could not be released in the store");
                }
                false
            });
        }
    }
}

/// The rollback holds this cycle's plan found outlived, each once; released in the store by
/// the write-back ([`crate::writeback::records::release_ended`]), unless dry-running.
pub fn ended(plan: &mut Plan) {
    plan.ended_holds.sort_by(|a, b| a.key.cmp(&b.key));
    plan.ended_holds.dedup();
}
