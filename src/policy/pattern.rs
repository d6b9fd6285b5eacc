//! An image pattern (issue 31): a policy whose `image:` is a glob over `registry/repository`
//! follows every image the targets hold whose repository matches it, so one policy serves many
//! applications.
//!
//! The syntax is deliberately small: the registry host is written out and fixed, and the path
//! after it is a glob where `*` stands for one path segment (or part of one) and `**` for any
//! number of segments. Every other glob or regex metacharacter (`?`, `[`, `{`, `(`, `+`, `|`,
//! `^`, `$`, `\`) is refused rather than read: a pattern that means something other than what
//! its author meant would choose the wrong images. `exclude:` takes patterns (or exact
//! repositories) of the same registry.
//!
//! A pattern is expanded only when planning: each reference whose repository matches becomes a
//! [`PatternInstance`] of the policy (see [`ImagePolicy::instance`]), named
//! `policy@repository-path`, planned exactly as a policy of its own. No registry catalog is
//! read. This module is pure: it parses and matches, nothing else.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

use super::ImagePolicy;
use crate::image::Repository;

/// What joins a pattern policy's name and an image's path in the name of the policy instance
/// that follows that image (`shop-apps@shop/cart`). A policy name never holds it.
pub const INSTANCE_SEPARATOR: char = '@';

/// `spec.image` of a policy that follows many images, with its `exclude:`.
#[derive(Debug, Clone)]
pub struct ImagePattern {
    /// As written (`registry.example/shop/**`).
    pub written: String,
    /// The normalised registry host every matching repository is in.
    pub registry: String,
    /// The glob over the repository path, as written after the host.
    pub path: String,
    matcher: GlobMatcher,
    /// `exclude:` patterns as written, with their path matchers.
    pub exclude: Vec<Exclusion>,
}

/// One `exclude:` entry.
#[derive(Debug, Clone)]
pub struct Exclusion {
    pub written: String,
    matcher: GlobMatcher,
}

/// The image a pattern's instance follows and the pattern it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternInstance {
    /// The pattern policy's own name: what metrics count it under, and what `write.group:
    /// pattern` groups by.
    pub policy: String,
    /// The pattern as written.
    pub pattern: String,
}

/// Why a pattern cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error(
        "a pattern names its registry host first and fixed (registry.example/shop/**); \
         {written:?} has none"
    )]
    NoRegistry { written: String },
    #[error("the registry host {host:?} must be written out, without wildcards")]
    WildcardHost { host: String },
    #[error(
        "{character:?} is not a wildcard here: a pattern knows only * (within one path segment) \
         and ** (any number of segments)"
    )]
    Metacharacter { character: char },
    #[error("** stands alone between slashes (shop/**/api), not inside {segment:?}")]
    DoubleStarInSegment { segment: String },
    #[error("a pattern names repositories, not tags or digests: {character:?} has no place in it")]
    TagOrDigest { character: char },
    #[error("repository paths are lower-case: {written:?}")]
    UpperCase { written: String },
    #[error("{written:?} has an empty path segment")]
    EmptySegment { written: String },
    #[error("in registry {host}, the pattern in {registry}: {written} excludes nothing")]
    OtherRegistry {
        written: String,
        host: String,
        registry: String,
    },
    #[error("the glob could not be compiled")]
    Glob(#[source] globset::Error),
}

/// Whether `image` as written is a pattern rather than one repository.
pub fn is_pattern(image: &str) -> bool {
    image.contains('*')
}

impl ImagePattern {
    /// Reads `image` (a pattern) and its `exclude` entries (patterns or exact repositories).
    pub fn parse(image: &str) -> Result<ImagePattern, PatternError> {
        let (registry, path, matcher) = parse_one(image)?;
        Ok(ImagePattern {
            written: image.to_string(),
            registry,
            path,
            matcher,
            exclude: Vec::new(),
        })
    }

    /// Adds one `exclude:` entry; it must be in the pattern's registry.
    pub fn add_exclusion(&mut self, written: &str) -> Result<(), PatternError> {
        let (host, _, matcher) = parse_one(written)?;
        if host != self.registry {
            return Err(PatternError::OtherRegistry {
                written: written.to_string(),
                host,
                registry: self.registry.clone(),
            });
        }
        self.exclude.push(Exclusion {
            written: written.to_string(),
            matcher,
        });
        Ok(())
    }

    /// Whether the pattern follows `repository`: same registry, path matched, not excluded.
    pub fn matches(&self, repository: &Repository) -> bool {
        repository.registry == self.registry
            && self.matcher.is_match(&repository.path)
            && !self
                .exclude
                .iter()
                .any(|e| e.matcher.is_match(&repository.path))
    }

