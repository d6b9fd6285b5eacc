//! What a plan holds: the report's model. Plain data, shared by every renderer.

use std::path::PathBuf;

use serde::Serialize;

pub use crate::change::Change;
use crate::manifest::Edit;

#[cfg(doc)]
use super::reasons::Wait;
use super::reasons::{HoldReason, ProblemReason};

/// A reference the policy found but chose not to move, with the reason (pinned above the range,
/// no candidate, …). Shown so that "why didn't it update?" has an answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hold {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    pub file: String,
    pub line: usize,
    pub current: String,
    pub reason: HoldReason,
}

/// The tags a policy's selection passed over for one image, best first, and why (a required
/// platform missing, …): the answer to "why not the newest tag?". At most
/// [`SKIPPED_TAGS_SHOWN`] are kept; `more` counts the rest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedTags {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    pub image: String,
    pub tags: Vec<SkippedTag>,
    /// How many more tags were skipped than `tags` lists.
    #[serde(skip_serializing_if = "is_zero")]
    pub more: usize,
}

/// How many skipped tags a report lists per policy and image.
pub const SKIPPED_TAGS_SHOWN: usize = 5;

impl SkippedTags {
    /// The record of `skipped` (best first, each tag once), bounded to [`SKIPPED_TAGS_SHOWN`].
    pub fn new(policy: &str, image: &str, skipped: Vec<crate::select::Skipped>) -> Self {
        let more = skipped.len().saturating_sub(SKIPPED_TAGS_SHOWN);
        SkippedTags {
            repository: None,
            policy: policy.to_string(),
            image: image.to_string(),
            tags: skipped
                .into_iter()
                .take(SKIPPED_TAGS_SHOWN)
                .map(SkippedTag)
                .collect(),
            more,
        }
    }
}

/// One skipped tag: serialised as its `tag`, the `reason` as a bounded name, and the `message`
/// a person reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedTag(pub crate::select::Skipped);

impl Serialize for SkippedTag {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = s.serialize_struct("SkippedTag", 3)?;
        out.serialize_field("tag", &self.0.tag)?;
        out.serialize_field("reason", self.0.reason.label())?;
        out.serialize_field("message", &self.0.reason.to_string())?;
        out.end()
    }
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One field of an environment that follows others (`promote:`): what each upstream runs, and
/// what the field does about it (promote, up to date, or wait and why). The report's
/// promotions section.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Promotion {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    pub image: String,
    pub file: String,
    pub line: usize,
    /// The tag the field holds now.
    pub current: String,
    /// Since when the field holds it on the base branch (RFC 3339): the first-parent commit
    /// that set it, as an upstream's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// How many promoting links lie above it: the report lists a chain upstream first.
    #[serde(skip)]
    pub stage: usize,
    pub upstreams: Vec<UpstreamRun>,
    pub status: PromotionStatus,
    /// The tag it takes, when it promotes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Why it waits: soak time left, not verified, held, … The words of the field's
    /// [`Wait`]s, which its hold ([`HoldReason::PromotionWaits`]) keeps typed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub waits: Vec<String>,
}

/// What one upstream runs, as a promotion found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UpstreamRun {
    pub upstream: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Since when it runs the tag (RFC 3339).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// `verified at …`, `pending`, `failed: …`, `from git`.
    pub verification: String,
}

/// What a promoting field does this cycle; words only in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromotionStatus {
    Promote,
    UpToDate,
    Waits,
}

impl PromotionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            PromotionStatus::Promote => "promote",
            PromotionStatus::UpToDate => "up to date",
            PromotionStatus::Waits => "waits",
        }
    }
}

impl Serialize for PromotionStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Something that stopped part of the plan. The rest of the plan is still valid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// Why, typed; the report shows its words as `message`.
    #[serde(rename = "message")]
    pub reason: ProblemReason,
}

impl Problem {
    /// A problem for `reason`, naming nothing yet (the caller sets the policy, file, …).
    pub fn new(reason: ProblemReason) -> Self {
        Problem {
            repository: None,
            policy: None,
            image: None,
            file: None,
            line: None,
            reason,
        }
    }
}

/// A file that was not read as YAML and is left alone (a Helm template, say).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkippedFile {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub file: String,
    pub reason: String,
    /// Why, as a bounded set (for `tagpilot run`'s metric); `reason` says it in words.
    #[serde(skip)]
    pub kind: SkipKind,
}

