//! Pull-request mode end to end: the git side on a real bare repository over file://, the
//! GitHub and GitLab APIs as `wiremock` doubles scripted as exact scenarios. Every mock states
//! how often it must be called; a request nobody scripted gets wiremock's 404, which fails the
//! run, so each scenario also shows that nothing unexpected was sent.
//!
//! A scenario both forges share is written once, generic over `ForgeDouble`
//! (`support/forge_double.rs`), and `on_each_forge!` runs it as `github::<scenario>` and
//! `gitlab::<scenario>`. Most scenarios plan with a scripted `ApiPlanner`; the override-file
//! write-back runs the whole engine (Applications from git, real `helm`), so that what Argo CD
//! will deploy reaches the comment. What only one forge has (a GitHub App, GitHub Enterprise's
//! GraphQL, GitLab's draft prefix and compare API) stays a test of its own further down.

use std::path::Path;

use serde_json::{Value, json};
use tagpilot::affected::{AffectedApplication, Rendered, RenderedResource};
use tagpilot::application::Destination;
use tagpilot::change::{Change, ChangeGroup};
use tagpilot::engine::Cycle;
use tagpilot::forge::{self, Action, ForgeError, ForgeOutcome, Marker};
use tagpilot::git::{CommitFiles, Planned, Replanner, RepoCache, RepositoryConfig};
use tagpilot::provenance::{SourceChange, source_repository};
use tagpilot::registry::MemoryRegistry;
use wiremock::matchers::{body_partial_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use crate::support::forge_double::{ForgeDouble, GitHubApi, GitLabApi};
use crate::support::git::*;
use crate::support::github::*;
use crate::support::gitlab::*;

const TOKEN: &str = HTTP_PASSWORD;

/// Sets the API image line to `tag`, as one group `api`.
struct ApiPlanner {
    tag: &'static str,
    complete: bool,
    /// The image's source repository and its revisions before and after, as labels say.
    source: Option<(&'static str, &'static str, &'static str)>,
    /// The Argo CD Applications the engine names for the group.
    applications: Vec<AffectedApplication>,
}

/// What changed in the image's source, as the engine describes it: `source` at `from`, then
/// at `to`, compared at `compare_url`.
fn source_change(source: &str, from: &str, to: &str, compare_url: String) -> Box<SourceChange> {
    Box::new(SourceChange {
        repository: source_repository(source).expect("a GitHub or GitLab repository"),
        source: source.into(),
        revision_from: from.into(),
        revision_to: to.into(),
        compare_url,
    })
}

fn wants(tag: &'static str) -> ApiPlanner {
    ApiPlanner {
        tag,
        complete: true,
        source: None,
        applications: Vec::new(),
    }
}

impl ApiPlanner {
    fn groups(&self, files: &CommitFiles) -> std::io::Result<Vec<ChangeGroup>> {
        let text = read_text(files, DEPLOYMENT_PATH)?;
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let old = lines[API_LINE - 1].clone();
        let new = format!("          image: registry.example/api:{}", self.tag);
        if old == new {
            return Ok(Vec::new());
        }
        lines[API_LINE - 1] = new;
        Ok(vec![ChangeGroup {
            applications: self.applications.clone(),
            key: "api".into(),
            files: [(DEPLOYMENT_PATH.into(), lines.join("\n") + "\n")]
                .into_iter()
                .collect(),
            changes: vec![Change {
                policy: "api".into(),
                image: "registry.example/api".into(),
                file: DEPLOYMENT_PATH.into(),
                line: API_LINE,
                from: old.rsplit(':').next().unwrap().to_owned(),
                to: self.tag.into(),
                strategy: "semver",
                source: self
                    .source
                    .map(|(s, f, t)| source_change(s, f, t, format!("{s}/-/compare/{f}...{t}"))),
                ..Default::default()
            }],
        }])
    }
}

impl Replanner for ApiPlanner {
    type Plan = ();
    type Error = std::io::Error;

    async fn plan(
        &self,
        _repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> std::io::Result<Planned<()>> {
        Ok(Planned {
            complete: self.complete,
            ..Planned::groups(self.groups(files)?)
        })
    }
}

/// Two groups: `api` to 1.2.0 and `web` to 2.1.0, each changing its own line only.
struct ApiAndWeb;

impl Replanner for ApiAndWeb {
    type Plan = ();
    type Error = std::io::Error;

    async fn plan(
        &self,
        _repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> std::io::Result<Planned<()>> {
        let text = read_text(files, DEPLOYMENT_PATH)?;
        let group = |key: &str, line: usize, to: &str| {
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let old = lines[line - 1].clone();
            lines[line - 1] = format!("          image: registry.example/{key}:{to}");
            ChangeGroup {
                applications: Vec::new(),
                key: key.into(),
                files: [(DEPLOYMENT_PATH.into(), lines.join("\n") + "\n")]
                    .into_iter()
                    .collect(),
                changes: vec![Change {
                    policy: key.into(),
                    image: format!("registry.example/{key}"),
                    file: DEPLOYMENT_PATH.into(),
                    line,
                    from: old.rsplit(':').next().unwrap().to_owned(),
                    to: to.into(),
                    strategy: "semver",
                    ..Default::default()
                }],
            }
        };
        Ok(Planned::groups(vec![
            group("api", API_LINE, "1.2.0"),
            group("web", WEB_LINE, "2.1.0"),
        ]))
    }
}

struct Setup {
    repo: BareRepo,
    server: MockServer,
    cache: tempfile::TempDir,
}

async fn setup() -> Setup {
    setup_with(BareRepo::new()).await
}

/// [`setup`] over `repo` instead of the seeded one.
async fn setup_with(repo: BareRepo) -> Setup {
    set_test_secrets();
    Setup {
        repo,
        server: MockServer::start().await,
        cache: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    /// The repository with the forge `F`'s double at this setup's server.
    fn config_for<F: ForgeDouble>(&self, write_extra: &str) -> RepositoryConfig {
        self.config(&F::forge_yaml(&self.server.uri()), write_extra)
    }

    fn github(&self, write_extra: &str) -> RepositoryConfig {
        self.config_for::<GitHubApi>(write_extra)
    }

    fn gitlab(&self, write_extra: &str) -> RepositoryConfig {
        self.config_for::<GitLabApi>(write_extra)
    }

    fn config(&self, forge: &str, write_extra: &str) -> RepositoryConfig {
        let yaml = format!(
            "name: manifests\nurl: '{}'\nbranch: main\nforge:\n  {forge}\nwrite:\n  mode: pull-request\n  \
             group: policy\n  title: 'Update {{{{ group }}}} to {{{{ changes[0].to }}}}'\n{write_extra}",
            self.repo.file_url()
        );
        serde_saphyr::from_str(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

    async fn run(
        &self,
        repo: &RepositoryConfig,
        planner: &ApiPlanner,
        dry_run: bool,
    ) -> Result<ForgeOutcome, ForgeError> {
        let cache = RepoCache::new(self.cache.path());
        let mut reports =
            forge::sync_all(&cache, std::slice::from_ref(repo), planner, dry_run).await;
        assert_eq!(reports.len(), 1);
        reports.remove(0).result
    }

    /// Runs tagpilot for the API image at `tag`, writing; it must succeed.
    async fn apply(&self, repo: &RepositoryConfig, tag: &'static str) -> ForgeOutcome {
        self.run(repo, &wants(tag), false).await.unwrap()
    }

    /// Runs tagpilot for the API image at `tag`, writing; it must fail.
    async fn apply_err(&self, repo: &RepositoryConfig, tag: &'static str) -> ForgeError {
        self.run(repo, &wants(tag), false).await.unwrap_err()
    }

    /// Someone commits the branch's deployment to `main` themselves.
    fn merge_by_hand(&self, message: &str) {
        let merged = self.repo.show(BRANCH, DEPLOYMENT_PATH);
        self.repo
            .push_change("main", DEPLOYMENT_PATH, &merged, message);
    }

    /// `tagpilot.yaml` in `dir` for the whole engine: this setup's repository proposing on
    /// `F`'s double with `write.renderedDiff`, its Applications read from its `argocd/`.
    fn engine_config<F: ForgeDouble>(&self, dir: &Path) -> tagpilot::config::Config {
        let write = format!(
            "    forge:\n      {}\n    write:\n      mode: pull-request\n      branch: {BRANCH}\n      \
             title: 'Update shop to {{{{ changes[0].to }}}}'\n      renderedDiff: true\n",
            F::forge_yaml(&self.server.uri())
        );
        crate::engine::setup(dir, &self.repo, &write, &[])
    }

    /// One engine cycle, writing, with the registry listing `registry.example/shop/api` at
    /// `tags` and the real `helm` and `kubectl` rendering.
    async fn engine_cycle(&self, config: &tagpilot::config::Config, tags: &str) -> Cycle {
        let registry =
            MemoryRegistry::from_yaml(&format!("registry.example/shop/api: {{tags: [{tags}]}}\n"))
                .unwrap();
        let tools = crate::render::tools();
        let options = tagpilot::engine::Options {
            tools: Some(&tools),
            ..Default::default()
        };
        let cache = RepoCache::new(self.cache.path());
        let cycle =
            crate::support::engine::cycle_with(config, None, &cache, &registry, &(), options).await;
        assert!(cycle.plan.problems.is_empty(), "{:?}", cycle.plan.problems);
        cycle
    }

    /// Checks every mock's expectation, then forgets them for the next phase.
    async fn next_phase(&self) {
        self.server.verify().await;
        self.server.reset().await;
    }

    /// The bodies of the requests received so far with this method and path.
    async fn bodies(&self, http_method: &str, at: &str) -> Vec<Value> {
        self.server
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .filter(|r| r.method.as_str() == http_method && r.url.path() == at)
            .map(|r| serde_json::from_slice(&r.body).unwrap_or(Value::Null))
            .collect()
    }

    /// One text field of the first request received with this method and path.
    async fn first_sent(&self, http_method: &str, at: &str, field: &str) -> String {
        self.bodies(http_method, at).await[0][field]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// The text of the first comment sent with this method to this path, wherever `F` keeps
    /// a comment's text.
    async fn comment_sent<F: ForgeDouble>(&self, http_method: &str, at: &str) -> String {
        comment_text::<F>(&self.bodies(http_method, at).await[0])
    }

    /// The text of the first edit of proposal `number` that sets one. (GitLab adds labels
    /// and reviewers with an edit of its own, which has none.)
    async fn edited_body<F: ForgeDouble>(&self, number: u64) -> String {
        self.bodies(F::EDIT, &F::proposal_path(number))
            .await
            .into_iter()
            .find_map(|b| b[F::BODY].as_str().map(str::to_owned))
            .expect("the body was edited")
    }
}

/// Phase one of most scenarios: no proposal yet, tagpilot opens #7 for `api` at 1.2.0.
/// Returns the body tagpilot sent.
async fn open_first<F: ForgeDouble>(s: &Setup, repo: &RepositoryConfig) -> String {
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    let outcome = s.apply(repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests.len(), 1);
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    assert_eq!(outcome.pull_requests[0].number, Some(7));
    let body = s.first_sent("POST", &F::proposals(), F::BODY).await;
    s.next_phase().await;
    body
}

/// A comment's text in the request `sent`, as forge `F` carries it.
fn comment_text<F: ForgeDouble>(sent: &Value) -> String {
    sent.pointer(F::COMMENT_TEXT)
        .or_else(|| sent.pointer(F::COMMENT_EDIT_TEXT))
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("no comment text in {sent}"))
        .to_owned()
}

/// The warnings a proposal carries for its labels: none where the forge has labels, else
/// each says the forge has none.
fn assert_label_warnings<F: ForgeDouble>(warnings: &[String]) {
    if F::LABELS {
        assert_eq!(warnings, Vec::<String>::new());
    } else {
        assert!(
            !warnings.is_empty() && warnings.iter().all(|w| w.contains("has no labels")),
            "{warnings:?}"
        );
    }
}

fn api_line(repo: &BareRepo, rev: &str) -> String {
    repo.show(rev, DEPLOYMENT_PATH)
        .lines()
        .nth(API_LINE - 1)
        .unwrap()
        .trim()
        .to_owned()
}

// === Each scenario once, run against each forge's double ===

async fn open_pushes_a_branch_on_the_base_and_opens_one_proposal_with_labels_and_reviewers<
    F: ForgeDouble,
>() {
    let s = setup().await;
    let repo = s.config_for::<F>(&format!(
        "  labels: [dependencies, images]\n  reviewers: [{}]\n",
        F::REVIEWERS.join(", ")
    ));
    let main = s.repo.rev("main").unwrap();
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(
        &s.server,
        7,
        "Update api to 1.2.0",
        &["dependencies", "images"],
        F::REVIEWERS,
    )
    .await;

    let outcome = s.apply(&repo, "1.2.0").await;
    let opened = &outcome.pull_requests[0];
    assert_eq!(opened.action, Action::Opened);
    assert_eq!(opened.number, Some(7));
    assert_eq!(opened.url.as_deref(), Some(F::url(7).as_str()));
    // In the forge's words: GitHub's `#7`, GitLab's `!7`.
    assert_eq!(opened.reference(), Some(F::reference(7)));

    let tip = s.repo.rev(BRANCH).expect("branch pushed");
    assert_eq!(
        s.repo.rev(&format!("{BRANCH}~1")).unwrap(),
        main,
        "one commit on the base"
    );
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.2.0"
    );
    assert_eq!(
        s.repo.rev("main").unwrap(),
        main,
        "the base is never pushed"
    );
    let body = s.first_sent("POST", &F::proposals(), F::BODY).await;
    assert!(body.contains("| `registry.example/api` | `1.0.0` | `1.2.0` | `apps/api/deployment.yaml:10` | `api` | semver |"), "{body}");
    let marker = Marker::find(&body).expect("marker");
    assert_eq!(
        (marker.group.as_str(), marker.head.as_str()),
        ("api", tip.as_str())
    );
    let other_noun = ["pull request", "merge request"]
        .into_iter()
        .find(|noun| *noun != F::NOUN)
        .unwrap();
    assert!(
        body.contains(&format!("this {}", F::NOUN)) && !body.contains(other_noun),
        "{body}"
    );
    s.server.verify().await;
}

async fn a_newer_tag_updates_the_branch_title_and_body_in_place<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;

    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.3.0"})).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: false }
    );
    assert_eq!(outcome.pull_requests[0].number, Some(7));
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.3.0"
    );
    let body = s.edited_body::<F>(7).await;
    assert!(
        body.contains("`1.3.0`") && !body.contains("`1.2.0`"),
        "{body}"
    );
    assert_eq!(
        Marker::find(&body).unwrap().head,
        s.repo.rev(BRANCH).unwrap()
    );
    s.next_phase().await;

    // Nothing new: nothing pushed, nothing edited.
    let tip = s.repo.rev(BRANCH).unwrap();
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.3.0", &body)]),
    )
    .await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::UpToDate);
    assert_eq!(s.repo.rev(BRANCH).unwrap(), tip);
    s.server.verify().await;
}

async fn an_update_adds_missing_labels_and_reviewers_and_keeps_what_humans_added<F: ForgeDouble>() {
    let s = setup().await;
    let first = open_first::<F>(&s, &s.config_for::<F>("")).await;
    // The config gained labels and reviewers after #7 was opened.
    let repo = s.config_for::<F>("  labels: [dependencies, images]\n  reviewers: [alice, bob]\n");

    // A human labelled it (in other case) and added a label of their own, asked alice and
    // dave, who is not in the config: only `images` and bob are missing, and dave stays.
    let listed = F::labelled(
        F::proposal(7, "Update api to 1.2.0", &first),
        &["Dependencies", "needs-qa"],
        &["alice", "dave"],
    );
    F::expect_list_open(&s.server, json!([listed])).await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.3.0"})).await;
    F::expect_additions(&s.server, 7, &["images"], &["alice", "dave"], &["bob"]).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: false }
    );
    assert_label_warnings::<F>(&outcome.pull_requests[0].warnings);
    let body = s.edited_body::<F>(7).await;
    s.next_phase().await;

    // Everything wanted is there: no call beyond the listing, not even for reviews.
    let listed = F::labelled(
        F::proposal(7, "Update api to 1.3.0", &body),
        &["dependencies", "images", "needs-qa"],
        &["alice", "bob", "dave"],
    );
    F::expect_list_open(&s.server, json!([listed])).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::UpToDate);
    s.server.verify().await;
}

