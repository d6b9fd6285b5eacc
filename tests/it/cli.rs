//! The `tagpilot` binary end to end: a temp directory holding `tagpilot.yaml`, `policies/` and
//! manifests, the real Debian `docker-registry` from the harness, and the binary run as a child
//! process with a scrubbed environment (its own `HOME` and `DOCKER_CONFIG`, so the developer's
//! `~/.docker` is never read).
//!
//! The binary is run with `tokio::process`, not `std::process`: the harness's token server and
//! the counting proxy below run on the test's (single-threaded) runtime and must keep serving
//! while the child talks to them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use wiremock::{MockServer, ResponseTemplate};

use crate::support::registry::{Auth, ImageSpec, IndexSpec, TestRegistry};
use crate::support::scripted::{
    get_tags_list, proxy_login_page, tags_page, too_many_requests_once,
};

const BIN: &str = env!("CARGO_BIN_EXE_tagpilot");

// === running the binary ===

/// What one run of the binary did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Both streams, for assertions about what a user sees anywhere.
    fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }

    #[track_caller]
    fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "exit code\n--- stdout\n{}\n--- stderr\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// Fails naming what stdout lacks, with the whole of it.
    #[track_caller]
    fn expect_stdout(&self, want: &str) -> &Self {
        assert!(
            self.stdout.contains(want),
            "stdout lacks {want:?}:\n{}",
            self.stdout
        );
        self
    }
}

/// A manifest root in a temp directory, with a separate empty home for the child process.
struct Tree {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Tree {
    /// A root whose `tagpilot.yaml` has these `registries:` lines and reads `policies/`.
    fn new(registries_yaml: &str) -> Tree {
        let tree = Tree {
            dir: tempfile::tempdir().unwrap(),
            home: tempfile::tempdir().unwrap(),
        };
        tree.write(
            "tagpilot.yaml",
            &format!("registries:\n{registries_yaml}policies: policies/\n"),
        );
        tree
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn write(&self, rel: &str, text: &str) -> &Self {
        let p = self.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
        self
    }

    /// Policy `api` following `image` on `1.x`, and `app.yaml` running it at `tag`.
    fn follow_api_in_app_yaml(&self, image: &str, tag: &str) -> &Self {
        self.write("policies/api.yaml", &policy("api", image, &semver("1.x")))
            .write("app.yaml", &deployment("app", &[&format!("{image}:{tag}")]))
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path().join(rel)).unwrap()
    }

    /// Every file under the root, relative path → bytes.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        walkdir::WalkDir::new(self.path())
            .into_iter()
            .map(Result::unwrap)
            .filter(|e| e.file_type().is_file())
            .map(|e| {
                (
                    e.path().strip_prefix(self.path()).unwrap().to_path_buf(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect()
    }

    async fn run(&self, args: &[&str]) -> Run {
        self.run_env(args, &[]).await
    }

    /// Runs `tagpilot args…` in the root with only `PATH`, `HOME`, `DOCKER_CONFIG` and `env` set.
    async fn run_env(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let home = self.home.path();
        let out = tokio::process::Command::new(BIN)
            .args(args)
            .current_dir(self.path())
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", home)
            .env("DOCKER_CONFIG", home.join(".docker"))
            .envs(env.iter().copied())
            .output()
            .await
            .expect("run tagpilot");
        Run {
            code: out.status.code().expect("tagpilot exited by a signal"),
            stdout: String::from_utf8(out.stdout).unwrap(),
            stderr: String::from_utf8(out.stderr).unwrap(),
        }
    }
}

/// A Deployment with one container per image; the first `image:` is on line 10, the next on 12…
fn deployment(name: &str, images: &[&str]) -> String {
    let mut yaml = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n  template:\n    spec:\n      containers:\n"
    );
    for (i, image) in images.iter().enumerate() {
        yaml.push_str(&format!("        - name: c{i}\n          image: {image}\n"));
    }
    yaml
}

/// An `ImagePolicy` document; `spec` is the YAML under `spec:` after `image:`, indented by 2.
fn policy(name: &str, image: &str, spec: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n{spec}"
    )
}

fn semver(range: &str) -> String {
    format!("  strategy:\n    semver: {{range: \"{range}\"}}\n")
}

/// A registry with `shop/api` at 1.2.3, 1.3.0, 2.0.0 and a tree with one Deployment on 1.2.3
/// (line 10) and a policy `api` for `>=1.0.0, <2.0.0`.
async fn api_setup() -> (TestRegistry, Tree) {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags(
        "shop/api",
        &["1.2.3", "1.3.0", "2.0.0"],
        ImageSpec::default(),
    )
    .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &policy("api", &image, &semver(">=1.0.0, <2.0.0")),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &[&format!("{image}:1.2.3")]),
    );
    (reg, tree)
}

/// `registries:` lines for a plain-HTTP registry at `host` with no credentials.
fn insecure_registry(host: &str) -> String {
    format!("  - host: {host}\n    insecure: true\n")
}

/// `registries:` lines for `reg` logging in with the password in `REG_PASSWORD`.
fn password_env_registry(reg: &TestRegistry) -> String {
    format!(
        "  - host: {}\n    insecure: true\n    credentials:\n      username: {}\n      passwordEnv: REG_PASSWORD\n",
        reg.host(),
        reg.user().unwrap()
    )
}

/// A local port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

// === plan ===

#[tokio::test]
async fn plan_table_lists_the_change_and_writes_nothing() {
    let (reg, tree) = api_setup().await;
    let before = tree.snapshot();

    let run = tree.run(&["plan"]).await;
    run.expect_code(0);

    let row = run
        .stdout
        .lines()
        .find(|l| l.starts_with("api "))
        .unwrap_or_else(|| panic!("no change row:\n{}", run.stdout));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        cells,
        [
            "api",
            &reg.image("shop/api"),
            "apps/api/deployment.yaml",
            "10",
            "1.2.3",
            "1.3.0"
        ],
        "{}",
        run.stdout
    );
    run.expect_stdout("POLICY");
    run.expect_stdout("1 change in 1 file");
    // stderr is no terminal here: no spinner, and nothing to warn about.
    assert_eq!(run.stderr, "");
    assert_eq!(tree.snapshot(), before, "plan wrote to the tree");
}

#[tokio::test]
async fn plan_json_changes_carry_policy_image_file_line_from_to() {
    let (reg, tree) = api_setup().await;
    let before = tree.snapshot();

    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);

    let report: serde_json::Value = serde_json::from_str(&run.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", run.stdout));
    let changes = report["changes"].as_array().expect("changes array");
    assert_eq!(changes.len(), 1, "{report:#}");
    let c = &changes[0];
    assert_eq!(c["policy"], "api");
    assert_eq!(c["image"], reg.image("shop/api"));
    assert_eq!(c["file"], "apps/api/deployment.yaml");
    assert_eq!(c["line"], 10);
    assert_eq!(c["from"], "1.2.3");
    assert_eq!(c["to"], "1.3.0");
    assert_eq!(report["problems"], serde_json::json!([]));
    assert_eq!(tree.snapshot(), before);
}

