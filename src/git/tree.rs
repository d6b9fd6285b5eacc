//! A commit's files read straight from the clone cache's object database, for the planner:
//! no work tree is written. Writing out tens of thousands of files per run only to read them
//! back cost more than everything else together (and removing them again as much).
//!
//! Opening walks the commit's tree objects once and keeps every path with its blob id and mode,
//! so whether a path is a file or a directory is a lookup; the blobs themselves are read when
//! the planner asks, on as many threads as it scans
//! with. A `git2::Repository` must not be shared between threads, so each reading thread takes
//! a handle of its own from a small pool (one per thread that ever read at once).
//!
//! Symbolic links are not followed ([`crate::files`]): a link's blob is its target's path, not
//! a manifest, and a commit built on the tree leaves links as they are
//! ([`super::commit::apply_files`] refuses to write over one). Submodules are other
//! repositories and are not listed either.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use git2::{FileMode, ObjectType, Oid, Repository, TreeWalkMode, TreeWalkResult};

use crate::files::{Files, FilesError, is_manifest_name, position};

/// The files of one commit, read from the object database.
pub struct CommitFiles {
    /// The bare repository holding the objects.
    dir: PathBuf,
    commit: Oid,
    manifests: Vec<PathBuf>,
    /// The blob of each of `manifests`, by index.
    blobs: Vec<Oid>,
    /// Every other entry that is not a directory (files in hidden directories, other names,
    /// links, submodules), in path order, with its id and mode: asking about one is a binary
    /// search, never a walk of the tree objects (a tree of 20,000 entries parsed again per
    /// Application would cost more than the plan).
    others: Vec<(PathBuf, Oid, i32)>,
    /// Every directory, in path order.
    dirs: Vec<PathBuf>,
    /// Repository handles not in use by a reading thread.
    pool: Mutex<Vec<Repository>>,
}

impl std::fmt::Debug for CommitFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitFiles")
            .field("dir", &self.dir)
            .field("commit", &self.commit)
            .field("manifests", &self.manifests.len())
            .finish_non_exhaustive()
    }
}

impl CommitFiles {
    /// Lists the entries of `commit` in the bare repository `git` (opened at `dir`).
    pub(crate) fn open(git: Repository, dir: &Path, commit: Oid) -> Result<Self, git2::Error> {
        let tree = git.find_commit(commit)?.tree()?;
        let mut manifests: Vec<(PathBuf, Oid)> = Vec::new();
        let mut others = Vec::new();
        let mut dirs = Vec::new();
        // Directories (by their path with a trailing `/`) whose files are not listed.
        let mut hidden: Vec<String> = Vec::new();
        tree.walk(TreeWalkMode::PreOrder, |parent, entry| {
            let name = entry.name_bytes();
            let mut path = path_from_bytes(parent.as_bytes());
            path.push(path_from_bytes(name));
            let in_hidden = hidden.iter().any(|h| parent.starts_with(h.as_str()));
            match entry.kind() {
                Some(ObjectType::Tree) => {
                    // Hidden directories (`.github`) are not manifests' places, as on disk.
                    if !in_hidden && name.starts_with(b".") {
                        hidden.push(format!("{parent}{}/", String::from_utf8_lossy(name)));
                    }
                    dirs.push(path);
                }
                Some(ObjectType::Blob)
                    if !in_hidden && is_regular(entry.filemode()) && is_manifest_name(name) =>
                {
                    manifests.push((path, entry.id()));
                }
                _ => others.push((path, entry.id(), entry.filemode())),
            }
            TreeWalkResult::Ok
        })?;
        // Tree order sorts `a.yaml` before the directory `a/`; lookups want path order.
        manifests.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        others.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        dirs.sort_unstable();
        let (manifests, blobs) = manifests.into_iter().unzip();
        // The walk filled libgit2's object cache with every small tree of the commit (one per
        // Application directory); the handle goes with it, and readers open their own.
        drop(tree);
        drop(git);
        Ok(CommitFiles {
            dir: dir.to_path_buf(),
            commit,
            manifests,
            blobs,
            others,
            dirs,
            pool: Mutex::new(Vec::new()),
        })
    }

