//! `ImagePolicy` documents: which image a policy follows, how it picks a tag, and which files it
//! may rewrite.
//!
//! Loading validates everything that can be checked without the network (strategy shape, regexes,
//! ranges, globs, platforms, image names, duplicate names) and reports every problem it finds,
//! across all files, each with `file:line:column` and the policy's name where it is known. A user
//! fixing a policy repository should see the whole list at once, not one error per run.
//!
//! This module reads policy files and nothing else: no network, no writes.

use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

use crate::config::{Config, PolicySource};
use crate::image::{Platform, Repository};
use crate::select::Constraint;

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
    pub strategy: Strategy,
    pub allow_tags: Option<regex::Regex>,
    /// `ignoreTags` globs, kept as written for reports and compiled for matching.
    pub ignore_tags: Vec<String>,
    pub ignore_set: globset::GlobSet,
    pub platforms: Vec<Platform>,
    pub pin_digest: bool,
    /// Lets an ordered strategy move a reference to a tag it ranks lower than the current one
    /// (e.g. back into a range the file was pinned above).
    pub allow_downgrade: bool,
    /// Empty means every file under the root.
    pub targets: Vec<Target>,
}

#[derive(Debug, Clone)]
pub enum Strategy {
    /// Highest version in `range` (any version when `None`), within the current tag's variant
    /// family. Pre-releases only when `prerelease`.
    Semver {
        range: Option<Constraint>,
        prerelease: bool,
    },
    /// Tags matching `pattern`, ordered by the `sort_by` capture group (the whole match when
    /// `None`).
    Regex {
        pattern: regex::Regex,
        sort_by: Option<String>,
        order: RegexOrder,
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
            Some(r) => Some(Constraint::parse(r).map_err(|e| PolicyError::adhoc(e.to_string()))?),
        };
        Ok(Strategy::Semver { range, prerelease })
    }

    /// `regex` from `--regex PATTERN [--sort-by GROUP] [--order ORDER]` flags.
    pub fn regex(
        pattern: &str,
        sort_by: Option<&str>,
        order: RegexOrder,
    ) -> Result<Strategy, PolicyError> {
        let compiled = regex::Regex::new(pattern)
            .map_err(|e| PolicyError::adhoc(format!("invalid regex {pattern:?}: {e}")))?;
        if let Some(group) = sort_by {
            check_group(&compiled, group).map_err(PolicyError::adhoc)?;
        }
        Ok(Strategy::Regex {
            pattern: compiled,
            sort_by: sort_by.map(str::to_string),
            order,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RegexOrder {
    /// The capture read as a non-negative integer (timestamps, build numbers).
    Numerical,
    /// The capture compared byte by byte.
    Alphabetical,
    /// The capture read as a version (`v` prefix and two-part versions allowed).
    Semver,
}

impl std::str::FromStr for RegexOrder {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "numerical" => Ok(RegexOrder::Numerical),
            "alphabetical" => Ok(RegexOrder::Alphabetical),
            "semver" => Ok(RegexOrder::Semver),
            _ => Err(format!(
                "unknown order {s:?}: expected numerical, alphabetical or semver"
            )),
        }
    }
}

/// Which files a policy may rewrite, and how to find the image in Helm values there.
#[derive(Debug, Clone)]
pub struct Target {
    /// Globs relative to the root, as written. Empty means every file.
    pub paths: Vec<String>,
    /// `paths` compiled; `*` stays within one directory, `**` crosses directories.
    pub path_set: globset::GlobSet,
    /// `targets[].repository`: a repository configured in `tagpilot.yaml` (`repositories:`);
    /// `None` means the local directory.
    pub repository: Option<String>,
    pub helm: Option<HelmPaths>,
    /// `kustomize.imageName`: the name the kustomization's `images:` entry uses when it differs
    /// from the policy's image (Image Updater's `kustomize.image-name`).
    pub kustomize_image_name: Option<String>,
}

impl Target {
    /// Whether this target covers `path` (relative to the root it applies to).
    pub fn matches(&self, path: &Path) -> bool {
        self.paths.is_empty() || self.path_set.is_match(path)
    }
}

/// Explicit dotted value paths (`image.repository`, `images[1].tag`) into a Helm values file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
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
        let repository = Repository::parse(image).map_err(|e| PolicyError::adhoc(e.to_string()))?;
        Ok(ImagePolicy {
            name: "adhoc".to_string(),
            namespace: None,
            source: SourceLocation::new(Path::new("<command line>"), 0, 0),
            image: repository,
            image_name: image.to_string(),
            strategy,
            allow_tags: None,
            ignore_tags: Vec::new(),
            ignore_set: globset::GlobSet::empty(),
            platforms: Vec::new(),
            pin_digest: false,
            allow_downgrade: false,
            targets: Vec::new(),
        })
    }

    /// Replaces `ignoreTags` with `globs`.
    pub fn set_ignore_tags(&mut self, globs: &[String]) -> Result<(), PolicyError> {
        let mut builder = globset::GlobSetBuilder::new();
        for g in globs {
            builder.add(
                globset::Glob::new(g)
                    .map_err(|e| PolicyError::adhoc(format!("invalid glob {g:?}: {e}")))?,
            );
        }
        self.ignore_set = builder
            .build()
            .map_err(|e| PolicyError::adhoc(e.to_string()))?;
        self.ignore_tags = globs.to_vec();
        Ok(())
    }

    /// Sets `allowTags` from a regex.
    pub fn set_allow_tags(&mut self, pattern: &str) -> Result<(), PolicyError> {
        self.allow_tags = Some(regex::Regex::new(pattern).map_err(|e| {
            PolicyError::adhoc(format!("invalid allowTags regex {pattern:?}: {e}"))
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
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
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
    #[error("{location}: {}{message}", policy_prefix(.policy))]
    Invalid {
        location: SourceLocation,
        policy: Option<String>,
        message: String,
    },
    #[error("{location}: policy {name:?} is defined twice; first at {first}")]
    Duplicate {
        name: String,
        location: SourceLocation,
        first: SourceLocation,
    },
    /// A policy built from command-line flags is invalid.
    #[error("{message}")]
    Adhoc { message: String },
}

fn policy_prefix(policy: &Option<String>) -> String {
    match policy {
        Some(p) => format!("policy {p:?}: "),
        None => String::new(),
    }
}

impl PolicyError {
    fn adhoc(message: impl Into<String>) -> Self {
        PolicyError::Adhoc {
            message: message.into(),
        }
    }

    /// Where the problem is, when it is in a file.
    pub fn location(&self) -> Option<&SourceLocation> {
        match self {
            PolicyError::Syntax { location, .. }
            | PolicyError::Invalid { location, .. }
            | PolicyError::Duplicate { location, .. } => Some(location),
            PolicyError::Read { .. } | PolicyError::Adhoc { .. } => None,
        }
    }

    /// A short stable name for metrics and JSON reports.
    pub fn metric_label(&self) -> &'static str {
        match self {
            PolicyError::Read { .. } => "read",
            PolicyError::Syntax { .. } => "syntax",
            PolicyError::Invalid { .. } => "invalid",
            PolicyError::Duplicate { .. } => "duplicate",
            PolicyError::Adhoc { .. } => "adhoc",
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
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for PolicyErrors {}

// === loading ===

/// What `tagpilot check` reports when everything is valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckSummary {
    /// Every policy file read, in the order read, with the names of the policies it defines.
    pub files: Vec<FileSummary>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSummary {
    pub path: PathBuf,
    pub policies: Vec<String>,
}

impl CheckSummary {
    pub fn policy_count(&self) -> usize {
        self.files.iter().map(|f| f.policies.len()).sum()
    }
}

impl fmt::Display for CheckSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for file in &self.files {
            writeln!(
                f,
                "{}: {} ({})",
                file.path.display(),
                file.policies.len(),
                file.policies.join(", ")
            )?;
        }
        let n = self.policy_count();
        write!(
            f,
            "{n} polic{} in {} file{}: OK",
            if n == 1 { "y" } else { "ies" },
            self.files.len(),
            if self.files.len() == 1 { "" } else { "s" }
        )
    }
}

/// Reads and validates every policy `config.policies` names.
pub fn load(config: &Config) -> Result<Vec<ImagePolicy>, PolicyErrors> {
    let (_, policies, errors) = load_all(config);
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(PolicyErrors(errors))
    }
}

/// What `tagpilot check` runs: loads every policy (no network) and summarises per file, or
/// returns every problem.
pub fn check(config: &Config) -> Result<CheckSummary, PolicyErrors> {
    let (files, _, errors) = load_all(config);
    if errors.is_empty() {
        Ok(CheckSummary { files })
    } else {
        Err(PolicyErrors(errors))
    }
}

/// Parses and validates the policy documents in one file's text. `path` is used for messages.
pub fn parse_file(path: &Path, text: &str) -> Result<Vec<ImagePolicy>, PolicyErrors> {
    let mut errors = Vec::new();
    let policies = parse_documents(path, text, &mut errors);
    let mut seen = HashMap::new();
    check_duplicates(&policies, &mut seen, &mut errors);
    if errors.is_empty() {
        Ok(policies)
    } else {
        Err(PolicyErrors(errors))
    }
}

fn load_all(config: &Config) -> (Vec<FileSummary>, Vec<ImagePolicy>, Vec<PolicyError>) {
    let mut errors = Vec::new();
    let files = policy_files(config, &mut errors);
    let mut summaries = Vec::new();
    let mut policies = Vec::new();
    let mut seen = HashMap::new();
    for path in files {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(source) => {
                errors.push(PolicyError::Read { path, source });
                continue;
            }
        };
        let parsed = parse_documents(&path, &text, &mut errors);
        check_duplicates(&parsed, &mut seen, &mut errors);
        summaries.push(FileSummary {
            path,
            policies: parsed.iter().map(|p| p.name.clone()).collect(),
        });
        policies.extend(parsed);
    }
    check_repositories(config, &policies, &mut errors);
    (summaries, policies, errors)
}

/// A target naming a repository must name one configured in `tagpilot.yaml`; otherwise the
/// policy would silently never apply.
fn check_repositories(config: &Config, policies: &[ImagePolicy], errors: &mut Vec<PolicyError>) {
    for p in policies {
        for name in p.targets.iter().filter_map(|t| t.repository.as_deref()) {
            if !config.repositories.iter().any(|r| r.name == name) {
                let known: Vec<&str> = config
                    .repositories
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect();
                errors.push(PolicyError::Invalid {
                    location: p.source.clone(),
                    policy: Some(p.name.clone()),
                    message: format!(
                        "targets name repository {name:?}, which tagpilot.yaml does not configure (repositories: {})",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    ),
                });
            }
        }
    }
}

fn check_duplicates(
    policies: &[ImagePolicy],
    seen: &mut HashMap<String, SourceLocation>,
    errors: &mut Vec<PolicyError>,
) {
    // Names are unique regardless of namespace: tagpilot's own markers (`# tagpilot: NAME`)
    // name a policy without one, so two namespaces sharing a name would make them ambiguous.
    for p in policies {
        if let Some(first) = seen.get(&p.name) {
            errors.push(PolicyError::Duplicate {
                name: p.name.clone(),
                location: p.source.clone(),
                first: first.clone(),
            });
        } else {
            seen.insert(p.name.clone(), p.source.clone());
        }
    }
}

/// The files `policies:` names, in a stable order: directories are walked recursively for
/// `*.yaml` / `*.yml`, skipping hidden entries (`.git`), and sorted.
fn policy_files(config: &Config, errors: &mut Vec<PolicyError>) -> Vec<PathBuf> {
    let base = config.base_dir();
    let entries: Vec<PathBuf> = match &config.policies {
        PolicySource::Directory(d) => vec![base.join(d)],
        PolicySource::Files(list) => list.iter().map(|f| base.join(f)).collect(),
    };
    let mut out = Vec::new();
    for entry in entries {
        match std::fs::metadata(&entry) {
            Ok(m) if m.is_dir() => {
                let mut found = Vec::new();
                let walker = walkdir::WalkDir::new(&entry)
                    .follow_links(true)
                    .into_iter()
                    .filter_entry(|e| {
                        e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.')
                    });
                for item in walker {
                    match item {
                        Ok(e) if e.file_type().is_file() && is_yaml(e.path()) => {
                            found.push(e.into_path())
                        }
                        Ok(_) => {}
                        Err(err) => {
                            let path = err
                                .path()
                                .map(Path::to_path_buf)
                                .unwrap_or_else(|| entry.clone());
                            let source = err
                                .into_io_error()
                                .unwrap_or_else(|| std::io::Error::other("filesystem loop"));
                            errors.push(PolicyError::Read { path, source });
                        }
                    }
                }
                found.sort();
                out.extend(found);
            }
            Ok(_) => out.push(entry),
            Err(source) => errors.push(PolicyError::Read {
                path: entry,
                source,
            }),
        }
    }
    out
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml")
    )
}

