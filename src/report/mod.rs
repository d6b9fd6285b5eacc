//! The report of a cycle: one typed model ([`Report`]), assembled once from what the engine
//! returns (its [`Plan`] and the Applications section), and rendered from that model for people
//! (table, Markdown), for programs (JSON: the model serialised) and as a unified diff.
//!
//! Pure: every rendering returns a `String`; the CLI decides where it goes. Output is stable
//! (sorted, no timestamps, no terminal-width wrapping) so golden tests can pin it. It sits above
//! the sources (it shows their Applications) and below the engine; it never imports either
//! engine or service.

use serde::Serialize;

use crate::plan::{
    Change, FileUpdate, Finding, Hold, Plan, Problem, Promotion, RepositoryOutcome, Severity,
    SkippedFile, SkippedTags, TargetDiff,
};

pub mod applications;
mod diff;
pub mod holds;
mod markdown;
mod promotions;
mod skipped_tags;
mod table;

use applications::ApplicationReport;
pub use applications::applications_markdown;
pub use table::{finding_text, findings_table, problem_text, tags};

/// How `tagpilot plan` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    #[default]
    Table,
    Json,
    Markdown,
}

/// Why a report could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("writing the JSON report")]
    Json(#[source] serde_json::Error),
}

/// Everything one cycle reports, as every format shows it. The JSON report is this model
/// serialised: `changes` (each with at least policy, image, file, line, from, to), `holds`,
/// `skipped_tags` (per policy and image, the tags selection passed over and why), `problems`,
/// `skipped`, `findings` and `repositories` (each when there are any: what was searched; each
/// target's commits and pull requests), `promotions` (when policies promote), `applications`
/// (when Applications are configured) and a `summary`.
#[derive(Debug, Serialize)]
pub struct Report<'a> {
    pub changes: &'a [Change],
    pub holds: &'a [Hold],
    /// Tags selection passed over, per policy and image, and why (when there are any).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub skipped_tags: &'a [SkippedTags],
    pub problems: &'a [Problem],
    pub skipped: &'a [SkippedFile],
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub findings: &'a [Finding],
    /// The configured repositories (targets) and what became of each: its commits, its pull
    /// requests.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub repositories: &'a [RepositoryOutcome],
    /// The Applications section, when `applications:` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applications: Option<&'a [ApplicationReport]>,
    /// Holds this cycle began: a person's rollback noticed on a base branch.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub holds_found: &'a [crate::holds::HeldTag],
    /// Rollback holds a newer tag ended this cycle.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub holds_ended: &'a [crate::holds::HeldTag],
    /// Verifications under way in `tagpilot run`, as its `--state-dir` has them: one line each
    /// (Application, repository, commit, fields, since).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub verifications_pending: &'a [String],
    /// Each field of an environment that follows others (`promote:`): what its upstreams run,
    /// and whether it promotes, is up to date or waits (and why).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub promotions: &'a [Promotion],
    pub summary: Summary,
    /// The local directory's files before and after, for the diff only.
    #[serde(skip)]
    pub files: &'a [FileUpdate],
    /// Configured repositories' files and Application patches before and after, for the diff.
    #[serde(skip)]
    pub diffs: &'a [TargetDiff],
}

/// The counts every format ends with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub changes: usize,
    pub files: usize,
    pub up_to_date: usize,
    pub held: usize,
    pub problems: usize,
    /// Findings that are warnings (see [`Finding`]); absent when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    pub warnings: usize,
    pub skipped: usize,
    pub policies: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// A change as the table and Markdown show it. The one place that reads a [`Change`]'s fields
/// for text, so a change to that type touches only [`ChangeRow::of`].
struct ChangeRow<'a> {
    policy: &'a str,
    image: &'a str,
    repository: Option<&'a str>,
    file: &'a str,
    line: usize,
    from: &'a str,
    to: &'a str,
}

impl<'a> ChangeRow<'a> {
    fn of(c: &'a Change) -> Self {
        ChangeRow {
            policy: &c.policy,
            image: &c.image,
            repository: c.repository.as_deref(),
            file: &c.file,
            line: c.line,
            from: &c.from,
            to: &c.to,
        }
    }

    /// `repository:path` for a configured repository, else the path.
    fn place(&self) -> String {
        located(self.repository, self.file)
    }
}

