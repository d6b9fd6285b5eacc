//! A registry's pull quota (issue 34), against a double over HTTP on loopback that answers as
//! Docker Hub does: `ratelimit-limit` and `ratelimit-remaining` on its answers, manifest GETs
//! counted and HEADs free, a 429 past the limit. It counts what it is asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;
use tagpilot::config::RegistryConfig;
use tagpilot::image::Repository;
use tagpilot::registry::{
    ClientOptions, DockerConfigSource, Registry, RegistryClient, RegistryError,
};
use wiremock::matchers::{method, path, path_regex};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

const LIMIT: u64 = 10;
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

fn digest(bytes: &[u8]) -> String {
    crate::support::registry::sha256(bytes)
}

fn config() -> Vec<u8> {
    br#"{"architecture":"amd64","os":"linux","created":"2026-01-01T00:00:00Z"}"#.to_vec()
}

/// Each tag's manifest: its own bytes (the tag in an annotation), one config.
fn manifest(tag: &str) -> Vec<u8> {
    let config = config();
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": digest(&config), "size": config.len()},
        "layers": [],
        "annotations": {"org.opencontainers.image.version": tag},
    }))
    .unwrap()
}

/// Manifests as Docker Hub serves them: GETs count against `LIMIT`, HEADs do not.
struct Hub {
    gets: Arc<AtomicU64>,
    heads: Arc<AtomicU64>,
    refused: Arc<AtomicU64>,
}

impl Respond for Hub {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let reference = request.url.path().rsplit('/').next().unwrap().to_string();
        // By digest: the tag whose manifest has it.
        let tag = (0..12)
            .map(|i| format!("1.0.{i}"))
            .find(|t| digest(&manifest(t)) == reference)
            .unwrap_or(reference);
        let body = manifest(&tag);
        let quota = |left: u64| {
            ResponseTemplate::new(200)
                .insert_header("ratelimit-limit", format!("{LIMIT};w=21600").as_str())
                .insert_header("ratelimit-remaining", format!("{left};w=21600").as_str())
                .insert_header("docker-content-digest", digest(&body).as_str())
                .insert_header("content-type", MANIFEST)
        };
        if request.method.as_str() == "HEAD" {
            self.heads.fetch_add(1, Ordering::SeqCst);
            let spent = self.gets.load(Ordering::SeqCst);
            return quota(LIMIT.saturating_sub(spent));
        }
        let spent = self.gets.fetch_add(1, Ordering::SeqCst) + 1;
        if spent > LIMIT {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return ResponseTemplate::new(429);
        }
        quota(LIMIT - spent).set_body_raw(body, MANIFEST)
    }
}

#[tokio::test]
async fn manifest_gets_stop_at_the_reserve_named_as_deferred_and_heads_are_free() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .mount(&server)
        .await;
    let (gets, heads, refused) = Default::default();
    let hub = Hub {
        gets: Arc::clone(&gets),
        heads: Arc::clone(&heads),
        refused: Arc::clone(&refused),
    };
    Mock::given(path_regex("^/v2/library/app/manifests/"))
        .respond_with(hub)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path_regex("^/v2/library/app/blobs/"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(config(), "application/octet-stream"))
        .mount(&server)
        .await;
    let host = server.address().to_string();
    let client = RegistryClient::new(ClientOptions {
        registries: vec![RegistryConfig {
            host: host.clone(),
            insecure: true,
            ..RegistryConfig::default()
        }],
        docker_config: DockerConfigSource::Disabled,
        helper_path: Some(Default::default()),
        ..ClientOptions::default()
    })
    .unwrap();
    let repo = Repository {
        registry: host.clone(),
        path: "library/app".into(),
    };
    let tags: Vec<String> = (0..12).map(|i| format!("1.0.{i}")).collect();

    // Digests by HEAD: free, however many.
    for tag in &tags {
        client.digest(&repo, tag).await.unwrap();
    }
    assert_eq!(heads.load(Ordering::SeqCst), 12);
    assert_eq!(gets.load(Ordering::SeqCst), 0);

    // Inspections need the manifests: they go until what is left is the reserve.
    let mut deferred = Vec::new();
    for tag in &tags {
        match client.inspect(&repo, tag, &[]).await {
            Ok(_) => {}
            Err(e @ RegistryError::Deferred { .. }) => deferred.push(e.to_string()),
            Err(other) => panic!("{tag}: {other}"),
        }
    }
    let spent = gets.load(Ordering::SeqCst);
    assert_eq!(spent, LIMIT - tagpilot::registry::QUOTA_RESERVE);
    assert_eq!(refused.load(Ordering::SeqCst), 0, "a 429 was met");
    assert_eq!(deferred.len() as u64, 12 - spent);
    assert_eq!(
        deferred[0],
        format!(
            "deferred: {host} quota, {} left of {LIMIT}, resets within 6h (repository library/app)",
            tagpilot::registry::QUOTA_RESERVE
        )
    );
    let quota = client
        .quotas()
        .into_iter()
        .find(|q| q.registry == host)
        .unwrap();
    assert_eq!(
        (
            quota.spent,
            quota.heads,
            quota.deferred,
            quota.left,
            quota.limit
        ),
        (
            spent,
            12,
            12 - spent,
            Some(tagpilot::registry::QUOTA_RESERVE),
            Some(LIMIT)
        )
    );
}
