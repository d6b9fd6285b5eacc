//! What passes down to a promoting environment from the environments above it (issue 20): the
//! tags held there (failed, rolled back by a person, held by hand), through a whole chain, and
//! whether an upstream's change in git is still being verified.
//!
//! An upstream is read as the fields it runs its tag in ([`Behind`]): a `policy:` upstream,
//! every field of that policy; a `path:` upstream, every field of that file and the
//! whole-policy holds of the policies whose targets write it; an Application, the failures
//! verified in it, the policies of its own `image-list`, the fields of the files its sources
//! contain and the whole-policy holds of the policies whose targets may write there. The policies behind an upstream that promote in turn bring their own
//! upstreams, so a tag held in dev is held for prod. Each hold passes down as its own tag
//! only: a rollback upstream blocks there every tag up to the one rolled back from, but the
//! tag the upstream runs after it is what it offers.

use std::collections::BTreeSet;
use std::path::Path;

use jiff::Timestamp;

use super::GatherError;
use crate::affected::{contains_file, normalise_url, source_deploys};
use crate::argocd::resolve::Resolved;
use crate::git::RepositoryConfig;
use crate::holds::{FieldKey, HeldTag, HoldReason, Holds, hold_reason};
use crate::image::Repository;
use crate::policy::{ImagePolicy, Upstream as UpstreamRef};
use crate::promotion::Verification;
use crate::state::{State, StateError};

/// The fields an upstream runs its tag in, as holds and verifications name fields.
#[derive(Debug, Default)]
pub(super) struct Behind {
    /// Policies all of whose fields are the upstream's.
    whole: BTreeSet<String>,
    /// Files (repository, path) that are the upstream's.
    files: BTreeSet<(String, String)>,
    /// Directories (repository, path) an Application's sources deploy.
    dirs: BTreeSet<(String, String)>,
    /// Policies writing those files: their whole-policy holds (an Application's annotation).
    writers: BTreeSet<String>,
    /// Applications (`namespace/name`) whose failed verifications pass down.
    applications: BTreeSet<String>,
}

impl Behind {
    /// Whether `key` is one of the upstream's fields.
    pub(super) fn has(&self, key: &FieldKey) -> bool {
        let in_files = key.repository.as_ref().is_some_and(|repo| {
            !key.file.is_empty()
                && (self.files.contains(&(repo.clone(), key.file.clone()))
                    || self
                        .dirs
                        .iter()
                        .any(|(r, dir)| r == repo && contains_file(dir, &key.file)))
        });
        self.whole.contains(&key.policy)
            || in_files
            || (key.is_whole_policy() && self.writers.contains(&key.policy))
    }

    fn holds(&self, held: &HeldTag) -> bool {
        let failed_here = matches!(&held.reason, HoldReason::Failed { application, .. }
            if self.applications.contains(application));
        failed_here || self.has(&held.key)
    }

    /// The promoting policies behind it.
    fn policies(&self) -> impl Iterator<Item = &String> {
        self.whole.iter().chain(&self.writers)
    }

    fn extend(&mut self, other: Behind) {
        self.whole.extend(other.whole);
        self.files.extend(other.files);
        self.dirs.extend(other.dirs);
        self.writers.extend(other.writers);
        self.applications.extend(other.applications);
    }
}

/// What a cycle knows of the environments above a promoting one.
pub(super) struct Above<'a> {
    pub policies: &'a [ImagePolicy],
    pub holds: &'a Holds,
    pub resolved: Option<&'a Resolved>,
    pub repositories: &'a [RepositoryConfig],
    /// Argo CD's namespace: an Application upstream's when it names none.
    pub namespace: &'a str,
}

