//! A target is one repository and branch, whatever named it: policy files, Applications kept in
//! git, Applications read from the cluster. [`TargetPlanner`] plans every source of a target on
//! the one tree the writer hands it (a commit read from the clone cache), joins their plans ([`crate::plan::merge`]) and returns the
//! change groups with the plan itself, so one target costs one clone, one plan and one commit
//! (or one pull request per group).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use crate::argocd::branch::{
    BranchChange, BranchTemplate, check_branch_name, image_updater_name, image_updater_tag,
};
use crate::argocd::plan::{AppPlanner, ImageOutcome, ImageReason, ImageStatus, RepositoryPlan};
use crate::argocd::resolve::{self, Resolved};
use crate::change::{self, ChangeGroup, Stacking};
use crate::error_chain::Failure;
use crate::files::{Files, FilesError};
use crate::git::{CommitFiles, Planned, Replanner, RepositoryConfig};
use crate::holds::Holds;
use crate::plan::merge::merge;
use crate::plan::{self, DiffTarget, Plan, Progress, TargetDiff};
use crate::policy::ImagePolicy;
use crate::promotion::Promotions;
use crate::registry::Registry;
use crate::state::{Proposal, State};

use super::EngineError;

/// What planning one target found, handed back with its write outcome.
#[derive(Debug, Clone, Default)]
pub struct TargetPlan {
    pub plan: Plan,
    /// Each Application image's outcome in this target.
    pub images: Vec<ImageOutcome>,
    /// Application problems found on the checkout, by index into [`Resolved::apps`].
    pub app_problems: Vec<(usize, String)>,
    /// With a state store, what each group proposes, recorded once its write succeeded
    /// ([`crate::writeback::records::record_written`]).
    pub proposals: Vec<(String, Proposal)>,
    /// The base tip the target was planned on, recorded once written so the next cycle reads
    /// only the commits after it for a person's rollbacks.
    pub tip: Option<String>,
}

impl crate::writeback::Recorded for TargetPlan {
    fn proposals(&self) -> &[(String, Proposal)] {
        &self.proposals
    }

    fn holds_found(&self) -> &[crate::holds::HeldTag] {
        &self.plan.holds_found
    }

    fn tip(&self) -> Option<&str> {
        self.tip.as_deref()
    }
}

/// Where each policy comes from, in the words a report uses.
#[derive(Debug, Default)]
pub struct SourceNames {
    by_policy: HashMap<String, String>,
}

impl SourceNames {
    pub fn new(policies: &[ImagePolicy], resolved: Option<&Resolved>) -> Self {
        let mut by_policy = HashMap::new();
        for p in policies {
            by_policy.insert(
                p.name.clone(),
                format!("policy file {}", p.source.file.display()),
            );
        }
        for app in resolved.iter().flat_map(|r| r.apps.iter()) {
            for image in &app.annotations.images {
                by_policy.insert(
                    resolve::policy_name(&app.app, &image.alias),
                    application_source(app),
                );
            }
        }
        SourceNames { by_policy }
    }

    /// `policy file policies/api.yaml`, `Application argocd/shop (git)`, or the name itself.
    pub fn of(&self, policy: &str) -> String {
        self.by_policy
            .get(policy)
            .cloned()
            .unwrap_or_else(|| policy.to_owned())
    }
}

/// How the report names an Application as a source.
pub fn application_source(app: &resolve::ManagedApp) -> String {
    let origin = match app.origin {
        crate::application::Origin::Git => "git",
        crate::application::Origin::Cluster => "cluster",
    };
    format!("Application {} ({origin})", app.app.id())
}

