//! Per source of an app: the place its changes land and the repository target that holds it
//! (configured in `repositories:` or synthesised), shared by every app that writes there.

use std::collections::BTreeMap;
use std::fmt;

use crate::config::applications::AllowedRepositories;
use crate::config::repository::WriteMode;
use crate::git::RepositoryConfig;

use super::super::branch::BranchTemplate;
use super::super::read::settings::{
    AppSettings, GitBranch, GitCredentials, PullRequestProvider, PullRequestSettings,
    SkippedAnnotation, WriteBackMethod, WriteBackTarget,
};
use super::{
    ManagedApp, Origin, RepositoryKey, Resolved, SourceKind, Unit, UnitWrite, argocd_from_git,
    clean_path, join, normalise_url, override_file_name, relative_to,
};
use crate::application::{Application, Source};

/// What planning every app's units shares: the configured repositories, how to ask a remote
/// for its default branch, the repository targets chosen so far and the result being built.
pub(super) struct Resolver<'a, E> {
    pub configured: &'a [RepositoryConfig],
    /// The repositories outside `configured` that Applications may write to.
    pub allowed: &'a AllowedRepositories,
    pub default_branch: &'a dyn Fn(&str) -> Result<String, E>,
    pub repos: BTreeMap<RepositoryKey, String>,
    pub out: Resolved,
}

/// Nothing is written for this source: the reason is already among the app's problems.
struct Blocked;

/// Where a source's changes go before the repository target is chosen: the repository's URL,
/// the revision it is written at (unless `git-branch` names a base) and how.
struct Place {
    url: String,
    revision: Option<String>,
    write: UnitWrite,
}

