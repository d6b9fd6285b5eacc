//! What `tagpilot check` can find wrong with a repository entry without connecting anywhere:
//! the environment variables it names are set and the files it names can be read, as `plan`
//! would find out before its first fetch.
//!
//! Reads secrets only to see that they are there (and that a signing key unlocks); never puts a
//! value into an error. Errors name the config field, the variable and the file.

use std::path::Path;

use super::GitError;
use super::sign::Signer;
use crate::config::repository::{AuthMethod, ConfigError, RepositoryConfig};

/// The variable libssh2 finds the SSH agent by.
const SSH_AUTH_SOCK: &str = "SSH_AUTH_SOCK";

impl RepositoryConfig {
    /// Checks what serde cannot: the entry's structure
    /// ([`RepositoryConfig::check_structure`]) and the commit message template. The writers call
    /// it before they fetch; the pull-request templates are the forge's to check.
    pub fn validate(&self) -> Result<(), GitError> {
        self.check_structure()
            .map_err(|source| GitError::config(self, source))?;
        if let Some(template) = &self.write.commit_message {
            super::message::check_template(template).map_err(|source| GitError::Template {
                repository: self.name.clone(),
                source,
            })?;
        }
        Ok(())
    }

    /// [`RepositoryConfig::validate`], then what can be checked of the environment offline:
    /// `auth.tokenEnv`, `auth.passwordEnv`, `auth.passphraseEnv` and `write.signing.passphraseEnv`
    /// are set; `auth.sshKeyFile` and `auth.knownHostsFile` can be read; `auth.sshAgent` has an
    /// agent to talk to; the signing key loads and unlocks with its passphrase.
    pub fn check_offline(&self) -> Result<(), GitError> {
        self.validate()?;
        let config = |source| GitError::config(self, source);
        match self.auth.method().map_err(config)? {
            AuthMethod::SshKey {
                key_file,
                passphrase_env,
            } => {
                readable("auth.sshKeyFile", &key_file).map_err(config)?;
                if let Some(name) = &passphrase_env {
                    env_set("auth.passphraseEnv", name).map_err(config)?;
                }
            }
            AuthMethod::SshAgent => {
                if std::env::var_os(SSH_AUTH_SOCK).is_none() {
                    return Err(config(ConfigError::NoSshAgent));
                }
            }
            AuthMethod::Token { token_env } => {
                env_set("auth.tokenEnv", &token_env).map_err(config)?;
            }
            AuthMethod::Password { password_env, .. } => {
                env_set("auth.passwordEnv", &password_env).map_err(config)?;
            }
            AuthMethod::None | AuthMethod::Provided { .. } => {}
        }
        if let Some(file) = &self.auth.known_hosts_file {
            readable("auth.knownHostsFile", file).map_err(config)?;
        }
        if let Some(signing) = &self.write.signing {
            if let Some(name) = &signing.passphrase_env {
                env_set("write.signing.passphraseEnv", name).map_err(config)?;
            }
            Signer::load(signing).map_err(|source| GitError::Signing {
                repository: self.name.clone(),
                source: Box::new(source),
            })?;
        }
        Ok(())
    }
}

fn env_set(field: &'static str, name: &str) -> Result<(), ConfigError> {
    match std::env::var(name) {
        Ok(_) => Ok(()),
        Err(std::env::VarError::NotPresent) => Err(ConfigError::EnvNotSet {
            field,
            name: name.to_owned(),
        }),
        Err(std::env::VarError::NotUnicode(_)) => Err(ConfigError::EnvNotUnicode {
            field,
            name: name.to_owned(),
        }),
    }
}

fn readable(field: &'static str, path: &Path) -> Result<(), ConfigError> {
    std::fs::File::open(path)
        .map(drop)
        .map_err(|source| ConfigError::Unreadable {
            field,
            path: path.to_owned(),
            source,
        })
}
