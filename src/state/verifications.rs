//! Verifications under way (issue 19): each change that reached a base branch and is being
//! followed to a healthy Argo CD Application, kept so that a restart resumes following it
//! instead of forgetting a change that may yet fail. Like the holds, not a cache: writes are
//! durable at once, and a read that fails says so.

use std::time::Duration;

use jiff::Timestamp;
use redb::{Durability, TableDefinition};
use serde::{Deserialize, Serialize};

use super::{State, StateError};
use crate::config::verify::OnFailure;
use crate::holds::FieldKey;

/// One record per (Application, commit): key `namespace/name commit`, value the JSON of a
/// [`PendingVerification`].
const VERIFICATIONS: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("verifications/v1");

/// A change being followed in one Application.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingVerification {
    /// `namespace/name` of the Application followed.
    pub application: String,
    /// `repositories[].name` the change was written to.
    pub repository: String,
    /// The commit that reached the base branch (pushed, or a pull request's merge).
    pub commit: String,
    /// Where the `tagpilot/verify` status goes: the pushed commit, or a pull request's head.
    pub status_commit: String,
    /// When the change reached the base branch: the timeout counts from here.
    pub since: Timestamp,
    /// The longest `verify.timeout` of the fields' policies (or repository).
    #[serde(with = "humantime_serde_secs")]
    pub timeout: Duration,
    /// Each field the change moved, and to which tag.
    pub fields: Vec<VerifiedField>,
}

/// One field of a change: what a failure holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedField {
    pub key: FieldKey,
    /// The image repository the policy follows, and the field's line when written: what a
    /// revert's description names.
    #[serde(default)]
    pub image: String,
    #[serde(default)]
    pub line: usize,
    pub from: String,
    pub to: String,
    /// What a failure does to this field (its policy's `verify.onFailure`, else its
    /// repository's).
    pub on_failure: OnFailure,
    /// For a promotion (issue 20): since when its upstreams ran the tag healthy, so that its
    /// verification here measures the promotion's lead time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub promoted_at: Option<Timestamp>,
}

impl PendingVerification {
    fn key(&self) -> String {
        format!("{} {}", self.application, self.commit)
    }
}

/// As `plan` lists a verification under way: `argocd/shop-api: manifests 8f2c1d0 since
/// 2026-11-25T10:00:00Z (timeout 15m): api apps/api/deployment.yaml 1.0.0 → 1.1.0 (hold)`.
impl std::fmt::Display for PendingVerification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = self.commit.get(..7).unwrap_or(&self.commit);
        write!(
            f,
            "{}: {} {short} since {} (timeout {}):",
            self.application,
            self.repository,
            self.since,
            humantime::format_duration(self.timeout)
        )?;
        for (i, field) in self.fields.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(
                f,
                "{sep}{} {} {} → {} ({})",
                field.key.policy,
                field.key.file,
                field.from,
                field.to,
                field.on_failure.as_str()
            )?;
        }
        Ok(())
    }
}

/// Seconds in the record, so it reads the same in every version.
mod humantime_serde_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(d.as_secs())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_secs)
    }
}

impl State {
    /// Every verification under way, ordered by Application and commit. `Err` when the store
    /// cannot be read.
    pub fn verifications(&self) -> Result<Vec<PendingVerification>, StateError> {
        self.records(VERIFICATIONS, "a verification under way")
            .ok_or_else(|| StateError::VerificationsUnknown {
                path: self.path.clone(),
            })
    }

