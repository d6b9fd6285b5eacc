//! The `repositories:` section of `tagpilot.yaml`: where a manifest repository lives, how to
//! authenticate to it and how tagpilot writes to it.
//!
//! Only types and their validation live here; nothing in this file reads a secret or opens a
//! connection. Secrets are referenced by file path or environment variable name, never inlined,
//! so the config itself can be printed and logged.

use std::path::PathBuf;

use serde::Deserialize;

/// The user name a bare token authenticates with over HTTPS (GitHub's, also accepted by GitLab
/// and Gitea).
pub const TOKEN_USER: &str = "x-access-token";

/// What is wrong with a `repositories:` entry, found before anything is fetched.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("`name` must not be empty")]
    EmptyName,
    #[error("`auth.passphraseEnv` needs `auth.sshKeyFile`")]
    PassphraseWithoutKey,
    #[error("`auth.username` and `auth.passwordEnv` go together")]
    UsernameWithoutPassword,
    #[error(
        "`auth` names more than one method; use one of sshKeyFile, sshAgent, tokenEnv, \
         username + passwordEnv"
    )]
    SeveralAuthMethods,
    #[error("`write.mode: pull-request` needs a `forge:` block")]
    PullRequestWithoutForge,
    /// The `forge:` block.
    #[error(transparent)]
    Forge(#[from] super::forge::ConfigError),
    #[error("`write.mode: pull-request` is written through `forge::sync_all`")]
    PullRequestNotPushed,
    #[error("`{branch}` is not a valid branch name")]
    InvalidBranch { branch: String },
    #[error("`write.signing` needs exactly one of `sshKeyFile` and `pgpKeyFile`")]
    SigningKeyChoice,
    /// `tagpilot check`: a variable the config names holds a secret, but is not set.
    #[error("`{field}` names the environment variable {name}, which is not set")]
    EnvNotSet { field: &'static str, name: String },
    #[error("`{field}` names the environment variable {name}, which is not valid UTF-8")]
    EnvNotUnicode { field: &'static str, name: String },
    /// `tagpilot check`: a file the config names cannot be read.
    #[error("cannot read `{field}` {}", path.display())]
    Unreadable {
        field: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("`auth.sshAgent` needs an SSH agent, but SSH_AUTH_SOCK is not set")]
    NoSshAgent,
}

/// One remote manifest repository.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RepositoryConfig {
    /// The name policy targets use (`repository: manifests`) and reports show.
    pub name: String,
    /// `ssh://`, `git@host:path` (scp-like), `https://`, `http://` or `file://`.
    pub url: String,
    /// The base branch: read from, and pushed to unless `write.branch` says otherwise.
    #[serde(default = "default_branch")]
    pub branch: String,
    #[serde(default)]
    pub auth: AuthConfig,
    #[serde(default)]
    pub write: WriteConfig,
    /// Where pull requests are opened (`write.mode: pull-request`).
    #[serde(default)]
    pub forge: Option<super::forge::ForgeConfig>,
    /// Follow what reaches the base branch to a healthy Argo CD Application (off when absent).
    #[serde(default)]
    pub verify: Option<super::verify::VerifyConfig>,
}

fn default_branch() -> String {
    "main".to_owned()
}

/// How to authenticate. Which fields are set selects the method; [`AuthConfig::method`] checks
/// that exactly one method is described.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AuthConfig {
    /// SSH private key file (OpenSSH or PEM format).
    #[serde(default)]
    pub ssh_key_file: Option<PathBuf>,
    /// Environment variable holding the passphrase of `sshKeyFile`.
    #[serde(default)]
    pub passphrase_env: Option<String>,
    /// Use the SSH agent at `SSH_AUTH_SOCK`.
    #[serde(default)]
    pub ssh_agent: bool,
    /// `known_hosts` file for SSH host key checking; default `~/.ssh/known_hosts`.
    #[serde(default)]
    pub known_hosts_file: Option<PathBuf>,
    /// Environment variable holding an HTTPS token (sent as user `x-access-token`).
    #[serde(default)]
    pub token_env: Option<String>,
    /// HTTPS user name; the password comes from `passwordEnv`.
    #[serde(default)]
    pub username: Option<String>,
    #[serde(default)]
    pub password_env: Option<String>,
    /// A secret obtained at run time (a GitHub App installation token, or the password of an
    /// Argo CD repository Secret), used for HTTPS when no other method is configured. Never read
    /// from the config file.
    #[serde(skip)]
    pub provided_token: Option<ProvidedToken>,
    /// The user name sent with `provided_token`; `x-access-token` when `None`.
    #[serde(skip)]
    pub provided_username: Option<String>,
}

