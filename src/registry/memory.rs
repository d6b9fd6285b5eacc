//! An in-memory [`Registry`]: what the planner's unit tests and the golden tests run against, so
//! that the pure core is exercised without sockets. It counts calls, which is how tests check that
//! a plan lists each repository once.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

use super::{ImageInfo, Registry, RegistryError};
use crate::image::{Platform, Repository};

/// What one repository holds, as written in a golden case's `registry.yaml`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryRepository {
    #[serde(default)]
    pub tags: Vec<String>,
    /// Digest per tag; a tag without one gets a digest derived from its name.
    #[serde(default)]
    pub digests: BTreeMap<String, String>,
    /// Build time per tag (RFC 3339).
    #[serde(default)]
    pub created: BTreeMap<String, jiff::Timestamp>,
    /// When set, every call for this repository fails with this message.
    #[serde(default)]
    pub error: Option<String>,
}

/// A registry held in memory, keyed by repository (`host/path`, normalised).
#[derive(Debug, Default)]
pub struct MemoryRegistry {
    repositories: BTreeMap<Repository, MemoryRepository>,
    tag_lists: AtomicU64,
    inspections: AtomicU64,
    listed: Mutex<Vec<Repository>>,
}

impl MemoryRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a `registry.yaml` map of repository → [`MemoryRepository`].
    pub fn from_yaml(yaml: &str) -> Result<Self, String> {
        let map: BTreeMap<String, MemoryRepository> =
            serde_saphyr::from_str(yaml).map_err(|e| e.to_string())?;
        let mut reg = Self::new();
        for (name, repo) in map {
            let key = Repository::parse(&name).map_err(|e| e.to_string())?;
            reg.repositories.insert(key, repo);
        }
        Ok(reg)
    }

    pub fn with_tags(mut self, repo: &str, tags: &[&str]) -> Self {
        let key = Repository::parse(repo).expect("valid repository");
        self.repositories.entry(key).or_default().tags =
            tags.iter().map(|t| t.to_string()).collect();
        self
    }

    pub fn with_created(mut self, repo: &str, tag: &str, created: &str) -> Self {
        let key = Repository::parse(repo).expect("valid repository");
        let ts = created.parse().expect("RFC 3339 time");
        self.repositories
            .entry(key)
            .or_default()
            .created
            .insert(tag.to_string(), ts);
        self
    }

    pub fn with_digest(mut self, repo: &str, tag: &str, digest: &str) -> Self {
        let key = Repository::parse(repo).expect("valid repository");
        self.repositories
            .entry(key)
            .or_default()
            .digests
            .insert(tag.to_string(), digest.to_string());
        self
    }

    /// How many tag listings were asked for.
    pub fn tag_list_calls(&self) -> u64 {
        self.tag_lists.load(Ordering::Relaxed)
    }

    /// How many inspections (digest / build time look-ups) were asked for.
    pub fn inspect_calls(&self) -> u64 {
        self.inspections.load(Ordering::Relaxed)
    }

    /// The repositories listed, in call order.
    pub fn listed(&self) -> Vec<Repository> {
        self.listed.lock().unwrap().clone()
    }

    fn repository(&self, repo: &Repository) -> Result<&MemoryRepository, RegistryError> {
        let found = self
            .repositories
            .get(repo)
            .ok_or_else(|| RegistryError::NotFound {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
            })?;
        match &found.error {
            Some(message) => Err(RegistryError::Other {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                message: message.clone(),
            }),
            None => Ok(found),
        }
    }
}

/// A stable made-up digest for a tag that has none configured.
fn synthetic_digest(repo: &Repository, tag: &str) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(format!("{repo}:{tag}").as_bytes());
    let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

impl Registry for MemoryRegistry {
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.tag_lists.fetch_add(1, Ordering::Relaxed);
        self.listed.lock().unwrap().push(repo.clone());
        Ok(self.repository(repo)?.tags.clone())
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        _platforms: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inspections.fetch_add(1, Ordering::Relaxed);
        let found = self.repository(repo)?;
        if !found.tags.iter().any(|t| t == reference) && !reference.contains(':') {
            return Err(RegistryError::NotFound {
                registry: repo.registry.clone(),
                repository: format!("{}:{reference}", repo.path),
            });
        }
        Ok(ImageInfo {
            digest: found
                .digests
                .get(reference)
                .cloned()
                .unwrap_or_else(|| synthetic_digest(repo, reference)),
            created: found.created.get(reference).copied(),
            platforms: Vec::new(),
        })
    }
}
