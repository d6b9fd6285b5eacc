//! The write loop: fetch, let the planner plan on the fetched tip, commit each change group,
//! push without force, and on a rejected push start over from a new fetch.
//!
//! Commits are made in the cache's object store and become visible only through a successful
//! push, so a failure at any step leaves the remote exactly as it was. Never pushes with force
//! except to a branch tagpilot owns, and then only if the remote still holds the value last
//! fetched (a lease checked in the same connection as the push).

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use git2::{Oid, PushOptions, Repository};

use super::GitError;
use super::auth::{Connector, redact_url};
use super::cache::{self, RepoCache, connect_error, scrub};
use super::config::RepositoryConfig;
use super::message::{Change, ChangeGroup, regroup, render_message};
use super::sign::Signer;

/// Plans the changes of one repository on a checkout of its base branch. The writer calls it
/// once per attempt: after a rejected push it runs again on the new tip, where another writer
/// may already have made some of the changes.
pub trait Replanner {
    type Error: std::error::Error + Send + Sync + 'static;

    /// The change groups for `repository`, planned on the files under `checkout` (a fresh
    /// checkout of the base branch's tip; read it, don't keep it). See [`ChangeGroup`] for how
    /// groups that change one file must be built.
    fn plan(
        &self,
        repository: &RepositoryConfig,
        checkout: &Path,
    ) -> impl Future<Output = Result<Vec<ChangeGroup>, Self::Error>> + Send;

    /// Whether the last plan of `repository` covered every policy (no problems). A change that
    /// is missing from an incomplete plan may be missing because its registry failed, so
    /// pull requests are closed only after a complete plan.
    fn complete(&self, _repository: &RepositoryConfig) -> bool {
        true
    }
}

/// A commit tagpilot pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedCommit {
    pub id: String,
    /// The group key: repository or policy name.
    pub group: String,
    /// The first line of the message.
    pub summary: String,
    pub changes: Vec<Change>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteStatus {
    /// The target branch now holds these commits (none when an owned branch was reset to the
    /// base because nothing is left to change).
    Pushed { commits: Vec<PushedCommit> },
    /// Dry run: these commits would have been pushed.
    WouldPush { commits: Vec<PushedCommit> },
    /// Nothing to change; nothing was committed or pushed.
    UpToDate,
}

/// What happened to one repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOutcome {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    /// The branch pushed to (or that would have been).
    pub branch: String,
    /// The base commit the final plan was made on.
    pub base_commit: String,
    pub status: WriteStatus,
    /// Fetch-plan-push rounds used (1 unless the branch moved under us).
    pub attempts: u32,
}

/// One repository's line in `tagpilot apply`'s report.
#[derive(Debug)]
pub struct RepositoryReport {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    pub result: Result<WriteOutcome, GitError>,
}

/// How a write runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// Fetch, plan and build the commits, but push nothing: `tagpilot plan` on a remote
    /// repository. The commits stay unreferenced in the cache.
    pub dry_run: bool,
}

/// Writes every repository; a failing one does not stop the others.
pub async fn write_all<P: Replanner>(
    cache: &RepoCache,
    repositories: &[RepositoryConfig],
    planner: &P,
    options: WriteOptions,
) -> Vec<RepositoryReport> {
    let mut reports = Vec::with_capacity(repositories.len());
    for repo in repositories {
        let result = write_repository_with(cache, repo, planner, options).await;
        if let Err(e) = &result {
            tracing::error!(repository = %repo.name, error = %e, "write-back failed");
        }
        reports.push(RepositoryReport {
            repository: repo.name.clone(),
            url: redact_url(&repo.url),
            result,
        });
    }
    reports
}

/// Why one attempt did not push.
pub(crate) enum AttemptError {
    /// The branch moved since the fetch: fetch, plan and try again.
    Moved,
    /// The remote refused the update (a hook, branch protection); retried once to tell it apart
    /// from a race, then reported.
    Refused(String),
    Fatal(GitError),
}

