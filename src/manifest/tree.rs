//! A small node tree over granit-parser's events, keeping byte spans, so detection can walk
//! documents by key while edits still point at exact source bytes.

use std::collections::{HashMap, HashSet};
use std::ops::Range;

use granit_parser::{Event, Options, Parser, ScalarStyle, StructureStyle};

/// A parse failure, 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParseFailure {
    pub line: usize,
    pub column: usize,
    pub message: String,
    /// Nested deeper than [`options`] allows: the reader stopped on purpose, so the file is
    /// too deep rather than broken.
    pub too_deep: bool,
    /// Another of the reader's limits, in words (`1024 bytes in a directive`): the file may be
    /// valid YAML that tagpilot does not read, which is not the same as broken.
    pub over_limit: Option<String>,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub kind: NodeKind,
    /// Byte range of the node's own token: a scalar's source text (quotes included, anchor and
    /// tag excluded); for collections the parser's start marker only.
    pub range: Range<usize>,
    /// 1-based line; 1-based column in characters.
    pub line: usize,
    pub column: usize,
    /// Inside a flow collection, where `,[]{}` end a plain scalar.
    pub in_flow: bool,
    /// Carries an explicit tag (`!!str`), which decides its type whatever its text.
    pub tagged: bool,
    /// Carries an anchor (`&name`): aliases elsewhere read the same node.
    pub anchored: bool,
    /// The node, or a collection it is in, carries an anchor that an alias of its document
    /// reads: writing it would change what the alias reads too (another image, perhaps).
    pub shared: bool,
    /// The parser's id of its anchor, 0 for none.
    anchor: usize,
    /// For an alias, the id of the anchor it reads; 0 otherwise.
    alias_of: usize,
}

#[derive(Debug)]
pub(crate) enum NodeKind {
    Scalar {
        value: String,
        style: ScalarStyle,
    },
    Mapping {
        flow: bool,
        entries: Vec<(Node, Node)>,
    },
    Sequence {
        flow: bool,
        items: Vec<Node>,
    },
    Alias,
}

/// A parsed document (or, from [`parse`], file): its root(s), and its comments by the byte they
/// start at.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub docs: Vec<Node>,
    pub comments: HashMap<usize, String>,
    /// The anchor ids some alias of the document reads.
    aliased: HashSet<usize>,
    /// The values of the document's anchored scalars, by anchor id (a null as empty).
    anchored_scalars: HashMap<usize, String>,
}

/// The reader's options. Its nesting limits (255 levels of block or flow collections by
/// default) bound the recursion of everything that walks a parsed document; a file nested
/// deeper is skipped as too deep, never read halfway.
///
/// Comments are buffered without a count: the reader holds back the comments between a value
/// and what follows it until it knows where the next entry belongs, and its default of 96
/// refused valid values files (a chart's long commented-out block). What it buffers is bounded
/// by the file, and the planner reads no file over [`crate::plan::MAX_MANIFEST_BYTES`].
pub(crate) fn options() -> Options {
    granit_parser::options! {
        emit_anchor_events: true,
        max_buffered_comment_events: usize::MAX,
    }
}

pub(crate) fn failure(e: &granit_parser::ScanError) -> ParseFailure {
    use granit_parser::ErrorKind;
    let over_limit = match e.kind() {
        ErrorKind::TooManyComments => Some(format!(
            "{} comments in a row",
            options().max_buffered_comment_events
        )),
        ErrorKind::DirectiveByteLimitExceeded { limit } => {
            Some(format!("{limit} bytes in a directive"))
        }
        ErrorKind::TooManyReservedDirectiveParams { limit } => {
            Some(format!("{limit} parameters of a directive"))
        }
        ErrorKind::InputByteLimitExceeded { limit } => Some(format!("{limit} bytes")),
        ErrorKind::AnchorCountOverflow => Some("anchors in a document".to_string()),
        _ => None,
    };
    ParseFailure {
        line: e.marker().line(),
        column: e.marker().col() + 1,
        message: e.info(),
        too_deep: matches!(e.kind(), ErrorKind::RecursionLimitExceeded),
        over_limit,
    }
}

enum Open {
    Mapping {
        node: Node,
        pending_key: Option<Node>,
    },
    Sequence {
        node: Node,
    },
}

