//! Argo CD Applications as a source of policies: a drop-in for Argo CD Image Updater's
//! annotations that also updates Directory (plain YAML) apps in place.
//!
//! Why it exists: most users already describe what to update in Image Updater annotations on
//! their `Application`s. Rather than asking them to write `ImagePolicy` files, tagpilot reads
//! those annotations ([`annotations`]), turns every annotated app into policies and write places
//! ([`resolve`]) and plans each repository's apps in one pass for the git writer ([`planner`]),
//! so apps sharing a repository share one commit and apps sharing an image share one tag
//! listing. Applications come from git ([`load`]) or live from the Kubernetes API
//! ([`cluster`], which also reads credentials from Secrets and patches Applications for
//! `write-back-method: argocd`); [`report`] adds an "Applications" section to `tagpilot plan`.
//! [`branch`] renders `git-branch` templates, once the changes they name are planned.
//!
//! It must never drop an annotation silently: every key under either prefix is honoured or
//! reported with the reason. Only [`cluster`] talks to the Kubernetes API, and it writes
//! nothing in plan mode.

pub mod annotations;
pub mod application;
pub mod branch;

pub mod cluster;
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

/// `repo` with its `git-branch` target named after the changes, as Image Updater names it:
/// planned on a checkout of the base, so the same updates always go to the same branch and a
/// run with nothing new pushes nothing.
async fn render_branch<R: crate::registry::Registry>(
    resolved: &Resolved,
    planner: &AppPlanner<'_, R>,
    cache: &crate::git::RepoCache,
    repo: &crate::git::RepositoryConfig,
    template: &branch::BranchTemplate,
) -> Result<crate::git::RepositoryConfig, crate::git::GitError> {
    let mut base = repo.clone();
    // Only the base is read here; the rendered branch is fetched by the writer.
    base.write.branch = None;
    let checkout = crate::git::checkout(cache, &base).await?;
    let plan = planner
        .plan_checkout(&base, checkout.path())
        .await
        .map_err(|e| crate::git::GitError::Plan {
            repository: repo.name.clone(),
            source: Box::new(e),
        })?;
    let changes: Vec<branch::BranchChange> = plan
        .images
        .iter()
        .filter(|o| o.status == "update")
        .map(|o| branch::BranchChange {
            name: resolved.apps[o.app]
                .annotations
                .images
                .iter()
                .find(|i| i.alias == o.alias)
                .map_or_else(|| o.image.clone(), |i| i.image.clone()),
            alias: o.alias.clone(),
            old_tag: o.from.clone().unwrap_or_default(),
            new_tag: o.to.clone().unwrap_or_default(),
        })
        .collect();
    let mut repo = repo.clone();
    repo.write.branch = Some(template.render(None, &changes));
    Ok(repo)
}

/// Everything an Applications run produced, for the CLI to print.
pub struct Run {
    /// Changes, holds and problems across every repository the apps write to.
    pub plan: crate::plan::Plan,
    pub repositories: Vec<crate::git::RepositoryReport>,
    pub applications: Vec<report::ApplicationReport>,
}

/// Reads the Applications kept in git (`applications.fromGit`), plans their repositories and
/// writes them through the git writer (a dry run for `tagpilot plan`). With
/// `applications.fromCluster`, use [`run_with`] and what [`cluster::load`] read.
pub async fn run<R: crate::registry::Registry>(
    config: &crate::config::Config,
    cache: &crate::git::RepoCache,
    registry: &R,
    progress: &dyn crate::plan::Progress,
    options: crate::git::WriteOptions,
) -> Result<Run, ArgoError> {
    run_with(config, None, cache, registry, progress, options).await
}

/// [`run`], plus the Applications read from the cluster: their git write-back gets credentials
/// from Argo CD's Secrets, and `write-back-method: argocd` apps are patched through the API
/// (in plan mode, only shown). The registry should carry `cluster`'s
/// [`cluster::Loaded::registry_credentials`].
pub async fn run_with<R: crate::registry::Registry>(
    config: &crate::config::Config,
    cluster: Option<&cluster::Loaded>,
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
    let (apps, mut load_problems) = load::from_git(config, &apps_config.from_git, cache).await?;
    let mut apps: Vec<(Application, Origin)> = apps.into_iter().map(|a| (a, Origin::Git)).collect();
    match (cluster, &apps_config.from_cluster) {
        (Some(c), _) => {
            apps.extend(c.apps.iter().cloned().map(|a| (a, Origin::Cluster)));
            load_problems.extend(c.problems.iter().cloned());
        }
        (None, Some(_)) => load_problems
            .push("applications.fromCluster is set but no cluster was read".to_string()),
        (None, None) => {}
    }
    let mut resolved = resolve(apps, &config.repositories, &load::remote_default_branch);
    // SSH keys from Secrets live in private files for as long as the git writer runs.
    let keys = tempfile::tempdir().map_err(|e| ArgoError::Read {
        path: "a temporary directory for SSH keys".into(),
        message: e.to_string(),
    })?;
    if let Some(c) = cluster {
        load_problems.extend(cluster::git_credentials(c, &mut resolved, keys.path()).await);
    }
    let planner = AppPlanner::new(&resolved, registry, progress);
    let mut repositories = Vec::with_capacity(resolved.repositories.len());
    for repo in &resolved.repositories {
        let repo = match resolved.branch_templates.get(&repo.name) {
            None => repo.clone(),
            Some(template) => match render_branch(&resolved, &planner, cache, repo, template).await
            {
                Ok(repo) => repo,
                Err(e) => {
                    repositories.push(crate::git::RepositoryReport {
                        repository: repo.name.clone(),
                        url: crate::git::auth::redact_url(&repo.url),
                        result: Err(e),
                    });
                    continue;
                }
            },
        };
        repositories.extend(crate::git::write_all(cache, &[repo], &planner, options).await);
    }
    drop(keys);
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
    let mut patch_reports = Vec::new();
    if let Some(c) = cluster {
        let patches = cluster::plan_patches(&resolved, planner.registry()).await;
        let (reports, problems) =
            cluster::send_patches(&c.cluster, &patches.patches, options.dry_run).await;
        for p in patches.patches {
            plan.changes.extend(p.changes);
        }
        plan.holds.extend(patches.holds);
        plan.problems.extend(patches.problems);
        plan.problems.extend(problems);
        plan.up_to_date += patches.up_to_date;
        images.extend(patches.images);
        app_problems.extend(patches.app_problems);
        patch_reports = reports;
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
    let mut applications = report::collect(&resolved, &images, &app_problems);
    for (i, patch) in patch_reports {
        let id = resolved.apps[i].app.id();
        if let Some(r) = applications.iter_mut().find(|r| r.application == id) {
            r.patch = Some(patch);
        }
    }
    Ok(Run {
        plan,
        repositories,
        applications,
    })
}
