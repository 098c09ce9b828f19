//! Engine configuration: limits and automatic behaviour, with documented defaults.

use std::time::Duration;

/// Settings of a [`Connection`](crate::Connection) and of the handshake parsers.
///
/// ```
/// let mut config = sockeye_proto::Config::default();
/// config.max_message_size = 1 << 20;
/// assert!(config.auto_pong);
/// ```
///
/// New settings may be added in any release (the struct is `#[non_exhaustive]`): start from
/// `Config::default()` and change fields; the `sockeye` crate's `Config::builder` sets them too.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Config {
    /// The largest message accepted, in bytes, after reassembly and decompression; a larger one is
    /// refused with close code 1009 as soon as its size is known, before the memory is spent.
    /// Default 64 MiB: large enough for the Autobahn|Testsuite's 16 MiB messages and for most file
    /// transfers, small enough that a handful of hostile peers cannot exhaust a server.
    pub max_message_size: usize,
    /// The largest single frame accepted, in bytes. Default 64 MiB (the message limit); lower it to
    /// bound the read buffer more tightly when peers fragment large messages.
    pub max_frame_size: usize,
    /// Answer every ping with a pong automatically (RFC 6455 §5.5.2). Default true; the ping is
    /// still delivered to the application.
    pub auto_pong: bool,
    /// Answer the peer's close frame at once (RFC 6455 §5.5.1), echoing its code. Default true.
    ///
    /// `false` leaves the answer to the application, as §5.5.1 allows ("an endpoint MAY delay
    /// sending a Close frame until its current message is sent"): the peer's close is delivered
    /// as `Message::Close` and the connection stays writable — the application may still send
    /// messages, then answers with [`Connection::close`](crate::Connection::close). A proxy
    /// needs this: the client's close is forwarded upstream, and what the upstream still sends
    /// reaches the client before the answer. If the application has not answered within
    /// [`close_timeout`](Self::close_timeout), the engine answers itself. Input after the peer's
    /// close is discarded unread (the peer may send nothing more, §5.5.1).
    pub auto_close_reply: bool,
    /// The largest HTTP head (request or response line plus headers) accepted during the opening
    /// handshake, in bytes. Default 16 KiB, like common HTTP servers.
    pub max_handshake_size: usize,
    /// The most headers accepted in a handshake request or response. Default 64.
    pub max_handshake_headers: usize,
    /// Frames whose payload is at least this many bytes are sent from the caller's buffer without
    /// a copy (server role only: a client must mask, which writes a copy). Default 16 KiB: below it
    /// copying into the batch buffer is cheaper than one more I/O vector.
    pub zero_copy_threshold: usize,
    /// How long the closing handshake may take (RFC 6455 §7.1.1): from the first close frame,
    /// sent or received, or from failing the connection, until the transport is closed. When it
    /// passes, the engine gives up on the peer and asks for the transport to be dropped
    /// ([`Transport::Abort`](crate::Transport::Abort)). Default 1 s: plenty on any working
    /// network; a dead peer costs no more than that.
    pub close_timeout: Duration,
    /// Keepalive: when nothing has arrived from the peer for at least this long (at most twice
    /// this long: the engine checks once per interval), send it a ping. Default 30 s: well inside
    /// the idle timeouts of common proxies and NATs (60 s and more), so a quiet connection stays
    /// open through them. `None` turns keepalive off.
    pub keepalive_interval: Option<Duration>,
    /// After a keepalive ping, how long to wait for anything from the peer before declaring it
    /// dead: the connection then ends with [`Error::Timeout`](crate::Error::Timeout)
    /// (`"keepalive"`) and the transport is dropped. Default 30 s, so a dead peer is found within
    /// about a minute.
    ///
    /// Any duration is accepted by the three settings above: one too long for an `Instant` to
    /// hold (`Duration::MAX`) means "never" (about 30 years ahead, as tokio's timers take it).
    pub keepalive_timeout: Duration,
    /// permessage-deflate (RFC 7692): `Some` to offer it (client) or accept it (server). Default on,
    /// with compression states borrowed from a pool shared by the connections made from clones of
    /// this config, kept while a connection is busy and given back when it waits for input, so
    /// idle connections hold no zlib state (see `DeflateConfig`).
    #[cfg(feature = "deflate")]
    pub deflate: Option<crate::extension::deflate::DeflateConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_message_size: 64 << 20,
            max_frame_size: 64 << 20,
            auto_pong: true,
            auto_close_reply: true,
            max_handshake_size: 16 << 10,
            max_handshake_headers: 64,
            zero_copy_threshold: 16 << 10,
            close_timeout: Duration::from_secs(1),
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(30),
            #[cfg(feature = "deflate")]
            deflate: Some(crate::extension::deflate::DeflateConfig::default()),
        }
    }
}