#[tokio::test]
async fn plan_markdown_has_a_change_table() {
    let (reg, tree) = api_setup().await;

    let run = tree.run(&["plan", "--format", "markdown"]).await;
    run.expect_code(0);

    assert!(
        run.stdout
            .contains("| Policy | Image | File | From | To |\n|---|---|---|---|---|\n"),
        "{}",
        run.stdout
    );
    let row = format!(
        "| api | `{}` | `apps/api/deployment.yaml:10` | `1.2.3` | `1.3.0` |",
        reg.image("shop/api")
    );
    run.expect_stdout(&row);
}

#[tokio::test]
async fn plan_diff_is_a_unified_diff_with_a_and_b_headers() {
    let (reg, tree) = api_setup().await;
    let before = tree.snapshot();

    let run = tree.run(&["plan", "--diff"]).await;
    run.expect_code(0);

    let image = reg.image("shop/api");
    let expected = format!(
        "--- a/apps/api/deployment.yaml\n+++ b/apps/api/deployment.yaml\n@@ -7,4 +7,4 @@\n     spec:\n       containers:\n         - name: c0\n-          image: {image}:1.2.3\n+          image: {image}:1.3.0\n"
    );
    run.expect_stdout(&expected);
    assert_eq!(tree.snapshot(), before);
}

#[tokio::test]
async fn exit_code_flag_gives_2_with_pending_changes_and_0_when_up_to_date() {
    let (reg, tree) = api_setup().await;

    tree.run(&["plan", "--exit-code"]).await.expect_code(2);

    tree.write(
        "apps/api/deployment.yaml",
        &deployment("api", &[&format!("{}:1.3.0", reg.image("shop/api"))]),
    );
    let run = tree.run(&["plan", "--exit-code"]).await;
    run.expect_code(0);
    assert!(run.stdout.starts_with("No changes."), "{}", run.stdout);
}

#[tokio::test]
async fn a_warning_keeps_exit_code_2_for_pending_changes_and_a_target_matching_nothing_is_1() {
    let (reg, tree) = api_setup().await;
    // `web` is in none of the files its targets match: a warning, which changes no exit code.
    tree.write(
        "policies/web.yaml",
        &policy(
            "web",
            &reg.image("shop/web"),
            &format!("{}  targets: [{{paths: [\"apps/**\"]}}]\n", semver("1.x")),
        ),
    );
    let run = tree.run(&["plan", "--exit-code"]).await;
    run.expect_code(2);
    run.expect_stdout(&format!(
            "Warnings:\n  policy web, image {}: no file its targets match holds the image; searched paths apps/** in the local directory (the target at policies/web.yaml:9:13)\n",
            reg.image("shop/web")
        ));
    run.expect_stdout("0 problems, 1 warning");

    // `aps/**` for `apps/**`: a problem, so 1, whatever is pending.
    tree.write(
        "policies/worker.yaml",
        &policy(
            "worker",
            &reg.image("shop/worker"),
            &format!("{}  targets: [{{paths: [\"aps/**\"]}}]\n", semver("1.x")),
        ),
    );
    let run = tree.run(&["plan", "--exit-code", "--format", "json"]).await;
    run.expect_code(1);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let findings = report["findings"].as_array().unwrap();
    let no_files = findings
        .iter()
        .find(|f| f["kind"] == "no_files")
        .unwrap_or_else(|| panic!("{report:#}"));
    assert_eq!(no_files["severity"], "problem");
    assert_eq!(no_files["policy"], "worker");
    assert_eq!(
        no_files["searched"],
        "paths aps/** in the local directory (the target at policies/worker.yaml:9:13)"
    );
    assert_eq!(report["summary"]["problems"], 1, "{report:#}");
    assert_eq!(report["summary"]["warnings"], 1, "{report:#}");
}

#[tokio::test]
async fn config_flag_plans_the_config_directory_from_anywhere() {
    let (_reg, tree) = api_setup().await;
    let elsewhere = tempfile::tempdir().unwrap();
    let config = tree.path().join("tagpilot.yaml");

    let out = tokio::process::Command::new(BIN)
        .args(["plan", "--format", "json", "--config"])
        .arg(&config)
        .current_dir(elsewhere.path())
        .env_clear()
        .env("HOME", tree.home.path())
        .env("DOCKER_CONFIG", tree.home.path().join(".docker"))
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    // Paths are relative to the root, and tagpilot's own files are not manifests.
    assert_eq!(report["changes"][0]["file"], "apps/api/deployment.yaml");
    assert_eq!(report["summary"]["changes"], 1, "{report:#}");
    assert_eq!(report["skipped"], serde_json::json!([]), "{report:#}");
}

// === apply ===

#[tokio::test]
async fn apply_rewrites_the_files_and_a_second_run_finds_nothing_to_do() {
    let (reg, tree) = api_setup().await;
    let image = reg.image("shop/api");
    // A second file, with comments and quoting that must survive.
    let kustomization = format!(
        "# kept\nresources: [deployment.yaml]\nimages:\n  - name: {image}\n    newTag: \"1.2.3\" # pinned by tagpilot\n"
    );
    tree.write("apps/api/kustomization.yaml", &kustomization);
    let policies_before = tree.read("policies/api.yaml");

    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    run.expect_stdout("2 changes in 2 files");

    assert_eq!(
        tree.read("apps/api/deployment.yaml"),
        deployment("api", &[&format!("{image}:1.3.0")])
    );
    assert_eq!(
        tree.read("apps/api/kustomization.yaml"),
        kustomization.replace("\"1.2.3\"", "\"1.3.0\"")
    );
    assert_eq!(tree.read("policies/api.yaml"), policies_before);

    let after_apply = tree.snapshot();
    let again = tree.run(&["apply"]).await;
    again.expect_code(0);
    assert!(again.stdout.starts_with("No changes."), "{}", again.stdout);
    tree.run(&["plan", "--exit-code"]).await.expect_code(0);
    assert_eq!(tree.snapshot(), after_apply);
}

// === registry traffic ===

/// A reverse proxy in front of the real registry that records every request line it forwards:
/// the honest way to count what the binary sends, since the harness runs the registry without
/// an access log and the child's own `RegistryClient` counters are out of reach.
struct CountingProxy {
    host: String,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    http: reqwest::Client,
    seen: Arc<Mutex<Vec<String>>>,
}

impl CountingProxy {
    async fn start(upstream: String) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let state = ProxyState {
            upstream,
            http: reqwest::Client::new(),
            seen: seen.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        CountingProxy { host, seen, task }
    }

