//! `tagpilot_holds{reason}`: how many tags are held, by why (a failed verification, a person's
//! rollback, a person's hold), as the state store has them after each full cycle.

use prometheus_client::encoding::EncodeLabelSet;

use super::Metrics;
use crate::holds::{HeldTag, HoldReason};

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct ReasonLabel {
    pub(super) reason: &'static str,
}

impl Metrics {
    /// Sets the gauge to `holds`, every reason shown (zero when none is held for it).
    pub fn set_holds(&self, holds: &[HeldTag]) {
        for reason in HoldReason::LABELS {
            let n = holds.iter().filter(|h| h.reason.label() == reason).count();
            self.after_write
                .holds
                .get_or_create(&ReasonLabel { reason })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::holds::{FieldKey, HeldTag, HoldReason};

    use super::Metrics;

    #[test]
    fn holds_are_counted_by_reason() {
        let metrics = Metrics::new();
        let text = metrics.render();
        assert!(
            text.contains("tagpilot_holds{reason=\"rolled_back\"} 0"),
            "{text}"
        );
        let held = |field: &str, reason: HoldReason| HeldTag {
            key: FieldKey {
                repository: Some("manifests".into()),
                policy: "api".into(),
                file: "deploy.yaml".into(),
                field: field.into(),
            },
            tag: "1.3.0".into(),
            reason,
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
        };
        let rolled = || HoldReason::RolledBack {
            to: "1.2.0".into(),
            commit: "4b825dc642cb".into(),
            author: "Dana".into(),
        };
        metrics.set_holds(&[
            held("a", rolled()),
            held("b", rolled()),
            held("c", HoldReason::Manual { by: "Dana".into() }),
        ]);
        let text = metrics.render();
        assert!(
            text.contains("tagpilot_holds{reason=\"rolled_back\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("tagpilot_holds{reason=\"manual\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("tagpilot_holds{reason=\"failed\"} 0"),
            "{text}"
        );
    }
}
