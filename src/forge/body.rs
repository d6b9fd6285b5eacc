//! What a pull request says: its branch name and title (from the user's templates) and its body
//! (a Markdown table of the changes, ending in the [`Marker`]).
//!
//! Pure: strings in, strings out.

use serde::Serialize;
use sha2::Digest as _;

use std::collections::BTreeMap;

use super::{ForgeKind, Marker, SourceCommits};
use crate::change::{Change, ChangeGroup, TemplateChange};
use crate::git;
use crate::provenance::{SourceChange, SourceForge, SourceRepository};

/// Why a `write.branch` or `write.title` template gives no usable text.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("invalid `write.{name}` template")]
    Invalid {
        name: &'static str,
        source: minijinja::Error,
    },
    #[error("cannot render `write.{name}` for group `{group}`")]
    Render {
        name: &'static str,
        group: String,
        source: minijinja::Error,
    },
    #[error("`write.{name}` rendered nothing for group `{group}`")]
    Empty { name: &'static str, group: String },
    #[error(
        "`write.branch` gives `{branch}` for group `{group}`, which is not a valid branch name"
    )]
    InvalidBranch { branch: String, group: String },
    #[error(
        "`write.branch` gives the base branch `{base}`; pull requests need a branch tagpilot owns"
    )]
    BaseBranch { base: String },
    #[error(transparent)]
    Labels(#[from] super::labels::LabelError),
}

/// The branch used when `write.branch` is not set in pull-request mode.
pub const DEFAULT_BRANCH: &str = "tagpilot/{{ group }}";

/// The title used when `write.title` is not set. Variables as for the branch: `group`,
/// `repository`, `changes` (list of `{policy, image, file, line, from, to, strategy}`, as
/// [`Change::template_view`] shows them), `policies`.
pub const DEFAULT_TITLE: &str = "chore(images): update {{ group }}\
{% if changes | length == 1 %} to {{ changes[0].to }}{% endif %}";

