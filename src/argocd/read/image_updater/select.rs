//! Which configuration counts for each Application: annotations alone, or the most specific
//! matching `applicationRefs` entry of a resource in its namespace (the rules are in the
//! module docs of [`super`]).

use std::collections::BTreeMap;

use super::super::annotations::{self, IMAGE_UPDATER_PREFIX};
use super::super::settings::{AppSettings, SkippedAnnotation, UnknownAnnotation};
use super::settings::settings_for;
use super::{ApplicationRef, DEFAULT_NAMESPACE, ImageUpdater, KIND, LabelSelector};
use crate::application::Application;
use crate::application::Origin;

/// One Application and the configuration that counts for it.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The Application, without its annotations and labels: read here, never after.
    pub app: Application,
    pub origin: Origin,
    /// What to update and how; `None`: the Application is not managed.
    pub settings: Option<AppSettings>,
    /// The resource entry that configures it; `None` for annotations alone.
    pub configured_by: Option<ConfiguredBy>,
    /// Why it is not updated although something names it (a conflict between resources).
    pub problems: Vec<String>,
}

/// The `applicationRefs` entry of a resource that configures an Application; shown as
/// `ImageUpdater argocd/web (applicationRefs[1], namePattern "web-*")`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredBy {
    pub namespace: String,
    pub name: String,
    pub entry: usize,
    pub name_pattern: String,
}

impl std::fmt::Display for ConfiguredBy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{KIND} {}/{} (applicationRefs[{}], namePattern {:?})",
            self.namespace, self.name, self.entry, self.name_pattern
        )
    }
}

impl ConfiguredBy {
    /// Whether this names the resource `u`.
    pub fn is(&self, u: &ImageUpdater) -> bool {
        self.namespace == u.namespace() && self.name == u.metadata.name
    }
}

/// What a set of resources says: each Application's configuration, the problems of the
/// resources themselves (each naming the resource and the field), and warnings that change
/// nothing (a removed field still read).
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub apps: Vec<Selected>,
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
    /// Applications configured by annotations alone that have annotations under either
    /// prefix but no `image-list` (a typo of it, say): what nothing reads, for warnings.
    pub unread: Vec<UnreadAnnotations>,
}

/// An Application's annotations that nothing reads because it has no `image-list`.
#[derive(Debug, Clone)]
pub struct UnreadAnnotations {
    /// `namespace/name`.
    pub application: String,
    /// Where it was read (`manifests:argocd/pay.yaml:1`, `cluster`).
    pub origin: String,
    pub annotations: Vec<UnknownAnnotation>,
}

