//! The settings of a hub, its subscribers and a backplane's history: plain values, with the
//! defaults that bound what a node holds (see "What a node holds, and its bounds" in the crate
//! documentation).

use std::time::Duration;

/// How much history a backplane keeps per topic, for recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryConfig {
    /// Publications kept per topic (0: no history). Default 1,000.
    pub max_len: usize,
    /// How long a publication is kept. Default 5 minutes: long enough to ride out a restart of
    /// a node or of the backplane's server, short enough to bound memory.
    pub max_age: Duration,
    /// The [in-process](crate::backplane::InProcess) backplane's bound on the history of all its
    /// topics together, in bytes (payloads and per-publication overhead): past it, the oldest
    /// publications of any topic go first, and a resume that needed one of them gets a
    /// [`Delivery::Gap`](crate::Delivery::Gap). Default 256 MiB: without it, `max_len` ×
    /// `max_payload` per topic (1,000 × 1 MiB) times the number of topics ever published to is
    /// unbounded. Redis and NATS keep their history on their servers, bounded there (`maxmemory`,
    /// the JetStream stream's limits), and do not use it.
    pub max_bytes: usize,
    /// The NATS backplane's (feature `nats`) copies of its JetStream stream (JetStream's
    /// `num_replicas`), 1 to [`MAX_COPIES`](Self::MAX_COPIES): how many servers of a cluster store
    /// every publication (a publication is acknowledged once a majority of them stored it: 3
    /// copies survive the loss of any one server, 5 of any two). Set it with [`copies`](Self::copies).
    ///
    /// `None`, the default: one copy per server the backplane's URL lists, up to 3
    /// (`nats://a,b,c` makes 3, `nats://a` 1). A default only: nodes that list a cluster's
    /// servers differently then ask for different copies, so give every node of a cluster the
    /// same explicit value. The stream is shared by every node and never lowered by one: a node
    /// asking for more copies than the stream has raises it, one asking for fewer keeps it and
    /// warns (see "One stream, many nodes" in the NATS backplane's docs). A value out of range is
    /// refused by the NATS backplane's `connect` with [`Error::InvalidConfig`](crate::Error::InvalidConfig);
    /// more copies than the cluster has JetStream servers is refused by the servers when the
    /// stream is created or raised ([`Error::Backplane`](crate::Error::Backplane)).
    ///
    /// Here rather than in the URL (`nats://a,b,c?copies=3`): the copies are a setting of the
    /// shared history, next to its other limits ([`max_len`](Self::max_len),
    /// [`max_age`](Self::max_age)), while the URL only says which servers this node may connect
    /// to (every backplane URL is hosts and ports alone). The in-process and Redis backplanes
    /// do not use it.
    pub copies: Option<usize>,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_len: 1000,
            max_age: Duration::from_secs(300),
            max_bytes: 256 << 20,
            copies: None,
        }
    }
}

impl HistoryConfig {
    /// The most [`copies`](Self::copies) a JetStream stream may have (NATS's own limit).
    pub const MAX_COPIES: usize = 5;

    /// No history: live fan-out only; a gap cannot be repaired, only reported.
    pub fn none() -> Self {
        HistoryConfig {
            max_len: 0,
            max_age: Duration::ZERO,
            ..HistoryConfig::default()
        }
    }

    /// Keeps `max_len` publications per topic, for at most `max_age` (and at most
    /// [`max_bytes`](Self::max_bytes) in all, in process).
    pub fn new(max_len: usize, max_age: Duration) -> Self {
        HistoryConfig {
            max_len,
            max_age,
            ..HistoryConfig::default()
        }
    }

    /// Sets [`max_bytes`](Self::max_bytes).
    pub fn max_bytes(mut self, bytes: usize) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// Sets [`copies`](Self::copies): the NATS backplane's JetStream stream is stored on
    /// `copies` servers of the cluster, 1 to [`MAX_COPIES`](Self::MAX_COPIES) (checked when the
    /// backplane connects).
    pub fn copies(mut self, copies: usize) -> Self {
        self.copies = Some(copies);
        self
    }
}

/// What a subscriber's bound does when it is passed: the subscriber stops reading (a slow client)
/// and its queue would grow without bound. It never slows the other subscribers down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SlowPolicy {
    /// Drop the publications that do not fit, for this subscriber only; they are counted
    /// ([`Subscriber::dropped`](crate::Subscriber::dropped)) and the next delivery says how many were missed.
    Drop,
    /// Stop the subscriber: its next receive returns [`Error::TooSlow`](crate::Error::TooSlow) (a
    /// WebSocket closes with 1008). The default: nothing is lost silently.
    #[default]
    Close,
}

