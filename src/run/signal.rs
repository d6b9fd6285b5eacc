//! SIGTERM and SIGINT: the first one drains (no new target starts, the write in flight
//! finishes), the second one aborts.

use tokio_util::sync::CancellationToken;

/// Listens for signals in the background: the first cancels `drain`, the second cancels the
/// returned token, which means "stop now".
pub fn watch(drain: CancellationToken) -> std::io::Result<CancellationToken> {
    let abort = CancellationToken::new();
    let mut signals = Signals::new()?;
    let aborting = abort.clone();
    tokio::spawn(async move {
        let name = signals.next().await;
        tracing::info!(
            signal = name,
            "shutting down: finishing the write in flight; send it again to abort"
        );
        drain.cancel();
        let name = signals.next().await;
        tracing::warn!(signal = name, "aborting");
        aborting.cancel();
    });
    Ok(abort)
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
