//! [`Subscriber`]: one connection's topics and queue. Subscribing (cancel-safe), recovery of
//! what was published after a position, unsubscribing, and receiving.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use sockeye::Message;

use super::node::Hub;
use super::publish::Publisher;
use super::state::Inner;
use crate::backplane::api::History;
use crate::backplane::position::{Origin, Position, Recovery};
use crate::config::SubscriberConfig;
use crate::delivery::{Delivery, delivery, to_delivery};
use crate::error::Error;
use crate::lock::lock;
use crate::queue::{Queue, Seam};
use crate::topic::Topic;

impl Hub {
    /// A new subscriber, subscribed to nothing yet.
    pub fn subscriber(&self, config: SubscriberConfig) -> Subscriber {
        let id = self.inner.next_subscriber.fetch_add(1, Ordering::Relaxed);
        Subscriber {
            hub: self.clone(),
            id,
            queue: Queue::counted(config, &self.inner.queue_budget, id),
            topics: Vec::new(),
        }
    }
}

/// One connection's view of the hub: the topics it subscribed to and its queue of deliveries.
/// Dropping it unsubscribes it from everything.
#[derive(Debug)]
pub struct Subscriber {
    hub: Hub,
    id: u64,
    queue: Arc<Queue>,
    /// A list, not a set: a connection subscribes to a few topics, and an idle subscriber should
    /// cost little (a set's table is a hundred bytes more).
    topics: Vec<Topic>,
}

impl Subscriber {
    /// Its id, as it appears in [`Origin::publisher`] of what it publishes.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Subscribes to `topic`. With `resume`, the publications after that position are queued first
    /// (recovered from the backplane's history), then live ones, with no gap and no duplicate at
    /// the seam; or, if that is impossible, a [`Delivery::Gap`] says so, followed by what the
    /// history still holds (see [`Recovery::Lost`]). Either way this subscriber's own publications
    /// are left out, as they are from live delivery.
    ///
    /// Refused past [`SubscriberConfig::max_subscriptions`] topics for this subscriber
    /// ([`Error::TooManySubscriptions`]) and
    /// [`HubConfig::max_topics`](crate::HubConfig::max_topics) topics on the node
    /// ([`Error::TooManyTopics`]); [`Error::close_code`] says how to close the client's connection
    /// for either. A subscriber stopped by [`SlowPolicy::Close`](crate::SlowPolicy::Close) while it
    /// waits for the history (what arrived live meanwhile counts against its bound) gets
    /// [`Error::TooSlow`] at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a subscribe that is dropped before it completes (a `timeout`, a `select!`, the
    /// connection closing while the history is read) leaves nothing behind. The subscriber is not
    /// subscribed to the topic, nothing is held for it, and the node's subscription at the
    /// backplane is released if no one else uses it (in a task, as [`Drop`] does); subscribing
    /// again starts over and recovers from `resume` as the first attempt would have. The same holds
    /// when it fails.
    pub async fn subscribe(&mut self, topic: &Topic, resume: Option<Position>) -> Result<Recovery, Error> {
        let inner = Arc::clone(&self.hub.inner);
        if self.topics.contains(topic) {
            return Ok(Recovery::Live);
        }
        let max = self.queue.config.max_subscriptions;
        if self.topics.len() >= max {
            return Err(Error::TooManySubscriptions { max });
        }
        // From here until it is disarmed, a drop (cancelled or failed) undoes what was done.
        let pending = Pending {
            inner: &inner,
            queue: &self.queue,
            topic,
            id: self.id,
        };
        let node_epoch;
        {
            let _serial = inner.subscriptions.lock().await;
            let known = lock(&inner.topics).contains_key(topic);
            // Where the topic stands when this node starts following it: the seam from which a
            // later outage is repaired (without it, what is published on a topic this node has
            // not delivered anything on yet would be missed silently after an outage).
            let mut latest = None;
            if !known {
                let max = inner.config.max_topics;
                if lock(&inner.topics).len() >= max {
                    pending.disarm();
                    return Err(Error::TooManyTopics { max });
                }
                inner.backplane.subscribe(topic).await?;
                if inner.backplane.capabilities().history {
                    latest = inner.latest_position(topic).await?;
                }
            }
            // Live publications queue up behind the recovered ones from here on.
            if resume.is_some() {
                self.queue.hold(topic);
            }
            let mut topics = lock(&inner.topics);
            let state = topics.entry(topic.clone()).or_default();
            if state.last.is_none() {
                state.last = latest;
            }
            state.subscribers.insert(self.id, Arc::clone(&self.queue));
            // The node's epoch as this subscriber joins: a history read after this is answered
            // in it or a later one, and the node's moves after this reach the subscriber as
            // catch-up gaps, held during its recovery (see `Queue::release`).
            node_epoch = state.last.as_ref().map(|p| Arc::clone(&p.epoch));
        }
        let recovery = match resume {
            None => Recovery::Live,
            Some(since) => {
                let queue = Arc::clone(&self.queue);
                // No use waiting for the history of a subscriber stopped meanwhile.
                tokio::select! {
                    r = self.recover(topic, since, node_epoch) => r?,
                    () = queue.stopped() => return Err(queue.too_slow_error()),
                }
            }
        };
        pending.disarm();
        self.topics.push(topic.clone());
        Ok(recovery)
    }

