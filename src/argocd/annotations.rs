//! Argo CD Image Updater's annotations, read exactly as Image Updater documents them, under its
//! prefix and under tagpilot's own (`tagpilot.dev/`, which wins per key).
//!
//! Pure: a map of annotations in, a typed description out. Every annotation under either prefix
//! is either understood or listed in [`AppAnnotations::skipped`] with the reason; none is
//! silently dropped, because a user migrating from Image Updater must see what did not carry over.

use std::collections::{BTreeMap, BTreeSet};

use crate::image::{Platform, Repository};
use crate::select::Constraint;

/// Argo CD Image Updater's annotation prefix.
pub const IMAGE_UPDATER_PREFIX: &str = "argocd-image-updater.argoproj.io/";
/// tagpilot's own prefix; a key set under both prefixes takes tagpilot's value.
pub const TAGPILOT_PREFIX: &str = "tagpilot.dev/";

/// Why one annotation's value is not understood; the message becomes the skipped annotation's
/// reason, so it quotes the value and says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnnotationError {
    #[error("{0:?}: empty alias")]
    EmptyAlias(String),
    #[error("{0:?}: no image name")]
    NoImageName(String),
    #[error("{0:?} is not <namespace>/<name>")]
    NotNamespaceName(String),
    #[error("{0:?}: `secret:` needs `<namespace>/<name>#<field>`")]
    SecretWithoutField(String),
    #[error(
        "{0:?}: expected pullsecret:<ns>/<name>, secret:<ns>/<name>#<field>, env:<VAR> or ext:<script>"
    )]
    PullSecret(String),
    #[error("{0:?}: expected argocd, git, git:repocreds or git:secret:<ns>/<name>; using argocd")]
    WriteBackMethod(String),
    #[error(
        "{0:?}: expected kustomization[:<dir>] or helmvalues[:<file>]; writing .argocd-source-<app>.yaml instead"
    )]
    WriteBackTarget(String),
}

/// Everything the annotations of one Application say.
#[derive(Debug, Clone, Default)]
pub struct AppAnnotations {
    pub images: Vec<AnnotatedImage>,
    pub write_back: WriteBackMethod,
    /// Whether `write-back-method` was set at all (Image Updater's default is `argocd`).
    pub write_back_explicit: bool,
    pub write_back_target: Option<WriteBackTarget>,
    pub git_branch: Option<GitBranch>,
    pub git_repository: Option<String>,
    /// Annotations tagpilot read but cannot honour (fully or at all), with the reason.
    pub skipped: Vec<SkippedAnnotation>,
    /// Open pull requests instead of pushing (`gitConfig.pullRequest` of an `ImageUpdater`
    /// resource; no annotation sets it).
    pub pull_request: Option<PullRequestSettings>,
}

/// Pull requests asked for by an `ImageUpdater` resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestSettings {
    pub provider: PullRequestProvider,
    /// Labels for the pull request, trimmed and without duplicates.
    pub labels: Vec<String>,
    /// The resource and field that asked, for reports.
    pub field: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullRequestProvider {
    GitHub,
    GitLab,
}

/// One image of `image-list`, with its per-alias (or app-wide) settings resolved.
#[derive(Debug, Clone)]
pub struct AnnotatedImage {
    /// The alias, or the image name when `image-list` gives none.
    pub alias: String,
    /// Whether `alias` was written (`alias=image`), so per-alias keys can apply.
    pub has_alias: bool,
    /// The image name as written, without tag or constraint.
    pub image: String,
    pub repository: Repository,
    /// The part after `:` in `image-list`: a version constraint for `semver`, the followed tag
    /// for `digest`.
    pub constraint: Option<String>,
    pub strategy: UpdateStrategy,
    /// `allow-tags: regexp:<re>`; `any` and absence mean every tag.
    pub allow_tags: Option<String>,
    pub ignore_tags: Vec<String>,
    pub platforms: Vec<Platform>,
    pub pull_secret: Option<PullSecret>,
    pub force_update: bool,
    pub helm: HelmNames,
    pub kustomize_image_name: Option<String>,
    /// `tagpilot.dev/<alias>.min-age` (tagpilot's own; Image Updater has none): the policy's
    /// `minAge`.
    pub min_age: Option<std::time::Duration>,
    /// Filters, ranges and strategies that cannot be read. Any one of them blocks the image:
    /// reading it as "no filter" would widen what the user asked for.
    pub unreadable: Vec<UnreadableSetting>,
}

impl AnnotatedImage {
    /// Whether a setting that cannot be read keeps this image from being updated.
    pub fn is_blocked(&self) -> bool {
        !self.unreadable.is_empty()
    }
}

/// A filter, range or strategy of one image that cannot be read: the image is not updated, and
/// the Application has a problem that names the setting and its value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableSetting {
    /// The annotation key as written, with its prefix (for an `ImageUpdater` resource, the
    /// resource and field).
    pub key: String,
    /// The value as written.
    pub value: String,
    /// Why it cannot be read.
    pub reason: String,
}

