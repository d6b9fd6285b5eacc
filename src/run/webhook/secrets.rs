//! The secrets notifications must carry, read once at start from `webhooks:` (one for every
//! kind, or one per kind), and the two ways a request proves it knows one: by sending it, or by
//! signing the body with it (GitHub's `X-Hub-Signature-256`). Both comparisons take the same time
//! whatever was sent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::config::webhooks::SECRET_KINDS;
use crate::config::{SecretSource, WebhooksConfig};

/// Why the webhook secrets could not be read at start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("{key}: give exactly one of secretEnv, secretFile")]
    SecretSource { key: String },
    #[error("{key}.secretEnv: the environment variable {var} is not set")]
    SecretEnvUnset { key: String, var: String },
    #[error("{key}.secretFile {}: cannot be read", path.display())]
    SecretFile {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key}: the secret is empty")]
    EmptySecret { key: String },
}

/// One secret. Kept as its SHA-256 for comparing what a caller sent (so the comparison takes the
/// same time whatever its length), and as itself for HMAC keys. Never printed.
#[derive(Clone)]
pub struct Secret {
    digest: [u8; 32],
    key: Vec<u8>,
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// A secret from its text; surrounding whitespace (a file's last newline) is not part of it.
    pub fn new(text: &str) -> Option<Secret> {
        let text = text.trim();
        if text.is_empty() {
            return None;
        }
        Some(Secret {
            digest: Sha256::digest(text.as_bytes()).into(),
            key: text.as_bytes().to_vec(),
        })
    }

    /// Whether `sent` is the secret, in constant time.
    pub fn matches(&self, sent: &[u8]) -> bool {
        let sent: [u8; 32] = Sha256::digest(sent).into();
        self.digest.ct_eq(&sent).into()
    }

    /// Whether `signature` (`sha256=<hex>`, as GitHub sends in `X-Hub-Signature-256`) is the
    /// HMAC-SHA256 of `body` under this secret; the MAC is compared in constant time.
    pub fn signed(&self, body: &[u8], signature: &str) -> bool {
        let Some(sent) = signature
            .strip_prefix("sha256=")
            .and_then(|hex_text| hex::decode(hex_text).ok())
        else {
            return false;
        };
        let Ok(mut mac) = Hmac::<sha2_for_hmac::Sha256>::new_from_slice(&self.key) else {
            return false;
        };
        mac.update(body);
        mac.verify_slice(&sent).is_ok()
    }

    /// Reads the secret `source` names, from the environment or a file under `base_dir`; `key`
    /// (`webhooks`, `webhooks.ghcr`) names it in errors.
    pub(in crate::run) fn load(
        source: &SecretSource,
        key: &str,
        base_dir: &Path,
    ) -> Result<Secret, WebhookError> {
        let key = key.to_string();
        let text = match (&source.secret_env, &source.secret_file) {
            (Some(var), None) => std::env::var(var).map_err(|_| WebhookError::SecretEnvUnset {
                key: key.clone(),
                var: var.clone(),
            })?,
            (None, Some(file)) => {
                let path = base_dir.join(file);
                std::fs::read_to_string(&path).map_err(|source| WebhookError::SecretFile {
                    key: key.clone(),
                    path,
                    source,
                })?
            }
            _ => return Err(WebhookError::SecretSource { key }),
        };
        Secret::new(&text).ok_or(WebhookError::EmptySecret { key })
    }
}

/// Every kind's secret (`None`: the kind has none, and every request of it is refused).
#[derive(Debug, Default, Clone)]
pub struct Secrets {
    by_kind: BTreeMap<&'static str, Secret>,
}

impl Secrets {
    /// Reads every secret `webhooks:` names. A source shared by several kinds is read once.
    pub fn load(config: &WebhooksConfig, base_dir: &Path) -> Result<Secrets, WebhookError> {
        let shared = config
            .shared()
            .map(|s| Secret::load(&s, "webhooks", base_dir))
            .transpose()?;
        let mut by_kind = BTreeMap::new();
        for kind in SECRET_KINDS {
            let secret = match config.secret_for(kind) {
                Some(source) if Some(&source) == config.shared().as_ref() => shared.clone(),
                Some(source) => Some(Secret::load(
                    &source,
                    &format!("webhooks.{kind}"),
                    base_dir,
                )?),
                None => None,
            };
            if let Some(secret) = secret {
                by_kind.insert(kind, secret);
            }
        }
        Ok(Secrets { by_kind })
    }

