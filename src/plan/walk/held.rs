//! Honouring held tags ([`crate::holds`]) while deciding a field: a tag a hold blocks is never
//! proposed again for that policy and field; the next-best tag the holds allow is, or the field
//! is held with a reason naming the hold. Holds are rare, so nothing is kept per field for them:
//! a file with holds is scanned again for its fields' names.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::path::Path;

use super::{Asked, Found, ScannedFile, display_path};
use crate::files::Files;
use crate::holds::{self, HeldTag, Holds, Verdict, judge};
use crate::manifest;
use crate::plan::decide::{DecideError, Outcome, decide};
use crate::plan::index::PolicyIndex;
use crate::plan::model::{Plan, Problem};
use crate::plan::reasons::{HoldReason, ProblemReason};
use crate::policy::ImagePolicy;
use crate::registry::Registry;
use crate::select::{self, TagCandidate};

/// What honouring holds reads besides the field: the holds, where the plan is, and the tree to
/// scan again for the names of held fields.
pub(in crate::plan) struct HeldContext<'a> {
    pub holds: &'a Holds,
    pub repository: Option<&'a str>,
    pub files: &'a dyn Files,
    pub index: &'a PolicyIndex<'a>,
}

/// Field names of the files with holds, by file index; `None` when the file could not be
/// scanned again (every hold on the file then applies to each of its fields).
pub(super) type Labels = HashMap<usize, Option<Vec<String>>>;

/// Compares two tags as `policy` ranks them; tags it cannot order compare equal, so a rollback
/// hold blocks them (a hold that cannot be judged holds).
pub fn policy_order(policy: &ImagePolicy, a: &str, b: &str) -> Ordering {
    if a == b {
        return Ordering::Equal;
    }
    match (
        select::ranks_below(policy, a, b),
        select::ranks_below(policy, b, a),
    ) {
        (Some(true), _) => Ordering::Less,
        (_, Some(true)) => Ordering::Greater,
        _ => Ordering::Equal,
    }
}

impl<R: Registry> Asked<'_, R> {
    /// Decides a field as [`decide`] does, then lets its holds veto the tag chosen. A field
    /// that stays on a tag which failed its verification there (`onFailure: hold` leaves it
    /// in place) is held, named, rather than counted up to date.
    pub(super) async fn decide_held(
        &self,
        f: &Found<'_>,
        file: &ScannedFile,
        list: &[TagCandidate],
        plan: &mut Plan,
        labels: &mut Labels,
    ) -> Result<Outcome, DecideError> {
        let policy = &self.policies[f.field.policy];
        let facts = &f.field.facts;
        let first = decide(policy, facts, list, &self.inspector).await?;
        let Some(held) = self.held.as_ref() else {
            return Ok(first);
        };
        if let Some(why) = held.holds.unknown_because() {
            let Outcome::Move { tag, .. } = &first else {
                return Ok(first);
            };
            let (problem, reason) = unknown_holds(why, tag);
            if !plan.problems.iter().any(|p| p.reason == problem) {
                plan.problems.push(Problem::new(problem));
            }
            return Ok(Outcome::Hold(reason));
        }
        let display = display_path(&file.rel);
        let in_file: Vec<&HeldTag> = held
            .holds
            .in_file(held.repository, &policy.name, &display)
            .collect();
        if in_file.is_empty() {
            return Ok(first);
        }
        let names = labels
            .entry(f.file)
            .or_insert_with(|| field_names(held.files, held.index, &file.rel));
        let name = names.as_ref().and_then(|n| n.get(f.field.ordinal as usize));
        let on_field: Vec<&HeldTag> = in_file
            .into_iter()
            .filter(|h| h.key.is_whole_policy() || name.is_none_or(|n| h.key.field == *n))
            .collect();
        let outcome = match &first {
            Outcome::Move { .. } => {
                let mut ended = Vec::new();
                let veto = veto(policy, &first, list, &on_field, &mut ended);
                for h in &ended {
                    tracing::info!(field = %h.key, held = %h.tag, "a rollback hold ends: a newer tag appeared");
                }
                plan.ended_holds.extend(ended);
                match veto {
                    Some(veto) => {
                        veto.settle(decide(policy, facts, &veto.allowed, &self.inspector).await?)
                    }
                    None => first,
                }
            }
            _ => first,
        };
        Ok(still_failed(&on_field, facts.current().0, outcome))
    }
}

