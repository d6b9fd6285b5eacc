//! One trait over the GitHub and GitLab API doubles, so a pull-request scenario is written
//! once and run against each forge (STYLE.md, "One scenario, several backends"). An
//! implementation mounts its forge's exact calls and says what its forge calls things; the
//! scenarios in `tests/it/forge/mod.rs` only speak of proposals.

use serde_json::{Value, json};
use wiremock::matchers::{
    body_partial_json, header, method, path, query_param, query_param_is_missing,
};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use super::git::HTTP_PASSWORD_ENV;
use super::github::{self, AUTH, BRANCH, PULLS, created, ok_json};
use super::gitlab::{self, MRS, PRIVATE_TOKEN, merge_request, mr_path};

/// A forge's API double. Calls are scripted for the repository `acme/manifests`, branch
/// `BRANCH`, base `main`, each with the forge's own authentication.
pub trait ForgeDouble {
    /// As errors name the forge.
    const NAME: &'static str;
    /// What the forge calls a proposal.
    const NOUN: &'static str;
    /// The request field carrying the proposal's text.
    const BODY: &'static str;
    /// The method that edits a proposal.
    const EDIT: &'static str;
    /// The permission a listing's 403 is reported to lack.
    const READ_PERMISSION: &'static str;
    /// The permission a 403 on opening is reported to lack.
    const WRITE_PERMISSION: &'static str;
    /// Whether the forge has labels; one without says so in a warning instead.
    const LABELS: bool = true;
    /// Where a comment's text is in the request that posts or edits it (a JSON pointer).
    const COMMENT_TEXT: &'static str = "/body";
    /// Where it is in the request that edits a comment, when that differs.
    const COMMENT_EDIT_TEXT: &'static str = "/body";
    /// Reviewers to request on opening, in the config's words. GitHub's include a team
    /// (`owner/slug`); GitLab has no team reviewers.
    const REVIEWERS: &'static [&'static str];

    /// The `forge:` entry for the double at `uri`, token from `HTTP_PASSWORD_ENV`.
    fn forge_yaml(uri: &str) -> String;
    /// Where proposals are listed and created.
    fn proposals() -> String;
    /// The path of proposal `number`, where it is edited.
    fn proposal_path(number: u64) -> String;
    /// Where comments on proposal `number` are posted.
    fn comments_path(number: u64) -> String;
    /// Where comment `id` on proposal `number` is edited.
    fn comment_path(number: u64, id: u64) -> String;
    /// The method that edits a comment.
    const COMMENT_EDIT: &'static str;
    /// The link the forge gives for proposal `number`.
    fn url(number: u64) -> String;
    /// How the forge refers to proposal `number` in text.
    fn reference(number: u64) -> String;

    /// An open proposal from `BRANCH` as listed.
    fn proposal(number: u64, title: &str, body: &str) -> Value;
    /// A proposal from `BRANCH` closed without merging, as listed.
    fn closed(number: u64, title: &str, body: &str) -> Value;
    /// `proposal` as carrying these labels and with these reviewers asked.
    fn labelled(proposal: Value, labels: &[&str], reviewers: &[&str]) -> Value;

    /// A request with this method at this path, authenticated as the forge expects.
    fn authed(http_method: &str, at: &str) -> MockBuilder;
    /// Setting the `tagpilot/verify` status of `commit` to `state` (`success`, `failure`,
    /// `pending`, in tagpilot's words), as the forge expects it written.
    fn commit_status(commit: &str, state: &str) -> MockBuilder;
    /// Proposal `number` as read by itself, merged by `commit` from head `head`.
    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value;
    /// The listing of open proposals on `main`, for any branch.
    fn list_open_request() -> MockBuilder;
    /// An opening of a proposal for `BRANCH` into `main`.
    fn create_request() -> MockBuilder {
        Self::create_request_from(BRANCH)
    }
    /// An opening of a proposal for `branch` into `main`.
    fn create_request_from(branch: &str) -> MockBuilder;
    /// The listing of closed proposals from `BRANCH` into `main`.
    fn list_closed(response: Value) -> Mock {
        Self::list_closed_from(BRANCH, response)
    }
    /// The listing of closed proposals from `branch` into `main`.
    fn list_closed_from(branch: &str, response: Value) -> Mock;
    /// The listing of open proposals from `BRANCH` only, after opening one was refused.
    fn list_open_from_branch(response: Value) -> Mock;
    /// The refusal to open a second proposal for `BRANCH`.
    fn already_exists() -> ResponseTemplate;
    /// A rate limit that names when it resets (epoch seconds), as the forge sends it.
    fn rate_limited_until(reset: u64) -> ResponseTemplate;
    /// A 403 on a listing, with whatever the forge says about the permission missing.
    fn forbidden_listing() -> ResponseTemplate;
    /// A bare 403, naming no permission.
    fn forbidden() -> ResponseTemplate;
    /// A refusal to open a proposal, with the forge's `message`.
    fn refused(message: &str) -> ResponseTemplate;
    /// The answer to an edit of proposal `number`.
    fn edited(number: u64) -> ResponseTemplate;
    /// The answer to opening proposal `number`.
    fn opened(number: u64) -> ResponseTemplate;
    /// `proposal` as coming from `branch` instead of `BRANCH`.
    fn from_branch(proposal: Value, branch: &str) -> Value;

    /// Exactly one opening of a proposal with `title`, labels and reviewers, answered with
    /// `response` (and the reviewers looked up first where the forge needs that).
    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        labels: &[&str],
        reviewers: &[&str],
        response: ResponseTemplate,
    );
    /// Exactly one proposal opened for `BRANCH` into `main` with `title`, answered as
    /// `number`, with these labels and reviewers asked as the forge does on opening.
    async fn expect_create(
        server: &MockServer,
        number: u64,
        title: &str,
        labels: &[&str],
        reviewers: &[&str],
    );
    /// Exactly the calls that add `labels` and the reviewers `added` to proposal `number`,
    /// whose reviewers are `present` so far; nothing when both are empty.
    async fn expect_additions(
        server: &MockServer,
        number: u64,
        labels: &[&str],
        present: &[&str],
        added: &[&str],
    );
    /// Exactly one edit that closes proposal `number`.
    async fn expect_close(server: &MockServer, number: u64);

    /// Exactly one edit of proposal `number` setting at least `fields`.
    async fn expect_edit_with(server: &MockServer, number: u64, fields: Value) {
        Self::authed(Self::EDIT, &Self::proposal_path(number))
            .and(body_partial_json(fields))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    /// Exactly one edit of proposal `number`, whatever it changes.
    async fn expect_edit(server: &MockServer, number: u64) {
        Self::authed(Self::EDIT, &Self::proposal_path(number))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    /// Exactly one comment posted on proposal `number`.
    async fn expect_comment(server: &MockServer, number: u64) {
        Self::authed("POST", &Self::comments_path(number))
            .respond_with(created(json!({"id": 1})))
            .expect(1)
            .mount(server)
            .await;
    }

    /// The listing of these (id, text) comments as the forge answers it.
    fn comment_listing(comments: &[(u64, &str)]) -> Value {
        let listed: Vec<Value> = comments
            .iter()
            .map(|(id, body)| json!({"id": id, "body": body}))
            .collect();
        json!(listed)
    }

    /// Exactly one listing of proposal `number`'s comments, answered with these (id, text).
    async fn expect_comments(server: &MockServer, number: u64, comments: &[(u64, &str)]) {
        Self::authed("GET", &Self::comments_path(number))
            .respond_with(ok_json(Self::comment_listing(comments)))
            .expect(1)
            .mount(server)
            .await;
    }

    /// Exactly one edit of comment `id` on proposal `number`.
    async fn expect_comment_edit(server: &MockServer, number: u64, id: u64) {
        Self::authed(Self::COMMENT_EDIT, &Self::comment_path(number, id))
            .respond_with(ok_json(json!({"id": id})))
            .expect(1)
            .mount(server)
            .await;
    }

    /// The listing of open proposals, answered with `response`.
    fn list_open(response: Value) -> Mock {
        Self::list_open_request().respond_with(ok_json(response))
    }

    /// Exactly one listing of open proposals, answered with `response`.
    async fn expect_list_open(server: &MockServer, response: Value) {
        Self::list_open(response).expect(1).mount(server).await;
    }

    /// Exactly one listing of closed proposals, answered with `response`.
    async fn expect_list_closed(server: &MockServer, response: Value) {
        Self::list_closed(response).expect(1).mount(server).await;
    }

    /// No proposal yet, open or closed: each listing once.
    async fn expect_no_proposals_yet(server: &MockServer) {
        Self::expect_list_open(server, json!([])).await;
        Self::expect_list_closed(server, json!([])).await;
    }
}

pub struct GitHubApi;

impl ForgeDouble for GitHubApi {
    const NAME: &'static str = "GitHub";
    const NOUN: &'static str = "pull request";
    const BODY: &'static str = "body";
    const EDIT: &'static str = "PATCH";
    const READ_PERMISSION: &'static str = "`pull_requests: read`";
    const WRITE_PERMISSION: &'static str = "`pull_requests: write`";
    const REVIEWERS: &'static [&'static str] = &["alice", "acme/platform"];

    fn forge_yaml(uri: &str) -> String {
        format!(
            "github: {{apiUrl: '{uri}', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}"
        )
    }

    fn proposals() -> String {
        PULLS.into()
    }

    fn proposal_path(number: u64) -> String {
        github::pull_path(number)
    }

    fn comments_path(number: u64) -> String {
        github::comments_path(number)
    }

    const COMMENT_EDIT: &'static str = "PATCH";

    fn comment_path(_number: u64, id: u64) -> String {
        format!("/repos/acme/manifests/issues/comments/{id}")
    }

    fn url(number: u64) -> String {
        format!("https://github.example/acme/manifests/pull/{number}")
    }

    fn reference(number: u64) -> String {
        format!("#{number}")
    }

    fn proposal(number: u64, title: &str, body: &str) -> Value {
        let mut pull = github::pull(number, body, false);
        pull["title"] = title.into();
        pull
    }

    fn closed(number: u64, title: &str, body: &str) -> Value {
        // GitHub lists closed ones by `state=closed`; unmerged means no `merged_at`.
        Self::proposal(number, title, body)
    }

    fn labelled(mut proposal: Value, labels: &[&str], reviewers: &[&str]) -> Value {
        let labels: Vec<Value> = labels.iter().map(|l| json!({"name": l})).collect();
        let (teams, users): (Vec<&str>, Vec<&str>) =
            reviewers.iter().partition(|r| r.contains('/'));
        proposal["labels"] = labels.into();
        proposal["requested_reviewers"] = users
            .iter()
            .enumerate()
            .map(|(id, login)| json!({"login": login, "id": id + 1}))
            .collect::<Vec<_>>()
            .into();
        proposal["requested_teams"] = teams
            .iter()
            .map(|t| json!({"slug": t.rsplit('/').next(), "id": 100}))
            .collect::<Vec<_>>()
            .into();
        proposal
    }

    fn authed(http_method: &str, at: &str) -> MockBuilder {
        Mock::given(method(http_method))
            .and(path(at))
            .and(header("authorization", AUTH))
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut pull = github::pull(number, "", true);
        pull["merged"] = json!(true);
        pull["merge_commit_sha"] = json!(commit);
        pull["head"]["sha"] = json!(head);
        pull
    }

    fn commit_status(commit: &str, state: &str) -> MockBuilder {
        Self::authed("POST", &format!("/repos/acme/manifests/statuses/{commit}")).and(
            body_partial_json(json!({"state": state, "context": "tagpilot/verify"})),
        )
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", PULLS)
            .and(query_param("state", "open"))
            .and(query_param("base", "main"))
            .and(query_param_is_missing("head"))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", PULLS).and(body_partial_json(json!({"head": branch, "base": "main"})))
    }

    fn list_closed_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", PULLS)
            .and(query_param("state", "closed"))
            .and(query_param("head", format!("acme:{branch}")))
            .respond_with(ok_json(response))
    }

    fn list_open_from_branch(response: Value) -> Mock {
        Self::authed("GET", PULLS)
            .and(query_param("state", "open"))
            .and(query_param("head", format!("acme:{BRANCH}")))
            .respond_with(ok_json(response))
    }

    fn already_exists() -> ResponseTemplate {
        ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom",
                        "message": "A pull request already exists for acme:tagpilot/api."}],
        }))
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // GitHub's primary rate limit: a 403 with the remaining count and the reset time.
        ResponseTemplate::new(403)
            .insert_header("x-ratelimit-remaining", "0")
            .insert_header("x-ratelimit-reset", reset.to_string().as_str())
            .set_body_json(json!({"message": "API rate limit exceeded"}))
    }

    fn forbidden_listing() -> ResponseTemplate {
        ResponseTemplate::new(403)
            .insert_header("x-accepted-github-permissions", "pull_requests=read")
            .set_body_json(json!({"message": "Resource not accessible by personal access token"}))
    }

    fn forbidden() -> ResponseTemplate {
        ResponseTemplate::new(403)
            .set_body_json(json!({"message": "Resource not accessible by integration"}))
    }

    fn refused(message: &str) -> ResponseTemplate {
        ResponseTemplate::new(422).set_body_json(json!({
            "message": "Validation Failed",
            "errors": [{"resource": "PullRequest", "code": "custom", "message": message}],
        }))
    }

    fn edited(number: u64) -> ResponseTemplate {
        ok_json(github::pull(number, "", false))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(github::pull(number, "", false))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["head"]["ref"] = branch.into();
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
            .and(body_partial_json(json!({"title": title, "draft": false})))
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
        let response = Self::opened(number);
        Self::expect_create_answered(server, title, labels, reviewers, response).await;
        if !labels.is_empty() {
            github::expect_labels(server, number, json!(labels)).await;
        }
        if !reviewers.is_empty() {
            let (users, teams) = split_teams(reviewers);
            github::expect_review_request(server, number, &users, &teams, 201).await;
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
            github::expect_labels(server, number, json!(labels)).await;
        }
        if !added.is_empty() {
            // Whoever is not asked might have reviewed already: GitHub then no longer lists
            // them as asked, so the reviews are read first.
            github::expect_reviews(server, number, &[]).await;
            let (users, teams) = split_teams(added);
            github::expect_review_request(server, number, &users, &teams, 201).await;
        }
    }

    async fn expect_close(server: &MockServer, number: u64) {
        github::expect_close(server, number).await;
    }
}

