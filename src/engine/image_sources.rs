//! What changed inside the images a repository target updates: each change's old and new image
//! are asked for their OCI `source` and `revision` labels ([`crate::provenance`]), and where
//! both name the same GitHub or GitLab repository, the change carries the two revisions and the
//! page comparing them, for the commit message and the pull request body.
//!
//! Only repository targets are described (their commits and pull requests say it), after the
//! plan and before the write. The questions are a few per change, answered from the registry
//! client's digest caches (and the state store) after the first time; one that fails leaves
//! that change undescribed, never the plan failed.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::StreamExt as _;

use crate::change::ChangeGroup;
use crate::image::Repository;
use crate::plan::Plan;
use crate::provenance::{ImageSource, SourceChange, source_change};
use crate::registry::Registry;

/// How many images are asked about at once.
const CONCURRENT_QUESTIONS: usize = 8;

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
    let images: BTreeSet<(String, String)> = moves
        .iter()
        .flat_map(|(image, from, to)| [(image.clone(), from.clone()), (image.clone(), to.clone())])
        .collect();
    let sources: BTreeMap<(String, String), ImageSource> = futures_util::stream::iter(images)
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
        .await;
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
