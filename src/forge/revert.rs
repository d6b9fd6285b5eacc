//! A revert in pull-request mode (issue 19): the reverse change proposed as its own pull request
//! from a branch tagpilot owns, labelled, whose body says what failed and quotes the
//! Application's health message.
//!
//! It is not one of the update groups that [`super::sync_repository`] keeps: its body carries no
//! [`super::Marker`], so a later update cycle neither updates nor closes it, and its branch
//! (`tagpilot/revert-<commit>`) is no group's. Opening it twice (a second failure seen for the
//! same commit) rewrites only tagpilot's own branch, with a lease, and the forge's "already
//! exists" answer takes the open pull request over instead of opening a second. A branch of that
//! name that holds someone else's commit is never overwritten.

use std::fmt::Write as _;

use git2::Oid;

use super::{Forge, ForgeError, ForgeKind, NewPullRequest};
use crate::change::{Change, ChangeGroup};
use crate::git::{self, RepoCache, RepositoryConfig};

/// The label a revert's pull request gets when `write.revertLabels` is not set.
pub const DEFAULT_REVERT_LABEL: &str = "tagpilot/revert";

/// What a revert's pull request says and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RevertRequest {
    /// The branch tagpilot owns for this revert.
    pub branch: String,
    pub title: String,
    pub body: String,
    pub labels: Vec<String>,
}

/// What became of a revert's pull request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RevertProposal {
    /// Opened, or (the forge said one was open for the branch already) taken over.
    Opened {
        number: u64,
        url: String,
        /// The revert's commit, the branch's tip.
        commit: String,
        taken_over: bool,
        /// What the forge would not apply (an unknown reviewer).
        warnings: Vec<String>,
    },
    /// The branch holds a commit tagpilot did not make: left alone.
    Blocked { tip: String },
    /// The base holds the reverse already: nothing to propose.
    NothingToChange,
}

/// The failed update a revert's text speaks of.
#[derive(Debug, Clone, Copy)]
pub struct FailedText<'a> {
    /// The commit that brought the failed change to the base branch.
    pub commit: &'a str,
    /// The Application that did not become healthy (`namespace/name`).
    pub application: &'a str,
    /// Why it failed, health message included.
    pub failure: &'a str,
    /// The changes the update made.
    pub failed: &'a [Change],
}

/// The pull request's title: which images go back.
pub fn revert_title(group: &ChangeGroup) -> String {
    let mut images: Vec<String> = group
        .changes
        .iter()
        .map(|c| format!("{} to {}", short_image(&c.image), c.to))
        .collect();
    images.dedup();
    format!("revert(images): {}", images.join(", "))
}

/// The pull request's body: what failed (Application, commit, each change with policy, image and
/// tags), the failure quoted, what goes back, and the fields left because they moved on
/// (`left`, each already in words).
pub fn revert_body(
    kind: ForgeKind,
    failed: &FailedText<'_>,
    group: &ChangeGroup,
    left: &[String],
) -> String {
    let mut body = String::new();
    let _ = writeln!(
        body,
        "The Application `{}` did not become healthy after {}, so tagpilot reverts it.\n",
        failed.application, failed.commit
    );
    body.push_str("**What failed:**\n\n");
    body.push_str(&quote(failed.failure));
    body.push_str("\n\n| Policy | Image | From | To | File |\n|---|---|---|---|---|\n");
    for c in failed.failed {
        let _ = writeln!(
            body,
            "| {} | `{}` | `{}` | `{}` | `{}` |",
            cell(&c.policy),
            cell(&c.image),
            cell(&c.from),
            cell(&c.to),
            cell(&c.file)
        );
    }
    let _ = write!(
        body,
        "\nThis {} sets back exactly these fields, and nothing else in their files:\n\n",
        kind.noun()
    );
    for c in &group.changes {
        let _ = writeln!(
            body,
            "- `{}` ({}): `{}` → `{}`",
            c.file,
            c.field,
            cell(&c.from),
            cell(&c.to)
        );
    }
    body.push_str(&super::body::applications_section(group));
    if !left.is_empty() {
        body.push_str("\nLeft as they are (they moved on since the update):\n\n");
        for line in left {
            let _ = writeln!(body, "- {line}");
        }
    }
    let _ = write!(
        body,
        "\nThe failed tags are held: tagpilot will not propose them again for these fields.\n"
    );
    body
}

/// Opens the revert of `group`, built on `base`, as a pull request on `repo`'s forge.
pub async fn open_revert(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    base: Oid,
    group: &ChangeGroup,
    request: &RevertRequest,
) -> Result<RevertProposal, ForgeError> {
    let (forge, repo) = super::connect::connect_required(repo).await?;
    open_with(cache, &repo, &forge, base, group, request).await
}

