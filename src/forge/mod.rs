//! Pull-request mode: one reviewable pull request per change group, kept up to date by
//! tagpilot instead of piling up new ones, and closed when it is no longer needed.
//!
//! Protected branches are why this exists: tagpilot proposes, a reviewer merges. The forge edge
//! ([`github`], [`gitlab`]) sits behind the small [`Forge`] trait; the git side (branches built
//! on the base and pushed with a lease) lives in [`crate::git::proposal`]. This module decides,
//! per group, whether to open, update, leave alone or close. It must never open a second pull
//! request for a group, never overwrite a commit someone else pushed to tagpilot's branch, never
//! re-propose what a reviewer declined, and never print a token. Labels and reviewers converge on
//! every pull request tagpilot keeps: what the config names and the pull request lacks is added;
//! what humans added is never removed.

pub mod body;
pub mod config;
pub mod github;
pub mod gitlab;

use std::collections::BTreeMap;
use std::future::Future;

use crate::git::{self, GitError, Replanner, RepoCache, RepositoryConfig};

pub use body::{DEFAULT_BRANCH, DEFAULT_TITLE, Marker};
pub use config::{ForgeConfig, GitHubApp, GitHubConfig, GitLabConfig};

/// Why pull requests of a repository could not be read or written. Every variant names the
/// repository; none carries a token.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("repository `{repository}`: {message}")]
    Config { repository: String, message: String },
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
    #[error("repository `{repository}`: {forge} could not {action}: {message}")]
    Api {
        repository: String,
        forge: &'static str,
        action: String,
        message: String,
    },
}

impl ForgeError {
    /// A short stable name for reports and metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ForgeError::Git(e) => e.metric_label(),
            ForgeError::Config { .. } => "forge_config",
            ForgeError::Auth { .. } => "forge_auth",
            ForgeError::Permission { .. } => "forge_permission",
            ForgeError::RateLimited { .. } => "forge_rate_limited",
            ForgeError::Api { .. } => "forge_api",
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
}

/// What happened (or would) to one group's pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Opened,
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
}

/// One group's pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestOutcome {
    pub group: String,
    pub branch: String,
    pub action: Action,
    pub number: Option<u64>,
    pub url: Option<String>,
    pub changes: Vec<git::Change>,
    /// What the forge would not apply, e.g. an unknown reviewer; the pull request stands.
    pub warnings: Vec<String>,
}

