//! The reverse of an update that failed (issue 19, "revert"): each field tagpilot changed is set
//! back to the value it had, with the version labels the update moved beside it (its change's
//! `labels`, each only while it holds what the update wrote), and nothing else.
//!
//! This is not a `git revert`: the update's commit is not undone as a whole, so a person's edit
//! made since (in the same file or elsewhere) stays. Each field is found again on the base tip
//! by the same scan the planner uses (by what the plan called it, `Change::field`, nearest to
//! its line), and is set back only while it still holds what the update wrote. A field that
//! moved on since (a person or a later update wrote another value) is never touched: it is
//! listed in [`ReversePlan::left`], with the file and the field, and so is a field that cannot be
//! found or written. The edits are the manifest editor's, verified by re-parsing, so nothing but
//! the fields' bytes changes.
//!
//! Pure: the files come in as [`Files`] (the base tip read from git, or a directory), no I/O
//! besides reading them. Fields found only through a policy's explicit Helm value paths are not
//! found here (the scan sees the conventional shapes and markers), and are listed as gone. An
//! Application's `.argocd-source-<app>.yaml` override is not a manifest's field: it is listed
//! as such ([`LeftReason::NotAManifestField`]), never guessed at.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

use crate::change::{Change, ChangeGroup, LabelChange};
use crate::config::version_labels::VersionLabels;
use crate::files::Files;
use crate::manifest::{self, Edit, FieldKind, ImageField, ImageMove, MarkerPart, Update};

use super::decide::version_text;
use super::walk::describe;

/// What reverting some changes comes to on one tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReversePlan {
    /// The reverse changes and the files that carry them; `None` when no field is to be set
    /// back (each moved on, or was set back already).
    pub group: Option<ChangeGroup>,
    /// The failed changes whose field is left as it is, and why.
    pub left: Vec<LeftField>,
}

/// A field of a failed change that the revert does not touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftField {
    /// The failed change, as the update made it.
    pub change: Change,
    pub reason: LeftReason,
}

/// Why a field is left as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftReason {
    /// The field holds neither what the update wrote nor what it replaced: someone moved it
    /// on since, and their value stands.
    MovedOn { now: String },
    /// The field holds its old value again already.
    AlreadyBack,
    /// No field of that name is in the file any more.
    FieldGone,
    /// The file is not in the tree any more.
    FileGone,
    /// The file or the field cannot be read or written; the editor's or the reader's words.
    Unwritable { message: String },
    /// Not a field of a manifest: an Application's parameter override in its
    /// `.argocd-source-<app>.yaml`, or a kustomize `images:` entry tagpilot added. Those are
    /// written whole from the Application's settings, which a revert does not have.
    NotAManifestField,
}

impl fmt::Display for LeftField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.change;
        write!(f, "{} ({}): ", c.file, c.field)?;
        match &self.reason {
            LeftReason::MovedOn { now } => write!(
                f,
                "holds {now}, not {} as the update left it; moved on since, left as it is",
                c.to
            ),
            LeftReason::AlreadyBack => write!(f, "holds {} again already", c.from),
            LeftReason::FieldGone => f.write_str("the field is no longer in the file"),
            LeftReason::FileGone => f.write_str("the file is no longer in the tree"),
            LeftReason::Unwritable { message } => write!(f, "cannot be set back: {message}"),
            LeftReason::NotAManifestField => f.write_str(
                "an Application's override, not a manifest's field: tagpilot does not revert \
                 it; set it back by hand",
            ),
        }
    }
}

/// Plans the reverse of `failed` on `files`: a group keyed `key` that sets each field still
/// holding its change's `to` back to its `from`, and the fields left.
pub fn plan_revert(files: &dyn Files, key: &str, failed: &[Change]) -> ReversePlan {
    let mut plan = ReversePlan::default();
    let mut by_file: BTreeMap<&str, Vec<&Change>> = BTreeMap::new();
    for change in failed {
        if is_manifest_field(&change.field) {
            by_file
                .entry(change.file.as_str())
                .or_default()
                .push(change);
        } else {
            plan.left.push(LeftField {
                change: change.clone(),
                reason: LeftReason::NotAManifestField,
            });
        }
    }
    let mut group = ChangeGroup {
        key: key.to_owned(),
        ..ChangeGroup::default()
    };
    for (file, changes) in by_file {
        let reverted = revert_file(files, Path::new(file), &changes, &mut plan.left);
        if let Some((text, reverse)) = reverted {
            group.files.insert(PathBuf::from(file), text);
            group.changes.extend(reverse);
        }
    }
    if !group.files.is_empty() {
        plan.group = Some(group);
    }
    plan
}

