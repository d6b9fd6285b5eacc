//! The unified-diff rendering of a [`Report`]: every file the plan changes, and each
//! Application patch.

use crate::plan::DiffTarget;

use super::Report;

impl Report<'_> {
    /// A unified diff of every file the plan changes, `a/` and `b/` prefixed like git's: the
    /// local directory's files first, then each configured repository's files as its commits
    /// would leave them, then each Application patch. A `#` line names the repository or
    /// Application before its diffs; `git apply` and `patch` skip such lines, so a repository's
    /// part applies in a checkout.
    pub fn diff(&self) -> String {
        let mut out = String::new();
        for f in self.files {
            let name = slash_path(&f.path);
            out += &unified(
                &f.original,
                &f.updated,
                &format!("a/{name}"),
                &format!("b/{name}"),
            );
        }
        let mut heading = String::new();
        for d in self.diffs {
            let (this, old, new) = match &d.target {
                DiffTarget::RepositoryFile {
                    repository,
                    group,
                    path,
                } => (
                    match group {
                        Some(g) => format!("# repository {repository}, pull request for {g}\n"),
                        None => format!("# repository {repository}\n"),
                    },
                    match d.original {
                        Some(_) => format!("a/{path}"),
                        None => "/dev/null".to_string(),
                    },
                    format!("b/{path}"),
                ),
                DiffTarget::Application { id } => (
                    format!("# Application {id}: the merge patch (write-back-method argocd)\n"),
                    format!("a/Application {id} (live)"),
                    format!("b/Application {id} (patched)"),
                ),
                DiffTarget::Rendered {
                    repository,
                    group,
                    application,
                    resource,
                } => (
                    format!(
                        "# repository {repository}, {group}: Application {application} rendered\n"
                    ),
                    match d.original {
                        Some(_) => format!("a/{resource}"),
                        None => "/dev/null".to_string(),
                    },
                    match d.updated.is_empty() {
                        false => format!("b/{resource}"),
                        true => "/dev/null".to_string(),
                    },
                ),
                DiffTarget::RenderNote {
                    repository,
                    group,
                    application,
                    note,
                } => (
                    format!(
                        "# repository {repository}, {group}: Application {application} rendered; {note}\n"
                    ),
                    String::new(),
                    String::new(),
                ),
                DiffTarget::RenderFailed {
                    repository,
                    group,
                    application,
                    reason,
                } => (
                    format!(
                        "# repository {repository}, {group}: Application {application} could not be rendered: {reason}\n"
                    ),
                    String::new(),
                    String::new(),
                ),
            };
            if this != heading {
                out += &this;
                heading = this;
            }
            out += &unified(d.original.as_deref().unwrap_or(""), &d.updated, &old, &new);
        }
        out
    }
}

fn unified(original: &str, updated: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(original, updated)
        .unified_diff()
        .context_radius(3)
        .header(old, new)
        .to_string()
}

fn slash_path(path: &std::path::Path) -> String {
    path.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}
