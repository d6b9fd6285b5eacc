//! Argo CD Image Updater's per-resource series, under its names and labels, and how a cycle's
//! Applications are counted into them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use super::{Registrar, registered};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::argocd::plan::ImageStatus;
use crate::argocd::write::PatchStatus;
use crate::engine::Cycle;
use crate::plan::RepositoryStatus;
use crate::report::applications::{ApplicationReport, UpdaterName};

/// Image Updater's labels: the `ImageUpdater` resource's name and namespace. Applications
/// configured by their annotations alone (no resource, as in Image Updater 0.x) count under
/// empty values: to Prometheus an empty label is an absent one, so queries written for 0.x's
/// unlabelled series still match them.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub(super) struct UpdaterLabels {
    image_updater_cr_name: String,
    image_updater_cr_namespace: String,
}

/// Argo CD Image Updater's series, as it names them: the gauges
/// `argocd_image_updater_applications_watched_total` and `…_images_watched_total`, the counters
/// `…_images_updated_total` and `…_images_errors_total`.
pub(super) struct ImageUpdaterSeries {
    applications: Family<UpdaterLabels, Gauge>,
    images: Family<UpdaterLabels, Gauge>,
    updated: Family<UpdaterLabels, Counter>,
    errors: Family<UpdaterLabels, Counter>,
    /// The resources the gauges were last set for: one no longer there is dropped from them,
    /// as Image Updater drops a deleted resource's series.
    watched: Mutex<BTreeSet<UpdaterLabels>>,
}

impl ImageUpdaterSeries {
    pub(super) fn register(registry: &mut Registrar) -> Self {
        let series = ImageUpdaterSeries {
            applications: Family::default(),
            images: Family::default(),
            updated: Family::default(),
            errors: Family::default(),
            watched: Mutex::default(),
        };
        // Gauges keep their names as given, `_total` and all, as Image Updater's do.
        let _ = registered(
            registry,
            "argocd_image_updater_applications_watched_total",
            "The total number of applications watched by Argo CD Image Updater CR",
            series.applications.clone(),
        );
        let _ = registered(
            registry,
            "argocd_image_updater_images_watched_total",
            "Number of images watched by Argo CD Image Updater CR",
            series.images.clone(),
        );
        // Counters get their `_total` suffix when rendered.
        let _ = registered(
            registry,
            "argocd_image_updater_images_updated",
            "Number of images updated by Argo CD Image Updater CR",
            series.updated.clone(),
        );
        let _ = registered(
            registry,
            "argocd_image_updater_images_errors",
            "Number of errors reported by Argo CD Image Updater CR",
            series.errors.clone(),
        );
        series
    }

    /// Adds a cycle's (or a re-check's) updates and errors; after a full cycle (`watched`),
    /// sets the gauges too. A re-check reads only some images, so its counts of what is watched
    /// would be partial.
    pub(super) fn record(&self, cycle: &Cycle, watched: bool) {
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
