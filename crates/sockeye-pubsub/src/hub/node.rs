//! The [`Hub`]: a node's handle on its topics, over a backplane: how it starts, and what it
//! tells about itself and its backplane. Publishing and subscribing are in `publish` and
//! `subscribe`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use super::fan_out::fan_out;
use super::state::Inner;
use crate::backplane::api::{Backplane, EVENT_QUEUE, Event, EventSender, History};
use crate::backplane::in_process::InProcess;
use crate::backplane::position::Position;
use crate::config::{HistoryConfig, HubConfig};
use crate::error::Error;
use crate::lock::lock;
use crate::queue_budget::QueueBudget;
use crate::task::AbortOnDrop;
use crate::topic::Topic;

/// A node's topics. Cheap to clone (shared); the hub stops when the last clone and the last
/// [`Subscriber`](super::Subscriber) are dropped.
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
    pub(super) inner: Arc<Inner>,
    /// Ends the fan-out task when the last handle goes.
    pub(super) _task: Arc<AbortOnDrop>,
}

impl Hub {
    /// A hub for one process (the [`InProcess`] backplane, default history). Must be called
    /// inside a tokio runtime.
    pub fn in_process() -> Hub {
        Hub::with_backplane(HubConfig::default(), |events| {
            InProcess::new(events, HistoryConfig::default())
        })
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
            queue_budget: QueueBudget::new(config.max_queued_bytes_total),
            config,
            backplane,
            topics: Mutex::default(),
            subscriptions: tokio::sync::Mutex::new(()),
            next_subscriber: AtomicU64::new(1),
            ended: AtomicBool::new(false),
            backplane_lost: AtomicBool::new(false),
            last_publish_nanos: AtomicU64::new(0),
        });
        let task = crate::task::spawn(fan_out(Arc::downgrade(&inner), events));
        Hub {
            inner,
            _task: Arc::new(AbortOnDrop(task.abort_handle())),
        }
    }

    /// What every subscriber's queue on this node holds together, as counted against
    /// [`HubConfig::max_queued_bytes_total`] (in 16 KiB steps: queues under one count nothing).
    pub fn queued_bytes(&self) -> usize {
        self.inner.queue_budget.total()
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
        self.inner.history(topic, since, limit).await
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

    /// This node's id, as it appears in [`Origin::node`](crate::Origin::node).
    pub fn node(&self) -> u64 {
        self.inner.node
    }

    /// The largest payload a publication may carry ([`HubConfig::max_payload`]).
    pub fn max_payload(&self) -> usize {
        self.inner.config.max_payload
    }
}
