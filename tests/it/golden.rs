//! Golden directories, and the one helper that checks a result against them.
//!
//! Every golden case is a directory `tests/golden/<suite>/<case>/` (see `tests/golden/README.md`):
//! `in/` what tagpilot starts from, `out/` the files expected afterwards (written by hand), and
//! the expected renderings beside them (`plan.txt`, `body.md`, ...), plus `registry.yaml` where a
//! registry is involved. This module runs the `rewrite` suite, each case a test of its own,
//! through the engine as `tagpilot plan` then `apply` run it in a local directory; `argocd.rs`
//! and `forge.rs` run theirs, all comparing through [`check_text`].
//!
//! A `rewrite` case:
//! - `in/`: the root tagpilot runs in (`tagpilot.yaml`, `policies/`, manifests);
//! - `registry.yaml`: what the in-memory registry serves (repository → tags, digests, created);
//! - `out/`: the whole tree expected after `apply`, written by hand;
//! - `plan.txt`: the expected table report (and `plan.md` / `plan.json` / `plan.diff` when present,
//!   the other formats).
//!
//! `TAGPILOT_BLESS=1 cargo test --test it golden::` rewrites the report files (never a `rewrite`
//! case's `out/`, which states intent and is edited by hand); review the diff before committing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tagpilot::registry::MemoryRegistry;
use tagpilot::{config, engine, plan, policy, report};

/// The directory of one golden case.
pub fn case_dir(suite: &str, case: &str) -> PathBuf {
    suite_dir(suite).join(case)
}

fn suite_dir(suite: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(suite)
}

/// Every case of a suite, sorted.
pub fn cases(suite: &str) -> Vec<PathBuf> {
    let dir = suite_dir(suite);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    assert!(!cases.is_empty(), "no golden cases in {}", dir.display());
    cases
}

/// Every file under `dir`, relative path → bytes.
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    for entry in walkdir::WalkDir::new(dir).sort_by_file_name() {
        let entry = entry.unwrap();
        if entry.file_type().is_file() {
            let rel = entry
                .path()
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            out.insert(rel, std::fs::read(entry.path()).unwrap());
        }
    }
    out
}

fn copy_tree(from: &Path, to: &Path) {
    for (rel, bytes) in tree(from) {
        let dest = to.join(&rel);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::write(dest, bytes).unwrap();
    }
}

/// `TAGPILOT_BLESS` is set: expected files are rewritten from the actual results.
pub fn bless() -> bool {
    std::env::var_os("TAGPILOT_BLESS").is_some()
}

/// Compares `actual` with the file at `path` (or writes it when blessing). Returns a failure text.
pub fn check_text(path: &Path, actual: &str) -> Option<String> {
    if bless() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, actual).unwrap();
        return None;
    }
    let expected = std::fs::read_to_string(path).unwrap_or_default();
    (expected != actual).then(|| {
        format!(
            "{} differs:\n{}",
            path.display(),
            similar::TextDiff::from_lines(&expected, actual)
                .unified_diff()
                .header("expected", "actual")
        )
    })
}

/// [`check_text`], failing the test on a difference.
pub fn assert_text(path: &Path, actual: &str) {
    if let Some(failure) = check_text(path, actual) {
        panic!("{failure}");
    }
}

/// Plans (or, with `write`, applies) the local directory `root` through the engine, as
/// `tagpilot plan`/`apply` do: the report shows the local files the cycle planned.
async fn cycle(
    root: &Path,
    config: &config::Config,
    policies: &[policy::ImagePolicy],
    registry: &MemoryRegistry,
    write: bool,
) -> plan::Plan {
    let input = engine::Input {
        config,
        policies,
        broken_policies: &[],
        local: Some(root.to_path_buf()),
        cluster: None,
    };
    let context = engine::Context {
        registry,
        cache: None,
        progress: &(),
        cancel: Default::default(),
        state: None,
        clock: &tagpilot::clock::SystemClock,
        freeze: None,
    };
    let options = engine::Options {
        dry_run: !write,
        diff: true,
        ..Default::default()
    };
    let cycle = engine::run(&input, &context, options)
        .await
        .expect("engine cycle");
    plan::Plan {
        files: cycle.local_files,
        ..cycle.plan
    }
}

