//! The git side of pull-request mode: plan on the base tip, build one commit per change group
//! on that tip, and push or delete the branches tagpilot owns for those groups, each with a
//! lease.
//!
//! It never touches the base branch: every push here goes to a branch named by the
//! `write.branch` template, which tagpilot owns. Even so, a branch is rewritten or deleted only
//! if the remote still holds the value fetched, so a human's push in between is never lost.
//! Deciding *whether* to push is the forge module's job; this one only does what it is told.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use git2::{AutotagOption, FetchOptions, Oid, Repository};

use super::auth::{Connector, redact_url};
use super::cache::{self, RepoCache, cache_error, connect_error};
use super::commit::{CommitError, apply_files, make_commit};
use super::message::{POLICY_TRAILER, render_message};
use super::push::{AttemptError, push};
use super::sign::Signer;
use super::write::Replanner;
use super::{GitError, Libgit2Error};
use crate::change::ChangeGroup;
use crate::config::repository::RepositoryConfig;

/// The base branch as fetched, and the change groups planned on it.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub base_tip: Oid,
    pub groups: Vec<ChangeGroup>,
    /// Whether the plan covered every policy (see [`super::Planned::complete`]).
    pub complete: bool,
}

/// A group's commit built on the base tip, not yet on any branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuiltCommit {
    pub id: Oid,
    pub summary: String,
}

/// What one of tagpilot's branches holds on the remote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchTip {
    pub id: Oid,
    /// The tip was made by tagpilot: its author and a `Tagpilot-Policy:` trailer.
    pub by_tagpilot: bool,
}

/// Fetches the base branch and plans on its tip; the planner's groups (already per
/// `write.group`) are the pull requests, and its own plan comes back beside them.
pub async fn prepare<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
) -> Result<(Prepared, P::Plan), GitError> {
    repo.validate()?;
    let dir = cache.repo_dir(repo);
    // In pull-request mode the target branch is the base, so only the base is fetched here;
    // the group branches are fetched by name once the groups are known.
    let base_only = repo.clone();
    let (base_tip, files) = blocking(move || {
        let (git, fetched) = cache::sync(&dir, &base_only)?;
        let files = cache::commit_files(git, &dir, &base_only, fetched.base_tip)?;
        Ok((fetched.base_tip, files))
    })
    .await?;
    let planned = planner
        .plan(repo, &files)
        .await
        .map_err(|e| GitError::Plan {
            repository: repo.name.clone(),
            source: Box::new(e),
        })?;
    drop(files);
    let prepared = Prepared {
        base_tip,
        groups: planned.groups,
        complete: planned.complete,
    };
    Ok((prepared, planned.plan))
}

/// The signer for `repo`'s commits, if it signs them.
pub fn load_signer(repo: &RepositoryConfig) -> Result<Arc<Option<Signer>>, GitError> {
    super::sign::signer_for(repo)
}

/// Fetches `branches` (those that exist) and tells what each holds; a missing branch maps to
/// `None`. The values returned are the leases for [`push_branch`] and [`delete_branch`].
pub async fn fetch_branches(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    branches: Vec<String>,
) -> Result<BTreeMap<String, Option<BranchTip>>, GitError> {
    let dir = cache.repo_dir(repo);
    let repo = repo.clone();
    blocking(move || {
        let git = open(&dir, &repo)?;
        let fetch_error = |e: git2::Error| GitError::Fetch {
            repository: repo.name.clone(),
            url: redact_url(&repo.url),
            source: Libgit2Error::scrubbed(e, &repo.url),
        };
        let connector =
            Connector::new(&repo.url, &repo.auth).map_err(|e| GitError::config(&repo, e))?;
        let mut remote = git.remote_anonymous(&repo.url).map_err(fetch_error)?;
        let connected =
            remote.connect_auth(git2::Direction::Fetch, Some(connector.callbacks()), None);
        if let Some(failure) = connector.take_failure() {
            return Err(connect_error(&repo, failure));
        }
        let heads: BTreeMap<String, Oid> = {
            let connection = connected.map_err(fetch_error)?;
            connection
                .list()
                .map_err(fetch_error)?
                .iter()
                .map(|h| (h.name().to_owned(), h.oid()))
                .collect()
        };
        let mut tips = BTreeMap::new();
        let mut refspecs = Vec::new();
        for branch in &branches {
            let name = format!("refs/heads/{branch}");
            if let Some(id) = heads.get(&name) {
                refspecs.push(format!("+{name}:refs/remotes/origin/{branch}"));
                tips.insert(branch.clone(), Some(*id));
            } else {
                tips.insert(branch.clone(), None);
            }
        }
        if !refspecs.is_empty() {
            let mut options = FetchOptions::new();
            options
                .remote_callbacks(connector.callbacks())
                .download_tags(AutotagOption::None);
            let mut remote = git.remote_anonymous(&repo.url).map_err(fetch_error)?;
            let result = remote.fetch(&refspecs, Some(&mut options), None);
            if let Some(failure) = connector.take_failure() {
                return Err(connect_error(&repo, failure));
            }
            result.map_err(fetch_error)?;
        }
        Ok(tips
            .into_iter()
            .map(|(branch, id)| {
                let tip = id.map(|id| BranchTip {
                    id,
                    by_tagpilot: made_by_tagpilot(&git, &repo, id),
                });
                (branch, tip)
            })
            .collect())
    })
    .await
}

