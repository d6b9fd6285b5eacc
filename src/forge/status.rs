//! The `tagpilot/verify` commit status (issue 19): where people look for what became of a
//! change after it reached the base branch — the pushed commit, or a merged pull request's head
//! commit — on GitHub and GitLab alike.

use super::{Forge, ForgeError};
use crate::config::repository::RepositoryConfig;

/// The status's name: GitHub's `context`, GitLab's `name`.
pub const VERIFY_CONTEXT: &str = "tagpilot/verify";

/// The states tagpilot sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitState {
    /// The change is being followed.
    Pending,
    /// Its Applications run it healthy.
    Success,
    /// It failed in an Application (or was not verified in time).
    Failure,
}

impl CommitState {
    /// GitHub's word for the state.
    pub fn github(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failure",
        }
    }

    /// Bitbucket's word for the state (Cloud and Data Center build statuses).
    pub fn bitbucket(self) -> &'static str {
        match self {
            CommitState::Pending => "INPROGRESS",
            CommitState::Success => "SUCCESSFUL",
            CommitState::Failure => "FAILED",
        }
    }

    /// Azure DevOps' word for the state (`GitStatusState`).
    pub fn azure(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "succeeded",
            CommitState::Failure => "failed",
        }
    }

    /// GitLab's word for the state.
    pub fn gitlab(self) -> &'static str {
        match self {
            CommitState::Pending => "pending",
            CommitState::Success => "success",
            CommitState::Failure => "failed",
        }
    }
}

/// GitHub refuses descriptions over 140 characters; GitLab takes more, but the same text reads
/// the same on both.
pub fn description(text: &str) -> String {
    const MAX: usize = 140;
    if text.chars().count() <= MAX {
        return text.to_string();
    }
    let mut cut: String = text.chars().take(MAX - 1).collect();
    cut.push('…');
    cut
}

/// Sets `tagpilot/verify` on `commit` of `repo` through its `forge:`. `Ok(false)` when the
/// repository has no `forge:` block: there is nowhere to show it.
pub async fn set_verify_status(
    repo: &RepositoryConfig,
    commit: &str,
    state: CommitState,
    text: &str,
) -> Result<bool, ForgeError> {
    let Some((forge, _)) = super::connect::connect(repo).await? else {
        return Ok(false);
    };
    forge
        .set_commit_status(commit, state, &description(text))
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_description_is_cut_to_what_github_takes() {
        assert_eq!(description("health Degraded"), "health Degraded");
        let long = "x".repeat(200);
        let cut = description(&long);
        assert_eq!(cut.chars().count(), 140);
        assert!(cut.ends_with('…'));
    }
}
