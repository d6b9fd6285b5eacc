//! A person's rollbacks, read from a base branch's history (issue 19): a commit tagpilot did
//! not make that moves a field tagpilot last set back to an older tag. Pure: the commits come
//! in as text (the engine reads them with `git::history`), the holds go out; whether a write is
//! a rollback is [`crate::holds::rollback`]'s rule.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use jiff::Timestamp;

use super::index::PolicyIndex;
use super::walk::{describe, policy_order};
use crate::holds::{self, FieldKey, FieldWrite, HeldTag};
use crate::image::Repository;
use crate::manifest;
use crate::policy::{HelmPaths, ImagePolicy};

/// One commit of the base branch, as the history edge read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub commit: String,
    /// `Name <email>`.
    pub author: String,
    /// The policies its `Tagpilot-Policy:` trailers name; empty when tagpilot did not make it.
    pub policies: Vec<String>,
    /// The manifests it changed: path, text before, text after.
    pub files: Vec<(String, Option<String>, Option<String>)>,
}

/// One field whose tag a commit moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldMove {
    /// As a plan names it: `Deployment/api container api`.
    pub field: String,
    pub image: Option<Repository>,
    pub from: String,
    pub to: String,
}

/// The fields whose tag differs between two texts of one file, paired by name (and, for two
/// fields of one name, by their order). A field added or removed is no move.
/// `helm` names the Helm value paths the policies give for the file, as the planner reads them.
pub fn field_moves(
    path: &str,
    before: Option<&str>,
    after: Option<&str>,
    helm: &[HelmPaths],
) -> Vec<FieldMove> {
    let (Some(before), Some(after)) = (before, after) else {
        return Vec::new();
    };
    let scan = |text: &str| manifest::scan(Path::new(path), text, helm).unwrap_or_default();
    let named = |fields: Vec<manifest::ImageField>| {
        let mut seen: HashMap<String, usize> = HashMap::new();
        fields
            .into_iter()
            .map(|f| {
                let name = describe(&f.kind);
                let n = seen.entry(name.clone()).or_default();
                *n += 1;
                ((name, *n), f)
            })
            .collect::<BTreeMap<_, _>>()
    };
    let old = named(scan(before));
    let mut out = Vec::new();
    for ((name, n), new) in named(scan(after)) {
        let Some(was) = old.get(&(name.clone(), n)) else {
            continue;
        };
        if let (Some(from), Some(to)) = (was.current().0, new.current().0)
            && from != to
        {
            out.push(FieldMove {
                field: name,
                image: new.repository().cloned(),
                from: from.to_string(),
                to: to.to_string(),
            });
        }
    }
    out.sort_by(|a, b| a.field.cmp(&b.field));
    out
}

/// What finding rollbacks in one repository's new commits reads.
pub struct Reading<'a> {
    /// `repositories[].name`.
    pub repository: &'a str,
    /// Every policy of the repository's sources, for the Helm value paths they name.
    pub policies: &'a [ImagePolicy],
    /// The policy a `Tagpilot-Policy:` trailer names.
    pub policy: &'a dyn Fn(&str) -> Option<&'a ImagePolicy>,
    /// The last commit tagpilot made that changed a file, at or before a commit: for fields
    /// tagpilot set before the commits read this cycle.
    pub last_own: &'a dyn Fn(&str, &str) -> Option<Commit>,
    pub now: Timestamp,
}

/// The holds a person's rollbacks among `commits` (oldest first) call for.
pub fn find(reading: &Reading<'_>, commits: &[Commit]) -> Vec<HeldTag> {
    // What tagpilot last set each (file, field) to, and under which policy.
    let mut own: HashMap<(String, String), Option<(String, &ImagePolicy)>> = HashMap::new();
    let index = PolicyIndex::new(reading.policies, Some(reading.repository));
    let helm = |path: &str| index.helm_paths(Path::new(path));
    let mut out = Vec::new();
    for commit in commits {
        for (path, before, after) in &commit.files {
            let moves = field_moves(path, before.as_deref(), after.as_deref(), &helm(path));
            for moved in moves {
                let key = (path.clone(), moved.field.clone());
                if !commit.policies.is_empty() {
                    own.insert(key, owner(reading, commit, &moved).map(|p| (moved.to, p)));
                    continue;
                }
                let last = own.entry(key).or_insert_with(|| {
                    earlier_own(reading, &commit.commit, path, &moved.field, &helm(path))
                });
                let Some((set, policy)) = last.as_ref() else {
                    continue;
                };
                let field = FieldKey {
                    repository: Some(reading.repository.to_string()),
                    policy: policy.name.clone(),
                    file: path.clone(),
                    field: moved.field.clone(),
                };
                let write = FieldWrite {
                    commit: commit.commit.clone(),
                    author: commit.author.clone(),
                    by_tagpilot: false,
                    from: moved.from,
                    to: moved.to,
                };
                let order = |a: &str, b: &str| policy_order(policy, a, b);
                out.extend(holds::rollback(&field, set, &write, reading.now, &order));
            }
        }
    }
    out
}

/// The policy among a tagpilot commit's trailers that follows the moved field's image.
fn owner<'a>(reading: &Reading<'a>, commit: &Commit, moved: &FieldMove) -> Option<&'a ImagePolicy> {
    commit
        .policies
        .iter()
        .filter_map(|name| (reading.policy)(name))
        .find(|p| moved.image.as_ref() == Some(&p.image))
}

/// What tagpilot last set `field` of `path` to before `commit`, from its last own commit of
/// the file.
fn earlier_own<'a>(
    reading: &Reading<'a>,
    commit: &str,
    path: &str,
    field: &str,
    helm: &[HelmPaths],
) -> Option<(String, &'a ImagePolicy)> {
    let own = (reading.last_own)(commit, path)?;
    let (_, before, after) = own.files.iter().find(|(p, _, _)| p == path)?;
    let moved = field_moves(path, before.as_deref(), after.as_deref(), helm)
        .into_iter()
        .find(|m| m.field == field)?;
    let policy = owner(reading, &own, &moved)?;
    Some((moved.to, policy))
}
