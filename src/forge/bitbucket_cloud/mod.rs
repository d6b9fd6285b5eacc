//! Bitbucket Cloud pull requests through the API 2.0, with `reqwest`.
//!
//! The same behaviour as GitHub in Bitbucket's terms, and what Bitbucket does not have said as a
//! warning on the pull request, never dropped: Bitbucket has no labels, no team reviewers and
//! no auto-merge over its API. Reviewers are named by Atlassian account id or `{uuid}`
//! (usernames left the API). Listings follow each page's `next` link; pull requests are
//! filtered by branch with a BBQL `q`. An update sends the reviewers back with the title and
//! description, since an update without them drops them. Closing is Bitbucket's "decline". The
//! `tagpilot/verify` status is a build status. An access token travels as a bearer token, an
//! app password as basic authentication, never into a message.

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
use crate::config::forge::{BitbucketCloudConfig, path_from_url};
use wire::{Account, Comment, Page, Pull};

const FORGE: &str = ForgeKind::BitbucketCloud.name();
/// Items asked per page (Bitbucket's most for pull requests).
const PAGELEN: usize = 50;
/// Pages read at most per listing, so a server that always says "next" costs a bounded run.
const MAX_PAGES: usize = 100;
/// The build status key: Bitbucket keys statuses by it (at most 40 characters, no `/`).
const STATUS_KEY: &str = "tagpilot-verify";
/// The fields a listing leaves out unless asked for.
const LIST_FIELDS: &str = "+values.reviewers,+values.description";

enum Auth {
    Bearer(String),
    Basic { username: String, password: String },
}

/// A connection to one Bitbucket Cloud repository's pull requests.
pub struct BitbucketCloud {
    repository: String,
    /// `https://api.bitbucket.org/2.0`
    api: String,
    /// `workspace/repository`
    path: String,
    auth: Auth,
    http: reqwest::Client,
}