impl Above<'_> {
    /// The fields behind `upstream` of a policy that promotes into `repository`.
    pub(super) fn behind(&self, upstream: &UpstreamRef, repository: &str) -> Behind {
        let mut behind = Behind::default();
        match upstream {
            UpstreamRef::Policy { name, .. } => {
                behind.whole.insert(name.clone());
            }
            UpstreamRef::Path {
                path,
                repository: repo,
            } => {
                let repo = repo.as_deref().unwrap_or(repository);
                behind.writers = self
                    .policies
                    .iter()
                    .filter(|p| {
                        p.targets.iter().any(|t| {
                            t.repository.as_deref() == Some(repo) && t.matches(Path::new(path))
                        })
                    })
                    .map(|p| p.name.clone())
                    .collect();
                behind.files.insert((repo.to_string(), path.clone()));
            }
            UpstreamRef::Application { name, namespace } => {
                let namespace = namespace.as_deref().unwrap_or(self.namespace);
                let id = format!("{namespace}/{name}");
                let is_it = |app: &crate::application::Application| {
                    app.metadata.name == *name
                        && app.metadata.namespace.as_deref().unwrap_or(self.namespace) == namespace
                };
                if let Some(resolved) = self.resolved {
                    for managed in resolved.apps.iter().filter(|m| is_it(&m.app)) {
                        let own = managed.policies.iter().flatten();
                        behind.whole.extend(own.map(|p| p.name.clone()));
                    }
                    for app in resolved.deployers.apps().iter().filter(|a| is_it(a)) {
                        for (i, source) in app.sources().into_iter().enumerate() {
                            let url = normalise_url(&source.repo_url);
                            let repo = self
                                .repositories
                                .iter()
                                .find(|r| normalise_url(&r.url) == url);
                            let Some(repo) = repo else { continue };
                            // A `ref:` source deploys only the value files its siblings name.
                            let deploys = source_deploys(app, i);
                            for file in deploys.value_files {
                                behind.writers.extend(self.writers_under(&repo.name, &file));
                                behind.files.insert((repo.name.clone(), file));
                            }
                            if let Some(dir) = deploys.dir {
                                // The policies writing what it deploys: their own upstreams
                                // are the chain above this Application.
                                behind.writers.extend(self.writers_under(&repo.name, &dir));
                                behind.dirs.insert((repo.name.clone(), dir));
                            }
                        }
                    }
                }
                behind.applications.insert(id);
            }
        }
        behind
    }

    /// The policies with a target that may write under `dir` of the repository `repo`.
    fn writers_under<'p>(
        &'p self,
        repo: &'p str,
        dir: &'p str,
    ) -> impl Iterator<Item = String> + 'p {
        self.policies
            .iter()
            .filter(move |p| {
                p.targets
                    .iter()
                    .any(|t| t.repository.as_deref() == Some(repo) && t.may_write_under(dir))
            })
            .map(|p| p.name.clone())
    }

    /// The fields behind `upstream` and every environment above it, and how many promoting
    /// links lie above (`0`: none of the policies behind it promotes).
    pub(super) fn chain(&self, upstream: &UpstreamRef, repository: &str) -> (Behind, usize) {
        let mut all = self.behind(upstream, repository);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut level: Vec<String> = all.policies().cloned().collect();
        let mut stage = 0;
        loop {
            let promoting: Vec<&ImagePolicy> = level
                .iter()
                .filter(|name| seen.insert((*name).clone()))
                .filter_map(|name| self.policies.iter().find(|p| &p.name == name))
                .filter(|p| p.promote.is_some())
                .collect();
            if promoting.is_empty() {
                return (all, stage);
            }
            stage += 1;
            let mut next = Vec::new();
            for p in promoting {
                let repo = p
                    .targets
                    .iter()
                    .find_map(|t| t.repository.as_deref())
                    .unwrap_or(repository);
                for up in p.promote.iter().flat_map(|pr| &pr.from) {
                    let behind = self.behind(up, repo);
                    next.extend(behind.policies().cloned());
                    all.extend(behind);
                }
            }
            level = next;
        }
    }

    /// The tags held in `behind` for `image`, with why; `Err` when the holds are unknown (the
    /// state store could not be read): never read as "none held".
    pub(super) fn held(
        &self,
        behind: &Behind,
        image: &Repository,
    ) -> Result<Vec<(String, String)>, GatherError> {
        if let Some(why) = self.holds.unknown_because() {
            return Err(GatherError::HeldUnknown {
                why: why.to_string(),
            });
        }
        Ok(self
            .holds
            .all()
            .into_iter()
            .filter(|h| self.of_image(&h.key.policy, image) && behind.holds(h))
            .map(|h| {
                let why = format!("in policy {}: {}", h.key.policy, hold_reason(h, &h.tag));
                (h.tag.clone(), why)
            })
            .collect())
    }

    /// The tags that failed verification in the Application `id`, with why.
    pub(super) fn failed_in(&self, id: &str, image: &Repository) -> Vec<(String, String)> {
        self.holds
            .all()
            .into_iter()
            .filter(|h| self.of_image(&h.key.policy, image))
            .filter_map(|h| match &h.reason {
                HoldReason::Failed {
                    application,
                    failure,
                } if application == id => {
                    Some((h.tag.clone(), format!("failed in {id}: {failure}")))
                }
                _ => None,
            })
            .collect()
    }

    /// Whether `policy` follows `image`; a policy this cycle does not know counts, so that a
    /// hold is never dropped for want of its policy.
    fn of_image(&self, policy: &str, image: &Repository) -> bool {
        let known = self.policies.iter().find(|p| p.name == policy).or_else(|| {
            let apps = self.resolved.iter().flat_map(|r| &r.apps);
            apps.flat_map(|m| m.policies.iter().flatten())
                .find(|p| p.name == policy)
        });
        known.is_none_or(|p| &p.image == image)
    }
}

/// Whether a `path:` or `policy:` upstream's tag, on its base branch since `since`, was
/// verified where it runs (issue 19's records): under way, not yet; ended in an error after
/// `since` (on any of its fields), errored: never read as verified, until a later
/// verification of that field ends verified and replaces the record; verified after `since`,
/// from then; otherwise no verification followed it, and the soak counts from the commit. (A
/// tag whose verification failed is held, and passes down as a hold.)
pub(super) fn verification_in_git(
    state: &State,
    behind: &Behind,
    image: &Repository,
    tag: &str,
    since: Option<Timestamp>,
) -> Result<Verification, StateError> {
    let image_text = image.to_string();
    let pending = state.verifications()?;
    let under_way = pending.iter().flat_map(|v| &v.fields).any(|f| {
        f.to == tag && behind.has(&f.key) && (f.image.is_empty() || f.image == image_text)
    });
    if under_way {
        return Ok(Verification::Pending);
    }
    let verified = state.verified_tags()?;
    let ended: Vec<_> = verified
        .iter()
        .filter(|v| v.tag == tag && behind.has(&v.key))
        .filter(|v| since.is_none_or(|since| v.at >= since))
        .collect();
    let errored = ended
        .iter()
        .filter_map(|v| Some((v.at, v.error.as_deref()?)))
        .max_by_key(|(at, _)| *at);
    if let Some((_, error)) = errored {
        return Ok(Verification::Errored {
            reason: error.to_string(),
        });
    }
    Ok(match ended.iter().map(|v| v.at).max() {
        Some(at) => Verification::Verified { at },
        None => Verification::FromGit,
    })
}