/// Users and teams (the slugs of `owner/slug`) as GitHub asks them apart.
fn split_teams<'a>(reviewers: &[&'a str]) -> (Vec<&'a str>, Vec<&'a str>) {
    let (teams, users): (Vec<&str>, Vec<&str>) = reviewers.iter().partition(|r| r.contains('/'));
    let teams = teams
        .into_iter()
        .map(|t| t.rsplit('/').next().unwrap_or(t))
        .collect();
    (users, teams)
}

pub struct GitLabApi;

impl ForgeDouble for GitLabApi {
    const NAME: &'static str = "GitLab";
    const NOUN: &'static str = "merge request";
    const BODY: &'static str = "description";
    const EDIT: &'static str = "PUT";
    const READ_PERMISSION: &'static str = "`api scope, Developer role`";
    const WRITE_PERMISSION: &'static str = "`api scope, Developer role`";
    const REVIEWERS: &'static [&'static str] = &["alice"];

    fn forge_yaml(uri: &str) -> String {
        format!(
            "gitlab: {{apiUrl: '{uri}/api/v4', tokenEnv: {HTTP_PASSWORD_ENV}, project: acme/manifests}}"
        )
    }

    fn proposals() -> String {
        MRS.into()
    }

    fn proposal_path(number: u64) -> String {
        mr_path(number)
    }

    fn comments_path(number: u64) -> String {
        format!("{MRS}/{number}/notes")
    }

    const COMMENT_EDIT: &'static str = "PUT";

    fn comment_path(number: u64, id: u64) -> String {
        format!("{MRS}/{number}/notes/{id}")
    }

    fn url(number: u64) -> String {
        format!("https://gitlab.example/acme/manifests/-/merge_requests/{number}")
    }

    fn reference(number: u64) -> String {
        format!("!{number}")
    }

    fn proposal(number: u64, title: &str, body: &str) -> Value {
        merge_request(number, title, body)
    }

    fn closed(number: u64, title: &str, body: &str) -> Value {
        let mut closed = merge_request(number, title, body);
        closed["state"] = "closed".into();
        closed
    }

    fn labelled(mut proposal: Value, labels: &[&str], reviewers: &[&str]) -> Value {
        proposal["labels"] = json!(labels);
        proposal["reviewers"] = reviewers
            .iter()
            .map(|r| json!({"id": gitlab::user_id(r), "username": r}))
            .collect::<Vec<_>>()
            .into();
        proposal
    }

    fn authed(http_method: &str, at: &str) -> MockBuilder {
        Mock::given(method(http_method))
            .and(path(at))
            .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut mr = merge_request(number, "Update api", "");
        mr["state"] = json!("merged");
        mr["merge_commit_sha"] = json!(commit);
        mr["sha"] = json!(head);
        mr
    }

    fn commit_status(commit: &str, state: &str) -> MockBuilder {
        let state = if state == "failure" { "failed" } else { state };
        Self::authed(
            "POST",
            &format!("/api/v4/projects/acme%2Fmanifests/statuses/{commit}"),
        )
        .and(body_partial_json(
            json!({"state": state, "name": "tagpilot/verify"}),
        ))
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", MRS)
            .and(query_param("state", "opened"))
            .and(query_param("target_branch", "main"))
            .and(query_param_is_missing("source_branch"))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", MRS).and(body_partial_json(
            json!({"source_branch": branch, "target_branch": "main"}),
        ))
    }

    fn list_closed_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", MRS)
            .and(query_param("state", "closed"))
            .and(query_param("source_branch", branch))
            .and(query_param("target_branch", "main"))
            .respond_with(ok_json(response))
    }

    fn list_open_from_branch(response: Value) -> Mock {
        Self::authed("GET", MRS)
            .and(query_param("state", "opened"))
            .and(query_param("source_branch", BRANCH))
            .and(query_param("target_branch", "main"))
            .respond_with(ok_json(response))
    }

    fn already_exists() -> ResponseTemplate {
        ResponseTemplate::new(409).set_body_json(json!({
            "message": ["Another open merge request already exists for this source branch: !3"],
        }))
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // GitLab's own headers: `RateLimit-Reset` in epoch seconds, no `Retry-After`.
        ResponseTemplate::new(429)
            .insert_header("ratelimit-remaining", "0")
            .insert_header("ratelimit-reset", reset.to_string().as_str())
    }

    fn forbidden_listing() -> ResponseTemplate {
        Self::forbidden()
    }

    fn forbidden() -> ResponseTemplate {
        ResponseTemplate::new(403).set_body_json(json!({"message": "403 Forbidden"}))
    }

    fn refused(message: &str) -> ResponseTemplate {
        ResponseTemplate::new(422).set_body_json(json!({ "message": [message] }))
    }

    fn edited(number: u64) -> ResponseTemplate {
        ok_json(merge_request(number, "", ""))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(merge_request(number, "", ""))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["source_branch"] = branch.into();
        proposal
    }

    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        labels: &[&str],
        reviewers: &[&str],
        response: ResponseTemplate,
    ) {
        // Reviewers are looked up by name and sent as ids, labels as one list, in the create.
        for reviewer in reviewers {
            gitlab::expect_gitlab_user(server, reviewer).await;
        }
        let ids: Vec<u64> = reviewers.iter().map(|r| gitlab::user_id(r)).collect();
        Self::create_request()
            .and(body_partial_json(json!({
                "title": title,
                "labels": labels.join(","),
                "reviewer_ids": ids,
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
        let response = created(merge_request(number, title, ""));
        Self::expect_create_answered(server, title, labels, reviewers, response).await;
    }

    async fn expect_additions(
        server: &MockServer,
        number: u64,
        labels: &[&str],
        present: &[&str],
        added: &[&str],
    ) {
        let mut changes = serde_json::Map::new();
        if !labels.is_empty() {
            changes.insert("add_labels".into(), labels.join(",").into());
        }
        if !added.is_empty() {
            // Only the missing are looked up; `reviewer_ids` replaces the set, so the
            // present reviewers stay in it.
            for reviewer in added {
                gitlab::expect_gitlab_user(server, reviewer).await;
            }
            let ids: Vec<u64> = present
                .iter()
                .chain(added)
                .map(|r| gitlab::user_id(r))
                .collect();
            changes.insert("reviewer_ids".into(), ids.into());
        }
        if !changes.is_empty() {
            gitlab::expect_gitlab_put_exactly(server, number, Value::Object(changes)).await;
        }
    }

    async fn expect_close(server: &MockServer, number: u64) {
        Self::expect_edit_with(server, number, json!({"state_event": "close"})).await;
    }
}
