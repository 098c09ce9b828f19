//! The hub: a node's topics, its subscribers' queues, and the fan-out from the backplane.
//!
//! A publication is turned into a [`Message`] once (its payload is shared `Bytes`) and pushed into
//! every subscriber's queue under one lock, without an `await` per subscriber: a slow subscriber
//! only ever fills its own queue, whose bound and [`SlowPolicy`](crate::SlowPolicy) decide what
//! happens.
//!
//! # No silent miss
//!
//! A [`Position`] names one publication forever: a backplane that may have lost positions it
//! handed out starts a new epoch (Redis: its server's `run_id` changed; NATS: the stream was
//! recreated, or its single server restarted). On every node, the first sight of the new epoch (or of a reconnection, a jump in
//! contiguous offsets) makes the hub fetch what it missed from history; what cannot be fetched is
//! a [`Delivery::Gap`], followed by whatever the history still holds, then live publications, so
//! that a subscriber that stayed and one that resumes from a position get the same thing.
//!
//! The hub also checks what the backplane says against what it has seen, for a backplane that
//! went back without changing its epoch: a live publication at or before a position already
//! received live in the same epoch (the backplane never hands one twice), or a history that
//! stands behind a position it gave, is a rollback: a gap is reported, and the positions given
//! again are delivered as the new publications they are, not dropped as duplicates.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sockeye::{DataKind, Message};
use tokio::sync::mpsc;

use crate::backplane::api::{Backplane, EVENT_QUEUE, Event, EventSender, History};
use crate::backplane::in_process::InProcess;
use crate::backplane::position::{Origin, Position, Publication, Recovery};
use crate::config::{HistoryConfig, HubConfig, SubscriberConfig};
use crate::delivery::{Delivery, delivery, to_delivery};
use crate::error::Error;
use crate::queue::{Queue, lock};
use crate::topic::Topic;

/// A node's topics. Cheap to clone (shared); the hub stops when the last clone and the last
/// [`Subscriber`] are dropped.
///
/// ```
/// use sockeye_pubsub::{Delivery, Hub, SubscriberConfig, Topic};
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), sockeye_pubsub::Error> {
/// let hub = Hub::in_process();
/// let lobby = Topic::new("lobby")?;
/// let mut alice = hub.subscriber(SubscriberConfig::default());
/// alice.subscribe(&lobby, None).await?;
/// hub.publish(&lobby, "hello".into()).await?;
/// match alice.recv().await {
///     Some(Ok(Delivery::Message(published))) => {
///         assert_eq!(published.message(), &"hello".into());
///         println!("at {}", published.position().unwrap()); // resume from here after a reconnect
///     }
///     other => panic!("{other:?}"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Hub {
    inner: Arc<Inner>,
    /// Ends the fan-out task when the last handle goes.
    _task: Arc<AbortOnDrop>,
}

#[derive(Debug)]
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

struct Inner {
    node: u64,
    config: HubConfig,
    backplane: Box<dyn Backplane>,
    topics: Mutex<HashMap<Topic, TopicState>>,
    /// Serialises subscribing and unsubscribing at the backplane, so that a topic's last
    /// subscriber leaving and a new one arriving cannot leave the backplane unsubscribed.
    subscriptions: tokio::sync::Mutex<()>,
    next_subscriber: AtomicU64,
    /// The backplane's event channel ended: nothing more will be delivered.
    ended: AtomicBool,
    /// The backplane said it lost its server ([`Event::Lost`]) and has not said it is back.
    backplane_lost: AtomicBool,
    /// How long the last publication (or batch) took the backplane to acknowledge, in
    /// nanoseconds (0: none yet). A relaxed store per batch, for metrics.
    last_publish_nanos: AtomicU64,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hub")
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

#[derive(Default)]
struct TopicState {
    subscribers: HashMap<u64, Arc<Queue>>,
    /// The newest position delivered on this node: the seam for gap repair and duplicates.
    last: Option<Position>,
    /// The newest position the backplane handed live: one at or before it in the same epoch is
    /// a rollback (the backplane never hands a publication twice live).
    live: Option<Position>,
}

impl Hub {
    /// A hub for one process (the [`InProcess`] backplane, default history). Must be called
    /// inside a tokio runtime.
    pub fn in_process() -> Hub {
        Hub::with_backplane(HubConfig::default(), |events| {
            InProcess::new(events, HistoryConfig::default())
        })
    }

