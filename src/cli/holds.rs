//! `tagpilot holds`: the held tags (policy, field, tag, why, since, who), and `tagpilot holds
//! release` to release one. Holds live in `tagpilot run`'s state store, which one process owns
//! (its directory's lock): with the service stopped the command opens the store itself; while
//! it runs, `--url` reads its `GET /holds`, and releases through its `POST /holds/release` with
//! the token the service was configured with (`holds.releaseToken`), or the Application's
//! `tagpilot.dev/release-hold` annotation, which the next cycle applies.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};

use crate::holds::{FieldKey, HeldTag, HoldSelector, HoldView};
use crate::report::holds::{holds_json, holds_table, views};
use crate::run::lock::{LockError, StateLock};
use crate::state::{State, StateError};

#[derive(Args, Debug)]
pub struct HoldsArgs {
    #[command(subcommand)]
    pub action: Option<HoldsAction>,
    /// `tagpilot run`'s state directory, opened when no process holds it.
    #[arg(long, env = "TAGPILOT_STATE_DIR", value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
    /// A running `tagpilot run`'s HTTP address (`http://127.0.0.1:8080`): its holds are read
    /// from `GET /holds` instead of the state directory.
    #[arg(long, value_name = "URL", global = true)]
    pub url: Option<String>,
    /// Output format of the list.
    #[arg(long, value_enum, default_value_t = HoldsFormat::Table)]
    pub format: HoldsFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum HoldsFormat {
    Table,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum HoldsAction {
    /// Release one hold: by the id `tagpilot holds` shows, or by policy, file and field.
    Release(ReleaseArgs),
}

#[derive(Args, Debug)]
pub struct ReleaseArgs {
    /// The id `tagpilot holds` lists.
    #[arg(long, conflicts_with_all = ["policy", "file", "field", "repository"])]
    pub id: Option<String>,
    #[arg(long, requires_all = ["file", "field"])]
    pub policy: Option<String>,
    /// Path of the file in its repository.
    #[arg(long)]
    pub file: Option<String>,
    /// The field as listed (`Deployment/api container api`).
    #[arg(long)]
    pub field: Option<String>,
    /// `repositories[].name`; absent for the local directory.
    #[arg(long)]
    pub repository: Option<String>,
    /// With `--url`: a file holding the service's `holds.releaseToken` (default: the
    /// environment variable `TAGPILOT_HOLDS_TOKEN`).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// Where `holds release --url` reads the token when `--token-file` is not given.
pub const TOKEN_ENV: &str = "TAGPILOT_HOLDS_TOKEN";

#[derive(Debug, thiserror::Error)]
pub enum HoldsError {
    #[error(
        "holds live in `tagpilot run`'s state store: give --state-dir (or TAGPILOT_STATE_DIR), \
         or --url with a running service's HTTP address"
    )]
    NoStore,
    #[error(
        "the state directory {} is in use by a running `tagpilot run`: list its holds with --url \
         and its HTTP address, and release one there (with its holds.releaseToken) or with the \
         Application's `tagpilot.dev/release-hold` annotation",
        dir.display()
    )]
    Busy { dir: PathBuf },
    #[error(transparent)]
    Lock(LockError),
    #[error(transparent)]
    State(#[from] StateError),
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
    #[error(
        "releasing over --url needs the service's holds.releaseToken: give --token-file, or set \
         {}",
        TOKEN_ENV
    )]
    NoToken,
    #[error("reading the token file {}", path.display())]
    TokenFile {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("name the hold to release: --id, or --policy, --file and --field")]
    NoField,
    #[error("no hold {what}; `tagpilot holds` lists them")]
    NotHeld { what: String },
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
}

