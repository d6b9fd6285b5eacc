//! A repository's write result in the report's terms. The writers speak in their own enums
//! ([`git::WriteStatus`], [`forge::Action`]); the report model gets them here, in one place.
//! So does the log: one line per write (a commit pushed, a pull request written, an
//! Application patched), its fields for a log collector and its message for a person.

use crate::argocd::cluster;
use crate::argocd::resolve::Resolved;
use crate::forge::{Action, ForgeReport};
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

// === the log of writes ===

/// One change as a log line carries it: `api: apps/api.yaml 1.0.0 → 1.1.0`.
fn change_text(policy: &str, file: impl std::fmt::Display, from: &str, to: &str) -> String {
    format!("{policy}: {file} {from} → {to}")
}

/// Every change of a commit or pull request, `; `-separated.
fn changes_text(changes: &[git::Change]) -> String {
    changes
        .iter()
        .map(|c| change_text(&c.policy, c.file.display(), &c.from, &c.to))
        .collect::<Vec<_>>()
        .join("; ")
}

/// A commit id as `git log --oneline` shows it.
fn short(id: &str) -> &str {
    &id[..id.len().min(7)]
}

/// One log line per commit pushed: the repository, the branch, the commit and its changes, as
/// fields and as a sentence. Nothing for a dry run or a failed write (that is logged as such).
pub fn log_pushed<T>(r: &RepositoryReport<T>) {
    let Ok(outcome) = &r.result else { return };
    let git::WriteStatus::Pushed { commits } = &outcome.status else {
        return;
    };
    for c in commits {
        let changes = changes_text(&c.changes);
        tracing::info!(
            repository = %r.repository,
            branch = %outcome.branch,
            commit = short(&c.id),
            changes = %changes,
            "pushed {} to {} ({}): {changes}",
            short(&c.id),
            r.repository,
            outcome.branch,
        );
    }
}

/// One log line per pull request tagpilot opened, updated, took over or closed: the
/// repository, the pull request's address, the action and the changes it carries.
pub fn log_pull_requests<T>(r: &ForgeReport<T>) {
    let Ok(outcome) = &r.result else { return };
    if outcome.dry_run {
        return;
    }
    for p in &outcome.pull_requests {
        let wrote = matches!(
            p.action,
            Action::Opened
                | Action::TakenOver
                | Action::Updated { .. }
                | Action::Closed { .. }
                | Action::Duplicate { .. }
        );
        if !wrote {
            continue;
        }
        let address = p
            .url
            .clone()
            .or_else(|| p.reference())
            .unwrap_or_else(|| p.branch.clone());
        let action = p.status(false);
        let changes = changes_text(&p.changes);
        tracing::info!(
            repository = %r.repository,
            pull_request = %address,
            branch = %p.branch,
            group = %p.group,
            action = %action,
            changes = %changes,
            "pull request {address} in {}: {action}: {changes}",
            r.repository,
        );
    }
}

/// One log line per Application patched: the Application and the changes the patch made.
/// `reports` are [`cluster::send_patches`]'s, one per patch, in the same order.
pub fn log_patches(
    resolved: &Resolved,
    patches: &[cluster::AppPatch],
    reports: &[(usize, cluster::PatchReport)],
) {
    for (p, (_, report)) in patches.iter().zip(reports) {
        if report.status != cluster::PatchStatus::Patched {
            continue;
        }
        let application = resolved.apps[p.app].app.id();
        let changes = p
            .changes
            .iter()
            .map(|c| change_text(&c.policy, &c.file, &c.from, &c.to))
            .collect::<Vec<_>>()
            .join("; ");
        tracing::info!(
            %application,
            changes = %changes,
            "patched Application {application}: {changes}"
        );
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
