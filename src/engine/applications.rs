//! The Applications of one cycle: read (from git and the cluster), resolved into policies and
//! write places, and the findings of images they name but no source holds.

use std::collections::BTreeSet;

use crate::application::Origin;
use crate::argocd::read::cluster;
use crate::argocd::resolve::Resolved;
use crate::argocd::{self, Application};
use crate::image::Repository;
use crate::plan::{self, Plan, Problem, ProblemReason};
use crate::registry::Registry;
use crate::report::applications::ApplicationReport;

use super::{Context, EngineError, Input};

/// The Applications of one cycle, resolved into policies and write places.
pub(super) struct Applications {
    pub(super) resolved: Resolved,
    /// The `ImageUpdater` resources read (from git and the cluster); those from the cluster
    /// get their status written.
    pub(super) updaters: Vec<argocd::read::image_updater::ImageUpdater>,
    /// Problems met reading them (a file that is not YAML, a pull secret that is missing).
    load_problems: Vec<String>,
    /// Annotations of Applications without an `image-list`, which nothing reads.
    unread: Vec<argocd::read::image_updater::UnreadAnnotations>,
    /// SSH keys from Argo CD's Secrets live in private files for as long as the cycle runs.
    _keys: tempfile::TempDir,
}

pub(super) async fn collect_applications<R: Registry>(
    input: &Input<'_>,
    ctx: &Context<'_, R>,
    only_images: Option<&BTreeSet<Repository>>,
) -> Result<Applications, EngineError> {
    let config = input.config;
    let apps_config = config
        .applications
        .as_ref()
        .expect("called with applications configured");
    let mut apps: Vec<(Application, Origin)> = Vec::new();
    let mut updaters = Vec::new();
    let mut load_problems = Vec::new();
    if !apps_config.from_git.is_empty() {
        let cache = ctx.cache.ok_or(EngineError::NoCacheDir)?;
        let (found, problems) =
            argocd::read::load::from_git(config, &apps_config.from_git, cache).await?;
        apps.extend(found.apps.into_iter().map(|a| (a, Origin::Git)));
        updaters.extend(found.updaters);
        load_problems.extend(problems);
    }
    match (input.cluster, &apps_config.from_cluster) {
        (Some(c), _) => {
            apps.extend(c.apps.iter().cloned().map(|a| (a, Origin::Cluster)));
            updaters.extend(c.updaters.iter().cloned());
            load_problems.extend(c.problems.iter().cloned());
        }
        (None, Some(_)) => load_problems
            .push("applications.fromCluster is set but no cluster was read".to_string()),
        (None, None) => {}
    }
    let deployers = deployers(&apps);
    // Which configuration counts for each Application: its annotations, or the ImageUpdater
    // resource that selects it.
    let mut selection = argocd::read::image_updater::select(apps, &updaters);
    cluster::add_cosign_keys(input.cluster, &mut selection.apps);
    load_problems.extend(selection.problems);
    let unread = std::mem::take(&mut selection.unread);
    for warning in &selection.warnings {
        tracing::warn!("{warning}");
    }
    let mut resolved = argocd::resolve::resolve_selected(
        selection.apps,
        &config.repositories,
        &apps_config.allowed_repositories(),
        &argocd::read::load::remote_default_branch,
    );
    if let Some(images) = only_images {
        resolved.keep_images(images);
    }
    resolved.default_version_labels(config.version_labels.as_ref());
    let keys = tempfile::tempdir().map_err(EngineError::KeyDir)?;
    if let Some(c) = input.cluster {
        let (given, problems) =
            cluster::git_credentials(c, &resolved.git_writes(), keys.path()).await;
        resolved.give_auth(given);
        load_problems.extend(problems);
    }
    resolved.deployers = crate::affected::Deployers::new(deployers);
    Ok(Applications {
        resolved,
        updaters,
        load_problems,
        unread,
        _keys: keys,
    })
}

impl Applications {
    /// The Applications section, and their problems added to the plan.
    pub(super) fn report(
        &self,
        plan: &mut Plan,
        images: &[argocd::ImageOutcome],
        app_problems: &[(usize, String)],
        patch_reports: Vec<(usize, argocd::write::PatchReport)>,
    ) -> Vec<ApplicationReport> {
        let resolved = &self.resolved;
        for message in &self.load_problems {
            let reason = ProblemReason::Applications(message.clone());
            plan.problems.push(Problem::new(reason));
        }
        let of_app = |id: String, problem: &String| {
            Problem::new(ProblemReason::Application {
                id,
                problem: problem.clone(),
            })
        };
        for a in &resolved.apps {
            for p in &a.problems {
                plan.problems.push(of_app(a.app.id(), p));
            }
        }
        for (i, p) in app_problems {
            plan.problems.push(of_app(resolved.apps[*i].app.id(), p));
        }
        plan.findings.extend(not_found(resolved, images));
        plan.findings
            .extend(unknown_annotations(resolved, &self.unread));
        let mut applications = crate::report::applications::collect(resolved, images, app_problems);
        for (i, patch) in patch_reports {
            let id = resolved.apps[i].app.id();
            // The section is sorted by Application: found by binary search, not per patch
            // through every Application.
            let at = applications.partition_point(|r| r.application < id);
            if let Some(r) = applications.get_mut(at).filter(|r| r.application == id) {
                r.patch = Some(patch);
            }
        }
        applications
    }
}

