//! The Redis Cluster backplane (feature `redis`): sharded pub/sub (`SSUBSCRIBE`/`SPUBLISH`,
//! Redis 7) for live fan-out, a Stream per topic for history, over the `redis` crate's cluster
//! client (RESP3, its push channel).
//!
//! Connect to `redis+cluster://HOST:PORT,HOST:PORT,…` (some or all of the cluster's nodes:
//! the others are found from them). Everything of the [Redis backplane](super::redis) holds
//! (keys, wire format, epochs, history), per topic, on the shard that serves the topic's slot:
//! a topic's meta hash, Stream and channel share one hash tag (`{<hex>}`), hence one slot, and a
//! publication is sent only to that shard's nodes (sharded pub/sub), not to every node of the
//! cluster.
//!
//! # Failover
//!
//! A primary that dies is replaced by its replica (after `cluster-node-timeout`). The epoch is
//! tied to the server that gives a topic's offsets, as on one server, but the node does not
//! know which server a command reaches: the publish script reads the `run_id` itself (`INFO
//! server`, about 6 µs more per publication on Redis 7.0). So a topic whose shard failed over
//! starts a new epoch at its first publication on the promoted replica: what the replica had
//! not received is reported as a gap, never delivered under a reused position. Topics of other
//! shards lose nothing.
//!
//! # A slot migration
//!
//! A resharding moves a slot's keys whole (`MIGRATE`), a topic's meta hash and Stream with
//! them: nothing is lost, and it must not look like a loss. But the meta hash names the old
//! owner's `run_id`, as after a failover. So the publish script also records the cluster node
//! id (`CLUSTER MYID`) and replication id of the server that gives the offsets, and a server
//! that finds another's `run_id` keeps the epoch (and adopts the topic) only when the keys can
//! only have come by migration: the giver is another node, this server never replicated from
//! it (neither its replication id nor the previous one is the giver's), and this server sees it
//! as a primary in good standing (not failed, not a replica since). A failover (the giver
//! failed or demoted; the promoted replica's previous replication id is the giver's) and a
//! restart (the giver is this node, another `run_id`) still start a new epoch. The history
//! script answers by the same rule, so a client resuming from before the migration recovers
//! from the moved Stream (tests/distributed.rs:
//! `a_redis_cluster_slot_migrated_with_its_history_keeps_it`). Not told apart, as a migration:
//! an operator copying an older meta hash and Stream onto a primary with `RESTORE` (as on one
//! server), and a primary that restarted from an older snapshot (losing its tail) whose slot is
//! then migrated away before any publication on the topic there noticed the restart (the new
//! owner cannot read the giver's current `run_id`). A meta hash written by an older version (no
//! `n`) starts a new epoch when it moves.
//!
//! When the client reports a lost connection to any node, the backplane says [`Event::Lost`],
//! subscribes again to every topic's channel, one channel at a time (each routed to the
//! primary of its slot as the client knows it, refreshed after a redirection or a failed node;
//! never several channels of different slots in one command, which Redis refuses with
//! CROSSSLOT), retrying with backoff (100 ms doubling to 3 s, jittered) until all are
//! subscribed, then says [`Event::Restored`] (the hub repairs from history). The same when a
//! server ends a subscription by itself because the channel's slot moved to another primary (a
//! resharding: Redis 7 sends `sunsubscribe`): without it, the topic would go silent. The client's own resubscription
//! after a topology change may subscribe a channel on a node a second time; subscribing is
//! idempotent per connection, and the hub drops a position it delivered already.
//!
//! # Differences from one server
//!
//! - Publishing is not retried by the client (`retries(0)`): a publication whose connection
//!   dropped may have run, and retrying could publish it twice. It fails with
//!   [`Error::Backplane`]; the client then refreshes its view of the cluster, and the next
//!   publication goes to the new primary.
//! - A batch ([`Backplane::publish_many`]) of one topic, as a hub's is, is one publish script
//!   carrying every publication (one slot, one round trip, atomic on its shard, the `run_id`
//!   read once); a batch of several topics is one such script per run of consecutive
//!   publications of a topic, each awaited before the next. A batch refused before it ran
//!   (MOVED or ASK while a slot changes owner, CLUSTERDOWN during a failover) fails with the
//!   plain [`Error::Backplane`]: none of it was published, it may be sent again whole (the
//!   client has refreshed its slot map by then). A batch whose reply is lost may have been
//!   published: [`Error::PartlyPublished`].
//! - History is read by a script (the meta hash, the Stream and the server's `run_id` at once).
//! - The subscriptions are checked every 5 s, with a PING to every primary the client knows
//!   (the connections its shard channels are subscribed on). A primary that does not answer
//!   within [`RESPONSE_TIMEOUT`] (its host died without closing its connections, or it hangs)
//!   is [`Event::Lost`]; the node then makes the client read the slots again (a read of a
//!   topic's key sent to each listed node: one that no longer serves the slot answers MOVED,
//!   and the client rebuilds its slot map and moves its subscriptions), subscribes again to
//!   every topic, retrying both with backoff until all are subscribed (after the cluster's
//!   failover, or the primary's return), and says [`Event::Restored`]. Without it a node that
//!   only subscribes (it sends no command that could time out) stayed deaf on that shard for
//!   good, with no event and no gap. A primary that hangs for good before its replica takes
//!   over (`cluster-node-timeout`) keeps the node in `Lost` meanwhile; the hub repairs from
//!   history once it is restored.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo, SingleNodeRoutingInfo};
use redis::{PushInfo, PushKind, RedisError, Script, Value};
use tokio::sync::{Mutex, mpsc};

