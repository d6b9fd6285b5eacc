//! The revert writer (issue 19, on failure: `revert`): after an update failed verification,
//! tagpilot writes the reverse change. Verification in `tagpilot run` decides when; this module
//! writes it.
//!
//! The call is [`revert`]`(cache, repository, failed)`: the clone cache the service keeps; a
//! revert needs no registry, it writes back the values the update replaced.
//! - [`FailedUpdate`] is what failed: the update's changes as the plan made them (the one change
//!   model, [`Change`]), the commit that brought them to the base branch, the Application and
//!   the failure's text (its health message included).
//! - [`RevertOutcome`] is what was written ([`RevertWrite`]: the commit pushed, the pull request
//!   opened, or nothing when no field is to be set back), the reverse changes, and the fields
//!   left because they moved on since ([`LeftField`], each naming file and field).
//!
//! It restores the previous value of exactly the fields the update changed
//! ([`crate::plan::revert`], planned on the base branch's tip), never a `git revert`, which would
//! also undo a person's unrelated edits. Writing goes by the repository's `write.mode`:
//! - `push`: one commit on the base branch (also when `write.branch` names a branch of
//!   tagpilot's: the failed change is on the base, so the revert goes there), through the same
//!   write loop as updates ([`git::write_planned`]: fetch, plan on the tip, push without force,
//!   and on a lost race fetch and plan again).
//! - `pull-request`: a pull request from tagpilot's branch `tagpilot/revert-<commit>`, labelled
//!   `write.revertLabels` (default [`forge::revert::DEFAULT_REVERT_LABEL`]), whose body says
//!   what failed and quotes the failure ([`forge::revert`]).
//!
//! The commit's message says what it reverts and why, and ends in tagpilot's trailers: a
//! `Tagpilot-Policy:` per policy, so it is recognised as tagpilot's (not as a person's rollback),
//! and `Tagpilot-Revert: <commit>` naming the commit reverted. `write.commitMessage` is not used
//! for it. Holding the failed tag is the caller's part (the state store's `hold`).

use std::convert::Infallible;

use crate::change::{Change, ChangeGroup};
use crate::config::repository::{Grouping, RepositoryConfig, WriteMode};
use crate::forge::revert::{
    DEFAULT_REVERT_LABEL, FailedText, RevertProposal, RevertRequest, revert_body, revert_title,
};
use crate::forge::{self, ForgeError, ForgeKind};
use crate::git::{
    self, CommitFiles, GitError, Planned, Replanner, RepoCache, WriteOptions, WriteStatus,
};
use crate::plan::revert::{LeftField, ReversePlan, plan_revert};

pub use crate::git::REVERT_TRAILER;

/// An update that failed verification, as [`revert`] needs it.
#[derive(Debug, Clone)]
pub struct FailedUpdate {
    /// The changes the update made, as planned (file, field, from, to).
    pub changes: Vec<Change>,
    /// The commit that brought them to the base branch (a push, or a pull request's merge).
    pub commit: String,
    /// The Application that did not become healthy (`namespace/name`).
    pub application: String,
    /// Why: the verification failure's text, the health message included.
    pub failure: String,
    /// The Applications known when it failed (the cluster's, as verification lists them): the
    /// revert names those whose sources contain its files, as an update does
    /// ([`crate::affected`]). Empty when none are known.
    pub deployers: Vec<crate::application::Application>,
}

/// What [`revert`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertOutcome {
    pub repository: String,
    pub written: RevertWrite,
    /// The reverse changes written (from the failed tag back to the previous one).
    pub reverted: Vec<Change>,
    /// The failed changes whose field was left, each with why (moved on since, gone, …).
    pub left: Vec<LeftField>,
}

/// How a revert was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevertWrite {
    /// One commit on the base branch.
    Pushed {
        branch: String,
        commit: String,
        /// Fetch-plan-push rounds (more than 1 when the branch moved under the push).
        attempts: u32,
    },
    /// A pull request (merge request), opened or taken over.
    PullRequest {
        number: u64,
        url: String,
        branch: String,
        commit: String,
        taken_over: bool,
        warnings: Vec<String>,
    },
    /// No field was to be set back: every one moved on, or holds its old value already.
    Nothing,
}

