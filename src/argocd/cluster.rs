//! The Kubernetes side of the Argo CD module, as the engine sees it: what is read from the
//! cluster before planning ([`load`]: the Applications and their pull secrets), the git
//! credentials from Argo CD's Secrets ([`git_credentials`]), and the `write-back-method:
//! argocd` patches ([`plan_patches`], [`send_patches`]).
//!
//! It joins three files: [`super::kubernetes`] (the API client, pure I/O),
//! [`super::credentials`] (Secrets as credentials) and [`super::patch`] (deciding and sending
//! Application patches). Nothing is patched in plan mode, and no Secret value reaches a log, an
//! error or a report.

use std::collections::HashMap;
use std::path::Path;

use crate::registry::Credential;

use super::ArgoError;
use super::application::Application;
use super::resolve::Resolved;
use crate::config::applications::FromCluster;

pub use super::credentials::{CredentialError, GitSecret, match_repository_secret};
pub use super::kubernetes::{Cluster, FIELD_MANAGER, KubeError, SECRET_TYPE_LABEL};
pub use super::patch::{
    AppPatch, PatchReport, PatchStatus, Patches, patch_body, plan_patches, send_patches,
};

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
    let (registry_credentials, problems) = super::credentials::pull_secrets(&cluster, &apps).await;
    Ok(Loaded {
        cluster,
        argocd_namespace: from.argocd_namespace().to_string(),
        apps,
        registry_credentials,
        problems,
    })
}

/// Gives each repository that a cluster Application writes with `git:secret:` or
/// `git:repocreds` the credentials from Argo CD's Secrets (see
/// [`super::credentials::git_credentials`]). Returns problems, each naming the application and
/// the Secret.
pub async fn git_credentials(loaded: &Loaded, resolved: &mut Resolved, keys: &Path) -> Vec<String> {
    super::credentials::git_credentials(&loaded.cluster, &loaded.argocd_namespace, resolved, keys)
        .await
}
