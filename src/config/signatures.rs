//! `signatures:` — which cosign signatures a tag's image must carry before tagpilot may choose
//! it (issue 22). Set per policy (`ImagePolicy` `spec.signatures`) or as a default in
//! `tagpilot.yaml` per registry or image prefix (`signatures.defaults[]`); the policy's wins.
//! Named `signatures`, not `verify`: `verify:` is issue 19's check after deployment.
//!
//! Any one of the listed keys or keyless identities may match. Key material is read when the
//! setting is read (a file, an environment variable), so a key that cannot be read is an error
//! at the setting's `file:line` and its policy is not planned: an unreadable setting never
//! widens to "unsigned is fine". A key in a Kubernetes Secret needs the cluster connection,
//! which reading a file does not have: it stays named in [`SignatureRequirement::secret_keys`]
//! and the registry edge reads it once per cycle, failing the verification (which holds the
//! reference) when it cannot.
//!
//! Plain data: the registry edge verifies (`registry/signatures.rs`), the planner only asks it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// `signatures: {keys: [...], identities: [...]}` as written.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignaturesConfig {
    /// Cosign public keys (PEM).
    #[serde(default)]
    pub keys: Vec<KeySource>,
    /// Keyless signers: a Fulcio certificate's OIDC issuer and subject.
    #[serde(default)]
    pub identities: Vec<IdentityConfig>,
}

/// Where one public key is read from: exactly one of `file`, `env` or `secret`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KeySource {
    /// A PEM file; relative paths are read from the directory of the file that names it.
    pub file: Option<PathBuf>,
    /// An environment variable holding the PEM text.
    pub env: Option<String>,
    /// A key of a Kubernetes Secret, read over the cluster connection.
    pub secret: Option<SecretKeyRef>,
}

/// `secret: {namespace, name, key}`: `key` of the Secret `name` in `namespace` (by default, the
/// namespace tagpilot runs in: its service account's, or the kubeconfig context's).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub namespace: Option<String>,
    pub name: String,
    pub key: String,
}

impl std::fmt::Display for SecretKeyRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ns = self
            .namespace
            .as_deref()
            .unwrap_or("<tagpilot's namespace>");
        write!(f, "Secret {ns}/{}[{}]", self.name, self.key)
    }
}

/// A keyless signer, as cosign's `--certificate-oidc-issuer(-regexp)` and
/// `--certificate-identity(-regexp)`: each of issuer and subject exactly or as a regex.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IdentityConfig {
    pub issuer: Option<String>,
    pub issuer_reg_exp: Option<String>,
    pub subject: Option<String>,
    pub subject_reg_exp: Option<String>,
}

/// `tagpilot.yaml`'s `signatures:`: the trust root for keyless signatures and the defaults.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignaturesSettings {
    /// A Sigstore `trusted_root.json` (Fulcio CAs, Rekor keys), for air-gapped clusters; else
    /// Sigstore's public TUF repository is asked when a keyless identity needs it.
    pub trust_root: Option<PathBuf>,
    /// Requirements by registry or image prefix; the longest matching prefix applies to a
    /// policy that sets no `signatures:` of its own.
    #[serde(default)]
    pub defaults: Vec<SignaturesDefault>,
}

/// One `signatures.defaults[]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SignaturesDefault {
    /// `ghcr.io/acme/` or `registry.example.com`: matched against `registry/path` of an image.
    pub prefix: String,
    #[serde(flatten)]
    pub signatures: SignaturesConfig,
}

// === the resolved requirement ===

/// What a tag's image must carry, with its keys read: any one key or identity verifies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureRequirement {
    pub keys: Vec<PublicKey>,
    /// Keys still in their Kubernetes Secrets: the registry edge reads them over the cluster
    /// connection each cycle and adds them to `keys` before verifying.
    pub secret_keys: Vec<SecretKeyRef>,
    pub identities: Vec<Identity>,
    /// Where the requirement was set (`policies/app.yaml:12`, `tagpilot.yaml signatures.defaults[0]`).
    pub origin: String,
}

