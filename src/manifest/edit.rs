//! Turning an update into byte edits of a field's scalars, and splicing edits into a file's
//! text, verified by re-parsing before any text comes out.

use std::path::Path;

use crate::image::{ImageRef, Repository};

use super::render::{self, Context, Quote};
use super::{
    Edit, Expect, FieldKind, ImageField, ManifestError, OnePart, Part, Pins, Shape, Slot, Update,
    verify,
};

// === impl ImageField ===

impl ImageField {
    /// The repository the field refers to; `None` for markers (they name a policy instead).
    pub fn repository(&self) -> Option<&Repository> {
        self.repository.as_ref()
    }

    /// Which parts the field lets tagpilot write: everything but the keys a kustomize entry
    /// leaves to other means (see [`Part::Unpinned`]).
    pub fn pins(&self) -> Pins {
        match &self.shape {
            Shape::Split { tag, digest } => Pins {
                tag: !matches!(tag, Part::Unpinned { .. }),
                digest: !matches!(digest, Part::Unpinned { .. }),
            },
            // A chart version has no digest beside it.
            _ if matches!(self.kind, FieldKind::Chart { .. }) => Pins {
                tag: true,
                digest: false,
            },
            _ => Pins {
                tag: true,
                digest: true,
            },
        }
    }

    /// Whether the field is a whole reference without tag or digest (`image: nginx`), which a
    /// container runtime pulls as `latest`.
    pub fn implicit_latest(&self) -> bool {
        matches!(self.shape, Shape::Whole { .. }) && self.tag.is_none() && self.digest.is_none()
    }

    /// What a kustomize entry that pins neither a tag nor a digest has instead (`` only
    /// `newName` ``): kustomize keeps the base's version, and tagpilot never adds one.
    pub fn pins_nothing(&self) -> Option<&'static str> {
        match &self.shape {
            Shape::Split {
                tag: Part::Unpinned { only },
                digest: Part::Unpinned { .. },
            } => *only,
            _ => None,
        }
    }

    /// Whether the field is Helm values whose tag key is there and empty (`tag: ""`, `tag:`,
    /// `tag: null`): a chart reads that as "my appVersion", so it names no tag to move from.
    pub fn empty_tag(&self) -> bool {
        matches!(self.kind, FieldKind::HelmValues { .. })
            && match &self.shape {
                Shape::Split { tag, .. } => match tag {
                    Part::Empty { .. } => true,
                    Part::Present(slot) => slot.value.is_empty(),
                    _ => false,
                },
                _ => false,
            }
    }

    /// Whether the field is Helm values with no tag key at all (and no digest): the chart's own
    /// default runs (usually its appVersion), which adding a tag key would override.
    pub fn missing_tag(&self) -> bool {
        matches!(self.kind, FieldKind::HelmValues { .. })
            && self.digest.is_none()
            && matches!(
                &self.shape,
                Shape::Split {
                    tag: Part::Missing { .. },
                    ..
                }
            )
    }

    /// The tag and digest the field holds now.
    pub fn current(&self) -> (Option<&str>, Option<&str>) {
        (self.tag.as_deref(), self.digest.as_deref())
    }

    /// The file the field was found in, as passed to [`scan`].
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The byte edits that make this field hold `update`; empty when it already does.
    ///
    /// Whole references keep the name as written when it names the same repository as
    /// `update.name`. Split fields change only the parts that differ: a missing tag or digest key
    /// is added to the entry's mapping (unless the entry leaves it unpinned, see [`Self::pins`]),
    /// a tag-less update leaves the tag alone, and a digest-less
    /// update empties an existing digest (`""`), because a stale digest would override the new
    /// tag. Markers receive only their part.
    pub fn edits(&self, update: &Update<'_>) -> Result<Vec<Edit>, ManifestError> {
        let mut out = Vec::new();
        match &self.shape {
            Shape::Whole { slot, name } => {
                let same = match (ImageRef::parse(name), Repository::parse(update.name)) {
                    (Ok(a), Ok(b)) => a.repository == b,
                    _ => false,
                };
                let name = if same { name.as_str() } else { update.name };
                let value = ImageRef::render(name, update.tag, update.digest);
                self.replace(slot, &value, &mut out)?;
            }
            Shape::Split { tag, digest } => {
                if let Some(t) = update.tag {
                    self.write_part(tag, t, &mut out)?;
                }
                match update.digest {
                    Some(d) => self.write_part(digest, d, &mut out)?,
                    None => match digest {
                        Part::Present(slot) if !slot.value.is_empty() => {
                            self.replace(slot, "", &mut out)?;
                        }
                        _ => {}
                    },
                }
            }
            Shape::Single { slot, part } => {
                let value = match part {
                    OnePart::Name => Some(update.name),
                    OnePart::Tag => update.tag,
                    OnePart::Digest => update.digest,
                };
                if let Some(value) = value {
                    self.replace(slot, value, &mut out)?;
                }
            }
        }
        Ok(out)
    }

    fn replace(&self, slot: &Slot, value: &str, out: &mut Vec<Edit>) -> Result<(), ManifestError> {
        replace(&self.file, slot, value, out)
    }

    fn write_part(
        &self,
        part: &Part,
        value: &str,
        out: &mut Vec<Edit>,
    ) -> Result<(), ManifestError> {
        match part {
            Part::Present(slot) => self.replace(slot, value, out),
            // The planner holds a reference whose strategy needs an unpinned part; the other
            // part (a digest beside a tag that kustomize takes from the base) stays as it is.
            Part::Unpinned { .. } => Ok(()),
            Part::Empty { line, column } => Err(ManifestError::EmptyValue {
                file: self.file.clone(),
                line: *line,
                column: *column,
                what: format!("the value for {value:?}"),
            }),
            Part::Missing { key, at } => {
                let cannot = |reason: &str, line, column| ManifestError::CannotInsert {
                    file: self.file.clone(),
                    line,
                    column,
                    key: key.clone(),
                    reason: reason.to_string(),
                };
                let Some(at) = at else {
                    return Err(cannot(
                        "its parent mapping does not exist",
                        self.line,
                        self.column,
                    ));
                };
                let Some(pos) = at.pos else {
                    return Err(cannot(
                        "the mapping's last value is not a plain scalar",
                        at.line,
                        at.column,
                    ));
                };
                let cx = Context {
                    quote: Quote::Plain,
                    in_flow: at.flow,
                    tagged: false,
                };
                let (text, quote) = render::render(value, cx);
                let expect = Expect::Insert {
                    mapping: at.mapping,
                    key: key.clone(),
                    value: value.to_string(),
                    quote,
                };
                let text = if at.flow {
                    format!(", {key}: {text}")
                } else {
                    format!("{}{}{key}: {text}", at.eol, " ".repeat(at.indent))
                };
                out.push(Edit {
                    span: pos..pos,
                    text,
                    expect,
                });
                Ok(())
            }
        }
    }
}