async fn a_moved_base_rebuilds_the_branch_on_the_new_base<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;
    s.repo
        .push_change("main", "README.md", "manifests, edited\n", "unrelated edit");
    let new_main = s.repo.rev("main").unwrap();

    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.2.0"})).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: true }
    );
    assert_eq!(s.repo.rev(&format!("{BRANCH}~1")).unwrap(), new_main);
    assert_eq!(s.repo.show(BRANCH, "README.md"), "manifests, edited\n");
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.2.0"
    );
    s.server.verify().await;
}

async fn a_human_commit_on_the_branch_is_not_overwritten_and_is_noted_once<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;
    s.repo
        .push_change(BRANCH, "apps/api/notes.txt", "keep me\n", "reviewer's fix");
    let human = s.repo.rev(BRANCH).unwrap();

    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_comment(&s.server, 7).await;
    F::expect_edit(&s.server, 7).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Blocked { tip: human.clone() }
    );
    assert!(
        outcome.pull_requests[0]
            .status(false)
            .contains("someone else pushed")
    );
    assert_eq!(
        s.repo.rev(BRANCH).unwrap(),
        human,
        "the human's commit survives"
    );
    let comment = &s.bodies("POST", &F::comments_path(7)).await[0];
    assert!(
        comment_text::<F>(comment).contains(&human[..12]),
        "{comment}"
    );
    let noted = s.edited_body::<F>(7).await;
    assert_eq!(
        Marker::find(&noted).unwrap().noted.as_deref(),
        Some(human.as_str())
    );
    s.next_phase().await;

    // Said once: the next run neither comments nor edits.
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &noted)]),
    )
    .await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert!(matches!(
        outcome.pull_requests[0].action,
        Action::Blocked { .. }
    ));
    assert_eq!(s.repo.rev(BRANCH).unwrap(), human);
    s.server.verify().await;
}

