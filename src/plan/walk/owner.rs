//! Which policy owns a field: by marker, by image, name or alias, or by an explicit Helm path;
//! two policies claiming one field own none of it.

use std::path::Path;

use super::OwnerError;
use crate::manifest::{FieldKind, ImageField};
use crate::plan::index::PolicyIndex;
use crate::plan::model::{Finding, FindingKind};
use crate::policy::{HelmPaths, ImagePolicy};

/// Which policy owns a field, if any. Two policies claiming one field is an error: picking one
/// silently would make the result depend on file order. Only the policies that could own the
/// field (by image, name or alias) are looked at, in policy order. When many policies could
/// (thousands of Applications on one image), the few that apply to this file are looked at
/// instead, found once per file (`applicable`).
pub(super) fn owner(
    field: &ImageField,
    rel: &Path,
    index: &PolicyIndex<'_>,
    helm: &[HelmPaths],
    applicable: &mut Option<Vec<usize>>,
    notes: &mut Vec<Precedence>,
) -> Result<Option<usize>, OwnerError> {
    let policies = index.policies();
    if let FieldKind::Marker {
        policy, namespace, ..
    } = &field.kind
    {
        // A walk of Applications' policies alone: the policy files' walk resolves markers.
        if !index.reads_markers() {
            return Ok(None);
        }
        // `named` only holds policies of that name; the namespace must agree where both give one.
        let in_namespace = |i: usize| match (namespace, &policies[i].namespace) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        };
        let named = index.named(policy);
        let written = match namespace {
            Some(ns) => format!("{ns}:{policy}"),
            None => policy.clone(),
        };
        return match named
            .iter()
            .copied()
            .find(|&i| in_namespace(i) && index.applies(i, rel))
        {
            Some(i) => Ok(Some(i)),
            None if named.iter().any(|&i| in_namespace(i)) => {
                Err(OwnerError::MarkerOutsideTargets { policy: written })
            }
            None => Err(OwnerError::UndefinedMarker {
                policy: written,
                found: found_instead(policies, policy, named),
            }),
        };
    }
    // Either side of the intersection, whichever is smaller; both are in policy order.
    let mut applying = |lists: &[&[usize]]| -> Vec<usize> {
        let total: usize = lists.iter().map(|l| l.len()).sum();
        let mut out: Vec<usize> = if total > FEW_OWNERS {
            applicable
                .get_or_insert_with(|| index.applicable(rel))
                .iter()
                .copied()
                .filter(|i| lists.iter().any(|l| l.binary_search(i).is_ok()))
                .collect()
        } else {
            lists
                .iter()
                .flat_map(|l| l.iter().copied())
                .filter(|&i| index.applies(i, rel))
                .collect()
        };
        out.sort_unstable();
        out.dedup();
        out
    };
    let repository = field.repository();
    let matching: Vec<usize> = match repository {
        Some(repo) => {
            // A kustomization may call the image by another name (`kustomize.imageName` on the
            // target).
            let alias = match &field.kind {
                FieldKind::Kustomize { name } => index.kustomize_alias(name),
                _ => &[],
            };
            applying(&[index.following(repo), alias])
        }
        // An explicit Helm path without a repository value belongs to the policy that declared it.
        None if matches!(field.kind, FieldKind::HelmValues { .. }) && !helm.is_empty() => {
            applying(&[index.with_helm()])
        }
        None => Vec::new(),
    };
    // A chart version belongs to chart policies only, an image field to image policies only
    // (exact matches and pattern candidates alike): an image and a chart may share an OCI
    // repository's name.
    let is_chart = matches!(field.kind, FieldKind::Chart { .. });
    let kind_fits = |i: usize| policies[i].chart.is_some() == is_chart;
    let mut matching = matching;
    matching.retain(|&i| kind_fits(i));
    let patterns = |repo| -> Vec<usize> {
        index
            .patterns_following(repo)
            .into_iter()
            .filter(|&i| kind_fits(i) && index.applies(i, rel))
            .collect()
    };
    match (matching.as_slice(), repository) {
        ([], None) => Ok(None),
        ([], Some(repo)) => pick_pattern(policies, patterns(repo), repo, notes),
        ([one], repo) => {
            // A policy naming the image exactly wins over every pattern; the patterns it
            // overrides are told, never left to wonder.
            if let Some(repo) = repo {
                let overridden = patterns(repo);
                if !overridden.is_empty() {
                    notes.push(Precedence::Exact {
                        exact: *one,
                        patterns: overridden,
                        image: repo.clone(),
                    });
                }
            }
            Ok(Some(*one))
        }
        (many, _) => Err(OwnerError::Contested {
            policies: many.iter().map(|&i| policies[i].name.clone()).collect(),
            image: policies[many[0]].image.to_string(),
        }),
    }
}