    /// The `exclude:` entry that leaves `repository` out, when one does.
    pub fn excluded_by(&self, repository: &Repository) -> Option<&str> {
        if repository.registry != self.registry || !self.matcher.is_match(&repository.path) {
            return None;
        }
        self.exclude
            .iter()
            .find(|e| e.matcher.is_match(&repository.path))
            .map(|e| e.written.as_str())
    }
}

impl fmt::Display for ImagePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.written)
    }
}

/// (normalised host, path glob, matcher) of one pattern or exact repository.
fn parse_one(written: &str) -> Result<(String, String, GlobMatcher), PatternError> {
    let no_registry = || PatternError::NoRegistry {
        written: written.to_string(),
    };
    let (host, path) = written.split_once('/').ok_or_else(no_registry)?;
    if host.contains(['*', '?', '[', '{']) {
        return Err(PatternError::WildcardHost {
            host: host.to_string(),
        });
    }
    // Docker's rule: the first segment is a host only with a dot, a port or as localhost;
    // otherwise the whole name is a Docker Hub path, which is not written out.
    if !(host.contains(['.', ':']) || host == "localhost") {
        return Err(no_registry());
    }
    if let Some(character) = path.chars().find(|c| matches!(c, ':' | '@')) {
        return Err(PatternError::TagOrDigest { character });
    }
    if let Some(character) = path.chars().find(|c| {
        matches!(
            c,
            '?' | '[' | ']' | '{' | '}' | '(' | ')' | '+' | '|' | '^' | '$' | '\\' | '!' | ','
        )
    }) {
        return Err(PatternError::Metacharacter { character });
    }
    if path.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(PatternError::UpperCase {
            written: written.to_string(),
        });
    }
    for segment in path.split('/') {
        if segment.is_empty() {
            return Err(PatternError::EmptySegment {
                written: written.to_string(),
            });
        }
        if segment.contains("**") && segment != "**" {
            return Err(PatternError::DoubleStarInSegment {
                segment: segment.to_string(),
            });
        }
    }
    // The host normalised as a reference's would be (lower case, Docker Hub's aliases folded).
    let registry = Repository::parse(&format!("{host}/x"))
        .map(|r| r.registry)
        .unwrap_or_else(|_| host.to_ascii_lowercase());
    let matcher = GlobBuilder::new(path)
        .literal_separator(true)
        .build()
        .map_err(PatternError::Glob)?
        .compile_matcher();
    Ok((registry, path.to_string(), matcher))
}

impl ImagePolicy {
    /// The policy that follows `repository` for this pattern policy: the same settings, the
    /// image set, and named `policy@path` so that holds, records, commit trailers and groups
    /// tell the pattern's images apart.
    pub fn instance(&self, repository: &Repository) -> ImagePolicy {
        let mut p = self.clone();
        p.name = format!("{}{INSTANCE_SEPARATOR}{}", self.name, repository.path);
        p.image = repository.clone();
        p.image_name = repository.to_string();
        p.instance = self.pattern.as_ref().map(|pattern| PatternInstance {
            policy: self.name.clone(),
            pattern: pattern.written.clone(),
        });
        p.pattern = None;
        p
    }

    /// Whether the policy follows `repository`: its image, or an image its pattern matches.
    pub fn follows(&self, repository: &Repository) -> bool {
        match &self.pattern {
            Some(pattern) => pattern.matches(repository),
            None => &self.image == repository,
        }
    }

    /// The name metrics count the policy under: a pattern's instances count under the pattern
    /// policy, so the label set does not grow with the images it follows.
    pub fn bounded_name(&self) -> &str {
        self.instance.as_ref().map_or(&self.name, |i| &i.policy)
    }
}

/// The pattern policy an instance name (`shop-apps@shop/cart`) comes from, when `configured`
/// (the names of the policy files' policies, none of which holds the separator) knows it.
pub fn pattern_of(name: &str, configured: impl Fn(&str) -> bool) -> Option<&str> {
    let (policy, _) = name.split_once(INSTANCE_SEPARATOR)?;
    configured(policy).then_some(policy)
}

