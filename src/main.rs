//! The `tagpilot` command: parses flags, wires the library together, prints, and exits with a
//! deliberate code (0 success, 1 error, 2 changes pending with `--exit-code`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tagpilot::config::{self, Config};
use tagpilot::plan::{self, Plan};
use tagpilot::registry::{ClientOptions, Registry, RegistryClient};
use tagpilot::report::{self, Format};
use tagpilot::{apply, argocd, forge, git, policy, select, writeback};

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
    /// The ad-hoc policy these flags describe.
    fn policy(&self, repository: &str) -> Result<tagpilot::policy::ImagePolicy> {
        use tagpilot::policy::{ImagePolicy, RegexOrder, Strategy};
        let strategy = if let Some(pattern) = &self.regex {
            let order: RegexOrder = self
                .order
                .parse()
                .map_err(|e| anyhow::anyhow!("--order: {e}"))?;
            Strategy::regex(pattern, self.sort_by.as_deref(), order)?
        } else if self.newest_build {
            Strategy::NewestBuild
        } else if let Some(order) = &self.alphabetical {
            match order.as_str() {
                "desc" => Strategy::Alphabetical { descending: true },
                "asc" => Strategy::Alphabetical { descending: false },
                other => bail!("--alphabetical takes asc or desc, not {other:?}"),
            }
        } else {
            Strategy::semver(self.semver.as_deref(), self.prerelease)?
        };
        let mut policy = ImagePolicy::adhoc(repository, strategy)?;
        if let Some(allow) = &self.allow_tags {
            policy.set_allow_tags(allow)?;
        }
        if !self.ignore_tags.is_empty() {
            policy.set_ignore_tags(&self.ignore_tags)?;
        }
        for p in &self.platform {
            policy.platforms.push(
                p.parse()
                    .map_err(|e: String| anyhow::anyhow!("--platform: {e}"))?,
            );
        }
        Ok(policy)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(run(cli)) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err}");
            // Many errors already quote their source; print only causes that add something.
            let mut shown = err.to_string();
            for cause in err.chain().skip(1) {
                let text = cause.to_string();
                if !shown.contains(&text) {
                    eprintln!("  caused by: {text}");
                    shown = text;
                }
            }
            ExitCode::from(1)
        }
    }
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter).unwrap_or_else(|_| "warn".into());
    // Colour codes only for a person at a terminal; a log collector would store them verbatim.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
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
                    std::env::current_dir()
                        .map(|d| d.display().to_string())
                        .unwrap_or_default()
                );
            }
            p
        }
    };
    Ok(config::load(&path)?)
}

async fn plan_or_apply(args: PlanArgs, write: bool) -> Result<ExitCode> {
    // Check what the user wrote first; talk to registries and git servers second.
    let config = load_config(&args.config)?;
    let policies = policy::load(&config)?;
    let root = args
        .root
        .clone()
        .unwrap_or_else(|| config.base_dir().to_path_buf());
    // Live Applications and the pull secrets they name are read before the registry client is
    // built, so those credentials reach it like any other.
    let cluster = match config
        .applications
        .as_ref()
        .and_then(|a| a.from_cluster.as_ref())
    {
        Some(from) => {
            Some(argocd::cluster::load(argocd::cluster::Cluster::connect().await?, from).await?)
        }
        None => None,
    };
    let mut client_options = ClientOptions::from_config(&config);
    if let Some(c) = &cluster {
        client_options.credentials = c.registry_credentials.clone();
    }
    let registry = RegistryClient::new(client_options).context("setting up registry access")?;
    let run = Run {
        config: &config,
        policies: &policies,
        registry: &registry,
        progress: &Spinner::new(),
        cache_dir: args.cache_dir.as_deref(),
        dry_run: !write,
    };

    // 1. The local directory.
    let scope = plan::Scope {
        root: root.clone(),
        repository: None,
        exclude: own_files(&config, &policies),
    };
    let mut report_plan = plan::plan(&scope, &policies, &registry, run.progress).await?;
    let local_files = std::mem::take(&mut report_plan.files);
    let mut written = 0;
    if write && !local_files.is_empty() {
        // Like a failing repository, a failed local write is reported and the rest goes on.
        match apply::write_files(&root, &local_files) {
            Ok(files) => written = files.len(),
            Err(e) => report_plan.problems.push(plan::Problem {
                message: e.to_string(),
                ..Default::default()
            }),
        }
    }
    // 2. Configured repositories, then 3. Argo CD Applications.
    let mut failed = run.repositories(&mut report_plan).await?;
    let applications = match &config.applications {
        Some(_) => {
            let (apps_failed, apps) = run.applications(cluster.as_ref(), &mut report_plan).await?;
            failed |= apps_failed;
            Some(apps)
        }
        None => None,
    };
    plan::Progress::done(run.progress);

    let shown = Plan {
        files: local_files,
        ..report_plan
    };
    let rendered = report::render(&shown, args.format);
    match (&applications, args.format) {
        (Some(apps), Format::Json) => print!("{}", argocd::report::json(&rendered, apps)),
        (Some(apps), _) => print!("{rendered}{}", argocd::report::text(apps)),
        (None, _) => print!("{rendered}"),
    }
    if args.diff {
        print!("{}", report::diff(&shown));
    }
    if written > 0 {
        eprintln!("wrote {written} file(s) under {}", root.display());
    }
    if failed {
        return Ok(ExitCode::from(1));
    }
    let pending = !shown.changes.is_empty();
    Ok(exit_code(&shown, args.exit_code && pending))
}

