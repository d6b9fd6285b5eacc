//! One cycle of tagpilot: sources → targets → plan → write-back, each target planned once and
//! written once, and one report.
//!
//! ```text
//! sources                 targets                         plan (once)           write-back (once)
//! policy files      ─┐    local directory               ─┐                     ─ files in place
//! Applications (git) ├─▶  repository + branch            ├─▶ edits, groups,  ──▶ ─ push / pull request
//! Applications (k8s) ┘    Application (argocd method)   ─┘   holds, problems     ─ Application patch
//! ```
//!
//! 1. **Sources**: the policies (loaded by the caller) and the Applications, read and resolved
//!    here ([`applications`]), with the held tags of the state store ([`holds`]).
//! 2. **Targets**: the local directory, each repository and branch whatever names it, each
//!    `write-back-method: argocd` Application.
//! 3. **Plan**: [`TargetPlanner`] plans every source of a repository on one tree, gathering
//!    what the planner needs besides the registry (a person's rollbacks, promotions' upstreams,
//!    images' provenance, last proposals), and decides the groups per `write.group`, once; the
//!    planner proper ([`crate::plan`]) decides tags and edits.
//! 4. **Write-back**: [`crate::writeback`] writes what was planned, as planned, and says what
//!    became of it ([`Cycle::repositories`], beside [`Cycle::plan`]).
//!
//! `tagpilot plan` and `tagpilot apply` are [`run`] with and without [`Options::dry_run`], and
//! a long-running process calls the same function every cycle: what it keeps between cycles
//! (the registry client and its caches, the clone cache, the cancellation token) comes in as
//! [`Context`], never as globals. Every step returns what it found; nothing is handed back
//! through shared state. The engine selects no tag and edits no YAML itself. It decides what
//! belongs to one target and, there, what goes into one commit or pull request; and, while
//! gathering promotions' upstreams ([`promotions`]), that an upstream it cannot read makes the
//! promoting policy wait.

mod applications;
mod holds;
mod image_sources;
pub mod promotions;
mod review;
mod rollbacks;
pub mod shared;
pub mod target;
mod windows;

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use futures_util::stream::{self, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::argocd::plan::AppPlanner;
use crate::argocd::read::cluster::Loaded;
use crate::argocd::resolve::Resolved;
use crate::argocd::{self, ArgoError};
use crate::config::Config;
use crate::git::{RepoCache, RepositoryConfig};
use crate::holds::Holds;
use crate::image::Repository;
use crate::manifest::ManifestError;
use crate::plan::{
    self, Plan, PlanError, Problem, ProblemReason, Progress, RepositoryOutcome, Scope,
};
use crate::policy::{ImagePolicy, PolicyError};
use crate::registry::Registry;
use crate::report::applications::ApplicationReport;
use crate::state::State;
use crate::writeback;

pub use applications::unknown_annotations;
use applications::{Applications, collect_applications};
pub use shared::Shared;

pub use target::{SourceNames, TargetPlan, TargetPlanner};

/// Why a cycle could not run at all. Failures of one target are not errors: they are in the
/// report, and the other targets still run.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("splitting the plan into commits")]
    Split(#[from] ManifestError),
    #[error(transparent)]
    Applications(#[from] ArgoError),
    #[error("no cache directory for clones of configured repositories: pass --cache-dir")]
    NoCacheDir,
    /// A change window that cannot be read: nothing is written rather than a guess.
    #[error(transparent)]
    Windows(#[from] crate::windows::WindowError),
    #[error("a temporary directory for SSH keys")]
    KeyDir(#[source] std::io::Error),
    /// A `git-branch` template rendered a name git refuses; nothing is pushed.
    #[error(transparent)]
    BranchName(#[from] crate::argocd::branch::BranchNameError),
}

impl EngineError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            EngineError::Plan(_) => "plan",
            EngineError::Split(_) => "split",
            EngineError::Applications(e) => e.metric_label(),
            EngineError::NoCacheDir => "no_cache_dir",
            EngineError::KeyDir(_) => "key_dir",
            EngineError::BranchName(_) => "branch_name",
            EngineError::Windows(_) => "windows",
        }
    }
}

/// What a cycle reads: the configuration and the policies, as loaded and checked by the caller.
pub struct Input<'a> {
    pub config: &'a Config,
    pub policies: &'a [ImagePolicy],
    /// Policy files that did not load: reported, and never read as manifests. The valid
    /// policies are still planned.
    pub broken_policies: &'a [PolicyError],
    /// The local directory of manifests, written in place (`None`: no local target).
    pub local: Option<PathBuf>,
    /// Applications and credentials read from the cluster this cycle (`applications.fromCluster`).
    pub cluster: Option<&'a Loaded>,
}

/// What a cycle uses and a long-running process keeps from one cycle to the next.
pub struct Context<'a, R> {
    pub registry: &'a R,
    /// The clone cache; needed only when a target is a repository.
    pub cache: Option<&'a RepoCache>,
    pub progress: &'a dyn Progress,
    /// Once cancelled, no new target is started; the write in flight finishes, so no group is
    /// left half-pushed.
    pub cancel: CancellationToken,
    /// The `--state-dir` store, where the last proposal per group is kept so proposals do not
    /// move backwards ([`steady`]); `None` for one-shot runs.
    pub state: Option<&'a State>,
    /// The time the cycle reads: promotions are decided, steady proposals, holds and rollbacks
    /// dated, and `ImageUpdater` statuses stamped at it. The service hands its own; tests move
    /// a manual one instead of waiting for a soak time to pass.
    pub clock: &'a dyn crate::clock::Clock,
    /// The service's emergency freeze (`tagpilot freeze`), read as each target is planned;
    /// `None` for one-shot runs.
    pub freeze: Option<&'a crate::windows::FreezeSwitch>,
}

