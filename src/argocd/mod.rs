//! Argo CD Applications as a source of policies: a drop-in for Argo CD Image Updater's
//! annotations that also updates Directory (plain YAML) apps in place.
//!
//! Why it exists: most users already describe what to update in Image Updater annotations on
//! their `Application`s. Rather than asking them to write `ImagePolicy` files, tagpilot reads
//! those annotations ([`annotations`]), turns every annotated app into policies and write places
//! ([`resolve`]) and plans each repository's apps in one pass for the git writer ([`planner`]),
//! so apps sharing a repository share one commit and apps sharing an image share one tag
//! listing. Applications come from git ([`load`]);
//! [`report`] adds an "Applications" section to `tagpilot plan`.
//!
//! It must never drop an annotation silently: every key under either prefix is honoured or
//! reported with the reason. Nothing here talks to the Kubernetes API yet; `fromCluster` and
//! `write-back-method: argocd` are reported as unsupported.

pub mod annotations;
pub mod application;

pub mod config;
pub mod load;
pub mod report;

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

// === a whole run ===

/// Everything an Applications run produced, for the CLI to print.
pub struct Run {
    /// Changes, holds and problems across every repository the apps write to.
    pub plan: crate::plan::Plan,
    pub repositories: Vec<crate::git::RepositoryReport>,
    pub applications: Vec<report::ApplicationReport>,
}

/// Reads the configured Applications, plans their repositories and writes them through the git
/// writer (a dry run for `tagpilot plan`).
pub async fn run<R: crate::registry::Registry>(
    config: &crate::config::Config,
    cache: &crate::git::RepoCache,
    registry: &R,
    progress: &dyn crate::plan::Progress,
    options: crate::git::WriteOptions,
) -> Result<Run, ArgoError> {
    let Some(apps_config) = &config.applications else {
        return Ok(Run {
            plan: Default::default(),
            repositories: Vec::new(),
            applications: Vec::new(),
        });
    };
    let (apps, load_problems) = load::from_git(config, &apps_config.from_git, cache).await?;
    let apps = apps.into_iter().map(|a| (a, Origin::Git)).collect();
    let resolved = resolve(apps, &config.repositories, &load::remote_default_branch);
    let planner = AppPlanner::new(&resolved, registry, progress);
    let repositories =
        crate::git::write_all(cache, &resolved.repositories, &planner, options).await;
    let mut plan = crate::plan::Plan::default();
    let mut images = Vec::new();
    let mut app_problems = Vec::new();
    for r in &repositories {
        if let Some(p) = planner.last_plan(&r.repository) {
            plan.merge(p.plan);
            images.extend(p.images);
            app_problems.extend(p.app_problems);
        }
    }
    if apps_config.from_cluster.is_some() {
        plan.problems.push(crate::plan::Problem {
            message: "applications.fromCluster is not supported yet; keep the Application manifests in git and use applications.fromGit".into(),
            ..Default::default()
        });
    }
    for message in load_problems {
        plan.problems.push(crate::plan::Problem {
            message,
            ..Default::default()
        });
    }
    for a in &resolved.apps {
        for p in &a.problems {
            plan.problems.push(crate::plan::Problem {
                message: format!("application {}: {p}", a.app.id()),
                ..Default::default()
            });
        }
    }
    for (i, p) in &app_problems {
        plan.problems.push(crate::plan::Problem {
            message: format!("application {}: {p}", resolved.apps[*i].app.id()),
            ..Default::default()
        });
    }
    let applications = report::collect(&resolved, &images, &app_problems);
    Ok(Run {
        plan,
        repositories,
        applications,
    })
}
