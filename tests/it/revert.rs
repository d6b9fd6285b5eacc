//! The revert writer (`writeback::revert`, issue 19) on real git remotes (file:// and git
//! http-backend), and in pull-request mode against the GitHub and GitLab API doubles.
//!
//! Every scenario starts from tagpilot's update commit (api 1.0.0 → 1.1.0, with its
//! `Tagpilot-Policy:` trailer) on `main`, followed by whatever a person did since.

use serde_json::{Value, json};
use tagpilot::change::Change;
use tagpilot::git::{RepoCache, RepositoryConfig};
use tagpilot::plan::revert::LeftReason;
use tagpilot::writeback::revert::{FailedUpdate, RevertError, RevertOutcome, RevertWrite, revert};
use wiremock::matchers::{body_partial_json, query_param};
use wiremock::{Mock, MockServer};

use crate::support::azure_devops::{self, AzureDevOpsApi};
use crate::support::bitbucket_cloud::{self, BitbucketCloudApi};
use crate::support::bitbucket_dc::{self, BitbucketDataCenterApi};
use crate::support::forge_double::{ForgeDouble, GitHubApi, GitLabApi};
use crate::support::git::*;
use crate::support::gitea::{self, GiteaApi};
use crate::support::{github, gitlab};

const FAILURE: &str =
    "health Degraded after the sync: Deployment \"api\" exceeded its progress deadline";
const FIELD: &str = "Deployment/api container api";

