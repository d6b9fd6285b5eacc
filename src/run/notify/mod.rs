//! Notifications (issue 33): what `tagpilot run` did, what waits and what it refused, told
//! where teams talk.
//!
//! ```text
//!  cycle / verification ──▶ Outbox::send(events) ── route per sink ──▶ bounded queue per sink
//!     (never waits)                                   (type, repository, policy)      │
//!                                   sink task: gather a burst (`coalesce`) ◀───────────┘
//!                                     → drop ids already sent (state store) → one message
//!                                     → retry with backoff → record ids sent (durably)
//! ```
//!
//! The loop only hands events over ([`Outbox::send`] never waits: a full queue drops and
//! counts), so a sink that is slow or down never delays a cycle. Each sink has its own task,
//! so one down sink delays no other. An event's id is the same whenever the same thing is
//! found again ([`event::Notice::with_id`]); the ids sent are recorded in the state store
//! (`--state-dir`) before the next message, so neither a later cycle nor a restart tells it
//! twice. Only the leader sends: events are made by cycles, which only the leader runs, and a
//! sink task that finds its replica following drops what it holds unsent.
//!
//! What it must never do: put a secret (a key, a token, a webhook URL that is a credential)
//! in a log line or an error; block the loop.

pub mod derive;
pub mod event;
pub mod sink;
pub mod template;

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::notifications::{NotificationsConfig, NotifySecret, SinkConfig};
use crate::error_chain::Chain;

use self::event::{Kind, Notice};
use self::sink::{Hidden, Target};
use self::template::{TemplateError, Templates};
use super::http::Shared;
use super::lease::Role;

/// Why the notifications could not be set up when `tagpilot run` starts. No message names a
/// secret's value, only where it was to come from.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("{key}: give exactly one of secretEnv, secretFile, secretRef")]
    SecretSource { key: String },
    #[error("{key}.secretEnv: the environment variable {var} is not set")]
    SecretEnvUnset { key: String, var: String },
    #[error("{key}.secretFile {}: cannot be read", path.display())]
    SecretFile {
        key: String,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{key}.secretRef: no cluster to read Secret {namespace}/{name} from")]
    NoCluster {
        key: String,
        namespace: String,
        name: String,
    },
    #[error("{key}.secretRef")]
    SecretRef {
        key: String,
        #[source]
        source: Box<crate::kubernetes::KubeError>,
    },
    #[error("{key}.secretRef: Secret {namespace}/{name} has no key {secret_key}")]
    SecretKeyMissing {
        key: String,
        namespace: String,
        name: String,
        secret_key: String,
    },
    #[error("{key}: the secret is empty")]
    EmptySecret { key: String },
    #[error("{sink}: give exactly one of webhook, cloudEvents, slack, teams")]
    Kind { sink: String },
    #[error("{sink}.slack: give webhookUrl, or token and channel")]
    Slack { sink: String },
    #[error("{sink}.events: {event} is not an event type")]
    UnknownEvent { sink: String, event: String },
    #[error("{sink}: {what} {glob:?} is not a glob")]
    Glob {
        sink: String,
        what: &'static str,
        glob: String,
        #[source]
        source: globset::Error,
    },
    #[error("{sink}")]
    Template {
        sink: String,
        #[source]
        source: TemplateError,
    },
    #[error("two sinks are named {sink}")]
    DuplicateSink { sink: String },
}

/// Where the loop and verification hand their events: empty (events go nowhere) until a
/// [`Notifier`] starts.
#[derive(Debug, Default)]
pub struct Outbox {
    sinks: OnceLock<Vec<Queue>>,
}

/// One sink's routes and the sending end of its queue.
#[derive(Debug)]
struct Queue {
    name: String,
    route: Route,
    tx: mpsc::Sender<Notice>,
}

impl Outbox {
    /// Hands `notices` to every sink whose routes take them. Never waits: a sink whose queue is
    /// full loses the event, counted as `dropped`.
    pub fn send(&self, shared: &Shared, notices: Vec<Notice>) {
        let Some(sinks) = self.sinks.get() else {
            return;
        };
        for notice in notices {
            for q in sinks.iter().filter(|q| q.route.takes(&notice)) {
                if q.tx.try_send(notice.clone()).is_err() {
                    shared.metrics.record_notification(&q.name, "dropped");
                    tracing::warn!(sink = %q.name, event = %notice.kind, "notification queue full: event dropped");
                }
            }
        }
    }
}

