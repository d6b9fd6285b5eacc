//! The write loop: fetch, let the planner plan on the fetched tip, commit each change group
//! ([`super::commit`]), push without force ([`super::push`]), and on a rejected push start over
//! from a new fetch. A push the remote could not lock the branch for (another push in flight)
//! is retried the same way.
//!
//! Commits are made in the cache's object store and become visible only through a successful
//! push, so a failure at any step leaves the remote exactly as it was. Never pushes with force
//! except to a branch tagpilot owns, and then only if the remote still holds the value last
//! fetched (a lease checked in the same connection as the push).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use git2::Repository;

use super::GitError;
use super::auth::redact_url;
use super::cache::{self, RepoCache, cache_error};
pub use super::commit::PushedCommit;
use super::commit::{build_commits, same_proposal};
use super::push::{AttemptError, push};
use super::sign::{self, Signer};
use super::tree::CommitFiles;
use crate::change::ChangeGroup;
use crate::config::repository::{ConfigError, RepositoryConfig};

/// What a planner found on one checkout: the change groups to commit, and its own account of
/// the checkout (changes, holds, problems) for the report, returned rather than kept aside.
#[derive(Debug, Clone)]
pub struct Planned<T> {
    /// The groups as they are committed, one commit (or pull request) each, already grouped
    /// per `write.group` ([`crate::change::group`]): the writers never group again. See
    /// [`ChangeGroup`] for how groups that change one file must be built.
    pub groups: Vec<ChangeGroup>,
    /// Whether the plan covered every policy (no problems). A change that is missing from an
    /// incomplete plan may be missing because its registry failed, so pull requests are closed
    /// only after a complete plan.
    pub complete: bool,
    /// The branch to write to when its name depends on the changes (a `git-branch` template
    /// with `{{.SHA256}}`): named from this very plan, so the repository is planned once.
    pub branch: Option<String>,
    /// The planner's own result, handed back with the write outcome.
    pub plan: T,
}

impl Planned<()> {
    /// Groups with nothing else to report: a complete plan on the configured branch.
    pub fn groups(groups: Vec<ChangeGroup>) -> Self {
        Planned {
            groups,
            complete: true,
            branch: None,
            plan: (),
        }
    }
}

/// Plans the changes of one repository on the files of its base branch's tip. The writer calls
/// it once per attempt: after a rejected push it runs again on the new tip, where another writer
/// may already have made some of the changes.
pub trait Replanner {
    /// What the planner reports besides the groups (`()` when nothing).
    type Plan: Send + 'static;
    type Error: std::error::Error + Send + Sync + 'static;

    /// The change groups for `repository`, planned on `files` (the base branch's tip, read
    /// from the clone cache's object database; read them, don't keep them).
    fn plan(
        &self,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> impl Future<Output = Result<Planned<Self::Plan>, Self::Error>> + Send;
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
pub struct RepositoryReport<T = ()> {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    /// The last plan made on the repository, also when the write then failed.
    pub plan: Option<T>,
    /// The branch written to, or that would have been: also when the write failed (after
    /// planning, the branch named from the changes, if its name depends on them).
    pub branch: String,
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
) -> Vec<RepositoryReport<P::Plan>> {
    let mut reports = Vec::with_capacity(repositories.len());
    for repo in repositories {
        reports.push(write_planned(cache, repo, planner, options).await);
    }
    reports
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
pub async fn write_repository_with<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    options: WriteOptions,
) -> Result<WriteOutcome, GitError> {
    write_planned(cache, repo, planner, options).await.result
}

/// [`write_repository_with`], handing back the planner's last plan beside the outcome.
#[tracing::instrument(skip_all, fields(repository = %repo.name, dry_run = options.dry_run))]
pub async fn write_planned<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    options: WriteOptions,
) -> RepositoryReport<P::Plan> {
    let mut last = LastPlan {
        plan: None,
        branch: repo.target_branch().to_owned(),
    };
    let result = write_attempts(cache, repo, planner, options, &mut last).await;
    if let Err(e) = &result {
        tracing::error!(repository = %repo.name, error = %crate::error_chain::Chain(e), "write-back failed");
    }
    RepositoryReport {
        repository: repo.name.clone(),
        url: redact_url(&repo.url),
        plan: last.plan,
        branch: last.branch,
        result,
    }
}

/// What the write loop knew when it stopped, kept whatever the result.
struct LastPlan<T> {
    plan: Option<T>,
    branch: String,
}

/// The fetch-plan-push rounds; `last` holds the newest plan whatever the result, so that a
/// failure after planning (a signing key that does not unlock, a refused push) is reported with
/// the changes that were pending.
async fn write_attempts<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    options: WriteOptions,
    last: &mut LastPlan<P::Plan>,
) -> Result<WriteOutcome, GitError> {
    // 1. What every round shares: the checked configuration, the clone, the signer once loaded.
    let mut rounds = Rounds::new(cache, repo, options)?;
    let mut refused: Option<(cache::Fetched, String)> = None;
    for attempt in 1..=rounds.max_attempts {
        // 2. Fetch the base.
        let (fetched, files) = rounds.fetch().await?;
        if let Some((seen, message)) = refused.take()
            && seen == fetched
        {
            // Nothing moved, so the refusal was not a race: report it.
            return Err(rounds.rejected(message));
        }
        // 3. Plan on it.
        let Some((fetched, groups, signer)) = rounds.plan(planner, fetched, files, last).await?
        else {
            // The base moved while the branch named from the changes was fetched.
            continue;
        };
        // 4. Commit and push.
        let result = rounds.write(fetched, groups, signer).await?;
        // 5. Done, or why to go round again.
        match rounds.judge(attempt, fetched, result)? {
            Next::Done(outcome) => return Ok(outcome),
            Next::Again { refused: r } => refused = r,
        }
        if attempt < rounds.max_attempts {
            tokio::time::sleep(backoff(attempt)).await;
        }
    }
    Err(GitError::RetriesExhausted {
        repository: rounds.repo.name.clone(),
        url: rounds.url,
        branch: rounds.repo.target_branch().to_owned(),
        attempts: rounds.max_attempts,
    })
}

