//! `write-back-method: argocd`: the parameter overrides to patch into each live Application,
//! decided as Image Updater decides them.
//!
//! Why it exists apart from sending ([`crate::argocd::write::send_patches`]): deciding a patch
//! is planning (tag selection through the registry), sending it is I/O; the plan is the same in
//! plan and apply mode, and only the sending differs.
//!
//! What it must never do: decide more than a JSON merge patch of the parameter overrides (the
//! rest of the Application is Argo CD's).

use serde_json::json;

use crate::image::Repository;
use crate::plan::{Change, Problem};
use crate::registry::Registry;

use super::super::resolve::{ManagedApp, Resolved, SourceKind};
use super::outcome::{
    ImageOutcome, OverridePlace, OverrideTarget, Overrides, decide_app_overrides,
};
use super::override_file::{HelmOverrides, KustomizeOverrides, OverrideFile, OverrideParameter};
use crate::application::{Application, HelmParameter, Source};

/// One Application's parameter overrides as tagpilot would set them.
#[derive(Debug, Clone, PartialEq)]
pub struct AppPatch {
    /// Index into [`Resolved::apps`].
    pub app: usize,
    pub namespace: String,
    pub name: String,
    /// The JSON merge patch body.
    pub body: serde_json::Value,
    /// The same document with the overrides the live Application has now: what the patch
    /// replaces, for `tagpilot plan --diff`.
    pub live: serde_json::Value,
    pub changes: Vec<Change>,
}

/// Everything the `argocd` method decided.
#[derive(Debug, Default)]
pub struct Patches {
    pub patches: Vec<AppPatch>,
    pub images: Vec<ImageOutcome>,
    pub holds: Vec<crate::plan::Hold>,
    /// The tags selection passed over, per policy and image.
    pub skipped_tags: Vec<crate::plan::SkippedTags>,
    pub problems: Vec<Problem>,
    pub app_problems: Vec<(usize, String)>,
    pub up_to_date: usize,
}

/// Decides every image of the apps written with `write-back-method: argocd` against the live
/// Application's overrides (`spec.source.kustomize.images` or `spec.source.helm.parameters`,
/// else the images Argo CD reports running), as Image Updater does. Reads the registry only.
pub async fn plan_patches<R: Registry>(
    resolved: &Resolved,
    registry: &R,
    holds: &crate::holds::Holds,
) -> Patches {
    let holds = Some(holds);
    let mut out = Patches::default();
    for (a, managed) in resolved.apps.iter().enumerate() {
        if !managed.patch {
            continue;
        }
        // 1. Whether the Application can be patched, and which overrides it has.
        let Some((source, kind)) = patchable(a, managed, &mut out) else {
            continue;
        };
        // 2. What it overrides now.
        let mut overrides = live_overrides(source);
        let live = patch_body(kind, &overrides);
        // 3. Each image decided against that.
        let app = &managed.app;
        let shown = format!("Application {}", app.id());
        let field = match kind {
            SourceKind::Helm => "spec.source.helm.parameters",
            _ => "spec.source.kustomize.images",
        };
        let target = OverrideTarget {
            place: OverridePlace {
                repository: None,
                file: &shown,
                field,
            },
            source: 1,
            repository: shown.clone(),
            file: field.to_string(),
        };
        let mut deciding = Overrides {
            file: &mut overrides,
            kind,
            registry,
            holds,
            skipped: Vec::new(),
        };
        let decided = decide_app_overrides(
            &mut deciding,
            a,
            managed,
            &target,
            |_, policy| live_image(app, &policy.image),
            |policy| {
                format!(
                    "the Application neither overrides nor runs {}; set force-update to set it anyway",
                    policy.image
                )
            },
        )
        .await;
        // 4. The patch, when an image moves.
        out.holds.extend(decided.holds);
        out.skipped_tags.extend(decided.skipped_tags);
        out.problems.extend(decided.problems);
        out.up_to_date += decided.up_to_date;
        out.images.extend(decided.images);
        let changes = decided.changes;
        if changes.is_empty() {
            continue;
        }
        out.patches.push(AppPatch {
            app: a,
            namespace: app.metadata.namespace.clone().unwrap_or_default(),
            name: app.metadata.name.clone(),
            body: patch_body(kind, &overrides),
            live,
            changes,
        });
    }
    out
}

