//! Why the plan leaves a field where it is ([`HoldReason`]) and why a promoting field waits
//! ([`Wait`]): typed, each carrying what it names (tags, policies, sources, the held tag, the
//! error behind it), so that code and tests match on the reason and only the edges (reports,
//! logs, pull requests, `ImageUpdater` status) render its words, through `Display`. The report
//! serialises each as those words, so its JSON is what it always was.

use std::fmt;

use serde::Serialize;

use crate::error_chain::Failure;
use crate::holds::{HeldTag, hold_reason};
use crate::promotion::{Unread, Waiting};
use crate::select::{self, Skipped};

use super::steady::STEADY_FOR;

/// The tag a reference without one is pulled as.
pub(super) const IMPLICIT_TAG: &str = "latest";

/// Why a field is held: selection's reasons, and what the planner adds (the entry's pins,
/// holds on tags, promotion, sources that disagree, a group held steady).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldReason {
    /// Selection leaves the reference where it is.
    Selection(select::HoldReason),
    /// A kustomize entry pins no version (`only` says what it has instead): kustomize keeps
    /// the base's version, and tagpilot does not add the key.
    PinsNoVersion {
        only: &'static str,
        digest_strategy: bool,
    },
    /// A kustomize entry with a tag only, under the digest strategy, which writes a digest.
    PinsNoDigest,
    /// A kustomize entry with a digest only, under a strategy that writes a tag.
    PinsNoTag { strategy: &'static str },
    /// Helm values with an empty tag (`tag: ""`), which a chart reads as its own appVersion: it
    /// names no version to move from, and writing one would pin the image away from the chart's.
    EmptyTag,
    /// Helm values that name an image but no tag key: the chart's own default runs, and adding
    /// a key would pin the image away from it without anyone asking.
    MissingTag,
    /// A reference without a tag is the `latest` it is pulled as, held for this reason.
    ImplicitLatest(Box<HoldReason>),
    /// digest: the followed tag's image is refused (a platform missing, a signature refused).
    Refused(Skipped),
    /// A held tag ([`crate::holds`]) stands in the way of the tag chosen, and no other is.
    HeldTag { held: HeldTag, chosen: String },
    /// The held tags cannot be read (the state store's `why`), so a change to `tag` may be
    /// held: every change that could be is.
    HoldsUnknown { why: String, tag: String },
    /// The field still runs a tag that failed there, with no newer tag to replace it; `also`
    /// is why else it stays.
    StillRuns {
        failed: HeldTag,
        also: Option<Box<HoldReason>>,
    },
    /// A promoting field waits, for these reasons.
    PromotionWaits(Vec<Wait>),
    /// Sources want different things of one field: every side, as it was found.
    SourcesDisagree(Vec<Side>),
    /// The registry now offers only `offered`, which ranks below `was`, the group's last
    /// proposal: kept for [`STEADY_FOR`] rather than proposed backwards.
    Steady {
        was: String,
        group: String,
        offered: String,
    },
    /// Committed in `group` with another change that is held as [`HoldReason::Steady`]
    /// (`policy`'s change of `file`): the group waits whole.
    SteadyWith {
        group: String,
        policy: String,
        file: String,
        was: String,
        offered: String,
    },
    /// The group's commit carries the edits of `file` made by `group`, which is held: it waits
    /// with it.
    StackedOnHeld { group: String, file: String },
    /// An Application's kustomization gets other edits this cycle; its `images:` entry for
    /// `image` is added once they are written.
    KustomizationBusy { file: String, image: String },
    /// An Application's `images:` entry could not be added to its kustomization.
    EntryNotAdded(Failure),
    /// A change window (`windows:`) keeps the write out until it opens (`None`: not within a
    /// year); planned, written once it opens.
    WindowClosed {
        window: String,
        opens: Option<jiff::Timestamp>,
    },
    /// Every write is frozen (`tagpilot freeze`), by `by` for `reason`, since `since`.
    Frozen {
        by: String,
        reason: String,
        since: jiff::Timestamp,
    },
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::Selection(why) => why.fmt(f),
            HoldReason::PinsNoVersion {
                only,
                digest_strategy,
            } => {
                let add = match digest_strategy {
                    true => "`digest:` to have it pinned",
                    false => "`newTag:` to have it updated",
                };
                write!(
                    f,
                    "the entry pins no version ({only}): kustomize keeps the base's version; \
                     add {add}"
                )
            }
            HoldReason::PinsNoDigest => f.write_str(
                "the entry pins no digest, and the digest strategy writes only a digest; add \
                 `digest:` to have it pinned",
            ),
            HoldReason::PinsNoTag { strategy } => write!(
                f,
                "the entry pins no tag (only a digest), and the {strategy} strategy writes a \
                 tag; add `newTag:` to have it updated"
            ),
            HoldReason::EmptyTag => f.write_str(
                "the tag is empty, which a chart reads as its own appVersion; left as written \
                 (replaceUnreadableTags: true would replace it)",
            ),
            HoldReason::MissingTag => f.write_str(
                "the values name no tag, so the chart's own default runs (usually its \
                 appVersion); left as written (replaceUnreadableTags: true would add one)",
            ),
            HoldReason::ImplicitLatest(why) => write!(
                f,
                "the reference has no tag, which is an implicit {IMPLICIT_TAG:?}: {why}"
            ),
            HoldReason::Refused(skipped) => write!(f, "tag {skipped}"),
            HoldReason::HeldTag { held, chosen } => f.write_str(&hold_reason(held, chosen)),
            HoldReason::HoldsUnknown { why, tag } => write!(
                f,
                "held: the held tags cannot be read ({why}); {tag} may be held"
            ),
            HoldReason::StillRuns { failed, also } => {
                write!(
                    f,
                    "still runs {}: {} (held since {}); no newer tag to replace it",
                    failed.tag, failed.reason, failed.since
                )?;
                match also {
                    Some(also) => write!(f, "; {also}"),
                    None => Ok(()),
                }
            }
            HoldReason::PromotionWaits(waits) => {
                f.write_str("promotion waits: ")?;
                joined(f, waits, "; ")
            }
            HoldReason::SourcesDisagree(sides) => {
                f.write_str("sources disagree: ")?;
                joined(f, sides, ", ")?;
                f.write_str("; held until they agree")
            }
            HoldReason::Steady {
                was,
                group,
                offered,
            } => write!(
                f,
                "{was} was proposed last for group {group} and the registry now offers only \
                 {offered}, which ranks lower (a registry replica lagging?); keeping the last \
                 proposal for up to {} rather than proposing backwards",
                humantime::format_duration(STEADY_FOR.unsigned_abs())
            ),
            HoldReason::SteadyWith {
                group,
                policy,
                file,
                was,
                offered,
            } => write!(
                f,
                "committed in group {group} with policy {policy}'s change of {file}, which is \
                 held rather than proposed backwards ({was} was proposed last, {offered} is \
                 offered now): the group waits whole"
            ),
            HoldReason::StackedOnHeld { group, file } => write!(
                f,
                "its commit carries the edits of {file} made by group {group}, which is held: \
                 it waits with it"
            ),
            HoldReason::KustomizationBusy { file, image } => write!(
                f,
                "{file} gets other edits this cycle; its `images:` entry for {image} is added \
                 once they are written"
            ),
            HoldReason::EntryNotAdded(error) => error.fmt(f),
            HoldReason::WindowClosed {
                window,
                opens: Some(opens),
            } => write!(
                f,
                "waiting for the window that opens at {opens} ({window}); written then"
            ),
            HoldReason::WindowClosed {
                window,
                opens: None,
            } => write!(
                f,
                "waiting for a window: {window} keeps writes out, and it opens not within a year"
            ),
            HoldReason::Frozen { by, reason, since } => write!(
                f,
                "frozen by {by} since {since}: {reason}; written once unfrozen"
            ),
        }
    }
}

