//! Renders a [`Plan`] for people (table, Markdown) and programs (JSON), and as a unified diff.
//!
//! Pure: every function returns a `String`; the CLI decides where it goes. Output is stable
//! (sorted, no timestamps, no terminal-width wrapping) so golden tests can pin it.

use comfy_table::{ContentArrangement, Table, presets};
use serde::Serialize;

use crate::plan::{
    Change, DiffTarget, Finding, Hold, Plan, Problem, RepositoryOutcome, Severity, SkippedFile,
};
use crate::select::RankedTag;

/// How `tagpilot plan` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Markdown,
}

pub fn render(plan: &Plan, format: Format) -> String {
    match format {
        Format::Table => table(plan),
        Format::Json => json(plan),
        Format::Markdown => markdown(plan),
    }
}

#[derive(Serialize)]
struct Summary {
    changes: usize,
    files: usize,
    up_to_date: usize,
    held: usize,
    problems: usize,
    /// Findings that are warnings (see [`Finding`]); absent when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    warnings: usize,
    skipped: usize,
    policies: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The findings of one severity, in the plan's order.
fn findings_of(plan: &Plan, severity: Severity) -> impl Iterator<Item = &Finding> {
    plan.findings.iter().filter(move |f| f.severity == severity)
}

fn summary(plan: &Plan) -> Summary {
    Summary {
        changes: plan.changes.len(),
        // Counted from the changes: files in remote repositories are committed, not in `files`.
        files: plan
            .changes
            .iter()
            .map(|c| (&c.repository, &c.file))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        up_to_date: plan.up_to_date,
        held: plan.holds.len(),
        problems: plan.problems.len() + findings_of(plan, Severity::Problem).count(),
        warnings: findings_of(plan, Severity::Warning).count(),
        skipped: plan.skipped.len(),
        policies: plan.policies_used,
    }
}

fn summary_line(plan: &Plan) -> String {
    let s = summary(plan);
    let mut line = format!(
        "{} in {}; {} up to date, {} held, {} skipped, {}",
        plural(s.changes, "change"),
        plural(s.files, "file"),
        s.up_to_date,
        s.held,
        s.skipped,
        plural(s.problems, "problem"),
    );
    if s.warnings > 0 {
        line.push_str(&format!(", {}", plural(s.warnings, "warning")));
    }
    line
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The JSON report: `changes` (each with at least policy, image, file, line, from, to), `holds`,
/// `problems`, `skipped`, `findings` (when there are any: `kind`, `severity`, what was searched)
/// and a `summary`.
pub fn json(plan: &Plan) -> String {
    #[derive(Serialize)]
    struct Report<'a> {
        changes: &'a [Change],
        holds: &'a [Hold],
        problems: &'a [Problem],
        skipped: &'a [SkippedFile],
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        findings: &'a [Finding],
        #[serde(skip_serializing_if = "<[_]>::is_empty")]
        repositories: &'a [RepositoryOutcome],
        summary: Summary,
    }
    let report = Report {
        changes: &plan.changes,
        holds: &plan.holds,
        problems: &plan.problems,
        skipped: &plan.skipped,
        findings: &plan.findings,
        repositories: &plan.repositories,
        summary: summary(plan),
    };
    let mut out = serde_json::to_string_pretty(&report).expect("plan serialises");
    out.push('\n');
    out
}

fn plain_table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
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

/// The default report: a table of changes, then holds, problems and skipped files.
pub fn table(plan: &Plan) -> String {
    let mut out = String::new();
    if plan.changes.is_empty() {
        out.push_str("No changes.\n");
    } else {
        out += &plain_table(
            &["POLICY", "IMAGE", "FILE", "LINE", "FROM", "TO"],
            plan.changes.iter().map(|c| {
                vec![
                    c.policy.clone(),
                    c.image.clone(),
                    located(&c.repository, &c.file),
                    c.line.to_string(),
                    c.from.clone(),
                    c.to.clone(),
                ]
            }),
        );
    }
    if !plan.holds.is_empty() {
        out.push_str("\nHeld:\n");
        out += &plain_table(
            &["POLICY", "FILE", "LINE", "CURRENT", "REASON"],
            plan.holds.iter().map(|h| {
                vec![
                    h.policy.clone(),
                    located(&h.repository, &h.file),
                    h.line.to_string(),
                    h.current.clone(),
                    h.reason.clone(),
                ]
            }),
        );
    }
    out += &findings_table(plan);
    if !plan.skipped.is_empty() {
        out.push_str("\nSkipped files:\n");
        for s in &plan.skipped {
            out.push_str(&format!(
                "  {}: {}\n",
                located(&s.repository, &s.file),
                first_line(&s.reason)
            ));
        }
    }
    if !plan.repositories.is_empty() {
        out.push_str("\nRepositories:\n");
        for r in &plan.repositories {
            out.push_str(&format!("  {}\n", repository_line(r)));
        }
    }
    out.push('\n');
    out.push_str(&summary_line(plan));
    out.push('\n');
    out
}

/// The "Problems:" section (problems, then findings that are problems) and the "Warnings:"
/// section, as the table and `tagpilot check` show them.
pub fn findings_table(plan: &Plan) -> String {
    let mut out = String::new();
    let problems: Vec<String> = plan
        .problems
        .iter()
        .map(problem_text)
        .chain(findings_of(plan, Severity::Problem).map(finding_text))
        .collect();
    let warnings: Vec<String> = findings_of(plan, Severity::Warning)
        .map(finding_text)
        .collect();
    for (title, lines) in [("Problems", problems), ("Warnings", warnings)] {
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
    subject.push(format!("image {}", f.image));
    format!(
        "{}: {}; searched {}",
        subject.join(", "),
        f.message,
        f.searched
    )
}

/// `manifests (https://git.example/acme/m.git, main): pushed 1 commit: 1a2b3c4 chore(images): …`
fn repository_line(r: &RepositoryOutcome) -> String {
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
        first_line(&p.message).to_string()
    } else {
        format!("{}: {}", subject.join(", "), first_line(&p.message))
    }
}

/// A file as a user finds it: `repository:path` for a configured repository, else the path.
fn located(repository: &Option<String>, file: &str) -> String {
    match repository {
        Some(r) => format!("{r}:{file}"),
        None => file.to_string(),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

fn md(s: &str) -> String {
    s.replace('|', "\\|")
}

/// A Markdown report, as a pull request body or a CI job summary would show it.
pub fn markdown(plan: &Plan) -> String {
    let mut out = String::from("## tagpilot plan\n\n");
    if plan.changes.is_empty() {
        out.push_str("No changes.\n");
    } else {
        out.push_str("| Policy | Image | File | From | To |\n|---|---|---|---|---|\n");
        for c in &plan.changes {
            out.push_str(&format!(
                "| {} | `{}` | `{}:{}` | `{}` | `{}` |\n",
                md(&c.policy),
                md(&c.image),
                md(&located(&c.repository, &c.file)),
                c.line,
                md(&c.from),
                md(&c.to)
            ));
        }
    }
    if !plan.holds.is_empty() {
        out.push_str("\n### Held\n\n| Policy | File | Current | Reason |\n|---|---|---|---|\n");
        for h in &plan.holds {
            out.push_str(&format!(
                "| {} | `{}:{}` | `{}` | {} |\n",
                md(&h.policy),
                md(&located(&h.repository, &h.file)),
                h.line,
                md(&h.current),
                md(&h.reason)
            ));
        }
    }
    let problems: Vec<String> = plan
        .problems
        .iter()
        .map(problem_text)
        .chain(findings_of(plan, Severity::Problem).map(finding_text))
        .collect();
    let warnings: Vec<String> = findings_of(plan, Severity::Warning)
        .map(finding_text)
        .collect();
    for (title, lines) in [("Problems", problems), ("Warnings", warnings)] {
        if lines.is_empty() {
            continue;
        }
        out.push_str(&format!("\n### {title}\n\n"));
        for line in lines {
            out.push_str(&format!("- {}\n", md(&line)));
        }
    }
    if !plan.skipped.is_empty() {
        out.push_str("\n### Skipped files\n\n");
        for s in &plan.skipped {
            out.push_str(&format!(
                "- `{}`: {}\n",
                md(&located(&s.repository, &s.file)),
                md(first_line(&s.reason))
            ));
        }
    }
    if !plan.repositories.is_empty() {
        out.push_str("\n### Repositories\n\n");
        for r in &plan.repositories {
            out.push_str(&format!(
                "- {}\n",
                md(&repository_line(r)).replace("\n    ", "\n  - ")
            ));
        }
    }
    out.push_str(&format!("\n{}\n", summary_line(plan)));
    out
}

/// A unified diff of every file the plan changes, `a/` and `b/` prefixed like git's: the local
/// directory's files first, then each configured repository's files as its commits would leave
/// them, then each Application patch. A `#` line names the repository or Application before its
/// diffs; `git apply` and `patch` skip such lines, so a repository's part applies in a checkout.
pub fn diff(plan: &Plan) -> String {
    let mut out = String::new();
    for f in &plan.files {
        let name = slash_path(&f.path);
        out += &unified(
            &f.original,
            &f.updated,
            &format!("a/{name}"),
            &format!("b/{name}"),
        );
    }
    let mut heading = String::new();
    for d in &plan.diffs {
        let (this, old, new) = match &d.target {
            DiffTarget::RepositoryFile {
                repository,
                group,
                path,
            } => (
                match group {
                    Some(g) => format!("# repository {repository}, pull request for {g}\n"),
                    None => format!("# repository {repository}\n"),
                },
                match d.original {
                    Some(_) => format!("a/{path}"),
                    None => "/dev/null".to_string(),
                },
                format!("b/{path}"),
            ),
            DiffTarget::Application { id } => (
                format!("# Application {id}: the merge patch (write-back-method argocd)\n"),
                format!("a/Application {id} (live)"),
                format!("b/Application {id} (patched)"),
            ),
        };
        if this != heading {
            out += &this;
            heading = this;
        }
        out += &unified(d.original.as_deref().unwrap_or(""), &d.updated, &old, &new);
    }
    out
}

fn unified(original: &str, updated: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(original, updated)
        .unified_diff()
        .context_radius(3)
        .header(old, new)
        .to_string()
}

fn slash_path(path: &std::path::Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::PullRequestSummary;

    fn with_pull_request(warnings: Vec<String>) -> Plan {
        Plan {
            repositories: vec![RepositoryOutcome {
                repository: "manifests".into(),
                url: "https://git.example/acme/manifests.git".into(),
                branch: "main".into(),
                status: crate::plan::RepositoryStatus::PullRequests,
                sources: vec![],
                commits: vec![],
                pull_requests: vec![PullRequestSummary {
                    group: "api".into(),
                    branch: "tagpilot/api".into(),
                    status: "opened".into(),
                    number: Some(7),
                    reference: Some("#7".into()),
                    url: None,
                    warnings,
                }],
                error: None,
            }],
            ..Plan::default()
        }
    }

    fn file(repository: &str, group: Option<&str>, path: &str) -> DiffTarget {
        DiffTarget::RepositoryFile {
            repository: repository.into(),
            group: group.map(Into::into),
            path: path.into(),
        }
    }

    #[test]
    fn diff_names_each_repository_once_and_shows_new_files_from_dev_null() {
        let plan = Plan {
            diffs: vec![
                crate::plan::TargetDiff {
                    target: file("manifests", None, "apps/a.yaml"),
                    original: Some("image: a:1\n".into()),
                    updated: "image: a:2\n".into(),
                },
                crate::plan::TargetDiff {
                    target: file("manifests", None, "apps/.argocd-source-web.yaml"),
                    original: None,
                    updated: "kustomize:\n".into(),
                },
                crate::plan::TargetDiff {
                    target: file("manifests", Some("api"), "apps/a.yaml"),
                    original: Some("image: a:1\n".into()),
                    updated: "image: a:3\n".into(),
                },
                crate::plan::TargetDiff {
                    target: DiffTarget::Application {
                        id: "argocd/shop".into(),
                    },
                    original: Some("[1]\n".into()),
                    updated: "[2]\n".into(),
                },
            ],
            ..Plan::default()
        };
        assert_eq!(
            diff(&plan),
            "# repository manifests
--- a/apps/a.yaml
+++ b/apps/a.yaml
@@ -1 +1 @@
-image: a:1
+image: a:2
--- /dev/null
+++ b/apps/.argocd-source-web.yaml
@@ -0,0 +1 @@
+kustomize:
# repository manifests, pull request for api
--- a/apps/a.yaml
+++ b/apps/a.yaml
@@ -1 +1 @@
-image: a:1
+image: a:3
# Application argocd/shop: the merge patch (write-back-method argocd)
--- a/Application argocd/shop (live)
+++ b/Application argocd/shop (patched)
@@ -1 +1 @@
-[1]
+[2]
"
        );
    }

    #[test]
    fn pull_request_warnings_reach_every_format() {
        let plan = with_pull_request(vec![
            "reviewer \"ghost\" is neither a user nor a team".into(),
        ]);
        let table = table(&plan);
        assert!(table.contains("api (tagpilot/api) #7: opened"), "{table}");
        assert!(table.contains("warning: reviewer \"ghost\""), "{table}");
        assert!(json(&plan).contains("\"warnings\""));
        assert!(markdown(&plan).contains("ghost"));
        // No warnings, no noise.
        assert!(!json(&with_pull_request(vec![])).contains("\"warnings\""));
    }
}
