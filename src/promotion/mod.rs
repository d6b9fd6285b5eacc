//! Promotion between environments (issue 20), the pure decision: which tag an environment that
//! follows other environments may take now, or what it waits for.
//!
//! An environment follows one or more upstreams (an Argo CD Application, or a path or policy in
//! git). An upstream offers its tag once two things hold: it was verified there (issue 19's
//! verification; for an upstream without cluster access, "runs" means "is on its base branch"),
//! and it has stayed so for the soak time, counted from its verification (or, without cluster
//! access, from the commit that set it). With several upstreams the user chooses: `all` of them
//! run the tag, or `any` one does (then the newest such tag). The downstream's own policy still
//! decides: a tag it forbids, a tag held (there or upstream), or a move backwards is never taken,
//! and each is said as the reason it waits.
//!
//! Nothing here reads a clock, a cluster or git: the caller gathers each upstream's state and
//! hands in the policy's order and filters. What an upstream in git runs is read here too
//! ([`upstream`]), from the tree and the file versions the caller reads from git; what passes
//! down from the environments above ([`above`]: held tags through a chain, a git upstream's
//! verification) from the policies, holds, Applications and records the caller hands in.

pub mod above;
pub mod upstream;

use std::cmp::Ordering;
use std::fmt;
use std::time::Duration;

use jiff::Timestamp;

/// How several upstreams combine: the policy's `fanIn:`.
pub use crate::policy::FanIn;

/// What one upstream environment runs, as the caller found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// The upstream as the user named it (`argocd/shop-staging`, `staging/apps/api`).
    pub name: String,
    /// The tag it runs, if it runs the image at all.
    pub tag: Option<String>,
    /// Since when it runs that tag: the commit that set it on the base branch.
    pub since: Option<Timestamp>,
    pub verification: Verification,
}

/// Whether the upstream's tag was verified where it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// Verified healthy at this time (issue 19).
    Verified { at: Timestamp },
    /// Being verified, or not verified yet.
    Pending,
    /// Verification failed: the tag is held upstream, so it is held here too.
    Failed { reason: String },
    /// Its verification ended in an error (its Application could not be followed): not a
    /// verdict, so never read as verified; the promotion waits until a later one ends verified.
    Errored { reason: String },
    /// No cluster access: "runs" means "is on the base branch", and the soak time counts from
    /// the commit.
    FromGit,
}

/// What a cycle gathered of one promoting policy's upstreams (`promote.from`, in order), and
/// the tags held in an environment above it (failed or held there), with why.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gathered {
    pub upstreams: Vec<Upstream>,
    pub held_above: Vec<(String, String)>,
    /// Since when the environment's own files run the tag they hold (by path in the
    /// repository, `/`-separated), read as an upstream's are: what the report shows of it.
    pub since: std::collections::BTreeMap<String, Timestamp>,
    /// How many promoting links lie above the environment (0: it follows no environment that
    /// itself follows one), so the report lists a chain upstream first.
    pub stage: usize,
    /// The repository the environment is written to, when it writes by pushing and the
    /// policy's promotions are pull requests (no `promote.write: push`): a tag offered waits,
    /// naming it.
    pub pushes: Option<String>,
}

impl Gathered {
    /// Why `tag` is held above, if it is.
    pub fn held(&self, tag: &str) -> Option<String> {
        self.held_above
            .iter()
            .find(|(t, _)| t == tag)
            .map(|(_, why)| why.clone())
    }
}

/// Every promoting policy's upstreams as a cycle gathered them, by policy name, and the time
/// the cycle decides at. A promoting policy with no entry, or an `Err` (an upstream that could
/// not be read), waits: it never falls back to the registry.
#[derive(Debug, Clone, Default)]
pub struct Promotions {
    pub now: Timestamp,
    pub by_policy: std::collections::BTreeMap<String, Result<Gathered, Unread>>,
}

/// Why a promoting policy's upstreams could not be read: each error as the caller met it
/// (git, the cluster, the state store), shown with its causes, `; ` between them.
#[derive(Debug, Clone)]
pub struct Unread(pub Vec<std::sync::Arc<dyn std::error::Error + Send + Sync>>);

