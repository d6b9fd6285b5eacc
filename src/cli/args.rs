//! The command line: every flag and subcommand, as clap derives them from these types. Doc
//! comments are the help text; `env =` names the variables a Deployment sets.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::report::Format;

/// Keeps container image references in GitOps manifest repositories up to date.
#[derive(Parser, Debug)]
#[command(name = "tagpilot", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log filter (`info`, `tagpilot=debug`, …); logs go to stderr [default: `info` for
    /// `run`, `warn` otherwise].
    #[arg(long, global = true, env = "TAGPILOT_LOG")]
    pub log: Option<String>,
    /// Log lines as text, or as one JSON object per line for a log collector.
    #[arg(
        long,
        global = true,
        env = "TAGPILOT_LOG_FORMAT",
        value_enum,
        default_value_t = LogFormat::Text
    )]
    pub log_format: LogFormat,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
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
    /// List the held tags (policy, field, tag, why, since, who), or release one.
    Holds(crate::cli::holds::HoldsArgs),
    /// Hold every write of a running `tagpilot run` at once, saying who and why.
    Freeze(crate::cli::freeze::FreezeArgs),
    /// Lift a running `tagpilot run`'s freeze: what waited is written next cycle.
    Unfreeze(crate::cli::freeze::UnfreezeArgs),
    /// Print the Argo CD Image Updater `ImageUpdater` resource that configures each annotated
    /// Application in these files or directories as its annotations do.
    MigrateAnnotations(MigrateArgs),
    /// Print pattern policies that could each replace several policies sharing every setting
    /// but an image under one registry prefix, naming what they replace and what is kept.
    MigratePatterns(MigratePatternsArgs),
    /// Print a completion script for a shell (`source <(tagpilot completions bash)`).
    Completions {
        #[arg(value_enum)]
        shell: crate::cli::docs::Shell,
    },
    /// Print the man page, tagpilot(1), in roff (`tagpilot man | man -l -`).
    Man,
    /// Print the JSON Schema of tagpilot.yaml or of an ImagePolicy, for an editor's
    /// `# yaml-language-server: $schema=…` line.
    Schema {
        #[arg(value_enum)]
        of: crate::cli::docs::SchemaOf,
    },
}

#[derive(Args, Debug)]
pub struct MigrateArgs {
    /// Application manifests: files, or directories searched for `.yaml` and `.yml` files.
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Time between cycles (`90s`, `2m`, `1h`); each wait has jitter.
    #[arg(long, env = "TAGPILOT_INTERVAL", default_value = "2m", value_parser = crate::run::pace::parse_interval)]
    pub interval: std::time::Duration,
    /// Address for /livez, /readyz and /metrics.
    #[arg(long, env = "TAGPILOT_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: std::net::SocketAddr,
    /// Where state is kept; one process per directory (a second one refuses to start).
    #[arg(long, env = "TAGPILOT_STATE_DIR", value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Where clones of configured repositories are kept (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// `/metrics` also exports Argo CD Image Updater's series under its names and labels:
    /// argocd_image_updater_applications_watched_total, …_images_watched_total,
    /// …_images_updated_total and …_images_errors_total, by image_updater_cr_name and
    /// image_updater_cr_namespace (empty for Applications configured by annotations alone).
    #[arg(long, env = "TAGPILOT_IMAGE_UPDATER_METRICS")]
    pub image_updater_metrics: bool,
    #[command(flatten)]
    pub leader: LeaderArgs,
}

/// Several replicas, one writer: leader election through a `coordination.k8s.io/v1` Lease.
#[derive(Args, Debug)]
pub struct LeaderArgs {
    /// Elect one leader among replicas through a Lease; only the leader writes, and it labels
    /// its Pod `tagpilot.dev/leader=true` (with $POD_NAME and $POD_NAMESPACE set).
    #[arg(long, env = "TAGPILOT_LEADER_ELECT")]
    pub leader_elect: bool,
    /// The Lease's name.
    #[arg(
        long,
        env = "TAGPILOT_LEASE_NAME",
        value_name = "NAME",
        default_value = "tagpilot"
    )]
    pub lease_name: String,
    /// The Lease's namespace [default: $POD_NAMESPACE, else the kubeconfig's namespace].
    #[arg(long, env = "TAGPILOT_LEASE_NAMESPACE", value_name = "NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long the Lease holds without renewal (whole seconds, at least 3s); the leader renews
    /// a third of it before expiry and stops writing before it expires.
    #[arg(
        long,
        env = "TAGPILOT_LEASE_DURATION",
        value_name = "DURATION",
        default_value = "15s",
        value_parser = crate::run::lease::parse_lease_duration
    )]
    pub lease_duration: std::time::Duration,
}

