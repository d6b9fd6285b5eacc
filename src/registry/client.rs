//! [`RegistryClient`]: the HTTP side of the registry edge. Every request goes through
//! [`RegistryClient::send`], which waits for the registry's rate limiter, counts the request,
//! answers auth challenges (Basic, or the Bearer token flow, anonymous tokens included) and
//! retries 429/503 after `Retry-After`. Why this is not `oci-client`'s request path: see the
//! module doc of [`crate::registry`].

use std::collections::HashMap;
use std::ffi::OsString;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use oci_client::manifest::{
    IMAGE_MANIFEST_LIST_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE, ImageIndexEntry,
    OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciManifest,
};
use reqwest::header::{ACCEPT, HeaderMap, LINK, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use tokio::sync::{OnceCell, Semaphore};
use tracing::{debug, instrument, warn};

use super::auth::{
    Challenge, Credential, CredentialResolver, DockerConfigSource, TokenResponse, normalise_host,
    parse_challenge,
};
use super::memo::Memo;
use super::tags::{TagPager, link_next};
use super::{ImageInfo, Registry, RegistryError};
use crate::config::{Config, RegistryConfig};
use crate::image::{Platform, Repository, is_valid_digest};

/// All four manifest media types: without them distribution 2.8 answers 404 for OCI manifests and
/// converts Docker schema2 to schema1, which has another digest.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
     application/vnd.oci.image.manifest.v1+json, \
     application/vnd.docker.distribution.manifest.list.v2+json, \
     application/vnd.docker.distribution.manifest.v2+json";

/// The annotation builders put the build time in.
const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";

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
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            registries: Vec::new(),
            base_dir: PathBuf::from("."),
            docker_config: DockerConfigSource::FromEnvironment,
            helper_path: None,
            page_size: 1000,
            max_retries: 3,
            max_retry_wait: Duration::from_secs(60),
            max_concurrency_per_registry: 16,
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(60),
            credentials: HashMap::new(),
        }
    }
}

impl ClientOptions {
    /// The registries of `tagpilot.yaml`, with Docker's `config.json` from the environment.
    pub fn from_config(config: &Config) -> Self {
        ClientOptions {
            registries: config.registries.clone(),
            base_dir: config.base_dir().to_path_buf(),
            ..ClientOptions::default()
        }
    }
}

/// HTTP requests sent to registries so far, by kind. `total` is what the benchmark reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestStats {
    pub total: u64,
    pub tag_lists: u64,
    /// `HEAD` and `GET` of manifests.
    pub manifests: u64,
    pub blobs: u64,
    /// Requests to token servers.
    pub tokens: u64,
}

#[derive(Default)]
struct Counters {
    tag_lists: AtomicU64,
    manifests: AtomicU64,
    blobs: AtomicU64,
    tokens: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    TagList,
    Manifest,
    Blob,
    Token,
}

