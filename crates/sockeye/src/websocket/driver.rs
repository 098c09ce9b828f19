//! The engine driven over the stream: the receive loop (write what is queued, read, hand over
//! a message, or wait), the writes, the transport's closing steps, the one timer and the shutdown
//! signal. [`WebSocket`](super::WebSocket) is the handle around it; the read buffer's life is
//! [`ReadBuffer`]'s.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Buf;
use sockeye_proto::{CloseFrame, CloseState, Connection, Transport};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

use super::read_buffer::ReadBuffer;
use super::received::{Received, take_next};
use super::timer::EngineTimer;
use crate::config::Config;
use crate::error::Error;
use crate::shutdown::CloseSignal;

/// The connection, its stream and the one timer.
pub(super) struct Inner<S> {
    pub(super) stream: S,
    pub(super) conn: Connection,
    pub(super) high_water: usize,
    /// When to read, how much, and when to give the buffer up.
    read_buffer: ReadBuffer,
    /// Bytes were handed to the stream but its flush has not completed. A TLS stream accepts
    /// plaintext into its own buffer and may still owe the socket the records; without this flag
    /// an empty transmit queue would look like "nothing to do" and the data would sit there.
    unflushed: bool,
    /// Sleeps until the engine's next deadline. Created on first use: a connection without
    /// timers never needs it.
    timer: Option<EngineTimer>,
    /// Asks this connection to close with 1001 (going away): set by a [`Server`](crate::Server),
    /// whose graceful shutdown it signals.
    pub(super) close_signal: Option<CloseSignal>,
    /// The close frame the peer sent, once handed to the application (boxed: a pointer's worth
    /// for the connections that never get there), for a sending half's `close` that answers it.
    pub(super) peer_close: Option<Box<CloseFrame>>,
}

/// A connection dropped while it keeps its read buffer (still open: a closed one gave it up
/// when its transport closed) gives it to the pool, as it would have at its next wait.
impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        if self.read_buffer.is_kept() {
            self.read_buffer.give_back(&mut self.conn);
        }
    }
}

impl<S> Inner<S> {
    /// `conn` over `stream`, as `config` has it.
    pub(super) fn new(stream: S, conn: Connection, config: &Config) -> Self {
        Inner {
            stream,
            conn,
            high_water: config.write_buffer_high_water,
            read_buffer: ReadBuffer::new(config.read_chunk_size),
            unflushed: false,
            timer: None,
            close_signal: None,
            peer_close: None,
        }
    }

