//! Chart policies with real parts (issue 32): a chart repository served over HTTP on loopback
//! (`helm package`, `helm repo index`), a chart pushed to the real registry (`helm push`), and
//! the real registry client and planner between them. The places a chart version is written,
//! one golden case each, are in `tests/golden/rewrite/chart-*`.

use std::path::Path;

use tagpilot::holds::{FieldKey, HeldTag, HoldReason, Holds};
use tagpilot::plan::{self, Scope};
use tagpilot::registry::RegistryClient;

use crate::render::tools;
use crate::support::chart_repo::ChartRepo;
use crate::support::registry::{Auth, TestRegistry};

/// `helm` with its configuration and cache in `home`; fails the test when it fails.
fn helm(home: &Path, args: &[&str]) {
    let out = std::process::Command::new(tools().helm.unwrap())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .unwrap();
    assert!(out.status.success(), "helm {args:?}: {out:?}");
}

/// Packages chart `name` at `version` (appVersion the same) into `into`.
fn package(home: &Path, name: &str, version: &str, into: &Path) -> std::path::PathBuf {
    let chart = home.join("src").join(name).join(version);
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(
        chart.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: {version}\nappVersion: \"{version}\"\n"),
    )
    .unwrap();
    helm(
        home,
        &[
            "package",
            chart.to_str().unwrap(),
            "-d",
            into.to_str().unwrap(),
        ],
    );
    into.join(format!("{name}-{version}.tgz"))
}

/// `index` with every entry's `created` but `keep`'s set back to 2020: entries are the list
/// items under each chart of `entries:`, each with one `created:` and one `version:`.
fn set_back(index: &str, keep: &str) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut item: Vec<String> = Vec::new();
    let flush = |item: &mut Vec<String>, out: &mut Vec<String>| {
        let keep_it = item.iter().any(|l| l.trim() == format!("version: {keep}"));
        for l in item.drain(..) {
            match !keep_it && l.trim_start().starts_with("created:") {
                true => {
                    let indent = l.len() - l.trim_start().len();
                    out.push(format!(
                        "{}created: \"2020-01-01T00:00:00Z\"",
                        " ".repeat(indent)
                    ));
                }
                false => out.push(l),
            }
        }
    };
    for line in index.lines() {
        let indent = line.len() - line.trim_start().len();
        // An entry starts a list item under its chart's name (`  - `); deeper items are its
        // `urls`.
        if (line.trim_start().starts_with("- ") && indent <= 2) || indent == 0 {
            flush(&mut item, &mut out);
        }
        item.push(line.to_string());
    }
    flush(&mut item, &mut out);
    out.join("\n") + "\n"
}

const APPLICATION: &str = "\
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: shop
spec:
  sources:
    - repoURL: CHARTS
      chart: web
      targetRevision: 1.0.0
    - repoURL: oci://REGISTRY/charts/api
      targetRevision: 0.1.0
";

const OCI_REPOSITORY: &str = "\
apiVersion: source.toolkit.fluxcd.io/v1beta2
kind: OCIRepository
metadata:
  name: api
spec:
  url: oci://REGISTRY/charts/api
  ref:
    tag: 0.1.0
";

