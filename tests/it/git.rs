//! Git write-back against real git servers: file://, `git http-backend` behind lighttpd, sshd.
//!
//! The planner here is a stand-in that sets image lines to given tags; what is under test is
//! everything around it: the clone cache, commits, pushes, retries, auth and signing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};

use tagpilot::change::{Change, ChangeGroup};
use tagpilot::git::{
    AuthError, CommitFiles, ConfigError, GitError, Planned, Replanner, RepoCache, RepositoryConfig,
    SignError, WriteOptions, WriteStatus, write_all, write_planned, write_repository,
    write_repository_with,
};

use tagpilot::error_chain::chain;

use crate::support::git::*;

/// "Set line `line` of `file` to `image: <image>:<tag>`", for one policy.
#[derive(Clone)]
struct LineEdit {
    policy: &'static str,
    file: &'static str,
    line: usize,
    image: &'static str,
    tag: &'static str,
}

fn api(tag: &'static str) -> LineEdit {
    LineEdit {
        policy: "api",
        file: DEPLOYMENT_PATH,
        line: API_LINE,
        image: "registry.example/api",
        tag,
    }
}

fn web(tag: &'static str) -> LineEdit {
    LineEdit {
        policy: "web",
        file: DEPLOYMENT_PATH,
        line: WEB_LINE,
        image: "registry.example/web",
        tag,
    }
}

type Hook = Box<dyn FnOnce() + Send>;

/// Plans [`LineEdit`]s on the checkout, one group per policy, cumulatively as the writer's
/// contract asks. `before_first_return` runs once, after the first plan was made and before the
/// writer pushes it: the moment another writer races tagpilot.
struct LinePlanner {
    edits: Vec<LineEdit>,
    before_first_return: Mutex<Option<Hook>>,
    calls: AtomicU32,
}

impl LinePlanner {
    fn new(edits: Vec<LineEdit>) -> LinePlanner {
        LinePlanner {
            edits,
            before_first_return: Mutex::new(None),
            calls: AtomicU32::new(0),
        }
    }

    fn racing(edits: Vec<LineEdit>, hook: impl FnOnce() + Send + 'static) -> LinePlanner {
        LinePlanner {
            before_first_return: Mutex::new(Some(Box::new(hook))),
            ..LinePlanner::new(edits)
        }
    }

    fn plan_sync(&self, files: &CommitFiles) -> std::io::Result<Vec<ChangeGroup>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let mut contents: BTreeMap<PathBuf, String> = BTreeMap::new();
        let mut groups: Vec<ChangeGroup> = Vec::new();
        for edit in &self.edits {
            let path = PathBuf::from(edit.file);
            let text = match contents.get(&path) {
                Some(text) => text.clone(),
                None => read_text(files, edit.file)?,
            };
            let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
            let old = lines[edit.line - 1].clone();
            let indent = &old[..old.len() - old.trim_start().len()];
            let new = format!("{indent}image: {}:{}", edit.image, edit.tag);
            if old == new {
                continue;
            }
            let from = old.rsplit(':').next().unwrap().to_owned();
            lines[edit.line - 1] = new;
            let text = lines.join("\n") + "\n";
            contents.insert(path.clone(), text.clone());
            let change = Change {
                policy: edit.policy.into(),
                image: edit.image.into(),
                file: path.to_string_lossy().into_owned(),
                line: edit.line,
                from,
                to: edit.tag.into(),
                strategy: "semver",
                ..Default::default()
            };
            match groups.iter_mut().find(|g| g.key == edit.policy) {
                Some(group) => {
                    group.files.insert(path, text);
                    group.changes.push(change);
                }
                None => groups.push(ChangeGroup {
                    applications: Vec::new(),
                    key: edit.policy.into(),
                    files: [(path, text)].into_iter().collect(),
                    changes: vec![change],
                }),
            }
        }
        if let Some(hook) = self.before_first_return.lock().unwrap().take() {
            hook();
        }
        Ok(groups)
    }
}

impl Replanner for LinePlanner {
    type Plan = ();
    type Error = std::io::Error;

    /// Grouped per `write.group` here, as a planner does: git commits the groups as given.
    async fn plan(
        &self,
        repository: &RepositoryConfig,
        files: &CommitFiles,
    ) -> std::io::Result<Planned<()>> {
        let groups = self.plan_sync(files)?;
        Ok(Planned::groups(tagpilot::change::group(
            &repository.name,
            repository.write.group,
            groups,
        )))
    }
}

/// A planner for `edits` that, while it plans the first time, lets another writer push
/// `content` to `file` on `main`: the push that follows is rejected as non-fast-forward.
fn raced_by_push(
    edits: Vec<LineEdit>,
    origin: &BareRepo,
    file: &'static str,
    content: String,
    message: &'static str,
) -> LinePlanner {
    let other = origin.path();
    LinePlanner::racing(edits, move || {
        push_change_at(&other, "main", file, &content, message);
    })
}

fn config(yaml: &str) -> RepositoryConfig {
    serde_saphyr::from_str(yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
}

fn file_repo(origin: &BareRepo, extra: &str) -> RepositoryConfig {
    config(&format!(
        "name: manifests\nurl: '{}'\nbranch: main\n{extra}",
        origin.file_url()
    ))
}

fn expected_deployment(api: &str, web: &str) -> String {
    DEPLOYMENT
        .replace(
            "registry.example/api:1.0.0",
            &format!("registry.example/api:{api}"),
        )
        .replace(
            "registry.example/web:2.0.0",
            &format!("registry.example/web:{web}"),
        )
}

fn pushed(status: &WriteStatus) -> usize {
    match status {
        WriteStatus::Pushed { commits } => commits.len(),
        WriteStatus::WouldPush { .. } | WriteStatus::UpToDate => 0,
    }
}

// === file:// ===

#[tokio::test]
async fn pushes_one_commit_then_nothing_on_the_second_run() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "");
    let planner = LinePlanner::new(vec![api("1.1.0")]);

    let first = write_repository(&cache, &repo, &planner).await.unwrap();
    assert_eq!(pushed(&first.status), 1);
    assert_eq!(first.attempts, 1);
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
    let head = origin.rev("main").unwrap();
    let WriteStatus::Pushed { commits } = &first.status else {
        unreachable!()
    };
    assert_eq!(commits[0].id, head);

    let second = write_repository(&cache, &repo, &planner).await.unwrap();
    assert_eq!(second.status, WriteStatus::UpToDate);
    assert_eq!(
        origin.rev("main").unwrap(),
        head,
        "the second run must not commit"
    );
    assert_eq!(origin.subjects("main").len(), 2);
}

