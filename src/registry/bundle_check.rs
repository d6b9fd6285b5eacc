//! What one Sigstore bundle found among an image's referrers says, and whether the Rekor entry
//! of a `.sig` layer (keyless, or keyed with a trust root) is the record of that very signature:
//! the checks that the `sigstore` crate's client leaves out (issue 22).
//!
//! # Why this exists
//!
//! cosign v3 writes a bundle for `cosign sign --key` too: the same DSSE envelope of an in-toto
//! statement (predicate `https://sigstore.dev/cosign/sign/v1`) as a keyless one, but with a
//! public-key hint where the certificate would be. `sigstore` 0.15's client accepts only bundles
//! with a certificate and drops the others with a log line, which would make every tag a v3
//! user signs with a key "unsigned". And for a keyless `.sig` layer the crate checks that the
//! Rekor entry's timestamp was signed by the log, not that the logged body names this
//! signature, certificate and payload; the certificate's validity is judged at that entry's
//! time, so a foreign entry would lend the certificate its time. A keyed `.sig` layer's Rekor
//! bundle is checked as `cosign verify --key` checks the log: its timestamp by the crate, its
//! entry here; a bundle whose timestamp does not verify makes the crate drop the layer without
//! a word, so [`keyed_layer_log_problem`] names why.
//!
//! Every signature, signed timestamp and hash-tree proof here is checked by the crate's public
//! functions ([`CosignVerificationKey::verify_signature`], [`SignedArtifactBundle::new_verified`]
//! for the Rekor SET, [`InclusionProof::verify`] for the inclusion proof and checkpoint); this
//! module only parses, builds the DSSE pre-authentication encoding the signature covers, and
//! compares what the statement and the log entry name with what was fetched. Never: accept a
//! bundle whose shape it cannot check (that is [`BundleCheck::Unsupported`], and reported).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::Deserialize as _;
use serde_json::Value;
use sigstore::cosign::SignatureLayer;
use sigstore::cosign::bundle::{Bundle as RekorBundle, SignedArtifactBundle};
use sigstore::cosign::bundle_content::BundleContent;
use sigstore::crypto::{CosignVerificationKey, Signature};
use sigstore::rekor::models::InclusionProof;
use sigstore::rekor::models::checkpoint::SignedCheckpoint;
use sigstore_protobuf_specs::dev::sigstore::bundle::v1::{
    Bundle, bundle::Content, verification_material::Content as Material,
};
use sigstore_protobuf_specs::dev::sigstore::rekor::v1::TransparencyLogEntry;
use sigstore_protobuf_specs::io::intoto::Envelope;
use x509_cert::der::DecodePem as _;

use super::manifest::sha256_hex;
use crate::config::signatures::PublicKey;

/// The predicate of an image signature in a cosign v3 bundle; other predicates are attestations.
const SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
const IN_TOTO: &str = "application/vnd.in-toto+json";
/// The annotations of a `.sig` layer cosign writes (the crate keeps its names private).
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// The Rekor keys of the trust root, by hex log id.
pub(super) type RekorKeys = BTreeMap<String, CosignVerificationKey>;

/// What one bundle among an image's referrers says.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum BundleCheck {
    /// An attestation (another predicate), not a signature: not counted.
    NotASignature,
    /// Keyless: the crate's client judged it. `Some(why)` when its shape is one the crate
    /// cannot verify at all.
    Keyless(Option<String>),
    /// Signed by this configured key (named by its source), its log entry checked if any.
    Verified { key: String },
    /// A signature, but no configured key made it, it names another image, or its log entry
    /// does not verify.
    NotVerified,
    /// A keyed bundle of a shape tagpilot cannot verify, and why (completes "a Sigstore bundle
    /// was found but …").
    Unsupported(String),
}

