//! The read buffer's life: the one owner of when a connection's read buffer is made, sized, kept
//! through a wait, pooled and let go. The engine ([`Connection`]) holds the buffer and says what
//! it can give up ([`Connection::release_idle_read_buffer`]: the buffer only when empty, a
//! frame in progress keeping its bytes); everything about *when* is decided here, and the
//! receive loop only tells this type what happened: a read is due ([`ReadBuffer::poll_fill`]),
//! the connection is about to wait for input ([`ReadBuffer::wait`]), the connection is over
//! ([`ReadBuffer::give_back`]). Whether data went to the application in between, it reads from
//! the engine's count ([`Connection::data_delivered`]) at those moments.
//!
//! The rule, whole:
//!
//! - **Sizing.** A read asks for `read_size`: [`Config::read_chunk_size`](crate::Config) (64 KiB
//!   by default), doubled after each read that filled all its room, up to 4× (a large transfer
//!   costs a quarter of the system calls, and streamed a quarter of the fragments), and back to
//!   the chunk at every wait. A read is made with at least a quarter of `read_size` free; less,
//!   and the buffer is first taken from the pool (when it has none) or grown — except when the
//!   engine already made room for the rest of a frame it receives whole, which is filled as it is
//!   (reserving more would copy the frame into a larger allocation: a 16 MiB memcpy per 16 MiB
//!   message).
//! - **At a wait for input** the empty buffer goes to the thread's pool, for the next connection
//!   that reads; a frame in progress keeps its bytes where they are. Exception, the keepers: up to
//!   [`MAX_KEPT`] connections per thread keep their buffer through their waits, so that one
//!   answering a message at a time does not move it to the pool and back each time (~125
//!   instructions of a 64-byte echo, callgrind). A connection takes a keeper's place only after it
//!   handed a data message (or a piece of one) to the application since its buffer was last given
//!   up — one that only answers pings holds none — and gives place and buffer up when one of its
//!   deadlines passes (the keepalive interval, 30 s by default; a busy permessage-deflate
//!   connection's linger, 50 ms) or its buffer grew past [`most_kept`] (for a large frame, or
//!   reads that kept filling it). With keepalive off, a keeper that goes quiet keeps its buffer
//!   until it closes.
//! - **Pool bounds.** A thread pools at most [`MAX_POOLED`] buffers and grants at most
//!   [`MAX_KEPT`] places (a keeper that moved to another worker gives its place back to the thread
//!   that granted it): at most 8 idle read buffers per thread, each of a few reads' size, whatever
//!   the number of connections. A buffer larger than [`most_kept`] is never pooled: it is freed.
//!   Bounded by count, not time: a delay would need a timer per connection, and every connection
//!   that saw input within it would hold a buffer (10,000 connections each sending once a second:
//!   640 MiB). uWebSockets shares one receive buffer per event loop for the same reason.
//! - **At the end** (the transport closed, the stream failed, or the connection dropped while a
//!   keeper) the buffer goes to the pool, as at a wait, for the next connection.
//!
//! The batch (write) buffer's empty room is let go at the same waits
//! ([`Connection::release_idle_write_buffer`]); the permessage-deflate states are the receive
//! loop's (`linger_deflate`, `release_idle_deflate`).

use std::cell::RefCell;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};

use bytes::BytesMut;
use sockeye_proto::Connection;
use tokio::io::AsyncRead;

/// Enough for the connections one thread serves at once between two waits; the rest are freed.
/// At most this many read buffers (64 KiB each by default) per thread.
const MAX_POOLED: usize = 4;

/// The connections per thread that keep their read buffer while they wait.
const MAX_KEPT: usize = 4;

