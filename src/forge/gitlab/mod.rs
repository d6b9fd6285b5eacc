//! GitLab merge requests through the REST API v4, with `reqwest`.
//!
//! The same behaviour as GitHub in GitLab's terms: reviewers by user name (looked up to ids),
//! drafts by the `Draft:` title prefix, auto-merge by `merge_when_pipeline_succeeds`. The token
//! travels only in the `PRIVATE-TOKEN` header and never into a message.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::issue::Issue;
use super::merged::{GitLabMergeRequest, MergeState};
use super::query_value;
use super::retry::{Attempt, rate_limit_wait, waiting_out_rate_limits};
use super::status::{CommitState, VERIFY_CONTEXT};
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, Reviewer, SourceCommits,
    missing_labels, missing_reviewers, read_token,
};
use crate::config::forge::{GitLabConfig, path_from_url};

mod issues;

const FORGE: &str = ForgeKind::GitLab.name();
const DRAFT: &str = "Draft: ";

/// A connection to one GitLab project's merge requests.
pub struct GitLab {
    repository: String,
    api: String,
    /// URL-encoded project path or id.
    project: String,
    token: String,
    http: reqwest::Client,
    /// `write.draft`: titles keep the `Draft:` prefix on every update.
    draft: bool,
}

impl std::fmt::Debug for GitLab {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitLab")
            .field("api", &self.api)
            .field("project", &self.project)
            .finish_non_exhaustive()
    }
}

#[derive(Deserialize)]
struct MergeRequest {
    iid: u64,
    web_url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    description: Option<String>,
    source_branch: String,
    #[serde(default)]
    state: String,
    #[serde(default)]
    labels: Vec<String>,
    #[serde(default)]
    reviewers: Vec<User>,
}

impl From<MergeRequest> for PullRequest {
    fn from(mr: MergeRequest) -> PullRequest {
        PullRequest {
            number: mr.iid,
            url: mr.web_url,
            // The draft prefix is GitLab's way of saying draft, not part of tagpilot's title.
            title: mr.title.strip_prefix(DRAFT).unwrap_or(&mr.title).to_owned(),
            body: mr.description.unwrap_or_default(),
            branch: mr.source_branch,
            merged: mr.state == "merged",
            labels: mr.labels,
            reviewers: mr
                .reviewers
                .into_iter()
                .map(|u| Reviewer {
                    name: u.username,
                    team: false,
                    id: u.id,
                })
                .collect(),
        }
    }
}

#[derive(Deserialize)]
struct User {
    id: u64,
    #[serde(default)]
    username: String,
}

