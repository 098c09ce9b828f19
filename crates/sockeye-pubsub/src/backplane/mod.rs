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

mod in_process;
#[cfg(feature = "nats")]
pub mod nats;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub mod redis_cluster;

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
/// A position names one publication forever. The epoch changes whenever the backplane may have
/// lost positions it handed out (its storage was wiped, the stream was recreated, the Redis
/// server or a single NATS JetStream server restarted, Redis failed over): a subscriber resuming from a position of another epoch
/// learns that recovery is impossible (a [`Delivery::Gap`](crate::Delivery::Gap), then what the
/// new epoch holds) instead of silently missing publications, and an offset is never reused
/// for another publication under the same epoch (Centrifugo's stream position, made safe
/// against rollbacks).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Position {
    /// The history's identity; opaque, never empty (the hub asks for a topic's newest position
    /// with the empty epoch, which every history answers with [`History::Lost`]).
    pub epoch: std::sync::Arc<str>,
    /// The publication's offset in the topic. Contiguous (each publication is the previous plus
    /// one) where [`Capabilities::contiguous_offsets`] says so; always increasing.
    pub offset: u64,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.offset, self.epoch)
    }
}

/// Reads a position as it prints, `offset@epoch` (a client keeps it as text, in a URL's
/// `?since=` say): the offset in decimal digits, the epoch anything but empty (it is opaque; it
/// may contain `@`: the first one ends the offset). Anything else is
/// [`Error::InvalidPosition`], saying what is wrong.
///
/// ```
/// use sockeye_pubsub::Position;
/// let p: Position = "42@5f3a9c".parse()?;
/// assert_eq!((p.offset, &*p.epoch), (42, "5f3a9c"));
/// assert_eq!(p.to_string(), "42@5f3a9c");
/// assert!("42".parse::<Position>().is_err());
/// # Ok::<(), sockeye_pubsub::Error>(())
/// ```
impl std::str::FromStr for Position {
    type Err = Error;

    fn from_str(s: &str) -> Result<Position, Error> {
        let bad = |why: &str| {
            let shown: String = s.chars().take(64).collect();
            Error::InvalidPosition(format!(
                "{shown:?}: {why}; expected OFFSET@EPOCH, as a position prints"
            ))
        };
        let Some((offset, epoch)) = s.split_once('@') else {
            return Err(bad("no @"));
        };
        if offset.is_empty() || !offset.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the offset is not a number"));
        }
        let offset = offset
            .parse::<u64>()
            .map_err(|_| bad("the offset is over 18446744073709551615"))?;
        if epoch.is_empty() {
            return Err(bad("the epoch is empty"));
        }
        Ok(Position {
            epoch: epoch.into(),
            offset,
        })
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

/// What [`connect`] accepts, for error messages.
pub const URL_FORMS: &str = "redis://HOST:PORT, redis+cluster://HOST:PORT,HOST:PORT,… (feature `redis`), \
                             nats://HOST:PORT[,HOST:PORT…] (feature `nats`) or memory:";

/// Checks a backplane URL without connecting (a command line can refuse a typo at once):
/// [`Error::InvalidUrl`] says what is wrong and what is accepted.
pub fn check_url(url: &str) -> Result<(), Error> {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).to_ascii_lowercase();
    match scheme.as_str() {
        "memory" => Ok(()),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => redis::parse_url(url).map(drop),
        #[cfg(feature = "redis")]
        "redis+cluster" => redis_cluster::parse_url(url).map(drop),
        #[cfg(feature = "nats")]
        "nats" => nats::parse_url(url).map(drop),
        _ => Err(unsupported(url, &scheme)),
    }
}

/// The error for a scheme that is unknown or whose feature is off.
fn unsupported(url: &str, scheme: &str) -> Error {
    match scheme {
        "redis" | "rediss" | "redis+cluster" | "nats" => Error::InvalidUrl(format!(
            "{url}: this build has no {scheme} support (Cargo feature `{}` of sockeye-pubsub)",
            if scheme == "nats" { "nats" } else { "redis" }
        )),
        _ => Error::InvalidUrl(format!("{url:?}: expected {URL_FORMS}")),
    }
}

