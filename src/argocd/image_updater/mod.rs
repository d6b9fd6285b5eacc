//! Argo CD Image Updater's `ImageUpdater` resources (`argocd-image-updater.argoproj.io/v1alpha1`),
//! the configuration of Image Updater 1.x: which Applications a resource selects, and what its
//! settings say for each of them.
//!
//! Pure. A selected Application's settings are turned into the same [`AppAnnotations`] its
//! annotations would give, by writing them as the annotations they stand for and reading those
//! with [`annotations::parse`]: one reader, so a setting means the same whichever way it is
//! written, and a resource and the equivalent annotations plan alike. What the reader cannot
//! honour is reported under the resource's field (`ImageUpdater argocd/web:
//! spec.applicationRefs[0].images[1].commonUpdateSettings.allowTags`), not under the annotation
//! it was written as.
//!
//! Which configuration counts, per Application:
//! - no `ImageUpdater` resource at all: its annotations, as Image Updater 0.x read them;
//! - otherwise, as Image Updater 1.x: only the resources in the Application's namespace count.
//!   Of each resource the most specific matching `applicationRefs` entry applies (an exact name,
//!   then more literal characters, then label selectors); `useAnnotations: true` makes the
//!   Application's annotations its configuration. An Application no resource selects is not
//!   updated, and the report says why. Two resources selecting one Application is a conflict,
//!   reported, and neither applies.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::annotations::{
    self, AppAnnotations, IMAGE_UPDATER_PREFIX, SkippedAnnotation, UpdateStrategy,
};
use super::application::{Application, DocumentError, read_objects};
use super::resolve::Origin;

/// `apiVersion` of the resources this module reads.
pub const API_VERSION: &str = "argocd-image-updater.argoproj.io/v1alpha1";
/// `kind` of the resources this module reads.
pub const KIND: &str = "ImageUpdater";
/// The namespace of a resource or an Application read from git that names none: Argo CD's and
/// Image Updater's usual one.
pub const DEFAULT_NAMESPACE: &str = "argocd";

/// One `ImageUpdater` resource.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ImageUpdater {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: Metadata,
    #[serde(default)]
    pub spec: UpdaterSpec,
    /// The status as last written (from the cluster), to write only what changed.
    #[serde(default)]
    pub status: Option<serde_json::Value>,
    /// Where it was read from (`argocd/updaters.yaml:12`, `cluster`), for reports.
    #[serde(skip)]
    pub origin: String,
}

/// The metadata tagpilot reads; lenient, like every Kubernetes object's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default)]
    pub namespace: Option<String>,
    #[serde(default)]
    pub generation: Option<i64>,
}

/// `spec`. Unknown fields are refused: a misspelt setting must not be silently dropped.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UpdaterSpec {
    /// Removed upstream in 2026 (Applications are looked up in the resource's own namespace);
    /// still read, with a warning, so an older resource keeps working.
    pub namespace: Option<String>,
    pub common_update_settings: Option<CommonUpdateSettings>,
    pub write_back_config: Option<WriteBackConfig>,
    pub application_refs: Vec<ApplicationRef>,
    pub images_verification: Option<ImagesVerification>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationRef {
    /// A glob over Application names, as Go's `filepath.Match` reads it.
    pub name_pattern: String,
    #[serde(default)]
    pub label_selectors: Option<LabelSelector>,
    #[serde(default)]
    pub use_annotations: Option<bool>,
    #[serde(default)]
    pub images_verification: Option<ImagesVerification>,
    #[serde(default)]
    pub common_update_settings: Option<CommonUpdateSettings>,
    #[serde(default)]
    pub write_back_config: Option<WriteBackConfig>,
    #[serde(default)]
    pub images: Vec<ImageConfig>,
}

/// A Kubernetes `LabelSelector`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<LabelRequirement>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LabelRequirement {
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    #[serde(default)]
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ImageConfig {
    pub alias: String,
    /// `registry/image` with a starting tag or a constraint after `:`, as in `image-list`.
    pub image_name: String,
    #[serde(default)]
    pub common_update_settings: Option<CommonUpdateSettings>,
    #[serde(default)]
    pub manifest_targets: Option<ManifestTarget>,
    #[serde(default)]
    pub images_verification: Option<ImagesVerification>,
}

