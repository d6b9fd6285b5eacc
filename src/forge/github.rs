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
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::config::{GitHubConfig, path_from_url};
use super::query_value;
use super::{
    Created, Forge, ForgeError, MAX_RATE_LIMIT_RETRIES, MAX_RATE_LIMIT_WAIT, NewPullRequest,
    PullRequest, Reviewer, missing_labels, missing_reviewers, rate_limit_wait, read_token,
};
use crate::git::ProvidedToken;

const FORGE: &str = "GitHub";

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

#[derive(Deserialize)]
struct Pull {
    number: u64,
    html_url: String,
    #[serde(default)]
    title: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    node_id: String,
    head: Head,
    #[serde(default)]
    merged_at: Option<String>,
    #[serde(default)]
    labels: Vec<Label>,
    #[serde(default)]
    requested_reviewers: Vec<Account>,
    #[serde(default)]
    requested_teams: Vec<Team>,
}

#[derive(Deserialize)]
struct Head {
    #[serde(rename = "ref")]
    branch: String,
}

#[derive(Deserialize)]
struct Label {
    name: String,
}

#[derive(Deserialize)]
struct Account {
    login: String,
    #[serde(default)]
    id: u64,
}

#[derive(Deserialize)]
struct Team {
    slug: String,
    #[serde(default)]
    id: u64,
}

#[derive(Deserialize)]
struct Review {
    #[serde(default)]
    user: Option<Account>,
}

