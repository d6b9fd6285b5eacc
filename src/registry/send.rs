//! One request to a registry: [`RegistryClient::send`] waits for the registry's rate limiter and
//! a concurrency permit, counts the request, authenticates it (see `auth/token.rs`), retries a 401
//! once after learning the challenge and a 429/503 after `Retry-After`, and turns every other
//! answer into a typed [`RegistryError`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::header::{ACCEPT, HeaderMap, RETRY_AFTER, WWW_AUTHENTICATE};
use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use tracing::{debug, warn};

use super::RegistryError;
use super::auth::token::{Auth, parse_challenge, unauthorized};
use super::error::{excerpt, unreachable};
use super::state::{Kind, RegistryClient, RegistryState};
use crate::image::Repository;

/// What a request is after, for 404 messages.
pub(super) enum Target<'a> {
    Tags,
    Manifest(&'a str),
    Blob(&'a str),
}

/// One request as its caller asks for it: what it counts as, how and where it goes, the media
/// types it accepts, and what it is after.
pub(super) struct RegistryRequest<'a> {
    pub kind: Kind,
    pub method: Method,
    pub url: Url,
    pub accept: Option<&'a str>,
    pub target: Target<'a>,
}

impl RegistryClient {
    /// Sends one request to a registry: waits for the rate limiter, authenticates, counts, and
    /// retries a 401 once after learning the challenge and a 429/503 after `Retry-After`.
    /// Returns only successful responses; everything else becomes a [`RegistryError`].
    pub(super) async fn send(
        &self,
        reg: &RegistryState,
        repo: &Repository,
        asked: RegistryRequest<'_>,
    ) -> Result<reqwest::Response, RegistryError> {
        let RegistryRequest {
            kind,
            method,
            url,
            accept,
            target,
        } = asked;
        let scope = format!("repository:{}:pull", repo.path);
        let mut answered_challenge = false;
        let mut rate_limited = 0u32;
        loop {
            reg.check_up(repo)?;
            let (sent, auth) = self.authorization(reg, repo, &scope).await?;
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .timeout(reg.timeout);
            if let Some(accept) = accept {
                request = request.header(ACCEPT, accept);
            }
            request = match &auth {
                Auth::None => request,
                Auth::Basic(c) => request.basic_auth(&c.username, Some(c.password())),
                Auth::Bearer(token) => request.bearer_auth(token),
            };
            let resp = {
                let _permit = reg
                    .in_flight
                    .acquire()
                    .await
                    .expect("semaphore never closed");
                if let Some(limiter) = &reg.limiter {
                    limiter.until_ready().await;
                }
                // Another request may have timed out while this one waited its turn.
                reg.check_up(repo)?;
                if kind == Kind::Manifest && method == Method::GET {
                    reg.quota.admit(self.options.clock.wall()).map_err(|d| {
                        RegistryError::Deferred {
                            registry: repo.registry.clone(),
                            repository: repo.path.clone(),
                            left: d.left,
                            limit: d.limit,
                            window: d.window,
                        }
                    })?;
                } else if kind == Kind::Manifest && method == Method::HEAD {
                    reg.quota.head();
                }
                self.count(kind);
                debug!(%method, %url, "registry request");
                let sent = request.send().await;
                let status = sent.as_ref().ok().map(|r| r.status().as_u16());
                self.record(&repo.registry, kind, status);
                sent.map_err(|e| reg.failed(repo, e))?
            };
            reg.quota.observe(resp.headers(), self.options.clock.wall());
            let status = resp.status();
            if status.is_success() {
                return Ok(resp);
            }
            match status {
                StatusCode::UNAUTHORIZED => {
                    let challenge = parse_challenge(
                        resp.headers()
                            .get_all(WWW_AUTHENTICATE)
                            .iter()
                            .filter_map(|v| v.to_str().ok()),
                    );
                    if !answered_challenge
                        && self.learn(reg, repo, &scope, challenge, &sent).await?
                    {
                        answered_challenge = true;
                        continue;
                    }
                    return Err(unauthorized(repo, &sent, None, None));
                }
                StatusCode::FORBIDDEN => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(unauthorized(repo, &sent, None, Some(excerpt(&body))));
                }
                StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE => {
                    rate_limited += 1;
                    let retry_after = retry_after(resp.headers(), self.options.clock.wall());
                    let give_up = |retry_after: Option<Duration>| RegistryError::RateLimited {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        status: status.as_u16(),
                        attempts: rate_limited,
                        retry_after: retry_after.map(|d| d.as_secs()),
                    };
                    if rate_limited > self.options.max_retries {
                        return Err(give_up(retry_after));
                    }
                    // Without Retry-After: 1 s, 2 s, 4 s…
                    let wait =
                        retry_after.unwrap_or(Duration::from_secs(1 << (rate_limited - 1).min(5)));
                    if wait > self.options.max_retry_wait {
                        return Err(give_up(retry_after));
                    }
                    warn!(
                        status = status.as_u16(),
                        wait_secs = wait.as_secs_f64(),
                        "registry asked to retry later"
                    );
                    tokio::time::sleep(wait).await;
                }
                StatusCode::NOT_FOUND => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(not_found(repo, &target, &body));
                }
                _ => {
                    let body = resp.bytes().await.unwrap_or_default();
                    return Err(RegistryError::Http {
                        registry: repo.registry.clone(),
                        repository: repo.path.clone(),
                        status: status.as_u16(),
                        token_server: None,
                        body: excerpt(&body),
                    });
                }
            }
        }
    }
}

