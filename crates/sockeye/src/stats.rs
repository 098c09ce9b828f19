//! [`ServerStats`]: a server's counters of failed handshakes and refusals.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A [`Server`](crate::Server)'s counters, shared with it: take them with
/// [`Server::stats`](crate::Server::stats) before `serve`, and read them while it runs (for a
/// metrics endpoint, or tests). Each failure counted here is also logged at debug level with the
/// peer's address and the reason, through `tracing`.
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let server = sockeye::Server::bind("127.0.0.1:8008", sockeye::Config::default()).await?;
/// let stats = server.stats();
/// tokio::spawn(server.serve(|_ws, _peer| async {}));
/// println!("{} failed handshakes", stats.handshake_failures());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct ServerStats(Arc<Counters>);

#[derive(Debug, Default)]
struct Counters {
    handshake_failures: AtomicU64,
    refused: AtomicU64,
}

impl ServerStats {
    /// Connections (and HTTP/2 streams) dropped because their handshake failed: the TLS handshake
    /// (a client that does not trust the certificate, one that speaks no TLS, a timeout), the
    /// HTTP/1.1 upgrade (a request that is not a valid WebSocket upgrade, answered with its 4xx; a
    /// client that closes or stalls before its request ends), the HTTP/2 connection preface, or an
    /// HTTP/2 stream that is not a valid extended CONNECT. Refusals for the connection limit are
    /// counted in [`refused`](Self::refused) instead.
    pub fn handshake_failures(&self) -> u64 {
        self.0.handshake_failures.load(Ordering::Relaxed)
    }

    /// Connections turned away over
    /// [`Config::max_connections`](crate::Config::max_connections) (answered `503`, sent
    /// GOAWAY, or closed), and HTTP/2 streams refused for the same reason.
    pub fn refused(&self) -> u64 {
        self.0.refused.load(Ordering::Relaxed)
    }

    /// Counts and logs a failed handshake (`stage`: what was being done).
    pub(crate) fn handshake_failed(
        &self,
        peer: SocketAddr,
        stage: &'static str,
        error: &dyn std::fmt::Display,
    ) {
        self.0.handshake_failures.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(%peer, stage, %error, "handshake failed");
    }

    pub(crate) fn refused_one(&self) {
        self.0.refused.fetch_add(1, Ordering::Relaxed);
    }
}
