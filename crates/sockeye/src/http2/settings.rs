//! The HTTP/2 settings both sides start a connection with: the flow-control windows and the
//! largest header list, from the [`Config`].

use crate::config::Config;

/// Flow-control window of each stream (RFC 9113 §6.9): how much a peer may send before we read.
/// 1 MiB, like the write high-water mark: a large message streams without waiting a round trip
/// per 64 KiB (the protocol's default), and the window is credit, not memory allocated up front.
const STREAM_WINDOW: u32 = 1 << 20;

/// The connection's window: room for several streams to be busy at once, so one stream whose
/// application stops reading cannot starve the others.
const CONNECTION_WINDOW: u32 = 16 << 20;

/// The largest header list taken: the handshake's size limit.
fn max_header_list_size(config: &Config) -> u32 {
    u32::try_from(config.protocol.max_handshake_size).unwrap_or(u32::MAX)
}

/// A server's settings: extended CONNECT (RFC 8441 §3) and the concurrency limit besides the
/// windows.
pub(super) fn server_builder(config: &Config) -> h2::server::Builder {
    let mut builder = h2::server::Builder::new();
    builder
        .enable_connect_protocol()
        .max_concurrent_streams(config.http2_max_concurrent_streams)
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(max_header_list_size(config));
    builder
}

/// A client's settings.
pub(super) fn client_builder(config: &Config) -> h2::client::Builder {
    let mut builder = h2::client::Builder::new();
    builder
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_header_list_size(max_header_list_size(config));
    builder
}