/// A chart repository that needs a password (given as for a registry), a `minAge` that its
/// index's `created` dates decide on a one-shot plan, a hold on one field, and an OCI chart
/// pushed by helm: each field moves as far as its policy, its age and its hold allow, and the
/// index is asked again only conditionally.
#[tokio::test(flavor = "multi_thread")]
async fn chart_versions_move_from_a_real_chart_repository_and_a_real_registry() {
    let home = tempfile::tempdir().unwrap();
    let home = home.path();

    // The HTTP repository: web 1.0.0 and 1.1.0 published long ago, 1.2.0 just now (the
    // index's `created` dates of the first two are set back).
    let served = home.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let charts = ChartRepo::serve(served.clone(), Some(("charts", "s3cret"))).await;
    for version in ["1.0.0", "1.1.0", "1.2.0"] {
        package(home, "web", version, &served);
    }
    helm(
        home,
        &[
            "repo",
            "index",
            served.to_str().unwrap(),
            "--url",
            &charts.url,
        ],
    );
    let index = std::fs::read_to_string(served.join("index.yaml")).unwrap();
    std::fs::write(served.join("index.yaml"), set_back(&index, "1.2.0")).unwrap();

    // The OCI chart, pushed by helm.
    let registry = TestRegistry::start(Auth::None).await;
    let pushed = home.join("pushed");
    for version in ["0.1.0", "0.2.0", "0.3.0"] {
        let tgz = package(home, "api", version, &pushed);
        helm(
            home,
            &[
                "push",
                tgz.to_str().unwrap(),
                &format!("oci://{}/charts", registry.host()),
                "--plain-http",
            ],
        );
    }

    let tree = tempfile::tempdir().unwrap();
    let fill = |text: &str| {
        text.replace("CHARTS", &charts.url)
            .replace("REGISTRY", &registry.host())
    };
    std::fs::create_dir_all(tree.path().join("apps")).unwrap();
    std::fs::write(tree.path().join("apps/shop.yaml"), fill(APPLICATION)).unwrap();
    std::fs::write(tree.path().join("apps/api.yaml"), fill(OCI_REPOSITORY)).unwrap();
    let policies = tagpilot::policy::parse_file(
        Path::new("policies.yaml"),
        &fill(
            "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: web}\nspec:\n  chart: {repository: CHARTS, name: web}\n  strategy: {semver: {range: \"<2\"}}\n  minAge: 1h\n---\napiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata: {name: api}\nspec:\n  chart: {repository: oci://REGISTRY/charts/api}\n  strategy: {semver: {prerelease: false}}\n",
        ),
    )
    .unwrap();

    // The chart repository's password is configured as a registry's.
    let password = home.join("password");
    std::fs::write(&password, "s3cret").unwrap();
    let mut options = registry.client_options(vec![
        registry.registry_config(),
        tagpilot::config::RegistryConfig {
            host: charts.url.trim_start_matches("http://").to_string(),
            insecure: true,
            credentials: Some(tagpilot::config::Credentials {
                username: "charts".into(),
                password_env: None,
                password_file: Some(password),
            }),
            rate_limit: None,
            timeout: None,
            tag_list: Default::default(),
        },
    ]);
    options.base_dir = home.to_path_buf();
    let client = RegistryClient::new(options).unwrap();

    // A person holds 0.3.0 for the Application's field only.
    let held = HeldTag {
        key: FieldKey {
            repository: None,
            policy: "api".into(),
            file: "apps/shop.yaml".into(),
            field: "Application/shop sources[1] targetRevision".into(),
        },
        tag: "0.3.0".into(),
        reason: HoldReason::Manual { by: "alice".into() },
        since: "2026-01-01T00:00:00Z".parse().unwrap(),
    };
    let scope = Scope {
        holds: Holds::known([held]),
        ..Scope::local(tree.path())
    };
    let planned = plan::plan(&scope, &policies, &client, &()).await.unwrap();
    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    let moves: Vec<(&str, usize, &str, &str)> = planned
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.line, c.from.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(
        moves,
        [
            ("apps/api.yaml", 8, "0.1.0", "0.3.0"),
            // web: 1.2.0 is younger than minAge; 1.1.0 is the newest old enough.
            ("apps/shop.yaml", 9, "1.0.0", "1.1.0"),
            // api: the held version is passed over for this field.
            ("apps/shop.yaml", 11, "0.1.0", "0.2.0"),
        ]
    );
    let shop = planned
        .files
        .iter()
        .find(|f| f.path == Path::new("apps/shop.yaml"))
        .unwrap();
    assert_eq!(
        shop.updated,
        fill(APPLICATION)
            .replace("targetRevision: 1.0.0", "targetRevision: 1.1.0")
            .replace("targetRevision: 0.1.0", "targetRevision: 0.2.0")
    );

    // Within a cycle the index is read once; the next cycle asks for it with its ETag and
    // reads it from the 304.
    plan::plan(&scope, &policies, &client, &()).await.unwrap();
    assert_eq!(charts.index_answers(), [200]);
    client.start_cycle();
    let again = plan::plan(&scope, &policies, &client, &()).await.unwrap();
    assert_eq!(again.changes.len(), 3, "{:?}", again.problems);
    assert_eq!(charts.index_answers(), [200, 304]);
}

/// A helmfile Application runs through Argo CD's config management plugin, which tagpilot does
/// not run: its render is named as not done, and why, instead of a diff of something else.
#[test]
fn a_helmfile_plugin_application_is_named_as_not_rendered() {
    let text = "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {name: shop}\nspec:\n  destination: {namespace: shop}\n  source:\n    repoURL: https://git.example/acme/manifests\n    path: apps/shop\n    plugin: {name: helmfile}\n";
    let app = tagpilot::application::read_documents(Path::new("app.yaml"), text)
        .unwrap()
        .remove(0);
    let (before, after) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for tree in [&before, &after] {
        std::fs::create_dir_all(tree.path().join("apps/shop")).unwrap();
        std::fs::write(
            tree.path().join("apps/shop/helmfile.yaml"),
            "releases: [{name: shop, chart: ./chart}]\n",
        )
        .unwrap();
    }
    let rendered = tagpilot::render::render_change(
        &tools(),
        &tagpilot::render::Change {
            app: &app,
            url: "https://git.example/acme/manifests",
            before: before.path(),
            after: after.path(),
        },
    );
    let failure = rendered.failure.unwrap();
    assert!(
        failure.contains("source 1 (path apps/shop)")
            && failure.contains("config management plugin helmfile is not rendered")
            && failure.contains("`helmfile template` is not run"),
        "{failure}"
    );
}