impl std::fmt::Display for UnreadableSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Backticks, not Debug quotes: a regexp reads as written, backslashes not doubled.
        write!(
            f,
            "{} `{}` cannot be read: {}",
            self.key, self.value, self.reason
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateStrategy {
    #[default]
    Semver,
    NewestBuild,
    Alphabetical,
    Digest,
}

impl UpdateStrategy {
    /// Case-insensitive, as Image Updater's `ParseUpdateStrategy` (`strings.ToLower`,
    /// registry-scanner/pkg/image/options.go).
    fn parse(s: &str) -> Option<UpdateStrategy> {
        Some(match s.to_lowercase().as_str() {
            "semver" => UpdateStrategy::Semver,
            "newest-build" | "latest" => UpdateStrategy::NewestBuild,
            "alphabetical" | "name" => UpdateStrategy::Alphabetical,
            "digest" => UpdateStrategy::Digest,
            _ => return None,
        })
    }
}

/// Helm parameter names (`helm.image-name`, `.image-tag`, `.image-spec`), as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelmNames {
    pub name: Option<String>,
    pub tag: Option<String>,
    pub spec: Option<String>,
}

impl HelmNames {
    /// Whether any `helm.*` annotation was set.
    pub fn is_set(&self) -> bool {
        self.name.is_some() || self.tag.is_some() || self.spec.is_some()
    }

    /// The parameter holding the image name (Image Updater's default `image.name`).
    pub fn name_or_default(&self) -> &str {
        self.name.as_deref().unwrap_or("image.name")
    }

    /// The parameter holding the tag (Image Updater's default `image.tag`).
    pub fn tag_or_default(&self) -> &str {
        self.tag.as_deref().unwrap_or("image.tag")
    }
}

/// Where registry credentials for an image come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullSecret {
    /// `pullsecret:<ns>/<name>`: a `kubernetes.io/dockerconfigjson` Secret.
    PullSecret { namespace: String, name: String },
    /// `secret:<ns>/<name>#<field>`: a field holding `user:password`.
    Secret {
        namespace: String,
        name: String,
        field: String,
    },
    /// `env:<VAR>`: an environment variable holding `user:password`.
    Env(String),
    /// `ext:<script>`: a script printing `user:password`.
    Ext(String),
}

/// `write-back-method`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WriteBackMethod {
    /// Patch the Application's parameter overrides through the Kubernetes API.
    #[default]
    Argocd,
    Git(GitCredentials),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitCredentials {
    /// `git`: the credentials of the matching `repositories:` entry.
    Configured,
    /// `git:repocreds`: Argo CD's repository credentials.
    RepoCreds,
    /// `git:secret:<ns>/<name>`.
    Secret { namespace: String, name: String },
}

/// `write-back-target`: where git write-back edits instead of `.argocd-source-<app>.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteBackTarget {
    /// `kustomization[:<dir>]`: the kustomization in `dir` (default the source path).
    Kustomization(Option<String>),
    /// `helmvalues[:<file>]`: a values file (default the first `valueFiles` entry).
    HelmValues(Option<String>),
}

/// `git-branch`: `branch`, `base:target` or `:target`; either part may be a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitBranch {
    /// The annotation key as written, with its prefix (for reports about the template).
    pub key: String,
    pub base: Option<String>,
    /// A template (see [`super::branch`]), rendered when the write happens.
    pub target: Option<String>,
}

/// An annotation tagpilot did not (fully) honour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedAnnotation {
    /// The annotation key as written, with its prefix.
    pub key: String,
    pub reason: String,
}

// === parsing ===

/// The annotation keys tagpilot knows for every image (after `<alias>.`) or app-wide.
const IMAGE_KEYS: &[&str] = &[
    "update-strategy",
    "allow-tags",
    "ignore-tags",
    "platforms",
    "pull-secret",
    "force-update",
    "helm.image-name",
    "helm.image-tag",
    "helm.image-spec",
    "kustomize.image-name",
];
const APP_KEYS: &[&str] = &[
    "image-list",
    "write-back-method",
    "write-back-target",
    "git-branch",
    "git-repository",
];

