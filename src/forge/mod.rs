//! Pull-request mode: one reviewable pull request per change group, kept up to date by
//! tagpilot instead of piling up new ones, and closed when it is no longer needed.
//!
//! Protected branches are why this exists: tagpilot proposes, a reviewer merges. The forge edge
//! ([`github`], [`gitlab`], [`gitea`] for Gitea and Forgejo, [`bitbucket_cloud`],
//! [`azure_devops`], [`bitbucket_dc`]) sits behind the small [`Forge`]
//! trait, each forge's code only its wire format and quirks; `connect` picks the one a
//! repository's `forge:` names; the git side (branches built
//! on the base and pushed with a lease) lives in [`crate::git::proposal`]. The `sync` module
//! reads what is, decides per group (a pure function) whether to open, update, leave alone or
//! close, and then makes the calls. It must never open a second pull request for a group, never
//! overwrite a commit someone else pushed to tagpilot's branch, never re-propose what a reviewer
//! declined, and never print a token. Labels and reviewers converge on every pull request
//! tagpilot keeps: what the config names and the pull request lacks is added; what humans added
//! is never removed.

pub mod azure_devops;
pub mod bitbucket_cloud;
pub mod bitbucket_dc;
pub mod body;
mod connect;
/// The `forge:` types, which live with the rest of the configuration.
pub use crate::config::forge as config;
pub mod gitea;
pub mod github;
pub mod gitlab;
pub mod issue;
pub mod labels;
mod marker;
pub mod merged;
mod retry;
pub mod revert;
pub mod review;
pub mod status;
mod sync;

use std::future::Future;

use crate::git::GitError;

pub use crate::config::forge::{
    AzureDevOpsConfig, BitbucketCloudConfig, BitbucketDataCenterConfig, ConfigError, ForgeConfig,
    GitHubApp, GitHubConfig, GitLabConfig, GiteaConfig,
};
pub use body::{DEFAULT_BRANCH, DEFAULT_TITLE, TemplateError, check_templates};
pub use connect::kind_of;
pub(crate) use connect::{Connected, connect};
pub use marker::Marker;
pub use sync::{sync_all, sync_pull_requests, sync_repository};

/// Why pull requests of a repository could not be read or written. Every variant names the
/// repository; none carries a token.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("repository `{repository}`: {message}")]
    Config { repository: String, message: String },
    #[error("repository `{repository}`")]
    Template {
        repository: String,
        source: TemplateError,
    },
    #[error("repository `{repository}`: {forge} authentication failed: {message}")]
    Auth {
        repository: String,
        forge: &'static str,
        message: String,
    },
    #[error(
        "repository `{repository}`: {forge} refused to {action}: the token lacks the \
         `{permission}` permission ({message})"
    )]
    Permission {
        repository: String,
        forge: &'static str,
        action: String,
        permission: String,
        message: String,
    },
    #[error(
        "repository `{repository}`: {forge} rate limit: cannot {action} for another {wait_seconds}s; \
         giving up for this run"
    )]
    RateLimited {
        repository: String,
        forge: &'static str,
        action: String,
        wait_seconds: u64,
    },
    /// tagpilot has no client for what was asked on this forge (issues on Azure DevOps,
    /// which has none): the feature is off there, never imitated.
    #[error("tagpilot cannot use {feature} on {forge}")]
    Unsupported {
        forge: &'static str,
        feature: &'static str,
    },
    #[error("repository `{repository}`: {forge} could not {action}: {message}")]
    Api {
        repository: String,
        forge: &'static str,
        action: String,
        message: String,
    },
}

impl ForgeError {
    /// Whether this error ends the repository's run, or concerns one group's pull request
    /// only. A call the forge refused (a validation error, a server error) and a push the
    /// remote rejected concern that group; authentication, permissions, rate limits,
    /// configuration and the clone concern every group alike, so going on would only repeat them.
    pub fn stops_the_repository(&self) -> bool {
        !matches!(
            self,
            ForgeError::Api { .. } | ForgeError::Git(GitError::Rejected { .. })
        )
    }

