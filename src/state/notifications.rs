//! The notifications already sent, by sink and event id (issue 33): a cycle finds the same
//! pull request open, the same candidate refused, the same promotion waiting, again and again;
//! each is told once, and a restart does not tell it again. A memory in the cache's sense:
//! losing it costs a repeated message, never a lost one, so its reads answer "not sent" when
//! the store cannot answer.

use redb::{Durability, ReadableTable, TableDefinition};

use super::State;

/// (sink, event id) → when it was sent, Unix seconds.
const SENT: TableDefinition<'_, (&str, &str), i64> = TableDefinition::new("notifications-sent/v1");

/// Sent events older than this are forgotten: what is still true a month later (a hold that
/// stands) may be told again.
const SENT_MEMORY: jiff::SignedDuration = jiff::SignedDuration::from_hours(24 * 30);

impl State {
    /// Whether event `id` was sent to `sink` before.
    pub fn notification_sent(&self, sink: &str, id: &str) -> bool {
        let Ok(read) = self.write(
            |txn| Ok(txn.open_table(SENT)?.get((sink, id))?.is_some()),
            Durability::None,
        ) else {
            return false;
        };
        read
    }

    /// Records that `ids` were sent to `sink`, durably at once: a restart right after the
    /// message must not send it again. Returns whether the record was written.
    pub fn record_notifications_sent(&self, sink: &str, ids: &[&str]) -> bool {
        let now = self.clock.wall().as_second();
        self.write(
            |txn| {
                let mut table = txn.open_table(SENT)?;
                for id in ids {
                    table.insert((sink, *id), now)?;
                }
                Ok(())
            },
            Durability::Immediate,
        )
        .is_ok()
    }

    /// Forgets what was sent longer ago than a month.
    pub(super) fn forget_old_notifications(&self) {
        let cutoff = (self.clock.wall() - SENT_MEMORY).as_second();
        let _ = self.write(
            |txn| {
                txn.open_table(SENT)?.retain(|_, at| at >= cutoff)?;
                Ok(())
            },
            Durability::None,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sent_notification_is_remembered_per_sink_across_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let state = State::open(dir.path()).unwrap();
            assert!(!state.notification_sent("chat", "e1"));
            assert!(state.record_notifications_sent("chat", &["e1", "e2"]));
            assert!(state.notification_sent("chat", "e2"));
            assert!(!state.notification_sent("ci", "e1"));
        }
        let state = State::open(dir.path()).unwrap();
        assert!(state.notification_sent("chat", "e1"));
    }
}
