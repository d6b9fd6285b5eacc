//! From annotated Applications to what tagpilot plans: one [`ImagePolicy`] per image, the git
//! repositories to write (matched to `repositories:` by URL, or synthesised), and per source the
//! place its changes land.
//!
//! Pure: the remote default branch (for `targetRevision: HEAD`) is asked through a callback, so
//! this module opens no connection itself.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::Path;

use crate::config::repository::WriteMode;
use crate::git::RepositoryConfig;
use crate::image::Repository;
use crate::policy::{ImagePolicy, PolicyError, Strategy};

use super::annotations::{
    AnnotatedImage, AppAnnotations, GitBranch, GitCredentials, PullRequestProvider,
    SkippedAnnotation, UpdateStrategy, WriteBackMethod, WriteBackTarget,
};
use super::application::{Application, Source};
use super::branch::BranchTemplate;
use super::image_updater::Selected;

/// Where an Application came from decides what `write-back-method: argocd` can do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Git,
    Cluster,
}

/// An Application with Image Updater annotations, ready to plan.
#[derive(Debug, Clone)]
pub struct ManagedApp {
    pub app: Application,
    pub origin: Origin,
    pub annotations: AppAnnotations,
    /// One per image of `image-list`, in order; `None` where the image's settings are invalid
    /// (the reason is in `annotations.skipped`).
    pub policies: Vec<Option<ImagePolicy>>,
    /// Where the app's changes are written, one entry per source that has a git path.
    pub units: Vec<Unit>,
    /// Patch the Application through the Kubernetes API instead of writing to git.
    pub patch: bool,
    /// `write-back-method: git…`.
    pub git_write: bool,
    /// App-level problems (no repository to write to, a method that cannot work here).
    pub problems: Vec<String>,
    /// The `ImageUpdater` resource entry that configures it; `None`: its annotations.
    pub configured_by: Option<super::image_updater::ConfiguredBy>,
}

/// What makes two units one repository target: the URL, the branch, the branch template and
/// whether changes go through pull requests.
type RepositoryKey = (String, String, Option<String>, bool);

/// One source of an app, and where in which repository its changes go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// 0-based index into [`Application::sources`].
    pub source: usize,
    /// `repositories[].name` (configured or synthesised).
    pub repository: String,
    /// The source's `path`, relative to the repository root, `/`-separated, no trailing `/`
    /// (`""` for the root).
    pub root: String,
    /// The source type from the spec (`helm:`, `kustomize:`, `directory:`); detected from the
    /// files at plan time when absent.
    pub kind: Option<SourceKind>,
    pub write: UnitWrite,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    Directory,
    Kustomize,
    Helm,
}

impl SourceKind {
    pub fn name(self) -> &'static str {
        match self {
            SourceKind::Directory => "directory",
            SourceKind::Kustomize => "kustomize",
            SourceKind::Helm => "helm",
        }
    }
}

/// How a unit is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnitWrite {
    /// Directory sources: the manifests under the root, in place.
    Manifests {
        recurse: bool,
        include: Option<String>,
        exclude: Option<String>,
    },
    /// `write-back-target: kustomization[:dir]`: this directory's kustomization, in place.
    Kustomization { dir: String },
    /// `write-back-target: helmvalues[:file]`: this values file, in place.
    HelmValues { file: String },
    /// No target: `.argocd-source-<app>.yaml` in the root (its content depends on the kind).
    OverrideFile { file: String },
}

/// Everything resolved from a set of Applications.
#[derive(Debug, Clone, Default)]
pub struct Resolved {
    pub apps: Vec<ManagedApp>,
    /// The repositories the units name, in first-use order.
    pub repositories: Vec<RepositoryConfig>,
    /// `git-branch` targets whose name depends on the changes, by repository name: their
    /// `write.branch` holds the template until the changes are planned.
    pub branch_templates: BTreeMap<String, BranchTemplate>,
}

impl Resolved {
    /// Keeps only the apps with an image in `images` (each kept whole: its `.argocd-source`
    /// file is written whole), and the repositories and branch templates they use.
    pub fn keep_images(&mut self, images: &BTreeSet<Repository>) {
        self.apps.retain(|a| {
            a.policies
                .iter()
                .flatten()
                .any(|p| images.contains(&p.image))
        });
        let used = |name: &str| {
            self.apps
                .iter()
                .any(|a| a.units.iter().any(|u| u.repository == name))
        };
        let repositories = std::mem::take(&mut self.repositories);
        self.repositories = repositories.into_iter().filter(|r| used(&r.name)).collect();
        let templates = std::mem::take(&mut self.branch_templates);
        self.branch_templates = templates
            .into_iter()
            .filter(|(name, _)| used(name))
            .collect();
    }

