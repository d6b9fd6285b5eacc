//! The review comment a pull request gets with `write.renderedDiff`: for each Argo CD
//! Application the change deploys, a collapsible section with the diff of each rendered
//! resource that changes (Secret data redacted, see [`crate::render`]), or why it could not be
//! rendered. Cut to a size the forge takes, saying how much was cut; found again by its hidden
//! marker and updated in place.
//!
//! Pure: a change group in, text out.

use crate::change::ChangeGroup;
use crate::render;

use super::ForgeKind;

/// The longest comment tagpilot writes, in bytes: under GitHub's 65,536 characters (GitLab
/// takes a million), with room for the closing lines.
pub const MAX_COMMENT: usize = 60_000;

/// The hidden line that makes a comment tagpilot's review of `group`.
pub fn marker(group: &str) -> String {
    format!(
        "<!-- tagpilot:rendered-diff group={} -->",
        group.replace("--", "- -")
    )
}

/// Whether `body` is tagpilot's review comment for `group`.
pub fn is_review(body: &str, group: &str) -> bool {
    body.contains(&marker(group))
}

/// The review comment for `group`, at most `limit` bytes; `None` when none of its Applications
/// was rendered.
pub fn comment(kind: ForgeKind, group: &ChangeGroup, limit: usize) -> Option<String> {
    let rendered: Vec<_> = group
        .applications
        .iter()
        .filter_map(|a| Some((a, a.rendered.as_deref()?)))
        .collect();
    if rendered.is_empty() {
        return None;
    }
    let mut out = format!(
        "### What this {} changes in the Argo CD Applications\n\n\
         tagpilot rendered each Application before and after the change, as Argo CD would.\n\n",
        kind.noun()
    );
    let end = marker(&group.key);
    // Room for the closing tags, the lines on what was cut (Applications: three names of at
    // most 100 characters), and the marker.
    let budget = limit.saturating_sub(end.len() + 600);
    let (mut cut_resources, mut cut_lines) = (0usize, 0usize);
    // Applications with no room left for even their header: named at the end, never silently
    // dropped.
    let mut cut_apps: Vec<String> = Vec::new();
    for (app, r) in &rendered {
        let destination = match &app.destination.namespace {
            Some(ns) => format!("{}, namespace `{ns}`", app.cluster()),
            None => app.cluster().to_owned(),
        };
        let summary = match (&r.failure, r.resources.len()) {
            (Some(_), _) => "could not be rendered".to_owned(),
            (None, 0) => "renders the same".to_owned(),
            (None, 1) => "1 resource changes".to_owned(),
            (None, n) => format!("{n} resources change"),
        };
        let head = format!(
            "<details><summary><code>{}</code> → {destination}: {summary}</summary>\n\n",
            escape(&app.id())
        );
        if out.len() + head.len() + 20 > budget {
            cut_apps.push(app.id());
            cut_resources += r.resources.len();
            cut_lines += r
                .resources
                .iter()
                .map(|x| lines(&render::unified(x)))
                .sum::<usize>();
            continue;
        }
        out.push_str(&head);
        for note in &r.notes {
            out.push_str(&format!(
                "> Rendered without Argo CD's {}.\n\n",
                escape(note).replace("is not applied", "(not applied)")
            ));
        }
        if let Some(failure) = &r.failure {
            out.push_str(&format!(
                "The render failed; the change is proposed all the same:\n\n```\n{}\n```\n\n",
                failure.replace("```", "'''")
            ));
        }
        for resource in &r.resources {
            let diff = render::unified(resource);
            let section = format!(
                "#### `{}`\n\n```diff\n{}```\n\n",
                escape(&resource.header()),
                diff.replace("```", "'''")
            );
            if out.len() + section.len() + "</details>\n\n".len() > budget {
                cut_resources += 1;
                cut_lines += lines(&diff);
                continue;
            }
            out.push_str(&section);
        }
        out.push_str("</details>\n\n");
    }
    if !cut_apps.is_empty() {
        out.push_str(&cut_applications(&cut_apps));
    }
    if cut_resources > 0 {
        out.push_str(&format!(
            "_{cut_resources} resource diff(s) ({cut_lines} lines) were left out to keep this \
             comment under {limit} bytes; `tagpilot plan --diff --rendered` shows them all._\n\n"
        ));
    }
    out.push_str(&end);
    out.push('\n');
    Some(out)
}

/// The line on Applications with no section: how many, and the first few by name (the room
/// kept at the end holds no more).
fn cut_applications(ids: &[String]) -> String {
    const NAMED: usize = 3;
    let mut named: Vec<String> = ids
        .iter()
        .take(NAMED)
        .map(|id| {
            let short: String = id.chars().take(100).collect();
            let more = if short.len() < id.len() { "…" } else { "" };
            format!("`{}{more}`", escape(&short).replace('`', "'"))
        })
        .collect();
    if ids.len() > NAMED {
        named.push("…".to_owned());
    }
    format!(
        "_{} more Application(s) not shown: {}._\n\n",
        ids.len(),
        named.join(", ")
    )
}

