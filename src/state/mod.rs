//! What `tagpilot run` remembers across restarts, in one embedded database (redb) in the
//! `--state-dir`:
//!
//! - **image metadata by digest** — manifests and the facts tagpilot reads from config blobs
//!   (build time, platform). Digests name immutable content, so nothing is fetched twice, even
//!   after a restart. The registry client reaches this through its
//!   [`MetadataStore`](crate::registry::MetadataStore) trait, implemented here;
//! - **when each tag was first seen**, per registry repository and tag, for `minAge` under
//!   strategies that do not read build times;
//! - **the last proposal per group**, per repository, so a proposal does not move backwards
//!   from one cycle to the next (see `crate::plan::steady`);
//! - **held tags** (`holds.rs`): tags not to propose again for a field (a failed deployment, a
//!   person's rollback, a hold by hand), and the last base-branch tip seen per repository and
//!   branch, from which a person's rollbacks are read;
//! - **verifications under way** (`verifications.rs`): changes being followed into Argo CD
//!   Applications, so a restart resumes them; and the last tag verified per field, from which a
//!   promotion's git upstream soaks (issue 20); and when a cycle first saw an Application
//!   upstream `Healthy` after its sync (`healthy.rs`), from which it soaks when Argo CD does
//!   not say;
//! - **webhook deliveries already handled**, by kind and delivery id, so a registry that sends
//!   a notification again (distribution retries until it gets a 2xx) causes no second re-check;
//! - **notifications already sent** (`notifications.rs`), by sink and event id, so an event is
//!   told once, across restarts.
//!
//! The store is a cache and a memory, never the source of truth: losing it, or finding it
//! corrupt, costs requests and a `minAge` wait, never a wrong update. So its readers get `None`
//! when a read fails, writes that fail are logged and dropped, and a file that cannot be opened
//! as a database is moved aside (`state.redb.corrupt-<time>`) with a warning and made anew.
//! The exceptions are the held tags and the verifications under way (`holds.rs`,
//! `verifications.rs`): their readers answer `Err` ("unknown") rather than "none", their
//! writes are durable at once and return their failure, and a caller that cannot read the
//! holds holds every change it cannot clear.
//! Only two things stop `tagpilot run` from starting here: another process holding the
//! database, and a directory that cannot be written at all.
//!
//! Writes during a cycle are committed without waiting for the disk; [`State::flush`] at the
//! end of a cycle makes them durable. A crash loses at most one cycle's cache.
//!
//! This module stores bytes and answers questions about them. It decides nothing about tags,
//! images or YAML.

mod dashboard;
mod healthy;
mod holds;
mod notifications;
mod verifications;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use redb::{
    Database, DatabaseError, Durability, ReadableDatabase, ReadableTable, TableDefinition,
    TableError,
};

use crate::clock::Clock;
use crate::image::Repository;
use crate::registry::MetadataStore;

/// The database's file name inside the state directory.
pub const STATE_FILE: &str = "state.redb";

/// Manifest bytes by digest.
const MANIFESTS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("manifests/v1");
/// Config facts (JSON the registry client wrote) by config digest.
const CONFIGS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("configs/v1");
/// (registry, repository, tag) → first seen, Unix seconds.
const FIRST_SEEN: TableDefinition<'_, (&str, &str, &str), i64> =
    TableDefinition::new("first_seen/v1");
/// (repository, group) → the last [`Proposal`] as JSON.
const PROPOSALS: TableDefinition<'_, (&str, &str), &[u8]> = TableDefinition::new("proposals/v1");
/// (kind, delivery id) → when it was handled, Unix seconds.
const DELIVERIES: TableDefinition<'_, (&str, &str), i64> = TableDefinition::new("deliveries/v1");
/// `digest|requirement fingerprint` → when its cosign signatures verified (issue 22), as text.
const SIGNATURES: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("signatures/v1");

/// redb's page cache. Its default (1 GiB) is a ceiling, not an allocation, but a daemon that
/// watches a thousand repositories must stay small; lookups here are by key, a few per tag.
const CACHE_BYTES: usize = 4 * 1024 * 1024;

