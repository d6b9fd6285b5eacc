//! The registry client against a real `docker-registry` (anonymous, htpasswd, token auth,
//! multi-arch indexes) and, for what distribution 2.8 cannot do (pagination, 429, malformed JSON,
//! a missing `Docker-Content-Digest`), against scripted `wiremock` exchanges.

use std::time::Duration;

use tagpilot::config::{Credentials, RegistryConfig};
use tagpilot::image::{Platform, Repository};
use tagpilot::plan::Inspector;
use tagpilot::policy::{ImagePolicy, Strategy};
use tagpilot::registry::{
    ClientOptions, DockerConfigSource, MetadataStore, Registry, RegistryClient, RegistryError,
};
use wiremock::matchers::{method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::registry::{Auth, ImageSpec, IndexSpec, TestRegistry, sha256};
use crate::support::scripted::{
    TAGS_LIST, get_tags_list, proxy_login_page, tags_page, too_many_requests_once,
};

fn ts(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

fn platforms(list: &[&str]) -> Vec<Platform> {
    list.iter().map(|p| p.parse().unwrap()).collect()
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

fn assert_names_the_place(err: &RegistryError, registry: &str, repository: &str) {
    let msg = err.to_string();
    assert!(msg.contains(registry) && msg.contains(repository), "{msg}");
}

// === a real registry ===

/// `reg`'s registry entry without credentials.
fn anonymous(reg: &TestRegistry) -> RegistryConfig {
    RegistryConfig {
        credentials: None,
        ..reg.registry_config()
    }
}

/// `reg`'s registry entry logging in as `username` with `password` read from a file.
fn with_password_file(reg: &TestRegistry, username: &str, password: &str) -> RegistryConfig {
    let file = reg.dir().join("wrong-password");
    std::fs::write(&file, format!("{password}\n")).unwrap();
    RegistryConfig {
        credentials: Some(Credentials {
            username: username.into(),
            password_env: None,
            password_file: Some(file),
        }),
        ..reg.registry_config()
    }
}

/// A client for `reg` configured with this one registry entry.
fn client_for(reg: &TestRegistry, config: RegistryConfig) -> RegistryClient {
    RegistryClient::new(reg.client_options(vec![config])).unwrap()
}

/// A state store that counts how often the client asks it for a manifest.
struct CountingStore {
    inner: tagpilot::state::State,
    manifests_asked: std::sync::atomic::AtomicUsize,
}

impl MetadataStore for CountingStore {
    fn manifest(&self, digest: &str) -> Option<Vec<u8>> {
        self.manifests_asked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.inner.manifest(digest)
    }
    fn put_manifest(&self, digest: &str, bytes: &[u8]) {
        self.inner.put_manifest(digest, bytes);
    }
    fn config(&self, digest: &str) -> Option<Vec<u8>> {
        self.inner.config(digest)
    }
    fn put_config(&self, digest: &str, facts: &[u8]) {
        self.inner.put_config(digest, facts);
    }
    fn first_seen(
        &self,
        repo: &Repository,
        tags: &[&str],
        now: jiff::Timestamp,
    ) -> Vec<Option<jiff::Timestamp>> {
        self.inner.first_seen(repo, tags, now)
    }
}

/// With a store, what was found by digest is held in memory for one cycle only, and the store
/// answers it after that: a long-running process does not grow with every image it has seen,
/// and the registry is still not asked again.
#[tokio::test]
async fn with_a_store_metadata_lives_in_the_store_between_cycles() {
    use std::sync::atomic::Ordering;
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let dir = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(CountingStore {
        inner: tagpilot::state::State::open(dir.path()).unwrap(),
        manifests_asked: Default::default(),
    });
    let client = reg.client().with_store(store.clone());
    let api = reg.repository("shop/api");
    let first = client.inspect(&api, "1.0.0", &[]).await.unwrap();
    let asked = store.manifests_asked.load(Ordering::Relaxed);
    // Within a cycle, memory answers.
    client.inspect(&api, &first.digest, &[]).await.unwrap();
    assert_eq!(store.manifests_asked.load(Ordering::Relaxed), asked);
    let fetched = client.responses().iter().map(|r| r.count).sum::<u64>();
    // The next cycle asks the store, not memory, and not the registry.
    client.start_cycle();
    let again = client.inspect(&api, &first.digest, &[]).await.unwrap();
    assert_eq!(again, first);
    assert!(store.manifests_asked.load(Ordering::Relaxed) > asked);
    assert_eq!(
        client.responses().iter().map(|r| r.count).sum::<u64>(),
        fetched,
        "the registry was asked again"
    );
}

/// Where an image was built from: the config's labels, else the manifest's annotations; only
/// those two labels are kept.
#[tokio::test]
async fn an_image_says_its_source_by_labels_or_by_annotations() {
    const SOURCE: &str = "org.opencontainers.image.source";
    const REVISION: &str = "org.opencontainers.image.revision";
    let reg = TestRegistry::start(Auth::None).await;
    let spec = ImageSpec::default()
        .label(SOURCE, "https://github.com/acme/api")
        .label(REVISION, "abc1234")
        .label("maintainer", "someone")
        .annotation(REVISION, "not this one");
    reg.push_image("shop/api", "labelled", spec).await;
    let spec = ImageSpec::default()
        .annotation(SOURCE, "https://gitlab.com/acme/api")
        .annotation(REVISION, "def5678");
    reg.push_image("shop/api", "annotated", spec).await;
    reg.push_image("shop/api", "plain", ImageSpec::default())
        .await;
    let client = reg.client();
    let api = reg.repository("shop/api");
    let source = |tag: &'static str| {
        let client = &client;
        let api = &api;
        async move { client.inspect(api, tag, &[]).await.unwrap().source }
    };
    let labelled = source("labelled").await;
    assert_eq!(
        labelled.source.as_deref(),
        Some("https://github.com/acme/api")
    );
    assert_eq!(
        labelled.revision.as_deref(),
        Some("abc1234"),
        "labels first"
    );
    let annotated = source("annotated").await;
    assert_eq!(
        annotated.source.as_deref(),
        Some("https://gitlab.com/acme/api")
    );
    assert_eq!(annotated.revision.as_deref(), Some("def5678"));
    assert_eq!(source("plain").await, Default::default());
}

#[tokio::test]
async fn anonymous_registry_lists_tags_once_and_inspects_images() {
    let reg = TestRegistry::start(Auth::None).await;
    let d1 = reg
        .push_image(
            "shop/api",
            "1.2.3",
            ImageSpec::default().created("2024-01-01T00:00:00Z"),
        )
        .await;
    reg.push_image(
        "shop/api",
        "1.10.0",
        ImageSpec::default().created("2024-02-01T00:00:00Z"),
    )
    .await;
    reg.push_image("shop/web", "latest", ImageSpec::default())
        .await;
    let client = reg.client();
    let api = reg.repository("shop/api");

    // Concurrent callers for one repository share one request.
    let (a, b, c) = tokio::join!(
        client.list_tags(&api),
        client.list_tags(&api),
        client.list_tags(&api)
    );
    assert_eq!(sorted(a.unwrap()), ["1.10.0", "1.2.3"]);
    assert_eq!(b.unwrap().len(), 2);
    assert_eq!(c.unwrap().len(), 2);
    assert_eq!(
        client.list_tags(&reg.repository("shop/web")).await.unwrap(),
        ["latest"]
    );
    let stats = client.request_stats();
    assert_eq!(
        stats.tag_lists, 2,
        "one tag-list request per distinct repository: {stats:?}"
    );
    assert_eq!(
        stats.total, 2,
        "an anonymous registry needs no probe or token: {stats:?}"
    );

    let info = client.inspect(&api, "1.2.3", &[]).await.unwrap();
    assert_eq!(info.digest, d1);
    assert_eq!(info.created, Some(ts("2024-01-01T00:00:00Z")));
    assert_eq!(info.platforms, platforms(&["linux/amd64"]));
    assert_eq!(client.digest(&api, "1.2.3").await.unwrap(), d1);

    // By digest, everything is cached: no further request.
    let before = client.request_count();
    assert_eq!(client.inspect(&api, &d1, &[]).await.unwrap(), info);
    assert_eq!(client.request_count(), before);
}

#[tokio::test]
async fn missing_repository_and_tag_are_distinct_errors() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let client = reg.client();

    let err = client
        .list_tags(&reg.repository("shop/nope"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, RegistryError::RepositoryNotFound { .. }),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "repository_not_found");
    assert_names_the_place(&err, &reg.host(), "shop/nope");

    let err = client
        .inspect(&reg.repository("shop/api"), "9.9.9", &[])
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::NotFound { .. }), "{err:?}");
    assert!(err.to_string().contains("tag 9.9.9"), "{err}");
    assert_names_the_place(&err, &reg.host(), "shop/api");
}