impl std::fmt::Debug for BitbucketCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BitbucketCloud")
            .field("api", &self.api)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl BitbucketCloud {
    pub fn connect(
        repository: &str,
        url: &str,
        config: &BitbucketCloudConfig,
    ) -> Result<BitbucketCloud, ForgeError> {
        let config_error = |message: String| ForgeError::Config {
            repository: repository.to_owned(),
            message,
        };
        let path = match &config.repository {
            Some(path) => path.clone(),
            None => path_from_url(url).ok_or_else(|| {
                config_error(
                    "cannot tell the Bitbucket repository from the URL; set \
                     `forge.bitbucket.repository`"
                        .into(),
                )
            })?,
        };
        if path.split('/').count() != 2 {
            return Err(config_error(format!(
                "`{path}` is no `workspace/repository`; set `forge.bitbucket.repository`"
            )));
        }
        let auth = match (
            &config.token_env,
            &config.username,
            &config.app_password_env,
        ) {
            (Some(env), None, None) => Auth::Bearer(read_token(repository, FORGE, env)?),
            (None, Some(username), Some(env)) => Auth::Basic {
                username: username.clone(),
                password: read_token(repository, FORGE, env)?,
            },
            _ => {
                return Err(config_error(
                    crate::config::forge::ConfigError::NotOneBitbucketAuth.to_string(),
                ));
            }
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| config_error(format!("cannot set up HTTP: {e}")))?;
        Ok(BitbucketCloud {
            repository: repository.to_owned(),
            api: config.api_url.trim_end_matches('/').to_owned(),
            path,
            auth,
            http,
        })
    }

    fn route(&self, rest: &str) -> String {
        format!("{}/repositories/{}{rest}", self.api, self.path)
    }

    /// Where people look at a commit: the web host beside the API's (`bitbucket.org` for
    /// `api.bitbucket.org/2.0`), which a build status must link to.
    fn commit_page(&self, commit: &str) -> String {
        let web = self
            .api
            .trim_end_matches("/2.0")
            .replacen("://api.", "://", 1);
        format!("{web}/{}/commits/{commit}", self.path)
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
            let request = self.http.request(method.clone(), url);
            let mut request = match &self.auth {
                Auth::Bearer(token) => request.bearer_auth(token),
                Auth::Basic { username, password } => request.basic_auth(username, Some(password)),
            };
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

    /// The answer's text when it succeeded, else the error in Bitbucket's words.
    fn answered(
        &self,
        method: &Method,
        url: &str,
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
                message: format!("the credentials were rejected ({message})"),
            },
            StatusCode::FORBIDDEN => ForgeError::Permission {
                repository: self.repository.clone(),
                forge: FORGE,
                action: action.to_owned(),
                permission: wire::required_scopes(&text)
                    .unwrap_or_else(|| scope_for(method, url).to_owned()),
                message,
            },
            _ => self.api_error(action, format!("{message} ({status})")),
        })
    }

    fn api_error(&self, action: &str, message: String) -> ForgeError {
        ForgeError::Api {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            message,
        }
    }

    async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<&Value>,
        action: &str,
    ) -> Result<String, ForgeError> {
        let answer = self.exchange(&method, url, body, action).await?;
        self.answered(&method, url, answer, action)
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

    /// Every item of a listing, following each page's `next` link.
    async fn list<T: DeserializeOwned>(
        &self,
        first: String,
        action: &str,
    ) -> Result<Vec<T>, ForgeError> {
        let mut all = Vec::new();
        let mut url = Some(first);
        for _ in 0..MAX_PAGES {
            let Some(at) = url.take() else { break };
            let page: Page<T> = self.call(Method::GET, &at, None, action).await?;
            all.extend(page.values);
            url = page.next;
        }
        Ok(all)
    }

    /// The pull requests in `states` matching the BBQL `query`.
    async fn pulls(
        &self,
        states: &[&str],
        query: &str,
        action: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        let states: String = states.iter().map(|s| format!("&state={s}")).collect();
        let first = self.route(&format!(
            "/pullrequests?pagelen={PAGELEN}{states}&q={}&fields={}",
            query_value(query),
            query_value(LIST_FIELDS)
        ));
        let pulls: Vec<Pull> = self.list(first, action).await?;
        Ok(pulls.into_iter().map(Pull::into_pull_request).collect())
    }

    async fn pull(&self, number: u64) -> Result<Pull, ForgeError> {
        self.call(
            Method::GET,
            &self.route(&format!("/pullrequests/{number}")),
            None,
            &format!("read pull request #{number}"),
        )
        .await
    }

    /// Sets pull request `number`'s title, description and reviewers. Bitbucket drops the
    /// reviewers an update leaves out, so they are always sent.
    async fn put(
        &self,
        number: u64,
        title: &str,
        body: Option<&str>,
        reviewers: Vec<Value>,
        action: &str,
    ) -> Result<(), ForgeError> {
        let mut fields = json!({ "title": title, "reviewers": reviewers });
        if let Some(body) = body {
            fields["description"] = body.into();
        }
        self.send(
            Method::PUT,
            &self.route(&format!("/pullrequests/{number}")),
            Some(&fields),
            action,
        )
        .await?;
        Ok(())
    }
}

/// What Bitbucket cannot do of what `pr` asks, as warnings; and the reviewers it can ask.
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

/// The scope a call at `url` needs, as Bitbucket names OAuth scopes.
fn scope_for(method: &Method, url: &str) -> &'static str {
    if url.contains("/statuses/") {
        "repository:write"
    } else if *method == Method::GET {
        "pullrequest"
    } else {
        "pullrequest:write"
    }
}

/// A BBQL string literal.
fn bbql(value: &str) -> String {
    format!("\"{}\"", value.replace('\\', "\\\\").replace('"', "\\\""))
}

