//! Unit tests of the planner over an in-memory registry.

use super::*;
use std::path::Path;

use crate::change::{ChangeGroup, Stacking};
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
        holds: Default::default(),
        promotions: Default::default(),
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
        holds: Default::default(),
        promotions: Default::default(),
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
    // Ages are measured on the registry's clock, set here rather than read.
    let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
    let clock = crate::clock::ManualClock::starting_at(now);
    let reg = registry().with_clock(std::sync::Arc::new(clock));
    let api = Repository::parse(API).unwrap();
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

/// A kustomize entry that pins no version (only `newName` or `tagSuffix`) is never written
/// (kustomize keeps the base's tag), but it is held at its line, saying why, and the policy has
/// found its image in it.
#[tokio::test]
async fn a_kustomize_entry_that_pins_no_version_is_held_at_its_line() {
    let text = format!(
        "images:\n  - name: api\n    newName: {API}\n  - name: {API}\n    tagSuffix: -ci\n"
    );
    let dir = tree(&[("kustomization.yaml", text)]);
    let p = run(dir.path(), &policies(&semver("api", API)), &registry()).await;
    assert!(p.changes.is_empty(), "{:?}", p.changes);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
    let holds: Vec<(usize, &str)> = p
        .holds
        .iter()
        .map(|h| (h.line, h.reason.as_str()))
        .collect();
    let why = |only: &str| {
        format!(
            "the entry pins no version ({only}): kustomize keeps the base's version; add \
             `newTag:` to have it updated"
        )
    };
    assert_eq!(
        holds,
        [
            (2, why("only `newName`").as_str()),
            (4, why("only `tagSuffix`").as_str())
        ]
    );
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

// === findings: what is configured but finds nothing to act on ===

fn targeted(name: &str, image: &str, paths: &str) -> String {
    policy(
        name,
        image,
        &format!(
            "  strategy: {{semver: {{range: \"<2.0.0\"}}}}\n  targets: [{{paths: [{paths}]}}]\n"
        ),
    )
}

#[tokio::test]
async fn a_policy_whose_targets_match_no_file_is_a_problem_naming_the_paths() {
    let dir = tree(&[("apps/api.yaml", deployment(&format!("{API}:1.2.3")))]);
    // `aps/**` for `apps/**`: before, "0 problems".
    let ps = policies(&targeted("api", API, "\"aps/**\""));
    let p = run(dir.path(), &ps, &registry()).await;
    assert!(p.problems.is_empty(), "{:?}", p.problems);
    assert_eq!(p.findings.len(), 1, "{:?}", p.findings);
    let f = &p.findings[0];
    assert_eq!(f.kind, FindingKind::NoFiles);
    assert_eq!(f.severity, Severity::Problem);
    assert_eq!(f.policy.as_deref(), Some("api"));
    assert_eq!(f.image, API);
    // Issue 28: with the target's place in its policy file.
    assert_eq!(
        f.searched,
        "paths aps/** in the local directory (the target at policies.yaml:8:13)"
    );
    assert!(p.has_problems());
}

#[tokio::test]
async fn only_the_target_that_matches_nothing_is_named() {
    let dir = tree(&[("apps/api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&targeted("api", API, "\"apps/**\", \"x/**\"").replace(
        "[{paths: [\"apps/**\", \"x/**\"]}]",
        "[{paths: [\"apps/**\"]}, {paths: [\"x/**\"]}]",
    ));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.changes.len(), 1);
    assert_eq!(p.findings.len(), 1, "{:?}", p.findings);
    assert_eq!(
        p.findings[0].searched,
        "paths x/** in the local directory (the target at policies.yaml:8:35)"
    );
}

#[tokio::test]
async fn a_policy_whose_image_is_in_none_of_its_files_is_a_warning() {
    let dir = tree(&[("apps/web.yaml", deployment(&format!("{WEB}:0.9.0")))]);
    let ps =
        policies(&(targeted("api", API, "\"apps/**\"") + &targeted("web", WEB, "\"apps/**\"")));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.changes.len(), 1, "web still moves");
    assert_eq!(p.findings.len(), 1, "{:?}", p.findings);
    let f = &p.findings[0];
    assert_eq!(f.kind, FindingKind::ImageNotFound);
    assert_eq!(f.severity, Severity::Warning);
    assert_eq!(f.policy.as_deref(), Some("api"));
    assert_eq!(
        f.searched,
        "paths apps/** in the local directory (the target at policies.yaml:8:13)"
    );
    assert!(!p.has_problems(), "a warning is not a problem");
}

