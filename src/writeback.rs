//! Connects the planner to the git writer for configured repositories.
//!
//! The writer ([`crate::git`]) owns clones, commits and pushes and knows nothing of images; the
//! planner ([`crate::plan`]) knows images and files and nothing of git. [`RepositoryPlanner`] is
//! the seam: on each fresh checkout the writer hands it, it plans the policies that target that
//! repository and turns the plan into per-policy change groups. It keeps the last plan per
//! repository so the report shows holds, problems and skipped files, not only commits.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;

use crate::git::{self, ChangeGroup, Replanner, RepositoryConfig};
use crate::manifest::ManifestError;
use crate::plan::{self, Plan, PlanError, Progress, Scope};
use crate::policy::ImagePolicy;
use crate::registry::Registry;

#[derive(Debug, thiserror::Error)]
pub enum WritebackError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("splitting the plan into commits: {0}")]
    Split(#[from] ManifestError),
}

/// Plans one repository's checkout for the git writer.
pub struct RepositoryPlanner<'a, R> {
    policies: &'a [ImagePolicy],
    registry: &'a R,
    progress: &'a dyn Progress,
    last: Mutex<HashMap<String, Plan>>,
}

impl<'a, R: Registry> RepositoryPlanner<'a, R> {
    pub fn new(policies: &'a [ImagePolicy], registry: &'a R, progress: &'a dyn Progress) -> Self {
        RepositoryPlanner {
            policies,
            registry,
            progress,
            last: Mutex::new(HashMap::new()),
        }
    }

    /// The plan made on the last checkout of `repository`, if it was planned.
    pub fn last_plan(&self, repository: &str) -> Option<Plan> {
        self.last
            .lock()
            .expect("planner lock")
            .get(repository)
            .cloned()
    }

    /// Plans `repository` on a checkout without writing anything.
    pub async fn plan_checkout(
        &self,
        repository: &RepositoryConfig,
        checkout: &Path,
    ) -> Result<Plan, PlanError> {
        let scope = Scope {
            root: checkout.to_path_buf(),
            repository: Some(repository.name.clone()),
            exclude: vec![],
        };
        let plan = plan::plan(&scope, self.policies, self.registry, self.progress).await?;
        self.last
            .lock()
            .expect("planner lock")
            .insert(repository.name.clone(), plan.clone());
        Ok(plan)
    }
}

impl<R: Registry> Replanner for RepositoryPlanner<'_, R> {
    type Error = WritebackError;

    async fn plan(
        &self,
        repository: &RepositoryConfig,
        checkout: &Path,
    ) -> Result<Vec<ChangeGroup>, WritebackError> {
        let plan = self.plan_checkout(repository, checkout).await?;
        // A pull request per policy starts from the base, so it must carry only its own edits.
        let alone = repository.write.mode == git::WriteMode::PullRequest
            && repository.write.group == git::Grouping::Policy;
        let groups = if alone {
            plan.groups_by_policy_alone()?
        } else {
            plan.groups_by_policy()?
        };
        Ok(groups
            .into_iter()
            .map(|g| ChangeGroup {
                key: g.policy,
                files: g.files,
                changes: g
                    .changes
                    .into_iter()
                    .map(|c| git::Change {
                        policy: c.policy,
                        image: c.image,
                        file: c.file.into(),
                        line: c.line,
                        from: c.from,
                        to: c.to,
                        strategy: c.strategy.to_owned(),
                    })
                    .collect(),
            })
            .collect())
    }

    fn complete(&self, repository: &RepositoryConfig) -> bool {
        self.last
            .lock()
            .expect("planner lock")
            .get(&repository.name)
            .is_some_and(|p| p.problems.is_empty())
    }
}
