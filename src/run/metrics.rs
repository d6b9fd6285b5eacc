//! Every metric `tagpilot run` exports, registered once here, and how a cycle's outcome becomes
//! them. Labels are bounded sets (results, error kinds, policy names from the configuration);
//! never tags, digests or commit ids, which would grow without end.
//!
//! With `--image-updater-metrics`, Argo CD Image Updater's four per-resource series are exported
//! too, under its names and labels, so dashboards built on them keep working (see
//! [`ImageUpdaterSeries`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::argocd::cluster::PatchStatus;
use crate::argocd::outcome::ImageStatus;
use crate::argocd::report::{ApplicationReport, UpdaterName};
use crate::engine::{Cycle, EngineError};
use crate::plan::{FindingKind, RepositoryStatus, Severity, SkipKind};
use crate::policy::PolicyError;
use crate::registry::ResponseCount;

use super::webhook::Verdict;

/// How a cycle ended, as `tagpilot_cycles_total{result}` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleResult {
    /// Every target was planned and written.
    Ok,
    /// The cycle ran, but a target failed (a push refused, a patch rejected).
    Partial,
    /// The cycle could not run at all.
    Error,
    /// Shutdown stopped it before every target was done.
    Cancelled,
    /// The cycle ran, but no registry it asked answered: nothing it decided rests on a tag
    /// list, so it is not counted as a success whatever its targets did.
    RegistriesUnreachable,
}

impl CycleResult {
    pub fn of(result: &Result<Cycle, EngineError>) -> Self {
        match result {
            Err(_) => CycleResult::Error,
            Ok(c) if c.cancelled => CycleResult::Cancelled,
            Ok(c) if c.failed => CycleResult::Partial,
            Ok(_) => CycleResult::Ok,
        }
    }

    /// The result of a cycle whose registry requests are `answered`: a cycle that ran, but in
    /// which no registry asked gave an answer, is [`CycleResult::RegistriesUnreachable`].
    pub fn given(self, answered: RegistriesAnswered) -> Self {
        match self {
            CycleResult::Ok | CycleResult::Partial if answered.none_reachable() => {
                CycleResult::RegistriesUnreachable
            }
            other => other,
        }
    }

    fn label(self) -> &'static str {
        match self {
            CycleResult::Ok => "ok",
            CycleResult::Partial => "partial",
            CycleResult::Error => "error",
            CycleResult::Cancelled => "cancelled",
            CycleResult::RegistriesUnreachable => "registries_unreachable",
        }
    }

    const ALL: [CycleResult; 5] = [
        CycleResult::Ok,
        CycleResult::Partial,
        CycleResult::Error,
        CycleResult::Cancelled,
        CycleResult::RegistriesUnreachable,
    ];
}

/// How many registries a cycle (or re-check) sent requests to, and how many of them answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RegistriesAnswered {
    pub asked: usize,
    pub reachable: usize,
}

impl RegistriesAnswered {
    /// Registries were asked, and none answered.
    pub fn none_reachable(self) -> bool {
        self.asked > 0 && self.reachable == 0
    }
}

