//! The events a cycle's outcome holds: changes written (pushed, or a pull request opened or
//! updated), promotions written and waiting, holds found (a person's rollback), candidates
//! refused (a signature, a platform, `minAge`), and registries or remotes that fail for
//! longer than `unreachableAfter` ([`Outages`]). Pure over the cycle's model, but for the
//! outages' memory; whether an event was told before is the sender's business (by its id).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use jiff::Timestamp;

use crate::change::Change;
use crate::config::repository::{Grouping, RepositoryConfig};
use crate::engine::Cycle;
use crate::plan::{HoldReason, PromotionStatus, RepositoryOutcome, RepositoryStatus};
use crate::registry::ResponseCount;
use crate::select::SkipReason;

use super::event::{Kind, Notice};

/// Every event `cycle` holds, as of `now`.
pub fn from_cycle(cycle: &Cycle, repositories: &[RepositoryConfig], now: Timestamp) -> Vec<Notice> {
    let mut out = Vec::new();
    for change in &cycle.plan.changes {
        out.extend(written(cycle, repositories, change, now));
    }
    for held in &cycle.plan.holds_found {
        let mut n = Notice::new(Kind::Held, held.since);
        n.repository = held.key.repository.clone();
        n.policy = Some(held.key.policy.clone());
        n.from = Some(held.tag.clone());
        n.why = Some(held.reason.to_string());
        if let crate::holds::HoldReason::RolledBack {
            to, commit, author, ..
        } = &held.reason
        {
            n.to = Some(to.clone());
            n.link = Some(commit.clone());
            n.by = Some(author.clone());
        }
        out.push(n.with_id(None));
    }
    for p in &cycle.plan.promotions {
        if p.status != PromotionStatus::Waits {
            continue;
        }
        let mut n = Notice::new(Kind::PromotionWaiting, now);
        n.repository = p.repository.clone();
        n.policy = Some(p.policy.clone());
        n.image = Some(p.image.clone());
        n.from = Some(p.current.clone());
        n.to = p.tag.clone();
        n.why = Some(p.waits.join("; "));
        out.push(n.with_id(None));
    }
    out.extend(refused(cycle, now));
    out
}

/// A change written: pushed (the repository's last commit), or in a pull request opened or
/// updated this cycle. A pull request found as it was tells nothing new.
fn written(
    cycle: &Cycle,
    repositories: &[RepositoryConfig],
    change: &Change,
    now: Timestamp,
) -> Option<Notice> {
    let name = change.repository.as_deref()?;
    let outcome: &RepositoryOutcome = cycle.repositories.iter().find(|r| r.repository == name)?;
    let link = match outcome.status {
        RepositoryStatus::Pushed => outcome.commits.last()?.id.clone(),
        RepositoryStatus::PullRequests => {
            let grouping = repositories
                .iter()
                .find(|r| r.name == name)
                .map(|r| r.write.group)
                .unwrap_or_default();
            // Opened, taken over or updated this cycle; one found as it was told nothing new.
            let pr = outcome.pull_requests.iter().find(|pr| {
                ["opened", "taken over", "updated"]
                    .iter()
                    .any(|s| pr.status.starts_with(s))
                    && match grouping {
                        Grouping::Repository => true,
                        // Policy names never hold the instance separator, so any name that
                        // does is a pattern's image.
                        Grouping::Policy | Grouping::Pattern => {
                            pr.group
                                == crate::change::group_key(grouping, &change.policy, &|_| true)
                        }
                        Grouping::Path => pr.group == change.file,
                    }
            })?;
            pr.url
                .clone()
                .or_else(|| pr.reference.clone())
                .unwrap_or_else(|| pr.branch.clone())
        }
        _ => return None,
    };
    let kind = if change.promotion.is_some() {
        Kind::PromotionWritten
    } else {
        Kind::UpdateWritten
    };
    let mut n = Notice::new(kind, now);
    n.repository = Some(name.to_string());
    n.policy = Some(change.policy.clone());
    n.image = Some(change.image.clone());
    n.from = Some(change.from.clone());
    n.to = Some(change.to.clone());
    n.link = Some(link);
    Some(n.with_id(None))
}

