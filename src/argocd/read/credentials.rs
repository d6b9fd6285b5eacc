//! Argo CD's Secrets as credentials: the registry credentials a `pull-secret` annotation names
//! (`pullsecret:`, `secret:…#field`, `env:`), and the git credentials of `write-back-method:
//! git:secret:…` and `git:repocreds` (Argo CD's repository Secrets, matched by URL as Argo CD
//! matches them).
//!
//! Why it exists: teams running Image Updater keep their credentials in Secrets; tagpilot must
//! find them where Image Updater does and hand them to the existing registry client and
//! repository config (in memory), never to a parallel path.
//!
//! What it must never do: put a Secret's value in a log line, an error or a report (only the
//! Secret's `namespace/name` and field names are shown).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;

use crate::config::repository::{AuthConfig, AuthMethod};
use crate::git::RepositoryConfig;
use crate::image::Repository;
use crate::registry::{Credential, auth::docker_config_json_credential};

use super::settings::{AppSettings, CosignKeyError, GitCredentials, PullSecret};
use crate::kubernetes::{Cluster, KubeError, SECRET_TYPE_LABEL};

/// Why a Secret (or an environment variable) gave no usable credential. Never holds the value.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// Shared: one Secret read once may fail several images.
    #[error(transparent)]
    Kube(Arc<KubeError>),
    /// `secret` is `Secret argocd/regcred`.
    #[error("{secret} has no .dockerconfigjson field")]
    NoDockerConfig { secret: String },
    /// The registry client's reading of `.dockerconfigjson`; it never quotes the text.
    #[error(transparent)]
    DockerConfig(#[from] crate::registry::auth::CredentialError),
    #[error("{secret} holds no credentials for registry {registry}")]
    NoRegistryCredentials { secret: String, registry: String },
    #[error("{secret} has no field {field:?}")]
    NoField { secret: String, field: String },
    #[error("environment variable {0} is not set")]
    EnvUnset(String),
    #[error("credential scripts are not run")]
    ScriptNotRun,
    /// `origin` is `field "creds" of Secret a/b` or `environment variable X`.
    #[error("{origin} does not hold user:password")]
    NotUserPassword { origin: String },
    /// `url` is redacted.
    #[error("no Argo CD repository Secret in {namespace} matches {url}")]
    NoRepositorySecret { namespace: String, url: String },
    #[error("cannot store the SSH key of {secret}")]
    StoreKey {
        secret: String,
        #[source]
        source: std::io::Error,
    },
    /// Argo CD's SSH host keys ConfigMap could not be read.
    #[error("SSH host keys")]
    KnownHostsUnread(#[source] KubeError),
    #[error("SSH host keys from ConfigMap {namespace}/{KNOWN_HOSTS_CONFIG_MAP} cannot be stored")]
    StoreKnownHosts {
        namespace: String,
        #[source]
        source: std::io::Error,
    },
    /// `what` is `sshPrivateKey` or `password`; `url` is redacted.
    #[error("{secret} has no {what} for {url}")]
    NoGitCredential {
        secret: String,
        what: &'static str,
        url: String,
    },
}

/// Registry credentials from pull secrets, by registry host, and the pull secrets that could
/// not be used, each naming the application and the Secret.
pub async fn pull_secrets(
    cluster: &Cluster,
    apps: &[(String, &AppSettings)],
) -> (HashMap<String, Credential>, Vec<String>) {
    let mut secrets = SecretCache::default();
    registry_credentials(cluster, apps, &mut secrets, &|v| std::env::var(v).ok()).await
}

/// The cosign public keys `imagesVerification.cosignKey` names (issue 22), by (namespace,
/// Secret, key): the PEM, or why it cannot be used (the image is then not updated).
pub type CosignKeys = HashMap<(String, String, String), Result<Vec<u8>, CosignKeyError>>;

/// Reads the cosign keys the Applications' configurations name, each Secret once.
pub async fn cosign_keys(cluster: &Cluster, apps: &[(String, &AppSettings)]) -> CosignKeys {
    let mut secrets = SecretCache::default();
    let mut out = CosignKeys::new();
    for image in apps.iter().flat_map(|(_, a)| &a.images) {
        let Some(k) = &image.cosign_key else {
            continue;
        };
        let id = (k.namespace.clone(), k.secret.clone(), k.key.clone());
        if out.contains_key(&id) {
            continue;
        }
        let got = match secrets.read(cluster, &k.namespace, &k.secret).await {
            Err(e) => Err(CosignKeyError::Secret(e)),
            Ok(secret) => match field(secret, &k.key) {
                None => Err(CosignKeyError::NoKey(k.key.clone())),
                Some(pem) => crate::config::signatures::check_key(pem.as_bytes(), "its value")
                    .map(|()| pem.into_bytes())
                    .map_err(|e| CosignKeyError::NotAKey(Arc::new(e))),
            },
        };
        out.insert(id, got);
    }
    out
}

/// Secrets read once per run, by `namespace/name`.
#[derive(Default)]
struct SecretCache {
    read: HashMap<(String, String), Result<Secret, Arc<KubeError>>>,
}

impl SecretCache {
    async fn get(
        &mut self,
        cluster: &Cluster,
        ns: &str,
        name: &str,
    ) -> Result<&Secret, CredentialError> {
        self.read(cluster, ns, name)
            .await
            .map_err(CredentialError::Kube)
    }

    /// The Secret, or the cluster client's reason, shared by every image that names it.
    async fn read(
        &mut self,
        cluster: &Cluster,
        ns: &str,
        name: &str,
    ) -> Result<&Secret, Arc<KubeError>> {
        let key = (ns.to_string(), name.to_string());
        if !self.read.contains_key(&key) {
            let got = cluster.secret(ns, name).await.map_err(Arc::new);
            self.read.insert(key.clone(), got);
        }
        self.read[&key].as_ref().map_err(Arc::clone)
    }
}

/// The registry credential each annotated image's `pull-secret` gives, by registry host.
/// Registry credentials are per host in tagpilot, so two applications giving different
/// credentials for one host is reported, and the first is used.
async fn registry_credentials(
    cluster: &Cluster,
    apps: &[(String, &AppSettings)],
    secrets: &mut SecretCache,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> (HashMap<String, Credential>, Vec<String>) {
    let mut out: HashMap<String, (Credential, String)> = HashMap::new();
    let mut problems = Vec::new();
    for (app, a) in apps {
        for image in &a.images {
            let Some(how) = &image.pull_secret else {
                continue;
            };
            let shown = describe_pull_secret(how);
            let got = pull_secret_credential(cluster, how, &image.repository, secrets, env).await;
            let problem = |m: String| format!("application {app}: {}: {m}", image.alias);
            match got {
                Ok(credential) => match out.get(&image.repository.registry) {
                    Some((have, from)) if *have != credential => problems.push(problem(format!(
                        "pull-secret {shown} differs from {from}, which already gave credentials for registry {}; using {from}",
                        image.repository.registry
                    ))),
                    Some(_) => {}
                    None => {
                        out.insert(image.repository.registry.clone(), (credential, shown));
                    }
                },
                Err(m) => problems.push(problem(format!("pull-secret {shown}: {}", crate::error_chain::chain(&m)))),
            }
        }
    }
    let credentials = out.into_iter().map(|(h, (c, _))| (h, c)).collect();
    (credentials, problems)
}

/// How a pull secret is named in messages: the annotation's value without `#field`'s content
/// being a secret, it is safe to show whole.
fn describe_pull_secret(how: &PullSecret) -> String {
    match how {
        PullSecret::PullSecret { namespace, name } => format!("pullsecret:{namespace}/{name}"),
        PullSecret::Secret {
            namespace,
            name,
            field,
        } => format!("secret:{namespace}/{name}#{field}"),
        PullSecret::Env(var) => format!("env:{var}"),
        PullSecret::Ext(script) => format!("ext:{script}"),
    }
}

async fn pull_secret_credential(
    cluster: &Cluster,
    how: &PullSecret,
    repository: &Repository,
    secrets: &mut SecretCache,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> Result<Credential, CredentialError> {
    match how {
        PullSecret::PullSecret { namespace, name } => {
            let secret = secrets.get(cluster, namespace, name).await?;
            let source = format!("Secret {namespace}/{name}");
            let text = field(secret, ".dockerconfigjson").ok_or_else(|| {
                CredentialError::NoDockerConfig {
                    secret: source.clone(),
                }
            })?;
            docker_config_json_credential(&text, repository, &source)
                .map_err(CredentialError::DockerConfig)?
                .ok_or_else(|| CredentialError::NoRegistryCredentials {
                    secret: source,
                    registry: repository.registry.clone(),
                })
        }
        PullSecret::Secret {
            namespace,
            name,
            field: key,
        } => {
            let secret = secrets.get(cluster, namespace, name).await?;
            let source = format!("Secret {namespace}/{name}");
            let text = field(secret, key).ok_or_else(|| CredentialError::NoField {
                secret: source.clone(),
                field: key.clone(),
            })?;
            user_password(&text, &format!("field {key:?} of {source}"))
        }
        PullSecret::Env(var) => {
            let text = env(var).ok_or_else(|| CredentialError::EnvUnset(var.clone()))?;
            user_password(&text, &format!("environment variable {var}"))
        }
        PullSecret::Ext(_) => Err(CredentialError::ScriptNotRun),
    }
}

/// `user:password` → a credential; the message never repeats the text.
fn user_password(text: &str, source: &str) -> Result<Credential, CredentialError> {
    match text.trim_end_matches(['\r', '\n']).split_once(':') {
        Some((user, password)) if !user.is_empty() => {
            Ok(Credential::new(user, password, source.to_string()))
        }
        _ => Err(CredentialError::NotUserPassword {
            origin: source.to_string(),
        }),
    }
}

/// Git credentials read from an Argo CD repository Secret. Held in memory; `Debug` shows only
/// where they came from and which fields are set.
#[derive(Clone, PartialEq, Eq)]
pub struct GitSecret {
    /// `Secret argocd/repo-x`.
    pub source: String,
    pub username: Option<String>,
    password: Option<String>,
    ssh_private_key: Option<String>,
}

impl fmt::Debug for GitSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GitSecret")
            .field("source", &self.source)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field(
                "ssh_private_key",
                &self.ssh_private_key.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl GitSecret {
    fn from_secret(secret: &Secret) -> GitSecret {
        let get = |k: &str| field(secret, k).filter(|v| !v.is_empty());
        GitSecret {
            source: format!("Secret {}", secret_id(secret)),
            username: get("username"),
            password: get("password"),
            ssh_private_key: get("sshPrivateKey"),
        }
    }
}

/// The Argo CD repository Secret for `url`: a `repository` Secret with that exact URL
/// (compared as [`crate::affected::normalise_url`] does), else the `repo-creds` Secret whose URL
/// is the longest prefix of `url`, as Argo CD picks them. `secrets` are (type, url, index).
pub fn match_repository_secret(url: &str, secrets: &[(String, String, usize)]) -> Option<usize> {
    let wanted = crate::affected::normalise_url(url);
    if let Some((_, _, i)) = secrets
        .iter()
        .find(|(t, u, _)| t == "repository" && crate::affected::normalise_url(u) == wanted)
    {
        return Some(*i);
    }
    secrets
        .iter()
        .filter(|(t, u, _)| t == "repo-creds" && !u.is_empty() && url.starts_with(u.as_str()))
        .max_by_key(|(_, u, _)| u.len())
        .map(|(_, _, i)| *i)
}

/// One repository a cluster Application writes with `write-back-method: git:secret:…` or
/// `git:repocreds`, as the resolved Applications name it: the credentials come from Argo CD's
/// Secrets ([`git_credentials`]).
pub struct GitWrite<'a> {
    /// The Application asking (`namespace/name`), for problems.
    pub application: String,
    pub how: &'a GitCredentials,
    pub repository: &'a RepositoryConfig,
}

/// Reads the credentials Argo CD's Secrets give each repository of `writes` (in order: the
/// first Application whose Secret gives a credential wins a repository). A repository
/// configured in `tagpilot.yaml` with its own `auth`, or on `file://`, keeps it and is not
/// returned. SSH keys go into private files in `keys` (the git writer reads keys from files);
/// they live as long as `keys` does. Returns each repository's auth with the credentials, by
/// repository name, for the caller to store; and the problems, each naming the application
/// and the Secret.
pub async fn git_credentials(
    cluster: &Cluster,
    argocd_namespace: &str,
    writes: &[GitWrite<'_>],
    keys: &Path,
) -> (Vec<(String, AuthConfig)>, Vec<String>) {
    let mut problems = Vec::new();
    let mut secrets = SecretCache::default();
    let mut repo_secrets: Option<Result<Vec<Secret>, Arc<KubeError>>> = None;
    let mut given: BTreeMap<&str, (&RepositoryConfig, GitSecret)> = BTreeMap::new();
    for write in writes {
        let repo = write.repository;
        if given.contains_key(repo.name.as_str()) {
            continue;
        }
        if !matches!(repo.auth.method(), Ok(AuthMethod::None)) || repo.url.starts_with("file://") {
            continue;
        }
        let problem = |m: String| format!("application {}: {m}", write.application);
        let found = match write.how {
            GitCredentials::Configured => continue,
            GitCredentials::Secret { namespace, name } => secrets
                .get(cluster, namespace, name)
                .await
                .map(GitSecret::from_secret),
            GitCredentials::RepoCreds => {
                if repo_secrets.is_none() {
                    repo_secrets = Some(
                        cluster
                            .repository_secrets(argocd_namespace)
                            .await
                            .map_err(Arc::new),
                    );
                }
                match repo_secrets.as_ref().expect("just read") {
                    Err(e) => Err(CredentialError::Kube(e.clone())),
                    Ok(list) => repository_secret(list, &repo.url, argocd_namespace),
                }
            }
        };
        match found {
            Ok(secret) => {
                given.insert(&repo.name, (repo, secret));
            }
            Err(m) => problems.push(problem(format!(
                "write-back-method git: {}",
                crate::error_chain::chain(&m)
            ))),
        }
    }
    // Host keys for SSH come from Argo CD's own ConfigMap, as Argo CD checks them; read once.
    let mut known_hosts: Option<Option<std::path::PathBuf>> = None;
    let mut out = Vec::new();
    for (name, (repo, secret)) in given {
        let mut auth = repo.auth.clone();
        if let Err(m) = use_git_secret(&repo.url, &mut auth, &secret, keys) {
            problems.push(format!(
                "repository {name}: {}",
                crate::error_chain::chain(&m)
            ));
            continue;
        }
        if auth.ssh_key_file.is_some() && auth.known_hosts_file.is_none() {
            if known_hosts.is_none() {
                known_hosts = Some(
                    match argocd_known_hosts(cluster, argocd_namespace, keys).await {
                        Ok(file) => file,
                        Err(m) => {
                            problems.push(crate::error_chain::chain(&m));
                            None
                        }
                    },
                );
            }
            auth.known_hosts_file = known_hosts.clone().flatten();
        }
        out.push((name.to_string(), auth));
    }
    (out, problems)
}

/// The repository Secret of `list` for `url` ([`match_repository_secret`]).
fn repository_secret(
    list: &[Secret],
    url: &str,
    argocd_namespace: &str,
) -> Result<GitSecret, CredentialError> {
    let keyed: Vec<(String, String, usize)> = list
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let kind = s
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SECRET_TYPE_LABEL))
                .cloned()
                .unwrap_or_default();
            (kind, field(s, "url").unwrap_or_default(), i)
        })
        .collect();
    match match_repository_secret(url, &keyed) {
        Some(i) => Ok(GitSecret::from_secret(&list[i])),
        None => Err(CredentialError::NoRepositorySecret {
            namespace: argocd_namespace.to_string(),
            url: crate::git::auth::redact_url(url),
        }),
    }
}

