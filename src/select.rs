//! Tag selection: given a policy, the tag a file is on now, and the registry's tags, which tag
//! should the file be on? Pure code, no I/O: everything it needs is passed in.
//!
//! INTERFACE SKETCH — filled in by the policy/selection work.

use crate::policy::ImagePolicy;

/// A version constraint in the syntax users already have in Argo CD Image Updater annotations
/// (Masterminds semver: `~1.26`, `^1.0`, `1.x`, `>=1.2, <2.0`, `1.2 - 1.4`, `a || b`).
#[derive(Debug, Clone)]
pub struct Constraint {
    pub raw: String,
}

/// A tag as seen in the registry, with metadata where the strategy needed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagCandidate {
    pub tag: String,
    /// Build time, from the image config or the `org.opencontainers.image.created` annotation.
    pub created: Option<jiff::Timestamp>,
    pub digest: Option<String>,
}

/// The outcome for one reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Move to this tag.
    Update(TagCandidate),
    /// The file is already on the best tag.
    UpToDate,
    /// Nothing to do, and why (no candidate in range, pinned above range, …).
    Hold(String),
}

#[derive(Debug, thiserror::Error)]
pub enum SelectError {}

/// Tags that pass `allowTags`, `ignoreTags` and the strategy's own filter, in registry order.
pub fn filter_tags<'a>(_policy: &ImagePolicy, _tags: &'a [String]) -> Vec<&'a str> {
    todo!()
}

/// Whether `choose` needs `created` on the candidates (newest build).
pub fn needs_build_time(_policy: &ImagePolicy) -> bool {
    todo!()
}

/// Picks the tag for a reference currently on `current` (None when the file names no tag).
pub fn choose(_policy: &ImagePolicy, _current: Option<&str>, _candidates: &[TagCandidate]) -> Decision {
    todo!()
}
