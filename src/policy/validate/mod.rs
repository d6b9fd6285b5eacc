//! One policy document as written, checked value by value into an [`ImagePolicy`]. Every
//! problem is recorded with the `file:line:column` of the value, and checking goes on, so a
//! user sees them all at once.

use std::path::Path;

use serde_saphyr::Spanned;

use crate::image::{ImageRef, Platform, is_valid_tag};
use crate::version::Constraint;

use super::{
    API_VERSION, ImagePolicy, KIND, PolicyError, SourceLocation, Strategy, Target, ValueError,
    regex_key,
};

mod chart;
use chart::Followed;
mod pattern;
mod promote;
mod raw;

/// The JSON Schema of an `ImagePolicy` document, made from the types its reader fills (their doc
/// comments are its descriptions), for editors (`# yaml-language-server: $schema=…`).
pub fn schema() -> schemars::Schema {
    schemars::schema_for!(raw::RawDocument)
}

use self::raw::{
    Header, NameOnly, RawDigest, RawDocument, RawMetadata, RawRegex, RawSemver, RawStrategy,
    RawTarget, SortOrder,
};

/// Parses and checks one document of a policy file (`offset`: lines before it in the file).
/// `None` when the document is blank, or broken (its problems are pushed onto `errors`).
pub(super) fn document(
    path: &Path,
    offset: usize,
    doc: &str,
    errors: &mut Vec<PolicyError>,
) -> Option<ImagePolicy> {
    // What the document is comes first: a Flux ImagePolicy or a Deployment pasted here is
    // named as such, not by the first field tagpilot's ImagePolicy lacks.
    if let Ok(Some(header)) = crate::yaml_error::from_str::<Option<Header>>(doc)
        && let Some(problem) = foreign(path, offset, &header)
    {
        errors.push(problem);
        return None;
    }
    let parsed: Result<Option<RawDocument>, serde_saphyr::Error> = crate::yaml_error::from_str(doc);
    match parsed {
        Ok(Some(raw)) => Validator {
            path,
            offset,
            errors,
            policy: None,
        }
        .policy(raw),
        Ok(None) => None,
        Err(e) => {
            // The document did not deserialise; its name may still be readable, and helps.
            let name = crate::yaml_error::from_str::<NameOnly>(doc)
                .ok()
                .and_then(|n| n.metadata?.name);
            let context = name.map(|n| format!("policy {n:?}"));
            let (line, column, message) =
                crate::yaml_error::render(&e, path, offset, context.as_deref());
            let location = SourceLocation::new(path, line, column);
            errors.push(PolicyError::Syntax { location, message });
            None
        }
    }
}