/// Deliveries older than this are forgotten: registries retry within minutes, not days.
const DELIVERY_MEMORY: jiff::SignedDuration = jiff::SignedDuration::from_hours(24 * 7);

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error(
        "another process has the state database {} open; give each tagpilot process its own \
         --state-dir",
        path.display()
    )]
    Locked { path: PathBuf },
    #[error("state directory {}", dir.display())]
    Dir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("state database {}", path.display())]
    Open {
        path: PathBuf,
        #[source]
        source: Box<redb::Error>,
    },
    #[error("state database {}: could not move the unreadable file aside", path.display())]
    MoveAside {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The held tags cannot be read: the caller must hold what it cannot clear.
    #[error("state database {}: the held tags cannot be read", path.display())]
    HoldsUnknown { path: PathBuf },
    #[error("state database {}: the hold on {field} was not recorded", path.display())]
    HoldNotRecorded { path: PathBuf, field: String },
    /// The verifications under way cannot be read: a restart cannot resume them.
    #[error("state database {}: the verifications under way cannot be read", path.display())]
    VerificationsUnknown { path: PathBuf },
    #[error("state database {}: the verification {verification} was not recorded", path.display())]
    VerificationNotRecorded { path: PathBuf, verification: String },
    #[error(
        "state database {}: when Application {application} was first seen Healthy was not \
         recorded",
        path.display()
    )]
    HealthyNotRecorded { path: PathBuf, application: String },
}

impl StateError {
    /// A bounded label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StateError::Locked { .. } => "state_locked",
            StateError::Dir { .. } => "state_dir",
            StateError::Open { .. } => "state_open",
            StateError::MoveAside { .. } => "state_move_aside",
            StateError::HoldsUnknown { .. } => "state_holds_unknown",
            StateError::HoldNotRecorded { .. } => "state_hold_not_recorded",
            StateError::VerificationsUnknown { .. } => "state_verifications_unknown",
            StateError::VerificationNotRecorded { .. } => "state_verification_not_recorded",
            StateError::HealthyNotRecorded { .. } => "state_healthy_not_recorded",
        }
    }
}

pub use self::verifications::{PendingVerification, VerifiedField, VerifiedTag};
/// What was last proposed for one group of one repository: the change model's.
pub use crate::change::{Proposal, ProposedChange};

/// The state database of one `--state-dir`.
pub struct State {
    /// `None` while down: the handle that met an I/O error is dropped, so that redb's lock on
    /// the file is released for [`State::recover`] to open it again.
    db: RwLock<Option<Database>>,
    path: PathBuf,
    /// An I/O error made the store unusable; cleared by a successful [`State::recover`].
    down: AtomicBool,
    /// A write failed this cycle; said once per cycle, not once per write.
    warned: Mutex<bool>,
    /// What stamps are read from: deliveries, verified signatures, a file moved aside.
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State").field("path", &self.path).finish()
    }
}

impl State {
    /// Opens (or creates) the database in `dir`. A file that is not a readable database is
    /// moved aside with a warning and replaced by an empty one; a database another process
    /// holds is an error.
    pub fn open(dir: &Path) -> Result<State, StateError> {
        State::open_with_clock(dir, crate::clock::system())
    }

    /// [`State::open`], stamping by `clock` (the service's).
    pub fn open_with_clock(dir: &Path, clock: Arc<dyn Clock>) -> Result<State, StateError> {
        std::fs::create_dir_all(dir).map_err(|source| StateError::Dir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let path = dir.join(STATE_FILE);
        let db = open_or_replace(&path, clock.wall())?;
        let state = State {
            db: RwLock::new(Some(db)),
            path,
            down: AtomicBool::new(false),
            warned: Mutex::new(false),
            clock,
        };
        state.forget_old_deliveries();
        state.forget_old_notifications();
        Ok(state)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the store works: `false` from an I/O error until [`State::recover`] succeeds.
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Relaxed)
    }

