//! Where registry credentials come from. Order: credentials handed over in memory (Kubernetes
//! pull secrets) win; then an entry in `tagpilot.yaml`; then Docker's `config.json`
//! (`credHelpers` for the host, then `credsStore`, then `auths`), as `docker login` writes it.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use serde::Deserialize;

use super::Credential;
use super::helper::{HelperError, run_helper};
use crate::config::RegistryConfig;
use crate::image::DOCKER_HUB;

/// Why no credential could be had. Never holds a secret: an unset variable's value, a JSON
/// parser's quote of a value, an `auth` string are all left out.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CredentialError {
    /// `std::env::VarError` is not kept: for a non-Unicode value it holds the value.
    #[error("environment variable {var} (credentials.passwordEnv in tagpilot.yaml) is not set")]
    PasswordEnvUnset { var: String },

    #[error(
        "cannot read {} (credentials.passwordFile in tagpilot.yaml)",
        path.display()
    )]
    PasswordFile {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },

    #[error("credentials in tagpilot.yaml need exactly one of passwordEnv and passwordFile")]
    PasswordSourceAmbiguous,

    #[error("cannot read {}", path.display())]
    ReadDockerConfig {
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },

    /// Only the position: serde_json's message can quote the value it chokes on.
    #[error("{origin} is not valid Docker config JSON (line {line}, column {column})")]
    DockerConfigJson {
        origin: String,
        line: usize,
        column: usize,
    },

    #[error("the `auth` entry for {auth_key} in {origin} is not base64 of user:password")]
    AuthNotUserPassword { auth_key: String, origin: String },

    #[error(transparent)]
    Helper(#[from] HelperError),
}

impl CredentialError {
    fn docker_config_json(origin: &str, e: &serde_json::Error) -> Self {
        CredentialError::DockerConfigJson {
            origin: origin.to_string(),
            line: e.line(),
            column: e.column(),
        }
    }
}

/// Where Docker's `config.json` is read from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DockerConfigSource {
    /// `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json` (what the `docker` CLI reads).
    #[default]
    FromEnvironment,
    /// This file (tests, or a mounted Kubernetes pull secret's `.dockerconfigjson`).
    File(PathBuf),
    /// Do not read any `config.json`.
    Disabled,
}

impl DockerConfigSource {
    fn path(&self) -> Option<PathBuf> {
        match self {
            DockerConfigSource::FromEnvironment => {
                if let Some(dir) = std::env::var_os("DOCKER_CONFIG").filter(|d| !d.is_empty()) {
                    return Some(PathBuf::from(dir).join("config.json"));
                }
                std::env::home_dir().map(|home| home.join(".docker").join("config.json"))
            }
            DockerConfigSource::File(path) => Some(path.clone()),
            DockerConfigSource::Disabled => None,
        }
    }
}

/// Finds the credential for a registry. Built once per client from `tagpilot.yaml`'s registries.
#[derive(Debug, Clone)]
pub struct CredentialResolver {
    /// `tagpilot.yaml` credentials by normalised host.
    explicit: HashMap<String, crate::config::Credentials>,
    /// Directory `passwordFile` paths are relative to.
    base_dir: PathBuf,
    docker_config: DockerConfigSource,
    /// Search path for `docker-credential-*` programs; `None` means the process's `PATH`.
    helper_path: Option<OsString>,
    /// Credentials handed over in memory by normalised host (pull secrets read from Kubernetes);
    /// they win over everything else.
    given: HashMap<String, Credential>,
}

impl CredentialResolver {
    pub fn new(
        registries: &[RegistryConfig],
        base_dir: &Path,
        docker_config: DockerConfigSource,
        helper_path: Option<OsString>,
    ) -> Self {
        let explicit = registries
            .iter()
            .filter_map(|r| Some((normalise_host(&r.host), r.credentials.clone()?)))
            .collect();
        CredentialResolver {
            explicit,
            base_dir: base_dir.to_path_buf(),
            docker_config,
            helper_path,
            given: HashMap::new(),
        }
    }

