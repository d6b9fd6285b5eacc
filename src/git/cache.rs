//! The clone cache: one bare repository per configured remote under `--cache-dir`, fetched
//! incrementally, and a fetched commit's files for the planner to read.
//!
//! Fetches are full, not shallow: libgit2 (1.9) cannot push from a shallow clone whose tip has
//! parents it never fetched — its pack builder walks into the missing parent and fails with
//! "object not found" (`http_push_from_a_fresh_shallow_clone_of_a_repository_with_history`).
//! Manifest repositories are text and small; after the first clone every fetch is incremental.
//!
//! The cache is disposable. A repository is marked usable only after its first fetch completed;
//! anything else found on disk (a crash mid-clone, a corrupted object store) is wiped and cloned
//! again rather than trusted. The planner never sees the cache itself, only a commit's files read
//! from its object database ([`super::tree`]), so nothing it does can leave the cache dirty, and
//! no work tree is ever written. One tagpilot process per cache directory.

use crate::clock::Clock as _;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use git2::{AutotagOption, ErrorClass, FetchOptions, Oid, Repository};
use sha2::Digest as _;

use super::auth::{AuthError, ConnectFailure, Connector, redact_url};
use super::tree::CommitFiles;
use super::{GitError, Libgit2Error};
use crate::config::repository::RepositoryConfig;

/// Written into a cached repository once its first fetch completed.
const READY_MARKER: &str = "tagpilot-ready";

/// Holds when the cached repository was last fetched (RFC 3339), so that what is read offline
/// (`tagpilot check`) can say how old it is.
const FETCHED_MARKER: &str = "tagpilot-fetched";

/// Where remote-tracking refs of the cache live.
const TRACKING_PREFIX: &str = "refs/remotes/origin/";

/// What is wrong with the clone cache on disk (never with the remote).
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    #[error("cannot remove the broken clone")]
    Remove(#[source] std::io::Error),
    #[error(transparent)]
    Io(std::io::Error),
    #[error(transparent)]
    Git(Libgit2Error),
}

impl From<git2::Error> for CacheError {
    fn from(error: git2::Error) -> CacheError {
        CacheError::Git(error.into())
    }
}

/// The directory holding one bare clone per configured repository.
#[derive(Debug, Clone)]
pub struct RepoCache {
    root: PathBuf,
}

impl RepoCache {
    pub fn new(root: impl Into<PathBuf>) -> RepoCache {
        RepoCache { root: root.into() }
    }

