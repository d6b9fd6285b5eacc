//! The `tagpilot` command: parses flags, wires the library together, prints, and exits with a
//! deliberate code (0 success, 1 error, 2 changes pending with `--exit-code`).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Result, bail};
use clap::{Args, Parser, Subcommand};
use tagpilot::plan::{self, Plan};
use tagpilot::report::{self, Format};
use tagpilot::session::{self, Session};
use tagpilot::{argocd, engine, policy};

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

/// Keeps container image references in GitOps manifest repositories up to date.
#[derive(Parser, Debug)]
#[command(name = "tagpilot", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log filter (`info`, `tagpilot=debug`, …); logs go to stderr [default: `info` for
    /// `run`, `warn` otherwise].
    #[arg(long, global = true, env = "TAGPILOT_LOG")]
    log: Option<String>,
    /// Log lines as text, or as one JSON object per line for a log collector.
    #[arg(
        long,
        global = true,
        env = "TAGPILOT_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show what would change, writing nothing.
    Plan(PlanArgs),
    /// Make the changes: rewrite the files in place.
    Apply(PlanArgs),
    /// Validate tagpilot.yaml and every policy, without network.
    Check(CheckArgs),
    /// List an image's tags in policy order and mark the one a policy would choose.
    Tags(TagsArgs),
    /// Keep running: apply on an interval, serving /livez, /readyz and /metrics.
    Run(RunArgs),
    /// Print the Argo CD Image Updater `ImageUpdater` resource that configures each annotated
    /// Application in these files or directories as its annotations do.
    MigrateAnnotations(MigrateArgs),
}

#[derive(Args, Debug)]
struct MigrateArgs {
    /// Application manifests: files, or directories searched for `.yaml` and `.yml` files.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
}

#[derive(Args, Debug)]
struct RunArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Time between cycles (`90s`, `2m`, `1h`); each wait has jitter.
    #[arg(long, env = "TAGPILOT_INTERVAL", default_value = "2m", value_parser = tagpilot::run::pace::parse_interval)]
    interval: std::time::Duration,
    /// Address for /livez, /readyz and /metrics.
    #[arg(long, env = "TAGPILOT_LISTEN", default_value = "0.0.0.0:8080")]
    listen: std::net::SocketAddr,
    /// Where state is kept; one process per directory (a second one refuses to start).
    #[arg(long, env = "TAGPILOT_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Where clones of configured repositories are kept (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// `/metrics` also exports Argo CD Image Updater's series under its names and labels:
    /// argocd_image_updater_applications_watched_total, …_images_watched_total,
    /// …_images_updated_total and …_images_errors_total, by image_updater_cr_name and
    /// image_updater_cr_namespace (empty for Applications configured by annotations alone).
    #[arg(long, env = "TAGPILOT_IMAGE_UPDATER_METRICS")]
    image_updater_metrics: bool,
    #[command(flatten)]
    leader: LeaderArgs,
}

/// Several replicas, one writer: leader election through a `coordination.k8s.io/v1` Lease.
#[derive(Args, Debug)]
struct LeaderArgs {
    /// Elect one leader among replicas through a Lease; only the leader writes, and it labels
    /// its Pod `tagpilot.dev/leader=true` (with $POD_NAME and $POD_NAMESPACE set).
    #[arg(long, env = "TAGPILOT_LEADER_ELECT")]
    leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        env = "TAGPILOT_LEASE_NAME",
        value_name = "NAME",
        default_value = "tagpilot"
    )]
    lease_name: String,
    /// The Lease's namespace [default: $POD_NAMESPACE, else the kubeconfig's namespace].
    #[arg(long, env = "TAGPILOT_LEASE_NAMESPACE", value_name = "NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long the Lease holds without renewal (whole seconds, at least 3s); the leader renews
    /// a third of it before expiry and stops writing before it expires.
    #[arg(
        long,
        env = "TAGPILOT_LEASE_DURATION",
        value_name = "DURATION",
        default_value = "15s",
        value_parser = tagpilot::run::lease::parse_lease_duration
    )]
    lease_duration: std::time::Duration,
}

impl LeaderArgs {
    fn settings(&self) -> Option<tagpilot::run::lease::LeaderElection> {
        self.leader_elect.then(|| {
            tagpilot::run::lease::LeaderElection::from_environment(
                self.lease_name.clone(),
                self.lease_namespace.clone(),
                self.lease_duration,
            )
        })
    }
}

