//! What became of each image of each app, for the "Applications" report, and the one decision
//! both kinds of override — a `.argocd-source-<app>.yaml` file ([`super`]) and a live
//! Application's parameter overrides ([`super::patch`]) — make per image ([`decide_override`]).
//!
//! Pure apart from the registry, reached through the [`Registry`] trait.

use std::fmt;

use serde::Serialize;

use crate::error_chain::Failure;
use crate::holds::{HeldTag, Holds};
use crate::plan::{self, Change, Hold, Inspector, Problem, ProblemReason, SkippedTags};
use crate::policy::ImagePolicy;
use crate::registry::{Registry, RegistryError};

use super::super::read::settings::ImageSettings;
use super::super::resolve::{ManagedApp, SourceKind};
use super::override_file::OverrideFile;

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
    pub status: ImageStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<ImageReason>,
}

/// Why an image's outcome is what it is; the reports show its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageReason {
    /// Held, as the plan's hold says.
    Held(plan::HoldReason),
    /// A problem, as the plan's problem says.
    Problem(plan::ProblemReason),
    /// Not found where the app's changes land: what was searched.
    NotFound(String),
}

impl fmt::Display for ImageReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageReason::Held(why) => why.fmt(f),
            ImageReason::Problem(why) => why.fmt(f),
            ImageReason::NotFound(why) => f.write_str(why),
        }
    }
}

impl Serialize for ImageReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// What an image's outcome is; serialised (and shown) as the words the report uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum ImageStatus {
    /// A newer tag is chosen: `from -> to`.
    #[serde(rename = "update")]
    Update,
    #[serde(rename = "up to date")]
    UpToDate,
    /// Not moved, with the reason (a policy's rule, or sources that disagree).
    #[serde(rename = "held")]
    Held,
    /// No reference to the image where the app's changes land.
    #[serde(rename = "not found")]
    NotFound,
    #[serde(rename = "problem")]
    Problem,
}

impl ImageStatus {
    /// The word the reports show.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageStatus::Update => "update",
            ImageStatus::UpToDate => "up to date",
            ImageStatus::Held => "held",
            ImageStatus::NotFound => "not found",
            ImageStatus::Problem => "problem",
        }
    }
}

impl fmt::Display for ImageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with the word the reports show (`status == "update"`).
impl PartialEq<&str> for ImageStatus {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
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
) -> Result<Decided, RegistryError> {
    decide_with(policy, tag, digest, &Inspector::new(registry)).await
}

async fn decide_with<R: Registry>(
    policy: &ImagePolicy,
    tag: Option<&str>,
    digest: Option<&str>,
    inspector: &Inspector<'_, R>,
) -> Result<Decided, RegistryError> {
    let tags = inspector.registry().list_tags(&policy.image).await?;
    let candidates = inspector.candidates(policy, &tags, &()).await?;
    plan::decide_reference(policy, tag, digest, false, &candidates, inspector).await
}

/// [`decide`], honouring the holds on the override's place (the file and field it writes, or
/// every field of the policy for an annotation's hold); with the tags it passed over.
async fn decide_held<R: Registry>(
    policy: &ImagePolicy,
    current: (Option<&str>, Option<&str>),
    overrides: &Overrides<'_, R>,
    place: &OverridePlace<'_>,
) -> (Result<Decided, RegistryError>, Vec<SkippedTags>) {
    let inspector = Inspector::new(overrides.registry);
    let decided = decide_held_with(policy, current, overrides, place, &inspector).await;
    (decided, inspector.into_skipped())
}

