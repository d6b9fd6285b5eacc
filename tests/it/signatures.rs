//! Cosign signatures (issue 22) against the real registry, with images this test signs itself:
//! a P-256 key generated here signs simple-signing payloads pushed as `sha256-<hex>.sig` images,
//! as `cosign sign --key` does. A tag whose image does not verify is no candidate: selection
//! moves on to an older signed tag, and the report names the skipped tag and why.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use rcgen::SigningKey;
use tagpilot::plan::{self, Plan};
use tagpilot::policy::{self, ImagePolicy};
use tagpilot::registry::{RegistryClient, VerificationCounts};

use crate::support::registry::{Artifact, Auth, ImageSpec, TestRegistry};

const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
const REKOR_BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";

/// A cosign key pair made by the test.
struct Signer {
    key: rcgen::KeyPair,
}

impl Signer {
    fn new() -> Self {
        Signer {
            key: rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        }
    }

    fn public_pem(&self) -> String {
        self.key.public_key_pem()
    }

    /// `cosign sign --key`: a simple-signing payload for `digest`, signed, pushed as the
    /// `sha256-<hex>.sig` image beside it. `tamper` changes the payload after signing.
    async fn sign(&self, registry: &TestRegistry, path: &str, digest: &str, tamper: bool) {
        let mut payload = simple_signing(registry, path, digest);
        let signature = b64(&self.key.sign(&payload).unwrap());
        if tamper {
            // Still names the digest, but is no longer what the key signed.
            payload.push(b' ');
        }
        push_sig(
            registry,
            path,
            digest,
            payload,
            [(SIGNATURE_ANNOTATION, signature)],
        )
        .await;
    }

    /// `cosign sign --key` with the transparency log (cosign's default): the `.sig` layer also
    /// carries the Rekor bundle of a `hashedrekord` entry logged by the test Rekor, as `log`
    /// says.
    async fn sign_logged(
        &self,
        registry: &TestRegistry,
        path: &str,
        digest: &str,
        sigstore: &Sigstore,
        log: KeyedSigLog,
    ) {
        let payload = simple_signing(registry, path, digest);
        let signature = b64(&self.key.sign(&payload).unwrap());
        let bundle = match log {
            KeyedSigLog::Logged => sigstore.rekor_bundle(&payload, &signature, &self.public_pem()),
            KeyedSigLog::TamperedSet => {
                let mut bundle = sigstore.rekor_bundle(&payload, &signature, &self.public_pem());
                // Backdated after the log signed it: the SET no longer covers the entry.
                let logged = bundle["Payload"]["integratedTime"].as_i64().unwrap();
                bundle["Payload"]["integratedTime"] = (logged - 86_400).into();
                bundle
            }
            KeyedSigLog::Lent => {
                // A genuine entry of the same key, for another image's signature.
                let other = simple_signing(registry, path, &format!("sha256:{}", "0".repeat(64)));
                let other_signature = b64(&self.key.sign(&other).unwrap());
                sigstore.rekor_bundle(&other, &other_signature, &self.public_pem())
            }
        };
        push_sig(
            registry,
            path,
            digest,
            payload,
            [
                (SIGNATURE_ANNOTATION, signature),
                (REKOR_BUNDLE_ANNOTATION, bundle.to_string()),
            ],
        )
        .await;
    }
}

/// How [`Signer::sign_logged`] logs a keyed `.sig` signature.
#[derive(Clone, Copy)]
enum KeyedSigLog {
    /// The entry of this payload, signature and key, its SET signed by the test Rekor.
    Logged,
    /// That entry, changed after the test Rekor signed its SET.
    TamperedSet,
    /// A genuine entry (SET signed by the test Rekor) of another signature by the same key.
    Lent,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The simple-signing payload cosign signs for `digest` of `path`.
fn simple_signing(registry: &TestRegistry, path: &str, digest: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "critical": {
            "identity": {"docker-reference": format!("{}/{path}", registry.host())},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": null,
    }))
    .unwrap()
}

/// Pushes `payload` as the layer of the `sha256-<hex>.sig` image of `digest`, with these
/// layer annotations.
async fn push_sig<const N: usize>(
    registry: &TestRegistry,
    path: &str,
    digest: &str,
    payload: Vec<u8>,
    annotations: [(&str, String); N],
) {
    let artifact = Artifact {
        config_media_type: "application/vnd.oci.image.config.v1+json".into(),
        layer: payload,
        layer_media_type: SIMPLE_SIGNING.into(),
        layer_annotations: annotations
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        artifact_type: None,
        subject: None,
    };
    let tag = format!("{}.sig", digest.replace(':', "-"));
    registry.push_artifact(path, Some(&tag), artifact).await;
}

/// A working directory with one manifest on `HOST/shop/api:1.0.0` and a policy requiring a
/// signature by `key`.
struct Work {
    dir: tempfile::TempDir,
    policies: Vec<ImagePolicy>,
}

fn work(registry: &TestRegistry, key_pem: &str) -> Work {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cosign.pub"), key_pem).unwrap();
    let image = registry.image("shop/api");
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(
        dir.path().join("apps/deploy.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:1.0.0\n"
        ),
    )
    .unwrap();
    let policy_path = dir.path().join("policy.yaml");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures:\n    keys: [{{file: cosign.pub}}]\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    std::fs::write(&policy_path, &text).unwrap();
    let policies = policy::parse_file(&policy_path, &text).expect("policy");
    Work { dir, policies }
}

async fn plan_with(work: &Work, client: &RegistryClient) -> Plan {
    let scope = plan::Scope::local(work.dir.path());
    plan::plan(&scope, &work.policies, client, &())
        .await
        .expect("plan")
}

/// The tags the plan passed over, as `tag: why`, best first.
fn skipped_tags(plan: &Plan) -> Vec<String> {
    plan.skipped_tags
        .iter()
        .flat_map(|s| &s.tags)
        .map(|t| t.0.to_string())
        .collect()
}

fn count(counts: &VerificationCounts, label: &str) -> u64 {
    counts
        .iter()
        .find(|(l, _)| *l == label)
        .map_or(0, |(_, n)| *n)
}

#[tokio::test]
async fn a_tampered_signature_or_another_key_does_not_verify() {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    let other = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let tampered = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    let foreign = registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &tampered, true).await;
    other.sign(&registry, "shop/api", &foreign, false).await;
    let work = work(&registry, &signer.public_pem());
    let client = registry.client();

    let planned = plan_with(&work, &client).await;

    assert!(planned.changes.is_empty(), "{:?}", planned.changes);
    let hold = &planned.holds[0];
    assert!(
        hold.reason
            .contains("newer tag 1.2.0: not signed by a required key")
            && hold.reason.contains("(1 more skipped)"),
        "{}",
        hold.reason
    );
    let skipped = skipped_tags(&planned);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    assert!(
        skipped[1].starts_with("1.1.0: not signed by a required key"),
        "{skipped:?}"
    );
    let counts = client.signature_verifications();
    assert_eq!(count(&counts, "untrusted"), 2, "{counts:?}");
    assert_eq!(count(&counts, "verified"), 0, "{counts:?}");
}