#[derive(Args, Debug)]
struct CheckArgs {
    #[command(flatten)]
    config: ConfigArgs,
    /// Where clones of configured repositories are kept: Applications in git are read from
    /// there as last fetched (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
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
    /// Also print a unified diff of every change: the local directory's files, each configured
    /// repository's files as its commits would leave them, each Application patch.
    #[arg(long)]
    diff: bool,
    /// Exit with 2 when there are changes (after applying them, for `apply`).
    #[arg(long)]
    exit_code: bool,
    /// Where clones of configured repositories are kept (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct TagsArgs {
    /// The image repository, e.g. `ghcr.io/org/app` (a tag, if given, is taken as the current one).
    image: String,
    #[command(flatten)]
    config: ConfigArgs,
    /// Order and choose as this configured policy does (`name` or `namespace:name`): its
    /// strategy, range, filters and platforms. Without it and without strategy flags, the one
    /// configured policy following IMAGE is used, if exactly one does.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = [
            "semver", "prerelease", "regex", "sort_by", "newest_build", "alphabetical",
            "allow_tags", "ignore_tags", "platform",
        ]
    )]
    policy: Option<String>,
    #[command(flatten)]
    strategy: StrategyArgs,
}

/// How `tagpilot tags` orders tags: the flags mirror a policy's `spec` (semver is the default).
#[derive(Args, Debug)]
struct StrategyArgs {
    /// Semver with a range (`">=1.2, <2"`, `~1.26`, `1.x`; empty for any version).
    #[arg(long, value_name = "RANGE", group = "strategy")]
    semver: Option<String>,
    /// Take pre-releases (semver).
    #[arg(long)]
    prerelease: bool,
    /// A regex the tags must match, e.g. `^main-(?P<sha>[0-9a-f]{7})-(?P<ts>\d+)$`.
    #[arg(long, value_name = "PATTERN", group = "strategy")]
    regex: Option<String>,
    /// The named group of `--regex` to sort by.
    #[arg(long, value_name = "GROUP", requires = "regex")]
    sort_by: Option<String>,
    /// How `--regex` sort keys compare: numerical, alphabetical or semver.
    #[arg(
        long,
        value_name = "ORDER",
        requires = "regex",
        default_value = "alphabetical"
    )]
    order: String,
    /// Order by image build time (asks the registry for every tag's config).
    #[arg(long, group = "strategy")]
    newest_build: bool,
    /// Order alphabetically: `desc` (highest first) or `asc`.
    #[arg(long, value_name = "ORDER", group = "strategy")]
    alphabetical: Option<String>,
    /// Only tags matching this regex.
    #[arg(long, value_name = "REGEX")]
    allow_tags: Option<String>,
    /// Leave out tags matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    ignore_tags: Vec<String>,
    /// Platforms the image must offer, e.g. `linux/arm64` (repeatable; newest build).
    #[arg(long, value_name = "OS/ARCH")]
    platform: Vec<String>,
}

impl StrategyArgs {
    fn adhoc(&self) -> tagpilot::plan::tags::AdhocPolicy<'_> {
        tagpilot::plan::tags::AdhocPolicy {
            semver: self.semver.as_deref(),
            prerelease: self.prerelease,
            regex: self.regex.as_deref(),
            sort_by: self.sort_by.as_deref(),
            order: &self.order,
            newest_build: self.newest_build,
            alphabetical: self.alphabetical.as_deref(),
            allow_tags: self.allow_tags.as_deref(),
            ignore_tags: &self.ignore_tags,
            platforms: &self.platform,
        }
    }
}

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

async fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Plan(args) => plan_or_apply(args, false).await,
        Command::Apply(args) => plan_or_apply(args, true).await,
        Command::Check(args) => check(args),
        Command::Tags(args) => tags(args).await,
        Command::Run(args) => run_service(args).await,
        Command::MigrateAnnotations(args) => migrate_annotations(&args),
    }
}