/// Names in each committed group the Applications whose sources in the repository at `url`, on
/// the branch changed, contain its files; a source that contains them but tracks another revision is a
/// finding in `plan` rather than a name that silently goes missing.
fn name_applications(
    groups: &mut [ChangeGroup],
    deployers: &crate::affected::Deployers,
    repository: &RepositoryConfig,
    plan: &mut Plan,
) {
    if deployers.is_empty() {
        return;
    }
    /// One source on another revision, over every group: its files and the images they move.
    #[derive(Default)]
    struct Elsewhere {
        revision: String,
        files: BTreeSet<String>,
        images: BTreeSet<String>,
    }
    let branch = repository.target_branch();
    let mut elsewhere: BTreeMap<(String, usize), Elsewhere> = BTreeMap::new();
    for group in groups {
        let files: Vec<String> = group
            .files
            .keys()
            .map(|p| p.to_string_lossy().replace('\\', "/"))
            .collect();
        let deployed =
            deployers.containing(&repository.url, branch, files.iter().map(String::as_str));
        group.applications = deployed.applications;
        for o in deployed.other_revisions {
            let entry = elsewhere.entry((o.application, o.source)).or_default();
            entry.revision = o.revision;
            // The images moved in the files it contains: a merged group carries others too.
            entry.images.extend(
                group
                    .changes
                    .iter()
                    .filter(|c| o.files.iter().any(|f| *f == c.file.replace('\\', "/")))
                    .map(|c| c.image.clone()),
            );
            entry.files.extend(o.files);
        }
    }
    for ((application, source), found) in elsewhere {
        let revision = found.revision;
        let files: Vec<String> = found.files.into_iter().collect();
        let images: Vec<String> = found.images.into_iter().collect();
        plan.findings.push(crate::plan::Finding {
            repository: Some(repository.name.clone()),
            application: Some(application),
            ..crate::plan::Finding::new(
                crate::plan::FindingKind::ApplicationOnOtherRevision,
                images.join(", "),
                format!(
                    "source {source} on targetRevision `{revision}`, not branch `{branch}`, \
                     containing {}",
                    files.join(", ")
                ),
            )
        });
    }
}

/// Plans a target's every source on one checkout.
pub struct TargetPlanner<'a, R> {
    pub policies: &'a [ImagePolicy],
    pub apps: Option<AppPlanner<'a, R>>,
    pub resolved: Option<&'a Resolved>,
    pub registry: &'a R,
    pub progress: &'a dyn Progress,
    /// `git-branch` templates that name the branch after the changes, by repository name.
    pub branch_templates: &'a BTreeMap<String, BranchTemplate>,
    pub sources: &'a SourceNames,
    /// Where the last proposal per policy group is kept (`tagpilot run --state-dir`); see
    /// [`crate::plan::steady`].
    pub state: Option<&'a State>,
    /// The cycle's clock: steady proposals and rollbacks are dated by it.
    pub clock: &'a dyn crate::clock::Clock,
    /// The held tags to honour ([`crate::holds`]), read once per cycle.
    pub holds: &'a Holds,
    /// Keep each changed file before and after in the plan ([`Plan::diffs`]).
    pub diff: bool,
    /// Where promoting policies' upstreams are read from ([`super::promotions`]).
    pub promotions: &'a super::promotions::Sources<'a>,
    /// The tools to render Applications with, looked up on `PATH` the first time a target asks
    /// for rendered diffs (`write.renderedDiff`) or the cycle does ([`super::Options::rendered`]).
    pub tools: std::sync::OnceLock<crate::render::Tools>,
    /// The registries configured `insecure`, whose OCI charts are pulled over plain HTTP.
    pub plain_http_registries: Vec<String>,
    /// Keep each group's rendered resources in the plan's diffs (`plan --diff --rendered`).
    pub rendered: bool,
    /// A report is made of the plan (`tagpilot plan`), which shows each change's source even
    /// where nothing written does ([`super::image_sources::shown`]).
    pub report: bool,
    /// The change windows and the freeze: the groups they keep out are held, named.
    pub(super) gate: super::windows::Gate<'a>,
}

