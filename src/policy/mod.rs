//! `ImagePolicy` documents: which image a policy follows, how it picks a tag, and which files it
//! may rewrite.
//!
//! Loading validates everything that can be checked without the network (strategy shape, regexes,
//! ranges, globs, platforms, image names, duplicate names) and reports every problem it finds,
//! across all files, each with `file:line:column` and the policy's name where it is known. A user
//! fixing a policy repository should see the whole list at once, not one error per run.
//!
//! This module reads policy files and nothing else: no network, no writes. Its types are
//! configuration that `select`, `manifest` and the planner read, so it imports none of them.
//!
//! - this file: the validated types and the errors;
//! - [`load`](self::load()): finding and reading policy files, and the cross-file checks;
//! - `validate`: one document as written, checked value by value into an [`ImagePolicy`];
//! - [`pattern`]: an `image:` that is a pattern over repositories, and the per-image instances
//!   the planner makes of it.

pub mod chart;
mod load;
pub mod pattern;
mod regex_key;
mod validate;

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::image::{ImageError, Platform, Repository};
use crate::version::{Constraint, VersionError};

pub use load::{CheckSummary, FileSummary, Loaded, check, load, load_all, parse_file};
pub use pattern::{ImagePattern, PatternError, PatternInstance};
pub use regex_key::RegexKey;
pub use validate::schema;

/// The `apiVersion` every policy document carries.
pub const API_VERSION: &str = "tagpilot.dev/v1alpha1";
/// The `kind` every policy document carries.
pub const KIND: &str = "ImagePolicy";

/// Where something was defined, for error messages and reports. `column` is 0 when unknown.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceLocation {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
}

impl SourceLocation {
    fn new(file: &Path, line: usize, column: usize) -> Self {
        SourceLocation {
            file: file.to_path_buf(),
            line,
            column,
        }
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)?;
        if self.column > 0 {
            write!(f, ":{}", self.column)?;
        }
        Ok(())
    }
}

/// A validated policy, ready for selection.
#[derive(Debug, Clone)]
pub struct ImagePolicy {
    pub name: String,
    /// `metadata.namespace`; Flux markers name policies as `namespace:name`.
    pub namespace: Option<String>,
    /// Where `metadata.name` was written.
    pub source: SourceLocation,
    /// The repository the policy follows, normalised.
    pub image: Repository,
    /// `spec.image` exactly as written (what a `:name` marker receives).
    pub image_name: String,
    /// `spec.image` is a pattern (issue 31): the policy follows every image of the targets
    /// whose repository matches it, each through an instance ([`ImagePolicy::instance`]).
    /// `image` then holds the pattern's registry and path glob, and is never asked for.
    pub pattern: Option<ImagePattern>,
    /// `priority:` of a pattern policy: of two patterns matching one reference, the higher
    /// wins; equal priorities are a problem naming both.
    pub priority: i32,
    /// Set on the instance of a pattern policy that follows one image.
    pub instance: Option<PatternInstance>,
    pub strategy: Strategy,
    pub allow_tags: Option<regex::Regex>,
    /// `ignoreTags` globs, kept as written for reports and compiled for matching.
    pub ignore_tags: Vec<String>,
    pub ignore_set: globset::GlobSet,
    pub platforms: Vec<Platform>,
    /// Whether a tag's image needs only one of `platforms` rather than every one: Argo CD
    /// Image Updater's `platforms`, whose `WantsPlatform` accepts an image or an index entry
    /// for any of them. A policy file's `platforms:` requires every one.
    pub any_platform: bool,
    pub pin_digest: bool,
    /// Lets an ordered strategy move a reference to a tag it ranks lower than the current one
    /// (e.g. back into a range the file was pinned above).
    pub allow_downgrade: bool,
    /// Lets the policy replace a current tag its strategy cannot read as one of its versions (a
    /// placeholder a CI step substitutes, a tag outside a regex pattern). Off by default: such a
    /// tag is held, since its authors may not mean it as a version at all.
    pub replace_unreadable_tags: bool,
    /// semver: a file stays on tags with as many version parts as its own (`1.25` moves to
    /// `1.27`, not `1.27.3`). Off only for Argo CD Image Updater's configuration, whose semver
    /// reads `1.0` as 1.0.0 and moves it to the highest version of any precision.
    pub keep_precision: bool,
    /// `minAge`: a tag becomes a candidate only once it has existed this long: since its build
    /// under newestBuild (the strategy reads build times), else since tagpilot first saw it.
    pub min_age: Option<std::time::Duration>,
    /// `verify:`: follow this policy's changes to a healthy Argo CD Application; wins over its
    /// repository's `verify:` for them. `None`: the repository's says.
    pub verify: Option<crate::config::verify::VerifyConfig>,
    /// `versionLabels:`: which labels and annotations follow this policy's images' tags; wins
    /// over `tagpilot.yaml`'s. `None`: `tagpilot.yaml`'s (see
    /// [`ImagePolicy::default_version_labels`]), else the defaults.
    pub version_labels: Option<crate::config::version_labels::VersionLabels>,
    /// `promote:`: the policy follows other environments instead of the registry (issue 20).
    pub promote: Option<Promote>,
    /// `signatures:` (issue 22): the cosign signatures a tag's image must carry to be chosen.
    /// `None`: `tagpilot.yaml`'s default for the image, if any, applies.
    pub signatures: Option<crate::config::signatures::Requirement>,
    /// `chart:` (issue 32): the policy follows a Helm chart's versions, and `image` is the
    /// chart's key (see [`chart`]); `None`: it follows an image.
    pub chart: Option<chart::Chart>,
    /// Empty means every file under the root.
    pub targets: Vec<Target>,
}