async fn a_change_already_in_the_base_closes_the_proposal_and_deletes_the_branch<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;
    // Someone merges the same change by hand.
    s.merge_by_hand("bump api by hand");

    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_comment(&s.server, 7).await;
    F::expect_close(&s.server, 7).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Closed { reached_base: true }
    );
    let comment = &s.bodies("POST", &F::comments_path(7)).await[0];
    assert!(
        comment_text::<F>(comment).contains("already in `main`"),
        "{comment}"
    );
    assert_eq!(s.repo.rev(BRANCH), None, "the branch is deleted");
    s.server.verify().await;
}

async fn an_incomplete_plan_does_not_close_proposals<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;
    s.merge_by_hand("bump by hand");
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    let planner = ApiPlanner {
        complete: false,
        ..wants("1.2.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::Kept);
    assert!(s.repo.rev(BRANCH).is_some());
    s.server.verify().await;
}

async fn a_proposal_closed_unmerged_is_not_reopened_until_a_newer_tag_arrives<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;

    // #7 was closed without merging, its branch deleted with it.
    git(
        &s.repo.path(),
        &["update-ref", "-d", &format!("refs/heads/{BRANCH}")],
    );
    F::expect_list_open(&s.server, json!([])).await;
    F::expect_list_closed(
        &s.server,
        json!([F::closed(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    // Nothing is opened, whatever its body.
    Mock::given(method("POST"))
        .and(path(F::proposals()))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Declined { closed: 7 }
    );
    assert_eq!(
        s.repo.rev(BRANCH),
        None,
        "nothing pushed for a declined proposal"
    );
    s.next_phase().await;

    // A newer tag is a new proposal.
    F::expect_list_open(&s.server, json!([])).await;
    F::expect_list_closed(
        &s.server,
        json!([F::closed(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_create(&s.server, 8, "Update api to 1.3.0", &[], &[]).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    assert_eq!(outcome.pull_requests[0].number, Some(8));
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.3.0"
    );
    s.server.verify().await;
}

async fn a_403_names_the_missing_permission<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    F::list_open_request()
        .respond_with(F::forbidden_listing())
        .expect(1)
        .mount(&s.server)
        .await;
    let err = s.apply_err(&repo, "1.2.0").await;
    let text = err.to_string();
    assert!(matches!(err, ForgeError::Permission { .. }), "{text}");
    assert!(
        text.contains(F::READ_PERMISSION) && text.contains("`manifests`") && text.contains(F::NAME),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
    s.next_phase().await;

    // A bare 403 on opening: the permission that call needs is named, and the call.
    F::expect_no_proposals_yet(&s.server).await;
    F::create_request()
        .respond_with(F::forbidden())
        .expect(1)
        .mount(&s.server)
        .await;
    let text = s.apply_err(&repo, "1.2.0").await.to_string();
    assert!(
        text.contains(F::WRITE_PERMISSION) && text.contains(&format!("open a {}", F::NOUN)),
        "{text}"
    );
    assert!(!text.contains(TOKEN), "{text}");
    s.server.verify().await;
}

/// GitHub refuses a second pull request for a branch with a 422, GitLab with a 409.
async fn an_already_exists_refusal_takes_over_the_open_proposal<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("  labels: [dependencies]\n  reviewers: [alice]\n");
    // The listing of tagpilot's proposals lags behind one opened meanwhile.
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create_answered(
        &s.server,
        "Update api to 1.2.0",
        &["dependencies"],
        &["alice"],
        F::already_exists(),
    )
    .await;
    F::list_open_from_branch(json!([F::proposal(5, "Bump api", "opened by hand")]))
        .expect(1)
        .mount(&s.server)
        .await;
    F::expect_edit_with(&s.server, 5, json!({"title": "Update api to 1.2.0"})).await;
    // Taken over, it gets the labels and reviewers it lacks, as if tagpilot had opened it.
    F::expect_additions(&s.server, 5, &["dependencies"], &[], &["alice"]).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(
        outcome.pull_requests[0].number,
        Some(5),
        "no second proposal"
    );
    assert_eq!(outcome.pull_requests[0].action, Action::TakenOver);
    assert_eq!(
        outcome.pull_requests[0].status(false),
        "taken over: one was open for the branch already"
    );
    let body = s.edited_body::<F>(5).await;
    assert_eq!(Marker::find(&body).unwrap().group, "api");
    s.server.verify().await;
}

async fn rate_limits_are_waited_out_from_the_headers<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let reset = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 1;
    // A rate limit naming its reset time, as the forge sends it; then the listing answers.
    F::list_open_request()
        .respond_with(F::rate_limited_until(reset))
        .up_to_n_times(1)
        .expect(1)
        .with_priority(1)
        .mount(&s.server)
        .await;
    F::expect_no_proposals_yet(&s.server).await;
    // 429 with Retry-After (GitHub's secondary rate limit); then the proposal opens.
    F::create_request()
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "1"))
        .up_to_n_times(1)
        .expect(1)
        .with_priority(1)
        .mount(&s.server)
        .await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].number, Some(7));
    s.server.verify().await;
}

async fn a_rate_limit_beyond_the_bound_fails_at_once_and_names_the_wait<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    F::list_open_request()
        .respond_with(ResponseTemplate::new(429).insert_header("retry-after", "3600"))
        .expect(1)
        .mount(&s.server)
        .await;
    let err = s.apply_err(&repo, "1.2.0").await;
    assert!(
        matches!(
            &err,
            ForgeError::RateLimited {
                forge,
                wait_seconds: 3600,
                ..
            } if *forge == F::NAME
        ),
        "{err}"
    );
    s.server.verify().await;
}

