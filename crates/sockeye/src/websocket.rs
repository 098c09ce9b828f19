//! [`WebSocket`]: the engine driven over an async byte stream.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Sink, Stream};
use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::{CloseFrame, CloseState, Connection, DataKind, Message, Role};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::config::Config;
use crate::error::Error;

/// What the I/O side of the connection is doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Reading and writing.
    Active,
    /// The stream is finished: the next poll returns `None`.
    Done,
}

/// A WebSocket connection over a byte stream `S` (a `TcpStream`, a TLS stream, anything
/// `AsyncRead + AsyncWrite`).
///
/// Receive with [`recv`](Self::recv) or as a [`Stream`] of `Result<Message, Error>`; send with
/// [`send`](Self::send) or as a [`Sink`] of [`Message`]. [`split`](futures_util::StreamExt::split)
/// gives halves for two tasks.
///
/// Writes are batched: [`feed`](futures_util::SinkExt::feed) (or `Sink::start_send`) only queues,
/// and the queue is written with one vectored write when the application flushes, when it reaches
/// [`Config::write_buffer_high_water`], or when the receiving side runs out of buffered input. An
/// echo loop that feeds every reply and never flushes by hand therefore writes once per batch of
/// input. Pongs and close replies go out the same way, without the application's help.
///
/// The closing handshake (RFC 6455 §7) is handled here: after a close frame is received the stream
/// yields `Message::Close` and then ends; when the peer breaks the protocol, the connection is
/// closed with the right status code first and the error is returned after.
pub struct WebSocket<S> {
    stream: S,
    conn: Connection,
    close_timeout: Duration,
    high_water: usize,
    read_chunk: usize,
    phase: Phase,
    /// An error to return once the connection has been closed.
    pending_error: Option<Error>,
    /// Set when a close frame has been sent: the peer must finish the handshake by then.
    close_deadline: Option<Pin<Box<Sleep>>>,
    /// The peer has closed its side of the stream.
    read_eof: bool,
    write_shut: bool,
    /// Bytes were handed to the stream but its flush has not completed. A TLS stream accepts
    /// plaintext into its own buffer and may still owe the socket the records; without this flag
    /// an empty transmit queue would look like "nothing to do" and the data would sit there.
    unflushed: bool,
    keepalive: Option<Keepalive>,
    /// Set by a [`Server`](crate::Server): its graceful shutdown closes this connection with 1001.
    shutdown: Option<Shutdown>,
}

/// Keepalive pings (see [`Config::keepalive_interval`]). Input of any kind proves the peer alive.
#[derive(Debug)]
struct Keepalive {
    interval: Duration,
    timeout: Duration,
    last_input: Instant,
    /// When the outstanding keepalive ping was sent.
    ping_sent: Option<Instant>,
    /// Created on first use: a connection that never waits for input never needs it.
    timer: Option<Pin<Box<Sleep>>>,
}

/// A server's shutdown signal, as a connection sees it.
struct Shutdown {
    flag: std::sync::Arc<std::sync::atomic::AtomicBool>,
    signal: Pin<Box<WaitForCancellationFutureOwned>>,
}

/// What the timers say when the connection is about to wait for input.
enum Idle {
    /// Nothing due: wait.
    Wait,
    /// Something was queued (a ping, a close frame): go round again to write it.
    Queued,
    /// The peer did not answer a keepalive ping in time.
    Dead,
}