/// `promote:` of a policy: the environments it takes its tag from, once verified and soaked.
/// The policy's own strategy and filters still decide which of their tags it may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Promote {
    /// `from:`, in the order written; never empty.
    pub from: Vec<Upstream>,
    /// `after:`: how long an upstream's tag must have stayed healthy (zero when not set).
    pub after: std::time::Duration,
    /// `fanIn:`: with several upstreams, whether all must run the tag or any one may.
    pub fan_in: FanIn,
    /// `write: push`: promotions may be pushed where the repository pushes. Off by default: a
    /// promotion is a pull request, and on a repository that pushes it waits, named.
    pub push: bool,
    /// Where `promote:` was written, for problems about it found later (an Application that
    /// does not exist, a repository not configured).
    pub source: SourceLocation,
}

/// How several upstreams combine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FanIn {
    /// A tag is taken only when every upstream offers it.
    #[default]
    All,
    /// The newest tag any upstream offers.
    Any,
}

impl FanIn {
    pub fn as_str(self) -> &'static str {
        match self {
            FanIn::All => "all",
            FanIn::Any => "any",
        }
    }
}

/// One environment a policy promotes from, as `promote.from[]` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Upstream {
    /// An Argo CD Application: it runs the tag its live status reports, verified by issue 19's
    /// verification. `namespace` `None`: the Application namespace tagpilot is configured with.
    Application {
        name: String,
        namespace: Option<String>,
    },
    /// A manifest file in git: it runs the tag on its repository's base branch.
    Path {
        path: String,
        /// `None`: the repository the downstream's field is in.
        repository: Option<String>,
    },
    /// Another policy: it runs the tag its targets' files hold on the base branch.
    Policy {
        name: String,
        /// `None`: the repository the downstream's field is in.
        repository: Option<String>,
    },
}

impl fmt::Display for Upstream {
    /// How reports and pull requests name the upstream.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let repo = |r: &Option<String>| r.as_ref().map(|r| format!("{r}:")).unwrap_or_default();
        match self {
            Upstream::Application {
                name,
                namespace: Some(ns),
            } => write!(f, "application {ns}/{name}"),
            Upstream::Application {
                name,
                namespace: None,
            } => write!(f, "application {name}"),
            Upstream::Path { path, repository } => write!(f, "{}{path}", repo(repository)),
            Upstream::Policy { name, repository } => {
                write!(f, "policy {}{name}", repo(repository))
            }
        }
    }
}

