//! Plans the Applications of one repository on a checkout, for the git writer: every app's
//! images in one pass, so apps sharing a repository land in one commit (or one per group) and
//! apps sharing an image share one tag listing.
//!
//! In-place writes (Directory manifests, a kustomization or values file named by
//! `write-back-target`) go through the ordinary planner ([`crate::plan::plan`]), every app's
//! images in as few walks of the checkout as possible: one, unless two policies could claim the
//! same field (see [`InPlace::fits_with`]); each image's outcome is still reported on its own. `.argocd-source-<app>.yaml` files are Image
//! Updater's format, written whole as Image Updater does, with the same tag selection.
//! Writes nothing: the checkout is read, the result is returned.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::git::{self, ChangeGroup, Replanner, RepositoryConfig};
use crate::image::{ImageRef, Repository};
use crate::manifest::{self, FieldKind};
use crate::plan::{self, Change, FileUpdate, Hold, Inspector, Plan, Problem, Progress, Scope};
use crate::policy::{HelmPaths, ImagePolicy, Target};
use crate::registry::{ImageInfo, Registry, RegistryError};

use super::ArgoError;
use super::annotations::AnnotatedImage;
use super::resolve::{self, ManagedApp, Resolved, SourceKind, Unit, UnitWrite};

// === shared registry ===

/// A registry whose tag listings are shared by every plan made through it: the planner lists
/// once per plan, and tagpilot plans once per image here.
pub struct Shared<'a, R> {
    inner: &'a R,
    tags: Mutex<HashMap<Repository, Listing>>,
}

type Listing = std::sync::Arc<tokio::sync::OnceCell<Result<Vec<String>, RegistryError>>>;

impl<'a, R: Registry> Shared<'a, R> {
    pub fn new(inner: &'a R) -> Self {
        Shared {
            inner,
            tags: Default::default(),
        }
    }
}

impl<R: Registry> Registry for Shared<'_, R> {
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        // The std lock only finds the cell; concurrent callers for one repository wait on it.
        let cell = self
            .tags
            .lock()
            .expect("listing lock")
            .entry(repo.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.inner.list_tags(repo))
            .await
            .clone()
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[crate::image::Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inner.inspect(repo, reference, platforms).await
    }

    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.inner.digest(repo, reference).await
    }
}

// === outcomes ===

/// What happened to one image of one app in one source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ImageOutcome {
    /// Index into [`Resolved::apps`].
    #[serde(skip)]
    pub app: usize,
    pub alias: String,
    pub image: String,
    /// 1-based source number, as the Application lists them.
    pub source: usize,
    pub kind: SourceKind,
    pub repository: String,
    /// Where the change lands (or would), repository-relative.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// `update`, `up to date`, `held`, `not found` or `problem`.
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The result of planning one repository's apps.
#[derive(Debug, Clone, Default)]
pub struct RepositoryPlan {
    pub plan: Plan,
    pub images: Vec<ImageOutcome>,
    /// App-level problems found on the checkout, by app index.
    pub app_problems: Vec<(usize, String)>,
    override_groups: Vec<ChangeGroup>,
}

// === the planner ===

/// Plans the apps of each repository the git writer hands it.
pub struct AppPlanner<'a, R> {
    resolved: &'a Resolved,
    registry: Shared<'a, R>,
    progress: &'a dyn Progress,
    last: Mutex<HashMap<String, RepositoryPlan>>,
    scans: std::sync::atomic::AtomicUsize,
}

impl<'a, R: Registry> AppPlanner<'a, R> {
    pub fn new(resolved: &'a Resolved, registry: &'a R, progress: &'a dyn Progress) -> Self {
        AppPlanner {
            resolved,
            registry: Shared::new(registry),
            progress,
            last: Mutex::new(HashMap::new()),
            scans: Default::default(),
        }
    }

