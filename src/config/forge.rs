//! The `forge:` block of a repository: which forge opens the pull requests and how tagpilot
//! authenticates to its API. Types and checks only; secrets are named (environment variable,
//! key file), never inlined.

use std::path::PathBuf;

use serde::Deserialize;

/// Where pull requests are opened. Exactly one forge.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ForgeConfig {
    #[serde(default)]
    pub github: Option<GitHubConfig>,
    #[serde(default)]
    pub gitlab: Option<GitLabConfig>,
    /// A Gitea server.
    #[serde(default)]
    pub gitea: Option<GiteaConfig>,
    /// A Forgejo server (Codeberg among them): the same API as Gitea's.
    #[serde(default)]
    pub forgejo: Option<GiteaConfig>,
    /// Bitbucket Cloud (bitbucket.org).
    #[serde(default)]
    pub bitbucket: Option<BitbucketCloudConfig>,
    /// Azure DevOps Services (dev.azure.com) or Server.
    #[serde(default, rename = "azureDevOps")]
    pub azure_devops: Option<AzureDevOpsConfig>,
    /// Bitbucket Data Center (or Server), self-hosted.
    #[serde(default)]
    pub bitbucket_data_center: Option<BitbucketDataCenterConfig>,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubConfig {
    /// `https://api.github.com`, or `https://ghe.example/api/v3` for GitHub Enterprise Server.
    #[serde(default = "default_github_api")]
    pub api_url: String,
    /// Environment variable holding a token (classic with `repo`, or fine-grained with
    /// Contents and Pull requests read/write).
    #[serde(default)]
    pub token_env: Option<String>,
    /// A GitHub App installation instead of a token.
    #[serde(default)]
    pub app: Option<GitHubApp>,
    /// `owner/name`; default: taken from the repository URL.
    #[serde(default)]
    pub repository: Option<String>,
}

fn default_github_api() -> String {
    "https://api.github.com".to_owned()
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitHubApp {
    pub app_id: u64,
    /// The App's private key (PEM), as downloaded from the App's settings.
    pub private_key_file: PathBuf,
    pub installation_id: u64,
}

#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GitLabConfig {
    /// `https://gitlab.com/api/v4`, or your instance's.
    #[serde(default = "default_gitlab_api")]
    pub api_url: String,
    /// Environment variable holding a token with the `api` scope.
    pub token_env: String,
    /// `group/project` (or its numeric id); default: taken from the repository URL.
    #[serde(default)]
    pub project: Option<String>,
}

fn default_gitlab_api() -> String {
    "https://gitlab.com/api/v4".to_owned()
}

/// A Gitea or Forgejo server's API v1.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct GiteaConfig {
    /// `https://git.example/api/v1`; default: the repository URL's scheme, host and path
    /// prefix with `/api/v1` (an `https://` or `http://` repository URL only).
    #[serde(default)]
    pub api_url: Option<String>,
    /// Environment variable holding an access token with the `write:repository` and
    /// `write:issue` scopes.
    pub token_env: String,
    /// `owner/name`; default: taken from the repository URL.
    #[serde(default)]
    pub repository: Option<String>,
}

/// Bitbucket Cloud's API 2.0. Exactly one of `tokenEnv` (an access token, sent as a bearer
/// token) and `appPasswordEnv` with `username` (an app password or API token, sent as basic
/// authentication).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BitbucketCloudConfig {
    /// Default `https://api.bitbucket.org/2.0`.
    #[serde(default = "default_bitbucket_api")]
    pub api_url: String,
    /// Environment variable holding a repository, project or workspace access token with the
    /// `pullrequest:write` and `repository:write` scopes.
    #[serde(default)]
    pub token_env: Option<String>,
    /// The Bitbucket user name an app password (or API token) belongs to.
    #[serde(default)]
    pub username: Option<String>,
    /// Environment variable holding that user's app password (or API token).
    #[serde(default)]
    pub app_password_env: Option<String>,
    /// `workspace/repository`; default: taken from the repository URL.
    #[serde(default)]
    pub repository: Option<String>,
}

fn default_bitbucket_api() -> String {
    "https://api.bitbucket.org/2.0".to_owned()
}

/// Bitbucket Data Center's REST API 1.0.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct BitbucketDataCenterConfig {
    /// The server's base URL, `https://bitbucket.example` (the API is under `/rest/api/1.0`).
    pub api_url: String,
    /// Environment variable holding an HTTP access token (personal, project or repository)
    /// with the *Repository write* permission.
    pub token_env: String,
    /// `PROJECT/repository`; default: the repository URL's last two path segments.
    #[serde(default)]
    pub repository: Option<String>,
}

/// Azure Repos through the Azure DevOps REST API 7.1. Exactly one of `tokenEnv` (a personal
/// access token) and `servicePrincipal`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AzureDevOpsConfig {
    /// Default `https://dev.azure.com`; a Server's collection URL without the collection.
    #[serde(default = "default_azure_api")]
    pub api_url: String,
    /// Where reviewers' names are looked up: default `https://vssps.dev.azure.com`.
    #[serde(default = "default_azure_identities")]
    pub identities_url: String,
    /// The organization (or a Server's collection).
    pub organization: String,
    pub project: String,
    /// The repository's name or id; default: the repository URL's last path segment.
    #[serde(default)]
    pub repository: Option<String>,
    /// Environment variable holding a personal access token with the *Code: read & write*
    /// scope (sent as basic authentication with an empty user).
    #[serde(default)]
    pub token_env: Option<String>,
    /// A Microsoft Entra service principal instead of a personal access token.
    #[serde(default)]
    pub service_principal: Option<ServicePrincipal>,
}