    /// Queues what `topic` published after `since`, or the gap, then releases the live
    /// deliveries held meanwhile. `node_epoch`: the node's epoch when the subscriber joined; if
    /// the recovery takes it into another, the node is behind it there (see `Queue::release`).
    async fn recover(
        &self,
        topic: &Topic,
        since: Position,
        node_epoch: Option<Arc<str>>,
    ) -> Result<Recovery, Error> {
        let inner = &self.hub.inner;
        let history = inner
            .history(topic, Some(&since), inner.config.max_recovered)
            .await?;
        // This subscriber's own publications are left out, as live delivery leaves them out.
        let own = Origin {
            node: inner.node,
            publisher: self.id,
        };
        Ok(match history {
            History::Complete(publications) if publications.len() < inner.config.max_recovered => {
                let recovered: Vec<Delivery> = publications
                    .into_iter()
                    .filter(|p| p.origin != own)
                    .filter_map(|p| delivery(p, &since))
                    .collect();
                let count = recovered.len();
                let behind = node_epoch.into_iter().collect();
                self.queue
                    .release(topic, recovered, Some(Seam::At(since)), behind);
                Recovery::Recovered { count }
            }
            History::Lost { latest } => {
                let (resume, after) = inner.after_gap(topic, Some(&since), latest).await;
                let mut queued = vec![Delivery::Gap {
                    topic: topic.clone(),
                    resume: resume.clone(),
                }];
                queued.extend(
                    after
                        .into_iter()
                        .filter(|p| p.origin != own)
                        .filter_map(to_delivery),
                );
                // The epoch it resumed from: if the gap and what follows took it into another,
                // a node's catch-up gap still in this one is stale (see `Queue::release`).
                let behind = std::iter::once(Arc::clone(&since.epoch))
                    .chain(node_epoch)
                    .collect();
                // Into nothing of the current epoch yet: what its node still delivers up to
                // `since` (a node behind, or one that has not seen the failover) must not
                // follow the gap (see `Seam::Left`).
                let seam = match resume {
                    Some(r) => Seam::At(r),
                    None => Seam::Left(since),
                };
                self.queue.release(topic, queued, Some(seam), behind);
                Recovery::Lost
            }
            History::Complete(_) => {
                // Too much to recover: from where this node stands.
                let resume = inner.latest(topic);
                let gap = Delivery::Gap {
                    topic: topic.clone(),
                    resume: resume.clone(),
                };
                let behind = node_epoch.into_iter().collect();
                self.queue.release(topic, vec![gap], resume.map(Seam::At), behind);
                Recovery::Lost
            }
        })
    }

    /// Unsubscribes from `topic`; what was already queued for it stays queued.
    pub async fn unsubscribe(&mut self, topic: &Topic) -> Result<(), Error> {
        let Some(i) = self.topics.iter().position(|t| t == topic) else {
            return Ok(());
        };
        self.topics.swap_remove(i);
        self.queue.forget(topic);
        self.hub.inner.leave(topic, self.id).await
    }

    /// Publishes to every subscriber of `topic` but this one, on every node (as a chat room
    /// does: the sender already has its message): see [`Hub::publish`] for what it returns and
    /// what an error means.
    pub async fn publish(&self, topic: &Topic, message: Message) -> Result<Option<Position>, Error> {
        self.hub.publish_as(self.id, topic, message).await
    }