/// The instances `names` call for (`shop@shop/cart`, as commit trailers and the plan name
/// them), made from the pattern policies among `policies`; names of other policies, and of an
/// image a pattern no longer matches, make none. What reads a policy by name for a pattern's
/// image (rollbacks, the steady memory) finds it among these.
pub fn instances_named<'a>(
    policies: &[ImagePolicy],
    names: impl IntoIterator<Item = &'a str>,
) -> Vec<ImagePolicy> {
    let mut out: Vec<ImagePolicy> = Vec::new();
    for name in names {
        let Some((base, path)) = name.split_once(INSTANCE_SEPARATOR) else {
            continue;
        };
        if out.iter().any(|p| p.name == name) {
            continue;
        }
        let found = policies.iter().find_map(|p| {
            let pattern = p.pattern.as_ref().filter(|_| p.name == base)?;
            let image = Repository {
                registry: pattern.registry.clone(),
                path: path.to_string(),
            };
            pattern.matches(&image).then(|| p.instance(&image))
        });
        out.extend(found);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(s: &str) -> Repository {
        Repository::parse(s).unwrap()
    }

    #[test]
    fn one_star_is_one_segment_and_two_are_any_number() {
        let one = ImagePattern::parse("registry.example/shop/*").unwrap();
        assert!(one.matches(&repo("registry.example/shop/cart")));
        assert!(!one.matches(&repo("registry.example/shop/cart/worker")));
        assert!(!one.matches(&repo("registry.example/other/cart")));
        assert!(!one.matches(&repo("elsewhere.example/shop/cart")));
        let any = ImagePattern::parse("registry.example/shop/**").unwrap();
        assert!(any.matches(&repo("registry.example/shop/cart")));
        assert!(any.matches(&repo("registry.example/shop/cart/worker")));
        let part = ImagePattern::parse("127.0.0.1:5000/shop/api-*").unwrap();
        assert!(part.matches(&repo("127.0.0.1:5000/shop/api-orders")));
        assert!(!part.matches(&repo("127.0.0.1:5000/shop/web")));
    }

    #[test]
    fn an_exclusion_leaves_its_images_out_and_must_be_in_the_same_registry() {
        let mut p = ImagePattern::parse("registry.example/shop/**").unwrap();
        p.add_exclusion("registry.example/shop/legacy-*").unwrap();
        p.add_exclusion("registry.example/shop/cart").unwrap();
        assert!(!p.matches(&repo("registry.example/shop/legacy-billing")));
        assert!(!p.matches(&repo("registry.example/shop/cart")));
        assert!(p.matches(&repo("registry.example/shop/web")));
        assert_eq!(
            p.excluded_by(&repo("registry.example/shop/cart")),
            Some("registry.example/shop/cart")
        );
        assert!(matches!(
            p.add_exclusion("other.example/shop/*"),
            Err(PatternError::OtherRegistry { .. })
        ));
    }

    #[test]
    fn a_pattern_without_a_fixed_host_or_with_other_metacharacters_is_refused() {
        let err = |s: &str| ImagePattern::parse(s).unwrap_err();
        assert!(matches!(err("shop/**"), PatternError::NoRegistry { .. }));
        assert!(matches!(err("**"), PatternError::NoRegistry { .. }));
        assert!(matches!(
            err("*.example/shop/*"),
            PatternError::WildcardHost { .. }
        ));
        assert!(matches!(
            err("registry.example/shop/ap?"),
            PatternError::Metacharacter { character: '?' }
        ));
        assert!(matches!(
            err("registry.example/shop/{a,b}"),
            PatternError::Metacharacter { character: '{' }
        ));
        assert!(matches!(
            err("registry.example/shop/.+"),
            PatternError::Metacharacter { character: '+' }
        ));
        assert!(matches!(
            err("registry.example/shop/*:1.0"),
            PatternError::TagOrDigest { .. }
        ));
        assert!(matches!(
            err("registry.example/shop/a**"),
            PatternError::DoubleStarInSegment { .. }
        ));
        assert!(matches!(
            err("registry.example/Shop/*"),
            PatternError::UpperCase { .. }
        ));
        assert!(matches!(
            err("registry.example/shop//*"),
            PatternError::EmptySegment { .. }
        ));
    }

    #[test]
    fn an_instance_is_named_after_its_pattern_and_image() {
        let mut p = ImagePolicy::adhoc(
            "registry.example/shop/cart",
            super::super::Strategy::NewestBuild,
        )
        .unwrap();
        p.name = "shop".into();
        p.pattern = Some(ImagePattern::parse("registry.example/shop/*").unwrap());
        let i = p.instance(&repo("registry.example/shop/web"));
        assert_eq!(i.name, "shop@shop/web");
        assert_eq!(i.bounded_name(), "shop");
        assert!(i.pattern.is_none());
        assert_eq!(i.image, repo("registry.example/shop/web"));
        assert_eq!(pattern_of(&i.name, |n| n == "shop"), Some("shop"));
        // What a registry notification is matched against: the pattern, or the one image.
        assert!(p.follows(&repo("registry.example/shop/api")));
        assert!(!p.follows(&repo("registry.example/other/api")));
        assert!(i.follows(&repo("registry.example/shop/web")));
        assert!(!i.follows(&repo("registry.example/shop/api")));
        let made = instances_named(
            std::slice::from_ref(&p),
            ["shop@shop/web", "shop@other/web", "api", "shop@shop/web"],
        );
        assert_eq!(made.len(), 1);
        assert_eq!(made[0].name, "shop@shop/web");
        assert_eq!(pattern_of(&i.name, |_| false), None);
    }
}
