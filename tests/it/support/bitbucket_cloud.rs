//! The Bitbucket Cloud API 2.0 double: the repository `acme/manifests` under `/2.0`, the
//! branch `tagpilot/api`, each call as Bitbucket's REST reference shapes it: a bearer access
//! token, pull requests filtered with a BBQL `q` and paged as `values` with a `next` link,
//! reviewers by account id or uuid and sent back whole on every update, comments with
//! `content.raw`, declining instead of closing, build statuses, and
//! `{"type": "error", "error": {...}}` error bodies.
//!
//! Bitbucket Cloud is a service only; there is no server to install.

use serde_json::{Value, json};
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockBuilder, MockServer, ResponseTemplate};

use super::forge_double::ForgeDouble;
use super::git::HTTP_PASSWORD_ENV;
use super::github::{AUTH, BRANCH, created, ok_json};

pub const REPO: &str = "/2.0/repositories/acme/manifests";
pub const PULLS: &str = "/2.0/repositories/acme/manifests/pullrequests";

/// An open pull request from `BRANCH` into `main`, as Bitbucket returns it.
pub fn pull(id: u64, title: &str, description: &str) -> Value {
    json!({
        "type": "pullrequest",
        "id": id,
        "title": title,
        "description": description,
        "state": "OPEN",
        "draft": false,
        "close_source_branch": true,
        "source": {
            "branch": {"name": BRANCH},
            "commit": {"type": "commit", "hash": "0".repeat(12)},
            "repository": {"full_name": "acme/manifests"},
        },
        "destination": {
            "branch": {"name": "main"},
            "commit": {"type": "commit", "hash": "1".repeat(12)},
            "repository": {"full_name": "acme/manifests"},
        },
        "merge_commit": null,
        "links": {"html": {"href": format!("https://bitbucket.example/acme/manifests/pull-requests/{id}")}},
        "reviewers": [],
    })
}

/// A page of a listing, the last.
pub fn page(values: Value) -> Value {
    let size = values.as_array().map_or(0, Vec::len);
    json!({"pagelen": 50, "size": size, "page": 1, "values": values})
}

/// A user as Bitbucket lists one: the double's account ids are the names, the uuids `{name}`.
fn account(name: &str) -> Value {
    json!({"type": "user", "account_id": name, "uuid": format!("{{{name}}}"), "nickname": name, "display_name": name})
}

/// The BBQL query for pull requests from `branch` into `main`.
pub fn from_branch_into_main(branch: &str) -> String {
    format!("source.branch.name = \"{branch}\" AND destination.branch.name = \"main\"")
}

fn error(status: u16, message: &str) -> ResponseTemplate {
    ResponseTemplate::new(status)
        .set_body_json(json!({"type": "error", "error": {"message": message}}))
}

pub struct BitbucketCloudApi;