/// How a cycle runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Options<'a> {
    /// Plan everything, write nothing: `tagpilot plan`.
    pub dry_run: bool,
    /// Only the policies, and the Applications, whose image repository is one of these: the
    /// re-check after a push notification. A target none of them names is skipped entirely
    /// (not even fetched). An Application is planned whole when one of its images is in the
    /// set, since its `.argocd-source` file is written whole. `None`: everything.
    pub only_images: Option<&'a BTreeSet<Repository>>,
    /// Keep each repository file and Application patch before and after ([`Plan::diffs`]), for
    /// `tagpilot plan --diff`. Off, the cycle holds no second copy of the texts it writes.
    pub diff: bool,
    /// Render the Applications each change deploys, before and after, into the diffs too.
    pub rendered: bool,
    /// The tools to render with; `None`: `helm` and `kustomize` (or `kubectl`) found on `PATH`
    /// the first time a target asks. Tests pass theirs rather than change the process's `PATH`.
    pub tools: Option<&'a crate::render::Tools>,
}

/// Everything one cycle found and did.
#[derive(Debug, Default)]
pub struct Cycle {
    /// Every target's changes, holds and problems: the plan.
    pub plan: Plan,
    /// What became of each repository target: its commits, its pull requests, or why it
    /// failed (the write-back's outcome, kept beside the plan rather than in it).
    pub repositories: Vec<RepositoryOutcome>,
    /// The local directory's new file texts (written unless dry-running).
    pub local_files: Vec<plan::FileUpdate>,
    /// Files written in the local directory.
    pub written: usize,
    /// The Applications section, when `applications:` is configured.
    pub applications: Option<Vec<ApplicationReport>>,
    /// A target failed (a repository could not be written, a patch was refused).
    pub failed: bool,
    /// The cycle stopped early because it was cancelled.
    pub cancelled: bool,
}

