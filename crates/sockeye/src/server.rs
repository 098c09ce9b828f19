//! Accepting connections as a server (RFC 6455 §4.2).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::BytesMut;
use http::header::SEC_WEBSOCKET_EXTENSIONS;
use http::{HeaderValue, Request, Response};
use sockeye_proto::extension;
use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::handshake::{ClientHello, encode_response, parse_request, reject_response};
use sockeye_proto::{HandshakeError, Role};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, ToSocketAddrs};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::error::Error;
use crate::head::{HeadError, read_head, with_deadline, with_deadline_at};
use crate::stream::MaybeTlsStream;
use crate::websocket::WebSocket;

/// Accepts a WebSocket connection on a stream, with the default [`Config`], whatever the path,
/// origin or subprotocols.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Result<WebSocket<S>, Error> {
    accept_with(stream, &Config::default(), |_, response| Ok(response)).await
}

/// Accepts a connection, letting `decide` look at the request (path, query, `Origin`, headers,
/// offered subprotocols) and either return the `101` response, with headers added, or refuse with
/// any HTTP response (status and body are sent as given).
///
/// Requests that are not valid WebSocket upgrades are refused before `decide` is called, with
/// 400, 405, 426 (and `Sec-WebSocket-Version: 13`), 431 or 505.
///
/// ```no_run
/// use http::{Response, StatusCode};
/// # async fn run(stream: tokio::net::TcpStream) -> Result<(), sockeye::Error> {
/// let ws = sockeye::accept_with(stream, &sockeye::Config::default(), |request, mut response| {
///     if request.uri().path() != "/chat" {
///         let mut refusal = Response::new("no such endpoint\n".to_string());
///         *refusal.status_mut() = StatusCode::NOT_FOUND;
///         return Err(refusal);
///     }
///     response.headers_mut().insert("sec-websocket-protocol", "chat".parse().unwrap());
///     Ok(response)
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn accept_with<S, F>(stream: S, config: &Config, decide: F) -> Result<WebSocket<S>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let upgrade = accept_buffered(stream, BytesMut::with_capacity(1024), config, decide);
    with_deadline(config.handshake_timeout, "handshake", upgrade)
        .await
        .map(|(ws, _request)| ws)
}

/// [`accept_with`] on a stream whose first bytes were already read into `buf`, without a
/// deadline of its own (the caller's covers it); the request is handed back with the connection
/// (moved, not copied).
pub(crate) async fn accept_buffered<S, F>(
    mut stream: S,
    mut buf: BytesMut,
    config: &Config,
    decide: F,
) -> Result<(WebSocket<S>, Request<()>), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let limit = config.protocol.max_handshake_size;
    let read = read_head(&mut stream, &mut buf, limit, |buf| {
        parse_request(buf, &config.protocol)
    })
    .await;
    let (request, leftover) = match read {
        Ok(read) => read,
        Err(HeadError::Parse(e)) => return refuse(&mut stream, e).await,
        Err(HeadError::TooLarge) => {
            return refuse(&mut stream, HandshakeError::HeadTooLarge { limit }).await;
        }
        Err(HeadError::Eof) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the client closed the connection during the handshake",
            )
            .into());
        }
        Err(HeadError::Io(e)) => return Err(e.into()),
    };
    let hello = match ClientHello::from_request(&request) {
        Ok(hello) => hello,
        Err(e) => return refuse(&mut stream, e).await,
    };
    let (response, deflate) = negotiate(&hello, &config.protocol);
    match decide(&request, response) {
        Ok(response) => {
            let deflate = kept_deflate(deflate, &response);
            stream.write_all(&encode_response(&response)).await?;
            stream.flush().await?;
            let ws = WebSocket::from_upgraded(stream, Role::Server, config, leftover, deflate);
            Ok((ws, request))
        }
        Err(refusal) => {
            let status = refusal.status();
            send_and_close(&mut stream, &encode_response(&refusal)).await;
            let reason = status.canonical_reason().unwrap_or("").to_string();
            Err(HandshakeError::Rejected {
                status: status.as_u16(),
                reason,
            }
            .into())
        }
    }
}

