//! Cosign signatures of an image digest (issue 22), verified with the `sigstore` crate: the
//! legacy `sha256-<digest>.sig` tag (simple-signing payloads, keyed or keyless with a Rekor
//! SET) and Sigstore bundles found as OCI 1.1 referrers (the referrers API, else the referrers
//! tag schema; keyless, with their Rekor SET and inclusion proof checked offline). tagpilot
//! hand-rolls no cryptography: which layers are trusted, and whether a key signed one, is the
//! crate's answer; tagpilot only matches the keyless identities (issuer, subject) against the
//! certificate fields the crate verified.
//!
//! # Why these requests are the crate's, not `send.rs`'s
//!
//! `sigstore` 0.15 builds its signature layers (and checks certificates and the transparency
//! log on the way) only inside `cosign::Client::trusted_signature_layers`, which fetches with
//! its own `oci-client`; its registry trait and layer constructors are private. So the edge
//! gives that client what `send.rs` would use — the registry's credential from the same
//! resolver, `http` for an `insecure` registry, a place in the registry's in-flight bound and
//! one turn of its rate limiter per verification — and asks it at most once per digest and
//! requirement: verified digests are kept in the [`MetadataStore`](super::MetadataStore) under
//! the requirement's fingerprint; failures only until the next cycle (CI often signs a
//! moment after it pushes).
//!
//! What the crate's client leaves out — keyed cosign v3 bundles (it drops bundles without a
//! certificate), naming bundles it cannot check, tying a `.sig` layer's Rekor entry to that
//! layer (keyless, and keyed when a trust root gives the crate the Rekor keys: then a keyed
//! layer is checked as `cosign verify --key` checks the log), and naming a keyed layer it
//! dropped because its Rekor SET did not verify — is `bundle_check.rs`: the entries in
//! [`judge`], the rest only when its layers verify nothing, over the referrers `bundles.rs`
//! reads and the `.sig` layers `signature_lookup.rs` reads again.
//!
//! Never: take an image as signed because verification could not run (that is an error, which
//! holds the reference), or log a credential.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sigstore::cosign::signature_layers::CertificateSubject;
use sigstore::cosign::verification_constraint::{PublicKeyVerifier, VerificationConstraint};
use sigstore::cosign::{CosignCapabilities, SignatureLayer};
use sigstore::crypto::{CosignVerificationKey, Signature};
use sigstore::registry::{Auth, ClientConfig, ClientProtocol, OciReference};
use sigstore::trust::sigstore::SigstoreTrustRoot;

use super::RegistryError;
use super::bundle_check::{keyed_entry_matches, keyed_layer_log_problem, logged_entry_matches};
use super::bundles::rekor_keys;
use super::signature_state::{SignatureError, SignatureVerdict, VerificationCounts};
use super::state::RegistryClient;
use crate::config::signatures::{Requirement, SignatureRequirement, default_for};
use crate::image::Repository;

impl RegistryClient {
    /// Verifications so far by result (see [`VerificationCounts`]).
    pub fn signature_verifications(&self) -> VerificationCounts {
        let c = &self.signatures.counts;
        [
            ("verified", &c.verified),
            ("unsigned", &c.unsigned),
            ("untrusted", &c.untrusted),
            ("unverifiable", &c.unverifiable),
            ("error", &c.error),
            ("cached", &c.cached),
        ]
        .into_iter()
        .map(|(label, n)| (label, n.load(Ordering::Relaxed)))
        .collect()
    }

    /// `tagpilot.yaml`'s default requirement for `repo`'s images, if any.
    pub(super) fn default_signatures(&self, repo: &Repository) -> Option<&Requirement> {
        default_for(
            &self.signatures.defaults,
            &format!("{}/{}", repo.registry, repo.path),
        )
    }

