//! What the registry client may keep beyond its own lifetime: content found by digest, and when
//! each tag was first seen. The client asks a [`MetadataStore`] before it asks the registry, and
//! tells it what it fetched; the store behind it (tagpilot's state directory, see
//! `crate::state`) lives outside this edge, so the registry knows nothing of files or databases.
//!
//! A store is a cache and a memory, never a source of truth: whatever it answers was verified
//! against its digest when it was fetched, and a store that forgets everything only costs
//! requests. Its methods therefore return no errors; a store that fails to read answers `None`,
//! and one that fails to write says so in its own logs.

use crate::image::Repository;

/// A persistent memory for the registry client. Digest-addressed content never changes, so it is
/// keyed by digest alone.
pub trait MetadataStore: Send + Sync {
    /// The manifest bytes stored for `digest`, as fetched and verified.
    fn manifest(&self, digest: &str) -> Option<Vec<u8>>;
    /// Keeps a verified manifest.
    fn put_manifest(&self, digest: &str, bytes: &[u8]);
    /// The facts stored for the config blob `digest` (a small JSON document the client wrote).
    fn config(&self, digest: &str) -> Option<Vec<u8>>;
    /// Keeps what the client read from a verified config blob.
    fn put_config(&self, digest: &str, facts: &[u8]);
    /// When each of `tags` of `repo` was first seen; a tag never seen before is recorded as seen
    /// at `now` and answered so. The answer has one entry per tag, in order; `None` where the
    /// store cannot say (it failed to record the tag), never a guess.
    fn first_seen(
        &self,
        repo: &Repository,
        tags: &[&str],
        now: jiff::Timestamp,
    ) -> Vec<Option<jiff::Timestamp>>;
    /// Whether `key` (a digest and the fingerprint of a signature requirement) was verified.
    /// Only verified digests are kept: a digest that did not verify may be signed later.
    fn signature_verified(&self, key: &str) -> bool {
        let _ = key;
        false
    }
    /// Keeps that `key` verified.
    fn put_signature_verified(&self, key: &str) {
        let _ = key;
    }
}
