//! [`RegistryError`]: everything that can go wrong talking to a registry, typed, with the
//! underlying error kept as its source.
//!
//! Each message names the registry host and the repository (and the tag or digest where one is
//! involved) and is complete on its own, because the planner records `to_string()` of it per
//! policy; `main` prints the source chain only where it adds something. Never a secret: token
//! server answers and helper output are reduced to positions and safe fields before they get here.

use std::error::Error;
use std::fmt;
use std::sync::Arc;

use super::auth::CredentialError;
use crate::image::Repository;

/// Everything that can go wrong talking to a registry.
///
/// `Clone` because results are shared: every caller waiting on one repository's tag list gets the
/// same answer, error included; sources are behind `Arc` for that.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error("cannot set up the HTTP client for registries")]
    Setup {
        #[source]
        source: Arc<reqwest::Error>,
    },

    #[error("registry {registry} is unreachable (repository {repository})")]
    Unreachable {
        registry: String,
        repository: String,
        #[source]
        source: Arc<reqwest::Error>,
    },

    #[error(
        "registry {registry} did not answer within {} (repository {repository}); it is not asked \
         again this cycle",
        humantime::format_duration(*timeout)
    )]
    TimedOut {
        registry: String,
        repository: String,
        timeout: std::time::Duration,
    },

    /// Fail fast: a registry that timed out earlier in the cycle is not waited for again.
    #[error(
        "registry {registry} timed out earlier this cycle; repository {repository} is checked \
         again next cycle"
    )]
    Down {
        registry: String,
        repository: String,
    },

    /// TLS was spoken to a registry that answered in plain HTTP: rustls then reports only
    /// "received corrupt message of type InvalidContentType", which points nowhere.
    #[error(
        "registry {registry} answered in plain HTTP, not HTTPS (repository {repository}); \
         if it serves only plain HTTP, set `insecure: true` for host {registry} under \
         `registries:` in tagpilot.yaml"
    )]
    PlainHttp {
        registry: String,
        repository: String,
        #[source]
        source: Arc<reqwest::Error>,
    },

    #[error("registry {registry} denied access to repository {repository}: {refusal}")]
    Unauthorized {
        registry: String,
        repository: String,
        /// Boxed: it is the largest variant by far, and errors travel in every `Result`.
        refusal: Box<Refusal>,
    },

    #[error("repository {repository} does not exist on registry {registry}")]
    RepositoryNotFound {
        registry: String,
        repository: String,
    },

    #[error("{reference} not found in repository {repository} on registry {registry}")]
    NotFound {
        registry: String,
        repository: String,
        reference: String,
    },

    #[error(
        "registry {registry} kept refusing requests for repository {repository} with HTTP {status} \
         (rate limited or unavailable); gave up after {attempts} attempts{}",
        retry_after.map(|s| format!(", last Retry-After was {s} s")).unwrap_or_default()
    )]
    RateLimited {
        registry: String,
        repository: String,
        status: u16,
        attempts: u32,
        retry_after: Option<u64>,
    },

    /// A manifest GET not sent: the registry's pull quota is down to what is kept back
    /// (`registry/quota.rs`).
    #[error(
        "deferred: {registry} quota, {left} left{}{} (repository {repository})",
        limit.map(|l| format!(" of {l}")).unwrap_or_default(),
        window.map(|w| format!(", resets within {}", humantime::format_duration(w))).unwrap_or_default()
    )]
    Deferred {
        registry: String,
        repository: String,
        left: u64,
        limit: Option<u64>,
        window: Option<std::time::Duration>,
    },

    #[error("registry {registry} sent a malformed {what} for repository {repository}")]
    Malformed {
        registry: String,
        repository: String,
        what: &'static str,
        #[source]
        problem: Malformation,
    },

    #[error(
        "registry {registry} answered HTTP {status} for repository {repository}: {}{body}",
        token_server.as_ref().map(|realm| format!("token server {realm}: ")).unwrap_or_default()
    )]
    Http {
        registry: String,
        repository: String,
        status: u16,
        /// Set when the token server, not the registry, answered.
        token_server: Option<String>,
        /// The start of the response body (see [`excerpt`]).
        body: String,
    },

    /// A tag listing went past one of its bounds (`registries[].tagList`): a registry that
    /// paginates without end costs this one error for the repository's images, not the cycle.
    #[error(
        "registry {registry} paginated the tag list of repository {repository} past {bound}; \
         stopped listing (set `tagList` for host {registry} under `registries:` in tagpilot.yaml \
         if the repository really has more)"
    )]
    TagListTooLong {
        registry: String,
        repository: String,
        bound: TagListBound,
    },

    #[error("cannot get credentials for registry {registry} (repository {repository})")]
    Credentials {
        registry: String,
        repository: String,
        #[source]
        source: CredentialError,
    },

    /// The signatures of a digest could not be verified at all (not "did not verify"): the
    /// reference is held, never taken as signed or skipped as unsigned.
    #[error(
        "cannot verify the signatures of {digest} in repository {repository} on registry \
         {registry}"
    )]
    Signatures {
        registry: String,
        repository: String,
        digest: String,
        #[source]
        source: Arc<super::signature_state::SignatureError>,
    },

    /// Signature verification could not be set up (the trust root could not be read).
    #[error("cannot verify signatures for repository {repository} on registry {registry}")]
    SignaturesSetup {
        registry: String,
        repository: String,
        #[source]
        source: Arc<super::signature_state::SignatureError>,
    },

    /// A registry that cannot verify signatures (an in-memory one) was asked to.
    #[error("repository {repository}: this registry cannot verify signatures")]
    SignaturesUnsupported { repository: String },
}