/// The edit that makes `slot` (of `file`) hold `value` in its own quoting style; none when it
/// already does. A block scalar is never rewritten.
pub(super) fn replace(
    file: &Path,
    slot: &Slot,
    value: &str,
    out: &mut Vec<Edit>,
) -> Result<(), ManifestError> {
    if slot.value == value {
        return Ok(());
    }
    let Some(quote) = slot.quote else {
        return Err(ManifestError::BlockScalar {
            file: file.to_path_buf(),
            line: slot.line,
            column: slot.column,
        });
    };
    let cx = Context {
        quote,
        in_flow: slot.in_flow,
        tagged: slot.tagged,
    };
    let (text, quote) = render::render(value, cx);
    out.push(Edit {
        span: slot.range.clone(),
        text,
        expect: Expect::Replace {
            value: value.to_string(),
            quote,
        },
    });
    Ok(())
}

/// Applies edits (from any fields of this one file) and checks the result re-parses to the same
/// document except at the edits. Returns the new text, or an error and no text.
pub fn apply_edits(path: &Path, src: &str, edits: &[Edit]) -> Result<String, ManifestError> {
    let mut edits: Vec<Edit> = edits.to_vec();
    edits.sort_by_key(|e| (e.span.start, e.span.end));
    edits.dedup();
    let mut out = String::with_capacity(src.len() + 64);
    let mut pos = 0;
    for e in &edits {
        let bad = ManifestError::BadEdit {
            file: path.to_path_buf(),
            offset: e.span.start,
        };
        if e.span.start < pos
            || e.span.end < e.span.start
            || e.span.end > src.len()
            || !src.is_char_boundary(e.span.start)
            || !src.is_char_boundary(e.span.end)
        {
            return Err(bad);
        }
        out.push_str(&src[pos..e.span.start]);
        out.push_str(&e.text);
        pos = e.span.end;
    }
    out.push_str(&src[pos..]);
    if edits.is_empty() {
        return Ok(out);
    }
    // A Go-templated file is verified as it was read: its template lines as comments.
    let verified = if super::template::is_templated(path) {
        let (old, _) = super::template::mask(src);
        let (new, _) = super::template::mask(&out);
        verify::verify(&old, &new, &edits)
    } else {
        verify::verify(src, &out, &edits)
    };
    verified.map_err(|m| {
        let (line, column) = line_column(src, m.offset);
        ManifestError::Verification {
            file: path.to_path_buf(),
            line,
            column,
            reason: m.reason,
        }
    })?;
    Ok(out)
}

/// 1-based line and character column of a byte offset.
fn line_column(src: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(src.len());
    let before = src.get(..offset).unwrap_or(src);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..]
        .trim_start_matches('\u{feff}')
        .chars()
        .count()
        + 1;
    (line, column)
}
