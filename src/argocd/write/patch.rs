//! Sending the `write-back-method: argocd` patches planned in [`crate::argocd::plan::patch`]:
//! one JSON merge patch of the parameter overrides per Application, never in plan mode.
//!
//! What it must never do: patch anything in plan mode, or send more than the merge patch that
//! was planned (the rest of the Application is Argo CD's).

use crate::argocd::plan::patch::AppPatch;
use crate::error_chain::Failure;
use crate::kubernetes::Cluster;
use crate::plan::{Problem, ProblemReason};

/// What became of one Application's patch; serialised (and shown) as the report's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum PatchStatus {
    /// Plan mode: nothing is sent.
    #[serde(rename = "would patch")]
    WouldPatch,
    #[serde(rename = "patched")]
    Patched,
    /// The API refused it; the plan has a problem naming the Application.
    #[serde(rename = "failed")]
    Failed,
}

impl PatchStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PatchStatus::WouldPatch => "would patch",
            PatchStatus::Patched => "patched",
            PatchStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for PatchStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What became of one Application's patch, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PatchReport {
    pub status: PatchStatus,
    /// The merge patch body, compact JSON (image references only).
    pub body: String,
}

/// Sends the patches (not in a dry run). A failed patch is a problem naming the Application;
/// the others are still sent.
pub async fn send_patches(
    cluster: &Cluster,
    patches: &[AppPatch],
    dry_run: bool,
) -> (Vec<(usize, PatchReport)>, Vec<Problem>) {
    let mut reports = Vec::new();
    let mut problems = Vec::new();
    for p in patches {
        let body = serde_json::to_string(&p.body).expect("a patch serialises");
        let status = if dry_run {
            PatchStatus::WouldPatch
        } else {
            match cluster
                .patch_application(&p.namespace, &p.name, &p.body)
                .await
            {
                Ok(()) => PatchStatus::Patched,
                Err(e) => {
                    problems.push(Problem {
                        file: Some(format!("Application {}/{}", p.namespace, p.name)),
                        ..Problem::new(ProblemReason::WriteFailed(Failure::new(e)))
                    });
                    PatchStatus::Failed
                }
            }
        };
        reports.push((p.app, PatchReport { status, body }));
    }
    (reports, problems)
}
