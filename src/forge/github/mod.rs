//! GitHub (and GitHub Enterprise Server) pull requests through `octocrab`.
//!
//! octocrab brings the auth (token, or a GitHub App's JWT exchanged for an installation token),
//! the base URL and the HTTP stack; the few endpoints are called by route with small local
//! types, because what a user needs from an error lives in the response headers (rate limit
//! reset, `x-accepted-github-permissions`), which octocrab keeps on its error. Tokens live only
//! inside octocrab's `SecretString` and the `ProvidedToken` handed to git.

use std::time::Duration;

use octocrab::Octocrab;
use octocrab::models::{AppId, InstallationId};
use octocrab::secrecy::ExposeSecret as _;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

mod issues;
mod reviewers;
mod wire;

use super::issue::Issue;
use super::merged::{GitHubPull, MergeState};
use super::query_value;
use super::retry::{Attempt, rate_limit_wait, waiting_out_rate_limits};
use super::status::{CommitState, VERIFY_CONTEXT};
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, SourceCommits, read_token,
};
use crate::config::forge::{GitHubConfig, path_from_url};
use crate::git::ProvidedToken;
use wire::{Pull, describe, permission_hint, short};

const FORGE: &str = ForgeKind::GitHub.name();

/// A connection to one GitHub repository's pull requests.
pub struct GitHub {
    repository: String,
    /// `owner/name`
    path: String,
    owner: String,
    rest: Octocrab,
    graphql: Octocrab,
    /// An App installation token, also good for git over HTTPS.
    git_token: Option<ProvidedToken>,
}

impl GitHub {
    /// Connects with the configured token, or exchanges the App's JWT for an installation
    /// token (one request to `POST /app/installations/{id}/access_tokens`).
    pub async fn connect(
        repository: &str,
        url: &str,
        config: &GitHubConfig,
    ) -> Result<GitHub, ForgeError> {
        let config_error = |message: String| ForgeError::Config {
            repository: repository.to_owned(),
            message,
        };
        let path = match &config.repository {
            Some(path) => path.clone(),
            None => path_from_url(url).ok_or_else(|| {
                config_error(
                    "cannot tell the GitHub repository from the URL; set `forge.github.repository: owner/name`"
                        .into(),
                )
            })?,
        };
        let owner = path
            .split_once('/')
            .map(|(o, _)| o.to_owned())
            .ok_or_else(|| config_error(format!("`{path}` is not `owner/name`")))?;
        let api = config.api_url.trim_end_matches('/').to_owned();
        // GitHub Enterprise Server serves GraphQL at /api/graphql, beside /api/v3.
        let graphql_base = api.strip_suffix("/v3").unwrap_or(&api).to_owned();
        let auth_error = |message: String| ForgeError::Auth {
            repository: repository.to_owned(),
            forge: FORGE,
            message,
        };
        let (token, git_token) = match (&config.token_env, &config.app) {
            (Some(env), _) => (read_token(repository, FORGE, env)?, None),
            (None, Some(app)) => {
                let pem = std::fs::read(&app.private_key_file).map_err(|e| {
                    auth_error(format!(
                        "cannot read the App's private key {}: {e}",
                        app.private_key_file.display()
                    ))
                })?;
                let key = octocrab::EncodingKey::from_rsa_pem(&pem).map_err(|e| {
                    auth_error(format!(
                        "{} is not an RSA private key in PEM format: {e}",
                        app.private_key_file.display()
                    ))
                })?;
                let app_client = builder(repository, &api)?
                    .app(AppId(app.app_id), key)
                    .build()
                    .map_err(|e| config_error(short(&e)))?;
                let (_, token) = app_client
                    .installation_and_token(InstallationId(app.installation_id))
                    .await
                    .map_err(|e| {
                        auth_error(format!(
                            "App {} could not get a token for installation {}: {}",
                            app.app_id,
                            app.installation_id,
                            short(&e)
                        ))
                    })?;
                let token = token.expose_secret().to_owned();
                (token.clone(), Some(ProvidedToken::new(token)))
            }
            (None, None) => {
                return Err(config_error(
                    "`forge.github` needs `tokenEnv` or `app`".into(),
                ));
            }
        };
        let client = |base: &str| {
            builder(repository, base)?
                .personal_token(token.clone())
                .build()
                .map_err(|e| config_error(short(&e)))
        };
        Ok(GitHub {
            repository: repository.to_owned(),
            path,
            owner,
            rest: client(&api)?,
            graphql: client(&graphql_base)?,
            git_token,
        })
    }

    /// The installation token when authenticated as a GitHub App.
    pub fn git_token(&self) -> Option<ProvidedToken> {
        self.git_token.clone()
    }

    fn route(&self, rest: &str) -> String {
        format!("/repos/{}{rest}", self.path)
    }

