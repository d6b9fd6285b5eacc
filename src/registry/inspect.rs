//! What a tag or digest is: its manifest (an image, or an index of images per platform), its
//! config blob, and from them the build time and platforms in [`ImageInfo`].
//!
//! Manifests and configs are fetched by digest and so cached for the client's lifetime. The build
//! time depends on the platforms asked for, so it is computed per question from those caches,
//! never cached by tag alone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use oci_client::manifest::{ImageIndexEntry, OciImageManifest, OciManifest};
use tracing::warn;

use super::error::malformed;
use super::manifest::{manifest_url, parse_manifest, verify_digest};
use super::state::{ConfigFacts, RegistryClient, SharedManifest};
use super::{ImageInfo, RegistryError};
use crate::image::{Platform, Repository};
use crate::provenance::{ImageSource, REVISION_LABEL, SOURCE_LABEL};

/// The annotation builders put the build time in.
const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";

impl RegistryClient {
    /// The manifest with this digest, verified against it: from this client's memory, the
    /// store, or the registry, in that order.
    async fn manifest(
        &self,
        repo: &Repository,
        digest: &str,
    ) -> Result<SharedManifest, RegistryError> {
        let fetched = AtomicBool::new(false);
        let manifest = self
            .manifests
            .get_or_init((repo.clone(), digest.to_string()), || async {
                if let Some(stored) = self.stored_manifest(repo, digest) {
                    return Ok(stored);
                }
                fetched.store(true, Ordering::Relaxed);
                let reg = self.registry(&repo.registry);
                let url = manifest_url(&reg, repo, digest)?;
                let what = format!("manifest {digest}");
                let body = self.manifest_bytes(&reg, repo, url, &what).await?;
                verify_digest(repo, "manifest", digest, &body)?;
                let manifest = parse_manifest(repo, &body)?;
                if let Some(store) = &self.store {
                    store.put_manifest(digest, &body);
                }
                Ok(manifest)
            })
            .await;
        if manifest.is_ok() && !fetched.load(Ordering::Relaxed) {
            self.counters.metadata_hits.fetch_add(1, Ordering::Relaxed);
        }
        manifest
    }

    /// A manifest the store kept, checked against its digest again: a store that went bad
    /// costs a request, never a wrong answer.
    fn stored_manifest(&self, repo: &Repository, digest: &str) -> Option<SharedManifest> {
        let bytes = self.store.as_ref()?.manifest(digest)?;
        match verify_digest(repo, "manifest", digest, &bytes)
            .and_then(|()| parse_manifest(repo, &bytes))
        {
            Ok(manifest) => Some(manifest),
            Err(e) => {
                warn!(
                    digest,
                    "ignoring a stored manifest: {}",
                    crate::error_chain::chain(&e)
                );
                None
            }
        }
    }

    async fn config(&self, repo: &Repository, digest: &str) -> Result<ConfigFacts, RegistryError> {
        let fetched = AtomicBool::new(false);
        let facts = self
            .configs
            .get_or_init((repo.clone(), digest.to_string()), || async {
                let stored = self.store.as_ref().and_then(|s| s.config(digest));
                if let Some(facts) = stored.and_then(|b| serde_json::from_slice(&b).ok()) {
                    return Ok(facts);
                }
                fetched.store(true, Ordering::Relaxed);
                let reg = self.registry(&repo.registry);
                let body = self
                    .verified_blob(&reg, repo, digest, "config blob")
                    .await?;
                let mut facts: ConfigFacts = serde_json::from_slice(&body)
                    .map_err(|e| malformed(repo, "image config", e))?;
                facts.keep_provenance_labels();
                // Only the few facts tagpilot reads are kept, not the blob (which carries the
                // whole build history).
                if let Some(store) = &self.store
                    && let Ok(json) = serde_json::to_vec(&facts)
                {
                    store.put_config(digest, &json);
                }
                Ok(facts)
            })
            .await;
        if facts.is_ok() && !fetched.load(Ordering::Relaxed) {
            self.counters.metadata_hits.fetch_add(1, Ordering::Relaxed);
        }
        facts
    }

    /// Build time and platform of one single-platform image manifest.
    async fn image_facts(
        &self,
        repo: &Repository,
        manifest: &OciImageManifest,
    ) -> Result<ImageFacts, RegistryError> {
        let config = self.config(repo, &manifest.config.digest).await?;
        let created = config
            .created
            .as_deref()
            .and_then(|c| parse_created(repo, c))
            .or_else(|| annotation_created(repo, manifest.annotations.as_ref()));
        let platform = match (&config.os, &config.architecture) {
            (Some(os), Some(arch)) if !os.is_empty() && !arch.is_empty() => Some(Platform {
                os: os.clone(),
                architecture: arch.clone(),
                variant: config.variant.clone().filter(|v| !v.is_empty()),
            }),
            _ => None,
        };
        let source = or_annotations(config.source(), manifest.annotations.as_ref());
        Ok(ImageFacts {
            created,
            platform,
            source,
        })
    }