impl From<select::HoldReason> for HoldReason {
    fn from(why: select::HoldReason) -> Self {
        HoldReason::Selection(why)
    }
}

/// The report shows a hold's reason as its words.
impl Serialize for HoldReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// One source's side of a field sources disagree on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    pub policy: String,
    /// Where the policy comes from: `policy file policies/api.yaml`, `Application argocd/shop`.
    pub source: String,
    pub stance: Stance,
}

/// What one source wants of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stance {
    /// It moves the field to this version.
    Wants(String),
    /// It finds the field where it wants it, at this version.
    UpToDate(String),
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Side {
            policy,
            source,
            stance,
        } = self;
        match stance {
            Stance::Wants(to) => write!(f, "{policy} ({source}) wants {to}"),
            Stance::UpToDate(at) => write!(f, "{policy} ({source}) is up to date at {at}"),
        }
    }
}

/// Why a promoting field waits, as its row in the promotions section and its hold say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wait {
    /// What its upstreams run says so ([`crate::promotion::decide`]).
    Upstream(Waiting),
    /// Its upstreams could not be read.
    UpstreamsUnread(Unread),
    /// Its upstreams were not read: promotion is planned for repository targets only (the
    /// local directory is no base branch to count a soak time on).
    UpstreamsNotRead,
}