/// Judges one bundle `bytes` for the image `digest` with the configured `keys`; its Rekor entry
/// is checked when the trust root's `rekor` keys are at hand.
pub(super) fn check_bundle(
    bytes: &[u8],
    digest: &str,
    keys: &[PublicKey],
    rekor: Option<&RekorKeys>,
) -> BundleCheck {
    let bundle: Bundle = match serde_json::from_slice(bytes) {
        Ok(b) => b,
        Err(e) => return BundleCheck::Unsupported(format!("it does not parse ({e})")),
    };
    // Attestations (SBOMs, provenance) are referrers too: only the signature predicate counts.
    if let Some(Content::DsseEnvelope(env)) = &bundle.content
        && env.payload_type == IN_TOTO
        && serde_json::from_slice::<Value>(&env.payload)
            .is_ok_and(|s| s["predicateType"] != SIGN_PREDICATE)
    {
        return BundleCheck::NotASignature;
    }
    let Some(material) = bundle
        .verification_material
        .as_ref()
        .and_then(|m| m.content.as_ref())
    else {
        return BundleCheck::Unsupported("it carries no key hint or certificate".into());
    };
    let env = match (&bundle.content, material) {
        (_, Material::Certificate(_) | Material::X509CertificateChain(_)) => {
            return BundleCheck::Keyless(keyless_shape_problem(&bundle));
        }
        (Some(Content::DsseEnvelope(env)), Material::PublicKey(_)) => env,
        (Some(Content::MessageSignature(_)), Material::PublicKey(_)) => {
            return BundleCheck::Unsupported(
                "it signs a message digest with a key (messageSignature), which the sigstore \
                 crate verifies only with a certificate"
                    .into(),
            );
        }
        (None, _) => return BundleCheck::Unsupported("it carries no signature".into()),
    };
    if env.payload_type != IN_TOTO {
        return BundleCheck::Unsupported(format!(
            "its envelope holds {:?}, not an in-toto statement",
            env.payload_type
        ));
    }
    let Ok(statement) = serde_json::from_slice::<Value>(&env.payload) else {
        return BundleCheck::Unsupported("its in-toto statement does not parse".into());
    };
    if !names_digest(&statement, digest) {
        return BundleCheck::NotVerified;
    }
    let [signature] = env.signatures.as_slice() else {
        return BundleCheck::Unsupported(format!(
            "its envelope has {} signatures, not one",
            env.signatures.len()
        ));
    };
    let pae = pre_authentication_encoding(&env.payload_type, &env.payload);
    let Some(key) = keys.iter().find(|k| {
        CosignVerificationKey::try_from_pem(&k.pem).is_ok_and(|v| {
            v.verify_signature(Signature::Raw(&signature.sig), &pae)
                .is_ok()
        })
    }) else {
        return BundleCheck::NotVerified;
    };
    let entries = &bundle
        .verification_material
        .as_ref()
        .expect("material read above")
        .tlog_entries;
    // Without a trust root a keyed bundle is judged as a keyed `.sig` layer is: by its key.
    if let Some(rekor) = rekor
        && !entries.is_empty()
    {
        match check_log_entry(entries, rekor, env, &signature.sig, &key.pem) {
            Ok(()) => {}
            Err(LogProblem::Unsupported(why)) => return BundleCheck::Unsupported(why),
            Err(LogProblem::Failed) => return BundleCheck::NotVerified,
        }
    }
    BundleCheck::Verified {
        key: key.source.clone(),
    }
}

/// Why the crate's client could not verify a keyless bundle of this shape at all, or `None`
/// when it could (so a keyless bundle it did not return failed its checks).
fn keyless_shape_problem(bundle: &Bundle) -> Option<String> {
    let material = bundle.verification_material.as_ref()?;
    if let Some(Material::X509CertificateChain(_)) = material.content {
        return Some(
            "it carries a certificate chain (bundle v0.1/v0.2); the sigstore crate reads \
             only v0.3's single certificate"
                .into(),
        );
    }
    if let Some(Content::MessageSignature(_)) = bundle.content {
        return Some(
            "it signs a message digest (messageSignature), not an in-toto statement".into(),
        );
    }
    log_entry_shape_problem(&material.tlog_entries, "dsse")
        .err()
        .map(|shape| shape.to_string())
}

/// What in a bundle's transparency-log entries the crate cannot check: anything but one Rekor
/// v1 entry of `kind` 0.0.1 with its signed timestamp and inclusion proof.
fn log_entry_shape_problem<'a>(
    entries: &'a [TransparencyLogEntry],
    kind: &str,
) -> Result<&'a TransparencyLogEntry, LogEntryShape> {
    let [entry] = entries else {
        return Err(match entries.len() {
            0 => LogEntryShape::NoEntry,
            n => LogEntryShape::Several(n),
        });
    };
    let (k, v) = entry
        .kind_version
        .as_ref()
        .map_or(("", ""), |kv| (kv.kind.as_str(), kv.version.as_str()));
    if (k, v) != (kind, "0.0.1") {
        return Err(LogEntryShape::Kind {
            kind: k.to_string(),
            version: v.to_string(),
        });
    }
    if entry.inclusion_promise.is_none() {
        return Err(LogEntryShape::NoTimestamp);
    }
    if entry.inclusion_proof.is_none() {
        return Err(LogEntryShape::NoProof);
    }
    Ok(entry)
}