    fn count(&self, request: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| *r == request)
            .count()
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn forward(
    axum::extract::State(state): axum::extract::State<ProxyState>,
    request: axum::extract::Request,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    state
        .seen
        .lock()
        .unwrap()
        .push(format!("{} {}", parts.method, parts.uri.path()));
    let target = format!(
        "http://{}{}",
        state.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let mut headers = parts.headers;
    headers.remove(reqwest::header::HOST);
    let upstream = state
        .http
        .request(parts.method, target)
        .headers(headers)
        .body(body)
        .send()
        .await
        .expect("upstream registry");
    let status = upstream.status();
    let mut headers = upstream.headers().clone();
    headers.remove(reqwest::header::TRANSFER_ENCODING);
    headers.remove(reqwest::header::CONNECTION);
    let bytes = upstream.bytes().await.unwrap();
    let mut response = axum::response::Response::new(axum::body::Body::from(bytes));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

#[tokio::test]
async fn tags_are_listed_once_per_distinct_repository() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags("shop/api", &["1.0.0", "1.1.0"], ImageSpec::default())
        .await;
    reg.push_tags("shop/web", &["2.0.0", "2.1.0"], ImageSpec::default())
        .await;
    let proxy = CountingProxy::start(reg.host()).await;
    let tree = Tree::new(&insecure_registry(&proxy.host));
    let api = format!("{}/shop/api", proxy.host);
    let web = format!("{}/shop/web", proxy.host);
    // Two policies follow shop/api (for different directories), one follows shop/web; shop/api
    // is named six times in four files.
    let targets = |dir: &str| format!("  targets:\n    - paths: [\"{dir}/**\"]\n");
    tree.write(
        "policies/api.yaml",
        &format!(
            "{}---\n{}",
            policy(
                "api-prod",
                &api,
                &format!("{}{}", semver("1.x"), targets("prod"))
            ),
            policy(
                "api-staging",
                &api,
                &format!("{}{}", semver("1.x"), targets("staging"))
            ),
        ),
    )
    .write("policies/web.yaml", &policy("web", &web, &semver("2.x")));
    let old_api = format!("{api}:1.0.0");
    let old_web = format!("{web}:2.0.0");
    tree.write(
        "prod/a.yaml",
        &deployment("a", &[&old_api, &old_api, &old_web]),
    )
    .write("prod/b.yaml", &deployment("b", &[&old_api]))
    .write("staging/a.yaml", &deployment("a", &[&old_api, &old_web]))
    .write("staging/b.yaml", &deployment("b", &[&old_api, &old_api]));

    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["summary"]["changes"], 8, "{report:#}");

    assert_eq!(proxy.count("GET /v2/shop/api/tags/list"), 1);
    assert_eq!(proxy.count("GET /v2/shop/web/tags/list"), 1);
}

// === authentication ===

#[tokio::test]
async fn basic_auth_reads_the_password_from_password_env() {
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_tags("shop/api", &["1.2.3", "1.3.0"], ImageSpec::default())
        .await;
    let tree = Tree::new(&password_env_registry(&reg));
    let image = reg.image("shop/api");
    tree.follow_api_in_app_yaml(&image, "1.2.3");

    let run = tree
        .run_env(&["plan"], &[("REG_PASSWORD", reg.password().unwrap())])
        .await;
    run.expect_code(0);
    run.expect_stdout("1.3.0");
}

#[tokio::test]
async fn docker_config_env_supplies_credentials_when_tagpilot_yaml_has_none() {
    use base64::Engine;
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_tags("shop/api", &["1.2.3", "1.3.0"], ImageSpec::default())
        .await;
    let tree = Tree::new(&insecure_registry(&reg.host()));
    let image = reg.image("shop/api");
    tree.follow_api_in_app_yaml(&image, "1.2.3");
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        reg.user().unwrap(),
        reg.password().unwrap()
    ));
    std::fs::create_dir_all(tree.home.path().join(".docker")).unwrap();
    std::fs::write(
        tree.home.path().join(".docker/config.json"),
        format!(r#"{{"auths": {{"{}": {{"auth": "{auth}"}}}}}}"#, reg.host()),
    )
    .unwrap();

    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["changes"][0]["to"], "1.3.0", "{report:#}");
    assert!(!run.all().contains(&auth), "{}", run.all());
}

#[tokio::test]
async fn wrong_password_exits_1_naming_registry_and_repository_but_not_the_password() {
    let reg = TestRegistry::start(Auth::basic()).await;
    reg.push_tags("shop/api", &["1.2.3", "1.3.0"], ImageSpec::default())
        .await;
    let tree = Tree::new(&password_env_registry(&reg));
    let image = reg.image("shop/api");
    tree.follow_api_in_app_yaml(&image, "1.2.3");
    let before = tree.snapshot();

    let wrong = "wr0ng-pa55word";
    // Debug logs on: credentials must stay out of logs too.
    let run = tree
        .run_env(&["apply", "--log", "debug"], &[("REG_PASSWORD", wrong)])
        .await;
    run.expect_code(1);
    let all = run.all();
    assert!(all.contains(&reg.host()), "{all}");
    assert!(all.contains("shop/api"), "{all}");
    assert!(all.contains("policy api"), "{all}");
    // stderr is a pipe here: log lines must be plain text, as a log collector would store them.
    assert!(!run.stderr.contains('\u{1b}'), "{}", run.stderr);
    use base64::Engine;
    for secret in [
        wrong.to_string(),
        base64::engine::general_purpose::STANDARD.encode(format!("tester:{wrong}")),
        reg.password().unwrap().to_string(),
    ] {
        assert!(!all.contains(&secret), "{secret:?} leaked:\n{all}");
    }
    assert_eq!(tree.snapshot(), before);
}

#[tokio::test]
async fn token_auth_through_the_token_server() {
    let reg = TestRegistry::start(Auth::token()).await;
    reg.push_tags("shop/api", &["1.2.3", "1.3.0"], ImageSpec::default())
        .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.follow_api_in_app_yaml(&image, "1.2.3");
    let tokens_before = reg.token_requests();

    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:1.3.0")])
    );
    assert!(reg.token_requests() > tokens_before, "no token was fetched");
    assert!(
        !run.all().contains(reg.password().unwrap()),
        "{}",
        run.all()
    );
}

// === strategies that need the registry's metadata ===

#[tokio::test]
async fn newest_build_with_a_platform_ranks_by_that_platforms_build_time() {
    let reg = TestRegistry::start(Auth::None).await;
    let both = |amd64: &str, arm64: &str| {
        IndexSpec::new()
            .platform("linux/amd64", ImageSpec::default().created(amd64))
            .platform("linux/arm64", ImageSpec::default().created(arm64))
    };
    reg.push_index(
        "shop/api",
        "build-1",
        both("2023-01-01T00:00:00Z", "2023-01-01T00:00:00Z"),
    )
    .await;
    // By the newest entry of any platform `build-amd` would win, and `build-amd-only` by the
    // newest of all; only the arm64 entries' times make `build-arm` the choice.
    // Newest for amd64, old for arm64.
    reg.push_index(
        "shop/api",
        "build-amd",
        both("2024-06-01T00:00:00Z", "2024-01-01T00:00:00Z"),
    )
    .await;
    // Newest for arm64.
    reg.push_index(
        "shop/api",
        "build-arm",
        both("2024-02-01T00:00:00Z", "2024-05-01T00:00:00Z"),
    )
    .await;
    // The newest of all, but without an arm64 image.
    reg.push_index(
        "shop/api",
        "build-amd-only",
        IndexSpec::new().platform(
            "linux/amd64",
            ImageSpec::default().created("2024-12-01T00:00:00Z"),
        ),
    )
    .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            &image,
            "  strategy:\n    newestBuild: {}\n  platforms: [linux/arm64]\n",
        ),
    )
    .write(
        "app.yaml",
        &deployment("app", &[&format!("{image}:build-1")]),
    );

    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:build-arm")]),
        "{}",
        run.stdout
    );
}

