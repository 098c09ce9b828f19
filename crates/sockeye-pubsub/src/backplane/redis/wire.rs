//! What the Redis backplane writes and reads on the server: the keys of a topic, the publish
//! script and its arguments, the wire format of a message and a Stream entry, and the replies
//! parsed (the meta hash, XRANGE, `INFO server`). Shared by one server and a cluster. The
//! formats are described in the [Redis backplane's documentation](super).

use std::sync::LazyLock;
use std::time::Duration;

use bytes::Bytes;
use redis::Value;
use sockeye::DataKind;

use crate::backplane::position::{Origin, Position, Publication};
use crate::config::HistoryConfig;
use crate::topic::Topic;

/// The shortest life of a topic's meta hash (its epoch and last offset), refreshed by every
/// publication; `max_age` if that is longer. Longer than the history, so that a subscriber of a
/// quiet topic resumes without a false gap, and shorter than forever, so that abandoned topics
/// go away.
pub const META_TTL_MIN: Duration = Duration::from_secs(24 * 3600);

/// The wire format's version byte.
const VERSION: u8 = 1;

/// Bytes before the payload in a body.
const BODY_HEADER: usize = 17;

/// Lua: whether a topic's meta hash whose offsets were given by another server (`r`, a
/// `run_id` not this server's) came here intact by a slot migration (Redis Cluster:
/// `MIGRATE` moves keys whole, nothing lost) rather than by a loss. `n` is the cluster node id
/// of the server that gave the offsets and `i` its replication id, both written with `r`. Not a
/// migration (a loss is possible): no `n` (not recorded: one server, or an older version); `n`
/// this server itself (it restarted: another `run_id`, whatever its persistence kept); this
/// server replicated from the giver (its replication id, or the previous one, is `i`: a replica
/// promoted, which may lack the tail); or the giver is no longer a primary in good standing in
/// this server's view (failed, or a replica now: it was failed over). What is left is a primary
/// that is alive and still a primary, whose keys this server never copied by replication: they
/// came by `MIGRATE` (or an operator's `RESTORE`), as they were.
macro_rules! moved_intact_lua {
    () => {
        r"
local function moved_intact(giver, giver_repl)
  if not giver or giver == redis.call('cluster', 'myid') then
    return false
  end
  local repl = redis.call('info', 'replication')
  if giver_repl and giver_repl ~= '' and (string.match(repl, 'master_replid:(%x+)') == giver_repl
      or string.match(repl, 'master_replid2:(%x+)') == giver_repl) then
    return false
  end
  for line in string.gmatch(redis.call('cluster', 'nodes'), '[^\n]+') do
    local id, flags = string.match(line, '^(%x+) %S+ (%S+)')
    if id == giver then
      -- Whole flags, comma-separated: a substring test would read `nofailover` (set on healthy
      -- primaries by cluster-replica-no-failover) as `fail`.
      local primary, healthy = false, true
      for flag in string.gmatch(flags, '[^,]+') do
        if flag == 'master' then
          primary = true
        elseif flag == 'fail' or flag == 'fail?' or flag == 'noaddr' or flag == 'handshake' then
          healthy = false
        end
      end
      return primary and healthy
    end
  end
  return false
end
"
    };
}
pub(crate) use moved_intact_lua;

