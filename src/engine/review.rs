//! The rendered diff of a target's change groups (issue 21): each Application a group deploys
//! ([`crate::affected`]) rendered on the base tree and on the tree the group leaves
//! ([`crate::render`]), for the pull-request comment (`write.renderedDiff`) and for
//! `tagpilot plan --diff --rendered`. A render that fails is said in its Application's result
//! and never holds the change.

use crate::affected::Rendered;
use crate::application::Application;
use crate::change::ChangeGroup;
use crate::files::Files;
use crate::plan::{DiffTarget, TargetDiff};
use crate::render::{self, Tools};

/// Renders every Application of every group before and after the group's change, filling in
/// each one's `rendered`. The base is written out once for all groups.
pub(super) fn render_groups(
    tools: &Tools,
    deployers: &[Application],
    url: &str,
    files: &dyn Files,
    groups: &mut [ChangeGroup],
) {
    if groups.iter().all(|g| g.applications.is_empty()) {
        return;
    }
    crate::files::blocking(|| {
        let before = render::materialise(files, &Default::default());
        for group in groups.iter_mut().filter(|g| !g.applications.is_empty()) {
            let after = render::materialise(files, &group.files);
            for affected in &mut group.applications {
                let started = crate::clock::Stopwatch::start();
                let app = deployers.iter().find(|a| {
                    a.metadata.name == affected.name && a.metadata.namespace == affected.namespace
                });
                let rendered = match (app, &before, &after) {
                    (Some(app), Ok(before), Ok(after)) => render::render_change(
                        tools,
                        &render::Change {
                            app,
                            url,
                            before: before.path(),
                            after: after.path(),
                        },
                    ),
                    (None, _, _) => failed("the Application was not read this cycle"),
                    (_, Err(e), _) | (_, _, Err(e)) => failed(&crate::error_chain::chain(e)),
                };
                tracing::debug!(
                    application = %affected.id(),
                    group = %group.key,
                    took_ms = started.elapsed().as_millis() as u64,
                    "rendered"
                );
                affected.rendered = Some(Box::new(rendered));
            }
        }
    });
}

fn failed(reason: &str) -> Rendered {
    Rendered {
        failure: Some(reason.to_owned()),
        ..Rendered::default()
    }
}

/// The rendered resources of `groups` as diffs for `tagpilot plan --diff --rendered`: each
/// changed resource of each Application, and each Application that could not be rendered.
pub(super) fn rendered_diffs(repository: &str, groups: &[ChangeGroup]) -> Vec<TargetDiff> {
    let mut out = Vec::new();
    for group in groups {
        for app in &group.applications {
            let Some(rendered) = &app.rendered else {
                continue;
            };
            for note in &rendered.notes {
                out.push(TargetDiff {
                    target: DiffTarget::RenderNote {
                        repository: repository.to_owned(),
                        group: group.key.clone(),
                        application: app.id(),
                        note: note.clone(),
                    },
                    original: None,
                    updated: String::new(),
                });
            }
            if let Some(reason) = &rendered.failure {
                out.push(TargetDiff {
                    target: DiffTarget::RenderFailed {
                        repository: repository.to_owned(),
                        group: group.key.clone(),
                        application: app.id(),
                        reason: reason.clone(),
                    },
                    original: None,
                    updated: String::new(),
                });
            }
            for r in &rendered.resources {
                out.push(TargetDiff {
                    target: DiffTarget::Rendered {
                        repository: repository.to_owned(),
                        group: group.key.clone(),
                        application: app.id(),
                        resource: r.header(),
                    },
                    original: r.before.clone(),
                    updated: r.after.clone().unwrap_or_default(),
                });
            }
        }
    }
    out
}
