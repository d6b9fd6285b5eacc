//! Argo CD Applications read live from the Kubernetes API (`applications.fromCluster`), with the
//! API as a scripted `wiremock` double (no API server can run here): every scenario states the
//! exact requests (method, path, query, bearer token, patch body) and how often each is sent.
//! Registries are real (`docker-registry` from the harness) where credentials matter.
//! The last tests run the `tagpilot` binary end to end, with `applications.fromGit` over a
//! file:// repository and with `applications.fromCluster` through a kubeconfig file.

use std::path::Path;

use base64::Engine;
use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use tagpilot::argocd::{self, FromCluster, read::cluster::Cluster};
use tagpilot::config;
use tagpilot::git::RepoCache;
use tagpilot::registry::{MemoryRegistry, Registry, RegistryClient};

use crate::support::engine::cycle;
use crate::support::git::{BareRepo, git};
use crate::support::registry::{Auth, ImageSpec, TestRegistry};

const TOKEN: &str = "test-token";
const APPS: &str = "/apis/argoproj.io/v1alpha1/applications";
/// The Applications of the `argocd` namespace.
const ARGOCD_APPS: &str = "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications";
const IU: &str = "argocd-image-updater.argoproj.io";

// === the API double ===

fn kubeconfig(server: &MockServer) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: t\n  cluster: {{server: '{}'}}\nusers:\n- name: t\n  user: {{token: {TOKEN}}}\ncontexts:\n- name: t\n  context: {{cluster: t, user: t, namespace: default}}\ncurrent-context: t\n",
        server.uri()
    )
}

async fn cluster(server: &MockServer) -> Cluster {
    let kc = kube::config::Kubeconfig::from_yaml(&kubeconfig(server)).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    Cluster::new(kube::Client::try_from(config).unwrap())
}

fn list(items: Vec<Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "ApplicationList",
        "metadata": {"resourceVersion": "7"},
        "items": items,
    }))
}

/// An Application as the API returns it (no apiVersion/kind on list items).
fn app(ns: &str, name: &str, annotations: &[(&str, &str)], source: Value, status: Value) -> Value {
    let annotations: serde_json::Map<String, Value> = annotations
        .iter()
        .map(|(k, v)| (format!("{IU}/{k}"), Value::String(v.to_string())))
        .collect();
    json!({
        "metadata": {"name": name, "namespace": ns, "labels": {"team": "payments"},
                     "annotations": annotations, "resourceVersion": "3"},
        "spec": {"project": "default", "source": source,
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}},
        "status": status,
    })
}

fn bearer() -> wiremock::matchers::HeaderExactMatcher {
    header("authorization", format!("Bearer {TOKEN}").as_str())
}

/// The query strings of the requests `server` received for `path`, in order.
async fn queries(server: &MockServer, method_: &str, path_: &str) -> Vec<String> {
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r: &&Request| r.method.as_str() == method_ && r.url.path() == path_)
        .map(|r| r.url.query().unwrap_or_default().to_string())
        .collect()
}

fn from_cluster(namespaces: &[&str], selector: Option<&str>) -> FromCluster {
    FromCluster {
        namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        selector: selector.map(str::to_string),
        argocd_namespace: None,
    }
}

fn kustomize(images: &[&str]) -> Value {
    json!({"repoURL": "https://git.example/m.git", "path": "apps/web", "targetRevision": "main",
           "kustomize": {"images": images}})
}

// === listing ===

#[tokio::test]
async fn lists_applications_across_namespaces_with_a_label_selector() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(APPS))
        .and(query_param("labelSelector", "team=payments"))
        .and(bearer())
        .respond_with(list(vec![
            app(
                "team-b",
                "web",
                &[("image-list", "r.example/web")],
                kustomize(&[]),
                json!({}),
            ),
            app("argocd", "api", &[], kustomize(&[]), json!({})),
        ]))
        .expect(1)
        .mount(&server)
        .await;

    let apps = cluster(&server)
        .await
        .applications(&from_cluster(&[], Some("team=payments")))
        .await
        .unwrap();

    let ids: Vec<String> = apps.iter().map(|a| a.id()).collect();
    assert_eq!(ids, vec!["argocd/api", "team-b/web"]);
    assert_eq!(apps[1].origin, "cluster");
    assert_eq!(
        apps[1].metadata.annotations[&format!("{IU}/image-list")],
        "r.example/web"
    );
    assert_eq!(
        queries(&server, "GET", APPS).await,
        // kube-rs starts every query with `&`; the API server ignores the empty pair.
        vec!["&labelSelector=team%3Dpayments"]
    );
}

#[tokio::test]
async fn lists_applications_per_namespace_when_namespaces_are_named() {
    let server = MockServer::start().await;
    for ns in ["team-a", "team-b"] {
        Mock::given(method("GET"))
            .and(path(format!(
                "/apis/argoproj.io/v1alpha1/namespaces/{ns}/applications"
            )))
            .and(query_param("labelSelector", "team=payments,tier!=batch"))
            .and(bearer())
            .respond_with(list(vec![app(ns, "web", &[], kustomize(&[]), json!({}))]))
            .expect(1)
            .mount(&server)
            .await;
    }
    // Never across all namespaces: the service account may not be allowed to.
    Mock::given(path(APPS))
        .respond_with(ResponseTemplate::new(403))
        .expect(0)
        .mount(&server)
        .await;

    let apps = cluster(&server)
        .await
        .applications(&from_cluster(
            &["team-a", "team-b"],
            Some("team=payments,tier!=batch"),
        ))
        .await
        .unwrap();
    let ids: Vec<String> = apps.iter().map(|a| a.id()).collect();
    assert_eq!(ids, vec!["team-a/web", "team-b/web"]);
}

