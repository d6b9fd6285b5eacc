//! The safety net: the edited text, parsed again, must give the original event stream except at
//! the edited scalars (which must read back exactly as intended) and the inserted key/value
//! pairs (which must land, as a pair, at the end of the intended mapping).

use std::ops::Range;

use granit_parser::{Event, Parser};

use super::render::Quote;
use super::tree::{self, ParseFailure};
use super::{Edit, Expect};

/// Where and why verification failed: a byte offset in the original text and a reason.
#[derive(Debug)]
pub(crate) struct Mismatch {
    pub offset: usize,
    pub reason: String,
}

type Events<'a> = Vec<(Event<'a>, Range<usize>)>;

fn events(src: &str) -> Result<Events<'_>, ParseFailure> {
    Parser::new_from_str_with_options(src, tree::options())
        .map(|next| {
            next.map(|(e, span)| (e, span.byte_range().unwrap_or(0..0)))
                .map_err(|e| tree::failure(&e))
        })
        .collect()
}

/// `edits` are sorted by position and do not overlap; `new` is `old` with them applied.
pub(crate) fn verify(old: &str, new: &str, edits: &[Edit]) -> Result<(), Mismatch> {
    let first = edits.first().map_or(0, |e| e.span.start);
    let before = events(old).map_err(|f| Mismatch {
        offset: 0,
        reason: format!(
            "the original text does not parse at {}:{}: {}",
            f.line, f.column, f.message
        ),
    })?;
    let after = events(new).map_err(|f| Mismatch {
        offset: first,
        reason: format!(
            "the edited text does not parse at {}:{}: {}",
            f.line, f.column, f.message
        ),
    })?;

    // Where each edit's text lands in the new string.
    let mut delta: isize = 0;
    let new_ranges: Vec<Range<usize>> = edits
        .iter()
        .map(|e| {
            let start = (e.span.start as isize + delta) as usize;
            delta += e.text.len() as isize - e.span.len() as isize;
            start..start + e.text.len()
        })
        .collect();

    // For each original mapping start (by event index): its end event index and direct keys.
    let mapping_ends = match_mappings(&before);

    let mut replaced = vec![false; edits.len()];
    let mut inserted: Vec<Vec<(String, Option<Quote>, usize)>> = vec![Vec::new(); edits.len()];
    let mut i = 0;
    for (ev2, r2) in &after {
        if let Event::Scalar(value, style, _, _) = ev2 {
            let hit = edits.iter().zip(&new_ranges).position(|(e, nr)| {
                matches!(e.expect, Expect::Insert { .. })
                    && nr.start <= r2.start
                    && r2.end <= nr.end
            });
            if let Some(k) = hit {
                inserted[k].push((value.to_string(), Quote::of(*style), i));
                continue;
            }
        }
        let Some((ev1, r1)) = before.get(i) else {
            return Err(Mismatch {
                offset: old.len(),
                reason: "the edited text has extra content".into(),
            });
        };
        i += 1;
        let replacement = edits.iter().position(|e| {
            matches!(e.expect, Expect::Replace { .. })
                && e.span == *r1
                && matches!(ev1, Event::Scalar(..))
        });
        if let Some(k) = replacement {
            let Expect::Replace { value, quote } = &edits[k].expect else {
                unreachable!()
            };
            let (Event::Scalar(v1, _, anchor1, tag1), Event::Scalar(v2, s2, anchor2, tag2)) =
                (ev1, ev2)
            else {
                return Err(Mismatch {
                    offset: r1.start,
                    reason: "the edited scalar is no longer a scalar".into(),
                });
            };
            if *r2 != new_ranges[k] {
                return Err(Mismatch {
                    offset: r1.start,
                    reason: "the new text is not read as exactly one scalar".into(),
                });
            }
            if v2.as_ref() != value || Quote::of(*s2) != Some(*quote) {
                return Err(Mismatch {
                    offset: r1.start,
                    reason: format!(
                        "{:?} reads back as {:?} ({:?}), not {value:?}",
                        v1.as_ref(),
                        v2.as_ref(),
                        s2
                    ),
                });
            }
            if anchor1 != anchor2 || tag1 != tag2 {
                return Err(Mismatch {
                    offset: r1.start,
                    reason: "the scalar's anchor or tag changed".into(),
                });
            }
            replaced[k] = true;
            continue;
        }
        if ev1 != ev2 {
            return Err(Mismatch {
                offset: r1.start,
                reason: format!("the document changed here: {ev1:?} became {ev2:?}"),
            });
        }
    }
    if i != before.len() {
        return Err(Mismatch {
            offset: before[i].1.start,
            reason: "the edited text lost content".into(),
        });
    }

    for (k, edit) in edits.iter().enumerate() {
        match &edit.expect {
            Expect::Replace { .. } if !replaced[k] => {
                return Err(Mismatch {
                    offset: edit.span.start,
                    reason: "the edit does not cover exactly one scalar".into(),
                });
            }
            Expect::Replace { .. } => {}
            Expect::Insert {
                mapping,
                key,
                value,
                quote,
            } => {
                let got = &inserted[k];
                let fail = |reason: String| {
                    Err(Mismatch {
                        offset: edit.span.start,
                        reason,
                    })
                };
                let [(k2, kq, at), (v2, vq, at2)] = got.as_slice() else {
                    return fail(format!(
                        "inserting `{key}` did not add exactly one key and value"
                    ));
                };
                if k2 != key
                    || *kq != Some(Quote::Plain)
                    || v2 != value
                    || *vq != Some(*quote)
                    || at != at2
                {
                    return fail(format!("inserting `{key}` reads back as `{k2}: {v2}`"));
                }
                // The pair must sit between two entries (or at the end) of the intended mapping:
                // the next original event is one of its keys or its end.
                let next = before[*at..]
                    .iter()
                    .position(|(e, _)| !matches!(e, Event::Comment(..)))
                    .map(|n| at + n);
                let owner = mapping_ends
                    .iter()
                    .find(|m| next.is_some_and(|n| n == m.end || m.key_events.contains(&n)));
                match owner {
                    Some(m) if before[m.start].1.start == *mapping => {
                        if m.keys.iter().any(|k| k == key) {
                            return fail(format!("the mapping already has `{key}`"));
                        }
                    }
                    _ => {
                        return fail(format!(
                            "`{key}` did not land between entries of its mapping"
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

struct MappingSpan {
    start: usize,
    end: usize,
    keys: Vec<String>,
    /// Event indexes where its keys begin.
    key_events: Vec<usize>,
}

/// Pairs each MappingStart with its MappingEnd (event indexes) and lists its keys.
fn match_mappings(events: &Events<'_>) -> Vec<MappingSpan> {
    enum Frame {
        Map {
            start: usize,
            keys: Vec<String>,
            key_events: Vec<usize>,
            next_is_key: bool,
        },
        Seq,
    }
    let mut out = Vec::new();
    let mut stack: Vec<Frame> = Vec::new();
    let take_slot = |stack: &mut Vec<Frame>, i: usize, key: Option<&str>| {
        if let Some(Frame::Map {
            keys,
            key_events,
            next_is_key,
            ..
        }) = stack.last_mut()
        {
            if *next_is_key {
                key_events.push(i);
                if let Some(k) = key {
                    keys.push(k.to_string());
                }
            }
            *next_is_key = !*next_is_key;
        }
    };
    for (i, (e, _)) in events.iter().enumerate() {
        match e {
            Event::Scalar(v, ..) => take_slot(&mut stack, i, Some(v)),
            Event::Alias(_) | Event::UnresolvedAlias(_) => take_slot(&mut stack, i, None),
            Event::MappingStart(..) => {
                take_slot(&mut stack, i, None);
                stack.push(Frame::Map {
                    start: i,
                    keys: Vec::new(),
                    key_events: Vec::new(),
                    next_is_key: true,
                });
            }
            Event::SequenceStart(..) => {
                take_slot(&mut stack, i, None);
                stack.push(Frame::Seq);
            }
            Event::MappingEnd => {
                if let Some(Frame::Map {
                    start,
                    keys,
                    key_events,
                    ..
                }) = stack.pop()
                {
                    out.push(MappingSpan {
                        start,
                        end: i,
                        keys,
                        key_events,
                    });
                }
            }
            Event::SequenceEnd => {
                stack.pop();
            }
            _ => {}
        }
    }
    out
}
