//! Bitbucket Data Center (and Server) pull requests through its REST API 1.0, with `reqwest`.
//!
//! The same behaviour as GitHub in Bitbucket's terms, and what it does not have said as a
//! warning on the pull request: no labels, no team reviewers, no auto-merge over the API.
//! Every change to a pull request or comment names the version it changes, so each is read
//! first; an update sends the reviewers back, since one that leaves them out removes them.
//! Listings page with `start`/`limit` until `isLastPage`; a second pull request from a branch is
//! refused (`DuplicatePullRequestException`), and tagpilot takes the open one over. Closing is
//! declining. The `tagpilot/verify` status is a build status on the commit. An HTTP access
//! token travels as a bearer token, never into a message.

mod wire;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::merged::MergeState;
use super::retry::{Attempt, rate_limit_wait, waiting_out_rate_limits};
use super::status::{CommitState, VERIFY_CONTEXT};
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, missing_reviewers,
    query_value, read_token,
};
use crate::config::forge::{BitbucketDataCenterConfig, path_from_url};
use wire::{Activity, Comment, Page, Pull};

const FORGE: &str = ForgeKind::BitbucketDataCenter.name();
const LIMIT: u64 = 100;
const MAX_PAGES: usize = 100;
/// The build status key.
const STATUS_KEY: &str = "tagpilot-verify";

/// A connection to one Bitbucket Data Center repository's pull requests.
pub struct BitbucketDataCenter {
    repository: String,
    /// `https://bitbucket.example`
    base: String,
    /// `PROJ`
    project: String,
    /// `manifests`
    slug: String,
    token: String,
    http: reqwest::Client,
}

impl std::fmt::Debug for BitbucketDataCenter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitbucketDataCenter")
            .field("base", &self.base)
            .field("project", &self.project)
            .field("slug", &self.slug)
            .finish_non_exhaustive()
    }
}

