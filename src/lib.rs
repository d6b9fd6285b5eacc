//! tagpilot keeps container image references in GitOps manifest repositories up to date.
//!
//! Codemap (see ARCHITECTURE.md for the data flow and invariants):
//! - [`image`]: image references and repository identity (pure).
//! - [`config`]: `tagpilot.yaml`.
//! - [`policy`]: `ImagePolicy` documents, validated.
//! - [`select`]: tag selection (pure).
//! - [`registry`]: the OCI registry edge.
//! - [`manifest`]: finding image fields in YAML and editing them surgically (pure).
//! - [`git`]: clone cache, commits and pushes to remote manifest repositories.
//! - [`forge`]: pull requests on GitHub and merge requests on GitLab, one per change group.

pub mod apply;
pub mod config;
pub mod forge;
pub mod git;
pub mod image;
pub mod manifest;
pub mod plan;
pub mod policy;
pub mod registry;
pub mod report;
pub mod select;
pub mod writeback;
