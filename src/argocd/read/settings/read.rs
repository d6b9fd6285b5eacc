//! The one reader: a [`SettingsInput`], however it was written, checked value by value into
//! [`AppSettings`], in phases: each image's settings, its min-age, the constraint for its
//! strategy, then the app-wide settings.

use crate::image::{Platform, Repository};
use crate::select::Constraint;

use super::{
    AppSettings, GitBranch, GitCredentials, HelmNames, ImageSettings, PullRequestSettings,
    PullSecret, SettingError, SkippedAnnotation, UnreadableSetting, UpdateStrategy,
    WriteBackMethod, WriteBackTarget,
};

/// One setting as given, and how problems name it: the annotation key with its prefix, or
/// `ImageUpdater <namespace>/<name>: <field>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given<T> {
    pub key: String,
    pub value: T,
}

impl<T> Given<T> {
    pub fn new(key: impl Into<String>, value: T) -> Self {
        Given {
            key: key.into(),
            value,
        }
    }
}

/// A list setting (`ignore-tags`, `platforms`): its items, and the whole as the user wrote it,
/// which problems quote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    pub items: Vec<String>,
    pub written: String,
}

/// One image's settings as given, before they are checked.
#[derive(Debug, Clone)]
pub struct ImageInput {
    /// The alias, when one was given (an `image-list` entry may have none).
    pub alias: Option<String>,
    /// The image name as written, without constraint; `key` names where it was given
    /// (`image-list`, `imageName`), and problems of its constraint are named by it too.
    pub image: Given<String>,
    pub repository: Repository,
    /// The part after `:`: a version constraint for `semver`, the followed tag for `digest`.
    pub constraint: Option<String>,
    pub strategy: Option<Given<String>>,
    pub allow_tags: Option<Given<String>>,
    pub ignore_tags: Option<Given<Listed>>,
    pub platforms: Option<Given<Listed>>,
    pub pull_secret: Option<Given<String>>,
    pub force_update: bool,
    pub helm: HelmNames,
    pub kustomize_image_name: Option<String>,
    pub min_age: Option<Given<String>>,
}

impl ImageInput {
    /// An image with no settings of its own yet.
    pub fn new(
        alias: Option<String>,
        image: Given<String>,
        repository: Repository,
        constraint: Option<String>,
    ) -> Self {
        ImageInput {
            alias,
            image,
            repository,
            constraint,
            strategy: None,
            allow_tags: None,
            ignore_tags: None,
            platforms: None,
            pull_secret: None,
            force_update: false,
            helm: HelmNames::default(),
            kustomize_image_name: None,
            min_age: None,
        }
    }
}

/// Everything one Application's settings say, as given, before they are checked. Values are
/// trimmed by whoever reads them from their own form.
#[derive(Debug, Clone, Default)]
pub struct SettingsInput {
    pub images: Vec<ImageInput>,
    pub write_back: Option<Given<String>>,
    /// The namespace of a `git:secret:<name>` that names none (an `ImageUpdater` resource's
    /// own); `None`: the namespace must be named (annotations).
    pub secret_namespace: Option<String>,
    pub write_back_target: Option<Given<String>>,
    pub git_branch: Option<Given<String>>,
    pub git_repository: Option<String>,
    pub pull_request: Option<PullRequestSettings>,
    /// `tagpilot.dev/hold` and `tagpilot.dev/release-hold` ([`super::holds`]).
    pub hold: Option<Given<String>>,
    pub release_hold: Option<Given<String>>,
    /// What reading the settings' own form already could not honour.
    pub skipped: Vec<SkippedAnnotation>,
}

/// Checks every value of `input`. A filter, range or strategy that cannot be read blocks its
/// image; anything else not honoured is in `skipped`, sorted by key.
pub fn read(input: SettingsInput) -> AppSettings {
    let mut out = AppSettings {
        skipped: input.skipped,
        pull_request: input.pull_request,
        git_repository: input.git_repository,
        ..AppSettings::default()
    };
    // Thousands of Applications each hold their settings: no spare capacity.
    out.images.reserve_exact(input.images.len());
    for given in input.images {
        let mut image = image_settings(&given, &mut out.skipped);
        min_age(&mut image, given.min_age, &mut out.skipped);
        check_constraint(&mut image, &given.image.key, &mut out.skipped);
        out.images.push(image);
    }
    app_settings(
        input.write_back,
        input.secret_namespace.as_deref(),
        input.write_back_target,
        input.git_branch,
        &mut out,
    );
    super::holds::read(input.hold, input.release_hold, &mut out);
    out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    out
}

/// The repository `image` names, or why the image is left out (named by `key`).
pub fn repository(image: &str, key: &str) -> Result<Repository, SkippedAnnotation> {
    Repository::parse(image).map_err(|_| SkippedAnnotation {
        key: key.to_string(),
        reason: format!("{image:?} is not an image name; entry ignored"),
    })
}

