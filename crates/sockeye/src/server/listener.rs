//! [`Server`]: a TCP listener that accepts WebSocket connections (HTTP/1.1 and HTTP/2, over TLS
//! or not), turns away clients beyond the connection limit, runs each connection's handshake
//! and handler in a task, and shuts down gracefully.

use std::net::SocketAddr;
use std::sync::Arc;

use http::Request;
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::establish::{Established, establish, first_bytes, sniff_then_upgrade};
use crate::config::Config;
use crate::head::deadline_in;
use crate::shutdown::{ShutdownHandle, ShutdownSignal};
use crate::stats::ServerStats;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;
use sockeye_proto::handshake::service_unavailable;

/// A TCP listener that accepts WebSocket connections and hands each to a handler in its own task.
///
/// ```no_run
/// use futures_util::{SinkExt, StreamExt};
/// # async fn run() -> std::io::Result<()> {
/// let server = sockeye::Server::bind("127.0.0.1:8008", sockeye::Config::default()).await?;
/// server
///     .serve(|mut ws, _peer| async move {
///         // Echo: `feed` queues; the queue is written when the input runs dry.
///         while let Some(Ok(message)) = ws.next().await {
///             if message.is_data() && ws.feed(message).await.is_err() {
///                 break;
///             }
///         }
///     })
///     .await
/// # }
/// ```
pub struct Server {
    listener: TcpListener,
    config: Arc<Config>,
    shutdown: ShutdownSignal,
    stats: ServerStats,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsAcceptor>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Server");
        d.field("listener", &self.listener).field("config", &self.config);
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

impl Server {
    /// Binds a listener (IPv4 or IPv6 address, or a host name).
    pub async fn bind(addr: impl ToSocketAddrs, config: Config) -> std::io::Result<Server> {
        Ok(Self::from_listener(TcpListener::bind(addr).await?, config))
    }