    /// Records a verification under way (replacing one for the same Application and commit);
    /// durable on return.
    pub fn start_verification(&self, pending: &PendingVerification) -> Result<(), StateError> {
        let key = pending.key();
        let value = serde_json::to_vec(pending).unwrap_or_default();
        self.write(
            |txn| {
                txn.open_table(VERIFICATIONS)?
                    .insert(key.as_str(), value.as_slice())?;
                Ok(())
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::VerificationNotRecorded {
            path: self.path.clone(),
            verification: key,
        })
    }

    /// Forgets a verification that concluded; durable on return.
    pub fn end_verification(&self, pending: &PendingVerification) -> Result<(), StateError> {
        let key = pending.key();
        self.write(
            |txn| {
                txn.open_table(VERIFICATIONS)?.remove(key.as_str())?;
                Ok(())
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::VerificationNotRecorded {
            path: self.path.clone(),
            verification: key,
        })
    }
}

/// The last tag whose verification ended verified, or ended in an error, per field (issue 20:
/// a promotion's `path:` or `policy:` upstream is verified once its change is, and never
/// counts as verified when it could not be): key the field as JSON, value the JSON of a
/// [`VerifiedTag`]. One record per field, so it never grows past the fields; a later
/// verification of the field replaces it.
const VERIFIED: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("verified/v1");

/// A field's tag, verified at `at` in an Application, or (`error`) whose verification ended
/// at `at` without a verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerifiedTag {
    pub key: FieldKey,
    pub tag: String,
    pub at: Timestamp,
    /// Why the verification could not conclude (its Application could not be followed);
    /// `None` when it ended verified. Absent in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl State {
    /// Records that every field of `pending` was verified at `at`; durable on return.
    pub fn record_verified(
        &self,
        pending: &PendingVerification,
        at: Timestamp,
    ) -> Result<(), StateError> {
        self.record_outcome(pending, at, None)
    }

    /// Records that the verification of every field of `pending` ended in an error at `at`,
    /// replacing an earlier verified record of the field: durable on return.
    pub fn record_verification_error(
        &self,
        pending: &PendingVerification,
        at: Timestamp,
        error: &str,
    ) -> Result<(), StateError> {
        self.record_outcome(pending, at, Some(error))
    }

    fn record_outcome(
        &self,
        pending: &PendingVerification,
        at: Timestamp,
        error: Option<&str>,
    ) -> Result<(), StateError> {
        let records: Vec<(String, Vec<u8>)> = pending
            .fields
            .iter()
            .map(|f| {
                let verified = VerifiedTag {
                    key: f.key.clone(),
                    tag: f.to.clone(),
                    at,
                    error: error.map(str::to_string),
                };
                let key = serde_json::to_string(&f.key).unwrap_or_default();
                (key, serde_json::to_vec(&verified).unwrap_or_default())
            })
            .collect();
        self.write(
            |txn| {
                let mut table = txn.open_table(VERIFIED)?;
                for (key, value) in &records {
                    table.insert(key.as_str(), value.as_slice())?;
                }
                Ok(())
            },
            Durability::Immediate,
        )
        .map_err(|()| StateError::VerificationNotRecorded {
            path: self.path.clone(),
            verification: pending.key(),
        })
    }

    /// The last tag verified of each field, or whose verification ended in an error. `Err`
    /// when the store cannot be read.
    pub fn verified_tags(&self) -> Result<Vec<VerifiedTag>, StateError> {
        self.records(VERIFIED, "a verified tag")
            .ok_or_else(|| StateError::VerificationsUnknown {
                path: self.path.clone(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(application: &str, commit: &str) -> PendingVerification {
        PendingVerification {
            application: application.to_string(),
            repository: "manifests".to_string(),
            commit: commit.to_string(),
            status_commit: commit.to_string(),
            since: Timestamp::from_second(1_800_000_000).unwrap(),
            timeout: Duration::from_secs(900),
            fields: vec![VerifiedField {
                key: FieldKey {
                    repository: Some("manifests".to_string()),
                    policy: "api".to_string(),
                    file: "apps/api.yaml".to_string(),
                    field: "Deployment/api container api".to_string(),
                },
                image: "registry.example/api".to_string(),
                line: 10,
                from: "1.0.0".to_string(),
                to: "1.1.0".to_string(),
                on_failure: OnFailure::Hold,
                promoted_at: None,
            }],
        }
    }

    #[test]
    fn a_verification_under_way_reads_as_plan_lists_it() {
        assert_eq!(
            pending("argocd/api", "8f2c1d0a9b").to_string(),
            "argocd/api: manifests 8f2c1d0 since 2027-01-15T08:00:00Z (timeout 15m): api apps/api.yaml 1.0.0 → 1.1.0 (hold)"
        );
    }

    #[test]
    fn verifications_under_way_survive_a_reopen_until_they_end() {
        let dir = tempfile::tempdir().unwrap();
        let a = pending("argocd/api", "aaaa");
        let b = pending("argocd/web", "bbbb");
        {
            let state = State::open(dir.path()).unwrap();
            assert_eq!(state.verifications().unwrap(), vec![]);
            state.start_verification(&a).unwrap();
            state.start_verification(&b).unwrap();
        }
        let state = State::open(dir.path()).unwrap();
        assert_eq!(state.verifications().unwrap(), vec![a.clone(), b.clone()]);
        state.end_verification(&a).unwrap();
        drop(state);
        let state = State::open(dir.path()).unwrap();
        assert_eq!(state.verifications().unwrap(), vec![b]);
    }

    #[test]
    fn a_verified_tag_is_kept_per_field_the_newest_replacing_the_last() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        assert_eq!(state.verified_tags().unwrap(), vec![]);
        let first = pending("argocd/api", "aaaa");
        let at = Timestamp::from_second(1_800_000_600).unwrap();
        state.record_verified(&first, at).unwrap();
        let mut second = pending("argocd/api", "bbbb");
        second.fields[0].to = "1.2.0".into();
        let later = Timestamp::from_second(1_800_001_200).unwrap();
        state.record_verified(&second, later).unwrap();
        drop(state);
        let state = State::open(dir.path()).unwrap();
        assert_eq!(
            state.verified_tags().unwrap(),
            vec![VerifiedTag {
                key: second.fields[0].key.clone(),
                tag: "1.2.0".into(),
                at: later,
                error: None,
            }]
        );
    }

    #[test]
    fn a_verification_that_ended_in_an_error_is_kept_until_a_later_one_ends_verified() {
        let dir = tempfile::tempdir().unwrap();
        let state = State::open(dir.path()).unwrap();
        let change = pending("argocd/api", "aaaa");
        let at = Timestamp::from_second(1_800_000_600).unwrap();
        state.record_verified(&change, at).unwrap();
        let failed_at = Timestamp::from_second(1_800_000_900).unwrap();
        let error = "Application argocd/api was deleted while its change was being verified";
        state
            .record_verification_error(&change, failed_at, error)
            .unwrap();
        drop(state);
        let state = State::open(dir.path()).unwrap();
        let errored = VerifiedTag {
            key: change.fields[0].key.clone(),
            tag: "1.1.0".into(),
            at: failed_at,
            error: Some(error.into()),
        };
        assert_eq!(state.verified_tags().unwrap(), vec![errored]);
        let later = Timestamp::from_second(1_800_001_200).unwrap();
        state.record_verified(&change, later).unwrap();
        let verified = state.verified_tags().unwrap();
        assert_eq!(
            (verified[0].at, verified[0].error.as_deref()),
            (later, None)
        );
    }

    #[test]
    fn a_verified_record_written_before_errors_were_kept_reads_as_verified() {
        let old = r#"{"key":{"repository":"manifests","policy":"api","file":"apps/api.yaml","field":"Deployment/api container api"},"tag":"1.1.0","at":"2027-01-15T08:10:00Z"}"#;
        let read: VerifiedTag = serde_json::from_str(old).unwrap();
        assert_eq!(read.error, None);
    }
}
