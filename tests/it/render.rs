//! Rendering as Argo CD would, with the real `helm` and `kubectl` (kustomize) from
//! `$TAGPILOT_TOOLS/bin` (installed by `scripts/test.sh`; a missing tool fails these tests).
//! Each golden case under `tests/golden/render/<case>/` holds an Application (`app.yaml`), the
//! repository before and after a change (`before/`, `after/`) and the expected resource diffs
//! (`rendered.txt`: a header per changed resource, then its unified diff).

use std::path::{Path, PathBuf};

use tagpilot::application::read_documents;
use tagpilot::render::{self, Tools};

use crate::golden::{check_text, golden_suite};

/// The tools `scripts/test.sh` installed: helm, and kubectl for kustomize.
pub(crate) fn tools() -> Tools {
    let dir = std::env::var_os("TAGPILOT_TOOLS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/tagpilot-tools")
        })
        .join("bin");
    for tool in ["helm", "kubectl"] {
        assert!(
            dir.join(tool).is_file(),
            "{} is missing: scripts/test.sh installs it; or set TAGPILOT_TOOLS",
            dir.join(tool).display()
        );
    }
    Tools::in_dirs([dir])
}

fn copy(from: &Path, to: &Path) {
    for entry in walkdir::WalkDir::new(from) {
        let entry = entry.unwrap();
        let dest = to.join(entry.path().strip_prefix(from).unwrap());
        if entry.file_type().is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
        } else {
            std::fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// What a render of a change shows: each changed resource's header and diff, or the failure.
pub(crate) fn shown(rendered: &tagpilot::affected::Rendered) -> String {
    let mut out = String::new();
    if let Some(failure) = &rendered.failure {
        out.push_str(&format!("failure: {failure}\n"));
    }
    for note in &rendered.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    for r in &rendered.resources {
        out.push_str(&format!("## {}\n{}", r.header(), render::unified(r)));
    }
    out
}

/// [`shown`], and each changed resource whole after the change: the golden files show that
/// the Application's options were applied.
fn shown_whole(rendered: &tagpilot::affected::Rendered) -> String {
    let mut out = shown(rendered);
    for r in &rendered.resources {
        out.push_str(&format!(
            "## {} after\n{}",
            r.header(),
            r.after.as_deref().unwrap_or("(removed)\n")
        ));
    }
    out
}

async fn run_case(case: &Path) -> Vec<String> {
    let app_path = case.join("app.yaml");
    let app = read_documents(&app_path, &std::fs::read_to_string(&app_path).unwrap())
        .unwrap()
        .remove(0);
    // The tools may edit the trees (kustomize options are set in the kustomization): copies.
    let (before, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    copy(&case.join("before"), before.path());
    copy(&case.join("after"), after.path());
    let rendered = render::render_change(
        &tools(),
        &render::Change {
            app: &app,
            url: "https://git.example/acme/manifests",
            before: before.path(),
            after: after.path(),
        },
    );
    check_text(&case.join("rendered.txt"), &shown_whole(&rendered))
        .into_iter()
        .collect()
}

golden_suite! { "render", run_case, every_render_case_has_its_test, {
    render_directory => "directory",
    render_helm => "helm",
    render_helm_multi_source => "helm-multi-source",
    render_helm_override_files => "helm-override",
    render_kustomize => "kustomize",
    render_kustomize_override_files => "kustomize-override",
}}

/// A chart repository that cannot be reached is a failure the review shows, naming it; the
/// render does not hang or panic.
#[test]
fn an_unreachable_chart_repository_is_said_so() {
    let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: api}\n\
                spec:\n  destination: {namespace: shop}\n  sources:\n\
                \x20   - {repoURL: 'http://127.0.0.1:9/charts', chart: api, targetRevision: 1.0.0, helm: {valueFiles: [$values/envs/prod.yaml]}}\n\
                \x20   - {repoURL: 'https://git.example/acme/manifests', ref: values}\n";
    let app = read_documents(Path::new("app.yaml"), text)
        .unwrap()
        .remove(0);
    let tree = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tree.path().join("envs")).unwrap();
    std::fs::write(tree.path().join("envs/prod.yaml"), "tag: 1.1.0\n").unwrap();
    let rendered = render::render_change(
        &tools(),
        &render::Change {
            app: &app,
            url: "https://git.example/acme/manifests",
            before: tree.path(),
            after: tree.path(),
        },
    );
    let failure = rendered.failure.expect("a failure");
    assert!(
        failure.contains("source 1 (chart api from http://127.0.0.1:9/charts)")
            && failure
                .contains("the chart repository http://127.0.0.1:9/charts could not be reached"),
        "{failure}"
    );
}

/// Without the tools on PATH, a kustomize or Helm source says which tool is missing.
#[test]
fn a_missing_tool_is_named() {
    let case = crate::golden::case_dir("render", "helm");
    let app_path = case.join("app.yaml");
    let app = read_documents(&app_path, &std::fs::read_to_string(&app_path).unwrap())
        .unwrap()
        .remove(0);
    let rendered = render::render_change(
        &Tools::in_dirs([]),
        &render::Change {
            app: &app,
            url: "https://git.example/acme/manifests",
            before: &case.join("before"),
            after: &case.join("after"),
        },
    );
    assert_eq!(
        rendered.failure.as_deref(),
        Some("source 1 (path charts/api): `helm` was not found on PATH")
    );
}

/// The image ships the rendering tools at pinned versions, on the PATH tagpilot searches.
#[test]
fn the_image_ships_helm_and_kustomize_at_pinned_versions() {
    let dockerfile =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Dockerfile")).unwrap();
    for pin in ["ARG HELM_VERSION=4.2.1", "ARG KUSTOMIZE_VERSION=5.8.1"] {
        assert!(
            dockerfile.contains(pin),
            "the Dockerfile does not pin `{pin}`"
        );
    }
    assert!(
        dockerfile.contains(
            "COPY --from=tools /usr/local/bin/helm /usr/local/bin/kustomize /usr/local/bin/"
        ) && dockerfile.contains("PATH=/usr/local/bin"),
        "the final image does not carry the tools on its PATH"
    );
}

/// Serves the files of `dir` over HTTP on a port of its own, as a chart repository does.
async fn serve_dir(dir: PathBuf) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move |uri: axum::http::Uri| {
        let file = dir.join(uri.path().trim_start_matches('/'));
        async move {
            match std::fs::read(&file) {
                Ok(bytes) => (axum::http::StatusCode::OK, bytes),
                Err(_) => (axum::http::StatusCode::NOT_FOUND, Vec::new()),
            }
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

/// A chart from an HTTP chart repository, its values from the changed repository (`$values`
/// of a multi-source Application): fetched from the repository and rendered with the value
/// files before and after.
#[tokio::test(flavor = "multi_thread")]
async fn a_chart_from_a_reachable_chart_repository_is_rendered_with_values_from_git() {
    let tools = tools();
    let helm = tools.helm.clone().unwrap();
    let charts = tempfile::tempdir().unwrap();
    let url = serve_dir(charts.path().to_path_buf()).await;
    // The chart `api` 0.1.0, packaged and indexed as a chart repository serves it.
    let source = tempfile::tempdir().unwrap();
    let chart = source.path().join("api");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        "apiVersion: v2\nname: api\nversion: 0.1.0\n",
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "tag: 1.0.0\n").unwrap();
    std::fs::write(
        chart.join("templates/deployment.yaml"),
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"registry.example/shop/api:{{ .Values.tag }}\"\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let out = std::process::Command::new(&helm)
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "package",
        chart.to_str().unwrap(),
        "-d",
        charts.path().to_str().unwrap(),
    ]);
    run(&[
        "repo",
        "index",
        charts.path().to_str().unwrap(),
        "--url",
        &url,
    ]);

    let text = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: api}}\n\
         spec:\n  destination: {{namespace: shop}}\n  sources:\n\
         \x20   - {{repoURL: '{url}', chart: api, targetRevision: 0.1.0, helm: {{valueFiles: [$values/envs/prod.yaml]}}}}\n\
         \x20   - {{repoURL: 'https://git.example/acme/manifests', ref: values}}\n"
    );
    let app = read_documents(Path::new("app.yaml"), &text)
        .unwrap()
        .remove(0);
    let (before, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (tree, tag) in [(&before, "1.0.0"), (&after, "1.1.0")] {
        std::fs::create_dir_all(tree.path().join("envs")).unwrap();
        std::fs::write(tree.path().join("envs/prod.yaml"), format!("tag: {tag}\n")).unwrap();
    }
    let rendered = tokio::task::spawn_blocking(move || {
        render::render_change(
            &tools,
            &render::Change {
                app: &app,
                url: "https://git.example/acme/manifests",
                before: before.path(),
                after: after.path(),
            },
        )
    })
    .await
    .unwrap();
    assert_eq!(rendered.failure, None);
    let shown = shown(&rendered);
    assert!(
        shown.starts_with("## Deployment/api\n")
            && shown.contains(
                "-      - image: registry.example/shop/api:1.0.0\n+      - image: registry.example/shop/api:1.1.0\n"
            ),
        "{shown}"
    );
}

