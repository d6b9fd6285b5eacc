//! Where registry credentials come from, and the pieces of the token flow that are not HTTP.
//!
//! Credentials are looked up lazily, the first time a registry asks for them, so an anonymous
//! registry never makes tagpilot read `config.json` or run a credential helper. Order: an entry
//! in `tagpilot.yaml` wins; then Docker's `config.json` (`credHelpers` for the host, then
//! `credsStore`, then `auths`), as `docker login` writes it.
//!
//! Never: log, print or put into an error a password, secret, token or base64 `auth` string.
//! [`Credential`]'s `Debug` is redacted for that reason, and helper output is parsed, not echoed.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use base64::Engine;
use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::config::RegistryConfig;
use crate::image::DOCKER_HUB;

/// How long a `docker-credential-*` helper may take before tagpilot gives up on it.
const HELPER_TIMEOUT: Duration = Duration::from_secs(30);

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
    /// means "go anonymous"; `Err` carries a message without secrets.
    pub async fn resolve(
        &self,
        registry: &str,
        auth_key: &str,
    ) -> Result<Option<Credential>, String> {
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
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let file: DockerConfigFile = serde_json::from_str(&text)
            .map_err(|e| format!("{} is not valid Docker config JSON: {e}", path.display()))?;
        self.lookup_docker_config(&file, &path, auth_key).await
    }

    fn explicit_credential(
        &self,
        creds: &crate::config::Credentials,
    ) -> Result<Credential, String> {
        let password = match (&creds.password_env, &creds.password_file) {
            (Some(var), None) => std::env::var(var).map_err(|_| {
                format!("environment variable {var} (credentials.passwordEnv in tagpilot.yaml) is not set")
            })?,
            (None, Some(file)) => {
                let path = self.base_dir.join(file);
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    format!("cannot read {} (credentials.passwordFile in tagpilot.yaml): {e}", path.display())
                })?;
                text.trim_end_matches(['\r', '\n']).to_string()
            }
            _ => {
                return Err("credentials in tagpilot.yaml need exactly one of passwordEnv and passwordFile".into());
            }
        };
        Ok(Credential::new(&creds.username, password, "tagpilot.yaml"))
    }

    async fn lookup_docker_config(
        &self,
        file: &DockerConfigFile,
        path: &Path,
        auth_key: &str,
    ) -> Result<Option<Credential>, String> {
        let host = config_key_host(auth_key);
        let helper = file
            .cred_helpers
            .iter()
            .find(|(key, _)| config_key_host(key) == host)
            .map(|(_, helper)| helper)
            .or(file.creds_store.as_ref())
            .filter(|h| !h.is_empty());
        if let Some(helper) = helper
            && let Some(cred) = self.run_helper(helper, auth_key).await?
        {
            return Ok(Some(cred));
        }
        auths_credential(file, auth_key, &path.display().to_string())
    }

    /// Runs `docker-credential-<name> get` with the server URL on stdin, as the Docker CLI does.
    async fn run_helper(&self, name: &str, server_url: &str) -> Result<Option<Credential>, String> {
        let program = format!("docker-credential-{name}");
        let path = self
            .find_program(&program)
            .ok_or_else(|| format!("credential helper {program} is not on PATH"))?;
        let mut child = tokio::process::Command::new(&path)
            .arg("get")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(server_url.as_bytes())
                .await
                .map_err(|e| format!("cannot talk to {program}: {e}"))?;
        }
        let output = tokio::time::timeout(HELPER_TIMEOUT, child.wait_with_output())
            .await
            .map_err(|_| {
                format!(
                    "{program} get did not answer within {} s",
                    HELPER_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("cannot run {program}: {e}"))?;
        if !output.status.success() {
            let said = String::from_utf8_lossy(if output.stdout.is_empty() {
                &output.stderr
            } else {
                &output.stdout
            });
            // The helper protocol's way of saying "no entry": fall back to `auths`.
            if said.contains("credentials not found") {
                return Ok(None);
            }
            let first_line = said.lines().next().unwrap_or("").trim();
            return Err(format!(
                "{program} get failed ({}): {first_line}",
                output.status
            ));
        }
        #[derive(Deserialize)]
        #[serde(rename_all = "PascalCase")]
        struct HelperAnswer {
            username: String,
            secret: String,
        }
        let answer: HelperAnswer = serde_json::from_slice(&output.stdout).map_err(|e| {
            format!("{program} get printed something other than {{Username, Secret}} JSON: {e}")
        })?;
        if answer.username == "<token>" {
            return Err(format!(
                "{program} returned an identity token, which tagpilot does not support; \
                 store a password or access token instead"
            ));
        }
        Ok(Some(Credential::new(
            answer.username,
            answer.secret,
            program,
        )))
    }

    fn find_program(&self, program: &str) -> Option<PathBuf> {
        let search = self
            .helper_path
            .clone()
            .or_else(|| std::env::var_os("PATH"))?;
        std::env::split_paths(&search)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    }
}

