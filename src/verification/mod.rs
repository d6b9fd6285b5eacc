//! Whether a change that reached a base branch runs healthy in an Argo CD Application: the pure
//! judgement of one observation of the Application's status (issue 19's verification).
//!
//! The order of the checks follows Kargo's Argo CD health checker
//! (`../shared/reference/peers.md`, "Kargo"), with the one difference that tagpilot asks for
//! more than Kargo before it calls a change verified: the last operation must have *succeeded*,
//! not only finished, and the Application's health must be `Healthy`.
//!
//! 1. A status reconciled before its last operation finished is stale: nothing is concluded from
//!    it, and the caller asks Argo CD for a refresh.
//! 2. A `ComparisonError` or `InvalidSpecError` condition fails the change: Argo CD cannot even
//!    render what the change asked for.
//! 3. An operation still running is in progress.
//! 4. The synced revision (`status.sync.revision`, or `revisions[]` for several sources) must
//!    contain the change; until it does, the change is not deployed yet. An operation that failed
//!    or errored on a revision containing the change fails it.
//! 5. Health after that sync: `Healthy` verifies, `Progressing` and `Suspended` (an Argo
//!    Rollouts canary paused at a step) are in progress, `Degraded` (an aborted rollout among
//!    them) and `Missing` fail.
//!
//! Whatever is still in progress when the timeout runs out fails as `TimedOut`, naming what it
//! was waiting for. Nothing here reads the clock, the cluster or git: the caller says which
//! revisions contain the change (git ancestry is an edge's question) and what time it is.

use std::fmt;
use std::time::Duration;

use jiff::Timestamp;
use serde::Deserialize;

/// The part of an Application's `status` (and `operation`) that verification reads; the field
/// names are Argo CD's (`types.go`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// `status.sync.revision`, or every `status.sync.revisions[]` of a multi-source Application.
    pub revisions: Vec<String>,
    /// `status.health.status`: `Healthy`, `Progressing`, `Suspended`, `Degraded`, `Missing`,
    /// `Unknown`.
    pub health: Option<String>,
    /// `status.health.message`, quoted when a change fails.
    pub health_message: Option<String>,
    /// `status.health.lastTransitionTime` (Argo CD 2.14 and later): since when the health is
    /// what it is; what a promotion's soak counts from once it is `Healthy`.
    pub health_since: Option<Timestamp>,
    /// An operation is running: `operation` is set, or `status.operationState` has no
    /// `finishedAt` (or its phase is `Running`/`Terminating`).
    pub operation_running: bool,
    /// The last operation: its phase, message, when it finished and the revisions it synced.
    pub last_operation: Option<Operation>,
    /// `status.reconciledAt`: when the controller last compared live and desired state.
    pub reconciled_at: Option<Timestamp>,
    /// `status.conditions[]`, as (type, message).
    pub conditions: Vec<(String, String)>,
}

/// `status.operationState` of an Application.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Operation {
    /// `Succeeded`, `Failed`, `Error`, `Running`, `Terminating`.
    pub phase: String,
    pub message: Option<String>,
    pub finished_at: Option<Timestamp>,
    /// `syncResult.revision` or `syncResult.revisions[]`, else the revision the operation asked
    /// for (`operation.sync.revision(s)`): what the operation tried to deploy.
    pub revisions: Vec<String>,
}

