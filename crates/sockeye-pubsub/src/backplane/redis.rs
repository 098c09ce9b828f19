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
//!   missed silently.
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
//! - **Backpressure**: when the hub is behind, the reader waits on the event channel; the Redis
//!   client keeps reading the connection meanwhile, so what Redis sends then waits in this
//!   process's memory (not in Redis's output buffer, whose limit would cut the connection).
//!
//! # Keys
//!
//! A topic is hex-encoded ([`Topic::to_hex`]) so that any name makes a valid key; the hex sits in
//! a hash tag so that a topic's keys share a cluster slot:
//!
//! - `sockeye:{<hex>}:meta`: a hash, `e` the epoch (random, set when the hash is created or the
//!   server's life changes), `o` the last offset given and `r` the `run_id` of the server that
//!   gave it. It outlives the Stream (at least [`META_TTL_MIN`]), so that offsets keep counting
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

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use redis::aio::{MultiplexedConnection, PubSubSink, PubSubStream};
use redis::{AsyncConnectionConfig, Client, RedisError, Script, Value};
use sockeye::DataKind;
use sockeye::backoff::Backoff;
use tokio::sync::Mutex;
use tokio::task::AbortHandle;

use super::api::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, partly_published};
use super::position::{Origin, Position, Publication};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::topic::Topic;

/// How long [`Redis::connect`] waits for the server at start.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long a command waits for its reply before failing with [`Error::Backplane`] (and a
/// reconnection on the next one).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);

/// The shortest life of a topic's meta hash (its epoch and last offset), refreshed by every
/// publication; `max_age` if that is longer. Longer than the history, so that a subscriber of a
/// quiet topic resumes without a false gap, and shorter than forever, so that abandoned topics
/// go away.
pub const META_TTL_MIN: Duration = Duration::from_secs(24 * 3600);

/// Reconnection backoff (one server and a cluster alike): the nominal wait starts at 100 ms and
/// doubles up to 3 s, each wait drawn in [d/2, d] so that many nodes do not reconnect in step
/// (50–100 ms first, 1.5–3 s at most).
pub(super) const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(3));

/// How often the pub/sub connection is checked with a PING (a server that hangs without closing
/// the connection is otherwise never noticed).
const HEALTH_INTERVAL: Duration = Duration::from_secs(5);

/// The wire format's version byte.
const VERSION: u8 = 1;

/// Bytes before the payload in a body.
const BODY_HEADER: usize = 17;

/// Publishes one or more publications of one topic atomically: epoch (kept if present and given
/// by this server's life), then for each body in order its offset, history and message.
///
/// KEYS: meta, stream. ARGV: channel, a fresh random epoch, max_len (0: no Stream), Stream TTL in
/// ms, meta TTL in ms, the server's `run_id` as read on the connection that sends the script
/// (empty: unknown, not checked; `*`: read by the script, for Redis Cluster, where the node does
/// not know which server a command reaches), the command that sends the message (`publish`;
/// `spublish` in a cluster), then the bodies (at least one), in publication order. Returns the
/// last offset given and the epoch: the bodies got the offsets up to it, one each, in order (the
/// script runs alone on its server).
///
/// Each body's message is the last thing done for it, so a script stopped by an error has
/// published a prefix of its bodies (in practice none: only the first write of a script can be
/// refused for memory, and a key of the wrong type fails the first body's `XADD`).
///
/// Why the `run_id` comes from the node and is not read by the script: `INFO server` inside the
/// script nearly doubles its cost (measured on Redis 7.0: 7 µs a call, 13 µs with `INFO server`,
/// 16 µs with `INFO replication` too; Redis runs scripts on its one thread), and the node's
/// reading is exact: it is read on the connection the script is then sent over, and a TCP
/// connection ends with the server process at its other end (a restarted or promoted server is
/// reached over a new connection, which reads the new `run_id` before its first command). In a
/// cluster the script reads it once for all its bodies.
///
/// The message goes out with ARGV[7]: PUBLISH on one server (the redis crate's RESP2 pub/sub
/// connection, `aio::PubSub` in 1.8, has no SSUBSCRIBE, and on one server sharded pub/sub is
/// plain pub/sub anyway; PUBLISH is in every Redis from 5 on), SPUBLISH in a cluster
/// ([`super::redis_cluster`]), which keeps a topic's messages in its keys' shard (the `{hex}`
/// hash tag puts the channel in the same slot).
pub(super) const PUBLISH_SCRIPT: &str = r"
local meta = redis.call('hmget', KEYS[1], 'e', 'r')
local life = ARGV[6]
if life == '*' then
  -- Redis Cluster: the node does not know which server runs the script; it reads it here.
  life = string.match(redis.call('info', 'server'), 'run_id:(%x+)') or ''