    /// The apps with at least one unit in `repository`.
    pub fn apps_in(&self, repository: &str) -> impl Iterator<Item = (usize, &ManagedApp)> {
        self.apps
            .iter()
            .enumerate()
            .filter(move |(_, a)| a.units.iter().any(|u| u.repository == repository))
    }
}

/// Resolves every annotated Application (the others are left out). `default_branch` answers
/// `targetRevision: HEAD` for repositories not configured in `tagpilot.yaml` (its error, of
/// whatever type the asker has, is shown in the app's problems).
pub fn resolve<E: fmt::Display>(
    apps: Vec<(Application, Origin)>,
    configured: &[RepositoryConfig],
    default_branch: &dyn Fn(&str) -> Result<String, E>,
) -> Resolved {
    resolve_selected(
        super::image_updater::select(apps, &[]).apps,
        configured,
        default_branch,
    )
}

/// Resolves Applications whose configuration is already chosen
/// ([`super::image_updater::select`]: from their annotations or an `ImageUpdater` resource);
/// those with none are left out.
pub fn resolve_selected<E: fmt::Display>(
    apps: Vec<Selected>,
    configured: &[RepositoryConfig],
    default_branch: &dyn Fn(&str) -> Result<String, E>,
) -> Resolved {
    let mut out = Resolved::default();
    // Sized once: thousands of Applications grown by doubling would hold up to three copies'
    // worth of memory while the vector moves.
    out.apps.reserve_exact(apps.len());
    let mut repos: BTreeMap<RepositoryKey, String> = BTreeMap::new();
    for selected in apps {
        let Selected {
            app,
            origin,
            settings,
            configured_by,
            problems,
        } = selected;
        let Some(mut annotations) = settings else {
            continue;
        };
        annotations.images.shrink_to_fit();
        let mut problems = problems;
        // A filter, range or strategy that cannot be read blocks its image, with a problem:
        // never "no filter", which would widen what the user asked for.
        let policies = annotations
            .images
            .iter()
            .map(|image| {
                if image.is_blocked() {
                    for u in &image.unreadable {
                        problems.push(format!(
                            "image {:?}: {u}; the image is not updated",
                            image.alias
                        ));
                    }
                    return None;
                }
                match policy(&app, image) {
                    Ok(p) => Some(p),
                    Err(reason) => {
                        problems.push(format!(
                            "image {:?}: {reason}; the image is not updated",
                            image.alias
                        ));
                        None
                    }
                }
            })
            .collect();
        let mut managed = ManagedApp {
            app,
            origin,
            annotations,
            policies,
            units: Vec::new(),
            patch: false,
            git_write: false,
            problems,
            configured_by,
        };
        // Nothing to write for an app whose configuration names no image (a conflict between
        // resources, say): it is only reported.
        if !managed.annotations.images.is_empty() {
            plan_units(
                &mut managed,
                origin,
                configured,
                default_branch,
                &mut repos,
                &mut out,
            );
        }
        managed.units.shrink_to_fit();
        out.apps.push(managed);
    }
    out.apps.shrink_to_fit();
    out
}

/// The policy for one annotated image. Its targets are set per checkout, when the files are
/// known.
fn policy(app: &Application, image: &AnnotatedImage) -> Result<ImagePolicy, PolicyError> {
    let strategy = match image.strategy {
        UpdateStrategy::Semver => Strategy::semver(image.constraint.as_deref(), false)?,
        UpdateStrategy::NewestBuild => Strategy::NewestBuild,
        UpdateStrategy::Alphabetical => Strategy::Alphabetical { descending: true },
        UpdateStrategy::Digest => Strategy::Digest {
            tag: image
                .constraint
                .clone()
                .unwrap_or_else(|| "latest".to_string()),
        },
    };
    let mut p = ImagePolicy::adhoc(&image.image, strategy)?;
    p.name = policy_name(app, &image.alias);
    p.namespace = app.metadata.namespace.clone();
    if let Some(re) = &image.allow_tags {
        p.set_allow_tags(re)?;
    }
    p.set_ignore_tags(&image.ignore_tags)?;
    p.platforms = image.platforms.clone();
    p.min_age = image.min_age;
    // Image Updater's choice, read from its `GetNewestVersionFromTags`
    // (registry-scanner/pkg/image/version.go): the current tag is not read at all, so `latest`
    // (or no tag) is replaced, and every version parses as Masterminds reads it (`1.0` is
    // 1.0.0), so a file on `1.0` moves to the highest version of any precision. Its tests
    // (`Test_LatestVersion`) are the cases of `image_updater_choices` below. Never moving
    // backwards and never leaving a variant family stay tagpilot's own rules.
    p.replace_unreadable_tags = true;
    p.keep_precision = false;
    Ok(p)
}

/// `<app>/<alias>`: what reports, commit trailers and groups call an app's image.
pub fn policy_name(app: &Application, alias: &str) -> String {
    format!("{}/{alias}", app.metadata.name)
}

