//! Test harness shared by the integration tests: real servers on 127.0.0.1 with free ports.

pub mod bin;
pub mod corpus;
pub mod engine;
pub mod fault_proxy;
pub mod forge_double;
pub mod git;
pub mod github;
pub mod gitlab;
pub mod kube;
pub mod registry;
pub mod scripted;
pub mod service;

/// How long a test waits, on the wall clock, for something that happens within moments on an idle
/// machine (a server to listen, a cycle to push, a process to exit) before it fails. A failure
/// bound, never a timing: CI runs the suite on two loaded cores, where a debug build can take
/// many times longer than here. Timings are measured in `bench/`.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(60);
