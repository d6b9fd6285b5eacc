//! Which policy owns a field: by marker, by image, name or alias, or by an explicit Helm path;
//! two policies claiming one field own none of it.

use std::path::Path;

use super::OwnerError;
use crate::manifest::{FieldKind, ImageField};
use crate::plan::index::PolicyIndex;
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
    let matching: Vec<usize> = match field.repository() {
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
    // A chart version belongs to chart policies only, an image field to image policies only:
    // an image and a chart may share an OCI repository's name.
    let is_chart = matches!(field.kind, FieldKind::Chart { .. });
    let mut matching = matching;
    matching.retain(|&i| policies[i].chart.is_some() == is_chart);
    match matching.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        many => Err(OwnerError::Contested {
            policies: many.iter().map(|&i| policies[i].name.clone()).collect(),
            image: policies[many[0]].image.to_string(),
        }),
    }
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
