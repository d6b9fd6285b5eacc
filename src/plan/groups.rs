//! A plan split into change groups: one per policy, for a commit or a pull request each.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::model::{Change, Plan};
use super::walk::apply_sorted;
use crate::manifest;

/// One policy's share of a plan, as a commit per policy needs it: the files it changes, with
/// content that already includes every earlier group's edits (groups apply in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyGroup {
    pub policy: String,
    /// Path relative to the root → whole new content.
    pub files: BTreeMap<PathBuf, String>,
    pub changes: Vec<Change>,
}

impl Plan {
    /// Splits the plan into one group per policy (by name), each group's file contents built
    /// cumulatively on the groups before it. The last group's contents equal [`Plan::files`].
    pub fn groups_by_policy(&self) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        self.policy_groups(true)
    }

    /// One group per policy whose file contents carry only that policy's edits, for proposals
    /// that each start from the base (one pull request per policy).
    pub fn groups_by_policy_alone(&self) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        self.policy_groups(false)
    }

    fn policy_groups(&self, cumulative: bool) -> Result<Vec<PolicyGroup>, manifest::ManifestError> {
        let names: BTreeSet<&str> = self.changes.iter().map(|c| c.policy.as_str()).collect();
        let mut groups = Vec::new();
        for (n, name) in names.iter().enumerate() {
            let upto: BTreeSet<&str> = if cumulative {
                names.iter().take(n + 1).copied().collect()
            } else {
                BTreeSet::from([*name])
            };
            let mut files = BTreeMap::new();
            for f in self
                .files
                .iter()
                .filter(|f| f.edits.iter().any(|(p, _)| p == name))
            {
                let edits = f
                    .edits
                    .iter()
                    .filter(|(p, _)| upto.contains(p.as_str()))
                    .flat_map(|(_, e)| e.iter().cloned());
                files.insert(
                    f.path.clone(),
                    apply_sorted(&f.path, &f.original, edits.collect())?,
                );
            }
            let changes = self
                .changes
                .iter()
                .filter(|c| c.policy == *name)
                .cloned()
                .collect();
            groups.push(PolicyGroup {
                policy: name.to_string(),
                files,
                changes,
            });
        }
        Ok(groups)
    }
}