/// A field that stays on a tag that failed there: held, saying it still runs it (and why else
/// it stays, if it is held for something else too). A field that moves, or whose tag did not
/// fail, is left as decided.
fn still_failed(on_field: &[&HeldTag], current: Option<&str>, outcome: Outcome) -> Outcome {
    let failed = on_field.iter().find(|h| {
        Some(h.tag.as_str()) == current && matches!(h.reason, holds::HoldReason::Failed { .. })
    });
    let Some(failed) = failed else {
        return outcome;
    };
    let runs = |also| HoldReason::StillRuns {
        failed: (*failed).clone(),
        also,
    };
    match outcome {
        Outcome::Stay => Outcome::Hold(runs(None)),
        Outcome::Hold(other) => Outcome::Hold(runs(Some(Box::new(other)))),
        moves => moves,
    }
}

/// A hold standing in the way of the tag a policy chose: the hold, the tag, and the candidates
/// the field's holds allow, to decide again on.
pub struct Veto<'h> {
    pub hold: &'h HeldTag,
    pub tag: String,
    pub allowed: Vec<TagCandidate>,
}

impl Veto<'_> {
    /// What deciding again on the allowed candidates comes to: a move to the next-best tag, or
    /// the field held with a reason naming the hold.
    pub fn settle(&self, next: Outcome) -> Outcome {
        match next {
            next @ Outcome::Move { .. } => next,
            Outcome::Stay | Outcome::Hold(_) => Outcome::Hold(HoldReason::HeldTag {
                held: self.hold.clone(),
                chosen: self.tag.clone(),
            }),
        }
    }
}

/// Whether the holds on one field (`on_field`) veto `first`, decided on `list`. Rollback holds
/// the chosen tag outlives end (into `ended`) and veto nothing.
pub fn veto<'h>(
    policy: &ImagePolicy,
    first: &Outcome,
    list: &[TagCandidate],
    on_field: &[&'h HeldTag],
    ended: &mut Vec<HeldTag>,
) -> Option<Veto<'h>> {
    let Outcome::Move { tag, .. } = first else {
        return None;
    };
    let order = |a: &str, b: &str| policy_order(policy, a, b);
    let verdict = judge(on_field, tag, &order, ended);
    let Verdict::Blocked(hold) = verdict else {
        return None;
    };
    let in_force: Vec<&HeldTag> = on_field
        .iter()
        .copied()
        .filter(|h| !ended.contains(h))
        .collect();
    let allowed = list
        .iter()
        .filter(|c| !in_force.iter().any(|h| h.blocks(&c.tag, &order)))
        .cloned()
        .collect();
    Some(Veto {
        hold,
        tag: tag.clone(),
        allowed,
    })
}

/// How a change is held while the held tags cannot be read: the plan's problem, and the
/// field's hold reason.
pub fn unknown_holds(why: &str, tag: &str) -> (ProblemReason, HoldReason) {
    (
        ProblemReason::HoldsUnknown {
            why: why.to_string(),
        },
        HoldReason::HoldsUnknown {
            why: why.to_string(),
            tag: tag.to_string(),
        },
    )
}

/// The names of a file's fields as a plan names them (`Deployment/api container api`), in scan
/// order.
fn field_names(files: &dyn Files, index: &PolicyIndex<'_>, rel: &Path) -> Option<Vec<String>> {
    let text = String::from_utf8(files.read(rel).ok()?).ok()?;
    let fields = manifest::scan(rel, &text, &index.helm_paths(rel)).ok()?;
    Some(
        fields
            .iter()
            .map(|f| super::edit::describe(&f.kind))
            .collect(),
    )
}
