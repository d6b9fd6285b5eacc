//! A person's rollbacks, noticed before a repository target is planned: the base branch's
//! commits since the tip the last cycle planned on are read (`git::history`), the rollbacks
//! among them found (`plan::rollbacks`, pure), and held in this very plan, so the rolled-back
//! tag is not proposed again even once. The holds and the new tip are recorded once the target
//! was written ([`crate::writeback::records::record_rollbacks`]), never in a dry run.

use crate::git::{self, CommitFiles, RepositoryConfig};
use crate::holds::HeldTag;
use crate::plan::rollbacks::{self, Commit, Reading};
use crate::policy::ImagePolicy;
use crate::registry::Registry;

use super::target::TargetPlanner;

impl<R: Registry> TargetPlanner<'_, R> {
    /// The holds a person's rollbacks since the last cycle call for; none without a state store
    /// or when the branch was never seen (its first tip is only recorded).
    pub(super) fn find_rollbacks(
        &self,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> Vec<HeldTag> {
        let Some(state) = self.state else {
            return Vec::new();
        };
        let tip = files.commit();
        let Some(since) = state
            .last_seen_tip(&repository.name, &repository.branch)
            .filter(|since| *since != tip)
        else {
            return Vec::new();
        };
        let manifest = |p: &str| p.ends_with(".yaml") || p.ends_with(".yml");
        let history = match git::history::field_writes(files, &since, &manifest) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(repository = %repository.name, error = %e, "the commits since the last cycle could not be read; rollbacks in them are not noticed");
                return Vec::new();
            }
        };
        if history.since_not_found {
            tracing::warn!(repository = %repository.name, branch = %repository.branch, since = %since, read = history.commits.len(), "the tip last seen is not on the branch any more (rewritten, or moved further than one cycle reads); only the commits read are looked at for rollbacks");
        }
        let commits: Vec<Commit> = history.commits.into_iter().map(commit).collect();
        let last_own = |at: &str, path: &str| {
            git::history::last_own_write(files, at, path)
                .ok()
                .flatten()
                .map(commit)
        };
        // The Helm value paths the sources' policies name decide which values are fields.
        let mut policies: Vec<ImagePolicy> = self.policies.to_vec();
        if let Some(resolved) = self.resolved {
            let apps = resolved.apps_in(&repository.name);
            policies.extend(apps.flat_map(|(_, app)| app.policies.iter().flatten().cloned()));
        }
        // A pattern's images are named `pattern@path` in the trailers: their policies are made
        // again from the pattern.
        let instances = crate::policy::pattern::instances_named(
            self.policies,
            commits
                .iter()
                .flat_map(|c| c.policies.iter().map(String::as_str)),
        );
        let reading = Reading {
            repository: &repository.name,
            policies: &policies,
            policy: &|name| {
                self.policy(name)
                    .or_else(|| instances.iter().find(|p| p.name == name))
            },
            last_own: &last_own,
            now: self.clock.wall(),
        };
        let found = rollbacks::find(&reading, &commits);
        for held in &found {
            tracing::warn!(field = %held.key, tag = %held.tag, reason = %held.reason, "a person rolled a field back; tagpilot holds it there");
        }
        found
    }
}

fn commit(c: git::history::CommitWrite) -> Commit {
    Commit {
        commit: c.commit,
        author: c.author,
        policies: c.policies,
        files: c
            .files
            .into_iter()
            .map(|f| (f.path, f.before, f.after))
            .collect(),
    }
}