/// Why a reference follows the policy it does, when a pattern was passed over for it: the
/// plan names it, so an image that follows another policy than its pattern is never a surprise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Precedence {
    /// `exact` names the image exactly; the `patterns` that match it are overridden.
    Exact {
        exact: usize,
        patterns: Vec<usize>,
        image: crate::image::Repository,
    },
    /// Several patterns match; `winner`'s `priority` is the highest.
    Priority {
        winner: usize,
        losers: Vec<usize>,
        image: crate::image::Repository,
    },
}

impl Precedence {
    /// Every policy the note names: the one followed and those passed over.
    pub(super) fn policies(&self) -> Vec<usize> {
        match self {
            Precedence::Exact {
                exact, patterns, ..
            } => std::iter::once(*exact)
                .chain(patterns.iter().copied())
                .collect(),
            Precedence::Priority { winner, losers, .. } => std::iter::once(*winner)
                .chain(losers.iter().copied())
                .collect(),
        }
    }

    /// One finding per pattern passed over, at `file:line`, naming the policy followed.
    pub(super) fn findings(
        &self,
        policies: &[ImagePolicy],
        file: &str,
        line: usize,
    ) -> Vec<Finding> {
        let (kind, followed, passed, image) = match self {
            Precedence::Exact {
                exact,
                patterns,
                image,
            } => (FindingKind::PatternOverridden, *exact, patterns, image),
            Precedence::Priority {
                winner,
                losers,
                image,
            } => (FindingKind::PatternOutranked, *winner, losers, image),
        };
        let followed = &policies[followed];
        let why = match kind {
            FindingKind::PatternOutranked => format!(
                "{file}:{line}, which follows policy {} (priority {})",
                followed.name, followed.priority
            ),
            _ => format!(
                "{file}:{line}, which follows policy {} (defined at {})",
                followed.name, followed.source
            ),
        };
        passed
            .iter()
            .map(|&i| Finding {
                policy: Some(policies[i].name.clone()),
                ..Finding::new(kind, image.to_string(), why.clone())
            })
            .collect()
    }
}

/// Of the pattern policies matching one reference, the one that owns it: the only one, or the
/// one of highest `priority`. Two of the highest priority are a problem naming both.
fn pick_pattern(
    policies: &[ImagePolicy],
    mut matching: Vec<usize>,
    image: &crate::image::Repository,
    notes: &mut Vec<Precedence>,
) -> Result<Option<usize>, OwnerError> {
    if matching.len() <= 1 {
        return Ok(matching.first().copied());
    }
    matching.sort_by_key(|&i| std::cmp::Reverse(policies[i].priority));
    let top = policies[matching[0]].priority;
    let tied: Vec<usize> = matching
        .iter()
        .copied()
        .take_while(|&i| policies[i].priority == top)
        .collect();
    if tied.len() > 1 {
        let mut tied = tied;
        tied.sort_unstable();
        return Err(OwnerError::OverlappingPatterns {
            policies: tied
                .iter()
                .map(|&i| {
                    let p = &policies[i];
                    format!(
                        "{} ({}, {} at {})",
                        p.name,
                        p.pattern.as_ref().map_or("", |p| p.written.as_str()),
                        match p.priority {
                            0 => "no priority".to_string(),
                            n => format!("priority {n}"),
                        },
                        p.source
                    )
                })
                .collect(),
            image: image.to_string(),
        });
    }
    notes.push(Precedence::Priority {
        winner: matching[0],
        losers: matching[1..].to_vec(),
        image: image.clone(),
    });
    Ok(Some(matching[0]))
}

/// What a marker naming an undefined policy may have meant: the same name in other namespaces,
/// else the names a typo away.
fn found_instead(policies: &[ImagePolicy], name: &str, same_name: &[usize]) -> String {
    let qualified = |p: &ImagePolicy| match &p.namespace {
        Some(ns) => format!("{ns}:{}", p.name),
        None => p.name.clone(),
    };
    if !same_name.is_empty() {
        let found: Vec<String> = same_name.iter().map(|&i| qualified(&policies[i])).collect();
        return format!("found {}", found.join(", "));
    }
    let mut near: Vec<(usize, String)> = policies
        .iter()
        .map(|p| (edit_distance(&p.name, name), qualified(p)))
        .filter(|(d, _)| *d <= 2)
        .collect();
    near.sort();
    near.dedup_by(|a, b| a.1 == b.1);
    match near.as_slice() {
        [] if policies.is_empty() => "no policy is defined".to_string(),
        [] => format!(
            "no policy of that name in any namespace ({} defined)",
            policies.len()
        ),
        near => format!(
            "found {}",
            near.iter()
                .take(3)
                .map(|(_, n)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// Levenshtein distance, by characters: close enough to catch a typo in a policy name.
pub(in crate::plan) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// Up to this many candidate owners are each tested against the file; beyond it, the policies
/// that apply to the file are found through the index instead.
const FEW_OWNERS: usize = 16;