/// Splits a file into YAML documents at column-0 `---` lines, so a broken document does not
/// hide the problems of the ones after it, and parses each with its true line numbers.
fn parse_documents(path: &Path, text: &str, errors: &mut Vec<PolicyError>) -> Vec<ImagePolicy> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first_error = errors.len();
    let mut policies = Vec::new();
    for (offset, doc) in split_documents(text) {
        if is_blank_document(doc) {
            continue;
        }
        let parsed: Result<Option<RawDocument>, serde_saphyr::Error> = serde_saphyr::from_str(doc);
        match parsed {
            Ok(Some(raw)) => {
                let mut cx = Validator {
                    path,
                    offset,
                    errors,
                    policy: None,
                };
                if let Some(p) = cx.policy(raw) {
                    policies.push(p);
                }
            }
            Ok(None) => {}
            Err(e) => {
                // The document did not deserialise; its name may still be readable, and helps.
                let name = serde_saphyr::from_str::<NameOnly>(doc)
                    .ok()
                    .and_then(|n| n.metadata?.name);
                let context = name.map(|n| format!("policy {n:?}"));
                let (line, column, message) =
                    crate::config::render_yaml_error(&e, path, offset, context.as_deref());
                let location = SourceLocation::new(path, line, column);
                errors.push(PolicyError::Syntax { location, message });
            }
        }
    }
    // In file order, whatever order the checks ran in.
    errors[first_error..].sort_by_key(|e| e.location().map(|l| (l.line, l.column)));
    policies
}

