//! The outbound byte queue: small frames are copied into one batch buffer, large payloads are queued
//! as shared `Bytes` without a copy, and the I/O layer writes everything with one vectored write.
//! A shared payload queued behind bytes of the batch buffer (its frame's header) is preceded by a
//! mark saying how far the buffer goes first: no piece of the buffer is split off into an
//! allocation of its own (~450 of a 16 KiB echo's 7,800 instructions, callgrind).

use std::collections::VecDeque;
use std::io::IoSlice;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// Bytes waiting to be written to the socket, in order. Implements [`bytes::Buf`], so an I/O layer
/// can pass it to `write_buf`/`poll_write_buf`, or use [`Buf::chunks_vectored`] for `writev`.
#[derive(Debug, Default)]
pub struct Transmit {
    /// Pieces queued before the rest of `tail`, oldest first.
    queued: VecDeque<Piece>,
    /// Where the last [`Piece::Tail`] queued ends in `tail` (0 once the queue drained; at most
    /// `tail_sent` once that mark is written): the bytes of `tail` after it and after
    /// `tail_sent` come after every queued piece.
    tail_marked: usize,
    /// The batch buffer that small frames are encoded into.
    tail: BytesMut,
    /// How much of `tail`, from its start, is written already. An offset rather than advancing
    /// `tail`: once everything is written, clearing it then reuses the allocation from its start
    /// as it is, where an advanced `BytesMut` would have to reclaim the room at the next frame
    /// (~100 instructions of a 64-byte echo, callgrind).
    tail_sent: usize,
    /// Whether `tail` dropped written bytes from its start since the queue was last empty.
    tail_advanced: bool,
    len: usize,
    /// Bytes written out of `tail` since the queue was last empty: how large it grew.
    tail_written: usize,
    /// The largest batch written out of `tail` since the connection was last idle.
    largest_batch: usize,
}

/// A piece of the queue: shared bytes, or the batch buffer's bytes up to an offset (from where
/// the previous piece of it ended, or from what is written of it).
#[derive(Debug)]
enum Piece {
    Shared(Bytes),
    Tail(usize),
}

impl Transmit {
    /// The buffer that the next small frame is encoded into. The caller appends; `commit` accounts.
    pub(crate) fn tail(&mut self) -> &mut BytesMut {
        &mut self.tail
    }

    /// Accounts for `n` bytes the caller appended to [`tail`](Self::tail).
    pub(crate) fn commit(&mut self, n: usize) {
        self.len += n;
    }

    /// Appends an unmasked frame of at most 125 bytes, whose header is two bytes (RFC 6455 §5.2):
    /// `first` (FIN, RSV, opcode), then the length. One reservation for header and payload.
    #[inline]
    pub(crate) fn push_short_frame(&mut self, first: u8, payload: &[u8]) {
        debug_assert!(payload.len() <= 125);
        self.tail.reserve(2 + payload.len());
        self.tail.put_slice(&[first, payload.len() as u8]);
        self.tail.put_slice(payload);
        self.len += 2 + payload.len();
    }

    /// Queues `bytes` after everything already queued, without copying.
    pub(crate) fn push(&mut self, bytes: Bytes) {
        if bytes.is_empty() {
            return;
        }
        if self.tail.len() > self.tail_sent.max(self.tail_marked) {
            self.tail_marked = self.tail.len();
            self.queued.push_back(Piece::Tail(self.tail_marked));
        }
        self.len += bytes.len();
        self.queued.push_back(Piece::Shared(bytes));
    }

    /// The number of bytes waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is waiting.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether everything waiting is in one piece: [`Buf::chunk`] is all of it, and a plain
    /// write does what a vectored one would.
    pub fn is_contiguous(&self) -> bool {
        self.queued.is_empty()
    }

    /// Frees the batch buffer and the queue's storage if nothing is waiting, unless the batch
    /// buffer only ever held a few frames since the last time: then it stays, costing an idle
    /// connection a few hundred bytes at most and a busy one no allocation per wait. The queue's
    /// storage stays while it has room for a few pieces (a connection that sends large messages
    /// then pays no allocation per message; 128 bytes, and only on such connections).
    #[inline(always)]
    pub(crate) fn release_if_empty(&mut self) {
        if self.len == 0 {
            if std::mem::take(&mut self.largest_batch) > KEEP_WHEN_IDLE {
                self.tail = BytesMut::new();
            }
            if self.queued.capacity() > KEEP_PIECES {
                self.queued = VecDeque::new();
            }
        }
    }
}

impl Buf for Transmit {
    fn remaining(&self) -> usize {
        self.len
    }

