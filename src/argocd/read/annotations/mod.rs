//! Argo CD Image Updater's annotations, read exactly as Image Updater documents them, under its
//! prefix and under tagpilot's own (`tagpilot.dev/`, which wins per key).
//!
//! Pure: a map of annotations in, typed settings out. The strings are read into the typed
//! input of [`super::settings`], whose one reader checks the values, as it does an
//! `ImageUpdater` resource's fields. Every annotation under either prefix is either understood
//! or listed in [`super::settings::AppSettings::skipped`] with the reason; none is silently dropped, because a
//! user migrating from Image Updater must see what did not carry over.

/// Argo CD Image Updater's annotation prefix.
pub const IMAGE_UPDATER_PREFIX: &str = "argocd-image-updater.argoproj.io/";
/// tagpilot's own prefix; a key set under both prefixes takes tagpilot's value.
pub const TAGPILOT_PREFIX: &str = "tagpilot.dev/";

// The settings' types used to live here; `report.rs` still names these by this path.
pub use super::settings::{GitCredentials, SkippedAnnotation, WriteBackMethod};

mod parse;
#[cfg(test)]
mod tests;

pub use parse::{parse, unread};