/// What every part of one `plan` or `apply` run shares.
struct Run<'a> {
    config: &'a Config,
    policies: &'a [tagpilot::policy::ImagePolicy],
    registry: &'a RegistryClient,
    progress: &'a Spinner,
    cache_dir: Option<&'a Path>,
    dry_run: bool,
}

impl Run<'_> {
    fn cache(&self) -> Result<git::RepoCache> {
        Ok(git::RepoCache::new(match self.cache_dir {
            Some(dir) => dir.to_path_buf(),
            None => {
                git::RepoCache::default_root().context("no cache directory: pass --cache-dir")?
            }
        }))
    }

    /// Plans, and unless dry-running writes, every configured repository: pushes for
    /// `mode: push`, pull requests for `mode: pull-request`. Returns whether one failed.
    async fn repositories(&self, report_plan: &mut Plan) -> Result<bool> {
        // With no policies, configured repositories are written only by the Applications that
        // name them; a pass here would only list them twice in the report.
        let config = self.config;
        if config.repositories.is_empty()
            || (self.policies.is_empty() && config.applications.is_some())
        {
            return Ok(false);
        }
        let cache = self.cache()?;
        let planner =
            writeback::RepositoryPlanner::new(self.policies, self.registry, self.progress);
        let options = git::WriteOptions {
            dry_run: self.dry_run,
        };
        let (pull_request, push): (Vec<_>, Vec<_>) = config
            .repositories
            .iter()
            .cloned()
            .partition(|r| r.write.mode == git::WriteMode::PullRequest);
        let mut failed = false;
        for r in git::write_all(&cache, &push, &planner, options).await {
            failed |= r.result.is_err();
            if let Some(p) = planner.last_plan(&r.repository) {
                report_plan.merge(p);
            }
            report_plan.repositories.push(outcome(r));
        }
        for r in forge::sync_all(&cache, &pull_request, &planner, self.dry_run).await {
            failed |= r.result.is_err();
            if let Some(p) = planner.last_plan(&r.repository) {
                report_plan.merge(p);
            }
            report_plan.repositories.push(forge_outcome(r));
        }
        Ok(failed)
    }

    /// Argo CD Applications: their own policies, planned per repository they write to.
    /// Returns whether a repository failed, and the per-Application report.
    async fn applications(
        &self,
        cluster: Option<&argocd::cluster::Loaded>,
        report_plan: &mut Plan,
    ) -> Result<(bool, Vec<argocd::report::ApplicationReport>)> {
        let options = git::WriteOptions {
            dry_run: self.dry_run,
        };
        let run = argocd::run_with(
            self.config,
            cluster,
            &self.cache()?,
            self.registry,
            self.progress,
            options,
        )
        .await?;
        report_plan.merge(run.plan);
        let mut failed = false;
        for r in run.repositories {
            failed |= r.result.is_err();
            report_plan.repositories.push(outcome(r));
        }
        Ok((failed, run.applications))
    }
}

