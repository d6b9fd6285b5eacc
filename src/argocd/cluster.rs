//! The Kubernetes edge of the Argo CD module: Applications read live (`applications.fromCluster`),
//! credentials read from Secrets (`pull-secret`, `git:secret:`, `git:repocreds`), and
//! `write-back-method: argocd` patches of an Application's parameter overrides.
//!
//! Why it exists: teams running Image Updater keep their annotations on the live Applications
//! and their credentials in Secrets; tagpilot must find both where Image Updater does. The
//! credentials are handed to the existing registry client and repository config (in memory),
//! never to a parallel path.
//!
//! What it must never do: put a Secret's value in a log line, an error or a report (only the
//! Secret's `namespace/name` and field names are shown); patch anything in plan mode; send more
//! than a JSON merge patch of the parameter overrides it decided (the rest of the Application is
//! Argo CD's).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::json;

use crate::git::RepositoryConfig;
use crate::git::config::AuthMethod;
use crate::image::Repository;
use crate::plan::{Change, Problem};
use crate::registry::{Credential, Registry, auth::docker_config_json_credential};

use super::ArgoError;
use super::annotations::{self, GitCredentials, PullSecret, WriteBackMethod};
use super::application::{Application, HelmParameter};
use super::config::FromCluster;
use super::planner::{Decided, ImageOutcome, OverrideFile, OverrideParameter, decide};
use super::resolve::{Origin, Resolved, SourceKind};

/// The label Argo CD puts on its repository Secrets.
pub const SECRET_TYPE_LABEL: &str = "argocd.argoproj.io/secret-type";
/// The field manager tagpilot's patches are recorded under.
pub const FIELD_MANAGER: &str = "tagpilot";

// === the client ===

/// A connection to the Kubernetes API.
#[derive(Clone)]
pub struct Cluster {
    client: kube::Client,
}

impl Cluster {
    /// Connects as kube-rs does by default: `$KUBECONFIG` or `~/.kube/config`, else the
    /// in-cluster service account.
    pub async fn connect() -> Result<Cluster, ArgoError> {
        kube::Client::try_default()
            .await
            .map(Cluster::new)
            .map_err(|e| {
                ArgoError::Kube(format!(
                    "applications.fromCluster: no usable kubeconfig or in-cluster configuration: {e}"
                ))
            })
    }

    /// A cluster reached through `client` (tests build one against a local URL).
    pub fn new(client: kube::Client) -> Cluster {
        Cluster { client }
    }

    fn applications_api(&self, namespace: Option<&str>) -> Api<DynamicObject> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("argoproj.io", "v1alpha1", "Application"),
            "applications",
        );
        match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        }
    }

    /// The Applications `from` selects: in each of its namespaces, or across all namespaces
    /// when it names none, filtered by its label selector.
    pub async fn applications(&self, from: &FromCluster) -> Result<Vec<Application>, ArgoError> {
        let mut params = ListParams::default();
        if let Some(selector) = from.selector.as_deref().filter(|s| !s.trim().is_empty()) {
            params = params.labels(selector);
        }
        let namespaces: Vec<Option<&str>> = if from.namespaces.is_empty() {
            vec![None]
        } else {
            from.namespaces.iter().map(|n| Some(n.as_str())).collect()
        };
        let mut apps = Vec::new();
        for ns in namespaces {
            let where_ = match ns {
                Some(ns) => format!("namespace {ns}"),
                None => "all namespaces".to_string(),
            };
            let list =
                self.applications_api(ns).list(&params).await.map_err(|e| {
                    ArgoError::Kube(format!("listing Applications in {where_}: {e}"))
                })?;
            for object in list.items {
                let id = format!(
                    "{}/{}",
                    object.metadata.namespace.as_deref().unwrap_or_default(),
                    object.metadata.name.as_deref().unwrap_or_default()
                );
                let value = serde_json::to_value(&object).expect("a listed object serialises");
                let mut app: Application = serde_json::from_value(value).map_err(|e| {
                    ArgoError::Kube(format!("Application {id} cannot be read: {e}"))
                })?;
                app.origin = "cluster".to_string();
                apps.push(app);
            }
        }
        apps.sort_by_key(Application::id);
        Ok(apps)
    }

    async fn secret(&self, namespace: &str, name: &str) -> Result<Secret, String> {
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .get(name)
            .await
            .map_err(|e| format!("cannot read Secret {namespace}/{name}: {e}"))
    }

    /// Argo CD's repository Secrets in its namespace (`repository` and `repo-creds`).
    async fn repository_secrets(&self, namespace: &str) -> Result<Vec<Secret>, String> {
        let params = ListParams::default()
            .labels(&format!("{SECRET_TYPE_LABEL} in (repository,repo-creds)"));
        Api::<Secret>::namespaced(self.client.clone(), namespace)
            .list(&params)
            .await
            .map(|l| l.items)
            .map_err(|e| format!("cannot list Argo CD repository Secrets in {namespace}: {e}"))
    }

    /// Sends `patch` as a JSON merge patch to the Application `namespace/name`.
    pub async fn patch_application(
        &self,
        namespace: &str,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<(), ArgoError> {
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        self.applications_api(Some(namespace))
            .patch(name, &params, &Patch::Merge(patch))
            .await
            .map(drop)
            .map_err(|e| ArgoError::Kube(format!("patching Application {namespace}/{name}: {e}")))
    }
}