end
if not meta[1] or (life ~= '' and meta[2] and meta[2] ~= life) then
  -- A new epoch: the topic is new (or its meta expired), or this server is not the one that
  -- gave the last offsets (it restarted, or another one was promoted): it may have lost some of
  -- them, which must not be given again under the same epoch. Whatever Stream is left from the
  -- old epoch is meaningless in the new one.
  redis.call('del', KEYS[1], KEYS[2])
  redis.call('hset', KEYS[1], 'e', ARGV[2], 'o', 0)
  if life ~= '' then
    redis.call('hset', KEYS[1], 'r', life)
  end
elseif life ~= '' and not meta[2] then
  -- Written by a version that did not record the server: adopted.
  redis.call('hset', KEYS[1], 'r', life)
end
redis.call('pexpire', KEYS[1], ARGV[5])
local epoch = redis.call('hget', KEYS[1], 'e')
local offset = 0
for i = 8, #ARGV do
  offset = redis.call('hincrby', KEYS[1], 'o', 1)
  if tonumber(ARGV[3]) > 0 then
    redis.call('xadd', KEYS[2], 'MAXLEN', '~', ARGV[3], offset .. '-0', 'b', ARGV[i])
    redis.call('pexpire', KEYS[2], ARGV[4])
  end
  redis.call(ARGV[7], ARGV[1], '\1' .. offset .. '\n' .. epoch .. '\n' .. ARGV[i])
end
return {offset, epoch}
";

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
    reader: AbortHandle,
}

struct Shared {
    client: Client,
    /// `host:port`, for messages (never the password).
    addr: String,
    history: HistoryConfig,
    events: EventSender,
    /// Commands: publish and history. `None` after a failure: the next command reconnects.
    commands: Mutex<Option<Commands>>,
    /// The pub/sub connection's command half and the topics subscribed to. One lock, so that a
    /// reconnection and a subscription cannot miss each other.
    subs: Mutex<Subs>,
    publish: Script,
}

/// A command connection and the life of the server at its other end.
#[derive(Clone)]
struct Commands {
    conn: MultiplexedConnection,
    /// The server's `run_id` (`INFO server`), new with every start of a Redis process and
    /// different on every server: whenever it differs from the one that gave a topic's last
    /// offset, those offsets may have been lost, and the topic starts a new epoch. Empty when
    /// the server does not tell (`INFO` renamed away): then a rollback is not detected here.
    life: Arc<str>,
}

struct Subs {
    /// `None` while reconnecting.
    sink: Option<PubSubSink>,
    topics: HashSet<Topic>,
}

impl fmt::Debug for Redis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Redis")
            .field("addr", &self.shared.addr)
            .field("history", &self.shared.history)
            .finish_non_exhaustive()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.reader.abort();
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
        let reader = tokio::spawn(read(Arc::clone(&shared), stream)).abort_handle();
        Ok(Redis { shared, reader })
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
    let addr = super::url::host_port(host_port, 6379).map_err(|why| bad(&why))?;
    let path = path.split(['?', '#']).next().unwrap_or("");
    if !path.is_empty() && path.parse::<u32>().is_err() {
        return Err(bad(&format!("the database {path:?} is not a number")));
    }
    Ok(addr)
}

impl Shared {
    fn error(&self, command: &str, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
        Error::backplane(format!("redis {}: {command}", self.addr), e)
    }

