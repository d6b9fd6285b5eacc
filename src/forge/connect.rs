//! The one place that turns a repository's `forge:` block into a connected forge. Every caller
//! (the pull-request sync, reverts, the `tagpilot/verify` status, following merged pull
//! requests) connects here, so a new forge is added once and each caller gets it.
//!
//! [`Connected`] is the [`Forge`] of whichever forge the block names; it only hands each call
//! to that forge's client and decides nothing. A forge feature beyond pull requests plugs in
//! the same way: a method on [`Forge`], one implementation per client, one line in
//! [`Connected`]'s `each!`; the dashboard's issues are such methods, with defaults that answer
//! "not supported" for the forges without issues.

use super::issue::Issue;
use super::merged::MergeState;
use super::status::CommitState;
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, SourceCommits,
    azure_devops, bitbucket_cloud, bitbucket_dc, gitea, github, gitlab,
};
use crate::config::forge::ForgeConfig;
use crate::config::repository::{AuthMethod, RepositoryConfig};

/// A connected forge, whichever the `forge:` block names.
pub(crate) enum Connected {
    // Boxed: a GitHub App client is many times larger than the others.
    GitHub(Box<github::GitHub>),
    GitLab(gitlab::GitLab),
    Gitea(gitea::Gitea),
    BitbucketCloud(bitbucket_cloud::BitbucketCloud),
    AzureDevOps(azure_devops::AzureDevOps),
    BitbucketDataCenter(bitbucket_dc::BitbucketDataCenter),
}

/// Which forge `config` names; `None` when it names none (which `validate` refuses).
pub fn kind_of(config: &ForgeConfig) -> Option<ForgeKind> {
    if config.github.is_some() {
        Some(ForgeKind::GitHub)
    } else if config.gitlab.is_some() {
        Some(ForgeKind::GitLab)
    } else if config.gitea.is_some() {
        Some(ForgeKind::Gitea)
    } else if config.forgejo.is_some() {
        Some(ForgeKind::Forgejo)
    } else if config.bitbucket.is_some() {
        Some(ForgeKind::BitbucketCloud)
    } else if config.azure_devops.is_some() {
        Some(ForgeKind::AzureDevOps)
    } else if config.bitbucket_data_center.is_some() {
        Some(ForgeKind::BitbucketDataCenter)
    } else {
        None
    }
}

/// Connects to the forge `repo`'s `forge:` names. Returns the repository as git should push
/// to it: a GitHub App's installation token also serves for git over HTTPS, unless `auth` says
/// otherwise. `Ok(None)` without a `forge:` block.
pub(crate) async fn connect(
    repo: &RepositoryConfig,
) -> Result<Option<(Connected, RepositoryConfig)>, ForgeError> {
    let Some(config) = &repo.forge else {
        return Ok(None);
    };
    let name = &repo.name;
    let connected = if let Some(config) = &config.github {
        let client = github::GitHub::connect(name, &repo.url, config).await?;
        let mut repo = repo.clone();
        if let Some(token) = client.git_token()
            && repo.auth.method().is_ok_and(|m| m == AuthMethod::None)
        {
            repo.auth.provided_token = Some(token);
        }
        (Connected::GitHub(Box::new(client)), repo)
    } else if let Some(config) = &config.gitlab {
        let client = gitlab::GitLab::connect(name, &repo.url, config)?;
        (Connected::GitLab(client), repo.clone())
    } else if let Some(config) = &config.gitea {
        let client = gitea::Gitea::connect(ForgeKind::Gitea, name, &repo.url, config)?;
        (Connected::Gitea(client), repo.clone())
    } else if let Some(config) = &config.forgejo {
        let client = gitea::Gitea::connect(ForgeKind::Forgejo, name, &repo.url, config)?;
        (Connected::Gitea(client), repo.clone())
    } else if let Some(config) = &config.bitbucket {
        let client = bitbucket_cloud::BitbucketCloud::connect(name, &repo.url, config)?;
        (Connected::BitbucketCloud(client), repo.clone())
    } else if let Some(config) = &config.azure_devops {
        let client = azure_devops::AzureDevOps::connect(name, &repo.url, config).await?;
        (Connected::AzureDevOps(client), repo.clone())
    } else if let Some(config) = &config.bitbucket_data_center {
        let client = bitbucket_dc::BitbucketDataCenter::connect(name, &repo.url, config)?;
        (Connected::BitbucketDataCenter(client), repo.clone())
    } else {
        return Err(ForgeError::Config {
            repository: name.clone(),
            message: "`forge` names no forge".into(),
        });
    };
    Ok(Some(connected))
}

