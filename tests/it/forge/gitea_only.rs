//! What only Gitea and Forgejo have: listings paged by the `Link` header and filtered by
//! tagpilot, drafts as the `WIP: ` title prefix, auto-merge in the repository's merge style,
//! reviewers refused one by one, and Forgejo's name in what errors say.

use serde_json::json;
use tagpilot::forge::{Action, ForgeError};
use wiremock::ResponseTemplate;
use wiremock::matchers::{body_json, query_param};

use super::{Setup, api_line, open_first, setup};
use crate::support::forge_double::ForgeDouble;
use crate::support::git::HTTP_PASSWORD_ENV;
use crate::support::gitea::{GiteaApi, PULLS, REPO, pull};
use crate::support::github::{BRANCH, created, ok_json};

/// A page of the open listing, with the `Link` header Gitea sends when `next` is `Some`.
fn page(pulls: serde_json::Value, next: Option<u32>) -> ResponseTemplate {
    let answer = ok_json(pulls).insert_header("x-total-count", "3");
    match next {
        Some(n) => answer.insert_header(
            "link",
            format!(
                "<http://gitea.example/api/v1/repos/acme/manifests/pulls?limit=50&page={n}&state=open>; rel=\"next\", \
                 <http://gitea.example/api/v1/repos/acme/manifests/pulls?limit=50&page={n}&state=open>; rel=\"last\""
            )
            .as_str(),
        ),
        None => answer,
    }
}

/// tagpilot's pull request is on the second page, after one into another base: the listing
/// follows `Link: rel="next"` and keeps only pull requests into `main`.
#[tokio::test]
async fn gitea_listings_follow_the_link_header_and_keep_the_base_branch_s() {
    let s = setup().await;
    let repo = s.config_for::<GiteaApi>("");
    let first = open_first::<GiteaApi>(&s, &repo).await;
    let mut elsewhere = pull(4, "Update api to 1.2.0", &first);
    elsewhere["base"]["ref"] = "release".into();
    let mut someone = pull(5, "Fix typo", "by hand");
    someone["head"]["ref"] = "fix-typo".into();
    for (n, pulls, next) in [
        (1, json!([elsewhere, someone]), Some(2)),
        (2, json!([pull(7, "Update api to 1.2.0", &first)]), None),
    ] {
        GiteaApi::list_open_request()
            .and(query_param("page", n.to_string()))
            .respond_with(page(pulls, next))
            .expect(1)
            .mount(&s.server)
            .await;
    }
    let outcome = s.apply(&repo, "1.2.0").await;
    let actions: Vec<_> = outcome
        .pull_requests
        .iter()
        .map(|p| (p.number, p.action.clone()))
        .collect();
    assert_eq!(
        actions,
        [(Some(7), Action::UpToDate)],
        "#4 is into `release`"
    );
    s.server.verify().await;
}

/// `write.draft` is Gitea's work-in-progress title prefix, kept on every update; `autoMerge`
/// asks Gitea to merge once the checks succeed, in the style the repository merges by default.
#[tokio::test]
async fn gitea_a_draft_is_a_wip_title_and_auto_merge_uses_the_repository_s_merge_style() {
    let s = setup().await;
    let repo = s.config_for::<GiteaApi>("  draft: true\n  autoMerge: true\n");
    GiteaApi::expect_no_proposals_yet(&s.server).await;
    GiteaApi::expect_create(&s.server, 3, "WIP: Update api to 1.2.0", &[], &[]).await;
    GiteaApi::authed("GET", REPO)
        .respond_with(ok_json(
            json!({"id": 1, "full_name": "acme/manifests", "default_merge_style": "squash"}),
        ))
        .expect(1)
        .mount(&s.server)
        .await;
    GiteaApi::authed("POST", &format!("{PULLS}/3/merge"))
        .and(body_json(
            json!({"Do": "squash", "merge_when_checks_succeed": true}),
        ))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    let body = s.first_sent("POST", PULLS, "body").await;
    s.next_phase().await;

    // A newer tag: updated in place, still a draft; the prefix is not read as part of the title.
    GiteaApi::expect_list_open(
        &s.server,
        json!([pull(3, "WIP: Update api to 1.2.0", &body)]),
    )
    .await;
    GiteaApi::expect_edit_with(&s.server, 3, json!({"title": "WIP: Update api to 1.3.0"})).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: false }
    );
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.3.0"
    );
    s.server.verify().await;
}

/// Gitea refuses a review request naming anyone it does not know; each is then asked alone,
/// and the one refused is a warning on the pull request, which stands.
#[tokio::test]
async fn gitea_a_reviewer_it_does_not_know_is_a_warning_and_the_others_are_asked() {
    let s = setup().await;
    let repo = s.config_for::<GiteaApi>("  reviewers: [alice, ghost]\n");
    GiteaApi::expect_no_proposals_yet(&s.server).await;
    GiteaApi::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    let requested = format!("{PULLS}/7/requested_reviewers");
    for (reviewers, answer) in [
        (json!(["alice", "ghost"]), 422),
        (json!(["alice"]), 201),
        (json!(["ghost"]), 422),
    ] {
        let response = match answer {
            201 => created(json!([])),
            _ => ResponseTemplate::new(422).set_body_json(json!({
                "message": "user does not exist [uid: 0, name: ghost]",
                "url": "https://gitea.example/api/swagger",
            })),
        };
        GiteaApi::authed("POST", &requested)
            .and(body_json(
                json!({"reviewers": reviewers, "team_reviewers": []}),
            ))
            .respond_with(response)
            .expect(1)
            .mount(&s.server)
            .await;
    }
    let outcome = s.apply(&repo, "1.2.0").await;
    let pr = &outcome.pull_requests[0];
    assert_eq!(pr.action, Action::Opened);
    assert_eq!(
        pr.warnings,
        [
            "reviewer `ghost` was not requested: Gitea refused it (user does not exist [uid: 0, name: ghost] (422 Unprocessable Entity))"
        ]
    );
    s.server.verify().await;
}

/// `forge.forgejo` is the same API under Forgejo's name: a rejected token says Forgejo, and
/// never the token.
#[tokio::test]
async fn forgejo_is_gitea_s_api_under_its_own_name() {
    let s: Setup = setup().await;
    let forgejo = format!(
        "forgejo: {{apiUrl: '{}/api/v1', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}",
        s.server.uri()
    );
    let repo = s.config(&forgejo, "");
    GiteaApi::list_open_request()
        .respond_with(ResponseTemplate::new(401).set_body_json(
            json!({"message": "user does not exist [uid: 0, name: ]", "url": "https://codeberg.example/api/swagger"}),
        ))
        .expect(1)
        .mount(&s.server)
        .await;
    let err = s.apply_err(&repo, "1.2.0").await;
    assert!(
        matches!(
            &err,
            ForgeError::Auth {
                forge: "Forgejo",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains(super::TOKEN), "{err}");
    s.server.verify().await;
}
