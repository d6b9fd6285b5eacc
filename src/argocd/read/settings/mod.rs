//! The settings of one Argo CD Application, typed: what to update (per image: strategy,
//! constraint, tag filters, platforms, pull secret, Helm and kustomize names, force-update,
//! min-age) and how to write it (write-back method, target, branch, repository, pull requests).
//!
//! Why it exists: Image Updater takes the same settings as annotations and as `ImageUpdater`
//! resources. Both are read into one typed input ([`SettingsInput`]: annotations from their
//! strings, in [`super::annotations`]; resources from their typed fields, in
//! [`super::image_updater`]) and checked by one reader ([`read()`]), so a setting means the same
//! and fails the same way whichever way it is written. No value is written out as an
//! annotation string to be parsed back.
//!
//! Pure. A filter, range or strategy that cannot be read blocks its image (it is never read as
//! "no filter", which would widen what the user asked for); anything else not honoured is
//! listed in [`AppSettings::skipped`] with the reason, never dropped silently.

use crate::image::{Platform, Repository};

/// Why one annotation's value is not understood; the message becomes the skipped annotation's
/// reason, so it quotes the value and says what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SettingError {
    #[error("{0:?}: empty alias")]
    EmptyAlias(String),
    #[error("{0:?}: no image name")]
    NoImageName(String),
    #[error("{0:?} is not <namespace>/<name>")]
    NotNamespaceName(String),
    #[error("{0:?}: `secret:` needs `<namespace>/<name>#<field>`")]
    SecretWithoutField(String),
    #[error(
        "{0:?}: expected pullsecret:<ns>/<name>, secret:<ns>/<name>#<field>, env:<VAR> or ext:<script>"
    )]
    PullSecret(String),
    /// The value is named by the [`UnreadableSetting`] it becomes.
    #[error("expected argocd, git, git:repocreds or git:secret:<ns>/<name>")]
    WriteBackMethod(String),
    /// The value is named by the [`UnreadableSetting`] it becomes.
    #[error("expected kustomization[:<dir>] or helmvalues[:<file>]")]
    WriteBackTarget(String),
}

/// Everything the annotations of one Application say.
#[derive(Debug, Clone, Default)]
pub struct AppSettings {
    pub images: Vec<ImageSettings>,
    pub write_back: WriteBackMethod,
    /// Whether `write-back-method` was set at all (Image Updater's default is `argocd`).
    pub write_back_explicit: bool,
    pub write_back_target: Option<WriteBackTarget>,
    pub git_branch: Option<GitBranch>,
    pub git_repository: Option<String>,
    /// Annotations tagpilot read but cannot honour (fully or at all), with the reason.
    pub skipped: Vec<SkippedAnnotation>,
    /// A `write-back-method` or `write-back-target` that cannot be read. Any one holds the whole
    /// Application: writing somewhere else than asked (an `.argocd-source` file, a patch
    /// through the Kubernetes API) because of a typo is never safe.
    pub unreadable: Vec<UnreadableSetting>,
    /// Keys under either prefix that no reader knows (a typo of a known key, an alias not in
    /// `image-list`): each is a warning, beside its entry in `skipped`.
    pub unknown: Vec<UnknownAnnotation>,
    /// Open pull requests instead of pushing (`gitConfig.pullRequest` of an `ImageUpdater`
    /// resource; no annotation sets it).
    pub pull_request: Option<PullRequestSettings>,
    /// `tagpilot.dev/hold`: tags a person holds, by alias ([`holds`]).
    pub holds: Vec<HoldRequest>,
    /// `tagpilot.dev/release-hold`: holds a person releases, by alias and tag.
    pub releases: Vec<HoldRequest>,
}

/// Pull requests asked for by an `ImageUpdater` resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequestSettings {
    pub provider: PullRequestProvider,
    /// Labels for the pull request, trimmed and without duplicates.
    pub labels: Vec<String>,
    /// The resource and field that asked, for reports.
    pub field: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullRequestProvider {
    GitHub,
    GitLab,
}

/// One image of `image-list`, with its per-alias (or app-wide) settings resolved.
#[derive(Debug, Clone)]
pub struct ImageSettings {
    /// The alias, or the image name when `image-list` gives none.
    pub alias: String,
    /// Whether `alias` was written (`alias=image`), so per-alias keys can apply.
    pub has_alias: bool,
    /// The image name as written, without tag or constraint.
    pub image: String,
    pub repository: Repository,
    /// The part after `:` in `image-list`: a version constraint for `semver`, the followed tag
    /// for `digest`.
    pub constraint: Option<String>,
    pub strategy: UpdateStrategy,
    /// `allow-tags: regexp:<re>`; `any` and absence mean every tag.
    pub allow_tags: Option<String>,
    pub ignore_tags: Vec<String>,
    pub platforms: Vec<Platform>,
    pub pull_secret: Option<PullSecret>,
    pub force_update: bool,
    pub helm: HelmNames,
    pub kustomize_image_name: Option<String>,
    /// `tagpilot.dev/<alias>.min-age` (tagpilot's own; Image Updater has none): the policy's
    /// `minAge`.
    pub min_age: Option<std::time::Duration>,
    /// `imagesVerification.cosignKey` of an `ImageUpdater` resource (issue 22): the public key
    /// the image's cosign signatures must verify with.
    pub cosign_key: Option<CosignKey>,
    /// Filters, ranges and strategies that cannot be read. Any one of them blocks the image:
    /// reading it as "no filter" would widen what the user asked for.
    pub unreadable: Vec<UnreadableSetting>,
}

