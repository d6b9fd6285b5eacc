//! Git write-back: keep a clone of each remote manifest repository, let the planner plan on
//! its base branch, and push the result as commits that never lose anyone else's work.
//!
//! This is the only module that touches a git repository. It writes no work tree: the planner
//! reads a commit's blobs through [`crate::files::Files`], and commits are built from the
//! changed blobs over the base tree. It never force-pushes
//! a shared branch: the base branch is pushed fast-forward only, and a rejected push means
//! fetch, plan again on the new tip, and retry. Only a branch tagpilot owns (`write.branch`
//! other than the base) is rewritten, and then only with a lease on the value last fetched.
//! It never writes a secret to a log, an error or a report, and prints URLs without userinfo.
//!
//! - [`config`]: the `repositories:` section of `tagpilot.yaml`.
//! - [`message`]: commit messages (pure); the change groups are [`crate::change`]'s.
//! - [`auth`]: credentials, SSH host key checking, URL redaction.
//! - [`sign`]: SSH and OpenPGP commit signatures, in-process.
//! - [`cache`]: the clone cache under `--cache-dir`.
//! - [`tree`]: a fetched commit's files read from the object database for the planner (no
//!   work tree is written).
//! - [`write`]: the fetch/plan/push/retry loop.
//! - [`commit`]: commits built from change groups in the cache's object store, signed if asked.
//! - [`push`]: pushes without force, or with a lease on a branch tagpilot owns.
//! - `check`: what `tagpilot check` can verify of a repository without connecting.
//! - [`proposal`]: branches per change group for pull requests (pushed with a lease, never the base).

pub mod ancestry;
pub mod auth;
pub mod cache;
mod check;
pub mod commit;
pub mod history;
/// The `repositories:` types, which live with the rest of the configuration.
pub use crate::config::repository as config;
pub mod message;
pub mod proposal;
pub mod push;
pub mod sign;
pub mod tree;
pub mod write;

pub use cache::{RepoCache, cached_fetch_time, cached_snapshot, snapshot};
pub use config::{
    AuthConfig, Author, Grouping, ProvidedToken, RepositoryConfig, SigningConfig, WriteConfig,
    WriteMode,
};
pub use message::{DEFAULT_COMMIT_MESSAGE, POLICY_TRAILER, REVERT_TRAILER};
pub use tree::CommitFiles;
pub use write::{
    Planned, PushedCommit, Replanner, RepositoryReport, WriteOptions, WriteOutcome, WriteStatus,
    write_all, write_planned, write_repository, write_repository_with,
};

use std::path::PathBuf;

pub use crate::config::repository::ConfigError;
pub use auth::{AuthError, HostKeyError};
pub use cache::CacheError;
pub use commit::CommitError;
pub use message::TemplateError;
pub use push::PushError;
pub use sign::SignError;

