//! Commit signatures made in-process, as branch protection rules often require: SSHSIG
//! (`gpg.format=ssh`) with an OpenSSH key, or a detached OpenPGP signature.
//!
//! Never shells out to `ssh-keygen` or `gpg`: the key is read from the file the config names,
//! decrypted with the passphrase from the environment, and kept only in memory.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pgp::composed::{Deserializable, DetachedSignature, SignedSecretKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::types::{KeyDetails as _, Password};

use super::GitError;
use crate::config::repository::{RepositoryConfig, SigningConfig};

/// Why commits cannot be signed. Names the key file and the variable, never the passphrase.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    #[error("environment variable {name} is not set")]
    EnvNotSet { name: String },
    #[error("environment variable {name} is not valid UTF-8")]
    EnvNotUnicode { name: String },
    #[error("`write.signing` needs exactly one of `sshKeyFile` and `pgpKeyFile`")]
    KeyChoice,
    #[error("cannot read SSH signing key {}", path.display())]
    ReadSsh {
        path: PathBuf,
        #[source]
        source: ssh_key::Error,
    },
    #[error("SSH signing key {} is encrypted; set `signing.passphraseEnv`", path.display())]
    SshEncrypted { path: PathBuf },
    #[error("cannot decrypt SSH signing key {}: wrong passphrase?", path.display())]
    SshLocked {
        path: PathBuf,
        #[source]
        source: ssh_key::Error,
    },
    #[error("cannot read OpenPGP signing key {}", path.display())]
    ReadPgp {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot parse OpenPGP signing key {} (expected an armoured secret key)",
        path.display()
    )]
    ParsePgp {
        path: PathBuf,
        #[source]
        source: Box<pgp::errors::Error>,
    },
    #[error("OpenPGP signing key {} is encrypted; set `signing.passphraseEnv`", path.display())]
    PgpEncrypted { path: PathBuf },
    /// The passphrase does not decrypt the key; pgp itself says only "invalid input".
    #[error(
        "cannot unlock OpenPGP signing key {}: wrong passphrase in environment variable {variable}",
        path.display()
    )]
    PgpLocked {
        path: PathBuf,
        variable: String,
        #[source]
        source: Box<pgp::errors::Error>,
    },
    #[error("cannot sign with OpenPGP key {}", path.display())]
    PgpKeyCheck {
        path: PathBuf,
        #[source]
        source: Box<SignError>,
    },
    #[error("SSH signing failed")]
    Ssh(#[source] ssh_key::Error),
    #[error("OpenPGP signing failed")]
    Pgp(#[source] Box<pgp::errors::Error>),
    #[error("commit is not UTF-8")]
    CommitNotUtf8(#[source] std::str::Utf8Error),
}

/// The namespace git uses for SSH commit signatures.
const SSHSIG_NAMESPACE: &str = "git";

/// A loaded signing key.
pub enum Signer {
    Ssh(Box<ssh_key::PrivateKey>),
    Pgp {
        key: Box<SignedSecretKey>,
        password: Password,
    },
}

impl std::fmt::Debug for Signer {
    // Key material must not end up in a log line through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Signer::Ssh(key) => write!(
                f,
                "Signer::Ssh({})",
                key.fingerprint(ssh_key::HashAlg::Sha256)
            ),
            Signer::Pgp { key, .. } => {
                write!(f, "Signer::Pgp({:?})", key.primary_key.fingerprint())
            }
        }
    }
}

impl Signer {
    /// Loads the key `config` names. Errors name the file or variable, never a secret.
    pub fn load(config: &SigningConfig) -> Result<Signer, SignError> {
        let passphrase = match &config.passphrase_env {
            Some(name) => Some(std::env::var(name).map_err(|e| match e {
                std::env::VarError::NotPresent => SignError::EnvNotSet { name: name.clone() },
                std::env::VarError::NotUnicode(_) => {
                    SignError::EnvNotUnicode { name: name.clone() }
                }
            })?),
            None => None,
        };
        match (&config.ssh_key_file, &config.pgp_key_file) {
            (Some(path), None) => Self::load_ssh(path, passphrase.as_deref()),
            (None, Some(path)) => {
                let passphrase = config.passphrase_env.as_deref().zip(passphrase.as_deref());
                Self::load_pgp(path, passphrase)
            }
            _ => Err(SignError::KeyChoice),
        }
    }

    fn load_ssh(path: &Path, passphrase: Option<&str>) -> Result<Signer, SignError> {
        let key =
            ssh_key::PrivateKey::read_openssh_file(path).map_err(|source| SignError::ReadSsh {
                path: path.to_owned(),
                source,
            })?;
        let key = if key.is_encrypted() {
            let passphrase = passphrase.ok_or_else(|| SignError::SshEncrypted {
                path: path.to_owned(),
            })?;
            key.decrypt(passphrase)
                .map_err(|source| SignError::SshLocked {
                    path: path.to_owned(),
                    source,
                })?
        } else {
            key
        };
        Ok(Signer::Ssh(Box::new(key)))
    }