/// Runs `tagpilot holds` and `tagpilot holds release`.
pub async fn holds(args: HoldsArgs) -> Result<ExitCode, HoldsError> {
    match &args.action {
        None => {
            let list = match (&args.url, &args.state_dir) {
                (Some(url), _) => fetch(url).await?,
                (None, Some(dir)) => views(&with_store(dir, |s| Ok(s.holds()?))?),
                (None, None) => return Err(HoldsError::NoStore),
            };
            print!(
                "{}",
                match args.format {
                    HoldsFormat::Table => holds_table(&list),
                    HoldsFormat::Json => holds_json(&list)?,
                }
            );
            Ok(ExitCode::SUCCESS)
        }
        Some(HoldsAction::Release(release)) => {
            if let Some(url) = &args.url {
                println!("{}", release_over(url, release).await?);
                return Ok(ExitCode::SUCCESS);
            }
            let dir = args.state_dir.as_deref().ok_or(HoldsError::NoStore)?;
            let released = with_store(dir, |s| release_one(s, release))?;
            println!(
                "released {}: {} held: {}",
                released.key, released.tag, released.reason
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Opens `tagpilot run`'s store behind its directory's lock (held while the store is used),
/// or says that a running service holds it.
pub fn open_store(dir: &Path) -> Result<(StateLock, State), HoldsError> {
    let lock = StateLock::acquire(dir).map_err(|e| match e {
        LockError::Held { dir } => HoldsError::Busy { dir },
        other => HoldsError::Lock(other),
    })?;
    Ok((lock, State::open(dir)?))
}

/// Runs `f` on the store behind its directory's lock, so a running service is never raced.
fn with_store<T>(
    dir: &Path,
    f: impl FnOnce(&State) -> Result<T, HoldsError>,
) -> Result<T, HoldsError> {
    let (_lock, state) = open_store(dir)?;
    let out = f(&state)?;
    state.flush();
    Ok(out)
}

/// The hold `args` names: by `--id`, or by `--policy`, `--file` and `--field`.
fn selector(args: &ReleaseArgs) -> Result<HoldSelector, HoldsError> {
    match (&args.id, &args.policy, &args.file, &args.field) {
        (Some(id), ..) => Ok(HoldSelector::Id(id.clone())),
        (None, Some(policy), Some(file), Some(field)) => Ok(HoldSelector::Field(FieldKey {
            repository: args.repository.clone(),
            policy: policy.clone(),
            file: file.clone(),
            field: field.clone(),
        })),
        _ => Err(HoldsError::NoField),
    }
}

fn release_one(state: &State, args: &ReleaseArgs) -> Result<HeldTag, HoldsError> {
    let which = selector(args)?;
    state
        .release_selected(&which)?
        .ok_or_else(|| HoldsError::NotHeld {
            what: which.to_string(),
        })
}

/// Releases the hold `args` names through a running service's `POST /holds/release`; returns
/// its answer (`released …`).
async fn release_over(url: &str, args: &ReleaseArgs) -> Result<String, HoldsError> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path).map_err(|source| HoldsError::TokenFile {
            path: path.clone(),
            source,
        })?,
        None => std::env::var(TOKEN_ENV).unwrap_or_default(),
    };
    let token = token.trim();
    if token.is_empty() {
        return Err(HoldsError::NoToken);
    }
    let body = match selector(args)? {
        HoldSelector::Id(id) => serde_json::json!({ "id": id }),
        HoldSelector::Field(key) => serde_json::json!({
            "repository": key.repository,
            "policy": key.policy,
            "file": key.file,
            "field": key.field,
        }),
    };
    let url = format!("{}/holds/release", url.trim_end_matches('/'));
    let http = |source| HoldsError::Http {
        url: url.clone(),
        source,
    };
    let response = reqwest::Client::new()
        .post(&url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .map_err(http)?;
    let status = response.status();
    let text = response.text().await.map_err(http)?;
    if !status.is_success() {
        return Err(HoldsError::Refused {
            url,
            status: status.as_u16(),
            body: text,
        });
    }
    Ok(text)
}

async fn fetch(url: &str) -> Result<Vec<HoldView>, HoldsError> {
    let url = format!("{}/holds", url.trim_end_matches('/'));
    let http = |source| HoldsError::Http {
        url: url.clone(),
        source,
    };
    let response = reqwest::get(&url).await.map_err(http)?;
    let status = response.status();
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(HoldsError::Refused {
            url,
            status: status.as_u16(),
            body,
        });
    }
    response.json().await.map_err(http)
}
