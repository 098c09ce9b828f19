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
    /// TLS settings for `wss://` connections made with this config. Default `None`: the
    /// platform's root certificates, ALPN `http/1.1`
    /// (see [`ClientTlsOptions`](crate::tls::ClientTlsOptions) to trust other CAs or present a
    /// client certificate).
    #[cfg(feature = "tls")]
    pub tls_client: Option<std::sync::Arc<rustls::ClientConfig>>,
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
            #[cfg(feature = "tls")]
            tls_client: None,
        }
    }
}