/// The image's own settings: strategy, filters, platforms, pull secret and write targets.
fn image_settings(given: &ImageInput, skipped: &mut Vec<SkippedAnnotation>) -> ImageSettings {
    let mut image = ImageSettings {
        alias: given
            .alias
            .clone()
            .unwrap_or_else(|| given.image.value.clone()),
        has_alias: given.alias.is_some(),
        image: given.image.value.clone(),
        repository: given.repository.clone(),
        constraint: given.constraint.clone(),
        strategy: UpdateStrategy::default(),
        allow_tags: None,
        ignore_tags: Vec::new(),
        platforms: Vec::new(),
        pull_secret: None,
        force_update: given.force_update,
        helm: given.helm.clone(),
        kustomize_image_name: given.kustomize_image_name.clone(),
        min_age: None,
        cosign_key: None,
        unreadable: Vec::new(),
    };
    // Image Updater's own fallback for an unknown strategy is semver, and for an unreadable
    // filter "match nothing"; tagpilot holds in both cases, and says so.
    let mut unreadable = |key: &str, value: &str, reason: String| {
        image.unreadable.push(UnreadableSetting {
            key: key.to_string(),
            value: value.to_string(),
            reason,
        })
    };
    if let Some(Given { key, value }) = &given.strategy {
        match UpdateStrategy::parse(value) {
            Some(s) => image.strategy = s,
            None => unreadable(
                key,
                value,
                "not an update strategy (semver, newest-build, latest, alphabetical, name, \
                 digest)"
                    .to_string(),
            ),
        }
    }
    if let Some(Given { key, value }) = &given.allow_tags {
        match parse_allow_tags(value) {
            Ok(re) => image.allow_tags = re,
            Err(reason) => unreadable(key, value, reason),
        }
    }
    if let Some(Given { key, value }) = &given.ignore_tags {
        for glob in &value.items {
            match globset::Glob::new(glob) {
                Ok(_) => image.ignore_tags.push(glob.clone()),
                Err(e) => unreadable(
                    key,
                    &value.written,
                    format!("invalid glob {glob:?}: {}", e.kind()),
                ),
            }
        }
    }
    if let Some(Given { key, value }) = &given.platforms {
        for p in &value.items {
            match p.parse::<Platform>() {
                Ok(p) => image.platforms.push(p),
                Err(e) => unreadable(key, &value.written, e.to_string()),
            }
        }
    }
    if let Some(Given { key, value }) = &given.pull_secret {
        match parse_pull_secret(value) {
            Ok(PullSecret::Ext(script)) => skipped.push(SkippedAnnotation {
                key: key.clone(),
                reason: format!(
                    "ext:{script}: tagpilot runs no credential scripts; configure the registry's credentials in tagpilot.yaml or a docker-credential helper"
                ),
            }),
            Ok(secret) => image.pull_secret = Some(secret),
            Err(e) => skipped.push(SkippedAnnotation {
                key: key.clone(),
                reason: e.to_string(),
            }),
        }
    }
    image
}

/// `min-age`: the policy's `minAge`; the digest strategy has no newer tag to wait for.
fn min_age(
    image: &mut ImageSettings,
    given: Option<Given<String>>,
    skipped: &mut Vec<SkippedAnnotation>,
) {
    let Some(Given { key, value }) = given else {
        return;
    };
    if image.strategy == UpdateStrategy::Digest {
        skipped.push(SkippedAnnotation {
            key,
            reason: "the digest strategy follows one tag and has no newer tag to wait for; \
                     ignored"
                .to_string(),
        });
        return;
    }
    match humantime::parse_duration(&value) {
        Ok(d) => image.min_age = Some(d),
        // Ignoring a wait the user asked for would update too early.
        Err(e) => image.unreadable.push(UnreadableSetting {
            key,
            reason: format!("not a duration (30m, 2h, 1d): {e}"),
            value,
        }),
    }
}