/// What the rounds of one repository's write share.
struct Rounds {
    /// The configuration, with `write.branch` set once a plan names the branch.
    repo: RepositoryConfig,
    options: WriteOptions,
    /// The repository's clone in the cache.
    dir: PathBuf,
    /// Without userinfo.
    url: String,
    max_attempts: u32,
    /// Loaded after the first plan, so that a key that does not unlock is reported beside the
    /// changes it kept from being written; still before anything is committed or pushed.
    signer: Option<Arc<Option<Signer>>>,
}

/// After a round: its outcome, or another round (with the refusal to check against the next
/// fetch).
enum Next {
    Done(WriteOutcome),
    Again {
        refused: Option<(cache::Fetched, String)>,
    },
}

impl Rounds {
    fn new(
        cache: &RepoCache,
        repo: &RepositoryConfig,
        options: WriteOptions,
    ) -> Result<Self, GitError> {
        repo.validate()?;
        if repo.write.mode == super::WriteMode::PullRequest {
            // Here the target would be the base branch itself: never push a protected base.
            return Err(GitError::config(repo, ConfigError::PullRequestNotPushed));
        }
        Ok(Rounds {
            repo: repo.clone(),
            options,
            dir: cache.repo_dir(repo),
            url: redact_url(&repo.url),
            max_attempts: repo.write.max_retries + 1,
            signer: None,
        })
    }

    /// Fetches the base and reads its tip's files.
    async fn fetch(&self) -> Result<(cache::Fetched, CommitFiles), GitError> {
        let (dir, repo) = (self.dir.clone(), self.repo.clone());
        blocking(move || {
            let (git, fetched) = cache::sync(&dir, &repo)?;
            let files = cache::commit_files(git, &dir, &repo, fetched.base_tip)?;
            Ok((fetched, files))
        })
        .await
    }

    /// Plans on `files` and fetches the branch the plan names, if it names
    /// another. `None` when the base moved meanwhile: plan again on it.
    async fn plan<P: Replanner>(
        &mut self,
        planner: &P,
        fetched: cache::Fetched,
        files: CommitFiles,
        last: &mut LastPlan<P::Plan>,
    ) -> Result<Option<(cache::Fetched, Vec<ChangeGroup>, Arc<Option<Signer>>)>, GitError> {
        let planned = planner
            .plan(&self.repo, &files)
            .await
            .map_err(|e| GitError::Plan {
                repository: self.repo.name.clone(),
                source: Box::new(e),
            })?;
        drop(files);
        // Grouped per `write.group` by the planner: one commit per group, as given.
        let groups = planned.groups;
        last.plan = Some(planned.plan);
        let signer = match &self.signer {
            Some(loaded) => loaded.clone(),
            None => self.signer.insert(sign::signer_for(&self.repo)?).clone(),
        };
        let mut fetched = fetched;
        if let Some(branch) = planned.branch
            && self.repo.write.branch.as_deref() != Some(branch.as_str())
        {
            // The branch is named from the changes just planned: fetch what it holds for the
            // lease. The base is fetched again with it; had it moved, plan again on it.
            self.repo.write.branch = Some(branch);
            last.branch = self.repo.target_branch().to_owned();
            let renamed = blocking({
                let (dir, repo) = (self.dir.clone(), self.repo.clone());
                move || Ok(cache::sync(&dir, &repo)?.1)
            })
            .await?;
            if renamed.base_tip != fetched.base_tip {
                return Ok(None);
            }
            fetched = renamed;
        }
        Ok(Some((fetched, groups, signer)))
    }

