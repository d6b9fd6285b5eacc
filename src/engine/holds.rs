//! Held tags in a cycle ([`crate::holds`]): read once from the state store before planning,
//! handed to the planners as a plain value, and the rollback holds a newer tag outlived
//! released at the end. Without a state store there are no holds; with one that cannot be read
//! the holds are unknown, and the planners hold every change that could be held.

use crate::holds::Holds;
use crate::plan::Plan;
use crate::state::State;

/// The holds this cycle honours.
pub fn read(state: Option<&State>) -> Holds {
    let Some(state) = state else {
        return Holds::none();
    };
    match state.holds() {
        Ok(holds) => Holds::known(holds),
        Err(e) => Holds::unknown(e.to_string()),
    }
}

/// Releases the rollback holds this cycle's plan found outlived, unless dry-running (a plan
/// only says they end). Each is logged; the report lists them.
pub fn release_ended(state: Option<&State>, plan: &mut Plan, dry_run: bool) {
    plan.ended_holds.sort_by(|a, b| a.key.cmp(&b.key));
    plan.ended_holds.dedup();
    let Some(state) = state.filter(|_| !dry_run) else {
        return;
    };
    for held in &plan.ended_holds {
        match state.release(&held.key) {
            Ok(_) => {
                tracing::info!(field = %held.key, tag = %held.tag, reason = %held.reason, "hold released: a newer tag appeared")
            }
            Err(e) => {
                tracing::warn!(field = %held.key, error = %e, "a hold that ended could not be released")
            }
        }
    }
}
