//! `tagpilot.yaml`: which registries to talk to and how, and where the policies live.
//!
//! Deserialised with `serde-saphyr` into typed structs with `deny_unknown_fields`, so a typo is
//! an error with `file:line:column`, never a silently ignored key. Reads files; no network.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

// Argo CD Application files render their YAML errors the same way; they still import it from here.
pub mod applications;
pub mod forge;
pub mod holds;
pub mod notifications;
pub mod repository;
pub mod signatures;
pub mod verify;
pub mod version_labels;
pub mod webhooks;

pub use webhooks::{RecheckConfig, SecretSource, WebhooksConfig};

pub(crate) use crate::yaml_error::render as render_yaml_error;

/// The name tagpilot looks for in the working directory when `--config` is not given.
pub const DEFAULT_CONFIG_FILE: &str = "tagpilot.yaml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// `message` already carries `file:line:column` (and a snippet when serde-saphyr has one).
    #[error("{message}")]
    Invalid { path: PathBuf, message: String },
}

/// The JSON Schema of `tagpilot.yaml`, made from [`Config`] and the types it holds (their doc
/// comments are its descriptions), for editors (`# yaml-language-server: $schema=…`).
pub fn schema() -> schemars::Schema {
    schemars::schema_for!(Config)
}

/// The whole of `tagpilot.yaml`, after parsing.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub registries: Vec<RegistryConfig>,
    /// A directory searched recursively, or a list of files; relative to the config file.
    #[serde(default)]
    pub policies: PolicySource,
    /// Remote manifest repositories tagpilot clones, edits, commits to and pushes.
    #[serde(default)]
    pub repositories: Vec<repository::RepositoryConfig>,
    /// Argo CD Applications whose Image Updater annotations act as policies.
    #[serde(default)]
    pub applications: Option<applications::ApplicationsConfig>,
    /// Registry notifications `tagpilot run` accepts on `/webhooks/<kind>`.
    #[serde(default)]
    pub webhooks: Option<WebhooksConfig>,
    /// What `tagpilot run`'s HTTP port may do with held tags (`POST /holds/release`).
    #[serde(default)]
    pub holds: Option<holds::HoldsConfig>,
    /// Where `tagpilot run` tells people what it did, what waits and what it refused.
    #[serde(default)]
    pub notifications: Option<Box<notifications::NotificationsConfig>>,
    /// How much of a cycle runs at once.
    #[serde(default)]
    pub concurrency: Concurrency,
    /// Change windows: when writes are allowed or denied, per repository, policy and
    /// environment ([`crate::windows`]).
    #[serde(default)]
    pub windows: Vec<crate::windows::WindowConfig>,
    /// Which labels and annotations follow an image's tag, for every policy and Application
    /// (a policy's own `versionLabels` wins); `None`: the defaults.
    #[serde(default)]
    pub version_labels: Option<version_labels::VersionLabels>,
    /// Cosign signatures a tag's image must carry: the trust root and the defaults per
    /// registry or image prefix (`signatures.rs`).
    #[serde(default)]
    pub signatures: Option<signatures::SignaturesSettings>,
    /// `signatures.defaults` with their keys read, longest prefix first; filled by [`load`].
    #[serde(skip)]
    pub signature_defaults: Vec<(String, signatures::Requirement)>,
    /// Where the config file was read from; relative paths in it resolve against its directory.
    #[serde(skip)]
    pub path: Option<PathBuf>,
    /// Whether `policies:` was written (rather than defaulted).
    #[serde(skip)]
    pub policies_written: bool,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
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
    /// How long one request to this registry may take (`30s`, `2m`; default 60s). A registry
    /// that does not answer in time is not asked again until the next cycle, so it delays only
    /// the policies that need it.
    #[serde(default, deserialize_with = "duration")]
    #[schemars(with = "Option<String>")]
    pub timeout: Option<std::time::Duration>,
    /// How far one tag listing of a repository on this registry may go.
    #[serde(default)]
    pub tag_list: TagListLimits,
}

/// `registries[].tagList`: the bounds of one tag listing. A registry that paginates without
/// end (a bug, but seen) would otherwise hold every policy of the cycle and grow memory
/// without bound; past a bound the listing fails with an error naming it, for that
/// repository's images only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TagListLimits {
    /// Pages (requests) per listing.
    #[serde(default = "TagListLimits::default_max_pages")]
    pub max_pages: usize,
    /// Tags per listing.
    #[serde(default = "TagListLimits::default_max_tags")]
    pub max_tags: usize,
    /// Time per listing, every page and retry included.
    #[serde(
        default = "TagListLimits::default_timeout",
        deserialize_with = "required_duration"
    )]
    #[schemars(with = "String")]
    pub timeout: std::time::Duration,
}