/// The `.argocd-source-<app>.yaml` name Argo CD merges for this app (`<ns>_<app>` for apps
/// outside Argo CD's own namespace, "apps in any namespace").
pub fn override_file_name(app: &Application) -> String {
    match app.metadata.namespace.as_deref() {
        Some(ns) if ns != "argocd" => format!(".argocd-source-{ns}_{}.yaml", app.metadata.name),
        _ => format!(".argocd-source-{}.yaml", app.metadata.name),
    }
}

fn plan_units<E: fmt::Display>(
    managed: &mut ManagedApp,
    origin: Origin,
    configured: &[RepositoryConfig],
    default_branch: &dyn Fn(&str) -> Result<String, E>,
    repos: &mut BTreeMap<RepositoryKey, String>,
    out: &mut Resolved,
) {
    let sources: Vec<Source> = managed.app.sources().into_iter().cloned().collect();
    let git_write = matches!(managed.annotations.write_back, WriteBackMethod::Git(_));
    managed.git_write = git_write;
    managed.patch = !git_write && origin == Origin::Cluster;
    for (index, source) in sources.iter().enumerate() {
        if source.chart.is_none() && source.path.is_none() && source.reference.is_some() {
            // A values-only `ref` source is written through the source that names it.
            continue;
        }
        if source.chart.is_some()
            && git_write
            && let Some(WriteBackTarget::HelmValues(Some(file))) =
                managed.annotations.write_back_target.clone()
            && !file.starts_with('$')
        {
            // A chart from a Helm or OCI repository with its values in git, Argo CD's layout for
            // charts one does not own. Image Updater writes `helmvalues:<file>` to
            // `git-repository`, the path taken from that repository's root (its `parseTarget`
            // joins the chart source's empty path; a leading `/` is dropped).
            let Some((url, revision)) = chart_values_repository(&managed.annotations, &sources)
            else {
                managed.problems.push(format!(
                    "source {}: write-back-target helmvalues:{file} on the chart {} from {} \
                     names no git repository: set git-repository (Image Updater writes there), \
                     or add one `ref` source in git",
                    index + 1,
                    source.chart.as_deref().unwrap_or_default(),
                    crate::git::auth::redact_url(&source.repo_url),
                ));
                continue;
            };
            let revision = managed
                .annotations
                .git_branch
                .as_ref()
                .and_then(|b| b.base.clone())
                .or(revision);
            if let Some(name) = repository_for(
                managed,
                &url,
                revision.as_deref(),
                configured,
                default_branch,
                repos,
                out,
            ) {
                managed.units.push(Unit {
                    source: index,
                    repository: name,
                    root: String::new(),
                    kind: Some(SourceKind::Helm),
                    write: UnitWrite::HelmValues {
                        file: relative_to("", Some(&file)),
                    },
                });
            }
            continue;
        }
        if source.chart.is_some()
            && !matches!(
                (&managed.annotations.write_back_target, values_file(source, None)),
                (Some(WriteBackTarget::HelmValues(f)), first) if f.as_deref().or(first).is_some_and(|f| f.starts_with('$'))
            )
        {
            // A chart from a Helm repository has no files in git; only a `$ref` values file
            // does.
            continue;
        }
        let root = clean_path(source.path.as_deref().unwrap_or(""));
        let kind = if source.helm.is_some() {
            Some(SourceKind::Helm)
        } else if source.kustomize.is_some() {
            Some(SourceKind::Kustomize)
        } else if source.directory.is_some() {
            Some(SourceKind::Directory)
        } else if !managed.app.is_multi_source() {
            // Argo CD records what it detected.
            match managed
                .app
                .status
                .as_ref()
                .and_then(|s| s.source_type.as_deref())
            {
                Some("Helm") => Some(SourceKind::Helm),
                Some("Kustomize") => Some(SourceKind::Kustomize),
                Some("Directory") => Some(SourceKind::Directory),
                _ => None,
            }
        } else {
            None
        };
        let write_url = managed
            .annotations
            .git_repository
            .clone()
            .unwrap_or_else(|| source.repo_url.clone());
        let write = match (&managed.annotations.write_back_target, kind) {
            (_, Some(SourceKind::Directory)) => directory_write(source),
            (Some(WriteBackTarget::Kustomization(dir)), _) => UnitWrite::Kustomization {
                dir: relative_to(&root, dir.as_deref()),
            },
            (Some(WriteBackTarget::HelmValues(file)), _) => {
                let file = match file.as_deref().filter(|f| !f.starts_with('$')) {
                    Some(f) => relative_to(&root, Some(f)),
                    None => match values_file(source, file.as_deref()) {
                        Some(f) if f.starts_with('$') => {
                            match ref_values_file(&sources, f) {
                                Some((url, path, revision)) => {
                                    // The values live in another source's repository, at
                                    // that source's revision.
                                    let revision = managed
                                        .annotations
                                        .git_branch
                                        .as_ref()
                                        .and_then(|b| b.base.clone())
                                        .or(revision);
                                    if let Some(name) = repository_for(
                                        managed,
                                        &url,
                                        revision.as_deref(),
                                        configured,
                                        default_branch,
                                        repos,
                                        out,
                                    ) {
                                        managed.units.push(Unit {
                                            source: index,
                                            repository: name,
                                            root: root.clone(),
                                            kind,
                                            write: UnitWrite::HelmValues { file: path },
                                        });
                                    }
                                    continue;
                                }
                                None => {
                                    managed.problems.push(format!(
                                        "source {}: value file {f:?} names no source with that `ref`",
                                        index + 1
                                    ));
                                    continue;
                                }
                            }
                        }
                        Some(f) => relative_to(&root, Some(f)),
                        None => relative_to(&root, Some("values.yaml")),
                    },
                };
                UnitWrite::HelmValues { file }
            }
            (None, _) => {
                if !git_write && kind.is_some() {
                    if !managed.patch {
                        managed.problems.push(argocd_from_git(&managed.annotations));
                    }
                    continue;
                }
                if managed.patch {
                    // Patched through the API; only a Directory source would need git, and
                    // Argo CD said this one is not.
                    continue;
                }
                // Kind unknown until the files are seen: a Directory source is written in
                // place, a Kustomize or Helm one here (git) or not at all (argocd, from git).
                UnitWrite::OverrideFile {
                    file: join(&root, &override_file_name(&managed.app)),
                }
            }
        };
        let revision = managed
            .annotations
            .git_branch
            .as_ref()
            .and_then(|b| b.base.clone())
            .or_else(|| source.target_revision.clone());
        if let Some(name) = repository_for(
            managed,
            &write_url,
            revision.as_deref(),
            configured,
            default_branch,
            repos,
            out,
        ) {
            managed.units.push(Unit {
                source: index,
                repository: name,
                root,
                kind,
                write,
            });
        }
    }
    managed.problems.dedup();
    if managed.units.is_empty() && !managed.patch && managed.problems.is_empty() {
        managed
            .problems
            .push("no source with a git path to write to".to_string());
    }
}