/// Fetches, plans, commits and pushes `repo`, retrying while the target branch moves.
pub async fn write_repository<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
) -> Result<WriteOutcome, GitError> {
    write_repository_with(cache, repo, planner, WriteOptions::default()).await
}

/// [`write_repository`], or its dry run.
#[tracing::instrument(skip_all, fields(repository = %repo.name, dry_run = options.dry_run))]
pub async fn write_repository_with<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    options: WriteOptions,
) -> Result<WriteOutcome, GitError> {
    repo.validate()?;
    if repo.write.mode == super::WriteMode::PullRequest {
        // Here the target would be the base branch itself: never push a protected base.
        return Err(GitError::Config {
            repository: repo.name.clone(),
            message: "`write.mode: pull-request` is written through `forge::sync_all`".into(),
        });
    }
    let signer = match &repo.write.signing {
        Some(config) => Some(Signer::load(config).map_err(|message| GitError::Signing {
            repository: repo.name.clone(),
            message,
        })?),
        None => None,
    };
    let signer = Arc::new(signer);
    let dir = cache.repo_dir(repo);
    let url = redact_url(&repo.url);
    let max_attempts = repo.write.max_retries + 1;
    let mut refused: Option<(cache::Fetched, String)> = None;

    for attempt in 1..=max_attempts {
        let (fetched, checkout) = blocking({
            let (dir, repo) = (dir.clone(), repo.clone());
            move || {
                let (git, fetched) = cache::sync(&dir, &repo)?;
                let checkout = cache::checkout_commit(&git, &repo, fetched.base_tip)?;
                Ok((fetched, checkout))
            }
        })
        .await?;
        if let Some((seen, message)) = refused.take()
            && seen == fetched
        {
            // Nothing moved, so the refusal was not a race: report it.
            return Err(GitError::Rejected {
                repository: repo.name.clone(),
                url,
                branch: repo.target_branch().to_owned(),
                message,
            });
        }
        let groups = planner
            .plan(repo, checkout.path())
            .await
            .map_err(|e| GitError::Plan {
                repository: repo.name.clone(),
                source: Box::new(e),
            })?;
        drop(checkout);
        let groups = regroup(&repo.name, repo.write.group, groups);
        let result = blocking({
            let (dir, repo, signer) = (dir.clone(), repo.clone(), signer.clone());
            move || {
                Ok(commit_and_push(
                    &dir,
                    &repo,
                    fetched,
                    groups,
                    signer.as_ref().as_ref(),
                    options,
                ))
            }
        })
        .await?;
        let outcome = |status| WriteOutcome {
            repository: repo.name.clone(),
            url: url.clone(),
            branch: repo.target_branch().to_owned(),
            base_commit: fetched.base_tip.to_string(),
            status,
            attempts: attempt,
        };
        match result {
            Ok(status) => return Ok(outcome(status)),
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Moved) => {
                tracing::info!(
                    attempt,
                    branch = repo.target_branch(),
                    "branch moved; fetching and planning again"
                );
            }
            Err(AttemptError::Refused(message)) => {
                tracing::info!(attempt, %message, "push refused; checking whether the branch moved");
                if attempt == max_attempts {
                    return Err(GitError::Rejected {
                        repository: repo.name.clone(),
                        url,
                        branch: repo.target_branch().to_owned(),
                        message,
                    });
                }
                refused = Some((fetched, message));
            }
        }
        if attempt < max_attempts {
            tokio::time::sleep(backoff(attempt)).await;
        }
    }
    Err(GitError::RetriesExhausted {
        repository: repo.name.clone(),
        url,
        branch: repo.target_branch().to_owned(),
        attempts: max_attempts,
    })
}

/// Exponential backoff with jitter, so two bots racing for one branch drift apart.
fn backoff(attempt: u32) -> Duration {
    let ceiling = 100u64.saturating_mul(1 << attempt.min(6)).min(5_000);
    Duration::from_millis(fastrand::u64(ceiling / 2..=ceiling))
}