/// What a request is after, for 404 messages.
enum Target<'a> {
    Tags,
    Manifest(&'a str),
    Blob(&'a str),
}

/// A parsed manifest with its digest-verified bytes' media type.
type SharedManifest = Arc<OciManifest>;

/// What tagpilot needs from an image config blob. Not `oci_client::config::ConfigFile`, which
/// requires `rootfs` and `architecture` and so would reject configs that lack fields tagpilot never
/// reads.
#[derive(Debug, Clone, Default, Deserialize)]
struct ConfigFacts {
    #[serde(default)]
    created: Option<String>,
    #[serde(default)]
    os: Option<String>,
    #[serde(default)]
    architecture: Option<String>,
    #[serde(default)]
    variant: Option<String>,
}

/// The registry client tagpilot uses: see the module doc of [`crate::registry`].
pub struct RegistryClient {
    http: reqwest::Client,
    options: ClientOptions,
    credentials: CredentialResolver,
    registries: Mutex<HashMap<String, Arc<RegistryState>>>,
    counters: Counters,
    tags: Memo<Repository, Result<Vec<String>, RegistryError>>,
    tag_digests: Memo<(Repository, String), Result<String, RegistryError>>,
    manifests: Memo<(Repository, String), Result<SharedManifest, RegistryError>>,
    configs: Memo<(Repository, String), Result<ConfigFacts, RegistryError>>,
}

/// What the client knows about one registry host.
struct RegistryState {
    host: String,
    /// `http://host` or `https://host`.
    base: String,
    limiter: Option<DefaultDirectRateLimiter>,
    in_flight: Semaphore,
    /// Resolved on the first challenge; `Err` holds a message without secrets.
    credential: OnceCell<Result<Option<Credential>, String>>,
    /// Learned from the first 401, so later requests (other repositories included) authenticate
    /// up front instead of each collecting its own 401.
    scheme: Mutex<Scheme>,
    /// Bearer tokens by scope; the per-scope lock makes concurrent requests share one token fetch.
    tokens: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<CachedToken>>>>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Scheme {
    Anonymous,
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

struct CachedToken {
    token: String,
    valid_until: Instant,
}

/// What one request was sent with, to word a 401 and to know whether retrying could help.
enum Sent {
    Nothing,
    Basic(Credential),
    Token { credential: Option<Credential> },
}

// === impl RegistryClient ===

impl RegistryClient {
    pub fn new(options: ClientOptions) -> Result<Self, RegistryError> {
        let http = reqwest::Client::builder()
            .user_agent(concat!("tagpilot/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(options.connect_timeout)
            .timeout(options.request_timeout)
            .build()
            .map_err(|e| RegistryError::Http {
                registry: "(none)".into(),
                repository: "(none)".into(),
                status: 0,
                detail: format!("cannot set up the HTTP client: {e}"),
            })?;
        let credentials = CredentialResolver::new(
            &options.registries,
            &options.base_dir,
            options.docker_config.clone(),
            options.helper_path.clone(),
        )
        .with_given(&options.credentials);
        Ok(RegistryClient {
            http,
            options,
            credentials,
            registries: Mutex::new(HashMap::new()),
            counters: Counters::default(),
            tags: Memo::default(),
            tag_digests: Memo::default(),
            manifests: Memo::default(),
            configs: Memo::default(),
        })
    }

    /// A client for the registries of `tagpilot.yaml`, reading Docker's `config.json` from the
    /// environment when a registry asks for credentials that `tagpilot.yaml` does not give.
    pub fn from_config(config: &Config) -> Result<Self, RegistryError> {
        RegistryClient::new(ClientOptions::from_config(config))
    }

    /// HTTP requests sent to registries and token servers so far.
    pub fn request_count(&self) -> u64 {
        self.request_stats().total
    }

    pub fn request_stats(&self) -> RequestStats {
        let c = &self.counters;
        let (tag_lists, manifests, blobs, tokens) = (
            c.tag_lists.load(Ordering::Relaxed),
            c.manifests.load(Ordering::Relaxed),
            c.blobs.load(Ordering::Relaxed),
            c.tokens.load(Ordering::Relaxed),
        );
        RequestStats {
            total: tag_lists + manifests + blobs + tokens,
            tag_lists,
            manifests,
            blobs,
            tokens,
        }
    }

    fn count(&self, kind: Kind) {
        let counter = match kind {
            Kind::TagList => &self.counters.tag_lists,
            Kind::Manifest => &self.counters.manifests,
            Kind::Blob => &self.counters.blobs,
            Kind::Token => &self.counters.tokens,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn registry(&self, host: &str) -> Arc<RegistryState> {
        let mut registries = self.registries.lock().expect("registry map lock poisoned");
        registries
            .entry(host.to_string())
            .or_insert_with(|| {
                let config = self
                    .options
                    .registries
                    .iter()
                    .find(|r| normalise_host(&r.host) == host);
                let scheme = if config.is_some_and(|c| c.insecure) {
                    "http"
                } else {
                    "https"
                };
                let limiter = config.and_then(|c| c.rate_limit).and_then(rate_limiter);
                Arc::new(RegistryState {
                    host: host.to_string(),
                    base: format!("{scheme}://{host}"),
                    limiter,
                    in_flight: Semaphore::new(self.options.max_concurrency_per_registry.max(1)),
                    credential: OnceCell::new(),
                    scheme: Mutex::new(Scheme::Anonymous),
                    tokens: Mutex::new(HashMap::new()),
                })
            })
            .clone()
    }

    // --- tags ---

    async fn fetch_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        let reg = self.registry(&repo.registry);
        let base = Url::parse(&format!("{}/v2/{}/tags/list", reg.base, repo.path))
            .map_err(|e| malformed(repo, "repository URL", e.to_string()))?;
        let mut pager = TagPager::new(base, self.options.page_size.max(1));
        while let Some(url) = pager.next_url().cloned() {
            let resp = self
                .send(
                    &reg,
                    repo,
                    Kind::TagList,
                    Method::GET,
                    url.clone(),
                    None,
                    Target::Tags,
                )
                .await?;
            let link = link_next(
                resp.headers()
                    .get_all(LINK)
                    .iter()
                    .filter_map(|v| v.to_str().ok()),
            );
            let body = resp.bytes().await.map_err(|e| unreachable(repo, &e))?;
            #[derive(Deserialize)]
            struct TagPage {
                #[serde(default)]
                tags: Option<Vec<String>>,
            }
            let page: TagPage = serde_json::from_slice(&body)
                .map_err(|e| malformed(repo, "tag list", e.to_string()))?;
            let next = match link {
                Some(link) => {
                    let next = url
                        .join(&link)
                        .map_err(|e| malformed(repo, "tag list Link header", e.to_string()))?;
                    // Credentials go to the registry only; a Link elsewhere is a registry bug.
                    if next.origin() != url.origin() {
                        return Err(malformed(
                            repo,
                            "tag list Link header",
                            format!("it points outside the registry: {next}"),
                        ));
                    }
                    Some(next)
                }
                None => None,
            };
            pager.accept(page.tags.unwrap_or_default(), next);
        }
        if pager.stopped_on_repeat {
            warn!("the registry repeated a page of tags; stopped paginating");
        }
        Ok(pager.into_tags())
    }

    // --- manifests ---

    /// The digest a tag points at: `HEAD` with every manifest type accepted, or, when the registry
    /// sends no `Docker-Content-Digest`, `GET` and hash the bytes.
    async fn tag_digest(&self, repo: &Repository, tag: &str) -> Result<String, RegistryError> {
        if is_valid_digest(tag) {
            return Ok(tag.to_string());
        }
        self.tag_digests
            .get_or_init((repo.clone(), tag.to_string()), || async {
                let reg = self.registry(&repo.registry);
                let url = self.manifest_url(&reg, repo, tag)?;
                let what = format!("tag {tag}");
                let resp = self
                    .send(
                        &reg,
                        repo,
                        Kind::Manifest,
                        Method::HEAD,
                        url.clone(),
                        Some(MANIFEST_ACCEPT),
                        Target::Manifest(&what),
                    )
                    .await?;
                if let Some(digest) = content_digest(resp.headers()) {
                    return Ok(digest);
                }
                let resp = self
                    .send(
                        &reg,
                        repo,
                        Kind::Manifest,
                        Method::GET,
                        url,
                        Some(MANIFEST_ACCEPT),
                        Target::Manifest(&what),
                    )
                    .await?;
                let body = resp.bytes().await.map_err(|e| unreachable(repo, &e))?;
                let digest = format!("sha256:{}", sha256_hex(&body));
                let manifest = parse_manifest(repo, &body)?;
                self.manifests
                    .get_or_init((repo.clone(), digest.clone()), || async { Ok(manifest) })
                    .await?;
                Ok(digest)
            })
            .await
    }

    /// The manifest with this digest, verified against it.
    async fn manifest(
        &self,
        repo: &Repository,
        digest: &str,
    ) -> Result<SharedManifest, RegistryError> {
        self.manifests
            .get_or_init((repo.clone(), digest.to_string()), || async {
                let reg = self.registry(&repo.registry);
                let url = self.manifest_url(&reg, repo, digest)?;
                let what = format!("manifest {digest}");
                let resp = self
                    .send(
                        &reg,
                        repo,
                        Kind::Manifest,
                        Method::GET,
                        url,
                        Some(MANIFEST_ACCEPT),
                        Target::Manifest(&what),
                    )
                    .await?;
                let body = resp.bytes().await.map_err(|e| unreachable(repo, &e))?;
                verify_digest(repo, "manifest", digest, &body)?;
                parse_manifest(repo, &body)
            })
            .await
    }

    async fn config(&self, repo: &Repository, digest: &str) -> Result<ConfigFacts, RegistryError> {
        self.configs
            .get_or_init((repo.clone(), digest.to_string()), || async {
                let reg = self.registry(&repo.registry);
                let url = Url::parse(&format!("{}/v2/{}/blobs/{digest}", reg.base, repo.path))
                    .map_err(|e| malformed(repo, "blob URL", e.to_string()))?;
                let what = format!("config blob {digest}");
                let resp = self
                    .send(
                        &reg,
                        repo,
                        Kind::Blob,
                        Method::GET,
                        url,
                        None,
                        Target::Blob(&what),
                    )
                    .await?;
                let body = resp.bytes().await.map_err(|e| unreachable(repo, &e))?;
                verify_digest(repo, "config blob", digest, &body)?;
                serde_json::from_slice(&body)
                    .map_err(|e| malformed(repo, "image config", e.to_string()))
            })
            .await
    }

    fn manifest_url(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        reference: &str,
    ) -> Result<Url, RegistryError> {
        Url::parse(&format!(
            "{}/v2/{}/manifests/{reference}",
            reg.base, repo.path
        ))
        .map_err(|e| malformed(repo, "manifest URL", e.to_string()))
    }

    /// Build time and platform of one single-platform image manifest.
    async fn image_facts(
        &self,
        repo: &Repository,
        manifest: &oci_client::manifest::OciImageManifest,
    ) -> Result<(Option<jiff::Timestamp>, Option<Platform>), RegistryError> {
        let config = self.config(repo, &manifest.config.digest).await?;
        let created = config
            .created
            .as_deref()
            .and_then(|c| parse_created(repo, c))
            .or_else(|| annotation_created(repo, manifest.annotations.as_ref()));
        let platform = match (&config.os, &config.architecture) {
            (Some(os), Some(arch)) if !os.is_empty() && !arch.is_empty() => Some(Platform {
                os: os.clone(),
                architecture: arch.clone(),
                variant: config.variant.clone().filter(|v| !v.is_empty()),
            }),
            _ => None,
        };
        Ok((created, platform))
    }

    async fn inspect_digest(
        &self,
        repo: &Repository,
        digest: String,
        wanted: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        let manifest = self.manifest(repo, &digest).await?;
        let wants = |p: &Platform| {
            wanted.is_empty()
                || wanted
                    .iter()
                    .any(|w| w.matches(&p.os, &p.architecture, p.variant.as_deref()))
        };
        match &*manifest {
            OciManifest::Image(image) => {
                let (created, platform) = self.image_facts(repo, image).await?;
                let created = if platform.as_ref().is_none_or(wants) {
                    created
                } else {
                    None
                };
                Ok(ImageInfo {
                    digest,
                    created,
                    platforms: platform.into_iter().collect(),
                })
            }
            OciManifest::ImageIndex(index) => {
                let entries: Vec<(&ImageIndexEntry, Option<Platform>)> = index
                    .manifests
                    .iter()
                    .filter(|e| !is_attestation(e))
                    .map(|e| (e, e.platform.as_ref().map(entry_platform)))
                    .collect();
                let mut platforms: Vec<Platform> = Vec::new();
                for p in entries.iter().filter_map(|(_, p)| p.clone()) {
                    if !platforms.contains(&p) {
                        platforms.push(p);
                    }
                }
                let mut created: Option<jiff::Timestamp> = None;
                for (entry, platform) in &entries {
                    let matches = match platform {
                        Some(p) => wants(p),
                        None => wanted.is_empty(),
                    };
                    if !matches {
                        continue;
                    }
                    // Nested indexes are legal but unused in practice; their build time is not
                    // worth the requests.
                    let OciManifest::Image(image) = &*self.manifest(repo, &entry.digest).await?
                    else {
                        continue;
                    };
                    let (entry_created, _) = self.image_facts(repo, image).await?;
                    created = created.max(entry_created);
                }
                let created =
                    created.or_else(|| annotation_created(repo, index.annotations.as_ref()));
                Ok(ImageInfo {
                    digest,
                    created,
                    platforms,
                })
            }
        }
    }

    // --- the HTTP exchange ---

    /// Sends one request to a registry: waits for the rate limiter, authenticates, counts, and
    /// retries a 401 once after learning the challenge and a 429/503 after `Retry-After`.
    /// Returns only successful responses; everything else becomes a [`RegistryError`].
    #[allow(clippy::too_many_arguments)]
    async fn send(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        kind: Kind,
        method: Method,
        url: Url,
        accept: Option<&str>,
        target: Target<'_>,
    ) -> Result<reqwest::Response, RegistryError> {
        let scope = format!("repository:{}:pull", repo.path);
        let mut answered_challenge = false;
        let mut rate_limited = 0u32;
        loop {
            let (sent, auth) = self.authorization(reg, repo, &scope).await?;
            let mut request = self.http.request(method.clone(), url.clone());
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            request = match &auth {
                Auth::None => request,
                Auth::Basic(c) => request.basic_auth(&c.username, Some(c.password())),
                Auth::Bearer(token) => request.bearer_auth(token),
            };
            let resp = {
                let _permit = reg
                    .in_flight
                    .acquire()
                    .await
                    .expect("semaphore never closed");
                if let Some(limiter) = &reg.limiter {
                    limiter.until_ready().await;
                }
                self.count(kind);
                debug!(%method, %url, "registry request");
                request.send().await.map_err(|e| unreachable(repo, &e))?
            };
            let status = resp.status();
            if status.is_success() {
                return Ok(resp);
            }
            match status {
                StatusCode::UNAUTHORIZED => {
                    let challenge = parse_challenge(
                        resp.headers()
                            .get_all(WWW_AUTHENTICATE)
                            .iter()
                            .filter_map(|v| v.to_str().ok()),
                    );
                    if !answered_challenge
                        && self.learn(reg, repo, &scope, challenge, &sent).await?
                    {
                        answered_challenge = true;
                        continue;
                    }
                    return Err(unauthorized(repo, &sent, None));
                }
                StatusCode::FORBIDDEN => {
                    let body = resp.bytes().await.unwrap_or_default();
                    let mut err = unauthorized(repo, &sent, None);
                    if let RegistryError::Unauthorized { detail, .. } = &mut err {
                        detail.push_str(&format!(" (HTTP 403: {})", excerpt(&body)));
                    }
                    return Err(err);
                }
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                    rate_limited += 1;
                    let retry_after = retry_after(resp.headers());
                    let give_up = |retry_after: Option<Duration>| RegistryError::RateLimited {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        status: status.as_u16(),
                        attempts: rate_limited,
                        retry_after: retry_after.map(|d| d.as_secs()),
                    };
                    if rate_limited > self.options.max_retries {
                        return Err(give_up(retry_after));
                    }
                    // Without Retry-After: 1 s, 2 s, 4 s…
                    let wait =
                        retry_after.unwrap_or(Duration::from_secs(1 << (rate_limited - 1).min(5)));
                    if wait > self.options.max_retry_wait {
                        return Err(give_up(retry_after));
                    }
                    warn!(
                        status = status.as_u16(),
                        wait_secs = wait.as_secs_f64(),
                        "registry asked to retry later"
                    );
                    tokio::time::sleep(wait).await;
                }
                StatusCode::NOT_FOUND => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(not_found(repo, &target, &body));
                }
                _ => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(RegistryError::Http {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        status: status.as_u16(),
                        detail: excerpt(&body),
                    });
                }
            }
        }
    }

    /// How to authenticate the next request to `reg` for `scope`, as far as the client knows.
    async fn authorization(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
    ) -> Result<(Sent, Auth), RegistryError> {
        let scheme = reg.scheme.lock().expect("scheme lock poisoned").clone();
        match scheme {
            Scheme::Anonymous => Ok((Sent::Nothing, Auth::None)),
            Scheme::Basic => match self.credential(reg, repo).await? {
                Some(c) => Ok((Sent::Basic(c.clone()), Auth::Basic(c))),
                None => Ok((Sent::Nothing, Auth::None)),
            },
            Scheme::Bearer { realm, service } => {
                let credential = self.credential(reg, repo).await?;
                let token = self
                    .token(
                        reg,
                        repo,
                        scope,
                        &realm,
                        service.as_deref(),
                        credential.as_ref(),
                    )
                    .await?;
                Ok((Sent::Token { credential }, Auth::Bearer(token)))
            }
        }
    }

    /// Takes in a 401's challenge. `Ok(true)` when a retry can succeed.
    async fn learn(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
        challenge: Option<Challenge>,
        sent: &Sent,
    ) -> Result<bool, RegistryError> {
        match challenge {
            Some(Challenge::Bearer { realm, service }) => {
                *reg.scheme.lock().expect("scheme lock poisoned") =
                    Scheme::Bearer { realm, service };
                if matches!(sent, Sent::Token { .. }) {
                    // The token was refused (expired early, or revoked): fetch a fresh one once.
                    let slot = token_slot(reg, scope);
                    *slot.lock().await = None;
                }
                Ok(true)
            }
            Some(Challenge::Basic) => {
                *reg.scheme.lock().expect("scheme lock poisoned") = Scheme::Basic;
                Ok(!matches!(sent, Sent::Basic(_)) && self.credential(reg, repo).await?.is_some())
            }
            None => Ok(false),
        }
    }

    async fn credential(
        &self,
        reg: &RegistryState,
        repo: &Repository,
    ) -> Result<Option<Credential>, RegistryError> {
        let auth_key = repo.auth_key().to_string();
        reg.credential
            .get_or_init(|| async { self.credentials.resolve(&reg.host, &auth_key).await })
            .await
            .clone()
            .map_err(|detail| RegistryError::Credentials {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                detail,
            })
    }

    /// A Bearer token for `scope`, from the cache or the token server.
    async fn token(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
        realm: &str,
        service: Option<&str>,
        credential: Option<&Credential>,
    ) -> Result<String, RegistryError> {
        let slot = token_slot(reg, scope);
        let mut cached = slot.lock().await;
        if let Some(t) = cached.as_ref().filter(|t| t.valid_until > Instant::now()) {
            return Ok(t.token.clone());
        }
        let mut url = Url::parse(realm)
            .map_err(|e| malformed(repo, "auth challenge realm", e.to_string()))?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        let mut request = self.http.get(url);
        if let Some(c) = credential {
            request = request.basic_auth(&c.username, Some(c.password()));
        }
        self.count(Kind::Token);
        debug!(realm, scope, "token request");
        let resp = request.send().await.map_err(|e| unreachable(repo, &e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| unreachable(repo, &e))?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let sent = Sent::Token {
                credential: credential.cloned(),
            };
            return Err(unauthorized(repo, &sent, Some(realm)));
        }
        if !status.is_success() {
            return Err(RegistryError::Http {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                status: status.as_u16(),
                detail: format!("token server {realm}: {}", excerpt(&body)),
            });
        }
        let answer: TokenResponse = serde_json::from_slice(&body)
            .map_err(|e| malformed(repo, "token response", e.to_string()))?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                malformed(
                    repo,
                    "token response",
                    "it holds neither `token` nor `access_token`".into(),
                )
            })?;
        // 60 s when absent (the distribution spec's default); renew at 90% of the lifetime.
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(60).max(1));
        *cached = Some(CachedToken {
            token: token.clone(),
            valid_until: Instant::now() + lifetime.mul_f64(0.9),
        });
        Ok(token)
    }
}

