//! Version labels that follow an image's tag (issue 21): in the same resource as a container
//! image tagpilot moves, the labels and annotations that carry that image's version
//! (`app.kubernetes.io/version`, Datadog's `tags.datadoghq.com/version` and
//! `tags.datadoghq.com/<container>.version`, a Pod template's `version`; the keys are the
//! policy's `versionLabels`) move with it, when they hold the old tag or the old tag's version
//! (`v1.2.3` → `1.2.3`).
//!
//! Where: the resource's `metadata`, its Pod template's `metadata`, and a CronJob's
//! `jobTemplate` `metadata`; labels and annotations alike, except the Pod-template-only keys
//! (`podLabels`), read among the Pod template's labels only. Never a selector
//! (`spec.selector`, immutable once applied), and never a Pod template label the selector also
//! names (the template's labels must keep matching it) or that a Service or
//! PodDisruptionBudget in the same file selects Pods by.
//!
//! A key that fits no container alone (`app.kubernetes.io/version`) follows only when every
//! image moving in the resource moves it to one value; a label that holds neither the old tag
//! nor its version is left alone. Either is said ([`LeftLabel`]), never dropped silently.
//!
//! Only workloads written as plain manifests: kustomize `images:` and Helm values name no
//! resource here, so their labels are not followed. Pure, like the rest of `manifest`: the
//! edits come out as [`Edit`]s, verified with the image edits by [`super::apply_edits`].

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use crate::config::version_labels::{CONTAINER, VersionLabels};

use super::render::Quote;
use super::tree::{self, Node, NodeKind};
use super::{Edit, ImageField, ManifestError, Part, Shape, Slot};

/// A container image that moves to `tag`, with the keys its policy says follow it.
#[derive(Debug, Clone, Copy)]
pub struct ImageMove<'a> {
    pub field: &'a ImageField,
    pub tag: &'a str,
    pub labels: &'a VersionLabels,
}

/// What following the moves' version labels came to.
#[derive(Debug, Default)]
pub struct VersionLabelEdits {
    pub moved: Vec<MovedLabel>,
    pub left: Vec<LeftLabel>,
}

/// A label that follows: its edit, and which moves (indices into the moves given) it follows.
#[derive(Debug, Clone)]
pub struct MovedLabel {
    pub moves: Vec<usize>,
    pub edit: Edit,
    pub label: Label,
    pub from: String,
    pub to: String,
}

/// A label that looks like one of the moves' version but is left alone, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftLabel {
    pub moves: Vec<usize>,
    pub label: Label,
    pub reason: LeftReason,
}

/// Which label: its resource, where in it, its key and line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Label {
    /// `Deployment/web`, as [`super::FieldKind::Container`] names it.
    pub resource: String,
    /// `metadata.labels`, `spec.template.metadata.annotations`, …
    pub place: String,
    pub key: String,
    /// 1-based, of its value.
    pub line: usize,
}

impl fmt::Display for Label {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.resource, self.place, self.key)
    }
}

/// Why a version label stays as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeftReason {
    /// It holds neither the old tag nor the old tag's version: it may say something else on
    /// purpose, so it is not guessed at.
    Disagrees { value: String, tags: Vec<String> },
    /// Several images move in the resource, to different values (or it holds only some of
    /// their old versions): which one it means is not known.
    Ambiguous { moving: Vec<String> },
    /// A Pod template label the selector also names: it must keep matching the selector, which
    /// cannot change.
    Selector,
    /// A Pod template label with this value is what a Service or PodDisruptionBudget of the
    /// same file (`by`) selects Pods by: moving it would leave that without Pods.
    SelectedBy { by: String },
    /// Not a plain or quoted scalar (an alias, a block scalar, an anchored or empty value).
    Unwritable { what: &'static str },
}

impl fmt::Display for LeftReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeftReason::Disagrees { value, tags } => write!(
                f,
                "its value {value:?} is neither the old tag nor its version ({})",
                tags.join(", ")
            ),
            LeftReason::Ambiguous { moving } => write!(
                f,
                "several images move in this resource ({}); name a container in the key (tags.datadoghq.com/<container>.version) to follow one",
                moving.join(", ")
            ),
            LeftReason::Selector => f.write_str(
                "the selector names it too, and a selector cannot change; the Pod template's labels must keep matching it",
            ),
            LeftReason::SelectedBy { by } => write!(
                f,
                "{by} in the same file selects Pods by it; move both together by hand"
            ),
            LeftReason::Unwritable { what } => write!(f, "its value is {what}"),
        }
    }
}