    /// A short stable name for reports and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ForgeError::Git(e) => e.metric_label(),
            ForgeError::Config { .. }
            | ForgeError::Template { .. }
            | ForgeError::Unsupported { .. } => "forge_config",
            ForgeError::Auth { .. } => "forge_auth",
            ForgeError::Permission { .. } => "forge_permission",
            ForgeError::RateLimited { .. } => "forge_rate_limited",
            ForgeError::Api { .. } => "forge_api",
        }
    }
}

/// Which forge a repository's pull requests live on, for the words that differ: GitLab says
/// merge request and numbers it `!1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ForgeKind {
    GitHub,
    GitLab,
    Gitea,
    /// Gitea's API under Forgejo's name.
    Forgejo,
    BitbucketCloud,
    AzureDevOps,
    BitbucketDataCenter,
}

impl ForgeKind {
    /// The forge's name, as errors say it.
    pub const fn name(self) -> &'static str {
        match self {
            ForgeKind::GitHub => "GitHub",
            ForgeKind::GitLab => "GitLab",
            ForgeKind::Gitea => "Gitea",
            ForgeKind::Forgejo => "Forgejo",
            ForgeKind::BitbucketCloud => "Bitbucket Cloud",
            ForgeKind::AzureDevOps => "Azure DevOps",
            ForgeKind::BitbucketDataCenter => "Bitbucket Data Center",
        }
    }

    /// What the forge calls a pull request.
    pub const fn noun(self) -> &'static str {
        match self {
            ForgeKind::GitLab => "merge request",
            ForgeKind::GitHub
            | ForgeKind::Gitea
            | ForgeKind::Forgejo
            | ForgeKind::BitbucketCloud
            | ForgeKind::AzureDevOps
            | ForgeKind::BitbucketDataCenter => "pull request",
        }
    }

    /// How the forge writes a pull request's number: `#7`, `!7`.
    pub fn reference(self, number: u64) -> String {
        match self {
            ForgeKind::GitLab => format!("!{number}"),
            ForgeKind::AzureDevOps => format!("!{number}"),
            ForgeKind::GitHub
            | ForgeKind::Gitea
            | ForgeKind::Forgejo
            | ForgeKind::BitbucketCloud
            | ForgeKind::BitbucketDataCenter => format!("#{number}"),
        }
    }
}

/// A pull request (merge request) as tagpilot needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: u64,
    pub url: String,
    pub title: String,
    pub body: String,
    /// The source branch.
    pub branch: String,
    pub merged: bool,
    /// Labels on it, whoever added them.
    pub labels: Vec<String>,
    /// Review requests pending (GitHub) or reviewers assigned (GitLab), as the listing shows.
    pub reviewers: Vec<Reviewer>,
}

/// A reviewer a pull request names: a user, or a team of the repository's owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reviewer {
    /// A login, or a team's slug.
    pub name: String,
    pub team: bool,
    /// The forge's id, which GitLab needs to keep a reviewer when adding another.
    pub id: u64,
}

/// A pull request just opened (or taken over), with what the forge would not apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created {
    pub pull_request: PullRequest,
    /// E.g. a reviewer that is neither a user nor a team; the pull request stands without it.
    pub warnings: Vec<String>,
    /// The forge said one was open for the branch already (another run, or a listing that
    /// lagged): that one was updated instead of opening a second.
    pub taken_over: bool,
}

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPullRequest {
    pub branch: String,
    pub base: String,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
    pub reviewers: Vec<String>,
    pub draft: bool,
    pub auto_merge: bool,
}

