//! The `tagpilot` command: parses flags, wires the library together, prints, and exits with a
//! deliberate code (0 success, 1 error, 2 changes pending with `--exit-code`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tagpilot::config::{self, Config};
use tagpilot::plan::{self, Plan};
use tagpilot::registry::RegistryClient;
use tagpilot::report::{self, Format};
use tagpilot::{apply, policy, select};

/// Keeps container image references in GitOps manifest repositories up to date.
#[derive(Parser, Debug)]
#[command(name = "tagpilot", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log filter (`info`, `tagpilot=debug`, …); logs go to stderr.
    #[arg(long, global = true, env = "TAGPILOT_LOG", default_value = "warn")]
    log: String,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show what would change, writing nothing.
    Plan(PlanArgs),
    /// Make the changes: rewrite the files in place.
    Apply(PlanArgs),
    /// Validate tagpilot.yaml and every policy, without network.
    Check(ConfigArgs),
    /// List an image's tags in policy order and mark the one a policy would choose.
    Tags(TagsArgs),
}

#[derive(Args, Debug)]
struct ConfigArgs {
    /// Path to tagpilot.yaml (default: ./tagpilot.yaml).
    #[arg(long, short = 'c', env = "TAGPILOT_CONFIG")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct PlanArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// The directory of manifests (default: the directory holding tagpilot.yaml).
    #[arg(long)]
    root: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
    /// Also print a unified diff of every changed file.
    #[arg(long)]
    diff: bool,
    /// Exit with 2 when there are changes (after applying them, for `apply`).
    #[arg(long)]
    exit_code: bool,
}

#[derive(Args, Debug)]
struct TagsArgs {
    /// The image repository, e.g. `ghcr.io/org/app` (a tag, if given, is taken as the current one).
    image: String,
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    strategy: select::StrategyArgs,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            for cause in err.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::from(1)
        }
    }
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "warn".into());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plan(args) => plan_or_apply(args, false).await,
        Command::Apply(args) => plan_or_apply(args, true).await,
        Command::Check(args) => check(args),
        Command::Tags(args) => tags(args).await,
    }
}

/// `--config`, else `./tagpilot.yaml`.
fn load_config(args: &ConfigArgs) -> Result<Config> {
    let path = match &args.config {
        Some(p) => p.clone(),
        None => {
            let p = PathBuf::from(config::DEFAULT_CONFIG_FILE);
            if !p.exists() {
                bail!(
                    "no {} in {}; pass --config PATH",
                    config::DEFAULT_CONFIG_FILE,
                    std::env::current_dir().map(|d| d.display().to_string()).unwrap_or_default()
                );
            }
            p
        }
    };
    Ok(config::load(&path)?)
}

async fn plan_or_apply(args: PlanArgs, write: bool) -> Result<ExitCode> {
    // Check what the user wrote first; talk to registries second.
    let config = load_config(&args.config)?;
    let policies = policy::load(&config)?;
    let root = args.root.clone().unwrap_or_else(|| config.base_dir().to_path_buf());
    let registry = RegistryClient::new(&config.registries).context("setting up registry access")?;

    let progress = Spinner::new();
    let scope = plan::Scope { root: root.clone(), repository: None, exclude: own_files(&config, &policies) };
    let plan = plan::plan(&scope, &policies, &registry, &progress).await?;
    drop(progress);

    print!("{}", report::render(&plan, args.format));
    if args.diff {
        print!("{}", report::diff(&plan));
    }
    if write {
        let written = apply::write_files(&root, &plan.files)?;
        eprintln!("wrote {} file(s) under {}", written.len(), root.display());
    }
    Ok(exit_code(&plan, args.exit_code))
}

/// tagpilot's own config and policy files: YAML, but never manifests to rewrite.
fn own_files(config: &Config, policies: &[tagpilot::policy::ImagePolicy]) -> Vec<PathBuf> {
    config.path.iter().cloned().chain(policies.iter().map(|p| p.source.file.clone())).collect()
}

fn exit_code(plan: &Plan, exit_code_on_changes: bool) -> ExitCode {
    if !plan.problems.is_empty() {
        ExitCode::from(1)
    } else if exit_code_on_changes && plan.has_changes() {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn check(args: ConfigArgs) -> Result<ExitCode> {
    let config = load_config(&args)?;
    let policies = policy::load(&config)?;
    println!(
        "{}: {} registr{}, {} polic{} OK",
        config.path.as_deref().unwrap_or(Path::new(config::DEFAULT_CONFIG_FILE)).display(),
        config.registries.len(),
        if config.registries.len() == 1 { "y" } else { "ies" },
        policies.len(),
        if policies.len() == 1 { "y" } else { "ies" },
    );
    Ok(ExitCode::SUCCESS)
}

async fn tags(args: TagsArgs) -> Result<ExitCode> {
    // A config is optional here: without one, registries are reached anonymously over HTTPS.
    let config = match &args.config.config {
        Some(_) => load_config(&args.config)?,
        None if Path::new(config::DEFAULT_CONFIG_FILE).exists() => load_config(&args.config)?,
        None => Config::default(),
    };
    let registry = RegistryClient::new(&config.registries).context("setting up registry access")?;
    let table = tagpilot::tags::show(&args.image, &args.strategy, &registry).await?;
    print!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// A spinner on stderr while a plan runs, only when stderr is a terminal.
struct Spinner(Option<indicatif::ProgressBar>);

impl Spinner {
    fn new() -> Self {
        if !std::io::stderr().is_terminal() {
            return Spinner(None);
        }
        let bar = indicatif::ProgressBar::new_spinner();
        bar.enable_steady_tick(std::time::Duration::from_millis(120));
        Spinner(Some(bar))
    }
}

impl plan::Progress for Spinner {
    fn phase(&self, name: &str, total: u64) {
        if let Some(bar) = &self.0 {
            bar.set_length(total);
            bar.set_position(0);
            bar.set_message(name.to_string());
        }
    }
    fn advance(&self) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
        }
    }
    fn done(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}
