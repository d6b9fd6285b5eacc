//! Unit tests of the planner over an in-memory registry.

use super::*;
use std::path::Path;

use crate::image::Repository;
use crate::policy::ImagePolicy;
use crate::registry::{ImageInfo, MemoryRegistry, Registry};

const API: &str = "127.0.0.1:5000/shop/api";
const WEB: &str = "127.0.0.1:5000/shop/web";

fn policies(yaml: &str) -> Vec<ImagePolicy> {
    crate::policy::parse_file(Path::new("policies.yaml"), yaml).expect("valid policies")
}

fn policy(name: &str, image: &str, extra: &str) -> String {
    format!(
        "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {image}\n{extra}---\n"
    )
}

fn semver(name: &str, image: &str) -> String {
    policy(
        name,
        image,
        "  strategy:\n    semver: {range: \"<2.0.0\"}\n",
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
    reg.add_tags(
        &Repository::parse(API).unwrap(),
        &["1.2.3", "1.3.0", "2.0.0"],
    );
    reg.add_tags(&Repository::parse(WEB).unwrap(), &["0.9.0", "1.0.0"]);
    reg
}

async fn run(dir: &Path, policies: &[ImagePolicy], reg: &MemoryRegistry) -> Plan {
    plan(&Scope::local(dir), policies, reg, &()).await.unwrap()
}

#[tokio::test]
async fn lists_each_repository_once_however_many_files_and_policies_name_it() {
    let dir = tree(&[
        ("a/one.yaml", deployment(&format!("{API}:1.2.3"))),
        ("a/two.yaml", deployment(&format!("{API}:1.2.3"))),
        ("b/three.yaml", deployment(&format!("{API}:1.2.3"))),
        ("b/web.yaml", deployment(&format!("{WEB}:0.9.0"))),
    ]);
    let a = policy(
        "api-a",
        API,
        "  strategy: {semver: {}}\n  targets: [{paths: [\"a/**\"]}]\n",
    );
    let b = policy(
        "api-b",
        API,
        "  strategy: {semver: {}}\n  targets: [{paths: [\"b/**\"]}]\n",
    );
    let ps = policies(&(a + &b + &semver("web", WEB)));
    let reg = registry();
    let p = run(dir.path(), &ps, &reg).await;
    assert_eq!(p.changes.len(), 4, "{:?}", p.changes);
    assert_eq!(reg.tag_list_calls(), 2);
    assert_eq!(reg.inspect_calls(), 0, "semver needs no image metadata");
    assert!(p.problems.is_empty(), "{:?}", p.problems);
}

#[tokio::test]
async fn a_failing_repository_does_not_stop_other_policies() {
    let dir = tree(&[
        ("api.yaml", deployment(&format!("{API}:1.2.3"))),
        ("gone.yaml", deployment("127.0.0.1:5000/shop/gone:1.0.0")),
    ]);
    let ps = policies(&(semver("api", API) + &semver("gone", "127.0.0.1:5000/shop/gone")));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.changes[0].policy, "api");
    assert_eq!(p.problems.len(), 1);
    let problem = &p.problems[0];
    assert_eq!(problem.policy.as_deref(), Some("gone"));
    assert!(problem.message.contains("shop/gone"), "{}", problem.message);
}

#[tokio::test]
async fn two_policies_claiming_one_reference_leave_it_alone_with_a_problem() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&(semver("first", API) + &semver("second", API)));
    let p = run(dir.path(), &ps, &registry()).await;
    assert!(p.changes.is_empty());
    assert_eq!(p.problems.len(), 1);
    let message = &p.problems[0].message;
    assert!(
        message.contains("first") && message.contains("second"),
        "{message}"
    );
    assert_eq!(p.problems[0].file.as_deref(), Some("api.yaml"));
}

#[tokio::test]
async fn a_marker_naming_an_undefined_policy_is_reported_with_its_line() {
    let dir = tree(&[(
        "values.yaml",
        "version: 1.2.3 # tagpilot: nobody:tag\n".to_string(),
    )]);
    let ps = policies(&semver("api", API));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
    assert_eq!(p.problems[0].line, Some(1));
    assert!(p.problems[0].message.contains("nobody"));
}

#[tokio::test]
async fn pin_digest_writes_tag_and_digest_and_is_stable() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&policy(
        "api",
        API,
        "  strategy: {semver: {range: \"<2\"}}\n  pinDigest: true\n",
    ));
    let reg = registry();
    let p = run(dir.path(), &ps, &reg).await;
    let want = reg
        .digest(&Repository::parse(API).unwrap(), "1.3.0")
        .await
        .unwrap();
    assert_eq!(p.changes[0].to, format!("1.3.0@{want}"));
    assert!(p.files[0].updated.contains(&format!("{API}:1.3.0@{want}")));
    crate::apply::write_files(dir.path(), &p.files).unwrap();
    assert!(!run(dir.path(), &ps, &reg).await.has_changes());
}

