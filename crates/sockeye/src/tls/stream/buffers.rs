//! The sizes of a TLS stream's buffers, and the per-thread pool its record buffers come from
//! (a leaf: the stream's other files take their sizes from here).

use std::cell::RefCell;

/// The first size of a receive or send buffer: a small message's records fit.
pub(super) const FIRST_BUFFER: usize = 4 << 10;
/// A receive buffer grows (while reads fill it) up to this, so that bulk traffic is read a few
/// records per system call.
pub(super) const BULK_BUFFER: usize = 32 << 10;
/// The largest receive buffer: a TLS record is at most 16 KiB + 2 KiB (RFC 5246 §6.2.3), but
/// rustls joins a handshake message of up to 64 KiB from several records in place.
pub(super) const MAX_INCOMING: usize = 128 << 10;
/// The least room a read is made with (less, and the buffer is compacted or grown first).
pub(super) const MIN_READ: usize = 2 << 10;
/// At most this much plaintext is encrypted per write: two full records.
pub(super) const MAX_ENCRYPT: usize = 32 << 10;
/// A write waits for the socket while this much encrypted data is already queued.
pub(super) const SEND_BACKLOG: usize = 16 << 10;

// The pool: buffers for records, kept per thread between a connection's reads (every TLS
// connection gives its receive buffer back whenever it waits, and takes one when bytes arrive):
// zeroed once, when made, not at every take.

/// Enough for the connections one thread has between two waits.
const MAX_POOLED: usize = 8;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer of at least 4 KiB.
pub(super) fn take() -> Vec<u8> {
    crate::thread_buffers::pop(&POOL).unwrap_or_else(|| vec![0; FIRST_BUFFER])
}

/// Keeps `buffer` for the next take, unless the pool is full or the buffer grew past bulk
/// size (for a large handshake message).
pub(super) fn put(buffer: Vec<u8>) {
    if (FIRST_BUFFER..=2 * BULK_BUFFER).contains(&buffer.len()) {
        crate::thread_buffers::push(&POOL, buffer, MAX_POOLED);
    }
}