/// git2 blocks; keep it off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, GitError> + Send + 'static,
) -> Result<T, GitError> {
    tokio::task::spawn_blocking(f)
        .await
        .expect("git task panicked")
}

/// Builds one commit per group on the fetched base tip and pushes the last one.
fn commit_and_push(
    dir: &Path,
    repo: &RepositoryConfig,
    fetched: cache::Fetched,
    groups: Vec<ChangeGroup>,
    signer: Option<&Signer>,
    options: WriteOptions,
) -> Result<WriteStatus, AttemptError> {
    let fatal_cache = |e: git2::Error| {
        AttemptError::Fatal(GitError::Cache {
            repository: repo.name.clone(),
            path: dir.to_owned(),
            message: e.message().to_owned(),
        })
    };
    let git = Repository::open_bare(dir).map_err(fatal_cache)?;
    let mut tip = git.find_commit(fetched.base_tip).map_err(fatal_cache)?;
    let mut commits = Vec::new();
    for group in groups {
        let commit_error = |message: String| {
            AttemptError::Fatal(GitError::Commit {
                repository: repo.name.clone(),
                group: group.key.clone(),
                message,
            })
        };
        let base_tree = tip.tree().map_err(fatal_cache)?;
        let tree_id = apply_files(&git, &base_tree, &group.files).map_err(commit_error)?;
        if tree_id == base_tree.id() {
            // Already there (another writer made the change): no empty commits.
            continue;
        }
        let message = render_message(repo.write.commit_message.as_deref(), &repo.name, &group)
            .map_err(commit_error)?;
        let id = make_commit(&git, repo, &tip, tree_id, &message, signer)?;
        tip = git.find_commit(id).map_err(fatal_cache)?;
        commits.push(PushedCommit {
            id: id.to_string(),
            group: group.key.clone(),
            summary: message.lines().next().unwrap_or_default().to_owned(),
            changes: group.changes,
        });
    }

    let expected_remote = if repo.owns_target_branch() {
        match fetched.owned_tip {
            None if commits.is_empty() => return Ok(WriteStatus::UpToDate),
            Some(old) if old == tip.id() => return Ok(WriteStatus::UpToDate),
            Some(old) if same_proposal(&git, old, tip.id(), fetched.base_tip, commits.len()) => {
                return Ok(WriteStatus::UpToDate);
            }
            old => old,
        }
    } else {
        if commits.is_empty() {
            return Ok(WriteStatus::UpToDate);
        }
        Some(fetched.base_tip)
    };
    if options.dry_run {
        return Ok(WriteStatus::WouldPush { commits });
    }
    push(
        &git,
        repo,
        repo.target_branch(),
        Some(tip.id()),
        expected_remote,
        repo.owns_target_branch(),
    )?;
    Ok(WriteStatus::Pushed { commits })
}

/// Writes a commit of `tree_id` on `parent` with the configured author, signed when a signer
/// is configured. The commit is not referenced by any branch.
pub(crate) fn make_commit(
    git: &Repository,
    repo: &RepositoryConfig,
    parent: &git2::Commit<'_>,
    tree_id: Oid,
    message: &str,
    signer: Option<&Signer>,
) -> Result<Oid, AttemptError> {
    let fatal_cache = |e: git2::Error| {
        AttemptError::Fatal(GitError::Cache {
            repository: repo.name.clone(),
            path: git.path().to_owned(),
            message: e.message().to_owned(),
        })
    };
    let tree = git.find_tree(tree_id).map_err(fatal_cache)?;
    let author =
        git2::Signature::now(&repo.write.author.name, &repo.write.author.email).map_err(|e| {
            AttemptError::Fatal(GitError::Config {
                repository: repo.name.clone(),
                message: format!("invalid `write.author`: {}", e.message()),
            })
        })?;
    match signer {
        None => git.commit(None, &author, &author, message, &tree, &[parent]),
        Some(signer) => {
            let buffer = git
                .commit_create_buffer(&author, &author, message, &tree, &[parent])
                .map_err(fatal_cache)?;
            let content = std::str::from_utf8(&buffer).map_err(|_| {
                AttemptError::Fatal(GitError::Signing {
                    repository: repo.name.clone(),
                    message: "commit is not UTF-8".into(),
                })
            })?;
            let signature = signer.sign(&buffer).map_err(|message| {
                AttemptError::Fatal(GitError::Signing {
                    repository: repo.name.clone(),
                    message,
                })
            })?;
            git.commit_signed(content, &signature, None)
        }
    }
    .map_err(fatal_cache)
}

