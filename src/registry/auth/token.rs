//! Answering a registry's auth challenge: Basic with the registry's credential, or the
//! distribution token flow (`WWW-Authenticate: Bearer realm=…,service=…`, then a token from the
//! realm, cached per registry and scope until shortly before it expires). Anonymous tokens
//! included: GHCR wants one even for public images.
//!
//! Token requests go through this client, not `oci-client`, so they are counted and a refusal
//! names the user and the token server (see [`crate::registry`]).

use std::sync::Arc;
use std::time::Duration;

use reqwest::{StatusCode, Url};
use serde::Deserialize;
use tracing::debug;

use super::Credential;
use crate::image::Repository;
use crate::registry::RegistryError;
use crate::registry::error::{Malformation, Refusal, Refused, excerpt, malformed, unreachable};
use crate::registry::state::{CachedToken, Kind, RegistryClient, RegistryState, Scheme};

/// What a registry's `WWW-Authenticate` header asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Challenge {
    Basic,
    Bearer {
        realm: String,
        service: Option<String>,
    },
}

/// What one request was sent with, to word a 401 and to know whether retrying could help.
pub(crate) enum Sent {
    Nothing,
    Basic(Credential),
    Token { credential: Option<Credential> },
}

/// The `Authorization` a request carries.
pub(crate) enum Auth {
    None,
    Basic(Credential),
    Bearer(String),
}

/// A token server's answer. Docker's servers say `token`, OAuth2 ones `access_token`.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Debug))]
struct TokenResponse {
    #[serde(default)]
    token: Option<String>,
    #[serde(default)]
    access_token: Option<String>,
    #[serde(default)]
    expires_in: Option<u64>,
}

/// The challenge to answer among a 401's `WWW-Authenticate` values; Bearer wins over Basic.
pub(crate) fn parse_challenge<'a>(values: impl Iterator<Item = &'a str>) -> Option<Challenge> {
    let mut basic = false;
    for value in values {
        let Ok(challenges) = http_auth::parse_challenges(value) else {
            continue;
        };
        for c in challenges {
            if c.scheme.eq_ignore_ascii_case("bearer") {
                let param = |name: &str| {
                    c.params
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.to_unescaped())
                };
                if let Some(realm) = param("realm") {
                    return Some(Challenge::Bearer {
                        realm,
                        service: param("service"),
                    });
                }
            } else if c.scheme.eq_ignore_ascii_case("basic") {
                basic = true;
            }
        }
    }
    basic.then_some(Challenge::Basic)
}

impl RegistryClient {
    /// How to authenticate the next request to `reg` for `scope`, as far as the client knows.
    pub(in crate::registry) async fn authorization(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
    ) -> Result<(Sent, Auth), RegistryError> {
        let scheme = reg.scheme.lock().expect("scheme lock poisoned").clone();
        match scheme {
            Scheme::Anonymous => Ok((Sent::Nothing, Auth::None)),
            Scheme::Basic => match self.credential(reg, repo).await? {
                Some(c) => Ok((Sent::Basic(c.clone()), Auth::Basic(c))),
                None => Ok((Sent::Nothing, Auth::None)),
            },
            Scheme::Bearer { realm, service } => {
                let mut credential = self.credential(reg, repo).await?;
                let service = service.as_deref();
                let token = match self
                    .token(reg, repo, scope, &realm, service, credential.as_ref())
                    .await
                {
                    // The token server refused the credential held: it may have been rotated
                    // (a credential helper's token expired, a Secret or file changed). Once.
                    Err(RegistryError::Unauthorized { .. })
                        if credential.is_some()
                            && self.reload_credential(reg, repo, &credential).await? =>
                    {
                        credential = self.credential(reg, repo).await?;
                        self.token(reg, repo, scope, &realm, service, credential.as_ref())
                            .await?
                    }
                    other => other?,
                };
                Ok((Sent::Token { credential }, Auth::Bearer(token)))
            }
        }
    }