    /// When the store is down, opens its file again (or, when the file reads as no database
    /// now, moves it aside and makes a new one). Returns whether the store is up; costs nothing
    /// when it was.
    pub fn recover(&self) -> bool {
        if self.is_up() {
            return true;
        }
        let mut db = self.db.write().unwrap_or_else(|e| e.into_inner());
        // Another caller may have recovered it while this one waited for the lock.
        if self.is_up() {
            return true;
        }
        // The failed handle holds redb's lock on the file: it goes first.
        *db = None;
        match open_or_replace(&self.path, self.clock.wall()) {
            Ok(fresh) => {
                *db = Some(fresh);
                self.down.store(false, Ordering::Relaxed);
                tracing::info!(file = %self.path.display(), "the state database works again");
                true
            }
            Err(e) => {
                tracing::debug!(
                    file = %self.path.display(),
                    error = %crate::error_chain::Chain(&e),
                    "the state database cannot be opened again yet"
                );
                false
            }
        }
    }

    /// Makes every write so far durable. Called at the end of each cycle; a store that is
    /// down is tried again first.
    pub fn flush(&self) {
        self.recover();
        let _ = self.write(|_| Ok(()), Durability::Immediate);
        *self.warned.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }

    /// Whether the delivery `id` of webhook `kind` was handled before; records it if not. A
    /// store that cannot answer says "not seen": a second re-check is harmless, a lost one is
    /// not.
    pub fn seen_delivery(&self, kind: &str, id: &str) -> bool {
        let now = self.clock.wall().as_second();
        let result = self.write(
            |txn| {
                let mut table = txn.open_table(DELIVERIES)?;
                let seen = table.get((kind, id))?.is_some();
                if !seen {
                    table.insert((kind, id), now)?;
                }
                Ok(seen)
            },
            Durability::None,
        );
        result.unwrap_or(false)
    }

    /// The last proposal recorded for `group` of `repository`.
    pub fn last_proposal(&self, repository: &str, group: &str) -> Option<Proposal> {
        let bytes = self.read(PROPOSALS, (repository, group))?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Records what was just proposed for `group` of `repository`.
    pub fn record_proposal(&self, repository: &str, group: &str, proposal: &Proposal) {
        let Ok(json) = serde_json::to_vec(proposal) else {
            return;
        };
        let _ = self.write(
            |txn| {
                txn.open_table(PROPOSALS)?
                    .insert((repository, group), json.as_slice())?;
                Ok(())
            },
            Durability::None,
        );
    }

    /// Forgets what is no longer proposed for `group` of `repository`.
    pub fn forget_proposal(&self, repository: &str, group: &str) {
        let _ = self.write(
            |txn| {
                txn.open_table(PROPOSALS)?.remove((repository, group))?;
                Ok(())
            },
            Durability::None,
        );
    }

    fn forget_old_deliveries(&self) {
        let cutoff = (self.clock.wall() - DELIVERY_MEMORY).as_second();
        let _ = self.write(
            |txn| {
                txn.open_table(DELIVERIES)?.retain(|_, at| at >= cutoff)?;
                Ok(())
            },
            Durability::None,
        );
    }

    /// Every record of `table` (JSON values), in key order, for the records that are not a
    /// cache (held tags, verifications under way). A record this version cannot read is
    /// skipped with a warning naming `what`, not a reason to forget the others; `None` when the
    /// store cannot be read at all, so the caller says "unknown", never "none".
    fn records<T: serde::de::DeserializeOwned>(
        &self,
        table: TableDefinition<'_, &'static str, &'static [u8]>,
        what: &str,
    ) -> Option<Vec<T>> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let db = db.as_ref()?;
        let read = || -> Result<Vec<T>, redb::Error> {
            let txn = db.begin_read()?;
            let table = match txn.open_table(table) {
                Ok(t) => t,
                Err(TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(e.into()),
            };
            let mut out = Vec::new();
            for entry in table.iter()? {
                let (_, value) = entry?;
                match serde_json::from_slice::<T>(value.value()) {
                    Ok(record) => out.push(record),
                    Err(e) => {
                        tracing::warn!(file = %self.path.display(), "{what} cannot be read: {e}")
                    }
                }
            }
            Ok(out)
        };
        read()
            .inspect_err(|e| {
                tracing::warn!(file = %self.path.display(), "reading {what}s failed: {e}");
            })
            .ok()
    }

    /// One value by key; `None` when absent or unreadable.
    fn read<'k, K: redb::Key + 'static>(
        &self,
        table: TableDefinition<'_, K, &'static [u8]>,
        key: impl std::borrow::Borrow<K::SelfType<'k>>,
    ) -> Option<Vec<u8>> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let db = db.as_ref()?;
        let result = (|| -> Result<Option<Vec<u8>>, redb::Error> {
            let txn = db.begin_read()?;
            let table = match txn.open_table(table) {
                Ok(t) => t,
                // Nothing was ever written to it.
                Err(TableError::TableDoesNotExist(_)) => return Ok(None),
                Err(e) => return Err(e.into()),
            };
            Ok(table.get(key)?.map(|v| v.value().to_vec()))
        })();
        result.unwrap_or_else(|e| {
            tracing::debug!(file = %self.path.display(), "state read failed: {e}");
            None
        })
    }