#[tokio::test]
async fn a_forbidden_listing_is_an_error_naming_the_namespace() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/argoproj.io/v1alpha1/namespaces/team-a/applications"))
        .respond_with(ResponseTemplate::new(403).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
            "message": "applications.argoproj.io is forbidden: User \"system:serviceaccount:x:y\" cannot list"
        })))
        .expect(1)
        .mount(&server)
        .await;
    let err = cluster(&server)
        .await
        .applications(&from_cluster(&["team-a"], None))
        .await
        .map_err(|e| tagpilot::error_chain::chain(&e))
        .unwrap_err();
    assert!(
        err.contains("namespace team-a") && err.contains("forbidden"),
        "{err}"
    );
}

// === pull secrets ===

fn dockerconfigjson_secret(ns: &str, name: &str, host: &str, user: &str, password: &str) -> Value {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let config = json!({"auths": {host: {"auth": b64(&format!("{user}:{password}"))}}});
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": {"name": name, "namespace": ns},
        "data": {".dockerconfigjson": b64(&config.to_string())},
    })
}

fn fresh_cache() -> (tempfile::TempDir, RepoCache) {
    let dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(dir.path().join("cache"));
    (dir, cache)
}

fn cluster_config(extra: &str) -> config::Config {
    config::parse(
        Path::new("tagpilot.yaml"),
        &format!("applications:\n  fromCluster:\n    namespaces: [argocd]\n{extra}"),
    )
    .unwrap()
}

