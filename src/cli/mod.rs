//! The `tagpilot` command line, as a library module so that the binary only parses flags,
//! dispatches and prints the error chain: the flags ([`args`], clap derive) and one runner per
//! command, each opening a [`Session`](crate::session::Session) for what reaches registries,
//! git servers and the cluster, and printing its report.
//!
//! The top layer beside the binary: it may use the engine, the session and the service;
//! nothing in the library imports it.

use crate::argocd::ArgoError;
use crate::engine::EngineError;
use crate::image::ImageError;
use crate::plan::tags::TagsError;
use crate::policy::PolicyErrors;
use crate::registry::RegistryError;
use crate::report::ReportError;
use crate::session::SessionError;
use check::offline::CheckError;

pub mod args;
pub mod check;
pub mod docs;
pub mod freeze;
pub mod holds;
pub mod migrate;
pub mod plan;
mod spinner;
pub mod tags;

pub use args::{Cli, Command, LogFormat};

/// Why a command failed. Each variant is its source's own message and chain; the binary
/// prints them.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error(transparent)]
    Policies(#[from] PolicyErrors),
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error(transparent)]
    Applications(#[from] ArgoError),
    #[error(transparent)]
    Image(#[from] ImageError),
    #[error(transparent)]
    Tags(#[from] TagsError),
    #[error(transparent)]
    Registry(#[from] RegistryError),
    #[error(transparent)]
    Holds(#[from] holds::HoldsError),
    /// `tagpilot check`: repositories whose settings cannot work, one per line.
    #[error("{}", lines(.0))]
    Repositories(Vec<CheckError>),
    #[error("no Application with an image-list annotation in {paths}")]
    NoAnnotatedApplication { paths: String },
}

fn lines(errors: &[CheckError]) -> String {
    errors
        .iter()
        .map(|e| crate::error_chain::chain(e))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_error_reads_as_its_source_with_the_same_chain() {
        let wrapped = CliError::from(SessionError::NoConfigForPolicy);
        assert_eq!(
            wrapped.to_string(),
            SessionError::NoConfigForPolicy.to_string()
        );
        assert!(std::error::Error::source(&wrapped).is_none());
        let none = CliError::NoAnnotatedApplication {
            paths: "apps, more/app.yaml".into(),
        };
        assert_eq!(
            none.to_string(),
            "no Application with an image-list annotation in apps, more/app.yaml"
        );
    }
}
