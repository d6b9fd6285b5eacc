//! The plain-text renderings: the default table of a [`Report`], the problems and warnings
//! sections `tagpilot check` shares with it, and `tagpilot tags`' ranking.

use comfy_table::{ContentArrangement, Table, presets};

use crate::plan::{Finding, FindingKind, Plan, Problem, RepositoryOutcome};
use crate::select::RankedTag;

use super::{ChangeRow, Report, first_line, located};

impl Report<'_> {
    /// The default report: a table of changes, then holds, problems and skipped files, each
    /// repository's outcome, the Applications section and the summary.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if self.changes.is_empty() {
            out.push_str("No changes.\n");
        } else {
            out += &plain_table(
                &["POLICY", "IMAGE", "FILE", "LINE", "FROM", "TO"],
                self.changes.iter().map(ChangeRow::of).map(|c| {
                    vec![
                        c.policy.to_string(),
                        c.image.to_string(),
                        c.place(),
                        c.line.to_string(),
                        c.from.to_string(),
                        c.to.to_string(),
                    ]
                }),
            );
        }
        out += &self.version_labels_table();
        if !self.holds.is_empty() {
            out.push_str("\nHeld:\n");
            out += &plain_table(
                &["POLICY", "FILE", "LINE", "CURRENT", "REASON"],
                self.holds.iter().map(|h| {
                    vec![
                        h.policy.clone(),
                        located(h.repository.as_deref(), &h.file),
                        h.line.to_string(),
                        h.current.clone(),
                        h.reason.to_string(),
                    ]
                }),
            );
        }
        out += &self.skipped_tags_table();
        out += &self.held_tags_table();
        out += &self.promotions_table();
        out += &self.findings_section();
        if !self.skipped.is_empty() {
            out.push_str("\nSkipped files:\n");
            for s in self.skipped {
                out.push_str(&format!(
                    "  {}: {}\n",
                    located(s.repository.as_deref(), &s.file),
                    first_line(&s.reason)
                ));
            }
        }
        if !self.repositories.is_empty() {
            out.push_str("\nRepositories:\n");
            for r in self.repositories {
                out.push_str(&format!("  {}\n", repository_line(r)));
            }
        }
        out.push('\n');
        out.push_str(&self.summary_line());
        out.push('\n');
        out += &self.applications_section();
        out
    }

    /// The labels and annotations that follow the changes' images (`versionLabels`), each
    /// once; empty when there are none.
    fn version_labels_table(&self) -> String {
        let rows = self.version_label_rows();
        if rows.is_empty() {
            return String::new();
        }
        format!(
            "\nVersion labels:\n{}",
            plain_table(&["FILE", "LINE", "LABEL", "FROM", "TO"], rows)
        )
    }

    /// The changes' version labels, each once: file, line, label, from, to.
    pub(super) fn version_label_rows(&self) -> Vec<Vec<String>> {
        let mut rows: Vec<Vec<String>> = Vec::new();
        for c in self.changes {
            for l in &c.labels {
                let row = vec![
                    located(c.repository.as_deref(), &c.file),
                    l.line.to_string(),
                    l.label.clone(),
                    l.from.clone(),
                    l.to.clone(),
                ];
                if !rows.contains(&row) {
                    rows.push(row);
                }
            }
        }
        rows
    }

    /// The "Problems:" section (problems, then findings that are problems) and the "Warnings:"
    /// section.
    fn findings_section(&self) -> String {
        let mut out = String::new();
        for (title, lines) in self.problem_and_warning_lines() {
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

    /// The Applications section as the table ends with it; empty without one.
    pub(super) fn applications_section(&self) -> String {
        self.applications
            .map(super::applications::text)
            .unwrap_or_default()
    }
}

/// The "Problems:" and "Warnings:" sections of `plan`, as the table and `tagpilot check` show
/// them.
pub fn findings_table(plan: &Plan) -> String {
    Report::new(plan, None).findings_section()
}

pub(super) fn plain_table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header.to_vec());
    for row in rows {
        t.add_row(row);
    }
    // comfy-table pads every cell; trailing blanks are noise in terminals and golden files.
    let mut out = String::new();
    for line in t.to_string().lines() {
        let line = line.trim_end();
        out.push_str(line.strip_prefix(' ').unwrap_or(line));
        out.push('\n');
    }
    out
}