/// Why `write-back-method: argocd` cannot work for an app read from git.
pub fn argocd_from_git(a: &AppAnnotations) -> String {
    format!(
        "write-back-method {} patches the live Application through the Kubernetes API; \
         with applications.fromGit there is none to patch: set write-back-method: git",
        if a.write_back_explicit {
            "argocd"
        } else {
            "argocd (Image Updater's default)"
        }
    )
}

fn directory_write(source: &Source) -> UnitWrite {
    let d = source.directory.clone().unwrap_or_default();
    UnitWrite::Manifests {
        recurse: d.recurse,
        include: d.include,
        exclude: d.exclude,
    }
}

/// The values file a `helmvalues` target means: its own argument, else the first `valueFiles`.
fn values_file<'s>(source: &'s Source, arg: Option<&'s str>) -> Option<&'s str> {
    arg.or_else(|| {
        source
            .helm
            .as_ref()
            .and_then(|h| h.value_files.first())
            .map(String::as_str)
    })
}

/// The git repository a chart's `helmvalues:<file>` is written to, and the revision to write
/// at: `git-repository` when set (at the revision of the source with that URL, as Image
/// Updater's `getWriteBackBranch` finds it), else the app's only `ref` source in git.
fn chart_values_repository(
    annotations: &AppAnnotations,
    sources: &[Source],
) -> Option<(String, Option<String>)> {
    let revision_of = |url: &str| {
        sources
            .iter()
            .find(|s| s.chart.is_none() && normalise_url(&s.repo_url) == normalise_url(url))
            .and_then(|s| s.target_revision.clone())
    };
    if let Some(url) = &annotations.git_repository {
        return Some((url.clone(), revision_of(url)));
    }
    let mut refs = sources
        .iter()
        .filter(|s| s.chart.is_none() && s.reference.is_some());
    match (refs.next(), refs.next()) {
        (Some(only), None) => Some((only.repo_url.clone(), only.target_revision.clone())),
        _ => None,
    }
}

/// `$values/envs/prod.yaml` → (the `values` source's repoURL, `envs/prod.yaml`, its
/// `targetRevision`).
fn ref_values_file(sources: &[Source], file: &str) -> Option<(String, String, Option<String>)> {
    let rest = file.strip_prefix('$')?;
    let (name, path) = rest.split_once('/')?;
    let source = sources
        .iter()
        .find(|s| s.reference.as_deref() == Some(name))?;
    Some((
        source.repo_url.clone(),
        clean_path(path),
        source.target_revision.clone(),
    ))
}

