//! [`RegistryClient`]'s constructor, its request counts, its per-host state and its
//! [`Registry`] implementation: the top of the HTTP side of the registry edge. The work is spread
//! by responsibility, and each file imports only from the ones listed before it (and from
//! `error.rs`, `memo.rs` and the credential lookup in `auth/`, which import none of them):
//!
//! - `options.rs`: how the client is set up; `state.rs`: what it holds (the type itself, its
//!   caches, what it knows about each registry host).
//! - `auth/token.rs` answers auth challenges; `send.rs` sends one request (rate limit, count,
//!   retry).
//! - `manifest.rs`: the manifest URL, `Accept` header, digest check and parser.
//! - `tags.rs` lists tags, `digest.rs` resolves tags to digests and `inspect.rs` reads manifests
//!   and configs.
//! - This file.
//!
//! Why this is not `oci-client`'s request path: see the module doc of [`crate::registry`].

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OnceCell, Semaphore};
use tracing::instrument;

use super::auth::{CredentialResolver, normalise_host};
use super::memo::Memo;
use super::options::ClientOptions;
use super::state::{Counters, Kind, RegistryClient, RegistryState, Scheme};
use super::store::MetadataStore;
use super::{ImageInfo, Registry, RegistryError};
use crate::config::Config;
use crate::image::{Platform, Repository};

/// HTTP requests sent to registries so far, by kind. `total` is what the benchmark reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestStats {
    pub total: u64,
    pub tag_lists: u64,
    /// `HEAD` and `GET` of manifests.
    pub manifests: u64,
    pub blobs: u64,
    /// Requests to token servers.
    pub tokens: u64,
}

// === impl RegistryClient ===

/// How many of one kind of request a registry answered with one status, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseCount {
    /// The registry host, as in image references.
    pub registry: String,
    /// What was asked: `tag_list`, `manifest`, `blob` or `token`.
    pub request: &'static str,
    /// The HTTP status (`200`, `404`, …), or `unreachable` when no answer came.
    pub status: String,
    pub count: u64,
}

impl RegistryClient {
    /// Forgets what may have changed since the last cycle of a long-running process: tag lists,
    /// the digest each tag points to, every failed lookup, and which registries timed out.
    /// Manifests and configs found by digest never change: they are kept, in memory or, with a
    /// store, in the store only. Credentials and tokens are kept.
    pub fn start_cycle(&self) {
        // Every flag is cleared, so the order does not matter.
        #[allow(clippy::iter_over_hash_type)]
        for reg in self
            .registries
            .lock()
            .expect("registry map lock poisoned")
            .values()
        {
            reg.down.store(false, Ordering::Relaxed);
        }
        self.tags.clear();
        self.tag_digests.clear();
        // Verdicts other than "verified" (kept in the store) may change: CI signs after it
        // pushes.
        self.signatures.verdicts.clear();
        self.signatures.secrets.clear();
        if self.store.is_some() {
            // The store keeps what was found by digest; kept in memory as well, it would grow
            // with every image a long-running process has ever seen.
            self.manifests.clear();
            self.configs.clear();
        } else {
            self.manifests.retain(Result::is_ok);
            self.configs.retain(Result::is_ok);
        }
    }

