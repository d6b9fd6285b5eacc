//! A real registry for tests: the Debian `docker-registry` (CNCF distribution 2.8) on
//! `127.0.0.1:<free port>` with fresh storage in a temp directory, killed on drop.
//!
//! ```ignore
//! use crate::support::registry::{Auth, ImageSpec, IndexSpec, TestRegistry};
//!
//! let reg = TestRegistry::start(Auth::None).await;          // or Auth::basic(), Auth::token()
//! let digest = reg.push_image("shop/api", "1.2.3", ImageSpec::default().created("2024-01-01T00:00:00Z")).await;
//! let index = reg
//!     .push_index("shop/api", "1.3.0", IndexSpec::new()
//!         .platform("linux/amd64", ImageSpec::default().created("2024-02-01T00:00:00Z"))
//!         .platform("linux/arm64", ImageSpec::default().created("2024-03-01T00:00:00Z")))
//!     .await;
//! reg.host();               // "127.0.0.1:PORT", as written in image references
//! reg.image("shop/api");    // "127.0.0.1:PORT/shop/api"
//! reg.registry_config();    // a `tagpilot.yaml` registries entry: insecure, credentials if any
//! reg.registries_yaml();    // the same as YAML lines for a `tagpilot.yaml` written by a test
//! reg.client();             // a RegistryClient that never reads the real ~/.docker/config.json
//! ```
//!
//! Modes: [`Auth::None`] (anonymous), [`Auth::basic`] (htpasswd with a bcrypt entry made by
//! `htpasswd -B`), [`Auth::token`] and [`Auth::public_token`] (the registry's `auth.token` with a
//! token server run here: an ES256 key and self-signed certificate from `rcgen`, JWTs signed with
//! `jsonwebtoken`, the certificate in the JWT's `x5c` header and in the registry's
//! `rootcertbundle`). Credentials for the authenticated modes are [`TestRegistry::user`] and
//! [`TestRegistry::password`]; the password is also in [`TestRegistry::password_file`], which
//! [`TestRegistry::registry_config`] points `passwordFile` at.
//!
//! Pushes go through `oci-client`, so the registry sees what a real client sends. Every image
//! gets a unique layer, so two pushes with different specs have different digests.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use reqwest::header::HeaderValue;
use serde_json::json;
use sha2::{Digest, Sha256};
use tagpilot::config::{Credentials, RegistryConfig};
use tagpilot::image::Repository;
use tagpilot::registry::{ClientOptions, DockerConfigSource, RegistryClient};

const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
const SERVICE: &str = "tagpilot-test-registry";
const ISSUER: &str = "tagpilot-test-token-issuer";

/// How the registry authenticates pulls and pushes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// No authentication at all.
    None,
    /// htpasswd: the registry challenges with `Basic`.
    Basic { user: String, password: String },
    /// Token auth: the registry challenges with `Bearer` and the harness's token server issues
    /// tokens. With `anonymous_pull`, requests without credentials get pull tokens (like public
    /// images on GHCR); without it they get tokens granting nothing.
    Token {
        user: String,
        password: String,
        anonymous_pull: bool,
    },
}

impl Auth {
    pub fn basic() -> Self {
        Auth::Basic {
            user: "tester".into(),
            password: "basic-s3cret".into(),
        }
    }

    pub fn token() -> Self {
        Auth::Token {
            user: "tester".into(),
            password: "token-s3cret".into(),
            anonymous_pull: false,
        }
    }

    pub fn public_token() -> Self {
        Auth::Token {
            user: "tester".into(),
            password: "token-s3cret".into(),
            anonymous_pull: true,
        }
    }

    fn credentials(&self) -> Option<(&str, &str)> {
        match self {
            Auth::None => None,
            Auth::Basic { user, password } | Auth::Token { user, password, .. } => {
                Some((user, password))
            }
        }
    }
}

/// One single-platform image to push. `ImageSpec::default()` is a linux/amd64 OCI image whose
/// config has no `created`.
#[derive(Debug, Clone)]
pub struct ImageSpec {
    created: Option<String>,
    platform: String,
    annotations: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    docker: bool,
}