fn config(yaml: &str) -> RepositoryConfig {
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn failed_change(image: &str, field: &str, line: usize, from: &str, to: &str) -> Change {
    Change {
        repository: Some("manifests".into()),
        policy: image.rsplit('/').next().unwrap().into(),
        image: image.into(),
        file: DEPLOYMENT_PATH.into(),
        line,
        field: field.into(),
        strategy: "semver",
        from: from.into(),
        to: to.into(),
        source: None,
        labels: Vec::new(),
        promotion: None,
    }
}

/// tagpilot's update on `main`: api 1.0.0 → 1.1.0 (and, with `web`, web 2.0.0 → 2.1.0), as
/// tagpilot commits it. Returns what failed with it.
fn tagpilot_updates(origin: &BareRepo, web: bool) -> FailedUpdate {
    let mut text = DEPLOYMENT.replace("api:1.0.0", "api:1.1.0");
    let mut changes = vec![failed_change(
        "registry.example/api",
        FIELD,
        API_LINE,
        "1.0.0",
        "1.1.0",
    )];
    if web {
        text = text.replace("web:2.0.0", "web:2.1.0");
        changes.push(failed_change(
            "registry.example/web",
            "Deployment/api container web",
            WEB_LINE,
            "2.0.0",
            "2.1.0",
        ));
    }
    let trailers: String = changes
        .iter()
        .map(|c| format!("\nTagpilot-Policy: {}", c.policy))
        .collect();
    origin.push_change(
        "main",
        DEPLOYMENT_PATH,
        &text,
        &format!("chore(images): update images\n{trailers}"),
    );
    // The cluster's Applications: `shop` deploys the file, `web` another path.
    let app = |name: &str, path: &str| {
        let text = format!(
            "apiVersion: argoproj.io/v1alpha1\nkind: Application\nmetadata: {{name: {name}, namespace: argocd}}\n\
             spec:\n  destination: {{name: prod, namespace: {name}}}\n  \
             source: {{repoURL: '{}', path: {path}}}\n",
            origin.file_url()
        );
        tagpilot::application::read_documents(std::path::Path::new("app.yaml"), &text)
            .unwrap()
            .remove(0)
    };
    FailedUpdate {
        changes,
        commit: origin.rev("main").unwrap(),
        application: "argocd/shop".into(),
        failure: FAILURE.into(),
        deployers: vec![app("shop", "apps/api"), app("web", "apps/web")],
    }
}

/// A person's edit since the update: `edit` applied to the file on `main`.
fn person_edits(origin: &BareRepo, edit: impl FnOnce(&str) -> String) {
    let text = edit(&origin.show("main", DEPLOYMENT_PATH));
    origin.push_change("main", DEPLOYMENT_PATH, &text, "shop: team label");
}

fn add_label(text: &str) -> String {
    text.replacen("  name: api\n", "  name: api\n  labels: {team: shop}\n", 1)
}

async fn run_revert(
    cache: &tempfile::TempDir,
    repo: &RepositoryConfig,
    failed: &FailedUpdate,
) -> RevertOutcome {
    let cache = RepoCache::new(cache.path());
    revert(&cache, repo, failed).await.expect("revert")
}

/// A trailer's values in `rev`'s message, as git reads the message's trailer block.
fn trailer(origin: &BareRepo, rev: &str, key: &str) -> String {
    git(
        &origin.path(),
        &[
            "log",
            "-1",
            &format!("--format=%(trailers:key={key},valueonly,separator=%x2C)"),
            rev,
        ],
    )
}

#[tokio::test]
async fn push_mode_restores_only_the_field_and_keeps_a_persons_later_edit_of_the_file() {
    set_test_secrets();
    let origin = BareRepo::new();
    let failed = tagpilot_updates(&origin, false);
    person_edits(&origin, add_label);
    let persons = origin.rev("main").unwrap();
    let repo = config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\n",
        origin.file_url()
    ));
    let cache = tempfile::tempdir().unwrap();

    let outcome = run_revert(&cache, &repo, &failed).await;

    let RevertWrite::Pushed {
        branch,
        commit,
        attempts,
    } = &outcome.written
    else {
        panic!("pushed: {outcome:?}");
    };
    assert_eq!((branch.as_str(), *attempts), ("main", 1));
    assert_eq!(origin.rev("main").as_ref(), Some(commit));
    assert_eq!(origin.rev("main~1").unwrap(), persons, "one commit on top");
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        add_label(DEPLOYMENT),
        "1.0.0 is back, the person's label stays"
    );
    assert_eq!(outcome.left, []);
    assert_eq!(outcome.reverted.len(), 1);
    assert_eq!(
        (
            outcome.reverted[0].from.as_str(),
            outcome.reverted[0].to.as_str()
        ),
        ("1.1.0", "1.0.0")
    );
    // Recognised as tagpilot's, naming the commit it reverts, in one trailer block.
    assert_eq!(trailer(&origin, "main", "Tagpilot-Policy"), "api");
    assert_eq!(trailer(&origin, "main", "Tagpilot-Revert"), failed.commit);
    let message = git(&origin.path(), &["log", "-1", "--format=%B", "main"]);
    assert!(
        message.starts_with("revert(images): undo ") && message.contains(FAILURE),
        "{message}"
    );
    assert!(
        message.contains("- registry.example/api: 1.1.0 -> 1.0.0 (apps/api/deployment.yaml)"),
        "{message}"
    );
    // It names the Applications it deploys, as an update does.
    assert!(
        message.contains("\n\nArgo CD Applications:\n- argocd/shop -> prod, namespace shop\n"),
        "{message}"
    );
    assert_eq!(
        trailer(&origin, "main", "Tagpilot-Application"),
        "argocd/shop"
    );
}

