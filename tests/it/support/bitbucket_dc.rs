//! The Bitbucket Data Center REST API 1.0 double: the repository `manifests` of the project
//! `ACME` under `/rest/api/1.0`, the branch `tagpilot/api`, each call as Atlassian's REST
//! reference shapes it: an HTTP access token as a bearer token, pull requests found by
//! `direction` and `at` and paged with `start`/`isLastPage`/`nextPageStart`, every change
//! naming the version it changes, comments read from the activity, declining instead of
//! closing, build statuses on commits, and `{"errors": [...]}` error bodies.
//!
//! Bitbucket Data Center is licensed software that no package registry ships.

use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use super::forge_double::ForgeDouble;
use super::git::HTTP_PASSWORD_ENV;
use super::github::{AUTH, BRANCH, created, ok_json};

pub const REPO: &str = "/rest/api/1.0/projects/ACME/repos/manifests";
pub const PULLS: &str = "/rest/api/1.0/projects/ACME/repos/manifests/pull-requests";
/// The version the double's pull requests are at.
const VERSION: u64 = 3;

/// An open pull request from `BRANCH` into `main`, as Bitbucket returns it.
pub fn pull(id: u64, title: &str, description: &str) -> Value {
    json!({
        "id": id,
        "version": VERSION,
        "title": title,
        "description": description,
        "state": "OPEN",
        "open": true,
        "closed": false,
        "fromRef": {"id": format!("refs/heads/{BRANCH}"), "displayId": BRANCH, "latestCommit": "0".repeat(40)},
        "toRef": {"id": "refs/heads/main", "displayId": "main", "latestCommit": "1".repeat(40)},
        "locked": false,
        "reviewers": [],
        "links": {"self": [{"href": format!("https://bitbucket.example/projects/ACME/repos/manifests/pull-requests/{id}")}]},
    })
}

/// A listing, its last page.
pub fn page(values: Value) -> Value {
    let size = values.as_array().map_or(0, Vec::len);
    json!({"size": size, "limit": 100, "isLastPage": true, "start": 0, "values": values})
}

fn errors(status: u16, message: &str, exception: &str) -> ResponseTemplate {
    ResponseTemplate::new(status).set_body_json(json!({
        "errors": [{"context": null, "message": message, "exceptionName": exception}],
    }))
}

/// The open pull requests from `branch`, answered with `response`.
pub fn open_from(branch: &str, response: Value) -> Mock {
    BitbucketDataCenterApi::authed("GET", PULLS)
        .and(query_param("state", "OPEN"))
        .and(query_param("direction", "OUTGOING"))
        .and(query_param("at", format!("refs/heads/{branch}")))
        .respond_with(ok_json(page(response)))
}

/// Exactly one reading of pull request `number`, whose reviewers are `reviewers`.
async fn expect_read(server: &MockServer, number: u64, reviewers: &[&str]) {
    let read = BitbucketDataCenterApi::labelled(pull(number, "Update api", ""), &[], reviewers);
    BitbucketDataCenterApi::authed("GET", &format!("{PULLS}/{number}"))
        .respond_with(ok_json(read))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
}

pub struct BitbucketDataCenterApi;

