//! Whether a pull request tagpilot opened was merged, and by which commit (issue 19): a merged
//! pull request is a change that reached its base branch, which verification then follows.

use serde::Deserialize;

use super::{Forge, ForgeError};
use crate::config::repository::RepositoryConfig;

/// Where a pull request stands, as verification needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MergeState {
    Open,
    /// Closed without merging: nothing reached the base branch.
    Closed,
    Merged {
        /// The commit the merge put on the base branch (the merge, squash or last rebased
        /// commit; the head itself for a fast-forward).
        commit: String,
        /// The pull request's head commit, where its `tagpilot/verify` status goes.
        head: String,
    },
}

/// GitHub's `GET /repos/{owner}/{repo}/pulls/{number}`, the fields read.
#[derive(Deserialize)]
pub(super) struct GitHubPull {
    #[serde(default)]
    state: String,
    #[serde(default)]
    merged: bool,
    #[serde(default)]
    merge_commit_sha: Option<String>,
    head: GitHubHead,
}

#[derive(Deserialize)]
struct GitHubHead {
    sha: String,
}

impl GitHubPull {
    pub(super) fn state(self) -> MergeState {
        match (self.merged, self.merge_commit_sha) {
            (true, Some(commit)) => MergeState::Merged {
                commit,
                head: self.head.sha,
            },
            (true, None) => MergeState::Merged {
                commit: self.head.sha.clone(),
                head: self.head.sha,
            },
            _ if self.state == "open" => MergeState::Open,
            _ => MergeState::Closed,
        }
    }
}

/// GitLab's `GET /projects/:id/merge_requests/:iid`, the fields read.
#[derive(Deserialize)]
pub(super) struct GitLabMergeRequest {
    #[serde(default)]
    state: String,
    #[serde(default)]
    merge_commit_sha: Option<String>,
    #[serde(default)]
    squash_commit_sha: Option<String>,
    #[serde(default)]
    sha: String,
}

impl GitLabMergeRequest {
    pub(super) fn state(self) -> MergeState {
        match self.state.as_str() {
            "merged" => MergeState::Merged {
                // A fast-forward merge has no merge commit: the head itself is on the base.
                commit: self
                    .merge_commit_sha
                    .or(self.squash_commit_sha)
                    .unwrap_or_else(|| self.sha.clone()),
                head: self.sha,
            },
            "opened" | "locked" => MergeState::Open,
            _ => MergeState::Closed,
        }
    }
}

/// Where pull request `number` of `repo` stands, through its `forge:`. `None` without one.
pub async fn merge_state(
    repo: &RepositoryConfig,
    number: u64,
) -> Result<Option<MergeState>, ForgeError> {
    let Some((forge, _)) = super::connect::connect(repo).await? else {
        return Ok(None);
    };
    forge.merge_state(number).await.map(Some)
}
