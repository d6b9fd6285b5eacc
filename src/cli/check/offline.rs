//! `tagpilot check` beyond parsing, found without connecting anywhere: what the writers would
//! refuse about a configured repository (environment variables set, key files readable,
//! templates that render) and what `tagpilot run` would refuse of `notifications:`, so that a run does not discover it at its first fetch; what the
//! manifests show (targets that match no file, markers that resolve to nothing), in the local
//! directory and in each repository as the clone cache last fetched it; and the Applications
//! `applications.fromGit` names, resolved. Nothing here fetches.

use crate::application::Origin;
use crate::argocd::ArgoError;
use crate::argocd::plan::in_place;
use crate::argocd::read::image_updater;
use crate::argocd::read::load::{Found, read_tree};
use crate::argocd::resolve::{self, Resolved};
use crate::config::Config;
use crate::config::repository::WriteMode;
use crate::files::Directory;
use crate::forge::{self, ForgeError};
use crate::git::GitError;
use crate::git::{CommitFiles, RepoCache, RepositoryConfig, cached_snapshot};
use crate::plan::{self, Finding, FindingKind, Plan, PlanError, Scope};
use crate::policy::ImagePolicy;

/// One thing wrong with a configured repository.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A `notifications.sinks` entry `tagpilot run` would refuse at start.
    #[error("notifications.sinks")]
    Notifications(#[source] crate::run::notify::NotifyError),
}

/// Every configured repository checked offline; each problem names its repository.
pub fn check_repositories(config: &Config) -> Vec<CheckError> {
    let mut problems = Vec::new();
    for repo in &config.repositories {
        if let Err(e) = repo.check_offline() {
            problems.push(e.into());
            continue;
        }
        if repo.write.mode == WriteMode::PullRequest
            && let Err(source) = forge::check_templates(&repo.write, &repo.branch)
        {
            problems.push(
                ForgeError::Template {
                    repository: repo.name.clone(),
                    source,
                }
                .into(),
            );
        }
    }
    if let Some(notifications) = &config.notifications {
        problems.extend(
            crate::run::notify::check(notifications)
                .into_iter()
                .map(CheckError::Notifications),
        );
    }
    problems
}

/// The manifests `tagpilot check` can read offline, scanned without a registry: the local
/// directory (the one holding `tagpilot.yaml`, as `tagpilot plan` reads it by default) and each
/// repository the policies name as the clone cache last fetched it. The plan holds their
/// findings, marker and ownership problems and skipped files; the strings name the
/// repositories not read (not in the cache yet). tagpilot's own config and policy files are
/// not manifests.
pub fn check_manifests(
    config: &Config,
    policies: &[ImagePolicy],
    cache: Option<&RepoCache>,
) -> Result<(Plan, Vec<String>), CheckError> {
    let scope = Scope {
        root: config.base_dir().to_path_buf(),
        repository: None,
        holds: Default::default(),
        promotions: Default::default(),
        exclude: config
            .path
            .iter()
            .cloned()
            .chain(policies.iter().map(|p| p.source.file.clone()))
            .collect(),
    };
    let mut plan = plan::survey(&scope, policies)?;
    point_at_repositories(config, policies, cache, &mut plan);
    let mut unread = Vec::new();
    for repository in &config.repositories {
        let named = policies.iter().any(|p| {
            p.targets
                .iter()
                .any(|t| t.repository.as_deref() == Some(repository.name.as_str()))
        });
        if !named {
            continue;
        }
        match cached(cache, repository) {
            Ok(files) => plan.merge(plan::survey_files(&files, &repository.name, policies)),
            Err(why) => unread.push(crate::error_chain::chain(&why)),
        }
    }
    Ok((plan, unread))
}

/// A local target that matches no file may have been meant for a configured repository
/// (`repository:` left out): each local "match no file" finding names the repositories whose
/// files, as the clone cache last fetched them, the policy's local targets do match.
fn point_at_repositories(
    config: &Config,
    policies: &[ImagePolicy],
    cache: Option<&RepoCache>,
    plan: &mut Plan,
) {
    let missed: Vec<usize> = plan
        .findings
        .iter()
        .enumerate()
        .filter(|(_, f)| f.kind == FindingKind::NoFiles && f.repository.is_none())
        .map(|(i, _)| i)
        .collect();
    if missed.is_empty() {
        return;
    }
    let snapshots: Vec<(&str, CommitFiles)> = config
        .repositories
        .iter()
        .filter_map(|r| Some((r.name.as_str(), cached(cache, r).ok()?)))
        .collect();
    for i in missed {
        let finding = &mut plan.findings[i];
        let Some(policy) = policies
            .iter()
            .find(|p| Some(&p.name) == finding.policy.as_ref())
        else {
            continue;
        };
        let local: Vec<&crate::policy::Target> = policy
            .targets
            .iter()
            .filter(|t| t.repository.is_none() && !t.paths.is_empty())
            .collect();
        for (name, files) in &snapshots {
            use crate::files::Files;
            let matching = files
                .manifests()
                .iter()
                .filter(|f| local.iter().any(|t| t.matches(f)))
                .count();
            if matching > 0 {
                finding.searched.push_str(&format!(
                    "; repository {name} has {matching} matching file{} as last fetched: \
                     add `repository: {name}` to the target to update them there",
                    if matching == 1 { "" } else { "s" }
                ));
            }
        }
    }
}

