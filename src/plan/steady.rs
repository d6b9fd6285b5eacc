//! Proposals that do not flap: the decision. What was last proposed for each policy group of a
//! repository is remembered (`tagpilot run --state-dir`), and a new plan that would move a
//! field *backwards* from it — a field proposed at 1.3.0 last cycle, at 1.2.9 now — is held
//! instead.
//!
//! Why: tagpilot plans a pull request from the base branch every cycle, and never-backwards in
//! selection only guards the tag a file is on. When a registry's replicas disagree (a load
//! balancer over lagging mirrors, a CDN serving an old tag list), the newest tag appears and
//! disappears, and without a memory the pull request would be rewritten to 1.2.9 and back to
//! 1.3.0 cycle after cycle, each time with a force-push and a CI run.
//!
//! Two sets of groups meet here, and each question is asked of the right one:
//! - **The memory is per policy group** (one per policy, or per Application whose own file is
//!   written), whatever `write.group` commits: it is about a policy's own moves, and it must
//!   survive a change of `write.group`. [`Steady::of`] reads it on the planner's groups: per
//!   (policy, file) of a group's last proposal, a new tag that ranks below the one proposed
//!   last by the policy's own order goes back on it.
//! - **A hold is per committed group** ([`Steady::hold`], on the groups of
//!   [`crate::change::group`]): a commit or pull request is written whole or not at all, so the
//!   group that carries a backward change is held whole, its pull request or commit left as it
//!   is. Holding only the backward change out of a merged group (`write.group: repository` or
//!   `path`) would rewrite that pull request without the field, which moves it back to the base
//!   tag: the very flap this prevents; and a file's text in the group carries every change made
//!   to it, so one change cannot be taken out of it without planning again. The group's other changes wait with it, each a hold that
//!   names the change that held it: nothing it carries is dropped silently. Groups that stack
//!   (commits on one branch) carry every earlier group's edits of a file, so a later group that
//!   changes a file of a held one is held too.
//!
//! The memory is kept for [`STEADY_FOR`] after the last time the proposal was made: a tag that
//! really was withdrawn stops holding after that. Strategies whose order cannot be read from
//! tag names (newestBuild, digest) are never held here. A held group marks the plan
//! incomplete, so its open pull request is kept, not closed as unneeded. A policy group with a
//! held change records no new proposal: its last one, still on the pull request, stays the
//! memory.
//!
//! Pure: the last proposals come in as a lookup, and what is proposed goes back as data. The
//! engine reads and records them in the state store, a proposal only once it was written.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use super::model::{Hold, Plan};
use crate::change::{Change, ChangeGroup, Proposal, Stacking};
use crate::policy::ImagePolicy;
use crate::select;

/// How long a proposal holds back a lower one.
pub const STEADY_FOR: jiff::SignedDuration = jiff::SignedDuration::from_hours(1);

/// What [`Steady::of`] needs besides the groups: the repository, the last proposal of a
/// policy group (by key), the policy of a change (by name), and the time now.
pub struct Memory<'a, 'p> {
    pub repository: &'a str,
    pub last_proposal: &'a dyn Fn(&str) -> Option<Proposal>,
    pub policy: &'a dyn Fn(&str) -> Option<&'p ImagePolicy>,
    pub now: jiff::Timestamp,
}

/// A change that ranks below what its policy group proposed last for the same field.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Backward {
    /// The policy group whose last proposal it goes back on.
    group: String,
    policy: String,
    /// `/`-separated.
    file: String,
    line: usize,
    to: String,
    /// The tag proposed last.
    was: String,
}

impl Backward {
    fn is(&self, change: &Change) -> bool {
        change.policy == self.policy
            && change.line == self.line
            && change.file.replace('\\', "/") == self.file
    }
}

/// What the memory says of a target's policy groups: the changes that go back on a proposal,
/// and what each group proposes now, to be recorded once written.
#[derive(Debug, Default)]
pub struct Steady {
    repository: String,
    backward: Vec<Backward>,
    proposals: Vec<(String, Proposal)>,
}

/// What holding left: whether any committed group was held, and the proposals of the policy
/// groups none of whose changes were, to be recorded once written.
#[derive(Debug, Default)]
pub struct Settled {
    pub held: bool,
    pub proposals: Vec<(String, Proposal)>,
}

impl Steady {
    /// Reads the memory of each of the planner's policy `groups` (before `write.group` joins
    /// or splits them).
    pub fn of(memory: &Memory<'_, '_>, groups: &[ChangeGroup]) -> Steady {
        let mut backward = Vec::new();
        for group in groups {
            let last = (memory.last_proposal)(&group.key)
                .filter(|last| memory.now.duration_since(last.at) < STEADY_FOR);
            if let Some(last) = last {
                backward.extend(backwards(group, &last, memory.policy));
            }
        }
        Steady {
            repository: memory.repository.to_owned(),
            backward,
            proposals: proposals(groups, memory.now),
        }
    }

