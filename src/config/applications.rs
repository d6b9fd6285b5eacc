//! The `applications:` section of `tagpilot.yaml`: where tagpilot finds Argo CD Applications,
//! and which repositories outside `repositories:` they may have tagpilot write to. Types only;
//! nothing here reads git or the cluster.

use serde::Deserialize;

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApplicationsConfig {
    /// Application manifests kept in git (app-of-apps).
    #[serde(default)]
    pub from_git: Vec<FromGit>,
    /// Applications read live from the Kubernetes API.
    #[serde(default)]
    pub from_cluster: Option<FromCluster>,
    /// Repositories outside `repositories:` that Applications may have tagpilot write to:
    /// globs over the normalised repository URL (`github.com/acme/*`). Empty: only configured
    /// repositories are written.
    #[serde(default)]
    pub allow_repositories: Vec<String>,
}

impl ApplicationsConfig {
    /// `allowRepositories` compiled. A glob that does not compile makes it allow nothing (the
    /// narrow side; reading the configuration refuses such a glob first, naming its line).
    pub fn allowed_repositories(&self) -> AllowedRepositories {
        AllowedRepositories::new(&self.allow_repositories).unwrap_or_default()
    }
}

/// Which repositories outside `repositories:` an Application may direct tagpilot's writes to
/// (`applications.allowRepositories`): a repository URL is allowed when one glob matches it as
/// [`crate::affected::normalise_url`] reads it (no scheme, userinfo or `.git`, host
/// lowercased: `github.com/acme/manifests`). `*` stays within one `/`-separated part, `**`
/// crosses them, `?` is one character, `{a,b}` either.
#[derive(Debug, Clone, Default)]
pub struct AllowedRepositories {
    set: globset::GlobSet,
}

impl AllowedRepositories {
    /// Every glob compiled, or the first that does not compile, with why.
    pub fn new(globs: &[String]) -> Result<Self, globset::Error> {
        let mut builder = globset::GlobSetBuilder::new();
        for g in globs {
            builder.add(Self::glob(g)?);
        }
        Ok(AllowedRepositories {
            set: builder.build()?,
        })
    }

    /// One glob, as `allowRepositories` reads it.
    pub fn glob(g: &str) -> Result<globset::Glob, globset::Error> {
        globset::GlobBuilder::new(g.trim())
            .literal_separator(true)
            .build()
    }

    /// Every repository: for tests of where writes go.
    pub fn any() -> Self {
        AllowedRepositories::new(&["**".to_string()]).expect("`**` compiles")
    }

    /// Whether an Application may have tagpilot write to the repository at `url`.
    pub fn allows(&self, url: &str) -> bool {
        self.set.is_match(crate::affected::normalise_url(url))
    }
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FromGit {
    /// A configured repository (`repositories[].name`); omitted means the directory holding
    /// `tagpilot.yaml`.
    #[serde(default)]
    pub repository: Option<String>,
    /// Globs relative to the repository root (`argocd/apps/**`).
    pub paths: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct FromCluster {
    /// Namespaces to list Applications in; empty means all the service account can list.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// A label selector (`team=payments`).
    #[serde(default)]
    pub selector: Option<String>,
    /// Argo CD's own namespace, where its repository Secrets (`git:repocreds`) live; default
    /// `argocd`.
    #[serde(default)]
    pub argocd_namespace: Option<String>,
}

impl FromCluster {
    pub fn argocd_namespace(&self) -> &str {
        self.argocd_namespace.as_deref().unwrap_or("argocd")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowed_repositories_match_the_normalised_url_part_by_part() {
        let allowed = AllowedRepositories::new(&[
            "github.com/acme/*".to_string(),
            "git.example/platform/**".to_string(),
        ])
        .unwrap();
        assert!(allowed.allows("https://bot:secret@GitHub.com/acme/manifests.git"));
        assert!(allowed.allows("git@github.com:acme/manifests"));
        assert!(!allowed.allows("https://github.com/acme/team/manifests"));
        assert!(!allowed.allows("https://github.com/evil/manifests"));
        assert!(allowed.allows("ssh://git@git.example/platform/team/m.git"));
        assert!(!AllowedRepositories::default().allows("https://github.com/acme/m"));
        assert!(AllowedRepositories::new(&["github.com/[".to_string()]).is_err());
    }
}