#[tokio::test]
async fn tags_are_empty_once_every_tag_is_deleted() {
    let reg = TestRegistry::start(Auth::None).await;
    let digest = reg
        .push_image("shop/gone", "1.0.0", ImageSpec::default())
        .await;
    reg.delete_manifest("shop/gone", &digest).await;
    // distribution 2.8 answers `"tags": null` here.
    assert_eq!(
        reg.client()
            .list_tags(&reg.repository("shop/gone"))
            .await
            .unwrap(),
        Vec::<String>::new()
    );
}

#[tokio::test]
async fn docker_schema2_images_keep_their_digest_and_annotations_give_a_build_time() {
    let reg = TestRegistry::start(Auth::None).await;
    let docker = reg
        .push_image(
            "shop/api",
            "docker",
            ImageSpec::default()
                .docker()
                .created("2023-05-05T05:05:05Z"),
        )
        .await;
    let annotated = reg
        .push_image(
            "shop/api",
            "annotated",
            ImageSpec::default()
                .created("1970-01-01T00:00:00Z")
                .annotation("org.opencontainers.image.created", "2024-06-01T12:00:00Z"),
        )
        .await;
    let client = reg.client();
    let api = reg.repository("shop/api");
    // Without all four Accept types distribution 2.8 would convert schema2 to schema1 here.
    let info = client.inspect(&api, "docker", &[]).await.unwrap();
    assert_eq!(info.digest, docker);
    assert_eq!(info.created, Some(ts("2023-05-05T05:05:05Z")));
    // A reproducible build's epoch-zero `created` gives way to the annotation.
    let info = client.inspect(&api, "annotated", &[]).await.unwrap();
    assert_eq!(info.digest, annotated);
    assert_eq!(info.created, Some(ts("2024-06-01T12:00:00Z")));
}