async fn a_second_open_proposal_for_a_group_is_closed_as_a_duplicate<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let first = open_first::<F>(&s, &repo).await;
    let second = F::from_branch(
        F::proposal(9, "Update api to 1.2.0", &first),
        "tagpilot/old-name-api",
    );
    F::expect_list_open(
        &s.server,
        json!([second, F::proposal(7, "Update api to 1.2.0", &first)]),
    )
    .await;
    F::expect_comment(&s.server, 9).await;
    F::expect_close(&s.server, 9).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    let actions: Vec<_> = outcome
        .pull_requests
        .iter()
        .map(|p| (p.number, p.action.clone()))
        .collect();
    assert_eq!(
        actions,
        [
            (Some(7), Action::UpToDate),
            (Some(9), Action::Duplicate { of: 7 })
        ]
    );
    s.server.verify().await;
}

async fn a_forge_error_for_one_group_fails_that_group_and_the_others_go_on<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("");
    F::expect_no_proposals_yet(&s.server).await;
    F::list_closed_from("tagpilot/web", json!([]))
        .expect(1)
        .mount(&s.server)
        .await;
    // The forge refuses the first group's proposal ...
    F::create_request()
        .respond_with(F::refused("The base branch was modified meanwhile."))
        .expect(1)
        .mount(&s.server)
        .await;
    // ... and opens the second's.
    F::create_request_from("tagpilot/web")
        .respond_with(F::opened(8))
        .expect(1)
        .mount(&s.server)
        .await;

    let cache = RepoCache::new(s.cache.path());
    let mut reports = forge::sync_all(&cache, std::slice::from_ref(&repo), &ApiAndWeb, false).await;
    let report = reports.remove(0);
    assert!(report.failed(), "a failed group fails the repository");
    let outcome = report
        .result
        .expect("the repository's other groups went on");
    let api = &outcome.pull_requests[0];
    assert!(
        matches!(&api.action, Action::Failed { error } if error.contains("base branch was modified")),
        "{:?}",
        api.action
    );
    assert!(
        api.status(false).starts_with("failed: "),
        "{}",
        api.status(false)
    );
    let web = &outcome.pull_requests[1];
    assert_eq!(
        (web.group.as_str(), web.action.clone(), web.number),
        ("web", Action::Opened, Some(8))
    );
    assert_eq!(
        api_line(&s.repo, "tagpilot/web"),
        "image: registry.example/api:1.0.0",
        "the web branch carries only the web change"
    );
    s.server.verify().await;
}

/// Verification's feedback (issue 19): `tagpilot/verify` pending, then success or failure with
/// the reason, on the commit, in each forge's words.
async fn the_verify_status_is_set_on_the_commit_with_the_reason<F: ForgeDouble>() {
    use tagpilot::forge::status::{CommitState, set_verify_status};
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let commit = "8f2c1d0a9b7e6f5c4d3b2a1908f7e6d5c4b3a291";
    let failed = "argocd/shop-api: health Degraded after the sync: Deployment \"api\" exceeded its progress deadline";
    let states = [
        (
            "pending",
            CommitState::Pending,
            "following in Application argocd/shop-api",
        ),
        ("success", CommitState::Success, "healthy in Argo CD"),
        ("failure", CommitState::Failure, failed),
    ];
    for (word, _, text) in states {
        F::commit_status(commit, word)
            .and(body_partial_json(json!({ "description": text })))
            .respond_with(ResponseTemplate::new(201).set_body_json(json!({"id": 1})))
            .expect(1)
            .mount(&s.server)
            .await;
    }
    for (_, state, text) in states {
        assert!(
            set_verify_status(&repo, commit, state, text).await.unwrap(),
            "a repository with a forge gets the status"
        );
    }
    s.server.verify().await;
    let mut without = repo.clone();
    without.forge = None;
    assert!(
        !set_verify_status(&without, commit, CommitState::Success, "healthy")
            .await
            .unwrap(),
        "without a forge there is nowhere to show it"
    );
}

/// Verification of pull-request mode (issue 19): a merged proposal is read by itself, for the
/// commit that reached the base branch and the head its status goes on.
async fn a_merged_proposal_names_its_merge_commit_and_head<F: ForgeDouble>() {
    use tagpilot::forge::merged::{MergeState, merge_state};
    let s = setup().await;
    let repo = s.config_for::<F>("");
    let (commit, head) = ("a".repeat(40), "b".repeat(40));
    F::authed("GET", &F::proposal_path(7))
        .respond_with(ok_json(F::merged_proposal(7, &commit, &head)))
        .expect(1)
        .mount(&s.server)
        .await;
    F::authed("GET", &F::proposal_path(8))
        .respond_with(ok_json(F::proposal(8, "Update api", "")))
        .expect(1)
        .mount(&s.server)
        .await;
    assert_eq!(
        merge_state(&repo, 7).await.unwrap(),
        Some(MergeState::Merged { commit, head })
    );
    assert_eq!(merge_state(&repo, 8).await.unwrap(), Some(MergeState::Open));
    s.server.verify().await;
}

