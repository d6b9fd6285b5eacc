//! Issue 31: one policy follows every image under a registry pattern that the targets hold,
//! against the real registry, through the binary: plain YAML, kustomize and Helm values, an
//! exact policy that wins over the pattern, and two overlapping patterns named.

use std::path::Path;

use crate::support::registry::{Auth, ImageSpec, TestRegistry};

const BIN: &str = env!("CARGO_BIN_EXE_tagpilot");

/// Runs `tagpilot args…` in `dir`: (exit code, stdout, stderr).
async fn tagpilot(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let home = dir.join(".home");
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .env("HOME", &home)
        .env("DOCKER_CONFIG", home.join(".docker"))
        .output()
        .await
        .expect("run tagpilot");
    (
        out.status.code().expect("exited by a signal"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn write(dir: &Path, rel: &str, text: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn policy(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n  strategy:\n    semver: {{range: \"1.x\"}}\n{extra}"
    )
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

/// A registry with `shop/api`, `shop/web`, `shop/cart` and `other/tool`, each at 1.0.0, 1.1.0
/// and 2.0.0, and a root whose `tagpilot.yaml` reads `policies/`: `api` in plain YAML, `web`
/// in a kustomization, `cart` in Helm values, `tool` in plain YAML.
async fn shop() -> (TestRegistry, tempfile::TempDir) {
    let reg = TestRegistry::start_with_access_log(Auth::None).await;
    for path in ["shop/api", "shop/web", "shop/cart", "other/tool"] {
        reg.push_tags(path, &["1.0.0", "1.1.0", "2.0.0"], ImageSpec::default())
            .await;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "tagpilot.yaml",
        &format!(
            "registries:\n{}policies: policies/\n",
            reg.registries_yaml()
        ),
    );
    write(
        root,
        "apps/api/deployment.yaml",
        &deployment(&format!("{}:1.0.0", reg.image("shop/api"))),
    );
    write(
        root,
        "apps/web/kustomization.yaml",
        &format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [deployment.yaml]\nimages:\n  - name: {}\n    newTag: 1.0.0\n",
            reg.image("shop/web")
        ),
    );
    write(
        root,
        "apps/cart/values.yaml",
        &format!(
            "image:\n  repository: {}\n  tag: 1.0.0\n",
            reg.image("shop/cart")
        ),
    );
    write(
        root,
        "apps/tool/deployment.yaml",
        &deployment(&format!("{}:1.0.0", reg.image("other/tool"))),
    );
    (reg, dir)
}

/// The changes of `plan --format json`: (policy, image, file, to).
fn changes(stdout: &str) -> Vec<(String, String, String, String)> {
    let json: serde_json::Value = serde_json::from_str(stdout).expect("JSON report");
    let mut out: Vec<_> = json["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("policy"), s("image"), s("file"), s("to"))
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_pattern_follows_its_images_in_yaml_kustomize_and_helm_and_an_exact_policy_wins() {
    let (reg, dir) = shop().await;
    let root = dir.path();
    let pattern = format!("{}/shop/*", reg.host());
    write(
        root,
        "policies/shop.yaml",
        &policy(
            "shop",
            &pattern,
            "  targets:\n    - paths: [\"apps/**\"]\n      helm: {repository: image.repository, tag: image.tag}\n",
        ),
    );
    let (code, stdout, stderr) = tagpilot(root, &["plan", "--format", "json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let host = reg.host();
    let want = |policy: &str, image: &str, file: &str| {
        (
            policy.to_string(),
            format!("{host}/{image}"),
            file.to_string(),
            "1.1.0".to_string(),
        )
    };
    assert_eq!(
        changes(&stdout),
        [
            want("shop@shop/api", "shop/api", "apps/api/deployment.yaml"),
            want("shop@shop/cart", "shop/cart", "apps/cart/values.yaml"),
            want("shop@shop/web", "shop/web", "apps/web/kustomization.yaml"),
        ],
        "{stdout}"
    );
    // Three repositories followed, each listed once; other/tool is never asked for.
    let listings: Vec<String> = reg
        .requests()
        .into_iter()
        .filter(|r| r.contains("/tags/list"))
        .collect();
    assert_eq!(listings.len(), 3, "{listings:#?}");
    assert!(
        !listings.iter().any(|r| r.contains("other/tool")),
        "{listings:#?}"
    );

    // A policy naming shop/api exactly wins over the pattern, and the pattern is told.
    write(
        root,
        "policies/api.yaml",
        &policy("api", &reg.image("shop/api"), "").replace("1.x", "~1.0.0"),
    );
    let (code, stdout, stderr) = tagpilot(root, &["plan"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(!stdout.contains("shop@shop/api"), "{stdout}");
    assert!(stdout.contains("shop@shop/web"), "{stdout}");
    assert!(
        stdout.contains("policy shop, image ")
            && stdout.contains("a policy naming it exactly follows it")
            && stdout.contains("apps/api/deployment.yaml:10, which follows policy api"),
        "{stdout}"
    );
    // `tags` says which policy an image follows, and why.
    let (code, stdout, stderr) = tagpilot(root, &["tags", &reg.image("shop/web")]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("policy shop@shop/web (")
            && stdout.contains(&format!("pattern {pattern}"))
            && stdout.contains("no policy names the image exactly"),
        "{stdout}"
    );
}

#[tokio::test]
async fn two_overlapping_patterns_are_named_by_check_and_plan_until_a_priority_decides() {
    let (reg, dir) = shop().await;
    let root = dir.path();
    let host = reg.host();
    write(
        root,
        "policies/shop.yaml",
        &policy("shop", &format!("{host}/shop/*"), ""),
    );
    write(
        root,
        "policies/web.yaml",
        &policy("web", &format!("{host}/shop/w*"), ""),
    );
    for command in ["check", "plan"] {
        let (code, stdout, stderr) = tagpilot(root, &[command]).await;
        let all = format!("{stdout}\n{stderr}");
        assert_eq!(code, 1, "{command}: {all}");
        assert!(
            all.contains("the patterns of policies shop (")
                && all.contains("policies/shop.yaml:4")
                && all.contains(" and web (")
                && all.contains("policies/web.yaml:4"),
            "{command}: {all}"
        );
    }
    write(
        root,
        "policies/web.yaml",
        &policy("web", &format!("{host}/shop/w*"), "  priority: 10\n"),
    );
    let (code, stdout, stderr) = tagpilot(root, &["plan", "--format", "json"]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let moved = changes(&stdout);
    assert!(
        moved
            .iter()
            .any(|(p, _, f, _)| p == "web@shop/web" && f == "apps/web/kustomization.yaml"),
        "{moved:?}"
    );
}

/// A hold on one image of a pattern names the image's policy (`shop@shop/api`) and holds only
/// it: the pattern's other images move. `tagpilot holds` lists it by that name, and `holds
/// release` takes it; then the image moves too.
#[tokio::test]
async fn a_hold_on_one_image_of_a_pattern_leaves_its_other_images_moving() {
    let (reg, dir) = shop().await;
    let root = dir.path();
    write(
        root,
        "policies/shop.yaml",
        &policy("shop", &format!("{}/shop/*", reg.host()), ""),
    );
    let state_dir = root.join("state");
    let field = "Deployment/app container app";
    tagpilot::state::State::open(&state_dir)
        .unwrap()
        .hold(&tagpilot::holds::HeldTag {
            key: tagpilot::holds::FieldKey {
                repository: None,
                policy: "shop@shop/api".into(),
                file: "apps/api/deployment.yaml".into(),
                field: field.into(),
            },
            tag: "1.1.0".into(),
            reason: tagpilot::holds::HoldReason::Manual { by: "ops".into() },
            since: "2026-11-25T10:00:00Z".parse().unwrap(),
        })
        .unwrap();
    let state = state_dir.to_str().unwrap();
    let plan_args = ["plan", "--state-dir", state, "--format", "json"];
    let (code, stdout, stderr) = tagpilot(root, &plan_args).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let moved: Vec<String> = changes(&stdout).into_iter().map(|c| c.0).collect();
    assert_eq!(moved, ["shop@shop/cart", "shop@shop/web"], "{stdout}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let held: Vec<&str> = json["holds"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|h| h["policy"].as_str())
        .collect();
    assert_eq!(held, ["shop@shop/api"], "{stdout}");

    let (code, stdout, stderr) = tagpilot(root, &["holds", "--state-dir", state]).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    assert!(
        stdout.contains("shop@shop/api") && !stdout.contains("shop@shop/web"),
        "{stdout}"
    );
    let (code, stdout, stderr) = tagpilot(
        root,
        &[
            "holds",
            "release",
            "--state-dir",
            state,
            "--policy",
            "shop@shop/api",
            "--file",
            "apps/api/deployment.yaml",
            "--field",
            field,
        ],
    )
    .await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let (code, stdout, stderr) = tagpilot(root, &plan_args).await;
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let moved: Vec<String> = changes(&stdout).into_iter().map(|c| c.0).collect();
    assert_eq!(
        moved,
        ["shop@shop/api", "shop@shop/cart", "shop@shop/web"],
        "{stdout}"
    );
}

/// One engine cycle over `repo` proposing on GitHub's double at `server`, grouped by `group`,
/// with the pattern policy `shop` over the real registry `reg`: the pull requests' heads and
/// titles, as GitHub was asked to open them.
async fn proposals(
    reg: &TestRegistry,
    repo: &crate::support::git::BareRepo,
    server: &wiremock::MockServer,
    group: &str,
) -> Vec<(String, String)> {
    use crate::support::github::{AUTH, PULLS, created, ok_json, pull};
    use wiremock::matchers::{header, method, path};
    use wiremock::{Mock, Request, Respond, ResponseTemplate};

    /// Each new pull request gets the next number, from 7.
    struct Numbered(std::sync::atomic::AtomicU64);
    impl Respond for Numbered {
        fn respond(&self, _: &Request) -> ResponseTemplate {
            let n = self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            created(pull(n, "", false))
        }
    }
    server.reset().await;
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(serde_json::json!([])))
        .mount(server)
        .await;
    Mock::given(method("POST"))
        .and(path(PULLS))
        .respond_with(Numbered(7.into()))
        .mount(server)
        .await;
    let dir = tempfile::tempdir().unwrap();
    let write = format!(
        "    forge:\n      github: {{apiUrl: '{}', tokenEnv: {}, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      group: {group}\n      branch: 'tagpilot/{{{{ group }}}}'\n      title: 'Update {{{{ group }}}}'\n",
        server.uri(),
        crate::support::git::HTTP_PASSWORD_ENV,
    );
    let shop = format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: shop\nspec:\n  image: {}/shop/*\n  strategy:\n    semver: {{range: \"1.x\"}}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n",
        reg.host()
    );
    let mut config = crate::engine::setup(dir.path(), repo, &write, &[("shop.yaml", &shop)]);
    config.registries = vec![reg.registry_config()];
    let policies = tagpilot::policy::load(&config).expect("policies load");
    let cache = tagpilot::git::RepoCache::new(dir.path().join("cache"));
    let client = reg.client();
    let input = tagpilot::engine::Input {
        config: &config,
        policies: &policies,
        broken_policies: &[],
        local: None,
        cluster: None,
    };
    let context = tagpilot::engine::Context {
        registry: &client,
        cache: Some(&cache),
        progress: &(),
        cancel: Default::default(),
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let cycle = tagpilot::engine::run(&input, &context, tagpilot::engine::Options::default())
        .await
        .expect("engine cycle");
    assert!(cycle.plan.problems.is_empty(), "{:?}", cycle.plan.problems);
    let mut opened: Vec<(String, String)> = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.method.as_str() == "POST" && r.url.path() == PULLS)
        .map(|r| {
            let body: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
            (
                body["head"].as_str().unwrap().to_string(),
                body["title"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    opened.sort();
    opened
}

/// `write.group: policy` opens a pull request per image of a pattern, its commit naming the
/// image's policy in `Tagpilot-Policy:`; `write.group: pattern` one for all of them.
#[tokio::test]
async fn pull_requests_are_one_per_image_or_one_per_pattern_as_configured() {
    crate::support::git::set_test_secrets();
    let reg = TestRegistry::start(Auth::None).await;
    for path in ["shop/api", "shop/web"] {
        reg.push_tags(path, &["1.0.0", "1.1.0"], ImageSpec::default())
            .await;
    }
    let server = wiremock::MockServer::start().await;
    let repo = crate::argocd::repo_with(&[
        (
            "apps/api/deployment.yaml".into(),
            deployment(&format!("{}:1.0.0", reg.image("shop/api"))),
        ),
        (
            "apps/web/deployment.yaml".into(),
            deployment(&format!("{}:1.0.0", reg.image("shop/web"))),
        ),
    ]);
    let per_image = proposals(&reg, &repo, &server, "policy").await;
    assert_eq!(
        per_image,
        [
            (
                "tagpilot/shop@shop/api".to_string(),
                "Update shop@shop/api".to_string()
            ),
            (
                "tagpilot/shop@shop/web".to_string(),
                "Update shop@shop/web".to_string()
            ),
        ]
    );
    let message = repo.message("tagpilot/shop@shop/api");
    assert!(
        message
            .trim_end()
            .ends_with("Tagpilot-Policy: shop@shop/api"),
        "{message}"
    );
    assert!(!message.contains("shop/web"), "{message}");
    assert!(
        repo.show("tagpilot/shop@shop/api", "apps/web/deployment.yaml")
            .contains("1.0.0")
    );

    let per_pattern = proposals(&reg, &repo, &server, "pattern").await;
    assert_eq!(
        per_pattern,
        [("tagpilot/shop".to_string(), "Update shop".to_string())]
    );
    for file in ["apps/api/deployment.yaml", "apps/web/deployment.yaml"] {
        assert!(
            repo.show("tagpilot/shop", file).contains(":1.1.0"),
            "{file}"
        );
    }
    let message = repo.message("tagpilot/shop");
    assert!(
        message.contains("Tagpilot-Policy: shop@shop/api\n")
            && message.contains("Tagpilot-Policy: shop@shop/web"),
        "{message}"
    );
}

/// `migrate-patterns` proposes one pattern for policies that differ only in their image; with
/// the proposal in their place, `plan` moves the same references to the same tags.
#[tokio::test]
async fn migrate_patterns_proposes_a_pattern_that_plans_as_the_policies_it_replaces() {
    let (reg, dir) = shop().await;
    let root = dir.path();
    for (name, path) in [
        ("api", "shop/api"),
        ("web", "shop/web"),
        ("cart", "shop/cart"),
    ] {
        write(
            root,
            &format!("policies/{name}.yaml"),
            &policy(
                name,
                &reg.image(path),
                "  targets:\n    - paths: [\"apps/**\"]\n",
            ),
        );
    }
    let moves = |stdout: &str| -> Vec<(String, String, String)> {
        changes(stdout)
            .into_iter()
            .map(|(_, image, file, to)| (image, file, to))
            .collect()
    };
    let (code, before, stderr) = tagpilot(root, &["plan", "--format", "json"]).await;
    assert_eq!(code, 0, "{before}\n{stderr}");
    let (code, proposal, stderr) = tagpilot(root, &["migrate-patterns"]).await;
    assert_eq!(code, 0, "{proposal}\n{stderr}");
    assert!(
        proposal.starts_with("# Replaces 3 policies with the same settings: ")
            && proposal.contains(&format!("  image: {}/shop/*\n", reg.host())),
        "{proposal}"
    );
    std::fs::remove_dir_all(root.join("policies")).unwrap();
    write(root, "policies/shop.yaml", &proposal);
    let (code, after, stderr) = tagpilot(root, &["plan", "--format", "json"]).await;
    assert_eq!(code, 0, "{after}\n{stderr}");
    assert_eq!(
        moves(&after),
        moves(&before),
        "before:\n{before}\nafter:\n{after}"
    );
    assert_eq!(moves(&after).len(), 3);
}

/// `migrate-patterns --compare` plans with the policies as they are and with the proposal in
/// their place, and names what only one of them moves: here the pattern over `shop/*` also
/// follows `shop/cart`, which no policy followed before.
#[tokio::test]
async fn migrate_patterns_compare_names_what_only_the_pattern_would_move() {
    let (reg, dir) = shop().await;
    let root = dir.path();
    for (name, path) in [("api", "shop/api"), ("web", "shop/web")] {
        write(
            root,
            &format!("policies/{name}.yaml"),
            &policy(
                name,
                &reg.image(path),
                "  targets:\n    - paths: [\"apps/**\"]\n",
            ),
        );
    }
    let (code, out, stderr) = tagpilot(root, &["migrate-patterns", "--compare"]).await;
    assert_eq!(code, 0, "{out}\n{stderr}");
    assert!(
        out.contains("# plan before: 2 changes, 0 holds, 0 problems\n")
            && out.contains(
                "# plan after (1 pattern policies in place of 2): 3 changes, 0 holds, 0 problems\n"
            ),
        "{out}"
    );
    let only: Vec<&str> = out.lines().filter(|l| l.starts_with("# only ")).collect();
    assert_eq!(only.len(), 1, "{out}");
    assert!(
        only[0].starts_with("# only after: apps/cart/values.yaml:")
            && only[0].ends_with(" image 1.0.0 -> 1.1.0"),
        "{out}"
    );
}