    /// `$XDG_CACHE_HOME/tagpilot` (or the platform's equivalent), the default `--cache-dir`.
    pub fn default_root() -> Option<PathBuf> {
        use etcetera::BaseStrategy as _;
        etcetera::choose_base_strategy()
            .ok()
            .map(|s| s.cache_dir().join("tagpilot"))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The cache directory of `repo`. The URL's hash is part of the name so that pointing a
    /// repository entry at another URL never reuses the old clone.
    pub fn repo_dir(&self, repo: &RepositoryConfig) -> PathBuf {
        let name: String = repo
            .name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let hash = sha2::Sha256::digest(repo.url.as_bytes());
        let hash: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
        self.root.join("repos").join(format!("{name}-{hash}"))
    }
}

/// Fetches `repo`'s base branch into the cache and opens its tip's files for reading, straight
/// from the object database: `tagpilot plan` on a remote repository, and Applications kept in
/// git. Writes nothing remote and no work tree.
pub async fn snapshot(cache: &RepoCache, repo: &RepositoryConfig) -> Result<CommitFiles, GitError> {
    let (cache, repo) = (cache.clone(), repo.clone());
    tokio::task::spawn_blocking(move || {
        let dir = cache.repo_dir(&repo);
        let (git, fetched) = sync(&dir, &repo)?;
        commit_files(git, &dir, &repo, fetched.base_tip)
    })
    .await
    .expect("git snapshot task panicked")
}

/// The files of `repo`'s base branch as the clone cache last fetched them, without connecting
/// (for `tagpilot check`, which stays offline), and the commit they are at. `None` when the
/// cache holds no complete clone of it, or not that branch.
pub fn cached_snapshot(
    cache: &RepoCache,
    repo: &RepositoryConfig,
) -> Result<Option<CommitFiles>, GitError> {
    let dir = cache.repo_dir(repo);
    if !dir.join(READY_MARKER).is_file() {
        return Ok(None);
    }
    let git = Repository::open_bare(&dir).map_err(|e| cache_error(repo, &dir, e))?;
    let tip = match git.find_reference(&format!("{TRACKING_PREFIX}{}", repo.branch)) {
        Ok(reference) => reference.target(),
        Err(_) => None,
    };
    match tip {
        Some(tip) => commit_files(git, &dir, repo, tip).map(Some),
        None => Ok(None),
    }
}

/// When the cached `repo` was last fetched, if it is cached and says so (a cache fetched by a
/// tagpilot before this was recorded does not).
pub fn cached_fetch_time(cache: &RepoCache, repo: &RepositoryConfig) -> Option<jiff::Timestamp> {
    let text = std::fs::read_to_string(cache.repo_dir(repo).join(FETCHED_MARKER)).ok()?;
    text.trim().parse().ok()
}

/// What a fetch found on the remote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Fetched {
    pub base_tip: Oid,
    /// The remote value of the target branch when tagpilot owns it; `None` when it does not
    /// exist (or is the base branch).
    pub owned_tip: Option<Oid>,
}

/// Opens (or creates, or recreates) the cache of `repo` and fetches it. A cache that turns out
/// to be broken during the fetch is wiped and cloned afresh, once.
///
/// Syncs of one clone take turns: two tasks of a cycle may fetch the same repository at once (a
/// promotion reading another repository's base branch while that repository's own target is
/// planned), and a fetch that met the other's ref locks would be taken for a broken cache and
/// wiped under it.
pub(crate) fn sync(dir: &Path, repo: &RepositoryConfig) -> Result<(Repository, Fetched), GitError> {
    let turn = clone_lock(dir);
    let _turn = turn.lock().unwrap_or_else(PoisonError::into_inner);
    let git = open(dir, repo)?;
    match fetch(&git, dir, repo) {
        Err(FetchError::Local(error)) => {
            tracing::warn!(repository = %repo.name, error = %crate::error_chain::Chain(&error), "clone cache is broken; cloning again");
            drop(git);
            wipe(dir, repo)?;
            let git = open(dir, repo)?;
            match fetch(&git, dir, repo) {
                Ok(fetched) => Ok((git, fetched)),
                Err(e) => Err(e.into_git_error(repo, dir)),
            }
        }
        Ok(fetched) => Ok((git, fetched)),
        Err(e) => Err(e.into_git_error(repo, dir)),
    }
}

/// The lock of one clone directory in this process (one per configured repository, so the map
/// stays as small as the configuration).
fn clone_lock(dir: &Path) -> Arc<Mutex<()>> {
    static LOCKS: OnceLock<Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>> = OnceLock::new();
    let mut locks = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    Arc::clone(locks.entry(dir.to_path_buf()).or_default())
}

pub(crate) fn cache_error(
    repo: &RepositoryConfig,
    dir: &Path,
    source: impl Into<CacheError>,
) -> GitError {
    GitError::Cache {
        repository: repo.name.clone(),
        path: dir.to_owned(),
        source: source.into(),
    }
}

fn wipe(dir: &Path, repo: &RepositoryConfig) -> Result<(), GitError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(cache_error(repo, dir, CacheError::Remove(e))),
    }
}

