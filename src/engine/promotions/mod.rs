//! What each promoting policy's upstreams run (issue 20), gathered before a repository target
//! is planned and handed to the planner as data ([`crate::promotion::Promotions`]): the planner
//! decides, this reads git.
//!
//! For an upstream in git (`path:` or `policy:`), "runs" means "is on the base branch": the tag
//! its field holds at the base tip, since the first-parent commit that set it (the earliest of
//! the newest unbroken run of versions holding that tag, so a tag that came back after a revert
//! counts from the revert). The soak time counts from there. A promotion is a pull request
//! unless its policy says `write: push`: on a repository that pushes, the upstreams are still
//! read and shown, and a tag they offer waits, named. Anything that cannot be read (an
//! unknown repository, a file without the image, fields that disagree) makes the policy wait
//! with the reason; it never falls back to the registry.

mod above;
mod application;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use jiff::Timestamp;

use self::above::Above;
use crate::argocd::resolve::Resolved;
use crate::files::Files;
use crate::git::{self, CommitFiles, RepoCache, RepositoryConfig, WriteMode};
use crate::holds::Holds;
use crate::kubernetes::Cluster;
use crate::manifest;
use crate::policy::{HelmPaths, ImagePolicy, Upstream as UpstreamRef};
use crate::promotion::{Gathered, Promotions, Upstream, Verification};
use crate::state::State;

/// Where a cycle reads upstreams from besides the target's own tree.
pub struct Sources<'a> {
    /// The clone cache, for upstreams in another configured repository.
    pub cache: Option<&'a RepoCache>,
    pub repositories: &'a [RepositoryConfig],
    /// The cluster, for Application upstreams; `None` without `applications.fromCluster`.
    pub cluster: Option<&'a Cluster>,
    /// The namespace of an Application upstream that names none (Argo CD's).
    pub namespace: &'a str,
    /// Issue 19's records: verifications under way and the tags that failed.
    pub state: Option<&'a State>,
    /// The Applications this cycle read: what an Application upstream deploys and its own
    /// policies, whose holds pass down.
    pub resolved: Option<&'a Resolved>,
    /// The time promotions are decided at.
    pub now: Timestamp,
}

impl<'a> Sources<'a> {
    /// What a cycle reads upstreams from: its clone cache, repositories, cluster, state store
    /// and Applications, deciding at the cycle's clock's time of day.
    pub(super) fn of<R>(
        input: &'a super::Input<'a>,
        ctx: &'a super::Context<'a, R>,
        resolved: Option<&'a Resolved>,
    ) -> Self {
        Sources {
            cache: ctx.cache,
            repositories: &input.config.repositories,
            cluster: input.cluster.map(|c| &c.cluster),
            namespace: input
                .cluster
                .map_or("argocd", |c| c.argocd_namespace.as_str()),
            state: ctx.state,
            resolved,
            now: ctx.clock.wall(),
        }
    }
}

