//! Proposals that do not flap: the decision. What was last proposed for each group of a
//! repository is remembered (`tagpilot run --state-dir`), and a new plan that would move a
//! group *backwards* from it — a field proposed at 1.3.0 last cycle, at 1.2.9 now — is held
//! instead.
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
//! Pure: the last proposals come in as a lookup, and what is proposed goes back as data. The
//! engine reads and records them in the state store, a proposal only once it was written.

use super::model::{Hold, Plan};
use super::reasons::HoldReason;
use crate::change::{Change, ChangeGroup, Proposal};
use crate::policy::ImagePolicy;
use crate::select;

/// How long a proposal holds back a lower one.
pub const STEADY_FOR: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// What [`hold_backwards`] needs besides the groups and the plan: the repository, the last
/// proposal of a group (by key), the policy of a change (by name), and the time now.
pub struct Memory<'a, 'p> {
    pub repository: &'a str,
    pub last_proposal: &'a dyn Fn(&str) -> Option<Proposal>,
    pub policy: &'a dyn Fn(&str) -> Option<&'p ImagePolicy>,
    pub now: jiff::Timestamp,
}

/// Holds the groups that would move backwards from their last proposal: each is dropped from
/// `groups`, and its backward changes move from the plan's changes to its holds. Returns
/// whether any group was held.
pub fn hold_backwards(
    memory: &Memory<'_, '_>,
    groups: &mut Vec<ChangeGroup>,
    plan: &mut Plan,
) -> bool {
    let repository = memory.repository;
    let mut held_any = false;
    groups.retain(|group| {
        let last = (memory.last_proposal)(&group.key)
            .filter(|last| memory.now.duration_since(last.at) < STEADY_FOR);
        let backwards = last
            .as_ref()
            .map(|last| backwards(group, last, memory.policy))
            .unwrap_or_default();
        if backwards.is_empty() {
            return true;
        }
        held_any = true;
        for (change, was) in backwards {
            let file = change.file.replace('\\', "/");
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
                reason: HoldReason::Steady {
                    was,
                    group: group.key.clone(),
                    offered: change.to.clone(),
                },
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
    policy: &dyn Fn(&str) -> Option<&'p ImagePolicy>,
) -> Vec<(&'g Change, String)> {
    group
        .changes
        .iter()
        .filter_map(|c| {
            let file = c.file.replace('\\', "/");
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
        .map(|g| (g.key.clone(), Proposal::of(g, now)))
        .collect()
}

/// The group and plan the steady-proposal tests hold (here and in the engine's, where the
/// store keeps the last proposal): `api` moving `x` in `apps/api.yaml` from 1.2.0 to `to`.
#[cfg(test)]
pub(crate) mod fixtures {
    use crate::change::{Change, ChangeGroup};
    use crate::plan::Plan;

    pub(crate) fn group(to: &str) -> ChangeGroup {
        ChangeGroup {
            applications: Vec::new(),
            key: "api".into(),
            files: [("apps/api.yaml".into(), format!("image: x:{to}\n"))].into(),
            changes: vec![Change {
                policy: "api".into(),
                image: "x".into(),
                file: "apps/api.yaml".into(),
                line: 1,
                from: "1.2.0".into(),
                to: to.into(),
                strategy: "semver",
                ..Default::default()
            }],
        }
    }

    pub(crate) fn plan_with(to: &str) -> Plan {
        Plan {
            changes: vec![Change {
                repository: Some("manifests".into()),
                ..group(to).changes[0].clone()
            }],
            ..Plan::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{group, plan_with};
    use super::*;
    use crate::policy::Strategy;

    /// Holds `to` against a last proposal of 1.3.0 made at `at`, as seen at `now`.
    fn hold(to: &str, at: jiff::Timestamp, now: jiff::Timestamp) -> (bool, Vec<ChangeGroup>, Plan) {
        let policy = ImagePolicy::adhoc("x", Strategy::semver(None, false).unwrap()).unwrap();
        let last = proposals(&[group("1.3.0")], at).remove(0).1;
        let memory = Memory {
            repository: "manifests",
            last_proposal: &|key| (key == "api").then(|| last.clone()),
            policy: &|_| Some(&policy),
            now,
        };
        let mut groups = vec![group(to)];
        let mut plan = plan_with(to);
        let held = hold_backwards(&memory, &mut groups, &mut plan);
        (held, groups, plan)
    }

    #[test]
    fn a_lower_tag_than_the_last_proposal_holds_its_group_and_says_why() {
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let (held, groups, plan) = hold("1.2.9", t0, t0 + jiff::SignedDuration::from_mins(2));
        assert!(held);
        assert!(groups.is_empty() && plan.changes.is_empty());
        assert_eq!(plan.holds.len(), 1);
        assert_eq!(plan.holds[0].current, "1.2.0");
        assert!(
            plan.holds[0]
                .reason
                .to_string()
                .contains("1.3.0 was proposed last for group api"),
            "{:?}",
            plan.holds
        );
    }

    #[test]
    fn the_same_or_a_higher_tag_and_an_old_memory_hold_nothing() {
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        for (to, now) in [
            ("1.3.0", t0),
            ("1.4.0", t0),
            (
                "1.2.9",
                t0 + STEADY_FOR + jiff::SignedDuration::from_mins(1),
            ),
        ] {
            let (held, groups, plan) = hold(to, t0, now);
            assert!(!held, "{to} at {now}");
            assert_eq!(groups.len(), 1);
            assert_eq!(plan.changes.len(), 1);
            assert!(plan.holds.is_empty());
        }
    }

    #[test]
    fn proposals_name_each_group_by_key_with_its_changes() {
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let proposed = proposals(&[group("1.3.0")], t0);
        assert_eq!(proposed.len(), 1);
        assert_eq!(proposed[0].0, "api");
        assert_eq!(proposed[0].1.at, t0);
        assert_eq!(
            proposed[0].1.changes,
            [crate::change::ProposedChange {
                policy: "api".into(),
                file: "apps/api.yaml".into(),
                to: "1.3.0".into(),
            }]
        );
    }
}
