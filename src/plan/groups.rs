//! A plan split into change groups: one per policy, for a commit or a pull request each. How
//! they stack, and how they are grouped further per `write.group`, is the change model's rule
//! ([`crate::change`]); here the groups' texts are built from the plan's edits.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{Change, FileUpdate, Plan};
use super::walk::apply_sorted;
use crate::change::{ChangeGroup, Stacking};
use crate::manifest;

impl Plan {
    /// Splits the plan into one group per policy (by name, the group's key), for a commit or a
    /// pull request each. Each group's file contents are built cumulatively on the groups
    /// before it (the last group's contents are the planned texts), or, with
    /// [`Stacking::Alone`], carry only that policy's edits, for proposals that each start from
    /// the base (one pull request per policy).
    ///
    /// For the writers, which need only the groups: each file's planned text moves into the
    /// group that carries all of its edits instead of being built again, and the plan keeps no
    /// texts (`files` is left empty). A large file then costs its text as it was and as
    /// planned, not a third copy.
    pub fn take_groups(
        &mut self,
        stacking: Stacking,
    ) -> Result<Vec<ChangeGroup>, manifest::ManifestError> {
        self.take_groups_by(stacking, &|policy| policy.to_owned())
    }

    /// [`Plan::take_groups`], one group per `key` of a policy's name instead of per policy
    /// (`write.group: pattern`: the images of one pattern together, [`crate::change::group_key`]).
    pub fn take_groups_by(
        &mut self,
        stacking: Stacking,
        key: &dyn Fn(&str) -> String,
    ) -> Result<Vec<ChangeGroup>, manifest::ManifestError> {
        let groups = split(
            &self.changes,
            &mut self.files,
            stacking == Stacking::Stacked,
            key,
        );
        self.files = Vec::new();
        groups
    }
}

/// The groups of `changes` over `files`. A file's `updated` text is moved into the one group
/// whose edits of it are all of them: that group's content is exactly that text.
fn split(
    changes: &[Change],
    files: &mut [FileUpdate],
    cumulative: bool,
    key: &dyn Fn(&str) -> String,
) -> Result<Vec<ChangeGroup>, manifest::ManifestError> {
    let names: BTreeSet<String> = changes.iter().map(|c| key(&c.policy)).collect();
    let names: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    let mut groups = Vec::new();
    for (n, name) in names.iter().enumerate() {
        let upto: BTreeSet<&str> = if cumulative {
            names.iter().take(n + 1).copied().collect()
        } else {
            BTreeSet::from([*name])
        };
        let mut texts = BTreeMap::new();
        for f in files
            .iter_mut()
            .filter(|f| f.edits.iter().any(|(p, _)| key(p) == *name))
        {
            let whole = f.edits.iter().all(|(p, _)| upto.contains(key(p).as_str()));
            let text = if whole {
                std::mem::take(&mut f.updated)
            } else {
                let edits = f
                    .edits
                    .iter()
                    .filter(|(p, _)| upto.contains(key(p).as_str()))
                    .flat_map(|(_, e)| e.iter().cloned());
                apply_sorted(&f.path, &f.original, edits.collect())?
            };
            texts.insert(f.path.clone(), text);
        }
        let changes = changes
            .iter()
            .filter(|c| key(&c.policy) == *name)
            .cloned()
            .collect();
        groups.push(ChangeGroup {
            applications: Vec::new(),
            key: name.to_string(),
            files: texts,
            changes,
        });
    }
    Ok(groups)
}
