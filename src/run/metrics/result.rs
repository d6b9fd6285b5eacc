//! How a cycle ended, and whether the registries it asked answered: the
//! `tagpilot_cycles_total{result}` label and what decides it.

use crate::engine::{Cycle, EngineError};

/// How a cycle ended, as `tagpilot_cycles_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleResult {
    /// Every target was planned and written.
    Ok,
    /// The cycle ran, but a target failed (a push refused, a patch rejected).
    Partial,
    /// The cycle could not run at all.
    Error,
    /// Shutdown stopped it before every target was done.
    Cancelled,
    /// The cycle ran, but no registry it asked answered: nothing it decided rests on a tag
    /// list, so it is not counted as a success whatever its targets did.
    RegistriesUnreachable,
}

impl CycleResult {
    pub fn of(result: &Result<Cycle, EngineError>) -> Self {
        match result {
            Err(_) => CycleResult::Error,
            Ok(c) if c.cancelled => CycleResult::Cancelled,
            Ok(c) if c.failed => CycleResult::Partial,
            Ok(_) => CycleResult::Ok,
        }
    }

    /// The result of a cycle whose registry requests are `answered`: a cycle that ran, but in
    /// which no registry asked gave an answer, is [`CycleResult::RegistriesUnreachable`].
    pub fn given(self, answered: RegistriesAnswered) -> Self {
        match self {
            CycleResult::Ok | CycleResult::Partial if answered.none_reachable() => {
                CycleResult::RegistriesUnreachable
            }
            other => other,
        }
    }

    pub(crate) fn label(self) -> &'static str {
        match self {
            CycleResult::Ok => "ok",
            CycleResult::Partial => "partial",
            CycleResult::Error => "error",
            CycleResult::Cancelled => "cancelled",
            CycleResult::RegistriesUnreachable => "registries_unreachable",
        }
    }

    pub(super) const ALL: [CycleResult; 5] = [
        CycleResult::Ok,
        CycleResult::Partial,
        CycleResult::Error,
        CycleResult::Cancelled,
        CycleResult::RegistriesUnreachable,
    ];
}

/// How many registries a cycle (or re-check) sent requests to, and how many of them answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistriesAnswered {
    pub asked: usize,
    pub reachable: usize,
}

impl RegistriesAnswered {
    /// Registries were asked, and none answered.
    pub fn none_reachable(self) -> bool {
        self.asked > 0 && self.reachable == 0
    }
}

/// Whether an answer shows the registry reachable: any HTTP status but a 5xx or a 429 (which
/// say it cannot serve now). `unreachable` is no answer at all.
pub(crate) fn reachable(status: &str) -> bool {
    status.parse::<u16>().is_ok_and(|s| s < 500 && s != 429)
}
