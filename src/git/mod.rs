//! Git write-back: keep a clone of each remote manifest repository, let the planner plan on
//! its base branch, and push the result as commits that never lose anyone else's work.
//!
//! This is the only module that touches a git repository or a work tree. It never force-pushes
//! a shared branch: the base branch is pushed fast-forward only, and a rejected push means
//! fetch, plan again on the new tip, and retry. Only a branch tagpilot owns (`write.branch`
//! other than the base) is rewritten, and then only with a lease on the value last fetched.
//! It never writes a secret to a log, an error or a report, and prints URLs without userinfo.
//!
//! - [`config`]: the `repositories:` section of `tagpilot.yaml`.
//! - [`message`]: change groups and commit messages (pure).
//! - [`auth`]: credentials, SSH host key checking, URL redaction.
//! - [`sign`]: SSH and OpenPGP commit signatures, in-process.
//! - [`cache`]: the clone cache under `--cache-dir`, and checkouts for the planner.
//! - [`write`]: the commit/push/retry loop.
//! - [`proposal`]: branches per change group for pull requests (pushed with a lease, never the base).

pub mod auth;
pub mod cache;
pub mod config;
pub mod message;
pub mod proposal;
pub mod sign;
pub mod write;

pub use cache::{Checkout, RepoCache, checkout};
pub use config::{
    AuthConfig, Author, Grouping, ProvidedToken, RepositoryConfig, SigningConfig, WriteConfig,
    WriteMode,
};
pub use message::{Change, ChangeGroup, DEFAULT_COMMIT_MESSAGE, POLICY_TRAILER};
pub use write::{
    PushedCommit, Replanner, RepositoryReport, WriteOptions, WriteOutcome, WriteStatus, write_all,
    write_repository, write_repository_with,
};

use std::path::PathBuf;

/// Why a repository could not be read or written. Every variant names the repository; URLs
/// in it are redacted ([`auth::redact_url`]).
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("repository `{repository}`: {message}")]
    Config { repository: String, message: String },
    #[error("repository `{repository}`: clone cache {}: {message}", path.display())]
    Cache {
        repository: String,
        path: PathBuf,
        message: String,
    },
    #[error("repository `{repository}`: cannot reach {url}: {message}")]
    Unreachable {
        repository: String,
        url: String,
        message: String,
    },
    #[error("repository `{repository}`: authentication to {url} failed: {message}")]
    Auth {
        repository: String,
        url: String,
        message: String,
    },
    #[error("repository `{repository}`: refusing to connect to {url}: {message}")]
    HostKey {
        repository: String,
        url: String,
        message: String,
    },
    #[error("repository `{repository}`: fetch from {url} failed: {message}")]
    Fetch {
        repository: String,
        url: String,
        message: String,
    },
    #[error("repository `{repository}`: branch `{branch}` does not exist on {url}")]
    BranchNotFound {
        repository: String,
        url: String,
        branch: String,
    },
    #[error("repository `{repository}`: planning failed: {source}")]
    Plan {
        repository: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("repository `{repository}`: cannot build the commit for group `{group}`: {message}")]
    Commit {
        repository: String,
        group: String,
        message: String,
    },
    #[error("repository `{repository}`: cannot sign commits: {message}")]
    Signing { repository: String, message: String },
    #[error("repository `{repository}`: {url} rejected the push to `{branch}`: {message}")]
    Rejected {
        repository: String,
        url: String,
        branch: String,
        message: String,
    },
    #[error(
        "repository `{repository}`: `{branch}` on {url} kept moving; gave up after {attempts} attempts"
    )]
    RetriesExhausted {
        repository: String,
        url: String,
        branch: String,
        attempts: u32,
    },
    #[error("repository `{repository}`: push to {url} failed: {message}")]
    Push {
        repository: String,
        url: String,
        message: String,
    },
}

impl GitError {
    /// A short stable name for reports and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            GitError::Config { .. } => "config",
            GitError::Cache { .. } => "cache",
            GitError::Unreachable { .. } => "unreachable",
            GitError::Auth { .. } => "auth",
            GitError::HostKey { .. } => "host_key",
            GitError::Fetch { .. } => "fetch",
            GitError::BranchNotFound { .. } => "branch_not_found",
            GitError::Plan { .. } => "plan",
            GitError::Commit { .. } => "commit",
            GitError::Signing { .. } => "signing",
            GitError::Rejected { .. } => "rejected",
            GitError::RetriesExhausted { .. } => "retries_exhausted",
            GitError::Push { .. } => "push",
        }
    }
}
