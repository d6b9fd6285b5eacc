//! `tagpilot plan` and `tagpilot apply`: one cycle of the engine over every source and target
//! (written unless planning), its report printed in the format asked for, then the diff.

use std::process::ExitCode;

use crate::engine::{self, Cycle};
use crate::plan::Plan;
use crate::policy;
use crate::report::{Format, Report, ReportError};
use crate::session::{self, Session};

use super::CliError;
use super::args::PlanArgs;
use super::spinner::Spinner;

pub async fn plan_or_apply(args: PlanArgs, write: bool) -> Result<ExitCode, CliError> {
    // Check what the user wrote first; talk to registries and git servers second.
    let config = session::load_config(args.config.config.as_deref())?;
    // A broken policy file is reported with its location; every valid policy is still planned.
    let policies = policy::load_all(&config);
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| config.base_dir().to_path_buf());
    // Held for the whole command, so no service opens the store meanwhile.
    let (_lock, state) = match &args.state_dir {
        Some(dir) => {
            let (lock, state) = super::holds::open_store(dir)?;
            (Some(lock), Some(std::sync::Arc::new(state)))
        }
        None => (None, None),
    };
    let options = session::Options {
        cache_dir: args.cache_dir.clone(),
        read_cluster: true,
        state,
        ..session::Options::default()
    };
    let session = Session::open(config, options).await?;
    let progress = Spinner::new();
    let input = session.input(&policies, Some(root.clone()), session.applications.as_ref());
    let context = session.context(&progress, Default::default());
    let options = engine::Options {
        dry_run: !write,
        diff: args.diff,
        rendered: args.rendered,
        ..Default::default()
    };
    let cycle = engine::run(&input, &context, options).await?;
    // What `tagpilot run` is still verifying, when it left that in this store. A store that
    // cannot say is a problem of the plan, not "nothing under way".
    let mut verifying = Vec::new();
    if let Some(state) = &session.state {
        match state.verifications() {
            Ok(pending) => verifying = pending.iter().map(ToString::to_string).collect(),
            Err(e) => eprintln!("warning: {}", crate::error_chain::chain(&e)),
        }
        state.flush();
    }
    drop(progress);

    let (written, failed) = (cycle.written, cycle.failed);
    let (shown, text) = render_cycle(cycle, args.format, args.diff, &verifying)?;
    print!("{text}");
    if written > 0 {
        eprintln!("wrote {written} file(s) under {}", root.display());
    }
    if failed {
        return Ok(ExitCode::from(1));
    }
    let pending = !shown.changes.is_empty();
    Ok(exit_code(&shown, args.exit_code && pending))
}

/// What `plan` and `apply` print of a cycle: its report (the local directory's files and the
/// configured repositories', with the Applications section) in `format`, then every change as
/// a unified diff when asked. Also the plan shown, which decides the exit code.
fn render_cycle(
    cycle: Cycle,
    format: Format,
    diff: bool,
    verifying: &[String],
) -> Result<(Plan, String), ReportError> {
    let shown = Plan {
        files: cycle.local_files,
        ..cycle.plan
    };
    let report = Report::new(&shown, cycle.applications.as_deref())
        .with_repositories(&cycle.repositories)
        .with_verifications(verifying);
    let mut out = report.render(format)?;
    if diff {
        out.push_str(&report.diff());
    }
    Ok((shown, out))
}

/// 1 when the plan holds a problem (a finding that is a warning does not count), else 2 for
/// pending changes when asked, else 0.
fn exit_code(plan: &Plan, exit_code_on_changes: bool) -> ExitCode {
    if plan.has_problems() {
        ExitCode::from(1)
    } else if exit_code_on_changes {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}
