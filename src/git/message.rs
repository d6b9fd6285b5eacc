//! What a commit says: the change groups the planner hands over, how they are regrouped per the
//! repository's `write.group`, and the commit message rendered from the user's template.
//!
//! Pure: no repository, no file system. The writer calls these functions on every attempt.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use crate::config::repository::Grouping;

/// The message used when `write.commitMessage` is not set.
///
/// Template variables: `changes` (list of `{policy, image, file, line, from, to, source,
/// revision_from, revision_to, compare_url}`, the last four empty unless the images say where
/// they were built from), `group` (the group key: repository or policy name), `repository`,
/// `policies` (distinct policy names). `changes` lists each change once: references in one file
/// that move one image from one tag to the same tag (a Deployment's container and init
/// container, say, or one field that a policy file and an Application both follow) are one
/// change, at the first one's line and policy; `policies` still names every policy.
pub const DEFAULT_COMMIT_MESSAGE: &str = "chore(images): update {{ changes | length }} image(s)
{% for c in changes %}
- {{ c.image }}: {{ c.from }} -> {{ c.to }} ({{ c.file }})
{%- if c.compare_url %}
  {{ c.compare_url }}
{%- endif %}
{%- endfor %}";

/// The trailer that makes tagpilot's commits searchable by policy
/// (`git log --grep 'Tagpilot-Policy: checkout-api'`).
pub const POLICY_TRAILER: &str = "Tagpilot-Policy";

/// One image reference moving from one tag to another, as the commit message shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Change {
    pub policy: String,
    pub image: String,
    /// Relative to the repository root.
    pub file: PathBuf,
    /// 1-based.
    pub line: usize,
    pub from: String,
    pub to: String,
    /// The policy's strategy (`semver`, `regex`, …), for pull request bodies.
    #[serde(default)]
    pub strategy: String,
    /// What changed inside the image, when the old and the new image name the same GitHub or
    /// GitLab repository and a revision each ([`crate::provenance`]): the repository's web
    /// address, the two revisions and the page comparing them. Templates see them as
    /// `c.source`, `c.revision_from`, `c.revision_to` and `c.compare_url`.
    pub source: Option<String>,
    pub revision_from: Option<String>,
    pub revision_to: Option<String>,
    pub compare_url: Option<String>,
}

/// What the planner produced for one group of changes: the files' new contents and the changes
/// they carry.
///
/// Groups are applied in the order the planner returns them, each on top of the previous one, so
/// when two groups change one file, the later group's content must already include the earlier
/// group's edits (build the groups by applying edits cumulatively). With `group: repository` the
/// writer merges all groups into one, keeping each file's last content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeGroup {
    /// The policy name (or repository name) this group belongs to.
    pub key: String,
    /// Path relative to the repository root → the whole new content of that file.
    pub files: BTreeMap<PathBuf, String>,
    pub changes: Vec<Change>,
}

/// Merges or keeps the planner's groups per `grouping`. Empty groups are dropped.
pub fn regroup(repository: &str, grouping: Grouping, groups: Vec<ChangeGroup>) -> Vec<ChangeGroup> {
    let groups = groups.into_iter().filter(|g| !g.files.is_empty());
    match grouping {
        Grouping::Policy => groups.collect(),
        Grouping::Path => {
            // Each file on its own: its last content (which carries every earlier group's edits
            // of it) and every change made to it.
            let mut by_path: BTreeMap<PathBuf, ChangeGroup> = BTreeMap::new();
            for group in groups {
                for (path, content) in group.files {
                    let entry = by_path.entry(path.clone()).or_insert_with(|| ChangeGroup {
                        key: path.to_string_lossy().replace('\\', "/"),
                        ..ChangeGroup::default()
                    });
                    entry.files.insert(path.clone(), content);
                    entry
                        .changes
                        .extend(group.changes.iter().filter(|c| c.file == path).cloned());
                }
            }
            by_path.into_values().collect()
        }
        Grouping::Repository => {
            let mut merged = ChangeGroup {
                key: repository.to_owned(),
                ..ChangeGroup::default()
            };
            for group in groups {
                merged.files.extend(group.files);
                merged.changes.extend(group.changes);
            }
            if merged.files.is_empty() {
                Vec::new()
            } else {
                vec![merged]
            }
        }
    }
}

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
    changes: &'a [Change],
    group: &'a str,
    repository: &'a str,
    policies: Vec<&'a str>,
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
    message.push_str("\n\n");
    for policy in policies {
        message.push_str(&format!("{POLICY_TRAILER}: {policy}\n"));
    }
    Ok(message)
}