    /// One write transaction; `Durability::None` during a cycle (see [`State::flush`]). A
    /// store that is down answers `Err` without trying.
    fn write<T>(
        &self,
        f: impl FnOnce(&redb::WriteTransaction) -> Result<T, redb::Error>,
        durability: Durability,
    ) -> Result<T, ()> {
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let Some(db) = db.as_ref() else {
            return Err(());
        };
        let result = (|| -> Result<T, redb::Error> {
            let mut txn = db.begin_write()?;
            txn.set_durability(durability)?;
            let value = f(&txn)?;
            txn.commit()?;
            Ok(value)
        })();
        result.map_err(|e| self.write_failed(&e))
    }

    fn write_failed(&self, e: &redb::Error) {
        // redb refuses every later transaction of a handle that met an I/O error
        // (`PreviousIo`): the store is down until `recover` opens the file again.
        let io = matches!(
            e,
            redb::Error::Io(_)
                | redb::Error::PreviousIo
                | redb::Error::DatabaseClosed
                | redb::Error::Corrupted(_)
        );
        if io && !self.down.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                file = %self.path.display(),
                "the state database is down after an I/O error ({e}); first-seen times are \
                 unknown until it is opened again, which is tried before each cycle"
            );
            return;
        }
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if !*warned {
            *warned = true;
            tracing::warn!(
                file = %self.path.display(),
                "writing the state database failed ({e}); going on without remembering"
            );
        }
    }

    /// Each of `tags`' first-seen time as stored, without recording anything: what a store
    /// whose writes fail can still say. `None` where unknown.
    fn stored_first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        let (registry, path) = (repo.registry.as_str(), repo.path.as_str());
        let db = self.db.read().unwrap_or_else(|e| e.into_inner());
        let result = db.as_ref().map(|db| {
            (|| -> Result<Vec<Option<jiff::Timestamp>>, redb::Error> {
                let txn = db.begin_read()?;
                let table = txn.open_table(FIRST_SEEN)?;
                tags.iter()
                    .map(|tag| {
                        Ok(table
                            .get((registry, path, *tag))?
                            .and_then(|v| jiff::Timestamp::from_second(v.value()).ok()))
                    })
                    .collect()
            })()
        });
        match result {
            Some(Ok(times)) => times,
            _ => vec![None; tags.len()],
        }
    }
}

impl MetadataStore for State {
    fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        self.read(MANIFESTS, digest)
    }

    fn put_manifest(&self, digest: &str, bytes: &[u8]) {
        let _ = self.write(
            |txn| {
                txn.open_table(MANIFESTS)?.insert(digest, bytes)?;
                Ok(())
            },
            Durability::None,
        );
    }

    fn config(&self, digest: &str) -> Option<Vec<u8>> {
        self.read(CONFIGS, digest)
    }

    fn signature_verified(&self, key: &str) -> bool {
        self.read(SIGNATURES, key).is_some()
    }

    fn put_signature_verified(&self, key: &str) {
        let now = self.clock.wall().to_string();
        let _ = self.write(
            |txn| {
                txn.open_table(SIGNATURES)?.insert(key, now.as_bytes())?;
                Ok(())
            },
            Durability::None,
        );
    }

    fn put_config(&self, digest: &str, facts: &[u8]) {
        let _ = self.write(
            |txn| {
                txn.open_table(CONFIGS)?.insert(digest, facts)?;
                Ok(())
            },
            Durability::None,
        );
    }

    fn first_seen(
        &self,
        repo: &Repository,
        tags: &[&str],
        now: jiff::Timestamp,
    ) -> Vec<Option<jiff::Timestamp>> {
        let (registry, path) = (repo.registry.as_str(), repo.path.as_str());
        let result = self.write(
            |txn| {
                let mut table = txn.open_table(FIRST_SEEN)?;
                let mut out = Vec::with_capacity(tags.len());
                for tag in tags {
                    let known = table.get((registry, path, *tag))?.map(|v| v.value());
                    let seconds = match known {
                        Some(s) => s,
                        None => {
                            table.insert((registry, path, *tag), now.as_second())?;
                            now.as_second()
                        }
                    };
                    out.push(Some(jiff::Timestamp::from_second(seconds).unwrap_or(now)));
                }
                Ok(out)
            },
            Durability::None,
        );
        // A time that cannot be recorded is unknown, not "now": "now" answered every cycle
        // would keep `minAge` waiting for as long as the store fails.
        result.unwrap_or_else(|()| self.stored_first_seen(repo, tags))
    }
}

