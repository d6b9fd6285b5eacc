//! A repository's write result in the report's terms. The writers speak in their own enums
//! ([`git::WriteStatus`], [`forge::Action`]); the report model gets them here, in one place.

use crate::forge::ForgeReport;
use crate::git::{self, RepositoryReport};
use crate::plan::{CommitSummary, PullRequestSummary, RepositoryOutcome, RepositoryStatus};

/// A pushed (or, dry-running, would-be pushed) repository.
pub fn pushed<T>(r: RepositoryReport<T>) -> RepositoryOutcome {
    let commits = |cs: &[git::PushedCommit]| {
        cs.iter()
            .map(|c| CommitSummary {
                id: c.id.clone(),
                summary: c.summary.clone(),
            })
            .collect()
    };
    let (branch, status, commits, error) = match &r.result {
        Ok(o) => match &o.status {
            git::WriteStatus::Pushed { commits: cs } => (
                o.branch.clone(),
                RepositoryStatus::Pushed,
                commits(cs),
                None,
            ),
            git::WriteStatus::WouldPush { commits: cs } => (
                o.branch.clone(),
                RepositoryStatus::WouldPush,
                commits(cs),
                None,
            ),
            git::WriteStatus::UpToDate => (
                o.branch.clone(),
                RepositoryStatus::UpToDate,
                Vec::new(),
                None,
            ),
        },
        Err(e) => (
            r.branch.clone(),
            RepositoryStatus::Failed,
            Vec::new(),
            Some(e.to_string()),
        ),
    };
    RepositoryOutcome {
        repository: r.repository,
        url: r.url,
        branch,
        status,
        sources: Vec::new(),
        commits,
        pull_requests: Vec::new(),
        error,
    }
}

/// A repository in pull-request mode.
pub fn pull_requests<T>(r: ForgeReport<T>) -> RepositoryOutcome {
    let failed = r.failed();
    let (branch, status, pull_requests, error) = match &r.result {
        Ok(o) => {
            let prs: Vec<_> = o
                .pull_requests
                .iter()
                .map(|p| PullRequestSummary {
                    group: p.group.clone(),
                    branch: p.branch.clone(),
                    status: p.status(o.dry_run),
                    number: p.number,
                    reference: p.reference(),
                    url: p.url.clone(),
                    warnings: p.warnings.clone(),
                })
                .collect();
            // A group that failed fails the repository; the other groups went on.
            let status = if failed {
                RepositoryStatus::Failed
            } else if prs.is_empty() {
                RepositoryStatus::UpToDate
            } else {
                RepositoryStatus::PullRequests
            };
            (o.base.clone(), status, prs, None)
        }
        Err(e) => (
            String::new(),
            RepositoryStatus::Failed,
            Vec::new(),
            Some(e.to_string()),
        ),
    };
    RepositoryOutcome {
        repository: r.repository,
        url: r.url,
        branch,
        status,
        sources: Vec::new(),
        commits: Vec::new(),
        pull_requests,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::forge::{Action, ForgeKind, ForgeOutcome, PullRequestOutcome};

    fn gitlab(actions: Vec<(u64, Action)>) -> ForgeReport {
        let pull_requests = actions
            .into_iter()
            .map(|(n, action)| PullRequestOutcome {
                forge: ForgeKind::GitLab,
                group: format!("group-{n}"),
                branch: format!("tagpilot/group-{n}"),
                action,
                number: Some(n),
                url: None,
                changes: Vec::new(),
                warnings: Vec::new(),
            })
            .collect();
        ForgeReport {
            repository: "manifests".into(),
            url: "https://gitlab.example/acme/manifests.git".into(),
            plan: None,
            result: Ok(ForgeOutcome {
                repository: "manifests".into(),
                base: "main".into(),
                base_commit: "0".repeat(40),
                dry_run: false,
                pull_requests,
            }),
        }
    }

    #[test]
    fn merge_requests_are_numbered_as_gitlab_writes_them() {
        let outcome = pull_requests(gitlab(vec![(3, Action::Opened)]));
        assert_eq!(outcome.status, RepositoryStatus::PullRequests);
        assert_eq!(outcome.pull_requests[0].reference.as_deref(), Some("!3"));
        assert_eq!(outcome.pull_requests[0].status, "opened");
    }

    #[test]
    fn one_failed_group_fails_the_repository_and_the_other_groups_are_kept() {
        let outcome = pull_requests(gitlab(vec![
            (3, Action::Opened),
            (
                4,
                Action::Failed {
                    error: "GitLab answered 500".into(),
                },
            ),
        ]));
        assert_eq!(outcome.status, RepositoryStatus::Failed);
        let statuses: Vec<&str> = outcome
            .pull_requests
            .iter()
            .map(|p| p.status.as_str())
            .collect();
        assert_eq!(statuses, ["opened", "failed: GitLab answered 500"]);
    }
}
