//! Bitbucket Data Center's REST API 1.0 on the wire: the fields tagpilot reads, a page with
//! `isLastPage` and `nextPageStart`, and what an error body says. Pure: bytes in, values out.

use serde::Deserialize;
use serde_json::Value;

use crate::forge::merged::MergeState;
use crate::forge::{PullRequest, Reviewer};

/// A page of any listing.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Page<T> {
    #[serde(default = "Vec::new")]
    pub values: Vec<T>,
    #[serde(default = "yes")]
    pub is_last_page: bool,
    #[serde(default)]
    pub next_page_start: Option<u64>,
}

fn yes() -> bool {
    true
}

/// A pull request, the fields read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Pull {
    pub id: u64,
    /// The pull request's version, which every change to it must name.
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub state: String,
    pub from_ref: Ref,
    pub to_ref: Ref,
    #[serde(default)]
    pub reviewers: Vec<Participant>,
    #[serde(default)]
    pub links: Links,
    #[serde(default)]
    pub properties: Option<Properties>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ref {
    /// `refs/heads/main`
    pub id: String,
    #[serde(default)]
    pub latest_commit: Option<String>,
}

#[derive(Deserialize, Clone)]
pub(super) struct Participant {
    pub user: User,
}

#[derive(Deserialize, Clone)]
pub(super) struct User {
    /// The user name reviewers are given by.
    pub name: String,
    #[serde(default)]
    pub slug: Option<String>,
}

#[derive(Deserialize, Default)]
pub(super) struct Links {
    #[serde(rename = "self", default)]
    pub web: Vec<Href>,
}

#[derive(Deserialize)]
pub(super) struct Href {
    pub href: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Properties {
    #[serde(default)]
    pub merge_commit: Option<CommitId>,
}

#[derive(Deserialize)]
pub(super) struct CommitId {
    pub id: String,
}

/// One entry of a pull request's activity; comments are those with a `comment`.
#[derive(Deserialize)]
pub(super) struct Activity {
    #[serde(default)]
    pub action: String,
    #[serde(default)]
    pub comment: Option<Comment>,
}

#[derive(Deserialize)]
pub(super) struct Comment {
    pub id: u64,
    #[serde(default)]
    pub version: u64,
    #[serde(default)]
    pub text: String,
}

/// `main` for `refs/heads/main`.
pub(super) fn branch_of(id: &str) -> &str {
    id.strip_prefix("refs/heads/").unwrap_or(id)
}

impl Pull {
    pub(super) fn into_pull_request(self) -> PullRequest {
        let reviewers = self
            .reviewers
            .iter()
            .flat_map(|p| [Some(&p.user.name), p.user.slug.as_ref()])
            .flatten()
            .map(|name| Reviewer {
                name: name.clone(),
                team: false,
                id: 0,
            })
            .collect();
        PullRequest {
            number: self.id,
            url: self
                .links
                .web
                .into_iter()
                .next()
                .map(|h| h.href)
                .unwrap_or_default(),
            title: self.title,
            body: self.description.unwrap_or_default(),
            branch: branch_of(&self.from_ref.id).to_owned(),
            merged: self.state == "MERGED",
            // Bitbucket has no labels.
            labels: Vec::new(),
            reviewers,
        }
    }

    pub(super) fn merge_state(self) -> MergeState {
        let head = self.from_ref.latest_commit.unwrap_or_default();
        match self.state.as_str() {
            "MERGED" => MergeState::Merged {
                commit: self
                    .properties
                    .and_then(|p| p.merge_commit)
                    .map(|c| c.id)
                    .unwrap_or_else(|| head.clone()),
                head,
            },
            "OPEN" => MergeState::Open,
            _ => MergeState::Closed,
        }
    }
}

/// What an error body says: the messages of `{"errors": [{"message": …}]}`, or the text.
pub(super) fn error_message(text: &str) -> String {
    let messages: Vec<String> = serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("errors").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
        .collect();
    if messages.is_empty() {
        text.trim().chars().take(300).collect()
    } else {
        messages.join("; ")
    }
}

/// Whether a refusal is Bitbucket's "only one pull request may be open for a given source
/// and target branch".
pub(super) fn is_duplicate(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("errors").and_then(Value::as_array).cloned())
        .unwrap_or_default()
        .iter()
        .any(|e| {
            e.get("exceptionName")
                .and_then(Value::as_str)
                .is_some_and(|n| n.ends_with("DuplicatePullRequestException"))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duplicate_refusal_names_the_open_pull_request() {
        let body = r#"{"errors":[{"context":null,"message":"Only one pull request may be open for a given source and target branch","exceptionName":"com.atlassian.bitbucket.pull.DuplicatePullRequestException","existingPullRequest":{"id":3,"version":2,"title":"t","state":"OPEN","fromRef":{"id":"refs/heads/tagpilot/api"},"toRef":{"id":"refs/heads/main"}}}]}"#;
        assert_eq!(
            error_message(body),
            "Only one pull request may be open for a given source and target branch"
        );
        assert!(is_duplicate(body));
        assert!(!is_duplicate(r#"{"errors":[{"message":"no"}]}"#));
        assert_eq!(branch_of("refs/heads/tagpilot/api"), "tagpilot/api");
    }
}
