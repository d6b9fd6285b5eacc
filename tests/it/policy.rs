//! Loading `tagpilot.yaml` and policy files from disk: every bad input names the file and the
//! `line:column`, every problem of every file is reported in one run, and the shipped examples in
//! `policies/` validate.

use std::path::{Path, PathBuf};

use tagpilot::config;
use tagpilot::policy::{self, PolicyError, Strategy};

const HEADER: &str = "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\n";

/// A temp directory with `tagpilot.yaml` pointing at `policies/` and the given policy files.
fn repo(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("policies")).unwrap();
    let config = dir.path().join("tagpilot.yaml");
    std::fs::write(&config, "policies: policies/\n").unwrap();
    for (name, text) in files {
        let path = dir.path().join("policies").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    (dir, config)
}

fn errors(files: &[(&str, &str)]) -> Vec<String> {
    let (_dir, config_path) = repo(files);
    let config = config::load(&config_path).unwrap();
    let errs = policy::load(&config).expect_err("policies should be rejected");
    errs.0.iter().map(|e| e.to_string()).collect()
}

/// Asserts exactly one error, naming `file` at `line:column` and containing `needle`.
fn assert_one(files: &[(&str, &str)], file: &str, line_col: &str, needle: &str) {
    let errs = errors(files);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let expected = format!("{}:{line_col}", Path::new("policies").join(file).display());
    assert!(
        errs[0].contains(&expected),
        "no {expected:?} in:\n{}",
        errs[0]
    );
    assert!(errs[0].contains(needle), "no {needle:?} in:\n{}", errs[0]);
}

fn doc(name: &str, strategy: &str) -> String {
    format!(
        "{HEADER}metadata:\n  name: {name}\nspec:\n  image: ghcr.io/acme/{name}\n  strategy:\n{strategy}"
    )
}

#[test]
fn malformed_yaml_names_file_and_position() {
    let text = format!("{HEADER}metadata:\n  name: app\nspec: [unclosed\n");
    assert_one(&[("bad.yaml", &text)], "bad.yaml", "5:", "");
}

#[test]
fn unknown_key_names_file_position_and_key() {
    let text = doc("app", "    semver: {}\n").replace("  image:", "  imagee: x\n  image:");
    assert_one(&[("unknown.yaml", &text)], "unknown.yaml", "6:3", "imagee");
}

#[test]
fn missing_strategy() {
    let text = doc("app", "    {}\n").replace("  strategy:\n    {}", "  strategy: {}");
    assert_one(
        &[("none.yaml", &text)],
        "none.yaml",
        "7:",
        "names no strategy",
    );
}

#[test]
fn two_strategies() {
    let text = doc("app", "    semver: {}\n    newestBuild: {}\n");
    assert_one(
        &[("two.yaml", &text)],
        "two.yaml",
        "8:",
        "sets semver and newestBuild",
    );
}

#[test]
fn invalid_regex_points_at_the_pattern() {
    let text = doc(
        "app",
        "    regex:\n      pattern: '^main-(?P<ts>\\d+$'\n      sortBy: ts\n",
    );
    assert_one(
        &[("regex.yaml", &text)],
        "regex.yaml",
        "9:16",
        "policy \"app\": regex.pattern: invalid regex",
    );
}

