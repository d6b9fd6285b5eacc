//! Labels, reviewers and auto-merge on GitHub: adding what a pull request lacks, one review
//! request at a time when GitHub refuses a batch, and removing nothing a human added.

use serde_json::{Value, json};

use super::wire::Review;
use super::{GitHub, Method};
use crate::forge::{ForgeError, NewPullRequest, PullRequest, missing_labels, missing_reviewers};

impl GitHub {
    /// Labels, reviewers and auto-merge for a pull request just opened.
    pub(super) async fn decorate(
        &self,
        created: &PullRequest,
        node_id: &str,
        pr: &NewPullRequest,
    ) -> Result<Vec<String>, ForgeError> {
        let number = created.number;
        let warnings = self
            .add_missing(created, &pr.labels, &pr.reviewers, true)
            .await?;
        if pr.auto_merge {
            let response: Value = self
                .call(
                    Method::Post,
                    "/graphql",
                    Some(&json!({
                        "query": "mutation($id: ID!) { enablePullRequestAutoMerge(input: {pullRequestId: $id}) { clientMutationId } }",
                        "variables": { "id": node_id },
                    })),
                    &format!("enable auto-merge on pull request #{number}"),
                    "pull_requests: write",
                )
                .await?;
            if let Some(errors) = response.get("errors").and_then(Value::as_array)
                && !errors.is_empty()
            {
                let messages: Vec<&str> = errors
                    .iter()
                    .filter_map(|e| e.get("message").and_then(Value::as_str))
                    .collect();
                return Err(self.api_error(
                    &format!("enable auto-merge on pull request #{number}"),
                    format!(
                        "{} (auto-merge must be allowed in the repository settings)",
                        messages.join("; ")
                    ),
                ));
            }
        }
        Ok(warnings)
    }

    /// Adds the labels `pr` lacks and requests the reviewers it lacks. `fresh`: just opened,
    /// so nobody has reviewed yet and GitHub need not be asked.
    pub(super) async fn add_missing(
        &self,
        pr: &PullRequest,
        labels: &[String],
        reviewers: &[String],
        fresh: bool,
    ) -> Result<Vec<String>, ForgeError> {
        let number = pr.number;
        let labels = missing_labels(&pr.labels, labels);
        if !labels.is_empty() {
            // POST adds; labels a human put on the pull request stay.
            let _: Value = self
                .call(
                    Method::Post,
                    &self.route(&format!("/issues/{number}/labels")),
                    Some(&json!({ "labels": labels })),
                    &format!("label pull request #{number}"),
                    "pull_requests: write",
                )
                .await?;
        }
        let mut missing = missing_reviewers(&pr.reviewers, reviewers);
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        // GitHub drops a review request once it is answered: who reviewed is not missing, and
        // neither is a team once anyone reviewed (a member's review answers the team's request;
        // telling members apart would need `read:org`).
        let reviewed = if fresh {
            Vec::new()
        } else {
            self.reviewed_by(number).await?
        };
        let answered = !reviewed.is_empty();
        missing.retain(|name| {
            let is_team = name.contains('/');
            let has_reviewed = reviewed.iter().any(|r| r.eq_ignore_ascii_case(name));
            let served = has_reviewed || (is_team && answered);
            !served
        });
        self.request_reviewers(number, &missing, answered).await
    }

    async fn reviewed_by(&self, number: u64) -> Result<Vec<String>, ForgeError> {
        let mut logins = Vec::new();
        for page in 1.. {
            let reviews: Vec<Review> = self
                .call(
                    Method::Get,
                    &self.route(&format!("/pulls/{number}/reviews?per_page=100&page={page}")),
                    None,
                    &format!("list reviews of pull request #{number}"),
                    "pull_requests: read",
                )
                .await?;
            let full = reviews.len() == 100;
            logins.extend(reviews.into_iter().filter_map(|r| r.user.map(|u| u.login)));
            if !full {
                break;
            }
        }
        Ok(logins)
    }

    /// Requests `names` in one call; when GitHub refuses that (422: someone is no
    /// collaborator), one by one, a bare name first as a user and then as a team of the owner.
    /// Who is neither is reported, not fatal. `teams_answered`: a bare name that turns out to
    /// be a team is not requested again, someone reviewed already.
    async fn request_reviewers(
        &self,
        number: u64,
        names: &[String],
        teams_answered: bool,
    ) -> Result<Vec<String>, ForgeError> {
        if names.is_empty() {
            return Ok(Vec::new());
        }
        if names.len() > 1 {
            let (teams, users): (Vec<&String>, Vec<&String>) =
                names.iter().partition(|r| r.contains('/'));
            let teams: Vec<&str> = teams
                .iter()
                .filter_map(|t| t.split_once('/').map(|(_, slug)| slug))
                .collect();
            if self.post_reviewers(number, &users, &teams).await? == ReviewRequest::Sent {
                return Ok(Vec::new());
            }
        }
        let mut warnings = Vec::new();
        for name in names {
            let request = match name.split_once('/') {
                Some((_, slug)) => self.post_reviewers(number, &[], &[slug]).await?,
                None => match self.post_reviewers(number, &[name], &[]).await? {
                    ReviewRequest::Refused { .. } if !teams_answered => {
                        self.post_reviewers(number, &[], &[name]).await?
                    }
                    // Refused as a user, but a team of that name was answered already.
                    _ => ReviewRequest::Sent,
                },
            };
            if let ReviewRequest::Refused { message } = request {
                warnings.push(format!(
                    "reviewer `{name}` was not requested: GitHub knows no collaborator or team \
                     of `{}` by that name with access to `{}` ({message})",
                    self.owner, self.path
                ));
            }
        }
        Ok(warnings)
    }

    /// One review request; GitHub refuses it with 422 when someone is no collaborator.
    async fn post_reviewers(
        &self,
        number: u64,
        users: &[&String],
        teams: &[&str],
    ) -> Result<ReviewRequest, ForgeError> {
        let result: Result<Value, _> = self
            .call_status(
                Method::Post,
                &self.route(&format!("/pulls/{number}/requested_reviewers")),
                Some(&json!({ "reviewers": users, "team_reviewers": teams })),
                &format!("request reviewers on pull request #{number}"),
                "pull_requests: write",
            )
            .await;
        match result {
            Ok(_) => Ok(ReviewRequest::Sent),
            Err((Some(422), ForgeError::Api { message, .. })) => {
                Ok(ReviewRequest::Refused { message })
            }
            Err((_, e)) => Err(e),
        }
    }
}

/// What became of a review request GitHub answered.
#[derive(Debug, PartialEq, Eq)]
enum ReviewRequest {
    Sent,
    /// Someone named is no collaborator (or no team); GitHub's words.
    Refused {
        message: String,
    },
}