    /// One API call, waiting out rate limits (bounded), mapping errors to what a user needs.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
        action: &str,
        permission: &str,
    ) -> Result<T, ForgeError> {
        self.call_status(method, route, body, action, permission)
            .await
            .map_err(|(_, e)| e)
    }

    /// [`Self::call`], keeping GitHub's status code of a refusal for callers that recover
    /// from one.
    async fn call_status<T: DeserializeOwned>(
        &self,
        method: Method,
        route: &str,
        body: Option<&Value>,
        action: &str,
        permission: &str,
    ) -> Result<T, (Option<u16>, ForgeError)> {
        let client = if route == "/graphql" {
            &self.graphql
        } else {
            &self.rest
        };
        let attempt = || async move {
            let result: Result<T, octocrab::Error> = match method {
                Method::Get => client.get(route, None::<&()>).await,
                Method::Post => client.post(route, body).await,
                Method::Patch => client.patch(route, body).await,
            };
            let error = match result {
                Ok(value) => return Attempt::Done(Ok(value)),
                Err(octocrab::Error::GitHub { source, .. }) => source,
                Err(other) => {
                    return Attempt::Done(Err((None, self.api_error(action, short(&other)))));
                }
            };
            let status = error.status_code.as_u16();
            let headers = error.headers.clone().unwrap_or_default();
            let limited = status == 429
                || (status == 403
                    && (headers.contains_key("retry-after")
                        || headers
                            .get("x-ratelimit-remaining")
                            .is_some_and(|v| v == "0")
                        || error.message.to_lowercase().contains("rate limit")));
            if limited {
                return Attempt::RateLimited {
                    wait: rate_limit_wait(
                        &headers,
                        crate::clock::Clock::wall(&crate::clock::SystemClock),
                    ),
                };
            }
            Attempt::Done(Err((
                Some(status),
                match status {
                    401 => ForgeError::Auth {
                        repository: self.repository.clone(),
                        forge: FORGE,
                        message: format!("the token was rejected ({})", error.message),
                    },
                    403 | 404 if status == 403 || permission_hint(&headers).is_some() => {
                        ForgeError::Permission {
                            repository: self.repository.clone(),
                            forge: FORGE,
                            action: action.to_owned(),
                            permission: permission_hint(&headers)
                                .unwrap_or_else(|| permission.to_owned()),
                            message: error.message.clone(),
                        }
                    }
                    _ => self.api_error(action, describe(&error)),
                },
            )))
        };
        let give_up = |wait_seconds| {
            let error = ForgeError::RateLimited {
                repository: self.repository.clone(),
                forge: FORGE,
                action: action.to_owned(),
                wait_seconds,
            };
            (None, error)
        };
        waiting_out_rate_limits(FORGE, action, attempt, give_up).await
    }

    fn api_error(&self, action: &str, message: String) -> ForgeError {
        ForgeError::Api {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            message,
        }
    }

    async fn list(&self, query: &str, action: &str) -> Result<Vec<PullRequest>, ForgeError> {
        let mut all = Vec::new();
        for page in 1.. {
            let route = self.route(&format!("/pulls?{query}&per_page=100&page={page}"));
            let pulls: Vec<Pull> = self
                .call(Method::Get, &route, None, action, "pull_requests: read")
                .await?;
            let full = pulls.len() == 100;
            all.extend(pulls.into_iter().map(PullRequest::from));
            if !full {
                break;
            }
        }
        Ok(all)
    }

    fn head(&self, branch: &str) -> String {
        format!("{}:{branch}", self.owner)
    }
}

#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
    Patch,
}

fn builder(
    repository: &str,
    base: &str,
) -> Result<
    octocrab::OctocrabBuilder<
        octocrab::NoSvc,
        octocrab::DefaultOctocrabBuilderConfig,
        octocrab::NoAuth,
        octocrab::NotLayerReady,
    >,
    ForgeError,
> {
    Octocrab::builder()
        .base_uri(base)
        .map(|b| {
            b.set_connect_timeout(Some(Duration::from_secs(10)))
                .set_read_timeout(Some(Duration::from_secs(60)))
        })
        .map_err(|e| ForgeError::Config {
            repository: repository.to_owned(),
            message: format!("`forge.github.apiUrl` `{base}` is not a URL: {}", short(&e)),
        })
}

fn already_exists(error: &ForgeError) -> bool {
    matches!(error, ForgeError::Api { message, .. } if message.contains("already exists"))
}

