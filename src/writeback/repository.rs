//! One repository target written by its `write.mode`: `push` through the git write loop
//! ([`git::write_planned`]: fetch, plan on the tip, commit, push without force, again on a lost
//! race), `pull-request` through the forge ([`crate::forge::sync_repository`]). The planner is
//! asked inside the write, on the tip fetched, and its plan comes back beside the outcome.

use crate::git::{self, Replanner, RepoCache, RepositoryConfig, WriteMode, WriteOptions};
use crate::holds::HeldTag;
use crate::plan::RepositoryOutcome;
use crate::state::{Proposal, State};

use super::{outcome, records};

/// What a target's plan asks to be remembered once it was written.
pub trait Recorded {
    /// What each group proposes, by group key.
    fn proposals(&self) -> &[(String, Proposal)];
    /// The holds of the rollbacks a person made since the last cycle.
    fn holds_found(&self) -> &[HeldTag];
    /// The base tip the plan was made on.
    fn tip(&self) -> Option<&str>;
}

/// How one repository target is written.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// Build the commits, read the pull requests, write and remember nothing.
    pub dry_run: bool,
    /// A `git-branch` template names the branch from the changes: only the base is read until
    /// the plan names it ([`git::Planned::branch`]).
    pub branch_from_plan: bool,
    /// Where proposals and rollbacks are remembered (`--state-dir`).
    pub state: Option<&'a State>,
}

/// What became of one repository target, and the plan it was written from (`None` when it
/// failed before planning).
#[derive(Debug)]
pub struct Written<T> {
    pub outcome: RepositoryOutcome,
    pub plan: Option<T>,
}

/// Writes `repository` by its `write.mode`, planned by `planner` on the tip it fetches; then
/// remembers what was written ([`records`]).
pub async fn write_repository<P>(
    cache: &RepoCache,
    repository: &RepositoryConfig,
    planner: &P,
    target: Target<'_>,
) -> Written<P::Plan>
where
    P: Replanner,
    P::Plan: Recorded,
{
    let mut repository = repository.clone();
    if target.branch_from_plan {
        // The branch is named by the plan (`Planned::branch`); until then only the base is read.
        repository.write.branch = None;
    }
    let repository = &repository;
    let state = target.state.filter(|_| !target.dry_run);
    let written = match repository.write.mode {
        WriteMode::Push => {
            let mut report = git::write_planned(
                cache,
                repository,
                planner,
                WriteOptions {
                    dry_run: target.dry_run,
                },
            )
            .await;
            outcome::log_pushed(&report);
            let plan = report.plan.take();
            // One push carries every group: all were written, or none.
            let pushed = matches!(
                &report.result,
                Ok(o) if matches!(o.status, git::WriteStatus::Pushed { .. } | git::WriteStatus::UpToDate)
            );
            if let (Some(state), Some(plan), true) = (state, &plan, pushed) {
                records::record_written(state, &repository.name, plan.proposals(), |_| true);
            }
            Written {
                outcome: outcome::pushed(report),
                plan,
            }
        }
        WriteMode::PullRequest => {
            let mut report =
                crate::forge::sync_repository(cache, repository, planner, target.dry_run).await;
            outcome::log_pull_requests(&report);
            let plan = report.plan.take();
            if let (Some(state), Some(plan), Ok(synced)) = (state, &plan, &report.result) {
                records::record_written(
                    state,
                    &repository.name,
                    plan.proposals(),
                    records::in_pull_requests(synced),
                );
            }
            Written {
                outcome: outcome::pull_requests(report),
                plan,
            }
        }
    };
    if let (Some(state), Some(plan)) = (state, &written.plan) {
        records::record_rollbacks(state, repository, plan);
    }
    written
}
