//! An in-memory [`Registry`] for tests of code that asks registries questions (the planner,
//! reports, the CLI), so they run without sockets. It answers from what the test put in and
//! counts the questions, so a test can check that a repository's tags were asked for once.
//!
//! It does not filter by platform: [`Registry::inspect`] returns the [`ImageInfo`] stored for the
//! reference as it is.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{ImageInfo, Registry, RegistryError};
use crate::image::{ImageError, Platform, Repository};

/// A `registry.yaml` that does not describe a registry.
#[derive(Debug, thiserror::Error)]
pub enum MemoryRegistryError {
    #[error("registry.yaml")]
    Yaml(#[from] serde_saphyr::Error),
    #[error("registry.yaml: repository {name:?}")]
    Repository {
        name: String,
        #[source]
        source: ImageError,
    },
}

#[derive(Default)]
pub struct MemoryRegistry {
    repos: Mutex<HashMap<Repository, Stored>>,
    tag_lists: AtomicU64,
    inspects: AtomicU64,
    /// `None`: the system's.
    clock: Option<std::sync::Arc<dyn crate::clock::Clock>>,
}

#[derive(Default)]
struct Stored {
    tags: Vec<String>,
    /// By tag and by digest.
    images: HashMap<String, ImageInfo>,
    /// When each tag was first seen, for the tags a test says.
    first_seen: HashMap<String, jiff::Timestamp>,
    failure: Option<RegistryError>,
}

/// One repository as a golden case's `registry.yaml` describes it.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RepositoryYaml {
    #[serde(default)]
    tags: Vec<String>,
    /// Digest per tag; a tag without one gets a digest derived from repository and tag.
    #[serde(default)]
    digests: BTreeMap<String, String>,
    /// Build time per tag (RFC 3339).
    #[serde(default)]
    created: BTreeMap<String, jiff::Timestamp>,
    /// When a tag was first seen (RFC 3339), as a state directory would remember it.
    #[serde(default, rename = "firstSeen")]
    first_seen: BTreeMap<String, jiff::Timestamp>,
    /// When set, every question about the repository fails with this message (as an HTTP 500).
    #[serde(default)]
    error: Option<String>,
    /// The images' `org.opencontainers.image.source` label.
    #[serde(default)]
    source: Option<String>,
    /// Each tag's `org.opencontainers.image.revision` label.
    #[serde(default)]
    revisions: BTreeMap<String, String>,
    /// The platforms each tag's image offers (`linux/amd64`); a tag not named says none.
    #[serde(default)]
    platforms: BTreeMap<String, Vec<String>>,
}

impl MemoryRegistry {
    pub fn new() -> Self {
        MemoryRegistry::default()
    }

    /// Dates what it answers, and has ages measured, by `clock`.
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Builds a registry from YAML: a map from repository (`host/path`) to
    /// `{tags: [...], digests: {tag: sha256:…}, created: {tag: RFC 3339}, platforms: {tag:
    /// [linux/amd64]}, error: message}`.
    pub fn from_yaml(yaml: &str) -> Result<Self, MemoryRegistryError> {
        let map: BTreeMap<String, RepositoryYaml> = serde_saphyr::from_str(yaml)?;
        let reg = MemoryRegistry::new();
        for (name, spec) in map {
            // A chart in an HTTP chart repository is keyed by its URL (`https://host/path/chart`).
            let chart = name
                .contains("://")
                .then(|| name.rsplit_once('/'))
                .flatten()
                .and_then(|(url, chart)| crate::policy::chart::key(url, chart).ok());
            let repo = match chart {
                Some(repo) => repo,
                None => Repository::parse(&name)
                    .map_err(|source| MemoryRegistryError::Repository { name, source })?,
            };
            for tag in &spec.tags {
                let digest = spec.digests.get(tag).cloned().unwrap_or_else(|| {
                    format!(
                        "sha256:{}",
                        super::manifest::sha256_hex(format!("{repo}:{tag}").as_bytes())
                    )
                });
                let platforms = spec.platforms.get(tag).map(Vec::as_slice).unwrap_or(&[]);
                let platforms = platforms
                    .iter()
                    .map(|p| p.parse::<Platform>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|source| MemoryRegistryError::Repository {
                        name: format!("{repo}:{tag}"),
                        source,
                    })?;
                let info = ImageInfo {
                    digest,
                    created: spec.created.get(tag).copied(),
                    platforms,
                    source: crate::provenance::ImageSource {
                        source: spec.source.clone(),
                        revision: spec.revisions.get(tag).cloned(),
                    },
                };
                reg.add(&repo, tag, info);
            }
            for (tag, at) in &spec.first_seen {
                reg.set_first_seen(&repo, tag, *at);
            }
            if spec.tags.is_empty() {
                reg.repos
                    .lock()
                    .expect("memory registry lock poisoned")
                    .entry(repo.clone())
                    .or_default();
            }
            if let Some(body) = spec.error {
                reg.fail(
                    &repo,
                    RegistryError::Http {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        status: 500,
                        token_server: None,
                        body,
                    },
                );
            }
        }
        Ok(reg)
    }

