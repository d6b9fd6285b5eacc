//! Which scalars of a parsed file hold images, by kind. See the module doc of `manifest` for the
//! rules; the precedence (markers, then explicit Helm paths, then the rest) lives in [`fields`].

use std::collections::HashSet;
use std::path::Path;

use crate::image::{ImageRef, Repository, is_valid_digest, is_valid_tag};
use crate::policy::HelmPaths;

use super::render::Quote;
use super::tree::{self, Node, NodeKind, ParseFailure, Parsed};
use super::{
    DroppedReference, FieldKind, ImageField, InsertAt, OnePart, Part, Scanned, Shape, Slot,
    UnresolvedMarker,
};

mod chart;
mod helm;
mod marker;

const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

struct Scan<'a> {
    path: &'a Path,
    src: &'a str,
    parsed: &'a Parsed,
    /// Start offsets of scalars already part of a field.
    claimed: HashSet<usize>,
    out: Vec<ImageField>,
    /// Offsets of the marker comments a scalar took, as a field or as a value it cannot read.
    markers_seen: HashSet<usize>,
    unresolved: Vec<UnresolvedMarker>,
    dropped: Vec<DroppedReference>,
    /// The registry a values document sets for all of a chart's images, while its conventional
    /// `image:` shapes are read (see [`helm::GlobalRegistry`]).
    global_registry: Option<helm::GlobalRegistry>,
}

/// The image fields of `src`, read one document at a time (see [`tree::parse_each`]): every
/// reading of a document looks inside that document only, so the result is the same as over
/// the whole file, in file order.
pub(super) fn fields(path: &Path, src: &str, helm: &[HelmPaths]) -> Result<Scanned, ParseFailure> {
    // A Go-templated file is read with its template lines as comments (see `template`).
    let (masked, templated) = super::template::read(path, src);
    let src = masked.as_deref().unwrap_or(src);
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let is_kustomization = KUSTOMIZATION_FILES.contains(&file_name);
    let is_chart = file_name == "Chart.yaml";
    let is_helmfile = file_name.starts_with("helmfile")
        || path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(|d| d == "helmfile.d");
    let helm_repositories = chart::repositories(src, is_helmfile)?;
    let mut claimed = HashSet::new();
    let mut out = Vec::new();
    let mut unresolved = Vec::new();
    let mut dropped = Vec::new();
    tree::parse_each(src, |parsed| {
        let mut scan = Scan {
            path,
            src,
            parsed,
            claimed: std::mem::take(&mut claimed),
            out: std::mem::take(&mut out),
            markers_seen: HashSet::new(),
            unresolved: std::mem::take(&mut unresolved),
            dropped: std::mem::take(&mut dropped),
            global_registry: None,
        };
        for doc in &parsed.docs {
            scan.markers(doc);
        }
        // A document's comments are its own: one left over names a marker that took nothing.
        scan.stray_markers();
        for doc in &parsed.docs {
            for paths in helm {
                scan.helm_explicit(doc, paths);
            }
        }
        for doc in &parsed.docs {
            if is_chart {
                scan.chart_dependencies(doc);
            } else if is_kustomization {
                scan.kustomize_charts(doc);
            } else if is_helmfile {
                scan.helmfile_releases(doc, &helm_repositories, &templated);
            } else if is_resource(doc) {
                scan.chart_resource(doc, &helm_repositories);
            }
        }
        for doc in &parsed.docs {
            if is_kustomization {
                scan.kustomize(doc);
            } else if doc.is_mapping() && !is_resource(doc) {
                scan.global_registry = helm::GlobalRegistry::of(doc, parsed);
                scan.helm_conventional(doc, &mut Vec::new());
                scan.global_registry = None;
            } else {
                scan.workload(doc);
            }
        }
        claimed = scan.claimed;
        out = scan.out;
        unresolved = scan.unresolved;
        dropped = scan.dropped;
    })?;
    out.sort_by_key(|f| (f.line, f.column));
    unresolved.sort_by_key(|m| (m.line, m.column));
    // An explicit path and the conventional reading may both drop one image; one reference
    // read two ways (a global registry) is dropped once per image.
    let image = |d: &DroppedReference| d.repository.as_ref().map(|r| r.to_string());
    dropped.sort_by_cached_key(|d| (d.line, d.column, image(d)));
    dropped.dedup_by(|a, b| (a.line, a.column, &a.repository) == (b.line, b.column, &b.repository));
    // A reference another reading took is not dropped.
    dropped.retain(|d| !claimed.contains(&d.name_at));
    Ok(Scanned {
        fields: out,
        unresolved,
        dropped,
        templated,
    })
}