#[derive(Debug, Clone)]
pub enum Strategy {
    /// Highest version in `range` (any version when `None`), within the current tag's variant
    /// family. Pre-releases only when `prerelease`.
    Semver {
        range: Option<Constraint>,
        prerelease: bool,
    },
    /// Tags matching `pattern`, ordered by the capture group `group` (0: the whole match) in
    /// `order`; both decided from `sortBy`, `order` and the pattern ([`RegexKey`]).
    Regex {
        pattern: regex::Regex,
        group: usize,
        order: RegexOrder,
        /// `order` was not written: the key holds only digits, so it is numerical.
        implied: bool,
    },
    /// The tag whose image was built last.
    NewestBuild,
    /// Follow one mutable tag; the planner pins its digest.
    Digest { tag: String },
    /// Highest tag by byte order when `descending`, else lowest.
    Alphabetical { descending: bool },
}

impl Strategy {
    /// The strategy's name as users write it in `spec.strategy`.
    pub fn name(&self) -> &'static str {
        match self {
            Strategy::Semver { .. } => "semver",
            Strategy::Regex { .. } => "regex",
            Strategy::NewestBuild => "newestBuild",
            Strategy::Digest { .. } => "digest",
            Strategy::Alphabetical { .. } => "alphabetical",
        }
    }

    /// `semver` from a `--semver RANGE` flag; an empty or absent range means any version.
    pub fn semver(range: Option<&str>, prerelease: bool) -> Result<Strategy, PolicyError> {
        let range = match range.map(str::trim) {
            None | Some("") => None,
            Some(r) => Some(
                Constraint::parse(r)
                    .map_err(|e| PolicyError::adhoc(crate::error_chain::chain(&e), e))?,
            ),
        };
        Ok(Strategy::Semver { range, prerelease })
    }

    /// `regex` from `--regex PATTERN [--sort-by GROUP] [--order ORDER]` flags, decided as a
    /// policy file's (`order` left out: only a key of digits has one).
    pub fn regex(
        pattern: &str,
        sort_by: Option<&str>,
        order: Option<RegexOrder>,
    ) -> Result<Strategy, PolicyError> {
        // The pattern as the user typed it: `{:?}` would double every backslash.
        let compiled = regex::Regex::new(pattern).map_err(|e| {
            PolicyError::adhoc(
                format!(
                    "invalid regex \"{pattern}\": {}",
                    regex_key::position(pattern, &e)
                ),
                e,
            )
        })?;
        let key = regex_key::resolve(pattern, &compiled, sort_by, order).map_err(|e| {
            PolicyError::adhoc(
                crate::error_chain::chain(&e).replace("sortBy", "--sort-by"),
                e,
            )
        })?;
        Ok(Strategy::Regex {
            pattern: compiled,
            group: key.group,
            order: key.order,
            implied: key.implied,
        })
    }

    /// How the strategy orders tags, in words: `tagpilot tags` says it above the listing.
    pub fn order_text(&self) -> String {
        match self {
            Strategy::Semver { range: Some(r), .. } => format!("semver, highest in {r}"),
            Strategy::Semver { range: None, .. } => "semver, highest version".to_string(),
            Strategy::Regex {
                pattern,
                group,
                order,
                implied,
            } => format!(
                "regex, {} by {}{}",
                order.as_str(),
                regex_key::describe(pattern, *group),
                if *implied {
                    " (no order set; it holds only digits)"
                } else {
                    ""
                }
            ),
            Strategy::NewestBuild => "newest build time".to_string(),
            Strategy::Digest { tag } => format!("the digest of {tag}"),
            Strategy::Alphabetical { descending: true } => {
                "alphabetical, highest first".to_string()
            }
            Strategy::Alphabetical { descending: false } => {
                "alphabetical, lowest first".to_string()
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RegexOrder {
    /// The capture read as a non-negative integer (timestamps, build numbers).
    Numerical,
    /// The capture compared byte by byte.
    Alphabetical,
    /// The capture read as a version (`v` prefix and two-part versions allowed).
    Semver,
}

impl RegexOrder {
    pub fn as_str(self) -> &'static str {
        match self {
            RegexOrder::Numerical => "numerical",
            RegexOrder::Alphabetical => "alphabetical",
            RegexOrder::Semver => "semver",
        }
    }
}

impl std::str::FromStr for RegexOrder {
    type Err = PolicyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "numerical" => Ok(RegexOrder::Numerical),
            "alphabetical" => Ok(RegexOrder::Alphabetical),
            "semver" => Ok(RegexOrder::Semver),
            _ => Err(PolicyError::UnknownOrder {
                order: s.to_string(),
            }),
        }
    }
}

