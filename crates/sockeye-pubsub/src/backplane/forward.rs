//! Publications from a backplane client that keeps reading its connection whatever the hub does
//! (the Redis client: its push channel is unbounded) to the hub, in bounded memory: what the
//! event queue ([`EVENT_QUEUE`](super::api::EVENT_QUEUE)) cannot take is dropped, never held,
//! and its topics are reported with [`Event::Missed`] as soon as the queue has room again, ahead
//! of anything more of theirs; the hub repairs them from history or reports the gap.
//!
//! What this process then holds between the client and the hub is the event queue, the topics
//! owed a report (at most the topics subscribed), and what the client received that the reader
//! has not yet looked at: the reader takes it as fast as it comes, never waiting on the hub.

use std::collections::HashSet;

use tokio::sync::mpsc::error::TrySendError;

use super::api::{Event, EventSender};
use super::position::Publication;
use crate::topic::Topic;

/// The hub stopped listening: the reader ends.
#[derive(Debug)]
pub(crate) struct HubGone;

/// The forwarding state of one reader.
pub(crate) struct Forwarder {
    events: EventSender,
    /// Topics with publications dropped and not yet reported.
    missed: HashSet<Topic>,
    /// Publications dropped since the last report, for the log.
    dropped: u64,
    /// Who is forwarding, for the log (`redis 127.0.0.1:6379`).
    name: String,
}

impl Forwarder {
    pub(crate) fn new(events: EventSender, name: String) -> Forwarder {
        Forwarder {
            events,
            missed: HashSet::new(),
            dropped: 0,
            name,
        }
    }

    /// Hands `p` to the hub without waiting: dropped, and its topic owed a report, when the
    /// queue is full (or when a report is owed that does not fit yet: it must come first).
    pub(crate) fn publication(&mut self, p: Publication) -> Result<(), HubGone> {
        if !self.missed.is_empty() && !self.try_report()? {
            self.drop_one(p.topic);
            return Ok(());
        }
        match self.events.try_send(Event::Publication(p)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(event)) => {
                if let Event::Publication(p) = event {
                    self.drop_one(p.topic);
                }
                Ok(())
            }
            Err(TrySendError::Closed(_)) => Err(HubGone),
        }
    }

    /// Whether a report is owed: [`room`](Self::room) is then worth waiting for.
    pub(crate) fn owes(&self) -> bool {
        !self.missed.is_empty()
    }

    /// Waits for room in the queue and sends the report owed (nothing when none is owed). For a
    /// `select!` beside the client's reads: cancel-safe (nothing is taken before the room is).
    pub(crate) async fn room(&mut self) -> Result<(), HubGone> {
        if self.missed.is_empty() {
            return Ok(());
        }
        let permit = self.events.reserve().await.map_err(|_| HubGone)?;
        permit.send(report(&mut self.missed, &mut self.dropped, &self.name));
        Ok(())
    }

    /// Sends an event that must not be dropped (a loss, a restoration), waiting for room, behind
    /// the report owed. For the rare events sent when the client reads nothing (the Redis
    /// backplanes'; NATS's client reports its losses as events of its own).
    #[cfg(feature = "redis")]
    pub(crate) async fn send(&mut self, event: Event) -> Result<(), HubGone> {
        self.room().await?;
        self.events.send(event).await.map_err(|_| HubGone)
    }

    fn drop_one(&mut self, topic: Topic) {
        if self.dropped == 0 {
            tracing::warn!(
                "pub/sub backplane: {}: the hub is behind; dropping publications (repaired from history or reported as gaps)",
                self.name
            );
        }
        self.dropped += 1;
        self.missed.insert(topic);
    }

    /// Sends the report owed if there is room now.
    fn try_report(&mut self) -> Result<bool, HubGone> {
        match self.events.try_reserve() {
            Ok(permit) => {
                permit.send(report(&mut self.missed, &mut self.dropped, &self.name));
                Ok(true)
            }
            Err(TrySendError::Full(())) => Ok(false),
            Err(TrySendError::Closed(())) => Err(HubGone),
        }
    }
}

/// The report of the topics `missed` (emptied, its table freed) and of `dropped` (zeroed).
fn report(missed: &mut HashSet<Topic>, dropped: &mut u64, name: &str) -> Event {
    let topics: Vec<Topic> = std::mem::take(missed).into_iter().collect();
    tracing::warn!(
        "pub/sub backplane: {name}: {} publications on {} topics dropped while the hub was behind",
        std::mem::take(dropped),
        topics.len()
    );
    Event::Missed { topics }
}