/// Runs one cycle: every source planned once per target and written once (unless
/// `options.dry_run`).
#[tracing::instrument(skip_all, fields(dry_run = options.dry_run))]
pub async fn run<R: Registry>(
    input: &Input<'_>,
    ctx: &Context<'_, R>,
    options: Options<'_>,
) -> Result<Cycle, EngineError> {
    // Boxed: a cycle (Applications, git, forge, re-plans) is a deep chain of futures; inlined
    // into every caller's future it overflows rustc's query depth limit where the binary's
    // `block_on` lays it out. One allocation per cycle costs nothing.
    Box::pin(run_cycle(input, ctx, options)).await
}

async fn run_cycle<R: Registry>(
    input: &Input<'_>,
    ctx: &Context<'_, R>,
    options: Options<'_>,
) -> Result<Cycle, EngineError> {
    let mut policies: Cow<'_, [ImagePolicy]> = match options.only_images {
        Some(images) => input
            .policies
            .iter()
            .filter(|p| images.iter().any(|i| p.follows(i)))
            .cloned()
            .collect(),
        None => Cow::Borrowed(input.policies),
    };
    if let Some(labels) = &input.config.version_labels {
        ImagePolicy::default_version_labels(policies.to_mut(), Some(labels));
    }
    // One tag listing per repository for the whole cycle, whichever targets need it.
    let registry = Shared::new(ctx.registry);
    let mut cycle = Cycle::default();
    for e in input.broken_policies {
        let why = crate::error_chain::chain(e);
        cycle
            .plan
            .problems
            .push(Problem::new(ProblemReason::BrokenPolicy(why)));
    }

    // 1. Sources: policy files are the caller's; Applications are read here.
    let apps = match &input.config.applications {
        Some(_) => Some(collect_applications(input, ctx, options.only_images).await?),
        None => None,
    };
    let resolved = apps.as_ref().map(|a| &a.resolved);
    let holds = holds::read(ctx.state, resolved, options.dry_run, ctx.clock.wall());
    let windows = crate::windows::Windows::compile(&input.config.windows)?;
    let step = Step {
        input,
        ctx,
        options,
        policies: &policies,
        registry: &registry,
        holds: &holds,
        windows: &windows,
    };

    // 2. The local directory: a target of its own, written in place.
    if let Some(root) = &input.local {
        step.local(root, &mut cycle).await?;
    }

    // 3. Repository targets: each planned once, with every source that names it.
    let mut found = AppFindings::default();
    step.repositories(resolved, &mut cycle, &mut found).await?;

    // 4. Application targets (`write-back-method: argocd`), and the Applications section.
    if let Some(apps) = &apps {
        step.applications(apps, &mut cycle, &mut found).await;
        cycle.applications = Some(apps.report(
            &mut cycle.plan,
            &found.images,
            &found.app_problems,
            found.patch_reports,
        ));
    }
    holds::ended(&mut cycle.plan);
    writeback::records::release_ended(ctx.state, &cycle.plan.ended_holds, options.dry_run);
    plan::Progress::done(ctx.progress);
    Ok(cycle)
}

/// What every step of one cycle reads.
struct Step<'s, 'a, R> {
    input: &'s Input<'a>,
    ctx: &'s Context<'a, R>,
    options: Options<'a>,
    /// The policies this cycle plans (all, or those of `options.only_images`).
    policies: &'s [ImagePolicy],
    registry: &'s Shared<'a, R>,
    /// The held tags the planners honour ([`holds::read`]).
    holds: &'s Holds,
    /// `windows:`, read: the repository targets' groups they keep out are held.
    windows: &'s crate::windows::Windows,
}

/// What the targets found of the Applications, for their section of the report and their
/// `ImageUpdater` status.
#[derive(Default)]
struct AppFindings {
    images: Vec<argocd::plan::ImageOutcome>,
    /// By index into [`Resolved::apps`].
    app_problems: Vec<(usize, String)>,
    patch_reports: Vec<(usize, argocd::write::PatchReport)>,
}