impl<'a> Report<'a> {
    /// The report of `plan` (its `files` the local directory's) and, when Applications are
    /// configured, their section.
    pub fn new(plan: &'a Plan, applications: Option<&'a [ApplicationReport]>) -> Self {
        Report {
            changes: &plan.changes,
            holds: &plan.holds,
            skipped_tags: &plan.skipped_tags,
            problems: &plan.problems,
            skipped: &plan.skipped,
            findings: &plan.findings,
            repositories: &plan.repositories,
            applications,
            holds_found: &plan.holds_found,
            holds_ended: &plan.ended_holds,
            verifications_pending: &[],
            promotions: &plan.promotions,
            summary: summary(plan),
            files: &plan.files,
            diffs: &plan.diffs,
        }
    }

    /// The report with the verifications under way (`plan --state-dir`).
    pub fn with_verifications(self, pending: &'a [String]) -> Self {
        Report {
            verifications_pending: pending,
            ..self
        }
    }

    /// The report in `format`.
    pub fn render(&self, format: Format) -> Result<String, ReportError> {
        Ok(match format {
            Format::Table => self.table(),
            Format::Json => self.json()?,
            Format::Markdown => self.markdown(),
        })
    }

    /// The model serialised, pretty-printed, with a final newline.
    pub fn json(&self) -> Result<String, ReportError> {
        let mut out = serde_json::to_string_pretty(self).map_err(ReportError::Json)?;
        out.push('\n');
        Ok(out)
    }

    /// The findings of one severity, in the plan's order.
    fn findings_of(&self, severity: Severity) -> impl Iterator<Item = &'a Finding> + use<'a> {
        let findings: &'a [Finding] = self.findings;
        findings.iter().filter(move |f| f.severity == severity)
    }

    /// The lines of the "Problems" section (problems, then findings that are problems) and of
    /// the "Warnings" section, as the table and Markdown list them.
    fn problem_and_warning_lines(&self) -> [(&'static str, Vec<String>); 2] {
        let problems: Vec<String> = self
            .problems
            .iter()
            .map(problem_text)
            .chain(self.findings_of(Severity::Problem).map(finding_text))
            .collect();
        let warnings: Vec<String> = self
            .findings_of(Severity::Warning)
            .map(finding_text)
            .collect();
        [("Problems", problems), ("Warnings", warnings)]
    }

    fn summary_line(&self) -> String {
        let s = &self.summary;
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
}

fn summary(plan: &Plan) -> Summary {
    let of_severity = |severity: Severity| {
        plan.findings
            .iter()
            .filter(|f| f.severity == severity)
            .count()
    };
    Summary {
        changes: plan.changes.len(),
        // Counted from the changes: files in remote repositories are committed, not in `files`.
        files: plan
            .changes
            .iter()
            .map(ChangeRow::of)
            .map(|c| (c.repository, c.file))
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        up_to_date: plan.up_to_date,
        held: plan.holds.len(),
        problems: plan.problems.len() + of_severity(Severity::Problem),
        warnings: of_severity(Severity::Warning),
        skipped: plan.skipped.len(),
        policies: plan.policies_used,
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A file as a user finds it: `repository:path` for a configured repository, else the path.
fn located(repository: Option<&str>, file: &str) -> String {
    match repository {
        Some(r) => format!("{r}:{file}"),
        None => file.to_string(),
    }
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap_or("")
}

/// `plan`'s report in `format`, without an Applications section.
pub fn render(plan: &Plan, format: Format) -> Result<String, ReportError> {
    Report::new(plan, None).render(format)
}

/// The default report of `plan`: a table of changes, then holds, problems and skipped files.
pub fn table(plan: &Plan) -> String {
    Report::new(plan, None).table()
}

/// `plan`'s JSON report (see [`Report`]).
pub fn json(plan: &Plan) -> Result<String, ReportError> {
    Report::new(plan, None).json()
}

/// `plan`'s Markdown report, as a pull request body or a CI job summary would show it.
pub fn markdown(plan: &Plan) -> String {
    Report::new(plan, None).markdown()
}

/// A unified diff of every file `plan` changes (see [`Report::diff`]).
pub fn diff(plan: &Plan) -> String {
    Report::new(plan, None).diff()
}

#[cfg(test)]
mod tests;