use super::api::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, partly_published};
use super::forward::Forwarder;
use super::position::{Position, Publication};
use super::redis::connection::{
    BACKOFF, CONNECT_TIMEOUT, HEALTH_INTERVAL, RESPONSE_TIMEOUT, answers, unsubscribe_within,
};
use super::redis::history::history_from;
use super::redis::wire::{
    PUBLISH_SCRIPT, channel, decode_message, has_history, meta_key, moved_intact_lua, position_of,
    record_history, script_input, stream_key,
};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::task::AbortOnDrop;
use crate::topic::Topic;

/// Reads a topic's meta hash, its Stream from a position and the `run_id` of the server, at
/// once (KEYS: meta, stream; ARGV: XRANGE start, count). A meta hash moved here intact with its
/// slot (see `moved_intact` in the publish script) is answered as this server's: its `run_id`
/// is given as the server's, so that its epoch holds.
const HISTORY_SCRIPT: &str = concat!(
    moved_intact_lua!(),
    r"
local meta = redis.call('hmget', KEYS[1], 'e', 'o', 'r')
local entries = redis.call('xrange', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])
local life = string.match(redis.call('info', 'server'), 'run_id:(%x+)') or ''
if meta[1] and meta[3] and meta[3] ~= life then
  local giver = redis.call('hmget', KEYS[1], 'n', 'i')
  if moved_intact(giver[1], giver[2]) then
    life = meta[3]
  end
end
return {meta, entries, life}
"
);

/// The Redis Cluster backplane: see the [module documentation](self).
///
/// ```no_run
/// use sockeye_pubsub::{HistoryConfig, Hub, HubConfig};
/// # async fn run() -> Result<(), sockeye_pubsub::Error> {
/// let hub = Hub::connect(
///     "redis+cluster://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379",
///     HubConfig::default(),
///     HistoryConfig::default(),
/// )
/// .await?;
/// # Ok(())
/// # }
/// ```
pub struct RedisCluster {
    shared: Arc<Shared>,
    _reader: AbortOnDrop,
    _health: AbortOnDrop,
}

