//! Splitting a [`WebSocket`] between a receiving task and a sending task.
//!
//! A stream keeps one waker per direction, and both halves write to it (the reader writes pongs,
//! close replies and the queue it flushes before waiting). So once the halves are in two tasks,
//! every stream operation is polled with one waker that wakes both ([`Wakers`]), each registered
//! by its own side: neither half can take the other's wake-up.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};

use bytes::Bytes;
use futures_util::task::AtomicWaker;
use futures_util::{Sink, Stream};
use sockeye_proto::{CloseFrame, DataKind, Incoming, Message, PreparedMessage};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::error::Error;
use crate::websocket::WebSocket;

/// Which side of a connection is polling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// Receiving (`recv`, the `Stream`).
    Reader,
    /// Sending (`send`, `feed`, `flush`, the `Sink`).
    Writer,
}

/// The wakers a connection polls its stream with.
///
/// While one task does both the receiving and the sending (or only one side is used), the
/// stream is polled with that task's own waker: nothing to add on the hot path. Once the two
/// sides are polled by different tasks, every stream operation is polled with one waker that
/// wakes both ([`IoWakers`]), each side registering its own task there.
#[derive(Default)]
pub(crate) struct Wakers {
    /// The last waker each side polled with (compared, cloned only when it changes).
    reader: Option<Waker>,
    writer: Option<Waker>,
    /// Set for good once the sides are seen in two tasks.
    shared: Option<(Arc<IoWakers>, Waker)>,
}

impl Wakers {
    /// The waker to poll the stream with on behalf of `side`, whose task's waker is `own`.
    #[inline]
    pub(crate) fn select<'a>(&'a mut self, side: Side, own: &'a Waker) -> &'a Waker {
        let mine = match side {
            Side::Reader => &self.reader,
            Side::Writer => &self.writer,
        };
        // One task so far, and this side's waker has not changed: nothing can have split.
        if self.shared.is_none() && mine.as_ref().is_some_and(|w| w.will_wake(own)) {
            return own;
        }
        self.select_changed(side, own)
    }

    /// A side polled with a new waker, or the halves are in two tasks already.
    #[cold]
    fn select_changed<'a>(&'a mut self, side: Side, own: &'a Waker) -> &'a Waker {
        let (mine, other) = match side {
            Side::Reader => (&mut self.reader, &self.writer),
            Side::Writer => (&mut self.writer, &self.reader),
        };
        if !mine.as_ref().is_some_and(|w| w.will_wake(own)) {
            *mine = Some(own.clone());
        }
        if self.shared.is_none() {
            match other {
                Some(other) if !other.will_wake(own) => {
                    // Two tasks: from now on, one waker for both, each side registered.
                    let io = Arc::new(IoWakers::default());
                    let waker = Waker::from(Arc::clone(&io));
                    self.shared = Some((io, waker));
                }
                _ => return own,
            }
        }
        let Some((io, waker)) = &self.shared else {
            return own;
        };
        for (slot, registered) in [(&io.reader, &self.reader), (&io.writer, &self.writer)] {
            if let Some(w) = registered {
                slot.register(w);
            }
        }
        waker
    }

    /// Wakes the sending side (the connection ended: a sender waiting for room must learn it).
    pub(crate) fn wake_writer(&self) {
        if let Some(w) = &self.writer {
            w.wake_by_ref();
        }
    }

    /// Wakes the receiving side (the sender's close answered a held close: the transport is for
    /// the reader to finish, and it may be waiting for input that will never come).
    pub(crate) fn wake_reader(&self) {
        if let Some(w) = &self.reader {
            w.wake_by_ref();
        }
    }
}

/// The receiving and the sending task, each registered by its own side.
#[derive(Default)]
pub(crate) struct IoWakers {
    reader: AtomicWaker,
    writer: AtomicWaker,
}

impl Wake for IoWakers {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.reader.wake();
        self.writer.wake();
    }
}

/// The receiving half of a [`WebSocket`], from [`WebSocket::split`].
pub struct WebSocketReader<S> {
    shared: Arc<Mutex<WebSocket<S>>>,
}

