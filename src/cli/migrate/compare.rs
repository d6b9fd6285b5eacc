//! `tagpilot migrate-patterns --compare`: the plan with the policies as they are, against the
//! plan with each proposal in place of the policies it replaces. Both are dry runs of one
//! session (one registry client, so each repository's tags are listed once for both), and what
//! is compared is what a person reviews: which field moves from which tag to which, never the
//! policy names, which a pattern's images change (`shop@shop/cart`).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::engine;
use crate::plan::Plan;
use crate::policy::{self, ImagePolicy};
use crate::session::{self, Session};

use super::super::CliError;
use super::patterns::Proposal;

/// One field's move, as both plans are compared.
type Move = (String, usize, String, String, String);

/// Plans before and after, and renders the comparison as `#` comment lines, so the output as a
/// whole stays a YAML stream a person can save as the new policy file.
pub async fn compare(
    config: Config,
    policies: Vec<ImagePolicy>,
    proposals: &[Proposal],
    cache_dir: Option<PathBuf>,
) -> Result<String, CliError> {
    let replaced: BTreeSet<&str> = proposals
        .iter()
        .flat_map(|p| p.replaced.iter().map(String::as_str))
        .collect();
    let mut after: Vec<ImagePolicy> = policies
        .iter()
        .filter(|p| !replaced.contains(p.name.as_str()))
        .cloned()
        .collect();
    for p in proposals {
        let shown = format!("<proposal {}>", p.name);
        after.extend(policy::parse_file(Path::new(&shown), &p.document)?);
    }
    let root = config.base_dir().to_path_buf();
    let options = session::Options {
        cache_dir,
        read_cluster: true,
        ..session::Options::default()
    };
    let session = Session::open(config, options).await?;
    let before = plan(&session, policies, &root).await?;
    let after = plan(&session, after, &root).await?;
    Ok(render(&before, &after, replaced.len(), proposals.len()))
}

async fn plan(
    session: &Session,
    policies: Vec<ImagePolicy>,
    root: &Path,
) -> Result<Plan, CliError> {
    let loaded = policy::Loaded {
        policies,
        errors: Vec::new(),
    };
    let input = session.input(
        &loaded,
        Some(root.to_path_buf()),
        session.applications.as_ref(),
    );
    let context = session.context(&(), Default::default());
    let options = engine::Options {
        dry_run: true,
        ..Default::default()
    };
    let cycle = engine::run(&input, &context, options).await?;
    Ok(Plan {
        files: cycle.local_files,
        ..cycle.plan
    })
}

fn moves(plan: &Plan) -> BTreeSet<Move> {
    plan.changes
        .iter()
        .map(|c| {
            let file = match &c.repository {
                Some(r) => format!("{r}:{}", c.file),
                None => c.file.clone(),
            };
            (file, c.line, c.field.clone(), c.from.clone(), c.to.clone())
        })
        .collect()
}

/// The counts of each plan, then every move only one of them makes.
pub(super) fn render(before: &Plan, after: &Plan, replaced: usize, proposals: usize) -> String {
    let mut out = String::from("---\n");
    let counts = |p: &Plan| {
        format!(
            "{} changes, {} holds, {} problems",
            p.changes.len(),
            p.holds.len(),
            p.problems.len()
        )
    };
    let _ = writeln!(out, "# plan before: {}", counts(before));
    let _ = writeln!(
        out,
        "# plan after ({proposals} pattern policies in place of {replaced}): {}",
        counts(after)
    );
    let (b, a) = (moves(before), moves(after));
    if b == a {
        let _ = writeln!(out, "# Both plans move the same fields to the same tags.");
    }
    for (side, only) in [("before", b.difference(&a)), ("after", a.difference(&b))] {
        for (file, line, field, from, to) in only {
            let _ = writeln!(out, "# only {side}: {file}:{line} {field} {from} -> {to}");
        }
    }
    out
}
