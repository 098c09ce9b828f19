//! The Redis backplane: pub/sub for live fan-out, a Stream per topic for history.
//!
//! # What it guarantees
//!
//! - **Live delivery is at-most-once**, over Redis pub/sub: a node that is disconnected (or whose
//!   connection drops) misses what is published meanwhile. Nothing is delivered twice.
//! - **Every miss is repaired or reported.** Each publication gets a contiguous offset in its
//!   topic and is kept in the topic's Stream (the newest [`HistoryConfig::max_len`], the whole
//!   Stream expiring [`HistoryConfig::max_age`] after the topic's last publication). The hub
//!   fetches what a jump in offsets or a reconnection skipped from there; what the history no
//!   longer holds (trimmed, expired, or lost by Redis: a new epoch) is reported as a gap, never
//!   missed silently. A history read is complete only if it holds every offset from the
//!   position up to the newest, with no hole (`history::history_from`); the hub's repair
//!   after an outage reads it the same way.
//! - **A topic's history is the topic's, not the publisher's.** A node with history records
//!   its [`HistoryConfig::max_len`] and `max_age` in the topic's meta hash when it subscribes
//!   to the topic and whenever it publishes on it; a node without history
//!   ([`HistoryConfig::none`], a publish-only backend) then writes the Stream with them, so that
//!   its publications are recovered like any other (nodes configured differently take turns,
//!   the Stream trimmed to the last one's). Before any node with history has subscribed to or
//!   published on a topic (or after Redis lost the setting with its data, until one does
//!   again), a node without history leaves holes: a resume across one is a gap.
//! - **A position names one publication forever.** The epoch is tied to the life of the Redis
//!   server that gives the offsets: the meta hash records its `run_id`, and the first
//!   publication on a topic through a server with another `run_id` (Redis restarted, from
//!   whatever persistence; a replica promoted) starts a new epoch from offset 1 (the old
//!   Stream is dropped). Every way Redis loses acknowledged writes (an RDB snapshot older than
//!   the last writes, AOF `appendfsync everysec` or `no` and a crash, a replica promoted before
//!   it had every write) comes with a new process or another server, hence a new `run_id`: an
//!   offset lost is never given again under its epoch. The cost: every restart or failover is a
//!   gap for every topic, even one that lost nothing (AOF `always`): the node cannot tell from
//!   the server. Until the first publication of the new epoch, [`Backplane::history`] answers
//!   as for a topic with nothing published (no position of the old epoch is recovered).
//!
//!   The `run_id` is read by the node on each command connection (`INFO server`) before it
//!   publishes over it, which assumes that a connection ends at one Redis process (directly, or
//!   through a TCP proxy or virtual address; not a Redis-protocol proxy that spreads one
//!   connection over several servers). Not covered: the same process demoted to a replica,
//!   fully resynced from an older primary through which no node published, then promoted again,
//!   while a node's connection to it stays open; and an operator going back behind Redis's
//!   back (`DEBUG RELOAD NOSAVE`, `RESTORE` of an old meta hash). Without `INFO` (renamed away)
//!   nothing is checked here; the hub's own rollback checks remain (see [`crate::Hub`]).
//! - **Order**: one order per topic (the offsets, given atomically by Redis); a node's
//!   publications leave in call order over one multiplexed connection.
//! - **Recovery by itself**: when the pub/sub connection drops, the backplane says
//!   [`Event::Lost`], reconnects with backoff (sockeye's `Backoff`: 100 ms doubling to 3 s,
//!   equal jitter), subscribes again to every topic and says [`Event::Restored`]. Publishing
//!   while Redis is down fails at once with [`Error::Backplane`] (nothing is queued); the next
//!   publish reconnects.
//! - **Batches** ([`Backplane::publish_many`]) go in one pipeline, one round trip: the publish
//!   script once per publication, each atomic and in order. A batch that fails part-way says how
//!   far it got ([`Error::PartlyPublished`]). A server
//!   that hangs without closing its connections is noticed too: commands time out after
//!   [`RESPONSE_TIMEOUT`], and the pub/sub connection is checked with a PING every 5 s.
//! - **A primary with replicas**: point the nodes at an address that follows the primary (a
//!   virtual IP or DNS name that the failover moves, a TCP proxy that forwards to whichever
//!   server says `role:master`), not at one server. When the primary dies and a replica is
//!   promoted (`REPLICAOF NO ONE`, by an operator or Sentinel), every node's connections drop,
//!   reconnect to the same address, now the promoted replica, and read its `run_id`: each
//!   topic starts a new epoch at its first publication there, so what the replica had not
//!   received (replication is asynchronous) is reported as a gap, never delivered under a reused
//!   position (tests/distributed.rs: primary killed during traffic from three nodes).
//! - **Backpressure**: none reaches Redis: the Redis client reads the connection whatever the
//!   hub does, into a channel without bound. So the reader never waits on the hub: what the
//!   event queue ([`EVENT_QUEUE`](crate::backplane::EVENT_QUEUE)) cannot take is dropped, and its
//!   topics are reported with [`Event::Missed`](crate::backplane::Event::Missed) once there is
//!   room, for the hub to recover from history or report as a gap.
//!
//! # Keys
//!
//! A topic is hex-encoded ([`Topic::to_hex`]) so that any name makes a valid key; the hex sits in
//! a hash tag so that a topic's keys share a cluster slot:
//!
//! - `sockeye:{<hex>}:meta`: a hash, `e` the epoch (random, set when the hash is created or the
//!   server's life changes), `o` the last offset given and `r` the `run_id` of the server that
//!   gave it; `l` and `a`, the topic's history setting (Stream `MAXLEN` and TTL in ms, from
//!   the last node with history that published); in a cluster, `n` and `i`, the cluster node
//!   id and replication id of the server that gave the offsets (see
//!   [`RedisCluster`](super::redis_cluster::RedisCluster): a slot migration). It outlives the Stream (at least [`META_TTL_MIN`]), so that offsets keep counting
//!   when a topic is quiet for longer than `max_age`;
//! - `sockeye:{<hex>}:stream`: the history, entry id `<offset>-0`, one field `b`: the body below;
//! - `sockeye:{<hex>}`: the pub/sub channel.
//!
//! # Wire format (version 1)
//!
//! A pub/sub message is:
//!
//! ```text
//! 0x01                      the version: a reader skips (and logs) any other
//! <offset>  '\n'            the offset, ASCII decimal
//! <epoch>   '\n'            the epoch, ASCII
//! body:
//!   node       8 bytes      big-endian u64 (Origin::node)
//!   publisher  8 bytes      big-endian u64 (Origin::publisher)
//!   kind       1 byte       0 text, 1 binary
//!   payload    the rest
//! ```
//!
//! The Stream keeps only the body (the offset is the entry id, the epoch the meta hash's).
//! The header is written by the publish script (it alone knows offset and epoch) and the body by
//! the publishing node.
//!
//! [`Event::Lost`]: crate::backplane::Event::Lost
//! [`Event::Restored`]: crate::backplane::Event::Restored
//!
//! Files: `wire` (keys, the publish script, the formats, replies parsed), `connection` (the state
//! and the two connections), `publish`, `history`, `subscriber` (the pub/sub connection and its
//! reader).