#[tokio::test]
async fn commit_carries_the_template_author_and_policy_trailers() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(
        &origin,
        "write:\n  author: {name: Image Bot, email: bot@example.org}\n  commitMessage: |\n    \
         deploy({{ repository }}): {{ changes | length }} change(s)\n    {% for c in changes %}\n    \
         * {{ c.image }} {{ c.from }} => {{ c.to }} at {{ c.file }}:{{ c.line }}\n    {%- endfor %}\n",
    );
    let planner = LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]);
    write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();

    let message = git(&origin.path(), &["log", "-1", "--format=%B", "main"]);
    assert_eq!(
        message,
        "deploy(manifests): 2 change(s)\n\n\
         * registry.example/api 1.0.0 => 1.1.0 at apps/api/deployment.yaml:10\n\
         * registry.example/web 2.0.0 => 2.1.0 at apps/api/deployment.yaml:12\n\n\
         Tagpilot-Policy: api\nTagpilot-Policy: web"
    );
    let trailers = git(
        &origin.path(),
        &[
            "log",
            "-1",
            "--format=%(trailers:key=Tagpilot-Policy,valueonly)",
            "main",
        ],
    );
    assert_eq!(trailers, "api\nweb");
    let author = git(
        &origin.path(),
        &["log", "-1", "--format=%an <%ae>|%cn <%ce>", "main"],
    );
    assert_eq!(
        author,
        "Image Bot <bot@example.org>|Image Bot <bot@example.org>"
    );
}

#[tokio::test]
async fn default_message_names_each_change() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "");
    write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await
    .unwrap();
    assert_eq!(
        git(&origin.path(), &["log", "-1", "--format=%B", "main"]),
        "chore(images): update 1 image(s)\n\n\
         - registry.example/api: 1.0.0 -> 1.1.0 (apps/api/deployment.yaml)\n\n\
         Tagpilot-Policy: api"
    );
    let author = git(&origin.path(), &["log", "-1", "--format=%an <%ae>", "main"]);
    assert_eq!(author, "tagpilot <tagpilot@users.noreply.example>");
}

#[tokio::test]
async fn groups_one_commit_per_policy() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {group: policy}\n");
    let planner = LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]);
    let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 2);
    assert_eq!(
        git(
            &origin.path(),
            &[
                "log",
                "--format=%(trailers:key=Tagpilot-Policy,valueonly)%x00",
                "main"
            ]
        )
        .split('\0')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>(),
        ["web", "api"]
    );
    // Each commit holds only its policy's edit; together they hold both.
    assert_eq!(
        origin.show("main~1", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.1.0")
    );
}

#[tokio::test]
async fn groups_one_commit_per_repository() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {group: repository}\n");
    let planner = LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]);
    let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(
        origin.subjects("main"),
        ["chore(images): update 2 image(s)", "initial"]
    );
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.1.0")
    );
}

/// The groups are decided once, by the planner: git commits the groups it is given, one commit
/// each, whatever `write.group` says (here `repository`, which a planner would have merged).
#[tokio::test]
async fn commits_the_groups_it_is_given_without_grouping_them_again() {
    struct Ungrouped(LinePlanner);
    impl Replanner for Ungrouped {
        type Plan = ();
        type Error = std::io::Error;
        async fn plan(
            &self,
            _: &RepositoryConfig,
            files: &CommitFiles,
        ) -> std::io::Result<Planned<()>> {
            self.0.plan_sync(files).map(Planned::groups)
        }
    }
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {group: repository}\n");
    let planner = Ungrouped(LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]));
    let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 2);
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.1.0")
    );
}

/// What the push after a race comes to, in [`another_writer_pushing_while_we_plan`].
enum AfterRace {
    /// Replanned on the new tip and pushed: the first commit's first change is from `from`
    /// (where the case says).
    Pushed { from: Option<&'static str> },
    /// The new tip already has the change: nothing to push.
    UpToDate,
}

/// Another writer pushes to `main` while tagpilot plans: the push is rejected as
/// non-fast-forward, and what follows depends on what the other writer changed.
#[tokio::test]
async fn another_writer_pushing_while_we_plan() {
    struct Case {
        name: &'static str,
        /// The tag tagpilot moves api to.
        ours: &'static str,
        /// What the other writer pushes: file, content, subject.
        theirs: (&'static str, String, &'static str),
        after: AfterRace,
        /// Asserted where it says something about the case: two attempts, two plans.
        attempts: Option<u32>,
        plans: Option<u32>,
        subjects: &'static [&'static str],
        linear: bool,
        /// The other writer's file as it ends (when it is not the Deployment).
        kept: Option<(&'static str, &'static str)>,
        deployment: (&'static str, &'static str),
    }
    let cases = [
        Case {
            name: "an unrelated file is kept",
            ours: "1.1.0",
            theirs: (
                "README.md",
                "manifests, edited by a human\n".into(),
                "docs: edit readme",
            ),
            after: AfterRace::Pushed { from: None },
            attempts: Some(2),
            plans: Some(2),
            subjects: &[
                "chore(images): update 1 image(s)",
                "docs: edit readme",
                "initial",
            ],
            linear: true,
            kept: Some(("README.md", "manifests, edited by a human\n")),
            deployment: ("1.1.0", "2.0.0"),
        },
        Case {
            name: "the same line wins when it already made the change",
            ours: "1.1.0",
            theirs: (
                DEPLOYMENT_PATH,
                expected_deployment("1.1.0", "2.0.0"),
                "bump api by hand",
            ),
            after: AfterRace::UpToDate,
            attempts: None,
            plans: None,
            subjects: &["bump api by hand", "initial"],
            linear: false,
            kept: None,
            deployment: ("1.1.0", "2.0.0"),
        },
        Case {
            name: "the same line with another tag is replanned",
            ours: "1.2.0",
            theirs: (
                DEPLOYMENT_PATH,
                expected_deployment("1.1.0", "2.0.0"),
                "bump api to 1.1.0",
            ),
            after: AfterRace::Pushed {
                from: Some("1.1.0"),
            },
            attempts: Some(2),
            plans: None,
            subjects: &[
                "chore(images): update 1 image(s)",
                "bump api to 1.1.0",
                "initial",
            ],
            linear: true,
            kept: None,
            deployment: ("1.2.0", "2.0.0"),
        },
    ];
    for case in cases {
        let name = case.name;
        let origin = BareRepo::new();
        let cache_dir = tempfile::tempdir().unwrap();
        let repo = file_repo(&origin, "");
        let (file, content, message) = case.theirs;
        let planner = raced_by_push(vec![api(case.ours)], &origin, file, content, message);
        let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        if let Some(attempts) = case.attempts {
            assert_eq!(
                outcome.attempts, attempts,
                "{name}: the first push must be rejected and retried"
            );
        }
        if let Some(plans) = case.plans {
            assert_eq!(
                planner.calls.load(Ordering::SeqCst),
                plans,
                "{name}: planned again on the new tip"
            );
        }
        match (case.after, &outcome.status) {
            (AfterRace::UpToDate, WriteStatus::UpToDate) => {}
            (AfterRace::Pushed { from }, WriteStatus::Pushed { commits }) => {
                if let Some(from) = from {
                    assert_eq!(
                        commits[0].changes[0].from, from,
                        "{name}: the message describes the replanned change"
                    );
                }
            }
            (_, status) => panic!("{name}: {status:?}"),
        }
        assert_eq!(origin.subjects("main"), case.subjects, "{name}");
        if case.linear {
            assert_eq!(origin.merges("main"), 0, "{name}: history stays linear");
        }
        if let Some((file, text)) = case.kept {
            assert_eq!(origin.show("main", file), text, "{name}");
        }
        let (api_tag, web_tag) = case.deployment;
        assert_eq!(
            origin.show("main", DEPLOYMENT_PATH),
            expected_deployment(api_tag, web_tag),
            "{name}"
        );
    }
}