/// The forge's API, as much of it as pull-request mode needs.
pub trait Forge: Sync {
    /// Which forge this is, for the words pull requests are written in.
    fn kind(&self) -> ForgeKind;
    /// Open pull requests into `base`.
    fn open_pull_requests(
        &self,
        base: &str,
    ) -> impl Future<Output = Result<Vec<PullRequest>, ForgeError>> + Send;
    /// Closed (merged or not) pull requests from `branch` into `base`.
    fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> impl Future<Output = Result<Vec<PullRequest>, ForgeError>> + Send;
    /// Opens a pull request with its labels, reviewers, draft state and auto-merge. When the
    /// forge says one already exists for the branch, that one is updated, given the labels and
    /// reviewers it lacks, and returned.
    fn create(
        &self,
        pr: &NewPullRequest,
    ) -> impl Future<Output = Result<Created, ForgeError>> + Send;
    /// Adds the `labels` that `pr` lacks and requests the `reviewers` not yet requested and
    /// not yet reviewing; removes nothing a human added. Makes no call when nothing is missing.
    /// Returns warnings for reviewers the forge does not know.
    fn converge(
        &self,
        pr: &PullRequest,
        labels: &[String],
        reviewers: &[String],
    ) -> impl Future<Output = Result<Vec<String>, ForgeError>> + Send;
    fn update(
        &self,
        number: u64,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
    fn comment(
        &self,
        number: u64,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
    fn close(&self, number: u64) -> impl Future<Output = Result<(), ForgeError>> + Send;
    /// The first 100 comments on pull request `number`, oldest first, as (id, text): where
    /// tagpilot finds its own review comment to update in place.
    fn comments(
        &self,
        number: u64,
    ) -> impl Future<Output = Result<Vec<(u64, String)>, ForgeError>> + Send;
    /// Replaces the text of comment `id` on pull request `number`.
    fn edit_comment(
        &self,
        number: u64,
        id: u64,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
    /// The commits of the source repository `path` (`acme/web`) after `from` up to `to`, as
    /// this forge's token sees them. A forge that cannot answer (no such repository for this
    /// token, a revision it does not know) gives an error, which only leaves the subjects out.
    /// By default the forge has no client for it: an image's source is compared only where
    /// one is written (GitHub, GitLab, Gitea).
    fn compare(
        &self,
        path: &str,
        from: &str,
        to: &str,
    ) -> impl Future<Output = Result<SourceCommits, ForgeError>> + Send {
        let _ = (path, from, to);
        std::future::ready(Err(ForgeError::Unsupported {
            forge: self.kind().name(),
            feature: "the commits inside an image",
        }))
    }
    /// Sets the `tagpilot/verify` status of `commit` to `state`, with `description` (at most
    /// 140 characters: [`status::description`]).
    fn set_commit_status(
        &self,
        commit: &str,
        state: status::CommitState,
        description: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send;
    /// Whether pull request `number` is open, closed, or merged and by which commit.
    fn merge_state(
        &self,
        number: u64,
    ) -> impl Future<Output = Result<merged::MergeState, ForgeError>> + Send;

    // Issues, for the dashboard. A forge without issues keeps these defaults, which say so.

    /// The first open issue whose body holds `marker`, tagpilot's own.
    fn find_issue(
        &self,
        marker: &str,
    ) -> impl Future<Output = Result<Option<issue::Issue>, ForgeError>> + Send {
        let _ = marker;
        issue::unsupported(self.kind())
    }
    /// Issue `number`, open or closed.
    fn issue(&self, number: u64) -> impl Future<Output = Result<issue::Issue, ForgeError>> + Send {
        let _ = number;
        issue::unsupported(self.kind())
    }
    fn create_issue(
        &self,
        title: &str,
        body: &str,
    ) -> impl Future<Output = Result<issue::Issue, ForgeError>> + Send {
        let _ = (title, body);
        issue::unsupported(self.kind())
    }
    /// Replaces the body of issue `number` (and reopens nothing).
    fn edit_issue(
        &self,
        number: u64,
        body: &str,
    ) -> impl Future<Output = Result<(), ForgeError>> + Send {
        let _ = (number, body);
        issue::unsupported(self.kind())
    }
    fn close_issue(&self, number: u64) -> impl Future<Output = Result<(), ForgeError>> + Send {
        let _ = number;
        issue::unsupported(self.kind())
    }
}

/// The commits between two revisions of an image's source repository.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceCommits {
    /// First lines of the commit messages, oldest first, at most [`MAX_SUBJECTS`].
    pub subjects: Vec<String>,
    /// How many commits there are in all.
    pub total: usize,
}

/// How many commit subjects a pull request lists per change ("and N more" after them).
pub const MAX_SUBJECTS: usize = 20;

impl SourceCommits {
    /// From every commit message, oldest first.
    pub fn from_messages<'a>(messages: impl IntoIterator<Item = &'a str>, total: usize) -> Self {
        let subjects: Vec<String> = messages
            .into_iter()
            .map(|m| m.lines().next().unwrap_or_default().trim().to_string())
            .collect();
        let total = total.max(subjects.len());
        SourceCommits {
            subjects: subjects.into_iter().take(MAX_SUBJECTS).collect(),
            total,
        }
    }
}

/// What happened (or would) to one group's pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Opened,
    /// About to open, tagpilot found one open for the branch already and took it over.
    TakenOver,
    /// Branch, title and body updated in place; `rebuilt` when the base had moved.
    Updated {
        rebuilt: bool,
    },
    UpToDate,
    /// Someone else's commits are on the branch: left alone, said so in a comment.
    Blocked {
        tip: String,
    },
    /// A pull request with this very proposal was closed unmerged: not proposed again.
    Declined {
        closed: u64,
    },
    /// The change reached the base or is no longer wanted: closed, branch deleted.
    Closed {
        reached_base: bool,
    },
    /// No longer planned, but the plan was incomplete: left open.
    Kept,
    /// A second open pull request for a group already served by `of`: closed.
    Duplicate {
        of: u64,
    },
    /// A call for this group failed; the other groups went on. The error as the report shows it.
    Failed {
        error: String,
    },
}

/// One group's pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestOutcome {
    /// Where it lives, for the forge's words: a merge request `!3` on GitLab.
    pub forge: ForgeKind,
    pub group: String,
    pub branch: String,
    pub action: Action,
    pub number: Option<u64>,
    pub url: Option<String>,
    pub changes: Vec<crate::change::Change>,
    /// What the forge would not apply, e.g. an unknown reviewer; the pull request stands.
    pub warnings: Vec<String>,
}

