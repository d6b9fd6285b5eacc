//! The "Applications" part of `tagpilot plan`: each annotated Application with the images it
//! manages, where each change lands (source and file), the chosen tags, and the annotations
//! tagpilot skipped with the reason. The report model ([`crate::report::Report`]) carries it to
//! every format; its text is here, beside its type, and its Markdown in [`markdown`]. Built
//! from the Argo CD source's types ([`crate::argocd`]); decides nothing. Pure: builds strings.

use serde::Serialize;

use crate::argocd::plan::outcome::{ImageOutcome, ImageStatus};
use crate::argocd::read::annotations::SkippedAnnotation;
use crate::argocd::read::annotations::{GitCredentials, WriteBackMethod};
use crate::argocd::resolve::{Resolved, UnitWrite, display};

mod markdown;
pub use markdown::applications_markdown;

/// One Application in the report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplicationReport {
    /// `namespace/name`.
    pub application: String,
    /// Where it was read from.
    pub origin: String,
    /// The `ImageUpdater` resource entry that configures it; absent: its annotations.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub configured_by: Option<String>,
    /// The resource of `configured_by`, for what counts per resource (Image Updater's metrics).
    #[serde(skip)]
    pub updater: Option<UpdaterName>,
    /// How many images its configuration names; 0 when nothing manages it (no resource selects
    /// it, or two do).
    #[serde(skip)]
    pub images_managed: usize,
    pub images: Vec<ImageOutcome>,
    pub skipped_annotations: Vec<SkippedAnnotation>,
    pub problems: Vec<String>,
    /// `write-back-method: argocd`: the merge patch sent (or, in plan mode, that would be).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<crate::argocd::write::PatchReport>,
}

/// An `ImageUpdater` resource, by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UpdaterName {
    pub namespace: String,
    pub name: String,
}

/// Collects per-app reports from the repository plans' image outcomes and app problems.
pub fn collect(
    resolved: &Resolved,
    images: &[ImageOutcome],
    app_problems: &[(usize, String)],
) -> Vec<ApplicationReport> {
    // Grouped by app first: thousands of Applications must not make this apps × images.
    let mut images_of: Vec<Vec<ImageOutcome>> = vec![Vec::new(); resolved.apps.len()];
    for o in images {
        if let Some(list) = images_of.get_mut(o.app) {
            list.push(o.clone());
        }
    }
    let mut problems_of: Vec<Vec<String>> = vec![Vec::new(); resolved.apps.len()];
    for (app, p) in app_problems {
        if let Some(list) = problems_of.get_mut(*app) {
            list.push(p.clone());
        }
    }
    let mut out: Vec<ApplicationReport> = resolved
        .apps
        .iter()
        .zip(images_of.into_iter().zip(problems_of))
        .map(|(a, (images, problems))| ApplicationReport {
            application: a.app.id(),
            origin: a.app.origin.clone(),
            configured_by: a.configured_by.as_ref().map(ToString::to_string),
            updater: a.configured_by.as_ref().map(|c| UpdaterName {
                namespace: c.namespace.clone(),
                name: c.name.clone(),
            }),
            images_managed: a.annotations.images.len(),
            images,
            skipped_annotations: a.annotations.skipped.clone(),
            problems: a.problems.iter().cloned().chain(problems).collect(),
            patch: None,
        })
        .collect();
    for r in &mut out {
        r.images
            .sort_by(|a, b| (a.source, &a.alias).cmp(&(b.source, &b.alias)));
        r.problems.dedup();
    }
    out.sort_by(|a, b| a.application.cmp(&b.application));
    out
}

/// The section for the table and Markdown reports.
pub fn text(reports: &[ApplicationReport]) -> String {
    if reports.is_empty() {
        return String::new();
    }
    let mut out = String::from("\nApplications:\n");
    for r in reports {
        out.push_str(&format!("  {} ({})\n", r.application, r.origin));
        if let Some(by) = &r.configured_by {
            out.push_str(&format!("    configured by {by}\n"));
        }
        for i in &r.images {
            let place = match &i.file {
                Some(f) => format!("{}:{f}", i.repository),
                None => i.repository.clone(),
            };
            let what = match (i.status, &i.from, &i.to) {
                (ImageStatus::Update, Some(f), Some(t)) => format!("{f} -> {t}"),
                (ImageStatus::Held, Some(f), _) => format!("held at {f}"),
                (s, _, _) => s.to_string(),
            };
            out.push_str(&format!(
                "    {} {}: {what} [source {} {}, {place}]",
                i.alias,
                i.image,
                i.source,
                i.kind.name()
            ));
            if let Some(reason) = &i.reason {
                out.push_str(&format!(": {reason}"));
            }
            out.push('\n');
        }
        if let Some(p) = &r.patch {
            out.push_str(&format!("    {}: {}\n", p.status, p.body));
        }
        for s in &r.skipped_annotations {
            out.push_str(&format!("    skipped {}: {}\n", s.key, s.reason));
        }
        for p in &r.problems {
            out.push_str(&format!("    problem: {p}\n"));
        }
    }
    out
}

/// What each Application resolves to, for `tagpilot check` (offline: nothing is planned): its
/// configuration, images and strategies, write-back method and where each source's changes
/// land, skipped annotations and problems.
pub fn resolved_text(resolved: &Resolved) -> String {
    let mut out = String::new();
    for a in &resolved.apps {
        let method = match &a.annotations.write_back {
            WriteBackMethod::Argocd => "argocd (a patch of the Application)".to_string(),
            WriteBackMethod::Git(GitCredentials::Configured) => "git".to_string(),
            WriteBackMethod::Git(GitCredentials::RepoCreds) => "git:repocreds".to_string(),
            WriteBackMethod::Git(GitCredentials::Secret { namespace, name }) => {
                format!("git:secret:{namespace}/{name}")
            }
        };
        let pull_requests = if a.annotations.pull_request.is_some() {
            ", pull requests"
        } else {
            ""
        };
        out.push_str(&format!(
            "  {} ({}): write-back {method}{pull_requests}\n",
            a.app.id(),
            a.app.origin
        ));
        if let Some(by) = &a.configured_by {
            out.push_str(&format!("    configured by {by}\n"));
        }
        if a.annotations.images.is_empty() {
            out.push_str("    no image configured\n");
        }
        for (image, policy) in a.annotations.images.iter().zip(&a.policies) {
            let strategy = policy
                .as_ref()
                .map_or("not followed", |p| p.strategy.name());
            out.push_str(&format!(
                "    image {}: {} ({strategy})\n",
                image.alias, image.repository
            ));
        }
        for u in &a.units {
            let branch = resolved
                .repositories
                .iter()
                .find(|r| r.name == u.repository)
                .map_or_else(String::new, |r| format!(" ({})", r.branch));
            let target = match &u.write {
                UnitWrite::Manifests { .. } => {
                    format!("the manifests under {} in place", display(&u.root))
                }
                UnitWrite::Kustomization { dir } => {
                    format!("the kustomization in {}", display(dir))
                }
                UnitWrite::HelmValues { file } => format!("the values file {file}"),
                UnitWrite::OverrideFile { file } => file.clone(),
            };
            out.push_str(&format!(
                "    source {}: repository {}{branch}, writes {target}\n",
                u.source + 1,
                u.repository
            ));
        }
        for s in &a.annotations.skipped {
            out.push_str(&format!("    skipped {}: {}\n", s.key, s.reason));
        }
        for p in &a.problems {
            out.push_str(&format!("    problem: {p}\n"));
        }
    }
    out
}
