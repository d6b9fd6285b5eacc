//! The status page (issue 33): what `tagpilot run` is doing, read-only, on its own port —
//! `GET /ui` as plain HTML and CSS (no script), `GET /ui/status.json` the same data as JSON.
//!
//! Each policy's fields with their current tag, candidate and state, the open pull requests,
//! the promotions waiting and the problems come from the last full cycle, kept here as the
//! loop reports it ([`StatusBoard::record`]); the holds and the verifications under way are
//! read from the state store when asked, so a release or a verdict shows at once; registries
//! and remotes are up or down as their last answers said. Nothing here is a secret: remote
//! URLs are shown without userinfo, and no configuration value that is a credential is kept.

mod page;

use std::collections::VecDeque;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use jiff::Timestamp;
use serde::Serialize;

use crate::engine::Cycle;
use crate::plan::{PromotionStatus, RepositoryStatus};

use super::http::Shared;
use super::metrics::CycleResult;

/// How many cycles and re-checks the page lists.
const CYCLES_SHOWN: usize = 10;

/// What the page shows, as `/ui/status.json` answers it.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Status {
    /// Each field a policy follows, as the last full cycle found it.
    pub fields: Vec<Field>,
    pub pull_requests: Vec<PullRequest>,
    pub verifications: Vec<Verification>,
    pub holds: Vec<Hold>,
    pub promotions: Vec<Promotion>,
    /// Registries and remote repositories, up or down.
    pub endpoints: Vec<Endpoint>,
    /// What stopped a part of the last full cycle.
    pub problems: Vec<String>,
    /// The last cycles and re-checks, newest first.
    pub cycles: Vec<CycleRun>,
    /// When the held tags or verifications could not be read, why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Field {
    pub repository: Option<String>,
    pub policy: String,
    pub image: Option<String>,
    pub file: String,
    pub line: usize,
    pub current: String,
    /// The tag tagpilot wants there, when it is not there yet.
    pub candidate: Option<String>,
    /// `up to date`, `pushed`, `pull request`, `held: …`, `promotion waits`, `failed`.
    pub state: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PullRequest {
    pub repository: String,
    pub group: String,
    pub reference: Option<String>,
    pub url: Option<String>,
    pub status: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verification {
    pub application: String,
    pub repository: String,
    pub commit: String,
    pub since: Timestamp,
    /// `policy: from → to` per field.
    pub changes: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Hold {
    /// The id `tagpilot holds release --id` takes.
    pub id: String,
    pub repository: Option<String>,
    pub policy: String,
    pub file: String,
    pub tag: String,
    pub why: String,
    pub since: Timestamp,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Promotion {
    pub repository: Option<String>,
    pub policy: String,
    pub image: String,
    pub current: String,
    pub tag: Option<String>,
    pub waits: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `registry` or `remote`.
    pub kind: &'static str,
    pub name: String,
    pub up: bool,
    /// Failing since, while down.
    pub since: Option<Timestamp>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CycleRun {
    /// `cycle` or `re-check`.
    pub kind: &'static str,
    pub ended: Timestamp,
    pub took_seconds: f64,
    pub result: &'static str,
    pub changes: usize,
    pub holds: usize,
    pub problems: usize,
}

/// What the loop keeps for the page between requests.
#[derive(Debug, Default)]
pub struct StatusBoard {
    last: RwLock<Kept>,
}

#[derive(Debug, Default)]
struct Kept {
    fields: Vec<Field>,
    pull_requests: Vec<PullRequest>,
    promotions: Vec<Promotion>,
    problems: Vec<String>,
    endpoints: Vec<Endpoint>,
    cycles: VecDeque<CycleRun>,
}

impl StatusBoard {
    /// Keeps what a full cycle (`full`) or a re-check found: a re-check only adds its run to
    /// the list, since it read only part of what the page shows.
    pub fn record(
        &self,
        full: bool,
        result: Result<&Cycle, ()>,
        kind: CycleResult,
        took: Duration,
        endpoints: Vec<Endpoint>,
        now: Timestamp,
    ) {
        let mut kept = self.last.write().unwrap_or_else(|e| e.into_inner());
        let (changes, holds, problems) = result.map_or((0, 0, 0), |c| {
            let p = &c.plan;
            (p.changes.len(), p.holds.len(), p.problems.len())
        });
        kept.cycles.push_front(CycleRun {
            kind: if full { "cycle" } else { "re-check" },
            ended: now,
            took_seconds: took.as_secs_f64(),
            result: kind.label(),
            changes,
            holds,
            problems,
        });
        kept.cycles.truncate(CYCLES_SHOWN);
        kept.endpoints = endpoints;
        if let (true, Ok(cycle)) = (full, result) {
            kept.fields = fields(cycle);
            kept.pull_requests = pull_requests(cycle);
            kept.promotions = promotions(cycle);
            kept.problems = cycle.plan.problems.iter().map(problem).collect();
        }
    }

    /// The page's data now: what the last cycle found, with the holds and verifications as
    /// the state store has them.
    pub fn status(&self, state: Option<&crate::state::State>) -> Status {
        let kept = self.last.read().unwrap_or_else(|e| e.into_inner());
        let mut status = Status {
            fields: kept.fields.clone(),
            pull_requests: kept.pull_requests.clone(),
            promotions: kept.promotions.clone(),
            problems: kept.problems.clone(),
            endpoints: kept.endpoints.clone(),
            cycles: kept.cycles.iter().cloned().collect(),
            ..Status::default()
        };
        if let Some(state) = state {
            match state.holds() {
                Ok(holds) => status.holds = holds.iter().map(hold).collect(),
                Err(e) => status
                    .unknown
                    .push(crate::error_chain::Chain(&e).to_string()),
            }
            match state.verifications() {
                Ok(v) => status.verifications = v.iter().map(verification).collect(),
                Err(e) => status
                    .unknown
                    .push(crate::error_chain::Chain(&e).to_string()),
            }
        }
        status
    }
}

fn fields(cycle: &Cycle) -> Vec<Field> {
    let plan = &cycle.plan;
    let mut out = Vec::new();
    for c in &plan.changes {
        let written = c.repository.as_deref().and_then(|name| {
            cycle
                .repositories
                .iter()
                .find(|r| r.repository == name)
                .map(|r| r.status)
        });
        let state = match written {
            Some(RepositoryStatus::Pushed) => "pushed",
            Some(RepositoryStatus::PullRequests) => "pull request",
            Some(RepositoryStatus::Failed) => "failed",
            _ => "proposed",
        };
        out.push(Field {
            repository: c.repository.clone(),
            policy: c.policy.clone(),
            image: Some(c.image.clone()),
            file: c.file.clone(),
            line: c.line,
            current: c.from.clone(),
            candidate: Some(c.to.clone()),
            state: state.to_string(),
        });
    }
    for h in &plan.holds {
        out.push(Field {
            repository: h.repository.clone(),
            policy: h.policy.clone(),
            image: None,
            file: h.file.clone(),
            line: h.line,
            current: h.current.clone(),
            candidate: None,
            state: format!("held: {}", h.reason),
        });
    }
    for c in &plan.claims {
        out.push(Field {
            repository: None,
            policy: c.policy.clone(),
            image: Some(c.image.clone()),
            file: c.file.clone(),
            line: c.line,
            current: c.current.clone(),
            candidate: None,
            state: "up to date".to_string(),
        });
    }
    out.sort_by(|a, b| {
        (&a.repository, &a.policy, &a.file, a.line).cmp(&(
            &b.repository,
            &b.policy,
            &b.file,
            b.line,
        ))
    });
    out
}

fn pull_requests(cycle: &Cycle) -> Vec<PullRequest> {
    cycle
        .repositories
        .iter()
        .flat_map(|r| {
            r.pull_requests
                .iter()
                .filter(|pr| pr.number.is_some() && !pr.status.starts_with("closed"))
                .map(|pr| PullRequest {
                    repository: r.repository.clone(),
                    group: pr.group.clone(),
                    reference: pr.reference.clone(),
                    url: pr.url.clone(),
                    status: pr.status.clone(),
                })
        })
        .collect()
}

fn promotions(cycle: &Cycle) -> Vec<Promotion> {
    cycle
        .plan
        .promotions
        .iter()
        .filter(|p| p.status == PromotionStatus::Waits)
        .map(|p| Promotion {
            repository: p.repository.clone(),
            policy: p.policy.clone(),
            image: p.image.clone(),
            current: p.current.clone(),
            tag: p.tag.clone(),
            waits: p.waits.clone(),
        })
        .collect()
}

fn problem(p: &crate::plan::Problem) -> String {
    let mut text = String::new();
    for part in [
        p.repository.as_deref(),
        p.policy.as_deref(),
        p.image.as_deref(),
    ]
    .into_iter()
    .flatten()
    {
        text.push_str(part);
        text.push_str(": ");
    }
    text.push_str(&p.reason.to_string());
    text
}

fn hold(h: &crate::holds::HeldTag) -> Hold {
    Hold {
        id: h.key.id(),
        repository: h.key.repository.clone(),
        policy: h.key.policy.clone(),
        file: h.key.file.clone(),
        tag: h.tag.clone(),
        why: h.reason.to_string(),
        since: h.since,
    }
}

fn verification(v: &crate::state::PendingVerification) -> Verification {
    Verification {
        application: v.application.clone(),
        repository: v.repository.clone(),
        commit: v.commit.clone(),
        since: v.since,
        changes: v
            .fields
            .iter()
            .map(|f| format!("{}: {} → {}", f.key.policy, f.from, f.to))
            .collect(),
    }
}

/// `GET /ui/status.json`.
pub(super) async fn json(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    axum::Json(shared.status.status(shared.state.as_deref()))
}

/// `GET /ui`.
pub(super) async fn html(State(shared): State<Arc<Shared>>) -> impl IntoResponse {
    let status = shared.status.status(shared.state.as_deref());
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page::render(&status),
    )
}
