//! Helm values: the conventional `image:` shapes at any depth and the explicit paths a policy
//! (or an Application's Image Updater annotations) names. The image is the one the chart
//! composes, `<registry>/<repository>`; a reference whose tag or digest cannot be written is
//! handed back as a [`DroppedReference`](crate::manifest::DroppedReference), never dropped in
//! silence.

use crate::image::{ImageRef, Repository};
use crate::manifest::tree::{Node, NodeKind};
use crate::manifest::{FieldKind, Part, Slot};
use crate::policy::HelmPaths;

use super::{
    Scan, Seg, Unwritable, lookup, parse_path, part_slot, render_path, resolve, unwritable,
    valid_parts,
};

impl Scan<'_> {
    pub(super) fn helm_conventional(&mut self, node: &Node, path: &mut Vec<Seg>) {
        match &node.kind {
            NodeKind::Mapping { entries, .. } => {
                for (k, v) in entries {
                    let Some(key) = k.scalar() else { continue };
                    path.push(Seg::Key(key.to_string()));
                    if key == "image" {
                        match has_tag_beside(node, v) {
                            true => self.helm_beside(node, v, &render_path(path)),
                            false => self.helm_image(v, &render_path(path)),
                        }
                    }
                    self.helm_conventional(v, path);
                    path.pop();
                }
            }
            NodeKind::Sequence { items, .. } => {
                for (i, item) in items.iter().enumerate() {
                    path.push(Seg::Index(i));
                    self.helm_conventional(item, path);
                    path.pop();
                }
            }
            _ => {}
        }
    }

    fn helm_image(&mut self, value: &Node, path: &str) {
        let kind = FieldKind::HelmValues {
            path: path.to_string(),
        };
        if !value.is_mapping() {
            self.helm_whole(kind, value);
            return;
        }
        let Some(repo_node) = value.get("repository") else {
            return;
        };
        let at = value.get("tag").unwrap_or(value);
        self.helm_mapping(kind, at, repo_node, value.get("registry"), |scan| {
            scan.tag_and_digest(value, "tag", "digest")
                .and_then(|parts| no_other_digest(value).map(|()| parts))
        });
    }

    /// `{registry, image, tag, digest}` (ingress-nginx's shape, and argo-cd's redis exporter's
    /// `{image, tag}`): a name in `image` with its `tag` (and `digest`) beside it in `values`.
    /// The chart runs `<registry>/<image>:<tag>`, so the tag is read and written there, and the
    /// digest moves with it; the name alone is no implicit `latest`.
    fn helm_beside(&mut self, values: &Node, image: &Node, path: &str) {
        let kind = FieldKind::HelmValues {
            path: path.to_string(),
        };
        let at = values.get("tag").unwrap_or(values);
        self.helm_mapping(kind, at, image, values.get("registry"), |scan| {
            scan.tag_and_digest(values, "tag", "digest")
                .and_then(|parts| no_other_digest(values).map(|()| parts))
        });
    }

    /// A name key (`repository`) beside an optional `registry`, and the tag and digest that
    /// `parts` reads: the image the chart composes, `<registry>/<repository>`, or the reason it
    /// cannot be written, recorded for the planner.
    fn helm_mapping(
        &mut self,
        kind: FieldKind,
        at: &Node,
        repo_node: &Node,
        registry_node: Option<&Node>,
        parts: impl FnOnce(&Self) -> Result<(Part, Part), Unwritable>,
    ) {
        let Some(repo) = self.slot(repo_node) else {
            return;
        };
        // The registry is only read: an alias of a scalar (`registry: *registry`) reads as the
        // scalar, and a value an alias reads is fine to read.
        let registry = match registry_node {
            None => None,
            Some(n) => match self.parsed.value_of(n) {
                Some(value) => Some(value),
                None => {
                    let why = unwritable(n, "`registry`").map(|w| w.to_string());
                    let why = why.unwrap_or_default();
                    let why = format!("{why}, so the image's name cannot be read");
                    self.drop_reference(kind, repo_node, &repo, None, why);
                    return;
                }
            },
        };
        let Some(repository) = composed(registry, &repo.value) else {
            return;
        };
        if let Some(global) = &self.global_registry
            && let Some(theirs) = global.other_reading(&repo.value, &repository)
        {
            let why = global.unwritable(registry).to_string();
            // Named against a policy that follows either reading: the one written here, and
            // the one the global registry would make.
            self.drop_reference(
                kind.clone(),
                repo_node,
                &repo,
                Some(repository),
                why.clone(),
            );
            self.drop_reference(kind, repo_node, &repo, Some(theirs), why);
            return;
        }
        let registry = registry_node.and_then(|n| self.slot(n));
        match parts(self) {
            Ok((tag, digest)) => self.helm_split(kind, registry, repo, repository, tag, digest),
            Err(why) => {
                let why = why.to_string();
                self.drop_reference(kind, at, &repo, Some(repository), why)
            }
        }
    }

    fn helm_whole(&mut self, kind: FieldKind, value: &Node) {
        let Some(slot) = self.slot(value) else { return };
        if !self.is_free(&slot) {
            return;
        }
        let Ok(r) = ImageRef::parse(&slot.value) else {
            return;
        };
        self.push_whole(kind, value, &slot, r);
    }

    fn helm_split(
        &mut self,
        kind: FieldKind,
        registry: Option<Slot>,
        repo: Slot,
        repository: Repository,
        tag: Part,
        digest: Part,
    ) {
        let mut claims = vec![&repo];
        claims.extend(registry.as_ref());
        let main = part_slot(&tag).unwrap_or(&repo).clone();
        self.push_split(kind, &main, claims, repository, tag, digest);
    }

    pub(super) fn helm_explicit(&mut self, doc: &Node, paths: &HelmPaths) {
        if let Some(p) = &paths.image {
            if let Some(node) = lookup(doc, p) {
                self.helm_whole(FieldKind::HelmValues { path: p.clone() }, node);
            }
            return;
        }
        let Some(p) = &paths.repository else { return };
        let Some(repo_node) = lookup(doc, p) else {
            return;
        };
        // Without a registry path, a `registry` key beside the name key is the chart's
        // (`image: {registry, repository, tag}`, as Bitnami's and Grafana's charts write it):
        // the image is the one the chart composes from both.
        let registry_node = match &paths.registry {
            Some(r) => lookup(doc, r),
            None => sibling(doc, p, "registry"),
        };
        let kind = FieldKind::HelmValues { path: p.clone() };
        // A tag or digest path names a key in a parent mapping; without a path, or without that
        // parent, the part cannot be written.
        let last_key = |path: &Option<String>| match parse_path(path.as_deref()?)?.pop()? {
            Seg::Key(k) => Some(k),
            Seg::Index(_) => None,
        };
        let repo_key = last_key(&paths.repository).unwrap_or_default();
        let tag_key = last_key(&paths.tag).unwrap_or_default();
        let part = |scan: &Self, path: &Option<String>, default_key: &str, after: &[&str]| {
            let missing = |key: &str| {
                Ok(Part::Missing {
                    key: key.to_string(),
                    at: None,
                })
            };
            let Some(path) = path else {
                return missing(default_key);
            };
            let nested = parse_path(path).and_then(|segs| resolve(doc, &segs));
            if nested.is_none() && doc.get(path).is_some() {
                // A literal dotted key at the top level, as Image Updater reads it.
                return scan.part(doc, path, after);
            }
            let Some(mut segs) = parse_path(path) else {
                return Err(Unwritable::NotAPath { path: path.clone() });
            };
            let Some(Seg::Key(key)) = segs.pop() else {
                return Err(Unwritable::EndsInIndex { path: path.clone() });
            };
            match resolve(doc, &segs).filter(|n| n.is_mapping()) {
                Some(parent) => scan.part_named(parent, &key, after, path),
                None => missing(&key),
            }
        };
        let at = lookup(doc, paths.tag.as_deref().unwrap_or(p)).unwrap_or(repo_node);
        self.helm_mapping(kind, at, repo_node, registry_node, |scan| {
            let tag = part(scan, &paths.tag, "tag", &[&repo_key])?;
            let digest = part(scan, &paths.digest, "digest", &[&tag_key, &repo_key])?;
            let tag_key = paths.tag.as_deref().unwrap_or("tag");
            let digest_key = paths.digest.as_deref().unwrap_or("digest");
            valid_parts(&tag, &digest, tag_key, digest_key)?;
            Ok((tag, digest))
        });
    }
}