/// `HOST[:PORT]` (an IPv6 host in brackets) as `host:port`, with `default_port` when there is
/// none; the reason when it is not one.
#[cfg(any(feature = "redis", feature = "nats"))]
pub(crate) fn host_port(authority: &str, default_port: u16) -> Result<String, String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let Some((host, after)) = v6.split_once(']') else {
            return Err("unclosed [ in an IPv6 address".into());
        };
        if !after.is_empty() && !after.starts_with(':') {
            return Err(format!("{after:?} after an IPv6 address"));
        }
        (format!("[{host}]"), after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((host, port)) => (host.to_owned(), Some(port)),
            None => (authority.to_owned(), None),
        }
    };
    if host.is_empty() || host == "[]" || (host.contains(':') && !host.starts_with('[')) {
        return Err("no host".into());
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("the port {p:?} is not a number from 1 to 65535")),
        },
    };
    Ok(format!("{host}:{port}"))
}

/// `SCHEME://HOST[:PORT][,HOST[:PORT]…][/]` (the servers of one cluster) → each `host:port`,
/// `default_port` where none is given; [`Error::InvalidUrl`] saying why and what is `accepted`.
#[cfg(any(feature = "redis", feature = "nats"))]
pub(crate) fn host_list(
    url: &str,
    scheme: &str,
    default_port: u16,
    accepted: &str,
) -> Result<Vec<String>, Error> {
    let bad = |why: &str| Error::InvalidUrl(format!("{url:?}: {why}; {accepted}"));
    let Some(rest) = url.strip_prefix(scheme).and_then(|r| r.strip_prefix("://")) else {
        return Err(bad(&format!("the scheme must be {scheme}://")));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err(bad("no host"));
    }
    if rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(bad(
            "only hosts and ports are accepted (no path, database, query or credentials)",
        ));
    }
    rest.split(',')
        .map(|server| host_port(server, default_port).map_err(|why| bad(&why)))
        .collect()
}

/// Connects to the backplane a URL names: `redis://HOST:PORT[/DB]`,
/// `redis+cluster://HOST:PORT,HOST:PORT,…` (a Redis Cluster, sharded pub/sub),
/// `nats://HOST:PORT[,HOST:PORT…]` (one NATS server or a cluster's), or
/// `memory:` (this process only). An unknown scheme, or one whose feature is not compiled in, is
/// [`Error::InvalidUrl`]; an unreachable server is [`Error::Backplane`] (retry: the server may
/// not be up yet).
pub async fn connect(
    url: &str,
    history: crate::HistoryConfig,
    events: EventSender,
) -> Result<Box<dyn Backplane>, Error> {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).to_ascii_lowercase();
    match scheme.as_str() {
        "memory" => Ok(Box::new(InProcess::new(events, history))),
        #[cfg(feature = "redis")]
        "redis" | "rediss" => Ok(Box::new(redis::Redis::connect(url, history, events).await?)),
        #[cfg(feature = "redis")]
        "redis+cluster" => Ok(Box::new(
            redis_cluster::RedisCluster::connect(url, history, events).await?,
        )),
        #[cfg(feature = "nats")]
        "nats" => Ok(Box::new(nats::connect(url, history, events).await?)),
        _ => Err(unsupported(url, &scheme)),
    }
}

/// Events queued from a backplane to its hub before the backplane waits.
pub const EVENT_QUEUE: usize = 4096;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn a_position_reads_back_as_it_prints(offset in any::<u64>(), epoch in ".+") {
            let p = Position { epoch: epoch.into(), offset };
            prop_assert_eq!(p.to_string().parse::<Position>().unwrap(), p);
        }

        #[test]
        fn any_text_is_a_position_or_a_clear_error(text in ".*") {
            match text.parse::<Position>() {
                // Leading zeros are read, not printed: what it reads prints canonically.
                Ok(p) => prop_assert_eq!(p.to_string().parse::<Position>().unwrap(), p),
                Err(e) => {
                    prop_assert!(matches!(e, Error::InvalidPosition(_)));
                    prop_assert!(e.is_caller_fault());
                }
            }
        }
    }

    #[test]
    fn garbage_is_refused_saying_why() {
        for (text, why) in [
            ("", "no @"),
            ("12", "no @"),
            ("@e", "not a number"),
            ("+1@e", "not a number"),
            ("-1@e", "not a number"),
            ("1.5@e", "not a number"),
            ("18446744073709551616@e", "over"),
            ("7@", "epoch is empty"),
        ] {
            let e = text.parse::<Position>().unwrap_err();
            assert!(e.to_string().contains(why), "{text:?}: {e}");
        }
        assert_eq!("0@a@b".parse::<Position>().unwrap().epoch.as_ref(), "a@b");
    }
}
