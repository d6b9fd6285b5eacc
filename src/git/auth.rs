//! Talking to a remote safely: credentials for libgit2, SSH host key checking against
//! `known_hosts`, and URLs fit to print.
//!
//! Secrets are read from the environment only when a connection asks for them, and are never
//! formatted into a message: errors name the environment variable or file, not its value.

use std::cell::{Cell, RefCell};
use std::path::PathBuf;

use git2::{CertificateCheckStatus, Cred, CredentialType, RemoteCallbacks};
use hmac::{Hmac, Mac};
use ssh_key::known_hosts::{Entry, HostPatterns, KnownHosts, Marker};
use ssh_key::{HashAlg, PublicKey};

use super::Libgit2Error;
use crate::config::repository::{AuthConfig, AuthMethod, ConfigError};

/// The user name HTTPS token authentication uses (GitHub's and Gitea's convention; GitLab
/// accepts any).
pub use crate::config::repository::TOKEN_USER;

/// `url` with any userinfo removed, for logs, errors and reports.
pub fn redact_url(url: &str) -> String {
    if let Ok(mut parsed) = url::Url::parse(url)
        && parsed.has_host()
    {
        let _ = parsed.set_username("");
        let _ = parsed.set_password(None);
        return parsed.to_string();
    }
    // scp-like `user@host:path`: the user is not a secret, but nothing before `@` is printed,
    // so a mistyped `user:password@host:path` cannot leak either.
    match url.split_once('@') {
        Some((_, rest)) if !url.contains("://") => rest.to_owned(),
        _ => url.to_owned(),
    }
}

/// `message` with `url` redacted: libgit2 sometimes quotes the URL it was given, and the URL
/// may carry userinfo.
pub fn scrub(message: &str, url: &str) -> String {
    message.replace(url, &redact_url(url))
}

/// Where an SSH remote lives, for host key checking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshHost {
    pub host: String,
    pub port: u16,
    pub user: Option<String>,
}

impl SshHost {
    /// The SSH host of `url`, or `None` when the URL is not an SSH URL.
    pub fn from_url(url: &str) -> Option<SshHost> {
        if let Ok(parsed) = url::Url::parse(url) {
            if !matches!(parsed.scheme(), "ssh" | "git+ssh" | "ssh+git") {
                return None;
            }
            let user = Some(parsed.username())
                .filter(|u| !u.is_empty())
                .map(str::to_owned);
            let host = parsed
                .host_str()?
                .trim_start_matches('[')
                .trim_end_matches(']');
            return Some(SshHost {
                host: host.to_owned(),
                port: parsed.port().unwrap_or(22),
                user,
            });
        }
        // scp-like syntax: `[user@]host:path`, with no slash before the colon.
        let (before, _) = url.split_once(':')?;
        if before.contains('/') {
            return None;
        }
        let (user, host) = match before.split_once('@') {
            Some((user, host)) => (Some(user.to_owned()), host),
            None => (None, before),
        };
        Some(SshHost {
            host: host.to_owned(),
            port: 22,
            user,
        })
    }

    /// The name `known_hosts` lists this host under.
    pub fn known_hosts_name(&self) -> String {
        if self.port == 22 {
            self.host.clone()
        } else {
            format!("[{}]:{}", self.host, self.port)
        }
    }
}

/// The outcome of looking a host key up in `known_hosts`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKeyCheck {
    Known,
    Unknown,
    Mismatch { presented: String },
    Revoked,
}

/// Looks `key` up for `host` in the `known_hosts` text. Pure, so it can be tested without
/// a server. `@cert-authority` lines are ignored: host certificates are not supported.
pub fn check_host_key(known_hosts: &str, host: &SshHost, key: &PublicKey) -> HostKeyCheck {
    let name = host.known_hosts_name();
    let mut listed = false;
    for entry in KnownHosts::new(known_hosts).filter_map(Result::ok) {
        if !host_matches(&entry, &name) {
            continue;
        }
        let same_key = entry.public_key().key_data() == key.key_data();
        match entry.marker() {
            Some(Marker::Revoked) if same_key => return HostKeyCheck::Revoked,
            Some(_) => continue,
            None if same_key => return HostKeyCheck::Known,
            None => listed = true,
        }
    }
    if listed {
        HostKeyCheck::Mismatch {
            presented: key.fingerprint(HashAlg::Sha256).to_string(),
        }
    } else {
        HostKeyCheck::Unknown
    }
}

