//! `tagpilot check` beyond parsing: what the writers would refuse about a configured repository,
//! found without connecting anywhere (environment variables set, key files readable, templates
//! that render), so that a run does not discover it at its first fetch.

use crate::config::Config;
use crate::config::repository::WriteMode;
use crate::forge::{self, ForgeError};
use crate::git::GitError;

/// One thing wrong with a configured repository.
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error(transparent)]
    Forge(#[from] ForgeError),
}

/// Every configured repository checked offline; each problem names its repository.
pub fn check_repositories(config: &Config) -> Vec<CheckError> {
    let mut problems = Vec::new();
    for repo in &config.repositories {
        if let Err(e) = repo.check_offline() {
            problems.push(e.into());
            continue;
        }
        if repo.write.mode == WriteMode::PullRequest
            && let Err(source) = forge::check_templates(&repo.write, &repo.branch)
        {
            problems.push(
                ForgeError::Template {
                    repository: repo.name.clone(),
                    source,
                }
                .into(),
            );
        }
    }
    problems
}
