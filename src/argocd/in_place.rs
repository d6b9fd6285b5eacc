//! In-place writes of Applications' images (Directory manifests, a kustomization or values
//! file named by `write-back-target`): which files a source's images may touch, the policy
//! targets naming exactly those files, and how to group the images into as few walks of the
//! checkout as conflict detection allows. The walks themselves are the ordinary planner's
//! ([`crate::plan::plan`]), driven by [`super::planner`].
//!
//! Reads the checkout's file tree; writes nothing.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Mutex;

use crate::image::Repository;
use crate::manifest::{self, FieldKind};
use crate::policy::{HelmPaths, ImagePolicy, Target};
use crate::registry::{ImageInfo, Registry, RegistryError};

use super::annotations::AnnotatedImage;
use super::resolve::{self, SourceKind};

/// One image of one app unit, written in place: planned by the ordinary planner.
pub(crate) struct InPlace {
    /// With targets naming exactly `files`.
    pub policy: ImagePolicy,
    pub files: Vec<String>,
    /// Its targets carry Helm value paths.
    pub helm: bool,
    /// Index into [`super::RepositoryPlan::images`].
    pub outcome: usize,
}

impl InPlace {
    /// Whether the two can share one walk without changing what either finds. The planner
    /// refuses a field two policies claim, which is the conflict to keep: the same image in
    /// one file (two apps on one manifest), so one image appears once per batch and is
    /// merged, and checked, afterwards. Helm value paths without a repository, and
    /// kustomize image names, can be claimed by any policy on the file, so those share a
    /// walk only on disjoint files.
    fn fits_with(&self, other: &InPlace) -> bool {
        if self.policy.image == other.policy.image || self.policy.name == other.policy.name {
            return false;
        }
        let aliased = |j: &InPlace| {
            j.policy
                .targets
                .iter()
                .any(|t| t.kustomize_image_name.is_some())
        };
        let shared = self.files.iter().any(|f| other.files.contains(f));
        !shared || !((self.helm && other.helm) || aliased(self) || aliased(other))
    }
}

/// Groups the in-place images into as few walks of the checkout as [`InPlace::fits_with`]
/// allows: first fit, in plan order, so apps on distinct images share one walk.
pub(crate) fn batches(jobs: &[InPlace]) -> Vec<Vec<&InPlace>> {
    let mut out: Vec<Vec<&InPlace>> = Vec::new();
    for job in jobs {
        match out
            .iter_mut()
            .find(|b| b.iter().all(|other| job.fits_with(other)))
        {
            Some(batch) => batch.push(job),
            None => out.push(vec![job]),
        }
    }
    out
}

/// A registry that remembers which images it was asked to list.
pub(crate) struct Recording<'r, R> {
    inner: &'r R,
    listed: Mutex<BTreeSet<Repository>>,
}

impl<'r, R: Registry> Recording<'r, R> {
    pub(crate) fn new(inner: &'r R) -> Self {
        Recording {
            inner,
            listed: Default::default(),
        }
    }

    pub(crate) fn listed(&self, repo: &Repository) -> bool {
        self.listed.lock().expect("listing lock").contains(repo)
    }
}

impl<R: Registry> Registry for Recording<'_, R> {
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.listed
            .lock()
            .expect("listing lock")
            .insert(repo.clone());
        self.inner.list_tags(repo).await
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[crate::image::Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inner.inspect(repo, reference, platforms).await
    }

    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.inner.digest(repo, reference).await
    }

    fn first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        self.inner.first_seen(repo, tags)
    }
}

/// The targets that let `image`'s policy touch exactly `files`.
pub(crate) fn targets(
    files: &[String],
    repository: &str,
    image: &AnnotatedImage,
    helm: bool,
) -> Vec<Target> {
    let target = |helm: Option<HelmPaths>| {
        let mut builder = globset::GlobSetBuilder::new();
        for f in files {
            builder.add(
                globset::GlobBuilder::new(&globset::escape(f))
                    .literal_separator(true)
                    .build()
                    .expect("an escaped path is a valid glob"),
            );
        }
        Target {
            paths: files.to_vec(),
            path_set: builder.build().expect("literal globs build"),
            repository: Some(repository.to_string()),
            helm,
            kustomize_image_name: image.kustomize_image_name.clone(),
        }
    };
    if !helm {
        return vec![target(None)];
    }
    let paths = match &image.helm.spec {
        Some(spec) => HelmPaths {
            image: Some(spec.clone()),
            ..HelmPaths::default()
        },
        None => HelmPaths {
            repository: Some(image.helm.name_or_default().to_string()),
            tag: Some(image.helm.tag_or_default().to_string()),
            ..HelmPaths::default()
        },
    };
    if image.helm.is_set() {
        vec![target(Some(paths))]
    } else {
        // Image Updater's default paths, and the conventional `image: {repository, tag}` shape.
        vec![target(Some(paths)), target(None)]
    }
}

/// What Argo CD would detect in `dir`.
pub(crate) fn detect(dir: &Path) -> SourceKind {
    if ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .any(|f| dir.join(f).is_file())
    {
        SourceKind::Kustomize
    } else if dir.join("Chart.yaml").is_file() {
        SourceKind::Helm
    } else {
        SourceKind::Directory
    }
}

/// Why a source's files cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// `directory.include` or `directory.exclude` is not a glob.
    #[error("directory pattern {pattern:?}: {source}")]
    Pattern {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error("path {0} does not exist")]
    NoPath(String),
}