impl TagListLimits {
    fn default_max_pages() -> usize {
        // A registry that caps pages at 100 tags, whatever `n` asks for, still gets 50 000.
        500
    }
    fn default_max_tags() -> usize {
        // The largest repositories seen (nightly builds on Docker Hub) hold a few ten thousand.
        100_000
    }
    fn default_timeout() -> std::time::Duration {
        std::time::Duration::from_secs(300)
    }
}

impl Default for TagListLimits {
    fn default() -> Self {
        TagListLimits {
            max_pages: TagListLimits::default_max_pages(),
            max_tags: TagListLimits::default_max_tags(),
            timeout: TagListLimits::default_timeout(),
        }
    }
}

pub(crate) fn required_duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<std::time::Duration, D::Error> {
    match duration(d)? {
        Some(d) => Ok(d),
        None => Err(serde::de::Error::custom(
            "timeout: give a duration (30s, 2m)",
        )),
    }
}

/// A duration as people write it (`30s`, `2m`, `1h 30m`).
fn duration<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<std::time::Duration>, D::Error> {
    let Some(text) = Option::<String>::deserialize(d)? else {
        return Ok(None);
    };
    match humantime::parse_duration(text.trim()) {
        Ok(d) if !d.is_zero() => Ok(Some(d)),
        Ok(_) => Err(serde::de::Error::custom("timeout: must be more than zero")),
        Err(e) => Err(serde::de::Error::custom(format!(
            "{text:?} is not a duration (30s, 2m): {e}"
        ))),
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Credentials {
    pub username: String,
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

/// `concurrency:`: how many manifest repositories are fetched, planned and written at once
/// (and fetched to read Applications from, with `applications.fromGit`).
/// Each repository's own plan still comes before its write, and the report lists repositories
/// in the same order whatever finishes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Concurrency {
    /// Repositories in flight at once (at least 1).
    #[serde(default = "Concurrency::default_repositories")]
    pub repositories: usize,
}

impl Concurrency {
    fn default_repositories() -> usize {
        4
    }
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency {
            repositories: Concurrency::default_repositories(),
        }
    }
}

impl Config {
    /// The directory relative paths in the config resolve against.
    pub fn base_dir(&self) -> &Path {
        // `tagpilot.yaml` has the parent "", which is no directory to walk.
        self.path
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }
}

/// Reads and validates `tagpilot.yaml` at `path`. Relative paths in it resolve against its
/// directory ([`Config::base_dir`]).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let mut config = parse(path, &text)?;
    config.path = Some(path.to_path_buf());
    config.signature_defaults = signature_defaults(&config, path, &text)?;
    // A config that only reads Argo CD Applications needs no `policies/` directory; one that
    // names `policies:` still gets an error when it is missing.
    if !config.policies_written
        && config.applications.is_some()
        && !config.base_dir().join("policies").exists()
    {
        config.policies = PolicySource::Files(Vec::new());
    }
    Ok(config)
}

/// Reads the keys `signatures.defaults` names; one that cannot be read is an error at its
/// entry's `file:line`, never a default that lets unsigned images through.
fn signature_defaults(
    config: &Config,
    path: &Path,
    text: &str,
) -> Result<Vec<(String, signatures::Requirement)>, ConfigError> {
    let Some(settings) = &config.signatures else {
        return Ok(Vec::new());
    };
    settings
        .resolve_defaults(config.base_dir())
        .map_err(|(i, e)| {
            let line = crate::yaml_error::from_str::<ConfigSpans>(text)
                .ok()
                .and_then(|s| s.signatures?.defaults.into_iter().nth(i))
                .map_or(0, |d| d.prefix.referenced.line());
            ConfigError::Invalid {
                path: path.to_path_buf(),
                message: format!(
                    "{}:{line}: signatures.defaults[{i}]: {}",
                    path.display(),
                    crate::error_chain::chain(&e)
                ),
            }
        })
}

