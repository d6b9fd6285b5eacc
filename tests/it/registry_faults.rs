//! Registries that misbehave without end: a tag list that paginates for ever is cut at the
//! bounds of `registries[].tagList`, against a registry double that answers over HTTP (the
//! real distribution 2.8 sends every tag in one page and cannot be made to loop).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use tagpilot::config::{RegistryConfig, TagListLimits};
use tagpilot::image::Repository;
use tagpilot::registry::{
    ClientOptions, DockerConfigSource, Registry, RegistryClient, RegistryError, TagListBound,
};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, Request, Respond, ResponseTemplate};

/// A registry whose tag list never ends: page `n` holds `per_page` new tags and a `Link` to
/// page `n + 1`, after `delay`. Counts the pages it served.
pub(crate) struct EndlessPages {
    pub(crate) repository: &'static str,
    pub(crate) per_page: usize,
    pub(crate) delay: Duration,
    pub(crate) served: Arc<AtomicUsize>,
}

impl Respond for EndlessPages {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        self.served.fetch_add(1, Ordering::SeqCst);
        let page: usize = request
            .url
            .query_pairs()
            .find(|(k, _)| k == "page")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(1);
        let tags: Vec<String> = (0..self.per_page)
            .map(|i| format!("0.{page}.{i}"))
            .collect();
        ResponseTemplate::new(200)
            .set_body_json(json!({"name": self.repository, "tags": tags}))
            .insert_header(
                "link",
                format!(
                    r#"</v2/{}/tags/list?page={}>; rel="next""#,
                    self.repository,
                    page + 1
                )
                .as_str(),
            )
            .set_delay(self.delay)
    }
}

/// Starts the double: `/v2/` answers as a registry does, `repository`'s tag list never ends.
pub(crate) async fn endless_registry(
    repository: &'static str,
    per_page: usize,
    delay: Duration,
) -> (MockServer, Arc<AtomicUsize>) {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/v2/"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .mount(&server)
        .await;
    let served = Arc::new(AtomicUsize::new(0));
    Mock::given(method("GET"))
        .and(path(format!("/v2/{repository}/tags/list")))
        .respond_with(EndlessPages {
            repository,
            per_page,
            delay,
            served: served.clone(),
        })
        .mount(&server)
        .await;
    (server, served)
}

fn client(server: &MockServer, limits: TagListLimits) -> (RegistryClient, Repository) {
    let host = server.address().to_string();
    let options = ClientOptions {
        registries: vec![RegistryConfig {
            host: host.clone(),
            insecure: true,
            tag_list: limits,
            ..RegistryConfig::default()
        }],
        docker_config: DockerConfigSource::Disabled,
        helper_path: Some(Default::default()),
        ..ClientOptions::default()
    };
    (
        RegistryClient::new(options).unwrap(),
        Repository {
            registry: host,
            path: "shop/web".into(),
        },
    )
}

fn bound(err: &RegistryError) -> TagListBound {
    match err {
        RegistryError::TagListTooLong { bound, .. } => *bound,
        other => panic!("not a tag list bound: {other}"),
    }
}

#[tokio::test]
async fn an_endless_tag_list_stops_at_max_pages_with_an_error_naming_the_repository() {
    let (server, served) = endless_registry("shop/web", 3, Duration::ZERO).await;
    let (client, repo) = client(
        &server,
        TagListLimits {
            max_pages: 7,
            ..TagListLimits::default()
        },
    );
    let err = client.list_tags(&repo).await.unwrap_err();
    assert_eq!(bound(&err), TagListBound::Pages(7));
    assert_eq!(err.metric_label(), "tag_list_too_long");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "registry {} paginated the tag list of repository shop/web past 7 pages (tagList.maxPages)",
            repo.registry
        )),
        "{text}"
    );
    assert_eq!(served.load(Ordering::SeqCst), 7, "not one page more");
    // The error is the cycle's answer for that repository: asked again, no new request.
    assert_eq!(client.list_tags(&repo).await.unwrap_err(), err);
    assert_eq!(served.load(Ordering::SeqCst), 7);
}

#[tokio::test]
async fn an_endless_tag_list_stops_at_max_tags() {
    let (server, served) = endless_registry("shop/web", 40, Duration::ZERO).await;
    let (client, repo) = client(
        &server,
        TagListLimits {
            max_tags: 100,
            ..TagListLimits::default()
        },
    );
    let err = client.list_tags(&repo).await.unwrap_err();
    assert_eq!(bound(&err), TagListBound::Tags(100));
    assert_eq!(served.load(Ordering::SeqCst), 3, "40 + 40 + 40 > 100");
}

#[tokio::test]
async fn a_slow_endless_tag_list_stops_at_its_timeout() {
    let (server, served) = endless_registry("shop/web", 1, Duration::from_millis(100)).await;
    let (client, repo) = client(
        &server,
        TagListLimits {
            timeout: Duration::from_millis(700),
            ..TagListLimits::default()
        },
    );
    // Cut by the timeout, not by the registry: it would serve pages for ever, and at 100 ms a
    // page the count of pages served is the proof (no wall-clock timing is asserted).
    let err = client.list_tags(&repo).await.unwrap_err();
    assert_eq!(bound(&err), TagListBound::Time(Duration::from_millis(700)));
    assert!(
        err.to_string().contains("past 700ms (tagList.timeout)"),
        "{err}"
    );
    assert!(served.load(Ordering::SeqCst) <= 8, "{served:?}");
}

/// A page far larger than `maxTags` tags can be is not read to its end.
#[tokio::test]
async fn one_page_larger_than_max_tags_can_be_is_cut() {
    let server = MockServer::start().await;
    let tags: Vec<String> = (0..5000).map(|i| format!("{i:0>120}")).collect();
    Mock::given(method("GET"))
        .and(path("/v2/shop/web/tags/list"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"tags": tags})))
        .mount(&server)
        .await;
    let (client, repo) = client(
        &server,
        TagListLimits {
            max_tags: 10,
            ..TagListLimits::default()
        },
    );
    let err = client.list_tags(&repo).await.unwrap_err();
    assert!(matches!(bound(&err), TagListBound::PageBytes(_)), "{err}");
}