/// Picks each Application's configuration (see the module docs for the rules).
pub fn select(apps: Vec<(Application, Origin)>, updaters: &[ImageUpdater]) -> Selection {
    let mut out = Selection::default();
    if updaters.is_empty() {
        let mut unread = Vec::new();
        out.apps = apps
            .into_iter()
            .map(|(mut app, origin)| {
                let mut settings = annotations::parse(&app.metadata.annotations);
                if let Some(s) = &mut settings {
                    locate(&app, &mut s.unknown);
                } else {
                    let mut annotations = annotations::unread(&app.metadata.annotations);
                    locate(&app, &mut annotations);
                    if !annotations.is_empty() {
                        unread.push(UnreadAnnotations {
                            application: app.id(),
                            origin: app.origin.clone(),
                            annotations,
                        });
                    }
                }
                forget_read_metadata(&mut app);
                Selected {
                    app,
                    origin,
                    settings,
                    configured_by: None,
                    problems: Vec::new(),
                }
            })
            .collect();
        out.unread = unread;
        return out;
    }

    // Each resource's entries, compiled and ordered most specific first, once.
    let mut compiled: Vec<(&ImageUpdater, Vec<CompiledRef<'_>>)> = Vec::new();
    for u in updaters {
        if u.spec.namespace.is_some() {
            out.warnings.push(format!(
                "{KIND} {} ({}): spec.namespace was removed in Image Updater 1.x; it is ignored \
                 and Applications are selected in the resource's own namespace {:?}",
                u.id(),
                u.origin,
                u.namespace()
            ));
        }
        if u.spec.application_refs.is_empty() {
            out.problems.push(format!(
                "{KIND} {} ({}): spec.applicationRefs is empty; it selects no Application",
                u.id(),
                u.origin
            ));
        }
        let mut refs = Vec::new();
        for (index, r) in u.spec.application_refs.iter().enumerate() {
            match CompiledRef::new(index, r) {
                Ok(c) => refs.push(c),
                Err(reason) => out.problems.push(format!(
                    "{KIND} {} ({}): spec.applicationRefs[{index}]: {}; this entry selects \
                     no Application",
                    u.id(),
                    u.origin,
                    crate::error_chain::chain(&reason)
                )),
            }
        }
        // Stable: of two entries equally specific, the first written wins, as upstream.
        refs.sort_by_key(|r| std::cmp::Reverse(r.specificity));
        compiled.push((u, refs));
    }

    for (app, origin) in apps {
        let namespace = app
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let matches: Vec<(&ImageUpdater, &CompiledRef<'_>)> = compiled
            .iter()
            .filter(|(u, _)| u.namespace() == namespace.as_str())
            .filter_map(|(u, refs)| refs.iter().find(|r| r.matches(&app)).map(|r| (*u, r)))
            .collect();
        let mut selected = Selected {
            app,
            origin,
            settings: None,
            configured_by: None,
            problems: Vec::new(),
        };
        match matches.as_slice() {
            [] => {
                if annotations::parse(&selected.app.metadata.annotations).is_some() {
                    // Not an error (Image Updater 1.x ignores them too), but never silent.
                    let mut settings = AppSettings::default();
                    settings.skipped.push(SkippedAnnotation {
                        key: format!("{IMAGE_UPDATER_PREFIX}image-list"),
                        reason: format!(
                            "{KIND} resources exist, and none in namespace {namespace:?} selects \
                             this Application; with resources, annotations count only through an \
                             entry with useAnnotations: true (as in Image Updater 1.x)"
                        ),
                    });
                    selected.settings = Some(settings);
                }
            }
            [(u, r)] => {
                selected.configured_by = Some(r.describe(u));
                selected.settings = Some(settings_for(&selected.app, u, r.entry, r.index));
            }
            many => {
                let names: Vec<String> = many
                    .iter()
                    .map(|(u, r)| r.describe(u).to_string())
                    .collect();
                selected.problems.push(format!(
                    "selected by more than one {KIND}: {}; neither applies until only one selects it",
                    names.join(" and ")
                ));
                selected.settings = Some(AppSettings::default());
            }
        }
        if let Some(s) = &mut selected.settings {
            locate(&selected.app, &mut s.unknown);
        }
        forget_read_metadata(&mut selected.app);
        out.apps.push(selected);
    }
    out
}

/// Drops what selecting has read of an Application and nothing after it reads: its raw
/// annotations (parsed into [`Selected::settings`]) and labels (matched against the
/// selectors). Thousands of Applications' maps would otherwise live through the whole run.
fn forget_read_metadata(app: &mut Application) {
    app.metadata.annotations = BTreeMap::new();
    app.metadata.labels = BTreeMap::new();
    app.annotation_lines = Vec::new();
}

/// Gives each annotation nothing reads the line it is written on, where the Application was
/// read from a file ([`Application::annotation_lines`]).
fn locate(app: &Application, unknown: &mut [UnknownAnnotation]) {
    for u in unknown {
        u.line = app
            .metadata
            .annotations
            .keys()
            .position(|k| *k == u.key)
            .and_then(|i| app.annotation_lines.get(i).copied())
            .filter(|&l| l > 0);
    }
}

/// Why an `applicationRefs` entry selects no Application; the caller names the resource and
/// the entry.
#[derive(Debug, thiserror::Error)]
enum RefError {
    #[error("namePattern {pattern:?} is not a valid glob")]
    NamePattern {
        pattern: String,
        #[source]
        source: globset::Error,
    },
    #[error(
        "labelSelectors.matchExpressions[{index}]: operator {operator:?} with {values} value(s) \
         is not a valid requirement (In and NotIn need values, Exists and DoesNotExist none)"
    )]
    Requirement {
        index: usize,
        operator: String,
        values: usize,
    },
}

