//! The rules of pull-request mode, one decision at a time, on hand-made observations: no forge
//! double, no clone.

use std::collections::{BTreeMap, BTreeSet};

use git2::Oid;

use super::*;
use crate::change::{Change, ChangeGroup};
use crate::forge::Reviewer;
use crate::git::WriteConfig;
use crate::git::proposal::BranchTip;

const BRANCH: &str = "tagpilot/api";

fn oid(c: char) -> Oid {
    Oid::from_str(&c.to_string().repeat(40)).unwrap()
}

/// The commit built for the planned group; `a` is tagpilot's earlier push, `f` a foreign one.
fn built() -> Oid {
    oid('b')
}

fn group(to: &str) -> ChangeGroup {
    ChangeGroup {
        applications: Vec::new(),
        key: "api".into(),
        files: Default::default(),
        changes: vec![Change {
            policy: "api".into(),
            image: "registry.example/api".into(),
            file: "apps/api.yaml".into(),
            line: 3,
            from: "1.0.0".into(),
            to: to.into(),
            strategy: "semver",
            ..Default::default()
        }],
    }
}

/// The `api` group planned at `to`, its commit built, nothing known about its branch yet.
fn planned(to: &str) -> PlannedGroup {
    PlannedGroup {
        group: group(to),
        branch: BRANCH.into(),
        title: format!("Update api to {to}"),
        built: built(),
        built_is_tip: false,
        closed: Ok(Vec::new()),
    }
}

/// A complete plan of `groups` on GitHub, asking for a label and a reviewer, with no open pull
/// request and no branch.
fn observed(groups: Vec<PlannedGroup>) -> Observed {
    Observed {
        reviews: Default::default(),
        repository: "manifests".into(),
        base: "main".into(),
        base_tip: oid('0'),
        kind: ForgeKind::GitHub,
        complete: true,
        write: WriteConfig {
            labels: vec!["dependencies".into()],
            reviewers: vec!["alice".into()],
            ..WriteConfig::default()
        },
        open: Vec::new(),
        groups,
        tips: BTreeMap::new(),
        reached_base: BTreeSet::new(),
        source_commits: BTreeMap::new(),
    }
}

fn marker(to: &str, head: Oid) -> Marker {
    Marker {
        group: "api".into(),
        proposal: proposal_id(&group(to).changes),
        head: head.to_string(),
        noted: None,
    }
}

/// A pull request tagpilot opened for `api` at `to`, last pushing `head`, labelled and with
/// its reviewer, as the forge lists it.
fn pull_request(number: u64, to: &str, head: Oid) -> PullRequest {
    PullRequest {
        number,
        url: format!("https://github.example/acme/manifests/pull/{number}"),
        title: format!("Update api to {to}"),
        body: body::body(
            ForgeKind::GitHub,
            "manifests",
            "main",
            &group(to),
            &BTreeMap::new(),
            &marker(to, head),
        ),
        branch: BRANCH.into(),
        merged: false,
        labels: vec!["dependencies".into()],
        reviewers: vec![Reviewer {
            name: "alice".into(),
            team: false,
            id: 1,
        }],
    }
}

/// The branch holds `id`, made by tagpilot or not.
fn tip(o: &mut Observed, id: Oid, by_tagpilot: bool) {
    o.tips
        .insert(BRANCH.into(), Some(BranchTip { id, by_tagpilot }));
}

/// The one decision there is.
fn only(decisions: Vec<Decision>) -> Decision {
    assert_eq!(decisions.len(), 1, "{decisions:#?}");
    decisions.into_iter().next().unwrap()
}

fn kinds(steps: &[Step]) -> Vec<&'static str> {
    steps
        .iter()
        .map(|s| match s {
            Step::Push { .. } => "push",
            Step::Open(_) => "open",
            Step::Update { .. } => "update",
            Step::Comment { .. } => "comment",
            Step::CommentOpened { .. } => "comment opened",
            Step::EditComment { .. } => "edit comment",
            Step::PostReview { .. } => "post review",
            Step::Close { .. } => "close",
            Step::DeleteBranch { .. } => "delete branch",
            Step::Converge { .. } => "converge",
        })
        .collect()
}

#[test]
fn a_new_group_pushes_its_branch_and_opens_a_pull_request() {
    let o = observed(vec![planned("1.2.0")]);
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Opened);
    assert_eq!((d.outcome.group.as_str(), d.outcome.number), ("api", None));
    assert_eq!(
        d.steps[0],
        Step::Push {
            branch: BRANCH.into(),
            commit: built(),
            lease: None
        }
    );
    let Step::Open(new) = &d.steps[1] else {
        panic!("{:?}", d.steps)
    };
    assert_eq!(
        (new.branch.as_str(), new.base.as_str(), new.title.as_str()),
        (BRANCH, "main", "Update api to 1.2.0")
    );
    assert_eq!(
        (new.labels.clone(), new.reviewers.clone()),
        (vec!["dependencies".to_owned()], vec!["alice".to_owned()])
    );
    assert_eq!(Marker::find(&new.body), Some(marker("1.2.0", built())));
    assert_eq!(d.steps.len(), 2);
}