#[tokio::test]
async fn a_field_a_person_moved_on_is_left_and_reported_while_the_other_goes_back() {
    set_test_secrets();
    let origin = BareRepo::new();
    let failed = tagpilot_updates(&origin, true);
    person_edits(&origin, |t| t.replace("api:1.1.0", "api:1.2.0"));
    let repo = config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\n",
        origin.file_url()
    ));
    let cache = tempfile::tempdir().unwrap();

    let outcome = run_revert(&cache, &repo, &failed).await;

    assert!(
        matches!(outcome.written, RevertWrite::Pushed { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        DEPLOYMENT.replace("api:1.0.0", "api:1.2.0"),
        "web back at 2.0.0, api left at the person's 1.2.0"
    );
    assert_eq!(outcome.left.len(), 1);
    let left = &outcome.left[0];
    assert_eq!(
        left.reason,
        LeftReason::MovedOn {
            now: "1.2.0".into()
        }
    );
    let said = left.to_string();
    assert!(
        said.starts_with(&format!("{DEPLOYMENT_PATH} ({FIELD}): holds 1.2.0")),
        "{said}"
    );

    // Once everything moved on, nothing is written at all.
    person_edits(&origin, |t| t.replace("web:2.0.0", "web:2.2.0"));
    let before = origin.rev("main").unwrap();
    let outcome = run_revert(&cache, &repo, &failed).await;
    assert_eq!(outcome.written, RevertWrite::Nothing);
    assert_eq!(outcome.left.len(), 2);
    assert_eq!(origin.rev("main").unwrap(), before);
}

/// Over git http-backend: between tagpilot's fetch and its push, a person's commit lands on
/// `main` (a pre-receive hook moves the branch on the first push). The push loses the race;
/// tagpilot fetches, plans the revert again on the new tip and pushes on top of the person's
/// commit, which stays.
#[tokio::test]
async fn http_a_push_race_is_retried_on_the_new_tip_and_the_persons_commit_stays() {
    set_test_secrets();
    let origin = BareRepo::new();
    let failed = tagpilot_updates(&origin, false);
    // The person's commit, made ahead on a side branch so that the hook only moves `main`.
    let work = tempfile::tempdir().unwrap();
    let bare = origin.path();
    git(
        work.path(),
        &["clone", "-q", "-b", "main", bare.to_str().unwrap(), "w"],
    );
    let w = work.path().join("w");
    let text = add_label(&std::fs::read_to_string(w.join(DEPLOYMENT_PATH)).unwrap());
    std::fs::write(w.join(DEPLOYMENT_PATH), &text).unwrap();
    git(&w, &["commit", "-q", "-am", "shop: team label"]);
    git(&w, &["push", "-q", "origin", "HEAD:refs/heads/person"]);
    let persons = origin.rev("person").unwrap();
    let seen = origin.dir.path().join("hook-runs");
    write_executable(
        &origin.path().join("hooks/pre-receive"),
        &format!(
            "#!/bin/sh\nif [ ! -e '{seen}' ]; then\n  touch '{seen}'\n  \
             unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n  \
             git update-ref refs/heads/main refs/heads/person\nfi\nexit 0\n",
            seen = seen.display()
        ),
    );
    let server = HttpGitServer::start(origin.dir.path());
    let repo = config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\nauth: {{username: {HTTP_USER}, passwordEnv: {HTTP_PASSWORD_ENV}}}\n",
        server.url("origin.git")
    ));
    let cache = tempfile::tempdir().unwrap();

    let outcome = run_revert(&cache, &repo, &failed).await;

    let RevertWrite::Pushed { attempts, .. } = outcome.written else {
        panic!("pushed: {outcome:?}");
    };
    assert_eq!(attempts, 2, "the lost race is retried");
    assert_eq!(origin.rev("main~1").unwrap(), persons);
    assert_eq!(origin.show("main", DEPLOYMENT_PATH), add_label(DEPLOYMENT));
    assert_eq!(trailer(&origin, "main", "Tagpilot-Revert"), failed.commit);
}

// === Pull-request mode, once per forge ===

/// How each forge's double sees a revert's pull request opened with labels.
trait RevertForge: ForgeDouble {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, labels: &[&str]);
    /// The listing of open proposals from `branch` into `main`, after opening one was refused.
    fn list_open_from(branch: &str, response: Value) -> Mock;
}

impl RevertForge for GitHubApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, labels: &[&str]) {
        Self::create_request_from(branch)
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
        // GitHub labels a pull request with a call of its own.
        github::expect_labels(server, number, json!(labels)).await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", github::PULLS)
            .and(query_param("state", "open"))
            .and(query_param("head", format!("acme:{branch}")))
            .respond_with(github::ok_json(response))
    }
}

impl RevertForge for GitLabApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, labels: &[&str]) {
        Self::create_request_from(branch)
            .and(body_partial_json(json!({"labels": labels.join(",")})))
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", gitlab::MRS)
            .and(query_param("state", "opened"))
            .and(query_param("source_branch", branch))
            .and(query_param("target_branch", "main"))
            .respond_with(github::ok_json(response))
    }
}

impl RevertForge for GiteaApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, labels: &[&str]) {
        Self::create_request_from(branch)
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
        // Labels go by id, once it exists: the repository's are read and the missing made.
        gitea::expect_labels_added(server, number, labels).await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        gitea::open_from(branch, response)
    }
}

