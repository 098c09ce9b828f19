//! Backplanes: what makes N nodes behave as one.
//!
//! A node's [`Hub`](crate::Hub) hands every publication to its backplane and delivers to its own
//! subscribers only what the backplane hands back, with a [`Position`]. So every node sees one
//! order per topic (the backplane's), a node never delivers its own publication twice (it is not
//! delivered on the way out, only on the way back), and each publisher's order is kept (a
//! node's publications to the backplane leave in order, over one connection).
//!
//! ```text
//!  socket ─► Hub::publish ─► Backplane::publish ─► (Redis / NATS / this process)
//!                                                        │ every node subscribed to the topic
//!  socket ◄─ Subscriber queue ◄─ Hub fan-out ◄─ Event::Publication (with its Position)
//! ```
//!
//! Implementations: [`InProcess`] (one node, the default), `redis` and `redis_cluster` (feature
//! `redis`) and `nats` (feature `nats`, module `nats`).

//!
//! Files: `api` (the trait and its events), `position` (positions, origins, publications),
//! `connect` (a backplane by URL), `url` (the servers a URL lists), `forward` (publications
//! from a client that never stops reading to the hub, in bounded memory), `in_process`, `redis`,
//! `redis_cluster`, `nats`.

pub(crate) mod api;
pub(crate) mod connect;
#[cfg(any(feature = "redis", feature = "nats"))]
mod forward;
pub(crate) mod in_process;
#[cfg(feature = "nats")]
pub mod nats;
pub(crate) mod position;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redis_cluster;
#[cfg(any(feature = "redis", feature = "nats"))]
mod url;

pub use api::{Backplane, BoxFuture, Capabilities, EVENT_QUEUE, Event, EventSender, History};
pub use connect::{URL_FORMS, check_url, connect};
pub use in_process::InProcess;
pub use position::{Origin, Position, Publication};
