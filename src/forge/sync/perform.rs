//! The perform step: the calls a decision lists, in order, with what the forge answers (the
//! number of a pull request just opened, the reviewers it did not know) put into the outcome.
//! It decides nothing.

use super::decide::{Decision, Step};
use crate::forge::{Action, Forge, ForgeError, PullRequestOutcome};
use crate::git::{self, RepoCache, RepositoryConfig};

/// Performs every decision's steps. A call that fails for one group marks that group failed
/// and the others go on; an error that concerns the whole repository ends the run for it.
pub(crate) async fn perform<F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    forge: &F,
    decisions: Vec<Decision>,
) -> Result<Vec<PullRequestOutcome>, ForgeError> {
    let mut outcomes = Vec::with_capacity(decisions.len());
    for Decision { mut outcome, steps } in decisions {
        for step in steps {
            match perform_step(cache, repo, forge, step, &mut outcome).await {
                Ok(()) => {}
                Err(e) if e.stops_the_repository() => return Err(e),
                // This group's pull request is left as the failed call left it; the next
                // run decides again from what it finds.
                Err(e) => {
                    tracing::error!(group = %outcome.group, error = %crate::error_chain::Chain(&e), "pull request failed");
                    outcome.action = Action::Failed {
                        error: crate::error_chain::chain(&e),
                    };
                    break;
                }
            }
        }
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// A review comment's post or edit: its failure, whatever it is (a token that may open pull
/// requests but not comment on them is common), a warning in `outcome`. A failure that concerns
/// the whole repository shows again on the next call that needs it.
fn review_posted(
    result: Result<(), ForgeError>,
    outcome: &mut PullRequestOutcome,
) -> Result<(), ForgeError> {
    match result {
        Err(e) => {
            tracing::warn!(group = %outcome.group, error = %crate::error_chain::Chain(&e), "the rendered diff was not posted");
            outcome.warnings.push(format!(
                "the rendered diff was not posted: {}",
                crate::error_chain::chain(&e)
            ));
            Ok(())
        }
        Ok(()) => Ok(()),
    }
}

async fn perform_step<F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    forge: &F,
    step: Step,
    outcome: &mut PullRequestOutcome,
) -> Result<(), ForgeError> {
    match step {
        Step::Push {
            branch,
            commit,
            lease,
        } => git::proposal::push_branch(cache, repo, &branch, commit, lease).await?,
        Step::Open(new) => {
            let created = forge.create(&new).await?;
            if created.taken_over {
                outcome.action = Action::TakenOver;
            }
            outcome.number = Some(created.pull_request.number);
            outcome.url = Some(created.pull_request.url);
            outcome.warnings.extend(created.warnings);
        }
        Step::Update {
            number,
            title,
            body,
        } => forge.update(number, &title, &body).await?,
        Step::Comment { number, body } => forge.comment(number, &body).await?,
        // The review comment only informs: one that cannot be posted or edited is a warning on
        // the group, whose pull request stands as written.
        Step::CommentOpened { body } => {
            if let Some(number) = outcome.number {
                review_posted(forge.comment(number, &body).await, outcome)?;
            }
        }
        Step::PostReview { number, body } => {
            review_posted(forge.comment(number, &body).await, outcome)?;
        }
        Step::EditComment { number, id, body } => {
            review_posted(forge.edit_comment(number, id, &body).await, outcome)?;
        }
        Step::Close { number } => forge.close(number).await?,
        Step::DeleteBranch { branch, lease } => {
            git::proposal::delete_branch(cache, repo, &branch, lease).await?;
        }
        Step::Converge {
            pull_request,
            labels,
            reviewers,
        } => {
            let warnings = forge.converge(&pull_request, &labels, &reviewers).await?;
            outcome.warnings.extend(warnings);
        }
    }
    Ok(())
}