/// `helm` from the test tools, with its configuration and cache in `home`.
fn helm_in(home: &Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(tools().helm.unwrap())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap()
}

/// Packages a chart `name` 0.1.0 whose Deployment is `template`, and pushes it to the
/// registry's `charts/` over plain HTTP, as a team publishing its charts to an OCI registry.
fn push_chart(registry: &crate::support::registry::TestRegistry, name: &str, template: &str) {
    let work = tempfile::tempdir().unwrap();
    let chart = work.path().join(name);
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
    )
    .unwrap();
    std::fs::write(chart.join("values.yaml"), "tag: 1.0.0\n").unwrap();
    // A value file the chart ships beside its defaults, as charts do for environments.
    std::fs::write(chart.join("values-prod.yaml"), "replicas: 3\n").unwrap();
    std::fs::write(chart.join("templates/deployment.yaml"), template).unwrap();
    let packaged = helm_in(
        work.path(),
        &[
            "package",
            chart.to_str().unwrap(),
            "-d",
            work.path().to_str().unwrap(),
        ],
    );
    assert!(packaged.status.success(), "{packaged:?}");
    let tgz = work.path().join(format!("{name}-0.1.0.tgz"));
    let pushed = helm_in(
        work.path(),
        &[
            "push",
            tgz.to_str().unwrap(),
            &format!("oci://{}/charts", registry.host()),
            "--plain-http",
        ],
    );
    assert!(pushed.status.success(), "{pushed:?}");
}