#[tokio::test]
async fn a_digest_verified_once_is_not_verified_again() {
    let registry = TestRegistry::start_with_access_log(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let work = work(&registry, &signer.public_pem());
    let state_dir = tempfile::tempdir().unwrap();
    let sig_tag = format!("{}.sig", signed.replace(':', "-"));
    let sig_requests = |registry: &TestRegistry| {
        registry
            .requests()
            .iter()
            .filter(|r| r.contains(&sig_tag))
            .count()
    };

    // A first process verifies and keeps the verdict in its state store.
    {
        let state = Arc::new(tagpilot::state::State::open(state_dir.path()).expect("state"));
        let client = registry.client().with_store(state.clone());
        let planned = plan_with(&work, &client).await;
        assert_eq!(planned.changes[0].to, "1.1.0");
        // A second cycle of the same process asks nothing again either.
        client.start_cycle();
        let planned = plan_with(&work, &client).await;
        assert_eq!(planned.changes[0].to, "1.1.0");
        assert_eq!(count(&client.signature_verifications(), "verified"), 1);
        state.flush();
    }
    let fetched = sig_requests(&registry);
    assert!(fetched > 0, "{:?}", registry.requests());

    // A restarted process takes the verdict from the store: no signature is fetched again.
    let state = Arc::new(tagpilot::state::State::open(state_dir.path()).expect("state"));
    let client = registry.client().with_store(state);
    let planned = plan_with(&work, &client).await;
    assert_eq!(planned.changes[0].to, "1.1.0");
    let counts = client.signature_verifications();
    assert_eq!(count(&counts, "verified"), 0, "{counts:?}");
    assert_eq!(count(&counts, "cached"), 1, "{counts:?}");
    assert_eq!(
        sig_requests(&registry),
        fetched,
        "{:?}",
        registry.requests()
    );

    // A changed key is another requirement: verified again (and now it fails).
    let other = Signer::new();
    let work = self::work(&registry, &other.public_pem());
    let planned = plan_with(&work, &client).await;
    assert!(planned.changes.is_empty(), "{:?}", planned.changes);
    assert_eq!(count(&client.signature_verifications(), "untrusted"), 1);
}

// === keyless: a test CA stands in for Fulcio, a test key for Rekor ===

const ISSUER: &str = "https://token.actions.githubusercontent.com";
const SUBJECT: &str = "https://github.com/acme/api/.github/workflows/release.yml@refs/heads/main";

/// A Fulcio stand-in (a CA that issues code-signing certificates with Sigstore's issuer
/// extension) and a Rekor stand-in (a key that signs entry timestamps), with the
/// `trusted_root.json` that names both.
struct Sigstore {
    ca: rcgen::CertifiedIssuer<'static, rcgen::KeyPair>,
    rekor: rcgen::KeyPair,
    log_id: Vec<u8>,
}

impl Sigstore {
    fn new() -> Self {
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::KeyCertSign,
            rcgen::KeyUsagePurpose::DigitalSignature,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "tagpilot test fulcio");
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let ca = rcgen::CertifiedIssuer::self_signed(params, key).unwrap();
        let rekor = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        use sha2::Digest;
        let log_id =
            sha2::Sha256::digest(rcgen::PublicKeyData::subject_public_key_info(&rekor)).to_vec();
        Sigstore { ca, rekor, log_id }
    }

    /// `trusted_root.json` in Sigstore's format, as `cosign --trusted-root` reads it.
    fn trusted_root(&self) -> String {
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        serde_json::json!({
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [{
                "baseUrl": "https://rekor.test",
                "hashAlgorithm": "SHA2_256",
                "publicKey": {
                    "rawBytes": b64(&rcgen::PublicKeyData::subject_public_key_info(&self.rekor)),
                    "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                    "validFor": {"start": "2020-01-01T00:00:00Z"},
                },
                "logId": {"keyId": b64(&self.log_id)},
            }],
            "certificateAuthorities": [{
                "subject": {"organization": "tagpilot", "commonName": "tagpilot test fulcio"},
                "uri": "https://fulcio.test",
                "certChain": {"certificates": [{"rawBytes": b64(self.ca.der())}]},
                "validFor": {"start": "2020-01-01T00:00:00Z"},
            }],
            "ctlogs": [],
            "timestampAuthorities": [],
        })
        .to_string()
    }

    /// `cosign sign` in keyless mode: a short-lived certificate for `subject` (issued by the
    /// test CA), the payload signed with its key, and the Rekor bundle (the entry timestamp
    /// signed by the test Rekor key), all as annotations of the `.sig` image's layer.
    async fn sign(&self, registry: &TestRegistry, path: &str, digest: &str, subject: &str) {
        self.sign_logged(registry, path, digest, subject, true)
            .await;
    }

    /// [`Sigstore::sign`], whose Rekor entry is the `hashedrekord` of this signature when
    /// `logged_right`, else of another payload (a genuine entry the log signed, lent to it).
    async fn sign_logged(
        &self,
        registry: &TestRegistry,
        path: &str,
        digest: &str,
        subject: &str,
        logged_right: bool,
    ) {
        let (key, cert) = self.certificate(subject);
        let payload = simple_signing(registry, path, digest);
        let signature = b64(&key.sign(&payload).unwrap());
        let logged_payload = match logged_right {
            true => payload.clone(),
            false => b"another payload".to_vec(),
        };
        let bundle = self.rekor_bundle(&logged_payload, &signature, &cert.pem());
        push_sig(
            registry,
            path,
            digest,
            payload,
            [
                (SIGNATURE_ANNOTATION, signature),
                ("dev.sigstore.cosign/certificate", cert.pem()),
                ("dev.sigstore.cosign/chain", self.ca.pem()),
                (REKOR_BUNDLE_ANNOTATION, bundle.to_string()),
            ],
        )
        .await;
    }

    /// The Rekor bundle of a `.sig` layer (`SignedEntryTimestamp` and `Payload`): the
    /// `hashedrekord` entry of `payload`'s sha256, `signature` and `public_pem` (a certificate
    /// or a public key), its timestamp signed by the test Rekor key.
    fn rekor_bundle(&self, payload: &[u8], signature: &str, public_pem: &str) -> serde_json::Value {
        use sha2::Digest;
        let body = serde_json::json!({
            "apiVersion": "0.0.1",
            "kind": "hashedrekord",
            "spec": {
                "data": {"hash": {
                    "algorithm": "sha256",
                    "value": hex::encode(sha2::Sha256::digest(payload)),
                }},
                "signature": {
                    "content": signature,
                    "publicKey": {"content": b64(public_pem.as_bytes())},
                },
            },
        });
        // The entry timestamp signs the canonical JSON of the entry (keys in order).
        let entry = serde_json::json!({
            "body": b64(&serde_json::to_vec(&body).unwrap()),
            "integratedTime": jiff::Timestamp::now().as_second(),
            "logID": hex::encode(&self.log_id),
            "logIndex": 1,
        });
        let set = b64(&self
            .rekor
            .sign(&serde_json::to_vec(&entry).unwrap())
            .unwrap());
        serde_json::json!({"SignedEntryTimestamp": set, "Payload": entry})
    }
}

