//! The decide step: from what was read, what becomes of each group's pull request and which
//! calls make it so. Pure: no I/O, no clock, nothing async; every rule of pull-request mode is
//! here and tested here.
//!
//! The rules: one open pull request per group (a duplicate is closed in favour of the oldest);
//! a branch holding someone else's commit is never overwritten, and said so once; a proposal
//! closed unmerged is not made again until a newer tag changes it; what no group needs any more
//! is closed only when the plan was complete; labels and reviewers the config names are added,
//! never removed.

use git2::Oid;

use super::observed::{Observed, PlannedGroup, Tagpilots, tagpilots};
use crate::forge::body::{self, proposal_id};
use crate::forge::{
    Action, ForgeKind, Marker, NewPullRequest, PullRequest, PullRequestOutcome, missing_labels,
    missing_reviewers,
};
use crate::forge::{labels, review};

/// What becomes of one group's pull request, and the calls that make it so, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decision {
    pub outcome: PullRequestOutcome,
    /// Empty in a dry run.
    pub steps: Vec<Step>,
}

/// One call the perform step makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Pushes `commit` to tagpilot's `branch` if the remote still holds `lease` (`None`: the
    /// branch must not exist).
    Push {
        branch: String,
        commit: Oid,
        lease: Option<Oid>,
    },
    /// Opens a pull request; its number and URL go into the outcome.
    Open(NewPullRequest),
    Update {
        number: u64,
        title: String,
        body: String,
    },
    Comment {
        number: u64,
        body: String,
    },
    /// Posts the review comment on the pull request just opened (its number is known once the
    /// open step ran).
    CommentOpened {
        body: String,
    },
    /// Posts the review comment on a pull request that has none yet.
    PostReview {
        number: u64,
        body: String,
    },
    /// Replaces the text of comment `id`: the review, updated in place.
    EditComment {
        number: u64,
        id: u64,
        body: String,
    },
    Close {
        number: u64,
    },
    /// Deletes tagpilot's `branch` if the remote still holds `lease`.
    DeleteBranch {
        branch: String,
        lease: Oid,
    },
    /// Adds the `labels` and requests the `reviewers` the pull request lacks, as far as its
    /// listing tells (the forge may know more, e.g. who reviewed already).
    Converge {
        pull_request: PullRequest,
        labels: Vec<String>,
        reviewers: Vec<String>,
    },
}

/// Decides every group's pull request: the planned groups in plan order, then the duplicates
/// to close, then the open pull requests no group needs any more.
pub(crate) fn decide(observed: &Observed, dry_run: bool) -> Vec<Decision> {
    let Tagpilots {
        mut kept,
        duplicates,
    } = tagpilots(&observed.open);
    let mut decisions = Vec::new();
    for planned in &observed.groups {
        decisions.push(match kept.remove(&planned.group.key) {
            Some((marker, pr)) => keep_up(observed, planned, &marker, pr),
            None => propose(observed, planned),
        });
    }
    for (group, of, pr) in duplicates {
        decisions.push(close_duplicate(observed.kind, group, of, pr));
    }
    for (group, (marker, pr)) in kept {
        decisions.push(close_unneeded(observed, group, &marker, pr));
    }
    if dry_run {
        for decision in &mut decisions {
            decision.steps.clear();
        }
    }
    decisions
}

/// A group with an open pull request: update it in place, or leave it as it is.
fn keep_up(o: &Observed, planned: &PlannedGroup, old: &Marker, pr: &PullRequest) -> Decision {
    let branch = &planned.branch;
    let mut outcome = outcome(o, planned, Action::UpToDate, Some(pr));
    let number = pr.number;
    let tip = o.tip(branch);
    if let Some(tip) = tip.filter(|t| t.id.to_string() != old.head && !t.by_tagpilot) {
        let tip = tip.id.to_string();
        let mut steps = Vec::new();
        // Said once per foreign tip: the marker remembers it was noted.
        if old.noted.as_deref() != Some(tip.as_str()) {
            steps.push(Step::Comment {
                number,
                body: blocked_comment(o.kind, branch, &tip),
            });
            let noted = Marker {
                noted: Some(tip.clone()),
                ..old.clone()
            };
            steps.push(Step::Update {
                number,
                title: pr.title.clone(),
                body: noted.replace_in(&pr.body),
            });
        }
        outcome.action = Action::Blocked { tip };
        return Decision { outcome, steps };
    }
    let proposal = proposal_id(&planned.group.changes);
    let same = tip.is_some() && planned.built_is_tip;
    let head = match tip {
        Some(tip) if same => tip.id,
        _ => planned.built,
    };
    let new_body = pull_request_body(o, planned, &proposal, head);
    let mut steps = Vec::new();
    if !(same && pr.title == planned.title && pr.body == new_body) {
        outcome.action = Action::Updated {
            rebuilt: !same && old.proposal == proposal,
        };
        if !same {
            steps.push(Step::Push {
                branch: branch.clone(),
                commit: planned.built,
                lease: tip.map(|t| t.id),
            });
        }
        steps.push(Step::Update {
            number,
            title: planned.title.clone(),
            body: new_body,
        });
    }
    // Labels and reviewers converge too: the config may have changed, or the pull request was
    // opened elsewhere, or the change now deploys to other Applications.
    let labels = group_labels(o, planned, &mut outcome);
    steps.extend(converge(o, pr, &labels));
    steps.extend(review(o, planned, pr.number, &mut outcome));
    Decision { outcome, steps }
}

