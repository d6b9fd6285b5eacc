//! The labels a group's pull request gets: `write.labels`, each a minijinja template. A label
//! that names an Application's variables (`application`, `namespace`, `cluster`,
//! `destination`) is made once per Application whose sources contain the group's files
//! (`app/{{ application }}`, `env/{{ destination.namespace }}`), and none when there is none;
//! the others once per group (`group`, `repository`). Each is cut to what the forge accepts
//! ([`ForgeKind::label_limit`]).
//!
//! Pure: strings in, strings out.

use serde::Serialize;

use super::ForgeKind;
use crate::affected::TemplateDestination;
use crate::change::ChangeGroup;

/// A `write.labels` entry that cannot be rendered.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    #[error("invalid `write.labels` template `{label}`")]
    Invalid {
        label: String,
        source: minijinja::Error,
    },
    #[error("cannot render `write.labels` template `{label}` for group `{group}`")]
    Render {
        label: String,
        group: String,
        source: minijinja::Error,
    },
}

/// What a label template sees.
#[derive(Serialize)]
struct LabelContext<'a> {
    group: &'a str,
    repository: &'a str,
    application: &'a str,
    namespace: &'a str,
    cluster: &'a str,
    destination: TemplateDestination<'a>,
}

/// The variables that make a label one per Application.
const PER_APPLICATION: [&str; 4] = ["application", "namespace", "cluster", "destination"];

/// The labels for `group`'s pull request on `kind`, in `templates`' order, each once (forges
/// compare labels without regard to case), none empty; and the templates that did not render,
/// which put no label on it (`tagpilot check` names them before: [`check`]).
pub fn labels(
    kind: ForgeKind,
    templates: &[String],
    repository: &str,
    group: &ChangeGroup,
) -> (Vec<String>, Vec<LabelError>) {
    let mut errors = Vec::new();
    let mut out: Vec<String> = Vec::new();
    let mut add = |label: String| {
        let label = kind.fit_label(&label);
        if !label.is_empty() && !out.iter().any(|l| l.eq_ignore_ascii_case(&label)) {
            out.push(label);
        }
    };
    for template in templates {
        if let Err(e) = render_one(template, repository, group, &mut add) {
            errors.push(e);
        }
    }
    (out, errors)
}

/// Renders one label template for `group`, handing each label made to `add`.
fn render_one(
    template: &str,
    repository: &str,
    group: &ChangeGroup,
    add: &mut impl FnMut(String),
) -> Result<(), LabelError> {
    let mut env = minijinja::Environment::new();
    env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
    env.add_template("label", template)
        .map_err(|source| LabelError::Invalid {
            label: template.to_owned(),
            source,
        })?;
    let compiled = env
        .get_template("label")
        .map_err(|source| LabelError::Invalid {
            label: template.to_owned(),
            source,
        })?;
    let per_application = compiled
        .undeclared_variables(false)
        .iter()
        .any(|v| PER_APPLICATION.contains(&v.as_str()));
    let render = |context: LabelContext<'_>| {
        compiled
            .render(minijinja::value::Serde(&context))
            .map_err(|source| LabelError::Render {
                label: template.to_owned(),
                group: group.key.clone(),
                source,
            })
    };
    let empty = TemplateDestination {
        server: "",
        name: "",
        namespace: "",
    };
    if !per_application {
        add(render(LabelContext {
            group: &group.key,
            repository,
            application: "",
            namespace: "",
            cluster: "",
            destination: empty,
        })?);
        return Ok(());
    }
    for app in &group.applications {
        let view = app.template_view();
        add(render(LabelContext {
            group: &group.key,
            repository,
            application: view.name,
            namespace: view.namespace,
            cluster: view.cluster,
            destination: view.destination,
        })?);
    }
    Ok(())
}