/// Reads the Image Updater annotations of one Application. Returns `None` when it has no
/// `image-list` under either prefix (the app is not managed).
pub fn parse(annotations: &BTreeMap<String, String>) -> Option<AppAnnotations> {
    let lookup = Lookup::new(annotations);
    let (list_key, list) = lookup.get("image-list")?;
    let mut out = AppAnnotations::default();
    let mut used: BTreeSet<String> = BTreeSet::new();
    used.insert(list_key.clone());

    for entry in split_image_list(list) {
        match parse_image_entry(&entry) {
            Ok((alias, image, constraint)) => {
                let Ok(repository) = Repository::parse(&image) else {
                    out.skipped.push(SkippedAnnotation {
                        key: list_key.clone(),
                        reason: format!("{image:?} is not an image name; entry ignored"),
                    });
                    continue;
                };
                let has_alias = alias.is_some();
                out.images.push(AnnotatedImage {
                    alias: alias.unwrap_or_else(|| image.clone()),
                    has_alias,
                    image,
                    repository,
                    constraint,
                    strategy: UpdateStrategy::default(),
                    allow_tags: None,
                    ignore_tags: Vec::new(),
                    platforms: Vec::new(),
                    pull_secret: None,
                    force_update: false,
                    helm: HelmNames::default(),
                    kustomize_image_name: None,
                    min_age: None,
                    unreadable: Vec::new(),
                });
            }
            Err(e) => out.skipped.push(SkippedAnnotation {
                key: list_key.clone(),
                reason: e.to_string(),
            }),
        }
    }

    // Thousands of Applications each hold their parsed annotations: no spare capacity.
    out.images.shrink_to_fit();
    for image in &mut out.images {
        let alias = image.has_alias.then(|| image.alias.clone());
        let mut get = |key: &str| -> Option<(String, String)> {
            let found = alias
                .as_deref()
                .and_then(|a| lookup.get(&format!("{a}.{key}")))
                .or_else(|| lookup.get(key));
            if let Some((k, _)) = &found {
                used.insert(k.clone());
            }
            found.map(|(k, v)| (k, v.trim().to_string()))
        };
        // Image Updater's own fallback for an unknown strategy is semver, and for an
        // unreadable filter "match nothing"; tagpilot holds in both cases, and says so.
        let mut unreadable = |key: String, value: &str, reason: String| {
            image.unreadable.push(UnreadableSetting {
                key,
                value: value.to_string(),
                reason,
            })
        };
        if let Some((key, v)) = get("update-strategy") {
            match UpdateStrategy::parse(&v) {
                Some(s) => image.strategy = s,
                None => unreadable(
                    key,
                    &v,
                    "not an update strategy (semver, newest-build, latest, alphabetical, name, \
                     digest)"
                        .to_string(),
                ),
            }
        }
        if let Some((key, v)) = get("allow-tags") {
            match parse_allow_tags(&v) {
                Ok(re) => image.allow_tags = re,
                Err(reason) => unreadable(key, &v, reason),
            }
        }
        if let Some((key, v)) = get("ignore-tags") {
            for glob in v.split(',').map(str::trim).filter(|g| !g.is_empty()) {
                match globset::Glob::new(glob) {
                    Ok(_) => image.ignore_tags.push(glob.to_string()),
                    Err(e) => unreadable(
                        key.clone(),
                        &v,
                        format!("invalid glob {glob:?}: {}", e.kind()),
                    ),
                }
            }
        }
        if let Some((key, v)) = get("platforms") {
            for p in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                match p.parse::<Platform>() {
                    Ok(p) => image.platforms.push(p),
                    Err(e) => unreadable(key.clone(), &v, e.to_string()),
                }
            }
        }
        if let Some((key, v)) = get("pull-secret") {
            match parse_pull_secret(&v) {
                Ok(PullSecret::Ext(script)) => out.skipped.push(SkippedAnnotation {
                    key,
                    reason: format!(
                        "ext:{script}: tagpilot runs no credential scripts; configure the registry's credentials in tagpilot.yaml or a docker-credential helper"
                    ),
                }),
                Ok(secret) => image.pull_secret = Some(secret),
                Err(e) => out.skipped.push(SkippedAnnotation {
                    key,
                    reason: e.to_string(),
                }),
            }
        }
        if let Some((key, v)) = get("force-update") {
            // Go's `strconv.ParseBool`, which Image Updater reads it with
            // (pkg/argocd/annotations.go).
            match v.as_str() {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => image.force_update = true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => image.force_update = false,
                _ => out.skipped.push(SkippedAnnotation {
                    key,
                    reason: format!("{v:?} is not true or false"),
                }),
            }
        }
        image.helm.name = get("helm.image-name").map(|(_, v)| v);
        image.helm.tag = get("helm.image-tag").map(|(_, v)| v);
        image.helm.spec = get("helm.image-spec").map(|(_, v)| v);
        image.kustomize_image_name = get("kustomize.image-name").map(|(_, v)| v);
        // Only under tagpilot's prefix: Image Updater has no such annotation to carry over.
        let min_age_key = alias
            .as_deref()
            .map(|a| format!("{TAGPILOT_PREFIX}{a}.min-age"))
            .filter(|k| annotations.contains_key(k))
            .or_else(|| Some(format!("{TAGPILOT_PREFIX}min-age")))
            .filter(|k| annotations.contains_key(k));
        if let Some(key) = min_age_key {
            used.insert(key.clone());
            let v = annotations[&key].trim();
            if image.strategy == UpdateStrategy::Digest {
                out.skipped.push(SkippedAnnotation {
                    key,
                    reason: "the digest strategy follows one tag and has no newer tag to wait \
                             for; ignored"
                        .to_string(),
                });
            } else {
                match humantime::parse_duration(v) {
                    Ok(d) => image.min_age = Some(d),
                    // Ignoring a wait the user asked for would update too early.
                    Err(e) => image.unreadable.push(UnreadableSetting {
                        key,
                        value: v.to_string(),
                        reason: format!("not a duration (30m, 2h, 1d): {e}"),
                    }),
                }
            }
        }
        if image.strategy != UpdateStrategy::Semver
            && image.strategy != UpdateStrategy::Digest
            && image.constraint.is_some()
        {
            out.skipped.push(SkippedAnnotation {
                key: list_key.clone(),
                reason: format!(
                    "{}: the constraint {:?} applies to semver only and is ignored, as Image Updater does",
                    image.alias,
                    image.constraint.as_deref().unwrap_or_default()
                ),
            });
        }
        if image.strategy == UpdateStrategy::Digest
            && let Some(c) = &image.constraint
            && !crate::image::is_valid_tag(c)
        {
            // The digest strategy follows the tag after `:`; a registry cannot hold this one,
            // so there is nothing to ask it for.
            image.unreadable.push(UnreadableSetting {
                key: list_key.clone(),
                value: c.clone(),
                reason: "not a tag the digest strategy can follow".to_string(),
            });
        }
        if image.strategy == UpdateStrategy::Semver
            && let Some(c) = &image.constraint
            && let Err(e) = Constraint::parse(c)
        {
            let reason = match std::error::Error::source(&e) {
                Some(why) => format!("not a version constraint: {why}"),
                None => "not a version constraint".to_string(),
            };
            image.unreadable.push(UnreadableSetting {
                key: list_key.clone(),
                value: c.clone(),
                reason,
            });
        }
    }

    if let Some((key, v)) = lookup.get("write-back-method") {
        used.insert(key.clone());
        match parse_write_back(v.trim()) {
            Ok(m) => {
                out.write_back = m;
                out.write_back_explicit = true;
            }
            Err(e) => out.skipped.push(SkippedAnnotation {
                key,
                reason: e.to_string(),
            }),
        }
    }
    if let Some((key, v)) = lookup.get("write-back-target") {
        used.insert(key.clone());
        match parse_target(v.trim()) {
            Ok(t) => out.write_back_target = Some(t),
            Err(e) => out.skipped.push(SkippedAnnotation {
                key,
                reason: e.to_string(),
            }),
        }
    }
    if let Some((key, v)) = lookup.get("git-branch") {
        out.git_branch = Some(parse_branch(&key, v.trim()));
        used.insert(key);
    }
    if let Some((key, v)) = lookup.get("git-repository") {
        used.insert(key);
        out.git_repository = Some(v.trim().to_string());
    }

    // Whatever is left under either prefix was not understood.
    let aliases: BTreeSet<&str> = out
        .images
        .iter()
        .filter(|i| i.has_alias)
        .map(|i| i.alias.as_str())
        .collect();
    for key in annotations.keys() {
        let Some(rest) = key
            .strip_prefix(TAGPILOT_PREFIX)
            .or_else(|| key.strip_prefix(IMAGE_UPDATER_PREFIX))
        else {
            continue;
        };
        if used.contains(key) {
            continue;
        }
        let reason = if lookup.shadowed(key) {
            format!("overridden by {TAGPILOT_PREFIX}{rest}, which tagpilot reads first")
        } else if APP_KEYS.contains(&rest) || IMAGE_KEYS.contains(&rest) {
            // An app-wide image key that no image used (no image-list entry).
            "no image in image-list uses it".to_string()
        } else if let Some((alias, k)) = rest.split_once('.')
            && IMAGE_KEYS.contains(&k)
        {
            if aliases.contains(alias) {
                "not used".to_string()
            } else {
                format!("alias {alias:?} is not in image-list")
            }
        } else {
            "unknown annotation; tagpilot does not support it".to_string()
        };
        out.skipped.push(SkippedAnnotation {
            key: key.clone(),
            reason,
        });
    }
    out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    Some(out)
}

