//! Marker comments: `# tagpilot: [namespace:]policy[:part]` and Flux's `{"$imagepolicy": …}`
//! setter after a scalar, and the marker comments no scalar took.

use super::{Fields, Scan, digest_shaped};
use crate::image::{ImageRef, Repository, is_valid_tag};
use crate::manifest::tree::{Node, NodeKind};
use crate::manifest::{FieldKind, MarkerPart, OnePart, Shape, UnresolvedMarker};

/// Where a scalar sits, as far as markers care: a document's own `metadata.name`,
/// `metadata.namespace` or `metadata.generateName` say which resource it is, so no marker may
/// write there.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    Metadata,
    Identity,
    Other,
}

impl Scan<'_> {
    pub(super) fn markers(&mut self, doc: &Node) {
        self.markers_at(doc, false, Place::Root);
    }

    fn markers_at(&mut self, node: &Node, is_key: bool, place: Place) {
        match &node.kind {
            NodeKind::Mapping { entries, .. } => {
                for (k, v) in entries {
                    self.markers_at(k, true, Place::Other);
                    let inner = match (place, k.scalar()) {
                        (Place::Root, Some("metadata")) => Place::Metadata,
                        (Place::Metadata, Some("name" | "namespace" | "generateName")) => {
                            Place::Identity
                        }
                        _ => Place::Other,
                    };
                    self.markers_at(v, false, inner);
                }
            }
            NodeKind::Sequence { items, .. } => {
                for item in items {
                    self.markers_at(item, false, Place::Other);
                }
            }
            NodeKind::Scalar { .. } if !is_key => {
                self.marker_on(node, place == Place::Identity);
            }
            _ => {}
        }
    }

    fn marker_on(&mut self, node: &Node, names_the_resource: bool) {
        let Some(slot) = self.slot(node) else { return };
        if slot.quote.is_none() {
            return;
        }
        let rest = &self.src[slot.range.end..];
        let hash = slot.range.end + (rest.len() - rest.trim_start_matches([' ', '\t']).len());
        let Some(comment) = self.parsed.comments.get(&hash) else {
            return;
        };
        let Some((policy, namespace, part)) = parse_marker(comment) else {
            return;
        };
        self.markers_seen.insert(hash);
        // A marked scalar without a valid value yet (a CI placeholder) stays the marker's: no
        // other reading may take it, or the field would change kind once a value is written.
        // Nothing is written there either, and the report says why.
        let value = slot.value.as_str();
        let unreadable = |scan: &mut Self, what: &str| {
            scan.claimed.insert(slot.range.start);
            scan.unresolved.push(UnresolvedMarker {
                line: slot.line,
                column: slot.column,
                marker: comment.trim().to_string(),
                reason: format!("the marked value {value:?} is not {what}; tagpilot writes only over a value it can read"),
            });
        };
        // A bare word reads as an image (`currencyservice` is docker.io's), so a marker on the
        // resource's own name would rename it: never written, and said.
        let unwritable = if names_the_resource {
            Some(super::Unwritable::ResourceName {
                what: "the marked value".to_string(),
            })
        } else {
            super::unwritable(node, "the marked value")
        };
        if let Some(why) = unwritable {
            self.claimed.insert(slot.range.start);
            self.unresolved.push(UnresolvedMarker {
                line: slot.line,
                column: slot.column,
                marker: comment.trim().to_string(),
                reason: why.to_string(),
            });
            return;
        }
        let fields = match part {
            MarkerPart::Whole => {
                let Ok(r) = ImageRef::parse(value) else {
                    unreadable(self, "an image reference");
                    return;
                };
                Fields {
                    repository: None,
                    tag: r.tag,
                    digest: r.digest,
                    shape: Shape::Whole {
                        slot: slot.clone(),
                        name: r.name,
                    },
                }
            }
            MarkerPart::Name if Repository::parse(value).is_ok() => {
                Fields::single(None, None, slot.clone(), OnePart::Name)
            }
            MarkerPart::Tag if is_valid_tag(value) => {
                Fields::single(Some(value.to_string()), None, slot.clone(), OnePart::Tag)
            }
            // What Flux's image-automation-controller replaces whatever it holds: a digest,
            // or one of the wrong length (its setters test starts from
            // `sha256:1234567890abcdef`, internal/update/testdata/setters).
            MarkerPart::Digest if value.is_empty() || digest_shaped(value) => {
                let digest = (!value.is_empty()).then(|| value.to_string());
                Fields::single(None, digest, slot.clone(), OnePart::Digest)
            }
            MarkerPart::Name => {
                unreadable(self, "an image name");
                return;
            }
            MarkerPart::Tag => {
                unreadable(self, "a tag");
                return;
            }
            MarkerPart::Digest => {
                unreadable(self, "a digest");
                return;
            }
        };
        self.push(
            FieldKind::Marker {
                policy,
                namespace,
                part,
            },
            &slot,
            &[&slot],
            fields,
        );
    }

    /// Marker comments no scalar took: on a key, after a list, a mapping, an empty value or a
    /// block scalar, on a line of their own, or not readable as a marker at all. Each would
    /// otherwise change nothing and say nothing.
    pub(super) fn stray_markers(&mut self) {
        let mut stray: Vec<(&usize, &String)> = self
            .parsed
            .comments
            .iter()
            .filter(|(at, text)| !self.markers_seen.contains(at) && looks_like_marker(text))
            .collect();
        stray.sort();
        for (&at, text) in stray {
            let before = self.src.get(..at).unwrap_or_default();
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |n| n + 1) + 1;
            let reason = if parse_marker(text).is_none() {
                "it cannot be read as a marker: write `tagpilot: [namespace:]policy[:tag|:name|:digest]` or Flux's `{\"$imagepolicy\": \"namespace:policy[:tag|:name|:digest]\"}`"
            } else {
                "it follows no value tagpilot can write: a marker goes after a scalar value on the same line (not after a key, a list, a mapping or an empty value)"
            };
            self.unresolved.push(UnresolvedMarker {
                line,
                column,
                marker: text.trim().to_string(),
                reason: reason.to_string(),
            });
        }
    }
}