struct Shared {
    conn: ClusterConnection,
    /// `host:port,…`, for messages.
    addrs: String,
    /// The nodes listed in the URL, asked where a slot is when a primary does not answer.
    listed: Vec<String>,
    history: HistoryConfig,
    events: EventSender,
    /// The topics subscribed to.
    topics: Mutex<HashSet<Topic>>,
    publish: Script,
    read_history: Script,
}

impl fmt::Debug for RedisCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisCluster")
            .field("addrs", &self.shared.addrs)
            .field("history", &self.shared.history)
            .finish_non_exhaustive()
    }
}

const ACCEPTED: &str = "accepted: redis+cluster://HOST:PORT[,HOST:PORT…] (some of the cluster's nodes)";

/// Checks `url` and returns its nodes' `host:port`.
pub(crate) fn parse_url(url: &str) -> Result<Vec<String>, Error> {
    super::url::host_list(url, "redis+cluster", 6379, ACCEPTED)
}

impl RedisCluster {
    /// Connects to the cluster one of whose nodes is listed in `url`
    /// (`redis+cluster://HOST:PORT,HOST:PORT,…`), keeping `history` per topic; events go to
    /// `events`.
    ///
    /// Fails with [`Error::InvalidUrl`] for another URL, and with [`Error::Backplane`] if no
    /// listed node answers within [`CONNECT_TIMEOUT`].
    pub async fn connect(
        url: &str,
        history: HistoryConfig,
        events: EventSender,
    ) -> Result<RedisCluster, Error> {
        let addrs = parse_url(url)?;
        let joined = addrs.join(",");
        let failed = |e: RedisError| Error::backplane(format!("redis cluster {joined}: connect"), e);
        let (push_tx, push_rx) = mpsc::unbounded_channel();
        let client = ClusterClient::builder(addrs.iter().map(|a| format!("redis://{a}")))
            .use_protocol(redis::ProtocolVersion::RESP3)
            .push_sender(push_tx)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .retries(0)
            .build()
            .map_err(failed)?;
        let conn = match tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_connection()).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(failed(e)),
            Err(_) => {
                return Err(Error::Backplane {
                    what: format!("redis cluster {joined}: connect: no answer within {CONNECT_TIMEOUT:?}"),
                    source: None,
                });
            }
        };
        let shared = Arc::new(Shared {
            conn,
            addrs: joined,
            listed: addrs,
            history,
            events,
            topics: Mutex::default(),
            publish: Script::new(PUBLISH_SCRIPT),
            read_history: Script::new(HISTORY_SCRIPT),
        });
        let reader = AbortOnDrop(crate::task::spawn(read(Arc::clone(&shared), push_rx)).abort_handle());
        let health = AbortOnDrop(crate::task::spawn(check_health(Arc::downgrade(&shared))).abort_handle());
        Ok(RedisCluster {
            shared,
            _reader: reader,
            _health: health,
        })
    }
}

impl Shared {
    fn error(&self, command: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::backplane(format!("redis cluster {}: {command}", self.addrs), e)
    }

    /// Publishes `run`, publications of one topic, with one publish script (one round trip to
    /// the topic's shard). On failure, also whether any of it may have been published: not when
    /// the server refused the script before running it (see [`refused_unrun`]).
    async fn publish_run(&self, topic: &Topic, run: &[Publication]) -> Result<Vec<Position>, (bool, Error)> {
        let ([meta, stream], args) = script_input(&self.history, topic, run, "*", "spublish");
        let mut invocation = self.publish.key(meta);
        invocation.key(stream).arg(args);
        let what = match run.len() {
            1 => format!("publish to {topic}"),
            n => format!("publish {n} publications to {topic}"),
        };
        // Not retried, by the client (`retries(0)`) nor here: a script whose reply is lost may
        // have run, and sending it again could publish it twice.
        let mut conn = self.conn.clone();
        match tokio::time::timeout(RESPONSE_TIMEOUT, invocation.invoke_async::<Value>(&mut conn)).await {
            // The script gave the run consecutive offsets, ending at the one it returns.
            Ok(Ok(reply)) => match position_of(&reply) {
                Some(last) => {
                    let first = last.offset.saturating_sub(run.len() as u64 - 1);
                    Ok((first..=last.offset)
                        .map(|offset| Position {
                            epoch: last.epoch.clone(),
                            offset,
                        })
                        .collect())
                }
                // It ran (and published) but its answer cannot be read.
                None => Err((true, self.error(&what, "malformed reply to the publish script"))),
            },
            Ok(Err(e)) => Err((!refused_unrun(&e), self.error(&what, e))),
            Err(_) => Err((
                true,
                self.error(&what, format!("no answer within {RESPONSE_TIMEOUT:?}")),
            )),
        }
    }

