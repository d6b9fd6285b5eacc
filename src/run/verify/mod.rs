//! Verification in `tagpilot run` (issue 19): each change that reached a base branch of a
//! repository — a commit a cycle pushed, or a pull request tagpilot kept open that was merged
//! (`reached.rs`) — is followed, for the changes whose policy or repository has `verify:`, in
//! the Argo CD Applications whose sources contain its files, until they run it healthy, it
//! fails, or its timeout runs out.
//!
//! ```text
//! cycle ─▶ pushed commits, merged pull requests ─▶ Applications with the changed files
//!                                                        │ state store, status `pending`
//!          one follower task per Application (follow.rs, one watch)      ◀─┘
//!             ├─ Verified ─▶ metrics, log, status `success`, verification ends
//!             └─ Failed   ─▶ hold / report / revert (by `verify.onFailure`), metrics, log,
//!                            status `failure` with the reason
//! ```
//!
//! Several changes pending for one Application share its follower and its watch: it follows the
//! newest (a descendant of the older ones on the same branch, so verifying it verifies them),
//! and concludes every pending change of that repository at once. A newer change arriving while
//! it follows makes it start over on the newer one. Pending verifications live in the state
//! store, so a restart resumes them. A follower is a task of its own, bounded by its timeout;
//! it never holds up a cycle, and an error in one names its Application and ends only it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::affected::normalise_url;
use crate::application::Application;
use crate::change::Change;
use crate::config::applications::FromCluster;
use crate::config::repository::RepositoryConfig;
use crate::config::verify::OnFailure;
use crate::engine::Cycle;
use crate::error_chain::chain;
use crate::forge::status::{CommitState, set_verify_status};
use crate::git::RepoCache;
use crate::holds::{FieldKey, HeldTag, HoldReason};
use crate::kubernetes::Cluster;
use crate::policy;
use crate::state::{PendingVerification, State, VerifiedField};
use crate::verification::Failure;
use crate::writeback::revert::{self, FailedUpdate};

use super::events::Step;
use super::http::Shared;
use crate::clock::Clock;

mod conclusion;
mod fetched;
pub mod follow;
mod promoted;
mod reached;
use self::conclusion::Conclusion;
use self::follow::{FollowedChange, follow_application};
use self::reached::{Reached, ToVerify};

/// What every follower needs, shared with the service.
pub(super) struct Verifier {
    cluster: tokio::sync::OnceCell<Cluster>,
    /// Where discovery lists Applications: `applications.fromCluster`'s namespaces and selector,
    /// else every namespace.
    from: FromCluster,
    repositories: Vec<RepositoryConfig>,
    cache: RepoCache,
    state: Option<Arc<State>>,
    shared: Arc<Shared>,
    /// The service's clock: a verification's timeout runs on it, and conclusions (promotions'
    /// too) are recorded at its time of day.
    clock: Arc<dyn Clock>,
    /// Pending verifications by Application, and the follower of each.
    followers: Mutex<BTreeMap<String, Following>>,
    /// Commits whose `tagpilot/verify` status says failure: another Application verifying the
    /// same commit later does not turn it back to success.
    failed_commits: Mutex<BTreeSet<String>>,
    /// Cancelled when the service stops: followers end, their verifications stay recorded.
    stop: CancellationToken,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Pull requests kept open with changes to verify, by (repository, number): followed once
    /// merged ([`reached`]).
    awaiting: Mutex<BTreeMap<(String, u64), ToVerify>>,
}

/// One Application's follower: what it has to verify, how to tell it of newer changes, and
/// of fetches of their repositories (after which it judges the state it saw last again).
struct Following {
    pending: Vec<PendingVerification>,
    newer: Arc<Notify>,
    fetched: Arc<Notify>,
}

