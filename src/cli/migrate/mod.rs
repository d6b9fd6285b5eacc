//! `tagpilot migrate-annotations`: the `ImageUpdater` resource that configures each annotated
//! Application as its annotations do. Offline.

use std::process::ExitCode;

use crate::argocd;

use super::CliError;
use super::args::MigrateArgs;

mod resource;
#[cfg(test)]
mod tests;

pub fn migrate_annotations(args: &MigrateArgs) -> Result<ExitCode, CliError> {
    let apps = argocd::read::load::applications_in(&args.paths)?;
    let resources: Vec<String> = apps.iter().filter_map(resource::migrate).collect();
    if resources.is_empty() {
        return Err(CliError::NoAnnotatedApplication {
            paths: args
                .paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    print!("{}", resources.join("---\n"));
    Ok(ExitCode::SUCCESS)
}