/// The digest the registry serves for `path:tag`, asked with a plain HEAD.
async fn served_digest(reg: &TestRegistry, path: &str, tag: &str) -> String {
    let resp = reqwest::Client::new()
        .head(format!("http://{}/v2/{path}/manifests/{tag}", reg.host()))
        .header(
            "accept",
            "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
        )
        .send()
        .await
        .unwrap();
    assert!(
        resp.status().is_success(),
        "{path}:{tag}: {}",
        resp.status()
    );
    resp.headers()["docker-content-digest"]
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn pin_digest_writes_tag_and_the_digest_the_registry_serves() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_image("shop/api", "1.0.0", ImageSpec::default())
        .await;
    let pushed = reg
        .push_image("shop/api", "1.1.0", ImageSpec::default())
        .await;
    let served = served_digest(&reg, "shop/api", "1.1.0").await;
    assert_eq!(pushed, served);
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            &image,
            &format!("{}  pinDigest: true\n", semver("1.x")),
        ),
    )
    .write("app.yaml", &deployment("app", &[&format!("{image}:1.0.0")]));

    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:1.1.0@{served}")])
    );
    let again = tree.run(&["plan", "--exit-code"]).await;
    again.expect_code(0);
}

#[tokio::test]
async fn digest_strategy_moves_the_pin_when_the_tag_is_pushed_again() {
    let reg = TestRegistry::start(Auth::None).await;
    let first = reg
        .push_image("shop/api", "stable", ImageSpec::default())
        .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &policy("api", &image, "  strategy:\n    digest: {tag: stable}\n"),
    )
    .write(
        "app.yaml",
        &deployment("app", &[&format!("{image}:stable")]),
    );

    tree.run(&["apply"]).await.expect_code(0);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:stable@{first}")])
    );
    tree.run(&["plan", "--exit-code"]).await.expect_code(0);

    let second = reg
        .push_image(
            "shop/api",
            "stable",
            ImageSpec::default().created("2024-02-01T00:00:00Z"),
        )
        .await;
    assert_ne!(first, second);
    assert_eq!(served_digest(&reg, "shop/api", "stable").await, second);
    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    run.expect_stdout(&second);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:stable@{second}")])
    );
}

// === bad input: exit 1, the thing named, nothing written ===

/// Runs `apply` on a tree that must not change, expects exit 1, and returns everything printed.
async fn apply_fails_writing_nothing(tree: &Tree) -> String {
    let before = tree.snapshot();
    let run = tree.run(&["apply"]).await;
    run.expect_code(1);
    assert_eq!(tree.snapshot(), before, "apply wrote despite the error");
    run.all()
}

#[tokio::test]
async fn a_malformed_policy_file_is_reported_with_file_line_column_and_the_others_still_apply() {
    let (_reg, tree) = api_setup().await;
    tree.write(
        "policies/broken.yaml",
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: broken\nspec:\n  image: [unclosed\n",
    );

    let run = tree.run(&["apply"]).await;
    run.expect_code(1);
    let all = run.all();
    // The flow sequence where the image name should be.
    assert!(all.contains("policies/broken.yaml:6:10: "), "{all}");
    // The valid policy is planned and written all the same.
    assert!(
        tree.read("apps/api/deployment.yaml").contains(":1.3.0"),
        "{all}"
    );
    assert!(all.contains("1 change in 1 file"), "{all}");
}

#[tokio::test]
async fn unknown_policy_key_is_named_with_file_line_column() {
    let (reg, tree) = api_setup().await;
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            &reg.image("shop/api"),
            "  strategy:\n    semver: {range: \"1.x\"}\n  pinDigests: true\n",
        ),
    );

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(all.contains("pinDigests"), "{all}");
    assert!(all.contains("policies/api.yaml:9:3"), "{all}");
}

#[tokio::test]
async fn invalid_regex_is_named_with_file_line_column() {
    let (reg, tree) = api_setup().await;
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            &reg.image("shop/api"),
            "  strategy:\n    semver: {}\n  allowTags: '^(1\\.\\d+'\n",
        ),
    );

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(all.contains("policies/api.yaml:9:14: "), "{all}");
    assert!(all.contains("allowTags: invalid regex"), "{all}");
}

#[tokio::test]
async fn unreachable_registry_is_named() {
    let host = format!("127.0.0.1:{}", closed_port());
    let tree = Tree::new(&insecure_registry(&host));
    let image = format!("{host}/shop/api");
    tree.follow_api_in_app_yaml(&image, "1.0.0");

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(all.contains(&format!("registry {host}")), "{all}");
    assert!(all.contains("unreachable"), "{all}");
    assert!(all.contains("policy api"), "{all}");
}

#[tokio::test]
async fn missing_repository_is_named() {
    let (reg, tree) = api_setup().await;
    let missing = reg.image("shop/missing");
    tree.write(
        "policies/api.yaml",
        &policy("api", &missing, &semver("1.x")),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &[&format!("{missing}:1.0.0")]),
    );

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(
        all.contains(&format!(
            "repository shop/missing does not exist on registry {}",
            reg.host()
        )),
        "{all}"
    );
}