/// The manifests of a Directory source, repository-relative: `.yaml`/`.yml` files under `root`
/// (below it only with `recurse`), kept by `include` and dropped by `exclude`. A pattern
/// matches the path relative to `root` or the file name.
pub(crate) fn manifest_files(
    checkout: &Path,
    root: &str,
    recurse: bool,
    include: Option<&str>,
    exclude: Option<&str>,
) -> Result<Vec<String>, FilesError> {
    let glob = |p: &str| {
        globset::GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map(|g| g.compile_matcher())
            .map_err(|source| FilesError::Pattern {
                pattern: p.to_string(),
                source,
            })
    };
    let include = include.filter(|s| !s.is_empty()).map(glob).transpose()?;
    let exclude = exclude.filter(|s| !s.is_empty()).map(glob).transpose()?;
    let dir = checkout.join(root);
    if !dir.is_dir() {
        return Err(FilesError::NoPath(resolve::display(root).to_string()));
    }
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(&dir)
        .sort_by_file_name()
        .max_depth(if recurse { usize::MAX } else { 1 })
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker.filter_map(Result::ok) {
        if !entry.file_type().is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let rel = entry.path().strip_prefix(&dir).unwrap_or(entry.path());
        let rel_s = slash(rel);
        let hit = |m: &globset::GlobMatcher| m.is_match(&rel_s) || m.is_match(&name);
        if include.as_ref().is_some_and(|m| !hit(m)) || exclude.as_ref().is_some_and(hit) {
            continue;
        }
        out.push(resolve::join(root, &rel_s));
    }
    Ok(out)
}

fn slash(p: &Path) -> String {
    p.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

pub(crate) fn describe_files(files: &[String]) -> String {
    match files {
        [] => "no files".to_string(),
        [one] => one.clone(),
        many => format!("{} files", many.len()),
    }
}

/// The image's current tag and digest as the source's own files hold it (the kustomization's
/// `images:`, a workload, Helm values): where Argo CD starts before any override.
pub(crate) fn current_in_source(
    checkout: &Path,
    root: &str,
    image: &AnnotatedImage,
    policy: &ImagePolicy,
) -> Option<(Option<String>, Option<String>)> {
    let files = manifest_files(checkout, root, true, None, None).ok()?;
    let helm = targets(&[], "", image, true)
        .into_iter()
        .filter_map(|t| t.helm)
        .collect::<Vec<_>>();
    for f in files {
        let Ok(text) = std::fs::read_to_string(checkout.join(&f)) else {
            continue;
        };
        let Ok(fields) = manifest::scan(Path::new(&f), &text, &helm) else {
            continue;
        };
        for field in fields {
            let named = match &field.kind {
                FieldKind::Kustomize { name } => {
                    image.kustomize_image_name.as_deref() == Some(name.as_str())
                }
                _ => false,
            };
            if named || field.repository() == Some(&policy.image) {
                let (t, d) = field.current();
                return Some((t.map(str::to_string), d.map(str::to_string)));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::override_file::tests::image;

    #[test]
    fn distinct_images_share_a_walk_and_one_image_twice_does_not() {
        let job = |name: &str, image_list: &str, files: &[&str], helm: bool| {
            let (img, mut policy) = image(&[("image-list", image_list)]);
            let files: Vec<String> = files.iter().map(|f| f.to_string()).collect();
            policy.name = name.to_string();
            policy.targets = targets(&files, "m", &img, helm);
            InPlace {
                policy,
                files,
                helm,
                outcome: 0,
            }
        };
        let names = |jobs: &[InPlace]| -> Vec<Vec<String>> {
            batches(jobs)
                .iter()
                .map(|b| b.iter().map(|j| j.policy.name.clone()).collect())
                .collect()
        };
        let jobs = [
            job("a/api", "r.example/api", &["a/d.yaml"], false),
            job("a/web", "r.example/web", &["a/d.yaml"], false),
            job("b/worker", "r.example/worker", &["b/d.yaml"], false),
            // Two apps on one image: separate walks, so their edits meet (and are checked)
            // when the plans are merged.
            job("c/api", "r.example/api", &["c/d.yaml"], false),
            // Helm paths on one values file could be claimed by either policy.
            job("h/ui", "r.example/ui", &["h/values.yaml"], true),
            job("h/worker2", "r.example/worker2", &["h/values.yaml"], true),
        ];
        assert_eq!(
            names(&jobs),
            vec![
                vec!["a/api", "a/web", "b/worker", "h/ui"],
                vec!["c/api", "h/worker2"],
            ]
        );
    }

    #[test]
    fn directory_files_honour_recurse_include_and_exclude() {
        let dir = tempfile::tempdir().unwrap();
        for f in [
            "app/a.yaml",
            "app/b.yml",
            "app/skip.yaml",
            "app/sub/c.yaml",
            "app/.hidden/d.yaml",
            "app/x.json",
        ] {
            let p = dir.path().join(f);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "a: 1\n").unwrap();
        }
        let flat = manifest_files(dir.path(), "app", false, None, Some("skip.yaml")).unwrap();
        assert_eq!(flat, vec!["app/a.yaml", "app/b.yml"]);
        let deep = manifest_files(dir.path(), "app", true, Some("{a.yaml,sub/*}"), None).unwrap();
        assert_eq!(deep, vec!["app/a.yaml", "app/sub/c.yaml"]);
    }
}