fn host_matches(entry: &Entry, name: &str) -> bool {
    match entry.host_patterns() {
        HostPatterns::HashedName { salt, hash } => {
            let Ok(mut mac) = Hmac::<sha1::Sha1>::new_from_slice(salt) else {
                return false;
            };
            mac.update(name.as_bytes());
            mac.verify_slice(hash).is_ok()
        }
        HostPatterns::Patterns(patterns) => {
            let mut matched = false;
            for pattern in patterns {
                if let Some(negated) = pattern.strip_prefix('!') {
                    if glob_matches(negated, name) {
                        return false;
                    }
                } else if glob_matches(pattern, name) {
                    matched = true;
                }
            }
            matched
        }
    }
}

/// OpenSSH's host pattern globbing: `*` and `?`, case-insensitive.
fn glob_matches(pattern: &str, name: &str) -> bool {
    let pattern: Vec<char> = pattern.to_ascii_lowercase().chars().collect();
    let name: Vec<char> = name.to_ascii_lowercase().chars().collect();
    fn go(p: &[char], n: &[char]) -> bool {
        match p.first() {
            None => n.is_empty(),
            Some('*') => (0..=n.len()).any(|i| go(&p[1..], &n[i..])),
            Some('?') => !n.is_empty() && go(&p[1..], &n[1..]),
            Some(c) => n.first() == Some(c) && go(&p[1..], &n[1..]),
        }
    }
    go(&pattern, &name)
}

/// Why the remote did not accept us: no credentials could be offered, or the ones offered
/// were refused. Names environment variables and files, never their contents.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("the remote rejected the configured credentials")]
    Rejected,
    #[error("environment variable {name} is not set")]
    EnvNotSet { name: String },
    #[error("environment variable {name} is not valid UTF-8")]
    EnvNotUnicode { name: String },
    #[error("SSH key file {} does not exist", path.display())]
    KeyFileMissing { path: PathBuf },
    #[error(
        "the remote asks for credentials but `auth` is not configured{}",
        if *url_has_userinfo {
            // libgit2 sends a URL's user and password before it asks for credentials, so
            // being asked means the remote refused them.
            " (the remote refused the user and password in the URL: set `auth.tokenEnv` or \
             `auth.username` and `auth.passwordEnv`)"
        } else {
            ""
        }
    )]
    NotConfigured { url_has_userinfo: bool },
    #[error("the remote does not accept the configured method ({method}); it accepts {accepted}")]
    MethodNotAccepted {
        method: &'static str,
        accepted: String,
    },
    /// libgit2 could not make the credential (e.g. a key that fails to decrypt); its message
    /// carries no secret.
    #[error(transparent)]
    Credential(Libgit2Error),
    /// The remote answered with an authentication failure (HTTP 401).
    #[error(transparent)]
    Remote(Libgit2Error),
}

/// Why the SSH server was not trusted.
#[derive(Debug, thiserror::Error)]
pub enum HostKeyError {
    #[error("cannot find ~/.ssh/known_hosts; set `auth.knownHostsFile`")]
    NoKnownHostsFile,
    #[error("cannot read known_hosts file {}", file.display())]
    ReadKnownHosts {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse the host key of {host}")]
    Parse {
        host: String,
        #[source]
        source: ssh_key::Error,
    },
    #[error(
        "host key of {name} ({fingerprint}) is not in {}; add it after checking its fingerprint",
        file.display()
    )]
    Unknown {
        name: String,
        fingerprint: String,
        file: PathBuf,
    },
    #[error(
        "host key of {name} does not match {}: the server presented {presented}; \
         refusing to connect (the host key changed, or someone is intercepting the connection)",
        file.display()
    )]
    Mismatch {
        name: String,
        presented: String,
        file: PathBuf,
    },
    #[error("host key of {name} is marked @revoked in {}", file.display())]
    Revoked { name: String, file: PathBuf },
}

/// What went wrong while connecting, noticed inside libgit2 callbacks (whose own error text
/// is generic), so the writer can report it precisely.
#[derive(Debug)]
pub enum ConnectFailure {
    Auth(AuthError),
    HostKey(HostKeyError),
}

