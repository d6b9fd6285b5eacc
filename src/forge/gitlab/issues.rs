//! GitLab's issues (`/projects/:id/issues`, numbered by `iid`), for the dashboard. The body
//! is the `description`; an issue is closed with `state_event: close`.

use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::GitLab;
use crate::forge::ForgeError;
use crate::forge::issue::Issue;

#[derive(Deserialize)]
struct Wire {
    iid: u64,
    #[serde(default)]
    web_url: String,
    #[serde(default)]
    description: Option<String>,
    state: String,
}

impl From<Wire> for Issue {
    fn from(w: Wire) -> Issue {
        Issue {
            number: w.iid,
            url: w.web_url,
            body: w.description.unwrap_or_default(),
            open: w.state == "opened",
        }
    }
}

impl GitLab {
    pub(super) async fn find_issue_with(&self, marker: &str) -> Result<Option<Issue>, ForgeError> {
        for page in 1.. {
            let url = self.route(&format!("/issues?state=opened&per_page=100&page={page}"));
            let listed: Vec<Wire> = self
                .call(Method::GET, &url, None, "list the open issues")
                .await?;
            let full = listed.len() == 100;
            if let Some(found) = listed
                .into_iter()
                .find(|i| i.description.as_deref().is_some_and(|d| d.contains(marker)))
            {
                return Ok(Some(found.into()));
            }
            if !full {
                break;
            }
        }
        Ok(None)
    }

    pub(super) async fn read_issue(&self, number: u64) -> Result<Issue, ForgeError> {
        let url = self.route(&format!("/issues/{number}"));
        let wire: Wire = self
            .call(Method::GET, &url, None, &format!("read issue #{number}"))
            .await?;
        Ok(wire.into())
    }

    pub(super) async fn open_issue(&self, title: &str, body: &str) -> Result<Issue, ForgeError> {
        let wire: Wire = self
            .call(
                Method::POST,
                &self.route("/issues"),
                Some(&json!({ "title": title, "description": body })),
                "open an issue",
            )
            .await?;
        Ok(wire.into())
    }

    pub(super) async fn put_issue(&self, number: u64, change: Value) -> Result<(), ForgeError> {
        let _: Value = self
            .call(
                Method::PUT,
                &self.route(&format!("/issues/{number}")),
                Some(&change),
                &format!("update issue #{number}"),
            )
            .await?;
        Ok(())
    }
}