/// Finds keys under both prefixes, tagpilot's first.
struct Lookup<'a> {
    annotations: &'a BTreeMap<String, String>,
}

impl<'a> Lookup<'a> {
    fn new(annotations: &'a BTreeMap<String, String>) -> Self {
        Lookup { annotations }
    }

    /// The full key found and its value.
    fn get(&self, key: &str) -> Option<(String, &'a str)> {
        [TAGPILOT_PREFIX, IMAGE_UPDATER_PREFIX]
            .iter()
            .map(|p| format!("{p}{key}"))
            .find_map(|k| self.annotations.get(&k).map(|v| (k, v.as_str())))
    }

    /// Whether `key` is an Image Updater key that tagpilot's prefix overrides.
    fn shadowed(&self, key: &str) -> bool {
        key.strip_prefix(IMAGE_UPDATER_PREFIX).is_some_and(|rest| {
            self.annotations
                .contains_key(&format!("{TAGPILOT_PREFIX}{rest}"))
        })
    }
}

/// `allow-tags`: `regexp:<re>` or `any`, both case-insensitive as Image Updater's `ParseMatch`
/// reads them (registry-scanner/pkg/image/options.go); empty is unset, as there. `Ok(None)`:
/// every tag.
fn parse_allow_tags(v: &str) -> Result<Option<String>, String> {
    if v.is_empty() || v.to_lowercase() == "any" {
        return Ok(None);
    }
    match v.split_once(':') {
        Some((function, re)) if function.to_lowercase() == "regexp" => {
            match regex::Regex::new(re) {
                Ok(_) => Ok(Some(re.to_string())),
                Err(e) => Err(format!(
                    "invalid regexp: {}",
                    e.to_string().lines().last().unwrap_or_default().trim()
                )),
            }
        }
        _ => Err("neither `regexp:<re>` nor `any`".to_string()),
    }
}

