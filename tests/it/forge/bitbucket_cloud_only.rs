//! What only Bitbucket Cloud has: an app password as basic authentication, listings that
//! follow each page's `next` link, and an opening that goes on without the reviewers Bitbucket
//! refuses, saying so with what else it cannot do (labels).

use serde_json::json;
use tagpilot::forge::Action;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, ResponseTemplate};

use super::{open_first, setup};
use crate::support::bitbucket_cloud::{BitbucketCloudApi, PULLS, page, pull};
use crate::support::forge_double::ForgeDouble;
use crate::support::git::{HTTP_PASSWORD, HTTP_PASSWORD_ENV};
use crate::support::github::{created, ok_json};

/// An app password goes as basic authentication with its user name; tagpilot's pull request
/// is on the page the first page's `next` names.
#[tokio::test]
async fn bitbucket_an_app_password_is_basic_auth_and_listings_follow_next() {
    let s = setup().await;
    let forge = format!(
        "bitbucket: {{apiUrl: '{}/2.0', username: tagpilot-bot, appPasswordEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}",
        s.server.uri()
    );
    let repo = s.config(&forge, "");
    let basic = {
        use base64::Engine as _;
        let pair = format!("tagpilot-bot:{HTTP_PASSWORD}");
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(pair)
        )
    };
    // Opened first with the token, as the shared scenarios do; then read with the password.
    let first = open_first::<BitbucketCloudApi>(&s, &s.config_for::<BitbucketCloudApi>("")).await;
    let mut someone = pull(5, "Fix typo", "by hand");
    someone["source"]["branch"]["name"] = "fix-typo".into();
    let next = format!("{}{PULLS}?page=2&pagelen=50&state=OPEN", s.server.uri());
    let mut first_page = page(json!([someone]));
    first_page["next"] = next.into();
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("q", "destination.branch.name = \"main\""))
        .and(header("authorization", basic.as_str()))
        .respond_with(ok_json(first_page))
        .expect(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("page", "2"))
        .and(header("authorization", basic.as_str()))
        .respond_with(ok_json(page(json!([pull(
            7,
            "Update api to 1.2.0",
            &first
        )]))))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    let actions: Vec<_> = outcome
        .pull_requests
        .iter()
        .map(|p| (p.number, p.action.clone()))
        .collect();
    assert_eq!(actions, [(Some(7), Action::UpToDate)]);
    s.server.verify().await;
}

/// Bitbucket refuses an opening naming an account it does not know: the pull request is opened
/// without the reviewers, and the warnings say so, and that Bitbucket has no labels.
#[tokio::test]
async fn bitbucket_refused_reviewers_open_the_pull_request_without_them_and_say_so() {
    let s = setup().await;
    let repo =
        s.config_for::<BitbucketCloudApi>("  labels: [dependencies]\n  reviewers: [ghost]\n");
    BitbucketCloudApi::expect_no_proposals_yet(&s.server).await;
    BitbucketCloudApi::create_request()
        .and(body_partial_json(json!({"reviewers": [{"account_id": "ghost"}]})))
        .respond_with(ResponseTemplate::new(400).set_body_json(json!({
            "type": "error",
            "error": {"message": "reviewers: Malformed reviewers list", "fields": {"reviewers": ["Malformed reviewers list"]}},
        })))
        .expect(1)
        .mount(&s.server)
        .await;
    BitbucketCloudApi::create_request()
        .and(body_partial_json(json!({"reviewers": []})))
        .respond_with(created(pull(7, "Update api to 1.2.0", "")))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    let pr = &outcome.pull_requests[0];
    assert_eq!((pr.action.clone(), pr.number), (Action::Opened, Some(7)));
    assert_eq!(
        pr.warnings,
        [
            "Bitbucket Cloud has no labels: `dependencies` not set",
            "reviewer `ghost` was not requested: Bitbucket Cloud refused the reviewers (reviewers: Malformed reviewers list)",
        ]
    );
    s.server.verify().await;
}
