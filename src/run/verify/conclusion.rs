//! How a follow ended, in the terms of what follows it: the verdict, or why there is none,
//! and the step it is on the service's events.

use crate::error_chain::chain;
use crate::run::events::Step;
use crate::verification::{Failure, Verdict};

use super::follow::{FollowError, Followed};

/// How a follow ended, in the terms of what follows it.
pub(super) enum Conclusion {
    Verified,
    Failed(Failure),
    Error(String),
}

impl Conclusion {
    pub(super) fn of(followed: Result<Followed, FollowError>) -> Conclusion {
        match followed {
            Ok(Followed {
                verdict: Verdict::Failed(failure),
                ..
            }) => Conclusion::Failed(failure),
            Ok(Followed {
                verdict: Verdict::Verified,
                ..
            }) => Conclusion::Verified,
            // `follow` never returns `Waiting`.
            Ok(Followed { verdict, .. }) => Conclusion::Error(format!("{verdict:?}")),
            Err(e) => Conclusion::Error(chain(&e)),
        }
    }

    /// The step it is for whoever watches the service's events.
    pub(super) fn step(&self) -> Step {
        match self {
            Conclusion::Verified => Step::Verified,
            Conclusion::Failed(_) => Step::Failed,
            Conclusion::Error(_) => Step::Error,
        }
    }
}
