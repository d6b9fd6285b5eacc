//! The dashboard issue (issue 33): with `write.dashboard: true`, one issue per manifest
//! repository on its forge, like Renovate's Dependency Dashboard, listing what the status page
//! shows of that repository (pending updates, open pull requests, holds, promotions waiting,
//! refused candidates and problems). It is rewritten in place after every full cycle, found by
//! the number the state store keeps (or, lost, by [`body::MARKER`] among the open issues), so
//! it is never opened twice; turned off, it is closed.
//!
//! A hold's box ticked by a person is acted on before the next full cycle, which only the
//! leader runs: the hold is released through the state store, as `tagpilot holds release`
//! does, and that cycle's plan may move the field. Whoever the forge lets edit the issue can
//! release the holds of its repository, and only those. Promotions are listed without a box:
//! the engine has no way to promote ahead of a promotion's gates.

pub mod body;

use crate::config::repository::RepositoryConfig;
use crate::engine::Cycle;
use crate::forge::issue::Issue;
use crate::forge::{Connected, Forge, ForgeError, connect};
use crate::state::State;

use super::http::Shared;
use super::status::Status;
use body::Board;

/// Why a repository's dashboard could not be kept this cycle; the next cycle tries again.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    #[error("repository `{repository}`: dashboard issue")]
    Forge {
        repository: String,
        source: ForgeError,
    },
    #[error("repository `{repository}`: the dashboard needs a `forge:` block")]
    NoForge { repository: String },
    #[error("repository `{repository}`: releasing the hold ticked on the dashboard")]
    Release {
        repository: String,
        source: crate::state::StateError,
    },
}

/// The repositories whose dashboard is on, or was (an issue remembered, to close).
fn concerned<'a>(
    repositories: &'a [RepositoryConfig],
    state: Option<&'a State>,
) -> impl Iterator<Item = &'a RepositoryConfig> + 'a {
    repositories.iter().filter(move |r| {
        r.write.dashboard || state.is_some_and(|s| s.dashboard_issue(&r.name).is_some())
    })
}

async fn forge_of(repo: &RepositoryConfig) -> Result<Connected, DashboardError> {
    match connect(repo).await {
        Ok(Some((forge, _))) => Ok(forge),
        Ok(None) => Err(DashboardError::NoForge {
            repository: repo.name.clone(),
        }),
        Err(source) => Err(DashboardError::Forge {
            repository: repo.name.clone(),
            source,
        }),
    }
}

/// The repository's dashboard issue, open: the one remembered, else the one with the marker.
async fn existing(
    forge: &Connected,
    repo: &str,
    state: Option<&State>,
) -> Result<Option<Issue>, ForgeError> {
    if let Some(number) = state.and_then(|s| s.dashboard_issue(repo)) {
        let issue = forge.issue(number).await?;
        if issue.open {
            return Ok(Some(issue));
        }
    }
    forge.find_issue(body::MARKER).await
}

/// Before a full cycle: releases the holds whose box is ticked on each dashboard, each only
/// if it holds a field of that dashboard's repository. Returns the ids released.
pub async fn release_ticked(
    repositories: &[RepositoryConfig],
    state: Option<&State>,
) -> Vec<String> {
    let Some(state) = state else {
        return Vec::new();
    };
    let mut released = Vec::new();
    for repo in repositories.iter().filter(|r| r.write.dashboard) {
        match release_in(repo, state).await {
            Ok(ids) => released.extend(ids),
            Err(e) => warn(&e),
        }
    }
    released
}

async fn release_in(repo: &RepositoryConfig, state: &State) -> Result<Vec<String>, DashboardError> {
    let Some(number) = state.dashboard_issue(&repo.name) else {
        return Ok(Vec::new());
    };
    let forge = forge_of(repo).await?;
    let issue = forge
        .issue(number)
        .await
        .map_err(|source| DashboardError::Forge {
            repository: repo.name.clone(),
            source,
        })?;
    let release_error = |source| DashboardError::Release {
        repository: repo.name.clone(),
        source,
    };
    let holds = state.holds().map_err(release_error)?;
    let mut released = Vec::new();
    for id in body::ticked_releases(&issue.body) {
        let Some(held) = holds
            .iter()
            .find(|h| h.key.id() == id && h.key.repository.as_deref() == Some(&repo.name))
        else {
            tracing::info!(repository = %repo.name, id, "a ticked hold on the dashboard is no longer held");
            continue;
        };
        if let Some(gone) = state.release(&held.key).map_err(release_error)? {
            tracing::info!(field = %gone.key, tag = %gone.tag, reason = %gone.reason, issue = number, "hold released: its box was ticked on the dashboard issue");
            released.push(id);
        }
    }
    Ok(released)
}