impl<S> std::fmt::Debug for WebSocket<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocket")
            .field("conn", &self.conn)
            .field("phase", &self.phase)
            .finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocket<S> {
    /// Wraps a stream on which the opening handshake has already happened. `leftover` holds bytes
    /// that were read after the handshake and belong to the WebSocket connection; `deflate` is the
    /// compression state the handshake negotiated, if any.
    pub fn from_upgraded(
        stream: S,
        role: Role,
        config: &Config,
        leftover: &[u8],
        deflate: Option<PerMessageDeflate>,
    ) -> Self {
        let mut conn = match role {
            Role::Client => Connection::with_mask_keys(role, config.protocol.clone(), Box::new(rand::random)),
            Role::Server => Connection::new(role, config.protocol.clone()),
        };
        conn.set_deflate(deflate);
        conn.receive(leftover);
        WebSocket {
            stream,
            conn,
            close_timeout: config.close_timeout,
            high_water: config.write_buffer_high_water,
            read_chunk: config.read_chunk_size,
            phase: Phase::Active,
            pending_error: None,
            close_deadline: None,
            read_eof: false,
            write_shut: false,
            unflushed: false,
            keepalive: config.keepalive_interval.map(|interval| Keepalive {
                interval,
                timeout: config.keepalive_timeout,
                last_input: Instant::now(),
                ping_sent: None,
                timer: None,
            }),
            shutdown: None,
        }
    }

    /// Ties this connection to a server's shutdown: once it begins, the connection sends close
    /// 1001 (going away) at its next receive or send, and sends fail.
    pub(crate) fn set_shutdown(&mut self, shutdown: &crate::server::ShutdownSignal) {
        let signal = Box::pin(shutdown.token.clone().cancelled_owned());
        let flag = std::sync::Arc::clone(&shutdown.flag);
        self.shutdown = Some(Shutdown { flag, signal });
    }

    /// The next message: `None` once the connection is closed. Received pings are answered, and
    /// a received close frame is answered and returned as `Message::Close`, before the end.
    pub async fn recv(&mut self) -> Option<Result<Message, Error>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Sends a message and flushes it, waiting while the socket is busy.
    pub async fn send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        if self.check_shutdown() {
            poll_fn(|cx| self.poll_write_out(cx)).await?;
        }
        self.conn.send(message.into())?;
        poll_fn(|cx| self.poll_write_out(cx)).await
    }

    /// Queues a message if the write buffer is below its high-water mark, without waiting:
    /// `Err(Error::WriteBufferFull)` says the peer is not keeping up and the message was not
    /// queued (a broadcaster can then skip or drop that peer). The queue is written by the next
    /// `send`, `flush` or receive. [`Message`] clones are cheap (the payload is shared), so keep a
    /// clone if the message must not be lost.
    pub fn try_send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        self.check_shutdown();
        if self.conn.transmit().len() >= self.high_water {
            return Err(Error::WriteBufferFull);
        }
        Ok(self.conn.send(message.into())?)
    }

    /// Bytes queued for the peer and not yet handed to the socket (like a browser's
    /// `bufferedAmount`).
    pub fn buffered_amount(&mut self) -> usize {
        self.conn.transmit().len()
    }

    /// Queues a message without flushing (see the batching note on [`WebSocket`]). Waits first if
    /// the queue is over the high-water mark.
    pub async fn feed(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        poll_fn(|cx| self.poll_below_high_water(cx)).await?;
        self.conn.send(message.into())?;
        Ok(())
    }

    /// Sends many messages and flushes them: the fastest way to push a burst. Messages are
    /// encoded back to back into the write queue without an `await` apiece, and the queue is
    /// written with one vectored write each time it reaches [`Config::write_buffer_high_water`]
    /// (waiting there while the peer is slow), then once at the end.
    ///
    /// If an error occurs, the messages before it were queued and the rest were not.
    ///
    /// ```no_run
    /// # async fn demo(ws: &mut sockeye::WebSocket<tokio::net::TcpStream>) -> Result<(), sockeye::Error> {
    /// use sockeye::Message;
    /// let tick = Message::text("tick");
    /// ws.send_batch(std::iter::repeat_n(tick, 1000)).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_batch<I>(&mut self, messages: I) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let mut messages = messages.into_iter().peekable();
        while messages.peek().is_some() {
            poll_fn(|cx| self.poll_below_high_water(cx)).await?;
            for message in messages.by_ref() {
                self.conn.send(message.into())?;
                if self.conn.transmit().len() >= self.high_water {
                    break;
                }
            }
        }
        self.flush().await
    }

    /// Sends one fragment of a message (RFC 6455 §5.4); see [`Connection::send_fragment`].
    pub async fn send_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        poll_fn(|cx| self.poll_below_high_water(cx)).await?;
        self.conn.send_fragment(kind, payload, fin)?;
        Ok(())
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), Error> {
        poll_fn(|cx| self.poll_write_out(cx)).await
    }

    /// Closes the connection: sends a close frame (`None`: without a status code), waits up to
    /// [`Config::close_timeout`] for the peer's reply, discarding any messages still arriving, and
    /// closes the stream. Returns the peer's close frame, if one came.
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<Option<CloseFrame>, Error> {
        self.conn.close(frame)?;
        let mut reply = None;
        while let Some(item) = self.recv().await {
            match item {
                Ok(Message::Close(frame)) => reply = frame,
                Ok(_) => {}
                Err(Error::Timeout(_)) | Err(Error::AbnormalClosure) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(reply)
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The protocol engine, for inspection (state, buffered bytes).
    pub fn connection(&self) -> &Connection {
        &self.conn
    }

    /// Polls for the next message; the engine of [`recv`](Self::recv) and the `Stream` impl.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, Error>>> {
        loop {
            if self.phase == Phase::Done {
                return Poll::Ready(None);
            }
            match self.conn.poll_message() {
                Ok(Some(message)) => {
                    if matches!(message, Message::Close(_)) {
                        // Send the close reply now, even if the application stops polling.
                        let _ = self.poll_write_out(cx);
                    }
                    return Poll::Ready(Some(Ok(message)));
                }
                Ok(None) => {}
                Err(e) => {
                    // The engine queued a close frame; report the error once the close is done.
                    self.pending_error = Some(e.into());
                    continue;
                }
            }
            // Out of buffered input: write what is queued (replies, pongs, close frames) before
            // waiting for more. Pending is fine: the waker is registered for both directions.
            let mut write_blocked = false;
            if !self.conn.transmit().is_empty() || self.unflushed {
                match self.poll_write_out(cx) {
                    Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(self.finish_with(e)))),
                    Poll::Ready(Ok(())) => {}
                    Poll::Pending => write_blocked = true,
                }
            }
            if self.conn.close_state() != CloseState::Open
                && let Some(result) = ready!(self.poll_closing(cx))
            {
                return Poll::Ready(result);
            }
            // Backpressure on input: while our output is over the high-water mark (a peer that
            // sends pings but does not read the pongs, say), read nothing more.
            let filled = if write_blocked && self.conn.transmit().len() >= self.high_water {
                Poll::Pending
            } else {
                self.poll_fill(cx)
            };
            match filled {
                Poll::Ready(Ok(0)) => {
                    self.read_eof = true;
                    let abnormal = self.conn.receive_eof().is_some();
                    let error = self
                        .pending_error
                        .take()
                        .or(abnormal.then_some(Error::AbnormalClosure));
                    self.phase = Phase::Done;
                    return Poll::Ready(error.map(Err));
                }
                Poll::Ready(Ok(_)) => {}
                Poll::Ready(Err(e)) => return Poll::Ready(Some(Err(self.finish_with(e.into())))),
                // About to wait: the only time timers and the shutdown signal are looked at, so
                // the busy path pays nothing for them, and the moment to give back empty buffers.
                Poll::Pending => match self.poll_idle(cx) {
                    Idle::Wait if !write_blocked => {
                        self.conn.release_idle_buffers();
                        return Poll::Pending;
                    }
                    Idle::Wait => return Poll::Pending,
                    Idle::Queued => {}
                    Idle::Dead => {
                        self.phase = Phase::Done;
                        return Poll::Ready(Some(Err(Error::Timeout("keepalive"))));
                    }
                },
            }
        }
    }

    /// Checks the server's shutdown signal and the keepalive timer before waiting for input.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Idle {
        if let Some(shutdown) = &mut self.shutdown
            && shutdown.signal.as_mut().poll(cx).is_ready()
        {
            self.shutdown = None;
            if self.begin_going_away() {
                return Idle::Queued;
            }
        }
        if self.conn.close_state() != CloseState::Open {
            return Idle::Wait;
        }
        let Some(keepalive) = &mut self.keepalive else {
            return Idle::Wait;
        };
        let timer = keepalive.timer.get_or_insert_with(|| {
            Box::pin(tokio::time::sleep_until(
                keepalive.last_input + keepalive.interval,
            ))
        });
        loop {
            if timer.as_mut().poll(cx).is_pending() {
                return Idle::Wait;
            }
            let now = Instant::now();
            match keepalive.ping_sent {
                None if keepalive.last_input + keepalive.interval > now => {
                    // Input arrived since the timer was set: push it back.
                    timer.as_mut().reset(keepalive.last_input + keepalive.interval);
                }
                None => {
                    keepalive.ping_sent = Some(now);
                    timer.as_mut().reset(now + keepalive.timeout);
                    // Cannot fail: the connection is open and the payload is short.
                    let _ = self
                        .conn
                        .send(Message::Ping(Bytes::from_static(b"sockeye keepalive")));
                    return Idle::Queued;
                }
                Some(sent) if keepalive.last_input >= sent => {
                    keepalive.ping_sent = None;
                    timer.as_mut().reset(keepalive.last_input + keepalive.interval);
                }
                Some(_) => return Idle::Dead,
            }
        }
    }

    /// Once the server is shutting down, queues close 1001 (after which sends fail with
    /// `Error::Closed`). Returns whether it did, so that the caller flushes it.
    fn check_shutdown(&mut self) -> bool {
        if self
            .shutdown
            .as_ref()
            .is_some_and(|s| s.flag.load(std::sync::atomic::Ordering::Acquire))
        {
            self.shutdown = None;
            return self.begin_going_away();
        }
        false
    }

    /// Starts the closing handshake with 1001 (going away) if the connection is open.
    fn begin_going_away(&mut self) -> bool {
        if self.conn.close_state() != CloseState::Open {
            return false;
        }
        let frame = CloseFrame::new(sockeye_proto::CloseCode::GOING_AWAY, "server shutting down");
        self.conn.close(Some(frame)).is_ok()
    }

    /// While closing: enforce the deadline, and once the handshake is done close the transport
    /// (§7.1.1: the server closes TCP first; the client waits for it). `Ready(Some(..))` ends the
    /// stream with that result; `Ready(None)` means keep reading.
    fn poll_closing(&mut self, cx: &mut Context<'_>) -> Poll<Option<Option<Result<Message, Error>>>> {
        let timeout = self.close_timeout;
        let deadline = self
            .close_deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if deadline.as_mut().poll(cx).is_ready() {
            self.phase = Phase::Done;
            // A finished handshake whose server never closed TCP is no error: we close it.
            let timed_out = (!self.conn.is_closed()).then_some(Error::Timeout("close"));
            return Poll::Ready(Some(self.pending_error.take().or(timed_out).map(Err)));
        }
        if !self.conn.is_closed() {
            return Poll::Ready(None);
        }
        if let Err(e) = ready!(self.poll_write_out(cx)) {
            return Poll::Ready(Some(Some(Err(self.finish_with(e)))));
        }
        if self.conn.role() == Role::Server || self.read_eof {
            if !self.write_shut {
                // Best effort: the peer may already be gone.
                let _ = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
                self.write_shut = true;
            }
            self.phase = Phase::Done;
            return Poll::Ready(Some(self.pending_error.take().map(Err)));
        }
        // A client waits for the server's FIN: keep reading.
        Poll::Ready(None)
    }

    /// Reads once from the stream into the engine's buffer.
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let buf = self.conn.read_buffer();
        if buf.capacity() - buf.len() < self.read_chunk / 4 {
            buf.reserve(self.read_chunk);
        }
        let result = ready!(tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, buf));
        if let (Some(keepalive), Ok(1..)) = (&mut self.keepalive, &result) {
            keepalive.last_input = Instant::now();
        }
        Poll::Ready(result)
    }

    /// Writes everything queued, then flushes the stream.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        while !self.conn.transmit().is_empty() {
            self.unflushed = true;
            let n = ready!(tokio_util::io::poll_write_buf(
                Pin::new(&mut self.stream),
                cx,
                self.conn.transmit()
            ))?;
            if n == 0 {
                return Poll::Ready(Err(std::io::Error::from(std::io::ErrorKind::WriteZero).into()));
            }
        }
        ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
        self.unflushed = false;
        Poll::Ready(Ok(()))
    }

    /// Waits until the write queue is below the high-water mark (backpressure).
    fn poll_below_high_water(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if self.check_shutdown() || self.conn.transmit().len() >= self.high_water {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }

    fn finish_with(&mut self, error: Error) -> Error {
        self.phase = Phase::Done;
        self.pending_error.take().unwrap_or(error)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for WebSocket<S> {
    type Item = Result<Message, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Message> for WebSocket<S> {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.get_mut().poll_below_high_water(cx)
    }

    fn start_send(self: Pin<&mut Self>, message: Message) -> Result<(), Error> {
        Ok(self.get_mut().conn.send(message)?)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.get_mut().poll_write_out(cx)
    }

    /// Sends a close frame (1000, normal closure, unless one was sent already) and flushes it. The
    /// peer's reply arrives on the receiving side, which then ends.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        if this.conn.close_state() == CloseState::Open {
            this.conn
                .close(Some(CloseFrame::new(sockeye_proto::CloseCode::NORMAL, "")))?;
        }
        this.poll_write_out(cx)
    }
}

/// The deadline helper the handshakes share.
pub(crate) async fn with_deadline<T>(
    limit: Duration,
    what: &'static str,
    fut: impl Future<Output = Result<T, Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, fut).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout(what)),
    }
}