    /// Holds each committed group (`groups`, as [`crate::change::group`] made them, stacking
    /// as `stacking` says) that carries a backward change, or that stacks on a held group's
    /// file: it is dropped from `groups`, and each of its changes moves from the plan's changes
    /// to its holds, saying why.
    pub fn hold(
        self,
        groups: &mut Vec<ChangeGroup>,
        stacking: Stacking,
        plan: &mut Plan,
    ) -> Settled {
        let repository = self.repository.as_str();
        // A held group's files, with the group, when the groups after it carry its edits.
        let mut carried: BTreeMap<PathBuf, String> = BTreeMap::new();
        let mut held: HashSet<(String, String)> = HashSet::new();
        groups.retain(|group| {
            let own: Vec<&Backward> = self
                .backward
                .iter()
                .filter(|b| group.changes.iter().any(|c| b.is(c)))
                .collect();
            let under = group
                .files
                .keys()
                .find_map(|path| Some((path, carried.get(path)?.clone())));
            if own.is_empty() && under.is_none() {
                return true;
            }
            for change in &group.changes {
                let reason = match (own.iter().find(|b| b.is(change)), own.first(), &under) {
                    (Some(b), _, _) => going_back(b),
                    (None, Some(b), _) => held_with(&group.key, b),
                    (None, None, Some((path, by))) => stacked_on(by, path),
                    (None, None, None) => unreachable!("a held group has a reason"),
                };
                let file = change.file.replace('\\', "/");
                plan.changes.retain(|c| {
                    !(c.policy == change.policy
                        && c.file == file
                        && c.line == change.line
                        && c.repository.as_deref() == Some(repository))
                });
                held.insert((change.policy.clone(), file.clone()));
                plan.holds.push(Hold {
                    repository: Some(repository.to_string()),
                    policy: change.policy.clone(),
                    file,
                    line: change.line,
                    current: change.from.clone(),
                    reason,
                });
            }
            if stacking == Stacking::Stacked {
                for path in group.files.keys() {
                    carried
                        .entry(path.clone())
                        .or_insert_with(|| group.key.clone());
                }
            }
            false
        });
        let proposals = self
            .proposals
            .into_iter()
            .filter(|(_, p)| {
                !p.changes
                    .iter()
                    .any(|c| held.contains(&(c.policy.clone(), c.file.clone())))
            })
            .collect();
        Settled {
            held: !held.is_empty(),
            proposals,
        }
    }
}

/// Why a backward change is held.
fn going_back(b: &Backward) -> String {
    format!(
        "{} was proposed last for group {} and the registry now offers only {}, \
         which ranks lower (a registry replica lagging?); keeping the last proposal \
         for up to {} rather than proposing backwards",
        b.was,
        b.group,
        b.to,
        humantime::format_duration(STEADY_FOR.unsigned_abs())
    )
}

/// Why a change waits with a backward one committed in the same group.
fn held_with(group: &str, b: &Backward) -> String {
    format!(
        "committed in group {group} with policy {}'s change of {}, which is held rather than \
         proposed backwards ({} was proposed last, {} is offered now): the group waits whole",
        b.policy, b.file, b.was, b.to
    )
}

/// Why a group that stacks on a held one's file waits.
fn stacked_on(group: &str, path: &std::path::Path) -> String {
    format!(
        "its commit carries the edits of {} made by group {group}, which is held: it waits \
         with it",
        path.to_string_lossy().replace('\\', "/")
    )
}

