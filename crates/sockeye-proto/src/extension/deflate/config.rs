//! [`DeflateConfig`]: what an endpoint asks for or accepts (RFC 7692 §7.1), how it compresses,
//! and where its connections borrow their compression states, with its builder.

use std::time::Duration;

use super::pool::DeflatePool;

/// What this endpoint asks for, or accepts, when negotiating permessage-deflate.
///
/// The names follow RFC 7692 §7.1: "server" parameters govern what the server compresses,
/// "client" parameters what the client compresses.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeflateConfig {
    /// zlib compression level, 0–9. Default 1: on WebSocket-sized JSON it compresses about 5×
    /// faster than level 6 for about 35% more bytes (see `bench/deflate-backends`).
    pub level: u32,
    /// The largest LZ77 window (8–15 bits) the server may compress with. A client asks for it; a
    /// server compresses with at most this many bits. Default 15.
    pub server_max_window_bits: u8,
    /// The largest window the client may compress with. A client offers it (valueless when 15, so
    /// the server may lower it); a server asks clients that allow it to use at most this. Default 15.
    pub client_max_window_bits: u8,
    /// Ask for (client) or impose (server) a fresh compression context for every server message:
    /// less memory and CPU per message for the server, a worse ratio. Default false.
    pub server_no_context_takeover: bool,
    /// The same for client messages. Default false.
    pub client_no_context_takeover: bool,
    /// Messages shorter than this are sent uncompressed: compressing a few bytes costs time and
    /// often makes them longer. Default 32 bytes.
    pub min_compress_size: usize,
    /// Where connections borrow their compression states: at their first compressed message
    /// after a wait for input, kept while busy, given back when they wait again (see the
    /// [module docs](super) for the rule and the trade-offs). Connections made from clones of one
    /// config share it. Default `Some(DeflatePool::default())`: idle connections hold no zlib
    /// state. `None`: each connection keeps its own (~344 KiB with context takeover).
    pub pool: Option<DeflatePool>,
    /// Pooled: how long a connection waiting for input keeps the states it borrowed before it
    /// gives them back, when its I/O layer runs the engine's timer through the wait (the tokio
    /// layer does, at every wait for input; see
    /// [`Connection::linger_deflate`](crate::Connection::linger_deflate)). The states go back
    /// at the first look at the timer after the linger: with the tokio layer, the next poll of
    /// the receiving side, which its timer wakes; a handler that stops polling it after a wait
    /// (a `select!` whose other branch then waits a long time without sending) holds them
    /// until it polls again or sends (a send that empties the queue gives them back). Set it
    /// to zero for such handlers. A connection whose next
    /// message comes within it pays no pool round trip, reset or priming: on uWebSockets' load
    /// test (100 connections, one compressed message each in flight, so every connection waits
    /// for input after each) the server spent 14,600 instructions per message without it, 5,800
    /// with it (callgrind), about what dedicated states cost (issue 31). The cost: states stay out of the pool for up to twice
    /// this after a connection's last input, so about (connections with input per second ×
    /// linger) states are held (~344 KiB each with context takeover). A connection lingers from
    /// its second busy spell on: its first wait gives them back at once (a burst of new
    /// connections that each say one thing holds nothing). Default 50 ms.
    /// `Duration::ZERO`: give them back at every wait.
    pub linger: Duration,
}

impl Default for DeflateConfig {
    fn default() -> Self {
        DeflateConfig {
            level: 1,
            server_max_window_bits: 15,
            client_max_window_bits: 15,
            server_no_context_takeover: false,
            client_no_context_takeover: false,
            min_compress_size: 32,
            pool: Some(DeflatePool::default()),
            linger: Self::DEFAULT_LINGER,
        }
    }
}

impl DeflateConfig {
    /// The default [`linger`](Self::linger): 50 ms.
    pub const DEFAULT_LINGER: Duration = Duration::from_millis(50);

    /// Sets how long a pooled connection waiting for input keeps its states
    /// ([`linger`](Self::linger); `Duration::ZERO`: not at all).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Sets the compression level (0–9).
    pub fn level(mut self, level: u32) -> Self {
        self.level = level;
        self
    }

    /// Sets the largest window the server may compress with (8–15 bits).
    pub fn server_max_window_bits(mut self, bits: u8) -> Self {
        self.server_max_window_bits = bits;
        self
    }

    /// Sets the largest window the client may compress with (8–15 bits).
    pub fn client_max_window_bits(mut self, bits: u8) -> Self {
        self.client_max_window_bits = bits;
        self
    }

    /// Asks for (client) or imposes (server) a fresh context for every server message.
    pub fn server_no_context_takeover(mut self, on: bool) -> Self {
        self.server_no_context_takeover = on;
        self
    }

    /// The same for client messages.
    pub fn client_no_context_takeover(mut self, on: bool) -> Self {
        self.client_no_context_takeover = on;
        self
    }

    /// Sets the size below which messages go uncompressed.
    pub fn min_compress_size(mut self, bytes: usize) -> Self {
        self.min_compress_size = bytes;
        self
    }

    /// Sets where compression states are borrowed from (`None`: dedicated per connection).
    pub fn pool(mut self, pool: Option<DeflatePool>) -> Self {
        self.pool = pool;
        self
    }
}