/// The whole file at once, for the few readers that look across documents (explaining why a
/// Helm value path names nothing); detection reads one document at a time ([`parse_each`]).
pub(crate) fn parse(src: &str) -> Result<Parsed, ParseFailure> {
    let mut all = Parsed::default();
    parse_each(src, |doc| {
        all.docs.append(&mut doc.docs);
        all.comments.extend(doc.comments.drain());
        all.anchored_scalars.extend(doc.anchored_scalars.drain());
    })?;
    Ok(all)
}

/// Parses `src` one document at a time, handing each to `each` as it ends and dropping it
/// after: a file of many documents never has more than one tree in memory (a node is about a
/// hundred bytes, several times the text it stands for). A parse failure anywhere is the
/// file's, as from a parse of the whole.
pub(crate) fn parse_each(src: &str, mut each: impl FnMut(&mut Parsed)) -> Result<(), ParseFailure> {
    let mut parsed = Parsed::default();
    let mut stack: Vec<Open> = Vec::new();
    for next in Parser::new_from_str_with_options(src, options()) {
        let (event, span) = next.map_err(|e| failure(&e))?;
        // Comments after a document's last node still belong to it (a marker on its last
        // line): the document is handed over at its end event.
        if matches!(event, Event::DocumentEnd) && stack.is_empty() {
            // A document of comments only still goes out: a marker there resolves to nothing,
            // and says so.
            if !parsed.docs.is_empty() || !parsed.comments.is_empty() {
                parsed.mark_shared();
                each(&mut parsed);
            }
            parsed = Parsed::default();
            continue;
        }
        let range = span.byte_range().unwrap_or(0..0);
        let in_flow = stack.iter().any(|o| match o {
            Open::Mapping { node, .. } => matches!(node.kind, NodeKind::Mapping { flow: true, .. }),
            Open::Sequence { node } => matches!(node.kind, NodeKind::Sequence { flow: true, .. }),
        });
        let mk = |kind: NodeKind, tagged: bool, anchor: usize| Node {
            kind,
            range: range.clone(),
            line: span.start.line(),
            column: span.start.col() + 1,
            in_flow,
            tagged,
            anchored: anchor != 0,
            shared: false,
            anchor,
            alias_of: 0,
        };
        let finished = match event {
            Event::Comment(text, _) => {
                parsed.comments.insert(range.start, text.into_owned());
                None
            }
            Event::Scalar(value, style, anchor, tag) => {
                let node = mk(
                    NodeKind::Scalar {
                        value: value.into_owned(),
                        style,
                    },
                    tag.is_some(),
                    anchor,
                );
                if anchor != 0 {
                    let value = node.read().unwrap_or_default().to_string();
                    parsed.anchored_scalars.insert(anchor, value);
                }
                Some(node)
            }
            Event::Alias(id) => {
                parsed.aliased.insert(id);
                Some(Node {
                    alias_of: id,
                    ..mk(NodeKind::Alias, false, 0)
                })
            }
            Event::UnresolvedAlias(_) => Some(mk(NodeKind::Alias, false, 0)),
            Event::MappingStart(style, anchor, tag) => {
                let flow = style == StructureStyle::Flow;
                let node = mk(
                    NodeKind::Mapping {
                        flow,
                        entries: Vec::new(),
                    },
                    tag.is_some(),
                    anchor,
                );
                stack.push(Open::Mapping {
                    node,
                    pending_key: None,
                });
                None
            }
            Event::SequenceStart(style, anchor, tag) => {
                let flow = style == StructureStyle::Flow;
                let node = mk(
                    NodeKind::Sequence {
                        flow,
                        items: Vec::new(),
                    },
                    tag.is_some(),
                    anchor,
                );
                stack.push(Open::Sequence { node });
                None
            }
            Event::MappingEnd => match stack.pop() {
                Some(Open::Mapping { node, .. }) => Some(node),
                _ => None,
            },
            Event::SequenceEnd => match stack.pop() {
                Some(Open::Sequence { node }) => Some(node),
                _ => None,
            },
            _ => None,
        };
        let Some(node) = finished else { continue };
        match stack.last_mut() {
            None => parsed.docs.push(node),
            Some(Open::Sequence { node: seq }) => {
                if let NodeKind::Sequence { items, .. } = &mut seq.kind {
                    items.push(node);
                }
            }
            Some(Open::Mapping {
                node: map,
                pending_key,
            }) => match pending_key.take() {
                None => *pending_key = Some(node),
                Some(key) => {
                    if let NodeKind::Mapping { entries, .. } = &mut map.kind {
                        entries.push((key, node));
                    }
                }
            },
        }
    }
    if !parsed.docs.is_empty() || !parsed.comments.is_empty() {
        parsed.mark_shared();
        each(&mut parsed);
    }
    Ok(())
}