impl From<Pull> for PullRequest {
    fn from(p: Pull) -> PullRequest {
        PullRequest {
            number: p.number,
            url: p.html_url,
            title: p.title,
            body: p.body.unwrap_or_default(),
            branch: p.head.branch,
            merged: p.merged_at.is_some(),
            labels: p.labels.into_iter().map(|l| l.name).collect(),
            reviewers: p
                .requested_reviewers
                .into_iter()
                .map(|u| Reviewer {
                    name: u.login,
                    team: false,
                    id: u.id,
                })
                .chain(p.requested_teams.into_iter().map(|t| Reviewer {
                    name: t.slug,
                    team: true,
                    id: t.id,
                }))
                .collect(),
        }
    }
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
                let app_client = builder(&api)
                    .map_err(&config_error)?
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
            builder(base)
                .map_err(&config_error)?
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
        let mut attempt = 0;
        loop {
            let client = if route == "/graphql" {
                &self.graphql
            } else {
                &self.rest
            };
            let result: Result<T, octocrab::Error> = match method {
                Method::Get => client.get(route, None::<&()>).await,
                Method::Post => client.post(route, body).await,
                Method::Patch => client.patch(route, body).await,
            };
            let error = match result {
                Ok(value) => return Ok(value),
                Err(octocrab::Error::GitHub { source, .. }) => source,
                Err(other) => {
                    return Err((None, self.api_error(action, short(&other))));
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
                let wait = rate_limit_wait(&headers).unwrap_or(60);
                attempt += 1;
                if wait > MAX_RATE_LIMIT_WAIT || attempt > MAX_RATE_LIMIT_RETRIES {
                    return Err((
                        Some(status),
                        ForgeError::RateLimited {
                            repository: self.repository.clone(),
                            forge: FORGE,
                            action: action.to_owned(),
                            wait_seconds: wait,
                        },
                    ));
                }
                tracing::warn!(action, wait_seconds = wait, "GitHub rate limit; waiting");
                tokio::time::sleep(Duration::from_secs(wait)).await;
                continue;
            }
            return Err((
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
            ));
        }
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

    /// Labels, reviewers and auto-merge for a pull request just opened.
    async fn decorate(
        &self,
        created: &PullRequest,
        node_id: &str,
        pr: &NewPullRequest,
    ) -> Result<Vec<String>, ForgeError> {
        let number = created.number;
        let warnings = self
            .add_missing(created, &pr.labels, &pr.reviewers, true)
            .await?;
        if pr.auto_merge {
            let response: Value = self
                .call(
                    Method::Post,
                    "/graphql",
                    Some(&json!({
                        "query": "mutation($id: ID!) { enablePullRequestAutoMerge(input: {pullRequestId: $id}) { clientMutationId } }",
                        "variables": { "id": node_id },
                    })),
                    &format!("enable auto-merge on pull request #{number}"),
                    "pull_requests: write",
                )
                .await?;
            if let Some(errors) = response.get("errors").and_then(Value::as_array)
                && !errors.is_empty()
            {
                let messages: Vec<&str> = errors
                    .iter()
                    .filter_map(|e| e.get("message").and_then(Value::as_str))
                    .collect();
                return Err(self.api_error(
                    &format!("enable auto-merge on pull request #{number}"),
                    format!(
                        "{} (auto-merge must be allowed in the repository settings)",
                        messages.join("; ")
                    ),
                ));
            }
        }
        Ok(warnings)
    }

    /// Adds the labels `pr` lacks and requests the reviewers it lacks. `fresh`: just opened,
    /// so nobody has reviewed yet and GitHub need not be asked.
    async fn add_missing(
        &self,
        pr: &PullRequest,
        labels: &[String],
        reviewers: &[String],
        fresh: bool,
    ) -> Result<Vec<String>, ForgeError> {
        let number = pr.number;
        let labels = missing_labels(&pr.labels, labels);
        if !labels.is_empty() {
            // POST adds; labels a human put on the pull request stay.
            let _: Value = self
                .call(
                    Method::Post,
                    &self.route(&format!("/issues/{number}/labels")),
                    Some(&json!({ "labels": labels })),
                    &format!("label pull request #{number}"),
                    "pull_requests: write",
                )
                .await?;
        }
        let mut missing = missing_reviewers(&pr.reviewers, reviewers);
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        // GitHub drops a review request once it is answered: who reviewed is not missing, and
        // neither is a team once anyone reviewed (a member's review answers the team's request;
        // telling members apart would need `read:org`).
        let reviewed = if fresh {
            Vec::new()
        } else {
            self.reviewed_by(number).await?
        };
        let answered = !reviewed.is_empty();
        missing.retain(|name| {
            let is_team = name.contains('/');
            let has_reviewed = reviewed.iter().any(|r| r.eq_ignore_ascii_case(name));
            let served = has_reviewed || (is_team && answered);
            !served
        });
        self.request_reviewers(number, &missing, answered).await
    }

    async fn reviewed_by(&self, number: u64) -> Result<Vec<String>, ForgeError> {
        let mut logins = Vec::new();
        for page in 1.. {
            let reviews: Vec<Review> = self
                .call(
                    Method::Get,
                    &self.route(&format!("/pulls/{number}/reviews?per_page=100&page={page}")),
                    None,
                    &format!("list reviews of pull request #{number}"),
                    "pull_requests: read",
                )
                .await?;
            let full = reviews.len() == 100;
            logins.extend(reviews.into_iter().filter_map(|r| r.user.map(|u| u.login)));
            if !full {
                break;
            }
        }
        Ok(logins)
    }

    /// Requests `names` in one call; when GitHub refuses that (422: someone is no
    /// collaborator), one by one, a bare name first as a user and then as a team of the owner.
    /// Who is neither is reported, not fatal. `teams_answered`: a bare name that turns out to
    /// be a team is not requested again, someone reviewed already.
    async fn request_reviewers(
        &self,
        number: u64,
        names: &[String],
        teams_answered: bool,
    ) -> Result<Vec<String>, ForgeError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        if names.len() > 1 {
            let (teams, users): (Vec<&String>, Vec<&String>) =
                names.iter().partition(|r| r.contains('/'));
            let teams: Vec<&str> = teams
                .iter()
                .filter_map(|t| t.split_once('/').map(|(_, slug)| slug))
                .collect();
            if self.post_reviewers(number, &users, &teams).await?.is_ok() {
                return Ok(Vec::new());
            }
        }
        let mut warnings = Vec::new();
        for name in names {
            let refused = match name.split_once('/') {
                Some((_, slug)) => self.post_reviewers(number, &[], &[slug]).await?.err(),
                None => match self.post_reviewers(number, &[name], &[]).await? {
                    Ok(()) => None,
                    Err(_) if teams_answered => None,
                    Err(_) => self.post_reviewers(number, &[], &[name]).await?.err(),
                },
            };
            if let Some(message) = refused {
                warnings.push(format!(
                    "reviewer `{name}` was not requested: GitHub knows no collaborator or team \
                     of `{}` by that name with access to `{}` ({message})",
                    self.owner, self.path
                ));
            }
        }
        Ok(warnings)
    }