    async fn connect_commands(&self, timeout: Duration) -> Result<Commands, Error> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(RESPONSE_TIMEOUT));
        let connect = async {
            let mut conn = self
                .client
                .get_multiplexed_async_connection_with_config(&config)
                .await?;
            // The server's life, read on this connection before anything is published over it.
            let life = match redis::cmd("INFO")
                .arg("server")
                .query_async::<String>(&mut conn)
                .await
            {
                Ok(info) => server_life(&info).unwrap_or_default(),
                Err(e)
                    if matches!(
                        e.kind(),
                        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                    ) =>
                {
                    tracing::warn!(
                        "pub/sub backplane: redis {}: INFO refused ({e}): a server restarted from \
                         older data will not be noticed by its run_id",
                        self.addr
                    );
                    String::new()
                }
                Err(e) => return Err(e),
            };
            Ok::<_, RedisError>(Commands {
                conn,
                life: life.into(),
            })
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(commands)) => Ok(commands),
            Ok(Err(e)) => Err(self.error("connect", e)),
            Err(_) => Err(self.error("connect", format!("no answer within {timeout:?}"))),
        }
    }

    /// A new pub/sub connection subscribed to `topics`.
    async fn connect_pubsub(
        &self,
        timeout: Duration,
        topics: &[String],
    ) -> Result<(PubSubSink, PubSubStream), Error> {
        let connect = async {
            let (mut sink, stream) = self.client.get_async_pubsub().await?.split();
            if !topics.is_empty() {
                sink.subscribe(topics).await?;
            }
            Ok::<_, RedisError>((sink, stream))
        };
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(pair)) => Ok(pair),
            Ok(Err(e)) => Err(self.error("connect (pub/sub)", e)),
            Err(_) => Err(self.error("connect (pub/sub)", format!("no answer within {timeout:?}"))),
        }
    }

    /// The command connection, connected again if it failed.
    async fn commands(&self) -> Result<Commands, Error> {
        let mut slot = self.commands.lock().await;
        if let Some(conn) = &*slot {
            return Ok(conn.clone());
        }
        let conn = self.connect_commands(RESPONSE_TIMEOUT).await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Forgets the command connection after a failure (the next command reconnects).
    async fn reset_commands(&self) {
        *self.commands.lock().await = None;
    }

    async fn publish(&self, p: Publication) -> Result<Option<Position>, Error> {
        let topic = p.topic.clone();
        let Commands { mut conn, life } = self.commands().await?;
        let result: Result<Value, RedisError> = self.invocation(&p, &life).invoke_async(&mut conn).await;
        match result {
            Ok(v) => Ok(position_of(&v)),
            Err(e) => {
                // Not retried: the script may have run before the connection dropped, and a
                // retry would publish twice.
                self.reset_commands().await;
                Err(self.error(&format!("publish to {topic}"), e))
            }
        }
    }

    /// The publish script's keys and arguments for `p` (see [`PUBLISH_SCRIPT`]).
    fn script_input(&self, p: &Publication, life: &str) -> ([String; 2], Vec<Vec<u8>>) {
        script_input(&self.history, &p.topic, std::slice::from_ref(p), life, "publish")
    }

    /// The publish script's invocation for `p` (`EVALSHA`, then `EVAL` if Redis does not have the
    /// script).
    fn invocation(&self, p: &Publication, life: &str) -> redis::ScriptInvocation<'_> {
        let ([meta, stream], args) = self.script_input(p, life);
        let mut invocation = self.publish.key(meta);
        invocation.key(stream).arg(args);
        invocation
    }

    /// Publishes a batch in one round trip: one pipeline (not a transaction) of `SCRIPT LOAD`
    /// then one `EVALSHA` of the publish script per publication. Each script runs atomically, in
    /// order (one connection); other clients' commands may run between them.
    ///
    /// `SCRIPT LOAD` first, in the same pipeline, so that no `EVALSHA` meets an empty script
    /// cache (a restarted Redis): otherwise some of the batch could fail with NOSCRIPT while
    /// others ran (another node loading the script meanwhile), and resending would duplicate.
    async fn publish_many(&self, batch: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let n = batch.len();
        match n {
            0 => return Ok(Vec::new()),
            1 => {
                // One publication: the script's own NOSCRIPT fallback, nothing to load.
                let p = batch.into_iter().next().ok_or(Error::Closed)?;
                let Commands { mut conn, life } = self.commands().await?;
                let topic = p.topic.clone();
                let result: Result<Value, RedisError> =
                    self.invocation(&p, &life).invoke_async(&mut conn).await;
                return match result {
                    Ok(v) => Ok(position_of(&v).into_iter().collect()),
                    Err(e) => {
                        self.reset_commands().await;
                        Err(partly_published(
                            0,
                            1,
                            self.error(&format!("publish to {topic}"), e),
                        ))
                    }
                };
            }
            _ => {}
        }
        let what = if batch.iter().all(|p| p.topic == batch[0].topic) {
            format!("publish {n} publications to {}", batch[0].topic)
        } else {
            format!("publish {n} publications")
        };
        // Nothing sent if there is no connection: the batch can be retried whole.
        let Commands { mut conn, life } = self.commands().await?;
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("SCRIPT").arg("LOAD").arg(PUBLISH_SCRIPT);
        for p in &batch {
            let (keys, args) = self.script_input(p, &life);
            pipe.cmd("EVALSHA")
                .arg(self.publish.get_hash())
                .arg(keys.len())
                .arg(&keys[..])
                .arg(args);
        }
        drop(batch);
        let replies: Vec<Result<Value, RedisError>> = match pipe.query_async(&mut conn).await {
            Ok(r) => r,
            Err(e) => {
                // Sent, no answer (the connection dropped, or no reply within the timeout): any
                // prefix of the batch may have been published.
                self.reset_commands().await;
                return Err(partly_published(0, n, self.error(&what, e)));
            }
        };
        // SCRIPT LOAD's reply aside: what counts is which scripts ran.
        let results: Vec<Result<Value, RedisError>> = replies.into_iter().skip(1).collect();
        let published = results.iter().take_while(|r| r.is_ok()).count();
        if published == n && results.len() == n {
            return Ok(results.iter().flatten().filter_map(position_of).collect());
        }
        // Each failed script did not publish (one body each, its PUBLISH the last call); a later
        // one may have.
        let sent = results.iter().rposition(Result::is_ok).map_or(0, |i| i + 1);
        let first_error = results
            .into_iter()
            .find_map(Result::err)
            .map_or_else(|| self.error(&what, "missing reply"), |e| self.error(&what, e));
        Err(partly_published(published, sent, first_error))
    }

    fn has_history(&self) -> bool {
        has_history(&self.history)
    }

    async fn history(&self, topic: &Topic, since: Option<&Position>, limit: usize) -> Result<History, Error> {
        let hex = topic.to_hex();
        let start = match since {
            None => "-".to_owned(),
            Some(p) => format!("{}-0", p.offset.saturating_add(1)),
        };
        // One more than asked: `limit` 0 still shows whether the history reaches back.
        let count = limit.saturating_add(1);
        let mut pipe = redis::pipe();
        pipe.atomic()
            .cmd("HMGET")
            .arg(meta_key(&hex))
            .arg("e")
            .arg("o")
            .arg("r")
            .cmd("XRANGE")
            .arg(stream_key(&hex))
            .arg(&start)
            .arg("+")
            .arg("COUNT")
            .arg(count);
        // Read-only, so retried once on a fresh connection: after Redis restarted, the old
        // connection fails at its first use.
        let mut reply = None;
        for attempt in 0..2 {
            let Commands { mut conn, life } = self.commands().await?;
            match pipe.query_async::<(Value, Value)>(&mut conn).await {
                Ok((meta, entries)) => {
                    reply = Some((meta, entries, life));
                    break;
                }
                Err(e) => {
                    self.reset_commands().await;
                    if attempt == 1 || !(e.is_connection_dropped() || e.is_io_error()) {
                        return Err(self.error(&format!("history of {topic}"), e));
                    }
                }
            }
        }
        let Some((meta, entries, life)) = reply else {
            return Err(self.error(&format!("history of {topic}"), "no reply"));
        };
        history_from(topic, since, limit, (meta, entries, &life))
            .map_err(|what| self.error(&format!("history of {topic}"), format!("malformed {what}")))
    }
}

