//! Unit tests of pattern policies (issue 31) over an in-memory registry: which references a
//! pattern follows, precedence, and one tag listing per repository.

use std::path::Path;

use super::*;
use crate::image::Repository;
use crate::policy::ImagePolicy;
use crate::registry::MemoryRegistry;

const API: &str = "127.0.0.1:5000/shop/api";
const WEB: &str = "127.0.0.1:5000/shop/web";
const LEGACY: &str = "127.0.0.1:5000/shop/legacy";
const OTHER: &str = "127.0.0.1:5000/other/tool";

fn policies(yaml: &str) -> Vec<ImagePolicy> {
    crate::policy::parse_file(Path::new("policies.yaml"), yaml).expect("valid policies")
}

fn policy(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n  strategy: {{semver: {{}}}}\n{extra}---\n"
    )
}

fn deployment(image: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  template:\n    spec:\n      containers:\n        - name: app\n          image: {image}\n"
    )
}

fn tree(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let p = dir.path().join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    dir
}

fn registry() -> MemoryRegistry {
    let reg = MemoryRegistry::new();
    for image in [API, WEB, LEGACY, OTHER] {
        reg.add_tags(&Repository::parse(image).unwrap(), &["1.0.0", "1.1.0"]);
    }
    reg
}

fn shop_tree() -> tempfile::TempDir {
    tree(&[
        ("apps/api.yaml", deployment(&format!("{API}:1.0.0"))),
        ("apps/api-copy.yaml", deployment(&format!("{API}:1.0.0"))),
        ("apps/web.yaml", deployment(&format!("{WEB}:1.0.0"))),
        ("apps/legacy.yaml", deployment(&format!("{LEGACY}:1.0.0"))),
        ("apps/tool.yaml", deployment(&format!("{OTHER}:1.0.0"))),
    ])
}

async fn run(dir: &Path, policies: &[ImagePolicy], reg: &MemoryRegistry) -> Plan {
    plan(&Scope::local(dir), policies, reg, &()).await.unwrap()
}

#[tokio::test]
async fn a_pattern_follows_each_matching_image_as_a_policy_of_its_own_listing_each_once() {
    let ps = policies(&policy(
        "shop",
        "127.0.0.1:5000/shop/*",
        "  exclude: [127.0.0.1:5000/shop/legacy]\n",
    ));
    let reg = registry();
    let p = run(shop_tree().path(), &ps, &reg).await;
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    let moved: Vec<(&str, &str, &str)> = p
        .changes
        .iter()
        .map(|c| (c.policy.as_str(), c.image.as_str(), c.file.as_str()))
        .collect();
    assert_eq!(
        moved,
        [
            ("shop@shop/api", API, "apps/api-copy.yaml"),
            ("shop@shop/api", API, "apps/api.yaml"),
            ("shop@shop/web", WEB, "apps/web.yaml"),
        ]
    );
    // Two repositories followed, two listings; the excluded and the unmatched are not asked.
    assert_eq!(reg.tag_list_calls(), 2);
}

#[tokio::test]
async fn an_exact_policy_wins_over_the_pattern_and_the_pattern_is_told() {
    let ps = policies(
        &(policy("shop", "127.0.0.1:5000/shop/**", "")
            + &policy("api", API, "  strategy: {semver: {range: \"<1.1.0\"}}\n")
                .replace("  strategy: {semver: {}}\n", "")),
    );
    let p = run(shop_tree().path(), &ps, &registry()).await;
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert!(p.changes.iter().all(|c| c.image != API), "{:?}", p.changes);
    assert!(p.changes.iter().any(|c| c.policy == "shop@shop/web"));
    let overridden: Vec<&Finding> = p
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::PatternOverridden)
        .collect();
    assert_eq!(
        overridden.len(),
        1,
        "once per pattern and image: {:?}",
        p.findings
    );
    assert_eq!(overridden[0].policy.as_deref(), Some("shop"));
    assert!(
        overridden[0].searched.contains("follows policy api"),
        "{:?}",
        overridden[0]
    );
}

#[tokio::test]
async fn two_patterns_on_one_image_are_a_problem_naming_both_unless_a_priority_decides() {
    let both = policy("shop", "127.0.0.1:5000/shop/*", "")
        + &policy("apis", "127.0.0.1:5000/shop/api*", "");
    let p = run(shop_tree().path(), &policies(&both), &registry()).await;
    let problems: Vec<String> = p.problems.iter().map(|p| p.reason.to_string()).collect();
    assert_eq!(problems.len(), 2, "one per reference: {problems:?}");
    assert!(
        problems[0].contains("shop (127.0.0.1:5000/shop/*, no priority at policies.yaml:4")
            && problems[0].contains("apis (127.0.0.1:5000/shop/api*"),
        "{problems:?}"
    );
    assert!(p.changes.iter().all(|c| c.image != API));

    let ranked = policy("shop", "127.0.0.1:5000/shop/*", "")
        + &policy("apis", "127.0.0.1:5000/shop/api*", "  priority: 10\n");
    let p = run(shop_tree().path(), &policies(&ranked), &registry()).await;
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert!(p.changes.iter().any(|c| c.policy == "apis@shop/api"));
    let outranked: Vec<&Finding> = p
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::PatternOutranked)
        .collect();
    assert_eq!(outranked.len(), 1, "{:?}", p.findings);
    assert_eq!(outranked[0].policy.as_deref(), Some("shop"));
}

#[tokio::test]
async fn a_pattern_that_matches_no_reference_is_named() {
    let ps = policies(&policy("nothing", "127.0.0.1:5000/nowhere/**", ""));
    let p = run(shop_tree().path(), &ps, &registry()).await;
    assert!(
        p.findings
            .iter()
            .any(|f| f.kind == FindingKind::ImageNotFound && f.policy.as_deref() == Some("nothing")),
        "{:?}",
        p.findings
    );
}

#[tokio::test]
async fn a_pattern_s_images_are_a_group_each_or_one_group_with_write_group_pattern() {
    use crate::change::{Stacking, group_key};
    use crate::config::repository::Grouping;
    let ps = policies(&(policy("shop", "127.0.0.1:5000/shop/*", "") + &policy("tool", OTHER, "")));
    let dir = shop_tree();
    let is_pattern = |n: &str| n == "shop";
    let keys = |grouping| {
        let ps = &ps;
        let dir = dir.path().to_path_buf();
        async move {
            let mut p = run(&dir, ps, &registry()).await;
            let groups = p
                .take_groups_by(Stacking::Alone, &|policy| {
                    group_key(grouping, policy, &is_pattern)
                })
                .unwrap();
            groups.into_iter().map(|g| g.key).collect::<Vec<_>>()
        }
    };
    assert_eq!(
        keys(Grouping::Policy).await,
        ["shop@shop/api", "shop@shop/legacy", "shop@shop/web", "tool"]
    );
    assert_eq!(keys(Grouping::Pattern).await, ["shop", "tool"]);
}