    /// The same secret for every kind (tests, and a config with only the shared one).
    pub fn shared(secret: Secret) -> Secrets {
        Secrets {
            by_kind: SECRET_KINDS.iter().map(|k| (*k, secret.clone())).collect(),
        }
    }

    /// One kind's secret and no other.
    #[cfg(test)]
    pub fn only(kind: &'static str, secret: Secret) -> Secrets {
        Secrets {
            by_kind: [(kind, secret)].into_iter().collect(),
        }
    }

    /// The secret of `kind` (as written under `webhooks:`).
    pub fn get(&self, kind: &str) -> Option<&Secret> {
        self.by_kind.get(kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_only_itself() {
        let s = Secret::new("s3cret\n").unwrap();
        assert!(s.matches(b"s3cret"));
        for other in [&b"s3cre"[..], b"s3cret2", b"", b"S3CRET"] {
            assert!(!s.matches(other));
        }
        assert!(Secret::new(" \n").is_none());
        assert_eq!(format!("{s:?}"), "Secret(…)");
    }

    /// The example of GitHub's "Validating webhook deliveries": the secret "It's a Secret to
    /// Everybody" and the payload "Hello, World!".
    #[test]
    fn github_signatures_are_checked_as_github_documents_them() {
        let s = Secret::new("It's a Secret to Everybody").unwrap();
        let body = b"Hello, World!";
        let good = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17";
        assert!(s.signed(body, good));
        assert!(!s.signed(b"Hello, World?", good));
        assert!(!s.signed(body, &good.replace("sha256=", "sha1=")));
        assert!(!s.signed(body, "sha256=not-hex"));
        assert!(!s.signed(body, &good[..good.len() - 2]));
        assert!(!Secret::new("another").unwrap().signed(body, good));
    }

    /// The error names the setting and the file once; why it cannot be read is its source,
    /// which the caller prints after it (not repeated in the message).
    #[test]
    fn a_secret_file_that_cannot_be_read_names_the_setting_and_says_why_once() {
        let dir = tempfile::tempdir().unwrap();
        let config = WebhooksConfig {
            secret_file: Some("missing".into()),
            ..Default::default()
        };
        let err = Secrets::load(&config, dir.path()).unwrap_err();
        let path = dir.path().join("missing");
        assert_eq!(
            err.to_string(),
            format!("webhooks.secretFile {}: cannot be read", path.display())
        );
        let cause = std::error::Error::source(&err)
            .expect("the io error")
            .to_string();
        assert!(!err.to_string().contains(&cause), "{err}");
    }

    #[test]
    fn secrets_come_from_the_environment_or_a_file_one_per_kind_or_shared() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("shared"), "from-file\n").unwrap();
        std::fs::write(dir.path().join("gh"), "github\n").unwrap();
        let config = WebhooksConfig {
            secret_file: Some("shared".into()),
            ghcr: Some(SecretSource {
                secret_env: None,
                secret_file: Some("gh".into()),
            }),
            ..Default::default()
        };
        let secrets = Secrets::load(&config, dir.path()).unwrap();
        assert!(secrets.get("quay").unwrap().matches(b"from-file"));
        assert!(secrets.get("ghcr").unwrap().matches(b"github"));
        assert!(!secrets.get("ghcr").unwrap().matches(b"from-file"));

        let only_harbor = WebhooksConfig {
            harbor: Some(SecretSource {
                secret_env: None,
                secret_file: Some("gh".into()),
            }),
            ..Default::default()
        };
        let secrets = Secrets::load(&only_harbor, dir.path()).unwrap();
        assert!(secrets.get("harbor").is_some());
        assert!(secrets.get("distribution").is_none());

        let unset = WebhooksConfig {
            quay: Some(SecretSource {
                secret_env: Some("TAGPILOT_TEST_UNSET_WEBHOOK_SECRET".into()),
                secret_file: None,
            }),
            ..Default::default()
        };
        let err = Secrets::load(&unset, dir.path()).unwrap_err().to_string();
        assert_eq!(
            err,
            "webhooks.quay.secretEnv: the environment variable TAGPILOT_TEST_UNSET_WEBHOOK_SECRET is not set"
        );
        let missing = WebhooksConfig {
            secret_file: Some("absent".into()),
            ..Default::default()
        };
        let err = Secrets::load(&missing, dir.path()).unwrap_err().to_string();
        assert!(err.starts_with("webhooks.secretFile "), "{err}");
        assert!(err.contains("absent"), "{err}");
    }
}
