//! The Applications section in Markdown: per Application a heading, a table of its images
//! (what each does and where it lands), and lists of its patch, skipped annotations and
//! problems, as the rest of the Markdown report shows rows and lines. The table and text
//! rendering stays beside the section's type ([`super::text`]). Pure.

use super::super::markdown::md;
use super::ApplicationReport;
use crate::argocd::plan::outcome::{ImageOutcome, ImageStatus};

/// The section for the Markdown report; empty without Applications.
pub fn applications_markdown(reports: &[ApplicationReport]) -> String {
    if reports.is_empty() {
        return String::new();
    }
    let mut out = String::from("\n### Applications\n");
    for r in reports {
        out.push_str(&format!(
            "\n#### `{}` ({})\n\n",
            md(&r.application),
            md(&r.origin)
        ));
        if let Some(by) = &r.configured_by {
            out.push_str(&format!("Configured by {}.\n\n", md(by)));
        }
        if !r.images.is_empty() {
            out.push_str("| Alias | Image | Result | Source | File |\n|---|---|---|---|---|\n");
            for i in &r.images {
                out.push_str(&image_row(i));
            }
        }
        let mut items = Vec::new();
        if let Some(p) = &r.patch {
            items.push(format!("Patch ({}): `{}`", p.status, p.body));
        }
        for s in &r.skipped_annotations {
            items.push(format!("Skipped `{}`: {}", s.key, s.reason));
        }
        for p in &r.problems {
            items.push(format!("Problem: {p}"));
        }
        if !items.is_empty() && !r.images.is_empty() {
            out.push('\n');
        }
        for item in items {
            out.push_str(&format!("- {}\n", md(&item)));
        }
    }
    out
}

fn image_row(i: &ImageOutcome) -> String {
    let result = match (i.status, &i.from, &i.to) {
        (ImageStatus::Update, Some(f), Some(t)) => format!("`{}` → `{}`", md(f), md(t)),
        (ImageStatus::Held, Some(f), _) => format!("held at `{}`", md(f)),
        (s, _, _) => s.to_string(),
    };
    let result = match &i.reason {
        Some(reason) => format!("{result}: {}", md(&reason.to_string())),
        None => result,
    };
    let place = match &i.file {
        Some(f) => format!("{}:{f}", i.repository),
        None => i.repository.clone(),
    };
    format!(
        "| {} | `{}` | {result} | {} {} | `{}` |\n",
        md(&i.alias),
        md(&i.image),
        i.source,
        i.kind.name(),
        md(&place)
    )
}