    /// A hub over the backplane a URL names (see [`backplane::connect`](crate::backplane::connect)):
    /// `redis://HOST:PORT`, `nats://HOST:PORT` or `memory:`.
    pub async fn connect(url: &str, config: HubConfig, history: HistoryConfig) -> Result<Hub, Error> {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        let backplane = crate::backplane::connect::connect(url, history, tx).await?;
        Ok(Hub::start(config, backplane, rx))
    }

    /// A hub over the backplane that `make` builds around the event channel it is given.
    pub fn with_backplane<B: Backplane>(config: HubConfig, make: impl FnOnce(EventSender) -> B) -> Hub {
        let (tx, rx) = mpsc::channel(EVENT_QUEUE);
        Hub::start(config, Box::new(make(tx)), rx)
    }

    /// A hub over a started backplane whose events arrive on `events`.
    pub fn start(config: HubConfig, backplane: Box<dyn Backplane>, events: mpsc::Receiver<Event>) -> Hub {
        let inner = Arc::new(Inner {
            node: rand::random(),
            config,
            backplane,
            topics: Mutex::default(),
            subscriptions: tokio::sync::Mutex::new(()),
            next_subscriber: AtomicU64::new(1),
            ended: AtomicBool::new(false),
            backplane_lost: AtomicBool::new(false),
            last_publish_nanos: AtomicU64::new(0),
        });
        let task = tokio::spawn(fan_out(Arc::downgrade(&inner), events));
        Hub {
            inner,
            _task: Arc::new(AbortOnDrop(task.abort_handle())),
        }
    }

    /// A new subscriber, subscribed to nothing yet.
    pub fn subscriber(&self, config: SubscriberConfig) -> Subscriber {
        Subscriber {
            hub: self.clone(),
            id: self.inner.next_subscriber.fetch_add(1, Ordering::Relaxed),
            queue: Arc::new(Queue::new(config)),
            topics: Vec::new(),
        }
    }

    /// Publishes to every subscriber of `topic`, on every node. Returns once the backplane has
    /// the publication, with the position it got (`None` from a backplane that gives none: NATS
    /// without JetStream); it is delivered when the backplane hands it back. (Redis's position is
    /// given by the publish script itself; NATS JetStream's is the acknowledged sequence with the
    /// stream's epoch as this node last saw it, at connect or after a reconnect.)
    ///
    /// An error says whether it was published, by the rule of
    /// [`publish_many`](Self::publish_many) for a batch of one: [`Error::PartlyPublished`]
    /// (`published` 0, `sent` 1) when it was sent and the answer was lost, so it may or may not
    /// have been published (retrying may deliver it twice); any other error means it was not
    /// published, and may be retried ([`PublishRetry`](crate::PublishRetry) does both right).
    pub async fn publish(&self, topic: &Topic, message: Message) -> Result<Option<Position>, Error> {
        self.publish_as(0, topic, message).await
    }

    /// Publishes `messages` to every subscriber of `topic`, on every node, in order, as
    /// [`publish`](Self::publish) one after the other would, but in one go: over Redis one round
    /// trip for the whole batch, over NATS one server check and the acknowledgements awaited
    /// together (see [`Backplane::publish_many`]). Returns the positions they got, in order
    /// (empty from a backplane that gives none).
    ///
    /// Every message is checked first (data only, each at most
    /// [`HubConfig::max_payload`](crate::HubConfig)): one that does not pass refuses the whole
    /// batch ([`Error::NotData`], [`Error::PayloadTooLarge`]) and nothing is published.
    ///
    /// Not all-or-nothing: a batch that fails at the backplane may be partly published, and
    /// [`Error::PartlyPublished`] says how far it got; any other error means none of it was
    /// published (it may be retried whole).
    pub async fn publish_many(&self, topic: &Topic, messages: Vec<Message>) -> Result<Vec<Position>, Error> {
        self.publish_many_as(0, topic, messages).await
    }

