//! # Topics and fan-out for Sockeye, in one process or across nodes
//!
//! A [`Hub`] per node holds its topics; a [`Subscriber`] per connection receives what is
//! published on the topics it subscribed to; a [`Backplane`](backplane::Backplane) connects the
//! hubs of several nodes: [`InProcess`](backplane::InProcess) (one node, the default), Redis
//! (feature `redis`: pub/sub for live fan-out, Streams for history) or NATS (feature `nats`:
//! subjects, JetStream for history).
//!
//! Every publication gets a [`Position`] in its topic (offset and epoch), which names it forever:
//! a backplane that may have lost positions it handed out (a Redis restarted from older data or
//! failed over to a replica that was behind) starts a new epoch. A subscriber that reconnects
//! resumes from its last position and receives exactly what it missed, then live publications,
//! with no gap and no duplicate at the seam, or learns that recovery is impossible (the epoch
//! changed, or the history no longer reaches back that far) with a [`Delivery::Gap`], followed by
//! whatever the history still holds, then live publications: the same as a subscriber that
//! stayed subscribed receives.
//!
//! A [`Session`] serves one subscribed WebSocket: the client's messages published in batches
//! (retried through a backplane outage, never twice), the deliveries written encoded once with
//! one flush per batch, a client too slow closed with 1008, an unrecoverable gap and a backplane
//! that will not take a publication closed with 1013 (configurable), graceful shutdown 1001. A
//! server is a few lines on top of it (see [`session`]).
//!
//! A publish returns the position it got ([`Hub::publish`], [`Hub::publish_many`]), and its
//! error says what was published: [`Error::PartlyPublished`] when some may have been (sent, the
//! answer lost), any other error when none was. [`PublishRetry`] waits out a backplane outage
//! on that rule, retrying only what was not published. A position prints as `offset@epoch` and
//! parses back (`"42@5f3a".parse::<Position>()`), for a client that keeps it as text.
//!
//! # What a node holds, and its bounds
//!
//! Clients cannot make a node hold an unbounded amount:
//! - a subscriber's queue, with what is held for it while a subscription resumes, is bounded by
//!   [`SubscriberConfig::max_queued_bytes`] (16 MiB), past which its [`SlowPolicy`] applies;
//! - a subscriber follows at most [`SubscriberConfig::max_subscriptions`] topics (100), a node
//!   at most [`HubConfig::max_topics`] (100,000): each is a subscription at the backplane's
//!   server. Past them, [`Error::TooManySubscriptions`] (close the client with 1008, policy
//!   violation: it asked for too much) and [`Error::TooManyTopics`] (1013, try again later: the
//!   node is full, another node or a later try may serve it); [`Error::close_code`] maps every
//!   error to its close code;
//! - the in-process backplane's history is bounded per topic ([`HistoryConfig`]: 1,000
//!   publications, 5 minutes, expired by a timer without waiting for the next publication) and
//!   in all ([`HistoryConfig::max_bytes`], 256 MiB, the oldest first); a resume that needed what
//!   went gets a [`Delivery::Gap`]. Redis and NATS keep history on their servers.
//!
//! [`Subscriber::subscribe`] is cancel-safe: dropped before it completes (a timeout, a
//! `select!`, the connection closing during a slow history read), it leaves nothing behind, and
//! a new try recovers as the first would have.
//!
//! # Features
//!
//! `redis` and `nats` add the backplanes. `deflate`, `tls` and `http2` (on by default) are
//! sockeye's, forwarded: with `default-features = false` no TLS provider is built.
//!
//! Why a crate of its own: the backplanes' clients (redis, async-nats) are large dependencies
//! that a user of plain WebSockets should not compile, and the hub is policy (queues, bounds,
//! recovery) on top of the tokio layer, not part of it.

#![deny(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod access;
pub mod backplane;
mod batch;
mod delivery;
mod error;
mod hub;
pub mod json_protocol;
mod protocol;
mod queue;
mod retry;
pub mod session;
mod topic;
#[cfg(feature = "web")]
pub mod web;

use std::time::Duration;

pub use backplane::{Origin, Position, Publication};
pub use batch::next_batch;
pub use delivery::{Delivery, Published};
pub use error::Error;
pub use hub::{Hub, Publisher, Recovery, Subscriber};
pub use protocol::{Answer, Outgoing, Protocol, Relay, Request};
pub use retry::PublishRetry;
pub use session::{Ended, OnGap, Session, SessionConfig};
pub use topic::Topic;

/// How much history a backplane keeps per topic, for recovery.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryConfig {
    /// Publications kept per topic (0: no history). Default 1,000.
    pub max_len: usize,
    /// How long a publication is kept. Default 5 minutes: long enough to ride out a restart of
    /// a node or of the backplane's server, short enough to bound memory.
    pub max_age: Duration,
    /// The [in-process](backplane::InProcess) backplane's bound on the history of all its
    /// topics together, in bytes (payloads and per-publication overhead): past it, the oldest
    /// publications of any topic go first, and a resume that needed one of them gets a
    /// [`Delivery::Gap`]. Default 256 MiB: without it, `max_len` × `max_payload` per topic
    /// (1,000 × 1 MiB) times the number of topics ever published to is unbounded. Redis and
    /// NATS keep their history on their servers, bounded there (`maxmemory`, the JetStream
    /// stream's limits), and do not use it.
    pub max_bytes: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            max_len: 1000,
            max_age: Duration::from_secs(300),
            max_bytes: 256 << 20,
        }
    }
}

impl HistoryConfig {
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
}

/// What a subscriber's bound does when it is passed: the subscriber stops reading (a slow client)
/// and its queue would grow without bound. It never slows the other subscribers down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SlowPolicy {
    /// Drop the publications that do not fit, for this subscriber only; they are counted
    /// ([`Subscriber::dropped`]) and the next delivery says how many were missed.
    Drop,
    /// Stop the subscriber: its next receive returns [`Error::TooSlow`] (a WebSocket closes with
    /// 1008). The default: nothing is lost silently.
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
    /// [`Error::TooManySubscriptions`]. Default 100: each topic may be a subscription at the
    /// backplane's server (a Redis channel, a NATS subscription or JetStream consumer) and a
    /// history read when it resumes, so a client must not be able to make a node hold an
    /// unbounded number of them; a chat or dashboard client follows a handful.
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
    /// Topics the node follows at once (topics with at least one subscriber on it); a
    /// subscription to one more is refused with [`Error::TooManyTopics`]. Default 100,000: each
    /// is a subscription at the backplane's server (a Redis channel, a NATS subscription or
    /// JetStream consumer) and a few hundred bytes on the node, so that clients cannot make a
    /// node hold an unbounded number of them, while one topic per connected user still fits.
    pub max_topics: usize,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            max_payload: (1 << 20) - 1024,
            max_recovered: 10_000,
            max_topics: 100_000,
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
}