/// After a full cycle: writes each dashboard from the status page's data (`status`, as the
/// cycle just recorded it) and what `cycle` refused; closes those turned off.
pub async fn keep(
    repositories: &[RepositoryConfig],
    shared: &Shared,
    cycle: Option<&Cycle>,
    now: jiff::Timestamp,
) {
    let state = shared.state.as_deref();
    let status = shared.status.status(state);
    let refused = cycle
        .map(|c| super::notify::derive::refused(c, now))
        .unwrap_or_default();
    for repo in concerned(repositories, state) {
        let result = if repo.write.dashboard {
            let refused: Vec<String> = refused
                .iter()
                .filter(|n| n.repository.as_deref() == Some(&repo.name))
                .map(|n| {
                    format!(
                        "{} {}: {} — {}",
                        n.policy.as_deref().unwrap_or("?"),
                        n.image.as_deref().unwrap_or(""),
                        n.to.as_deref().unwrap_or("?"),
                        n.why.as_deref().unwrap_or("refused")
                    )
                })
                .collect();
            write(repo, state, &board(&repo.name, &status, refused)).await
        } else {
            close(repo, state).await
        };
        if let Err(e) = result {
            warn(&e);
        }
    }
}

/// What `status` shows of `repository`.
fn board<'a>(repository: &'a str, status: &'a Status, refused: Vec<String>) -> Board<'a> {
    let ours = |r: &Option<String>| r.as_deref() == Some(repository);
    let prefix = format!("{repository}: ");
    Board {
        repository,
        pending: status
            .fields
            .iter()
            .filter(|f| ours(&f.repository) && f.state != "up to date")
            .collect(),
        pull_requests: status
            .pull_requests
            .iter()
            .filter(|p| p.repository == repository)
            .collect(),
        holds: status
            .holds
            .iter()
            .filter(|h| ours(&h.repository))
            .map(|h| (h.id.clone(), h))
            .collect(),
        promotions: status
            .promotions
            .iter()
            .filter(|p| ours(&p.repository))
            .collect(),
        refused,
        // The status page's problems begin with their repository's name.
        problems: status
            .problems
            .iter()
            .filter(|p| p.starts_with(&prefix))
            .map(String::as_str)
            .collect(),
    }
}

async fn write(
    repo: &RepositoryConfig,
    state: Option<&State>,
    board: &Board<'_>,
) -> Result<(), DashboardError> {
    let forge = forge_of(repo).await?;
    let forge_error = |source| DashboardError::Forge {
        repository: repo.name.clone(),
        source,
    };
    let text = body::render(board);
    let number = match existing(&forge, &repo.name, state)
        .await
        .map_err(forge_error)?
    {
        Some(issue) if issue.body == text => issue.number,
        Some(issue) => {
            forge
                .edit_issue(issue.number, &text)
                .await
                .map_err(forge_error)?;
            issue.number
        }
        None => {
            let issue = forge
                .create_issue(body::TITLE, &text)
                .await
                .map_err(forge_error)?;
            tracing::info!(repository = %repo.name, issue = issue.number, url = %issue.url, "dashboard issue opened");
            issue.number
        }
    };
    if let Some(state) = state
        && state.dashboard_issue(&repo.name) != Some(number)
    {
        state.record_dashboard_issue(&repo.name, Some(number));
    }
    Ok(())
}

async fn close(repo: &RepositoryConfig, state: Option<&State>) -> Result<(), DashboardError> {
    let Some(state) = state else { return Ok(()) };
    let Some(number) = state.dashboard_issue(&repo.name) else {
        return Ok(());
    };
    let forge = forge_of(repo).await?;
    forge
        .close_issue(number)
        .await
        .map_err(|source| DashboardError::Forge {
            repository: repo.name.clone(),
            source,
        })?;
    tracing::info!(repository = %repo.name, issue = number, "dashboard turned off: its issue closed");
    state.record_dashboard_issue(&repo.name, None);
    Ok(())
}

fn warn(e: &DashboardError) {
    tracing::warn!("{}", crate::error_chain::Chain(e));
}