impl<R: Registry> TargetPlanner<'_, R> {
    /// Whether a policy file names `repository` in one of its targets.
    fn files_name(&self, repository: &str) -> bool {
        self.policies.iter().any(|p| {
            p.targets
                .iter()
                .any(|t| t.repository.as_deref() == Some(repository))
        })
    }

    /// The sources that name `repository`, for the report.
    pub fn sources_of(&self, repository: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .policies
            .iter()
            .filter(|p| {
                p.targets
                    .iter()
                    .any(|t| t.repository.as_deref() == Some(repository))
            })
            .map(|p| format!("policy file {}", p.source.file.display()))
            .collect();
        out.dedup();
        if let Some(resolved) = self.resolved {
            out.extend(
                resolved
                    .apps_in(repository)
                    .map(|(_, app)| application_source(app)),
            );
        }
        out
    }

    #[tracing::instrument(skip_all, fields(repository = %repository.name))]
    async fn plan_target(
        &self,
        repository: &RepositoryConfig,
        files: &dyn Files,
        (holds, promotions): (&Holds, &Promotions),
    ) -> Result<Planned<TargetPlan>, EngineError> {
        let name = repository.name.as_str();
        let mut parts = Vec::new();
        if self.files_name(name) {
            let (plan, _) = plan::plan_files_promoted(
                files,
                name,
                self.policies,
                self.registry,
                self.progress,
                (holds, promotions),
            )
            .await?;
            parts.push(plan);
        }
        let mut apps = RepositoryPlan::default();
        if let Some(planner) = self.apps.as_ref().filter(|a| a.writes_to(name)) {
            apps = planner.holding(holds).plan_files(repository, files).await?;
            parts.append(&mut apps.in_place);
            parts.push(std::mem::take(&mut apps.plan));
        }
        let mut plan = merge(Some(name), parts, &|p| self.sources.of(p));
        let images = self.reconcile(apps.images, &plan);

        // A pull request per policy starts from the base, so it must carry only its own edits.
        let stacking = Stacking::of(&repository.write);
        // The groups take the plan's texts: from here they carry every new text the write
        // needs, and the plan keeps none beside them through the commit and the push (the
        // report counts files from the changes).
        let is_pattern = |n: &str| {
            self.policies
                .iter()
                .any(|p| p.pattern.is_some() && p.name == n)
        };
        let mut groups = plan.take_groups_by(stacking, &|policy| {
            change::group_key(repository.write.group, policy, &is_pattern)
        })?;
        groups.extend(apps.override_groups);
        if super::image_sources::shown(&repository.write, self.report) {
            super::image_sources::describe(self.registry, &mut plan, &mut groups).await;
        }
        // The steady memory is read on the planner's own groups, one per policy: it is about a
        // policy's own moves, and the state store keeps it per policy group whatever
        // `write.group` commits ([`plan::steady`]).
        // A pattern's images are planned as policies of their own (`pattern@path`).
        let instances = crate::policy::pattern::instances_named(
            self.policies,
            plan.changes.iter().map(|c| c.policy.as_str()),
        );
        let steady = self.state.map(|state| {
            let memory = plan::steady::Memory {
                repository: name,
                last_proposal: &|group| state.last_proposal(name, group),
                policy: &|policy| {
                    self.policy(policy)
                        .or_else(|| instances.iter().find(|p| p.name == policy))
                },
                now: self.clock.wall(),
            };
            plan::steady::Steady::of(&memory, &groups)
        });
        // The groups as they are committed, one commit or pull request each: decided here,
        // once, per `write.group`; git and the forges write them as given. Everything said of
        // what lands together is worked out on these groups, never on the planner's: a hold
        // holds a whole commit or pull request, and the Applications named and rendered are
        // those of the files it lands (a merged group's render shows every policy's edits).
        let mut groups = change::group(name, repository.write.group, groups);
        let settled = steady
            .map(|s| s.hold(&mut groups, stacking, &mut plan))
            .unwrap_or_default();
        let none = crate::affected::Deployers::default();
        let deployers = self.resolved.map_or(&none, |r| &r.deployers);
        name_applications(&mut groups, deployers, repository, &mut plan);
        self.gate.hold(name, &mut groups, stacking, &mut plan);
        let for_review = repository.write.rendered_diff
            && repository.write.mode == crate::config::repository::WriteMode::PullRequest;
        let mut rendered = Vec::new();
        if self.rendered || for_review {
            let tools = self.tools.get_or_init(|| {
                crate::render::Tools::from_path()
                    .with_plain_http(self.plain_http_registries.iter().cloned())
            });
            super::review::render_groups(
                tools,
                deployers.apps(),
                &repository.url,
                files,
                &mut groups,
            );
            if self.rendered {
                rendered = super::review::rendered_diffs(name, &groups);
            }
        }
        if self.diff {
            plan.diffs = target_diffs(name, files, &groups, stacking, &mut plan.problems);
        }
        plan.diffs.extend(rendered);
        // With nothing to write no branch is named: a range over no changes may render empty,
        // which is no branch at all.
        let branch = if groups.is_empty() {
            None
        } else {
            self.branch_templates
                .get(name)
                .map(|t| t.render(None, &self.branch_changes(&images)))
        };
        // A name git would refuse is named here, before anything is committed or pushed.
        if let Some(b) = &branch {
            check_branch_name(b)?;
        }
        Ok(Planned {
            groups,
            // A group held back is not "no longer needed": its pull request stays open.
            complete: plan.problems.is_empty() && !settled.held,
            branch,
            plan: TargetPlan {
                plan,
                images,
                app_problems: apps.app_problems,
                proposals: settled.proposals,
                tip: None,
            },
        })
    }

    /// The policy named `name`, from a policy file or an Application.
    pub(super) fn policy(&self, name: &str) -> Option<&ImagePolicy> {
        self.policies.iter().find(|p| p.name == name).or_else(|| {
            self.resolved?
                .apps
                .iter()
                .flat_map(|a| a.policies.iter().flatten())
                .find(|p| p.name == name)
        })
    }

    /// An image whose change was held because another source disagrees says so.
    fn reconcile(&self, mut images: Vec<ImageOutcome>, plan: &Plan) -> Vec<ImageOutcome> {
        let Some(resolved) = self.resolved else {
            return images;
        };
        // By (policy, file): thousands of Applications on one repository must not make this
        // images × changes.
        let changed: HashSet<(&str, &str)> = plan
            .changes
            .iter()
            .map(|c| (c.policy.as_str(), c.file.as_str()))
            .collect();
        let held: HashMap<(&str, &str), &plan::HoldReason> = plan
            .holds
            .iter()
            .map(|h| ((h.policy.as_str(), h.file.as_str()), &h.reason))
            .collect();
        // An image up to date on a field another source moves is held with it: by policy,
        // since an up-to-date outcome names no file.
        let held_policies: HashMap<&str, &plan::Hold> =
            plan.holds.iter().map(|h| (h.policy.as_str(), h)).collect();
        for o in images
            .iter_mut()
            .filter(|o| o.status == ImageStatus::UpToDate)
        {
            let policy = resolve::policy_name(&resolved.apps[o.app].app, &o.alias);
            if let Some(h) = held_policies.get(policy.as_str()) {
                o.status = ImageStatus::Held;
                o.file = Some(h.file.clone());
                o.from = Some(h.current.clone());
                o.reason = Some(ImageReason::Held(h.reason.clone()));
            }
        }
        for o in images
            .iter_mut()
            .filter(|o| o.status == ImageStatus::Update)
        {
            let policy = resolve::policy_name(&resolved.apps[o.app].app, &o.alias);
            let key = (policy.as_str(), o.file.as_deref().unwrap_or_default());
            if changed.contains(&key) {
                continue;
            }
            if let Some(reason) = held.get(&key) {
                o.status = ImageStatus::Held;
                o.to = None;
                o.reason = Some(ImageReason::Held((*reason).clone()));
            }
        }
        images
    }

    /// The changes a `git-branch` template names, as Image Updater lists them.
    fn branch_changes(&self, images: &[ImageOutcome]) -> Vec<BranchChange> {
        images
            .iter()
            .filter(|o| o.status == ImageStatus::Update)
            .map(|o| BranchChange {
                name: image_updater_name(
                    self.resolved
                        .and_then(|r| {
                            r.apps[o.app]
                                .annotations
                                .images
                                .iter()
                                .find(|i| i.alias == o.alias)
                        })
                        .map_or(o.image.as_str(), |i| i.image.as_str()),
                ),
                alias: o.alias.clone(),
                old_tag: image_updater_tag(o.from.as_deref().unwrap_or_default()),
                new_tag: image_updater_tag(o.to.as_deref().unwrap_or_default()),
            })
            .collect()
    }
}

