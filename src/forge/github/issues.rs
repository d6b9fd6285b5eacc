//! GitHub's issues (`/repos/{owner}/{repo}/issues`), for the dashboard. GitHub lists pull
//! requests among issues; those carry `pull_request` and are skipped.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{GitHub, Method};
use crate::forge::ForgeError;
use crate::forge::issue::Issue;

#[derive(Deserialize)]
struct Wire {
    number: u64,
    #[serde(default)]
    html_url: String,
    #[serde(default)]
    body: Option<String>,
    state: String,
    #[serde(default)]
    pull_request: Option<Value>,
}

impl From<Wire> for Issue {
    fn from(w: Wire) -> Issue {
        Issue {
            number: w.number,
            url: w.html_url,
            body: w.body.unwrap_or_default(),
            open: w.state == "open",
        }
    }
}

const READ: &str = "issues: read";
const WRITE: &str = "issues: write";

impl GitHub {
    pub(super) async fn find_issue_with(&self, marker: &str) -> Result<Option<Issue>, ForgeError> {
        for page in 1.. {
            let route = self.route(&format!("/issues?state=open&per_page=100&page={page}"));
            let listed: Vec<Wire> = self
                .call(Method::Get, &route, None, "list the open issues", READ)
                .await?;
            let full = listed.len() == 100;
            if let Some(found) = listed.into_iter().find(|i| {
                i.pull_request.is_none() && i.body.as_deref().is_some_and(|b| b.contains(marker))
            }) {
                return Ok(Some(found.into()));
            }
            if !full {
                break;
            }
        }
        Ok(None)
    }

    pub(super) async fn read_issue(&self, number: u64) -> Result<Issue, ForgeError> {
        let wire: Wire = self
            .call(
                Method::Get,
                &self.route(&format!("/issues/{number}")),
                None,
                &format!("read issue #{number}"),
                READ,
            )
            .await?;
        Ok(wire.into())
    }

    pub(super) async fn open_issue(&self, title: &str, body: &str) -> Result<Issue, ForgeError> {
        let wire: Wire = self
            .call(
                Method::Post,
                &self.route("/issues"),
                Some(&json!({ "title": title, "body": body })),
                "open an issue",
                WRITE,
            )
            .await?;
        Ok(wire.into())
    }

    pub(super) async fn patch_issue(&self, number: u64, patch: Value) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::Patch,
                &self.route(&format!("/issues/{number}")),
                Some(&patch),
                &format!("update issue #{number}"),
                WRITE,
            )
            .await?;
        Ok(())
    }
}
