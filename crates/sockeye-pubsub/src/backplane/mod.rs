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
//! Implementations: [`InProcess`] (one node, the default), `redis` (feature `redis`) and `nats`
//! (feature `nats`).

mod in_process;
#[cfg(feature = "redis")]
pub mod redis;

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use sockeye::DataKind;
use tokio::sync::mpsc;

use crate::{Error, Topic};

pub use in_process::InProcess;

/// A boxed future, so that [`Backplane`] can be used as a trait object (a server picks its
/// backplane from a URL at run time).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Where a publication stands in its topic's history: an offset that grows with every
/// publication on the topic, and the epoch of that history.
///
/// The epoch changes when the history is lost (the backplane's storage was wiped, the stream was
/// recreated): a subscriber resuming from a position of another epoch learns that recovery is
/// impossible instead of silently missing publications (Centrifugo's stream position).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The history's identity; opaque.
    pub epoch: String,
    /// The publication's offset in the topic. Contiguous (each publication is the previous plus
    /// one) where [`Capabilities::contiguous_offsets`] says so; always increasing.
    pub offset: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.offset, self.epoch)
    }
}

/// Who published: the node and, on that node, the publisher (a connection, say). A hub uses it
/// to leave the publisher out of its own fan-out when asked to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Origin {
    /// The node, random per [`Hub`](crate::Hub).
    pub node: u64,
    /// The publisher on that node (0: none in particular).
    pub publisher: u64,
}

/// A publication as it travels between nodes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Publication {
    /// Its topic.
    pub topic: Topic,
    /// Its place in the topic's history; `None` from a backplane without history.
    pub position: Option<Position>,
    /// Who published it.
    pub origin: Origin,
    /// Text or binary (a text payload is valid UTF-8: the hub checks before publishing).
    pub kind: DataKind,
    /// The payload, shared.
    pub payload: Bytes,
}

/// What a backplane tells its hub, in order, on the channel given to it at start.
#[derive(Debug)]
pub enum Event {
    /// A publication on a subscribed topic (this node's own included).
    Publication(Publication),
    /// The connection to the backplane's server was lost: publications may be missed until
    /// [`Event::Restored`]. The backplane reconnects by itself, with backoff.
    Lost {
        /// Why, for the log.
        reason: String,
    },
    /// Connected again, every subscription restored. Publications made meanwhile were not
    /// received: the hub recovers them from history where there is history, and reports the gap
    /// where there is none.
    Restored,
}

/// What a backplane can do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Publications carry positions and [`Backplane::history`] answers.
    pub history: bool,
    /// Offsets are contiguous per topic, so a missed live publication shows as a jump (and is
    /// fetched from history).
    pub contiguous_offsets: bool,
}

/// What a backplane's history holds after a position.
#[derive(Debug)]
pub enum History {
    /// Every publication after the position, oldest first (possibly none).
    Complete(Vec<Publication>),
    /// The position is of another epoch, or older than what the history keeps: what was
    /// published since cannot all be recovered. `latest` is where the topic stands now, so that
    /// a subscriber can continue from there.
    Lost {
        /// The topic's newest position (`None`: nothing published in this epoch).
        latest: Option<Position>,
    },
}

/// A backplane: connects hubs on several nodes (or one).
///
/// A backplane is started with the channel its [`Event`]s go to. It must:
/// - deliver every publication on a subscribed topic to that channel once per node, in the
///   topic's order, its own node's publications included;
/// - keep each node's publications in the order `publish` was called;
/// - reconnect by itself after losing its server, restore every subscription, and say so with
///   [`Event::Lost`] and [`Event::Restored`];
/// - wait (not drop) when the event channel is full: the hub is then behind, and the backplane's
///   server buffers or drops what it sends (a gap, which history repairs).
pub trait Backplane: Send + Sync + 'static {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Publishes. Returns once the backplane's server has it (or, for a backplane without
    /// acknowledgements, once it is written).
    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<(), Error>>;

    /// Starts delivering the topic's publications as [`Event`]s. Subscribing twice is the same
    /// as once.
    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>>;

    /// Stops delivering the topic's publications.
    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>>;

    /// The publications on `topic` after `since` (all of the current epoch's history when `None`),
    /// oldest first, at most `limit` of them. The cost is the number returned, not the history's
    /// length.
    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>>;
}

/// The channel a backplane's events go to.
pub type EventSender = mpsc::Sender<Event>;

/// Events queued from a backplane to its hub before the backplane waits.
pub const EVENT_QUEUE: usize = 4096;