/// A path segment in Helm value paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

fn render_path(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Parses `images[1].tag`, `worker.image`; `None` for malformed paths.
pub(super) fn parse_path(path: &str) -> Option<Vec<Seg>> {
    let mut segs = Vec::new();
    for part in path.split('.') {
        let (key, mut rest) = part.split_once('[').map_or((part, ""), |(k, r)| (k, r));
        if !key.is_empty() {
            segs.push(Seg::Key(key.to_string()));
        } else if segs.is_empty() || rest.is_empty() {
            return None;
        }
        if !rest.is_empty() {
            rest = &part[key.len()..];
            while let Some(r) = rest.strip_prefix('[') {
                let (n, after) = r.split_once(']')?;
                segs.push(Seg::Index(n.parse().ok()?));
                rest = after;
            }
            if !rest.is_empty() {
                return None;
            }
        }
    }
    (!segs.is_empty()).then_some(segs)
}

pub(super) fn resolve<'n>(root: &'n Node, segs: &[Seg]) -> Option<&'n Node> {
    segs.iter().try_fold(root, |node, seg| match seg {
        Seg::Key(k) => node.get(k),
        Seg::Index(i) => node.items().get(*i),
    })
}

/// The node a Helm value path names: the nested path (`a.b[0].c`), else a top-level key that
/// is the whole path, dots and all, as Image Updater reads it (`resolveHelmScalarNode` in its
/// `pkg/argocd/update.go`: "a literal key `a.b.c` if the nested structure doesn't exist").
pub(super) fn lookup<'n>(root: &'n Node, path: &str) -> Option<&'n Node> {
    parse_path(path)
        .and_then(|segs| resolve(root, &segs))
        .or_else(|| root.get(path))
}