    /// Takes in a 401's challenge. `Ok(true)` when a retry can succeed.
    pub(in crate::registry) async fn learn(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
        challenge: Option<Challenge>,
        sent: &Sent,
    ) -> Result<bool, RegistryError> {
        match challenge {
            Some(Challenge::Bearer { realm, service }) => {
                *reg.scheme.lock().expect("scheme lock poisoned") =
                    Scheme::Bearer { realm, service };
                if matches!(sent, Sent::Token { .. }) {
                    // The token was refused (expired early, or revoked): fetch a fresh one once.
                    let slot = token_slot(reg, scope);
                    *slot.lock().await = None;
                }
                Ok(true)
            }
            Some(Challenge::Basic) => {
                *reg.scheme.lock().expect("scheme lock poisoned") = Scheme::Basic;
                match sent {
                    // The credential held was refused: look it up again, and retry if it changed.
                    Sent::Basic(c) => self.reload_credential(reg, repo, &Some(c.clone())).await,
                    _ => Ok(self.credential(reg, repo).await?.is_some()),
                }
            }
            None => Ok(false),
        }
    }

    /// The registry's credential, looked up once per registry on its first challenge (and again
    /// after [`RegistryClient::reload_credential`]).
    pub(in crate::registry) async fn credential(
        &self,
        reg: &RegistryState,
        repo: &Repository,
    ) -> Result<Option<Credential>, RegistryError> {
        let auth_key = repo.auth_key().to_string();
        let cell = reg
            .credential
            .lock()
            .expect("credential lock poisoned")
            .clone();
        cell.get_or_init(|| async { self.credentials.resolve(&reg.host, &auth_key).await })
            .await
            .clone()
            .map_err(|source| RegistryError::Credentials {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                source,
            })
    }

    /// Forgets `refused` (the credential a registry or token server just refused) and looks the
    /// credential up again from its source: a credential helper asked anew, a file or Secret
    /// read again. `Ok(true)` when that gave a different credential, so a retry can succeed.
    /// Concurrent callers refused with the same credential share one lookup.
    async fn reload_credential(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        refused: &Option<Credential>,
    ) -> Result<bool, RegistryError> {
        {
            let mut slot = reg.credential.lock().expect("credential lock poisoned");
            let stale = match slot.get() {
                Some(Ok(held)) => held == refused,
                Some(Err(_)) => true,
                // Someone is looking it up right now; theirs is fresh.
                None => false,
            };
            if stale {
                *slot = Arc::default();
            }
        }
        let fresh = self.credential(reg, repo).await?;
        let changed = fresh.is_some() && fresh != *refused;
        if changed {
            debug!(registry = %repo.registry, "credential reloaded after a refusal");
        }
        Ok(changed)
    }

    /// A Bearer token for `scope`, from the cache or the token server.
    async fn token(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        scope: &str,
        realm: &str,
        service: Option<&str>,
        credential: Option<&Credential>,
    ) -> Result<String, RegistryError> {
        let slot = token_slot(reg, scope);
        let mut cached = slot.lock().await;
        if let Some(t) = cached
            .as_ref()
            .filter(|t| t.valid_until > self.options.clock.now())
        {
            return Ok(t.token.clone());
        }
        let mut url = Url::parse(realm).map_err(|e| malformed(repo, "auth challenge realm", e))?;
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = service {
                query.append_pair("service", service);
            }
            query.append_pair("scope", scope);
        }
        reg.check_up(repo)?;
        let mut request = self.http.get(url).timeout(reg.timeout);
        if let Some(c) = credential {
            request = request.basic_auth(&c.username, Some(c.password()));
        }
        self.count(Kind::Token);
        debug!(realm, scope, "token request");
        let resp = request.send().await.map_err(|e| reg.failed(repo, e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| unreachable(repo, e))?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let sent = Sent::Token {
                credential: credential.cloned(),
            };
            return Err(unauthorized(repo, &sent, Some(realm), None));
        }
        if !status.is_success() {
            return Err(RegistryError::Http {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                status: status.as_u16(),
                token_server: Some(realm.to_string()),
                body: excerpt(&body),
            });
        }
        let answer: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            malformed(
                repo,
                "token response",
                Malformation::SecretJson {
                    line: e.line(),
                    column: e.column(),
                },
            )
        })?;
        let token = answer
            .token
            .or(answer.access_token)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| malformed(repo, "token response", Malformation::NoToken))?;
        // 60 s when absent (the distribution spec's default); renew at 90% of the lifetime.
        let lifetime = Duration::from_secs(answer.expires_in.unwrap_or(60).max(1));
        *cached = Some(CachedToken {
            token: token.clone(),
            valid_until: self.options.clock.now() + lifetime.mul_f64(0.9),
        });
        Ok(token)
    }
}

