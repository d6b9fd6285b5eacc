//! Reading Application manifests from git (`applications.fromGit`) and asking a remote for its
//! default branch (`targetRevision: HEAD`). Reads only; a file that cannot be read or parsed is
//! reported and the others are still used.

use std::future::Future;
use std::path::{Path, PathBuf};

use futures_util::stream::{self, StreamExt, TryStreamExt};

use crate::config::Config;
use crate::config::repository::RepositoryConfig;
use crate::files::{self, Directory, Files};
use crate::git::{self, GitError, RepoCache};

use super::image_updater::{self, ImageUpdater};
use crate::application::{Application, read_documents};
use crate::argocd::ArgoError;
use crate::config::applications::FromGit;

/// What the `fromGit` files hold: Applications and `ImageUpdater` resources.
#[derive(Debug, Default)]
pub struct Found {
    pub apps: Vec<Application>,
    pub updaters: Vec<ImageUpdater>,
}

/// Every Application and `ImageUpdater` found by the `fromGit` entries, and the problems met
/// on the way (a file that is not YAML, say), each naming the file. The repositories they name
/// are fetched concurrently, up to `concurrency.repositories` at once, each once however many
/// entries name it.
pub async fn from_git(
    config: &Config,
    entries: &[FromGit],
    cache: &RepoCache,
) -> Result<(Found, Vec<String>), ArgoError> {
    read_from_git(config, entries, |repo| git::snapshot(cache, repo)).await
}