/// Everything needed to authenticate one remote, resolved from the config. Holds no secret:
/// secrets are read from the environment when libgit2 asks for them.
#[derive(Debug)]
pub struct Connector {
    method: AuthMethod,
    ssh: Option<SshHost>,
    known_hosts_file: Option<PathBuf>,
    /// Userinfo in the URL is never used as a credential (it would end up in logs and
    /// process lists); noted only to say so when the remote asks.
    url_has_userinfo: bool,
    attempts: Cell<u32>,
    failure: RefCell<Option<ConnectFailure>>,
}

impl Connector {
    pub fn new(url: &str, auth: &AuthConfig) -> Result<Connector, ConfigError> {
        Ok(Connector {
            method: auth.method()?,
            ssh: SshHost::from_url(url),
            known_hosts_file: auth.known_hosts_file.clone(),
            url_has_userinfo: url::Url::parse(url).is_ok_and(|u| u.password().is_some()),
            attempts: Cell::new(0),
            failure: RefCell::new(None),
        })
    }

    /// The first failure a callback noticed since the last call, if any.
    pub fn take_failure(&self) -> Option<ConnectFailure> {
        self.attempts.set(0);
        self.failure.borrow_mut().take()
    }

    /// Keeps `failure` for [`Connector::take_failure`] and gives libgit2 an error to abort with.
    fn fail(&self, failure: ConnectFailure) -> git2::Error {
        let message = match &failure {
            ConnectFailure::Auth(e) => crate::error_chain::chain(e),
            ConnectFailure::HostKey(e) => crate::error_chain::chain(e),
        };
        self.failure.borrow_mut().get_or_insert(failure);
        git2::Error::from_str(&message)
    }

    fn fail_auth(&self, error: AuthError) -> git2::Error {
        self.fail(ConnectFailure::Auth(error))
    }

    /// Callbacks for one fetch or push. Push-specific callbacks are added by the caller.
    pub fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut callbacks = RemoteCallbacks::new();
        callbacks.credentials(|_url, username, allowed| self.credentials(username, allowed));
        callbacks.certificate_check(|cert, _host| {
            let (Some(ssh), Some(blob)) = (&self.ssh, cert.as_hostkey().and_then(|k| k.hostkey()))
            else {
                // TLS certificates: libgit2 has already verified them against the system roots.
                return Ok(CertificateCheckStatus::CertificatePassthrough);
            };
            self.check_ssh_host(ssh, blob)
                .map(|()| CertificateCheckStatus::CertificateOk)
        });
        callbacks
    }

    fn credentials(
        &self,
        username: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        let ssh_user = || {
            username
                .map(str::to_owned)
                .or_else(|| self.ssh.as_ref().and_then(|s| s.user.clone()))
                .unwrap_or_else(|| "git".to_owned())
        };
        if allowed.contains(CredentialType::USERNAME) {
            return Cred::username(&ssh_user());
        }
        // libgit2 asks again after the server refused what we sent: refuse to loop.
        let attempt = self.attempts.get() + 1;
        self.attempts.set(attempt);
        if attempt > 1 {
            return Err(self.fail_auth(AuthError::Rejected));
        }
        let cred = match &self.method {
            AuthMethod::SshKey {
                key_file,
                passphrase_env,
            } if allowed.contains(CredentialType::SSH_KEY) => {
                let passphrase = passphrase_env.as_deref().map(read_env).transpose();
                let passphrase = passphrase.map_err(|e| self.fail_auth(e))?;
                if !key_file.exists() {
                    return Err(self.fail_auth(AuthError::KeyFileMissing {
                        path: key_file.clone(),
                    }));
                }
                Cred::ssh_key(&ssh_user(), None, key_file, passphrase.as_deref())
            }
            AuthMethod::SshAgent if allowed.contains(CredentialType::SSH_KEY) => {
                Cred::ssh_key_from_agent(&ssh_user())
            }
            AuthMethod::Token { token_env }
                if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) =>
            {
                let token = read_env(token_env).map_err(|e| self.fail_auth(e))?;
                Cred::userpass_plaintext(TOKEN_USER, &token)
            }
            AuthMethod::Password {
                username,
                password_env,
            } if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) => {
                let password = read_env(password_env).map_err(|e| self.fail_auth(e))?;
                Cred::userpass_plaintext(username, &password)
            }
            AuthMethod::Provided { username, secret }
                if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) =>
            {
                Cred::userpass_plaintext(username, secret.expose())
            }
            AuthMethod::None => Err(self.fail_auth(AuthError::NotConfigured {
                url_has_userinfo: self.url_has_userinfo,
            })),
            method => Err(self.fail_auth(AuthError::MethodNotAccepted {
                method: method_name(method),
                accepted: accepted_names(allowed),
            })),
        };
        // libgit2's own message (e.g. a key that fails to decrypt) carries no secret.
        cred.map_err(|e| self.fail_auth(AuthError::Credential(e.into())))
    }

    fn check_ssh_host(&self, ssh: &SshHost, blob: &[u8]) -> Result<(), git2::Error> {
        verify_host_key(self.known_hosts_file.as_deref(), ssh, blob)
            .map_err(|e| self.fail(ConnectFailure::HostKey(e)))
    }
}

