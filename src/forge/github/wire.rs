//! GitHub's JSON as tagpilot reads it, and GitHub's errors as a user reads them.

use serde::Deserialize;
use serde_json::Value;

use crate::forge::{PullRequest, Reviewer};

#[derive(Deserialize)]
pub(super) struct Pull {
    pub number: u64,
    pub html_url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub node_id: String,
    pub head: Head,
    #[serde(default)]
    pub merged_at: Option<String>,
    #[serde(default)]
    pub labels: Vec<Label>,
    #[serde(default)]
    pub requested_reviewers: Vec<Account>,
    #[serde(default)]
    pub requested_teams: Vec<Team>,
}

#[derive(Deserialize)]
pub(super) struct Head {
    #[serde(rename = "ref")]
    pub branch: String,
}

#[derive(Deserialize)]
pub(super) struct Label {
    pub name: String,
}

#[derive(Deserialize)]
pub(super) struct Account {
    pub login: String,
    #[serde(default)]
    pub id: u64,
}

#[derive(Deserialize)]
pub(super) struct Team {
    pub slug: String,
    #[serde(default)]
    pub id: u64,
}

#[derive(Deserialize)]
pub(super) struct Review {
    #[serde(default)]
    pub user: Option<Account>,
}

impl From<Pull> for PullRequest {
    fn from(p: Pull) -> PullRequest {
        PullRequest {
            number: p.number,
            url: p.html_url,
            title: p.title,
            body: p.body.unwrap_or_default(),
            branch: p.head.branch,
            merged: p.merged_at.is_some(),
            labels: p.labels.into_iter().map(|l| l.name).collect(),
            reviewers: p
                .requested_reviewers
                .into_iter()
                .map(|u| Reviewer {
                    name: u.login,
                    team: false,
                    id: u.id,
                })
                .chain(p.requested_teams.into_iter().map(|t| Reviewer {
                    name: t.slug,
                    team: true,
                    id: t.id,
                }))
                .collect(),
        }
    }
}

/// GitHub names the permission a token lacks in `x-accepted-github-permissions`
/// (`pull_requests=write; contents=read`); shown as `pull_requests: write`.
pub(super) fn permission_hint(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let value = headers
        .get("x-accepted-github-permissions")?
        .to_str()
        .ok()?;
    let first = value.split([';', ',']).next()?.trim();
    let (name, level) = first.split_once('=')?;
    Some(format!("{}: {}", name.trim(), level.trim()))
}

pub(super) fn describe(error: &octocrab::GitHubError) -> String {
    let mut message = format!("{} ({})", error.message, error.status_code);
    if let Some(errors) = &error.errors {
        let details: Vec<String> = errors
            .iter()
            .filter_map(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
            .collect();
        if !details.is_empty() {
            message.push_str(&format!(": {}", details.join("; ")));
        }
    }
    message
}

/// octocrab's `Display` may append a backtrace; the first line is the message.
pub(super) fn short(error: &octocrab::Error) -> String {
    match error {
        octocrab::Error::GitHub { source, .. } => describe(source),
        other => other
            .to_string()
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permission_hint_reads_githubs_header() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(permission_hint(&headers), None);
        headers.insert(
            "x-accepted-github-permissions",
            "pull_requests=write; contents=read".parse().unwrap(),
        );
        assert_eq!(
            permission_hint(&headers).as_deref(),
            Some("pull_requests: write")
        );
    }
}