impl RegistryError {
    /// A short, stable label for metrics and reports.
    pub fn metric_label(&self) -> &'static str {
        match self {
            RegistryError::Setup { .. } => "setup",
            RegistryError::Unreachable { .. } => "unreachable",
            RegistryError::TimedOut { .. } => "timed_out",
            RegistryError::Down { .. } => "down",
            RegistryError::PlainHttp { .. } => "plain_http",
            RegistryError::Unauthorized { .. } => "unauthorized",
            RegistryError::RepositoryNotFound { .. } => "repository_not_found",
            RegistryError::NotFound { .. } => "not_found",
            RegistryError::RateLimited { .. } => "rate_limited",
            RegistryError::Deferred { .. } => "quota_deferred",
            RegistryError::Malformed { .. } => "malformed_response",
            RegistryError::Http { .. } => "http_error",
            RegistryError::Credentials { .. } => "credentials",
            RegistryError::TagListTooLong { .. } => "tag_list_too_long",
            RegistryError::Signatures { .. } => "signatures",
            RegistryError::SignaturesSetup { .. } => "signatures_setup",
            RegistryError::SignaturesUnsupported { .. } => "signatures_unsupported",
        }
    }
}

/// Two errors are the same when they are of one kind and say the same thing. The sources
/// (`reqwest`, `io`, `serde_json` errors) have no equality of their own; what a user reads is what
/// tests and callers compare.
impl PartialEq for RegistryError {
    fn eq(&self, other: &Self) -> bool {
        self.metric_label() == other.metric_label()
            && crate::error_chain::chain(self) == crate::error_chain::chain(other)
    }
}

impl Eq for RegistryError {}

/// Why a registry or its token server refused us, worded for the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The token server's realm, when it (not the registry) refused.
    pub token_server: Option<String>,
    pub refused: Refused,
    /// The start of a 403's body: registries say there which permission is missing.
    pub forbidden: Option<String>,
}

/// Who was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// A credential was sent; its user and where it came from are safe to print, its secret is
    /// not here at all.
    Credential { username: String, origin: String },
    /// Nothing was sent because nothing was found. `auth_key` is what `docker login` takes.
    Anonymous { registry: String, auth_key: String },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(realm) = &self.token_server {
            write!(f, "token server {realm}: ")?;
        }
        match &self.refused {
            Refused::Credential { username, origin } => write!(
                f,
                "the credentials of user {username} (from {origin}) were rejected"
            )?,
            Refused::Anonymous { registry, auth_key } => write!(
                f,
                "anonymous access was refused and no credentials were found for {registry} \
                 (add credentials to tagpilot.yaml or run `docker login {auth_key}`)"
            )?,
        }
        if let Some(body) = &self.forbidden {
            write!(f, " (HTTP 403: {body})")?;
        }
        Ok(())
    }
}