/// A secret handed over at run time. Its `Debug` output never shows the value.
#[derive(Clone, PartialEq, Eq)]
pub struct ProvidedToken(std::sync::Arc<str>);

impl ProvidedToken {
    pub fn new(token: impl Into<std::sync::Arc<str>>) -> ProvidedToken {
        ProvidedToken(token.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ProvidedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProvidedToken(***)")
    }
}

/// The authentication method an [`AuthConfig`] describes, after validation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthMethod {
    /// No credentials: file://, or a remote that needs none.
    None,
    SshKey {
        key_file: PathBuf,
        passphrase_env: Option<String>,
    },
    SshAgent,
    Token {
        token_env: String,
    },
    Password {
        username: String,
        password_env: String,
    },
    /// [`AuthConfig::provided_token`], sent as [`AuthConfig::provided_username`] (default
    /// `x-access-token`).
    Provided {
        username: String,
        secret: ProvidedToken,
    },
}

/// How tagpilot writes its commits.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteConfig {
    #[serde(default)]
    pub mode: WriteMode,
    /// The branch to push to; default the base branch. Any other branch is owned by tagpilot and
    /// rebuilt from the base on every run.
    #[serde(default)]
    pub branch: Option<String>,
    /// A minijinja template; see [`super::DEFAULT_COMMIT_MESSAGE`] for the variables.
    #[serde(default)]
    pub commit_message: Option<String>,
    #[serde(default)]
    pub author: Author,
    #[serde(default)]
    pub group: Grouping,
    #[serde(default)]
    pub signing: Option<SigningConfig>,
    /// How many times a push rejected because the branch moved is retried (after a fetch and a
    /// new plan).
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Pull-request mode: the title template (see [`crate::forge::DEFAULT_TITLE`]).
    #[serde(default)]
    pub title: Option<String>,
    /// Pull-request mode: labels put on every pull request.
    #[serde(default)]
    pub labels: Vec<String>,
    /// Pull-request mode: reviewers requested (user names; `org/team` for a GitHub team).
    #[serde(default)]
    pub reviewers: Vec<String>,
    /// Pull-request mode: open pull requests as drafts.
    #[serde(default)]
    pub draft: bool,
    /// Pull-request mode: turn on the forge's auto-merge.
    #[serde(default)]
    pub auto_merge: bool,
    /// Pull-request mode: the labels on a revert's pull request (default `tagpilot/revert`).
    #[serde(default)]
    pub revert_labels: Option<Vec<String>>,
    /// Pull-request mode: render the Argo CD Applications a change deploys, before and after,
    /// and keep a comment with the diff of their resources on the pull request.
    #[serde(default)]
    pub rendered_diff: bool,
    /// Keep a dashboard issue on the forge (GitHub, GitLab): what waits, what is open, what
    /// is held (with a box to release it). Closed when turned off.
    #[serde(default)]
    pub dashboard: bool,
}

fn default_max_retries() -> u32 {
    5
}

