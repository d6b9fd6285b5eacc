//! Pushes: fast-forward only to a shared branch; with `+` only to a branch tagpilot owns, and
//! then only under a lease, the value the remote branch must still hold.
//!
//! The lease is checked against the remote's advertisement in the push connection, and the
//! server checks the old value again when it applies the update. git2 reports success even when
//! the server refused a ref, so each ref's status is read from the push callbacks.
//!
//! A refusal carries what the remote printed (`remote:` lines, a hook's own words) beside the
//! ref's status. A ref the remote could not lock or update lost a race with another push in
//! flight, and is retried like a branch that moved. On a `file://` remote, a ref lock older
//! than [`STALE_LOCK_AGE`] was left by a killed push (no push holds one for more than a moment)
//! and is removed, with a warning, so that it does not block every later push for ever.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::{Oid, PushOptions, Repository};

use super::auth::{Connector, redact_url};
use super::cache::connect_error;
use super::{GitError, Libgit2Error};
use crate::config::repository::RepositoryConfig;

/// Why a push failed, beyond the connection (see [`GitError::Auth`], [`GitError::Unreachable`]).
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    #[error(transparent)]
    Git(Libgit2Error),
    #[error("the remote did not report the status of {target}")]
    NoStatus { target: String },
    #[error("the branch moved")]
    Moved,
    /// The remote refused the update; its own words.
    #[error("{status}")]
    Refused { status: String },
}

/// How old a ref lock in a `file://` remote must be to count as left behind by a killed push.
/// git and libgit2 hold a ref's lock only while they write that one ref, well under a second;
/// ten minutes leaves a slow disk and a clock step room.
pub const STALE_LOCK_AGE: Duration = Duration::from_secs(10 * 60);

/// How many of the remote's lines a refusal carries: a hook that prints a whole log should not
/// fill the report.
const REMOTE_LINES: usize = 20;
/// How many characters of one such line.
const REMOTE_LINE_CHARS: usize = 500;

/// Why one attempt did not push.
pub(crate) enum AttemptError {
    /// The branch moved since the fetch: fetch, plan and try again.
    Moved,
    /// The remote could not lock or update the ref: another push was in flight. Retried like
    /// [`AttemptError::Moved`], whether or not the branch has moved yet; the remote's words are
    /// reported when no attempt is left.
    Raced(String),
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
            AttemptError::Refused(status) | AttemptError::Raced(status) => {
                PushError::Refused { status }
            }
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
    let to = PushTo {
        git,
        repo,
        branch,
        target: format!("refs/heads/{branch}"),
        local: format!("refs/tagpilot/push/{branch}"),
    };
    // 1. What to send: the commit under a ref of tagpilot's own, or the branch's deletion.
    let refspec = to.refspec(commit, owned)?;
    if let Some(remote) = local_remote(&repo.url) {
        remove_stale_lock(&remote, &to.target, &repo.name, STALE_LOCK_AGE);
    }
    let connector = Connector::new(&repo.url, &repo.auth)
        .map_err(|e| AttemptError::Fatal(GitError::config(repo, e)))?;
    // 2. Send it, hearing what the remote says of each ref.
    let sent = to.send(&connector, &refspec, expected_remote)?;
    let _ = git.find_reference(&to.local).and_then(|mut r| r.delete());
    // 3. What the connection says.
    if sent.moved {
        return Err(AttemptError::Moved);
    }
    if let Some(failure) = connector.take_failure() {
        return Err(AttemptError::Fatal(connect_error(repo, failure)));
    }
    if let Err(e) = sent.result {
        return Err(to.transport_error(e));
    }
    // 4. What the remote says of the branch.
    to.ref_status(commit, sent.statuses, sent.remote_said)
}

/// One push's branch, in the repository it is pushed from.
struct PushTo<'a> {
    git: &'a Repository,
    repo: &'a RepositoryConfig,
    branch: &'a str,
    /// `refs/heads/<branch>` on the remote.
    target: String,
    /// The local ref the commit is pushed from, removed after the push.
    local: String,
}

