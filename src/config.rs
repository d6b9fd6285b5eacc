//! `tagpilot.yaml`: which registries to talk to and how, and where the policies live.
//!
//! Deserialised with `serde-saphyr` into typed structs with `deny_unknown_fields`, so a typo is
//! an error with `file:line:column`, never a silently ignored key. Reads files; no network.

use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The name tagpilot looks for in the working directory when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "tagpilot.yaml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// `message` already carries `file:line:column` and a snippet.
    #[error("{message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole of `tagpilot.yaml`, after parsing.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub registries: Vec<RegistryConfig>,
    /// A directory searched recursively, or a list of files; relative to the config file.
    #[serde(default)]
    pub policies: PolicySource,
    /// Where the config file was read from; relative paths in it resolve against its directory.
    #[serde(skip)]
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum PolicySource {
    Directory(PathBuf),
    Files(Vec<PathBuf>),
}

impl Default for PolicySource {
    fn default() -> Self {
        PolicySource::Directory(PathBuf::from("policies"))
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RegistryConfig {
    /// `host[:port]` as written in image references.
    pub host: String,
    /// Plain HTTP instead of HTTPS.
    #[serde(default)]
    pub insecure: bool,
    #[serde(default)]
    pub credentials: Option<Credentials>,
    /// Requests per second to this registry.
    #[serde(default)]
    pub rate_limit: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Credentials {
    pub username: String,
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

impl Config {
    /// The directory relative paths in the config resolve against.
    pub fn base_dir(&self) -> &Path {
        self.path.as_deref().and_then(Path::parent).unwrap_or(Path::new("."))
    }
}