impl PullRequestOutcome {
    /// The number as the forge writes it: `#7` on GitHub, `!7` on GitLab.
    pub fn reference(&self) -> Option<String> {
        self.number.map(|n| self.forge.reference(n))
    }

    /// The action in the report's words (`would open`, `updated`, …).
    pub fn status(&self, dry_run: bool) -> String {
        let (done, would) = match &self.action {
            Action::Opened => ("opened", "would open"),
            Action::TakenOver => (
                "taken over: one was open for the branch already",
                "would take over the one open for the branch",
            ),
            Action::Updated { rebuilt: false } => ("updated", "would update"),
            Action::Updated { rebuilt: true } => (
                "updated (rebuilt on the new base)",
                "would update (rebuild on the new base)",
            ),
            Action::UpToDate => ("up to date", "up to date"),
            Action::Blocked { .. } => (
                "left alone: someone else pushed to the branch",
                "left alone: someone else pushed to the branch",
            ),
            Action::Declined { .. } => (
                "not reopened: this proposal was closed unmerged",
                "not reopened: this proposal was closed unmerged",
            ),
            Action::Closed { .. } => ("closed", "would close"),
            Action::Duplicate { .. } => ("closed as a duplicate", "would close as a duplicate"),
            Action::Kept => (
                "left open: the plan had problems",
                "left open: the plan had problems",
            ),
            Action::Failed { .. } => ("failed", "failed"),
        };
        if let Action::Failed { error } = &self.action {
            return format!("failed: {error}");
        }
        if dry_run { would } else { done }.to_owned()
    }
}