/// Each file the target's commits change, as the base holds it and as the commits leave it.
/// Groups that stack (one commit on another) are shown as their net effect, one diff per file;
/// groups proposed each on its own from the base ([`Stacking::Alone`]) are shown one by one.
fn target_diffs(
    repository: &str,
    files: &dyn Files,
    groups: &[ChangeGroup],
    stacking: Stacking,
    problems: &mut Vec<plan::Problem>,
) -> Vec<TargetDiff> {
    // Path → (group, new content); a later group's content already carries an earlier one's
    // edits of the same file (see `ChangeGroup`), so when stacking the last one wins.
    let mut shown: BTreeMap<(Option<&str>, &std::path::Path), &str> = BTreeMap::new();
    for g in groups {
        let group = (stacking == Stacking::Alone).then_some(g.key.as_str());
        for (path, content) in &g.files {
            shown.insert((group, path.as_path()), content.as_str());
        }
    }
    let mut out = Vec::with_capacity(shown.len());
    for ((group, path), updated) in shown {
        let original = match files.read(path) {
            Ok(bytes) => Some(String::from_utf8_lossy(&bytes).into_owned()),
            // A file the plan creates (a new `.argocd-source-<app>.yaml`).
            Err(FilesError::NotFound) => None,
            Err(e) => {
                problems.push(plan::Problem {
                    repository: Some(repository.to_string()),
                    file: Some(path.display().to_string()),
                    ..plan::Problem::new(plan::ProblemReason::DiffUnread(Failure::new(e)))
                });
                continue;
            }
        };
        if original.as_deref() == Some(updated) {
            continue;
        }
        out.push(TargetDiff {
            target: DiffTarget::RepositoryFile {
                repository: repository.to_string(),
                group: group.map(str::to_string),
                path: path
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/"),
            },
            original,
            updated: updated.to_string(),
        });
    }
    out
}