/// Regression: `platforms: [linux/arm64/v8]` found no build time in an index whose arm64 entry
/// names no variant, and the policy was held with "none of the tags has a build time".
#[tokio::test]
async fn platforms_match_with_containerd_normalisation() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_index(
        "shop/multi",
        "2.0.0",
        IndexSpec::new()
            .platform(
                "linux/amd64",
                ImageSpec::default().created("2024-02-01T00:00:00Z"),
            )
            .platform(
                "linux/arm64",
                ImageSpec::default().created("2024-03-01T00:00:00Z"),
            )
            .platform(
                "linux/arm",
                ImageSpec::default().created("2024-04-01T00:00:00Z"),
            ),
    )
    .await;
    let client = reg.client();
    let repo = reg.repository("shop/multi");
    let created = |wanted: &'static str| {
        let (client, repo) = (&client, &repo);
        async move {
            let info = client
                .inspect(repo, "2.0.0", &platforms(&[wanted]))
                .await
                .unwrap();
            assert!(info.offers_any(&platforms(&[wanted])), "{wanted}");
            info.created
        }
    };
    assert_eq!(
        created("linux/arm64/v8").await,
        Some(ts("2024-03-01T00:00:00Z"))
    );
    assert_eq!(
        created("linux/arm/v7").await,
        Some(ts("2024-04-01T00:00:00Z"))
    );
    assert_eq!(
        created("linux/amd64/v1").await,
        Some(ts("2024-02-01T00:00:00Z"))
    );
    let info = client
        .inspect(&repo, "2.0.0", &platforms(&["linux/arm/v6"]))
        .await
        .unwrap();
    assert_eq!(info.created, None);
    assert!(!info.offers_any(&platforms(&["linux/arm/v6"])));
}

/// Regression: two policies on one image with different `platforms` got the same build time
/// within one run, whichever asked first: the plan's inspection cache was keyed by image and tag.
#[tokio::test]
async fn build_times_follow_each_policys_platforms_within_one_plan() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_index(
        "shop/multi",
        "2.0.0",
        IndexSpec::new()
            .platform(
                "linux/amd64",
                ImageSpec::default().created("2024-02-01T00:00:00Z"),
            )
            .platform(
                "linux/arm64",
                ImageSpec::default().created("2024-03-01T00:00:00Z"),
            ),
    )
    .await;
    let client = reg.client();
    let policy = |platform: &str| {
        let mut p = ImagePolicy::adhoc(&reg.image("shop/multi"), Strategy::NewestBuild).unwrap();
        p.platforms = platforms(&[platform]);
        p
    };
    let (amd64, arm64) = (policy("linux/amd64"), policy("linux/arm64"));
    let tags = vec!["2.0.0".to_string()];
    let inspector = Inspector::new(&client);
    for (policy, want) in [
        (&amd64, "2024-02-01T00:00:00Z"),
        (&arm64, "2024-03-01T00:00:00Z"),
        (&amd64, "2024-02-01T00:00:00Z"),
    ] {
        let got = inspector.candidates(policy, &tags, &()).await.unwrap();
        assert_eq!(got[0].created, Some(ts(want)), "{:?}", policy.platforms);
    }
}