/// What happened in one repository in pull-request mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForgeOutcome {
    pub repository: String,
    pub base: String,
    pub base_commit: String,
    pub dry_run: bool,
    pub pull_requests: Vec<PullRequestOutcome>,
}

impl ForgeOutcome {
    /// Whether a group's pull request failed: the repository then counts as failed (exit
    /// code 1) though the other groups went on.
    pub fn failed(&self) -> bool {
        self.pull_requests
            .iter()
            .any(|p| matches!(p.action, Action::Failed { .. }))
    }
}

/// The `wanted` labels `have` lacks; forges compare labels without regard to case.
pub(crate) fn missing_labels(have: &[String], wanted: &[String]) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for label in wanted {
        let known = |l: &String| l.eq_ignore_ascii_case(label);
        if !have.iter().any(known) && !missing.iter().any(known) {
            missing.push(label.clone());
        }
    }
    missing
}

/// The `wanted` reviewers `have` does not name. `org/team` is a team; a bare name may be a
/// user or a team (GitHub tells only when asked), so either satisfies it.
pub(crate) fn missing_reviewers(have: &[Reviewer], wanted: &[String]) -> Vec<String> {
    let mut missing: Vec<String> = Vec::new();
    for name in wanted {
        let named = have.iter().any(|r| match name.split_once('/') {
            Some((_, slug)) => r.team && r.name.eq_ignore_ascii_case(slug),
            None => r.name.eq_ignore_ascii_case(name),
        });
        if !named && !missing.iter().any(|m| m.eq_ignore_ascii_case(name)) {
            missing.push(name.clone());
        }
    }
    missing
}

/// One repository's result in pull-request mode.
#[derive(Debug)]
pub struct ForgeReport<T = ()> {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    /// The plan the pull requests were synced to, also when syncing then failed.
    pub plan: Option<T>,
    pub result: Result<ForgeOutcome, ForgeError>,
}

impl<T> ForgeReport<T> {
    /// Whether the repository failed, as a whole or for one of its groups.
    pub fn failed(&self) -> bool {
        match &self.result {
            Ok(outcome) => outcome.failed(),
            Err(_) => true,
        }
    }
}

/// Reads the token a config names by environment variable; the error names the variable only.
pub(crate) fn read_token(
    repository: &str,
    forge: &'static str,
    env: &str,
) -> Result<String, ForgeError> {
    match std::env::var(env) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_owned()),
        _ => Err(ForgeError::Auth {
            repository: repository.to_owned(),
            forge,
            message: format!("environment variable `{env}` is not set"),
        }),
    }
}

/// A value for a forge API query string: branch names may hold `/`, `+` and `#`.
pub(crate) fn query_value(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gitlab_numbers_merge_requests_with_a_bang() {
        let outcome = |forge| PullRequestOutcome {
            forge,
            group: "api".into(),
            branch: "tagpilot/api".into(),
            action: Action::Opened,
            number: Some(3),
            url: None,
            changes: Vec::new(),
            warnings: Vec::new(),
        };
        assert_eq!(
            outcome(ForgeKind::GitLab).reference().as_deref(),
            Some("!3")
        );
        assert_eq!(
            outcome(ForgeKind::GitHub).reference().as_deref(),
            Some("#3")
        );
        assert_eq!(ForgeKind::GitLab.noun(), "merge request");
    }

    #[test]
    fn only_what_is_missing_is_added() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            missing_labels(
                &strings(&["Dependencies", "keep-me"]),
                &strings(&["dependencies", "images", "images"])
            ),
            ["images"]
        );
        let have = [
            Reviewer {
                name: "alice".into(),
                team: false,
                id: 1,
            },
            Reviewer {
                name: "platform".into(),
                team: true,
                id: 2,
            },
        ];
        assert_eq!(
            missing_reviewers(
                &have,
                &strings(&["Alice", "platform", "acme/platform", "acme/sre", "bob"])
            ),
            ["acme/sre", "bob"]
        );
    }
}
