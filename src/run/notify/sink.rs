//! One message to one sink, in the shape its receiver reads: a generic webhook (JSON signed
//! with HMAC-SHA256), CloudEvents over HTTP (the HTTP protocol binding's structured batch or
//! binary mode), Slack (an incoming webhook, or `chat.postMessage`) and Microsoft Teams (a
//! Workflows webhook taking an Adaptive Card). A URL that is a credential, a key and a token
//! never reach a log or an error: reqwest's errors are stripped of their URL.

use hmac::{Hmac, Mac};
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::json;

use crate::config::notifications::CloudEventsMode;

use super::event::Notice;

/// A secret's text, never printed.
#[derive(Clone)]
pub struct Hidden(pub(super) String);

impl std::fmt::Debug for Hidden {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Hidden(…)")
    }
}

/// Where and how a sink's messages go.
#[derive(Debug, Clone)]
pub enum Target {
    Webhook {
        url: String,
        key: Hidden,
    },
    CloudEvents {
        url: String,
        mode: CloudEventsMode,
        source: String,
        token: Option<Hidden>,
    },
    SlackWebhook {
        url: Hidden,
    },
    SlackApi {
        api: String,
        token: Hidden,
        channel: String,
    },
    Teams {
        url: Hidden,
    },
}

/// Why a message was not taken. Retried, except a refusal the receiver will repeat.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("the request failed")]
    Request(#[source] reqwest::Error),
    #[error("answered {status}")]
    Status { status: u16 },
    /// Slack's Web API answers 200 with `ok: false` and an error code.
    #[error("Slack refused the message: {error}")]
    Slack { error: String },
}

impl SendError {
    /// A bounded label for logs and metrics.
    pub fn label(&self) -> &'static str {
        match self {
            SendError::Request(_) => "request",
            SendError::Status { .. } => "status",
            SendError::Slack { .. } => "refused",
        }
    }
}

/// The header a webhook's HMAC-SHA256 signature of the body travels in (`sha256=<hex>`, as
/// GitHub signs its webhooks).
pub const SIGNATURE_HEADER: &str = "x-tagpilot-signature-256";

/// `sha256=<hex>` of `body` under `key`.
pub fn sign(key: &str, body: &[u8]) -> String {
    let mut mac = Hmac::<sha2_for_hmac::Sha256>::new_from_slice(key.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A CloudEvent of `notice`, in the JSON event format, with `data` the notice.
pub fn cloud_event(notice: &Notice, source: &str) -> serde_json::Value {
    let mut event = json!({
        "specversion": "1.0",
        "id": notice.id,
        "source": source,
        "type": cloud_event_type(notice),
        "time": notice.at.to_string(),
        "datacontenttype": "application/json",
        "data": notice,
    });
    if let Some(policy) = &notice.policy {
        event["subject"] = json!(policy);
    }
    event
}

fn cloud_event_type(notice: &Notice) -> String {
    format!("dev.tagpilot.{}", notice.kind.name())
}

/// The body a Teams workflow turns into an Adaptive Card post.
pub fn teams_card(text: &str) -> serde_json::Value {
    let mut lines = text.lines();
    let mut body = vec![json!({
        "type": "TextBlock",
        "text": lines.next().unwrap_or_default(),
        "weight": "Bolder",
        "wrap": true,
    })];
    body.extend(lines.map(|l| json!({"type": "TextBlock", "text": l, "wrap": true})));
    json!({
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "contentUrl": null,
            "content": {
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "type": "AdaptiveCard",
                "version": "1.4",
                "body": body,
            },
        }],
    })
}