    /// The commit the files are of.
    pub fn commit(&self) -> String {
        self.commit.to_string()
    }

    /// The commit the files are of, as git names it.
    pub(crate) fn commit_id(&self) -> Oid {
        self.commit
    }

    /// The bare repository holding the objects (the clone cache's).
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs `f` with a repository handle this thread has to itself.
    fn with_repo<T>(
        &self,
        f: impl FnOnce(&Repository) -> Result<T, git2::Error>,
    ) -> Result<T, git2::Error> {
        let taken = self.pool.lock().expect("repository pool").pop();
        let git = match taken {
            Some(git) => git,
            None => Repository::open_bare(&self.dir)?,
        };
        let result = f(&git);
        self.pool.lock().expect("repository pool").push(git);
        result
    }

    /// The blob of the regular file at `path`.
    fn blob(&self, path: &Path) -> Result<Oid, FilesError> {
        match position(&self.manifests, path) {
            Some(i) => Ok(self.blobs[i]),
            None => match self.other(path) {
                Some((id, mode)) if is_regular(mode) => Ok(id),
                Some((_, mode)) => Err(FilesError::NotAFile(kind_name(mode))),
                None if self.is_dir(path) => Err(FilesError::NotAFile("a directory")),
                None => Err(FilesError::NotFound),
            },
        }
    }

    /// The id and mode of the non-manifest entry at `path`.
    fn other(&self, path: &Path) -> Option<(Oid, i32)> {
        self.others
            .binary_search_by(|(p, _, _)| p.as_path().cmp(path))
            .ok()
            .map(|i| (self.others[i].1, self.others[i].2))
    }
}

impl Files for CommitFiles {
    fn manifests(&self) -> &[PathBuf] {
        &self.manifests
    }

    fn other_files(&self) -> Vec<PathBuf> {
        self.others.iter().map(|(p, _, _)| p.clone()).collect()
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>, FilesError> {
        let blob = self.blob(path)?;
        self.with_repo(|git| Ok(git.find_blob(blob)?.content().to_vec()))
            .map_err(|e| FilesError::Store(Box::new(super::Libgit2Error::from(e))))
    }

    fn size(&self, path: &Path) -> Result<u64, FilesError> {
        let blob = self.blob(path)?;
        // The object's header only: its size without inflating its content.
        self.with_repo(|git| git.odb()?.read_header(blob))
            .map(|(size, _)| size as u64)
            .map_err(|e| FilesError::Store(Box::new(super::Libgit2Error::from(e))))
    }

    fn is_file(&self, path: &Path) -> bool {
        position(&self.manifests, path).is_some()
            || self.other(path).is_some_and(|(_, mode)| is_regular(mode))
    }

    fn is_dir(&self, path: &Path) -> bool {
        path.as_os_str().is_empty()
            || self
                .dirs
                .binary_search_by(|d| d.as_path().cmp(path))
                .is_ok()
    }
}

/// A plain or executable file; not a link, not a submodule.
fn is_regular(mode: i32) -> bool {
    mode == i32::from(FileMode::Blob) || mode == i32::from(FileMode::BlobExecutable)
}

fn kind_name(mode: i32) -> &'static str {
    if mode == i32::from(FileMode::Link) {
        "a symbolic link, not followed"
    } else if mode == i32::from(FileMode::Commit) {
        "a submodule"
    } else {
        "not a file"
    }
}

/// Git paths are bytes; on Unix every byte string is a path.
#[cfg(unix)]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt as _;
    PathBuf::from(std::ffi::OsStr::from_bytes(bytes))
}