    /// Publishes `messages` in order, in one go, to every subscriber of `topic` but this one:
    /// see [`Hub::publish_many`] for what is checked, what it returns and what an error means.
    pub async fn publish_many(&self, topic: &Topic, messages: Vec<Message>) -> Result<Vec<Position>, Error> {
        self.hub.publish_many_as(self.id, topic, messages).await
    }

    /// A handle that publishes as this subscriber (leaving it out of the fan-out), for the task
    /// that reads a connection while another writes this subscriber's deliveries.
    pub fn publisher(&self) -> Publisher {
        Publisher {
            hub: self.hub.clone(),
            id: self.id,
        }
    }

    /// Resolves once [`SlowPolicy::Close`](crate::SlowPolicy::Close) has stopped this subscriber:
    /// for a writer blocked on a connection that does not read, to give up on it at once.
    pub async fn too_slow(&self) {
        self.queue.stopped().await;
    }

    /// The next delivery; `None` once the hub has stopped. [`Error::TooSlow`] (once) when the
    /// subscriber passed its bound under [`SlowPolicy::Close`](crate::SlowPolicy::Close); it
    /// receives nothing after that.
    pub async fn recv(&mut self) -> Option<Result<Delivery, Error>> {
        loop {
            let notified = self.queue.notify.notified();
            if let Some(next) = self.queue.pop() {
                return Some(next);
            }
            if self.hub.inner.ended.load(Ordering::Acquire) {
                return None;
            }
            notified.await;
        }
    }

    /// Moves up to `max` queued deliveries into `out` without waiting (for batched writes);
    /// returns how many.
    pub fn try_recv_many(&self, out: &mut Vec<Delivery>, max: usize) -> Result<usize, Error> {
        self.queue.pop_many(out, max)
    }

    /// The next delivery if one is queued, without waiting (`None`: nothing queued): for a
    /// writer that feeds what is queued, then flushes once.
    pub fn try_recv(&self) -> Option<Result<Delivery, Error>> {
        self.queue.pop()
    }

    /// Publications dropped for this subscriber under [`SlowPolicy::Drop`](crate::SlowPolicy::Drop), in all.
    #[expect(
        clippy::misnamed_getters,
        reason = "`dropped` is the count not yet reported; this is the total"
    )]
    pub fn dropped(&self) -> u64 {
        lock(&self.queue.state).dropped_total
    }

    /// Bytes waiting in its queue, as counted against
    /// [`SubscriberConfig::max_queued_bytes`]: payloads and per-delivery overhead, including the
    /// live deliveries held while a [`subscribe`](Self::subscribe) with a position reads the
    /// history.
    pub fn queued_bytes(&self) -> usize {
        lock(&self.queue.state).bytes
    }

    /// The topics it is subscribed to.
    pub fn topics(&self) -> impl Iterator<Item = &Topic> {
        self.topics.iter()
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        let topics = std::mem::take(&mut self.topics);
        if topics.is_empty() {
            return;
        }
        let inner = Arc::clone(&self.hub.inner);
        let id = self.id;
        // Unsubscribing at the backplane is a network call: it cannot happen in `drop`.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                for topic in topics {
                    let _ = inner.leave(&topic, id).await;
                }
            });
        }
    }
}

/// A subscription under way: until [`disarm`](Pending::disarm)ed, dropping it (the subscribe
/// was cancelled or failed) takes the subscriber out of the topic at once and releases the
/// node's subscription at the backplane in a task, if no one else uses it.
struct Pending<'a> {
    inner: &'a Arc<Inner>,
    queue: &'a Arc<Queue>,
    topic: &'a Topic,
    id: u64,
}

impl Pending<'_> {
    /// The subscription is complete (or nothing was done): nothing to undo.
    fn disarm(self) {
        std::mem::forget(self);
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.queue.forget(self.topic);
        // Nothing more delivered to it from now; the topic's entry, if left empty, goes with the
        // backplane's subscription, under the serialising lock (see `leave`).
        if let Some(t) = lock(&self.inner.topics).get_mut(self.topic) {
            t.subscribers.remove(&self.id);
        }
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let inner = Arc::clone(self.inner);
            let topic = self.topic.clone();
            let id = self.id;
            rt.spawn(async move {
                let _ = inner.leave(&topic, id).await;
            });
        }
    }
}