/// The source whose overrides app `a` patches, and their kind; `None`, with a problem in `out`
/// where the user should hear why, when it has none to patch.
fn patchable<'a>(
    a: usize,
    managed: &'a ManagedApp,
    out: &mut Patches,
) -> Option<(&'a Source, SourceKind)> {
    let app = &managed.app;
    if let Some(set) = app.application_set() {
        // The ApplicationSet controller renders its Applications from the template and puts
        // back any change to them, so a patch would be undone within seconds (and fought over
        // on every cycle). The template's source in git is what lasts.
        out.app_problems.push((
            a,
            format!(
                "write-back-method argocd: the Application is generated by ApplicationSet {set}, whose controller reverts patches to it; not patched; use write-back-method git to write the change to the source instead"
            ),
        ));
        return None;
    }
    if app.is_multi_source() {
        // Only Directory sources (written through git) are handled for multi-source apps.
        if managed.units.is_empty() {
            out.app_problems.push((
                a,
                "write-back-method argocd cannot patch a multi-source Application's overrides; use write-back-method git".into(),
            ));
        }
        return None;
    }
    let source = app.spec.source.as_ref()?;
    let kind = if source.kustomize.is_some() {
        SourceKind::Kustomize
    } else if source.helm.is_some() {
        SourceKind::Helm
    } else {
        match app.status.as_ref().and_then(|s| s.source_type.as_deref()) {
            Some("Kustomize") => SourceKind::Kustomize,
            Some("Helm") => SourceKind::Helm,
            // Directory sources are written through git (see `resolve`).
            Some("Directory") => return None,
            other => {
                out.app_problems.push((
                    a,
                    format!(
                        "write-back-method argocd: source type {} has no parameter overrides to patch",
                        other.unwrap_or("unknown (no status.sourceType)")
                    ),
                ));
                return None;
            }
        }
    };
    Some((source, kind))
}

/// The parameter overrides `source` has now.
fn live_overrides(source: &Source) -> OverrideFile {
    let mut overrides = OverrideFile::default();
    if let Some(k) = &source.kustomize {
        overrides.kustomize = Some(KustomizeOverrides {
            images: k.images.clone(),
            other: Default::default(),
        });
    }
    if let Some(h) = &source.helm {
        overrides.helm = Some(HelmOverrides {
            parameters: h
                .parameters
                .iter()
                .map(|p| OverrideParameter {
                    name: p.name.clone(),
                    value: p.value.clone(),
                    forcestring: p.force_string,
                })
                .collect(),
            other: Default::default(),
        });
    }
    overrides
}

/// The merge patch for `kind`'s overrides. Arrays are replaced whole by a merge patch, so the
/// list carries every entry, the ones tagpilot did not touch included.
pub fn patch_body(kind: SourceKind, overrides: &OverrideFile) -> serde_json::Value {
    match kind {
        SourceKind::Helm => {
            let parameters: Vec<HelmParameter> = overrides
                .helm
                .as_ref()
                .map(|h| {
                    h.parameters
                        .iter()
                        .map(|p| HelmParameter {
                            name: p.name.clone(),
                            value: p.value.clone(),
                            force_string: p.forcestring,
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({"spec": {"source": {"helm": {"parameters": parameters}}}})
        }
        _ => {
            let images = overrides
                .kustomize
                .as_ref()
                .map(|k| k.images.clone())
                .unwrap_or_default();
            json!({"spec": {"source": {"kustomize": {"images": images}}}})
        }
    }
}

/// The tag and digest Argo CD reports the app running for `repository`
/// (`status.summary.images`).
fn live_image(
    app: &Application,
    repository: &Repository,
) -> Option<(Option<String>, Option<String>)> {
    let images = &app.status.as_ref()?.summary.as_ref()?.images;
    images.iter().find_map(|i| {
        let r = crate::image::ImageRef::parse(i).ok()?;
        (Repository::parse(&r.name).ok()? == *repository).then_some((r.tag, r.digest))
    })
}