/// A group with no open pull request: open one, unless it was declined or the branch is not
/// tagpilot's to write.
fn propose(o: &Observed, planned: &PlannedGroup) -> Decision {
    let closed = match &planned.closed {
        Ok(closed) => closed,
        Err(e) => {
            let action = Action::Failed {
                error: crate::error_chain::chain(e),
            };
            return Decision {
                outcome: outcome(o, planned, action, None),
                steps: Vec::new(),
            };
        }
    };
    let proposal = proposal_id(&planned.group.changes);
    let declined = closed.iter().find(|pr| {
        !pr.merged
            && Marker::find(&pr.body)
                .is_some_and(|m| m.group == planned.group.key && m.proposal == proposal)
    });
    if let Some(pr) = declined {
        return Decision {
            outcome: outcome(o, planned, Action::Declined { closed: pr.number }, Some(pr)),
            steps: Vec::new(),
        };
    }
    let tip = o.tip(&planned.branch);
    if let Some(tip) = tip.filter(|t| !t.by_tagpilot) {
        // A branch of that name with someone else's commit and no open pull request.
        let action = Action::Blocked {
            tip: tip.id.to_string(),
        };
        return Decision {
            outcome: outcome(o, planned, action, None),
            steps: Vec::new(),
        };
    }
    let mut steps = Vec::new();
    let mut opened = outcome(o, planned, Action::Opened, None);
    let labels = group_labels(o, planned, &mut opened);
    let head = match tip {
        Some(tip) if planned.built_is_tip => tip.id,
        _ => {
            steps.push(Step::Push {
                branch: planned.branch.clone(),
                commit: planned.built,
                lease: tip.map(|t| t.id),
            });
            planned.built
        }
    };
    steps.push(Step::Open(NewPullRequest {
        branch: planned.branch.clone(),
        base: o.base.clone(),
        title: planned.title.clone(),
        body: pull_request_body(o, planned, &proposal, head),
        labels,
        reviewers: o.write.reviewers.clone(),
        draft: o.write.draft,
        auto_merge: o.write.auto_merge,
    }));
    if let Some(body) = review_text(o, planned) {
        steps.push(Step::CommentOpened { body });
    }
    Decision {
        outcome: opened,
        steps,
    }
}

/// A second open pull request for a group that has one.
fn close_duplicate(kind: ForgeKind, group: String, of: u64, pr: &PullRequest) -> Decision {
    let noun = kind.noun();
    let body = format!(
        "tagpilot keeps one {noun} per group; {} carries this one. Closing.",
        kind.reference(of)
    );
    Decision {
        outcome: PullRequestOutcome {
            forge: kind,
            group,
            branch: pr.branch.clone(),
            action: Action::Duplicate { of },
            number: Some(pr.number),
            url: Some(pr.url.clone()),
            changes: Vec::new(),
            warnings: Vec::new(),
        },
        steps: vec![
            Step::Comment {
                number: pr.number,
                body,
            },
            Step::Close { number: pr.number },
        ],
    }
}

