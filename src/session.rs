//! What every command that reaches registries builds once, from `tagpilot.yaml` and its flags:
//! the configuration, the registry client (with the pull secrets of `applications.fromCluster`
//! among its credentials), the clone cache, the cluster's Applications and, for
//! `tagpilot run --state-dir`, the state store, all on one clock (the service's, or the
//! system's). `plan`, `apply`, `tags` and `run` open one
//! [`Session`] and hand its parts to the engine instead of each wiring them anew, so a new
//! credential source or cache reaches every command at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::argocd::ArgoError;
use crate::argocd::read::cluster::{self, Cluster, Loaded};
use crate::clock::Clock;
use crate::config::{self, Config, ConfigError};
use crate::engine;
use crate::git::RepoCache;
use crate::plan::{self, Progress};
use crate::policy;
use crate::registry::{ClientOptions, RegistryClient, RegistryError};
use crate::select::RankedTag;
use crate::state::State;

/// Why a session could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("no {file} in {dir}; pass --config PATH", file = config::DEFAULT_CONFIG_FILE)]
    NoConfig { dir: String },
    #[error(
        "--policy names a configured policy, but there is no {file} here; pass --config PATH",
        file = config::DEFAULT_CONFIG_FILE
    )]
    NoConfigForPolicy,
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("reading Applications from the cluster")]
    Cluster(#[source] ArgoError),
    #[error("setting up registry access")]
    Registry(#[source] RegistryError),
    #[error("reading the Applications of applications.fromGit")]
    Applications(#[source] Box<ArgoError>),
    #[error("reading the Applications of applications.fromGit: no cache directory to clone into")]
    NoCacheDir,
}

/// `path` (`--config`), else `./tagpilot.yaml`, which must then exist.
pub fn config_path(path: Option<&Path>) -> Result<PathBuf, SessionError> {
    if let Some(path) = path {
        return Ok(path.to_path_buf());
    }
    let default = PathBuf::from(config::DEFAULT_CONFIG_FILE);
    if !default.exists() {
        return Err(SessionError::NoConfig {
            dir: std::env::current_dir()
                .map(|d| d.display().to_string())
                .unwrap_or_default(),
        });
    }
    Ok(default)
}

/// The configuration at `path` (`--config`), else at `./tagpilot.yaml`.
pub fn load_config(path: Option<&Path>) -> Result<Config, SessionError> {
    Ok(config::load(&config_path(path)?)?)
}

/// For a command that can do without a configuration (`tagpilot tags`): the one at `path`,
/// else at `./tagpilot.yaml` if there is one. Without one, registries are reached anonymously
/// over HTTPS; only naming a configured policy (`policy_named`) needs it.
pub fn optional_config(
    path: Option<&Path>,
    policy_named: bool,
) -> Result<Option<Config>, SessionError> {
    if path.is_some() || Path::new(config::DEFAULT_CONFIG_FILE).exists() {
        return load_config(path).map(Some);
    }
    if policy_named {
        return Err(SessionError::NoConfigForPolicy);
    }
    Ok(None)
}

/// How a session is opened.
#[derive(Debug, Default)]
pub struct Options {
    /// `--cache-dir`; `None` for the user's cache directory.
    pub cache_dir: Option<PathBuf>,
    /// Read `applications.fromCluster` (a command that plans Applications); `tagpilot tags`
    /// lists one image's tags and leaves the cluster alone.
    pub read_cluster: bool,
    /// The `--state-dir` store: the registry client keeps image metadata in it, the engine the
    /// last proposals.
    pub state: Option<Arc<State>>,
    /// The clock the command keeps time by (the service's); `None`: the system's.
    pub clock: Option<Arc<dyn Clock>>,
}

/// The parts of one command's work that live as long as the command.
pub struct Session {
    pub config: Config,
    pub registry: RegistryClient,
    /// `None` when there is no cache directory to keep clones in.
    pub cache: Option<RepoCache>,
    /// The connection to the cluster of `applications.fromCluster`, for reading it again.
    pub cluster: Option<Cluster>,
    /// The Applications, `ImageUpdater` resources and pull secrets read while opening.
    pub applications: Option<Loaded>,
    pub state: Option<Arc<State>>,
    /// The one clock the registry client and every cycle read the time from.
    pub clock: Arc<dyn Clock>,
}

impl Session {
    /// Reads the cluster's Applications (when asked and configured) before the registry client
    /// is built, so the pull secrets they name reach it like any other credentials.
    pub async fn open(config: Config, options: Options) -> Result<Session, SessionError> {
        let from = config
            .applications
            .as_ref()
            .and_then(|a| a.from_cluster.as_ref())
            .filter(|_| options.read_cluster);
        let (cluster, applications) = match from {
            Some(from) => {
                let connected = Cluster::connect()
                    .await
                    .map_err(|e| SessionError::Cluster(e.into()))?;
                let loaded = cluster::load(connected.clone(), from)
                    .await
                    .map_err(SessionError::Cluster)?;
                (Some(connected), Some(loaded))
            }
            None => (None, None),
        };
        let clock = options.clock.unwrap_or_else(crate::clock::system);
        let mut client_options = ClientOptions::from_config(&config);
        client_options.clock = clock.clone();
        if let Some(loaded) = &applications {
            client_options.credentials = loaded.registry_credentials.clone();
        }
        let mut registry = RegistryClient::new(client_options).map_err(SessionError::Registry)?;
        if let Some(connected) = &cluster {
            // `signatures:` keys in Secrets are read over the same connection.
            registry = registry.with_cluster(connected.clone());
        }
        if let Some(state) = &options.state {
            registry = registry.with_store(state.clone());
        }
        Ok(Session {
            cache: engine::repo_cache(options.cache_dir.as_deref()),
            config,
            registry,
            cluster,
            applications,
            state: options.state,
            clock,
        })
    }

    /// What a cycle reads: `policies`, the local directory (`None`: no local target) and the
    /// cluster's Applications as read for this cycle.
    pub fn input<'a>(
        &'a self,
        policies: &'a policy::Loaded,
        local: Option<PathBuf>,
        applications: Option<&'a Loaded>,
    ) -> engine::Input<'a> {
        engine::Input {
            config: &self.config,
            policies: &policies.policies,
            broken_policies: &policies.errors,
            local,
            cluster: applications,
        }
    }

    /// What a cycle uses: this session's registry client, clone cache and state store.
    pub fn context<'a>(
        &'a self,
        progress: &'a dyn Progress,
        cancel: CancellationToken,
    ) -> engine::Context<'a, RegistryClient> {
        engine::Context {
            registry: &self.registry,
            cache: self.cache.as_ref(),
            progress,
            cancel,
            state: self.state.as_deref(),
            clock: self.clock.as_ref(),
            freeze: None,
        }
    }

    /// The policies tagpilot makes of the Applications `applications:` configures, named
    /// `<app>/<alias>` in the Application's namespace, as a cycle resolves them: those
    /// `fromGit` names (their repositories fetched) and, when this session read the cluster,
    /// the cluster's. For `tagpilot tags --policy <namespace>/<app>/<alias>`.
    pub async fn application_policies(&self) -> Result<Vec<policy::ImagePolicy>, SessionError> {
        use crate::application::Origin;
        use crate::argocd::read::{image_updater, load};
        use crate::argocd::resolve;
        let Some(apps_config) = &self.config.applications else {
            return Ok(Vec::new());
        };
        let mut apps = Vec::new();
        let mut updaters = Vec::new();
        if !apps_config.from_git.is_empty() {
            let cache = self.cache.as_ref().ok_or(SessionError::NoCacheDir)?;
            let (found, _) = load::from_git(&self.config, &apps_config.from_git, cache)
                .await
                .map_err(|e| SessionError::Applications(Box::new(e)))?;
            apps.extend(found.apps.into_iter().map(|a| (a, Origin::Git)));
            updaters.extend(found.updaters);
        }
        if let Some(loaded) = &self.applications {
            apps.extend(loaded.apps.iter().cloned().map(|a| (a, Origin::Cluster)));
            updaters.extend(loaded.updaters.iter().cloned());
        }
        let mut selection = image_updater::select(apps, &updaters);
        cluster::add_cosign_keys(self.applications.as_ref(), &mut selection.apps);
        let resolved = resolve::resolve_selected(
            selection.apps,
            &self.config.repositories,
            &apps_config.allowed_repositories(),
            &load::remote_default_branch,
        );
        Ok(resolved
            .apps
            .into_iter()
            .flat_map(|a| a.policies.into_iter().flatten())
            .collect())
    }

    /// `tagpilot tags`: the image's tags in `policy`'s order, asked of this session's registry
    /// client, with `current` marked and the one the policy would choose.
    pub async fn rank_tags(
        &self,
        policy: &policy::ImagePolicy,
        current: Option<&str>,
        progress: &dyn Progress,
    ) -> Result<Vec<RankedTag>, RegistryError> {
        plan::tags::rank_tags(&self.registry, policy, current, progress).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_config_is_loaded_and_an_unreadable_one_is_a_config_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tagpilot.yaml");
        std::fs::write(&path, "registries: []\n").unwrap();
        let config = optional_config(Some(&path), true).unwrap().unwrap();
        assert_eq!(config.base_dir(), dir.path());
        let missing = dir.path().join("none.yaml");
        let err = load_config(Some(&missing)).unwrap_err();
        assert!(matches!(err, SessionError::Config(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_session_without_a_cluster_reads_none() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            cache_dir: Some(dir.path().to_path_buf()),
            ..Options::default()
        };
        let session = Session::open(Config::default(), options).await.unwrap();
        assert!(session.cluster.is_none() && session.applications.is_none());
        assert!(session.cache.is_some());
    }
}
