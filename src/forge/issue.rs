//! Issues, as much as the dashboard needs: one issue tagpilot keeps per manifest repository,
//! found by a marker in its body, edited in place and closed. GitHub and GitLab implement them;
//! the other forges keep [`super::Forge`]'s defaults, which answer
//! [`ForgeError::Unsupported`] (Azure DevOps and Bitbucket Data Center have no issues; Gitea,
//! Forgejo and Bitbucket Cloud do, but tagpilot does not use them yet).

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