/// Newer tags refused: the first tag selection passed over per policy and image (a signature,
/// a platform), and `minAge` holds.
pub(crate) fn refused(cycle: &Cycle, now: Timestamp) -> Vec<Notice> {
    let mut out = Vec::new();
    for skipped in &cycle.plan.skipped_tags {
        let Some(first) = skipped.tags.first() else {
            continue;
        };
        let reason = match first.0.reason {
            SkipReason::MissingPlatforms { .. } | SkipReason::PlatformsUnknown => "platform",
            _ => "signature",
        };
        let mut n = Notice::new(Kind::CandidateRefused, now);
        n.repository = skipped.repository.clone();
        n.policy = Some(skipped.policy.clone());
        n.image = Some(skipped.image.clone());
        n.to = Some(first.0.tag.clone());
        n.why = Some(first.0.reason.to_string());
        n.reason = Some(reason);
        out.push(n.with_id(None));
    }
    for hold in &cycle.plan.holds {
        let HoldReason::Selection(crate::select::HoldReason::TooYoung { tag, .. }) = &hold.reason
        else {
            continue;
        };
        let mut n = Notice::new(Kind::CandidateRefused, now);
        n.repository = hold.repository.clone();
        n.policy = Some(hold.policy.clone());
        n.from = Some(hold.current.clone());
        n.to = Some(tag.clone());
        n.why = Some(hold.reason.to_string());
        n.reason = Some("minAge");
        out.push(n.with_id(None));
    }
    out
}

/// The events of a change followed in an Application (`kind`: verified, failed, held,
/// reverted, merged), one per field it moved; `why`: the failure.
pub fn of_verification(
    kind: Kind,
    pending: &crate::state::PendingVerification,
    why: Option<&str>,
    now: Timestamp,
) -> Vec<Notice> {
    pending
        .fields
        .iter()
        .map(|field| {
            let mut n = Notice::new(kind, now);
            n.repository = Some(pending.repository.clone());
            n.policy = Some(field.key.policy.clone());
            n.image = (!field.image.is_empty()).then(|| field.image.clone());
            n.from = Some(field.from.clone());
            n.to = Some(field.to.clone());
            n.link = Some(pending.commit.clone());
            n.by = Some(pending.application.clone());
            n.why = why.map(str::to_string);
            n.with_id(None)
        })
        .collect()
}

/// Since when each registry and remote has failed, and whether that was told: an outage is
/// told once it lasts `after`, and its end once it was told.
#[derive(Debug, Default)]
pub struct Outages {
    inner: Mutex<OutagesInner>,
}