impl Default for ImageSpec {
    fn default() -> Self {
        ImageSpec {
            created: None,
            platform: "linux/amd64".into(),
            annotations: BTreeMap::new(),
            labels: BTreeMap::new(),
            docker: false,
        }
    }
}

impl ImageSpec {
    /// The config blob's `created` (RFC 3339).
    pub fn created(mut self, created: &str) -> Self {
        self.created = Some(created.into());
        self
    }

    /// `os/arch[/variant]` written into the config blob (and, in an index, the entry).
    pub fn platform(mut self, platform: &str) -> Self {
        self.platform = platform.into();
        self
    }

    /// A manifest annotation, e.g. `org.opencontainers.image.created`.
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// A label in the config blob (`config.Labels`), as `docker build --label` writes it.
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.labels.insert(key.into(), value.into());
        self
    }

    /// Docker schema2 media types instead of OCI ones.
    pub fn docker(mut self) -> Self {
        self.docker = true;
        self
    }
}

/// A multi-platform image: an OCI index (or a Docker manifest list with [`IndexSpec::docker`]).
#[derive(Debug, Clone, Default)]
pub struct IndexSpec {
    entries: Vec<ImageSpec>,
    annotations: BTreeMap<String, String>,
    docker: bool,
}

impl IndexSpec {
    pub fn new() -> Self {
        IndexSpec::default()
    }

    /// Adds an entry for `platform` (`os/arch[/variant]`); the spec's own platform is replaced.
    pub fn platform(mut self, platform: &str, image: ImageSpec) -> Self {
        self.entries.push(image.platform(platform));
        self
    }

    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.annotations.insert(key.into(), value.into());
        self
    }

    /// A Docker manifest list of Docker schema2 images.
    pub fn docker(mut self) -> Self {
        self.docker = true;
        self
    }
}

/// A running `docker-registry`. Dropping it kills the registry (and the token server).
pub struct TestRegistry {
    child: Child,
    port: u16,
    auth: Auth,
    dir: tempfile::TempDir,
    pusher: Client,
    token_server: Option<TokenServer>,
}

impl TestRegistry {
    /// Starts a registry and waits until it answers `/v2/`. Panics with the registry's log if it
    /// does not come up.
    pub async fn start(auth: Auth) -> Self {
        Self::start_with(auth, "").await
    }

    /// Like [`TestRegistry::start`], with `extra` appended to the registry's `config.yml` (a
    /// `notifications:` section, say).
    pub async fn start_with(auth: Auth, extra: &str) -> Self {
        Self::start_inner(auth, extra, false).await
    }

    /// Like [`TestRegistry::start`], with the registry's access log on: one line per request it
    /// answered, read back with [`TestRegistry::requests`]. The registry's own count of what it
    /// was asked, independent of tagpilot's.
    pub async fn start_with_access_log(auth: Auth) -> Self {
        Self::start_inner(auth, "", true).await
    }