/// Which events a sink hears.
#[derive(Debug, Default)]
struct Route {
    kinds: Option<BTreeSet<Kind>>,
    repositories: Option<GlobSet>,
    policies: Option<GlobSet>,
}

impl Route {
    fn new(sink: &SinkConfig) -> Result<Route, NotifyError> {
        let kinds = sink
            .events
            .as_ref()
            .map(|names| {
                names
                    .iter()
                    .map(|n| {
                        Kind::from_name(n).ok_or_else(|| NotifyError::UnknownEvent {
                            sink: sink.name.clone(),
                            event: n.clone(),
                        })
                    })
                    .collect::<Result<BTreeSet<_>, _>>()
            })
            .transpose()?;
        let globs = |what: &'static str, list: &Option<Vec<String>>| {
            list.as_ref()
                .map(|globs| {
                    let mut set = GlobSetBuilder::new();
                    for g in globs {
                        set.add(Glob::new(g).map_err(|source| NotifyError::Glob {
                            sink: sink.name.clone(),
                            what,
                            glob: g.clone(),
                            source,
                        })?);
                    }
                    set.build().map_err(|source| NotifyError::Glob {
                        sink: sink.name.clone(),
                        what,
                        glob: globs.join(","),
                        source,
                    })
                })
                .transpose()
        };
        Ok(Route {
            kinds,
            repositories: globs("repositories", &sink.repositories)?,
            policies: globs("policies", &sink.policies)?,
        })
    }

    /// Whether the sink hears `notice`: its type is listed, and its repository and policy (if
    /// it names them) match. An event without a repository (a registry's outage) or a policy
    /// passes that filter.
    fn takes(&self, notice: &Notice) -> bool {
        let matches = |set: &Option<GlobSet>, value: &Option<String>| match (set, value) {
            (Some(set), Some(value)) => set.is_match(value),
            _ => true,
        };
        self.kinds.as_ref().is_none_or(|k| k.contains(&notice.kind))
            && matches(&self.repositories, &notice.repository)
            && matches(&self.policies, &notice.policy)
    }
}

/// The sink tasks of a running service; [`Notifier::stop`] sends what they hold and ends them.
pub struct Notifier {
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// How every sink task sends: the settings, the store, where to count.
struct Delivery {
    name: String,
    target: Target,
    templates: Templates,
    client: reqwest::Client,
    coalesce: Duration,
    attempts: u32,
    backoff: Duration,
    shared: Arc<Shared>,
    clock: Arc<dyn Clock>,
    roles: Option<watch::Receiver<Role>>,
    /// Ids sent by this process (the store may be down, or absent).
    sent: Mutex<VecDeque<String>>,
}

/// Ids remembered in memory per sink, beside the store.
const SENT_IN_MEMORY: usize = 4096;

impl Notifier {
    /// Reads every sink's secrets (a `secretRef` through `cluster`), checks its routes and
    /// templates, starts its task and opens `shared.notices` to them.
    pub async fn start(
        config: &NotificationsConfig,
        base_dir: &Path,
        cluster: Option<&crate::kubernetes::Cluster>,
        shared: Arc<Shared>,
        clock: Arc<dyn Clock>,
        roles: Option<watch::Receiver<Role>>,
    ) -> Result<Notifier, NotifyError> {
        let stop = CancellationToken::new();
        let mut queues = Vec::new();
        let mut tasks = Vec::new();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        for sink in &config.sinks {
            if queues.iter().any(|q: &Queue| q.name == sink.name) {
                return Err(NotifyError::DuplicateSink {
                    sink: sink.name.clone(),
                });
            }
            let route = Route::new(sink)?;
            let target = target(sink, base_dir, cluster).await?;
            let templates =
                Templates::new(&sink.templates).map_err(|source| NotifyError::Template {
                    sink: sink.name.clone(),
                    source,
                })?;
            let (tx, rx) = mpsc::channel(config.queue.max(1));
            for result in ["sent", "retried", "failed", "dropped"] {
                shared
                    .metrics
                    .start_notifications_at_zero(&sink.name, result);
            }
            let delivery = Arc::new(Delivery {
                name: sink.name.clone(),
                target,
                templates,
                client: client.clone(),
                coalesce: config.coalesce,
                attempts: config.attempts.max(1),
                backoff: config.backoff,
                shared: shared.clone(),
                clock: clock.clone(),
                roles: roles.clone(),
                sent: Mutex::default(),
            });
            tasks.push(tokio::spawn(delivery.run(rx, stop.clone())));
            queues.push(Queue {
                name: sink.name.clone(),
                route,
                tx,
            });
        }
        tracing::info!(sinks = queues.len(), "notifications on");
        let _ = shared.notices.sinks.set(queues);
        Ok(Notifier { stop, tasks })
    }