/// Regression (issue 12): the pattern was echoed with `{:?}`, doubling every backslash, so the
/// message showed a pattern the user never wrote.
#[test]
fn an_invalid_regex_is_shown_as_written() {
    let text = doc(
        "app",
        "    regex:\n      pattern: '^main-(?P<ts>\\d+$'\n      sortBy: ts\n",
    );
    let errs = errors(&[("regex.yaml", &text)]);
    assert!(
        errs[0].contains(r#"invalid regex "^main-(?P<ts>\d+$""#),
        "{}",
        errs[0]
    );
    let allow =
        doc("app", "    semver: {}\n").replace("  strategy:", "  allowTags: '\\d+('\n  strategy:");
    let errs = errors(&[("allow.yaml", &allow)]);
    assert!(
        errs[0].contains(r#"allowTags: invalid regex "\d+(""#),
        "{}",
        errs[0]
    );
    let adhoc = Strategy::regex(r"^(\d+", None, Some(policy::RegexOrder::Numerical)).unwrap_err();
    assert!(
        adhoc.to_string().starts_with(r#"invalid regex "^(\d+": "#),
        "{adhoc}"
    );
}

/// Regression (issue 12): one broken policy file stopped the whole plan. `load_all` keeps every
/// valid policy and returns the problems of the others, each with its place.
#[test]
fn load_all_keeps_the_valid_policies_and_reports_the_broken_ones() {
    let broken = doc("broken", "    semver: {range: '>=1.0, <<2'}\n");
    let unknown_repo = format!(
        "{}  targets:\n    - repository: elsewhere\n",
        doc("elsewhere", "    semver: {}\n")
    );
    let (_dir, config_path) = repo(&[
        ("a-good.yaml", &doc("good", "    semver: {}\n")),
        ("b-broken.yaml", &broken),
        ("c-twice.yaml", &doc("twice", "    semver: {}\n")),
        ("d-twice.yaml", &doc("twice", "    newestBuild:\n")),
        (
            "e-syntax.yaml",
            &format!("{HEADER}metadata:\n  name: bad\nspec: [unclosed\n"),
        ),
        ("f-repo.yaml", &unknown_repo),
        ("g-also-good.yaml", &doc("also-good", "    newestBuild:\n")),
    ]);
    let config = config::load(&config_path).unwrap();
    assert!(policy::load(&config).is_err(), "load stays all or nothing");

    let loaded = policy::load_all(&config);
    assert_eq!(
        loaded
            .policies
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>(),
        ["good", "also-good"],
        "a duplicated name is ambiguous, so neither definition is kept"
    );
    let errs: Vec<String> = loaded.errors.iter().map(|e| e.to_string()).collect();
    assert_eq!(errs.len(), 4, "{errs:#?}");
    let at = |file: &str, line_col: &str| {
        let place = format!("{}:{line_col}", Path::new("policies").join(file).display());
        assert!(
            errs.iter().any(|e| e.contains(&place)),
            "no {place:?} in {errs:#?}"
        );
    };
    at("b-broken.yaml", "8:21");
    at("d-twice.yaml", "4:");
    at("e-syntax.yaml", "5:");
    at("f-repo.yaml", "4:");
}

#[test]
fn sort_by_naming_a_missing_group() {
    let text = doc(
        "app",
        "    regex:\n      pattern: '^main-(?P<sha>\\w+)$'\n      sortBy: ts\n",
    );
    assert_one(
        &[("group.yaml", &text)],
        "group.yaml",
        "10:15",
        "sortBy names group \"ts\"",
    );
}

#[test]
fn invalid_range_points_at_the_range() {
    let text = doc("app", "    semver:\n      range: '>=1.2, <<2'\n");
    assert_one(
        &[("range.yaml", &text)],
        "range.yaml",
        "9:14",
        "semver.range: invalid version constraint \">=1.2, <<2\"",
    );
}

#[test]
fn min_age_is_a_duration_and_not_for_the_digest_strategy() {
    let text = doc("app", "    semver: {}\n  minAge: soon\n");
    assert_one(
        &[("age.yaml", &text)],
        "age.yaml",
        "9:11",
        "minAge: \"soon\" is not a duration",
    );
    let text = doc("app", "    digest: {tag: latest}\n  minAge: 30m\n");
    assert_one(
        &[("digest.yaml", &text)],
        "digest.yaml",
        "9:11",
        "the digest strategy follows one tag",
    );
    let (_dir, config_path) =
        repo(&[("ok.yaml", &doc("app", "    semver: {}\n  minAge: 1h 30m\n"))]);
    let config = config::load(&config_path).unwrap();
    let policies = policy::load(&config).unwrap();
    assert_eq!(
        policies[0].min_age,
        Some(std::time::Duration::from_secs(90 * 60))
    );
}

#[test]
fn invalid_glob_platform_and_image() {
    let text = doc(
        "app",
        "    semver: {}\n  ignoreTags: ['[unclosed']\n  platforms: [linux]\n",
    )
    .replace("ghcr.io/acme/app", "ghcr.io/Acme/app");
    let errs = errors(&[("many.yaml", &text)]);
    assert_eq!(errs.len(), 3, "{errs:#?}");
    assert!(
        errs[0].contains("many.yaml:6:10") && errs[0].contains("spec.image"),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("many.yaml:9:16") && errs[1].contains("ignoreTags"),
        "{}",
        errs[1]
    );
    assert!(
        errs[2].contains("many.yaml:10:15") && errs[2].contains("platforms"),
        "{}",
        errs[2]
    );
}

/// A required platform with too many parts is an error at its `file:line`, never a platform
/// dropped (which would widen what the policy takes).
#[test]
fn a_platform_that_cannot_be_read_is_an_error_at_its_line() {
    let text = doc(
        "app",
        "    semver: {}\n  platforms: [linux/amd64, linux/arm64/v8/x]\n",
    );
    let errs = errors(&[("arm.yaml", &text)]);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    assert!(
        errs[0].contains("arm.yaml:9:28")
            && errs[0].contains("platforms")
            && errs[0].contains("linux/arm64/v8/x"),
        "{}",
        errs[0]
    );
}

#[test]
fn duplicate_name_across_two_files_names_both() {
    let a = doc("checkout", "    semver: {}\n");
    let errs = errors(&[("a.yaml", &a), ("team/b.yaml", &a)]);
    assert_eq!(errs.len(), 1, "{errs:#?}");
    let b_at = format!("{}:4:9", Path::new("policies/team/b.yaml").display());
    let a_at = format!("{}:4:9", Path::new("policies/a.yaml").display());
    assert!(
        errs[0].contains(&b_at) && errs[0].contains(&a_at),
        "{}",
        errs[0]
    );
    assert!(
        errs[0].contains("\"checkout\" is defined twice"),
        "{}",
        errs[0]
    );
}

#[test]
fn every_problem_of_every_file_is_reported() {
    let good = doc("fine", "    semver: {}\n");
    let two_docs = format!(
        "{}---\n{}",
        doc("one", "    semver: {range: '^^1'}\n"),
        doc("two", "    digest: {tag: stable}\n    alphabetical: {}\n")
    );
    let errs = errors(&[
        ("a-good.yaml", &good),
        ("b-two-docs.yml", &two_docs),
        ("c-syntax.yaml", "apiVersion: [\n"),
        (
            "d-unknown.yaml",
            &doc("three", "    semver: {range: '1.x', prerelase: true}\n"),
        ),
        ("notes.txt", "not a policy"),
    ]);
    assert_eq!(errs.len(), 4, "{errs:#?}");
    assert!(
        errs[0].contains("b-two-docs.yml:8:") && errs[0].contains("\"one\""),
        "{}",
        errs[0]
    );
    assert!(
        errs[1].contains("b-two-docs.yml:17:") && errs[1].contains("digest and alphabetical"),
        "{}",
        errs[1]
    );
    assert!(errs[2].contains("c-syntax.yaml:"), "{}", errs[2]);
    assert!(
        errs[3].contains("d-unknown.yaml:8:28: policy \"three\": unknown field `prerelase`"),
        "{}",
        errs[3]
    );
}

#[test]
fn check_summarises_per_file() {
    let two = format!(
        "{}---\n{}",
        doc("one", "    newestBuild: {}\n"),
        doc("two", "    digest: {tag: stable}\n")
    );
    let (_dir, config_path) = repo(&[
        ("a.yaml", &doc("zero", "    semver:\n")),
        ("b/c.yaml", &two),
    ]);
    let config = config::load(&config_path).unwrap();
    let summary = policy::check(&config).unwrap();
    assert_eq!(summary.policy_count(), 3);
    let per_file: Vec<(String, Vec<String>)> = summary
        .files
        .iter()
        .map(|f| {
            (
                f.path.file_name().unwrap().to_string_lossy().into_owned(),
                f.policies.clone(),
            )
        })
        .collect();
    assert_eq!(
        per_file,
        vec![
            ("a.yaml".into(), vec!["zero".into()]),
            ("c.yaml".into(), vec!["one".into(), "two".into()])
        ]
    );
    assert!(
        summary.to_string().ends_with("3 policies in 2 files: OK"),
        "{summary}"
    );
}

#[test]
fn policies_as_a_list_of_files_relative_to_the_config() {
    let (dir, _) = repo(&[
        ("x.yaml", &doc("x", "    semver: {}\n")),
        ("y.yaml", &doc("y", "    semver: {}\n")),
    ]);
    let config_path = dir.path().join("conf/tagpilot.yaml");
    std::fs::create_dir_all(config_path.parent().unwrap()).unwrap();
    std::fs::write(&config_path, "policies:\n  - ../policies/y.yaml\n").unwrap();
    let loaded = policy::load(&config::load(&config_path).unwrap()).unwrap();
    assert_eq!(
        loaded.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        ["y"]
    );

    std::fs::write(&config_path, "policies: [../policies/missing.yaml]\n").unwrap();
    let errs = policy::load(&config::load(&config_path).unwrap()).unwrap_err();
    assert!(
        matches!(&errs.0[..], [PolicyError::Read { path, .. }] if path.ends_with("missing.yaml")),
        "{errs}"
    );
}

#[test]
fn config_errors_name_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &path,
        "registries:\n  - host: 127.0.0.1:5000\n    insecure: true\n    ratelimit: 5\n",
    )
    .unwrap();
    let err = config::load(&path).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{}:4:5", path.display())) && err.contains("ratelimit"),
        "{err}"
    );

    std::fs::write(
        &path,
        "registries:\n  - host: https://registry.example\n  - host: ghcr.io\n    credentials: {username: bot}\n",
    )
    .unwrap();
    let err = config::load(&path).unwrap_err().to_string();
    assert!(
        err.contains(&format!("{}:2:11", path.display())) && err.contains("without a scheme"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{}:3:11", path.display())) && err.contains("exactly one of"),
        "{err}"
    );

    std::fs::write(
        &path,
        "registries:\n  - host: 127.0.0.1:5000\n    insecure: true\n    credentials: {username: bot, passwordEnv: REG_PASSWORD}\n    rateLimit: 20\npolicies: [a.yaml, b.yaml]\n",
    )
    .unwrap();
    let config = config::load(&path).unwrap();
    assert_eq!(config.registries[0].rate_limit, Some(20.0));
    assert_eq!(config.base_dir(), dir.path());
}

/// The shipped examples: one per strategy and per target kind, all valid.
#[test]
fn example_policies_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let config_path = dir.path().join("tagpilot.yaml");
    std::fs::write(
        &config_path,
        // The kustomize example targets a repository named `manifests`.
        format!(
            "policies: {}\nrepositories:\n  - name: manifests\n    url: file:///srv/git/manifests.git\n",
            root.join("policies").display()
        ),
    )
    .unwrap();
    let config = config::load(&config_path).unwrap();
    let summary = policy::check(&config).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(summary.files.len(), 8, "{summary}");
    assert_eq!(summary.policy_count(), 15, "{summary}");

    let policies = policy::load(&config).unwrap();
    let count = |f: fn(&Strategy) -> bool| policies.iter().filter(|p| f(&p.strategy)).count();
    assert!(count(|s| matches!(s, Strategy::Semver { .. })) >= 1);
    assert!(count(|s| matches!(s, Strategy::Regex { .. })) >= 1);
    assert!(count(|s| matches!(s, Strategy::NewestBuild)) >= 1);
    assert!(count(|s| matches!(s, Strategy::Digest { .. })) >= 1);
    assert!(count(|s| matches!(s, Strategy::Alphabetical { .. })) >= 1);
    assert!(policies.iter().any(|p| p.pin_digest));
    assert!(policies.iter().any(|p| !p.platforms.is_empty()));
    assert!(
        policies
            .iter()
            .any(|p| p.targets.iter().any(|t| t.helm.is_some()))
    );
    assert!(
        policies
            .iter()
            .any(|p| p.targets.iter().any(|t| t.kustomize_image_name.is_some()))
    );
    assert!(
        policies
            .iter()
            .any(|p| p.targets.iter().any(|t| t.repository.is_some()))
    );
    assert!(policies.iter().any(|p| p.promote.is_some()));
}