#[tokio::test]
async fn digest_strategy_follows_a_mutable_tag() {
    let repo = Repository::parse(API).unwrap();
    let reg = MemoryRegistry::new();
    let info = |d: char| ImageInfo {
        digest: format!("sha256:{}", d.to_string().repeat(64)),
        created: None,
        platforms: vec![],
        source: Default::default(),
    };
    reg.add(&repo, "stable", info('a'));
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:stable")))]);
    let ps = policies(&policy("api", API, "  strategy: {digest: {tag: stable}}\n"));
    let p = run(dir.path(), &ps, &reg).await;
    assert_eq!(p.changes[0].to, format!("stable@sha256:{}", "a".repeat(64)));
    crate::apply::write_files(dir.path(), &p.files).unwrap();
    // The tag is pushed again with new content: the pin moves.
    reg.add(&repo, "stable", info('b'));
    let p = run(dir.path(), &ps, &reg).await;
    assert_eq!(p.changes.len(), 1);
    assert_eq!(
        p.changes[0].from,
        format!("stable@sha256:{}", "a".repeat(64))
    );
    assert_eq!(p.changes[0].to, format!("stable@sha256:{}", "b".repeat(64)));
}

#[tokio::test]
async fn newest_build_ranks_by_build_time_not_by_name() {
    let repo = Repository::parse(API).unwrap();
    let reg = MemoryRegistry::new();
    for (tag, day) in [("zeta", "01"), ("alpha", "03"), ("mid", "02")] {
        let created = format!("2024-01-{day}T00:00:00Z").parse().ok();
        let digest = format!("sha256:{}", day.repeat(32));
        reg.add(
            &repo,
            tag,
            ImageInfo {
                digest,
                created,
                platforms: vec![],
                source: Default::default(),
            },
        );
    }
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:zeta")))]);
    let ps = policies(&policy("api", API, "  strategy: {newestBuild: {}}\n"));
    let p = run(dir.path(), &ps, &reg).await;
    assert_eq!(p.changes[0].to, "alpha");
    assert_eq!(reg.inspect_calls(), 3, "one inspection per tag");
}

#[tokio::test]
async fn a_reference_pinned_above_the_range_is_held_with_the_reason() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:2.0.0")))]);
    let ps = policies(&semver("api", API));
    let p = run(dir.path(), &ps, &registry()).await;
    assert!(p.changes.is_empty());
    assert_eq!(p.holds.len(), 1, "{:?}", p.holds);
    assert_eq!(p.holds[0].current, "2.0.0");
    assert!(!p.holds[0].reason.is_empty());
}

#[tokio::test]
async fn targets_naming_a_repository_do_not_touch_the_local_directory() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let remote = policy(
        "remote",
        API,
        "  strategy: {semver: {}}\n  targets: [{repository: manifests}]\n",
    );
    let ps = policies(&remote);
    let reg = registry();
    assert!(!run(dir.path(), &ps, &reg).await.has_changes());
    let scope = Scope {
        root: dir.path().to_path_buf(),
        repository: Some("manifests".into()),
        exclude: vec![],
    };
    let p = plan(&scope, &ps, &reg, &()).await.unwrap();
    assert_eq!(p.changes.len(), 1);
}

#[tokio::test]
async fn tagpilot_own_files_are_not_scanned() {
    // A policy file is YAML with an `image:` key; it must never be rewritten.
    let text = semver("api", API);
    let dir = tree(&[
        ("policies/api.yaml", text.clone()),
        ("api.yaml", deployment(&format!("{API}:1.2.3"))),
    ]);
    let ps = crate::policy::parse_file(&dir.path().join("policies/api.yaml"), &text).unwrap();
    let scope = Scope {
        root: dir.path().to_path_buf(),
        repository: None,
        exclude: vec![dir.path().join("policies/api.yaml")],
    };
    let p = plan(&scope, &ps, &registry(), &()).await.unwrap();
    assert_eq!(p.files.len(), 1);
    assert_eq!(p.files[0].path, Path::new("api.yaml"));
}