impl Scan<'_> {
    /// The scalar `node` as a slot; a YAML null (`null`, `~`) reads as the empty value it is,
    /// never as the text `null`.
    fn slot(&self, node: &Node) -> Option<Slot> {
        match &node.kind {
            NodeKind::Scalar { value, style } if !node.range.is_empty() => Some(Slot {
                range: node.range.clone(),
                value: if node.is_null() {
                    String::new()
                } else {
                    value.clone()
                },
                quote: Quote::of(*style),
                in_flow: node.in_flow,
                tagged: node.tagged,
                line: node.line,
                column: node.column,
            }),
            _ => None,
        }
    }

    fn is_free(&self, slot: &Slot) -> bool {
        !self.claimed.contains(&slot.range.start)
    }

    fn push(&mut self, kind: FieldKind, main: &Slot, claims: &[&Slot], f: Fields) {
        for s in claims {
            self.claimed.insert(s.range.start);
        }
        self.out.push(ImageField {
            kind,
            line: main.line,
            column: main.column,
            file: self.path.to_path_buf(),
            repository: f.repository,
            tag: f.tag,
            digest: f.digest,
            shape: f.shape,
        });
    }

    // === workloads ===

    fn workload(&mut self, doc: &Node) {
        let Some(kind) = doc.get("kind").and_then(Node::scalar) else {
            return;
        };
        if kind == "List" {
            for item in doc.get("items").map(Node::items).unwrap_or_default() {
                self.workload(item);
            }
            return;
        }
        let spec = match kind {
            "Pod" => doc.get("spec"),
            "PodTemplate" => doc.get_path(&["template", "spec"]),
            "CronJob" => doc.get_path(&["spec", "jobTemplate", "spec", "template", "spec"]),
            "Deployment"
            | "StatefulSet"
            | "DaemonSet"
            | "ReplicaSet"
            | "ReplicationController"
            | "Job"
            | "Rollout" => doc.get_path(&["spec", "template", "spec"]),
            _ => None,
        };
        let Some(spec) = spec else { return };
        let resource = match doc.get_path(&["metadata", "name"]).and_then(Node::scalar) {
            Some(name) => format!("{kind}/{name}"),
            None => kind.to_string(),
        };
        for list in ["initContainers", "containers", "ephemeralContainers"] {
            let Some(containers) = spec.get(list) else {
                continue;
            };
            for (i, container) in containers.items().iter().enumerate() {
                let Some(slot) = container.get("image").and_then(|n| self.slot(n)) else {
                    continue;
                };
                if !self.is_free(&slot) {
                    continue;
                }
                let Ok(r) = ImageRef::parse(&slot.value) else {
                    continue;
                };
                let name = match container.get("name").and_then(Node::scalar) {
                    Some(n) => n.to_string(),
                    None => format!("#{i}"),
                };
                let kind = FieldKind::Container {
                    resource: resource.clone(),
                    container: name,
                };
                let image = container.get("image").expect("read above");
                self.push_whole(kind, image, &slot, r);
            }
        }
    }

    // === kustomize ===

    fn kustomize(&mut self, doc: &Node) {
        let Some(images) = doc.get("images") else {
            return;
        };
        for entry in images.items() {
            let Some(name) = entry.get("name").and_then(|n| self.slot(n)) else {
                continue;
            };
            // `newName: null` renames nothing.
            let new_name = match entry.get("newName") {
                Some(n) => match self.slot(n) {
                    Some(s) if s.value.is_empty() => None,
                    Some(s) => Some(s),
                    None => continue,
                },
                None => None,
            };
            let repo_text = new_name.as_ref().unwrap_or(&name).value.as_str();
            let Ok(repository) = Repository::parse(repo_text) else {
                continue;
            };
            let (mut tag, mut digest) = match self.tag_and_digest(entry, "newTag", "digest") {
                Ok(parts) => parts,
                Err(why) => {
                    let kind = FieldKind::Kustomize {
                        name: name.value.clone(),
                    };
                    let why = why.to_string();
                    self.drop_reference(kind, entry, &name, Some(repository), why);
                    continue;
                }
            };
            // Only an entry that sets nothing but its name (`newTag` or `digest` may be there,
            // empty) asks for the keys to be added; any other entry is written only in the keys
            // it has.
            let sets_only_its_name = entry.entries().iter().all(|(k, v)| {
                let key = k.scalar().unwrap_or_default();
                key == "name"
                    || (matches!(key, "newTag" | "digest")
                        && (v.is_null() || v.scalar() == Some("")))
            });
            // An entry that pins neither (only `newName` or `tagSuffix`) is still a field, never
            // written, so that the planner names it at its line instead of passing it silently.
            if !sets_only_its_name {
                let missing = |p: &Part| matches!(p, Part::Missing { .. });
                let only = match missing(&tag) && missing(&digest) {
                    true => match pins_instead(entry) {
                        Some(only) => Some(only),
                        // Keys kustomize does not know (another tool's, read by a marker).
                        None => continue,
                    },
                    false => None,
                };
                for part in [&mut tag, &mut digest] {
                    if missing(part) {
                        *part = Part::Unpinned { only };
                    }
                }
            }
            let mut claims: Vec<&Slot> = vec![&name];
            claims.extend(new_name.as_ref());
            let main = part_slot(&tag).unwrap_or(&name).clone();
            let kind = FieldKind::Kustomize {
                name: name.value.clone(),
            };
            self.push_split(kind, &main, claims, repository, tag, digest);
        }
    }

    /// The tag and digest parts of a split field, or why they cannot be written: either holds
    /// something that is not a tag or digest (an alias, a collection, an invalid value) or a
    /// value an alias reads.
    /// A whole reference (`name[:tag][@digest]` in one scalar) as a field, or handed back with
    /// why it cannot be written (an alias, a value an alias reads).
    fn push_whole(&mut self, kind: FieldKind, node: &Node, slot: &Slot, r: ImageRef) {
        if let Some(why) = unwritable(node, "the image") {
            let why = why.to_string();
            self.drop_reference(kind, node, slot, Some(r.repository), why);
            return;
        }
        let fields = Fields {
            repository: Some(r.repository),
            tag: r.tag,
            digest: r.digest,
            shape: Shape::Whole {
                slot: slot.clone(),
                name: r.name,
            },
        };
        self.push(kind, slot, &[slot], fields);
    }

    fn tag_and_digest(
        &self,
        map: &Node,
        tag_key: &str,
        digest_key: &str,
    ) -> Result<(Part, Part), Unwritable> {
        let name_keys = ["newName", "name", "repository"];
        let tag = self.part(map, tag_key, &name_keys)?;
        let digest = self.part(
            map,
            digest_key,
            &[tag_key, name_keys[0], name_keys[1], name_keys[2]],
        )?;
        valid_parts(&tag, &digest, tag_key, digest_key)?;
        Ok((tag, digest))
    }

    /// The part under `key`; when absent, where it can be added: after the first of `after`
    /// that the mapping has, else after its last entry. An error says why it cannot be written.
    fn part(&self, map: &Node, key: &str, after: &[&str]) -> Result<Part, Unwritable> {
        self.part_named(map, key, after, key)
    }

    /// [`Self::part`], its reasons naming the value `name` (a whole path, where one was given).
    fn part_named(
        &self,
        map: &Node,
        key: &str,
        after: &[&str],
        name: &str,
    ) -> Result<Part, Unwritable> {
        let Some(n) = map.get(key) else {
            return Ok(Part::Missing {
                key: key.to_string(),
                at: Some(self.insert_at(map, after)),
            });
        };
        if let Some(why) = unwritable(n, &format!("`{name}`")) {
            return Err(why);
        }
        if n.range.is_empty() {
            return Ok(Part::Empty {
                line: n.line,
                column: n.column,
            });
        }
        self.slot(n)
            .map(Part::Present)
            .ok_or_else(|| Unwritable::NotAValue {
                key: key.to_string(),
            })
    }

    /// Records a reference tagpilot read and cannot write, for the planner to name.
    fn drop_reference(
        &mut self,
        kind: FieldKind,
        at: &Node,
        name: &Slot,
        repository: Option<Repository>,
        reason: String,
    ) {
        self.dropped.push(DroppedReference {
            kind,
            line: at.line,
            column: at.column,
            repository,
            reason,
            name_at: name.range.start,
        });
    }

    fn insert_at(&self, map: &Node, after: &[&str]) -> InsertAt {
        let flow = matches!(map.kind, NodeKind::Mapping { flow: true, .. });
        let entries = map.entries();
        let indent = entries.first().map_or(0, |(k, _)| k.column - 1);
        let last = after
            .iter()
            .find_map(|k| map.get(k))
            .or_else(|| entries.last().map(|(_, v)| v));
        let mut eol = "\n";
        let pos = last
            .filter(|v| matches!(v.kind, NodeKind::Scalar { .. } | NodeKind::Alias))
            .and_then(|v| {
                if v.range.is_empty() {
                    return None;
                }
                if flow {
                    return Some(v.range.end);
                }
                if let NodeKind::Scalar { style, .. } = &v.kind {
                    // Block scalars end on a later line than they start; their end is no anchor.
                    Quote::of(*style)?;
                }
                match self.src[v.range.end..].find('\n') {
                    Some(i) => {
                        let nl = v.range.end + i;
                        if nl > 0 && self.src.as_bytes()[nl - 1] == b'\r' {
                            eol = "\r\n";
                            Some(nl - 1)
                        } else {
                            Some(nl)
                        }
                    }
                    None => {
                        if self.src.contains("\r\n") {
                            eol = "\r\n";
                        }
                        Some(self.src.len())
                    }
                }
            });
        InsertAt {
            mapping: map.range.start,
            flow,
            pos,
            eol,
            indent,
            line: map.line,
            column: map.column,
        }
    }

    fn push_split(
        &mut self,
        kind: FieldKind,
        main: &Slot,
        claims: Vec<&Slot>,
        repository: Repository,
        tag: Part,
        digest: Part,
    ) {
        let mut claims: Vec<Slot> = claims.into_iter().cloned().collect();
        claims.extend(part_slot(&tag).cloned());
        claims.extend(part_slot(&digest).cloned());
        if !claims.iter().all(|s| self.is_free(s)) {
            return;
        }
        let value = |p: &Part| {
            part_slot(p)
                .map(|s| s.value.clone())
                .filter(|v| !v.is_empty())
        };
        let fields = Fields {
            repository: Some(repository),
            tag: value(&tag),
            digest: value(&digest),
            shape: Shape::Split { tag, digest },
        };
        self.push(kind, main, &claims.iter().collect::<Vec<_>>(), fields);
    }
}

