//! Skipped tags in reports: per policy and image, the tags its selection passed over and why
//! (a required platform missing, …), bounded, with how many more. Pure rendering.

use crate::plan::SkippedTags;

use super::Report;
use super::markdown::md;

impl Report<'_> {
    /// `policy api, image ghcr.io/acme/api` (with `in <repository>` for a configured one).
    fn skipped_heading(s: &SkippedTags) -> String {
        match &s.repository {
            Some(r) => format!("policy {} in {r}, image {}", s.policy, s.image),
            None => format!("policy {}, image {}", s.policy, s.image),
        }
    }

    /// Each skipped tag's line, and `and N more` when the list was bounded.
    fn skipped_lines(s: &SkippedTags) -> Vec<String> {
        let mut lines: Vec<String> = s.tags.iter().map(|t| t.0.to_string()).collect();
        if s.more > 0 {
            lines.push(format!("and {} more", s.more));
        }
        lines
    }

    pub(super) fn skipped_tags_table(&self) -> String {
        if self.skipped_tags.is_empty() {
            return String::new();
        }
        let mut out = String::from("\nSkipped tags:\n");
        for s in self.skipped_tags {
            out.push_str(&format!("  {}:\n", Self::skipped_heading(s)));
            for line in Self::skipped_lines(s) {
                out.push_str(&format!("    {line}\n"));
            }
        }
        out
    }

    pub(super) fn skipped_tags_markdown(&self) -> String {
        if self.skipped_tags.is_empty() {
            return String::new();
        }
        let mut out = String::from("\n### Skipped tags\n\n");
        for s in self.skipped_tags {
            out.push_str(&format!("- {}\n", md(&Self::skipped_heading(s))));
            for line in Self::skipped_lines(s) {
                out.push_str(&format!("  - {}\n", md(&line)));
            }
        }
        out
    }
}