/// Whether a change's field (as the plan names it) is a manifest's, which the scan finds
/// again: not an Application's `.argocd-source` override (`argocd-source helm`) nor a kustomize
/// entry tagpilot added (`kustomize images (entry added)`).
fn is_manifest_field(field: &str) -> bool {
    !field.starts_with("argocd-source ") && !field.ends_with("(entry added)")
}

/// One file's reverse edits: its new text and the reverse changes, or `None` when none of its
/// fields is set back (each left is pushed onto `left`).
fn revert_file(
    files: &dyn Files,
    path: &Path,
    changes: &[&Change],
    left: &mut Vec<LeftField>,
) -> Option<(String, Vec<Change>)> {
    let leave_all = |left: &mut Vec<LeftField>, reason: LeftReason| {
        left.extend(changes.iter().map(|&c| LeftField {
            change: c.clone(),
            reason: reason.clone(),
        }));
    };
    if !files.is_file(path) {
        leave_all(left, LeftReason::FileGone);
        return None;
    }
    let text = match files.read(path).map(String::from_utf8) {
        Ok(Ok(text)) => text,
        Ok(Err(_)) => {
            let message = "not UTF-8".to_owned();
            leave_all(left, LeftReason::Unwritable { message });
            return None;
        }
        Err(e) => {
            let message = e.to_string();
            leave_all(left, LeftReason::Unwritable { message });
            return None;
        }
    };
    let fields = match manifest::scan(path, &text, &[]) {
        Ok(fields) => fields,
        Err(e) => {
            let message = e.to_string();
            leave_all(left, LeftReason::Unwritable { message });
            return None;
        }
    };
    let mut used = BTreeSet::new();
    let mut edits: Vec<Edit> = Vec::new();
    let mut reverse = Vec::new();
    let mut reverted = Vec::new();
    for &change in changes {
        match revert_field(&fields, &mut used, change) {
            Ok((field_edits, ordinal)) => {
                edits.extend(field_edits);
                reverted.push((ordinal, change));
                let line = fields[ordinal].line;
                reverse.push(Change {
                    line,
                    from: change.to.clone(),
                    to: change.from.clone(),
                    source: None,
                    labels: Vec::new(),
                    promotion: None,
                    ..change.clone()
                });
            }
            Err(reason) => left.push(LeftField {
                change: change.clone(),
                reason,
            }),
        }
    }
    if reverse.is_empty() {
        return None;
    }
    let labels = LabelsBack {
        path,
        text: &text,
        fields: &fields,
    };
    labels.revert(&reverted, &mut reverse, &mut edits);
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    match manifest::apply_edits(path, &text, &edits) {
        Ok(updated) => Some((updated, reverse)),
        Err(e) => {
            // The file's edits are verified together: if they fail, none is made.
            let message = e.to_string();
            left.extend(changes.iter().map(|&c| LeftField {
                change: c.clone(),
                reason: LeftReason::Unwritable {
                    message: message.clone(),
                },
            }));
            None
        }
    }
}

/// The file a revert sets version labels back in: its text and fields on the tip.
struct LabelsBack<'a> {
    path: &'a Path,
    text: &'a str,
    fields: &'a [ImageField],
}