/// What the image's constraint (given under `key`) means for its strategy: ignored but for
/// semver and digest, unreadable when it is not a constraint or tag.
fn check_constraint(image: &mut ImageSettings, key: &str, skipped: &mut Vec<SkippedAnnotation>) {
    if image.strategy != UpdateStrategy::Semver
        && image.strategy != UpdateStrategy::Digest
        && image.constraint.is_some()
    {
        skipped.push(SkippedAnnotation {
            key: key.to_string(),
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
        // The digest strategy follows the tag after `:`; a registry cannot hold this one, so
        // there is nothing to ask it for.
        image.unreadable.push(UnreadableSetting {
            key: key.to_string(),
            value: c.clone(),
            reason: "not a tag the digest strategy can follow".to_string(),
        });
    }
    if image.strategy == UpdateStrategy::Semver
        && let Some(c) = &image.constraint
        && let Err(e) = Constraint::parse(c)
    {
        let reason = match std::error::Error::source(&e) {
            Some(why) => format!(
                "not a version constraint: {}",
                crate::error_chain::chain(why)
            ),
            None => "not a version constraint".to_string(),
        };
        image.unreadable.push(UnreadableSetting {
            key: key.to_string(),
            value: c.clone(),
            reason,
        });
    }
}

/// The app-wide settings: how and where the changes are written.
fn app_settings(
    write_back: Option<Given<String>>,
    secret_namespace: Option<&str>,
    target: Option<Given<String>>,
    branch: Option<Given<String>>,
    out: &mut AppSettings,
) {
    // Where the changes go is never guessed: a method or target that cannot be read holds the
    // Application (Image Updater falls back to `argocd` and to `.argocd-source-<app>.yaml`).
    let unreadable = |key: String, value: String, e: SettingError| UnreadableSetting {
        reason: e.to_string(),
        key,
        value,
    };
    if let Some(Given { key, value }) = write_back {
        match parse_write_back(&value, secret_namespace) {
            Ok(m) => {
                out.write_back = m;
                out.write_back_explicit = true;
            }
            Err(e) => out.unreadable.push(unreadable(key, value, e)),
        }
    }
    if let Some(Given { key, value }) = target {
        match parse_target(&value) {
            Ok(t) => out.write_back_target = Some(t),
            Err(e) => out.unreadable.push(unreadable(key, value, e)),
        }
    }
    if let Some(Given { key, value }) = branch {
        out.git_branch = Some(parse_branch(&key, &value));
    }
}

/// `image[:constraint]` → (image, constraint). The constraint starts at the first `:` after the
/// last `/` of the name part; a registry port (`host:5000/x`) comes before a `/`.
pub(in crate::argocd) fn image_and_constraint(text: &str) -> (String, Option<String>) {
    let name_end = text
        .char_indices()
        .find(|&(i, c)| {
            c == ':' && !text[i..].contains('/') || c.is_whitespace() || "<>~^".contains(c)
        })
        .map(|(i, _)| i)
        .unwrap_or(text.len());
    let image = text[..name_end].trim().to_string();
    let constraint = text[name_end..].trim_start_matches(':').trim().to_string();
    (image, (!constraint.is_empty()).then_some(constraint))
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

pub(in crate::argocd) fn parse_pull_secret(v: &str) -> Result<PullSecret, SettingError> {
    let ns_name = |s: &str| -> Result<(String, String), SettingError> {
        match s.split_once('/') {
            Some((ns, name)) if !ns.is_empty() && !name.is_empty() => {
                Ok((ns.to_string(), name.to_string()))
            }
            _ => Err(SettingError::NotNamespaceName(s.to_string())),
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
            .ok_or_else(|| SettingError::SecretWithoutField(v.to_string()))?;
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
        Err(SettingError::PullSecret(v.to_string()))
    }
}

/// `write-back-method`; a `git:secret:<name>` without a namespace is in `secret_namespace`,
/// when there is one.
pub(in crate::argocd) fn parse_write_back(
    v: &str,
    secret_namespace: Option<&str>,
) -> Result<WriteBackMethod, SettingError> {
    let secret = |namespace: &str, name: &str| {
        WriteBackMethod::Git(GitCredentials::Secret {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    };
    match v {
        "argocd" => Ok(WriteBackMethod::Argocd),
        "git" => Ok(WriteBackMethod::Git(GitCredentials::Configured)),
        "git:repocreds" => Ok(WriteBackMethod::Git(GitCredentials::RepoCreds)),
        _ => match v.strip_prefix("git:secret:") {
            Some(s) => match (s.split_once('/'), secret_namespace) {
                (Some((ns, name)), _) if !ns.is_empty() && !name.is_empty() => Ok(secret(ns, name)),
                (None, Some(ns)) if !s.is_empty() => Ok(secret(ns, s)),
                _ => Err(SettingError::WriteBackMethod(v.to_string())),
            },
            None => Err(SettingError::WriteBackMethod(v.to_string())),
        },
    }
}

pub(in crate::argocd) fn parse_target(v: &str) -> Result<WriteBackTarget, SettingError> {
    let (kind, arg) = match v.split_once(':') {
        Some((k, a)) => (k, Some(a.trim().to_string()).filter(|a| !a.is_empty())),
        None => (v, None),
    };
    match kind {
        "kustomization" => Ok(WriteBackTarget::Kustomization(arg)),
        "helmvalues" => Ok(WriteBackTarget::HelmValues(arg)),
        _ => Err(SettingError::WriteBackTarget(v.to_string())),
    }
}

pub(in crate::argocd) fn parse_branch(key: &str, v: &str) -> GitBranch {
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