/// A policy whose platforms no tag has an image for is held saying so, not "no build time".
#[tokio::test]
async fn a_hold_for_a_missing_platform_names_the_platform() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_index(
        "shop/multi",
        "2.0.0",
        IndexSpec::new().platform(
            "linux/amd64",
            ImageSpec::default().created("2024-02-01T00:00:00Z"),
        ),
    )
    .await;
    let client = reg.client();
    let mut policy = ImagePolicy::adhoc(&reg.image("shop/multi"), Strategy::NewestBuild).unwrap();
    policy.platforms = platforms(&["linux/arm64"]);
    let tags = vec!["2.0.0".to_string()];
    let candidates = Inspector::new(&client)
        .candidates(&policy, &tags, &())
        .await
        .unwrap();
    assert_eq!(
        tagpilot::select::choose(&policy, None, &candidates),
        tagpilot::select::Decision::Hold("no image for linux/arm64 in any of the 1 tags".into())
    );
}

/// Regression: HTTPS to a registry that speaks plain HTTP failed with rustls's "received corrupt
/// message of type InvalidContentType" and no hint.
#[tokio::test]
async fn https_to_a_plain_http_registry_says_so_and_names_insecure() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0"], ImageSpec::default())
        .await;
    let config = RegistryConfig {
        insecure: false,
        ..anonymous(&reg)
    };
    let err = client_for(&reg, config)
        .list_tags(&reg.repository("shop/api"))
        .await
        .unwrap_err();
    assert!(matches!(err, RegistryError::PlainHttp { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "plain_http");
    let msg = err.to_string();
    assert!(
        msg.contains("plain HTTP") && msg.contains("insecure: true"),
        "{msg}"
    );
    assert_names_the_place(&err, &reg.host(), "shop/api");
}

#[tokio::test]
async fn multi_arch_index_is_filtered_by_platform() {
    let reg = TestRegistry::start(Auth::None).await;
    let index = reg
        .push_index(
            "shop/multi",
            "2.0.0",
            IndexSpec::new()
                .platform(
                    "linux/amd64",
                    ImageSpec::default().created("2024-02-01T00:00:00Z"),
                )
                .platform(
                    "linux/arm64/v8",
                    ImageSpec::default().created("2024-03-01T00:00:00Z"),
                ),
        )
        .await;
    let client = reg.client();
    let repo = reg.repository("shop/multi");

    let amd64 = client
        .inspect(&repo, "2.0.0", &platforms(&["linux/amd64"]))
        .await
        .unwrap();
    assert_eq!(amd64.digest, index);
    assert_eq!(amd64.created, Some(ts("2024-02-01T00:00:00Z")));
    assert_eq!(
        amd64.platforms,
        platforms(&["linux/amd64", "linux/arm64/v8"])
    );

    let arm64 = client
        .inspect(&repo, "2.0.0", &platforms(&["linux/arm64"]))
        .await
        .unwrap();
    assert_eq!(
        arm64.created,
        Some(ts("2024-03-01T00:00:00Z")),
        "linux/arm64 is linux/arm64/v8"
    );
    let any = client.inspect(&repo, "2.0.0", &[]).await.unwrap();
    assert_eq!(
        any.created,
        Some(ts("2024-03-01T00:00:00Z")),
        "the newest entry when no platform is wanted"
    );
    let none = client
        .inspect(&repo, "2.0.0", &platforms(&["linux/s390x"]))
        .await
        .unwrap();
    assert_eq!(none.created, None);
    assert_eq!(
        none.platforms.len(),
        2,
        "the index's platforms are reported even when none matches"
    );

    // The digest is the one the registry itself reports.
    let resp = reqwest::Client::new()
        .head(format!(
            "http://{}/v2/shop/multi/manifests/2.0.0",
            reg.host()
        ))
        .header("accept", "application/vnd.oci.image.index.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        resp.headers()["docker-content-digest"].to_str().unwrap(),
        index
    );

    let list = reg
        .push_index(
            "shop/multi",
            "docker-list",
            IndexSpec::new()
                .docker()
                .platform(
                    "linux/amd64",
                    ImageSpec::default().created("2022-01-01T00:00:00Z"),
                )
                .platform(
                    "linux/arm/v7",
                    ImageSpec::default().created("2022-01-02T00:00:00Z"),
                ),
        )
        .await;
    let info = client
        .inspect(&repo, "docker-list", &platforms(&["linux/arm/v7"]))
        .await
        .unwrap();
    assert_eq!(info.digest, list);
    assert_eq!(info.created, Some(ts("2022-01-02T00:00:00Z")));

    // Entries without a build time: the index's own annotation is the fallback.
    reg.push_index(
        "shop/multi",
        "annotated",
        IndexSpec::new()
            .platform("linux/amd64", ImageSpec::default())
            .annotation("org.opencontainers.image.created", "2021-01-01T00:00:00Z"),
    )
    .await;
    let info = client.inspect(&repo, "annotated", &[]).await.unwrap();
    assert_eq!(info.created, Some(ts("2021-01-01T00:00:00Z")));
}

#[tokio::test]
async fn htpasswd_basic_auth_right_wrong_and_missing_password() {
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_image(
        "team/app",
        "1.0.0",
        ImageSpec::default().created("2024-01-01T00:00:00Z"),
    )
    .await;
    let repo = reg.repository("team/app");

    let client = reg.client();
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["1.0.0"]);
    assert_eq!(
        client.inspect(&repo, "1.0.0", &[]).await.unwrap().created,
        Some(ts("2024-01-01T00:00:00Z"))
    );
    assert_eq!(client.request_stats().tokens, 0);

    let config = with_password_file(&reg, reg.user().unwrap(), "not-the-password");
    let err = client_for(&reg, config).list_tags(&repo).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "unauthorized");
    let msg = err.to_string();
    assert!(msg.contains("tester") && msg.contains("rejected"), "{msg}");
    assert!(
        !msg.contains("not-the-password") && !msg.contains(reg.password().unwrap()),
        "{msg}"
    );
    assert_names_the_place(&err, &reg.host(), "team/app");

    let err = client_for(&reg, anonymous(&reg))
        .list_tags(&repo)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no credentials"), "{err}");
}