/// Whether an answer shows the registry reachable: any HTTP status but a 5xx or a 429 (which
/// say it cannot serve now). `unreachable` is no answer at all.
fn reachable(status: &str) -> bool {
    status.parse::<u16>().is_ok_and(|s| s < 500 && s != 429)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabel {
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct UpdateLabels {
    policy: String,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    kind: &'static str,
    result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryStatusLabels {
    registry: String,
    status: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RegistryLabel {
    registry: String,
}

/// The `--state-dir`: one value per process.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirLabel {
    dir: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabel {
    kind: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FindingLabels {
    kind: &'static str,
    severity: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SkipLabel {
    reason: &'static str,
}

/// Every finding kind, so each series shows from the start at zero.
const FINDING_KINDS: [FindingKind; 3] = [
    FindingKind::NoFiles,
    FindingKind::ImageNotFound,
    FindingKind::ApplicationImageNotFound,
];

/// Every reason a file is skipped for.
const SKIP_KINDS: [SkipKind; 5] = [
    SkipKind::InvalidYaml,
    SkipKind::NotText,
    SkipKind::HelmTemplate,
    SkipKind::TooDeep,
    SkipKind::TooLarge,
];

fn finding_labels(kind: FindingKind) -> FindingLabels {
    FindingLabels {
        kind: kind.label(),
        severity: match kind.severity() {
            Severity::Problem => "problem",
            Severity::Warning => "warning",
        },
    }
}

/// Image Updater's labels: the `ImageUpdater` resource's name and namespace. Applications
/// configured by their annotations alone (no resource, as in Image Updater 0.x) count under
/// empty values: to Prometheus an empty label is an absent one, so queries written for 0.x's
/// unlabelled series still match them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
struct UpdaterLabels {
    image_updater_cr_name: String,
    image_updater_cr_namespace: String,
}

/// Argo CD Image Updater's series, as it names them: the gauges
/// `argocd_image_updater_applications_watched_total` and `…_images_watched_total`, the counters
/// `…_images_updated_total` and `…_images_errors_total`.
struct ImageUpdaterSeries {
    applications: Family<UpdaterLabels, Gauge>,
    images: Family<UpdaterLabels, Gauge>,
    updated: Family<UpdaterLabels, Counter>,
    errors: Family<UpdaterLabels, Counter>,
    /// The resources the gauges were last set for: one no longer there is dropped from them,
    /// as Image Updater drops a deleted resource's series.
    watched: Mutex<BTreeSet<UpdaterLabels>>,
}

impl ImageUpdaterSeries {
    fn register(registry: &mut Registry) -> Self {
        let series = ImageUpdaterSeries {
            applications: Family::default(),
            images: Family::default(),
            updated: Family::default(),
            errors: Family::default(),
            watched: Mutex::default(),
        };
        // Gauges keep their names as given, `_total` and all, as Image Updater's do.
        registry.register(
            "argocd_image_updater_applications_watched_total",
            "The total number of applications watched by Argo CD Image Updater CR",
            series.applications.clone(),
        );
        registry.register(
            "argocd_image_updater_images_watched_total",
            "Number of images watched by Argo CD Image Updater CR",
            series.images.clone(),
        );
        // Counters get their `_total` suffix when rendered.
        registry.register(
            "argocd_image_updater_images_updated",
            "Number of images updated by Argo CD Image Updater CR",
            series.updated.clone(),
        );
        registry.register(
            "argocd_image_updater_images_errors",
            "Number of errors reported by Argo CD Image Updater CR",
            series.errors.clone(),
        );
        series
    }

    /// Adds a cycle's (or a re-check's) updates and errors; after a full cycle (`watched`),
    /// sets the gauges too. A re-check reads only some images, so its counts of what is watched
    /// would be partial.
    fn record(&self, cycle: &Cycle, watched: bool) {
        let tallies = updater_tallies(cycle);
        for (labels, t) in &tallies {
            self.updated.get_or_create(labels).inc_by(t.updated);
            self.errors.get_or_create(labels).inc_by(t.errors);
        }
        if !watched {
            return;
        }
        let mut before = self.watched.lock().unwrap_or_else(|e| e.into_inner());
        for gone in before.iter().filter(|l| !tallies.contains_key(*l)) {
            self.applications.remove(gone);
            self.images.remove(gone);
        }
        for (labels, t) in &tallies {
            self.applications.get_or_create(labels).set(t.applications);
            self.images.get_or_create(labels).set(t.images);
        }
        *before = tallies.into_keys().collect();
    }
}

/// One resource's share of a cycle, counted as Image Updater counts it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct UpdaterTally {
    /// Applications it manages.
    applications: i64,
    /// Images their configurations name.
    images: i64,
    /// Images written: pushed, in a pull request, or patched into the Application.
    updated: u64,
    /// The Applications' problems, images that could not be decided, and images whose write
    /// failed.
    errors: u64,
}

/// Each resource's tally; Applications configured by annotations alone under empty labels.
/// Applications nothing manages (no resource selects them, or two do) are not counted.
fn updater_tallies(cycle: &Cycle) -> BTreeMap<UpdaterLabels, UpdaterTally> {
    let mut out: BTreeMap<UpdaterLabels, UpdaterTally> = BTreeMap::new();
    for app in cycle.applications.iter().flatten() {
        let labels = match &app.updater {
            Some(UpdaterName { namespace, name }) => UpdaterLabels {
                image_updater_cr_name: name.clone(),
                image_updater_cr_namespace: namespace.clone(),
            },
            None if app.images_managed > 0 => UpdaterLabels {
                image_updater_cr_name: String::new(),
                image_updater_cr_namespace: String::new(),
            },
            None => continue,
        };
        let t = out.entry(labels).or_default();
        t.applications += 1;
        t.images += i64::try_from(app.images_managed).unwrap_or(i64::MAX);
        let (updated, failed) = writes(cycle, app);
        t.updated += updated;
        t.errors += failed + app.problems.len() as u64 + undecided(app);
    }
    out
}

/// How many of an Application's images (by alias, once however many sources it is in) were
/// written, and how many failed to be: a change counts as written when its repository was
/// pushed or got its pull request, or when the Application was patched.
fn writes(cycle: &Cycle, app: &ApplicationReport) -> (u64, u64) {
    let mut written = BTreeSet::new();
    let mut failed = BTreeSet::new();
    for image in app
        .images
        .iter()
        .filter(|i| i.status == ImageStatus::Update)
    {
        let repository = cycle
            .plan
            .repositories
            .iter()
            .find(|r| r.repository == image.repository);
        let (ok, bad) = match (repository, &app.patch) {
            (Some(r), _) => (
                matches!(
                    r.status,
                    RepositoryStatus::Pushed | RepositoryStatus::PullRequests
                ),
                r.status == RepositoryStatus::Failed,
            ),
            (None, Some(p)) => (
                p.status == PatchStatus::Patched,
                p.status == PatchStatus::Failed,
            ),
            // Nothing was written: a plan.
            (None, None) => (false, false),
        };
        if ok {
            written.insert(&image.alias);
        } else if bad {
            failed.insert(&image.alias);
        }
    }
    (
        written.len() as u64,
        failed.difference(&written).count() as u64,
    )
}

/// Images (by alias) whose next version could not be decided.
fn undecided(app: &ApplicationReport) -> u64 {
    app.images
        .iter()
        .filter(|i| i.status == ImageStatus::Problem)
        .map(|i| &i.alias)
        .collect::<BTreeSet<_>>()
        .len() as u64
}

/// The metrics, and the registry that renders them.
pub struct Metrics {
    // A `Mutex` only because `Registry` is not `Sync`; it is locked for rendering, which is rare.
    registry: Mutex<Registry>,
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
    /// What the last full cycle found configured but nothing to act on, by kind.
    findings: Family<FindingLabels, Gauge>,
    /// The files the last full cycle skipped, by reason.
    skipped_files: Family<SkipLabel, Gauge>,
    metadata_hits: Counter,
    /// The registry client's metadata cache hits when last taken.
    metadata_hits_seen: std::sync::atomic::AtomicU64,
    /// The registry client's counts when last taken, so each cycle adds only what is new.
    registry_seen: Mutex<BTreeMap<(String, &'static str, String), u64>>,
    /// `--image-updater-metrics`: Argo CD Image Updater's series too.
    image_updater: Option<ImageUpdaterSeries>,
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
    /// tagpilot's own metrics.
    pub fn new() -> Self {
        Self::with_image_updater(false)
    }

    /// tagpilot's own metrics, and with `image_updater` Argo CD Image Updater's as well.
    pub fn with_image_updater(image_updater: bool) -> Self {
        let mut registry = Registry::default();
        let cycles = Family::<ResultLabel, Counter>::default();
        // Every result shows from the start, at zero, so that `rate()` and `absent()` in alerts
        // work before the first failure.
        for result in CycleResult::ALL {
            cycles
                .get_or_create(&ResultLabel {
                    result: result.label(),
                })
                .inc_by(0);
        }
        // Counters get their `_total` suffix when rendered.
        registry.register(
            "tagpilot_cycles",
            "Cycles run, by how they ended (ok, partial, error, cancelled, registries_unreachable)",
            cycles.clone(),
        );
        // From a tenth of a second (a few cached repositories) to about seven minutes.
        let cycle_duration = Histogram::new(
            prometheus_client::metrics::histogram::exponential_buckets(0.1, 2.0, 13),
        );
        registry.register(
            "tagpilot_cycle_duration_seconds",
            "How long each cycle took",
            cycle_duration.clone(),
        );
        let last_success = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
        registry.register(
            "tagpilot_last_successful_cycle_timestamp_seconds",
            "When the last cycle with no failed target ended (Unix time)",
            last_success.clone(),
        );
        let updates = Family::<UpdateLabels, Counter>::default();
        registry.register(
            "tagpilot_updates",
            "Image reference updates by policy and result (proposed, pushed, pull_request, held, failed)",
            updates.clone(),
        );
        let errors = Family::<KindLabel, Counter>::default();
        registry.register(
            "tagpilot_errors",
            "Errors by kind (the error enums' variants)",
            errors.clone(),
        );
        let webhooks = Family::<WebhookLabels, Counter>::default();
        registry.register(
            "tagpilot_webhook_requests",
            "Webhook requests by kind and result (accepted, ignored, unauthorized, malformed, too_large, unknown_kind)",
            webhooks.clone(),
        );
        let rechecks = Family::<ResultLabel, Counter>::default();
        for result in CycleResult::ALL {
            rechecks
                .get_or_create(&ResultLabel {
                    result: result.label(),
                })
                .inc_by(0);
        }
        registry.register(
            "tagpilot_webhook_rechecks",
            "Re-checks of the policies and Applications that use the repositories notifications named, by how they ended (as tagpilot_cycles_total)",
            rechecks.clone(),
        );
        let registry_requests = Family::<RegistryStatusLabels, Counter>::default();
        registry.register(
            "tagpilot_registry_requests",
            "Requests to registries by registry and HTTP status (unreachable: no answer)",
            registry_requests.clone(),
        );
        let tag_listings = Family::<RegistryLabel, Counter>::default();
        registry.register(
            "tagpilot_tag_listings",
            "Tag list requests by registry",
            tag_listings.clone(),
        );
        let registry_up = Family::<RegistryLabel, Gauge>::default();
        registry.register(
            "tagpilot_registry_up",
            "1 when a request to the registry got an answer (not 5xx or 429) in the last cycle or re-check that asked it, 0 when none did",
            registry_up.clone(),
        );
        let registry_last_reachable =
            Family::<RegistryLabel, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        registry.register(
            "tagpilot_registry_last_reachable_timestamp_seconds",
            "When the registry last answered a request (Unix time)",
            registry_last_reachable.clone(),
        );
        let state_up = Family::<DirLabel, Gauge>::default();
        registry.register(
            "tagpilot_state_store_up",
            "1 while the --state-dir store works, 0 while it is down after an I/O error (a full disk) and first-seen times are unknown",
            state_up.clone(),
        );
        let leader = Gauge::default();
        registry.register(
            "tagpilot_leader",
            "1 while this replica writes (it holds the Lease, or runs without --leader-elect), 0 while it follows",
            leader.clone(),
        );
        let findings = Family::<FindingLabels, Gauge>::default();
        for kind in FINDING_KINDS {
            findings.get_or_create(&finding_labels(kind)).set(0);
        }
        registry.register(
            "tagpilot_findings",
            "What the last full cycle found configured but nothing to act on, by kind (no_files, image_not_found, application_image_not_found) and severity (problem, warning)",
            findings.clone(),
        );
        let skipped_files = Family::<SkipLabel, Gauge>::default();
        for kind in SKIP_KINDS {
            skipped_files
                .get_or_create(&SkipLabel {
                    reason: kind.label(),
                })
                .set(0);
        }
        registry.register(
            "tagpilot_skipped_files",
            "Files the last full cycle left alone, by reason (invalid_yaml, not_text, helm_template)",
            skipped_files.clone(),
        );
        let metadata_hits = Counter::default();
        registry.register(
            "tagpilot_metadata_cache_hits",
            "Image manifests and configs served from memory or the --state-dir store instead of a registry",
            metadata_hits.clone(),
        );
        let image_updater = image_updater.then(|| ImageUpdaterSeries::register(&mut registry));
        Metrics {
            image_updater,
            leader,
            findings,
            skipped_files,
            registry: Mutex::new(registry),
            metadata_hits,
            metadata_hits_seen: Default::default(),
            registry_requests,
            tag_listings,
            registry_up,
            registry_last_reachable,
            state_up,
            registry_seen: Mutex::default(),
            webhooks,
            rechecks,
            cycles,
            cycle_duration,
            last_success,
            updates,
            errors,
        }
    }

    /// Counts one cycle: its result, its duration, its updates and its errors.
    pub fn record_cycle(
        &self,
        result: &Result<Cycle, EngineError>,
        broken_policies: &[PolicyError],
        took: Duration,
    ) {
        self.record_cycle_as(CycleResult::of(result), result, broken_policies, took);
    }

    /// [`Metrics::record_cycle`] with the result as `kind`: [`CycleResult::of`] the cycle,
    /// [`given`](CycleResult::given) the registries' answers.
    pub fn record_cycle_as(
        &self,
        kind: CycleResult,
        result: &Result<Cycle, EngineError>,
        broken_policies: &[PolicyError],
        took: Duration,
    ) {
        self.cycles
            .get_or_create(&ResultLabel {
                result: kind.label(),
            })
            .inc();
        self.cycle_duration.observe(took.as_secs_f64());
        if kind == CycleResult::Ok {
            self.last_success.set(unix_now());
        }
        if let (Some(series), Ok(cycle)) = (&self.image_updater, result) {
            // A cancelled cycle did not read everything it watches; what it wrote counts.
            series.record(cycle, !cycle.cancelled);
        }
        if let Ok(cycle) = result
            && !cycle.cancelled
        {
            self.record_findings(cycle);
        }
        for e in broken_policies {
            // `syntax` or `invalid` alone would not say what was invalid.
            self.errors
                .get_or_create(&KindLabel {
                    kind: format!("policy_{}", e.metric_label()),
                })
                .inc();
        }
        self.record_outcome(result);
    }

    /// Sets the gauges of a full cycle's findings and skipped files: what it found, not a sum
    /// over cycles, so a fixed policy or file drops out at the next cycle.
    fn record_findings(&self, cycle: &Cycle) {
        for kind in FINDING_KINDS {
            let n = cycle
                .plan
                .findings
                .iter()
                .filter(|f| f.kind == kind)
                .count();
            self.findings
                .get_or_create(&finding_labels(kind))
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        for kind in SKIP_KINDS {
            let n = cycle.plan.skipped.iter().filter(|s| s.kind == kind).count();
            self.skipped_files
                .get_or_create(&SkipLabel {
                    reason: kind.label(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Counts one re-check after notifications: its result, its updates and its errors. It is
    /// not a cycle: `tagpilot_cycles_total` and the last successful cycle stay the interval's.
    pub fn record_recheck(&self, result: &Result<Cycle, EngineError>) {
        self.rechecks
            .get_or_create(&ResultLabel {
                result: CycleResult::of(result).label(),
            })
            .inc();
        if let (Some(series), Ok(cycle)) = (&self.image_updater, result) {
            series.record(cycle, false);
        }
        self.record_outcome(result);
    }

    /// The updates and errors of a cycle or a re-check.
    fn record_outcome(&self, result: &Result<Cycle, EngineError>) {
        match result {
            Err(e) => self.error(e.metric_label()),
            Ok(cycle) => {
                for (policy, result) in updates(cycle) {
                    self.updates
                        .get_or_create(&UpdateLabels {
                            policy: policy.to_string(),
                            result,
                        })
                        .inc();
                }
                let failed_repositories = cycle
                    .plan
                    .repositories
                    .iter()
                    .filter(|r| r.status == RepositoryStatus::Failed)
                    .count();
                for _ in 0..failed_repositories {
                    self.error("repository");
                }
            }
        }
    }

    /// Adds the registry client's answers since the last call (its counts only grow), sets
    /// each registry asked since then up or down, and says how many were asked and answered.
    pub fn record_registry(&self, responses: &[ResponseCount]) -> RegistriesAnswered {
        let mut seen = self.registry_seen.lock().unwrap_or_else(|e| e.into_inner());
        // Registry → whether any of its new answers shows it reachable.
        let mut asked: BTreeMap<&str, bool> = BTreeMap::new();
        for r in responses {
            let before = seen
                .insert((r.registry.clone(), r.request, r.status.clone()), r.count)
                .unwrap_or(0);
            let new = r.count.saturating_sub(before);
            if new == 0 {
                continue;
            }
            *asked.entry(&r.registry).or_default() |= reachable(&r.status);
            self.registry_requests
                .get_or_create(&RegistryStatusLabels {
                    registry: r.registry.clone(),
                    status: r.status.clone(),
                })
                .inc_by(new);
            if r.request == "tag_list" {
                self.tag_listings
                    .get_or_create(&RegistryLabel {
                        registry: r.registry.clone(),
                    })
                    .inc_by(new);
            }
        }
        let now = unix_now();
        for (registry, up) in &asked {
            let label = RegistryLabel {
                registry: registry.to_string(),
            };
            self.registry_up.get_or_create(&label).set(i64::from(*up));
            if *up {
                self.registry_last_reachable.get_or_create(&label).set(now);
            }
        }
        RegistriesAnswered {
            asked: asked.len(),
            reachable: asked.values().filter(|up| **up).count(),
        }
    }

    /// Whether the state store (its database file `path`) works, as `tagpilot_state_store_up`
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

    /// Counts a notification a follower refused (`result="not_leader"`; the kind is not read).
    pub fn webhook_not_leader(&self) {
        self.webhooks
            .get_or_create(&WebhookLabels {
                kind: "any",
                result: "not_leader",
            })
            .inc();
    }

    /// Counts one error of `kind` (a bounded label: an error variant's `metric_label`).
    pub fn error(&self, kind: &'static str) {
        self.errors
            .get_or_create(&KindLabel {
                kind: kind.to_string(),
            })
            .inc();
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

/// Now as Unix seconds, as the timestamp gauges hold it.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Each update of a cycle as (policy, result): a change is `pushed`, `pull_request` or `failed`
/// by what happened to its repository, and `proposed` where nothing was written (the local
/// directory is not a target of `tagpilot run`); a hold is `held`; a problem naming a policy is
/// `failed`.
fn updates(cycle: &Cycle) -> Vec<(&str, &'static str)> {
    let plan = &cycle.plan;
    let status_of = |repository: &Option<String>| {
        repository.as_deref().and_then(|name| {
            plan.repositories
                .iter()
                .find(|r| r.repository == name)
                .map(|r| r.status)
        })
    };
    let mut out = Vec::new();
    for change in &plan.changes {
        let result = match status_of(&change.repository) {
            Some(RepositoryStatus::Pushed) => "pushed",
            Some(RepositoryStatus::PullRequests) => "pull_request",
            Some(RepositoryStatus::Failed) => "failed",
            Some(RepositoryStatus::WouldPush | RepositoryStatus::UpToDate) | None => "proposed",
        };
        out.push((change.policy.as_str(), result));
    }
    for hold in &plan.holds {
        out.push((hold.policy.as_str(), "held"));
    }
    for problem in &plan.problems {
        if let Some(policy) = &problem.policy {
            out.push((policy.as_str(), "failed"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::report::ApplicationReport;
    use crate::plan::{Change, Hold, Plan, Problem, RepositoryOutcome};

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
                    reason: "pinned".to_string(),
                }],
                problems: vec![Problem {
                    policy: Some("db".to_string()),
                    message: "no tags".to_string(),
                    ..Default::default()
                }],
                repositories: vec![
                    outcome("pushed", RepositoryStatus::Pushed),
                    outcome("prs", RepositoryStatus::PullRequests),
                    outcome("broken", RepositoryStatus::Failed),
                ],
                ..Default::default()
            },
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
            !text.contains(
                "tagpilot_registry_last_reachable_timestamp_seconds{registry=\"quay.io\"}"
            ),
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
        legacy.patch = Some(crate::argocd::cluster::PatchReport {
            status: PatchStatus::Patched,
            body: "{}".to_string(),
        });
        // Selected by two resources: nothing manages it.
        let mut conflict = app("conflict", None, 0, Vec::new());
        conflict
            .problems
            .push("selected by more than one ImageUpdater".to_string());
        Cycle {
            plan: Plan {
                repositories: vec![
                    outcome("pushed", RepositoryStatus::Pushed),
                    outcome("prs", RepositoryStatus::PullRequests),
                    outcome("broken", RepositoryStatus::Failed),
                ],
                ..Default::default()
            },
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
}
