//! The registry edge: lists tags and inspects images over the OCI distribution API.
//!
//! INTERFACE SKETCH — filled in by the registry work.

use std::future::Future;

use crate::image::{Platform, Repository};

#[derive(Debug, thiserror::Error)]
pub enum RegistryError {}

/// What tagpilot learns about one tag or digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// The digest of what the reference points at (the index, for a multi-arch image).
    pub digest: String,
    /// Build time; for an index, the newest of the entries that match the wanted platforms.
    pub created: Option<jiff::Timestamp>,
    /// Platforms the image offers (empty for a single-platform image without platform info).
    pub platforms: Vec<Platform>,
}

/// What the planner needs from registries. The real client implements it over HTTP; unit tests of
/// the planner implement it in memory.
pub trait Registry: Send + Sync {
    fn list_tags(&self, repo: &Repository) -> impl Future<Output = Result<Vec<String>, RegistryError>> + Send;
    fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[Platform],
    ) -> impl Future<Output = Result<ImageInfo, RegistryError>> + Send;
}