/// [`open_revert`] on a connected forge: build the commit, push tagpilot's branch with a lease,
/// open (or take over) the pull request.
async fn open_with<F: Forge>(
    cache: &RepoCache,
    repo: &RepositoryConfig,
    forge: &F,
    base: Oid,
    group: &ChangeGroup,
    request: &RevertRequest,
) -> Result<RevertProposal, ForgeError> {
    let signer = git::proposal::load_signer(repo)?;
    let Some(built) = git::proposal::build_commit(cache, repo, base, group, signer).await? else {
        return Ok(RevertProposal::NothingToChange);
    };
    let tips = git::proposal::fetch_branches(cache, repo, vec![request.branch.clone()]).await?;
    let tip = tips.get(&request.branch).cloned().flatten();
    let head = match &tip {
        Some(tip) if !tip.by_tagpilot => {
            return Ok(RevertProposal::Blocked {
                tip: tip.id.to_string(),
            });
        }
        // Pushed by an earlier attempt: the same commit is not pushed again.
        Some(tip) if git::proposal::same_commit(cache, repo, tip.id, built.id).await? => tip.id,
        _ => {
            let lease = tip.as_ref().map(|t| t.id);
            git::proposal::push_branch(cache, repo, &request.branch, built.id, lease).await?;
            built.id
        }
    };
    let created = forge
        .create(&NewPullRequest {
            branch: request.branch.clone(),
            base: repo.branch.clone(),
            title: request.title.clone(),
            body: request.body.clone(),
            labels: request.labels.clone(),
            reviewers: repo.write.reviewers.clone(),
            // A revert is for a person to merge: never a draft, never merged by itself.
            draft: false,
            auto_merge: false,
        })
        .await?;
    Ok(RevertProposal::Opened {
        number: created.pull_request.number,
        url: created.pull_request.url,
        commit: head.to_string(),
        taken_over: created.taken_over,
        warnings: created.warnings,
    })
}

/// `text` as a Markdown block quote, every line of it.
fn quote(text: &str) -> String {
    let text = if text.trim().is_empty() {
        "(no message)"
    } else {
        text.trim_end()
    };
    text.lines()
        .map(|line| format!("> {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A value fit for a table cell: no line breaks, no cell separators.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace(['\n', '\r'], " ")
}

/// The image's last path segment (`shop/api` → `api`), for a short title.
fn short_image(image: &str) -> &str {
    image.rsplit('/').next().unwrap_or(image)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn change(from: &str, to: &str) -> Change {
        Change {
            policy: "api".into(),
            image: "registry.example/shop/api".into(),
            file: "apps/api.yaml".into(),
            line: 11,
            field: "Deployment/api container api".into(),
            strategy: "semver",
            from: from.into(),
            to: to.into(),
            ..Default::default()
        }
    }

    #[test]
    fn the_body_says_what_failed_and_quotes_the_health_message_line_by_line() {
        let failed = [change("1.0.0", "1.1.0")];
        let group = ChangeGroup {
            applications: Vec::new(),
            key: "revert".into(),
            files: [(PathBuf::from("apps/api.yaml"), "x".into())].into(),
            changes: vec![change("1.1.0", "1.0.0")],
        };
        let text = FailedText {
            commit: "abc123",
            application: "argocd/shop",
            failure: "health Degraded after the sync: Deployment api\nexceeded its progress deadline",
            failed: &failed,
        };
        let body = revert_body(
            ForgeKind::GitLab,
            &text,
            &group,
            &["apps/web.yaml (Deployment/web container web): holds 2.1.0".into()],
        );
        assert!(
            body.contains("`argocd/shop` did not become healthy after abc123"),
            "{body}"
        );
        assert!(
            body.contains(
                "> health Degraded after the sync: Deployment api\n> exceeded its progress deadline"
            ),
            "{body}"
        );
        assert!(
            body.contains(
                "| api | `registry.example/shop/api` | `1.0.0` | `1.1.0` | `apps/api.yaml` |"
            ),
            "{body}"
        );
        assert!(body.contains("This merge request sets back"), "{body}");
        assert!(
            body.contains("- `apps/api.yaml` (Deployment/api container api): `1.1.0` → `1.0.0`"),
            "{body}"
        );
        assert!(body.contains("- apps/web.yaml (Deployment/web container web): holds 2.1.0"));
        assert_eq!(revert_title(&group), "revert(images): api to 1.0.0");
    }
}
