//! permessage-deflate, RFC 7692: negotiation of its four parameters, and the compressor and
//! decompressor a connection uses.
//!
//! Backend: `flate2` over `zlib-rs` (pure Rust), chosen by measurement (`bench/deflate-backends`):
//! on 1 KiB JSON messages, sync-flushed with context takeover, it compressed at about 2× and
//! inflated at about 3× the speed of `miniz_oxide`, and unlike `miniz_oxide` it can limit the
//! compression window, which honouring `*_max_window_bits` requires.
//!
//! **Window bits 8.** zlib (and zlib-rs) cannot produce a raw deflate stream with a 256-byte window.
//! When the peer limits our compressor to 8 bits, Sockeye accepts the limit and sends every message
//! uncompressed (RSV1 clear), which RFC 7692 allows message by message; it still inflates what
//! the peer sends (a 512-byte window decodes a 256-byte-window stream).
//!
//! **Memory.** A zlib-rs compressor is about 300 KiB whatever its window (its hash table alone is
//! a fixed 128 KiB) and a decompressor about 40 KiB with a 15-bit window, so a connection that
//! kept both between messages held ~344 KiB. By default idle connections keep neither: a
//! connection borrows a compressor (decompressor) from a [`DeflatePool`] shared by the connections
//! of one [`DeflateConfig`] at its first compressed message, keeps it while it is busy, and gives
//! it back when it goes idle: when it waits — for input, for the transport to take output, or
//! with its output written and nothing buffered to read
//! ([`Connection::release_idle_buffers`](crate::Connection::release_idle_buffers), called by the
//! I/O layer as for its read buffer, see [`Connection`](crate::Connection)'s "Waits"; a message
//! in progress keeps its state through the wait). A connection starts waiting, and input makes
//! it busy. A wait for input through which the I/O layer runs the engine's timer (the tokio
//! layer's, [`Connection::linger_deflate`](crate::Connection::linger_deflate)) keeps them for
//! [`DeflateConfig::linger`] (50 ms) and gives them back after a whole linger without input
//! (from the connection's second busy spell: its first wait gives them back at once). A
//! connection whose messages come a few milliseconds apart so pays no pool round trip, reset or
//! priming per message (giving them back at every wait cost uWebSockets' load test a quarter of
//! its throughput), and an idle connection holds no zlib state. A message compressed (or
//! inflated) while the connection waits (a push: no input since its last wait) gives its state
//! back when it ends, there being no wait to give it back at. A state given back
//! remembers whose context it holds; the next message of the same connection gets the same state
//! back, context intact, unless the pool lent it to another connection in between (a state held
//! by a connection is never lent). Context takeover (§7.1.1) survives that too: each connection
//! keeps the plaintext its context covers (its last messages, at most a window: 2^bits bytes),
//! and a state lent to it without its context is reset and primed with that text
//! (deflateSetDictionary / inflateSetDictionary, valid for raw deflate). The trade-offs, as
//! uWebSockets' `SHARED_COMPRESSOR`/`DEDICATED_COMPRESSOR` put them:
//!
//! - pooled (the default, [`DeflateConfig::pool`] `Some`): an idle connection holds only the text
//!   of its context, up to 2^bits bytes each way (a few KiB after small messages, ≤ 64 KiB at 15
//!   bits), and the pool holds at most [`DeflatePool::idle_limit`] idle states per direction
//!   (busy connections hold theirs). A connection whose state was lent to another pays a reset
//!   and a re-prime on its next message after a wait (tens of µs at 15 bits): size the pool to
//!   the number of connections that send compressed messages at the same time;
//! - dedicated (`pool: None`): each connection keeps its own states (~344 KiB with context
//!   takeover), no re-priming ever: the fastest for many connections busy at once.
//!
//! Without context takeover nothing carries over between messages: pooled states are reset and
//! shared by all such connections (dedicated ones are freed after each message).
//!
//! One concern a file: [`DeflateConfig`] and its builder (`config.rs`); the parameters and their
//! negotiation (`negotiation.rs`); the [`DeflatePool`] states are lent from (`pool.rs`); the
//! plaintext a context covers, to prime a lent state (`history.rs`); a connection's
//! [`PerMessageDeflate`] and when it holds states (`state.rs`); compressing and inflating
//! (`codec.rs`).

mod codec;
mod config;
mod history;
mod negotiation;
mod pool;
mod state;

pub use config::DeflateConfig;
pub use negotiation::{DeflateParams, NAME};
pub use pool::DeflatePool;
pub use state::PerMessageDeflate;
