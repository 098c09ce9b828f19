//! [`TlsStream`](connection::TlsStream): TLS over a byte stream, driven through rustls's unbuffered
//! API so that the buffers are ours.
//!
//! rustls's buffered connection (what `tokio-rustls` drives) keeps a 4 KiB receive buffer for as
//! long as the connection lives: heaptrack on 2,000 idle `wss://` connections put it at 4,096 of
//! the 10,714 bytes each held, the largest single item. Here TLS records are read into a buffer
//! of ours, taken from a small per-thread pool when bytes arrive and given back whenever the
//! connection waits with no partial record in it, so an idle connection holds only rustls's own
//! state (its keys and handshake bookkeeping). Reads are larger too (the buffer grows to 32 KiB
//! under bulk traffic; rustls reads 4 KiB at a time), and each encrypted record is written from one
//! buffer instead of a queue of one allocation per record.
//!
//! How the parts meet (rustls's `process_tls_records` states, RFC 8446 §5 for records):
//! - bytes read from the socket go to `incoming[in_start..in_end]`; rustls decrypts records from
//!   its front and says how many bytes it has done with (`discard`);
//! - application data comes out a record at a time, copied straight into the reader's buffer;
//!   what does not fit, or arrives while a writer needs rustls (it only encrypts once every
//!   received record has been taken), waits in `plain`;
//! - records to send (handshake flights, session tickets, key updates, alerts, encrypted
//!   application data) are appended to `outgoing[out_start..out_end]` and written in order.
//!
//! The files, lowest first: `buffers` (sizes and the per-thread pool), `sni` (the host name the
//! certificate resolver saw), `side` (client or server), `records` (the send queue), `connection`
//! (the stream's state and `drive`, one pass over rustls), `socket` (reading into and writing from
//! the buffers), `handshake`, `io` (`AsyncRead` / `AsyncWrite`), and `session` (the same
//! connection without a socket, for a loop that moves the bytes itself).

mod buffers;
pub(crate) mod connection;
mod handshake;
mod io;
mod records;
pub(crate) mod session;
pub(crate) mod side;
pub(super) mod sni;
mod socket;
