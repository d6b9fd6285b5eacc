//! The Sigstore bundles among an image's OCI 1.1 referrers, fetched by tagpilot's own requests
//! (`send.rs`), for what the `sigstore` crate's client does not verify: keyed cosign v3 bundles,
//! and bundles of a shape it cannot check, which it drops without a word (issue 22). Asked only
//! when the crate's layers verified nothing, so a signed image costs no extra request.
//!
//! The referrers API first, then the referrers tag schema (`sha256-<hex>`, an index) for
//! registries without it, as cosign does. What each bundle says is `bundle_check.rs`'s answer;
//! this file fetches and tallies. Never: count an attestation as a signature, or let a bundle
//! that cannot be verified pass as "unsigned" (the report says a bundle was found, and why it
//! was not verified).

use oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE;
use reqwest::{Method, Url};
use serde::Deserialize;
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::bundle_content::BundleContent;
use sigstore::crypto::CosignVerificationKey;
use sigstore::trust::TrustRoot;
use sigstore::trust::sigstore::SigstoreTrustRoot;

use super::RegistryError;
use super::bundle_check::{BundleCheck, RekorKeys, check_bundle};
use super::error::{malformed, unreachable};
use super::manifest::{manifest_url, verify_digest};
use super::send::{RegistryRequest, Target};
use super::signature_state::SignatureVerdict;
use super::state::{Kind, RegistryClient};
use crate::config::signatures::SignatureRequirement;
use crate::image::Repository;

/// Media types of Sigstore bundles (`…bundle.v0.3+json`, `…bundle+json;version=0.x`).
const BUNDLE_PREFIX: &str = "application/vnd.dev.sigstore.bundle";
/// ghcr.io lists bundle referrers under the empty artifact type.
const EMPTY_ARTIFACT: &str = "application/vnd.oci.empty.v1+json";

/// One bundle layer of a referrer: its digest and bytes.
struct FoundBundle {
    digest: String,
    bytes: Vec<u8>,
}

#[derive(Deserialize)]
struct Listed {
    #[serde(default)]
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Referrer {
    #[serde(default)]
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    digest: String,
    #[serde(default)]
    media_type: String,
    artifact_type: Option<String>,
}

impl RegistryClient {
    /// The verdict once the crate's `layers` (whose own verdict, `crate_verdict`, did not pass)
    /// are joined by the bundles among `digest`'s referrers: a keyed bundle may verify, and a
    /// bundle the crate dropped is counted as found, or named when it cannot be verified.
    pub(super) async fn judge_with_bundles(
        &self,
        repo: &Repository,
        digest: &str,
        required: &SignatureRequirement,
        trust_root: Option<&SigstoreTrustRoot>,
        layers: &[SignatureLayer],
    ) -> Result<SignatureVerdict, RegistryError> {
        let bundles = self.referrer_bundles(repo, digest).await?;
        let rekor = trust_root.map(rekor_keys);
        let judged_by_crate: Vec<&str> = layers
            .iter()
            .filter(|l| matches!(l.bundle, Some(BundleContent::SigstoreBundle(_))))
            .map(|l| l.oci_digest.as_str())
            .collect();
        // Every layer the crate returned was a signature that did not verify.
        let mut not_verified = layers.len();
        let mut unsupported = None;
        for bundle in &bundles {
            match check_bundle(&bundle.bytes, digest, &required.keys, rekor.as_ref()) {
                BundleCheck::Verified { key } => {
                    return Ok(SignatureVerdict::Verified {
                        by: format!("key {key} (Sigstore bundle)"),
                    });
                }
                BundleCheck::NotASignature => {}
                BundleCheck::Keyless(_) if judged_by_crate.contains(&bundle.digest.as_str()) => {}
                BundleCheck::Keyless(None) | BundleCheck::NotVerified => not_verified += 1,
                BundleCheck::Keyless(Some(why)) | BundleCheck::Unsupported(why) => {
                    unsupported.get_or_insert(why);
                }
            }
        }
        Ok(match unsupported {
            Some(why) => SignatureVerdict::Unverifiable {
                why,
                found: not_verified,
            },
            None if not_verified == 0 => SignatureVerdict::Unsigned,
            None => SignatureVerdict::Untrusted {
                found: not_verified,
                signer: None,
            },
        })
    }

    /// The bundle layers of `digest`'s referrers.
    async fn referrer_bundles(
        &self,
        repo: &Repository,
        digest: &str,
    ) -> Result<Vec<FoundBundle>, RegistryError> {
        let reg = self.registry(&repo.registry);
        let api = Url::parse(&format!("{}/v2/{}/referrers/{digest}", reg.base, repo.path))
            .map_err(|e| malformed(repo, "referrers URL", e))?;
        let what = format!("referrers of {digest}");
        let asked = RegistryRequest {
            kind: Kind::Manifest,
            method: Method::GET,
            url: api,
            accept: Some(OCI_IMAGE_INDEX_MEDIA_TYPE),
            target: Target::Manifest(&what),
        };
        let listed = match self.send(&reg, repo, asked).await {
            Ok(resp) => resp
                .bytes()
                .await
                .map_err(|e| unreachable(repo, e))?
                .to_vec(),
            // No referrers API (distribution 2.8): the referrers tag schema.
            Err(RegistryError::NotFound { .. } | RegistryError::RepositoryNotFound { .. }) => {
                let tag = digest.replace(':', "-");
                let url = manifest_url(&reg, repo, &tag)?;
                match self
                    .manifest_bytes(&reg, repo, url, &format!("referrers tag {tag}"))
                    .await
                {
                    Ok(bytes) => bytes,
                    Err(RegistryError::NotFound { .. }) => return Ok(Vec::new()),
                    Err(e) => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        let listed: Listed =
            serde_json::from_slice(&listed).map_err(|e| malformed(repo, "referrers index", e))?;
        let mut found = Vec::new();
        for referrer in listed.manifests.iter().filter(|d| {
            d.artifact_type
                .as_deref()
                .is_none_or(|t| t.starts_with(BUNDLE_PREFIX) || t == EMPTY_ARTIFACT)
        }) {
            let url = manifest_url(&reg, repo, &referrer.digest)?;
            let bytes = self
                .manifest_bytes(&reg, repo, url, &referrer.digest)
                .await?;
            verify_digest(repo, "referrer manifest", &referrer.digest, &bytes)?;
            let manifest: Referrer = serde_json::from_slice(&bytes)
                .map_err(|e| malformed(repo, "referrer manifest", e))?;
            for layer in manifest
                .layers
                .iter()
                .filter(|l| l.media_type.starts_with(BUNDLE_PREFIX))
            {
                let bytes = self.bundle_blob(repo, &layer.digest).await?;
                found.push(FoundBundle {
                    digest: layer.digest.clone(),
                    bytes,
                });
            }
        }
        Ok(found)
    }

    async fn bundle_blob(&self, repo: &Repository, digest: &str) -> Result<Vec<u8>, RegistryError> {
        let reg = self.registry(&repo.registry);
        self.verified_blob(&reg, repo, digest, "Sigstore bundle")
            .await
    }
}

/// The trust root's Rekor keys the crate can read, by hex log id (as its client builds them).
pub(super) fn rekor_keys(root: &SigstoreTrustRoot) -> RekorKeys {
    root.rekor_keys()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(id, der)| Some((id, CosignVerificationKey::try_from_der(der).ok()?)))
        .collect()
}
