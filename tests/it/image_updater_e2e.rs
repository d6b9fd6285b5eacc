//! Argo CD Image Updater's own end-to-end suites, run against tagpilot: a peer's configuration
//! gets the peer's result. Each suite's `01-install.yaml` (its Applications and `ImageUpdater`)
//! and `02-assert.yaml` (the Application spec after `argocd-image-updater run --once`) are copied
//! verbatim under `tests/corpus` (see `SOURCES.md`). The Kubernetes API double serves the
//! Applications as Argo CD holds them once synced: the suite's own spec, with the status Argo CD
//! adds (`sourceType`, and `summary.images` read from the suite's testdata, which is what the
//! sync deploys). The registry holds the tags the suite's registry had. tagpilot's merge patch
//! must set exactly the `spec.source.kustomize.images` the assert expects, and a suite that
//! expects no change gets none, with the reason named.
//!
//! The suites with git write-back (002, 007, 008) push to the suite's own git server, and 006's
//! Application lives outside the `ImageUpdater`'s namespace, which Image Updater's controller no
//! longer lists (it lists `InNamespace(cr.Namespace)`); neither is run here.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use tagpilot::argocd::plan::outcome::ImageStatus;
use tagpilot::argocd::{self, FromCluster};
use tagpilot::config;
use tagpilot::git::RepoCache;
use tagpilot::registry::MemoryRegistry;

use crate::support::engine::cycle;

/// The namespace the suites install their Applications and `ImageUpdater` in.
const NAMESPACE: &str = "argocd-image-updater-e2e";

struct Suite {
    /// The directory under `test/e2e/suite/`.
    name: &'static str,
    /// The tags of the suite's registry (a `MemoryRegistry` file; build times where the
    /// strategy orders by them).
    registry: &'static str,
}

const SUITES: &[Suite] = &[
    Suite {
        name: "001-simple-kustomize-app-semver",
        registry: "10.42.0.1:30000/test-image: {tags: [\"1.0.0\", \"1.0.1\", \"1.0.2\", \"2.0.0\"]}\n",
    },
    Suite {
        name: "003-invalid-image-specified",
        registry: "10.42.0.1:30000/test-image: {tags: [\"1.0.0\", \"1.0.1\", \"1.0.2\"]}\n",
    },
    Suite {
        name: "004-multiple-images",
        registry: "nginx: {tags: [\"1.17.0\", \"1.17.10\", \"1.18.0\", \"mainline-alpine\"]}\n\
                   memcached: {tags: [\"1.6.0\", \"1.6.10\", \"1.6.12\", \"alpine\"]}\n",
    },
    Suite {
        name: "005-app-wide-update-strategy",
        registry: "quay.io/dkarpele/my-guestbook:\n  tags: [\"1.0.0\", \"1.0.1\", \"1.0.2\", \"2.0.0\"]\n  \
                   created:\n    \"1.0.0\": 2025-01-01T00:00:00Z\n    \"1.0.1\": 2025-01-02T00:00:00Z\n    \
                   \"1.0.2\": 2025-01-03T00:00:00Z\n    \"2.0.0\": 2025-02-01T00:00:00Z\n",
    },
];

fn e2e() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/corpus/argoproj-labs/argocd-image-updater/test/e2e")
}

fn documents(file: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_saphyr::from_multiple::<Value>(&text)
        .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
        .into_iter()
        .filter(|d| !d.is_null())
        .collect()
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

/// The images of the containers in the suite's testdata at `source_path`: what Argo CD reports
/// the Application running once it synced (`status.summary.images`).
fn deployed(source_path: &str) -> Vec<Value> {
    let dir = e2e()
        .join("testdata")
        .join(source_path.trim_start_matches("./"));
    let docs = documents(&dir.join("deployment.yaml"));
    docs.iter()
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|c| c["image"].clone())
        .collect()
}

/// An Application of the suite as the API lists it: its own metadata and spec, and the status
/// Argo CD gives a synced Kustomize Application.
fn as_synced(app: &Value) -> Value {
    let mut app = app.clone();
    let source_path = app["spec"]["source"]["path"].as_str().unwrap().to_string();
    app["metadata"]["resourceVersion"] = json!("7");
    app["status"] = json!({
        "sourceType": "Kustomize",
        "sync": {"status": "Synced"},
        "health": {"status": "Healthy"},
        "summary": {"images": deployed(&source_path)},
    });
    app
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "apiVersion": api_version,
        "kind": kind,
        "metadata": {"resourceVersion": "9"},
        "items": items,
    }))
}