impl Default for WriteConfig {
    fn default() -> Self {
        WriteConfig {
            mode: WriteMode::default(),
            branch: None,
            commit_message: None,
            author: Author::default(),
            group: Grouping::default(),
            signing: None,
            max_retries: default_max_retries(),
            title: None,
            labels: Vec::new(),
            reviewers: Vec::new(),
            draft: false,
            auto_merge: false,
            revert_labels: None,
            rendered_diff: false,
            dashboard: false,
        }
    }
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum WriteMode {
    #[default]
    Push,
    /// One pull request per change group, on a branch tagpilot owns (see [`crate::forge`]).
    PullRequest,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Author {
    pub name: String,
    pub email: String,
}

impl Default for Author {
    fn default() -> Self {
        Author {
            name: "tagpilot".to_owned(),
            email: "tagpilot@users.noreply.example".to_owned(),
        }
    }
}

/// What one commit holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Grouping {
    /// All changes to the repository in one commit.
    #[default]
    Repository,
    /// One commit per policy.
    Policy,
    /// One group per changed file (pull-request mode: one pull request per file).
    Path,
    /// One commit per policy, but all the images a pattern policy follows in one (issue 31);
    /// `policy` gives each of a pattern's images its own.
    Pattern,
}

/// The key commits are signed with. Exactly one of `sshKeyFile` and `pgpKeyFile`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SigningConfig {
    /// OpenSSH private key; the commit gets an SSHSIG signature (`gpg.format=ssh`).
    #[serde(default)]
    pub ssh_key_file: Option<PathBuf>,
    /// ASCII-armoured OpenPGP secret key.
    #[serde(default)]
    pub pgp_key_file: Option<PathBuf>,
    /// Environment variable holding the key's passphrase.
    #[serde(default)]
    pub passphrase_env: Option<String>,
}

// === impl RepositoryConfig ===

impl RepositoryConfig {
    /// The branch commits are pushed to. In pull-request mode `write.branch` is a template
    /// rendered per group, so the target is the base branch.
    pub fn target_branch(&self) -> &str {
        match self.write.mode {
            WriteMode::Push => self.write.branch.as_deref().unwrap_or(&self.branch),
            WriteMode::PullRequest => &self.branch,
        }
    }

    /// Whether tagpilot owns the target branch, and so may rebuild it (with a lease).
    pub fn owns_target_branch(&self) -> bool {
        self.target_branch() != self.branch
    }

    /// Checks what serde cannot and needs nothing but the entry: one auth method, one signing
    /// key, a forge for pull requests, branch names git accepts. The writers check their
    /// templates on top (`RepositoryConfig::validate` in `git`, the pull-request templates in
    /// `forge`).
    pub fn check_structure(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() {
            return Err(ConfigError::EmptyName);
        }
        self.auth.method()?;
        let literal_branch = match self.write.mode {
            WriteMode::Push => self.write.branch.as_deref(),
            WriteMode::PullRequest => {
                let forge = self
                    .forge
                    .as_ref()
                    .ok_or(ConfigError::PullRequestWithoutForge)?;
                forge.validate()?;
                None
            }
        };
        for branch in [Some(self.branch.as_str()), literal_branch]
            .into_iter()
            .flatten()
        {
            if !git2::Reference::is_valid_name(&format!("refs/heads/{branch}")) {
                return Err(ConfigError::InvalidBranch {
                    branch: branch.to_owned(),
                });
            }
        }
        if let Some(signing) = &self.write.signing {
            match (&signing.ssh_key_file, &signing.pgp_key_file) {
                (Some(_), None) | (None, Some(_)) => {}
                _ => return Err(ConfigError::SigningKeyChoice),
            }
        }
        Ok(())
    }
}

// === impl AuthConfig ===