fn lines(text: &str) -> usize {
    text.lines().count()
}

/// Text inside HTML in Markdown: no tags, no marker look-alikes.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affected::{AffectedApplication, Rendered, RenderedResource};

    fn resource(name: &str, lines: usize) -> RenderedResource {
        let body = |v: &str| {
            (0..lines)
                .map(|i| format!("  k{i}: {v}\n"))
                .collect::<String>()
        };
        RenderedResource {
            kind: "ConfigMap".into(),
            namespace: Some("shop".into()),
            name: name.into(),
            before: Some(format!("data:\n{}", body("a"))),
            after: Some(format!("data:\n{}", body("b"))),
        }
    }

    fn group(resources: Vec<RenderedResource>, failure: Option<&str>) -> ChangeGroup {
        ChangeGroup {
            key: "api".into(),
            applications: vec![AffectedApplication {
                name: "shop".into(),
                namespace: Some("argocd".into()),
                rendered: Some(Box::new(Rendered {
                    resources,
                    failure: failure.map(str::to_owned),
                    ..Rendered::default()
                })),
                ..AffectedApplication::default()
            }],
            ..ChangeGroup::default()
        }
    }

    #[test]
    fn one_section_per_application_a_header_per_resource_and_the_marker() {
        let text = comment(
            ForgeKind::GitLab,
            &group(vec![resource("a", 2)], None),
            MAX_COMMENT,
        )
        .unwrap();
        assert!(text.contains("this merge request changes"), "{text}");
        assert!(
            text.contains(
                "<details><summary><code>argocd/shop</code> → in-cluster: 1 resource changes</summary>"
            ),
            "{text}"
        );
        assert!(text.contains("#### `ConfigMap/shop/a`\n\n```diff\n--- before\n+++ after\n"));
        assert!(
            text.contains("-  k0: a\n-  k1: a\n+  k0: b\n+  k1: b\n"),
            "{text}"
        );
        assert!(is_review(&text, "api") && !is_review(&text, "web"));
        assert!(comment(ForgeKind::GitHub, &ChangeGroup::default(), MAX_COMMENT).is_none());
    }

    #[test]
    fn a_comment_over_the_limit_is_cut_with_a_count_of_what_was_left_out() {
        let many: Vec<_> = (0..50).map(|i| resource(&format!("cm{i}"), 40)).collect();
        let text = comment(ForgeKind::GitHub, &group(many, None), 8_000).unwrap();
        assert!(text.len() <= 8_000, "{}", text.len());
        assert!(text.contains("#### `ConfigMap/shop/cm0`"));
        assert!(!text.contains("#### `ConfigMap/shop/cm49`"));
        let shown = text.matches("#### ").count();
        assert!(
            text.contains(&format!(
                "_{} resource diff(s) ({} lines) were left out",
                50 - shown,
                (50 - shown) * lines(&render::unified(&resource("x", 40)))
            )),
            "{text}"
        );
        assert!(text.trim_end().ends_with(&marker("api")));
    }

    #[test]
    fn applications_left_out_whole_are_counted_and_named() {
        let mut g = group(vec![resource("a", 2)], None);
        for i in 0..200 {
            g.applications.push(AffectedApplication {
                name: format!("app{i:03}"),
                namespace: Some("argocd".into()),
                rendered: Some(Box::new(Rendered {
                    resources: vec![resource("a", 2)],
                    ..Rendered::default()
                })),
                ..AffectedApplication::default()
            });
        }
        let text = comment(ForgeKind::GitHub, &g, 8_000).unwrap();
        assert!(text.len() <= 8_000, "{}", text.len());
        let shown = text.matches("<details>").count();
        assert!(shown > 1 && shown < 201, "{shown}");
        // Every Application is either shown or counted, and the first left out are named.
        let first = |k: usize| format!("`argocd/app{:03}`", shown - 1 + k);
        assert!(
            text.contains(&format!(
                "_{} more Application(s) not shown: {}, {}, {}, …._\n",
                201 - shown,
                first(0),
                first(1),
                first(2)
            )),
            "{text}"
        );
        assert!(text.trim_end().ends_with(&marker("api")));
    }

    #[test]
    fn a_failed_render_is_said_and_does_not_hide_the_others() {
        let text = comment(
            ForgeKind::GitHub,
            &group(
                Vec::new(),
                Some("source 1 (path apps/api): `helm` was not found on PATH"),
            ),
            MAX_COMMENT,
        )
        .unwrap();
        assert!(text.contains("could not be rendered"), "{text}");
        assert!(text.contains("`helm` was not found on PATH"), "{text}");
    }

    #[test]
    fn options_the_render_does_not_apply_are_named() {
        let mut g = group(vec![resource("a", 1)], None);
        g.applications[0].rendered.as_mut().unwrap().notes =
            vec!["source 1: kustomize.patches is not applied".into()];
        let text = comment(ForgeKind::GitHub, &g, MAX_COMMENT).unwrap();
        assert!(
            text.contains(
                "> Rendered without Argo CD's source 1: kustomize.patches (not applied).\n"
            ),
            "{text}"
        );
    }
}