/// Checks the key `blob` an SSH server presented against `known_hosts` (the configured file,
/// or the user's).
fn verify_host_key(
    known_hosts_file: Option<&std::path::Path>,
    ssh: &SshHost,
    blob: &[u8],
) -> Result<(), HostKeyError> {
    let file = match known_hosts_file {
        Some(file) => file.to_owned(),
        None => default_known_hosts().ok_or(HostKeyError::NoKnownHostsFile)?,
    };
    let text = std::fs::read_to_string(&file).map_err(|source| HostKeyError::ReadKnownHosts {
        file: file.clone(),
        source,
    })?;
    let key = PublicKey::from_bytes(blob).map_err(|source| HostKeyError::Parse {
        host: ssh.host.clone(),
        source,
    })?;
    let name = ssh.known_hosts_name();
    match check_host_key(&text, ssh, &key) {
        HostKeyCheck::Known => Ok(()),
        HostKeyCheck::Unknown => Err(HostKeyError::Unknown {
            name,
            fingerprint: key.fingerprint(HashAlg::Sha256).to_string(),
            file,
        }),
        HostKeyCheck::Mismatch { presented } => Err(HostKeyError::Mismatch {
            name,
            presented,
            file,
        }),
        HostKeyCheck::Revoked => Err(HostKeyError::Revoked { name, file }),
    }
}

pub(crate) fn default_known_hosts() -> Option<PathBuf> {
    etcetera::home_dir()
        .ok()
        .map(|home| home.join(".ssh").join("known_hosts"))
}

/// The value of the environment variable `name`; the error names the variable only.
pub(crate) fn read_env(name: &str) -> Result<String, AuthError> {
    std::env::var(name).map_err(|e| match e {
        std::env::VarError::NotPresent => AuthError::EnvNotSet {
            name: name.to_owned(),
        },
        std::env::VarError::NotUnicode(_) => AuthError::EnvNotUnicode {
            name: name.to_owned(),
        },
    })
}

fn method_name(method: &AuthMethod) -> &'static str {
    match method {
        AuthMethod::None => "none",
        AuthMethod::SshKey { .. } => "sshKeyFile",
        AuthMethod::SshAgent => "sshAgent",
        AuthMethod::Token { .. } => "tokenEnv",
        AuthMethod::Password { .. } => "username + passwordEnv",
        AuthMethod::Provided { .. } => {
            "credentials provided at run time (GitHub App or Argo CD Secret)"
        }
    }
}