    /// Forgets the tag lists and tag digests of `repositories`, so that they are read fresh: a
    /// push notification says they changed since the last cycle listed them. What was found by
    /// digest is kept. Their registries are asked again even if they timed out in the last
    /// cycle: a re-check that only failed fast on that mark would ask no registry, and count
    /// as a success it never checked.
    pub fn forget_tags(&self, repositories: &std::collections::BTreeSet<Repository>) {
        self.tags.forget(|r| repositories.contains(r));
        self.tag_digests.forget(|(r, _)| repositories.contains(r));
        let registries = self.registries.lock().expect("registry map lock poisoned");
        for registry in repositories.iter().map(|r| r.registry.as_str()) {
            if let Some(state) = registries.get(registry) {
                state.down.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Every answer so far, by registry, request and status, in that order.
    pub fn responses(&self) -> Vec<ResponseCount> {
        let responses = self
            .responses
            .lock()
            .expect("response counts lock poisoned");
        responses
            .iter()
            .map(|((registry, kind, status), count)| ResponseCount {
                registry: registry.clone(),
                request: match kind {
                    Kind::TagList => "tag_list",
                    Kind::Manifest => "manifest",
                    Kind::Blob => "blob",
                    Kind::Token => "token",
                },
                status: status.map_or_else(|| "unreachable".to_string(), |s| s.to_string()),
                count: *count,
            })
            .collect()
    }

    pub fn new(options: ClientOptions) -> Result<Self, RegistryError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .build()
            .map_err(|e| RegistryError::Setup {
                source: Arc::new(e),
            })?;
        let credentials = CredentialResolver::new(
            &options.registries,
            &options.base_dir,
            options.docker_config.clone(),
            options.helper_path.clone(),
        )
        .with_given(&options.credentials);
        Ok(RegistryClient {
            http,
            credentials,
            registries: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            responses: Mutex::default(),
            tags: Memo::default(),
            tag_digests: Memo::default(),
            manifests: Memo::default(),
            configs: Memo::default(),
            store: None,
            signatures: super::signature_state::SignatureState {
                defaults: options.signature_defaults.clone(),
                trust_root_file: options.signature_trust_root.clone(),
                ..Default::default()
            },
            options,
        })
    }

    /// Keeps metadata found by digest, and first-seen times of tags, in `store` as well, and
    /// asks it before asking a registry.
    pub fn with_store(mut self, store: Arc<dyn MetadataStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Manifests and configs answered from memory or the store rather than a registry, so far.
    pub fn metadata_cache_hits(&self) -> u64 {
        self.counters.metadata_hits.load(Ordering::Relaxed)
    }

    /// A client for the registries of `tagpilot.yaml`, reading Docker's `config.json` from the
    /// environment when a registry asks for credentials that `tagpilot.yaml` does not give.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        RegistryClient::new(ClientOptions::from_config(config))
    }

    /// HTTP requests sent to registries and token servers so far.
    pub fn request_count(&self) -> u64 {
        self.request_stats().total
    }

    pub fn request_stats(&self) -> RequestStats {
        let c = &self.counters;
        let (tag_lists, manifests, blobs, tokens) = (
            c.tag_lists.load(Ordering::Relaxed),
            c.manifests.load(Ordering::Relaxed),
            c.blobs.load(Ordering::Relaxed),
            c.tokens.load(Ordering::Relaxed),
        );
        RequestStats {
            total: tag_lists + manifests + blobs + tokens,
            tag_lists,
            manifests,
            blobs,
            tokens,
        }
    }

    pub(super) fn count(&self, kind: Kind) {
        let counter = match kind {
            Kind::TagList => &self.counters.tag_lists,
            Kind::Manifest => &self.counters.manifests,
            Kind::Blob => &self.counters.blobs,
            Kind::Token => &self.counters.tokens,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Each registry's quota as far as it is known: manifest GETs spent, HEADs, deferrals,
    /// and what is left where the registry says.
    pub fn quotas(&self) -> Vec<super::QuotaView> {
        let registries = self.registries.lock().expect("registry map lock poisoned");
        let mut views: Vec<_> = registries
            .iter()
            .map(|(host, reg)| reg.quota.view(host))
            .collect();
        views.sort_by(|a, b| a.registry.cmp(&b.registry));
        views
    }

    pub(super) fn registry(&self, host: &str) -> Arc<RegistryState> {
        let mut registries = self.registries.lock().expect("registry map lock poisoned");
        registries
            .entry(host.to_string())
            .or_insert_with(|| {
                let config = self
                    .options
                    .registries
                    .iter()
                    .find(|r| normalise_host(&r.host) == host);
                let scheme = if config.is_some_and(|c| c.insecure) {
                    "http"
                } else {
                    "https"
                };
                let limiter = config.and_then(|c| c.rate_limit).and_then(rate_limiter);
                Arc::new(RegistryState {
                    host: host.to_string(),
                    base: format!("{scheme}://{host}"),
                    limiter,
                    in_flight: Semaphore::new(self.options.max_concurrency_per_registry.max(1)),
                    timeout: config
                        .and_then(|c| c.timeout)
                        .unwrap_or(self.options.request_timeout),
                    tag_list: config.map_or(self.options.tag_list, |c| c.tag_list),
                    down: Default::default(),
                    credential: Mutex::new(Arc::new(OnceCell::new())),
                    scheme: Mutex::new(Scheme::Anonymous),
                    tokens: Mutex::new(HashMap::new()),
                    quota: Default::default(),
                })
            })
            .clone()
    }
}

impl Registry for RegistryClient {
    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path))]
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.tags
            .get_or_init(repo.clone(), || self.fetch_tags(repo))
            .await
    }

    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path, reference = %reference))]
    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        let digest = self.tag_digest(repo, reference).await?;
        self.inspect_digest(repo, digest, platforms).await
    }

    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path, reference = %reference))]
    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.tag_digest(repo, reference).await
    }

    fn clock(&self) -> &dyn crate::clock::Clock {
        self.options.clock.as_ref()
    }

    fn first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        match &self.store {
            Some(store) => store.first_seen(repo, tags, self.options.clock.wall()),
            None => vec![None; tags.len()],
        }
    }

    fn requires_signatures(&self, repo: &Repository) -> bool {
        self.default_signatures(repo).is_some()
    }

    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path, digest = %digest))]
    async fn verify_signatures(
        &self,
        repo: &Repository,
        digest: &str,
        required: Option<&crate::config::signatures::Requirement>,
    ) -> Result<super::SignatureVerdict, RegistryError> {
        // Keys in Kubernetes Secrets are read first: the verdict's cache key is the keys' PEM.
        let resolved = match required.or_else(|| self.default_signatures(repo)) {
            Some(r) => Some(self.with_secret_keys(repo, r).await?),
            None => None,
        };
        // Boxed for the same reason as the planner's call: a deep future, asked rarely.
        Box::pin(self.verify_digest(repo, digest, resolved.as_ref())).await
    }
}

fn rate_limiter(per_second: f64) -> Option<DefaultDirectRateLimiter> {
    if !per_second.is_finite() || per_second <= 0.0 {
        return None;
    }
    let burst = NonZeroU32::new(per_second.floor().clamp(1.0, u32::MAX as f64) as u32)?;
    let quota = Quota::with_period(Duration::from_secs_f64(1.0 / per_second))?.allow_burst(burst);
    Some(RateLimiter::direct(quota))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limits_become_governor_quotas() {
        assert!(rate_limiter(0.0).is_none());
        assert!(rate_limiter(f64::NAN).is_none());
        let l = rate_limiter(2.0).unwrap();
        assert!(
            l.check().is_ok() && l.check().is_ok(),
            "a burst of the per-second rate"
        );
        assert!(l.check().is_err());
        assert!(rate_limiter(0.5).unwrap().check().is_ok());
    }
}