    /// `passphrase`: the variable named and its value.
    fn load_pgp(path: &Path, passphrase: Option<(&str, &str)>) -> Result<Signer, SignError> {
        let text = std::fs::read_to_string(path).map_err(|source| SignError::ReadPgp {
            path: path.to_owned(),
            source,
        })?;
        let (key, _headers) =
            SignedSecretKey::from_string(&text).map_err(|source| SignError::ParsePgp {
                path: path.to_owned(),
                source: Box::new(source),
            })?;
        let password = passphrase
            .map(|(_, value)| Password::from(value))
            .unwrap_or_else(Password::empty);
        // Fail at load time, not in the middle of a push, when the passphrase is wrong; and say
        // so, where a signature attempt would only say "invalid input".
        let unlocked = match signing_subkey(&key) {
            Some(subkey) => (
                subkey.key.secret_params().is_encrypted(),
                subkey.key.unlock(&password, |_, _| Ok(())),
            ),
            None => (
                key.primary_key.secret_params().is_encrypted(),
                key.primary_key.unlock(&password, |_, _| Ok(())),
            ),
        };
        match (unlocked, passphrase) {
            ((_, Ok(_)), _) => {}
            ((true, Err(_)), None) => {
                return Err(SignError::PgpEncrypted {
                    path: path.to_owned(),
                });
            }
            ((_, Err(source)), Some((variable, _))) => {
                return Err(SignError::PgpLocked {
                    path: path.to_owned(),
                    variable: variable.to_owned(),
                    source: Box::new(source),
                });
            }
            ((false, Err(source)), None) => {
                return Err(SignError::PgpKeyCheck {
                    path: path.to_owned(),
                    source: Box::new(SignError::Pgp(Box::new(source))),
                });
            }
        }
        let signer = Signer::Pgp {
            key: Box::new(key),
            password,
        };
        signer
            .sign(b"tagpilot key check")
            .map_err(|e| SignError::PgpKeyCheck {
                path: path.to_owned(),
                source: Box::new(e),
            })?;
        Ok(signer)
    }

    /// The armoured signature over `commit` (the commit object without its signature header),
    /// ready for the `gpgsig` header.
    pub fn sign(&self, commit: &[u8]) -> Result<String, SignError> {
        match self {
            Signer::Ssh(key) => key
                .sign(SSHSIG_NAMESPACE, ssh_key::HashAlg::Sha512, commit)
                .and_then(|sig| sig.to_pem(ssh_key::LineEnding::LF))
                .map_err(SignError::Ssh),
            Signer::Pgp { key, password } => {
                let rng = rand::rngs::OsRng;
                let signature = match signing_subkey(key) {
                    Some(subkey) => DetachedSignature::sign_binary_data(
                        rng,
                        &subkey.key,
                        password,
                        HashAlgorithm::Sha256,
                        commit,
                    ),
                    None => DetachedSignature::sign_binary_data(
                        rng,
                        &key.primary_key,
                        password,
                        HashAlgorithm::Sha256,
                        commit,
                    ),
                };
                signature
                    .and_then(|s| s.to_armored_string(Default::default()))
                    .map_err(|e| SignError::Pgp(Box::new(e)))
            }
        }
    }
}

/// The signer for `repo`'s commits, if it signs them; shared by the blocking tasks that commit.
pub(crate) fn signer_for(repo: &RepositoryConfig) -> Result<Arc<Option<Signer>>, GitError> {
    let signer = match &repo.write.signing {
        Some(config) => Some(Signer::load(config).map_err(|source| GitError::Signing {
            repository: repo.name.clone(),
            source: Box::new(source),
        })?),
        None => None,
    };
    Ok(Arc::new(signer))
}

/// The subkey flagged for signing, which keys made with a certify-only primary (the common
/// `gpg --full-gen-key` layout) sign with.
fn signing_subkey(key: &SignedSecretKey) -> Option<&pgp::composed::SignedSecretSubKey> {
    key.secret_subkeys
        .iter()
        .find(|sub| sub.signatures.iter().any(|sig| sig.key_flags().sign()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ssh_signature_is_an_armoured_sshsig_that_verifies() {
        let key = ssh_key::PrivateKey::random(&mut rand::rngs::OsRng, ssh_key::Algorithm::Ed25519);
        let Ok(key) = key else {
            panic!("ed25519 key generation failed")
        };
        let signer = Signer::Ssh(Box::new(key.clone()));
        let pem = signer.sign(b"tree 0000\n\nmessage\n").unwrap();
        assert!(pem.starts_with("-----BEGIN SSH SIGNATURE-----\n"), "{pem}");
        let sig: ssh_key::SshSig = pem.parse().unwrap();
        key.public_key()
            .verify(SSHSIG_NAMESPACE, b"tree 0000\n\nmessage\n", &sig)
            .unwrap();
        assert!(
            key.public_key()
                .verify(SSHSIG_NAMESPACE, b"tampered", &sig)
                .is_err()
        );
    }

    #[test]
    fn debug_output_shows_a_fingerprint_not_the_key() {
        let key = ssh_key::PrivateKey::random(&mut rand::rngs::OsRng, ssh_key::Algorithm::Ed25519)
            .unwrap();
        let shown = format!("{:?}", Signer::Ssh(Box::new(key)));
        assert!(shown.starts_with("Signer::Ssh(SHA256:"), "{shown}");
    }

    #[test]
    fn missing_key_file_is_named() {
        let config = SigningConfig {
            ssh_key_file: Some("/nonexistent/tagpilot-key".into()),
            pgp_key_file: None,
            passphrase_env: None,
        };
        let err = Signer::load(&config).unwrap_err().to_string();
        assert!(err.contains("/nonexistent/tagpilot-key"), "{err}");
    }
}