#[tokio::test]
async fn policies_contesting_a_field_have_found_their_image() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&(semver("first", API) + &semver("second", API)));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.problems.len(), 1);
    assert!(p.findings.is_empty(), "{:?}", p.findings);
}

#[tokio::test]
async fn a_repository_target_is_named_with_its_repository() {
    let dir = tree(&[("apps/api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let ps = policies(&policy(
        "api",
        API,
        "  strategy: {semver: {}}\n  targets: [{repository: manifests, paths: [\"aps/**\"]}]\n",
    ));
    let files = crate::files::Directory::open(dir.path()).unwrap();
    let (p, _) = plan_files(&files, "manifests", &ps, &registry(), &())
        .await
        .unwrap();
    assert_eq!(p.findings.len(), 1, "{:?}", p.findings);
    assert_eq!(p.findings[0].repository.as_deref(), Some("manifests"));
    assert_eq!(
        p.findings[0].searched,
        "paths aps/** in repository manifests (the target at policies.yaml:8:13)"
    );
    // The local directory is not this policy's: nothing to say there.
    assert!(run(dir.path(), &ps, &registry()).await.findings.is_empty());
}

#[test]
fn survey_finds_what_a_plan_would_without_a_registry() {
    let dir = tree(&[
        ("apps/api.yaml", deployment(&format!("{API}:1.2.3"))),
        (
            "apps/values.yaml",
            "tag: 1.0.0 # tagpilot: nobody:tag\n".to_string(),
        ),
    ]);
    let ps = policies(&(targeted("api", API, "\"aps/**\"") + &targeted("web", WEB, "\"apps/**\"")));
    let p = survey(&Scope::local(dir.path()), &ps).unwrap();
    let kinds: Vec<FindingKind> = p.findings.iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [FindingKind::NoFiles, FindingKind::ImageNotFound]);
    assert_eq!(p.problems.len(), 1, "{:?}", p.problems);
    assert_eq!(p.problems[0].file.as_deref(), Some("apps/values.yaml"));
    assert!(p.changes.is_empty());
}

// === markers that resolve to nothing ===

async fn marker_problems(file: &str, ps: &[ImagePolicy]) -> Vec<Problem> {
    let dir = tree(&[("values.yaml", file.to_string())]);
    run(dir.path(), ps, &registry()).await.problems
}

#[tokio::test]
async fn a_marker_naming_a_policy_of_another_namespace_says_which_there_is() {
    let ps = policies(
        &policy("app", API, "  strategy: {semver: {}}\n")
            .replace("  name: app\n", "  name: app\n  namespace: apps\n"),
    );
    let problems = marker_problems(
        "image: 127.0.0.1:5000/shop/api:1.2.3 # {\"$imagepolicy\": \"flux-system:app\"}\n",
        &ps,
    )
    .await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].line, Some(1));
    assert!(
        problems[0]
            .message
            .contains("\"flux-system:app\", which is not defined; found apps:app"),
        "{}",
        problems[0].message
    );
}

#[tokio::test]
async fn a_marker_with_a_typo_in_the_policy_name_gets_the_near_names() {
    let ps = policies(&semver("checkout-api", API));
    let problems = marker_problems("tag: 1.2.3 # tagpilot: checkout-apl:tag\n", &ps).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].message.ends_with("found checkout-api"),
        "{}",
        problems[0].message
    );
}

#[tokio::test]
async fn a_marker_naming_a_policy_whose_targets_skip_the_file_is_a_problem() {
    let ps = policies(&(targeted("api", API, "\"apps/**\"") + &semver("web", WEB)));
    let problems = marker_problems("tag: 1.2.3 # tagpilot: api:tag\n", &ps).await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].file.as_deref(), Some("values.yaml"));
    assert!(
        problems[0]
            .message
            .contains("whose targets do not cover this file"),
        "{}",
        problems[0].message
    );
}