/// What `tagpilot check` reads of `applications.fromGit` without connecting anywhere, and what
/// each Application resolves to.
#[derive(Debug, Default)]
pub struct ApplicationsCheck {
    pub resolved: Resolved,
    /// How many Applications the files hold (those nothing configures included).
    pub applications: usize,
    /// How many `ImageUpdater` resources they hold.
    pub updaters: usize,
    /// Files that could not be read, resources that cannot be honoured, Applications two
    /// resources select.
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
    /// Repositories whose files were not read: the clone cache holds none of them yet.
    pub unread: Vec<String>,
    /// Repositories read from the clone cache, each once: the commit read and when it was
    /// fetched, since offline the files may be older than the remote's.
    pub cached: Vec<String>,
    /// Annotations nothing reads, and images an Application's source holds no field for,
    /// where its repository is in the clone cache.
    pub findings: Vec<Finding>,
}

/// Reads the Applications and `ImageUpdater` resources `applications.fromGit` names, offline:
/// the local directory's directly, a repository's as the clone cache last fetched it (none
/// when `tagpilot plan` has not fetched it yet), and resolves them as a cycle would. `None`
/// without `applications.fromGit`.
pub fn check_applications(
    config: &Config,
    cache: Option<&RepoCache>,
) -> Result<Option<ApplicationsCheck>, ArgoError> {
    let entries = match &config.applications {
        Some(a) if !a.from_git.is_empty() => &a.from_git,
        _ => return Ok(None),
    };
    let mut out = ApplicationsCheck::default();
    let mut found = Found::default();
    for entry in entries {
        let Some(name) = &entry.repository else {
            let files = Directory::open(config.base_dir()).map_err(PlanError::from)?;
            read_tree(&files, "", &entry.paths, &mut found, &mut out.problems)?;
            continue;
        };
        let repository = config
            .repositories
            .iter()
            .find(|r| &r.name == name)
            .ok_or_else(|| ArgoError::UnknownRepository(name.clone()))?;
        match cached(cache, repository) {
            Ok(files) => {
                out.note_cached(cache, repository, &files);
                read_tree(
                    &files,
                    &format!("{name}:"),
                    &entry.paths,
                    &mut found,
                    &mut out.problems,
                )?;
            }
            Err(why) => out.unread.push(crate::error_chain::chain(&why)),
        }
    }
    out.applications = found.apps.len();
    out.updaters = found.updaters.len();
    let apps = found.apps.into_iter().map(|a| (a, Origin::Git)).collect();
    let selection = image_updater::select(apps, &found.updaters);
    out.problems.extend(selection.problems);
    out.warnings.extend(selection.warnings);
    let unread = selection.unread;
    // Offline, a remote's default branch is not asked: `targetRevision: HEAD` stays `HEAD`.
    let head = |_: &str| Ok::<_, std::convert::Infallible>("HEAD".to_string());
    let allowed = config
        .applications
        .as_ref()
        .map(|a| a.allowed_repositories())
        .unwrap_or_default();
    out.resolved = resolve::resolve_selected(selection.apps, &config.repositories, &allowed, &head);
    let not_found = images_not_found(&mut out, cache);
    out.findings = crate::engine::unknown_annotations(&out.resolved, &unread);
    out.findings.extend(not_found);
    Ok(Some(out))
}

