//! The `applications:` section of `tagpilot.yaml`: where tagpilot finds Argo CD Applications.
//! Types only; nothing here reads git or the cluster.

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationsConfig {
    /// Application manifests kept in git (app-of-apps).
    #[serde(default)]
    pub from_git: Vec<FromGit>,
    /// Applications read live from the Kubernetes API.
    #[serde(default)]
    pub from_cluster: Option<FromCluster>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FromGit {
    /// A configured repository (`repositories[].name`); omitted means the directory holding
    /// `tagpilot.yaml`.
    #[serde(default)]
    pub repository: Option<String>,
    /// Globs relative to the repository root (`argocd/apps/**`).
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FromCluster {
    /// Namespaces to list Applications in; empty means all the service account can list.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A label selector (`team=payments`).
    #[serde(default)]
    pub selector: Option<String>,
    /// Argo CD's own namespace, where its repository Secrets (`git:repocreds`) live; default
    /// `argocd`.
    #[serde(default)]
    pub argocd_namespace: Option<String>,
}

impl FromCluster {
    pub fn argocd_namespace(&self) -> &str {
        self.argocd_namespace.as_deref().unwrap_or("argocd")
    }
}
