//! Deciding a field of an environment that follows others (`promote:`, issue 20): the
//! candidate is the tag its upstreams run, verified and soaked ([`crate::promotion::decide`]),
//! never the registry's newest. The downstream's own rules still apply: its strategy orders
//! the tags (never backwards), its filters and the registry's listing say which it may take,
//! and its holds, and those of every environment above it, are honoured. Every field says what
//! it does in the plan's promotions section; a wait is also a hold naming why.

use super::held::Labels;
use super::{Asked, Found, ScannedFile, display_path};
use crate::change::{PromotionEvidence, UpstreamEvidence};
use crate::plan::decide::{DecideError, Outcome, version_text};
use crate::plan::model::{Plan, Promotion, PromotionStatus, UpstreamRun};
use crate::plan::reasons::{HoldReason, Wait};
use crate::plan::walk::policy_order;
use crate::policy::{ImagePolicy, Promote};
use crate::promotion::{self, Decision, Downstream, Evidence, Gathered, Verification};
use crate::registry::Registry;
use crate::select::{self, TagCandidate};

type Decided = (Result<Outcome, DecideError>, Option<Box<PromotionEvidence>>);

impl<R: Registry> Asked<'_, R> {
    /// Decides a promoting field: what its upstreams offer, within its own policy's rules.
    pub(super) async fn decide_promoted(
        &self,
        f: &Found<'_>,
        file: &ScannedFile,
        list: &[TagCandidate],
        promote: &Promote,
        plan: &mut Plan,
        labels: &mut Labels,
    ) -> Decided {
        let policy = &self.policies[f.field.policy];
        let (current_tag, current_digest) = f.field.facts.current();
        let mut row = Promotion {
            repository: None,
            policy: policy.name.clone(),
            image: policy.image.to_string(),
            file: display_path(&file.rel),
            line: f.field.line,
            current: version_text(current_tag, current_digest),
            upstreams: Vec::new(),
            status: PromotionStatus::Waits,
            tag: None,
            waits: Vec::new(),
            since: None,
            stage: 0,
        };
        let gathered = match self.promotions.by_policy.get(&policy.name) {
            Some(Ok(gathered)) => gathered,
            other => {
                let why = match other {
                    Some(Err(why)) => Wait::UpstreamsUnread(why.clone()),
                    // Upstreams are read for repository targets: the local directory is no
                    // base branch to count a soak time on.
                    _ => Wait::UpstreamsNotRead,
                };
                return wait(plan, row, vec![why]);
            }
        };
        row.upstreams = gathered.upstreams.iter().map(upstream_run).collect();
        row.since = gathered
            .since
            .get(&display_path(&file.rel))
            .map(|t| rfc3339(*t));
        row.stage = gathered.stage;
        let decision = self.decision(policy, current_tag, list, gathered, promote);
        match decision {
            Decision::UpToDate => {
                row.status = PromotionStatus::UpToDate;
                plan.promotions.push(row);
                (Ok(Outcome::Stay), None)
            }
            Decision::Wait(waits) => {
                wait(plan, row, waits.into_iter().map(Wait::Upstream).collect())
            }
            Decision::Promote { tag, evidence } => {
                // On a repository that pushes, a promotion (a pull request unless its policy
                // says `write: push`) is what blocks the tag offered.
                if let Some(repository) = &gathered.pushes {
                    let blocked = promotion::Waiting::PullRequestOnly {
                        tag,
                        repository: repository.clone(),
                    };
                    return wait(plan, row, vec![Wait::Upstream(blocked)]);
                }
                // The one tag the upstreams offer, through the policy's own decision (never
                // backwards, its own holds, digest pinning).
                let only: Vec<TagCandidate> =
                    list.iter().filter(|c| c.tag == tag).cloned().collect();
                let outcome = self.decide_held(f, file, &only, plan, labels).await;
                match &outcome {
                    Ok(Outcome::Move { .. }) => {
                        row.status = PromotionStatus::Promote;
                        row.tag = Some(tag);
                    }
                    Ok(Outcome::Stay) => row.status = PromotionStatus::UpToDate,
                    Ok(Outcome::Hold(why)) => row.waits.push(why.to_string()),
                    Err(e) => row.waits.push(crate::error_chain::chain(e)),
                }
                plan.promotions.push(row);
                (outcome, Some(Box::new(evidence_of(&evidence))))
            }
        }
    }

    /// What the upstreams offer the field, within the policy's rules. Not async: the rules are
    /// borrowed closures, which must not live across an await.
    fn decision(
        &self,
        policy: &ImagePolicy,
        current: Option<&str>,
        list: &[TagCandidate],
        gathered: &Gathered,
        promote: &Promote,
    ) -> Decision {
        // Order by the strategy alone: a tag the policy's filters refuse must still compare
        // above the current one, so that the wait says it is forbidden, not up to date.
        let unfiltered = unfiltered(policy);
        let order = |a: &str, b: &str| policy_order(&unfiltered, a, b);
        // The policy's own selection says which tags it may take, and why not the others
        // (out of range, ignored, not for its platforms, another variant family).
        let ranked = select::rank(policy, current, list);
        let allowed = |tag: &str| -> Result<(), promotion::Forbidden> {
            let excluded = match ranked.iter().find(|r| r.tag == tag) {
                Some(r) => r.excluded.clone(),
                // Not a candidate: the policy's filters keep it out, or the registry does not
                // list it. Ranking it alone says which.
                None => {
                    let alone = select::rank(policy, current, &[TagCandidate::new(tag)]);
                    match alone.into_iter().find_map(|r| r.excluded) {
                        Some(why) => Some(why),
                        None => {
                            return Err(Box::new(Refused::NotListed {
                                policy: policy.name.clone(),
                            }));
                        }
                    }
                }
            };
            match excluded {
                None => Ok(()),
                Some(why) => Err(Box::new(Refused::Excluded {
                    policy: policy.name.clone(),
                    why,
                })),
            }
        };
        // The tags held above, gathered per upstream (through a whole chain). Each passes down
        // as that tag alone: a person's rollback upstream blocks there every tag up to the one
        // rolled back from, but what the upstream runs after it is what it offers.
        let held = |tag: &str| gathered.held(tag);
        let downstream = Downstream {
            current,
            order: &order,
            allowed: &allowed,
            held: &held,
        };
        promotion::decide(
            &gathered.upstreams,
            promote.fan_in,
            promote.after,
            &downstream,
            self.promotions.now,
        )
    }
}

