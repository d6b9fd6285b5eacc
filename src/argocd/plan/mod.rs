//! Plans the Applications of one repository on a checkout, for the git writer: every app's
//! images in one pass, so apps sharing a repository land in one commit (or one per group) and
//! apps sharing an image share one tag listing.
//!
//! In-place writes (Directory manifests, a kustomization or values file named by
//! `write-back-target`) go through the ordinary planner ([`crate::plan::plan`]), every app's
//! images in as few walks of the checkout as possible: one, unless two policies could claim the
//! same field (see [`in_place`]); each image's outcome is still reported on its own.
//! `.argocd-source-<app>.yaml` files ([`override_file`]) are Image
//! Updater's format, written whole as Image Updater does, with the same tag selection.
//!
//! Where Applications bring Image Updater's configuration, its rules apply: an image a
//! kustomization's `images:` does not name gets an entry (tagpilot's own policies only write
//! keys an entry has), and a Helm value path that finds nothing is a problem naming the file,
//! the path and why ([`crate::manifest::explain_helm_path`]), never a silent "not found".
//! Writes nothing: the repository's tree is read (a commit, through [`crate::files::Files`]),
//! the result is returned.
//!
//! Beside it, the same job for the live Applications of `write-back-method: argocd`: their
//! patches decided against the overrides they have now ([`patch`]), with the one per-image
//! decision both kinds of override make ([`outcome`]). Reads the registry, never the cluster
//! (`tests/it/layers.rs`); the patches are sent by [`crate::argocd::write`].

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::change::ChangeGroup;
use crate::files::{Files, FilesError};
use crate::git::RepositoryConfig;
use crate::holds::Holds;
use crate::plan::{self, Change, Plan, Progress};
use crate::policy::ImagePolicy;
use crate::registry::Registry;

use super::ArgoError;
use super::resolve::{self, ManagedApp, Resolved, SourceKind, Unit, UnitWrite};
use in_place::{
    AddEntry, InPlace, batches, current_in_source, describe_files, detect, manifest_files, targets,
};

pub use outcome::{Decided, ImageOutcome, ImageReason, ImageStatus, decide};
use outcome::{OverridePlace, OverrideTarget, Overrides, decide_app_overrides};
pub use override_file::{HelmOverrides, KustomizeOverrides, OverrideFile, OverrideParameter};

mod added;
pub mod in_place;
pub mod outcome;
pub mod override_file;
pub mod patch;

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
    /// The held tags its in-place walks honour ([`crate::holds`]).
    holds: Option<&'a Holds>,
}

impl<'a, R: Registry> AppPlanner<'a, R> {
    /// Honours `holds`: a held tag is not proposed again for its Application's image and field.
    pub fn with_holds(mut self, holds: &'a Holds) -> Self {
        self.holds = Some(holds);
        self
    }

    /// `registry` should share its tag listings across plans (the engine's per-cycle registry),
    /// so that apps sharing an image share one listing.
    pub fn new(resolved: &'a Resolved, registry: &'a R, progress: &'a dyn Progress) -> Self {
        AppPlanner {
            resolved,
            registry,
            progress,
            holds: None,
        }
    }