/// The Applications a change deploys are named in the body with their destinations, and the
/// label templates make one label per Application, cut to the forge's limit (GitHub's 50
/// characters, GitLab's 255); a newer tag that deploys to one more Application adds its label.
async fn the_applications_a_change_deploys_are_named_and_labelled<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>(
        "  labels: [dependencies, 'app/{{ application }}', 'env/{{ destination.namespace }}']\n",
    );
    let long = format!("shop-{}", "x".repeat(60));
    let app = |name: &str, ns: &str| AffectedApplication {
        name: name.into(),
        namespace: Some("argocd".into()),
        destination: Destination {
            server: Some("https://prod.example:6443".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        sources: vec![1],
        files: vec![DEPLOYMENT_PATH.into()],
        rendered: None,
    };
    let limit = if F::NAME == "GitHub" { 50 } else { 255 };
    let long_label: String = format!("app/{long}").chars().take(limit).collect();
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(
        &s.server,
        7,
        "Update api to 1.2.0",
        &["dependencies", &long_label, "env/shop"],
        &[],
    )
    .await;
    let planner = ApiPlanner {
        applications: vec![app(&long, "shop")],
        ..wants("1.2.0")
    };
    s.run(&repo, &planner, false).await.unwrap();
    let body = s.first_sent("POST", &F::proposals(), F::BODY).await;
    assert!(
        body.contains(&format!(
            "| `argocd/{long}` | `https://prod.example:6443` | `shop` | 1 | `{DEPLOYMENT_PATH}` |"
        )),
        "{body}"
    );
    let message = s.repo.message(BRANCH);
    assert!(
        message.contains(&format!("Tagpilot-Application: argocd/{long}")),
        "{message}"
    );
    s.next_phase().await;

    // The next tag also deploys to staging: its labels are added, nothing removed.
    let labelled = F::labelled(
        F::proposal(7, "Update api to 1.2.0", &body),
        &["dependencies", &long_label, "env/shop"],
        &[],
    );
    F::expect_list_open(&s.server, json!([labelled])).await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.3.0"})).await;
    F::expect_additions(&s.server, 7, &["app/shop-stage", "env/stage"], &[], &[]).await;
    let planner = ApiPlanner {
        applications: vec![app(&long, "shop"), app("shop-stage", "stage")],
        ..wants("1.3.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_label_warnings::<F>(&outcome.pull_requests[0].warnings);
    let edited = s.edited_body::<F>(7).await;
    assert!(edited.contains("| `argocd/shop-stage` |"), "{edited}");
    s.server.verify().await;
}

/// An Application rendered before and after: one Deployment moving from `from` to `to`.
fn rendered_app(name: &str, from: &str, to: &str) -> AffectedApplication {
    let deployment = |tag: &str| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nspec:\n  image: registry.example/api:{tag}\n"
        )
    };
    AffectedApplication {
        name: name.into(),
        namespace: Some("argocd".into()),
        destination: Destination {
            namespace: Some("shop".into()),
            ..Default::default()
        },
        sources: vec![1],
        files: vec![DEPLOYMENT_PATH.into()],
        rendered: Some(Box::new(Rendered {
            resources: vec![RenderedResource {
                kind: "Deployment".into(),
                namespace: Some("shop".into()),
                name: "api".into(),
                before: Some(deployment(from)),
                after: Some(deployment(to)),
            }],
            ..Rendered::default()
        })),
    }
}

/// With `write.renderedDiff`, the pull request gets one comment with the rendered diff of each
/// Application; a newer tag updates that comment in place (found by its marker among the
/// others), and a render that says the same leaves it alone.
async fn the_rendered_diff_is_commented_and_updated_in_place<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("  renderedDiff: true\n");
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    F::expect_comment(&s.server, 7).await;
    let planner = ApiPlanner {
        applications: vec![rendered_app("shop", "1.0.0", "1.2.0")],
        ..wants("1.2.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    let first = s.comment_sent::<F>("POST", &F::comments_path(7)).await;
    assert!(
        first.contains("<details><summary><code>argocd/shop</code> → in-cluster, namespace `shop`: 1 resource changes</summary>"),
        "{first}"
    );
    assert!(
        first.contains("#### `Deployment/shop/api`\n\n```diff\n")
            && first.contains(
                "-  image: registry.example/api:1.0.0\n+  image: registry.example/api:1.2.0\n"
            ),
        "{first}"
    );
    let body = s.first_sent("POST", &F::proposals(), F::BODY).await;
    s.next_phase().await;

    // 1.3.0: the proposal and its review comment (#42, after someone's) are updated in place.
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.2.0", &body)]),
    )
    .await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.3.0"})).await;
    F::expect_comments(&s.server, 7, &[(41, "LGTM"), (42, &first)]).await;
    F::expect_comment_edit(&s.server, 7, 42).await;
    let planner = ApiPlanner {
        applications: vec![rendered_app("shop", "1.0.0", "1.3.0")],
        ..wants("1.3.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].warnings, Vec::<String>::new());
    let edited = s
        .comment_sent::<F>(F::COMMENT_EDIT, &F::comment_path(7, 42))
        .await;
    assert!(
        edited.contains("+  image: registry.example/api:1.3.0\n"),
        "{edited}"
    );
    let body = s.edited_body::<F>(7).await;
    s.next_phase().await;

    // The same render again: the listing shows it, and nothing is written.
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update api to 1.3.0", &body)]),
    )
    .await;
    F::expect_comments(&s.server, 7, &[(41, "LGTM"), (42, &edited)]).await;
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::UpToDate);
    s.server.verify().await;
}

/// An Image Updater-style write-back changes no manifest, only the Helm parameters Argo CD
/// merges from `.argocd-source-shop.yaml`. The whole engine proposes it on the forge: the
/// comment shows the image the Application's Deployment will run, rendered by the real `helm`
/// after the override merge, and a newer tag updates that comment in place.
async fn an_override_file_change_is_commented_with_the_image_its_application_deploys<
    F: ForgeDouble,
>() {
    let s = setup_with(crate::argocd::chart_app_with_git_write_back()).await;
    let dir = tempfile::tempdir().unwrap();
    let config = s.engine_config::<F>(dir.path());
    let override_file = "apps/shop/.argocd-source-shop.yaml";
    let image_change = |from: &str, to: &str| {
        format!(
            "-      - image: registry.example/shop/api:{from}\n+      - image: registry.example/shop/api:{to}\n"
        )
    };
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update shop to 1.1.0", &[], &[]).await;
    F::expect_comment(&s.server, 7).await;
    let opened = s.engine_cycle(&config, "\"1.0.0\", \"1.1.0\"").await;
    let files: Vec<&str> = opened
        .plan
        .changes
        .iter()
        .map(|c| c.file.as_str())
        .collect();
    assert_eq!(files, [override_file]);
    assert!(
        s.repo.show(BRANCH, override_file).contains("1.1.0"),
        "{}",
        s.repo.show(BRANCH, override_file)
    );
    let first = s.comment_sent::<F>("POST", &F::comments_path(7)).await;
    assert!(
        first.contains("<code>argocd/shop</code>")
            && first.contains("#### `Deployment/shop`")
            && first.contains(&image_change("1.0.0", "1.1.0")),
        "{first}"
    );
    let body = s.first_sent("POST", &F::proposals(), F::BODY).await;
    s.next_phase().await;

    // 1.2.0: the override file on the branch moves on, and the comment (#42, after someone's)
    // is edited to show the Deployment's new image.
    F::expect_list_open(
        &s.server,
        json!([F::proposal(7, "Update shop to 1.1.0", &body)]),
    )
    .await;
    F::expect_edit_with(&s.server, 7, json!({"title": "Update shop to 1.2.0"})).await;
    F::expect_comments(&s.server, 7, &[(41, "LGTM"), (42, &first)]).await;
    F::expect_comment_edit(&s.server, 7, 42).await;
    s.engine_cycle(&config, "\"1.0.0\", \"1.1.0\", \"1.2.0\"")
        .await;
    assert!(s.repo.show(BRANCH, override_file).contains("1.2.0"));
    let edited = s
        .comment_sent::<F>(F::COMMENT_EDIT, &F::comment_path(7, 42))
        .await;
    assert!(
        edited.contains("#### `Deployment/shop`")
            && edited.contains(&image_change("1.0.0", "1.2.0")),
        "{edited}"
    );
    s.server.verify().await;
}

/// A rendered diff larger than a comment takes is cut, and says how much was left out.
async fn a_rendered_diff_too_large_is_cut_to_size<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("  renderedDiff: true\n");
    let mut app = rendered_app("shop", "1.0.0", "1.2.0");
    let big = |tag: &str| {
        (0..400)
            .map(|i| format!("  line{i}: {tag}\n"))
            .collect::<String>()
    };
    let resources = (0..40)
        .map(|i| RenderedResource {
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: format!("cm{i}"),
            before: Some(big("1.0.0")),
            after: Some(big("1.2.0")),
        })
        .collect();
    app.rendered.as_mut().unwrap().resources = resources;
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    F::expect_comment(&s.server, 7).await;
    let planner = ApiPlanner {
        applications: vec![app],
        ..wants("1.2.0")
    };
    s.run(&repo, &planner, false).await.unwrap();
    let comment = s.comment_sent::<F>("POST", &F::comments_path(7)).await;
    assert!(
        comment.len() <= tagpilot::forge::review::MAX_COMMENT,
        "{}",
        comment.len()
    );
    let shown = comment.matches("#### `ConfigMap/shop/").count();
    assert!(shown > 0 && shown < 40, "{shown}");
    assert!(
        comment.contains(&format!("_{} resource diff(s) (", 40 - shown))
            && comment.contains("were left out to keep this comment under 60000 bytes"),
        "{comment}"
    );
    s.server.verify().await;
}