/// Why a repository could not be read or written. Every variant names the repository; URLs
/// in it are redacted ([`auth::redact_url`]). Each variant's text already says what its source
/// says, so a report that shows only the top line loses nothing. The largest sources are boxed
/// to keep `Result<_, GitError>` small.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    #[error("repository `{repository}`")]
    Config {
        repository: String,
        #[source]
        source: ConfigError,
    },
    #[error("repository `{repository}`")]
    Template {
        repository: String,
        #[source]
        source: TemplateError,
    },
    #[error("repository `{repository}`: invalid `write.author`")]
    InvalidAuthor {
        repository: String,
        #[source]
        source: Libgit2Error,
    },
    #[error("repository `{repository}`: clone cache {}", path.display())]
    Cache {
        repository: String,
        path: PathBuf,
        #[source]
        source: CacheError,
    },
    #[error("repository `{repository}`: cannot reach {url}")]
    Unreachable {
        repository: String,
        url: String,
        #[source]
        source: Libgit2Error,
    },
    #[error("repository `{repository}`: authentication to {url} failed")]
    Auth {
        repository: String,
        url: String,
        #[source]
        source: AuthError,
    },
    #[error("repository `{repository}`: refusing to connect to {url}")]
    HostKey {
        repository: String,
        url: String,
        #[source]
        source: Box<HostKeyError>,
    },
    #[error("repository `{repository}`: fetch from {url} failed")]
    Fetch {
        repository: String,
        url: String,
        #[source]
        source: Libgit2Error,
    },
    #[error("repository `{repository}`: branch `{branch}` does not exist on {url}")]
    BranchNotFound {
        repository: String,
        url: String,
        branch: String,
    },
    #[error("repository `{repository}`: planning failed")]
    Plan {
        repository: String,
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("repository `{repository}`: cannot build the commit for group `{group}`")]
    Commit {
        repository: String,
        group: String,
        #[source]
        source: CommitError,
    },
    #[error("repository `{repository}`: cannot sign commits")]
    Signing {
        repository: String,
        #[source]
        source: Box<SignError>,
    },
    /// The remote refused the update; `message` is the remote's own status text (a hook's or
    /// branch protection's words), or why tagpilot left the branch alone.
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
    #[error("repository `{repository}`: push to {url} failed")]
    Push {
        repository: String,
        url: String,
        #[source]
        source: PushError,
    },
}

impl GitError {
    /// A short stable name for reports and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            GitError::Config { .. } => "config",
            GitError::Template { .. } => "template",
            GitError::InvalidAuthor { .. } => "invalid_author",
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

    /// A configuration problem of `repository`.
    pub(crate) fn config(repository: &RepositoryConfig, source: ConfigError) -> GitError {
        GitError::Config {
            repository: repository.name.clone(),
            source,
        }
    }
}

/// An error from libgit2, shown as its message alone.
///
/// libgit2's messages may quote the remote's URL, userinfo included, so an error from talking
/// to a remote is made with [`Libgit2Error::scrubbed`]. The wrapped [`git2::Error`] keeps its
/// class and code for callers that tell errors apart; it is not offered as a further source,
/// because its `Display` only appends that class and code to the message already shown.
#[derive(Debug)]
pub struct Libgit2Error(git2::Error);

impl Libgit2Error {
    /// `error` with every occurrence of `url` replaced by its redacted form.
    pub fn scrubbed(error: git2::Error, url: &str) -> Libgit2Error {
        let message = auth::scrub(error.message(), url);
        Libgit2Error(git2::Error::new(error.code(), error.class(), message))
    }

    pub fn git2(&self) -> &git2::Error {
        &self.0
    }

    pub fn message(&self) -> &str {
        self.0.message()
    }
}

impl From<git2::Error> for Libgit2Error {
    /// For errors of local operations (the cache's object store), which never see a URL.
    fn from(error: git2::Error) -> Libgit2Error {
        Libgit2Error(error)
    }
}

impl std::fmt::Display for Libgit2Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.message())
    }
}

impl std::error::Error for Libgit2Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libgit2_errors_from_a_remote_lose_the_userinfo_and_keep_class_and_code() {
        let url = "https://bot:hunter2@git.example/m.git";
        let raw = git2::Error::new(
            git2::ErrorCode::Auth,
            git2::ErrorClass::Http,
            format!("unexpected HTTP status code: 401 for {url}"),
        );
        let error = Libgit2Error::scrubbed(raw, url);
        assert_eq!(
            error.to_string(),
            "unexpected HTTP status code: 401 for https://git.example/m.git"
        );
        assert_eq!(error.git2().code(), git2::ErrorCode::Auth);
        assert_eq!(error.git2().class(), git2::ErrorClass::Http);
        let shown = GitError::Fetch {
            repository: "m".into(),
            url: auth::redact_url(url),
            source: error,
        };
        assert!(
            !format!("{shown} {shown:?}").contains("hunter2"),
            "{shown:?}"
        );
    }
}