enum Auth {
    None,
    Basic(Credential),
    Bearer(String),
}

fn token_slot(reg: &RegistryState, scope: &str) -> Arc<tokio::sync::Mutex<Option<CachedToken>>> {
    reg.tokens
        .lock()
        .expect("token map lock poisoned")
        .entry(scope.to_string())
        .or_default()
        .clone()
}

impl Registry for RegistryClient {
    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path))]
    async fn list_tags(&self, repo: &Repository) -> Result<Vec<String>, RegistryError> {
        self.tags
            .get_or_init(repo.clone(), || self.fetch_tags(repo))
            .await
    }

    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path, reference = %reference))]
    async fn inspect(
        &self,
        repo: &Repository,
        reference: &str,
        platforms: &[Platform],
    ) -> Result<ImageInfo, RegistryError> {
        let digest = self.tag_digest(repo, reference).await?;
        self.inspect_digest(repo, digest, platforms).await
    }

    #[instrument(skip_all, fields(registry = %repo.registry, repository = %repo.path, reference = %reference))]
    async fn digest(&self, repo: &Repository, reference: &str) -> Result<String, RegistryError> {
        self.tag_digest(repo, reference).await
    }
}

// === helpers ===

fn rate_limiter(per_second: f64) -> Option<DefaultDirectRateLimiter> {
    if !per_second.is_finite() || per_second <= 0.0 {
        return None;
    }
    let burst = NonZeroU32::new(per_second.floor().clamp(1.0, u32::MAX as f64) as u32)?;
    let quota = Quota::with_period(Duration::from_secs_f64(1.0 / per_second))?.allow_burst(burst);
    Some(RateLimiter::direct(quota))
}