impl ForgeDouble for BitbucketCloudApi {
    const NAME: &'static str = "Bitbucket Cloud";
    const NOUN: &'static str = "pull request";
    const BODY: &'static str = "description";
    const EDIT: &'static str = "PUT";
    const READ_PERMISSION: &'static str = "`pullrequest`";
    const WRITE_PERMISSION: &'static str = "`pullrequest:write`";
    const REVIEWERS: &'static [&'static str] = &["alice"];
    const LABELS: bool = false;
    const COMMENT_TEXT: &'static str = "/content/raw";

    fn forge_yaml(uri: &str) -> String {
        format!(
            "bitbucket: {{apiUrl: '{uri}/2.0', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}"
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

    fn comment_listing(comments: &[(u64, &str)]) -> Value {
        let listed: Vec<Value> = comments
            .iter()
            .map(|(id, raw)| json!({"type": "pullrequest_comment", "id": id, "deleted": false, "content": {"raw": raw, "markup": "markdown"}}))
            .collect();
        page(json!(listed))
    }

    fn url(number: u64) -> String {
        format!("https://bitbucket.example/acme/manifests/pull-requests/{number}")
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
        declined
    }

    fn labelled(mut proposal: Value, _labels: &[&str], reviewers: &[&str]) -> Value {
        // Bitbucket has no labels: only the reviewers show.
        proposal["reviewers"] = reviewers
            .iter()
            .map(|r| account(r))
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
        Self::authed("POST", &format!("{REPO}/commit/{commit}/statuses/build")).and(
            body_partial_json(json!({
                "key": "tagpilot-verify",
                "name": "tagpilot/verify",
                "state": state,
            })),
        )
    }

    fn merged_proposal(number: u64, commit: &str, head: &str) -> Value {
        let mut merged = pull(number, "Update api", "");
        merged["state"] = json!("MERGED");
        merged["merge_commit"] = json!({"type": "commit", "hash": commit});
        merged["source"]["commit"]["hash"] = json!(head);
        merged
    }

    fn list_open_request() -> MockBuilder {
        Self::authed("GET", PULLS)
            .and(query_param("state", "OPEN"))
            .and(query_param("q", "destination.branch.name = \"main\""))
            .and(query_param(
                "fields",
                "+values.reviewers,+values.description",
            ))
    }

    fn list_open(response: Value) -> Mock {
        Self::list_open_request().respond_with(ok_json(page(response)))
    }

    fn create_request_from(branch: &str) -> MockBuilder {
        Self::authed("POST", PULLS).and(body_partial_json(json!({
            "source": {"branch": {"name": branch}},
            "destination": {"branch": {"name": "main"}},
            "close_source_branch": true,
        })))
    }

    fn list_closed_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", PULLS)
            .and(query_param("state", "MERGED"))
            .and(query_param("state", "DECLINED"))
            .and(query_param("state", "SUPERSEDED"))
            .and(query_param("q", from_branch_into_main(branch)))
            .respond_with(ok_json(page(response)))
    }

    fn list_open_from_branch(response: Value) -> Mock {
        Self::authed("GET", PULLS)
            .and(query_param("state", "OPEN"))
            .and(query_param("q", from_branch_into_main(BRANCH)))
            .respond_with(ok_json(page(response)))
    }

    fn already_exists() -> ResponseTemplate {
        error(
            400,
            &format!("There is already an open pull request from {BRANCH} to main."),
        )
    }

    fn rate_limited_until(reset: u64) -> ResponseTemplate {
        // Bitbucket's 429 names no reset time; the proxy or gateway's `Retry-After` does.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        error(429, "Rate limit for this resource has been exceeded").insert_header(
            "retry-after",
            reset.saturating_sub(now).max(1).to_string().as_str(),
        )
    }

    fn forbidden_listing() -> ResponseTemplate {
        ResponseTemplate::new(403).set_body_json(json!({
            "type": "error",
            "error": {
                "message": "Your credentials lack one or more required privilege scopes.",
                "detail": {"granted": ["repository"], "required": ["pullrequest"]},
            },
        }))
    }

    fn forbidden() -> ResponseTemplate {
        error(403, "You do not have access to this resource.")
    }

    fn refused(message: &str) -> ResponseTemplate {
        error(400, message)
    }

    fn edited(number: u64) -> ResponseTemplate {
        ok_json(pull(number, "", ""))
    }

    fn opened(number: u64) -> ResponseTemplate {
        created(pull(number, "", ""))
    }

    fn from_branch(mut proposal: Value, branch: &str) -> Value {
        proposal["source"]["branch"]["name"] = branch.into();
        proposal
    }

    /// An update reads the pull request first, for the reviewers it sends back.
    async fn expect_edit_with(server: &MockServer, number: u64, fields: Value) {
        expect_read(server, number, &[]).await;
        Self::authed("PUT", &Self::proposal_path(number))
            .and(body_partial_json(fields))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_edit(server: &MockServer, number: u64) {
        Self::expect_edit_with(server, number, json!({})).await;
    }

    async fn expect_create_answered(
        server: &MockServer,
        title: &str,
        _labels: &[&str],
        reviewers: &[&str],
        response: ResponseTemplate,
    ) {
        // No labels on Bitbucket; reviewers go in the opening, by account id.
        let reviewers: Vec<Value> = reviewers.iter().map(|r| json!({"account_id": r})).collect();
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
        // The reviewers are set whole: those present (by uuid, as read) and those added.
        expect_read(server, number, present).await;
        let reviewers: Vec<Value> = present
            .iter()
            .map(|r| json!({"uuid": format!("{{{r}}}")}))
            .chain(added.iter().map(|r| json!({"account_id": r})))
            .collect();
        Self::authed("PUT", &Self::proposal_path(number))
            .and(body_partial_json(json!({"reviewers": reviewers})))
            .respond_with(Self::edited(number))
            .expect(1)
            .mount(server)
            .await;
    }

    async fn expect_close(server: &MockServer, number: u64) {
        let mut declined = pull(number, "", "");
        declined["state"] = "DECLINED".into();
        Self::authed("POST", &format!("{PULLS}/{number}/decline"))
            .respond_with(ok_json(declined))
            .expect(1)
            .mount(server)
            .await;
    }
}

/// Exactly one reading of pull request `number`, whose reviewers are `reviewers`.
async fn expect_read(server: &MockServer, number: u64, reviewers: &[&str]) {
    let read = BitbucketCloudApi::labelled(pull(number, "Update api", ""), &[], reviewers);
    BitbucketCloudApi::authed("GET", &BitbucketCloudApi::proposal_path(number))
        .respond_with(ok_json(read))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
}