    /// The verdict on `digest` of `repo` under `required`, else under `tagpilot.yaml`'s default
    /// for the image.
    pub(super) async fn verify_digest(
        &self,
        repo: &Repository,
        digest: &str,
        required: Option<&Requirement>,
    ) -> Result<SignatureVerdict, RegistryError> {
        let Some(required) = required.or_else(|| self.default_signatures(repo)) else {
            return Ok(SignatureVerdict::NotRequired);
        };
        let fingerprint = self.verdict_fingerprint(required);
        let key = (repo.clone(), digest.to_string(), fingerprint.clone());
        self.signatures
            .verdicts
            .get_or_init(key, || async {
                // A digest names content, not where it is: the same image in another repository
                // has its own signatures.
                let store_key = format!("{}/{}@{digest}|{fingerprint}", repo.registry, repo.path);
                if let Some(store) = &self.store
                    && store.signature_verified(&store_key)
                {
                    self.signatures
                        .counts
                        .cached
                        .fetch_add(1, Ordering::Relaxed);
                    return Ok(SignatureVerdict::Verified {
                        by: "a verification kept in the state store".to_string(),
                    });
                }
                let verdict = self.verify_now(repo, digest, required).await;
                let counts = &self.signatures.counts;
                let counter = match &verdict {
                    Ok(SignatureVerdict::Verified { .. }) => &counts.verified,
                    Ok(SignatureVerdict::Unsigned) => &counts.unsigned,
                    Ok(SignatureVerdict::Unverifiable { .. }) => &counts.unverifiable,
                    Ok(_) => &counts.untrusted,
                    Err(_) => &counts.error,
                };
                counter.fetch_add(1, Ordering::Relaxed);
                if let (Some(store), Ok(SignatureVerdict::Verified { .. })) =
                    (&self.store, &verdict)
                {
                    store.put_signature_verified(&store_key);
                }
                verdict
            })
            .await
    }

    async fn verify_now(
        &self,
        repo: &Repository,
        digest: &str,
        required: &SignatureRequirement,
    ) -> Result<SignatureVerdict, RegistryError> {
        let failed = |source: SignatureError| RegistryError::Signatures {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
            digest: digest.to_string(),
            source: Arc::new(source),
        };
        let reg = self.registry(&repo.registry);
        let trust_root = match required.needs_trust_root()
            || self.signatures.trust_root_file.is_some()
        {
            true => Some(
                self.trust_root()
                    .await
                    .map_err(|e| RegistryError::SignaturesSetup {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        source: e,
                    })?,
            ),
            false => None,
        };
        let protocol = match reg.base.starts_with("http://") {
            true => ClientProtocol::Http,
            false => ClientProtocol::Https,
        };
        let config = ClientConfig {
            protocol,
            ..ClientConfig::default()
        };
        let mut builder = sigstore::cosign::ClientBuilder::default().with_oci_client_config(config);
        if let Some(root) = &trust_root {
            builder = builder
                .with_trust_repository(root.as_ref())
                .map_err(|source| failed(SignatureError::Client { source }))?;
        }
        let mut client = builder
            .build()
            .map_err(|source| failed(SignatureError::Client { source }))?;
        let auth = match self.credential(&reg, repo).await? {
            Some(c) => Auth::Basic(c.username.clone(), c.password().to_string()),
            None => Auth::Anonymous,
        };
        let image =
            OciReference::with_digest(repo.registry.clone(), repo.path.clone(), digest.to_string());
        let layers = {
            let _permit = reg
                .in_flight
                .acquire()
                .await
                .expect("semaphore never closed");
            if let Some(limiter) = &reg.limiter {
                limiter.until_ready().await;
            }
            reg.check_up(repo)?;
            // The crate's requests carry no timeout of their own: a registry that hangs on
            // them must not stall the cycle.
            tokio::time::timeout(reg.timeout, client.trusted_signature_layers(&auth, &image))
                .await
                .map_err(|_| {
                    failed(SignatureError::TimedOut {
                        timeout: reg.timeout,
                    })
                })?
                .map_err(|source| failed(SignatureError::Fetch { source }))?
        };
        let by_crate = judge(&layers, required);
        if by_crate.passes() {
            return Ok(by_crate);
        }
        // The crate logs what it could not fetch and returns no layer for it: only a true
        // absence is "unsigned". The `.sig` tag is asked again here (`signature_lookup.rs`), the
        // referrers by `judge_with_bundles`, both through `send.rs`, whose faults are errors.
        let at_sig_tag = self
            .sig_tag_layers(&reg, repo, digest)
            .await
            .map_err(failed)?;
        // The crate also drops, with a log line only, a layer whose Rekor bundle does not verify
        // with the trust root: a required key's such layer is named, not "untrusted".
        // A keyless signer the crate's layers named, and why it did not count, is said.
        let signer = match &by_crate {
            SignatureVerdict::Untrusted { signer, .. } => signer.clone(),
            _ => None,
        };
        let refused = match (&by_crate, trust_root.as_deref()) {
            (SignatureVerdict::LogRefused { .. }, _) => Some(by_crate),
            (_, Some(root)) => {
                let rekor = rekor_keys(root);
                at_sig_tag.iter().find_map(|l| {
                    let (key, why) = keyed_layer_log_problem(
                        &l.payload,
                        &l.annotations,
                        &required.keys,
                        &rekor,
                    )?;
                    Some(SignatureVerdict::LogRefused { key, why })
                })
            }
            (_, None) => None,
        };
        let verdict = self
            .judge_with_bundles(repo, digest, required, trust_root.as_deref(), &layers)
            .await
            .map_err(|source| {
                failed(SignatureError::Lookup {
                    what: format!("the referrers of {digest}"),
                    source,
                })
            })?;
        Ok(match (verdict, refused) {
            (verdict @ SignatureVerdict::Verified { .. }, _) => verdict,
            (_, Some(refused)) => refused,
            // Found, but none the crate trusted (a certificate or log entry that did not check).
            (SignatureVerdict::Unsigned, None) if !at_sig_tag.is_empty() => {
                SignatureVerdict::Untrusted {
                    found: at_sig_tag.len(),
                    signer,
                }
            }
            (
                SignatureVerdict::Untrusted {
                    found,
                    signer: None,
                },
                None,
            ) => SignatureVerdict::Untrusted { found, signer },
            (verdict, None) => verdict,
        })
    }

