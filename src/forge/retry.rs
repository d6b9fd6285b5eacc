//! Waiting out a forge's rate limit. GitHub and GitLab both say in their headers how long to
//! wait, and both get the same bound, so one loop serves both: a run waits a little, a few
//! times, and otherwise gives up on the repository for this run instead of hanging.

use std::future::Future;
use std::time::Duration;

/// Longest wait for a rate limit within one run; beyond it the repository fails for this run.
pub(crate) const MAX_RATE_LIMIT_WAIT: u64 = 300;
/// How many times one request is retried after rate limits.
pub(crate) const MAX_RATE_LIMIT_RETRIES: u32 = 3;
/// The wait when a rate-limited response does not say how long.
const UNSTATED_WAIT: u64 = 60;

/// How long to wait for a rate limit, from `Retry-After` (seconds) or `x-ratelimit-reset` /
/// `ratelimit-reset` (epoch seconds, compared with `now`); `None` when the response says
/// nothing. Callers pass the system's time of day: the reset is on the forge's clock, and the
/// wait it sets is a real wait on a real server, not part of a cycle's schedule.
pub(crate) fn rate_limit_wait(
    headers: &reqwest::header::HeaderMap,
    now: jiff::Timestamp,
) -> Option<u64> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    if let Some(seconds) = header("retry-after") {
        return Some(seconds);
    }
    let reset = header("x-ratelimit-reset").or_else(|| header("ratelimit-reset"))?;
    let now = u64::try_from(now.as_second()).unwrap_or(0);
    Some(reset.saturating_sub(now).max(1))
}

/// What one try of a request came to.
pub(crate) enum Attempt<T, E> {
    /// Answered, well or not: nothing to wait for.
    Done(Result<T, E>),
    /// The forge asked to wait, for `wait` seconds when it said how long.
    RateLimited { wait: Option<u64> },
}

/// Runs `attempt` until it is done, sleeping out each rate limit the forge reports, at most
/// [`MAX_RATE_LIMIT_RETRIES`] times and never for longer than [`MAX_RATE_LIMIT_WAIT`] at once.
/// Beyond that, `give_up(seconds)` is the error, with the wait the forge asked for.
pub(crate) async fn waiting_out_rate_limits<T, E, Fut>(
    forge: &str,
    action: &str,
    attempt: impl FnMut() -> Fut,
    give_up: impl FnOnce(u64) -> E,
) -> Result<T, E>
where
    Fut: Future<Output = Attempt<T, E>>,
{
    retrying(forge, action, attempt, give_up, tokio::time::sleep).await
}

/// [`waiting_out_rate_limits`] with the clock passed in, so tests need not wait.
async fn retrying<T, E, Fut, Slept>(
    forge: &str,
    action: &str,
    mut attempt: impl FnMut() -> Fut,
    give_up: impl FnOnce(u64) -> E,
    sleep: impl Fn(Duration) -> Slept,
) -> Result<T, E>
where
    Fut: Future<Output = Attempt<T, E>>,
    Slept: Future<Output = ()>,
{
    let mut retries = 0;
    loop {
        let wait = match attempt().await {
            Attempt::Done(result) => return result,
            Attempt::RateLimited { wait } => wait.unwrap_or(UNSTATED_WAIT),
        };
        retries += 1;
        if wait > MAX_RATE_LIMIT_WAIT || retries > MAX_RATE_LIMIT_RETRIES {
            return Err(give_up(wait));
        }
        tracing::warn!(forge, action, wait_seconds = wait, "rate limit; waiting");
        sleep(Duration::from_secs(wait)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn rate_limit_wait_reads_retry_after_then_reset() {
        let now = jiff::Timestamp::from_second(1_800_000_000).unwrap();
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(rate_limit_wait(&headers, now), None);
        headers.insert("x-ratelimit-reset", "1".parse().unwrap());
        assert_eq!(
            rate_limit_wait(&headers, now),
            Some(1),
            "a reset in the past waits a second"
        );
        headers.insert("x-ratelimit-reset", "1800000030".parse().unwrap());
        assert_eq!(rate_limit_wait(&headers, now), Some(30));
        headers.insert("retry-after", "7".parse().unwrap());
        assert_eq!(rate_limit_wait(&headers, now), Some(7));
    }

    /// Runs the loop against a forge that answers with the rate limits in `limits`, then with
    /// `Ok(tries)`; returns the result, how many tries were made and the waits slept.
    async fn run(limits: &[Option<u64>]) -> (Result<usize, String>, usize, Vec<u64>) {
        let tries = RefCell::new(0);
        let slept = RefCell::new(Vec::new());
        let attempt = || {
            let n = *tries.borrow();
            *tries.borrow_mut() += 1;
            std::future::ready(match limits.get(n) {
                Some(wait) => Attempt::RateLimited { wait: *wait },
                None => Attempt::Done(Ok(n + 1)),
            })
        };
        let give_up = |wait| format!("gave up, asked to wait {wait}s");
        let sleep = |d: Duration| {
            slept.borrow_mut().push(d.as_secs());
            std::future::ready(())
        };
        let result = retrying("GitHub", "list", attempt, give_up, sleep).await;
        (result, tries.into_inner(), slept.into_inner())
    }

    #[tokio::test]
    async fn each_rate_limit_is_slept_out_then_the_answer_returned() {
        let (result, tries, slept) = run(&[Some(2), None, Some(5)]).await;
        assert_eq!(result, Ok(4));
        assert_eq!(tries, 4);
        assert_eq!(slept, [2, UNSTATED_WAIT, 5], "an unstated wait is a minute");
        assert_eq!(run(&[]).await, (Ok(1), 1, vec![]), "no limit, no wait");
    }

    #[tokio::test]
    async fn a_wait_beyond_the_bound_gives_up_at_once_and_names_the_wait() {
        let too_long = MAX_RATE_LIMIT_WAIT + 1;
        let (result, tries, slept) = run(&[Some(too_long)]).await;
        assert_eq!(result, Err(format!("gave up, asked to wait {too_long}s")));
        assert_eq!((tries, slept), (1, vec![]));
    }

    #[tokio::test]
    async fn the_retries_are_bounded() {
        let limits = vec![Some(1); MAX_RATE_LIMIT_RETRIES as usize + 5];
        let (result, tries, slept) = run(&limits).await;
        assert_eq!(result, Err("gave up, asked to wait 1s".to_owned()));
        assert_eq!(tries, MAX_RATE_LIMIT_RETRIES as usize + 1);
        assert_eq!(slept.len(), MAX_RATE_LIMIT_RETRIES as usize);
    }
}