    async fn publish(&self, p: &Publication) -> Result<Option<Position>, Error> {
        // One publication that may have been published is said so, as a batch of one would be.
        match self.publish_run(&p.topic, std::slice::from_ref(p)).await {
            Ok(mut positions) => Ok(positions.pop()),
            Err((true, e)) => Err(partly_published(0, 1, e)),
            Err((false, e)) => Err(e),
        }
    }

    /// Publishes `batch` one run of consecutive publications of a topic at a time (a hub's
    /// batch is one topic, hence one slot: one script, one round trip), each run awaited before
    /// the next (they may go to different shards, and each publisher's order is kept).
    async fn publish_many(&self, batch: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let mut positions = Vec::with_capacity(batch.len());
        for run in batch.chunk_by(|a, b| a.topic == b.topic) {
            let published = positions.len();
            match self.publish_run(&run[0].topic, run).await {
                Ok(run_positions) => positions.extend(run_positions),
                Err((maybe, e)) => {
                    let sent = if maybe { published + run.len() } else { published };
                    return Err(partly_published(published, sent, e));
                }
            }
        }
        Ok(positions)
    }

    async fn history(&self, topic: Topic, since: Option<Position>, limit: usize) -> Result<History, Error> {
        let (topic, since) = (&topic, since.as_ref());
        let hex = topic.to_hex();
        let start = match since {
            None => "-".to_owned(),
            Some(p) => format!("{}-0", p.offset.saturating_add(1)),
        };
        let mut invocation = self.read_history.key(meta_key(&hex));
        invocation
            .key(stream_key(&hex))
            .arg(start)
            .arg(limit.saturating_add(1));
        let what = format!("history of {topic}");
        // Read-only: retried once (the first may meet a failed node and refresh the slots).
        let mut reply = None;
        for attempt in 0..2 {
            let mut conn = self.conn.clone();
            match tokio::time::timeout(RESPONSE_TIMEOUT, invocation.invoke_async::<Value>(&mut conn)).await {
                Ok(Ok(v)) => {
                    reply = Some(v);
                    break;
                }
                Ok(Err(e)) if attempt == 1 => return Err(self.error(&what, e)),
                Err(_) if attempt == 1 => return Err(self.error(&what, "no answer")),
                _ => tokio::time::sleep(BACKOFF.random_delay(0)).await,
            }
        }
        let Some(Value::Array(parts)) = reply else {
            return Err(self.error(&what, "malformed reply"));
        };
        let Ok([meta, entries, life]) = <[Value; 3]>::try_from(parts) else {
            return Err(self.error(&what, "malformed reply"));
        };
        let life = match life {
            Value::BulkString(b) => String::from_utf8(b).unwrap_or_default(),
            Value::SimpleString(s) => s,
            _ => String::new(),
        };
        history_from(topic, since, limit, (meta, entries, &life))
            .map_err(|m| self.error(&what, format!("malformed {m}")))
    }

