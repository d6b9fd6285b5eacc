//! A base branch's history between two commits, as tagpilot needs it to notice a person's
//! rollback: each commit's author, whether tagpilot made it (its `Tagpilot-Policy:` trailers),
//! and the manifests it changed, before and after; and one file's versions, for since when an
//! environment runs its tag (promotion). Moves bytes only: which field moved, and whether that
//! is a rollback, is decided by the planner.

use git2::{Oid, Repository, Sort};

use super::message::POLICY_TRAILER;
use super::tree::CommitFiles;

/// How many commits one cycle reads back at most: a branch that moved further than this since
/// the last cycle is read this far (the older commits are not looked at, and a warning says so).
pub const MAX_COMMITS: usize = 500;

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("reading the history of {dir}")]
    Git {
        dir: String,
        #[source]
        source: git2::Error,
    },
}

/// One commit of the base branch, with the manifests it changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitWrite {
    pub commit: String,
    /// `Name <email>`.
    pub author: String,
    /// The policies its `Tagpilot-Policy:` trailers name; empty for a commit tagpilot did not
    /// make.
    pub policies: Vec<String>,
    pub files: Vec<FileWrite>,
}

/// One manifest a commit changed: its text before and after (`None` where it did not exist or
/// is not UTF-8 text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileWrite {
    /// Relative to the repository root, `/` separators.
    pub path: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// What [`field_writes`] read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Oldest first.
    pub commits: Vec<CommitWrite>,
    /// `since` was not found within [`MAX_COMMITS`] first-parent commits of the tip: the branch
    /// was rewritten, or moved further than one cycle reads.
    pub since_not_found: bool,
}

/// The commits on the first-parent line from `since` (exclusive) to the commit `files` is of,
/// with the files each changed for which `wanted` holds (compared with its first parent).
pub fn field_writes(
    files: &CommitFiles,
    since: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<History, HistoryError> {
    let dir = files.dir();
    let fail = |source| HistoryError::Git {
        dir: dir.display().to_string(),
        source,
    };
    let git = Repository::open_bare(dir).map_err(fail)?;
    let since = Oid::from_str(since).ok();
    let mut walk = git.revwalk().map_err(fail)?;
    walk.set_sorting(Sort::TOPOLOGICAL).map_err(fail)?;
    walk.simplify_first_parent().map_err(fail)?;
    walk.push(files.commit_id()).map_err(fail)?;
    let mut history = History {
        since_not_found: true,
        ..History::default()
    };
    for id in walk.take(MAX_COMMITS) {
        let id = id.map_err(fail)?;
        if Some(id) == since {
            history.since_not_found = false;
            break;
        }
        let commit = git.find_commit(id).map_err(fail)?;
        history
            .commits
            .push(read_commit(&git, &commit, wanted).map_err(fail)?);
    }
    history.commits.reverse();
    Ok(history)
}

/// The last commit before `before` (inclusive), on the first-parent line, that tagpilot made and
/// that changed `path`; `None` when none is found within [`MAX_COMMITS`].
pub fn last_own_write(
    files: &CommitFiles,
    before: &str,
    path: &str,
) -> Result<Option<CommitWrite>, HistoryError> {
    let dir = files.dir();
    let fail = |source| HistoryError::Git {
        dir: dir.display().to_string(),
        source,
    };
    let git = Repository::open_bare(dir).map_err(fail)?;
    let Ok(start) = Oid::from_str(before) else {
        return Ok(None);
    };
    let mut walk = git.revwalk().map_err(fail)?;
    walk.set_sorting(Sort::TOPOLOGICAL).map_err(fail)?;
    walk.simplify_first_parent().map_err(fail)?;
    walk.push(start).map_err(fail)?;
    for id in walk.take(MAX_COMMITS) {
        let commit = git.find_commit(id.map_err(fail)?).map_err(fail)?;
        if policies(&commit).is_empty() {
            continue;
        }
        let write = read_commit(&git, &commit, &|p| p == path).map_err(fail)?;
        if !write.files.is_empty() {
            return Ok(Some(write));
        }
    }
    Ok(None)
}

/// One version of a file on the first-parent line: the commit that wrote it, when, and its
/// text (`None` where the commit removed it or it is not UTF-8 text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileVersion {
    pub commit: String,
    /// The commit's committer time, in seconds since the Unix epoch: when it reached the branch
    /// (a rebased or cherry-picked commit keeps its author's time, not this one).
    pub time: i64,
    pub text: Option<String>,
}

