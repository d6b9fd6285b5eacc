//! Reading one Application's annotations into the settings' typed input, in phases: the
//! `image-list`, each image's settings, the app-wide ones; then the one reader checks them
//! ([`settings::read`]), and every key left over is reported.

use std::collections::{BTreeMap, BTreeSet};

use super::super::settings::{
    self, AppSettings, Given, HelmNames, ImageInput, Listed, SettingError, SettingsInput,
    SkippedAnnotation, UnknownAnnotation, image_and_constraint,
};
use super::{IMAGE_UPDATER_PREFIX, TAGPILOT_PREFIX};

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

/// tagpilot's own keys that hold or release a tag ([`crate::argocd::read::settings::HoldRequest`]).
const HOLD_KEYS: [&str; 2] = ["hold", "release-hold"];

/// Reads the Image Updater annotations of one Application. Returns `None` when it has no
/// `image-list` under either prefix (the app is not managed).
pub fn parse(annotations: &BTreeMap<String, String>) -> Option<AppSettings> {
    let lookup = Lookup::new(annotations);
    let (list_key, list) = lookup.get("image-list")?;
    let mut reader = Reader {
        annotations,
        lookup,
        used: BTreeSet::from([list_key.clone()]),
        list_key,
    };
    let mut input = SettingsInput::default();
    reader.image_list(list, &mut input);
    for image in &mut input.images {
        reader.image_settings(image, &mut input.skipped);
        reader.min_age(image);
    }
    reader.app_settings(&mut input);
    let mut out = settings::read(input);
    reader.report_unused(&mut out);
    out.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    Some(out)
}

/// The keys under either prefix of an Application that has no `image-list`: nothing reads them,
/// since without it the Application is not managed (a typo such as `image-lst` leaves it alone
/// silently otherwise). Empty when it has an `image-list`.
pub fn unread(annotations: &BTreeMap<String, String>) -> Vec<UnknownAnnotation> {
    if Lookup::new(annotations).get("image-list").is_some() {
        return Vec::new();
    }
    let none = BTreeSet::new();
    annotations
        .keys()
        .filter_map(|key| {
            let (prefix, rest) = match key.strip_prefix(TAGPILOT_PREFIX) {
                Some(rest) => (TAGPILOT_PREFIX, rest),
                None => (
                    IMAGE_UPDATER_PREFIX,
                    key.strip_prefix(IMAGE_UPDATER_PREFIX)?,
                ),
            };
            let nearest = nearest_key(rest, &none, prefix == TAGPILOT_PREFIX)
                .filter(|k| k != rest)
                .map(|k| format!("{prefix}{k}"));
            Some(UnknownAnnotation {
                key: key.clone(),
                nearest,
                line: None,
            })
        })
        .collect()
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
    fn image_list(&self, list: &str, input: &mut SettingsInput) {
        let list_key = &self.list_key;
        for entry in split_image_list(list) {
            let read = parse_image_entry(&entry).map_err(|e| SkippedAnnotation {
                key: list_key.clone(),
                reason: e.to_string(),
            });
            let image = read.and_then(|(alias, image, constraint)| {
                let repository = settings::repository(&image, list_key)?;
                let image = Given::new(list_key.clone(), image);
                Ok(ImageInput::new(alias, image, repository, constraint))
            });
            match image {
                Ok(image) => input.images.push(image),
                Err(skipped) => input.skipped.push(skipped),
            }
        }
    }

    /// The image's `<alias>.<key>` settings, each falling back to the app-wide `<key>`.
    fn image_settings(&mut self, image: &mut ImageInput, skipped: &mut Vec<SkippedAnnotation>) {
        let alias = image.alias.clone();
        let (lookup, used) = (&self.lookup, &mut self.used);
        let mut get = |key: &str| -> Option<Given<String>> {
            let found = alias
                .as_deref()
                .and_then(|a| lookup.get(&format!("{a}.{key}")))
                .or_else(|| lookup.get(key));
            if let Some((k, _)) = &found {
                used.insert(k.clone());
            }
            found.map(|(k, v)| Given::new(k, v.trim().to_string()))
        };
        // Image Updater's lists are comma-separated.
        let listed = |g: Given<String>| {
            let items = g
                .value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            Given::new(
                g.key,
                Listed {
                    items,
                    written: g.value,
                },
            )
        };
        image.strategy = get("update-strategy");
        image.allow_tags = get("allow-tags");
        image.ignore_tags = get("ignore-tags").map(listed);
        image.platforms = get("platforms").map(listed);
        image.pull_secret = get("pull-secret");
        if let Some(Given { key, value }) = get("force-update") {
            // Go's `strconv.ParseBool`, which Image Updater reads it with
            // (pkg/argocd/annotations.go).
            match value.as_str() {
                "1" | "t" | "T" | "TRUE" | "true" | "True" => image.force_update = true,
                "0" | "f" | "F" | "FALSE" | "false" | "False" => image.force_update = false,
                _ => skipped.push(SkippedAnnotation {
                    key,
                    reason: format!("{value:?} is not true or false"),
                }),
            }
        }
        image.helm = HelmNames {
            name: get("helm.image-name").map(|g| g.value),
            tag: get("helm.image-tag").map(|g| g.value),
            spec: get("helm.image-spec").map(|g| g.value),
        };
        image.kustomize_image_name = get("kustomize.image-name").map(|g| g.value);
    }

    /// `tagpilot.dev/[<alias>.]min-age`, only under tagpilot's prefix: Image Updater has no
    /// such annotation to carry over.
    fn min_age(&mut self, image: &mut ImageInput) {
        let annotations = self.annotations;
        let min_age_key = image
            .alias
            .as_deref()
            .map(|a| format!("{TAGPILOT_PREFIX}{a}.min-age"))
            .filter(|k| annotations.contains_key(k))
            .or_else(|| Some(format!("{TAGPILOT_PREFIX}min-age")))
            .filter(|k| annotations.contains_key(k));
        if let Some(key) = min_age_key {
            self.used.insert(key.clone());
            let value = annotations[&key].trim().to_string();
            image.min_age = Some(Given::new(key, value));
        }
    }

    /// The app-wide settings: how and where the changes are written.
    fn app_settings(&mut self, input: &mut SettingsInput) {
        let (lookup, used) = (&self.lookup, &mut self.used);
        let mut get = |key: &str| {
            let (k, v) = lookup.get(key)?;
            used.insert(k.clone());
            Some(Given::new(k, v.trim().to_string()))
        };
        input.write_back = get("write-back-method");
        input.write_back_target = get("write-back-target");
        input.git_branch = get("git-branch");
        input.git_repository = get("git-repository").map(|g| g.value);
        // Holds are tagpilot's own: under its prefix only.
        for (key, slot) in HOLD_KEYS
            .into_iter()
            .zip([&mut input.hold, &mut input.release_hold])
        {
            let key = format!("{TAGPILOT_PREFIX}{key}");
            if let Some(value) = self.annotations.get(&key) {
                self.used.insert(key.clone());
                *slot = Some(Given::new(key, value.trim().to_string()));
            }
        }
    }

    /// Whatever is left under either prefix was not understood: each key is reported with
    /// why.
    fn report_unused(&self, out: &mut AppSettings) {
        let (annotations, lookup, used) = (self.annotations, &self.lookup, &self.used);
        let aliases: BTreeSet<&str> = out
            .images
            .iter()
            .filter(|i| i.has_alias)
            .map(|i| i.alias.as_str())
            .collect();
        for key in annotations.keys() {
            let (prefix, rest) = match key.strip_prefix(TAGPILOT_PREFIX) {
                Some(rest) => (TAGPILOT_PREFIX, rest),
                None => match key.strip_prefix(IMAGE_UPDATER_PREFIX) {
                    Some(rest) => (IMAGE_UPDATER_PREFIX, rest),
                    None => continue,
                },
            };
            if used.contains(key) {
                continue;
            }
            // A key nothing reads does nothing: a warning naming the key it may mean.
            let mut unknown = |why: String| {
                let nearest = nearest_key(rest, &aliases, prefix == TAGPILOT_PREFIX)
                    .map(|k| format!("{prefix}{k}"));
                let reason = match &nearest {
                    Some(k) => format!("{why}; did you mean {k}?"),
                    None => why,
                };
                out.unknown.push(UnknownAnnotation {
                    key: key.clone(),
                    nearest,
                    line: None,
                });
                reason
            };
            let reason = if key.starts_with(IMAGE_UPDATER_PREFIX) && HOLD_KEYS.contains(&rest) {
                format!("holds are tagpilot's own: read as {TAGPILOT_PREFIX}{rest} only")
            } else if lookup.shadowed(key) {
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
                    unknown(format!("alias {alias:?} is not in image-list"))
                }
            } else {
                unknown("unknown annotation; tagpilot does not support it".to_string())
            };
            out.skipped.push(SkippedAnnotation {
                key: key.clone(),
                reason,
            });
        }
    }
}

