//! Which digest a tag points at.
//!
//! A `HEAD` of the manifest with every manifest type accepted answers with
//! `Docker-Content-Digest` (and Docker Hub does not count it as a pull). Some registries (ECR)
//! omit the header: then the manifest is fetched and its bytes hashed.

use reqwest::Method;
use reqwest::header::HeaderMap;

use super::RegistryError;
use super::manifest::{manifest_url, parse_manifest, sha256_hex};
use super::state::RegistryClient;
use crate::image::{Repository, is_valid_digest};

impl RegistryClient {
    /// The digest a tag points at: `HEAD` with every manifest type accepted, or, when the registry
    /// sends no `Docker-Content-Digest`, `GET` and hash the bytes. Cached by repository and tag:
    /// nothing else changes the answer within a client's lifetime.
    pub(super) async fn tag_digest(
        &self,
        repo: &Repository,
        tag: &str,
    ) -> Result<String, RegistryError> {
        if is_valid_digest(tag) {
            return Ok(tag.to_string());
        }
        // A chart version's `+` is `_` in its OCI tag (Helm's mapping); `+` is in no OCI tag.
        let tag = crate::policy::chart::oci_tag(tag);
        let tag = tag.as_str();
        self.tag_digests
            .get_or_init((repo.clone(), tag.to_string()), || async {
                let reg = self.registry(&repo.registry);
                let url = manifest_url(&reg, repo, tag)?;
                let what = format!("tag {tag}");
                let resp = self
                    .request_manifest(&reg, repo, Method::HEAD, url.clone(), &what)
                    .await?;
                if let Some(digest) = content_digest(resp.headers()) {
                    return Ok(digest);
                }
                let body = self.manifest_bytes(&reg, repo, url, &what).await?;
                let digest = format!("sha256:{}", sha256_hex(&body));
                let manifest = parse_manifest(repo, &body)?;
                if let Some(store) = &self.store {
                    store.put_manifest(&digest, &body);
                }
                self.manifests
                    .get_or_init((repo.clone(), digest.clone()), || async { Ok(manifest) })
                    .await?;
                Ok(digest)
            })
            .await
    }
}

fn content_digest(headers: &HeaderMap) -> Option<String> {
    headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|d| is_valid_digest(d))
        .map(str::to_string)
}