    /// One review request; `Ok(Err(message))` when GitHub refuses it with 422.
    async fn post_reviewers(
        &self,
        number: u64,
        users: &[&String],
        teams: &[&str],
    ) -> Result<Result<(), String>, ForgeError> {
        let result: Result<Value, _> = self
            .call_status(
                Method::Post,
                &self.route(&format!("/pulls/{number}/requested_reviewers")),
                Some(&json!({ "reviewers": users, "team_reviewers": teams })),
                &format!("request reviewers on pull request #{number}"),
                "pull_requests: write",
            )
            .await;
        match result {
            Ok(_) => Ok(Ok(())),
            Err((Some(422), ForgeError::Api { message, .. })) => Ok(Err(message)),
            Err((_, e)) => Err(e),
        }
    }
}

#[derive(Clone, Copy)]
enum Method {
    Get,
    Post,
    Patch,
}

fn builder(
    base: &str,
) -> Result<
    octocrab::OctocrabBuilder<
        octocrab::NoSvc,
        octocrab::DefaultOctocrabBuilderConfig,
        octocrab::NoAuth,
        octocrab::NotLayerReady,
    >,
    String,
> {
    Octocrab::builder()
        .base_uri(base)
        .map(|b| {
            b.set_connect_timeout(Some(Duration::from_secs(10)))
                .set_read_timeout(Some(Duration::from_secs(60)))
        })
        .map_err(|e| format!("`forge.github.apiUrl` `{base}` is not a URL: {}", short(&e)))
}

/// GitHub names the permission a token lacks in `x-accepted-github-permissions`
/// (`pull_requests=write; contents=read`); shown as `pull_requests: write`.
fn permission_hint(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let value = headers
        .get("x-accepted-github-permissions")?
        .to_str()
        .ok()?;
    let first = value.split([';', ',']).next()?.trim();
    let (name, level) = first.split_once('=')?;
    Some(format!("{}: {}", name.trim(), level.trim()))
}

fn describe(error: &octocrab::GitHubError) -> String {
    let mut message = format!("{} ({})", error.message, error.status_code);
    if let Some(errors) = &error.errors {
        let details: Vec<String> = errors
            .iter()
            .filter_map(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if !details.is_empty() {
            message.push_str(&format!(": {}", details.join("; ")));
        }
    }
    message
}

/// octocrab's `Display` may append a backtrace; the first line is the message.
fn short(error: &octocrab::Error) -> String {
    match error {
        octocrab::Error::GitHub { source, .. } => describe(source),
        other => other
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

fn already_exists(error: &ForgeError) -> bool {
    matches!(error, ForgeError::Api { message, .. } if message.contains("already exists"))
}

impl Forge for GitHub {
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_hint_reads_githubs_header() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(permission_hint(&headers), None);
        headers.insert(
            "x-accepted-github-permissions",
            "pull_requests=write; contents=read".parse().unwrap(),
        );
        assert_eq!(
            permission_hint(&headers).as_deref(),
            Some("pull_requests: write")
        );
    }
}
