//! Gitea and Forgejo pull requests through their API v1 (the same API; Forgejo forked Gitea and
//! kept it), with `reqwest`.
//!
//! The same behaviour as GitHub in Gitea's terms: labels are added by id once the pull request
//! exists, so the repository's labels are read and a missing one is created (as GitHub and
//! GitLab create a label on first use); reviewers are requested after opening (users by login, teams as `org/team`); a draft
//! is the `WIP: ` title prefix Gitea reads as work in progress; auto-merge is Gitea's "merge when
//! checks succeed" in the repository's default merge style. Listings follow `page`/`limit`
//! with the `Link` and `X-Total-Count` headers. The token travels only in the `Authorization`
//! header and never into a message.

mod wire;

use std::time::Duration;

use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::merged::MergeState;
use super::retry::{Attempt, rate_limit_wait, waiting_out_rate_limits};
use super::status::{CommitState, VERIFY_CONTEXT};
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, SourceCommits,
    missing_labels, missing_reviewers, read_token,
};
use crate::config::forge::{GiteaConfig, path_from_url};
use wire::{Comment, Label, Pull, Review};

/// The title prefix Gitea and Forgejo read as a draft (their default
/// `WORK_IN_PROGRESS_PREFIXES` starts with it).
const DRAFT: &str = "WIP: ";
/// Items asked per page; Gitea serves at most its `MAX_RESPONSE_ITEMS` (50 by default).
const LIMIT: usize = 50;
/// Pages read at most per listing, so a server that always says "next" costs a bounded run.
const MAX_PAGES: usize = 100;
/// The colour a label tagpilot creates gets (Gitea requires one).
const LABEL_COLOR: &str = "#ededed";

/// A connection to one Gitea or Forgejo repository's pull requests.
pub struct Gitea {
    kind: ForgeKind,
    repository: String,
    /// `https://git.example/api/v1`
    api: String,
    /// `owner/name`
    path: String,
    token: String,
    http: reqwest::Client,
    /// `write.draft`: titles keep the `WIP: ` prefix on every update.
    draft: bool,
}