impl Sigstore {
    /// A Fulcio-style certificate for `subject`, and its key.
    fn certificate(&self, subject: &str) -> (rcgen::KeyPair, rcgen::Certificate) {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names = vec![rcgen::SanType::URI(subject.try_into().unwrap())];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2100, 1, 1);
        params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 1],
            ISSUER.as_bytes().to_vec(),
        )];
        let cert = params.signed_by(&key, &self.ca).unwrap();
        (key, cert)
    }

    /// `cosign sign --new-bundle-format` (cosign v3) in keyless mode: a Sigstore bundle v0.3 (a
    /// DSSE envelope of an in-toto statement about `digest`, the certificate, and a Rekor `dsse`
    /// entry with its timestamp and its inclusion proof in a one-entry log whose checkpoint the
    /// test Rekor key signs), pushed as a referrer of the image: an artifact whose `subject` is
    /// the image, listed in the referrers tag schema's `sha256-<hex>` index.
    /// With `bad_proof`, the log's signed root is not the entry's: the inclusion proof fails.
    async fn sign_bundle(
        &self,
        registry: &TestRegistry,
        path: &str,
        digest: &str,
        subject: &str,
        bad_proof: bool,
    ) {
        use sha2::Digest;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let hex_sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
        let (key, cert) = self.certificate(subject);
        let statement = serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": digest.trim_start_matches("sha256:")}}],
            "predicateType": "https://sigstore.dev/cosign/sign/v1",
        }))
        .unwrap();
        let payload_type = "application/vnd.in-toto+json";
        let mut pae = format!(
            "DSSEv1 {} {payload_type} {} ",
            payload_type.len(),
            statement.len()
        )
        .into_bytes();
        pae.extend_from_slice(&statement);
        let sig = key.sign(&pae).unwrap();
        // What Rekor hashed: the envelope as compact JSON, fields in protobuf order.
        let envelope = format!(
            "{{\"payload\":\"{}\",\"payloadType\":\"{payload_type}\",\"signatures\":[{{\"sig\":\"{}\"}}]}}",
            b64(&statement),
            b64(&sig)
        );
        let body = format!(
            "{{\"apiVersion\":\"0.0.1\",\"kind\":\"dsse\",\"spec\":{{\"envelopeHash\":{{\"algorithm\":\"sha256\",\"value\":\"{}\"}},\"payloadHash\":{{\"algorithm\":\"sha256\",\"value\":\"{}\"}},\"signatures\":[{{\"signature\":\"{}\",\"verifier\":\"{}\"}}]}}}}",
            hex_sha(envelope.as_bytes()),
            hex_sha(&statement),
            b64(&sig),
            b64(cert.pem().as_bytes())
        );
        let integrated = jiff::Timestamp::now().as_second();
        let log_id = hex::encode(&self.log_id);
        // The entry timestamp: the canonical JSON of the entry (keys in JCS order).
        let set_payload = format!(
            "{{\"body\":\"{}\",\"integratedTime\":{integrated},\"logID\":\"{log_id}\",\"logIndex\":0}}",
            b64(body.as_bytes())
        );
        let set = self.rekor.sign(set_payload.as_bytes()).unwrap();
        // A log of one entry: its root is the entry's leaf hash (RFC 6962), no path.
        let mut leaf = vec![0u8];
        leaf.extend_from_slice(body.as_bytes());
        let mut root = sha2::Sha256::digest(&leaf).to_vec();
        if bad_proof {
            root[0] ^= 1;
        }
        let note = format!("rekor.test - 1\n1\n{}\n", b64(&root));
        let mut hinted = self.log_id[..4].to_vec();
        hinted.extend(self.rekor.sign(note.as_bytes()).unwrap());
        let checkpoint = format!("{note}\n\u{2014} rekor.test {}\n", b64(&hinted));
        let bundle = serde_json::json!({
            "mediaType": BUNDLE,
            "verificationMaterial": {
                "certificate": {"rawBytes": b64(cert.der())},
                "tlogEntries": [{
                    "logIndex": "0",
                    "logId": {"keyId": b64(&self.log_id)},
                    "kindVersion": {"kind": "dsse", "version": "0.0.1"},
                    "integratedTime": integrated.to_string(),
                    "inclusionPromise": {"signedEntryTimestamp": b64(&set)},
                    "inclusionProof": {
                        "logIndex": "0",
                        "rootHash": b64(&root),
                        "treeSize": "1",
                        "hashes": [],
                        "checkpoint": {"envelope": checkpoint},
                    },
                    "canonicalizedBody": b64(body.as_bytes()),
                }],
            },
            "dsseEnvelope": {
                "payload": b64(&statement),
                "payloadType": payload_type,
                "signatures": [{"sig": b64(&sig)}],
            },
        });
        push_referrer(registry, path, digest, serde_json::to_vec(&bundle).unwrap()).await;
    }
}

const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";

#[tokio::test]
async fn bundles_found_as_referrers_verify_with_their_inclusion_proof() {
    let registry = TestRegistry::start(Auth::None).await;
    let sigstore = Sigstore::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let ours = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    let theirs = registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    let unproven = registry
        .push_image("shop/api", "1.3.0", ImageSpec::default())
        .await;
    sigstore
        .sign_bundle(&registry, "shop/api", &ours, SUBJECT, false)
        .await;
    sigstore
        .sign_bundle(
            &registry,
            "shop/api",
            &theirs,
            "https://github.com/evil/api/.github/workflows/release.yml@refs/heads/main",
            false,
        )
        .await;
    sigstore
        .sign_bundle(&registry, "shop/api", &unproven, SUBJECT, true)
        .await;
    let (work, client) = keyless_work(&registry, &sigstore);

    let planned = plan_with(&work, &client).await;

    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");
    let skipped: Vec<String> = skipped_tags(&planned)
        .iter()
        .map(|s| s.split(':').next().unwrap_or_default().to_string())
        .collect();
    assert_eq!(skipped, ["1.3.0", "1.2.0"]);
    let counts = client.signature_verifications();
    assert_eq!(count(&counts, "verified"), 1, "{counts:?}");
    // The wrong identity's bundle is trusted and does not match; the one whose inclusion proof
    // fails is a signature found that did not verify, not "unsigned".
    assert_eq!(count(&counts, "untrusted"), 2, "{counts:?}");
    assert_eq!(count(&counts, "unsigned"), 0, "{counts:?}");
}

/// The working directory and a client for keyless policies: the identity of `SUBJECT`'s
/// repository, the test `trusted_root.json` as `signatures.trustRoot`.
fn keyless_work(registry: &TestRegistry, sigstore: &Sigstore) -> (Work, RegistryClient) {
    let work = work(registry, &Signer::new().public_pem());
    let client = trusting(registry, &work, sigstore);
    let image = registry.image("shop/api");
    let policy_path = work.dir.path().join("policy.yaml");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures:\n    identities:\n      - {{issuer: '{ISSUER}', subjectRegExp: '^https://github.com/acme/'}}\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    let work = Work {
        policies: policy::parse_file(&policy_path, &text).expect("policy"),
        ..work
    };
    (work, client)
}

/// A client whose `signatures.trustRoot` is `sigstore`'s test `trusted_root.json`, written in
/// `work`'s directory.
fn trusting(registry: &TestRegistry, work: &Work, sigstore: &Sigstore) -> RegistryClient {
    let root = work.dir.path().join("trusted_root.json");
    std::fs::write(&root, sigstore.trusted_root()).unwrap();
    let mut options = registry.client_options(vec![registry.registry_config()]);
    options.signature_trust_root = Some(root);
    RegistryClient::new(options).unwrap()
}

