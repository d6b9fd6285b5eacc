//! The `tagpilot` command: parses flags, hands each command to its runner in
//! [`tagpilot::cli`] (the `run` service is wired here), prints the error chain, and exits with
//! a deliberate code (0 success, 1 error, 2 changes pending with `--exit-code`).

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;
use tagpilot::cli::args::RunArgs;
use tagpilot::cli::{self, Cli, Command, LogFormat};
use tagpilot::session;

/// jemalloc, not the C library's allocator: with threads scanning files and serving requests,
/// glibc's per-thread arenas keep much more than is live (ARCHITECTURE.md, "Memory").
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read once at its first allocation (`_RJEM_MALLOC_CONF` in the
/// environment still overrides them):
/// - as many arenas as CPUs, each thread on the arena of the CPU it runs on, instead of four
///   per CPU, so what one scanning thread frees another reuses;
/// - freed pages go back to the kernel at once instead of after ten seconds: a plan is over in
///   seconds, so a delay would only add everything it ever freed to its peak (30 MB of 190 at
///   20,000 Applications), for no measurable CPU time (`bench/README.md`).
#[cfg(all(target_os = "linux", not(target_env = "msvc")))]
// SAFETY: jemalloc reads this symbol as a `const char *` to a NUL-terminated string; a
// reference to a byte array is a thin pointer to exactly that, immutable and 'static.
#[allow(unsafe_code, non_upper_case_globals)]
#[unsafe(export_name = "_rjem_malloc_conf")]
static malloc_conf: &[u8; 54] = b"percpu_arena:percpu,dirty_decay_ms:0,muzzy_decay_ms:0\0";

fn main() -> ExitCode {
    let cli = Cli::parse();
    // A service says what it does; a one-shot command only what went wrong.
    let default_filter = match cli.command {
        Command::Run(_) => "info",
        _ => "warn",
    };
    init_logging(cli.log.as_deref().unwrap_or(default_filter), cli.log_format);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = runtime.block_on(run(cli));
    // Dropping the runtime would wait for every blocking task, and after a second signal one
    // may be a push stuck in a remote's slow hook: `tagpilot run` promises to abort, so nothing
    // is waited for. Every command awaits its own work before it returns; what is left is
    // only what an abort walked away from.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
        Err(err) => print_error(&err),
    }
}

/// `error: what failed: why: …` on stderr, and exit code 1. Each error says its own part, so
/// the chain, each link once, tells the whole story (ripgrep's `main` is the model).
fn print_error(err: &anyhow::Error) -> ExitCode {
    let err: &(dyn std::error::Error + 'static) = err.as_ref();
    eprintln!("error: {}", tagpilot::error_chain::chain(err));
    ExitCode::from(1)
}

fn init_logging(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "warn".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Json => logs.json().init(),
        // Colour codes only for a person at a terminal; a log collector would store them verbatim.
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}

async fn run(flags: Cli) -> Result<ExitCode> {
    match flags.command {
        Command::Plan(args) => Ok(cli::plan::plan_or_apply(args, false).await?),
        Command::Apply(args) => Ok(cli::plan::plan_or_apply(args, true).await?),
        Command::Check(args) => Ok(cli::check::check(args)?),
        Command::Tags(args) => Ok(cli::tags::tags(args).await?),
        Command::Run(args) => run_service(args).await,
        Command::Holds(args) => Ok(cli::holds::holds(args).await?),
        Command::Freeze(args) => {
            println!("{}", cli::freeze::freeze(&args).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::Unfreeze(args) => {
            println!("{}", cli::freeze::unfreeze(&args).await?);
            Ok(ExitCode::SUCCESS)
        }
        Command::MigrateAnnotations(args) => Ok(cli::migrate::migrate_annotations(&args)?),
        Command::MigratePatterns(args) => Ok(cli::migrate::migrate_patterns(&args).await?),
        Command::Completions { shell } => {
            cli::docs::completions(shell, &mut std::io::stdout());
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema { of } => {
            print!("{}", cli::docs::schema(of));
            Ok(ExitCode::SUCCESS)
        }
        Command::Man => {
            cli::docs::man_page(&mut std::io::stdout())?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn run_service(args: RunArgs) -> Result<ExitCode> {
    let config = session::load_config(args.config.config.as_deref())?;
    let settings = tagpilot::run::Settings {
        interval: args.interval,
        listen: args.listen,
        state_dir: args.state_dir,
        cache_dir: args.cache_dir,
        leader_election: args.leader.settings(),
        image_updater_metrics: args.image_updater_metrics,
        cluster: None,
    };
    match tagpilot::run::main(config, settings).await? {
        tagpilot::run::Stopped::Drained => Ok(ExitCode::SUCCESS),
        // Like a process killed by SIGINT: 128 + 2.
        tagpilot::run::Stopped::Aborted => Ok(ExitCode::from(130)),
    }
}