    fn chunk(&self) -> &[u8] {
        match self.queued.front() {
            Some(Piece::Shared(b)) => b,
            Some(&Piece::Tail(end)) => &self.tail[self.tail_sent..end],
            None => &self.tail[self.tail_sent..],
        }
    }

    fn chunks_vectored<'a>(&'a self, dst: &mut [IoSlice<'a>]) -> usize {
        let mut n = 0;
        // Where the next piece of the batch buffer starts.
        let mut from = self.tail_sent;
        let pieces = self.queued.iter().map(|piece| match *piece {
            Piece::Shared(ref b) => &b[..],
            Piece::Tail(end) => &self.tail[std::mem::replace(&mut from, end)..end],
        });
        for piece in pieces {
            if n == dst.len() {
                return n;
            }
            if !piece.is_empty() {
                dst[n] = IoSlice::new(piece);
                n += 1;
            }
        }
        let rest = &self.tail[from..];
        if n < dst.len() && !rest.is_empty() {
            dst[n] = IoSlice::new(rest);
            n += 1;
        }
        n
    }

    /// The next `len` bytes as `Bytes`, without a copy when they are (the start of) a shared
    /// payload: an I/O layer that must hold what it writes until the kernel is done with it
    /// (io_uring) takes the large payloads this way, and copies only the small frames.
    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        if let Some(Piece::Shared(front)) = self.queued.front_mut()
            && len <= front.len()
        {
            let taken = if len == front.len() {
                let Some(Piece::Shared(whole)) = self.queued.pop_front() else {
                    unreachable!()
                };
                whole
            } else {
                front.split_to(len)
            };
            self.len -= len;
            if self.len == 0 {
                self.drained();
            }
            return taken;
        }
        let mut copy = BytesMut::with_capacity(len);
        while copy.len() < len {
            let n = self.chunk().len().min(len - copy.len());
            assert!(n > 0, "copy_to_bytes past the end of the transmit queue");
            copy.extend_from_slice(&self.chunk()[..n]);
            self.advance(n);
        }
        copy.freeze()
    }

    #[inline]
    fn advance(&mut self, cnt: usize) {
        // The usual case, inline: everything was one batch in `tail`, written at once.
        if cnt == self.len && self.queued.is_empty() {
            self.len = 0;
            self.tail_written += cnt;
            self.drained();
        } else {
            self.advance_pieces(cnt);
        }
    }
}

impl Transmit {
    /// [`Buf::advance`] through the queued pieces and into `tail`.
    fn advance_pieces(&mut self, mut cnt: usize) {
        assert!(cnt <= self.len, "advanced past the end of the transmit queue");
        self.len -= cnt;
        while cnt > 0 {
            match self.queued.front_mut() {
                Some(Piece::Shared(front)) if front.len() <= cnt => {
                    cnt -= front.len();
                    self.queued.pop_front();
                }
                Some(Piece::Shared(front)) => {
                    front.advance(cnt);
                    return;
                }
                Some(&mut Piece::Tail(end)) => {
                    let step = cnt.min(end - self.tail_sent);
                    self.tail_sent += step;
                    self.tail_written += step;
                    cnt -= step;
                    if self.tail_sent == end {
                        self.queued.pop_front();
                        if self.tail_sent >= ADVANCE_SENT && self.len > 0 {
                            self.drop_written_tail();
                        }
                    }
                }
                None => {
                    self.tail_sent += cnt;
                    self.tail_written += cnt;
                    if self.tail_sent >= ADVANCE_SENT && self.len > 0 {
                        self.drop_written_tail();
                    }
                    break;
                }
            }
        }
        if self.len == 0 {
            self.drained();
        }
    }

    /// Everything queued is written: the batch buffer is reused from its start, or given back.
    #[inline]
    fn drained(&mut self) {
        self.tail_sent = 0;
        self.tail_marked = 0;
        let written = std::mem::take(&mut self.tail_written);
        if written <= KEEP_AFTER_WRITE && self.largest_batch > KEEP_AFTER_WRITE {
            // It grew for large messages (a client's masked copies) and the last batch was
            // small: give it back rather than keep the largest message ever sent
            // (tungstenite #500). While large batches follow each other it is reused:
            // allocating and faulting in megabytes per message would cost more.
            self.give_back_tail(written);
        } else {
            self.largest_batch = self.largest_batch.max(written);
            // Reuse the batch buffer's allocation from its start.
            self.tail.clear();
            if std::mem::take(&mut self.tail_advanced) {
                // More than the room after the written bytes it dropped: takes that back.
                let _ = self.tail.try_reclaim(self.tail.capacity() + 1);
            }
        }
    }

