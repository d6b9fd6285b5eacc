//! Azure Repos pull requests through the Azure DevOps REST API 7.1, with `reqwest`.
//!
//! The same behaviour as GitHub in Azure DevOps' terms: branches are `refs/heads/…`; labels
//! are the pull request's tags; reviewers are identities, looked up by name (a GUID is taken as
//! an id) and kept listed after they vote; a draft is `isDraft`; auto-merge is auto-complete set
//! by the identity that opened it; closing is abandoning. A comment is a thread of its own,
//! posted closed so that a "comments must be resolved" policy does not hold the merge. Listings
//! page with `$top`/`$skip`. A personal access token travels as basic authentication with an
//! empty user, a service principal's Entra token as a bearer token; neither into a message.

mod wire;

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::merged::MergeState;
use super::retry::{Attempt, rate_limit_wait, waiting_out_rate_limits};
use super::status::{CommitState, VERIFY_CONTEXT};
use super::{
    Created, Forge, ForgeError, ForgeKind, NewPullRequest, PullRequest, missing_labels,
    missing_reviewers, query_value, read_token,
};
use crate::config::forge::{AzureDevOpsConfig, ServicePrincipal};
use wire::{EntraToken, FoundIdentity, List, Pull, Thread, head_ref};

const FORGE: &str = ForgeKind::AzureDevOps.name();
const API_VERSION: &str = "api-version=7.1";
/// Items asked per page.
const TOP: usize = 100;
/// Pages read at most per listing.
const MAX_PAGES: usize = 100;
/// Azure DevOps' own resource id, the scope an Entra token is asked for.
const AZURE_DEVOPS_SCOPE: &str = "499b84ac-1321-427f-aa17-267ca6975798/.default";

enum Auth {
    /// A personal access token.
    Pat(String),
    /// A service principal's Entra access token.
    Bearer(String),
}

/// A connection to one Azure Repos repository's pull requests.
pub struct AzureDevOps {
    repository: String,
    /// `https://dev.azure.com/{organization}/{project}`
    project: String,
    /// `https://vssps.dev.azure.com/{organization}`
    identities: String,
    /// The repository's name or id.
    repo: String,
    auth: Auth,
    http: reqwest::Client,
}

impl std::fmt::Debug for AzureDevOps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureDevOps")
            .field("project", &self.project)
            .field("repo", &self.repo)
            .finish_non_exhaustive()
    }
}