/// A document that is not a tagpilot `ImagePolicy` at all, as a problem at its `kind` (or
/// `apiVersion`); `None` for one that is (or says nothing about what it is).
fn foreign(path: &Path, offset: usize, header: &Header) -> Option<PolicyError> {
    let api_version = header.api_version.as_ref().map(|a| a.value.as_str());
    let kind = header.kind.as_ref().map(|k| k.value.as_str());
    if api_version == Some(API_VERSION) && kind == Some(KIND) {
        return None;
    }
    let at = header.kind.as_ref().or(header.api_version.as_ref())?;
    let location = SourceLocation::new(
        path,
        at.referenced.line() as usize + offset,
        at.referenced.column() as usize,
    );
    let written = format!(
        "apiVersion {}, kind {}",
        api_version.unwrap_or("(none)"),
        kind.unwrap_or("(none)")
    );
    let message = if api_version.is_some_and(|a| a.starts_with("image.toolkit.fluxcd.io/")) {
        format!(
            "this is a Flux resource ({written}), not a tagpilot ImagePolicy: tagpilot reads \
             apiVersion {API_VERSION}, kind {KIND}, with spec.image and spec.strategy \
             (see policies/ in tagpilot's repository); Flux's markers in manifests work as they are"
        )
    } else if kind == Some(KIND) {
        format!(
            "apiVersion must be {API_VERSION:?}, not {:?}",
            api_version.unwrap_or("")
        )
    } else {
        format!(
            "not an ImagePolicy ({written}): the policy files hold only apiVersion \
             {API_VERSION}, kind {KIND} documents; keep other resources elsewhere"
        )
    };
    Some(PolicyError::Invalid {
        location,
        policy: None,
        message,
        error: None,
    })
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
        self.push(s, message.into(), None);
    }

    /// An error whose cause is another error (a regex's, a glob's, …), kept as its source.
    fn error_from<T>(&mut self, s: &Spanned<T>, message: String, source: impl Into<ValueError>) {
        self.push(s, message, Some(Box::new(source.into())));
    }

    fn push<T>(&mut self, s: &Spanned<T>, message: String, source: Option<Box<ValueError>>) {
        let location = self.at(s);
        self.errors.push(PolicyError::Invalid {
            location,
            policy: self.policy.clone(),
            message,
            error: source,
        });
    }

    fn policy(&mut self, raw: RawDocument) -> Option<ImagePolicy> {
        let before = self.errors.len();
        // 1. What the document is, and the name and namespace it gives the policy.
        let (name, namespace, source) = self.header(&raw.api_version, &raw.kind, raw.metadata);
        let spec_at = self.at(&raw.spec);
        let spec = raw.spec.value;

        // 2. The spec, value by value.
        let Followed {
            image,
            image_name,
            chart,
            pattern,
            priority,
        } = self.followed(
            spec_at.clone(),
            spec.image,
            spec.chart,
            (spec.exclude, spec.priority),
            &spec.targets,
        );
        let strategy = self.strategy(spec.strategy);
        let allow_tags = self.allow_tags(spec.allow_tags);
        let (ignore_tags, ignore_set) = self.ignore_tags(spec.ignore_tags);
        let mut platforms = Vec::new();
        for p in spec.platforms {
            match p.value.parse::<Platform>() {
                Ok(platform) => platforms.push(platform),
                Err(e) => self.error_from(&p, format!("platforms: {e}"), e),
            }
        }
        let min_age = self.min_age(spec.min_age, &strategy);
        if let (Some(_), Some(p)) = (&pattern, &spec.promote) {
            self.error(p, pattern::PROMOTE_WITH_PATTERN);
        }
        let promote = spec.promote.and_then(|p| self.promote(p, &strategy));
        let signatures = self.signatures(spec.signatures);
        let targets: Vec<Target> = spec
            .targets
            .into_iter()
            .filter_map(|t| self.target(t))
            .collect();

        if let Some(c) = &chart {
            self.chart_settings(&spec_at, c, &strategy, &platforms, spec.pin_digest);
        }

        // 3. A policy only when the document had no error.
        if self.errors.len() > before {
            return None;
        }
        Some(ImagePolicy {
            name,
            namespace,
            source,
            image: image?,
            image_name: image_name?,
            pattern,
            priority,
            instance: None,
            strategy: strategy?,
            allow_tags,
            ignore_tags,
            ignore_set,
            platforms,
            any_platform: false,
            pin_digest: spec.pin_digest,
            allow_downgrade: spec.allow_downgrade,
            replace_unreadable_tags: spec.replace_unreadable_tags,
            keep_precision: true,
            min_age,
            verify: spec.verify,
            version_labels: spec.version_labels,
            promote,
            signatures,
            chart,
            targets,
        })
    }

    /// `signatures:` with its keys read from files next to the policy file or the
    /// environment; a key that cannot be read is an error here, so the policy is not planned.
    fn signatures(
        &mut self,
        raw: Option<Spanned<crate::config::signatures::SignaturesConfig>>,
    ) -> Option<crate::config::signatures::Requirement> {
        let raw = raw?;
        let base = self.path.parent().unwrap_or(Path::new("."));
        let origin = self.at(&raw).to_string();
        match raw.value.resolve(base, origin) {
            Ok(r) => Some(r),
            Err(e) => {
                self.error(
                    &raw,
                    format!("spec.signatures: {}", crate::error_chain::chain(&e)),
                );
                None
            }
        }
    }

    /// Checks `apiVersion`, `kind` and `metadata`: the policy's name, its namespace, and where
    /// its name is written.
    fn header(
        &mut self,
        api_version: &Spanned<String>,
        kind: &Spanned<String>,
        metadata: RawMetadata,
    ) -> (String, Option<String>, SourceLocation) {
        let name = metadata.name.value.clone();
        if is_valid_name(&name) {
            self.policy = Some(name.clone());
        } else {
            self.error(
                &metadata.name,
                format!(
                    "metadata.name {name:?} is not a valid name (lower-case letters, digits, '-', '.', '_'; \
                     starting and ending with a letter or digit)"
                ),
            );
        }
        if api_version.value != API_VERSION {
            self.error(
                api_version,
                format!(
                    "apiVersion must be {API_VERSION:?}, not {:?}",
                    api_version.value
                ),
            );
        }
        if kind.value != KIND {
            self.error(kind, format!("kind must be {KIND:?}, not {:?}", kind.value));
        }
        let namespace = metadata.namespace.map(|ns| {
            if !is_valid_name(&ns.value) {
                self.error(
                    &ns,
                    format!("metadata.namespace {:?} is not a valid name", ns.value),
                );
            }
            ns.value
        });
        let source = self.at(&metadata.name);
        (name, namespace, source)
    }

    /// `allowTags`: a regex.
    fn allow_tags(&mut self, allow_tags: Option<Spanned<String>>) -> Option<regex::Regex> {
        allow_tags.and_then(|a| match regex::Regex::new(&a.value) {
            Ok(r) => Some(r),
            Err(e) => {
                self.error_from(
                    &a,
                    format!(
                        "allowTags: invalid regex {}: {}",
                        as_written(&a.value),
                        regex_key::position(&a.value, &e)
                    ),
                    e,
                );
                None
            }
        })
    }

    /// `ignoreTags`: the globs as written, and the set that matches them all.
    fn ignore_tags(&mut self, globs: Vec<Spanned<String>>) -> (Vec<String>, globset::GlobSet) {
        let mut ignore_builder = globset::GlobSetBuilder::new();
        let mut ignore_tags = Vec::new();
        let ignore_at = globs.first().map(|g| self.at(g));
        for g in globs {
            match globset::Glob::new(&g.value) {
                Ok(glob) => {
                    ignore_builder.add(glob);
                }
                Err(e) => self.error_from(
                    &g,
                    format!("ignoreTags: invalid glob {:?}: {}", g.value, e.kind()),
                    e,
                ),
            }
            ignore_tags.push(g.value);
        }
        // Globs each valid may still not build together (too large to match): an empty set
        // would ignore nothing, so that is an error too, never a wider policy.
        let ignore_set = match ignore_builder.build() {
            Ok(set) => set,
            Err(e) => {
                if let Some(location) = ignore_at {
                    self.errors.push(PolicyError::Invalid {
                        location,
                        policy: self.policy.clone(),
                        message: "ignoreTags: the globs cannot be matched together".to_string(),
                        error: Some(Box::new(e.into())),
                    });
                }
                globset::GlobSet::empty()
            }
        };
        (ignore_tags, ignore_set)
    }

    /// `minAge`: a duration, for a strategy that has newer tags to wait for.
    fn min_age(
        &mut self,
        min_age: Option<Spanned<String>>,
        strategy: &Option<Strategy>,
    ) -> Option<std::time::Duration> {
        min_age.and_then(|m| {
            if let Some(Strategy::Digest { .. }) = strategy {
                self.error(
                    &m,
                    "minAge: the digest strategy follows one tag and has no newer tag to wait                      for; remove minAge"
                        .to_string(),
                );
                return None;
            }
            match humantime::parse_duration(m.value.trim()) {
                Ok(d) => Some(d),
                Err(e) => {
                    self.error(
                        &m,
                        format!(
                            "minAge: {:?} is not a duration (30m, 2h, 1d): {e}",
                            m.value
                        ),
                    );
                    None
                }
            }
        })
    }

    /// `spec.strategy`: exactly one strategy, checked value by value.
    fn strategy(&mut self, raw: Spanned<RawStrategy>) -> Option<Strategy> {
        if !self.one_strategy(&raw) {
            return None;
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
                    Ok(c) if !c.admits_some_version(prerelease) => {
                        self.error(
                            &r,
                            format!(
                                "semver.range {:?} admits no version{}, so no tag could ever be chosen",
                                r.value,
                                if prerelease { "" } else { " (pre-releases left out)" }
                            ),
                        );
                        return None;
                    }
                    Ok(c) => Some(c),
                    Err(e) => {
                        self.error_from(
                            &r,
                            format!("semver.range: {}", crate::error_chain::chain(&e)),
                            e,
                        );
                        return None;
                    }
                },
            };
            return Some(Strategy::Semver { range, prerelease });
        }
        if let Some(r) = regex {
            return self.regex(r);
        }
        if newest_build.is_some() {
            return Some(Strategy::NewestBuild);
        }
        if let Some(d) = digest {
            let Some(RawDigest { tag }) = d.value else {
                self.error(&d, "strategy digest needs the `tag` to follow");
                return None;
            };
            if !is_valid_tag(&tag.value) {
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

    /// `strategy.regex`: the pattern, and the sort key and order it implies or is given
    /// ([`regex_key::resolve`], as `tagpilot tags`' flags are checked too).
    fn regex(&mut self, r: Spanned<Option<RawRegex>>) -> Option<Strategy> {
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
                self.error_from(
                    &pattern,
                    format!(
                        "regex.pattern: invalid regex {}: {}",
                        as_written(&pattern.value),
                        regex_key::position(&pattern.value, &e)
                    ),
                    e,
                );
                return None;
            }
        };
        let written = sort_by.as_ref().map(|s| s.value.as_str());
        match regex_key::resolve(&pattern.value, &compiled, written, order) {
            Ok(key) => Some(Strategy::Regex {
                pattern: compiled,
                group: key.group,
                order: key.order,
                implied: key.implied,
            }),
            Err(e) => {
                // At `sortBy` when it is what is wrong, else at the pattern.
                let (field, at) = match (&e, &sort_by) {
                    (ValueError::UnknownGroup { .. }, Some(s)) => ("regex.sortBy", s),
                    _ => ("regex", &pattern),
                };
                let location = self.at(at);
                self.errors.push(PolicyError::Invalid {
                    location,
                    policy: self.policy.clone(),
                    message: format!("{field}: {e}"),
                    error: Some(Box::new(e)),
                });
                None
            }
        }
    }

    /// Whether `raw` sets exactly one strategy; an error on it otherwise.
    fn one_strategy(&mut self, raw: &Spanned<RawStrategy>) -> bool {
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
                    raw,
                    "spec.strategy names no strategy; set exactly one of semver, regex, newestBuild, digest, alphabetical",
                );
                false
            }
            1 => true,
            _ => {
                self.error(
                    raw,
                    format!(
                        "spec.strategy sets {}; set exactly one",
                        given.join(" and ")
                    ),
                );
                false
            }
        }
    }

    fn target(&mut self, raw: Spanned<RawTarget>) -> Option<Target> {
        let before = self.errors.len();
        let source = Some(self.at(&raw));
        let t = raw.value;
        let mut builder = globset::GlobSetBuilder::new();
        let mut paths = Vec::new();
        for p in t.paths {
            for glob in target_globs(&p.value) {
                match globset::GlobBuilder::new(&glob)
                    .literal_separator(true)
                    .build()
                {
                    Ok(g) => {
                        builder.add(g);
                    }
                    Err(e) => self.error_from(
                        &p,
                        format!("targets[].paths: invalid glob {:?}: {}", p.value, e.kind()),
                        e,
                    ),
                }
                paths.push(glob);
            }
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
                    && let Err(e) = check_value_path(v)
                {
                    self.error_from(&h, format!("targets[].helm.{field}: {e}"), e);
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
            if let Err(e) = ImageRef::parse(&k.image_name.value) {
                self.error_from(
                    &k.image_name,
                    format!("targets[].kustomize.imageName: {e}"),
                    e,
                );
            }
            k.image_name.value
        });
        if self.errors.len() > before {
            return None;
        }
        Some(Target {
            paths,
            path_set,
            literal: false,
            repository,
            helm,
            kustomize_image_name,
            source,
        })
    }
}