    /// Subscribes to `topic`'s channel on the primary of its slot.
    async fn ssubscribe(&self, topic: &Topic) -> Result<(), Error> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(RESPONSE_TIMEOUT, conn.ssubscribe(channel(&topic.to_hex()))).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(self.error(&format!("subscribe to {topic}"), e)),
            Err(_) => Err(self.error(&format!("subscribe to {topic}"), "no answer")),
        }
    }

    /// Records this node's history setting for `topic` on its shard (best effort: see
    /// [`RECORD_HISTORY_SCRIPT`](super::redis::wire::RECORD_HISTORY_SCRIPT)).
    async fn record_history(&self, topic: &Topic) {
        let Some(invocation) = record_history(&self.history, topic) else {
            return;
        };
        let mut conn = self.conn.clone();
        match tokio::time::timeout(RESPONSE_TIMEOUT, invocation.invoke_async::<Value>(&mut conn)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::debug!(
                "pub/sub backplane: {}",
                self.error(&format!("record the history setting of {topic}"), e)
            ),
            Err(_) => tracing::debug!(
                "pub/sub backplane: redis cluster {}: recording the history setting of {topic}: no answer",
                self.addrs
            ),
        }
    }

    /// Subscribes again to every topic, one channel at a time, until all are. After a failed
    /// try, the client is made to read the slots again (see [`Shared::refresh_slots`]): a
    /// channel whose primary hangs is subscribed where its replica took over.
    async fn resubscribe(&self) {
        let mut retry = 0u32;
        loop {
            let topics: Vec<Topic> = self.topics.lock().await.iter().cloned().collect();
            let mut failed = None;
            for topic in &topics {
                if let Err(e) = self.ssubscribe(topic).await {
                    tracing::debug!("pub/sub backplane: resubscribing: {e}");
                    failed = Some(topic);
                    break;
                }
            }
            let Some(topic) = failed else { return };
            self.refresh_slots(topic).await;
            tokio::time::sleep(BACKOFF.random_delay(retry)).await;
            retry = retry.saturating_add(1);
        }
    }

    /// Whether every primary the client knows answers a PING (the client's connection to each
    /// is the one its shard channels are subscribed on).
    async fn primaries_answer(&self) -> bool {
        let mut conn = self.conn.clone();
        let all = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        ));
        answers(conn.route_command(redis::cmd("PING"), all)).await
    }

    /// Makes the client read the cluster's slots again, which it does by itself only after a
    /// redirection or a closed connection (not after a timeout): a read of `topic`'s meta key
    /// sent to each listed node until one answers MOVED (it no longer serves the slot), after
    /// which the client rebuilds its slot map and moves its shard subscriptions.
    async fn refresh_slots(&self, topic: &Topic) {
        let key = meta_key(&topic.to_hex());
        for addr in &self.listed {
            let Some((host, port)) = addr
                .rsplit_once(':')
                .and_then(|(h, p)| Some((h, p.parse().ok()?)))
            else {
                continue;
            };
            let host = host.trim_start_matches('[').trim_end_matches(']').to_owned();
            let mut read = redis::cmd("EXISTS");
            read.arg(&key);
            let mut conn = self.conn.clone();
            let at = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
            if let Ok(Err(e)) = tokio::time::timeout(RESPONSE_TIMEOUT, conn.route_command(read, at)).await
                && e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved)
            {
                return;
            }
        }
    }
}