    /// The registry every plan of this planner shares (for `argocd`-method patches).
    pub fn registry(&self) -> &Shared<'a, R> {
        &self.registry
    }

    /// The plan made on the last checkout of `repository`.
    pub fn last_plan(&self, repository: &str) -> Option<RepositoryPlan> {
        self.last
            .lock()
            .expect("planner lock")
            .get(repository)
            .cloned()
    }

    /// Plans every app unit in `repository` on `checkout`.
    pub async fn plan_checkout(
        &self,
        repository: &RepositoryConfig,
        checkout: &Path,
    ) -> Result<RepositoryPlan, ArgoError> {
        let name = repository.name.as_str();
        let mut out = RepositoryPlan::default();
        let mut jobs = Vec::new();
        for (a, app) in self.resolved.apps_in(name) {
            for unit in app.units.iter().filter(|u| u.repository == name) {
                self.plan_unit(a, app, unit, repository, checkout, &mut out, &mut jobs)
                    .await?;
            }
        }
        let mut merged = Merged::default();
        for batch in batches(&jobs) {
            self.plan_batch(&batch, repository, checkout, &mut out, &mut merged)
                .await?;
        }
        out.plan = merged.finish(name, &mut out.plan);
        self.last
            .lock()
            .expect("planner lock")
            .insert(name.to_string(), out.clone());
        Ok(out)
    }

    /// How many times the planner has walked a checkout, over all repositories.
    pub fn scans(&self) -> usize {
        self.scans.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Plans a batch of in-place images in one walk of the checkout and fills in their
    /// outcomes. The batch's images are distinct, so an image's tag listing tells whether its
    /// policy found a reference at all: the planner lists the images of exactly the policies
    /// that matched one.
    async fn plan_batch(
        &self,
        batch: &[&InPlace],
        repository: &RepositoryConfig,
        checkout: &Path,
        out: &mut RepositoryPlan,
        merged: &mut Merged,
    ) -> Result<(), ArgoError> {
        let scope = Scope {
            root: checkout.to_path_buf(),
            repository: Some(repository.name.clone()),
            exclude: vec![],
        };
        let policies: Vec<ImagePolicy> = batch.iter().map(|j| j.policy.clone()).collect();
        let registry = Recording::new(&self.registry);
        self.scans
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = plan::plan(&scope, &policies, &registry, self.progress).await?;
        for job in batch {
            let name = job.policy.name.as_str();
            let outcome = &mut out.images[job.outcome];
            let names = |policy: &str| policy.split(", ").any(|n| n == name);
            if let Some(c) = p.changes.iter().find(|c| c.policy == name) {
                outcome.status = "update".into();
                outcome.file = Some(c.file.clone());
                outcome.from = Some(c.from.clone());
                outcome.to = Some(c.to.clone());
            } else if let Some(h) = p.holds.iter().find(|h| h.policy == name) {
                outcome.status = "held".into();
                outcome.file = Some(h.file.clone());
                outcome.from = Some(h.current.clone());
                outcome.reason = Some(h.reason.clone());
            } else if let Some(pr) = p.problems.iter().find(|pr| match &pr.policy {
                Some(policy) => names(policy),
                // A file-level problem (unreadable, two policies on one field) concerns every
                // image planned on that file.
                None => pr.file.as_ref().is_some_and(|f| job.files.contains(f)),
            }) {
                outcome.status = "problem".into();
                outcome.file = pr.file.clone();
                outcome.reason = Some(pr.message.clone());
            } else if registry.listed(&job.policy.image) {
                outcome.status = "up to date".into();
            } else {
                outcome.status = "not found".into();
                outcome.reason = Some(format!(
                    "no reference to {} in {}",
                    job.policy.image,
                    describe_files(&job.files)
                ));
            }
        }
        merged.add(p);
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn plan_unit(
        &self,
        a: usize,
        app: &ManagedApp,
        unit: &Unit,
        repository: &RepositoryConfig,
        checkout: &Path,
        out: &mut RepositoryPlan,
        jobs: &mut Vec<InPlace>,
    ) -> Result<(), ArgoError> {
        let kind = unit
            .kind
            .unwrap_or_else(|| detect(&checkout.join(&unit.root)));
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
                    checkout,
                    &unit.root,
                    d.recurse,
                    d.include.as_deref(),
                    d.exclude.as_deref(),
                ) {
                    Ok(files) => (files, false),
                    Err(e) => {
                        problem(out, e);
                        return Ok(());
                    }
                }
            }
            (UnitWrite::Kustomization { dir }, _) => {
                match ["kustomization.yaml", "kustomization.yml", "Kustomization"]
                    .iter()
                    .map(|f| resolve::join(dir, f))
                    .find(|f| checkout.join(f).is_file())
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
                if !checkout.join(file).is_file() {
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
                    .plan_override(a, app, unit, kind, file, repository, checkout, out)
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
                status: String::new(),
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
        checkout: &Path,
        out: &mut RepositoryPlan,
    ) -> Result<(), ArgoError> {
        let path = checkout.join(file);
        let original = match std::fs::read_to_string(&path) {
            Ok(t) => Some(t),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
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
        let mut changes = Vec::new();
        for (i, image) in app.annotations.images.iter().enumerate() {
            let Some(policy) = &app.policies[i] else {
                continue;
            };
            let mut outcome = ImageOutcome {
                app: a,
                alias: image.alias.clone(),
                image: policy.image.to_string(),
                source: unit.source + 1,
                kind,
                repository: repository.name.clone(),
                file: Some(file.to_string()),
                from: None,
                to: None,
                status: String::new(),
                reason: None,
            };
            let current = overrides
                .current(kind, image, policy)
                .or_else(|| current_in_source(checkout, &unit.root, image, policy));
            let (tag, digest) = match &current {
                Some((t, d)) => (t.clone(), d.clone()),
                None if image.force_update => (None, None),
                None => {
                    outcome.status = "not found".into();
                    outcome.reason = Some(format!(
                        "no reference to {} under {}; set force-update to write it anyway",
                        policy.image,
                        resolve::display(&unit.root)
                    ));
                    out.images.push(outcome);
                    continue;
                }
            };
            outcome.from = Some(plan::version_text(tag.as_deref(), digest.as_deref()));
            match decide(policy, tag.as_deref(), digest.as_deref(), &self.registry).await {
                Ok(Decided::Move { tag, digest }) => {
                    let to = plan::version_text(Some(&tag), digest.as_deref());
                    overrides.set(kind, image, policy, &tag, digest.as_deref());
                    outcome.status = "update".into();
                    outcome.to = Some(to.clone());
                    changes.push(Change {
                        repository: Some(repository.name.clone()),
                        policy: policy.name.clone(),
                        image: policy.image.to_string(),
                        file: file.to_string(),
                        line: 0,
                        field: format!("argocd-source {}", kind.name()),
                        strategy: policy.strategy.name(),
                        from: outcome.from.clone().unwrap_or_default(),
                        to,
                    });
                }
                Ok(Decided::Stay) => outcome.status = "up to date".into(),
                Ok(Decided::Hold(reason)) => {
                    outcome.status = "held".into();
                    outcome.reason = Some(reason.clone());
                    out.plan.holds.push(Hold {
                        repository: Some(repository.name.clone()),
                        policy: policy.name.clone(),
                        file: file.to_string(),
                        line: 0,
                        current: outcome.from.clone().unwrap_or_default(),
                        reason,
                    });
                }
                Err(message) => {
                    outcome.status = "problem".into();
                    outcome.reason = Some(message.clone());
                    out.plan.problems.push(Problem {
                        repository: Some(repository.name.clone()),
                        policy: Some(policy.name.clone()),
                        image: Some(policy.image.to_string()),
                        file: Some(file.to_string()),
                        line: None,
                        message,
                    });
                }
            }
            out.images.push(outcome);
        }
        if changes.is_empty() {
            out.plan.up_to_date += 1;
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

impl<R: Registry> Replanner for AppPlanner<'_, R> {
    type Error = ArgoError;

    async fn plan(
        &self,
        repository: &RepositoryConfig,
        checkout: &Path,
    ) -> Result<Vec<ChangeGroup>, ArgoError> {
        let p = self.plan_checkout(repository, checkout).await?;
        let mut groups: Vec<ChangeGroup> = p
            .plan
            .groups_by_policy()?
            .into_iter()
            .map(|g| ChangeGroup {
                key: g.policy,
                files: g.files,
                changes: g.changes.iter().map(git_change).collect(),
            })
            .collect();
        groups.extend(p.override_groups);
        Ok(groups)
    }
}

fn git_change(c: &Change) -> git::Change {
    git::Change {
        policy: c.policy.clone(),
        image: c.image.clone(),
        file: c.file.clone().into(),
        line: c.line,
        from: c.from.clone(),
        to: c.to.clone(),
        strategy: c.strategy.to_string(),
    }
}

/// Per-image plans joined into one per repository: edits to one file from several images (or
/// apps) are applied together, and verified again.
#[derive(Default)]
struct Merged {
    plans: Vec<Plan>,
}

impl Merged {
    fn add(&mut self, p: Plan) {
        self.plans.push(p);
    }

    fn finish(self, repository: &str, extra: &mut Plan) -> Plan {
        let mut out = std::mem::take(extra);
        let mut files: BTreeMap<PathBuf, FileUpdate> = BTreeMap::new();
        let mut skipped = BTreeSet::new();
        for p in self.plans {
            out.changes.extend(p.changes);
            out.holds.extend(p.holds);
            out.problems.extend(p.problems);
            for s in p.skipped {
                if skipped.insert(s.file.clone()) {
                    out.skipped.push(s);
                }
            }
            out.up_to_date += p.up_to_date;
            out.policies_used += p.policies_used;
            for f in p.files {
                match files.get_mut(&f.path) {
                    None => {
                        files.insert(f.path.clone(), f);
                    }
                    Some(have) => have.edits.extend(f.edits),
                }
            }
        }
        for (path, mut f) in files {
            let all: Vec<manifest::Edit> = f
                .edits
                .iter()
                .flat_map(|(_, e)| e.iter().cloned())
                .collect();
            match manifest::apply_edits(&path, &f.original, &all) {
                Ok(updated) => {
                    f.updated = updated;
                    out.files.push(f);
                }
                Err(e) => {
                    let policies: BTreeSet<&str> =
                        f.edits.iter().map(|(p, _)| p.as_str()).collect();
                    let file = path.to_string_lossy().to_string();
                    out.problems.push(Problem {
                        repository: Some(repository.to_string()),
                        policy: Some(policies.into_iter().collect::<Vec<_>>().join(", ")),
                        image: None,
                        file: Some(file.clone()),
                        line: None,
                        message: format!(
                            "edits of several applications conflict; file left alone: {e}"
                        ),
                    });
                    out.changes.retain(|c| c.file != file);
                }
            }
        }
        out.changes
            .sort_by(|a, b| (&a.file, a.line, &a.policy).cmp(&(&b.file, b.line, &b.policy)));
        out
    }
}

// === batches ===

/// One image of one app unit, written in place: planned by the ordinary planner.
struct InPlace {
    /// With targets naming exactly `files`.
    policy: ImagePolicy,
    files: Vec<String>,
    /// Its targets carry Helm value paths.
    helm: bool,
    /// Index into [`RepositoryPlan::images`].
    outcome: usize,
}

impl InPlace {
    /// Whether the two can share one walk without changing what either finds. The planner
    /// refuses a field two policies claim, which is the conflict to keep: the same image in
    /// one file (two apps on one manifest), so one image appears once per batch and is
    /// merged, and checked, afterwards. Helm value paths without a repository, and
    /// kustomize image names, can be claimed by any policy on the file, so those share a
    /// walk only on disjoint files.
    fn fits_with(&self, other: &InPlace) -> bool {
        if self.policy.image == other.policy.image || self.policy.name == other.policy.name {
            return false;
        }
        let aliased = |j: &InPlace| {
            j.policy
                .targets
                .iter()
                .any(|t| t.kustomize_image_name.is_some())
        };
        let shared = self.files.iter().any(|f| other.files.contains(f));
        !shared || !((self.helm && other.helm) || aliased(self) || aliased(other))
    }
}

/// Groups the in-place images into as few walks of the checkout as [`InPlace::fits_with`]
/// allows: first fit, in plan order, so apps on distinct images share one walk.
fn batches(jobs: &[InPlace]) -> Vec<Vec<&InPlace>> {
    let mut out: Vec<Vec<&InPlace>> = Vec::new();
    for job in jobs {
        match out
            .iter_mut()
            .find(|b| b.iter().all(|other| job.fits_with(other)))
        {
            Some(batch) => batch.push(job),
            None => out.push(vec![job]),
        }
    }
    out
}

/// A registry that remembers which images it was asked to list.
struct Recording<'r, R> {
    inner: &'r R,
    listed: Mutex<BTreeSet<Repository>>,
}

impl<'r, R: Registry> Recording<'r, R> {
    fn new(inner: &'r R) -> Self {
        Recording {
            inner,
            listed: Default::default(),
        }
    }

    fn listed(&self, repo: &Repository) -> bool {
        self.listed.lock().expect("listing lock").contains(repo)
    }
}

impl<R: Registry> Registry for Recording<'_, R> {
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.listed
            .lock()
            .expect("listing lock")
            .insert(repo.clone());
        self.inner.list_tags(repo).await
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[crate::image::Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inner.inspect(repo, reference, platforms).await
    }

    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.inner.digest(repo, reference).await
    }
}

/// The targets that let `image`'s policy touch exactly `files`.
fn targets(files: &[String], repository: &str, image: &AnnotatedImage, helm: bool) -> Vec<Target> {
    let target = |helm: Option<HelmPaths>| {
        let mut builder = globset::GlobSetBuilder::new();
        for f in files {
            builder.add(
                globset::GlobBuilder::new(&globset::escape(f))
                    .literal_separator(true)
                    .build()
                    .expect("an escaped path is a valid glob"),
            );
        }
        Target {
            paths: files.to_vec(),
            path_set: builder.build().expect("literal globs build"),
            repository: Some(repository.to_string()),
            helm,
            kustomize_image_name: image.kustomize_image_name.clone(),
        }
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

/// What Argo CD would detect in `dir`.
fn detect(dir: &Path) -> SourceKind {
    if ["kustomization.yaml", "kustomization.yml", "Kustomization"]
        .iter()
        .any(|f| dir.join(f).is_file())
    {
        SourceKind::Kustomize
    } else if dir.join("Chart.yaml").is_file() {
        SourceKind::Helm
    } else {
        SourceKind::Directory
    }
}

/// The manifests of a Directory source, repository-relative: `.yaml`/`.yml` files under `root`
/// (below it only with `recurse`), kept by `include` and dropped by `exclude`. A pattern
/// matches the path relative to `root` or the file name.
fn manifest_files(
    checkout: &Path,
    root: &str,
    recurse: bool,
    include: Option<&str>,
    exclude: Option<&str>,
) -> Result<Vec<String>, String> {
    let glob = |p: &str| {
        globset::GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map(|g| g.compile_matcher())
            .map_err(|e| format!("directory pattern {p:?}: {e}"))
    };
    let include = include.filter(|s| !s.is_empty()).map(glob).transpose()?;
    let exclude = exclude.filter(|s| !s.is_empty()).map(glob).transpose()?;
    let dir = checkout.join(root);
    if !dir.is_dir() {
        return Err(format!("path {} does not exist", resolve::display(root)));
    }
    let mut out = Vec::new();
    let walker = walkdir::WalkDir::new(&dir)
        .sort_by_file_name()
        .max_depth(if recurse { usize::MAX } else { 1 })
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker.filter_map(Result::ok) {
        if !entry.file_type().is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().to_string();
        if !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        let rel = entry.path().strip_prefix(&dir).unwrap_or(entry.path());
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

fn describe_files(files: &[String]) -> String {
    match files {
        [] => "no files".to_string(),
        [one] => one.clone(),
        many => format!("{} files", many.len()),
    }
}

fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .map_or(1, |i| i + 1)
}

/// The image's current tag and digest as the source's own files hold it (the kustomization's
/// `images:`, a workload, Helm values): where Argo CD starts before any override.
fn current_in_source(
    checkout: &Path,
    root: &str,
    image: &AnnotatedImage,
    policy: &ImagePolicy,
) -> Option<(Option<String>, Option<String>)> {
    let files = manifest_files(checkout, root, true, None, None).ok()?;
    let helm = targets(&[], "", image, true)
        .into_iter()
        .filter_map(|t| t.helm)
        .collect::<Vec<_>>();
    for f in files {
        let Ok(text) = std::fs::read_to_string(checkout.join(&f)) else {
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

// === decisions ===

/// What an image should become: the planner's own outcome for a reference.
pub use crate::plan::Outcome as Decided;

/// Decides one image currently on `tag`/`digest` exactly as the planner decides a manifest
/// field (same strategy, same digest pinning).
pub async fn decide<R: Registry>(
    policy: &ImagePolicy,
    tag: Option<&str>,
    digest: Option<&str>,
    registry: &R,
) -> Result<Decided, String> {
    let tags = registry
        .list_tags(&policy.image)
        .await
        .map_err(|e| e.to_string())?;
    let inspector = Inspector::new(registry);
    let candidates = inspector
        .candidates(policy, &tags, &())
        .await
        .map_err(|e| e.to_string())?;
    plan::decide_reference(policy, tag, digest, false, &candidates, &inspector).await
}

// === .argocd-source-<app>.yaml ===

/// Argo CD's parameter-override file, in Image Updater's shape. Keys tagpilot does not know are
/// kept as they were.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OverrideFile {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<HelmOverrides>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<KustomizeOverrides>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HelmOverrides {
    #[serde(default)]
    pub parameters: Vec<OverrideParameter>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverrideParameter {
    pub name: String,
    #[serde(default)]
    pub value: String,
    #[serde(default)]
    pub forcestring: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct KustomizeOverrides {
    #[serde(default)]
    pub images: Vec<String>,
    #[serde(flatten)]
    pub other: BTreeMap<String, serde_json::Value>,
}

impl OverrideFile {
    pub fn parse(text: &str) -> Result<OverrideFile, String> {
        if text.trim().is_empty() {
            return Ok(OverrideFile::default());
        }
        serde_saphyr::from_str(text).map_err(|e| e.to_string())
    }

    pub fn render(&self) -> String {
        serde_saphyr::to_string(self).expect("override file serialises")
    }

    /// The image's current tag and digest in this file, if it names the image.
    pub fn current(
        &self,
        kind: SourceKind,
        image: &AnnotatedImage,
        policy: &ImagePolicy,
    ) -> Option<(Option<String>, Option<String>)> {
        match kind {
            SourceKind::Kustomize | SourceKind::Directory => {
                let k = self.kustomize.as_ref()?;
                let entry = k
                    .images
                    .iter()
                    .find(|e| kustomize_entry_names(e, image, policy))?;
                let reference = entry.split_once('=').map_or(entry.as_str(), |(_, r)| r);
                let r = ImageRef::parse(reference).ok()?;
                Some((r.tag, r.digest))
            }
            SourceKind::Helm => {
                let params = &self.helm.as_ref()?.parameters;
                let get = |n: &str| params.iter().find(|p| p.name == n).map(|p| p.value.clone());
                if let Some(spec) = &image.helm.spec {
                    let r = ImageRef::parse(&get(spec)?).ok()?;
                    return Some((r.tag, r.digest));
                }
                let tag = get(image.helm.tag_or_default())?;
                match tag.split_once('@') {
                    Some((t, d)) => Some((
                        Some(t.to_string()).filter(|t| !t.is_empty()),
                        Some(d.to_string()),
                    )),
                    None => Some((Some(tag), None)),
                }
            }
        }
    }

    /// Sets the image to `tag` (and `digest`), replacing its entry or adding one.
    pub fn set(
        &mut self,
        kind: SourceKind,
        image: &AnnotatedImage,
        policy: &ImagePolicy,
        tag: &str,
        digest: Option<&str>,
    ) {
        match kind {
            SourceKind::Kustomize | SourceKind::Directory => {
                let reference = ImageRef::render(&image.image, Some(tag), digest);
                let entry = match &image.kustomize_image_name {
                    Some(k) if *k != image.image => format!("{k}={reference}"),
                    _ => reference,
                };
                let k = self.kustomize.get_or_insert_with(Default::default);
                match k
                    .images
                    .iter_mut()
                    .find(|e| kustomize_entry_names(e, image, policy))
                {
                    Some(e) => *e = entry,
                    None => k.images.push(entry),
                }
            }
            SourceKind::Helm => {
                let h = self.helm.get_or_insert_with(Default::default);
                let mut put = |name: &str, value: String| match h
                    .parameters
                    .iter_mut()
                    .find(|p| p.name == name)
                {
                    Some(p) => {
                        p.value = value;
                        p.forcestring = true;
                    }
                    None => h.parameters.push(OverrideParameter {
                        name: name.to_string(),
                        value,
                        forcestring: true,
                    }),
                };
                match &image.helm.spec {
                    Some(spec) => put(spec, ImageRef::render(&image.image, Some(tag), digest)),
                    None => {
                        put(image.helm.name_or_default(), image.image.clone());
                        put(
                            image.helm.tag_or_default(),
                            plan::version_text(Some(tag), digest),
                        );
                    }
                }
            }
        }
    }
}

/// Whether a kustomize override entry (`[old=]image[:tag][@digest]`) is the one for `image`.
fn kustomize_entry_names(entry: &str, image: &AnnotatedImage, policy: &ImagePolicy) -> bool {
    let name = match entry.split_once('=') {
        Some((old, _)) => old.to_string(),
        None => match ImageRef::parse(entry) {
            Ok(r) => r.name,
            Err(_) => return false,
        },
    };
    image.kustomize_image_name.as_deref() == Some(name.as_str())
        || Repository::parse(&name).is_ok_and(|r| r == policy.image)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::annotations;
    use crate::policy::Strategy;
    use std::collections::BTreeMap as Map;

    fn image(pairs: &[(&str, &str)]) -> (AnnotatedImage, ImagePolicy) {
        let mut m: Map<String, String> = pairs
            .iter()
            .map(|(k, v)| {
                (
                    format!("{}{k}", annotations::IMAGE_UPDATER_PREFIX),
                    v.to_string(),
                )
            })
            .collect();
        m.entry(format!(
            "{}write-back-method",
            annotations::IMAGE_UPDATER_PREFIX
        ))
        .or_insert("git".into());
        let a = annotations::parse(&m).unwrap();
        let i = a.images[0].clone();
        let p = ImagePolicy::adhoc(&i.image, Strategy::NewestBuild).unwrap();
        (i, p)
    }

    #[test]
    fn kustomize_override_entries_are_replaced_by_name_or_added() {
        let (img, pol) = image(&[("image-list", "api=r.example/shop/api")]);
        let mut f = OverrideFile::parse(
            "kustomize:\n  images:\n  - r.example/shop/web:1.0.0\n  - r.example/shop/api:1.0.0\n",
        )
        .unwrap();
        assert_eq!(
            f.current(SourceKind::Kustomize, &img, &pol),
            Some((Some("1.0.0".into()), None))
        );
        f.set(SourceKind::Kustomize, &img, &pol, "1.2.0", None);
        assert_eq!(
            f.kustomize.as_ref().unwrap().images,
            vec!["r.example/shop/web:1.0.0", "r.example/shop/api:1.2.0"]
        );
        let (img, pol) = image(&[
            ("image-list", "api=r.example/shop/api"),
            ("api.kustomize.image-name", "api"),
        ]);
        let mut f = OverrideFile::default();
        f.set(SourceKind::Kustomize, &img, &pol, "2.0.0", None);
        assert_eq!(
            f.kustomize.as_ref().unwrap().images,
            vec!["api=r.example/shop/api:2.0.0"]
        );
        assert_eq!(
            f.current(SourceKind::Kustomize, &img, &pol),
            Some((Some("2.0.0".into()), None))
        );
    }

    #[test]
    fn helm_override_parameters_use_image_updater_names_and_keep_other_keys() {
        let (img, pol) = image(&[
            ("image-list", "api=r.example/shop/api"),
            ("api.helm.image-name", "api.image.repository"),
            ("api.helm.image-tag", "api.image.tag"),
        ]);
        let mut f = OverrideFile::parse(
            "helm:\n  parameters:\n  - name: api.image.tag\n    value: 1.0.0\n    forcestring: true\n  valueFiles: [prod.yaml]\n",
        )
        .unwrap();
        assert_eq!(
            f.current(SourceKind::Helm, &img, &pol),
            Some((Some("1.0.0".into()), None))
        );
        f.set(SourceKind::Helm, &img, &pol, "1.1.0", None);
        let text = f.render();
        let back = OverrideFile::parse(&text).unwrap();
        let h = back.helm.unwrap();
        assert_eq!(
            h.parameters,
            vec![
                OverrideParameter {
                    name: "api.image.tag".into(),
                    value: "1.1.0".into(),
                    forcestring: true
                },
                OverrideParameter {
                    name: "api.image.repository".into(),
                    value: "r.example/shop/api".into(),
                    forcestring: true
                },
            ]
        );
        assert!(h.other.contains_key("valueFiles"), "{text}");
    }

    #[test]
    fn distinct_images_share_a_walk_and_one_image_twice_does_not() {
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
            }
        };
        let names = |jobs: &[InPlace]| -> Vec<Vec<String>> {
            batches(jobs)
                .iter()
                .map(|b| b.iter().map(|j| j.policy.name.clone()).collect())
                .collect()
        };
        let jobs = [
            job("a/api", "r.example/api", &["a/d.yaml"], false),
            job("a/web", "r.example/web", &["a/d.yaml"], false),
            job("b/worker", "r.example/worker", &["b/d.yaml"], false),
            // Two apps on one image: separate walks, so their edits meet (and are checked)
            // when the plans are merged.
            job("c/api", "r.example/api", &["c/d.yaml"], false),
            // Helm paths on one values file could be claimed by either policy.
            job("h/ui", "r.example/ui", &["h/values.yaml"], true),
            job("h/worker2", "r.example/worker2", &["h/values.yaml"], true),
        ];
        assert_eq!(
            names(&jobs),
            vec![
                vec!["a/api", "a/web", "b/worker", "h/ui"],
                vec!["c/api", "h/worker2"],
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
        let flat = manifest_files(dir.path(), "app", false, None, Some("skip.yaml")).unwrap();
        assert_eq!(flat, vec!["app/a.yaml", "app/b.yml"]);
        let deep = manifest_files(dir.path(), "app", true, Some("{a.yaml,sub/*}"), None).unwrap();
        assert_eq!(deep, vec!["app/a.yaml", "app/sub/c.yaml"]);
    }
}