    async fn start_inner(auth: Auth, extra: &str, access_log: bool) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let token_server = match &auth {
            Auth::Token {
                user,
                password,
                anonymous_pull,
            } => Some(TokenServer::start(dir.path(), user, password, *anonymous_pull).await),
            _ => None,
        };
        if let Some((_, password)) = auth.credentials() {
            std::fs::write(dir.path().join("password"), format!("{password}\n")).unwrap();
        }
        if let Auth::Basic { user, password } = &auth {
            let out = Command::new("htpasswd")
                .args(["-Bbn", user, password])
                .output()
                .expect("htpasswd (apache2-utils)");
            assert!(
                out.status.success(),
                "htpasswd failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            std::fs::write(dir.path().join("htpasswd"), &out.stdout).unwrap();
        }
        // docker-registry binds its own port and takes no listener (it has no socket
        // activation), so it starts on a port chosen below the OS's ephemeral range, where no
        // other test's bind to port 0 (nor any outgoing connection) lands. A port taken anyway,
        // by another registry that chose the same one or by a service of the machine, shows in
        // the registry's log as "address already in use" and costs a retry on another port;
        // any other failure fails the test at once, with the log.
        for _ in 0..BIND_ATTEMPTS {
            let port = chosen_port();
            // Every response carries this id, so a registry of another test that happens to get
            // the same port is never mistaken for ours.
            let id = unique();
            let mut config =
                registry_config_yaml(dir.path(), port, &id, &auth, token_server.as_ref());
            if access_log {
                config = config.replace(
                    "accesslog:\n    disabled: true",
                    "accesslog:\n    disabled: false",
                );
            }
            config.push_str(extra);
            let config_path = dir.path().join("config.yml");
            std::fs::write(&config_path, config).unwrap();
            let log_path = dir.path().join(format!("registry-{port}.log"));
            let log = std::fs::File::create(&log_path).unwrap();
            let mut child = Command::new(REGISTRY_BIN)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("start /usr/bin/docker-registry (Debian package docker-registry)");
            if wait_ready(&mut child, port, &id).await {
                return TestRegistry {
                    child,
                    port,
                    auth,
                    dir,
                    pusher: pusher(),
                    token_server,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            assert!(
                log.contains("address already in use"),
                "docker-registry did not start on port {port}:\n{log}"
            );
        }
        panic!("docker-registry found {BIND_ATTEMPTS} chosen ports taken");
    }

    /// `127.0.0.1:PORT`, as written in image references and in `tagpilot.yaml`'s `host`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT/<path>`.
    pub fn image(&self, path: &str) -> String {
        format!("{}/{path}", self.host())
    }

    pub fn repository(&self, path: &str) -> Repository {
        Repository {
            registry: self.host(),
            path: path.into(),
        }
    }

    /// The user of the authenticated modes (`None` for [`Auth::None`]).
    pub fn user(&self) -> Option<&str> {
        self.auth.credentials().map(|(u, _)| u)
    }

    pub fn password(&self) -> Option<&str> {
        self.auth.credentials().map(|(_, p)| p)
    }

    /// A file holding the password (for `passwordFile`), in the registry's temp directory.
    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("password")
    }

    /// The request lines (`GET /v2/shop/api/tags/list`) the registry logged so far, without the
    /// pushes of this harness (which go to `/blobs/uploads/` and `PUT`). Needs
    /// [`TestRegistry::start_with_access_log`].
    pub fn requests(&self) -> Vec<String> {
        let log =
            std::fs::read_to_string(self.dir.path().join(format!("registry-{}.log", self.port)))
                .unwrap_or_default();
        log.lines()
            .filter_map(|l| {
                let start = l.find('"')? + 1;
                let end = start + l[start..].find(" HTTP/")?;
                Some(l[start..end].to_string())
            })
            .filter(|r| r.starts_with("GET ") || r.starts_with("HEAD "))
            .collect()
    }

    /// The registry's temp directory; tests may put their own files here.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Requests the token server has answered (0 without token auth).
    pub fn token_requests(&self) -> usize {
        self.token_server
            .as_ref()
            .map_or(0, |t| t.requests.load(Ordering::SeqCst))
    }

    /// The `tagpilot.yaml` registries entry for this registry: `insecure: true` (plain HTTP) and,
    /// for the authenticated modes, the right credentials via `passwordFile`.
    pub fn registry_config(&self) -> RegistryConfig {
        RegistryConfig {
            host: self.host(),
            insecure: true,
            credentials: self.user().map(|user| Credentials {
                username: user.into(),
                password_env: None,
                password_file: Some(self.password_file()),
            }),
            rate_limit: None,
            timeout: None,
            tag_list: Default::default(),
        }
    }

    /// The same entry as YAML, indented for a `registries:` list.
    pub fn registries_yaml(&self) -> String {
        let mut yaml = format!("  - host: {}\n    insecure: true\n", self.host());
        if let Some(user) = self.user() {
            yaml.push_str(&format!(
                "    credentials:\n      username: {user}\n      passwordFile: {}\n",
                self.password_file().display()
            ));
        }
        yaml
    }

    /// Client options that talk to this registry and never read the real `~/.docker/config.json`
    /// or run credential helpers from the real `PATH`.
    pub fn client_options(&self, registries: Vec<RegistryConfig>) -> ClientOptions {
        ClientOptions {
            registries,
            base_dir: self.dir.path().to_path_buf(),
            docker_config: DockerConfigSource::Disabled,
            helper_path: Some(Default::default()),
            ..ClientOptions::default()
        }
    }

    /// A client with [`TestRegistry::registry_config`].
    pub fn client(&self) -> RegistryClient {
        RegistryClient::new(self.client_options(vec![self.registry_config()])).expect("client")
    }

    fn push_auth(&self) -> RegistryAuth {
        match self.auth.credentials() {
            Some((u, p)) => RegistryAuth::Basic(u.into(), p.into()),
            None => RegistryAuth::Anonymous,
        }
    }

    /// Pushes a single-platform image as `path:tag` and returns its manifest digest.
    pub async fn push_image(&self, path: &str, tag: &str, spec: ImageSpec) -> String {
        let (bytes, media_type) = self.push_image_blobs(path, tag, &spec).await;
        self.put_manifest(path, Some(tag), &bytes, media_type).await
    }

    /// Pushes one image under many tags (one upload, then one manifest `PUT` per tag): the cheap
    /// way to give a repository a tag history when build times do not matter. Returns the digest
    /// every tag points at.
    pub async fn push_tags(&self, path: &str, tags: &[&str], spec: ImageSpec) -> String {
        let (bytes, media_type) = self.push_image_blobs(path, "shared", &spec).await;
        let mut digest = String::new();
        for tag in tags {
            digest = self.put_manifest(path, Some(tag), &bytes, media_type).await;
        }
        digest
    }

    /// Pushes a multi-platform image as `path:tag` (entries by digest first) and returns the
    /// index's digest.
    pub async fn push_index(&self, path: &str, tag: &str, spec: IndexSpec) -> String {
        let mut manifests = Vec::new();
        for (i, entry) in spec.entries.iter().enumerate() {
            let mut entry = entry.clone();
            entry.docker = spec.docker;
            let (bytes, media_type) = self
                .push_image_blobs(path, &format!("{tag}-{i}"), &entry)
                .await;
            let digest = self.put_manifest(path, None, &bytes, media_type).await;
            manifests.push(json!({
                "mediaType": media_type,
                "digest": digest,
                "size": bytes.len(),
                "platform": platform_json(&entry.platform),
            }));
        }
        let media_type = if spec.docker {
            oci_client::manifest::IMAGE_MANIFEST_LIST_MEDIA_TYPE
        } else {
            oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE
        };
        let mut index =
            json!({"schemaVersion": 2, "mediaType": media_type, "manifests": manifests});
        if !spec.annotations.is_empty() {
            index["annotations"] = json!(spec.annotations);
        }
        let bytes = serde_json::to_vec_pretty(&index).unwrap();
        self.put_manifest(path, Some(tag), &bytes, media_type).await
    }

    /// Pushes an artifact (a cosign `.sig` image, a Sigstore bundle referrer): the empty OCI
    /// config, one layer with its media type and annotations, and the manifest's own
    /// `artifactType` and `subject` when given; tagged `tag`, else by digest. Returns its digest.
    pub async fn push_artifact(&self, path: &str, tag: Option<&str>, artifact: Artifact) -> String {
        let reference = Reference::with_tag(self.host(), path.into(), "unused".into());
        self.pusher
            .store_auth_if_needed(&self.host(), &self.push_auth())
            .await;
        let config = b"{}".to_vec();
        let config_digest = sha256(&config);
        self.pusher
            .push_blob(&reference, config.clone(), &config_digest)
            .await
            .expect("push config");
        let layer_digest = sha256(&artifact.layer);
        self.pusher
            .push_blob(&reference, artifact.layer.clone(), &layer_digest)
            .await
            .expect("push layer");
        let media_type = oci_client::manifest::OCI_IMAGE_MEDIA_TYPE;
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": media_type,
            "config": {"mediaType": artifact.config_media_type, "digest": config_digest, "size": config.len()},
            "layers": [{
                "mediaType": artifact.layer_media_type,
                "digest": layer_digest,
                "size": artifact.layer.len(),
                "annotations": artifact.layer_annotations,
            }],
        });
        if let Some(t) = &artifact.artifact_type {
            manifest["artifactType"] = json!(t);
        }
        if let Some(subject) = &artifact.subject {
            manifest["subject"] = subject.clone();
        }
        let bytes = serde_json::to_vec_pretty(&manifest).unwrap();
        self.put_manifest(path, tag, &bytes, media_type).await
    }

    /// Pushes an OCI index as `tag`: the referrers tag schema's `sha256-<hex>` index, as cosign
    /// writes it on a registry without the referrers API (distribution 2.8). Returns its digest.
    pub async fn push_raw_index(&self, path: &str, tag: &str, index: &serde_json::Value) -> String {
        let bytes = serde_json::to_vec_pretty(index).unwrap();
        let media_type = oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE;
        self.put_manifest(path, Some(tag), &bytes, media_type).await
    }

    /// Deletes a manifest by digest (the registry runs with deletes enabled). Anonymous and
    /// Basic modes only.
    pub async fn delete_manifest(&self, path: &str, digest: &str) {
        let mut req = reqwest::Client::new().delete(format!(
            "http://{}/v2/{path}/manifests/{digest}",
            self.host()
        ));
        match &self.auth {
            Auth::None => {}
            Auth::Basic { user, password } => req = req.basic_auth(user, Some(password)),
            Auth::Token { .. } => {
                panic!("delete_manifest supports Auth::None and Auth::basic() only")
            }
        }
        let resp = req.send().await.expect("delete manifest");
        assert_eq!(
            resp.status().as_u16(),
            202,
            "delete {path}@{digest}: {:?}",
            resp.text().await
        );
    }

    /// Uploads an image's layer and config; returns the manifest bytes and media type, unpushed.
    async fn push_image_blobs(
        &self,
        path: &str,
        salt: &str,
        spec: &ImageSpec,
    ) -> (Vec<u8>, &'static str) {
        use oci_client::manifest::*;
        let reference = Reference::with_tag(self.host(), path.into(), "unused".into());
        self.pusher
            .store_auth_if_needed(&self.host(), &self.push_auth())
            .await;
        // Unique per push, so two images never share a digest by accident.
        let layer = format!("tagpilot test layer {path} {salt} {spec:?} {}", unique()).into_bytes();
        let layer_digest = sha256(&layer);
        self.pusher
            .push_blob(&reference, layer.clone(), &layer_digest)
            .await
            .expect("push layer");
        let (os, arch, variant) = split_platform(&spec.platform);
        let mut config = json!({
            "architecture": arch,
            "os": os,
            "config": {},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        });
        if let Some(v) = variant {
            config["variant"] = json!(v);
        }
        if let Some(created) = &spec.created {
            config["created"] = json!(created);
        }
        if !spec.labels.is_empty() {
            config["config"]["Labels"] = json!(spec.labels);
        }
        let config = serde_json::to_vec(&config).unwrap();
        let config_digest = sha256(&config);
        self.pusher
            .push_blob(&reference, config.clone(), &config_digest)
            .await
            .expect("push config");
        let (manifest_type, config_type, layer_type) = if spec.docker {
            (
                IMAGE_MANIFEST_MEDIA_TYPE,
                IMAGE_DOCKER_CONFIG_MEDIA_TYPE,
                IMAGE_DOCKER_LAYER_TAR_MEDIA_TYPE,
            )
        } else {
            (
                OCI_IMAGE_MEDIA_TYPE,
                IMAGE_CONFIG_MEDIA_TYPE,
                IMAGE_LAYER_MEDIA_TYPE,
            )
        };
        let mut manifest = json!({
            "schemaVersion": 2,
            "mediaType": manifest_type,
            "config": {"mediaType": config_type, "digest": config_digest, "size": config.len()},
            "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": layer.len()}],
        });
        if !spec.annotations.is_empty() {
            manifest["annotations"] = json!(spec.annotations);
        }
        (serde_json::to_vec_pretty(&manifest).unwrap(), manifest_type)
    }

    async fn put_manifest(
        &self,
        path: &str,
        tag: Option<&str>,
        bytes: &[u8],
        media_type: &str,
    ) -> String {
        let digest = sha256(bytes);
        let reference = match tag {
            Some(tag) => Reference::with_tag(self.host(), path.into(), tag.into()),
            None => Reference::with_digest(self.host(), path.into(), digest.clone()),
        };
        self.pusher
            .store_auth_if_needed(&self.host(), &self.push_auth())
            .await;
        self.pusher
            .push_manifest_raw(
                &reference,
                bytes.to_vec(),
                HeaderValue::from_str(media_type).unwrap(),
            )
            .await
            .unwrap_or_else(|e| panic!("push manifest {path}:{tag:?}: {e}"));
        digest
    }
}

