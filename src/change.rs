//! The change model: one image field moving from one tag to another ([`Change`]), what goes
//! into one commit or pull request ([`ChangeGroup`], grouped by one rule: [`group`]), and what
//! a group last proposed ([`Proposal`]).
//!
//! It sits in the leaf layer so that every part that speaks of changes speaks of the same ones:
//! the planner makes them, the report shows them, git commits them and the forge proposes them,
//! with no conversion between. Pure data and pure functions: no I/O, no planner, no git.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::affected::AffectedApplication;
use crate::config::repository::{Grouping, WriteConfig, WriteMode};
use crate::provenance::SourceChange;

/// One image field that will move.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Change {
    /// The configured repository (`repositories[].name`); absent for the local directory.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    pub policy: String,
    /// The repository the policy follows (`127.0.0.1:5000/shop/api`).
    pub image: String,
    /// Path relative to the root, with `/` separators.
    pub file: String,
    /// 1-based.
    pub line: usize,
    /// What kind of field: `Deployment/web container app`, `kustomize images[web]`, …
    pub field: String,
    /// The policy's strategy (`semver`, `regex`, …).
    pub strategy: &'static str,
    pub from: String,
    pub to: String,
    /// What changed inside the image, when the old and the new image say where they were built
    /// from (their OCI `source` and `revision` labels): filled in after planning.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<Box<SourceChange>>,
    /// The labels and annotations of the same resource that follow the image's tag
    /// (`versionLabels`), edited in the same commit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<LabelChange>,
    /// For a field that follows other environments (`promote:`), the evidence its pull request
    /// shows: where the tag ran, since when, how long healthy, and its verification.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<Box<PromotionEvidence>>,
}

/// A label or annotation that carries an image's version and moves with it: in the same
/// resource as the image field, holding the old tag or the old tag's version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LabelChange {
    /// Where and which: `Deployment/web spec.template.metadata.labels app.kubernetes.io/version`.
    pub label: String,
    /// 1-based line in the file.
    pub line: usize,
    pub from: String,
    pub to: String,
}

/// Why a promotion takes its tag: each upstream that offers it, in the report's words.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PromotionEvidence {
    pub upstreams: Vec<UpstreamEvidence>,
}

/// One upstream's part in a promotion's evidence.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct UpstreamEvidence {
    /// The upstream as the policy names it (`application argocd/shop-staging`, `envs/staging/…`).
    pub upstream: String,
    pub tag: String,
    /// Since when it runs the tag (RFC 3339), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// How long it has stayed healthy (`2h 5m`).
    pub healthy_for: String,
    /// `verified at …`, or `on the base branch, no cluster access`.
    pub verification: String,
    /// Since when it is healthy there: verified at, or (from git) the commit that set it. What
    /// the promotion lead time counts from.
    #[serde(skip)]
    pub healthy_since: Option<jiff::Timestamp>,
}

impl PromotionEvidence {
    /// When the last of its upstreams became healthy with the tag (every one must say).
    pub fn healthy_since(&self) -> Option<jiff::Timestamp> {
        self.upstreams
            .iter()
            .map(|u| u.healthy_since)
            .try_fold(None, |latest: Option<jiff::Timestamp>, s| {
                s.map(|s| Some(latest.map_or(s, |l| l.max(s))))
            })
            .flatten()
    }
}

impl Change {
    /// The change as the commit message, branch and title templates see it: `c.policy`,
    /// `c.image`, `c.file`, `c.line`, `c.from`, `c.to`, `c.strategy`, and `c.source`,
    /// `c.revision_from`, `c.revision_to`, `c.compare_url` (empty unless the images say where
    /// they were built from), and `c.labels` (the version labels that follow, each `{label,
    /// line, from, to}`).
    pub fn template_view(&self) -> TemplateChange<'_> {
        let source = self.source.as_deref();
        TemplateChange {
            policy: &self.policy,
            image: &self.image,
            file: &self.file,
            line: self.line,
            from: &self.from,
            to: &self.to,
            strategy: self.strategy,
            source: source.map(|s| s.source.as_str()),
            revision_from: source.map(|s| s.revision_from.as_str()),
            revision_to: source.map(|s| s.revision_to.as_str()),
            compare_url: source.map(|s| s.compare_url.as_str()),
            labels: &self.labels,
        }
    }
}

/// A [`Change`] in the words the user's templates use ([`Change::template_view`]). The
/// templates' variables are documented, so this stays as it is when the model grows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TemplateChange<'a> {
    pub policy: &'a str,
    pub image: &'a str,
    pub file: &'a str,
    pub line: usize,
    pub from: &'a str,
    pub to: &'a str,
    pub strategy: &'a str,
    pub source: Option<&'a str>,
    pub revision_from: Option<&'a str>,
    pub revision_to: Option<&'a str>,
    pub compare_url: Option<&'a str>,
    pub labels: &'a [LabelChange],
}

