//! What changed inside the images a repository target updates: each change's old and new image
//! are asked for their OCI `source` and `revision` labels ([`crate::provenance`]), and where
//! both name the same GitHub or GitLab repository, the change carries the two revisions and the
//! page comparing them, for the commit message and the pull request body.
//!
//! Only repository targets are described (their commits and pull requests say it), after the
//! plan and before the write, and only when something shows it ([`shown`]): a report, a pull
//! request's body, or a template that names the variables. A re-check after a push waits for
//! these questions, so a target whose commit message does not use them never asks them. The
//! old images are asked first; the new one only when the old one names a repository a compare
//! link can be made for (most images carry no labels, and then half the questions are saved).
//! The questions are answered from the registry client's digest caches (and the state store)
//! after the first time; one that fails leaves that change undescribed, never the plan failed.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt as _;

use crate::change::ChangeGroup;
use crate::config::repository::{WriteConfig, WriteMode};
use crate::image::Repository;
use crate::plan::Plan;
use crate::provenance::{ImageSource, SourceChange, source_change, source_repository};
use crate::registry::Registry;

/// How many images are asked about at once.
const CONCURRENT_QUESTIONS: usize = 8;

/// The template variables that show a change's source ([`crate::change::Change::template_view`]).
const SOURCE_VARIABLES: [&str; 4] = ["source", "revision_from", "revision_to", "compare_url"];

/// Whether anything written for a target with `write` shows where its images were built from:
/// a `report` (a plan's JSON carries it), a pull request's body, or a commit message, branch or
/// title template that names one of the variables. A template is read as text: a word that only
/// looks like one (`a.sources`) costs the questions, never a compare link left out.
pub(super) fn shown(write: &WriteConfig, report: bool) -> bool {
    if report || write.mode == WriteMode::PullRequest {
        return true;
    }
    let message = write
        .commit_message
        .as_deref()
        .unwrap_or(crate::git::message::DEFAULT_COMMIT_MESSAGE);
    [
        Some(message),
        write.branch.as_deref(),
        write.title.as_deref(),
    ]
    .into_iter()
    .flatten()
    .any(|template| SOURCE_VARIABLES.iter().any(|v| template.contains(v)))
}

/// Fills in each change's source comparison, in the plan and in the groups to write.
pub(super) async fn describe<R: Registry>(
    registry: &R,
    plan: &mut Plan,
    groups: &mut [ChangeGroup],
) {
    let moves: BTreeSet<(String, String, String)> = plan
        .changes
        .iter()
        .map(|c| (c.image.clone(), c.from.clone(), c.to.clone()))
        .chain(
            groups
                .iter()
                .flat_map(|g| &g.changes)
                .map(|c| (c.image.clone(), c.from.clone(), c.to.clone())),
        )
        .filter(|(_, from, to)| from != to)
        .collect();
    if moves.is_empty() {
        return;
    }
    // The old images first: only one that names a repository to compare in makes the new one
    // worth asking about.
    let old: BTreeSet<(String, String)> = moves
        .iter()
        .map(|(image, from, _)| (image.clone(), from.clone()))
        .collect();
    let mut sources = ask(registry, old).await;
    let new: BTreeSet<(String, String)> = moves
        .iter()
        .filter(|(image, from, _)| {
            sources
                .get(&(image.clone(), from.clone()))
                .and_then(|s| s.source.as_deref())
                .and_then(source_repository)
                .is_some()
        })
        .map(|(image, _, to)| (image.clone(), to.clone()))
        .collect();
    if new.is_empty() {
        return;
    }
    sources.append(&mut ask(registry, new).await);
    let described: BTreeMap<(String, String, String), SourceChange> = moves
        .into_iter()
        .filter_map(|(image, from, to)| {
            let old = sources.get(&(image.clone(), from.clone()))?;
            let new = sources.get(&(image.clone(), to.clone()))?;
            Some(((image, from, to), source_change(old, new)?))
        })
        .collect();
    if described.is_empty() {
        return;
    }
    let changes = plan
        .changes
        .iter_mut()
        .chain(groups.iter_mut().flat_map(|g| g.changes.iter_mut()));
    for c in changes {
        if let Some(s) = described.get(&(c.image.clone(), c.from.clone(), c.to.clone())) {
            c.source = Some(Box::new(s.clone()));
        }
    }
}

/// What each image says about its source, for those that could be asked.
async fn ask<R: Registry>(
    registry: &R,
    images: BTreeSet<(String, String)>,
) -> BTreeMap<(String, String), ImageSource> {
    futures_util::stream::iter(images)
        .map(|(image, version)| async move {
            let repo = Repository::parse(&image).ok()?;
            // A report's text, read back: `tag@digest` is asked by digest, and a reference
            // without a version (`(none)`) is not asked about at all.
            let reference = crate::plan::version_reference(&version)?;
            match registry.inspect(&repo, reference, &[]).await {
                Ok(info) => Some(((image, version), info.source)),
                Err(e) => {
                    tracing::debug!(%image, %version, "not described: {}", crate::error_chain::chain(&e));
                    None
                }
            }
        })
        .buffer_unordered(CONCURRENT_QUESTIONS)
        .filter_map(std::future::ready)
        .collect()
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::fixtures::change;
    use crate::registry::MemoryRegistry;

    fn registry(source: Option<&str>) -> MemoryRegistry {
        let source = source.map_or(String::new(), |s| format!("    source: {s}\n"));
        MemoryRegistry::from_yaml(&format!(
            "registry.example/api:\n    tags: ['1.0.0', '1.1.0']\n{source}    revisions: {{'1.0.0': aaa, '1.1.0': bbb}}\n"
        ))
        .unwrap()
    }

    fn plan() -> Plan {
        Plan {
            changes: vec![change("api", "app.yaml", "1.0.0", "1.1.0")],
            ..Plan::default()
        }
    }

    #[tokio::test]
    async fn an_old_image_without_a_source_saves_the_question_about_the_new_one() {
        let registry = registry(None);
        let mut plan = plan();
        describe(&registry, &mut plan, &mut []).await;
        assert_eq!(registry.inspect_calls(), 1, "only the old image was asked");
        assert!(plan.changes[0].source.is_none());
    }

    #[tokio::test]
    async fn an_old_image_naming_its_repository_has_the_new_one_asked_and_the_change_compared() {
        let registry = registry(Some("https://github.com/acme/api"));
        let mut plan = plan();
        describe(&registry, &mut plan, &mut []).await;
        assert_eq!(registry.inspect_calls(), 2);
        let source = plan.changes[0].source.as_deref().expect("described");
        assert_eq!(
            source.compare_url,
            "https://github.com/acme/api/compare/aaa...bbb"
        );
    }

    #[test]
    fn sources_are_read_only_where_something_shows_them() {
        let plain = WriteConfig {
            commit_message: Some("chore: {{ changes | length }} image(s) in {{ group }}".into()),
            ..WriteConfig::default()
        };
        assert!(!shown(&plain, false), "a message without them");
        assert!(shown(&plain, true), "a plan's report shows them");
        assert!(
            shown(&WriteConfig::default(), false),
            "the default message links the compare"
        );
        let naming = WriteConfig {
            commit_message: Some("{% for c in changes %}{{ c.revision_to }}{% endfor %}".into()),
            ..WriteConfig::default()
        };
        assert!(shown(&naming, false));
        let proposing = WriteConfig {
            mode: WriteMode::PullRequest,
            ..plain
        };
        assert!(shown(&proposing, false), "a pull request's body lists them");
    }
}
