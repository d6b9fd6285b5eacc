//! What is read from the cluster, as the engine sees it: before planning ([`load`]: the
//! Applications, their `ImageUpdater` resources and pull secrets), and the git credentials from
//! Argo CD's Secrets ([`git_credentials`]).
//!
//! It joins two files: [`crate::kubernetes`] (the API client, pure I/O) and
//! [`super::credentials`] (Secrets as credentials). The patches of `write-back-method: argocd`
//! are planned in [`crate::argocd::plan::patch`] and sent in [`crate::argocd::write`]. No
//! Secret value reaches a log, an error or a report.

use std::collections::HashMap;
use std::path::Path;

use crate::registry::Credential;

use super::image_updater::{ImageUpdater, select};
use super::settings::AppSettings;
use crate::application::Application;
use crate::application::Origin;
use crate::argocd::ArgoError;
use crate::config::applications::FromCluster;
use crate::config::repository::AuthConfig;

pub use super::credentials::{CredentialError, GitSecret, GitWrite, match_repository_secret};
pub use crate::kubernetes::{Cluster, FIELD_MANAGER, KubeError, SECRET_TYPE_LABEL, UpdaterWatch};

/// Everything read from the cluster before planning: the Applications and the registry
/// credentials their `pull-secret`s name.
pub struct Loaded {
    pub cluster: Cluster,
    /// Argo CD's own namespace, where its repository Secrets live.
    pub argocd_namespace: String,
    pub apps: Vec<Application>,
    /// The `ImageUpdater` resources in the Applications' namespaces (none without the CRD).
    pub updaters: Vec<ImageUpdater>,
    /// By registry host, for [`crate::registry::ClientOptions::credentials`].
    pub registry_credentials: HashMap<String, Credential>,
    /// Pull secrets that could not be used, each naming the application and the Secret.
    pub problems: Vec<String>,
    /// `imagesVerification.cosignKey`s read from their Secrets.
    pub cosign_keys: super::credentials::CosignKeys,
}

/// Gives each image's `imagesVerification.cosignKey` the PEM read from its Secret (issue 22).
/// Without a cluster (Applications from git) the keys stay unread, which holds those images.
pub fn add_cosign_keys(loaded: Option<&Loaded>, apps: &mut [super::image_updater::Selected]) {
    let Some(loaded) = loaded else {
        return;
    };
    let images = apps
        .iter_mut()
        .filter_map(|s| s.settings.as_mut())
        .flat_map(|a| a.images.iter_mut());
    for key in images.filter_map(|i| i.cosign_key.as_mut()) {
        let id = (key.namespace.clone(), key.secret.clone(), key.key.clone());
        key.pem = loaded.cosign_keys.get(&id).cloned();
    }
}

/// Lists the Applications `from` selects and the `ImageUpdater` resources in the same
/// namespaces, and reads the pull secrets their configuration names.
pub async fn load(cluster: Cluster, from: &FromCluster) -> Result<Loaded, ArgoError> {
    load_watched(cluster, from, None).await
}

/// [`load`], with the `ImageUpdater` resources taken from `watch` once it has listed them
/// (`tagpilot run` watches them rather than listing them every cycle).
pub async fn load_watched(
    cluster: Cluster,
    from: &FromCluster,
    watch: Option<&UpdaterWatch>,
) -> Result<Loaded, ArgoError> {
    let apps = cluster.applications(from).await?;
    let mut problems = Vec::new();
    let mut updaters = Vec::new();
    let listed = match watch.and_then(UpdaterWatch::snapshot) {
        Some(watched) => watched,
        None => cluster.image_updaters(&from.namespaces).await?,
    };
    for value in listed {
        let id = format!(
            "{}/{}",
            value["metadata"]["namespace"].as_str().unwrap_or_default(),
            value["metadata"]["name"].as_str().unwrap_or_default()
        );
        match serde_json::from_value::<ImageUpdater>(value) {
            Ok(mut u) => {
                u.origin = "cluster".to_string();
                updaters.push(u);
            }
            Err(e) => problems.push(format!(
                "ImageUpdater {id} cannot be read, so it configures nothing: {e}"
            )),
        }
    }
    // The configuration that counts for each Application names the pull secrets to read.
    let selection = select(
        apps.iter().cloned().map(|a| (a, Origin::Cluster)).collect(),
        &updaters,
    );
    let configured: Vec<(String, &AppSettings)> = selection
        .apps
        .iter()
        .filter_map(|s| s.settings.as_ref().map(|a| (s.app.id(), a)))
        .collect();
    let (registry_credentials, secret_problems) =
        super::credentials::pull_secrets(&cluster, &configured).await;
    problems.extend(secret_problems);
    let cosign_keys = super::credentials::cosign_keys(&cluster, &configured).await;
    Ok(Loaded {
        cluster,
        argocd_namespace: from.argocd_namespace().to_string(),
        apps,
        updaters,
        registry_credentials,
        problems,
        cosign_keys,
    })
}

/// The credentials Argo CD's Secrets give each repository a cluster Application writes with
/// `git:secret:` or `git:repocreds` (see [`super::credentials::git_credentials`]): each
/// repository's auth by name, and problems, each naming the application and the Secret.
pub async fn git_credentials(
    loaded: &Loaded,
    writes: &[GitWrite<'_>],
    keys: &Path,
) -> (Vec<(String, AuthConfig)>, Vec<String>) {
    super::credentials::git_credentials(&loaded.cluster, &loaded.argocd_namespace, writes, keys)
        .await
}