/// The changes of `group` whose tag ranks below what `last` proposed for the same policy and
/// file.
fn backwards<'p>(
    group: &ChangeGroup,
    last: &Proposal,
    policy: &dyn Fn(&str) -> Option<&'p ImagePolicy>,
) -> Vec<Backward> {
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
            lower.then(|| Backward {
                group: group.key.clone(),
                policy: c.policy.clone(),
                file,
                line: c.line,
                to: c.to.clone(),
                was: was.to.clone(),
            })
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
        let steady = Steady::of(&memory, &groups);
        let held = steady.hold(&mut groups, Stacking::Alone, &mut plan).held;
        (held, groups, plan)
    }

    /// `api` going back from 1.3.0 to 1.2.9 in `a.yaml`, `web` moving on in `web_file`, and
    /// `db` in `db.yaml`; what `grouping` commits, stacking as `stacking` says, once held.
    fn hold_committed(
        grouping: crate::config::repository::Grouping,
        stacking: Stacking,
        web_file: &str,
    ) -> (Settled, Vec<ChangeGroup>, Plan) {
        use crate::change::fixtures::{change, group as group_of};
        let policy = ImagePolicy::adhoc("x", Strategy::semver(None, false).unwrap()).unwrap();
        let t0: jiff::Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let api = change("api", "a.yaml", "1.2.0", "1.2.9");
        let web = change("web", web_file, "2.0.0", "2.1.0");
        let db = change("db", "db.yaml", "3.0.0", "3.1.0");
        let mut web_files = vec![(web_file, "web")];
        if web_file == "a.yaml" {
            // Stacked on api's group, its text carries api's edit.
            web_files = vec![("a.yaml", "api+web")];
        }
        let groups = vec![
            group_of("api", &[("a.yaml", "api")], vec![api.clone()]),
            group_of("web", &web_files, vec![web.clone()]),
            group_of("db", &[("db.yaml", "db")], vec![db.clone()]),
        ];
        let last = proposals(
            &[group_of(
                "api",
                &[("a.yaml", "api")],
                vec![change("api", "a.yaml", "1.2.0", "1.3.0")],
            )],
            t0,
        )
        .remove(0)
        .1;
        let memory = Memory {
            repository: "manifests",
            last_proposal: &|key| (key == "api").then(|| last.clone()),
            policy: &|_| Some(&policy),
            now: t0 + jiff::SignedDuration::from_mins(2),
        };
        let mut plan = Plan {
            changes: [api, web, db]
                .into_iter()
                .map(|c| Change {
                    repository: Some("manifests".into()),
                    ..c
                })
                .collect(),
            ..Plan::default()
        };
        let steady = Steady::of(&memory, &groups);
        let mut committed = crate::change::group("manifests", grouping, groups);
        let settled = steady.hold(&mut committed, stacking, &mut plan);
        (settled, committed, plan)
    }

    fn reasons_of(plan: &Plan) -> Vec<(&str, &str)> {
        plan.holds
            .iter()
            .map(|h| (h.policy.as_str(), h.reason.as_str()))
            .collect()
    }

    #[test]
    fn a_merged_group_with_a_backward_change_is_held_whole_and_names_what_waits_with_it() {
        use crate::config::repository::Grouping;
        let (settled, committed, plan) =
            hold_committed(Grouping::Repository, Stacking::Stacked, "web.yaml");
        assert!(settled.held);
        // Rewriting the pull request without api's field would move it back to the base tag.
        assert!(
            committed.is_empty() && plan.changes.is_empty(),
            "{committed:?}"
        );
        let reasons = reasons_of(&plan);
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(
            reasons[0].0 == "api"
                && reasons[0]
                    .1
                    .contains("1.3.0 was proposed last for group api")
        );
        for (policy, reason) in &reasons[1..] {
            assert!(
                reason
                    .starts_with("committed in group manifests with policy api's change of a.yaml")
                    && reason.contains("1.3.0 was proposed last, 1.2.9 is offered now"),
                "{policy}: {reason}"
            );
        }
        // Nothing was written: no memory moves, api's 1.3.0 stays the one to hold against.
        assert!(settled.proposals.is_empty(), "{:?}", settled.proposals);

        // One group per file: only the file with the backward change waits.
        let (settled, committed, plan) =
            hold_committed(Grouping::Path, Stacking::Stacked, "web.yaml");
        let keys: Vec<&str> = committed.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["db.yaml", "web.yaml"]);
        assert_eq!(reasons_of(&plan).len(), 1);
        let recorded: Vec<&str> = settled.proposals.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(recorded, ["web", "db"]);
    }

    #[test]
    fn a_group_stacked_on_a_held_groups_file_waits_with_it_and_one_alone_does_not() {
        use crate::config::repository::Grouping;
        // Commits on one branch: web's text of a.yaml carries api's backward edit.
        let (settled, committed, plan) =
            hold_committed(Grouping::Policy, Stacking::Stacked, "a.yaml");
        let keys: Vec<&str> = committed.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["db"]);
        let reasons = reasons_of(&plan);
        assert_eq!(reasons.len(), 2, "{reasons:?}");
        assert_eq!(reasons[1].0, "web");
        assert!(
            reasons[1]
                .1
                .contains("carries the edits of a.yaml made by group api, which is held"),
            "{reasons:?}"
        );
        assert_eq!(plan.changes.len(), 1);
        let recorded: Vec<&str> = settled.proposals.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(recorded, ["db"]);

        // A pull request per policy starts from the base: web's carries only its own edit.
        let (settled, committed, plan) =
            hold_committed(Grouping::Policy, Stacking::Alone, "a.yaml");
        let keys: Vec<&str> = committed.iter().map(|g| g.key.as_str()).collect();
        assert_eq!(keys, ["web", "db"]);
        assert_eq!(reasons_of(&plan).len(), 1);
        assert_eq!(settled.proposals.len(), 2);
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