    /// One rule for one publication and a batch: a publication goes out as a batch of one, whose
    /// error says whether it was published (a backplane's `publish` need not).
    async fn publish_as(
        &self,
        publisher: u64,
        topic: &Topic,
        message: Message,
    ) -> Result<Option<Position>, Error> {
        let publication = self.publication(publisher, topic, message)?;
        let positions = self.timed_publish(vec![publication]).await?;
        Ok(positions.into_iter().next())
    }

    async fn publish_many_as(
        &self,
        publisher: u64,
        topic: &Topic,
        messages: Vec<Message>,
    ) -> Result<Vec<Position>, Error> {
        let publications = messages
            .into_iter()
            .map(|m| self.publication(publisher, topic, m))
            .collect::<Result<Vec<_>, _>>()?;
        match publications.len() {
            0 => Ok(Vec::new()),
            _ => self.timed_publish(publications).await,
        }
    }

    /// Publishes at the backplane, keeping how long it took for
    /// [`last_publish_round_trip`](Self::last_publish_round_trip).
    async fn timed_publish(&self, publications: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let start = std::time::Instant::now();
        let result = self.inner.backplane.publish_many(publications).await;
        if result.is_ok() {
            let nanos = u64::try_from(start.elapsed().as_nanos())
                .unwrap_or(u64::MAX)
                .max(1);
            self.inner.last_publish_nanos.store(nanos, Ordering::Relaxed);
        }
        result
    }

    /// How long the last successful publication (or batch) of this node took the backplane to
    /// acknowledge: its round trip to the backplane's server (`None` before the first one).
    pub fn last_publish_round_trip(&self) -> Option<std::time::Duration> {
        match self.inner.last_publish_nanos.load(Ordering::Relaxed) {
            0 => None,
            nanos => Some(std::time::Duration::from_nanos(nanos)),
        }
    }

    /// Whether the backplane is connected to its server, as far as the hub knows: false from
    /// the backplane's [`Event::Lost`] until its [`Event::Restored`], and once it has ended.
    pub fn backplane_connected(&self) -> bool {
        !self.inner.backplane_lost.load(Ordering::Relaxed) && !self.inner.ended.load(Ordering::Acquire)
    }

    /// The publications on `topic` after `since` (all the history of the current epoch holds
    /// when `None`), oldest first, at most `limit` of them; or [`History::Lost`] when `since` is
    /// of another epoch or older than the history keeps (then read again from `latest`, or
    /// with `None`, for what it still holds). For a backend reading what it missed (the HTTP
    /// API's `GET /history`). A backplane without history answers [`History::Lost`] with no
    /// latest position.
    pub async fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> Result<History, Error> {
        if !self.inner.backplane.capabilities().history {
            return Ok(History::Lost { latest: None });
        }
        self.inner.backplane.history(topic, since, limit).await
    }