/// Forwards the client's pushes: sharded messages to the hub, a lost connection as
/// [`Event::Lost`], then resubscription and [`Event::Restored`].
/// The client's push channel is unbounded and its connections are read whatever the hub does:
/// this never waits on the hub for a publication (what it cannot take is dropped and reported,
/// see `backplane/forward.rs`).
///
/// A publication the client hands twice is forwarded once. While a channel's subscription moves
/// (a slot migrated, a primary that hung and came back as a replica), the client can hold it on
/// two connections for a moment, each receiving the shard's messages (Redis feeds a replica's
/// sharded subscribers too): issue 39's checker saw every publication twice for about a second,
/// which the hub took for a rollback (a gap behind what it had delivered, then the same
/// publications again). A position at or before the last one forwarded for its topic, in the
/// same epoch, is such a repeat: on Redis the epoch changes whenever positions could be given
/// to other publications (another server's `run_id`, the meta hash lost), so within an epoch a
/// shard gives each position once, in order.
async fn read(shared: Arc<Shared>, mut pushes: mpsc::UnboundedReceiver<PushInfo>) {
    let mut to_hub = Forwarder::new(shared.events.clone(), format!("redis cluster {}", shared.addrs));
    let mut forwarded = Forwarded::default();
    loop {
        let push = tokio::select! {
            push = pushes.recv() => match push {
                Some(push) => push,
                None => return,
            },
            reported = to_hub.room(), if to_hub.owes() => {
                if reported.is_err() {
                    return;
                }
                continue;
            }
        };
        match push.kind {
            PushKind::SMessage => {
                let [Value::BulkString(ch), Value::BulkString(msg)] = push.data.as_slice() else {
                    continue;
                };
                let Some(p) = decode_message(ch, msg) else {
                    tracing::warn!(
                        "pub/sub backplane: redis cluster {}: skipped a malformed message on channel {:?}",
                        shared.addrs,
                        String::from_utf8_lossy(ch)
                    );
                    continue;
                };
                if let Some(pos) = &p.position
                    && let Err(last) = forwarded.take(&p.topic, pos)
                {
                    tracing::debug!(
                        "pub/sub backplane: redis cluster {}: {} at {pos} again (forwarded up to {last}): a repeat, dropped",
                        shared.addrs,
                        p.topic
                    );
                    continue;
                }
                if to_hub.publication(p).is_err() {
                    return;
                }
            }
            // The server ends a shard channel's subscriptions by itself when the channel's slot
            // moves to another primary (a resharding; Redis 7). A topic still wanted is
            // subscribed to again where its slot is now, and what was published in between is
            // repaired from history, as after a lost connection. (The answer to this node's own
            // SUNSUBSCRIBE comes this way too: its topic is no longer wanted by then.)
            PushKind::SUnsubscribe => {
                let Some(Value::BulkString(ch)) = push.data.first() else {
                    continue;
                };
                let wanted = {
                    let topics = shared.topics.lock().await;
                    let wanted = topics
                        .iter()
                        .any(|t| channel(&t.to_hex()).as_bytes() == ch.as_slice());
                    if !wanted {
                        // This node's own unsubscribe: its topic's last position stays a while.
                        forwarded.unsubscribed(ch, std::time::Instant::now(), |t| topics.contains(t));
                    }
                    wanted
                };
                if !wanted {
                    continue;
                }
                let reason = format!(
                    "redis cluster {}: the server ended the subscription to {:?} (its slot moved)",
                    shared.addrs,
                    String::from_utf8_lossy(ch)
                );
                if !lost_then_resubscribe(&shared, &mut to_hub, reason).await {
                    return;
                }
            }
            PushKind::Disconnection => {
                let reason = format!("redis cluster {}: a node's connection closed", shared.addrs);
                if !lost_then_resubscribe(&shared, &mut to_hub, reason).await {
                    return;
                }
            }
            _ => {}
        }
    }
}

/// How long the last position forwarded for a topic is kept after the node's own unsubscribe
/// was answered: longer than a subscription moving between connections lasts (about a second
/// in issue 39's checker), so short that a node unsubscribing from many topics holds few.
const REPEATS_KEPT: std::time::Duration = std::time::Duration::from_secs(30);

/// Per topic, the last position forwarded, to drop what the client hands again (see [`read`]).
/// Kept [`REPEATS_KEPT`] past the node's own unsubscribe: the topic may be subscribed again at
/// once (its last subscriber reconnecting), while a connection that still held the channel's
/// old subscription delivers what it had. Forgotten at the unsubscribe, that was forwarded as
/// new after what followed it, and the hub took it for a rollback: a gap behind what its
/// subscribers had (issue 39's checker, redis-cluster seed 511958: `StaleGap`, a gap resuming
/// from 262 after 270 was delivered).
#[derive(Debug, Default)]
struct Forwarded {
    /// The last position, and when the node's unsubscribe was answered (none: subscribed).
    last: HashMap<Topic, (Position, Option<std::time::Instant>)>,
}

