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
//! - between the backplane and the hub: the event queue
//!   ([`EVENT_QUEUE`](backplane::EVENT_QUEUE), 4,096 events); a Redis reader never waits on it
//!   (its client would buffer without bound) but drops what does not fit and reports the topics
//!   ([`Event::Missed`](backplane::Event::Missed)), which the hub repairs from history or reports
//!   as a gap. Repairs from history run 16 at once beside live delivery, with at most 64 MiB of a
//!   repaired topic's live publications held behind them (past it: dropped, then repaired).
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
mod config;
mod delivery;
mod error;
mod hub;
pub mod json_protocol;
mod lock;
mod protocol;
mod queue;
mod queue_budget;
mod retry;
pub mod session;
mod task;
mod topic;
#[cfg(feature = "web")]
pub mod web;

pub use backplane::position::{Origin, Position, Publication, Recovery};
pub use batch::next_batch;
pub use config::{HistoryConfig, HubConfig, SlowPolicy, SubscriberConfig};
pub use delivery::{Delivery, Published};
pub use error::Error;
pub use hub::{Hub, Publisher, Subscriber};
pub use protocol::{Answer, Outgoing, Protocol, Relay, Request, gap_close};
pub use retry::PublishRetry;
pub use session::{Ended, OnGap, Session, SessionConfig};
pub use topic::Topic;
