//! [`WebSocket`]: the engine driven over an async byte stream.

use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use bytes::{Buf, Bytes};
use futures_util::{Sink, Stream};
use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::{
    CloseFrame, CloseState, Connection, DataKind, Incoming, Message, PreparedMessage, Role, Transport,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::{Instant, Sleep};

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

/// The connection, its stream and the one timer.
struct Inner<S> {
    stream: S,
    conn: Connection,
    high_water: usize,
    read_chunk: usize,
    /// How much the next read asks for: `read_chunk`, doubled (up to 4×) after each read that
    /// filled all the room it had — a large transfer then costs a quarter of the system calls
    /// (and, streamed, a quarter of the fragments) — and back to `read_chunk` when idle.
    read_size: usize,
    /// Bytes were handed to the stream but its flush has not completed. A TLS stream accepts
    /// plaintext into its own buffer and may still owe the socket the records; without this flag
    /// an empty transmit queue would look like "nothing to do" and the data would sit there.
    unflushed: bool,
    /// Sleeps until the engine's next deadline. Created on first use: a connection without
    /// timers never needs it.
    timer: Option<EngineTimer>,
    /// Asks this connection to close with 1001 (going away): set by a [`Server`](crate::Server),
    /// whose graceful shutdown it signals.
    close_signal: Option<CloseSignal>,
    /// Held while this connection keeps its empty read buffer through its waits for input instead
    /// of giving it to the thread's pool: one of the few a thread allows (see [`read_pool`]).
    keeper: Option<read_pool::Keeper>,
    /// The read buffer was made larger than a keeper keeps (for a large frame, or reads that
    /// kept filling it) since it was last given up. Its capacity, once the frame is split off,
    /// no longer shows the allocation behind it.
    read_buffer_grown: bool,
    /// A data message (or a piece of one) was handed to the application since the read buffer
    /// was last given up: only such a connection takes a keeper's place, so that one that only
    /// answers keepalive pings does not hold a buffer.
    data_delivered: bool,
    /// The close frame the peer sent, once handed to the application (boxed: a pointer's worth
    /// for the connections that never get there), for a sending half's `close` that answers it.
    peer_close: Option<Box<CloseFrame>>,
}

/// A connection dropped while it keeps its read buffer (still open: a closed one gave it up
/// when its transport closed) gives it to the pool, as it would have at its next wait.
impl<S> Drop for Inner<S> {
    fn drop(&mut self) {
        if self.keeper.is_some() {
            self.give_back_read_buffer();
        }
    }
}

impl<S> Inner<S> {
    /// Gives up the keeper's place, if any, and the read buffer: to the thread's pool when it is
    /// empty and of a read's size, else let go (with the batch buffer, when empty).
    fn give_back_read_buffer(&mut self) {
        self.keeper = None;
        self.data_delivered = false;
        let grown = std::mem::take(&mut self.read_buffer_grown);
        // The deflate states are the callers' business: a wait for input lets them linger, and
        // the other callers end the connection, which gives them back.
        self.conn.release_idle_write_buffer();
        if let Some(buffer) = self
            .conn
            .release_idle_read_buffer(read_pool::least_room(self.read_chunk))
            && !grown
        {
            read_pool::put(buffer, self.read_chunk);
        }
    }
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
            inner: Box::new(Inner {
                stream,
                conn,
                high_water: config.write_buffer_high_water,
                read_chunk: config.read_chunk_size,
                read_size: config.read_chunk_size,
                unflushed: false,
                timer: None,
                close_signal: None,
                keeper: None,
                read_buffer_grown: false,
                data_delivered: false,
                peer_close: None,
            }),
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

    /// The receive path of whole messages and of pieces alike.
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
            self.inner.note_delivered(&next);
            if next.as_ref().is_ok_and(T::is_close) {
                self.inner.note_peer_close(&next);
                // Send the close reply (and, as a server, close the stream) now, even if the
                // application stops polling. A failure here ends the stream at the next
                // receive; the close frame is what the application must see first.
                let mut io = Context::from_waker(self.wakers.select(Side::Reader, cx.waker()));
                let _ = self.inner.poll_transport(&mut io);
            }
            return Poll::Ready(Some(next));
        }
        let mut io = Context::from_waker(self.wakers.select(Side::Reader, cx.waker()));
        let result = self.inner.poll_recv(&mut io);
        if let Poll::Ready(Some(next)) = &result {
            self.inner.note_delivered(next);
        }
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
                .timer
                .as_ref()
                .is_none_or(|timer| Instant::from_std(deadline) < timer.sleep.deadline())
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

/// What a receive takes from the engine: a whole message ([`Message`]) or a piece
/// ([`Incoming`]).
trait Received: Sized {
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error>;
    fn is_close(&self) -> bool;
    fn is_data(&self) -> bool;
    /// The peer's close frame, for a close that carries one.
    fn close_frame(&self) -> Option<&CloseFrame>;
}

impl Received for Message {
    #[inline]
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error> {
        conn.poll_message()
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self, Message::Close(_))
    }

    #[inline]
    fn is_data(&self) -> bool {
        Message::is_data(self)
    }

    fn close_frame(&self) -> Option<&CloseFrame> {
        match self {
            Message::Close(frame) => frame.as_ref(),
            _ => None,
        }
    }
}