/// One public key, PEM, with where it came from (safe to print: a path or a variable name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    pub pem: Vec<u8>,
    pub source: String,
}

/// One keyless signer.
#[derive(Debug, Clone)]
pub struct Identity {
    pub issuer: Matcher,
    pub subject: Matcher,
}

impl PartialEq for Identity {
    fn eq(&self, other: &Self) -> bool {
        self.issuer == other.issuer && self.subject == other.subject
    }
}
impl Eq for Identity {}

/// A string matched exactly or by a regex (anchored as written: cosign does not anchor either).
#[derive(Debug, Clone)]
pub enum Matcher {
    Exact(String),
    Regex(regex::Regex),
}

impl PartialEq for Matcher {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Matcher {
    pub fn matches(&self, value: &str) -> bool {
        match self {
            Matcher::Exact(s) => s == value,
            Matcher::Regex(r) => r.is_match(value),
        }
    }
}

impl std::fmt::Display for Matcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Matcher::Exact(s) => write!(f, "{s:?}"),
            Matcher::Regex(r) => write!(f, "/{}/", r.as_str()),
        }
    }
}

impl std::fmt::Display for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "issuer {} subject {}", self.issuer, self.subject)
    }
}

impl SignatureRequirement {
    /// A digest of everything a verdict depends on (keys, identities), so that a cached verdict
    /// is used only for the same requirement: changing a key or an identity verifies again.
    pub fn fingerprint(&self) -> String {
        let mut h = Sha256::new();
        for k in &self.keys {
            h.update(b"key\0");
            h.update(&k.pem);
            h.update(b"\0");
        }
        for i in &self.identities {
            h.update(b"identity\0");
            h.update(i.to_string().as_bytes());
            h.update(b"\0");
        }
        hex::encode(h.finalize())
    }

    /// Whether any identity is keyless, which needs a trust root (Fulcio, Rekor).
    pub fn needs_trust_root(&self) -> bool {
        !self.identities.is_empty()
    }
}

