//! What the registry client keeps for cosign signatures (issue 22) and what a verification
//! concludes: the verdicts, their errors and the counts for metrics. Apart from the
//! verification itself (`signatures.rs`) so that the client's state (`state.rs`) holds it
//! without importing the code that fills it.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use serde::{Deserialize, Serialize};
use sigstore::trust::sigstore::SigstoreTrustRoot;
use tokio::sync::OnceCell;

use super::RegistryError;
use crate::config::signatures::Requirement;
use crate::image::Repository;

/// What the signatures of one digest say under one requirement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SignatureVerdict {
    /// No `signatures:` applies to the image.
    NotRequired,
    /// A signature verified with a key or identity of the requirement (`by` names which).
    Verified { by: String },
    /// No signature at all (no `.sig` tag, no bundle among the referrers).
    Unsigned,
    /// Signatures were found, but none verified with the requirement's keys or identities.
    /// `signer`: the first keyless signature's signer and why it did not count ("signed by
    /// identity … issued by …, but the policy wants …"), when one was found.
    Untrusted {
        found: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signer: Option<String>,
    },
    /// A `.sig` signature a required key made carries a Rekor bundle that does not verify
    /// with the trust root (`why` completes "its Rekor bundle …"), and nothing else verified.
    LogRefused { key: String, why: String },
    /// A Sigstore bundle was found that tagpilot cannot verify (`why`: a shape the `sigstore`
    /// crate cannot check, such as a Rekor v2 entry), and no other signature verified
    /// (`found` of them did not).
    Unverifiable { why: String, found: usize },
}

impl SignatureVerdict {
    /// Whether a tag with this verdict may be chosen.
    pub fn passes(&self) -> bool {
        matches!(
            self,
            SignatureVerdict::NotRequired | SignatureVerdict::Verified { .. }
        )
    }

    /// The metric label of a verification's result.
    pub fn label(&self) -> &'static str {
        match self {
            SignatureVerdict::NotRequired => "not_required",
            SignatureVerdict::Verified { .. } => "verified",
            SignatureVerdict::Unsigned => "unsigned",
            // A signature found that is not trusted: counted with the untrusted ones.
            SignatureVerdict::Untrusted { .. } | SignatureVerdict::LogRefused { .. } => "untrusted",
            SignatureVerdict::Unverifiable { .. } => "unverifiable",
        }
    }
}

/// Why a digest's signatures could not be verified at all.
#[derive(Debug, thiserror::Error)]
pub enum SignatureError {
    #[error("reading the trust root {}", path.display())]
    TrustRootFile {
        path: std::path::PathBuf,
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    #[error(
        "fetching Sigstore's trust root from its public TUF repository (set \
         `signatures.trustRoot` in tagpilot.yaml for an air-gapped cluster)"
    )]
    TrustRootTuf {
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    #[error("setting up the cosign client")]
    Client {
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    #[error("fetching the signatures")]
    Fetch {
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    /// The crate's fetch of the `.sig` tag and the referrers, as a whole, took longer than one
    /// request to the registry may (`registries[].timeout`).
    #[error(
        "fetching the signatures took longer than the registry's timeout of {}",
        humantime::format_duration(*timeout)
    )]
    TimedOut { timeout: std::time::Duration },
    /// Looking for signatures the crate did not find, the registry failed (anything but a 404):
    /// whether the image is signed is unknown, not "unsigned".
    #[error("looking for signatures at {what}")]
    Lookup {
        what: String,
        #[source]
        source: RegistryError,
    },
    /// `secret` is `Secret ns/name[key]`, `origin` where the requirement was written.
    #[error(
        "the cosign key in {secret} ({origin}) cannot be read: there is no cluster connection \
         (Secrets are read over the one of `applications.fromCluster`)"
    )]
    KeyWithoutCluster { secret: String, origin: String },
    #[error("reading the cosign key in {secret} ({origin})")]
    KeySecret {
        secret: String,
        origin: String,
        #[source]
        source: Arc<crate::kubernetes::KubeError>,
    },
    #[error("the cosign key in {secret} ({origin}): the Secret has no such key")]
    KeyNotInSecret { secret: String, origin: String },
    #[error("the cosign key in {secret} ({origin})")]
    KeyInSecretUnusable {
        secret: String,
        origin: String,
        #[source]
        source: crate::config::signatures::SignaturesError,
    },
}

/// What the client keeps for signatures: the defaults, the trust root once loaded, the
/// verdicts of this cycle and counts for metrics.
#[derive(Default)]
pub(super) struct SignatureState {
    pub(super) defaults: Vec<(String, Requirement)>,
    pub(super) trust_root_file: Option<std::path::PathBuf>,
    /// Loaded once it loads; a failure (TUF unreachable) is tried again by the next verification.
    pub(super) trust_root: OnceCell<Arc<SigstoreTrustRoot>>,
    pub(super) verdicts: super::memo::Memo<VerdictKey, Result<SignatureVerdict, RegistryError>>,
    /// The sha256 of `trust_root_file`'s content, read once: part of the cache key, so that a
    /// changed trust root verifies again.
    pub(super) trust_root_hash: std::sync::OnceLock<String>,
    pub(super) counts: VerdictCounts,
    /// The cluster connection `secret:` keys are read over (`applications.fromCluster`'s).
    pub(super) cluster: Option<crate::kubernetes::Cluster>,
    /// Secrets holding keys, by namespace and name, read once per cycle.
    pub(super) secrets: super::memo::Memo<(String, String), SecretRead>,
}

/// One Secret as read this cycle (it is kept whole only until the cycle ends).
pub(super) type SecretRead =
    Result<Arc<k8s_openapi::api::core::v1::Secret>, Arc<crate::kubernetes::KubeError>>;

/// Repository, digest, fingerprint of the requirement (and trust root).
pub(super) type VerdictKey = (Repository, String, String);

#[derive(Default)]
pub(super) struct VerdictCounts {
    pub(super) verified: AtomicU64,
    pub(super) unsigned: AtomicU64,
    pub(super) untrusted: AtomicU64,
    pub(super) unverifiable: AtomicU64,
    pub(super) error: AtomicU64,
    pub(super) cached: AtomicU64,
}

/// How many verifications ended how, for metrics: `verified`, `unsigned`, `untrusted`,
/// `unverifiable`, `error`, and `cached` for verdicts answered from the state store.
pub type VerificationCounts = Vec<(&'static str, u64)>;