/// The upstreams of every policy that promotes into `target`, read from `files` (the target's
/// base tip) or the other repositories they name, with the tags held above it (`holds`: the
/// cycle's, with the rollbacks found on this tip).
pub async fn gather(
    policies: &[ImagePolicy],
    target: &RepositoryConfig,
    files: &CommitFiles,
    sources: &Sources<'_>,
    holds: &Holds,
) -> Promotions {
    let above = Above {
        policies,
        holds,
        resolved: sources.resolved,
        repositories: sources.repositories,
        namespace: sources.namespace,
    };
    let mut by_policy = BTreeMap::new();
    let mut trees: HashMap<String, Result<CommitFiles, String>> = HashMap::new();
    for policy in policies {
        let Some(promote) = &policy.promote else {
            continue;
        };
        let into_target = policy
            .targets
            .iter()
            .any(|t| t.repository.as_deref() == Some(target.name.as_str()));
        if !into_target {
            continue;
        }
        let pushes = target.write.mode == WriteMode::Push && !promote.push;
        let mut gathered = Gathered {
            since: own_since(policy, target, files),
            pushes: pushes.then(|| target.name.clone()),
            ..Gathered::default()
        };
        let mut failed = Vec::new();
        for upstream in &promote.from {
            let (behind, stage) = above.chain(upstream, &target.name);
            gathered.stage = gathered.stage.max(stage);
            match above.held(&behind, &policy.image) {
                Ok(held) => gathered.held_above.extend(held),
                Err(why) => failed.push(why),
            }
            let read = match upstream {
                UpstreamRef::Application { name, namespace } => {
                    let shown = upstream.to_string();
                    let at = (name.as_str(), namespace.as_deref());
                    let behind = above.behind(upstream, &target.name);
                    application::read(shown, at, policy, sources, (&above, &behind)).await
                }
                UpstreamRef::Path { repository, .. } | UpstreamRef::Policy { repository, .. } => {
                    let name = repository.as_deref().unwrap_or(&target.name);
                    let tree = match name == target.name {
                        true => Ok(files),
                        false => other_tree(name, sources, &mut trees).await,
                    };
                    tree.and_then(|tree| from_git(upstream, name, tree, policy, policies))
                        .and_then(|read| {
                            verified_in_git(read, upstream, &target.name, policy, sources, &above)
                        })
                }
            };
            match read {
                Ok(state) => gathered.upstreams.push(state),
                Err(why) => failed.push(why),
            }
        }
        gathered.held_above.sort();
        gathered.held_above.dedup();
        let entry = match failed.is_empty() {
            true => Ok(gathered),
            false => Err(failed.join("; ")),
        };
        by_policy.insert(policy.name.clone(), entry);
    }
    Promotions {
        now: sources.now,
        by_policy,
    }
}

/// A git upstream's verification: with a state store, whether its change is verified where it
/// runs ([`above::verification_in_git`]); without one, the soak counts from the commit.
fn verified_in_git(
    mut read: Upstream,
    upstream: &UpstreamRef,
    repository: &str,
    policy: &ImagePolicy,
    sources: &Sources<'_>,
    above: &Above<'_>,
) -> Result<Upstream, String> {
    let (Some(state), Some(tag)) = (sources.state, read.tag.as_deref()) else {
        return Ok(read);
    };
    let behind = above.behind(upstream, repository);
    read.verification = above::verification_in_git(state, &behind, &policy.image, tag, read.since)
        .map_err(|why| format!("{}: verifications unknown: {why}", read.name))?;
    Ok(read)
}

/// Since when each of the promoting policy's own files in `target` runs the tag it holds; a
/// file that cannot be read is left out (its field says why when it is planned).
fn own_since(
    policy: &ImagePolicy,
    target: &RepositoryConfig,
    files: &CommitFiles,
) -> BTreeMap<String, Timestamp> {
    policy_files(policy, &target.name, files)
        .into_iter()
        .filter_map(|(path, helm)| {
            let (_, since) = running(files, &path, &helm, policy).ok()??;
            let since = Timestamp::from_second(since?).ok()?;
            Some((path.to_string_lossy().replace('\\', "/"), since))
        })
        .collect()
}

/// Another configured repository's base tip, fetched once per target.
async fn other_tree<'t>(
    name: &str,
    sources: &Sources<'_>,
    trees: &'t mut HashMap<String, Result<CommitFiles, String>>,
) -> Result<&'t CommitFiles, String> {
    if !trees.contains_key(name) {
        let fetched = match (
            sources.cache,
            sources.repositories.iter().find(|r| r.name == name),
        ) {
            (Some(cache), Some(repo)) => git::snapshot(cache, repo)
                .await
                .map_err(|e| format!("repository {name}: {}", crate::error_chain::chain(&e))),
            (None, _) => Err(format!("repository {name}: no clone cache")),
            (_, None) => Err(format!(
                "repository {name} is not configured in tagpilot.yaml"
            )),
        };
        trees.insert(name.to_string(), fetched);
    }
    match trees.get(name) {
        Some(Ok(tree)) => Ok(tree),
        Some(Err(why)) => Err(why.clone()),
        None => Err(format!("repository {name}: not read")),
    }
}