fn made_by_tagpilot(git: &Repository, repo: &RepositoryConfig, id: Oid) -> bool {
    let Ok(commit) = git.find_commit(id) else {
        return false;
    };
    let trailer = format!("\n{POLICY_TRAILER}: ");
    commit.author().email() == Ok(repo.write.author.email.as_str())
        && commit.message().is_ok_and(|m| m.contains(&trailer))
}

/// Builds `group`'s commit on `base`; `None` when the group changes nothing there.
pub async fn build_commit(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    base: Oid,
    group: &ChangeGroup,
    signer: Arc<Option<Signer>>,
) -> Result<Option<BuiltCommit>, GitError> {
    let dir = cache.repo_dir(repo);
    let (repo, group) = (repo.clone(), group.clone());
    blocking(move || {
        let git = open(&dir, &repo)?;
        let cache_error = |e: git2::Error| cache_error(&repo, &dir, e);
        let base = git.find_commit(base).map_err(cache_error)?;
        let base_tree = base.tree().map_err(cache_error)?;
        let commit_error = |source: CommitError| GitError::Commit {
            repository: repo.name.clone(),
            group: group.key.clone(),
            source,
        };
        let tree = apply_files(&git, &base_tree, &group.files).map_err(commit_error)?;
        if tree == base_tree.id() {
            return Ok(None);
        }
        let message = render_message(repo.write.commit_message.as_deref(), &repo.name, &group)
            .map_err(|e| commit_error(e.into()))?;
        let id = make_commit(&git, &repo, &base, tree, &message, signer.as_ref().as_ref())?;
        Ok(Some(BuiltCommit {
            id,
            summary: message.lines().next().unwrap_or_default().to_owned(),
        }))
    })
    .await
}

/// Whether `tip` already holds what `built` proposes: same parent, tree and message. Pushing
/// anyway would rewrite the branch (and notify reviewers) on every run.
pub async fn same_commit(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    tip: Oid,
    built: Oid,
) -> Result<bool, GitError> {
    let dir = cache.repo_dir(repo);
    let repo = repo.clone();
    blocking(move || {
        let git = open(&dir, &repo)?;
        let (Ok(old), Ok(new)) = (git.find_commit(tip), git.find_commit(built)) else {
            return Ok(false);
        };
        Ok(
            old.parent_ids().collect::<Vec<_>>() == new.parent_ids().collect::<Vec<_>>()
                && old.tree_id() == new.tree_id()
                && old.message_bytes() == new.message_bytes(),
        )
    })
    .await
}

/// Whether every file `tip` changes relative to its parent already has, in `base`, the
/// content `tip` gives it: the proposal reached the base (merged, or made by hand).
pub async fn reached_base(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    tip: Oid,
    base: Oid,
) -> Result<bool, GitError> {
    let dir = cache.repo_dir(repo);
    let repo = repo.clone();
    blocking(move || {
        let git = open(&dir, &repo)?;
        let cache_error = |e: git2::Error| cache_error(&repo, &dir, e);
        let tip = git.find_commit(tip).map_err(cache_error)?;
        let Ok(parent) = tip.parent(0) else {
            return Ok(false);
        };
        let (tip_tree, parent_tree) = (
            tip.tree().map_err(cache_error)?,
            parent.tree().map_err(cache_error)?,
        );
        let base_tree = git
            .find_commit(base)
            .and_then(|c| c.tree())
            .map_err(cache_error)?;
        let diff = git
            .diff_tree_to_tree(Some(&parent_tree), Some(&tip_tree), None)
            .map_err(cache_error)?;
        let mut all = true;
        for delta in diff.deltas() {
            let Some(path) = delta.new_file().path() else {
                continue;
            };
            let in_base = base_tree.get_path(path).ok().map(|e| e.id());
            all &= in_base == Some(delta.new_file().id());
        }
        Ok(all)
    })
    .await
}

/// Pushes `commit` to the owned `branch`, if the remote still holds `lease` (`None`: the branch
/// must not exist).
pub async fn push_branch(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    branch: &str,
    commit: Oid,
    lease: Option<Oid>,
) -> Result<(), GitError> {
    update_branch(cache, repo, branch, Some(commit), lease).await
}

/// Deletes the owned `branch`, if the remote still holds `lease`.
pub async fn delete_branch(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    branch: &str,
    lease: Oid,
) -> Result<(), GitError> {
    update_branch(cache, repo, branch, None, Some(lease)).await
}

async fn update_branch(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    branch: &str,
    commit: Option<Oid>,
    lease: Option<Oid>,
) -> Result<(), GitError> {
    let dir = cache.repo_dir(repo);
    let (repo, branch) = (repo.clone(), branch.to_owned());
    blocking(move || {
        let git = open(&dir, &repo)?;
        push(&git, &repo, &branch, commit, lease, true).map_err(|e| match e {
            AttemptError::Moved => GitError::Rejected {
                repository: repo.name.clone(),
                url: redact_url(&repo.url),
                branch: branch.clone(),
                message:
                    "the branch moved since tagpilot fetched it; left alone until the next run"
                        .into(),
            },
            other => other.into_git_error(&repo),
        })
    })
    .await
}

fn open(dir: &Path, repo: &RepositoryConfig) -> Result<Repository, GitError> {
    Repository::open_bare(dir).map_err(|e| cache_error(repo, dir, e))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, GitError> {
    tokio::task::spawn_blocking(f)
        .await
        .expect("git task panicked")
}
