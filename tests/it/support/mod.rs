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
