//! What each promoting policy's upstreams run (issue 20), gathered before a repository target
//! is planned and handed to the planner as data ([`crate::promotion::Promotions`]): the planner
//! decides, this reads git, the cluster and the state store.
//!
//! For an upstream in git (`path:` or `policy:`), "runs" means "is on the base branch": what its
//! files hold, as [`crate::promotion::upstream`] reads them from the tree and the file versions
//! fetched here. The soak time counts from there. A promotion is a pull request
//! unless its policy says `write: push`: on a repository that pushes, the upstreams are still
//! read and shown, and a tag they offer waits, named. Anything that cannot be read (an
//! unknown repository, a file without the image, fields that disagree) makes the policy wait
//! with the reason; it never falls back to the registry.
//!
//! Only gathering lives here: what passes down from the environments above (held tags, the
//! chain, a git upstream's verification) is decided by [`crate::promotion::above`] over the
//! policies, holds, Applications and state-store records this hands it.

mod application;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::Timestamp;

use crate::argocd::resolve::Resolved;
use crate::git::{self, CommitFiles, RepoCache, RepositoryConfig, WriteMode};
use crate::holds::Holds;
use crate::kubernetes::{Cluster, KubeError};
use crate::policy::{ImagePolicy, Upstream as UpstreamRef};
use crate::promotion::above::{Above, AboveError, Ended, Managed, Verifying};
use crate::promotion::upstream::{self, Cause, UpstreamError, Version};
use crate::promotion::{Gathered, Promotions, Unread, Upstream};
use crate::state::{PendingVerification, State, StateError, VerifiedTag};
use crate::verification::ObservedError;

/// Why an upstream could not be read: the promotion waits, naming it.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("repository {name}")]
    Snapshot {
        name: String,
        #[source]
        source: git::GitError,
    },
    #[error("repository {name}: no clone cache")]
    NoCache { name: String },
    #[error("repository {name} is not configured in tagpilot.yaml")]
    NotConfigured { name: String },
    #[error("repository {name}: not read")]
    NotRead { name: String },
    /// A repository that could not be read, for each upstream in it.
    #[error(transparent)]
    Repository(Arc<GatherError>),
    /// What the upstream's files hold cannot be read.
    #[error(transparent)]
    Files(#[from] UpstreamError),
    #[error("{upstream}: verifications unknown")]
    VerificationsUnknown {
        upstream: String,
        #[source]
        source: Box<StateError>,
    },
    /// What is held above cannot be said (the held tags are unknown).
    #[error(transparent)]
    Above(#[from] AboveError),
    #[error(
        "{upstream}: an Application upstream is read from the cluster, and this cycle has no \
         access to one (applications.fromCluster)"
    )]
    NoCluster { upstream: String },
    #[error(
        "{upstream}: the tags that failed there are kept in the state store, and this cycle has \
         none (--state-dir): held tags unknown"
    )]
    NoState { upstream: String },
    #[error("{upstream}")]
    Cluster {
        upstream: String,
        #[source]
        source: Box<KubeError>,
    },
    #[error("{upstream}: no such Application")]
    NoApplication { upstream: String },
    #[error("{upstream}")]
    Observed {
        upstream: String,
        #[source]
        source: ObservedError,
    },
    #[error("{upstream}")]
    State {
        upstream: String,
        #[source]
        source: Box<StateError>,
    },
    #[error("verifications under way unknown")]
    Verifying(#[source] Box<StateError>),
}

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
    /// Whether what the cycle first sees (an Application upstream first `Healthy`) is
    /// recorded in the state store: never in a dry run, which reads the store only.
    pub record: bool,
}