    /// Wraps a listener you bound yourself.
    pub fn from_listener(listener: TcpListener, config: Config) -> Server {
        Server {
            listener,
            config: Arc::new(config),
            shutdown: ShutdownSignal::default(),
            stats: ServerStats::default(),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Serves `wss://`: every connection negotiates TLS with `acceptor` first (within the
    /// handshake timeout). See [`ServerTls`](crate::tls::ServerTls), or bring your own acceptor.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, acceptor: crate::tls::TlsAcceptor) -> Server {
        self.tls = Some(acceptor);
        self
    }

    /// A handle that starts this server's graceful shutdown (see [`ShutdownHandle`]). Take it
    /// before calling [`serve`](Self::serve), which consumes the server.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle(self.shutdown.clone())
    }

    /// This server's counters (see [`ServerStats`]), readable while it serves. Take them before
    /// calling [`serve`](Self::serve), which consumes the server.
    pub fn stats(&self) -> ServerStats {
        self.stats.clone()
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections until shut down, runs the handshake for each in a new task, and calls
    /// `handler` with each established connection. Failed handshakes are answered and dropped,
    /// counted in [`ServerStats::handshake_failures`] and logged at debug level (`tracing`).
    /// Clients beyond [`Config::max_connections`] are turned away before any task or TLS
    /// handshake is spent on them: over cleartext HTTP/1.1 they are answered `503 Service
    /// Unavailable` (over cleartext HTTP/2, GOAWAY), over TLS closed unanswered (see
    /// [`Config::max_connections`]).
    ///
    /// Returns once a [`ShutdownHandle`] has been used and every connection has finished (or
    /// been dropped at [`Config::shutdown_timeout`]), or when the listener fails for good.
    pub async fn serve<H, Fut>(self, handler: H) -> std::io::Result<()>
    where
        H: Fn(WebSocket<TransportStream>, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.serve_requests(move |ws, _request, peer| handler(ws, peer))
            .await
    }

    /// [`serve`](Self::serve), with the handshake request (path, query, headers) handed to the
    /// handler too, for decisions made after the upgrade.
    pub async fn serve_requests<H, Fut>(self, handler: H) -> std::io::Result<()>
    where
        H: Fn(WebSocket<TransportStream>, Request<()>, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let Server {
            listener,
            config,
            shutdown,
            stats,
            #[cfg(feature = "tls")]
            tls,
        } = self;
        let permits = Arc::new(Semaphore::new(config.max_connections.min(Semaphore::MAX_PERMITS)));
        let refusals = Arc::new(Semaphore::new(MAX_REFUSALS));
        // Offer `h2` by ALPN exactly when HTTP/2 is served.
        #[cfg(feature = "tls")]
        let tls = tls.map(|acceptor| {
            crate::tls::server::server_config(&acceptor, config.accept_http2 && cfg!(feature = "http2"))
        });
        let mut tasks = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                biased;
                _ = shutdown.token.cancelled() => break,
                // Reap finished connection tasks as we go, so the set stays as large as the
                // number of live connections.
                Some(_) = tasks.join_next(), if !tasks.is_empty() => continue,
                accepted = listener.accept() => accepted,
            };
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                // Out of file descriptors or a connection reset before accept: keep serving.
                Err(e) if is_transient_accept_error(&e) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
                Err(e) => {
                    shutdown.cancel();
                    finish(tasks, config.shutdown_timeout).await;
                    return Err(e);
                }
            };
            // Taken here, before any task or TLS handshake is spent on the connection, and held
            // by the connection's task until it ends; none left means over the limit.
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                stats.refused_one();
                #[cfg(feature = "tls")]
                if tls.is_some() {
                    // A 503 (or a GOAWAY) would cost a TLS handshake first, the very work the
                    // limit is there to bound: the connection is closed unanswered.
                    tracing::debug!(%peer, "over max_connections: closed before the TLS handshake");
                    continue;
                }
                // In cleartext the refusal is cheap; a few are answered at a time, the rest closed.
                let Ok(slot) = Arc::clone(&refusals).try_acquire_owned() else {
                    tracing::debug!(%peer, "over max_connections, and refusing too many: closed");
                    continue;
                };
                tracing::debug!(%peer, "over max_connections: refused");
                #[cfg(feature = "http2")]
                let context = crate::http2::serve::ServeContext {
                    config: Arc::clone(&config),
                    shutdown: shutdown.clone(),
                    permits: Arc::clone(&permits),
                    handler: handler.clone(),
                    peer,
                    stats: stats.clone(),
                };
                let config = Arc::clone(&config);
                let deadline = deadline_in(config.handshake_timeout);
                tasks.spawn(Box::pin(async move {
                    let _slot = slot;
                    // Cleartext HTTP/2 is sent away with GOAWAY, HTTP/1.1 with 503 (read the
                    // request before answering, so the client sees the 503 rather than a reset).
                    let stream = TransportStream::Plain(stream);
                    let refusal =
                        sniff_then_upgrade(stream, &config, deadline, |_, _| Err(service_unavailable()));
                    #[cfg(feature = "http2")]
                    if let Ok(Established::Http2(stream, head, deadline)) = refusal.await {
                        Box::pin(crate::http2::serve::serve_connection(
                            stream, head, false, deadline, context,
                        ))
                        .await;
                    }
                    #[cfg(not(feature = "http2"))]
                    let _ = refusal.await;
                }));
                continue;
            };
            let config = Arc::clone(&config);
            let handler = handler.clone();
            let shutdown = shutdown.clone();
            let stats = stats.clone();
            #[cfg(feature = "http2")]
            let permits = Arc::clone(&permits);
            #[cfg(feature = "tls")]
            let tls = tls.clone();
            // Boxed: tokio moves a task's future several times (spawn, completion), and boxed,
            // each move is a pointer's worth (callgrind, server side: 137,479 instructions per
            // HTTP/1.1 connection unboxed once the HTTP/2 branch made it 8.5 KiB, 54,163 boxed).
            // What the task keeps while the handler runs is small: the handshake (TLS, the
            // HTTP/2 sniff, the upgrade: ~9 KiB of future state) runs in a box of its own, freed
            // once it is done, instead of sizing this future, which an idle connection holds for
            // its whole life (massif, 2,000 idle ws:// connections: 9,010 bytes each, before).
            let deadline = deadline_in(config.handshake_timeout);
            tasks.spawn(Box::pin(async move {
                let _permit = permit;
                // Boxed, as the handshake below: its timer would otherwise stay in this
                // future, which lives as long as the connection.
                if !Box::pin(first_bytes(&stream, peer, deadline, &stats)).await {
                    return;
                }
                #[cfg(feature = "tls")]
                let handshake = establish(stream, peer, deadline, &config, &stats, tls);
                #[cfg(not(feature = "tls"))]
                let handshake = establish(stream, peer, deadline, &config, &stats);
                let (mut ws, request) = match Box::pin(handshake).await {
                    Established::WebSocket(ws, request) => (ws, request),
                    #[cfg(feature = "http2")]
                    Established::Http2(stream, head, deadline) => {
                        // The connection holds its permit (`_permit`); each of its WebSockets
                        // takes one more.
                        let context = crate::http2::serve::ServeContext {
                            config,
                            shutdown,
                            permits,
                            handler,
                            peer,
                            stats,
                        };
                        // Boxed: keeps the HTTP/2 connection's state out of every connection's
                        // task.
                        Box::pin(crate::http2::serve::serve_connection(
                            stream, head, true, deadline, context,
                        ))
                        .await;
                        return;
                    }
                    Established::Failed => return,
                };
                ws.set_close_signal(shutdown.watch());
                handler(ws, request, peer).await;
            }));
        }
        // Graceful shutdown: stop accepting (drop the listener), let every connection close with
        // 1001, and wait for them up to the deadline.
        drop(listener);
        finish(tasks, config.shutdown_timeout).await;
        Ok(())
    }
}

/// Waits for connection tasks to end, up to `limit`, then aborts the rest (dropping their sockets).
async fn finish(mut tasks: JoinSet<()>, limit: std::time::Duration) {
    let all_done = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(limit, all_done).await.is_err() {
        tasks.shutdown().await;
    }
}

/// The most clients over [`Config::max_connections`] answered at once (over cleartext; each
/// refusal lasts until the client's request arrives, within the handshake timeout); beyond them,
/// clients over the limit are closed unanswered. A courtesy to well-behaved clients that costs a
/// flood little.
const MAX_REFUSALS: usize = 64;

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}
