//! What a concluded verification leaves for promotions (issue 20): a `path:` or `policy:`
//! upstream soaks from its fields' verification, and one that ended in an error is recorded
//! too, so that a promotion waits on it, named, rather than count the soak from the commit as
//! if no verification had followed the change. A verified promotion's lead time is measured
//! here. Both keep the wall time of the service's clock, the time promotions are decided at.

use jiff::Timestamp;

use super::{Conclusion, Verifier, chain};
use crate::state::PendingVerification;

/// Records the outcome of `pending`'s fields in the store (verified at `wall`, or ended in an
/// error at `wall`) and the lead time of each promotion it verified. A failure is held
/// instead (by `onFailure`), and passes down as a hold.
pub(super) fn record(
    verifier: &Verifier,
    pending: &PendingVerification,
    conclusion: &Conclusion,
    wall: Timestamp,
) {
    if let Conclusion::Verified = conclusion {
        verifier
            .shared
            .metrics
            .record_promotion_lead_times(&pending.fields, wall);
    }
    let Some(state) = &verifier.state else { return };
    let recorded = match conclusion {
        Conclusion::Verified => state.record_verified(pending, wall),
        Conclusion::Error(error) => state.record_verification_error(pending, wall, error),
        Conclusion::Failed(_) => return,
    };
    if let Err(e) = recorded {
        tracing::warn!(
            application = %pending.application,
            error = %chain(&e),
            "a verification's outcome was not recorded for the promotions from its fields"
        );
    }
}