/// The repository config for a write to `url` at `revision`: the configured entry with that
/// URL (on the revision's branch), or a synthesised one named after the URL.
#[allow(clippy::too_many_arguments)]
fn repository_for<E: fmt::Display>(
    managed: &mut ManagedApp,
    url: &str,
    revision: Option<&str>,
    configured: &[RepositoryConfig],
    default_branch: &dyn Fn(&str) -> Result<String, E>,
    repos: &mut BTreeMap<RepositoryKey, String>,
    out: &mut Resolved,
) -> Option<String> {
    let key_url = normalise_url(url);
    let matched = configured.iter().find(|r| normalise_url(&r.url) == key_url);
    let branch = match revision.map(str::trim) {
        Some(r) if !r.is_empty() && r != "HEAD" => r.to_string(),
        _ => match matched {
            Some(r) => r.branch.clone(),
            None => match default_branch(url) {
                Ok(b) => b,
                Err(e) => {
                    managed.problems.push(format!(
                        "cannot find the default branch of {}: {e}",
                        crate::git::auth::redact_url(url)
                    ));
                    return None;
                }
            },
        },
    };
    let target = match managed.annotations.git_branch.as_ref() {
        Some(GitBranch {
            key,
            target: Some(t),
            ..
        }) => match BranchTemplate::parse(t) {
            Ok(template) => Some(template.render_app()),
            Err(reason) => {
                // Writing to the base instead would push where the user did not ask.
                managed.annotations.skipped.push(SkippedAnnotation {
                    key: key.clone(),
                    reason: format!("template {t:?}: {reason}"),
                });
                managed.problems.push(format!(
                    "{key}: the branch template cannot be rendered, so nothing is written to {}",
                    crate::git::auth::redact_url(url)
                ));
                return None;
            }
        },
        _ => None,
    };
    // From the cluster, tagpilot reads these credentials from Argo CD's Secrets instead.
    if matched.is_none()
        && managed.origin == Origin::Git
        && let WriteBackMethod::Git(c @ (GitCredentials::RepoCreds | GitCredentials::Secret { .. })) =
            &managed.annotations.write_back
        && !url.starts_with("file://")
    {
        let how = match c {
            GitCredentials::RepoCreds => "git:repocreds".to_string(),
            GitCredentials::Secret { namespace, name } => format!("git:secret:{namespace}/{name}"),
            GitCredentials::Configured => unreachable!(),
        };
        managed.problems.push(format!(
            "write-back-method {how}: {} is not configured in tagpilot.yaml `repositories:`; \
             add it there with its credentials (Argo CD's Secrets are read only with applications.fromCluster)",
            crate::git::auth::redact_url(url)
        ));
        return None;
    }
    let pull_request = managed.annotations.pull_request.clone();
    let key = (
        key_url.clone(),
        branch.clone(),
        target.as_ref().map(BranchTemplate::source),
        pull_request.is_some(),
    );
    if let Some(name) = repos.get(&key) {
        return Some(name.clone());
    }
    let mut config = match matched {
        Some(r) => r.clone(),
        None => RepositoryConfig {
            name: key_url.clone(),
            url: url.to_string(),
            branch: branch.clone(),
            auth: Default::default(),
            write: Default::default(),
            forge: None,
        },
    };
    if let Some(pr) = &pull_request {
        let (has_forge, name) = match pr.provider {
            PullRequestProvider::GitHub => (
                config.forge.as_ref().is_some_and(|f| f.github.is_some()),
                "github",
            ),
            PullRequestProvider::GitLab => (
                config.forge.as_ref().is_some_and(|f| f.gitlab.is_some()),
                "gitlab",
            ),
        };
        if !has_forge {
            managed.problems.push(format!(
                "{} asks for pull requests on {name}, and {} has no `forge.{name}` (API URL and \
                 token) in tagpilot.yaml `repositories:`; nothing is written",
                pr.field,
                crate::git::auth::redact_url(url)
            ));
            return None;
        }
        config.write.mode = WriteMode::PullRequest;
        for l in &pr.labels {
            if !config.write.labels.contains(l) {
                config.write.labels.push(l.clone());
            }
        }
    }
    let base_name = config.name.clone();
    if config.branch != branch
        || (matched.is_some() && target.is_some())
        || (matched.is_some_and(|m| m.write.mode != WriteMode::PullRequest)
            && pull_request.is_some())
    {
        config.name = format!("{base_name}@{branch}");
    }
    config.branch = branch;
    if let Some(t) = &target {
        // A name that depends on the changes is rendered once they are planned
        // ([`super::render_branches`]); until then the template stands in for it.
        let text = if t.depends_on_changes() {
            t.source()
        } else {
            let name = t.render(None, &[]);
            if let Err(e) = super::branch::check_branch_name(&name) {
                managed.problems.push(format!(
                    "{e}; nothing is written to {}",
                    crate::git::auth::redact_url(url)
                ));
                return None;
            }
            name
        };
        config.name = format!("{}:{text}", config.name);
        config.write.branch = Some(text);
    }
    // Another app may already use this name for a different branch pairing.
    let mut name = config.name.clone();
    if out.repositories.iter().any(|r| r.name == name) {
        name = format!("{base_name}@{}", config.branch);
    }
    let mut n = 2;
    let first = name.clone();
    while out.repositories.iter().any(|r| r.name == name) {
        name = format!("{first}#{n}");
        n += 1;
    }
    config.name = name.clone();
    out.repositories.push(config);
    if let Some(t) = target.filter(BranchTemplate::depends_on_changes) {
        out.branch_templates.insert(name.clone(), t);
    }
    repos.insert(key, name.clone());
    Some(name)
}