/// What a `path:` or `policy:` upstream runs on `repository`'s base branch.
fn from_git(
    upstream: &UpstreamRef,
    repository: &str,
    tree: &CommitFiles,
    policy: &ImagePolicy,
    policies: &[ImagePolicy],
) -> Result<Upstream, String> {
    let name = upstream.to_string();
    let places: Vec<(PathBuf, Vec<HelmPaths>)> = match upstream {
        UpstreamRef::Path { path, .. } => {
            let path = PathBuf::from(path);
            if !tree.is_file(&path) {
                return Err(format!("{name}: no such file in {repository}"));
            }
            vec![(path, Vec::new())]
        }
        UpstreamRef::Policy { name: up, .. } => {
            let up = policies
                .iter()
                .find(|p| &p.name == up)
                .ok_or_else(|| format!("{name}: not defined"))?;
            policy_files(up, repository, tree)
        }
        UpstreamRef::Application { .. } => return Err(format!("{name}: not in git")),
    };
    let mut runs: Vec<(String, Option<i64>, PathBuf)> = Vec::new();
    for (path, helm) in &places {
        if let Some((tag, since)) = running(tree, path, helm, policy)? {
            runs.push((tag, since, path.clone()));
        }
    }
    let Some((tag, _, _)) = runs.first() else {
        return Ok(Upstream {
            name,
            tag: None,
            since: None,
            verification: Verification::FromGit,
        });
    };
    if let Some((other, _, path)) = runs.iter().find(|(t, _, _)| t != tag) {
        return Err(format!(
            "{name}: its fields hold different tags ({tag} in {}, {other} in {})",
            runs[0].2.display(),
            path.display()
        ));
    }
    // Several files holding the tag: it runs everywhere since the last of them set it.
    let since = runs
        .iter()
        .map(|(_, since, _)| *since)
        .try_fold(i64::MIN, |latest, s| s.map(|s| latest.max(s)))
        .and_then(|s| Timestamp::from_second(s).ok());
    Ok(Upstream {
        name,
        tag: Some(tag.clone()),
        since,
        verification: Verification::FromGit,
    })
}

/// The files of `repository` a policy's targets name, with their Helm value paths.
fn policy_files(
    up: &ImagePolicy,
    repository: &str,
    tree: &CommitFiles,
) -> Vec<(PathBuf, Vec<HelmPaths>)> {
    let targets: Vec<_> = up
        .targets
        .iter()
        .filter(|t| t.repository.as_deref() == Some(repository))
        .collect();
    tree.manifests()
        .iter()
        .filter_map(|path| {
            let matching: Vec<_> = targets.iter().filter(|t| t.matches(path)).collect();
            (!matching.is_empty()).then(|| {
                let helm = matching.iter().filter_map(|t| t.helm.clone()).collect();
                (path.clone(), helm)
            })
        })
        .collect()
}

/// The tag `path` holds for the policy's image at the tip, and since when (the committer time
/// of the oldest version of the newest unbroken run holding it); `None` when the file holds no
/// field of the image.
fn running(
    tree: &CommitFiles,
    path: &Path,
    helm: &[HelmPaths],
    policy: &ImagePolicy,
) -> Result<Option<(String, Option<i64>)>, String> {
    let text = tree
        .read(path)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(|| format!("{}: cannot read", path.display()))?;
    let Some(tag) = tag_in(path, &text, helm, policy)? else {
        return Ok(None);
    };
    let display = path.to_string_lossy().replace('\\', "/");
    let versions = git::history::file_versions(tree, &display)
        .map_err(|e| format!("{display}: {}", crate::error_chain::chain(&e)))?;
    let mut since = None;
    for version in &versions {
        let held = match &version.text {
            Some(text) => tag_in(path, text, helm, policy).ok().flatten(),
            None => None,
        };
        if held.as_deref() != Some(tag.as_str()) {
            break;
        }
        since = Some(version.time);
    }
    Ok(Some((tag, since)))
}

/// The one tag `text` holds for the policy's image; an error when its fields disagree.
fn tag_in(
    path: &Path,
    text: &str,
    helm: &[HelmPaths],
    policy: &ImagePolicy,
) -> Result<Option<String>, String> {
    let fields = manifest::scan(path, text, helm)
        .map_err(|e| format!("{}: {}", path.display(), crate::error_chain::chain(&e)))?;
    let mut tags: Vec<&str> = fields
        .iter()
        .filter(|f| f.repository() == Some(&policy.image))
        .filter_map(|f| f.current().0)
        .collect();
    tags.dedup();
    match tags.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.to_string())),
        [first, second, ..] => Err(format!(
            "{}: its fields hold different tags ({first}, {second})",
            path.display()
        )),
    }
}