/// A subscriber's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubscriberConfig {
    /// Payload bytes queued for the subscriber before [`SlowPolicy`] applies. Default 16 MiB (one
    /// publication of any size may always wait, so a large one still goes through).
    pub max_queued_bytes: usize,
    /// What passing the bound does. Default [`SlowPolicy::Close`].
    pub slow: SlowPolicy,
    /// Topics the subscriber may be subscribed to at once; one more is refused with
    /// [`Error::TooManySubscriptions`](crate::Error::TooManySubscriptions). Default 100: each topic
    /// may be a subscription at the backplane's server (a Redis channel, a NATS subscription or
    /// JetStream consumer) and a history read when it resumes, so a client must not be able to make
    /// a node hold an unbounded number of them; a chat or dashboard client follows a handful.
    pub max_subscriptions: usize,
}

impl Default for SubscriberConfig {
    fn default() -> Self {
        SubscriberConfig {
            max_queued_bytes: 16 << 20,
            slow: SlowPolicy::Close,
            max_subscriptions: 100,
        }
    }
}

impl SubscriberConfig {
    /// A bound of `max_queued_bytes` with the policy `slow` (the other settings at their
    /// defaults).
    pub fn new(max_queued_bytes: usize, slow: SlowPolicy) -> Self {
        SubscriberConfig {
            max_queued_bytes,
            slow,
            ..SubscriberConfig::default()
        }
    }

    /// Sets [`max_queued_bytes`](Self::max_queued_bytes).
    pub fn max_queued_bytes(mut self, bytes: usize) -> Self {
        self.max_queued_bytes = bytes;
        self
    }

    /// Sets [`slow`](Self::slow).
    pub fn slow(mut self, policy: SlowPolicy) -> Self {
        self.slow = policy;
        self
    }

    /// Sets [`max_subscriptions`](Self::max_subscriptions).
    pub fn max_subscriptions(mut self, topics: usize) -> Self {
        self.max_subscriptions = topics;
        self
    }
}

/// A hub's settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HubConfig {
    /// The largest payload a publication may carry. Default 1 MiB less 1 KiB: NATS's default
    /// `max_payload` is 1 MiB for the whole message, the backplane's header included.
    pub max_payload: usize,
    /// Publications fetched from history at most when a subscriber resumes or a gap is repaired.
    /// Default 10,000.
    pub max_recovered: usize,
    /// Topics the node follows at once (topics with at least one subscriber on it); a subscription
    /// to one more is refused with [`Error::TooManyTopics`](crate::Error::TooManyTopics). Default
    /// 100,000: each is a subscription at the backplane's server (a Redis channel, a NATS
    /// subscription or JetStream consumer) and a few hundred bytes on the node, so that clients
    /// cannot make a node hold an unbounded number of them, while one topic per connected user
    /// still fits.
    pub max_topics: usize,
    /// Bytes every subscriber's queue on the node may hold together; past it the largest
    /// queues are stopped ([`Error::NodeQueuesFull`](crate::Error::NodeQueuesFull), 1013: the
    /// client resumes from history), largest first, down to nine tenths of it. Default 1 GiB:
    /// each queue's own bound ([`SubscriberConfig::max_queued_bytes`], 16 MiB) would let 64 slow
    /// readers of their own topics reach it, and 1,000 of them hold 16 GiB. Counted in 16 KiB
    /// steps: a queue under one is not counted.
    pub max_queued_bytes_total: usize,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            max_payload: (1 << 20) - 1024,
            max_recovered: 10_000,
            max_topics: 100_000,
            max_queued_bytes_total: 1 << 30,
        }
    }
}

impl HubConfig {
    /// Sets [`max_payload`](Self::max_payload).
    pub fn max_payload(mut self, bytes: usize) -> Self {
        self.max_payload = bytes;
        self
    }

    /// Sets [`max_recovered`](Self::max_recovered).
    pub fn max_recovered(mut self, publications: usize) -> Self {
        self.max_recovered = publications;
        self
    }

    /// Sets [`max_topics`](Self::max_topics).
    pub fn max_topics(mut self, topics: usize) -> Self {
        self.max_topics = topics;
        self
    }

    /// Sets [`max_queued_bytes_total`](Self::max_queued_bytes_total).
    pub fn max_queued_bytes_total(mut self, bytes: usize) -> Self {
        self.max_queued_bytes_total = bytes;
        self
    }
}