#[tokio::test]
async fn a_pull_secret_read_from_the_cluster_reaches_the_registry_and_plan_patches_nothing() {
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let image = reg.image("shop/api");
    let server = MockServer::start().await;
    let annotations = [
        ("image-list", format!("api={image}:^1.0")),
        ("api.pull-secret", "pullsecret:argocd/regcred".to_string()),
    ];
    let annotations: Vec<(&str, &str)> =
        annotations.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // Two apps name the same Secret: it is read once.
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .and(bearer())
        .respond_with(list(vec![
            app(
                "argocd",
                "web",
                &annotations,
                kustomize(&[&format!("{image}:1.0.0")]),
                json!({}),
            ),
            app(
                "argocd",
                "web-canary",
                &annotations,
                json!({"repoURL": "https://git.example/m.git", "path": "apps/canary", "helm": {}}),
                json!({"sourceType": "Helm", "summary": {"images": [format!("{image}:1.0.0")]}}),
            ),
        ]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/argocd/secrets/regcred"))
        .and(bearer())
        .respond_with(
            ResponseTemplate::new(200).set_body_json(dockerconfigjson_secret(
                "argocd",
                "regcred",
                &reg.host(),
                reg.user().unwrap(),
                reg.password().unwrap(),
            )),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;

    let config = cluster_config("");
    let from = config.applications.as_ref().unwrap().from_cluster.clone();
    let loaded = argocd::read::cluster::load(cluster(&server).await, from.as_ref().unwrap())
        .await
        .unwrap();
    assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
    let credential = &loaded.registry_credentials[&reg.host()];
    assert_eq!(credential.username, reg.user().unwrap());
    assert_eq!(credential.source, "Secret argocd/regcred");

    // Without the Secret's credentials the registry refuses (no entry in `registries:`).
    let mut options = reg.client_options(vec![tagpilot::config::RegistryConfig {
        host: reg.host(),
        insecure: true,
        credentials: None,
        rate_limit: None,
        timeout: None,
        tag_list: Default::default(),
    }]);
    let anonymous = RegistryClient::new(options.clone()).unwrap();
    assert!(
        anonymous
            .list_tags(&reg.repository("shop/api"))
            .await
            .is_err()
    );
    options.credentials = loaded.registry_credentials.clone();
    let registry = RegistryClient::new(options).unwrap();

    let (_dir, cache) = fresh_cache();
    let run = cycle(&config, Some(&loaded), &cache, &registry, &(), true).await;
    assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
    let changes: Vec<(String, String, String, String)> = run
        .plan
        .changes
        .iter()
        .map(|c| {
            (
                c.file.clone(),
                c.field.clone(),
                c.from.clone(),
                c.to.clone(),
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            (
                "Application argocd/web".into(),
                "spec.source.kustomize.images".into(),
                "1.0.0".into(),
                "1.1.0".into()
            ),
            (
                "Application argocd/web-canary".into(),
                "spec.source.helm.parameters".into(),
                "1.0.0".into(),
                "1.1.0".into()
            ),
        ]
    );
    let text = tagpilot::report::applications::text(run.applications.as_deref().unwrap());
    assert!(
        text.contains(&format!(
            r#"would patch: {{"spec":{{"source":{{"kustomize":{{"images":["{image}:1.1.0"]}}}}}}}}"#
        )),
        "{text}"
    );
    assert!(
        !text.contains(reg.password().unwrap()),
        "the password leaked into the report"
    );
}

#[tokio::test]
async fn a_pull_secret_without_the_registry_is_reported_by_name_without_its_content() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(list(vec![app(
            "argocd",
            "web",
            &[
                ("image-list", "ghcr.io/o/web"),
                ("pull-secret", "secret:argocd/creds#token"),
            ],
            kustomize(&[]),
            json!({}),
        )]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/argocd/secrets/creds"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "creds", "namespace": "argocd"},
            "data": {"token": base64::engine::general_purpose::STANDARD.encode("no-colon-s3cret")},
        })))
        .expect(1)
        .mount(&server)
        .await;
    let loaded =
        argocd::read::cluster::load(cluster(&server).await, &from_cluster(&["argocd"], None))
            .await
            .unwrap();
    assert!(loaded.registry_credentials.is_empty());
    assert_eq!(
        loaded.problems,
        vec![
            "application argocd/web: ghcr.io/o/web: pull-secret secret:argocd/creds#token: field \"token\" of Secret argocd/creds does not hold user:password"
        ]
    );
}

// === write-back-method: argocd ===

const MEMORY_REGISTRY: &str = "r.example/shop/api: {tags: [\"1.0.0\", \"1.2.0\"]}\nr.example/shop/web: {tags: [\"2.0.0\", \"2.1.0\"]}\n";

#[tokio::test]
async fn apply_patches_each_application_once_with_the_exact_merge_patch() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(list(vec![
            // Kustomize: the entry for the image is replaced, the other kept.
            app(
                "argocd",
                "shop",
                &[("image-list", "api=r.example/shop/api")],
                kustomize(&["r.example/shop/api:1.0.0", "r.example/other:9"]),
                json!({"sourceType": "Kustomize"}),
            ),
            // Helm: parameters at the annotated paths, strings forced; others kept.
            app(
                "argocd",
                "web",
                &[
                    ("image-list", "web=r.example/shop/web"),
                    ("web.helm.image-name", "web.image.repository"),
                    ("web.helm.image-tag", "web.image.tag"),
                ],
                json!({"repoURL": "https://git.example/m.git", "path": "charts/web",
                       "helm": {"parameters": [{"name": "replicas", "value": "2"}]}}),
                json!({"sourceType": "Helm", "summary": {"images": ["r.example/shop/web:2.0.0"]}}),
            ),
            // Already at the newest tag: no patch.
            app(
                "argocd",
                "done",
                &[("image-list", "r.example/shop/api")],
                kustomize(&["r.example/shop/api:1.2.0"]),
                json!({}),
            ),
        ]))
        .expect(2)
        .mount(&server)
        .await;
    let patch = |name: &str, body: Value| {
        Mock::given(method("PATCH"))
            .and(path(format!(
                "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/{name}"
            )))
            .and(query_param("fieldManager", "tagpilot"))
            .and(header("content-type", "application/merge-patch+json"))
            .and(bearer())
            .and(body_json(body))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
                "metadata": {"name": name, "namespace": "argocd"}
            })))
    };
    patch(
        "shop",
        json!({"spec": {"source": {"kustomize": {"images": ["r.example/shop/api:1.2.0", "r.example/other:9"]}}}}),
    )
    .expect(1)
    .mount(&server)
    .await;
    patch(
        "web",
        json!({"spec": {"source": {"helm": {"parameters": [
            {"name": "replicas", "value": "2"},
            {"name": "web.image.repository", "value": "r.example/shop/web", "forceString": true},
            {"name": "web.image.tag", "value": "2.1.0", "forceString": true},
        ]}}}}),
    )
    .expect(1)
    .mount(&server)
    .await;
    Mock::given(method("PATCH"))
        .and(path(
            "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/done",
        ))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;

    let config = cluster_config("");
    let registry = MemoryRegistry::from_yaml(MEMORY_REGISTRY).unwrap();
    let (_dir, cache) = fresh_cache();
    for dry_run in [true, false] {
        let loaded =
            argocd::read::cluster::load(cluster(&server).await, &from_cluster(&["argocd"], None))
                .await
                .unwrap();
        let run = cycle(&config, Some(&loaded), &cache, &registry, &(), dry_run).await;
        assert!(run.plan.problems.is_empty(), "{:?}", run.plan.problems);
        assert_eq!(run.plan.changes.len(), 2);
        let statuses: Vec<(String, Option<String>)> = run
            .applications
            .iter()
            .flatten()
            .map(|a| {
                (
                    a.application.clone(),
                    a.patch.as_ref().map(|p| p.status.to_string()),
                )
            })
            .collect();
        let done = if dry_run { "would patch" } else { "patched" };
        assert_eq!(
            statuses,
            vec![
                ("argocd/done".to_string(), None),
                ("argocd/shop".to_string(), Some(done.to_string())),
                ("argocd/web".to_string(), Some(done.to_string())),
            ]
        );
        if dry_run {
            // `shop` and `done` follow one image: one listing for it, one for `web`'s.
            assert_eq!(registry.tag_list_calls(), 2);
            assert!(
                queries(
                    &server,
                    "PATCH",
                    "/apis/argoproj.io/v1alpha1/namespaces/argocd/applications/shop"
                )
                .await
                .is_empty(),
                "plan sent a PATCH"
            );
        }
    }
}

const UPDATERS: &str =
    "/apis/argocd-image-updater.argoproj.io/v1alpha1/namespaces/argocd/imageupdaters";

/// An `ImageUpdater` as the API lists it, selecting `shop` (not `other`), with `status`.
fn image_updater(status: Value) -> Value {
    json!({
        "metadata": {"name": "updater", "namespace": "argocd", "generation": 2,
                     "resourceVersion": "5"},
        "spec": {"applicationRefs": [{
            "namePattern": "sho?",
            "images": [{"alias": "api", "imageName": "r.example/shop/api"}],
        }]},
        "status": status,
    })
}

