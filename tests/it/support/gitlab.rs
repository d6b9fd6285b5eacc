//! Scripted GitLab REST exchanges for the merge-request tests: the project `acme/manifests`,
//! the branch `tagpilot/api`, and one builder per call tagpilot makes, each as exact as the
//! GitHub ones in `github.rs`.

use serde_json::{Value, json};
use wiremock::matchers::{body_json, body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer};

use super::git::HTTP_PASSWORD;
use super::github::{BRANCH, ok_json};

pub const MRS: &str = "/api/v4/projects/acme%2Fmanifests/merge_requests";
/// The token in `HTTP_PASSWORD_ENV`, as GitLab receives it.
pub const PRIVATE_TOKEN: (&str, &str) = ("private-token", HTTP_PASSWORD);

/// An open merge request from `BRANCH` as GitLab returns it.
pub fn merge_request(iid: u64, title: &str, description: &str) -> Value {
    json!({
        "iid": iid,
        "web_url": format!("https://gitlab.example/acme/manifests/-/merge_requests/{iid}"),
        "title": title,
        "description": description,
        "source_branch": BRANCH,
        "target_branch": "main",
        "state": "opened",
    })
}

/// The path of one merge request.
pub fn mr_path(iid: u64) -> String {
    format!("{MRS}/{iid}")
}

/// The GitLab user ids the doubles know, by username.
pub fn user_id(username: &str) -> u64 {
    match username {
        "alice" => 11,
        "bob" => 12,
        "carol" => 13,
        "dave" => 30,
        other => panic!("no GitLab user `{other}` in the double"),
    }
}

pub fn gitlab_list(state: &str, response: Value) -> Mock {
    Mock::given(method("GET"))
        .and(path(MRS))
        .and(query_param("state", state))
        .and(query_param("target_branch", "main"))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .respond_with(ok_json(response))
}

/// Exactly one listing of merge requests in `state`, answered with `response`.
pub async fn expect_gitlab_list(server: &MockServer, state: &str, response: Value) {
    gitlab_list(state, response).expect(1).mount(server).await;
}

/// Exactly one update of merge request `iid` whose body is exactly `fields`.
pub async fn expect_gitlab_put_exactly(server: &MockServer, iid: u64, fields: Value) {
    Mock::given(method("PUT"))
        .and(path(mr_path(iid)))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .and(body_json(fields))
        .respond_with(ok_json(merge_request(iid, "", "")))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one update of merge request `iid` setting at least `fields`.
pub async fn expect_gitlab_put(server: &MockServer, iid: u64, fields: Value) {
    Mock::given(method("PUT"))
        .and(path(mr_path(iid)))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .and(body_partial_json(fields))
        .respond_with(ok_json(merge_request(iid, "", "")))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one lookup of the GitLab user `username`, answered with their id. Mounted twice,
/// it stands for two lookups.
pub async fn expect_gitlab_user(server: &MockServer, username: &str) {
    Mock::given(method("GET"))
        .and(path("/api/v4/users"))
        .and(query_param("username", username))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .respond_with(ok_json(
            json!([{"id": user_id(username), "username": username}]),
        ))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
}
