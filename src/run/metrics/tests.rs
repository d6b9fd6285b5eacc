use std::time::Duration;

use super::record::updates;
use super::*;
use crate::argocd::plan::ImageStatus;
use crate::argocd::write::PatchStatus;
use crate::engine::{Cycle, EngineError};
use crate::plan::{Change, Hold, Plan, Problem, ProblemReason, RepositoryOutcome};
use crate::plan::{FindingKind, RepositoryStatus, SkipKind};
use crate::registry::ResponseCount;
use crate::report::applications::{ApplicationReport, UpdaterName};

fn outcome(name: &str, status: RepositoryStatus) -> RepositoryOutcome {
    RepositoryOutcome {
        repository: name.to_string(),
        url: String::new(),
        branch: "main".to_string(),
        status,
        sources: Vec::new(),
        commits: Vec::new(),
        pull_requests: Vec::new(),
        error: None,
    }
}

fn change(repository: &str, policy: &str) -> Change {
    Change {
        repository: Some(repository.to_string()),
        policy: policy.to_string(),
        image: "registry/app".to_string(),
        file: "deploy.yaml".to_string(),
        line: 1,
        field: String::new(),
        strategy: "semver",
        from: "1.0.0".to_string(),
        to: "1.1.0".to_string(),
        source: None,
        labels: Vec::new(),
        promotion: None,
    }
}

fn cycle() -> Cycle {
    Cycle {
        plan: Plan {
            changes: vec![
                change("pushed", "api"),
                change("prs", "api"),
                change("broken", "web"),
            ],
            holds: vec![Hold {
                repository: None,
                policy: "web".to_string(),
                file: "deploy.yaml".to_string(),
                line: 3,
                current: "2.0.0".to_string(),
                reason: crate::plan::HoldReason::MissingTag,
            }],
            problems: vec![Problem {
                policy: Some("db".to_string()),
                ..Problem::new(unreadable())
            }],
            ..Default::default()
        },
        repositories: vec![
            outcome("pushed", RepositoryStatus::Pushed),
            outcome("prs", RepositoryStatus::PullRequests),
            outcome("broken", RepositoryStatus::Failed),
        ],
        failed: true,
        ..Default::default()
    }
}

#[test]
fn updates_take_their_result_from_their_repository() {
    assert_eq!(
        updates(&cycle()),
        vec![
            ("api", "pushed"),
            ("api", "pull_request"),
            ("web", "failed"),
            ("web", "held"),
            ("db", "failed"),
        ]
    );
}

/// 1000 Argo CD Application images (a policy each, `<app>/<alias>`) beside two policy files:
/// the updates stay a handful of series, not one per Application.
#[test]
fn the_updates_of_a_thousand_application_images_are_a_bounded_set_of_series() {
    let metrics = Metrics::new();
    metrics.set_configured_policies(["api", "web"]);
    let applications = || {
        let mut cycle = cycle();
        for i in 0..1000 {
            cycle
                .plan
                .changes
                .push(change("pushed", &format!("app-{i}/api")));
            cycle.plan.problems.push(Problem {
                policy: Some(format!("app-{i}/web")),
                ..Problem::new(unreadable())
            });
        }
        cycle
    };
    for _ in 0..3 {
        metrics.record_cycle(&Ok(applications()), &[], Duration::from_secs(1));
    }
    let text = metrics.render();
    let series: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("tagpilot_updates_total{"))
        .collect();
    // Two configured policies and the Applications' one value, by at most five results.
    assert!(series.len() <= 3 * 5, "{series:#?}");
    for line in [
        "tagpilot_updates_total{policy=\"(applications)\",result=\"pushed\"} 3000",
        "tagpilot_updates_total{policy=\"api\",result=\"pushed\"} 3",
        "tagpilot_updates_total{policy=\"web\",result=\"failed\"} 3",
        // `db` is in no policy file: an Application's, as far as the label goes.
        "tagpilot_updates_total{policy=\"(applications)\",result=\"failed\"} 3003",
    ] {
        assert!(series.contains(&line), "{line} missing: {series:#?}");
    }
    assert!(
        !text.contains("app-"),
        "an Application's name in a label:\n{text}"
    );
}

