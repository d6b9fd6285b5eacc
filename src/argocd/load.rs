//! Reading Application manifests from git (`applications.fromGit`) and asking a remote for its
//! default branch (`targetRevision: HEAD`). Reads only; a file that cannot be read or parsed is
//! reported and the others are still used.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::files::{self, Directory, Files};
use crate::git::{self, RepoCache};

use super::ArgoError;
use super::application::{Application, read_documents};
use super::image_updater::{self, ImageUpdater};
use crate::config::applications::FromGit;

/// What the `fromGit` files hold: Applications and `ImageUpdater` resources.
#[derive(Debug, Default)]
pub struct Found {
    pub apps: Vec<Application>,
    pub updaters: Vec<ImageUpdater>,
}

/// Every Application and `ImageUpdater` found by the `fromGit` entries, and the problems met
/// on the way (a file that is not YAML, say), each naming the file.
pub async fn from_git(
    config: &Config,
    entries: &[FromGit],
    cache: &RepoCache,
) -> Result<(Found, Vec<String>), ArgoError> {
    let mut found = Found::default();
    let mut problems = Vec::new();
    for entry in entries {
        match &entry.repository {
            Some(name) => {
                let repo = config
                    .repositories
                    .iter()
                    .find(|r| &r.name == name)
                    .ok_or_else(|| ArgoError::UnknownRepository(name.clone()))?;
                let files = git::snapshot(cache, repo).await?;
                read_tree(
                    &files,
                    &format!("{name}:"),
                    &entry.paths,
                    &mut found,
                    &mut problems,
                )?;
            }
            None => read_tree(
                &Directory::open(config.base_dir()).map_err(crate::plan::PlanError::from)?,
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
    let paths: Vec<&Path> = files
        .manifests()
        .iter()
        .map(PathBuf::as_path)
        .filter(|rel| {
            // Hidden files are not Applications' places either (`.argocd-source-*.yaml`).
            !rel.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with('.'))
                && set.is_match(rel)
        })
        .collect();
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
                    Err(e) => problems.push(e.to_string()),
                }
                // A broken ImageUpdater is an error of its own, beside the file's Applications.
                if text.contains(image_updater::KIND) {
                    match image_updater::read_documents(path, &text) {
                        Ok(updaters) => out.updaters.extend(updaters),
                        Err(e) => problems.push(e.to_string()),
                    }
                }
            }
            Ok(Err(_)) => problems.push(format!("{shown}: not UTF-8 text")),
            Err(e) => problems.push(format!("{shown}: cannot read: {e}")),
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
    #[error("{}", .0.message())]
    Git(#[from] git2::Error),
    #[error("HEAD points at {0:?}, not a branch")]
    NotABranch(String),
}
