//! Scripted GitHub REST exchanges for the pull-request tests: the repository `acme/manifests`,
//! the branch `tagpilot/api`, and one builder per call tagpilot makes. Each `expect_*` mounts
//! an exact expectation (method, path, auth header, the body fields that matter, how often), so
//! a scenario reads as the list of calls it scripts; none of them may match more loosely than
//! the request it stands for.

use serde_json::{Value, json};
use wiremock::matchers::{
    body_json, body_partial_json, header, method, path, query_param, query_param_is_missing,
};
use wiremock::{Mock, MockServer, ResponseTemplate};

/// The token in `HTTP_PASSWORD_ENV`, as GitHub receives it.
pub const AUTH: &str = "Bearer correct-horse-battery";
pub const BRANCH: &str = "tagpilot/api";
pub const PULLS: &str = "/repos/acme/manifests/pulls";

/// A pull request from `BRANCH` as GitHub returns it.
pub fn pull(number: u64, body: &str, merged: bool) -> Value {
    json!({
        "number": number,
        "html_url": format!("https://github.example/acme/manifests/pull/{number}"),
        "node_id": format!("PR_node{number}"),
        "title": "Update api to 1.2.0",
        "body": body,
        "state": if merged { "closed" } else { "open" },
        "merged_at": if merged { Value::from("2026-01-01T00:00:00Z") } else { Value::Null },
        "head": {"ref": BRANCH, "sha": "0000000000000000000000000000000000000000"},
    })
}

pub fn ok_json(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(body)
}

pub fn created(body: Value) -> ResponseTemplate {
    ResponseTemplate::new(201).set_body_json(body)
}

/// The path of one pull request.
pub fn pull_path(number: u64) -> String {
    format!("{PULLS}/{number}")
}

/// The path comments on pull request `number` are posted to.
pub fn comments_path(number: u64) -> String {
    format!("/repos/acme/manifests/issues/{number}/comments")
}

/// The listing of open pull requests on `main`, for any head.
pub fn list_open(pulls: Value) -> Mock {
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("state", "open"))
        .and(query_param("base", "main"))
        .and(query_param_is_missing("head"))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(pulls))
}

/// The listing of closed pull requests from `BRANCH`.
pub fn list_closed(pulls: Value) -> Mock {
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("state", "closed"))
        .and(query_param("head", format!("acme:{BRANCH}")))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(pulls))
}

/// Exactly one listing of open pull requests, answered with `pulls`.
pub async fn expect_list_open(server: &MockServer, pulls: Value) {
    list_open(pulls).expect(1).mount(server).await;
}

/// Exactly one listing of closed pull requests, answered with `pulls`.
pub async fn expect_list_closed(server: &MockServer, pulls: Value) {
    list_closed(pulls).expect(1).mount(server).await;
}

/// A repository with no pull request, open or closed: each listing once.
pub async fn expect_no_pulls_yet(server: &MockServer) {
    expect_list_open(server, json!([])).await;
    expect_list_closed(server, json!([])).await;
}

/// Exactly one pull request created with at least the body `fields`, answered as `number`.
pub async fn expect_create(server: &MockServer, number: u64, fields: Value) {
    Mock::given(method("POST"))
        .and(path(PULLS))
        .and(header("authorization", AUTH))
        .and(body_partial_json(fields))
        .respond_with(created(pull(number, "", false)))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one edit of pull request `number`, whatever it changes.
pub async fn expect_edit(server: &MockServer, number: u64) {
    Mock::given(method("PATCH"))
        .and(path(pull_path(number)))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(pull(number, "", false)))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one edit of pull request `number` that sets at least the body `fields`.
pub async fn expect_edit_with(server: &MockServer, number: u64, fields: Value) {
    Mock::given(method("PATCH"))
        .and(path(pull_path(number)))
        .and(header("authorization", AUTH))
        .and(body_partial_json(fields))
        .respond_with(ok_json(pull(number, "", false)))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one edit that closes pull request `number`.
pub async fn expect_close(server: &MockServer, number: u64) {
    expect_edit_with(server, number, json!({"state": "closed"})).await;
}

/// Exactly one label request on pull request `number`, adding exactly `labels`.
pub async fn expect_labels(server: &MockServer, number: u64, labels: Value) {
    Mock::given(method("POST"))
        .and(path(format!(
            "/repos/acme/manifests/issues/{number}/labels"
        )))
        .and(header("authorization", AUTH))
        .and(body_json(json!({ "labels": labels })))
        .respond_with(ok_json(json!([])))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one listing of the reviews of pull request `number` by `logins`.
pub async fn expect_reviews(server: &MockServer, number: u64, logins: &[&str]) {
    let reviews: Vec<Value> = logins
        .iter()
        .map(|login| json!({"user": {"login": login, "id": 1}, "state": "APPROVED"}))
        .collect();
    Mock::given(method("GET"))
        .and(path(format!("{PULLS}/{number}/reviews")))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(json!(reviews)))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one review request on pull request `number` for exactly these `users` and `teams`,
/// answered with `status`: 201, or 422 as GitHub refuses someone who is no collaborator.
pub async fn expect_review_request(
    server: &MockServer,
    number: u64,
    users: &[&str],
    teams: &[&str],
    status: u16,
) {
    let response = if status == 422 {
        ResponseTemplate::new(422).set_body_json(json!({
            "message": "Reviews may only be requested from collaborators. One or more of the users or teams you specified is not a collaborator of the acme/manifests repository.",
        }))
    } else {
        created(pull(number, "", false))
    };
    Mock::given(method("POST"))
        .and(path(format!("{PULLS}/{number}/requested_reviewers")))
        .and(header("authorization", AUTH))
        .and(body_json(
            json!({ "reviewers": users, "team_reviewers": teams }),
        ))
        .respond_with(response)
        .expect(1)
        .mount(server)
        .await;
}
