//! The `status` of each `ImageUpdater` resource read from the cluster, written as Image Updater
//! writes it, so dashboards built on it keep working: `observedGeneration`, `lastCheckedAt`,
//! `lastUpdatedAt`, `applicationsMatched`, `imagesManaged`, `recentUpdates` and the conditions
//! `Reconciling`, `Error` and `Ready` (a partial failure is `Ready=True` with reason
//! `ReconcileCompletedWithErrors` and `Error=True` with reason `PartialErrors`).
//!
//! Pure: the engine sends what [`status_writes`] returns, after the cycle's writes and never in
//! plan mode. A status is written only when it changed: apart from `lastCheckedAt`, which moves
//! every cycle, the new status is compared with the one read, and an equal one is not sent. A
//! condition keeps its `lastTransitionTime` while its status stays the same, as Kubernetes
//! conditions do.

use serde_json::{Value, json};

use super::super::plan::outcome::{ImageOutcome, ImageStatus};
use super::super::read::image_updater::ImageUpdater;
use super::super::resolved::Resolved;

/// One resource's new status.
#[derive(Debug, Clone, PartialEq)]
pub struct StatusWrite {
    pub namespace: String,
    pub name: String,
    pub status: Value,
}

/// The statuses that changed, for the resources read from the cluster. `now` is an RFC 3339
/// time; `app_problems` are per Application index, like [`ImageOutcome::app`].
pub fn status_writes(
    updaters: &[ImageUpdater],
    resolved: &Resolved,
    images: &[ImageOutcome],
    app_problems: &[(usize, String)],
    now: &str,
) -> Vec<StatusWrite> {
    let mut out = Vec::new();
    for u in updaters.iter().filter(|u| u.origin == "cluster") {
        // 1. What this cycle did for the resource's Applications.
        let tally = Tally::of(u, resolved, images, app_problems);
        // 2. The status Image Updater would write for that.
        let old = u.status.clone().unwrap_or(Value::Null);
        let generation = u.metadata.generation.unwrap_or(0);
        let mut status = json!({
            "observedGeneration": generation,
            "lastCheckedAt": now,
            "applicationsMatched": tally.matched.len(),
            "imagesManaged": tally.images_managed,
        });
        tally.updates_into(&mut status, &old, now);
        status["conditions"] = tally.conditions(&old, generation, now);
        // 3. Sent only when it changed.
        if !same_apart_from_check_time(&status, &old) {
            out.push(StatusWrite {
                namespace: u.namespace().to_string(),
                name: u.metadata.name.clone(),
                status,
            });
        }
    }
    out
}

/// Updates of one alias to one version, counting the Applications.
struct Update {
    alias: String,
    image: String,
    from: String,
    to: String,
    apps: usize,
}

/// What one cycle did for the Applications one resource configures.
struct Tally {
    /// Indices of those Applications in [`Resolved::apps`].
    matched: Vec<usize>,
    images_managed: usize,
    errors: usize,
    updates: Vec<Update>,
}

impl Tally {
    fn of(
        u: &ImageUpdater,
        resolved: &Resolved,
        images: &[ImageOutcome],
        app_problems: &[(usize, String)],
    ) -> Tally {
        let matched: Vec<usize> = resolved
            .apps
            .iter()
            .enumerate()
            .filter(|(_, a)| a.configured_by.as_ref().is_some_and(|c| c.is(u)))
            .map(|(i, _)| i)
            .collect();
        let images_managed: usize = matched
            .iter()
            .map(|&i| resolved.apps[i].annotations.images.len())
            .sum();
        let errors = matched
            .iter()
            .map(|&i| {
                resolved.apps[i].problems.len()
                    + app_problems.iter().filter(|(a, _)| *a == i).count()
            })
            .sum::<usize>();
        let mut updates: Vec<Update> = Vec::new();
        for o in images
            .iter()
            .filter(|o| matched.contains(&o.app) && o.status == ImageStatus::Update)
        {
            let (Some(from), Some(to)) = (&o.from, &o.to) else {
                continue;
            };
            match updates
                .iter_mut()
                .find(|u| u.alias == o.alias && u.to == *to)
            {
                Some(entry) => entry.apps += 1,
                None => updates.push(Update {
                    alias: o.alias.clone(),
                    image: o.image.clone(),
                    from: from.clone(),
                    to: to.clone(),
                    apps: 1,
                }),
            }
        }
        Tally {
            matched,
            images_managed,
            errors,
            updates,
        }
    }