/// Publishes one or more publications of one topic atomically: epoch (kept if present and given
/// by this server's life), then for each body in order its offset, history and message.
///
/// KEYS: meta, stream. ARGV: channel, a fresh random epoch, max_len (0: this node keeps no
/// history), Stream TTL in ms, meta TTL in ms, the server's `run_id` as read on the connection
/// that sends the script (empty: unknown, not checked; `*`: read by the script, for Redis
/// Cluster, where the node does not know which server a command reaches), the command that
/// sends the message (`publish`; `spublish` in a cluster), then the bodies (at least one), in
/// publication order. Returns the last offset given and the epoch: the bodies got the offsets
/// up to it, one each, in order (the script runs alone on its server).
///
/// **The topic's history is the topic's, not the publisher's.** A node that keeps history
/// records its `max_len` and Stream TTL in the meta hash (`l`, `a`; also when it subscribes:
/// [`RECORD_HISTORY_SCRIPT`]); a node that keeps none (a publish-only backend,
/// [`HistoryConfig::none`]) writes the Stream with the recorded ones. So once a node with
/// history has subscribed to or published on a topic, every publication on it is in its
/// history, whichever node published (before, a node without history consumed an offset
/// and left a hole: a resume across it was told `Recovered` without that publication). The
/// setting outlives a new epoch (it is configuration, not data) and goes with the meta hash.
/// A hole can still happen (a node without history publishing on a topic no node with history
/// has subscribed to or published on, an entry deleted by hand); a history read is complete only if contiguous
/// ([`history_from`](super::history::history_from)), so a hole is reported as a gap.
///
/// In a cluster (`*`), the server that gave the offsets is also recorded by its cluster node id
/// (`n`) and replication id (`i`), so that a topic whose slot was migrated to another primary
/// keeps its epoch and its Stream (see `moved_intact` above) while a failover or a restart
/// still starts a new one.
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
/// cluster the script reads it once for all its bodies (and the node id and replication id
/// only when it records a new giver or checks a migration).
///
/// The message goes out with ARGV[7]: PUBLISH on one server (the redis crate's RESP2 pub/sub
/// connection, `aio::PubSub` in 1.8, has no SSUBSCRIBE, and on one server sharded pub/sub is
/// plain pub/sub anyway; PUBLISH is in every Redis from 5 on), SPUBLISH in a cluster
/// ([`super::redis_cluster`]), which keeps a topic's messages in its keys' shard (the `{hex}`
/// hash tag puts the channel in the same slot).
pub(crate) const PUBLISH_SCRIPT: &str = concat!(
    moved_intact_lua!(),
    r"
local meta = redis.call('hmget', KEYS[1], 'e', 'r', 'l', 'a', 'n', 'i')
local life = ARGV[6]
local cluster = life == '*'
if cluster then
  -- Redis Cluster: the node does not know which server runs the script; it reads it here.
  life = string.match(redis.call('info', 'server'), 'run_id:(%x+)') or ''
end
local function record_giver()
  redis.call('hset', KEYS[1], 'r', life)
  if cluster then
    local repl = string.match(redis.call('info', 'replication'), 'master_replid:(%x+)') or ''
    redis.call('hset', KEYS[1], 'n', redis.call('cluster', 'myid'), 'i', repl)
  end
end
if not meta[1] or (life ~= '' and meta[2] and meta[2] ~= life
    and not (cluster and moved_intact(meta[5], meta[6]))) then
  -- A new epoch: the topic is new (or its meta expired), or this server is not the one that
  -- gave the last offsets (it restarted, or another one was promoted): it may have lost some of
  -- them, which must not be given again under the same epoch. Whatever Stream is left from the
  -- old epoch is meaningless in the new one. The topic's history setting is kept.
  redis.call('del', KEYS[1], KEYS[2])
  redis.call('hset', KEYS[1], 'e', ARGV[2], 'o', 0)
  if meta[3] and meta[4] then
    redis.call('hset', KEYS[1], 'l', meta[3], 'a', meta[4])
  end
  if life ~= '' then
    record_giver()
  end
elseif life ~= '' and meta[2] ~= life then
  -- Written by a version that did not record the server, or moved here intact with its slot:
  -- adopted.
  record_giver()
end
local max_len, stream_ttl = tonumber(ARGV[3]), ARGV[4]
if max_len > 0 then
  if meta[3] ~= ARGV[3] or meta[4] ~= ARGV[4] then
    redis.call('hset', KEYS[1], 'l', ARGV[3], 'a', ARGV[4])
  end
elseif meta[3] and meta[4] then
  -- This node keeps no history, the topic does: as the node that set it.
  max_len, stream_ttl = tonumber(meta[3]) or 0, meta[4]
end
-- The meta outlives the Stream: a node whose own meta lifetime is shorter than the history it
-- writes (one without history, writing the topic's) must not shorten it.
redis.call('pexpire', KEYS[1], math.max(tonumber(ARGV[5]) or 0, tonumber(stream_ttl) or 0))
local epoch = redis.call('hget', KEYS[1], 'e')
local offset = 0
for i = 8, #ARGV do
  offset = redis.call('hincrby', KEYS[1], 'o', 1)
  if max_len > 0 then
    redis.call('xadd', KEYS[2], 'MAXLEN', '~', max_len, offset .. '-0', 'b', ARGV[i])
    redis.call('pexpire', KEYS[2], stream_ttl)
  end
  redis.call(ARGV[7], ARGV[1], '\1' .. offset .. '\n' .. epoch .. '\n' .. ARGV[i])
end
return {offset, epoch}
"
);

/// Records a node's history setting in a topic's meta hash, as the publish script does, when
/// the node starts following the topic: so that a node without history publishing on a topic
/// that only nodes with history subscribe to (a publish-only backend) writes its Stream too.
/// KEYS: meta. ARGV: max_len, Stream TTL in ms, meta TTL in ms (set only if the hash has none:
/// a topic's publications set it).
pub(crate) const RECORD_HISTORY_SCRIPT: &str = r"
local cur = redis.call('hmget', KEYS[1], 'l', 'a')
if cur[1] ~= ARGV[1] or cur[2] ~= ARGV[2] then
  redis.call('hset', KEYS[1], 'l', ARGV[1], 'a', ARGV[2])
end
if redis.call('pttl', KEYS[1]) < 0 then
  redis.call('pexpire', KEYS[1], ARGV[3])
end
return 1
";

/// [`RECORD_HISTORY_SCRIPT`]'s invocation for `topic` (`None`: `history` keeps nothing, nothing
/// to record).
pub(crate) fn record_history(
    history: &HistoryConfig,
    topic: &Topic,
) -> Option<redis::ScriptInvocation<'static>> {
    static SCRIPT: LazyLock<redis::Script> = LazyLock::new(|| redis::Script::new(RECORD_HISTORY_SCRIPT));
    if !has_history(history) {
        return None;
    }
    let mut invocation = SCRIPT.key(meta_key(&topic.to_hex()));
    invocation
        .arg(history.max_len)
        .arg(millis(history.max_age))
        .arg(millis(history.max_age.max(META_TTL_MIN)));
    Some(invocation)
}