impl Received for Incoming {
    #[inline]
    fn next(conn: &mut Connection) -> Result<Option<Self>, sockeye_proto::Error> {
        conn.poll_chunk()
    }

    #[inline]
    fn is_close(&self) -> bool {
        matches!(self, Incoming::Control(Message::Close(_)))
    }

    #[inline]
    fn is_data(&self) -> bool {
        matches!(self, Incoming::Chunk(_))
    }

    fn close_frame(&self) -> Option<&CloseFrame> {
        match self {
            Incoming::Control(message) => message.close_frame(),
            Incoming::Chunk(_) => None,
        }
    }
}

/// The next message or piece the engine has, to hand over. A protocol error is kept by the
/// engine and reported once the stream is closed, after the close frame that explains it has
/// gone out (§7.1.7); the application's own mistake (receiving a streamed message whole) is
/// reported at once.
#[inline(always)]
fn take_next<T: Received>(conn: &mut Connection) -> Option<Result<T, Error>> {
    match T::next(conn) {
        Ok(Some(next)) => Some(Ok(next)),
        Err(e @ sockeye_proto::Error::InvalidInput(_)) => Some(Err(e.into())),
        _ => None,
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Inner<S> {
    fn poll_recv<T: Received>(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<T, Error>>> {
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
            // Backpressure on input: while the pongs we owe pile up unwritten past the
            // high-water mark (a peer that sends pings but does not read the pongs), read
            // nothing more. Not for the application's own output: with a peer that echoes as
            // it reads, both sides would then wait for each other forever.
            let filled = if write_blocked && self.conn.queued_auto_replies() >= self.high_water {
                Poll::Pending
            } else {
                self.poll_fill(cx)
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
                        self.read_size = self.read_chunk;
                        self.release_idle_buffers(timer_fired);
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// About to wait for input: gives back the empty buffers. The read buffer goes to the thread's
    /// pool, for the next connection that reads, unless this connection may keep it (one of the
    /// few keepers a thread allows): a connection that waits after every message then pays no
    /// pool round trip per message (~125 instructions of a 64-byte echo, callgrind), while memory
    /// still follows the busy connections, not every connection's read buffer. A keeper lets its
    /// buffer go when one of its deadlines passes (every keepalive interval, 30 s by default; a
    /// busy deflate connection's linger, every 50 ms, which costs it a pool round trip then) and
    /// takes a place again only after its next data message, so that a connection that only
    /// answers pings does not keep one; and it lets go of a buffer that grew for a large message.
    /// With keepalive off, a keeper that goes quiet keeps its buffer until it closes. The
    /// permessage-deflate states borrowed from a pool are the caller's (`linger_deflate`, before
    /// the timer is looked at): they go back after a linger without input (50 ms by default), a
    /// keeper's too, so that an idle connection holds no zlib state while one whose messages come
    /// a few milliseconds apart is not re-primed at each (issue 31). Inline: a keeper's case is a
    /// few tests at every wait.
    #[inline(always)]
    fn release_idle_buffers(&mut self, timer_fired: bool) {
        let buf = self.conn.read_buffer();
        // A frame in progress keeps its bytes where they are; an empty buffer stays with a keeper.
        let frame_in_progress = !buf.is_empty();
        let keepable = buf.capacity() != 0 && !self.read_buffer_grown && self.data_delivered && !timer_fired;
        if frame_in_progress || (keepable && (self.keeper.is_some() || self.take_keeper())) {
            self.conn.release_idle_write_buffer();
        } else {
            self.give_back_read_buffer();
        }
    }

    /// Notes what a receive hands to the application (see `data_delivered`).
    #[inline]
    fn note_delivered<T: Received>(&mut self, next: &Result<T, Error>) {
        if next.as_ref().is_ok_and(T::is_data) {
            self.data_delivered = true;
        }
    }

    /// Keeps the close frame the peer sent (see `peer_close`).
    #[cold]
    fn note_peer_close<T: Received>(&mut self, next: &Result<T, Error>) {
        if let Ok(next) = next {
            self.peer_close = next.close_frame().cloned().map(Box::new);
        }
    }

    /// Becomes one of the thread's keepers, if it has a place left.
    fn take_keeper(&mut self) -> bool {
        self.keeper = read_pool::keeper();
        self.keeper.is_some()
    }

    /// Does what the engine asks of the stream (RFC 6455 §7.1.1). `Ready(None)`: carry on
    /// reading; `Ready(Some(result))`: the stream is closed, with the error to report, if any;
    /// `Pending`: writing is blocked.
    fn poll_transport(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<(), Error>>> {
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
        self.give_back_read_buffer();
        self.conn.transport_closed();
        self.conn.take_error().map_or(Ok(()), |e| Err(e.into()))
    }

    /// The stream failed: the connection is over. The engine's own error, if it had one (the
    /// violation that failed the connection), explains more than the stream's.
    fn end_with(&mut self, error: Error) -> Error {
        self.give_back_read_buffer();
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
            None => self.timer.insert(EngineTimer {
                sleep: Box::pin(tokio::time::sleep_until(deadline)),
                waker: None,
            }),
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
    fn going_away(&mut self, cx: Option<&mut Context<'_>>) -> bool {
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

    /// Reads once from the stream into the engine's buffer. Inline: its one caller runs it twice
    /// per message (the read, then the wait), and a call level costs ~16 instructions each time.
    #[inline(always)]
    fn poll_fill(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<usize>> {
        let read_size = self.read_size;
        // The engine made room for the rest of a frame received whole: read into it. Reserving a
        // read's worth more would double the buffer and copy the frame (a 16 MiB memcpy into
        // fresh pages for every 16 MiB message, found with `perf record -e page-faults`).
        let missing = self.conn.frame_bytes_missing();
        let buf = self.conn.read_buffer();
        let room = buf.capacity() - buf.len();
        let sized_for_frame = missing > 0 && room >= missing;
        if room < read_pool::least_room(read_size) && !sized_for_frame {
            if buf.capacity() == 0
                && let Some(pooled) = read_pool::take(read_size)
            {
                *buf = pooled;
            } else {
                buf.reserve(read_size);
            }
        }
        let room = buf.capacity() - buf.len();
        if buf.capacity() > read_pool::most_kept(self.read_chunk) {
            self.read_buffer_grown = true;
        }
        let n = ready!(tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, buf))?;
        if n == room && read_size < 4 * self.read_chunk {
            self.read_size = read_size * 2;
        }
        Poll::Ready(Ok(n))
    }

    /// Writes everything queued, then flushes the stream. The sending side's waits give the
    /// pooled permessage-deflate states back at once (a wait for input lets them linger, its
    /// timer running; here nothing may poll again, issue 31): while the socket
    /// takes no more (a peer that stalls), and once the queue is written with nothing buffered to
    /// read, where a handler that only sends may go quiet without ever waiting for input. With
    /// bytes buffered the application is still reading (a `send` per echoed message): it keeps
    /// them until its next wait.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
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

/// The one timer of a connection, and the waker it will wake.
struct EngineTimer {
    sleep: Pin<Box<Sleep>>,
    /// The waker the sleep was last polled with. The keepalive deadline stays put while messages
    /// flow (the engine only notes that input arrived), so a connection that waits after every
    /// message would poll the same sleep with the same waker each time; tokio then re-registers
    /// the waker under its lock for nothing (~90 instructions of a 64-byte echo, callgrind).
    waker: Option<Waker>,
}

impl EngineTimer {
    /// Whether the sleep is registered for `deadline` with `cx`'s waker and has not fired:
    /// nothing to redo.
    #[inline(always)]
    fn is_set(&self, deadline: Instant, cx: &Context<'_>) -> bool {
        self.sleep.deadline() == deadline
            && !self.sleep.is_elapsed()
            && self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker()))
    }

    /// Whether `deadline` has passed; if not, `cx` will be woken when it does. For a timer that is
    /// not [set](Self::is_set) as asked.
    fn elapsed(&mut self, deadline: Instant, cx: &mut Context<'_>) -> bool {
        if self.sleep.deadline() != deadline {
            self.sleep.as_mut().reset(deadline);
        }
        if self.sleep.as_mut().poll(cx).is_ready() {
            return true;
        }
        match &mut self.waker {
            Some(w) => w.clone_from(cx.waker()),
            None => self.waker = Some(cx.waker().clone()),
        }
        false
    }
}

/// Read buffers given up by connections that went idle, kept per thread for the next connection
/// that reads. An idle connection then holds no buffer (memory follows the busy connections),
/// and a busy one does not pay an allocation and a free of a whole read buffer at every wait for
/// input: the buffer it gives up is the one it takes back (uWebSockets shares one receive buffer
/// per event loop for the same reason).
///
/// A few connections per thread (the keepers) keep their buffer through their waits instead, so
/// that a connection answering one message at a time does not move its buffer to the pool and
/// back for every message. Their number is bounded per thread, not by time: a delay would need a
/// timer per connection, and with one every connection that saw input within the delay would hold
/// its buffer (10,000 connections each sending once a second: 640 MiB). A thread grants at most
/// `MAX_KEPT` places (a keeper that moves to another worker keeps its place at the thread that
/// granted it) and pools at most `MAX_POOLED` buffers: at most 8 idle read buffers per thread,
/// each of a few reads' size (a buffer that grew for a large message is neither kept nor pooled),
/// whatever the number of connections.
mod read_pool {
    use std::cell::RefCell;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::BytesMut;

    /// Enough for the connections one thread serves at once between two waits; the rest are
    /// freed. At most this many read buffers (64 KiB each by default) per thread.
    const MAX_POOLED: usize = 4;

    /// The connections per thread that keep their read buffer while they wait.
    const MAX_KEPT: usize = 4;

    thread_local! {
        static POOL: RefCell<Vec<BytesMut>> = const { RefCell::new(Vec::new()) };
        /// How many connections keep their buffer under this thread's allowance. Shared with the
        /// keepers: a task may move to another thread of the runtime between two waits, and
        /// must then give its place back to the thread that granted it.
        static KEEPERS: Arc<AtomicUsize> = Arc::new(AtomicUsize::new(0));
    }

    /// A connection's place among its thread's keepers, given back when dropped.
    pub(super) struct Keeper(Arc<AtomicUsize>);

    impl Drop for Keeper {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// A place among this thread's keepers, if one is left.
    pub(super) fn keeper() -> Option<Keeper> {
        KEEPERS
            .try_with(|count| {
                // Only this thread adds to its count (a moved task only takes away), so the
                // check and the add need not be one atomic step.
                (count.load(Ordering::Relaxed) < MAX_KEPT).then(|| {
                    count.fetch_add(1, Ordering::Relaxed);
                    Keeper(Arc::clone(count))
                })
            })
            .ok()
            .flatten()
    }

    /// The largest buffer a keeper keeps or the pool takes: one that grew for a large message is
    /// let go.
    pub(super) fn most_kept(read_chunk: usize) -> usize {
        2 * read_chunk
    }

    /// The least room a read of `read_size` is made with: less, and the buffer grows (or is
    /// taken from the pool) first. A pooled buffer keeps at least this much for the next read.
    pub(super) fn least_room(read_size: usize) -> usize {
        read_size / 4
    }

    /// A pooled buffer with at least the least room for a read of `read_size`, if there is one.
    pub(super) fn take(read_size: usize) -> Option<BytesMut> {
        crate::thread_buffers::pop(&POOL).filter(|b| b.capacity() >= least_room(read_size))
    }

    /// Keeps `buffer` (empty) for the next read, unless the pool is full or the buffer is far
    /// larger than a read needs (it grew for a large message: let it go).
    pub(super) fn put(buffer: BytesMut, read_chunk: usize) {
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
}