/// Why a file was skipped, as `tagpilot_skipped_files{reason}` counts it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SkipKind {
    /// Not YAML tagpilot can read (a syntax error, a Go template).
    #[default]
    InvalidYaml,
    /// Not UTF-8 text: a binary file with a YAML name.
    NotText,
    /// A template of a Helm chart: tagpilot edits values files only.
    HelmTemplate,
    /// Collections nested deeper than the YAML reader's limit.
    TooDeep,
    /// Past another of the YAML reader's limits (a directive's length): perhaps valid YAML,
    /// never called invalid.
    OverLimit,
    /// Larger than a manifest may be ([`crate::plan::MAX_MANIFEST_BYTES`]); never read.
    TooLarge,
}

impl SkipKind {
    pub fn label(self) -> &'static str {
        match self {
            SkipKind::InvalidYaml => "invalid_yaml",
            SkipKind::NotText => "not_text",
            SkipKind::HelmTemplate => "helm_template",
            SkipKind::TooDeep => "too_deep",
            SkipKind::OverLimit => "over_limit",
            SkipKind::TooLarge => "too_large",
        }
    }
}

/// Something configured that tagpilot found nothing to act on: a policy whose targets match no
/// file, a policy whose image is in none of the files it matches, an Application whose sources
/// hold no field for its image. Each names what was searched, so "why did nothing happen?" has
/// an answer. [`FindingKind::severity`] says whether it is a problem (exit code 1) or a warning.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub kind: FindingKind,
    pub severity: Severity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// The policy's name; for an Application, the policy tagpilot made of its image.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// `namespace/name` of the Application.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub application: Option<String>,
    pub image: String,
    /// What was searched: the targets' paths and where, or the Application's files; for a
    /// version label left alone, its `file:line`.
    pub searched: String,
    pub message: String,
}

impl Finding {
    pub fn new(kind: FindingKind, image: String, searched: String) -> Self {
        Finding {
            kind,
            severity: kind.severity(),
            repository: None,
            policy: None,
            application: None,
            image,
            searched,
            message: kind.message().to_string(),
        }
    }
}

/// What a [`Finding`] found, as its metric label and the JSON report name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// A policy's targets match no file where they point: a mistyped glob (`aps/**`), a moved
    /// directory. Never right as configured, so a problem.
    NoFiles,
    /// A policy's targets match files, none of which holds its image: the image may simply be
    /// gone from those manifests for now, so a warning.
    ImageNotFound,
    /// An Application's sources hold no field for one of its images. As Image Updater, tagpilot
    /// leaves the Application alone, so a warning.
    ApplicationImageNotFound,
    /// A version label (`versionLabels`) in the resource of a moving image is left alone: it
    /// disagrees with the old tag, several images could mean it, or the selector names it. The
    /// image still moves, so a warning.
    VersionLabelLeft,
    /// A file a policy's targets name cannot be read as YAML (a Go template, a syntax error,
    /// not text, too large): whatever image it holds is not updated. Such files are common
    /// beside manifests (templated values), so a warning; the skipped files list them too.
    UnreadableFile,
    /// An Application's source contains changed files but tracks another revision
    /// (`targetRevision` a tag, a commit or another branch) than the branch changed: the change
    /// does not deploy it, so it is not named nor rendered. Nothing is wrong, so a warning.
    ApplicationOnOtherRevision,
    /// An Application's annotation under Image Updater's or tagpilot's prefix that nothing reads
    /// (a typo such as `pay.helm.image-tga`, an alias not in `image-list`): it does nothing,
    /// and the finding names the known key nearest to it. The rest of the Application still
    /// works, so a warning.
    UnknownAnnotation,
    /// A pattern policy matches a reference that a policy naming the image exactly follows
    /// (issue 31): the exact policy wins, as it always does. Said so the pattern's author sees
    /// which of its images it does not move, so a warning.
    PatternOverridden,
    /// Several pattern policies match a reference and one of higher `priority` follows it: the
    /// others pass it over. A warning, naming the one followed.
    PatternOutranked,
}

