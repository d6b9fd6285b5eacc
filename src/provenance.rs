//! Where an image was built from, as its OCI labels say (`org.opencontainers.image.source` and
//! `org.opencontainers.image.revision`), and what that makes of an update: the source
//! repository's compare view between the old image's revision and the new one's.
//!
//! Pure. Only what the labels plainly say is used: both images must name the same GitHub or
//! GitLab repository and each a revision; anything else gives nothing, so a pull request never
//! links a comparison that is not one.

use serde::Serialize;

/// The label (or annotation) naming the source repository.
pub const SOURCE_LABEL: &str = "org.opencontainers.image.source";
/// The label (or annotation) naming the commit the image was built from.
pub const REVISION_LABEL: &str = "org.opencontainers.image.revision";

/// What an image says about its source; from its config's labels, else its manifest's
/// annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageSource {
    pub source: Option<String>,
    pub revision: Option<String>,
}

/// The forge that hosts a source repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceForge {
    GitHub,
    GitLab,
}

/// A repository on GitHub or GitLab, read from a source label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceRepository {
    pub forge: SourceForge,
    /// `github.com`, `gitlab.example.com`.
    pub host: String,
    /// `acme/web`; on GitLab possibly nested groups, `acme/platform/web`.
    pub path: String,
}

impl SourceRepository {
    /// `https://<host>/<path>`.
    pub fn web_url(&self) -> String {
        format!("https://{}/{}", self.host, self.path)
    }

    /// The forge's page comparing two revisions.
    pub fn compare_url(&self, from: &str, to: &str) -> String {
        match self.forge {
            SourceForge::GitHub => format!("{}/compare/{from}...{to}", self.web_url()),
            SourceForge::GitLab => format!("{}/-/compare/{from}...{to}", self.web_url()),
        }
    }
}

/// Reads a source label: `https://github.com/acme/web`, with or without `.git`, a trailing
/// path into the repository (`/tree/main/app`), `git@github.com:acme/web.git` or
/// `ssh://git@…`. GitHub is `github.com`; GitLab is `gitlab.com` or a host whose name says
/// `gitlab`. Any other host gives `None`: tagpilot cannot tell how to compare there.
pub fn source_repository(label: &str) -> Option<SourceRepository> {
    let label = label.trim();
    let rest = if let Some(r) = label
        .strip_prefix("https://")
        .or_else(|| label.strip_prefix("http://"))
        .or_else(|| label.strip_prefix("ssh://"))
        .or_else(|| label.strip_prefix("git://"))
    {
        r.to_string()
    } else if let Some((user_host, path)) = label.split_once(':')
        && user_host.contains('@')
        && !path.starts_with('/')
    {
        format!("{user_host}/{path}")
    } else {
        return None;
    };
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (host, path) = rest.split_once('/')?;
    let host = host
        .rsplit('@')
        .next()?
        .split(':')
        .next()?
        .to_ascii_lowercase();
    let forge = if host == "github.com" || host == "www.github.com" {
        SourceForge::GitHub
    } else if host.split('.').any(|part| part == "gitlab") {
        SourceForge::GitLab
    } else {
        return None;
    };
    let host = host.trim_start_matches("www.").to_string();
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let segments: Vec<&str> = match forge {
        // `owner/repo`, then whatever page of it.
        SourceForge::GitHub => segments.into_iter().take(2).collect(),
        // Groups nest; `/-/` starts a page of the project.
        SourceForge::GitLab => segments.into_iter().take_while(|s| *s != "-").collect(),
    };
    if segments.len() < 2 {
        return None;
    }
    let mut path = segments.join("/");
    if let Some(p) = path.strip_suffix(".git") {
        path = p.to_string();
    }
    let plain = |s: &str| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c))
    };
    plain(&path).then_some(SourceRepository { forge, host, path })
}

/// What an update changes in the source: the repository both images name, the two revisions
/// and the page comparing them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceChange {
    pub repository: SourceRepository,
    /// The repository's web address, as the templates' `c.source` shows it.
    pub source: String,
    pub revision_from: String,
    pub revision_to: String,
    pub compare_url: String,
}