/// A target naming a repository that `tagpilot.yaml` does not configure would silently never
/// apply; it is an error at the policy's name.
#[test]
fn a_target_naming_an_unconfigured_repository_is_an_error() {
    let text = format!(
        "{}  targets:\n    - repository: nowhere\n      paths: [\"apps/**\"]\n",
        doc("api", "    semver: {}\n")
    );
    assert_one(
        &[("api.yaml", &text)],
        "api.yaml",
        "4:9",
        "repository \"nowhere\"",
    );
}

// === promote: ===

fn promoting(name: &str, promote: &str) -> String {
    format!("{}  promote:\n{promote}", doc(name, "    semver: {}\n"))
}

/// `promote:` reads its upstreams, soak time and fan-in; a policy it names must exist.
#[test]
fn promote_reads_upstreams_soak_time_and_fan_in() {
    let dev = doc("shop", "    semver: {}\n");
    let prod = promoting(
        "shop-prod",
        "    from:\n      - application: shop-staging\n        namespace: argocd\n      - path: ./envs/staging/kustomization.yaml\n      - policy: shop\n    after: 2h 30m\n    fanIn: any\n",
    )
    .replace("acme/shop-prod", "acme/shop");
    let (_dir, config_path) = repo(&[("dev.yaml", &dev), ("prod.yaml", &prod)]);
    let config = config::load(&config_path).unwrap();
    let policies = policy::load(&config).unwrap_or_else(|e| panic!("{e}"));
    let promote = policies[1].promote.as_ref().expect("promote");
    assert_eq!(
        promote.from,
        vec![
            policy::Upstream::Application {
                name: "shop-staging".into(),
                namespace: Some("argocd".into())
            },
            policy::Upstream::Path {
                path: "envs/staging/kustomization.yaml".into(),
                repository: None
            },
            policy::Upstream::Policy {
                name: "shop".into(),
                repository: None
            },
        ]
    );
    assert_eq!(promote.after, std::time::Duration::from_secs(9000));
    assert_eq!(promote.fan_in, policy::FanIn::Any);
    assert!(policies[0].promote.is_none());
}

