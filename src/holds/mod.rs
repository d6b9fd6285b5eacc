//! Tags tagpilot must not propose again for one field of one policy (issue 19): a tag whose
//! deployment failed, and a person's rollback. Plain data and pure rules; the state store keeps
//! them across restarts, the planner asks [`HeldTag::blocks`] before it proposes a tag.
//!
//! A failed tag blocks only itself: a newer tag may be proposed, and so may an older one that is
//! still newer than what the field runs. A person's rollback blocks every tag up to the one they
//! rolled back from, and ends by itself once a tag newer than that appears: the person moved away
//! from that version, not from the image.

use std::cmp::Ordering;
use std::fmt;

use jiff::Timestamp;
use serde::{Deserialize, Serialize};

mod set;

pub use set::{Holds, Verdict, hold_reason, judge};

/// One field that one policy writes: the unit a hold applies to. Lines move between commits, so
/// the field is named as the plan names it (`Deployment/api container api`), not by its line.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct FieldKey {
    /// `repositories[].name`; absent for the local directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    /// Path relative to the repository root, `/` separators.
    pub file: String,
    pub field: String,
}

/// A tag held for one field, why, since when and who (or what) holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldTag {
    pub key: FieldKey,
    /// The tag held: the failed tag, or the tag a person rolled back from.
    pub tag: String,
    pub reason: HoldReason,
    pub since: Timestamp,
}

/// Why a tag is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub enum HoldReason {
    /// The deployment of the tag failed verification (`Failure`'s text), in an Application.
    Failed {
        application: String,
        failure: String,
    },
    /// A commit tagpilot did not make moved the field back from `tag` to `to`.
    RolledBack {
        to: String,
        commit: String,
        author: String,
    },
    /// Held by a person: `tagpilot holds add`, or an Application's hold annotation.
    Manual { by: String },
}

impl HoldReason {
    /// Every kind, as `tagpilot_holds{reason}` labels them.
    pub const LABELS: [&'static str; 3] = ["failed", "rolled_back", "manual"];

    /// The kind as a metric label.
    pub fn label(&self) -> &'static str {
        match self {
            HoldReason::Failed { .. } => "failed",
            HoldReason::RolledBack { .. } => "rolled_back",
            HoldReason::Manual { .. } => "manual",
        }
    }
}

impl HeldTag {
    /// Whether proposing `candidate` for this field is blocked. `order` compares two tags the
    /// way the field's policy does.
    pub fn blocks(&self, candidate: &str, order: &dyn Fn(&str, &str) -> Ordering) -> bool {
        match self.reason {
            HoldReason::Failed { .. } | HoldReason::Manual { .. } => candidate == self.tag,
            HoldReason::RolledBack { .. } => order(candidate, &self.tag) != Ordering::Greater,
        }
    }

    /// A rollback hold ends once a tag newer than the one rolled back from exists.
    pub fn outlived_by(&self, newest: &str, order: &dyn Fn(&str, &str) -> Ordering) -> bool {
        matches!(self.reason, HoldReason::RolledBack { .. })
            && order(newest, &self.tag) == Ordering::Greater
    }
}

/// One commit's write of a field, as read from the base branch's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldWrite {
    pub commit: String,
    pub author: String,
    /// The commit carries tagpilot's `Tagpilot-Policy:` trailer.
    pub by_tagpilot: bool,
    pub from: String,
    pub to: String,
}

/// A person's rollback: a commit without tagpilot's trailer that moved the field from the tag
/// tagpilot last set to an older one. Any other write (tagpilot's own, a move forward, or a move
/// of a field tagpilot no longer owns the value of) is not a rollback.
pub fn rollback(
    key: &FieldKey,
    last_set_by_tagpilot: &str,
    write: &FieldWrite,
    at: Timestamp,
    order: &dyn Fn(&str, &str) -> Ordering,
) -> Option<HeldTag> {
    let moved_back = write.from == last_set_by_tagpilot
        && order(&write.to, last_set_by_tagpilot) == Ordering::Less;
    (!write.by_tagpilot && moved_back).then(|| HeldTag {
        key: key.clone(),
        tag: last_set_by_tagpilot.to_string(),
        reason: HoldReason::RolledBack {
            to: write.to.clone(),
            commit: write.commit.clone(),
            author: write.author.clone(),
        },
        since: at,
    })
}

impl fmt::Display for HoldReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldReason::Failed {
                application,
                failure,
            } => {
                write!(f, "failed in Application {application}: {failure}")
            }
            HoldReason::RolledBack { to, commit, author } => {
                let short = commit.get(..12).unwrap_or(commit);
                write!(f, "rolled back to {to} by {author} in {short}")
            }
            HoldReason::Manual { by } => write!(f, "held by {by}"),
        }
    }
}

impl fmt::Display for FieldKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(repository) = &self.repository {
            write!(f, "{repository}:")?;
        }
        write!(f, "{} {} (policy {})", self.file, self.field, self.policy)
    }
}

#[cfg(test)]
mod tests;

impl FieldKey {
    /// Every field of `policy`, wherever it is: what an Application's `tagpilot.dev/hold`
    /// annotation holds (its image, in whichever file and field it is written).
    pub fn whole_policy(policy: impl Into<String>) -> Self {
        FieldKey {
            repository: None,
            policy: policy.into(),
            file: String::new(),
            field: String::new(),
        }
    }

    /// Whether this key names every field of its policy ([`FieldKey::whole_policy`]).
    pub fn is_whole_policy(&self) -> bool {
        self.file.is_empty() && self.field.is_empty()
    }

    /// A short, stable name for the field, as `tagpilot holds` lists it and `holds release --id`
    /// takes it: the first 12 hex digits of the SHA-256 of the key as JSON.
    pub fn id(&self) -> String {
        use sha2::Digest;
        let json = serde_json::to_vec(self).unwrap_or_default();
        let digest = sha2::Sha256::digest(&json);
        hex::encode(digest).chars().take(12).collect()
    }
}

/// Which hold to release, as `tagpilot holds release` and the service's `POST /holds/release`
/// name it: by the id `tagpilot holds` lists, or by the field itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HoldSelector {
    Id(String),
    Field(FieldKey),
}

impl fmt::Display for HoldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HoldSelector::Id(id) => write!(f, "with id {id}"),
            HoldSelector::Field(key) => write!(f, "on {key}"),
        }
    }
}

impl HeldTag {
    /// Who holds it: the person who rolled back or held it, or tagpilot after a failure.
    pub fn who(&self) -> String {
        match &self.reason {
            HoldReason::Failed { .. } => "tagpilot".to_string(),
            HoldReason::RolledBack { author, .. } => author.clone(),
            HoldReason::Manual { by } => by.clone(),
        }
    }

    /// The hold as `tagpilot holds` and `GET /holds` show it.
    pub fn view(&self) -> HoldView {
        HoldView {
            id: self.key.id(),
            repository: self.key.repository.clone(),
            policy: self.key.policy.clone(),
            file: self.key.file.clone(),
            field: self.key.field.clone(),
            tag: self.tag.clone(),
            why: self.reason.to_string(),
            since: self.since,
            who: self.who(),
            reason: self.reason.clone(),
        }
    }
}

/// One hold as listed: the field, the tag, why, since when and who, and the id to release it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldView {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    pub file: String,
    pub field: String,
    pub tag: String,
    pub why: String,
    pub since: Timestamp,
    pub who: String,
    pub reason: HoldReason,
}