#[tokio::test]
async fn gives_up_after_max_retries_when_the_branch_keeps_moving() {
    struct AlwaysRacing(PathBuf, AtomicU32);
    impl Replanner for AlwaysRacing {
        type Plan = ();
        type Error = std::io::Error;
        async fn plan(
            &self,
            repository: &RepositoryConfig,
            files: &CommitFiles,
        ) -> std::io::Result<Planned<()>> {
            let n = self.1.fetch_add(1, Ordering::SeqCst);
            let groups = tagpilot::change::group(
                &repository.name,
                repository.write.group,
                LinePlanner::new(vec![api("9.9.9")]).plan_sync(files)?,
            );
            push_change_at(
                &self.0,
                "main",
                "README.md",
                &format!("edit {n}\n"),
                &format!("edit {n}"),
            );
            Ok(Planned::groups(groups))
        }
    }
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {maxRetries: 1}\n");
    let planner = AlwaysRacing(origin.path(), AtomicU32::new(0));
    let err = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap_err();
    eprintln!("{err}");
    assert!(
        matches!(err, GitError::RetriesExhausted { attempts: 2, .. }),
        "{err}"
    );
    assert!(chain(&err).contains("`manifests`"), "{err}");
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        DEPLOYMENT,
        "nothing of ours landed"
    );
}

#[tokio::test]
async fn owned_branch_is_rebuilt_from_the_base_with_a_lease() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "write: {branch: tagpilot/updates}\n");

    let first = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&first.status), 1);
    assert_eq!(
        origin.subjects("main"),
        ["initial"],
        "the base branch is untouched"
    );
    assert_eq!(
        origin.subjects("tagpilot/updates"),
        ["chore(images): update 1 image(s)", "initial"]
    );

    // Same plan again: nothing new, nothing pushed.
    let tip = origin.rev("tagpilot/updates").unwrap();
    let again = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(again.status, WriteStatus::UpToDate);
    assert_eq!(origin.rev("tagpilot/updates").unwrap(), tip);

    // The base moves and a newer tag arrives: the branch is rebuilt on the new base, with one
    // commit, replacing the old proposal.
    origin.push_change("main", "README.md", "new readme\n", "docs");
    let rebuilt = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.2.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&rebuilt.status), 1);
    assert_eq!(
        origin.subjects("tagpilot/updates"),
        ["chore(images): update 1 image(s)", "docs", "initial"]
    );
    assert_eq!(
        origin.show("tagpilot/updates", DEPLOYMENT_PATH),
        expected_deployment("1.2.0", "2.0.0")
    );
    assert_eq!(origin.subjects("main"), ["docs", "initial"]);
}

#[tokio::test]
async fn owned_branch_moved_by_someone_else_is_not_overwritten_blindly() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "write: {branch: tagpilot/updates}\n");
    write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();

    // Someone pushes to tagpilot's branch after tagpilot fetched it: the lease breaks, tagpilot
    // fetches again and only then rebuilds.
    let other = origin.path();
    let planner = LinePlanner::racing(vec![api("1.2.0")], move || {
        push_change_at(
            &other,
            "tagpilot/updates",
            "NOTES.md",
            "human note\n",
            "human commit",
        );
    });
    let outcome = write_repository(&cache, &repo, &planner).await.unwrap();
    assert_eq!(outcome.attempts, 2, "the lease must have caught the move");
    assert_eq!(
        origin.show("tagpilot/updates", DEPLOYMENT_PATH),
        expected_deployment("1.2.0", "2.0.0")
    );
}

#[tokio::test]
async fn half_written_cache_is_recloned() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "");
    // What a crash during the first clone leaves: an initialised repository, no fetched refs,
    // some junk.
    let dir = cache.repo_dir(&repo);
    std::fs::create_dir_all(&dir).unwrap();
    git(&dir, &["init", "-q", "--bare", "."]);
    std::fs::write(dir.join("objects/pack/tmp_pack_123"), b"partial").unwrap();

    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert!(!dir.join("objects/pack/tmp_pack_123").exists());
}

#[tokio::test]
async fn corrupt_cache_is_recloned() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "");
    write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    // Lose the object store of a complete cache, and leave a stale lock behind.
    let dir = cache.repo_dir(&repo);
    std::fs::remove_dir_all(dir.join("objects")).unwrap();
    std::fs::create_dir_all(dir.join("objects")).unwrap();
    std::fs::write(dir.join("refs/remotes/origin/main.lock"), b"").ok();

    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.2.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.2.0", "2.0.0")
    );
}

#[tokio::test]
async fn dry_run_builds_the_commits_and_pushes_nothing() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {group: policy}\n");
    let before = origin.rev("main").unwrap();
    let planner = LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]);
    let options = WriteOptions { dry_run: true };
    let outcome =
        write_repository_with(&RepoCache::new(cache_dir.path()), &repo, &planner, options)
            .await
            .unwrap();
    let WriteStatus::WouldPush { commits } = &outcome.status else {
        panic!("{outcome:?}")
    };
    assert_eq!(
        commits.iter().map(|c| c.group.as_str()).collect::<Vec<_>>(),
        ["api", "web"]
    );
    assert_eq!(origin.rev("main").unwrap(), before);
    assert_eq!(git(&origin.path(), &["rev-list", "--all", "--count"]), "1");
}

#[tokio::test]
async fn a_snapshot_for_plan_reads_the_object_database_and_writes_nothing() {
    use tagpilot::files::Files as _;
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "");
    let before = origin.rev("main").unwrap();
    let files = tagpilot::git::snapshot(&RepoCache::new(cache_dir.path()), &repo)
        .await
        .unwrap();
    assert_eq!(files.commit(), before);
    assert_eq!(files.manifests(), [PathBuf::from(DEPLOYMENT_PATH)]);
    assert_eq!(read_text(&files, DEPLOYMENT_PATH).unwrap(), DEPLOYMENT);
    assert_eq!(origin.rev("main").unwrap(), before);
    assert_eq!(work_tree_files(cache_dir.path()), Vec::<PathBuf>::new());
}