/// Each unreadable value of `promote:` is an error at its own line, and the policy is not
/// loaded: it never falls back to following the registry.
#[test]
fn an_unreadable_promote_value_is_an_error_at_its_line() {
    // Line 9 is `promote:`, 10 its first key, 11 the first upstream.
    let cases = [
        ("    from: []\n", "10:", "promote.from names no upstream"),
        (
            "    from:\n      - application: a\n        path: b.yaml\n",
            "11:",
            "names application and path",
        ),
        (
            "    from:\n      - namespace: argocd\n",
            "11:",
            "names none",
        ),
        (
            "    from:\n      - path: b.yaml\n        namespace: argocd\n",
            "12:",
            "goes with `application`",
        ),
        (
            "    from:\n      - path: ../b.yaml\n",
            "11:",
            "without `..`",
        ),
        (
            "    from:\n      - application: a\n    after: soon\n",
            "12:",
            "promote.after: \"soon\" is not a duration",
        ),
        (
            "    from:\n      - application: a\n    fanIn: most\n",
            "12:",
            "promote.fanIn: \"most\" is neither `all` nor `any`",
        ),
        (
            "    from:\n      - application: a\n    soak: 1h\n",
            "12:",
            "soak",
        ),
    ];
    for (promote, line, needle) in cases {
        let text = promoting("app", promote);
        assert_one(&[("app.yaml", &text)], "app.yaml", line, needle);
        let (_dir, config_path) = repo(&[("app.yaml", &text)]);
        let loaded = policy::load_all(&config::load(&config_path).unwrap());
        assert!(loaded.policies.is_empty(), "{promote}");
    }
}