/// The publish script's keys and arguments for `batch`, publications of `topic` (see
/// [`PUBLISH_SCRIPT`]): `life` the server's `run_id` (`*`: read by the script), `command`
/// `publish` or `spublish`.
pub(crate) fn script_input(
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
pub(crate) fn has_history(history: &HistoryConfig) -> bool {
    history.max_len > 0 && !history.max_age.is_zero()
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

pub(crate) fn meta_key(hex: &str) -> String {
    format!("sockeye:{{{hex}}}:meta")
}

pub(crate) fn stream_key(hex: &str) -> String {
    format!("sockeye:{{{hex}}}:stream")
}

pub(crate) fn channel(hex: &str) -> String {
    format!("sockeye:{{{hex}}}")
}

/// The topic of a channel name.
fn channel_topic(name: &[u8]) -> Option<Topic> {
    let hex = name.strip_prefix(b"sockeye:{")?.strip_suffix(b"}")?;
    Topic::from_hex(std::str::from_utf8(hex).ok()?).ok()
}

/// The position the publish script returned (`[offset, epoch]`).
/// The `{offset, epoch}` a publish script returns.
pub(crate) fn position_of(v: &Value) -> Option<Position> {
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
pub(crate) fn parse_meta(v: Value) -> Option<(Option<String>, u64, Option<String>)> {
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
pub(super) fn server_life(info: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .filter(|id| !id.is_empty())
}

/// XRANGE's reply as publications.
pub(crate) fn parse_entries(v: Value, topic: &Topic, epoch: &str) -> Option<Vec<Publication>> {
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
pub(crate) fn decode_message(channel: &[u8], message: &[u8]) -> Option<Publication> {
    let topic = channel_topic(channel)?;
    let rest = message.strip_prefix(&[VERSION])?;
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let offset = parse_u64(&rest[..nl])?;
    let rest = &rest[nl + 1..];
    let nl = rest.iter().position(|&b| b == b'\n')?;
    let epoch = String::from_utf8(rest[..nl].to_vec()).ok()?;
    decode_body(topic, epoch, offset, Bytes::copy_from_slice(&rest[nl + 1..]))
}

#[cfg(test)]
mod tests {
    use super::*;

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
