//! Sending one message from a source of unknown length — a [`Stream`] of chunks or an
//! [`AsyncRead`] — as fragments (RFC 6455 §5.4), in bounded memory: each chunk is queued as it
//! comes, the write queue's high-water mark holds the source back while the peer is slow, and
//! nothing waits for the whole message. Receiving in pieces is
//! [`WebSocket::recv_chunk`](crate::WebSocket::recv_chunk).
//!
//! With permessage-deflate, the message is compressed as it goes when its first chunk would be
//! compressed as a whole message: each fragment sync-flushed, so the peer can inflate what it has
//! without waiting for the end (RFC 7692 §7.2.1; see `Connection::send_fragment`). A source that
//! fails in the middle leaves a message that cannot be finished nor taken back (the protocol has
//! no way to abandon one), so the connection is closed with 1011 and the source's error returned
//! as [`Error::Source`].
//!
//! A [`WebSocket`](crate::WebSocket) and its [`WebSocketWriter`](crate::WebSocketWriter) both
//! send from a source through here, as any [`Sender`].

use std::pin::pin;

use bytes::Bytes;
use futures_util::{FutureExt, Stream, StreamExt};
use sockeye_proto::utf8::Utf8Validator;
use sockeye_proto::{CloseCode, CloseFrame, DataKind};
use tokio::io::AsyncRead;

use crate::error::Error;
use crate::sender::{self, SendSteps, Sender};

/// How much [`send_reader`] reads at a time: one fragment per read.
pub(crate) const READ_CHUNK: usize = 64 << 10;

/// Sends the chunks of `source` as one message of `kind`, then flushes. See
/// [`WebSocket::send_stream`](crate::WebSocket::send_stream).
pub(crate) async fn send_stream<W, St, B, E>(sink: &mut W, kind: DataKind, source: St) -> Result<(), Error>
where
    W: Sender,
    St: Stream<Item = Result<B, E>>,
    B: Into<Bytes>,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let mut source = pin!(source);
    let mut text = (kind == DataKind::Text).then(Utf8Validator::new);
    // One chunk is held back until the next is known, so that the last one carries FIN: a
    // message of one chunk is one frame. When the source makes us wait, what is held goes out
    // first (the peer should not wait for our source) and an empty final frame ends the message.
    let mut held: Option<Bytes> = None;
    let mut started = false;
    loop {
        let next = match source.next().now_or_never() {
            Some(next) => next,
            None => {
                if let Some(chunk) = held.take() {
                    sender::send_fragment(sink, kind, chunk, false).await?;
                    started = true;
                }
                sender::flush(sink).await?;
                source.next().await
            }
        };
        let chunk = match next {
            Some(Ok(chunk)) => chunk.into(),
            Some(Err(e)) => return Err(abandon(sink, started, Error::Source(e.into())).await),
            None => break,
        };
        if let Some(v) = &mut text
            && v.feed(&chunk).is_err()
        {
            let error = Error::WebSocket(sockeye_proto::Error::InvalidInput(
                "the text message's chunks are not UTF-8",
            ));
            return Err(abandon(sink, started, error).await);
        }
        if chunk.is_empty() {
            continue;
        }
        if let Some(previous) = held.replace(chunk) {
            sender::send_fragment(sink, kind, previous, false).await?;
            started = true;
        }
    }
    if text.is_some_and(|v| !v.is_complete()) {
        let error = Error::WebSocket(sockeye_proto::Error::InvalidInput(
            "the text message ends inside a UTF-8 sequence",
        ));
        return Err(abandon(sink, started, error).await);
    }
    sender::send_fragment(sink, kind, held.unwrap_or_default(), true).await?;
    sender::flush(sink).await
}

/// Sends what `reader` yields until its end as one message; see
/// [`WebSocket::send_reader`](crate::WebSocket::send_reader).
pub(crate) async fn send_reader<W, R>(sink: &mut W, kind: DataKind, reader: R) -> Result<(), Error>
where
    W: Sender,
    R: AsyncRead,
{
    let chunks = tokio_util::io::ReaderStream::with_capacity(reader, READ_CHUNK);
    send_stream(sink, kind, chunks).await
}

/// The message cannot be finished: once part of it is out, the connection must close (1011) —
/// the peer would otherwise wait for the rest forever. Before any of it, nothing was sent and the
/// connection goes on.
async fn abandon<W: Sender>(sink: &mut W, started: bool, error: Error) -> Error {
    if started {
        let frame = CloseFrame::new(CloseCode::INTERNAL_ERROR, "message source failed");
        let _ = sink.step(|conn| conn.queue_close(Some(frame)));
        // Best effort: the receiving side writes it too, and the connection is ending anyway.
        let _ = sender::flush(sink).await;
    }
    error
}