/// Each Application image its source's files (as last fetched) hold no field for; sources in
/// a repository the cache does not hold are not searched.
fn images_not_found(check: &mut ApplicationsCheck, cache: Option<&RepoCache>) -> Vec<Finding> {
    let Some(cache) = cache else {
        return Vec::new();
    };
    // A repository not in the cache is not searched; what it holds is unknown offline.
    let mut snapshots: Vec<Option<CommitFiles>> = Vec::new();
    for r in check.resolved.repositories.clone() {
        let files = cached(Some(cache), &r).ok();
        if let Some(files) = &files {
            check.note_cached(Some(cache), &r, files);
        }
        snapshots.push(files);
    }
    let resolved = &check.resolved;
    let mut out = Vec::new();
    for app in &resolved.apps {
        for unit in &app.units {
            let Some(files) = resolved
                .repositories
                .iter()
                .position(|r| r.name == unit.repository)
                .and_then(|i| snapshots[i].as_ref())
            else {
                continue;
            };
            for (image, policy) in app.annotations.images.iter().zip(&app.policies) {
                let Some(policy) = policy else { continue };
                if image.force_update
                    || in_place::current_in_source(files, &unit.root, image, policy).is_some()
                {
                    continue;
                }
                let kind = unit
                    .kind
                    .unwrap_or_else(|| in_place::detect(files, &unit.root));
                out.push(Finding {
                    repository: Some(unit.repository.clone()),
                    policy: Some(resolve::policy_name(&app.app, &image.alias)),
                    application: Some(app.app.id()),
                    ..Finding::new(
                        FindingKind::ApplicationImageNotFound,
                        policy.image.to_string(),
                        format!(
                            "source {} ({}) at {}:{} as last fetched",
                            unit.source + 1,
                            kind.name(),
                            unit.repository,
                            resolve::display(&unit.root)
                        ),
                    )
                });
            }
        }
    }
    out
}

/// Why a repository's files cannot be read offline.
#[derive(Debug, thiserror::Error)]
pub enum CachedError {
    #[error("repository {repository}: the clone cache cannot be read")]
    Unreadable {
        repository: String,
        #[source]
        source: GitError,
    },
    #[error("repository {repository}: not in the clone cache yet (tagpilot plan fetches it)")]
    NotCached { repository: String },
}

/// `repository`'s files as the clone cache last fetched them, or why they cannot be read
/// offline.
fn cached(
    cache: Option<&RepoCache>,
    repository: &RepositoryConfig,
) -> Result<CommitFiles, CachedError> {
    let repository_name = || repository.name.clone();
    match cache.map(|c| cached_snapshot(c, repository)) {
        Some(Ok(Some(files))) => Ok(files),
        Some(Err(source)) => Err(CachedError::Unreadable {
            repository: repository_name(),
            source,
        }),
        _ => Err(CachedError::NotCached {
            repository: repository_name(),
        }),
    }
}

impl ApplicationsCheck {
    /// Keeps which commit of `repository` the clone cache gave, and when it was fetched.
    fn note_cached(
        &mut self,
        cache: Option<&RepoCache>,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) {
        let commit = files.commit();
        let fetched = cache
            .and_then(|c| crate::git::cached_fetch_time(c, repository))
            .map_or_else(
                || "fetched at an unrecorded time".to_string(),
                |t| {
                    // Whole seconds, never rounded up past when it was.
                    let whole = jiff::TimestampRound::new()
                        .smallest(jiff::Unit::Second)
                        .mode(jiff::RoundMode::Trunc);
                    format!("fetched {}", t.round(whole).unwrap_or(t))
                },
            );
        let line = format!(
            "repository {} as the clone cache holds it: commit {}, {fetched}",
            repository.name,
            &commit[..commit.len().min(12)]
        );
        if !self.cached.contains(&line) {
            self.cached.push(line);
        }
    }

    /// Whether anything here makes `tagpilot check` exit 1.
    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty() || self.resolved.apps.iter().any(|a| !a.problems.is_empty())
    }

    /// `tagpilot check`'s section on `applications.fromGit`: how many Applications and
    /// resources, what each resolves to, and what could not be read.
    pub fn text(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        let mut out = format!(
            "\nApplications (applications.fromGit): {}, {}\n",
            plural(self.applications, "Application", "Applications"),
            plural(
                self.updaters,
                "ImageUpdater resource",
                "ImageUpdater resources"
            ),
        );
        for c in &self.cached {
            out.push_str(&format!("  read: {c}\n"));
        }
        out.push_str(&crate::report::applications::resolved_text(&self.resolved));
        let found = Plan {
            findings: self.findings.clone(),
            ..Plan::default()
        };
        // Indented under the section.
        for line in crate::report::findings_table(&found)
            .lines()
            .filter(|l| !l.is_empty())
        {
            out.push_str(&format!("  {line}\n"));
        }
        for u in &self.unread {
            out.push_str(&format!("  not read: {u}\n"));
        }
        for p in &self.problems {
            out.push_str(&format!("  problem: {p}\n"));
        }
        for w in &self.warnings {
            out.push_str(&format!("  warning: {w}\n"));
        }
        out
    }
}