/// `ImageUpdater` resources in the cluster configure its Applications (the annotations of an
/// Application none selects count for nothing), and each resource's status is written after a
/// cycle, as Image Updater writes it, and only when it changed.
#[tokio::test]
async fn image_updater_resources_are_listed_and_their_status_written_only_when_changed() {
    let mock_server = MockServer::start().await;
    let server = &mock_server;
    let apps = |tag: &str| {
        list(vec![
            app(
                "argocd",
                "shop",
                &[],
                kustomize(&[&format!("r.example/shop/api:{tag}")]),
                json!({"sourceType": "Kustomize"}),
            ),
            // Annotated, but no resource selects it: not updated.
            app(
                "argocd",
                "other",
                &[("image-list", "r.example/shop/api")],
                kustomize(&["r.example/shop/api:1.0.0"]),
                json!({"sourceType": "Kustomize"}),
            ),
        ])
    };
    let updaters = |status: Value| {
        ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "argocd-image-updater.argoproj.io/v1alpha1",
            "kind": "ImageUpdaterList",
            "metadata": {"resourceVersion": "9"},
            "items": [image_updater(status)],
        }))
    };
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .and(bearer())
        .respond_with(apps("1.0.0"))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(UPDATERS))
        .and(bearer())
        .respond_with(updaters(Value::Null))
        .up_to_n_times(1)
        .expect(1)
        .mount(server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{ARGOCD_APPS}/shop")))
        .and(body_json(
            json!({"spec": {"source": {"kustomize": {"images": ["r.example/shop/api:1.2.0"]}}}}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
            "metadata": {"name": "shop", "namespace": "argocd"}
        })))
        .expect(1)
        .mount(server)
        .await;
    let status_path = format!("{UPDATERS}/updater/status");
    Mock::given(method("PATCH"))
        .and(path(status_path.as_str()))
        .and(query_param("fieldManager", "tagpilot"))
        .and(header("content-type", "application/merge-patch+json"))
        .and(bearer())
        .respond_with(ResponseTemplate::new(200).set_body_json(image_updater(json!({}))))
        .mount(server)
        .await;
    let sent = || {
        let status_path = status_path.clone();
        async move {
            server
                .received_requests()
                .await
                .unwrap()
                .iter()
                .filter(|r| r.method.as_str() == "PATCH" && r.url.path() == status_path)
                .map(|r| r.body_json::<Value>().unwrap()["status"].clone())
                .collect::<Vec<Value>>()
        }
    };

    let config = cluster_config("");
    let registry = MemoryRegistry::from_yaml(MEMORY_REGISTRY).unwrap();
    let (_dir, cache) = fresh_cache();
    let run = |dry_run: bool| {
        let (config, registry, cache) = (&config, &registry, &cache);
        async move {
            let loaded = argocd::read::cluster::load(
                cluster(server).await,
                &from_cluster(&["argocd"], None),
            )
            .await
            .unwrap();
            cycle(config, Some(&loaded), cache, registry, &(), dry_run).await
        }
    };

    // 1. `shop` is patched; the status says so.
    let first = run(false).await;
    assert!(first.plan.problems.is_empty(), "{:?}", first.plan.problems);
    let reports = first.applications.unwrap();
    let other = reports
        .iter()
        .find(|a| a.application == "argocd/other")
        .unwrap();
    assert!(other.images.is_empty());
    assert!(
        other.skipped_annotations[0]
            .reason
            .contains("none in namespace \"argocd\" selects"),
        "{:?}",
        other.skipped_annotations
    );
    let shop = reports
        .iter()
        .find(|a| a.application == "argocd/shop")
        .unwrap();
    assert_eq!(
        shop.configured_by.as_deref(),
        Some("ImageUpdater argocd/updater (applicationRefs[0], namePattern \"sho?\")")
    );
    let statuses = sent().await;
    assert_eq!(statuses.len(), 1);
    let status = &statuses[0];
    assert_eq!(status["applicationsMatched"], 1);
    assert_eq!(status["imagesManaged"], 1);
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["recentUpdates"][0]["alias"], "api");
    assert_eq!(status["recentUpdates"][0]["newVersion"], "1.2.0");
    assert_eq!(status["conditions"][2]["type"], "Ready");
    assert_eq!(status["conditions"][2]["reason"], "ReconcileSucceeded");

    // 2. Nothing to update: the Ready message changes once, so the status is written again.
    // The API now serves what was written.
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(apps("1.2.0"))
        .expect(3)
        .mount(server)
        .await;
    Mock::given(method("GET"))
        .and(path(UPDATERS))
        .respond_with(updaters(status.clone()))
        .up_to_n_times(1)
        .mount(server)
        .await;
    let second = run(false).await;
    assert!(second.plan.changes.is_empty(), "{:?}", second.plan.changes);
    let statuses = sent().await;
    assert_eq!(statuses.len(), 2);
    assert_eq!(
        statuses[1]["conditions"][2]["message"],
        "Reconciled 1 applications, 0 images updated."
    );
    assert_eq!(
        statuses[1]["recentUpdates"], status["recentUpdates"],
        "kept"
    );

    // 3. Unchanged but for the time of the check: not written. Nor by `plan`.
    Mock::given(method("GET"))
        .and(path(UPDATERS))
        .respond_with(updaters(statuses[1].clone()))
        .mount(server)
        .await;
    run(false).await;
    run(true).await;
    assert_eq!(sent().await.len(), 2, "an unchanged status was written");
}