/// The versions of `path` on the first-parent line of the commit `files` is of, newest first:
/// the tip's own, then each commit that changed it (compared with its first parent), read back
/// at most [`MAX_COMMITS`] commits. What a promotion needs to say since when an environment
/// runs its tag.
pub fn file_versions(files: &CommitFiles, path: &str) -> Result<Vec<FileVersion>, HistoryError> {
    let dir = files.dir();
    let fail = |source| HistoryError::Git {
        dir: dir.display().to_string(),
        source,
    };
    let git = Repository::open_bare(dir).map_err(fail)?;
    let mut walk = git.revwalk().map_err(fail)?;
    walk.set_sorting(Sort::TOPOLOGICAL).map_err(fail)?;
    walk.simplify_first_parent().map_err(fail)?;
    walk.push(files.commit_id()).map_err(fail)?;
    let blob_at = |commit: &git2::Commit<'_>| -> Result<Option<Oid>, git2::Error> {
        match commit.tree()?.get_path(std::path::Path::new(path)) {
            Ok(entry) => Ok(Some(entry.id())),
            Err(e) if e.code() == git2::ErrorCode::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    };
    let mut versions = Vec::new();
    for id in walk.take(MAX_COMMITS) {
        let commit = git.find_commit(id.map_err(fail)?).map_err(fail)?;
        let blob = blob_at(&commit).map_err(fail)?;
        let parent = match commit.parent(0) {
            Ok(p) => blob_at(&p).map_err(fail)?,
            Err(_) => None,
        };
        if blob == parent {
            continue;
        }
        let text = blob
            .and_then(|id| git.find_blob(id).ok())
            .and_then(|b| String::from_utf8(b.content().to_vec()).ok());
        versions.push(FileVersion {
            commit: commit.id().to_string(),
            time: commit.committer().when().seconds(),
            text,
        });
        if blob.is_none() {
            // Before its removal the file's history is another story.
            break;
        }
    }
    Ok(versions)
}

fn read_commit(
    git: &Repository,
    commit: &git2::Commit<'_>,
    wanted: &dyn Fn(&str) -> bool,
) -> Result<CommitWrite, git2::Error> {
    let tree = commit.tree()?;
    let parent = match commit.parent(0) {
        Ok(p) => Some(p.tree()?),
        Err(_) => None,
    };
    let diff = git.diff_tree_to_tree(parent.as_ref(), Some(&tree), None)?;
    let mut files = Vec::new();
    for delta in diff.deltas() {
        let Some(path) = delta
            .new_file()
            .path()
            .or_else(|| delta.old_file().path())
            .map(|p| p.to_string_lossy().replace('\\', "/"))
        else {
            continue;
        };
        if !wanted(&path) {
            continue;
        }
        let text = |id: Oid| -> Option<String> {
            if id.is_zero() {
                return None;
            }
            let blob = git.find_blob(id).ok()?;
            String::from_utf8(blob.content().to_vec()).ok()
        };
        files.push(FileWrite {
            path,
            before: text(delta.old_file().id()),
            after: text(delta.new_file().id()),
        });
    }
    let author = commit.author();
    Ok(CommitWrite {
        commit: commit.id().to_string(),
        author: format!(
            "{} <{}>",
            author.name().unwrap_or_default(),
            author.email().unwrap_or_default()
        ),
        policies: policies(commit),
        files,
    })
}

/// The policies a commit's `Tagpilot-Policy:` trailers name. A merge of a branch whose tip
/// tagpilot made (its pull request, merged with a merge commit) is tagpilot's write as well:
/// on the first-parent line the merge is where the branch's change lands.
fn policies(commit: &git2::Commit<'_>) -> Vec<String> {
    let mut out = trailers(commit);
    if out.is_empty()
        && let Ok(merged) = commit.parent(1)
    {
        out = trailers(&merged);
    }
    out
}

fn trailers(commit: &git2::Commit<'_>) -> Vec<String> {
    let Ok(message) = commit.message() else {
        return Vec::new();
    };
    let Ok(trailers) = git2::message_trailers_strs(message) else {
        return Vec::new();
    };
    trailers
        .iter()
        .filter(|(key, _)| key.eq_ignore_ascii_case(POLICY_TRAILER))
        .map(|(_, value)| value.trim().to_string())
        .collect()
}
