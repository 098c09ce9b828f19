//! Configuration of the tokio layer, with the engine's settings inside.

use std::time::Duration;

/// Settings for a connection or a server. Every field has a documented default.
///
/// ```
/// use std::time::Duration;
/// let config = sockeye::Config {
///     close_timeout: Duration::from_millis(500),
///     protocol: sockeye::ProtocolConfig { max_message_size: 1 << 20, ..Default::default() },
///     ..Default::default()
/// };
/// assert!(config.tcp_nodelay);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    /// Limits and behaviour of the protocol engine (message size, auto-pong, handshake size).
    pub protocol: sockeye_proto::Config,
    /// Disable Nagle's algorithm on TCP sockets this crate opens or accepts. Default true: a
    /// WebSocket message is usually latency-sensitive, and writes are already batched per flush.
    pub tcp_nodelay: bool,
    /// How long to wait, after sending a close frame, for the peer's close frame and (as a client)
    /// for the server to close TCP (RFC 6455 §7.1.1). Default 1 s: plenty on any working network;
    /// a dead peer costs no more than that.
    pub close_timeout: Duration,
    /// The longest the opening handshake may take, from TCP connect/accept to the 101 response.
    /// Default 10 s; a client that dribbles its request (slowloris) is cut off then.
    pub handshake_timeout: Duration,
    /// Outgoing bytes queued before `send`/`poll_ready` wait for the socket to drain them. Default
    /// 1 MiB: enough to batch many small messages into one write, small enough to push back on
    /// the sender when the peer reads slowly.
    pub write_buffer_high_water: usize,
    /// How much to read from the socket at once. Default 64 KiB (one loopback TCP segment burst).
    pub read_chunk_size: usize,
    /// When nothing has arrived from the peer for this long, send it a ping. Default 30 s: well
    /// inside the idle timeouts of common proxies and NATs (60 s and more), so a quiet connection
    /// stays open through them, and a ping every 30 s costs nothing. `None` turns keepalive off.
    /// Keepalive runs while the connection is being received from (`recv`, the `Stream`).
    pub keepalive_interval: Option<Duration>,
    /// After a keepalive ping, how long to wait for anything from the peer before declaring it
    /// dead: the stream then ends with [`Error::Timeout("keepalive")`](crate::Error::Timeout) and
    /// the socket is closed. Default 30 s, so a dead peer is found within about a minute.
    pub keepalive_timeout: Duration,
    /// The most connections a [`Server`](crate::Server) handles at once, handshakes included.
    /// Above it, new clients are turned away before any task or TLS handshake is spent on them:
    /// in cleartext they are answered `503 Service Unavailable` (with `Retry-After`; GOAWAY over
    /// HTTP/2) and closed, instead of being left to hang — up to 64 at a time, the rest closed
    /// unanswered —; over TLS they are closed unanswered, since answering would cost the TLS
    /// handshake the limit is there to save. Default 50,000: an idle Sockeye connection costs
    /// about 10 KiB plus the kernel's socket buffers, so the default bounds a flood to well under
    /// a few GiB, and it stays below the file descriptor limits servers are usually given.
    pub max_connections: usize,
    /// How long a [`Server`](crate::Server)'s graceful shutdown waits for connections to finish
    /// their closing handshakes (close code 1001) before dropping them. Default 5 s.
    pub shutdown_timeout: Duration,
    /// TLS settings for `wss://` connections made with this config. Default `None`: the
    /// platform's root certificates, ALPN `http/1.1`
    /// (see [`ClientTlsOptions`](crate::tls::ClientTlsOptions) to trust other CAs or present a
    /// client certificate).
    #[cfg(feature = "tls")]
    pub tls_client: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// Whether a [`Server`](crate::Server) also accepts WebSockets over HTTP/2 (RFC 8441) on the
    /// same port: over TLS when the client picks `h2` by ALPN (the server offers `h2` and
    /// `http/1.1`), in cleartext when it starts with the HTTP/2 preface (prior knowledge).
    /// Default true, as browsers open `wss://` sockets on the page's HTTP/2 connection when the
    /// server allows it; false serves HTTP/1.1 only. Needs the `http2` feature (default).
    pub accept_http2: bool,
    /// The most WebSockets one HTTP/2 connection may carry at once, announced to the client as
    /// `SETTINGS_MAX_CONCURRENT_STREAMS` (streams beyond it are refused). Default 128, as in
    /// common HTTP/2 servers; each stream also counts against `max_connections`.
    pub http2_max_concurrent_streams: u32,
    /// Which HTTP version a client opens WebSockets over. Default [`HttpVersion::Http1`].
    pub http_version: HttpVersion,
    /// The proxy clients connect through. Default
    /// [`ProxyConfig::Environment`](crate::proxy::ProxyConfig): `https_proxy` / `HTTPS_PROXY` for
    /// `wss://`, `http_proxy` (never `HTTP_PROXY`) for `ws://`, then `all_proxy` / `ALL_PROXY`,
    /// minus `no_proxy` / `NO_PROXY`: as curl reads them, lower case first (see [`proxy`](crate::proxy)).
    pub proxy: crate::proxy::ProxyConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            protocol: sockeye_proto::Config::default(),
            tcp_nodelay: true,
            close_timeout: Duration::from_secs(1),
            handshake_timeout: Duration::from_secs(10),
            write_buffer_high_water: 1 << 20,
            read_chunk_size: 64 << 10,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(30),
            max_connections: 50_000,
            shutdown_timeout: Duration::from_secs(5),
            #[cfg(feature = "tls")]
            tls_client: None,
            accept_http2: true,
            http2_max_concurrent_streams: 128,
            http_version: HttpVersion::Http1,
            proxy: crate::proxy::ProxyConfig::Environment,
        }
    }
}

/// Which HTTP version a client opens its WebSockets over (see [`Config::http_version`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum HttpVersion {
    /// The HTTP/1.1 upgrade of RFC 6455 §4, one TCP (and TLS) connection per WebSocket. The
    /// default: every WebSocket server speaks it.
    #[default]
    Http1,
    /// HTTP/2 (RFC 8441) where the server offers it, HTTP/1.1 otherwise: `wss://` offers `h2` and
    /// `http/1.1` by ALPN and takes what the server picks; `ws://` stays on HTTP/1.1, since
    /// cleartext has no negotiation. WebSockets to one origin share one HTTP/2 connection.
    Http2Preferred,
    /// HTTP/2 only: `wss://` requires ALPN `h2`, `ws://` uses h2c with prior knowledge; a server
    /// without RFC 8441 support is an error ([`HandshakeError::Http2Unavailable`](crate::HandshakeError)).
    /// WebSockets to one origin share one HTTP/2 connection.
    Http2Only,
}
