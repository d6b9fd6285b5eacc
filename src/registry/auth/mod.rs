//! Registry authentication: where credentials come from (`credentials.rs`, with Docker's
//! credential helper programs in `helper.rs`) and how a registry's challenge is answered with
//! them (`token.rs`, the distribution token flow).
//!
//! Credentials are looked up lazily, the first time a registry asks for them, so an anonymous
//! registry never makes tagpilot read `config.json` or run a credential helper.
//!
//! Never: log, print or put into an error a password, secret, token or base64 `auth` string.
//! [`Credential`]'s `Debug` is redacted for that reason, helper output is parsed, not echoed, and
//! JSON that holds secrets is reported by position only (serde_json quotes what it chokes on).

mod credentials;
mod helper;
pub(crate) mod token;

use std::fmt;

pub(crate) use credentials::normalise_host;
pub use credentials::{
    CredentialError, CredentialResolver, DockerConfigSource, docker_config_json_credential,
};
pub use helper::HelperError;

/// A username and password for one registry, with where they came from (for messages).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    pub username: String,
    password: String,
    /// Where the credential was found, e.g. `tagpilot.yaml`, `/home/me/.docker/config.json`,
    /// `docker-credential-pass`. Safe to print.
    pub source: String,
}

impl Credential {
    pub fn new(
        username: impl Into<String>,
        password: impl Into<String>,
        source: impl Into<String>,
    ) -> Self {
        Credential {
            username: username.into(),
            password: password.into(),
            source: source.into(),
        }
    }

    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}

impl fmt::Debug for Credential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credential")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("source", &self.source)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_debug_hides_the_password() {
        let c = Credential::new("bot", "hunter2", "tagpilot.yaml");
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
