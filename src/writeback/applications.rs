//! The Applications written in the cluster: the `write-back-method: argocd` patches, planned by
//! the sources ([`crate::argocd::plan::patch::plan_patches`]) and sent here
//! ([`crate::argocd::write`]), and each
//! `ImageUpdater` resource's status once the cycle's writes are done. Sent last in a cycle,
//! after every repository.

use crate::argocd::plan::ImageOutcome;
use crate::argocd::plan::patch::AppPatch;
use crate::argocd::read::cluster::Loaded;
use crate::argocd::read::image_updater::ImageUpdater;
use crate::argocd::resolve::Resolved;
use crate::argocd::write::{self, PatchReport};
use crate::error_chain::Failure;
use crate::plan::{self, Problem, ProblemReason};

use super::outcome;

/// What became of the patches: one report per patch, in their order, and a problem per patch
/// the cluster refused.
#[derive(Debug, Default)]
pub struct Sent {
    /// By index into [`Resolved::apps`].
    pub reports: Vec<(usize, PatchReport)>,
    pub problems: Vec<Problem>,
}

/// Sends `patches` (in a dry run, only says they would be), logging each Application patched.
pub async fn send_patches(
    cluster: &Loaded,
    resolved: &Resolved,
    patches: &[AppPatch],
    dry_run: bool,
) -> Sent {
    let (reports, problems) = write::send_patches(&cluster.cluster, patches, dry_run).await;
    outcome::log_patches(resolved, patches, &reports);
    Sent { reports, problems }
}

/// Sets Image Updater's status on each resource read from the cluster, from what the cycle
/// did for its Applications (`images`, and `app_problems` by index into [`Resolved::apps`]).
/// Each status the cluster refuses is a problem.
pub async fn write_updater_status(
    c: &Loaded,
    updaters: &[ImageUpdater],
    resolved: &Resolved,
    images: &[ImageOutcome],
    app_problems: &[(usize, String)],
    clock: &dyn crate::clock::Clock,
) -> Vec<Problem> {
    let now = humantime::format_rfc3339_seconds(clock.wall().into()).to_string();
    let writes =
        write::updater_status::status_writes(updaters, resolved, images, app_problems, &now);
    let mut problems = Vec::new();
    for w in writes {
        if let Err(e) = c
            .cluster
            .patch_image_updater_status(&w.namespace, &w.name, &w.status)
            .await
        {
            problems.push(Problem::new(ProblemReason::WriteFailed(Failure::new(e))));
        }
    }
    problems
}

/// An Application's patch as a diff: the merge patch document with the overrides the
/// Application has now, and as the patch sets them.
pub fn patch_diff(p: &AppPatch) -> plan::TargetDiff {
    let pretty = |v: &serde_json::Value| {
        let mut text = serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string());
        text.push('\n');
        text
    };
    plan::TargetDiff {
        target: plan::DiffTarget::Application {
            id: format!("{}/{}", p.namespace, p.name),
        },
        original: Some(pretty(&p.live)),
        updated: pretty(&p.body),
    }
}
