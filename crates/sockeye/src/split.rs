//! Splitting a [`WebSocket`] between a receiving task and a sending task: both halves share the
//! connection behind a lock taken for one poll at a time, and each is woken by its own events
//! (see the `wakers` module).

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};

use bytes::Bytes;
use futures_util::{Sink, Stream};
use sockeye_proto::{CloseFrame, DataKind, Incoming, Message, PreparedMessage};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Error;
use crate::sender::{self, SendSteps, Sender};
use crate::websocket::WebSocket;

/// The receiving half of a [`WebSocket`], from [`WebSocket::split`].
pub struct WebSocketReader<S> {
    shared: Arc<Mutex<WebSocket<S>>>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocket<S> {
    /// Splits the connection into a sending half (a [`Sink`]) and a receiving half (a
    /// [`Stream`]) for two tasks, in the order of [`futures_util::StreamExt::split`], so code
    /// written for that keeps working. Both halves are woken correctly whoever writes to the
    /// stream (see *Splitting* on [`WebSocket`]); no lock is held across an `await`. Pings are
    /// answered and close frames replied to while only the reader is polled.
    /// [`WebSocketReader::reunite`] puts them back together.
    ///
    /// ```no_run
    /// # async fn demo(ws: sockeye::WebSocket<tokio::net::TcpStream>) {
    /// let (mut writer, mut reader) = ws.split();
    /// tokio::spawn(async move {
    ///     while let Some(Ok(message)) = reader.recv().await {
    ///         println!("{message:?}");
    ///     }
    /// });
    /// writer.send("hello").await.unwrap();
    /// # }
    /// ```
    pub fn split(self) -> (WebSocketWriter<S>, WebSocketReader<S>) {
        let shared = Arc::new(Mutex::new(self));
        (
            WebSocketWriter {
                shared: Arc::clone(&shared),
            },
            WebSocketReader { shared },
        )
    }
}

/// The sending half of a [`WebSocket`], from [`WebSocket::split`].
pub struct WebSocketWriter<S> {
    shared: Arc<Mutex<WebSocket<S>>>,
}

/// Locks the connection for one poll; the lock is never held across an `await`. A panic in the
/// other half while it held the lock leaves the connection as consistent as any poll does, so a
/// poisoned lock is taken as is.
fn lock<S>(shared: &Mutex<WebSocket<S>>) -> MutexGuard<'_, WebSocket<S>> {
    shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl<S> std::fmt::Debug for WebSocketReader<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketReader").finish_non_exhaustive()
    }
}