impl Target {
    /// Sends `notices`, told as `text`, as one message (CloudEvents binary mode: one request
    /// per event, all of which must be taken).
    pub async fn send(
        &self,
        client: &reqwest::Client,
        notices: &[Notice],
        text: &str,
    ) -> Result<(), SendError> {
        match self {
            Target::Webhook { url, key } => {
                let body = serde_json::to_vec(&json!({"text": text, "events": notices}))
                    .expect("notices serialise");
                let request = client
                    .post(url)
                    .header(CONTENT_TYPE, "application/json")
                    .header(SIGNATURE_HEADER, sign(&key.0, &body))
                    .body(body);
                accepted(request).await.map(drop)
            }
            Target::CloudEvents {
                url,
                mode: CloudEventsMode::Structured,
                source,
                token,
            } => {
                let batch: Vec<_> = notices.iter().map(|n| cloud_event(n, source)).collect();
                let request = client
                    .post(url)
                    .header(CONTENT_TYPE, "application/cloudevents-batch+json")
                    .body(serde_json::to_vec(&batch).expect("events serialise"));
                accepted(bearer(request, token.as_ref())).await.map(drop)
            }
            Target::CloudEvents {
                url,
                mode: CloudEventsMode::Binary,
                source,
                token,
            } => {
                for n in notices {
                    let mut request = client
                        .post(url)
                        .header(CONTENT_TYPE, "application/json")
                        .header("ce-specversion", "1.0")
                        .header("ce-id", &n.id)
                        .header("ce-source", source)
                        .header("ce-type", cloud_event_type(n))
                        .header("ce-time", n.at.to_string());
                    if let Some(policy) = &n.policy {
                        request = request.header("ce-subject", policy);
                    }
                    let request = request.body(serde_json::to_vec(n).expect("a notice serialises"));
                    accepted(bearer(request, token.as_ref())).await?;
                }
                Ok(())
            }
            Target::SlackWebhook { url } => {
                let request = client.post(&url.0).json(&json!({"text": text}));
                accepted(request).await.map(drop)
            }
            Target::SlackApi {
                api,
                token,
                channel,
            } => {
                let request = client
                    .post(format!("{}/chat.postMessage", api.trim_end_matches('/')))
                    .json(&json!({"channel": channel, "text": text}));
                let response = accepted(bearer(request, Some(token))).await?;
                let answer: serde_json::Value = response
                    .json()
                    .await
                    .map_err(|e| SendError::Request(e.without_url()))?;
                if answer["ok"] == json!(true) {
                    Ok(())
                } else {
                    Err(SendError::Slack {
                        error: answer["error"]
                            .as_str()
                            .unwrap_or("no error given")
                            .to_string(),
                    })
                }
            }
            Target::Teams { url } => {
                let request = client.post(&url.0).json(&teams_card(text));
                accepted(request).await.map(drop)
            }
        }
    }
}

fn bearer(request: reqwest::RequestBuilder, token: Option<&Hidden>) -> reqwest::RequestBuilder {
    match token {
        Some(t) => request.header(AUTHORIZATION, format!("Bearer {}", t.0)),
        None => request,
    }
}

/// Sends `request`; a 2xx is taken, anything else is an error without the URL.
async fn accepted(request: reqwest::RequestBuilder) -> Result<reqwest::Response, SendError> {
    let response = request
        .send()
        .await
        .map_err(|e| SendError::Request(e.without_url()))?;
    if response.status().is_success() {
        Ok(response)
    } else {
        Err(SendError::Status {
            status: response.status().as_u16(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::notify::event::Kind;

    #[test]
    fn a_signature_is_github_s_scheme_over_the_body() {
        // GitHub's documented example: the same key and payload give its signature.
        assert_eq!(
            sign("It's a Secret to Everybody", b"Hello, World!"),
            "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
        );
    }

    #[test]
    fn a_cloud_event_carries_the_required_attributes_and_the_notice_as_data() {
        let mut n = Notice::new(Kind::Failed, jiff::Timestamp::UNIX_EPOCH);
        n.policy = Some("api".into());
        let n = n.with_id(None);
        let e = cloud_event(&n, "tagpilot");
        assert_eq!(e["specversion"], "1.0");
        assert_eq!(e["type"], "dev.tagpilot.failed");
        assert_eq!(e["id"], json!(n.id));
        assert_eq!(e["subject"], "api");
        assert_eq!(e["data"]["type"], "failed");
        assert_eq!(e["time"], "1970-01-01T00:00:00Z");
    }

    #[test]
    fn a_teams_card_has_the_title_bold_and_a_block_per_line() {
        let card = teams_card("tagpilot: 2 events\n• a\n• b");
        let body = &card["attachments"][0]["content"]["body"];
        assert_eq!(body[0]["weight"], "Bolder");
        assert_eq!(body.as_array().unwrap().len(), 3);
        assert_eq!(
            card["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert!(format!("{:?}", Hidden("x".into())).contains('…'));
    }
}