/// The `101` response for a valid request, with the permessage-deflate answer in it if the
/// client offered something acceptable; the compression state travels beside it until the
/// response is final (see [`kept_deflate`]).
pub(crate) fn negotiate(
    hello: &ClientHello,
    config: &sockeye_proto::Config,
) -> (Response<()>, Option<(PerMessageDeflate, String)>) {
    let mut response = hello.accept();
    let deflate = extension::server_accept(config, &hello.extensions);
    if let Some((_, value)) = &deflate
        && let Ok(value) = HeaderValue::from_str(value)
    {
        response.headers_mut().insert(SEC_WEBSOCKET_EXTENSIONS, value);
    }
    (response, deflate)
}

/// The compression state to install, if the response about to be sent still carries our answer
/// (an application may have removed it to refuse compression for this client).
pub(crate) fn kept_deflate<B>(
    deflate: Option<(PerMessageDeflate, String)>,
    response: &Response<B>,
) -> Option<PerMessageDeflate> {
    let kept = response
        .headers()
        .get(SEC_WEBSOCKET_EXTENSIONS)
        .and_then(|v| v.to_str().ok());
    deflate
        .filter(|(_, value)| Some(value.as_str()) == kept)
        .map(|(state, _)| state)
}

async fn refuse<S: AsyncWrite + Unpin, T>(stream: &mut S, error: HandshakeError) -> Result<T, Error> {
    send_and_close(stream, &encode_response(&reject_response(&error))).await;
    Err(error.into())
}

