//! What a backplane is: the [`Backplane`] trait, the [`Event`]s it sends its hub, what it can do
//! ([`Capabilities`]) and what its history answers ([`History`]).

use std::future::Future;
use std::pin::Pin;

use tokio::sync::mpsc;

use super::position::{Position, Publication};
use crate::error::Error;
use crate::topic::Topic;

/// A boxed future, so that [`Backplane`] can be used as a trait object (a server picks its
/// backplane from a URL at run time).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

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
    /// Publications on these topics were dropped on their way to the hub: the hub did not take
    /// them as fast as the backplane's client received them, and the client could not be made to
    /// wait without buffering them in memory without bound (the Redis client reads its connection
    /// whatever happens). Sent once the event queue has room again, before anything more of
    /// those topics; the hub repairs each from history, or reports the gap. Each topic is named
    /// once per report (the report is bounded by the topics subscribed).
    Missed {
        /// The topics whose publications were dropped.
        topics: Vec<Topic>,
    },
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
    /// Every publication after the position, oldest first (possibly none), with none missing
    /// up to the topic's newest (or up to the read's `limit`): with contiguous offsets, exactly
    /// `since + 1`, `since + 2`, …. A history with a hole there (an offset given but not kept)
    /// is [`History::Lost`], never `Complete` without the publication. Read from the start (no
    /// position): the publications after the history's last hole, if they reach the newest
    /// (none otherwise), so that what is returned follows on from the position before its first.
    Complete(Vec<Publication>),
    /// The position is of another epoch, older than what the history keeps, or followed by a
    /// hole in it: what was published since cannot all be recovered. `latest` is where the
    /// topic stands now, so that a subscriber can continue from there.
    Lost {
        /// The topic's newest position; `None`: nothing known of the current epoch. On Redis
        /// that is an epoch with no publication yet (a replica just promoted). On NATS it is also
        /// a topic whose newest publication names another server life than the one the stream
        /// goes on in (a straggler sent across a restart): the epoch is not over then, and its
        /// next publication comes as usual. Where the position asked about is of the current
        /// epoch and still kept, it is at least that position (the reader stays in its epoch:
        /// the straggler is what the gap covers).
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
/// - hold nothing without bound in this process when the event channel is full (the hub is then
///   behind): either wait, when its client then stops reading (the server buffers or drops what
///   it sends, and says so: a gap, which history repairs), or drop what does not fit and report
///   its topics with [`Event::Missed`] (`backplane/forward.rs`, for a client that keeps reading,
///   as the Redis client does).
pub trait Backplane: Send + Sync + 'static {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Publishes. Returns once the backplane's server has it (or, for a backplane without
    /// acknowledgements, once it is written), with the position it got (`None` from a backplane
    /// that gives none).
    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>>;

    /// Publishes several publications, in order, as if by `publish` one after the other
    /// (each publisher's order is kept), but without waiting for each before sending the next:
    /// a backplane over the network sends the whole batch in one round trip where it can.
    ///
    /// Returns once the server has them all, with the positions they got, in order (empty from a
    /// backplane that gives none). Not all-or-nothing: like a failed `publish`, whose
    /// publication may have been published, a failed batch may be partly published, and the
    /// error says how far it got:
    /// - an error other than [`Error::PartlyPublished`] (and [`Error::Closed`], after which
    ///   nothing is delivered anyway): nothing of the batch was published (it failed before
    ///   sending anything: not connected, say); it may be retried whole;
    /// - [`Error::PartlyPublished`] `{ published, sent, .. }`: the first `published` were
    ///   published, the next ones up to `sent` may or may not have been (sent, not answered),
    ///   the rest were not.
    ///
    /// The default publishes one by one with `publish`, in order, stopping at the first
    /// failure.
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(async move {
            let mut positions = Vec::with_capacity(publications.len());
            for (i, p) in publications.into_iter().enumerate() {
                match self.publish(p).await {
                    Ok(position) => positions.extend(position),
                    Err(e) => return Err(partly_published(i, i + 1, e)),
                }
            }
            Ok(positions)
        })
    }

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

/// The error of a batch that failed after its first `sent` publications were handed to the
/// server, of which the first `published` are known to be published: the plain error when
/// nothing was sent, [`Error::PartlyPublished`] otherwise.
pub(crate) fn partly_published(published: usize, sent: usize, error: Error) -> Error {
    if sent == 0 {
        return error;
    }
    Error::PartlyPublished {
        published,
        sent: sent.max(published),
        source: Box::new(error),
    }
}

/// The channel a backplane's events go to.
pub type EventSender = mpsc::Sender<Event>;

/// Events queued from a backplane to its hub before the backplane waits.
pub const EVENT_QUEUE: usize = 4096;