/// `tagpilot run` watches `ImageUpdater` resources: one listing, then a watch; every cycle
/// reads what the watch holds instead of listing again.
#[tokio::test]
async fn image_updater_resources_are_watched_rather_than_listed_every_cycle() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(list(vec![app(
            "argocd",
            "shop",
            &[],
            kustomize(&["r.example/shop/api:1.0.0"]),
            json!({"sourceType": "Kustomize"}),
        )]))
        .expect(3)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(UPDATERS))
        .and(wiremock::matchers::query_param_is_missing("watch"))
        .and(bearer())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "argocd-image-updater.argoproj.io/v1alpha1",
            "kind": "ImageUpdaterList",
            "metadata": {"resourceVersion": "9"},
            "items": [image_updater(json!({}))],
        })))
        .expect(1)
        .mount(&server)
        .await;
    // The watch from that listing's version: no change comes while the test runs.
    Mock::given(method("GET"))
        .and(path(UPDATERS))
        .and(query_param("watch", "true"))
        .and(query_param("resourceVersion", "9"))
        .respond_with(ResponseTemplate::new(200).set_delay(std::time::Duration::from_secs(60)))
        .mount(&server)
        .await;

    let c = cluster(&server).await;
    let (watch, drive) = c.watch_image_updaters(&["argocd".to_string()]);
    let driving = tokio::spawn(drive);
    let from = from_cluster(&["argocd"], None);
    tokio::time::timeout(crate::support::PATIENCE, watch.listed())
        .await
        .expect("the watch never listed");
    assert!(watch.snapshot().is_some());
    for _ in 0..3 {
        let loaded = argocd::read::cluster::load_watched(c.clone(), &from, Some(&watch))
            .await
            .unwrap();
        assert_eq!(loaded.updaters.len(), 1);
        assert_eq!(loaded.updaters[0].metadata.name, "updater");
        assert_eq!(loaded.updaters[0].origin, "cluster");
    }
    let watches = queries(&server, "GET", UPDATERS)
        .await
        .into_iter()
        .filter(|q| q.contains("watch=true"))
        .count();
    assert!(watches >= 1, "no watch was started");
    driving.abort();
    server.verify().await;
}

#[tokio::test]
async fn a_rejected_patch_is_a_problem_naming_the_application() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(list(vec![app(
            "argocd",
            "shop",
            &[("image-list", "r.example/shop/api")],
            kustomize(&["r.example/shop/api:1.0.0"]),
            json!({}),
        )]))
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(403).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden",
            "code": 403, "message": "cannot patch"
        })))
        .expect(1)
        .mount(&server)
        .await;
    let config = cluster_config("");
    let registry = MemoryRegistry::from_yaml(MEMORY_REGISTRY).unwrap();
    let (_dir, cache) = fresh_cache();
    let loaded =
        argocd::read::cluster::load(cluster(&server).await, &from_cluster(&["argocd"], None))
            .await
            .unwrap();
    let run = cycle(&config, Some(&loaded), &cache, &registry, &(), false).await;
    assert_eq!(run.plan.problems.len(), 1, "{:?}", run.plan.problems);
    let p = &run.plan.problems[0];
    assert_eq!(p.file.as_deref(), Some("Application argocd/shop"));
    assert!(
        p.message.contains("patching Application argocd/shop"),
        "{}",
        p.message
    );
}

#[tokio::test]
async fn an_application_owned_by_an_applicationset_is_not_patched_and_git_write_back_is_suggested()
{
    let server = MockServer::start().await;
    let mut generated = app(
        "argocd",
        "shop-prod",
        &[("image-list", "r.example/shop/api")],
        kustomize(&["r.example/shop/api:1.0.0"]),
        json!({"sourceType": "Kustomize"}),
    );
    generated["metadata"]["ownerReferences"] = json!([{
        "apiVersion": "argoproj.io/v1alpha1", "kind": "ApplicationSet", "name": "shop",
        "uid": "0b5e2c1a-6a0e-4a53-9f4e-1a2b3c4d5e6f", "controller": true, "blockOwnerDeletion": true,
    }]);
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .respond_with(list(vec![generated]))
        .expect(1)
        .mount(&server)
        .await;
    // The controller would put the old tag back: nothing is sent.
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let config = cluster_config("");
    let registry = MemoryRegistry::from_yaml(MEMORY_REGISTRY).unwrap();
    let (_dir, cache) = fresh_cache();
    let loaded =
        argocd::read::cluster::load(cluster(&server).await, &from_cluster(&["argocd"], None))
            .await
            .unwrap();
    let run = cycle(&config, Some(&loaded), &cache, &registry, &(), false).await;
    assert!(run.plan.changes.is_empty(), "{:?}", run.plan.changes);
    let apps = run.applications.as_deref().unwrap();
    assert_eq!(apps.len(), 1);
    assert_eq!(apps[0].application, "argocd/shop-prod");
    assert!(apps[0].patch.is_none(), "{:?}", apps[0].patch);
    assert_eq!(apps[0].problems.len(), 1, "{:?}", apps[0].problems);
    let problem = &apps[0].problems[0];
    assert!(
        problem.contains("ApplicationSet shop") && problem.contains("use write-back-method git"),
        "{problem}"
    );
    assert_eq!(run.plan.problems.len(), 1, "{:?}", run.plan.problems);
    assert!(
        run.plan.problems[0]
            .message
            .starts_with("application argocd/shop-prod: write-back-method argocd:"),
        "{}",
        run.plan.problems[0].message
    );
    let text = tagpilot::report::applications::text(apps);
    assert!(text.contains("problem: write-back-method argocd"), "{text}");
}

// === the binary ===

const BIN: &str = env!("CARGO_BIN_EXE_tagpilot");

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