/// Sends an HTTP refusal and closes; errors are ignored, as the connection is being dropped anyway.
async fn send_and_close<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
}

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
        H: Fn(WebSocket<MaybeTlsStream>, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.serve_requests(move |ws, _request, peer| handler(ws, peer))
            .await
    }

    /// [`serve`](Self::serve), with the handshake request (path, query, headers) handed to the
    /// handler too, for decisions made after the upgrade.
    pub async fn serve_requests<H, Fut>(self, handler: H) -> std::io::Result<()>
    where
        H: Fn(WebSocket<MaybeTlsStream>, Request<()>, SocketAddr) -> Fut + Clone + Send + 'static,
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
            crate::tls::server_config(&acceptor, config.accept_http2 && cfg!(feature = "http2"))
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
                let context = crate::http2::ServeContext {
                    config: Arc::clone(&config),
                    shutdown: shutdown.clone(),
                    permits: Arc::clone(&permits),
                    handler: handler.clone(),
                    peer,
                    stats: stats.clone(),
                };
                let config = Arc::clone(&config);
                let deadline = Instant::now() + config.handshake_timeout;
                tasks.spawn(Box::pin(async move {
                    let _slot = slot;
                    // Cleartext HTTP/2 is sent away with GOAWAY, HTTP/1.1 with 503 (read the
                    // request before answering, so the client sees the 503 rather than a reset).
                    let stream = MaybeTlsStream::Plain(stream);
                    let refusal =
                        sniff_then_upgrade(stream, &config, deadline, |_, _| Err(service_unavailable()));
                    #[cfg(feature = "http2")]
                    if let Ok(Established::Http2(stream, head, deadline)) = refusal.await {
                        Box::pin(crate::http2::serve_connection(
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
            tasks.spawn(Box::pin(async move {
                let _permit = permit;
                #[cfg(feature = "tls")]
                let handshake = establish(stream, peer, &config, &stats, tls);
                #[cfg(not(feature = "tls"))]
                let handshake = establish(stream, peer, &config, &stats);
                let (mut ws, request) = match Box::pin(handshake).await {
                    Established::WebSocket(ws, request) => (ws, request),
                    #[cfg(feature = "http2")]
                    Established::Http2(stream, head, deadline) => {
                        // The connection holds its permit (`_permit`); each of its WebSockets
                        // takes one more.
                        let context = crate::http2::ServeContext {
                            config,
                            shutdown,
                            permits,
                            handler,
                            peer,
                            stats,
                        };
                        // Boxed: keeps the HTTP/2 connection's state out of every connection's
                        // task.
                        Box::pin(crate::http2::serve_connection(
                            stream, head, true, deadline, context,
                        ))
                        .await;
                        return;
                    }
                    Established::Failed => return,
                };
                ws.set_shutdown(&shutdown);
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

/// How a new connection's handshake ended.
enum Established {
    /// An HTTP/1.1 upgrade: the WebSocket, and the request it came with.
    WebSocket(WebSocket<MaybeTlsStream>, Request<()>),
    /// The client speaks HTTP/2: the stream, what was read of it, and the handshake's deadline
    /// (the HTTP/2 connection preface must arrive by then).
    #[cfg(feature = "http2")]
    Http2(MaybeTlsStream, BytesMut, Instant),
    /// The handshake failed (counted in the stats and logged).
    Failed,
}

/// A new connection's handshakes: TCP_NODELAY, TLS, the HTTP/2 sniff, then the HTTP/1.1 upgrade,
/// all within one handshake timeout from the accept (each phase with a timeout of its own would
/// let a slow client take a multiple of it). Failures are counted in `stats`.
async fn establish(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    config: &Config,
    stats: &ServerStats,
    #[cfg(feature = "tls")] tls: Option<Arc<rustls::ServerConfig>>,
) -> Established {
    let deadline = Instant::now() + config.handshake_timeout;
    if let Err(e) = stream.set_nodelay(config.tcp_nodelay) {
        stats.handshake_failed(peer, "TCP_NODELAY", &e);
        return Established::Failed;
    }
    #[cfg(feature = "tls")]
    let stream = match tls {
        Some(tls_config) => {
            let handshake = async {
                let mut tls = Box::new(
                    crate::tls::ServerTlsStream::server(stream, tls_config)
                        .map_err(|e| Error::Tls(crate::tls::TlsError::from_rustls(&e)))?,
                );
                tls.handshake().await?;
                Ok::<_, Error>(tls)
            };
            match with_deadline_at(deadline, "handshake", handshake).await {
                Ok(tls) => MaybeTlsStream::ServerTls(tls),
                Err(e) => {
                    stats.handshake_failed(peer, "TLS handshake", &e);
                    return Established::Failed;
                }
            }
        }
        None => MaybeTlsStream::Plain(stream),
    };
    #[cfg(not(feature = "tls"))]
    let stream = MaybeTlsStream::Plain(stream);
    match sniff_then_upgrade(stream, config, deadline, |_, response| Ok(response)).await {
        Ok(established) => established,
        Err(e) => {
            stats.handshake_failed(peer, "WebSocket handshake", &e);
            Established::Failed
        }
    }
}

/// The HTTP/2 sniff, then the HTTP/1.1 upgrade answered by `decide`, both by `deadline`: an
/// HTTP/2 client is handed back with what was read of it, never `Established::Failed`.
async fn sniff_then_upgrade<F>(
    stream: MaybeTlsStream,
    config: &Config,
    deadline: Instant,
    decide: F,
) -> Result<Established, Error>
where
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let upgrade = async {
        #[allow(unused_mut)]
        let mut stream = stream;
        // Cleartext HTTP/2 starts with its preface, HTTP/1.1 with a request line: the first
        // bytes read tell them apart and go on to whichever protocol it is.
        #[allow(unused_mut)]
        let mut head = BytesMut::with_capacity(1024);
        #[cfg(feature = "http2")]
        if config.accept_http2 && speaks_http2(&mut stream, &mut head).await {
            return Ok(Established::Http2(stream, head, deadline));
        }
        let (ws, request) = accept_buffered(stream, head, config, decide).await?;
        Ok(Established::WebSocket(ws, request))
    };
    with_deadline_at(deadline, "handshake", upgrade).await
}

/// Whether a new connection speaks HTTP/2: ALPN `h2` over TLS; in cleartext, the connection
/// preface (RFC 9113 §3.4), read into `head` (the caller's deadline bounds the wait). What is
/// read stays in `head` for the protocol that goes on (an HTTP/1.1 request differs at its first
/// byte).
#[cfg(feature = "http2")]
async fn speaks_http2(stream: &mut MaybeTlsStream, head: &mut BytesMut) -> bool {
    match stream {
        MaybeTlsStream::Plain(tcp) => matches!(crate::http2::read_preface(tcp, head).await, Ok(true)),
        other => crate::http2::alpn_is_h2(other),
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

/// A [`Server`]'s counters, shared with it: take them with [`Server::stats`] before `serve`, and
/// read them while it runs (for a metrics endpoint, or tests). Each failure counted here is also
/// logged at debug level with the peer's address and the reason, through `tracing`.
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

    /// Connections turned away over [`Config::max_connections`] (answered `503`, sent GOAWAY, or
    /// closed), and HTTP/2 streams refused for the same reason.
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

/// The answer to a client beyond [`Config::max_connections`].
pub(crate) fn service_unavailable() -> Response<String> {
    let mut response = Response::new("server at its connection limit; retry later\n".to_string());
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

/// Starts a [`Server`]'s graceful shutdown: the server stops accepting, sends close 1001 (going
/// away) on every connection — at the connection's next receive or send — waits up to
/// [`Config::shutdown_timeout`] for the closing handshakes and handlers to finish, drops whatever
/// is left, and then [`Server::serve`] returns.
///
/// ```no_run
/// # async fn run() -> std::io::Result<()> {
/// let server = sockeye::Server::bind("127.0.0.1:8008", sockeye::Config::default()).await?;
/// let shutdown = server.shutdown_handle();
/// tokio::spawn(async move {
///     // In a real server: `tokio::signal::ctrl_c().await`.
///     tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
///     shutdown.shutdown();
/// });
/// server.serve(|_ws, _peer| async {}).await
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ShutdownHandle(ShutdownSignal);

impl ShutdownHandle {
    /// Begins the graceful shutdown. Calling it again does nothing.
    pub fn shutdown(&self) {
        self.0.cancel();
    }

    /// Whether the shutdown has begun.
    pub fn is_shutting_down(&self) -> bool {
        self.0.is_cancelled()
    }
}

/// A server's shutdown signal: the token wakes connections waiting for input; the flag is what
/// the send path checks — an atomic load, where the token's own check takes a lock (callgrind:
/// 37 instructions of the ~390 a pushed message cost).
#[derive(Debug, Clone, Default)]
pub(crate) struct ShutdownSignal {
    pub(crate) token: CancellationToken,
    pub(crate) flag: Arc<AtomicBool>,
}

impl ShutdownSignal {
    pub(crate) fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
        self.token.cancel();
    }

    pub(crate) fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// What one connection watches: the flag on its send path, the token while it waits.
    pub(crate) fn watch(&self) -> ShutdownWatch {
        ShutdownWatch {
            flag: Arc::clone(&self.flag),
            signal: Box::pin(self.token.clone().cancelled_owned()),
            registered: None,
        }
    }
}

/// A server's shutdown signal, as one connection sees it.
pub(crate) struct ShutdownWatch {
    flag: Arc<AtomicBool>,
    signal: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
    /// The waker `signal` was last polled with: it stays registered, so polling again with the
    /// same task's waker would only cost time (once per wait for input, on the busy path).
    registered: Option<std::task::Waker>,
}

impl ShutdownWatch {
    /// Whether the shutdown has begun (the send path: an atomic load).
    #[inline]
    pub(crate) fn begun(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Whether the shutdown has begun, waking the task when it does (while waiting for input).
    #[inline]
    pub(crate) fn poll_begun(&mut self, cx: &mut std::task::Context<'_>) -> bool {
        if self.begun() {
            return true;
        }
        if self.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return false;
        }
        self.registered = Some(cx.waker().clone());
        self.signal.as_mut().poll(cx).is_ready()
    }
}

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}