/// Parses and validates config text; `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let name = path.display().to_string();
    let invalid = |message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let render = |e: serde_saphyr::Error| render_yaml_error(&e, path, 0, None).2;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if text
        .lines()
        .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#'))
    {
        return Ok(Config::default());
    }
    // 1. The config as written.
    let mut config: Config = crate::yaml_error::from_str(text).map_err(|e| invalid(render(e)))?;
    // A second pass for the values' positions: the public types stay plain for their users.
    let spans: ConfigSpans = crate::yaml_error::from_str(text).map_err(|e| invalid(render(e)))?;
    config.policies_written = spans.policies.is_some();
    // 2. Each value checked where it is written, every problem reported at once.
    let mut problems = Problems {
        name,
        list: Vec::new(),
    };
    check_repositories(&config, &spans, &mut problems);
    check_registries(&config, &spans, &mut problems);
    check_webhooks_and_concurrency(&config, &spans, &mut problems);
    // A window that cannot be read would either hold nothing or everything: refused.
    for w in &config.windows {
        if let Err(e) = crate::windows::Windows::compile(std::slice::from_ref(w)) {
            problems.list.push(format!(
                "{}: {}",
                problems.name,
                crate::error_chain::chain(&e)
            ));
        }
    }
    let problems = problems.list;
    if problems.is_empty() {
        Ok(config)
    } else {
        Err(invalid(problems.join("\n")))
    }
}

/// The problems found in a config file (`name`), each as `name:line:column: message`.
struct Problems {
    name: String,
    list: Vec<String>,
}

impl Problems {
    fn at(&mut self, s: &Spanned<String>, message: String) {
        self.list.push(format!(
            "{}:{}:{}: {message}",
            self.name,
            s.referenced.line(),
            s.referenced.column()
        ));
    }
}

/// Each repository named once, and each one's structure.
fn check_repositories(config: &Config, spans: &ConfigSpans, problems: &mut Problems) {
    let mut at = |s: &Spanned<String>, message: String| problems.at(s, message);
    let mut names: Vec<&Spanned<String>> = Vec::new();
    for (r, span) in config.repositories.iter().zip(&spans.repositories) {
        if let Some(first) = names.iter().find(|n| n.value == r.name) {
            at(
                &span.name,
                format!(
                    "repository {:?} is configured twice (first at line {})",
                    r.name,
                    first.referenced.line()
                ),
            );
        }
        names.push(&span.name);
        if let Err(e) = r.check_structure() {
            at(&span.name, crate::error_chain::chain(&e));
        }
    }
}

/// Each registry host written as image references write it, named once, with its credentials,
/// tag list bounds and rate limit in range.
fn check_registries(config: &Config, spans: &ConfigSpans, problems: &mut Problems) {
    let mut at = |s: &Spanned<String>, message: String| problems.at(s, message);
    let mut hosts: Vec<&Spanned<String>> = Vec::new();
    for (r, span) in config.registries.iter().zip(&spans.registries) {
        let host = &span.host;
        if r.host.is_empty()
            || r.host.contains("://")
            || r.host.contains('/')
            || r.host.contains(char::is_whitespace)
        {
            at(
                host,
                format!(
                    "registry host {:?} must be host[:port] as written in image references, without a scheme or path",
                    r.host
                ),
            );
        }
        if let Some(first) = hosts.iter().find(|h| h.value.eq_ignore_ascii_case(&r.host)) {
            at(
                host,
                format!(
                    "registry {:?} is configured twice (first at line {})",
                    r.host,
                    first.referenced.line()
                ),
            );
        }
        hosts.push(host);
        if let Some(c) = &r.credentials
            && c.password_env.is_some() == c.password_file.is_some()
        {
            at(
                host,
                format!(
                    "registry {:?}: credentials need exactly one of passwordEnv, passwordFile",
                    r.host
                ),
            );
        }
        if r.tag_list.max_pages == 0 || r.tag_list.max_tags == 0 {
            at(
                host,
                format!(
                    "registry {:?}: tagList.maxPages and tagList.maxTags must be at least 1",
                    r.host
                ),
            );
        }
        if let Some(rate) = r.rate_limit
            && !(rate.is_finite() && rate > 0.0)
        {
            at(
                host,
                format!(
                    "registry {:?}: rateLimit must be a positive number of requests per second",
                    r.host
                ),
            );
        }
    }
}