/// Whether the owned branch at `old` already holds what we would push as `new`: the same trees
/// and messages, commit by commit, on the same base. Rebuilding it anyway would push a new
/// commit on every run.
fn same_proposal(git: &Repository, old: Oid, new: Oid, base: Oid, count: usize) -> bool {
    let (mut old, mut new) = (old, new);
    for _ in 0..count {
        let (Ok(o), Ok(n)) = (git.find_commit(old), git.find_commit(new)) else {
            return false;
        };
        if o.tree_id() != n.tree_id()
            || o.message_bytes() != n.message_bytes()
            || o.parent_count() != 1
        {
            return false;
        }
        let (Ok(op), Ok(np)) = (o.parent_id(0), n.parent_id(0)) else {
            return false;
        };
        (old, new) = (op, np);
    }
    old == base && new == base
}

/// Writes `files` over `base` and returns the new tree.
pub(crate) fn apply_files(
    git: &Repository,
    base: &git2::Tree<'_>,
    files: &std::collections::BTreeMap<PathBuf, String>,
) -> Result<Oid, String> {
    let mut update = git2::build::TreeUpdateBuilder::new();
    for (path, content) in files {
        if path.as_os_str().is_empty()
            || !path
                .components()
                .all(|c| matches!(c, Component::Normal(n) if n != ".git"))
        {
            return Err(format!(
                "{} is not a path inside the repository",
                path.display()
            ));
        }
        let mode = match base.get_path(path) {
            Ok(entry) if entry.filemode() == i32::from(git2::FileMode::BlobExecutable) => {
                git2::FileMode::BlobExecutable
            }
            Ok(entry)
                if entry.kind() != Some(git2::ObjectType::Blob)
                    || entry.filemode() == i32::from(git2::FileMode::Link) =>
            {
                return Err(format!(
                    "{} is not a regular file in the repository",
                    path.display()
                ));
            }
            _ => git2::FileMode::Blob,
        };
        let blob = git
            .blob(content.as_bytes())
            .map_err(|e| e.message().to_owned())?;
        let path = path
            .to_str()
            .ok_or_else(|| format!("{} is not UTF-8", path.display()))?;
        update.upsert(path, blob, mode);
    }
    update
        .create_updated(git, base)
        .map_err(|e| e.message().to_owned())
}