impl<R: Registry> Replanner for TargetPlanner<'_, R> {
    type Plan = TargetPlan;
    type Error = EngineError;

    /// The repository's tree is read from the clone cache's object database (the writer's
    /// [`CommitFiles`]); the planners see it only as [`Files`].
    async fn plan(
        &self,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> Result<Planned<TargetPlan>, EngineError> {
        let found = self.find_rollbacks(repository, files);
        let holds = match found.is_empty() {
            true => std::borrow::Cow::Borrowed(self.holds),
            false => std::borrow::Cow::Owned(self.holds.clone().with(found.iter().cloned())),
        };
        let promotions =
            super::promotions::gather(self.policies, repository, files, self.promotions, &holds)
                .await;
        let mut planned = self
            .plan_target(repository, files, (&holds, &promotions))
            .await?;
        planned.plan.plan.holds_found = found;
        planned.plan.tip = Some(files.commit());
        Ok(planned)
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::files::Directory;

    fn group(key: &str, path: &str, content: &str) -> ChangeGroup {
        ChangeGroup {
            applications: Vec::new(),
            key: key.into(),
            files: [(PathBuf::from(path), content.to_string())].into(),
            changes: Vec::new(),
        }
    }

    fn base() -> (tempfile::TempDir, Directory) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("app.yaml"), "a: 1\nb: 1\n").unwrap();
        let files = Directory::open(dir.path()).unwrap();
        (dir, files)
    }

    #[test]
    fn stacked_groups_show_each_file_once_as_the_last_commit_leaves_it() {
        let (_dir, files) = base();
        // The second commit carries the first one's edit (see `ChangeGroup`).
        let groups = [
            group("a", "app.yaml", "a: 2\nb: 1\n"),
            group("b", "app.yaml", "a: 2\nb: 2\n"),
            group("web", "web/.argocd-source-web.yaml", "kustomize: {}\n"),
        ];
        let mut problems = Vec::new();
        let diffs = target_diffs(
            "manifests",
            &files,
            &groups,
            Stacking::Stacked,
            &mut problems,
        );
        assert!(problems.is_empty(), "{problems:?}");
        let shown: Vec<(&DiffTarget, Option<&str>, &str)> = diffs
            .iter()
            .map(|d| (&d.target, d.original.as_deref(), d.updated.as_str()))
            .collect();
        let file = |path: &str| DiffTarget::RepositoryFile {
            repository: "manifests".into(),
            group: None,
            path: path.into(),
        };
        assert_eq!(
            shown,
            [
                (&file("app.yaml"), Some("a: 1\nb: 1\n"), "a: 2\nb: 2\n"),
                (
                    &file("web/.argocd-source-web.yaml"),
                    None,
                    "kustomize: {}\n"
                ),
            ]
        );
    }

    #[test]
    fn groups_proposed_alone_are_each_shown_against_the_base() {
        let (_dir, files) = base();
        let groups = [
            group("a", "app.yaml", "a: 2\nb: 1\n"),
            group("b", "app.yaml", "a: 1\nb: 2\n"),
        ];
        let mut problems = Vec::new();
        let diffs = target_diffs("manifests", &files, &groups, Stacking::Alone, &mut problems);
        let shown: Vec<(Option<&str>, &str)> = diffs
            .iter()
            .map(|d| match &d.target {
                DiffTarget::RepositoryFile { group, .. } => (group.as_deref(), d.updated.as_str()),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            shown,
            [(Some("a"), "a: 2\nb: 1\n"), (Some("b"), "a: 1\nb: 2\n")]
        );
        assert!(
            diffs
                .iter()
                .all(|d| d.original.as_deref() == Some("a: 1\nb: 1\n"))
        );
    }
}