    /// What a verdict depends on besides the digest: the requirement's keys and identities and,
    /// when a trust root takes part, which one (the file's content; Sigstore's TUF root is
    /// taken as one). A changed key, identity or trust root file verifies again.
    fn verdict_fingerprint(&self, required: &SignatureRequirement) -> String {
        let requirement = required.fingerprint();
        let root = match &self.signatures.trust_root_file {
            Some(path) => self
                .signatures
                .trust_root_hash
                .get_or_init(|| match std::fs::read(path) {
                    Ok(bytes) => super::manifest::sha256_hex(&bytes),
                    // Verifying reads it again and says why it cannot.
                    Err(_) => "unreadable".to_string(),
                })
                .as_str(),
            None if required.needs_trust_root() => "tuf",
            None => return requirement,
        };
        format!("{requirement}|root:{root}")
    }

    /// The trust root, loaded once: `signatures.trustRoot` when set, else Sigstore's TUF.
    async fn trust_root(&self) -> Result<Arc<SigstoreTrustRoot>, Arc<SignatureError>> {
        self.signatures
            .trust_root
            .get_or_try_init(|| async {
                let root = match &self.signatures.trust_root_file {
                    Some(path) => std::fs::read(path)
                        .map_err(|e| sigstore::errors::SigstoreError::IOErrorWithContext {
                            context: "reading the file".to_string(),
                            source: e,
                        })
                        .and_then(|bytes| {
                            SigstoreTrustRoot::from_trusted_root_json_unchecked(&bytes)
                        })
                        .map_err(|source| SignatureError::TrustRootFile {
                            path: path.clone(),
                            source,
                        }),
                    None => SigstoreTrustRoot::new(None)
                        .await
                        .map_err(|source| SignatureError::TrustRootTuf { source }),
                };
                root.map(Arc::new).map_err(Arc::new)
            })
            .await
            .cloned()
    }
}