/// The known key (without its prefix) nearest to `rest` by edit distance (adjacent letters
/// swapped count once: `image-tga` is one from `image-tag`), if one is near enough to be what
/// was meant: app-wide keys, and each image key under every alias of `image-list`. tagpilot's
/// own keys count under its prefix only.
fn nearest_key(rest: &str, aliases: &BTreeSet<&str>, tagpilot: bool) -> Option<String> {
    let own: &[&str] = if tagpilot {
        &["hold", "release-hold", "min-age"]
    } else {
        &[]
    };
    let image_keys = || IMAGE_KEYS.iter().chain(tagpilot.then_some(&"min-age"));
    let mut known: Vec<String> = APP_KEYS
        .iter()
        .chain(IMAGE_KEYS)
        .chain(own)
        .map(|k| (*k).to_string())
        .collect();
    for alias in aliases {
        known.extend(image_keys().map(|k| format!("{alias}.{k}")));
    }
    let (distance, key) = known
        .into_iter()
        .map(|k| (strsim::damerau_levenshtein(rest, &k), k))
        .min()?;
    // Three edits at most, and fewer than half the key: `foo` is near nothing.
    (distance <= 3 && distance * 2 < key.len()).then_some(key)
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
) -> Result<(Option<String>, String, Option<String>), SettingError> {
    let (alias, rest) = match entry.split_once('=') {
        // A `=` inside a constraint (`img:>=1.0`) comes after a `:`.
        Some((a, r)) if !a.contains([':', '/']) => (Some(a.trim().to_string()), r.trim()),
        _ => (None, entry.trim()),
    };
    if alias.as_deref() == Some("") {
        return Err(SettingError::EmptyAlias(entry.to_string()));
    }
    let (image, constraint) = image_and_constraint(rest);
    if image.is_empty() {
        return Err(SettingError::NoImageName(entry.to_string()));
    }
    Ok((alias, image, constraint))
}