impl GitLab {
    pub fn connect(
        repository: &str,
        url: &str,
        config: &GitLabConfig,
    ) -> Result<GitLab, ForgeError> {
        let project = match &config.project {
            Some(project) => project.clone(),
            None => path_from_url(url).ok_or_else(|| ForgeError::Config {
                repository: repository.to_owned(),
                message: "cannot tell the GitLab project from the URL; set `forge.gitlab.project`"
                    .into(),
            })?,
        };
        let token = read_token(repository, FORGE, &config.token_env)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ForgeError::Config {
                repository: repository.to_owned(),
                message: format!("cannot set up HTTP: {e}"),
            })?;
        Ok(GitLab {
            repository: repository.to_owned(),
            api: config.api_url.trim_end_matches('/').to_owned(),
            project: url::form_urlencoded::byte_serialize(project.as_bytes()).collect(),
            token,
            http,
            draft: false,
        })
    }

    /// Keeps merge requests drafts (`write.draft`).
    pub fn with_draft(mut self, draft: bool) -> GitLab {
        self.draft = draft;
        self
    }

    fn title(&self, title: &str) -> String {
        if self.draft {
            format!("{DRAFT}{title}")
        } else {
            title.to_owned()
        }
    }

    fn route(&self, rest: &str) -> String {
        format!("{}/projects/{}{rest}", self.api, self.project)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<T, ForgeError> {
        let api_error = |message: String| ForgeError::Api {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            message,
        };
        let attempt = || async {
            let mut request = self
                .http
                .request(method.clone(), url)
                .header("PRIVATE-TOKEN", &self.token);
            if let Some(body) = body {
                request = request.json(body);
            }
            // reqwest's error text names the URL, which holds no secret here.
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) => return Attempt::Done(Err(api_error(e.to_string()))),
            };
            let status = response.status();
            if status.is_success() {
                return Attempt::Done(
                    response
                        .json()
                        .await
                        .map_err(|e| api_error(format!("unexpected response: {e}"))),
                );
            }
            if status == StatusCode::TOO_MANY_REQUESTS {
                return Attempt::RateLimited {
                    wait: rate_limit_wait(
                        response.headers(),
                        crate::clock::Clock::wall(&crate::clock::SystemClock),
                    ),
                };
            }
            let text = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| {
                    v.get("message")
                        .or_else(|| v.get("error"))
                        .map(|m| match m {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                })
                .unwrap_or(text);
            Attempt::Done(Err(match status {
                StatusCode::UNAUTHORIZED => ForgeError::Auth {
                    repository: self.repository.clone(),
                    forge: FORGE,
                    message: format!("the token was rejected ({message})"),
                },
                StatusCode::FORBIDDEN => ForgeError::Permission {
                    repository: self.repository.clone(),
                    forge: FORGE,
                    action: action.to_owned(),
                    permission: "api scope, Developer role".into(),
                    message,
                },
                _ => api_error(format!("{message} ({status})")),
            }))
        };
        let give_up = |wait_seconds| ForgeError::RateLimited {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            wait_seconds,
        };
        waiting_out_rate_limits(FORGE, action, attempt, give_up).await
    }

    async fn list(&self, query: &str, action: &str) -> Result<Vec<PullRequest>, ForgeError> {
        let mut all = Vec::new();
        for page in 1.. {
            let url = self.route(&format!("/merge_requests?{query}&per_page=100&page={page}"));
            let mrs: Vec<MergeRequest> = self.call(Method::GET, &url, None, action).await?;
            let full = mrs.len() == 100;
            all.extend(mrs.into_iter().map(PullRequest::from));
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// The ids of `usernames`, and a warning for each GitLab does not know.
    async fn user_ids(&self, usernames: &[String]) -> Result<(Vec<u64>, Vec<String>), ForgeError> {
        let mut ids = Vec::new();
        let mut warnings = Vec::new();
        for username in usernames {
            let url = format!("{}/users?username={}", self.api, query_value(username));
            let action = format!("look up reviewer `{username}`");
            let users: Vec<User> = self.call(Method::GET, &url, None, &action).await?;
            match users.first() {
                Some(user) => ids.push(user.id),
                None => warnings.push(format!(
                    "reviewer `{username}` was not requested: GitLab knows no user by that name"
                )),
            }
        }
        Ok((ids, warnings))
    }
}

impl Forge for GitLab {
    fn kind(&self) -> ForgeKind {
        ForgeKind::GitLab
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        self.list(
            &format!("state=opened&target_branch={}", query_value(base)),
            "list open merge requests",
        )
        .await
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        // GitLab keeps merged ones apart (`state=merged`); closed means closed unmerged.
        self.list(
            &format!(
                "state=closed&source_branch={}&target_branch={}",
                query_value(branch),
                query_value(base)
            ),
            "list closed merge requests",
        )
        .await
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let (reviewer_ids, warnings) = self.user_ids(&pr.reviewers).await?;
        let title = if pr.draft {
            format!("{DRAFT}{}", pr.title)
        } else {
            self.title(&pr.title)
        };
        let action = format!("open a merge request from `{}`", pr.branch);
        let created: Result<MergeRequest, ForgeError> = self
            .call(
                Method::POST,
                &self.route("/merge_requests"),
                Some(&json!({
                    "source_branch": pr.branch,
                    "target_branch": pr.base,
                    "title": title,
                    "description": pr.body,
                    "labels": pr.labels.join(","),
                    "reviewer_ids": reviewer_ids,
                    "remove_source_branch": true,
                })),
                &action,
            )
            .await;
        let created = match created {
            Ok(created) => created,
            Err(ForgeError::Api { message, .. }) if message.contains("already exists") => {
                let existing = self
                    .list(
                        &format!(
                            "state=opened&source_branch={}&target_branch={}",
                            query_value(&pr.branch),
                            query_value(&pr.base)
                        ),
                        "find the existing merge request",
                    )
                    .await?;
                let Some(existing) = existing.into_iter().next() else {
                    return Err(ForgeError::Api {
                        repository: self.repository.clone(),
                        forge: FORGE,
                        action,
                        message,
                    });
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
        let iid = created.iid;
        if pr.auto_merge {
            let _: Value = self
                .call(
                    Method::PUT,
                    &self.route(&format!("/merge_requests/{iid}/merge")),
                    Some(&json!({ "merge_when_pipeline_succeeds": true })),
                    &format!("set merge request !{iid} to merge when the pipeline succeeds"),
                )
                .await?;
        }
        Ok(Created {
            pull_request: created.into(),
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
        // GitLab lists reviewers also after they reviewed, so the listing is all it takes.
        let labels = missing_labels(&pr.labels, labels);
        let (new_ids, warnings) = self
            .user_ids(&missing_reviewers(&pr.reviewers, reviewers))
            .await?;
        let mut changes = serde_json::Map::new();
        if !labels.is_empty() {
            // `add_labels` adds; `labels` would replace what a human added.
            changes.insert("add_labels".into(), labels.join(",").into());
        }
        if !new_ids.is_empty() {
            // `reviewer_ids` replaces the set: the present reviewers stay in it.
            let ids: Vec<u64> = pr.reviewers.iter().map(|r| r.id).chain(new_ids).collect();
            changes.insert("reviewer_ids".into(), ids.into());
        }
        if !changes.is_empty() {
            let number = pr.number;
            let _: Value = self
                .call(
                    Method::PUT,
                    &self.route(&format!("/merge_requests/{number}")),
                    Some(&Value::Object(changes)),
                    &format!("add labels and reviewers to merge request !{number}"),
                )
                .await?;
        }
        Ok(warnings)
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::PUT,
                &self.route(&format!("/merge_requests/{number}")),
                Some(&json!({ "title": self.title(title), "description": body })),
                &format!("update merge request !{number}"),
            )
            .await?;
        Ok(())
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::POST,
                &self.route(&format!("/merge_requests/{number}/notes")),
                Some(&json!({ "body": body })),
                &format!("comment on merge request !{number}"),
            )
            .await?;
        Ok(())
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        #[derive(serde::Deserialize)]
        struct Note {
            id: u64,
            #[serde(default)]
            body: String,
        }
        let listed: Vec<Note> = self
            .call(
                Method::GET,
                &self.route(&format!(
                    "/merge_requests/{number}/notes?sort=asc&order_by=created_at&per_page=100"
                )),
                None,
                &format!("list the notes of merge request !{number}"),
            )
            .await?;
        Ok(listed.into_iter().map(|n| (n.id, n.body)).collect())
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::PUT,
                &self.route(&format!("/merge_requests/{number}/notes/{id}")),
                Some(&json!({ "body": body })),
                &format!("update a note on merge request !{number}"),
            )
            .await?;
        Ok(())
    }

    async fn set_commit_status(
        &self,
        commit: &str,
        state: CommitState,
        description: &str,
    ) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::POST,
                &self.route(&format!("/statuses/{commit}")),
                Some(&json!({
                    "state": state.gitlab(),
                    "name": VERIFY_CONTEXT,
                    "description": description,
                })),
                &format!("set the {VERIFY_CONTEXT} status of {commit}"),
            )
            .await?;
        Ok(())
    }

    async fn merge_state(&self, number: u64) -> Result<MergeState, ForgeError> {
        let mr: GitLabMergeRequest = self
            .call(
                Method::GET,
                &self.route(&format!("/merge_requests/{number}")),
                None,
                &format!("read merge request !{number}"),
            )
            .await?;
        Ok(mr.state())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::PUT,
                &self.route(&format!("/merge_requests/{number}")),
                Some(&json!({ "state_event": "close" })),
                &format!("close merge request !{number}"),
            )
            .await?;
        Ok(())
    }

    async fn compare(&self, path: &str, from: &str, to: &str) -> Result<SourceCommits, ForgeError> {
        #[derive(Deserialize)]
        struct Comparison {
            #[serde(default)]
            commits: Vec<CommitEntry>,
        }
        #[derive(Deserialize)]
        struct CommitEntry {
            #[serde(default)]
            title: String,
        }
        let url = format!(
            "{}/projects/{}/repository/compare?from={}&to={}",
            self.api,
            query_value(path),
            query_value(from),
            query_value(to)
        );
        let c: Comparison = self
            .call(
                Method::GET,
                &url,
                None,
                &format!("compare {path} {from}...{to}"),
            )
            .await?;
        let total = c.commits.len();
        Ok(SourceCommits::from_messages(
            c.commits.iter().map(|e| e.title.as_str()),
            total,
        ))
    }

    async fn find_issue(&self, marker: &str) -> Result<Option<Issue>, ForgeError> {
        self.find_issue_with(marker).await
    }

    async fn issue(&self, number: u64) -> Result<Issue, ForgeError> {
        self.read_issue(number).await
    }

    async fn create_issue(&self, title: &str, body: &str) -> Result<Issue, ForgeError> {
        self.open_issue(title, body).await
    }

    async fn edit_issue(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        self.put_issue(number, json!({ "description": body })).await
    }

    async fn close_issue(&self, number: u64) -> Result<(), ForgeError> {
        self.put_issue(number, json!({ "state_event": "close" }))
            .await
    }
}