/// A render that failed is said in the comment, and the pull request is opened all the same.
async fn a_failed_render_is_commented_and_does_not_block_the_proposal<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("  renderedDiff: true\n");
    let mut app = rendered_app("shop", "1.0.0", "1.2.0");
    *app.rendered.as_mut().unwrap().as_mut() = Rendered {
        failure: Some(
            "source 1 (chart api from https://charts.example): the chart repository \
             https://charts.example could not be reached: connection refused"
                .into(),
        ),
        ..Rendered::default()
    };
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    F::expect_comment(&s.server, 7).await;
    let planner = ApiPlanner {
        applications: vec![app],
        ..wants("1.2.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    let comment = s.comment_sent::<F>("POST", &F::comments_path(7)).await;
    assert!(
        comment.contains("could not be rendered</summary>")
            && comment.contains("the chart repository https://charts.example could not be reached"),
        "{comment}"
    );
    s.server.verify().await;
}

/// A review comment the forge refuses (a token that may open pull requests but not comment
/// on them) is a warning on the group: the pull request is opened and reported all the same.
async fn a_review_comment_that_cannot_be_posted_is_a_warning<F: ForgeDouble>() {
    let s = setup().await;
    let repo = s.config_for::<F>("  renderedDiff: true\n");
    F::expect_no_proposals_yet(&s.server).await;
    F::expect_create(&s.server, 7, "Update api to 1.2.0", &[], &[]).await;
    F::authed("POST", &F::comments_path(7))
        .respond_with(F::forbidden())
        .expect(1)
        .mount(&s.server)
        .await;
    let planner = ApiPlanner {
        applications: vec![rendered_app("shop", "1.0.0", "1.2.0")],
        ..wants("1.2.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    let pr = &outcome.pull_requests[0];
    assert_eq!(pr.action, Action::Opened, "{pr:?}");
    assert_eq!(pr.number, Some(7));
    assert!(
        pr.warnings.len() == 1 && pr.warnings[0].starts_with("the rendered diff was not posted: "),
        "{:?}",
        pr.warnings
    );
    assert!(!pr.warnings[0].contains(TOKEN), "{:?}", pr.warnings);
    s.server.verify().await;
}

/// Each scenario above as a test per forge: `github::<scenario>`, `gitlab::<scenario>`,
/// `gitea::<scenario>`, …, one module per forge double.
macro_rules! on_each_forge {
    ($($scenario:ident),+ $(,)?) => {
        on_each_forge!(@forges [
            github: crate::support::forge_double::GitHubApi,
            gitlab: crate::support::forge_double::GitLabApi,
            gitea: crate::support::gitea::GiteaApi,
            bitbucket_cloud: crate::support::bitbucket_cloud::BitbucketCloudApi,
            azure_devops: crate::support::azure_devops::AzureDevOpsApi,
            bitbucket_data_center: crate::support::bitbucket_dc::BitbucketDataCenterApi,
        ] [$($scenario),+]);
    };
    (@forges [$($forge:ident: $double:ty),+ $(,)?] $scenarios:tt) => {
        $(
            mod $forge {
                on_each_forge!(@scenarios $double; $scenarios);
            }
        )+
    };
    (@scenarios $double:ty; [$($scenario:ident),+]) => {
        $(
            #[tokio::test]
            async fn $scenario() {
                super::$scenario::<$double>().await;
            }
        )+
    };
}

on_each_forge!(
    open_pushes_a_branch_on_the_base_and_opens_one_proposal_with_labels_and_reviewers,
    a_newer_tag_updates_the_branch_title_and_body_in_place,
    an_update_adds_missing_labels_and_reviewers_and_keeps_what_humans_added,
    a_moved_base_rebuilds_the_branch_on_the_new_base,
    a_human_commit_on_the_branch_is_not_overwritten_and_is_noted_once,
    a_change_already_in_the_base_closes_the_proposal_and_deletes_the_branch,
    an_incomplete_plan_does_not_close_proposals,
    a_proposal_closed_unmerged_is_not_reopened_until_a_newer_tag_arrives,
    a_403_names_the_missing_permission,
    an_already_exists_refusal_takes_over_the_open_proposal,
    rate_limits_are_waited_out_from_the_headers,
    a_rate_limit_beyond_the_bound_fails_at_once_and_names_the_wait,
    a_second_open_proposal_for_a_group_is_closed_as_a_duplicate,
    a_forge_error_for_one_group_fails_that_group_and_the_others_go_on,
    the_verify_status_is_set_on_the_commit_with_the_reason,
    a_merged_proposal_names_its_merge_commit_and_head,
    the_applications_a_change_deploys_are_named_and_labelled,
    the_rendered_diff_is_commented_and_updated_in_place,
    an_override_file_change_is_commented_with_the_image_its_application_deploys,
    a_rendered_diff_too_large_is_cut_to_size,
    a_failed_render_is_commented_and_does_not_block_the_proposal,
    a_review_comment_that_cannot_be_posted_is_a_warning,
);

// === Gitea and Forgejo only ===

mod gitea_only;

// === Bitbucket Cloud only ===

mod bitbucket_cloud_only;

// === Azure DevOps only ===

mod azure_devops_only;

// === GitHub only ===

#[tokio::test]
async fn a_bare_reviewer_name_that_is_no_collaborator_is_requested_as_a_team_and_an_unknown_one_is_reported()
 {
    let s = setup().await;
    let repo = s.github("  reviewers: [platform-team, ghost, alice]\n");
    expect_no_pulls_yet(&s.server).await;
    expect_create(&s.server, 7, json!({"head": BRANCH, "base": "main"})).await;
    // All at once as users: refused, since not all are collaborators. Then one by one, a bare
    // name as a user first and, refused again, as a team of the owner `acme`.
    expect_review_request(&s.server, 7, &["platform-team", "ghost", "alice"], &[], 422).await;
    expect_review_request(&s.server, 7, &["platform-team"], &[], 422).await;
    expect_review_request(&s.server, 7, &[], &["platform-team"], 201).await;
    expect_review_request(&s.server, 7, &["ghost"], &[], 422).await;
    expect_review_request(&s.server, 7, &[], &["ghost"], 422).await;
    expect_review_request(&s.server, 7, &["alice"], &[], 201).await;
    let outcome = s.apply(&repo, "1.2.0").await;
    let pr = &outcome.pull_requests[0];
    assert_eq!((pr.action.clone(), pr.number), (Action::Opened, Some(7)));
    assert_eq!(pr.warnings.len(), 1, "{:?}", pr.warnings);
    assert!(
        pr.warnings[0].contains("reviewer `ghost`") && pr.warnings[0].contains("`acme`"),
        "{}",
        pr.warnings[0]
    );
    s.server.verify().await;
}

/// GitHub no longer lists a reviewer as requested once they reviewed, nor a team once a
/// member reviewed, so it reads the reviews before asking again. GitLab lists reviewers also
/// after they reviewed, and has no team reviewers: this case is GitHub's alone.
#[tokio::test]
async fn a_reviewer_who_reviewed_is_not_asked_again_nor_the_team_once_someone_reviewed() {
    let s = setup().await;
    let first = open_first::<GitHubApi>(&s, &s.github("")).await;
    let repo = s.github("  reviewers: [alice, bob, carol, acme/platform]\n");

    // alice is requested, bob already approved: only carol is missing. The team is not asked
    // again once someone reviewed, as GitHub drops a team's request when a member reviews.
    let mut listed = pull(7, &first, false);
    listed["requested_reviewers"] = json!([{"login": "alice", "id": 1}]);
    expect_list_open(&s.server, json!([listed])).await;
    expect_edit_with(&s.server, 7, json!({"title": "Update api to 1.3.0"})).await;
    expect_reviews(&s.server, 7, &["bob"]).await;
    expect_review_request(&s.server, 7, &["carol"], &[], 201).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: false }
    );
    assert_eq!(outcome.pull_requests[0].warnings, Vec::<String>::new());
    let body = s.first_sent("PATCH", &pull_path(7), "body").await;
    s.next_phase().await;

    // Everyone is asked, the team too: no call beyond the listing, not even for reviews.
    let mut listed = pull(7, &body, false);
    listed["title"] = "Update api to 1.3.0".into();
    listed["requested_reviewers"] = json!([
        {"login": "alice", "id": 1}, {"login": "bob", "id": 2}, {"login": "carol", "id": 3}
    ]);
    listed["requested_teams"] = json!([{"slug": "platform", "id": 4}]);
    expect_list_open(&s.server, json!([listed])).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::UpToDate);
    s.server.verify().await;
}

/// Checks that `Authorization: Bearer <jwt>` is an RS256 JWT signed by the test App's key,
/// issued for the App id.
struct SignedForApp {
    public_pem: Vec<u8>,
    app_id: u64,
}

impl wiremock::Match for SignedForApp {
    fn matches(&self, request: &Request) -> bool {
        let Some(jwt) = request
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
        else {
            return false;
        };
        let Ok(key) = jsonwebtoken::DecodingKey::from_rsa_pem(&self.public_pem) else {
            return false;
        };
        let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
        validation.set_required_spec_claims(&["exp", "iat"]);
        jsonwebtoken::decode::<Value>(jwt, &key, &validation)
            .is_ok_and(|data| data.claims["iss"] == json!(self.app_id))
    }
}

fn openssl(args: &[&str], dir: &Path) {
    let status = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run openssl");
    assert!(status.success(), "openssl {args:?}");
}

