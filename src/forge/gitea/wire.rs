//! Gitea's (and Forgejo's) API v1 on the wire: the fields tagpilot reads, how a listing says
//! there is a next page, and what an error body says. Pure: bytes and headers in, values out.

use reqwest::header::HeaderMap;
use serde::Deserialize;

use crate::forge::merged::MergeState;
use crate::forge::{PullRequest, Reviewer};

/// Gitea's `PullRequest`, the fields read.
#[derive(Deserialize)]
pub(super) struct Pull {
    pub number: u64,
    #[serde(default)]
    pub html_url: String,
    #[serde(default)]
    pub title: String,
    #[serde(default)]
    pub body: String,
    #[serde(default)]
    pub state: String,
    #[serde(default)]
    pub merged: bool,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    #[serde(default)]
    pub labels: Vec<Label>,
    /// Review requests pending (Gitea 1.17 on); absent before.
    #[serde(default)]
    pub requested_reviewers: Option<Vec<User>>,
    #[serde(default)]
    pub requested_reviewers_teams: Option<Vec<Team>>,
    pub head: Branch,
    pub base: Branch,
}

#[derive(Deserialize)]
pub(super) struct Branch {
    #[serde(rename = "ref", default)]
    pub name: String,
    #[serde(default)]
    pub sha: String,
}

#[derive(Deserialize)]
pub(super) struct Label {
    pub id: u64,
    pub name: String,
}

#[derive(Deserialize)]
pub(super) struct User {
    #[serde(default)]
    pub id: u64,
    #[serde(default)]
    pub login: String,
}

#[derive(Deserialize)]
pub(super) struct Team {
    #[serde(default)]
    pub id: u64,
    #[serde(default)]
    pub name: String,
}

/// A review on a pull request (`GET .../pulls/{index}/reviews`): whoever reviewed, or was asked.
#[derive(Deserialize)]
pub(super) struct Review {
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub team: Option<Team>,
}

/// An issue comment, the fields read.
#[derive(Deserialize)]
pub(super) struct Comment {
    pub id: u64,
    #[serde(default)]
    pub body: String,
}

/// The repository, for its default merge style (Gitea 1.19 on).
#[derive(Deserialize)]
pub(super) struct Repository {
    #[serde(default)]
    pub default_merge_style: Option<String>,
}

/// `GET /repos/{owner}/{repo}/compare/{base}...{head}` (Gitea 1.22 on).
#[derive(Deserialize)]
pub(super) struct Comparison {
    #[serde(default)]
    pub total_commits: usize,
    #[serde(default)]
    pub commits: Vec<CompareCommit>,
}

#[derive(Deserialize)]
pub(super) struct CompareCommit {
    pub commit: CommitDetail,
}

#[derive(Deserialize)]
pub(super) struct CommitDetail {
    #[serde(default)]
    pub message: String,
}

impl Pull {
    /// As the sync reads it; `draft` is the title prefix this client adds, not the title's.
    pub(super) fn into_pull_request(self, draft: &str) -> PullRequest {
        let mut reviewers: Vec<Reviewer> = self
            .requested_reviewers
            .unwrap_or_default()
            .into_iter()
            .map(|u| Reviewer {
                name: u.login,
                team: false,
                id: u.id,
            })
            .collect();
        reviewers.extend(
            self.requested_reviewers_teams
                .unwrap_or_default()
                .into_iter()
                .map(|t| Reviewer {
                    name: t.name,
                    team: true,
                    id: t.id,
                }),
        );
        PullRequest {
            number: self.number,
            url: self.html_url,
            title: self
                .title
                .strip_prefix(draft)
                .unwrap_or(&self.title)
                .to_owned(),
            body: self.body,
            branch: self.head.name,
            merged: self.merged,
            labels: self.labels.into_iter().map(|l| l.name).collect(),
            reviewers,
        }
    }

    pub(super) fn merge_state(self) -> MergeState {
        if self.merged {
            return MergeState::Merged {
                // A fast-forward merge names no merge commit: the head itself is on the base.
                commit: self
                    .merge_commit_sha
                    .filter(|c| !c.is_empty())
                    .unwrap_or_else(|| self.head.sha.clone()),
                head: self.head.sha,
            };
        }
        if self.state == "open" {
            MergeState::Open
        } else {
            MergeState::Closed
        }
    }
}

/// Whether a listing has a page after the one read, as Gitea says it: a `Link` header with
/// `rel="next"`; without one, `X-Total-Count` against what was read so far; without either, a
/// full page. Gitea caps `limit` at its `MAX_RESPONSE_ITEMS` (50 by default) without saying
/// so, which is why a short page alone does not end a listing that has headers.
pub(super) fn has_next_page(
    headers: &HeaderMap,
    read_so_far: usize,
    page_len: usize,
    limit: usize,
) -> bool {
    if let Some(link) = headers.get("link").and_then(|v| v.to_str().ok()) {
        return link.split(',').any(|part| part.contains("rel=\"next\""));
    }
    let total = headers
        .get("x-total-count")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    match total {
        Some(total) => page_len > 0 && read_so_far < total,
        None => page_len >= limit,
    }
}

/// What an error body says: Gitea's `APIError` (`{"message": ..., "url": ...}`), or the
/// text itself when it is not one (a proxy's page).
pub(super) fn error_message(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_owned))
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| text.trim().chars().take(300).collect())
}

/// The scopes a 403 names: Gitea says "token does not have at least one of required
/// scope(s): [write:repository]".
pub(super) fn required_scopes(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("required scope(s):")?;
    let inside = rest.trim().strip_prefix('[')?.split_once(']')?.0;
    Some(inside.trim().to_owned()).filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_next_page_is_told_by_link_then_total_then_a_full_page() {
        let next = r#"<https://git.example/api/v1/repos/a/b/pulls?page=2&limit=50>; rel="next", <https://git.example/api/v1/repos/a/b/pulls?page=3&limit=50>; rel="last""#;
        let last = r#"<https://git.example/api/v1/repos/a/b/pulls?page=1&limit=50>; rel="first", <https://git.example/api/v1/repos/a/b/pulls?page=2&limit=50>; rel="prev""#;
        assert!(has_next_page(&headers(&[("link", next)]), 50, 50, 50));
        assert!(!has_next_page(&headers(&[("link", last)]), 120, 20, 50));
        // The server capped `limit` at 30: the total says there is more.
        assert!(has_next_page(
            &headers(&[("x-total-count", "45")]),
            30,
            30,
            50
        ));
        assert!(!has_next_page(
            &headers(&[("x-total-count", "45")]),
            45,
            15,
            50
        ));
        assert!(has_next_page(&headers(&[]), 50, 50, 50));
        assert!(!has_next_page(&headers(&[]), 10, 10, 50));
    }

    #[test]
    fn errors_say_giteas_message_and_403s_name_the_scopes() {
        let body = r#"{"message":"token does not have at least one of required scope(s): [read:repository]","url":"https://git.example/api/swagger"}"#;
        let message = error_message(body);
        assert_eq!(
            required_scopes(&message).as_deref(),
            Some("read:repository")
        );
        assert_eq!(
            error_message("<html>bad gateway</html>"),
            "<html>bad gateway</html>"
        );
        assert_eq!(required_scopes("Forbidden"), None);
    }
}