/// Splits `image-list` at commas, keeping commas that belong to a constraint
/// (`app=img:>=1.2, <2.0`).
fn split_image_list(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in list.split(',') {
        let t = part.trim();
        if t.is_empty() {
            continue;
        }
        let continues_constraint = t.starts_with(['<', '>', '=', '~', '^', '!', '|'])
            || (t.starts_with(|c: char| c.is_ascii_digit()) && !t.contains(['/', '=', ':']));
        match out.last_mut() {
            Some(prev) if continues_constraint => {
                prev.push_str(", ");
                prev.push_str(t);
            }
            _ => out.push(t.to_string()),
        }
    }
    out
}

/// `[alias=]image[:constraint]` → (alias, image, constraint).
fn parse_image_entry(
    entry: &str,
) -> Result<(Option<String>, String, Option<String>), AnnotationError> {
    let (alias, rest) = match entry.split_once('=') {
        // A `=` inside a constraint (`img:>=1.0`) comes after a `:`.
        Some((a, r)) if !a.contains([':', '/']) => (Some(a.trim().to_string()), r.trim()),
        _ => (None, entry.trim()),
    };
    if alias.as_deref() == Some("") {
        return Err(AnnotationError::EmptyAlias(entry.to_string()));
    }
    // The constraint starts at the first `:` after the last `/` of the name part; a registry
    // port (`host:5000/x`) comes before a `/`.
    let name_end = rest
        .char_indices()
        .find(|&(i, c)| {
            c == ':' && !rest[i..].contains('/') || c.is_whitespace() || "<>~^".contains(c)
        })
        .map(|(i, _)| i)
        .unwrap_or(rest.len());
    let image = rest[..name_end].trim().to_string();
    let constraint = rest[name_end..].trim_start_matches(':').trim().to_string();
    if image.is_empty() {
        return Err(AnnotationError::NoImageName(entry.to_string()));
    }
    Ok((alias, image, (!constraint.is_empty()).then_some(constraint)))
}

fn parse_pull_secret(v: &str) -> Result<PullSecret, AnnotationError> {
    let ns_name = |s: &str| -> Result<(String, String), AnnotationError> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
                Ok((ns.to_string(), name.to_string()))
            }
            _ => Err(AnnotationError::NotNamespaceName(s.to_string())),
        }
    };
    // The source's kind is case-insensitive, as Image Updater reads it (`strings.ToLower` in
    // registry-scanner/pkg/image/credentials.go).
    let kind_len = v.find(':').map_or(0, |i| i + 1);
    let lowered = format!("{}{}", v[..kind_len].to_lowercase(), &v[kind_len..]);
    let v = lowered.as_str();
    if let Some(rest) = v.strip_prefix("pullsecret:") {
        let (namespace, name) = ns_name(rest)?;
        Ok(PullSecret::PullSecret { namespace, name })
    } else if let Some(rest) = v.strip_prefix("secret:") {
        let (secret, field) = rest
            .split_once('#')
            .ok_or_else(|| AnnotationError::SecretWithoutField(v.to_string()))?;
        let (namespace, name) = ns_name(secret)?;
        Ok(PullSecret::Secret {
            namespace,
            name,
            field: field.to_string(),
        })
    } else if let Some(var) = v.strip_prefix("env:") {
        Ok(PullSecret::Env(var.to_string()))
    } else if let Some(script) = v.strip_prefix("ext:") {
        Ok(PullSecret::Ext(script.to_string()))
    } else {
        Err(AnnotationError::PullSecret(v.to_string()))
    }
}

fn parse_write_back(v: &str) -> Result<WriteBackMethod, AnnotationError> {
    match v {
        "argocd" => Ok(WriteBackMethod::Argocd),
        "git" => Ok(WriteBackMethod::Git(GitCredentials::Configured)),
        "git:repocreds" => Ok(WriteBackMethod::Git(GitCredentials::RepoCreds)),
        _ => match v
            .strip_prefix("git:secret:")
            .and_then(|s| s.split_once('/'))
        {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
                Ok(WriteBackMethod::Git(GitCredentials::Secret {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                }))
            }
            _ => Err(AnnotationError::WriteBackMethod(v.to_string())),
        },
    }
}

