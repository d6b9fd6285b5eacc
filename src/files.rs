//! A read-only tree of manifest files, whatever holds it: a directory on disk (the local
//! `plan`/`apply`, `applications.fromGit` without a repository) or a commit's tree read straight
//! from a clone's object database (`git::tree::CommitFiles`, every repository target).
//!
//! Why it exists: the planner (`plan`, `argocd`) must not import git (ARCHITECTURE.md, layers),
//! and a repository with tens of thousands of files must not be written out to a temporary
//! directory only to be read back. The planner reads through [`Files`]; `git` implements it over
//! the object database and this module over a directory, and the engine hands one or the other
//! to the same planning code.
//!
//! What a tree lists, for both kinds: the `.yaml`/`.yml` regular files (and Go-templated YAML,
//! `.yaml.gotmpl`, `.yaml.tpl`, which helmfile reads) and `Kustomization` files
//! outside hidden directories (a name starting with `.`: `.git`, `.github`), in path order. Symbolic links are
//! never followed: a link is not listed, not a file, and not read (a link may point anywhere,
//! out of the repository too, and a commit would replace the link rather than its target). Any
//! other file (a hidden one) is still read by its path.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Why a file of a tree could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("no such file")]
    NotFound,
    /// A symbolic link, a submodule or a directory where a file was asked for.
    #[error("not a regular file ({0})")]
    NotAFile(&'static str),
    #[error(transparent)]
    Io(std::io::Error),
    /// The object database could not give the blob; the cause is libgit2's (the files trait
    /// sits below git, so it is boxed).
    #[error("object database")]
    Store(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("cannot list {}", path.display())]
    Walk {
        path: PathBuf,
        #[source]
        source: walkdir::Error,
    },
}

/// A read-only tree of files. Shared by the threads that scan it, so reads take `&self`.
pub trait Files: Sync {
    /// The `.yaml`/`.yml` and `Kustomization` regular files outside hidden directories,
    /// relative to the root, in path order (component by component, as [`Path`]'s `Ord` compares them).
    fn manifests(&self) -> &[PathBuf];

    /// The content of the regular file at `path` (relative to the root).
    fn read(&self, path: &Path) -> Result<Vec<u8>, FilesError>;

    /// The size in bytes of the regular file at `path`, known without reading it: the planner
    /// skips a file too large to be a manifest before it costs that much memory.
    fn size(&self, path: &Path) -> Result<u64, FilesError>;

    /// Whether `path` is a regular file. A symbolic link is not.
    fn is_file(&self, path: &Path) -> bool;

    /// Whether `path` is a directory (`""` is the root).
    fn is_dir(&self, path: &Path) -> bool;

    /// The entries that are not manifests and not directories (other names, links, files in
    /// hidden directories), relative, in path order: for the few readers that take a file by
    /// the name a user gave (`applications.fromGit` paths such as `*.yaml.tpl`). Listed on
    /// demand, never kept beside the manifests.
    fn other_files(&self) -> Vec<PathBuf> {
        Vec::new()
    }
}

/// The manifests under the directory `dir` (all of them for `""`), in path order: a slice of
/// [`Files::manifests`], found by binary search, so asking once per Application costs nothing
/// like a walk.
pub fn manifests_under<'f>(files: &'f dyn Files, dir: &Path) -> &'f [PathBuf] {
    let all = files.manifests();
    let start = all.partition_point(|p| p.as_path() < dir);
    let len = all[start..].partition_point(|p| p.starts_with(dir));
    &all[start..start + len]
}

/// The index of `path` in a sorted list of manifests.
pub fn position(manifests: &[PathBuf], path: &Path) -> Option<usize> {
    manifests.binary_search_by(|p| p.as_path().cmp(path)).ok()
}

/// Whether a file name is a manifest's: `.yaml`, `.yml`, or `Kustomization`, the one name
/// without extension that kustomize reads as a kustomization (`konfig.RecognizedKustomizationFileNames`:
/// `kustomization.yaml`, `kustomization.yml`, `Kustomization`).
pub fn is_manifest_name(name: &[u8]) -> bool {
    name.ends_with(b".yaml")
        || name.ends_with(b".yml")
        || name == b"Kustomization"
        // Go-templated YAML (helmfile), read with its template lines as comments.
        || name.ends_with(b".yaml.gotmpl")
        || name.ends_with(b".yml.gotmpl")
        || name.ends_with(b".yaml.tpl")
        || name.ends_with(b".yml.tpl")
}

// === reading on every core ===

/// Runs CPU- and file-bound work (reading and scanning a tree) from async code. On a
/// multi-threaded runtime the worker thread is handed over for the duration, so other tasks
/// (other repositories' fetches and plans) go on.
pub fn blocking<T>(work: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        _ => work(),
    }
}

/// How many items a thread takes at a time: enough to make taking them cheap, few enough that
/// the threads finish together.
const CHUNK: usize = 32;