/// Names what a group proposes: the images and the tags they move to. Two runs proposing the
/// same tags for the same images get the same id, so a proposal a reviewer declined is
/// recognised until a newer tag arrives.
pub fn proposal_id(changes: &[Change]) -> String {
    let mut lines: Vec<String> = changes
        .iter()
        .map(|c| format!("{}\t{}", c.image, c.to))
        .collect();
    lines.sort();
    lines.dedup();
    let hash = sha2::Sha256::digest(lines.join("\n").as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

#[derive(Serialize)]
struct TemplateContext<'a> {
    group: &'a str,
    repository: &'a str,
    changes: Vec<TemplateChange<'a>>,
    policies: Vec<&'a str>,
    applications: Vec<crate::affected::TemplateApplication<'a>>,
}

fn render(
    name: &'static str,
    template: &str,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, TemplateError> {
    let mut policies: Vec<&str> = group.changes.iter().map(|c| c.policy.as_str()).collect();
    policies.sort_unstable();
    policies.dedup();
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template(name, template)
        .map_err(|source| TemplateError::Invalid { name, source })?;
    let context = TemplateContext {
        group: &group.key,
        repository,
        changes: group.changes.iter().map(Change::template_view).collect(),
        policies,
        applications: group
            .applications
            .iter()
            .map(|a| a.template_view())
            .collect(),
    };
    let text = env
        .get_template(name)
        .and_then(|t| t.render(minijinja::value::Serde(&context)))
        .map_err(|source| TemplateError::Render {
            name,
            group: group.key.clone(),
            source,
        })?;
    let text = text.trim().to_owned();
    if text.is_empty() {
        return Err(TemplateError::Empty {
            name,
            group: group.key.clone(),
        });
    }
    Ok(text)
}

/// The branch for `group` from the `write.branch` template; it must be a valid branch name.
pub fn branch_name(
    template: Option<&str>,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, TemplateError> {
    let name = render(
        "branch",
        template.unwrap_or(DEFAULT_BRANCH),
        repository,
        group,
    )?;
    if !git2::Reference::is_valid_name(&format!("refs/heads/{name}")) {
        return Err(TemplateError::InvalidBranch {
            branch: name,
            group: group.key.clone(),
        });
    }
    Ok(name)
}

/// The pull request title from the `write.title` template.
pub fn title(
    template: Option<&str>,
    repository: &str,
    group: &ChangeGroup,
) -> Result<String, TemplateError> {
    let title = render(
        "title",
        template.unwrap_or(DEFAULT_TITLE),
        repository,
        group,
    )?;
    // A title is one line; a template with a trailing `{% for %}` should not break the forge.
    Ok(title.lines().next().unwrap_or_default().to_owned())
}

/// The pull request body: a sentence, the table of changes, and the marker; in the forge's
/// words (a merge request on GitLab).
pub fn body(
    kind: ForgeKind,
    repository: &str,
    base: &str,
    group: &ChangeGroup,
    source_commits: &BTreeMap<String, SourceCommits>,
    marker: &Marker,
) -> String {
    let mut out = format!(
        "tagpilot proposes {} in `{}` (base `{}`):\n\n",
        if group.changes.len() == 1 {
            "this image update".to_owned()
        } else {
            format!("these {} image updates", group.changes.len())
        },
        cell(repository),
        cell(base),
    );
    out.push_str("| Image | From | To | File | Policy | Strategy |\n");
    out.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for c in &group.changes {
        out.push_str(&format!(
            "| `{}` | `{}` | `{}` | `{}:{}` | `{}` | {} |\n",
            cell(&c.image),
            cell(&c.from),
            cell(&c.to),
            cell(&c.file.replace('\\', "/")),
            c.line,
            cell(&c.policy),
            cell(c.strategy),
        ));
    }
    out.push_str(&version_labels(group));
    out.push_str(&applications_section(group));
    // What changed inside the images, where both images say (see `crate::provenance`).
    let compared: Vec<(&Change, &SourceChange)> = group
        .changes
        .iter()
        .filter_map(|c| Some((c, c.source.as_deref()?)))
        .collect();
    if !compared.is_empty() {
        out.push_str("\n**What changed in the source**\n\n");
        let mut seen = Vec::new();
        for (c, s) in compared {
            let (url, from, to) = (&s.compare_url, &s.revision_from, &s.revision_to);
            if seen.contains(&url) {
                continue;
            }
            seen.push(url);
            out.push_str(&format!(
                "- `{}` `{}` → `{}`: [{}...{}]({url})\n",
                cell(&c.image),
                cell(&c.from),
                cell(&c.to),
                short_revision(from),
                short_revision(to),
            ));
            if let Some(commits) = source_commits.get(url) {
                for subject in &commits.subjects {
                    out.push_str(&format!("  - {}\n", inline(subject)));
                }
                let more = commits.total.saturating_sub(commits.subjects.len());
                if more > 0 {
                    out.push_str(&format!("  - and {more} more\n"));
                }
            }
        }
    }
    promotion_evidence(&mut out, group);
    out.push_str(&format!(
        "\nA newer tag updates this {} in place. Commits pushed here by anyone else stop \
         tagpilot from updating it.\n\n",
        kind.noun()
    ));
    out.push_str(&marker.render());
    out.push('\n');
    out
}

/// The version labels that move with the images (`versionLabels`), each once: a reviewer sees
/// every line the pull request changes, not only the images'. Empty when there are none.
fn version_labels(group: &ChangeGroup) -> String {
    let mut lines: Vec<String> = Vec::new();
    for c in &group.changes {
        for l in &c.labels {
            let line = format!(
                "- `{}:{}` {}: `{}` → `{}`\n",
                cell(&c.file.replace('\\', "/")),
                l.line,
                inline(&l.label),
                cell(&l.from),
                cell(&l.to),
            );
            if !lines.contains(&line) {
                lines.push(line);
            }
        }
    }
    if lines.is_empty() {
        return String::new();
    }
    format!("\n**Version labels that follow**\n\n{}", lines.concat())
}

/// Why each promotion takes its tag (issue 20): where the tag ran, since when, how long it
/// stayed healthy, its verification, and the compare link of what changed in the source. The
/// link needs the images' provenance labels; where they are missing the evidence says so
/// rather than leaving the reviewer to wonder.
fn promotion_evidence(out: &mut String, group: &ChangeGroup) {
    let promoted: Vec<&Change> = group
        .changes
        .iter()
        .filter(|c| c.promotion.is_some())
        .collect();
    if promoted.is_empty() {
        return;
    }
    out.push_str("\n**Promotion evidence**\n\n");
    for c in promoted {
        out.push_str(&format!(
            "- `{}` `{}` → `{}` in `{}:{}`, promoted from:\n",
            cell(&c.image),
            cell(&c.from),
            cell(&c.to),
            cell(&c.file.replace('\\', "/")),
            c.line
        ));
        for e in c.promotion.iter().flat_map(|p| &p.upstreams) {
            let since = e
                .since
                .as_deref()
                .map(|s| format!(" since {s}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "  - {} runs `{}`{since}; healthy for {}; {}\n",
                inline(&e.upstream),
                cell(&e.tag),
                e.healthy_for,
                inline(&e.verification),
            ));
        }
        match c.source.as_deref() {
            Some(s) => out.push_str(&format!(
                "  - compare: [{}...{}]({})\n",
                short_revision(&s.revision_from),
                short_revision(&s.revision_to),
                s.compare_url
            )),
            None => out.push_str(
                "  - no compare link: the images do not both carry \
                 `org.opencontainers.image.source` (a GitHub or GitLab repository) and \
                 `org.opencontainers.image.revision`\n",
            ),
        }
    }
}

/// The Argo CD Applications whose sources contain the group's files, with where each deploys
/// to; nothing when none is known.
pub(super) fn applications_section(group: &ChangeGroup) -> String {
    if group.applications.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n**Argo CD Applications** that deploy these files\n\n\
         | Application | Cluster | Namespace | Sources | Files |\n\
         | --- | --- | --- | --- | --- |\n",
    );
    for a in &group.applications {
        let files: Vec<String> = a.files.iter().map(|f| format!("`{}`", cell(f))).collect();
        let sources: Vec<String> = a.sources.iter().map(usize::to_string).collect();
        out.push_str(&format!(
            "| `{}` | `{}` | {} | {} | {} |\n",
            cell(&a.id()),
            cell(a.cluster()),
            a.destination
                .namespace
                .as_deref()
                .map_or_else(|| "—".to_owned(), |ns| format!("`{}`", cell(ns))),
            sources.join(", "),
            files.join(" "),
        ));
    }
    out
}

/// A commit id as people read it: its first 7 characters; a tag or branch name whole.
fn short_revision(r: &str) -> &str {
    if r.len() >= 40 && r.chars().all(|c| c.is_ascii_hexdigit()) {
        &r[..7]
    } else {
        r
    }
}

/// A commit subject inside a list item: one line, no Markdown that could break the body out of
/// the list (a leading `#` or `>`, an HTML comment that could fake tagpilot's marker).
fn inline(subject: &str) -> String {
    let one_line = subject.lines().next().unwrap_or_default().trim();
    let safe = one_line.replace("<!--", "&lt;!--").replace("-->", "--&gt;");
    match safe.chars().next() {
        Some('#' | '>' | '-' | '*' | '+') => format!("\\{safe}"),
        _ => safe,
    }
}

/// Checks the pull-request templates of a repository (for `validate` and `tagpilot check`).
pub fn check_templates(write: &git::WriteConfig, base: &str) -> Result<(), TemplateError> {
    let sample = ChangeGroup {
        key: "example".into(),
        files: Default::default(),
        changes: vec![Change {
            policy: "example".into(),
            image: "registry.example/app".into(),
            file: "apps/app.yaml".into(),
            line: 1,
            from: "1.0.0".into(),
            to: "1.1.0".into(),
            strategy: "semver",
            source: Some(Box::new(SourceChange {
                repository: SourceRepository {
                    forge: SourceForge::GitHub,
                    host: "github.com".into(),
                    path: "acme/app".into(),
                },
                source: "https://github.com/acme/app".into(),
                revision_from: "0a1b2c3".into(),
                revision_to: "4d5e6f7".into(),
                compare_url: "https://github.com/acme/app/compare/0a1b2c3...4d5e6f7".into(),
            })),
            ..Change::default()
        }],
        applications: vec![crate::affected::AffectedApplication {
            name: "example".into(),
            namespace: Some("argocd".into()),
            destination: crate::application::Destination {
                server: Some("https://kubernetes.default.svc".into()),
                name: Some("in-cluster".into()),
                namespace: Some("example".into()),
            },
            sources: vec![1],
            files: vec!["apps/app.yaml".into()],
            rendered: None,
        }],
    };
    let branch = branch_name(write.branch.as_deref(), "example", &sample)?;
    if branch == base {
        return Err(TemplateError::BaseBranch {
            base: base.to_owned(),
        });
    }
    title(write.title.as_deref(), "example", &sample)?;
    super::labels::check(&write.labels, &sample)?;
    Ok(())
}

/// Table cells cannot hold `|`, newlines or backticks inside code spans.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r', '`'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(image: &str, to: &str) -> Change {
        Change {
            policy: "api".into(),
            image: image.into(),
            file: "apps/a.yaml".into(),
            line: 3,
            from: "1.0.0".into(),
            to: to.into(),
            strategy: "semver",
            ..Default::default()
        }
    }

    fn group(key: &str, changes: Vec<Change>) -> ChangeGroup {
        ChangeGroup {
            applications: Vec::new(),
            key: key.into(),
            files: Default::default(),
            changes,
        }
    }

    #[test]
    fn the_body_lists_the_version_labels_that_follow_the_images_once() {
        let label = crate::change::LabelChange {
            label: "Deployment/api metadata.labels app.kubernetes.io/version".into(),
            line: 6,
            from: "1.0.0".into(),
            to: "1.2.0".into(),
        };
        let mut c = change("r/api", "1.2.0");
        c.labels = vec![label];
        let g = group("api", vec![c.clone(), c]);
        let marker = Marker {
            group: "api".into(),
            proposal: "1".into(),
            head: "2".into(),
            noted: None,
        };
        let text = body(
            ForgeKind::GitHub,
            "m",
            "main",
            &g,
            &BTreeMap::new(),
            &marker,
        );
        let want = "\n**Version labels that follow**\n\n- `apps/a.yaml:6` Deployment/api metadata.labels app.kubernetes.io/version: `1.0.0` → `1.2.0`\n\n";
        assert!(text.contains(want), "{text}");
        assert_eq!(text.matches("app.kubernetes.io/version").count(), 1);
        let plain = body(
            ForgeKind::GitHub,
            "m",
            "main",
            &group("api", vec![change("r/api", "1.2.0")]),
            &BTreeMap::new(),
            &marker,
        );
        assert!(!plain.contains("Version labels"), "{plain}");
    }

    #[test]
    fn a_promotion_carries_its_evidence() {
        let mut c = change("r/api", "1.2.0");
        c.promotion = Some(Box::new(crate::change::PromotionEvidence {
            upstreams: vec![crate::change::UpstreamEvidence {
                upstream: "application argocd/shop-staging".into(),
                tag: "1.2.0".into(),
                since: Some("2026-11-25T08:00:00Z".into()),
                healthy_for: "2h 5m".into(),
                verification: "verified at 2026-11-25T08:10:00Z".into(),
                healthy_since: None,
            }],
        }));
        let marker = crate::forge::marker::Marker {
            group: "api".into(),
            proposal: "p".into(),
            head: "0".repeat(40),
            noted: None,
        };
        let text = body(
            ForgeKind::GitHub,
            "manifests",
            "main",
            &group("api", vec![c, change("r/web", "2.0.0")]),
            &BTreeMap::new(),
            &marker,
        );
        assert!(text.contains("**Promotion evidence**"), "{text}");
        assert!(
            text.contains(
                "- `r/api` `1.0.0` → `1.2.0` in `apps/a.yaml:3`, promoted from:\n  - application \
                 argocd/shop-staging runs `1.2.0` since 2026-11-25T08:00:00Z; healthy for 2h 5m; \
                 verified at 2026-11-25T08:10:00Z\n  - no compare link: the images do not both \
                 carry `org.opencontainers.image.source` (a GitHub or GitLab repository) and \
                 `org.opencontainers.image.revision`\n"
            ),
            "{text}"
        );
        assert!(!text.contains("`r/web` `1.0.0` → `2.0.0` in"), "{text}");
    }

    #[test]
    fn proposal_id_names_images_and_tags_not_order_or_files() {
        let a = proposal_id(&[change("r/api", "1.2.0"), change("r/web", "2.0.0")]);
        let b = proposal_id(&[change("r/web", "2.0.0"), change("r/api", "1.2.0")]);
        assert_eq!(a, b);
        assert_ne!(
            a,
            proposal_id(&[change("r/api", "1.3.0"), change("r/web", "2.0.0")])
        );
    }

    #[test]
    fn the_body_names_the_applications_and_their_destinations() {
        let mut g = group("api", vec![change("r/api", "1.2.0")]);
        let marker = Marker {
            group: "api".into(),
            proposal: "p".into(),
            head: "h".into(),
            noted: None,
        };
        let without = body(
            ForgeKind::GitHub,
            "m",
            "main",
            &g,
            &BTreeMap::new(),
            &marker,
        );
        assert!(!without.contains("Argo CD Applications"), "{without}");
        g.applications = vec![crate::affected::AffectedApplication {
            name: "shop".into(),
            namespace: Some("argocd".into()),
            destination: crate::application::Destination {
                name: Some("prod".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            sources: vec![1, 3],
            files: vec!["apps/a.yaml".into()],
            rendered: None,
        }];
        let with = body(
            ForgeKind::GitHub,
            "m",
            "main",
            &g,
            &BTreeMap::new(),
            &marker,
        );
        assert!(
            with.contains(
                "| Application | Cluster | Namespace | Sources | Files |\n\
                 | --- | --- | --- | --- | --- |\n\
                 | `argocd/shop` | `prod` | `shop` | 1, 3 | `apps/a.yaml` |\n"
            ),
            "{with}"
        );
    }

    #[test]
    fn branch_and_title_templates() {
        let g = group("api", vec![change("r/api", "1.2.0")]);
        assert_eq!(branch_name(None, "m", &g).unwrap(), "tagpilot/api");
        assert_eq!(
            title(None, "m", &g).unwrap(),
            "chore(images): update api to 1.2.0"
        );
        assert_eq!(
            title(Some("Update {{ group }} to {{ changes[0].to }}"), "m", &g).unwrap(),
            "Update api to 1.2.0"
        );
        let mut deployed = g.clone();
        deployed.applications = vec![crate::affected::AffectedApplication {
            name: "shop".into(),
            ..Default::default()
        }];
        assert_eq!(
            title(
                Some(
                    "Update {{ group }} in {{ applications | map(attribute='name') | join(', ') }}"
                ),
                "m",
                &deployed
            )
            .unwrap(),
            "Update api in shop"
        );
        let err = branch_name(Some("bad..{{ group }}"), "m", &g)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a valid branch name"), "{err}");
        let err = title(Some("{{ nope }}"), "m", &g).unwrap_err().to_string();
        assert!(
            err.contains("write.title") && err.contains("`api`"),
            "{err}"
        );
    }
}