/// What goes into one commit or one pull request: the files' new contents and the changes
/// they carry.
///
/// Groups are applied in the order the planner returns them, each on top of the previous one,
/// so when two groups change one file, the later group's content must already include the
/// earlier group's edits (build the groups by applying edits cumulatively), unless the groups
/// are proposed each on its own ([`Stacking::Alone`]). With `group: repository` the groups are
/// merged into one, keeping each file's last content.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChangeGroup {
    /// The policy name (or file, repository or Application name) this group belongs to.
    pub key: String,
    /// Path relative to the repository root → the whole new content of that file.
    pub files: BTreeMap<PathBuf, String>,
    pub changes: Vec<Change>,
    /// The Argo CD Applications whose sources contain the group's files, with their
    /// destinations ([`crate::affected`]); set by the engine from the Applications it read, on
    /// the groups as [`group`] made them (what lands together), empty without `applications:`.
    pub applications: Vec<AffectedApplication>,
}

/// Whether a repository's per-policy groups stack, each on the ones before it (commits on one
/// branch), or each starts from the base (a pull request per policy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stacking {
    /// Each group's files carry every earlier group's edits of them.
    Stacked,
    /// Each group's files carry only its own edits: it is proposed on its own from the base.
    Alone,
}

impl Stacking {
    /// How the groups of a repository written with `write` stack: only a pull request per
    /// policy starts from the base.
    pub fn of(write: &WriteConfig) -> Stacking {
        if write.mode == WriteMode::PullRequest
            && matches!(write.group, Grouping::Policy | Grouping::Pattern)
        {
            Stacking::Alone
        } else {
            Stacking::Stacked
        }
    }
}