/// 1.1.0 signed as the policy asks, the newer 1.2.0 not in a way that counts: the policy moves
/// to 1.1.0 and says why 1.2.0 was skipped. Keyed: 1.2.0 unsigned. Keyless: signed by another
/// identity (who signed it, and why that does not count); or with a Rekor entry, validly
/// signed by the log, that records another payload (the crate checks the entry's timestamp,
/// tagpilot that it is this signature's record).
#[tokio::test]
async fn a_newer_tag_whose_signature_does_not_count_is_skipped_for_an_older_signed_one() {
    enum Newer {
        Unsigned,
        SignedByAnotherIdentity,
        LentAnotherRekorEntry,
    }
    enum Skipped {
        StartsWith(&'static str),
        Is(String),
    }
    struct Case {
        name: &'static str,
        newer: Newer,
        skipped: Skipped,
    }
    const EVIL: &str = "https://github.com/evil/api/.github/workflows/release.yml@refs/heads/main";
    let cases = [
        Case {
            name: "keyed, unsigned",
            newer: Newer::Unsigned,
            skipped: Skipped::StartsWith("1.2.0: not signed"),
        },
        Case {
            name: "keyless, another identity",
            newer: Newer::SignedByAnotherIdentity,
            skipped: Skipped::Is(format!(
                "1.2.0: not signed by a required key or identity: signed by identity {EVIL} \
                 issued by {ISSUER}, but the policy wants issuer \"{ISSUER}\" subject \
                 /^https://github.com/acme// (1 signature(s) found, none verified)"
            )),
        },
        Case {
            name: "keyless, another payload's Rekor entry",
            newer: Newer::LentAnotherRekorEntry,
            skipped: Skipped::StartsWith("1.2.0: not signed by a required key"),
        },
    ];
    for case in cases {
        let name = case.name;
        let registry = TestRegistry::start(Auth::None).await;
        registry
            .push_image("shop/api", "1.0.0", ImageSpec::default())
            .await;
        let signed = registry
            .push_image("shop/api", "1.1.0", ImageSpec::default())
            .await;
        let newer = registry
            .push_image("shop/api", "1.2.0", ImageSpec::default())
            .await;
        let (work, client) = match case.newer {
            Newer::Unsigned => {
                let signer = Signer::new();
                signer.sign(&registry, "shop/api", &signed, false).await;
                let client = registry.client();
                (work(&registry, &signer.public_pem()), client)
            }
            Newer::SignedByAnotherIdentity | Newer::LentAnotherRekorEntry => {
                let sigstore = Sigstore::new();
                sigstore.sign(&registry, "shop/api", &signed, SUBJECT).await;
                match case.newer {
                    Newer::SignedByAnotherIdentity => {
                        sigstore.sign(&registry, "shop/api", &newer, EVIL).await;
                    }
                    _ => {
                        sigstore
                            .sign_logged(&registry, "shop/api", &newer, SUBJECT, false)
                            .await;
                    }
                }
                keyless_work(&registry, &sigstore)
            }
        };

        let planned = plan_with(&work, &client).await;

        assert!(
            planned.problems.is_empty(),
            "{name}: {:?}",
            planned.problems
        );
        let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
        assert_eq!(moved, ["1.1.0"], "{name}: {planned:#?}");
        let skipped = skipped_tags(&planned);
        assert_eq!(skipped.len(), 1, "{name}: {:?}", planned.skipped_tags);
        match &case.skipped {
            Skipped::StartsWith(start) => {
                assert!(skipped[0].starts_with(start), "{name}: {}", skipped[0]);
            }
            Skipped::Is(line) => assert_eq!(&skipped[0], line, "{name}"),
        }
    }
}

// === Argo CD Image Updater's imagesVerification ===

/// An `ImageUpdater` resource's `imagesVerification.cosignKey` names a Secret in its namespace;
/// tagpilot reads the key over the cluster connection and updates the Application only to a
/// tag signed with it: the newer unsigned tag is skipped.
#[tokio::test]
async fn image_updater_images_verification_reads_its_key_from_the_secret() {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let image = registry.image("shop/api");

    let server = MockServer::start().await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    Mock::given(method("GET"))
        .and(path(
            "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationList",
            "metadata": {"resourceVersion": "7"},
            "items": [{
                "metadata": {"name": "shop", "namespace": "argocd", "resourceVersion": "3"},
                "spec": {"project": "default",
                         "source": {"repoURL": "https://git.example/m.git", "path": "apps/web",
                                    "targetRevision": "main",
                                    "kustomize": {"images": [format!("{image}:1.0.0")]}},
                         "destination": {"server": "https://kubernetes.default.svc",
                                         "namespace": "argocd"}},
                "status": {"sourceType": "Kustomize"},
            }],
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(
            "/apis/argocd-image-updater.argoproj.io/v1alpha1/namespaces/argocd/imageupdaters",
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "apiVersion": "argocd-image-updater.argoproj.io/v1alpha1",
            "kind": "ImageUpdaterList", "metadata": {"resourceVersion": "9"},
            "items": [{
                "metadata": {"name": "updater", "namespace": "argocd", "generation": 1,
                             "resourceVersion": "5"},
                "spec": {
                    "imagesVerification": {
                        "enabled": true,
                        "cosignKey": {"secretName": "cosign", "key": "cosign.pub"},
                    },
                    "applicationRefs": [{
                        "namePattern": "shop",
                        "images": [{"alias": "api", "imageName": image}],
                    }],
                },
            }],
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/argocd/secrets/cosign"))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cosign", "namespace": "argocd"},
            "data": {"cosign.pub": b64(signer.public_pem().as_bytes())},
        })))
        .expect(1)
        .mount(&server)
        .await;

    let config = tagpilot::config::parse(
        std::path::Path::new("tagpilot.yaml"),
        "applications:\n  fromCluster:\n    namespaces: [argocd]\n",
    )
    .unwrap();
    let from = config.applications.as_ref().unwrap().from_cluster.clone();
    let cluster = crate::support::kube::cluster(&server, std::time::Duration::from_secs(10)).await;
    let loaded = tagpilot::argocd::read::cluster::load(cluster, from.as_ref().unwrap())
        .await
        .unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = tagpilot::git::RepoCache::new(cache_dir.path().join("cache"));
    let client = registry.client();

    let run =
        crate::support::engine::cycle(&config, Some(&loaded), &cache, &client, &(), true).await;

    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let moved: Vec<&str> = run.plan.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{:#?}", run.plan);
    assert_eq!(count(&client.signature_verifications(), "verified"), 1);
    assert_eq!(count(&client.signature_verifications(), "unsigned"), 1);
}