fn content_digest(headers: &HeaderMap) -> Option<String> {
    headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|d| is_valid_digest(d))
        .map(str::to_string)
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110).
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    let secs = at
        .duration_since(jiff::Timestamp::now())
        .as_secs_f64()
        .max(0.0);
    Some(Duration::from_secs_f64(secs.ceil()))
}

fn parse_manifest(repo: &Repository, body: &[u8]) -> Result<SharedManifest, RegistryError> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Versioned {
        #[serde(default)]
        schema_version: Option<u32>,
        #[serde(default)]
        media_type: Option<String>,
    }
    let versioned: Versioned =
        serde_json::from_slice(body).map_err(|e| malformed(repo, "manifest", e.to_string()))?;
    if versioned.schema_version == Some(1) {
        return Err(malformed(
            repo,
            "manifest",
            "Docker schema 1 manifests are not supported".into(),
        ));
    }
    if let Some(mt) = versioned.media_type.as_deref()
        && ![
            OCI_IMAGE_INDEX_MEDIA_TYPE,
            OCI_IMAGE_MEDIA_TYPE,
            IMAGE_MANIFEST_LIST_MEDIA_TYPE,
            IMAGE_MANIFEST_MEDIA_TYPE,
        ]
        .contains(&mt)
    {
        return Err(malformed(
            repo,
            "manifest",
            format!("unsupported media type {mt}"),
        ));
    }
    serde_json::from_slice(body)
        .map(Arc::new)
        .map_err(|e| malformed(repo, "manifest", e.to_string()))
}