/// `items.iter().map(f).collect()` on every core, in the same order.
pub fn parallel_map<T: Sync, U: Send>(items: &[T], f: impl Fn(&T) -> U + Sync) -> Vec<U> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(items.len().div_ceil(CHUNK));
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let mut chunks: Vec<(usize, Vec<U>)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let start = next.fetch_add(CHUNK, Ordering::Relaxed);
                        if start >= items.len() {
                            break done;
                        }
                        let end = (start + CHUNK).min(items.len());
                        done.push((start, items[start..end].iter().map(&f).collect()));
                    }
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| {
                w.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
    });
    chunks.sort_unstable_by_key(|(start, _)| *start);
    chunks.into_iter().flat_map(|(_, out)| out).collect()
}

// === impl Directory ===

/// A directory on disk, listed once when opened.
#[derive(Debug)]
pub struct Directory {
    root: PathBuf,
    manifests: Vec<PathBuf>,
}

impl Directory {
    /// Lists the manifests under `root` (hidden directories skipped, symbolic links not
    /// followed).
    pub fn open(root: impl Into<PathBuf>) -> Result<Directory, FilesError> {
        let root = root.into();
        let mut manifests = Vec::new();
        let walker = walkdir::WalkDir::new(&root)
            .sort_by_file_name()
            .into_iter()
            .filter_entry(|e| {
                e.depth() == 0
                    || !e.file_name().to_string_lossy().starts_with('.')
                    || !e.file_type().is_dir()
            });
        for entry in walker {
            let entry = entry.map_err(|source| FilesError::Walk {
                path: root.clone(),
                source,
            })?;
            if !entry.file_type().is_file()
                || !is_manifest_name(entry.file_name().as_encoded_bytes())
            {
                continue;
            }
            let rel = entry.path().strip_prefix(&root).unwrap_or(entry.path());
            manifests.push(rel.to_path_buf());
        }
        // The walk's order already is path order; sorting a sorted list is one pass.
        manifests.sort();
        Ok(Directory { root, manifests })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Files for Directory {
    fn manifests(&self) -> &[PathBuf] {
        &self.manifests
    }

    fn read(&self, path: &Path) -> Result<Vec<u8>, FilesError> {
        std::fs::read(self.root.join(path)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => FilesError::NotFound,
            _ => FilesError::Io(e),
        })
    }

    fn size(&self, path: &Path) -> Result<u64, FilesError> {
        std::fs::metadata(self.root.join(path))
            .map(|m| m.len())
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => FilesError::NotFound,
                _ => FilesError::Io(e),
            })
    }

    fn is_file(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(self.root.join(path)).is_ok_and(|m| m.is_file())
    }

    fn is_dir(&self, path: &Path) -> bool {
        self.root.join(path).is_dir()
    }

    fn other_files(&self) -> Vec<PathBuf> {
        let mut out: Vec<PathBuf> = walkdir::WalkDir::new(&self.root)
            .into_iter()
            .filter_map(Result::ok)
            .filter(|e| {
                let manifest =
                    e.file_type().is_file() && is_manifest_name(e.file_name().as_encoded_bytes());
                !(e.file_type().is_dir() || manifest)
            })
            .filter_map(|e| {
                e.path()
                    .strip_prefix(&self.root)
                    .ok()
                    .map(Path::to_path_buf)
            })
            .collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallel_map_keeps_the_input_order() {
        let items: Vec<usize> = (0..1000).collect();
        let out = parallel_map(&items, |&i| i * 2);
        assert_eq!(out, items.iter().map(|&i| i * 2).collect::<Vec<_>>());
    }

    #[test]
    fn a_directory_lists_manifests_in_path_order_without_hidden_directories() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "a.yaml",
            "a/b.yml",
            "a-b/c.yaml",
            "a/notes.txt",
            ".github/workflows/ci.yaml",
            ".argocd-source-x.yaml",
            "z/Kustomization",
        ] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "a: 1\n").unwrap();
        }
        #[cfg(unix)]
        std::os::unix::fs::symlink("a.yaml", dir.path().join("link.yaml")).unwrap();
        let files = Directory::open(dir.path()).unwrap();
        let listed: Vec<&str> = files
            .manifests()
            .iter()
            .map(|p| p.to_str().unwrap())
            .collect();
        // kustomize reads a `Kustomization` without extension as a kustomization; so does
        // tagpilot (issue 17).
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
        let mut sorted = files.manifests().to_vec();
        sorted.sort();
        assert_eq!(sorted, files.manifests(), "path order");
        assert!(files.is_file(Path::new("z/Kustomization")));
        assert!(files.is_dir(Path::new("a")) && files.is_dir(Path::new("")));
        #[cfg(unix)]
        assert!(
            !files.is_file(Path::new("link.yaml")),
            "links are not files"
        );
        assert!(matches!(
            files.read(Path::new("nope.yaml")),
            Err(FilesError::NotFound)
        ));
        let under: Vec<&Path> = manifests_under(&files, Path::new("a"))
            .iter()
            .map(PathBuf::as_path)
            .collect();
        assert_eq!(under, [Path::new("a/b.yml")]);
        assert_eq!(manifests_under(&files, Path::new("")).len(), 5);
    }
}