/// Which files a policy may rewrite, and how to find the image in Helm values there.
#[derive(Debug, Clone)]
pub struct Target {
    /// Globs relative to the root, as matched: as written, but for a leading `./` and a path
    /// without a wildcard, which also matches the files under it (see `validate::target_globs`).
    /// Empty means every file.
    pub paths: Vec<String>,
    /// `paths` compiled; `*` stays within one directory, `**` crosses directories. Empty when
    /// `literal`.
    pub path_set: globset::GlobSet,
    /// `paths` are file names, not globs (the files of an Argo CD Application's source):
    /// matched by equality. Thousands of Applications would otherwise compile thousands of
    /// glob sets that each match one file.
    pub literal: bool,
    /// `targets[].repository`: a repository configured in `tagpilot.yaml` (`repositories:`);
    /// `None` means the local directory.
    pub repository: Option<String>,
    pub helm: Option<HelmPaths>,
    /// `kustomize.imageName`: the name the kustomization's `images:` entry uses when it differs
    /// from the policy's image (Image Updater's `kustomize.image-name`).
    pub kustomize_image_name: Option<String>,
    /// Where the target is written in its policy file; `None` for one tagpilot made (an Argo
    /// CD Application's files).
    pub source: Option<SourceLocation>,
}

impl Target {
    /// A target naming exactly `files` (repository-relative, `/`-separated) in `repository`.
    pub fn files(files: Vec<String>, repository: Option<String>) -> Target {
        Target {
            paths: files,
            path_set: globset::GlobSet::empty(),
            literal: true,
            repository,
            helm: None,
            kustomize_image_name: None,
            source: None,
        }
    }

    /// Whether this target covers `path` (relative to the root it applies to).
    pub fn matches(&self, path: &Path) -> bool {
        if self.paths.is_empty() {
            true
        } else if self.literal {
            self.paths.iter().any(|p| Path::new(p) == path)
        } else {
            self.path_set.is_match(path)
        }
    }

    /// Whether this target may cover a file under the directory `dir` (`""` or `.`: the
    /// root). A glob is judged by its directory before the first wildcard, so the answer errs
    /// towards yes: it decides which holds pass down to a promotion, where one too many holds
    /// and one too few deploys.
    pub fn may_write_under(&self, dir: &str) -> bool {
        let dir = dir.trim_matches('/').trim_start_matches("./");
        if self.paths.is_empty() || dir.is_empty() || dir == "." {
            return true;
        }
        let within =
            |a: &str, b: &str| a == b || a.strip_prefix(b).is_some_and(|r| r.starts_with('/'));
        self.paths.iter().any(|p| {
            let p = p.trim_start_matches("./");
            let fixed = match p.find(['*', '?', '[', '{']) {
                Some(at) => p[..at].rsplit_once('/').map_or("", |(d, _)| d),
                None => p,
            };
            fixed.is_empty() || within(fixed, dir) || within(dir, fixed)
        })
    }
}

/// Explicit dotted value paths (`image.repository`, `images[1].tag`) into a Helm values file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HelmPaths {
    #[serde(default)]
    pub registry: Option<String>,
    #[serde(default)]
    pub repository: Option<String>,
    #[serde(default)]
    pub tag: Option<String>,
    #[serde(default)]
    pub digest: Option<String>,
    /// A single value holding the whole `repo:tag` reference.
    #[serde(default)]
    pub image: Option<String>,
}