impl<E: fmt::Display> Resolver<'_, E> {
    /// The app's units, one per source with a git path; the sources that cannot be written
    /// leave a problem instead.
    pub(super) fn plan_units(&mut self, managed: &mut ManagedApp) {
        let sources: Vec<Source> = managed.app.sources().into_iter().cloned().collect();
        let git_write = matches!(managed.annotations.write_back, WriteBackMethod::Git(_));
        managed.git_write = git_write;
        managed.patch = !git_write && managed.origin == Origin::Cluster;
        for index in 0..sources.len() {
            self.plan_source(managed, &sources, index);
        }
        managed.problems.dedup();
        if managed.units.is_empty() && !managed.patch && managed.problems.is_empty() {
            managed
                .problems
                .push("no source with a git path to write to".to_string());
        }
    }

    /// One source, in phases: a values-only `ref` source is skipped, a chart with its values in
    /// `git-repository` written there, then the source's kind decides its write place.
    fn plan_source(&mut self, managed: &mut ManagedApp, sources: &[Source], index: usize) {
        let source = &sources[index];
        if source.chart.is_none() && source.path.is_none() && source.reference.is_some() {
            // A values-only `ref` source is written through the source that names it.
            return;
        }
        if source.chart.is_some() {
            if let Some(file) = chart_values_in_git(managed) {
                self.plan_chart_values(managed, sources, index, &file);
                return;
            }
            if !writes_ref_values(managed, source) {
                // A chart from a Helm repository has no files in git; only a `$ref` values
                // file does.
                return;
            }
        }
        let root = clean_path(source.path.as_deref().unwrap_or(""));
        let kind = source_kind(&managed.app, source);
        if let Ok(place) = write_place(managed, sources, index, &root, kind) {
            self.push_unit(managed, index, root, kind, place);
        }
    }

    /// A chart from a Helm or OCI repository with its values in git, Argo CD's layout for
    /// charts one does not own. Image Updater writes `helmvalues:<file>` to `git-repository`,
    /// the path taken from that repository's root (its `parseTarget` joins the chart source's
    /// empty path; a leading `/` is dropped).
    fn plan_chart_values(
        &mut self,
        managed: &mut ManagedApp,
        sources: &[Source],
        index: usize,
        file: &str,
    ) {
        let Some((url, revision)) = chart_values_repository(&managed.annotations, sources) else {
            let source = &sources[index];
            managed.problems.push(format!(
                "source {}: write-back-target helmvalues:{file} on the chart {} from {} \
                 names no git repository: set git-repository (Image Updater writes there), \
                 or add one `ref` source in git",
                index + 1,
                source.chart.as_deref().unwrap_or_default(),
                crate::git::auth::redact_url(&source.repo_url),
            ));
            return;
        };
        let place = Place {
            url,
            revision,
            write: UnitWrite::HelmValues {
                file: relative_to("", Some(file)),
            },
        };
        self.push_unit(managed, index, String::new(), Some(SourceKind::Helm), place);
    }

    /// Adds the unit writing `place` for source `index`, at `git-branch`'s base when it names
    /// one, else at the place's revision; nothing when no repository target can be had.
    fn push_unit(
        &mut self,
        managed: &mut ManagedApp,
        index: usize,
        root: String,
        kind: Option<SourceKind>,
        place: Place,
    ) {
        let revision = managed
            .annotations
            .git_branch
            .as_ref()
            .and_then(|b| b.base.clone())
            .or(place.revision);
        if let Ok(repository) = self.repository_for(managed, &place.url, revision.as_deref()) {
            managed.units.push(Unit {
                source: index,
                repository,
                root,
                kind,
                write: place.write,
            });
        }
    }

    /// The repository target for a write to `url` at `revision`: the configured entry with
    /// that URL (on the revision's branch), or a synthesised one named after the URL; one
    /// target per [`RepositoryKey`], shared by every app that writes there.
    fn repository_for(
        &mut self,
        managed: &mut ManagedApp,
        url: &str,
        revision: Option<&str>,
    ) -> Result<String, Blocked> {
        let key_url = normalise_url(url);
        let configured = self.configured;
        let matched = configured.iter().find(|r| normalise_url(&r.url) == key_url);
        // Whoever can merge an Application must not point tagpilot's credentials at another
        // repository: checked before the remote is even asked for its default branch.
        if matched.is_none() && !self.allowed.allows(url) {
            managed.problems.push(format!(
                "{} is not in tagpilot.yaml `repositories:` nor allowed by \
                 `applications.allowRepositories` (read from {}); nothing is cloned or written \
                 for it",
                crate::git::auth::redact_url(url),
                managed.app.origin
            ));
            return Err(Blocked);
        }
        let branch = self.branch_for(managed, url, revision, matched)?;
        let target = branch_template(managed, url)?;
        check_credentials(managed, url, matched)?;
        let pull_request = managed.annotations.pull_request.clone();
        let key = (
            key_url.clone(),
            branch.clone(),
            target.as_ref().map(BranchTemplate::source),
            pull_request.is_some(),
        );
        if let Some(name) = self.repos.get(&key) {
            return Ok(name.clone());
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
                verify: None,
            },
        };
        if let Some(pr) = &pull_request {
            ask_pull_requests(managed, &mut config, pr, url)?;
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
            let text = target_branch_text(managed, t, url)?;
            config.name = format!("{}:{text}", config.name);
            config.write.branch = Some(text);
        }
        let name = self.unused_name(config.name.clone(), &base_name, &config.branch);
        config.name = name.clone();
        self.out.repositories.push(config);
        if let Some(t) = target.filter(BranchTemplate::depends_on_changes) {
            self.out.branch_templates.insert(name.clone(), t);
        }
        self.repos.insert(key, name.clone());
        Ok(name)
    }

    /// The branch a write at `revision` goes to: the revision itself, else (`HEAD` or none) the
    /// configured branch, else the remote's default branch.
    fn branch_for(
        &self,
        managed: &mut ManagedApp,
        url: &str,
        revision: Option<&str>,
        matched: Option<&RepositoryConfig>,
    ) -> Result<String, Blocked> {
        match revision.map(str::trim) {
            Some(r) if !r.is_empty() && r != "HEAD" => Ok(r.to_string()),
            _ => match matched {
                Some(r) => Ok(r.branch.clone()),
                None => (self.default_branch)(url).map_err(|e| {
                    managed.problems.push(format!(
                        "cannot find the default branch of {}: {e}",
                        crate::git::auth::redact_url(url)
                    ));
                    Blocked
                }),
            },
        }
    }

    /// `name`, unless another app already uses it for a different branch pairing: then
    /// `<base>@<branch>`, numbered while that is taken too.
    fn unused_name(&self, mut name: String, base_name: &str, branch: &str) -> String {
        let taken = |name: &str| self.out.repositories.iter().any(|r| r.name == name);
        if taken(&name) {
            name = format!("{base_name}@{branch}");
        }
        let mut n = 2;
        let first = name.clone();
        while taken(&name) {
            name = format!("{first}#{n}");
            n += 1;
        }
        name
    }
}