/// Opens the database at `path`; a file that is not a readable database is moved aside with a
/// warning and replaced by an empty one.
fn open_or_replace(path: &Path, now: jiff::Timestamp) -> Result<Database, StateError> {
    let path = path.to_path_buf();
    match open_checked(&path) {
        Ok(db) => Ok(db),
        Err(Opened::Locked) => Err(StateError::Locked { path }),
        Err(Opened::Io(source)) => Err(StateError::Open {
            path,
            source: Box::new(source),
        }),
        Err(Opened::Unreadable(why)) => {
            let aside = aside_name(&path, now);
            tracing::warn!(
                file = %path.display(),
                moved_to = %aside.display(),
                "the state database is unreadable ({why}); moving it aside and starting \
                 with an empty one: cached metadata is fetched again and first-seen times \
                 start now"
            );
            std::fs::rename(&path, &aside).map_err(|source| StateError::MoveAside {
                path: path.clone(),
                source,
            })?;
            match open_checked(&path) {
                Ok(db) => Ok(db),
                Err(Opened::Locked) => Err(StateError::Locked { path }),
                Err(Opened::Io(source) | Opened::Unreadable(source)) => Err(StateError::Open {
                    path,
                    source: Box::new(source),
                }),
            }
        }
    }
}

/// Why a database could not be opened.
enum Opened {
    /// Another process (or this one) holds it.
    Locked,
    /// The file system refused (permissions, a full disk): not the file's fault.
    Io(redb::Error),
    /// The file is not a database redb can read: corrupt, truncated, another format.
    Unreadable(redb::Error),
}

/// Opens the database and creates its tables, so that a file whose header reads but whose
/// pages do not is found out now rather than on the first lookup.
fn open_checked(path: &Path) -> Result<Database, Opened> {
    let db = Database::builder()
        .set_cache_size(CACHE_BYTES)
        .create(path)
        .map_err(|e| match e {
            DatabaseError::DatabaseAlreadyOpen | DatabaseError::LockProtocolMismatch => {
                Opened::Locked
            }
            DatabaseError::Storage(redb::StorageError::Io(io)) if !is_bad_data(&io) => {
                Opened::Io(redb::Error::Io(io))
            }
            other => Opened::Unreadable(other.into()),
        })?;
    let created = (|| -> Result<(), redb::Error> {
        let txn = db.begin_write()?;
        txn.open_table(MANIFESTS)?;
        txn.open_table(CONFIGS)?;
        txn.open_table(FIRST_SEEN)?;
        txn.open_table(PROPOSALS)?;
        txn.open_table(DELIVERIES)?;
        txn.commit()?;
        Ok(())
    })();
    match created {
        Ok(()) => Ok(db),
        Err(redb::Error::Io(io)) if !is_bad_data(&io) => Err(Opened::Io(redb::Error::Io(io))),
        Err(e) => Err(Opened::Unreadable(e)),
    }
}

/// I/O errors that mean "this file is not what it should be" rather than "the disk refused".
fn is_bad_data(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::InvalidData
    )
}

/// `state.redb.corrupt-20240102T030405Z`, beside the original.
fn aside_name(path: &Path, now: jiff::Timestamp) -> PathBuf {
    let stamp = now.strftime("%Y%m%dT%H%M%SZ").to_string();
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".corrupt-{stamp}"));
    path.with_file_name(name)
}

#[cfg(test)]
mod tests;