fn parse_target(v: &str) -> Result<WriteBackTarget, AnnotationError> {
    let (kind, arg) = match v.split_once(':') {
        Some((k, a)) => (k, Some(a.trim().to_string()).filter(|a| !a.is_empty())),
        None => (v, None),
    };
    match kind {
        "kustomization" => Ok(WriteBackTarget::Kustomization(arg)),
        "helmvalues" => Ok(WriteBackTarget::HelmValues(arg)),
        _ => Err(AnnotationError::WriteBackTarget(v.to_string())),
    }
}

fn parse_branch(key: &str, v: &str) -> GitBranch {
    let opt = |s: &str| Some(s.trim().to_string()).filter(|s| !s.is_empty());
    match v.split_once(':') {
        Some((base, target)) => GitBranch {
            key: key.to_string(),
            base: opt(base),
            target: opt(target),
        },
        None => GitBranch {
            key: key.to_string(),
            base: opt(v),
            target: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn iu(key: &str) -> String {
        format!("{IMAGE_UPDATER_PREFIX}{key}")
    }

    #[test]
    fn without_image_list_the_app_is_not_managed() {
        assert!(parse(&annotations(&[("team", "payments")])).is_none());
    }

    #[test]
    fn image_list_with_aliases_constraints_and_registry_ports() {
        let a = parse(&annotations(&[(
            &iu("image-list"),
            "api=127.0.0.1:5000/shop/api:~1.2, nginx:1.x, web=ghcr.io/o/web:>=1.2, <2.0, plain",
        )]))
        .unwrap();
        let got: Vec<(&str, &str, Option<&str>)> = a
            .images
            .iter()
            .map(|i| (i.alias.as_str(), i.image.as_str(), i.constraint.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("api", "127.0.0.1:5000/shop/api", Some("~1.2")),
                ("nginx", "nginx", Some("1.x")),
                ("web", "ghcr.io/o/web", Some(">=1.2, <2.0")),
                ("plain", "plain", None),
            ]
        );
        assert!(a.skipped.is_empty(), "{:?}", a.skipped);
    }

    #[test]
    fn per_alias_keys_beat_app_wide_keys_and_tagpilot_beats_image_updater() {
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api, web=r.example/web"),
            (&iu("update-strategy"), "latest"),
            (&iu("api.update-strategy"), "name"),
            ("tagpilot.dev/api.update-strategy", "digest"),
            (&iu("web.allow-tags"), "regexp:^v\\d+$"),
            (&iu("ignore-tags"), "*-rc*, dev"),
            (&iu("web.platforms"), "linux/amd64,linux/arm64/v8"),
            (&iu("web.force-update"), "true"),
            (&iu("web.helm.image-name"), "web.repo"),
            (&iu("web.helm.image-tag"), "web.tag"),
            (&iu("api.kustomize.image-name"), "api"),
        ]))
        .unwrap();
        let (api, web) = (&a.images[0], &a.images[1]);
        assert_eq!(api.strategy, UpdateStrategy::Digest);
        assert_eq!(web.strategy, UpdateStrategy::NewestBuild);
        assert_eq!(web.allow_tags.as_deref(), Some("^v\\d+$"));
        assert_eq!(api.ignore_tags, vec!["*-rc*", "dev"]);
        assert_eq!(web.platforms.len(), 2);
        assert!(web.force_update && !api.force_update);
        assert_eq!(web.helm.name.as_deref(), Some("web.repo"));
        assert_eq!(api.kustomize_image_name.as_deref(), Some("api"));
        let keys: Vec<&str> = a.skipped.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, vec![iu("api.update-strategy")], "{:?}", a.skipped);
        assert!(a.skipped[0].reason.contains("overridden"));
    }

    #[test]
    fn min_age_is_read_per_alias_or_app_wide_under_tagpilots_prefix_only() {
        let a = parse(&annotations(&[
            (
                &iu("image-list"),
                "api=r.example/api, web=r.example/web, db=r.example/db",
            ),
            ("tagpilot.dev/min-age", "1h"),
            ("tagpilot.dev/api.min-age", "30m"),
            ("tagpilot.dev/db.update-strategy", "digest"),
            (&iu("web.min-age"), "5m"),
        ]))
        .unwrap();
        let minutes = |i: usize| a.images[i].min_age.map(|d| d.as_secs() / 60);
        assert_eq!(minutes(0), Some(30));
        assert_eq!(minutes(1), Some(60), "the app-wide value");
        assert_eq!(minutes(2), None, "digest has no newer tag to wait for");
        let skipped: Vec<(&str, &str)> = a
            .skipped
            .iter()
            .map(|s| (s.key.as_str(), s.reason.as_str()))
            .collect();
        assert!(
            skipped
                .iter()
                .any(|(k, r)| *k == iu("web.min-age") && r.contains("unknown annotation")),
            "{skipped:?}"
        );

        let bad = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api"),
            ("tagpilot.dev/api.min-age", "soon"),
        ]))
        .unwrap();
        assert!(bad.skipped.is_empty(), "{:?}", bad.skipped);
        assert!(bad.images[0].is_blocked());
        assert_eq!(
            bad.images[0].unreadable[0].to_string(),
            "tagpilot.dev/api.min-age `soon` cannot be read: not a duration (30m, 2h, 1d): \
             expected number at 0"
        );
    }

    #[test]
    fn every_pull_secret_form_parses_and_ext_is_reported() {
        assert_eq!(
            parse_pull_secret("pullsecret:argocd/regcred"),
            Ok(PullSecret::PullSecret {
                namespace: "argocd".into(),
                name: "regcred".into()
            })
        );
        assert_eq!(
            parse_pull_secret("secret:ns/creds#token"),
            Ok(PullSecret::Secret {
                namespace: "ns".into(),
                name: "creds".into(),
                field: "token".into()
            })
        );
        assert_eq!(
            parse_pull_secret("env:REGISTRY_AUTH"),
            Ok(PullSecret::Env("REGISTRY_AUTH".into()))
        );
        assert_eq!(
            parse_pull_secret("ext:/bin/get-creds"),
            Ok(PullSecret::Ext("/bin/get-creds".into()))
        );
        assert!(parse_pull_secret("secret:ns/creds").is_err());
        let a = parse(&annotations(&[
            (&iu("image-list"), "r.example/api"),
            (&iu("pull-secret"), "ext:/bin/get-creds"),
        ]))
        .unwrap();
        assert_eq!(a.skipped.len(), 1);
        assert!(a.skipped[0].reason.contains("no credential scripts"));
    }

    #[test]
    fn write_back_methods_targets_and_branches() {
        assert_eq!(parse_write_back("argocd"), Ok(WriteBackMethod::Argocd));
        assert_eq!(
            parse_write_back("git:repocreds"),
            Ok(WriteBackMethod::Git(GitCredentials::RepoCreds))
        );
        assert_eq!(
            parse_write_back("git:secret:argocd/git-creds"),
            Ok(WriteBackMethod::Git(GitCredentials::Secret {
                namespace: "argocd".into(),
                name: "git-creds".into()
            }))
        );
        assert!(parse_write_back("git:secret:nope").is_err());
        assert_eq!(
            parse_target("kustomization:../base"),
            Ok(WriteBackTarget::Kustomization(Some("../base".into())))
        );
        assert_eq!(
            parse_target("helmvalues"),
            Ok(WriteBackTarget::HelmValues(None))
        );
        assert_eq!(
            parse_branch("k", "main:image-updater-{{.SHA256}}"),
            GitBranch {
                key: "k".into(),
                base: Some("main".into()),
                target: Some("image-updater-{{.SHA256}}".into())
            }
        );
        assert_eq!(
            parse_branch("k", ":updates"),
            GitBranch {
                key: "k".into(),
                base: None,
                target: Some("updates".into())
            }
        );
    }

    #[test]
    fn unknown_and_orphan_keys_are_reported_by_name() {
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api"),
            (&iu("api.update-strategy"), "semver"),
            (&iu("web.update-strategy"), "semver"),
            (&iu("commit-message-template"), "x"),
            ("tagpilot.dev/api.allow-tags", "nonsense"),
        ]))
        .unwrap();
        let got: Vec<(String, String)> = a
            .skipped
            .iter()
            .map(|s| (s.key.clone(), s.reason.clone()))
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].0.ends_with("commit-message-template") && got[0].1.contains("unknown"));
        assert!(
            got[1].0.ends_with("web.update-strategy") && got[1].1.contains("not in image-list")
        );
        // Not skipped: unreadable, which blocks the image.
        assert_eq!(
            a.images[0].unreadable,
            vec![UnreadableSetting {
                key: "tagpilot.dev/api.allow-tags".into(),
                value: "nonsense".into(),
                reason: "neither `regexp:<re>` nor `any`".into(),
            }]
        );
        assert_eq!(a.images[0].allow_tags, None);
    }

    #[test]
    fn an_invalid_allow_tags_regexp_is_shown_as_written() {
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api"),
            (&iu("api.allow-tags"), "regexp:^v\\d+($"),
        ]))
        .unwrap();
        assert!(a.skipped.is_empty(), "{:?}", a.skipped);
        let problem = a.images[0].unreadable[0].to_string();
        assert_eq!(
            problem,
            "argocd-image-updater.argoproj.io/api.allow-tags `regexp:^v\\d+($` cannot be read: \
             invalid regexp: error: unclosed group"
        );
    }

    /// Issue 17, "Filters fail closed": a filter, range or strategy that cannot be read blocks
    /// the image. Image Updater itself reads an unreadable `allow-tags` as "match nothing"
    /// (`MatchFuncNone` in registry-scanner/pkg/image/options.go, and its
    /// `Test_ContainerImage_ParseMatch`: `regexp:[aA-zZ` matches no tag) and an unparsable
    /// platform as one no image has ("so we don't end up updating to the wrong architecture"),
    /// so holding is its result too; for an unknown strategy it falls back to semver, which
    /// tagpilot does not guess at.
    #[test]
    fn every_unreadable_filter_range_or_strategy_blocks_its_image() {
        let cases: &[(&str, &str, &str)] = &[
            ("api.allow-tags", "regexp:^v(", "invalid regexp"),
            (
                "api.allow-tags",
                "regex:^v",
                "neither `regexp:<re>` nor `any`",
            ),
            ("api.allow-tags", "^v1", "neither `regexp:<re>` nor `any`"),
            ("api.ignore-tags", "dev, [z-a]", "invalid glob \"[z-a]\""),
            ("api.platforms", "linux", "linux"),
            ("api.update-strategy", "newest", "not an update strategy"),
            ("update-strategy", "semverr", "not an update strategy"),
        ];
        for (key, value, why) in cases {
            let a = parse(&annotations(&[
                (&iu("image-list"), "api=r.example/api"),
                (&iu(key), value),
            ]))
            .unwrap();
            let image = &a.images[0];
            assert!(image.is_blocked(), "{key}: {value}");
            let u = &image.unreadable[0];
            assert_eq!(
                (u.key.as_str(), u.value.as_str()),
                (iu(key).as_str(), *value)
            );
            assert!(u.reason.contains(why), "{key}: {}", u.reason);
            assert!(a.skipped.is_empty(), "{key}: {:?}", a.skipped);
        }
        // The digest strategy's tag, which must be one a registry can hold.
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api:>=1.0"),
            (&iu("update-strategy"), "digest"),
        ]))
        .unwrap();
        let u = &a.images[0].unreadable[0];
        assert_eq!(
            (u.value.as_str(), u.reason.as_str()),
            (">=1.0", "not a tag the digest strategy can follow")
        );
        // A constraint in image-list that does not read.
        let a = parse(&annotations(&[(
            &iu("image-list"),
            "api=r.example/api:~>1.x.y",
        )]))
        .unwrap();
        let u = &a.images[0].unreadable[0];
        assert_eq!(
            (u.key.as_str(), u.value.as_str()),
            (iu("image-list").as_str(), "~>1.x.y")
        );
        // An invalid glob next to valid ones still blocks: dropping only it would widen.
        let a = parse(&annotations(&[
            (&iu("image-list"), "api=r.example/api"),
            (&iu("ignore-tags"), "*-rc*, [z-a]"),
        ]))
        .unwrap();
        assert!(a.images[0].is_blocked());
    }

    /// Issue 17, "A peer's semantics": Image Updater lower-cases the strategy name
    /// (`ParseUpdateStrategy`), `any` and the `regexp` function name (`ParseMatch`, both in
    /// registry-scanner/pkg/image/options.go; `Test_ContainerImage_ParseMatch` reads `ANY` and
    /// `RegExp:[aA-zZ]`), and the pull-secret kind (`strings.ToLower(tokens[0])` in
    /// registry-scanner/pkg/image/credentials.go); `force-update` is Go's `strconv.ParseBool`
    /// (pkg/argocd/annotations.go). `write-back-method` and `write-back-target` are compared
    /// as written there (`method == "git"`, `strings.HasPrefix(target, "kustomization")`).
    #[test]
    fn values_are_case_insensitive_where_image_updater_reads_them_so() {
        let a = parse(&annotations(&[
            (
                &iu("image-list"),
                "a=r.example/a, b=r.example/b, c=r.example/c, d=r.example/d",
            ),
            (&iu("a.update-strategy"), "SemVer"),
            (&iu("b.update-strategy"), "Newest-Build"),
            (&iu("c.update-strategy"), "LATEST"),
            (&iu("d.update-strategy"), "Digest"),
            (&iu("a.allow-tags"), "ANY"),
            (&iu("b.allow-tags"), "RegExp:^v\\d+$"),
            (&iu("c.pull-secret"), "PullSecret:argocd/regcred"),
            (&iu("d.pull-secret"), "ENV:REGISTRY_AUTH"),
            (&iu("a.force-update"), "TRUE"),
            (&iu("b.force-update"), "t"),
            (&iu("c.force-update"), "tRUE"),
        ]))
        .unwrap();
        let strategies: Vec<UpdateStrategy> = a.images.iter().map(|i| i.strategy).collect();
        use UpdateStrategy::*;
        assert_eq!(strategies, vec![Semver, NewestBuild, NewestBuild, Digest]);
        assert!(a.images.iter().all(|i| !i.is_blocked()), "{:?}", a.images);
        assert_eq!(a.images[0].allow_tags, None);
        assert_eq!(a.images[1].allow_tags.as_deref(), Some("^v\\d+$"));
        assert_eq!(
            a.images[2].pull_secret,
            Some(PullSecret::PullSecret {
                namespace: "argocd".into(),
                name: "regcred".into()
            })
        );
        assert_eq!(
            a.images[3].pull_secret,
            Some(PullSecret::Env("REGISTRY_AUTH".into()))
        );
        assert!(a.images[0].force_update && a.images[1].force_update);
        // ParseBool takes `TRUE`, `True`, `true`, `t`, not `tRUE`.
        let keys: Vec<&str> = a.skipped.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(keys, vec![iu("c.force-update")]);
        // Case-sensitive upstream, so here too.
        assert!(parse_write_back("Git").is_err());
        assert!(parse_target("Kustomization").is_err());
    }
}