pub(super) mod connection;
pub(super) mod history;
mod publish;
mod subscriber;
pub(super) mod wire;

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use redis::{Client, Script};
use tokio::sync::Mutex;

pub use connection::{CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use connection::{Shared, Subs};
use subscriber::read;
pub use wire::META_TTL_MIN;
use wire::PUBLISH_SCRIPT;

use crate::backplane::api::{Backplane, BoxFuture, Capabilities, EventSender, History};
use crate::backplane::position::{Position, Publication};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::task::AbortOnDrop;
use crate::topic::Topic;

/// The Redis backplane (feature `redis`): see the [module documentation](self) for what it
/// guarantees, its keys and its wire format.
///
/// ```no_run
/// use sockeye_pubsub::backplane::{EVENT_QUEUE, redis::Redis};
/// use sockeye_pubsub::{HistoryConfig, Hub, HubConfig};
/// # async fn run() -> Result<(), sockeye_pubsub::Error> {
/// let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
/// let redis = Redis::connect("redis://127.0.0.1:6379/0", HistoryConfig::default(), tx).await?;
/// let hub = Hub::start(HubConfig::default(), Box::new(redis), rx);
/// # Ok(())
/// # }
/// ```
pub struct Redis {
    shared: Arc<Shared>,
    _reader: AbortOnDrop,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("addr", &self.shared.addr)
            .field("history", &self.shared.history)
            .finish_non_exhaustive()
    }
}