impl Parsed {
    /// The value `node` holds for a reader, never for a writer: a scalar's (a null as empty),
    /// or the scalar an alias reads. `None` for collections and aliases of them.
    pub fn value_of<'a>(&'a self, node: &'a Node) -> Option<&'a str> {
        match node.kind {
            NodeKind::Alias => self
                .anchored_scalars
                .get(&node.alias_of)
                .map(String::as_str),
            _ => node.read(),
        }
    }

    /// Marks every node an alias reads, itself or through a collection it is in. Aliases name
    /// anchors before them, so this is known only once the document has ended.
    fn mark_shared(&mut self) {
        fn mark(node: &mut Node, aliased: &HashSet<usize>, inherited: bool) {
            node.shared = inherited || (node.anchor != 0 && aliased.contains(&node.anchor));
            let shared = node.shared;
            match &mut node.kind {
                NodeKind::Mapping { entries, .. } => {
                    for (k, v) in entries {
                        mark(k, aliased, shared);
                        mark(v, aliased, shared);
                    }
                }
                NodeKind::Sequence { items, .. } => {
                    for item in items {
                        mark(item, aliased, shared);
                    }
                }
                _ => {}
            }
        }
        if self.aliased.is_empty() {
            return;
        }
        for doc in &mut self.docs {
            mark(doc, &self.aliased, false);
        }
    }
}

impl Node {
    /// A YAML null: a plain, untagged `null`, `Null`, `NULL`, `~`, or nothing at all (YAML 1.2's
    /// core schema, which Helm's reader follows). `registry: null` is no registry, not one
    /// named `null`.
    pub fn is_null(&self) -> bool {
        match &self.kind {
            NodeKind::Scalar { value, style } => {
                !self.tagged
                    && *style == ScalarStyle::Plain
                    && matches!(value.as_str(), "" | "~" | "null" | "Null" | "NULL")
            }
            _ => false,
        }
    }

    /// A scalar's value as a reader takes it: a YAML null is empty.
    pub fn read(&self) -> Option<&str> {
        match self.is_null() {
            true => Some(""),
            false => self.scalar(),
        }
    }

    pub fn scalar(&self) -> Option<&str> {
        match &self.kind {
            NodeKind::Scalar { value, .. } => Some(value),
            _ => None,
        }
    }

    /// The value under a plain-text key, if this is a mapping that has it.
    pub fn get(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            NodeKind::Mapping { entries, .. } => entries
                .iter()
                .find(|(k, _)| k.scalar() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_path(&self, keys: &[&str]) -> Option<&Node> {
        keys.iter().try_fold(self, |node, key| node.get(key))
    }

    pub fn items(&self) -> &[Node] {
        match &self.kind {
            NodeKind::Sequence { items, .. } => items,
            _ => &[],
        }
    }

    pub fn entries(&self) -> &[(Node, Node)] {
        match &self.kind {
            NodeKind::Mapping { entries, .. } => entries,
            _ => &[],
        }
    }

    pub fn is_mapping(&self) -> bool {
        matches!(self.kind, NodeKind::Mapping { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_nested_nodes_with_spans() {
        let src = "a:\n  b: [x, 'y']\n  c: {d: e}\n";
        let parsed = parse(src).unwrap();
        let root = &parsed.docs[0];
        let b = root.get_path(&["a", "b"]).unwrap();
        assert_eq!(b.items().len(), 2);
        assert!(b.items()[0].in_flow);
        assert_eq!(&src[b.items()[1].range.clone()], "'y'");
        let d = root.get_path(&["a", "c", "d"]).unwrap();
        assert_eq!(d.scalar(), Some("e"));
        assert!(d.in_flow);
        assert!(!root.get("a").unwrap().in_flow);
        assert_eq!((d.line, d.column), (3, 10));
    }

    #[test]
    fn failures_are_one_based() {
        let err = parse("a: b\n  c: d\n").unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.column >= 1);
    }
}