/// One moving container of a resource.
struct Moving<'a> {
    index: usize,
    container: String,
    from: &'a str,
    to: &'a str,
    labels: &'a VersionLabels,
}

/// A `metadata` of a resource and what it is.
struct Place<'n> {
    path: &'static str,
    node: &'n Node,
    pod: bool,
}

/// The version labels that follow `moves` in `src`. `fields` are every field scanned in the
/// file: a label that is a field itself (a marked scalar) is that field's, never also a label.
pub fn version_labels(
    path: &Path,
    src: &str,
    fields: &[ImageField],
    moves: &[ImageMove<'_>],
) -> Result<VersionLabelEdits, ManifestError> {
    let mut out = VersionLabelEdits::default();
    // Only a whole reference can be a container's image; a file without one is not read again.
    if moves
        .iter()
        .all(|m| m.labels.is_off() || !matches!(m.field.shape, Shape::Whole { .. }))
    {
        return Ok(out);
    }
    let claimed: HashSet<usize> = fields.iter().flat_map(ImageField::slot_starts).collect();
    // A Service anywhere in the file may select the Pods by a label that would move.
    let mut selecting = Vec::new();
    tree::parse_each(src, |parsed| {
        for doc in &parsed.docs {
            pod_selectors(doc, &mut selecting);
        }
    })
    .map_err(|f| ManifestError::unreadable(path, f))?;
    let mut walk = Walk {
        path,
        moves,
        claimed: &claimed,
        selecting: &selecting,
        out: &mut out,
    };
    tree::parse_each(src, |parsed| {
        for doc in &parsed.docs {
            walk.document(doc);
        }
    })
    .map_err(|f| ManifestError::unreadable(path, f))?;
    Ok(out)
}

struct Walk<'a, 'm> {
    path: &'a Path,
    moves: &'a [ImageMove<'m>],
    claimed: &'a HashSet<usize>,
    /// Every Service and PodDisruptionBudget of the file (`Service/name`) and each label it
    /// selects Pods by (key, value).
    selecting: &'a [(String, String, String)],
    out: &'a mut VersionLabelEdits,
}