/// Why a bundle's transparency-log entries are not the one shape the sigstore crate checks;
/// each completes "a Sigstore bundle was found but …".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum LogEntryShape {
    #[error(
        "it carries no transparency-log entry (a timestamp authority only?), which tagpilot \
         cannot check"
    )]
    NoEntry,
    #[error("it carries {0} transparency-log entries, not one")]
    Several(usize),
    #[error(
        "its transparency-log entry is {kind} {version}{}, which the sigstore crate cannot check",
        if version == "0.0.2" { " (Rekor v2)" } else { "" }
    )]
    Kind { kind: String, version: String },
    #[error("its transparency-log entry has no signed entry timestamp")]
    NoTimestamp,
    #[error("its transparency-log entry has no inclusion proof")]
    NoProof,
}

enum LogProblem {
    Unsupported(String),
    Failed,
}

/// The Rekor `dsse` entry of a keyed bundle: its signed timestamp and inclusion proof verified
/// by the crate with the trust root's key, and its body naming this envelope, payload,
/// signature and key.
fn check_log_entry(
    entries: &[TransparencyLogEntry],
    rekor: &RekorKeys,
    env: &Envelope,
    sig: &[u8],
    key_pem: &[u8],
) -> Result<(), LogProblem> {
    let entry = log_entry_shape_problem(entries, "dsse")
        .map_err(|shape| LogProblem::Unsupported(shape.to_string()))?;
    let log_id = hex::encode(
        entry
            .log_id
            .as_ref()
            .map(|l| l.key_id.as_slice())
            .unwrap_or(&[]),
    );
    let promise = entry.inclusion_promise.as_ref().ok_or(LogProblem::Failed)?;
    let set = serde_json::json!({
        "SignedEntryTimestamp": B64.encode(&promise.signed_entry_timestamp),
        "Payload": {
            "body": B64.encode(&entry.canonicalized_body),
            "integratedTime": entry.integrated_time,
            "logIndex": entry.log_index,
            "logID": log_id,
        },
    });
    set_verifies(set, rekor).map_err(|_| LogProblem::Failed)?;
    let rekor_key = rekor.get(&log_id).ok_or(LogProblem::Failed)?;
    let proof = entry.inclusion_proof.as_ref().ok_or(LogProblem::Failed)?;
    let hash = |h: &Vec<u8>| <[u8; 32]>::try_from(h.as_slice()).map_err(|_| LogProblem::Failed);
    let checkpoint = proof
        .checkpoint
        .as_ref()
        .and_then(|c| {
            serde_json::from_value::<SignedCheckpoint>(Value::from(c.envelope.clone())).ok()
        })
        .ok_or(LogProblem::Failed)?;
    InclusionProof::new(
        proof.log_index,
        hash(&proof.root_hash)?,
        u64::try_from(proof.tree_size).map_err(|_| LogProblem::Failed)?,
        proof.hashes.iter().map(hash).collect::<Result<_, _>>()?,
        Some(checkpoint),
    )
    .verify(&entry.canonicalized_body, rekor_key)
    .map_err(|_| LogProblem::Failed)?;
    let body: Value =
        serde_json::from_slice(&entry.canonicalized_body).map_err(|_| LogProblem::Failed)?;
    // What Rekor hashed: the envelope as the protobuf JSON mapping writes it (as the crate
    // does for keyless bundles).
    let envelope_json = serde_json::to_vec(env).map_err(|_| LogProblem::Failed)?;
    let spec = &body["spec"];
    let logged_sig = spec["signatures"]
        .as_array()
        .and_then(|s| match s.as_slice() {
            [one] => Some(one),
            _ => None,
        });
    let names_this = body["kind"] == "dsse"
        && body["apiVersion"] == "0.0.1"
        && hash_is(&spec["payloadHash"], &sha256_hex(&env.payload))
        && hash_is(&spec["envelopeHash"], &sha256_hex(&envelope_json))
        && logged_sig.is_some_and(|s| {
            decoded(&s["signature"]).is_some_and(|logged| logged == sig)
                && decoded(&s["verifier"]).is_some_and(|pem| same_pem(&pem, key_pem))
        });
    names_this.then_some(()).ok_or(LogProblem::Failed)
}