/// The merge patches sent to each Application, by name.
async fn patches(server: &MockServer) -> Vec<(String, Value)> {
    let apps = format!("/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/applications/");
    server
        .received_requests()
        .await
        .unwrap()
        .iter()
        .filter(|r| r.method.as_str() == "PATCH")
        .filter_map(|r| {
            let name = r.url.path().strip_prefix(&apps)?;
            Some((name.to_string(), r.body_json::<Value>().unwrap()))
        })
        .collect()
}

async fn run_suite(suite: &Suite) {
    let dir = e2e().join("suite").join(suite.name);
    let install = documents(&dir.join("01-install.yaml"));
    let assert = documents(&dir.join("02-assert.yaml"));
    let apps: Vec<Value> = of_kind(&install, "Application")
        .into_iter()
        .map(as_synced)
        .collect();
    let updaters: Vec<Value> = of_kind(&install, "ImageUpdater")
        .into_iter()
        .cloned()
        .collect();

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/applications"
        )))
        .respond_with(list(
            "ApplicationList",
            "argoproj.io/v1alpha1",
            apps.clone(),
        ))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/apis/argocd-image-updater.argoproj.io/v1alpha1/namespaces/{NAMESPACE}/imageupdaters"
        )))
        .respond_with(list(
            "ImageUpdaterList",
            "argocd-image-updater.argoproj.io/v1alpha1",
            updaters,
        ))
        .mount(&server)
        .await;
    for app in &apps {
        let name = app["metadata"]["name"].as_str().unwrap();
        Mock::given(method("PATCH"))
            .and(path(format!(
                "/apis/argoproj.io/v1alpha1/namespaces/{NAMESPACE}/applications/{name}"
            )))
            .respond_with(ResponseTemplate::new(200).set_body_json(app))
            .mount(&server)
            .await;
    }
    Mock::given(method("PATCH"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({})))
        .mount(&server)
        .await;

    let config = config::parse(
        Path::new("tagpilot.yaml"),
        &format!("applications:\n  fromCluster:\n    namespaces: [{NAMESPACE}]\n    argocdNamespace: {NAMESPACE}\n"),
    )
    .unwrap();
    let registry = MemoryRegistry::from_yaml(suite.registry).unwrap();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path().to_path_buf());
    let from = FromCluster {
        namespaces: vec![NAMESPACE.to_string()],
        selector: None,
        argocd_namespace: Some(NAMESPACE.to_string()),
    };
    let loaded = argocd::read::cluster::load(
        crate::support::kube::cluster(&server, std::time::Duration::from_secs(5)).await,
        &from,
    )
    .await
    .unwrap();
    let run = cycle(&config, Some(&loaded), &cache, &registry, &(), false).await;
    let sent = patches(&server).await;
    let reports = run.applications.clone().unwrap_or_default();

    for expected in of_kind(&assert, "Application") {
        let name = expected["metadata"]["name"].as_str().unwrap();
        let id = format!("{NAMESPACE}/{name}");
        let report = reports.iter().find(|a| a.application == id);
        let patch = sent.iter().find(|(n, _)| n == name).map(|(_, p)| p);
        match expected["spec"]["source"]["kustomize"]["images"].as_array() {
            Some(images) => assert_eq!(
                patch,
                Some(&json!({"spec": {"source": {"kustomize": {"images": images}}}})),
                "{}: {name}: {report:#?}\nproblems: {:?}",
                suite.name,
                run.plan.problems
            ),
            // The assert expects the spec as installed: nothing is patched, and the report
            // says why.
            None => {
                assert_eq!(patch, None, "{}: {name}", suite.name);
                let report =
                    report.unwrap_or_else(|| panic!("{}: {name} not reported", suite.name));
                let named = !report.problems.is_empty()
                    || report
                        .images
                        .iter()
                        .any(|i| i.status != ImageStatus::Update && i.reason.is_some());
                assert!(
                    named,
                    "{}: {name}: nothing names why it stays: {report:#?}",
                    suite.name
                );
            }
        }
    }
}

#[tokio::test]
async fn image_updater_s_own_end_to_end_suites_get_its_results() {
    for suite in SUITES {
        run_suite(suite).await;
    }
}
