//! Whether a digest that the `sigstore` crate found no trusted signature for really has none,
//! asked through tagpilot's own request path (`send.rs`: its credential, rate limiter, retries
//! and typed errors).
//!
//! Why: `cosign::Client::trusted_signature_layers` only logs what it could not fetch (a 500 on
//! the `.sig` tag, a 429 on the referrers, a blob that failed) and returns the layers it got, so
//! a registry fault looks exactly like "unsigned". Taken for unsigned, the newest signed tag
//! would be skipped for an older one. So when the crate's layers do not verify, the same places
//! are looked at again here, as the crate reads them: the `sha256-<hex>.sig` image and its
//! layers, and the referrers (the referrers API, else the referrers tag `sha256-<hex>`) with
//! each Sigstore bundle's manifest and layer. Only a 404 (or an empty referrers index) is an
//! absence; every other failure is an error that holds the reference.
//!
//! Never: verify anything here (that is the crate's, in `signatures.rs`); this only counts.

use oci_client::manifest::{OciImageIndex, OciImageManifest};
use reqwest::{Method, Url};

use super::RegistryError;
use super::error::{malformed, unreachable};
use super::manifest::{manifest_url, verify_digest};
use super::send::{RegistryRequest, Target};
use super::signature_state::SignatureError;
use super::state::{Kind, RegistryClient, RegistryState};
use crate::image::Repository;

/// The layer media type of a Sigstore bundle, as cosign v3 pushes it among the referrers.
const BUNDLE_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

/// What the referrers API answers: an OCI image index.
const INDEX_ACCEPT: &str = "application/vnd.oci.image.index.v1+json";

impl RegistryClient {
    /// How many signatures the registry holds for `digest`: the layers of its `.sig` image and
    /// the Sigstore bundles among its referrers. `Ok(0)` only when the `.sig` tag and the
    /// referrers are absent; a request the registry fails is an error naming what was looked at.
    pub(super) async fn count_signatures(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        digest: &str,
    ) -> Result<usize, SignatureError> {
        let tagged = digest.replace(':', "-");
        let sig_tag = format!("{tagged}.sig");
        let at_sig_tag = |source| SignatureError::Lookup {
            what: format!("the tag {sig_tag}"),
            source,
        };
        let mut found = 0;
        if let Some(manifest) = self
            .absent_or(reg, repo, &sig_tag, &format!("tag {sig_tag}"))
            .await
            .map_err(at_sig_tag)?
        {
            let manifest: OciImageManifest = serde_json::from_slice(&manifest)
                .map_err(|e| at_sig_tag(malformed(repo, "signature manifest", e)))?;
            for layer in &manifest.layers {
                self.blob(reg, repo, &layer.digest)
                    .await
                    .map_err(at_sig_tag)?;
            }
            found += manifest.layers.len();
        }
        let at_referrers = |source| SignatureError::Lookup {
            what: format!("the referrers of {digest}"),
            source,
        };
        let index = self
            .referrers(reg, repo, digest, &tagged)
            .await
            .map_err(at_referrers)?;
        for entry in index.map(|i| i.manifests).unwrap_or_default() {
            let url = manifest_url(reg, repo, &entry.digest).map_err(at_referrers)?;
            let what = format!("referrer {}", entry.digest);
            let bytes = self
                .manifest_bytes(reg, repo, url, &what)
                .await
                .map_err(at_referrers)?;
            verify_digest(repo, "referrer manifest", &entry.digest, &bytes)
                .map_err(at_referrers)?;
            // A referrer that is no image manifest (an index of attestations) holds no bundle.
            let Ok(manifest) = serde_json::from_slice::<OciImageManifest>(&bytes) else {
                continue;
            };
            for layer in manifest
                .layers
                .iter()
                .filter(|l| l.media_type == BUNDLE_MEDIA_TYPE)
            {
                self.blob(reg, repo, &layer.digest)
                    .await
                    .map_err(at_referrers)?;
                found += 1;
            }
        }
        Ok(found)
    }

    /// The referrers index of `digest`: from the referrers API, else (a registry without it
    /// answers 404) from the referrers tag `sha256-<hex>`; `None` when neither exists.
    async fn referrers(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        digest: &str,
        tagged: &str,
    ) -> Result<Option<OciImageIndex>, RegistryError> {
        let url = Url::parse(&format!("{}/v2/{}/referrers/{digest}", reg.base, repo.path))
            .map_err(|e| malformed(repo, "referrers URL", e))?;
        let what = format!("referrers of {digest}");
        let asked = RegistryRequest {
            kind: Kind::Manifest,
            method: Method::GET,
            url,
            accept: Some(INDEX_ACCEPT),
            target: Target::Manifest(&what),
        };
        let body = match self.send(reg, repo, asked).await {
            Ok(resp) => Some(
                resp.bytes()
                    .await
                    .map_err(|e| unreachable(repo, e))?
                    .to_vec(),
            ),
            Err(RegistryError::NotFound { .. }) => {
                self.absent_or(reg, repo, tagged, &format!("tag {tagged}"))
                    .await?
            }
            Err(e) => return Err(e),
        };
        body.map(|b| serde_json::from_slice(&b).map_err(|e| malformed(repo, "referrers index", e)))
            .transpose()
    }

    /// The manifest at `reference`, or `None` when the registry says there is none (404).
    async fn absent_or(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        reference: &str,
        what: &str,
    ) -> Result<Option<Vec<u8>>, RegistryError> {
        let url = manifest_url(reg, repo, reference)?;
        match self.manifest_bytes(reg, repo, url, what).await {
            Ok(bytes) => Ok(Some(bytes)),
            Err(RegistryError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Fetches one blob and checks it hashes to its digest; only whether it could be read counts.
    async fn blob(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        digest: &str,
    ) -> Result<(), RegistryError> {
        let url = Url::parse(&format!("{}/v2/{}/blobs/{digest}", reg.base, repo.path))
            .map_err(|e| malformed(repo, "blob URL", e))?;
        let what = format!("signature blob {digest}");
        let resp = self
            .send(
                reg,
                repo,
                RegistryRequest {
                    kind: Kind::Blob,
                    method: Method::GET,
                    url,
                    accept: None,
                    target: Target::Blob(&what),
                },
            )
            .await?;
        let body = resp.bytes().await.map_err(|e| unreachable(repo, e))?;
        verify_digest(repo, "signature blob", digest, &body)
    }
}