/// Why an Application could not be read for verification.
#[derive(Debug, thiserror::Error)]
pub enum ObservedError {
    #[error("the Application's status is not an Argo CD Application status")]
    Shape(#[source] serde_json::Error),
    #[error("the Application's {field} `{value}` is not an RFC 3339 time")]
    Time {
        field: &'static str,
        value: String,
        #[source]
        source: jiff::Error,
    },
}

impl Observed {
    /// Reads an Application object (as the Kubernetes API returns it) for verification.
    pub fn from_application(application: &serde_json::Value) -> Result<Self, ObservedError> {
        let raw = RawApplication::deserialize(application).map_err(ObservedError::Shape)?;
        let status = raw.status.unwrap_or_default();
        let sync = status.sync.unwrap_or_default();
        let mut revisions = sync.revisions;
        revisions.extend(sync.revision.filter(|r| !r.is_empty()));
        let (health, health_message, health_since) = match status.health {
            Some(h) => (h.status, h.message, h.last_transition_time),
            None => (None, None, None),
        };
        let requested = raw.operation.as_ref().and_then(|op| op.sync.as_ref());
        let last_operation = match status.operation_state {
            Some(state) => Some(Operation {
                finished_at: parse_time("operationState.finishedAt", state.finished_at)?,
                revisions: state
                    .sync_result
                    .map(|r| r.into_revisions())
                    .filter(|r| !r.is_empty())
                    .or_else(|| {
                        state
                            .operation
                            .and_then(|o| o.sync)
                            .map(|s| s.into_revisions())
                    })
                    .unwrap_or_default(),
                phase: state.phase.unwrap_or_default(),
                message: state.message,
            }),
            None => None,
        };
        let operation_running = requested.is_some()
            || last_operation.as_ref().is_some_and(|op| {
                op.finished_at.is_none() || matches!(op.phase.as_str(), "Running" | "Terminating")
            });
        Ok(Observed {
            revisions,
            health,
            health_message,
            health_since: parse_time("health.lastTransitionTime", health_since)?,
            operation_running,
            last_operation,
            reconciled_at: parse_time("reconciledAt", status.reconciled_at)?,
            conditions: status
                .conditions
                .into_iter()
                .map(|c| (c.kind, c.message.unwrap_or_default()))
                .collect(),
        })
    }
}

fn parse_time(
    field: &'static str,
    value: Option<String>,
) -> Result<Option<Timestamp>, ObservedError> {
    value
        .filter(|v| !v.is_empty())
        .map(|value| {
            value
                .parse::<Timestamp>()
                .map_err(|source| ObservedError::Time {
                    field,
                    value,
                    source,
                })
        })
        .transpose()
}

/// What one observation says about a change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Synced to a revision with the change, its operation succeeded, the status is fresh and
    /// the Application is `Healthy`.
    Verified,
    /// Not concluded yet; the caller keeps watching.
    Waiting(Waiting),
    /// The change broke the Application (or never got healthy in time).
    Failed(Failure),
}

/// What a change is still waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// `reconciledAt` is before the last operation's `finishedAt`: ask Argo CD for a refresh.
    StaleStatus,
    /// An operation is running.
    OperationRunning,
    /// No synced revision contains the change yet.
    NotDeployed,
    /// The sync with the change finished but did not succeed yet (a retry may follow).
    OperationNotSucceeded { phase: String },
    /// Health is `Progressing`, `Suspended` (a paused canary) or not reported yet.
    Health { status: String },
}

/// Why a change failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A `ComparisonError`/`InvalidSpecError` condition.
    Condition { kind: String, message: String },
    /// The operation that deployed the change failed or errored.
    Operation { phase: String, message: String },
    /// Health `Degraded` or `Missing` after the sync.
    Health { status: String, message: String },
    /// Not verified within the timeout; what it was still waiting for.
    TimedOut { after: Duration, waiting: Waiting },
}

/// Judges one observation of an Application after a change reached git at `since`.
/// `contains_change` answers whether a revision (a commit) contains the change.
pub fn judge(
    observed: &Observed,
    contains_change: &dyn Fn(&str) -> bool,
    since: Timestamp,
    now: Timestamp,
    timeout: Duration,
) -> Verdict {
    match judge_once(observed, contains_change) {
        Verdict::Waiting(waiting) if elapsed(since, now) >= timeout => {
            Verdict::Failed(Failure::TimedOut {
                after: timeout,
                waiting,
            })
        }
        verdict => verdict,
    }
}

fn elapsed(since: Timestamp, now: Timestamp) -> Duration {
    Duration::try_from(now.duration_since(since)).unwrap_or(Duration::ZERO)
}