/// `git-branch`'s target template, parsed; a template that cannot be parsed blocks the write.
fn branch_template(managed: &mut ManagedApp, url: &str) -> Result<Option<BranchTemplate>, Blocked> {
    let Some(GitBranch {
        key,
        target: Some(t),
        ..
    }) = managed.annotations.git_branch.as_ref()
    else {
        return Ok(None);
    };
    match BranchTemplate::parse(t) {
        Ok(template) => Ok(Some(template.render_app())),
        Err(reason) => {
            // Writing to the base instead would push where the user did not ask.
            let key = key.clone();
            let reason = format!("template {t:?}: {reason}");
            managed.problems.push(format!(
                "{key}: the branch template cannot be rendered, so nothing is written to {}",
                crate::git::auth::redact_url(url)
            ));
            managed
                .annotations
                .skipped
                .push(SkippedAnnotation { key, reason });
            Err(Blocked)
        }
    }
}

/// From git, `git:repocreds` and `git:secret:` credentials name Argo CD's Secrets, which
/// tagpilot reads only from the cluster: the repository must be configured with its own.
fn check_credentials(
    managed: &mut ManagedApp,
    url: &str,
    matched: Option<&RepositoryConfig>,
) -> Result<(), Blocked> {
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
        return Err(Blocked);
    }
    Ok(())
}

/// Turns `config` into a pull-request target with the settings' labels; blocked when the
/// repository has no API for the asked forge.
fn ask_pull_requests(
    managed: &mut ManagedApp,
    config: &mut RepositoryConfig,
    pr: &PullRequestSettings,
    url: &str,
) -> Result<(), Blocked> {
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
        return Err(Blocked);
    }
    config.write.mode = WriteMode::PullRequest;
    for l in &pr.labels {
        if !config.write.labels.contains(l) {
            config.write.labels.push(l.clone());
        }
    }
    Ok(())
}

/// The branch `git-branch`'s target names. A name that depends on the changes is rendered
/// once they are planned (by the engine, `engine/target.rs`); until then the template stands
/// in for it.
fn target_branch_text(
    managed: &mut ManagedApp,
    t: &BranchTemplate,
    url: &str,
) -> Result<String, Blocked> {
    if t.depends_on_changes() {
        return Ok(t.source());
    }
    let name = t.render(None, &[]);
    if let Err(e) = super::super::branch::check_branch_name(&name) {
        managed.problems.push(format!(
            "{e}; nothing is written to {}",
            crate::git::auth::redact_url(url)
        ));
        return Err(Blocked);
    }
    Ok(name)
}

/// `helmvalues:<file>` for a chart, written with git, when the file is not a `$ref` one: the
/// values then live in `git-repository` (or the app's only `ref` source).
fn chart_values_in_git(managed: &ManagedApp) -> Option<String> {
    if !managed.git_write {
        return None;
    }
    match &managed.annotations.write_back_target {
        Some(WriteBackTarget::HelmValues(Some(file))) if !file.starts_with('$') => {
            Some(file.clone())
        }
        _ => None,
    }
}

/// Whether a chart source's `helmvalues` target (its argument, else the first `valueFiles`)
/// is a `$ref` values file, the only part of such a source that is in git.
fn writes_ref_values(managed: &ManagedApp, source: &Source) -> bool {
    matches!(
        (&managed.annotations.write_back_target, values_file(source, None)),
        (Some(WriteBackTarget::HelmValues(f)), first) if f.as_deref().or(first).is_some_and(|f| f.starts_with('$'))
    )
}