/// Files of the test repository's tree found on disk under `dir` (a work tree written out).
fn work_tree_files(dir: &Path) -> Vec<PathBuf> {
    walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name() == "deployment.yaml" || e.file_name() == "README.md")
        .map(|e| e.path().to_path_buf())
        .collect()
}

/// Temporary checkouts for planning that hold `marker` (other processes on this machine may
/// write checkouts of their own repositories at the same time).
fn temporary_checkouts(marker: &str) -> Vec<PathBuf> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("tagpilot-checkout-")
        })
        .map(|e| e.path().join(marker))
        .filter(|p| p.exists())
        .collect()
}

#[tokio::test]
async fn planning_a_repository_writes_no_work_tree() {
    /// Looks at the disk while it plans: the tree it reads must exist nowhere as files.
    struct Watching {
        inner: LinePlanner,
        cache: PathBuf,
        marker: String,
        seen: Mutex<Vec<PathBuf>>,
    }
    impl Replanner for Watching {
        type Plan = ();
        type Error = std::io::Error;
        async fn plan(
            &self,
            repository: &RepositoryConfig,
            files: &CommitFiles,
        ) -> std::io::Result<Planned<()>> {
            assert!(
                read_text(files, &self.marker).is_ok(),
                "the marker is in the tree"
            );
            let found: Vec<PathBuf> = temporary_checkouts(&self.marker)
                .into_iter()
                .chain(work_tree_files(&self.cache))
                .collect();
            self.seen.lock().unwrap().extend(found);
            self.inner.plan(repository, files).await
        }
    }
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    // A file only this test's repository holds, to tell its checkouts from anyone else's.
    let unique = cache_dir.path().file_name().unwrap().to_string_lossy();
    let marker = format!("marker/{unique}.yaml");
    push_change_at(&origin.path(), "main", &marker, "a: 1\n", "marker");
    let repo = file_repo(&origin, "");
    let planner = Watching {
        inner: LinePlanner::new(vec![api("1.1.0")]),
        cache: cache_dir.path().to_path_buf(),
        marker,
        seen: Mutex::new(Vec::new()),
    };
    let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(*planner.seen.lock().unwrap(), Vec::<PathBuf>::new());
    assert_eq!(work_tree_files(cache_dir.path()), Vec::<PathBuf>::new());
}

#[tokio::test]
async fn a_failing_repository_does_not_stop_the_others() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let good = file_repo(&origin, "");
    let missing = config("name: gone\nurl: 'file:///nonexistent/tagpilot/gone.git'\n");
    let no_branch = config(&format!(
        "name: nobranch\nurl: '{}'\nbranch: release\n",
        origin.file_url()
    ));
    let reports = write_all(
        &RepoCache::new(cache_dir.path()),
        &[missing, no_branch, good],
        &LinePlanner::new(vec![api("1.1.0")]),
        WriteOptions::default(),
    )
    .await;
    assert_eq!(reports.len(), 3);
    let err = reports[0].result.as_ref().unwrap_err();
    eprintln!("{err}");
    assert!(chain(err).contains("`gone`"), "{err}");
    let err = reports[1].result.as_ref().unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, GitError::BranchNotFound { .. }), "{err}");
    assert!(chain(err).contains("`release`"), "{err}");
    assert_eq!(pushed(&reports[2].result.as_ref().unwrap().status), 1);
}

#[tokio::test]
async fn pull_request_mode_is_refused_before_any_work() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(&origin, "write: {mode: pull-request}\n");
    let planner = LinePlanner::new(vec![api("1.1.0")]);
    let err = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap_err();
    eprintln!("{err}");
    assert!(chain(&err).contains("pull-request"), "{err}");
    assert_eq!(planner.calls.load(Ordering::SeqCst), 0);
}

// === HTTP: git http-backend behind lighttpd, Basic auth ===

fn http_repo(server: &HttpGitServer, password_env: &str, extra: &str) -> RepositoryConfig {
    config(&format!(
        "name: manifests\nurl: '{}'\nauth: {{username: {HTTP_USER}, passwordEnv: {password_env}}}\n{extra}",
        server.url("origin.git")
    ))
}

#[tokio::test]
async fn http_push_with_basic_auth_and_incremental_fetch() {
    set_test_secrets();
    let origin = BareRepo::new();
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");

    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
    assert!(
        !cache.repo_dir(&repo).join("shallow").exists(),
        "fetches are full: libgit2 cannot push from a shallow clone"
    );

    // Someone else commits; the next run fetches incrementally on top of the cache.
    origin.push_change("main", "README.md", "edited\n", "docs");
    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.2.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(
        origin.subjects("main")[..2],
        ["chore(images): update 1 image(s)", "docs"]
    );
    assert_eq!(origin.show("main", "README.md"), "edited\n");
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.2.0", "2.0.0")
    );
    git(&origin.path(), &["fsck", "--strict"]);
}

#[tokio::test]
async fn http_race_is_rejected_by_the_server_and_retried() {
    set_test_secrets();
    let origin = BareRepo::new();
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");
    let planner = raced_by_push(
        vec![api("1.1.0")],
        &origin,
        "README.md",
        "racing edit\n".into(),
        "racing edit",
    );
    let outcome = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner)
        .await
        .unwrap();
    assert_eq!(outcome.attempts, 2);
    assert_eq!(
        origin.subjects("main"),
        ["chore(images): update 1 image(s)", "racing edit", "initial"]
    );
    assert_eq!(origin.merges("main"), 0);
}