/// `(lines before the document, document text)` for each document of a YAML stream.
fn split_documents(text: &str) -> Vec<(usize, &str)> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut start_line = 0;
    let mut pos = 0;
    for (line_no, line) in text.split_inclusive('\n').enumerate() {
        let is_marker =
            line.starts_with("---") && line[3..].chars().next().is_none_or(|c| c.is_whitespace());
        if is_marker && pos > start {
            docs.push((start_line, &text[start..pos]));
            start = pos;
            start_line = line_no;
        }
        pos += line.len();
    }
    if pos > start || docs.is_empty() {
        docs.push((start_line, &text[start..]));
    }
    docs
}

fn is_blank_document(doc: &str) -> bool {
    doc.lines().all(|l| {
        let t = l.trim();
        t.is_empty()
            || t.starts_with('#')
            || t == "---"
            || t == "..."
            || (l.starts_with("---") && t[3..].trim_start().starts_with('#'))
    })
}

// === the documents as written ===

/// Just enough of a document to name it in an error about the rest.
#[derive(Deserialize)]
struct NameOnly {
    metadata: Option<NameOnlyMetadata>,
}

#[derive(Deserialize)]
struct NameOnlyMetadata {
    name: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawDocument {
    api_version: Spanned<String>,
    kind: Spanned<String>,
    metadata: RawMetadata,
    spec: Spanned<RawSpec>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetadata {
    name: Spanned<String>,
    #[serde(default)]
    namespace: Option<Spanned<String>>,
    // Accepted so policies can be kept next to Kubernetes resources and labelled like them.
    #[serde(default)]
    #[allow(dead_code)]
    labels: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    #[allow(dead_code)]
    annotations: std::collections::BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawSpec {
    image: Spanned<String>,
    strategy: Spanned<RawStrategy>,
    #[serde(default)]
    allow_tags: Option<Spanned<String>>,
    #[serde(default)]
    ignore_tags: Vec<Spanned<String>>,
    #[serde(default)]
    platforms: Vec<Spanned<String>>,
    #[serde(default)]
    pin_digest: bool,
    #[serde(default)]
    allow_downgrade: bool,
    #[serde(default)]
    targets: Vec<Spanned<RawTarget>>,
}

/// Every strategy is an optional key so that "none" and "two" can be reported as such rather than
/// as serde's enum errors. A key written with no value (`newestBuild:`) counts as present.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawStrategy {
    #[serde(default, deserialize_with = "present")]
    semver: Option<Spanned<Option<RawSemver>>>,
    #[serde(default, deserialize_with = "present")]
    regex: Option<Spanned<Option<RawRegex>>>,
    #[serde(default, deserialize_with = "present")]
    newest_build: Option<Spanned<Option<RawEmpty>>>,
    #[serde(default, deserialize_with = "present")]
    digest: Option<Spanned<Option<RawDigest>>>,
    #[serde(default, deserialize_with = "present")]
    alphabetical: Option<Spanned<Option<RawAlphabetical>>>,
}

fn present<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmpty {}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSemver {
    #[serde(default)]
    range: Option<Spanned<String>>,
    #[serde(default)]
    prerelease: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawRegex {
    pattern: Spanned<String>,
    #[serde(default)]
    sort_by: Option<Spanned<String>>,
    #[serde(default)]
    order: Option<RegexOrder>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDigest {
    tag: Spanned<String>,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "lowercase")]
enum SortOrder {
    Asc,
    Desc,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAlphabetical {
    #[serde(default)]
    order: Option<SortOrder>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawTarget {
    #[serde(default)]
    paths: Vec<Spanned<String>>,
    #[serde(default)]
    repository: Option<Spanned<String>>,
    #[serde(default)]
    helm: Option<Spanned<HelmPaths>>,
    #[serde(default)]
    kustomize: Option<RawKustomize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawKustomize {
    image_name: Spanned<String>,
}

// === validation ===

struct Validator<'a> {
    path: &'a Path,
    /// Lines before the document in its file.
    offset: usize,
    errors: &'a mut Vec<PolicyError>,
    policy: Option<String>,
}

impl Validator<'_> {
    fn at<T>(&self, s: &Spanned<T>) -> SourceLocation {
        let loc = s.referenced;
        SourceLocation::new(
            self.path,
            loc.line() as usize + self.offset,
            loc.column() as usize,
        )
    }

    fn error<T>(&mut self, s: &Spanned<T>, message: impl Into<String>) {
        let location = self.at(s);
        self.errors.push(PolicyError::Invalid {
            location,
            policy: self.policy.clone(),
            message: message.into(),
        });
    }

    fn policy(&mut self, raw: RawDocument) -> Option<ImagePolicy> {
        let before = self.errors.len();
        let name = raw.metadata.name.value.clone();
        if is_valid_name(&name) {
            self.policy = Some(name.clone());
        } else {
            self.error(
                &raw.metadata.name,
                format!(
                    "metadata.name {name:?} is not a valid name (lower-case letters, digits, '-', '.', '_'; \
                     starting and ending with a letter or digit)"
                ),
            );
        }
        if raw.api_version.value != API_VERSION {
            self.error(
                &raw.api_version,
                format!(
                    "apiVersion must be {API_VERSION:?}, not {:?}",
                    raw.api_version.value
                ),
            );
        }
        if raw.kind.value != KIND {
            self.error(
                &raw.kind,
                format!("kind must be {KIND:?}, not {:?}", raw.kind.value),
            );
        }
        let namespace = raw.metadata.namespace.map(|ns| {
            if !is_valid_name(&ns.value) {
                self.error(
                    &ns,
                    format!("metadata.namespace {:?} is not a valid name", ns.value),
                );
            }
            ns.value
        });
        let source = self.at(&raw.metadata.name);
        let spec = raw.spec.value;

        let image = match Repository::parse(&spec.image.value) {
            Ok(r) => Some(r),
            Err(e) => {
                self.error(&spec.image, format!("spec.image: {e}"));
                None
            }
        };
        let strategy = self.strategy(spec.strategy);
        let allow_tags = spec
            .allow_tags
            .and_then(|a| match regex::Regex::new(&a.value) {
                Ok(r) => Some(r),
                Err(e) => {
                    self.error(
                        &a,
                        format!(
                            "allowTags: invalid regex {:?}: {}",
                            a.value,
                            one_line(&e.to_string())
                        ),
                    );
                    None
                }
            });
        let mut ignore_builder = globset::GlobSetBuilder::new();
        let mut ignore_tags = Vec::new();
        for g in spec.ignore_tags {
            match globset::Glob::new(&g.value) {
                Ok(glob) => {
                    ignore_builder.add(glob);
                }
                Err(e) => self.error(
                    &g,
                    format!("ignoreTags: invalid glob {:?}: {}", g.value, e.kind()),
                ),
            }
            ignore_tags.push(g.value);
        }
        let ignore_set = ignore_builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty());
        let mut platforms = Vec::new();
        for p in spec.platforms {
            match p.value.parse::<Platform>() {
                Ok(platform) => platforms.push(platform),
                Err(e) => self.error(&p, format!("platforms: {e}")),
            }
        }
        let targets: Vec<Target> = spec
            .targets
            .into_iter()
            .filter_map(|t| self.target(t))
            .collect();

        if self.errors.len() > before {
            return None;
        }
        Some(ImagePolicy {
            name,
            namespace,
            source,
            image: image?,
            image_name: spec.image.value,
            strategy: strategy?,
            allow_tags,
            ignore_tags,
            ignore_set,
            platforms,
            pin_digest: spec.pin_digest,
            allow_downgrade: spec.allow_downgrade,
            targets,
        })
    }

    fn strategy(&mut self, raw: Spanned<RawStrategy>) -> Option<Strategy> {
        let s = &raw.value;
        let given: Vec<&str> = [
            s.semver.as_ref().map(|_| "semver"),
            s.regex.as_ref().map(|_| "regex"),
            s.newest_build.as_ref().map(|_| "newestBuild"),
            s.digest.as_ref().map(|_| "digest"),
            s.alphabetical.as_ref().map(|_| "alphabetical"),
        ]
        .into_iter()
        .flatten()
        .collect();
        match given.len() {
            0 => {
                self.error(
                    &raw,
                    "spec.strategy names no strategy; set exactly one of semver, regex, newestBuild, digest, alphabetical",
                );
                return None;
            }
            1 => {}
            _ => {
                self.error(
                    &raw,
                    format!(
                        "spec.strategy sets {}; set exactly one",
                        given.join(" and ")
                    ),
                );
                return None;
            }
        }
        let RawStrategy {
            semver,
            regex,
            newest_build,
            digest,
            alphabetical,
        } = raw.value;
        if let Some(s) = semver {
            let (range, prerelease) = match s.value {
                Some(RawSemver { range, prerelease }) => (range, prerelease),
                None => (None, false),
            };
            let range = match range {
                None => None,
                Some(r) => match Constraint::parse(&r.value) {
                    Ok(c) => Some(c),
                    Err(e) => {
                        self.error(&r, format!("semver.range: {e}"));
                        return None;
                    }
                },
            };
            return Some(Strategy::Semver { range, prerelease });
        }
        if let Some(r) = regex {
            let Some(RawRegex {
                pattern,
                sort_by,
                order,
            }) = r.value
            else {
                self.error(&r, "strategy regex needs a `pattern`");
                return None;
            };
            let compiled = match regex::Regex::new(&pattern.value) {
                Ok(c) => c,
                Err(e) => {
                    self.error(
                        &pattern,
                        format!(
                            "regex.pattern: invalid regex {:?}: {}",
                            pattern.value,
                            one_line(&e.to_string())
                        ),
                    );
                    return None;
                }
            };
            if let Some(group) = &sort_by
                && let Err(message) = check_group(&compiled, &group.value)
            {
                self.error(group, format!("regex.sortBy: {message}"));
                return None;
            }
            return Some(Strategy::Regex {
                pattern: compiled,
                sort_by: sort_by.map(|s| s.value),
                // Alphabetical works for any capture and equals numerical order for the
                // fixed-width timestamps most build tags carry.
                order: order.unwrap_or(RegexOrder::Alphabetical),
            });
        }
        if newest_build.is_some() {
            return Some(Strategy::NewestBuild);
        }
        if let Some(d) = digest {
            let Some(RawDigest { tag }) = d.value else {
                self.error(&d, "strategy digest needs the `tag` to follow");
                return None;
            };
            if !crate::image::is_valid_tag(&tag.value) {
                self.error(
                    &tag,
                    format!("digest.tag {:?} is not a valid tag", tag.value),
                );
                return None;
            }
            return Some(Strategy::Digest { tag: tag.value });
        }
        if let Some(a) = alphabetical {
            let order = a.value.and_then(|a| a.order).unwrap_or(SortOrder::Desc);
            return Some(Strategy::Alphabetical {
                descending: matches!(order, SortOrder::Desc),
            });
        }
        None
    }

    fn target(&mut self, raw: Spanned<RawTarget>) -> Option<Target> {
        let before = self.errors.len();
        let t = raw.value;
        let mut builder = globset::GlobSetBuilder::new();
        let mut paths = Vec::new();
        for p in t.paths {
            match globset::GlobBuilder::new(&p.value)
                .literal_separator(true)
                .build()
            {
                Ok(g) => {
                    builder.add(g);
                }
                Err(e) => self.error(
                    &p,
                    format!("targets[].paths: invalid glob {:?}: {}", p.value, e.kind()),
                ),
            }
            paths.push(p.value);
        }
        let path_set = builder
            .build()
            .unwrap_or_else(|_| globset::GlobSet::empty());
        let helm = t.helm.map(|h| {
            let fields = [
                ("registry", &h.value.registry),
                ("repository", &h.value.repository),
                ("tag", &h.value.tag),
                ("digest", &h.value.digest),
                ("image", &h.value.image),
            ];
            for (field, value) in fields {
                if let Some(v) = value
                    && let Err(message) = check_value_path(v)
                {
                    self.error(&h, format!("targets[].helm.{field}: {message}"));
                }
            }
            if h.value.tag.is_none() && h.value.image.is_none() && h.value.digest.is_none() {
                self.error(
                    &h,
                    "targets[].helm needs `tag`, `digest` or `image`: the value tagpilot rewrites",
                );
            }
            h.value
        });
        let repository = t.repository.map(|r| {
            if r.value.trim().is_empty() {
                self.error(&r, "targets[].repository is empty");
            }
            r.value
        });
        let kustomize_image_name = t.kustomize.map(|k| {
            if let Err(e) = crate::image::ImageRef::parse(&k.image_name.value) {
                self.error(&k.image_name, format!("targets[].kustomize.imageName: {e}"));
            }
            k.image_name.value
        });
        if self.errors.len() > before {
            return None;
        }
        Some(Target {
            paths,
            path_set,
            repository,
            helm,
            kustomize_image_name,
        })
    }
}

fn check_group(pattern: &regex::Regex, group: &str) -> Result<(), String> {
    if pattern.capture_names().flatten().any(|n| n == group) {
        return Ok(());
    }
    let names: Vec<&str> = pattern.capture_names().flatten().collect();
    Err(if names.is_empty() {
        format!(
            "sortBy names group {group:?} but the pattern has no named groups (write (?P<{group}>…))"
        )
    } else {
        format!(
            "sortBy names group {group:?} but the pattern's named groups are {}",
            names.join(", ")
        )
    })
}

/// Dotted Helm value paths: `image.tag`, `images[1].tag`, `a.b[0][2].c`.
fn check_value_path(path: &str) -> Result<(), String> {
    let bad = || {
        Err(format!(
            "{path:?} is not a value path like image.tag or images[0].tag"
        ))
    };
    if path.is_empty() {
        return bad();
    }
    for segment in path.split('.') {
        let (key, mut rest) = match segment.find('[') {
            Some(i) => (&segment[..i], &segment[i..]),
            None => (segment, ""),
        };
        if key.is_empty() {
            return bad();
        }
        while !rest.is_empty() {
            let Some(end) = rest.find(']') else {
                return bad();
            };
            if !rest.starts_with('[')
                || end < 2
                || !rest[1..end].chars().all(|c| c.is_ascii_digit())
            {
                return bad();
            }
            rest = &rest[end + 1..];
        }
    }
    Ok(())
}

fn is_valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    let edge = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    !b.is_empty()
        && b.len() <= 253
        && edge(b[0])
        && edge(b[b.len() - 1])
        && b.iter()
            .all(|&c| edge(c) || c == b'-' || c == b'.' || c == b'_')
}

/// regex's errors span several lines with a caret diagram; keep the last line, which says what
/// is wrong, so that each problem stays one line in a list.
fn one_line(message: &str) -> String {
    message
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or(message)
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: checkout-api
spec:
  image: 127.0.0.1:5000/shop/checkout-api
  strategy:
    semver: {range: ">=1.2.0, <2.0.0"}
  ignoreTags: ["*-debug"]
  targets:
    - paths: ["apps/checkout/**"]
      helm: {repository: image.repository, tag: image.tag}
---
apiVersion: tagpilot.dev/v1alpha1
kind: ImagePolicy
metadata:
  name: builds
  namespace: flux-system
spec:
  image: nginx
  strategy:
    newestBuild:
"#;

    fn errors(text: &str) -> Vec<String> {
        match parse_file(Path::new("p.yaml"), text) {
            Ok(_) => Vec::new(),
            Err(e) => e.0.iter().map(|e| e.to_string()).collect(),
        }
    }

    #[test]
    fn parses_several_documents() {
        let policies = parse_file(Path::new("p.yaml"), GOOD).unwrap();
        assert_eq!(policies.len(), 2);
        assert_eq!(policies[0].name, "checkout-api");
        assert_eq!(policies[0].source.line, 5);
        assert_eq!(policies[1].source.line, 18);
        assert_eq!(policies[1].qualified_name(), "flux-system:builds");
        assert!(matches!(policies[1].strategy, Strategy::NewestBuild));
        assert_eq!(policies[1].image.path, "library/nginx");
        let t = &policies[0].targets[0];
        assert!(t.matches(Path::new("apps/checkout/deploy/values.yaml")));
        assert!(!t.matches(Path::new("apps/cart/values.yaml")));
        assert_eq!(t.helm.as_ref().unwrap().tag.as_deref(), Some("image.tag"));
        assert!(policies[0].ignore_set.is_match("1.2.3-debug"));
    }

    #[test]
    fn errors_point_at_the_value_with_line_and_column() {
        let text = GOOD.replace(">=1.2.0, <2.0.0", ">=1.2.0, <<2");
        let errs = errors(&text);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("p.yaml:9:"), "{}", errs[0]);
        assert!(errs[0].contains("policy \"checkout-api\""), "{}", errs[0]);
    }

    #[test]
    fn a_broken_document_does_not_hide_the_next_one() {
        let text = GOOD
            .replace(
                "name: checkout-api\nspec:",
                "name: checkout-api\n  colour: red\nspec:",
            )
            .replace(
                "newestBuild:\n",
                "newestBuild:\n    digest: {tag: stable}\n",
            );
        let errs = errors(&text);
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].contains("p.yaml:6:"), "{}", errs[0]);
        assert!(errs[1].contains("newestBuild and digest"), "{}", errs[1]);
        assert!(errs[1].starts_with("p.yaml:"), "{}", errs[1]);
    }

    #[test]
    fn value_paths() {
        for ok in ["image.tag", "images[1].tag", "a.b[0][2].c", "tag"] {
            assert!(check_value_path(ok).is_ok(), "{ok}");
        }
        for bad in ["", "image..tag", "images[x].tag", "images[1", ".tag", "a[]"] {
            assert!(check_value_path(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn split_keeps_line_numbers() {
        let docs = split_documents("a: 1\n---\nb: 2\n--- # c\nc: 3\n");
        assert_eq!(
            docs,
            vec![(0, "a: 1\n"), (1, "---\nb: 2\n"), (3, "--- # c\nc: 3\n")]
        );
        assert_eq!(split_documents(""), vec![(0, "")]);
    }
}