/// What [`TestRegistry::push_artifact`] pushes.
#[derive(Debug, Clone)]
pub struct Artifact {
    pub config_media_type: String,
    pub layer: Vec<u8>,
    pub layer_media_type: String,
    pub layer_annotations: BTreeMap<String, String>,
    pub artifact_type: Option<String>,
    /// The manifest's `subject` descriptor, for a referrer.
    pub subject: Option<serde_json::Value>,
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn wait_ready(child: &mut Child, port: u16, id: &str) -> bool {
    let http = reqwest::Client::new();
    let url = format!("http://127.0.0.1:{port}/v2/");
    let deadline = Instant::now() + super::PATIENCE;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(resp) = http.get(&url).send().await
            && matches!(resp.status().as_u16(), 200 | 401)
            && resp
                .headers()
                .get("x-tagpilot-test-registry")
                .is_some_and(|v| v == id)
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn pusher() -> Client {
    Client::new(ClientConfig {
        protocol: ClientProtocol::Http,
        use_monolithic_push: true,
        ..Default::default()
    })
}

/// How many chosen ports a registry tries before the test gives up.
const BIND_ATTEMPTS: usize = 10;

/// A port for a registry: random, below the OS's ephemeral range (`ip_local_port_range`), from
/// which ports bound to port 0 and outgoing connections are drawn.
fn chosen_port() -> u16 {
    let ephemeral_start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768)
        .max(2048);
    fastrand::u16(ephemeral_start / 2..ephemeral_start)
}

fn unique() -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "{nanos}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

pub fn sha256(bytes: &[u8]) -> String {
    let hex: String = Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

fn split_platform(p: &str) -> (String, String, Option<String>) {
    let mut parts = p.split('/');
    let os = parts.next().unwrap_or("linux").to_string();
    let arch = parts.next().unwrap_or("amd64").to_string();
    (os, arch, parts.next().map(str::to_string))
}

fn platform_json(p: &str) -> serde_json::Value {
    let (os, arch, variant) = split_platform(p);
    let mut v = json!({"os": os, "architecture": arch});
    if let Some(variant) = variant {
        v["variant"] = json!(variant);
    }
    v
}

fn registry_config_yaml(
    dir: &Path,
    port: u16,
    id: &str,
    auth: &Auth,
    token: Option<&TokenServer>,
) -> String {
    let mut yaml = format!(
        "version: 0.1\n\
         log:\n  level: error\n  accesslog:\n    disabled: true\n\
         storage:\n  filesystem:\n    rootdirectory: {storage}\n  delete:\n    enabled: true\n\
         \x20 maintenance:\n    uploadpurging:\n      enabled: false\n\
         http:\n  addr: 127.0.0.1:{port}\n  secret: tagpilot-test-secret\n\
         \x20 headers:\n    X-Tagpilot-Test-Registry: [\"{id}\"]\n",
        storage = dir.join("storage").display(),
    );
    match auth {
        Auth::None => {}
        Auth::Basic { .. } => yaml.push_str(&format!(
            "auth:\n  htpasswd:\n    realm: tagpilot-test\n    path: {}\n",
            dir.join("htpasswd").display()
        )),
        Auth::Token { .. } => {
            let token = token.expect("token server");
            yaml.push_str(&format!(
                "auth:\n  token:\n    realm: {}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
                token.realm,
                dir.join("token-cert.pem").display()
            ))
        }
    }
    yaml
}

// === the token server ===

/// A Docker-style token server: `GET /token?service=…&scope=repository:<name>:<actions>` with
/// optional Basic credentials, answering `{"token", "access_token", "expires_in"}`.
struct TokenServer {
    realm: String,
    requests: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TokenServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Clone)]
struct TokenState {
    user: String,
    password: String,
    anonymous_pull: bool,
    key: Arc<jsonwebtoken::EncodingKey>,
    cert_der_b64: String,
    requests: Arc<AtomicUsize>,
}

impl TokenServer {
    async fn start(dir: &Path, user: &str, password: &str, anonymous_pull: bool) -> Self {
        let key = rcgen::KeyPair::generate().expect("ES256 key");
        let cert = rcgen::CertificateParams::new(vec![ISSUER.to_string()])
            .unwrap()
            .self_signed(&key)
            .expect("self-signed certificate");
        std::fs::write(dir.join("token-cert.pem"), cert.pem()).unwrap();
        let requests = Arc::new(AtomicUsize::new(0));
        let state = TokenState {
            user: user.into(),
            password: password.into(),
            anonymous_pull,
            key: Arc::new(
                jsonwebtoken::EncodingKey::from_ec_pem(key.serialize_pem().as_bytes()).unwrap(),
            ),
            cert_der_b64: base64::engine::general_purpose::STANDARD.encode(cert.der()),
            requests: requests.clone(),
        };
        let app = axum::Router::new()
            .route("/token", axum::routing::get(issue_token))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let realm = format!("http://{}/token", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        TokenServer {
            realm,
            requests,
            task,
        }
    }
}

async fn issue_token(
    axum::extract::State(state): axum::extract::State<TokenState>,
    axum::extract::Query(query): axum::extract::Query<Vec<(String, String)>>,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    state.requests.fetch_add(1, Ordering::SeqCst);
    let authenticated = match headers.get("authorization").and_then(|v| v.to_str().ok()) {
        None => false,
        Some(value) => {
            let decoded = value
                .strip_prefix("Basic ")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .and_then(|b| String::from_utf8(b).ok());
            if decoded.as_deref() != Some(&format!("{}:{}", state.user, state.password)) {
                return (
                    axum::http::StatusCode::UNAUTHORIZED,
                    axum::Json(
                        json!({"errors": [{"code": "UNAUTHORIZED", "message": "bad credentials"}]}),
                    ),
                )
                    .into_response();
            }
            true
        }
    };
    let scopes: Vec<String> = query
        .into_iter()
        .filter(|(k, _)| k == "scope")
        .map(|(_, v)| v)
        .collect();
    let mut access = Vec::new();
    for scope in scopes {
        // repository:<name>:<actions>; names contain no ':'.
        let mut parts = scope.splitn(3, ':');
        let (Some(kind), Some(name), Some(actions)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let actions: Vec<&str> = actions
            .split(',')
            .filter(|a| authenticated || (state.anonymous_pull && *a == "pull"))
            .collect();
        access.push(json!({"type": kind, "name": name, "actions": actions}));
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let claims = json!({
        "iss": ISSUER,
        "sub": if authenticated { state.user.as_str() } else { "" },
        "aud": SERVICE,
        "exp": now + 300,
        "nbf": now - 10,
        "iat": now,
        "jti": unique(),
        "access": access,
    });
    let mut header = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
    header.x5c = Some(vec![state.cert_der_b64.clone()]);
    let token = jsonwebtoken::encode(&header, &claims, &state.key).unwrap();
    axum::Json(json!({"token": token, "access_token": token, "expires_in": 300})).into_response()
}