/// The grouping rule: what goes into one commit or pull request, given the planner's groups
/// (one per policy, and one per Application whose own file is written), per `write.group`.
/// Empty groups are dropped. Applied once, by the planning side (the engine's target planner):
/// git and the forges commit and propose the groups as given. The planner's groups name no
/// Applications yet: which ones a group deploys, and their renders, are found on the groups
/// this returns, so they describe what lands together.
///
/// - `policy`: the groups as they are.
/// - `path`: one group per file, with the file's last content (which carries every earlier
///   group's edits of it) and every change made to it, keyed by its `/`-separated path.
/// - `repository`: one group named after the repository, each file at its last content.
pub fn group(repository: &str, grouping: Grouping, groups: Vec<ChangeGroup>) -> Vec<ChangeGroup> {
    let groups = groups.into_iter().filter(|g| !g.files.is_empty());
    match grouping {
        // The planner already made one group per pattern ([`group_key`]).
        Grouping::Policy | Grouping::Pattern => groups.collect(),
        Grouping::Path => {
            let mut by_path: BTreeMap<PathBuf, ChangeGroup> = BTreeMap::new();
            for group in groups {
                for (path, content) in group.files {
                    let entry = by_path.entry(path.clone()).or_insert_with(|| ChangeGroup {
                        key: path.to_string_lossy().replace('\\', "/"),
                        ..ChangeGroup::default()
                    });
                    entry.files.insert(path.clone(), content);
                    entry.changes.extend(
                        group
                            .changes
                            .iter()
                            .filter(|c| Path::new(&c.file) == path)
                            .cloned(),
                    );
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

/// The key of the planner's group a change of `policy` goes into: the policy, or with
/// `write.group: pattern` the pattern policy an image of a pattern (`shop@shop/cart`) comes
/// from, so that its images land together. `is_pattern` says which names are pattern policies.
pub fn group_key(grouping: Grouping, policy: &str, is_pattern: &dyn Fn(&str) -> bool) -> String {
    match grouping {
        Grouping::Pattern => crate::policy::pattern::pattern_of(policy, is_pattern)
            .unwrap_or(policy)
            .to_owned(),
        _ => policy.to_owned(),
    }
}

/// What was last proposed for one group of one repository (kept by the state store).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Proposal {
    pub changes: Vec<ProposedChange>,
    /// When it was proposed.
    pub at: jiff::Timestamp,
}

/// One change of a proposal: which policy moved which file to what (`tag` or `tag@digest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProposedChange {
    pub policy: String,
    pub file: String,
    pub to: String,
}

impl Proposal {
    /// What `group` proposes, made at `at`.
    pub fn of(group: &ChangeGroup, at: jiff::Timestamp) -> Proposal {
        Proposal {
            changes: group
                .changes
                .iter()
                .map(|c| ProposedChange {
                    policy: c.policy.clone(),
                    file: c.file.replace('\\', "/"),
                    to: c.to.clone(),
                })
                .collect(),
            at,
        }
    }
}

/// Changes and groups for the unit tests of everything that takes them (grouping, commit
/// messages).
#[cfg(test)]
pub(crate) mod fixtures {
    use std::path::PathBuf;

    use super::{Change, ChangeGroup};

    /// `policy` moving `registry.example/<policy>` in `file` (line 7) from `from` to `to`.
    pub(crate) fn change(policy: &str, file: &str, from: &str, to: &str) -> Change {
        Change {
            policy: policy.into(),
            image: format!("registry.example/{policy}"),
            file: file.into(),
            line: 7,
            from: from.into(),
            to: to.into(),
            strategy: "semver",
            ..Default::default()
        }
    }

    /// A group `key` writing `files` (path, text) for `changes`.
    pub(crate) fn group(key: &str, files: &[(&str, &str)], changes: Vec<Change>) -> ChangeGroup {
        ChangeGroup {
            key: key.into(),
            files: files
                .iter()
                .map(|(p, c)| (PathBuf::from(p), c.to_string()))
                .collect(),
            changes,
            applications: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{change, group as group_of};
    use super::*;

    #[test]
    fn group_by_repository_keeps_the_last_content_of_each_file() {
        let groups = vec![
            group_of(
                "api",
                &[("a.yaml", "api-edit")],
                vec![change("api", "a.yaml", "1", "2")],
            ),
            group_of("empty", &[], vec![]),
            group_of(
                "web",
                &[("a.yaml", "api-edit+web-edit"), ("b.yaml", "b")],
                vec![change("web", "a.yaml", "3", "4")],
            ),
        ];
        let merged = group("manifests", Grouping::Repository, groups.clone());
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].key, "manifests");
        assert_eq!(
            merged[0].files[&PathBuf::from("a.yaml")],
            "api-edit+web-edit"
        );
        assert_eq!(merged[0].changes.len(), 2);
        let per_policy = group("manifests", Grouping::Policy, groups);
        assert_eq!(
            per_policy
                .iter()
                .map(|g| g.key.as_str())
                .collect::<Vec<_>>(),
            ["api", "web"]
        );
        assert!(group("m", Grouping::Repository, vec![group_of("x", &[], vec![])]).is_empty());
    }

    #[test]
    fn group_by_path_gives_each_file_its_last_content_and_its_changes() {
        let groups = vec![
            group_of(
                "api",
                &[("a.yaml", "api-edit")],
                vec![change("api", "a.yaml", "1", "2")],
            ),
            group_of(
                "web",
                &[("a.yaml", "api-edit+web-edit"), ("b.yaml", "b")],
                vec![
                    change("web", "a.yaml", "3", "4"),
                    change("web", "b.yaml", "5", "6"),
                ],
            ),
        ];
        let by_path = group("m", Grouping::Path, groups);
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

    #[test]
    fn only_a_pull_request_per_policy_starts_each_group_from_the_base() {
        let write = |mode, group| WriteConfig {
            mode,
            group,
            ..WriteConfig::default()
        };
        for (mode, grouping, stacking) in [
            (WriteMode::PullRequest, Grouping::Policy, Stacking::Alone),
            (WriteMode::PullRequest, Grouping::Path, Stacking::Stacked),
            (
                WriteMode::PullRequest,
                Grouping::Repository,
                Stacking::Stacked,
            ),
            (WriteMode::Push, Grouping::Policy, Stacking::Stacked),
            (WriteMode::Push, Grouping::Repository, Stacking::Stacked),
        ] {
            assert_eq!(
                Stacking::of(&write(mode, grouping)),
                stacking,
                "{mode:?} {grouping:?}"
            );
        }
    }

    #[test]
    fn templates_see_the_source_comparison_as_plain_strings() {
        let mut c = change("api", "apps/a.yaml", "1", "2");
        assert_eq!(c.template_view().compare_url, None);
        let repository = crate::provenance::source_repository("https://github.com/acme/api")
            .expect("a GitHub repository");
        c.source = Some(Box::new(SourceChange {
            repository,
            source: "https://github.com/acme/api".into(),
            revision_from: "aaa".into(),
            revision_to: "bbb".into(),
            compare_url: "https://github.com/acme/api/compare/aaa...bbb".into(),
        }));
        let view = c.template_view();
        assert_eq!(view.source, Some("https://github.com/acme/api"));
        assert_eq!(
            (view.revision_from, view.revision_to),
            (Some("aaa"), Some("bbb"))
        );
        assert_eq!(
            view.compare_url,
            Some("https://github.com/acme/api/compare/aaa...bbb")
        );
        assert_eq!((view.file, view.strategy), ("apps/a.yaml", "semver"));
        assert!(view.labels.is_empty());
    }

    #[test]
    fn templates_see_the_version_labels_that_follow() {
        let mut c = change("api", "apps/a.yaml", "1", "2");
        c.labels.push(LabelChange {
            label: "Deployment/api metadata.labels app.kubernetes.io/version".into(),
            line: 6,
            from: "1".into(),
            to: "2".into(),
        });
        let mut env = minijinja::Environment::new();
        env.add_template(
            "t",
            "{% for l in c.labels %}{{ l.label }}:{{ l.line }} {{ l.from }}->{{ l.to }}{% endfor %}",
        )
        .unwrap();
        let context = serde_json::json!({ "c": c.template_view() });
        let text = env
            .get_template("t")
            .unwrap()
            .render(minijinja::value::Serde(&context))
            .unwrap();
        assert_eq!(
            text,
            "Deployment/api metadata.labels app.kubernetes.io/version:6 1->2"
        );
    }
}
