//! Live delivery of one subscribed topic: the task that forwards a core subscription's or an
//! ordered JetStream consumer's messages to the hub, each once and in order, and notices a
//! consumer that stalled.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::life;
use super::stream::STREAM;
use super::wire::{decode, subject};
use crate::backplane::api::{Event, EventSender};
use crate::backplane::position::Position;
use crate::topic::Topic;

/// How long a live consumer's pull request lasts: the client asks for a heartbeat every half of
/// it and recreates a consumer that missed two (its server died), so a topic whose consumer was
/// on a lost cluster server resumes within about this long. The cost: per subscribed topic, a
/// pull request this often and a heartbeat twice as often while it is quiet.
pub(super) const ORDERED_EXPIRES: Duration = Duration::from_secs(4);

/// How long a topic's consumer may deliver nothing (quiet, or yielding errors) before the
/// backplane checks that the stream holds nothing it has not delivered (one request per quiet
/// topic this often). A consumer whose server left a cluster while this node's connection
/// stayed up is otherwise noticed only by the client's heartbeats, which did not recover it
/// within 40 s in tests/distributed.rs.
const STALL_CHECK: Duration = Duration::from_secs(3);

/// One subscribed topic: the task forwarding its messages to the hub.
pub(super) struct Follow {
    pub(super) task: Option<JoinHandle<()>>,
    /// JetStream: the next stream sequence not yet delivered, and the creation time of the
    /// stream it belongs to (the first part of every epoch in it).
    pub(super) next: Arc<AtomicU64>,
    pub(super) epoch: String,
    /// JetStream: when the stream stored the last publication delivered (Unix nanoseconds):
    /// after a reconnect, the publication at `next - 1` must still be that one, or the stream
    /// went back (it lost its tail) and gives those sequences to new publications.
    pub(super) stored: Arc<std::sync::Mutex<Option<i128>>>,
}

impl Follow {
    /// Stops the task and waits until it has stopped, so that `next` no longer moves.
    pub(super) async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

/// Forwards a core subscription's messages to the hub.
pub(super) async fn forward_core(topic: Topic, mut sub: async_nats::Subscriber, events: EventSender) {
    while let Some(m) = sub.next().await {
        match decode(&topic, &m.payload, None) {
            Ok(p) => {
                if events.send(Event::Publication(p)).await.is_err() {
                    return;
                }
            }
            Err(why) => tracing::warn!("NATS: skipped a message on {topic}: {why}"),
        }
    }
}

/// Forwards an ordered consumer's messages to the hub, each once (`next` skips what a recreated
/// consumer delivers again).
///
/// A consumer that has delivered nothing new for [`STALL_CHECK`] is checked against the stream
/// whether it was silent or not: errors and publications delivered again do not put the check
/// off (waiting for 3 s of silence never checked a consumer yielding either more often). One
/// that ends, that the check finds behind the stream, or about which JetStream does not answer
/// twice in a row, is handed to the supervisor, which reports [`Event::Lost`] and restores
/// every consumer: no path leaves a topic undelivered without a `Lost` and the hub's repair.
pub(super) async fn forward_js(
    topic: Topic,
    mut messages: consumer::pull::Ordered,
    (context, stalls): (jetstream::Context, mpsc::UnboundedSender<Topic>),
    created: String,
    next: Arc<AtomicU64>,
    stored: Arc<std::sync::Mutex<Option<i128>>>,
    events: EventSender,
) {
    let mut epochs = life::Epochs::new(created);
    // When to check the stream unless a publication arrives first.
    let mut check_at = tokio::time::Instant::now() + STALL_CHECK;
    // Checks in a row that JetStream did not answer.
    let mut unanswered = 0;
    loop {
        let m = match tokio::time::timeout_at(check_at, messages.next()).await {
            Ok(Some(Ok(m))) => Some(m),
            Ok(Some(Err(e))) => {
                tracing::debug!("NATS: consumer of {topic}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                None
            }
            Ok(None) => {
                tracing::warn!("NATS: the consumer of {topic} ended: restarting the consumers");
                let _ = stalls.send(topic);
                return;
            }
            Err(_) => None,
        };
        let Some(m) = m else {
            if tokio::time::Instant::now() < check_at {
                continue;
            }
            let verdict = stalled(&context, &topic, next.load(Ordering::Acquire)).await;
            unanswered = if verdict.is_none() { unanswered + 1 } else { 0 };
            // Unknown twice in a row (JetStream does not answer for 6 s while the connection is
            // up): restored too, rather than trusted to be fine.
            if verdict == Some(true) || unanswered >= 2 {
                tracing::warn!(
                    "NATS: the consumer of {topic} delivers nothing while the stream holds \
                     publications after {} (or does not answer): restarting the consumers (a \
                     cluster server lost?)",
                    next.load(Ordering::Acquire).saturating_sub(1)
                );
                let _ = stalls.send(topic);
                return;
            }
            check_at = tokio::time::Instant::now() + STALL_CHECK;
            continue;
        };
        let (seq, time) = match m.info() {
            Ok(info) => (info.stream_sequence, info.published.unix_timestamp_nanos()),
            Err(e) => {
                tracing::warn!("NATS: skipped a message on {topic}: {e}");
                continue;
            }
        };
        if seq < next.load(Ordering::Acquire) {
            continue;
        }
        // Each publication with the epoch of the life it names: the hub sees a new life as a new
        // epoch, reports the gap and reads the new one from its start.
        let position = Position {
            epoch: epochs.of(life::of_message(m.message.headers.as_ref())),
            offset: seq,
        };
        match decode(&topic, &m.message.payload, Some(position)) {
            Ok(p) => {
                if events.send(Event::Publication(p)).await.is_err() {
                    return;
                }
            }
            Err(why) => tracing::warn!("NATS: skipped publication {seq} on {topic}: {why}"),
        }
        *stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(time);
        next.store(seq + 1, Ordering::Release);
        check_at = tokio::time::Instant::now() + STALL_CHECK;
    }
}

/// Whether the stream holds a publication on `topic` at or after `next`, which its consumer has
/// not delivered for [`STALL_CHECK`]; `None`: JetStream did not answer.
async fn stalled(context: &jetstream::Context, topic: &Topic, next: u64) -> Option<bool> {
    let stream = context.get_stream(STREAM).await.ok()?;
    match stream.get_last_raw_message_by_subject(&subject(topic)).await {
        Ok(m) => Some(m.sequence >= next),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Some(false),
        Err(_) => None,
    }
}