/// Why a revert could not be written. The cause is the error's source.
#[derive(Debug, thiserror::Error)]
pub enum RevertError {
    #[error("repository `{repository}`: pushing the revert of {commit}")]
    Push {
        repository: String,
        commit: String,
        #[source]
        source: GitError,
    },
    #[error("repository `{repository}`: preparing the revert of {commit}")]
    Prepare {
        repository: String,
        commit: String,
        #[source]
        source: GitError,
    },
    #[error("repository `{repository}`: proposing the revert of {commit}")]
    Propose {
        repository: String,
        commit: String,
        #[source]
        source: ForgeError,
    },
    #[error(
        "repository `{repository}`: branch `{branch}` holds commit {tip}, which tagpilot did not \
         make; the revert of {commit} is not pushed over it"
    )]
    BranchTaken {
        repository: String,
        branch: String,
        tip: String,
        commit: String,
    },
}

impl RevertError {
    /// A short stable name for reports and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RevertError::Push { source, .. } | RevertError::Prepare { source, .. } => {
                source.metric_label()
            }
            RevertError::Propose { source, .. } => source.metric_label(),
            RevertError::BranchTaken { .. } => "branch_taken",
        }
    }
}

/// Writes the reverse of `failed` to `repository`: a commit on its base branch, or a pull
/// request, by its `write.mode`.
#[tracing::instrument(skip_all, fields(repository = %repository.name, commit = %failed.commit))]
pub async fn revert(
    cache: &RepoCache,
    repository: &RepositoryConfig,
    failed: &FailedUpdate,
) -> Result<RevertOutcome, RevertError> {
    let outcome = match repository.write.mode {
        WriteMode::Push => push(cache, repository, failed).await?,
        WriteMode::PullRequest => propose(cache, repository, failed).await?,
    };
    for left in &outcome.left {
        tracing::warn!(field = %left, "not reverted");
    }
    tracing::info!(written = ?outcome.written, "revert done");
    Ok(outcome)
}

/// Plans the reverse on whatever tip the write loop fetched.
struct RevertPlanner<'a> {
    failed: &'a FailedUpdate,
}

impl Replanner for RevertPlanner<'_> {
    type Plan = ReversePlan;
    type Error = Infallible;

    async fn plan(
        &self,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> Result<Planned<ReversePlan>, Infallible> {
        let mut plan = plan_revert(files, &group_key(&self.failed.commit), &self.failed.changes);
        if let Some(group) = &mut plan.group {
            // The revert goes to the base branch (also in push mode with a `write.branch`).
            let changed: Vec<String> = group
                .files
                .keys()
                .map(|p| p.to_string_lossy().replace('\\', "/"))
                .collect();
            group.applications = crate::affected::applications_containing(
                &self.failed.deployers,
                &repository.url,
                &repository.branch,
                changed.iter().map(String::as_str),
            )
            .applications;
        }
        Ok(Planned {
            groups: plan.group.iter().cloned().collect(),
            // Not every policy was planned: a pull-request sync must not close anything on it.
            complete: false,
            branch: None,
            plan,
        })
    }
}

/// Push mode: one commit on the base branch, through the updates' write loop.
async fn push(
    cache: &RepoCache,
    repository: &RepositoryConfig,
    failed: &FailedUpdate,
) -> Result<RevertOutcome, RevertError> {
    let mut repo = revert_config(repository, failed);
    repo.write.branch = None;
    let planner = RevertPlanner { failed };
    let report = git::write_planned(cache, &repo, &planner, WriteOptions::default()).await;
    let written = report.result.map_err(|source| RevertError::Push {
        repository: repository.name.clone(),
        commit: failed.commit.clone(),
        source,
    })?;
    let plan = report.plan.unwrap_or_default();
    let written_change = match written.status {
        WriteStatus::Pushed { mut commits } if !commits.is_empty() => {
            let commit = commits.remove(0);
            RevertWrite::Pushed {
                branch: written.branch,
                commit: commit.id,
                attempts: written.attempts,
            }
        }
        _ => RevertWrite::Nothing,
    };
    Ok(outcome(repository, written_change, plan))
}

