//! tagpilot keeps container image references in GitOps manifest repositories up to date.
//!
//! Codemap (ARCHITECTURE.md has the data flow and the invariants):
//! - [`clock`] — the one source of time, handed to whatever reads it; a manual clock for tests.
//! - [`image`] — image references and repository identity (pure).
//! - [`version`] — tags read as versions, and version constraints (pure).
//! - `yaml_error` — one rendering of YAML errors with `file:line:column`.
//! - [`error_chain`] — an error and its causes on one line, as every user-facing text shows it.
//! - [`config`] — `tagpilot.yaml`.
//! - [`application`] — an Argo CD `Application` as the Kubernetes API and git hold it: the model
//!   the Argo CD sources and the Kubernetes edge share.
//! - [`affected`] — which Applications' sources contain a repository's files, with their
//!   destinations: the one matching rule (pure).
//! - [`policy`] — `ImagePolicy` documents, validated offline.
//! - [`files`] — a read-only tree of manifests: a directory, or a commit read from git.
//! - [`change`] — the change model: a change, what goes into one commit or pull request (and
//!   the one rule that groups them), what a group last proposed (pure).
//! - [`provenance`] — where an image was built from (its OCI source and revision labels), and
//!   the source comparison an update makes (pure).
//! - [`holds`] — tags not to propose again for a field: a failed deployment, a person's
//!   rollback (pure).
//! - [`select`] — tag selection (pure).
//! - [`registry`] — the OCI registry edge, and an in-memory registry for tests.
//! - [`manifest`] — finding image fields in YAML and editing them surgically (pure).
//! - [`verification`] — whether a change that reached git runs healthy in an Argo CD
//!   Application: one observation of its status judged (pure).
//! - [`promotion`] — promotion between environments: which tag an environment that follows
//!   others may take now, or why it waits (pure).
//! - [`plan`] — the planner; builds every edit in memory and writes nothing.
//! - [`report`] — the report of a cycle: one typed model, rendered as a table, JSON, Markdown
//!   and a diff (pure).
//! - [`apply`] — atomic writes of planned files in the local directory.
//! - [`git`] — clones, commits and pushes for configured repositories.
//! - [`render`] — an Application's manifests rendered as Argo CD would (directories,
//!   kustomize, Helm) with the real tools, before and after a change.
//! - [`kubernetes`] — the Kubernetes API edge: Applications, `ImageUpdater` resources, Secrets,
//!   ConfigMaps, patches and status.
//! - [`state`] — what `tagpilot run --state-dir` remembers across restarts (redb).
//! - [`argocd`] — Argo CD Applications and Image Updater annotations as policies.
//! - [`forge`] — pull requests on GitHub and merge requests on GitLab.
//! - [`engine`] — one cycle: sources grouped into targets, each planned once and written once;
//!   `plan`, `apply` and the long-running mode all call [`engine::run`].
//! - [`session`] — what a command builds once from the configuration and its flags: the
//!   registry client with the cluster's credentials, the clone cache, the cluster's
//!   Applications, the state store.
//! - [`run`] — `tagpilot run`: the engine's cycle on an interval, with health, metrics,
//!   shutdown on signals, leader election among replicas (`--leader-elect`), notifications
//!   and the status page.
//! - [`cli`] — the command line: its flags, and one runner per command over a [`session`].

pub mod affected;
pub mod application;
pub mod apply;
pub mod argocd;
pub mod change;
pub mod cli;
pub mod clock;
pub mod config;
pub mod engine;
pub mod error_chain;
pub mod files;
pub mod forge;
pub mod git;
pub mod holds;
pub mod image;
pub mod kubernetes;
pub mod manifest;
pub mod plan;
pub mod policy;
pub mod promotion;
pub mod provenance;
pub mod registry;
pub mod render;
pub mod report;
pub mod run;
pub mod select;
pub mod session;
pub mod state;
#[cfg(test)]
pub(crate) mod testing;
pub mod verification;
pub mod version;
pub mod windows;
pub mod writeback;
pub mod yaml_error;