impl FindingKind {
    pub fn label(self) -> &'static str {
        match self {
            FindingKind::NoFiles => "no_files",
            FindingKind::ImageNotFound => "image_not_found",
            FindingKind::ApplicationImageNotFound => "application_image_not_found",
            FindingKind::VersionLabelLeft => "version_label_left",
            FindingKind::ApplicationOnOtherRevision => "application_on_other_revision",
            FindingKind::UnreadableFile => "unreadable_file",
            FindingKind::UnknownAnnotation => "unknown_annotation",
            FindingKind::PatternOverridden => "pattern_overridden",
            FindingKind::PatternOutranked => "pattern_outranked",
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            FindingKind::NoFiles => Severity::Problem,
            FindingKind::ImageNotFound
            | FindingKind::ApplicationImageNotFound
            | FindingKind::VersionLabelLeft
            | FindingKind::UnreadableFile
            | FindingKind::ApplicationOnOtherRevision
            | FindingKind::UnknownAnnotation
            | FindingKind::PatternOverridden
            | FindingKind::PatternOutranked => Severity::Warning,
        }
    }

    fn message(self) -> &'static str {
        match self {
            FindingKind::NoFiles => "its targets match no file",
            FindingKind::ImageNotFound => "no file its targets match holds the image",
            FindingKind::ApplicationImageNotFound => "its sources hold no field for the image",
            FindingKind::VersionLabelLeft => "a version label is left alone",
            FindingKind::ApplicationOnOtherRevision => {
                "its source contains changed files but tracks another revision than the branch \
                 changed, so the change does not deploy it"
            }
            FindingKind::UnreadableFile => {
                "a file its targets name cannot be read, so no image in it is updated"
            }
            FindingKind::UnknownAnnotation => "nothing reads this annotation",
            FindingKind::PatternOverridden => {
                "the pattern matches the image, but a policy naming it exactly follows it"
            }
            FindingKind::PatternOutranked => {
                "the pattern matches the image, but a pattern of higher priority follows it"
            }
        }
    }
}

/// Whether a finding makes the exit code 1 (`problem`) or only shows (`warning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Problem,
    Warning,
}

/// What tagpilot did, or would do, in one configured repository.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RepositoryOutcome {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    pub branch: String,
    pub status: RepositoryStatus,
    /// What named this repository: policy files and Applications.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<String>,
    pub commits: Vec<CommitSummary>,
    /// Pull-request mode: what happened (or would) to each group's pull request.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pull_requests: Vec<PullRequestSummary>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Where a repository stands after a cycle; words only in the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepositoryStatus {
    Pushed,
    WouldPush,
    UpToDate,
    /// Pull-request mode: see each group's pull request.
    PullRequests,
    Failed,
}

impl RepositoryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RepositoryStatus::Pushed => "pushed",
            RepositoryStatus::WouldPush => "would push",
            RepositoryStatus::UpToDate => "up to date",
            RepositoryStatus::PullRequests => "pull requests",
            RepositoryStatus::Failed => "failed",
        }
    }
}

impl std::fmt::Display for RepositoryStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for RepositoryStatus {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One change group's pull request in a repository's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PullRequestSummary {
    pub group: String,
    pub branch: String,
    /// `would open`, `opened`, `updated`, `closed`, `up to date`, `left alone: …`, …
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub number: Option<u64>,
    /// The number as the forge writes it: `#7` on GitHub, `!7` on GitLab.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// What did not go as configured but did not stop the pull request (an unknown reviewer).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommitSummary {
    pub id: String,
    pub summary: String,
}

/// The new text of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileUpdate {
    /// Relative to the root.
    pub path: PathBuf,
    pub original: String,
    pub updated: String,
    /// The edits behind `updated`, per policy, so the plan can be split into commits per policy.
    pub edits: Vec<(String, Vec<Edit>)>,
}

/// A configured repository's file, or an Application, as it is and as the plan leaves it: what
/// `tagpilot plan --diff` shows beside the local directory's [`FileUpdate`]s. Kept only when a
/// cycle is asked for diffs (`engine::Options::diff`), since it holds both texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDiff {
    pub target: DiffTarget,
    /// `None` for a file the plan creates (a new `.argocd-source-<app>.yaml`).
    pub original: Option<String>,
    pub updated: String,
}

/// Whose text a [`TargetDiff`] is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffTarget {
    /// A file of a configured repository, as its commit would leave it. `group` is set when the
    /// group is proposed on its own from the base (a pull request per policy), so one file may
    /// be shown once per group.
    RepositoryFile {
        repository: String,
        group: Option<String>,
        /// Relative to the repository root, with `/` separators.
        path: String,
    },
    /// The merge patch of an Application written with `write-back-method: argocd`: the
    /// Application's overrides as they are, and as the patch sets them.
    Application {
        /// `namespace/name`.
        id: String,
    },
    /// One resource an Argo CD Application renders, before and after a group's change
    /// (`tagpilot plan --diff --rendered`); `resource` is `kind/namespace/name`.
    Rendered {
        repository: String,
        group: String,
        application: String,
        resource: String,
    },
    /// An option of an Application's source that the render did not apply (no text of its own).
    RenderNote {
        repository: String,
        group: String,
        application: String,
        note: String,
    },
    /// An Application whose manifests could not be rendered, and why (no text of its own).
    RenderFailed {
        repository: String,
        group: String,
        application: String,
        reason: String,
    },
}