#[tokio::test]
async fn docker_config_json_supplies_credentials_when_tagpilot_yaml_does_not() {
    use base64::Engine;
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_image("team/app", "1.0.0", ImageSpec::default())
        .await;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        reg.user().unwrap(),
        reg.password().unwrap()
    ));
    let config_json = reg.dir().join("docker-config.json");
    std::fs::write(
        &config_json,
        format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, reg.host()),
    )
    .unwrap();
    let options = ClientOptions {
        docker_config: DockerConfigSource::File(config_json),
        ..reg.client_options(vec![anonymous(&reg)])
    };
    let client = RegistryClient::new(options).unwrap();
    assert_eq!(
        client.list_tags(&reg.repository("team/app")).await.unwrap(),
        ["1.0.0"]
    );
}

#[tokio::test]
async fn token_auth_fetches_one_token_per_repository() {
    let reg = TestRegistry::start(Auth::token()).await;
    let digest = reg
        .push_image(
            "team/app",
            "1.0.0",
            ImageSpec::default().created("2024-01-01T00:00:00Z"),
        )
        .await;
    reg.push_image("team/other", "0.1.0", ImageSpec::default())
        .await;
    let client = reg.client();
    let repo = reg.repository("team/app");
    let served_before = reg.token_requests();

    assert_eq!(client.list_tags(&repo).await.unwrap(), ["1.0.0"]);
    let info = client.inspect(&repo, "1.0.0", &[]).await.unwrap();
    assert_eq!(info.digest, digest);
    assert_eq!(info.created, Some(ts("2024-01-01T00:00:00Z")));
    assert_eq!(
        client
            .list_tags(&reg.repository("team/other"))
            .await
            .unwrap(),
        ["0.1.0"]
    );
    let stats = client.request_stats();
    assert_eq!(
        stats.tokens, 2,
        "one token per repository scope, reused: {stats:?}"
    );
    assert_eq!(
        reg.token_requests() - served_before,
        2,
        "the token server agrees with the client's count"
    );
    // The first request learns the challenge (one 401); later repositories authenticate up front.
    assert_eq!(stats.tag_lists, 3, "{stats:?}");
}

