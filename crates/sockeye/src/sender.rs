//! The send API, written once. [`WebSocket`] and its sending half [`WebSocketWriter`] have the
//! same sending methods (`send`, `feed`, `feed_prepared`, `try_send`, `send_batch`,
//! `send_fragment`, `send_stream`, `send_reader`, `flush`, `close`); each is a call to the one
//! function here, so the two cannot drift apart. What differs is only how a step reaches the
//! connection ([`Sender::step`]): a `WebSocket` is the connection, a writer locks it for the step
//! (never across an `await`).
//!
//! The steps themselves ([`SendSteps`]) are the connection's (websocket.rs): this file knows
//! them by their trait, not the `WebSocket` type, so that it is imported and imports nothing back.
//!
//! [`WebSocket`]: crate::WebSocket
//! [`WebSocketWriter`]: crate::WebSocketWriter

use std::future::poll_fn;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use sockeye_proto::{CloseFrame, DataKind, Message, PreparedMessage};

use crate::error::Error;

/// The connection's sending steps, each synchronous or a single poll.
pub(crate) trait SendSteps {
    /// Ready once the write queue is below its high-water mark (writing it out while it is not);
    /// once a close signal has fired, queues close 1001 first.
    fn poll_room(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>>;
    /// Writes everything queued, then flushes the stream.
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>>;
    /// Queues a message, as `send` does before it flushes: once a close signal has fired, close
    /// 1001 is queued instead and the message refused.
    fn queue(&mut self, message: Message) -> Result<(), Error>;
    /// Queues a message without looking at the high-water mark or the close signal.
    fn queue_unchecked(&mut self, message: Message) -> Result<(), Error>;
    /// Queues a prepared message without looking at the high-water mark.
    fn queue_prepared(&mut self, message: &PreparedMessage) -> Result<(), Error>;
    /// Queues one fragment without looking at the high-water mark.
    fn queue_fragment(&mut self, kind: DataKind, payload: Bytes, fin: bool) -> Result<(), Error>;
    /// Queues a message if the queue is below the high-water mark (`try_send`).
    fn try_queue(&mut self, message: Message) -> Result<(), Error>;
    /// Whether the write queue has reached its high-water mark.
    fn is_full(&self) -> bool;
    /// Queues a close frame (the receiving side is woken when this answers a close it holds).
    fn queue_close(&mut self, frame: Option<CloseFrame>) -> Result<(), Error>;
    /// The close frame the peer sent, once the receiving side has handed it over.
    fn peer_close(&self) -> Option<CloseFrame>;
}

/// Whatever sends on a connection: the connection itself, or a handle that reaches it.
pub(crate) trait Sender {
    /// The connection the steps are taken on.
    type Conn: SendSteps;
    /// Runs one step on the connection.
    fn step<R>(&mut self, f: impl FnOnce(&mut Self::Conn) -> R) -> R;
}

/// Waits for room below the high-water mark: one step (one lock, for a writer) per poll.
#[inline]
pub(crate) fn room<T: Sender>(sender: &mut T) -> impl Future<Output = Result<(), Error>> + '_ {
    poll_fn(|cx| sender.step(|conn| conn.poll_room(cx)))
}

/// `flush`: writes everything queued, one step per poll.
#[inline]
pub(crate) fn flush<T: Sender>(sender: &mut T) -> impl Future<Output = Result<(), Error>> + '_ {
    poll_fn(|cx| sender.step(|conn| conn.poll_write_out(cx)))
}

// `send`, `feed` and `send_fragment`, on every message's path, are futures made of one
// `poll_fn` rather than `async fn`s: awaited in the public `async fn`s, an `async fn` here is a
// second state machine in each (callgrind, a 64-byte echo, client and server together: +57
// instructions, against none this way).

/// `send`: queues at once — the caller's first poll, before any wait — then flushes; the
/// message's own error (the connection is closing) comes after the flush of what was queued
/// before it.
#[inline]
pub(crate) fn send<T: Sender>(
    sender: &mut T,
    message: Message,
) -> impl Future<Output = Result<(), Error>> + '_ {
    let mut queued = Some(sender.step(|conn| conn.queue(message)));
    poll_fn(move |cx| {
        ready!(sender.step(|conn| conn.poll_write_out(cx)))?;
        Poll::Ready(queued.take().unwrap_or(Ok(())))
    })
}