impl ForgeDouble for BitbucketDataCenterApi {
    const NAME: &'static str = "Bitbucket Data Center";
    const NOUN: &'static str = "pull request";
    const BODY: &'static str = "description";
    const EDIT: &'static str = "PUT";
    const READ_PERMISSION: &'static str = "`Repository read`";
    const WRITE_PERMISSION: &'static str = "`Repository write`";
    const REVIEWERS: &'static [&'static str] = &["alice"];
    const LABELS: bool = false;
    const COMMENT_TEXT: &'static str = "/text";

    fn forge_yaml(uri: &str) -> String {
        format!(
            "bitbucketDataCenter: {{apiUrl: '{uri}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: ACME/manifests}}"
        )
    }

    fn proposals() -> String {
        PULLS.into()
    }

    fn proposal_path(number: u64) -> String {
        format!("{PULLS}/{number}")
    }

    fn comments_path(number: u64) -> String {
        format!("{PULLS}/{number}/comments")
    }

    const COMMENT_EDIT: &'static str = "PUT";

    fn comment_path(number: u64, id: u64) -> String {
        format!("{PULLS}/{number}/comments/{id}")
    }

    fn url(number: u64) -> String {
        format!("https://bitbucket.example/projects/ACME/repos/manifests/pull-requests/{number}")
    }

    fn reference(number: u64) -> String {
        format!("#{number}")
    }

    fn proposal(number: u64, title: &str, body: &str) -> Value {
        pull(number, title, body)
    }

    fn closed(number: u64, title: &str, body: &str) -> Value {
        let mut declined = pull(number, title, body);
        declined["state"] = "DECLINED".into();
        declined["open"] = false.into();
        declined["closed"] = true.into();
        declined
    }

    fn labelled(mut proposal: Value, _labels: &[&str], reviewers: &[&str]) -> Value {
        // Bitbucket has no labels: only the reviewers show.
        proposal["reviewers"] = reviewers
            .iter()
            .map(|r| json!({"user": {"name": r, "slug": r, "displayName": r}, "role": "REVIEWER", "approved": false, "status": "UNAPPROVED"}))
            .collect::<Vec<_>>()
            .into();
        proposal
    }

    fn authed(http_method: &str, at: &str) -> MockBuilder {
        Mock::given(method(http_method))
            .and(path(at))
            .and(header("authorization", AUTH))
    }

    fn commit_status(commit: &str, state: &str) -> MockBuilder {
        let state = match state {
            "pending" => "INPROGRESS",
            "success" => "SUCCESSFUL",
            _ => "FAILED",
        };
        Self::authed("POST", &format!("{REPO}/commits/{commit}/builds")).and(body_partial_json(
            json!({"key": "tagpilot-verify", "name": "tagpilot/verify", "state": state}),
        ))
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut merged = pull(number, "Update api", "");
        merged["state"] = json!("MERGED");
        merged["properties"] = json!({"mergeCommit": {"displayId": &commit[..11], "id": commit}});
        merged["fromRef"]["latestCommit"] = json!(head);
        merged
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", PULLS)
            .and(query_param("state", "OPEN"))
            .and(query_param("direction", "INCOMING"))
            .and(query_param("at", "refs/heads/main"))
    }

    fn list_open(response: Value) -> Mock {
        Self::list_open_request().respond_with(ok_json(page(response)))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", PULLS).and(body_partial_json(json!({
            "fromRef": {"id": format!("refs/heads/{branch}")},
            "toRef": {"id": "refs/heads/main"},
        })))
    }

    fn list_closed_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", PULLS)
            .and(query_param("state", "ALL"))
            .and(query_param("direction", "OUTGOING"))
            .and(query_param("at", format!("refs/heads/{branch}")))
            .respond_with(ok_json(page(response)))
    }

    fn list_open_from_branch(response: Value) -> Mock {
        open_from(BRANCH, response)
    }

    fn already_exists() -> ResponseTemplate {
        let mut existing = pull(5, "Bump api", "opened by hand");
        existing["version"] = 0.into();
        ResponseTemplate::new(409).set_body_json(json!({"errors": [{
            "context": null,
            "message": "Only one pull request may be open for a given source and target branch",
            "exceptionName": "com.atlassian.bitbucket.pull.DuplicatePullRequestException",
            "existingPullRequest": existing,
        }]}))
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // Bitbucket Data Center's rate limiting says how long to wait in `Retry-After`.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        errors(
            429,
            "You have been rate limited",
            "com.atlassian.bitbucket.ratelimit.RateLimitedException",
        )
        .insert_header(
            "retry-after",
            reset.saturating_sub(now).max(1).to_string().as_str(),
        )
    }

    fn forbidden_listing() -> ResponseTemplate {
        errors(
            403,
            "You are not permitted to access this resource",
            "com.atlassian.bitbucket.AuthorisationException",
        )
    }

    fn forbidden() -> ResponseTemplate {
        Self::forbidden_listing()
    }

    fn refused(message: &str) -> ResponseTemplate {
        errors(
            400,
            message,
            "com.atlassian.bitbucket.pull.InvalidPullRequestException",
        )
    }

    fn edited(number: u64) -> ResponseTemplate {
        ok_json(pull(number, "", ""))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(pull(number, "", ""))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["fromRef"]["id"] = format!("refs/heads/{branch}").into();
        proposal["fromRef"]["displayId"] = branch.into();
        proposal
    }

    /// An update reads the pull request first, for its version and reviewers.
    async fn expect_edit_with(server: &MockServer, number: u64, fields: Value) {
        expect_read(server, number, &[]).await;
        Self::authed("PUT", &Self::proposal_path(number))
            .and(body_partial_json(fields))
            .and(body_partial_json(json!({"version": VERSION})))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_edit(server: &MockServer, number: u64) {
        Self::expect_edit_with(server, number, json!({})).await;
    }

    /// The comments are read from the activity, newest first.
    async fn expect_comments(server: &MockServer, number: u64, comments: &[(u64, &str)]) {
        let activities: Vec<Value> = comments
            .iter()
            .rev()
            .map(|(id, text)| json!({"id": 100 + id, "action": "COMMENTED", "commentAction": "ADDED", "comment": {"id": id, "version": 1, "text": text}}))
            .collect();
        Self::authed("GET", &format!("{PULLS}/{number}/activities"))
            .respond_with(ok_json(page(json!(activities))))
            .expect(1)
            .mount(server)
            .await;
    }

    /// A comment's edit reads it first, for its version.
    async fn expect_comment_edit(server: &MockServer, number: u64, id: u64) {
        Self::authed("GET", &Self::comment_path(number, id))
            .respond_with(ok_json(json!({"id": id, "version": 1, "text": "old"})))
            .expect(1)
            .mount(server)
            .await;
        Self::authed("PUT", &Self::comment_path(number, id))
            .and(body_partial_json(json!({"version": 1})))
            .respond_with(ok_json(json!({"id": id, "version": 2})))
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        _labels: &[&str],
        reviewers: &[&str],
        response: ResponseTemplate,
    ) {
        let reviewers: Vec<Value> = reviewers
            .iter()
            .map(|r| json!({"user": {"name": r}}))
            .collect();
        Self::create_request()
            .and(body_partial_json(
                json!({"title": title, "reviewers": reviewers}),
            ))
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
        _labels: &[&str],
        present: &[&str],
        added: &[&str],
    ) {
        if added.is_empty() {
            return;
        }
        // The reviewers are set whole, at the version read.
        expect_read(server, number, present).await;
        let reviewers: Vec<Value> = present
            .iter()
            .chain(added)
            .map(|r| json!({"user": {"name": r}}))
            .collect();
        Self::authed("PUT", &Self::proposal_path(number))
            .and(body_partial_json(
                json!({"reviewers": reviewers, "version": VERSION}),
            ))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_close(server: &MockServer, number: u64) {
        expect_read(server, number, &[]).await;
        let mut declined = pull(number, "", "");
        declined["state"] = "DECLINED".into();
        Self::authed("POST", &format!("{PULLS}/{number}/decline"))
            .and(query_param("version", VERSION.to_string()))
            .respond_with(ok_json(declined))
            .expect(1)
            .mount(server)
            .await;
    }
}