/// What the history holds after `since` (at most `limit`), from the topic's meta hash (HMGET
/// `e o r`), its Stream entries from `since + 1` (XRANGE, one more than `limit`) and the `run_id`
/// of the server that answered (empty: unknown); `Err(what)` when a reply is malformed.
pub(super) fn history_from(
    topic: &Topic,
    since: Option<&Position>,
    limit: usize,
    (meta, entries, life): (Value, Value, &str),
) -> Result<History, &'static str> {
    let (mut epoch, offset, by) = parse_meta(meta).ok_or("meta hash")?;
    if !life.is_empty() && by.is_some_and(|by| by != life) {
        // The epoch was given by another life of the server (it restarted, or another one
        // was promoted): its last offsets may be lost and the next publication starts a new
        // epoch. Until then the topic is as one with nothing published in this epoch: no
        // position of the old one is recovered (some of what followed it may be gone), and
        // none is handed out.
        epoch = None;
    }
    let mut entries = parse_entries(entries, topic, epoch.as_deref().unwrap_or("")).ok_or("stream entry")?;
    let Some(epoch) = epoch else {
        // Nothing published in this epoch (or its meta expired): a position cannot be
        // recovered; no position means "everything", which is nothing.
        return Ok(match since {
            Some(_) => History::Lost { latest: None },
            None => History::Complete(Vec::new()),
        });
    };
    let latest = Some(Position {
        epoch: epoch.as_str().into(),
        offset,
    });
    if let Some(since) = since {
        if *since.epoch != *epoch || since.offset > offset {
            return Ok(History::Lost { latest });
        }
        if since.offset < offset {
            // The history must reach back to the first publication after `since`.
            let first = entries
                .first()
                .and_then(|p| p.position.as_ref())
                .map(|p| p.offset);
            if first != Some(since.offset + 1) {
                return Ok(History::Lost { latest });
            }
        }
    }
    entries.truncate(limit);
    Ok(History::Complete(entries))
}