/// A Microsoft Entra application, authenticated with a client secret.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServicePrincipal {
    pub tenant_id: String,
    pub client_id: String,
    /// Environment variable holding the client secret.
    pub client_secret_env: String,
    /// Default `https://login.microsoftonline.com`.
    #[serde(default = "default_authority")]
    pub authority_url: String,
}

fn default_azure_api() -> String {
    "https://dev.azure.com".to_owned()
}

fn default_azure_identities() -> String {
    "https://vssps.dev.azure.com".to_owned()
}

fn default_authority() -> String {
    "https://login.microsoftonline.com".to_owned()
}

/// What serde cannot check in a `forge:` block.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "`forge` needs exactly one of `github`, `gitlab`, `gitea`, `forgejo`, `bitbucket`, \
         `azureDevOps` and `bitbucketDataCenter`"
    )]
    NotOneForge,
    #[error(
        "`forge.bitbucket` needs exactly one of `tokenEnv` and `appPasswordEnv` (with `username`)"
    )]
    NotOneBitbucketAuth,
    #[error("`forge.azureDevOps` needs exactly one of `tokenEnv` and `servicePrincipal`")]
    NotOneAzureAuth,
    #[error("`forge.github` needs exactly one of `tokenEnv` and `app`")]
    NotOneGitHubAuth,
}

impl ForgeConfig {
    /// Checks what serde cannot: one forge, one GitHub auth method.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let named = [
            self.github.is_some(),
            self.gitlab.is_some(),
            self.gitea.is_some(),
            self.forgejo.is_some(),
            self.bitbucket.is_some(),
            self.azure_devops.is_some(),
            self.bitbucket_data_center.is_some(),
        ];
        if named.iter().filter(|n| **n).count() != 1 {
            return Err(ConfigError::NotOneForge);
        }
        if let Some(azure) = &self.azure_devops
            && azure.token_env.is_some() == azure.service_principal.is_some()
        {
            return Err(ConfigError::NotOneAzureAuth);
        }
        if let Some(bitbucket) = &self.bitbucket {
            match (
                &bitbucket.token_env,
                &bitbucket.username,
                &bitbucket.app_password_env,
            ) {
                (Some(_), None, None) | (None, Some(_), Some(_)) => {}
                _ => return Err(ConfigError::NotOneBitbucketAuth),
            }
        }
        match &self.github {
            Some(github) => match (&github.token_env, &github.app) {
                (Some(_), None) | (None, Some(_)) => Ok(()),
                _ => Err(ConfigError::NotOneGitHubAuth),
            },
            None => Ok(()),
        }
    }
}

/// `owner/name` from a repository URL (`https://host/owner/name.git`, `git@host:owner/name.git`,
/// `ssh://git@host/owner/name`); `None` for URLs that carry no such path (file://).
pub fn path_from_url(url: &str) -> Option<String> {
    let path = match url::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "https" | "http" | "ssh" | "git+ssh") => {
            parsed.path().to_owned()
        }
        Ok(_) => return None,
        // scp-like `git@host:owner/name.git`
        Err(_) => url.split_once(':')?.1.to_owned(),
    };
    let path = path.trim_matches('/');
    let path = path.strip_suffix(".git").unwrap_or(path);
    path.contains('/').then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_paths_come_from_the_usual_url_shapes() {
        for url in [
            "https://github.com/acme/manifests.git",
            "git@github.com:acme/manifests.git",
            "ssh://git@github.com/acme/manifests",
        ] {
            assert_eq!(
                path_from_url(url).as_deref(),
                Some("acme/manifests"),
                "{url}"
            );
        }
        assert_eq!(
            path_from_url("https://gitlab.example/group/sub/project.git").as_deref(),
            Some("group/sub/project")
        );
        assert_eq!(path_from_url("file:///srv/m.git"), None);
    }

    #[test]
    fn exactly_one_forge_and_one_github_method() {
        let parse = |y: &str| serde_saphyr::from_str::<ForgeConfig>(y).unwrap().validate();
        assert_eq!(parse("github: {tokenEnv: T}"), Ok(()));
        assert_eq!(
            parse("github: {tokenEnv: T, app: {appId: 1, privateKeyFile: k, installationId: 2}}"),
            Err(ConfigError::NotOneGitHubAuth)
        );
        assert_eq!(parse("github: {}"), Err(ConfigError::NotOneGitHubAuth));
        assert_eq!(parse("gitlab: {tokenEnv: T}"), Ok(()));
        assert_eq!(parse("gitea: {tokenEnv: T}"), Ok(()));
        assert_eq!(parse("forgejo: {tokenEnv: T}"), Ok(()));
        assert_eq!(
            parse("gitea: {tokenEnv: T}\nforgejo: {tokenEnv: T}"),
            Err(ConfigError::NotOneForge)
        );
        assert_eq!(parse("{}"), Err(ConfigError::NotOneForge));
        assert_eq!(parse("bitbucket: {tokenEnv: T}"), Ok(()));
        assert_eq!(
            parse("bitbucketDataCenter: {apiUrl: 'https://b.example', tokenEnv: T}"),
            Ok(())
        );
        assert_eq!(
            parse("azureDevOps: {organization: o, project: p, tokenEnv: T}"),
            Ok(())
        );
        assert_eq!(
            parse("azureDevOps: {organization: o, project: p}"),
            Err(ConfigError::NotOneAzureAuth)
        );
        assert_eq!(parse("bitbucket: {username: u, appPasswordEnv: P}"), Ok(()));
        assert_eq!(
            parse("bitbucket: {appPasswordEnv: P}"),
            Err(ConfigError::NotOneBitbucketAuth)
        );
        assert_eq!(
            parse("bitbucket: {tokenEnv: T, username: u, appPasswordEnv: P}"),
            Err(ConfigError::NotOneBitbucketAuth)
        );
    }
}