#[test]
fn a_branch_tagpilot_already_pushed_is_opened_without_pushing_again() {
    let mut o = observed(vec![PlannedGroup {
        built_is_tip: true,
        ..planned("1.2.0")
    }]);
    tip(&mut o, oid('a'), true);
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["open"]);
    let Step::Open(new) = &d.steps[0] else {
        unreachable!()
    };
    assert_eq!(Marker::find(&new.body).unwrap().head, oid('a').to_string());

    // A different commit of tagpilot's is replaced, with the lease on what was seen.
    let mut o = observed(vec![planned("1.2.0")]);
    tip(&mut o, oid('a'), true);
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["push", "open"]);
    assert!(matches!(d.steps[0], Step::Push { lease: Some(l), .. } if l == oid('a')));
}

#[test]
fn the_same_proposal_already_open_is_up_to_date_and_nothing_is_called() {
    let mut o = observed(vec![PlannedGroup {
        built_is_tip: true,
        ..planned("1.2.0")
    }]);
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::UpToDate);
    assert_eq!(d.outcome.number, Some(7));
    assert_eq!(d.steps, []);
}

#[test]
fn a_newer_tag_updates_the_branch_and_the_pull_request_in_place() {
    let mut o = observed(vec![planned("1.3.0")]);
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Updated { rebuilt: false });
    assert_eq!(kinds(&d.steps), ["push", "update"]);
    assert!(
        matches!(d.steps[0], Step::Push { lease: Some(l), commit, .. } if l == oid('a') && commit == built())
    );
    let Step::Update {
        number,
        title,
        body,
    } = &d.steps[1]
    else {
        unreachable!()
    };
    assert_eq!((*number, title.as_str()), (7, "Update api to 1.3.0"));
    assert_eq!(Marker::find(body), Some(marker("1.3.0", built())));
}

#[test]
fn a_moved_base_rebuilds_the_same_proposal() {
    let mut o = observed(vec![planned("1.2.0")]);
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Updated { rebuilt: true });
    assert_eq!(kinds(&d.steps), ["push", "update"]);
}

#[test]
fn a_human_commit_on_the_branch_blocks_the_group_and_is_noted_once() {
    let mut o = observed(vec![planned("1.3.0")]);
    tip(&mut o, oid('f'), false);
    let pr = pull_request(7, "1.2.0", oid('a'));
    o.open.push(pr.clone());
    let d = only(decide(&o, false));
    let human = oid('f').to_string();
    assert_eq!(d.outcome.action, Action::Blocked { tip: human.clone() });
    assert_eq!(kinds(&d.steps), ["comment", "update"]);
    let Step::Comment { number: 7, body } = &d.steps[0] else {
        panic!("{:?}", d.steps)
    };
    assert!(
        body.contains("ffffffffffff") && body.contains("this pull request"),
        "{body}"
    );
    let Step::Update {
        number: 7,
        title,
        body,
    } = &d.steps[1]
    else {
        panic!("{:?}", d.steps)
    };
    assert_eq!(title, &pr.title, "the title stays");
    let noted = Marker::find(body).unwrap();
    assert_eq!(noted.noted.as_deref(), Some(human.as_str()));
    assert_eq!(
        noted.proposal,
        marker("1.2.0", oid('a')).proposal,
        "what was proposed stays"
    );

    // Next run: the marker says it was noted; nothing more is said or pushed.
    o.open[0].body = body.clone();
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Blocked { tip: human });
    assert_eq!(d.steps, []);
}

#[test]
fn a_foreign_branch_without_a_pull_request_is_not_overwritten() {
    let mut o = observed(vec![planned("1.2.0")]);
    tip(&mut o, oid('f'), false);
    let d = only(decide(&o, false));
    assert_eq!(
        d.outcome.action,
        Action::Blocked {
            tip: oid('f').to_string()
        }
    );
    assert_eq!(d.steps, []);
}

#[test]
fn a_change_that_reached_the_base_closes_the_pull_request_and_deletes_the_branch() {
    let mut o = observed(Vec::new());
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    o.reached_base.insert(BRANCH.into());
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Closed { reached_base: true });
    assert_eq!(
        d.steps,
        [
            Step::Comment {
                number: 7,
                body: "The change is already in `main`; closing.".into()
            },
            Step::Close { number: 7 },
            Step::DeleteBranch {
                branch: BRANCH.into(),
                lease: oid('a')
            },
        ]
    );

    // No longer wanted, and someone else's commit on the branch: closed, the branch kept.
    o.reached_base.clear();
    tip(&mut o, oid('f'), false);
    let d = only(decide(&o, false));
    assert_eq!(
        d.outcome.action,
        Action::Closed {
            reached_base: false
        }
    );
    assert_eq!(kinds(&d.steps), ["comment", "close"]);
}