impl AuthConfig {
    /// The one method this config describes, or why it is ambiguous or incomplete.
    pub fn method(&self) -> Result<AuthMethod, ConfigError> {
        let mut methods = Vec::new();
        if let Some(key_file) = &self.ssh_key_file {
            methods.push(AuthMethod::SshKey {
                key_file: key_file.clone(),
                passphrase_env: self.passphrase_env.clone(),
            });
        } else if self.passphrase_env.is_some() {
            return Err(ConfigError::PassphraseWithoutKey);
        }
        if self.ssh_agent {
            methods.push(AuthMethod::SshAgent);
        }
        if let Some(token_env) = &self.token_env {
            methods.push(AuthMethod::Token {
                token_env: token_env.clone(),
            });
        }
        match (&self.username, &self.password_env) {
            (Some(username), Some(password_env)) => methods.push(AuthMethod::Password {
                username: username.clone(),
                password_env: password_env.clone(),
            }),
            (None, None) => {}
            _ => return Err(ConfigError::UsernameWithoutPassword),
        }
        match methods.len() {
            0 => Ok(match &self.provided_token {
                Some(secret) => AuthMethod::Provided {
                    username: self
                        .provided_username
                        .clone()
                        .unwrap_or_else(|| TOKEN_USER.to_string()),
                    secret: secret.clone(),
                },
                None => AuthMethod::None,
            }),
            1 => Ok(methods.remove(0)),
            _ => Err(ConfigError::SeveralAuthMethods),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<RepositoryConfig, String> {
        serde_saphyr::from_str::<RepositoryConfig>(yaml).map_err(|e| e.to_string())
    }

    #[test]
    fn full_config_parses() {
        let repo = parse(
            "name: manifests\nurl: git@github.com:acme/manifests.git\nbranch: main\n\
             auth: {sshKeyFile: /secrets/id, passphraseEnv: PASS, knownHostsFile: /secrets/kh}\n\
             write:\n  mode: push\n  branch: tagpilot/updates\n  commitMessage: 'x {{ group }}'\n  \
             author: {name: bot, email: bot@example.org}\n  group: policy\n  \
             signing: {sshKeyFile: /secrets/sign}\n  maxRetries: 2\n",
        )
        .unwrap();
        repo.check_structure().unwrap();
        assert_eq!(repo.target_branch(), "tagpilot/updates");
        assert!(repo.owns_target_branch());
        assert_eq!(repo.write.group, Grouping::Policy);
        assert_eq!(repo.write.max_retries, 2);
        assert_eq!(
            repo.auth.method().unwrap(),
            AuthMethod::SshKey {
                key_file: "/secrets/id".into(),
                passphrase_env: Some("PASS".into())
            }
        );
    }

    #[test]
    fn defaults_push_to_the_base_branch() {
        let repo = parse("name: m\nurl: file:///srv/m.git\n").unwrap();
        repo.check_structure().unwrap();
        assert_eq!(repo.branch, "main");
        assert_eq!(repo.target_branch(), "main");
        assert!(!repo.owns_target_branch());
        assert_eq!(repo.write.mode, WriteMode::Push);
        assert_eq!(repo.auth.method().unwrap(), AuthMethod::None);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = parse("name: m\nurl: file:///m\nwrite: {mode: push, force: true}\n").unwrap_err();
        assert!(err.contains("force"), "{err}");
    }

    #[test]
    fn pull_request_mode_needs_a_forge() {
        let repo = parse("name: m\nurl: file:///m\nwrite: {mode: pull-request}\n").unwrap();
        let err = repo.check_structure().unwrap_err().to_string();
        assert!(err.contains("forge"), "{err}");
        let repo = parse(
            "name: m\nurl: file:///m\nforge: {github: {tokenEnv: T, repository: a/m}}\n\
             write: {mode: pull-request, group: path, labels: [deps], autoMerge: true}\n",
        )
        .unwrap();
        repo.check_structure().unwrap();
        assert_eq!(repo.target_branch(), "main");
        assert_eq!(repo.write.group, Grouping::Path);
        assert!(repo.write.auto_merge);
    }

    #[test]
    fn two_auth_methods_are_ambiguous() {
        let repo =
            parse("name: m\nurl: https://h/m\nauth: {tokenEnv: T, sshAgent: true}\n").unwrap();
        assert!(
            repo.check_structure()
                .unwrap_err()
                .to_string()
                .contains("more than one method")
        );
        let repo = parse("name: m\nurl: https://h/m\nauth: {username: u}\n").unwrap();
        assert!(
            repo.check_structure()
                .unwrap_err()
                .to_string()
                .contains("passwordEnv")
        );
    }

    #[test]
    fn signing_needs_exactly_one_key() {
        let repo =
            parse("name: m\nurl: file:///m\nwrite: {signing: {passphraseEnv: P}}\n").unwrap();
        assert!(
            repo.check_structure()
                .unwrap_err()
                .to_string()
                .contains("exactly one")
        );
    }

    #[test]
    fn invalid_branch_is_reported() {
        let repo = parse("name: m\nurl: file:///m\nbranch: 'a..b'\n").unwrap();
        assert!(
            repo.check_structure()
                .unwrap_err()
                .to_string()
                .contains("a..b")
        );
    }
}