/// The globs a `targets[].paths` entry matches with, as Flux users write paths too: a leading
/// `./` is the root (`./apps/**` is `apps/**`, `.` every file), and a path without a wildcard
/// names a file or a directory, whose files are matched at any depth (`apps` and `apps/` are
/// also `apps/**`), as a Flux Kustomization's `path` means.
pub(crate) fn target_globs(written: &str) -> Vec<String> {
    let mut path = written;
    while let Some(rest) = path.strip_prefix("./") {
        path = rest;
    }
    let path = if path == "." { "" } else { path };
    let wildcard = path.contains(['*', '?', '[', '{']);
    match path.strip_suffix('/') {
        _ if path.is_empty() => vec!["**".to_string()],
        Some(dir) if !wildcard => vec![format!("{dir}/**")],
        _ if !wildcard => vec![path.to_string(), format!("{path}/**")],
        _ => vec![path.to_string()],
    }
}

/// Dotted Helm value paths: `image.tag`, `images[1].tag`, `a.b[0][2].c`.
fn check_value_path(path: &str) -> Result<(), ValueError> {
    let bad = || {
        Err(ValueError::NotAValuePath {
            path: path.to_string(),
        })
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

/// A value in quotes exactly as the user wrote it; `{:?}` would double every backslash of a
/// regex, and `\d` is not what anyone typed.
fn as_written(value: &str) -> String {
    format!("\"{value}\"")
}

#[cfg(test)]
mod tests;
