//! Configuration of the tokio layer, with the engine's settings inside.

use std::time::Duration;

/// Settings for a connection or a server. Every field has a documented default.
///
/// Build one with [`Config::builder`]; fields can be read, and changed on a value, but new ones
/// may be added in any release (the struct is `#[non_exhaustive]`), so it cannot be written as
/// a literal.
///
/// ```
/// use std::time::Duration;
/// let config = sockeye::Config::builder()
///     .max_message_size(1 << 20)
///     .close_timeout(Duration::from_millis(500))
///     .keepalive(None)
///     .build();
/// assert!(config.tcp_nodelay);
/// assert_eq!(config.protocol.max_message_size, 1 << 20);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// Limits and behaviour of the protocol engine: message and frame size, auto-pong, handshake
    /// size, compression, the close timeout and keepalive (the engine owns every deadline). Set
    /// through the builder.
    pub protocol: sockeye_proto::Config,
    /// Disable Nagle's algorithm on TCP sockets this crate opens or accepts. Default true: a
    /// WebSocket message is usually latency-sensitive, and writes are already batched per flush.
    pub tcp_nodelay: bool,
    /// The longest the opening handshake may take, from TCP connect/accept to the 101 response.
    /// Default 10 s; a client that dribbles its request (slowloris) is cut off then. Like every
    /// duration here and in the engine's settings, any value is valid: one too long for an
    /// `Instant` to hold (`Duration::MAX`) means never (about 30 years ahead).
    pub handshake_timeout: Duration,
    /// Outgoing bytes queued before `send`/`poll_ready` wait for the socket to drain them. Default
    /// 1 MiB: enough to batch many small messages into one write, small enough to push back on
    /// the sender when the peer reads slowly.
    pub write_buffer_high_water: usize,
    /// How much to read from the socket at once. Default 64 KiB (one loopback TCP segment burst).
    /// While reads keep filling the buffer (a large transfer), each read asks for twice as much,
    /// up to 4× this; the size returns to this once the connection waits for input. Messages
    /// received in pieces ([`WebSocket::recv_chunk`](crate::WebSocket::recv_chunk)) arrive at
    /// most one read at a time.
    ///
    /// Memory: a connection waiting for input holds no read buffer. Its buffer goes to a pool of
    /// its thread for the next connection that reads, except for up to 4 connections per thread
    /// that keep theirs while they wait, so that a connection answering one message at a time
    /// does not hand its buffer back and forth. Such a keeper gives its buffer up at its next
    /// keepalive deadline and keeps one again only after its next data message (with keepalive
    /// off, it keeps it until it closes). A thread thus holds at most 8 idle buffers of a few
    /// reads' size; a larger one (grown for a large message) is freed when the connection waits.
    pub read_chunk_size: usize,
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
    pub proxy: crate::proxy::config::ProxyConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            protocol: sockeye_proto::Config::default(),
            tcp_nodelay: true,
            handshake_timeout: Duration::from_secs(10),
            write_buffer_high_water: 1 << 20,
            read_chunk_size: 64 << 10,
            max_connections: 50_000,
            shutdown_timeout: Duration::from_secs(5),
            #[cfg(feature = "tls")]
            tls_client: None,
            accept_http2: true,
            http2_max_concurrent_streams: 128,
            http_version: HttpVersion::Http1,
            proxy: crate::proxy::config::ProxyConfig::Environment,
        }
    }
}

impl Config {
    /// A builder starting from the defaults.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder {
            config: Config::default(),
        }
    }

    /// A builder starting from this configuration.
    pub fn to_builder(&self) -> ConfigBuilder {
        ConfigBuilder { config: self.clone() }
    }
}

/// Builds a [`Config`]; every setting not set keeps its documented default. Limits that can be
/// lifted take `None` for "no limit".
#[derive(Debug, Clone)]
#[must_use]
pub struct ConfigBuilder {
    config: Config,
}

impl ConfigBuilder {
    /// The configuration.
    pub fn build(self) -> Config {
        self.config
    }

    /// The largest message accepted, after reassembly and decompression (default 64 MiB; see
    /// [`ProtocolConfig::max_message_size`](crate::ProtocolConfig::max_message_size)). `None`:
    /// no limit besides memory — only for trusted peers.
    pub fn max_message_size(mut self, limit: impl Into<Option<usize>>) -> Self {
        self.config.protocol.max_message_size = limit.into().unwrap_or(usize::MAX);
        self
    }

    /// The largest frame accepted (default 64 MiB). `None`: no limit besides the message's.
    pub fn max_frame_size(mut self, limit: impl Into<Option<usize>>) -> Self {
        self.config.protocol.max_frame_size = limit.into().unwrap_or(usize::MAX);
        self
    }