#[tokio::test]
async fn markers_that_resolve_to_nothing_name_line_and_reason() {
    let ps = policies(&semver("api", API));
    let cases = [
        // A placeholder a CI step fills in: nothing tagpilot can write over.
        ("tag: ${TAG} # tagpilot: api:tag\n", 1, "is not a tag"),
        (
            "image: TBD # {\"$imagepolicy\": \"api\"}\n",
            1,
            "not an image reference",
        ),
        // On a key whose value is a mapping: no scalar for the marker.
        (
            "image: # tagpilot: api\n  repository: x\n",
            1,
            "follows no value",
        ),
        // On a YAML alias: the value is the anchor's, elsewhere.
        (
            "base: &tag 1.2.3\ntag: *tag # tagpilot: api:tag\n",
            2,
            "follows no value",
        ),
        // On a line of its own.
        ("a: 1\n# tagpilot: api:tag\nb: 2\n", 2, "follows no value"),
        // Not readable as a marker.
        (
            "tag: 1.2.3 # tagpilot: a:b:c:d\n",
            1,
            "cannot be read as a marker",
        ),
    ];
    for (yaml, line, why) in cases {
        let problems = marker_problems(yaml, &ps).await;
        assert_eq!(problems.len(), 1, "{yaml}: {problems:?}");
        assert_eq!(problems[0].line, Some(line), "{yaml}");
        assert_eq!(problems[0].file.as_deref(), Some("values.yaml"));
        assert!(
            problems[0].message.contains("resolves to nothing")
                && problems[0].message.contains(why),
            "{yaml}: {}",
            problems[0].message
        );
    }
}

#[test]
fn edit_distance_counts_single_character_edits() {
    assert_eq!(super::walk::edit_distance("kitten", "sitting"), 3);
    assert_eq!(super::walk::edit_distance("api", "api"), 0);
    assert_eq!(super::walk::edit_distance("", "ab"), 2);
}

/// A file nested deeper than the YAML reader allows is skipped as too deep, named with the
/// limit, and the other files are planned as usual (issue 17: every skip has its reason).
#[tokio::test]
async fn a_file_nested_too_deep_is_skipped_as_too_deep_and_the_rest_is_planned() {
    let deep = format!("a: {}{}\n", "[".repeat(10_000), "]".repeat(10_000));
    let dir = tree(&[
        ("deep.yaml", deep),
        ("api.yaml", deployment(&format!("{API}:1.2.3"))),
        ("broken.yaml", "a: [unclosed\n".to_string()),
    ]);
    let p = run(dir.path(), &policies(&semver("api", API)), &registry()).await;
    assert_eq!(p.changes.len(), 1, "{:?}", p.changes);
    let skipped: Vec<(&str, SkipKind)> = p
        .skipped
        .iter()
        .map(|s| (s.file.as_str(), s.kind))
        .collect();
    assert_eq!(
        skipped,
        [
            ("broken.yaml", SkipKind::InvalidYaml),
            ("deep.yaml", SkipKind::TooDeep)
        ]
    );
    let reason = &p.skipped[1].reason;
    assert!(reason.contains("nested deeper than 255 levels"), "{reason}");
}