/// Why a promoting field's policy does not take a tag its upstreams offer.
#[derive(Debug, thiserror::Error)]
enum Refused {
    #[error("the registry does not list it for policy {policy}")]
    NotListed { policy: String },
    #[error("policy {policy}: {why}")]
    Excluded {
        policy: String,
        why: select::Exclusion,
    },
}

/// `policy` without the filters that keep tags out of its selection (range, `allowTags`,
/// `ignoreTags`): the order of its strategy alone.
fn unfiltered(policy: &ImagePolicy) -> ImagePolicy {
    let mut p = policy.clone();
    if let crate::policy::Strategy::Semver { range, .. } = &mut p.strategy {
        *range = None;
    }
    p.allow_tags = None;
    p.ignore_tags.clear();
    p.ignore_set = globset::GlobSet::empty();
    p
}

/// The field waits: a hold naming why, and its row in the promotions section.
fn wait(plan: &mut Plan, mut row: Promotion, waits: Vec<Wait>) -> Decided {
    row.status = PromotionStatus::Waits;
    row.waits = waits.iter().map(ToString::to_string).collect();
    let reason = HoldReason::PromotionWaits(waits);
    plan.promotions.push(row);
    (Ok(Outcome::Hold(reason)), None)
}

fn upstream_run(upstream: &promotion::Upstream) -> UpstreamRun {
    UpstreamRun {
        upstream: upstream.name.clone(),
        tag: upstream.tag.clone(),
        since: upstream.since.map(rfc3339),
        verification: verification_text(&upstream.verification),
    }
}

fn evidence_of(evidence: &[Evidence]) -> PromotionEvidence {
    PromotionEvidence {
        upstreams: evidence
            .iter()
            .map(|e| UpstreamEvidence {
                upstream: e.upstream.clone(),
                tag: e.tag.clone(),
                since: e.since.map(rfc3339),
                healthy_for: humantime::format_duration(std::time::Duration::from_secs(
                    e.healthy_for.as_secs(),
                ))
                .to_string(),
                verification: verification_text(&e.verification),
                healthy_since: match &e.verification {
                    Verification::Verified { at } => Some(*at),
                    Verification::FromGit => e.since,
                    Verification::Pending
                    | Verification::Failed { .. }
                    | Verification::Errored { .. } => None,
                },
            })
            .collect(),
    }
}

/// An upstream's verification as the report and the pull request say it.
pub(in crate::plan) fn verification_text(v: &Verification) -> String {
    match v {
        Verification::Verified { at } => format!("verified at {}", rfc3339(*at)),
        Verification::Pending => "not verified yet".to_string(),
        Verification::Failed { reason } => format!("failed: {reason}"),
        Verification::Errored { reason } => format!("ended in an error: {reason}"),
        Verification::FromGit => "on the base branch, no cluster access".to_string(),
    }
}

fn rfc3339(t: jiff::Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verification_words() {
        let at: jiff::Timestamp = "2026-11-25T10:00:00.5Z".parse().unwrap();
        assert_eq!(
            verification_text(&Verification::Verified { at }),
            "verified at 2026-11-25T10:00:00Z"
        );
        assert_eq!(
            verification_text(&Verification::Pending),
            "not verified yet"
        );
        let g = Gathered {
            upstreams: Vec::new(),
            held_above: vec![("1.2.0".into(), "failed in staging".into())],
            ..Default::default()
        };
        assert_eq!(g.held("1.2.0").as_deref(), Some("failed in staging"));
        assert_eq!(g.held("1.3.0"), None);
    }
}
