//! What only Azure DevOps has: a service principal that trades its client secret for a
//! Microsoft Entra token, and a token Azure DevOps does not take answered 203 with a sign-in
//! page instead of a 401.

use serde_json::json;
use tagpilot::forge::ForgeError;
use wiremock::matchers::{body_string_contains, header, method, path, query_param};
use wiremock::{Mock, ResponseTemplate};

use super::{TOKEN, setup};
use crate::support::azure_devops::{AzureDevOpsApi, PULLS, listing};
use crate::support::forge_double::ForgeDouble;
use crate::support::git::HTTP_PASSWORD_ENV;
use crate::support::github::ok_json;

/// The service principal's secret goes to Entra's token endpoint only; the pull requests are
/// read with the access token Entra gives, as a bearer token.
#[tokio::test]
async fn azure_a_service_principal_reads_with_the_token_entra_gives() {
    let s = setup().await;
    let uri = s.server.uri();
    let forge = format!(
        "azureDevOps: {{apiUrl: '{uri}', organization: acme, project: shop, repository: manifests, \
         servicePrincipal: {{tenantId: contoso, clientId: tagpilot-app, clientSecretEnv: {HTTP_PASSWORD_ENV}, authorityUrl: '{uri}'}}}}"
    );
    let repo = s.config(&forge, "");
    Mock::given(method("POST"))
        .and(path("/contoso/oauth2/v2.0/token"))
        .and(body_string_contains("grant_type=client_credentials"))
        .and(body_string_contains("client_id=tagpilot-app"))
        .and(body_string_contains(
            "scope=499b84ac-1321-427f-aa17-267ca6975798%2F.default",
        ))
        .respond_with(ok_json(json!({
            "token_type": "Bearer", "expires_in": 3599, "access_token": "entra-access-token",
        })))
        .expect(1)
        .mount(&s.server)
        .await;
    let open_pr = crate::support::azure_devops::pull(7, "Update api to 1.2.0", "by hand");
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("searchCriteria.status", "active"))
        .and(header("authorization", "Bearer entra-access-token"))
        .respond_with(ok_json(listing(json!([open_pr]))))
        .expect(1)
        .mount(&s.server)
        .await;
    // No marker in #7: not tagpilot's. The group's proposal is declined-checked, then opened.
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("searchCriteria.status", "all"))
        .and(header("authorization", "Bearer entra-access-token"))
        .respond_with(ok_json(listing(json!([]))))
        .expect(1)
        .mount(&s.server)
        .await;
    Mock::given(method("POST"))
        .and(path(PULLS))
        .and(header("authorization", "Bearer entra-access-token"))
        .respond_with(
            ResponseTemplate::new(201).set_body_json(crate::support::azure_devops::pull(
                8,
                "Update api to 1.2.0",
                "",
            )),
        )
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].number, Some(8));
    s.server.verify().await;
}

/// Azure DevOps answers a token it does not take with 203 and its sign-in page: that is an
/// authentication failure, named as one, never read as an empty listing.
#[tokio::test]
async fn azure_a_sign_in_page_for_the_token_is_an_authentication_failure() {
    let s = setup().await;
    let repo = s.config_for::<AzureDevOpsApi>("");
    AzureDevOpsApi::list_open_request()
        .respond_with(
            ResponseTemplate::new(203)
                .insert_header("content-type", "text/html; charset=utf-8")
                .set_body_string(
                    "<html><head><title>Azure DevOps Services | Sign In</title></head></html>",
                ),
        )
        .expect(1)
        .mount(&s.server)
        .await;
    let err = s.apply_err(&repo, "1.2.0").await;
    assert!(
        matches!(
            &err,
            ForgeError::Auth {
                forge: "Azure DevOps",
                ..
            }
        ),
        "{err}"
    );
    assert!(!err.to_string().contains(TOKEN), "{err}");
    s.server.verify().await;
}