impl Redis {
    /// Connects to the Redis server at `url`, `redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]` (port
    /// 6379 and database 0 by default), keeping `history` per topic; events go to `events`.
    ///
    /// Fails with [`Error::InvalidUrl`] for another URL, and with [`Error::Backplane`] if the
    /// server does not answer within [`CONNECT_TIMEOUT`] (later losses are recovered from by
    /// themselves).
    pub async fn connect(url: &str, history: HistoryConfig, events: EventSender) -> Result<Redis, Error> {
        let addr = parse_url(url)?;
        let client = Client::open(url).map_err(|e| Error::InvalidUrl(format!("{url:?}: {e}; {ACCEPTED}")))?;
        let shared = Arc::new(Shared {
            client,
            addr,
            history,
            events,
            commands: Mutex::new(None),
            subs: Mutex::new(Subs {
                sink: None,
                topics: HashSet::new(),
            }),
            publish: Script::new(PUBLISH_SCRIPT),
        });
        // Both connections now, so that a wrong address fails here, not at the first publish.
        let conn = shared.connect_commands(CONNECT_TIMEOUT).await?;
        *shared.commands.lock().await = Some(conn);
        let stream = {
            let mut subs = shared.subs.lock().await;
            let (sink, stream) = shared.connect_pubsub(CONNECT_TIMEOUT, &[]).await?;
            subs.sink = Some(sink);
            stream
        };
        let reader = AbortOnDrop(crate::task::spawn(read(Arc::clone(&shared), stream)).abort_handle());
        Ok(Redis {
            shared,
            _reader: reader,
        })
    }
}

const ACCEPTED: &str = "accepted: redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]";

/// Checks `url` and returns its `host:port`.
pub(crate) fn parse_url(url: &str) -> Result<String, Error> {
    let bad = |why: &str| Error::InvalidUrl(format!("{url:?}: {why}; {ACCEPTED}"));
    let rest = match url.split_once("://") {
        Some(("redis", rest)) => rest,
        Some(("rediss", _)) => return Err(bad("TLS (rediss://) is not supported by this build")),
        Some((scheme, _)) => return Err(bad(&format!("the scheme is {scheme:?}, not \"redis\""))),
        None => return Err(bad("no scheme")),
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let addr = crate::backplane::url::host_port(host_port, 6379).map_err(|why| bad(&why))?;
    let path = path.split(['?', '#']).next().unwrap_or("");
    if !path.is_empty() && path.parse::<u32>().is_err() {
        return Err(bad(&format!("the database {path:?} is not a number")));
    }
    Ok(addr)
}

impl Backplane for Redis {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: self.shared.has_history(),
            contiguous_offsets: true,
        }
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(self.shared.publish(publication))
    }

    /// One pipeline for the batch, one round trip: `SCRIPT LOAD`, then the publish script once
    /// per publication, each atomic, in order. Failing before anything was sent (no connection)
    /// is the plain [`Error::Backplane`]; a pipeline sent but unanswered (connection dropped,
    /// [`RESPONSE_TIMEOUT`] for the whole batch) is [`Error::PartlyPublished`] with nothing known
    /// (`published` 0, `sent` the whole batch); a script that failed on the server is reported
    /// with exactly how many before it were published.
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(self.shared.publish_many(publications))
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.shared.subscribe(topic.clone()))
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(self.shared.unsubscribe(topic.clone()))
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        Box::pin(self.shared.history(topic.clone(), since.cloned(), limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("redis://127.0.0.1:6380").ok(),
            Some("127.0.0.1:6380".into())
        );
        assert_eq!(parse_url("redis://h/3").ok(), Some("h:6379".into()));
        assert_eq!(parse_url("redis://:pw@h:1/0").ok(), Some("h:1".into()));
        assert_eq!(parse_url("redis://[::1]").ok(), Some("[::1]:6379".into()));
        assert_eq!(parse_url("redis://[::1]:7000").ok(), Some("[::1]:7000".into()));
        for bad in [
            "",
            "127.0.0.1:6379",
            "http://h",
            "redis://",
            "redis://h:x",
            "redis://h:99999",
            "redis://h/x",
            "rediss://h",
        ] {
            match parse_url(bad) {
                Err(Error::InvalidUrl(m)) => assert!(m.contains("redis://"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