/// Argo CD's SSH host keys (`ssh_known_hosts` of the `argocd-ssh-known-hosts-cm` ConfigMap in
/// its namespace) in a file under `keys`; `None` when there is no such ConfigMap, and then
/// `~/.ssh/known_hosts` is used as for any repository.
async fn argocd_known_hosts(
    cluster: &Cluster,
    namespace: &str,
    keys: &Path,
) -> Result<Option<std::path::PathBuf>, CredentialError> {
    let data = cluster
        .config_map_data(namespace, KNOWN_HOSTS_CONFIG_MAP)
        .await
        .map_err(CredentialError::KnownHostsUnread)?;
    let Some(text) = data.and_then(|mut d| d.remove("ssh_known_hosts")) else {
        return Ok(None);
    };
    let file = keys.join("argocd_known_hosts");
    std::fs::write(&file, text).map_err(|source| CredentialError::StoreKnownHosts {
        namespace: namespace.to_string(),
        source,
    })?;
    Ok(Some(file))
}

/// The ConfigMap in which Argo CD keeps the SSH host keys it trusts.
pub const KNOWN_HOSTS_CONFIG_MAP: &str = "argocd-ssh-known-hosts-cm";

/// Points `repo`'s auth at `secret`. The git writer takes SSH keys from files and HTTPS
/// passwords only from environment variables, so an SSH key is written to a private file under
/// `keys`; an HTTPS password from a Secret cannot be handed over yet and is reported.
fn use_git_secret(
    url: &str,
    auth: &mut AuthConfig,
    secret: &GitSecret,
    keys: &Path,
) -> Result<(), CredentialError> {
    let ssh = url.starts_with("ssh://") || !url.contains("://");
    match (&secret.ssh_private_key, &secret.password) {
        (Some(key), _) if ssh => {
            let file = keys.join(format!("key-{}", fastrand::u64(..)));
            write_private(&file, key).map_err(|source| CredentialError::StoreKey {
                secret: secret.source.clone(),
                source,
            })?;
            auth.ssh_key_file = Some(file);
            Ok(())
        }
        (_, Some(password)) if !ssh => {
            // Kept in memory only; `ProvidedToken` never prints its value.
            auth.provided_username = secret.username.clone();
            auth.provided_token = Some(crate::git::ProvidedToken::new(password.as_str()));
            Ok(())
        }
        _ => Err(CredentialError::NoGitCredential {
            secret: secret.source.clone(),
            what: if ssh { "sshPrivateKey" } else { "password" },
            url: crate::git::auth::redact_url(url),
        }),
    }
}

fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        f.write_all(b"\n")?;
    }
    Ok(())
}

/// A Secret field's text, from `data` (base64, decoded by k8s-openapi) or `stringData`.
fn field(secret: &Secret, key: &str) -> Option<String> {
    crate::kubernetes::secret_value(secret, key)
}

fn secret_id(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(list: &[(&str, &str)]) -> Vec<(String, String, usize)> {
        list.iter()
            .enumerate()
            .map(|(i, (t, u))| (t.to_string(), u.to_string(), i))
            .collect()
    }

    #[test]
    fn repository_secrets_exact_url_first_then_the_longest_creds_prefix() {
        let s = keyed(&[
            ("repo-creds", "https://git.example/"),
            ("repo-creds", "https://git.example/team/"),
            ("repository", "https://git.example/team/other.git"),
            ("repository", "https://GIT.example/team/m.git"),
        ]);
        assert_eq!(
            match_repository_secret("https://git.example/team/m", &s),
            Some(3)
        );
        assert_eq!(
            match_repository_secret("https://git.example/team/x.git", &s),
            Some(1)
        );
        assert_eq!(
            match_repository_secret("https://git.example/y.git", &s),
            Some(0)
        );
        assert_eq!(match_repository_secret("https://elsewhere/y.git", &s), None);
    }

    #[test]
    fn user_password_never_repeats_the_text() {
        let c = user_password("bot:s3cret\n", "field \"creds\" of Secret a/b").unwrap();
        assert_eq!(c.username, "bot");
        assert_eq!(c.password(), "s3cret");
        let e = user_password("s3cret-without-user", "env X")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cret"), "{e}");
    }

    #[test]
    fn git_secret_debug_is_redacted() {
        let s = GitSecret {
            source: "Secret argocd/repo".into(),
            username: Some("bot".into()),
            password: Some("hunter2".into()),
            ssh_private_key: Some("-----BEGIN".into()),
        };
        let shown = format!("{s:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("BEGIN"),
            "{shown}"
        );
    }

    #[test]
    fn ssh_keys_go_to_private_files_and_https_passwords_stay_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let mut repo: RepositoryConfig =
            serde_saphyr::from_str("name: m\nurl: git@git.example:team/m.git\n").unwrap();
        let s = GitSecret {
            source: "Secret argocd/repo".into(),
            username: None,
            password: None,
            ssh_private_key: Some("KEY".into()),
        };
        use_git_secret(&repo.url, &mut repo.auth, &s, dir.path()).unwrap();
        let file = repo.auth.ssh_key_file.clone().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "KEY\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let mut repo: RepositoryConfig =
            serde_saphyr::from_str("name: m\nurl: https://git.example/team/m.git\n").unwrap();
        let s = GitSecret {
            username: Some("argo".into()),
            password: Some("hunter2".into()),
            ..s
        };
        let keys_before = std::fs::read_dir(dir.path()).unwrap().count();
        use_git_secret(&repo.url, &mut repo.auth, &s, dir.path()).unwrap();
        assert_eq!(
            repo.auth.method().unwrap(),
            AuthMethod::Provided {
                username: "argo".into(),
                secret: crate::git::ProvidedToken::new("hunter2"),
            }
        );
        assert!(
            !format!("{:?}", repo.auth).contains("hunter2"),
            "Debug shows the password"
        );
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            keys_before,
            "written to disk"
        );
    }
}