/// Writes a fresh RSA key for a GitHub App to `dir/app.pem`.
fn generate_app_key(dir: &Path) {
    openssl(
        &[
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
            "-out",
            "app.pem",
        ],
        dir,
    );
}

#[tokio::test]
async fn a_github_app_exchanges_its_jwt_for_an_installation_token_and_plan_writes_nothing() {
    let s = setup().await;
    let keys = tempfile::tempdir().unwrap();
    generate_app_key(keys.path());
    openssl(
        &["pkey", "-in", "app.pem", "-pubout", "-out", "app.pub.pem"],
        keys.path(),
    );
    let repo = s.config(
        &format!(
            "github: {{apiUrl: '{}', repository: acme/manifests, app: {{appId: 4242, installationId: 99, privateKeyFile: '{}'}}}}",
            s.server.uri(),
            keys.path().join("app.pem").display()
        ),
        "",
    );
    Mock::given(method("POST"))
        .and(path("/app/installations/99/access_tokens"))
        .and(SignedForApp {
            public_pem: std::fs::read(keys.path().join("app.pub.pem")).unwrap(),
            app_id: 4242,
        })
        .respond_with(created(json!({
            "token": "ghs_installation-token",
            "expires_at": "2099-01-01T00:00:00Z",
            "permissions": {"contents": "write", "pull_requests": "write"},
            "repository_selection": "selected",
        })))
        .expect(1)
        .mount(&s.server)
        .await;
    let installation = "Bearer ghs_installation-token";
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("state", "open"))
        .and(header("authorization", installation))
        .respond_with(ok_json(json!([])))
        .expect(1)
        .mount(&s.server)
        .await;
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(query_param("state", "closed"))
        .and(header("authorization", installation))
        .respond_with(ok_json(json!([])))
        .expect(1)
        .mount(&s.server)
        .await;

    let outcome = s.run(&repo, &wants("1.2.0"), true).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    assert_eq!(outcome.pull_requests[0].status(true), "would open");
    assert_eq!(s.repo.rev(BRANCH), None, "plan pushed a branch");
    s.server.verify().await;
}

#[test]
fn pull_request_body_matches_the_golden_file() {
    let group = ChangeGroup {
        applications: Vec::new(),
        key: "checkout".into(),
        files: Default::default(),
        changes: vec![
            Change {
                policy: "checkout".into(),
                image: "ghcr.io/acme/checkout-api".into(),
                file: "apps/checkout/deployment.yaml".into(),
                line: 21,
                from: "1.4.2".into(),
                to: "1.5.0".into(),
                strategy: "semver",
                source: Some(source_change(
                    "https://github.com/acme/checkout",
                    "1111111111111111111111111111111111111111",
                    "2222222222222222222222222222222222222222",
                    "https://github.com/acme/checkout/compare/1111111111111111111111111111111111111111...2222222222222222222222222222222222222222".into(),
                )),
                ..Default::default()
            },
            Change {
                policy: "checkout".into(),
                image: "ghcr.io/acme/checkout-worker".into(),
                file: "apps/checkout/kustomization.yaml".into(),
                line: 9,
                from: "main-1a2b3c4-1700000000".into(),
                to: "main-9f8e7d6-1700086400".into(),
                strategy: "regex",
                ..Default::default()
            },
        ],
    };
    let marker = Marker {
        group: "checkout".into(),
        proposal: forge::body::proposal_id(&group.changes),
        head: "0123456789abcdef0123456789abcdef01234567".into(),
        noted: None,
    };
    // The first image's source says what changed: 23 commits, the first 20 listed.
    let subjects: Vec<String> = (1..=23).map(|n| format!("Change {n}\n\nbody")).collect();
    let commits = forge::SourceCommits::from_messages(subjects.iter().map(String::as_str), 23);
    let sources = std::collections::BTreeMap::from([(
        group.changes[0]
            .source
            .as_ref()
            .unwrap()
            .compare_url
            .clone(),
        commits,
    )]);
    let actual = forge::body::body(
        forge::ForgeKind::GitHub,
        "manifests",
        "main",
        &group,
        &sources,
        &marker,
    );
    crate::golden::assert_text(
        &crate::golden::case_dir("pull-request-body", "two-images").join("body.md"),
        &actual,
    );
    assert_eq!(Marker::find(&actual), Some(marker));
}

#[tokio::test]
async fn enterprise_draft_and_auto_merge_use_the_api_prefix_and_the_graphql_endpoint() {
    let s = setup().await;
    // GitHub Enterprise Server: REST under /api/v3, GraphQL at /api/graphql.
    let repo = s.config(
        &format!(
            "github: {{apiUrl: '{}/api/v3', tokenEnv: {HTTP_PASSWORD_ENV}, repository: acme/manifests}}",
            s.server.uri()
        ),
        "  draft: true\n  autoMerge: true\n",
    );
    let pulls = format!("/api/v3{PULLS}");
    Mock::given(method("GET"))
        .and(path(pulls.as_str()))
        .and(header("authorization", AUTH))
        .respond_with(ok_json(json!([])))
        .expect(2)
        .mount(&s.server)
        .await;
    Mock::given(method("POST"))
        .and(path(pulls.as_str()))
        .and(header("authorization", AUTH))
        .and(body_partial_json(json!({"head": BRANCH, "draft": true})))
        .respond_with(created(pull(7, "", false)))
        .expect(1)
        .mount(&s.server)
        .await;
    Mock::given(method("POST"))
        .and(path("/api/graphql"))
        .and(header("authorization", AUTH))
        .and(body_partial_json(json!({"variables": {"id": "PR_node7"}})))
        .respond_with(ok_json(
            json!({"data": {"enablePullRequestAutoMerge": {"clientMutationId": null}}}),
        ))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    let query = &s.bodies("POST", "/api/graphql").await[0]["query"];
    assert!(
        query
            .as_str()
            .unwrap()
            .contains("enablePullRequestAutoMerge"),
        "{query}"
    );
    s.server.verify().await;
}

// === GitLab only ===

/// A change whose image names its GitLab source: the merge request lists the commits GitLab's
/// compare API gives between the two revisions.
#[tokio::test]
async fn gitlab_merge_requests_list_the_commits_inside_the_image() {
    let s = setup().await;
    let repo = s.gitlab("");
    expect_gitlab_list(&s.server, "opened", json!([])).await;
    expect_gitlab_list(&s.server, "closed", json!([])).await;
    Mock::given(method("GET"))
        .and(path("/api/v4/projects/acme%2Fapi/repository/compare"))
        .and(query_param("from", "v1.0.0"))
        .and(query_param("to", "v1.2.0"))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .respond_with(ok_json(json!({
            "commits": [{"id": "a", "title": "Faster start-up"}, {"id": "b", "title": "# not a heading"}],
        })))
        .expect(1)
        .mount(&s.server)
        .await;
    Mock::given(method("POST"))
        .and(path(MRS))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .respond_with(created(merge_request(4, "Update api to 1.2.0", "")))
        .expect(1)
        .mount(&s.server)
        .await;
    let planner = ApiPlanner {
        source: Some(("https://gitlab.example.com/acme/api", "v1.0.0", "v1.2.0")),
        ..wants("1.2.0")
    };
    let outcome = s.run(&repo, &planner, false).await.unwrap();
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    let description = s.first_sent("POST", MRS, "description").await;
    assert!(
        description.contains(
            "[v1.0.0...v1.2.0](https://gitlab.example.com/acme/api/-/compare/v1.0.0...v1.2.0)\n  - Faster start-up\n  - \\# not a heading\n"
        ),
        "{description}"
    );
    s.server.verify().await;
}

