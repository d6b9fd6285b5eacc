//! The Azure DevOps REST API 7.1 double: the repository `manifests` of the project `shop` in
//! the organization `acme`, the branch `tagpilot/api`, each call as Microsoft's REST reference
//! shapes it: a personal access token as basic authentication with an empty user, pull
//! requests found by `searchCriteria` and listed as `{"value": [...], "count": n}`, `refs/heads/`
//! branch names, reviewers looked up by name among the organization's identities, labels and
//! reviewers added one call each, comments as threads, abandoning instead of closing, and
//! `{"message": "TF…", "typeKey": …}` error bodies.
//!
//! Azure DevOps Services is a service only, and Azure DevOps Server installs on Windows.

use serde_json::{Value, json};
use wiremock::matchers::{
    body_partial_json, header, method, path, query_param, query_param_is_missing,
};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use super::forge_double::ForgeDouble;
use super::git::{HTTP_PASSWORD, HTTP_PASSWORD_ENV};
use super::github::{BRANCH, created, ok_json};

pub const REPO: &str = "/acme/shop/_apis/git/repositories/manifests";
pub const PULLS: &str = "/acme/shop/_apis/git/repositories/manifests/pullrequests";
pub const IDENTITIES: &str = "/acme/_apis/identities";
const WEB: &str = "https://dev.azure.example/acme/shop/_git/manifests";

/// The token in `HTTP_PASSWORD_ENV`, as Azure DevOps receives a personal access token.
pub fn basic() -> String {
    use base64::Engine as _;
    let pair = format!(":{HTTP_PASSWORD}");
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(pair)
    )
}

/// The double's identity id for `name`.
pub fn identity(name: &str) -> String {
    let n = name.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    format!("{n:08x}-0000-4000-8000-{:012x}", u64::from(n))
}

/// An active pull request from `BRANCH` into `main`, as Azure DevOps returns it.
pub fn pull(id: u64, title: &str, description: &str) -> Value {
    json!({
        "pullRequestId": id,
        "codeReviewId": id,
        "status": "active",
        "title": title,
        "description": description,
        "sourceRefName": format!("refs/heads/{BRANCH}"),
        "targetRefName": "refs/heads/main",
        "isDraft": false,
        "mergeStatus": "succeeded",
        "createdBy": {"id": identity("tagpilot"), "uniqueName": "tagpilot", "displayName": "tagpilot"},
        "lastMergeSourceCommit": {"commitId": "0".repeat(40)},
        "lastMergeTargetCommit": {"commitId": "1".repeat(40)},
        "labels": [],
        "reviewers": [],
        "repository": {"id": "5febef5a-833d-4e14-b9c0-14cb638f91e6", "name": "manifests", "webUrl": WEB},
        "url": format!("https://dev.azure.example/acme/shop/_apis/git/repositories/manifests/pullRequests/{id}"),
    })
}

/// A listing as Azure DevOps answers it.
pub fn listing(values: Value) -> Value {
    let count = values.as_array().map_or(0, Vec::len);
    json!({"value": values, "count": count})
}

fn error(status: u16, message: &str, type_key: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "$id": "1", "innerException": null, "message": message,
        "typeName": format!("Microsoft.TeamFoundation.{type_key}"), "typeKey": type_key,
        "errorCode": 0, "eventId": 3000,
    }))
}

/// Exactly one lookup of the identity `name`.
pub async fn expect_identity(server: &MockServer, name: &str) {
    Mock::given(method("GET"))
        .and(path(IDENTITIES))
        .and(query_param("filterValue", name))
        .and(query_param("searchFilter", "General"))
        .and(header("authorization", basic().as_str()))
        .respond_with(ok_json(listing(
            json!([{"id": identity(name), "providerDisplayName": name, "isActive": true}]),
        )))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
}