/// A connection's read buffer, as the rule above has it: the engine holds the bytes, this holds
/// the decisions.
pub(super) struct ReadBuffer {
    /// [`Config::read_chunk_size`](crate::Config).
    read_chunk: usize,
    /// How much the next read asks for (see *Sizing*).
    read_size: usize,
    /// Held while this connection keeps its empty read buffer through its waits for input.
    keeper: Option<Keeper>,
    /// The buffer was made larger than a keeper keeps since it was last given up. Its capacity,
    /// once the frame is split off, no longer shows the allocation behind it.
    grown: bool,
    /// [`Connection::data_delivered`] when the buffer was last given up: a data message (or a
    /// piece of one) went to the application since when the engine's count moved on, and only
    /// such a connection takes a keeper's place. Read at waits, so the receive path pays nothing
    /// per message for it.
    delivered_at_give_back: u64,
}

impl ReadBuffer {
    /// For reads of `read_chunk` bytes ([`Config::read_chunk_size`](crate::Config)).
    pub(super) fn new(read_chunk: usize) -> Self {
        ReadBuffer {
            read_chunk,
            read_size: read_chunk,
            keeper: None,
            grown: false,
            delivered_at_give_back: 0,
        }
    }

    /// Reads once from `stream` into the engine's buffer, sized as *Sizing* says. Inline: the
    /// receive loop runs it twice per message (the read, then the wait), and a call level costs
    /// ~16 instructions each time.
    #[inline(always)]
    pub(super) fn poll_fill<S: AsyncRead + Unpin>(
        &mut self,
        conn: &mut Connection,
        stream: &mut S,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<usize>> {
        let read_size = self.read_size;
        let missing = conn.frame_bytes_missing();
        let buf = conn.read_buffer();
        let room = buf.capacity() - buf.len();
        let sized_for_frame = missing > 0 && room >= missing;
        if room < least_room(read_size) && !sized_for_frame {
            if buf.capacity() == 0
                && let Some(pooled) = take(read_size)
            {
                *buf = pooled;
            } else {
                buf.reserve(read_size);
            }
        }
        let room = buf.capacity() - buf.len();
        if buf.capacity() > most_kept(self.read_chunk) {
            self.grown = true;
        }
        let n = ready!(tokio_util::io::poll_read_buf(Pin::new(stream), cx, buf))?;
        if n == room && read_size < 4 * self.read_chunk {
            self.read_size = read_size * 2;
        }
        Poll::Ready(Ok(n))
    }

    /// The connection is about to wait for input (`timer_fired`: one of its deadlines passed
    /// since it last waited): reads go back to the chunk size, and the buffer stays (a frame in
    /// progress, or a keeper's) or goes to the pool. Inline: a keeper's case is a few tests at
    /// every wait.
    #[inline(always)]
    pub(super) fn wait(&mut self, conn: &mut Connection, timer_fired: bool) {
        self.read_size = self.read_chunk;
        let buf = conn.read_buffer();
        let frame_in_progress = !buf.is_empty();
        let capacity = buf.capacity();
        let data_delivered = conn.data_delivered() != self.delivered_at_give_back;
        let keepable = capacity != 0 && !self.grown && data_delivered && !timer_fired;
        if frame_in_progress || (keepable && (self.keeper.is_some() || self.take_keeper())) {
            conn.release_idle_write_buffer();
        } else {
            self.give_back(conn);
        }
    }

    /// Gives up the keeper's place, if any, and the read buffer: to the thread's pool when it is
    /// empty and no larger than a keeper keeps, else let go (with the batch buffer, when empty).
    /// At a wait, and when the connection ends.
    pub(super) fn give_back(&mut self, conn: &mut Connection) {
        self.keeper = None;
        self.delivered_at_give_back = conn.data_delivered();
        let grown = std::mem::take(&mut self.grown);
        conn.release_idle_write_buffer();
        if let Some(buffer) = conn.release_idle_read_buffer(least_room(self.read_chunk))
            && !grown
        {
            put(buffer, self.read_chunk);
        }
    }

    /// Whether this connection keeps its buffer through its waits (a dropped connection that
    /// does gives it back).
    pub(super) fn is_kept(&self) -> bool {
        self.keeper.is_some()
    }

    /// Becomes one of the thread's keepers, if it has a place left.
    fn take_keeper(&mut self) -> bool {
        self.keeper = keeper();
        self.keeper.is_some()
    }
}

thread_local! {
    static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
    /// How many connections keep their buffer under this thread's allowance. Shared with the
    /// keepers: a task may move to another thread of the runtime between two waits, and must
    /// then give its place back to the thread that granted it.
    static KEEPERS: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
}

/// A connection's place among its thread's keepers, given back when dropped.
struct Keeper(Arc<AtomicUsize>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A place among this thread's keepers, if one is left.
fn keeper() -> Option<Keeper> {
    KEEPERS
        .try_with(|count| {
            // Only this thread adds to its count (a moved task only takes away), so the check and
            // the add need not be one atomic step.
            (count.load(Ordering::Relaxed) < MAX_KEPT).then(|| {
                count.fetch_add(1, Ordering::Relaxed);
                Keeper(Arc::clone(count))
            })
        })
        .ok()
        .flatten()
}

/// The largest buffer a keeper keeps or the pool takes: one that grew for a large message is let
/// go.
fn most_kept(read_chunk: usize) -> usize {
    2 * read_chunk
}

/// The least room a read of `read_size` is made with: less, and the buffer grows (or is taken
/// from the pool) first. A pooled buffer keeps at least this much for the next read.
fn least_room(read_size: usize) -> usize {
    read_size / 4
}

/// A pooled buffer with at least the least room for a read of `read_size`, if there is one.
fn take(read_size: usize) -> Option<BytesMut> {
    crate::thread_buffers::pop(&POOL).filter(|b| b.capacity() >= least_room(read_size))
}

/// Keeps `buffer` (empty) for the next read, unless the pool is full or the buffer is far larger
/// than a read needs (it grew for a large message: let it go).
fn put(buffer: BytesMut, read_chunk: usize) {
    if buffer.capacity() <= most_kept(read_chunk) {
        crate::thread_buffers::push(&POOL, buffer, MAX_POOLED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_has_a_bounded_number_of_keepers_and_a_dropped_one_frees_its_place() {
        let mut keepers: Vec<Keeper> = std::iter::from_fn(keeper).take(MAX_KEPT + 3).collect();
        assert_eq!(keepers.len(), MAX_KEPT);
        assert!(keeper().is_none(), "one more than the allowance");
        keepers.pop();
        let again = keeper();
        assert!(again.is_some(), "a place given back is free again");
        assert!(keeper().is_none());
    }

    #[test]
    fn a_keeper_dropped_on_another_thread_gives_its_place_back_to_its_own() {
        let keepers: Vec<Keeper> = std::iter::from_fn(keeper).take(MAX_KEPT).collect();
        assert!(keeper().is_none());
        let moved = std::thread::spawn(move || {
            // Another thread has its own allowance, untouched by this one's.
            let theirs: Vec<Keeper> = std::iter::from_fn(keeper).take(MAX_KEPT + 1).collect();
            assert_eq!(theirs.len(), MAX_KEPT);
            drop(keepers);
        });
        moved.join().unwrap();
        let back: Vec<Keeper> = std::iter::from_fn(keeper).take(MAX_KEPT + 1).collect();
        assert_eq!(
            back.len(),
            MAX_KEPT,
            "the places came back to the thread that gave them"
        );
    }

    #[test]
    fn the_pool_lets_a_grown_buffer_go_and_keeps_at_most_its_size() {
        let chunk = 1 << 10;
        put(BytesMut::with_capacity(most_kept(chunk) + 1), chunk);
        assert!(
            take(chunk).is_none(),
            "a buffer grown past the largest kept was pooled"
        );
        for _ in 0..MAX_POOLED + 2 {
            put(BytesMut::with_capacity(chunk), chunk);
        }
        let pooled = std::iter::from_fn(|| take(chunk)).count();
        assert_eq!(pooled, MAX_POOLED);
    }
}