impl BitbucketDataCenter {
    pub fn connect(
        repository: &str,
        url: &str,
        config: &BitbucketDataCenterConfig,
    ) -> Result<BitbucketDataCenter, ForgeError> {
        let config_error = |message: String| ForgeError::Config {
            repository: repository.to_owned(),
            message,
        };
        let path = match &config.repository {
            Some(path) => path.clone(),
            None => path_from_url(url).ok_or_else(|| {
                config_error(
                    "cannot tell the Bitbucket project and repository from the URL; set \
                     `forge.bitbucketDataCenter.repository`"
                        .into(),
                )
            })?,
        };
        // `scm/PROJ/repo` (HTTP clone URLs) or `proj/repo` (SSH): the last two segments.
        let mut parts = path.trim_matches('/').rsplit('/');
        let (Some(slug), Some(project)) = (parts.next(), parts.next()) else {
            return Err(config_error(format!(
                "`{path}` is no `PROJECT/repository`; set `forge.bitbucketDataCenter.repository`"
            )));
        };
        let token = read_token(repository, FORGE, &config.token_env)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| config_error(format!("cannot set up HTTP: {e}")))?;
        Ok(BitbucketDataCenter {
            repository: repository.to_owned(),
            base: config.api_url.trim_end_matches('/').to_owned(),
            project: project.to_ascii_uppercase(),
            slug: slug.to_owned(),
            token,
            http,
        })
    }

    fn route(&self, rest: &str) -> String {
        format!(
            "{}/rest/api/1.0/projects/{}/repos/{}{rest}",
            self.base, self.project, self.slug
        )
    }

    fn api_error(&self, action: &str, message: String) -> ForgeError {
        ForgeError::Api {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            message,
        }
    }

    /// One request, rate limits waited out; the status and text of whatever answered.
    async fn exchange(
        &self,
        method: &Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<(StatusCode, String), ForgeError> {
        let attempt = || async {
            let mut request = self
                .http
                .request(method.clone(), url)
                .bearer_auth(&self.token);
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = match request.send().await {
                Ok(response) => response,
                // reqwest's error text names the URL, which holds no secret here.
                Err(e) => return Attempt::Done(Err(self.api_error(action, e.to_string()))),
            };
            let status = response.status();
            if status == StatusCode::TOO_MANY_REQUESTS {
                let now = crate::clock::Clock::wall(&crate::clock::SystemClock);
                return Attempt::RateLimited {
                    wait: rate_limit_wait(response.headers(), now),
                };
            }
            Attempt::Done(Ok((status, response.text().await.unwrap_or_default())))
        };
        let give_up = |wait_seconds| ForgeError::RateLimited {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            wait_seconds,
        };
        waiting_out_rate_limits(FORGE, action, attempt, give_up).await
    }

    fn answered(
        &self,
        method: &Method,
        (status, text): (StatusCode, String),
        action: &str,
    ) -> Result<String, ForgeError> {
        if status.is_success() {
            return Ok(text);
        }
        let message = wire::error_message(&text);
        Err(match status {
            StatusCode::UNAUTHORIZED => ForgeError::Auth {
                repository: self.repository.clone(),
                forge: FORGE,
                message: format!("the token was rejected ({message})"),
            },
            StatusCode::FORBIDDEN => ForgeError::Permission {
                repository: self.repository.clone(),
                forge: FORGE,
                action: action.to_owned(),
                permission: if *method == Method::GET {
                    "Repository read"
                } else {
                    "Repository write"
                }
                .to_owned(),
                message,
            },
            _ => self.api_error(action, format!("{message} ({status})")),
        })
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<String, ForgeError> {
        let answer = self.exchange(&method, url, body, action).await?;
        self.answered(&method, answer, action)
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<T, ForgeError> {
        let text = self.send(method, url, body, action).await?;
        serde_json::from_str(&text)
            .map_err(|e| self.api_error(action, format!("unexpected response: {e}")))
    }

    /// Every item of a listing at `url` (which has a query), page by page.
    async fn list<T: DeserializeOwned>(
        &self,
        url: &str,
        action: &str,
    ) -> Result<Vec<T>, ForgeError> {
        let mut all = Vec::new();
        let mut start = 0;
        for _ in 0..MAX_PAGES {
            let page: Page<T> = self
                .call(
                    Method::GET,
                    &format!("{url}&start={start}&limit={LIMIT}"),
                    None,
                    action,
                )
                .await?;
            all.extend(page.values);
            match page.next_page_start {
                Some(next) if !page.is_last_page => start = next,
                _ => break,
            }
        }
        Ok(all)
    }

    /// Pull requests in `state` whose `direction` end is `branch`.
    async fn pulls(
        &self,
        state: &str,
        direction: &str,
        branch: &str,
        action: &str,
    ) -> Result<Vec<Pull>, ForgeError> {
        let url = self.route(&format!(
            "/pull-requests?state={state}&direction={direction}&at={}&order=NEWEST",
            query_value(&format!("refs/heads/{branch}"))
        ));
        self.list(&url, action).await
    }

    async fn pull(&self, number: u64) -> Result<Pull, ForgeError> {
        self.call(
            Method::GET,
            &self.route(&format!("/pull-requests/{number}")),
            None,
            &format!("read pull request #{number}"),
        )
        .await
    }

    /// Sets title, description and reviewers of pull request `number` at its current
    /// version; the reviewers are always sent, since leaving them out removes them.
    async fn put(
        &self,
        number: u64,
        title: Option<&str>,
        body: Option<&str>,
        added: &[String],
        action: &str,
    ) -> Result<(), ForgeError> {
        let current = self.pull(number).await?;
        let mut reviewers: Vec<Value> = current
            .reviewers
            .iter()
            .map(|p| json!({ "user": { "name": p.user.name } }))
            .collect();
        reviewers.extend(added.iter().map(|name| json!({ "user": { "name": name } })));
        let fields = json!({
            "version": current.version,
            "title": title.unwrap_or(&current.title),
            "description": body.map(str::to_owned).or(current.description),
            "reviewers": reviewers,
        });
        self.send(
            Method::PUT,
            &self.route(&format!("/pull-requests/{number}")),
            Some(&fields),
            action,
        )
        .await?;
        Ok(())
    }
}

/// What Bitbucket cannot do of what is asked, as warnings; and the reviewers it can ask.
fn unsupported(
    labels: &[String],
    reviewers: &[String],
    auto_merge: bool,
) -> (Vec<String>, Vec<String>) {
    let mut warnings = Vec::new();
    if !labels.is_empty() {
        warnings.push(format!(
            "{FORGE} has no labels: {} not set",
            labels
                .iter()
                .map(|l| format!("`{l}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let (teams, users): (Vec<&String>, Vec<&String>) =
        reviewers.iter().partition(|r| r.contains('/'));
    for team in teams {
        warnings.push(format!(
            "reviewer `{team}` was not requested: {FORGE} cannot ask a team for a review"
        ));
    }
    if auto_merge {
        warnings.push(format!(
            "{FORGE} cannot set a pull request to merge by itself over its API: `write.autoMerge` not applied"
        ));
    }
    (warnings, users.into_iter().cloned().collect())
}

impl Forge for BitbucketDataCenter {
    fn kind(&self) -> ForgeKind {
        ForgeKind::BitbucketDataCenter
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        let pulls = self
            .pulls("OPEN", "INCOMING", base, "list open pull requests")
            .await?;
        Ok(pulls.into_iter().map(Pull::into_pull_request).collect())
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        let pulls = self
            .pulls("ALL", "OUTGOING", branch, "list closed pull requests")
            .await?;
        Ok(pulls
            .into_iter()
            .filter(|p| p.state != "OPEN" && wire::branch_of(&p.to_ref.id) == base)
            .map(Pull::into_pull_request)
            .collect())
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let (warnings, users) = unsupported(&pr.labels, &pr.reviewers, pr.auto_merge);
        let action = format!("open a pull request from `{}`", pr.branch);
        let url = self.route("/pull-requests");
        let mut fields = json!({
            "title": pr.title,
            "description": pr.body,
            "fromRef": { "id": format!("refs/heads/{}", pr.branch) },
            "toRef": { "id": format!("refs/heads/{}", pr.base) },
            "reviewers": users.iter().map(|u| json!({ "user": { "name": u } })).collect::<Vec<_>>(),
        });
        if pr.draft {
            // Drafts are Bitbucket 8.18 on; an older server ignores the field.
            fields["draft"] = true.into();
        }
        let answer = self
            .exchange(&Method::POST, &url, Some(&fields), &action)
            .await?;
        if answer.0 == StatusCode::CONFLICT && wire::is_duplicate(&answer.1) {
            // Only one may be open per source and target branch: take the open one over.
            let open = self
                .pulls(
                    "OPEN",
                    "OUTGOING",
                    &pr.branch,
                    "find the existing pull request",
                )
                .await?;
            let Some(existing) = open
                .into_iter()
                .find(|p| wire::branch_of(&p.to_ref.id) == pr.base)
            else {
                return Err(self.api_error(&action, wire::error_message(&answer.1)));
            };
            let existing = existing.into_pull_request();
            self.update(existing.number, &pr.title, &pr.body).await?;
            let warnings = self.converge(&existing, &pr.labels, &pr.reviewers).await?;
            return Ok(Created {
                pull_request: existing,
                warnings,
                taken_over: true,
            });
        }
        let text = self.answered(&Method::POST, answer, &action)?;
        let created: Pull = serde_json::from_str(&text)
            .map_err(|e| self.api_error(&action, format!("unexpected response: {e}")))?;
        Ok(Created {
            pull_request: created.into_pull_request(),
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
        let (warnings, users) = unsupported(labels, reviewers, false);
        // Bitbucket keeps a reviewer listed after they reviewed: the listing is all it takes.
        let added = missing_reviewers(&pr.reviewers, &users);
        if !added.is_empty() {
            let number = pr.number;
            self.put(
                number,
                None,
                None,
                &added,
                &format!("add reviewers to pull request #{number}"),
            )
            .await?;
        }
        Ok(warnings)
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        self.put(
            number,
            Some(title),
            Some(body),
            &[],
            &format!("update pull request #{number}"),
        )
        .await
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::POST,
            &self.route(&format!("/pull-requests/{number}/comments")),
            Some(&json!({ "text": body })),
            &format!("comment on pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        let version = self.pull(number).await?.version;
        self.send(
            Method::POST,
            &self.route(&format!(
                "/pull-requests/{number}/decline?version={version}"
            )),
            Some(&json!({})),
            &format!("decline pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        // The activity lists newest first; comments are read oldest first.
        let page: Page<Activity> = self
            .call(
                Method::GET,
                &self.route(&format!("/pull-requests/{number}/activities?limit=100")),
                None,
                &format!("list the comments of pull request #{number}"),
            )
            .await?;
        let mut comments: Vec<(u64, String)> = page
            .values
            .into_iter()
            .filter(|a| a.action == "COMMENTED")
            .filter_map(|a| a.comment.map(|c| (c.id, c.text)))
            .collect();
        comments.reverse();
        Ok(comments)
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        let url = self.route(&format!("/pull-requests/{number}/comments/{id}"));
        let action = format!("update a comment on pull request #{number}");
        let current: Comment = self.call(Method::GET, &url, None, &action).await?;
        self.send(
            Method::PUT,
            &url,
            Some(&json!({ "text": body, "version": current.version })),
            &action,
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
        let page = format!(
            "{}/projects/{}/repos/{}/commits/{commit}",
            self.base, self.project, self.slug
        );
        self.send(
            Method::POST,
            &self.route(&format!("/commits/{commit}/builds")),
            Some(&json!({
                "key": STATUS_KEY,
                "name": VERIFY_CONTEXT,
                "state": state.bitbucket(),
                "description": description,
                "url": page,
            })),
            &format!("set the {VERIFY_CONTEXT} status of {commit}"),
        )
        .await?;
        Ok(())
    }

    async fn merge_state(&self, number: u64) -> Result<MergeState, ForgeError> {
        Ok(self.pull(number).await?.merge_state())
    }
}