/// Opens the cached clone if it completed its first fetch; otherwise starts over.
fn open(dir: &Path, repo: &RepositoryConfig) -> Result<Repository, GitError> {
    if dir.join(READY_MARKER).is_file() {
        match Repository::open_bare(dir) {
            Ok(git) => {
                remove_stale_locks(dir);
                return Ok(git);
            }
            Err(e) => {
                tracing::warn!(repository = %repo.name, error = %e.message(), "clone cache does not open; cloning again");
            }
        }
    } else if dir.exists() {
        tracing::info!(repository = %repo.name, "clone cache was left half-written; cloning again");
    }
    wipe(dir, repo)?;
    std::fs::create_dir_all(dir).map_err(|e| cache_error(repo, dir, CacheError::Io(e)))?;
    Repository::init_bare(dir).map_err(|e| cache_error(repo, dir, e))
}

/// Lock files a crashed run left behind would make every later ref update fail.
fn remove_stale_locks(dir: &Path) {
    for entry in walkdir::WalkDir::new(dir.join("refs"))
        .into_iter()
        .filter_map(Result::ok)
    {
        if entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "lock") {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    for name in [
        "packed-refs.lock",
        "shallow.lock",
        "index.lock",
        "config.lock",
        "HEAD.lock",
    ] {
        let _ = std::fs::remove_file(dir.join(name));
    }
}

pub(crate) enum FetchError {
    /// The cache itself is broken: wipe and clone again.
    Local(CacheError),
    /// The auth config does not name one method (caught by validation before any fetch).
    Config(super::ConfigError),
    Connect(ConnectFailure),
    Remote(git2::Error),
    BranchNotFound,
}

impl FetchError {
    pub(crate) fn into_git_error(self, repo: &RepositoryConfig, dir: &Path) -> GitError {
        let url = redact_url(&repo.url);
        let repository = repo.name.clone();
        match self {
            FetchError::Local(error) => cache_error(repo, dir, error),
            FetchError::Config(error) => GitError::config(repo, error),
            FetchError::Connect(failure) => connect_error(repo, failure),
            FetchError::Remote(e) => {
                let source = Libgit2Error::scrubbed(e, &repo.url);
                let e = source.git2();
                match e.class() {
                    ErrorClass::Net | ErrorClass::Os | ErrorClass::Ssl => GitError::Unreachable {
                        repository,
                        url,
                        source,
                    },
                    ErrorClass::Http
                        if e.code() == git2::ErrorCode::Auth || e.message().contains("401") =>
                    {
                        GitError::Auth {
                            repository,
                            url,
                            source: AuthError::Remote(source),
                        }
                    }
                    ErrorClass::Ssh
                        if e.message().contains("connect") || e.message().contains("resolve") =>
                    {
                        GitError::Unreachable {
                            repository,
                            url,
                            source,
                        }
                    }
                    _ => GitError::Fetch {
                        repository,
                        url,
                        source,
                    },
                }
            }
            FetchError::BranchNotFound => GitError::BranchNotFound {
                repository,
                url,
                branch: repo.branch.clone(),
            },
        }
    }
}

pub(crate) fn connect_error(repo: &RepositoryConfig, failure: ConnectFailure) -> GitError {
    let (repository, url) = (repo.name.clone(), redact_url(&repo.url));
    match failure {
        ConnectFailure::Auth(source) => GitError::Auth {
            repository,
            url,
            source,
        },
        ConnectFailure::HostKey(source) => GitError::HostKey {
            repository,
            url,
            source: Box::new(source),
        },
    }
}

/// Fetches the base branch (and an owned target branch) into `refs/remotes/origin/*`.
fn fetch(git: &Repository, dir: &Path, repo: &RepositoryConfig) -> Result<Fetched, FetchError> {
    let connector = Connector::new(&repo.url, &repo.auth).map_err(FetchError::Config)?;
    let mut branches = vec![repo.branch.as_str()];
    if repo.owns_target_branch() {
        branches.push(repo.target_branch());
    }
    let refspecs: Vec<String> = branches
        .iter()
        .map(|b| format!("+refs/heads/{b}:{TRACKING_PREFIX}{b}"))
        .collect();
    let mut remote = git
        .remote_anonymous(&repo.url)
        .map_err(|e| FetchError::Local(CacheError::Git(Libgit2Error::scrubbed(e, &repo.url))))?;
    let mut options = FetchOptions::new();
    options
        .remote_callbacks(connector.callbacks())
        .download_tags(AutotagOption::None);
    let result = remote.fetch(&refspecs, Some(&mut options), None);
    if let Some(failure) = connector.take_failure() {
        return Err(FetchError::Connect(failure));
    }
    if let Err(e) = result {
        return Err(match e.class() {
            ErrorClass::Odb
            | ErrorClass::Reference
            | ErrorClass::Object
            | ErrorClass::Index
            | ErrorClass::Repository
            | ErrorClass::Zlib
            | ErrorClass::Filesystem => {
                FetchError::Local(CacheError::Git(Libgit2Error::scrubbed(e, &repo.url)))
            }
            _ => FetchError::Remote(e),
        });
    }
    // The advertisement stays readable after the fetch disconnected; it is the truth about which
    // branches exist, where a tracking ref may be stale.
    let heads = remote.list().map_err(FetchError::Remote)?;
    let advertised = |branch: &str| {
        let name = format!("refs/heads/{branch}");
        heads.iter().find(|h| h.name() == name).map(|h| h.oid())
    };
    let base_tip = advertised(&repo.branch).ok_or(FetchError::BranchNotFound)?;
    let owned_tip = if repo.owns_target_branch() {
        let tip = advertised(repo.target_branch());
        if tip.is_none() {
            // A branch deleted on the remote must not leave a stale lease value behind.
            if let Ok(mut r) =
                git.find_reference(&format!("{TRACKING_PREFIX}{}", repo.target_branch()))
            {
                let _ = r.delete();
            }
        }
        tip
    } else {
        None
    };
    // A missing object means the fetch left the cache inconsistent.
    git.find_commit(base_tip)
        .map_err(|e| FetchError::Local(e.into()))?;
    if !dir.join(READY_MARKER).is_file() {
        std::fs::write(dir.join(READY_MARKER), b"")
            .map_err(|e| FetchError::Local(CacheError::Io(e)))?;
    }
    // Only what an offline reader shows; the fetch itself succeeded. The system's time of day:
    // it dates a real fetch on disk, read back by a later process, not a decision of a cycle.
    let fetched_at = crate::clock::SystemClock.wall().to_string();
    if let Err(e) = std::fs::write(dir.join(FETCHED_MARKER), fetched_at) {
        tracing::warn!(repository = %repo.name, error = %e, "cannot record when the clone cache was fetched");
    }
    Ok(Fetched {
        base_tip,
        owned_tip,
    })
}

/// The files of `commit` in the cached repository `git` (at `dir`), for the planner.
pub(crate) fn commit_files(
    git: Repository,
    dir: &Path,
    repo: &RepositoryConfig,
    commit: Oid,
) -> Result<CommitFiles, GitError> {
    CommitFiles::open(git, dir, commit).map_err(|e| cache_error(repo, dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, url: &str) -> RepositoryConfig {
        serde_saphyr::from_str(&format!("name: '{name}'\nurl: '{url}'\n")).unwrap()
    }

    #[test]
    fn repo_dir_is_per_name_and_url() {
        let cache = RepoCache::new("/c");
        let a = cache.repo_dir(&config("manifests", "file:///a.git"));
        let b = cache.repo_dir(&config("manifests", "file:///b.git"));
        assert_ne!(a, b);
        assert!(
            a.to_str().unwrap().starts_with("/c/repos/manifests-"),
            "{}",
            a.display()
        );
        let odd = cache.repo_dir(&config("../x y", "file:///a.git"));
        assert!(
            odd.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(".._x_y-")
        );
        assert_eq!(odd.parent().unwrap(), Path::new("/c/repos"));
    }
}