impl fmt::Display for Unread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            let error: &(dyn std::error::Error + 'static) = &**error;
            write!(f, "{}", crate::error_chain::Chain(error))?;
        }
        Ok(())
    }
}

/// Why the downstream's policy forbids a tag, as the caller says it (the policy's exclusion,
/// the registry's listing); shown in the wait.
pub type Forbidden = Box<dyn std::error::Error + Send + Sync>;

/// What a downstream environment's policy says about a tag.
pub struct Downstream<'a> {
    /// The tag the environment runs now.
    pub current: Option<&'a str>,
    /// The policy's order of two tags.
    pub order: &'a dyn Fn(&str, &str) -> Ordering,
    /// `Err(why)` when the policy forbids the tag (its range, allowed or ignored tags).
    pub allowed: &'a dyn Fn(&str) -> Result<(), Forbidden>,
    /// Why the tag is held for this environment, if it is (here, or in an environment above).
    pub held: &'a dyn Fn(&str) -> Option<String>,
}

/// One upstream's part in a promotion: what a pull request shows as evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub upstream: String,
    pub tag: String,
    /// Since when it runs the tag.
    pub since: Option<Timestamp>,
    /// How long it has been healthy since it was verified (since the commit, from git).
    pub healthy_for: Duration,
    pub verification: Verification,
}

/// What an environment may do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Take `tag`, with the evidence of the upstreams that offer it.
    Promote {
        tag: String,
        evidence: Vec<Evidence>,
    },
    /// It already runs the tag its upstreams offer (or a newer one).
    UpToDate,
    /// Nothing to take yet; why, per upstream or for the tag.
    Wait(Vec<Waiting>),
}

/// Why a promotion waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waiting {
    /// The upstream does not run the image.
    NotRunning { upstream: String },
    /// The upstream's tag is not verified yet.
    NotVerified { upstream: String, tag: String },
    /// The upstream's tag failed verification there.
    FailedUpstream {
        upstream: String,
        tag: String,
        reason: String,
    },
    /// The upstream's verification of the tag ended in an error.
    VerificationError {
        upstream: String,
        tag: String,
        reason: String,
    },
    /// The upstream's tag has not stayed healthy long enough.
    Soaking {
        upstream: String,
        tag: String,
        left: Duration,
    },
    /// `all` upstreams must run one tag, and they run different ones.
    Disagree { tags: Vec<(String, String)> },
    /// The downstream's policy forbids the tag.
    Forbidden { tag: String, why: String },
    /// The tag is held for this environment.
    Held { tag: String, why: String },
    /// The tag is offered, but a promotion is a pull request and the environment's repository
    /// writes by pushing.
    PullRequestOnly { tag: String, repository: String },
}

/// Decides what `downstream` may take from `upstreams` now.
pub fn decide(
    upstreams: &[Upstream],
    fan_in: FanIn,
    soak: Duration,
    downstream: &Downstream<'_>,
    now: Timestamp,
) -> Decision {
    // 1. What each upstream offers, or why it offers nothing yet.
    let mut offers: Vec<Evidence> = Vec::new();
    let mut waiting: Vec<Waiting> = Vec::new();
    for upstream in upstreams {
        match offer(upstream, soak, now) {
            Ok(evidence) => offers.push(evidence),
            Err(why) => waiting.push(why),
        }
    }
    // 2. The tags the upstreams agree on, newest first: with `all`, the one they all run;
    // with `any`, each that one of them offers.
    let tags: Vec<String> = match fan_in {
        FanIn::All => {
            if !waiting.is_empty() {
                return Decision::Wait(waiting);
            }
            let Some(first) = offers.first() else {
                return Decision::Wait(waiting);
            };
            if offers.iter().any(|o| o.tag != first.tag) {
                let tags = offers
                    .iter()
                    .map(|o| (o.upstream.clone(), o.tag.clone()))
                    .collect();
                return Decision::Wait(vec![Waiting::Disagree { tags }]);
            }
            vec![first.tag.clone()]
        }
        FanIn::Any => {
            let mut tags: Vec<String> = offers.iter().map(|o| o.tag.clone()).collect();
            tags.sort_by(|a, b| (downstream.order)(b, a));
            tags.dedup();
            if tags.is_empty() {
                return Decision::Wait(waiting);
            }
            tags
        }
    };
    // 3. The downstream's own rules: never backwards, never forbidden, never held. With `any`,
    // a tag refused here leaves the next one offered (an upstream behind the newest may run
    // one this environment may take).
    let mut refused = Vec::new();
    for tag in tags {
        if let Some(current) = downstream.current
            && (downstream.order)(&tag, current) != Ordering::Greater
        {
            break;
        }
        if let Err(why) = (downstream.allowed)(&tag) {
            let why = why.to_string();
            refused.push(Waiting::Forbidden { tag, why });
            continue;
        }
        if let Some(why) = (downstream.held)(&tag) {
            refused.push(Waiting::Held { tag, why });
            continue;
        }
        let evidence = offers.into_iter().filter(|o| o.tag == tag).collect();
        return Decision::Promote { tag, evidence };
    }
    match refused.is_empty() {
        true => Decision::UpToDate,
        false => Decision::Wait(refused),
    }
}