impl RegistryState {
    /// Fails fast when a request to this registry timed out earlier this cycle.
    pub(super) fn check_up(&self, repo: &Repository) -> Result<(), RegistryError> {
        if self.down.load(Ordering::Relaxed) {
            return Err(RegistryError::Down {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
            });
        }
        Ok(())
    }

    /// A request that got no answer; a timeout marks the registry down for the cycle.
    pub(super) fn failed(&self, repo: &Repository, e: reqwest::Error) -> RegistryError {
        if e.is_timeout() {
            if !self.down.swap(true, Ordering::Relaxed) {
                warn!(
                    registry = %repo.registry,
                    timeout = %humantime::format_duration(self.timeout),
                    "registry did not answer in time; not asking it again this cycle"
                );
            }
            return RegistryError::TimedOut {
                registry: repo.registry.clone(),
                repository: repo.path.clone(),
                timeout: self.timeout,
            };
        }
        unreachable(repo, e)
    }
}

/// `Retry-After` as seconds or an HTTP date (RFC 9110).
fn retry_after(headers: &HeaderMap, now: jiff::Timestamp) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    if let Ok(secs) = value.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(value)
        .ok()?;
    let secs = at.duration_since(now).as_secs_f64().max(0.0);
    Some(Duration::from_secs_f64(secs.ceil()))
}

/// A 404: the repository is missing when listing tags or when the registry says `NAME_UNKNOWN`,
/// else the tag, manifest or blob asked for.
fn not_found(repo: &Repository, target: &Target<'_>, body: &[u8]) -> RegistryError {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<ErrorEntry>,
    }
    #[derive(Deserialize)]
    struct ErrorEntry {
        code: String,
    }
    let name_unknown = serde_json::from_slice::<Errors>(body)
        .is_ok_and(|e| e.errors.iter().any(|e| e.code == "NAME_UNKNOWN"));
    match target {
        Target::Tags => RegistryError::RepositoryNotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
        },
        _ if name_unknown => RegistryError::RepositoryNotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
        },
        Target::Manifest(what) | Target::Blob(what) => RegistryError::NotFound {
            registry: repo.registry.clone(),
            repository: repo.path.clone(),
            reference: what.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_http_dates() {
        let now: jiff::Timestamp = "2026-11-28T12:00:00Z".parse().unwrap();
        let mut h = HeaderMap::new();
        h.insert(RETRY_AFTER, "7".parse().unwrap());
        assert_eq!(retry_after(&h, now), Some(Duration::from_secs(7)));
        h.insert(
            RETRY_AFTER,
            "Sun, 06 Nov 1994 08:49:37 GMT".parse().unwrap(),
        );
        assert_eq!(
            retry_after(&h, now),
            Some(Duration::ZERO),
            "a date in the past means now"
        );
        let soon = now + jiff::SignedDuration::from_secs(120);
        let printed = jiff::fmt::rfc2822::DateTimePrinter::new()
            .timestamp_to_rfc9110_string(&soon)
            .unwrap();
        h.insert(RETRY_AFTER, printed.parse().unwrap());
        let got = retry_after(&h, now).unwrap();
        assert!(
            got > Duration::from_secs(100) && got <= Duration::from_secs(121),
            "{got:?}"
        );
        h.insert(RETRY_AFTER, "soon".parse().unwrap());
        assert_eq!(retry_after(&h, now), None);
    }

    #[test]
    fn a_404_names_the_repository_or_the_reference() {
        let repo = Repository {
            registry: "r".into(),
            path: "p".into(),
        };
        let unknown = br#"{"errors":[{"code":"NAME_UNKNOWN"}]}"#;
        assert_eq!(
            not_found(&repo, &Target::Manifest("tag 1.0"), unknown).metric_label(),
            "repository_not_found"
        );
        let err = not_found(&repo, &Target::Blob("config blob sha256:ab"), b"");
        assert_eq!(err.metric_label(), "not_found");
        assert!(err.to_string().contains("config blob sha256:ab"), "{err}");
    }
}