#[test]
fn an_incomplete_plan_keeps_pull_requests_it_did_not_plan() {
    let mut o = observed(Vec::new());
    o.complete = false;
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    o.reached_base.insert(BRANCH.into());
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Kept);
    assert_eq!(d.outcome.number, Some(7));
    assert_eq!(d.steps, []);
}

#[test]
fn a_proposal_closed_unmerged_is_declined_until_a_newer_tag() {
    let closed = pull_request(4, "1.2.0", oid('a'));
    let mut o = observed(vec![PlannedGroup {
        closed: Ok(vec![closed.clone()]),
        ..planned("1.2.0")
    }]);
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::Declined { closed: 4 });
    assert_eq!(d.outcome.number, Some(4));
    assert_eq!(d.steps, [], "not reopened, nothing pushed");

    // A newer tag is a new proposal.
    o.groups = vec![PlannedGroup {
        closed: Ok(vec![closed.clone()]),
        ..planned("1.3.0")
    }];
    assert_eq!(only(decide(&o, false)).outcome.action, Action::Opened);

    // Merged is not declined.
    o.groups = vec![PlannedGroup {
        closed: Ok(vec![PullRequest {
            merged: true,
            ..closed
        }]),
        ..planned("1.2.0")
    }];
    assert_eq!(only(decide(&o, false)).outcome.action, Action::Opened);
}

#[test]
fn a_second_open_pull_request_for_a_group_is_closed_in_favour_of_the_oldest() {
    let mut o = observed(vec![PlannedGroup {
        built_is_tip: true,
        ..planned("1.2.0")
    }]);
    tip(&mut o, oid('a'), true);
    let newer = PullRequest {
        branch: "tagpilot/old-name-api".into(),
        ..pull_request(9, "1.2.0", oid('a'))
    };
    o.open = vec![newer, pull_request(7, "1.2.0", oid('a'))];
    let decisions = decide(&o, false);
    let actions: Vec<_> = decisions
        .iter()
        .map(|d| (d.outcome.number, d.outcome.action.clone()))
        .collect();
    assert_eq!(
        actions,
        [
            (Some(7), Action::UpToDate),
            (Some(9), Action::Duplicate { of: 7 })
        ]
    );
    assert_eq!(
        decisions[1].steps,
        [
            Step::Comment {
                number: 9,
                body: "tagpilot keeps one pull request per group; #7 carries this one. Closing."
                    .into()
            },
            Step::Close { number: 9 },
        ]
    );
}

#[test]
fn pull_requests_a_human_opened_are_not_touched() {
    let mut o = observed(Vec::new());
    o.open.push(PullRequest {
        body: "a human's pull request".into(),
        ..pull_request(3, "1.2.0", oid('a'))
    });
    assert_eq!(decide(&o, false), []);
}

#[test]
fn labels_and_reviewers_converge_adding_only_what_is_missing() {
    let mut o = observed(vec![PlannedGroup {
        built_is_tip: true,
        ..planned("1.2.0")
    }]);
    o.write.labels = vec!["dependencies".into(), "images".into()];
    o.write.reviewers = vec!["Alice".into(), "acme/platform".into()];
    tip(&mut o, oid('a'), true);
    let mut pr = pull_request(7, "1.2.0", oid('a'));
    pr.labels = vec!["Dependencies".into(), "added-by-a-human".into()];
    o.open.push(pr.clone());
    let d = only(decide(&o, false));
    assert_eq!(d.outcome.action, Action::UpToDate);
    assert_eq!(
        d.steps,
        [Step::Converge {
            pull_request: pr,
            labels: vec!["images".into()],
            reviewers: vec!["acme/platform".into()],
        }]
    );

    // A blocked pull request is left alone altogether.
    tip(&mut o, oid('f'), false);
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["comment", "update"]);
}

#[test]
fn a_dry_run_decides_the_same_and_calls_nothing() {
    let mut o = observed(vec![planned("1.3.0")]);
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    let mut other = pull_request(8, "1.2.0", oid('c'));
    other.body = other.body.replace("group=api", "group=web");
    other.branch = "tagpilot/web".into();
    o.open.push(other);
    let wet = decide(&o, false);
    let dry = decide(&o, true);
    assert_eq!(
        wet.iter().map(|d| &d.outcome).collect::<Vec<_>>(),
        dry.iter().map(|d| &d.outcome).collect::<Vec<_>>()
    );
    assert!(wet.iter().all(|d| !d.steps.is_empty()));
    assert!(dry.iter().all(|d| d.steps.is_empty()));
}