impl fmt::Display for Wait {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Wait::Upstream(waiting) => waiting.fmt(f),
            Wait::UpstreamsUnread(why) => write!(f, "its upstreams could not be read: {why}"),
            Wait::UpstreamsNotRead => f.write_str(
                "its upstreams were not read: promotion is planned where a policy's targets \
                 name a configured repository",
            ),
        }
    }
}

fn joined<T: fmt::Display>(f: &mut fmt::Formatter<'_>, items: &[T], sep: &str) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(sep)?;
        }
        item.fmt(f)?;
    }
    Ok(())
}

/// What stopped part of a plan, or of its writing ([`super::Problem`]); the rest still runs.
/// An error behind it is kept as one ([`Failure`]) where it is owned, and rendered with its
/// causes where it is shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemReason {
    /// The registry did not answer what deciding a field needed (a listing, an inspection, a
    /// signature).
    Registry(Failure),
    /// A field's edit could not be made.
    EditFailed(Failure),
    /// A file's edits failed verification: the file is left out whole.
    EditDropped(Failure),
    /// A file could not be read.
    Unreadable(Failure),
    /// A setter marker (`# {"$imagepolicy": …}`) resolves to nothing, and why.
    MarkerUnresolved { marker: String, reason: String },
    /// A reference of a policy's image that cannot be written: the field as the plan names it,
    /// and why.
    NotWritable { field: String, reason: String },
    /// No one policy owns a field (a marker naming none, policies contesting it).
    Unowned(Failure),
    /// The edits of several sources of one file cannot be joined: the file is left alone.
    NotJoined(Failure),
    /// The held tags cannot be read (`why`): every change that could be held is held.
    HoldsUnknown { why: String },
    /// The Helm value an Application's image names cannot be written: where, and why.
    HelmValue(String),
    /// A file could not be read to show its diff.
    DiffUnread(Failure),
    /// A policy file that cannot be loaded: its error, with its causes.
    BrokenPolicy(String),
    /// Applications could not all be read (a repository of `applications.fromGit`, the
    /// cluster).
    Applications(String),
    /// One Application's problem (`namespace/name`).
    Application { id: String, problem: String },
    /// Writing failed: the local directory, an Application's patch, an `ImageUpdater`'s status.
    WriteFailed(Failure),
}

impl fmt::Display for ProblemReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemReason::Registry(e)
            | ProblemReason::EditFailed(e)
            | ProblemReason::Unowned(e)
            | ProblemReason::WriteFailed(e) => e.fmt(f),
            ProblemReason::EditDropped(e) => write!(f, "edit dropped: {e}"),
            ProblemReason::Unreadable(e) => write!(f, "cannot read: {e}"),
            ProblemReason::MarkerUnresolved { marker, reason } => {
                write!(f, "marker `{marker}` resolves to nothing: {reason}")
            }
            ProblemReason::NotWritable { field, reason } => {
                write!(f, "{field}: {reason}; left as written")
            }
            ProblemReason::NotJoined(e) => write!(
                f,
                "edits of several sources cannot be joined; file left alone: {e}"
            ),
            ProblemReason::HoldsUnknown { why } => write!(
                f,
                "held tags unknown: {why}; every change that could be held is held"
            ),
            ProblemReason::DiffUnread(e) => write!(f, "reading the file for its diff: {e}"),
            ProblemReason::HelmValue(why)
            | ProblemReason::BrokenPolicy(why)
            | ProblemReason::Applications(why) => f.write_str(why),
            ProblemReason::Application { id, problem } => write!(f, "application {id}: {problem}"),
        }
    }
}

