//! What a subscriber receives: a publication built once for all its subscribers, a gap, a
//! count of what was dropped.

use std::any::TypeId;
use std::sync::{Arc, OnceLock};

use sockeye::{DataKind, Message, PreparedMessage, Utf8Bytes};

use crate::backplane::position::{Origin, Position, Publication};
use crate::topic::Topic;

/// What a subscriber receives.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// A publication (one shared handle for every subscriber it is delivered to).
    Message(Published),
    /// Publications on `topic` may have been missed and cannot be recovered: the backplane's
    /// server was unreachable and has no history, the history no longer reaches back far enough,
    /// or the backplane may have lost publications it had given positions to (a new epoch: its
    /// server restarted or failed over, its storage was lost; or a rollback it did not report).
    ///
    /// After the gap come, in order, whatever the history still holds that was not delivered
    /// (after a new epoch: everything the new epoch holds, from its first publication), then live
    /// publications: the same for a subscriber that stayed subscribed as for one that resumes.
    Gap {
        /// The topic.
        topic: Topic,
        /// The position just before the first publication delivered after this gap: every
        /// publication after it is delivered after the gap (none skipped), none at or before it
        /// is. A client that keeps `resume` (after a new epoch, offset 0 of it, say `0@E2`) and
        /// drops right after the gap skips nothing when it resumes from it later (as far as the
        /// history still reaches; if not, it is told with another gap).
        ///
        /// `None`: the topic has no position in its current history yet (nothing published in a
        /// new epoch), or where it stands is unknown (the history did not answer). Keep the
        /// position held before the gap: resuming from it reports the gap again, then delivers
        /// everything the current history holds.
        resume: Option<Position>,
    },
    /// [`SlowPolicy::Drop`](crate::SlowPolicy::Drop): this many publications did not fit in the
    /// queue and were dropped for this subscriber since the last such notice. Each topic they
    /// were on also gets a [`Gap`](Self::Gap) (its `resume` the last one dropped), before that
    /// topic's next delivery or once the queue has drained; a gap itself is never dropped.
    Dropped {
        /// How many.
        count: u64,
    },
}

/// A publication as delivered: built once on this node and shared by every subscriber it goes
/// to (queueing it for one more subscriber costs one reference count).
#[derive(Clone, PartialEq, Eq)]
pub struct Published(Arc<PublishedInner>);

struct PublishedInner {
    topic: Topic,
    position: Option<Position>,
    origin: Origin,
    prepared: PreparedMessage,
    /// The publication as one protocol's frame (see [`Published::prepared_as`]), made by the
    /// first session that sends it and shared by the others.
    framed: OnceLock<(TypeId, Option<PreparedMessage>)>,
}

impl PartialEq for PublishedInner {
    fn eq(&self, other: &Self) -> bool {
        // The framing is a cache: two equal publications are equal however they were framed.
        (&self.topic, &self.position, &self.origin, &self.prepared)
            == (&other.topic, &other.position, &other.origin, &other.prepared)
    }
}

impl Eq for PublishedInner {}

impl Published {
    /// Its topic.
    pub fn topic(&self) -> &Topic {
        &self.0.topic
    }

    /// Where it stands in the topic's history: keep the last one to resume from after a
    /// reconnect (`None` from a backplane without history).
    pub fn position(&self) -> Option<&Position> {
        self.0.position.as_ref()
    }

    /// Who published it.
    pub fn origin(&self) -> Origin {
        self.0.origin
    }

    /// The message (its payload shared with every other subscriber).
    pub fn message(&self) -> &Message {
        self.0.prepared.message()
    }

    /// The message prepared once for every subscriber: send it with
    /// [`WebSocketWriter::feed_prepared`](sockeye::WebSocketWriter::feed_prepared) so that with
    /// permessage-deflate (without context takeover) it is compressed once, not once per
    /// connection.
    pub fn prepared(&self) -> &PreparedMessage {
        &self.0.prepared
    }

    /// The publication framed by a protocol (inside a JSON object with its topic and position,
    /// say), built once on this node for every subscriber it goes to: the first call makes it
    /// with `frame`, later calls with the same `K` get the same prepared message. `K` names the
    /// framing (the protocol's type): a call with another `K` gets `None`, and should frame the
    /// publication for its own connection. `None` too when `frame` gives no message.
    pub fn prepared_as<K: 'static>(
        &self,
        frame: impl FnOnce(&Published) -> Option<Message>,
    ) -> Option<&PreparedMessage> {
        let (kind, framed) = self
            .0
            .framed
            .get_or_init(|| (TypeId::of::<K>(), frame(self).and_then(PreparedMessage::new)));
        if *kind == TypeId::of::<K>() {
            framed.as_ref()
        } else {
            None
        }
    }

    /// Whether it is at or before `seam` in the same epoch (already delivered).
    pub(crate) fn not_after(&self, seam: &Position) -> bool {
        self.0
            .position
            .as_ref()
            .is_some_and(|p| p.epoch == seam.epoch && p.offset <= seam.offset)
    }

    /// Whether it has a position of another epoch than `seam`'s.
    pub(crate) fn other_epoch(&self, seam: &Position) -> bool {
        self.0.position.as_ref().is_some_and(|p| p.epoch != seam.epoch)
    }
}

impl std::fmt::Debug for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Published")
            .field("topic", &self.0.topic)
            .field("position", &self.0.position)
            .field("origin", &self.0.origin)
            .field("message", self.message())
            .finish()
    }
}

/// What a queued delivery is counted as against
/// [`SubscriberConfig::max_queued_bytes`](crate::SubscriberConfig): its payload and what the queue
/// holds for it, so that the bound is one of memory.
pub(crate) const QUEUE_ITEM_COST: usize = std::mem::size_of::<Delivery>() + 16;

impl Delivery {
    /// The bytes this delivery holds in a queue.
    pub(crate) fn size(&self) -> usize {
        QUEUE_ITEM_COST
            + match self {
                Delivery::Message(p) => p.message().as_payload().len(),
                _ => 0,
            }
    }
}

/// Turns a publication into a delivery if it comes after `since`.
pub(crate) fn delivery(p: Publication, since: &Position) -> Option<Delivery> {
    if let Some(pos) = &p.position
        && pos.epoch == since.epoch
        && pos.offset <= since.offset
    {
        return None;
    }
    to_delivery(p)
}

/// The message of a publication, built once for all its subscribers. A text payload that is not
/// UTF-8 (a foreign publisher on the backplane) is dropped: it could not be sent as text.
pub(crate) fn to_delivery(p: Publication) -> Option<Delivery> {
    let message = match p.kind {
        DataKind::Text => Message::Text(Utf8Bytes::try_from(p.payload).ok()?),
        DataKind::Binary => Message::Binary(p.payload),
    };
    Some(Delivery::Message(Published(Arc::new(PublishedInner {
        topic: p.topic,
        position: p.position,
        origin: p.origin,
        prepared: PreparedMessage::new(message)?,
        framed: OnceLock::new(),
    }))))
}
