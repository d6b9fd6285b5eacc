//! What a write leaves to remember, in the state store, once it was written and never in a dry
//! run:
//! - each group's proposal ([`record_written`]: pushed, or its pull request opened or updated),
//!   which [`crate::plan::steady`] reads next cycle so proposals do not flap. A push the remote
//!   refused proposed nothing, and the next cycle proposes again from scratch rather than
//!   holding against a tag nobody saw;
//! - the holds of a person's rollbacks the plan noticed, and the base tip it was planned on, so
//!   the next cycle reads only the commits after it ([`record_rollbacks`]);
//! - the rollback holds a newer tag outlived, released ([`release_ended`]).

use crate::config::repository::RepositoryConfig;
use crate::forge::{Action, ForgeOutcome};
use crate::holds::HeldTag;
use crate::state::{Proposal, ProposedChange, State};

use super::Recorded;

/// Records as the last proposal of its group each of `proposals` that `written` says reached
/// the remote (every change of it, by policy and file).
pub fn record_written(
    state: &State,
    repository: &str,
    proposals: &[(String, Proposal)],
    written: impl Fn(&ProposedChange) -> bool,
) {
    for (group, proposal) in proposals {
        if !proposal.changes.is_empty() && proposal.changes.iter().all(&written) {
            state.record_proposal(repository, group, proposal);
        }
    }
}

/// Whether a pull request of `synced` carries `change` and was written: opened, taken over,
/// updated or already up to date. A failed, blocked or declined one proposed nothing.
pub fn in_pull_requests(synced: &ForgeOutcome) -> impl Fn(&ProposedChange) -> bool + '_ {
    |change| {
        synced.pull_requests.iter().any(|p| {
            matches!(
                p.action,
                Action::Opened | Action::TakenOver | Action::Updated { .. } | Action::UpToDate
            ) && p
                .changes
                .iter()
                .any(|c| c.policy == change.policy && c.file.replace('\\', "/") == change.file)
        })
    }
}

/// Records what planning `repository` found: the holds of the rollbacks it noticed (durable at
/// once), then the tip it planned on, so the next cycle reads only the commits after it.
pub fn record_rollbacks(state: &State, repository: &RepositoryConfig, plan: &impl Recorded) {
    for held in plan.holds_found() {
        if let Err(e) = state.hold(held) {
            tracing::warn!(field = %held.key, error = %e, "a person's rollback could not be held in the state store");
            // The tip is not recorded: the next cycle reads these commits again.
            return;
        }
    }
    if let Some(tip) = plan.tip() {
        state.record_seen_tip(&repository.name, &repository.branch, tip);
    }
}

/// Releases the rollback holds a plan found outlived, unless dry-running (a plan only says
/// they end). Each is logged; the report lists them.
pub fn release_ended(state: Option<&State>, ended: &[HeldTag], dry_run: bool) {
    let Some(state) = state.filter(|_| !dry_run) else {
        return;
    };
    for held in ended {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::ChangeGroup;
    use crate::change::Stacking;
    use crate::plan::Plan;
    use crate::plan::steady::fixtures::{group, plan_with};
    use crate::plan::steady::{Memory, STEADY_FOR, Steady, proposals};
    use crate::policy::{ImagePolicy, Strategy};

    /// `plan::steady` holding each group on its own with the store's last proposals of
    /// `manifests`.
    fn hold<'p>(
        state: &State,
        groups: &mut Vec<ChangeGroup>,
        plan: &mut Plan,
        policy: impl Fn(&str) -> Option<&'p ImagePolicy>,
        now: jiff::Timestamp,
    ) -> bool {
        let memory = Memory {
            repository: "manifests",
            last_proposal: &|group| state.last_proposal("manifests", group),
            policy: &policy,
            now,
        };
        let steady = Steady::of(&memory, groups);
        steady.hold(groups, Stacking::Alone, plan).held
    }

    #[test]
    fn only_a_pull_request_that_was_written_records_its_proposal() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let proposed = proposals(&[group("1.3.0")], t0);
        let synced = |action| ForgeOutcome {
            repository: "manifests".into(),
            base: "main".into(),
            base_commit: String::new(),
            dry_run: false,
            pull_requests: vec![crate::forge::PullRequestOutcome {
                forge: crate::forge::ForgeKind::GitHub,
                group: "api".into(),
                branch: "tagpilot/api".into(),
                action,
                number: Some(7),
                url: None,
                changes: group("1.3.0").changes,
                warnings: Vec::new(),
            }],
        };
        for refused in [
            Action::Failed {
                error: "422 Unprocessable Entity".into(),
            },
            Action::Blocked { tip: "abc".into() },
            Action::Declined { closed: 3 },
        ] {
            let outcome = synced(refused);
            record_written(&state, "manifests", &proposed, in_pull_requests(&outcome));
            assert_eq!(state.last_proposal("manifests", "api"), None);
        }
        let outcome = synced(Action::Opened);
        record_written(&state, "manifests", &proposed, in_pull_requests(&outcome));
        assert_eq!(
            state.last_proposal("manifests", "api"),
            Some(proposed[0].1.clone())
        );
    }

    #[test]
    fn a_proposal_never_moves_backwards_within_the_window_and_does_after_it() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let policy = ImagePolicy::adhoc("x", Strategy::semver(None, false).unwrap()).unwrap();
        let lookup = |_: &str| Some(&policy);
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();

        // Cycle 1 proposes 1.3.0, and its write fails: nothing is recorded.
        let mut groups = vec![group("1.3.0")];
        let mut plan = plan_with("1.3.0");
        assert!(!hold(&state, &mut groups, &mut plan, lookup, t0));
        assert_eq!(groups.len(), 1);
        record_written(&state, "manifests", &proposals(&groups, t0), |_| false);
        assert_eq!(state.last_proposal("manifests", "api"), None);
        // Written this time: recorded.
        record_written(&state, "manifests", &proposals(&groups, t0), |_| true);
        assert!(state.last_proposal("manifests", "api").is_some());

        // Cycle 2: a lagging replica lists up to 1.2.9 only: the group is held, said why.
        let mut groups = vec![group("1.2.9")];
        let mut plan = plan_with("1.2.9");
        let t1 = t0 + jiff::SignedDuration::from_mins(2);
        assert!(hold(&state, &mut groups, &mut plan, lookup, t1));
        assert!(groups.is_empty() && plan.changes.is_empty());
        assert_eq!(plan.holds.len(), 1);
        assert!(
            plan.holds[0].reason.contains("1.3.0 was proposed last"),
            "{:?}",
            plan.holds
        );

        // Forward is always fine, and becomes the new memory.
        let mut groups = vec![group("1.4.0")];
        let mut plan = plan_with("1.4.0");
        assert!(!hold(&state, &mut groups, &mut plan, lookup, t1));
        record_written(&state, "manifests", &proposals(&groups, t1), |_| true);

        // After the window, the registry's word stands (the tag was really withdrawn).
        let mut groups = vec![group("1.2.9")];
        let mut plan = plan_with("1.2.9");
        let late = t1 + STEADY_FOR + jiff::SignedDuration::from_mins(1);
        assert!(!hold(&state, &mut groups, &mut plan, lookup, late));
        assert_eq!(groups.len(), 1);
    }
}