/// A URL reduced to what identifies the repository: no scheme, userinfo, `.git` or trailing
/// `/`; host lowercased; scp-like `git@host:path` read as `host/path`.
pub fn normalise_url(url: &str) -> String {
    let url = url.trim();
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest,
        // scp-like: user@host:path
        None => match url.split_once(':') {
            Some((host, path)) if !host.contains('/') => {
                return normalise_url(&format!("ssh://{host}/{path}"));
            }
            _ => url,
        },
    };
    let rest = match rest.split_once('/') {
        Some((authority, path)) => {
            let host = authority.rsplit('@').next().unwrap_or(authority);
            format!("{}/{path}", host.to_ascii_lowercase())
        }
        None => rest.rsplit('@').next().unwrap_or(rest).to_ascii_lowercase(),
    };
    let rest = rest.trim_end_matches('/');
    rest.strip_suffix(".git").unwrap_or(rest).to_string()
}

/// `a/./b/` → `a/b`; `.` and `/` → `""`.
pub fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            s => parts.push(s),
        }
    }
    parts.join("/")
}

/// A `write-back-target` argument: relative to the source path, or from the repository root
/// with a leading `/`.
fn relative_to(root: &str, arg: Option<&str>) -> String {
    match arg {
        None => root.to_string(),
        Some(a) if a.starts_with('/') => clean_path(a),
        Some(a) => clean_path(&join(root, a)),
    }
}

pub fn join(root: &str, rel: &str) -> String {
    if root.is_empty() {
        clean_path(rel)
    } else {
        clean_path(&format!("{root}/{rel}"))
    }
}

/// `root`-relative path helper for reports.
pub fn display(root: &str) -> &str {
    if root.is_empty() { "." } else { root }
}

