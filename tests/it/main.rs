//! tagpilot's integration tests: one binary, one module per area (see matklad, "Delete Cargo
//! Integration Tests"). Real registries and git servers are started by `support`.

mod argocd;
mod argocd_cluster;
mod cli;
mod corpus;
mod daemon;
mod daemon_faults;
mod daemon_ops;
mod daemon_state;
mod daemon_verify;
mod deploy;
mod docs;
mod editor_fuzz;
mod engine;
mod errors;
mod forge;
mod front_door;
mod git;
mod golden;
mod holds;
mod layers;
mod lease;
mod manifest;
mod platforms;
mod policy;
mod promotion;
mod real_corpus;
mod registry;
mod registry_faults;
mod render;
mod revert;
mod signatures;
mod support;
mod verification;
mod version_labels;
mod writeback;
