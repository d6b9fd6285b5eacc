//! Plans the Applications of one repository on a checkout, for the git writer: every app's
//! images in one pass, so apps sharing a repository land in one commit (or one per group) and
//! apps sharing an image share one tag listing.
//!
//! In-place writes (Directory manifests, a kustomization or values file named by
//! `write-back-target`) go through the ordinary planner ([`crate::plan::plan`]), every app's
//! images in as few walks of the checkout as possible: one, unless two policies could claim the
//! same field (see [`super::in_place`]); each image's outcome is still reported on its own.
//! `.argocd-source-<app>.yaml` files ([`super::override_file`]) are Image
//! Updater's format, written whole as Image Updater does, with the same tag selection.
//! Writes nothing: the repository's tree is read (a commit, through [`crate::files::Files`]),
//! the result is returned.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::files::{Files, FilesError};
use crate::git::{self, ChangeGroup, RepositoryConfig};
use crate::plan::{self, Change, Plan, Progress};
use crate::policy::ImagePolicy;
use crate::registry::Registry;

use super::ArgoError;
use super::in_place::{
    InPlace, batches, current_in_source, describe_files, detect, manifest_files, targets,
};
use super::resolve::{self, ManagedApp, Resolved, SourceKind, Unit, UnitWrite};

pub use super::outcome::{Decided, ImageOutcome, ImageStatus, decide};
use super::outcome::{OverridePlace, OverrideTarget, decide_app_overrides};
pub use super::override_file::{
    HelmOverrides, KustomizeOverrides, OverrideFile, OverrideParameter,
};

/// The result of planning one repository's apps on one checkout.
#[derive(Debug, Clone, Default)]
pub struct RepositoryPlan {
    /// What the `.argocd-source` files need: their changes, holds and problems.
    pub plan: Plan,
    /// The in-place walks' plans, one per walk, not yet joined: the engine joins them with
    /// every other source's plan of the same checkout, and holds what they disagree on.
    pub in_place: Vec<Plan>,
    pub images: Vec<ImageOutcome>,
    /// App-level problems found on the checkout, by app index.
    pub app_problems: Vec<(usize, String)>,
    /// `.argocd-source` files, written whole: one group per app.
    pub override_groups: Vec<ChangeGroup>,
}

// === the planner ===

/// Plans the apps of a repository on a checkout.
pub struct AppPlanner<'a, R> {
    resolved: &'a Resolved,
    registry: &'a R,
    progress: &'a dyn Progress,
}

impl<'a, R: Registry> AppPlanner<'a, R> {
    /// `registry` should share its tag listings across plans (the engine's per-cycle registry),
    /// so that apps sharing an image share one listing.
    pub fn new(resolved: &'a Resolved, registry: &'a R, progress: &'a dyn Progress) -> Self {
        AppPlanner {
            resolved,
            registry,
            progress,
        }
    }

    /// Whether any app writes to `repository`.
    pub fn writes_to(&self, repository: &str) -> bool {
        self.resolved.apps_in(repository).next().is_some()
    }

    /// Plans every app unit in `repository` on its tree `files`.
    pub async fn plan_files(
        &self,
        repository: &RepositoryConfig,
        files: &dyn Files,
    ) -> Result<RepositoryPlan, ArgoError> {
        let name = repository.name.as_str();
        let mut out = RepositoryPlan::default();
        // Sized once: one entry per image of every app on the repository, thousands of them.
        let images: usize = self
            .resolved
            .apps_in(name)
            .map(|(_, app)| app.annotations.images.len() * app.units.len())
            .sum();
        let mut jobs = Vec::with_capacity(images);
        out.images.reserve_exact(images);
        for (a, app) in self.resolved.apps_in(name) {
            for unit in app.units.iter().filter(|u| u.repository == name) {
                self.plan_unit(a, app, unit, repository, files, &mut out, &mut jobs)
                    .await?;
            }
        }
        // Each job's policy moves into its walk: thousands of Applications' policies are not
        // held twice.
        let walks = batches(&jobs);
        let mut jobs: Vec<Option<InPlace>> = jobs.into_iter().map(Some).collect();
        for walk in walks {
            let batch: Vec<InPlace> = walk.iter().filter_map(|&k| jobs[k].take()).collect();
            let walked = self.plan_batch(batch, repository, files, &mut out).await?;
            out.in_place.push(walked);
        }
        Ok(out)
    }

