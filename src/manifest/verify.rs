//! The safety net: the edited text, parsed again, must give the original event stream except at
//! the edited scalars (which must read back exactly as intended) and the inserted key/value
//! pairs (which must land, as a pair, at the end of the intended mapping).

use std::ops::Range;

use granit_parser::{Event, Parser};

use super::render::Quote;
use super::tree;
use super::{Edit, Expect};

/// Where and why verification failed: a byte offset in the original text and a reason.
#[derive(Debug)]
pub(crate) struct Mismatch {
    pub offset: usize,
    pub reason: String,
}

/// Both texts are read as event streams side by side, never collected: a large file costs its
/// two texts and a stack as deep as its nesting, not an event list each (which, at about a
/// hundred bytes an event, came to several times the file).
///
/// `edits` are sorted by position and do not overlap; `new` is `old` with them applied.
pub(crate) fn verify(old: &str, new: &str, edits: &[Edit]) -> Result<(), Mismatch> {
    let first = edits.first().map_or(0, |e| e.span.start);
    let mut before = Parser::new_from_str_with_options(old, tree::options());
    let mut next_before = move || -> Option<Result<(Event<'_>, Range<usize>), Mismatch>> {
        before.next().map(|next| {
            next.map(|(e, span)| (e, span.byte_range().unwrap_or(0..0)))
                .map_err(|e| {
                    let f = tree::failure(&e);
                    Mismatch {
                        offset: 0,
                        reason: format!(
                            "the original text does not parse at {}:{}: {}",
                            f.line, f.column, f.message
                        ),
                    }
                })
        })
    };
    let after = Parser::new_from_str_with_options(new, tree::options());

    // 1. Where each edit's text lands in the new string, and the mappings insertions go into.
    let new_ranges = new_ranges(edits);
    let targets = insertion_targets(edits);

    // 2. Both streams side by side: each event of the new text is an inserted scalar, or the
    //    original's next event, as it was or as an edit means it to read.
    let mut stack: Vec<Frame> = Vec::new();
    let mut seen = Seen::new(edits.len());
    for next in after {
        let (ev2, r2) = match next {
            Ok((e, span)) => (e, span.byte_range().unwrap_or(0..0)),
            Err(e) => {
                let f = tree::failure(&e);
                return Err(Mismatch {
                    offset: first,
                    reason: format!(
                        "the edited text does not parse at {}:{}: {}",
                        f.line, f.column, f.message
                    ),
                });
            }
        };
        if seen.inserted_scalar(edits, &new_ranges, &ev2, &r2) {
            continue;
        }
        let Some(got) = next_before() else {
            return Err(Mismatch {
                offset: old.len(),
                reason: "the edited text has extra content".into(),
            });
        };
        let (ev1, r1) = got?;
        seen.i += 1;
        if !matches!(ev1, Event::Comment(..)) {
            seen.land_pending(edits, &stack, &ev1);
        }
        track(&mut stack, &ev1, r1.start, &targets, |start, keys| {
            for (k, edit) in edits.iter().enumerate() {
                if let Expect::Insert { mapping, key, .. } = &edit.expect
                    && *mapping == start
                {
                    seen.already_there[k] = keys.iter().any(|have| have == key);
                }
            }
        });
        let replacement = edits.iter().position(|e| {
            matches!(e.expect, Expect::Replace { .. })
                && e.span == r1
                && matches!(ev1, Event::Scalar(..))
        });
        if let Some(k) = replacement {
            replaced(&edits[k].expect, (&ev1, &r1), (&ev2, &r2), &new_ranges[k])?;
            seen.replaced[k] = true;
            continue;
        }
        if ev1 != ev2 {
            return Err(Mismatch {
                offset: r1.start,
                reason: format!("the document changed here: {ev1:?} became {ev2:?}"),
            });
        }
    }
    if let Some(rest) = next_before() {
        let (_, r1) = rest?;
        return Err(Mismatch {
            offset: r1.start,
            reason: "the edited text lost content".into(),
        });
    }

    // 3. Every edit found, as it was meant.
    seen.check(edits)
}