    /// A message as a publication, if it may be published.
    fn publication(&self, publisher: u64, topic: &Topic, message: Message) -> Result<Publication, Error> {
        let kind = match &message {
            Message::Text(_) => DataKind::Text,
            Message::Binary(_) => DataKind::Binary,
            _ => return Err(Error::NotData),
        };
        let payload = message.into_payload();
        if payload.len() > self.inner.config.max_payload {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: self.inner.config.max_payload,
            });
        }
        Ok(Publication {
            topic: topic.clone(),
            position: None,
            origin: Origin {
                node: self.inner.node,
                publisher,
            },
            kind,
            payload,
        })
    }

    /// Subscribers of `topic` on this node.
    pub fn subscriber_count(&self, topic: &Topic) -> usize {
        lock(&self.inner.topics)
            .get(topic)
            .map_or(0, |t| t.subscribers.len())
    }

    /// Topics with at least one subscriber on this node.
    pub fn topic_count(&self) -> usize {
        lock(&self.inner.topics).len()
    }

    /// This node's id, as it appears in [`Origin::node`].
    pub fn node(&self) -> u64 {
        self.inner.node
    }

    /// The largest payload a publication may carry ([`HubConfig::max_payload`]).
    pub fn max_payload(&self) -> usize {
        self.inner.config.max_payload
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

    /// Subscribes to `topic`. With `resume`, the publications after that position are queued
    /// first (recovered from the backplane's history), then live ones, with no gap and no
    /// duplicate at the seam; or, if that is impossible, a [`Delivery::Gap`] says so, followed
    /// by what the history still holds (see [`Recovery::Lost`]). Either way this subscriber's
    /// own publications are left out, as they are from live delivery.
    ///
    /// Refused past [`SubscriberConfig::max_subscriptions`] topics for this subscriber
    /// ([`Error::TooManySubscriptions`]) and [`HubConfig::max_topics`] topics on the node
    /// ([`Error::TooManyTopics`]); [`Error::close_code`] says how to close the client's connection
    /// for either. A subscriber stopped by [`SlowPolicy::Close`](crate::SlowPolicy::Close) while it
    /// waits for the history (what arrived live meanwhile counts against its bound) gets
    /// [`Error::TooSlow`] at once.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a subscribe that is dropped before it completes (a `timeout`, a `select!`,
    /// the connection closing while the history is read) leaves nothing behind. The subscriber
    /// is not subscribed to the topic, nothing is held for it, and the node's subscription at the
    /// backplane is released if no one else uses it (in a task, as [`Drop`] does); subscribing
    /// again starts over and recovers from `resume` as the first attempt would have. The same
    /// holds when it fails.
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
        }
        let recovery = match resume {
            None => Recovery::Live,
            Some(since) => {
                let queue = Arc::clone(&self.queue);
                // No use waiting for the history of a subscriber stopped meanwhile.
                tokio::select! {
                    r = self.recover(topic, since) => r?,
                    () = queue.stopped() => return Err(queue.too_slow_error()),
                }
            }
        };
        pending.disarm();
        self.topics.push(topic.clone());
        Ok(recovery)
    }

    /// Queues what `topic` published after `since`, or the gap, then releases the live
    /// deliveries held meanwhile.
    async fn recover(&self, topic: &Topic, since: Position) -> Result<Recovery, Error> {
        let inner = &self.hub.inner;
        let history = if inner.backplane.capabilities().history {
            inner
                .backplane
                .history(topic, Some(&since), inner.config.max_recovered)
                .await?
        } else {
            History::Lost { latest: None }
        };
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
                self.queue.release(topic, recovered, Some(since));
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
                self.queue.release(topic, queued, resume);
                Recovery::Lost
            }
            History::Complete(_) => {
                // Too much to recover: from where this node stands.
                let resume = inner.latest(topic);
                let gap = Delivery::Gap {
                    topic: topic.clone(),
                    resume: resume.clone(),
                };
                self.queue.release(topic, vec![gap], resume);
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

/// Publishes as a [`Subscriber`] (see [`Subscriber::publisher`]). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Publisher {
    hub: Hub,
    id: u64,
}

impl Publisher {
    /// Publishes to every subscriber of `topic` but the one this handle came from, on every node:
    /// see [`Hub::publish`] for what it returns and what an error means.
    pub async fn publish(&self, topic: &Topic, message: Message) -> Result<Option<Position>, Error> {
        self.hub.publish_as(self.id, topic, message).await
    }

