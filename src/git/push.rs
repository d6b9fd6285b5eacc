//! Pushes: fast-forward only to a shared branch; with `+` only to a branch tagpilot owns, and
//! then only under a lease, the value the remote branch must still hold.
//!
//! The lease is checked against the remote's advertisement in the push connection, and the
//! server checks the old value again when it applies the update. git2 reports success even when
//! the server refused a ref, so each ref's status is read from the push callbacks.

use std::cell::{Cell, RefCell};

use git2::{Oid, PushOptions, Repository};

use super::auth::{Connector, redact_url};
use super::cache::connect_error;
use super::{GitError, Libgit2Error};
use crate::config::repository::RepositoryConfig;

/// Why a push failed, beyond the connection (see [`GitError::Auth`], [`GitError::Unreachable`]).
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error("{0}")]
    Git(#[source] Libgit2Error),
    #[error("the remote did not report the status of {target}")]
    NoStatus { target: String },
    #[error("the branch moved")]
    Moved,
    /// The remote refused the update; its own words.
    #[error("{status}")]
    Refused { status: String },
}

/// Why one attempt did not push.
pub(crate) enum AttemptError {
    /// The branch moved since the fetch: fetch, plan and try again.
    Moved,
    /// The remote refused the update (a hook, branch protection); retried once to tell it apart
    /// from a race, then reported. The remote's own words, URL redacted.
    Refused(String),
    Fatal(GitError),
}

impl From<GitError> for AttemptError {
    fn from(error: GitError) -> AttemptError {
        AttemptError::Fatal(error)
    }
}

impl AttemptError {
    /// The error to report when there is no next attempt.
    pub(crate) fn into_git_error(self, repo: &RepositoryConfig) -> GitError {
        let source = match self {
            AttemptError::Fatal(e) => return e,
            AttemptError::Moved => PushError::Moved,
            AttemptError::Refused(status) => PushError::Refused { status },
        };
        GitError::Push {
            repository: repo.name.clone(),
            url: redact_url(&repo.url),
            source,
        }
    }
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
    let fatal = |source: PushError| {
        AttemptError::Fatal(GitError::Push {
            repository: repo.name.clone(),
            url: redact_url(&repo.url),
            source,
        })
    };
    let libgit2 = |e: git2::Error| fatal(PushError::Git(Libgit2Error::scrubbed(e, &repo.url)));
    let refspec = match commit {
        Some(commit) => {
            git.reference(&local, commit, true, "tagpilot: commit to push")
                .map_err(libgit2)?;
            // `+` only for a branch tagpilot owns: a shared branch must fast-forward.
            let force = if owned { "+" } else { "" };
            format!("{force}{local}:{target}")
        }
        None => format!(":{target}"),
    };

    let connector = Connector::new(&repo.url, &repo.auth)
        .map_err(|e| AttemptError::Fatal(GitError::config(repo, e)))?;
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
        let mut remote = git.remote_anonymous(&repo.url).map_err(libgit2)?;
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
        let e = Libgit2Error::scrubbed(e, &repo.url);
        if e.git2().code() == git2::ErrorCode::NotFastForward
            || e.message().contains("not present locally")
            || e.message().contains("non-fast")
        {
            return Err(AttemptError::Moved);
        }
        return Err(match e.git2().class() {
            git2::ErrorClass::Net | git2::ErrorClass::Os | git2::ErrorClass::Ssl => {
                AttemptError::Fatal(GitError::Unreachable {
                    repository: repo.name.clone(),
                    url: redact_url(&repo.url),
                    source: e,
                })
            }
            _ => fatal(PushError::Git(e)),
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
        Some((_, Some(status))) => {
            Err(AttemptError::Refused(super::auth::scrub(status, &repo.url)))
        }
        None => Err(fatal(PushError::NoStatus { target })),
    }
}