async fn tagpilot(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Out {
    let home = dir.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("DOCKER_CONFIG", home.join(".docker"))
        .env("TAGPILOT_CACHE_DIR", dir.join("cache"))
        .envs(env.iter().copied())
        .output()
        .await
        .expect("run tagpilot");
    Out {
        code: out.status.code().expect("exited by a signal"),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
    }
}

#[track_caller]
fn expect(out: &Out, code: i32) {
    assert_eq!(
        out.code, code,
        "exit code\n--- stdout\n{}\n--- stderr\n{}",
        out.stdout, out.stderr
    );
}

/// Commits `files` to the bare repository's `main`.
fn seed(repo: &BareRepo, files: &[(&str, String)]) {
    let work = tempfile::tempdir().unwrap();
    git(
        work.path(),
        &[
            "clone",
            "-q",
            "-b",
            "main",
            repo.path().to_str().unwrap(),
            "w",
        ],
    );
    let w = work.path().join("w");
    for (f, text) in files {
        let p = w.join(f);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    git(&w, &["add", "."]);
    git(&w, &["commit", "-q", "-m", "seed"]);
    git(&w, &["push", "-q", "origin", "main"]);
}

#[tokio::test]
async fn the_binary_plans_and_applies_applications_from_git_with_one_commit_then_none() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/web", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let repo = BareRepo::new();
    let image = reg.image("shop/web");
    let application = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}/image-list: web={image}:^1.0\n    {IU}/write-back-method: git\nspec:\n  source:\n    repoURL: {}\n    path: apps/web\n    targetRevision: main\n    directory: {{recurse: true}}\n",
        repo.file_url()
    );
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: {image}:1.0.0 # pinned by CI\n"
    );
    seed(
        &repo,
        &[
            ("argocd/apps/web.yaml", application),
            ("apps/web/deployment.yaml", deployment.clone()),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    // Only `registries:`, `repositories:` and `applications:`: no policies directory.
    std::fs::write(
        dir.path().join("tagpilot.yaml"),
        format!(
            "registries:\n{}repositories:\n  - name: manifests\n    url: {}\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/apps/*.yaml\"]\n",
            reg.registries_yaml(),
            repo.file_url()
        ),
    )
    .unwrap();
    let before = repo.rev("main").unwrap();

    let plan = tagpilot(dir.path(), &["plan"], &[]).await;
    expect(&plan, 0);
    assert!(plan.stdout.contains("1.0.0 -> 1.1.0"), "{}", plan.stdout);
    assert!(plan.stdout.contains("argocd/web"), "{}", plan.stdout);
    assert_eq!(repo.rev("main").unwrap(), before, "plan pushed a commit");

    let apply = tagpilot(dir.path(), &["apply"], &[]).await;
    expect(&apply, 0);
    let after = repo.rev("main").unwrap();
    assert_eq!(
        git(
            &repo.path(),
            &["rev-list", "--count", &format!("{before}..{after}")]
        ),
        "1"
    );
    assert_eq!(
        repo.show("main", "apps/web/deployment.yaml"),
        deployment.replace(":1.0.0", ":1.1.0")
    );

    let again = tagpilot(dir.path(), &["apply"], &[]).await;
    expect(&again, 0);
    assert_eq!(repo.rev("main").unwrap(), after, "a second apply committed");
}

#[tokio::test]
async fn the_binary_reads_applications_through_kubeconfig_and_plan_patches_nothing() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let image = reg.image("shop/api");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(APPS))
        .and(query_param("labelSelector", "team=payments"))
        .and(bearer())
        .respond_with(list(vec![app(
            "argocd",
            "shop",
            &[("image-list", &image)],
            kustomize(&[&format!("{image}:1.0.0")]),
            json!({}),
        )]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig_path = dir.path().join("kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig(&server)).unwrap();
    std::fs::write(
        dir.path().join("tagpilot.yaml"),
        format!(
            "registries:\n{}applications:\n  fromCluster:\n    selector: team=payments\n",
            reg.registries_yaml()
        ),
    )
    .unwrap();
    let out = tagpilot(
        dir.path(),
        &["plan"],
        &[("KUBECONFIG", kubeconfig_path.to_str().unwrap())],
    )
    .await;
    expect(&out, 0);
    assert!(
        out.stdout.contains("argocd/shop (cluster)"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            r#"would patch: {{"spec":{{"source":{{"kustomize":{{"images":["{image}:1.1.0"]}}}}}}}}"#
        )),
        "{}",
        out.stdout
    );
    let all = format!("{}\n{}", out.stdout, out.stderr);
    assert!(!all.contains(TOKEN), "the bearer token leaked");
}

/// A registry with `shop/web` 1.0.0 and 1.1.0, and a bare repository (with history, as every real
/// one has) whose `apps/web` Deployment runs 1.0.0.
struct WebFixture {
    reg: TestRegistry,
    repo: BareRepo,
    image: String,
    deployment: String,
}

async fn web_fixture() -> WebFixture {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/web", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let repo = BareRepo::new();
    let image = reg.image("shop/web");
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  template:\n    spec:\n      containers:\n        - name: web\n          image: {image}:1.0.0\n"
    );
    seed(&repo, &[("apps/web/deployment.yaml", deployment.clone())]);
    WebFixture {
        reg,
        repo,
        image,
        deployment,
    }
}

/// The API lists one Application `argocd/web` on `url`, written back with `write_back`,
/// exactly `times` times.
async fn list_web_app(server: &MockServer, image: &str, write_back: &str, url: &str, times: u64) {
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .and(bearer())
        .respond_with(list(vec![app(
            "argocd",
            "web",
            &[
                ("image-list", &format!("{image}:^1.0")),
                ("write-back-method", write_back),
            ],
            json!({"repoURL": url, "path": "apps/web", "targetRevision": "main", "directory": {}}),
            json!({}),
        )]))
        .expect(times)
        .mount(server)
        .await;
}

