//! `tagpilot migrate-annotations`: the `ImageUpdater` resource that configures each annotated
//! Application as its annotations do; `tagpilot migrate-patterns`: pattern policies that could
//! replace many exact ones (`patterns`). Offline.

use std::process::ExitCode;

use crate::argocd;

use super::CliError;
use super::args::{MigrateArgs, MigratePatternsArgs};

mod compare;
pub mod patterns;
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

/// `tagpilot migrate-patterns`: prints the pattern policies that could replace the
/// configuration's exact policies sharing every setting but the image, and the policies kept;
/// with `--compare`, then the plans before and after ([`compare`]).
pub async fn migrate_patterns(args: &MigratePatternsArgs) -> Result<ExitCode, CliError> {
    let config = crate::session::load_config(args.config.config.as_deref())?;
    let policies = crate::policy::load(&config)?;
    let (proposals, kept) = patterns::propose(&policies);
    if proposals.is_empty() {
        println!("# No two policies share every setting but an image under one prefix.");
    }
    print!("{}", patterns::render(&proposals, &kept));
    if args.compare && !proposals.is_empty() {
        let compared =
            compare::compare(config, policies, &proposals, args.cache_dir.clone()).await?;
        print!("{compared}");
    }
    Ok(ExitCode::SUCCESS)
}
