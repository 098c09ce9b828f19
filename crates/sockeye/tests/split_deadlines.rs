//! The engine's deadlines when a connection is split: the receiving half owns the one timer, and
//! the sending half can make the next deadline earlier (a close it queues starts the close
//! deadline). The receiving half, waiting in another task with its timer set for the keepalive,
//! must be woken to set it again.
//!
//! The defect these guard against: a close queued by the writer (`close`, a failed
//! `send_stream`'s 1011, `SinkExt::close` on `StreamExt::split`'s half) to a peer that never
//! answered ended the connection at the next keepalive (30 s), not at the close deadline. Real
//! time (tokio's `test-util` is not among the dev-dependencies): a close deadline of 200 ms, and
//! a test gives up after a few seconds rather than wait for the keepalive.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use sockeye::{CloseCode, CloseFrame, Config, DataKind, Error, ErrorKind, Message, Role, WebSocket};
use tokio::io::DuplexStream;
use tokio::time::Instant;

const KEEPALIVE: Duration = Duration::from_secs(30);
const CLOSE_TIMEOUT: Duration = Duration::from_millis(200);
/// Far past the close deadline, far before the keepalive: a loaded machine has the slack.
const GIVE_UP: Duration = Duration::from_secs(5);

/// A client over an in-memory pipe whose other end (returned, held, never read or written)
/// never answers.
fn silent_peer() -> (WebSocket<DuplexStream>, DuplexStream) {
    let config = Config::builder()
        .deflate(None)
        .keepalive(Some(KEEPALIVE))
        .close_timeout(CLOSE_TIMEOUT)
        .build();
    let (ours, theirs) = tokio::io::duplex(64 << 10);
    (
        WebSocket::from_upgraded(ours, Role::Client, &config, &[], None),
        theirs,
    )
}

/// The reader, receiving in its own task until the end, parked: its timer is set for the
/// keepalive.
struct Parked {
    /// When it ended, and the last error it saw.
    ended: tokio::task::JoinHandle<(Instant, Option<Error>)>,
    /// When it had parked: the writer closes after.
    since: Instant,
}

async fn parked<R>(mut reader: R) -> Parked
where
    R: futures_util::Stream<Item = Result<Message, Error>> + Unpin + Send + 'static,
{
    let ended = tokio::spawn(async move {
        let mut last = None;
        while let Some(item) = reader.next().await {
            if let Err(e) = item {
                last = Some(e);
            }
        }
        (Instant::now(), last)
    });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    Parked {
        ended,
        since: Instant::now(),
    }
}

impl Parked {
    /// The reader ended at the close deadline, with the close timeout as its error.
    async fn ends_at_the_close_deadline(self) {
        let Ok(joined) = tokio::time::timeout(GIVE_UP, self.ended).await else {
            panic!(
                "the reader had not ended {GIVE_UP:?} after the writer's close (close deadline \
                 {CLOSE_TIMEOUT:?}, keepalive {KEEPALIVE:?})"
            );
        };
        let (at, error) = joined.unwrap();
        let after = at - self.since;
        assert!(
            after >= CLOSE_TIMEOUT,
            "ended before the close deadline: {after:?}"
        );
        let kind = error.as_ref().map(Error::kind);
        assert_eq!(kind, Some(ErrorKind::Timeout), "the reader's error: {error:?}");
    }
}

#[tokio::test]
async fn a_close_from_the_writer_ends_the_connection_at_the_close_deadline() {
    let (ws, _peer) = silent_peer();
    let (mut writer, reader) = ws.split();
    let reader = parked(reader).await;
    writer
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    reader.ends_at_the_close_deadline().await;
}

#[tokio::test]
async fn a_close_from_a_futures_split_sink_ends_the_connection_at_the_close_deadline() {
    let (ws, _peer) = silent_peer();
    let (mut sink, stream) = StreamExt::split(ws);
    let reader = parked(stream).await;
    sink.close().await.unwrap();
    reader.ends_at_the_close_deadline().await;
}

#[tokio::test]
async fn a_stream_that_fails_midway_closes_with_1011_and_ends_at_the_close_deadline() {
    let (ws, _peer) = silent_peer();
    let (mut writer, reader) = ws.split();
    let reader = parked(reader).await;
    // The error comes after a wait, so that the first piece has gone out: the message cannot
    // be abandoned, the connection closes.
    let source = futures_util::stream::iter([Ok(Bytes::from_static(b"first piece"))]).chain(
        futures_util::stream::once(async {
            tokio::task::yield_now().await;
            Err(std::io::Error::other("the source broke"))
        }),
    );
    let sent = writer.send_stream(DataKind::Binary, source).await;
    assert!(matches!(sent, Err(Error::Source(_))), "{sent:?}");
    reader.ends_at_the_close_deadline().await;
}