fn verify_digest(
    repo: &Repository,
    what: &'static str,
    digest: &str,
    body: &[u8],
) -> Result<(), RegistryError> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Ok(());
    };
    let actual = sha256_hex(body);
    if actual != hex {
        return Err(malformed(
            repo,
            what,
            format!("its content has digest sha256:{actual}, not {digest}"),
        ));
    }
    Ok(())
}

pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn parse_created(repo: &Repository, value: &str) -> Option<jiff::Timestamp> {
    match value.parse::<jiff::Timestamp>() {
        // Reproducible builds (ko, nix, Bazel, `SOURCE_DATE_EPOCH=0`) write the Unix epoch: that
        // is "unknown", not "built in 1970", so the annotation gets its chance.
        Ok(ts) if ts == jiff::Timestamp::UNIX_EPOCH => None,
        Ok(ts) => Some(ts),
        Err(e) => {
            warn!(registry = %repo.registry, repository = %repo.path, value, "ignoring unparsable build time: {e}");
            None
        }
    }
}

fn annotation_created(
    repo: &Repository,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<jiff::Timestamp> {
    parse_created(repo, annotations?.get(CREATED_ANNOTATION)?)
}

fn entry_platform(p: &oci_client::manifest::Platform) -> Platform {
    Platform {
        os: p.os.to_string(),
        architecture: p.architecture.to_string(),
        variant: p.variant.clone().filter(|v| !v.is_empty()),
    }
}

/// BuildKit adds attestation manifests (`unknown/unknown`) to indexes; they are not images.
fn is_attestation(entry: &ImageIndexEntry) -> bool {
    let by_annotation = entry
        .annotations
        .as_ref()
        .and_then(|a| a.get("vnd.docker.reference.type"))
        .is_some_and(|t| t == "attestation-manifest");
    let unknown = entry
        .platform
        .as_ref()
        .is_some_and(|p| p.os.to_string() == "unknown");
    by_annotation || unknown
}

fn unreachable(repo: &Repository, e: &reqwest::Error) -> RegistryError {
    // reqwest's Display stops at the outermost cause; the chain says "connection refused".
    let mut detail = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail.push_str(": ");
        detail.push_str(&s.to_string());
        source = s.source();
    }
    RegistryError::Unreachable {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        detail,
    }
}

