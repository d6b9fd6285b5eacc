//! Which changes reached a base branch in a cycle: the commits it pushed there, and the pull
//! requests tagpilot kept open that have since been merged (asked of the forge once they are
//! no longer among the cycle's pull requests).
//!
//! Pull requests waiting to be merged are kept in memory and learnt again from every cycle (a
//! pull request still open is in every cycle's report, its group still planned): a pull
//! request merged while no `tagpilot run` was running is not followed.

use std::collections::BTreeSet;

use crate::change::Change;
use crate::config::repository::{Grouping, RepositoryConfig, WriteMode};
use crate::config::verify::VerifyConfig;
use crate::engine::Cycle;
use crate::forge::merged::{MergeState, merge_state};
use crate::plan::RepositoryStatus;
use crate::policy;

use super::{Verifier, chain};
use crate::run::notify::event::{Kind, Notice};

/// Changes to verify, each with the `verify:` that applies to it.
pub(in crate::run) type ToVerify = Vec<(Change, VerifyConfig)>;

/// A commit that reached a base branch, and the changes in it to verify with their `verify:`.
pub(in crate::run) struct Reached {
    pub(super) config: RepositoryConfig,
    /// The commit on the base branch: pushed, or the merge of a pull request.
    pub(super) commit: String,
    /// Where `tagpilot/verify` goes: the pushed commit, or the pull request's head.
    pub(super) status_commit: String,
    pub(super) changes: ToVerify,
}

impl Verifier {
    /// The `verify:` that applies to `change`: its policy's, else its repository's.
    fn verify_of(&self, change: &Change, policies: &policy::Loaded) -> Option<VerifyConfig> {
        let repository = self
            .repositories
            .iter()
            .find(|c| Some(c.name.as_str()) == change.repository.as_deref())?;
        policies
            .policies
            .iter()
            // A pattern's image (`shop@shop/cart`) takes the pattern policy's `verify:`.
            .find(|p| {
                p.name == change.policy
                    || policy::pattern::pattern_of(&change.policy, |n| n == p.name).is_some()
                        && p.pattern.is_some()
            })
            .and_then(|p| p.verify)
            .or(repository.verify)
    }