/// The two halves of `ws`, sharing it behind a lock taken for one poll at a time.
pub(crate) fn split<S>(ws: WebSocket<S>) -> (WebSocketWriter<S>, WebSocketReader<S>) {
    let shared = Arc::new(Mutex::new(ws));
    (
        WebSocketWriter {
            shared: Arc::clone(&shared),
        },
        WebSocketReader { shared },
    )
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
        let queued = lock(&self.shared).queue(message.into());
        self.flush().await?;
        queued
    }

    /// Queues a message without flushing, waiting first for room below the high-water mark; see
    /// [`WebSocket::feed`].
    pub async fn feed(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        poll_fn(|cx| lock(&self.shared).poll_below_high_water(cx)).await?;
        lock(&self.shared).send_now(message.into())
    }

    /// Queues a prepared message without flushing; see [`WebSocket::feed_prepared`].
    pub async fn feed_prepared(&mut self, message: &PreparedMessage) -> Result<(), Error> {
        poll_fn(|cx| lock(&self.shared).poll_below_high_water(cx)).await?;
        Ok(lock(&self.shared).connection_mut().send_prepared(message)?)
    }

    /// Queues a message if there is room, without waiting; see [`WebSocket::try_send`].
    pub fn try_send(&mut self, message: impl Into<Message>) -> Result<(), Error> {
        lock(&self.shared).try_send(message)
    }

    /// Sends many messages and flushes them; see [`WebSocket::send_batch`].
    pub async fn send_batch<I>(&mut self, messages: I) -> Result<(), Error>
    where
        I: IntoIterator,
        I::Item: Into<Message>,
    {
        let mut messages = messages.into_iter().peekable();
        while messages.peek().is_some() {
            poll_fn(|cx| lock(&self.shared).poll_below_high_water(cx)).await?;
            lock(&self.shared).queue_batch(&mut messages)?;
        }
        self.flush().await
    }

    /// Sends one fragment of a message; see [`WebSocket::send_fragment`].
    pub async fn send_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        poll_fn(|cx| lock(&self.shared).poll_below_high_water(cx)).await?;
        Ok(lock(&self.shared)
            .connection_mut()
            .send_fragment(kind, payload, fin)?)
    }

    /// Sends one message from a [`Stream`] of chunks, as fragments; see
    /// [`WebSocket::send_stream`].
    pub async fn send_stream<St, B, E>(&mut self, kind: DataKind, source: St) -> Result<(), Error>
    where
        St: Stream<Item = Result<B, E>>,
        B: Into<Bytes>,
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        crate::streaming::send_stream(self, kind, source).await
    }

    /// Sends what `reader` yields as one message; see [`WebSocket::send_reader`].
    pub async fn send_reader<R: AsyncRead>(&mut self, kind: DataKind, reader: R) -> Result<(), Error> {
        crate::streaming::send_reader(self, kind, reader).await
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), Error> {
        poll_fn(|cx| lock(&self.shared).poll_write_out(cx)).await
    }

    /// Sends a close frame (`None`: without a status code) and flushes it. The peer's reply
    /// arrives at the reader, which then ends: keep receiving until `None` to finish the
    /// closing handshake.
    pub async fn close(&mut self, frame: Option<CloseFrame>) -> Result<(), Error> {
        lock(&self.shared).close_from_writer(frame)?;
        self.flush().await
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
        lock(&self.shared).queue(message)
    }

    /// Queues a close frame without waiting; the receiving half writes it and finishes the
    /// closing handshake.
    pub(crate) fn close_now(&self, frame: Option<CloseFrame>) -> Result<(), Error> {
        lock(&self.shared).close_from_writer(frame)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> crate::streaming::FragmentSink for WebSocketWriter<S> {
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        lock(&self.shared).poll_below_high_water(cx)
    }

    fn queue_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error> {
        Ok(lock(&self.shared)
            .connection_mut()
            .send_fragment(kind, payload, fin)?)
    }

    fn poll_flush_queue(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        lock(&self.shared).poll_write_out(cx)
    }

    fn queue_close(&mut self, frame: CloseFrame) {
        let _ = lock(&self.shared).close_from_writer(Some(frame));
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