/// Checks that every `write.labels` template parses and renders, for `tagpilot check`.
pub fn check(templates: &[String], sample: &ChangeGroup) -> Result<(), LabelError> {
    match labels(ForgeKind::GitHub, templates, "example", sample)
        .1
        .into_iter()
        .next()
    {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

impl ForgeKind {
    /// The longest label name the forge accepts, in characters: GitHub's 50 (its API answers
    /// "name is too long (maximum is 50 characters)"), GitLab's 255, Gitea's and Forgejo's 255
    /// (the database column).
    pub fn label_limit(self) -> usize {
        match self {
            ForgeKind::GitHub => 50,
            // Bitbucket has no labels; they are cut as GitLab's for the warning that says so.
            ForgeKind::GitLab
            | ForgeKind::Gitea
            | ForgeKind::Forgejo
            | ForgeKind::BitbucketCloud
            | ForgeKind::AzureDevOps
            | ForgeKind::BitbucketDataCenter => 255,
        }
    }

    /// `label` as this forge takes it: one line, trimmed, cut to [`Self::label_limit`]
    /// characters; on GitLab without commas, which its API reads as a separator between labels.
    pub fn fit_label(self, label: &str) -> String {
        let one_line = label.split(['\n', '\r']).next().unwrap_or_default().trim();
        let safe = match self {
            ForgeKind::GitLab => one_line.replace(',', " "),
            ForgeKind::GitHub
            | ForgeKind::Gitea
            | ForgeKind::Forgejo
            | ForgeKind::BitbucketCloud
            | ForgeKind::AzureDevOps
            | ForgeKind::BitbucketDataCenter => one_line.to_owned(),
        };
        safe.chars()
            .take(self.label_limit())
            .collect::<String>()
            .trim_end()
            .to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::affected::AffectedApplication;
    use crate::application::Destination;

    fn group() -> ChangeGroup {
        let app = |name: &str, ns: &str| AffectedApplication {
            name: name.into(),
            namespace: Some("argocd".into()),
            destination: Destination {
                server: Some("https://kubernetes.default.svc".into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            sources: vec![1],
            files: vec!["apps/a.yaml".into()],
            rendered: None,
        };
        ChangeGroup {
            key: "api".into(),
            applications: vec![app("shop-prod", "prod"), app("shop-stage", "prod")],
            ..Default::default()
        }
    }

    #[test]
    fn a_label_naming_an_application_is_made_once_per_application() {
        let templates = [
            "dependencies".to_owned(),
            "app/{{ application }}".to_owned(),
            "env/{{ destination.namespace }}".to_owned(),
            "group/{{ group }}".to_owned(),
        ];
        let (made, errors) = labels(ForgeKind::GitHub, &templates, "m", &group());
        assert!(errors.is_empty());
        assert_eq!(
            made,
            [
                "dependencies",
                "app/shop-prod",
                "app/shop-stage",
                "env/prod",
                "group/api"
            ]
        );
        // No Application: the per-Application labels are none, the others stay.
        let alone = ChangeGroup {
            applications: Vec::new(),
            ..group()
        };
        let made = labels(ForgeKind::GitHub, &templates, "m", &alone).0;
        assert_eq!(made, ["dependencies", "group/api"]);
    }

    #[test]
    fn labels_are_cut_to_the_forges_limits() {
        let long = "x".repeat(300);
        let github = labels(
            ForgeKind::GitHub,
            std::slice::from_ref(&long),
            "m",
            &group(),
        )
        .0;
        assert_eq!(github[0].chars().count(), 50);
        let gitlab = labels(ForgeKind::GitLab, &[long], "m", &group()).0;
        assert_eq!(gitlab[0].chars().count(), 255);
        // Characters, not bytes; and GitLab's separator never splits one label in two.
        let wide = "é".repeat(60);
        assert_eq!(ForgeKind::GitHub.fit_label(&wide).chars().count(), 50);
        assert_eq!(ForgeKind::GitLab.fit_label("env/a,b"), "env/a b");
    }

    #[test]
    fn a_label_template_that_does_not_render_names_itself() {
        let (made, errors) = labels(
            ForgeKind::GitHub,
            &["{{ nope }}".into(), "kept".into()],
            "m",
            &group(),
        );
        assert_eq!(made, ["kept"]);
        let err = errors[0].to_string();
        assert!(err.contains("{{ nope }}") && err.contains("`api`"), "{err}");
        let err = check(&["{% if %}".into()], &group())
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid `write.labels`"), "{err}");
    }
}
