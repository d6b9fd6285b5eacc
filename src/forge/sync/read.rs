//! The read step: everything the pull-request sync decides on, gathered from the clone and the
//! forge into plain data. It pushes, opens, comments and closes nothing; the commits it builds
//! exist only in the local clone until the perform step pushes them.

use std::collections::{BTreeMap, BTreeSet};

use super::observed::{Observed, PlannedGroup, tagpilots};
use crate::forge::{Forge, ForgeError, ForgeKind, SourceCommits, body};
use crate::git::{self, RepoCache, RepositoryConfig};
use crate::provenance::SourceForge;

/// Builds each planned group's commit on the base tip and reads the forge.
pub(crate) async fn read<F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    prepared: git::proposal::Prepared,
    forge: &F,
) -> Result<Observed, ForgeError> {
    // Whether the plan covered every policy: only then is a pull request closed for a change
    // it no longer holds.
    let complete = prepared.complete;

    let signer = git::proposal::load_signer(repo)?;
    let template_error = |source| ForgeError::Template {
        repository: repo.name.clone(),
        source,
    };
    let open = forge.open_pull_requests(&repo.branch).await?;
    // The branch of each group tagpilot has an open pull request for.
    let open_branches: BTreeMap<String, String> = tagpilots(&open)
        .kept
        .into_iter()
        .map(|(group, (_, pr))| (group, pr.branch.clone()))
        .collect();

    let mut wanted = Vec::new();
    for group in prepared.groups {
        let branch = match open_branches.get(&group.key) {
            Some(branch) => branch.clone(),
            None => body::branch_name(repo.write.branch.as_deref(), &repo.name, &group)
                .map_err(template_error)?,
        };
        wanted.push((group, branch));
    }
    let mut branches: Vec<String> = wanted
        .iter()
        .map(|(_, branch)| branch.clone())
        .chain(open_branches.values().cloned())
        .collect();
    branches.sort();
    branches.dedup();
    let tips = git::proposal::fetch_branches(cache, repo, branches).await?;

    let mut groups = Vec::new();
    for (group, branch) in wanted {
        let built =
            git::proposal::build_commit(cache, repo, prepared.base_tip, &group, signer.clone())
                .await?;
        // Nothing to commit: the group's change is in the base already.
        let Some(built) = built else { continue };
        let title =
            body::title(repo.write.title.as_deref(), &repo.name, &group).map_err(template_error)?;
        let built_is_tip = match tips.get(&branch).and_then(Option::as_ref) {
            Some(tip) => git::proposal::same_commit(cache, repo, tip.id, built.id).await?,
            None => false,
        };
        let closed = if open_branches.contains_key(&group.key) {
            Ok(Vec::new())
        } else {
            match forge.closed_pull_requests(&branch, &repo.branch).await {
                Err(e) if e.stops_the_repository() => return Err(e),
                closed => closed,
            }
        };
        groups.push(PlannedGroup {
            group,
            branch,
            title,
            built: built.id,
            built_is_tip,
            closed,
        });
    }

    let mut reached_base = BTreeSet::new();
    if complete {
        for (group, branch) in &open_branches {
            let needed = groups.iter().any(|g| &g.group.key == group);
            let tip = tips.get(branch).and_then(Option::as_ref);
            if let Some(tip) = tip.filter(|_| !needed)
                && git::proposal::reached_base(cache, repo, tip.id, prepared.base_tip).await?
            {
                reached_base.insert(branch.clone());
            }
        }
    }

    let source_commits = source_commits(forge, &groups).await;
    let reviews = reviews(forge, &open, &groups).await?;
    Ok(Observed {
        source_commits,
        reviews,
        repository: repo.name.clone(),
        base: repo.branch.clone(),
        base_tip: prepared.base_tip,
        kind: forge.kind(),
        complete,
        write: repo.write.clone(),
        open,
        groups,
        tips,
        reached_base,
    })
}

/// tagpilot's review comment on each open pull request of a group that has rendered
/// Applications ([`crate::forge::review`]), found by its marker among the comments.
async fn reviews<F: Forge>(
    forge: &F,
    open: &[crate::forge::PullRequest],
    groups: &[PlannedGroup],
) -> Result<BTreeMap<u64, Result<Option<(u64, String)>, ForgeError>>, ForgeError> {
    let mut out = BTreeMap::new();
    let kept = tagpilots(open).kept;
    for planned in groups {
        let reviewed = planned
            .group
            .applications
            .iter()
            .any(|a| a.rendered.is_some());
        let Some((_, pr)) = kept.get(&planned.group.key).filter(|_| reviewed) else {
            continue;
        };
        let found = match forge.comments(pr.number).await {
            Ok(comments) => Ok(comments
                .into_iter()
                .find(|(_, body)| crate::forge::review::is_review(body, &planned.group.key))),
            Err(e) if e.stops_the_repository() => return Err(e),
            Err(e) => Err(e),
        };
        out.insert(pr.number, found);
    }
    Ok(out)
}

/// The commits behind each change's source comparison, asked of this forge when the source
/// repository is on the same kind of forge. A comparison the token cannot read leaves only
/// the link in the body: it is optional, never a failure.
async fn source_commits<F: Forge>(
    forge: &F,
    groups: &[PlannedGroup],
) -> BTreeMap<String, SourceCommits> {
    let mut out = BTreeMap::new();
    for s in groups
        .iter()
        .flat_map(|g| &g.group.changes)
        .filter_map(|c| c.source.as_deref())
    {
        let (source, from, to, url) = (&s.source, &s.revision_from, &s.revision_to, &s.compare_url);
        if out.contains_key(url) {
            continue;
        }
        let Some(repo) = crate::provenance::source_repository(source) else {
            continue;
        };
        let same_kind = matches!(
            (repo.forge, forge.kind()),
            (SourceForge::GitHub, ForgeKind::GitHub) | (SourceForge::GitLab, ForgeKind::GitLab)
        );
        if !same_kind {
            continue;
        }
        match forge.compare(&repo.path, from, to).await {
            Ok(commits) => {
                out.insert(url.clone(), commits);
            }
            Err(e) => {
                tracing::debug!(source = %repo.path, "no commit subjects: {}", crate::error_chain::chain(&e))
            }
        }
    }
    out
}
