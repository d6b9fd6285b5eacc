//! Argo CD Applications as a source of policies: a drop-in for Argo CD Image Updater's
//! annotations that also updates Directory (plain YAML) apps in place.
//!
//! Why it exists: most users already describe what to update in Image Updater annotations on
//! their `Application`s. Rather than asking them to write `ImagePolicy` files, tagpilot reads
//! them, turns every managed app into policies and write places, and plans each repository's
//! apps on a checkout; the engine ([`crate::engine`]) joins that plan with every other source's
//! plan of the same repository, so apps sharing a repository share one commit and apps sharing
//! an image share one tag listing.
//!
//! Split by job, one folder each, bottom up:
//! - [`read`]: the annotations ([`read::annotations`]) and `ImageUpdater` resources
//!   ([`read::image_updater`]) read into one typed settings model, checked by one reader
//!   ([`read::settings`]); the Applications from git ([`read::load`]) or the Kubernetes API
//!   ([`read::cluster`]), and Argo CD's Secrets as credentials ([`read::credentials`]).
//! - [`resolve`]: every managed app into one policy per image and the place each source's
//!   changes land, giving the model in [`resolved`] (data, so that writing takes it without
//!   the resolver). [`branch`] is the `git-branch` template resolve checks and the engine
//!   renders once the changes it names are planned.
//! - [`plan`]: each repository's apps on a checkout (in place through the ordinary planner,
//!   [`plan::in_place`], or in `.argocd-source-<app>.yaml` files, [`plan::override_file`]),
//!   what became of each image ([`plan::outcome`]), and the `write-back-method: argocd` patches
//!   ([`plan::patch`]). Reads the registry, never the cluster.
//! - [`write`]: the patches sent to the live Applications and each `ImageUpdater`'s `status`.
//!
//! Read never resolves, plans or writes, nor takes the resolved model (the git credentials it
//! reads from Argo CD's Secrets are handed back for [`resolved`] to store); resolve is pure;
//! plan never talks to the cluster; write never resolves
//! (`layers::the_argocd_source_keeps_its_inner_layers`). The leaf model of
//! an Application ([`crate::application`]) and the `applications:` configuration
//! ([`crate::config::applications`]) sit below all four. Not here: the "Applications" section
//! of the report ([`crate::report::applications`]), the verification watcher
//! (`run/verify/follow.rs`), `migrate-annotations` (`cli/migrate/`).
//!
//! It must never drop an annotation silently: every key under either prefix is honoured or
//! reported with the reason. Only [`crate::kubernetes`] talks to the Kubernetes API, and nothing
//! is patched in plan mode.

pub mod branch;
pub mod plan;
pub mod read;
pub mod resolve;
pub mod resolved;
pub mod write;

// What callers name most, at the root: an Application and where it was read, the cluster
// half of `applications:`, and what became of an image.
pub use crate::application::Application;
pub use crate::application::Origin;
pub use crate::config::applications::FromCluster;
pub use plan::{ImageOutcome, ImageReason};

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