/// One line naming a finding's subject, what it found and what was searched:
/// `policy api, image …: its targets match no file; searched paths aps/** in the local directory`.
pub fn finding_text(f: &Finding) -> String {
    let mut subject = Vec::new();
    if let Some(repository) = &f.repository {
        subject.push(format!("repository {repository}"));
    }
    if let Some(application) = &f.application {
        subject.push(format!("application {application}"));
    } else if let Some(policy) = &f.policy {
        subject.push(format!("policy {policy}"));
    }
    // An annotation nothing reads concerns the Application, not one image.
    if !f.image.is_empty() {
        subject.push(format!("image {}", f.image));
    }
    // A label left alone was not searched for: it is at one place, as is an annotation.
    let searched = match f.kind {
        FindingKind::VersionLabelLeft
        | FindingKind::UnknownAnnotation
        | FindingKind::PatternOverridden
        | FindingKind::PatternOutranked => "at",
        _ => "searched",
    };
    format!(
        "{}: {}; {searched} {}",
        subject.join(", "),
        f.message,
        f.searched
    )
}

/// `manifests (https://git.example/acme/m.git, main): pushed 1 commit: 1a2b3c4 chore(images): …`
pub(super) fn repository_line(r: &RepositoryOutcome) -> String {
    let mut line = format!("{} ({}, {}): {}", r.repository, r.url, r.branch, r.status);
    if let Some(e) = &r.error {
        line.push_str(&format!(": {}", first_line(e)));
    }
    if r.sources.len() > 1 {
        line.push_str(&format!("\n    named by: {}", r.sources.join(", ")));
    }
    for c in &r.commits {
        line.push_str(&format!(
            "\n    {} {}",
            &c.id[..c.id.len().min(12)],
            c.summary
        ));
    }
    for pr in &r.pull_requests {
        let number = pr
            .reference
            .as_ref()
            .map(|r| format!(" {r}"))
            .unwrap_or_default();
        line.push_str(&format!(
            "\n    {} ({}){number}: {}",
            pr.group, pr.branch, pr.status
        ));
        for w in &pr.warnings {
            line.push_str(&format!("\n      warning: {w}"));
        }
    }
    line
}

/// One line that names everything known about a problem: policy, image, file:line.
pub fn problem_text(p: &Problem) -> String {
    let mut subject = Vec::new();
    if let Some(repository) = &p.repository {
        subject.push(format!("repository {repository}"));
    }
    if let Some(policy) = &p.policy {
        subject.push(format!("policy {policy}"));
    }
    if let Some(image) = &p.image {
        subject.push(format!("image {image}"));
    }
    match (&p.file, p.line) {
        (Some(f), Some(l)) => subject.push(format!("{f}:{l}")),
        (Some(f), None) => subject.push(f.clone()),
        _ => {}
    }
    if subject.is_empty() {
        first_line(&p.reason.to_string()).to_string()
    } else {
        format!(
            "{}: {}",
            subject.join(", "),
            first_line(&p.reason.to_string())
        )
    }
}

/// `tagpilot tags`: tags in policy order, the chosen one marked, the excluded ones with the reason.
pub fn tags(image: &str, ranked: &[RankedTag]) -> String {
    let mut out = plain_table(
        &["", "TAG", "NOTE"],
        ranked.iter().map(|r| {
            let mut notes = Vec::new();
            if r.chosen {
                notes.push("chosen".to_string());
            }
            if r.current {
                notes.push("current".to_string());
            }
            if let Some(why) = &r.excluded {
                notes.push(why.to_string());
            }
            vec![
                (if r.chosen { "*" } else { "" }).to_string(),
                r.tag.clone(),
                notes.join("; "),
            ]
        }),
    );
    match ranked.iter().find(|r| r.chosen) {
        Some(r) => out.push_str(&format!("\nchosen: {image}:{}\n", r.tag)),
        None => out.push_str("\nno tag satisfies the policy\n"),
    }
    out
}