/// `tagpilot.yaml`'s `signatures.defaults` apply to a policy that sets no `signatures:` of its
/// own, by the longest image prefix; an image outside every prefix is not verified at all.
#[tokio::test]
async fn a_default_for_an_image_prefix_applies_to_policies_without_their_own() {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let work = work(&registry, &signer.public_pem());
    let image = registry.image("shop/api");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    let unsigned_policy =
        policy::parse_file(&work.dir.path().join("policy.yaml"), &text).expect("policy");
    let work = Work {
        policies: unsigned_policy,
        ..work
    };
    let config_path = work.dir.path().join("tagpilot.yaml");
    let defaults = |prefix: &str| {
        std::fs::write(
            &config_path,
            format!(
                "signatures:\n  defaults:\n    - prefix: {prefix}\n      keys: [{{file: cosign.pub}}]\n"
            ),
        )
        .unwrap();
        let config = tagpilot::config::load(&config_path).expect("config");
        let mut options = registry.client_options(vec![registry.registry_config()]);
        options.signature_defaults = config.signature_defaults;
        RegistryClient::new(options).unwrap()
    };

    let planned = plan_with(&work, &defaults(&format!("{}/shop", registry.host()))).await;
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");

    let planned = plan_with(&work, &defaults(&format!("{}/other", registry.host()))).await;
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.2.0"], "{planned:#?}");
}

// === keyed cosign v3 bundles, Rekor entries tied to their signature, identities, cache keys ===

/// How a keyed bundle is built by [`Sigstore::sign_keyed_bundle`].
#[derive(Clone, Copy, PartialEq)]
enum KeyedBundle {
    /// As `cosign sign --key` (v3) writes it, logged in the (test) Rekor v1.
    Logged,
    /// The statement changed after signing.
    Tampered,
    /// The log entry (genuinely signed by the log) names another key than the one that signed.
    LoggedForAnotherKey,
    /// A Rekor v2 entry (`dsse` 0.0.2, no signed entry timestamp), which the crate cannot check.
    RekorV2,
}

impl Sigstore {
    /// A Rekor v1 entry for `body` in a one-entry log: its signed entry timestamp and its
    /// inclusion proof under a checkpoint the test Rekor key signs.
    fn log_entry(
        &self,
        body: &str,
        kind_version: (&str, &str),
        promise: bool,
    ) -> serde_json::Value {
        use sha2::Digest;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let integrated = jiff::Timestamp::now().as_second();
        let log_id = hex::encode(&self.log_id);
        let set_payload = format!(
            "{{\"body\":\"{}\",\"integratedTime\":{integrated},\"logID\":\"{log_id}\",\"logIndex\":0}}",
            b64(body.as_bytes())
        );
        let set = self.rekor.sign(set_payload.as_bytes()).unwrap();
        let mut leaf = vec![0u8];
        leaf.extend_from_slice(body.as_bytes());
        let root = sha2::Sha256::digest(&leaf).to_vec();
        let note = format!("rekor.test - 1\n1\n{}\n", b64(&root));
        let mut hinted = self.log_id[..4].to_vec();
        hinted.extend(self.rekor.sign(note.as_bytes()).unwrap());
        let checkpoint = format!("{note}\n\u{2014} rekor.test {}\n", b64(&hinted));
        let mut entry = serde_json::json!({
            "logIndex": "0",
            "logId": {"keyId": b64(&self.log_id)},
            "kindVersion": {"kind": kind_version.0, "version": kind_version.1},
            "integratedTime": integrated.to_string(),
            "inclusionProof": {
                "logIndex": "0",
                "rootHash": b64(&root),
                "treeSize": "1",
                "hashes": [],
                "checkpoint": {"envelope": checkpoint},
            },
            "canonicalizedBody": b64(body.as_bytes()),
        });
        if promise {
            entry["inclusionPromise"] = serde_json::json!({"signedEntryTimestamp": b64(&set)});
        }
        entry
    }

    /// `cosign sign --key` as cosign v3 writes it: a bundle v0.3 whose verification material
    /// is a public-key hint (no certificate), a DSSE envelope of the cosign signature statement
    /// about `digest` signed by `signer`, and a Rekor `dsse` entry whose verifier is the public
    /// key; pushed as a referrer of the image (the referrers tag schema).
    async fn sign_keyed_bundle(
        &self,
        registry: &TestRegistry,
        path: &str,
        digest: &str,
        signer: &Signer,
        shape: KeyedBundle,
    ) {
        use sha2::Digest;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let hex_sha = |b: &[u8]| hex::encode(sha2::Sha256::digest(b));
        let statement = |predicate: serde_json::Value| {
            serde_json::to_vec(&serde_json::json!({
                "_type": "https://in-toto.io/Statement/v1",
                "subject": [{"digest": {"sha256": digest.trim_start_matches("sha256:")}}],
                "predicateType": "https://sigstore.dev/cosign/sign/v1",
                "predicate": predicate,
            }))
            .unwrap()
        };
        let signed = statement(serde_json::json!({}));
        let payload_type = "application/vnd.in-toto+json";
        let mut pae = format!(
            "DSSEv1 {} {payload_type} {} ",
            payload_type.len(),
            signed.len()
        )
        .into_bytes();
        pae.extend_from_slice(&signed);
        let sig = signer.key.sign(&pae).unwrap();
        let statement = match shape {
            KeyedBundle::Tampered => statement(serde_json::json!({"extra": true})),
            _ => signed,
        };
        let envelope = format!(
            "{{\"payload\":\"{}\",\"payloadType\":\"{payload_type}\",\"signatures\":[{{\"sig\":\"{}\"}}]}}",
            b64(&statement),
            b64(&sig)
        );
        let logged_key = match shape {
            KeyedBundle::LoggedForAnotherKey => Signer::new().public_pem(),
            _ => signer.public_pem(),
        };
        let body = format!(
            "{{\"apiVersion\":\"0.0.1\",\"kind\":\"dsse\",\"spec\":{{\"envelopeHash\":{{\"algorithm\":\"sha256\",\"value\":\"{}\"}},\"payloadHash\":{{\"algorithm\":\"sha256\",\"value\":\"{}\"}},\"signatures\":[{{\"signature\":\"{}\",\"verifier\":\"{}\"}}]}}}}",
            hex_sha(envelope.as_bytes()),
            hex_sha(&statement),
            b64(&sig),
            b64(logged_key.as_bytes())
        );
        let entry = match shape {
            KeyedBundle::RekorV2 => self.log_entry(&body, ("dsse", "0.0.2"), false),
            _ => self.log_entry(&body, ("dsse", "0.0.1"), true),
        };
        let hint = b64(&sha2::Sha256::digest(
            rcgen::PublicKeyData::subject_public_key_info(&signer.key),
        ));
        let bundle = serde_json::json!({
            "mediaType": BUNDLE,
            "verificationMaterial": {"publicKey": {"hint": hint}, "tlogEntries": [entry]},
            "dsseEnvelope": {
                "payload": b64(&statement),
                "payloadType": payload_type,
                "signatures": [{"sig": b64(&sig)}],
            },
        });
        push_referrer(registry, path, digest, serde_json::to_vec(&bundle).unwrap()).await;
    }
}

/// Pushes `bundle` as the one referrer of `digest`, listed in its referrers tag schema index.
async fn push_referrer(registry: &TestRegistry, path: &str, digest: &str, bundle: Vec<u8>) {
    let artifact = Artifact {
        config_media_type: "application/vnd.oci.empty.v1+json".into(),
        layer: bundle,
        layer_media_type: BUNDLE.into(),
        layer_annotations: BTreeMap::new(),
        artifact_type: Some(BUNDLE.into()),
        subject: Some(serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest,
            "size": 0,
        })),
    };
    let referrer = registry.push_artifact(path, None, artifact).await;
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": referrer,
            "size": 0,
            "artifactType": BUNDLE,
        }],
    });
    registry
        .push_raw_index(path, &digest.replace(':', "-"), &index)
        .await;
}

