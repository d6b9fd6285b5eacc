//! The renderings of one report, from its model.

use super::*;
use crate::plan::{DiffTarget, PullRequestSummary};

fn with_pull_request(warnings: Vec<String>) -> Vec<RepositoryOutcome> {
    vec![RepositoryOutcome {
        repository: "manifests".into(),
        url: "https://git.example/acme/manifests.git".into(),
        branch: "main".into(),
        status: crate::plan::RepositoryStatus::PullRequests,
        sources: vec![],
        commits: vec![],
        pull_requests: vec![PullRequestSummary {
            group: "api".into(),
            branch: "tagpilot/api".into(),
            status: "opened".into(),
            number: Some(7),
            reference: Some("#7".into()),
            url: None,
            warnings,
        }],
        error: None,
    }]
}

fn file(repository: &str, group: Option<&str>, path: &str) -> DiffTarget {
    DiffTarget::RepositoryFile {
        repository: repository.into(),
        group: group.map(Into::into),
        path: path.into(),
    }
}

#[test]
fn diff_names_each_repository_once_and_shows_new_files_from_dev_null() {
    let plan = Plan {
        diffs: vec![
            crate::plan::TargetDiff {
                target: file("manifests", None, "apps/a.yaml"),
                original: Some("image: a:1\n".into()),
                updated: "image: a:2\n".into(),
            },
            crate::plan::TargetDiff {
                target: file("manifests", None, "apps/.argocd-source-web.yaml"),
                original: None,
                updated: "kustomize:\n".into(),
            },
            crate::plan::TargetDiff {
                target: file("manifests", Some("api"), "apps/a.yaml"),
                original: Some("image: a:1\n".into()),
                updated: "image: a:3\n".into(),
            },
            crate::plan::TargetDiff {
                target: DiffTarget::Application {
                    id: "argocd/shop".into(),
                },
                original: Some("[1]\n".into()),
                updated: "[2]\n".into(),
            },
        ],
        ..Plan::default()
    };
    assert_eq!(
        diff(&plan),
        "# repository manifests
--- a/apps/a.yaml
+++ b/apps/a.yaml
@@ -1 +1 @@
-image: a:1
+image: a:2
--- /dev/null
+++ b/apps/.argocd-source-web.yaml
@@ -0,0 +1 @@
+kustomize:
# repository manifests, pull request for api
--- a/apps/a.yaml
+++ b/apps/a.yaml
@@ -1 +1 @@
-image: a:1
+image: a:3
# Application argocd/shop: the merge patch (write-back-method argocd)
--- a/Application argocd/shop (live)
+++ b/Application argocd/shop (patched)
@@ -1 +1 @@
-[1]
+[2]
"
    );
}

#[test]
fn pull_request_warnings_reach_every_format() {
    let (plan, repositories) = (
        Plan::default(),
        with_pull_request(vec![
            "reviewer \"ghost\" is neither a user nor a team".into(),
        ]),
    );
    let report = Report::new(&plan, None).with_repositories(&repositories);
    let table = report.table();
    assert!(table.contains("api (tagpilot/api) #7: opened"), "{table}");
    assert!(table.contains("warning: reviewer \"ghost\""), "{table}");
    assert!(report.json().unwrap().contains("\"warnings\""));
    assert!(report.markdown().contains("ghost"));
    // No warnings, no noise.
    let quiet = with_pull_request(vec![]);
    assert!(
        !Report::new(&plan, None)
            .with_repositories(&quiet)
            .json()
            .unwrap()
            .contains("\"warnings\"")
    );
}

fn application(problem: &str) -> ApplicationReport {
    ApplicationReport {
        application: "argocd/shop".into(),
        origin: "cluster".into(),
        configured_by: None,
        updater: None,
        images_managed: 0,
        images: vec![],
        skipped_annotations: vec![],
        problems: vec![problem.into()],
        patch: None,
    }
}

#[test]
fn the_applications_section_is_in_every_format_from_the_one_model() {
    let plan = Plan::default();
    let apps = [application("no image-list annotation")];
    let report = Report::new(&plan, Some(&apps));
    let json = report.json().unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["applications"][0]["application"], "argocd/shop");
    assert_eq!(value["summary"]["changes"], 0);
    // The model's order: the Applications before the summary that closes the report.
    assert!(
        json.find("\"applications\"") < json.find("\"summary\""),
        "{json}"
    );
    let section =
        "\nApplications:\n  argocd/shop (cluster)\n    problem: no image-list annotation\n";
    assert!(report.table().ends_with(section), "{}", report.table());
    // Markdown as the rest of the Markdown report: a heading, lists (and tables of images).
    let section = "\n### Applications\n\n#### `argocd/shop` (cluster)\n\n- Problem: no \
                   image-list annotation\n";
    assert!(
        report.markdown().ends_with(section),
        "{}",
        report.markdown()
    );
    // Without Applications configured, no key at all.
    assert!(
        !Report::new(&plan, None)
            .json()
            .unwrap()
            .contains("applications")
    );
}