impl AzureDevOps {
    /// Connects to `config`'s repository; a service principal asks Entra for a token here.
    pub async fn connect(
        repository: &str,
        url: &str,
        config: &AzureDevOpsConfig,
    ) -> Result<AzureDevOps, ForgeError> {
        let config_error = |message: String| ForgeError::Config {
            repository: repository.to_owned(),
            message,
        };
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| config_error(format!("cannot set up HTTP: {e}")))?;
        let repo = match &config.repository {
            Some(repo) => repo.clone(),
            None => url
                .trim_end_matches('/')
                .rsplit('/')
                .next()
                .map(|s| s.trim_end_matches(".git").to_owned())
                .filter(|s| !s.is_empty() && !url.starts_with("file:"))
                .ok_or_else(|| {
                    config_error(
                        "cannot tell the Azure Repos repository from the URL; set \
                         `forge.azureDevOps.repository`"
                            .into(),
                    )
                })?,
        };
        let auth = match (&config.token_env, &config.service_principal) {
            (Some(env), None) => Auth::Pat(read_token(repository, FORGE, env)?),
            (None, Some(principal)) => {
                Auth::Bearer(entra_token(repository, &http, principal).await?)
            }
            _ => {
                return Err(config_error(
                    crate::config::forge::ConfigError::NotOneAzureAuth.to_string(),
                ));
            }
        };
        let segment = |s: &str| query_value(s).replace('+', "%20");
        Ok(AzureDevOps {
            repository: repository.to_owned(),
            project: format!(
                "{}/{}/{}",
                config.api_url.trim_end_matches('/'),
                segment(&config.organization),
                segment(&config.project)
            ),
            identities: format!(
                "{}/{}",
                config.identities_url.trim_end_matches('/'),
                segment(&config.organization)
            ),
            repo: segment(&repo),
            auth,
            http,
        })
    }

    /// `rest` under the repository's Git API, with the API version.
    fn route(&self, rest: &str) -> String {
        let joiner = if rest.contains('?') { '&' } else { '?' };
        format!(
            "{}/_apis/git/repositories/{}{rest}{joiner}{API_VERSION}",
            self.project, self.repo
        )
    }

    fn web_url(&self, number: u64) -> String {
        format!("{}/_git/{}/pullrequest/{number}", self.project, self.repo)
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
        let attempt = || async {
            let request = self.http.request(method.clone(), url);
            let mut request = match &self.auth {
                Auth::Pat(token) => request.basic_auth("", Some(token)),
                Auth::Bearer(token) => request.bearer_auth(token),
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
            let text = response.text().await.unwrap_or_default();
            Attempt::Done(self.answered(&method, status, text, action))
        };
        let give_up = |wait_seconds| ForgeError::RateLimited {
            repository: self.repository.clone(),
            forge: FORGE,
            action: action.to_owned(),
            wait_seconds,
        };
        waiting_out_rate_limits(FORGE, action, attempt, give_up).await
    }

    /// The text of a success, else the error in Azure DevOps' words.
    fn answered(
        &self,
        method: &Method,
        status: StatusCode,
        text: String,
        action: &str,
    ) -> Result<String, ForgeError> {
        // A token Azure DevOps does not take is answered 203 with a sign-in page.
        if status == StatusCode::NON_AUTHORITATIVE_INFORMATION || status == StatusCode::UNAUTHORIZED
        {
            return Err(ForgeError::Auth {
                repository: self.repository.clone(),
                forge: FORGE,
                message: format!("the token was rejected ({status})"),
            });
        }
        if status.is_success() {
            return Ok(text);
        }
        let message = wire::error_message(&text);
        Err(match status {
            StatusCode::FORBIDDEN => ForgeError::Permission {
                repository: self.repository.clone(),
                forge: FORGE,
                action: action.to_owned(),
                permission: wire::named_permission(&message).unwrap_or_else(|| {
                    if *method == Method::GET {
                        "Code (read)"
                    } else {
                        "Code (read & write)"
                    }
                    .to_owned()
                }),
                message,
            },
            _ => self.api_error(action, format!("{message} ({status})")),
        })
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

    /// The pull requests the search criteria `criteria` find, page by page.
    async fn pulls(&self, criteria: &str, action: &str) -> Result<Vec<Pull>, ForgeError> {
        let mut all = Vec::new();
        for page in 0..MAX_PAGES {
            let url = self.route(&format!(
                "/pullrequests?{criteria}&$top={TOP}&$skip={}",
                page * TOP
            ));
            let listed: List<Pull> = self.call(Method::GET, &url, None, action).await?;
            let full = listed.value.len() >= TOP;
            all.extend(listed.value);
            if !full {
                break;
            }
        }
        Ok(all)
    }

    /// The pull request as the sync reads it; its web page from the repository's `webUrl`
    /// where the answer has one.
    fn read(&self, pull: Pull) -> PullRequest {
        let number = pull.pull_request_id;
        let url = match pull.repository.as_ref().and_then(|r| r.web_url.as_deref()) {
            Some(web) => format!("{}/pullrequest/{number}", web.trim_end_matches('/')),
            None => self.web_url(number),
        };
        pull.into_pull_request(url)
    }

    /// The identity ids of `names` (a GUID is one already), and a warning for each name Azure
    /// DevOps finds no identity for.
    async fn identity_ids(
        &self,
        names: &[String],
    ) -> Result<(Vec<String>, Vec<String>), ForgeError> {
        let mut ids = Vec::new();
        let mut warnings = Vec::new();
        for name in names {
            if wire::is_identity_id(name) {
                ids.push(name.clone());
                continue;
            }
            let url = format!(
                "{}/_apis/identities?searchFilter=General&filterValue={}&queryMembership=None&{API_VERSION}",
                self.identities,
                query_value(name)
            );
            let found: List<FoundIdentity> = self
                .call(
                    Method::GET,
                    &url,
                    None,
                    &format!("look up reviewer `{name}`"),
                )
                .await?;
            match found.value.into_iter().next() {
                Some(identity) => ids.push(identity.id),
                None => warnings.push(format!(
                    "reviewer `{name}` was not requested: {FORGE} knows no identity by that name"
                )),
            }
        }
        Ok((ids, warnings))
    }

    async fn add_reviewers(&self, number: u64, ids: &[String]) -> Result<(), ForgeError> {
        for id in ids {
            self.send(
                Method::PUT,
                &self.route(&format!("/pullrequests/{number}/reviewers/{id}")),
                Some(&json!({ "vote": 0 })),
                &format!("add a reviewer to pull request !{number}"),
            )
            .await?;
        }
        Ok(())
    }

    async fn add_labels(&self, number: u64, labels: &[String]) -> Result<(), ForgeError> {
        for label in labels {
            self.send(
                Method::POST,
                &self.route(&format!("/pullrequests/{number}/labels")),
                Some(&json!({ "name": label })),
                &format!("add the label `{label}` to pull request !{number}"),
            )
            .await?;
        }
        Ok(())
    }

    async fn patch(&self, number: u64, fields: Value, action: &str) -> Result<(), ForgeError> {
        self.send(
            Method::PATCH,
            &self.route(&format!("/pullrequests/{number}")),
            Some(&fields),
            action,
        )
        .await?;
        Ok(())
    }
}

/// A service principal's access token for Azure DevOps: Entra's client credentials flow.
async fn entra_token(
    repository: &str,
    http: &reqwest::Client,
    principal: &ServicePrincipal,
) -> Result<String, ForgeError> {
    let secret = read_token(repository, FORGE, &principal.client_secret_env)?;
    let auth_error = |message: String| ForgeError::Auth {
        repository: repository.to_owned(),
        forge: FORGE,
        message,
    };
    let url = format!(
        "{}/{}/oauth2/v2.0/token",
        principal.authority_url.trim_end_matches('/'),
        principal.tenant_id
    );
    let form = format!(
        "grant_type=client_credentials&client_id={}&client_secret={}&scope={}",
        query_value(&principal.client_id),
        query_value(&secret),
        query_value(AZURE_DEVOPS_SCOPE)
    );
    let response = http
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .map_err(|e| auth_error(format!("cannot reach Microsoft Entra: {e}")))?;
    let status = response.status();
    let text = response.text().await.unwrap_or_default();
    if !status.is_success() {
        // Entra's `error_description` says why; it holds no secret.
        let why = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| {
                v.get("error_description")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| status.to_string());
        return Err(auth_error(format!(
            "Microsoft Entra refused the service principal `{}`: {why}",
            principal.client_id
        )));
    }
    serde_json::from_str::<EntraToken>(&text)
        .map(|t| t.access_token)
        .map_err(|e| auth_error(format!("unexpected answer from Microsoft Entra: {e}")))
}

impl Forge for AzureDevOps {
    fn kind(&self) -> ForgeKind {
        ForgeKind::AzureDevOps
    }

    async fn open_pull_requests(&self, base: &str) -> Result<Vec<PullRequest>, ForgeError> {
        let criteria = format!(
            "searchCriteria.status=active&searchCriteria.targetRefName={}",
            query_value(&head_ref(base))
        );
        let pulls = self.pulls(&criteria, "list open pull requests").await?;
        Ok(pulls.into_iter().map(|p| self.read(p)).collect())
    }

    async fn closed_pull_requests(
        &self,
        branch: &str,
        base: &str,
    ) -> Result<Vec<PullRequest>, ForgeError> {
        let criteria = format!(
            "searchCriteria.status=all&searchCriteria.sourceRefName={}&searchCriteria.targetRefName={}",
            query_value(&head_ref(branch)),
            query_value(&head_ref(base))
        );
        let pulls = self.pulls(&criteria, "list closed pull requests").await?;
        Ok(pulls
            .into_iter()
            .filter(|p| p.status != "active")
            .map(|p| self.read(p))
            .collect())
    }

    async fn create(&self, pr: &NewPullRequest) -> Result<Created, ForgeError> {
        let (ids, warnings) = self.identity_ids(&pr.reviewers).await?;
        let action = format!("open a pull request from `{}`", pr.branch);
        let created: Result<Pull, ForgeError> = self
            .call(
                Method::POST,
                &self.route("/pullrequests"),
                Some(&json!({
                    "sourceRefName": head_ref(&pr.branch),
                    "targetRefName": head_ref(&pr.base),
                    "title": pr.title,
                    "description": pr.body,
                    "isDraft": pr.draft,
                    "labels": pr.labels.iter().map(|l| json!({ "name": l })).collect::<Vec<_>>(),
                    "reviewers": ids.iter().map(|id| json!({ "id": id })).collect::<Vec<_>>(),
                })),
                &action,
            )
            .await;
        let created = match created {
            Ok(created) => created,
            // TF401179: an active pull request for the source and target branch already exists.
            Err(ForgeError::Api { message, .. }) if message.contains("TF401179") => {
                let criteria = format!(
                    "searchCriteria.status=active&searchCriteria.sourceRefName={}&searchCriteria.targetRefName={}",
                    query_value(&head_ref(&pr.branch)),
                    query_value(&head_ref(&pr.base))
                );
                let existing = self
                    .pulls(&criteria, "find the existing pull request")
                    .await?;
                let Some(existing) = existing.into_iter().next() else {
                    return Err(self.api_error(&action, message));
                };
                let existing = self.read(existing);
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
        let number = created.pull_request_id;
        if pr.auto_merge {
            // Auto-complete is set in the name of whoever opened it: this token's identity.
            let by = created
                .created_by
                .as_ref()
                .map(|c| c.id.clone())
                .unwrap_or_default();
            self.patch(
                number,
                json!({ "autoCompleteSetBy": { "id": by } }),
                &format!("set pull request !{number} to complete automatically"),
            )
            .await?;
        }
        Ok(Created {
            pull_request: self.read(created),
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
        self.add_labels(pr.number, &missing_labels(&pr.labels, labels))
            .await?;
        // Azure DevOps keeps a reviewer listed after they voted: the listing is all it takes.
        let (ids, warnings) = self
            .identity_ids(&missing_reviewers(&pr.reviewers, reviewers))
            .await?;
        self.add_reviewers(pr.number, &ids).await?;
        Ok(warnings)
    }

    async fn update(&self, number: u64, title: &str, body: &str) -> Result<(), ForgeError> {
        self.patch(
            number,
            json!({ "title": title, "description": body }),
            &format!("update pull request !{number}"),
        )
        .await
    }

    async fn comment(&self, number: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::POST,
            &self.route(&format!("/pullrequests/{number}/threads")),
            Some(&json!({
                "comments": [{ "parentCommentId": 0, "content": body, "commentType": "text" }],
                // Closed: a thread tagpilot opens never holds the merge under a policy that
                // wants comments resolved.
                "status": "closed",
            })),
            &format!("comment on pull request !{number}"),
        )
        .await?;
        Ok(())
    }

    async fn close(&self, number: u64) -> Result<(), ForgeError> {
        self.patch(
            number,
            json!({ "status": "abandoned" }),
            &format!("abandon pull request !{number}"),
        )
        .await
    }

    async fn comments(&self, number: u64) -> Result<Vec<(u64, String)>, ForgeError> {
        // Each of tagpilot's comments is the first of its own thread: the thread is its id.
        let threads: List<Thread> = self
            .call(
                Method::GET,
                &self.route(&format!("/pullrequests/{number}/threads")),
                None,
                &format!("list the comments of pull request !{number}"),
            )
            .await?;
        Ok(threads
            .value
            .into_iter()
            .filter_map(|t| {
                let first = t.comments.into_iter().next()?.content?;
                Some((t.id, first))
            })
            .take(100)
            .collect())
    }

    async fn edit_comment(&self, number: u64, id: u64, body: &str) -> Result<(), ForgeError> {
        self.send(
            Method::PATCH,
            &self.route(&format!("/pullrequests/{number}/threads/{id}/comments/1")),
            Some(&json!({ "content": body })),
            &format!("update a comment on pull request !{number}"),
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
        let (genre, name) = VERIFY_CONTEXT
            .split_once('/')
            .unwrap_or(("tagpilot", "verify"));
        self.send(
            Method::POST,
            &self.route(&format!("/commits/{commit}/statuses")),
            Some(&json!({
                "state": state.azure(),
                "description": description,
                "context": { "genre": genre, "name": name },
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
                &self.route(&format!("/pullrequests/{number}")),
                None,
                &format!("read pull request !{number}"),
            )
            .await?;
        Ok(pull.merge_state())
    }
}