/// The webhooks' own problems, at their kind's entry; `concurrency.repositories` at least 1;
/// each `applications.allowRepositories` glob compiles.
fn check_webhooks_and_concurrency(config: &Config, spans: &ConfigSpans, problems: &mut Problems) {
    let name = &problems.name;
    let problems = &mut problems.list;
    if let (Some(w), Some(span)) = (&config.webhooks, &spans.webhooks) {
        for (key, message) in w.problems() {
            // The kind's own entry when it has one, else `webhooks:` itself.
            let at = span
                .value
                .get(key)
                .map_or(&span.referenced, |s| &s.referenced);
            problems.push(format!("{name}:{}:{}: {message}", at.line(), at.column()));
        }
    }
    if let (0, Some(span)) = (config.concurrency.repositories, &spans.concurrency) {
        problems.push(format!(
            "{name}:{}:{}: concurrency.repositories must be at least 1",
            span.referenced.line(),
            span.referenced.column()
        ));
    }
    // A glob that does not compile would otherwise allow nothing without saying why.
    for g in spans
        .applications
        .iter()
        .flat_map(|a| &a.allow_repositories)
    {
        if let Err(e) = applications::AllowedRepositories::glob(&g.value) {
            problems.push(format!(
                "{name}:{}:{}: applications.allowRepositories: {:?} is not a glob: {}",
                g.referenced.line(),
                g.referenced.column(),
                g.value,
                e.kind()
            ));
        }
    }
}

#[derive(Deserialize)]
struct ConfigSpans {
    #[serde(default)]
    registries: Vec<RegistrySpans>,
    #[serde(default)]
    repositories: Vec<RepositorySpans>,
    #[serde(default)]
    policies: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    webhooks: Option<Spanned<std::collections::BTreeMap<String, Spanned<serde::de::IgnoredAny>>>>,
    #[serde(default)]
    concurrency: Option<Spanned<serde::de::IgnoredAny>>,
    #[serde(default)]
    signatures: Option<SignaturesSpans>,
    #[serde(default)]
    applications: Option<ApplicationsSpans>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ApplicationsSpans {
    #[serde(default)]
    allow_repositories: Vec<Spanned<String>>,
}

#[derive(Deserialize)]
struct SignaturesSpans {
    #[serde(default)]
    defaults: Vec<SignaturesDefaultSpans>,
}

#[derive(Deserialize)]
struct SignaturesDefaultSpans {
    prefix: Spanned<String>,
}

#[derive(Deserialize)]
struct RepositorySpans {
    name: Spanned<String>,
}

#[derive(Deserialize)]
struct RegistrySpans {
    host: Spanned<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 22: `signatures.defaults` keys are read when the config is loaded, relative to
    /// it; one that cannot be read is an error at its entry's line, never "no requirement".
    #[test]
    fn signature_defaults_are_read_with_the_config_and_unreadable_ones_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let pem = rcgen::KeyPair::generate().unwrap().public_key_pem();
        std::fs::write(dir.path().join("cosign.pub"), pem).unwrap();
        let path = dir.path().join("tagpilot.yaml");
        std::fs::write(
            &path,
            "registries: []\nsignatures:\n  trustRoot: root.json\n  defaults:\n    - prefix: ghcr.io/acme\n      keys: [{file: cosign.pub}]\n",
        )
        .unwrap();
        let config = load(&path).unwrap();
        assert_eq!(config.signature_defaults[0].0, "ghcr.io/acme");
        std::fs::write(
            &path,
            "signatures:\n  defaults:\n    - prefix: ghcr.io/acme\n      keys: [{file: cosign.pub}]\n    - prefix: ghcr.io/evil\n      keys: [{file: gone.pub}]\n",
        )
        .unwrap();
        let err = crate::error_chain::chain(&load(&path).unwrap_err());
        assert!(
            err.contains("tagpilot.yaml:5: signatures.defaults[1]"),
            "{err}"
        );
        assert!(err.contains("gone.pub"), "{err}");
    }