/// Pushes `commit` to `branch`, or deletes `branch` when `commit` is `None`. `expected_remote`
/// is the value the remote branch must still have (`None`: must not exist); it is checked
/// against the remote's advertisement in the push connection, and the server checks it again
/// when it applies the update. `owned`: the branch is tagpilot's and may be rewritten.
pub(crate) fn push(
    git: &Repository,
    repo: &RepositoryConfig,
    branch: &str,
    commit: Option<Oid>,
    expected_remote: Option<Oid>,
    owned: bool,
) -> Result<(), AttemptError> {
    let target = format!("refs/heads/{branch}");
    let local = format!("refs/tagpilot/push/{branch}");
    let fatal = |message: String| {
        AttemptError::Fatal(GitError::Push {
            repository: repo.name.clone(),
            url: redact_url(&repo.url),
            message,
        })
    };
    let refspec = match commit {
        Some(commit) => {
            git.reference(&local, commit, true, "tagpilot: commit to push")
                .map_err(|e| fatal(e.message().to_owned()))?;
            // `+` only for a branch tagpilot owns: a shared branch must fast-forward.
            let force = if owned { "+" } else { "" };
            format!("{force}{local}:{target}")
        }
        None => format!(":{target}"),
    };

    let connector = Connector::new(&repo.url, &repo.auth).map_err(fatal)?;
    let moved = Cell::new(false);
    let statuses: RefCell<Vec<(String, Option<String>)>> = RefCell::new(Vec::new());
    let result = {
        let mut callbacks = connector.callbacks();
        callbacks.push_negotiation(|updates| {
            for update in updates {
                if update.dst_refname() == Ok(target.as_str())
                    && update.src() != expected_remote.unwrap_or(Oid::ZERO_SHA1)
                {
                    moved.set(true);
                    return Err(git2::Error::from_str(
                        "the branch moved since it was fetched",
                    ));
                }
            }
            Ok(())
        });
        // git2 reports success even when the server refused a ref: each ref's status comes here.
        callbacks.push_update_reference(|name, status| {
            statuses
                .borrow_mut()
                .push((name.to_owned(), status.map(str::to_owned)));
            Ok(())
        });
        let mut options = PushOptions::new();
        options.remote_callbacks(callbacks);
        let mut remote = git
            .remote_anonymous(&repo.url)
            .map_err(|e| fatal(e.message().to_owned()))?;
        remote.push(&[refspec.as_str()], Some(&mut options))
    };
    let _ = git.find_reference(&local).and_then(|mut r| r.delete());
    if moved.get() {
        return Err(AttemptError::Moved);
    }
    if let Some(failure) = connector.take_failure() {
        return Err(AttemptError::Fatal(connect_error(repo, failure)));
    }
    if let Err(e) = result {
        let message = scrub(e.message(), &repo.url);
        if e.code() == git2::ErrorCode::NotFastForward
            || message.contains("not present locally")
            || message.contains("non-fast")
        {
            return Err(AttemptError::Moved);
        }
        return Err(match e.class() {
            git2::ErrorClass::Net | git2::ErrorClass::Os | git2::ErrorClass::Ssl => {
                AttemptError::Fatal(GitError::Unreachable {
                    repository: repo.name.clone(),
                    url: redact_url(&repo.url),
                    message,
                })
            }
            _ => fatal(message),
        });
    }
    let statuses = statuses.into_inner();
    match statuses.iter().find(|(name, _)| *name == target) {
        Some((_, None)) => {
            // Keep the tracking ref in step, so the next lease starts from what we pushed.
            let tracking = format!("refs/remotes/origin/{branch}");
            match commit {
                Some(commit) => {
                    let _ = git.reference(&tracking, commit, true, "tagpilot: pushed");
                }
                None => {
                    let _ = git.find_reference(&tracking).and_then(|mut r| r.delete());
                }
            }
            Ok(())
        }
        Some((_, Some(status))) => Err(AttemptError::Refused(scrub(status, &repo.url))),
        None => Err(fatal(format!(
            "the remote did not report the status of {target}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_jittered_and_capped() {
        for attempt in 1..20 {
            let d = backoff(attempt).as_millis() as u64;
            let ceiling = (100u64 << attempt.min(6)).min(5_000);
            assert!(d >= ceiling / 2 && d <= ceiling, "attempt {attempt}: {d}ms");
        }
    }

    #[test]
    fn apply_files_refuses_paths_outside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let empty = git
            .find_tree(git.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        for bad in ["../x.yaml", "/etc/passwd", ".git/config", ""] {
            let files = [(PathBuf::from(bad), "x".to_owned())].into_iter().collect();
            assert!(apply_files(&git, &empty, &files).is_err(), "{bad}");
        }
        let files = [(PathBuf::from("apps/a.yaml"), "image: x\n".to_owned())]
            .into_iter()
            .collect();
        let tree = git
            .find_tree(apply_files(&git, &empty, &files).unwrap())
            .unwrap();
        assert!(tree.get_path(Path::new("apps/a.yaml")).is_ok());
        // Writing the same content again gives the same tree: the basis of "no empty commits".
        assert_eq!(apply_files(&git, &tree, &files).unwrap(), tree.id());
    }
}