    /// `lastUpdatedAt` and `recentUpdates`: this cycle's, or kept from `old` when it updated
    /// nothing.
    fn updates_into(&self, status: &mut Value, old: &Value, now: &str) {
        if self.updates.is_empty() {
            for keep in ["lastUpdatedAt", "recentUpdates"] {
                if let Some(v) = old.get(keep) {
                    status[keep] = v.clone();
                }
            }
            return;
        }
        status["lastUpdatedAt"] = json!(now);
        status["recentUpdates"] = self
            .updates
            .iter()
            .map(|u| {
                json!({
                    "alias": u.alias,
                    "image": u.image,
                    "newVersion": u.to,
                    "applicationsUpdated": u.apps,
                    "updatedAt": now,
                    "message": format!("Updated from {} to {}.", u.from, u.to),
                })
            })
            .collect();
    }

    /// The conditions; each keeps its `lastTransitionTime` from `old` while its status stays.
    fn conditions(&self, old: &Value, generation: i64, now: &str) -> Value {
        let (errors, matched) = (self.errors, self.matched.len());
        let updated: usize = self.updates.iter().map(|u| u.apps).sum();
        let (error, ready) = if errors > 0 {
            (
                (
                    "True",
                    "PartialErrors",
                    format!("{errors} error(s) occurred during image update checks."),
                ),
                (
                    "True",
                    "ReconcileCompletedWithErrors",
                    format!(
                        "Reconciled {matched} applications with {errors} errors, {updated} images updated."
                    ),
                ),
            )
        } else {
            (
                (
                    "False",
                    "NoErrors",
                    "No errors during last reconciliation.".to_string(),
                ),
                (
                    "True",
                    "ReconcileSucceeded",
                    format!("Reconciled {matched} applications, {updated} images updated."),
                ),
            )
        };
        let conditions = [
            (
                "Reconciling",
                (
                    "False",
                    "Idle",
                    "Last check completed. Awaiting next cycle.".to_string(),
                ),
            ),
            ("Error", error),
            ("Ready", ready),
        ];
        conditions
            .into_iter()
            .map(|(kind, (state, reason, message))| {
                let previous = old["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == kind));
                let since = match previous {
                    Some(p) if p["status"] == state => p["lastTransitionTime"].clone(),
                    _ => json!(now),
                };
                json!({
                    "type": kind,
                    "status": state,
                    "reason": reason,
                    "message": message,
                    "observedGeneration": generation,
                    "lastTransitionTime": since,
                })
            })
            .collect()
    }
}

fn same_apart_from_check_time(new: &Value, old: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(m) = v.as_object_mut() {
            m.remove("lastCheckedAt");
        }
        v
    };
    strip(new) == strip(old)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::application::Origin;
    use crate::argocd::read::image_updater::{ConfiguredBy, select};
    use crate::argocd::resolve::resolve_selected;
    use crate::argocd::{Application, resolve::SourceKind};

    fn updater(status: Option<Value>) -> ImageUpdater {
        let mut u: ImageUpdater = serde_json::from_value(json!({
            "apiVersion": "argocd-image-updater.argoproj.io/v1alpha1",
            "kind": "ImageUpdater",
            "metadata": {"name": "shop", "namespace": "argocd", "generation": 3},
            "spec": {"applicationRefs": [{"namePattern": "web-*", "images": [
                {"alias": "web", "imageName": "registry.example/web"}
            ]}]}
        }))
        .unwrap();
        u.status = status;
        u.origin = "cluster".into();
        u
    }