    /// Plans a batch of in-place images in one walk of the tree and fills in their outcomes.
    /// Each image's outcome is looked up by its policy's name (one per batch), so a batch of
    /// thousands of Applications costs lookups, not a search of the plan per image.
    async fn plan_batch(
        &self,
        batch: Vec<InPlace>,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
    ) -> Result<Plan, ArgoError> {
        let (policies, batch): (Vec<ImagePolicy>, Vec<(Vec<String>, usize)>) = batch
            .into_iter()
            .map(|j| (j.policy, (j.files, j.outcome)))
            .unzip();
        let (p, matched) = plan::plan_files(
            files,
            &repository.name,
            &policies,
            self.registry,
            self.progress,
        )
        .await?;
        let mut changes: HashMap<&str, &Change> = HashMap::new();
        for c in &p.changes {
            changes.entry(c.policy.as_str()).or_insert(c);
        }
        let mut holds: HashMap<&str, &plan::Hold> = HashMap::new();
        for h in &p.holds {
            holds.entry(h.policy.as_str()).or_insert(h);
        }
        // A problem may name several policies (`a, b`); a file-level one (unreadable, two
        // policies on one field) concerns every image planned on that file.
        let mut by_policy: HashMap<&str, &plan::Problem> = HashMap::new();
        let mut by_file: HashMap<&str, &plan::Problem> = HashMap::new();
        for pr in &p.problems {
            match (&pr.policy, &pr.file) {
                (Some(names), _) => {
                    for name in names.split(", ") {
                        by_policy.entry(name).or_insert(pr);
                    }
                }
                (None, Some(file)) => {
                    by_file.entry(file.as_str()).or_insert(pr);
                }
                (None, None) => {}
            }
        }
        for (k, (job_files, at)) in batch.iter().enumerate() {
            let policy = &policies[k];
            let name = policy.name.as_str();
            let outcome = &mut out.images[*at];
            let problem = by_policy.get(name).copied().or_else(|| {
                job_files
                    .iter()
                    .find_map(|f| by_file.get(f.as_str()).copied())
            });
            if let Some(c) = changes.get(name) {
                outcome.status = ImageStatus::Update;
                outcome.file = Some(c.file.clone());
                outcome.from = Some(c.from.clone());
                outcome.to = Some(c.to.clone());
            } else if let Some(h) = holds.get(name) {
                outcome.status = ImageStatus::Held;
                outcome.file = Some(h.file.clone());
                outcome.from = Some(h.current.clone());
                outcome.reason = Some(h.reason.clone());
            } else if let Some(pr) = problem {
                outcome.status = ImageStatus::Problem;
                outcome.file = pr.file.clone();
                outcome.reason = Some(pr.message.clone());
            } else if matched[k] {
                outcome.status = ImageStatus::UpToDate;
            } else {
                outcome.status = ImageStatus::NotFound;
                outcome.reason = Some(format!(
                    "no reference to {} in {}",
                    policy.image,
                    describe_files(job_files)
                ));
            }
        }
        Ok(p)
    }

    #[allow(clippy::too_many_arguments)]
    async fn plan_unit(
        &self,
        a: usize,
        app: &ManagedApp,
        unit: &Unit,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
        jobs: &mut Vec<InPlace>,
    ) -> Result<(), ArgoError> {
        let kind = unit.kind.unwrap_or_else(|| detect(files, &unit.root));
        let source = app.app.sources()[unit.source];
        let problem = |out: &mut RepositoryPlan, message: String| {
            out.app_problems
                .push((a, format!("source {}: {message}", unit.source + 1)));
        };
        let (files, helm_target) = match (&unit.write, kind) {
            (UnitWrite::Manifests { .. }, _)
            | (UnitWrite::OverrideFile { .. }, SourceKind::Directory) => {
                let d = source.directory.clone().unwrap_or_default();
                match manifest_files(
                    files,
                    &unit.root,
                    d.recurse,
                    d.include.as_deref(),
                    d.exclude.as_deref(),
                ) {
                    Ok(files) => (files, false),
                    Err(e) => {
                        problem(out, e.to_string());
                        return Ok(());
                    }
                }
            }
            (UnitWrite::Kustomization { dir }, _) => {
                match ["kustomization.yaml", "kustomization.yml", "Kustomization"]
                    .iter()
                    .map(|f| resolve::join(dir, f))
                    .find(|f| files.is_file(Path::new(f)))
                {
                    Some(f) => (vec![f], false),
                    None => {
                        problem(
                            out,
                            format!(
                                "write-back-target: no kustomization in {}",
                                resolve::display(dir)
                            ),
                        );
                        return Ok(());
                    }
                }
            }
            (UnitWrite::HelmValues { file }, _) => {
                if !files.is_file(Path::new(file)) {
                    problem(
                        out,
                        format!("write-back-target: values file {file} does not exist"),
                    );
                    return Ok(());
                }
                (vec![file.clone()], true)
            }
            (UnitWrite::OverrideFile { file }, kind) => {
                if !app.git_write {
                    problem(out, resolve::argocd_from_git(&app.annotations));
                    return Ok(());
                }
                return self
                    .plan_override(a, app, unit, kind, file, repository, files, out)
                    .await;
            }
        };
        for (i, image) in app.annotations.images.iter().enumerate() {
            let Some(policy) = &app.policies[i] else {
                continue;
            };
            let mut policy = policy.clone();
            policy.targets = targets(&files, &repository.name, image, helm_target);
            // The outcome keeps its place in the report; its batch fills it in.
            out.images.push(ImageOutcome {
                app: a,
                alias: image.alias.clone(),
                image: policy.image.to_string(),
                source: unit.source + 1,
                kind,
                repository: repository.name.clone(),
                file: None,
                from: None,
                to: None,
                // Its batch fills it in.
                status: ImageStatus::NotFound,
                reason: None,
            });
            jobs.push(InPlace {
                policy,
                files: files.clone(),
                helm: helm_target,
                outcome: out.images.len() - 1,
            });
        }
        Ok(())
    }

