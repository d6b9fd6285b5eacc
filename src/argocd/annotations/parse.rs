//! Reading one Application's annotations, in phases: the `image-list`, each image's settings,
//! the app-wide ones, and a report of every key left over.

use std::collections::{BTreeMap, BTreeSet};

use crate::image::{Platform, Repository};
use crate::select::Constraint;

use super::{
    AnnotatedImage, AnnotationError, AppAnnotations, GitBranch, GitCredentials, HelmNames,
    IMAGE_UPDATER_PREFIX, PullSecret, SkippedAnnotation, TAGPILOT_PREFIX, UnreadableSetting,
    UpdateStrategy, WriteBackMethod, WriteBackTarget,
};

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
    let mut reader = Reader {
        annotations,
        lookup,
        used: BTreeSet::from([list_key.clone()]),
        list_key,
    };
    let mut out = AppAnnotations::default();
    reader.image_list(list, &mut out);
    // Thousands of Applications each hold their parsed annotations: no spare capacity.
    out.images.shrink_to_fit();
    let mut images = std::mem::take(&mut out.images);
    for image in &mut images {
        reader.image_settings(image, &mut out.skipped);
        reader.min_age(image, &mut out.skipped);
        reader.check_constraint(image, &mut out.skipped);
    }
    out.images = images;
    reader.app_settings(&mut out);
    reader.report_unused(&mut out);
    out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    Some(out)
}

/// What reading one Application's annotations carries from phase to phase.
struct Reader<'a> {
    annotations: &'a BTreeMap<String, String>,
    lookup: Lookup<'a>,
    /// The keys read so far: whatever else is under either prefix is reported.
    used: BTreeSet<String>,
    /// `image-list` under the prefix it was found with.
    list_key: String,
}

impl Reader<'_> {
    /// One image per `image-list` entry; an entry that cannot be read is reported.
    fn image_list(&self, list: &str, out: &mut AppAnnotations) {
        let list_key = &self.list_key;
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
    }

    /// The image's `<alias>.<key>` settings, each falling back to the app-wide `<key>`.
    fn image_settings(&mut self, image: &mut AnnotatedImage, skipped: &mut Vec<SkippedAnnotation>) {
        let alias = image.has_alias.then(|| image.alias.clone());
        let (lookup, used) = (&self.lookup, &mut self.used);
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
                Ok(PullSecret::Ext(script)) => skipped.push(SkippedAnnotation {
                    key,
                    reason: format!(
                        "ext:{script}: tagpilot runs no credential scripts; configure the registry's credentials in tagpilot.yaml or a docker-credential helper"
                    ),
                }),
                Ok(secret) => image.pull_secret = Some(secret),
                Err(e) => skipped.push(SkippedAnnotation {
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
                _ => skipped.push(SkippedAnnotation {
                    key,
                    reason: format!("{v:?} is not true or false"),
                }),
            }
        }
        image.helm.name = get("helm.image-name").map(|(_, v)| v);
        image.helm.tag = get("helm.image-tag").map(|(_, v)| v);
        image.helm.spec = get("helm.image-spec").map(|(_, v)| v);
        image.kustomize_image_name = get("kustomize.image-name").map(|(_, v)| v);
    }

    /// `tagpilot.dev/[<alias>.]min-age`, only under tagpilot's prefix: Image Updater has no
    /// such annotation to carry over.
    fn min_age(&mut self, image: &mut AnnotatedImage, skipped: &mut Vec<SkippedAnnotation>) {
        let annotations = self.annotations;
        let alias = image.has_alias.then(|| image.alias.clone());
        let min_age_key = alias
            .as_deref()
            .map(|a| format!("{TAGPILOT_PREFIX}{a}.min-age"))
            .filter(|k| annotations.contains_key(k))
            .or_else(|| Some(format!("{TAGPILOT_PREFIX}min-age")))
            .filter(|k| annotations.contains_key(k));
        if let Some(key) = min_age_key {
            self.used.insert(key.clone());
            let v = annotations[&key].trim();
            if image.strategy == UpdateStrategy::Digest {
                skipped.push(SkippedAnnotation {
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
    }

    /// What the image's `image-list` constraint means for its strategy: ignored but for semver
    /// and digest, unreadable when it is not a constraint or tag.
    fn check_constraint(&self, image: &mut AnnotatedImage, skipped: &mut Vec<SkippedAnnotation>) {
        let list_key = &self.list_key;
        if image.strategy != UpdateStrategy::Semver
            && image.strategy != UpdateStrategy::Digest
            && image.constraint.is_some()
        {
            skipped.push(SkippedAnnotation {
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
                Some(why) => format!(
                    "not a version constraint: {}",
                    crate::error_chain::chain(why)
                ),
                None => "not a version constraint".to_string(),
            };
            image.unreadable.push(UnreadableSetting {
                key: list_key.clone(),
                value: c.clone(),
                reason,
            });
        }
    }

    /// The app-wide settings: how and where the changes are written.
    fn app_settings(&mut self, out: &mut AppAnnotations) {
        let (lookup, used) = (&self.lookup, &mut self.used);
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
    }

    /// Whatever is left under either prefix was not understood: each key is reported with
    /// why.
    fn report_unused(&self, out: &mut AppAnnotations) {
        let (annotations, lookup, used) = (self.annotations, &self.lookup, &self.used);
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
    }
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

pub(super) fn parse_pull_secret(v: &str) -> Result<PullSecret, AnnotationError> {
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

pub(super) fn parse_write_back(v: &str) -> Result<WriteBackMethod, AnnotationError> {
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

pub(super) fn parse_target(v: &str) -> Result<WriteBackTarget, AnnotationError> {
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

pub(super) fn parse_branch(key: &str, v: &str) -> GitBranch {
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
