//! The dashboard issue of each manifest repository (issue 33), by number: it is edited in
//! place every cycle and closed when the repository opts out, never opened twice. Losing this
//! costs a search of the open issues for tagpilot's marker, never a second issue.

use redb::{Durability, TableDefinition};

use super::State;

/// Repository name → the issue's number, as decimal text.
const ISSUES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("dashboard-issues/v1");

impl State {
    /// The number of `repository`'s dashboard issue; `None` when none is known (or the store
    /// cannot answer).
    pub fn dashboard_issue(&self, repository: &str) -> Option<u64> {
        let bytes = self.read(ISSUES, repository)?;
        std::str::from_utf8(&bytes).ok()?.parse().ok()
    }

    /// Remembers `repository`'s dashboard issue, or (`None`) forgets it once closed. Returns
    /// whether the store took it.
    pub fn record_dashboard_issue(&self, repository: &str, number: Option<u64>) -> bool {
        self.write(
            |txn| {
                let mut table = txn.open_table(ISSUES)?;
                match number {
                    Some(n) => {
                        table.insert(repository, n.to_string().as_bytes())?;
                    }
                    None => {
                        table.remove(repository)?;
                    }
                }
                Ok(())
            },
            Durability::Immediate,
        )
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dashboard_issue_is_remembered_across_a_reopen_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        {
            let state = State::open(dir.path()).unwrap();
            assert_eq!(state.dashboard_issue("deploy"), None);
            assert!(state.record_dashboard_issue("deploy", Some(7)));
        }
        let state = State::open(dir.path()).unwrap();
        assert_eq!(state.dashboard_issue("deploy"), Some(7));
        assert!(state.record_dashboard_issue("deploy", None));
        assert_eq!(state.dashboard_issue("deploy"), None);
    }
}