    /// The deadline the timer is set for, if it was ever set.
    #[inline]
    pub(super) fn timer_deadline(&self) -> Option<Instant> {
        self.timer.as_ref().map(EngineTimer::deadline)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Inner<S> {
    /// Inline into its one caller, `WebSocket::poll_received_io`, itself out of line: one call
    /// per receive that reads or waits, as many as before the split into this file.
    #[inline(always)]
    pub(super) fn poll_recv<T: Received>(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        // The caller found nothing buffered: do I/O until a message, the end, or a wait.
        let mut timer_fired = false;
        loop {
            // Open, the busy case, inline: write what is queued (replies, pongs, close frames)
            // before waiting for more. Pending is fine: the stream wakes us for either direction.
            let step = if self.conn.transport() == Transport::Open {
                self.poll_write_queued(cx)
            } else {
                self.poll_transport(cx)
            };
            let write_blocked = match step {
                Poll::Ready(Some(end)) => return Poll::Ready(end.err().map(Err)),
                Poll::Ready(None) if self.conn.transport() == Transport::Closed => {
                    return Poll::Ready(None);
                }
                Poll::Ready(None) => false,
                Poll::Pending => true,
            };
            // While writing is blocked, no read when it cannot help:
            // - Backpressure on input: while the pongs we owe pile up unwritten past the
            //   high-water mark (a peer that sends pings but does not read the pongs), read
            //   nothing more. Not for the application's own output: with a peer that echoes as
            //   it reads, both sides would then wait for each other forever.
            // - Finishing (the peer's EOF came, or the closing handshake is done, RFC 6455
            //   §7.1.1): all that is left is writing out and closing, which the stream's write
            //   wake-up or the close deadline resumes. A read after EOF is EOF again at once:
            //   reading here spun inside this one poll for good (a peer that half-closed and
            //   stopped reading; hyper's HTTP/2 stream after its client dropped it).
            let filled = if write_blocked
                && (self.conn.transport() == Transport::Finish
                    || self.conn.queued_auto_replies() >= self.high_water)
            {
                Poll::Pending
            } else {
                self.read_buffer.poll_fill(&mut self.conn, &mut self.stream, cx)
            };
            match filled {
                Poll::Ready(Ok(0)) => {
                    self.conn.receive_eof();
                }
                Poll::Ready(Ok(_)) => {
                    self.conn.note_input();
                    if let Some(next) = take_next::<T>(&mut self.conn) {
                        if next.as_ref().is_ok_and(T::is_close) {
                            self.note_peer_close(&next);
                            // As in `WebSocket::poll_received`: the reply goes out now.
                            let _ = self.poll_transport(cx);
                        }
                        return Poll::Ready(Some(next));
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(self.end_with(e.into())))),
                // About to wait: the only time the timer and the shutdown signal are looked at,
                // so the busy path pays nothing for them, and the moment to give back empty
                // buffers.
                Poll::Pending => {
                    if self.going_away(Some(cx)) {
                        continue;
                    }
                    if !write_blocked {
                        // Before the timer: it may start the deflate linger's deadline.
                        self.conn.linger_deflate();
                    }
                    if self.poll_timer(cx) {
                        timer_fired = true;
                        continue;
                    }
                    if write_blocked {
                        // A wait all the same: for the socket, however long the peer stalls.
                        if socket_wait() {
                            self.conn.release_idle_deflate();
                        }
                    } else {
                        self.read_buffer.wait(&mut self.conn, timer_fired);
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// Keeps the close frame the peer sent (see `peer_close`).
    #[cold]
    pub(super) fn note_peer_close<T: Received>(&mut self, next: &Result<T, Error>) {
        if let Ok(next) = next {
            self.peer_close = next.close_frame().cloned().map(Box::new);
        }
    }

    /// Does what the engine asks of the stream (RFC 6455 §7.1.1). `Ready(None)`: carry on
    /// reading; `Ready(Some(result))`: the stream is closed, with the error to report, if any;
    /// `Pending`: writing is blocked.
    pub(super) fn poll_transport(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), Error>>> {
        match self.conn.transport() {
            transport @ (Transport::ShutdownWrite | Transport::Finish) => {
                if let Err(e) = ready!(self.poll_write_out(cx)) {
                    return Poll::Ready(Some(Err(self.end_with(e))));
                }
                // Best effort: the peer may be gone already.
                let _ = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
                if transport == Transport::ShutdownWrite {
                    self.conn.write_shut_down();
                    return Poll::Ready(None);
                }
                Poll::Ready(Some(self.close_transport()))
            }
            Transport::Abort => Poll::Ready(Some(self.close_transport())),
            Transport::Closed => Poll::Ready(None),
            _ => self.poll_write_queued(cx),
        }
    }

    /// Open: writes what is queued (replies, pongs, close frames). Same answers as
    /// [`poll_transport`](Self::poll_transport).
    #[inline(always)]
    fn poll_write_queued(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), Error>>> {
        if self.conn.transmit().is_empty() && !self.unflushed {
            return Poll::Ready(None);
        }
        // Inline here, the path of every reply to a message; out of line everywhere else.
        self.write_out(cx).map(|r| r.err().map(|e| Err(self.end_with(e))))
    }

    /// The transport is closed: the result to end the stream with.
    fn close_transport(&mut self) -> Result<(), Error> {
        // Before the engine lets its buffers go: the read buffer can serve the next connection.
        self.read_buffer.give_back(&mut self.conn);
        self.conn.transport_closed();
        self.conn.take_error().map_or(Ok(()), |e| Err(e.into()))
    }

    /// The stream failed: the connection is over. The engine's own error, if it had one (the
    /// violation that failed the connection), explains more than the stream's.
    fn end_with(&mut self, error: Error) -> Error {
        self.read_buffer.give_back(&mut self.conn);
        self.conn.transport_closed();
        self.conn.take_error().map_or(error, Error::from)
    }

    /// The engine's one timer: sleeps until its next deadline, and when that passes tells the
    /// engine the time. Returns whether it did (there may be a ping or a close to act on).
    #[inline(always)]
    fn poll_timer(&mut self, cx: &mut Context<'_>) -> bool {
        // No deadline (keepalive off, no close under way): decided inline, in the caller.
        match self.conn.poll_timeout() {
            Some(deadline) => self.poll_timer_until(Instant::from_std(deadline), cx),
            None => false,
        }
    }

    /// [`poll_timer`](Self::poll_timer) with a deadline. The usual case (the timer is set for
    /// this deadline and will wake this task) is decided inline: the keepalive deadline stays put
    /// while messages flow, so it is the case of every wait of a busy connection.
    #[inline(always)]
    fn poll_timer_until(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        if self
            .timer
            .as_ref()
            .is_some_and(|timer| timer.is_set(deadline, cx))
        {
            return false;
        }
        self.poll_timer_reset(deadline, cx)
    }

    /// [`poll_timer_until`](Self::poll_timer_until) when the timer is not set as it should be.
    fn poll_timer_reset(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        let timer = match &mut self.timer {
            Some(timer) => timer,
            None => self.timer.insert(EngineTimer::new(deadline)),
        };
        if !timer.elapsed(deadline, cx) {
            return false;
        }
        // tokio's clock, so that tests can pause and advance it.
        self.conn.handle_timeout(Instant::now().into_std());
        true
    }

    /// Once the server is shutting down (looked at with `cx` while waiting, else on the send
    /// path), queues close 1001, after which sends fail with `Error::Closed`. Returns whether it
    /// did, so that the caller writes it.
    #[inline]
    pub(super) fn going_away(&mut self, cx: Option<&mut Context<'_>>) -> bool {
        let begun = match (&mut self.close_signal, cx) {
            (Some(watch), Some(cx)) => watch.poll_begun(cx),
            (Some(watch), None) => watch.begun(),
            (None, _) => false,
        };
        begun && self.close_going_away()
    }

    /// The shutdown has begun: queues close 1001 unless a close was sent already.
    #[cold]
    fn close_going_away(&mut self) -> bool {
        self.close_signal = None;
        let frame = CloseFrame::new(sockeye_proto::CloseCode::GOING_AWAY, "server shutting down");
        self.conn.close_state() == CloseState::Open && self.conn.close(Some(frame)).is_ok()
    }

    /// Writes everything queued, then flushes the stream. The sending side's waits give the
    /// pooled permessage-deflate states back at once (a wait for input lets them linger, its
    /// timer running; here nothing may poll again, issue 31): while the socket
    /// takes no more (a peer that stalls), and once the queue is written with nothing buffered to
    /// read, where a handler that only sends may go quiet without ever waiting for input. With
    /// bytes buffered the application is still reading (a `send` per echoed message): it keeps
    /// them until its next wait.
    pub(super) fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let written = self.write_out(cx);
        let idle = match written {
            Poll::Pending => socket_wait(),
            Poll::Ready(_) => self.conn.buffered() == 0,
        };
        if idle {
            self.conn.release_idle_deflate();
        }
        written
    }

    /// [`poll_write_out`](Self::poll_write_out)'s body, inlined where the receive path writes.
    #[inline(always)]
    fn write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if matches!(self.conn.transport(), Transport::Abort | Transport::Closed) {
            return Poll::Ready(Err(Error::closed()));
        }
        while !self.conn.transmit().is_empty() {
            self.unflushed = true;
            let transmit = self.conn.transmit();
            let n = if transmit.is_contiguous() {
                // One piece (the busy case: a batch of small frames): a plain write, without
                // the vectored path's array of 64 I/O slices to fill.
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, transmit.chunk()))?;
                transmit.advance(n);
                n
            } else {
                ready!(tokio_util::io::poll_write_buf(
                    Pin::new(&mut self.stream),
                    cx,
                    transmit
                ))?
            };
            if n == 0 {
                return Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()));
            }
        }
        ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
        self.unflushed = false;
        Poll::Ready(Ok(()))
    }
}

/// Whether the socket's Pending just returned is a wait for the socket. With the task's budget
/// spent (tokio's coop: a run of messages ready at once, or of writes), every socket poll says
/// Pending to give the scheduler its turn, and the connection is as busy as before: giving its
/// deflate states back there cost the main job one pool round trip every other message (its
/// client pipelines, callgrind: 10,190 borrows for 20,000 messages instead of ~300).
#[inline]
fn socket_wait() -> bool {
    tokio::task::coop::has_budget_remaining()
}