    /// Publishes `messages` in order, in one go, as this handle's subscriber: see
    /// [`Hub::publish_many`] for what is checked, what it returns and what an error means.
    pub async fn publish_many(&self, topic: &Topic, messages: Vec<Message>) -> Result<Vec<Position>, Error> {
        self.hub.publish_many_as(self.id, topic, messages).await
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

impl Inner {
    /// Removes subscriber `id` from `topic`, and the node's subscription at the backplane with
    /// the topic's last subscriber (or when the topic has no entry: a subscription cancelled
    /// before it made one may have subscribed at the backplane).
    async fn leave(&self, topic: &Topic, id: u64) -> Result<(), Error> {
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

    /// The topic's newest position at the backplane: a position of an epoch no history has
    /// (the empty one) is answered with [`History::Lost`] and where the topic stands.
    async fn latest_position(&self, topic: &Topic) -> Result<Option<Position>, Error> {
        let nowhere = Position {
            epoch: "".into(),
            offset: u64::MAX,
        };
        Ok(match self.backplane.history(topic, Some(&nowhere), 0).await? {
            History::Lost { latest } => latest,
            History::Complete(_) => None,
        })
    }

    fn latest(&self, topic: &Topic) -> Option<Position> {
        lock(&self.topics).get(topic).and_then(|t| t.last.clone())
    }
}

/// Reads the backplane's events and delivers them; ends when the hub is dropped or the backplane
/// stops.
async fn fan_out(hub: std::sync::Weak<Inner>, mut events: mpsc::Receiver<Event>) {
    while let Some(event) = events.recv().await {
        let Some(inner) = hub.upgrade() else { return };
        match event {
            Event::Publication(p) => inner.deliver_live(p).await,
            Event::Lost { reason } => {
                inner.backplane_lost.store(true, Ordering::Relaxed);
                tracing::warn!(
                    "pub/sub backplane lost: {reason}; publications may be missed until it is back"
                );
            }
            Event::Restored => {
                inner.backplane_lost.store(false, Ordering::Relaxed);
                inner.repair_all().await
            }
        }
    }
    // The backplane ended: wake every subscriber so that it sees the end.
    if let Some(inner) = hub.upgrade() {
        inner.ended.store(true, Ordering::Release);
        for t in lock(&inner.topics).values() {
            for q in t.subscribers.values() {
                q.notify.notify_one();
            }
        }
    }
}

impl Inner {
    /// A live publication: reports a rollback, repairs a jump in contiguous offsets (or a new
    /// epoch) from history first, drops a duplicate, then fans out.
    async fn deliver_live(&self, p: Publication) {
        let (last, jumped) = {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(&p.topic) else { return };
            if let Some(pos) = &p.position {
                // A backplane hands each publication to a node live once, in order: a position
                // at or before one it handed live already, in the same epoch, names another
                // publication. The backplane lost what it gave after `pos - 1` and gives those
                // positions again: report it, and take what follows as new.
                if let Some(live) = &t.live
                    && live.epoch == pos.epoch
                    && pos.offset <= live.offset
                {
                    let before = Position {
                        epoch: pos.epoch.clone(),
                        offset: pos.offset.saturating_sub(1),
                    };
                    tracing::warn!(
                        "pub/sub topic {}: the backplane gave position {pos} again (it had reached {live}): \
                         it lost publications; reported as a gap",
                        p.topic
                    );
                    let gap = Delivery::Gap {
                        topic: p.topic.clone(),
                        resume: Some(before.clone()),
                    };
                    for q in t.subscribers.values() {
                        q.push(&gap);
                    }
                    t.last = Some(before);
                }
                t.live = Some(pos.clone());
            }
            match (&t.last, &p.position) {
                (Some(last), Some(pos)) if last.epoch == pos.epoch => {
                    if pos.offset <= last.offset {
                        return; // already delivered (recovered from history first)
                    }
                    let jumped =
                        pos.offset > last.offset + 1 && self.backplane.capabilities().contiguous_offsets;
                    (Some(last.clone()), jumped)
                }
                // A new epoch without an outage seen (the server's data was flushed, or an idle
                // topic's history expired): the end of the old one may have been missed.
                (Some(last), Some(_)) => (Some(last.clone()), self.backplane.capabilities().history),
                _ => (t.last.clone(), false),
            }
        };
        if jumped {
            self.repair(&p.topic, last).await;
        }
        self.fan(p);
    }

    /// Delivers one publication to every subscriber of its topic on this node.
    fn fan(&self, p: Publication) {
        let mut topics = lock(&self.topics);
        let Some(t) = topics.get_mut(&p.topic) else { return };
        if let (Some(last), Some(pos)) = (&t.last, &p.position)
            && last.epoch == pos.epoch
            && pos.offset <= last.offset
        {
            return;
        }
        if p.position.is_some() {
            t.last.clone_from(&p.position);
        }
        let skip = (p.origin.node == self.node).then_some(p.origin.publisher);
        let Some(d) = to_delivery(p) else { return };
        for (id, q) in &t.subscribers {
            if Some(*id) != skip {
                q.push(&d);
            }
        }
    }

    /// After the backplane came back: every topic with subscribers catches up from history or
    /// reports its gap.
    async fn repair_all(&self) {
        let topics: Vec<(Topic, Option<Position>)> = lock(&self.topics)
            .iter()
            .map(|(k, t)| (k.clone(), t.last.clone()))
            .collect();
        for (topic, last) in topics {
            self.repair(&topic, last).await;
        }
    }

    /// Fetches what `topic` missed after `last` and delivers it; or, when that cannot all be
    /// recovered, delivers a gap, then whatever the history still holds after it.
    async fn repair(&self, topic: &Topic, last: Option<Position>) {
        let max = self.config.max_recovered;
        if !self.backplane.capabilities().history {
            self.gap(topic, None, Vec::new(), false);
            return;
        }
        // `last` `None`: nothing published on the topic when this node started following it,
        // nor delivered since: everything the history holds is new to this node.
        let (resume, after) = match self.backplane.history(topic, last.as_ref(), max).await {
            Ok(History::Complete(ps)) if ps.len() < max => {
                for p in ps {
                    self.fan(p);
                }
                return;
            }
            Ok(History::Lost { latest }) => self.after_gap(topic, last.as_ref(), latest).await,
            // Too much missed to deliver: from where the topic stands now.
            Ok(History::Complete(_)) => match self.latest_position(topic).await {
                Ok(latest) => (latest, Vec::new()),
                Err(_) => {
                    self.gap(topic, None, Vec::new(), false);
                    return;
                }
            },
            // Unknown: the next outage or jump tries again from the same place.
            Err(_) => {
                self.gap(topic, None, Vec::new(), false);
                return;
            }
        };
        self.gap(topic, resume, after, true);
    }

    /// Delivers a gap on `topic` to every subscriber of this node, then `after` (what the history
    /// holds after `resume`); with `moved`, deliveries go on after `resume` (`None`: from the
    /// first publication of the current epoch).
    fn gap(&self, topic: &Topic, resume: Option<Position>, after: Vec<Publication>, moved: bool) {
        tracing::warn!("pub/sub topic {topic}: publications were missed and cannot all be recovered");
        {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(topic) else { return };
            let gap = Delivery::Gap {
                topic: topic.clone(),
                resume: resume.clone(),
            };
            for q in t.subscribers.values() {
                q.push(&gap);
            }
            if moved {
                // A rollback seen in the history: positions up to `resume` may come live again
                // (covered by this gap), not as a second rollback.
                if let (Some(live), Some(r)) = (&t.live, &resume)
                    && live.epoch == r.epoch
                    && live.offset > r.offset
                {
                    t.live = None;
                }
                t.last = resume;
            }
        }
        for p in after {
            self.fan(p);
        }
    }

    /// What follows a gap for a reader at `since` that the history answered
    /// [`History::Lost`] with `latest`: the position to resume from (just before the first
    /// publication returned) and the publications the history still holds after `since` (every
    /// one of the current epoch when `since` is of another; none when the backplane went back
    /// behind `since` in its epoch: a rollback).
    async fn after_gap(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        latest: Option<Position>,
    ) -> (Option<Position>, Vec<Publication>) {
        // Nothing published in the current epoch yet: from its first publication.
        let Some(latest) = latest else {
            return (None, Vec::new());
        };
        if let Some(since) = since
            && since.epoch == latest.epoch
            && since.offset > latest.offset
        {
            // The backplane is behind a position it gave: it lost what followed `latest`, and
            // what it publishes next reuses those positions. From `latest` on.
            tracing::warn!(
                "pub/sub topic {topic}: the backplane went back from {since} to {latest}: it lost publications"
            );
            return (Some(latest), Vec::new());
        }
        let max = self.config.max_recovered;
        match self.backplane.history(topic, None, max).await {
            Ok(History::Complete(ps)) if ps.len() < max => {
                let ps: Vec<Publication> = ps
                    .into_iter()
                    .filter(|p| !since.is_some_and(|s| not_after(p, s)))
                    .collect();
                let resume = match ps.first().and_then(|p| p.position.as_ref()) {
                    Some(first) => Position {
                        epoch: first.epoch.clone(),
                        offset: first.offset.saturating_sub(1),
                    },
                    None => latest,
                };
                (Some(resume), ps)
            }
            _ => (Some(latest), Vec::new()),
        }
    }
}

/// Whether `p` is at or before `seam` in the same epoch.
fn not_after(p: &Publication, seam: &Position) -> bool {
    p.position
        .as_ref()
        .is_some_and(|pos| pos.epoch == seam.epoch && pos.offset <= seam.offset)
}
