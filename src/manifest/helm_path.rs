//! Why a Helm value path names no value a write could change, in the user's words: the key
//! that is missing, the index out of range, the mapping indexed like a list, the alias or
//! anchor on the way. A path Image Updater annotations or `ImageUpdater` resources name must
//! never come to a silent "no changes"; the planner reports this reason with the file and the
//! path. Pure.

use super::detect::{Seg, parse_path};
use super::tree::{self, Node, NodeKind};

/// Why `path` does not name one plain value of the values file `text`, or `None` when it does
/// (nested, or as a top-level key with dots in it, as Image Updater reads it).
pub fn explain_helm_path(text: &str, path: &str) -> Option<String> {
    let parsed = match tree::parse(text) {
        Ok(p) => p,
        Err(f) => {
            return Some(format!(
                "the file is not YAML ({}:{}: {})",
                f.line, f.column, f.message
            ));
        }
    };
    let Some(doc) = parsed.docs.first() else {
        return Some("the file holds no values".into());
    };
    if let Some(node) = doc.get(path)
        && parse_path(path).is_none_or(|segs| super::detect::resolve(doc, &segs).is_none())
    {
        return explain_value(node, path);
    }
    let Some(segs) = parse_path(path) else {
        return Some("it is not a value path (`a.b`, `a[0].b`)".into());
    };
    let mut node = doc;
    let mut walked = String::new();
    for seg in &segs {
        let at = if walked.is_empty() {
            "the top level".to_string()
        } else {
            format!("`{walked}`")
        };
        if let Some(reason) = through(node, &walked) {
            return Some(reason);
        }
        node = match (seg, &node.kind) {
            (Seg::Key(k), NodeKind::Mapping { .. }) => match node.get(k) {
                Some(n) => n,
                None => {
                    return Some(format!(
                        "{at} has no key `{k}`; Image Updater would add it by writing the whole \
                         file again (blank lines lost), so tagpilot holds: add the key"
                    ));
                }
            },
            (Seg::Key(k), NodeKind::Sequence { .. }) => {
                return Some(format!(
                    "{at} is a list, not a mapping: give an index before `{k}` (`{walked}[0].{k}`)"
                ));
            }
            (Seg::Index(i), NodeKind::Sequence { items, .. }) => match items.get(*i) {
                Some(n) => n,
                None => {
                    return Some(format!(
                        "index {i} is out of range: {at} has {} item{}",
                        items.len(),
                        if items.len() == 1 { "" } else { "s" }
                    ));
                }
            },
            (Seg::Index(i), NodeKind::Mapping { .. }) => {
                return Some(format!(
                    "{at} is a mapping, not a list: it has no index [{i}]"
                ));
            }
            (_, _) => {
                return Some(format!("{at} is a single value, not a mapping or a list"));
            }
        };
        match seg {
            Seg::Key(k) if walked.is_empty() => walked.push_str(k),
            Seg::Key(k) => {
                walked.push('.');
                walked.push_str(k);
            }
            Seg::Index(i) => walked.push_str(&format!("[{i}]")),
        }
    }
    explain_value(node, path)
}

/// The plain value at `path` (nested, or a top-level key with dots), if it names one; a YAML
/// null names none.
pub fn helm_value(text: &str, path: &str) -> Option<String> {
    let parsed = tree::parse(text).ok()?;
    let doc = parsed.docs.first()?;
    let node = super::detect::lookup(doc, path)?;
    (!node.is_null()).then(|| node.scalar().map(str::to_string))?
}

/// The image name a chart composes from the name at `path` and a `registry` beside it
/// (`image: {registry: ghcr.io, repository: team/app}` is `ghcr.io/team/app`), as detection
/// reads it; the name alone without a registry (or with an empty or null one).
pub fn helm_image_name(text: &str, path: &str) -> Option<String> {
    let parsed = tree::parse(text).ok()?;
    let doc = parsed.docs.first()?;
    let node = super::detect::lookup(doc, path)?;
    let name = node.read().filter(|n| !n.is_empty())?;
    let registry = parse_path(path)
        .filter(|segs| super::detect::resolve(doc, segs).is_some())
        .and_then(|mut segs| {
            segs.pop();
            super::detect::resolve(doc, &segs)?.get("registry")
        })
        .and_then(|r| parsed.value_of(r))
        .filter(|r| !r.is_empty());
    Some(match registry {
        Some(r) => format!("{r}/{name}"),
        None => name.to_string(),
    })
}

/// Why the path's last node is not a value to write.
fn explain_value(node: &Node, path: &str) -> Option<String> {
    if let Some(reason) = through(node, path) {
        return Some(reason);
    }
    match &node.kind {
        NodeKind::Scalar { .. } => None,
        NodeKind::Mapping { .. } => Some(format!("`{path}` is a mapping, not a value")),
        NodeKind::Sequence { .. } => Some(format!("`{path}` is a list, not a value")),
        NodeKind::Alias => unreachable!("through() names aliases"),
    }
}

/// An alias or an anchor at `node` (reached by `walked`): writing through it would change what
/// other places read, so it is refused.
fn through(node: &Node, walked: &str) -> Option<String> {
    let at = if walked.is_empty() {
        "the top level".to_string()
    } else {
        format!("`{walked}`")
    };
    match node.kind {
        NodeKind::Alias => Some(format!(
            "{at} is a YAML alias (`*name`): writing through it would change its anchor and \
             every other alias of it"
        )),
        _ if node.shared => Some(format!(
            "{at} carries a YAML anchor (`&name`), or sits in a collection that does, and an \
             alias reads it: writing it would change what the alias reads too"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALUES: &str = "\
image:
  repository: r.example/api
  tag: 1.0.0
images:
  - repository: r.example/a
    tag: 1.0.0
defaults: &defaults
  tag: 1.0.0
worker: *defaults
image.tag: 2.0.0
";

    fn why(path: &str) -> String {
        explain_helm_path(VALUES, path).unwrap_or_else(|| "resolves".into())
    }

    /// What Image Updater's `setHelmValue` and `resolveHelmScalarNode` (its
    /// `pkg/argocd/update.go`) do with each path, and the reason tagpilot gives when it holds.
    #[test]
    fn each_path_that_names_no_value_gets_its_reason() {
        assert_eq!(why("image.tag"), "resolves");
        assert_eq!(why("images[0].tag"), "resolves");
        // A key with dots in it, read literally when the nested path is not there.
        assert_eq!(explain_helm_path("app.tag: 1\n", "app.tag"), None);
        // Missing keys: Image Updater creates them by re-serialising the file.
        assert!(why("image.digest").contains("`image` has no key `digest`"));
        assert!(why("sidecar.tag").contains("the top level has no key `sidecar`"));
        // Its errors: "id %d is out of range", "id provided when ... is not an yaml array",
        // "no id provided for yaml array".
        assert!(why("images[3].tag").contains("index 3 is out of range: `images` has 1 item"));
        assert!(why("image[0].tag").contains("`image` is a mapping, not a list"));
        assert!(why("images.tag").contains("`images` is a list, not a mapping"));
        // Its "unexpected type" for a final key that is not a scalar.
        assert!(why("image").contains("`image` is a mapping, not a value"));
        assert!(why("image.tag.x").contains("`image.tag` is a single value"));
        // Aliases and anchors: writing through them changes other places.
        assert!(why("worker.tag").contains("`worker` is a YAML alias"));
        assert!(why("defaults.tag").contains("`defaults` carries a YAML anchor"));
    }
}
