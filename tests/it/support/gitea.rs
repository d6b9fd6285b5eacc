//! The Gitea (and Forgejo) API v1 double: the repository `acme/manifests` under `/api/v1`,
//! the branch `tagpilot/api`, each call as Gitea's API documentation (its swagger) shapes it:
//! `Authorization: token …`, pull requests listed by `state` with `page`/`limit` and filtered
//! by tagpilot (the listing has no branch filter), labels set by id, reviewers requested after
//! opening, `{"message": …, "url": …}` error bodies, 409 for a second pull request from a branch.
//!
//! No Gitea or Forgejo server can be installed here from the package registries this project
//! uses (Debian, PyPI, npm, crates.io ship clients only), so the scenarios run on this double.

use serde_json::{Value, json};
use wiremock::matchers::{body_json, body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use super::forge_double::ForgeDouble;
use super::git::{HTTP_PASSWORD, HTTP_PASSWORD_ENV};
use super::github::{BRANCH, created, ok_json};

pub const REPO: &str = "/api/v1/repos/acme/manifests";
pub const PULLS: &str = "/api/v1/repos/acme/manifests/pulls";
pub const LABELS: &str = "/api/v1/repos/acme/manifests/labels";
/// The token in `HTTP_PASSWORD_ENV`, as Gitea receives it.
pub fn auth() -> String {
    format!("token {HTTP_PASSWORD}")
}
const SWAGGER: &str = "https://gitea.example/api/swagger";

/// An open pull request from `BRANCH` into `main`, as Gitea returns it.
pub fn pull(number: u64, title: &str, body: &str) -> Value {
    json!({
        "id": 1000 + number,
        "number": number,
        "html_url": format!("https://gitea.example/acme/manifests/pulls/{number}"),
        "title": title,
        "body": body,
        "state": "open",
        "merged": false,
        "merge_commit_sha": null,
        "labels": [],
        "requested_reviewers": [],
        "requested_reviewers_teams": [],
        "head": {"label": BRANCH, "ref": BRANCH, "sha": "0".repeat(40)},
        "base": {"label": "main", "ref": "main", "sha": "1".repeat(40)},
    })
}

/// The id the double gives label `name`; `dependencies` exists already, any other is made
/// on first use.
pub fn label_id(name: &str) -> u64 {
    1000 + name.bytes().map(u64::from).sum::<u64>()
}

/// Exactly one reading of the repository's labels (only `dependencies` exists), and one
/// creation of each of `labels` the repository lacks.
async fn expect_label_lookup(server: &MockServer, labels: &[&str]) {
    GiteaApi::authed("GET", LABELS)
        .and(query_param("page", "1"))
        .respond_with(
            ok_json(json!([{"id": label_id("dependencies"), "name": "dependencies", "color": "#00aabb"}]))
                .insert_header("x-total-count", "1"),
        )
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
    for label in labels.iter().filter(|l| **l != "dependencies") {
        GiteaApi::authed("POST", LABELS)
            .and(body_partial_json(json!({"name": label})))
            .respond_with(created(
                json!({"id": label_id(label), "name": label, "color": "#ededed"}),
            ))
            .expect(1)
            .mount(server)
            .await;
    }
}

/// The repository's labels read (and the missing made), then exactly one addition of `labels`
/// to pull request `number` by id.
pub async fn expect_labels_added(server: &MockServer, number: u64, labels: &[&str]) {
    expect_label_lookup(server, labels).await;
    let ids: Vec<u64> = labels.iter().map(|l| label_id(l)).collect();
    // POST adds to what is there; PUT would replace a human's labels.
    GiteaApi::authed("POST", &format!("{REPO}/issues/{number}/labels"))
        .and(body_json(json!({"labels": ids})))
        .respond_with(ok_json(json!([])))
        .expect(1)
        .mount(server)
        .await;
}

/// Exactly one review request on pull request `number` for `reviewers` (`org/team` a team).
pub async fn expect_review_request(server: &MockServer, number: u64, reviewers: &[&str]) {
    let (teams, users): (Vec<&str>, Vec<&str>) = reviewers.iter().partition(|r| r.contains('/'));
    let teams: Vec<&str> = teams
        .iter()
        .map(|t| t.rsplit('/').next().unwrap())
        .collect();
    GiteaApi::authed("POST", &format!("{PULLS}/{number}/requested_reviewers"))
        .and(body_json(
            json!({"reviewers": users, "team_reviewers": teams}),
        ))
        .respond_with(created(json!([])))
        .expect(1)
        .mount(server)
        .await;
}

/// The pull request from `branch` into `main`, read by its branches after opening one was
/// refused (`GET /repos/{owner}/{repo}/pulls/{base}/{head}`): the first of `response`, or a 404.
pub fn open_from(branch: &str, response: Value) -> Mock {
    let answer = match response.as_array().and_then(|a| a.first()) {
        Some(pull) => ok_json(pull.clone()),
        None => ResponseTemplate::new(404)
            .set_body_json(json!({"message": "The target couldn't be found.", "url": SWAGGER})),
    };
    GiteaApi::authed("GET", &format!("{PULLS}/main/{branch}")).respond_with(answer)
}

pub struct GiteaApi;

impl ForgeDouble for GiteaApi {
    const NAME: &'static str = "Gitea";
    const NOUN: &'static str = "pull request";
    const BODY: &'static str = "body";
    const EDIT: &'static str = "PATCH";
    const READ_PERMISSION: &'static str = "`read:repository`";
    const WRITE_PERMISSION: &'static str = "`write:repository`";
    const REVIEWERS: &'static [&'static str] = &["alice", "acme/platform"];

    fn forge_yaml(uri: &str) -> String {
        format!(
            "gitea: {{apiUrl: '{uri}/api/v1', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}"
        )
    }

    fn proposals() -> String {
        PULLS.into()
    }

    fn proposal_path(number: u64) -> String {
        format!("{PULLS}/{number}")
    }

    fn comments_path(number: u64) -> String {
        format!("{REPO}/issues/{number}/comments")
    }

    const COMMENT_EDIT: &'static str = "PATCH";

    fn comment_path(_number: u64, id: u64) -> String {
        format!("{REPO}/issues/comments/{id}")
    }

    fn url(number: u64) -> String {
        format!("https://gitea.example/acme/manifests/pulls/{number}")
    }

    fn reference(number: u64) -> String {
        format!("#{number}")
    }

    fn proposal(number: u64, title: &str, body: &str) -> Value {
        pull(number, title, body)
    }

    fn closed(number: u64, title: &str, body: &str) -> Value {
        let mut closed = pull(number, title, body);
        closed["state"] = "closed".into();
        closed
    }

    fn labelled(mut proposal: Value, labels: &[&str], reviewers: &[&str]) -> Value {
        let (teams, users): (Vec<&str>, Vec<&str>) =
            reviewers.iter().partition(|r| r.contains('/'));
        proposal["labels"] = labels
            .iter()
            .map(|l| json!({"id": label_id(l), "name": l, "color": "#ededed"}))
            .collect::<Vec<_>>()
            .into();
        proposal["requested_reviewers"] = users
            .iter()
            .enumerate()
            .map(|(id, login)| json!({"id": id + 1, "login": login}))
            .collect::<Vec<_>>()
            .into();
        proposal["requested_reviewers_teams"] = teams
            .iter()
            .map(|t| json!({"id": 100, "name": t.rsplit('/').next()}))
            .collect::<Vec<_>>()
            .into();
        proposal
    }

    fn authed(http_method: &str, at: &str) -> MockBuilder {
        Mock::given(method(http_method))
            .and(path(at))
            .and(header("authorization", auth().as_str()))
    }

    fn commit_status(commit: &str, state: &str) -> MockBuilder {
        Self::authed("POST", &format!("{REPO}/statuses/{commit}")).and(body_partial_json(
            json!({"state": state, "context": "tagpilot/verify"}),
        ))
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut merged = pull(number, "Update api", "");
        merged["state"] = json!("closed");
        merged["merged"] = json!(true);
        merged["merge_commit_sha"] = json!(commit);
        merged["head"]["sha"] = json!(head);
        merged
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", PULLS).and(query_param("state", "open"))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", PULLS).and(body_partial_json(json!({"head": branch, "base": "main"})))
    }

    fn list_closed_from(_branch: &str, response: Value) -> Mock {
        // Gitea's listing has no branch filter: each group's reading is the same request, so
        // each mounted answer serves one of them, in the order the groups are read.
        Self::authed("GET", PULLS)
            .and(query_param("state", "closed"))
            .respond_with(ok_json(response))
            .up_to_n_times(1)
    }

    fn list_open_from_branch(response: Value) -> Mock {
        open_from(BRANCH, response)
    }

    fn already_exists() -> ResponseTemplate {
        ResponseTemplate::new(409).set_body_json(json!({
            "message": format!("pull request already exists for these targets [id: 5, issue_id: 5, head_repo_id: 1, base_repo_id: 1, head_branch: {BRANCH}, base_branch: main]"),
            "url": SWAGGER,
        }))
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // Gitea itself does not rate-limit its API; the proxy in front of it says when to
        // come back in `Retry-After`.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        ResponseTemplate::new(429).insert_header(
            "retry-after",
            reset.saturating_sub(now).max(1).to_string().as_str(),
        )
    }

    fn forbidden_listing() -> ResponseTemplate {
        ResponseTemplate::new(403).set_body_json(json!({
            "message": "token does not have at least one of required scope(s): [read:repository]",
            "url": SWAGGER,
        }))
    }

    fn forbidden() -> ResponseTemplate {
        ResponseTemplate::new(403).set_body_json(json!({"message": "Forbidden", "url": SWAGGER}))
    }

    fn refused(message: &str) -> ResponseTemplate {
        ResponseTemplate::new(422).set_body_json(json!({"message": message, "url": SWAGGER}))
    }

    fn edited(number: u64) -> ResponseTemplate {
        // Gitea answers an edit of a pull request with 201.
        created(pull(number, "", ""))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(pull(number, "", ""))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["head"]["ref"] = branch.into();
        proposal["head"]["label"] = branch.into();
        proposal
    }

    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        _labels: &[&str],
        _reviewers: &[&str],
        response: ResponseTemplate,
    ) {
        // Labels and reviewers follow in calls of their own, once the pull request exists.
        Self::create_request()
            .and(body_partial_json(json!({"title": title})))
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
        if !labels.is_empty() {
            expect_labels_added(server, number, labels).await;
        }
        if !reviewers.is_empty() {
            expect_review_request(server, number, reviewers).await;
        }
    }

    async fn expect_additions(
        server: &MockServer,
        number: u64,
        labels: &[&str],
        _present: &[&str],
        added: &[&str],
    ) {
        if !labels.is_empty() {
            expect_labels_added(server, number, labels).await;
        }
        if !added.is_empty() {
            // Whoever reviewed is no longer listed as requested: the reviews are read first.
            Self::authed("GET", &format!("{PULLS}/{number}/reviews"))
                .respond_with(ok_json(json!([])))
                .expect(1)
                .mount(server)
                .await;
            expect_review_request(server, number, added).await;
        }
    }

    async fn expect_close(server: &MockServer, number: u64) {
        Self::expect_edit_with(server, number, json!({"state": "closed"})).await;
    }
}
