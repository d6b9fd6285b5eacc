//! In-place writes of Applications' images (Directory manifests, a kustomization or values
//! file named by `write-back-target`): which files a source's images may touch, the policy
//! targets naming exactly those files, and how to group the images into as few walks of the
//! checkout as conflict detection allows. The walks themselves are the ordinary planner's
//! ([`crate::plan::plan`]), driven by [`super`].
//!
//! Reads the checkout's file tree; writes nothing.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use crate::files::{self, Files};
use crate::image::Repository;
use crate::manifest::{self, FieldKind};
use crate::policy::{HelmPaths, ImagePolicy, Target};

use super::super::read::settings::ImageSettings;
use super::super::resolve::{self, SourceKind};

/// One image of one app unit, written in place: planned by the ordinary planner.
pub(crate) struct InPlace {
    /// With targets naming exactly `files`.
    pub policy: ImagePolicy,
    pub files: Vec<String>,
    /// Its targets carry Helm value paths.
    pub helm: bool,
    /// Index into [`super::RepositoryPlan::images`].
    pub outcome: usize,
    /// Written to a kustomization (`write-back-target: kustomization`): an image it does not
    /// name gets an `images:` entry, as Image Updater adds one.
    pub add_entry: Option<AddEntry>,
}

/// Where an image missing from a kustomization's `images:` comes from.
#[derive(Debug, Clone)]
pub(crate) struct AddEntry {
    /// Index into the resolved apps.
    pub app: usize,
    /// Index into the app's images.
    pub image: usize,
    /// The source's path, where its manifests (and so its current tag) are.
    pub root: String,
    /// The kustomization's directory.
    pub dir: String,
}

impl InPlace {
    fn aliased(&self) -> bool {
        self.policy
            .targets
            .iter()
            .any(|t| t.kustomize_image_name.is_some())
    }
}

/// What one walk already holds, to tell whether another image can join it without changing
/// what either finds. The planner refuses a field two policies claim, which is the conflict to
/// keep: the same image in one file (two apps on one manifest), so one image appears once per
/// file of a walk and is merged, and checked, afterwards. Helm value paths without a
/// repository, and kustomize image names, can be claimed by any policy on the file, so those
/// share a walk only on disjoint files. One policy name is in a walk once, so each image's
/// outcome is found by its name. Apps on one image with files of their own share a walk:
/// thousands of Applications on a few images are one walk, not one per Application.
#[derive(Default)]
struct Walk<'j> {
    jobs: Vec<usize>,
    names: HashSet<&'j str>,
    /// Per file: the images on it, and whether a Helm or an aliased job touches it.
    files: HashMap<&'j str, FileUse<'j>>,
}

#[derive(Default)]
struct FileUse<'j> {
    images: Vec<&'j Repository>,
    helm: bool,
    aliased: bool,
}

impl<'j> Walk<'j> {
    fn fits(&self, job: &InPlace) -> bool {
        if self.names.contains(job.policy.name.as_str()) {
            return false;
        }
        let aliased = job.aliased();
        job.files.iter().all(|f| match self.files.get(f.as_str()) {
            None => true,
            Some(u) => {
                !(u.images.contains(&&job.policy.image)
                    || aliased
                    || u.aliased
                    || (job.helm && u.helm))
            }
        })
    }

    fn add(&mut self, k: usize, job: &'j InPlace) {
        self.names.insert(&job.policy.name);
        let aliased = job.aliased();
        for f in &job.files {
            let u = self.files.entry(f.as_str()).or_default();
            u.images.push(&job.policy.image);
            u.helm |= job.helm;
            u.aliased |= aliased;
        }
        self.jobs.push(k);
    }
}

/// Groups the in-place images into as few walks of the tree as [`Walk::fits`] allows: first
/// fit, in plan order; each walk is a list of indices into `jobs`. Each job is checked against
/// each walk by lookups, never against every job placed before it.
pub(crate) fn batches(jobs: &[InPlace]) -> Vec<Vec<usize>> {
    let mut walks: Vec<Walk<'_>> = Vec::new();
    for (k, job) in jobs.iter().enumerate() {
        match walks.iter_mut().find(|w| w.fits(job)) {
            Some(walk) => walk.add(k, job),
            None => {
                let mut walk = Walk::default();
                walk.add(k, job);
                walks.push(walk);
            }
        }
    }
    walks.into_iter().map(|w| w.jobs).collect()
}

