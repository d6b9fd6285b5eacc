//! What a commit says: the commit message rendered from the user's template for one change
//! group ([`crate::change`] groups them).
//!
//! Pure: no repository, no file system. The writer calls these functions on every attempt.

use serde::Serialize;

use crate::change::{Change, ChangeGroup, TemplateChange};

/// The message used when `write.commitMessage` is not set.
///
/// Template variables: `changes` (list of `{policy, image, file, line, from, to, source,
/// revision_from, revision_to, compare_url}`, the last four empty unless the images say where
/// they were built from), `group` (the group key: repository or policy name), `repository`,
/// `policies` (distinct policy names), `applications` (the Argo CD Applications whose sources
/// contain the group's files: `{name, namespace, id, cluster, destination: {server, name,
/// namespace}, sources, files}`, see [`crate::affected::TemplateApplication`]). `changes` lists each change once: references in one file
/// that move one image from one tag to the same tag (a Deployment's container and init
/// container, say, or one field that a policy file and an Application both follow) are one
/// change, at the first one's line and policy; `policies` still names every policy.
pub const DEFAULT_COMMIT_MESSAGE: &str = "chore(images): update {{ changes | length }} image(s)
{% for c in changes %}
- {{ c.image }}: {{ c.from }} -> {{ c.to }} ({{ c.file }})
{%- if c.compare_url %}
  {{ c.compare_url }}
{%- endif %}
{%- endfor %}
{%- if applications %}

Argo CD Applications:
{%- for a in applications %}
- {{ a.id }} -> {{ a.cluster }}{% if a.destination.namespace %}, namespace {{ a.destination.namespace }}{% endif %}
{%- endfor %}
{%- endif %}";

/// The trailer that makes tagpilot's commits searchable by policy
/// (`git log --grep 'Tagpilot-Policy: checkout-api'`).
pub const POLICY_TRAILER: &str = "Tagpilot-Policy";

/// The trailer that names each Argo CD Application whose sources contain the commit's files
/// (`git log --grep 'Tagpilot-Application: argocd/shop'`), whatever the message template says.
pub const APPLICATION_TRAILER: &str = "Tagpilot-Application";

/// The trailer that names the commit a revert of tagpilot's undoes (`crate::writeback::revert`).
pub const REVERT_TRAILER: &str = "Tagpilot-Revert";

/// Why no commit message could be made from `write.commitMessage`.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("invalid `write.commitMessage` template")]
    Invalid(#[source] minijinja::Error),
    #[error("cannot render `write.commitMessage`")]
    Render(#[source] minijinja::Error),
    #[error("`write.commitMessage` rendered an empty message")]
    Empty,
}

/// Checks that a commit message template parses, for `tagpilot check`.
pub fn check_template(template: &str) -> Result<(), TemplateError> {
    let mut env = minijinja::Environment::new();
    env.add_template("commitMessage", template)
        .map(|_| ())
        .map_err(TemplateError::Invalid)
}

#[derive(Serialize)]
struct MessageContext<'a> {
    changes: &'a [TemplateChange<'a>],
    group: &'a str,
    repository: &'a str,
    policies: Vec<&'a str>,
    applications: Vec<crate::affected::TemplateApplication<'a>>,
}