/// The source change from the image `old` to the image `new`, when both name the same GitHub
/// or GitLab repository and each a revision (different ones).
pub fn source_change(old: &ImageSource, new: &ImageSource) -> Option<SourceChange> {
    let from_repo = source_repository(old.source.as_deref()?)?;
    let to_repo = source_repository(new.source.as_deref()?)?;
    if !from_repo.host.eq_ignore_ascii_case(&to_repo.host)
        || !from_repo.path.eq_ignore_ascii_case(&to_repo.path)
    {
        return None;
    }
    let revision = |r: &Option<String>| {
        r.as_deref()
            .map(str::trim)
            .filter(|r| {
                !r.is_empty()
                    && r.len() <= 100
                    && r.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-._/".contains(c))
            })
            .map(str::to_string)
    };
    let (from, to) = (revision(&old.revision)?, revision(&new.revision)?);
    if from == to {
        return None;
    }
    Some(SourceChange {
        source: to_repo.web_url(),
        compare_url: to_repo.compare_url(&from, &to),
        repository: to_repo,
        revision_from: from,
        revision_to: to,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repo(label: &str) -> Option<(SourceForge, String, String)> {
        source_repository(label).map(|r| (r.forge, r.host, r.path))
    }

    #[test]
    fn source_labels_as_builders_write_them() {
        let gh = |p: &str| Some((SourceForge::GitHub, "github.com".to_string(), p.to_string()));
        assert_eq!(repo("https://github.com/acme/web"), gh("acme/web"));
        assert_eq!(repo("https://github.com/acme/web.git"), gh("acme/web"));
        assert_eq!(
            repo("https://github.com/acme/web/tree/main/app"),
            gh("acme/web")
        );
        assert_eq!(repo("git@github.com:acme/web.git"), gh("acme/web"));
        assert_eq!(repo("ssh://git@github.com/acme/web"), gh("acme/web"));
        assert_eq!(
            repo("https://gitlab.example.com/platform/apps/web/-/tree/main"),
            Some((
                SourceForge::GitLab,
                "gitlab.example.com".to_string(),
                "platform/apps/web".to_string()
            ))
        );
        assert_eq!(
            repo("https://git.example.com/acme/web"),
            None,
            "unknown forge"
        );
        assert_eq!(repo("https://github.com/acme"), None, "no repository");
        assert_eq!(repo("web"), None);
    }

    #[test]
    fn a_change_needs_one_repository_and_two_revisions() {
        let image = |s: &str, r: Option<&str>| ImageSource {
            source: Some(s.to_string()),
            revision: r.map(str::to_string),
        };
        let c = source_change(
            &image("https://github.com/acme/web", Some("a1b2c3d")),
            &image("https://github.com/acme/web.git", Some("e4f5a6b")),
        )
        .unwrap();
        assert_eq!(
            c.compare_url,
            "https://github.com/acme/web/compare/a1b2c3d...e4f5a6b"
        );
        assert_eq!(c.source, "https://github.com/acme/web");
        let gl = source_change(
            &image("https://gitlab.com/g/web", Some("v1")),
            &image("https://gitlab.com/g/web", Some("v2")),
        )
        .unwrap();
        assert_eq!(gl.compare_url, "https://gitlab.com/g/web/-/compare/v1...v2");
        // Different repositories, a missing or odd revision, or the same one: nothing.
        for (old, new) in [
            (
                image("https://github.com/acme/web", Some("a")),
                image("https://github.com/acme/api", Some("b")),
            ),
            (
                image("https://github.com/acme/web", None),
                image("https://github.com/acme/web", Some("b")),
            ),
            (
                image("https://github.com/acme/web", Some("a")),
                image("https://github.com/acme/web", Some("b c")),
            ),
            (
                image("https://github.com/acme/web", Some("a")),
                image("https://github.com/acme/web", Some("a")),
            ),
        ] {
            assert_eq!(source_change(&old, &new), None, "{old:?} {new:?}");
        }
    }
}