async fn decide_held_with<R: Registry>(
    policy: &ImagePolicy,
    (tag, digest): (Option<&str>, Option<&str>),
    overrides: &Overrides<'_, R>,
    place: &OverridePlace<'_>,
    inspector: &Inspector<'_, R>,
) -> Result<Decided, RegistryError> {
    let Some(holds) = overrides.holds.filter(|h| !h.is_empty()) else {
        return decide_with(policy, tag, digest, inspector).await;
    };
    let tags = inspector.registry().list_tags(&policy.image).await?;
    let candidates = inspector.candidates(policy, &tags, &()).await?;
    let first = plan::decide_reference(policy, tag, digest, false, &candidates, inspector).await?;
    let Decided::Move { tag: chosen, .. } = &first else {
        return Ok(first);
    };
    if let Some(why) = holds.unknown_because() {
        return Ok(Decided::Hold(plan::unknown_holds(why, chosen).1));
    }
    let on_field: Vec<&HeldTag> = holds
        .in_file(place.repository, &policy.name, place.file)
        .filter(|h| h.key.is_whole_policy() || h.key.field == place.field)
        .collect();
    // A rollback hold is found in manifests' fields only, never here: nothing here ends.
    let mut ended = Vec::new();
    let Some(veto) = plan::veto(policy, &first, &candidates, &on_field, &mut ended) else {
        return Ok(first);
    };
    let next = plan::decide_reference(policy, tag, digest, false, &veto.allowed, inspector).await?;
    Ok(veto.settle(next))
}

// === overrides ===

/// Where an override's records point: the plan's change, hold or problem names `file` (the
/// `.argocd-source` file, or `Application <ns>/<name>`) and, for files in git, `repository`.
pub struct OverridePlace<'a> {
    pub repository: Option<&'a str>,
    pub file: &'a str,
    /// The changed field as the change shows it (`argocd-source kustomize`,
    /// `spec.source.helm.parameters`).
    pub field: &'a str,
}

/// Where one app's override images are written, as their outcomes report it.
pub struct OverrideTarget<'a> {
    pub place: OverridePlace<'a>,
    /// 1-based source number, as the Application lists them.
    pub source: usize,
    /// The outcomes' repository: a configured repository, or the Application itself.
    pub repository: String,
    /// The outcomes' file: the `.argocd-source` file, or the patched field.
    pub file: String,
}

/// Everything deciding one app's override images found.
#[derive(Debug, Default)]
pub struct AppDecisions {
    /// The overrides set to new tags; a change's line is 0 until the file is rendered.
    pub changes: Vec<Change>,
    pub holds: Vec<Hold>,
    pub problems: Vec<Problem>,
    pub up_to_date: usize,
    pub images: Vec<ImageOutcome>,
    /// The tags selection passed over, per policy and image.
    pub skipped_tags: Vec<SkippedTags>,
}

/// The overrides being decided: the file or live overrides images are set in, the kind of
/// source they are for, and the registry the decisions ask.
pub struct Overrides<'a, R> {
    pub file: &'a mut OverrideFile,
    pub kind: SourceKind,
    pub registry: &'a R,
    /// The held tags to honour ([`crate::holds`]); `None` where none are read.
    pub holds: Option<&'a Holds>,
    /// The tags the decisions passed over so far, per policy and image (for the report).
    pub skipped: Vec<SkippedTags>,
}

/// Decides every image of app `a` ([`decide_override`] each) against `overrides`, setting the
/// ones that move. An image the overrides do not name is looked for with `elsewhere` (the
/// source's manifests, or what the live Application runs); `missing` says why one that is
/// nowhere is not written.
pub async fn decide_app_overrides<R: Registry>(
    overrides: &mut Overrides<'_, R>,
    a: usize,
    app: &ManagedApp,
    target: &OverrideTarget<'_>,
    elsewhere: impl Fn(&ImageSettings, &ImagePolicy) -> Option<(Option<String>, Option<String>)>,
    missing: impl Fn(&ImagePolicy) -> String,
) -> AppDecisions {
    let kind = overrides.kind;
    let mut out = AppDecisions::default();
    for (image, policy) in app.annotations.images.iter().zip(&app.policies) {
        let Some(policy) = policy else {
            continue;
        };
        let mut outcome = ImageOutcome {
            app: a,
            alias: image.alias.clone(),
            image: policy.image.to_string(),
            source: target.source,
            kind,
            repository: target.repository.clone(),
            file: Some(target.file.clone()),
            from: None,
            to: None,
            status: ImageStatus::NotFound,
            reason: None,
        };
        let current = overrides
            .file
            .current(kind, image, policy)
            .or_else(|| elsewhere(image, policy));
        let record = decide_override(
            overrides,
            image,
            policy,
            current,
            || missing(policy),
            &target.place,
            &mut outcome,
        )
        .await;
        match record {
            Some(Record::Change(c)) => out.changes.push(c),
            Some(Record::Hold(h)) => out.holds.push(h),
            Some(Record::Problem(p)) => out.problems.push(p),
            Some(Record::UpToDate) => out.up_to_date += 1,
            None => {}
        }
        out.images.push(outcome);
    }
    out.skipped_tags = std::mem::take(&mut overrides.skipped);
    out
}