/// [`from_git`], with each named repository's files taken by `snapshot`.
async fn read_from_git<'a, F, Fut, T>(
    config: &'a Config,
    entries: &[FromGit],
    snapshot: F,
) -> Result<(Found, Vec<String>), ArgoError>
where
    F: Fn(&'a RepositoryConfig) -> Fut,
    Fut: Future<Output = Result<T, GitError>>,
    T: Files,
{
    // Every name is checked before anything is fetched.
    let mut named: Vec<&'a RepositoryConfig> = Vec::new();
    for name in entries.iter().filter_map(|e| e.repository.as_ref()) {
        let repo = config
            .repositories
            .iter()
            .find(|r| &r.name == name)
            .ok_or_else(|| ArgoError::UnknownRepository(name.clone()))?;
        if !named.iter().any(|r| r.name == repo.name) {
            named.push(repo);
        }
    }
    // In order, so the first failure reported is the first in the configuration.
    let snapshots: Vec<T> = stream::iter(named.iter().map(|&repo| snapshot(repo)))
        .buffered(config.concurrency.repositories.max(1))
        .try_collect()
        .await?;
    let mut found = Found::default();
    let mut problems = Vec::new();
    for entry in entries {
        match &entry.repository {
            Some(name) => {
                let at = named
                    .iter()
                    .position(|r| &r.name == name)
                    .expect("every named repository was fetched");
                read_tree(
                    &snapshots[at],
                    &format!("{name}:"),
                    &entry.paths,
                    &mut found,
                    &mut problems,
                )?;
            }
            None => read_tree(
                &Directory::open(config.base_dir()).map_err(ArgoError::Files)?,
                "",
                &entry.paths,
                &mut found,
                &mut problems,
            )?,
        }
    }
    Ok((found, problems))
}

/// Reads the Applications and `ImageUpdater` resources in the manifests of `files` matching
/// `globs` (relative, `/`-separated).
pub fn read_tree(
    files: &dyn Files,
    label: &str,
    globs: &[String],
    found: &mut Found,
    problems: &mut Vec<String>,
) -> Result<(), ArgoError> {
    let mut builder = globset::GlobSetBuilder::new();
    for g in globs {
        builder.add(
            globset::GlobBuilder::new(g)
                .literal_separator(true)
                .build()
                .map_err(|source| ArgoError::Paths {
                    what: format!("applications.fromGit paths {g:?}"),
                    source,
                })?,
        );
    }
    let set = builder.build().map_err(|source| ArgoError::Paths {
        what: "applications.fromGit paths".into(),
        source,
    })?;
    // Hidden files are not Applications' places (`.argocd-source-*.yaml`), nor are hidden
    // directories.
    let wanted = |rel: &Path| {
        !rel.components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
            && set.is_match(rel)
    };
    // A file the paths name, or a glob matches, is read as YAML whatever its name: teams keep
    // Applications in `*.yaml.tpl` files too. One that cannot be read is a finding naming it.
    // Paths that can match only `.yaml`/`.yml` names need no other files listed.
    let only_manifests = globs
        .iter()
        .all(|g| g.ends_with(".yaml") || g.ends_with(".yml"));
    let others: Vec<PathBuf> = if only_manifests {
        Vec::new()
    } else {
        files
            .other_files()
            .into_iter()
            .filter(|rel| wanted(rel))
            .collect()
    };
    let mut paths: Vec<&Path> = files
        .manifests()
        .iter()
        .map(PathBuf::as_path)
        .filter(|rel| wanted(rel))
        .chain(others.iter().map(PathBuf::as_path))
        .collect();
    paths.sort();
    // Thousands of Applications: read and parse them on every core, keep the file order.
    let read = |rel: &&Path| {
        let shown = format!("{label}{}", slash(rel));
        let mut out = Found::default();
        let mut problems = Vec::new();
        match files.read(rel).map(String::from_utf8) {
            Ok(Ok(text)) => {
                let path = Path::new(&shown);
                match read_documents(path, &text) {
                    Ok(apps) => out.apps.extend(apps),
                    Err(e) => problems.push(crate::error_chain::chain(&e)),
                }
                // A broken ImageUpdater is an error of its own, beside the file's Applications.
                if text.contains(image_updater::KIND) {
                    match image_updater::read_documents(path, &text) {
                        Ok(updaters) => out.updaters.extend(updaters),
                        Err(e) => problems.push(crate::error_chain::chain(&e)),
                    }
                }
            }
            Ok(Err(_)) => problems.push(format!("{shown}: not UTF-8 text")),
            Err(e) => problems.push(format!(
                "{shown}: cannot read: {}",
                crate::error_chain::chain(&e)
            )),
        }
        (out, problems)
    };
    let results = files::blocking(|| files::parallel_map(&paths, read));
    for (out, mut p) in results {
        found.apps.extend(out.apps);
        found.updaters.extend(out.updaters);
        problems.append(&mut p);
    }
    Ok(())
}

/// `a/b/c.yaml`, whatever the platform's separator.
fn slash(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The Applications in these files, and in the `.yaml`/`.yml` files under these directories
/// (hidden ones left out), in path order. A file that cannot be read or parsed is an error
/// naming it.
pub fn applications_in(paths: &[std::path::PathBuf]) -> Result<Vec<Application>, ArgoError> {
    let mut apps = Vec::new();
    for root in paths {
        let files: Vec<std::path::PathBuf> = if root.is_dir() {
            walkdir::WalkDir::new(root)
                .sort_by_file_name()
                .into_iter()
                .filter_entry(|e| {
                    e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.')
                })
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_file())
                .map(walkdir::DirEntry::into_path)
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect()
        } else {
            vec![root.clone()]
        };
        for file in files {
            let text = std::fs::read_to_string(&file).map_err(|source| ArgoError::Read {
                path: file.clone(),
                source,
            })?;
            apps.extend(read_documents(&file, &text).map_err(ArgoError::Document)?);
        }
    }
    Ok(apps)
}

/// The branch a remote's `HEAD` points at (`git ls-remote --symref URL HEAD`). Only for
/// repositories not configured in `tagpilot.yaml`, so without credentials.
pub fn remote_default_branch(url: &str) -> Result<String, DefaultBranchError> {
    let mut remote = git2::Remote::create_detached(url)?;
    remote.connect(git2::Direction::Fetch)?;
    let head = remote.default_branch()?;
    let head = head.as_str().unwrap_or_default();
    head.strip_prefix("refs/heads/")
        .map(str::to_string)
        .ok_or_else(|| DefaultBranchError::NotABranch(head.to_string()))
}

/// Why a remote's default branch is unknown.
#[derive(Debug, thiserror::Error)]
pub enum DefaultBranchError {
    /// libgit2's message alone: its class and code add nothing for a user.
    #[error(transparent)]
    Git(crate::git::Libgit2Error),
    #[error("HEAD points at {0:?}, not a branch")]
    NotABranch(String),
}

impl From<git2::Error> for DefaultBranchError {
    fn from(error: git2::Error) -> Self {
        DefaultBranchError::Git(error.into())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    const APP: &str = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: NAME\nspec:\n  source:\n    repoURL: https://git.example/m.git\n    path: apps/NAME\n";

    /// Teams keep Applications in `*.yaml.tpl` files: a file the paths match is read as YAML
    /// whatever its name, and one that cannot be read is a finding naming it, never skipped.
    #[test]
    fn files_the_paths_match_are_read_whatever_their_name() {
        let dir = tempfile::tempdir().unwrap();
        let put = |f: &str, bytes: &[u8]| {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, bytes).unwrap();
        };
        put("argocd/web.yaml.tpl", APP.replace("NAME", "web").as_bytes());
        put("argocd/plain.yaml", APP.replace("NAME", "plain").as_bytes());
        put("argocd/binary.yaml.tpl", &[0xff, 0xfe, 0x00]);
        put("argocd/notes.md", b"not matched");
        put(
            "argocd/.hidden/x.yaml.tpl",
            APP.replace("NAME", "hidden").as_bytes(),
        );
        let files = Directory::open(dir.path()).unwrap();
        let mut found = Found::default();
        let mut problems = Vec::new();
        read_tree(
            &files,
            "",
            &["argocd/*.yaml".into(), "argocd/**/*.yaml.tpl".into()],
            &mut found,
            &mut problems,
        )
        .unwrap();
        let names: Vec<&str> = found
            .apps
            .iter()
            .map(|a| a.metadata.name.as_str())
            .collect();
        assert_eq!(names, ["plain", "web"]);
        assert_eq!(problems, ["argocd/binary.yaml.tpl: not UTF-8 text"]);
    }

    /// Three repositories, each holding one Application named after it, read with `bound`
    /// fetches at once; returns the apps in the order read and the most fetches in flight.
    async fn read_three(bound: usize) -> (Vec<String>, usize, usize) {
        let root = tempfile::tempdir().unwrap();
        let mut yaml = format!("concurrency:\n  repositories: {bound}\nrepositories:\n");
        for name in ["a", "b", "c"] {
            let dir = root.path().join(name).join("argocd");
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("app.yaml"), APP.replace("NAME", name)).unwrap();
            yaml.push_str(&format!(
                "  - name: {name}\n    url: https://git.example/{name}.git\n    branch: main\n"
            ));
        }
        let config = crate::config::parse(Path::new("tagpilot.yaml"), &yaml).unwrap();
        // `c` twice: fetched once all the same.
        let entries: Vec<FromGit> = ["c", "a", "b", "c"]
            .iter()
            .map(|name| FromGit {
                repository: Some((*name).to_string()),
                paths: vec!["argocd/*.yaml".into()],
            })
            .collect();
        let (in_flight, most, fetches) = (
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        );
        let (found, problems) = read_from_git(&config, &entries, |repo| {
            let dir = root.path().join(&repo.name);
            let (in_flight, most, fetches) = (&in_flight, &most, &fetches);
            async move {
                fetches.fetch_add(1, Ordering::SeqCst);
                let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                // Every fetch waits a turn: the ones started alongside it are then in flight.
                tokio::task::yield_now().await;
                in_flight.fetch_sub(1, Ordering::SeqCst);
                Ok(Directory::open(dir).unwrap())
            }
        })
        .await
        .unwrap();
        assert_eq!(problems, Vec::<String>::new());
        let names = found.apps.iter().map(|a| a.metadata.name.clone()).collect();
        (
            names,
            most.load(Ordering::SeqCst),
            fetches.load(Ordering::SeqCst),
        )
    }

    #[tokio::test]
    async fn repositories_are_fetched_concurrently_within_the_bound_and_read_in_entry_order() {
        let (names, most, fetches) = read_three(2).await;
        assert_eq!(most, 2, "two fetches in flight at once, never more");
        assert_eq!(fetches, 3, "each repository once");
        assert_eq!(names, ["c", "a", "b", "c"]);
        let (names, most, _) = read_three(1).await;
        assert_eq!(most, 1);
        assert_eq!(names, ["c", "a", "b", "c"]);
    }

    #[tokio::test]
    async fn an_unknown_repository_is_refused_before_anything_is_fetched() {
        let config = crate::config::parse(
            Path::new("tagpilot.yaml"),
            "repositories:\n  - name: a\n    url: https://git.example/a.git\n    branch: main\n",
        )
        .unwrap();
        let entries = ["a", "nope"].map(|name| FromGit {
            repository: Some(name.to_string()),
            paths: vec!["*.yaml".into()],
        });
        let fetches = AtomicUsize::new(0);
        let err = read_from_git(&config, &entries, |_| {
            fetches.fetch_add(1, Ordering::SeqCst);
            async { Ok(Directory::open(".").unwrap()) }
        })
        .await
        .unwrap_err();
        assert!(
            matches!(err, ArgoError::UnknownRepository(ref n) if n == "nope"),
            "{err}"
        );
        assert_eq!(fetches.load(Ordering::SeqCst), 0);
    }
}
