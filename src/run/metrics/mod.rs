//! Every metric `tagpilot run` exports, registered once here, and how a cycle's outcome becomes
//! them. Labels are bounded sets (results, error kinds, policy names from the configuration's
//! policy files, registry hosts, the state directory); never tags, digests, commit ids or
//! anything there is one of per Application, which would grow without end: an Argo CD
//! Application's image is a policy of its own (`<app>/<alias>`), so every one of them counts
//! under the one `policy` value [`APPLICATION_POLICIES`], and its detail is in the log (one line
//! per update) and the report.
//!
//! With `--image-updater-metrics`, Argo CD Image Updater's four per-resource series are exported
//! too, under its names and labels, so dashboards built on them keep working (see
//! [`ImageUpdaterSeries`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};

use super::webhook::Verdict;

use self::after_write::AfterWrite;
use self::image_updater::ImageUpdaterSeries;
use self::labels::{
    DirLabel, FINDING_KINDS, FindingLabels, KindLabel, RegistryLabel, RegistryStatusLabels,
    ResultLabel, SKIP_KINDS, SinkLabels, SkipLabel, UpdateLabels, WebhookLabels, finding_labels,
};

mod after_write;
mod holds;
mod image_updater;
mod labels;
mod record;
mod result;

pub(crate) use self::result::reachable;
pub use self::result::{CycleResult, RegistriesAnswered};

pub use self::after_write::VERIFICATION_RESULTS;
pub use self::labels::APPLICATION_POLICIES;
pub(super) use self::record::change_result;