impl LabelsBack<'_> {
    /// Sets back the version labels the update moved with its fields (each change's
    /// `labels`), each only while it still holds what the update wrote, as the manifest
    /// editor's edits; the reverse changes (`reverse`, in the order of `reverted`) list them.
    fn revert(&self, reverted: &[(usize, &Change)], reverse: &mut [Change], edits: &mut Vec<Edit>) {
        // The keys the update moved, wherever it moved them: only its own labels are matched.
        let keys: Vec<VersionLabels> = reverted
            .iter()
            .map(|(_, c)| {
                let keys: Vec<String> = c
                    .labels
                    .iter()
                    .filter_map(|l| l.label.rsplit(' ').next().map(str::to_owned))
                    .collect();
                VersionLabels {
                    pod_labels: keys.clone(),
                    keys,
                }
            })
            .collect();
        let backs: Vec<Update<'_>> = reverted
            .iter()
            .map(|&(ordinal, c)| update_to(&self.fields[ordinal], &c.image, &c.from))
            .collect();
        let mut moves = Vec::new();
        let mut of_move = Vec::new();
        for (k, &(ordinal, change)) in reverted.iter().enumerate() {
            let Some(tag) = backs[k].tag.filter(|_| !change.labels.is_empty()) else {
                continue;
            };
            moves.push(ImageMove {
                field: &self.fields[ordinal],
                tag,
                labels: &keys[k],
            });
            of_move.push(k);
        }
        if moves.is_empty() {
            return;
        }
        let Ok(found) = manifest::version_labels(self.path, self.text, self.fields, &moves) else {
            return;
        };
        for moved in found.moved {
            let label = moved.label.to_string();
            let mut taken = false;
            for &m in &moved.moves {
                let k = of_move[m];
                if !reverted[k].1.labels.iter().any(|l| l.label == label) {
                    continue;
                }
                taken = true;
                reverse[k].labels.push(LabelChange {
                    label: label.clone(),
                    line: moved.label.line,
                    from: moved.from.clone(),
                    to: moved.to.clone(),
                });
            }
            if taken {
                edits.push(moved.edit);
            }
        }
    }
}

/// The edits that set `change`'s field back, and the field's ordinal; or why it is left. A field
/// is matched by name (`Change::field`), preferring one that still holds the change's `to`,
/// then the one nearest the change's line; a field matched once is not matched again.
fn revert_field(
    fields: &[ImageField],
    used: &mut BTreeSet<usize>,
    change: &Change,
) -> Result<(Vec<Edit>, usize), LeftReason> {
    let named: Vec<(usize, &ImageField)> = fields
        .iter()
        .enumerate()
        .filter(|(i, f)| !used.contains(i) && describe(&f.kind) == change.field)
        .collect();
    let holds_to = |f: &ImageField| {
        f.edits(&update_to(f, &change.image, &change.to))
            .is_ok_and(|e| e.is_empty())
    };
    let distance = |(_, f): &&(usize, &ImageField)| f.line.abs_diff(change.line);
    let Some(&(ordinal, field)) = named
        .iter()
        .filter(|(_, f)| holds_to(f))
        .min_by_key(distance)
        .or_else(|| named.iter().min_by_key(distance))
    else {
        return Err(LeftReason::FieldGone);
    };
    used.insert(ordinal);
    let back = update_to(field, &change.image, &change.from);
    if !holds_to(field) {
        if field.edits(&back).is_ok_and(|e| e.is_empty()) {
            return Err(LeftReason::AlreadyBack);
        }
        let (tag, digest) = field.current();
        return Err(LeftReason::MovedOn {
            now: version_text(tag, digest),
        });
    }
    let edits = field.edits(&back).map_err(|e| LeftReason::Unwritable {
        message: e.to_string(),
    })?;
    Ok((edits, ordinal))
}

/// What writing `version` (a change's `from` or `to`: `tag`, `tag@digest`, a digest, or the
/// planner's "(none)") into `field`, a field of `image`, means to the editor: the inverse of
/// [`version_text`]. A `:name` marker's change moves names, so there `version` is the name.
fn update_to<'a>(field: &ImageField, image: &'a str, version: &'a str) -> Update<'a> {
    if let FieldKind::Marker {
        part: MarkerPart::Name,
        ..
    } = field.kind
    {
        return Update {
            name: version,
            tag: None,
            digest: None,
        };
    }
    let (tag, digest) = if version == version_text(None, None) {
        (None, None)
    } else if version.starts_with("sha256:") || version.starts_with("sha512:") {
        (None, Some(version))
    } else {
        match version.split_once('@') {
            Some((tag, digest)) => (Some(tag), Some(digest)),
            None => (Some(version), None),
        }
    };
    Update {
        name: image,
        tag,
        digest,
    }
}

#[cfg(test)]
mod tests;