#[tokio::test]
async fn http_wrong_password_is_an_auth_error_without_the_secret() {
    set_test_secrets();
    let origin = BareRepo::new();
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let planner = LinePlanner::new(vec![api("1.1.0")]);

    let err = write_repository(
        &cache,
        &http_repo(&server, WRONG_PASSWORD_ENV, ""),
        &planner,
    )
    .await
    .unwrap_err();

    eprintln!("{err}");
    assert!(matches!(err, GitError::Auth { .. }), "{err:?}");
    let shown = format!("{} {err:?}", chain(&err));
    assert!(
        shown.contains("`manifests`") && shown.contains("authentication"),
        "{shown}"
    );
    assert!(
        !shown.contains(WRONG_PASSWORD) && !shown.contains(HTTP_PASSWORD),
        "{shown}"
    );
    assert_eq!(planner.calls.load(Ordering::SeqCst), 0);

    // A password in the URL is not printed either.
    let leaky = config(&format!(
        "name: manifests\nurl: 'http://{HTTP_USER}:{WRONG_PASSWORD}@127.0.0.1:{}/git/origin.git'\n",
        server.port
    ));
    let err = write_repository(&cache, &leaky, &planner)
        .await
        .unwrap_err();
    eprintln!("{err}");
    let shown = format!("{} {err:?}", chain(&err));
    assert!(!shown.contains(WRONG_PASSWORD), "{shown}");
    // libgit2 sent it: the message says it was refused, not that it was ignored.
    assert!(
        shown.contains("refused the user and password in the URL"),
        "{shown}"
    );

    // The cache is still usable with the right credentials.
    let ok = write_repository(&cache, &http_repo(&server, HTTP_PASSWORD_ENV, ""), &planner)
        .await
        .unwrap();
    assert_eq!(pushed(&ok.status), 1);
}

/// libgit2 uses a user and password written in the URL: a repository without `auth` pushes
/// with them.
#[tokio::test]
async fn http_password_in_the_url_is_used() {
    set_test_secrets();
    let origin = BareRepo::new();
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = config(&format!(
        "name: manifests\nurl: 'http://{HTTP_USER}:{HTTP_PASSWORD}@127.0.0.1:{}/git/origin.git'\n",
        server.port
    ));
    let outcome = write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await
    .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert!(!outcome.url.contains(HTTP_PASSWORD), "{}", outcome.url);
}

#[tokio::test]
async fn unreachable_remote_is_named_and_leaves_a_usable_cache() {
    set_test_secrets();
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let planner = LinePlanner::new(vec![api("1.1.0")]);
    // A port held for the test but never listened on: connections to it are refused, and no
    // other test can take it meanwhile.
    let unreachable = tokio::net::TcpSocket::new_v4().unwrap();
    unreachable.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = unreachable.local_addr().unwrap().port();
    let repo = config(&format!(
        "name: manifests\nurl: 'http://127.0.0.1:{port}/git/origin.git'\n\
         auth: {{username: {HTTP_USER}, passwordEnv: {HTTP_PASSWORD_ENV}}}\n"
    ));
    let err = write_repository(&cache, &repo, &planner).await.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, GitError::Unreachable { .. }), "{err:?}");
    assert!(chain(&err).contains(&format!("127.0.0.1:{port}")), "{err}");

    // Once the server is there, the same cache directory works.
    let server = HttpGitServer::start(origin.dir.path());
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");
    assert_eq!(
        pushed(
            &write_repository(&cache, &repo, &planner)
                .await
                .unwrap()
                .status
        ),
        1
    );
}

#[tokio::test]
async fn protected_branch_refusal_is_reported_and_nothing_lands() {
    set_test_secrets();
    let origin = BareRepo::new();
    origin.protect();
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");
    let before = origin.rev("main").unwrap();

    let err = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap_err();

    eprintln!("{err}");
    assert!(matches!(err, GitError::Rejected { .. }), "{err:?}");
    let shown = chain(&err);
    assert!(
        shown.contains("`manifests`") && shown.contains("`main`"),
        "{shown}"
    );
    // The remote's status and the hook's own words (`remote:` lines), both.
    assert!(shown.contains("pre-receive hook declined"), "{shown}");
    assert!(
        shown.contains("main is protected: pushes need a review"),
        "{shown}"
    );
    assert_eq!(origin.rev("main").unwrap(), before, "no partial commit");
    assert_eq!(git(&origin.path(), &["rev-list", "--all", "--count"]), "1");

    // Lifting the protection, the same cache pushes.
    std::fs::remove_file(origin.path().join("hooks/pre-receive")).unwrap();
    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
}

/// Another push holds `main`'s lock the moment the server applies ours: git's receive-pack
/// answers "failed to update ref" (cannot lock ref). That push lost a race, and is retried like
/// one that found the branch moved, even though the next fetch finds `main` where it was.
#[tokio::test]
async fn http_push_that_cannot_lock_the_ref_is_retried_as_a_race() {
    set_test_secrets();
    let origin = BareRepo::new();
    let lock = origin.path().join("refs/heads/main.lock");
    let seen = origin.dir.path().join("hook-runs");
    // First push: the "other push" takes the lock just before ours updates the ref. Second:
    // it has finished.
    write_executable(
        &origin.path().join("hooks/pre-receive"),
        &format!(
            "#!/bin/sh\nif [ -e '{seen}' ]; then rm -f '{lock}'; else touch '{seen}' '{lock}'; fi\n",
            seen = seen.display(),
            lock = lock.display()
        ),
    );
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");
    let before = origin.rev("main").unwrap();

    let outcome = write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await
    .unwrap();

    assert_eq!(outcome.attempts, 2);
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(origin.rev("main~1").unwrap(), before);
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
}

/// Pushes `main.lock` back by an hour: what a push killed while it held the lock leaves.
fn age_lock(lock: &Path) {
    let status = Command::new("touch")
        .args(["-d", "1 hour ago"])
        .arg(lock)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A ref lock a killed push left in a `file://` remote blocks every later push to the branch,
/// people's too. An old one is removed (and logged); a young one belongs to a push in flight:
/// it is left alone, and the push that meets it is retried and finally reported.
#[tokio::test]
async fn a_stale_ref_lock_in_a_file_remote_is_removed_and_a_fresh_one_is_not() {
    let origin = BareRepo::new();
    let lock = origin.path().join("refs/heads/main.lock");
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "write: {maxRetries: 1}\n");

    // A fresh lock: a push in flight, as far as anyone can tell.
    std::fs::write(&lock, "").unwrap();
    let err = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, GitError::Rejected { .. }), "{err:?}");
    assert!(chain(&err).contains("main.lock"), "{err}");
    assert!(lock.exists(), "a young lock is not touched");

    // Aged past the threshold: removed, and the push goes through.
    age_lock(&lock);
    let outcome = write_repository(&cache, &repo, &LinePlanner::new(vec![api("1.1.0")]))
        .await
        .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert!(!lock.exists());
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
    // And people's pushes work again.
    origin.push_change("main", "README.md", "after\n", "a person's push");
}

// === SSH: sshd with generated host and user keys ===

