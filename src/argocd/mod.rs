//! Argo CD Applications as a source of policies: a drop-in for Argo CD Image Updater's
//! annotations that also updates Directory (plain YAML) apps in place.
//!
//! Why it exists: most users already describe what to update in Image Updater annotations on
//! their `Application`s. Rather than asking them to write `ImagePolicy` files, tagpilot reads
//! those annotations ([`annotations`]), turns every annotated app into policies and write places
//! ([`resolve`]) and plans each repository's apps in one pass for the git writer ([`planner`]),
//! so apps sharing a repository share one commit and apps sharing an image share one tag
//! listing. Applications come from git ([`load`]) or from the Kubernetes API ([`cluster`]);
//! [`report`] adds an "Applications" section to `tagpilot plan`.
//!
//! It must never drop an annotation silently: every key under either prefix is honoured or
//! reported with the reason. Only [`cluster`] talks to the Kubernetes API, and it writes only
//! for `write-back-method: argocd` in `tagpilot apply`.

pub mod annotations;
pub mod application;

pub mod config;

pub mod planner;

pub mod resolve;

pub use application::Application;
pub use config::{ApplicationsConfig, FromCluster, FromGit};
pub use planner::{AppPlanner, ImageOutcome, RepositoryPlan};
pub use resolve::{ManagedApp, Origin, Resolved, resolve};

use crate::manifest::ManifestError;
use crate::plan::PlanError;

#[derive(Debug, thiserror::Error)]
pub enum ArgoError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("splitting the plan into commits: {0}")]
    Split(#[from] ManifestError),
    #[error("{path}: {message}")]
    Read { path: String, message: String },
    #[error("applications.fromGit: repository `{0}` is not configured in `repositories:`")]
    UnknownRepository(String),
    #[error(transparent)]
    Git(#[from] crate::git::GitError),
    #[error("Kubernetes API: {0}")]
    Kube(String),
}

impl ArgoError {
    pub fn metric_label(&self) -> &'static str {
        match self {
            ArgoError::Plan(_) => "plan",
            ArgoError::Split(_) => "split",
            ArgoError::Read { .. } => "read",
            ArgoError::UnknownRepository(_) => "unknown_repository",
            ArgoError::Git(_) => "git",
            ArgoError::Kube(_) => "kube",
        }
    }
}