/// A repository's write result as the report shows it.
fn outcome(r: git::RepositoryReport) -> plan::RepositoryOutcome {
    let commits = |cs: &[git::PushedCommit]| {
        cs.iter()
            .map(|c| plan::CommitSummary {
                id: c.id.clone(),
                summary: c.summary.clone(),
            })
            .collect()
    };
    let (branch, status, commits, error) = match &r.result {
        Ok(o) => match &o.status {
            git::WriteStatus::Pushed { commits: cs } => {
                (o.branch.clone(), "pushed", commits(cs), None)
            }
            git::WriteStatus::WouldPush { commits: cs } => {
                (o.branch.clone(), "would push", commits(cs), None)
            }
            git::WriteStatus::UpToDate => (o.branch.clone(), "up to date", Vec::new(), None),
        },
        Err(e) => (String::new(), "failed", Vec::new(), Some(e.to_string())),
    };
    plan::RepositoryOutcome {
        repository: r.repository,
        url: r.url,
        branch,
        status: status.to_string(),
        commits,
        pull_requests: Vec::new(),
        error,
    }
}

/// A repository's pull-request result as the report shows it.
fn forge_outcome(r: forge::ForgeReport) -> plan::RepositoryOutcome {
    let (branch, status, pull_requests, error) = match &r.result {
        Ok(o) => {
            let prs: Vec<_> = o
                .pull_requests
                .iter()
                .map(|p| plan::PullRequestSummary {
                    group: p.group.clone(),
                    branch: p.branch.clone(),
                    status: p.status(o.dry_run),
                    number: p.number,
                    url: p.url.clone(),
                    warnings: p.warnings.clone(),
                })
                .collect();
            let status = if prs.is_empty() {
                "up to date"
            } else {
                "pull requests"
            };
            (o.base.clone(), status, prs, None)
        }
        Err(e) => (String::new(), "failed", Vec::new(), Some(e.to_string())),
    };
    plan::RepositoryOutcome {
        repository: r.repository,
        url: r.url,
        branch,
        status: status.to_string(),
        commits: Vec::new(),
        pull_requests,
        error,
    }
}

/// tagpilot's own config and policy files: YAML, but never manifests to rewrite.
fn own_files(config: &Config, policies: &[tagpilot::policy::ImagePolicy]) -> Vec<PathBuf> {
    config
        .path
        .iter()
        .cloned()
        .chain(policies.iter().map(|p| p.source.file.clone()))
        .collect()
}

fn exit_code(plan: &Plan, exit_code_on_changes: bool) -> ExitCode {
    if !plan.problems.is_empty() {
        ExitCode::from(1)
    } else if exit_code_on_changes {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn check(args: ConfigArgs) -> Result<ExitCode> {
    let config = load_config(&args)?;
    let summary = policy::check(&config)?;
    println!("{}", summary.to_string().trim_end());
    Ok(ExitCode::SUCCESS)
}

async fn tags(args: TagsArgs) -> Result<ExitCode> {
    // A config is optional here: without one, registries are reached anonymously over HTTPS.
    let config = match &args.config.config {
        Some(_) => load_config(&args.config)?,
        None if Path::new(config::DEFAULT_CONFIG_FILE).exists() => load_config(&args.config)?,
        None => Config::default(),
    };
    let reference = tagpilot::image::ImageRef::parse(&args.image)?;
    let policy = args.strategy.policy(&reference.name)?;
    let registry = RegistryClient::from_config(&config).context("setting up registry access")?;
    let tags = registry.list_tags(&policy.image).await?;
    let progress = Spinner::new();
    let inspector = plan::Inspector::new(&registry);
    let mut candidates = inspector.candidates(&policy, &tags, &progress).await?;
    drop(progress);
    // Tags the filters dropped are listed too, with the reason, so keep them as bare candidates.
    for tag in &tags {
        if !candidates.iter().any(|c| &c.tag == tag) {
            candidates.push(select::TagCandidate::new(tag.as_str()));
        }
    }
    let ranked = select::rank(&policy, reference.tag.as_deref(), &candidates);
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
