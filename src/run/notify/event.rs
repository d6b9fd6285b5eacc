//! What people are told: one typed event per thing that happened, waits or was refused, each
//! carrying the policy, the image, from → to, the repository and a link, and an id that is
//! the same whenever the same thing is found again (a cycle finds a waiting promotion every
//! interval; it is told once).

use jiff::Timestamp;
use serde::Serialize;
use sha2::{Digest, Sha256};

/// The event types, as routes and templates name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A change was written: a commit pushed, or a pull request opened or updated.
    UpdateWritten,
    /// A pull request tagpilot opened was merged (seen when verification follows it).
    PullRequestMerged,
    /// The change runs healthy in its Argo CD Application.
    Verified,
    /// The change failed verification (or was not healthy in time).
    Failed,
    /// A failed change was written back to its previous value.
    Reverted,
    /// A tag is held for a field: a failed deployment, or a person's rollback (`by`).
    Held,
    /// A promoting field waits for its upstreams (`why`).
    PromotionWaiting,
    /// A promotion was written.
    PromotionWritten,
    /// A newer tag was refused: its signature, a platform, or `minAge`.
    CandidateRefused,
    /// A registry or remote repository has failed for longer than `unreachableAfter`.
    Unreachable,
    /// It answers again.
    Recovered,
}

impl Kind {
    pub const ALL: [Kind; 11] = [
        Kind::UpdateWritten,
        Kind::PullRequestMerged,
        Kind::Verified,
        Kind::Failed,
        Kind::Reverted,
        Kind::Held,
        Kind::PromotionWaiting,
        Kind::PromotionWritten,
        Kind::CandidateRefused,
        Kind::Unreachable,
        Kind::Recovered,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kind::UpdateWritten => "update_written",
            Kind::PullRequestMerged => "pull_request_merged",
            Kind::Verified => "verified",
            Kind::Failed => "failed",
            Kind::Reverted => "reverted",
            Kind::Held => "held",
            Kind::PromotionWaiting => "promotion_waiting",
            Kind::PromotionWritten => "promotion_written",
            Kind::CandidateRefused => "candidate_refused",
            Kind::Unreachable => "unreachable",
            Kind::Recovered => "recovered",
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One event. Fields an event type has no use for are `None`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Notice {
    /// Stable for the same thing found again: see [`Notice::with_id`].
    pub id: String,
    #[serde(rename = "type")]
    pub kind: Kind,
    /// `repositories[].name`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<String>,
    /// The image repository the policy follows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// The commit, pull request or Application the event is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// Why, in words (a hold's reason, what a promotion waits for, a failure).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// Who: the author of a rollback, the Application that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// A short, fixed label of why: `signature`, `platform`, `minAge`, `registry`, `remote`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// When the event happened (for an outage: when it started).
    pub at: Timestamp,
}

impl Notice {
    /// An event of `kind` at `at`, every other field empty; [`Notice::with_id`] once filled.
    pub fn new(kind: Kind, at: Timestamp) -> Notice {
        Notice {
            id: String::new(),
            kind,
            repository: None,
            policy: None,
            image: None,
            from: None,
            to: None,
            link: None,
            why: None,
            by: None,
            reason: None,
            at,
        }
    }

    /// Sets the id from what names the event: its type, repository, policy, image, from, to,
    /// link, who and reason, and `moment` for the events that can happen again with all of
    /// those equal (an outage's start). Never from `why`, whose words may change while the
    /// thing stays (an age grows).
    pub fn with_id(mut self, moment: Option<Timestamp>) -> Notice {
        let mut hash = Sha256::new();
        let parts = [
            Some(self.kind.name()),
            self.repository.as_deref(),
            self.policy.as_deref(),
            self.image.as_deref(),
            self.from.as_deref(),
            self.to.as_deref(),
            self.link.as_deref(),
            self.by.as_deref(),
            self.reason,
        ];
        for part in parts {
            hash.update(part.unwrap_or("\u{0}").as_bytes());
            hash.update([0xff]);
        }
        if let Some(moment) = moment {
            hash.update(moment.as_second().to_be_bytes());
        }
        self.id = hex::encode(&hash.finalize()[..16]);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_thing_found_again_has_the_same_id_whatever_its_words() {
        let at = Timestamp::from_second(1_800_000_000).unwrap();
        let notice = |why: &str, to: &str| {
            let mut n = Notice::new(Kind::CandidateRefused, at);
            n.policy = Some("api".into());
            n.to = Some(to.into());
            n.why = Some(why.into());
            n.with_id(None)
        };
        assert_eq!(notice("12m old", "1.2.0").id, notice("14m old", "1.2.0").id);
        assert_ne!(notice("12m old", "1.2.0").id, notice("12m old", "1.3.0").id);
        for kind in Kind::ALL {
            assert_eq!(Kind::from_name(kind.name()), Some(kind));
        }
    }
}
