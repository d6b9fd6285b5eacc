//! A repository's write result in the report's terms. The writers speak in their own enums
//! ([`git::WriteStatus`], [`forge::Action`]); the report model gets them here, in one place.
//! So does the log: one line per write (a commit pushed, a pull request written, an
//! Application patched), its fields for a log collector and its message for a person.

use crate::argocd::plan::patch::AppPatch;
use crate::argocd::resolve::Resolved;
use crate::argocd::write::{PatchReport, PatchStatus};
use crate::change::Change;
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
            Some(crate::error_chain::chain(e)),
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
            Some(crate::error_chain::chain(e)),
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
fn changes_text(changes: &[Change]) -> String {
    changes
        .iter()
        .map(|c| change_text(&c.policy, &c.file, &c.from, &c.to))
        .collect::<Vec<_>>()
        .join("; ")
}

/// `: <changes>` after a sentence, or nothing when there are none (a pull request closed).
fn listed(changes: &str) -> String {
    if changes.is_empty() {
        String::new()
    } else {
        format!(": {changes}")
    }
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
            repository = r.repository.as_str(),
            branch = outcome.branch.as_str(),
            commit = short(&c.id),
            changes = changes.as_str(),
            "pushed {} to {} ({}){}",
            short(&c.id),
            r.repository,
            outcome.branch,
            listed(&changes),
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
            repository = r.repository.as_str(),
            pull_request = address.as_str(),
            branch = p.branch.as_str(),
            group = p.group.as_str(),
            action = action.as_str(),
            changes = changes.as_str(),
            "pull request {address} in {}: {action}{}",
            r.repository,
            listed(&changes),
        );
    }
}

/// One log line per Application patched: the Application and the changes the patch made.
/// `reports` are [`cluster::send_patches`]'s, one per patch, in the same order.
pub fn log_patches(resolved: &Resolved, patches: &[AppPatch], reports: &[(usize, PatchReport)]) {
    for (p, (_, report)) in patches.iter().zip(reports) {
        if report.status != PatchStatus::Patched {
            continue;
        }
        let application = resolved.apps[p.app].app.id();
        let changes = p
            .changes
            .iter()
            // The field patched: the change's "file" is the Application itself.
            .map(|c| change_text(&c.policy, &c.field, &c.from, &c.to))
            .collect::<Vec<_>>()
            .join("; ");
        tracing::info!(
            application = application.as_str(),
            changes = changes.as_str(),
            "patched Application {application}{}",
            listed(&changes),
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

    /// The log lines `f` writes, as text without colours.
    fn logged(f: impl FnOnce()) -> String {
        crate::testing::listen_to_every_callsite();
        let buffer = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_ansi(false)
            .without_time()
            .with_writer(move || Sink(sink.clone()))
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        let bytes = buffer.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn change(policy: &str, from: &str, to: &str) -> Change {
        Change {
            policy: policy.into(),
            image: "ghcr.io/acme/api".into(),
            file: "apps/api.yaml".into(),
            line: 7,
            from: from.into(),
            to: to.into(),
            strategy: "semver",
            source: None,
            labels: Vec::new(),
            promotion: None,
            ..Change::default()
        }
    }

    #[test]
    fn each_pull_request_written_is_one_line_with_its_address_and_changes() {
        let mut report = gitlab(vec![
            (3, Action::Opened),
            (4, Action::UpToDate),
            (5, Action::Closed { reached_base: true }),
        ]);
        if let Ok(o) = &mut report.result {
            o.pull_requests[0].url =
                Some("https://gitlab.example/acme/manifests/-/merge_requests/3".into());
            o.pull_requests[0].changes = vec![change("api", "1.0.0", "1.1.0")];
        }
        let log = logged(|| log_pull_requests(&report));
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), 2, "nothing for the one up to date:\n{log}");
        assert!(
            lines[0].contains(
                "pull request https://gitlab.example/acme/manifests/-/merge_requests/3 in manifests: opened: api: apps/api.yaml 1.0.0 → 1.1.0"
            ) && lines[0].contains("repository=\"manifests\"")
                && lines[0].contains("group=\"group-3\""),
            "{log}"
        );
        // Without an address, the forge's own number.
        assert!(
            lines[1].contains("pull request !5 in manifests: closed repository="),
            "{log}"
        );

        // A dry run writes nothing, so logs no write.
        if let Ok(o) = &mut report.result {
            o.dry_run = true;
        }
        assert_eq!(logged(|| log_pull_requests(&report)), "");
    }
}