impl ImagePolicy {
    /// A policy built from command-line flags (`tagpilot tags IMAGE --semver RANGE`), with no
    /// filters and no targets. Set `allow_tags` / [`ImagePolicy::set_ignore_tags`] afterwards.
    pub fn adhoc(image: &str, strategy: Strategy) -> Result<ImagePolicy, PolicyError> {
        let repository =
            Repository::parse(image).map_err(|e| PolicyError::adhoc(e.to_string(), e))?;
        Ok(ImagePolicy {
            name: "adhoc".to_string(),
            namespace: None,
            source: SourceLocation::new(Path::new("<command line>"), 0, 0),
            image: repository,
            image_name: image.to_string(),
            pattern: None,
            priority: 0,
            instance: None,
            strategy,
            allow_tags: None,
            ignore_tags: Vec::new(),
            ignore_set: globset::GlobSet::empty(),
            platforms: Vec::new(),
            any_platform: false,
            pin_digest: false,
            allow_downgrade: false,
            replace_unreadable_tags: false,
            keep_precision: true,
            min_age: None,
            verify: None,
            version_labels: None,
            promote: None,
            signatures: None,
            chart: None,
            targets: Vec::new(),
        })
    }

    /// Gives every policy of `policies` that does not set its own `versionLabels` the ones
    /// `tagpilot.yaml` sets (`None`: it sets none, and the defaults stand).
    pub fn default_version_labels(
        policies: &mut [ImagePolicy],
        labels: Option<&crate::config::version_labels::VersionLabels>,
    ) {
        if let Some(labels) = labels {
            for p in policies.iter_mut().filter(|p| p.version_labels.is_none()) {
                p.version_labels = Some(labels.clone());
            }
        }
    }

    /// Replaces `ignoreTags` with `globs`.
    pub fn set_ignore_tags(&mut self, globs: &[String]) -> Result<(), PolicyError> {
        let mut builder = globset::GlobSetBuilder::new();
        for g in globs {
            builder.add(
                globset::Glob::new(g)
                    .map_err(|e| PolicyError::adhoc(format!("invalid glob {g:?}: {e}"), e))?,
            );
        }
        self.ignore_set = builder
            .build()
            .map_err(|e| PolicyError::adhoc(e.to_string(), e))?;
        self.ignore_tags = globs.to_vec();
        Ok(())
    }

    /// Sets `allowTags` from a regex.
    pub fn set_allow_tags(&mut self, pattern: &str) -> Result<(), PolicyError> {
        self.allow_tags = Some(regex::Regex::new(pattern).map_err(|e| {
            PolicyError::adhoc(format!("invalid allowTags regex \"{pattern}\": {e}"), e)
        })?);
        Ok(())
    }

    /// `namespace:name` when a namespace is set, else `name` (how Flux markers name policies).
    pub fn qualified_name(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{ns}:{}", self.name),
            None => self.name.clone(),
        }
    }
}

// === errors ===

/// One problem found while loading policies.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML, or a document does not have the shape of an `ImagePolicy` (unknown
    /// key, wrong type, missing field). `message` is serde-saphyr's, with `file:line:column` and
    /// a snippet.
    #[error("{message}")]
    Syntax {
        location: SourceLocation,
        message: String,
    },
    /// A document has the right shape but a value is wrong (bad regex, range, glob, …).
    /// `message` names the key and the value, and says what is wrong with it on one line; `error`
    /// is the underlying error, when there is one. It is no `source()`: the message already
    /// says it, in its own words.
    #[error("{location}: {}{message}", policy_prefix(.policy))]
    Invalid {
        location: SourceLocation,
        policy: Option<String>,
        message: String,
        error: Option<Box<ValueError>>,
    },
    #[error("{location}: policy {name:?} is defined twice; first at {first}")]
    Duplicate {
        name: String,
        location: SourceLocation,
        first: SourceLocation,
    },
    /// A policy built from command-line flags is invalid. `message` already says what `error`
    /// says, so `error` is no `source()`.
    #[error("{message}")]
    Adhoc {
        message: String,
        error: Box<ValueError>,
    },
    /// A signature requirement whose key could not be read (an `ImageUpdater` resource's
    /// `imagesVerification.cosignKey`): the image is not updated. `message` names the field,
    /// the Secret and why.
    #[error("{message}")]
    Unverifiable { message: String },
    /// `--order` names no regex order.
    #[error("unknown order {order:?}: expected numerical, alphabetical or semver")]
    UnknownOrder { order: String },
}

