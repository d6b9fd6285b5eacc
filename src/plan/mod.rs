//! The planner: from a tree of manifests (a directory, or a commit read from git, behind
//! [`crate::files::Files`]), the policies and a registry, the complete set of edits tagpilot
//! would make, held in memory.
//!
//! Plan first, write last: nothing here writes a file. `tagpilot plan` renders a [`Plan`];
//! `tagpilot apply` renders it and then writes [`Plan::files`]. A problem with one policy, file
//! or repository is recorded in the plan and the rest is still planned.
//!
//! Registry traffic is bounded by design: each distinct repository is listed once however many
//! policies and files name it, and each (repository, tag) is inspected at most once per plan.
//!
//! - [`model`]: what a plan holds (changes, holds, problems, file updates, outcomes).
//! - [`reasons`]: why a field is held and why a promotion waits, typed; words at the edges.
//! - [`walk`]: the planner proper: scan the files, match fields to policies, decide, edit.
//! - [`index`]: which policies may touch a file or own a field, without trying them all.
//! - [`decide`]: one reference's decision, and the registry look-ups behind it.
//! - [`groups`]: a plan split into change groups for commits and pull requests.
//! - [`merge`]: several sources' plans of one checkout joined into one.
//! - [`revert`]: the reverse of a failed update, field by field (never a `git revert`).
//! - [`steady`]: which groups to hold rather than propose backwards from their last proposal.
//! - [`tags`]: `tagpilot tags`, an image's tags in a policy's order, and which configured
//!   policy it uses.

mod decide;
mod groups;
mod index;
pub mod merge;
pub mod model;
mod reasons;
pub mod revert;
pub mod rollbacks;
pub mod steady;
pub mod tags;
mod walk;

#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod pattern_tests;
#[cfg(test)]
mod rollbacks_tests;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use reasons::{HoldReason, ProblemReason, Side, Stance, Wait};

pub use decide::{
    DecideError, Inspector, Outcome, decide_reference, version_reference, version_text,
};
pub use model::{
    Change, Claim, CommitSummary, DiffTarget, FileUpdate, Finding, FindingKind, Hold, Plan,
    Problem, Promotion, PromotionStatus, PullRequestSummary, RepositoryOutcome, RepositoryStatus,
    SKIPPED_TAGS_SHOWN, Severity, SkipKind, SkippedFile, SkippedTag, SkippedTags, TargetDiff,
    UpstreamRun,
};
pub use walk::{
    MAX_MANIFEST_BYTES, Veto, plan, plan_files, plan_files_held, plan_files_promoted, policy_order,
    survey, survey_files, unknown_holds, veto,
};

/// How many registry requests the planner keeps in flight at once. The registry client applies
/// per-registry rate limits underneath; this only bounds fan-out.
const REGISTRY_CONCURRENCY: usize = 16;

#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("manifest directory")]
    Files(#[from] crate::files::FilesError),
}

/// Reports progress to whoever is watching (a terminal spinner in the CLI, nothing in tests).
pub trait Progress: Sync {
    fn phase(&self, _name: &str, _total: u64) {}
    fn advance(&self) {}
    fn done(&self) {}
}

impl Progress for () {}

/// Where a plan of a local directory looks: the directory, and which repository it is (targets
/// name repositories; a target without one means the local directory). A tree read from git is
/// planned with [`plan_files`].
#[derive(Debug, Clone, Default)]
pub struct Scope {
    pub root: PathBuf,
    /// The `repositories[].name` this root is a checkout of; `None` for the local directory.
    pub repository: Option<String>,
    /// Files to leave out: tagpilot's own config and policy files when they live under the root
    /// (they are YAML, but not manifests).
    pub exclude: Vec<PathBuf>,
    /// The held tags the plan honours ([`crate::holds`]).
    pub holds: crate::holds::Holds,
    /// What the promoting policies' upstreams run ([`crate::promotion`]).
    pub promotions: crate::promotion::Promotions,
}

impl Scope {
    pub fn local(root: impl Into<PathBuf>) -> Self {
        Scope {
            root: root.into(),
            ..Scope::default()
        }
    }
}