#[tokio::test]
async fn helm_template_is_skipped_and_the_rest_still_planned() {
    let (reg, tree) = api_setup().await;
    let template = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {{ include \"api.fullname\" . }}\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: \"{{ .Values.image.repository }}:{{ .Values.image.tag }}\"\n          {{- with .Values.resources }}\n          resources:\n            {{- toYaml . | nindent 12 }}\n          {{- end }}\n";
    tree.write("chart/templates/deployment.yaml", template);
    let before = tree.snapshot();

    // A skipped file is not an error: exit 0.
    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let skipped = report["skipped"].as_array().unwrap();
    assert_eq!(skipped.len(), 1, "{report:#}");
    assert_eq!(skipped[0]["file"], "chart/templates/deployment.yaml");
    assert_eq!(report["changes"][0]["file"], "apps/api/deployment.yaml");
    assert_eq!(report["changes"][0]["to"], "1.3.0");
    assert_eq!(tree.snapshot(), before);

    let table = tree.run(&["apply"]).await;
    table.expect_code(0);
    assert!(
        table
            .stdout
            .contains("Skipped files:\n  chart/templates/deployment.yaml: "),
        "{}",
        table.stdout
    );
    assert_eq!(tree.read("chart/templates/deployment.yaml"), template);
    assert_eq!(
        tree.read("apps/api/deployment.yaml"),
        deployment("api", &[&format!("{}:1.3.0", reg.image("shop/api"))])
    );
}

#[tokio::test]
async fn a_failing_policy_is_listed_while_another_policy_still_plans() {
    let (reg, tree) = api_setup().await;
    let web = reg.image("shop/web");
    reg.push_tags("shop/web", &["latest"], ImageSpec::default())
        .await;
    // `web` follows a tag the registry does not have.
    tree.write(
        "policies/web.yaml",
        &policy("web", &web, "  strategy:\n    digest: {tag: stable}\n"),
    )
    .write(
        "apps/web.yaml",
        &deployment("web", &[&format!("{web}:stable")]),
    );
    let before = tree.snapshot();

    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(1);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let problems = report["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report:#}");
    assert_eq!(problems[0]["policy"], "web");
    assert_eq!(problems[0]["file"], "apps/web.yaml");
    assert_eq!(problems[0]["line"], 10);
    let message = problems[0]["message"].as_str().unwrap();
    assert!(
        message.contains("stable") && message.contains("shop/web"),
        "{message}"
    );
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{report:#}");
    assert_eq!(changes[0]["policy"], "api");
    assert_eq!(changes[0]["to"], "1.3.0");

    // An error outranks pending changes.
    let table = tree.run(&["plan", "--exit-code"]).await;
    table.expect_code(1);
    assert!(
        table.stdout.contains(&format!(
            "Problems:\n  policy web, image {web}, apps/web.yaml:10: "
        )),
        "{}",
        table.stdout
    );
    assert_eq!(tree.snapshot(), before);
}

// === scripted registry behaviour the real one lacks ===

async fn mock_tree(server: &MockServer) -> (Tree, String) {
    let host = server.address().to_string();
    let tree = Tree::new(&insecure_registry(&host));
    let image = format!("{host}/shop/api");
    tree.follow_api_in_app_yaml(&image, "1.0.0");
    (tree, image)
}

#[tokio::test]
async fn too_many_requests_with_retry_after_is_waited_out() {
    let server = MockServer::start().await;
    too_many_requests_once("0").expect(1).mount(&server).await;
    get_tags_list()
        .respond_with(tags_page(&["1.0.0", "1.4.0"]))
        .with_priority(2)
        .expect(1)
        .mount(&server)
        .await;
    let (tree, image) = mock_tree(&server).await;

    let run = tree.run(&["apply"]).await;
    run.expect_code(0);
    assert_eq!(
        tree.read("app.yaml"),
        deployment("app", &[&format!("{image}:1.4.0")])
    );
}

#[tokio::test]
async fn retry_after_beyond_the_wait_limit_fails_at_once_naming_the_registry() {
    let server = MockServer::start().await;
    get_tags_list()
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "3600"))
        .expect(1)
        .mount(&server)
        .await;
    let (tree, _) = mock_tree(&server).await;

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(
        all.contains(&format!(
            "registry {} kept refusing requests for repository shop/api with HTTP 429",
            server.address()
        )),
        "{all}"
    );
    assert!(all.contains("Retry-After was 3600 s"), "{all}");
}

#[tokio::test]
async fn malformed_json_from_the_registry_is_named() {
    let server = MockServer::start().await;
    get_tags_list()
        .respond_with(proxy_login_page())
        .mount(&server)
        .await;
    let (tree, _) = mock_tree(&server).await;

    let all = apply_fails_writing_nothing(&tree).await;
    assert!(
        all.contains(&format!(
            "registry {} sent a malformed tag list for repository shop/api",
            server.address()
        )),
        "{all}"
    );
}

// === check and tags ===

#[tokio::test]
async fn check_validates_every_example_policy() {
    let config =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/policies-check/tagpilot.yaml");
    let tree = Tree::new("  []\n");
    let run = tree
        .run(&["check", "--config", config.to_str().unwrap()])
        .await;
    run.expect_code(0);
    let examples = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .count();
    // Each example finds its reference in the fixture's manifests: no finding, no warning. The
    // repository policies/kustomize.yaml names is never fetched: said, not an error.
    assert!(
        run.stdout.trim_end().ends_with(&format!(
            "in {examples} files: OK\nnot read: repository manifests: not in the clone cache yet (tagpilot plan fetches it)"
        )),
        "{}",
        run.stdout
    );
}

#[tokio::test]
async fn check_names_file_line_column_of_a_broken_policy() {
    let tree = Tree::new("  []\n");
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            "127.0.0.1:5000/shop/api",
            "  strategy:\n    semver: {range: \">=1.0, <2\"}\n    regex: {pattern: '^v'}\n",
        ),
    );
    let run = tree.run(&["check"]).await;
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("policies/api.yaml:8:5: policy \"api\": spec.strategy sets semver and regex"),
        "{}",
        run.all()
    );
}

#[tokio::test]
async fn check_names_targets_that_match_no_file_and_markers_that_resolve_to_nothing() {
    let tree = Tree::new("  []\n");
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            "127.0.0.1:5000/shop/api",
            &format!("{}  targets: [{{paths: [\"aps/**\"]}}]\n", semver("1.x")),
        ),
    )
    .write(
        "policies/web.yaml",
        &policy("web", "127.0.0.1:5000/shop/web", &semver("1.x"))
            .replace("  name: web\n", "  name: web\n  namespace: apps\n"),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &["127.0.0.1:5000/shop/api:1.2.3"]),
    )
    .write(
        "apps/web/values.yaml",
        "image:\n  tag: 1.0.0 # {\"$imagepolicy\": \"flux-system:web:tag\"}\n",
    );
    // Offline: no registry is configured or reached.
    let run = tree.run(&["check"]).await;
    run.expect_code(1);
    run.expect_stdout("2 policies in 2 files: OK\n");
    run.expect_stdout("policy api, image 127.0.0.1:5000/shop/api: its targets match no file; searched paths aps/** in the local directory");
    run.expect_stdout("apps/web/values.yaml:2: marker names policy \"flux-system:web\", which is not defined; found apps:web");

    // Fixed, what is left is a warning: exit 0, still said.
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            "127.0.0.1:5000/shop/api",
            &format!(
                "{}  targets: [{{paths: [\"apps/web/**\"]}}]\n",
                semver("1.x")
            ),
        ),
    )
    .write(
        "apps/web/values.yaml",
        "image:\n  tag: 1.0.0 # {\"$imagepolicy\": \"apps:web:tag\"}\n",
    );
    let run = tree.run(&["check"]).await;
    run.expect_code(0);
    run.expect_stdout("Warnings:\n  policy api, image 127.0.0.1:5000/shop/api: no file its targets match holds the image; searched paths apps/web/** in the local directory (the target at policies/api.yaml:9:13)\n");
}