    /// Adds credentials held in memory, by registry host (`host[:port]` as in image
    /// references). They win over `tagpilot.yaml` and `config.json`.
    pub fn with_given(mut self, given: &HashMap<String, Credential>) -> Self {
        self.given = given
            .iter()
            .map(|(host, c)| (normalise_host(host), c.clone()))
            .collect();
        self
    }

    /// The credential for `registry` (a normalised host such as `registry-1.docker.io`), whose
    /// `config.json` key is `auth_key` (see [`crate::image::Repository::auth_key`]). `Ok(None)`
    /// means "go anonymous".
    pub async fn resolve(
        &self,
        registry: &str,
        auth_key: &str,
    ) -> Result<Option<Credential>, CredentialError> {
        if let Some(given) = self.given.get(registry) {
            return Ok(Some(given.clone()));
        }
        if let Some(creds) = self.explicit.get(registry) {
            return self.explicit_credential(creds).map(Some);
        }
        let Some(path) = self.docker_config.path() else {
            return Ok(None);
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(CredentialError::ReadDockerConfig {
                    path,
                    source: Arc::new(e),
                });
            }
        };
        let origin = path.display().to_string();
        let file: DockerConfigFile = serde_json::from_str(&text)
            .map_err(|e| CredentialError::docker_config_json(&origin, &e))?;
        self.lookup_docker_config(&file, &origin, auth_key).await
    }

    fn explicit_credential(
        &self,
        creds: &crate::config::Credentials,
    ) -> Result<Credential, CredentialError> {
        let password = match (&creds.password_env, &creds.password_file) {
            (Some(var), None) => std::env::var(var)
                .map_err(|_| CredentialError::PasswordEnvUnset { var: var.clone() })?,
            (None, Some(file)) => {
                let path = self.base_dir.join(file);
                let text =
                    std::fs::read_to_string(&path).map_err(|e| CredentialError::PasswordFile {
                        path: path.clone(),
                        source: Arc::new(e),
                    })?;
                text.trim_end_matches(['\r', '\n']).to_string()
            }
            _ => return Err(CredentialError::PasswordSourceAmbiguous),
        };
        Ok(Credential::new(&creds.username, password, "tagpilot.yaml"))
    }

    async fn lookup_docker_config(
        &self,
        file: &DockerConfigFile,
        origin: &str,
        auth_key: &str,
    ) -> Result<Option<Credential>, CredentialError> {
        let host = config_key_host(auth_key);
        let helper = file
            .cred_helpers
            .iter()
            .find(|(key, _)| config_key_host(key) == host)
            .map(|(_, helper)| helper)
            .or(file.creds_store.as_ref())
            .filter(|h| !h.is_empty());
        if let Some(helper) = helper
            && let Some(cred) = run_helper(self.helper_path.as_deref(), helper, auth_key).await?
        {
            return Ok(Some(cred));
        }
        auths_credential(file, auth_key, origin)
    }
}

/// The credential for `auth_key` in a parsed `config.json` (`auths` only), named after `origin`.
fn auths_credential(
    file: &DockerConfigFile,
    auth_key: &str,
    origin: &str,
) -> Result<Option<Credential>, CredentialError> {
    let host = config_key_host(auth_key);
    let entry = file.auths.get(auth_key).or_else(|| {
        file.auths
            .iter()
            .find(|(key, _)| config_key_host(key) == host)
            .map(|(_, e)| e)
    });
    let Some(entry) = entry else { return Ok(None) };
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Credential::new(user, password, origin)));
    }
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let not_user_password = || CredentialError::AuthNotUserPassword {
            auth_key: auth_key.to_string(),
            origin: origin.to_string(),
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(not_user_password)?;
        let (user, password) = decoded.split_once(':').ok_or_else(not_user_password)?;
        return Ok(Some(Credential::new(user, password, origin)));
    }
    Ok(None)
}