    fn resolved(u: &ImageUpdater) -> Resolved {
        let apps = ["web-a", "web-b", "other"].map(|n| {
            let mut a = Application::default();
            a.metadata.name = n.into();
            a.metadata.namespace = Some("argocd".into());
            (a, Origin::Cluster)
        });
        let selection = select(apps.to_vec(), std::slice::from_ref(u));
        let any = crate::config::applications::AllowedRepositories::any();
        resolve_selected(selection.apps, &[], &any, &|_| {
            Ok::<_, String>("main".into())
        })
    }

    fn update(app: usize) -> ImageOutcome {
        ImageOutcome {
            app,
            alias: "web".into(),
            image: "registry.example/web".into(),
            source: 1,
            kind: SourceKind::Directory,
            repository: "r".into(),
            file: None,
            from: Some("1.0.0".into()),
            to: Some("1.1.0".into()),
            status: ImageStatus::Update,
            reason: None,
        }
    }

    #[test]
    fn a_cycle_with_updates_writes_them_and_an_unchanged_status_is_not_written_again() {
        let u = updater(None);
        let r = resolved(&u);
        assert_eq!(
            r.apps[0].configured_by,
            Some(ConfiguredBy {
                namespace: "argocd".into(),
                name: "shop".into(),
                entry: 0,
                name_pattern: "web-*".into()
            })
        );
        let writes = status_writes(
            std::slice::from_ref(&u),
            &r,
            &[update(0), update(1)],
            &[],
            "2026-11-23T10:00:00Z",
        );
        assert_eq!(writes.len(), 1);
        let s = &writes[0].status;
        assert_eq!(s["applicationsMatched"], 2);
        assert_eq!(s["imagesManaged"], 2);
        assert_eq!(s["observedGeneration"], 3);
        assert_eq!(s["lastUpdatedAt"], "2026-11-23T10:00:00Z");
        assert_eq!(s["recentUpdates"][0]["applicationsUpdated"], 2);
        assert_eq!(s["recentUpdates"][0]["newVersion"], "1.1.0");
        assert_eq!(s["conditions"][2]["reason"], "ReconcileSucceeded");
        assert_eq!(
            s["conditions"][2]["message"],
            "Reconciled 2 applications, 2 images updated."
        );

        // Next cycle: nothing updated, so the message changes once ...
        let u = updater(Some(s.clone()));
        let writes = status_writes(
            std::slice::from_ref(&u),
            &r,
            &[],
            &[],
            "2026-11-23T10:02:00Z",
        );
        assert_eq!(writes.len(), 1);
        let s = &writes[0].status;
        assert_eq!(s["recentUpdates"][0]["newVersion"], "1.1.0", "kept");
        assert_eq!(
            s["conditions"][2]["lastTransitionTime"], "2026-11-23T10:00:00Z",
            "Ready stayed True"
        );
        // ... and then stays the same: only lastCheckedAt would move, so nothing is written.
        let u = updater(Some(s.clone()));
        let writes = status_writes(
            std::slice::from_ref(&u),
            &r,
            &[],
            &[],
            "2026-11-23T10:04:00Z",
        );
        assert!(writes.is_empty(), "{writes:?}");
    }

    #[test]
    fn problems_make_a_partial_failure() {
        let u = updater(None);
        let r = resolved(&u);
        let writes = status_writes(
            std::slice::from_ref(&u),
            &r,
            &[],
            &[(1, "registry down".into())],
            "2026-11-23T10:00:00Z",
        );
        let c = &writes[0].status["conditions"];
        assert_eq!(c[1]["type"], "Error");
        assert_eq!(c[1]["status"], "True");
        assert_eq!(c[1]["reason"], "PartialErrors");
        assert_eq!(c[2]["status"], "True");
        assert_eq!(c[2]["reason"], "ReconcileCompletedWithErrors");
    }

    #[test]
    fn resources_from_git_get_no_status() {
        let mut u = updater(None);
        u.origin = "argocd/updaters.yaml:1".into();
        let r = resolved(&u);
        assert!(status_writes(&[u], &r, &[], &[], "2026-11-23T10:00:00Z").is_empty());
    }
}