/// Settings inherited spec → ref → image, field by field.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct CommonUpdateSettings {
    pub update_strategy: Option<String>,
    pub force_update: Option<bool>,
    pub allow_tags: Option<String>,
    pub ignore_tags: Option<Vec<String>>,
    pub pull_secret: Option<String>,
    pub platforms: Option<Vec<String>>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct WriteBackConfig {
    pub method: Option<String>,
    pub git_config: Option<GitConfig>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct GitConfig {
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub write_back_target: Option<String>,
    pub pull_request: Option<PullRequest>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct PullRequest {
    pub github: Option<Empty>,
    pub gitlab: Option<Empty>,
    pub labels: Vec<String>,
}

/// `github: {}`: the provider's settings, none so far.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ManifestTarget {
    pub helm: Option<HelmTarget>,
    pub kustomize: Option<KustomizeTarget>,
    pub plugin: Option<HelmTarget>,
}

/// `helm:` (value paths) and `plugin:` (environment variable names) have the same three fields.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct HelmTarget {
    pub name: Option<String>,
    pub tag: Option<String>,
    pub spec: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct KustomizeTarget {
    pub name: Option<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct ImagesVerification {
    pub enabled: Option<bool>,
    pub cosign_key: Option<SecretRef>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SecretRef {
    pub secret_name: String,
    pub key: String,
}

impl ImageUpdater {
    /// `namespace/name`, as reports and status name it.
    pub fn id(&self) -> String {
        format!("{}/{}", self.namespace(), self.metadata.name)
    }

    /// The namespace whose Applications it selects.
    pub fn namespace(&self) -> &str {
        self.metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE)
    }
}

/// Reads every `ImageUpdater` document of a (multi-document) YAML text; other documents are
/// skipped. An `ImageUpdater` with an unknown or mistyped field makes the file an error that
/// names the file, line and column.
pub fn read_documents(path: &Path, text: &str) -> Result<Vec<ImageUpdater>, DocumentError> {
    let found = read_objects(path, text, KIND, |kind, api_version| {
        kind == KIND && api_version.starts_with("argocd-image-updater.argoproj.io/")
    })?;
    Ok(found
        .into_iter()
        .map(|(line, mut u): (usize, ImageUpdater)| {
            u.origin = format!("{}:{line}", path.display());
            u
        })
        .collect())
}

// === selection ===

/// One Application and the configuration that counts for it.
#[derive(Debug, Clone)]
pub struct Selected {
    /// The Application, without its annotations and labels: read here, never after.
    pub app: Application,
    pub origin: Origin,
    /// What to update and how; `None`: the Application is not managed.
    pub settings: Option<AppAnnotations>,
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
}

/// Picks each Application's configuration (see the module docs for the rules).
pub fn select(apps: Vec<(Application, Origin)>, updaters: &[ImageUpdater]) -> Selection {
    let mut out = Selection::default();
    if updaters.is_empty() {
        out.apps = apps
            .into_iter()
            .map(|(mut app, origin)| {
                let settings = annotations::parse(&app.metadata.annotations);
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
                    "{KIND} {} ({}): spec.applicationRefs[{index}]: {reason}; this entry selects \
                     no Application",
                    u.id(),
                    u.origin
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
                    let mut settings = AppAnnotations::default();
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
                selected.settings = Some(AppAnnotations::default());
            }
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
}

/// One `applicationRefs` entry, ready to match.
struct CompiledRef<'a> {
    index: usize,
    entry: &'a ApplicationRef,
    pattern: globset::GlobMatcher,
    specificity: u64,
}

impl<'a> CompiledRef<'a> {
    fn new(index: usize, entry: &'a ApplicationRef) -> Result<CompiledRef<'a>, String> {
        let pattern = go_glob(&entry.name_pattern).map_err(|e| {
            format!(
                "namePattern {:?} is not a valid glob: {e}",
                entry.name_pattern
            )
        })?;
        if let Some(s) = &entry.label_selectors {
            for (i, e) in s.match_expressions.iter().enumerate() {
                let ok = match e.operator.as_str() {
                    "In" | "NotIn" => !e.values.is_empty(),
                    "Exists" | "DoesNotExist" => e.values.is_empty(),
                    _ => false,
                };
                if !ok {
                    return Err(format!(
                        "labelSelectors.matchExpressions[{i}]: operator {:?} with {} value(s) is \
                         not a valid requirement (In and NotIn need values, Exists and \
                         DoesNotExist none)",
                        e.operator,
                        e.values.len()
                    ));
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
fn go_glob(pattern: &str) -> Result<globset::GlobMatcher, globset::Error> {
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

// === settings ===

/// A setting's value and the field it was read from (the most specific level that set it).
#[derive(Debug, Clone)]
struct Field<T> {
    value: T,
    path: String,
}

/// `commonUpdateSettings` after inheritance.
#[derive(Debug, Clone, Default)]
struct Common {
    update_strategy: Option<Field<String>>,
    force_update: Option<Field<bool>>,
    allow_tags: Option<Field<String>>,
    ignore_tags: Option<Field<Vec<String>>>,
    pull_secret: Option<Field<String>>,
    platforms: Option<Field<Vec<String>>>,
}

impl Common {
    /// Layers `more` (set at `path`) over what is already there, field by field.
    fn layer(&mut self, more: Option<&CommonUpdateSettings>, path: &str) {
        let Some(m) = more else { return };
        let field = |name: &str| format!("{path}.commonUpdateSettings.{name}");
        set(
            &mut self.update_strategy,
            &m.update_strategy,
            field("updateStrategy"),
        );
        set(
            &mut self.force_update,
            &m.force_update,
            field("forceUpdate"),
        );
        set(&mut self.allow_tags, &m.allow_tags, field("allowTags"));
        set(&mut self.ignore_tags, &m.ignore_tags, field("ignoreTags"));
        set(&mut self.pull_secret, &m.pull_secret, field("pullSecret"));
        set(&mut self.platforms, &m.platforms, field("platforms"));
    }
}

fn set<T: Clone>(slot: &mut Option<Field<T>>, value: &Option<T>, path: String) {
    if let Some(v) = value {
        *slot = Some(Field {
            value: v.clone(),
            path,
        });
    }
}

/// `writeBackConfig` after inheritance: `method` and each `gitConfig` field from the most
/// specific level that sets it; a `pullRequest` replaces the inherited one whole, because its
/// providers exclude each other.
#[derive(Debug, Clone, Default)]
struct WriteBack {
    method: Option<Field<String>>,
    repository: Option<Field<String>>,
    branch: Option<Field<String>>,
    target: Option<Field<String>>,
    pull_request: Option<Field<PullRequest>>,
}

impl WriteBack {
    fn layer(&mut self, more: Option<&WriteBackConfig>, path: &str) {
        let Some(m) = more else { return };
        set(
            &mut self.method,
            &m.method,
            format!("{path}.writeBackConfig.method"),
        );
        if let Some(g) = &m.git_config {
            let field = |name: &str| format!("{path}.writeBackConfig.gitConfig.{name}");
            set(&mut self.repository, &g.repository, field("repository"));
            set(&mut self.branch, &g.branch, field("branch"));
            set(
                &mut self.target,
                &g.write_back_target,
                field("writeBackTarget"),
            );
            set(
                &mut self.pull_request,
                &g.pull_request,
                field("pullRequest"),
            );
        }
    }
}

/// The settings one `applicationRefs` entry gives one Application.
fn settings_for(
    app: &Application,
    u: &ImageUpdater,
    entry: &ApplicationRef,
    index: usize,
) -> AppAnnotations {
    let resource = format!("{KIND} {}", u.id());
    let ref_path = format!("spec.applicationRefs[{index}]");
    if entry.use_annotations == Some(true) {
        // Upstream ignores every other setting of the entry then; so does tagpilot, openly.
        let mut settings = annotations::parse(&app.metadata.annotations).unwrap_or_default();
        if entry.images.is_empty()
            && entry.common_update_settings.is_none()
            && entry.write_back_config.is_none()
        {
            return settings;
        }
        settings.skipped.push(SkippedAnnotation {
            key: format!("{resource}: {ref_path}"),
            reason: "useAnnotations is true, so images, commonUpdateSettings and \
                     writeBackConfig of this entry are ignored, as Image Updater does"
                .to_string(),
        });
        return settings;
    }

    // What the entry says, written as the annotations it stands for; `fields` maps each
    // annotation back to the field it came from, for reports.
    let mut written: BTreeMap<String, String> = BTreeMap::new();
    let mut fields: BTreeMap<String, String> = BTreeMap::new();
    let mut skipped: Vec<SkippedAnnotation> = Vec::new();
    let mut put = |key: String, value: String, field: &str| {
        let key = format!("{IMAGE_UPDATER_PREFIX}{key}");
        fields.insert(key.clone(), field.to_string());
        written.insert(key, value);
    };

    let mut list = Vec::new();
    let mut list_fields = Vec::new();
    for (i, image) in entry.images.iter().enumerate() {
        let path = format!("{ref_path}.images[{i}]");
        let alias = &image.alias;
        if !valid_alias(alias) {
            skipped.push(SkippedAnnotation {
                key: format!("{resource}: {path}.alias"),
                reason: format!(
                    "{alias:?} is not a valid alias (letters, digits, `-`, `.`, `_`, starting \
                     with a letter or digit); the image is not updated"
                ),
            });
            continue;
        }
        if entry.images[..i].iter().any(|o| &o.alias == alias) {
            skipped.push(SkippedAnnotation {
                key: format!("{resource}: {path}.alias"),
                reason: format!(
                    "alias {alias:?} is used twice in this entry; the second is not updated"
                ),
            });
            continue;
        }
        // Cosign verification is not done yet: updating without it would deploy what the
        // user asked to be refused, so such an image is held instead.
        let verification = [
            (
                u.spec.images_verification.as_ref(),
                "spec.imagesVerification".to_string(),
            ),
            (
                entry.images_verification.as_ref(),
                format!("{ref_path}.imagesVerification"),
            ),
            (
                image.images_verification.as_ref(),
                format!("{path}.imagesVerification"),
            ),
        ]
        .into_iter()
        .filter_map(|(v, p)| v.map(|v| (v.enabled.unwrap_or(true), p)))
        .next_back();
        if let Some((true, field)) = verification {
            skipped.push(SkippedAnnotation {
                key: format!("{resource}: {field}"),
                reason: format!(
                    "image {alias:?}: tagpilot does not verify cosign signatures yet, so the \
                     image is not updated rather than updated unverified"
                ),
            });
            continue;
        }
        if let Some(t) = &image.manifest_targets {
            let set = [t.helm.is_some(), t.kustomize.is_some(), t.plugin.is_some()];
            if set.iter().filter(|s| **s).count() > 1 {
                skipped.push(SkippedAnnotation {
                    key: format!("{resource}: {path}.manifestTargets"),
                    reason: format!(
                        "image {alias:?}: only one of helm, kustomize and plugin may be set; the \
                         image is not updated"
                    ),
                });
                continue;
            }
            if t.plugin.is_some() {
                skipped.push(SkippedAnnotation {
                    key: format!("{resource}: {path}.manifestTargets.plugin"),
                    reason: format!(
                        "image {alias:?}: Config Management Plugin targets are not supported by \
                         tagpilot yet; the image is not updated"
                    ),
                });
                continue;
            }
        }
        list.push(format!("{alias}={}", image.image_name.trim()));
        list_fields.push(format!("{path}.imageName"));

        let mut common = Common::default();
        common.layer(u.spec.common_update_settings.as_ref(), "spec");
        common.layer(entry.common_update_settings.as_ref(), &ref_path);
        common.layer(image.common_update_settings.as_ref(), &path);
        if let Some(f) = &common.update_strategy {
            put(format!("{alias}.update-strategy"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.force_update {
            put(
                format!("{alias}.force-update"),
                f.value.to_string(),
                &f.path,
            );
        }
        if let Some(f) = &common.allow_tags {
            put(format!("{alias}.allow-tags"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.ignore_tags {
            put(format!("{alias}.ignore-tags"), f.value.join(","), &f.path);
        }
        if let Some(f) = &common.pull_secret {
            put(format!("{alias}.pull-secret"), f.value.clone(), &f.path);
        }
        if let Some(f) = &common.platforms {
            put(format!("{alias}.platforms"), f.value.join(","), &f.path);
        }
        if let Some(t) = &image.manifest_targets {
            let targets = format!("{path}.manifestTargets");
            if let Some(h) = &t.helm {
                // `spec` wins over `name` and `tag`, as upstream.
                match &h.spec {
                    Some(spec) => put(
                        format!("{alias}.helm.image-spec"),
                        spec.clone(),
                        &format!("{targets}.helm.spec"),
                    ),
                    None => {
                        if let Some(n) = &h.name {
                            put(
                                format!("{alias}.helm.image-name"),
                                n.clone(),
                                &format!("{targets}.helm.name"),
                            );
                        }
                        if let Some(t) = &h.tag {
                            put(
                                format!("{alias}.helm.image-tag"),
                                t.clone(),
                                &format!("{targets}.helm.tag"),
                            );
                        }
                    }
                }
            }
            if let Some(k) = t.kustomize.as_ref().and_then(|k| k.name.as_ref()) {
                put(
                    format!("{alias}.kustomize.image-name"),
                    k.clone(),
                    &format!("{targets}.kustomize.name"),
                );
            }
        }
    }
    if list.is_empty() {
        let mut settings = AppAnnotations::default();
        if entry.images.is_empty() {
            skipped.push(SkippedAnnotation {
                key: format!("{resource}: {ref_path}.images"),
                reason: "no images and no useAnnotations: nothing to update".to_string(),
            });
        }
        settings.skipped = skipped;
        return settings;
    }
    // One entry per image; `parse` splits at commas outside constraints.
    let image_list = list.join(", ");
    put(
        "image-list".into(),
        image_list,
        &format!("{ref_path}.images"),
    );

    let mut wb = WriteBack::default();
    wb.layer(u.spec.write_back_config.as_ref(), "spec");
    wb.layer(entry.write_back_config.as_ref(), &ref_path);
    let mut pull_request = None;
    let mut pull_request_error = None;
    if let Some(f) = &wb.method {
        let method = f.value.trim();
        // `git:secret:<name>` names a Secret in the resource's namespace.
        let method = match method.strip_prefix("git:secret:") {
            Some(name) if !name.contains('/') => {
                format!("git:secret:{}/{name}", u.namespace())
            }
            _ => method.to_string(),
        };
        let is_git = method == "git" || method.starts_with("git:");
        put("write-back-method".into(), method, &f.path);
        if is_git {
            if let Some(g) = &wb.repository {
                put("git-repository".into(), g.value.clone(), &g.path);
            }
            if let Some(g) = &wb.branch {
                put("git-branch".into(), g.value.clone(), &g.path);
            }
            if let Some(g) = &wb.target {
                put("write-back-target".into(), g.value.clone(), &g.path);
            }
            if let Some(p) = &wb.pull_request {
                match pull_request_settings(&p.value, wb.branch.as_ref()) {
                    Ok(settings) => {
                        pull_request = Some(annotations::PullRequestSettings {
                            field: format!("{resource}: {}", p.path),
                            ..settings
                        })
                    }
                    Err(reason) => {
                        pull_request_error = Some(SkippedAnnotation {
                            key: format!("{resource}: {}", p.path),
                            reason,
                        })
                    }
                }
            }
        }
    }

    let mut settings = annotations::parse(&written).unwrap_or_default();
    let list_key = format!("{IMAGE_UPDATER_PREFIX}image-list");
    for s in &mut settings.skipped {
        let field = if s.key == list_key {
            // Which image: the reason starts with its alias where it concerns one.
            list.iter()
                .zip(&list_fields)
                .find(|(entry, _)| {
                    entry
                        .split_once('=')
                        .is_some_and(|(alias, _)| s.reason.starts_with(&format!("{alias}:")))
                })
                .map(|(_, f)| f.clone())
                .unwrap_or_else(|| format!("{ref_path}.images"))
        } else {
            fields.get(&s.key).cloned().unwrap_or_else(|| s.key.clone())
        };
        s.key = format!("{resource}: {field}");
    }
    // An unreadable setting is named by the field it was written in.
    for image in &mut settings.images {
        let image_field = list
            .iter()
            .zip(&list_fields)
            .find(|(entry, _)| {
                entry
                    .split_once('=')
                    .is_some_and(|(alias, _)| alias == image.alias)
            })
            .map(|(_, f)| f.clone());
        for u in &mut image.unreadable {
            let field = if u.key == list_key {
                image_field
                    .clone()
                    .unwrap_or_else(|| format!("{ref_path}.images"))
            } else {
                fields.get(&u.key).cloned().unwrap_or_else(|| u.key.clone())
            };
            u.key = format!("{resource}: {field}");
        }
    }
    settings.skipped.extend(skipped);
    if let Some(e) = pull_request_error {
        // Pushing straight to the branch instead would skip the review the user asked for.
        settings.images.clear();
        settings.skipped.push(e);
    }
    settings.skipped.sort_by(|a, b| a.key.cmp(&b.key));
    settings.pull_request = pull_request;
    settings
}

/// `^[a-zA-Z0-9][a-zA-Z0-9-._]*$`, as the CRD validates it.
fn valid_alias(alias: &str) -> bool {
    let mut chars = alias.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphanumeric())
        && chars.all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
}

fn pull_request_settings(
    p: &PullRequest,
    branch: Option<&Field<String>>,
) -> Result<annotations::PullRequestSettings, String> {
    let provider = match (&p.github, &p.gitlab) {
        (Some(_), None) => annotations::PullRequestProvider::GitHub,
        (None, Some(_)) => annotations::PullRequestProvider::GitLab,
        (a, b) => {
            return Err(format!(
                "exactly one provider (github or gitlab) must be set, got {}; the \
                 Application is not updated",
                usize::from(a.is_some()) + usize::from(b.is_some())
            ));
        }
    };
    if let Some(b) = branch
        && b.value.contains(':')
    {
        return Err(format!(
            "{}: {:?} has the base:target form, which pull requests do not take (name only \
             the base branch); the Application is not updated",
            b.path, b.value
        ));
    }
    let mut labels: Vec<String> = Vec::new();
    for l in p.labels.iter().map(|l| l.trim()).filter(|l| !l.is_empty()) {
        if !labels.iter().any(|x| x == l) {
            labels.push(l.to_string());
        }
    }
    Ok(annotations::PullRequestSettings {
        provider,
        labels,
        field: String::new(),
    })
}

// === migration ===

/// The `ImageUpdater` resource that configures `app` as its annotations do, for teams moving to
/// Image Updater 1.x-style configuration: one `applicationRefs` entry naming the Application
/// exactly. Annotations that did not carry over are listed in a comment above it. `None` when
/// the Application has no `image-list`.
pub fn migrate(app: &Application) -> Option<String> {
    use serde_json::{Map, Value, json};
    let a = annotations::parse(&app.metadata.annotations)?;
    let mut images = Vec::new();
    let mut used: Vec<String> = Vec::new();
    for image in &a.images {
        if image.is_blocked() {
            // Written without the setting it could not read, the image would be updated more
            // widely than its annotations allow.
            continue;
        }
        let mut alias = if image.has_alias {
            image.alias.clone()
        } else {
            // An alias is required: the image's last path segment, made valid and unique.
            let base: String = image
                .image
                .rsplit('/')
                .next()
                .unwrap_or("image")
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-._".contains(c) {
                        c
                    } else {
                        '-'
                    }
                })
                .collect();
            if valid_alias(&base) {
                base
            } else {
                format!("image{base}")
            }
        };
        let mut n = 2;
        let first = alias.clone();
        while used.contains(&alias) {
            alias = format!("{first}-{n}");
            n += 1;
        }
        used.push(alias.clone());
        let mut entry = Map::new();
        entry.insert("alias".into(), json!(alias));
        let name = match &image.constraint {
            Some(c) => format!("{}:{c}", image.image),
            None => image.image.clone(),
        };
        entry.insert("imageName".into(), json!(name));
        let mut common = Map::new();
        let strategy = match image.strategy {
            UpdateStrategy::Semver => None,
            UpdateStrategy::NewestBuild => Some("newest-build"),
            UpdateStrategy::Alphabetical => Some("alphabetical"),
            UpdateStrategy::Digest => Some("digest"),
        };
        if let Some(s) = strategy {
            common.insert("updateStrategy".into(), json!(s));
        }
        if let Some(re) = &image.allow_tags {
            common.insert("allowTags".into(), json!(format!("regexp:{re}")));
        }
        if !image.ignore_tags.is_empty() {
            common.insert("ignoreTags".into(), json!(image.ignore_tags));
        }
        if !image.platforms.is_empty() {
            let platforms: Vec<String> = image.platforms.iter().map(ToString::to_string).collect();
            common.insert("platforms".into(), json!(platforms));
        }
        if let Some(p) = &image.pull_secret {
            common.insert("pullSecret".into(), json!(pull_secret_text(p)));
        }
        if image.force_update {
            common.insert("forceUpdate".into(), json!(true));
        }
        if !common.is_empty() {
            entry.insert("commonUpdateSettings".into(), Value::Object(common));
        }
        let mut targets = Map::new();
        if image.helm.is_set() {
            let mut helm = Map::new();
            for (k, v) in [
                ("name", &image.helm.name),
                ("tag", &image.helm.tag),
                ("spec", &image.helm.spec),
            ] {
                if let Some(v) = v {
                    helm.insert(k.into(), json!(v));
                }
            }
            targets.insert("helm".into(), Value::Object(helm));
        }
        if let Some(k) = &image.kustomize_image_name {
            targets.insert("kustomize".into(), json!({ "name": k }));
        }
        if !targets.is_empty() {
            entry.insert("manifestTargets".into(), Value::Object(targets));
        }
        images.push(Value::Object(entry));
    }

    let mut write_back = Map::new();
    if a.write_back_explicit {
        let method = match &a.write_back {
            annotations::WriteBackMethod::Argocd => "argocd".to_string(),
            annotations::WriteBackMethod::Git(annotations::GitCredentials::Configured) => {
                "git".to_string()
            }
            annotations::WriteBackMethod::Git(annotations::GitCredentials::RepoCreds) => {
                "git:repocreds".to_string()
            }
            annotations::WriteBackMethod::Git(annotations::GitCredentials::Secret {
                namespace,
                name,
            }) => format!("git:secret:{namespace}/{name}"),
        };
        write_back.insert("method".into(), json!(method));
    }
    let mut git = Map::new();
    if let Some(r) = &a.git_repository {
        git.insert("repository".into(), json!(r));
    }
    if let Some(b) = &a.git_branch {
        let text = match (&b.base, &b.target) {
            (Some(base), Some(t)) => format!("{base}:{t}"),
            (Some(base), None) => base.clone(),
            (None, Some(t)) => format!(":{t}"),
            (None, None) => String::new(),
        };
        git.insert("branch".into(), json!(text));
    }
    if let Some(t) = &a.write_back_target {
        let text = match t {
            annotations::WriteBackTarget::Kustomization(None) => "kustomization".to_string(),
            annotations::WriteBackTarget::Kustomization(Some(d)) => format!("kustomization:{d}"),
            annotations::WriteBackTarget::HelmValues(None) => "helmvalues".to_string(),
            annotations::WriteBackTarget::HelmValues(Some(f)) => format!("helmvalues:{f}"),
        };
        git.insert("writeBackTarget".into(), json!(text));
    }
    if !git.is_empty() {
        write_back.insert("gitConfig".into(), Value::Object(git));
    }
    let mut entry = Map::new();
    entry.insert("namePattern".into(), json!(app.metadata.name));
    if !write_back.is_empty() {
        entry.insert("writeBackConfig".into(), Value::Object(write_back));
    }
    entry.insert("images".into(), Value::Array(images));
    let namespace = app
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    let resource = json!({
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": app.metadata.name, "namespace": namespace},
        "spec": {"applicationRefs": [Value::Object(entry)]},
    });
    let mut out = format!(
        "# From the annotations of Application {namespace}/{}",
        app.metadata.name
    );
    if !app.origin.is_empty() {
        out.push_str(&format!(" ({})", app.origin));
    }
    out.push('\n');
    for s in &a.skipped {
        out.push_str(&format!("# not carried over: {}: {}\n", s.key, s.reason));
    }
    for image in &a.images {
        for u in &image.unreadable {
            out.push_str(&format!(
                "# not carried over: image {:?} is left out: {u}\n",
                image.alias
            ));
        }
    }
    out.push_str(&serde_saphyr::to_string(&resource).expect("a JSON value serialises as YAML"));
    Some(out)
}

fn pull_secret_text(p: &annotations::PullSecret) -> String {
    match p {
        annotations::PullSecret::PullSecret { namespace, name } => {
            format!("pullsecret:{namespace}/{name}")
        }
        annotations::PullSecret::Secret {
            namespace,
            name,
            field,
        } => format!("secret:{namespace}/{name}#{field}"),
        annotations::PullSecret::Env(var) => format!("env:{var}"),
        annotations::PullSecret::Ext(script) => format!("ext:{script}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::argocd::annotations::{UpdateStrategy, WriteBackMethod};

    fn app(name: &str, labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> Application {
        let mut a = Application::default();
        a.metadata.name = name.to_string();
        a.metadata.namespace = Some("argocd".to_string());
        a.metadata.labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        a.metadata.annotations = annotations
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        a
    }

    fn updaters(yaml: &str) -> Vec<ImageUpdater> {
        read_documents(Path::new("updaters.yaml"), yaml).expect("valid resources")
    }

    fn select_one(a: Application, yaml: &str) -> Selected {
        let s = select(vec![(a, Origin::Git)], &updaters(yaml));
        assert!(s.problems.is_empty(), "{:?}", s.problems);
        s.apps.into_iter().next().unwrap()
    }

    const SAMPLE: &str = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata:
  name: updater
  namespace: argocd
spec:
  commonUpdateSettings:
    updateStrategy: semver
    ignoreTags: [latest]
  writeBackConfig:
    method: git
    gitConfig:
      branch: main
  applicationRefs:
    - namePattern: "*"
      images:
        - alias: any
          imageName: ghcr.io/acme/any:1.x
    - namePattern: "web-*"
      commonUpdateSettings:
        updateStrategy: newest-build
      images:
        - alias: web
          imageName: ghcr.io/acme/web
          commonUpdateSettings:
            platforms: [linux/arm64]
          manifestTargets:
            helm:
              name: web.image.repository
              tag: web.image.tag
    - namePattern: "web-prod"
      images:
        - alias: prod
          imageName: ghcr.io/acme/web:~1.4
    - namePattern: "web-*"
      labelSelectors:
        matchLabels:
          tier: canary
      images:
        - alias: canary
          imageName: ghcr.io/acme/web:>=2.0.0-0
"#;

    #[test]
    fn the_most_specific_entry_wins() {
        let pick = |a: Application| {
            let s = select_one(a, SAMPLE);
            s.settings.unwrap().images[0].alias.clone()
        };
        // An exact name beats every pattern.
        assert_eq!(pick(app("web-prod", &[("tier", "canary")], &[])), "prod");
        // A label selector beats more literal characters.
        assert_eq!(pick(app("web-dev", &[("tier", "canary")], &[])), "canary");
        // More literal characters beat `*`.
        assert_eq!(pick(app("web-dev", &[], &[])), "web");
        assert_eq!(pick(app("api", &[], &[])), "any");
    }

    #[test]
    fn settings_inherit_from_spec_to_entry_to_image() {
        let s = select_one(app("web-dev", &[], &[]), SAMPLE);
        assert_eq!(
            s.configured_by.map(|c| c.to_string()).as_deref(),
            Some(r#"ImageUpdater argocd/updater (applicationRefs[1], namePattern "web-*")"#)
        );
        let settings = s.settings.unwrap();
        let image = &settings.images[0];
        // The entry's strategy overrides the spec's; the spec's ignoreTags is inherited; the
        // image adds platforms.
        assert_eq!(image.strategy, UpdateStrategy::NewestBuild);
        assert_eq!(image.ignore_tags, ["latest"]);
        assert_eq!(image.platforms.len(), 1);
        assert_eq!(image.helm.name.as_deref(), Some("web.image.repository"));
        assert_eq!(image.helm.tag.as_deref(), Some("web.image.tag"));
        assert!(matches!(settings.write_back, WriteBackMethod::Git(_)));
        assert_eq!(
            settings.git_branch.as_ref().and_then(|b| b.base.clone()),
            Some("main".to_string())
        );
    }

    #[test]
    fn a_resource_and_the_equivalent_annotations_say_the_same() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  writeBackConfig:
    method: git
    gitConfig: {branch: main, writeBackTarget: "kustomization:../base"}
  applicationRefs:
    - namePattern: shop
      images:
        - alias: api
          imageName: registry.example/shop/api:>=1.2, <2.0
          commonUpdateSettings:
            allowTags: "regexp:^1\\."
            ignoreTags: ["*-rc*", "1.3.0"]
            forceUpdate: true
          manifestTargets:
            kustomize: {name: shop-api}
"#;
        let from_resource = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
        let iu = IMAGE_UPDATER_PREFIX;
        let annotated: BTreeMap<String, String> = [
            ("image-list", "api=registry.example/shop/api:>=1.2, <2.0"),
            ("api.allow-tags", "regexp:^1\\."),
            ("api.ignore-tags", "*-rc*, 1.3.0"),
            ("api.force-update", "true"),
            ("api.kustomize.image-name", "shop-api"),
            ("write-back-method", "git"),
            ("git-branch", "main"),
            ("write-back-target", "kustomization:../base"),
        ]
        .into_iter()
        .map(|(k, v)| (format!("{iu}{k}"), v.to_string()))
        .collect();
        let from_annotations = annotations::parse(&annotated).unwrap();
        assert_eq!(
            format!("{:?}", from_resource.images),
            format!("{:?}", from_annotations.images)
        );
        assert_eq!(from_resource.write_back, from_annotations.write_back);
        assert_eq!(
            from_resource.write_back_target,
            from_annotations.write_back_target
        );
        assert!(
            from_resource.skipped.is_empty(),
            "{:?}",
            from_resource.skipped
        );
    }

    #[test]
    fn use_annotations_reads_the_application_and_ignores_the_entrys_settings() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  applicationRefs:
    - namePattern: "*"
      useAnnotations: true
      labelSelectors:
        matchExpressions:
          - {key: team, operator: In, values: [shop, pay]}
      images:
        - {alias: ignored, imageName: nginx}
"#;
        let annotated = app(
            "shop",
            &[("team", "shop")],
            &[(
                "argocd-image-updater.argoproj.io/image-list",
                "web=nginx:1.x",
            )],
        );
        let settings = select_one(annotated, yaml).settings.unwrap();
        assert_eq!(settings.images.len(), 1);
        assert_eq!(settings.images[0].alias, "web");
        assert!(
            settings.skipped[0]
                .reason
                .contains("useAnnotations is true"),
            "{:?}",
            settings.skipped
        );
        // The selector leaves other teams out.
        let other = app(
            "shop",
            &[("team", "ops")],
            &[("argocd-image-updater.argoproj.io/image-list", "nginx")],
        );
        let settings = select_one(other, yaml).settings.unwrap();
        assert!(settings.images.is_empty());
        assert!(settings.skipped[0].reason.contains("none in namespace"));
    }

    #[test]
    fn without_resources_annotations_alone_count() {
        let annotated = app(
            "shop",
            &[],
            &[("argocd-image-updater.argoproj.io/image-list", "nginx")],
        );
        let s = select(vec![(annotated, Origin::Git)], &[]);
        assert_eq!(s.apps[0].settings.as_ref().unwrap().images.len(), 1);
        assert!(s.apps[0].configured_by.is_none());
    }

    #[test]
    fn two_resources_selecting_one_application_are_a_conflict() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: a, namespace: argocd}
spec:
  applicationRefs: [{namePattern: "shop*", images: [{alias: x, imageName: nginx}]}]
---
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: b, namespace: argocd}
spec:
  applicationRefs: [{namePattern: "*", images: [{alias: y, imageName: nginx}]}]
---
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: c, namespace: elsewhere}
spec:
  applicationRefs: [{namePattern: "*", images: [{alias: z, imageName: nginx}]}]
"#;
        let s = select_one(app("shop", &[], &[]), yaml);
        assert!(s.settings.unwrap().images.is_empty());
        assert_eq!(s.problems.len(), 1);
        let p = &s.problems[0];
        assert!(p.contains("argocd/a") && p.contains("argocd/b"), "{p}");
        // The resource in another namespace selects nothing here.
        assert!(!p.contains("elsewhere"), "{p}");
    }

    #[test]
    fn what_tagpilot_cannot_honour_is_reported_by_resource_and_field() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  imagesVerification:
    cosignKey: {secretName: cosign, key: cosign.pub}
  applicationRefs:
    - namePattern: shop
      images:
        - alias: signed
          imageName: nginx
        - alias: unsigned
          imageName: nginx
          imagesVerification: {enabled: false}
        - alias: plugin
          imageName: nginx
          imagesVerification: {enabled: false}
          manifestTargets:
            plugin: {spec: IMAGE}
        - alias: strategy
          imageName: nginx
          imagesVerification: {enabled: false}
          commonUpdateSettings: {updateStrategy: fastest}
"#;
        let settings = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
        let aliases: Vec<&str> = settings.images.iter().map(|i| i.alias.as_str()).collect();
        assert_eq!(aliases, ["unsigned", "strategy"]);
        let keys: Vec<&str> = settings.skipped.iter().map(|s| s.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "ImageUpdater argocd/u: spec.applicationRefs[0].images[2].manifestTargets.plugin",
                "ImageUpdater argocd/u: spec.imagesVerification",
            ]
        );
        assert!(settings.skipped[1].reason.contains("\"signed\""));
        // An unknown strategy blocks its image (issue 17), named by the field it was written in.
        let strategy = &settings.images[1];
        assert!(strategy.is_blocked());
        assert_eq!(
            strategy.unreadable[0].to_string(),
            "ImageUpdater argocd/u: spec.applicationRefs[0].images[3].commonUpdateSettings.updateStrategy \
             `fastest` cannot be read: not an update strategy (semver, newest-build, latest, \
             alphabetical, name, digest)"
        );
    }

    /// Issue 17, "Filters fail closed", for resources: each unreadable filter, range or
    /// strategy, inherited or the image's own, blocks that image under its field; the other
    /// images of the entry are updated.
    #[test]
    fn an_unreadable_setting_in_a_resource_blocks_its_image_under_its_field() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  commonUpdateSettings: {allowTags: "regexp:^v("}
  applicationRefs:
    - namePattern: shop
      images:
        - {alias: inherits, imageName: r.example/a}
        - alias: ok
          imageName: r.example/b
          commonUpdateSettings: {allowTags: "RegExp:^v1"}
        - alias: globs
          imageName: r.example/c
          commonUpdateSettings: {allowTags: any, ignoreTags: ["dev", "[z-a]"]}
        - alias: platform
          imageName: r.example/d
          commonUpdateSettings: {allowTags: any, platforms: [linux]}
        - alias: range
          imageName: "r.example/e:~>1.x.y"
          commonUpdateSettings: {allowTags: any}
"#;
        let settings = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
        let blocked: Vec<(&str, Vec<String>)> = settings
            .images
            .iter()
            .map(|i| {
                let fields = i.unreadable.iter().map(|u| u.key.clone()).collect();
                (i.alias.as_str(), fields)
            })
            .collect();
        let r = |f: &str| format!("ImageUpdater argocd/u: {f}");
        assert_eq!(
            blocked,
            [
                ("inherits", vec![r("spec.commonUpdateSettings.allowTags")]),
                ("ok", vec![]),
                (
                    "globs",
                    vec![r(
                        "spec.applicationRefs[0].images[2].commonUpdateSettings.ignoreTags"
                    )]
                ),
                (
                    "platform",
                    vec![r(
                        "spec.applicationRefs[0].images[3].commonUpdateSettings.platforms"
                    )]
                ),
                (
                    "range",
                    vec![r("spec.applicationRefs[0].images[4].imageName")]
                ),
            ]
        );
        assert_eq!(settings.images[1].allow_tags.as_deref(), Some("^v1"));
    }

    #[test]
    fn the_removed_spec_namespace_is_read_with_a_warning() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  namespace: apps
  applicationRefs: [{namePattern: shop, images: [{alias: x, imageName: nginx}]}]
"#;
        let s = select(vec![(app("shop", &[], &[]), Origin::Git)], &updaters(yaml));
        assert_eq!(s.warnings.len(), 1);
        assert!(
            s.warnings[0].contains("spec.namespace"),
            "{}",
            s.warnings[0]
        );
        assert_eq!(s.apps[0].settings.as_ref().unwrap().images.len(), 1);
    }

    #[test]
    fn a_misspelt_field_is_an_error_with_its_place() {
        let yaml = "apiVersion: argocd-image-updater.argoproj.io/v1alpha1\nkind: ImageUpdater\nmetadata: {name: u}\nspec:\n  applicationRefs:\n    - namePatern: shop\n";
        let e = read_documents(Path::new("u.yaml"), yaml).unwrap_err();
        assert!(e.message.contains("u.yaml:6"), "{}", e.message);
        assert!(e.message.contains("namePatern"), "{}", e.message);
    }

    #[test]
    fn pull_requests_need_exactly_one_provider() {
        let yaml = r#"
apiVersion: argocd-image-updater.argoproj.io/v1alpha1
kind: ImageUpdater
metadata: {name: u, namespace: argocd}
spec:
  writeBackConfig:
    method: git
    gitConfig:
      branch: main
      pullRequest: {github: {}, labels: [deps, " deps ", ""]}
  applicationRefs:
    - namePattern: shop
      images: [{alias: x, imageName: nginx}]
    - namePattern: both
      writeBackConfig:
        gitConfig:
          pullRequest: {github: {}, gitlab: {}}
      images: [{alias: x, imageName: nginx}]
"#;
        let shop = select_one(app("shop", &[], &[]), yaml).settings.unwrap();
        let pr = shop.pull_request.unwrap();
        assert_eq!(pr.provider, annotations::PullRequestProvider::GitHub);
        assert_eq!(pr.labels, ["deps"]);
        let both = select_one(app("both", &[], &[]), yaml).settings.unwrap();
        assert!(both.images.is_empty(), "nothing is pushed instead of a PR");
        assert!(both.skipped[0].reason.contains("exactly one provider"));
    }

    #[test]
    fn go_glob_patterns() {
        let m = |p: &str, n: &str| go_glob(p).unwrap().is_match(n);
        assert!(m("app-[0-9]*", "app-1x"));
        assert!(m("app-[^0-9]", "app-x"));
        assert!(!m("app-[^0-9]", "app-1"));
        assert!(m("a?c", "abc"));
        assert!(!m("a*", "a/b"));
    }

    #[test]
    fn a_migrated_resource_configures_the_application_as_its_annotations_did() {
        let iu = IMAGE_UPDATER_PREFIX;
        let pairs = [
            (
                "image-list",
                "api=registry.example/shop/api:>=1.2, <2.0, registry.example/shop/worker, web=nginx:~1.26",
            ),
            ("api.allow-tags", "regexp:^1\\."),
            ("api.ignore-tags", "*-rc*"),
            ("api.pull-secret", "pullsecret:argocd/regcred"),
            ("api.kustomize.image-name", "shop-api"),
            ("api.update-strategy", "semver"),
            ("update-strategy", "newest-build"),
            ("web.update-strategy", "semver"),
            ("web.platforms", "linux/arm64"),
            ("web.helm.image-name", "web.image.repository"),
            ("web.helm.image-tag", "web.image.tag"),
            ("web.force-update", "true"),
            ("write-back-method", "git:secret:argocd/git-creds"),
            ("git-branch", "main:image-updater-{{.SHA256}}"),
            ("write-back-target", "helmvalues:/charts/values.yaml"),
            ("git-repository", "https://git.example/m.git"),
            ("git-commit-user", "someone"),
        ];
        let annotations: Vec<(String, &str)> = pairs
            .iter()
            .map(|(k, v)| (format!("{iu}{k}"), *v))
            .collect();
        let refs: Vec<(&str, &str)> = annotations.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        let annotated = app("shop", &[], &refs);
        let yaml = migrate(&annotated).unwrap();
        assert!(
            yaml.contains("# not carried over: argocd-image-updater.argoproj.io/git-commit-user"),
            "{yaml}"
        );

        let from_resource = select_one(app("shop", &[], &[]), &yaml).settings.unwrap();
        let from_annotations = annotations::parse(&annotated.metadata.annotations).unwrap();
        // Aliases: the unaliased worker gets one of its own; everything else is the same.
        let strip = |a: &AppAnnotations| -> Vec<String> {
            a.images
                .iter()
                .map(|i| {
                    let mut i = i.clone();
                    i.alias = String::new();
                    i.has_alias = false;
                    format!("{i:?}")
                })
                .collect()
        };
        pretty_assertions::assert_eq!(strip(&from_resource), strip(&from_annotations));
        assert_eq!(from_resource.images[1].alias, "worker");
        assert_eq!(from_resource.write_back, from_annotations.write_back);
        assert_eq!(
            from_resource.write_back_target,
            from_annotations.write_back_target
        );
        assert_eq!(
            from_resource.git_repository,
            from_annotations.git_repository
        );
        let branch = |a: &AppAnnotations| {
            a.git_branch
                .as_ref()
                .map(|b| (b.base.clone(), b.target.clone()))
        };
        assert_eq!(branch(&from_resource), branch(&from_annotations));
        assert!(
            from_resource.skipped.is_empty(),
            "{:?}",
            from_resource.skipped
        );
    }

    /// An image whose filter cannot be read is left out of the migrated resource, with the
    /// reason in a comment: written without that filter, it would be updated more widely.
    #[test]
    fn a_migrated_resource_leaves_out_an_image_whose_filter_cannot_be_read() {
        let iu = IMAGE_UPDATER_PREFIX;
        let list = format!("{iu}image-list");
        let allow = format!("{iu}api.allow-tags");
        let annotated = app(
            "shop",
            &[],
            &[
                (list.as_str(), "api=r.example/api, web=r.example/web"),
                (allow.as_str(), "regexp:^v("),
            ],
        );
        let yaml = migrate(&annotated).unwrap();
        assert!(
            yaml.contains(&format!(
                "# not carried over: image \"api\" is left out: {allow} `regexp:^v(` cannot be read"
            )),
            "{yaml}"
        );
        let from_resource = select_one(app("shop", &[], &[]), &yaml).settings.unwrap();
        let aliases: Vec<&str> = from_resource
            .images
            .iter()
            .map(|i| i.alias.as_str())
            .collect();
        assert_eq!(aliases, ["web"]);
    }
}
