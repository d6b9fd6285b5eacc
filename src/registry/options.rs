//! How a [`RegistryClient`](super::RegistryClient) is set up: the registries of
//! `tagpilot.yaml`, where other credentials come from, and the limits it keeps to.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use super::auth::{Credential, DockerConfigSource};
use crate::config::{Config, RegistryConfig, TagListLimits};

/// How the client is set up. [`ClientOptions::from_config`] is what the CLI uses; tests set the
/// `config.json` location and the credential helper search path explicitly.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    pub registries: Vec<RegistryConfig>,
    /// Directory `passwordFile` paths are relative to (the config file's directory).
    pub base_dir: PathBuf,
    pub docker_config: DockerConfigSource,
    /// Search path for `docker-credential-*` helpers; `None` uses the process's `PATH`.
    pub helper_path: Option<OsString>,
    /// `n` asked for per tag-list page.
    pub page_size: usize,
    /// Bounds of a tag listing on a registry `registries` does not name (those that it names
    /// carry their own).
    pub tag_list: TagListLimits,
    /// Retries after a 429 or 503 before giving up.
    pub max_retries: u32,
    /// A `Retry-After` longer than this is not waited for: the request fails at once.
    pub max_retry_wait: Duration,
    /// Requests in flight to one registry at a time.
    pub max_concurrency_per_registry: usize,
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// Credentials held in memory by registry host, winning over `registries` and
    /// `config.json`: pull secrets read from Kubernetes for Argo CD Applications.
    pub credentials: HashMap<String, Credential>,
    /// `signatures.defaults` of `tagpilot.yaml`, keys read, longest prefix first.
    pub signature_defaults: Vec<(String, crate::config::signatures::Requirement)>,
    /// `signatures.trustRoot`, resolved against the config's directory.
    pub signature_trust_root: Option<PathBuf>,
    /// The clock the client reads: when a tag was first seen (`minAge`), when a token expires,
    /// how long a `Retry-After` date is away.
    pub clock: std::sync::Arc<dyn crate::clock::Clock>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            registries: Vec::new(),
            base_dir: PathBuf::from("."),
            docker_config: DockerConfigSource::FromEnvironment,
            helper_path: None,
            page_size: 1000,
            tag_list: TagListLimits::default(),
            max_retries: 3,
            max_retry_wait: Duration::from_secs(60),
            max_concurrency_per_registry: 16,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            credentials: HashMap::new(),
            signature_defaults: Vec::new(),
            signature_trust_root: None,
            clock: crate::clock::system(),
        }
    }
}

impl ClientOptions {
    /// The registries of `tagpilot.yaml`, with Docker's `config.json` from the environment.
    pub fn from_config(config: &Config) -> Self {
        ClientOptions {
            registries: config.registries.clone(),
            base_dir: config.base_dir().to_path_buf(),
            signature_defaults: config.signature_defaults.clone(),
            signature_trust_root: config
                .signatures
                .as_ref()
                .and_then(|s| s.trust_root.as_ref())
                .map(|p| config.base_dir().join(p)),
            ..ClientOptions::default()
        }
    }
}