/// One `rewrite` case, end to end through the engine: plan (nothing written, every rendering
/// as expected), apply (the tree is `out/`), plan again (nothing left to do).
async fn run_case(case: &Path) -> Vec<String> {
    let mut failures = Vec::new();
    let work = tempfile::tempdir().unwrap();
    copy_tree(&case.join("in"), work.path());
    let registry_yaml = std::fs::read_to_string(case.join("registry.yaml")).unwrap_or_default();
    let registry = MemoryRegistry::from_yaml(&registry_yaml).expect("registry.yaml");

    let config = config::load(&work.path().join("tagpilot.yaml")).expect("tagpilot.yaml");
    let policies = policy::load(&config).expect("policies");
    let planned = cycle(work.path(), &config, &policies, &registry, false).await;

    // Plan mode writes nothing.
    if tree(work.path()) != tree(&case.join("in")) {
        failures.push("plan changed files".to_string());
    }
    // Policy files are named as loaded, under the temporary root: as the case names them.
    let root = format!("{}/", work.path().display());
    let relative = |text: String| text.replace(&root, "");
    failures.extend(check_text(
        &case.join("plan.txt"),
        &relative(report::table(&planned)),
    ));
    for (file, format) in [
        ("plan.md", report::Format::Markdown),
        ("plan.json", report::Format::Json),
    ] {
        if case.join(file).exists() {
            failures.extend(check_text(
                &case.join(file),
                &relative(report::render(&planned, format).expect("the report renders")),
            ));
        }
    }
    if case.join("plan.diff").exists() {
        failures.extend(check_text(&case.join("plan.diff"), &report::diff(&planned)));
    }

    cycle(work.path(), &config, &policies, &registry, true).await;
    let actual = tree(work.path());
    let expected = tree(&case.join("out"));
    for (rel, want) in &expected {
        match actual.get(rel) {
            None => failures.push(format!("out/{rel} expected but missing")),
            Some(got) if got != want => failures.push(format!(
                "out/{rel} differs:\n{}",
                similar::TextDiff::from_lines(
                    &*String::from_utf8_lossy(want),
                    &*String::from_utf8_lossy(got)
                )
                .unified_diff()
                .header("expected", "actual")
            )),
            Some(_) => {}
        }
    }
    for rel in actual.keys().filter(|k| !expected.contains_key(*k)) {
        failures.push(format!("{rel} is in the result but not in out/"));
    }

    // Idempotence: a second plan over the applied tree finds nothing to do.
    let again = cycle(work.path(), &config, &policies, &registry, false).await;
    if again.has_changes() {
        failures.push(format!(
            "second plan still has changes:\n{}",
            report::table(&again)
        ));
    }
    failures
}

/// Fails the test with every failure of one golden case, named by suite and case.
pub fn assert_case(suite: &str, case: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "golden case {suite}/{case}: {} failure(s):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// One test per case of a suite, so a failure names its case and the others still run, plus
/// a test that the list is exactly the suite's directories (a case without a test would never
/// run). `$run` is the suite's runner: `async fn(&Path) -> Vec<String>` of failures.
macro_rules! golden_suite {
    ($suite:literal, $run:path, $every:ident, { $($test:ident => $case:literal,)* }) => {
        $(
            #[tokio::test]
            async fn $test() {
                let case = $crate::golden::case_dir($suite, $case);
                $crate::golden::assert_case($suite, $case, $run(&case).await);
            }
        )*

        #[test]
        fn $every() {
            let on_disk: Vec<String> = $crate::golden::cases($suite)
                .iter()
                .map(|c| c.file_name().unwrap().to_string_lossy().into_owned())
                .collect();
            assert_eq!(on_disk, [$($case),*], "list each case of {} in its golden_suite!", $suite);
        }
    };
}
pub(crate) use golden_suite;

golden_suite! { "rewrite", run_case, every_rewrite_case_has_its_test, {
    rewrite_anchors => "anchors",
    rewrite_bom => "bom",
    rewrite_ci_placeholders => "ci-placeholders",
    rewrite_comments => "comments",
    rewrite_crlf => "crlf",
    rewrite_cronjob => "cronjob",
    rewrite_datadog_version_label => "datadog-version-label",
    rewrite_deployment => "deployment",
    rewrite_findings => "findings",
    rewrite_flux_marker => "flux-marker",
    rewrite_helm_chart_templates => "helm-chart-templates",
    rewrite_helm_chart_values => "helm-chart-values",
    rewrite_helm_explicit_paths => "helm-explicit-paths",
    rewrite_helm_map => "helm-map",
    rewrite_helm_string => "helm-string",
    rewrite_helm_template_left_alone => "helm-template-left-alone",
    rewrite_init_ephemeral_containers => "init-ephemeral-containers",
    rewrite_kustomize_component_placeholders => "kustomize-component-placeholders",
    rewrite_kustomize_digest_entries => "kustomize-digest-entries",
    rewrite_kustomize_images => "kustomize-images",
    rewrite_kustomize_missing_newtag => "kustomize-missing-newtag",
    rewrite_multi_doc => "multi-doc",
    rewrite_non_ascii => "non-ascii",
    rewrite_quoting => "quoting",
    rewrite_required_platforms => "required-platforms",
    rewrite_rollout => "rollout",
    rewrite_tagpilot_marker => "tagpilot-marker",
    rewrite_version_labels_config => "version-labels-config",
    rewrite_version_labels_cronjob => "version-labels-cronjob",
    rewrite_version_labels_deployment => "version-labels-deployment",
    rewrite_version_labels_rollout => "version-labels-rollout",
} }