fn accepted_names(allowed: CredentialType) -> String {
    let mut names = Vec::new();
    if allowed.contains(CredentialType::SSH_KEY) {
        names.push("SSH keys");
    }
    if allowed.contains(CredentialType::USER_PASS_PLAINTEXT) {
        names.push("user name and password/token");
    }
    if names.is_empty() {
        "nothing tagpilot supports".to_owned()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOnU8uPO3bZxo1ZdUNvG4/WaLvL+0kFEYaQWTxk8ncQS";
    const KEY_B: &str =
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBZ8y6WEIWEw7A9y7wj1x8Tdwqd5wLhRUtI5tNA0qtnO";

    fn key(s: &str) -> PublicKey {
        PublicKey::from_openssh(s).unwrap()
    }

    fn host(h: &str, port: u16) -> SshHost {
        SshHost {
            host: h.into(),
            port,
            user: None,
        }
    }

    #[test]
    fn redacts_userinfo() {
        assert_eq!(
            redact_url("https://bot:s3cret@git.example/m.git"),
            "https://git.example/m.git"
        );
        assert_eq!(
            redact_url("https://tok@git.example/m.git"),
            "https://git.example/m.git"
        );
        assert_eq!(redact_url("ssh://git@h:2222/m.git"), "ssh://h:2222/m.git");
        assert_eq!(
            redact_url("git@github.com:acme/m.git"),
            "github.com:acme/m.git"
        );
        assert_eq!(redact_url("file:///srv/m.git"), "file:///srv/m.git");
    }

    #[test]
    fn scrub_removes_credentials_from_messages() {
        let url = "https://bot:hunter2@git.example/m.git";
        let message = scrub(&format!("failed to connect to {url}: timeout"), url);
        assert!(!message.contains("hunter2"), "{message}");
        assert!(message.contains("https://git.example/m.git"));
    }

    #[test]
    fn missing_auth_says_the_password_in_the_url_was_refused() {
        let plain = AuthError::NotConfigured {
            url_has_userinfo: false,
        };
        assert_eq!(
            plain.to_string(),
            "the remote asks for credentials but `auth` is not configured"
        );
        let hinted = AuthError::NotConfigured {
            url_has_userinfo: true,
        }
        .to_string();
        assert!(
            hinted.ends_with(
                "(the remote refused the user and password in the URL: set `auth.tokenEnv` or \
                 `auth.username` and `auth.passwordEnv`)"
            ),
            "{hinted}"
        );
    }

    #[test]
    fn parses_ssh_hosts() {
        assert_eq!(
            SshHost::from_url("git@github.com:acme/m.git"),
            Some(SshHost {
                host: "github.com".into(),
                port: 22,
                user: Some("git".into())
            })
        );
        assert_eq!(
            SshHost::from_url("ssh://127.0.0.1:2222/srv/m.git")
                .unwrap()
                .known_hosts_name(),
            "[127.0.0.1]:2222"
        );
        assert_eq!(SshHost::from_url("https://h/m.git"), None);
        assert_eq!(SshHost::from_url("file:///srv/m.git"), None);
        assert_eq!(SshHost::from_url("/srv/m.git"), None);
    }

    #[test]
    fn known_key_matches_with_port_and_patterns() {
        let kh = format!("# comment\n[127.0.0.1]:2222 {KEY_A}\nother,*.example.org {KEY_B}\n");
        assert_eq!(
            check_host_key(&kh, &host("127.0.0.1", 2222), &key(KEY_A)),
            HostKeyCheck::Known
        );
        assert_eq!(
            check_host_key(&kh, &host("git.example.org", 22), &key(KEY_B)),
            HostKeyCheck::Known
        );
        // Port 22 entries do not cover other ports.
        assert_eq!(
            check_host_key(&kh, &host("other", 2222), &key(KEY_B)),
            HostKeyCheck::Unknown
        );
    }

    #[test]
    fn different_key_for_a_listed_host_is_a_mismatch() {
        let kh = format!("[127.0.0.1]:2222 {KEY_A}\n");
        assert!(matches!(
            check_host_key(&kh, &host("127.0.0.1", 2222), &key(KEY_B)),
            HostKeyCheck::Mismatch { presented } if presented.starts_with("SHA256:")
        ));
    }

    #[test]
    fn negated_pattern_excludes_and_revoked_refuses() {
        let kh = format!("*.example.org,!bad.example.org {KEY_A}\n@revoked * {KEY_B}\n");
        assert_eq!(
            check_host_key(&kh, &host("bad.example.org", 22), &key(KEY_A)),
            HostKeyCheck::Unknown
        );
        assert_eq!(
            check_host_key(&kh, &host("x.example.org", 22), &key(KEY_B)),
            HostKeyCheck::Revoked
        );
    }

    #[test]
    fn hashed_host_names_match() {
        // `ssh-keygen -H` format: |1|base64(salt)|base64(HMAC-SHA1(salt, name)).
        use base64::Engine as _;
        let salt = [7u8; 20];
        let mut mac = Hmac::<sha1::Sha1>::new_from_slice(&salt).unwrap();
        mac.update(b"[127.0.0.1]:2222");
        let hash = mac.finalize().into_bytes();
        let b64 = base64::engine::general_purpose::STANDARD;
        let kh = format!("|1|{}|{} {KEY_A}\n", b64.encode(salt), b64.encode(hash));
        assert_eq!(
            check_host_key(&kh, &host("127.0.0.1", 2222), &key(KEY_A)),
            HostKeyCheck::Known
        );
        assert_eq!(
            check_host_key(&kh, &host("127.0.0.1", 2223), &key(KEY_A)),
            HostKeyCheck::Unknown
        );
    }
}