/// Issue 31: the images a pattern policy follows (`shop@shop/<image>`) count under the pattern
/// policy, whatever their number.
#[test]
fn the_images_of_a_pattern_count_under_the_pattern_policy() {
    let metrics = Metrics::new();
    metrics.set_configured_policies(["shop"]);
    let mut cycle = cycle();
    for i in 0..500 {
        cycle
            .plan
            .changes
            .push(change("pushed", &format!("shop@shop/app-{i}")));
    }
    metrics.record_cycle(&Ok(cycle), &[], Duration::from_secs(1));
    let text = metrics.render();
    assert!(
        text.contains("tagpilot_updates_total{policy=\"shop\",result=\"pushed\"} 500"),
        "{text}"
    );
    assert!(!text.contains("app-"), "an image in a label:\n{text}");
}

#[test]
fn a_cycle_is_rendered_with_bounded_labels() {
    let metrics = Metrics::new();
    metrics.record_cycle(&Ok(cycle()), &[], Duration::from_millis(300));
    metrics.record_cycle(&Ok(Cycle::default()), &[], Duration::from_secs(1));
    let text = metrics.render();
    for line in [
        "tagpilot_cycles_total{result=\"partial\"} 1",
        "tagpilot_cycles_total{result=\"ok\"} 1",
        "tagpilot_cycle_duration_seconds_count 2",
        "tagpilot_updates_total{policy=\"api\",result=\"pushed\"} 1",
        "tagpilot_updates_total{policy=\"web\",result=\"held\"} 1",
        "tagpilot_errors_total{kind=\"repository\"} 1",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(!text.contains("1.1.0"), "a tag became a label:\n{text}");
    let last = text
        .lines()
        .find(|l| l.starts_with("tagpilot_last_successful_cycle_timestamp_seconds "))
        .expect("the timestamp is exported");
    let value: f64 = last.split(' ').nth(1).unwrap().parse().unwrap();
    assert!(value > 1.7e9, "{last}");
}

#[test]
fn a_recheck_counts_its_updates_but_is_not_a_cycle() {
    let metrics = Metrics::new();
    metrics.record_recheck(&Ok(cycle()));
    let text = metrics.render();
    for line in [
        "tagpilot_webhook_rechecks_total{result=\"partial\"} 1",
        "tagpilot_webhook_rechecks_total{result=\"ok\"} 0",
        "tagpilot_cycles_total{result=\"partial\"} 0",
        "tagpilot_updates_total{policy=\"api\",result=\"pushed\"} 1",
        "tagpilot_cycle_duration_seconds_count 0",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[test]
fn registry_answers_are_added_once() {
    let metrics = Metrics::new();
    let count = |request, status: &str, count| ResponseCount {
        registry: "ghcr.io".to_string(),
        request,
        status: status.to_string(),
        count,
    };
    metrics.record_registry(&[count("tag_list", "200", 2), count("manifest", "200", 1)]);
    metrics.record_registry(&[
        count("tag_list", "200", 3),
        count("manifest", "200", 1),
        count("manifest", "unreachable", 1),
    ]);
    let text = metrics.render();
    for line in [
        "tagpilot_registry_requests_total{registry=\"ghcr.io\",status=\"200\"} 4",
        "tagpilot_registry_requests_total{registry=\"ghcr.io\",status=\"unreachable\"} 1",
        "tagpilot_tag_listings_total{registry=\"ghcr.io\"} 3",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[test]
fn a_cycle_in_which_no_registry_answered_is_not_ok_and_each_registry_says_so() {
    let metrics = Metrics::new();
    let count = |registry: &str, status: &str, count| ResponseCount {
        registry: registry.to_string(),
        request: "tag_list",
        status: status.to_string(),
        count,
    };
    // A cycle where one registry answers and the other does not.
    let answered =
        metrics.record_registry(&[count("ghcr.io", "200", 1), count("quay.io", "503", 2)]);
    assert_eq!(
        answered,
        RegistriesAnswered {
            asked: 2,
            reachable: 1
        }
    );
    let result = Ok(Cycle::default());
    assert_eq!(CycleResult::of(&result).given(answered), CycleResult::Ok);
    // Then one where neither does: ghcr.io's 200 is not counted again.
    let answered = metrics.record_registry(&[
        count("ghcr.io", "200", 1),
        count("ghcr.io", "unreachable", 1),
        count("quay.io", "503", 2),
        count("quay.io", "429", 1),
    ]);
    assert!(answered.none_reachable(), "{answered:?}");
    let kind = CycleResult::of(&result).given(answered);
    assert_eq!(kind, CycleResult::RegistriesUnreachable);
    metrics.record_cycle_as(kind, &result, &[], Duration::from_secs(1));
    // A cycle that asked no registry at all (everything cached) is not a failed one.
    assert!(!metrics.record_registry(&[]).none_reachable());
    let text = metrics.render();
    for line in [
        "tagpilot_cycles_total{result=\"registries_unreachable\"} 1",
        "tagpilot_cycles_total{result=\"ok\"} 0",
        "tagpilot_registry_up{registry=\"ghcr.io\"} 0",
        "tagpilot_registry_up{registry=\"quay.io\"} 0",
        "tagpilot_registry_last_reachable_timestamp_seconds{registry=\"ghcr.io\"} ",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
    assert!(
        !text.contains("tagpilot_registry_last_reachable_timestamp_seconds{registry=\"quay.io\"}"),
        "quay.io never answered:\n{text}"
    );
    assert!(
        !text.contains("tagpilot_last_successful_cycle_timestamp_seconds 1"),
        "not a successful cycle:\n{text}"
    );
}

fn image(alias: &str, repository: &str, status: ImageStatus) -> crate::argocd::ImageOutcome {
    crate::argocd::ImageOutcome {
        app: 0,
        alias: alias.to_string(),
        image: format!("registry/{alias}"),
        source: 1,
        kind: crate::argocd::resolve::SourceKind::Kustomize,
        repository: repository.to_string(),
        file: None,
        from: Some("1.0.0".to_string()),
        to: Some("1.1.0".to_string()),
        status,
        reason: None,
    }
}

fn app(
    name: &str,
    updater: Option<(&str, &str)>,
    images_managed: usize,
    images: Vec<crate::argocd::ImageOutcome>,
) -> ApplicationReport {
    ApplicationReport {
        application: format!("argocd/{name}"),
        origin: "cluster".to_string(),
        configured_by: None,
        updater: updater.map(|(namespace, name)| UpdaterName {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }),
        images_managed,
        images,
        skipped_annotations: Vec::new(),
        problems: Vec::new(),
        patch: None,
    }
}

/// The Applications of a cycle: two configured by the resource argocd/shop, one by its
/// annotations alone, one nothing manages.
fn cycle_with_applications() -> Cycle {
    // web: api pushed (in two sources, one image), worker's repository failed.
    let web = app(
        "web",
        Some(("argocd", "shop")),
        3,
        vec![
            image("api", "pushed", ImageStatus::Update),
            image("api", "pushed", ImageStatus::Update),
            image("worker", "broken", ImageStatus::Update),
            image("cron", "pushed", ImageStatus::UpToDate),
        ],
    );
    // admin: an image that could not be decided, and a problem of its own.
    let mut admin = app(
        "admin",
        Some(("argocd", "shop")),
        1,
        vec![image("ui", "prs", ImageStatus::Problem)],
    );
    admin.problems.push("no repository to write to".to_string());
    // legacy: annotations, written back by patching the Application.
    let mut legacy = app(
        "legacy",
        None,
        2,
        vec![
            image("db", "Application argocd/legacy", ImageStatus::Update),
            image("cache", "Application argocd/legacy", ImageStatus::Held),
        ],
    );
    legacy.patch = Some(crate::argocd::write::PatchReport {
        status: PatchStatus::Patched,
        body: "{}".to_string(),
    });
    // Selected by two resources: nothing manages it.
    let mut conflict = app("conflict", None, 0, Vec::new());
    conflict
        .problems
        .push("selected by more than one ImageUpdater".to_string());
    Cycle {
        repositories: vec![
            outcome("pushed", RepositoryStatus::Pushed),
            outcome("prs", RepositoryStatus::PullRequests),
            outcome("broken", RepositoryStatus::Failed),
        ],
        applications: Some(vec![web, admin, legacy, conflict]),
        ..Default::default()
    }
}

/// The lines of Image Updater's series, each family's series sorted (they come in no set
/// order).
fn image_updater_lines(text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("argocd_image_updater_"))
        .collect();
    for chunk in lines.chunk_by_mut(|a, b| a.starts_with('#') == b.starts_with('#')) {
        chunk.sort_unstable();
    }
    lines
}

const SHOP: &str = r#"image_updater_cr_name="shop",image_updater_cr_namespace="argocd""#;
const ANNOTATIONS: &str = r#"image_updater_cr_name="",image_updater_cr_namespace="""#;

#[test]
fn image_updater_series_carry_its_exact_names_and_labels() {
    let metrics = Metrics::with_image_updater(true);
    metrics.record_cycle(&Ok(cycle_with_applications()), &[], Duration::ZERO);
    let text = metrics.render();
    let want = format!(
        "\
# HELP argocd_image_updater_applications_watched_total The total number of applications watched by Argo CD Image Updater CR.
# TYPE argocd_image_updater_applications_watched_total gauge
argocd_image_updater_applications_watched_total{{{ANNOTATIONS}}} 1
argocd_image_updater_applications_watched_total{{{SHOP}}} 2
# HELP argocd_image_updater_images_watched_total Number of images watched by Argo CD Image Updater CR.
# TYPE argocd_image_updater_images_watched_total gauge
argocd_image_updater_images_watched_total{{{ANNOTATIONS}}} 2
argocd_image_updater_images_watched_total{{{SHOP}}} 4
# HELP argocd_image_updater_images_updated Number of images updated by Argo CD Image Updater CR.
# TYPE argocd_image_updater_images_updated counter
argocd_image_updater_images_updated_total{{{ANNOTATIONS}}} 1
argocd_image_updater_images_updated_total{{{SHOP}}} 1
# HELP argocd_image_updater_images_errors Number of errors reported by Argo CD Image Updater CR.
# TYPE argocd_image_updater_images_errors counter
argocd_image_updater_images_errors_total{{{ANNOTATIONS}}} 0
argocd_image_updater_images_errors_total{{{SHOP}}} 3"
    );
    // shop's errors: worker's failed push, ui undecided, admin's own problem.
    assert_eq!(image_updater_lines(&text).join("\n"), want, "{text}");
}

#[test]
fn a_recheck_adds_to_image_updater_counters_and_a_resource_gone_leaves_the_gauges() {
    let metrics = Metrics::with_image_updater(true);
    metrics.record_cycle(&Ok(cycle_with_applications()), &[], Duration::ZERO);
    // A re-check reads only some images: it adds to the counters, the gauges stay.
    let mut partial = cycle_with_applications();
    for a in partial.applications.as_mut().unwrap() {
        a.images_managed = 0;
    }
    metrics.record_recheck(&Ok(partial));
    let text = metrics.render();
    for line in [
        format!("argocd_image_updater_images_updated_total{{{SHOP}}} 2"),
        format!("argocd_image_updater_images_watched_total{{{SHOP}}} 4"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }

    // The next cycle has no Application of shop's: its gauges go, its counters stay.
    let mut next = cycle_with_applications();
    next.applications
        .as_mut()
        .unwrap()
        .retain(|a| a.updater.is_none());
    metrics.record_cycle(&Ok(next), &[], Duration::ZERO);
    let text = metrics.render();
    assert!(
        !text.contains(&format!("watched_total{{{SHOP}}}")),
        "{text}"
    );
    for line in [
        format!("argocd_image_updater_images_updated_total{{{SHOP}}} 2"),
        format!("argocd_image_updater_applications_watched_total{{{ANNOTATIONS}}} 1"),
    ] {
        assert!(text.lines().any(|l| l == line), "{line} missing:\n{text}");
    }
}

#[test]
fn image_updater_series_only_with_the_flag() {
    let metrics = Metrics::new();
    metrics.record_cycle(&Ok(cycle_with_applications()), &[], Duration::ZERO);
    let text = metrics.render();
    assert_eq!(image_updater_lines(&text), Vec::<&str>::new(), "{text}");
}

#[test]
fn an_engine_error_counts_its_kind() {
    let metrics = Metrics::new();
    metrics.record_cycle(&Err(EngineError::NoCacheDir), &[], Duration::ZERO);
    let text = metrics.render();
    assert!(
        text.contains("tagpilot_cycles_total{result=\"error\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("tagpilot_errors_total{kind=\"no_cache_dir\"} 1"),
        "{text}"
    );
}

#[test]
fn findings_and_skipped_files_are_the_last_full_cycle_s() {
    use crate::plan::{Finding, SkippedFile};
    let metrics = Metrics::new();
    let text = metrics.render();
    assert!(
        text.contains("tagpilot_findings{kind=\"no_files\",severity=\"problem\"} 0"),
        "every kind shows from the start:\n{text}"
    );
    let skipped = |kind| SkippedFile {
        repository: Some("manifests".into()),
        file: "a.yaml".into(),
        reason: "why".into(),
        kind,
    };
    let found = Cycle {
        plan: Plan {
            findings: vec![
                Finding::new(FindingKind::NoFiles, "x".into(), "paths aps/**".into()),
                Finding::new(
                    FindingKind::ImageNotFound,
                    "y".into(),
                    "paths apps/**".into(),
                ),
                Finding::new(
                    FindingKind::ImageNotFound,
                    "z".into(),
                    "paths apps/**".into(),
                ),
                Finding::new(
                    FindingKind::VersionLabelLeft,
                    "z".into(),
                    "apps/api.yaml:6".into(),
                ),
            ],
            skipped: vec![
                skipped(SkipKind::InvalidYaml),
                skipped(SkipKind::NotText),
                skipped(SkipKind::InvalidYaml),
            ],
            ..Default::default()
        },
        ..Default::default()
    };
    metrics.record_cycle(&Ok(found), &[], Duration::ZERO);
    let text = metrics.render();
    for want in [
        "tagpilot_findings{kind=\"no_files\",severity=\"problem\"} 1",
        "tagpilot_findings{kind=\"image_not_found\",severity=\"warning\"} 2",
        "tagpilot_findings{kind=\"application_image_not_found\",severity=\"warning\"} 0",
        "tagpilot_findings{kind=\"version_label_left\",severity=\"warning\"} 1",
        "tagpilot_findings{kind=\"application_on_other_revision\",severity=\"warning\"} 0",
        "tagpilot_skipped_files{reason=\"invalid_yaml\"} 2",
        "tagpilot_skipped_files{reason=\"not_text\"} 1",
        "tagpilot_skipped_files{reason=\"helm_template\"} 0",
    ] {
        assert!(text.contains(want), "{want}:\n{text}");
    }
    // A re-check reads only part of the configuration: the gauges stay the cycle's.
    metrics.record_recheck(&Ok(Cycle::default()));
    assert!(
        metrics
            .render()
            .contains("tagpilot_skipped_files{reason=\"invalid_yaml\"} 2")
    );
    // Fixed by the next cycle: gone from the gauges, not summed.
    metrics.record_cycle(&Ok(Cycle::default()), &[], Duration::ZERO);
    let text = metrics.render();
    assert!(
        text.contains("tagpilot_findings{kind=\"no_files\",severity=\"problem\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("tagpilot_skipped_files{reason=\"invalid_yaml\"} 0"),
        "{text}"
    );
}

#[test]
fn a_verified_promotion_counts_its_lead_time_and_other_changes_do_not() {
    let metrics = Metrics::new();
    let at: jiff::Timestamp = "2026-11-25T10:00:00Z".parse().unwrap();
    let field = |promoted_at| crate::state::VerifiedField {
        key: crate::holds::FieldKey::whole_policy("shop-prod"),
        image: "registry.example/shop".into(),
        line: 10,
        from: "1.1.0".into(),
        to: "1.2.0".into(),
        on_failure: crate::config::verify::OnFailure::Hold,
        promoted_at,
    };
    metrics.record_promotion_lead_times(
        &[field(Some(at)), field(None)],
        at + jiff::SignedDuration::from_hours(3),
    );
    let text = metrics.render();
    for line in [
        "tagpilot_promotion_lead_time_seconds_count 1",
        "tagpilot_promotion_lead_time_seconds_sum 10800.0",
    ] {
        assert!(text.contains(line), "{line} missing from\n{text}");
    }
}

#[test]
fn signature_verifications_count_what_is_new_by_result() {
    let metrics = Metrics::new();
    assert!(
        metrics
            .render()
            .contains("tagpilot_signature_verifications_total{result=\"untrusted\"} 0")
    );
    metrics.record_signatures(&vec![("verified", 2), ("untrusted", 1)]);
    metrics.record_signatures(&vec![("verified", 3), ("untrusted", 1)]);
    let text = metrics.render();
    assert!(
        text.contains("tagpilot_signature_verifications_total{result=\"verified\"} 3"),
        "{text}"
    );
    assert!(
        text.contains("tagpilot_signature_verifications_total{result=\"untrusted\"} 1"),
        "{text}"
    );
}

/// A problem's reason, for the tests that count problems.
fn unreadable() -> ProblemReason {
    let error = std::io::Error::other("permission denied");
    ProblemReason::Unreadable(crate::error_chain::Failure::new(error))
}