/// The credential for `repository`'s registry in a `.dockerconfigjson` text, as a
/// `kubernetes.io/dockerconfigjson` Secret holds it: the `auths` entry for that host, read as
/// `config.json`'s are (credential helpers make no sense there and are ignored). `origin` names
/// where the text came from (`Secret argocd/regcred`); errors never quote the text.
pub fn docker_config_json_credential(
    text: &str,
    repository: &crate::image::Repository,
    origin: &str,
) -> Result<Option<Credential>, CredentialError> {
    let file: DockerConfigFile =
        serde_json::from_str(text).map_err(|e| CredentialError::docker_config_json(origin, &e))?;
    auths_credential(&file, repository.auth_key(), origin)
}

/// Docker's `config.json`, the parts that hold credentials.
#[derive(Debug, Default, Deserialize)]
struct DockerConfigFile {
    #[serde(default)]
    auths: HashMap<String, AuthEntry>,
    #[serde(default, rename = "credHelpers")]
    cred_helpers: HashMap<String, String>,
    #[serde(default, rename = "credsStore")]
    creds_store: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct AuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// The host a `config.json` key stands for, as the Docker CLI compares them
/// (`https://index.docker.io/v1/` and `docker.io` are both Docker Hub).
fn config_key_host(key: &str) -> String {
    let key = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let host = key.split('/').next().unwrap_or(key).to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => "index.docker.io".to_string(),
        _ => host,
    }
}

