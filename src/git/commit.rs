//! Commits made from change groups: each group's files written over the tree of its parent,
//! with the configured author and message, signed when asked.
//!
//! Commits are made in the cache's object store and are referenced by no branch: only a push
//! makes them visible. No empty commits: a group that changes nothing is skipped.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use git2::{Oid, Repository};

use super::cache::cache_error;
use super::message::{TemplateError, render_message};
use super::sign::{SignError, Signer};
use super::{GitError, Libgit2Error};
use crate::change::{Change, ChangeGroup};
use crate::config::repository::RepositoryConfig;

/// Why a change group's commit could not be built.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("{} is not a path inside the repository", path.display())]
    OutsideRepository { path: PathBuf },
    #[error("{} is not a regular file in the repository", path.display())]
    NotRegularFile { path: PathBuf },
    #[error("{} is not UTF-8", path.display())]
    PathNotUtf8 { path: PathBuf },
    #[error(transparent)]
    Git(Libgit2Error),
    #[error(transparent)]
    Message(#[from] TemplateError),
}

impl From<git2::Error> for CommitError {
    fn from(error: git2::Error) -> CommitError {
        CommitError::Git(error.into())
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

/// One commit per group, each on the previous one, starting at `base`. Returns the new tip
/// (`base` when no group changed anything) and the commits made.
pub(crate) fn build_commits(
    git: &Repository,
    repo: &RepositoryConfig,
    base: Oid,
    groups: Vec<ChangeGroup>,
    signer: Option<&Signer>,
) -> Result<(Oid, Vec<PushedCommit>), GitError> {
    let fatal_cache = |e: git2::Error| cache_error(repo, git.path(), e);
    let mut tip = git.find_commit(base).map_err(fatal_cache)?;
    let mut commits = Vec::new();
    for group in groups {
        let commit_error = |source: CommitError| GitError::Commit {
            repository: repo.name.clone(),
            group: group.key.clone(),
            source,
        };
        let base_tree = tip.tree().map_err(fatal_cache)?;
        let tree_id = apply_files(git, &base_tree, &group.files).map_err(commit_error)?;
        if tree_id == base_tree.id() {
            // Already there (another writer made the change): no empty commits.
            continue;
        }
        let message = render_message(repo.write.commit_message.as_deref(), &repo.name, &group)
            .map_err(|e| commit_error(e.into()))?;
        let id = make_commit(git, repo, &tip, tree_id, &message, signer)?;
        tip = git.find_commit(id).map_err(fatal_cache)?;
        commits.push(PushedCommit {
            id: id.to_string(),
            group: group.key.clone(),
            summary: message.lines().next().unwrap_or_default().to_owned(),
            changes: group.changes,
        });
    }
    Ok((tip.id(), commits))
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
) -> Result<Oid, GitError> {
    let fatal_cache = |e: git2::Error| cache_error(repo, git.path(), e);
    let signing = |source: SignError| GitError::Signing {
        repository: repo.name.clone(),
        source: Box::new(source),
    };
    let tree = git.find_tree(tree_id).map_err(fatal_cache)?;
    // Dated by the system's time of day in its zone, as `git commit` dates a commit: the date is
    // for the people reading the history (the writers are not handed the cycle's clock).
    let now = crate::clock::Clock::wall(&crate::clock::SystemClock);
    let offset = jiff::tz::TimeZone::system().to_offset(now).seconds() / 60;
    let when = git2::Time::new(now.as_second(), offset);
    let author = git2::Signature::new(&repo.write.author.name, &repo.write.author.email, &when)
        .map_err(|e| GitError::InvalidAuthor {
            repository: repo.name.clone(),
            source: e.into(),
        })?;
    match signer {
        None => git.commit(None, &author, &author, message, &tree, &[parent]),
        Some(signer) => {
            let buffer = git
                .commit_create_buffer(&author, &author, message, &tree, &[parent])
                .map_err(fatal_cache)?;
            let content =
                std::str::from_utf8(&buffer).map_err(|e| signing(SignError::CommitNotUtf8(e)))?;
            let signature = signer.sign(&buffer).map_err(signing)?;
            git.commit_signed(content, &signature, None)
        }
    }
    .map_err(fatal_cache)
}

/// Whether the owned branch at `old` already holds what we would push as `new`: the same trees
/// and messages, commit by commit, on the same base. Rebuilding it anyway would push a new
/// commit on every run.
pub(crate) fn same_proposal(git: &Repository, old: Oid, new: Oid, base: Oid, count: usize) -> bool {
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

/// Writes `files` over `base` and returns the new tree. Only the changed blobs and the trees
/// above them are written; every other entry, its mode included, stays as it was.
pub(crate) fn apply_files(
    git: &Repository,
    base: &git2::Tree<'_>,
    files: &BTreeMap<PathBuf, String>,
) -> Result<Oid, CommitError> {
    let mut update = git2::build::TreeUpdateBuilder::new();
    let mut trees = Subtrees::new(git, base);
    for (path, content) in files {
        if path.as_os_str().is_empty()
            || !path
                .components()
                .all(|c| matches!(c, Component::Normal(n) if n != ".git"))
        {
            return Err(CommitError::OutsideRepository { path: path.clone() });
        }
        let mode = match trees.entry(path)? {
            Some((kind, mode))
                if kind == Some(git2::ObjectType::Blob)
                    && mode == i32::from(git2::FileMode::BlobExecutable) =>
            {
                git2::FileMode::BlobExecutable
            }
            Some((kind, mode))
                if kind != Some(git2::ObjectType::Blob)
                    || mode == i32::from(git2::FileMode::Link) =>
            {
                return Err(CommitError::NotRegularFile { path: path.clone() });
            }
            _ => git2::FileMode::Blob,
        };
        let blob = git.blob(content.as_bytes())?;
        let path_str = path
            .to_str()
            .ok_or_else(|| CommitError::PathNotUtf8 { path: path.clone() })?;
        update.upsert(path_str, blob, mode);
    }
    Ok(update.create_updated(git, base)?)
}

/// The directories of a tree, each read from the object database once: with thousands of
/// Applications under one `apps/` directory, looking each changed file up from the root would
/// parse that large tree again per file.
struct Subtrees<'r> {
    git: &'r Repository,
    /// By directory path; `""` is the root.
    trees: std::collections::HashMap<PathBuf, Option<git2::Tree<'r>>>,
}

impl<'r> Subtrees<'r> {
    fn new(git: &'r Repository, root: &git2::Tree<'_>) -> Self {
        let mut trees = std::collections::HashMap::new();
        trees.insert(PathBuf::new(), git.find_tree(root.id()).ok());
        Subtrees { git, trees }
    }

    /// The tree at `dir`, or `None` when there is no directory there.
    fn tree(&mut self, dir: &Path) -> Result<Option<&git2::Tree<'r>>, git2::Error> {
        if !self.trees.contains_key(dir) {
            let parent = dir.parent().unwrap_or(Path::new(""));
            let found = match (self.tree(parent)?, dir.file_name()) {
                (Some(parent), Some(name)) => match parent.get_path(Path::new(name)) {
                    Ok(e) if e.kind() == Some(git2::ObjectType::Tree) => {
                        Some(self.git.find_tree(e.id())?)
                    }
                    _ => None,
                },
                _ => None,
            };
            self.trees.insert(dir.to_path_buf(), found);
        }
        Ok(self.trees[dir].as_ref())
    }

    /// The kind and mode of the entry at `path`, if there is one.
    fn entry(
        &mut self,
        path: &Path,
    ) -> Result<Option<(Option<git2::ObjectType>, i32)>, git2::Error> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(None);
        };
        Ok(self.tree(parent)?.and_then(|t| {
            t.get_path(Path::new(name))
                .ok()
                .map(|e| (e.kind(), e.filemode()))
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apply_files_refuses_paths_outside_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let empty = git
            .find_tree(git.treebuilder(None).unwrap().write().unwrap())
            .unwrap();
        for bad in ["../x.yaml", "/etc/passwd", ".git/config", ""] {
            let files = [(PathBuf::from(bad), "x".to_owned())].into_iter().collect();
            assert!(
                matches!(
                    apply_files(&git, &empty, &files),
                    Err(CommitError::OutsideRepository { .. })
                ),
                "{bad}"
            );
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

    #[test]
    fn a_commit_tree_holds_exactly_the_changed_blobs_and_keeps_file_modes() {
        use git2::FileMode;
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let empty = git.treebuilder(None).unwrap().write().unwrap();
        let mut seed = git2::build::TreeUpdateBuilder::new();
        for (path, content, mode) in [
            ("apps/a.yaml", "image: a:1\n", FileMode::Blob),
            ("apps/b.yaml", "image: b:1\n", FileMode::Blob),
            ("bin/render.yaml", "image: r:1\n", FileMode::BlobExecutable),
            ("apps/link.yaml", "a.yaml", FileMode::Link),
        ] {
            seed.upsert(path, git.blob(content.as_bytes()).unwrap(), mode);
        }
        let base = git
            .find_tree(
                seed.create_updated(&git, &git.find_tree(empty).unwrap())
                    .unwrap(),
            )
            .unwrap();
        let files: BTreeMap<PathBuf, String> = [
            ("apps/a.yaml", "image: a:2\n"),
            ("bin/render.yaml", "image: r:2\n"),
        ]
        .into_iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_owned()))
        .collect();
        let new = git
            .find_tree(apply_files(&git, &base, &files).unwrap())
            .unwrap();
        let diff = git
            .diff_tree_to_tree(Some(&base), Some(&new), None)
            .unwrap();
        let changed: Vec<(String, i32, i32)> = diff
            .deltas()
            .map(|d| {
                (
                    d.new_file().path().unwrap().display().to_string(),
                    i32::from(d.old_file().mode()),
                    i32::from(d.new_file().mode()),
                )
            })
            .collect();
        let (blob, exec) = (
            i32::from(FileMode::Blob),
            i32::from(FileMode::BlobExecutable),
        );
        assert_eq!(
            changed,
            [
                ("apps/a.yaml".to_owned(), blob, blob),
                ("bin/render.yaml".to_owned(), exec, exec),
            ]
        );
        let content = |tree: &git2::Tree<'_>, p: &str| {
            let id = tree.get_path(Path::new(p)).unwrap().id();
            String::from_utf8(git.find_blob(id).unwrap().content().to_vec()).unwrap()
        };
        assert_eq!(content(&new, "bin/render.yaml"), "image: r:2\n");
        let link = new.get_path(Path::new("apps/link.yaml")).unwrap();
        assert_eq!(link.filemode(), i32::from(FileMode::Link));
        assert_eq!(content(&new, "apps/link.yaml"), "a.yaml");
        // A link is never written through or replaced.
        let over_link = [(PathBuf::from("apps/link.yaml"), "image: x\n".to_owned())]
            .into_iter()
            .collect();
        assert!(matches!(
            apply_files(&git, &base, &over_link),
            Err(CommitError::NotRegularFile { .. })
        ));
    }
}