/// Writes a kubeconfig for `server` and a tagpilot.yaml reading Applications from its `argocd`
/// namespace, allowed to write to their `origin` repository (not in `repositories:`: its
/// credentials come from Argo CD's Secrets); returns the kubeconfig's path.
fn write_cluster_config(dir: &Path, server: &MockServer, reg: &TestRegistry) -> String {
    let kubeconfig_path = dir.join("kubeconfig");
    std::fs::write(&kubeconfig_path, kubeconfig(server)).unwrap();
    std::fs::write(
        dir.join("tagpilot.yaml"),
        format!(
            "registries:\n{}applications:\n  fromCluster:\n    namespaces: [argocd]\n  \
             allowRepositories: [\"**/origin\"]\n",
            reg.registries_yaml()
        ),
    )
    .unwrap();
    kubeconfig_path.to_str().unwrap().to_string()
}

#[tokio::test]
async fn repocreds_from_a_secret_push_over_ssh_trusting_argocd_s_host_keys_and_plan_pushes_nothing()
{
    let ssh = crate::support::git::SshGitServer::start();
    let WebFixture {
        reg,
        repo,
        image,
        deployment,
    } = web_fixture().await;
    let url = ssh.url(&repo.path());
    let server = MockServer::start().await;
    list_web_app(&server, &image, "git:repocreds", &url, 2).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let key = std::fs::read_to_string(&ssh.user_key.private).unwrap();
    let secret = |name: &str, kind: &str, url: &str, key: &str| {
        json!({
            "metadata": {"name": name, "namespace": "argocd",
                         "labels": {"argocd.argoproj.io/secret-type": kind}},
            "type": "Opaque",
            "data": {"url": b64(url), "sshPrivateKey": b64(key)},
        })
    };
    // The longest matching prefix wins; the exact `repository` Secret is for another repository.
    let host_prefix = format!("ssh://{}@127.0.0.1:{}/", ssh.user, ssh.port);
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/argocd/secrets"))
        .and(query_param(
            "labelSelector",
            "argocd.argoproj.io/secret-type in (repository,repo-creds)",
        ))
        .and(bearer())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "SecretList", "metadata": {},
            "items": [
                secret("host", "repo-creds", &host_prefix, "not a key"),
                secret("tmp", "repo-creds", &format!("{host_prefix}{}", repo.dir.path().display().to_string().trim_start_matches('/')), &key),
                secret("other", "repository", &format!("{host_prefix}srv/other.git"), "not a key"),
            ],
        })))
        .expect(2)
        .mount(&server)
        .await;

    // The host key is trusted because Argo CD trusts it: it is in Argo CD's ConfigMap, and in
    // no known_hosts file of the user's.
    Mock::given(method("GET"))
        .and(path(
            "/api/v1/namespaces/argocd/configmaps/argocd-ssh-known-hosts-cm",
        ))
        .and(bearer())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "argocd-ssh-known-hosts-cm", "namespace": "argocd"},
            "data": {"ssh_known_hosts": std::fs::read_to_string(ssh.known_hosts()).unwrap()},
        })))
        .expect(2)
        .mount(&server)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    let kubeconfig_path = write_cluster_config(dir.path(), &server, &reg);
    let env = [("KUBECONFIG", kubeconfig_path.as_str())];
    let before = repo.rev("main").unwrap();

    let plan = tagpilot(dir.path(), &["plan"], &env).await;
    expect(&plan, 0);
    assert!(plan.stdout.contains("1.0.0 -> 1.1.0"), "{}", plan.stdout);
    assert_eq!(repo.rev("main").unwrap(), before, "plan pushed a commit");

    let apply = tagpilot(dir.path(), &["apply"], &env).await;
    expect(&apply, 0);
    assert_ne!(repo.rev("main").unwrap(), before);
    assert_eq!(
        repo.show("main", "apps/web/deployment.yaml"),
        deployment.replace(":1.0.0", ":1.1.0")
    );
    let all = format!(
        "{}\n{}{}\n{}",
        plan.stdout, plan.stderr, apply.stdout, apply.stderr
    );
    assert!(!all.contains("PRIVATE KEY"), "the key leaked");
}

/// `git:secret:` with an HTTPS username and password: the credentials reach a real
/// `git http-backend` with Basic auth, held in memory only, and never printed.
#[tokio::test]
async fn git_secret_with_https_credentials_pushes_over_http() {
    const USER: &str = "argo-bot";
    const PASSWORD: &str = "s3cret-from-a-secret";
    let WebFixture {
        reg,
        repo,
        image,
        deployment,
    } = web_fixture().await;
    let http = crate::support::git::HttpGitServer::start_for(repo.dir.path(), USER, PASSWORD);
    let url = http.url("origin.git");
    let server = MockServer::start().await;
    list_web_app(&server, &image, "git:secret:argocd/web-repo", &url, 1).await;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/argocd/secrets/web-repo"))
        .and(bearer())
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "web-repo", "namespace": "argocd"},
            "type": "Opaque",
            "data": {"url": b64(&url), "username": b64(USER), "password": b64(PASSWORD)},
        })))
        .expect(1)
        .mount(&server)
        .await;

    let dir = tempfile::tempdir().unwrap();
    let kubeconfig_path = write_cluster_config(dir.path(), &server, &reg);
    let env = [("KUBECONFIG", kubeconfig_path.as_str())];
    let apply = tagpilot(dir.path(), &["apply"], &env).await;
    expect(&apply, 0);
    assert_eq!(
        repo.show("main", "apps/web/deployment.yaml"),
        deployment.replace(":1.0.0", ":1.1.0")
    );
    let all = format!("{}{}", apply.stdout, apply.stderr);
    assert!(!all.contains(PASSWORD), "the password leaked: {all}");
}