impl Verifier {
    /// The verifier of a run with a clone cache, resuming what the state store says was under
    /// way. The cluster is connected to when first needed: a run without `verify:` anywhere
    /// never connects for it.
    pub(super) fn start(
        cluster: Option<Cluster>,
        from: Option<FromCluster>,
        repositories: &[RepositoryConfig],
        cache: Option<RepoCache>,
        shared: Arc<Shared>,
        clock: Arc<dyn Clock>,
    ) -> Option<Arc<Verifier>> {
        let verifier = Arc::new(Verifier {
            cluster: tokio::sync::OnceCell::new_with(cluster),
            from: from.unwrap_or_default(),
            repositories: repositories.to_vec(),
            cache: cache?,
            state: shared.state.clone(),
            shared,
            clock,
            followers: Mutex::default(),
            failed_commits: Mutex::default(),
            stop: CancellationToken::new(),
            tasks: Mutex::default(),
            awaiting: Mutex::default(),
        });
        verifier.resume();
        Some(verifier)
    }

    /// The cluster whose Applications are followed; `None` (logged) when none can be reached.
    async fn cluster(&self) -> Option<&Cluster> {
        let connected = self
            .cluster
            .get_or_try_init(|| async { Cluster::connect().await })
            .await;
        match connected {
            Ok(cluster) => Some(cluster),
            Err(e) => {
                tracing::error!(
                    error = %chain(&e),
                    "verification is configured but no cluster can be reached: changes are not followed"
                );
                self.shared.metrics.record_verification("error", None);
                self.shared.events.verification(Step::Error);
                None
            }
        }
    }

    /// Resumes the verifications a previous process left under way.
    fn resume(self: &Arc<Self>) {
        let Some(state) = &self.state else { return };
        match state.verifications() {
            Ok(pending) => {
                if !pending.is_empty() {
                    tracing::info!(count = pending.len(), "resuming verifications under way");
                }
                for p in pending {
                    self.add(p);
                }
            }
            Err(e) => tracing::error!(error = %chain(&e), "verifications under way not resumed"),
        }
    }

    /// After a cycle: every commit it pushed to a base branch is followed in the
    /// Applications whose sources contain its changed files, for the changes whose policy or
    /// repository has `verify:`.
    /// The work that asks the cluster and the forge runs in a task of its own: a slow API
    /// delays no cycle.
    pub(super) fn after_cycle(self: &Arc<Self>, cycle: &Cycle, policies: &policy::Loaded) {
        self.fetched(cycle.repositories.iter().map(|r| r.repository.as_str()));
        let pushed = self.pushed(cycle, policies);
        let seen = self.remember_open(cycle, policies);
        let this = self.clone();
        let task = tokio::spawn(async move {
            let work = async {
                let mut reached = pushed;
                reached.extend(this.merged_since(&seen).await);
                this.follow_commits(reached).await;
            };
            tokio::select! {
                () = work => {}
                () = this.stop.cancelled() => {}
            }
        });
        self.keep(task);
    }

    fn keep(&self, task: tokio::task::JoinHandle<()>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
    }

    /// Follows each commit that `reached` a base branch in the Applications that deploy it.
    async fn follow_commits(self: &Arc<Self>, reached: Vec<Reached>) {
        if reached.is_empty() {
            return;
        }
        let Some(cluster) = self.cluster().await else {
            return;
        };
        let applications = match cluster.applications(&self.from).await {
            Ok(apps) => apps,
            Err(e) => {
                tracing::error!(error = %chain(&e), "listing Applications to verify the changes pushed failed");
                self.shared.metrics.record_verification("error", None);
                self.shared.events.verification(Step::Error);
                return;
            }
        };
        let since = self.clock.wall();
        for commit in reached {
            let pending = pending_for(&applications, &commit, since);
            let Reached { config, commit, .. } = commit;
            if pending.is_empty() {
                tracing::warn!(
                    repository = %config.name,
                    commit = %commit,
                    "no Argo CD Application deploys the files this commit changed: nothing to verify"
                );
                self.shared.metrics.record_verification("error", None);
                self.shared.events.verification(Step::Error);
            }
            for p in pending {
                if let Some(state) = &self.state
                    && let Err(e) = state.start_verification(&p)
                {
                    tracing::error!(application = %p.application, error = %chain(&e), "a verification will not survive a restart");
                }
                tracing::info!(
                    application = %p.application,
                    repository = %p.repository,
                    commit = %p.commit,
                    "following the change in its Application"
                );
                let text = format!("following in Application {}", p.application);
                self.send_status(&p, CommitState::Pending, text);
                self.add(p);
                self.shared.events.verification(Step::Following);
            }
        }
    }