/// Pushing over SSH, one server for each way the two sides authenticate: a key file and a
/// known host push (URLs printed without userinfo); a key with a passphrase (from the
/// environment) pushes too; a host key that does not match `known_hosts` (a changed host, or an
/// interception), or a host missing from it (checking is on by default), is refused before
/// anything is read from it; a key the server does not authorize is an auth error.
#[tokio::test]
async fn ssh_pushes_or_refuses_by_its_keys_and_known_hosts() {
    enum Expect {
        Pushed,
        /// A host key error whose chain says each of these.
        HostKey(Vec<String>),
        Auth,
    }
    struct Case {
        name: &'static str,
        key: PathBuf,
        passphrase: bool,
        known_hosts: PathBuf,
        expect: Expect,
    }
    set_test_secrets();
    let server = SshGitServer::start();
    let dir = server.dir.path();
    // Authorized besides the server's own user key.
    let locked = ssh_keygen(dir, "locked_ed25519", PASSPHRASE);
    std::fs::write(
        dir.join("authorized_keys"),
        format!("{}\n{}\n", server.user_key.public, locked.public),
    )
    .unwrap();
    let impostor = ssh_keygen(dir, "impostor_ed25519", "");
    let wrong = dir.join("known_hosts_wrong");
    std::fs::write(
        &wrong,
        format!("[127.0.0.1]:{} {}\n", server.port, impostor.public),
    )
    .unwrap();
    let empty = dir.join("known_hosts_empty");
    std::fs::write(&empty, "").unwrap();
    let stranger = ssh_keygen(dir, "stranger_ed25519", "");
    let key = server.user_key.private.clone();
    let cases = [
        Case {
            name: "a key file and a known host",
            key: key.clone(),
            passphrase: false,
            known_hosts: server.known_hosts(),
            expect: Expect::Pushed,
        },
        Case {
            name: "a key with a passphrase",
            key: locked.private.clone(),
            passphrase: true,
            known_hosts: server.known_hosts(),
            expect: Expect::Pushed,
        },
        Case {
            name: "another key for the host",
            key: key.clone(),
            passphrase: false,
            known_hosts: wrong,
            expect: Expect::HostKey(vec![
                "does not match".into(),
                format!("[127.0.0.1]:{}", server.port),
            ]),
        },
        Case {
            name: "the host not in known_hosts",
            key,
            passphrase: false,
            known_hosts: empty,
            expect: Expect::HostKey(vec!["is not in".into()]),
        },
        Case {
            name: "a key the server does not authorize",
            key: stranger.private.clone(),
            passphrase: false,
            known_hosts: server.known_hosts(),
            expect: Expect::Auth,
        },
    ];
    for case in cases {
        let name = case.name;
        let origin = BareRepo::new();
        let cache_dir = tempfile::tempdir().unwrap();
        let passphrase = match case.passphrase {
            true => format!(" passphraseEnv: {PASSPHRASE_ENV},"),
            false => String::new(),
        };
        let repo = config(&format!(
            "name: manifests\nurl: '{}'\nauth: {{sshKeyFile: '{}',{passphrase} knownHostsFile: '{}'}}\n",
            server.url(&origin.path()),
            case.key.display(),
            case.known_hosts.display()
        ));
        let planner = LinePlanner::new(vec![api("1.1.0")]);
        let written = write_repository(&RepoCache::new(cache_dir.path()), &repo, &planner).await;
        match (case.expect, written) {
            (Expect::Pushed, Ok(outcome)) => {
                assert_eq!(pushed(&outcome.status), 1, "{name}");
                assert!(
                    !outcome.url.contains(&server.user),
                    "{name}: URLs are printed without userinfo: {}",
                    outcome.url
                );
                assert_eq!(
                    origin.show("main", DEPLOYMENT_PATH),
                    expected_deployment("1.1.0", "2.0.0"),
                    "{name}"
                );
            }
            (Expect::HostKey(says), Err(err)) => {
                assert!(matches!(err, GitError::HostKey { .. }), "{name}: {err:?}");
                let shown = chain(&err);
                assert!(says.iter().all(|s| shown.contains(s)), "{name}: {shown}");
                assert_eq!(
                    planner.calls.load(Ordering::SeqCst),
                    0,
                    "{name}: nothing is read from an unverified host"
                );
            }
            (Expect::Auth, Err(err)) => {
                assert!(matches!(err, GitError::Auth { .. }), "{name}: {err:?}");
            }
            (_, written) => panic!("{name}: {:?}", written.map(|o| o.status)),
        }
    }
}

/// What [`ssh_agent_child`] is told by its parent test, through its environment.
const AGENT_CHILD_URL: &str = "TAGPILOT_IT_AGENT_URL";
const AGENT_CHILD_KNOWN_HOSTS: &str = "TAGPILOT_IT_AGENT_KNOWN_HOSTS";
/// `pushed` or `refused`: what the child expects of the write.
const AGENT_CHILD_EXPECT: &str = "TAGPILOT_IT_AGENT_EXPECT";

/// Runs [`ssh_agent_child`] in a child process of this test binary, with `SSH_AUTH_SOCK` set
/// to `agent`'s socket from the start. libssh2 reads `SSH_AUTH_SOCK` from the process
/// environment; setting it here would race with the other tests' threads reading theirs.
fn run_agent_child(agent: &SshAgent, url: &str, known_hosts: &Path, expect: &str) {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "git::ssh_agent_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("SSH_AUTH_SOCK", &agent.socket)
        .env(AGENT_CHILD_URL, url)
        .env(AGENT_CHILD_KNOWN_HOSTS, known_hosts)
        .env(AGENT_CHILD_EXPECT, expect)
        .output()
        .expect("run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("{stderr}");
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "ssh_agent_child ({expect}) failed:\n{stdout}\n{stderr}"
    );
}

#[test]
fn ssh_agent_authenticates_against_sshd() {
    let origin = BareRepo::new();
    let server = SshGitServer::start();
    let agent = SshAgent::start();
    let url = server.url(&origin.path());
    let known_hosts = server.known_hosts();
    // An agent without the authorized key: the server refuses what it offers.
    let stranger = ssh_keygen(server.dir.path(), "stranger_ed25519", "");
    agent.add(&stranger.private);
    run_agent_child(&agent, &url, &known_hosts, "refused");
    assert_eq!(origin.subjects("main"), ["initial"]);
    // With the authorized key added, the same configuration pushes.
    agent.add(&server.user_key.private);
    run_agent_child(&agent, &url, &known_hosts, "pushed");
    assert_eq!(
        origin.show("main", DEPLOYMENT_PATH),
        expected_deployment("1.1.0", "2.0.0")
    );
}