/// cosign v3 writes a bundle for `cosign sign --key` too; the crate's client drops it (no
/// certificate), so tagpilot verifies it with the configured key and the crate's log checks.
/// Another key, a tampered statement or a log entry naming another key does not verify; a
/// Rekor v2 entry is named as what it is, not taken for "no signature".
#[tokio::test]
async fn keyed_cosign_v3_bundles_verify_with_the_key_and_their_log_entry() {
    let registry = TestRegistry::start(Auth::None).await;
    let sigstore = Sigstore::new();
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let shapes = [
        ("1.1.0", KeyedBundle::Logged, true),
        ("1.2.0", KeyedBundle::Logged, false),
        ("1.3.0", KeyedBundle::Tampered, true),
        ("1.4.0", KeyedBundle::LoggedForAnotherKey, true),
        ("1.5.0", KeyedBundle::RekorV2, true),
    ];
    let other = Signer::new();
    for (tag, shape, ours) in shapes {
        let digest = registry
            .push_image("shop/api", tag, ImageSpec::default())
            .await;
        let by = if ours { &signer } else { &other };
        sigstore
            .sign_keyed_bundle(&registry, "shop/api", &digest, by, shape)
            .await;
    }
    let work = work(&registry, &signer.public_pem());
    let client = trusting(&registry, &work, &sigstore);

    let planned = plan_with(&work, &client).await;

    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");
    let skipped = skipped_tags(&planned);
    assert_eq!(skipped.len(), 4, "{skipped:?}");
    assert!(
        skipped[0].starts_with(
            "1.5.0: a Sigstore bundle was found but its transparency-log entry is dsse 0.0.2 \
             (Rekor v2)"
        ),
        "{skipped:?}"
    );
    for (line, tag) in skipped[1..].iter().zip(["1.4.0", "1.3.0", "1.2.0"]) {
        assert!(
            line.starts_with(&format!("{tag}: not signed by a required key")),
            "{skipped:?}"
        );
    }
    let counts = client.signature_verifications();
    assert_eq!(count(&counts, "verified"), 1, "{counts:?}");
    assert_eq!(count(&counts, "untrusted"), 3, "{counts:?}");
    assert_eq!(count(&counts, "unverifiable"), 1, "{counts:?}");
}

/// A keyed `.sig` signature that carries a Rekor bundle (as `cosign sign --key` writes it, the
/// log being on by default) is checked like `cosign verify --key` checks it when a trust root
/// is configured: the crate verifies the entry's timestamp (SET) with the trust root's Rekor
/// key, tagpilot that the entry is this signature's `hashedrekord`. A tampered SET or an entry
/// lent from another signature is refused and named; without a trust root the key alone decides.
#[tokio::test]
async fn a_keyed_signature_s_rekor_bundle_is_verified_with_the_trust_root() {
    let registry = TestRegistry::start(Auth::None).await;
    let sigstore = Sigstore::new();
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    for (tag, log) in [
        ("1.1.0", KeyedSigLog::Logged),
        ("1.2.0", KeyedSigLog::TamperedSet),
        ("1.3.0", KeyedSigLog::Lent),
    ] {
        let digest = registry
            .push_image("shop/api", tag, ImageSpec::default())
            .await;
        signer
            .sign_logged(&registry, "shop/api", &digest, &sigstore, log)
            .await;
    }
    let work = work(&registry, &signer.public_pem());
    let client = trusting(&registry, &work, &sigstore);

    let planned = plan_with(&work, &client).await;

    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");
    let skipped = skipped_tags(&planned);
    assert_eq!(skipped.len(), 2, "{skipped:?}");
    for (line, tag, why) in [
        (
            &skipped[0],
            "1.3.0",
            "records another signature (its entry is not the hashedrekord of this payload, \
             signature and key)",
        ),
        (
            &skipped[1],
            "1.2.0",
            "has a signed entry timestamp (SET) that the trust root's Rekor key did not sign",
        ),
    ] {
        assert!(
            line.starts_with(&format!("{tag}: signed by key "))
                && line.ends_with(&format!(", but its Rekor bundle {why}")),
            "{skipped:?}"
        );
    }
    let reasons: Vec<&str> = planned
        .skipped_tags
        .iter()
        .flat_map(|s| &s.tags)
        .map(|t| t.0.reason.label())
        .collect();
    assert_eq!(reasons, ["log_refused", "log_refused"]);
    let counts = client.signature_verifications();
    assert_eq!(count(&counts, "verified"), 1, "{counts:?}");
    assert_eq!(count(&counts, "untrusted"), 2, "{counts:?}");

    // Without a trust root the bundle is not read: the key alone verifies the newest.
    let client =
        RegistryClient::new(registry.client_options(vec![registry.registry_config()])).unwrap();
    let planned = plan_with(&work, &client).await;
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.3.0"], "{planned:#?}");
}

/// The keyless policy of [`keyless_work`] with another identity (a YAML flow mapping).
fn keyless_work_for(
    registry: &TestRegistry,
    sigstore: &Sigstore,
    identity: &str,
) -> (Work, RegistryClient) {
    let (work, client) = keyless_work(registry, sigstore);
    let image = registry.image("shop/api");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures:\n    identities:\n      - {identity}\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    let policies = policy::parse_file(&work.dir.path().join("policy.yaml"), &text).expect("policy");
    (Work { policies, ..work }, client)
}

#[tokio::test]
async fn issuers_match_exactly_or_by_regex_and_subjects_exactly() {
    let registry = TestRegistry::start(Auth::None).await;
    let sigstore = Sigstore::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    sigstore.sign(&registry, "shop/api", &signed, SUBJECT).await;
    let cases = [
        // cosign's --certificate-oidc-issuer is exact: another issuer, or a longer one, fails.
        (
            format!("{{issuer: 'https://accounts.google.com', subject: '{SUBJECT}'}}"),
            false,
        ),
        (
            format!("{{issuer: '{ISSUER}/', subject: '{SUBJECT}'}}"),
            false,
        ),
        (
            format!(
                "{{issuerRegExp: '^https://token\\.actions\\.githubusercontent\\.com$', subject: '{SUBJECT}'}}"
            ),
            true,
        ),
        (
            format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}'}}"),
            true,
        ),
        (
            format!("{{issuer: '{ISSUER}', subject: '{SUBJECT}x'}}"),
            false,
        ),
    ];
    for (identity, verifies) in cases {
        let (work, client) = keyless_work_for(&registry, &sigstore, &identity);
        let planned = plan_with(&work, &client).await;
        assert!(
            planned.problems.is_empty(),
            "{identity}: {:?}",
            planned.problems
        );
        let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
        let expected: &[&str] = if verifies { &["1.1.0"] } else { &[] };
        assert_eq!(moved, expected, "{identity}");
    }
}

/// A verdict kept in the state store holds for its trust root: another `trustRoot` file
/// verifies again (and here fails, the signature's CA and log not being in it).
#[tokio::test]
async fn a_changed_trust_root_verifies_again() {
    let registry = TestRegistry::start(Auth::None).await;
    let sigstore = Sigstore::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    sigstore.sign(&registry, "shop/api", &signed, SUBJECT).await;
    let (work, _) = keyless_work(&registry, &sigstore);
    let state_dir = tempfile::tempdir().unwrap();
    let root = work.dir.path().join("trusted_root.json");
    let run = || async {
        let state = Arc::new(tagpilot::state::State::open(state_dir.path()).expect("state"));
        let mut options = registry.client_options(vec![registry.registry_config()]);
        options.signature_trust_root = Some(root.clone());
        let client = RegistryClient::new(options)
            .unwrap()
            .with_store(state.clone());
        let planned = plan_with(&work, &client).await;
        state.flush();
        let moved: Vec<String> = planned.changes.iter().map(|c| c.to.clone()).collect();
        (moved, client.signature_verifications())
    };

    let (moved, counts) = run().await;
    assert_eq!(moved, ["1.1.0"]);
    assert_eq!(count(&counts, "verified"), 1, "{counts:?}");
    let (moved, counts) = run().await;
    assert_eq!(moved, ["1.1.0"]);
    assert_eq!(count(&counts, "cached"), 1, "{counts:?}");

    std::fs::write(&root, Sigstore::new().trusted_root()).unwrap();
    let (moved, counts) = run().await;
    assert!(moved.is_empty(), "{moved:?}");
    assert_eq!(count(&counts, "cached"), 0, "{counts:?}");
}

// === registry faults while looking for signatures ===