/// A registry a values document sets for all of a chart's images: `global.imageRegistry`
/// (Bitnami's charts) or `global.image.registry` (ingress-nginx's, Grafana's). Charts read it
/// differently: ingress-nginx's as the registry of the images that name none, Bitnami's and
/// tempo-distributed's over every image's own. Where the two readings compose different images,
/// the image the chart runs is not known, and the reference is named instead of guessed.
#[derive(Debug, Clone)]
pub(super) struct GlobalRegistry {
    key: &'static str,
    value: String,
    line: usize,
}

impl GlobalRegistry {
    /// The global registry `doc` sets, if it sets one (an empty or null value sets none).
    pub(super) fn of(doc: &Node, parsed: &crate::manifest::tree::Parsed) -> Option<Self> {
        let global = doc.get("global")?;
        [
            ("global.imageRegistry", global.get("imageRegistry")),
            (
                "global.image.registry",
                global.get("image").and_then(|i| i.get("registry")),
            ),
        ]
        .into_iter()
        .find_map(|(key, node)| {
            let node = node?;
            let value = parsed.value_of(node).filter(|v| !v.is_empty())?;
            Some(GlobalRegistry {
                key,
                value: value.to_string(),
                line: node.line,
            })
        })
    }

    /// The image the global registry would make of `name` where it differs from `written`,
    /// the image read from the map alone (its own registry, if any, and `name`).
    fn other_reading(&self, name: &str, written: &Repository) -> Option<Repository> {
        let theirs = composed(Some(&self.value), name)?;
        (theirs != *written).then_some(theirs)
    }

