//! The stream's socket side: reading TLS bytes into `incoming` (grown for bulk traffic, given
//! back to the pool while the connection waits) and writing the queued records out.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::buffers::{self, BULK_BUFFER, FIRST_BUFFER, MAX_INCOMING, MIN_READ};
use super::connection::TlsStream;
use super::side::TlsSide;

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Reads from the socket into `incoming`. `Ready(Ok(0))` at its end. While it waits with
    /// nothing partial, the receive buffer goes back to the pool.
    pub(super) fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<usize>> {
        self.make_read_room()?;
        let mut buf = ReadBuf::new(&mut self.incoming[self.in_end..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Ready(Ok(())) => {
                let (n, capacity) = (buf.filled().len(), buf.capacity());
                self.note_read(n, capacity);
                if n == 0 {
                    self.io_eof = true;
                }
                Poll::Ready(Ok(n))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => {
                self.release_idle_incoming();
                Poll::Pending
            }
        }
    }
}

/// The receive buffer, whatever fills it (a socket here, the caller of a `TlsSession`).
impl<S, C: TlsSide> TlsStream<S, C> {
    /// Makes room after `incoming[..in_end]` for the next read: at least `MIN_READ` bytes (the
    /// buffer is compacted or grown first), more once reads fill what they are given, up to
    /// `MAX_INCOMING`. An error: a partial record or handshake message fills all of that.
    pub(super) fn make_read_room(&mut self) -> io::Result<()> {
        if self.in_start == self.in_end {
            self.in_start = 0;
            self.in_end = 0;
        }
        if self.incoming.is_empty() {
            self.incoming = buffers::take();
        }
        let room = self.incoming.len() - self.in_end;
        if room < MIN_READ || (self.read_filled && self.incoming.len() < BULK_BUFFER) {
            if self.in_start > 0 {
                // (`dirty` stays: the bytes moved from are still there.)
                self.incoming.copy_within(self.in_start..self.in_end, 0);
                self.in_end -= self.in_start;
                self.in_start = 0;
            }
            let room = self.incoming.len() - self.in_end;
            if room < MIN_READ || (self.read_filled && self.incoming.len() < BULK_BUFFER) {
                let grown = (self.incoming.len() * 2).max(FIRST_BUFFER);
                if grown > MAX_INCOMING {
                    if room == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::InvalidData,
                            "TLS: a record or handshake message larger than 128 KiB",
                        ));
                    }
                } else {
                    self.incoming.resize(grown, 0);
                }
            }
        }
        Ok(())
    }

    /// `n` bytes were read into the `capacity` bytes of room [`make_read_room`](Self::make_read_room) made.
    pub(super) fn note_read(&mut self, n: usize, capacity: usize) {
        self.read_filled = n == capacity;
        self.in_end += n;
        self.dirty = self.dirty.max(self.in_end);
        self.needs_input &= n == 0;
    }

    /// Gives the receive buffer back to the pool when nothing partial is left in it, wiped of
    /// the records decrypted in place there (the next connection's stream reads into it as
    /// initialized memory).
    pub(super) fn release_idle_incoming(&mut self) {
        if self.in_start == self.in_end && !self.incoming.is_empty() {
            let mut buffer = std::mem::take(&mut self.incoming);
            buffer[..self.dirty].fill(0);
            buffers::put(buffer);
            self.in_start = 0;
            self.in_end = 0;
            self.dirty = 0;
            self.read_filled = false;
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin, C: TlsSide> TlsStream<S, C> {
    /// Writes every queued record. The send buffer goes back to the pool once empty.
    pub(super) fn poll_send_queued(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.out_start < self.out_end {
            let n =
                ready!(Pin::new(&mut self.io).poll_write(cx, &self.outgoing[self.out_start..self.out_end]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.out_start += n;
        }
        self.out_start = 0;
        self.out_end = 0;
        if !self.outgoing.is_empty() {
            buffers::put(std::mem::take(&mut self.outgoing));
        }
        Poll::Ready(Ok(()))
    }

    /// [`poll_send_queued`](Self::poll_send_queued) for a writer: one left waiting is noted,
    /// so that a failing read can wake it (see `waiting_writer`).
    pub(super) fn poll_send_for_writer(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sent = self.poll_send_queued(cx);
        if sent.is_pending() {
            match &mut self.waiting_writer {
                Some(waker) => waker.clone_from(cx.waker()),
                None => self.waiting_writer = Some(cx.waker().clone()),
            }
        }
        sent
    }

    /// The end of the socket: a clean end only after the peer's close_notify (RFC 8446 §6.1: a
    /// TCP close alone could be an attacker's truncation).
    pub(super) fn at_eof(&self) -> io::Result<()> {
        if self.in_start < self.in_end {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the peer closed the connection in the middle of a TLS record",
            ))
        } else if self.peer_closed {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "peer closed connection without sending TLS close_notify",
            ))
        }
    }
}