/// The source's type: from the spec, else (single source) what Argo CD recorded it detected;
/// `None` until the files are seen.
fn source_kind(app: &Application, source: &Source) -> Option<SourceKind> {
    if source.helm.is_some() {
        Some(SourceKind::Helm)
    } else if source.kustomize.is_some() {
        Some(SourceKind::Kustomize)
    } else if source.directory.is_some() {
        Some(SourceKind::Directory)
    } else if !app.is_multi_source() {
        // Argo CD records what it detected.
        match app.status.as_ref().and_then(|s| s.source_type.as_deref()) {
            Some("Helm") => Some(SourceKind::Helm),
            Some("Kustomize") => Some(SourceKind::Kustomize),
            Some("Directory") => Some(SourceKind::Directory),
            _ => None,
        }
    } else {
        None
    }
}

/// Where source `index` (its path `root`) is written, by `write-back-target` and its kind:
/// in `git-repository` when set, else the source's own repository, at the source's revision.
fn write_place(
    managed: &mut ManagedApp,
    sources: &[Source],
    index: usize,
    root: &str,
    kind: Option<SourceKind>,
) -> Result<Place, Blocked> {
    let source = &sources[index];
    let url = managed
        .annotations
        .git_repository
        .clone()
        .unwrap_or_else(|| source.repo_url.clone());
    let revision = source.target_revision.clone();
    let write = match (&managed.annotations.write_back_target, kind) {
        (_, Some(SourceKind::Directory)) => directory_write(source),
        (Some(WriteBackTarget::Kustomization(dir)), _) => UnitWrite::Kustomization {
            dir: relative_to(root, dir.as_deref()),
        },
        (Some(WriteBackTarget::HelmValues(file)), _) => {
            let file = file.clone();
            match helm_values_file(managed, sources, index, root, file.as_deref())? {
                ValuesFile::Own(file) => UnitWrite::HelmValues { file },
                ValuesFile::OfRef(place) => return Ok(place),
            }
        }
        (None, _) => {
            if !managed.git_write && kind.is_some() {
                if !managed.patch {
                    managed.problems.push(argocd_from_git(&managed.annotations));
                }
                return Err(Blocked);
            }
            if managed.patch {
                // Patched through the API; only a Directory source would need git, and
                // Argo CD said this one is not.
                return Err(Blocked);
            }
            // Kind unknown until the files are seen: a Directory source is written in
            // place, a Kustomize or Helm one here (git) or not at all (argocd, from git).
            UnitWrite::OverrideFile {
                file: join(root, &override_file_name(&managed.app)),
            }
        }
    };
    Ok(Place {
        url,
        revision,
        write,
    })
}

/// Where a `helmvalues` target's file is.
enum ValuesFile {
    /// In the source's own repository, at this path from its root.
    Own(String),
    /// A `$ref` file: in another source's repository, at that source's revision.
    OfRef(Place),
}

/// The file `helmvalues[:file]` writes for source `index`: its argument, else the first
/// `valueFiles`, else `values.yaml`, relative to `root` (a leading `/`: to the repository).
fn helm_values_file(
    managed: &mut ManagedApp,
    sources: &[Source],
    index: usize,
    root: &str,
    file: Option<&str>,
) -> Result<ValuesFile, Blocked> {
    if let Some(f) = file.filter(|f| !f.starts_with('$')) {
        return Ok(ValuesFile::Own(relative_to(root, Some(f))));
    }
    match values_file(&sources[index], file) {
        Some(f) if f.starts_with('$') => match ref_values_file(sources, f) {
            Some((url, path, revision)) => Ok(ValuesFile::OfRef(Place {
                url,
                revision,
                write: UnitWrite::HelmValues { file: path },
            })),
            None => {
                managed.problems.push(format!(
                    "source {}: value file {f:?} names no source with that `ref`",
                    index + 1
                ));
                Err(Blocked)
            }
        },
        Some(f) => Ok(ValuesFile::Own(relative_to(root, Some(f)))),
        None => Ok(ValuesFile::Own(relative_to(root, Some("values.yaml")))),
    }
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
    annotations: &AppSettings,
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
