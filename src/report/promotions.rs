//! The promotions section (issue 20): per image, each environment that follows others, the tag
//! it runs, what its upstreams run and since when, and what it does: promote, up to date, or
//! wait and why (soak time left, not verified, held, forbidden). Pure rendering.

use std::collections::BTreeMap;

use crate::plan::{Promotion, PromotionStatus, UpstreamRun};

use super::markdown::md;
use super::{Report, located};

impl Report<'_> {
    /// The promoting fields by image, in the plan's order within each (a chain upstream
    /// first: the cycle orders them so).
    fn promotions_by_image(&self) -> BTreeMap<&str, Vec<&Promotion>> {
        let mut by_image: BTreeMap<&str, Vec<&Promotion>> = BTreeMap::new();
        for p in self.promotions {
            by_image.entry(p.image.as_str()).or_default().push(p);
        }
        by_image
    }

    pub(super) fn promotions_table(&self) -> String {
        if self.promotions.is_empty() {
            return String::new();
        }
        let mut out = String::from("\nPromotions:\n");
        for (image, rows) in self.promotions_by_image() {
            out.push_str(&format!("  {image}\n"));
            for p in rows {
                out.push_str(&format!(
                    "    {} ({}:{}) runs {}{}: {}\n",
                    p.policy,
                    located(p.repository.as_deref(), &p.file),
                    p.line,
                    p.current,
                    since(p.since.as_deref()),
                    outcome(p)
                ));
                for u in &p.upstreams {
                    out.push_str(&format!("      {}\n", upstream_line(u)));
                }
            }
        }
        out
    }

    pub(super) fn promotions_markdown(&self) -> String {
        if self.promotions.is_empty() {
            return String::new();
        }
        let mut out = String::from(
            "\n### Promotions\n\n| Image | Policy | File | Runs | Upstreams | Status |\n|---|---|---|---|---|---|\n",
        );
        for (image, rows) in self.promotions_by_image() {
            for p in rows {
                let upstreams: Vec<String> = p.upstreams.iter().map(upstream_line).collect();
                out.push_str(&format!(
                    "| `{}` | {} | `{}:{}` | `{}`{} | {} | {} |\n",
                    md(image),
                    md(&p.policy),
                    md(&located(p.repository.as_deref(), &p.file)),
                    p.line,
                    md(&p.current),
                    md(&since(p.since.as_deref())),
                    md(&upstreams.join("<br>")),
                    md(&outcome(p))
                ));
            }
        }
        out
    }
}

/// `promote 1.2.0`, `up to date`, `waits: 1.2.0 soaks in …: 1h left`.
fn outcome(p: &Promotion) -> String {
    match p.status {
        PromotionStatus::Promote => format!("promote {}", p.tag.as_deref().unwrap_or("?")),
        PromotionStatus::UpToDate => "up to date".to_string(),
        PromotionStatus::Waits => format!("waits: {}", p.waits.join("; ")),
    }
}

/// ` since 2026-…Z`, or nothing when unknown.
fn since(at: Option<&str>) -> String {
    at.map(|s| format!(" since {s}")).unwrap_or_default()
}

/// `policy shop-dev runs 1.1.0 since 2026-…Z (on the base branch, no cluster access)`.
fn upstream_line(u: &UpstreamRun) -> String {
    match &u.tag {
        None => format!("{} does not run the image", u.upstream),
        Some(tag) => {
            let since = since(u.since.as_deref());
            format!("{} runs {tag}{since} ({})", u.upstream, u.verification)
        }
    }
}