/// The targets that let `image`'s policy touch exactly `files`.
pub(crate) fn targets(
    files: &[String],
    repository: &str,
    image: &ImageSettings,
    helm: bool,
) -> Vec<Target> {
    let target = |helm: Option<HelmPaths>| Target {
        helm,
        kustomize_image_name: image.kustomize_image_name.clone(),
        ..Target::files(files.to_vec(), Some(repository.to_string()))
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

/// What Argo CD would detect in the directory `root` of `files`.
pub(crate) fn detect(files: &dyn Files, root: &str) -> SourceKind {
    let dir = Path::new(root);
    if ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .any(|f| files.is_file(&dir.join(f)))
    {
        SourceKind::Kustomize
    } else if files.is_file(&dir.join("Chart.yaml")) {
        SourceKind::Helm
    } else {
        SourceKind::Directory
    }
}

/// Why a source's files cannot be listed.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// `directory.include` or `directory.exclude` is not a glob.
    #[error("directory pattern {pattern:?}")]
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
/// matches the path relative to `root` or the file name. Hidden files and directories are left
/// out, as Argo CD leaves them out. Found by binary search in the tree's sorted list, so a
/// repository of thousands of Applications is not walked once per Application.
pub(crate) fn manifest_files(
    files: &dyn Files,
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
    let dir = Path::new(root);
    if !files.is_dir(dir) {
        return Err(FilesError::NoPath(resolve::display(root).to_string()));
    }
    let mut out = Vec::new();
    for path in files::manifests_under(files, dir) {
        let rel = path.strip_prefix(dir).unwrap_or(path);
        if !recurse && rel.components().count() > 1 {
            continue;
        }
        if rel
            .components()
            .any(|c| c.as_os_str().to_string_lossy().starts_with('.'))
        {
            continue;
        }
        let name = rel
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
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
    files: &dyn Files,
    root: &str,
    image: &ImageSettings,
    policy: &ImagePolicy,
) -> Option<(Option<String>, Option<String>)> {
    let paths = manifest_files(files, root, true, None, None).ok()?;
    let helm = targets(&[], "", image, true)
        .into_iter()
        .filter_map(|t| t.helm)
        .collect::<Vec<_>>();
    for f in paths {
        let Ok(Ok(text)) = files.read(Path::new(&f)).map(String::from_utf8) else {
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
    use crate::argocd::plan::override_file::tests::image;

    #[test]
    fn images_share_a_walk_unless_they_could_claim_one_field() {
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
                add_entry: None,
            }
        };
        let names = |jobs: &[InPlace]| -> Vec<Vec<String>> {
            batches(jobs)
                .iter()
                .map(|b| b.iter().map(|&k| jobs[k].policy.name.clone()).collect())
                .collect()
        };
        let jobs = [
            job("a/api", "r.example/api", &["a/d.yaml"], false),
            job("a/web", "r.example/web", &["a/d.yaml"], false),
            job("b/worker", "r.example/worker", &["b/d.yaml"], false),
            // Two apps on one image, each on its own file: one walk.
            job("c/api", "r.example/api", &["c/d.yaml"], false),
            // Two apps on one image and one file: separate walks, so their edits meet (and are
            // checked) when the plans are merged.
            job("d/api", "r.example/api", &["a/d.yaml"], false),
            // Helm paths on one values file could be claimed by either policy.
            job("h/ui", "r.example/ui", &["h/values.yaml"], true),
            job("h/worker2", "r.example/worker2", &["h/values.yaml"], true),
        ];
        assert_eq!(
            names(&jobs),
            vec![
                vec!["a/api", "a/web", "b/worker", "c/api", "h/ui"],
                vec!["d/api", "h/worker2"],
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
        let files = crate::files::Directory::open(dir.path()).unwrap();
        let flat = manifest_files(&files, "app", false, None, Some("skip.yaml")).unwrap();
        assert_eq!(flat, vec!["app/a.yaml", "app/b.yml"]);
        let deep = manifest_files(&files, "app", true, Some("{a.yaml,sub/*}"), None).unwrap();
        assert_eq!(deep, vec!["app/a.yaml", "app/sub/c.yaml"]);
    }
}
