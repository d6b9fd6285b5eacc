//! The version labels of a file's moving images (`versionLabels`, see
//! [`crate::manifest::version_labels`]): their edits go to the policies whose images they
//! follow, so they land in the same commit as the image; each change lists the labels it
//! moved; a label left alone is a finding.

use std::path::Path;

use crate::change::LabelChange;
use crate::config::version_labels::VersionLabels;
use crate::manifest::{self, Edit, ImageField, ImageMove};
use crate::plan::model::{Change, Finding, FindingKind};
use crate::policy::ImagePolicy;

/// An image field of the file that moves: which field, to what tag, by which policy, and the
/// change the plan made of it.
pub(super) struct Followed {
    pub field: usize,
    pub tag: String,
    pub policy: usize,
    pub change: usize,
}

/// What following the labels came to: the edits by policy name, the changes' labels, the
/// labels left alone.
#[derive(Default)]
pub(super) struct FollowedLabels {
    pub edits: Vec<(String, Edit)>,
    pub findings: Vec<Finding>,
}

/// The file's text and fields, as the image edits were made from them.
pub(super) struct FileText<'a> {
    pub rel: &'a Path,
    pub display: &'a str,
    pub text: &'a str,
    pub fields: &'a [ImageField],
}

/// Follows the version labels of `followed` in `file`, adding the labels to their `changes`.
pub(super) fn follow(
    file: &FileText<'_>,
    policies: &[ImagePolicy],
    followed: &[Followed],
    changes: &mut [Change],
) -> Result<FollowedLabels, manifest::ManifestError> {
    let defaults = VersionLabels::defaults();
    let moves: Vec<ImageMove<'_>> = followed
        .iter()
        .map(|f| ImageMove {
            field: &file.fields[f.field],
            tag: &f.tag,
            labels: policies[f.policy]
                .version_labels
                .as_ref()
                .unwrap_or(&defaults),
        })
        .collect();
    let found = manifest::version_labels(file.rel, file.text, file.fields, &moves)?;
    let mut out = FollowedLabels::default();
    for moved in found.moved {
        for &i in &moved.moves {
            let f = &followed[i];
            out.edits
                .push((policies[f.policy].name.clone(), moved.edit.clone()));
            let label = LabelChange {
                label: moved.label.to_string(),
                line: moved.label.line,
                from: moved.from.clone(),
                to: moved.to.clone(),
            };
            let change = &mut changes[f.change];
            if !change.labels.contains(&label) {
                change.labels.push(label);
            }
        }
    }
    for left in found.left {
        let mut names: Vec<&str> = left
            .moves
            .iter()
            .map(|&i| policies[followed[i].policy].name.as_str())
            .collect();
        names.dedup();
        let Some(&first) = left.moves.first() else {
            continue;
        };
        let policy = &policies[followed[first].policy];
        out.findings.push(Finding {
            policy: Some(names.join(", ")),
            message: format!("version label {} left alone: {}", left.label, left.reason),
            ..Finding::new(
                FindingKind::VersionLabelLeft,
                policy.image.to_string(),
                format!("{}:{}", file.display, left.label.line),
            )
        })
    }
    Ok(out)
}