#[cfg(not(unix))]
fn path_from_bytes(bytes: &[u8]) -> PathBuf {
    PathBuf::from(String::from_utf8_lossy(bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bare repository with one commit of `files` (path, content, mode).
    fn commit_of(files: &[(&str, &str, FileMode)]) -> (tempfile::TempDir, Oid) {
        let dir = tempfile::tempdir().unwrap();
        let git = Repository::init_bare(dir.path()).unwrap();
        let empty = git.treebuilder(None).unwrap().write().unwrap();
        let mut update = git2::build::TreeUpdateBuilder::new();
        for (path, content, mode) in files {
            let blob = git.blob(content.as_bytes()).unwrap();
            update.upsert(*path, blob, *mode);
        }
        let tree = update
            .create_updated(&git, &git.find_tree(empty).unwrap())
            .unwrap();
        let sig =
            git2::Signature::new("t", "t@example", &git2::Time::new(1_800_000_000, 0)).unwrap();
        let commit = git
            .commit(None, &sig, &sig, "seed", &git.find_tree(tree).unwrap(), &[])
            .unwrap();
        (dir, commit)
    }

    #[test]
    fn lists_manifests_in_path_order_and_reads_them_without_a_work_tree() {
        let (dir, commit) = commit_of(&[
            ("a.yaml", "a: 1\n", FileMode::Blob),
            ("a/b.yml", "b: 1\n", FileMode::Blob),
            ("a-b/c.yaml", "c: 1\n", FileMode::BlobExecutable),
            ("a/notes.txt", "x", FileMode::Blob),
            (".github/workflows/ci.yaml", "on: push\n", FileMode::Blob),
            (".argocd-source-x.yaml", "helm: {}\n", FileMode::Blob),
            ("z/Kustomization", "resources: []\n", FileMode::Blob),
            ("link.yaml", "a.yaml", FileMode::Link),
        ]);
        let git = Repository::open_bare(dir.path()).unwrap();
        let files = CommitFiles::open(git, dir.path(), commit).unwrap();
        let listed: Vec<&str> = files
            .manifests()
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect();
        // A `Kustomization` without extension is a kustomization, as kustomize reads it.
        assert_eq!(
            listed,
            [
                ".argocd-source-x.yaml",
                "a/b.yml",
                "a-b/c.yaml",
                "a.yaml",
                "z/Kustomization"
            ]
        );
        assert_eq!(files.read(Path::new("a-b/c.yaml")).unwrap(), b"c: 1\n");
        assert_eq!(files.size(Path::new("a-b/c.yaml")).unwrap(), 5);
        assert!(matches!(
            files.size(Path::new("link.yaml")),
            Err(FilesError::NotAFile(_))
        ));
        // Not listed, still read by path: a hidden directory's file.
        assert_eq!(
            files.read(Path::new(".github/workflows/ci.yaml")).unwrap(),
            b"on: push\n"
        );
        assert!(files.is_file(Path::new("z/Kustomization")));
        assert!(files.is_dir(Path::new("z")) && files.is_dir(Path::new("")));
        assert!(!files.is_dir(Path::new("a.yaml")));
        // A link is not followed: not listed, not a file, not read.
        assert!(!files.is_file(Path::new("link.yaml")));
        assert!(matches!(
            files.read(Path::new("link.yaml")),
            Err(FilesError::NotAFile(_))
        ));
        assert!(matches!(
            files.read(Path::new("nope.yaml")),
            Err(FilesError::NotFound)
        ));
    }

    #[test]
    fn threads_read_with_their_own_repository_handles() {
        let names: Vec<String> = (0..64).map(|i| format!("apps/a{i:02}.yaml")).collect();
        let entries: Vec<(&str, &str, FileMode)> = names
            .iter()
            .map(|n| (n.as_str(), n.as_str(), FileMode::Blob))
            .collect();
        let (dir, commit) = commit_of(&entries);
        let git = Repository::open_bare(dir.path()).unwrap();
        let files = CommitFiles::open(git, dir.path(), commit).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let files = &files;
                let names = &names;
                s.spawn(move || {
                    for n in names.iter().skip(t) {
                        assert_eq!(files.read(Path::new(n)).unwrap(), n.as_bytes());
                    }
                });
            }
        });
        assert!(files.pool.lock().unwrap().len() <= 4);
    }
}