/// What one push connection reported.
struct Sent {
    result: Result<(), git2::Error>,
    /// The remote branch no longer held the expected value when the push negotiated.
    moved: bool,
    /// Each ref's status: `None` for updated, else the remote's reason.
    statuses: Vec<(String, Option<String>)>,
    remote_said: RemoteMessages,
}

impl PushTo<'_> {
    fn fatal(&self, source: PushError) -> AttemptError {
        AttemptError::Fatal(GitError::Push {
            repository: self.repo.name.clone(),
            url: redact_url(&self.repo.url),
            source,
        })
    }

    fn libgit2(&self, e: git2::Error) -> AttemptError {
        self.fatal(PushError::Git(Libgit2Error::scrubbed(e, &self.repo.url)))
    }

    fn refspec(&self, commit: Option<Oid>, owned: bool) -> Result<String, AttemptError> {
        let (local, target) = (&self.local, &self.target);
        Ok(match commit {
            Some(commit) => {
                self.git
                    .reference(local, commit, true, "tagpilot: commit to push")
                    .map_err(|e| self.libgit2(e))?;
                // `+` only for a branch tagpilot owns: a shared branch must fast-forward.
                let force = if owned { "+" } else { "" };
                format!("{force}{local}:{target}")
            }
            None => format!(":{target}"),
        })
    }

    fn send(
        &self,
        connector: &Connector,
        refspec: &str,
        expected_remote: Option<Oid>,
    ) -> Result<Sent, AttemptError> {
        let target = self.target.as_str();
        let moved = Cell::new(false);
        let statuses: RefCell<Vec<(String, Option<String>)>> = RefCell::new(Vec::new());
        let remote_said = RefCell::new(RemoteMessages::default());
        let result = {
            let mut callbacks = connector.callbacks();
            // What the remote prints (hooks' stderr, `remote:` lines) comes on the side band.
            callbacks.sideband_progress(|text| {
                remote_said.borrow_mut().push(text);
                true
            });
            callbacks.push_negotiation(|updates| {
                for update in updates {
                    if update.dst_refname() == Ok(target)
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
            // git2 reports success even when the server refused a ref: each ref's status comes
            // here.
            callbacks.push_update_reference(|name, status| {
                statuses
                    .borrow_mut()
                    .push((name.to_owned(), status.map(str::to_owned)));
                Ok(())
            });
            let mut options = PushOptions::new();
            options.remote_callbacks(callbacks);
            let mut remote = self
                .git
                .remote_anonymous(&self.repo.url)
                .map_err(|e| self.libgit2(e))?;
            remote.push(&[refspec], Some(&mut options))
        };
        Ok(Sent {
            result,
            moved: moved.get(),
            statuses: statuses.into_inner(),
            remote_said: remote_said.into_inner(),
        })
    }

    /// A push the connection failed: the branch moved, the remote is unreachable, or git
    /// said why.
    fn transport_error(&self, e: git2::Error) -> AttemptError {
        let e = Libgit2Error::scrubbed(e, &self.repo.url);
        if e.git2().code() == git2::ErrorCode::NotFastForward
            || e.message().contains("not present locally")
            || e.message().contains("non-fast")
        {
            return AttemptError::Moved;
        }
        match e.git2().class() {
            git2::ErrorClass::Net | git2::ErrorClass::Os | git2::ErrorClass::Ssl => {
                AttemptError::Fatal(GitError::Unreachable {
                    repository: self.repo.name.clone(),
                    url: redact_url(&self.repo.url),
                    source: e,
                })
            }
            _ => self.fatal(PushError::Git(e)),
        }
    }

    /// The branch's own status: updated (the tracking ref follows), refused, or lost to
    /// another push in flight.
    fn ref_status(
        &self,
        commit: Option<Oid>,
        statuses: Vec<(String, Option<String>)>,
        remote_said: RemoteMessages,
    ) -> Result<(), AttemptError> {
        match statuses.iter().find(|(name, _)| *name == self.target) {
            Some((_, None)) => {
                // Keep the tracking ref in step, so the next lease starts from what we pushed.
                let tracking = format!("refs/remotes/origin/{}", self.branch);
                match commit {
                    Some(commit) => {
                        let _ = self
                            .git
                            .reference(&tracking, commit, true, "tagpilot: pushed");
                    }
                    None => {
                        let _ = self
                            .git
                            .find_reference(&tracking)
                            .and_then(|mut r| r.delete());
                    }
                }
                Ok(())
            }
            Some((_, Some(status))) => {
                let message = remote_said.explain(status);
                let message = super::auth::scrub(&message, &self.repo.url);
                if lost_a_race(status) {
                    Err(AttemptError::Raced(message))
                } else {
                    Err(AttemptError::Refused(message))
                }
            }
            None => Err(self.fatal(PushError::NoStatus {
                target: self.target.clone(),
            })),
        }
    }
}

/// Whether a ref's push status says the remote could not lock or update the ref: git's
/// receive-pack (`failed to update ref`, `cannot lock ref`) and libgit2's local transport
/// (`failed to lock file … for writing`). Another push held the ref at that moment.
fn lost_a_race(status: &str) -> bool {
    [
        "failed to update ref",
        "cannot lock ref",
        "failed to lock file",
    ]
    .iter()
    .any(|s| status.contains(s))
}

/// The lines the remote printed during a push, without its progress meters.
#[derive(Default)]
struct RemoteMessages {
    /// What came after the last line break, waiting for the rest of its line.
    partial: String,
    lines: Vec<String>,
}

impl RemoteMessages {
    fn push(&mut self, text: &[u8]) {
        self.partial.push_str(&String::from_utf8_lossy(text));
        while let Some(end) = self.partial.find(['\n', '\r']) {
            let line: String = self.partial.drain(..=end).collect();
            self.keep(&line);
        }
        // A remote that never ends its line does not grow this without bound.
        truncate_chars(&mut self.partial, REMOTE_LINE_CHARS);
    }

    fn keep(&mut self, line: &str) {
        let line = line.trim();
        // Progress meters ("Resolving deltas: 100% (3/3)") say nothing about a refusal.
        if line.is_empty() || line.contains("% (") || self.lines.len() == REMOTE_LINES {
            return;
        }
        let mut line = line.to_owned();
        truncate_chars(&mut line, REMOTE_LINE_CHARS);
        self.lines.push(line);
    }

    /// `status`, followed by what the remote printed, if anything.
    fn explain(mut self, status: &str) -> String {
        let rest = std::mem::take(&mut self.partial);
        self.keep(&rest);
        if self.lines.is_empty() {
            return status.to_owned();
        }
        format!("{status}; the remote said: {}", self.lines.join(" / "))
    }
}

/// Cuts `text` to its first `max` characters.
fn truncate_chars(text: &mut String, max: usize) {
    if let Some((at, _)) = text.char_indices().nth(max) {
        text.truncate(at);
    }
}

/// The repository directory of a `file://` URL (or a plain path), where tagpilot's own push
/// may have left a lock; `None` for a remote reached over the network.
fn local_remote(url: &str) -> Option<PathBuf> {
    let path = match url.strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None if url.starts_with('/') => PathBuf::from(url),
        None => return None,
    };
    // A bare repository is the directory itself; a work tree keeps its refs in `.git`.
    let dotgit = path.join(".git");
    Some(if dotgit.is_dir() { dotgit } else { path })
}

/// Removes `<remote>/<target>.lock` when it is older than `max_age`: left by a push that was
/// killed between taking the lock and renaming it into place (tagpilot aborted by a second
/// signal, or killed), it would refuse every later push to the branch, people's too, for ever.
/// A younger lock belongs to a push in flight: it is left alone, and the push that meets it is
/// retried as a race. Returns whether a lock was removed.
fn remove_stale_lock(remote: &Path, target: &str, repository: &str, max_age: Duration) -> bool {
    let lock = remote.join(format!("{target}.lock"));
    // The system's time of day, as the file system dated the lock.
    let now = std::time::SystemTime::from(crate::clock::Clock::wall(&crate::clock::SystemClock));
    let Ok(age) = std::fs::metadata(&lock)
        .and_then(|m| m.modified())
        .map(|modified| now.duration_since(modified).unwrap_or_default())
    else {
        return false;
    };
    if age < max_age {
        return false;
    }
    match std::fs::remove_file(&lock) {
        Ok(()) => {
            tracing::warn!(
                repository,
                lock = %lock.display(),
                age = %humantime::format_duration(Duration::from_secs(age.as_secs())),
                "removed a stale ref lock left by a killed push"
            );
            true
        }
        Err(error) => {
            tracing::warn!(
                repository,
                lock = %lock.display(),
                %error,
                "cannot remove a stale ref lock; pushes to the branch will fail until it is gone"
            );
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_carries_the_remote_lines_without_progress_meters() {
        let mut said = RemoteMessages::default();
        said.push(b"Resolving deltas:  50% (1/2)\rResolving deltas: 100% (2/2)\r");
        said.push(b"Resolving deltas: 100% (2/2), done.\nmain is protec");
        said.push(b"ted: pushes need a review\nsee https://wiki.example/rules");
        assert_eq!(
            said.explain("pre-receive hook declined"),
            "pre-receive hook declined; the remote said: main is protected: pushes need a \
             review / see https://wiki.example/rules"
        );
        assert_eq!(
            RemoteMessages::default().explain("pre-receive hook declined"),
            "pre-receive hook declined"
        );

        // A hook that prints without end fills neither memory nor the report.
        let mut flood = RemoteMessages::default();
        for _ in 0..1000 {
            flood.push("é".repeat(100).as_bytes());
        }
        for _ in 0..100 {
            flood.push(b"line\n");
        }
        let explained = flood.explain("declined");
        assert!(
            explained.len() < 30 * REMOTE_LINE_CHARS,
            "{}",
            explained.len()
        );
    }

    #[test]
    fn a_lock_or_update_failure_is_a_race() {
        assert!(lost_a_race("failed to update ref"));
        assert!(lost_a_race(
            "failed to lock file '/srv/m.git/refs/heads/main.lock' for writing: File exists"
        ));
        assert!(!lost_a_race("pre-receive hook declined"));
    }

    #[test]
    fn only_a_local_remote_has_locks_tagpilot_may_touch() {
        assert_eq!(
            local_remote("file:///srv/m.git"),
            Some(PathBuf::from("/srv/m.git"))
        );
        assert_eq!(local_remote("https://git.example/m.git"), None);
        assert_eq!(local_remote("git@git.example:m.git"), None);
    }

    #[test]
    fn only_an_old_lock_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("refs/heads")).unwrap();
        let lock = dir.path().join("refs/heads/main.lock");
        std::fs::write(&lock, "").unwrap();
        assert!(!remove_stale_lock(
            dir.path(),
            "refs/heads/main",
            "m",
            Duration::from_secs(60)
        ));
        assert!(lock.exists(), "a push in flight keeps its lock");
        std::thread::sleep(Duration::from_millis(20));
        assert!(remove_stale_lock(
            dir.path(),
            "refs/heads/main",
            "m",
            Duration::from_millis(10)
        ));
        assert!(!lock.exists());
        assert!(!remove_stale_lock(
            dir.path(),
            "refs/heads/main",
            "m",
            Duration::ZERO
        ));
    }
}