fn malformed(repo: &Repository, what: &'static str, detail: String) -> RegistryError {
    RegistryError::Malformed {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        what,
        detail,
    }
}

fn unauthorized(repo: &Repository, sent: &Sent, token_realm: Option<&str>) -> RegistryError {
    let who = match sent {
        Sent::Basic(c)
        | Sent::Token {
            credential: Some(c),
        } => {
            format!(
                "the credentials of user {} (from {}) were rejected",
                c.username, c.source
            )
        }
        Sent::Nothing | Sent::Token { credential: None } => format!(
            "anonymous access was refused and no credentials were found for {} \
             (add credentials to tagpilot.yaml or run `docker login {}`)",
            repo.registry,
            repo.auth_key()
        ),
    };
    let detail = match token_realm {
        Some(realm) => format!("token server {realm}: {who}"),
        None => who,
    };
    RegistryError::Unauthorized {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        detail,
    }
}

fn not_found(repo: &Repository, target: &Target<'_>, body: &[u8]) -> RegistryError {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(Deserialize)]
    struct ErrorEntry {
        code: String,
    }
    let name_unknown = serde_json::from_slice::<Errors>(body)
        .is_ok_and(|e| e.errors.iter().any(|e| e.code == "NAME_UNKNOWN"));
    match target {
        Target::Tags => RegistryError::RepositoryNotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
        },
        _ if name_unknown => RegistryError::RepositoryNotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
        },
        Target::Manifest(what) | Target::Blob(what) => RegistryError::NotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
            reference: what.to_string(),
        },
    }
}

