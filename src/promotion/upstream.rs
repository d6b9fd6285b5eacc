//! What an upstream runs. In git (`path:` or `policy:`), read from its files: the tag its field
//! holds at the base tip, and since when, the first-parent commit that set it (the earliest of
//! the newest unbroken run of versions holding that tag, so a tag that came back after a revert
//! counts from the revert). Pure over the tree and the file's versions, which the caller reads
//! from git; anything that cannot be read is an [`UpstreamError`], and the promotion waits
//! naming it. An Application's, read from the live status the caller fetched.

use std::collections::BTreeMap;
use std::error::Error;
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use super::{Upstream, Verification};
use crate::files::Files;
use crate::image::{ImageRef, Repository};
use crate::manifest::{self, ManifestError};
use crate::policy::{HelmPaths, ImagePolicy, Upstream as UpstreamRef};

/// A cause from outside the core (git's history), kept as the error it is.
pub type Cause = Box<dyn Error + Send + Sync>;

/// One version of a file on the first-parent line, newest first: when its commit reached the
/// branch (seconds since the Unix epoch), and its text (`None`: absent or unreadable there).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub time: i64,
    pub text: Option<String>,
}

/// The versions of a file (by `/`-separated path) on the base branch, newest first.
pub type History<'a> = &'a dyn Fn(&str) -> Result<Vec<Version>, Cause>;

/// Why what an upstream in git runs cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("{upstream}: no such file in {repository}")]
    NoSuchFile {
        upstream: String,
        repository: String,
    },
    #[error("{upstream}: not defined")]
    NotDefined { upstream: String },
    #[error("{upstream}: not in git")]
    NotInGit { upstream: String },
    #[error("{}: cannot read", path.display())]
    Unreadable { path: PathBuf },
    #[error("{}", path.display())]
    Scan {
        path: PathBuf,
        #[source]
        source: ManifestError,
    },
    /// One file's fields of the image hold two tags.
    #[error("{}: its fields hold different tags ({first}, {second})", path.display())]
    FieldsDisagree {
        path: PathBuf,
        first: String,
        second: String,
    },
    /// The upstream's files hold two tags.
    #[error(
        "{upstream}: its fields hold different tags ({tag} in {}, {other} in {})",
        first.display(),
        second.display()
    )]
    FilesDisagree {
        upstream: String,
        tag: String,
        first: PathBuf,
        other: String,
        second: PathBuf,
    },
    #[error("{path}")]
    History {
        path: String,
        #[source]
        source: Cause,
    },
}

/// What a `path:` or `policy:` upstream runs on `repository`'s base branch (`tree`, its tip).
pub fn from_git(
    upstream: &UpstreamRef,
    repository: &str,
    tree: &dyn Files,
    (policy, policies): (&ImagePolicy, &[ImagePolicy]),
    history: History<'_>,
) -> Result<Upstream, UpstreamError> {
    let name = upstream.to_string();
    let places: Vec<(PathBuf, Vec<HelmPaths>)> = match upstream {
        UpstreamRef::Path { path, .. } => {
            let path = PathBuf::from(path);
            if !tree.is_file(&path) {
                return Err(UpstreamError::NoSuchFile {
                    upstream: name,
                    repository: repository.to_string(),
                });
            }
            vec![(path, Vec::new())]
        }
        UpstreamRef::Policy { name: up, .. } => {
            let up = policies.iter().find(|p| &p.name == up).ok_or_else(|| {
                UpstreamError::NotDefined {
                    upstream: name.clone(),
                }
            })?;
            policy_files(up, repository, tree)
        }
        UpstreamRef::Application { .. } => {
            return Err(UpstreamError::NotInGit { upstream: name });
        }
    };
    let mut runs: Vec<(String, Option<i64>, PathBuf)> = Vec::new();
    for (path, helm) in &places {
        if let Some((tag, since)) = running(tree, path, helm, policy, history)? {
            runs.push((tag, since, path.clone()));
        }
    }
    let Some((tag, _, _)) = runs.first() else {
        return Ok(Upstream {
            name,
            tag: None,
            since: None,
            verification: Verification::FromGit,
        });
    };
    if let Some((other, _, path)) = runs.iter().find(|(t, _, _)| t != tag) {
        return Err(UpstreamError::FilesDisagree {
            upstream: name,
            tag: tag.clone(),
            first: runs[0].2.clone(),
            other: other.clone(),
            second: path.clone(),
        });
    }
    // Several files holding the tag: it runs everywhere since the last of them set it.
    let since = runs
        .iter()
        .map(|(_, since, _)| *since)
        .try_fold(i64::MIN, |latest, s| s.map(|s| latest.max(s)))
        .and_then(|s| Timestamp::from_second(s).ok());
    Ok(Upstream {
        name,
        tag: Some(tag.clone()),
        since,
        verification: Verification::FromGit,
    })
}

/// Since when each of the promoting policy's own files in `repository` runs the tag it holds;
/// a file that cannot be read is left out (its field says why when it is planned).
pub fn own_since(
    policy: &ImagePolicy,
    repository: &str,
    tree: &dyn Files,
    history: History<'_>,
) -> BTreeMap<String, Timestamp> {
    policy_files(policy, repository, tree)
        .into_iter()
        .filter_map(|(path, helm)| {
            let (_, since) = running(tree, &path, &helm, policy, history).ok()??;
            let since = Timestamp::from_second(since?).ok()?;
            Some((path.to_string_lossy().replace('\\', "/"), since))
        })
        .collect()
}

