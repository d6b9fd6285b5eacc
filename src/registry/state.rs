//! What a [`RegistryClient`] holds: its caches, its request counters and, per registry host, the
//! rate limiter, the credential and the auth scheme learned so far. Plain data at the bottom of
//! the registry edge: the request layer (`send.rs`, `auth/token.rs`), the questions asked of a
//! registry (`tags.rs`, `digest.rs`, `inspect.rs`) and `client.rs` on top build on it, and it
//! builds on none of them.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use tokio::time::Instant;

use governor::DefaultDirectRateLimiter;
use oci_client::manifest::OciManifest;
use serde::{Deserialize, Serialize};
use tokio::sync::{OnceCell, Semaphore};

use super::RegistryError;
use super::auth::{Credential, CredentialError, CredentialResolver};
use super::memo::Memo;
use super::options::ClientOptions;
use super::store::MetadataStore;
use crate::image::Repository;

/// The registry client tagpilot uses: see the module doc of [`crate::registry`].
///
/// Every cache here is keyed by everything its value depends on: tag lists by repository, tag
/// digests by repository and tag (the `Accept` header is fixed), manifests and configs by
/// repository and digest. What depends on the wanted platforms
/// ([`ImageInfo::created`](super::ImageInfo::created)) is computed per call from those and never
/// cached under a key without them.
pub struct RegistryClient {
    pub(super) http: reqwest::Client,
    pub(super) options: ClientOptions,
    pub(super) credentials: CredentialResolver,
    pub(super) registries: Mutex<HashMap<String, Arc<RegistryState>>>,
    pub(super) counters: Counters,
    /// Answers by registry, request kind and status (`None`: unreachable).
    pub(super) responses: Mutex<BTreeMap<ResponseKey, u64>>,
    pub(super) tags: Memo<Repository, Result<Vec<String>, RegistryError>>,
    pub(super) tag_digests: Memo<(Repository, String), Result<String, RegistryError>>,
    pub(super) manifests: Memo<(Repository, String), Result<SharedManifest, RegistryError>>,
    pub(super) configs: Memo<(Repository, String), Result<ConfigFacts, RegistryError>>,
    /// Where content found by digest and first-seen times outlive the process, if anywhere.
    pub(super) store: Option<Arc<dyn MetadataStore>>,
    /// Cosign signature defaults, trust root and this cycle's verdicts (`signatures.rs`).
    pub(super) signatures: super::signature_state::SignatureState,
}

/// What the client knows about one registry host.
pub(super) struct RegistryState {
    pub(super) host: String,
    /// `http://host` or `https://host`.
    pub(super) base: String,
    pub(super) limiter: Option<DefaultDirectRateLimiter>,
    pub(super) in_flight: Semaphore,
    /// How long one request may take (`registries[].timeout`, else the client's).
    pub(super) timeout: std::time::Duration,
    /// Bounds of one tag listing (`registries[].tagList`).
    pub(super) tag_list: crate::config::TagListLimits,
    /// A request timed out this cycle: the others fail fast instead of each waiting as long,
    /// so one registry that hangs delays only the policies that need it.
    pub(super) down: std::sync::atomic::AtomicBool,
    /// Resolved on the first challenge, and again after a 401 to the credential held (see
    /// `auth/token.rs`). The cell is swapped for an empty one to reload.
    pub(super) credential: Mutex<Arc<CredentialCell>>,
    /// Learned from the first 401, so later requests (other repositories included) authenticate
    /// up front instead of each collecting its own 401.
    pub(super) scheme: Mutex<Scheme>,
    /// Bearer tokens by scope; the per-scope lock makes concurrent requests share one token fetch.
    pub(super) tokens: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<CachedToken>>>>>,
    /// What its manifest GETs cost, where it says (`quota.rs`).
    pub(super) quota: super::quota::Quota,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) tag_lists: AtomicU64,
    pub(super) manifests: AtomicU64,
    pub(super) blobs: AtomicU64,
    pub(super) tokens: AtomicU64,
    /// Manifests and configs answered from memory or the store instead of the registry.
    pub(super) metadata_hits: AtomicU64,
}

/// A registry's credential, looked up once until it is found stale.
pub(super) type CredentialCell = OnceCell<Result<Option<Credential>, CredentialError>>;

/// Registry host, request kind, HTTP status (`None`: unreachable).
pub(super) type ResponseKey = (String, Kind, Option<u16>);

impl RegistryClient {
    /// Counts an answer (`None`: the registry could not be reached), for metrics.
    pub(super) fn record(&self, registry: &str, kind: Kind, status: Option<u16>) {
        let mut responses = self
            .responses
            .lock()
            .expect("response counts lock poisoned");
        *responses
            .entry((registry.to_string(), kind, status))
            .or_default() += 1;
    }
}

/// What a request is for, to count it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    TagList,
    Manifest,
    Blob,
    Token,
}

/// How the client authenticates to one registry, as learned from its first 401.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Scheme {
    Anonymous,
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// A Bearer token for one scope, and until when to use it.
pub(super) struct CachedToken {
    pub(super) token: String,
    pub(super) valid_until: Instant,
}

/// A parsed manifest, shared between the callers that asked for one digest.
pub(super) type SharedManifest = Arc<OciManifest>;

/// What tagpilot needs from an image config blob. Not `oci_client::config::ConfigFile`, which
/// requires `rootfs` and `architecture` and so would reject configs that lack fields tagpilot never
/// reads.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(super) struct ConfigFacts {
    #[serde(default)]
    pub(super) created: Option<String>,
    #[serde(default)]
    pub(super) os: Option<String>,
    #[serde(default)]
    pub(super) architecture: Option<String>,
    #[serde(default)]
    pub(super) variant: Option<String>,
    /// `config.Labels`, of which only the provenance labels are kept (see
    /// [`crate::provenance`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) config: Option<RunConfig>,
}

/// The `config` object of an image config: how a container runs, of which tagpilot reads only
/// the labels.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub(super) struct RunConfig {
    #[serde(rename = "Labels", default, skip_serializing_if = "Option::is_none")]
    pub(super) labels: Option<std::collections::BTreeMap<String, String>>,
}

impl ConfigFacts {
    /// Drops every label but the provenance ones: the rest is never read, and facts are kept
    /// for every image seen.
    pub(super) fn keep_provenance_labels(&mut self) {
        if let Some(labels) = self.config.as_mut().and_then(|c| c.labels.as_mut()) {
            labels.retain(|k, _| {
                k == crate::provenance::SOURCE_LABEL || k == crate::provenance::REVISION_LABEL
            });
        }
        if self
            .config
            .as_ref()
            .is_some_and(|c| c.labels.as_ref().is_none_or(|l| l.is_empty()))
        {
            self.config = None;
        }
    }

    /// The labels saying where the image was built from.
    pub(super) fn source(&self) -> crate::provenance::ImageSource {
        let label = |k: &str| {
            self.config
                .as_ref()
                .and_then(|c| c.labels.as_ref())
                .and_then(|l| l.get(k))
                .cloned()
        };
        crate::provenance::ImageSource {
            source: label(crate::provenance::SOURCE_LABEL),
            revision: label(crate::provenance::REVISION_LABEL),
        }
    }
}