/// The publish script's keys and arguments for `batch`, publications of `topic` (see
/// [`PUBLISH_SCRIPT`]): `life` the server's `run_id` (`*`: read by the script), `command`
/// `publish` or `spublish`.
pub(super) fn script_input(
    history: &HistoryConfig,
    topic: &Topic,
    batch: &[Publication],
    life: &str,
    command: &str,
) -> ([String; 2], Vec<Vec<u8>>) {
    let hex = topic.to_hex();
    let stream_ttl = millis(history.max_age);
    let meta_ttl = millis(history.max_age.max(META_TTL_MIN));
    let max_len = if has_history(history) { history.max_len } else { 0 };
    let mut args = Vec::with_capacity(7 + batch.len());
    args.extend([
        channel(&hex).into_bytes(),
        format!("{:016x}", rand::random::<u64>()).into_bytes(),
        max_len.to_string().into_bytes(),
        stream_ttl.to_string().into_bytes(),
        meta_ttl.to_string().into_bytes(),
        life.as_bytes().to_vec(),
        command.as_bytes().to_vec(),
    ]);
    for p in batch {
        debug_assert_eq!(&p.topic, topic);
        let mut body = Vec::with_capacity(BODY_HEADER + p.payload.len());
        body.extend_from_slice(&p.origin.node.to_be_bytes());
        body.extend_from_slice(&p.origin.publisher.to_be_bytes());
        body.push(match p.kind {
            DataKind::Text => 0,
            DataKind::Binary => 1,
        });
        body.extend_from_slice(&p.payload);
        args.push(body);
    }
    ([meta_key(&hex), stream_key(&hex)], args)
}

/// Whether `history` keeps anything.
pub(super) fn has_history(history: &HistoryConfig) -> bool {
    history.max_len > 0 && !history.max_age.is_zero()
}