/// The metrics, and the registry that renders them.
pub struct Metrics {
    // A `Mutex` only because `Registry` is not `Sync`; it is locked for rendering, which is rare.
    registry: Mutex<Registry>,
    /// Every family registered, in order ([`Metrics::described`]).
    described: Vec<Described>,
    cycles: Family<ResultLabel, Counter>,
    cycle_duration: Histogram,
    last_success: Gauge<f64, std::sync::atomic::AtomicU64>,
    updates: Family<UpdateLabels, Counter>,
    errors: Family<KindLabel, Counter>,
    webhooks: Family<WebhookLabels, Counter>,
    rechecks: Family<ResultLabel, Counter>,
    registry_requests: Family<RegistryStatusLabels, Counter>,
    tag_listings: Family<RegistryLabel, Counter>,
    registry_up: Family<RegistryLabel, Gauge>,
    registry_last_reachable: Family<RegistryLabel, Gauge<f64, std::sync::atomic::AtomicU64>>,
    state_up: Family<DirLabel, Gauge>,
    leader: Gauge,
    /// 1 while writes are frozen (`tagpilot freeze`).
    frozen: Gauge,
    /// Per registry: manifest GETs spent, deferred for its quota, and what it says is left.
    quota_spent: Family<RegistryLabel, Gauge>,
    quota_deferred: Family<RegistryLabel, Gauge>,
    quota_left: Family<RegistryLabel, Gauge>,
    /// The changes the last full cycle planned and held for a closed window or the freeze.
    waiting_for_window: Gauge,
    /// What the last full cycle found configured but nothing to act on, by kind.
    findings: Family<FindingLabels, Gauge>,
    /// The files the last full cycle skipped, by reason.
    skipped_files: Family<SkipLabel, Gauge>,
    /// Policies `tagpilot run` does not serve, by reason (the last full cycle's).
    policies_not_served: Family<SkipLabel, Gauge>,
    metadata_hits: Counter,
    /// Cosign signature verifications by result (issue 22).
    signatures: Family<ResultLabel, Counter>,
    /// The registry client's verification counts when last taken.
    signatures_seen: Mutex<BTreeMap<&'static str, u64>>,
    /// What follows a write: verifications, reverts and holds ([`after_write`]).
    after_write: AfterWrite,
    /// The registry client's metadata cache hits when last taken.
    metadata_hits_seen: std::sync::atomic::AtomicU64,
    /// The registry client's counts when last taken, so each cycle adds only what is new.
    registry_seen: Mutex<BTreeMap<(String, &'static str, String), u64>>,
    /// Notification messages by sink and result (issue 33).
    notifications: Family<SinkLabels, Counter>,
    /// `--image-updater-metrics`: Argo CD Image Updater's series too.
    image_updater: Option<ImageUpdaterSeries>,
    /// What the timestamp gauges read (the service's clock).
    clock: std::sync::Arc<dyn crate::clock::Clock>,
    /// The policies of the configuration's files, by name: the `policy` label's only values
    /// besides [`APPLICATION_POLICIES`] once set ([`Metrics::set_configured_policies`]).
    configured_policies: Mutex<Option<std::collections::BTreeSet<String>>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// The timestamp gauges read `clock` (the service's).
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn crate::clock::Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Now as Unix seconds, as the timestamp gauges hold it.
    fn unix_now(&self) -> f64 {
        self.clock.wall().as_duration().as_secs_f64()
    }

    /// tagpilot's own metrics.
    pub fn new() -> Self {
        Self::with_image_updater(false)
    }

    /// tagpilot's own metrics, and with `image_updater` Argo CD Image Updater's as well.
    pub fn with_image_updater(image_updater: bool) -> Self {
        // 1. Register every family, in the order they are rendered. Counters get their `_total`
        //    suffix when rendered.
        let mut registry = Registrar {
            registry: Registry::default(),
            described: Vec::new(),
        };
        let metrics = Metrics {
            cycles: registered(
                &mut registry,
                "tagpilot_cycles",
                "Cycles run, by how they ended (ok, partial, error, cancelled, registries_unreachable)",
                Family::default(),
            ),
            // From a tenth of a second (a few cached repositories) to about seven minutes.
            cycle_duration: registered(
                &mut registry,
                "tagpilot_cycle_duration_seconds",
                "How long each cycle took",
                Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                    0.1, 2.0, 13,
                )),
            ),
            last_success: registered(
                &mut registry,
                "tagpilot_last_successful_cycle_timestamp_seconds",
                "When the last cycle with no failed target ended (Unix time)",
                Gauge::default(),
            ),
            updates: registered(
                &mut registry,
                "tagpilot_updates",
                "Image reference updates by policy and result (proposed, pushed, pull_request, held, failed); the images of Argo CD Applications count under the one policy (applications), each update logged with its own",
                Family::default(),
            ),
            errors: registered(
                &mut registry,
                "tagpilot_errors",
                "Errors by kind (the error enums' variants)",
                Family::default(),
            ),
            webhooks: registered(
                &mut registry,
                "tagpilot_webhook_requests",
                "Webhook requests by kind and result (accepted, ignored, unauthorized, malformed, too_large, unknown_kind)",
                Family::default(),
            ),
            rechecks: registered(
                &mut registry,
                "tagpilot_webhook_rechecks",
                "Re-checks of the policies and Applications that use the repositories notifications named, by how they ended (as tagpilot_cycles_total)",
                Family::default(),
            ),
            registry_requests: registered(
                &mut registry,
                "tagpilot_registry_requests",
                "Requests to registries by registry and HTTP status (unreachable: no answer)",
                Family::default(),
            ),
            tag_listings: registered(
                &mut registry,
                "tagpilot_tag_listings",
                "Tag list requests by registry",
                Family::default(),
            ),
            registry_up: registered(
                &mut registry,
                "tagpilot_registry_up",
                "1 when a request to the registry got an answer (not 5xx or 429) in the last cycle or re-check that asked it, 0 when none did",
                Family::default(),
            ),
            registry_last_reachable: registered(
                &mut registry,
                "tagpilot_registry_last_reachable_timestamp_seconds",
                "When the registry last answered a request (Unix time)",
                Family::default(),
            ),
            state_up: registered(
                &mut registry,
                "tagpilot_state_store_up",
                "1 while the --state-dir store works, 0 while it is down after an I/O error (a full disk) and first-seen times are unknown",
                Family::default(),
            ),
            leader: registered(
                &mut registry,
                "tagpilot_leader",
                "1 while this replica writes (it holds the Lease, or runs without --leader-elect), 0 while it follows",
                Gauge::default(),
            ),
            frozen: registered(
                &mut registry,
                "tagpilot_frozen",
                "1 while every write is frozen (tagpilot freeze, POST /freeze), 0 otherwise",
                Gauge::default(),
            ),
            quota_spent: registered(
                &mut registry,
                "tagpilot_registry_quota_spent",
                "Manifest GETs sent to the registry since start, the requests a pull quota (Docker Hub's) counts; HEADs and tag listings are not",
                Family::default(),
            ),
            quota_deferred: registered(
                &mut registry,
                "tagpilot_registry_quota_deferred",
                "Manifest GETs not sent since start because the registry's quota was down to what is kept back",
                Family::default(),
            ),
            quota_left: registered(
                &mut registry,
                "tagpilot_registry_quota_left",
                "What the registry last said is left of its pull quota (ratelimit-remaining), less the GETs sent since; only for registries that say",
                Family::default(),
            ),
            waiting_for_window: registered(
                &mut registry,
                "tagpilot_changes_waiting_for_window",
                "Changes the last full cycle planned and held, unwritten, for a closed change window or the freeze",
                Gauge::default(),
            ),
            findings: registered(
                &mut registry,
                "tagpilot_findings",
                "What the last full cycle found configured but nothing to act on, by kind (no_files, image_not_found, application_image_not_found, version_label_left, application_on_other_revision, unreadable_file, unknown_annotation) and severity (problem, warning)",
                Family::default(),
            ),
            skipped_files: registered(
                &mut registry,
                "tagpilot_skipped_files",
                "Files the last full cycle left alone, by reason (invalid_yaml, not_text, helm_template)",
                Family::default(),
            ),
            policies_not_served: registered(
                &mut registry,
                "tagpilot_policies_not_served",
                "Policies the last full cycle read but tagpilot run does not serve, by reason (local_directory: a target without repository: is the local directory, which only plan and apply write)",
                Family::default(),
            ),
            metadata_hits: registered(
                &mut registry,
                "tagpilot_metadata_cache_hits",
                "Image manifests and configs served from memory or the --state-dir store instead of a registry",
                Counter::default(),
            ),
            signatures: registered(
                &mut registry,
                "tagpilot_signature_verifications",
                "Cosign signature verifications of image digests, by result (verified, unsigned, untrusted, error; cached: a verification kept in the --state-dir store)",
                Family::default(),
            ),
            signatures_seen: Mutex::default(),
            after_write: AfterWrite::register(&mut registry),
            notifications: registered(
                &mut registry,
                "tagpilot_notifications",
                "Notification messages by sink and result (sent; retried: a try refused, tried again; failed: given up after every try; dropped: the sink's queue was full)",
                Family::default(),
            ),
            image_updater: image_updater.then(|| ImageUpdaterSeries::register(&mut registry)),
            clock: crate::clock::system(),
            configured_policies: Mutex::default(),
            metadata_hits_seen: Default::default(),
            registry_seen: Mutex::default(),
            registry: Mutex::new(registry.registry),
            described: registry.described,
        };
        // 2. Bounded series show from the start at zero.
        metrics.start_at_zero();
        metrics
    }

    /// Sets every result, finding kind and skip reason to zero, so that `rate()` and `absent()`
    /// in alerts work before the first failure.
    fn start_at_zero(&self) {
        for result in [
            "verified",
            "unsigned",
            "untrusted",
            "unverifiable",
            "error",
            "cached",
        ] {
            let _ = self.signatures.get_or_create(&ResultLabel { result });
        }
        for result in CycleResult::ALL {
            let label = ResultLabel {
                result: result.label(),
            };
            self.cycles.get_or_create(&label).inc_by(0);
            self.rechecks.get_or_create(&label).inc_by(0);
        }
        self.after_write.start_at_zero();
        for kind in FINDING_KINDS {
            self.findings.get_or_create(&finding_labels(kind)).set(0);
        }
        self.set_holds(&[]);
        self.set_policies_not_served(0);
        for kind in SKIP_KINDS {
            self.skipped_files
                .get_or_create(&SkipLabel {
                    reason: kind.label(),
                })
                .set(0);
        }
    }

    /// Counts a notification message to `sink` by `result` (`sent`, `retried`, `failed`,
    /// `dropped`).
    pub fn record_notification(&self, sink: &str, result: &'static str) {
        self.notifications
            .get_or_create(&SinkLabels {
                sink: sink.to_string(),
                result,
            })
            .inc();
    }

    /// Shows `sink`'s `result` series at zero before its first message.
    pub fn start_notifications_at_zero(&self, sink: &str, result: &'static str) {
        let _ = self.notifications.get_or_create(&SinkLabels {
            sink: sink.to_string(),
            result,
        });
    }

    /// How many policies `tagpilot run` does not serve because a target of theirs is the
    /// local directory.
    pub fn set_policies_not_served(&self, local_directory: usize) {
        self.policies_not_served
            .get_or_create(&SkipLabel {
                reason: "local_directory",
            })
            .set(i64::try_from(local_directory).unwrap_or(i64::MAX));
    }

    /// shows it, labelled with its `--state-dir`.
    pub fn set_state_up(&self, path: &std::path::Path, up: bool) {
        let dir = path.parent().unwrap_or(path);
        self.state_up
            .get_or_create(&DirLabel {
                dir: dir.display().to_string(),
            })
            .set(i64::from(up));
    }

    /// Adds the registry client's metadata cache hits since the last call (its count only grows).
    pub fn record_metadata_hits(&self, total: u64) {
        let before = self
            .metadata_hits_seen
            .swap(total, std::sync::atomic::Ordering::Relaxed);
        self.metadata_hits.inc_by(total.saturating_sub(before));
    }

    /// Adds the registry client's signature verifications since the last call, by result (its
    /// counts only grow).
    pub fn record_signatures(&self, totals: &crate::registry::VerificationCounts) {
        let mut seen = self
            .signatures_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for &(result, total) in totals {
            let before = seen.insert(result, total).unwrap_or(0);
            self.signatures
                .get_or_create(&ResultLabel { result })
                .inc_by(total.saturating_sub(before));
        }
    }

    /// Counts one webhook request of `kind` (`distribution`, `docker.io`, `unknown`: a bounded
    /// set) and what became of it.
    pub fn webhook(&self, kind: &'static str, verdict: Verdict) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                kind,
                result: verdict.label(),
            })
            .inc();
    }

    /// Whether this replica writes, as `tagpilot_leader` shows it.
    pub fn set_leader(&self, leading: bool) {
        self.leader.set(i64::from(leading));
    }

    /// Each registry's quota as the client knows it.
    pub fn record_quotas(&self, quotas: &[crate::registry::QuotaView]) {
        let as_gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for q in quotas {
            let label = RegistryLabel {
                registry: q.registry.clone(),
            };
            self.quota_spent
                .get_or_create(&label)
                .set(as_gauge(q.spent));
            self.quota_deferred
                .get_or_create(&label)
                .set(as_gauge(q.deferred));
            if let Some(left) = q.left {
                self.quota_left.get_or_create(&label).set(as_gauge(left));
            }
        }
    }

    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.set(i64::from(frozen));
    }

    /// The changes a full cycle held for a closed window or the freeze.
    pub fn set_waiting_for_window(&self, changes: usize) {
        self.waiting_for_window
            .set(i64::try_from(changes).unwrap_or(i64::MAX));
    }

    /// Counts a notification a follower refused (`result="not_leader"`; the kind is not read).
    pub fn webhook_not_leader(&self) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                kind: "any",
                result: "not_leader",
            })
            .inc();
    }

    /// The policies read from the configuration's files this cycle: an update of any other
    /// policy (an Application's image) is counted under [`APPLICATION_POLICIES`].
    pub fn set_configured_policies<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let names = names.into_iter().map(str::to_owned).collect();
        *self
            .configured_policies
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(names);
    }

    /// The `policy` label of an update of `policy`: its name if the configuration's files
    /// define it (or none were set), the pattern policy's for one of a pattern's images, else
    /// [`APPLICATION_POLICIES`].
    fn policy_label(&self, policy: &str) -> String {
        let configured = self
            .configured_policies
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match &*configured {
            // A pattern policy's image (`shop@shop/cart`) counts under the pattern policy: the
            // label set does not grow with the images a pattern follows.
            Some(names) if !names.contains(policy) => {
                crate::policy::pattern::pattern_of(policy, |p| names.contains(p))
                    .unwrap_or(APPLICATION_POLICIES)
                    .to_owned()
            }
            _ => policy.to_owned(),
        }
    }

    /// Counts one error of `kind` (a bounded label: an error variant's `metric_label`).
    pub fn error(&self, kind: &'static str) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
    }

    /// Every family registered, with its type and help, series or not: what the book's metrics
    /// reference lists.
    pub fn described(&self) -> &[Described] {
        &self.described
    }

    /// The Prometheus text of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let registry = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        // Writing into a `String` cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &registry);
        text
    }
}

/// The registry while the families are registered, and what each family is: the text format
/// leaves a family out until it has a series, so the book's metrics page (and anything else that
/// lists every family) reads the registrations themselves.
pub(super) struct Registrar {
    registry: Registry,
    described: Vec<Described>,
}

/// One registered family: its name as registered (a counter's series get `_total`), its
/// Prometheus type and its help text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Described {
    pub name: String,
    pub kind: &'static str,
    pub help: String,
}

/// Registers `metric` under `name` and hands it back: the registry keeps a handle to the same
/// series.
fn registered<M: Metric + Clone>(
    registrar: &mut Registrar,
    name: &str,
    help: &str,
    metric: M,
) -> M {
    registrar.described.push(Described {
        name: name.to_owned(),
        kind: match metric.metric_type() {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Info => "info",
            MetricType::Unknown => "unknown",
        },
        help: help.to_owned(),
    });
    registrar.registry.register(name, help, metric.clone());
    metric
}

#[cfg(test)]
mod tests;