/// The credential for `auth_key` in a parsed `config.json` (`auths` only), named after `source`.
fn auths_credential(
    file: &DockerConfigFile,
    auth_key: &str,
    source: &str,
) -> Result<Option<Credential>, String> {
    let host = config_key_host(auth_key);
    let entry = file.auths.get(auth_key).or_else(|| {
        file.auths
            .iter()
            .find(|(key, _)| config_key_host(key) == host)
            .map(|(_, e)| e)
    });
    let Some(entry) = entry else { return Ok(None) };
    if let (Some(user), Some(password)) = (&entry.username, &entry.password) {
        return Ok(Some(Credential::new(user, password, source)));
    }
    if let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .ok_or_else(|| {
                format!(
                    "the `auth` entry for {auth_key} in {source} is not base64 of user:password"
                )
            })?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| {
            format!("the `auth` entry for {auth_key} in {source} is not base64 of user:password")
        })?;
        return Ok(Some(Credential::new(user, password, source)));
    }
    Ok(None)
}

/// The credential for `repository`'s registry in a `.dockerconfigjson` text, as a
/// `kubernetes.io/dockerconfigjson` Secret holds it: the `auths` entry for that host, read as
/// `config.json`'s are (credential helpers make no sense there and are ignored). `source` names
/// where the text came from (`Secret argocd/regcred`); errors never quote the text, since
/// serde_json's messages can contain the values they choke on.
pub fn docker_config_json_credential(
    text: &str,
    repository: &crate::image::Repository,
    source: &str,
) -> Result<Option<Credential>, String> {
    let file: DockerConfigFile = serde_json::from_str(text).map_err(|e| {
        format!(
            "{source} is not valid Docker config JSON (line {}, column {})",
            e.line(),
            e.column()
        )
    })?;
    auths_credential(&file, repository.auth_key(), source)
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

// === the token flow's data ===

/// What a registry's `WWW-Authenticate` header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// The challenge to answer among a 401's `WWW-Authenticate` values; Bearer wins over Basic.
pub(crate) fn parse_challenge<'a>(values: impl Iterator<Item = &'a str>) -> Option<Challenge> {
    let mut basic = false;
    for value in values {
        let Ok(challenges) = http_auth::parse_challenges(value) else {
            continue;
        };
        for c in challenges {
            if c.scheme.eq_ignore_ascii_case("bearer") {
                let param = |name: &str| {
                    c.params
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.to_unescaped())
                };
                if let Some(realm) = param("realm") {
                    return Some(Challenge::Bearer {
                        realm,
                        service: param("service"),
                    });
                }
            } else if c.scheme.eq_ignore_ascii_case("basic") {
                basic = true;
            }
        }
    }
    basic.then_some(Challenge::Basic)
}

