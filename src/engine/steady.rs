//! Proposals that do not flap. With a state directory, what was last proposed for each group of
//! a repository is remembered (`crate::state`), and a new plan that would move a group
//! *backwards* from it — a field proposed at 1.3.0 last cycle, at 1.2.9 now — is held instead.
//!
//! Why: tagpilot plans a pull request from the base branch every cycle, and never-backwards in
//! selection only guards the tag a file is on. When a registry's replicas disagree (a load
//! balancer over lagging mirrors, a CDN serving an old tag list), the newest tag appears and
//! disappears, and without a memory the pull request would be rewritten to 1.2.9 and back to
//! 1.3.0 cycle after cycle, each time with a force-push and a CI run.
//!
//! The rule, per group and per (policy, file) of its last proposal: if the new proposal's tag
//! ranks below the last proposed one by the policy's own order, the whole group is held this
//! cycle (its pull request or commit left as it is), with a hold that says why. The memory is
//! kept for [`STEADY_FOR`] after the last time the proposal was made: a tag that really was
//! withdrawn stops holding the group after that. Strategies whose order cannot be read from tag
//! names (newestBuild, digest) are never held here. A held group marks the plan incomplete, so
//! its open pull request is kept, not closed as unneeded.
//!
//! A proposal is remembered only once it was written ([`record_written`]: pushed, or its pull
//! request opened or updated): a push the remote refused proposed nothing, and the next cycle
//! proposes again from scratch rather than holding against a tag nobody saw.

use crate::forge::{Action, ForgeOutcome};
use crate::git::ChangeGroup;
use crate::plan::{Hold, Plan};
use crate::policy::ImagePolicy;
use crate::select;
use crate::state::{Proposal, ProposedChange, State};

/// How long a proposal holds back a lower one.
pub const STEADY_FOR: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// Holds the groups of `repository` that would move backwards from their last proposal.
/// Returns whether any group was held. Records nothing: see [`record_written`].
pub fn hold_backwards<'p>(
    state: &State,
    repository: &str,
    groups: &mut Vec<crate::git::ChangeGroup>,
    plan: &mut Plan,
    policy: impl Fn(&str) -> Option<&'p ImagePolicy>,
    now: jiff::Timestamp,
) -> bool {
    let mut held_any = false;
    groups.retain(|group| {
        let last = state
            .last_proposal(repository, &group.key)
            .filter(|last| now.duration_since(last.at) < STEADY_FOR);
        let backwards = last
            .as_ref()
            .map(|last| backwards(group, last, &policy))
            .unwrap_or_default();
        if backwards.is_empty() {
            return true;
        }
        held_any = true;
        for (change, was) in backwards {
            let file = change.file.to_string_lossy().replace('\\', "/");
            plan.changes.retain(|c| {
                !(c.policy == change.policy
                    && c.file == file
                    && c.line == change.line
                    && c.repository.as_deref() == Some(repository))
            });
            plan.holds.push(Hold {
                repository: Some(repository.to_string()),
                policy: change.policy.clone(),
                file,
                line: change.line,
                current: change.from.clone(),
                reason: format!(
                    "{} was proposed last for group {} and the registry now offers only {}, \
                     which ranks lower (a registry replica lagging?); keeping the last proposal \
                     for up to {} rather than proposing backwards",
                    was,
                    group.key,
                    change.to,
                    humantime::format_duration(STEADY_FOR.unsigned_abs())
                ),
            });
        }
        false
    });
    held_any
}

/// The changes of `group` whose tag ranks below what `last` proposed for the same policy and
/// file, each with the tag it was.
fn backwards<'g, 'p>(
    group: &'g ChangeGroup,
    last: &Proposal,
    policy: &impl Fn(&str) -> Option<&'p ImagePolicy>,
) -> Vec<(&'g crate::git::Change, String)> {
    group
        .changes
        .iter()
        .filter_map(|c| {
            let file = c.file.to_string_lossy().replace('\\', "/");
            let was = last
                .changes
                .iter()
                .find(|l| l.policy == c.policy && l.file == file)?;
            let policy = policy(&c.policy)?;
            let lower = select::ranks_below(policy, tag_of(&c.to), tag_of(&was.to))?;
            lower.then(|| (c, was.to.clone()))
        })
        .collect()
}

/// `1.3.0` of `1.3.0@sha256:…`.
fn tag_of(version: &str) -> &str {
    version.split('@').next().unwrap_or(version)
}

/// What `groups` propose, by group, to be recorded once written.
pub fn proposals(groups: &[ChangeGroup], now: jiff::Timestamp) -> Vec<(String, Proposal)> {
    groups
        .iter()
        .map(|g| (g.key.clone(), proposal(g, now)))
        .collect()
}

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
            ) && p.changes.iter().any(|c| {
                c.policy == change.policy
                    && c.file.to_string_lossy().replace('\\', "/") == change.file
            })
        })
    }
}

fn proposal(group: &ChangeGroup, now: jiff::Timestamp) -> Proposal {
    Proposal {
        changes: group
            .changes
            .iter()
            .map(|c| ProposedChange {
                policy: c.policy.clone(),
                file: c.file.to_string_lossy().replace('\\', "/"),
                to: c.to.clone(),
            })
            .collect(),
        at: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Strategy;

    fn group(to: &str) -> ChangeGroup {
        ChangeGroup {
            key: "api".into(),
            files: [("apps/api.yaml".into(), format!("image: x:{to}\n"))].into(),
            changes: vec![crate::git::Change {
                policy: "api".into(),
                image: "x".into(),
                file: "apps/api.yaml".into(),
                line: 1,
                from: "1.2.0".into(),
                to: to.into(),
                strategy: "semver".into(),
                ..Default::default()
            }],
        }
    }

    fn plan_with(to: &str) -> Plan {
        Plan {
            changes: vec![crate::plan::Change {
                repository: Some("manifests".into()),
                policy: "api".into(),
                image: "x".into(),
                file: "apps/api.yaml".into(),
                line: 1,
                field: String::new(),
                strategy: "semver",
                from: "1.2.0".into(),
                to: to.into(),
                source: None,
            }],
            ..Plan::default()
        }
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
        assert!(!hold_backwards(
            &state,
            "manifests",
            &mut groups,
            &mut plan,
            lookup,
            t0
        ));
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
        assert!(hold_backwards(
            &state,
            "manifests",
            &mut groups,
            &mut plan,
            lookup,
            t1
        ));
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
        assert!(!hold_backwards(
            &state,
            "manifests",
            &mut groups,
            &mut plan,
            lookup,
            t1
        ));
        record_written(&state, "manifests", &proposals(&groups, t1), |_| true);

        // After the window, the registry's word stands (the tag was really withdrawn).
        let mut groups = vec![group("1.2.9")];
        let mut plan = plan_with("1.2.9");
        let late = t1 + STEADY_FOR + jiff::SignedDuration::from_mins(1);
        assert!(!hold_backwards(
            &state,
            "manifests",
            &mut groups,
            &mut plan,
            lookup,
            late
        ));
        assert_eq!(groups.len(), 1);
    }
}