/// The start of a response body for an error message: enough to see the registry's complaint.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_header_lists_the_four_manifest_types() {
        for mt in [
            OCI_IMAGE_INDEX_MEDIA_TYPE,
            OCI_IMAGE_MEDIA_TYPE,
            IMAGE_MANIFEST_LIST_MEDIA_TYPE,
            IMAGE_MANIFEST_MEDIA_TYPE,
        ] {
            assert!(MANIFEST_ACCEPT.split(", ").any(|a| a == mt), "{mt}");
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&h),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        let soon = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120);
        let printed = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&soon)
            .unwrap();
        h.insert(RETRY_AFTER, printed.parse().unwrap());
        let got = retry_after(&h).unwrap();
        assert!(
            got > Duration::from_secs(100) && got <= Duration::from_secs(121),
            "{got:?}"
        );
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn epoch_zero_build_times_are_unknown() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        assert_eq!(parse_created(&repo, "1970-01-01T00:00:00Z"), None);
        assert_eq!(
            parse_created(&repo, "2024-01-01T00:00:00Z"),
            Some("2024-01-01T00:00:00Z".parse().unwrap())
        );
        assert_eq!(parse_created(&repo, "yesterday"), None);
    }

    #[test]
    fn schema1_and_unknown_media_types_are_malformed_not_guessed() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let err = parse_manifest(&repo, br#"{"schemaVersion": 1, "name": "p"}"#).unwrap_err();
        assert_eq!(err.metric_label(), "malformed_response");
        assert!(err.to_string().contains("schema 1"), "{err}");
        let err = parse_manifest(&repo, br#"{"schemaVersion": 2, "mediaType": "text/html"}"#)
            .unwrap_err();
        assert!(err.to_string().contains("text/html"), "{err}");
    }

    #[test]
    fn rate_limits_become_governor_quotas() {
        assert!(rate_limiter(0.0).is_none());
        assert!(rate_limiter(f64::NAN).is_none());
        let l = rate_limiter(2.0).unwrap();
        assert!(
            l.check().is_ok() && l.check().is_ok(),
            "a burst of the per-second rate"
        );
        assert!(l.check().is_err());
        assert!(rate_limiter(0.5).unwrap().check().is_ok());
    }

    #[test]
    fn error_messages_name_registry_and_repository_and_never_the_password() {
        let repo = Repository {
            registry: "127.0.0.1:5000".into(),
            path: "shop/api".into(),
        };
        let sent = Sent::Basic(Credential::new("bot", "hunter2", "tagpilot.yaml"));
        let msg = unauthorized(&repo, &sent, None).to_string();
        assert!(
            msg.contains("127.0.0.1:5000") && msg.contains("shop/api") && msg.contains("bot"),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");
        let msg = unauthorized(&repo, &Sent::Nothing, None).to_string();
        assert!(msg.contains("no credentials"), "{msg}");
    }
}
