//! The hub: a node's topics, its subscribers' queues, and the fan-out from the backplane.
//!
//! A publication is turned into a [`Message`] once (its payload is shared `Bytes`) and pushed into
//! every subscriber's queue under one lock, without an `await` per subscriber: a slow subscriber
//! only ever fills its own queue, whose bound and [`SlowPolicy`](crate::SlowPolicy) decide what
//! happens.
//!
//! # No silent miss
//!
//! A [`Position`] names one publication forever: a backplane that may have lost positions it handed
//! out starts a new epoch (Redis: its server's `run_id` changed; NATS: the stream was recreated, or
//! its single server restarted). On every node, the first sight of the new epoch (or of a
//! reconnection, a jump in contiguous offsets) makes the hub fetch what it missed from history;
//! what cannot be fetched is a [`Delivery::Gap`], followed by whatever the history still holds,
//! then live publications, so that a subscriber that stayed and one that resumes from a position
//! get the same thing.
//!
//! The hub also checks what the backplane says against what it has seen, for a backplane that went
//! back without changing its epoch: a live publication at or before a position already received
//! live in the same epoch (the backplane never hands one twice), or a history that stands behind a
//! position it gave, is a rollback: a gap is reported, and the positions given again are delivered
//! as the new publications they are, not dropped as duplicates.
//!
//! Files: `node` (the [`Hub`] handle: its start over a backplane, counts, history reads;
//! [`Hub::connect`], which knows every backplane, is in `backplane/connect.rs`), `state` (the topics
//! and their subscribers' queues, shared by the rest), `publish` (publishing, [`Publisher`]),
//! `subscribe` ([`Subscriber`]: subscribing, recovery from a position, receiving), `fan_out` (the
//! backplane's events delivered; jumps, rollbacks and outages repaired from history or reported as
//! gaps), `repair` (those repairs, run beside live delivery with a bound on how many at once, and
//! the live publications held behind them, bounded).

mod fan_out;
mod node;
mod publish;
mod repair;
mod state;
mod subscribe;

pub use node::Hub;
pub use publish::Publisher;
pub use subscribe::Subscriber;