impl Forwarded {
    /// Records `pos` as forwarded for `topic`; `Err` with the last one when `pos` is at or
    /// before it in its epoch: a repeat.
    fn take(&mut self, topic: &Topic, pos: &Position) -> Result<(), Position> {
        match self.last.get_mut(topic) {
            Some((last, _)) if last.epoch == pos.epoch && pos.offset <= last.offset => Err(last.clone()),
            Some((last, unsubscribed)) => {
                last.clone_from(pos);
                *unsubscribed = None;
                Ok(())
            }
            None => {
                self.last.insert(topic.clone(), (pos.clone(), None));
                Ok(())
            }
        }
    }

    /// The node's own unsubscribe from `ch` (a topic's channel) was answered at `now`. The
    /// entries of topics not `wanted` any more that were unsubscribed [`REPEATS_KEPT`] ago are
    /// forgotten (a topic wanted again keeps its entry, however long it stays quiet).
    fn unsubscribed(&mut self, ch: &[u8], now: std::time::Instant, wanted: impl Fn(&Topic) -> bool) {
        self.last.retain(|topic, (_, at)| {
            if wanted(topic) {
                *at = None;
                return true;
            }
            match at {
                Some(since) => now.duration_since(*since) < REPEATS_KEPT,
                None => {
                    if channel(&topic.to_hex()).as_bytes() == ch {
                        *at = Some(now);
                    }
                    true
                }
            }
        });
    }
}

/// Checks every [`HEALTH_INTERVAL`] that the primaries answer while topics are subscribed; when
/// one does not, says [`Event::Lost`], subscribes again to every topic (wherever its slot is
/// served by then) and says [`Event::Restored`]. Ends with the backplane.
async fn check_health(shared: std::sync::Weak<Shared>) {
    let mut health = tokio::time::interval(HEALTH_INTERVAL);
    health.tick().await;
    loop {
        health.tick().await;
        let Some(s) = shared.upgrade() else { return };
        if s.topics.lock().await.is_empty() || s.primaries_answer().await {
            continue;
        }
        let reason = format!(
            "redis cluster {}: a primary does not answer PING (its subscriptions may be deaf)",
            s.addrs
        );
        if s.events.send(Event::Lost { reason }).await.is_err() {
            return;
        }
        // Where the slots are now (a replica that took over), for the topics whose
        // subscriptions went quiet without an error.
        let any = s.topics.lock().await.iter().next().cloned();
        if let Some(topic) = any {
            s.refresh_slots(&topic).await;
        }
        s.resubscribe().await;
        if s.events.send(Event::Restored).await.is_err() {
            return;
        }
        health.reset();
    }
}

/// Says [`Event::Lost`], then subscribes again to every topic beside the reading loop (which
/// goes on forwarding the other shards' messages) and says [`Event::Restored`]. False once the
/// hub is gone.
async fn lost_then_resubscribe(shared: &Arc<Shared>, to_hub: &mut Forwarder, reason: String) -> bool {
    if to_hub.send(Event::Lost { reason }).await.is_err() {
        return false;
    }
    let (shared, events) = (Arc::clone(shared), shared.events.clone());
    crate::task::spawn(async move {
        shared.resubscribe().await;
        let _ = events.send(Event::Restored).await;
    });
    true
}

