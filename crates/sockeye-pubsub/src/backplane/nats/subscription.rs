//! Following topics: a topic's delivery started (a core subscription, or an ordered JetStream
//! consumer from a sequence or a time), and restored after a reconnection or a stalled
//! consumer: the supervisor that reports [`Event::Lost`] and [`Event::Restored`], the stream
//! checked for a tail it lost.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{consumer, stream};
use tokio::sync::mpsc;

use super::connection::Shared;
use super::follow::{Follow, Limits, ORDERED_EXPIRES, Start, forward_core, forward_js};
use super::stream::{Js, STREAM, epoch_of, stored_at};
use super::wire::subject;
use crate::backplane::api::Event;
use crate::error::Error;
use crate::topic::Topic;

impl Shared {
    /// Starts delivering `topic`: JetStream from `start` in `epoch`, core from now.
    pub(super) async fn follow(&self, topic: &Topic, epoch: String, start: Start) -> Result<Follow, Error> {
        let subject = subject(topic);
        let (first, stored, after) = match start {
            Start::Sequence { sequence, last } => (sequence, last, None),
            Start::After(t) => (0, Some(t), Some(t)),
        };
        let next = Arc::new(AtomicU64::new(first));
        let stored = Arc::new(std::sync::Mutex::new(stored));
        let events = self.events.clone();
        let task = match &self.js {
            None => {
                let sub = self
                    .client
                    .subscribe(subject)
                    .await
                    .map_err(|e| self.failed(format_args!("subscribe to {topic}"), e))?;
                // The server has the subscription once it answered a round trip sent after it:
                // "subscribed" must mean that every publication the server takes from now on is
                // delivered. (A flush only wrote it out: another node's publication just after
                // could reach the server first and be missed with no gap, issue 39's checker on
                // NATS core, seed 1. In a cluster, other servers learn of it later still: core
                // NATS promises no more there.)
                self.round_trip(&format!("subscribe to {topic}")).await?;
                crate::task::spawn_in(&self.span, forward_core(topic.clone(), sub, events))
            }
            Some(js) => {
                let deliver_policy = match after {
                    Some(t) => consumer::DeliverPolicy::ByStartTime {
                        start_time: async_nats::datetime::from_nanos(t.saturating_add(1))
                            .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?,
                    },
                    None => consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: first.max(1),
                    },
                };
                let config = consumer::pull::OrderedConfig {
                    filter_subject: subject,
                    deliver_policy,
                    // The client's pull requests last this long and ask the server for an idle
                    // heartbeat every half of it; two missed and the client recreates the
                    // consumer from the last sequence it delivered (from the stream's first if
                    // none: `forward_js` skips what it had). Without a bound that is
                    // 30 s and 15 s: a node whose connection stayed up but whose consumer was
                    // on a cluster server that died got nothing on the topic for 30 s or more
                    // (tests/distributed.rs saw no recovery within 40 s).
                    max_expires: ORDERED_EXPIRES,
                    ..Default::default()
                };
                let consumer: consumer::Consumer<consumer::pull::OrderedConfig> = js
                    .context
                    .create_consumer_on_stream(config, STREAM)
                    .await
                    .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?;
                let messages = consumer
                    .messages()
                    .await
                    .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?;
                crate::task::spawn_in(
                    &self.span,
                    forward_js(
                        topic.clone(),
                        messages,
                        (js.context.clone(), self.stalls.clone()),
                        epoch.clone(),
                        (Arc::clone(&next), Arc::clone(&stored)),
                        Limits {
                            per_topic: u64::try_from(js.config.max_messages_per_subject)
                                .ok()
                                .filter(|n| *n > 0),
                            max_age: Some(js.config.max_age).filter(|a| !a.is_zero()),
                        },
                        events,
                    ),
                )
            }
        };
        Ok(Follow {
            task: Some(task),
            next,
            epoch,
            stored,
        })
    }

    /// After a reconnect: the stream again (it may be new: another epoch), then every topic's
    /// consumer from its next unseen sequence (core NATS: the client resubscribed already).
    ///
    /// `done`: the topics an earlier attempt of the same restoration restored, in the epoch it
    /// names, left running; this attempt adds those it restores. A cluster that lost a server
    /// still places some new consumers on it for a while (their creation times out: about half
    /// of them in tests/distributed.rs), so an attempt that restarted every topic failed as long
    /// as any one of them did, and a node could retry for longer than the test's 15 s while
    /// its topics stayed undelivered.
    async fn restore(&self, done: &mut (String, HashSet<Topic>)) -> Result<(), Error> {
        let Some(js) = &self.js else { return Ok(()) };
        let info = js.ensure_stream(&self.server).await?;
        let epoch = epoch_of(&info);
        if done.0 != epoch {
            *done = (epoch.clone(), HashSet::new());
        }
        let mut topics = self.topics.lock().await;
        // Every topic is tried, each failure leaving the others restored; the first error ends
        // the attempt.
        let mut failed = None;
        for (topic, follow) in topics.iter_mut() {
            if done.1.contains(topic) {
                continue;
            }
            follow.stop().await;
            match self.restore_topic(js, &info, &epoch, topic, follow).await {
                Ok(()) => {
                    done.1.insert(topic.clone());
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One topic's consumer again (its task stopped), from its next unseen sequence in `epoch`.
    async fn restore_topic(
        &self,
        js: &Js,
        info: &stream::Info,
        epoch: &str,
        topic: &Topic,
        follow: &mut Follow,
    ) -> Result<(), Error> {
        let start = if follow.epoch == epoch {
            let next = follow.next.load(Ordering::Acquire);
            let stored = *follow
                .stored
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let (0, Some(t)) = (next, stored) {
                // Started after a time, and nothing delivered since: after it again (from
                // sequence 1, the topic came again from its start).
                Start::After(t)
            } else if self.went_back(js, topic, info, next, stored).await? {
                // The stream lost its tail and gives those sequences again: what it stored
                // after the last publication delivered is new, whatever its sequence (the
                // hub reports the gap when it sees a position again).
                tracing::warn!(
                    "NATS: stream {STREAM} went back (it had given sequence {}, now stands at {}): \
                     it lost publications on {topic}",
                    next.saturating_sub(1),
                    info.state.last_sequence
                );
                match stored {
                    Some(t) => Start::After(t),
                    None => Start::Sequence {
                        sequence: info.state.last_sequence + 1,
                        last: None,
                    },
                }
            } else {
                // Checked by the new consumer's task once it skips past `next`: the limits may
                // drop the topic's publications after `next - 1` before they are delivered.
                Start::Sequence {
                    sequence: next,
                    last: stored,
                }
            }
        } else {
            // The stream was lost: everything in the new one is new.
            Start::Sequence {
                sequence: 1,
                last: None,
            }
        };
        *follow = self.follow(topic, epoch.to_owned(), start).await?;
        Ok(())
    }

    /// Whether the stream went back behind what `topic` delivered: the last publication
    /// delivered (sequence `next - 1`, stored at `stored`) is beyond the stream's end, or that
    /// sequence now holds another publication. (One gone from a stream that still reaches past
    /// it was dropped by the limits: not a rollback.)
    async fn went_back(
        &self,
        js: &Js,
        topic: &Topic,
        info: &stream::Info,
        next: u64,
        stored: Option<i128>,
    ) -> Result<bool, Error> {
        let Some(seq) = next.checked_sub(1).filter(|s| *s >= 1) else {
            return Ok(false);
        };
        if seq > info.state.last_sequence {
            // Past the end read before this topic's consumer stopped, which may have delivered
            // newer publications since: ask again, now that it is stopped, before calling it a
            // rollback (a false one restarts the consumer by time).
            let mut stream = js
                .context
                .get_stream(STREAM)
                .await
                .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
            let last = stream
                .info()
                .await
                .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?
                .state
                .last_sequence;
            if seq > last {
                return Ok(true);
            }
        }
        let Some(stored) = stored else { return Ok(false) };
        let stream = js
            .context
            .get_stream(STREAM)
            .await
            .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
        match stored_at(&stream, seq).await {
            Ok(Some(m)) => Ok(m.subject != subject(topic) || m.time != stored),
            Ok(None) => Ok(false),
            Err(e) => Err(self.failed(format_args!("{topic}: publication {seq}"), e)),
        }
    }
}

/// Turns the client's connection events into [`Event::Lost`] and [`Event::Restored`], and
/// restores the consumers when one stalled (its server left the cluster while this node's
/// connection, to another server, stayed up) or when the client dropped messages for a slow
/// consumer (core NATS: see [`dropped`]).
pub(super) async fn supervise(
    shared: Weak<Shared>,
    mut conn: mpsc::UnboundedReceiver<async_nats::Event>,
    mut stalls: mpsc::UnboundedReceiver<Topic>,
) {
    let mut lost = false;
    // Client events queued before the last `Restored` was sent: a drop they tell of happened
    // before it, so the gap the hub reported for it covers them.
    let mut covered = 0usize;
    loop {
        let event = tokio::select! {
            event = conn.recv() => match event {
                Some(event) => event,
                None => return,
            },
            Some(topic) = stalls.recv() => {
                let Some(s) = shared.upgrade() else { return };
                let reason = format!("{}: the consumer of {topic} stalled; restoring", s.server);
                if !report_lost(&s, &mut lost, reason).await {
                    return;
                }
                // Restored as after a reconnection.
                async_nats::Event::Connected
            }
        };
        let queued_before_restored = covered > 0;
        covered = covered.saturating_sub(1);
        let Some(s) = shared.upgrade() else { return };
        let event = match event {
            async_nats::Event::SlowConsumer(sid) => match dropped(&s, sid, queued_before_restored) {
                Some(reason) => {
                    if !report_lost(&s, &mut lost, reason).await {
                        return;
                    }
                    async_nats::Event::Connected
                }
                None => continue,
            },
            event => event,
        };
        match event {
            async_nats::Event::Disconnected => {
                let reason = format!("disconnected from {}; reconnecting", s.server);
                if !report_lost(&s, &mut lost, reason).await {
                    return;
                }
            }
            async_nats::Event::Connected => {
                // The client drops events its channel cannot take (it `try_send`s them), so a
                // reconnection may come without its disconnection: restored all the same, and
                // reported, so that the hub repairs every topic from its last position.
                // The first connection's own event (it may come late, after topics were
                // subscribed) is no reconnection: nothing was lost (before: a needless gap on
                // core NATS under load).
                let reconnected = s.connects() > 1;
                if !lost && reconnected && !s.topics.lock().await.is_empty() {
                    let reason = format!("reconnected to {}; restoring", s.server);
                    if !report_lost(&s, &mut lost, reason).await {
                        return;
                    }
                }
                if !lost {
                    continue;
                }
                // Retried while connected; a new disconnection ends this and the next connection
                // tries again.
                let mut restored = false;
                let mut done = (String::new(), HashSet::new());
                while s.client.connection_state() == State::Connected {
                    match s.restore(&mut done).await {
                        Ok(()) => {
                            restored = true;
                            break;
                        }
                        Err(e) => {
                            tracing::warn!("restoring the NATS subscriptions: {e}");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
                if restored {
                    lost = false;
                    if s.events.send(Event::Restored).await.is_err() {
                        return;
                    }
                    covered = conn.len();
                }
            }
            other => tracing::debug!("{}: {other}", s.server),
        }
    }
}

/// Sends [`Event::Lost`] unless it was sent already for the outage under way; false once the hub
/// is gone.
async fn report_lost(s: &Shared, lost: &mut bool, reason: String) -> bool {
    if *lost {
        return true;
    }
    *lost = true;
    s.events.send(Event::Lost { reason }).await.is_ok()
}

/// The client dropped a message for subscription `sid`, whose channel was full (this node
/// forwarded slower than the server sent, 65,536 messages behind): the reason to report the
/// loss, or `None` when nothing is lost or it is reported already.
///
/// Core NATS: a publication is gone (the subscription is not known by its `sid`: every topic
/// is reported, by `Lost` then `Restored`, and the hub tells every subscriber of the gap).
/// JetStream: the topics' ordered consumers see the hole in their consumer sequence and
/// recreate themselves from the last stream sequence they delivered (nothing is skipped), and
/// the backplane's own responder only answers pings (a publication whose ping was dropped fails
/// and is retried): nothing to report. A drop told by an event queued before the last
/// `Restored` was sent is covered by the gap that followed it.
fn dropped(s: &Shared, sid: u64, covered: bool) -> Option<String> {
    if s.js.is_some() || covered {
        tracing::debug!(
            "NATS {}: the client dropped messages of subscription {sid} (a slow consumer): {}",
            s.server,
            if covered {
                "reported already"
            } else {
                "the JetStream consumers recover them"
            }
        );
        return None;
    }
    tracing::warn!(
        "NATS {}: the client dropped messages of subscription {sid} (this node forwards slower \
         than the server sends): publications were lost, reported as a gap",
        s.server
    );
    Some(format!("{}: messages dropped for a slow consumer", s.server))
}