    /// Sends what the sinks hold (once, without retries) and ends their tasks.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

impl Delivery {
    async fn run(self: Arc<Self>, mut rx: mpsc::Receiver<Notice>, stop: CancellationToken) {
        loop {
            let first = tokio::select! {
                n = rx.recv() => match n { Some(n) => n, None => return },
                () = stop.cancelled() => break,
            };
            let mut batch = vec![first];
            // A burst is one message: what comes within `coalesce` of the first joins it.
            if !self.coalesce.is_zero() {
                let until = self.clock.now() + self.coalesce;
                loop {
                    tokio::select! {
                        n = rx.recv() => match n { Some(n) => batch.push(n), None => break },
                        () = self.clock.sleep_until(until) => break,
                        () = stop.cancelled() => break,
                    }
                }
            }
            while let Ok(n) = rx.try_recv() {
                batch.push(n);
            }
            self.deliver(batch, &stop).await;
            if stop.is_cancelled() {
                break;
            }
        }
        let mut rest = Vec::new();
        while let Ok(n) = rx.try_recv() {
            rest.push(n);
        }
        if !rest.is_empty() {
            self.deliver(rest, &stop).await;
        }
    }

    fn leading(&self) -> bool {
        self.roles
            .as_ref()
            .is_none_or(|r| *r.borrow() == Role::Leading)
    }

    fn already_sent(&self, id: &str) -> bool {
        let memory = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        memory.iter().any(|s| s == id)
            || self
                .shared
                .state
                .as_ref()
                .is_some_and(|s| s.notification_sent(&self.name, id))
    }

    fn remember(&self, ids: &[&str]) {
        if let Some(state) = &self.shared.state
            && !state.record_notifications_sent(&self.name, ids)
        {
            tracing::warn!(sink = %self.name, "the notifications sent were not recorded: a restart may send them again");
        }
        let mut memory = self.sent.lock().unwrap_or_else(|e| e.into_inner());
        for id in ids {
            memory.push_back((*id).to_string());
        }
        while memory.len() > SENT_IN_MEMORY {
            memory.pop_front();
        }
    }

