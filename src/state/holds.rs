//! Held tags ([`crate::holds`]), kept across restarts. Unlike everything else in the store they
//! are not a cache: a hold forgotten is a failed tag proposed again. So their reads say when
//! they cannot answer (the caller then holds every change it cannot clear, rather than assume
//! there is no hold), and their writes are durable at once.

use redb::{Durability, TableDefinition};

use super::{State, StateError};
use crate::holds::{FieldKey, HeldTag, HoldSelector};

/// One held tag per field: key is the field as JSON (`FieldKey`), value the `HeldTag` as JSON.
const HOLDS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("holds/v1");

impl State {
    /// Every held tag, ordered by field. `Err` when the store cannot be read: holds unknown.
    pub fn holds(&self) -> Result<Vec<HeldTag>, StateError> {
        let mut holds = self
            .records::<HeldTag>(HOLDS, "a held tag")
            .ok_or_else(|| StateError::HoldsUnknown {
                path: self.path.clone(),
            })?;
        holds.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(holds)
    }

    /// Holds a tag for its field, replacing what the field held before; durable on return.
    pub fn hold(&self, held: &HeldTag) -> Result<(), StateError> {
        let key = field_key(&held.key);
        let value = serde_json::to_vec(held).unwrap_or_default();
        self.write(
            |txn| {
                txn.open_table(HOLDS)?
                    .insert(key.as_str(), value.as_slice())?;
                Ok(())
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::HoldNotRecorded {
            path: self.path.clone(),
            field: held.key.to_string(),
        })
    }

    /// Releases the hold `which` names (by id, or by field); returns what it held, `None` when
    /// nothing was held there. Durable on return, like [`State::release`].
    pub fn release_selected(&self, which: &HoldSelector) -> Result<Option<HeldTag>, StateError> {
        let key = match which {
            HoldSelector::Id(id) => {
                let held = self
                    .holds()?
                    .into_iter()
                    .map(|h| h.key)
                    .find(|k| k.id() == *id);
                match held {
                    Some(key) => key,
                    None => return Ok(None),
                }
            }
            HoldSelector::Field(key) => key.clone(),
        };
        self.release(&key)
    }

    /// Releases the hold on `field`; returns what it held, `None` when nothing was held.
    pub fn release(&self, field: &FieldKey) -> Result<Option<HeldTag>, StateError> {
        let key = field_key(field);
        self.write(
            |txn| {
                let mut table = txn.open_table(HOLDS)?;
                let removed = table.remove(key.as_str())?;
                Ok(removed.and_then(|v| serde_json::from_slice(v.value()).ok()))
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::HoldNotRecorded {
            path: self.path.clone(),
            field: field.to_string(),
        })
    }
}

fn field_key(field: &FieldKey) -> String {
    serde_json::to_string(field).unwrap_or_default()
}

/// The base branch tip each repository was last planned on, to read the commits since then for
/// a person's rollbacks: key (repository name, branch), value the commit id as bytes.
const SEEN_TIPS: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("seen-tips/v1");

impl State {
    /// The tip of `branch` of `repository` the last cycle planned on; `None` when never seen (or
    /// unknown: the store is down, and the commits since are then not read this cycle).
    pub fn last_seen_tip(&self, repository: &str, branch: &str) -> Option<String> {
        let bytes = self.read(SEEN_TIPS, (repository, branch))?;
        String::from_utf8(bytes).ok()
    }

    /// Records the tip of `branch` of `repository` this cycle planned on.
    pub fn record_seen_tip(&self, repository: &str, branch: &str, tip: &str) {
        let _ = self.write(
            |txn| {
                txn.open_table(SEEN_TIPS)?
                    .insert((repository, branch), tip.as_bytes())?;
                Ok(())
            },
            Durability::Immediate,
        );
    }
}