#[derive(Debug, Default)]
struct OutagesInner {
    /// (`registry` or `remote`, name) → (failing since, told).
    down: BTreeMap<(&'static str, String), (Timestamp, bool)>,
    /// The registry client's response counts when last taken (they only grow).
    seen: BTreeMap<(String, &'static str, String), u64>,
    /// Whether each was up when last heard of.
    known: BTreeMap<(&'static str, String), bool>,
}

impl Outages {
    /// What this cycle's answers (`responses`, the registry client's running counts) and
    /// repository outcomes say of each registry and remote, as events.
    pub fn observe(
        &self,
        responses: &[ResponseCount],
        cycle: Option<&Cycle>,
        after: Duration,
        now: Timestamp,
    ) -> Vec<Notice> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut asked: BTreeMap<String, bool> = BTreeMap::new();
        for r in responses {
            let key = (r.registry.clone(), r.request, r.status.clone());
            let before = inner.seen.insert(key, r.count).unwrap_or(0);
            if r.count > before {
                *asked.entry(r.registry.clone()).or_default() |=
                    crate::run::metrics::reachable(&r.status);
            }
        }
        let mut seen: Vec<((&'static str, String), bool)> = asked
            .into_iter()
            .map(|(name, up)| (("registry", name), up))
            .collect();
        if let Some(cycle) = cycle {
            for r in &cycle.repositories {
                seen.push((("remote", r.repository.clone()), r.error.is_none()));
            }
        }
        let mut out = Vec::new();
        for (key, up) in seen {
            inner.known.insert(key.clone(), up);
            out.extend(inner.judge(key, up, after, now));
        }
        out
    }

    /// Each registry and remote heard of: (`registry` or `remote`, name, up, failing since).
    pub fn endpoints(&self) -> Vec<(&'static str, String, bool, Option<Timestamp>)> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner
            .known
            .iter()
            .map(|(key, up)| {
                let since = inner.down.get(key).map(|(since, _)| *since);
                (key.0, key.1.clone(), *up, since)
            })
            .collect()
    }
}

impl OutagesInner {
    fn judge(
        &mut self,
        key: (&'static str, String),
        up: bool,
        after: Duration,
        now: Timestamp,
    ) -> Option<Notice> {
        let notice = |kind, since: Timestamp, at| {
            let mut n = Notice::new(kind, at);
            n.repository = (key.0 == "remote").then(|| key.1.clone());
            n.image = (key.0 == "registry").then(|| key.1.clone());
            n.reason = Some(key.0);
            n.why = Some(format!(
                "{} {} failing since {since}",
                key.0,
                key.1.as_str()
            ));
            n.with_id(Some(since))
        };
        if up {
            let (since, told) = self.down.remove(&key)?;
            return told.then(|| notice(Kind::Recovered, since, now));
        }
        let (since, told) = self.down.entry(key.clone()).or_insert((now, false));
        let lasted = now.duration_since(*since);
        if *told
            || lasted < jiff::SignedDuration::try_from(after).unwrap_or(jiff::SignedDuration::MAX)
        {
            return None;
        }
        *told = true;
        let since = *since;
        Some(notice(Kind::Unreachable, since, since))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{CommitSummary, Promotion, PullRequestSummary};

    fn change(repository: &str, policy: &str, to: &str) -> Change {
        Change {
            repository: Some(repository.into()),
            policy: policy.into(),
            image: "ghcr.io/shop/api".into(),
            file: "apps/api.yaml".into(),
            line: 7,
            field: "Deployment/api container api".into(),
            strategy: "semver",
            from: "1.0.0".into(),
            to: to.into(),
            source: None,
            labels: Vec::new(),
            promotion: None,
        }
    }

    fn outcome(name: &str, status: RepositoryStatus) -> RepositoryOutcome {
        RepositoryOutcome {
            repository: name.into(),
            url: format!("https://git.example/{name}"),
            branch: "main".into(),
            status,
            sources: Vec::new(),
            commits: Vec::new(),
            pull_requests: Vec::new(),
            error: None,
        }
    }

    fn pull_request(status: &str, number: u64) -> PullRequestSummary {
        PullRequestSummary {
            group: "all".into(),
            branch: "tagpilot/all".into(),
            status: status.into(),
            number: Some(number),
            reference: Some(format!("#{number}")),
            url: Some(format!("https://git.example/pull/{number}")),
            warnings: Vec::new(),
        }
    }

    #[test]
    fn a_cycle_tells_what_it_wrote_waits_for_and_found_held_never_an_unchanged_pull_request() {
        let mut cycle = Cycle::default();
        cycle.plan.changes = vec![
            change("pushed", "api", "1.1.0"),
            change("rebuilt", "web", "2.1.0"),
            change("unchanged", "db", "3.1.0"),
        ];
        let mut pushed = outcome("pushed", RepositoryStatus::Pushed);
        pushed.commits = vec![CommitSummary {
            id: "c0ffee".into(),
            summary: "update".into(),
        }];
        let mut rebuilt = outcome("rebuilt", RepositoryStatus::PullRequests);
        rebuilt.pull_requests = vec![pull_request("updated (rebuilt on the new base)", 7)];
        let mut unchanged = outcome("unchanged", RepositoryStatus::PullRequests);
        unchanged.pull_requests = vec![pull_request("up to date", 8)];
        cycle.repositories = vec![pushed, rebuilt, unchanged];
        cycle.plan.promotions = vec![Promotion {
            repository: Some("pushed".into()),
            policy: "api-prod".into(),
            image: "ghcr.io/shop/api".into(),
            file: "prod/api.yaml".into(),
            line: 3,
            current: "1.0.0".into(),
            since: None,
            stage: 1,
            upstreams: Vec::new(),
            status: PromotionStatus::Waits,
            tag: Some("1.1.0".into()),
            waits: vec!["staging runs 1.1.0 healthy for 10m of 1h".into()],
        }];
        cycle.plan.holds_found = vec![crate::holds::HeldTag {
            key: crate::holds::FieldKey {
                repository: Some("pushed".into()),
                policy: "api".into(),
                file: "apps/api.yaml".into(),
                field: "Deployment/api container api".into(),
            },
            tag: "1.1.0".into(),
            reason: crate::holds::HoldReason::RolledBack {
                to: "1.0.0".into(),
                commit: "b4d".into(),
                author: "ana@example.com".into(),
            },
            since: at(0),
        }];
        let notices = from_cycle(&cycle, &[], at(0));
        let told: Vec<(Kind, Option<&str>, Option<&str>)> = notices
            .iter()
            .map(|n| (n.kind, n.policy.as_deref(), n.link.as_deref()))
            .collect();
        assert_eq!(
            told,
            [
                (Kind::UpdateWritten, Some("api"), Some("c0ffee")),
                (
                    Kind::UpdateWritten,
                    Some("web"),
                    Some("https://git.example/pull/7")
                ),
                (Kind::Held, Some("api"), Some("b4d")),
                (Kind::PromotionWaiting, Some("api-prod"), None),
            ]
        );
        assert_eq!(notices[2].by.as_deref(), Some("ana@example.com"));
        assert_eq!(notices[3].to.as_deref(), Some("1.1.0"));
        // Found again by the next cycle: the same ids, told once by the sender.
        let again = from_cycle(&cycle, &[], at(120));
        assert_eq!(
            notices.iter().map(|n| &n.id).collect::<Vec<_>>(),
            again.iter().map(|n| &n.id).collect::<Vec<_>>()
        );
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn counts(registry: &str, status: &str, count: u64) -> ResponseCount {
        ResponseCount {
            registry: registry.into(),
            request: "tag_list",
            status: status.into(),
            count,
        }
    }

    #[test]
    fn an_outage_is_told_once_it_lasts_and_its_end_once_it_was_told() {
        let outages = Outages::default();
        let after = Duration::from_secs(600);
        let down =
            |n, s| outages.observe(&[counts("r.example", "unreachable", n)], None, after, at(s));
        assert!(down(1, 0).is_empty());
        assert!(down(2, 300).is_empty());
        let told = down(3, 660);
        assert_eq!(told.len(), 1);
        assert_eq!(told[0].kind, Kind::Unreachable);
        assert_eq!(told[0].at, at(0));
        assert!(down(4, 900).is_empty(), "told once");
        // Not asked this cycle: nothing said either way.
        assert!(down(4, 960).is_empty());
        let up = outages.observe(
            &[
                counts("r.example", "unreachable", 4),
                counts("r.example", "200", 1),
            ],
            None,
            after,
            at(1000),
        );
        assert_eq!(up.len(), 1);
        assert_eq!(up[0].kind, Kind::Recovered);
        // A short blip is never told, nor its end.
        assert!(down(5, 2000).is_empty());
        let up = outages.observe(
            &[
                counts("r.example", "unreachable", 5),
                counts("r.example", "200", 2),
            ],
            None,
            after,
            at(2010),
        );
        assert!(up.is_empty());
    }
}
