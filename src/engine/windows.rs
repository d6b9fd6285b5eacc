//! Change windows and the freeze on a target's groups: a group a closed window covers, or any
//! group while frozen, is held whole, each of its changes named with the window and when it
//! opens ([`crate::windows`]), and a group whose commit carries a held group's edits waits with
//! it. Planned as ever, so `plan` shows what waits; nothing of it is written, and the next cycle
//! after the window opens writes it, in the groups' order.
//!
//! Reverts are never held here: they are written by the write-back after a failed
//! verification, outside a target's plan.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::change::{ChangeGroup, Stacking};
use crate::plan::{Hold, HoldReason, Plan};
use crate::windows::{Freeze, Subject, Windows};

/// What keeps writes out this cycle.
#[derive(Debug, Clone, Copy)]
pub(super) struct Gate<'a> {
    pub windows: &'a Windows,
    pub freeze: Option<&'a crate::windows::FreezeSwitch>,
    pub now: jiff::Timestamp,
}

impl Gate<'_> {
    /// Why `group` of `repository` may not be written now, if it may not.
    fn closed(
        &self,
        repository: &str,
        group: &ChangeGroup,
        frozen: Option<&Freeze>,
    ) -> Option<HoldReason> {
        if let Some(f) = frozen {
            return Some(HoldReason::Frozen {
                by: f.by.clone(),
                reason: f.reason.clone(),
                since: f.since,
            });
        }
        if self.windows.is_empty() {
            return None;
        }
        let environments: Vec<String> = group
            .applications
            .iter()
            .flat_map(|a| {
                let mut e = vec![a.id()];
                e.extend(a.destination.namespace.as_ref().map(|ns| format!("=>{ns}")));
                e
            })
            .collect();
        group.changes.iter().find_map(|c| {
            let subject = Subject {
                repository,
                policy: &c.policy,
                environments: &environments,
                promotion: c.promotion.is_some(),
            };
            let closed = self.windows.closed(&subject, self.now)?;
            Some(HoldReason::WindowClosed {
                window: closed.window,
                opens: closed.opens,
            })
        })
    }

    /// Holds the groups that may not be written now, and those stacked on them; how many.
    pub(super) fn hold(
        &self,
        repository: &str,
        groups: &mut Vec<ChangeGroup>,
        stacking: Stacking,
        plan: &mut Plan,
    ) -> usize {
        let frozen = self.freeze.and_then(|f| f.current());
        let mut carried: BTreeMap<PathBuf, String> = BTreeMap::new();
        let before = groups.len();
        groups.retain(|group| {
            let reason = self.closed(repository, group, frozen.as_ref()).or_else(|| {
                group.files.keys().find_map(|path| {
                    Some(HoldReason::StackedOnHeld {
                        group: carried.get(path)?.clone(),
                        file: path.display().to_string(),
                    })
                })
            });
            let Some(reason) = reason else {
                return true;
            };
            for change in &group.changes {
                let file = change.file.replace('\\', "/");
                plan.changes.retain(|c| {
                    !(c.policy == change.policy
                        && c.file == file
                        && c.line == change.line
                        && c.repository.as_deref() == Some(repository))
                });
                plan.holds.push(Hold {
                    repository: Some(repository.to_string()),
                    policy: change.policy.clone(),
                    file,
                    line: change.line,
                    current: change.from.clone(),
                    reason: reason.clone(),
                });
            }
            if stacking == Stacking::Stacked {
                for path in group.files.keys() {
                    carried
                        .entry(path.clone())
                        .or_insert_with(|| group.key.clone());
                }
            }
            false
        });
        before - groups.len()
    }
}