    fn unwritable(&self, own: Option<&str>) -> Unwritable {
        Unwritable::GlobalRegistry {
            key: self.key,
            registry: self.value.clone(),
            line: self.line,
            own: own.filter(|r| !r.is_empty()).map(str::to_string),
        }
    }
}

/// The value under `key` beside the nested value `path` names, in the same mapping.
fn sibling<'n>(doc: &'n Node, path: &str, key: &str) -> Option<&'n Node> {
    let mut segs = parse_path(path)?;
    if !matches!(segs.pop()?, Seg::Key(_)) {
        return None;
    }
    resolve(doc, &segs)?.get(key)
}

/// Whether `image` (a value of `values`) is a name without tag or digest with a `tag` key
/// beside it: only then is it read as [`Scan::helm_beside`] does. A name that carries its own
/// tag or digest stays a whole reference, as written.
fn has_tag_beside(values: &Node, image: &Node) -> bool {
    values.get("tag").is_some()
        && matches!(image.kind, NodeKind::Scalar { .. })
        && !image.is_null()
        && image
            .scalar()
            .is_some_and(|name| Repository::parse(name).is_ok())
}

/// The repository a chart composes from a `registry` value (none, empty or null: none) and a
/// name (`repository`).
fn composed(registry: Option<&str>, repo: &str) -> Option<Repository> {
    match registry.filter(|r| !r.is_empty()) {
        Some(r) => Repository::parse(&format!("{r}/{repo}")).ok(),
        None => Repository::parse(repo).ok(),
    }
}

/// Why `values` cannot move with its tag: another key pins a second digest of the image
/// (ingress-nginx's `digestChroot`, the digest of the controller's chroot variant), which
/// tagpilot cannot look up, so the chart would run the new tag beside the old image's digest.
fn no_other_digest(values: &Node) -> Result<(), Unwritable> {
    let other = values.entries().iter().find_map(|(key, value)| {
        let key = key.scalar()?;
        let pinned = !value.is_null() && value.scalar().is_some_and(|v| !v.is_empty());
        (key != "digest" && key.starts_with("digest") && pinned).then_some(key)
    });
    match other {
        Some(key) => Err(Unwritable::OtherDigest {
            key: key.to_string(),
        }),
        None => Ok(()),
    }
}