/// The checks in their order (module doc), without the timeout.
fn judge_once(observed: &Observed, contains_change: &dyn Fn(&str) -> bool) -> Verdict {
    let last = observed.last_operation.as_ref();
    // 1. A stale status says nothing about the operation that just finished.
    if let (Some(reconciled), Some(finished)) =
        (observed.reconciled_at, last.and_then(|op| op.finished_at))
        && reconciled < finished
    {
        return Verdict::Waiting(Waiting::StaleStatus);
    }
    // 2. Argo CD cannot render or compare what is in git.
    if let Some((kind, message)) = observed
        .conditions
        .iter()
        .find(|(kind, _)| matches!(kind.as_str(), "ComparisonError" | "InvalidSpecError"))
    {
        return Verdict::Failed(Failure::Condition {
            kind: kind.clone(),
            message: message.clone(),
        });
    }
    // 3. Wait for the operation in flight.
    if observed.operation_running {
        return Verdict::Waiting(Waiting::OperationRunning);
    }
    // 4. The change must be what is synced; a failed attempt to sync it fails it.
    let ours = |revisions: &[String]| revisions.iter().any(|r| contains_change(r));
    if let Some(op) = last.filter(|op| ours(&op.revisions))
        && matches!(op.phase.as_str(), "Failed" | "Error")
    {
        return Verdict::Failed(Failure::Operation {
            phase: op.phase.clone(),
            message: op.message.clone().unwrap_or_default(),
        });
    }
    if !ours(&observed.revisions) {
        return Verdict::Waiting(Waiting::NotDeployed);
    }
    // An auto-sync that has not started yet leaves the last operation on an older revision; a
    // sync with the change that ended otherwise than `Succeeded` may still be retried.
    match last {
        Some(op) if ours(&op.revisions) && op.phase != "Succeeded" => {
            return Verdict::Waiting(Waiting::OperationNotSucceeded {
                phase: op.phase.clone(),
            });
        }
        Some(op) if ours(&op.revisions) => {}
        _ => return Verdict::Waiting(Waiting::NotDeployed),
    }
    // 5. Health after the sync.
    let status = observed.health.clone().unwrap_or_default();
    match status.as_str() {
        "Healthy" => Verdict::Verified,
        "Degraded" | "Missing" => Verdict::Failed(Failure::Health {
            status,
            message: observed.health_message.clone().unwrap_or_default(),
        }),
        _ => Verdict::Waiting(Waiting::Health { status }),
    }
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Waiting::StaleStatus => f.write_str("a status reconciled before the sync finished"),
            Waiting::OperationRunning => f.write_str("the sync in progress"),
            Waiting::NotDeployed => f.write_str("a sync to a revision with the change"),
            Waiting::OperationNotSucceeded { phase } => {
                write!(f, "the sync with the change to succeed (it is {phase})")
            }
            Waiting::Health { status } if status.is_empty() => f.write_str("a health status"),
            Waiting::Health { status } => write!(f, "health Healthy (it is {status})"),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let quoted = |f: &mut fmt::Formatter<'_>, message: &str| {
            if message.is_empty() {
                Ok(())
            } else {
                write!(f, ": {message}")
            }
        };
        match self {
            Failure::Condition { kind, message } => {
                write!(f, "condition {kind}")?;
                quoted(f, message)
            }
            Failure::Operation { phase, message } => {
                write!(f, "the sync with the change ended {phase}")?;
                quoted(f, message)
            }
            Failure::Health { status, message } => {
                write!(f, "health {status} after the sync")?;
                quoted(f, message)
            }
            Failure::TimedOut { after, waiting } => write!(
                f,
                "not healthy within {}; still waiting for {waiting}",
                humantime::format_duration(*after)
            ),
        }
    }
}

#[derive(Deserialize, Default)]
struct RawApplication {
    #[serde(default)]
    operation: Option<RawOperation>,
    #[serde(default)]
    status: Option<RawStatus>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawStatus {
    #[serde(default)]
    sync: Option<RawSync>,
    #[serde(default)]
    health: Option<RawHealth>,
    #[serde(default)]
    operation_state: Option<RawOperationState>,
    #[serde(default)]
    reconciled_at: Option<String>,
    #[serde(default)]
    conditions: Vec<RawCondition>,
}

#[derive(Deserialize, Default)]
struct RawSync {
    #[serde(default)]
    revision: Option<String>,
    #[serde(default)]
    revisions: Vec<String>,
}

impl RawSync {
    fn into_revisions(self) -> Vec<String> {
        let mut all = self.revisions;
        all.extend(self.revision.filter(|r| !r.is_empty()));
        all
    }
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawHealth {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    last_transition_time: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawOperationState {
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    finished_at: Option<String>,
    #[serde(default)]
    sync_result: Option<RawSync>,
    #[serde(default)]
    operation: Option<RawOperation>,
}

#[derive(Deserialize, Default)]
struct RawOperation {
    #[serde(default)]
    sync: Option<RawSync>,
}

#[derive(Deserialize)]
struct RawCondition {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: Option<String>,
}

#[cfg(test)]
mod tests;