/// Whether any of the trusted `layers` is signed by one of the keys (its Rekor entry, if the
/// crate read one, this signature's record), or carries a certificate (verified by the crate
/// against the trust root) of one of the identities.
fn judge(layers: &[SignatureLayer], required: &SignatureRequirement) -> SignatureVerdict {
    if layers.is_empty() {
        return SignatureVerdict::Unsigned;
    }
    let mut refused = None;
    for key in &required.keys {
        // The PEM was checked when the setting was read; a key that fails now verifies nothing.
        let Ok(verifier) = PublicKeyVerifier::try_from(&key.pem) else {
            continue;
        };
        let Ok(logged_key) = CosignVerificationKey::try_from_pem(&key.pem) else {
            continue;
        };
        for layer in layers
            .iter()
            .filter(|l| verifier.verify(l).unwrap_or(false))
        {
            // With a trust root the crate verified the layer's Rekor bundle timestamp (without
            // one it ignores the bundle, and the key alone decides); that the entry is this
            // signature's record is asked here, as `cosign verify --key` does.
            if keyed_entry_matches(layer, &logged_key) {
                return SignatureVerdict::Verified {
                    by: format!("key {}", key.source),
                };
            }
            refused.get_or_insert_with(|| SignatureVerdict::LogRefused {
                key: key.source.clone(),
                why: "records another signature (its entry is not the hashedrekord of this \
                      payload, signature and key)"
                    .into(),
            });
        }
    }
    for identity in &required.identities {
        // The crate checked the certificate's chain and the log entry's timestamp; that the
        // certificate's key made this layer's signature, and that the entry is its record, are
        // asked in `keyless` (the certificate's validity was judged at its time).
        let signed = layers.iter().filter_map(keyless).any(|k| {
            k.signed
                && k.logged
                && identity.issuer.matches(k.issuer.unwrap_or_default())
                && identity.subject.matches(k.subject)
        });
        if signed {
            return SignatureVerdict::Verified {
                by: format!("identity {identity}"),
            };
        }
    }
    refused.unwrap_or(SignatureVerdict::Untrusted {
        found: layers.len(),
        signer: layers.iter().find_map(|l| keyless_refusal(l, required)),
    })
}

/// A keyless layer's signer, as its certificate (verified by the crate) names it, and whether
/// the certificate's key made the layer's signature and its Rekor entry is this signature's
/// record.
struct Keyless<'l> {
    subject: &'l str,
    issuer: Option<&'l str>,
    signed: bool,
    logged: bool,
}

/// `layer`'s keyless signer; `None` for a layer without a certificate.
fn keyless(layer: &SignatureLayer) -> Option<Keyless<'_>> {
    let cert = layer.certificate_signature.as_ref()?;
    let subject = match &cert.subject {
        CertificateSubject::Email(e) => e.as_str(),
        CertificateSubject::Uri(u) => u.as_str(),
    };
    // The identity constraints the crate offers do not check that the certificate's key made
    // this layer's signature, so that is asked of the crate here.
    let signed = layer.signature.as_ref().is_some_and(|sig| {
        cert.verification_key
            .verify_signature(Signature::Base64Encoded(sig.as_bytes()), &layer.raw_data)
            .is_ok()
    });
    Some(Keyless {
        subject,
        issuer: cert.issuer.as_deref(),
        signed,
        logged: signed && logged_entry_matches(layer),
    })
}

/// Who signed a keyless `layer` and why the signature does not count under `required`
/// ("signed by identity … issued by …, but the policy wants …"); `None` for a keyed layer.
fn keyless_refusal(layer: &SignatureLayer, required: &SignatureRequirement) -> Option<String> {
    let k = keyless(layer)?;
    let why = if !k.signed {
        "its certificate's key did not make this signature".to_string()
    } else if !k.logged {
        "its Rekor entry records another signature".to_string()
    } else {
        let keys = required.keys.iter().map(|k| format!("key {}", k.source));
        let identities = required.identities.iter().map(ToString::to_string);
        let wanted: Vec<String> = keys.chain(identities).collect();
        format!("the policy wants {}", wanted.join(" or "))
    };
    Some(format!(
        "signed by identity {} issued by {}, but {why}",
        k.subject,
        k.issuer.unwrap_or("no issuer")
    ))
}