/// `feed`: waits for room, then queues (dropped while waiting, it queued nothing).
#[inline]
pub(crate) fn feed<T: Sender>(
    sender: &mut T,
    message: Message,
) -> impl Future<Output = Result<(), Error>> + '_ {
    queue_when_room(sender, message, |conn, message| conn.queue_unchecked(message))
}

/// Waits for room, then queues `item` with `queue` (dropped while waiting, it queued nothing).
#[inline]
fn queue_when_room<'a, T: Sender, I: 'a>(
    sender: &'a mut T,
    item: I,
    queue: impl FnOnce(&mut T::Conn, I) -> Result<(), Error> + 'a,
) -> impl Future<Output = Result<(), Error>> + 'a {
    let mut pending = Some((item, queue));
    poll_fn(move |cx| {
        ready!(sender.step(|conn| conn.poll_room(cx)))?;
        let (item, queue) = pending.take().ok_or_else(Error::closed)?;
        Poll::Ready(sender.step(|conn| queue(conn, item)))
    })
}

/// `feed_prepared`: waits for room, then queues.
pub(crate) async fn feed_prepared<T: Sender>(sender: &mut T, message: &PreparedMessage) -> Result<(), Error> {
    room(sender).await?;
    sender.step(|conn| conn.queue_prepared(message))
}

/// `try_send`: queues if there is room, without waiting.
#[inline]
pub(crate) fn try_send<T: Sender>(sender: &mut T, message: Message) -> Result<(), Error> {
    sender.step(|conn| conn.try_queue(message))
}

/// `send_batch`: queues up to the high-water mark at a time, waiting for room between, then
/// flushes.
pub(crate) async fn send_batch<T, I>(sender: &mut T, messages: I) -> Result<(), Error>
where
    T: Sender,
    I: IntoIterator,
    I::Item: Into<Message>,
{
    let mut messages = messages.into_iter();
    let mut next = messages.next();
    while let Some(first) = next {
        room(sender).await?;
        next = sender.step(|conn| queue_until_full(conn, first, &mut messages))?;
    }
    flush(sender).await
}

/// Queues `first`, then what follows it, until the write queue reaches its high-water mark
/// (returning the next message, which waits for room) or the messages run out (`None`).
///
/// A plain iterator (no `Peekable`: one `next` per batch looks ahead, not a peek per message)
/// in a small function of its own: 4 instructions fewer per pushed message than a peekable loop
/// inside the `send_batch` future (callgrind, `bench/run.sh --only=instructions`).
#[inline(never)]
fn queue_until_full<C: SendSteps, I: Iterator>(
    conn: &mut C,
    first: I::Item,
    rest: &mut I,
) -> Result<Option<I::Item>, Error>
where
    I::Item: Into<Message>,
{
    conn.queue_unchecked(first.into())?;
    loop {
        if conn.is_full() {
            return Ok(rest.next());
        }
        match rest.next() {
            Some(message) => conn.queue_unchecked(message.into())?,
            None => return Ok(None),
        }
    }
}

/// `send_fragment`: waits for room, then queues the fragment.
#[inline]
pub(crate) fn send_fragment<T: Sender>(
    sender: &mut T,
    kind: DataKind,
    payload: Bytes,
    fin: bool,
) -> impl Future<Output = Result<(), Error>> + '_ {
    queue_when_room(sender, payload, move |conn, payload| {
        conn.queue_fragment(kind, payload, fin)
    })
}

/// The first half of `close` for both: queues the close frame (at the first poll). A
/// `WebSocket` then receives until the end, a writer flushes.
pub(crate) fn start_close<T: Sender>(sender: &mut T, frame: Option<CloseFrame>) -> Result<(), Error> {
    sender.step(|conn| conn.queue_close(frame))
}

/// A writer's `close`: queues the close frame and flushes it. The peer's frame is known here
/// only when this close answers one the peer sent first; otherwise the reply arrives at the
/// receiving side.
pub(crate) async fn close_and_flush<T: Sender>(
    sender: &mut T,
    frame: Option<CloseFrame>,
) -> Result<Option<CloseFrame>, Error> {
    start_close(sender, frame)?;
    flush(sender).await?;
    Ok(sender.step(|conn| conn.peer_close()))
}