/// Where each edit's text lands in the new string.
fn new_ranges(edits: &[Edit]) -> Vec<Range<usize>> {
    let mut delta: isize = 0;
    edits
        .iter()
        .map(|e| {
            let start = (e.span.start as isize + delta) as usize;
            delta += e.text.len() as isize - e.span.len() as isize;
            start..start + e.text.len()
        })
        .collect()
}

/// The mappings insertions go into, by the byte their start event is at: only their keys are
/// collected.
fn insertion_targets(edits: &[Edit]) -> Vec<usize> {
    edits
        .iter()
        .filter_map(|e| match &e.expect {
            Expect::Insert { mapping, .. } => Some(*mapping),
            Expect::Replace { .. } => None,
        })
        .collect()
}

/// What the side-by-side reading found of each edit (indexed as `edits`).
struct Seen {
    replaced: Vec<bool>,
    inserted: Vec<Vec<(String, Option<Quote>, usize)>>,
    /// An inserted pair sits between two entries (or at the end) of its mapping when the next
    /// original event is one of that mapping's keys or its end.
    landed: Vec<bool>,
    already_there: Vec<bool>,
    /// Inserted pairs complete, waiting for the next original event to say where they landed.
    pending: Vec<usize>,
    /// How many original events have been read.
    i: usize,
}

impl Seen {
    fn new(edits: usize) -> Self {
        Seen {
            replaced: vec![false; edits],
            inserted: vec![Vec::new(); edits],
            landed: vec![false; edits],
            already_there: vec![false; edits],
            pending: Vec::new(),
            i: 0,
        }
    }

    /// Whether the new text's scalar `ev2` at `r2` is part of an inserted pair (and takes it).
    fn inserted_scalar(
        &mut self,
        edits: &[Edit],
        new_ranges: &[Range<usize>],
        ev2: &Event<'_>,
        r2: &Range<usize>,
    ) -> bool {
        let Event::Scalar(value, style, _, _) = ev2 else {
            return false;
        };
        let hit = edits.iter().zip(new_ranges).position(|(e, nr)| {
            matches!(e.expect, Expect::Insert { .. }) && nr.start <= r2.start && r2.end <= nr.end
        });
        let Some(k) = hit else {
            return false;
        };
        self.inserted[k].push((value.to_string(), Quote::of(*style), self.i));
        if self.inserted[k].len() == 2 {
            self.pending.push(k);
        }
        true
    }

    /// Says where the pending inserted pairs landed, by the original event `ev1` after them.
    fn land_pending(&mut self, edits: &[Edit], stack: &[Frame], ev1: &Event<'_>) {
        // The event is one of the top mapping's keys, or its end.
        let node = matches!(
            ev1,
            Event::Scalar(..)
                | Event::Alias(_)
                | Event::UnresolvedAlias(_)
                | Event::MappingStart(..)
                | Event::SequenceStart(..)
        );
        let owner = match stack.last() {
            Some(Frame::Map {
                start, next_is_key, ..
            }) if (*next_is_key && node) || matches!(ev1, Event::MappingEnd) => Some(*start),
            _ => None,
        };
        for k in self.pending.drain(..) {
            if let Expect::Insert { mapping, .. } = &edits[k].expect {
                self.landed[k] = owner == Some(*mapping);
            }
        }
    }