impl RevertForge for BitbucketCloudApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, _labels: &[&str]) {
        // Bitbucket has no labels: the revert opens without them, and says so.
        Self::create_request_from(branch)
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        Self::authed("GET", bitbucket_cloud::PULLS)
            .and(query_param("state", "OPEN"))
            .and(query_param(
                "q",
                bitbucket_cloud::from_branch_into_main(branch),
            ))
            .respond_with(github::ok_json(bitbucket_cloud::page(response)))
    }
}

impl RevertForge for AzureDevOpsApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, labels: &[&str]) {
        let labels: Vec<Value> = labels.iter().map(|l| json!({ "name": l })).collect();
        Self::create_request_from(branch)
            .and(body_partial_json(json!({ "labels": labels })))
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        azure_devops::from_branch("active", branch, response)
    }
}

impl RevertForge for BitbucketDataCenterApi {
    async fn expect_open(server: &MockServer, branch: &str, number: u64, _labels: &[&str]) {
        // Bitbucket has no labels: the revert opens without them, and says so.
        Self::create_request_from(branch)
            .respond_with(Self::opened(number))
            .expect(1)
            .mount(server)
            .await;
    }

    fn list_open_from(branch: &str, response: Value) -> Mock {
        bitbucket_dc::open_from(branch, response)
    }
}

async fn pull_request_mode_opens_one_labelled_revert_from_a_tagpilot_branch_and_takes_it_over_when_seen_again<
    F: RevertForge,
>() {
    set_test_secrets();
    let origin = BareRepo::new();
    let failed = tagpilot_updates(&origin, false);
    person_edits(&origin, add_label);
    let main = origin.rev("main").unwrap();
    let server = MockServer::start().await;
    // GitHub gets the default label, GitLab the configured ones.
    let (extra, labels): (&str, &[&str]) = if F::NAME == "GitHub" {
        ("", &["tagpilot/revert"])
    } else {
        (
            "  revertLabels: [rollback, urgent]\n",
            &["rollback", "urgent"],
        )
    };
    let repo = config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\nforge:\n  {}\nwrite:\n  mode: pull-request\n{extra}",
        origin.file_url(),
        F::forge_yaml(&server.uri()),
    ));
    let branch = format!("tagpilot/revert-{}", &failed.commit[..12]);
    F::expect_open(&server, &branch, 7, labels).await;
    let cache = tempfile::tempdir().unwrap();

    let outcome = run_revert(&cache, &repo, &failed).await;

    let RevertWrite::PullRequest {
        number,
        url,
        branch: from,
        commit,
        taken_over,
        ..
    } = &outcome.written
    else {
        panic!("a pull request: {outcome:?}");
    };
    assert_eq!(
        (*number, url.as_str(), *taken_over),
        (7, F::url(7).as_str(), false)
    );
    assert_eq!(from, &branch);
    assert_eq!(origin.rev(&branch).as_ref(), Some(commit));
    assert_eq!(
        origin.rev(&format!("{branch}~1")).unwrap(),
        main,
        "on the base"
    );
    assert_eq!(
        origin.rev("main").unwrap(),
        main,
        "the base is never pushed"
    );
    assert_eq!(origin.show(&branch, DEPLOYMENT_PATH), add_label(DEPLOYMENT));
    assert_eq!(trailer(&origin, &branch, "Tagpilot-Revert"), failed.commit);

    let requests = server.received_requests().await.unwrap();
    let opened: Value = requests
        .iter()
        .find(|r| r.method.as_str() == "POST" && r.url.path() == F::proposals())
        .map(|r| serde_json::from_slice(&r.body).unwrap())
        .expect("opened");
    let body = opened[F::BODY].as_str().unwrap();
    assert!(
        body.contains(&format!("> {FAILURE}")),
        "quotes the health message: {body}"
    );
    assert!(body.contains("`argocd/shop`"), "{body}");
    assert!(
        body.contains("| api | `registry.example/api` | `1.0.0` | `1.1.0` |"),
        "says what failed: {body}"
    );
    assert!(body.contains(&format!("This {}", F::NOUN)), "{body}");
    assert!(
        body.contains("**Argo CD Applications** that deploy these files")
            && body
                .contains("| `argocd/shop` | `prod` | `shop` | 1 | `apps/api/deployment.yaml` |")
            && !body.contains("argocd/web"),
        "names the Applications it deploys: {body}"
    );
    server.verify().await;
    server.reset().await;

    // The same failure seen again: tagpilot's branch already holds the revert, so nothing is
    // pushed, and the forge's "already exists" takes the open one over instead of a second.
    let title = "revert(images): api to 1.0.0";
    F::create_request_from(&branch)
        .respond_with(F::already_exists())
        .expect(1)
        .mount(&server)
        .await;
    let listed = F::from_branch(F::proposal(7, title, body), &branch);
    F::list_open_from(&branch, json!([listed]))
        .expect(1)
        .mount(&server)
        .await;
    F::expect_edit_with(&server, 7, json!({ "title": title })).await;
    F::expect_additions(&server, 7, labels, &[], &[]).await;

    let again = run_revert(&cache, &repo, &failed).await;

    let RevertWrite::PullRequest {
        number: again_number,
        commit: again_commit,
        taken_over,
        ..
    } = &again.written
    else {
        panic!("a pull request: {again:?}");
    };
    assert_eq!((*again_number, *taken_over), (7, true), "no second one");
    assert_eq!(again_commit, commit, "the branch is not pushed again");
    assert_eq!(origin.rev(&branch).as_ref(), Some(commit));
    server.verify().await;
}