#[tokio::test]
async fn check_resolves_the_applications_and_image_updaters_it_reads_from_git() {
    let tree = Tree::new("  []\n");
    tree.write(
        "tagpilot.yaml",
        "policies: []\nrepositories:\n  - name: manifests\n    url: file:///srv/git/manifests.git\n    branch: main\n  - name: apps\n    url: file:///srv/git/apps.git\n    branch: main\napplications:\n  fromGit:\n    - paths: [\"argocd/*.yaml\"]\n    - repository: apps\n      paths: [\"*.yaml\"]\n",
    )
    .write(
        "argocd/shop.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: shop\n  namespace: argocd\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: api=registry.example/shop/api:1.x\n    argocd-image-updater.argoproj.io/write-back-method: git\n    argocd-image-updater.argoproj.io/write-back-target: kustomization\nspec:\n  source: {repoURL: 'file:///srv/git/manifests.git', path: apps/shop, targetRevision: main}\n",
    )
    .write(
        "argocd/jobs.yaml",
        "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: jobs\n  namespace: argocd\nspec:\n  source: {repoURL: 'file:///srv/git/manifests.git', path: apps/jobs, targetRevision: main}\n---\napiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata:\n  name: jobs\n  namespace: argocd\nspec:\n  writeBackConfig:\n    method: git\n  applicationRefs:\n    - namePattern: jobs\n      images:\n        - alias: worker\n          imageName: registry.example/shop/worker\n          commonUpdateSettings:\n            updateStrategy: newest-build\n    - namePattern: shop\n      useAnnotations: true\n",
    );
    let cache = tree.path().join("cache");
    let run = tree
        .run(&["check", "--cache-dir", cache.to_str().unwrap()])
        .await;
    run.expect_code(0);
    let section = run
        .stdout
        .split_once("\nApplications (applications.fromGit): ")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("{}", run.all()));
    assert!(
        section.starts_with("2 Applications, 1 ImageUpdater resource\n"),
        "{section}"
    );
    for want in [
        "  argocd/jobs (argocd/jobs.yaml:1): write-back git\n    configured by ImageUpdater argocd/jobs (applicationRefs[0], namePattern \"jobs\")\n    image worker: registry.example/shop/worker (newestBuild)\n    source 1: repository manifests (main), writes apps/jobs/.argocd-source-jobs.yaml\n",
        "  argocd/shop (argocd/shop.yaml:1): write-back git\n    configured by ImageUpdater argocd/jobs (applicationRefs[1], namePattern \"shop\")\n    image api: registry.example/shop/api (semver)\n    source 1: repository manifests (main), writes the kustomization in apps/shop\n",
        // Offline: a repository not fetched yet is said so, not fetched.
        "  not read: repository apps: not in the clone cache yet (tagpilot plan fetches it)\n",
    ] {
        assert!(section.contains(want), "{want}\nnot in:\n{section}");
    }
}

#[tokio::test]
async fn check_reads_applications_in_a_repository_as_last_fetched_without_fetching() {
    let repo = crate::support::git::BareRepo::new();
    let image = format!("127.0.0.1:{}/shop/billing", closed_port());
    repo.push_change(
        "main",
        "billing.yaml",
        &format!("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: billing\n  namespace: argocd\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: billing={image}\n    argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  source: {{repoURL: '{url}', path: apps/billing, targetRevision: main}}\n", url = repo.file_url()),
        "an Application",
    );
    let tree = Tree::new("  []\n");
    tree.write(
        "tagpilot.yaml",
        &format!(
            "policies: policies/\nrepositories:\n  - name: apps\n    url: {}\n    branch: main\napplications:\n  fromGit:\n    - repository: apps\n      paths: [\"*.yaml\"]\n",
            repo.file_url()
        ),
    )
    // `aps/**` for `apps/**` in that repository: known once it is in the clone cache.
    .write(
        "policies/typo.yaml",
        &policy(
            "typo",
            &image,
            &format!(
                "{}  targets: [{{repository: apps, paths: [\"aps/**\"]}}]\n",
                semver("1.x")
            ),
        ),
    );
    let cache = tree.path().join("cache");
    let cache = cache.to_str().unwrap();
    let run = tree.run(&["check", "--cache-dir", cache]).await;
    run.expect_code(0);
    run.expect_stdout("0 Applications, 0 ImageUpdater resources\n  not read: repository apps: not in the clone cache yet");
    run.expect_stdout(
        "\nnot read: repository apps: not in the clone cache yet (tagpilot plan fetches it)\n",
    );
    assert!(
        tree.snapshot().keys().all(|p| !p.starts_with("cache")),
        "check fetched"
    );

    // `plan` fetches it (its registry is unreachable; that is its own problem).
    // The check shows whole seconds.
    let before = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    tree.run(&["plan", "--cache-dir", cache]).await;
    let run = tree.run(&["check", "--cache-dir", cache]).await;
    run.expect_code(1);
    run.expect_stdout(&format!("Problems:\n  repository apps, policy typo, image {image}: its targets match no file; searched paths aps/** in repository apps (the target at policies/typo.yaml:9:13)\n"));
    // Offline, the files may be older than the remote's: which commit, fetched when (issue 28).
    let commit = repo.rev("main").unwrap();
    let read = format!(
        "1 Application, 0 ImageUpdater resources\n  read: repository apps as the clone cache holds it: commit {}, fetched ",
        &commit[..12]
    );
    let (_, fetched) = run
        .stdout
        .split_once(&read)
        .unwrap_or_else(|| panic!("{read}\nnot in:\n{}", run.all()));
    let (fetched, after) = fetched.split_once('\n').unwrap();
    let fetched: jiff::Timestamp = fetched.parse().unwrap();
    assert!(
        fetched >= before && fetched <= jiff::Timestamp::now(),
        "{fetched}"
    );
    assert!(after.starts_with(&format!("  argocd/billing (apps:billing.yaml:1): write-back git\n    image billing: {image} (semver)\n    source 1: repository apps (main), writes apps/billing/.argocd-source-billing.yaml\n")), "{after}");
    // Its source holds no field for its image: a warning, with what was searched.
    run.expect_stdout(&format!("  Warnings:\n    repository apps, application argocd/billing, image {image}: its sources hold no field for the image; searched source 1 (directory) at apps:apps/billing as last fetched\n"));
}

#[tokio::test]
async fn tags_marks_the_chosen_tag_and_says_why_others_are_out() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags(
        "shop/api",
        &["0.9.0", "1.2.3", "1.5.0", "1.6.0-rc.1", "2.0.0", "latest"],
        ImageSpec::default(),
    )
    .await;
    let tree = Tree::new(&reg.registries_yaml());
    let reference = format!("{}:1.2.3", reg.image("shop/api"));

    let run = tree
        .run(&["tags", &reference, "--semver", ">=1.0, <2"])
        .await;
    run.expect_code(0);
    let line = |tag: &str| {
        run.stdout
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == tag))
            .unwrap_or_else(|| panic!("no line for {tag}:\n{}", run.stdout))
            .to_string()
    };
    assert!(line("1.5.0").starts_with('*'), "{}", run.stdout);
    assert!(line("1.5.0").contains("chosen"), "{}", run.stdout);
    assert!(line("1.2.3").contains("current"), "{}", run.stdout);
    assert!(line("2.0.0").contains("out of range"), "{}", run.stdout);
    assert!(line("0.9.0").contains("out of range"), "{}", run.stdout);
    assert!(line("1.6.0-rc.1").contains("pre-release"), "{}", run.stdout);
    assert!(line("latest").contains("not a version"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains(&format!("chosen: {}:1.5.0", reg.image("shop/api"))),
        "{}",
        run.stdout
    );
}

/// A registry with `shop/api` tags on either side of a policy's range and filters, and a tree
/// whose policy `api` takes `>=1.0, <2` but ignores `1.5.*` and allows only plain versions.
async fn tags_setup() -> (TestRegistry, Tree, String) {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags(
        "shop/api",
        &["1.2.3", "1.4.0", "1.5.0", "1.5.1", "1.6.0-alpine", "2.0.0"],
        ImageSpec::default(),
    )
    .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &policy(
            "api",
            &image,
            &format!(
                "{}  allowTags: '^[0-9.]+$'\n  ignoreTags: [\"1.5.*\"]\n",
                semver(">=1.0, <2")
            ),
        ),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &[&format!("{image}:1.2.3")]),
    );
    (reg, tree, image)
}

