//! The notifications already sent, by sink and event id (issue 33): a cycle finds the same
//! pull request open, the same candidate refused, the same promotion waiting, again and again;
//! each is told once, and a restart does not tell it again. A memory in the cache's sense:
//! losing it costs a repeated message, never a lost one, so its reads answer "not sent" when
//! the store cannot answer.

use redb::{Durability, ReadableDatabase, TableDefinition, TableError};

use super::State;

/// (sink, event id) → when it was sent, Unix seconds.
const SENT: TableDefinition<'_, (&str, &str), i64> = TableDefinition::new("notifications-sent/v1");

/// Sent events older than this are forgotten: what is still true a month later (a hold that
/// stands) may be told again.
const SENT_MEMORY: jiff::SignedDuration = jiff::SignedDuration::from_hours(24 * 30);

impl State {
    /// Whether event `id` was sent to `sink` before. A read: asking must never write (nor
    /// create the table) on a disk that may be full.
    pub fn notification_sent(&self, sink: &str, id: &str) -> bool {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let Some(db) = db.as_ref() else {
            return false;
        };
        let sent = (|| -> Result<bool, redb::Error> {
            let txn = db.begin_read()?;
            let table = match txn.open_table(SENT) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(false),
                Err(e) => return Err(e.into()),
            };
            Ok(table.get((sink, id))?.is_some())
        })();
        sent.unwrap_or(false)
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
    /// Nothing at all before the first notification is recorded: a store opened on a full disk
    /// must not take a commit for a table it does not need yet.
    pub(super) fn forget_old_notifications(&self) {
        if !self.notification_sent_any() {
            return;
        }
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

impl State {
    /// Whether any notification was ever recorded.
    fn notification_sent_any(&self) -> bool {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        db.as_ref()
            .and_then(|db| db.begin_read().ok())
            .is_some_and(|txn| txn.open_table(SENT).is_ok())
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