/// The listing of pull requests from `branch` into `main` in `status`.
pub fn from_branch(status: &str, branch: &str, response: Value) -> Mock {
    AzureDevOpsApi::authed("GET", PULLS)
        .and(query_param("searchCriteria.status", status))
        .and(query_param(
            "searchCriteria.sourceRefName",
            format!("refs/heads/{branch}"),
        ))
        .and(query_param(
            "searchCriteria.targetRefName",
            "refs/heads/main",
        ))
        .respond_with(ok_json(listing(response)))
}

pub struct AzureDevOpsApi;

impl ForgeDouble for AzureDevOpsApi {
    const NAME: &'static str = "Azure DevOps";
    const NOUN: &'static str = "pull request";
    const BODY: &'static str = "description";
    const EDIT: &'static str = "PATCH";
    const READ_PERMISSION: &'static str = "`Git GenericRead`";
    const WRITE_PERMISSION: &'static str = "`Code (read & write)`";
    const REVIEWERS: &'static [&'static str] = &["alice"];
    const COMMENT_TEXT: &'static str = "/comments/0/content";
    const COMMENT_EDIT_TEXT: &'static str = "/content";

    fn forge_yaml(uri: &str) -> String {
        format!(
            "azureDevOps: {{apiUrl: '{uri}', identitiesUrl: '{uri}', organization: acme, project: shop, repository: manifests, tokenEnv: {HTTP_PASSWORD_ENV}}}"
        )
    }

    fn proposals() -> String {
        PULLS.into()
    }

    fn proposal_path(number: u64) -> String {
        format!("{PULLS}/{number}")
    }

    fn comments_path(number: u64) -> String {
        format!("{PULLS}/{number}/threads")
    }

    const COMMENT_EDIT: &'static str = "PATCH";

    fn comment_path(number: u64, id: u64) -> String {
        format!("{PULLS}/{number}/threads/{id}/comments/1")
    }

    fn comment_listing(comments: &[(u64, &str)]) -> Value {
        let threads: Vec<Value> = comments
            .iter()
            .map(|(id, content)| {
                json!({"id": id, "status": "active", "comments": [
                    {"id": 1, "parentCommentId": 0, "content": content, "commentType": "text"}
                ]})
            })
            .collect();
        listing(json!(threads))
    }

    fn url(number: u64) -> String {
        format!("{WEB}/pullrequest/{number}")
    }

    fn reference(number: u64) -> String {
        format!("!{number}")
    }

    fn proposal(number: u64, title: &str, body: &str) -> Value {
        pull(number, title, body)
    }

    fn closed(number: u64, title: &str, body: &str) -> Value {
        let mut abandoned = pull(number, title, body);
        abandoned["status"] = "abandoned".into();
        abandoned
    }

    fn labelled(mut proposal: Value, labels: &[&str], reviewers: &[&str]) -> Value {
        proposal["labels"] = labels
            .iter()
            .map(|l| json!({"id": identity(l), "name": l, "active": true}))
            .collect::<Vec<_>>()
            .into();
        proposal["reviewers"] = reviewers
            .iter()
            .map(|r| json!({"id": identity(r), "uniqueName": r, "displayName": r, "vote": 0, "isContainer": false}))
            .collect::<Vec<_>>()
            .into();
        proposal
    }

    fn authed(http_method: &str, at: &str) -> MockBuilder {
        Mock::given(method(http_method))
            .and(path(at))
            .and(query_param("api-version", "7.1"))
            .and(header("authorization", basic().as_str()))
    }

    fn commit_status(commit: &str, state: &str) -> MockBuilder {
        let state = match state {
            "success" => "succeeded",
            "failure" => "failed",
            other => other,
        };
        Self::authed("POST", &format!("{REPO}/commits/{commit}/statuses")).and(body_partial_json(
            json!({
                "state": state,
                "context": {"genre": "tagpilot", "name": "verify"},
            }),
        ))
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut completed = pull(number, "Update api", "");
        completed["status"] = json!("completed");
        completed["lastMergeCommit"] = json!({"commitId": commit});
        completed["lastMergeSourceCommit"] = json!({"commitId": head});
        completed
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", PULLS)
            .and(query_param("searchCriteria.status", "active"))
            .and(query_param(
                "searchCriteria.targetRefName",
                "refs/heads/main",
            ))
            .and(query_param_is_missing("searchCriteria.sourceRefName"))
            .and(query_param("$top", "100"))
    }

    fn list_open(response: Value) -> Mock {
        Self::list_open_request().respond_with(ok_json(listing(response)))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", PULLS).and(body_partial_json(json!({
            "sourceRefName": format!("refs/heads/{branch}"),
            "targetRefName": "refs/heads/main",
        })))
    }

    fn list_closed_from(branch: &str, response: Value) -> Mock {
        from_branch("all", branch, response)
    }

    fn list_open_from_branch(response: Value) -> Mock {
        from_branch("active", BRANCH, response)
    }

    fn already_exists() -> ResponseTemplate {
        error(
            409,
            "TF401179: An active pull request for the source and target branch already exists.",
            "GitPullRequestExistsException",
        )
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // Azure DevOps says how long to back off in `Retry-After`.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        ResponseTemplate::new(429)
            .insert_header(
                "retry-after",
                reset.saturating_sub(now).max(1).to_string().as_str(),
            )
            .insert_header("x-ratelimit-resource", "ATCPU")
    }

    fn forbidden_listing() -> ResponseTemplate {
        error(
            403,
            "TF401027: You need the Git 'GenericRead' permission to perform this action. Details: identity 'tagpilot', scope 'repository'.",
            "GitNeedsPermissionException",
        )
    }

    fn forbidden() -> ResponseTemplate {
        error(403, "Access denied.", "UnauthorizedRequestException")
    }

    fn refused(message: &str) -> ResponseTemplate {
        error(400, message, "InvalidArgumentValueException")
    }

    fn edited(number: u64) -> ResponseTemplate {
        ok_json(pull(number, "", ""))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(pull(number, "", ""))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["sourceRefName"] = format!("refs/heads/{branch}").into();
        proposal
    }

    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        labels: &[&str],
        reviewers: &[&str],
        response: ResponseTemplate,
    ) {
        // Reviewers are looked up by name and sent as identity ids, labels by name, in the
        // opening.
        for reviewer in reviewers {
            expect_identity(server, reviewer).await;
        }
        let labels: Vec<Value> = labels.iter().map(|l| json!({"name": l})).collect();
        let reviewers: Vec<Value> = reviewers
            .iter()
            .map(|r| json!({"id": identity(r)}))
            .collect();
        Self::create_request()
            .and(body_partial_json(json!({
                "title": title,
                "labels": labels,
                "reviewers": reviewers,
            })))
            .respond_with(response)
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_create(
        server: &MockServer,
        number: u64,
        title: &str,
        labels: &[&str],
        reviewers: &[&str],
    ) {
        let response = created(pull(number, title, ""));
        Self::expect_create_answered(server, title, labels, reviewers, response).await;
    }

    async fn expect_additions(
        server: &MockServer,
        number: u64,
        labels: &[&str],
        _present: &[&str],
        added: &[&str],
    ) {
        // One call per label and per reviewer; nothing present is sent again.
        for label in labels {
            Self::authed("POST", &format!("{PULLS}/{number}/labels"))
                .and(body_partial_json(json!({"name": label})))
                .respond_with(created(
                    json!({"id": identity(label), "name": label, "active": true}),
                ))
                .expect(1)
                .mount(server)
                .await;
        }
        for reviewer in added {
            expect_identity(server, reviewer).await;
            Self::authed(
                "PUT",
                &format!("{PULLS}/{number}/reviewers/{}", identity(reviewer)),
            )
            .and(body_partial_json(json!({"vote": 0})))
            .respond_with(ok_json(json!({"id": identity(reviewer), "vote": 0})))
            .expect(1)
            .mount(server)
            .await;
        }
    }

    async fn expect_close(server: &MockServer, number: u64) {
        Self::expect_edit_with(server, number, json!({"status": "abandoned"})).await;
    }
}