/// The files of `repository` a policy's targets name, with their Helm value paths.
fn policy_files(
    up: &ImagePolicy,
    repository: &str,
    tree: &dyn Files,
) -> Vec<(PathBuf, Vec<HelmPaths>)> {
    let targets: Vec<_> = up
        .targets
        .iter()
        .filter(|t| t.repository.as_deref() == Some(repository))
        .collect();
    tree.manifests()
        .iter()
        .filter_map(|path| {
            let matching: Vec<_> = targets.iter().filter(|t| t.matches(path)).collect();
            (!matching.is_empty()).then(|| {
                let helm = matching.iter().filter_map(|t| t.helm.clone()).collect();
                (path.clone(), helm)
            })
        })
        .collect()
}

/// The tag `path` holds for the policy's image at the tip, and since when (the committer time
/// of the oldest version of the newest unbroken run holding it); `None` when the file holds no
/// field of the image.
fn running(
    tree: &dyn Files,
    path: &Path,
    helm: &[HelmPaths],
    policy: &ImagePolicy,
    history: History<'_>,
) -> Result<Option<(String, Option<i64>)>, UpstreamError> {
    let text = tree
        .read(path)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| UpstreamError::Unreadable {
            path: path.to_path_buf(),
        })?;
    let Some(tag) = tag_in(path, &text, helm, policy)? else {
        return Ok(None);
    };
    let display = path.to_string_lossy().replace('\\', "/");
    let versions = history(&display).map_err(|source| UpstreamError::History {
        path: display.clone(),
        source,
    })?;
    let mut since = None;
    for version in &versions {
        let held = match &version.text {
            Some(text) => tag_in(path, text, helm, policy).ok().flatten(),
            None => None,
        };
        if held.as_deref() != Some(tag.as_str()) {
            break;
        }
        since = Some(version.time);
    }
    Ok(Some((tag, since)))
}

/// The one tag `text` holds for the policy's image; an error when its fields disagree.
fn tag_in(
    path: &Path,
    text: &str,
    helm: &[HelmPaths],
    policy: &ImagePolicy,
) -> Result<Option<String>, UpstreamError> {
    let fields = manifest::scan(path, text, helm).map_err(|source| UpstreamError::Scan {
        path: path.to_path_buf(),
        source,
    })?;
    let mut tags: Vec<&str> = fields
        .iter()
        .filter(|f| f.repository() == Some(&policy.image))
        .filter_map(|f| f.current().0)
        .collect();
    tags.dedup();
    match tags.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.to_string())),
        [first, second, ..] => Err(UpstreamError::FieldsDisagree {
            path: path.to_path_buf(),
            first: first.to_string(),
            second: second.to_string(),
        }),
    }
}

/// The one tag of `image` an Application's live resources run (`status.summary.images`);
/// `None` when they run none, or two at once (a rollout under way).
pub fn running_tag(object: &serde_json::Value, image: &Repository) -> Option<String> {
    let images = object.pointer("/status/summary/images")?.as_array()?;
    let mut tags: Vec<String> = images
        .iter()
        .filter_map(|i| ImageRef::parse(i.as_str()?).ok())
        .filter(|r| r.repository == *image)
        .filter_map(|r| r.tag)
        .collect();
    tags.sort();
    tags.dedup();
    // Two tags of one image at once: a rollout under way; nothing is offered until it settles.
    match tags.len() {
        1 => tags.pop(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Strategy;

    fn api() -> ImagePolicy {
        let semver = Strategy::semver(None, false).unwrap();
        ImagePolicy::adhoc("r.example/shop/api", semver).unwrap()
    }

    #[test]
    fn an_application_runs_one_tag_of_the_image_or_none_while_it_rolls_out() {
        let status =
            |images: &[&str]| serde_json::json!({"status": {"summary": {"images": images}}});
        let image = &api().image;
        let one = status(&["r.example/shop/api:1.2.0", "r.example/shop/web:9.0.0"]);
        assert_eq!(running_tag(&one, image).as_deref(), Some("1.2.0"));
        let rolling = status(&["r.example/shop/api:1.2.0", "r.example/shop/api:1.3.0"]);
        assert_eq!(running_tag(&rolling, image), None, "a rollout under way");
        assert_eq!(running_tag(&status(&[]), image), None);
    }

    #[test]
    fn a_file_whose_fields_hold_two_tags_is_named_never_read() {
        let path = Path::new("prod/api.yaml");
        let text = "image: r.example/shop/api:1.2.0\n---\nimage: r.example/shop/api:1.3.0\n";
        let err = tag_in(path, text, &[], &api()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "prod/api.yaml: its fields hold different tags (1.2.0, 1.3.0)"
        );
        let one = "image: r.example/shop/api:1.2.0\n";
        assert_eq!(
            tag_in(path, one, &[], &api()).unwrap().as_deref(),
            Some("1.2.0")
        );
    }
}