/// A working directory like [`work`]'s, for `image` (a registry behind a proxy, say).
fn work_for(image: &str, key_pem: &str) -> Work {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cosign.pub"), key_pem).unwrap();
    std::fs::create_dir_all(dir.path().join("apps")).unwrap();
    std::fs::write(
        dir.path().join("apps/deploy.yaml"),
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:1.0.0\n"
        ),
    )
    .unwrap();
    let policy_path = dir.path().join("policy.yaml");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures:\n    keys: [{{file: cosign.pub}}]\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    std::fs::write(&policy_path, &text).unwrap();
    let policies = policy::parse_file(&policy_path, &text).expect("policy");
    Work { dir, policies }
}

/// `shop/api` with 1.0.0 deployed and 1.1.0 and 1.2.0 both signed, behind a proxy that gives
/// `fault` to every signature lookup of 1.2.0 (its `.sig` tag, its referrers and referrers tag);
/// the client reaches the registry through the proxy, with `timeout` per request.
async fn signed_behind_a_faulty_proxy(
    fault: crate::support::fault_proxy::Fault,
    timeout: std::time::Duration,
) -> (
    TestRegistry,
    crate::support::fault_proxy::FaultProxy,
    Work,
    RegistryClient,
    String,
) {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let older = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    let newest = registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &older, false).await;
    signer.sign(&registry, "shop/api", &newest, false).await;
    let hex = newest.trim_start_matches("sha256:").to_string();
    let proxy = crate::support::fault_proxy::FaultProxy::start(&registry.host(), move |target| {
        let lookup = target.contains(&format!("/manifests/sha256-{hex}"))
            || target.contains(&format!("/referrers/sha256:{hex}"));
        lookup.then_some(fault)
    })
    .await;
    let work = work_for(&format!("{}/shop/api", proxy.host()), &signer.public_pem());
    let client =
        RegistryClient::new(
            registry.client_options(vec![tagpilot::config::RegistryConfig {
                host: proxy.host(),
                insecure: true,
                timeout: Some(timeout),
                ..Default::default()
            }]),
        )
        .unwrap();
    (registry, proxy, work, client, newest)
}

/// A registry that serves tags and manifests but fails the signature lookups of the newest
/// tag must not make it look unsigned (which would move to the older signed tag): the reference
/// is held with an error naming the registry, the repository and the digest, and the cycle is
/// not stalled. Answering 500 (the `sigstore` crate only logs a failed `.sig` or referrers
/// fetch), or never answering: that costs the registry's timeout, once.
#[tokio::test]
async fn a_registry_failing_the_signature_lookups_holds_with_an_error_not_an_older_tag() {
    use crate::support::fault_proxy::Fault;
    struct Case {
        name: &'static str,
        fault: Fault,
        /// The registry's timeout.
        timeout: std::time::Duration,
        /// What the problem says besides naming the digest, the repository and the registry.
        says: fn(&str) -> Vec<String>,
    }
    let cases = [
        Case {
            name: "500",
            fault: Fault::Status(500),
            timeout: std::time::Duration::from_secs(10),
            says: |newest| {
                vec![
                    format!(
                        "looking for signatures at the tag {}.sig",
                        newest.replace(':', "-")
                    ),
                    "500".into(),
                ]
            },
        },
        Case {
            name: "no answer",
            fault: Fault::Hang,
            timeout: std::time::Duration::from_secs(1),
            says: |_| vec!["took longer than the registry's timeout of 1s".into()],
        },
    ];
    for case in cases {
        let name = case.name;
        let (_registry, proxy, work, client, newest) =
            signed_behind_a_faulty_proxy(case.fault, case.timeout).await;

        // A lookup that the timeout did not cut would hang for ever; the bound is only a
        // failure bound for a loaded machine, not a timing.
        let planned = tokio::time::timeout(crate::support::PATIENCE, plan_with(&work, &client))
            .await
            .unwrap_or_else(|_| panic!("{name}: the signature lookups were never cut"));

        assert!(planned.changes.is_empty(), "{name}: {:#?}", planned.changes);
        assert!(
            planned.skipped_tags.is_empty(),
            "{name}: {:?}",
            planned.skipped_tags
        );
        assert_eq!(planned.problems.len(), 1, "{name}: {:#?}", planned.problems);
        let message = &planned.problems[0].message;
        let named = format!(
            "cannot verify the signatures of {newest} in repository shop/api on registry {}",
            proxy.host()
        );
        assert!(
            message.contains(&named) && (case.says)(&newest).iter().all(|s| message.contains(s)),
            "{name}: {message}"
        );
        assert!(proxy.faulted() > 0, "{name}");
        let counts = client.signature_verifications();
        assert_eq!(count(&counts, "error"), 1, "{name}: {counts:?}");
        assert_eq!(count(&counts, "unsigned"), 0, "{name}: {counts:?}");
        assert_eq!(count(&counts, "verified"), 0, "{name}: {counts:?}");
    }
}

// === keys from Kubernetes Secrets and environment variables ===

/// `work` with its policy's `signatures:` replaced by `signatures` (a flow mapping).
fn with_signatures(work: Work, image: &str, signatures: &str) -> Work {
    let policy_path = work.dir.path().join("policy.yaml");
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures: {signatures}\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    std::fs::write(&policy_path, &text).unwrap();
    Work {
        policies: policy::parse_file(&policy_path, &text).expect("policy"),
        ..work
    }
}

/// The Kubernetes API double with the Secret `namespace/name` holding `data` (base64'd here),
/// or answering 404 for it when `data` is `None`.
async fn secret_api(
    namespace: &str,
    name: &str,
    data: Option<&[(&str, &str)]>,
) -> wiremock::MockServer {
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};
    let server = MockServer::start().await;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let answer = match data {
        Some(data) => ResponseTemplate::new(200).set_body_json(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "data": data.iter().map(|(k, v)| (k.to_string(), b64(v.as_bytes())))
                .collect::<BTreeMap<_, _>>(),
        })),
        None => ResponseTemplate::new(404).set_body_json(serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound",
            "code": 404, "message": format!("secrets \"{name}\" not found"),
        })),
    };
    Mock::given(method("GET"))
        .and(path(format!(
            "/api/v1/namespaces/{namespace}/secrets/{name}"
        )))
        .respond_with(answer)
        .mount(&server)
        .await;
    server
}

/// How many times the double was asked for a Secret.
async fn secret_reads(server: &wiremock::MockServer) -> usize {
    server
        .received_requests()
        .await
        .unwrap_or_default()
        .iter()
        .filter(|r| r.url.path().contains("/secrets/"))
        .count()
}