/// The line of `tags`' table for `tag`.
fn tag_line(stdout: &str, tag: &str) -> String {
    stdout
        .lines()
        .find(|l| l.split_whitespace().any(|w| w == tag))
        .unwrap_or_else(|| panic!("no line for {tag}:\n{stdout}"))
        .to_string()
}

#[tokio::test]
async fn tags_with_policy_marks_what_that_policy_and_plan_choose() {
    let (_reg, tree, image) = tags_setup().await;

    let run = tree
        .run(&["tags", &format!("{image}:1.2.3"), "--policy", "api"])
        .await;
    run.expect_code(0);
    let out = &run.stdout;
    assert!(
        out.starts_with("policy api (policies/api.yaml:4)\n"),
        "says which policy it used:\n{out}"
    );
    // The range, the ignore globs and the allow regex are the policy's, not the default semver's.
    assert!(tag_line(out, "1.4.0").starts_with('*'), "{out}");
    assert!(tag_line(out, "1.5.1").contains("1.5.*"), "{out}");
    assert!(tag_line(out, "1.6.0-alpine").contains("allowTags"), "{out}");
    assert!(tag_line(out, "2.0.0").contains("out of range"), "{out}");
    assert!(out.contains(&format!("chosen: {image}:1.4.0")), "{out}");

    // What `plan` would write for a reference on the same tag.
    let plan = tree.run(&["plan", "--format", "json"]).await;
    plan.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&plan.stdout).unwrap();
    assert_eq!(report["changes"][0]["to"], "1.4.0", "{report:#}");
}

#[tokio::test]
async fn tags_uses_the_only_policy_following_the_image_and_says_so() {
    let (_reg, tree, image) = tags_setup().await;

    let run = tree.run(&["tags", &format!("{image}:1.2.3")]).await;
    run.expect_code(0);
    let first = run.stdout.lines().next().unwrap_or_default();
    assert_eq!(
        first,
        format!(
            "policy api (policies/api.yaml:4): the only configured policy following {image} (pass strategy flags or --policy to use another)"
        ),
        "{}",
        run.stdout
    );
    run.expect_stdout(&format!("chosen: {image}:1.4.0"));

    // Strategy flags describe a policy of their own: the configured one is not used.
    let run = tree
        .run(&["tags", &format!("{image}:1.2.3"), "--semver", ">=1.0"])
        .await;
    run.expect_code(0);
    assert!(!run.stdout.contains("policy api"), "{}", run.stdout);
    run.expect_stdout(&format!("chosen: {image}:2.0.0"));

    // A second policy on the image: neither is guessed, both are named.
    tree.write(
        "policies/api-next.yaml",
        &policy("api-next", &image, &semver(">=2")),
    );
    let run = tree.run(&["tags", &format!("{image}:1.2.3")]).await;
    run.expect_code(0);
    assert!(
        run.stderr.contains("2 configured policies follow")
            && run.stderr.contains("api (policies/api.yaml:4)")
            && run.stderr.contains("api-next (policies/api-next.yaml:4)"),
        "{}",
        run.stderr
    );
    let run = tree
        .run(&["tags", &format!("{image}:1.2.3"), "--policy", "api-next"])
        .await;
    run.expect_code(0);
    run.expect_stdout(&format!("chosen: {image}:2.0.0"));
}

#[tokio::test]
async fn tags_with_an_unknown_or_foreign_policy_names_what_there_is() {
    let (reg, tree, image) = tags_setup().await;

    let run = tree.run(&["tags", &image, "--policy", "ap"]).await;
    run.expect_code(1);
    assert!(
        run.stderr
            .contains("no policy named `ap`; the policies are: api"),
        "{}",
        run.stderr
    );

    let other = reg.image("shop/web");
    let run = tree.run(&["tags", &other, "--policy", "api"]).await;
    run.expect_code(1);
    assert!(
        run.stderr
            .contains(&format!("policy `api` follows {image}, not {other}")),
        "{}",
        run.stderr
    );

    // A policy and strategy flags are two answers to one question.
    let run = tree
        .run(&["tags", &image, "--policy", "api", "--semver", "*"])
        .await;
    run.expect_code(2);
    assert!(run.stderr.contains("cannot be used with"), "{}", run.stderr);
}

#[tokio::test]
async fn check_catches_an_unset_passphrase_variable_and_a_bad_commit_template_offline() {
    let tree = Tree::new("  []\n");
    std::fs::create_dir_all(tree.path().join("policies")).unwrap();
    let key = tree.path().join("signing-key");
    std::fs::write(&key, "not read before the variable is found missing").unwrap();
    tree.write(
        "tagpilot.yaml",
        &format!(
            "registries: []\npolicies: policies/\nrepositories:\n  - name: manifests\n    url: file:///nowhere\n    write:\n      signing: {{pgpKeyFile: '{}', passphraseEnv: TAGPILOT_IT_UNSET_PASSPHRASE}}\n",
            key.display()
        ),
    );
    let run = tree.run(&["check"]).await;
    run.expect_code(1);
    assert!(
        run.stderr.contains("manifests") && run.stderr.contains("TAGPILOT_IT_UNSET_PASSPHRASE"),
        "{}",
        run.all()
    );

    tree.write(
        "tagpilot.yaml",
        "registries: []\npolicies: policies/\nrepositories:\n  - name: manifests\n    url: file:///nowhere\n    write: {commitMessage: '{% for %}'}\n",
    );
    let run = tree.run(&["check"]).await;
    run.expect_code(1);
    assert!(
        run.stderr.contains("manifests") && run.stderr.contains("template"),
        "{}",
        run.all()
    );
}

// === issue 28: no order guessed, true reasons, paths as Flux users write them ===

/// Issue 28: `main-(\d+)-[0-9a-f]+` without `sortBy` sorted the whole tag as text, so `plan`
/// moved `main-118-…` to `main-99-…`. The only group is the key, read as a number since it holds
/// only digits; a key that could hold more (`[0-9a-f]+`) without an `order` is refused by
/// `check` and `plan` alike, at the pattern's line, and that policy is not planned.
#[tokio::test]
async fn a_regex_orders_by_its_only_group_and_an_ambiguous_order_is_refused_by_check_and_plan() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags(
        "shop/api",
        &["main-99-1234567", "main-118-3fa9c1d", "main-100-0000000"],
        ImageSpec::default(),
    )
    .await;
    let tree = Tree::new(&reg.registries_yaml());
    let image = reg.image("shop/api");
    let regex = |pattern: &str| format!("  strategy:\n    regex:\n      pattern: '{pattern}'\n");
    tree.write(
        "policies/api.yaml",
        &format!(
            "{}  targets: [{{paths: [apps/api]}}]\n",
            policy("api", &image, &regex(r"^main-(\d+)-[0-9a-f]+$"))
        ),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &[&format!("{image}:main-99-1234567")]),
    )
    .write(
        "apps/api/worker.yaml",
        &deployment("worker", &[&format!("{image}:main-118-3fa9c1d")]),
    );
    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let changes = report["changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{report:#}");
    assert_eq!(changes[0]["from"], "main-99-1234567", "{report:#}");
    assert_eq!(changes[0]["to"], "main-118-3fa9c1d", "{report:#}");
    let run = tree.run(&["tags", &image, "--policy", "api"]).await;
    run.expect_code(0);
    run.expect_stdout("order: regex, numerical by group 1 (no order set; it holds only digits)\n");

    // The sha as the key: text or number is the user's to say.
    tree.write(
        "policies/api.yaml",
        &policy("api", &image, &regex(r"^main-\d+-([0-9a-f]+)$")),
    );
    let check = tree.run(&["check"]).await;
    check.expect_code(1);
    let want = "policies/api.yaml:9:16: policy \"api\": regex: no order is set and the sort key, group 1, can hold more than digits; set order: numerical, alphabetical or semver";
    assert!(check.stderr.contains(want), "{}", check.all());
    let plan = tree.run(&["plan"]).await;
    plan.expect_code(1);
    assert!(plan.all().contains(want), "{}", plan.all());
    assert!(!plan.stdout.contains("main-118"), "{}", plan.stdout);
}