/// GitLab marks a draft by the title's `Draft: ` prefix and sets auto-merge with a call of its
/// own after opening; an update keeps the prefix. (GitHub's draft flag and GraphQL auto-merge
/// are in `enterprise_draft_and_auto_merge_use_the_api_prefix_and_the_graphql_endpoint`.)
#[tokio::test]
async fn gitlab_a_draft_is_a_title_prefix_and_auto_merge_follows_the_opening() {
    let s = setup().await;
    let repo = s.gitlab("  draft: true\n  autoMerge: true\n");

    GitLabApi::expect_no_proposals_yet(&s.server).await;
    GitLabApi::expect_create(&s.server, 3, "Draft: Update api to 1.2.0", &[], &[]).await;
    Mock::given(method("PUT"))
        .and(path(format!("{MRS}/3/merge")))
        .and(header(PRIVATE_TOKEN.0, PRIVATE_TOKEN.1))
        .and(body_partial_json(
            json!({"merge_when_pipeline_succeeds": true}),
        ))
        .respond_with(ok_json(merge_request(3, "", "")))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    assert_eq!(outcome.pull_requests[0].number, Some(3));
    let description = s.first_sent("POST", MRS, "description").await;
    s.next_phase().await;

    // A newer tag: updated in place, still a draft.
    expect_gitlab_list(
        &s.server,
        "opened",
        json!([merge_request(3, "Draft: Update api to 1.2.0", &description)]),
    )
    .await;
    expect_gitlab_put(&s.server, 3, json!({"title": "Draft: Update api to 1.3.0"})).await;
    let outcome = s.apply(&repo, "1.3.0").await;
    assert_eq!(
        outcome.pull_requests[0].action,
        Action::Updated { rebuilt: false }
    );
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.3.0"
    );
    s.server.verify().await;
}

// === The tagpilot binary, end to end ===

mod cli {
    use std::process::Output;

    use super::*;
    use crate::support::bin::run_tagpilot;
    use crate::support::registry::{Auth, ImageSpec, TestRegistry};

    fn deployment(registry: &TestRegistry, api: &str, web: &str) -> String {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: api\nspec:\n  template:\n    spec:\n      containers:\n        - name: api\n          image: {}:{api}\n        - name: web\n          image: {}:{web}\n",
            registry.image("shop/api"),
            registry.image("shop/web")
        )
    }

    fn tagpilot(dir: &Path, args: &[&str]) -> Output {
        run_tagpilot(dir, args, &[("TAGPILOT_IT_GH_TOKEN", "cli-token")])
    }

    fn created_from(number: u64, branch: &str) -> ResponseTemplate {
        let mut pr = pull(number, "", false);
        pr["head"]["ref"] = branch.into();
        created(pr)
    }

    /// Two policies change two lines of one file: `plan` shows one pull request per policy
    /// that would open and writes nothing; `apply` opens them, each branch with only its own
    /// policy's edit on the base.
    #[tokio::test]
    async fn plan_shows_each_group_and_apply_opens_one_pull_request_per_policy() {
        let registry = TestRegistry::start(Auth::None).await;
        registry
            .push_tags("shop/api", &["1.0.0", "1.2.0"], ImageSpec::default())
            .await;
        registry
            .push_tags("shop/web", &["2.0.0", "2.1.0"], ImageSpec::default())
            .await;
        let repo = BareRepo::new();
        repo.push_change(
            "main",
            DEPLOYMENT_PATH,
            &deployment(&registry, "1.0.0", "2.0.0"),
            "old tags",
        );
        let server = MockServer::start().await;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tagpilot.yaml"),
            format!(
                "registries:\n{}policies: policies/\nrepositories:\n  - name: manifests\n    url: {}\n    branch: main\n    forge:\n      github: {{apiUrl: '{}', tokenEnv: TAGPILOT_IT_GH_TOKEN, repository: acme/manifests}}\n    write:\n      mode: pull-request\n      group: policy\n",
                registry.registries_yaml(),
                repo.file_url(),
                server.uri()
            ),
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("policies")).unwrap();
        for name in ["api", "web"] {
            std::fs::write(
                dir.path().join(format!("policies/{name}.yaml")),
                format!(
                    "apiVersion: tagpilot.dev/v1alpha1\nkind: ImagePolicy\nmetadata:\n  name: {name}\nspec:\n  image: {}\n  strategy:\n    semver: {{range: \"*\"}}\n  targets:\n    - repository: manifests\n      paths: [\"apps/**\"]\n",
                    registry.image(&format!("shop/{name}"))
                ),
            )
            .unwrap();
        }
        let auth = "Bearer cli-token";
        let main = repo.rev("main").unwrap();

        Mock::given(method("GET"))
            .and(path(PULLS))
            .and(query_param("state", "open"))
            .and(header("authorization", auth))
            .respond_with(ok_json(json!([])))
            .expect(2)
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path(PULLS))
            .and(query_param("state", "closed"))
            .and(header("authorization", auth))
            .respond_with(ok_json(json!([])))
            .expect(4)
            .mount(&server)
            .await;
        let out = tagpilot(dir.path(), &["plan"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            stdout.contains("api (tagpilot/api): would open"),
            "{stdout}"
        );
        assert!(
            stdout.contains("web (tagpilot/web): would open"),
            "{stdout}"
        );
        assert_eq!(repo.rev("tagpilot/api"), None, "plan pushed a branch");

        for (number, branch) in [(7, "tagpilot/api"), (8, "tagpilot/web")] {
            Mock::given(method("POST"))
                .and(path(PULLS))
                .and(header("authorization", auth))
                .and(body_partial_json(json!({"head": branch, "base": "main"})))
                .respond_with(created_from(number, branch))
                .expect(1)
                .mount(&server)
                .await;
        }
        let out = tagpilot(dir.path(), &["apply"]);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("api (tagpilot/api) #7: opened"), "{stdout}");
        assert!(stdout.contains("web (tagpilot/web) #8: opened"), "{stdout}");
        assert_eq!(repo.rev("main").unwrap(), main, "the base is never pushed");
        assert_eq!(
            repo.show("tagpilot/api", DEPLOYMENT_PATH),
            deployment(&registry, "1.2.0", "2.0.0"),
            "the api pull request carries only the api change"
        );
        assert_eq!(
            repo.show("tagpilot/web", DEPLOYMENT_PATH),
            deployment(&registry, "1.0.0", "2.1.0")
        );
        server.verify().await;
    }
}

/// The App's installation token also authenticates git over HTTPS (user `x-access-token`)
/// when the repository configures no `auth` of its own.
#[tokio::test]
async fn a_github_app_installation_token_pushes_over_http_as_x_access_token() {
    let s = setup().await;
    let git_server = HttpGitServer::start_for(s.repo.dir.path(), "x-access-token", "ghs_for-git");
    let keys = tempfile::tempdir().unwrap();
    generate_app_key(keys.path());
    let yaml = format!(
        "name: manifests\nurl: '{}'\nbranch: main\nforge:\n  github: {{apiUrl: '{}', repository: acme/manifests, app: {{appId: 7, installationId: 8, privateKeyFile: '{}'}}}}\nwrite: {{mode: pull-request, group: policy}}\n",
        git_server.url("origin.git"),
        s.server.uri(),
        keys.path().join("app.pem").display()
    );
    let repo: RepositoryConfig = serde_saphyr::from_str(&yaml).unwrap();
    Mock::given(method("POST"))
        .and(path("/app/installations/8/access_tokens"))
        .respond_with(created(json!({
            "token": "ghs_for-git",
            "expires_at": "2099-01-01T00:00:00Z",
            "permissions": {"contents": "write", "pull_requests": "write"},
        })))
        .expect(1)
        .mount(&s.server)
        .await;
    let installation = "Bearer ghs_for-git";
    Mock::given(method("GET"))
        .and(path(PULLS))
        .and(header("authorization", installation))
        .respond_with(ok_json(json!([])))
        .expect(2)
        .mount(&s.server)
        .await;
    Mock::given(method("POST"))
        .and(path(PULLS))
        .and(header("authorization", installation))
        .respond_with(created(pull(7, "", false)))
        .expect(1)
        .mount(&s.server)
        .await;
    let outcome = s.apply(&repo, "1.2.0").await;
    assert_eq!(outcome.pull_requests[0].action, Action::Opened);
    assert_eq!(
        api_line(&s.repo, BRANCH),
        "image: registry.example/api:1.2.0"
    );
    s.server.verify().await;
}
