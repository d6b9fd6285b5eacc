//! What resolving Applications gives ([`super::resolve`]): each managed Application with its
//! policies and the places its sources' changes land, and the repositories they write. A model
//! of its own, below the resolver, so that planning and writing take it without resolving.
//! Pure data.

use std::collections::{BTreeMap, BTreeSet};

use crate::git::RepositoryConfig;
use crate::image::Repository;
use crate::policy::ImagePolicy;

use super::branch::BranchTemplate;
use super::read::credentials::GitWrite;
use super::read::settings::{AppSettings, WriteBackMethod};
use crate::application::{Application, Origin};
use crate::config::repository::AuthConfig;

/// An Application with Image Updater annotations, ready to plan.
#[derive(Debug, Clone)]
pub struct ManagedApp {
    pub app: Application,
    pub origin: Origin,
    pub annotations: AppSettings,
    /// One per image of `image-list`, in order; `None` where the image's settings are invalid
    /// (the reason is in `annotations.skipped`).
    pub policies: Vec<Option<ImagePolicy>>,
    /// Where the app's changes are written, one entry per source that has a git path.
    pub units: Vec<Unit>,
    /// Patch the Application through the Kubernetes API instead of writing to git.
    pub patch: bool,
    /// `write-back-method: git…`.
    pub git_write: bool,
    /// App-level problems (no repository to write to, a method that cannot work here).
    pub problems: Vec<String>,
    /// The `ImageUpdater` resource entry that configures it; `None`: its annotations.
    pub configured_by: Option<super::read::image_updater::ConfiguredBy>,
}

/// One source of an app, and where in which repository its changes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// 0-based index into [`Application::sources`].
    pub source: usize,
    /// `repositories[].name` (configured or synthesised).
    pub repository: String,
    /// The source's `path`, relative to the repository root, `/`-separated, no trailing `/`
    /// (`""` for the root).
    pub root: String,
    /// The source type from the spec (`helm:`, `kustomize:`, `directory:`); detected from the
    /// files at plan time when absent.
    pub kind: Option<SourceKind>,
    pub write: UnitWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Directory,
    Kustomize,
    Helm,
}

impl SourceKind {
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Directory => "directory",
            SourceKind::Kustomize => "kustomize",
            SourceKind::Helm => "helm",
        }
    }
}

/// How a unit is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitWrite {
    /// Directory sources: the manifests under the root, in place.
    Manifests {
        recurse: bool,
        include: Option<String>,
        exclude: Option<String>,
    },
    /// `write-back-target: kustomization[:dir]`: this directory's kustomization, in place.
    Kustomization { dir: String },
    /// `write-back-target: helmvalues[:file]`: this values file, in place.
    HelmValues { file: String },
    /// No target: `.argocd-source-<app>.yaml` in the root (its content depends on the kind).
    OverrideFile { file: String },
}

/// Everything resolved from a set of Applications.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    pub apps: Vec<ManagedApp>,
    /// The repositories the units name, in first-use order.
    pub repositories: Vec<RepositoryConfig>,
    /// `git-branch` targets whose name depends on the changes, by repository name: their
    /// `write.branch` holds the template until the changes are planned.
    pub branch_templates: BTreeMap<String, BranchTemplate>,
    /// Every Application read, annotated or not ([`Application::deployed_view`]), indexed once
    /// per cycle: whose sources contain a change's files is asked of them ([`crate::affected`]).
    pub deployers: crate::affected::Deployers,
}

impl Resolved {
    /// Keeps only the apps with an image in `images` (each kept whole: its `.argocd-source`
    /// file is written whole), and the repositories and branch templates they use.
    pub fn keep_images(&mut self, images: &BTreeSet<Repository>) {
        self.apps.retain(|a| {
            a.policies
                .iter()
                .flatten()
                .any(|p| images.contains(&p.image))
        });
        let used = |name: &str| {
            self.apps
                .iter()
                .any(|a| a.units.iter().any(|u| u.repository == name))
        };
        let repositories = std::mem::take(&mut self.repositories);
        self.repositories = repositories.into_iter().filter(|r| used(&r.name)).collect();
        let templates = std::mem::take(&mut self.branch_templates);
        self.branch_templates = templates
            .into_iter()
            .filter(|(name, _)| used(name))
            .collect();
    }

    /// Applications cannot set `versionLabels`: `tagpilot.yaml`'s count for their policies.
    pub fn default_version_labels(
        &mut self,
        labels: Option<&crate::config::version_labels::VersionLabels>,
    ) {
        for app in &mut self.apps {
            for policy in app.policies.iter_mut().flatten() {
                ImagePolicy::default_version_labels(std::slice::from_mut(policy), labels);
            }
        }
    }

    /// The repositories that Applications from the cluster write with credentials from Argo
    /// CD's Secrets (`write-back-method: git:secret:…`, `git:repocreds`): one entry per unit,
    /// in order, for [`super::read::credentials::git_credentials`] to read.
    pub fn git_writes(&self) -> Vec<GitWrite<'_>> {
        let mut out = Vec::new();
        for managed in &self.apps {
            if managed.origin != Origin::Cluster {
                continue;
            }
            let WriteBackMethod::Git(how) = &managed.annotations.write_back else {
                continue;
            };
            for unit in &managed.units {
                if let Some(repository) =
                    self.repositories.iter().find(|r| r.name == unit.repository)
                {
                    out.push(GitWrite {
                        application: managed.app.id(),
                        how,
                        repository,
                    });
                }
            }
        }
        out
    }

    /// Stores the auth Argo CD's Secrets gave repositories, by name
    /// ([`super::read::credentials::git_credentials`]).
    pub fn give_auth(&mut self, given: Vec<(String, AuthConfig)>) {
        for (name, auth) in given {
            if let Some(repo) = self.repositories.iter_mut().find(|r| r.name == name) {
                repo.auth = auth;
            }
        }
    }

    /// The apps with at least one unit in `repository`.
    pub fn apps_in(&self, repository: &str) -> impl Iterator<Item = (usize, &ManagedApp)> {
        self.apps
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.units.iter().any(|u| u.repository == repository))
    }
}