/// Renders the commit message for one group and appends a `Tagpilot-Policy:` trailer per
/// distinct policy. The result is a well-formed git message: no trailing blank lines, a newline
/// at the end.
pub fn render_message(
    template: Option<&str>,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, TemplateError> {
    let mut policies: Vec<&str> = group.changes.iter().map(|c| c.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template("commitMessage", template.unwrap_or(DEFAULT_COMMIT_MESSAGE))
        .map_err(TemplateError::Invalid)?;
    let changes = distinct(&group.changes);
    let context = MessageContext {
        changes: &changes,
        group: &group.key,
        repository,
        policies: policies.clone(),
        applications: group
            .applications
            .iter()
            .map(|a| a.template_view())
            .collect(),
    };
    let body = env
        .get_template("commitMessage")
        .and_then(|t| t.render(minijinja::value::Serde(&context)))
        .map_err(TemplateError::Render)?;
    let body = body.trim_end();
    if body.trim().is_empty() {
        return Err(TemplateError::Empty);
    }
    let mut message = String::from(body);
    // A message that ends in trailers of tagpilot's own (a revert's `Tagpilot-Revert:`) gets the
    // policy trailers in the same block: git reads trailers from the last paragraph only.
    message.push_str(if ends_in_own_trailers(body) {
        "\n"
    } else {
        "\n\n"
    });
    for policy in policies {
        message.push_str(&format!("{POLICY_TRAILER}: {policy}\n"));
    }
    for app in &group.applications {
        message.push_str(&format!("{APPLICATION_TRAILER}: {}\n", app.id()));
    }
    Ok(message)
}

/// Whether the last paragraph of `body` is only `Tagpilot-…: …` trailer lines.
fn ends_in_own_trailers(body: &str) -> bool {
    let last = body.rsplit("\n\n").next().unwrap_or_default();
    !last.trim().is_empty()
        && body.contains("\n\n")
        && last.lines().all(|line| {
            line.strip_prefix("Tagpilot-")
                .and_then(|rest| rest.split_once(": "))
                .is_some_and(|(token, _)| {
                    !token.is_empty()
                        && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                })
        })
}

/// Each change once, in the planner's order: a reader counts image moves, not the lines that
/// name an image.
fn distinct(changes: &[Change]) -> Vec<TemplateChange<'_>> {
    let mut seen = std::collections::HashSet::new();
    changes
        .iter()
        .filter(|c| seen.insert((&c.image, &c.file, &c.from, &c.to)))
        .map(Change::template_view)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::fixtures::{change, group};

    #[test]
    fn default_message_lists_changes_and_ends_in_trailers() {
        let g = group(
            "manifests",
            &[("a.yaml", "x")],
            vec![
                change("api", "apps/a.yaml", "1.0.0", "1.1.0"),
                change("web", "b.yaml", "2", "3"),
            ],
        );
        let message = render_message(None, "manifests", &g).unwrap();
        assert_eq!(
            message,
            "chore(images): update 2 image(s)\n\n\
             - registry.example/api: 1.0.0 -> 1.1.0 (apps/a.yaml)\n\
             - registry.example/web: 2 -> 3 (b.yaml)\n\n\
             Tagpilot-Policy: api\nTagpilot-Policy: web\n"
        );
    }

    #[test]
    fn several_references_to_one_image_move_in_one_file_are_listed_once() {
        let at = |line| Change {
            line,
            ..change("api", "apps/a.yaml", "1.0.0", "1.1.0")
        };
        let g = group(
            "api",
            &[("apps/a.yaml", "x")],
            vec![
                at(7),
                at(20),
                // Another source following the same field: the same move.
                Change {
                    policy: "web/api".into(),
                    ..at(7)
                },
                // The same move in another file is another change.
                change("api", "apps/b.yaml", "1.0.0", "1.1.0"),
            ],
        );
        let message = render_message(None, "manifests", &g).unwrap();
        assert_eq!(
            message,
            "chore(images): update 2 image(s)\n\n\
             - registry.example/api: 1.0.0 -> 1.1.0 (apps/a.yaml)\n\
             - registry.example/api: 1.0.0 -> 1.1.0 (apps/b.yaml)\n\n\
             Tagpilot-Policy: api\nTagpilot-Policy: web/api\n"
        );
        let lines = render_message(
            Some("{% for c in changes %}{{ c.line }} {% endfor %}"),
            "m",
            &g,
        )
        .unwrap();
        assert_eq!(
            lines,
            "7 7\n\nTagpilot-Policy: api\nTagpilot-Policy: web/api\n"
        );
    }

    #[test]
    fn custom_template_sees_group_repository_and_policies() {
        let g = group(
            "api",
            &[("a", "x")],
            vec![change("api", "a", "1", "2"), change("api", "b", "1", "2")],
        );
        let message = render_message(
            Some("{{ repository }}/{{ group }}: {{ policies | join(',') }}\n\n"),
            "m",
            &g,
        )
        .unwrap();
        assert_eq!(message, "m/api: api\n\nTagpilot-Policy: api\n");
    }

    #[test]
    fn a_message_ending_in_its_own_tagpilot_trailers_gets_the_policy_trailers_in_that_block() {
        let g = group("api", &[("a", "x")], vec![change("api", "a", "2", "1")]);
        let message = render_message(
            Some("revert: api\n\nwhy\n\nTagpilot-Revert: abc123\n"),
            "m",
            &g,
        )
        .unwrap();
        assert_eq!(
            message,
            "revert: api\n\nwhy\n\nTagpilot-Revert: abc123\nTagpilot-Policy: api\n"
        );
        // Other trailers, or none, keep the policy trailers in a block of their own.
        let message = render_message(Some("x\n\nSigned-off-by: a <a@b>"), "m", &g).unwrap();
        assert_eq!(
            message,
            "x\n\nSigned-off-by: a <a@b>\n\nTagpilot-Policy: api\n"
        );
        let message = render_message(Some("Tagpilot-Revert: abc"), "m", &g).unwrap();
        assert_eq!(message, "Tagpilot-Revert: abc\n\nTagpilot-Policy: api\n");
    }

    #[test]
    fn the_applications_a_group_deploys_are_named_with_their_destinations() {
        use crate::affected::AffectedApplication;
        use crate::application::Destination;
        let mut g = group(
            "api",
            &[("apps/api/a.yaml", "x")],
            vec![change("api", "apps/api/a.yaml", "1", "2")],
        );
        g.applications = vec![
            AffectedApplication {
                name: "shop-prod".into(),
                namespace: Some("argocd".into()),
                destination: Destination {
                    server: Some("https://prod.example:6443".into()),
                    namespace: Some("shop".into()),
                    ..Default::default()
                },
                sources: vec![2],
                files: vec!["apps/api/a.yaml".into()],
                rendered: None,
            },
            AffectedApplication {
                name: "shop-dev".into(),
                namespace: None,
                destination: Destination::default(),
                sources: vec![1],
                files: vec!["apps/api/a.yaml".into()],
                rendered: None,
            },
        ];
        let message = render_message(None, "m", &g).unwrap();
        assert_eq!(
            message,
            "chore(images): update 1 image(s)\n\n\
             - registry.example/api: 1 -> 2 (apps/api/a.yaml)\n\n\
             Argo CD Applications:\n\
             - argocd/shop-prod -> https://prod.example:6443, namespace shop\n\
             - shop-dev -> in-cluster\n\n\
             Tagpilot-Policy: api\n\
             Tagpilot-Application: argocd/shop-prod\nTagpilot-Application: shop-dev\n"
        );
        // A template of the user's sees them too, and the trailers name them whatever it says.
        let message = render_message(
            Some("{% for a in applications %}{{ a.name }}@{{ a.destination.namespace }}/{{ a.destination.name }} {% endfor %}"),
            "m",
            &g,
        )
        .unwrap();
        assert!(
            message.starts_with("shop-prod@shop/ shop-dev@/\n\n"),
            "{message}"
        );
        assert!(
            message.ends_with("Tagpilot-Application: shop-dev\n"),
            "{message}"
        );
    }

    #[test]
    fn unknown_variable_is_an_error_not_an_empty_string() {
        let g = group("api", &[("a", "x")], vec![change("api", "a", "1", "2")]);
        let err = render_message(Some("{{ nope.field }}"), "m", &g)
            .unwrap_err()
            .to_string();
        assert!(err.contains("commitMessage"), "{err}");
    }
}
