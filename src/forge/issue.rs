//! Issues, as much as the dashboard needs: one issue tagpilot keeps per manifest repository,
//! found by a marker in its body, edited in place and closed. GitHub, GitLab, Gitea and
//! Forgejo have issues; Bitbucket and Azure DevOps keep [`super::Forge`]'s defaults, which
//! answer [`ForgeError::Unsupported`].

use std::future::Future;

use super::{ForgeError, ForgeKind};

/// An issue as tagpilot reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issue {
    pub number: u64,
    pub url: String,
    pub body: String,
    pub open: bool,
}

/// The answer of a forge without issues.
pub(super) fn unsupported<T: Send>(
    kind: ForgeKind,
) -> impl Future<Output = Result<T, ForgeError>> + Send {
    std::future::ready(Err(ForgeError::Unsupported {
        forge: kind.name(),
        feature: "issues",
    }))
}
