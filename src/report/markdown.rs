//! The Markdown rendering of a [`Report`], as a pull request body or a CI job summary would
//! show it.

use super::table::repository_line;
use super::{ChangeRow, Report, first_line, located};

pub(super) fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

impl Report<'_> {
    /// A Markdown report: the changes as a table, then holds, problems, warnings, skipped
    /// files, each repository's outcome, the summary and the Applications section.
    pub fn markdown(&self) -> String {
        let mut out = String::from("## tagpilot plan\n\n");
        if self.changes.is_empty() {
            out.push_str("No changes.\n");
        } else {
            out.push_str("| Policy | Image | File | From | To |\n|---|---|---|---|---|\n");
            for c in self.changes.iter().map(ChangeRow::of) {
                out.push_str(&format!(
                    "| {} | `{}` | `{}:{}` | `{}` | `{}` |\n",
                    md(c.policy),
                    md(c.image),
                    md(&c.place()),
                    c.line,
                    md(c.from),
                    md(c.to)
                ));
            }
        }
        let labels = self.version_label_rows();
        if !labels.is_empty() {
            out.push_str(
                "\n### Version labels\n\n| File | Label | From | To |\n|---|---|---|---|\n",
            );
            for row in labels {
                out.push_str(&format!(
                    "| `{}:{}` | `{}` | `{}` | `{}` |\n",
                    md(&row[0]),
                    row[1],
                    md(&row[2]),
                    md(&row[3]),
                    md(&row[4])
                ));
            }
        }
        if !self.holds.is_empty() {
            out.push_str("\n### Held\n\n| Policy | File | Current | Reason |\n|---|---|---|---|\n");
            for h in self.holds {
                out.push_str(&format!(
                    "| {} | `{}:{}` | `{}` | {} |\n",
                    md(&h.policy),
                    md(&located(h.repository.as_deref(), &h.file)),
                    h.line,
                    md(&h.current),
                    md(&h.reason.to_string())
                ));
            }
        }
        out += &self.skipped_tags_markdown();
        out += &self.held_tags_markdown();
        out += &self.promotions_markdown();
        for (title, lines) in self.problem_and_warning_lines() {
            if lines.is_empty() {
                continue;
            }
            out.push_str(&format!("\n### {title}\n\n"));
            for line in lines {
                out.push_str(&format!("- {}\n", md(&line)));
            }
        }
        if !self.skipped.is_empty() {
            out.push_str("\n### Skipped files\n\n");
            for s in self.skipped {
                out.push_str(&format!(
                    "- `{}`: {}\n",
                    md(&located(s.repository.as_deref(), &s.file)),
                    md(first_line(&s.reason))
                ));
            }
        }
        if !self.repositories.is_empty() {
            out.push_str("\n### Repositories\n\n");
            for r in self.repositories {
                out.push_str(&format!(
                    "- {}\n",
                    md(&repository_line(r)).replace("\n    ", "\n  - ")
                ));
            }
        }
        out.push_str(&format!("\n{}\n", self.summary_line()));
        if let Some(apps) = self.applications {
            out += &super::applications_markdown(apps);
        }
        out
    }
}