    /// [`ImageInfo`] of the manifest `digest`, the build time taken from the images for `wanted`.
    pub(super) async fn inspect_digest(
        &self,
        repo: &Repository,
        digest: String,
        wanted: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        let manifest = self.manifest(repo, &digest).await?;
        let wants = |p: &Platform| wanted.is_empty() || wanted.iter().any(|w| w.matches(p));
        match &*manifest {
            OciManifest::Image(image) => {
                let ImageFacts {
                    created,
                    platform,
                    source,
                } = self.image_facts(repo, image).await?;
                let created = if platform.as_ref().is_none_or(wants) {
                    created
                } else {
                    None
                };
                Ok(ImageInfo {
                    digest,
                    created,
                    platforms: platform.into_iter().collect(),
                    source,
                })
            }
            OciManifest::ImageIndex(index) => {
                let entries: Vec<(&ImageIndexEntry, Option<Platform>)> = index
                    .manifests
                    .iter()
                    .filter(|e| !is_attestation(e))
                    .map(|e| (e, e.platform.as_ref().map(entry_platform)))
                    .collect();
                let mut platforms: Vec<Platform> = Vec::new();
                for p in entries.iter().filter_map(|(_, p)| p.clone()) {
                    if !platforms.contains(&p) {
                        platforms.push(p);
                    }
                }
                let mut created: Option<jiff::Timestamp> = None;
                let mut source: Option<ImageSource> = None;
                for (entry, platform) in &entries {
                    let matches = match platform {
                        Some(p) => wants(p),
                        None => wanted.is_empty(),
                    };
                    if !matches {
                        continue;
                    }
                    // Nested indexes are legal but unused in practice; their build time is not
                    // worth the requests.
                    let OciManifest::Image(image) = &*self.manifest(repo, &entry.digest).await?
                    else {
                        continue;
                    };
                    let facts = self.image_facts(repo, image).await?;
                    created = created.max(facts.created);
                    // One build makes every platform's image: the first says where from.
                    source.get_or_insert(facts.source);
                }
                let created =
                    created.or_else(|| annotation_created(repo, index.annotations.as_ref()));
                let source = or_annotations(source.unwrap_or_default(), index.annotations.as_ref());
                Ok(ImageInfo {
                    digest,
                    created,
                    platforms,
                    source,
                })
            }
        }
    }
}

/// What tagpilot reads of one single-platform image.
struct ImageFacts {
    created: Option<jiff::Timestamp>,
    platform: Option<Platform>,
    source: ImageSource,
}

/// `source` with what its labels leave unsaid taken from a manifest's annotations.
fn or_annotations(
    source: ImageSource,
    annotations: Option<&BTreeMap<String, String>>,
) -> ImageSource {
    let annotation = |key: &str| annotations.and_then(|a| a.get(key)).cloned();
    ImageSource {
        source: source.source.or_else(|| annotation(SOURCE_LABEL)),
        revision: source.revision.or_else(|| annotation(REVISION_LABEL)),
    }
}

fn parse_created(repo: &Repository, value: &str) -> Option<jiff::Timestamp> {
    match value.parse::<jiff::Timestamp>() {
        // Reproducible builds (ko, nix, Bazel, `SOURCE_DATE_EPOCH=0`) write the Unix epoch: that
        // is "unknown", not "built in 1970", so the annotation gets its chance.
        Ok(ts) if ts == jiff::Timestamp::UNIX_EPOCH => None,
        Ok(ts) => Some(ts),
        Err(e) => {
            warn!(registry = %repo.registry, repository = %repo.path, value, "ignoring unparsable build time: {e}");
            None
        }
    }
}

fn annotation_created(
    repo: &Repository,
    annotations: Option<&BTreeMap<String, String>>,
) -> Option<jiff::Timestamp> {
    parse_created(repo, annotations?.get(CREATED_ANNOTATION)?)
}

fn entry_platform(p: &oci_client::manifest::Platform) -> Platform {
    Platform {
        os: p.os.to_string(),
        architecture: p.architecture.to_string(),
        variant: p.variant.clone().filter(|v| !v.is_empty()),
    }
}

/// BuildKit adds attestation manifests (`unknown/unknown`) to indexes; they are not images.
fn is_attestation(entry: &ImageIndexEntry) -> bool {
    let by_annotation = entry
        .annotations
        .as_ref()
        .and_then(|a| a.get("vnd.docker.reference.type"))
        .is_some_and(|t| t == "attestation-manifest");
    let unknown = entry
        .platform
        .as_ref()
        .is_some_and(|p| p.os.to_string() == "unknown");
    by_annotation || unknown
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo() -> Repository {
        Repository {
            registry: "r".into(),
            path: "p".into(),
        }
    }

    #[test]
    fn epoch_zero_build_times_are_unknown() {
        let repo = repo();
        assert_eq!(parse_created(&repo, "1970-01-01T00:00:00Z"), None);
        assert_eq!(
            parse_created(&repo, "2024-01-01T00:00:00Z"),
            Some("2024-01-01T00:00:00Z".parse().unwrap())
        );
        assert_eq!(parse_created(&repo, "yesterday"), None);
    }
}