impl Forge for BitbucketCloud {
    fn kind(&self) -> ForgeKind {
        ForgeKind::BitbucketCloud
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        let query = format!("destination.branch.name = {}", bbql(base));
        self.pulls(&["OPEN"], &query, "list open pull requests")
            .await
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        let query = format!(
            "source.branch.name = {} AND destination.branch.name = {}",
            bbql(branch),
            bbql(base)
        );
        self.pulls(
            &["MERGED", "DECLINED", "SUPERSEDED"],
            &query,
            "list closed pull requests",
        )
        .await
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let (mut warnings, users) = unsupported(&pr.labels, &pr.reviewers, pr.auto_merge);
        let action = format!("open a pull request from `{}`", pr.branch);
        let url = self.route("/pullrequests");
        let mut fields = json!({
            "title": pr.title,
            "description": pr.body,
            "source": { "branch": { "name": pr.branch } },
            "destination": { "branch": { "name": pr.base } },
            "reviewers": users.iter().map(|u| Account::reference(u)).collect::<Vec<_>>(),
            "close_source_branch": true,
            "draft": pr.draft,
        });
        let mut answer = self
            .exchange(&Method::POST, &url, Some(&fields), &action)
            .await?;
        if answer.0 == StatusCode::BAD_REQUEST
            && !users.is_empty()
            && wire::refused_reviewers(&answer.1)
        {
            // A reviewer Bitbucket does not know refuses the whole opening: open it without
            // them, and say so.
            let message = wire::error_message(&answer.1);
            warnings.extend(users.iter().map(|u| {
                format!(
                    "reviewer `{u}` was not requested: {FORGE} refused the reviewers ({message})"
                )
            }));
            fields["reviewers"] = json!([]);
            answer = self
                .exchange(&Method::POST, &url, Some(&fields), &action)
                .await?;
        }
        let created = match self.answered(&Method::POST, &url, answer, &action) {
            Ok(text) => serde_json::from_str::<Pull>(&text)
                .map_err(|e| self.api_error(&action, format!("unexpected response: {e}")))?,
            Err(ForgeError::Api { message, .. }) if message.contains("already") => {
                let query = format!(
                    "source.branch.name = {} AND destination.branch.name = {}",
                    bbql(&pr.branch),
                    bbql(&pr.base)
                );
                let existing = self
                    .pulls(&["OPEN"], &query, "find the existing pull request")
                    .await?;
                let Some(existing) = existing.into_iter().next() else {
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
        let added = missing_reviewers(&pr.reviewers, &users);
        if added.is_empty() {
            return Ok(warnings);
        }
        // Bitbucket keeps a reviewer listed after they reviewed: the listing is all it takes.
        let number = pr.number;
        let current = self.pull(number).await?;
        let mut refs: Vec<Value> = current
            .reviewers
            .iter()
            .map(Account::as_reference)
            .collect();
        refs.extend(added.iter().map(|u| Account::reference(u)));
        self.put(
            number,
            &current.title,
            None,
            refs,
            &format!("add reviewers to pull request #{number}"),
        )
        .await?;
        Ok(warnings)
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        let current = self.pull(number).await?;
        let refs = current
            .reviewers
            .iter()
            .map(Account::as_reference)
            .collect();
        self.put(
            number,
            title,
            Some(body),
            refs,
            &format!("update pull request #{number}"),
        )
        .await
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::POST,
            &self.route(&format!("/pullrequests/{number}/comments")),
            Some(&json!({ "content": { "raw": body } })),
            &format!("comment on pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        self.send(
            Method::POST,
            &self.route(&format!("/pullrequests/{number}/decline")),
            None,
            &format!("decline pull request #{number}"),
        )
        .await?;
        Ok(())
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        let page: Page<Comment> = self
            .call(
                Method::GET,
                &self.route(&format!(
                    "/pullrequests/{number}/comments?pagelen=100&sort=created_on"
                )),
                None,
                &format!("list the comments of pull request #{number}"),
            )
            .await?;
        Ok(page
            .values
            .into_iter()
            .map(|c| (c.id, c.content.raw))
            .collect())
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::PUT,
            &self.route(&format!("/pullrequests/{number}/comments/{id}")),
            Some(&json!({ "content": { "raw": body } })),
            &format!("update a comment on pull request #{number}"),
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
        self.send(
            Method::POST,
            &self.route(&format!("/commit/{commit}/statuses/build")),
            Some(&json!({
                "key": STATUS_KEY,
                "name": VERIFY_CONTEXT,
                "state": state.bitbucket(),
                "description": description,
                "url": self.commit_page(commit),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_status_links_the_commit_on_the_web_host_beside_the_api() {
        let client = BitbucketCloud {
            repository: "m".into(),
            api: "https://api.bitbucket.org/2.0".into(),
            path: "acme/manifests".into(),
            auth: Auth::Bearer("t".into()),
            http: reqwest::Client::new(),
        };
        assert_eq!(
            client.commit_page("abc"),
            "https://bitbucket.org/acme/manifests/commits/abc"
        );
    }

    #[test]
    fn what_bitbucket_cannot_do_is_said() {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let (warnings, users) = unsupported(
            &strings(&["dependencies"]),
            &strings(&["557058:alice", "acme/platform"]),
            true,
        );
        assert_eq!(users, ["557058:alice"]);
        assert_eq!(
            warnings,
            [
                "Bitbucket Cloud has no labels: `dependencies` not set",
                "reviewer `acme/platform` was not requested: Bitbucket Cloud cannot ask a team for a review",
                "Bitbucket Cloud cannot set a pull request to merge by itself over its API: `write.autoMerge` not applied",
            ]
        );
        assert_eq!(bbql("a\"b"), "\"a\\\"b\"");
    }
}