/// Whether the server refused a command before running it, so that none of it took effect: a
/// redirection (MOVED: the slot has another owner now, after a resharding or a failover; ASK: it
/// is being migrated), the cluster or the slot's primary down, a multi-key command across slots,
/// a server still loading its data, an unknown script (`invoke_async` loads it and sends it
/// again once: safe, as it had not run). A batch that meets one fails with nothing of it
/// published; the client refreshes its slot map after a redirection, so sending it again
/// reaches the new owner.
fn refused_unrun(e: &RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind as S};
    matches!(
        e.kind(),
        ErrorKind::Server(
            S::Moved
                | S::Ask
                | S::TryAgain
                | S::ClusterDown
                | S::MasterDown
                | S::CrossSlot
                | S::BusyLoading
                | S::NoScript
        )
    )
}

impl Backplane for RedisCluster {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: has_history(&self.shared.history),
            contiguous_offsets: true,
        }
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async move { self.shared.publish(&publication).await })
    }

    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(self.shared.publish_many(publications))
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            if !self.shared.topics.lock().await.insert(topic.clone()) {
                return Ok(());
            }
            match self.shared.ssubscribe(&topic).await {
                Ok(()) => {
                    self.shared.record_history(&topic).await;
                    Ok(())
                }
                Err(e) => {
                    self.shared.topics.lock().await.remove(&topic);
                    Err(e)
                }
            }
        })
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            if !self.shared.topics.lock().await.remove(&topic) {
                return Ok(());
            }
            let mut conn = self.shared.conn.clone();
            unsubscribe_within(conn.sunsubscribe(channel(&topic.to_hex())))
                .await
                .map_err(|e| self.shared.error(&format!("unsubscribe from {topic}"), e))
        })
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
    fn a_repeat_is_dropped_across_the_nodes_own_unsubscribe_for_a_while() {
        let topic = Topic::new("t").unwrap();
        let ch = channel(&topic.to_hex());
        let at = |offset| Position {
            epoch: "e".into(),
            offset,
        };
        let mut f = Forwarded::default();
        let start = std::time::Instant::now();
        assert_eq!(f.take(&topic, &at(263)), Ok(()));
        assert_eq!(f.take(&topic, &at(264)), Ok(()));
        assert_eq!(f.take(&topic, &at(264)), Err(at(264)));
        // Unsubscribed and subscribed again at once: the old subscription's 263, arriving
        // late on another connection, is still a repeat (it used to be forwarded as new).
        let none = |_: &Topic| false;
        f.unsubscribed(ch.as_bytes(), start, none);
        assert_eq!(f.take(&topic, &at(263)), Err(at(264)));
        assert_eq!(f.take(&topic, &at(265)), Ok(()));
        // Another epoch is never a repeat.
        let other = Position {
            epoch: "f".into(),
            offset: 1,
        };
        assert_eq!(f.take(&topic, &other), Ok(()));
        // Wanted again: kept, however long it stays quiet.
        f.unsubscribed(ch.as_bytes(), start, none);
        f.unsubscribed(b"another channel", start + 2 * REPEATS_KEPT, |t| *t == topic);
        assert_eq!(f.take(&topic, &other), Err(other.clone()));
        // Unsubscribed for good: forgotten after REPEATS_KEPT (at the next unsubscribe).
        f.unsubscribed(ch.as_bytes(), start, none);
        f.unsubscribed(b"another channel", start + REPEATS_KEPT, none);
        assert!(f.last.is_empty());
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("redis+cluster://127.0.0.1:7000,127.0.0.1:7001").ok(),
            Some(vec!["127.0.0.1:7000".into(), "127.0.0.1:7001".into()])
        );
        assert_eq!(parse_url("redis+cluster://h").ok(), Some(vec!["h:6379".into()]));
        for bad in [
            "redis://h:1",
            "redis+cluster://",
            "redis+cluster://h:1,",
            "redis+cluster://h:x",
            "redis+cluster://h:1/0",
            "redis+cluster://:pw@h:1",
        ] {
            match parse_url(bad) {
                Err(Error::InvalidUrl(m)) => assert!(m.contains("redis+cluster://"), "{m}"),
                other => panic!("{bad:?}: {other:?}"),
            }
        }
    }
}