/// Whether a comment is meant as a marker, readable or not: tagpilot's `tagpilot:` or Flux's
/// JSON setter with `$imagepolicy`.
fn looks_like_marker(comment: &str) -> bool {
    let text = comment.trim();
    text.starts_with("tagpilot:") || (text.starts_with('{') && text.contains("\"$imagepolicy\""))
}

/// A marker comment's content: `tagpilot: [ns:]policy[:part]` or Flux's JSON setter.
fn parse_marker(comment: &str) -> Option<(String, Option<String>, MarkerPart)> {
    let text = comment.trim();
    let spec = if let Some(rest) = text.strip_prefix("tagpilot:") {
        rest.trim().to_string()
    } else if text.starts_with('{') {
        let value: serde_json::Value = serde_json::from_str(text).ok()?;
        value.get("$imagepolicy")?.as_str()?.trim().to_string()
    } else {
        return None;
    };
    let mut parts: Vec<&str> = spec.split(':').collect();
    let part = match parts.last().copied() {
        Some("tag") if parts.len() > 1 => MarkerPart::Tag,
        Some("name") if parts.len() > 1 => MarkerPart::Name,
        Some("digest") if parts.len() > 1 => MarkerPart::Digest,
        _ => MarkerPart::Whole,
    };
    if part != MarkerPart::Whole {
        parts.pop();
    }
    if parts
        .iter()
        .any(|p| p.is_empty() || p.contains(char::is_whitespace))
    {
        return None;
    }
    match parts.as_slice() {
        [policy] => Some((policy.to_string(), None, part)),
        [ns, policy] => Some((policy.to_string(), Some(ns.to_string()), part)),
        _ => None,
    }
}
