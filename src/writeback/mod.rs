//! The write-back: what a cycle planned, written where it goes, and what became of it.
//!
//! ```text
//! plan (engine) ──▶ write-back ──▶ git push, pull requests (git, forge)
//!                              ──▶ Application patches, ImageUpdater status (Kubernetes)
//!                              ──▶ proposals and rollbacks remembered (state store)
//! ```
//!
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
//! are decided once, by the planner, per `write.group`), and reports what happened. The engine
//! calls it; it never imports the engine, the service or the command line.

pub mod applications;
pub mod outcome;
pub mod records;
pub mod repository;
pub mod revert;

pub use repository::{Recorded, Target, Written, write_repository};
