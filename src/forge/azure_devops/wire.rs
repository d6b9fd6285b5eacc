//! Azure DevOps' Git REST API 7.1 on the wire: the fields tagpilot reads and what an error
//! body says. Pure: bytes in, values out.

use serde::Deserialize;
use serde_json::Value;

use crate::forge::merged::MergeState;
use crate::forge::{PullRequest, Reviewer};

/// A listing: `value`, and `count`.
#[derive(Deserialize)]
pub(super) struct List<T> {
    #[serde(default = "Vec::new")]
    pub value: Vec<T>,
}

/// A `GitPullRequest`, the fields read.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Pull {
    pub pull_request_id: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub status: String,
    #[serde(default)]
    pub source_ref_name: String,
    #[serde(default)]
    pub labels: Vec<Label>,
    #[serde(default)]
    pub reviewers: Vec<Identity>,
    #[serde(default)]
    pub last_merge_source_commit: Option<CommitRef>,
    #[serde(default)]
    pub last_merge_commit: Option<CommitRef>,
    #[serde(default)]
    pub created_by: Option<Identity>,
    #[serde(default)]
    pub repository: Option<RepositoryRef>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct RepositoryRef {
    #[serde(default)]
    pub web_url: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct Label {
    pub name: String,
    #[serde(default = "yes")]
    pub active: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub(super) struct Identity {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub unique_name: Option<String>,
    #[serde(default)]
    pub display_name: Option<String>,
    #[serde(default)]
    pub is_container: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct CommitRef {
    pub commit_id: String,
}

/// A comment thread: tagpilot's comments are each the first of a thread of their own.
#[derive(Deserialize)]
pub(super) struct Thread {
    pub id: u64,
    #[serde(default)]
    pub comments: Vec<ThreadComment>,
}

#[derive(Deserialize)]
pub(super) struct ThreadComment {
    #[serde(default)]
    pub content: Option<String>,
}

/// `GET _apis/identities`: the identities a name finds.
#[derive(Deserialize)]
pub(super) struct FoundIdentity {
    pub id: String,
}

/// Microsoft Entra's token endpoint's answer.
#[derive(Deserialize)]
pub(super) struct EntraToken {
    pub access_token: String,
}

/// `refs/heads/main` for `main`.
pub(super) fn head_ref(branch: &str) -> String {
    format!("refs/heads/{branch}")
}

impl Pull {
    /// As the sync reads it, `url` its web page. A reviewer counts under every name Azure
    /// DevOps shows for them (id, unique name, display name).
    pub(super) fn into_pull_request(self, url: String) -> PullRequest {
        let reviewers = self
            .reviewers
            .iter()
            .flat_map(|r| {
                [Some(&r.id), r.unique_name.as_ref(), r.display_name.as_ref()]
                    .into_iter()
                    .flatten()
                    .map(|name| Reviewer {
                        name: name.clone(),
                        team: r.is_container,
                        id: 0,
                    })
            })
            .collect();
        PullRequest {
            number: self.pull_request_id,
            url,
            title: self.title,
            body: self.description.unwrap_or_default(),
            branch: self
                .source_ref_name
                .strip_prefix("refs/heads/")
                .unwrap_or(&self.source_ref_name)
                .to_owned(),
            merged: self.status == "completed",
            labels: self
                .labels
                .into_iter()
                .filter(|l| l.active)
                .map(|l| l.name)
                .collect(),
            reviewers,
        }
    }

    pub(super) fn merge_state(self) -> MergeState {
        let head = self
            .last_merge_source_commit
            .map(|c| c.commit_id)
            .unwrap_or_default();
        match self.status.as_str() {
            "completed" => MergeState::Merged {
                commit: self
                    .last_merge_commit
                    .map(|c| c.commit_id)
                    .unwrap_or_else(|| head.clone()),
                head,
            },
            "active" => MergeState::Open,
            _ => MergeState::Closed,
        }
    }
}

/// What an error body says: `{"message": …, "typeKey": …}`, or the text itself.
pub(super) fn error_message(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_owned))
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| text.trim().chars().take(300).collect())
}

/// The permission a `TF401027` refusal names: "You need the Git 'PullRequestContribute'
/// permission to perform this action."
pub(super) fn named_permission(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("You need the Git '")?;
    Some(format!("Git {}", rest.split_once('\'')?.0))
}

/// Whether `name` is an identity id (a GUID), sent as it is.
pub(super) fn is_identity_id(name: &str) -> bool {
    let parts: Vec<&str> = name.split('-').collect();
    parts.len() == 5
        && parts
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(p, n)| p.len() == n && p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_the_message_and_a_refusal_names_the_git_permission() {
        let body = r#"{"$id":"1","innerException":null,"message":"TF401027: You need the Git 'PullRequestContribute' permission to perform this action. Details: identity 'tagpilot', scope 'repository'.","typeName":"Microsoft.TeamFoundation.Git.Server.GitNeedsPermissionException","typeKey":"GitNeedsPermissionException","errorCode":0,"eventId":3000}"#;
        let message = error_message(body);
        assert!(message.starts_with("TF401027"), "{message}");
        assert_eq!(
            named_permission(&message).as_deref(),
            Some("Git PullRequestContribute")
        );
        assert_eq!(named_permission("Forbidden"), None);
    }

    #[test]
    fn identity_ids_are_guids() {
        assert!(is_identity_id("d6245f20-2af8-44f4-9451-8107cb2767db"));
        assert!(!is_identity_id("alice@example.com"));
        assert!(!is_identity_id("d6245f20-2af8-44f4-9451"));
    }
}
