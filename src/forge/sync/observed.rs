//! What the pull-request sync knows of a repository: the read step fills it in, the decide
//! step judges it. Plain data and the one reading of the open pull requests that both steps
//! share (which of them are tagpilot's), so that neither step imports the other.

use std::collections::{BTreeMap, BTreeSet};

use git2::Oid;

use crate::change::ChangeGroup;
use crate::forge::{ForgeError, ForgeKind, Marker, PullRequest, SourceCommits};
use crate::git::WriteConfig;
use crate::git::proposal::BranchTip;

/// What is, as far as the sync needs to know it.
#[derive(Debug)]
pub(crate) struct Observed {
    pub repository: String,
    /// The base branch pull requests go into.
    pub base: String,
    pub base_tip: Oid,
    pub kind: ForgeKind,
    /// Whether the plan covered every policy: an incomplete plan closes nothing.
    pub complete: bool,
    /// What `write:` asks of every pull request: labels, reviewers, draft, auto-merge.
    pub write: WriteConfig,
    /// The open pull requests into the base as the forge listed them, tagpilot's and others'.
    pub open: Vec<PullRequest>,
    /// The planned groups that have a commit to propose, in plan order.
    pub groups: Vec<PlannedGroup>,
    /// What the branch of each group and of each of tagpilot's open pull requests holds;
    /// `None`: no such branch.
    pub tips: BTreeMap<String, Option<BranchTip>>,
    /// The branches of open pull requests no group needs whose change is all in the base
    /// (merged, or made by hand). Asked only of a complete plan.
    pub reached_base: BTreeSet<String>,
    /// The commits behind each change's source comparison, by compare URL, where the forge's
    /// token could read the source repository.
    pub source_commits: BTreeMap<String, SourceCommits>,
    /// With `write.renderedDiff`: tagpilot's review comment on each open pull request whose
    /// group has one, by pull request number: its id and text, `None` when there is none yet,
    /// or the error that kept the comments from being read.
    pub reviews: BTreeMap<u64, Result<Option<(u64, String)>, ForgeError>>,
}

impl Observed {
    /// What `branch` holds on the remote, if it exists.
    pub fn tip(&self, branch: &str) -> Option<&BranchTip> {
        self.tips.get(branch).and_then(Option::as_ref)
    }
}

/// One change group with its commit built on the base tip.
#[derive(Debug)]
pub(crate) struct PlannedGroup {
    pub group: ChangeGroup,
    /// The open pull request's branch, or the one `write.branch` names.
    pub branch: String,
    /// From `write.title`.
    pub title: String,
    pub built: Oid,
    /// The branch's tip holds `built` already: same parent, tree and message.
    pub built_is_tip: bool,
    /// The closed pull requests from the branch; read only when no open one serves the group.
    /// A listing the forge refused fails this group alone.
    pub closed: Result<Vec<PullRequest>, ForgeError>,
}

/// tagpilot's open pull requests: one per group, the oldest, and the others for that group.
#[derive(Debug)]
pub(crate) struct Tagpilots<'a> {
    /// By group key.
    pub kept: BTreeMap<String, (Marker, &'a PullRequest)>,
    /// A second open pull request for a group, with the number of the one kept.
    pub duplicates: Vec<(String, u64, &'a PullRequest)>,
}

/// Picks tagpilot's pull requests out of `open` by their marker. Should a group have two (two
/// runs racing, or a changed branch template), the oldest wins.
pub(crate) fn tagpilots(open: &[PullRequest]) -> Tagpilots<'_> {
    let mut listed: Vec<&PullRequest> = open.iter().collect();
    listed.sort_by_key(|pr| pr.number);
    let mut found = Tagpilots {
        kept: BTreeMap::new(),
        duplicates: Vec::new(),
    };
    for pr in listed {
        let Some(marker) = Marker::find(&pr.body) else {
            continue;
        };
        match found.kept.get(&marker.group) {
            Some((_, kept)) => found.duplicates.push((marker.group, kept.number, pr)),
            None => {
                found.kept.insert(marker.group.clone(), (marker, pr));
            }
        }
    }
    found
}
