//! Commit signatures made in-process, as branch protection rules often require: SSHSIG
//! (`gpg.format=ssh`) with an OpenSSH key, or a detached OpenPGP signature.
//!
//! Never shells out to `ssh-keygen` or `gpg`: the key is read from the file the config names,
//! decrypted with the passphrase from the environment, and kept only in memory.

use std::path::Path;

use pgp::composed::{Deserializable, DetachedSignature, SignedSecretKey};
use pgp::crypto::hash::HashAlgorithm;
use pgp::types::{KeyDetails as _, Password};

use super::config::SigningConfig;

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
    pub fn load(config: &SigningConfig) -> Result<Signer, String> {
        let passphrase = match &config.passphrase_env {
            Some(var) => Some(
                std::env::var(var).map_err(|_| format!("environment variable {var} is not set"))?,
            ),
            None => None,
        };
        match (&config.ssh_key_file, &config.pgp_key_file) {
            (Some(path), None) => Self::load_ssh(path, passphrase.as_deref()),
            (None, Some(path)) => Self::load_pgp(path, passphrase.as_deref()),
            _ => Err("`write.signing` needs exactly one of `sshKeyFile` and `pgpKeyFile`".into()),
        }
    }

    fn load_ssh(path: &Path, passphrase: Option<&str>) -> Result<Signer, String> {
        let key = ssh_key::PrivateKey::read_openssh_file(path)
            .map_err(|e| format!("cannot read SSH signing key {}: {e}", path.display()))?;
        let key = if key.is_encrypted() {
            let passphrase = passphrase.ok_or_else(|| {
                format!(
                    "SSH signing key {} is encrypted; set `signing.passphraseEnv`",
                    path.display()
                )
            })?;
            key.decrypt(passphrase).map_err(|_| {
                format!(
                    "cannot decrypt SSH signing key {}: wrong passphrase?",
                    path.display()
                )
            })?
        } else {
            key
        };
        Ok(Signer::Ssh(Box::new(key)))
    }

    fn load_pgp(path: &Path, passphrase: Option<&str>) -> Result<Signer, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read OpenPGP signing key {}: {e}", path.display()))?;
        let (key, _headers) = SignedSecretKey::from_string(&text).map_err(|e| {
            format!(
                "cannot parse OpenPGP signing key {} (expected an armoured secret key): {e}",
                path.display()
            )
        })?;
        let password = passphrase
            .map(Password::from)
            .unwrap_or_else(Password::empty);
        let signer = Signer::Pgp {
            key: Box::new(key),
            password,
        };
        // Fail at load time, not in the middle of a push, when the passphrase is wrong.
        signer
            .sign(b"tagpilot key check")
            .map_err(|e| format!("cannot sign with OpenPGP key {}: {e}", path.display()))?;
        Ok(signer)
    }

    /// The armoured signature over `commit` (the commit object without its signature header),
    /// ready for the `gpgsig` header.
    pub fn sign(&self, commit: &[u8]) -> Result<String, String> {
        match self {
            Signer::Ssh(key) => key
                .sign(SSHSIG_NAMESPACE, ssh_key::HashAlg::Sha512, commit)
                .and_then(|sig| sig.to_pem(ssh_key::LineEnding::LF))
                .map_err(|e| format!("SSH signing failed: {e}")),
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
                    .map_err(|e| format!("OpenPGP signing failed: {e}"))
            }
        }
    }
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
        let err = Signer::load(&config).unwrap_err();
        assert!(err.contains("/nonexistent/tagpilot-key"), "{err}");
    }
}
