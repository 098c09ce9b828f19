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
use super::stream::{STREAM, stored_at};
use super::wire::{decode, subject};
use crate::backplane::api::{Event, EventSender};
use crate::backplane::forward::Forwarder;
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

/// Where a topic's JetStream consumer starts.
pub(super) enum Start {
    /// At stream sequence `sequence`. With `last`, the publication at `sequence - 1` is the
    /// topic's last delivered, stored at that time (Unix nanoseconds): a consumer restored
    /// after an outage, whose skip past it is checked (see [`forward_js`]).
    Sequence { sequence: u64, last: Option<i128> },
    /// At the first publication stored after this time (Unix nanoseconds): after the stream
    /// went back and gave the topic's sequences to other publications.
    After(i128),
}

/// One subscribed topic: the task forwarding its messages to the hub.
pub(super) struct Follow {
    pub(super) task: Option<JoinHandle<()>>,
    /// JetStream: the next stream sequence not yet delivered (0: started after a time,
    /// [`Start::After`], the time in `stored`, and nothing delivered since), and the creation
    /// time of the stream it belongs to (the first part of every epoch in it).
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

/// Forwards a core subscription's messages to the hub, never waiting on it: what the event
/// queue cannot take is dropped, and the topic reported [`Event::Missed`] once the queue has
/// room again, ahead of anything more of it (`backplane/forward.rs`), so the hub's gap sits
/// exactly where the loss is in the topic's order. (Waiting on the hub let the client's own
/// buffer for the subscription fill instead; the client then drops what does not fit and only
/// emits an event, whose gap, reported for every topic by the supervisor, could reach a
/// subscriber ahead of publications received before the loss: issue 39's checker, NATS core,
/// seed 1. That remains the backstop should this task fall 65,536 messages behind.)
pub(super) async fn forward_core(topic: Topic, mut sub: async_nats::Subscriber, events: EventSender) {
    let mut to_hub = Forwarder::new(events, format!("nats {topic}"));
    loop {
        tokio::select! {
            m = sub.next() => {
                let Some(m) = m else { return };
                match decode(&topic, &m.payload, None) {
                    Ok(p) => {
                        if to_hub.publication(p).is_err() {
                            return;
                        }
                    }
                    Err(why) => tracing::warn!("NATS: skipped a message on {topic}: {why}"),
                }
            }
            reported = to_hub.room(), if to_hub.owes() => {
                if reported.is_err() {
                    return;
                }
            }
        }
    }
}

/// Forwards an ordered consumer's messages to the hub, each once (`next` skips what a recreated
/// consumer delivers again).
///
/// A consumer skips what the stream no longer holds: publications of the topic that its limits
/// dropped before they were delivered (the node lagging, cut off, or its consumer recreated
/// from a sequence after an outage) are skipped without a sign. So a publication delivered
/// after such a drop may have been, the last one delivered (`next - 1`) is first checked still
/// in the stream (limits drop a topic's oldest first: while it is there, none after it was
/// dropped). If it is gone, or JetStream does not answer, the hub is told [`Event::Missed`]
/// before the publication, and repairs the topic from history or reports the gap. A drop was
/// possible when the consumer was (re)created since the last delivery, when the topic held
/// half its limit of publications past this one or more as it was sent (a drop by the
/// per-topic limit leaves `max_len` publications after the one dropped, the one sent among
/// them; half, for the server's count is an estimate), or when the last delivery is nearly
/// `max_age` old ([`Limits`]); otherwise nothing is asked.
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
    (next, stored): (Arc<AtomicU64>, Arc<std::sync::Mutex<Option<i128>>>),
    limits: Limits,
    events: EventSender,
) {
    let mut epochs = life::Epochs::new(created);
    // When to check the stream unless a publication arrives first.
    let mut check_at = tokio::time::Instant::now() + STALL_CHECK;
    // Checks in a row that JetStream did not answer.
    let mut unanswered = 0;
    // The consumer was (re)created and has delivered nothing past `next` since.
    let mut fresh = true;
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
            let at = next.load(Ordering::Acquire);
            // Started after a time and nothing delivered yet (`next` 0): that time.
            let after = if at == 0 {
                *stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
            } else {
                None
            };
            let verdict = stalled(&context, &topic, at, after).await;
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
        let (seq, time, pending) = match m.info() {
            Ok(info) => {
                // A consumer's own sequence starts at 1: the client recreated it.
                fresh |= info.consumer_sequence == 1;
                (
                    info.stream_sequence,
                    info.published.unix_timestamp_nanos(),
                    info.pending,
                )
            }
            Err(e) => {
                tracing::warn!("NATS: skipped a message on {topic}: {e}");
                continue;
            }
        };
        let expected = next.load(Ordering::Acquire);
        if seq < expected {
            continue;
        }
        let last = *stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Started after a time ([`Start::After`]: `next` 0, the time in `stored`): until one is
        // delivered, what was stored at or before it is not new. (The client recreates a
        // consumer from the last sequence it yielded, or from the stream's first when it yielded
        // none: a consumer recreated before its first message gave the topic again from its
        // start, issue 39's checker on a NATS cluster, seed 378722: "the backplane gave position
        // 4 again".)
        if expected == 0 && last.is_some_and(|t| time <= t) {
            continue;
        }
        let was_fresh = std::mem::take(&mut fresh);
        // A skip past the next sequence (other topics' publications, or a drop), checked when a
        // drop was possible.
        let skipped_a_drop = if seq > expected && (was_fresh || limits.near(pending, last)) {
            let gone = expected >= 2
                && match last {
                    Some(last) => !still_kept(&context, &topic, expected - 1, last).await,
                    None => false,
                };
            tracing::debug!(
                "NATS: {topic}: {seq} after {} (fresh consumer: {was_fresh}, {pending} pending): \
                 checked, {}",
                expected.saturating_sub(1),
                if gone { "gone: Missed" } else { "still kept" }
            );
            gone
        } else {
            false
        };
        if skipped_a_drop {
            tracing::warn!(
                "NATS: publication {seq} on {topic} was delivered after the last one delivered \
                 ({}) left the stream (its limits dropped it, and maybe some after it): \
                 repaired from history or reported as a gap",
                expected - 1
            );
            if events
                .send(Event::Missed {
                    topics: vec![topic.clone()],
                })
                .await
                .is_err()
            {
                return;
            }
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

/// The stream's limits as this node asks for them (the stream keeps at least as much: a node
/// never lowers them), which say when a delivery may have followed a drop.
#[derive(Clone, Copy, Debug)]
pub(super) struct Limits {
    /// Publications kept per topic; `None`: no limit.
    pub(super) per_topic: Option<u64>,
    /// How long a publication is kept; `None`: no limit.
    pub(super) max_age: Option<Duration>,
}

impl Limits {
    /// Slack for the clocks of this node and of the server that stored the last delivery.
    const CLOCK_SLACK: Duration = Duration::from_secs(2);

    /// Whether the limits may have dropped publications after the last delivery (stored at
    /// `last`, Unix nanoseconds) before one sent with `pending` more behind it: the topic held
    /// half its limit or more, or the last delivery is nearly `max_age` old.
    ///
    /// Half, not all: a drop by the per-topic limit leaves the limit's worth after the
    /// publication dropped (`pending + 1 == per_topic` for the next one sent), but the count a
    /// server sends with a message is its running estimate, which lags under a burst. It was
    /// 872 to 936 where 999 were pending, on the first message of a pull batch after drops
    /// (issue 39's checker, NATS JetStream, seed 268265: a node whose limit equals the
    /// stream's skipped 10,000 publications unchecked). A node lagging half its window behind
    /// pays one request per skip; one keeping up pays none.
    fn near(&self, pending: u64, last: Option<i128>) -> bool {
        let by_count = self
            .per_topic
            .is_some_and(|n| pending.saturating_add(1).saturating_mul(2) >= n);
        let by_age = match (self.max_age, last) {
            (Some(age), Some(last)) => {
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as i128);
                now.saturating_sub(last) + Self::CLOCK_SLACK.as_nanos() as i128 >= age.as_nanos() as i128
            }
            _ => false,
        };
        by_count || by_age
    }
}

/// Whether the stream still holds `topic`'s publication at sequence `seq`, stored at `time`;
/// false when JetStream does not answer (the caller reports a possible loss).
async fn still_kept(context: &jetstream::Context, topic: &Topic, seq: u64, time: i128) -> bool {
    let Ok(stream) = context.get_stream(STREAM).await else {
        return false;
    };
    match stored_at(&stream, seq).await {
        Ok(Some(m)) => m.subject == subject(topic) && m.time == time,
        Ok(None) | Err(_) => false,
    }
}

/// Whether the stream holds a publication on `topic` at or after `next` (started after a time
/// and nothing delivered yet: stored after `after`), which its consumer has not delivered for
/// [`STALL_CHECK`]; `None`: JetStream did not answer. (Before `after` counted, a quiet topic
/// started after a time was found stalled every 3 s, and restored from its first sequence.)
async fn stalled(
    context: &jetstream::Context,
    topic: &Topic,
    next: u64,
    after: Option<i128>,
) -> Option<bool> {
    let stream = context.get_stream(STREAM).await.ok()?;
    match stream.get_last_raw_message_by_subject(&subject(topic)).await {
        Ok(m) => Some(match after {
            Some(t) => m.time.unix_timestamp_nanos() > t,
            None => m.sequence >= next,
        }),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Some(false),
        Err(_) => None,
    }
}