/// Why a `signatures:` setting cannot be read. The caller puts it at the setting's location.
#[derive(Debug, thiserror::Error)]
pub enum SignaturesError {
    #[error("reading the public key file {}", path.display())]
    ReadKey {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the environment variable {name} holding a public key is not set")]
    MissingEnv { name: String },
    #[error("{source_name} is not a PEM public key cosign can verify with")]
    NotAKey {
        source_name: String,
        #[source]
        source: sigstore::errors::SigstoreError,
    },
    #[error("a key names exactly one of `file`, `env` and `secret`")]
    KeySourceShape,
    #[error("an identity names its issuer (`issuer` or `issuerRegExp`, not both)")]
    IssuerShape,
    #[error("an identity names its subject (`subject` or `subjectRegExp`, not both)")]
    SubjectShape,
    #[error("the regex {0:?} does not compile")]
    Regex(String, #[source] regex::Error),
    #[error("`signatures:` names no key and no identity, so nothing could ever verify")]
    Empty,
}

/// A shared, resolved requirement: policies and defaults hand it around by reference.
pub type Requirement = Arc<SignatureRequirement>;

impl SignaturesConfig {
    /// Reads the keys (files relative to `base`, variables from the environment) and compiles
    /// the identities. `origin` is where the setting was written, for messages.
    pub fn resolve(&self, base: &Path, origin: String) -> Result<Requirement, SignaturesError> {
        if self.keys.is_empty() && self.identities.is_empty() {
            return Err(SignaturesError::Empty);
        }
        let mut keys = Vec::new();
        let mut secret_keys = Vec::new();
        for k in &self.keys {
            match k.read(base)? {
                Key::Read(key) => keys.push(key),
                Key::InSecret(secret) => secret_keys.push(secret),
            }
        }
        let identities = self
            .identities
            .iter()
            .map(IdentityConfig::resolve)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Arc::new(SignatureRequirement {
            keys,
            secret_keys,
            identities,
            origin,
        }))
    }
}

/// A key as its setting gives it: read, or left in its Secret for the registry edge.
enum Key {
    Read(PublicKey),
    InSecret(SecretKeyRef),
}

impl KeySource {
    fn read(&self, base: &Path) -> Result<Key, SignaturesError> {
        let (pem, source) = match (&self.file, &self.env, &self.secret) {
            (Some(file), None, None) => {
                let path = base.join(file);
                let pem = std::fs::read(&path).map_err(|source| SignaturesError::ReadKey {
                    path: path.clone(),
                    source,
                })?;
                (pem, path.display().to_string())
            }
            (None, Some(name), None) => {
                let pem = std::env::var(name)
                    .map_err(|_| SignaturesError::MissingEnv { name: name.clone() })?;
                (pem.into_bytes(), format!("${name}"))
            }
            (None, None, Some(s)) => return Ok(Key::InSecret(s.clone())),
            _ => return Err(SignaturesError::KeySourceShape),
        };
        check_key(&pem, &source)?;
        Ok(Key::Read(PublicKey { pem, source }))
    }
}

/// Whether `pem` is a public key cosign verifies with (ECDSA P-256/P-384, Ed25519, RSA).
pub fn check_key(pem: &[u8], source: &str) -> Result<(), SignaturesError> {
    sigstore::crypto::CosignVerificationKey::try_from_pem(pem)
        .map(|_| ())
        .map_err(|source_err| SignaturesError::NotAKey {
            source_name: source.to_string(),
            source: source_err,
        })
}

impl IdentityConfig {
    fn resolve(&self) -> Result<Identity, SignaturesError> {
        let issuer =
            matcher(&self.issuer, &self.issuer_reg_exp).ok_or(SignaturesError::IssuerShape)??;
        let subject = matcher(&self.subject, &self.subject_reg_exp)
            .ok_or(SignaturesError::SubjectShape)??;
        Ok(Identity { issuer, subject })
    }
}

fn matcher(
    exact: &Option<String>,
    regex: &Option<String>,
) -> Option<Result<Matcher, SignaturesError>> {
    match (exact, regex) {
        (Some(s), None) => Some(Ok(Matcher::Exact(s.clone()))),
        (None, Some(r)) => Some(
            regex::Regex::new(r)
                .map(Matcher::Regex)
                .map_err(|e| SignaturesError::Regex(r.clone(), e)),
        ),
        _ => None,
    }
}

impl SignaturesSettings {
    /// The defaults with their keys read, longest prefix first; relative key files are read
    /// from `base` (the directory of `tagpilot.yaml`).
    pub fn resolve_defaults(
        &self,
        base: &Path,
    ) -> Result<Vec<(String, Requirement)>, (usize, SignaturesError)> {
        let mut out = Vec::with_capacity(self.defaults.len());
        for (i, d) in self.defaults.iter().enumerate() {
            let origin = format!("tagpilot.yaml signatures.defaults[{i}] ({})", d.prefix);
            let r = d.signatures.resolve(base, origin).map_err(|e| (i, e))?;
            out.push((d.prefix.clone(), r));
        }
        out.sort_by_key(|(prefix, _)| std::cmp::Reverse(prefix.len()));
        Ok(out)
    }
}

/// The default for an image `registry/path`: the longest prefix that matches it at a path
/// boundary (`ghcr.io/acme` matches `ghcr.io/acme/app`, not `ghcr.io/acmecorp/app`).
pub fn default_for<'a>(
    defaults: &'a [(String, Requirement)],
    image: &str,
) -> Option<&'a Requirement> {
    defaults
        .iter()
        .find(|(prefix, _)| {
            let p = prefix.as_str();
            image == p.trim_end_matches('/')
                || (image.starts_with(p) && (p.ends_with('/') || image[p.len()..].starts_with('/')))
        })
        .map(|(_, r)| r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pem() -> String {
        rcgen::KeyPair::generate().unwrap().public_key_pem()
    }

    fn read(yaml: &str) -> SignaturesConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn keys_are_read_from_files_relative_to_the_setting_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let pem = pem();
        std::fs::write(dir.path().join("cosign.pub"), &pem).unwrap();
        std::fs::write(dir.path().join("bad.pub"), "not a key").unwrap();
        let r = read("keys: [{file: cosign.pub}]\n")
            .resolve(dir.path(), "here".into())
            .unwrap();
        assert_eq!(r.keys[0].pem, pem.as_bytes());
        let err = read("keys: [{file: bad.pub}]\n")
            .resolve(dir.path(), "here".into())
            .unwrap_err();
        assert!(matches!(err, SignaturesError::NotAKey { .. }), "{err}");
        let err = read("keys: [{file: gone.pub}]\n")
            .resolve(dir.path(), "here".into())
            .unwrap_err();
        assert!(matches!(err, SignaturesError::ReadKey { .. }), "{err}");
        let err = read("keys: [{file: a, env: B}]\n")
            .resolve(dir.path(), "here".into())
            .unwrap_err();
        assert!(matches!(err, SignaturesError::KeySourceShape));
        let err = read("{}\n").resolve(dir.path(), "here".into()).unwrap_err();
        assert!(matches!(err, SignaturesError::Empty));
    }

    #[test]
    fn a_key_in_a_secret_is_left_for_the_cluster_connection() {
        let dir = tempfile::tempdir().unwrap();
        let r = read("keys: [{secret: {namespace: ci, name: cosign, key: cosign.pub}}]\n")
            .resolve(dir.path(), "here".into())
            .unwrap();
        assert!(r.keys.is_empty());
        assert_eq!(r.secret_keys.len(), 1);
        assert_eq!(r.secret_keys[0].to_string(), "Secret ci/cosign[cosign.pub]");
    }

    #[test]
    fn identities_match_exactly_or_by_regex_and_change_the_fingerprint() {
        let dir = tempfile::tempdir().unwrap();
        let a = read(
            "identities: [{issuer: https://token.actions.githubusercontent.com, \
             subjectRegExp: '^https://github.com/acme/'}]\n",
        )
        .resolve(dir.path(), "a".into())
        .unwrap();
        let i = &a.identities[0];
        assert!(
            i.issuer
                .matches("https://token.actions.githubusercontent.com")
        );
        assert!(
            i.subject
                .matches("https://github.com/acme/app/.github/workflows/r.yml@main")
        );
        assert!(!i.subject.matches("https://github.com/evil/app"));
        let b = read("identities: [{issuer: x, subject: y}]\n")
            .resolve(dir.path(), "b".into())
            .unwrap();
        assert_ne!(a.fingerprint(), b.fingerprint());
        let err = read("identities: [{subject: y}]\n")
            .resolve(dir.path(), "c".into())
            .unwrap_err();
        assert!(matches!(err, SignaturesError::IssuerShape));
        let err = read("identities: [{issuer: x, subjectRegExp: '('}]\n")
            .resolve(dir.path(), "c".into())
            .unwrap_err();
        assert!(matches!(err, SignaturesError::Regex(..)));
    }

    #[test]
    fn the_longest_prefix_at_a_path_boundary_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("k.pub"), pem()).unwrap();
        let settings: SignaturesSettings = serde_saphyr::from_str(
            "defaults:\n  - {prefix: ghcr.io, keys: [{file: k.pub}]}\n  - {prefix: ghcr.io/acme, identities: [{issuer: i, subject: s}]}\n",
        )
        .unwrap();
        let d = settings.resolve_defaults(dir.path()).unwrap();
        assert!(default_for(&d, "ghcr.io/acme/app").unwrap().keys.is_empty());
        assert!(
            !default_for(&d, "ghcr.io/acmecorp/app")
                .unwrap()
                .keys
                .is_empty()
        );
        assert!(default_for(&d, "docker.io/library/nginx").is_none());
    }
}