/// The half of [`ssh_agent_authenticates_against_sshd`] that runs with `SSH_AUTH_SOCK` set.
#[tokio::test]
#[ignore = "run by ssh_agent_authenticates_against_sshd, in a child process with SSH_AUTH_SOCK"]
async fn ssh_agent_child() {
    let (Ok(url), Ok(known_hosts), Ok(expect)) = (
        std::env::var(AGENT_CHILD_URL),
        std::env::var(AGENT_CHILD_KNOWN_HOSTS),
        std::env::var(AGENT_CHILD_EXPECT),
    ) else {
        panic!("run by ssh_agent_authenticates_against_sshd, which sets up its environment");
    };
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = config(&format!(
        "name: manifests\nurl: '{url}'\nauth: {{sshAgent: true, knownHostsFile: '{known_hosts}'}}\n"
    ));
    repo.check_offline().unwrap();
    let result = write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await;
    match expect.as_str() {
        "pushed" => assert_eq!(pushed(&result.unwrap().status), 1),
        "refused" => {
            let err = result.unwrap_err();
            eprintln!("{err}");
            assert!(
                matches!(
                    err,
                    GitError::Auth {
                        source: AuthError::Rejected,
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        other => panic!("unknown expectation {other}"),
    }
}

// === Signing ===

#[tokio::test]
async fn ssh_signed_commit_passes_git_verify_commit() {
    let origin = BareRepo::new();
    let keys = tempfile::tempdir().unwrap();
    let key = ssh_keygen(keys.path(), "signing_ed25519", "");
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(
        &origin,
        &format!(
            "write: {{signing: {{sshKeyFile: '{}'}}}}\n",
            key.private.display()
        ),
    );
    write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]),
    )
    .await
    .unwrap();

    let allowed = keys.path().join("allowed_signers");
    std::fs::write(
        &allowed,
        format!(
            "tagpilot@users.noreply.example namespaces=\"git\" {}\n",
            key.public
        ),
    )
    .unwrap();
    let output = git_command(
        &origin.path(),
        &[
            "-c",
            "gpg.format=ssh",
            "-c",
            &format!("gpg.ssh.allowedSignersFile={}", allowed.display()),
            "verify-commit",
            "-v",
            "main",
        ],
    )
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "git verify-commit refused: {stderr}"
    );
    assert!(stderr.contains("Good \"git\" signature"), "{stderr}");
}