/// The Applications that deploy, each once: one read both from git (`applications.fromGit`)
/// and from the cluster is the same Application, and the live copy is what Argo CD deploys.
/// Compared by namespace and name, a manifest without a namespace being in Argo CD's own
/// (`argocd`), where `kubectl apply` of it usually puts it. In the order read, git first.
fn deployers(apps: &[(Application, Origin)]) -> Vec<Application> {
    let key = |a: &Application| {
        (
            a.metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "argocd".to_owned()),
            a.metadata.name.clone(),
        )
    };
    let live: BTreeSet<(String, String)> = apps
        .iter()
        .filter(|(_, o)| *o == Origin::Cluster)
        .map(|(a, _)| key(a))
        .collect();
    let mut seen = BTreeSet::new();
    // Sized once: thousands of Applications collected by doubling would hold up to twice the
    // list's memory for the whole cycle.
    let mut out = Vec::with_capacity(apps.len());
    out.extend(
        apps.iter()
            .filter(|(a, o)| *o == Origin::Cluster || !live.contains(&key(a)))
            .filter(|(a, _)| seen.insert(key(a)))
            .map(|(a, _)| a.deployed_view()),
    );
    out.shrink_to_fit();
    out
}

/// Each annotation of an Application that nothing reads, as a warning naming where it is
/// written (`manifests:argocd/pay.yaml:7`; where the Application was read, `cluster`, when its
/// line is not known) and the known key nearest
/// to it: never only a note in the Applications section. `unread` are those of Applications
/// without an `image-list`.
pub fn unknown_annotations(
    resolved: &Resolved,
    unread: &[argocd::read::image_updater::UnreadAnnotations],
) -> Vec<plan::Finding> {
    let managed = resolved.apps.iter().map(|app| {
        (
            app.app.id(),
            app.app.origin.as_str(),
            &app.annotations.unknown,
            "",
        )
    });
    let unmanaged = unread.iter().map(|u| {
        (
            u.application.clone(),
            u.origin.as_str(),
            &u.annotations,
            ": the Application has no image-list",
        )
    });
    let mut out = Vec::new();
    for (application, origin, unknown, why) in managed.chain(unmanaged) {
        for u in unknown {
            let at = match (u.line, origin.rsplit_once(':')) {
                (Some(line), Some((file, start))) if start.parse::<usize>().is_ok() => {
                    format!("{file}:{line}")
                }
                _ => origin.to_string(),
            };
            let mut message = format!("nothing reads annotation {}{why}", u.key);
            if let Some(near) = &u.nearest {
                message.push_str(&format!("; did you mean {near}?"));
            }
            out.push(plan::Finding {
                application: Some(application.clone()),
                message,
                ..plan::Finding::new(plan::FindingKind::UnknownAnnotation, String::new(), at)
            });
        }
    }
    out
}

/// Each image an Application's source holds no field for, as a finding that names the
/// Application, the source and what was searched.
fn not_found(resolved: &Resolved, images: &[argocd::ImageOutcome]) -> Vec<plan::Finding> {
    images
        .iter()
        .filter(|o| o.status == argocd::plan::ImageStatus::NotFound)
        .map(|o| {
            let app = &resolved.apps[o.app];
            let root = app
                .units
                .iter()
                .find(|u| u.source + 1 == o.source && u.repository == o.repository)
                .map_or(".", |u| argocd::resolve::display(&u.root));
            let mut searched = format!(
                "source {} ({}) at {}:{root}",
                o.source,
                o.kind.name(),
                o.repository
            );
            if let Some(reason) = &o.reason {
                searched.push_str(&format!(" ({reason})"));
            }
            plan::Finding {
                repository: Some(o.repository.clone()),
                policy: Some(argocd::resolve::policy_name(&app.app, &o.alias)),
                application: Some(app.app.id()),
                ..plan::Finding::new(
                    plan::FindingKind::ApplicationImageNotFound,
                    o.image.clone(),
                    searched,
                )
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(namespace: Option<&str>, name: &str, path: &str) -> Application {
        let mut a = Application::default();
        a.metadata.name = name.to_owned();
        a.metadata.namespace = namespace.map(str::to_owned);
        std::sync::Arc::make_mut(&mut a.spec).source = Some(crate::application::Source {
            repo_url: "https://git.example/m".into(),
            path: Some(path.to_owned()),
            ..Default::default()
        });
        a
    }

    #[test]
    fn an_application_read_from_git_and_from_the_cluster_deploys_once_as_the_live_copy() {
        let apps = [
            (app(None, "api", "apps/api-git"), Origin::Git),
            (app(Some("argocd"), "web", "apps/web"), Origin::Git),
            (app(Some("team"), "api", "apps/team-api"), Origin::Git),
            (app(Some("argocd"), "api", "apps/api-live"), Origin::Cluster),
        ];
        let found: Vec<(String, String)> = deployers(&apps)
            .iter()
            .map(|a| (a.id(), a.sources()[0].path.clone().unwrap()))
            .collect();
        assert_eq!(
            found,
            [
                ("argocd/web".to_owned(), "apps/web".to_owned()),
                ("team/api".to_owned(), "apps/team-api".to_owned()),
                ("argocd/api".to_owned(), "apps/api-live".to_owned()),
            ]
        );
    }
}