/// One `applicationRefs` entry, ready to match.
struct CompiledRef<'a> {
    index: usize,
    entry: &'a ApplicationRef,
    pattern: globset::GlobMatcher,
    specificity: u64,
}

impl<'a> CompiledRef<'a> {
    fn new(index: usize, entry: &'a ApplicationRef) -> Result<CompiledRef<'a>, RefError> {
        let pattern = go_glob(&entry.name_pattern).map_err(|source| RefError::NamePattern {
            pattern: entry.name_pattern.clone(),
            source,
        })?;
        if let Some(s) = &entry.label_selectors {
            for (i, e) in s.match_expressions.iter().enumerate() {
                let ok = match e.operator.as_str() {
                    "In" | "NotIn" => !e.values.is_empty(),
                    "Exists" | "DoesNotExist" => e.values.is_empty(),
                    _ => false,
                };
                if !ok {
                    return Err(RefError::Requirement {
                        index: i,
                        operator: e.operator.clone(),
                        values: e.values.len(),
                    });
                }
            }
        }
        Ok(CompiledRef {
            index,
            entry,
            pattern,
            specificity: specificity(entry),
        })
    }

    fn matches(&self, app: &Application) -> bool {
        self.pattern.is_match(&app.metadata.name)
            && self
                .entry
                .label_selectors
                .as_ref()
                .is_none_or(|s| labels_match(s, &app.metadata.labels))
    }

    fn describe(&self, u: &ImageUpdater) -> ConfiguredBy {
        ConfiguredBy {
            namespace: u.namespace().to_string(),
            name: u.metadata.name.clone(),
            entry: self.index,
            name_pattern: self.entry.name_pattern.clone(),
        }
    }
}

/// Image Updater's precedence score: an exact name first, then more literal characters, then a
/// label selector and the number of its terms.
fn specificity(entry: &ApplicationRef) -> u64 {
    let pattern = &entry.name_pattern;
    let mut score = 0u64;
    if !pattern.contains(['*', '?', '[', ']']) {
        score += 1_000_000;
    }
    // Character classes count for nothing, nor do the wildcards.
    let mut literals = 0u64;
    let mut in_class = false;
    for c in pattern.chars() {
        match c {
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '*' | '?' if !in_class => {}
            _ if in_class => {}
            _ => literals += 1,
        }
    }
    score += literals;
    if let Some(s) = &entry.label_selectors {
        score += 10_000;
        score += 100 * (s.match_labels.len() + s.match_expressions.len()) as u64;
    }
    score
}

/// A Go `filepath.Match` pattern as a glob: `*` and `?` never cross `/`, and `[^…]` negates
/// like `[!…]`.
pub(super) fn go_glob(pattern: &str) -> Result<globset::GlobMatcher, globset::Error> {
    let pattern = pattern.replace("[^", "[!");
    Ok(globset::GlobBuilder::new(&pattern)
        .literal_separator(true)
        .backslash_escape(true)
        .build()?
        .compile_matcher())
}

/// Whether labels satisfy a selector, as Kubernetes reads one: every `matchLabels` pair and
/// every requirement must hold.
pub fn labels_match(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    selector
        .match_labels
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
        && selector.match_expressions.iter().all(|e| {
            let value = labels.get(&e.key);
            match e.operator.as_str() {
                "In" => value.is_some_and(|v| e.values.contains(v)),
                "NotIn" => value.is_none_or(|v| !e.values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
}