/// Which bound of `registries[].tagList` a listing reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagListBound {
    /// `maxPages`: this many pages were read and the registry pointed at another.
    Pages(usize),
    /// `maxTags`: more distinct tags than this.
    Tags(usize),
    /// `timeout`: the listing took longer than this, every page included.
    Time(std::time::Duration),
    /// One page's body was larger than `maxTags` tags of the longest length the spec allows.
    PageBytes(usize),
}

impl fmt::Display for TagListBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TagListBound::Pages(n) => write!(f, "{n} pages (tagList.maxPages)"),
            TagListBound::Tags(n) => write!(f, "{n} tags (tagList.maxTags)"),
            TagListBound::Time(d) => {
                write!(f, "{} (tagList.timeout)", humantime::format_duration(*d))
            }
            TagListBound::PageBytes(n) => {
                write!(f, "{n} bytes in one page (more than tagList.maxTags tags)")
            }
        }
    }
}

/// What was wrong with something a registry sent.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Malformation {
    #[error(transparent)]
    Json(Arc<serde_json::Error>),
    /// JSON that may hold a secret (a token server's answer): serde_json's messages can quote the
    /// value they choke on, so only the position is kept.
    #[error("not valid JSON (line {line}, column {column})")]
    SecretJson { line: usize, column: usize },
    #[error(transparent)]
    Url(url::ParseError),
    #[error("it points outside the registry: {0}")]
    LinkOutsideRegistry(String),
    #[error("its content has digest sha256:{actual}, not {expected}")]
    DigestMismatch { actual: String, expected: String },
    #[error("Docker schema 1 manifests are not supported")]
    Schema1,
    #[error("unsupported media type {0}")]
    MediaType(String),
    #[error("it holds neither `token` nor `access_token`")]
    NoToken,
}

impl From<serde_json::Error> for Malformation {
    fn from(e: serde_json::Error) -> Self {
        Malformation::Json(Arc::new(e))
    }
}

impl From<url::ParseError> for Malformation {
    fn from(e: url::ParseError) -> Self {
        Malformation::Url(e)
    }
}

// === constructors the client uses ===

/// A request that got no HTTP answer. A TLS handshake that met a plain-HTTP answer gets its own
/// variant, since its own message names nothing the user can act on.
pub(super) fn unreachable(repo: &Repository, e: reqwest::Error) -> RegistryError {
    let registry = repo.registry.clone();
    let repository = repo.path.clone();
    let source = Arc::new(e);
    if spoke_tls_to_plain_http(&source) {
        RegistryError::PlainHttp {
            registry,
            repository,
            source,
        }
    } else {
        RegistryError::Unreachable {
            registry,
            repository,
            source,
        }
    }
}

/// rustls reads the first bytes of an HTTP answer (`HTTP/1.1 400`) as a TLS record of an unknown
/// content type. rustls is not a dependency of ours to downcast to, so its message is matched.
fn spoke_tls_to_plain_http(e: &reqwest::Error) -> bool {
    if e.url().is_some_and(|u| u.scheme() != "https") {
        return false;
    }
    let mut source: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.to_string().contains("InvalidContentType") {
            return true;
        }
        source = s.source();
    }
    false
}

pub(super) fn malformed(
    repo: &Repository,
    what: &'static str,
    problem: impl Into<Malformation>,
) -> RegistryError {
    RegistryError::Malformed {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        what,
        problem: problem.into(),
    }
}

/// The start of a response body for an error message: enough to see the registry's complaint.
pub(super) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_of_one_kind_saying_the_same_are_equal() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let a = malformed(&repo, "manifest", Malformation::Schema1);
        assert_eq!(a, a.clone());
        assert_ne!(a, malformed(&repo, "manifest", Malformation::NoToken));
    }

    #[test]
    fn excerpts_are_bounded() {
        assert_eq!(excerpt(b"  "), "(empty body)");
        let long = "x".repeat(400);
        assert_eq!(excerpt(long.as_bytes()).chars().count(), 301);
    }
}