impl Forge for GitHub {
    fn kind(&self) -> ForgeKind {
        ForgeKind::GitHub
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        self.list(
            &format!("state=open&base={}", query_value(base)),
            "list open pull requests",
        )
        .await
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        self.list(
            &format!(
                "state=closed&head={}&base={}",
                query_value(&self.head(branch)),
                query_value(base)
            ),
            "list closed pull requests",
        )
        .await
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let action = format!("open a pull request from `{}`", pr.branch);
        let created: Result<Pull, ForgeError> = self
            .call(
                Method::Post,
                &self.route("/pulls"),
                Some(&json!({
                    "title": pr.title,
                    "head": pr.branch,
                    "base": pr.base,
                    "body": pr.body,
                    "draft": pr.draft,
                })),
                &action,
                "pull_requests: write",
            )
            .await;
        let created = match created {
            Ok(created) => created,
            // Another run (or a lagging list) opened it already: take it over, never a second.
            Err(e) if already_exists(&e) => {
                let existing = self
                    .list(
                        &format!("state=open&head={}", query_value(&self.head(&pr.branch))),
                        "find the existing pull request",
                    )
                    .await?;
                let Some(existing) = existing.into_iter().next() else {
                    return Err(e);
                };
                self.update(existing.number, &pr.title, &pr.body).await?;
                let warnings = self
                    .add_missing(&existing, &pr.labels, &pr.reviewers, false)
                    .await?;
                return Ok(Created {
                    pull_request: PullRequest {
                        title: pr.title.clone(),
                        body: pr.body.clone(),
                        ..existing
                    },
                    warnings,
                    taken_over: true,
                });
            }
            Err(e) => return Err(e),
        };
        let node_id = created.node_id.clone();
        let created = PullRequest::from(created);
        let warnings = self.decorate(&created, &node_id, pr).await?;
        Ok(Created {
            pull_request: created,
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
        self.add_missing(pr, labels, reviewers, false).await
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::Patch,
                &self.route(&format!("/pulls/{number}")),
                Some(&json!({ "title": title, "body": body })),
                &format!("update pull request #{number}"),
                "pull_requests: write",
            )
            .await?;
        Ok(())
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::Post,
                &self.route(&format!("/issues/{number}/comments")),
                Some(&json!({ "body": body })),
                &format!("comment on pull request #{number}"),
                "pull_requests: write",
            )
            .await?;
        Ok(())
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        #[derive(serde::Deserialize)]
        struct Comment {
            id: u64,
            #[serde(default)]
            body: Option<String>,
        }
        let listed: Vec<Comment> = self
            .call(
                Method::Get,
                &self.route(&format!("/issues/{number}/comments?per_page=100")),
                None,
                &format!("list the comments of pull request #{number}"),
                "pull_requests: read",
            )
            .await?;
        Ok(listed
            .into_iter()
            .map(|c| (c.id, c.body.unwrap_or_default()))
            .collect())
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::Patch,
                &self.route(&format!("/issues/comments/{id}")),
                Some(&json!({ "body": body })),
                &format!("update a comment on pull request #{number}"),
                "pull_requests: write",
            )
            .await?;
        Ok(())
    }

    async fn compare(&self, path: &str, from: &str, to: &str) -> Result<SourceCommits, ForgeError> {
        #[derive(serde::Deserialize)]
        struct Comparison {
            #[serde(default)]
            total_commits: usize,
            #[serde(default)]
            commits: Vec<CommitEntry>,
        }
        #[derive(serde::Deserialize)]
        struct CommitEntry {
            commit: CommitText,
        }
        #[derive(serde::Deserialize)]
        struct CommitText {
            message: String,
        }
        let route = format!("/repos/{path}/compare/{from}...{to}");
        let c: Comparison = self
            .call(
                Method::Get,
                &route,
                None,
                &format!("compare {path} {from}...{to}"),
                "contents: read",
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
        let _: Value = self
            .call(
                Method::Post,
                &self.route(&format!("/statuses/{commit}")),
                Some(&json!({
                    "state": state.github(),
                    "context": VERIFY_CONTEXT,
                    "description": description,
                })),
                &format!("set the {VERIFY_CONTEXT} status of {commit}"),
                "statuses: write",
            )
            .await?;
        Ok(())
    }

    async fn merge_state(&self, number: u64) -> Result<MergeState, ForgeError> {
        let pull: GitHubPull = self
            .call(
                Method::Get,
                &self.route(&format!("/pulls/{number}")),
                None,
                &format!("read pull request #{number}"),
                "pull_requests: read",
            )
            .await?;
        Ok(pull.state())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::Patch,
                &self.route(&format!("/pulls/{number}")),
                Some(&json!({ "state": "closed" })),
                &format!("close pull request #{number}"),
                "pull_requests: write",
            )
            .await?;
        Ok(())
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
        self.patch_issue(number, json!({ "body": body })).await
    }

    async fn close_issue(&self, number: u64) -> Result<(), ForgeError> {
        self.patch_issue(number, json!({ "state": "closed" })).await
    }
}