/// A `tagpilot.yaml` registry host in the form [`crate::image::Repository::registry`] uses.
pub(crate) fn normalise_host(host: &str) -> String {
    let host = host
        .trim()
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let host = host.to_ascii_lowercase();
    match host.as_str() {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => DOCKER_HUB.to_string(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Credentials;

    fn resolver(
        dir: &Path,
        registries: &[RegistryConfig],
        helper_path: Option<&Path>,
    ) -> CredentialResolver {
        CredentialResolver::new(
            registries,
            dir,
            DockerConfigSource::File(dir.join("config.json")),
            Some(
                helper_path
                    .map(|p| p.as_os_str().to_owned())
                    .unwrap_or_default(),
            ),
        )
    }

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn a_dockerconfigjson_secret_gives_the_entry_for_the_image_registry_only() {
        let repo = |r: &str| crate::image::Repository::parse(r).unwrap();
        let text = format!(
            r#"{{"auths":{{"ghcr.io":{{"auth":"{}"}},"https://index.docker.io/v1/":{{"username":"hub","password":"p2"}}}}}}"#,
            b64("bot:s3cret")
        );
        let c = docker_config_json_credential(&text, &repo("ghcr.io/o/app"), "Secret a/b")
            .unwrap()
            .unwrap();
        assert_eq!((c.username.as_str(), c.password()), ("bot", "s3cret"));
        assert_eq!(c.source, "Secret a/b");
        let hub = docker_config_json_credential(&text, &repo("nginx"), "Secret a/b")
            .unwrap()
            .unwrap();
        assert_eq!(hub.username, "hub");
        assert!(
            docker_config_json_credential(&text, &repo("quay.io/x/y"), "Secret a/b")
                .unwrap()
                .is_none()
        );
        let e =
            docker_config_json_credential(r#"{"auths": "s3cret"}"#, &repo("x.io/a"), "Secret a/b")
                .unwrap_err()
                .to_string();
        assert!(
            e.starts_with("Secret a/b is not valid") && !e.contains("s3cret"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn given_credentials_win_over_tagpilot_yaml() {
        let dir = tempfile::tempdir().unwrap();
        let registries = vec![RegistryConfig {
            host: "r.example".into(),
            insecure: false,
            credentials: Some(Credentials {
                username: "yaml".into(),
                password_env: Some("TAGPILOT_TEST_UNSET_VAR".into()),
                password_file: None,
            }),
            rate_limit: None,
            timeout: None,
            tag_list: Default::default(),
        }];
        let given = HashMap::from([(
            "R.example".to_string(),
            Credential::new("pull", "secret", "Secret a/b"),
        )]);
        let r = resolver(dir.path(), &registries, None).with_given(&given);
        let c = r.resolve("r.example", "r.example").await.unwrap().unwrap();
        assert_eq!(
            (c.username.as_str(), c.source.as_str()),
            ("pull", "Secret a/b")
        );
    }

    #[tokio::test]
    async fn auths_entry_decodes_base64_user_password() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            &format!(
                r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("bot:s3cr:et")
            ),
        );
        let cred = resolver(dir.path(), &[], None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cred.username, "bot");
        assert_eq!(
            cred.password(),
            "s3cr:et",
            "only the first colon separates user from password"
        );
        assert!(cred.source.ends_with("config.json"));
    }

    #[tokio::test]
    async fn docker_hub_uses_the_index_v1_key_and_username_password_fields() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            r#"{"auths": {"https://index.docker.io/v1/": {"username": "me", "password": "pw"}}}"#,
        );
        let cred = resolver(dir.path(), &[], None)
            .resolve(DOCKER_HUB, crate::image::DOCKER_HUB_AUTH_KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((cred.username.as_str(), cred.password()), ("me", "pw"));
    }

    #[tokio::test]
    async fn keys_with_scheme_and_path_match_the_host() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            &format!(
                r#"{{"auths": {{"https://Registry.Example.com/v2/": {{"auth": "{}"}}}}}}"#,
                b64("u:p")
            ),
        );
        let r = resolver(dir.path(), &[], None);
        let cred = r
            .resolve("registry.example.com", "registry.example.com")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(cred.username, "u");
        assert_eq!(
            r.resolve("other.example.com", "other.example.com")
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn missing_config_json_means_anonymous() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            resolver(dir.path(), &[], None)
                .resolve("ghcr.io", "ghcr.io")
                .await
                .unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn malformed_config_json_is_an_error_naming_the_file_without_secrets() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            r#"{"auths": {"ghcr.io": {"auth": "#,
        );
        let err = resolver(dir.path(), &[], None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("config.json"), "{err}");
        write(
            &dir.path().join("config.json"),
            r#"{"auths": {"ghcr.io": {"auth": "!!!not-base64"}}}"#,
        );
        let err = resolver(dir.path(), &[], None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("not base64") && !err.contains("!!!not-base64"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn explicit_config_wins_over_config_json() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            &format!(
                r#"{{"auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("docker:pw")
            ),
        );
        write(&dir.path().join("password"), "from-file\n");
        let registries = [RegistryConfig {
            host: "GHCR.io".into(),
            insecure: false,
            credentials: Some(Credentials {
                username: "bot".into(),
                password_env: None,
                password_file: Some("password".into()),
            }),
            rate_limit: None,
            timeout: None,
            tag_list: Default::default(),
        }];
        let cred = resolver(dir.path(), &registries, None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (cred.username.as_str(), cred.password()),
            ("bot", "from-file")
        );
        assert_eq!(cred.source, "tagpilot.yaml");
    }

    #[tokio::test]
    async fn unset_password_env_names_the_variable() {
        let dir = tempfile::tempdir().unwrap();
        let registries = [RegistryConfig {
            host: "ghcr.io".into(),
            insecure: false,
            credentials: Some(Credentials {
                username: "bot".into(),
                password_env: Some("TAGPILOT_TEST_VARIABLE_THAT_IS_NEVER_SET".into()),
                password_file: None,
            }),
            rate_limit: None,
            timeout: None,
            tag_list: Default::default(),
        }];
        let err = resolver(dir.path(), &registries, None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("TAGPILOT_TEST_VARIABLE_THAT_IS_NEVER_SET"),
            "{err}"
        );
    }

    #[test]
    fn hosts_normalise_like_image_references() {
        assert_eq!(normalise_host("docker.io"), DOCKER_HUB);
        assert_eq!(
            normalise_host("Registry.Example.com:5000"),
            "registry.example.com:5000"
        );
        assert_eq!(
            config_key_host("https://index.docker.io/v1/"),
            "index.docker.io"
        );
    }
}
