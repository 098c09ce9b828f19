//! The WebSocket connection state machine, after the opening handshake (RFC 6455 §5–§7).
//!
//! This file does not know about sockets: bytes from the peer go in through
//! [`Connection::read_buffer`] (or [`Connection::receive`]), messages come out of
//! [`Connection::poll_message`], and frames to send pile up in [`Connection::transmit`] until the
//! I/O layer writes them.
//!
//! ```text
//!               send close / peer fails             peer's close arrives
//!   ┌──────┐ ─────────────────────────► ┌──────────┐ ──────────────────► ┌────────┐
//!   │ Open │                            │ Closing  │                     │ Closed │
//!   └──────┘ ─────────────────────────────────────────────────────────► └────────┘
//!                 peer's close arrives: we reply at once (§5.5.1)
//! ```
//! Once `Closed`, the server closes the TCP connection first; the client waits for it (§7.1.1).
//! What the transport should do is the engine's output too ([`Connection::transport`]), and so are
//! its deadlines: keepalive pings, the dead-peer deadline and the close deadline run on the time
//! the I/O layer passes in ([`Connection::handle_timeout`]); the engine never reads a clock.
//!
//! The engine is in rooms, one concern each, that know nothing of one another; [`Connection`]
//! is the front that owns them and ties them together where a step needs two (a ping received
//! is answered by the sending room; a protocol violation found by the receiving room fails the
//! connection, which the closing room records and the sending room announces). The front is
//! `front` (the struct, its lifecycle, time and failure), `input` and `output` (the two
//! directions of its API); the rooms:
//!
//! - [`receive`]: the read buffer, frame headers, unmasking as payloads arrive, streaming;
//!   within it, [`assembly`]: the data message in progress (reassembly, inflation, UTF-8);
//! - [`send`]: the transmit queue, mask keys, fragmented and compressed sends, frame encoding;
//! - [`close`]: the closing handshake's stage, the transport's, and why the connection ended;
//! - [`timers`]: keepalive and the close deadline, on the time the I/O layer passes in.
//!
//! The permessage-deflate state is used by both directions, so the front keeps it and lends it
//! to the room that needs it. No room imports the front or another room, except that `receive`
//! owns and imports its `assembly`; the front's three files import the rooms, and `input` and
//! `output` import `front`. This file only declares them and re-exports the public items.

mod assembly;
mod close;
mod front;
mod input;
mod output;
mod receive;
mod send;
mod timers;

pub use close::{CloseState, Transport};
pub use front::Connection;