    /// Never drained (a steady backlog, of small frames or of headers between shared payloads):
    /// lets the batch buffer drop what is written, so that it can take the room back instead of
    /// growing without end; the marks still queued move with it.
    #[cold]
    fn drop_written_tail(&mut self) {
        let sent = std::mem::take(&mut self.tail_sent);
        self.tail.advance(sent);
        self.tail_advanced = true;
        self.tail_marked = self.tail_marked.saturating_sub(sent);
        for piece in &mut self.queued {
            if let Piece::Tail(end) = piece {
                // Marks end past what is written: each is further than the one before.
                *end -= sent;
            }
        }
    }

    /// See [`drained`](Self::drained): the batch buffer grew for large messages.
    #[cold]
    fn give_back_tail(&mut self, written: usize) {
        self.tail = BytesMut::new();
        self.tail_advanced = false;
        self.largest_batch = written;
    }
}

/// Written bytes kept at the start of the batch buffer while more is queued behind them; past this
/// the buffer drops them (the offset only saves work when the queue empties soon after).
const ADVANCE_SENT: usize = 16 << 10;

/// The queue keeps storage for this many pieces while the connection is idle (a header mark and
/// a payload, twice); more is freed.
const KEEP_PIECES: usize = 4;

/// A batch buffer that never held more than this is kept while the connection is idle.
const KEEP_WHEN_IDLE: usize = 512;