    /// One message of `batch`'s events not sent before, retried with backoff; after a stop,
    /// tried once.
    async fn deliver(&self, batch: Vec<Notice>, stop: &CancellationToken) {
        if !self.leading() {
            tracing::debug!(sink = %self.name, events = batch.len(), "following: the leader tells these");
            return;
        }
        let mut seen = BTreeSet::new();
        let fresh: Vec<Notice> = batch
            .into_iter()
            .filter(|n| seen.insert(n.id.clone()) && !self.already_sent(&n.id))
            .collect();
        if fresh.is_empty() {
            return;
        }
        let text = self.templates.message(&fresh);
        let mut wait = self.backoff;
        for attempt in 1..=self.attempts {
            match self.target.send(&self.client, &fresh, &text).await {
                Ok(()) => {
                    let ids: Vec<&str> = fresh.iter().map(|n| n.id.as_str()).collect();
                    self.remember(&ids);
                    self.shared.metrics.record_notification(&self.name, "sent");
                    self.shared.events.notification_sent();
                    tracing::info!(sink = %self.name, events = fresh.len(), "notification sent");
                    return;
                }
                Err(e) => {
                    let last = attempt == self.attempts || stop.is_cancelled();
                    tracing::warn!(
                        sink = %self.name,
                        attempt,
                        error = %Chain(&e),
                        "{}",
                        if last { "notification not sent: given up" } else { "notification not sent: retrying" }
                    );
                    if last {
                        break;
                    }
                    self.shared
                        .metrics
                        .record_notification(&self.name, "retried");
                    tokio::select! {
                        () = self.clock.sleep(wait) => {}
                        () = stop.cancelled() => {}
                    }
                    wait = (wait * 2).min(MAX_BACKOFF);
                }
            }
        }
        self.shared
            .metrics
            .record_notification(&self.name, "failed");
        self.shared.events.notification_failed();
    }
}

/// The longest wait between two tries of one message.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// What `tagpilot check` finds wrong with `notifications:` without reading a secret: a sink
/// that is not exactly one kind, a Slack sink without its way to post, two sinks of one name,
/// an unknown event type, a glob or a template that does not parse.
pub fn check(config: &NotificationsConfig) -> Vec<NotifyError> {
    let mut problems = Vec::new();
    let mut names = BTreeSet::new();
    for sink in &config.sinks {
        if !names.insert(sink.name.as_str()) {
            problems.push(NotifyError::DuplicateSink {
                sink: sink.name.clone(),
            });
        }
        if let Err(e) = shape(sink) {
            problems.push(e);
        }
        if let Err(e) = Route::new(sink) {
            problems.push(e);
        }
        if let Err(source) = Templates::new(&sink.templates) {
            problems.push(NotifyError::Template {
                sink: sink.name.clone(),
                source,
            });
        }
    }
    problems
}

/// Whether `sink` is exactly one kind, and a Slack sink one of its two ways.
fn shape(sink: &SinkConfig) -> Result<(), NotifyError> {
    let kinds = [
        sink.webhook.is_some(),
        sink.cloud_events.is_some(),
        sink.slack.is_some(),
        sink.teams.is_some(),
    ];
    if kinds.iter().filter(|k| **k).count() != 1 {
        return Err(NotifyError::Kind {
            sink: sink.name.clone(),
        });
    }
    if let Some(slack) = &sink.slack {
        let webhook =
            slack.webhook_url.is_some() && slack.token.is_none() && slack.channel.is_none();
        let api = slack.webhook_url.is_none() && slack.token.is_some() && slack.channel.is_some();
        if !webhook && !api {
            return Err(NotifyError::Slack {
                sink: sink.name.clone(),
            });
        }
    }
    Ok(())
}

/// A sink's target with its secrets read.
async fn target(
    sink: &SinkConfig,
    base_dir: &Path,
    cluster: Option<&crate::kubernetes::Cluster>,
) -> Result<Target, NotifyError> {
    let name = &sink.name;
    let read = async |s: &NotifySecret, key: String| read_secret(s, key, base_dir, cluster).await;
    shape(sink)?;
    if let Some(w) = &sink.webhook {
        let key = read(&w.secret, format!("{name}.webhook.secret")).await?;
        return Ok(Target::Webhook {
            url: w.url.clone(),
            key,
        });
    }
    if let Some(c) = &sink.cloud_events {
        let token = match &c.token {
            Some(t) => Some(read(t, format!("{name}.cloudEvents.token")).await?),
            None => None,
        };
        return Ok(Target::CloudEvents {
            url: c.url.clone(),
            mode: c.mode,
            source: c.source.clone().unwrap_or_else(|| "tagpilot".to_string()),
            token,
        });
    }
    if let Some(t) = &sink.teams {
        let url = read(&t.url, format!("{name}.teams.url")).await?;
        return Ok(Target::Teams { url });
    }
    let slack = sink.slack.as_ref().expect("one kind is set");
    match (&slack.webhook_url, &slack.token, &slack.channel) {
        (Some(url), None, None) => Ok(Target::SlackWebhook {
            url: read(url, format!("{name}.slack.webhookUrl")).await?,
        }),
        (None, Some(token), Some(channel)) => Ok(Target::SlackApi {
            api: slack
                .api_url
                .clone()
                .unwrap_or_else(|| "https://slack.com/api".to_string()),
            token: read(token, format!("{name}.slack.token")).await?,
            channel: channel.clone(),
        }),
        _ => Err(NotifyError::Slack { sink: name.clone() }),
    }
}

/// Reads the secret `source` names; `key` names the setting in errors.
async fn read_secret(
    source: &NotifySecret,
    key: String,
    base_dir: &Path,
    cluster: Option<&crate::kubernetes::Cluster>,
) -> Result<Hidden, NotifyError> {
    let text = match (&source.secret_env, &source.secret_file, &source.secret_ref) {
        (Some(var), None, None) => std::env::var(var).map_err(|_| NotifyError::SecretEnvUnset {
            key: key.clone(),
            var: var.clone(),
        })?,
        (None, Some(file), None) => {
            let path = base_dir.join(file);
            std::fs::read_to_string(&path).map_err(|source| NotifyError::SecretFile {
                key: key.clone(),
                path,
                source,
            })?
        }
        (None, None, Some(r)) => {
            let namespace = r.namespace.clone().unwrap_or_else(|| {
                std::env::var("POD_NAMESPACE").unwrap_or_else(|_| "default".to_string())
            });
            let Some(cluster) = cluster else {
                return Err(NotifyError::NoCluster {
                    key,
                    namespace,
                    name: r.name.clone(),
                });
            };
            let secret = cluster
                .secret(&namespace, &r.name)
                .await
                .map_err(|source| NotifyError::SecretRef {
                    key: key.clone(),
                    source: Box::new(source),
                })?;
            crate::kubernetes::secret_value(&secret, &r.key).ok_or_else(|| {
                NotifyError::SecretKeyMissing {
                    key: key.clone(),
                    namespace,
                    name: r.name.clone(),
                    secret_key: r.key.clone(),
                }
            })?
        }
        _ => return Err(NotifyError::SecretSource { key }),
    };
    let text = text.trim();
    if text.is_empty() {
        return Err(NotifyError::EmptySecret { key });
    }
    Ok(Hidden(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sink(yaml: &str) -> SinkConfig {
        serde_saphyr::from_str(yaml).unwrap()
    }

    #[test]
    fn a_route_takes_its_types_repositories_and_policies() {
        let route = Route::new(&sink(
            "name: s\nevents: [failed, held]\nrepositories: [\"shop-*\"]\npolicies: [api]\nteams: {url: {secretEnv: X}}\n",
        ))
        .unwrap();
        let notice = |kind, repository: Option<&str>, policy: &str| {
            let mut n = Notice::new(kind, jiff::Timestamp::UNIX_EPOCH);
            n.repository = repository.map(String::from);
            n.policy = Some(policy.into());
            n
        };
        assert!(route.takes(&notice(Kind::Failed, Some("shop-prod"), "api")));
        assert!(!route.takes(&notice(Kind::Verified, Some("shop-prod"), "api")));
        assert!(!route.takes(&notice(Kind::Failed, Some("billing"), "api")));
        assert!(!route.takes(&notice(Kind::Failed, Some("shop-prod"), "web")));
        assert!(route.takes(&notice(Kind::Held, None, "api")));
        let unknown = Route::new(&sink(
            "name: s\nevents: [fail]\nteams: {url: {secretEnv: X}}\n",
        ));
        assert_eq!(
            unknown.unwrap_err().to_string(),
            "s.events: fail is not an event type"
        );
    }

    #[test]
    fn check_names_every_sink_problem_without_reading_a_secret() {
        let config: NotificationsConfig = serde_saphyr::from_str(
            "sinks:\n  - {name: a, teams: {url: {secretEnv: UNSET_ON_PURPOSE}}}\n  - {name: a, teams: {url: {secretEnv: X}}, events: [nope]}\n  - {name: b, slack: {channel: \"#c\"}, templates: {failed: \"{{ to \"}}\n",
        )
        .unwrap();
        let found: Vec<String> = check(&config).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                "two sinks are named a",
                "a.events: nope is not an event type",
                "b.slack: give webhookUrl, or token and channel",
                "b",
            ]
        );
    }

    #[tokio::test]
    async fn secrets_come_from_the_environment_or_a_file_and_errors_never_hold_them() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("url"), "https://hooks.example/s3cret\n").unwrap();
        let teams = sink("name: t\nteams: {url: {secretFile: url}}\n");
        let Target::Teams { url } = target(&teams, dir.path(), None).await.unwrap() else {
            panic!("a Teams target");
        };
        assert_eq!(url.0, "https://hooks.example/s3cret");
        let both = sink("name: t\nteams: {url: {secretFile: url, secretEnv: X}}\n");
        assert_eq!(
            target(&both, dir.path(), None)
                .await
                .unwrap_err()
                .to_string(),
            "t.teams.url: give exactly one of secretEnv, secretFile, secretRef"
        );
        let by_ref = sink("name: t\nteams: {url: {secretRef: {namespace: ci, name: n, key: k}}}\n");
        assert_eq!(
            target(&by_ref, dir.path(), None)
                .await
                .unwrap_err()
                .to_string(),
            "t.teams.url.secretRef: no cluster to read Secret ci/n from"
        );
        let two = sink(
            "name: t\nteams: {url: {secretFile: url}}\nslack: {webhookUrl: {secretFile: url}}\n",
        );
        assert!(matches!(
            target(&two, dir.path(), None).await,
            Err(NotifyError::Kind { .. })
        ));
        let half_slack = sink("name: t\nslack: {token: {secretFile: url}}\n");
        assert!(matches!(
            target(&half_slack, dir.path(), None).await,
            Err(NotifyError::Slack { .. })
        ));
    }
}