/// Pull-request mode: the reverse planned on the base tip, proposed from tagpilot's branch.
async fn propose(
    cache: &RepoCache,
    repository: &RepositoryConfig,
    failed: &FailedUpdate,
) -> Result<RevertOutcome, RevertError> {
    let repo = revert_config(repository, failed);
    let planner = RevertPlanner { failed };
    let (prepared, plan) = git::proposal::prepare(cache, &repo, &planner)
        .await
        .map_err(|source| RevertError::Prepare {
            repository: repository.name.clone(),
            commit: failed.commit.clone(),
            source,
        })?;
    let Some(group) = prepared.groups.first() else {
        return Ok(outcome(repository, RevertWrite::Nothing, plan));
    };
    let request = pull_request(&repo, failed, group, &plan);
    let proposal = forge::revert::open_revert(cache, &repo, prepared.base_tip, group, &request)
        .await
        .map_err(|source| RevertError::Propose {
            repository: repository.name.clone(),
            commit: failed.commit.clone(),
            source,
        })?;
    let written = match proposal {
        RevertProposal::Opened {
            number,
            url,
            commit,
            taken_over,
            warnings,
        } => RevertWrite::PullRequest {
            number,
            url,
            branch: request.branch,
            commit,
            taken_over,
            warnings,
        },
        RevertProposal::Blocked { tip } => {
            return Err(RevertError::BranchTaken {
                repository: repository.name.clone(),
                branch: request.branch,
                tip,
                commit: failed.commit.clone(),
            });
        }
        RevertProposal::NothingToChange => RevertWrite::Nothing,
    };
    Ok(outcome(repository, written, plan))
}

fn outcome(
    repository: &RepositoryConfig,
    written: RevertWrite,
    plan: ReversePlan,
) -> RevertOutcome {
    let reverted = match &written {
        RevertWrite::Nothing => Vec::new(),
        _ => plan.group.map(|g| g.changes).unwrap_or_default(),
    };
    RevertOutcome {
        repository: repository.name.clone(),
        written,
        reverted,
        left: plan.left,
    }
}

/// The repository's configuration as a revert writes it: one group, the revert's own message.
fn revert_config(repository: &RepositoryConfig, failed: &FailedUpdate) -> RepositoryConfig {
    let mut repo = repository.clone();
    // One commit whatever `write.group` says: the revert is one change.
    repo.write.group = Grouping::Policy;
    repo.write.commit_message = Some(message_template(failed));
    repo
}

/// The group's key and the pull request's branch: tagpilot's, named after the failed commit.
fn group_key(commit: &str) -> String {
    format!("revert-{}", short(commit))
}

/// The pull request that proposes `group`.
fn pull_request(
    repo: &RepositoryConfig,
    failed: &FailedUpdate,
    group: &ChangeGroup,
    plan: &ReversePlan,
) -> RevertRequest {
    let kind = repo
        .forge
        .as_ref()
        .and_then(forge::kind_of)
        .unwrap_or(ForgeKind::GitHub);
    let left: Vec<String> = plan.left.iter().map(ToString::to_string).collect();
    let text = FailedText {
        commit: &failed.commit,
        application: &failed.application,
        failure: &failed.failure,
        failed: &failed.changes,
    };
    RevertRequest {
        branch: format!("tagpilot/{}", group_key(&failed.commit)),
        title: revert_title(group),
        body: revert_body(kind, &text, group, &left),
        labels: repo
            .write
            .revert_labels
            .clone()
            .unwrap_or_else(|| vec![DEFAULT_REVERT_LABEL.to_owned()]),
    }
}

/// The revert's commit message, as a `write.commitMessage` template for the commit path: the
/// failure's text and the names are written in as string literals (JSON's escapes are
/// minijinja's), so nothing in them is read as template syntax; the reverse changes come from
/// the template's own `changes`. It ends in `Tagpilot-Revert:`, which the commit path joins
/// with the `Tagpilot-Policy:` trailers.
fn message_template(failed: &FailedUpdate) -> String {
    let literal = |text: &str| {
        let json = serde_json::Value::String(text.to_owned()).to_string();
        format!("{{{{ {json} }}}}")
    };
    let subject = format!(
        "revert(images): undo {} ({} failed verification)",
        short(&failed.commit),
        failed.application
    );
    let why = format!(
        "The Application {} did not become healthy after {}: {}\n\n\
         Set back, and nothing else:",
        failed.application,
        failed.commit,
        failed.failure.trim_end()
    );
    // The Applications it deploys, as an update's default message names them.
    let applications = "{%- if applications %}\n\nArgo CD Applications:\n{%- for a in applications %}\n\
                        - {{ a.id }} -> {{ a.cluster }}{% if a.destination.namespace %}, namespace \
                        {{ a.destination.namespace }}{% endif %}\n{%- endfor %}\n{%- endif %}";
    format!(
        "{}\n\n{}\n{{% for c in changes %}}\n- {{{{ c.image }}}}: {{{{ c.from }}}} -> \
         {{{{ c.to }}}} ({{{{ c.file }}}})\n{{%- endfor %}}{applications}\n\n{}: {}\n",
        literal(&subject),
        literal(&why),
        REVERT_TRAILER,
        literal(&failed.commit)
    )
}

/// A commit's first 12 characters, as branch names and subjects show it.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

#[cfg(test)]
mod tests;