impl<'m> Walk<'_, 'm> {
    fn document(&mut self, doc: &Node) {
        let Some(kind) = doc.get("kind").and_then(Node::scalar) else {
            return;
        };
        if kind == "List" {
            for item in doc.get("items").map(Node::items).unwrap_or_default() {
                self.document(item);
            }
            return;
        }
        // (the Pod template's parent, the path to it)
        let (template, template_path, job): (Option<&Node>, &'static str, Option<&Node>) =
            match kind {
                "CronJob" => (
                    doc.get_path(&["spec", "jobTemplate", "spec", "template"]),
                    "spec.jobTemplate.spec.template.metadata",
                    doc.get_path(&["spec", "jobTemplate"]),
                ),
                "Deployment"
                | "StatefulSet"
                | "DaemonSet"
                | "ReplicaSet"
                | "ReplicationController"
                | "Job"
                | "Rollout" => (
                    doc.get_path(&["spec", "template"]),
                    "spec.template.metadata",
                    None,
                ),
                _ => return,
            };
        let Some(template) = template else { return };
        let resource = match doc.get_path(&["metadata", "name"]).and_then(Node::scalar) {
            Some(name) => format!("{kind}/{name}"),
            None => kind.to_string(),
        };
        let moving = self.moving(template.get("spec"));
        if moving.is_empty() {
            return;
        }
        let selector = job.unwrap_or(doc).get_path(&["spec", "selector"]);
        let selector = selector_keys(selector);
        let mut places = Vec::new();
        places.extend(doc.get("metadata").map(|node| Place {
            path: "metadata",
            node,
            pod: false,
        }));
        places.extend(job.and_then(|j| j.get("metadata")).map(|node| Place {
            path: "spec.jobTemplate.metadata",
            node,
            pod: false,
        }));
        places.extend(template.get("metadata").map(|node| Place {
            path: template_path,
            node,
            pod: true,
        }));
        for place in &places {
            for (map, labels) in [("labels", true), ("annotations", false)] {
                let Some(map_node) = place.node.get(map) else {
                    continue;
                };
                for (key, value) in map_node.entries() {
                    let Some(key) = key.scalar() else { continue };
                    let label = Label {
                        resource: resource.clone(),
                        place: format!("{}.{map}", place.path),
                        key: key.to_string(),
                        line: value.line,
                    };
                    let pod_label = place.pod && labels;
                    let follows = following(&moving, key, pod_label);
                    if follows.is_empty() || self.claimed.contains(&value.range.start) {
                        continue;
                    }
                    let selected = if pod_label {
                        self.selected(key, value, &selector)
                    } else {
                        None
                    };
                    self.label(label, value, &follows, selected);
                }
            }
        }
    }

    /// Why a Pod template label `key` holding `value` stays whatever it should hold: the
    /// workload's `selector` names it, or a Service or PodDisruptionBudget of the file selects
    /// Pods by it.
    fn selected(&self, key: &str, value: &Node, selector: &HashSet<String>) -> Option<LeftReason> {
        if selector.contains(key) {
            return Some(LeftReason::Selector);
        }
        let (by, ..) = self
            .selecting
            .iter()
            .find(|(_, k, v)| k == key && value.scalar() == Some(v.as_str()))?;
        Some(LeftReason::SelectedBy { by: by.clone() })
    }

    /// The moving containers of a Pod spec: those whose image scalar is a moved field's.
    fn moving(&self, spec: Option<&Node>) -> Vec<Moving<'m>> {
        let mut out = Vec::new();
        let Some(spec) = spec else { return out };
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            let items = spec.get(list).map(Node::items).unwrap_or_default();
            for (i, container) in items.iter().enumerate() {
                let Some(image) = container.get("image").filter(|n| !n.range.is_empty()) else {
                    continue;
                };
                let found = self
                    .moves
                    .iter()
                    .enumerate()
                    .find(|(_, m)| match &m.field.shape {
                        Shape::Whole { slot, .. } => slot.range.start == image.range.start,
                        _ => false,
                    });
                let Some((index, &m)) = found else { continue };
                let Some(from) = m.field.tag.as_deref() else {
                    continue;
                };
                let container = match container.get("name").and_then(Node::scalar) {
                    Some(n) => n.to_string(),
                    None => format!("#{i}"),
                };
                out.push(Moving {
                    index,
                    container,
                    from,
                    to: m.tag,
                    labels: m.labels,
                });
            }
        }
        out
    }

    /// Follows one label whose key names the moving containers `follows`, or says why not.
    fn label(
        &mut self,
        label: Label,
        value: &Node,
        follows: &[&Moving<'_>],
        selected: Option<LeftReason>,
    ) {
        let moves: Vec<usize> = follows.iter().map(|m| m.index).collect();
        let mut leave = |reason| {
            self.out.left.push(LeftLabel {
                moves: moves.clone(),
                label: label.clone(),
                reason,
            })
        };
        let slot = match slot(value) {
            Ok(slot) => slot,
            Err(what) => return leave(LeftReason::Unwritable { what }),
        };
        let wanted: Vec<Option<String>> = follows
            .iter()
            .map(|m| new_value(&slot.value, m.from, m.to))
            .collect();
        let to = match wanted.first() {
            Some(Some(first)) if wanted.iter().all(|w| w.as_ref() == Some(first)) => first.clone(),
            _ if wanted.iter().all(Option::is_none) => {
                let mut tags: Vec<String> = Vec::new();
                for m in follows {
                    for t in [m.from.to_string(), version_of(m.from).to_string()] {
                        if !tags.contains(&t) {
                            tags.push(t);
                        }
                    }
                }
                return leave(LeftReason::Disagrees {
                    value: slot.value.clone(),
                    tags,
                });
            }
            _ => {
                let moving = follows
                    .iter()
                    .map(|m| format!("{} {} → {}", m.container, m.from, m.to))
                    .collect();
                return leave(LeftReason::Ambiguous { moving });
            }
        };
        if to == slot.value {
            return;
        }
        if let Some(reason) = selected {
            return leave(reason);
        }
        let mut edits = Vec::new();
        if super::edit::replace(self.path, &slot, &to, &mut edits).is_err() {
            // `slot` refuses block scalars already, the one scalar the editor refuses.
            return leave(LeftReason::Unwritable {
                what: "a block scalar (`|` or `>`)",
            });
        }
        for edit in edits {
            self.out.moved.push(MovedLabel {
                moves: moves.clone(),
                edit,
                label: label.clone(),
                from: slot.value.clone(),
                to: to.clone(),
            });
        }
    }
}

/// The moving containers a label's `key` follows: every one whose keys name it, or, for a key
/// with `<container>`, the one it names. `pod_label`: the label is among the Pod template's
/// labels, where the Pod-only keys count too.
fn following<'a, 'm>(moving: &'a [Moving<'m>], key: &str, pod_label: bool) -> Vec<&'a Moving<'m>> {
    moving
        .iter()
        .filter(|m| {
            m.labels
                .keys
                .iter()
                .any(|k| key_matches(k, key, &m.container))
                || (pod_label && m.labels.pod_labels.iter().any(|k| k == key))
        })
        .collect()
}