/// `promote.from` must name a defined policy of the same image, a configured repository, and
/// no chain that leads back to the policy.
#[test]
fn promote_names_what_exists_and_no_cycle() {
    let errs = errors(&[(
        "app.yaml",
        &promoting("app", "    from:\n      - policy: nowhere\n"),
    )]);
    assert!(
        errs[0].contains("policy \"nowhere\", which is not defined"),
        "{errs:?}"
    );

    let errs = errors(&[
        ("a.yaml", &doc("other", "    semver: {}\n")),
        (
            "b.yaml",
            &promoting("app", "    from:\n      - policy: other\n"),
        ),
    ]);
    assert!(
        errs[0].contains("follows ghcr.io/acme/other, not ghcr.io/acme/app"),
        "{errs:?}"
    );

    let errs = errors(&[(
        "app.yaml",
        &promoting(
            "app",
            "    from:\n      - path: a.yaml\n        repository: elsewhere\n",
        ),
    )]);
    assert!(
        errs[0].contains("repository \"elsewhere\", which tagpilot.yaml does not configure"),
        "{errs:?}"
    );

    let a = promoting("a", "    from:\n      - policy: b\n").replace("acme/a", "acme/x");
    let b = promoting("b", "    from:\n      - policy: a\n").replace("acme/b", "acme/x");
    let errs = errors(&[("a.yaml", &a), ("b.yaml", &b)]);
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert!(
        errs.iter().all(|e| e.contains("leads back to this policy")),
        "{errs:?}"
    );
}