impl LeaderArgs {
    pub fn settings(&self) -> Option<crate::run::lease::LeaderElection> {
        self.leader_elect.then(|| {
            crate::run::lease::LeaderElection::from_environment(
                self.lease_name.clone(),
                self.lease_namespace.clone(),
                self.lease_duration,
            )
        })
    }
}

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Where clones of configured repositories are kept: Applications in git are read from
    /// there as last fetched (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct ConfigArgs {
    /// Path to tagpilot.yaml (default: ./tagpilot.yaml).
    #[arg(long, short = 'c', env = "TAGPILOT_CONFIG")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct MigratePatternsArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Also plan twice, with the policies as they are and with the proposals in place of the
    /// policies they replace (a dry run: it asks the registries and writes nothing), and print
    /// both plans' counts and every change only one of them makes.
    #[arg(long)]
    pub compare: bool,
    /// Where clones of configured repositories are kept for the comparison (default: the XDG
    /// cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct PlanArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// The directory of manifests (default: the directory holding tagpilot.yaml).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Report format.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also print a unified diff of every change: the local directory's files, each configured
    /// repository's files as its commits would leave them, each Application patch.
    #[arg(long)]
    pub diff: bool,
    /// With `--diff`: also render each Argo CD Application a change deploys (its directory,
    /// kustomization or Helm chart, with the `helm` and `kustomize` or `kubectl` on PATH),
    /// before and after, and show the diff of its resources, Secret data redacted.
    #[arg(long, requires = "diff")]
    pub rendered: bool,
    /// Exit with 2 when there are changes (after applying them, for `apply`).
    #[arg(long)]
    pub exit_code: bool,
    /// Where clones of configured repositories are kept (default: the XDG cache directory).
    #[arg(long, env = "TAGPILOT_CACHE_DIR", value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// `tagpilot run`'s state directory (when no service holds it): the plan honours and shows
    /// its held tags, and the rollbacks since its last cycle.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct TagsArgs {
    /// The image repository, e.g. `ghcr.io/org/app` (a tag, if given, is taken as the current one).
    pub image: String,
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Order and choose as this configured policy does (`name` or `namespace:name`; an Argo CD
    /// Application's image as `namespace/app/alias`): its strategy, range or constraint,
    /// filters and platforms. Without it and without strategy flags, the one configured policy
    /// following IMAGE is used, if exactly one does.
    #[arg(
        long,
        value_name = "NAME",
        conflicts_with_all = [
            "semver", "prerelease", "regex", "sort_by", "order", "newest_build",
            "alphabetical", "allow_tags", "ignore_tags", "platform",
        ]
    )]
    pub policy: Option<String>,
    /// Reach the image's registry over plain HTTP (a lab or loopback registry), whether or
    /// not tagpilot.yaml configures it.
    #[arg(long)]
    pub insecure: bool,
    #[command(flatten)]
    pub strategy: StrategyArgs,
}

/// How `tagpilot tags` orders tags: the flags mirror a policy's `spec` (semver is the default).
#[derive(Args, Debug)]
pub struct StrategyArgs {
    /// Semver with a range (`">=1.2, <2"`, `~1.26`, `1.x`; empty for any version).
    #[arg(long, value_name = "RANGE", group = "strategy")]
    pub semver: Option<String>,
    /// Take pre-releases (semver).
    #[arg(long)]
    pub prerelease: bool,
    /// A regex the tags must match, e.g. `^main-(?P<sha>[0-9a-f]{7})-(?P<ts>\d+)$`.
    #[arg(long, value_name = "PATTERN", group = "strategy")]
    pub regex: Option<String>,
    /// The group of `--regex` to sort by: its name or number (needed when it has several).
    #[arg(long, value_name = "GROUP", requires = "regex")]
    pub sort_by: Option<String>,
    /// How `--regex` sort keys compare: numerical, alphabetical or semver. Needed unless the
    /// key can hold only digits (then numerical).
    #[arg(long, value_name = "ORDER", requires = "regex")]
    pub order: Option<String>,
    /// Order by image build time (asks the registry for every tag's config).
    #[arg(long, group = "strategy")]
    pub newest_build: bool,
    /// Order alphabetically: `desc` (highest first) or `asc`.
    #[arg(long, value_name = "ORDER", group = "strategy")]
    pub alphabetical: Option<String>,
    /// Only tags matching this regex.
    #[arg(long, value_name = "REGEX")]
    pub allow_tags: Option<String>,
    /// Leave out tags matching this glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub ignore_tags: Vec<String>,
    /// Platforms the image must offer, e.g. `linux/arm64` (repeatable; newest build).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Vec<String>,
}

impl StrategyArgs {
    pub fn adhoc(&self) -> crate::plan::tags::AdhocPolicy<'_> {
        crate::plan::tags::AdhocPolicy {
            semver: self.semver.as_deref(),
            prerelease: self.prerelease,
            regex: self.regex.as_deref(),
            sort_by: self.sort_by.as_deref(),
            order: self.order.as_deref(),
            newest_build: self.newest_build,
            alphabetical: self.alphabetical.as_deref(),
            allow_tags: self.allow_tags.as_deref(),
            ignore_tags: &self.ignore_tags,
            platforms: &self.platform,
        }
    }
}