impl<R: Registry> Step<'_, '_, R> {
    /// Plans the local directory and, unless dry-running, writes it in place.
    async fn local(&self, root: &Path, cycle: &mut Cycle) -> Result<(), EngineError> {
        let scope = Scope {
            exclude: own_files(self.input),
            holds: self.holds.clone(),
            ..Scope::local(root)
        };
        let mut local = plan::plan(&scope, self.policies, self.registry, self.ctx.progress).await?;
        cycle.local_files = std::mem::take(&mut local.files);
        if !self.options.dry_run && !cycle.local_files.is_empty() {
            let (written, problem) = writeback::local::write_local(root, &cycle.local_files);
            cycle.written = written;
            local.problems.extend(problem);
        }
        cycle.plan.merge(local);
        Ok(())
    }

    /// Plans and writes every repository target, a few at a time, results in target order.
    async fn repositories(
        &self,
        resolved: Option<&Resolved>,
        cycle: &mut Cycle,
        found: &mut AppFindings,
    ) -> Result<(), EngineError> {
        let (input, ctx, options) = (self.input, self.ctx, self.options);
        let targets =
            repository_targets(input.config, self.policies, options.only_images, resolved);
        if targets.is_empty() {
            return Ok(());
        }
        let sources = SourceNames::new(self.policies, resolved);
        let no_templates = Default::default();
        let promotion_sources = promotions::Sources::of(input, ctx, resolved, options.dry_run);
        let planner = TargetPlanner {
            policies: self.policies,
            apps: resolved
                .map(|r| AppPlanner::new(r, self.registry, ctx.progress).with_holds(self.holds)),
            resolved,
            registry: self.registry,
            progress: ctx.progress,
            branch_templates: resolved.map_or(&no_templates, |r| &r.branch_templates),
            sources: &sources,
            state: ctx.state,
            clock: ctx.clock,
            holds: self.holds,
            promotions: &promotion_sources,
            diff: options.diff || options.rendered,
            tools: options
                .tools
                .cloned()
                .map(std::sync::OnceLock::from)
                .unwrap_or_default(),
            plain_http_registries: input
                .config
                .registries
                .iter()
                .filter(|r| r.insecure)
                .map(|r| r.host.clone())
                .collect(),
            rendered: options.rendered,
            report: options.dry_run,
            gate: windows::Gate {
                windows: self.windows,
                freeze: ctx.freeze,
                now: ctx.clock.wall(),
            },
        };
        let cache = ctx.cache.ok_or(EngineError::NoCacheDir)?;
        // Several repositories at once (`concurrency.repositories`), each still planned before
        // it is written, so a registry that hangs holds up only the targets whose policies need
        // it: a new target starts whenever any one in flight ends (`buffer_unordered`; with
        // `buffered`, one slow target at the head kept every later one from starting), and the
        // results are put back in target order, so the report does not depend on which
        // finishes first. A target not yet started when the token is cancelled never starts.
        let bound = input.config.concurrency.repositories.max(1);
        let planner = &planner;
        let mut written: Vec<_> = stream::iter(targets.iter().enumerate())
            .map(|(index, repository)| async move {
                if ctx.cancel.is_cancelled() {
                    return (index, None);
                }
                let target = writeback::Target {
                    dry_run: options.dry_run,
                    branch_from_plan: planner.branch_templates.contains_key(&repository.name),
                    state: ctx.state,
                };
                let written = writeback::write_repository(cache, repository, planner, target).await;
                (index, Some(written))
            })
            .buffer_unordered(bound)
            .collect()
            .await;
        written.sort_by_key(|(index, _)| *index);
        let written = written.into_iter().map(|(_, written)| written);
        for (repository, written) in targets.iter().zip(written) {
            let Some(writeback::Written {
                outcome,
                plan: planned,
            }) = written
            else {
                cycle.cancelled = true;
                continue;
            };
            cycle.failed |= outcome.status == plan::RepositoryStatus::Failed;
            if let Some(p) = planned {
                cycle.plan.merge(p.plan);
                found.images.extend(p.images);
                found.app_problems.extend(p.app_problems);
            }
            let mut outcome = outcome;
            outcome.sources = planner.sources_of(&repository.name);
            cycle.repositories.push(outcome);
        }
        // A chain reads upstream first, whichever repository each environment is in.
        cycle.plan.promotions.sort_by_key(|p| p.stage);
        Ok(())
    }