    #[test]
    fn repository_concurrency_defaults_to_four_and_is_at_least_one() {
        let path = Path::new("tagpilot.yaml");
        assert_eq!(
            parse(path, "registries: []\n")
                .unwrap()
                .concurrency
                .repositories,
            4
        );
        let set = parse(path, "concurrency:\n  repositories: 16\n").unwrap();
        assert_eq!(set.concurrency.repositories, 16);
        let err = parse(path, "registries: []\nconcurrency:\n  repositories: 0\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("tagpilot.yaml:3:") && err.contains("at least 1"),
            "{err}"
        );
        let err = parse(path, "concurrency:\n  repos: 2\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("repos"), "{err}");
    }

    #[test]
    fn webhooks_need_a_secret_for_every_kind_or_one_per_kind() {
        let ok = parse(
            Path::new("tagpilot.yaml"),
            "webhooks:\n  secretEnv: TAGPILOT_WEBHOOK_SECRET\n  ghcr:\n    secretFile: gh\n  recheck:\n    debounce: 50ms\n    minInterval: 1m\n    burst: 2\n",
        )
        .unwrap();
        let w = ok.webhooks.unwrap();
        assert_eq!(
            w.secret_for("quay").unwrap().secret_env.as_deref(),
            Some("TAGPILOT_WEBHOOK_SECRET")
        );
        assert_eq!(
            w.secret_for("ghcr").unwrap().secret_file.as_deref(),
            Some(Path::new("gh"))
        );
        assert_eq!(w.recheck.debounce, std::time::Duration::from_millis(50));
        assert_eq!(w.recheck.min_interval, std::time::Duration::from_secs(60));
        assert_eq!(w.recheck.burst.get(), 2);

        // One kind alone is enough; the others then have no secret.
        let one = parse(
            Path::new("tagpilot.yaml"),
            "webhooks:\n  harbor: {secretEnv: H}\n",
        )
        .unwrap()
        .webhooks
        .unwrap();
        assert!(one.secret_for("harbor").is_some());
        assert!(one.secret_for("distribution").is_none());

        for (text, want) in [
            (
                "registries: []\nwebhooks: {}\n",
                "tagpilot.yaml:2:11: webhooks need a secret",
            ),
            (
                "registries: []\nwebhooks:\n  secretEnv: A\n  secretFile: b\n",
                "tagpilot.yaml:3:3: webhooks: give one of secretEnv, secretFile, not both",
            ),
            (
                "webhooks:\n  secretEnv: A\n  quay: {}\n",
                "tagpilot.yaml:3:9: webhooks.quay needs exactly one of secretEnv, secretFile",
            ),
            (
                "webhooks:\n  secretEnv: A\n  qauy: {secretEnv: B}\n",
                "unknown field `qauy`",
            ),
            (
                "webhooks:\n  secretEnv: A\n  recheck: {debounce: soon}\n",
                "\"soon\" is not a duration",
            ),
        ] {
            let err = parse(Path::new("tagpilot.yaml"), text)
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn tag_list_limits_default_per_registry_and_can_be_set() {
        let path = Path::new("tagpilot.yaml");
        let c = parse(
            path,
            "registries:\n  - host: a.example\n  - host: b.example\n    tagList: {maxPages: 3, timeout: 20s}\n",
        )
        .unwrap();
        assert_eq!(c.registries[0].tag_list, TagListLimits::default());
        let b = c.registries[1].tag_list;
        assert_eq!(
            (b.max_pages, b.max_tags, b.timeout),
            (3, 100_000, std::time::Duration::from_secs(20))
        );
        for (text, want) in [
            (
                "registries:\n  - host: a.example\n    tagList: {maxTags: 0}\n",
                "tagpilot.yaml:2:11: registry \"a.example\": tagList.maxPages and tagList.maxTags must be at least 1",
            ),
            (
                "registries:\n  - host: a.example\n    tagList: {maxPage: 2}\n",
                "unknown field `maxPage`",
            ),
            (
                "registries:\n  - host: a.example\n    tagList: {timeout: 0s}\n",
                "more than zero",
            ),
        ] {
            let err = parse(path, text).unwrap_err().to_string();
            assert!(err.contains(want), "{text}: {err}");
        }
    }

    #[test]
    fn an_empty_config_means_defaults() {
        let c = parse(Path::new("tagpilot.yaml"), "# nothing yet\n").unwrap();
        assert!(c.registries.is_empty());
        assert!(matches!(c.policies, PolicySource::Directory(ref d) if d == Path::new("policies")));
    }

    #[test]
    fn unknown_keys_are_errors_with_file_line_and_column() {
        let err = parse(
            Path::new("conf/tagpilot.yaml"),
            "registries: []\npolicy: p/\n",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("conf/tagpilot.yaml:2:1: unknown field `policy`"),
            "{err}"
        );
    }

    #[test]
    fn applications_alone_need_no_policies_directory_but_a_named_one_must_exist() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tagpilot.yaml");
        std::fs::write(
            &path,
            "applications:\n  fromGit: [{paths: [apps/*.yaml]}]\n",
        )
        .unwrap();
        let c = load(&path).unwrap();
        assert!(matches!(&c.policies, PolicySource::Files(f) if f.is_empty()));
        std::fs::write(
            &path,
            "policies: policies\napplications:\n  fromGit: [{paths: [apps/*.yaml]}]\n",
        )
        .unwrap();
        let c = load(&path).unwrap();
        assert!(c.policies_written);
        assert!(matches!(c.policies, PolicySource::Directory(_)));
    }
}
