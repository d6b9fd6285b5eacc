//! Required platforms against the real registry: a policy that names platforms takes only tags
//! whose image offers every one of them, under every strategy, checking the candidates lazily
//! (best first, until one passes), and the report lists the tags it passed over and why.

use std::path::Path;

use tagpilot::plan::Plan;
use tagpilot::{config, engine, policy, report};

use crate::support::registry::{Auth, ImageSpec, IndexSpec, TestRegistry};

/// An index offering each of `platforms`, built at `created`.
fn index(platforms: &[&str], created: &str) -> IndexSpec {
    platforms.iter().fold(IndexSpec::new(), |spec, p| {
        spec.platform(p, ImageSpec::default().created(created))
    })
}

/// A root in a temp directory: `tagpilot.yaml` for `reg`, one policy file, one manifest.
struct Root {
    dir: tempfile::TempDir,
}

impl Root {
    fn new(reg: &TestRegistry, policy_spec: &str, images: &[String]) -> Root {
        let dir = tempfile::tempdir().unwrap();
        let write = |rel: &str, text: &str| {
            let path = dir.path().join(rel);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            "tagpilot.yaml",
            &format!(
                "registries:\n{}policies: policies/\n",
                reg.registries_yaml()
            ),
        );
        write(
            "policies/api.yaml",
            &format!(
                "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: api\n\
                 spec:\n  image: {}\n{policy_spec}",
                reg.image("shop/api")
            ),
        );
        let containers: String = images
            .iter()
            .enumerate()
            .map(|(i, image)| format!("        - name: c{i}\n          image: {image}\n"))
            .collect();
        write(
            "app.yaml",
            &format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: app\nspec:\n  \
                 template:\n    spec:\n      containers:\n{containers}"
            ),
        );
        Root { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `tagpilot plan` of the root through the engine, with the real registry.
    async fn plan(&self, reg: &TestRegistry) -> Plan {
        let config = config::load(&self.path().join("tagpilot.yaml")).unwrap();
        let policies = policy::load(&config).unwrap();
        let client = reg.client();
        let input = engine::Input {
            config: &config,
            policies: &policies,
            broken_policies: &[],
            local: Some(self.path().to_path_buf()),
            cluster: None,
        };
        let context = engine::Context {
            registry: &client,
            cache: None,
            progress: &(),
            cancel: Default::default(),
            state: None,
            clock: &tagpilot::clock::SystemClock,
            freeze: None,
        };
        let options = engine::Options {
            dry_run: true,
            ..Default::default()
        };
        let cycle = engine::run(&input, &context, options).await.unwrap();
        assert!(cycle.plan.problems.is_empty(), "{:?}", cycle.plan.problems);
        cycle.plan
    }
}

/// The plan's changes as `from -> to`.
fn moves(plan: &Plan) -> Vec<String> {
    plan.changes
        .iter()
        .map(|c| format!("{} -> {}", c.from, c.to))
        .collect()
}

/// The skipped tags of the plan, `tag: why`, per policy.
fn skipped(plan: &Plan) -> Vec<String> {
    plan.skipped_tags
        .iter()
        .flat_map(|s| s.tags.iter().map(|t| t.0.to_string()))
        .collect()
}

const BOTH: &str = "  platforms: [linux/amd64, linux/arm64]\n";

#[tokio::test]
async fn semver_skips_an_index_without_a_required_platform_for_an_older_one() {
    let reg = TestRegistry::start(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    reg.push_index(
        "shop/api",
        "1.0.0",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_index(
        "shop/api",
        "1.1.0",
        index(&["linux/amd64", "linux/arm64/v8"], when),
    )
    .await;
    // Newer, but amd64 only: as an index, and as a single-platform image.
    reg.push_index("shop/api", "1.2.0", index(&["linux/amd64"], when))
        .await;
    reg.push_image("shop/api", "1.3.0", ImageSpec::default())
        .await;
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    semver: {{range: \"^1.0.0\"}}\n{BOTH}"),
        &[format!("{}:1.0.0", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["1.0.0 -> 1.1.0"]);
    assert_eq!(
        skipped(&plan),
        [
            "1.3.0: no linux/arm64 image (offers linux/amd64)",
            "1.2.0: no linux/arm64 image (offers linux/amd64)",
        ]
    );
    let table = report::table(&plan);
    assert!(
        table.contains(&format!(
            "Skipped tags:\n  policy api, image {}:\n    1.3.0: no linux/arm64 image (offers linux/amd64)\n",
            reg.image("shop/api")
        )),
        "{table}"
    );
    let json = report::json(&plan).unwrap();
    assert!(json.contains("\"reason\": \"missing_platforms\""), "{json}");

    // Once both platforms are there, the newest tag is taken and nothing is skipped.
    reg.push_index(
        "shop/api",
        "1.3.0",
        index(&["linux/arm64", "linux/amd64"], when),
    )
    .await;
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["1.0.0 -> 1.3.0"]);
    assert!(plan.skipped_tags.is_empty(), "{:?}", plan.skipped_tags);
}

/// Every newer tag lacks the platform: the reference stays, held with the newest skipped tag.
#[tokio::test]
async fn a_reference_whose_newer_tags_all_lack_a_platform_is_held_saying_so() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_index(
        "shop/api",
        "1.0.0",
        index(&["linux/amd64", "linux/arm64"], "2024-01-01T00:00:00Z"),
    )
    .await;
    reg.push_tags("shop/api", &["1.1.0", "1.2.0"], ImageSpec::default())
        .await;
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    semver: {{}}\n{BOTH}"),
        &[format!("{}:1.0.0", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    let reasons: Vec<String> = plan.holds.iter().map(|h| h.reason.to_string()).collect();
    assert_eq!(
        reasons,
        ["newer tag 1.2.0: no linux/arm64 image (offers linux/amd64) (1 more skipped)"]
    );
}

#[tokio::test]
async fn regex_strategy_honours_required_platforms() {
    let reg = TestRegistry::start(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    reg.push_index(
        "shop/api",
        "build-1",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_index(
        "shop/api",
        "build-2",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_index("shop/api", "build-10", index(&["linux/arm64"], when))
        .await;
    let root = Root::new(
        &reg,
        &format!(
            "  strategy:\n    regex:\n      pattern: '^build-(?P<n>[0-9]+)$'\n      \
             sortBy: n\n      order: numerical\n{BOTH}"
        ),
        &[format!("{}:build-1", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["build-1 -> build-2"]);
    assert_eq!(
        skipped(&plan),
        ["build-10: no linux/amd64 image (offers linux/arm64)"]
    );
}

#[tokio::test]
async fn digest_strategy_holds_a_followed_tag_without_a_required_platform() {
    let reg = TestRegistry::start(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    let old = reg
        .push_index(
            "shop/api",
            "stable",
            index(&["linux/amd64", "linux/arm64"], when),
        )
        .await;
    // `stable` moves to an amd64-only build.
    reg.push_index(
        "shop/api",
        "stable",
        index(&["linux/amd64"], "2024-02-01T00:00:00Z"),
    )
    .await;
    let image = format!("{}:stable@{old}", reg.image("shop/api"));
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    digest: {{tag: stable}}\n{BOTH}"),
        std::slice::from_ref(&image),
    );
    let plan = root.plan(&reg).await;
    assert!(plan.changes.is_empty(), "{:?}", plan.changes);
    let reasons: Vec<String> = plan.holds.iter().map(|h| h.reason.to_string()).collect();
    assert_eq!(
        reasons,
        ["tag stable: no linux/arm64 image (offers linux/amd64)"]
    );
    assert_eq!(
        skipped(&plan),
        ["stable: no linux/arm64 image (offers linux/amd64)"]
    );

    // Pushed again for both: the digest moves.
    let new = reg
        .push_index(
            "shop/api",
            "stable",
            index(&["linux/arm64", "linux/amd64"], "2024-03-01T00:00:00Z"),
        )
        .await;
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), [format!("stable@{old} -> stable@{new}")]);
}

/// newestBuild takes a build that offers every required platform, not one that offers some.
#[tokio::test]
async fn newest_build_needs_every_required_platform_not_one() {
    let reg = TestRegistry::start(Auth::None).await;
    reg.push_index(
        "shop/api",
        "build-a",
        index(&["linux/amd64", "linux/arm64"], "2024-01-01T00:00:00Z"),
    )
    .await;
    reg.push_index(
        "shop/api",
        "build-b",
        index(&["linux/amd64", "linux/arm64"], "2024-02-01T00:00:00Z"),
    )
    .await;
    reg.push_index(
        "shop/api",
        "build-c",
        index(&["linux/arm64"], "2024-03-01T00:00:00Z"),
    )
    .await;
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    newestBuild: {{}}\n{BOTH}"),
        &[format!("{}:build-a", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["build-a -> build-b"]);
    assert_eq!(
        skipped(&plan),
        ["build-c: no linux/amd64 image (offers linux/arm64)"]
    );
}

/// Candidates are inspected best first and only until one passes: the older tags' manifests
/// are never asked for, and a policy without platforms inspects nothing.
#[tokio::test]
async fn only_the_candidates_up_to_the_first_that_passes_are_inspected() {
    let reg = TestRegistry::start_with_access_log(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    let old: Vec<String> = (0..6).map(|i| format!("1.{i}.0")).collect();
    for tag in &old {
        reg.push_index(
            "shop/api",
            tag,
            index(&["linux/amd64", "linux/arm64"], when),
        )
        .await;
    }
    reg.push_index("shop/api", "1.7.0", index(&["linux/amd64"], when))
        .await;
    reg.push_index(
        "shop/api",
        "1.6.0",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    semver: {{}}\n{BOTH}"),
        &[format!("{}:1.0.0", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["1.0.0 -> 1.6.0"]);
    let requests = reg.requests();
    for tag in ["1.7.0", "1.6.0"] {
        assert!(
            requests
                .iter()
                .any(|r| r.ends_with(&format!("/v2/shop/api/manifests/{tag}"))),
            "{tag} inspected: {requests:?}"
        );
    }
    for tag in &old[1..] {
        assert!(
            !requests
                .iter()
                .any(|r| r.ends_with(&format!("/v2/shop/api/manifests/{tag}"))),
            "{tag} is never asked for: {requests:?}"
        );
    }
}

/// `tagpilot tags` marks what a plan would choose: the newest tag without a required platform
/// is passed over, and says what its image lacks.
#[tokio::test]
async fn tags_marks_the_tag_a_plan_would_choose_and_what_the_skipped_lack() {
    use tagpilot::policy::{ImagePolicy, Strategy};
    let reg = TestRegistry::start(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    reg.push_index(
        "shop/api",
        "1.0.0",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_index("shop/api", "1.1.0", index(&["linux/amd64"], when))
        .await;
    let mut policy = ImagePolicy::adhoc(
        &reg.image("shop/api"),
        Strategy::semver(None, false).unwrap(),
    )
    .unwrap();
    policy.platforms = vec!["linux/arm64".parse().unwrap()];
    let ranked = tagpilot::plan::tags::rank_tags(&reg.client(), &policy, None, &())
        .await
        .unwrap();
    let text = report::tags(&reg.image("shop/api"), &ranked);
    assert!(
        text.contains("1.1.0  no image for linux/arm64 (offers linux/amd64)"),
        "{text}"
    );
    assert!(text.contains("*  1.0.0  chosen"), "{text}");
}

#[tokio::test]
async fn alphabetical_strategy_honours_required_platforms() {
    let reg = TestRegistry::start(Auth::None).await;
    let when = "2024-01-01T00:00:00Z";
    reg.push_index(
        "shop/api",
        "2024-01-a",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_index(
        "shop/api",
        "2024-02-a",
        index(&["linux/amd64", "linux/arm64"], when),
    )
    .await;
    reg.push_image("shop/api", "2024-03-a", ImageSpec::default())
        .await;
    let root = Root::new(
        &reg,
        &format!("  strategy:\n    alphabetical: {{}}\n{BOTH}"),
        &[format!("{}:2024-01-a", reg.image("shop/api"))],
    );
    let plan = root.plan(&reg).await;
    assert_eq!(moves(&plan), ["2024-01-a -> 2024-02-a"]);
    assert_eq!(
        skipped(&plan),
        ["2024-03-a: no linux/arm64 image (offers linux/amd64)"]
    );
}
