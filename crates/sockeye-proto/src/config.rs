//! Engine configuration: limits and automatic behaviour, with documented defaults.

/// Settings of a [`Connection`](crate::Connection) and of the handshake parsers.
///
/// ```
/// let config = sockeye_proto::Config { max_message_size: 1 << 20, ..Default::default() };
/// assert!(config.auto_pong);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
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
    /// The largest HTTP head (request or response line plus headers) accepted during the opening
    /// handshake, in bytes. Default 16 KiB, like common HTTP servers.
    pub max_handshake_size: usize,
    /// The most headers accepted in a handshake request or response. Default 64.
    pub max_handshake_headers: usize,
    /// Frames whose payload is at least this many bytes are sent from the caller's buffer without
    /// a copy (server role only: a client must mask, which writes a copy). Default 16 KiB: below it
    /// copying into the batch buffer is cheaper than one more I/O vector.
    pub zero_copy_threshold: usize,
    /// permessage-deflate (RFC 7692): `Some` to offer it (client) or accept it (server). Default on:
    /// state is allocated only once a compressed message flows, so idle connections pay nothing.
    #[cfg(feature = "deflate")]
    pub deflate: Option<crate::extension::deflate::DeflateConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_message_size: 64 << 20,
            max_frame_size: 64 << 20,
            auto_pong: true,
            max_handshake_size: 16 << 10,
            max_handshake_headers: 64,
            zero_copy_threshold: 16 << 10,
            #[cfg(feature = "deflate")]
            deflate: Some(crate::extension::deflate::DeflateConfig::default()),
        }
    }
}