/// `plan --diff` shows an `argocd`-method Application's patch: the merge patch document with
/// the overrides the live Application has, and as the patch sets them. Nothing is patched.
#[tokio::test]
async fn plan_diff_shows_the_patch_of_an_argocd_method_application() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let image = reg.image("shop/api");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .and(bearer())
        .respond_with(list(vec![app(
            "argocd",
            "shop",
            &[("image-list", &image)],
            kustomize(&[&format!("{image}:1.0.0")]),
            json!({}),
        )]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig_path = write_cluster_config(dir.path(), &server, &reg);
    let out = tagpilot(
        dir.path(),
        &["plan", "--diff"],
        &[("KUBECONFIG", kubeconfig_path.as_str())],
    )
    .await;
    expect(&out, 0);
    let expected = format!(
        "# Application argocd/shop: the merge patch (write-back-method argocd)
--- a/Application argocd/shop (live)
+++ b/Application argocd/shop (patched)
@@ -3,7 +3,7 @@
     \"source\": {{
       \"kustomize\": {{
         \"images\": [
-          \"{image}:1.0.0\"
+          \"{image}:1.1.0\"
         ]
       }}
     }}
"
    );
    assert!(
        out.stdout.ends_with(&expected),
        "expected at the end:\n{expected}\n--- got\n{}",
        out.stdout
    );
}

/// `plan --diff` shows the `.argocd-source-<app>.yaml` file a git write-back would create, in
/// the repository's part of the diff, and pushes nothing.
#[tokio::test]
async fn plan_diff_shows_the_argocd_source_file_a_git_write_back_creates() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/web", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let repo = BareRepo::new();
    let image = reg.image("shop/web");
    let application = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: argocd\n  annotations:\n    {IU}/image-list: web={image}:^1.0\n    {IU}/write-back-method: git\nspec:\n  source:\n    repoURL: {}\n    path: apps/web\n    targetRevision: main\n    kustomize: {{}}\n",
        repo.file_url()
    );
    let kustomization =
        format!("resources:\n  - deployment.yaml\nimages:\n  - name: {image}\n    newTag: 1.0.0\n");
    seed(
        &repo,
        &[
            ("argocd/apps/web.yaml", application),
            ("apps/web/kustomization.yaml", kustomization),
        ],
    );
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tagpilot.yaml"),
        format!(
            "registries:\n{}repositories:\n  - name: manifests\n    url: {}\napplications:\n  fromGit:\n    - repository: manifests\n      paths: [\"argocd/apps/*.yaml\"]\n",
            reg.registries_yaml(),
            repo.file_url()
        ),
    )
    .unwrap();
    let before = repo.rev("main").unwrap();

    let out = tagpilot(dir.path(), &["plan", "--diff"], &[]).await;
    expect(&out, 0);
    let expected = format!(
        "# repository manifests\n--- /dev/null\n+++ b/apps/web/.argocd-source-web.yaml\n@@ -0,0 +1,3 @@\n+kustomize:\n+  images:\n+  - {image}:1.1.0\n"
    );
    assert!(
        out.stdout.ends_with(&expected),
        "expected at the end:\n{expected}\n--- got\n{}",
        out.stdout
    );
    assert_eq!(repo.rev("main").unwrap(), before, "plan pushed a commit");
}

/// A patch sent is a write like a push: one log line naming the Application and its changes.
#[tokio::test]
async fn each_application_patched_is_logged_with_its_changes() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    let image = reg.image("shop/api");
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(ARGOCD_APPS))
        .and(bearer())
        .respond_with(list(vec![app(
            "argocd",
            "shop",
            &[("image-list", &image)],
            kustomize(&[&format!("{image}:1.0.0")]),
            json!({}),
        )]))
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{ARGOCD_APPS}/shop")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .expect(1)
        .mount(&server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig_path = write_cluster_config(dir.path(), &server, &reg);
    let out = tagpilot(
        dir.path(),
        &["apply", "--log", "info"],
        &[("KUBECONFIG", kubeconfig_path.as_str())],
    )
    .await;
    expect(&out, 0);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("patched Application"))
        .unwrap_or_else(|| panic!("no patch logged:\n{}", out.stderr));
    assert!(
        line.contains(&format!(
            "patched Application argocd/shop: shop/{image}: spec.source.kustomize.images 1.0.0 → 1.1.0"
        )) && line.contains("application=\"argocd/shop\""),
        "{line}"
    );
}

/// `plan --diff --rendered` through the binary, with the Application read from the cluster: the
/// change is rendered for the Application whose source contains it, as Argo CD would render its
/// directory, and nothing is written.
#[tokio::test]
async fn the_binary_renders_a_cluster_application_s_change_with_plan_diff_rendered() {
    let f = web_fixture().await;
    let server = MockServer::start().await;
    list_web_app(&server, &f.image, "git", &f.repo.file_url(), 1).await;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = write_cluster_config(dir.path(), &server, &f.reg);
    let before = f.repo.rev("main").unwrap();
    let out = tagpilot(
        dir.path(),
        &["plan", "--diff", "--rendered"],
        &[("KUBECONFIG", &kubeconfig)],
    )
    .await;
    expect(&out, 0);
    assert!(
        out.stdout.contains(
            ": Application argocd/web rendered\n--- a/Deployment/web\n+++ b/Deployment/web\n"
        ),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains(&format!(
            "-      - image: {0}:1.0.0\n+      - image: {0}:1.1.0\n",
            f.image
        )),
        "{}",
        out.stdout
    );
    assert_eq!(f.repo.rev("main").unwrap(), before, "plan pushed a commit");
}
