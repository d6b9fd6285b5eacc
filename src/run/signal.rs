//! How the service is asked to stop: the first request drains (no new target starts, the write
//! in flight finishes), the second aborts. SIGTERM and SIGINT are the binary's way of asking
//! ([`watch`]); a test asks through the same [`Shutdown`] handle, in-process.

use tokio_util::sync::CancellationToken;

/// The shutdown signal [`super::serve`] takes: cloned by whoever may ask for the stop.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    drain: CancellationToken,
    abort: CancellationToken,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Asks the service to finish the write in flight and stop; `signal` names who asked.
    pub fn drain(&self, signal: &str) {
        tracing::info!(
            signal,
            "shutting down: finishing the write in flight; send it again to abort"
        );
        self.drain.cancel();
    }

    /// Asks the service to stop now, whatever is in flight.
    pub fn abort(&self, signal: &str) {
        tracing::warn!(signal, "aborting");
        self.abort.cancel();
    }

    /// Cancelled once a drain has been asked for.
    pub(crate) fn draining(&self) -> CancellationToken {
        self.drain.clone()
    }

    /// Cancelled once an abort has been asked for.
    pub(crate) fn aborting(&self) -> CancellationToken {
        self.abort.clone()
    }
}

/// Listens for signals in the background: the first drains `shutdown`, the second aborts it.
pub fn watch(shutdown: Shutdown) -> std::io::Result<()> {
    let mut signals = Signals::new()?;
    tokio::spawn(async move {
        shutdown.drain(signals.next().await);
        shutdown.abort(signals.next().await);
    });
    Ok(())
}

#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn new() -> std::io::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn new() -> std::io::Result<Self> {
        Ok(Signals)
    }

    async fn next(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

#[cfg(all(test, unix))]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Sends `SIGTERM` to this test process, whose handler [`watch`] installed.
    fn sigterm() {
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &std::process::id().to_string()])
            .status()
            .unwrap();
        assert!(sent.success());
    }

    #[tokio::test]
    async fn the_first_sigterm_drains_and_the_second_aborts() {
        let shutdown = Shutdown::new();
        watch(shutdown.clone()).unwrap();
        let (drain, abort) = (shutdown.draining(), shutdown.aborting());
        sigterm();
        tokio::time::timeout(Duration::from_secs(10), drain.cancelled())
            .await
            .expect("the first SIGTERM drains");
        assert!(!abort.is_cancelled(), "the first SIGTERM aborted");
        sigterm();
        tokio::time::timeout(Duration::from_secs(10), abort.cancelled())
            .await
            .expect("the second SIGTERM aborts");
    }
}