impl PolicyError {
    /// The policy file the problem is in, when it is in one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            PolicyError::Read { path, .. } => Some(path),
            PolicyError::Syntax { location, .. }
            | PolicyError::Invalid { location, .. }
            | PolicyError::Duplicate { location, .. } => Some(&location.file),
            PolicyError::Adhoc { .. }
            | PolicyError::UnknownOrder { .. }
            | PolicyError::Unverifiable { .. } => None,
        }
    }
}

/// The error underneath a wrong value: what a regex, glob, version constraint or image parser
/// said, or one of the policy's own rules about a value.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error(transparent)]
    Regex(#[from] regex::Error),
    #[error(transparent)]
    Glob(#[from] globset::Error),
    #[error(transparent)]
    Constraint(#[from] VersionError),
    #[error(transparent)]
    Image(#[from] ImageError),
    /// `sortBy` names no group of the pattern: neither a group's name nor its number.
    #[error("sortBy names group {group:?}, but {}", known_groups(groups))]
    UnknownGroup { group: String, groups: Vec<String> },
    /// Several capture groups and no `sortBy`: any of them could be the key.
    #[error(
        "the pattern has {} capture groups ({}) and no sortBy; set sortBy to the one to order by (its name or number)",
        groups.len(),
        groups.join(", ")
    )]
    SeveralGroups { groups: Vec<String> },
    /// No `order`, and the key can hold more than digits: text order and version order differ.
    #[error(
        "no order is set and the sort key, {key}, can hold more than digits; set order: numerical, \
         alphabetical or semver"
    )]
    AmbiguousOrder { key: String },
    /// `order: numerical` on a key the pattern never lets be a number: every tag would fail.
    #[error(
        "order: numerical reads the sort key as a number, but the key, {key}, is never only digits; \
         capture the number in a group, or set another order"
    )]
    NeverANumber { key: String },
    /// The pattern compiled, but the regex parser could not read it again.
    #[error("the pattern could not be analysed")]
    Syntax(#[source] Box<regex_syntax::Error>),
    #[error("{path:?} is not a value path like image.tag or images[0].tag")]
    NotAValuePath { path: String },
    #[error(transparent)]
    Pattern(#[from] PatternError),
}

/// What `sortBy` may name, for a message about what it named.
fn known_groups(groups: &[String]) -> String {
    if groups.is_empty() {
        "the pattern has no capture group; put parentheses around the part to order by, \
         named like (?P<build>\\d+) if you like"
            .to_string()
    } else {
        format!(
            "the pattern's groups are {} (a group's name, or its number)",
            groups.join(", ")
        )
    }
}

fn policy_prefix(policy: &Option<String>) -> String {
    match policy {
        Some(p) => format!("policy {p:?}: "),
        None => String::new(),
    }
}

impl PolicyError {
    fn adhoc(message: impl Into<String>, source: impl Into<ValueError>) -> Self {
        PolicyError::Adhoc {
            message: message.into(),
            error: Box::new(source.into()),
        }
    }

    /// Where the problem is, when it is in a file.
    pub fn location(&self) -> Option<&SourceLocation> {
        match self {
            PolicyError::Syntax { location, .. }
            | PolicyError::Invalid { location, .. }
            | PolicyError::Duplicate { location, .. } => Some(location),
            PolicyError::Read { .. }
            | PolicyError::Adhoc { .. }
            | PolicyError::UnknownOrder { .. }
            | PolicyError::Unverifiable { .. } => None,
        }
    }

    /// A short stable name for metrics and JSON reports.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PolicyError::Read { .. } => "read",
            PolicyError::Syntax { .. } => "syntax",
            PolicyError::Invalid { .. } => "invalid",
            PolicyError::Duplicate { .. } => "duplicate",
            PolicyError::Adhoc { .. } | PolicyError::UnknownOrder { .. } => "adhoc",
            PolicyError::Unverifiable { .. } => "unverifiable",
        }
    }
}

/// Every problem found while loading policies, in file order.
#[derive(Debug)]
pub struct PolicyErrors(pub Vec<PolicyError>);

impl fmt::Display for PolicyErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "{n} problem{} in policies:",
            if n == 1 { "" } else { "s" }
        )?;
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}", crate::error_chain::Chain(e))?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyErrors {}