/// A cosign public key in a Secret of the `ImageUpdater` resource's namespace, and, once read
/// over the cluster connection, its PEM (or why it could not be read: the image is then not
/// updated, never updated unverified).
#[derive(Debug, Clone)]
pub struct CosignKey {
    pub namespace: String,
    pub secret: String,
    pub key: String,
    /// `ImageUpdater <ns>/<name>: <field path>`, for messages.
    pub field: String,
    pub pem: Option<Result<Vec<u8>, CosignKeyError>>,
}

/// Why a cosign key's Secret gave no usable key. Shared (`Arc`): a Secret read once may fail
/// the images of several resources. Never holds the Secret's value.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CosignKeyError {
    /// The Secret could not be read; the cluster client's reason says why.
    #[error(transparent)]
    Secret(std::sync::Arc<crate::kubernetes::KubeError>),
    #[error("has no key {0:?}")]
    NoKey(String),
    /// The value is not a public key cosign verifies with.
    #[error(transparent)]
    NotAKey(std::sync::Arc<crate::config::signatures::SignaturesError>),
}

impl ImageSettings {
    /// Whether a setting that cannot be read keeps this image from being updated.
    pub fn is_blocked(&self) -> bool {
        !self.unreadable.is_empty()
    }
}

/// A filter, range or strategy of one image that cannot be read: the image is not updated, and
/// the Application has a problem that names the setting and its value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UnreadableSetting {
    /// The annotation key as written, with its prefix (for an `ImageUpdater` resource, the
    /// resource and field).
    pub key: String,
    /// The value as written.
    pub value: String,
    /// Why it cannot be read.
    pub reason: String,
}

impl std::fmt::Display for UnreadableSetting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Backticks, not Debug quotes: a regexp reads as written, backslashes not doubled.
        write!(
            f,
            "{} `{}` cannot be read: {}",
            self.key, self.value, self.reason
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UpdateStrategy {
    #[default]
    Semver,
    NewestBuild,
    Alphabetical,
    Digest,
}

impl UpdateStrategy {
    /// Case-insensitive, as Image Updater's `ParseUpdateStrategy` (`strings.ToLower`,
    /// registry-scanner/pkg/image/options.go).
    fn parse(s: &str) -> Option<UpdateStrategy> {
        Some(match s.to_lowercase().as_str() {
            "semver" => UpdateStrategy::Semver,
            "newest-build" | "latest" => UpdateStrategy::NewestBuild,
            "alphabetical" | "name" => UpdateStrategy::Alphabetical,
            "digest" => UpdateStrategy::Digest,
            _ => return None,
        })
    }
}

/// Helm parameter names (`helm.image-name`, `.image-tag`, `.image-spec`), as written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HelmNames {
    pub name: Option<String>,
    pub tag: Option<String>,
    pub spec: Option<String>,
}

impl HelmNames {
    /// Whether any `helm.*` annotation was set.
    pub fn is_set(&self) -> bool {
        self.name.is_some() || self.tag.is_some() || self.spec.is_some()
    }

    /// The parameter holding the image name (Image Updater's default `image.name`).
    pub fn name_or_default(&self) -> &str {
        self.name.as_deref().unwrap_or("image.name")
    }

    /// The parameter holding the tag (Image Updater's default `image.tag`).
    pub fn tag_or_default(&self) -> &str {
        self.tag.as_deref().unwrap_or("image.tag")
    }
}

/// Where registry credentials for an image come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullSecret {
    /// `pullsecret:<ns>/<name>`: a `kubernetes.io/dockerconfigjson` Secret.
    PullSecret { namespace: String, name: String },
    /// `secret:<ns>/<name>#<field>`: a field holding `user:password`.
    Secret {
        namespace: String,
        name: String,
        field: String,
    },
    /// `env:<VAR>`: an environment variable holding `user:password`.
    Env(String),
    /// `ext:<script>`: a script printing `user:password`.
    Ext(String),
}

/// `write-back-method`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum WriteBackMethod {
    /// Patch the Application's parameter overrides through the Kubernetes API.
    #[default]
    Argocd,
    Git(GitCredentials),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitCredentials {
    /// `git`: the credentials of the matching `repositories:` entry.
    Configured,
    /// `git:repocreds`: Argo CD's repository credentials.
    RepoCreds,
    /// `git:secret:<ns>/<name>`.
    Secret { namespace: String, name: String },
}

/// `write-back-target`: where git write-back edits instead of `.argocd-source-<app>.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteBackTarget {
    /// `kustomization[:<dir>]`: the kustomization in `dir` (default the source path).
    Kustomization(Option<String>),
    /// `helmvalues[:<file>]`: a values file (default the first `valueFiles` entry).
    HelmValues(Option<String>),
}

/// `git-branch`: `branch`, `base:target` or `:target`; either part may be a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitBranch {
    /// The annotation key as written, with its prefix (for reports about the template).
    pub key: String,
    pub base: Option<String>,
    /// A template (see [`crate::argocd::branch`]), rendered when the write happens.
    pub target: Option<String>,
}

/// An annotation key no reader knows, and the known key nearest to it, if one is near.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownAnnotation {
    /// As written, with its prefix.
    pub key: String,
    /// With the same prefix.
    pub nearest: Option<String>,
    /// The line it is written on, when read from a file and found there.
    pub line: Option<usize>,
}

/// An annotation tagpilot did not (fully) honour.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SkippedAnnotation {
    /// The annotation key as written, with its prefix.
    pub key: String,
    pub reason: String,
}

mod holds;
mod read;
#[cfg(test)]
mod tests;

pub use holds::HoldRequest;
pub(super) use read::image_and_constraint;
pub use read::{Given, ImageInput, Listed, SettingsInput, read, repository};
#[cfg(test)]
pub(super) use read::{parse_branch, parse_pull_secret, parse_target, parse_write_back};