#[tokio::test]
async fn token_auth_wrong_password_and_anonymous_are_refused_clearly() {
    let reg = TestRegistry::start(Auth::token()).await;
    reg.push_image("team/app", "1.0.0", ImageSpec::default())
        .await;
    let repo = reg.repository("team/app");

    let config = with_password_file(&reg, "tester", "nope");
    let err = client_for(&reg, config).list_tags(&repo).await.unwrap_err();
    assert_eq!(err.metric_label(), "unauthorized");
    let msg = err.to_string();
    assert!(
        msg.contains("token server") && msg.contains("tester") && !msg.contains("nope"),
        "{msg}"
    );
    assert_names_the_place(&err, &reg.host(), "team/app");

    let err = client_for(&reg, anonymous(&reg))
        .list_tags(&repo)
        .await
        .unwrap_err();
    assert_eq!(err.metric_label(), "unauthorized");
    assert!(err.to_string().contains("no credentials"), "{err}");
}

#[tokio::test]
async fn anonymous_tokens_work_for_public_repositories() {
    let reg = TestRegistry::start(Auth::public_token()).await;
    reg.push_image("public/app", "1.0.0", ImageSpec::default())
        .await;
    let client = client_for(&reg, anonymous(&reg));
    assert_eq!(
        client
            .list_tags(&reg.repository("public/app"))
            .await
            .unwrap(),
        ["1.0.0"]
    );
    assert_eq!(client.request_stats().tokens, 1);
}

#[tokio::test]
async fn the_harness_registries_yaml_drives_a_client_built_from_tagpilot_yaml() {
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_image("team/app", "1.0.0", ImageSpec::default())
        .await;
    let yaml = format!("registries:\n{}", reg.registries_yaml());
    let config: tagpilot::config::Config = serde_saphyr::from_str(&yaml).unwrap();
    let client = RegistryClient::from_config(&config).unwrap();
    let repo = tagpilot::image::ImageRef::parse(&format!("{}:1.0.0", reg.image("team/app")))
        .unwrap()
        .repository;
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["1.0.0"]);
}

// === scripted exchanges for what distribution 2.8 does not do ===

/// A registry entry for a plain-HTTP registry on `host` with no credentials.
fn insecure_registry(host: &str) -> RegistryConfig {
    RegistryConfig {
        host: host.into(),
        insecure: true,
        credentials: None,
        rate_limit: None,
        timeout: None,
        tag_list: Default::default(),
    }
}

async fn mock_client(server: &MockServer, page_size: usize) -> (RegistryClient, Repository) {
    let host = server.address().to_string();
    let options = ClientOptions {
        registries: vec![insecure_registry(&host)],
        docker_config: DockerConfigSource::Disabled,
        helper_path: Some(Default::default()),
        page_size,
        ..ClientOptions::default()
    };
    (
        RegistryClient::new(options).unwrap(),
        Repository {
            registry: host,
            path: "shop/api".into(),
        },
    )
}

