//! Bitbucket Cloud's API 2.0 on the wire: the fields tagpilot reads, a page of `values` with
//! its `next` link, and what an error body says. Pure: bytes in, values out.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::forge::merged::MergeState;
use crate::forge::{PullRequest, Reviewer};

/// A page of any listing: `values`, and the full URL of the next page when there is one.
#[derive(Deserialize)]
pub(super) struct Page<T> {
    #[serde(default = "Vec::new")]
    pub values: Vec<T>,
    #[serde(default)]
    pub next: Option<String>,
}

/// A `pullrequest`, the fields read.
#[derive(Deserialize)]
pub(super) struct Pull {
    pub id: u64,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub state: String,
    pub source: Endpoint,
    #[serde(default)]
    pub merge_commit: Option<Commit>,
    #[serde(default)]
    pub links: Links,
    #[serde(default)]
    pub reviewers: Vec<Account>,
}

#[derive(Deserialize)]
pub(super) struct Endpoint {
    pub branch: BranchName,
    #[serde(default)]
    pub commit: Option<Commit>,
}

#[derive(Deserialize)]
pub(super) struct BranchName {
    pub name: String,
}

#[derive(Deserialize)]
pub(super) struct Commit {
    pub hash: String,
}

#[derive(Deserialize, Default)]
pub(super) struct Links {
    #[serde(default)]
    pub html: Option<Href>,
}

#[derive(Deserialize)]
pub(super) struct Href {
    pub href: String,
}

/// A user as Bitbucket names one: by `account_id` (Atlassian's), by `uuid` (`{…}`), and by
/// `nickname`; usernames are no longer in the API.
#[derive(Deserialize, Clone)]
pub(super) struct Account {
    #[serde(default)]
    pub uuid: Option<String>,
    #[serde(default)]
    pub account_id: Option<String>,
    #[serde(default)]
    pub nickname: Option<String>,
}

/// A pull request comment, the fields read.
#[derive(Deserialize)]
pub(super) struct Comment {
    pub id: u64,
    #[serde(default)]
    pub content: Content,
}

#[derive(Deserialize, Default)]
pub(super) struct Content {
    #[serde(default)]
    pub raw: String,
}

impl Account {
    /// How a reviewer is sent: by `uuid` when the name is one (`{…}`), else by `account_id`.
    pub(super) fn reference(name: &str) -> Value {
        if name.starts_with('{') {
            json!({ "uuid": name })
        } else {
            json!({ "account_id": name })
        }
    }

    /// This account as it is sent back: by uuid when known.
    pub(super) fn as_reference(&self) -> Value {
        match (&self.uuid, &self.account_id) {
            (Some(uuid), _) => json!({ "uuid": uuid }),
            (None, Some(id)) => json!({ "account_id": id }),
            (None, None) => json!({}),
        }
    }
}

impl Pull {
    /// As the sync reads it. A reviewer counts under every name Bitbucket shows for them, so a
    /// config that names them by account id, uuid or nickname finds them.
    pub(super) fn into_pull_request(self) -> PullRequest {
        let reviewers = self
            .reviewers
            .iter()
            .flat_map(|a| [&a.account_id, &a.uuid, &a.nickname])
            .flatten()
            .map(|name| Reviewer {
                name: name.clone(),
                team: false,
                id: 0,
            })
            .collect();
        PullRequest {
            number: self.id,
            url: self.links.html.map(|h| h.href).unwrap_or_default(),
            title: self.title,
            body: self.description,
            branch: self.source.branch.name,
            merged: self.state == "MERGED",
            // Bitbucket has no labels.
            labels: Vec::new(),
            reviewers,
        }
    }

    pub(super) fn merge_state(self) -> MergeState {
        let head = self.source.commit.map(|c| c.hash).unwrap_or_default();
        match self.state.as_str() {
            "MERGED" => MergeState::Merged {
                // A fast-forward merge names no merge commit: the head itself is on the base.
                commit: self
                    .merge_commit
                    .map(|c| c.hash)
                    .unwrap_or_else(|| head.clone()),
                head,
            },
            "OPEN" => MergeState::Open,
            _ => MergeState::Closed,
        }
    }
}

/// What an error body says: `{"type": "error", "error": {"message": …, "detail": …}}`, or the
/// text itself when it is not one (a proxy's page).
pub(super) fn error_message(text: &str) -> String {
    let parsed = serde_json::from_str::<Value>(text).ok();
    let error = parsed.as_ref().and_then(|v| v.get("error"));
    let message = error
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let detail = error.and_then(|e| e.get("detail")).and_then(Value::as_str);
    match (message, detail) {
        ("", _) => text.trim().chars().take(300).collect(),
        (m, Some(d)) if !d.is_empty() => format!("{m}: {d}"),
        (m, _) => m.to_owned(),
    }
}

/// The scopes a 403 says are required: `"detail": {"required": ["pullrequest:write"]}`.
pub(super) fn required_scopes(text: &str) -> Option<String> {
    let v: Value = serde_json::from_str(text).ok()?;
    let required = v.pointer("/error/detail/required")?.as_array()?;
    let scopes: Vec<&str> = required.iter().filter_map(Value::as_str).collect();
    (!scopes.is_empty()).then(|| scopes.join(", "))
}

/// Whether a 400 refused the reviewers: `"fields": {"reviewers": [...]}`.
pub(super) fn refused_reviewers(text: &str) -> bool {
    serde_json::from_str::<Value>(text)
        .ok()
        .is_some_and(|v| v.pointer("/error/fields/reviewers").is_some())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_say_the_message_and_the_detail_and_403s_the_required_scopes() {
        let forbidden = r#"{"type":"error","error":{"message":"Your credentials lack one or more required privilege scopes.","detail":{"granted":["repository"],"required":["pullrequest:write"]}}}"#;
        assert_eq!(
            error_message(forbidden),
            "Your credentials lack one or more required privilege scopes."
        );
        assert_eq!(
            required_scopes(forbidden).as_deref(),
            Some("pullrequest:write")
        );
        let bad = r#"{"type":"error","error":{"message":"Bad request","detail":"reviewers: malformed","fields":{"reviewers":["Malformed reviewers list"]}}}"#;
        assert_eq!(error_message(bad), "Bad request: reviewers: malformed");
        assert!(refused_reviewers(bad) && !refused_reviewers(forbidden));
        assert_eq!(error_message("Bad gateway"), "Bad gateway");
    }

    #[test]
    fn reviewers_go_by_uuid_or_account_id() {
        assert_eq!(
            Account::reference("{d3f1c0de-0000-4000-8000-000000000001}"),
            json!({"uuid": "{d3f1c0de-0000-4000-8000-000000000001}"})
        );
        assert_eq!(
            Account::reference("557058:alice"),
            json!({"account_id": "557058:alice"})
        );
    }
}