/// A Secret field's text, from `data` (base64, decoded by k8s-openapi) or `stringData`.
fn field(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .cloned()
        })
}

fn secret_id(secret: &Secret) -> String {
    format!(
        "{}/{}",
        secret.metadata.namespace.as_deref().unwrap_or_default(),
        secret.metadata.name.as_deref().unwrap_or_default()
    )
}

// === what is read before planning ===

/// Everything read from the cluster before planning: the Applications and the registry
/// credentials their `pull-secret`s name.
pub struct Loaded {
    pub cluster: Cluster,
    /// Argo CD's own namespace, where its repository Secrets live.
    pub argocd_namespace: String,
    pub apps: Vec<Application>,
    /// By registry host, for [`crate::registry::ClientOptions::credentials`].
    pub registry_credentials: HashMap<String, Credential>,
    /// Pull secrets that could not be used, each naming the application and the Secret.
    pub problems: Vec<String>,
}

/// Lists the Applications `from` selects and reads the pull secrets their annotations name.
pub async fn load(cluster: Cluster, from: &FromCluster) -> Result<Loaded, ArgoError> {
    let apps = cluster.applications(from).await?;
    let mut secrets = SecretCache::default();
    let (registry_credentials, problems) =
        registry_credentials(&cluster, &apps, &mut secrets, &|v| std::env::var(v).ok()).await;
    Ok(Loaded {
        cluster,
        argocd_namespace: from.argocd_namespace().to_string(),
        apps,
        registry_credentials,
        problems,
    })
}

/// Secrets read once per run, by `namespace/name`.
#[derive(Default)]
struct SecretCache {
    read: HashMap<(String, String), Result<Secret, String>>,
}

impl SecretCache {
    async fn get(&mut self, cluster: &Cluster, ns: &str, name: &str) -> Result<&Secret, String> {
        let key = (ns.to_string(), name.to_string());
        if !self.read.contains_key(&key) {
            let got = cluster.secret(ns, name).await;
            self.read.insert(key.clone(), got);
        }
        self.read[&key].as_ref().map_err(Clone::clone)
    }
}