    /// Patches the Applications written with `write-back-method: argocd`, then sets each
    /// `ImageUpdater` resource's status once the writes are done.
    async fn applications(&self, apps: &Applications, cycle: &mut Cycle, found: &mut AppFindings) {
        let Some(c) = self.input.cluster else {
            return;
        };
        if cycle.cancelled {
            return;
        }
        let options = self.options;
        // Planned by the sources, sent by the write-back.
        let patches =
            argocd::plan::patch::plan_patches(&apps.resolved, self.registry, self.holds).await;
        let sent = writeback::applications::send_patches(
            c,
            &apps.resolved,
            &patches.patches,
            options.dry_run,
        )
        .await;
        cycle.failed |= !sent.problems.is_empty();
        for p in patches.patches {
            if options.diff {
                cycle
                    .plan
                    .diffs
                    .push(writeback::applications::patch_diff(&p));
            }
            cycle.plan.changes.extend(p.changes);
        }
        cycle.plan.holds.extend(patches.holds);
        cycle.plan.skipped_tags.extend(patches.skipped_tags);
        cycle.plan.problems.extend(patches.problems);
        cycle.plan.problems.extend(sent.problems);
        cycle.plan.up_to_date += patches.up_to_date;
        found.images.extend(patches.images);
        found.app_problems.extend(patches.app_problems);
        found.patch_reports = sent.reports;
        if !options.dry_run {
            let problems = writeback::applications::write_updater_status(
                c,
                &apps.updaters,
                &apps.resolved,
                &found.images,
                &found.app_problems,
                self.ctx.clock,
            )
            .await;
            cycle.failed |= !problems.is_empty();
            cycle.plan.problems.extend(problems);
        }
    }
}

/// The repositories to plan: each configured one that policy files may name, and each one the
/// Applications write to; a repository named by both is one target. Restricted to some images,
/// only the configured repositories their policies name: the others have nothing to re-check.
fn repository_targets(
    config: &Config,
    policies: &[ImagePolicy],
    only_images: Option<&BTreeSet<Repository>>,
    resolved: Option<&Resolved>,
) -> Vec<RepositoryConfig> {
    let mut targets: Vec<RepositoryConfig> = Vec::new();
    // With no policies, configured repositories are written only by the Applications that name
    // them; a pass of their own would only list them twice in the report.
    if !policies.is_empty() {
        let named = |name: &str| {
            policies.iter().any(|p| {
                p.targets
                    .iter()
                    .any(|t| t.repository.as_deref() == Some(name))
            })
        };
        targets.extend(
            config
                .repositories
                .iter()
                .filter(|r| only_images.is_none() || named(&r.name))
                .cloned(),
        );
    }
    for repo in resolved.iter().flat_map(|r| r.repositories.iter()) {
        match targets.iter_mut().find(|t| t.name == repo.name) {
            // The Applications' view carries what they add (credentials from Argo CD's Secrets).
            Some(t) => *t = repo.clone(),
            None => targets.push(repo.clone()),
        }
    }
    targets
}

/// tagpilot's own config and policy files (broken ones too): YAML, but never manifests to
/// rewrite.
fn own_files(input: &Input<'_>) -> Vec<PathBuf> {
    input
        .config
        .path
        .iter()
        .cloned()
        .chain(input.policies.iter().map(|p| p.source.file.clone()))
        .chain(
            input
                .broken_policies
                .iter()
                .filter_map(|e| e.file().map(Path::to_path_buf)),
        )
        .collect()
}

/// The clone cache under `dir`, or the user's cache directory.
pub fn repo_cache(dir: Option<&Path>) -> Option<RepoCache> {
    match dir {
        Some(dir) => Some(RepoCache::new(dir.to_path_buf())),
        None => RepoCache::default_root().map(RepoCache::new),
    }
}