/// An open pull request whose group has nothing left to change: closed, unless the plan was
/// incomplete and the group may only have gone unplanned.
fn close_unneeded(o: &Observed, group: String, marker: &Marker, pr: &PullRequest) -> Decision {
    let mut outcome = PullRequestOutcome {
        forge: o.kind,
        group,
        branch: pr.branch.clone(),
        action: Action::Kept,
        number: Some(pr.number),
        url: Some(pr.url.clone()),
        changes: Vec::new(),
        warnings: Vec::new(),
    };
    if !o.complete {
        return Decision {
            outcome,
            steps: Vec::new(),
        };
    }
    let tip = o.tip(&pr.branch);
    let reached_base = tip.is_some() && o.reached_base.contains(&pr.branch);
    outcome.action = Action::Closed { reached_base };
    let comment = if reached_base {
        format!("The change is already in `{}`; closing.", o.base)
    } else {
        format!(
            "`{}` no longer needs this change: the policies now want what it holds. Closing.",
            o.base
        )
    };
    let mut steps = vec![
        Step::Comment {
            number: pr.number,
            body: comment,
        },
        Step::Close { number: pr.number },
    ];
    // Only tagpilot's own branch is deleted, and only if it still holds what was seen.
    if let Some(tip) = tip.filter(|t| t.by_tagpilot || t.id.to_string() == marker.head) {
        steps.push(Step::DeleteBranch {
            branch: pr.branch.clone(),
            lease: tip.id,
        });
    }
    Decision { outcome, steps }
}

/// The labels `write.labels` makes for `planned`'s group ([`labels::labels`]); a template that
/// does not render puts no label on it and says so in the outcome's warnings.
fn group_labels(
    o: &Observed,
    planned: &PlannedGroup,
    outcome: &mut PullRequestOutcome,
) -> Vec<String> {
    let (made, errors) = labels::labels(o.kind, &o.write.labels, &o.repository, &planned.group);
    outcome
        .warnings
        .extend(errors.iter().map(|e| crate::error_chain::chain(e)));
    made
}

/// The review comment of `planned`'s group on pull request `number`: posted when it has none
/// yet, updated in place when it says something else, left when it says the same.
fn review(
    o: &Observed,
    planned: &PlannedGroup,
    number: u64,
    outcome: &mut PullRequestOutcome,
) -> Option<Step> {
    let body = review_text(o, planned)?;
    match o.reviews.get(&number) {
        Some(Err(e)) => {
            outcome.warnings.push(format!(
                "the rendered diff was not posted: {}",
                crate::error_chain::chain(e)
            ));
            None
        }
        Some(Ok(Some((_, old)))) if *old == body => None,
        Some(Ok(Some((id, _)))) => Some(Step::EditComment {
            number,
            id: *id,
            body,
        }),
        Some(Ok(None)) | None => Some(Step::PostReview { number, body }),
    }
}

/// The review comment's text, with `write.renderedDiff` and rendered Applications.
fn review_text(o: &Observed, planned: &PlannedGroup) -> Option<String> {
    o.write
        .rendered_diff
        .then(|| review::comment(o.kind, &planned.group, review::MAX_COMMENT))
        .flatten()
}

/// The labels and reviewers `pr` lacks, as one step, or none when it lacks nothing.
fn converge(o: &Observed, pr: &PullRequest, wanted: &[String]) -> Option<Step> {
    let labels = missing_labels(&pr.labels, wanted);
    let reviewers = missing_reviewers(&pr.reviewers, &o.write.reviewers);
    (!labels.is_empty() || !reviewers.is_empty()).then(|| Step::Converge {
        pull_request: pr.clone(),
        labels,
        reviewers,
    })
}

fn pull_request_body(o: &Observed, planned: &PlannedGroup, proposal: &str, head: Oid) -> String {
    let marker = Marker {
        group: planned.group.key.clone(),
        proposal: proposal.to_owned(),
        head: head.to_string(),
        noted: None,
    };
    body::body(
        o.kind,
        &o.repository,
        &o.base,
        &planned.group,
        &o.source_commits,
        &marker,
    )
}

/// A planned group's outcome, naming `pr` if there is one.
fn outcome(
    o: &Observed,
    planned: &PlannedGroup,
    action: Action,
    pr: Option<&PullRequest>,
) -> PullRequestOutcome {
    PullRequestOutcome {
        forge: o.kind,
        group: planned.group.key.clone(),
        branch: planned.branch.clone(),
        action,
        number: pr.map(|pr| pr.number),
        url: pr.map(|pr| pr.url.clone()),
        changes: planned.group.changes.clone(),
        warnings: Vec::new(),
    }
}

fn blocked_comment(kind: ForgeKind, branch: &str, tip: &str) -> String {
    let noun = kind.noun();
    format!(
        "Commit {} on `{branch}` was not made by tagpilot, so tagpilot will not overwrite it and \
         stops updating this {noun}. Delete the branch or close this {noun} to let tagpilot \
         propose again.",
        &tip[..tip.len().min(12)]
    )
}

#[cfg(test)]
mod tests;