/// What an override decision adds to the plan besides the image's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// The override is set to the new tag; the change's line is 0 until the file is rendered.
    Change(Change),
    Hold(Hold),
    Problem(Problem),
    /// Counted in the plan's "up to date".
    UpToDate,
}

/// Decides one image of an override (`.argocd-source-<app>.yaml`, or a live Application's
/// `spec.source.kustomize.images` / `helm.parameters`) from where it is now (`current`, `None`
/// when neither the overrides nor the source name it), sets a moved image in `overrides`,
/// and fills in `outcome` (its `status`, `from`, `to` and `reason`). `missing` says why an
/// image that is nowhere (and not `force-update`d) is not written.
///
/// "Up to date" is counted once per image that stays ([`Record::UpToDate`]), as the ordinary
/// planner counts once per reference that stays, so the summary means the same whichever way
/// an image is written. (The `.argocd-source` path used to count one per file without changes,
/// held and failed images included.)
pub async fn decide_override<R: Registry>(
    overrides: &mut Overrides<'_, R>,
    image: &ImageSettings,
    policy: &ImagePolicy,
    current: Option<(Option<String>, Option<String>)>,
    missing: impl FnOnce() -> String,
    place: &OverridePlace<'_>,
    outcome: &mut ImageOutcome,
) -> Option<Record> {
    let (tag, digest) = match current {
        Some(c) => c,
        None if image.force_update => (None, None),
        None => {
            outcome.status = ImageStatus::NotFound;
            outcome.reason = Some(ImageReason::NotFound(missing()));
            return None;
        }
    };
    let from = plan::version_text(tag.as_deref(), digest.as_deref());
    outcome.from = Some(from.clone());
    let repository = place.repository.map(str::to_string);
    let current = (tag.as_deref(), digest.as_deref());
    let (decided, skipped) = decide_held(policy, current, overrides, place).await;
    overrides.skipped.extend(skipped);
    let record = match decided {
        Ok(Decided::Move { tag, digest }) => {
            let to = plan::version_text(Some(&tag), digest.as_deref());
            overrides
                .file
                .set(overrides.kind, image, policy, &tag, digest.as_deref());
            outcome.status = ImageStatus::Update;
            outcome.to = Some(to.clone());
            Record::Change(Change {
                repository,
                policy: policy.name.clone(),
                image: policy.image.to_string(),
                file: place.file.to_string(),
                line: 0,
                field: place.field.to_string(),
                strategy: policy.strategy.name(),
                from,
                to,
                source: None,
                labels: Vec::new(),
                promotion: None,
            })
        }
        Ok(Decided::Stay) => {
            outcome.status = ImageStatus::UpToDate;
            Record::UpToDate
        }
        Ok(Decided::Hold(reason)) => {
            outcome.status = ImageStatus::Held;
            outcome.reason = Some(ImageReason::Held(reason.clone()));
            Record::Hold(Hold {
                repository,
                policy: policy.name.clone(),
                file: place.file.to_string(),
                line: 0,
                current: from,
                reason,
            })
        }
        Err(e) => {
            let reason = ProblemReason::Registry(Failure::new(e));
            outcome.status = ImageStatus::Problem;
            outcome.reason = Some(ImageReason::Problem(reason.clone()));
            Record::Problem(Problem {
                repository,
                policy: Some(policy.name.clone()),
                image: Some(policy.image.to_string()),
                file: Some(place.file.to_string()),
                line: None,
                reason,
            })
        }
    };
    Some(record)
}
