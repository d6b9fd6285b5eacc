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