/// Whether a document is a Kubernetes resource: one with both `apiVersion` and `kind` as
/// values. Helm values may have either key for their own ends (prometheus-blackbox-exporter's
/// `kind: Deployment` chooses the chart's workload), and are read as values.
fn is_resource(doc: &Node) -> bool {
    let value = |key| {
        doc.get(key)
            .is_some_and(|n| !n.is_null() && n.scalar().is_some_and(|v| !v.is_empty()))
    };
    value("apiVersion") && value("kind")
}

/// What a kustomize `images:` entry that pins no version has instead of `newTag` or `digest`;
/// `None` when it has keys kustomize does not know.
fn pins_instead(entry: &Node) -> Option<&'static str> {
    let keys: Vec<&str> = entry
        .entries()
        .iter()
        .filter_map(|(k, _)| k.scalar())
        .collect();
    if keys
        .iter()
        .any(|k| !matches!(*k, "name" | "newName" | "tagSuffix"))
    {
        return None;
    }
    Some(
        match (keys.contains(&"newName"), keys.contains(&"tagSuffix")) {
            (true, true) => "only `newName` and `tagSuffix`",
            (true, false) => "only `newName`",
            _ => "only `tagSuffix`",
        },
    )
}

/// Why the value at `node` (`what`, as the user reads it) cannot be written, if it cannot: an
/// alias, a collection, or a value an alias elsewhere reads. Writing that value would change
/// what the alias reads too, which may be another image.
pub(super) fn unwritable(node: &Node, what: &str) -> Option<Unwritable> {
    let what = what.to_string();
    match &node.kind {
        NodeKind::Alias => Some(Unwritable::Alias { what }),
        NodeKind::Mapping { .. } => Some(Unwritable::Mapping { what }),
        NodeKind::Sequence { .. } => Some(Unwritable::List { what }),
        NodeKind::Scalar { .. } if node.shared => Some(Unwritable::Anchored { what }),
        NodeKind::Scalar { .. } => None,
    }
}