/// Whether the configured key `pattern` names `key` for a container called `container`.
fn key_matches(pattern: &str, key: &str, container: &str) -> bool {
    match pattern.split_once(CONTAINER) {
        None => pattern == key,
        Some((prefix, suffix)) => key
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(suffix))
            .is_some_and(|name| name == container),
    }
}

/// The labels each Service and PodDisruptionBudget of `doc` (a List's items too) selects Pods
/// by: (`Kind/name`, key, value).
fn pod_selectors(doc: &Node, out: &mut Vec<(String, String, String)>) {
    let kind = doc.get("kind").and_then(Node::scalar);
    let selector = match kind {
        Some("List") => {
            for item in doc.get("items").map(Node::items).unwrap_or_default() {
                pod_selectors(item, out);
            }
            return;
        }
        Some("Service") => doc.get_path(&["spec", "selector"]),
        Some("PodDisruptionBudget") => doc.get_path(&["spec", "selector", "matchLabels"]),
        _ => return,
    };
    let kind = kind.unwrap_or_default();
    let name = match doc.get_path(&["metadata", "name"]).and_then(Node::scalar) {
        Some(n) => format!("{kind}/{n}"),
        None => kind.to_string(),
    };
    for (k, v) in selector.map(Node::entries).unwrap_or_default() {
        if let (Some(k), Some(v)) = (k.scalar(), v.scalar()) {
            out.push((name.clone(), k.to_string(), v.to_string()));
        }
    }
}

/// The keys a selector names: `matchLabels`, `matchExpressions[].key`, or a plain map of
/// labels (a ReplicationController's).
fn selector_keys(selector: Option<&Node>) -> HashSet<String> {
    let mut keys = HashSet::new();
    let Some(selector) = selector else {
        return keys;
    };
    for (k, v) in selector.entries() {
        match k.scalar() {
            Some("matchLabels") => {
                keys.extend(
                    v.entries()
                        .iter()
                        .filter_map(|(k, _)| k.scalar())
                        .map(str::to_string),
                );
            }
            Some("matchExpressions") => {
                keys.extend(
                    v.items()
                        .iter()
                        .filter_map(|e| e.get("key").and_then(Node::scalar))
                        .map(str::to_string),
                );
            }
            Some(k) => {
                keys.insert(k.to_string());
            }
            None => {}
        }
    }
    keys
}

/// A tag's version: the tag without the `v` of a version (`v1.2.3` → `1.2.3`); any other tag
/// is its own version.
fn version_of(tag: &str) -> &str {
    match crate::version::TagVersion::parse(tag) {
        Some(v) if v.v_prefix => &tag[1..],
        _ => tag,
    }
}

/// What a label holding `value` becomes when its image moves `from` → `to`: the new tag where
/// it held the old tag, the new tag's version where it held the old tag's version; itself
/// where it holds the new one already (someone moved it ahead of the image); `None` when it
/// holds none of them.
fn new_value(value: &str, from: &str, to: &str) -> Option<String> {
    if value == from {
        Some(to.to_string())
    } else if value == version_of(from) {
        Some(version_of(to).to_string())
    } else if value == to || value == version_of(to) {
        Some(value.to_string())
    } else {
        None
    }
}

/// The label's value as a scalar the editor can write, or what it is instead.
fn slot(value: &Node) -> Result<Slot, &'static str> {
    match &value.kind {
        NodeKind::Scalar { .. } if value.range.is_empty() => Err("empty"),
        NodeKind::Scalar { .. } if value.anchored => {
            Err("anchored (aliases elsewhere read it too)")
        }
        NodeKind::Scalar { value: text, style } => match Quote::of(*style) {
            Some(quote) => Ok(Slot {
                range: value.range.clone(),
                value: text.clone(),
                quote: Some(quote),
                in_flow: value.in_flow,
                tagged: value.tagged,
                line: value.line,
                column: value.column,
            }),
            None => Err("a block scalar (`|` or `>`)"),
        },
        NodeKind::Alias => Err("an alias"),
        _ => Err("not a single value"),
    }
}

// === impl ImageField ===

impl ImageField {
    /// Where each scalar the field is made of starts.
    fn slot_starts(&self) -> Vec<usize> {
        match &self.shape {
            Shape::Whole { slot, .. } | Shape::Single { slot, .. } => vec![slot.range.start],
            Shape::Split { tag, digest } => [tag, digest]
                .into_iter()
                .filter_map(|p| match p {
                    Part::Present(s) => Some(s.range.start),
                    _ => None,
                })
                .collect(),
        }
    }
}
