//! Writing what was planned for Applications: the `write-back-method: argocd` patches sent to
//! the live Applications ([`patch`]) and the `status` of each `ImageUpdater` resource
//! ([`updater_status`]). Changes to git are not written here.
//!
//! Never resolves: it takes the resolved model ([`super::resolved`]) and the plan, never the
//! resolver (`tests/it/layers.rs`). Nothing is sent in plan mode.

pub mod patch;
pub mod updater_status;

pub use patch::{PatchReport, PatchStatus, send_patches};