/// What one upstream offers now: its tag, once verified and soaked.
fn offer(upstream: &Upstream, soak: Duration, now: Timestamp) -> Result<Evidence, Waiting> {
    let name = upstream.name.clone();
    let Some(tag) = upstream.tag.clone() else {
        return Err(Waiting::NotRunning { upstream: name });
    };
    let healthy_from = match &upstream.verification {
        Verification::Verified { at } => *at,
        Verification::FromGit => match upstream.since {
            Some(since) => since,
            None => {
                return Err(Waiting::NotVerified {
                    upstream: name,
                    tag,
                });
            }
        },
        Verification::Pending => {
            return Err(Waiting::NotVerified {
                upstream: name,
                tag,
            });
        }
        Verification::Failed { reason } => {
            return Err(Waiting::FailedUpstream {
                upstream: name,
                tag,
                reason: reason.clone(),
            });
        }
        Verification::Errored { reason } => {
            return Err(Waiting::VerificationError {
                upstream: name,
                tag,
                reason: reason.clone(),
            });
        }
    };
    let healthy_for = Duration::try_from(now.duration_since(healthy_from)).unwrap_or_default();
    if healthy_for < soak {
        return Err(Waiting::Soaking {
            upstream: name,
            tag,
            left: soak - healthy_for,
        });
    }
    Ok(Evidence {
        upstream: name,
        tag,
        since: upstream.since,
        healthy_for,
        verification: upstream.verification.clone(),
    })
}

impl fmt::Display for Waiting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let human = |d: &Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
        match self {
            Waiting::NotRunning { upstream } => write!(f, "{upstream} does not run the image"),
            Waiting::NotVerified { upstream, tag } => {
                write!(f, "{tag} is not verified in {upstream} yet")
            }
            Waiting::FailedUpstream {
                upstream,
                tag,
                reason,
            } => {
                write!(f, "{tag} failed in {upstream}: {reason}")
            }
            Waiting::VerificationError {
                upstream,
                tag,
                reason,
            } => {
                write!(
                    f,
                    "{tag}'s verification in {upstream} ended in an error: {reason}"
                )
            }
            Waiting::Soaking {
                upstream,
                tag,
                left,
            } => {
                write!(f, "{tag} soaks in {upstream}: {} left", human(left))
            }
            Waiting::Disagree { tags } => {
                let each: Vec<String> = tags.iter().map(|(u, t)| format!("{u} runs {t}")).collect();
                write!(f, "the upstreams run different tags ({})", each.join(", "))
            }
            Waiting::Forbidden { tag, why } => write!(f, "{tag} is not allowed here: {why}"),
            Waiting::Held { tag, why } => write!(f, "{tag} is held: {why}"),
            Waiting::PullRequestOnly { tag, repository } => write!(
                f,
                "{tag} is ready to promote, but a promotion is a pull request, and repository \
                 {repository} writes by pushing (set its write.mode: pull-request, or \
                 promote.write: push)"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