impl std::fmt::Debug for Gitea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gitea")
            .field("kind", &self.kind)
            .field("api", &self.api)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Gitea {
    /// Connects to the repository `url` names (or `forge.gitea.repository`) on the server
    /// `config.apiUrl` names, or the one the repository URL is on. `kind` is Gitea or Forgejo,
    /// for the words errors use.
    pub fn connect(
        kind: ForgeKind,
        repository: &str,
        url: &str,
        config: &GiteaConfig,
    ) -> Result<Gitea, ForgeError> {
        let key = kind.name().to_ascii_lowercase();
        let config_error = |message: String| ForgeError::Config {
            repository: repository.to_owned(),
            message,
        };
        let path = match &config.repository {
            Some(path) => path.clone(),
            None => path_from_url(url).ok_or_else(|| {
                config_error(format!(
                    "cannot tell the {} repository from the URL; set `forge.{key}.repository`",
                    kind.name()
                ))
            })?,
        };
        // Gitea has no nested groups: the repository is the URL path's last two segments.
        let path = last_two_segments(&path).ok_or_else(|| {
            config_error(format!(
                "`{path}` is no `owner/name`; set `forge.{key}.repository`"
            ))
        })?;
        let api = match &config.api_url {
            Some(api) => api.trim_end_matches('/').to_owned(),
            None => api_from_url(url).ok_or_else(|| {
                config_error(format!(
                    "cannot tell the {} API from a repository URL that is not https://; set \
                     `forge.{key}.apiUrl`",
                    kind.name()
                ))
            })?,
        };
        let token = read_token(repository, kind.name(), &config.token_env)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| config_error(format!("cannot set up HTTP: {e}")))?;
        Ok(Gitea {
            kind,
            repository: repository.to_owned(),
            api,
            path,
            token,
            http,
            draft: false,
        })
    }

    /// Keeps pull requests drafts (`write.draft`).
    pub fn with_draft(mut self, draft: bool) -> Gitea {
        self.draft = draft;
        self
    }

    fn name(&self) -> &'static str {
        self.kind.name()
    }

    fn title(&self, title: &str, draft: bool) -> String {
        if draft || self.draft {
            format!("{DRAFT}{title}")
        } else {
            title.to_owned()
        }
    }

    fn route(&self, rest: &str) -> String {
        format!("{}/repos/{}{rest}", self.api, self.path)
    }

    /// One request, rate limits waited out; the answer's text and headers when it succeeded.
    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<(String, HeaderMap), ForgeError> {
        let attempt = || async {
            let mut request = self
                .http
                .request(method.clone(), url)
                .header("authorization", format!("token {}", self.token))
                .header("accept", "application/json");
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                // reqwest's error text names the URL, which holds no secret here.
                Err(e) => return Attempt::Done(Err(self.api_error(action, e.to_string()))),
            };
            let status = response.status();
            let headers = response.headers().clone();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let now = crate::clock::Clock::wall(&crate::clock::SystemClock);
                return Attempt::RateLimited {
                    wait: rate_limit_wait(&headers, now),
                };
            }
            let text = response.text().await.unwrap_or_default();
            if status.is_success() {
                return Attempt::Done(Ok((text, headers)));
            }
            Attempt::Done(Err(self.refused(&method, url, status, &text, action)))
        };
        let give_up = |wait_seconds| ForgeError::RateLimited {
            repository: self.repository.clone(),
            forge: self.name(),
            action: action.to_owned(),
            wait_seconds,
        };
        waiting_out_rate_limits(self.name(), action, attempt, give_up).await
    }

    fn api_error(&self, action: &str, message: String) -> ForgeError {
        ForgeError::Api {
            repository: self.repository.clone(),
            forge: self.name(),
            action: action.to_owned(),
            message,
        }
    }

    /// The error for a refusal, in Gitea's words.
    fn refused(
        &self,
        method: &Method,
        url: &str,
        status: StatusCode,
        text: &str,
        action: &str,
    ) -> ForgeError {
        let message = wire::error_message(text);
        match status {
            StatusCode::UNAUTHORIZED => ForgeError::Auth {
                repository: self.repository.clone(),
                forge: self.name(),
                message: format!("the token was rejected ({message})"),
            },
            StatusCode::FORBIDDEN => ForgeError::Permission {
                repository: self.repository.clone(),
                forge: self.name(),
                action: action.to_owned(),
                permission: wire::required_scopes(&message)
                    .unwrap_or_else(|| scope_for(method, url).to_owned()),
                message,
            },
            _ => self.api_error(action, format!("{message} ({status})")),
        }
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<T, ForgeError> {
        let (text, _) = self.send(method, url, body, action).await?;
        serde_json::from_str(&text)
            .map_err(|e| self.api_error(action, format!("unexpected response: {e}")))
    }

    /// Every item of a listing at `url` (which has a query already), page by page.
    async fn list<T: DeserializeOwned>(
        &self,
        url: &str,
        action: &str,
    ) -> Result<Vec<T>, ForgeError> {
        let mut all = Vec::new();
        for page in 1..=MAX_PAGES {
            let (text, headers) = self
                .send(
                    Method::GET,
                    &format!("{url}&page={page}&limit={LIMIT}"),
                    None,
                    action,
                )
                .await?;
            let items: Vec<T> = serde_json::from_str(&text)
                .map_err(|e| self.api_error(action, format!("unexpected response: {e}")))?;
            let len = items.len();
            all.extend(items);
            if !wire::has_next_page(&headers, all.len(), len, LIMIT) {
                break;
            }
        }
        Ok(all)
    }

    async fn pulls(&self, state: &str, action: &str) -> Result<Vec<Pull>, ForgeError> {
        self.list(
            &self.route(&format!("/pulls?state={state}&sort=recentupdate")),
            action,
        )
        .await
    }

    /// The ids of `names` among the repository's labels; a label the repository lacks is
    /// created, as GitHub and GitLab do on first use.
    async fn label_ids(&self, names: &[String]) -> Result<Vec<u64>, ForgeError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let known: Vec<Label> = self
            .list(&self.route("/labels?"), "list the repository's labels")
            .await?;
        let mut ids = Vec::new();
        for name in names {
            match known.iter().find(|l| l.name.eq_ignore_ascii_case(name)) {
                Some(label) => ids.push(label.id),
                None => {
                    let created: Label = self
                        .call(
                            Method::POST,
                            &self.route("/labels"),
                            Some(&json!({ "name": name, "color": LABEL_COLOR })),
                            &format!("create the label `{name}`"),
                        )
                        .await?;
                    ids.push(created.id);
                }
            }
        }
        Ok(ids)
    }

    /// Adds `labels` to pull request `number` (none: no call).
    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), ForgeError> {
        if labels.is_empty() {
            return Ok(());
        }
        let ids = self.label_ids(labels).await?;
        // POST adds; PUT would replace what a human added.
        self.send(
            Method::POST,
            &self.route(&format!("/issues/{number}/labels")),
            Some(&json!({ "labels": ids })),
            &format!("add labels to pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    /// Asks `names` to review pull request `number`: all at once, and when Gitea refuses
    /// that (one of them is no user or team it knows), one by one, with a warning for each
    /// it refuses. `org/team` is a team of the repository's organisation.
    async fn request_reviewers(
        &self,
        number: u64,
        names: &[String],
    ) -> Result<Vec<String>, ForgeError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        let url = self.route(&format!("/pulls/{number}/requested_reviewers"));
        let action = format!("request reviews on pull request #{number}");
        let request = |names: &[String]| {
            let (teams, users): (Vec<&String>, Vec<&String>) =
                names.iter().partition(|n| n.contains('/'));
            let teams: Vec<&str> = teams
                .into_iter()
                .map(|t| t.rsplit('/').next().unwrap_or(t))
                .collect();
            json!({ "reviewers": users, "team_reviewers": teams })
        };
        match self
            .send(Method::POST, &url, Some(&request(names)), &action)
            .await
        {
            Ok(_) => return Ok(Vec::new()),
            Err(ForgeError::Api { .. }) if names.len() > 1 => {}
            Err(ForgeError::Api { message, .. }) => {
                return Ok(vec![unknown_reviewer(&names[0], self.name(), &message)]);
            }
            Err(e) => return Err(e),
        }
        let mut warnings = Vec::new();
        for name in names {
            let one = std::slice::from_ref(name);
            match self
                .send(Method::POST, &url, Some(&request(one)), &action)
                .await
            {
                Ok(_) => {}
                Err(ForgeError::Api { message, .. }) => {
                    warnings.push(unknown_reviewer(name, self.name(), &message));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(warnings)
    }

    /// `wanted` less whoever reviewed pull request `number` already: Gitea no longer lists a
    /// reviewer as requested once they reviewed.
    async fn not_yet_reviewed(
        &self,
        number: u64,
        wanted: Vec<String>,
    ) -> Result<Vec<String>, ForgeError> {
        if wanted.is_empty() {
            return Ok(wanted);
        }
        let reviews: Vec<Review> = self
            .list(
                &self.route(&format!("/pulls/{number}/reviews?")),
                &format!("list the reviews of pull request #{number}"),
            )
            .await?;
        Ok(wanted
            .into_iter()
            .filter(|name| {
                !reviews.iter().any(|r| match name.split_once('/') {
                    Some((_, team)) => r
                        .team
                        .as_ref()
                        .is_some_and(|t| t.name.eq_ignore_ascii_case(team)),
                    None => r
                        .user
                        .as_ref()
                        .is_some_and(|u| u.login.eq_ignore_ascii_case(name)),
                })
            })
            .collect())
    }

    /// Sets pull request `number` to merge once its checks succeed, in the repository's
    /// default merge style.
    async fn auto_merge(&self, number: u64) -> Result<(), ForgeError> {
        let repository: wire::Repository = self
            .call(
                Method::GET,
                &self.route(""),
                None,
                "read the repository's merge style",
            )
            .await?;
        let style = repository
            .default_merge_style
            .unwrap_or_else(|| "merge".into());
        self.send(
            Method::POST,
            &self.route(&format!("/pulls/{number}/merge")),
            Some(&json!({ "Do": style, "merge_when_checks_succeed": true })),
            &format!("set pull request #{number} to merge when its checks succeed"),
        )
        .await?;
        Ok(())
    }

    /// The open pull request from `branch` into `base`, after Gitea refused a second one.
    async fn open_from(&self, branch: &str, base: &str) -> Result<Option<PullRequest>, ForgeError> {
        let mut url = url::Url::parse(&self.route("/pulls"))
            .map_err(|e| self.api_error("find the existing pull request", e.to_string()))?;
        if let Ok(mut segments) = url.path_segments_mut() {
            segments.push(base);
            // Gitea routes `/pulls/{base}/*`: the head keeps its slashes.
            segments.extend(branch.split('/'));
        }
        match self
            .call::<Pull>(
                Method::GET,
                url.as_str(),
                None,
                "find the existing pull request",
            )
            .await
        {
            Ok(pull) if pull.state == "open" => Ok(Some(pull.into_pull_request(DRAFT))),
            Ok(_) => Ok(None),
            Err(ForgeError::Api { message, .. }) if message.ends_with("(404 Not Found)") => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// The scope a call at `url` needs, as Gitea names token scopes: pull requests and statuses
/// are `repository`, comments and labels `issue`.
fn scope_for(method: &Method, url: &str) -> &'static str {
    let issue = url.contains("/issues/") || url.contains("/labels");
    match (*method == Method::GET, issue) {
        (true, true) => "read:issue",
        (true, false) => "read:repository",
        (false, true) => "write:issue",
        (false, false) => "write:repository",
    }
}

fn unknown_reviewer(name: &str, forge: &str, message: &str) -> String {
    format!("reviewer `{name}` was not requested: {forge} refused it ({message})")
}

/// `owner/name` from a path that may carry a prefix (`gitea/owner/name`).
fn last_two_segments(path: &str) -> Option<String> {
    let mut parts = path.trim_matches('/').rsplit('/');
    let name = parts.next().filter(|s| !s.is_empty())?;
    let owner = parts.next().filter(|s| !s.is_empty())?;
    Some(format!("{owner}/{name}"))
}

/// The API of the server an `https://` (or `http://`) repository URL is on: its scheme, host,
/// port and any path prefix before `owner/name`, with `/api/v1`.
fn api_from_url(url: &str) -> Option<String> {
    let parsed = url::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "https" | "http") {
        return None;
    }
    let segments: Vec<&str> = parsed.path_segments()?.filter(|s| !s.is_empty()).collect();
    let prefix = segments.get(..segments.len().checked_sub(2)?)?;
    let mut api = format!("{}://{}", parsed.scheme(), parsed.host_str()?);
    if let Some(port) = parsed.port() {
        api.push_str(&format!(":{port}"));
    }
    for segment in prefix {
        api.push('/');
        api.push_str(segment);
    }
    api.push_str("/api/v1");
    Some(api)
}

impl Forge for Gitea {
    fn kind(&self) -> ForgeKind {
        self.kind
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        // Gitea's listing does not filter by branch: tagpilot does.
        let pulls = self.pulls("open", "list open pull requests").await?;
        Ok(pulls
            .into_iter()
            .filter(|p| p.base.name == base)
            .map(|p| p.into_pull_request(DRAFT))
            .collect())
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        let pulls = self.pulls("closed", "list closed pull requests").await?;
        Ok(pulls
            .into_iter()
            .filter(|p| p.base.name == base && p.head.name == branch)
            .map(|p| p.into_pull_request(DRAFT))
            .collect())
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let action = format!("open a pull request from `{}`", pr.branch);
        let created: Result<Pull, ForgeError> = self
            .call(
                Method::POST,
                &self.route("/pulls"),
                Some(&json!({
                    "head": pr.branch,
                    "base": pr.base,
                    "title": self.title(&pr.title, pr.draft),
                    "body": pr.body,
                })),
                &action,
            )
            .await;
        let created = match created {
            Ok(created) => created,
            // Gitea answers 409 "pull request already exists for these targets".
            Err(ForgeError::Api { message, .. }) if message.contains("already exists") => {
                let Some(existing) = self.open_from(&pr.branch, &pr.base).await? else {
                    return Err(self.api_error(&action, message));
                };
                self.update(existing.number, &pr.title, &pr.body).await?;
                let warnings = self.converge(&existing, &pr.labels, &pr.reviewers).await?;
                return Ok(Created {
                    pull_request: existing,
                    warnings,
                    taken_over: true,
                });
            }
            Err(e) => return Err(e),
        };
        let number = created.number;
        // Labelled once it exists, as GitHub does: a refused opening creates no label.
        self.add_labels(number, &pr.labels).await?;
        let warnings = self.request_reviewers(number, &pr.reviewers).await?;
        if pr.auto_merge {
            self.auto_merge(number).await?;
        }
        Ok(Created {
            pull_request: created.into_pull_request(DRAFT),
            warnings,
            taken_over: false,
        })
    }

    async fn converge(
        &self,
        pr: &PullRequest,
        labels: &[String],
        reviewers: &[String],
    ) -> Result<Vec<String>, ForgeError> {
        let number = pr.number;
        self.add_labels(number, &missing_labels(&pr.labels, labels))
            .await?;
        let wanted = missing_reviewers(&pr.reviewers, reviewers);
        let wanted = self.not_yet_reviewed(number, wanted).await?;
        self.request_reviewers(number, &wanted).await
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::PATCH,
            &self.route(&format!("/pulls/{number}")),
            Some(&json!({ "title": self.title(title, false), "body": body })),
            &format!("update pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::POST,
            &self.route(&format!("/issues/{number}/comments")),
            Some(&json!({ "body": body })),
            &format!("comment on pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        self.send(
            Method::PATCH,
            &self.route(&format!("/pulls/{number}")),
            Some(&json!({ "state": "closed" })),
            &format!("close pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        // Oldest first, as Gitea lists them; the endpoint is not paginated before 1.22.
        let listed: Vec<Comment> = self
            .call(
                Method::GET,
                &self.route(&format!("/issues/{number}/comments")),
                None,
                &format!("list the comments of pull request #{number}"),
            )
            .await?;
        Ok(listed
            .into_iter()
            .take(100)
            .map(|c| (c.id, c.body))
            .collect())
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::PATCH,
            &self.route(&format!("/issues/comments/{id}")),
            Some(&json!({ "body": body })),
            &format!("update a comment on pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn compare(&self, path: &str, from: &str, to: &str) -> Result<SourceCommits, ForgeError> {
        let url = format!("{}/repos/{path}/compare/{from}...{to}", self.api);
        let c: wire::Comparison = self
            .call(
                Method::GET,
                &url,
                None,
                &format!("compare {path} {from}...{to}"),
            )
            .await?;
        Ok(SourceCommits::from_messages(
            c.commits.iter().map(|e| e.commit.message.as_str()),
            c.total_commits,
        ))
    }

    async fn set_commit_status(
        &self,
        commit: &str,
        state: CommitState,
        description: &str,
    ) -> Result<(), ForgeError> {
        // Gitea's states are GitHub's words.
        self.send(
            Method::POST,
            &self.route(&format!("/statuses/{commit}")),
            Some(&json!({
                "state": state.github(),
                "context": VERIFY_CONTEXT,
                "description": description,
            })),
            &format!("set the {VERIFY_CONTEXT} status of {commit}"),
        )
        .await?;
        Ok(())
    }

    async fn merge_state(&self, number: u64) -> Result<MergeState, ForgeError> {
        let pull: Pull = self
            .call(
                Method::GET,
                &self.route(&format!("/pulls/{number}")),
                None,
                &format!("read pull request #{number}"),
            )
            .await?;
        Ok(pull.merge_state())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_api_and_the_repository_come_from_the_repository_url() {
        assert_eq!(
            api_from_url("https://git.example/acme/manifests.git").as_deref(),
            Some("https://git.example/api/v1")
        );
        assert_eq!(
            api_from_url("http://127.0.0.1:3000/gitea/acme/manifests").as_deref(),
            Some("http://127.0.0.1:3000/gitea/api/v1")
        );
        assert_eq!(api_from_url("git@git.example:acme/manifests.git"), None);
        assert_eq!(
            last_two_segments("gitea/acme/manifests").as_deref(),
            Some("acme/manifests")
        );
        assert_eq!(last_two_segments("manifests"), None);
    }

    #[test]
    fn a_403_without_named_scopes_names_the_scope_the_call_needs() {
        let url = "https://git.example/api/v1/repos/a/b";
        assert_eq!(
            scope_for(&Method::GET, &format!("{url}/pulls?state=open")),
            "read:repository"
        );
        assert_eq!(
            scope_for(&Method::POST, &format!("{url}/pulls")),
            "write:repository"
        );
        assert_eq!(
            scope_for(&Method::POST, &format!("{url}/issues/7/comments")),
            "write:issue"
        );
        assert_eq!(
            scope_for(&Method::GET, &format!("{url}/labels?")),
            "read:issue"
        );
    }
}
