//! Joins the plans that several sources made of one checkout into the target's one plan.
//!
//! Policy files, Applications from git and Applications from the cluster may all name one
//! repository. Each is planned on the same checkout; here their edits of one file are applied
//! together and verified again, so the target gets one commit (or one pull request per group)
//! whatever named it. When two sources want different values for one field, neither wins: the
//! field is held and the hold names both, so a misconfiguration shows instead of flapping.
//! Pure: plans in, plan out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;

use crate::error_chain::Failure;
use crate::manifest::{self, Edit};
use crate::plan::{
    Change, Claim, FileUpdate, Finding, FindingKind, Hold, HoldReason, Plan, Problem,
    ProblemReason, Side, Stance,
};

/// One field two sources disagree on.
struct Conflict {
    /// 1-based line of the field in the original file.
    line: usize,
    policies: BTreeSet<String>,
}

/// Merges `parts` (plans of one checkout by different sources or walks) into one plan.
/// `source_of` names where a policy comes from (`policy file policies/api.yaml`,
/// `Application argocd/shop`), for the holds that name both sides of a conflict.
pub fn merge(
    repository: Option<&str>,
    parts: Vec<Plan>,
    source_of: &dyn Fn(&str) -> String,
) -> Plan {
    let mut out = Plan::default();
    let mut files: BTreeMap<PathBuf, FileUpdate> = BTreeMap::new();
    let mut skipped = BTreeSet::new();
    let mut claims = Vec::new();
    for p in parts {
        out.changes.extend(p.changes);
        out.holds.extend(p.holds);
        out.skipped_tags.extend(p.skipped_tags);
        out.problems.extend(p.problems);
        out.findings.extend(p.findings);
        for s in p.skipped {
            if skipped.insert(s.file.clone()) {
                out.skipped.push(s);
            }
        }
        out.up_to_date += p.up_to_date;
        out.policies_used += p.policies_used;
        out.ended_holds.extend(p.ended_holds);
        out.holds_found.extend(p.holds_found);
        out.promotions.extend(p.promotions);
        claims.extend(p.claims);
        for f in p.files {
            match files.get_mut(&f.path) {
                None => {
                    files.insert(f.path.clone(), f);
                }
                Some(have) => {
                    for (policy, edits) in f.edits {
                        match have.edits.iter_mut().find(|(p, _)| *p == policy) {
                            Some((_, mine)) => mine.extend(edits),
                            None => have.edits.push((policy, edits)),
                        }
                    }
                }
            }
        }
    }

    hold_claimed(&mut out, &mut files, claims, repository, source_of);
    for (path, mut f) in files {
        let file = path.to_string_lossy().replace('\\', "/");
        let conflicts = conflicts(&f);
        if !conflicts.is_empty() {
            leave_conflicting_labels(&mut out, &file, &conflicts, source_of);
            hold_conflicts(&mut out, &mut f, &file, &conflicts, repository, source_of);
        }
        f.edits.retain(|(_, e)| !e.is_empty());
        if f.edits.is_empty() {
            continue;
        }
        let mut all: Vec<Edit> = f
            .edits
            .iter()
            .flat_map(|(_, e)| e.iter().cloned())
            .collect();
        all.sort_by_key(|e| (e.span.start, e.span.end));
        all.dedup();
        // The parts' own result goes first: a large file is then held twice here, not three
        // times.
        drop(std::mem::take(&mut f.updated));
        match manifest::apply_edits(&path, &f.original, &all) {
            Ok(updated) => {
                f.updated = updated;
                out.files.push(f);
            }
            Err(e) => {
                let policies: BTreeSet<&str> = f.edits.iter().map(|(p, _)| p.as_str()).collect();
                out.problems.push(Problem {
                    repository: repository.map(str::to_owned),
                    policy: Some(policies.into_iter().collect::<Vec<_>>().join(", ")),
                    file: Some(file.clone()),
                    ..Problem::new(ProblemReason::NotJoined(Failure::new(e)))
                });
                out.changes.retain(|c| c.file != file);
            }
        }
    }
    out.changes
        .sort_by(|a, b| (&a.file, a.line, &a.policy).cmp(&(&b.file, b.line, &b.policy)));
    out.changes.dedup();
    out.holds
        .sort_by(|a, b| (&a.file, a.line, &a.policy).cmp(&(&b.file, b.line, &b.policy)));
    out.files.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// A claimed field another source moves: who moves it and what each side says.
struct Claimed {
    claim: Claim,
    movers: BTreeSet<String>,
    /// What each mover wants.
    wants: Vec<Side>,
    /// The claimant, up to date.
    stays: Side,
}

/// The claims another source's change moves away from, each with who moves it, and every
/// (mover, file) pair found. Changes are looked up by field, so thousands of up-to-date fields
/// cost lookups, not a search of the changes each.
fn claimed(
    changes: &[Change],
    claims: Vec<Claim>,
    source_of: &dyn Fn(&str) -> String,
) -> (Vec<Claimed>, BTreeSet<(String, String)>) {
    let mut by_field: HashMap<(&str, usize), Vec<&Change>> = HashMap::new();
    for c in changes {
        by_field
            .entry((c.file.as_str(), c.line))
            .or_default()
            .push(c);
    }
    let mut movers: BTreeSet<(String, String)> = BTreeSet::new();
    let mut out = Vec::new();
    for claim in claims {
        let Some(here) = by_field.get(&(claim.file.as_str(), claim.line)) else {
            continue;
        };
        let moving: Vec<&Change> = here
            .iter()
            .copied()
            .filter(|c| c.image == claim.image && c.policy != claim.policy)
            .collect();
        if moving.is_empty() {
            continue;
        }
        for c in &moving {
            movers.insert((c.policy.clone(), c.file.clone()));
        }
        let stays = Side {
            policy: claim.policy.clone(),
            source: source_of(&claim.policy),
            stance: Stance::UpToDate(claim.current.clone()),
        };
        out.push(Claimed {
            movers: moving.iter().map(|c| c.policy.clone()).collect(),
            wants: moving.iter().map(|c| wants(c, source_of)).collect(),
            stays,
            claim,
        });
    }
    (out, movers)
}

/// A source that is up to date still claims its field: another source moving that field is a
/// conflict like two sources moving it apart. The mover's changes in the file are held with
/// every edit of its in that file (which of its edits belong to which field is not kept, and
/// holding the image's other fields of one file is the safe side), and the field is held for
/// the claimant too, so that its report does not say "up to date" while the field is held.
fn hold_claimed(
    out: &mut Plan,
    files: &mut BTreeMap<PathBuf, FileUpdate>,
    claims: Vec<Claim>,
    repository: Option<&str>,
    source_of: &dyn Fn(&str) -> String,
) {
    if claims.is_empty() || out.changes.is_empty() {
        return;
    }
    let (held_claims, movers) = claimed(&out.changes, claims, source_of);
    if held_claims.is_empty() {
        return;
    }
    let (held, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut out.changes)
        .into_iter()
        .partition(|c| movers.contains(&(c.policy.clone(), c.file.clone())));
    out.changes = kept;
    for f in files.values_mut() {
        let file = f.path.to_string_lossy().replace('\\', "/");
        for (policy, edits) in &mut f.edits {
            if movers.contains(&(policy.clone(), file.clone())) {
                edits.clear();
            }
        }
    }
    let hold = |policy: &str, file: &str, line: usize, current: &str, reason| Hold {
        repository: repository.map(str::to_owned),
        policy: policy.to_owned(),
        file: file.to_owned(),
        line,
        current: current.to_owned(),
        reason,
    };
    for Claimed {
        claim,
        wants,
        stays,
        ..
    } in &held_claims
    {
        let sides = std::iter::once(stays).chain(wants).cloned().collect();
        let reason = HoldReason::SourcesDisagree(sides);
        out.holds.push(hold(
            &claim.policy,
            &claim.file,
            claim.line,
            &claim.current,
            reason,
        ));
        out.up_to_date = out.up_to_date.saturating_sub(1);
    }
    for c in &held {
        // The claimants of this field; else those of the mover's other fields in the file, for
        // which this change is held.
        let of_field: Vec<&Side> = held_claims
            .iter()
            .filter(|k| {
                k.claim.file == c.file && k.claim.line == c.line && k.movers.contains(&c.policy)
            })
            .map(|k| &k.stays)
            .collect();
        let others: Vec<&Side> = if of_field.is_empty() {
            held_claims
                .iter()
                .filter(|k| k.claim.file == c.file && k.movers.contains(&c.policy))
                .map(|k| &k.stays)
                .collect()
        } else {
            of_field
        };
        let sides = std::iter::once(wants(c, source_of))
            .chain(others.into_iter().cloned())
            .collect();
        out.holds.push(hold(
            &c.policy,
            &c.file,
            c.line,
            &c.from,
            HoldReason::SourcesDisagree(sides),
        ));
    }
}

/// Overlapping edits of different policies that do not write the same text.
fn conflicts(f: &FileUpdate) -> Vec<Conflict> {
    let mut all: Vec<(&str, &Edit)> = f
        .edits
        .iter()
        .flat_map(|(p, edits)| edits.iter().map(move |e| (p.as_str(), e)))
        .collect();
    all.sort_by_key(|(_, e)| (e.span.start, e.span.end));
    let mut out: Vec<Conflict> = Vec::new();
    for (i, (p, e)) in all.iter().enumerate() {
        for (q, other) in &all[i + 1..] {
            let overlap = other.span.start < e.span.end
                || (other.span.start == e.span.start
                    && (e.span.is_empty() || other.span.is_empty()));
            if !overlap {
                break;
            }
            if p == q || (e.span == other.span && e.text == other.text) {
                continue;
            }
            let line = line_of(&f.original, e.span.start);
            match out.iter_mut().find(|c| c.line == line) {
                Some(c) => {
                    c.policies.insert(p.to_string());
                    c.policies.insert(q.to_string());
                }
                None => out.push(Conflict {
                    line,
                    policies: BTreeSet::from([p.to_string(), q.to_string()]),
                }),
            }
        }
    }
    out
}

/// A version label two sources move to different values (each saw only its own image move in
/// the resource): its edits are dropped with the conflict's, and here it leaves the changes'
/// lists of labels and becomes a warning naming both sides. The images still move.
fn leave_conflicting_labels(
    out: &mut Plan,
    file: &str,
    conflicts: &[Conflict],
    source_of: &dyn Fn(&str) -> String,
) {
    for conflict in conflicts {
        // (policy, image, label, what it wants)
        let mut wants: Vec<(&str, &str, &str, &str)> = Vec::new();
        for c in out.changes.iter().filter(|c| c.file == file) {
            if !conflict.policies.contains(&c.policy) {
                continue;
            }
            for l in c.labels.iter().filter(|l| l.line == conflict.line) {
                let want = (
                    c.policy.as_str(),
                    c.image.as_str(),
                    l.label.as_str(),
                    l.to.as_str(),
                );
                if !wants.contains(&want) {
                    wants.push(want);
                }
            }
        }
        let Some(&(_, image, label, _)) = wants.first() else {
            continue;
        };
        let sides: Vec<String> = wants
            .iter()
            .map(|(policy, _, _, to)| format!("{policy} ({}) wants {to}", source_of(policy)))
            .collect();
        let policies: BTreeSet<&str> = wants.iter().map(|w| w.0).collect();
        let finding = Finding {
            policy: Some(policies.into_iter().collect::<Vec<_>>().join(", ")),
            message: format!(
                "version label {label} left alone: sources disagree: {}",
                sides.join(", ")
            ),
            ..Finding::new(
                FindingKind::VersionLabelLeft,
                image.to_string(),
                format!("{file}:{}", conflict.line),
            )
        };
        out.findings.push(finding);
        for c in out.changes.iter_mut().filter(|c| c.file == file) {
            c.labels.retain(|l| l.line != conflict.line);
        }
    }
}

/// Drops the conflicting edits and turns the changes behind them into holds naming every side.
fn hold_conflicts(
    out: &mut Plan,
    f: &mut FileUpdate,
    file: &str,
    conflicts: &[Conflict],
    repository: Option<&str>,
    source_of: &dyn Fn(&str) -> String,
) {
    for conflict in conflicts {
        for (policy, edits) in &mut f.edits {
            if conflict.policies.contains(policy) {
                edits.retain(|e| line_of(&f.original, e.span.start) != conflict.line);
            }
        }
    }
    let emptied: BTreeSet<String> = f
        .edits
        .iter()
        .filter(|(_, e)| e.is_empty())
        .map(|(p, _)| p.clone())
        .collect();
    let involved = |policy: &str, line: usize| {
        conflicts
            .iter()
            .any(|c| c.policies.contains(policy) && (c.line == line || emptied.contains(policy)))
    };
    let (held, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut out.changes)
        .into_iter()
        .partition(|c| c.file == file && involved(&c.policy, c.line));
    out.changes = kept;
    for c in &held {
        let others: Vec<Side> = held
            .iter()
            .filter(|o| o.policy != c.policy && o.line == c.line)
            .map(|o| wants(o, source_of))
            .collect();
        let others = if others.is_empty() {
            // The other side's change sits on another line of the same entry.
            held.iter()
                .filter(|o| o.policy != c.policy)
                .map(|o| wants(o, source_of))
                .collect::<Vec<_>>()
        } else {
            others
        };
        let sides = std::iter::once(wants(c, source_of)).chain(others).collect();
        out.holds.push(Hold {
            repository: repository.map(str::to_owned),
            policy: c.policy.clone(),
            file: file.to_owned(),
            line: c.line,
            current: c.from.clone(),
            reason: HoldReason::SourcesDisagree(sides),
        });
    }
}

/// The side of a source whose change `c` moves a field.
fn wants(c: &Change, source_of: &dyn Fn(&str) -> String) -> Side {
    Side {
        policy: c.policy.clone(),
        source: source_of(&c.policy),
        stance: Stance::Wants(c.to.clone()),
    }
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