    /// Commits `groups` on the fetched base and pushes them (or, dry, only builds them).
    async fn write(
        &self,
        fetched: cache::Fetched,
        groups: Vec<ChangeGroup>,
        signer: Arc<Option<Signer>>,
    ) -> Result<Result<WriteStatus, AttemptError>, GitError> {
        let (dir, repo, options) = (self.dir.clone(), self.repo.clone(), self.options);
        blocking(move || {
            Ok(commit_and_push(
                &dir,
                &repo,
                fetched,
                groups,
                signer.as_ref().as_ref(),
                options,
            ))
        })
        .await
    }

    /// What a round's write means: done, failed, or worth another round.
    fn judge(
        &self,
        attempt: u32,
        fetched: cache::Fetched,
        result: Result<WriteStatus, AttemptError>,
    ) -> Result<Next, GitError> {
        let branch = self.repo.target_branch();
        match result {
            Ok(status) => Ok(Next::Done(WriteOutcome {
                repository: self.repo.name.clone(),
                url: self.url.clone(),
                branch: branch.to_owned(),
                base_commit: fetched.base_tip.to_string(),
                status,
                attempts: attempt,
            })),
            Err(AttemptError::Fatal(e)) => Err(e),
            Err(AttemptError::Moved) => {
                tracing::info!(attempt, branch, "branch moved; fetching and planning again");
                Ok(Next::Again { refused: None })
            }
            Err(AttemptError::Raced(message)) => {
                // Another push held the ref: it may not have landed yet, so this is a race
                // even when the next fetch finds the branch where it was.
                tracing::info!(
                    attempt,
                    branch,
                    %message,
                    "another push held the branch; fetching and planning again"
                );
                if attempt == self.max_attempts {
                    return Err(self.rejected(message));
                }
                Ok(Next::Again { refused: None })
            }
            Err(AttemptError::Refused(message)) => {
                tracing::info!(attempt, %message, "push refused; checking whether the branch moved");
                if attempt == self.max_attempts {
                    return Err(self.rejected(message));
                }
                Ok(Next::Again {
                    refused: Some((fetched, message)),
                })
            }
        }
    }

    /// The remote refused the push for a reason of its own.
    fn rejected(&self, message: String) -> GitError {
        GitError::Rejected {
            repository: self.repo.name.clone(),
            url: self.url.clone(),
            branch: self.repo.target_branch().to_owned(),
            message,
        }
    }
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

/// Above libgit2's own backends (loose 1, packed 2): new objects go to the first backend, by
/// priority, that can write.
const DRY_RUN_PRIORITY: i32 = 1000;

/// Builds one commit per group on the fetched base tip and pushes the last one.
fn commit_and_push(
    dir: &Path,
    repo: &RepositoryConfig,
    fetched: cache::Fetched,
    groups: Vec<ChangeGroup>,
    signer: Option<&Signer>,
    options: WriteOptions,
) -> Result<WriteStatus, AttemptError> {
    let git = Repository::open_bare(dir).map_err(|e| cache_error(repo, dir, e))?;
    if options.dry_run {
        // A dry run builds the commits it reports, to know whether they change anything, in
        // memory only: objects written to the clone cache's store would be referenced by
        // nothing, and a plan run every few minutes would pile them up.
        git.odb()
            .and_then(|odb| odb.add_new_mempack_backend(DRY_RUN_PRIORITY).map(drop))
            .map_err(|e| cache_error(repo, dir, e))?;
    }
    let (tip, commits) = build_commits(&git, repo, fetched.base_tip, groups, signer)?;

    let expected_remote = if repo.owns_target_branch() {
        match fetched.owned_tip {
            None if commits.is_empty() => return Ok(WriteStatus::UpToDate),
            Some(old) if old == tip => return Ok(WriteStatus::UpToDate),
            Some(old) if same_proposal(&git, old, tip, fetched.base_tip, commits.len()) => {
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
        Some(tip),
        expected_remote,
        repo.owns_target_branch(),
    )?;
    Ok(WriteStatus::Pushed { commits })
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
}