    /// The changes of `cycle` to `config` that are to be verified, among `of`.
    fn to_verify<'c>(
        &self,
        of: impl Iterator<Item = &'c Change>,
        policies: &policy::Loaded,
    ) -> ToVerify {
        of.filter_map(|c| self.verify_of(c, policies).map(|v| (c.clone(), v)))
            .collect()
    }

    /// The commits `cycle` pushed to a base branch, each with its changes to verify.
    pub(super) fn pushed(&self, cycle: &Cycle, policies: &policy::Loaded) -> Vec<Reached> {
        cycle
            .repositories
            .iter()
            .filter(|r| r.status == RepositoryStatus::Pushed)
            .filter_map(|r| {
                let config = self.repositories.iter().find(|c| c.name == r.repository)?;
                // A push to a branch of tagpilot's own has not reached the base branch.
                let tip = r.commits.last().filter(|_| r.branch == config.branch)?;
                let changes = self.to_verify(
                    cycle
                        .plan
                        .changes
                        .iter()
                        .filter(|c| c.repository.as_deref() == Some(config.name.as_str())),
                    policies,
                );
                (!changes.is_empty()).then(|| Reached {
                    config: config.clone(),
                    commit: tip.id.clone(),
                    status_commit: tip.id.clone(),
                    changes,
                })
            })
            .collect()
    }

    /// The pull requests awaited that are not among `seen` (the cycle's open ones) and were
    /// merged, each with its changes to verify.
    pub(super) async fn merged_since(&self, seen: &BTreeSet<(String, u64)>) -> Vec<Reached> {
        let gone: Vec<(String, u64)> = {
            let awaiting = self.awaiting.lock().unwrap_or_else(|e| e.into_inner());
            awaiting
                .keys()
                .filter(|k| !seen.contains(*k))
                .cloned()
                .collect()
        };
        let mut reached = Vec::new();
        for (repository, number) in gone {
            let Some(config) = self.repositories.iter().find(|c| c.name == repository) else {
                self.forget(&repository, number);
                continue;
            };
            match merge_state(config, number).await {
                Ok(Some(MergeState::Merged { commit, head })) => {
                    let changes = self.forget(&repository, number);
                    tracing::info!(repository = %repository, number, %commit, "pull request merged");
                    self.tell_merged(&repository, &commit, &changes);
                    reached.push(Reached {
                        config: config.clone(),
                        commit,
                        status_commit: head,
                        changes,
                    });
                }
                Ok(Some(MergeState::Open)) => {}
                Ok(Some(MergeState::Closed) | None) => {
                    self.forget(&repository, number);
                }
                // Asked again after the next cycle.
                Err(e) => tracing::warn!(
                    repository = %repository,
                    number,
                    error = %chain(&e),
                    "whether the pull request was merged is not known"
                ),
            }
        }
        reached
    }

    /// Tells the notification sinks that a pull request with `changes` was merged as `commit`.
    fn tell_merged(&self, repository: &str, commit: &str, changes: &ToVerify) {
        let now = self.clock.wall();
        let notices = changes
            .iter()
            .map(|(c, _)| {
                let mut n = Notice::new(Kind::PullRequestMerged, now);
                n.repository = Some(repository.to_string());
                n.policy = Some(c.policy.clone());
                n.image = Some(c.image.clone());
                n.from = Some(c.from.clone());
                n.to = Some(c.to.clone());
                n.link = Some(commit.to_string());
                n.with_id(None)
            })
            .collect();
        self.shared.notices.send(&self.shared, notices);
    }

    /// Remembers the open pull requests of `cycle` whose changes are to be verified; returns
    /// them.
    pub(super) fn remember_open(
        &self,
        cycle: &Cycle,
        policies: &policy::Loaded,
    ) -> BTreeSet<(String, u64)> {
        let mut seen = BTreeSet::new();
        let mut awaiting = self.awaiting.lock().unwrap_or_else(|e| e.into_inner());
        for r in &cycle.repositories {
            let Some(config) = self
                .repositories
                .iter()
                .find(|c| c.name == r.repository && c.write.mode == WriteMode::PullRequest)
            else {
                continue;
            };
            let of_repository = || {
                cycle
                    .plan
                    .changes
                    .iter()
                    .filter(|c| c.repository.as_deref() == Some(config.name.as_str()))
            };
            for pr in r.pull_requests.iter().filter(|pr| is_open(&pr.status)) {
                let Some(number) = pr.number else { continue };
                let changes = self.to_verify(
                    of_repository().filter(|c| in_group(config.write.group, &pr.group, c)),
                    policies,
                );
                if changes.is_empty() {
                    continue;
                }
                seen.insert((config.name.clone(), number));
                awaiting.insert((config.name.clone(), number), changes);
            }
        }
        seen
    }

    fn forget(&self, repository: &str, number: u64) -> ToVerify {
        self.awaiting
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(repository.to_string(), number))
            .unwrap_or_default()
    }
}

/// Whether a pull request's status in the report says it stays open.
fn is_open(status: &str) -> bool {
    !["closed", "not reopened", "failed", "would"]
        .iter()
        .any(|word| status.starts_with(word))
}

/// Whether `change` belongs to the group `key` under `grouping`.
fn in_group(grouping: Grouping, key: &str, change: &Change) -> bool {
    match grouping {
        Grouping::Repository => true,
        Grouping::Policy => change.policy == key,
        // A pattern's images (`key@path`) land in the pattern's group.
        Grouping::Pattern => {
            change.policy == key
                || policy::pattern::pattern_of(&change.policy, |p| p == key).is_some()
        }
        Grouping::Path => change.file == key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pull_request_left_open_is_awaited_and_a_closed_one_is_not() {
        for open in [
            "opened",
            "updated",
            "up to date",
            "left alone: someone else pushed",
        ] {
            assert!(is_open(open), "{open}");
        }
        for closed in [
            "closed",
            "closed as a duplicate",
            "failed: 403",
            "would open",
        ] {
            assert!(!is_open(closed), "{closed}");
        }
    }
}