/// Whether a legacy keyless `.sig` layer's Rekor entry (whose timestamp the crate verified) is
/// the record of this layer: a `hashedrekord` naming the sha256 of its payload, its signature
/// and the key of its certificate. Layers without a certificate and a legacy Rekor bundle are
/// not asked (the crate checks a v0.3 bundle's entry itself).
pub(super) fn logged_entry_matches(layer: &SignatureLayer) -> bool {
    let (Some(cert), Some(BundleContent::RekorBundle(rekor)), Some(sig)) = (
        &layer.certificate_signature,
        &layer.bundle,
        &layer.signature,
    ) else {
        return true;
    };
    records_layer(rekor, &layer.raw_data, sig, |pem| {
        x509_cert::Certificate::from_pem(pem)
            .ok()
            .and_then(|c| {
                CosignVerificationKey::try_from(
                    &c.tbs_certificate().subject_public_key_info().clone(),
                )
                .ok()
            })
            .is_some_and(|k| spki(&k) == spki(&cert.verification_key))
    })
}

/// Whether a keyed `.sig` layer's Rekor bundle (its timestamp verified by the crate with the
/// trust root's Rekor key; the crate reads it only when a trust root is given) is the record
/// of this layer signed by `key`: a `hashedrekord` naming the sha256 of its payload, its
/// signature and that public key. A layer without one is judged by its key alone.
pub(super) fn keyed_entry_matches(layer: &SignatureLayer, key: &CosignVerificationKey) -> bool {
    let (Some(BundleContent::RekorBundle(rekor)), Some(sig)) = (&layer.bundle, &layer.signature)
    else {
        return true;
    };
    records_layer(rekor, &layer.raw_data, sig, |pem| {
        CosignVerificationKey::try_from_pem(pem).is_ok_and(|k| spki(&k) == spki(key))
    })
}

/// Whether the legacy Rekor bundle `rekor` records the `.sig` layer with payload `raw_data` and
/// signature `sig` (base64): a `hashedrekord` 0.0.1 naming the payload's sha256, that signature,
/// and a logged key (PEM) that `logged_key` accepts.
fn records_layer(
    rekor: &RekorBundle,
    raw_data: &[u8],
    sig: &str,
    logged_key: impl Fn(&[u8]) -> bool,
) -> bool {
    let Some(body) = B64
        .decode(&rekor.payload.body)
        .ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
    else {
        return false;
    };
    let spec = &body["spec"];
    body["kind"] == "hashedrekord"
        && body["apiVersion"] == "0.0.1"
        && hash_is(&spec["data"]["hash"], &sha256_hex(raw_data))
        && decoded(&spec["signature"]["content"]) == B64.decode(sig).ok()
        && decoded(&spec["signature"]["publicKey"]["content"]).is_some_and(|pem| logged_key(&pem))
}

/// A keyed `.sig` layer (its `payload` and `annotations`) that one of `keys` signed and whose
/// Rekor bundle does not verify with the trust root's `rekor` keys: that key's source and why
/// (completes "its Rekor bundle …"). `None` for a layer no key signed, or without a bundle, or
/// whose bundle verifies.
pub(super) fn keyed_layer_log_problem(
    payload: &[u8],
    annotations: &BTreeMap<String, String>,
    keys: &[PublicKey],
    rekor: &RekorKeys,
) -> Option<(String, String)> {
    let sig = annotations.get(SIGNATURE_ANNOTATION)?;
    let raw = annotations.get(REKOR_BUNDLE_ANNOTATION)?;
    let key = keys.iter().find(|k| {
        CosignVerificationKey::try_from_pem(&k.pem).is_ok_and(|v| {
            v.verify_signature(Signature::Base64Encoded(sig.as_bytes()), payload)
                .is_ok()
        })
    })?;
    rekor_bundle_problem(raw, rekor).map(|why| (key.source.clone(), why))
}

/// Why a `.sig` layer's Rekor bundle (the `dev.sigstore.cosign/bundle` annotation, `raw`)
/// does not verify with the trust root's Rekor keys, or `None` when its signed entry timestamp
/// does. The crate's client drops such a layer without a word; this names why.
fn rekor_bundle_problem(raw: &str, rekor: &RekorKeys) -> Option<String> {
    let parsed = serde_json::from_str::<Value>(raw).and_then(|v| {
        let bundle = RekorBundle::deserialize(&v)?;
        Ok((v, bundle))
    });
    let (value, bundle) = match parsed {
        Ok(p) => p,
        Err(e) => return Some(format!("does not parse ({e})")),
    };
    if !rekor.contains_key(&bundle.payload.log_id) {
        return Some(format!(
            "names a transparency log the trust root does not hold (log id {})",
            bundle.payload.log_id
        ));
    }
    set_verifies(value, rekor).err().map(|_| {
        "has a signed entry timestamp (SET) that the trust root's Rekor key did not sign".into()
    })
}

