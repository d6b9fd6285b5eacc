//! When a cycle first saw an Argo CD Application `Healthy` after its last sync (issue 20): a
//! promotion's Application upstream soaks from then when neither Argo CD
//! (`status.health.lastTransitionTime`) nor a verification of the tag says since when. Kept so
//! that the soak does not start again at every cycle; a cache in the sense that losing it only
//! makes a soak start again later, never earlier.

use jiff::Timestamp;
use redb::{Durability, ReadableTable, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{State, StateError};

/// One record per Application: key `namespace/name`, value the JSON of a [`HealthySince`].
const HEALTHY: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("healthy/v1");

/// An Application running `tag`, seen `Healthy` at `at` after the sync that finished at
/// `synced`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct HealthySince {
    tag: String,
    synced: Option<Timestamp>,
    at: Timestamp,
}

impl State {
    /// When `application`, running `tag` since the sync that finished at `synced`, was first
    /// seen `Healthy`: what an earlier call for the same tag and sync recorded, else `now`,
    /// recorded. `Err` when the store cannot be written.
    pub fn first_seen_healthy(
        &self,
        application: &str,
        tag: &str,
        synced: Option<Timestamp>,
        now: Timestamp,
    ) -> Result<Timestamp, StateError> {
        self.write(
            |txn| {
                let mut table = txn.open_table(HEALTHY)?;
                let earlier = table
                    .get(application)?
                    .and_then(|v| serde_json::from_slice::<HealthySince>(v.value()).ok())
                    .filter(|seen| seen.tag == tag && seen.synced == synced);
                if let Some(seen) = earlier {
                    return Ok(seen.at);
                }
                let seen = HealthySince {
                    tag: tag.to_string(),
                    synced,
                    at: now,
                };
                let value = serde_json::to_vec(&seen).unwrap_or_default();
                table.insert(application, value.as_slice())?;
                Ok(now)
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::HealthyNotRecorded {
            path: self.path.clone(),
            application: application.to_string(),
        })
    }

    /// When `application`, running `tag` since the sync that finished at `synced`, was first
    /// seen `Healthy`, if the store recorded it: [`State::first_seen_healthy`] without the write.
    pub fn seen_healthy_at(
        &self,
        application: &str,
        tag: &str,
        synced: Option<Timestamp>,
    ) -> Option<Timestamp> {
        let value = self.read(HEALTHY, application)?;
        serde_json::from_slice::<HealthySince>(&value)
            .ok()
            .filter(|seen| seen.tag == tag && seen.synced == synced)
            .map(|seen| seen.at)
    }

    /// Forgets when `application` was first seen `Healthy`: it is not now, and its soak starts
    /// again when it is. A failed write is logged: the record it leaves names a sync and a tag,
    /// and counts only while both stay.
    pub fn seen_unhealthy(&self, application: &str) {
        if self.read(HEALTHY, application).is_none() {
            return;
        }
        let _ = self.write(
            |txn| {
                txn.open_table(HEALTHY)?.remove(application)?;
                Ok(())
            },
            Durability::Immediate,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_application_is_healthy_since_it_was_first_seen_so_until_a_new_sync_or_a_relapse() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let at = |s: i64| Timestamp::from_second(1_800_000_000 + s).unwrap();
        let app = "argocd/shop-staging";
        let seen = |tag, synced, now| state.first_seen_healthy(app, tag, synced, now).unwrap();
        assert_eq!(seen("1.2.0", Some(at(0)), at(60)), at(60));
        assert_eq!(seen("1.2.0", Some(at(0)), at(600)), at(60));
        // Another sync, or another tag: seen healthy anew.
        assert_eq!(seen("1.2.0", Some(at(700)), at(800)), at(800));
        assert_eq!(seen("1.3.0", Some(at(700)), at(900)), at(900));
        // Unhealthy in between: its soak starts again.
        state.seen_unhealthy(app);
        assert_eq!(seen("1.3.0", Some(at(700)), at(1000)), at(1000));
    }
}