impl<S> std::fmt::Debug for WebSocketWriter<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebSocketWriter").finish_non_exhaustive()
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocketReader<S> {
    /// The next message; see [`WebSocket::recv`]. Cancel safe.
    pub async fn recv(&mut self) -> Option<Result<Message, Error>> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// Polls for the next message; see [`WebSocket::poll_recv`].
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Message, Error>>> {
        lock(&self.shared).poll_recv(cx)
    }

    /// The next piece of a data message, or control frame, as it arrives; see
    /// [`WebSocket::recv_chunk`]. Cancel safe.
    pub async fn recv_chunk(&mut self) -> Option<Result<Incoming, Error>> {
        poll_fn(|cx| self.poll_recv_chunk(cx)).await
    }

    /// Polls for the next piece or control frame; see [`WebSocket::recv_chunk`].
    pub fn poll_recv_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Incoming, Error>>> {
        lock(&self.shared).poll_recv_chunk(cx)
    }

    /// Puts the halves back together. Fails, handing them back, if they come from different
    /// connections.
    #[allow(clippy::result_large_err)]
    pub fn reunite(self, writer: WebSocketWriter<S>) -> Result<WebSocket<S>, (Self, WebSocketWriter<S>)> {
        if !Arc::ptr_eq(&self.shared, &writer.shared) {
            return Err((self, writer));
        }
        drop(writer);
        match Arc::try_unwrap(self.shared) {
            Ok(mutex) => Ok(mutex
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner)),
            // Unreachable: the writer was the only other owner and has been dropped.
            Err(shared) => Err((
                WebSocketReader {
                    shared: Arc::clone(&shared),
                },
                WebSocketWriter { shared },
            )),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Stream for WebSocketReader<S> {
    type Item = Result<Message, Error>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().poll_recv(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> WebSocketWriter<S> {
    /// Sends a message and flushes it; see [`WebSocket::send`] (same cancel safety).
    pub async fn send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::send(self, message.into()).await
    }

    /// Queues a message without flushing, waiting first for room below the high-water mark; see
    /// [`WebSocket::feed`].
    pub async fn feed(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::feed(self, message.into()).await
    }

    /// Queues a prepared message without flushing; see [`WebSocket::feed_prepared`].
    pub async fn feed_prepared(&mut self, message: &PreparedMessage) -> Result<(), Error> {
        sender::feed_prepared(self, message).await
    }

    /// Queues a message if there is room, without waiting; see [`WebSocket::try_send`].
    pub fn try_send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        sender::try_send(self, message.into())
    }

    /// Sends many messages and flushes them; see [`WebSocket::send_batch`].
    pub async fn send_batch<I>(&mut self, messages: I) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        sender::send_batch(self, messages).await
    }

    /// Sends one fragment of a message; see [`WebSocket::send_fragment`].
    pub async fn send_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        sender::send_fragment(self, kind, payload, fin).await
    }

    /// Sends one message from a [`Stream`] of chunks, as fragments; see
    /// [`WebSocket::send_stream`].
    pub async fn send_stream<St, B, E>(&mut self, kind: DataKind, source: St) -> Result<(), Error>
    where
        St: Stream<Item = Result<B, E>>,
        B: Into<Bytes>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::send_source::send_stream(self, kind, source).await
    }

    /// Sends what `reader` yields as one message; see [`WebSocket::send_reader`].
    pub async fn send_reader<R: AsyncRead>(&mut self, kind: DataKind, reader: R) -> Result<(), Error> {
        crate::send_source::send_reader(self, kind, reader).await
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), Error> {
        sender::flush(self).await
    }

    /// Sends a close frame (`None`: without a status code) and flushes it. The peer's reply
    /// arrives at the reader, which then ends: keep receiving until `None` to finish the
    /// closing handshake.
    ///
    /// The same signature as [`WebSocket::close`]: the peer's close frame when this call knows
    /// it, which for a writer is only when its close answers a close the peer sent first (held by
    /// [`auto_close_reply: false`](crate::ProtocolConfig::auto_close_reply); the reader returned
    /// it as `Message::Close`). Otherwise `None`: the reply is the reader's to receive. Like
    /// `WebSocket::close`, the close frame is queued at the first poll.
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<Option<CloseFrame>, Error> {
        sender::close_and_flush(self, frame).await
    }

    /// Bytes queued for the peer and not yet handed to the socket.
    pub fn buffered_amount(&self) -> usize {
        lock(&self.shared).buffered_amount()
    }

    /// A second handle on the same sending half, for the reconnecting client: its sends are
    /// serialized (one task flushes at a time), so the halves' one waker per side suffices.
    pub(crate) fn handle(&self) -> WebSocketWriter<S> {
        WebSocketWriter {
            shared: Arc::clone(&self.shared),
        }
    }

    /// Queues a message without waiting (the receiving half, or the next flush, writes it).
    pub(crate) fn queue_now(&self, message: Message) -> Result<(), Error> {
        let mut ws = lock(&self.shared);
        let queued = ws.queue(message);
        ws.sent();
        queued
    }

    /// Queues a close frame without waiting; the receiving half writes it and finishes the
    /// closing handshake.
    pub(crate) fn close_now(&self, frame: Option<CloseFrame>) -> Result<(), Error> {
        let mut ws = lock(&self.shared);
        let queued = ws.queue_close(frame);
        ws.sent();
        queued
    }
}

/// The send API's one implementation (sender.rs) takes each step with the connection locked.
impl<S: AsyncRead + AsyncWrite + Unpin> Sender for WebSocketWriter<S> {
    type Conn = WebSocket<S>;

    /// The receiving half, in its own task, owns the timer: it is woken when a step makes the
    /// engine's next deadline earlier (see `WebSocket::sent`).
    #[inline]
    fn step<R>(&mut self, f: impl FnOnce(&mut WebSocket<S>) -> R) -> R {
        let mut ws = lock(&self.shared);
        let result = f(&mut ws);
        ws.sent();
        result
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Sink<Message> for WebSocketWriter<S> {
    type Error = Error;

    fn poll_ready(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut *lock(&self.shared)).poll_ready(cx)
    }

    fn start_send(self: Pin<&mut Self>, message: Message) -> Result<(), Error> {
        Pin::new(&mut *lock(&self.shared)).start_send(message)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut *lock(&self.shared)).poll_flush(cx)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Pin::new(&mut *lock(&self.shared)).poll_close(cx)
    }
}