/// A token server's answer. Docker's servers say `token`, OAuth2 ones `access_token`.
#[derive(Deserialize)]
pub(crate) struct TokenResponse {
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub access_token: Option<String>,
    #[serde(default)]
    pub expires_in: Option<u64>,
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
                .unwrap_err();
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
            .unwrap_err();
        assert!(err.contains("config.json"), "{err}");
        write(
            &dir.path().join("config.json"),
            r#"{"auths": {"ghcr.io": {"auth": "!!!not-base64"}}}"#,
        );
        let err = resolver(dir.path(), &[], None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err();
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
        }];
        let err = resolver(dir.path(), &registries, None)
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err();
        assert!(
            err.contains("TAGPILOT_TEST_VARIABLE_THAT_IS_NEVER_SET"),
            "{err}"
        );
    }

    /// Writes an executable `docker-credential-<name>` that answers like a real helper: it checks
    /// the server URL it reads on stdin and prints `{Username, Secret}`, or "not found".
    fn fake_helper(dir: &Path, name: &str, server_url: &str, user: &str, secret: &str) {
        let path = dir.join(format!("docker-credential-{name}"));
        write_executable(
            &path,
            &format!(
                "#!/bin/sh\n[ \"$1\" = get ] || exit 3\nread -r url\n\
                 if [ \"$url\" = '{server_url}' ]; then\n  printf '%s' '{{\"ServerURL\":\"{server_url}\",\"Username\":\"{user}\",\"Secret\":\"{secret}\"}}'\n\
                 else\n  echo 'credentials not found in native keychain'; exit 1\nfi\n"
            ),
        );
    }

    /// Writes a script through a child process. Written from this process, the script could
    /// fail to start with "Text file busy" (ETXTBSY): a test on another thread forking at that
    /// moment holds our write descriptor until its child execs.
    fn write_executable(path: &Path, text: &str) {
        let status = std::process::Command::new("sh")
            .args([
                "-c",
                "printf '%s' \"$1\" > \"$2\" && chmod 755 \"$2\"",
                "sh",
                text,
            ])
            .arg(path)
            .status()
            .unwrap();
        assert!(status.success(), "writing {}", path.display());
    }

    #[tokio::test]
    async fn cred_helpers_run_the_named_program_with_the_server_url_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        fake_helper(
            &bin,
            "fake",
            "127.0.0.1:5000",
            "helper-user",
            "helper-secret",
        );
        write(
            &dir.path().join("config.json"),
            r#"{"credHelpers": {"127.0.0.1:5000": "fake"}}"#,
        );
        let r = resolver(dir.path(), &[], Some(&bin));
        let cred = r
            .resolve("127.0.0.1:5000", "127.0.0.1:5000")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (cred.username.as_str(), cred.password()),
            ("helper-user", "helper-secret")
        );
        assert_eq!(cred.source, "docker-credential-fake");
        // Not configured for this host: the helper is not consulted.
        assert_eq!(
            r.resolve("127.0.0.1:6000", "127.0.0.1:6000").await.unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn creds_store_falls_back_to_auths_when_the_helper_has_no_entry() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        fake_helper(
            &bin,
            "store",
            crate::image::DOCKER_HUB_AUTH_KEY,
            "hub-user",
            "hub-secret",
        );
        write(
            &dir.path().join("config.json"),
            &format!(
                r#"{{"credsStore": "store", "auths": {{"ghcr.io": {{"auth": "{}"}}}}}}"#,
                b64("gh:pw")
            ),
        );
        let r = resolver(dir.path(), &[], Some(&bin));
        let hub = r
            .resolve(DOCKER_HUB, crate::image::DOCKER_HUB_AUTH_KEY)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(hub.username, "hub-user");
        let gh = r.resolve("ghcr.io", "ghcr.io").await.unwrap().unwrap();
        assert_eq!(gh.username, "gh");
    }

    #[tokio::test]
    async fn a_missing_helper_program_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        write(
            &dir.path().join("config.json"),
            r#"{"credsStore": "nowhere"}"#,
        );
        let err = resolver(dir.path(), &[], Some(dir.path()))
            .resolve("ghcr.io", "ghcr.io")
            .await
            .unwrap_err();
        assert!(err.contains("docker-credential-nowhere"), "{err}");
    }

    #[test]
    fn credential_debug_hides_the_password() {
        let c = Credential::new("bot", "hunter2", "tagpilot.yaml");
        assert!(!format!("{c:?}").contains("hunter2"));
    }

    #[test]
    fn bearer_challenge_wins_and_keeps_realm_and_service() {
        let got = parse_challenge(
            [r#"Basic realm="x""#, r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull""#]
                .into_iter(),
        );
        assert_eq!(
            got,
            Some(Challenge::Bearer {
                realm: "https://auth.example.com/token".into(),
                service: Some("registry.example.com".into())
            })
        );
        assert_eq!(
            parse_challenge([r#"Basic realm="Registry Realm""#].into_iter()),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge(["Negotiate"].into_iter()), None);
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
