//! The registry as one cycle sees it: each repository's tags are listed once per cycle, however
//! many targets, policies and Applications name it, and concurrent callers for one repository
//! wait on the same listing. A new cycle lists afresh, so a long-running process sees new tags.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::image::Repository;
use crate::registry::{ImageInfo, Registry, RegistryError};

/// A registry whose tag listings are shared by every plan made through it.
pub struct Shared<'a, R> {
    inner: &'a R,
    tags: Mutex<HashMap<Repository, Listing>>,
}

type Listing = std::sync::Arc<tokio::sync::OnceCell<Result<Vec<String>, RegistryError>>>;

impl<'a, R: Registry> Shared<'a, R> {
    pub fn new(inner: &'a R) -> Self {
        Shared {
            inner,
            tags: Default::default(),
        }
    }
}

impl<R: Registry> Registry for Shared<'_, R> {
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        // The std lock only finds the cell; concurrent callers for one repository wait on it.
        let cell = self
            .tags
            .lock()
            .expect("listing lock")
            .entry(repo.clone())
            .or_default()
            .clone();
        cell.get_or_init(|| self.inner.list_tags(repo))
            .await
            .clone()
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[crate::image::Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inner.inspect(repo, reference, platforms).await
    }

    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.inner.digest(repo, reference).await
    }

    fn first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        self.inner.first_seen(repo, tags)
    }

    fn clock(&self) -> &dyn crate::clock::Clock {
        self.inner.clock()
    }

    fn requires_signatures(&self, repo: &Repository) -> bool {
        self.inner.requires_signatures(repo)
    }

    async fn verify_signatures(
        &self,
        repo: &Repository,
        digest: &str,
        required: Option<&crate::config::signatures::Requirement>,
    ) -> Result<crate::registry::SignatureVerdict, RegistryError> {
        self.inner.verify_signatures(repo, digest, required).await
    }
}
