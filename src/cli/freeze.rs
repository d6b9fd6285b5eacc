//! `tagpilot freeze` / `tagpilot unfreeze`: the emergency freeze of a running service, through
//! its `POST /freeze` and `POST /unfreeze` with the bearer token of `holds.freezeToken`
//! (`crate::run::freeze`). Freezing says who and why; the service holds every write at once.

use std::path::PathBuf;

use clap::Args;

/// Where the token is read when `--token-file` is not given.
pub const TOKEN_ENV: &str = "TAGPILOT_FREEZE_TOKEN";

#[derive(Args, Debug)]
pub struct FreezeArgs {
    /// The running service's HTTP address (`http://tagpilot:8080`).
    #[arg(long, env = "TAGPILOT_URL")]
    pub url: String,
    /// Why: shown in `plan`, the logs and every held change.
    #[arg(long)]
    pub reason: String,
    /// Who freezes (default: the user name of this shell, `$USER`).
    #[arg(long, env = "USER")]
    pub by: String,
    /// A file holding the service's `holds.freezeToken` (default: the environment variable
    /// `TAGPILOT_FREEZE_TOKEN`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct UnfreezeArgs {
    /// The running service's HTTP address (`http://tagpilot:8080`).
    #[arg(long, env = "TAGPILOT_URL")]
    pub url: String,
    /// A file holding the service's `holds.freezeToken` (default: the environment variable
    /// `TAGPILOT_FREEZE_TOKEN`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum FreezeError {
    #[error("reading the freeze token {}", path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("no freeze token: give --token-file or set {TOKEN_ENV}")]
    NoToken,
    #[error("asking {url}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered {status}: {body}")]
    Refused {
        url: String,
        status: u16,
        body: String,
    },
}

/// Freezes every write of the service at `args.url`; its answer.
pub async fn freeze(args: &FreezeArgs) -> Result<String, FreezeError> {
    let body = serde_json::json!({"by": args.by, "reason": args.reason});
    post(&args.url, "freeze", args.token_file.as_ref(), Some(body)).await
}

/// Lifts the freeze of the service at `args.url`; its answer.
pub async fn unfreeze(args: &UnfreezeArgs) -> Result<String, FreezeError> {
    post(&args.url, "unfreeze", args.token_file.as_ref(), None).await
}

async fn post(
    url: &str,
    path: &str,
    token_file: Option<&PathBuf>,
    body: Option<serde_json::Value>,
) -> Result<String, FreezeError> {
    let token = match token_file {
        Some(path) => std::fs::read_to_string(path).map_err(|source| FreezeError::TokenFile {
            path: path.clone(),
            source,
        })?,
        None => std::env::var(TOKEN_ENV).unwrap_or_default(),
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(FreezeError::NoToken);
    }
    let url = format!("{}/{path}", url.trim_end_matches('/'));
    let http = |source| FreezeError::Http {
        url: url.clone(),
        source,
    };
    let mut request = reqwest::Client::new().post(&url).bearer_auth(token);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.map_err(http)?;
    let status = response.status();
    let text = response.text().await.map_err(http)?;
    if !status.is_success() {
        return Err(FreezeError::Refused {
            url,
            status: status.as_u16(),
            body: text,
        });
    }
    Ok(text)
}
