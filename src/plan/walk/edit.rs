//! The last phase of a walk: read each file with moves again, find its moved fields by scanning
//! it again, and apply their edits in memory (verified by re-parsing).

use std::collections::BTreeMap;
use std::path::Path;

use super::labels::{self, FileText, Followed};
use super::{Edited, Fingerprint, Move, ScannedFile, display_path};
use crate::error_chain::Failure;
use crate::files::Files;
use crate::manifest::{self, Edit, FieldKind, MarkerPart, Update};
use crate::plan::index::PolicyIndex;
use crate::plan::model::{Change, FileUpdate, Problem};
use crate::plan::reasons::ProblemReason;
use crate::policy::ImagePolicy;

pub(in crate::plan) fn apply_sorted(
    path: &Path,
    src: &str,
    mut edits: Vec<Edit>,
) -> Result<String, manifest::ManifestError> {
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    manifest::apply_edits(path, src, &edits)
}

/// Why a file's edits are dropped: the plan's problem says `edit dropped: ` and this.
#[derive(Debug, thiserror::Error)]
pub(super) enum EditDropped {
    #[error("the file changed while tagpilot was planning; plan again")]
    Changed,
    #[error("cannot read")]
    Unreadable(#[source] crate::files::FilesError),
    /// The file no longer scans, or its edits do not apply: the manifest error says which.
    #[error(transparent)]
    Manifest(#[from] manifest::ManifestError),
}

/// Reads a file again, finds its moved fields by scanning it again, and applies their edits.
/// The error is the reason the file's edits are dropped.
pub(super) fn edit_file(
    files: &dyn Files,
    index: &PolicyIndex<'_>,
    policies: &[ImagePolicy],
    file: &ScannedFile,
    moves: &[Move],
) -> Result<Edited, EditDropped> {
    let original = match files.read(&file.rel).map(String::from_utf8) {
        Ok(Ok(text)) if Fingerprint::of(&text) == file.fingerprint => text,
        Ok(_) => return Err(EditDropped::Changed),
        Err(e) => return Err(EditDropped::Unreadable(e)),
    };
    let fields = manifest::scan(&file.rel, &original, &index.helm_paths(&file.rel))?;
    let display = display_path(&file.rel);
    let mut edited = Edited {
        update: None,
        changes: Vec::new(),
        up_to_date: 0,
        problems: Vec::new(),
        findings: Vec::new(),
    };
    let mut by_policy: BTreeMap<String, Vec<Edit>> = BTreeMap::new();
    let mut followed = Vec::new();
    for m in moves {
        let policy = &policies[m.policy];
        let field = fields
            .get(m.ordinal as usize)
            .filter(|field| field.line == m.line)
            .ok_or(EditDropped::Changed)?;
        let update = Update {
            name: &policy.image_name,
            tag: Some(&m.tag),
            digest: m.digest.as_deref(),
        };
        let edits = match field.edits(&update) {
            Ok(edits) => edits,
            Err(e) => {
                edited.problems.push(Problem {
                    repository: None,
                    policy: Some(policy.name.clone()),
                    image: Some(policy.image.to_string()),
                    file: Some(display.clone()),
                    line: Some(m.line),
                    reason: ProblemReason::EditFailed(Failure::new(e)),
                });
                continue;
            }
        };
        let Some(first) = edits.first() else {
            edited.up_to_date += 1;
            continue;
        };
        // A `:name` marker moves a name, not a version: the report shows the names.
        let moves_name = matches!(
            field.kind,
            FieldKind::Marker {
                part: MarkerPart::Name,
                ..
            }
        );
        let (from, to) = if moves_name {
            let old = original
                .get(first.span.clone())
                .unwrap_or_default()
                .trim_matches(|c| c == '"' || c == '\'');
            (old.to_string(), policy.image_name.clone())
        } else {
            (m.from.clone(), m.to.clone())
        };
        followed.push(Followed {
            field: m.ordinal as usize,
            tag: m.tag.clone(),
            policy: m.policy,
            change: edited.changes.len(),
        });
        edited.changes.push(Change {
            repository: None,
            policy: policy.name.clone(),
            image: policy.image.to_string(),
            file: display.clone(),
            line: m.line,
            field: describe(&field.kind),
            strategy: policy.strategy.name(),
            from,
            to,
            source: None,
            labels: Vec::new(),
            promotion: m.promotion.clone(),
        });
        by_policy
            .entry(policy.name.clone())
            .or_default()
            .extend(edits);
    }
    if by_policy.is_empty() {
        return Ok(edited);
    }
    let text = FileText {
        rel: &file.rel,
        display: &display,
        text: &original,
        fields: &fields,
    };
    let labels = labels::follow(&text, policies, &followed, &mut edited.changes)?;
    for (policy, edit) in labels.edits {
        by_policy.entry(policy).or_default().push(edit);
    }
    edited.findings = labels.findings;
    let all: Vec<Edit> = by_policy.values().flatten().cloned().collect();
    let updated = apply_sorted(&file.rel, &original, all)?;
    edited.update = Some(FileUpdate {
        path: file.rel.clone(),
        original,
        updated,
        edits: by_policy.into_iter().collect(),
    });
    Ok(edited)
}

/// What the plan calls a field (`Change::field`); a revert finds the field again by it.
pub(in crate::plan) fn describe(kind: &FieldKind) -> String {
    match kind {
        FieldKind::Container {
            resource,
            container,
        } => format!("{resource} container {container}"),
        FieldKind::Kustomize { name } => format!("kustomize image {name}"),
        FieldKind::HelmValues { path } => format!("helm value {path}"),
        FieldKind::Chart { place } => place.clone(),
        FieldKind::Marker { policy, part, .. } => {
            let part = match part {
                MarkerPart::Whole => "",
                MarkerPart::Name => ":name",
                MarkerPart::Tag => ":tag",
                MarkerPart::Digest => ":digest",
            };
            format!("marker {policy}{part}")
        }
    }
}