/// Runs `gpg` in the home directory `gnupg`, with [`PASSPHRASE`] for any key it unlocks.
fn gpg(gnupg: &Path, args: &[&str]) -> Vec<u8> {
    let output = Command::new("gpg")
        .env("GNUPGHOME", gnupg)
        .args([
            "--batch",
            "--pinentry-mode",
            "loopback",
            "--passphrase",
            PASSPHRASE,
        ])
        .args(args)
        .output()
        .expect("run gpg");
    assert!(
        output.status.success(),
        "gpg {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// An armoured OpenPGP secret key protected by [`PASSPHRASE`], written to `gnupg/signing.asc`:
/// a certify-only primary key with a signing subkey, the usual layout.
fn openpgp_key(gnupg: &Path) -> PathBuf {
    gpg(
        gnupg,
        &[
            "--quick-gen-key",
            "tagpilot <tagpilot@users.noreply.example>",
            "ed25519",
            "cert",
            "never",
        ],
    );
    let fingerprint = String::from_utf8(gpg(gnupg, &["--list-keys", "--with-colons"]))
        .unwrap()
        .lines()
        .find(|l| l.starts_with("fpr:"))
        .unwrap()
        .split(':')
        .nth(9)
        .unwrap()
        .to_owned();
    gpg(
        gnupg,
        &["--quick-add-key", &fingerprint, "ed25519", "sign", "never"],
    );
    let secret = gpg(gnupg, &["--armor", "--export-secret-keys", &fingerprint]);
    let key_file = gnupg.join("signing.asc");
    std::fs::write(&key_file, secret).unwrap();
    key_file
}

#[tokio::test]
async fn openpgp_signed_commit_passes_git_verify_commit() {
    set_test_secrets();
    let gnupg = tempfile::tempdir().unwrap();
    let key_file = openpgp_key(gnupg.path());

    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(
        &origin,
        &format!(
            "write: {{signing: {{pgpKeyFile: '{}', passphraseEnv: {PASSPHRASE_ENV}}}}}\n",
            key_file.display()
        ),
    );
    write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await
    .unwrap();

    let output = git_command(&origin.path(), &["verify-commit", "-v", "main"])
        .env("GNUPGHOME", gnupg.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "git verify-commit refused: {stderr}"
    );
    assert!(stderr.contains("Good signature"), "{stderr}");
}

#[tokio::test]
async fn wrong_signing_passphrase_fails_before_any_push() {
    let origin = BareRepo::new();
    let keys = tempfile::tempdir().unwrap();
    let key = ssh_keygen(keys.path(), "signing_ed25519", "the right one");
    let cache_dir = tempfile::tempdir().unwrap();
    set_test_secrets();
    let repo = file_repo(
        &origin,
        &format!(
            "write: {{signing: {{sshKeyFile: '{}', passphraseEnv: {PASSPHRASE_ENV}}}}}\n",
            key.private.display()
        ),
    );
    let planner = LinePlanner::new(vec![api("1.1.0")]);
    let report = write_planned(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &planner,
        WriteOptions::default(),
    )
    .await;
    let err = report.result.unwrap_err();
    eprintln!("{err}");
    assert!(matches!(err, GitError::Signing { .. }), "{err:?}");
    assert!(
        chain(&err).contains("signing_ed25519")
            && chain(&err).contains("`manifests`")
            && !chain(&err).contains(PASSPHRASE),
        "{err}"
    );
    assert_eq!(origin.subjects("main"), ["initial"]);
    // The change that was pending is still reported: the plan was made before the key failed.
    assert!(
        report.plan.is_some(),
        "the plan is kept on a signing failure"
    );
    assert_eq!(report.branch, "main");
    assert_eq!(planner.calls.load(Ordering::SeqCst), 1);
}

/// Regression (issue 12): a wrong OpenPGP passphrase said only "OpenPGP signing failed: invalid
/// input", and the report lost the plan.
#[tokio::test]
async fn wrong_openpgp_passphrase_says_the_key_could_not_be_unlocked() {
    set_test_secrets();
    let gnupg = tempfile::tempdir().unwrap();
    let key_file = openpgp_key(gnupg.path());
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = file_repo(
        &origin,
        &format!(
            "write: {{signing: {{pgpKeyFile: '{}', passphraseEnv: {WRONG_PASSWORD_ENV}}}}}\n",
            key_file.display()
        ),
    );
    let report = write_planned(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
        WriteOptions::default(),
    )
    .await;
    let err = report.result.unwrap_err();
    eprintln!("{err}");
    let GitError::Signing { source, .. } = &err else {
        panic!("{err:?}")
    };
    assert!(
        matches!(**source, SignError::PgpLocked { .. }),
        "{source:?}"
    );
    let shown = chain(&err);
    assert!(
        shown.contains("wrong passphrase")
            && shown.contains("signing.asc")
            && shown.contains(WRONG_PASSWORD_ENV)
            && shown.contains("`manifests`")
            && !shown.contains(WRONG_PASSWORD)
            && !shown.contains(PASSPHRASE),
        "{shown}"
    );
    assert!(
        report.plan.is_some(),
        "the plan is kept on a signing failure"
    );
    assert_eq!(origin.subjects("main"), ["initial"]);

    // `tagpilot check` finds the same without fetching anything.
    let err = repo.check_offline().map_err(|e| chain(&e)).unwrap_err();
    assert!(
        err.contains("wrong passphrase") && !err.contains(WRONG_PASSWORD),
        "{err}"
    );
}

// === tagpilot check: what plan would find offline ===

#[test]
fn check_offline_names_unset_variables_and_unreadable_files_without_values() {
    set_test_secrets();
    let unset = "TAGPILOT_IT_NEVER_SET";
    let https = |auth: &str| {
        config(&format!(
            "name: manifests\nurl: 'https://git.example/m.git'\nauth: {auth}\n"
        ))
    };
    let err = https(&format!("{{tokenEnv: {unset}}}"))
        .check_offline()
        .unwrap_err();
    eprintln!("{err}");
    assert!(
        matches!(
            &err,
            GitError::Config {
                source: ConfigError::EnvNotSet { .. },
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        chain(&err).contains("auth.tokenEnv") && chain(&err).contains(unset),
        "{err}"
    );
    let err = https(&format!("{{username: bot, passwordEnv: {unset}}}"))
        .check_offline()
        .map_err(|e| chain(&e))
        .unwrap_err();
    assert!(
        err.contains("auth.passwordEnv") && err.contains(unset),
        "{err}"
    );
    https(&format!(
        "{{username: bot, passwordEnv: {HTTP_PASSWORD_ENV}}}"
    ))
    .check_offline()
    .unwrap();

    let keys = tempfile::tempdir().unwrap();
    let key = ssh_keygen(keys.path(), "user_ed25519", "");
    let ssh = |auth: String| {
        config(&format!(
            "name: manifests\nurl: 'ssh://git@git.example/m.git'\nauth: {auth}\n"
        ))
    };
    let err = ssh(format!(
        "{{sshKeyFile: '{}', passphraseEnv: {unset}}}",
        key.private.display()
    ))
    .check_offline()
    .map_err(|e| chain(&e))
    .unwrap_err();
    assert!(
        err.contains("auth.passphraseEnv") && err.contains(unset),
        "{err}"
    );
    let missing = keys.path().join("nonexistent_ed25519");
    let err = ssh(format!("{{sshKeyFile: '{}'}}", missing.display()))
        .check_offline()
        .map_err(|e| chain(&e))
        .unwrap_err();
    assert!(err.contains("nonexistent_ed25519"), "{err}");
    let err = ssh(format!(
        "{{sshKeyFile: '{}', knownHostsFile: '{}'}}",
        key.private.display(),
        missing.display()
    ))
    .check_offline()
    .map_err(|e| chain(&e))
    .unwrap_err();
    assert!(err.contains("auth.knownHostsFile"), "{err}");

    // Signing: the variable must be set, and the key must unlock with it.
    let signing = |key: &Path, env: &str| {
        config(&format!(
            "name: manifests\nurl: 'file:///srv/m.git'\n\
             write: {{signing: {{sshKeyFile: '{}', passphraseEnv: {env}}}}}\n",
            key.display()
        ))
    };
    let locked = ssh_keygen(keys.path(), "signing_ed25519", PASSPHRASE);
    let err = signing(&locked.private, unset).check_offline().unwrap_err();
    eprintln!("{err}");
    assert!(
        chain(&err).contains("write.signing.passphraseEnv") && chain(&err).contains(unset),
        "{err}"
    );
    let err = signing(&locked.private, WRONG_PASSWORD_ENV)
        .check_offline()
        .unwrap_err();
    assert!(matches!(err, GitError::Signing { .. }), "{err:?}");
    assert!(!chain(&err).contains(WRONG_PASSWORD), "{err}");
    signing(&locked.private, PASSPHRASE_ENV)
        .check_offline()
        .unwrap();
}

#[tokio::test]
async fn owned_branch_with_a_commit_per_policy_is_not_repushed_when_unchanged() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(
        &origin,
        "write: {branch: tagpilot/updates, group: policy}\n",
    );
    let planner = LinePlanner::new(vec![api("1.1.0"), web("2.1.0")]);
    let first = write_repository(&cache, &repo, &planner).await.unwrap();
    assert_eq!(pushed(&first.status), 2);
    let tip = origin.rev("tagpilot/updates").unwrap();
    let again = write_repository(&cache, &repo, &planner).await.unwrap();
    assert_eq!(again.status, WriteStatus::UpToDate);
    assert_eq!(origin.rev("tagpilot/updates").unwrap(), tip);
}

/// A first run against a repository with history: the shallow clone lacks the tip's parents,
/// and the push must still work (regression: libgit2's packbuilder walked into the missing
/// parent and failed with "object not found").
#[tokio::test]
async fn http_push_from_a_fresh_shallow_clone_of_a_repository_with_history() {
    set_test_secrets();
    let origin = BareRepo::new();
    origin.push_change("main", "README.md", "second\n", "second");
    origin.push_change("main", "README.md", "third\n", "third");
    let server = HttpGitServer::start(origin.dir.path());
    let cache_dir = tempfile::tempdir().unwrap();
    let repo = http_repo(&server, HTTP_PASSWORD_ENV, "");
    let outcome = write_repository(
        &RepoCache::new(cache_dir.path()),
        &repo,
        &LinePlanner::new(vec![api("1.1.0")]),
    )
    .await
    .unwrap();
    assert_eq!(pushed(&outcome.status), 1);
    assert_eq!(
        origin.subjects("main"),
        [
            "chore(images): update 1 image(s)",
            "third",
            "second",
            "initial"
        ]
    );
    git(&origin.path(), &["fsck", "--strict"]);
}

/// Several tasks of one cycle may read the same repository at once (a promotion reading
/// another repository's base branch while that repository's own target is planned): the clone
/// cache lets their syncs take turns, so none takes the other's half-done clone or ref locks
/// for a broken cache and wipes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reads_of_one_repository_share_the_clone_cache() {
    let origin = BareRepo::new();
    let cache_dir = tempfile::tempdir().unwrap();
    let cache = RepoCache::new(cache_dir.path());
    let repo = file_repo(&origin, "");
    for round in 0..3 {
        let reads = (0..6).map(|_| tagpilot::git::snapshot(&cache, &repo));
        for read in futures_util::future::join_all(reads).await {
            let files = read.unwrap_or_else(|e| panic!("round {round}: {}", chain(&e)));
            assert!(tagpilot::files::Files::read(&files, Path::new(DEPLOYMENT_PATH)).is_ok());
        }
    }
}