const DEPLOYMENT_TEMPLATE: &str = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"registry.example/shop/api:{{ .Values.tag }}\"\n";

/// Renders a multi-source Application whose first source is `chart_source` (the chart) and
/// whose second is the changed repository holding `envs/prod.yaml`, on `tag: 1.0.0` before
/// and `tag: 1.1.0` after.
async fn render_chart_with_values(
    tools: Tools,
    chart_source: &str,
) -> tagpilot::affected::Rendered {
    let text = format!(
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: api}}\n\
         spec:\n  destination: {{namespace: shop}}\n  sources:\n\
         \x20   - {chart_source}\n\
         \x20   - {{repoURL: 'https://git.example/acme/manifests', ref: values}}\n"
    );
    let app = read_documents(Path::new("app.yaml"), &text)
        .unwrap()
        .remove(0);
    let (before, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (tree, tag) in [(&before, "1.0.0"), (&after, "1.1.0")] {
        std::fs::create_dir_all(tree.path().join("envs")).unwrap();
        std::fs::write(tree.path().join("envs/prod.yaml"), format!("tag: {tag}\n")).unwrap();
    }
    tokio::task::spawn_blocking(move || {
        render::render_change(
            &tools,
            &render::Change {
                app: &app,
                url: "https://git.example/acme/manifests",
                before: before.path(),
                after: after.path(),
            },
        )
    })
    .await
    .unwrap()
}

/// A chart in an OCI registry (the real `docker-registry`, plain HTTP, configured `insecure`):
/// named by an `oci://` `repoURL` with `chart`, by Argo CD's scheme-less OCI `repoURL` beside
/// `chart`, and by an `oci://` `repoURL` that is the chart itself (Argo CD's OCI sources), each
/// pulled by reference (`helm` refuses `--repo oci://…`) and rendered with the values from git.
#[tokio::test(flavor = "multi_thread")]
async fn a_chart_from_an_oci_registry_is_pulled_by_reference_and_rendered() {
    use crate::support::registry::{Auth, TestRegistry};
    let registry = TestRegistry::start(Auth::None).await;
    push_chart(&registry, "api", DEPLOYMENT_TEMPLATE);
    let host = registry.host();
    let values = "helm: {valueFiles: [$values/envs/prod.yaml]}";
    for source in [
        format!("{{repoURL: 'oci://{host}/charts', chart: api, targetRevision: 0.1.0, {values}}}"),
        format!("{{repoURL: '{host}/charts', chart: api, targetRevision: 0.1.0, {values}}}"),
        format!("{{repoURL: 'oci://{host}/charts/api', path: ., targetRevision: 0.1.0, {values}}}"),
    ] {
        let tools = tools().with_plain_http([host.clone()]);
        let rendered = render_chart_with_values(tools, &source).await;
        assert_eq!(rendered.failure, None, "{source}");
        let shown = shown(&rendered);
        assert!(
            shown.starts_with("## Deployment/api\n")
                && shown.contains(
                    "-      - image: registry.example/shop/api:1.0.0\n+      - image: registry.example/shop/api:1.1.0\n"
                ),
            "{source}: {shown}"
        );
    }
}