    /// Adds a pending verification to its Application's follower, starting one if none runs.
    fn add(self: &Arc<Self>, pending: PendingVerification) {
        let application = pending.application.clone();
        let mut followers = self.followers.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(following) = followers.get_mut(&application) {
            following.pending.push(pending);
            following.newer.notify_one();
            self.count_pending(&followers);
            return;
        }
        let newer = Arc::new(Notify::new());
        let fetched = Arc::new(Notify::new());
        followers.insert(
            application.clone(),
            Following {
                pending: vec![pending],
                newer: newer.clone(),
                fetched: fetched.clone(),
            },
        );
        self.count_pending(&followers);
        drop(followers);
        let follower = self.clone().follow(application, newer, fetched);
        self.keep(tokio::spawn(follower));
    }

    fn count_pending(&self, followers: &BTreeMap<String, Following>) {
        let pending = followers.values().map(|f| f.pending.len()).sum();
        self.shared.metrics.set_verifications_pending(pending);
    }

    /// Ends every follower and waits for them: what they followed stays in the state store,
    /// for the next process to resume.
    pub(super) async fn stop(&self) {
        self.stop.cancel();
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(|e| e.into_inner()));
        for task in tasks {
            // A follower that panicked has nothing left to stop.
            let _ = task.await;
        }
    }

    /// The follower of one Application: follows its newest pending change until none is left.
    async fn follow(
        self: Arc<Self>,
        application: String,
        newer: Arc<Notify>,
        fetched: Arc<Notify>,
    ) {
        loop {
            let Some(target) = self.newest(&application) else {
                return;
            };
            let Some(config) = self
                .repositories
                .iter()
                .find(|c| c.name == target.repository)
                .cloned()
            else {
                // The repository left the configuration: nothing can say what contains it.
                tracing::warn!(application = %application, repository = %target.repository, "the repository is no longer configured: its verification ends");
                self.conclude(
                    &target,
                    Conclusion::Error("repository no longer configured".into()),
                );
                continue;
            };
            let Some(cluster) = self.cluster().await else {
                self.conclude(
                    &target,
                    Conclusion::Error("no cluster to follow it in".into()),
                );
                continue;
            };
            let (namespace, name) = application
                .split_once('/')
                .unwrap_or(("", application.as_str()));
            let cache = self.cache.clone();
            let commit = target.commit.clone();
            let contains = move |revision: &str| {
                crate::git::ancestry::contains(&cache, &config, revision, &commit)
            };
            let change = FollowedChange {
                application: &application,
                contains_change: &contains,
                since: target.since,
                timeout: target.timeout,
                clock: self.clock.as_ref(),
                fetched: Some(&fetched),
            };
            tokio::select! {
                followed = follow_application(cluster, namespace, name, &change) => {
                    self.conclude(&target, Conclusion::of(followed));
                }
                // A newer change for this Application: follow that one instead.
                () = newer.notified() => {}
                () = self.stop.cancelled() => return,
            }
        }
    }

    /// The newest pending change of `application`; removes the follower when there is none
    /// (under the same lock as [`Verifier::add`], so no change is left without a follower).
    fn newest(&self, application: &str) -> Option<PendingVerification> {
        let mut followers = self.followers.lock().unwrap_or_else(|e| e.into_inner());
        let newest = followers
            .get(application)
            .and_then(|f| f.pending.iter().max_by_key(|p| p.since).cloned());
        if newest.is_none() {
            followers.remove(application);
        }
        newest
    }

    /// Ends every pending change of `target`'s Application and repository with `conclusion`.
    fn conclude(&self, target: &PendingVerification, conclusion: Conclusion) {
        let concluded: Vec<PendingVerification> = {
            let mut followers = self.followers.lock().unwrap_or_else(|e| e.into_inner());
            let Some(following) = followers.get_mut(&target.application) else {
                return;
            };
            let (ended, kept) = std::mem::take(&mut following.pending)
                .into_iter()
                .partition(|p| p.repository == target.repository && p.since <= target.since);
            following.pending = kept;
            self.count_pending(&followers);
            ended
        };
        let now = self.clock.wall();
        for pending in &concluded {
            self.record(pending, &conclusion, now);
            promoted::record(self, pending, &conclusion, now);
            self.report_status(pending, &conclusion);
            if let Some(state) = &self.state
                && let Err(e) = state.end_verification(pending)
            {
                tracing::warn!(application = %pending.application, error = %chain(&e), "a concluded verification stays recorded");
            }
            self.tell_conclusion(pending, &conclusion, now);
            self.shared.events.verification(conclusion.step());
        }
    }

    /// Tells the notification sinks a verdict: verified, or failed (and held, by the fields'
    /// `onFailure`). A verification that could not conclude is in the log and the status.
    fn tell_conclusion(
        &self,
        pending: &PendingVerification,
        conclusion: &Conclusion,
        now: Timestamp,
    ) {
        use super::notify::{derive::of_verification, event::Kind};
        let notices = match conclusion {
            Conclusion::Verified => of_verification(Kind::Verified, pending, None, now),
            Conclusion::Failed(failure) => {
                let why = failure.to_string();
                let mut notices = of_verification(Kind::Failed, pending, Some(&why), now);
                let held = PendingVerification {
                    fields: pending
                        .fields
                        .iter()
                        .filter(|f| f.on_failure != OnFailure::Report)
                        .cloned()
                        .collect(),
                    ..pending.clone()
                };
                notices.extend(of_verification(Kind::Held, &held, Some(&why), now));
                notices
            }
            Conclusion::Error(_) => return,
        };
        self.shared.notices.send(&self.shared, notices);
    }

    /// The `tagpilot/verify` status a conclusion gives the commit: failure at once; success
    /// once no other Application still verifies that commit and none failed it.
    fn report_status(&self, pending: &PendingVerification, conclusion: &Conclusion) {
        let commit = &pending.status_commit;
        let (state, text) = match conclusion {
            Conclusion::Failed(failure) => {
                self.failed_commits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(commit.clone());
                (
                    CommitState::Failure,
                    format!("{}: {failure}", pending.application),
                )
            }
            Conclusion::Error(error) => (
                CommitState::Failure,
                format!("{}: not verified: {error}", pending.application),
            ),
            Conclusion::Verified => {
                let failed = self
                    .failed_commits
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .contains(commit);
                let others = self
                    .followers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .values()
                    .any(|f| f.pending.iter().any(|p| &p.status_commit == commit));
                if failed || others {
                    return;
                }
                (CommitState::Success, "healthy in Argo CD".to_string())
            }
        };
        self.send_status(pending, state, text);
    }

    /// Sends the `tagpilot/verify` status in a task of its own: a slow forge delays nothing.
    fn send_status(&self, pending: &PendingVerification, state: CommitState, text: String) {
        let Some(repo) = self
            .repositories
            .iter()
            .find(|c| c.name == pending.repository)
            .cloned()
        else {
            return;
        };
        let commit = pending.status_commit.clone();
        let (application, events) = (pending.application.clone(), self.shared.events.clone());
        tokio::spawn(async move {
            match set_verify_status(&repo, &commit, state, &text).await {
                Ok(true) => {
                    tracing::debug!(repository = %repo.name, %commit, ?state, "commit status set")
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(
                    repository = %repo.name,
                    %commit,
                    %application,
                    error = %chain(&e),
                    "the tagpilot/verify status was not set"
                ),
            }
            events.verification(Step::StatusSent);
        });
    }

    /// What a concluded verification does: metrics, log, and by `onFailure` holds and reverts.
    fn record(&self, pending: &PendingVerification, conclusion: &Conclusion, now: Timestamp) {
        let fields = fields_text(&pending.fields);
        let metrics = &self.shared.metrics;
        match conclusion {
            Conclusion::Verified => {
                let took = Duration::try_from(now.duration_since(pending.since)).ok();
                metrics.record_verification("verified", took);
                tracing::info!(
                    application = %pending.application,
                    repository = %pending.repository,
                    commit = %pending.commit,
                    "verified: the Application runs {fields} healthy"
                );
            }
            Conclusion::Failed(failure) => {
                let result = match failure {
                    Failure::TimedOut { .. } => "timed_out",
                    _ => "failed",
                };
                metrics.record_verification(result, None);
                tracing::error!(
                    application = %pending.application,
                    repository = %pending.repository,
                    commit = %pending.commit,
                    "verification failed for {fields}: {failure}"
                );
                self.on_failure(pending, failure, now);
            }
            Conclusion::Error(error) => {
                metrics.record_verification("error", None);
                tracing::error!(
                    application = %pending.application,
                    repository = %pending.repository,
                    commit = %pending.commit,
                    "verification of {fields} could not conclude: {error}"
                );
            }
        }
    }

    /// By each field's `onFailure`: `hold` holds its failed tag; `revert` holds it and writes
    /// the reverse change; `report` has already been reported.
    fn on_failure(&self, pending: &PendingVerification, failure: &Failure, now: Timestamp) {
        let mut reverted = Vec::new();
        for field in &pending.fields {
            match field.on_failure {
                OnFailure::Report => {}
                OnFailure::Hold => self.hold(pending, field, failure, now),
                OnFailure::Revert => {
                    self.hold(pending, field, failure, now);
                    reverted.push(field.clone());
                }
            }
        }
        if !reverted.is_empty() {
            self.revert(pending, &reverted, failure);
        }
    }

    /// Writes the failed changes of `pending` back to their previous values, through the
    /// engine's revert writer, on a task of its own: a slow remote delays no other follower.
    fn revert(&self, pending: &PendingVerification, fields: &[VerifiedField], failure: &Failure) {
        let Some(repository) = self
            .repositories
            .iter()
            .find(|c| c.name == pending.repository)
            .cloned()
        else {
            tracing::error!(repository = %pending.repository, "the failed change was not reverted: the repository is no longer configured");
            return;
        };
        let cache = self.cache.clone();
        let mut failed = FailedUpdate {
            changes: failed_changes(pending, fields),
            commit: pending.commit.clone(),
            application: pending.application.clone(),
            failure: failure.to_string(),
            deployers: Vec::new(),
        };
        let metrics = self.shared.clone();
        let clock = self.clock.clone();
        let told = PendingVerification {
            fields: fields.to_vec(),
            ..pending.clone()
        };
        // The cluster the failure was seen on, to name the Applications the revert deploys.
        let (cluster, from) = (self.cluster.get().cloned(), self.from.clone());
        let task = tokio::spawn(async move {
            if let Some(cluster) = cluster {
                match cluster.applications(&from).await {
                    Ok(apps) => {
                        failed.deployers = apps.iter().map(Application::deployed_view).collect();
                    }
                    Err(e) => tracing::warn!(
                        application = %failed.application,
                        error = %chain(&e),
                        "listing Applications failed: the revert names none"
                    ),
                }
            }
            match revert::revert(&cache, &repository, &failed).await {
                Ok(outcome) => {
                    metrics.metrics.record_revert("written");
                    let reverted = super::notify::derive::of_verification(
                        super::notify::event::Kind::Reverted,
                        &told,
                        Some(&failed.failure),
                        clock.wall(),
                    );
                    metrics.notices.send(&metrics, reverted);
                    tracing::warn!(
                        application = %failed.application,
                        repository = %repository.name,
                        commit = %failed.commit,
                        written = ?outcome.written,
                        "reverted the failed change"
                    );
                }
                Err(e) => {
                    metrics.metrics.record_revert(e.metric_label());
                    tracing::error!(
                        application = %failed.application,
                        repository = %repository.name,
                        error = %chain(&e),
                        "the failed change was not reverted"
                    );
                }
            }
            metrics.events.verification(Step::Reverted);
        });
        self.tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(task);
    }

    fn hold(
        &self,
        pending: &PendingVerification,
        field: &VerifiedField,
        failure: &Failure,
        now: Timestamp,
    ) {
        let held = HeldTag {
            key: field.key.clone(),
            tag: field.to.clone(),
            reason: HoldReason::Failed {
                application: pending.application.clone(),
                failure: failure.to_string(),
            },
            since: now,
        };
        let Some(state) = &self.state else {
            tracing::error!(field = %field.key, tag = %field.to, "no --state-dir: the failed tag cannot be held");
            return;
        };
        match state.hold(&held) {
            Ok(()) => tracing::warn!(field = %field.key, tag = %field.to, "held: {}", held.reason),
            Err(e) => {
                tracing::error!(field = %field.key, error = %chain(&e), "the failed tag was not held")
            }
        }
    }
}