    /// Adds `tag` pointing at `info` (also reachable by `info.digest`).
    pub fn add(&self, repo: &Repository, tag: &str, info: ImageInfo) -> &Self {
        let mut repos = self.repos.lock().expect("memory registry lock poisoned");
        let stored = repos.entry(repo.clone()).or_default();
        if !stored.tags.iter().any(|t| t == tag) {
            stored.tags.push(tag.to_string());
        }
        stored.images.insert(info.digest.clone(), info.clone());
        stored.images.insert(tag.to_string(), info);
        self
    }

    /// Adds tags whose digests are derived from repository and tag, without build times.
    pub fn add_tags(&self, repo: &Repository, tags: &[&str]) -> &Self {
        for tag in tags {
            let digest = format!(
                "sha256:{}",
                super::manifest::sha256_hex(format!("{repo}:{tag}").as_bytes())
            );
            self.add(
                repo,
                tag,
                ImageInfo {
                    digest,
                    created: None,
                    platforms: Vec::new(),
                    source: Default::default(),
                },
            );
        }
        self
    }

    /// Says `tag` of `repo` was first seen `at` (what `tagpilot run --state-dir` remembers).
    pub fn set_first_seen(&self, repo: &Repository, tag: &str, at: jiff::Timestamp) -> &Self {
        self.repos
            .lock()
            .expect("memory registry lock poisoned")
            .entry(repo.clone())
            .or_default()
            .first_seen
            .insert(tag.to_string(), at);
        self
    }

    /// Makes every question about `repo` fail with `error`.
    pub fn fail(&self, repo: &Repository, error: RegistryError) -> &Self {
        self.repos
            .lock()
            .expect("memory registry lock poisoned")
            .entry(repo.clone())
            .or_default()
            .failure = Some(error);
        self
    }

    /// How many times [`Registry::list_tags`] was called.
    pub fn tag_list_calls(&self) -> u64 {
        self.tag_lists.load(Ordering::SeqCst)
    }

    /// How many times [`Registry::inspect`] or [`Registry::digest`] was called.
    pub fn inspect_calls(&self) -> u64 {
        self.inspects.load(Ordering::SeqCst)
    }

    fn lookup<T>(
        &self,
        repo: &Repository,
        f: impl FnOnce(&Stored) -> Option<T>,
    ) -> Result<T, RegistryError> {
        let repos = self.repos.lock().expect("memory registry lock poisoned");
        let stored = repos
            .get(repo)
            .ok_or_else(|| RegistryError::RepositoryNotFound {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
            })?;
        if let Some(err) = &stored.failure {
            return Err(err.clone());
        }
        f(stored).ok_or_else(|| RegistryError::NotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
            reference: "the reference".into(),
        })
    }
}

impl Registry for MemoryRegistry {
    fn clock(&self) -> &dyn crate::clock::Clock {
        self.clock.as_deref().unwrap_or(&crate::clock::SystemClock)
    }

    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.tag_lists.fetch_add(1, Ordering::SeqCst);
        self.lookup(repo, |s| Some(s.tags.clone()))
    }

    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        _platforms: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        self.inspects.fetch_add(1, Ordering::SeqCst);
        self.lookup(repo, |s| s.images.get(reference).cloned())
            .map_err(|e| match e {
                RegistryError::NotFound {
                    registry,
                    repository,
                    ..
                } => RegistryError::NotFound {
                    registry,
                    repository,
                    reference: reference.to_string(),
                },
                other => other,
            })
    }

    fn first_seen(&self, repo: &Repository, tags: &[&str]) -> Vec<Option<jiff::Timestamp>> {
        let repos = self.repos.lock().expect("memory registry lock poisoned");
        let seen = repos.get(repo).map(|s| &s.first_seen);
        tags.iter()
            .map(|t| seen.and_then(|s| s.get(*t)).copied())
            .collect()
    }

    fn requires_signatures(&self, _repo: &Repository) -> bool {
        false
    }

    /// An in-memory registry holds no signatures: asked to verify, it refuses rather than
    /// answering "signed".
    async fn verify_signatures(
        &self,
        repo: &Repository,
        _digest: &str,
        required: Option<&crate::config::signatures::Requirement>,
    ) -> Result<super::SignatureVerdict, RegistryError> {
        match required {
            None => Ok(super::SignatureVerdict::NotRequired),
            Some(_) => Err(RegistryError::SignaturesUnsupported {
                repository: repo.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_what_was_put_in_and_counts_questions() {
        let repo = Repository {
            registry: "r.example".into(),
            path: "shop/api".into(),
        };
        let reg = MemoryRegistry::new();
        reg.add_tags(&repo, &["1.0.0", "1.1.0"]);
        assert_eq!(reg.list_tags(&repo).await.unwrap(), ["1.0.0", "1.1.0"]);
        let info = reg.inspect(&repo, "1.1.0", &[]).await.unwrap();
        assert_eq!(reg.digest(&repo, &info.digest).await.unwrap(), info.digest);
        assert_ne!(reg.digest(&repo, "1.0.0").await.unwrap(), info.digest);
        let err = reg.inspect(&repo, "9.9.9", &[]).await.unwrap_err();
        assert!(err.to_string().contains("9.9.9"), "{err}");
        let other = Repository {
            registry: "r.example".into(),
            path: "shop/none".into(),
        };
        assert_eq!(
            reg.list_tags(&other).await.unwrap_err().metric_label(),
            "repository_not_found"
        );
        assert_eq!((reg.tag_list_calls(), reg.inspect_calls()), (2, 4));
    }
}
