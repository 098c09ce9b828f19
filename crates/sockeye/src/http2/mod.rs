//! WebSockets over HTTP/2 (RFC 8441), on the `h2` crate.
//!
//! ```text
//!   TCP/TLS ── h2 connection task ──┬── stream 1: extended CONNECT ─ H2Stream ─ WebSocket (same engine)
//!    (one per peer)                 ├── stream 3: …
//!                                   └── stream 5: …
//! ```
//!
//! An HTTP/2 stream opened with an extended CONNECT (`:protocol: websocket`, answered `200`) is a
//! byte stream like a TCP connection (RFC 8441 §5): [`H2Stream`] makes it an `AsyncRead +
//! AsyncWrite`, and the WebSocket engine runs over it unchanged — framing, masking, limits,
//! compression, keepalive and the closing handshake are the same code as over HTTP/1.1. Only the
//! opening handshake differs (see `sockeye_proto::handshake`'s RFC 8441 functions), and the
//! transport close: END_STREAM stands for TCP's FIN, RST_STREAM(CANCEL) for a reset.
//!
//! Servers accept it on the same port as HTTP/1.1 upgrades: over TLS when ALPN chose `h2`, in
//! cleartext when the client starts with the HTTP/2 connection preface (prior knowledge, RFC 9113
//! §3.3). Clients use it when [`Config::http_version`](crate::Config::http_version) asks, and share
//! one HTTP/2 connection between the WebSockets they open to one origin.//!
//! One concern per file: [`H2Stream`], the stream adapter (`h2_stream`); telling an HTTP/2
//! client from an HTTP/1.1 one (`sniff`); the flow-control windows and `h2` builders both sides
//! use (`settings`); serving a connection (`serve`) behind its frame guard (`frame_guard`); the
//! client's connections (`client`) and the pool that shares them (`pool`).

//!
//! The rest of the crate uses the files it needs by their paths (`http2::serve`, …), so that this
//! file only declares them.

pub(crate) mod client;
mod frame_guard;
pub(crate) mod h2_stream;
pub(crate) mod pool;
pub(crate) mod serve;
mod settings;
pub(crate) mod sniff;

pub use h2_stream::H2Stream;
