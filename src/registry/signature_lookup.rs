//! Whether a digest that the `sigstore` crate found no trusted signature for really has no
//! `.sig` signature, asked through tagpilot's own request path (`send.rs`: its credential, rate
//! limiter, retries and typed errors).
//!
//! Why: `cosign::Client::trusted_signature_layers` only logs what it could not fetch (a 500 on
//! the `.sig` tag, a blob that failed) and returns the layers it got, so a registry fault looks
//! exactly like "unsigned". Taken for unsigned, the newest signed tag would be skipped for an
//! older one. So when the crate's layers do not verify, the `sha256-<hex>.sig` image and its
//! layers are looked at again here, as the crate reads them (the referrers are read the same
//! way by `bundles.rs`). Only a 404 is an absence; every other failure is an error that holds
//! the reference.
//!
//! The layers read here are also what names why the crate dropped a keyed layer whose Rekor
//! bundle did not verify (`bundle_check.rs`). Never: verify anything here (that is the
//! crate's, in `signatures.rs` and `bundle_check.rs`); this only reads.

use std::collections::BTreeMap;

use oci_client::manifest::OciImageManifest;

use super::RegistryError;
use super::error::malformed;
use super::manifest::manifest_url;
use super::signature_state::SignatureError;
use super::state::{RegistryClient, RegistryState};
use crate::image::Repository;

/// One layer of a digest's `.sig` image as the registry holds it: the signed payload and the
/// layer's annotations (signature, certificate, Rekor bundle).
pub(super) struct SigTagLayer {
    pub(super) payload: Vec<u8>,
    pub(super) annotations: BTreeMap<String, String>,
}

impl RegistryClient {
    /// The layers of the `.sig` image of `digest`. Empty only when the tag is absent; a request
    /// the registry fails is an error naming what was looked at.
    pub(super) async fn sig_tag_layers(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        digest: &str,
    ) -> Result<Vec<SigTagLayer>, SignatureError> {
        let tagged = digest.replace(':', "-");
        let sig_tag = format!("{tagged}.sig");
        let at_sig_tag = |source| SignatureError::Lookup {
            what: format!("the tag {sig_tag}"),
            source,
        };
        let mut found = Vec::new();
        if let Some(manifest) = self
            .absent_or(reg, repo, &sig_tag, &format!("tag {sig_tag}"))
            .await
            .map_err(at_sig_tag)?
        {
            let manifest: OciImageManifest = serde_json::from_slice(&manifest)
                .map_err(|e| at_sig_tag(malformed(repo, "signature manifest", e)))?;
            for layer in manifest.layers {
                let payload = self
                    .verified_blob(reg, repo, &layer.digest, "signature blob")
                    .await
                    .map_err(at_sig_tag)?;
                found.push(SigTagLayer {
                    payload,
                    annotations: layer.annotations.unwrap_or_default(),
                });
            }
        }
        Ok(found)
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
}