    /// This planner honouring `holds` instead of its own.
    pub fn holding<'b>(&self, holds: &'b Holds) -> AppPlanner<'b, R>
    where
        'a: 'b,
    {
        AppPlanner {
            resolved: self.resolved,
            registry: self.registry,
            progress: self.progress,
            holds: Some(holds),
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
                let at = UnitAt {
                    a,
                    app,
                    unit,
                    repository,
                    files,
                };
                self.plan_unit(&at, &mut out, &mut jobs).await?;
            }
        }
        // Each job (and its policy) moves into its walk's batch, in plan order, and the list
        // they were gathered in is gone before the first walk: thousands of Applications'
        // policies are not held twice, nor their emptied places through every walk.
        let walks = batches(&jobs);
        let mut walk_of = vec![0; jobs.len()];
        for (w, walk) in walks.iter().enumerate() {
            for &k in walk {
                walk_of[k] = w;
            }
        }
        let mut batched: Vec<Vec<InPlace>> =
            walks.iter().map(|w| Vec::with_capacity(w.len())).collect();
        for (k, job) in jobs.into_iter().enumerate() {
            batched[walk_of[k]].push(job);
        }
        drop(walk_of);
        let mut missing = Vec::new();
        for batch in batched {
            let walked = self
                .plan_batch(batch, repository, files, &mut out, &mut missing)
                .await?;
            out.in_place.push(walked);
        }
        self.plan_added_entries(missing, repository, files, &mut out)
            .await;
        Ok(out)
    }

    /// Plans a batch of in-place images in one walk of the tree and fills in their outcomes.
    /// Each image's outcome is looked up by its policy's name (one per batch), so a batch of
    /// thousands of Applications costs lookups, not a search of the plan per image.
    /// Images a kustomization does not name, and that may get an entry, go to `missing`.
    async fn plan_batch(
        &self,
        batch: Vec<InPlace>,
        repository: &RepositoryConfig,
        files: &dyn Files,
        out: &mut RepositoryPlan,
        missing: &mut Vec<Missing>,
    ) -> Result<Plan, ArgoError> {
        type Job = (Vec<String>, usize, Option<AddEntry>);
        let (policies, batch): (Vec<ImagePolicy>, Vec<Job>) = batch
            .into_iter()
            .map(|j| (j.policy, (j.files, j.outcome, j.add_entry)))
            .unzip();
        let none = Holds::none();
        let (p, matched) = plan::plan_files_held(
            files,
            &repository.name,
            &policies,
            self.registry,
            self.progress,
            self.holds.unwrap_or(&none),
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
        for (k, (job_files, at, add_entry)) in batch.iter().enumerate() {
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
                outcome.reason = Some(ImageReason::Held(h.reason.clone()));
            } else if let Some(pr) = problem {
                outcome.status = ImageStatus::Problem;
                outcome.file = pr.file.clone();
                outcome.reason = Some(ImageReason::Problem(pr.reason.clone()));
            } else if matched[k] {
                outcome.status = ImageStatus::UpToDate;
            } else if let (Some(entry), [file]) = (add_entry, job_files.as_slice()) {
                missing.push(Missing {
                    policy: policy.clone(),
                    entry: entry.clone(),
                    file: file.clone(),
                    outcome: *at,
                });
            } else if let Some((file, reason)) = helm_reason(files, job_files, policy) {
                // A Helm path that resolves to nothing is a problem naming the file, the path
                // and why, never a silent "not found".
                outcome.status = ImageStatus::Problem;
                outcome.file = Some(file.clone());
                let reason = plan::ProblemReason::HelmValue(reason);
                outcome.reason = Some(ImageReason::Problem(reason.clone()));
                out.plan.problems.push(plan::Problem {
                    repository: Some(repository.name.clone()),
                    policy: Some(name.to_string()),
                    image: Some(policy.image.to_string()),
                    file: Some(file),
                    line: None,
                    reason,
                });
            } else {
                outcome.status = ImageStatus::NotFound;
                outcome.reason = Some(ImageReason::NotFound(format!(
                    "no reference to {} in {}",
                    policy.image,
                    describe_files(job_files)
                )));
            }
        }
        Ok(p)
    }

    async fn plan_unit(
        &self,
        at: &UnitAt<'_>,
        out: &mut RepositoryPlan,
        jobs: &mut Vec<InPlace>,
    ) -> Result<(), ArgoError> {
        let UnitAt {
            a,
            app,
            unit,
            repository,
            files,
        } = *at;
        let kind = unit.kind.unwrap_or_else(|| detect(files, &unit.root));
        let source = app.app.sources()[unit.source];
        let problem = |out: &mut RepositoryPlan, message: String| {
            out.app_problems
                .push((a, format!("source {}: {message}", unit.source + 1)));
        };
        let mut add_entry = None;
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
                        problem(out, crate::error_chain::chain(&e));
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
                    Some(f) => {
                        add_entry = Some(dir.clone());
                        (vec![f], false)
                    }
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
                return self.plan_override(at, kind, file, out).await;
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
                add_entry: add_entry.as_ref().map(|dir| AddEntry {
                    app: a,
                    image: i,
                    root: unit.root.clone(),
                    dir: dir.clone(),
                }),
            });
        }
        Ok(())
    }

    /// `.argocd-source-<app>.yaml`: read what it holds, decide each image, write it whole.
    async fn plan_override(
        &self,
        at: &UnitAt<'_>,
        kind: SourceKind,
        file: &str,
        out: &mut RepositoryPlan,
    ) -> Result<(), ArgoError> {
        let UnitAt {
            a,
            app,
            unit,
            repository,
            files,
        } = *at;
        let original = match files.read(Path::new(file)).map(String::from_utf8) {
            Ok(Ok(t)) => Some(t),
            Err(FilesError::NotFound) => None,
            Ok(Err(_)) => {
                out.app_problems
                    .push((a, format!("cannot read {file}: not UTF-8 text")));
                return Ok(());
            }
            Err(e) => {
                out.app_problems.push((
                    a,
                    format!("cannot read {file}: {}", crate::error_chain::chain(&e)),
                ));
                return Ok(());
            }
        };
        let mut overrides = match original.as_deref().map(OverrideFile::parse).transpose() {
            Ok(o) => o.unwrap_or_default(),
            Err(e) => {
                out.app_problems
                    .push((a, format!("{file}: {}", crate::error_chain::chain(&e))));
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
        let mut deciding = Overrides {
            file: &mut overrides,
            kind,
            registry: self.registry,
            holds: self.holds,
            skipped: Vec::new(),
        };
        let decided = decide_app_overrides(
            &mut deciding,
            a,
            app,
            &target,
            |image, policy| current_in_source(files, &unit.root, image, policy),
            |policy| {
                format!(
                    "no reference to {} under {}; set force-update to write it anyway",
                    policy.image,
                    resolve::display(&unit.root)
                )
            },
        )
        .await;
        out.plan.holds.extend(decided.holds);
        out.plan.skipped_tags.extend(decided.skipped_tags);
        out.plan.problems.extend(decided.problems);
        out.plan.up_to_date += decided.up_to_date;
        out.images.extend(decided.images);
        let mut changes = decided.changes;
        if changes.is_empty() {
            return Ok(());
        }
        let updated = overrides.render(original.as_deref());
        for c in &mut changes {
            c.line = line_of(&updated, &c.to);
        }
        out.override_groups.push(ChangeGroup {
            applications: Vec::new(),
            key: app.app.metadata.name.clone(),
            files: BTreeMap::from([(PathBuf::from(file), updated)]),
            changes: changes.clone(),
        });
        out.plan.changes.extend(changes);
        Ok(())
    }
}

/// Why an image's Helm value paths find nothing in its values file: the first path that names
/// no value ([`crate::manifest::explain_helm_path`]), or a name path holding another image (two
/// aliases sharing one name key: Image Updater would write each image's name there in turn).
fn helm_reason(
    files: &dyn Files,
    job_files: &[String],
    policy: &ImagePolicy,
) -> Option<(String, String)> {
    let paths = policy.targets.iter().find_map(|t| t.helm.as_ref())?;
    let [file] = job_files else { return None };
    let text = String::from_utf8(files.read(Path::new(file)).ok()?).ok()?;
    let named: Vec<&String> = match &paths.image {
        Some(spec) => vec![spec],
        None => [&paths.repository, &paths.tag]
            .into_iter()
            .flatten()
            .collect(),
    };
    for path in &named {
        if let Some(why) = crate::manifest::explain_helm_path(&text, path) {
            return Some((
                file.clone(),
                format!("Helm value `{path}` in {file}: {why}"),
            ));
        }
    }
    let name_path = paths.image.as_ref().or(paths.repository.as_ref())?;
    // The image the chart composes: a `registry` beside the name key is part of it.
    let held = match &paths.image {
        Some(_) => crate::manifest::helm_value(&text, name_path)?,
        None => crate::manifest::helm_image_name(&text, name_path)?,
    };
    let other = crate::image::ImageRef::parse(&held).ok()?.repository;
    (other != policy.image).then(|| {
        (
            file.clone(),
            format!(
                "Helm value `{name_path}` in {file} holds {held}, not {}: another image's name \
                 key (Image Updater would write each image's name there in turn), so tagpilot \
                 holds; give each image its own name key",
                policy.image
            ),
        )
    })
}

/// One unit of one app being planned on a checkout: what its phases share.
#[derive(Clone, Copy)]
struct UnitAt<'a> {
    /// Index into [`Resolved::apps`].
    a: usize,
    app: &'a ManagedApp,
    unit: &'a Unit,
    repository: &'a RepositoryConfig,
    files: &'a dyn Files,
}

/// An image a kustomization does not name, found by a walk.
pub(crate) struct Missing {
    policy: ImagePolicy,
    entry: AddEntry,
    /// The kustomization.
    file: String,
    /// Index into [`RepositoryPlan::images`].
    outcome: usize,
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map_or(1, |i| i + 1)
}