    /// `.argocd-source-<app>.yaml`: read what it holds, decide each image, write it whole.
    #[allow(clippy::too_many_arguments)]
    async fn plan_override(
        &self,
        a: usize,
        app: &ManagedApp,
        unit: &Unit,
        kind: SourceKind,
        file: &str,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
    ) -> Result<(), ArgoError> {
        let original = match files.read(Path::new(file)).map(String::from_utf8) {
            Ok(Ok(t)) => Some(t),
            Err(FilesError::NotFound) => None,
            Ok(Err(_)) => {
                out.app_problems
                    .push((a, format!("cannot read {file}: not UTF-8 text")));
                return Ok(());
            }
            Err(e) => {
                out.app_problems
                    .push((a, format!("cannot read {file}: {e}")));
                return Ok(());
            }
        };
        let mut overrides = match original.as_deref().map(OverrideFile::parse).transpose() {
            Ok(o) => o.unwrap_or_default(),
            Err(e) => {
                out.app_problems.push((a, format!("{file}: {e}")));
                return Ok(());
            }
        };
        let field = format!("argocd-source {}", kind.name());
        let target = OverrideTarget {
            place: OverridePlace {
                repository: Some(&repository.name),
                file,
                field: &field,
            },
            source: unit.source + 1,
            repository: repository.name.clone(),
            file: file.to_string(),
        };
        let decided = decide_app_overrides(
            a,
            app,
            &mut overrides,
            kind,
            &target,
            |image, policy| current_in_source(files, &unit.root, image, policy),
            |policy| {
                format!(
                    "no reference to {} under {}; set force-update to write it anyway",
                    policy.image,
                    resolve::display(&unit.root)
                )
            },
            self.registry,
        )
        .await;
        out.plan.holds.extend(decided.holds);
        out.plan.problems.extend(decided.problems);
        out.plan.up_to_date += decided.up_to_date;
        out.images.extend(decided.images);
        let mut changes = decided.changes;
        if changes.is_empty() {
            return Ok(());
        }
        let updated = overrides.render();
        for c in &mut changes {
            c.line = line_of(&updated, &c.to);
        }
        out.override_groups.push(ChangeGroup {
            key: app.app.metadata.name.clone(),
            files: BTreeMap::from([(PathBuf::from(file), updated)]),
            changes: changes.iter().map(git_change).collect(),
        });
        out.plan.changes.extend(changes);
        Ok(())
    }
}

pub fn git_change(c: &Change) -> git::Change {
    git::Change {
        policy: c.policy.clone(),
        image: c.image.clone(),
        file: c.file.clone().into(),
        line: c.line,
        from: c.from.clone(),
        to: c.to.clone(),
        strategy: c.strategy.to_string(),
        source: c.source.as_ref().map(|s| s.source.clone()),
        revision_from: c.source.as_ref().map(|s| s.revision_from.clone()),
        revision_to: c.source.as_ref().map(|s| s.revision_to.clone()),
        compare_url: c.source.as_ref().map(|s| s.compare_url.clone()),
    }
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map_or(1, |i| i + 1)
}