fn token_slot(reg: &RegistryState, scope: &str) -> Arc<tokio::sync::Mutex<Option<CachedToken>>> {
    reg.tokens
        .lock()
        .expect("token map lock poisoned")
        .entry(scope.to_string())
        .or_default()
        .clone()
}

/// A refusal by the registry (`token_server: None`) or its token server, naming who was refused
/// and never with what secret.
pub(crate) fn unauthorized(
    repo: &Repository,
    sent: &Sent,
    token_server: Option<&str>,
    forbidden: Option<String>,
) -> RegistryError {
    let refused = match sent {
        Sent::Basic(c)
        | Sent::Token {
            credential: Some(c),
        } => Refused::Credential {
            username: c.username.clone(),
            origin: c.source.clone(),
        },
        Sent::Nothing | Sent::Token { credential: None } => Refused::Anonymous {
            registry: repo.registry.clone(),
            auth_key: repo.auth_key().to_string(),
        },
    };
    RegistryError::Unauthorized {
        registry: repo.registry.clone(),
        repository: repo.path.clone(),
        refusal: Box::new(Refusal {
            token_server: token_server.map(str::to_string),
            refused,
            forbidden,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_challenge_wins_and_keeps_realm_and_service() {
        let got = parse_challenge(
            [r#"Basic realm="x""#, r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull""#]
                .into_iter(),
        );
        assert_eq!(
            got,
            Some(Challenge::Bearer {
                realm: "https://auth.example.com/token".into(),
                service: Some("registry.example.com".into())
            })
        );
        assert_eq!(
            parse_challenge([r#"Basic realm="Registry Realm""#].into_iter()),
            Some(Challenge::Basic)
        );
        assert_eq!(parse_challenge(["Negotiate"].into_iter()), None);
    }

    #[test]
    fn error_messages_name_registry_and_repository_and_never_the_password() {
        let repo = Repository {
            registry: "127.0.0.1:5000".into(),
            path: "shop/api".into(),
        };
        let sent = Sent::Basic(Credential::new("bot", "hunter2", "tagpilot.yaml"));
        let msg = unauthorized(&repo, &sent, None, None).to_string();
        assert!(
            msg.contains("127.0.0.1:5000") && msg.contains("shop/api") && msg.contains("bot"),
            "{msg}"
        );
        assert!(!msg.contains("hunter2"), "{msg}");
        let msg = unauthorized(&repo, &Sent::Nothing, None, None).to_string();
        assert!(msg.contains("no credentials"), "{msg}");
        let msg = unauthorized(
            &repo,
            &sent,
            Some("https://auth/token"),
            Some("denied".into()),
        )
        .to_string();
        assert!(
            msg.contains("token server https://auth/token: the credentials of user bot")
                && msg.ends_with("(HTTP 403: denied)"),
            "{msg}"
        );
    }

    #[test]
    fn a_token_response_that_is_not_json_is_reported_without_its_content() {
        let err = serde_json::from_slice::<TokenResponse>(br#"{"expires_in": "s3cret-token"}"#)
            .unwrap_err();
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let msg = crate::error_chain::chain(&malformed(
            &repo,
            "token response",
            Malformation::SecretJson {
                line: err.line(),
                column: err.column(),
            },
        ));
        assert!(
            err.to_string().contains("s3cret-token"),
            "serde quotes values"
        );
        assert!(
            !msg.contains("s3cret-token") && msg.contains("line 1"),
            "{msg}"
        );
    }
}
