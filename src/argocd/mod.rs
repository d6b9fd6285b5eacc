//! Argo CD Applications as a source of policies: a drop-in for Argo CD Image Updater's
//! annotations that also updates Directory (plain YAML) apps in place.
//!
//! Why it exists: most users already describe what to update in Image Updater annotations on
//! their `Application`s. Rather than asking them to write `ImagePolicy` files, tagpilot reads
//! those annotations ([`annotations`]) or `ImageUpdater` resources ([`image_updater`]) into one
//! typed settings model, checked by one reader ([`settings`]), turns every managed app into
//! policies and write places
//! ([`resolve`]) and plans each repository's apps on a checkout ([`planner`]: in place through
//! the ordinary planner, [`in_place`], or in `.argocd-source-<app>.yaml` files,
//! [`override_file`]); the engine ([`crate::engine`]) joins that plan with every other source's
//! plan of the same repository, so apps sharing a repository share one commit and apps sharing
//! an image share one tag listing. Applications come from git ([`load`]) or live from the
//! Kubernetes API ([`cluster`], joining the API client [`crate::kubernetes`], Secrets as credentials
//! [`credentials`], and the `write-back-method: argocd` patches [`patch`]); [`outcome`] says
//! what became of each image and [`report`] adds an "Applications" section to `tagpilot plan`.
//! [`branch`] renders `git-branch` templates, once the changes they name are planned.
//!
//! Layers, bottom up: [`crate::application`] (the leaf model, shared with the Kubernetes edge), [`settings`], [`annotations`], [`config`], [`branch`] and
//! [`override_file`] are pure types; [`resolve`], [`outcome`], [`in_place`] and [`planner`]
//! select and edit over them; [`crate::kubernetes`] and [`load`] are edges that decide nothing
//! ([`crate::kubernetes`] never imports the planner).
//!
//! It must never drop an annotation silently: every key under either prefix is honoured or
//! reported with the reason. Only [`crate::kubernetes`] talks to the Kubernetes API, and nothing is
//! patched in plan mode.

pub mod branch;
pub mod plan;
pub mod read;
pub mod resolve;
pub mod resolved;
pub mod write;

/// The `applications:` types, which live with the rest of the configuration.
pub use crate::config::applications as config;

pub use crate::application::Application;
pub use crate::application::Origin;
pub use crate::config::applications::{ApplicationsConfig, FromCluster, FromGit};
pub use plan::{AppPlanner, ImageOutcome, RepositoryPlan};
pub use resolve::{ManagedApp, Resolved};

use crate::plan::PlanError;

#[derive(Debug, thiserror::Error)]
pub enum ArgoError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The local manifest directory that `applications.fromGit` reads without a repository;
    /// said as the planner says it ([`PlanError::Files`]), which reading does not import.
    #[error("manifest directory")]
    Files(#[source] crate::files::FilesError),
    /// A glob in `applications.fromGit.paths` that does not compile (`what` names it).
    #[error("{what}")]
    Paths {
        what: String,
        #[source]
        source: globset::Error,
    },
    #[error("applications.fromGit: repository `{0}` is not configured in `repositories:`")]
    UnknownRepository(String),
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error(transparent)]
    Kube(#[from] crate::kubernetes::KubeError),
    #[error("cannot read {}", path.display())]
    Read {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A file that is not YAML, or an Application that does not fit (file:line:column).
    #[error(transparent)]
    Document(crate::application::DocumentError),
}

impl ArgoError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            ArgoError::Plan(_) | ArgoError::Files(_) => "plan",
            ArgoError::Paths { .. } => "paths",
            ArgoError::UnknownRepository(_) => "unknown_repository",
            ArgoError::Git(_) => "git",
            ArgoError::Kube(_) => "kube",
            ArgoError::Read { .. } => "read",
            ArgoError::Document(_) => "document",
        }
    }
}