/// The registry credential each annotated image's `pull-secret` gives, by registry host.
/// Registry credentials are per host in tagpilot, so two applications giving different
/// credentials for one host is reported, and the first is used.
async fn registry_credentials(
    cluster: &Cluster,
    apps: &[Application],
    secrets: &mut SecretCache,
    env: &dyn Fn(&str) -> Option<String>,
) -> (HashMap<String, Credential>, Vec<String>) {
    let mut out: HashMap<String, (Credential, String)> = HashMap::new();
    let mut problems = Vec::new();
    for app in apps {
        let Some(a) = annotations::parse(&app.metadata.annotations) else {
            continue;
        };
        for image in &a.images {
            let Some(how) = &image.pull_secret else {
                continue;
            };
            let shown = describe_pull_secret(how);
            let got = pull_secret_credential(cluster, how, &image.repository, secrets, env).await;
            let problem = |m: String| format!("application {}: {}: {m}", app.id(), image.alias);
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
                Err(m) => problems.push(problem(format!("pull-secret {shown}: {m}"))),
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
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Credential, String> {
    match how {
        PullSecret::PullSecret { namespace, name } => {
            let secret = secrets.get(cluster, namespace, name).await?;
            let source = format!("Secret {namespace}/{name}");
            let text = field(secret, ".dockerconfigjson")
                .ok_or_else(|| format!("{source} has no .dockerconfigjson field"))?;
            docker_config_json_credential(&text, repository, &source)?.ok_or_else(|| {
                format!(
                    "{source} holds no credentials for registry {}",
                    repository.registry
                )
            })
        }
        PullSecret::Secret {
            namespace,
            name,
            field: key,
        } => {
            let secret = secrets.get(cluster, namespace, name).await?;
            let source = format!("Secret {namespace}/{name}");
            let text =
                field(secret, key).ok_or_else(|| format!("{source} has no field {key:?}"))?;
            user_password(&text, &format!("field {key:?} of {source}"))
        }
        PullSecret::Env(var) => {
            let text = env(var).ok_or_else(|| format!("environment variable {var} is not set"))?;
            user_password(&text, &format!("environment variable {var}"))
        }
        PullSecret::Ext(_) => Err("credential scripts are not run".to_string()),
    }
}

/// `user:password` → a credential; the message never repeats the text.
fn user_password(text: &str, source: &str) -> Result<Credential, String> {
    match text.trim_end_matches(['\r', '\n']).split_once(':') {
        Some((user, password)) if !user.is_empty() => {
            Ok(Credential::new(user, password, source.to_string()))
        }
        _ => Err(format!("{source} does not hold user:password")),
    }
}

// === git credentials ===

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
/// (compared as [`super::resolve::normalise_url`] does), else the `repo-creds` Secret whose URL
/// is the longest prefix of `url`, as Argo CD picks them. `secrets` are (type, url, index).
pub fn match_repository_secret(url: &str, secrets: &[(String, String, usize)]) -> Option<usize> {
    let wanted = super::resolve::normalise_url(url);
    if let Some((_, _, i)) = secrets
        .iter()
        .find(|(t, u, _)| t == "repository" && super::resolve::normalise_url(u) == wanted)
    {
        return Some(*i);
    }
    secrets
        .iter()
        .filter(|(t, u, _)| t == "repo-creds" && !u.is_empty() && url.starts_with(u.as_str()))
        .max_by_key(|(_, u, _)| u.len())
        .map(|(_, _, i)| *i)
}

/// Gives each repository that a cluster Application writes with `git:secret:` or
/// `git:repocreds` the credentials from Argo CD's Secrets. A repository configured in
/// `tagpilot.yaml` with its own `auth` keeps it. SSH keys go into private files in `keys` (the
/// git writer reads keys from files); they live as long as `keys` does. Returns problems, each
/// naming the application and the Secret.
pub async fn git_credentials(loaded: &Loaded, resolved: &mut Resolved, keys: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut secrets = SecretCache::default();
    let mut repo_secrets: Option<Result<Vec<Secret>, String>> = None;
    let mut given: BTreeMap<String, GitSecret> = BTreeMap::new();
    for managed in &resolved.apps {
        if managed.origin != Origin::Cluster {
            continue;
        }
        let WriteBackMethod::Git(how) = &managed.annotations.write_back else {
            continue;
        };
        for unit in &managed.units {
            if given.contains_key(&unit.repository) {
                continue;
            }
            let Some(repo) = resolved
                .repositories
                .iter()
                .find(|r| r.name == unit.repository)
            else {
                continue;
            };
            if !matches!(repo.auth.method(), Ok(AuthMethod::None))
                || repo.url.starts_with("file://")
            {
                continue;
            }
            let problem = |m: String| format!("application {}: {m}", managed.app.id());
            let found = match how {
                GitCredentials::Configured => continue,
                GitCredentials::Secret { namespace, name } => secrets
                    .get(&loaded.cluster, namespace, name)
                    .await
                    .map(GitSecret::from_secret),
                GitCredentials::RepoCreds => {
                    if repo_secrets.is_none() {
                        repo_secrets = Some(
                            loaded
                                .cluster
                                .repository_secrets(&loaded.argocd_namespace)
                                .await,
                        );
                    }
                    match repo_secrets.as_ref().expect("just read") {
                        Err(m) => Err(m.clone()),
                        Ok(list) => {
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
                            match match_repository_secret(&repo.url, &keyed) {
                                Some(i) => Ok(GitSecret::from_secret(&list[i])),
                                None => Err(format!(
                                    "no Argo CD repository Secret in {} matches {}",
                                    loaded.argocd_namespace,
                                    crate::git::auth::redact_url(&repo.url)
                                )),
                            }
                        }
                    }
                }
            };
            match found {
                Ok(secret) => {
                    given.insert(unit.repository.clone(), secret);
                }
                Err(m) => problems.push(problem(format!("write-back-method git: {m}"))),
            }
        }
    }
    for (name, secret) in given {
        let Some(repo) = resolved.repositories.iter_mut().find(|r| r.name == name) else {
            continue;
        };
        if let Err(m) = use_git_secret(repo, &secret, keys) {
            problems.push(format!("repository {name}: {m}"));
        }
    }
    problems
}

/// Points `repo`'s auth at `secret`. The git writer takes SSH keys from files and HTTPS
/// passwords only from environment variables, so an SSH key is written to a private file under
/// `keys`; an HTTPS password from a Secret cannot be handed over yet and is reported.
fn use_git_secret(
    repo: &mut RepositoryConfig,
    secret: &GitSecret,
    keys: &Path,
) -> Result<(), String> {
    let ssh = repo.url.starts_with("ssh://") || !repo.url.contains("://");
    match (&secret.ssh_private_key, &secret.password) {
        (Some(key), _) if ssh => {
            let file = keys.join(format!("key-{}", fastrand::u64(..)));
            write_private(&file, key)
                .map_err(|e| format!("cannot store the SSH key of {}: {e}", secret.source))?;
            repo.auth.ssh_key_file = Some(file);
            Ok(())
        }
        (_, Some(password)) if !ssh => {
            // Kept in memory only; `ProvidedToken` never prints its value.
            repo.auth.provided_username = secret.username.clone();
            repo.auth.provided_token = Some(crate::git::ProvidedToken::new(password.as_str()));
            Ok(())
        }
        _ => Err(format!(
            "{} has no {} for {}",
            secret.source,
            if ssh { "sshPrivateKey" } else { "password" },
            crate::git::auth::redact_url(&repo.url)
        )),
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

// === write-back-method: argocd ===

/// One Application's parameter overrides as tagpilot would set them.
#[derive(Debug, Clone, PartialEq)]
pub struct AppPatch {
    /// Index into [`Resolved::apps`].
    pub app: usize,
    pub namespace: String,
    pub name: String,
    /// The JSON merge patch body.
    pub body: serde_json::Value,
    pub changes: Vec<Change>,
}

/// Everything the `argocd` method decided.
#[derive(Debug, Default)]
pub struct Patches {
    pub patches: Vec<AppPatch>,
    pub images: Vec<ImageOutcome>,
    pub holds: Vec<crate::plan::Hold>,
    pub problems: Vec<Problem>,
    pub app_problems: Vec<(usize, String)>,
    pub up_to_date: usize,
}

/// Decides every image of the apps written with `write-back-method: argocd` against the live
/// Application's overrides (`spec.source.kustomize.images` or `spec.source.helm.parameters`,
/// else the images Argo CD reports running), as Image Updater does. Reads the registry only.
pub async fn plan_patches<R: Registry>(resolved: &Resolved, registry: &R) -> Patches {
    let mut out = Patches::default();
    for (a, managed) in resolved.apps.iter().enumerate() {
        if !managed.patch {
            continue;
        }
        let app = &managed.app;
        if app.is_multi_source() {
            // Only Directory sources (written through git) are handled for multi-source apps.
            if managed.units.is_empty() {
                out.app_problems.push((
                    a,
                    "write-back-method argocd cannot patch a multi-source Application's overrides; use write-back-method git".into(),
                ));
            }
            continue;
        }
        let Some(source) = app.spec.source.as_ref() else {
            continue;
        };
        let kind = if source.kustomize.is_some() {
            SourceKind::Kustomize
        } else if source.helm.is_some() {
            SourceKind::Helm
        } else {
            match app.status.as_ref().and_then(|s| s.source_type.as_deref()) {
                Some("Kustomize") => SourceKind::Kustomize,
                Some("Helm") => SourceKind::Helm,
                // Directory sources are written through git (see `resolve`).
                Some("Directory") => continue,
                other => {
                    out.app_problems.push((
                        a,
                        format!(
                            "write-back-method argocd: source type {} has no parameter overrides to patch",
                            other.unwrap_or("unknown (no status.sourceType)")
                        ),
                    ));
                    continue;
                }
            }
        };
        let mut overrides = OverrideFile::default();
        if let Some(k) = &source.kustomize {
            overrides.kustomize = Some(super::planner::KustomizeOverrides {
                images: k.images.clone(),
                other: Default::default(),
            });
        }
        if let Some(h) = &source.helm {
            overrides.helm = Some(super::planner::HelmOverrides {
                parameters: h
                    .parameters
                    .iter()
                    .map(|p| OverrideParameter {
                        name: p.name.clone(),
                        value: p.value.clone(),
                        forcestring: p.force_string,
                    })
                    .collect(),
                other: Default::default(),
            });
        }
        let place = format!("Application {}", app.id());
        let field = match kind {
            SourceKind::Helm => "spec.source.helm.parameters",
            _ => "spec.source.kustomize.images",
        };
        let mut changes = Vec::new();
        for (i, image) in managed.annotations.images.iter().enumerate() {
            let Some(policy) = &managed.policies[i] else {
                continue;
            };
            let mut outcome = ImageOutcome {
                app: a,
                alias: image.alias.clone(),
                image: policy.image.to_string(),
                source: 1,
                kind,
                repository: place.clone(),
                file: Some(field.to_string()),
                from: None,
                to: None,
                status: String::new(),
                reason: None,
            };
            let current = overrides
                .current(kind, image, policy)
                .or_else(|| live_image(app, &policy.image));
            let (tag, digest) = match current {
                Some(c) => c,
                None if image.force_update => (None, None),
                None => {
                    outcome.status = "not found".into();
                    outcome.reason = Some(format!(
                        "the Application neither overrides nor runs {}; set force-update to set it anyway",
                        policy.image
                    ));
                    out.images.push(outcome);
                    continue;
                }
            };
            let from = crate::plan::version_text(tag.as_deref(), digest.as_deref());
            outcome.from = Some(from.clone());
            match decide(policy, tag.as_deref(), digest.as_deref(), registry).await {
                Ok(Decided::Move { tag, digest }) => {
                    let to = crate::plan::version_text(Some(&tag), digest.as_deref());
                    overrides.set(kind, image, policy, &tag, digest.as_deref());
                    outcome.status = "update".into();
                    outcome.to = Some(to.clone());
                    changes.push(Change {
                        repository: None,
                        policy: policy.name.clone(),
                        image: policy.image.to_string(),
                        file: place.clone(),
                        line: 0,
                        field: field.to_string(),
                        strategy: policy.strategy.name(),
                        from,
                        to,
                    });
                }
                Ok(Decided::Stay) => {
                    outcome.status = "up to date".into();
                    out.up_to_date += 1;
                }
                Ok(Decided::Hold(reason)) => {
                    outcome.status = "held".into();
                    outcome.reason = Some(reason.clone());
                    out.holds.push(crate::plan::Hold {
                        repository: None,
                        policy: policy.name.clone(),
                        file: place.clone(),
                        line: 0,
                        current: from,
                        reason,
                    });
                }
                Err(message) => {
                    outcome.status = "problem".into();
                    outcome.reason = Some(message.clone());
                    out.problems.push(Problem {
                        repository: None,
                        policy: Some(policy.name.clone()),
                        image: Some(policy.image.to_string()),
                        file: Some(place.clone()),
                        line: None,
                        message,
                    });
                }
            }
            out.images.push(outcome);
        }
        if changes.is_empty() {
            continue;
        }
        out.patches.push(AppPatch {
            app: a,
            namespace: app.metadata.namespace.clone().unwrap_or_default(),
            name: app.metadata.name.clone(),
            body: patch_body(kind, &overrides),
            changes,
        });
    }
    out
}

/// The merge patch for `kind`'s overrides. Arrays are replaced whole by a merge patch, so the
/// list carries every entry, the ones tagpilot did not touch included.
pub fn patch_body(kind: SourceKind, overrides: &OverrideFile) -> serde_json::Value {
    match kind {
        SourceKind::Helm => {
            let parameters: Vec<HelmParameter> = overrides
                .helm
                .as_ref()
                .map(|h| {
                    h.parameters
                        .iter()
                        .map(|p| HelmParameter {
                            name: p.name.clone(),
                            value: p.value.clone(),
                            force_string: p.forcestring,
                        })
                        .collect()
                })
                .unwrap_or_default();
            json!({"spec": {"source": {"helm": {"parameters": parameters}}}})
        }
        _ => {
            let images = overrides
                .kustomize
                .as_ref()
                .map(|k| k.images.clone())
                .unwrap_or_default();
            json!({"spec": {"source": {"kustomize": {"images": images}}}})
        }
    }
}

/// The tag and digest Argo CD reports the app running for `repository`
/// (`status.summary.images`).
fn live_image(
    app: &Application,
    repository: &Repository,
) -> Option<(Option<String>, Option<String>)> {
    let images = &app.status.as_ref()?.summary.as_ref()?.images;
    images.iter().find_map(|i| {
        let r = crate::image::ImageRef::parse(i).ok()?;
        (Repository::parse(&r.name).ok()? == *repository).then_some((r.tag, r.digest))
    })
}

/// What became of one Application's patch, for the report.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct PatchReport {
    /// `would patch`, `patched` or `failed`.
    pub status: String,
    /// The merge patch body, compact JSON (image references only).
    pub body: String,
}

/// Sends the patches (not in a dry run). A failed patch is a problem naming the Application;
/// the others are still sent.
pub async fn send_patches(
    cluster: &Cluster,
    patches: &[AppPatch],
    dry_run: bool,
) -> (Vec<(usize, PatchReport)>, Vec<Problem>) {
    let mut reports = Vec::new();
    let mut problems = Vec::new();
    for p in patches {
        let body = serde_json::to_string(&p.body).expect("a patch serialises");
        let status = if dry_run {
            "would patch"
        } else {
            match cluster
                .patch_application(&p.namespace, &p.name, &p.body)
                .await
            {
                Ok(()) => "patched",
                Err(e) => {
                    problems.push(Problem {
                        message: e.to_string(),
                        file: Some(format!("Application {}/{}", p.namespace, p.name)),
                        ..Default::default()
                    });
                    "failed"
                }
            }
        };
        reports.push((
            p.app,
            PatchReport {
                status: status.to_string(),
                body,
            },
        ));
    }
    (reports, problems)
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
        let e = user_password("s3cret-without-user", "env X").unwrap_err();
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
        use_git_secret(&mut repo, &s, dir.path()).unwrap();
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
        use_git_secret(&mut repo, &s, dir.path()).unwrap();
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