/// Everything tagpilot would do, and everything that stopped it.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub changes: Vec<Change>,
    pub holds: Vec<Hold>,
    /// Tags selection passed over, per policy and image, with the reasons.
    pub skipped_tags: Vec<SkippedTags>,
    pub problems: Vec<Problem>,
    pub skipped: Vec<SkippedFile>,
    /// What was configured but found nothing to act on; see [`Finding`].
    pub findings: Vec<Finding>,
    pub files: Vec<FileUpdate>,
    /// Configured repositories' files and Application patches before and after, when asked for.
    pub diffs: Vec<TargetDiff>,
    /// References found that are already where their policy wants them.
    pub up_to_date: usize,
    /// Policies that matched at least one reference.
    pub policies_used: usize,
    /// Rollback holds a newer tag outlived in this plan: they end, and the caller releases
    /// them from the state store ([`crate::holds::HeldTag::outlived_by`]).
    pub ended_holds: Vec<crate::holds::HeldTag>,
    /// Holds found this cycle: a person's rollbacks on a base branch (see
    /// [`crate::plan::rollbacks`]), honoured in this plan already.
    pub holds_found: Vec<crate::holds::HeldTag>,
    /// The fields of environments that follow others (`promote:`), and what each does.
    pub promotions: Vec<Promotion>,
    /// The fields found where their policy wants them (counted in `up_to_date`): a source that
    /// is up to date still claims its field, so another source moving it is a conflict
    /// ([`crate::plan::merge`]). Not reported; [`crate::plan::merge::merge`] consumes them.
    pub claims: Vec<Claim>,
}

/// A field a policy found already where it wants it: what it claims, for [`Plan::claims`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub policy: String,
    /// The repository the policy follows, as [`Change::image`] spells it.
    pub image: String,
    /// Path relative to the root, with `/` separators, as [`Change::file`].
    pub file: String,
    /// 1-based, as [`Change::line`].
    pub line: usize,
    /// The version text the field holds, as the report shows it.
    pub current: String,
}

impl Plan {
    pub fn has_changes(&self) -> bool {
        !self.files.is_empty()
    }

    /// Whether anything in the plan makes the exit code 1: a problem, or a finding that is one.
    pub fn has_problems(&self) -> bool {
        !self.problems.is_empty()
            || self
                .findings
                .iter()
                .any(|f| f.severity == Severity::Problem)
    }
}

impl Plan {
    /// Marks everything in the plan as belonging to the repository `name`.
    pub fn set_repository(&mut self, name: &str) {
        let name = Some(name.to_string());
        self.changes
            .iter_mut()
            .for_each(|c| c.repository = name.clone());
        self.holds
            .iter_mut()
            .for_each(|h| h.repository = name.clone());
        self.skipped_tags
            .iter_mut()
            .for_each(|s| s.repository = name.clone());
        self.problems
            .iter_mut()
            .for_each(|p| p.repository = name.clone());
        self.skipped
            .iter_mut()
            .for_each(|s| s.repository = name.clone());
        self.findings
            .iter_mut()
            .for_each(|f| f.repository = name.clone());
        self.promotions
            .iter_mut()
            .for_each(|p| p.repository = name.clone());
    }

    /// Adds another scope's plan to this one, for one report over every repository.
    pub fn merge(&mut self, other: Plan) {
        self.changes.extend(other.changes);
        self.holds.extend(other.holds);
        self.skipped_tags.extend(other.skipped_tags);
        self.problems.extend(other.problems);
        self.skipped.extend(other.skipped);
        self.findings.extend(other.findings);
        self.files.extend(other.files);
        self.diffs.extend(other.diffs);
        self.up_to_date += other.up_to_date;
        self.policies_used += other.policies_used;
        self.ended_holds.extend(other.ended_holds);
        self.holds_found.extend(other.holds_found);
        self.promotions.extend(other.promotions);
        self.claims.extend(other.claims);
    }
}