    /// Whether pings are answered automatically (default true).
    pub fn auto_pong(mut self, on: bool) -> Self {
        self.config.protocol.auto_pong = on;
        self
    }

    /// Answer the peer's close frame at once (default), or leave the answer to the
    /// application, which may still send messages first (a proxy relaying its upstream's last
    /// messages); see [`ProtocolConfig::auto_close_reply`](crate::ProtocolConfig::auto_close_reply).
    pub fn auto_close_reply(mut self, on: bool) -> Self {
        self.config.protocol.auto_close_reply = on;
        self
    }

    /// The largest HTTP head accepted in the opening handshake (default 16 KiB).
    pub fn max_handshake_size(mut self, bytes: usize) -> Self {
        self.config.protocol.max_handshake_size = bytes;
        self
    }

    /// The most headers accepted in the opening handshake (default 64).
    pub fn max_handshake_headers(mut self, count: usize) -> Self {
        self.config.protocol.max_handshake_headers = count;
        self
    }

    /// permessage-deflate settings, `None` to neither offer nor accept it (default on, see
    /// [`DeflateConfig`](crate::proto::extension::deflate::DeflateConfig)).
    #[cfg(feature = "deflate")]
    pub fn deflate(mut self, deflate: Option<sockeye_proto::extension::deflate::DeflateConfig>) -> Self {
        self.config.protocol.deflate = deflate;
        self
    }

    /// How long the closing handshake may take, until the transport is closed (default 1 s).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.config.protocol.close_timeout = timeout;
        self
    }

    /// Keepalive: `Some(interval)` pings a peer that has been quiet that long (default 30 s);
    /// `None` turns keepalive off.
    pub fn keepalive(mut self, interval: Option<Duration>) -> Self {
        self.config.protocol.keepalive_interval = interval;
        self
    }

    /// How long a keepalive ping may go unanswered before the peer is declared dead (default 30 s).
    pub fn keepalive_timeout(mut self, timeout: Duration) -> Self {
        self.config.protocol.keepalive_timeout = timeout;
        self
    }

    /// The whole engine configuration at once.
    pub fn protocol(mut self, protocol: sockeye_proto::Config) -> Self {
        self.config.protocol = protocol;
        self
    }

    /// Whether to disable Nagle's algorithm (default true).
    pub fn tcp_nodelay(mut self, on: bool) -> Self {
        self.config.tcp_nodelay = on;
        self
    }

    /// The longest the opening handshake may take (default 10 s).
    pub fn handshake_timeout(mut self, timeout: Duration) -> Self {
        self.config.handshake_timeout = timeout;
        self
    }

    /// Outgoing bytes queued before sends wait (default 1 MiB).
    pub fn write_buffer_high_water(mut self, bytes: usize) -> Self {
        self.config.write_buffer_high_water = bytes;
        self
    }

    /// How much to read from the socket at once (default 64 KiB).
    pub fn read_chunk_size(mut self, bytes: usize) -> Self {
        self.config.read_chunk_size = bytes;
        self
    }

    /// The most connections a server handles at once (default 50,000). `None`: no limit.
    pub fn max_connections(mut self, limit: impl Into<Option<usize>>) -> Self {
        self.config.max_connections = limit.into().unwrap_or(usize::MAX);
        self
    }

    /// How long a server's graceful shutdown waits for closing handshakes (default 5 s).
    pub fn shutdown_timeout(mut self, timeout: Duration) -> Self {
        self.config.shutdown_timeout = timeout;
        self
    }

    /// The TLS client configuration for `wss://` (default: the platform's roots).
    #[cfg(feature = "tls")]
    pub fn tls_client(mut self, tls: impl Into<Option<std::sync::Arc<rustls::ClientConfig>>>) -> Self {
        self.config.tls_client = tls.into();
        self
    }

    /// Whether a server also accepts WebSockets over HTTP/2 (default true).
    pub fn accept_http2(mut self, on: bool) -> Self {
        self.config.accept_http2 = on;
        self
    }

    /// The most WebSockets on one HTTP/2 connection (default 128).
    pub fn http2_max_concurrent_streams(mut self, streams: u32) -> Self {
        self.config.http2_max_concurrent_streams = streams;
        self
    }

    /// Which HTTP version clients use (default HTTP/1.1).
    pub fn http_version(mut self, version: HttpVersion) -> Self {
        self.config.http_version = version;
        self
    }

    /// The proxy clients connect through (default: from the environment).
    pub fn proxy(mut self, proxy: crate::proxy::config::ProxyConfig) -> Self {
        self.config.proxy = proxy;
        self
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
