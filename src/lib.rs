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
//! - [`argocd`]: Argo CD Applications and Image Updater annotations as policies.

pub mod apply;
pub mod argocd;
pub mod config;
pub mod git;
pub mod image;
pub mod manifest;
pub mod plan;
pub mod policy;
pub mod registry;
pub mod report;
pub mod select;
pub mod writeback;
