//! Held tags in reports: the holds a cycle began (a person's rollback) and ended (a newer tag),
//! and `tagpilot holds`' list. Pure rendering.

use crate::holds::{HeldTag, HoldView};

use super::markdown::md;
use super::{Report, ReportError};

impl Report<'_> {
    /// The holds this cycle began and ended, and the verifications under way, one line each;
    /// empty when none.
    pub(super) fn held_tag_lines(&self) -> Vec<(&'static str, Vec<String>)> {
        let began = self
            .holds_found
            .iter()
            .map(|h| format!("{}: {} held: {}", h.key, h.tag, h.reason))
            .collect();
        let ended = self
            .holds_ended
            .iter()
            .map(|h| {
                format!(
                    "{}: the hold on {} ({}) ended: a newer tag appeared",
                    h.key, h.tag, h.reason
                )
            })
            .collect();
        vec![
            ("Holds begun", began),
            ("Holds ended", ended),
            (
                "Verifications under way",
                self.verifications_pending.to_vec(),
            ),
        ]
    }

    pub(super) fn held_tags_table(&self) -> String {
        let mut out = String::new();
        for (title, lines) in self.held_tag_lines() {
            if lines.is_empty() {
                continue;
            }
            out.push_str(&format!("\n{title}:\n"));
            for line in lines {
                out.push_str(&format!("  {line}\n"));
            }
        }
        out
    }

    pub(super) fn held_tags_markdown(&self) -> String {
        let mut out = String::new();
        for (title, lines) in self.held_tag_lines() {
            if lines.is_empty() {
                continue;
            }
            out.push_str(&format!("\n### {title}\n\n"));
            for line in lines {
                out.push_str(&format!("- {}\n", md(&line)));
            }
        }
        out
    }
}

/// `tagpilot holds` as a table: policy, field, tag, why, since, who, and the id.
pub fn holds_table(holds: &[HoldView]) -> String {
    if holds.is_empty() {
        return "No held tags.\n".to_string();
    }
    super::table::plain_table(
        &["ID", "POLICY", "FIELD", "TAG", "WHY", "SINCE", "WHO"],
        holds.iter().map(|h| {
            let file = match &h.repository {
                Some(r) => format!("{r}:{}", h.file),
                None => h.file.clone(),
            };
            vec![
                h.id.clone(),
                h.policy.clone(),
                format!("{file} {}", h.field),
                h.tag.clone(),
                h.why.clone(),
                h.since.to_string(),
                h.who.clone(),
            ]
        }),
    )
}

/// `tagpilot holds --format json` (and `GET /holds`): the list serialised.
pub fn holds_json(holds: &[HoldView]) -> Result<String, ReportError> {
    let mut out = serde_json::to_string_pretty(holds).map_err(ReportError::Json)?;
    out.push('\n');
    Ok(out)
}

/// Each hold's listed view.
pub fn views(holds: &[HeldTag]) -> Vec<HoldView> {
    holds.iter().map(HeldTag::view).collect()
}