#[tokio::test]
async fn min_age_reads_first_seen_times_from_the_registry_and_holds_young_tags() {
    let dir = tree(&[("a.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&policy(
        "api",
        API,
        "  strategy:\n    semver: {range: \"<2.0.0\"}\n  minAge: 30m\n",
    ));
    let reg = registry();
    let api = Repository::parse(API).unwrap();
    let now = jiff::Timestamp::now();
    reg.set_first_seen(&api, "1.2.3", now - jiff::SignedDuration::from_hours(48));
    reg.set_first_seen(&api, "1.3.0", now - jiff::SignedDuration::from_mins(12));
    let p = run(dir.path(), &ps, &reg).await;
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    assert_eq!(p.holds.len(), 1, "{:?}", p.holds);
    assert!(
        p.holds[0].reason.starts_with("newer tag 1.3.0 is 12m")
            && p.holds[0].reason.ends_with("old, minAge 30m"),
        "{}",
        p.holds[0].reason
    );

    reg.set_first_seen(&api, "1.3.0", now - jiff::SignedDuration::from_mins(31));
    let p = run(dir.path(), &ps, &reg).await;
    assert_eq!(p.changes.len(), 1, "{:?}", p.holds);
    assert_eq!(p.changes[0].to, "1.3.0");
}

/// kustomize reads `kustomization.yaml`, `kustomization.yml` and `Kustomization`
/// (`konfig.RecognizedKustomizationFileNames`); a Flux marker in a `Kustomization` without
/// extension is planned like one in `kustomization.yaml` (issue 17).
#[tokio::test]
async fn a_marker_in_a_kustomization_file_without_extension_is_planned() {
    let text = format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n  - name: api\n    newName: {API}\n    newTag: 1.2.3 # {{\"$imagepolicy\": \"flux-system:api:tag\"}}\n"
    );
    let dir = tree(&[("overlays/prod/Kustomization", text)]);
    let mut yaml = semver("api", API);
    yaml = yaml.replace("  name: api\n", "  name: api\n  namespace: flux-system\n");
    let p = run(dir.path(), &policies(&yaml), &registry()).await;
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    let files: Vec<(&str, &str, &str)> = p
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.from.as_str(), c.to.as_str()))
        .collect();
    assert_eq!(files, [("overlays/prod/Kustomization", "1.2.3", "1.3.0")]);
}

/// A `:digest` marker holds a bare digest, which Flux's image-automation-controller writes
/// whole and replaces whatever it holds: its setters test starts from `newDigest:
/// sha256:1234567890abcdef # {"$imagepolicy": "automation-ns:policy-with-digest:digest"}` and
/// expects the policy's digest there (internal/update/testdata/setters, original and expected
/// kustomization.yml).
#[tokio::test]
async fn a_digest_marker_on_a_bare_digest_gets_the_new_digest() {
    let repo = Repository::parse(API).unwrap();
    let reg = MemoryRegistry::new();
    let new = format!("sha256:{}", "b".repeat(64));
    reg.add(
        &repo,
        "1.3.0",
        ImageInfo {
            digest: new.clone(),
            created: None,
            platforms: vec![],
            source: Default::default(),
        },
    );
    reg.add_tags(&repo, &["1.2.3"]);
    let marker = r#"# {"$imagepolicy": "automation-ns:policy-with-digest:digest"}"#;
    let ps = policies(
        &policy(
            "policy-with-digest",
            API,
            "  strategy:\n    semver: {range: \"<2.0.0\"}\n",
        )
        .replace(
            "  name: policy-with-digest\n",
            "  name: policy-with-digest\n  namespace: automation-ns\n",
        ),
    );
    for current in [
        format!("sha256:{}", "a".repeat(64)),
        "sha256:1234567890abcdef".into(),
    ] {
        let text = format!(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nimages:\n  - name: container\n    newName: {API}\n    newDigest: {current} {marker}\n"
        );
        let dir = tree(&[("kustomization.yml", text.clone())]);
        let p = run(dir.path(), &ps, &reg).await;
        assert!(p.problems.is_empty(), "{current}: {:?}", p.problems);
        assert_eq!(p.changes.len(), 1, "{current}: {p:?}");
        assert!(p.changes[0].to.ends_with(&new), "{}", p.changes[0].to);
        crate::apply::write_files(dir.path(), &p.files).unwrap();
        let written = std::fs::read_to_string(dir.path().join("kustomization.yml")).unwrap();
        assert_eq!(written, text.replace(&current, &new));
    }
}

/// An untagged reference is the `latest` a runtime pulls: held under semver, as an explicit
/// `latest` is, unless the policy replaces unreadable tags (issue 17).
#[tokio::test]
async fn an_untagged_reference_is_an_implicit_latest() {
    let dir = tree(&[
        ("untagged.yaml", deployment(API)),
        ("latest.yaml", deployment(&format!("{API}:latest"))),
    ]);
    let p = run(dir.path(), &policies(&semver("api", API)), &registry()).await;
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    let holds: Vec<(&str, &str)> = p
        .holds
        .iter()
        .map(|h| (h.file.as_str(), h.reason.as_str()))
        .collect();
    assert_eq!(holds.len(), 2, "{holds:?}");
    let explicit = holds.iter().find(|h| h.0 == "latest.yaml").unwrap().1;
    let implicit = holds.iter().find(|h| h.0 == "untagged.yaml").unwrap().1;
    assert_eq!(
        implicit,
        format!("the reference has no tag, which is an implicit \"latest\": {explicit}")
    );
    let replacing =
        semver("api", API).replace("  strategy:", "  replaceUnreadableTags: true\n  strategy:");
    let p = run(dir.path(), &policies(&replacing), &registry()).await;
    let mut moves: Vec<(&str, &str, &str)> = p
        .changes
        .iter()
        .map(|c| (c.file.as_str(), c.from.as_str(), c.to.as_str()))
        .collect();
    moves.sort();
    assert_eq!(
        moves,
        [
            ("latest.yaml", "latest", "1.3.0"),
            ("untagged.yaml", "(none)", "1.3.0")
        ]
    );
}