/// The report shows a problem's reason as its words.
impl Serialize for ProblemReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holds::FieldKey;
    use crate::select::SkipReason;

    fn failed(tag: &str) -> HeldTag {
        HeldTag {
            key: FieldKey {
                repository: None,
                policy: "api".into(),
                file: "deploy.yaml".into(),
                field: "Deployment/api container api".into(),
            },
            tag: tag.into(),
            reason: crate::holds::HoldReason::Failed {
                application: "argocd/api".into(),
                failure: "health Degraded".into(),
            },
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn each_hold_reason_renders_its_words() {
        let side = |policy: &str, stance| Side {
            policy: policy.into(),
            source: format!("source of {policy}"),
            stance,
        };
        let cases: Vec<(HoldReason, &str)> = vec![
            (
                HoldReason::Selection(select::HoldReason::NoTags),
                "the registry has no tags",
            ),
            (
                HoldReason::PinsNoVersion {
                    only: "only `newName`",
                    digest_strategy: false,
                },
                "the entry pins no version (only `newName`): kustomize keeps the base's \
                 version; add `newTag:` to have it updated",
            ),
            (
                HoldReason::PinsNoDigest,
                "the entry pins no digest, and the digest strategy writes only a digest; add \
                 `digest:` to have it pinned",
            ),
            (
                HoldReason::PinsNoTag { strategy: "semver" },
                "the entry pins no tag (only a digest), and the semver strategy writes a tag; \
                 add `newTag:` to have it updated",
            ),
            (
                HoldReason::ImplicitLatest(Box::new(HoldReason::Selection(
                    select::HoldReason::NoTags,
                ))),
                "the reference has no tag, which is an implicit \"latest\": the registry has \
                 no tags",
            ),
            (
                HoldReason::Refused(Skipped {
                    tag: "stable".into(),
                    reason: SkipReason::Unsigned,
                }),
                "tag stable: not signed (no cosign signature found)",
            ),
            (
                HoldReason::HeldTag {
                    held: failed("1.3.0"),
                    chosen: "1.3.0".into(),
                },
                "held: failed in Application argocd/api: health Degraded since \
                 2026-11-25T10:00:00Z; 1.3.0 is not proposed again",
            ),
            (
                HoldReason::HoldsUnknown {
                    why: "the state store is down".into(),
                    tag: "1.3.0".into(),
                },
                "held: the held tags cannot be read (the state store is down); 1.3.0 may be held",
            ),
            (
                HoldReason::StillRuns {
                    failed: failed("1.3.0"),
                    also: Some(Box::new(HoldReason::MissingTag)),
                },
                "still runs 1.3.0: failed in Application argocd/api: health Degraded (held \
                 since 2026-11-25T10:00:00Z); no newer tag to replace it; the values name no \
                 tag, so the chart's own default runs (usually its appVersion); left as written \
                 (replaceUnreadableTags: true would add one)",
            ),
            (
                HoldReason::PromotionWaits(vec![
                    Wait::UpstreamsNotRead,
                    Wait::Upstream(Waiting::NotRunning {
                        upstream: "staging".into(),
                    }),
                ]),
                "promotion waits: its upstreams were not read: promotion is planned where a \
                 policy's targets name a configured repository; staging does not run the image",
            ),
            (
                HoldReason::SourcesDisagree(vec![
                    side("api", Stance::Wants("1.1.0".into())),
                    side("shop/api", Stance::UpToDate("1.0.0".into())),
                ]),
                "sources disagree: api (source of api) wants 1.1.0, shop/api (source of \
                 shop/api) is up to date at 1.0.0; held until they agree",
            ),
            (
                HoldReason::Steady {
                    was: "1.3.0".into(),
                    group: "api".into(),
                    offered: "1.2.0".into(),
                },
                "1.3.0 was proposed last for group api and the registry now offers only \
                 1.2.0, which ranks lower (a registry replica lagging?); keeping the last \
                 proposal for up to 1h rather than proposing backwards",
            ),
            (
                HoldReason::SteadyWith {
                    group: "manifests".into(),
                    policy: "api".into(),
                    file: "a.yaml".into(),
                    was: "1.3.0".into(),
                    offered: "1.2.9".into(),
                },
                "committed in group manifests with policy api's change of a.yaml, which is held \
                 rather than proposed backwards (1.3.0 was proposed last, 1.2.9 is offered \
                 now): the group waits whole",
            ),
            (
                HoldReason::StackedOnHeld {
                    group: "api".into(),
                    file: "a.yaml".into(),
                },
                "its commit carries the edits of a.yaml made by group api, which is held: it \
                 waits with it",
            ),
            (
                HoldReason::WindowClosed {
                    window: "office-hours".into(),
                    opens: Some("2026-01-05T08:00:00Z".parse().unwrap()),
                },
                "waiting for the window that opens at 2026-01-05T08:00:00Z (office-hours); \
                 written then",
            ),
            (
                HoldReason::Frozen {
                    by: "alice".into(),
                    reason: "incident 42".into(),
                    since: "2026-01-05T08:00:00Z".parse().unwrap(),
                },
                "frozen by alice since 2026-01-05T08:00:00Z: incident 42; written once unfrozen",
            ),
            (
                HoldReason::KustomizationBusy {
                    file: "apps/kustomization.yaml".into(),
                    image: "ghcr.io/acme/api".into(),
                },
                "apps/kustomization.yaml gets other edits this cycle; its `images:` entry \
                 for ghcr.io/acme/api is added once they are written",
            ),
        ];
        for (reason, words) in cases {
            assert_eq!(reason.to_string(), words, "{reason:?}");
            assert_eq!(
                serde_json::to_value(&reason).unwrap(),
                serde_json::Value::String(words.to_string()),
                "the report shows the words"
            );
        }
    }

    #[test]
    fn each_problem_reason_renders_its_words() {
        let error = || Failure::new(std::io::Error::other("permission denied"));
        let cases: Vec<(ProblemReason, &str)> = vec![
            (ProblemReason::Registry(error()), "permission denied"),
            (ProblemReason::EditFailed(error()), "permission denied"),
            (
                ProblemReason::EditDropped(error()),
                "edit dropped: permission denied",
            ),
            (
                ProblemReason::Unreadable(error()),
                "cannot read: permission denied",
            ),
            (
                ProblemReason::MarkerUnresolved {
                    marker: "api:tag".into(),
                    reason: "no such key".into(),
                },
                "marker `api:tag` resolves to nothing: no such key",
            ),
            (
                ProblemReason::NotWritable {
                    field: "Deployment/api container api".into(),
                    reason: "an alias reads it".into(),
                },
                "Deployment/api container api: an alias reads it; left as written",
            ),
            (ProblemReason::Unowned(error()), "permission denied"),
            (
                ProblemReason::NotJoined(error()),
                "edits of several sources cannot be joined; file left alone: permission denied",
            ),
            (
                ProblemReason::HoldsUnknown {
                    why: "the state store is down".into(),
                },
                "held tags unknown: the state store is down; every change that could be held \
                 is held",
            ),
            (
                ProblemReason::HelmValue(
                    "Helm value `image.tag` in values.yaml: no such key".into(),
                ),
                "Helm value `image.tag` in values.yaml: no such key",
            ),
            (
                ProblemReason::DiffUnread(error()),
                "reading the file for its diff: permission denied",
            ),
            (
                ProblemReason::BrokenPolicy("policies/api.yaml:3:1: bad".into()),
                "policies/api.yaml:3:1: bad",
            ),
            (
                ProblemReason::Applications("applications.fromCluster is set".into()),
                "applications.fromCluster is set",
            ),
            (
                ProblemReason::Application {
                    id: "argocd/shop".into(),
                    problem: "no images".into(),
                },
                "application argocd/shop: no images",
            ),
            (ProblemReason::WriteFailed(error()), "permission denied"),
        ];
        for (reason, words) in cases {
            assert_eq!(reason.to_string(), words, "{reason:?}");
        }
        let problem = super::super::Problem::new(ProblemReason::Unreadable(error()));
        assert_eq!(
            serde_json::to_value(&problem).unwrap(),
            serde_json::json!({"message": "cannot read: permission denied"}),
            "the report's key stays `message`"
        );
    }
}
