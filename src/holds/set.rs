//! The holds one plan honours, as the planner looks them up: by policy first (a lookup per
//! field, in trees of many thousands of fields), then by repository and file. Handed in by
//! whoever read the state store; the planner never reads the store itself.

use std::cmp::Ordering;
use std::collections::HashMap;

use super::{FieldKey, HeldTag};

/// The held tags a plan honours, or why they are unknown.
#[derive(Debug, Clone, Default)]
pub struct Holds {
    by_policy: HashMap<String, Vec<HeldTag>>,
    /// Set when the holds could not be read (the state store is down): every change that could
    /// be held is held instead, naming this.
    unknown: Option<String>,
}

impl Holds {
    /// No holds at all: a plan without a state store.
    pub fn none() -> Self {
        Holds::default()
    }

    pub fn known(holds: impl IntoIterator<Item = HeldTag>) -> Self {
        let mut by_policy: HashMap<String, Vec<HeldTag>> = HashMap::new();
        for held in holds {
            by_policy
                .entry(held.key.policy.clone())
                .or_default()
                .push(held);
        }
        Holds {
            by_policy,
            unknown: None,
        }
    }

    /// These holds and `more` (found this cycle).
    pub fn with(mut self, more: impl IntoIterator<Item = HeldTag>) -> Self {
        for held in more {
            self.by_policy
                .entry(held.key.policy.clone())
                .or_default()
                .push(held);
        }
        self
    }

    /// The holds could not be read; `why` names the store.
    pub fn unknown(why: impl Into<String>) -> Self {
        Holds {
            by_policy: HashMap::new(),
            unknown: Some(why.into()),
        }
    }

    /// Why the holds are unknown, when they are.
    pub fn unknown_because(&self) -> Option<&str> {
        self.unknown.as_deref()
    }

    /// Whether the plan must look at holds at all.
    pub fn is_empty(&self) -> bool {
        self.by_policy.is_empty() && self.unknown.is_none()
    }

    /// The holds on fields of `policy` in `file` of `repository`, whatever the field.
    pub fn in_file<'a>(
        &'a self,
        repository: Option<&'a str>,
        policy: &str,
        file: &'a str,
    ) -> impl Iterator<Item = &'a HeldTag> + 'a {
        self.by_policy
            .get(policy)
            .into_iter()
            .flatten()
            .filter(move |h| {
                h.key.is_whole_policy()
                    || (h.key.repository.as_deref() == repository && h.key.file == file)
            })
    }

    /// The holds on exactly `key`.
    pub fn on<'a>(&'a self, key: &'a FieldKey) -> impl Iterator<Item = &'a HeldTag> + 'a {
        self.in_file(key.repository.as_deref(), &key.policy, &key.file)
            .filter(move |h| h.key.is_whole_policy() || h.key.field == key.field)
    }

    /// Every hold, ordered by field.
    pub fn all(&self) -> Vec<&HeldTag> {
        let mut out: Vec<&HeldTag> = self.by_policy.values().flatten().collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        out
    }
}

/// What the holds on one field make of the tag its policy would choose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict<'a> {
    /// No hold stands in the way.
    Free,
    /// This hold blocks the tag: choose among the tags it does not block.
    Blocked(&'a HeldTag),
}

/// Sorts the holds on a field for a chosen tag: the rollback holds that the tag outlives end
/// (returned in `ended`), and the first hold still in force that blocks it is the verdict.
pub fn judge<'a>(
    held: &[&'a HeldTag],
    chosen: &str,
    order: &dyn Fn(&str, &str) -> Ordering,
    ended: &mut Vec<HeldTag>,
) -> Verdict<'a> {
    let mut verdict = Verdict::Free;
    for &h in held {
        if h.outlived_by(chosen, order) {
            ended.push(h.clone());
        } else if verdict == Verdict::Free && h.blocks(chosen, order) {
            verdict = Verdict::Blocked(h);
        }
    }
    verdict
}

/// How a plan says a field is held: `held: rolled back to 1.2.0 by Dana in 4b825dc642cb since
/// 2026-11-25T10:00:00Z; 1.3.0 is not proposed again`.
pub fn hold_reason(held: &HeldTag, chosen: &str) -> String {
    format!(
        "held: {} since {}; {chosen} is not proposed again",
        held.reason, held.since
    )
}