/// Issue 28: a plan whose policy no listed tag passes said "the registry has no tags".
#[tokio::test]
async fn a_hold_for_want_of_a_fitting_tag_says_why_not_that_the_registry_is_empty() {
    let (reg, tree) = api_setup().await;
    let image = reg.image("shop/api");
    tree.write(
        "policies/api.yaml",
        &format!(
            "{}  allowTags: '^v'\n",
            policy("api", &image, &semver(">=1.0.0, <2.0.0"))
        ),
    );
    let run = tree.run(&["plan", "--format", "json"]).await;
    run.expect_code(0);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let reason = report["holds"][0]["reason"].as_str().unwrap_or_default();
    assert_eq!(
        reason, "no tag fits the policy (3 tags: 3 filtered by allowTags)",
        "{report:#}"
    );
}

/// Issue 28: `./apps/**` and a bare directory matched no file; a file the targets name that
/// cannot be read was only listed among skipped files; a local target that matches nothing
/// while a configured repository has such files said only "match no file".
#[tokio::test]
async fn check_reads_paths_as_flux_users_write_them_and_names_what_a_target_misses() {
    let repo = crate::support::git::BareRepo::new();
    repo.push_change(
        "main",
        "clusters/prod/web.yaml",
        &deployment("web", &["127.0.0.1:5000/shop/web:1.0.0"]),
        "web",
    );
    let tree = Tree::new("  []\n");
    tree.write(
        "tagpilot.yaml",
        &format!(
            "policies: policies/\nrepositories:\n  - name: prod\n    url: {}\n    branch: main\n",
            repo.file_url()
        ),
    )
    .write(
        "policies/api.yaml",
        &format!(
            "{}  targets: [{{paths: [./apps/**]}}]\n",
            policy("api", "127.0.0.1:5000/shop/api", &semver("1.x"))
        ),
    )
    .write(
        "policies/jobs.yaml",
        &format!(
            "{}  targets: [{{paths: [jobs]}}]\n",
            policy("jobs", "127.0.0.1:5000/shop/jobs", &semver("1.x"))
        ),
    )
    // Meant for repository prod, which has it; named there so that `plan` fetches prod.
    .write(
        "policies/web.yaml",
        &format!(
            "{}  targets:\n    - paths: [clusters/prod]\n    - {{repository: prod, paths: [other/**]}}\n",
            policy("web", "127.0.0.1:5000/shop/web", &semver("1.x"))
        ),
    )
    .write(
        "apps/api/deployment.yaml",
        &deployment("api", &["127.0.0.1:5000/shop/api:1.2.3"]),
    )
    .write(
        "jobs/nightly/cronjob.yaml",
        &deployment("nightly", &["127.0.0.1:5000/shop/jobs:1.2.3"]),
    )
    .write("jobs/values.yaml", "image:\n  tag: {{ .Values.tag }\n");
    let cache = tree.path().join("cache");
    let cache = cache.to_str().unwrap();
    tree.run(&["plan", "--cache-dir", cache]).await;
    let run = tree.run(&["check", "--cache-dir", cache]).await;
    run.expect_code(1);
    let out = &run.stdout;
    assert!(!out.contains("policy api, image"), "{out}");
    assert!(
        !out.contains("policy jobs, image 127.0.0.1:5000/shop/jobs: its targets"),
        "{out}"
    );
    run.expect_stdout("policy jobs, image 127.0.0.1:5000/shop/jobs: a file its targets name cannot be read, so no image in it is updated; searched jobs/values.yaml:");
    run.expect_stdout("policy web, image 127.0.0.1:5000/shop/web: its targets match no file; searched paths clusters/prod, clusters/prod/** in the local directory (the target at policies/web.yaml:10:7); repository prod has 1 matching file as last fetched: add `repository: prod` to the target to update them there");
}

/// Issue 28: `tags` honours an Application's constraint when asked for its image, says which
/// order it used, and reaches a registry no configuration names with `--insecure`.
#[tokio::test]
async fn tags_takes_an_applications_image_and_an_unconfigured_plain_http_registry() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_tags(
        "shop/pay",
        &["2.4.6", "2.4.7", "2.5.0"],
        ImageSpec::default(),
    )
    .await;
    let image = reg.image("shop/pay");
    let tree = Tree::new(&reg.registries_yaml());
    tree.write(
        "tagpilot.yaml",
        &format!(
            "registries:\n{}policies: policies/\nrepositories:\n  - name: manifests\n    url: file:///srv/git/manifests.git\n    branch: main\napplications:\n  fromGit:\n    - paths: [\"argocd/*.yaml\"]\n",
            reg.registries_yaml()
        ),
    )
    .write(
        "argocd/payments.yaml",
        &format!("apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata:\n  name: payments\n  namespace: argocd\n  annotations:\n    argocd-image-updater.argoproj.io/image-list: pay={image}:~2.4\n    argocd-image-updater.argoproj.io/write-back-method: git\nspec:\n  source: {{repoURL: 'file:///srv/git/manifests.git', path: apps/pay, targetRevision: main}}\n"),
    );
    for name in ["argocd/payments/pay", "payments/pay"] {
        let run = tree
            .run(&["tags", &format!("{image}:2.4.6"), "--policy", name])
            .await;
        run.expect_code(0);
        assert!(
            run.stdout.starts_with(
                "policy payments/pay (an image of Application argocd/payments)\norder: semver, highest in ~2.4\n"
            ),
            "{}",
            run.all()
        );
        run.expect_stdout(&format!("chosen: {image}:2.4.7"));
    }

    // No tagpilot.yaml at all: `--insecure` is the only way to say the registry is plain HTTP.
    let bare = Tree::new("  []\n");
    std::fs::remove_file(bare.path().join("tagpilot.yaml")).unwrap();
    let run = bare.run(&["tags", &image, "--semver", "*"]).await;
    run.expect_code(1);
    assert!(run.stderr.contains("plain HTTP"), "{}", run.all());
    let run = bare
        .run(&["tags", &image, "--semver", "*", "--insecure"])
        .await;
    run.expect_code(0);
    run.expect_stdout("order: semver, highest in *\n");
    run.expect_stdout(&format!("chosen: {image}:2.5.0"));
}