/// An unsubscription's outcome: done, or as good as done when the connection is going or
/// hangs (the next connection does not subscribe to the topic); the server's refusal otherwise.
pub(super) fn unsubscribed(
    result: Result<Result<(), RedisError>, tokio::time::error::Elapsed>,
) -> Result<(), RedisError> {
    match result {
        Ok(Err(e)) if !(e.is_connection_dropped() || e.is_io_error()) => Err(e),
        _ => Ok(()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

pub(super) fn meta_key(hex: &str) -> String {
    format!("sockeye:{{{hex}}}:meta")
}

pub(super) fn stream_key(hex: &str) -> String {
    format!("sockeye:{{{hex}}}:stream")
}

pub(super) fn channel(hex: &str) -> String {
    format!("sockeye:{{{hex}}}")
}

/// The topic of a channel name.
fn channel_topic(name: &[u8]) -> Option<Topic> {
    let hex = name.strip_prefix(b"sockeye:{")?.strip_suffix(b"}")?;
    Topic::from_hex(std::str::from_utf8(hex).ok()?).ok()
}

/// The position the publish script returned (`[offset, epoch]`).
/// The `{offset, epoch}` a publish script returns.
pub(super) fn position_of(v: &Value) -> Option<Position> {
    let Value::Array(parts) = v else { return None };
    let [Value::Int(offset), epoch] = parts.as_slice() else {
        return None;
    };
    Some(Position {
        epoch: std::str::from_utf8(bytes_of(epoch)?).ok()?.into(),
        offset: u64::try_from(*offset).ok()?,
    })
}

fn bytes_of(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

fn parse_u64(b: &[u8]) -> Option<u64> {
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// The epoch, last offset and the server life that gave it, from HMGET's reply (`None` epoch:
/// no meta hash; `None` life: written by a version that did not record it).
pub(super) fn parse_meta(v: Value) -> Option<(Option<String>, u64, Option<String>)> {
    let Value::Array(fields) = v else { return None };
    let [e, o, r] = fields.as_slice() else { return None };
    match (e, o) {
        (Value::Nil, _) => Some((None, 0, None)),
        (e, o) => {
            let epoch = String::from_utf8(bytes_of(e)?.to_vec()).ok()?;
            let offset = match o {
                Value::Int(i) => u64::try_from(*i).ok()?,
                o => parse_u64(bytes_of(o)?)?,
            };
            let life = match r {
                Value::Nil => None,
                r => Some(String::from_utf8(bytes_of(r)?.to_vec()).ok()?),
            };
            Some((Some(epoch), offset, life))
        }
    }
}

/// The `run_id` in `INFO server`'s reply.
fn server_life(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// XRANGE's reply as publications.
pub(super) fn parse_entries(v: Value, topic: &Topic, epoch: &str) -> Option<Vec<Publication>> {
    let Value::Array(entries) = v else { return None };
    entries
        .iter()
        .map(|entry| {
            let Value::Array(parts) = entry else { return None };
            let [id, fields] = parts.as_slice() else {
                return None;
            };
            let (offset, seq) = std::str::from_utf8(bytes_of(id)?).ok()?.split_once('-')?;
            if seq != "0" {
                return None;
            }
            let offset: u64 = offset.parse().ok()?;
            let Value::Array(fields) = fields else { return None };
            let body = fields.chunks(2).find_map(|kv| match kv {
                [k, v] if bytes_of(k) == Some(b"b") => bytes_of(v),
                _ => None,
            })?;
            decode_body(
                topic.clone(),
                epoch.to_owned(),
                offset,
                Bytes::copy_from_slice(body),
            )
        })
        .collect()
}

fn decode_body(topic: Topic, epoch: String, offset: u64, body: Bytes) -> Option<Publication> {
    let node = u64::from_be_bytes(body.get(0..8)?.try_into().ok()?);
    let publisher = u64::from_be_bytes(body.get(8..16)?.try_into().ok()?);
    let kind = match body.get(16)? {
        0 => DataKind::Text,
        1 => DataKind::Binary,
        _ => return None,
    };
    Some(Publication {
        topic,
        position: Some(Position {
            epoch: epoch.into(),
            offset,
        }),
        origin: Origin { node, publisher },
        kind,
        payload: body.slice(BODY_HEADER..),
    })
}

/// A pub/sub message as a publication (`None`: not of this format).
pub(super) fn decode_message(channel: &[u8], message: &[u8]) -> Option<Publication> {
    let topic = channel_topic(channel)?;
    let rest = message.strip_prefix(&[VERSION])?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let offset = parse_u64(&rest[..nl])?;
    let rest = &rest[nl + 1..];
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let epoch = String::from_utf8(rest[..nl].to_vec()).ok()?;
    decode_body(topic, epoch, offset, Bytes::copy_from_slice(&rest[nl + 1..]))
}

/// The pub/sub reader: forwards messages, and reconnects when the connection drops. Ends when the
/// hub stops listening (or the backplane is dropped, which aborts it).
async fn read(shared: Arc<Shared>, mut stream: PubSubStream) {
    loop {
        // The old connection goes with its stream.
        let reason = forward(&shared, stream).await;
        let Some(reason) = reason else { return };
        shared.subs.lock().await.sink = None;
        shared.reset_commands().await;
        if shared.events.send(Event::Lost { reason }).await.is_err() {
            return;
        }
        let mut retry = 0;
        stream = loop {
            tokio::time::sleep(BACKOFF.random_delay(retry)).await;
            match shared.resubscribe().await {
                Ok(stream) => break stream,
                Err(e) => {
                    tracing::debug!("pub/sub backplane: reconnecting: {e}");
                    retry = retry.saturating_add(1);
                }
            }
        };
        // A command connection made while Redis was going down may be dead: start afresh.
        shared.reset_commands().await;
        if shared.events.send(Event::Restored).await.is_err() {
            return;
        }
    }
}

impl Shared {
    /// A new pub/sub connection subscribed to every current topic, installed.
    async fn resubscribe(&self) -> Result<PubSubStream, Error> {
        let mut subs = self.subs.lock().await;
        let channels: Vec<String> = subs.topics.iter().map(|t| channel(&t.to_hex())).collect();
        let (sink, stream) = self.connect_pubsub(RESPONSE_TIMEOUT, &channels).await?;
        subs.sink = Some(sink);
        Ok(stream)
    }

    /// Health check of the pub/sub connection: `false` if it does not answer.
    async fn ping(&self) -> bool {
        let mut subs = self.subs.lock().await;
        let Some(sink) = subs.sink.as_mut() else {
            return false;
        };
        matches!(
            tokio::time::timeout(RESPONSE_TIMEOUT, sink.ping::<Value>()).await,
            Ok(Ok(_))
        )
    }
}

/// Forwards messages until the connection is lost (`Some(reason)`) or the hub stops (`None`).
async fn forward(shared: &Shared, mut stream: PubSubStream) -> Option<String> {
    let mut health = tokio::time::interval(HEALTH_INTERVAL);
    health.tick().await;
    loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(msg) = msg else {
                    return Some(format!("redis {}: pub/sub connection closed", shared.addr));
                };
                let Some(p) = decode_message(msg.get_channel_name().as_bytes(), msg.get_payload_bytes()) else {
                    tracing::warn!(
                        "pub/sub backplane: redis {}: skipped a malformed message on channel {:?}",
                        shared.addr,
                        msg.get_channel_name()
                    );
                    continue;
                };
                if shared.events.send(Event::Publication(p)).await.is_err() {
                    return None;
                }
            }
            _ = health.tick() => {
                if !shared.ping().await {
                    return Some(format!("redis {}: pub/sub connection does not answer PING", shared.addr));
                }
            }
        }
    }
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
        let topic = topic.clone();
        Box::pin(async move {
            let mut subs = self.shared.subs.lock().await;
            if !subs.topics.insert(topic.clone()) {
                return Ok(());
            }
            let Some(sink) = subs.sink.as_mut() else {
                // Reconnecting: the reconnection subscribes to it.
                return Ok(());
            };
            match tokio::time::timeout(RESPONSE_TIMEOUT, sink.subscribe(channel(&topic.to_hex()))).await {
                Ok(Ok(())) => Ok(()),
                // The connection is going (or the server hangs, which the health check
                // notices): the reader reconnects and subscribes to it.
                Err(_) => Ok(()),
                Ok(Err(e)) if e.is_connection_dropped() || e.is_io_error() => Ok(()),
                Ok(Err(e)) => {
                    subs.topics.remove(&topic);
                    Err(self.shared.error(&format!("subscribe to {topic}"), e))
                }
            }
        })
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            let mut subs = self.shared.subs.lock().await;
            if !subs.topics.remove(&topic) {
                return Ok(());
            }
            let Some(sink) = subs.sink.as_mut() else {
                return Ok(());
            };
            let result =
                tokio::time::timeout(RESPONSE_TIMEOUT, sink.unsubscribe(channel(&topic.to_hex()))).await;
            unsubscribed(result).map_err(|e| self.shared.error(&format!("unsubscribe from {topic}"), e))
        })
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        let topic = topic.clone();
        let since = since.cloned();
        Box::pin(async move { self.shared.history(&topic, since.as_ref(), limit).await })
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

    #[test]
    fn the_servers_life_and_the_meta_hash_are_read_without_panics() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:db1c6a9307bafb2042a124023541d5280e3bfae1\r\ntcp_port:6379\r\n";
        assert_eq!(
            server_life(info).as_deref(),
            Some("db1c6a9307bafb2042a124023541d5280e3bfae1")
        );
        assert_eq!(server_life("# Server\r\nrun_id:\r\n"), None);
        assert_eq!(server_life(""), None);
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            parse_meta(Value::Array(vec![bulk("e1"), bulk("42"), bulk("r1")])),
            Some((Some("e1".into()), 42, Some("r1".into())))
        );
        assert_eq!(
            parse_meta(Value::Array(vec![bulk("e1"), Value::Int(7), Value::Nil])),
            Some((Some("e1".into()), 7, None))
        );
        assert_eq!(
            parse_meta(Value::Array(vec![Value::Nil, Value::Nil, Value::Nil])),
            Some((None, 0, None))
        );
        for bad in [
            Value::Nil,
            Value::Array(vec![bulk("e1"), bulk("42")]),
            Value::Array(vec![bulk("e1"), bulk("x"), Value::Nil]),
            Value::Array(vec![bulk("e1"), Value::Int(-1), Value::Nil]),
            Value::Array(vec![bulk("e1"), bulk("1"), Value::Int(3)]),
        ] {
            assert_eq!(parse_meta(bad.clone()), None, "{bad:?}");
        }
    }

    #[test]
    fn messages_round_trip_and_garbage_is_refused() {
        let t = Topic::new("a {b} c").unwrap_or_else(|e| panic!("{e}"));
        let ch = channel(&t.to_hex());
        let mut msg = vec![VERSION];
        msg.extend_from_slice(b"42\nabc\n");
        msg.extend_from_slice(&7u64.to_be_bytes());
        msg.extend_from_slice(&9u64.to_be_bytes());
        msg.push(1);
        msg.extend_from_slice(b"payload");
        let p = decode_message(ch.as_bytes(), &msg).unwrap_or_else(|| panic!("not decoded"));
        assert_eq!(p.topic, t);
        assert_eq!(
            p.position,
            Some(Position {
                epoch: "abc".into(),
                offset: 42
            })
        );
        assert_eq!(
            p.origin,
            Origin {
                node: 7,
                publisher: 9
            }
        );
        assert_eq!(p.kind, DataKind::Binary);
        assert_eq!(&p.payload[..], b"payload");
        // Every prefix of a good message, and some garbage, is refused without a panic.
        for n in 0..BODY_HEADER + 8 {
            assert!(decode_message(ch.as_bytes(), &msg[..n]).is_none(), "{n}");
        }
        let mut v2 = msg.clone();
        v2[0] = 2;
        assert!(decode_message(ch.as_bytes(), &v2).is_none());
        assert!(decode_message(b"other", &msg).is_none());
        assert!(decode_message(b"sockeye:{zz}", &msg).is_none());
    }
}