/// [`connect`], where a `forge:` block is required.
pub(crate) async fn connect_required(
    repo: &RepositoryConfig,
) -> Result<(Connected, RepositoryConfig), ForgeError> {
    connect(repo).await?.ok_or_else(|| ForgeError::Config {
        repository: repo.name.clone(),
        message: "`write.mode: pull-request` needs a `forge:` block".into(),
    })
}

impl Connected {
    /// Keeps pull requests drafts (`write.draft`) where the forge says draft in the title.
    pub(crate) fn with_draft(self, draft: bool) -> Connected {
        match self {
            Connected::GitLab(f) => Connected::GitLab(f.with_draft(draft)),
            Connected::Gitea(f) => Connected::Gitea(f.with_draft(draft)),
            other => other,
        }
    }
}

/// Hands a call to the connected forge's client.
macro_rules! each {
    ($self:ident, $f:ident => $call:expr) => {
        match $self {
            Connected::GitHub($f) => $call,
            Connected::GitLab($f) => $call,
            Connected::Gitea($f) => $call,
            Connected::BitbucketCloud($f) => $call,
            Connected::AzureDevOps($f) => $call,
            Connected::BitbucketDataCenter($f) => $call,
        }
    };
}

impl Forge for Connected {
    fn kind(&self) -> ForgeKind {
        each!(self, f => f.kind())
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        each!(self, f => f.open_pull_requests(base).await)
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        each!(self, f => f.closed_pull_requests(branch, base).await)
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        each!(self, f => f.create(pr).await)
    }

    async fn converge(
        &self,
        pr: &PullRequest,
        labels: &[String],
        reviewers: &[String],
    ) -> Result<Vec<String>, ForgeError> {
        each!(self, f => f.converge(pr, labels, reviewers).await)
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        each!(self, f => f.update(number, title, body).await)
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        each!(self, f => f.comment(number, body).await)
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        each!(self, f => f.close(number).await)
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        each!(self, f => f.comments(number).await)
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        each!(self, f => f.edit_comment(number, id, body).await)
    }

    async fn compare(&self, path: &str, from: &str, to: &str) -> Result<SourceCommits, ForgeError> {
        each!(self, f => f.compare(path, from, to).await)
    }

    async fn set_commit_status(
        &self,
        commit: &str,
        state: CommitState,
        description: &str,
    ) -> Result<(), ForgeError> {
        each!(self, f => f.set_commit_status(commit, state, description).await)
    }

    async fn merge_state(&self, number: u64) -> Result<MergeState, ForgeError> {
        each!(self, f => f.merge_state(number).await)
    }

    async fn find_issue(&self, marker: &str) -> Result<Option<Issue>, ForgeError> {
        each!(self, f => f.find_issue(marker).await)
    }

    async fn issue(&self, number: u64) -> Result<Issue, ForgeError> {
        each!(self, f => f.issue(number).await)
    }

    async fn create_issue(&self, title: &str, body: &str) -> Result<Issue, ForgeError> {
        each!(self, f => f.create_issue(title, body).await)
    }

    async fn edit_issue(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        each!(self, f => f.edit_issue(number, body).await)
    }

    async fn close_issue(&self, number: u64) -> Result<(), ForgeError> {
        each!(self, f => f.close_issue(number).await)
    }
}