/// A file past [`MAX_MANIFEST_BYTES`] is skipped as too large before it is read (a sparse file
/// here: nothing of it is ever allocated), and the rest is planned.
#[tokio::test]
async fn a_file_larger_than_a_manifest_may_be_is_skipped_unread() {
    let dir = tree(&[("api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let big = std::fs::File::create(dir.path().join("huge.yaml")).unwrap();
    big.set_len(MAX_MANIFEST_BYTES + 1).unwrap();
    let p = run(dir.path(), &policies(&semver("api", API)), &registry()).await;
    assert_eq!(p.changes.len(), 1, "{:?}", p.changes);
    let skipped: Vec<(&str, SkipKind, &str)> = p
        .skipped
        .iter()
        .map(|s| (s.file.as_str(), s.kind, s.reason.as_str()))
        .collect();
    assert_eq!(
        skipped,
        [(
            "huge.yaml",
            SkipKind::TooLarge,
            "65 MiB, more than the 64 MiB a manifest may be; left alone"
        )]
    );
}

/// The groups a writer takes: cumulative groups end on the planned text, groups alone carry
/// only their policy's edits, and either way the plan keeps no texts of its own afterwards.
#[tokio::test]
async fn take_groups_split_per_policy_and_leave_the_plan_no_texts() {
    let both = format!(
        "{}---\n{}",
        deployment(&format!("{API}:1.2.3")),
        deployment(&format!("{WEB}:0.9.0"))
    );
    let dir = tree(&[("both.yaml", both.clone())]);
    let ps = policies(&(semver("api", API) + &semver("web", WEB)));
    let planned = run(dir.path(), &ps, &registry()).await;
    let updated = planned.files[0].updated.clone();
    let api_only = both.replace("api:1.2.3", "api:1.3.0");
    let web_only = both.replace("web:0.9.0", "web:1.0.0");
    assert_eq!(updated, api_only.replace("web:0.9.0", "web:1.0.0"));

    let contents = |groups: &[ChangeGroup]| -> Vec<(String, String)> {
        groups
            .iter()
            .map(|g| (g.key.clone(), g.files[Path::new("both.yaml")].clone()))
            .collect()
    };
    let mut cumulative = planned.clone();
    let groups = cumulative.take_groups(Stacking::Stacked).unwrap();
    assert_eq!(
        contents(&groups),
        [("api".into(), api_only.clone()), ("web".into(), updated)]
    );
    assert!(cumulative.files.is_empty());
    assert_eq!(cumulative.changes, planned.changes);

    let mut alone = planned.clone();
    let groups = alone.take_groups(Stacking::Alone).unwrap();
    assert_eq!(
        contents(&groups),
        [("api".into(), api_only), ("web".into(), web_only)]
    );
    assert!(alone.files.is_empty());
}

/// Issue 28: a file a policy's targets name that cannot be read was only listed among the
/// skipped files. It is named against each policy whose targets name it, with where reading
/// stopped; a policy without targets (every file) is not told of every broken file.
#[tokio::test]
async fn a_file_the_targets_name_that_cannot_be_read_is_named_against_the_policy() {
    let dir = tree(&[
        ("apps/api.yaml", deployment(&format!("{API}:1.2.3"))),
        (
            "apps/values.yaml",
            "image:\n  tag: {{ .Values.tag }\n".to_string(),
        ),
    ]);
    let ps = policies(&(targeted("api", API, "\"apps/**\"") + &semver("web", WEB)));
    let p = run(dir.path(), &ps, &registry()).await;
    assert_eq!(p.skipped.len(), 1, "{:?}", p.skipped);
    let unreadable: Vec<&Finding> = p
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::UnreadableFile)
        .collect();
    assert_eq!(unreadable.len(), 1, "{:?}", p.findings);
    assert_eq!(unreadable[0].policy.as_deref(), Some("api"));
    assert_eq!(unreadable[0].severity, Severity::Warning);
    assert!(
        unreadable[0]
            .searched
            .starts_with("apps/values.yaml:2:8: not valid YAML"),
        "{}",
        unreadable[0].searched
    );
}

/// The spans a plan opens, each as `name field=value …`.
#[derive(Clone, Default)]
struct Spans(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spans {
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        _: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut line = attrs.metadata().name().to_string();
        attrs.record(
            &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                line.push_str(&format!(" {}={value:?}", field.name()));
            },
        );
        self.0.lock().unwrap().push(line);
    }
}

/// What a repository's plan logs carries where it came from: the repository on the plan's
/// span, the policy and image on each decision's and on each candidate list's.
#[tokio::test]
async fn a_repository_s_plan_carries_repository_policy_and_image_spans() {
    use tracing_subscriber::layer::SubscriberExt;
    let dir = tree(&[("apps/api.yaml", deployment(&format!("{API}:1.2.3")))]);
    let policies = policies(&policy(
        "api",
        API,
        "  strategy:\n    semver: {range: \"<2.0.0\"}\n  targets:\n    - repository: manifests\n",
    ));
    let files = crate::files::Directory::open(dir.path()).unwrap();
    crate::testing::listen_to_every_callsite();
    let spans = Spans::default();
    let _logging =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let (plan, _) = plan_files(&files, "manifests", &policies, &registry(), &())
        .await
        .unwrap();
    assert_eq!(plan.changes.len(), 1, "{plan:#?}");
    let wanted = [
        "plan_files_promoted repository=manifests policies=1".to_string(),
        format!("candidates policy=api image={API}"),
        format!("decide_reference policy=api image={API}"),
    ];
    let spans = spans.0.lock().unwrap().clone();
    for want in &wanted {
        assert!(spans.contains(want), "{want} missing: {spans:#?}");
    }
}
