//! One Ctrl-C listener for the whole process.
//!
//! A `tokio::signal::ctrl_c()` future made inside a loop only hears a signal while it is being
//! polled: a signal that arrives while the loop is busy elsewhere (reading a flood, sleeping in a
//! backoff, waiting for stdin) is lost, and the user presses Ctrl-C in vain. Here one task listens
//! from the start for SIGINT and SIGTERM and records the request in a token that every loop, wait
//! and backoff selects on; a request made before a loop looks is still seen.
//!
//! The first signal asks for a clean stop: clients close with 1001 (going away) and wait a moment
//! for the peer's reply ([`CLOSE_GRACE`]); servers run their graceful shutdown. A second signal
//! exits at once with 130.

use std::sync::OnceLock;
use std::time::Duration;

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::failure::Failure;
use crate::output::errln;

/// How long a client interrupted by Ctrl-C waits for the peer's close reply (and a server for
/// its clients') before exiting: a close handshake takes one round trip, under 250 ms on all but
/// satellite links; a reply stuck behind megabytes of a flood still in the socket is not worth
/// waiting for when the user asked to stop. Exits land well within a second.
pub(crate) const CLOSE_GRACE: Duration = Duration::from_millis(250);

fn token() -> &'static CancellationToken {
    static TOKEN: OnceLock<CancellationToken> = OnceLock::new();
    TOKEN.get_or_init(CancellationToken::new)
}

/// Starts the listener; call once, inside the runtime, before any work. The handlers are
/// installed before this returns (not when a task first runs), so a Ctrl-C pressed at any moment
/// after start-up is heard.
pub(crate) fn listen() {
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            errln!("ws: cannot listen for Ctrl-C: {e}");
            return;
        }
    };
    tokio::spawn(async move {
        signals.next().await;
        // The request first: nothing after it (a log line) may keep it from being made.
        token().cancel();
        tracing::info!("interrupted: closing");
        signals.next().await;
        exit_now();
    });
}

/// SIGINT (Ctrl-C) and SIGTERM (`kill`, service managers).
struct Signals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(Signals {
                interrupt: signal(SignalKind::interrupt())?,
                terminate: signal(SignalKind::terminate())?,
            })
        }
        #[cfg(not(unix))]
        {
            Ok(Signals {})
        }
    }

    async fn next(&mut self) {
        #[cfg(unix)]
        tokio::select! {
            _ = self.interrupt.recv() => {}
            _ = self.terminate.recv() => {}
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Resolves once a stop was requested (at once if it already was). Cancel-safe: make it once
/// outside a hot loop and select on `&mut` of it.
pub(crate) fn requested() -> WaitForCancellationFutureOwned {
    token().clone().cancelled_owned()
}

/// Whether a stop was requested (for loops doing blocking work between awaits).
pub(crate) fn is_requested() -> bool {
    token().is_cancelled()
}

/// Runs `work` unless a stop is requested first: then [`Failure::interrupted`]. For waits with
/// nothing to clean up: connecting, backoff sleeps, reading stdin.
pub(crate) async fn unless_interrupted<T>(work: impl Future<Output = T>) -> Result<T, Failure> {
    tokio::select! {
        biased;
        _ = requested() => Err(Failure::interrupted()),
        done = work => Ok(done),
    }
}

/// Runs a server future to its end; a stop request starts the server's graceful shutdown
/// (every connection closed with 1001, bounded by `Config::shutdown_timeout`), after which the
/// future ends. A server stopped so exits 0: stopping is how a server's work ends.
pub(crate) async fn serve_until_stopped(
    serving: impl Future<Output = std::io::Result<()>>,
    shutdown: sockeye::ShutdownHandle,
) -> Result<(), Failure> {
    tokio::spawn(async move {
        requested().await;
        shutdown.shutdown();
    });
    serving.await.map_err(Failure::from)
}

/// Requests a stop as a signal would (Ctrl-C read as a key by the line editor).
pub(crate) fn request() {
    if token().is_cancelled() {
        exit_now();
    }
    token().cancel();
}

/// The second Ctrl-C: the user does not want to wait for a clean close.
fn exit_now() -> ! {
    crate::terminal::restore_terminal();
    errln!("ws: interrupted again: exiting now");
    std::process::exit(130);
}