fn migrate_annotations(args: &MigrateArgs) -> Result<ExitCode> {
    let apps = argocd::load::applications_in(&args.paths)?;
    let resources: Vec<String> = apps
        .iter()
        .filter_map(argocd::image_updater::migrate)
        .collect();
    if resources.is_empty() {
        bail!(
            "no Application with an image-list annotation in {}",
            args.paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    print!("{}", resources.join("---\n"));
    Ok(ExitCode::SUCCESS)
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
    };
    match tagpilot::run::serve(config, settings).await? {
        tagpilot::run::Stopped::Drained => Ok(ExitCode::SUCCESS),
        // Like a process killed by SIGINT: 128 + 2.
        tagpilot::run::Stopped::Aborted => Ok(ExitCode::from(130)),
    }
}

async fn plan_or_apply(args: PlanArgs, write: bool) -> Result<ExitCode> {
    // Check what the user wrote first; talk to registries and git servers second.
    let config = session::load_config(args.config.config.as_deref())?;
    // A broken policy file is reported with its location; every valid policy is still planned.
    let policies = policy::load_all(&config);
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| config.base_dir().to_path_buf());
    let options = session::Options {
        cache_dir: args.cache_dir.clone(),
        read_cluster: true,
        state: None,
    };
    let session = Session::open(config, options).await?;
    let progress = Spinner::new();
    let input = session.input(&policies, Some(root.clone()), session.applications.as_ref());
    let context = session.context(&progress, Default::default());
    let options = engine::Options {
        dry_run: !write,
        diff: args.diff,
        ..Default::default()
    };
    let cycle = engine::run(&input, &context, options).await?;
    drop(progress);

    let (written, failed) = (cycle.written, cycle.failed);
    let (shown, text) = session::render_cycle(cycle, args.format, args.diff);
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

/// Offline: no registry client and no cluster, so no [`Session`]; the clone cache only as
/// last fetched.
fn check(args: CheckArgs) -> Result<ExitCode> {
    let config = session::load_config(args.config.config.as_deref())?;
    let summary = policy::check(&config)?;
    let problems = engine::check::check_repositories(&config);
    if !problems.is_empty() {
        let list: Vec<String> = problems
            .iter()
            .map(|e| tagpilot::error_chain::chain(e))
            .collect();
        bail!("{}", list.join("\n"));
    }
    println!("{}", summary.to_string().trim_end());
    // What the manifests show without a registry (the local directory, and each repository as
    // last fetched): targets that match no file, images in none of the files matched, markers
    // that resolve to nothing.
    let policies = policy::load(&config)?;
    let cache = engine::repo_cache(args.cache_dir.as_deref());
    let (local, unread) = engine::check::check_manifests(&config, &policies, cache.as_ref())?;
    print!("{}", report::findings_table(&local));
    for u in &unread {
        println!("not read: {u}");
    }
    let apps = engine::check::check_applications(&config, cache.as_ref())?;
    if let Some(apps) = &apps {
        print!("{}", apps.text());
    }
    let apps_failed = apps.as_ref().is_some_and(|a| a.has_problems());
    Ok(if local.has_problems() || apps_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

async fn tags(args: TagsArgs) -> Result<ExitCode> {
    use tagpilot::plan::tags::{self, Announcement, PolicyChoice};
    let config = session::optional_config(args.config.config.as_deref(), args.policy.is_some())?;
    let reference = tagpilot::image::ImageRef::parse(&args.image)?;
    // Strategy flags describe a policy of their own; otherwise a configured one may apply.
    let loaded = match &config {
        Some(c) if args.policy.is_some() || !args.strategy.adhoc().given() => {
            Some(policy::load_all(c))
        }
        _ => None,
    };
    let configured = match &loaded {
        Some(l) => {
            tags::configured_policy(&l.policies, &reference.repository, args.policy.as_deref())
                .inspect_err(|_| {
                    // The policy asked for may be in a file that did not load: say which did not.
                    for broken in &l.errors {
                        eprintln!("warning: {broken}");
                    }
                })?
        }
        None => PolicyChoice::None,
    };
    match configured.announcement(&reference.repository) {
        Announcement::Policy(line) => println!("{line}"),
        Announcement::Note(note) => eprintln!("{note}"),
        Announcement::Nothing => {}
    }
    let adhoc;
    let policy = match configured.policy() {
        Some(p) => p,
        None => {
            adhoc = args.strategy.adhoc().policy(&reference.name)?;
            &adhoc
        }
    };
    // The registries of tagpilot.yaml, not the cluster's: one image's tags need no Application.
    let session = Session::open(config.unwrap_or_default(), Default::default()).await?;
    let progress = Spinner::new();
    let ranked = tags::rank_tags(
        &session.registry,
        policy,
        reference.tag.as_deref(),
        &progress,
    )
    .await?;
    drop(progress);
    print!("{}", report::tags(&policy.image_name, &ranked));
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