#[tokio::test]
async fn link_pagination_is_followed_across_three_pages() {
    let server = MockServer::start().await;
    get_tags_list()
        .and(query_param_is_missing("last"))
        .and(query_param_is_missing("page"))
        .respond_with(
            tags_page(&["v3", "v1"])
                .insert_header("link", format!(r#"<{TAGS_LIST}?page=2>; rel="next""#)),
        )
        .expect(1)
        .mount(&server)
        .await;
    get_tags_list()
        .and(query_param("page", "2"))
        .respond_with(
            tags_page(&["v2"])
                .insert_header("link", format!(r#"<{TAGS_LIST}?page=3>; rel="next""#)),
        )
        .expect(1)
        .mount(&server)
        .await;
    get_tags_list()
        .and(query_param("page", "3"))
        .respond_with(tags_page(&["v10", "v0"]))
        .expect(1)
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    assert_eq!(
        client.list_tags(&repo).await.unwrap(),
        ["v3", "v1", "v2", "v10", "v0"]
    );
    assert_eq!(client.request_stats().tag_lists, 3);
}

#[tokio::test]
async fn without_link_full_pages_continue_with_last() {
    let server = MockServer::start().await;
    get_tags_list()
        .and(query_param("n", "2"))
        .and(query_param_is_missing("last"))
        .respond_with(tags_page(&["b", "a"]))
        .expect(1)
        .mount(&server)
        .await;
    // Unsorted pages: `last` is the page's last tag, whatever its order.
    get_tags_list()
        .and(query_param("last", "a"))
        .respond_with(tags_page(&["d", "c"]))
        .expect(1)
        .mount(&server)
        .await;
    get_tags_list()
        .and(query_param("last", "c"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(serde_json::json!({"name": "shop/api", "tags": null})),
        )
        .expect(1)
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 2).await;
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["b", "a", "d", "c"]);
}

#[tokio::test]
async fn a_registry_that_repeats_its_page_does_not_make_the_client_spin() {
    let server = MockServer::start().await;
    // Ignores `last` and sends the same full page forever.
    get_tags_list()
        .respond_with(tags_page(&["a", "b"]))
        .expect(2)
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 2).await;
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["a", "b"]);

    // A Link that points back at the first page.
    let looping = MockServer::start().await;
    get_tags_list()
        .respond_with(
            tags_page(&["x"])
                .insert_header("link", r#"</v2/shop/api/tags/list?n=100>; rel="next""#),
        )
        .expect(1)
        .mount(&looping)
        .await;
    let (client, repo) = mock_client(&looping, 100).await;
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["x"]);
}

#[tokio::test]
async fn too_many_requests_is_retried_after_retry_after() {
    let server = MockServer::start().await;
    too_many_requests_once("1").mount(&server).await;
    get_tags_list()
        .respond_with(tags_page(&["1.0.0"]))
        .with_priority(2)
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    assert_eq!(client.list_tags(&repo).await.unwrap(), ["1.0.0"]);
    assert_eq!(server.received_requests().await.unwrap().len(), 2);
    assert_eq!(client.request_count(), 2);
}

#[tokio::test]
async fn retries_are_bounded_and_the_error_says_rate_limited() {
    let server = MockServer::start().await;
    get_tags_list()
        .respond_with(ResponseTemplate::new(503).insert_header("retry-after", "0"))
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    let err = client.list_tags(&repo).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::RateLimited {
                status: 503,
                attempts: 4,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "rate_limited");
    assert_names_the_place(&err, &server.address().to_string(), "shop/api");
    assert_eq!(
        server.received_requests().await.unwrap().len(),
        4,
        "one try and three retries"
    );
    // The failure is remembered: asking again sends nothing.
    assert_eq!(client.list_tags(&repo).await.unwrap_err(), err);
    assert_eq!(server.received_requests().await.unwrap().len(), 4);
}

#[tokio::test]
async fn malformed_json_is_a_malformed_response_error() {
    let server = MockServer::start().await;
    get_tags_list()
        .respond_with(proxy_login_page())
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    let err = client.list_tags(&repo).await.unwrap_err();
    assert!(
        matches!(
            err,
            RegistryError::Malformed {
                what: "tag list",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.metric_label(), "malformed_response");
    assert_names_the_place(&err, &server.address().to_string(), "shop/api");
}

#[tokio::test]
async fn repository_404_from_a_scripted_registry() {
    let server = MockServer::start().await;
    get_tags_list()
        .respond_with(ResponseTemplate::new(404).set_body_json(
            serde_json::json!({"errors": [{"code": "NAME_UNKNOWN", "message": "repository name not known to registry"}]}),
        ))
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    let err = client.list_tags(&repo).await.unwrap_err();
    assert_eq!(err.metric_label(), "repository_not_found");
}

#[tokio::test]
async fn without_docker_content_digest_the_manifest_bytes_are_hashed() {
    let server = MockServer::start().await;
    let manifest = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a","size":2},"layers":[]}"#;
    Mock::given(method("HEAD"))
        .and(path("/v2/shop/api/manifests/1.0.0"))
        .respond_with(ResponseTemplate::new(200))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/v2/shop/api/manifests/1.0.0"))
        .respond_with(ResponseTemplate::new(200).set_body_raw(
            manifest.to_vec(),
            "application/vnd.oci.image.manifest.v1+json",
        ))
        .expect(1)
        .mount(&server)
        .await;
    let (client, repo) = mock_client(&server, 100).await;
    assert_eq!(
        client.digest(&repo, "1.0.0").await.unwrap(),
        sha256(manifest)
    );
}

#[tokio::test]
async fn an_unreachable_registry_is_named() {
    // A port that was free a moment ago and has nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let host = format!("127.0.0.1:{port}");
    let options = ClientOptions {
        registries: vec![insecure_registry(&host)],
        docker_config: DockerConfigSource::Disabled,
        connect_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    };
    let client = RegistryClient::new(options).unwrap();
    let repo = Repository {
        registry: host.clone(),
        path: "shop/api".into(),
    };
    let err = client.list_tags(&repo).await.unwrap_err();
    assert!(matches!(err, RegistryError::Unreachable { .. }), "{err:?}");
    assert_eq!(err.metric_label(), "unreachable");
    assert_names_the_place(&err, &host, "shop/api");
}

#[tokio::test]
async fn one_client_serves_spawned_tasks_with_one_request_per_question() {
    let reg = TestRegistry::start(Auth::None).await;
    let digest = reg
        .push_tags(
            "shop/many",
            &["1.0.0", "1.1.0", "2.0.0"],
            ImageSpec::default(),
        )
        .await;
    let client = std::sync::Arc::new(reg.client());
    let repo = reg.repository("shop/many");
    let tasks: Vec<_> = (0..4)
        .map(|_| {
            let (client, repo) = (client.clone(), repo.clone());
            tokio::spawn(async move {
                (
                    client.list_tags(&repo).await,
                    client.digest(&repo, "2.0.0").await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (tags, got) = task.await.unwrap();
        assert_eq!(sorted(tags.unwrap()), ["1.0.0", "1.1.0", "2.0.0"]);
        assert_eq!(got.unwrap(), digest);
    }
    let stats = client.request_stats();
    assert_eq!((stats.tag_lists, stats.manifests), (1, 1), "{stats:?}");
}

/// A password file that held a stale password is read again after the registry refuses it: a
/// long-running process picks up a rotated Secret or file without a restart. Basic (htpasswd)
/// and the token flow (where the token server refuses the stale credential).
#[tokio::test]
async fn a_refused_credential_is_read_again_from_its_file_and_retried_once() {
    for auth in [Auth::basic(), Auth::token()] {
        let reg = TestRegistry::start(auth).await;
        reg.push_image("team/app", "1.0.0", ImageSpec::default())
            .await;
        let repo = reg.repository("team/app");
        let config = with_password_file(&reg, reg.user().unwrap(), "stale-password");
        let file = reg.dir().join("wrong-password");
        let client = client_for(&reg, config);

        let err = client.list_tags(&repo).await.unwrap_err();
        assert!(matches!(err, RegistryError::Unauthorized { .. }), "{err:?}");

        // The Secret is rotated in place, as a kubelet updates a mounted Secret.
        std::fs::write(&file, format!("{}\n", reg.password().unwrap())).unwrap();
        client.start_cycle();
        assert_eq!(
            client.list_tags(&repo).await.unwrap(),
            ["1.0.0"],
            "the new password is read after the refusal"
        );
        // And the one after that is still good: nothing is reloaded while it works.
        client.start_cycle();
        let before = client.request_stats();
        assert_eq!(client.list_tags(&repo).await.unwrap(), ["1.0.0"]);
        let after = client.request_stats();
        assert_eq!(after.tag_lists - before.tag_lists, 1, "no second 401");
    }
}

/// A registry that times out is not asked again within the cycle: the next question fails at
/// once, without a request; a new cycle asks again.
#[tokio::test]
async fn a_registry_that_timed_out_fails_fast_until_the_next_cycle() {
    let (host, accepted) = crate::daemon::hanging_registry();
    let options = ClientOptions {
        registries: vec![RegistryConfig {
            timeout: Some(Duration::from_millis(300)),
            ..insecure_registry(&host)
        }],
        docker_config: DockerConfigSource::Disabled,
        ..ClientOptions::default()
    };
    let client = RegistryClient::new(options).unwrap();
    let repo = |path: &str| Repository {
        registry: host.clone(),
        path: path.into(),
    };
    let connections = || *accepted.borrow();

    let err = client.list_tags(&repo("shop/api")).await.unwrap_err();
    assert_eq!(err.metric_label(), "timed_out", "{err}");
    assert!(
        err.to_string().contains("did not answer within 300ms"),
        "{err}"
    );
    assert_eq!(connections(), 1);

    let err = client.list_tags(&repo("shop/web")).await.unwrap_err();
    assert_eq!(err.metric_label(), "down", "{err}");
    assert_names_the_place(&err, &host, "shop/web");
    assert_eq!(connections(), 1, "not asked again this cycle");

    client.start_cycle();
    let err = client.list_tags(&repo("shop/web")).await.unwrap_err();
    assert_eq!(err.metric_label(), "timed_out", "{err}");
    assert_eq!(connections(), 2, "asked again in the next cycle");
}