/// A policy's `secret:` key (no namespace: tagpilot's own, the kubeconfig context's here) is
/// read over the cluster connection, once per cycle, and verifies the signed tag; a
/// `tagpilot.yaml` default naming a Secret does the same for a policy without `signatures:`.
#[tokio::test]
async fn a_key_in_a_kubernetes_secret_verifies_in_a_policy_and_in_a_default() {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let pem = signer.public_pem();
    let server = secret_api(
        crate::support::kube::NAMESPACE,
        "cosign",
        Some(&[("cosign.pub", &pem)]),
    )
    .await;
    let cluster = crate::support::kube::cluster(&server, std::time::Duration::from_secs(10)).await;
    let image = registry.image("shop/api");
    let work = with_signatures(
        work(&registry, &Signer::new().public_pem()),
        &image,
        "{keys: [{secret: {name: cosign, key: cosign.pub}}]}",
    );
    let client = registry.client().with_cluster(cluster.clone());

    let planned = plan_with(&work, &client).await;

    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");
    assert!(
        skipped_tags(&planned)[0].starts_with("1.2.0: not signed"),
        "{:?}",
        planned.skipped_tags
    );
    assert_eq!(count(&client.signature_verifications(), "verified"), 1);
    assert_eq!(secret_reads(&server).await, 1, "one read for two tags");
    // The next cycle reads the Secret again: a rotated key is picked up without a restart.
    client.start_cycle();
    let planned = plan_with(&work, &client).await;
    assert_eq!(planned.changes[0].to, "1.1.0");
    assert_eq!(secret_reads(&server).await, 2);

    // The same key as `tagpilot.yaml`'s default for the image's repository.
    let text = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  targets: [{{paths: [\"apps/**\"]}}]\n"
    );
    let work = Work {
        policies: policy::parse_file(&work.dir.path().join("policy.yaml"), &text).unwrap(),
        ..work
    };
    let config_path = work.dir.path().join("tagpilot.yaml");
    std::fs::write(
        &config_path,
        format!(
            "signatures:\n  defaults:\n    - prefix: {}/shop\n      keys: [{{secret: {{namespace: {}, name: cosign, key: cosign.pub}}}}]\n",
            registry.host(),
            crate::support::kube::NAMESPACE
        ),
    )
    .unwrap();
    let config = tagpilot::config::load(&config_path).expect("config");
    let mut options = registry.client_options(vec![registry.registry_config()]);
    options.signature_defaults = config.signature_defaults;
    let client = RegistryClient::new(options).unwrap().with_cluster(cluster);
    let planned = plan_with(&work, &client).await;
    let moved: Vec<&str> = planned.changes.iter().map(|c| c.to.as_str()).collect();
    assert_eq!(moved, ["1.1.0"], "{planned:#?}");
}

/// A key whose Secret cannot be read holds the policy's update with a problem naming the
/// policy, where its `signatures:` is written and the Secret; never "any other key will do".
#[tokio::test]
async fn a_key_in_a_secret_that_cannot_be_read_holds_with_a_named_problem() {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let image = registry.image("shop/api");
    // A key from a file that does verify sits beside the unreadable one.
    let work = with_signatures(
        work(&registry, &signer.public_pem()),
        &image,
        "{keys: [{file: cosign.pub}, {secret: {namespace: ci, name: cosign, key: cosign.pub}}]}",
    );
    let held = |planned: &Plan, why: &str| {
        assert!(planned.changes.is_empty(), "{:?}", planned.changes);
        assert_eq!(planned.problems.len(), 1, "{:#?}", planned.problems);
        let p = &planned.problems[0];
        assert_eq!(p.policy.as_deref(), Some("api"));
        assert!(
            p.message.contains("Secret ci/cosign[cosign.pub]")
                && p.message.contains("policy.yaml:")
                && p.message.contains(why),
            "{}",
            p.message
        );
    };

    let missing = secret_api("ci", "cosign", None).await;
    let cluster = crate::support::kube::cluster(&missing, std::time::Duration::from_secs(10)).await;
    let client = registry.client().with_cluster(cluster);
    let planned = plan_with(&work, &client).await;
    // A sentence, not kube's debug dump of the API server's answer.
    held(
        &planned,
        "reading the cosign key in Secret ci/cosign[cosign.pub] (",
    );
    let message = &planned.problems[0].message;
    assert!(
        message.ends_with("): there is no Secret ci/cosign") && !message.contains("Status {"),
        "{message}"
    );
    assert_eq!(count(&client.signature_verifications(), "error"), 1);

    let other_key = secret_api("ci", "cosign", Some(&[("other.pub", "x")])).await;
    let cluster =
        crate::support::kube::cluster(&other_key, std::time::Duration::from_secs(10)).await;
    let planned = plan_with(&work, &registry.client().with_cluster(cluster)).await;
    held(&planned, "the Secret has no such key");

    let not_pem = secret_api("ci", "cosign", Some(&[("cosign.pub", "not a key")])).await;
    let cluster = crate::support::kube::cluster(&not_pem, std::time::Duration::from_secs(10)).await;
    let planned = plan_with(&work, &registry.client().with_cluster(cluster)).await;
    held(&planned, "not a PEM public key");

    let planned = plan_with(&work, &registry.client()).await;
    held(&planned, "there is no cluster connection");
}

/// `keys: [{env: NAME}]`: the PEM text in an environment variable, read when the policy is
/// (here by the `tagpilot` binary, given the variable), verifies the signed tag.
#[tokio::test]
async fn a_key_from_an_environment_variable_verifies() {
    let registry = TestRegistry::start(Auth::None).await;
    let signer = Signer::new();
    registry
        .push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let signed = registry
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    registry
        .push_image("shop/api", "1.2.0", ImageSpec::default())
        .await;
    signer.sign(&registry, "shop/api", &signed, false).await;
    let image = registry.image("shop/api");
    let dir = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "tagpilot.yaml",
        &format!(
            "registries:\n{}policies: policies/\n",
            registry.registries_yaml()
        ),
    );
    write(
        "policies/api.yaml",
        &format!(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {{name: api}}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n  signatures:\n    keys: [{{env: TAGPILOT_IT_COSIGN_PUBLIC_KEY}}]\n"
        ),
    );
    write(
        "apps/deploy.yaml",
        &format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: api}}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {image}:1.0.0\n"
        ),
    );

    let out = crate::support::bin::run_tagpilot(
        dir.path(),
        &["plan", "--format", "json"],
        &[("TAGPILOT_IT_COSIGN_PUBLIC_KEY", &signer.public_pem())],
    );

    let text = crate::support::bin::output_text(&out);
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{text}"));
    assert_eq!(report["problems"], serde_json::json!([]), "{text}");
    let to: Vec<&str> = report["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .filter_map(|c| c["to"].as_str())
        .collect();
    assert_eq!(to, ["1.1.0"], "{text}");
}

// === metrics ===

/// `tagpilot run` counts its verifications in `/metrics` by result: after a cycle that
/// verified a signature, `tagpilot_signature_verifications_total{result="verified"}` is 1.
#[test]
fn a_service_cycle_that_verified_a_signature_counts_it_in_metrics() {
    use crate::support::service::{self, Service};
    use std::time::Duration;
    service::run(false, |logs| async move {
        let s = crate::daemon::setup().await;
        let signer = Signer::new();
        let digest = s
            .registry
            .push_image("shop/api", "1.1.0", ImageSpec::default())
            .await;
        signer.sign(&s.registry, "shop/api", &digest, false).await;
        let policies = s.dir.path().join("policies");
        std::fs::write(policies.join("cosign.pub"), signer.public_pem()).unwrap();
        let policy = policies.join("api.yaml");
        let text = std::fs::read_to_string(&policy).unwrap().replace(
            "  targets:\n",
            "  signatures:\n    keys: [{file: cosign.pub}]\n  targets:\n",
        );
        std::fs::write(&policy, text).unwrap();

        let daemon = Service::start(s.dir.path(), Duration::from_secs(3600), &logs).await;
        crate::daemon::tag_reached(&s, &daemon, "1.1.0", Duration::ZERO).await;
        let metric = "tagpilot_signature_verifications_total{result=\"verified\"} 1";
        daemon
            .after_events(metric, || async {
                daemon.text("/metrics").await.lines().any(|l| l == metric)
            })
            .await;
        let metrics = daemon.text("/metrics").await;
        assert!(
            metrics.contains("tagpilot_signature_verifications_total{result=\"unsigned\"} 0"),
            "{metrics}"
        );
    });
}
