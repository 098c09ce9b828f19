//! What a node's hub shares between its handles, its subscribers and its fan-out task: the
//! backplane, the topics with their subscribers' queues and the seams of gap repair, and the
//! few reads of the backplane that several of them make.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use crate::backplane::api::{Backplane, History};
use crate::backplane::position::Position;
use crate::config::HubConfig;
use crate::error::Error;
use crate::lock::lock;
use crate::queue::Queue;
use crate::queue_budget::QueueBudget;
use crate::topic::Topic;

/// What a hub's handles, its subscribers and its fan-out task share.
pub(super) struct Inner {
    pub(super) node: u64,
    pub(super) config: HubConfig,
    pub(super) backplane: Box<dyn Backplane>,
    pub(super) topics: Mutex<HashMap<Topic, TopicState>>,
    /// Serialises subscribing and unsubscribing at the backplane, so that a topic's last
    /// subscriber leaving and a new one arriving cannot leave the backplane unsubscribed.
    pub(super) subscriptions: tokio::sync::Mutex<()>,
    pub(super) next_subscriber: AtomicU64,
    /// The bound on every subscriber's queue together ([`HubConfig::max_queued_bytes_total`]).
    pub(super) queue_budget: Arc<QueueBudget>,
    /// The backplane's event channel ended: nothing more will be delivered.
    pub(super) ended: AtomicBool,
    /// The backplane said it lost its server ([`Event::Lost`]) and has not said it is back.
    pub(super) backplane_lost: AtomicBool,
    /// How long the last publication (or batch) took the backplane to acknowledge, in
    /// nanoseconds (0: none yet). A relaxed store per batch, for metrics.
    pub(super) last_publish_nanos: AtomicU64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

/// A topic this node follows: its subscribers here, and the seams of gap repair.
#[derive(Default)]
pub(super) struct TopicState {
    pub(super) subscribers: HashMap<u64, Arc<Queue>>,
    /// The newest position delivered on this node: the seam for gap repair and duplicates.
    pub(super) last: Option<Position>,
    /// The newest position the backplane handed live: one at or before it in the same epoch is
    /// a rollback (the backplane never hands a publication twice live).
    pub(super) live: Option<Position>,
    /// Past epochs, newest last, at most [`PAST_EPOCHS`]: the ones this node left for another
    /// with a gap, and the ones of publications found past (see `Inner::of_a_past_epoch`). A
    /// live publication of one, still on its way (NATS: one sent across a server restart names
    /// the life it was sent to), is covered by the gap into the current epoch, not delivered
    /// under an epoch the subscribers have left. An epoch never comes back.
    pub(super) past: Vec<Arc<str>>,
    /// Where the node stood (`last`) when a gap into nothing (`resume` `None`) left its epoch:
    /// what of that epoch the backplane still hands on in its live order, at or before it, the
    /// node had (a repair from history ran ahead of its backlog); dropped. The next publication
    /// delivered ends it.
    pub(super) left: Option<Position>,
}

/// Past epochs a topic remembers (each more is one history read per publication of it still on
/// its way, and no more than that).
pub(super) const PAST_EPOCHS: usize = 4;

impl TopicState {
    /// Remembers `epoch` as past.
    pub(super) fn passed(&mut self, epoch: &Arc<str>) {
        if self.past.contains(epoch) {
            return;
        }
        if self.past.len() >= PAST_EPOCHS {
            self.past.remove(0);
        }
        self.past.push(Arc::clone(epoch));
    }
}

impl Inner {
    /// Removes subscriber `id` from `topic`, and the node's subscription at the backplane with
    /// the topic's last subscriber (or when the topic has no entry: a subscription cancelled
    /// before it made one may have subscribed at the backplane).
    pub(super) async fn leave(&self, topic: &Topic, id: u64) -> Result<(), Error> {
        let _serial = self.subscriptions.lock().await;
        let unused = {
            let mut topics = lock(&self.topics);
            let unused = topics.get_mut(topic).is_none_or(|t| {
                t.subscribers.remove(&id);
                t.subscribers.is_empty()
            });
            if unused {
                topics.remove(topic);
            }
            unused
        };
        if unused {
            self.backplane.unsubscribe(topic).await?;
        }
        Ok(())
    }

    /// The publications on `topic` after `since`, at most `limit`, as the backplane's history
    /// holds them; [`History::Lost`] with no latest position from a backplane without history.
    /// What a subscriber resuming from a position and a backend reading what it missed ask.
    pub(super) async fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> Result<History, Error> {
        if !self.backplane.capabilities().history {
            return Ok(History::Lost { latest: None });
        }
        self.backplane.history(topic, since, limit).await
    }

    /// The topic's newest position at the backplane: a position of an epoch no history has
    /// (the empty one) is answered with [`History::Lost`] and where the topic stands.
    pub(super) async fn latest_position(&self, topic: &Topic) -> Result<Option<Position>, Error> {
        let nowhere = Position {
            epoch: "".into(),
            offset: u64::MAX,
        };
        Ok(match self.backplane.history(topic, Some(&nowhere), 0).await? {
            History::Lost { latest } => latest,
            History::Complete(_) => None,
        })
    }

    pub(super) fn latest(&self, topic: &Topic) -> Option<Position> {
        lock(&self.topics).get(topic).and_then(|t| t.last.clone())
    }
}