impl<'a> Sources<'a> {
    /// What a cycle reads upstreams from: its clone cache, repositories, cluster, state store
    /// and Applications, deciding at the cycle's clock's time of day; recording what it first
    /// sees unless `dry_run`.
    pub(super) fn of<R>(
        input: &'a super::Input<'a>,
        ctx: &'a super::Context<'a, R>,
        resolved: Option<&'a Resolved>,
        dry_run: bool,
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
            record: !dry_run,
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
    let promotes_here = |p: &&ImagePolicy| {
        p.promote.is_some()
            && p.targets
                .iter()
                .any(|t| t.repository.as_deref() == Some(target.name.as_str()))
    };
    if !policies.iter().any(|p| promotes_here(&p)) {
        // Nothing to gather: the Applications are not gone through for every target.
        return Promotions {
            now: sources.now,
            by_policy: BTreeMap::new(),
        };
    }
    let managed: Vec<Managed<'_>> = sources
        .resolved
        .iter()
        .flat_map(|r| &r.apps)
        .map(|m| Managed {
            app: &m.app,
            policies: &m.policies,
        })
        .collect();
    let above = Above {
        policies,
        holds,
        managed: &managed,
        deployers: sources.resolved.map_or(&[][..], |r| r.deployers.apps()),
        repositories: sources.repositories,
        namespace: sources.namespace,
    };
    let mut by_policy = BTreeMap::new();
    let mut trees: HashMap<String, Result<CommitFiles, Arc<GatherError>>> = HashMap::new();
    for policy in policies.iter().filter(promotes_here) {
        let Some(promote) = &policy.promote else {
            continue;
        };
        let pushes = target.write.mode == WriteMode::Push && !promote.push;
        let mut gathered = Gathered {
            since: upstream::own_since(policy, &target.name, files, &history(files)),
            pushes: pushes.then(|| target.name.clone()),
            ..Gathered::default()
        };
        let mut failed: Vec<GatherError> = Vec::new();
        for upstream in &promote.from {
            let (behind, stage) = above.chain(upstream, &target.name);
            gathered.stage = gathered.stage.max(stage);
            match above.held(&behind, &policy.image) {
                Ok(held) => gathered.held_above.extend(held),
                Err(why) => failed.push(why.into()),
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
                    tree.and_then(|tree| {
                        let policies = (policy, policies);
                        Ok(upstream::from_git(
                            upstream,
                            name,
                            tree,
                            policies,
                            &history(tree),
                        )?)
                    })
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
            false => Err(Unread(
                failed
                    .into_iter()
                    .map(|e| -> Arc<dyn std::error::Error + Send + Sync> { Arc::new(e) })
                    .collect(),
            )),
        };
        by_policy.insert(policy.name.clone(), entry);
    }
    Promotions {
        now: sources.now,
        by_policy,
    }
}

/// A git upstream's verification: with a state store, whether its change is verified where it
/// runs ([`crate::promotion::above::verification_in_git`], over the store's records); without
/// one, the soak counts from the commit.
fn verified_in_git(
    mut read: Upstream,
    upstream: &UpstreamRef,
    repository: &str,
    policy: &ImagePolicy,
    sources: &Sources<'_>,
    above: &Above<'_>,
) -> Result<Upstream, GatherError> {
    let (Some(state), Some(tag)) = (sources.state, read.tag.as_deref()) else {
        return Ok(read);
    };
    let unknown = |source| GatherError::VerificationsUnknown {
        upstream: read.name.clone(),
        source: Box::new(source),
    };
    let pending = state.verifications().map_err(unknown)?;
    let verified = state.verified_tags().map_err(unknown)?;
    let behind = above.behind(upstream, repository);
    let records = (&under_way(&pending)[..], &ended(&verified)[..]);
    read.verification = crate::promotion::above::verification_in_git(
        records,
        &behind,
        &policy.image,
        tag,
        read.since,
    );
    Ok(read)
}

/// The fields of the verifications under way, as the promotion decisions read them.
fn under_way(pending: &[PendingVerification]) -> Vec<Verifying<'_>> {
    pending
        .iter()
        .flat_map(|v| &v.fields)
        .map(|f| Verifying {
            key: &f.key,
            image: &f.image,
            to: &f.to,
        })
        .collect()
}

/// The verifications that ended, as the promotion decisions read them.
fn ended(verified: &[VerifiedTag]) -> Vec<Ended<'_>> {
    verified
        .iter()
        .map(|v| Ended {
            key: &v.key,
            tag: &v.tag,
            at: v.at,
            error: v.error.as_deref(),
        })
        .collect()
}

/// The versions of a file on `tree`'s first-parent line, as git's history reads them.
fn history(tree: &CommitFiles) -> impl Fn(&str) -> Result<Vec<Version>, Cause> + '_ {
    move |path| {
        let versions = git::history::file_versions(tree, path)?;
        Ok(versions
            .into_iter()
            .map(|v| Version {
                time: v.time,
                text: v.text,
            })
            .collect())
    }
}

/// Another configured repository's base tip, fetched once per target.
async fn other_tree<'t>(
    name: &str,
    sources: &Sources<'_>,
    trees: &'t mut HashMap<String, Result<CommitFiles, Arc<GatherError>>>,
) -> Result<&'t CommitFiles, GatherError> {
    if !trees.contains_key(name) {
        let name = name.to_string();
        let fetched = match (
            sources.cache,
            sources.repositories.iter().find(|r| r.name == name),
        ) {
            (Some(cache), Some(repo)) => {
                git::snapshot(cache, repo)
                    .await
                    .map_err(|source| GatherError::Snapshot {
                        name: name.clone(),
                        source,
                    })
            }
            (None, _) => Err(GatherError::NoCache { name: name.clone() }),
            (_, None) => Err(GatherError::NotConfigured { name: name.clone() }),
        };
        trees.insert(name, fetched.map_err(Arc::new));
    }
    match trees.get(name) {
        Some(Ok(tree)) => Ok(tree),
        Some(Err(why)) => Err(GatherError::Repository(why.clone())),
        None => Err(GatherError::NotRead {
            name: name.to_string(),
        }),
    }
}
