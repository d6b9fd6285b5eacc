//! The write-back: what a cycle planned, written where it goes, and what became of it.
//!
//! ```text
//! plan (engine) ──▶ write-back ──▶ files in place (the local directory)
//!                              ──▶ git push, pull requests (git, forge)
//!                              ──▶ Application patches, ImageUpdater status (Kubernetes)
//!                              ──▶ proposals and rollbacks remembered (state store)
//! ```
//!
//! - [`local`]: the local directory's files replaced in place;
//! - [`repository`]: one repository target written by its `write.mode` (a push, or a pull
//!   request per group), the branch a `git-branch` template names left to the plan, and the
//!   write's result in the report's terms ([`Written`], [`outcome`]);
//! - [`records`]: a group's proposal and a person's rollbacks remembered once written, never in
//!   a dry run and never for a write the remote refused;
//! - [`applications`]: the `write-back-method: argocd` Application patches sent, and each
//!   `ImageUpdater` resource's status;
//! - [`revert`]: the reverse of an update that failed verification, written by the same rules.
//!
//! It never plans and never selects: it writes what it is given, grouped as given (the groups
//! are decided once, by the planner, per `write.group`), and reports what happened. A
//! repository's planner is handed in and asked by the git write loop on the tip it fetches (a
//! rejected push is planned again on the new tip); nothing here looks at a tag or a field. The
//! engine calls it (the service only for a revert); it never imports the engine, the service,
//! the command line or the report.

pub mod applications;
pub mod local;
pub mod outcome;
pub mod records;
pub mod repository;
pub mod revert;

pub use repository::{Recorded, Target, Written, write_repository};