/// The changes a failed verification followed, as the change model has them (what a revert
/// writes back): each field from the tag it had to the failed one.
fn failed_changes(pending: &PendingVerification, fields: &[VerifiedField]) -> Vec<Change> {
    fields
        .iter()
        .map(|f| Change {
            repository: Some(pending.repository.clone()),
            policy: f.key.policy.clone(),
            image: f.image.clone(),
            file: f.key.file.clone(),
            line: f.line,
            field: f.key.field.clone(),
            strategy: "",
            from: f.from.clone(),
            to: f.to.clone(),
            source: None,
            labels: Vec::new(),
            promotion: None,
        })
        .collect()
}

/// A pending verification per Application whose sources contain some of `changes`' files.
fn pending_for(
    applications: &[Application],
    reached: &Reached,
    since: Timestamp,
) -> Vec<PendingVerification> {
    let (config, changes) = (&reached.config, &reached.changes);
    let url = normalise_url(&config.url);
    applications
        .iter()
        .filter_map(|app| {
            let followed: Vec<_> = changes
                .iter()
                .filter(|(c, _)| {
                    !crate::affected::sources_containing(
                        app,
                        &url,
                        &config.branch,
                        [c.file.as_str()],
                    )
                    .is_empty()
                })
                .collect();
            let timeout = followed.iter().map(|(_, v)| v.timeout).max()?;
            let fields = followed
                .iter()
                .map(|(c, verify)| VerifiedField {
                    key: FieldKey {
                        repository: c.repository.clone(),
                        policy: c.policy.clone(),
                        file: c.file.clone(),
                        field: c.field.clone(),
                    },
                    image: c.image.clone(),
                    line: c.line,
                    from: c.from.clone(),
                    to: c.to.clone(),
                    on_failure: verify.on_failure,
                    promoted_at: c.promotion.as_ref().and_then(|p| p.healthy_since()),
                })
                .collect();
            Some(PendingVerification {
                application: app.id(),
                repository: config.name.clone(),
                commit: reached.commit.clone(),
                status_commit: reached.status_commit.clone(),
                since,
                timeout,
                fields,
            })
        })
        .collect()
}

/// `policy: file from → to`, `; `-separated, with each field once.
fn fields_text(fields: &[VerifiedField]) -> String {
    let listed: BTreeSet<String> = fields
        .iter()
        .map(|f| format!("{}: {} {} → {}", f.key.policy, f.key.file, f.from, f.to))
        .collect();
    listed.into_iter().collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests;