/// Issue 28: a Flux `ImagePolicy` pasted into `policies/` was reported as "unknown field
/// imageRepositoryRef", and a Deployment as "missing field spec". What the document is comes
/// first, at its `kind`.
#[test]
fn a_flux_resource_or_another_kind_is_named_for_what_it_is() {
    let flux = "apiVersion: image.toolkit.fluxcd.io/v1beta2\nkind: ImagePolicy\nmetadata:\n  name: app\n  namespace: flux-system\nspec:\n  imageRepositoryRef:\n    name: app\n  policy:\n    semver:\n      range: 1.x\n";
    assert_one(
        &[("flux.yaml", flux)],
        "flux.yaml",
        "2:7",
        "this is a Flux resource (apiVersion image.toolkit.fluxcd.io/v1beta2, kind ImagePolicy), not a tagpilot ImagePolicy",
    );
    let deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\n";
    assert_one(
        &[(
            "deploy.yaml",
            &format!("{}---\n{deployment}", doc("ok", "    semver: {}\n")),
        )],
        "deploy.yaml",
        "11:7",
        "not an ImagePolicy (apiVersion apps/v1, kind Deployment)",
    );
}

/// Issue 28: `sortBy: 1` suggested `(?P<1>…)`, no valid group name. A group may be named by
/// its number, as Flux's `$1`; one that does not exist is said with the groups there are.
#[test]
fn sort_by_takes_a_group_number_and_names_the_groups_there_are() {
    let ok = doc(
        "app",
        "    regex:\n      pattern: '^main-([0-9a-f]{7})-(\\d+)$'\n      sortBy: 2\n",
    );
    let (_dir, config_path) = repo(&[("ok.yaml", &ok)]);
    let config = config::load(&config_path).unwrap();
    let p = &policy::load(&config).unwrap()[0];
    assert!(
        matches!(
            p.strategy,
            Strategy::Regex {
                group: 2,
                order: policy::RegexOrder::Numerical,
                ..
            }
        ),
        "{:?}",
        p.strategy
    );
    let none = doc(
        "app",
        "    regex:\n      pattern: '^main-\\d+$'\n      sortBy: 1\n",
    );
    let errs = errors(&[("none.yaml", &none)]);
    assert!(
        errs[0].contains("sortBy names group \"1\", but the pattern has no capture group"),
        "{errs:?}"
    );
    assert!(!errs[0].contains("(?P<1>"), "{errs:?}");
    let several = doc(
        "app",
        "    regex:\n      pattern: '^main-(?P<sha>[0-9a-f]{7})-(\\d+)$'\n",
    );
    assert_one(
        &[("several.yaml", &several)],
        "several.yaml",
        "9:16",
        "the pattern has 2 capture groups (sha, 2) and no sortBy",
    );
}

/// Issue 28: `order: numerical` on a key that is never a number passed `check`, and `plan`
/// then said the registry had no tags.
#[test]
fn numerical_order_on_a_key_that_is_never_a_number_is_refused() {
    let text = doc(
        "app",
        "    regex:\n      pattern: '^main-[0-9a-f]+$'\n      order: numerical\n",
    );
    assert_one(
        &[("never.yaml", &text)],
        "never.yaml",
        "9:16",
        "the key, the whole tag (the pattern has no capture group), is never only digits",
    );
}

/// Issue 28: `>= 1.25 && < 2` said `expected a version after ""`; a range no version meets
/// (`>=2, <1`) passed `check` and held every reference for ever.
#[test]
fn a_range_is_named_when_it_joins_with_ampersands_or_admits_no_version() {
    let text = doc("app", "    semver:\n      range: '>= 1.25 && < 2'\n");
    assert_one(
        &[("amp.yaml", &text)],
        "amp.yaml",
        "9:14",
        "ranges join comparisons with commas or spaces",
    );
    let text = doc("app", "    semver:\n      range: '>=2, <1'\n");
    assert_one(
        &[("empty.yaml", &text)],
        "empty.yaml",
        "9:14",
        "semver.range \">=2, <1\" admits no version (pre-releases left out), so no tag could ever be chosen",
    );
}

/// Issue 28: a regex error showed no position inside the pattern.
#[test]
fn an_invalid_regex_shows_where_in_the_pattern() {
    let text = doc("app", "    regex:\n      pattern: '^main-(?P<ts>\\d+$'\n");
    let errs = errors(&[("regex.yaml", &text)]);
    assert!(
        errs[0].contains("unclosed group, at character 7:\n    ^main-(?P<ts>\\d+$\n          ^"),
        "{}",
        errs[0]
    );
}
