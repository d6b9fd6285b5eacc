//! The label sets of tagpilot's own series: bounded sets each, never tags, digests or commit ids.

use prometheus_client::encoding::EncodeLabelSet;

use crate::plan::{FindingKind, Severity, SkipKind};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ResultLabel {
    pub(super) result: &'static str,
}

/// The `policy` value every Argo CD Application image's updates count under: there is one such
/// policy per Application image, thousands in a large cluster. In parentheses, so no policy
/// file's `metadata.name` can take it.
pub const APPLICATION_POLICIES: &str = "(applications)";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct UpdateLabels {
    pub(super) policy: String,
    pub(super) result: &'static str,
}

/// A notification sink (by its configured name) and what became of a message.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SinkLabels {
    pub(super) sink: String,
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct WebhookLabels {
    pub(super) kind: &'static str,
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RegistryStatusLabels {
    pub(super) registry: String,
    pub(super) status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct RegistryLabel {
    pub(super) registry: String,
}

/// The `--state-dir`: one value per process.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct DirLabel {
    pub(super) dir: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct KindLabel {
    pub(super) kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct FindingLabels {
    pub(super) kind: &'static str,
    pub(super) severity: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct SkipLabel {
    pub(super) reason: &'static str,
}

/// Every finding kind, so each series shows from the start at zero.
pub(super) const FINDING_KINDS: [FindingKind; 9] = [
    FindingKind::NoFiles,
    FindingKind::ImageNotFound,
    FindingKind::ApplicationImageNotFound,
    FindingKind::VersionLabelLeft,
    FindingKind::ApplicationOnOtherRevision,
    FindingKind::UnreadableFile,
    FindingKind::UnknownAnnotation,
    FindingKind::PatternOverridden,
    FindingKind::PatternOutranked,
];

/// Every reason a file is skipped for.
pub(super) const SKIP_KINDS: [SkipKind; 6] = [
    SkipKind::InvalidYaml,
    SkipKind::NotText,
    SkipKind::HelmTemplate,
    SkipKind::TooDeep,
    SkipKind::OverLimit,
    SkipKind::TooLarge,
];

pub(super) fn finding_labels(kind: FindingKind) -> FindingLabels {
    FindingLabels {
        kind: kind.label(),
        severity: match kind.severity() {
            Severity::Problem => "problem",
            Severity::Warning => "warning",
        },
    }
}