/// Batches up to this size are small: a batch buffer that grew past it is given back after the
/// first small batch that follows (room for batches of small frames, not for large messages).
const KEEP_AFTER_WRITE: usize = 256 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_order_across_copied_and_shared_pieces() {
        let mut t = Transmit::default();
        t.tail().extend_from_slice(b"ab");
        t.commit(2);
        t.push(Bytes::from_static(b"cde"));
        t.tail().extend_from_slice(b"f");
        t.commit(1);
        let mut slices = [IoSlice::new(&[]); 8];
        let n = t.chunks_vectored(&mut slices);
        let joined: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
        assert_eq!(joined, b"abcdef");
        t.advance(3);
        assert_eq!(t.chunk(), b"de");
        t.advance(3);
        assert!(t.is_empty());
    }

    #[test]
    fn a_partly_written_batch_is_followed_by_its_rest_then_shared_pieces() {
        let mut t = Transmit::default();
        t.tail().extend_from_slice(b"abc");
        t.commit(3);
        t.advance(2);
        t.push(Bytes::from_static(b"de"));
        t.tail().extend_from_slice(b"f");
        t.commit(1);
        let mut out = Vec::new();
        while t.has_remaining() {
            let chunk = t.chunk().to_vec();
            out.extend_from_slice(&chunk);
            t.advance(chunk.len());
        }
        assert_eq!(out, b"cdef");
        // Emptied: the next batch starts the buffer again.
        t.tail().extend_from_slice(b"g");
        t.commit(1);
        assert_eq!(t.chunk(), b"g");
    }

    /// Headers in the batch buffer between shared payloads, written in writes cut at every
    /// size: the bytes come out in order, vectored or chunk by chunk, and the queue ends empty
    /// with no allocation of its own per piece (marks into the batch buffer, not copies).
    #[test]
    fn marks_keep_batch_bytes_and_shared_payloads_in_order_at_every_cut() {
        let expected: Vec<u8> = (0u8..=255).cycle().take(2 * (3 + 40) + 5).collect();
        for cut in 1..=expected.len() {
            for vectored in [false, true] {
                let mut t = Transmit::default();
                let mut at = 0;
                for _ in 0..2 {
                    t.tail().extend_from_slice(&expected[at..at + 3]);
                    t.commit(3);
                    t.push(Bytes::copy_from_slice(&expected[at + 3..at + 43]));
                    at += 43;
                }
                t.tail().extend_from_slice(&expected[at..]);
                t.commit(expected.len() - at);
                assert_eq!(t.queued.len(), 4, "two marks and two payloads");
                let mut out = Vec::new();
                while t.has_remaining() {
                    let mut slices = [IoSlice::new(&[]); 8];
                    let n = if vectored {
                        t.chunks_vectored(&mut slices)
                    } else {
                        slices[0] = IoSlice::new(t.chunk());
                        1
                    };
                    let all: Vec<u8> = slices[..n].iter().flat_map(|s| s.iter().copied()).collect();
                    let take = all.len().min(cut);
                    out.extend_from_slice(&all[..take]);
                    t.advance(take);
                }
                assert_eq!(out, expected, "cut {cut}, vectored {vectored}");
                assert!(t.queued.is_empty() && t.tail.is_empty());
                // The queue keeps its storage for the next large message.
                t.release_if_empty();
                assert!(t.queued.capacity() >= 4);
            }
        }
    }

    #[test]
    fn a_batch_buffer_that_never_drains_does_not_grow_without_end() {
        // A steady backlog: frames are queued as fast as they are written, never all of them.
        let mut t = Transmit::default();
        let frame = [5u8; 100];
        let mut written = Vec::new();
        for _ in 0..10 {
            t.tail().extend_from_slice(&frame);
            t.commit(frame.len());
        }
        for i in 0..20_000 {
            t.tail().extend_from_slice(&frame);
            t.commit(frame.len());
            // 100 bytes out for 100 in, in two writes cut anywhere.
            for n in [i % 100, 100 - i % 100] {
                written.extend_from_slice(&t.chunk()[..n]);
                t.advance(n);
            }
            assert!(t.tail.capacity() <= 256 << 10, "grew to {}", t.tail.capacity());
        }
        assert!(!t.is_empty(), "the backlog never drained");
        assert!(written.iter().all(|&b| b == 5));
    }

    /// The same with shared payloads between the frames (a large message behind every few small
    /// ones, written as fast as queued but never all of it): the marks must not keep the batch
    /// buffer's written bytes either.
    #[test]
    fn a_batch_buffer_before_shared_payloads_that_never_drains_does_not_grow_without_end() {
        let mut t = Transmit::default();
        let frame = [5u8; 100];
        let payload = Bytes::from(vec![6u8; 1000]);
        let mut written = Vec::new();
        let mut queued = 0usize;
        for i in 0..20_000 {
            t.tail().extend_from_slice(&frame);
            t.commit(frame.len());
            t.push(payload.clone());
            queued += frame.len() + payload.len();
            // Write all but ~2 KiB, in pieces cut anywhere: the queue never empties.
            while t.remaining() > 2048 {
                let n = t.chunk().len().min(700 + i % 300);
                written.extend_from_slice(&t.chunk()[..n]);
                t.advance(n);
            }
            assert!(t.tail.capacity() <= 256 << 10, "grew to {}", t.tail.capacity());
        }
        while t.has_remaining() {
            let n = t.chunk().len();
            written.extend_from_slice(&t.chunk()[..n]);
            t.advance(n);
        }
        assert_eq!(written.len(), queued);
        let expected: Vec<u8> = (0..20_000)
            .flat_map(|_| frame.iter().copied().chain(payload.iter().copied()))
            .collect();
        assert!(written == expected, "bytes out of order");
    }

    #[test]
    fn copy_to_bytes_takes_shared_payloads_without_a_copy_and_copies_the_rest() {
        let payload = Bytes::from(vec![9u8; 100]);
        let mut t = Transmit::default();
        t.tail().extend_from_slice(b"ab");
        t.commit(2);
        t.push(payload.clone());
        t.tail().extend_from_slice(b"c");
        t.commit(1);
        assert_eq!(t.copy_to_bytes(2), Bytes::from_static(b"ab"));
        let first = t.copy_to_bytes(40);
        assert_eq!(first.as_ptr(), payload.as_ptr(), "a slice of the shared payload");
        let rest = t.copy_to_bytes(60);
        assert_eq!(rest.as_ptr(), payload[40..].as_ptr());
        assert_eq!(t.copy_to_bytes(1), Bytes::from_static(b"c"));
        assert!(t.is_empty());
        // Across pieces: copied, in order.
        t.push(Bytes::from_static(b"xy"));
        t.tail().extend_from_slice(b"z");
        t.commit(1);
        assert_eq!(t.copy_to_bytes(3), Bytes::from_static(b"xyz"));
    }

    #[test]
    fn a_large_batch_buffer_is_not_kept_once_written() {
        // Where the next batch goes once everything is written: the same allocation for small
        // batches, a new one after a large batch.
        fn next_batch_start(t: &mut Transmit, batch: usize) -> (usize, usize) {
            t.tail().extend_from_slice(&vec![7u8; batch]);
            t.commit(batch);
            let start = t.tail.as_ptr() as usize;
            t.advance(batch / 2);
            t.advance(batch - batch / 2);
            assert!(t.is_empty());
            t.tail().reserve(64);
            (start, t.tail.as_ptr() as usize)
        }
        let mut t = Transmit::default();
        let (start, next) = next_batch_start(&mut t, 64 << 10);
        assert_eq!(start, next, "a small batch buffer is reused");
        let mut t = Transmit::default();
        let (start, next) = next_batch_start(&mut t, 4 << 20);
        assert_eq!(start, next, "reused while large batches follow each other");
        let (start, next) = next_batch_start(&mut t, 64);
        assert_ne!(start, next, "the 4 MiB buffer is given back after a small batch");
    }
}