/// The crate's own check of a Rekor SET (`rekor_bundle`: `SignedEntryTimestamp` and its
/// `Payload`): the signed payload is the canonical JSON of the entry; the artifact fields of
/// the wrapper are not read by it.
fn set_verifies(
    rekor_bundle: Value,
    rekor: &RekorKeys,
) -> Result<(), sigstore::errors::SigstoreError> {
    let wrapped =
        serde_json::json!({"base64Signature": "", "cert": "", "rekorBundle": rekor_bundle});
    SignedArtifactBundle::new_verified(&wrapped.to_string(), rekor).map(drop)
}

/// Whether an in-toto statement names the image `digest` (`sha256:<hex>`) among its subjects.
fn names_digest(statement: &Value, digest: &str) -> bool {
    let hex = digest.strip_prefix("sha256:").unwrap_or(digest);
    statement["subject"]
        .as_array()
        .is_some_and(|s| s.iter().any(|s| s["digest"]["sha256"] == hex))
}

/// DSSE's pre-authentication encoding: what a DSSE signature covers (an encoding, no crypto).
fn pre_authentication_encoding(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut pae = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    pae.extend_from_slice(payload);
    pae
}

/// `{"algorithm": "sha256", "value": hex}` of a Rekor body.
fn hash_is(logged: &Value, hex: &str) -> bool {
    logged["algorithm"] == "sha256" && logged["value"] == hex
}

fn decoded(logged: &Value) -> Option<Vec<u8>> {
    logged.as_str().and_then(|s| B64.decode(s).ok())
}

/// Whether two PEM texts hold the same bytes (line breaks and headers aside).
fn same_pem(a: &[u8], b: &[u8]) -> bool {
    let body = |pem: &[u8]| -> String {
        String::from_utf8_lossy(pem)
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .flat_map(|l| l.chars().filter(|c| !c.is_whitespace()))
            .collect()
    };
    let (a, b) = (body(a), body(b));
    !a.is_empty() && a == b
}

/// The DER `SubjectPublicKeyInfo` a key holds, whatever its scheme.
fn spki(key: &CosignVerificationKey) -> &[u8] {
    match key {
        CosignVerificationKey::RSA_PSS_SHA256(d)
        | CosignVerificationKey::RSA_PKCS1_SHA256(d)
        | CosignVerificationKey::ECDSA_P256_SHA256_ASN1(d)
        | CosignVerificationKey::ECDSA_P384_SHA384_ASN1(d)
        | CosignVerificationKey::ECDSA_P521_SHA512_ASN1(d)
        | CosignVerificationKey::ED25519(d) => d,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pre_authentication_encoding_is_dsse_v1() {
        assert_eq!(
            pre_authentication_encoding("t/x", b"hi"),
            b"DSSEv1 3 t/x 2 hi".to_vec()
        );
    }

    #[test]
    fn bundles_that_cannot_be_read_say_why() {
        let check = |json: &str| check_bundle(json.as_bytes(), "sha256:ab", &[], None);
        assert!(
            matches!(check("{"), BundleCheck::Unsupported(why) if why.starts_with("it does not parse"))
        );
        assert_eq!(
            check(r#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json"}"#),
            BundleCheck::Unsupported("it carries no key hint or certificate".into())
        );
    }

    #[test]
    fn a_sig_layer_s_rekor_bundle_that_cannot_be_checked_says_why() {
        let none = RekorKeys::new();
        assert!(rekor_bundle_problem("{", &none).is_some_and(|w| w.starts_with("does not parse")));
        let bundle = r#"{"SignedEntryTimestamp": "AA==", "Payload": {"body": "",
            "integratedTime": 1, "logIndex": 1, "logID": "ab"}}"#;
        assert_eq!(
            rekor_bundle_problem(bundle, &none).as_deref(),
            Some("names a transparency log the trust root does not hold (log id ab)")
        );
    }

    #[test]
    fn pem_texts_compare_by_their_bytes() {
        let a = b"-----BEGIN PUBLIC KEY-----\nAAAA\nBBBB\n-----END PUBLIC KEY-----\n";
        let b = b"-----BEGIN PUBLIC KEY-----\r\nAAAABBBB\r\n-----END PUBLIC KEY-----";
        assert!(same_pem(a, b));
        assert!(!same_pem(
            a,
            b"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"
        ));
        assert!(!same_pem(b"", b""));
    }
}