/// Whether `path` (repository-relative) lies under `root`.
pub fn under(root: &str, path: &Path) -> bool {
    root.is_empty() || path.starts_with(root)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::application::read_documents;

    fn app(yaml: &str) -> Application {
        read_documents(Path::new("app.yaml"), yaml)
            .unwrap()
            .remove(0)
    }

    fn configured(name: &str, url: &str) -> RepositoryConfig {
        serde_saphyr::from_str(&format!("name: {name}\nurl: {url}\nbranch: main\n")).unwrap()
    }

    const IU: &str = crate::argocd::annotations::IMAGE_UPDATER_PREFIX;

    #[test]
    fn urls_match_whatever_the_spelling() {
        let n = normalise_url;
        assert_eq!(n("https://GitHub.com/acme/m.git/"), "github.com/acme/m");
        assert_eq!(
            n("https://bot:secret@github.com/acme/m"),
            "github.com/acme/m"
        );
        assert_eq!(n("git@github.com:acme/m.git"), "github.com/acme/m");
        assert_eq!(n("ssh://git@github.com/acme/m"), "github.com/acme/m");
        assert_eq!(n("file:///srv/git/m.git"), "/srv/git/m");
    }

    /// Image Updater's `parseTarget` takes `helmvalues:/<path>` from the root of
    /// `git-repository`, at the revision of the source with that URL (`getWriteBackBranch`).
    /// Without `git-repository`, tagpilot writes to the app's only `ref` source in git; with
    /// none, or several, it names the problem.
    #[test]
    fn a_chart_s_helmvalues_go_to_git_repository_or_the_ref_source() {
        let yaml = |extra: &str, refs: &str| {
            format!(
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git\n    {IU}write-back-target: helmvalues:/envs/prod/values.yaml\n{extra}spec:\n  sources:\n    - {{repoURL: 'oci://r.example/charts', chart: shop, targetRevision: 4.2.0}}\n{refs}"
            )
        };
        let one_ref = "    - {repoURL: 'https://git.example/values.git', targetRevision: release, ref: values}\n";
        let resolved = |text: String| {
            let r = resolve(vec![(app(&text), Origin::Git)], &[], &|_| {
                Ok::<_, &str>("main".into())
            });
            let a = &r.apps[0];
            (
                a.problems.clone(),
                a.units.first().map(|u| u.write.clone()),
                r.repositories
                    .first()
                    .map(|c| (c.url.clone(), c.branch.clone())),
            )
        };
        let (problems, write, repo) = resolved(yaml(
            &format!("    {IU}git-repository: https://git.example/values.git\n"),
            one_ref,
        ));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            write,
            Some(UnitWrite::HelmValues {
                file: "envs/prod/values.yaml".into()
            })
        );
        assert_eq!(
            repo,
            Some(("https://git.example/values.git".into(), "release".into()))
        );
        let (problems, _, repo) = resolved(yaml("", one_ref));
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(repo.unwrap().0, "https://git.example/values.git");
        let (problems, write, _) = resolved(yaml("", ""));
        assert_eq!(write, None);
        assert!(
            problems[0].contains("helmvalues:/envs/prod/values.yaml")
                && problems[0].contains("set git-repository"),
            "{problems:?}"
        );
    }

    #[test]
    fn sources_map_to_configured_repositories_branches_and_write_places() {
        let a = app(&format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}image-list: api=r.example/api:~1.2\n    {IU}write-back-method: git\n    {IU}write-back-target: kustomization:../base\nspec:\n  source:\n    repoURL: git@github.com:acme/m.git\n    path: apps/web/overlays/prod\n    targetRevision: HEAD\n    kustomize: {{}}\n"
        ));
        let r = resolve(
            vec![(a, Origin::Git)],
            &[configured("manifests", "https://github.com/acme/m")],
            &|_| Err("not asked"),
        );
        let app = &r.apps[0];
        assert!(app.problems.is_empty(), "{:?}", app.problems);
        assert_eq!(r.repositories.len(), 1);
        assert_eq!(r.repositories[0].name, "manifests");
        assert_eq!(
            app.units,
            vec![Unit {
                source: 0,
                repository: "manifests".into(),
                root: "apps/web/overlays/prod".into(),
                kind: Some(SourceKind::Kustomize),
                write: UnitWrite::Kustomization {
                    dir: "apps/web/overlays/base".into()
                },
            }]
        );
        let p = app.policies[0].as_ref().unwrap();
        assert_eq!(p.name, "web/api");
        assert!(
            matches!(&p.strategy, Strategy::Semver { range: Some(c), .. } if c.as_str() == "~1.2")
        );
    }

    /// Issue 17, "Filters fail closed": an `allow-tags` regexp that does not compile used to
    /// let every tag through. Now the image has no policy (nothing updates it) and the
    /// Application a problem naming the setting and its value; its other images go on.
    #[test]
    fn an_unreadable_filter_blocks_its_image_with_a_problem() {
        let a = app(&format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}image-list: api=r.example/api, ui=r.example/ui\n    {IU}api.allow-tags: 'regexp:^v(\\d+$'\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/web, targetRevision: main}}\n"
        ));
        let r = resolve(vec![(a, Origin::Git)], &[], &|_| Err("not asked"));
        let app = &r.apps[0];
        assert!(app.policies[0].is_none(), "the image is blocked");
        assert!(app.policies[1].is_some(), "the other image is not");
        assert_eq!(
            app.problems,
            vec![format!(
                "image \"api\": {IU}api.allow-tags `regexp:^v(\\d+$` cannot be read: invalid \
                 regexp: error: unclosed group; the image is not updated"
            )]
        );
    }

    /// Issue 17, "A peer's semantics": Applications configured for Image Updater choose as its
    /// semver strategy does ("The current application tag does not need to follow semver",
    /// docs/basics/update-strategies.md). The cases are Image Updater's own `Test_LatestVersion`
    /// (registry-scanner/pkg/image/version_test.go): tags `0.1, 0.5.1, 0.9, 1.0, 1.0.1, 1.1.2,
    /// 2.0.3`; a file on `1.0` goes to `2.0.3` without a constraint, `1.1.2` with `^1.0`,
    /// `1.0.1` with `~1.0` (and with `1.0`, which Masterminds reads as `~1.0`); a file on
    /// `latest`, or on no tag (its `ImageTag` is then empty, update.go), goes to `1.1.2` with
    /// `^1.0` and `2.0.3` without; pre-releases stay out without a constraint ("excludes
    /// pre-release versions").
    #[test]
    fn image_updater_choices() {
        use crate::select::{Decision, TagCandidate, choose};
        let tags: Vec<TagCandidate> = ["0.1", "0.5.1", "0.9", "1.0", "1.0.1", "1.1.2", "2.0.3"]
            .into_iter()
            .map(TagCandidate::new)
            .collect();
        let choice = |entry: &str, current: Option<&str>, tags: &[TagCandidate]| {
            let a = app(&format!(
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  annotations:\n    {IU}image-list: 'api=r.example/{entry}'\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/web, targetRevision: main}}\n"
            ));
            let r = resolve(vec![(a, Origin::Git)], &[], &|_| Err("not asked"));
            let policy = r.apps[0].policies[0].clone().unwrap();
            match choose(&policy, current, tags) {
                Decision::Update(c) => c.tag,
                other => format!("{other:?}"),
            }
        };
        assert_eq!(choice("api", Some("1.0"), &tags), "2.0.3");
        assert_eq!(choice("api:^1.0", Some("1.0"), &tags), "1.1.2");
        assert_eq!(choice("api:~1.0", Some("1.0"), &tags), "1.0.1");
        assert_eq!(choice("api:1.0", Some("1.0"), &tags), "1.0.1");
        assert_eq!(choice("api:^1.0", Some("latest"), &tags), "1.1.2");
        assert_eq!(choice("api", Some("latest"), &tags), "2.0.3");
        assert_eq!(choice("api", None, &tags), "2.0.3");
        let rc: Vec<TagCandidate> = ["v2.2.0", "v2.3.0-rc.0.18.g1abb7b5dd-ppc64le"]
            .into_iter()
            .map(TagCandidate::new)
            .collect();
        assert_eq!(choice("api", Some("v2.1.0"), &rc), "v2.2.0");
        // docs/basics/update-strategies.md: "to allow updates to pre-release versions (e.g.
        // `v2.0-rc1`), you need to append the suffix `-0` to the constraint" (`2.x-0`).
        let rc: Vec<TagCandidate> = ["v1.9.0", "v2.0-rc1"]
            .into_iter()
            .map(TagCandidate::new)
            .collect();
        assert_eq!(choice("api:2.x-0", Some("v1.9.0"), &rc), "v2.0-rc1");
        assert!(choice("api:2.x", Some("v1.9.0"), &rc).starts_with("Hold"));
    }

    #[test]
    fn head_asks_for_the_default_branch_and_other_revisions_get_their_own_repository() {
        let yaml = |name: &str, rev: &str| {
            format!(
                "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: apps/{name}, targetRevision: {rev}}}\n"
            )
        };
        let r = resolve(
            vec![
                (app(&yaml("a", "HEAD")), Origin::Git),
                (app(&yaml("b", "trunk")), Origin::Git),
                (app(&yaml("c", "release")), Origin::Git),
            ],
            &[],
            &|_| Ok::<_, &str>("trunk".into()),
        );
        let names: Vec<(&str, &str)> = r
            .repositories
            .iter()
            .map(|c| (c.name.as_str(), c.branch.as_str()))
            .collect();
        assert_eq!(
            names,
            vec![("/srv/m", "trunk"), ("/srv/m@release", "release")]
        );
        assert_eq!(r.apps[0].units[0].repository, r.apps[1].units[0].repository);
        assert!(matches!(
            &r.apps[0].units[0].write,
            UnitWrite::OverrideFile { file } if file == "apps/a/.argocd-source-a.yaml"
        ));
    }

    #[test]
    fn argocd_method_from_git_is_a_problem_and_from_cluster_a_patch() {
        let yaml = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: team-a\n  annotations:\n    {IU}image-list: r.example/api\nspec:\n  source: {{repoURL: 'file:///srv/m.git', path: web, helm: {{}}}}\n"
        );
        let r = resolve(vec![(app(&yaml), Origin::Git)], &[], &|_| {
            Ok::<_, &str>("main".into())
        });
        assert!(
            r.apps[0].problems[0].contains("fromGit"),
            "{:?}",
            r.apps[0].problems
        );
        let r = resolve(vec![(app(&yaml), Origin::Cluster)], &[], &|_| {
            Ok::<_, &str>("main".into())
        });
        assert!(r.apps[0].patch && r.apps[0].units.is_empty());
        assert_eq!(
            override_file_name(&r.apps[0].app),
            ".argocd-source-team-a_web.yaml"
        );
    }

    #[test]
    fn repocreds_from_git_need_a_configured_repository() {
        let yaml = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  annotations:\n    {IU}image-list: r.example/api\n    {IU}write-back-method: git:repocreds\nspec:\n  source: {{repoURL: 'https://git.example/m.git', path: web}}\n"
        );
        let r = resolve(vec![(app(&yaml), Origin::Git)], &[], &|_| {
            Ok::<_, &str>("main".into())
        });
        assert!(
            r.apps[0].problems[0].contains("git:repocreds"),
            "{:?}",
            r.apps[0].problems
        );
        let r = resolve(
            vec![(app(&yaml), Origin::Git)],
            &[configured("m", "https://git.example/m")],
            &|_| Ok::<_, &str>("main".into()),
        );
        assert!(r.apps[0].problems.is_empty());
        let r = resolve(vec![(app(&yaml), Origin::Cluster)], &[], &|_| {
            Ok::<_, &str>("main".into())
        });
        assert!(r.apps[0].problems.is_empty(), "{:?}", r.apps[0].problems);
        assert_eq!(r.repositories[0].url, "https://git.example/m.git");
    }
}