/// Why a value (`what`, as the user reads it: `` `tag` ``, the image) cannot be written: the
/// reason a dropped reference or an unresolved marker gives.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum Unwritable {
    #[error(
        "{what} is a YAML alias (`*name`): writing through it would change its anchor and every \
         other alias of it"
    )]
    Alias { what: String },
    #[error("{what} is a mapping, not a value")]
    Mapping { what: String },
    /// A marker on a document's own `metadata.name` (or namespace): a bare word reads as an
    /// image, so writing would rename the resource.
    #[error("{what} is the resource's own `metadata`: writing an image there would rename it")]
    ResourceName { what: String },
    #[error("{what} is a list, not a value")]
    List { what: String },
    #[error(
        "{what} carries a YAML anchor (`&name`), or sits in a collection that does, and an alias \
         reads it: writing it would change what the alias reads too"
    )]
    Anchored { what: String },
    #[error("`{key}` is not a value")]
    NotAValue { key: String },
    #[error("`{path}` is not a value path")]
    NotAPath { path: String },
    #[error("`{path}` ends in an index, not a key")]
    EndsInIndex { path: String },
    #[error("`{key}` holds {value:?}, which is not {what}")]
    Invalid {
        key: String,
        value: String,
        what: &'static str,
    },
    /// Another key pins a second digest of the image (see `helm::no_other_digest`).
    #[error(
        "`{key}` pins another digest of this image, which tagpilot cannot look up: moving the \
         tag would leave `{key}` on the old image; left as written"
    )]
    OtherDigest { key: String },
    /// The values set a registry for every image of the chart, and this image names none of
    /// its own or another one (see `helm::GlobalRegistry`).
    #[error(
        "{}the values set `{key}: {registry}` (line {line}), which charts read differently (as \
         the registry of the images that name none, or over every image's own), so which image \
         the chart runs is not known; name the paths in the policy's `helm:` (`registry: {key}` \
         to follow it) or set the registry beside the name",
        own.as_ref().map(|r| format!("beside `registry: {r}`, ")).unwrap_or_else(|| "no registry is named beside it and ".to_string())
    )]
    GlobalRegistry {
        key: &'static str,
        registry: String,
        line: usize,
        own: Option<String>,
    },
}
/// Both parts hold a tag and a digest (or nothing), else why not.
fn valid_parts(
    tag: &Part,
    digest: &Part,
    tag_key: &str,
    digest_key: &str,
) -> Result<(), Unwritable> {
    let check = |p: &Part, valid: fn(&str) -> bool, key: &str, what: &'static str| match p {
        Part::Present(s) if !s.value.is_empty() && !valid(&s.value) => Err(Unwritable::Invalid {
            key: key.to_string(),
            value: s.value.clone(),
            what,
        }),
        _ => Ok(()),
    };
    check(tag, is_valid_tag, tag_key, "a tag")?;
    check(digest, is_valid_digest, digest_key, "a digest")
}

fn part_slot(p: &Part) -> Option<&Slot> {
    match p {
        Part::Present(s) => Some(s),
        _ => None,
    }
}

/// The parts of an [`ImageField`] detection fills in.
struct Fields {
    repository: Option<Repository>,
    tag: Option<String>,
    digest: Option<String>,
    shape: Shape,
}

impl Fields {
    fn single(tag: Option<String>, digest: Option<String>, slot: Slot, part: OnePart) -> Fields {
        Fields {
            repository: None,
            tag,
            digest,
            shape: Shape::Single { slot, part },
        }
    }
}

/// `<algorithm>:<hex>`, of any length: a digest, or a stand-in for one that a `:digest` marker
/// will replace.
fn digest_shaped(value: &str) -> bool {
    is_valid_digest(value)
        || value.split_once(':').is_some_and(|(algorithm, hex)| {
            !algorithm.is_empty()
                && algorithm
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
                && !hex.is_empty()
                && hex.bytes().all(|b| b.is_ascii_hexdigit())
        })
}
