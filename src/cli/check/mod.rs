//! `tagpilot check`: `tagpilot.yaml`, every policy, the repositories' settings, the manifests
//! and the Applications, without network.

use std::process::ExitCode;

use crate::{engine, policy, report, session};

pub mod offline;

use super::CliError;
use super::args::CheckArgs;

/// Offline: no registry client and no cluster, so no [`Session`](session::Session); the clone
/// cache only as last fetched.
pub fn check(args: CheckArgs) -> Result<ExitCode, CliError> {
    let config = session::load_config(args.config.config.as_deref())?;
    let summary = policy::check(&config)?;
    let problems = offline::check_repositories(&config);
    if !problems.is_empty() {
        return Err(CliError::Repositories(problems));
    }
    println!("{}", summary.to_string().trim_end());
    // What the manifests show without a registry (the local directory, and each repository as
    // last fetched): targets that match no file, images in none of the files matched, markers
    // that resolve to nothing.
    let policies = policy::load(&config)?;
    let cache = engine::repo_cache(args.cache_dir.as_deref());
    let (local, unread) = offline::check_manifests(&config, &policies, cache.as_ref())?;
    print!("{}", report::findings_table(&local));
    for u in &unread {
        println!("not read: {u}");
    }
    let apps = offline::check_applications(&config, cache.as_ref())?;
    if let Some(apps) = &apps {
        print!("{}", apps.text());
    }
    let apps_failed = apps.as_ref().is_some_and(|a| a.has_problems());
    Ok(if local.has_problems() || apps_failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
