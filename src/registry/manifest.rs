//! Manifests as tagpilot asks for them: the `Accept` header naming the four manifest types it
//! reads, the manifest URL, checking that content is what its digest says, and parsing. Shared by
//! `digest.rs` (a tag's digest) and `inspect.rs` (what a digest is), so neither needs the other.

use std::sync::Arc;

use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE,
    OCI_IMAGE_MEDIA_TYPE,
};
use reqwest::{Method, Url};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};

use super::RegistryError;
use super::error::{Malformation, malformed, unreachable};
use super::send::{RegistryRequest, Target};
use super::state::{Kind, RegistryClient, RegistryState, SharedManifest};
use crate::image::Repository;

/// All four manifest media types: without them distribution 2.8 answers 404 for OCI manifests and
/// converts Docker schema2 to schema1, which has another digest.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

impl RegistryClient {
    /// Asks for the manifest at `url` (`what` names it in a 404), every manifest type accepted.
    pub(super) async fn request_manifest(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        method: Method,
        url: Url,
        what: &str,
    ) -> Result<reqwest::Response, RegistryError> {
        self.send(
            reg,
            repo,
            RegistryRequest {
                kind: Kind::Manifest,
                method,
                url,
                accept: Some(MANIFEST_ACCEPT),
                target: Target::Manifest(what),
            },
        )
        .await
    }

    /// The bytes of the manifest at `url`, as served.
    pub(super) async fn manifest_bytes(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        url: Url,
        what: &str,
    ) -> Result<Vec<u8>, RegistryError> {
        let resp = self
            .request_manifest(reg, repo, Method::GET, url, what)
            .await?;
        let body = resp.bytes().await.map_err(|e| unreachable(repo, e))?;
        Ok(body.to_vec())
    }

    /// The blob `digest` of `repo`, checked to hash to its digest; `label` names it in errors
    /// (`config blob`, `Sigstore bundle`).
    pub(super) async fn verified_blob(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        digest: &str,
        label: &'static str,
    ) -> Result<Vec<u8>, RegistryError> {
        let url = Url::parse(&format!("{}/v2/{}/blobs/{digest}", reg.base, repo.path))
            .map_err(|e| malformed(repo, "blob URL", e))?;
        let what = format!("{label} {digest}");
        let asked = RegistryRequest {
            kind: Kind::Blob,
            method: Method::GET,
            url,
            accept: None,
            target: Target::Blob(&what),
        };
        let body = self
            .send(reg, repo, asked)
            .await?
            .bytes()
            .await
            .map_err(|e| unreachable(repo, e))?;
        verify_digest(repo, label, digest, &body)?;
        Ok(body.to_vec())
    }
}

pub(super) fn manifest_url(
    reg: &RegistryState,
    repo: &Repository,
    reference: &str,
) -> Result<Url, RegistryError> {
    Url::parse(&format!(
        "{}/v2/{}/manifests/{reference}",
        reg.base, repo.path
    ))
    .map_err(|e| malformed(repo, "manifest URL", e))
}

/// Content fetched by digest must hash to it (only sha256 is checked; it is what registries use).
pub(super) fn verify_digest(
    repo: &Repository,
    what: &'static str,
    digest: &str,
    body: &[u8],
) -> Result<(), RegistryError> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Ok(());
    };
    let actual = sha256_hex(body);
    if actual != hex {
        return Err(malformed(
            repo,
            what,
            Malformation::DigestMismatch {
                actual,
                expected: digest.to_string(),
            },
        ));
    }
    Ok(())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A manifest of one of the four media types tagpilot asks for; anything else is reported, not
/// guessed at.
pub(super) fn parse_manifest(
    repo: &Repository,
    body: &[u8],
) -> Result<SharedManifest, RegistryError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Versioned {
        #[serde(default)]
        schema_version: Option<u32>,
        #[serde(default)]
        media_type: Option<String>,
    }
    let versioned: Versioned =
        serde_json::from_slice(body).map_err(|e| malformed(repo, "manifest", e))?;
    if versioned.schema_version == Some(1) {
        return Err(malformed(repo, "manifest", Malformation::Schema1));
    }
    if let Some(mt) = versioned.media_type.as_deref()
        && ![
            OCI_IMAGE_INDEX_MEDIA_TYPE,
            OCI_IMAGE_MEDIA_TYPE,
            IMAGE_MANIFEST_LIST_MEDIA_TYPE,
            IMAGE_MANIFEST_MEDIA_TYPE,
        ]
        .contains(&mt)
    {
        return Err(malformed(
            repo,
            "manifest",
            Malformation::MediaType(mt.to_string()),
        ));
    }
    serde_json::from_slice(body)
        .map(Arc::new)
        .map_err(|e| malformed(repo, "manifest", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_lists_the_four_manifest_types() {
        for mt in [
            OCI_IMAGE_INDEX_MEDIA_TYPE,
            OCI_IMAGE_MEDIA_TYPE,
            IMAGE_MANIFEST_LIST_MEDIA_TYPE,
            IMAGE_MANIFEST_MEDIA_TYPE,
        ] {
            assert!(MANIFEST_ACCEPT.split(", ").any(|a| a == mt), "{mt}");
        }
    }

    #[test]
    fn content_that_does_not_hash_to_its_digest_is_malformed() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let digest = format!("sha256:{}", sha256_hex(b"{}"));
        assert!(verify_digest(&repo, "manifest", &digest, b"{}").is_ok());
        let err = verify_digest(&repo, "manifest", &digest, b"{ }").unwrap_err();
        assert!(
            crate::error_chain::chain(&err).contains(&format!("not {digest}")),
            "{err}"
        );
    }

    #[test]
    fn schema1_and_unknown_media_types_are_malformed_not_guessed() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let err = parse_manifest(&repo, br#"{"schemaVersion": 1, "name": "p"}"#).unwrap_err();
        assert_eq!(err.metric_label(), "malformed_response");
        assert!(
            crate::error_chain::chain(&err).contains("schema 1"),
            "{err}"
        );
        let err = parse_manifest(&repo, br#"{"schemaVersion": 2, "mediaType": "text/html"}"#)
            .unwrap_err();
        assert!(
            crate::error_chain::chain(&err).contains("text/html"),
            "{err}"
        );
    }
}