/// Each change once, in the planner's order: a reader counts image moves, not the lines that
/// name an image.
fn distinct(changes: &[Change]) -> Vec<Change> {
    let mut seen = std::collections::HashSet::new();
    changes
        .iter()
        .filter(|c| seen.insert((&c.image, &c.file, &c.from, &c.to)))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(policy: &str, file: &str, from: &str, to: &str) -> Change {
        Change {
            policy: policy.into(),
            image: format!("registry.example/{policy}"),
            file: file.into(),
            line: 7,
            from: from.into(),
            to: to.into(),
            strategy: "semver".into(),
            ..Default::default()
        }
    }

    fn group(key: &str, files: &[(&str, &str)], changes: Vec<Change>) -> ChangeGroup {
        ChangeGroup {
            key: key.into(),
            files: files
                .iter()
                .map(|(p, c)| (PathBuf::from(p), c.to_string()))
                .collect(),
            changes,
        }
    }

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
    fn unknown_variable_is_an_error_not_an_empty_string() {
        let g = group("api", &[("a", "x")], vec![change("api", "a", "1", "2")]);
        let err = render_message(Some("{{ nope.field }}"), "m", &g)
            .unwrap_err()
            .to_string();
        assert!(err.contains("commitMessage"), "{err}");
    }

    #[test]
    fn regroup_by_repository_keeps_the_last_content_of_each_file() {
        let groups = vec![
            group(
                "api",
                &[("a.yaml", "api-edit")],
                vec![change("api", "a.yaml", "1", "2")],
            ),
            group("empty", &[], vec![]),
            group(
                "web",
                &[("a.yaml", "api-edit+web-edit"), ("b.yaml", "b")],
                vec![change("web", "a.yaml", "3", "4")],
            ),
        ];
        let merged = regroup("manifests", Grouping::Repository, groups.clone());
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].key, "manifests");
        assert_eq!(
            merged[0].files[&PathBuf::from("a.yaml")],
            "api-edit+web-edit"
        );
        assert_eq!(merged[0].changes.len(), 2);
        let per_policy = regroup("manifests", Grouping::Policy, groups);
        assert_eq!(
            per_policy
                .iter()
                .map(|g| g.key.as_str())
                .collect::<Vec<_>>(),
            ["api", "web"]
        );
        assert!(regroup("m", Grouping::Repository, vec![group("x", &[], vec![])]).is_empty());
    }

    #[test]
    fn regroup_by_path_gives_each_file_its_last_content_and_its_changes() {
        let groups = vec![
            group(
                "api",
                &[("a.yaml", "api-edit")],
                vec![change("api", "a.yaml", "1", "2")],
            ),
            group(
                "web",
                &[("a.yaml", "api-edit+web-edit"), ("b.yaml", "b")],
                vec![
                    change("web", "a.yaml", "3", "4"),
                    change("web", "b.yaml", "5", "6"),
                ],
            ),
        ];
        let by_path = regroup("m", Grouping::Path, groups);
        assert_eq!(
            by_path.iter().map(|g| g.key.as_str()).collect::<Vec<_>>(),
            ["a.yaml", "b.yaml"]
        );
        assert_eq!(by_path[0].files.len(), 1);
        assert_eq!(
            by_path[0].files[&PathBuf::from("a.yaml")],
            "api-edit+web-edit"
        );
        assert_eq!(by_path[0].changes.len(), 2);
        assert_eq!(by_path[1].changes.len(), 1);
    }
}
