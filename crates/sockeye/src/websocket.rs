//! [`WebSocket`]: the engine driven over an async byte stream.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use futures_util::{Sink, Stream};
use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::{
    CloseFrame, CloseState, Connection, DataKind, Incoming, Message, PreparedMessage, Role, Transport,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::Instant;

mod driver;
mod read_buffer;
mod received;
mod timer;

use driver::Inner;
use received::{Received, take_next};

use crate::config::Config;
use crate::error::Error;
use crate::sender::{self, SendSteps, Sender};
use crate::shutdown::CloseSignal;
use crate::wakers::{Side, Wakers};

/// A WebSocket connection over a byte stream `S` (a `TcpStream`, a TLS stream, anything
/// `AsyncRead + AsyncWrite`).
///
/// Receive with [`recv`](Self::recv) or as a [`Stream`] of `Result<Message, Error>`; send with
/// [`send`](Self::send) or as a [`Sink`] of [`Message`]. For a reader task and a writer task,
/// [`split`](Self::split) it (or use [`futures_util::StreamExt::split`]: both are safe, see
/// *Splitting* below).
///
/// Writes are batched: [`feed`](Self::feed) (or `Sink::start_send`) only queues,
/// and the queue is written with one vectored write when the application flushes, when it reaches
/// [`Config::write_buffer_high_water`], or when the receiving side runs out of buffered input. An
/// echo loop that feeds every reply and never flushes by hand therefore writes once per batch of
/// input. Pongs and close replies go out the same way, without the application's help.
///
/// The closing handshake (RFC 6455 §7), keepalive and every deadline are the engine's
/// ([`Connection`]): this type moves bytes, keeps one timer for the engine's next deadline, and
/// closes the stream when the engine says so. After a close frame is received the stream yields
/// `Message::Close` and then ends; when the peer breaks the protocol, the connection is failed
/// with the right status code (RFC 6455 §7.1.7) and the error is returned once the stream is
/// closed.
///
/// Splitting, with [`split`](Self::split) or `StreamExt::split`, is safe: each half is woken by
/// its own events whoever touches the stream, and the reader alone answers pings and closes.
///
/// # Cancel safety
///
/// Each method below may be dropped at an `.await` (in `tokio::select!`, say):
///
/// - [`recv`](Self::recv) is cancel safe: a message is taken from the engine only when it is
///   returned, so dropping it loses nothing; the next call picks up where it stopped.
/// - [`send`](Self::send) queues the message at its first poll, before any wait: once polled,
///   dropping it leaves the message queued (it is written by the next `send`, `flush` or
///   `recv`); dropped before its first poll, nothing was queued. Never half a message.
/// - [`feed`](Self::feed) and [`send_fragment`](Self::send_fragment) first wait for room below the
///   high-water mark: dropped while waiting, the message was not queued (and is dropped with the
///   future: keep a clone of a message that must not be lost); once they return, it is queued.
/// - [`flush`](Self::flush) may be dropped at any time: what it did not write stays queued.
/// - [`close`](Self::close) queues the close frame at its first poll; dropped later, the closing
///   handshake goes on: keep calling `recv` until `None` to finish it.
pub struct WebSocket<S> {
    /// Boxed: a `WebSocket` is moved (into a task, into the shared state of its split halves)
    /// as a pointer, so that a split connection does not hold two copies' worth of memory (the
    /// moved-from slot in the task's future stays as large as what was moved).
    inner: Box<Inner<S>>,
    /// The wakers of the task receiving and the task sending.
    wakers: Wakers,
}

impl<S> std::fmt::Debug for WebSocket<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocket")
            .field("conn", &self.inner.conn)
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
            // RFC 6455 §10.3: mask keys from the operating system's random source.
            Role::Client => Connection::client(config.protocol.clone(), Box::new(rand::random)),
            Role::Server => Connection::server(config.protocol.clone()),
        };
        conn.set_deflate(deflate);
        if !leftover.is_empty() {
            conn.receive(leftover);
            // Still waiting, as the engine starts: nothing was read for the application, which
            // may never read (a handler that only sends); its buffered bytes would keep it from
            // looking idle, so a message it inflates or pushes gives its state back at once.
            conn.release_idle_deflate();
        }
        // The engine never reads a clock: it learns the time here, then at its deadlines.
        conn.handle_timeout(Instant::now().into_std());

        WebSocket {
            inner: Box::new(Inner::new(stream, conn, config)),
            wakers: Wakers::default(),
        }
    }

    /// Ties this connection to a close signal (a server's shutdown): once it fires, the
    /// connection sends close 1001 (going away) at its next receive or send, and sends fail.
    pub(crate) fn set_close_signal(&mut self, signal: CloseSignal) {
        self.inner.close_signal = Some(signal);
    }

    /// Ties this connection to `shutdown`, as a [`Server`](crate::Server) ties its own: once
    /// [`ShutdownHandle::shutdown`](crate::ShutdownHandle::shutdown) is called (or if it was
    /// already), the connection sends close 1001 (going away) at its next receive or send —
    /// a receive waiting for input wakes for it — and sends fail. For a connection accepted by
    /// another server (hyper, axum: [`Upgrade`](crate::upgrade::Upgrade)). Replaces any signal
    /// it was tied to.
    ///
    /// ```no_run
    /// # async fn handle(mut ws: sockeye::WebSocket<tokio::net::TcpStream>) {
    /// let shutdown = sockeye::ShutdownHandle::new();
    /// ws.close_on_shutdown(&shutdown);
    /// // elsewhere, on Ctrl-C: shutdown.shutdown();
    /// # }
    /// ```
    pub fn close_on_shutdown(&mut self, shutdown: &crate::shutdown::ShutdownHandle) {
        self.set_close_signal(shutdown.0.watch());
    }

    /// The next message: `None` once the connection is closed. Received pings are answered, and
    /// a received close frame is answered and returned as `Message::Close`, before the end. Cancel
    /// safe.
    pub async fn recv(&mut self) -> Option<Result<Message, Error>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Sends a message and flushes it, waiting while the socket is busy. The message is queued at
    /// the first poll (see *Cancel safety* on [`WebSocket`]).
    pub async fn send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::send(self, message.into()).await
    }

    /// Queues a message if the write buffer is below its high-water mark, without waiting:
    /// `Err(Error::WriteBufferFull)` says the peer is not keeping up and the message was not
    /// queued (a broadcaster can then skip or drop that peer). The queue is written by the next
    /// `send`, `flush` or receive. [`Message`] clones are cheap (the payload is shared), so keep a
    /// clone if the message must not be lost.
    pub fn try_send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::try_send(self, message.into())
    }

    /// Bytes queued for the peer and not yet handed to the socket (like a browser's
    /// `bufferedAmount`).
    pub fn buffered_amount(&self) -> usize {
        self.inner.conn.transmit_len()
    }

    /// Queues a message without flushing (see the batching note on [`WebSocket`]). Waits first if
    /// the queue is over the high-water mark.
    pub async fn feed(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::feed(self, message.into()).await
    }

    /// Queues a message prepared once for many connections (see [`PreparedMessage`]) without
    /// flushing, waiting first if the queue is over the high-water mark. With permessage-deflate
    /// and no context takeover, its compressed form is shared by every connection with the same
    /// level and window.
    pub async fn feed_prepared(&mut self, message: &PreparedMessage) -> Result<(), Error> {
        sender::feed_prepared(self, message).await
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
        sender::send_batch(self, messages).await
    }

    /// Sends one fragment of a message (RFC 6455 §5.4); see [`Connection::send_fragment`].
    pub async fn send_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        sender::send_fragment(self, kind, payload, fin).await
    }

    /// Sends one message of `kind` from a [`Stream`] of chunks, as fragments (RFC 6455 §5.4),
    /// and flushes it: for messages too large to hold, or produced as they go. Memory stays
    /// bounded — a chunk is queued as soon as it comes, and the source waits while the write
    /// queue is over [`Config::write_buffer_high_water`]. When the source makes us wait, what it
    /// gave is written first. Text chunks are checked as they come and must add up to UTF-8
    /// (they may split code points). With permessage-deflate, fragments are compressed as they
    /// go, each sync-flushed so the peer can inflate it at once, when the first chunk is at least
    /// the deflate config's `min_compress_size` (see [`Connection::send_fragment`]).
    ///
    /// If the source fails (or text is not UTF-8) before anything was sent, the connection goes
    /// on; after, the message cannot be finished, so the connection is closed with 1011.
    /// Either way the error is returned ([`Error::Source`] for the source's own).
    ///
    /// ```no_run
    /// # async fn demo(ws: &mut sockeye::WebSocket<tokio::net::TcpStream>) -> Result<(), sockeye::Error> {
    /// use sockeye::{Bytes, DataKind};
    /// let rows = futures_util::stream::iter((0..1_000_000).map(|i| {
    ///     Ok::<_, std::io::Error>(Bytes::from(format!("{{\"row\":{i}}}\n")))
    /// }));
    /// ws.send_stream(DataKind::Text, rows).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_stream<St, B, E>(&mut self, kind: DataKind, source: St) -> Result<(), Error>
    where
        St: Stream<Item = Result<B, E>>,
        B: Into<Bytes>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::send_source::send_stream(self, kind, source).await
    }

    /// Sends everything `reader` yields, until its end, as one message of `kind` (64 KiB
    /// fragments); see [`send_stream`](Self::send_stream) for memory, errors and text.
    ///
    /// ```no_run
    /// # async fn demo(ws: &mut sockeye::WebSocket<tokio::net::TcpStream>) -> Result<(), Box<dyn std::error::Error>> {
    /// // Everything a backend sends until it closes, as one binary message.
    /// let backend = tokio::net::TcpStream::connect("127.0.0.1:9000").await?;
    /// ws.send_reader(sockeye::DataKind::Binary, backend).await?;
    /// # Ok(()) }
    /// ```
    pub async fn send_reader<R: AsyncRead>(&mut self, kind: DataKind, reader: R) -> Result<(), Error> {
        crate::send_source::send_reader(self, kind, reader).await
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), Error> {
        sender::flush(self).await
    }

    /// Closes the connection: sends a close frame (`None`: without a status code), waits up to
    /// [`ProtocolConfig::close_timeout`](crate::ProtocolConfig::close_timeout) for the peer's
    /// reply, discarding any messages still arriving, and closes the stream. Returns the peer's
    /// close frame, if one came.
    ///
    /// The same signature as [`WebSocketWriter::close`](crate::WebSocketWriter::close): the peer's
    /// close frame when the call knows it. Here it always does when one came, as this side
    /// receives; a writer, which does not, knows it only when its close answers the peer's.
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<Option<CloseFrame>, Error> {
        sender::start_close(self, frame)?;
        let mut reply = None;
        while let Some(item) = self.recv().await {
            match item {
                Ok(Message::Close(frame)) => reply = frame,
                Ok(_) => {}
                // By kind, not `timeout()`: an engine deadline this layer does not name yet is a
                // timeout all the same.
                Err(e)
                    if matches!(
                        e.kind(),
                        crate::error::ErrorKind::Timeout | crate::error::ErrorKind::AbnormalClosure
                    ) =>
                {
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(reply)
    }

    /// The underlying stream.
    pub fn get_ref(&self) -> &S {
        &self.inner.stream
    }

    /// The protocol engine, for inspection (state, buffered bytes).
    pub fn connection(&self) -> &Connection {
        &self.inner.conn
    }

    /// Polls for the next message; the engine of [`recv`](Self::recv) and the `Stream` impl.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, Error>>> {
        self.poll_received(cx)
    }

    /// The next piece of a data message, or the next control frame, as it arrives: messages of
    /// any size in bounded memory (see [`MessageChunk`](sockeye_proto::MessageChunk)). `None`
    /// once the connection is closed. Cancel safe, like [`recv`](Self::recv); the two may be
    /// mixed between messages (a message begun here must be finished here: `recv` returns
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) until then).
    ///
    /// A streaming echo, forwarding each piece as it arrives (cut-through):
    ///
    /// ```no_run
    /// # async fn demo(mut ws: sockeye::WebSocket<tokio::net::TcpStream>) -> Result<(), sockeye::Error> {
    /// use sockeye::Incoming;
    /// while let Some(item) = ws.recv_chunk().await {
    ///     match item? {
    ///         Incoming::Chunk(piece) => ws.send_fragment(piece.kind, piece.data, piece.last).await?,
    ///         Incoming::Control(_) => {} // pings are answered, closes replied to, by the engine
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn recv_chunk(&mut self) -> Option<Result<Incoming, Error>> {
        poll_fn(|cx| self.poll_recv_chunk(cx)).await
    }

    /// Polls for the next piece or control frame; see [`recv_chunk`](Self::recv_chunk).
    pub fn poll_recv_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Incoming, Error>>> {
        self.poll_received(cx)
    }

    /// The receive path of whole messages and of pieces alike. Inline: the busy case is a
    /// few tests; the reads and waits are out of line ([`poll_received_io`](Self::poll_received_io)).
    #[inline(always)]
    fn poll_received<T: Received>(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        // The busy case: a message already buffered needs no I/O, hence no waker. It takes a unit
        // of the task's budget, as tokio's channels do: under a flood, one read brings thousands
        // of small messages, each ready at once, and a loop receiving them would never yield — a
        // `timeout` or another `select!` branch around it would not run until the flood stopped.
        // Once the budget is spent this returns Pending with the task woken, and the loop goes on
        // after the scheduler's turn. With nothing buffered the socket's own read takes the unit,
        // and a connection that waits between messages pays only the test.
        let taken = if self.inner.conn.buffered() != 0 {
            let coop = ready!(tokio::task::coop::poll_proceed(cx));
            let taken = take_next::<T>(&mut self.inner.conn);
            if taken.is_some() {
                coop.made_progress();
            }
            taken
        } else {
            take_next::<T>(&mut self.inner.conn)
        };
        if let Some(next) = taken {
            if next.as_ref().is_ok_and(T::is_close) {
                self.answer_peer_close(&next, cx);
            }
            return Poll::Ready(Some(next));
        }
        self.poll_received_io(cx)
    }

    /// The peer's close frame is handed over: sends the close reply (and, as a server, closes
    /// the stream) now, even if the application stops polling. A failure here ends the stream
    /// at the next receive; the close frame is what the application must see first.
    #[cold]
    #[inline(never)]
    fn answer_peer_close<T: Received>(&mut self, next: &Result<T, Error>, cx: &mut Context<'_>) {
        self.inner.note_peer_close(next);
        let mut io = Context::from_waker(self.wakers.select(Side::Reader, cx.waker()));
        let _ = self.inner.poll_transport(&mut io);
    }

    /// [`poll_received`](Self::poll_received) with nothing buffered to hand over: reads, or
    /// waits. Out of line: the busy case above stays small.
    #[inline(never)]
    fn poll_received_io<T: Received>(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
        let mut io = Context::from_waker(self.wakers.select(Side::Reader, cx.waker()));
        let result = self.inner.poll_recv(&mut io);
        if result.is_ready() && self.inner.conn.transport() == Transport::Closed {
            // A sender waiting for room must learn that there will be none.
            self.wakers.wake_writer();
        }
        result
    }

    /// Writes everything queued, then flushes the stream (the sending side).
    pub(crate) fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let mut io = Context::from_waker(self.wakers.select(Side::Writer, cx.waker()));
        self.inner.poll_write_out(&mut io)
    }

    /// After a step of the sending side, which may run in another task than the receiving
    /// side: when the step made the engine's next deadline earlier than the one the timer is set
    /// for (a close queued starts the close deadline), wakes the receiving side, which owns the
    /// timer, to set it again. Without this, a close sent from a writer to a peer that never
    /// answered ended the connection at the next keepalive (30 s), not at the close deadline.
    /// A later deadline needs nothing: the receiving side wakes early and sets it then.
    ///
    /// While the connection is open, sending moves no deadline (the keepalive's move with input
    /// and at the timer, on the receiving side): every step of a busy writer pays one test.
    #[inline]
    pub(crate) fn sent(&mut self) {
        if self.inner.conn.close_state() == CloseState::Open {
            return;
        }
        if let Some(deadline) = self.inner.conn.poll_timeout()
            && self
                .inner
                .timer_deadline()
                .is_none_or(|set| Instant::from_std(deadline) < set)
        {
            self.wakers.wake_reader();
        }
    }

    /// Waits until the write queue is below the high-water mark (the sending side).
    #[inline]
    pub(crate) fn poll_below_high_water(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        if self.inner.going_away(None) || self.is_full() {
            ready!(self.poll_write_out(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// The sending steps of the send API's one implementation (sender.rs), for a `WebSocket` and,
/// under its lock, a `WebSocketWriter`.
impl<S: AsyncRead + AsyncWrite + Unpin> SendSteps for WebSocket<S> {
    #[inline]
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.poll_below_high_water(cx)
    }

    #[inline]
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        WebSocket::poll_write_out(self, cx)
    }

    #[inline]
    fn queue(&mut self, message: Message) -> Result<(), Error> {
        self.inner.going_away(None);
        self.queue_unchecked(message)
    }

    #[inline]
    fn queue_unchecked(&mut self, message: Message) -> Result<(), Error> {
        Ok(self.inner.conn.send(message)?)
    }

    fn queue_prepared(&mut self, message: &PreparedMessage) -> Result<(), Error> {
        Ok(self.inner.conn.send_prepared(message)?)
    }

    fn queue_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        Ok(self.inner.conn.send_fragment(kind, payload, fin)?)
    }

    fn try_queue(&mut self, message: Message) -> Result<(), Error> {
        self.inner.going_away(None);
        if self.is_full() {
            return Err(Error::WriteBufferFull);
        }
        self.queue_unchecked(message)
    }

    #[inline]
    fn is_full(&self) -> bool {
        self.inner.conn.transmit_len() >= self.inner.high_water
    }

    /// When it answers a close the peer sent first (held by `auto_close_reply: false`), the
    /// handshake is over and the transport is for the receiving side to finish: wake it, it may
    /// be waiting (in another task) for input that will not come.
    fn queue_close(&mut self, frame: Option<CloseFrame>) -> Result<(), Error> {
        self.inner.conn.close(frame)?;
        if self.inner.conn.transport() != Transport::Open {
            self.wakers.wake_reader();
        }
        Ok(())
    }

    fn peer_close(&self) -> Option<CloseFrame> {
        self.inner.peer_close.as_deref().cloned()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sender for WebSocket<S> {
    type Conn = Self;

    #[inline(always)]
    fn step<R>(&mut self, f: impl FnOnce(&mut Self) -> R) -> R {
        f(self)
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

    // The sending side of `StreamExt::split`'s halves too: each step tells the receiving side
    // when it moved the engine's next deadline (`sent`).

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        let ready = this.poll_below_high_water(cx);
        this.sent();
        ready
    }

    fn start_send(self: Pin<&mut Self>, message: Message) -> Result<(), Error> {
        self.get_mut().queue_unchecked(message)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        self.get_mut().poll_write_out(cx)
    }

    /// Sends a close frame (1000, normal closure, unless one was sent already) and flushes it. The
    /// peer's reply arrives on the receiving side, which then ends.
    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        let this = self.get_mut();
        // Also the answer to a peer's close held by `auto_close_reply: false`; a close already
        // sent makes this do nothing.
        if this.inner.conn.close_state() != CloseState::Closed {
            let queued = this.queue_close(Some(CloseFrame::new(sockeye_proto::CloseCode::NORMAL, "")));
            this.sent();
            queued?;
        }
        this.poll_write_out(cx)
    }
}