/// A remote chart's value file without a `$ref` is the chart's own file (Argo CD resolves it in
/// the unpacked chart), read in order with the values from git; one that climbs out of the chart
/// is refused, as Argo CD refuses it, so rendering never reads the host's files.
#[tokio::test(flavor = "multi_thread")]
async fn a_remote_charts_own_value_file_is_read_from_the_chart_and_none_from_outside_it() {
    use crate::support::registry::{Auth, TestRegistry};
    let registry = TestRegistry::start(Auth::None).await;
    push_chart(
        &registry,
        "api",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\nspec:\n  replicas: {{ .Values.replicas | default 1 }}\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"registry.example/shop/api:{{ .Values.tag }}\"\n",
    );
    let host = registry.host();
    let tools = || tools().with_plain_http([host.clone()]);
    let source = format!(
        "{{repoURL: 'oci://{host}/charts', chart: api, targetRevision: 0.1.0, helm: {{valueFiles: [values-prod.yaml, $values/envs/prod.yaml]}}}}"
    );
    let rendered = render_chart_with_values(tools(), &source).await;
    assert_eq!(rendered.failure, None, "{}", shown(&rendered));
    let after = rendered.resources[0].after.as_deref().unwrap();
    assert!(
        after.contains("replicas: 3") && after.contains("shop/api:1.1.0"),
        "{after}"
    );

    for escaping in ["../../../../etc/hostname", "/../etc/hostname"] {
        let source = format!(
            "{{repoURL: 'oci://{host}/charts', chart: api, targetRevision: 0.1.0, helm: {{valueFiles: ['{escaping}', $values/envs/prod.yaml]}}}}"
        );
        let rendered = render_chart_with_values(tools(), &source).await;
        let failure = rendered.failure.expect("a failure");
        assert!(
            failure.contains(&format!(
                "value file `{escaping}` resolves to outside its repository"
            )),
            "{failure}"
        );
    }
}

/// A remote chart that is fetched but does not render (a template error) is a render failure
/// with helm's message, not a chart repository that "could not be reached"; a version the
/// registry does not have is a fetch failure, said so.
#[tokio::test(flavor = "multi_thread")]
async fn a_template_error_of_a_remote_chart_is_not_called_unreachable() {
    use crate::support::registry::{Auth, TestRegistry};
    let registry = TestRegistry::start(Auth::None).await;
    push_chart(
        &registry,
        "broken",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  tag: {{ required \"the chart needs image.digest\" .Values.digest | quote }}\n",
    );
    let host = registry.host();
    let source = format!(
        "{{repoURL: 'oci://{host}/charts', chart: broken, targetRevision: 0.1.0, helm: {{valueFiles: [$values/envs/prod.yaml]}}}}"
    );
    let rendered = render_chart_with_values(tools().with_plain_http([host.clone()]), &source).await;
    let failure = rendered.failure.expect("a failure");
    assert!(
        failure.contains("`helm template` failed:") && !failure.contains("could not be reached"),
        "{failure}"
    );
    assert!(
        failure.contains("Error: execution error at (broken/templates/deployment.yaml")
            && failure.ends_with("the chart needs image.digest"),
        "{failure}"
    );

    let source = format!(
        "{{repoURL: 'oci://{host}/charts', chart: broken, targetRevision: 9.9.9, helm: {{valueFiles: [$values/envs/prod.yaml]}}}}"
    );
    let rendered = render_chart_with_values(tools().with_plain_http([host.clone()]), &source).await;
    let failure = rendered.failure.expect("a failure");
    assert!(
        failure.contains(&format!(
            "the chart repository oci://{host}/charts/broken could not be reached"
        )),
        "{failure}"
    );
}