    /// Every replacement found, and every insertion read back as one key and value, in its
    /// mapping, new there.
    fn check(&self, edits: &[Edit]) -> Result<(), Mismatch> {
        for (k, edit) in edits.iter().enumerate() {
            match &edit.expect {
                Expect::Replace { .. } if !self.replaced[k] => {
                    return Err(Mismatch {
                        offset: edit.span.start,
                        reason: "the edit does not cover exactly one scalar".into(),
                    });
                }
                Expect::Replace { .. } => {}
                Expect::Insert {
                    key, value, quote, ..
                } => {
                    let got = &self.inserted[k];
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
                    if !self.landed[k] {
                        return fail(format!(
                            "`{key}` did not land between entries of its mapping"
                        ));
                    }
                    if self.already_there[k] {
                        return fail(format!("the mapping already has `{key}`"));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Checks a replaced scalar: the original event `ev1` at `r1` became `ev2` at `r2`, which must
/// be exactly the edit's new text (`new_range`) and read back as `expect` says.
fn replaced(
    expect: &Expect,
    (ev1, r1): (&Event<'_>, &Range<usize>),
    (ev2, r2): (&Event<'_>, &Range<usize>),
    new_range: &Range<usize>,
) -> Result<(), Mismatch> {
    let Expect::Replace { value, quote } = expect else {
        unreachable!()
    };
    let (Event::Scalar(v1, _, anchor1, tag1), Event::Scalar(v2, s2, anchor2, tag2)) = (ev1, ev2)
    else {
        return Err(Mismatch {
            offset: r1.start,
            reason: "the edited scalar is no longer a scalar".into(),
        });
    };
    if r2 != new_range {
        return Err(Mismatch {
            offset: r1.start,
            reason: "the new text is not read as exactly one scalar".into(),
        });
    }
    // `&*`, not `as_ref()`: with `typed-path` in the build (through sigstore's TUF client),
    // `Cow<str>: AsRef<_>` has two candidates and no longer infers.
    if &**v2 != value || Quote::of(*s2) != Some(*quote) {
        return Err(Mismatch {
            offset: r1.start,
            reason: format!(
                "{:?} reads back as {:?} ({:?}), not {value:?}",
                &**v1, &**v2, s2
            ),
        });
    }
    if anchor1 != anchor2 || tag1 != tag2 {
        return Err(Mismatch {
            offset: r1.start,
            reason: "the scalar's anchor or tag changed".into(),
        });
    }
    Ok(())
}

/// An open collection of the original text, while its events are read.
enum Frame {
    Map {
        /// The byte its start event is at.
        start: usize,
        /// Its plain keys so far, for a mapping an insertion goes into; `None` for the others.
        keys: Option<Vec<String>>,
        next_is_key: bool,
    },
    Seq,
}

/// Follows one original event into `stack`; calls `closed` with each target mapping's start and
/// keys as it ends.
fn track(
    stack: &mut Vec<Frame>,
    event: &Event<'_>,
    at: usize,
    targets: &[usize],
    mut closed: impl FnMut(usize, &[String]),
) {
    let take_slot = |stack: &mut Vec<Frame>, key: Option<&str>| {
        if let Some(Frame::Map {
            keys, next_is_key, ..
        }) = stack.last_mut()
        {
            if *next_is_key && let (Some(keys), Some(k)) = (keys, key) {
                keys.push(k.to_string());
            }
            *next_is_key = !*next_is_key;
        }
    };
    match event {
        Event::Scalar(v, ..) => take_slot(stack, Some(v)),
        Event::Alias(_) | Event::UnresolvedAlias(_) => take_slot(stack, None),
        Event::MappingStart(..) => {
            take_slot(stack, None);
            stack.push(Frame::Map {
                start: at,
                keys: targets.contains(&at).then(Vec::new),
                next_is_key: true,
            });
        }
        Event::SequenceStart(..) => {
            take_slot(stack, None);
            stack.push(Frame::Seq);
        }
        Event::MappingEnd => {
            if let Some(Frame::Map {
                start,
                keys: Some(keys),
                ..
            }) = stack.pop()
            {
                closed(start, &keys);
            }
        }
        Event::SequenceEnd => {
            stack.pop();
        }
        _ => {}
    }
}