async fn a_revert_branch_holding_a_persons_commit_is_not_overwritten<F: RevertForge>() {
    set_test_secrets();
    let origin = BareRepo::new();
    let failed = tagpilot_updates(&origin, false);
    let branch = format!("tagpilot/revert-{}", &failed.commit[..12]);
    // A person made the revert branch first: their commit, not tagpilot's.
    let work = tempfile::tempdir().unwrap();
    let bare = origin.path();
    git(
        work.path(),
        &["clone", "-q", "-b", "main", bare.to_str().unwrap(), "w"],
    );
    let w = work.path().join("w");
    std::fs::write(w.join("README.md"), "by hand\n").unwrap();
    git(&w, &["commit", "-q", "-am", "revert by hand"]);
    git(
        &w,
        &["push", "-q", "origin", &format!("HEAD:refs/heads/{branch}")],
    );
    let persons = origin.rev(&branch).unwrap();
    // No call to the forge is scripted: opening one would fail the run.
    let server = MockServer::start().await;
    let repo = config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\nforge:\n  {}\nwrite:\n  mode: pull-request\n",
        origin.file_url(),
        F::forge_yaml(&server.uri()),
    ));
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());

    let error = revert(&cache, &repo, &failed).await.unwrap_err();

    assert!(
        matches!(error, RevertError::BranchTaken { .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "repository `manifests`: branch `{branch}` holds commit {persons}, which tagpilot did \
             not make; the revert of {} is not pushed over it",
            failed.commit
        )
    );
    assert_eq!(origin.rev(&branch).unwrap(), persons, "left as it was");
    let requests = server.received_requests().await.unwrap();
    assert!(
        !requests.iter().any(|r| r.method.as_str() == "POST"),
        "nothing opened: {requests:?}"
    );
}

macro_rules! on_each_forge {
    ($($scenario:ident),+ $(,)?) => {
        mod github_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::forge_double::GitHubApi>().await;
                }
            )+
        }
        mod gitlab_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::forge_double::GitLabApi>().await;
                }
            )+
        }
        mod azure_devops_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::azure_devops::AzureDevOpsApi>().await;
                }
            )+
        }
        mod bitbucket_data_center_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::bitbucket_dc::BitbucketDataCenterApi>().await;
                }
            )+
        }
        mod bitbucket_cloud_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::bitbucket_cloud::BitbucketCloudApi>().await;
                }
            )+
        }
        mod gitea_forge {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario::<crate::support::gitea::GiteaApi>().await;
                }
            )+
        }
    };
}

on_each_forge!(
    pull_request_mode_opens_one_labelled_revert_from_a_tagpilot_branch_and_takes_it_over_when_seen_again,
    a_revert_branch_holding_a_persons_commit_is_not_overwritten,
);
