//! Keeping one repository's pull requests in step with a fresh plan, in three steps so that the
//! decisions are tested without a forge or a clone:
//!
//! 1. [`read`] gathers what is: the change groups planned on the base tip and their commits,
//!    the open pull requests and their markers, what each branch holds, what was declined.
//! 2. [`decide`] says, per group, what to do about it: a pure function of what was read.
//! 3. [`perform`] makes the calls: pushes, opens, updates, comments, closes, deletes branches.
//!
//! A dry run is the same path with nothing to perform.

mod decide;
mod observed;
mod perform;
mod read;

use crate::git::{self, Replanner, RepoCache, RepositoryConfig};

use super::{Action, Forge, ForgeError, ForgeOutcome, ForgeReport};

/// Keeps the pull requests of `repo` in step with a plan made on its base tip
/// ([`git::proposal::prepare`]). With `dry_run` it reads the forge and builds the commits but
/// pushes, opens, comments and closes nothing.
#[tracing::instrument(skip_all, fields(repository = %repo.name, dry_run))]
pub async fn sync_pull_requests<F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    prepared: git::proposal::Prepared,
    forge: &F,
    dry_run: bool,
) -> Result<ForgeOutcome, ForgeError> {
    let observed = read::read(cache, repo, prepared, forge).await?;
    let decisions = decide::decide(&observed, dry_run);
    for decision in &decisions {
        if let Action::Blocked { tip } = &decision.outcome.action {
            tracing::warn!(
                group = %decision.outcome.group,
                branch = decision.outcome.branch,
                tip,
                "the branch holds someone else's commit; not overwriting"
            );
        }
    }
    let outcomes = perform::perform(cache, repo, forge, decisions).await?;
    for outcome in &outcomes {
        for warning in &outcome.warnings {
            tracing::warn!(group = %outcome.group, "{warning}");
        }
    }
    Ok(ForgeOutcome {
        repository: repo.name.clone(),
        base: repo.branch.clone(),
        base_commit: observed.base_tip.to_string(),
        dry_run,
        pull_requests: outcomes,
    })
}

/// Runs [`sync_repository`] for every repository in pull-request mode. A failing repository
/// does not stop the others.
pub async fn sync_all<P: Replanner>(
    cache: &RepoCache,
    repositories: &[RepositoryConfig],
    planner: &P,
    dry_run: bool,
) -> Vec<ForgeReport<P::Plan>> {
    let mut reports = Vec::new();
    for repo in repositories {
        reports.push(sync_repository(cache, repo, planner, dry_run).await);
    }
    reports
}

/// Connects to `repo`'s forge, plans `repo` on its base (the planner is asked here and nowhere
/// else) and keeps its pull requests in step with that plan. A failure is reported, with the
/// plan when it was made.
pub async fn sync_repository<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    dry_run: bool,
) -> ForgeReport<P::Plan> {
    let mut plan = None;
    let result = sync_one(cache, repo, planner, dry_run, &mut plan).await;
    if let Err(e) = &result {
        tracing::error!(repository = %repo.name, error = %crate::error_chain::Chain(e), "pull requests failed");
    }
    ForgeReport {
        repository: repo.name.clone(),
        url: git::auth::redact_url(&repo.url),
        plan,
        result,
    }
}

async fn sync_one<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    dry_run: bool,
    plan: &mut Option<P::Plan>,
) -> Result<ForgeOutcome, ForgeError> {
    repo.validate()?;
    super::check_templates(&repo.write, &repo.branch).map_err(|source| ForgeError::Template {
        repository: repo.name.clone(),
        source,
    })?;
    let (forge, repo) = super::connect::connect_required(repo).await?;
    let forge = forge.with_draft(repo.write.draft);
    let (prepared, planned) = git::proposal::prepare(cache, &repo, planner).await?;
    *plan = Some(planned);
    sync_pull_requests(cache, &repo, prepared, &forge, dry_run).await
}