#[test]
fn on_gitlab_tagpilot_speaks_of_merge_requests() {
    let mut o = observed(vec![planned("1.3.0")]);
    o.kind = ForgeKind::GitLab;
    let Step::Open(new) = &only(decide(&o, false)).steps[1] else {
        unreachable!()
    };
    assert!(new.body.contains("this merge request"), "{}", new.body);
    assert!(!new.body.contains("pull request"), "{}", new.body);

    // The comments too: a duplicate names the one kept as GitLab numbers it.
    let newer = PullRequest {
        branch: "tagpilot/old-name-api".into(),
        ..pull_request(9, "1.2.0", oid('a'))
    };
    o.open = vec![newer, pull_request(7, "1.2.0", oid('a'))];
    tip(&mut o, oid('f'), false);
    let decisions = decide(&o, false);
    let comments: Vec<&str> = decisions
        .iter()
        .flat_map(|d| &d.steps)
        .filter_map(|s| match s {
            Step::Comment { body, .. } => Some(body.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(comments.len(), 2, "{comments:?}");
    assert!(
        comments[0].contains("stops updating this merge request"),
        "{}",
        comments[0]
    );
    assert_eq!(
        comments[1],
        "tagpilot keeps one merge request per group; !7 carries this one. Closing."
    );
    assert_eq!(decisions[1].outcome.reference().as_deref(), Some("!9"));
}

#[test]
fn a_group_whose_closed_pull_requests_cannot_be_listed_fails_alone() {
    let web = PlannedGroup {
        group: ChangeGroup {
            key: "web".into(),
            ..group("1.2.0")
        },
        branch: "tagpilot/web".into(),
        ..planned("1.2.0")
    };
    let o = observed(vec![
        PlannedGroup {
            closed: Err(crate::forge::ForgeError::Api {
                repository: "manifests".into(),
                forge: "GitHub",
                action: "list closed pull requests".into(),
                message: "Server Error (500)".into(),
            }),
            ..planned("1.2.0")
        },
        web,
    ]);
    let decisions = decide(&o, false);
    assert!(
        matches!(&decisions[0].outcome.action, Action::Failed { error } if error.contains("Server Error")),
        "{:?}",
        decisions[0].outcome.action
    );
    assert_eq!(decisions[0].steps, []);
    assert_eq!(decisions[1].outcome.action, Action::Opened);
    assert_eq!(kinds(&decisions[1].steps), ["push", "open"]);
}

/// `planned("1.3.0")` with one Application rendered, and `write.renderedDiff` on.
fn reviewed(o: &mut Observed) {
    o.write.rendered_diff = true;
    o.groups[0].group.applications = vec![crate::affected::AffectedApplication {
        name: "shop".into(),
        rendered: Some(Box::default()),
        ..Default::default()
    }];
}

#[test]
fn the_review_comment_is_posted_updated_in_place_or_left_as_it_is() {
    let mut o = observed(vec![planned("1.3.0")]);
    reviewed(&mut o);
    let text = review::comment(ForgeKind::GitHub, &o.groups[0].group, review::MAX_COMMENT)
        .expect("a review");
    // Opened: posted once the pull request has its number.
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["push", "open", "comment opened"]);
    // Kept: none yet, posted; another text, edited in place; the same text, left.
    tip(&mut o, oid('a'), true);
    o.open.push(pull_request(7, "1.2.0", oid('a')));
    o.reviews.insert(7, Ok(None));
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["push", "update", "post review"]);
    o.reviews.insert(7, Ok(Some((42, "old".into()))));
    let d = only(decide(&o, false));
    assert_eq!(
        d.steps.last(),
        Some(&Step::EditComment {
            number: 7,
            id: 42,
            body: text.clone()
        })
    );
    o.reviews.insert(7, Ok(Some((42, text))));
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["push", "update"]);
    // Comments that could not be read: nothing posted (never a second review), and said.
    o.reviews.insert(
        7,
        Err(crate::forge::ForgeError::Permission {
            repository: "manifests".into(),
            forge: "GitHub",
            action: "list comments".into(),
            permission: "pull_requests: read".into(),
            message: "Resource not accessible by integration".into(),
        }),
    );
    let d = only(decide(&o, false));
    assert_eq!(kinds(&d.steps), ["push", "update"]);
    assert_eq!(
        d.outcome.warnings,
        [
            "the rendered diff was not posted: repository `manifests`: GitHub refused to list \
             comments: the token lacks the `pull_requests: read` permission (Resource not \
             accessible by integration)"
        ]
    );
    // Without `write.renderedDiff`, no review at all.
    o.write.rendered_diff = false;
    o.reviews.insert(7, Ok(None));
    assert_eq!(kinds(&only(decide(&o, false)).steps), ["push", "update"]);
}
