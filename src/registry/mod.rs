//! The registry edge: lists tags and inspects images over the OCI distribution API.
//!
//! It exists so the planner can ask "which tags does this repository have?" and "what is this
//! tag's digest, build time and platforms?" without knowing about HTTP, tokens, pagination or rate
//! limits. The planner talks to the [`Registry`] trait; [`RegistryClient`] is the real thing, and
//! planner tests implement the trait in memory.
//!
//! What this module must never do: print or log a secret (passwords, tokens and `auth` strings
//! stay inside [`auth`]'s redacting types), send credentials to a host other than the registry
//! they belong to, write anything anywhere, or spin on a registry that paginates in a loop.
//!
//! # Why the HTTP exchange is ours and not `oci-client`'s
//!
//! `oci-client` 0.18 supplies the wire types we parse manifests into
//! ([`oci_client::manifest::OciManifest`]) and the media-type constants, and the test harness
//! pushes images with it. The requests themselves go through one small function,
//! `send.rs`'s `RegistryClient::send`, built on `reqwest` (the stack `oci-client` itself uses),
//! because `oci-client`'s request path cannot meet four requirements of tagpilot:
//!
//! - **Headers.** `Client::list_tags` returns only the body, so the `Link: <…>; rel="next"`
//!   header that paginating registries (distribution 3, GHCR, Docker Hub, Harbor) send is lost,
//!   and its errors turn a 429/503 into `ServerError { code, .. }` without the `Retry-After`
//!   header we must honour.
//! - **Request count.** Without an auth challenge (an anonymous registry) `oci-client` caches
//!   nothing and probes `GET /v2/` before *every* request (`get_auth_token` → `_auth`), doubling
//!   the requests tagpilot sends; the benchmark's goal is one tag-list request per repository.
//! - **Rate limits.** Its internal requests (the `/v2/` probe, the token request) happen inside
//!   the crate, so a per-registry limiter and a request counter cannot see them.
//! - **Error clarity.** A failed token request is swallowed (`self._auth(..).ok()??`), so a wrong
//!   password surfaces as a bare 401 on the next request instead of "the token server rejected
//!   user X".
//!
//! So [`RegistryClient`] runs the distribution token flow itself (challenge parsed with
//! `http-auth`, tokens cached per registry and scope until shortly before expiry) and counts,
//! rate-limits and retries every request it sends, token requests included.
//!
//! # Lifetime
//!
//! A [`RegistryClient`] remembers tag lists and tag digests until [`RegistryClient::start_cycle`]
//! (a long-running process calls it before each cycle), and metadata fetched by digest for its
//! whole lifetime (digests name immutable content). Given a [`MetadataStore`]
//! ([`RegistryClient::with_store`]), that metadata and the time each tag was first seen outlive
//! the process too.

pub mod auth;
mod bundle_check;
mod bundles;
mod client;
mod digest;
mod error;
mod inspect;
mod manifest;
mod memo;
mod memory;
mod options;
mod quota;
mod send;
mod signature_keys;
mod signature_lookup;
mod signature_state;
mod signatures;
mod state;
mod store;
mod tags;

use std::future::Future;

pub use auth::{Credential, DockerConfigSource};
pub use client::{RequestStats, ResponseCount};
pub use error::{Malformation, Refusal, Refused, RegistryError, TagListBound};
pub use memory::{MemoryRegistry, MemoryRegistryError};
pub use options::ClientOptions;
pub use quota::{QuotaView, RESERVE as QUOTA_RESERVE};
pub use signature_state::{SignatureError, SignatureVerdict, VerificationCounts};
pub use state::RegistryClient;
pub use store::MetadataStore;

use crate::image::{Platform, Repository};

/// What tagpilot learns about one tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The digest of what the reference points at (the index, for a multi-arch image).
    pub digest: String,
    /// Build time; for an index, the newest of the entries that match the wanted platforms
    /// (`None` when no entry matches or none records a build time).
    pub created: Option<jiff::Timestamp>,
    /// Platforms the image offers: every entry of an index, or the single image's own platform
    /// from its config blob (empty when the image does not say).
    pub platforms: Vec<Platform>,
    /// Where it was built from: the OCI `source` and `revision` labels of its config (for an
    /// index, of the first image for the wanted platforms), else its manifest's annotations.
    pub source: crate::provenance::ImageSource,
}

impl ImageInfo {
    /// Whether the image has an image for at least one of `wanted` (matched as
    /// [`Platform::matches`] does). An image that does not say its platforms (a config without
    /// `os`/`architecture`, index entries without `platform`) is taken to be for any, as
    /// [`Registry::inspect`] takes it for the build time; so is any image when nothing is wanted.
    ///
    /// When this is false, [`ImageInfo::created`] is `None` because there is no image to have a
    /// build time, which a caller should say as "no image for linux/arm64", not "no build time".
    pub fn offers_any(&self, wanted: &[Platform]) -> bool {
        wanted.is_empty()
            || self.platforms.is_empty()
            || self
                .platforms
                .iter()
                .any(|offered| wanted.iter().any(|w| w.matches(offered)))
    }
}

/// What the planner needs from registries. The real client implements it over HTTP; unit tests of
/// the planner implement it in memory.
pub trait Registry: Send + Sync {
    /// Every tag of the repository, in no particular order.
    fn list_tags(
        &self,
        repo: &Repository,
    ) -> impl Future<Output = Result<Vec<String>, RegistryError>> + Send;

    /// Digest, build time and platforms of a tag or digest (`sha256:…`). `platforms` filters the
    /// entries of an index for the build time; empty means every entry.
    fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[Platform],
    ) -> impl Future<Output = Result<ImageInfo, RegistryError>> + Send;

    /// Only the digest of a tag. The real client answers it with one `HEAD` (which Docker Hub
    /// does not count as a pull); the default asks [`Registry::inspect`].
    fn digest(
        &self,
        repo: &Repository,
        reference: &str,
    ) -> impl Future<Output = Result<String, RegistryError>> + Send {
        async move {
            self.inspect(repo, reference, &[])
                .await
                .map(|info| info.digest)
        }
    }

    /// The clock this registry dates what it sees by ([`Registry::first_seen`]); the planner
    /// measures ages (`minAge`) on it, so that both readings come from one clock. No default: a
    /// wrapper that forgot to forward it would measure ages on another clock than the one that
    /// dated them.
    fn clock(&self) -> &dyn crate::clock::Clock;

    /// When each of `tags` was first seen, where a memory of that is kept (`tagpilot run
    /// --state-dir`): one entry per tag, in order. A tag never seen before is remembered from
    /// now on and answered as seen now. `None` means no memory is kept, and a caller must take
    /// the tag as new: a one-shot `tagpilot plan` cannot know how long a tag has existed.
    fn first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        let _ = repo;
        vec![None; tags.len()]
    }

    /// Whether `tagpilot.yaml` requires signatures of `repo`'s images by default, so that a
    /// policy without `signatures:` of its own must still be verified. No default: a wrapper
    /// that forgot to forward it would let unsigned images through.
    fn requires_signatures(&self, repo: &Repository) -> bool;

    /// Whether `digest` carries a cosign signature `required` accepts (issue 22); `None` means
    /// the policy sets none, and the registry's own default for the image (`tagpilot.yaml`
    /// `signatures.defaults`) applies, if any. An `Err` means it could not be found out, which
    /// holds the reference; it never means "unsigned". No default, as above.
    fn verify_signatures(
        &self,
        repo: &Repository,
        digest: &str,
        required: Option<&crate::config::signatures::Requirement>,
    ) -> impl Future<Output = Result<SignatureVerdict, RegistryError>> + Send;
}