impl PullRequestOutcome {
    /// The action in the report's words (`would open`, `updated`, …).
    pub fn status(&self, dry_run: bool) -> String {
        let (done, would) = match &self.action {
            Action::Opened => ("opened", "would open"),
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
        };
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

/// Keeps the pull requests of `repo` in step with a fresh plan. With `dry_run` it reads the
/// forge and builds the commits but pushes, opens, comments and closes nothing.
#[tracing::instrument(skip_all, fields(repository = %repo.name, dry_run))]
pub async fn sync_pull_requests<P: Replanner, F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    forge: &F,
    dry_run: bool,
) -> Result<ForgeOutcome, ForgeError> {
    let config_error = |message: String| ForgeError::Config {
        repository: repo.name.clone(),
        message,
    };
    let prepared = git::proposal::prepare(cache, repo, planner).await?;
    let signer = git::proposal::load_signer(repo)?;

    // tagpilot's open pull requests, one per group: the oldest wins should there be two (two
    // runs racing, or a changed branch template), and the others are closed below.
    let mut open: BTreeMap<String, (Marker, PullRequest)> = BTreeMap::new();
    let mut duplicates = Vec::new();
    let mut listed = forge.open_pull_requests(&repo.branch).await?;
    listed.sort_by_key(|pr| pr.number);
    for pr in listed {
        if let Some(marker) = Marker::find(&pr.body) {
            match open.get(&marker.group) {
                Some((_, kept)) => duplicates.push((marker.group.clone(), kept.number, pr)),
                None => {
                    open.insert(marker.group.clone(), (marker, pr));
                }
            }
        }
    }

    let mut branches = Vec::new();
    let mut wanted = Vec::new();
    for group in &prepared.groups {
        let branch = match open.get(&group.key) {
            Some((_, pr)) => pr.branch.clone(),
            None => body::branch_name(repo.write.branch.as_deref(), &repo.name, group)
                .map_err(config_error)?,
        };
        branches.push(branch.clone());
        wanted.push((group, branch));
    }
    branches.extend(open.values().map(|(_, pr)| pr.branch.clone()));
    branches.sort();
    branches.dedup();
    let tips = git::proposal::fetch_branches(cache, repo, branches).await?;
    let tip_of = |branch: &str| tips.get(branch).cloned().flatten();

    let mut outcomes = Vec::new();
    for (group, branch) in wanted {
        let Some(built) =
            git::proposal::build_commit(cache, repo, prepared.base_tip, group, signer.clone())
                .await?
        else {
            continue;
        };
        let title =
            body::title(repo.write.title.as_deref(), &repo.name, group).map_err(config_error)?;
        let proposal = body::proposal_id(&group.changes);
        let marker = |head: String| Marker {
            group: group.key.clone(),
            proposal: proposal.clone(),
            head,
            noted: None,
        };
        let mut outcome = PullRequestOutcome {
            group: group.key.clone(),
            branch: branch.clone(),
            action: Action::UpToDate,
            number: None,
            url: None,
            changes: group.changes.clone(),
            warnings: Vec::new(),
        };
        let tip = tip_of(&branch);
        if let Some((old, pr)) = open.remove(&group.key) {
            outcome.number = Some(pr.number);
            outcome.url = Some(pr.url.clone());
            if let Some(tip) = tip
                .as_ref()
                .filter(|t| t.id.to_string() != old.head && !t.by_tagpilot)
            {
                let tip_id = tip.id.to_string();
                outcome.action = Action::Blocked {
                    tip: tip_id.clone(),
                };
                if !dry_run && old.noted.as_deref() != Some(tip_id.as_str()) {
                    forge
                        .comment(pr.number, &blocked_comment(&branch, &tip_id))
                        .await?;
                    let noted = Marker {
                        noted: Some(tip_id),
                        ..old.clone()
                    };
                    forge
                        .update(pr.number, &pr.title, &replace_marker(&pr.body, &noted))
                        .await?;
                }
                tracing::warn!(group = %group.key, branch, "someone else pushed to tagpilot's branch; not overwriting");
                outcomes.push(outcome);
                continue;
            }
            let same = match &tip {
                Some(tip) => git::proposal::same_commit(cache, repo, tip.id, built.id).await?,
                None => false,
            };
            let head = match (&tip, same) {
                (Some(tip), true) => tip.id.to_string(),
                _ => built.id.to_string(),
            };
            let new_body = body::body(&repo.name, &repo.branch, group, &marker(head));
            if same && pr.title == title && pr.body == new_body {
                outcome.action = Action::UpToDate;
            } else {
                outcome.action = Action::Updated {
                    rebuilt: !same && old.proposal == proposal,
                };
                if !dry_run {
                    if !same {
                        git::proposal::push_branch(
                            cache,
                            repo,
                            &branch,
                            built.id,
                            tip.as_ref().map(|t| t.id),
                        )
                        .await?;
                    }
                    forge.update(pr.number, &title, &new_body).await?;
                }
            }
            // Labels and reviewers converge too (the config may have changed, or the pull
            // request was opened elsewhere); a listed pull request says what it has.
            if !dry_run {
                outcome.warnings = forge
                    .converge(&pr, &repo.write.labels, &repo.write.reviewers)
                    .await?;
            }
        } else {
            let closed = forge.closed_pull_requests(&branch, &repo.branch).await?;
            let declined = closed.iter().find(|pr| {
                !pr.merged
                    && Marker::find(&pr.body)
                        .is_some_and(|m| m.group == group.key && m.proposal == proposal)
            });
            if let Some(pr) = declined {
                outcome.action = Action::Declined { closed: pr.number };
                outcome.number = Some(pr.number);
                outcome.url = Some(pr.url.clone());
                outcomes.push(outcome);
                continue;
            }
            if let Some(tip) = tip.as_ref().filter(|t| !t.by_tagpilot) {
                // A branch of that name with someone else's commit and no open pull request:
                // not tagpilot's to overwrite.
                outcome.action = Action::Blocked {
                    tip: tip.id.to_string(),
                };
                tracing::warn!(group = %group.key, branch, "the branch holds someone else's commit; not overwriting");
                outcomes.push(outcome);
                continue;
            }
            outcome.action = Action::Opened;
            if !dry_run {
                let same = match &tip {
                    Some(tip) => git::proposal::same_commit(cache, repo, tip.id, built.id).await?,
                    None => false,
                };
                let head = match (&tip, same) {
                    (Some(tip), true) => tip.id,
                    _ => {
                        git::proposal::push_branch(
                            cache,
                            repo,
                            &branch,
                            built.id,
                            tip.as_ref().map(|t| t.id),
                        )
                        .await?;
                        built.id
                    }
                };
                let created = forge
                    .create(&NewPullRequest {
                        branch: branch.clone(),
                        base: repo.branch.clone(),
                        title,
                        body: body::body(
                            &repo.name,
                            &repo.branch,
                            group,
                            &marker(head.to_string()),
                        ),
                        labels: repo.write.labels.clone(),
                        reviewers: repo.write.reviewers.clone(),
                        draft: repo.write.draft,
                        auto_merge: repo.write.auto_merge,
                    })
                    .await?;
                outcome.number = Some(created.pull_request.number);
                outcome.url = Some(created.pull_request.url);
                outcome.warnings = created.warnings;
            }
        }
        outcomes.push(outcome);
    }

    for (group, kept, pr) in duplicates {
        if !dry_run {
            forge
                .comment(
                    pr.number,
                    &format!("tagpilot keeps one pull request per group; #{kept} carries this one. Closing."),
                )
                .await?;
            forge.close(pr.number).await?;
        }
        outcomes.push(PullRequestOutcome {
            group,
            branch: pr.branch.clone(),
            action: Action::Duplicate { of: kept },
            number: Some(pr.number),
            url: Some(pr.url.clone()),
            changes: Vec::new(),
            warnings: Vec::new(),
        });
    }

    // Open pull requests whose group has nothing left to change.
    for (group, (marker, pr)) in open {
        let mut outcome = PullRequestOutcome {
            group: group.clone(),
            branch: pr.branch.clone(),
            action: Action::Kept,
            number: Some(pr.number),
            url: Some(pr.url.clone()),
            changes: Vec::new(),
            warnings: Vec::new(),
        };
        if !prepared.complete {
            outcomes.push(outcome);
            continue;
        }
        let tip = tip_of(&pr.branch);
        let reached_base = match &tip {
            Some(tip) => {
                git::proposal::reached_base(cache, repo, tip.id, prepared.base_tip).await?
            }
            None => false,
        };
        outcome.action = Action::Closed { reached_base };
        if !dry_run {
            let comment = if reached_base {
                format!("The change is already in `{}`; closing.", repo.branch)
            } else {
                format!(
                    "`{}` no longer needs this change: the policies now want what it holds. Closing.",
                    repo.branch
                )
            };
            forge.comment(pr.number, &comment).await?;
            forge.close(pr.number).await?;
            // Only tagpilot's own branch is deleted, and only if it still holds what was seen.
            if let Some(tip) = tip.filter(|t| t.by_tagpilot || t.id.to_string() == marker.head) {
                git::proposal::delete_branch(cache, repo, &pr.branch, tip.id).await?;
            }
        }
        outcomes.push(outcome);
    }

    for outcome in &outcomes {
        for warning in &outcome.warnings {
            tracing::warn!(group = %outcome.group, "{warning}");
        }
    }
    Ok(ForgeOutcome {
        repository: repo.name.clone(),
        base: repo.branch.clone(),
        base_commit: prepared.base_tip.to_string(),
        dry_run,
        pull_requests: outcomes,
    })
}

fn blocked_comment(branch: &str, tip: &str) -> String {
    format!(
        "Commit {} on `{branch}` was not made by tagpilot, so tagpilot will not overwrite it and \
         stops updating this pull request. Delete the branch or close this pull request to let \
         tagpilot propose again.",
        &tip[..tip.len().min(12)]
    )
}

fn replace_marker(text: &str, marker: &Marker) -> String {
    match text.rfind("<!-- tagpilot:") {
        Some(start) => {
            let end = text[start..]
                .find("-->")
                .map_or(text.len(), |e| start + e + 3);
            format!("{}{}{}", &text[..start], marker.render(), &text[end..])
        }
        None => format!("{text}\n\n{}\n", marker.render()),
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

/// Checks the pull-request templates of a repository (for `validate` and `tagpilot check`).
pub fn check_templates(write: &git::WriteConfig, base: &str) -> Result<(), String> {
    let sample = git::ChangeGroup {
        key: "example".into(),
        files: Default::default(),
        changes: vec![git::Change {
            policy: "example".into(),
            image: "registry.example/app".into(),
            file: "apps/app.yaml".into(),
            line: 1,
            from: "1.0.0".into(),
            to: "1.1.0".into(),
            strategy: "semver".into(),
        }],
    };
    let branch = body::branch_name(write.branch.as_deref(), "example", &sample)?;
    if branch == base {
        return Err(format!(
            "`write.branch` gives the base branch `{base}`; pull requests need a branch tagpilot owns"
        ));
    }
    body::title(write.title.as_deref(), "example", &sample)?;
    Ok(())
}

/// One repository's result in pull-request mode.
#[derive(Debug)]
pub struct ForgeReport {
    pub repository: String,
    /// Without userinfo.
    pub url: String,
    pub result: Result<ForgeOutcome, ForgeError>,
}

/// Runs [`sync_pull_requests`] for every repository in pull-request mode, connecting to each
/// one's forge. A failing repository does not stop the others.
pub async fn sync_all<P: Replanner>(
    cache: &RepoCache,
    repositories: &[RepositoryConfig],
    planner: &P,
    dry_run: bool,
) -> Vec<ForgeReport> {
    let mut reports = Vec::new();
    for repo in repositories {
        let result = sync_one(cache, repo, planner, dry_run).await;
        if let Err(e) = &result {
            tracing::error!(repository = %repo.name, error = %e, "pull requests failed");
        }
        reports.push(ForgeReport {
            repository: repo.name.clone(),
            url: git::auth::redact_url(&repo.url),
            result,
        });
    }
    reports
}

async fn sync_one<P: Replanner>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    planner: &P,
    dry_run: bool,
) -> Result<ForgeOutcome, ForgeError> {
    repo.validate()?;
    let forge = repo.forge.as_ref().ok_or_else(|| ForgeError::Config {
        repository: repo.name.clone(),
        message: "`write.mode: pull-request` needs a `forge:` block".into(),
    })?;
    if let Some(config) = &forge.github {
        let client = github::GitHub::connect(&repo.name, &repo.url, config).await?;
        let mut repo = repo.clone();
        // An App's installation token also serves for git over HTTPS, unless `auth` says else.
        if let Some(token) = client.git_token()
            && repo
                .auth
                .method()
                .is_ok_and(|m| m == git::config::AuthMethod::None)
        {
            repo.auth.provided_token = Some(token);
        }
        sync_pull_requests(cache, &repo, planner, &client, dry_run).await
    } else if let Some(config) = &forge.gitlab {
        let client =
            gitlab::GitLab::connect(&repo.name, &repo.url, config)?.with_draft(repo.write.draft);
        sync_pull_requests(cache, repo, planner, &client, dry_run).await
    } else {
        Err(ForgeError::Config {
            repository: repo.name.clone(),
            message: "`forge` needs `github` or `gitlab`".into(),
        })
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

/// How long to wait for a rate limit, from `Retry-After` (seconds) or `x-ratelimit-reset` /
/// `ratelimit-reset` (epoch seconds); `None` when the response says nothing.
pub(crate) fn rate_limit_wait(headers: &reqwest::header::HeaderMap) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(seconds) = header("retry-after") {
        return Some(seconds);
    }
    let reset = header("x-ratelimit-reset").or_else(|| header("ratelimit-reset"))?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    Some(reset.saturating_sub(now).max(1))
}

/// Longest wait for a rate limit within one run; beyond it the repository fails for this run.
pub(crate) const MAX_RATE_LIMIT_WAIT: u64 = 300;
/// How many times one request is retried after rate limits.
pub(crate) const MAX_RATE_LIMIT_RETRIES: u32 = 3;

/// A value for a forge API query string: branch names may hold `/`, `+` and `#`.
pub(crate) fn query_value(value: &str) -> String {
    url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_marker_keeps_the_text_around_it() {
        let old = Marker {
            group: "api".into(),
            proposal: "p".into(),
            head: "a".into(),
            noted: None,
        };
        let body = format!("table\n\n{}\n", old.render());
        let new = Marker {
            noted: Some("b".into()),
            ..old
        };
        assert_eq!(
            replace_marker(&body, &new),
            format!("table\n\n{}\n", new.render())
        );
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

    #[test]
    fn rate_limit_wait_reads_retry_after_then_reset() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(rate_limit_wait(&headers), None);
        headers.insert("x-ratelimit-reset", "1".parse().unwrap());
        assert_eq!(
            rate_limit_wait(&headers),
            Some(1),
            "a reset in the past waits a second"
        );
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(rate_limit_wait(&headers), Some(7));
    }
}
