//! The NATS backplane (feature `nats`): subjects for fan-out, JetStream for history.
//!
//! Connect with [`connect`] to `nats://HOST:PORT` (or a cluster: below). Every topic is the subject
//! `sockeye.t.<topic-hex>` ([`Topic::to_hex`]: any topic name is one safe token).
//!
//! # Two modes, chosen at connect
//!
//! **With JetStream** (the server runs with `-js`) and a history ([`HistoryConfig::max_len`] >
//! 0): one stream, `SOCKEYE`, over `sockeye.t.>`, is created (or its limits updated) at connect
//! and after every reconnect. It keeps at most `max_len` publications per topic (per subject),
//! none older than `max_age` (zero: no age limit): that is the recovery window.
//! - Publications are published through JetStream, and [`Backplane::publish`] returns once the
//!   stream acknowledged (stored) them.
//! - Their [`Position`]: the offset is the stream sequence (increasing per topic, but not
//!   contiguous: the stream is shared by every topic); the epoch is the stream's creation time
//!   (which changes when the stream is lost and recreated: a server restarted on an empty
//!   store) and, on a single server, the life of the server that stored the publication
//!   (`<created>.<life>`; below).
//! - Live delivery is an ordered consumer per subscribed topic (filtered to its subject), which
//!   starts at the stream's next sequence when the topic is subscribed, detects gaps itself and
//!   is recreated from the next unseen sequence after a reconnect: nothing stored is skipped.
//! - [`Backplane::history`] reads the topic from a position with a consumer filtered to it,
//!   as many as were pending when the call began (the cost is the number returned). It answers
//!   [`History::Lost`] when the position is of another epoch, or when the publication at that
//!   position is no longer in the stream (dropped by the limits: later ones may be gone too;
//!   conservative, never silently incomplete).
//!
//! **A server's life is part of the epoch.** JetStream may lose the un-synced tail of its
//! file store (a crash with writes not yet on disk; a store restored from an older copy) and
//! keep the stream, and with it its creation time: it then gives the lost sequences to new
//! publications, and a position of the lost tail would name a new publication under the same
//! epoch (a client that kept it and resumed after the stream grew past it again was told its
//! recovery was complete and given the newcomers: a silent miss). So, as the Redis backplane
//! ties its epoch to the Redis server's `run_id`, every publication stored through a single
//! server carries a header, `Sockeye-Life`, naming the life of the server the node is connected
//! to: 16 hex digits of a hash of its `server_id`, which nats-server draws anew at every start.
//! A restart, which is when a tail can be lost, starts a new epoch:
//! - the live subscribers of every node get a [`Delivery::Gap`](crate::Delivery::Gap) at the
//!   first sight of the new life (the hub takes a new epoch seen live as a possible loss), then
//!   every publication of the new life;
//! - [`Backplane::history`] takes as current the life of the server the node is connected to
//!   now. From a position: it must be of that life, and the publication stored at its sequence
//!   must still be that one (same subject, same life in its header), else [`History::Lost`];
//!   a publication of another life after it is [`History::Lost`] too (see "The window"). So a
//!   client resuming from a position given before a restart, lost or not, is told of the gap,
//!   then given every publication of the new life, never one that took a lost sequence as if
//!   it followed its own. (Checking only "a later publication of another life" would have
//!   told a client at a surviving position `Recovered` as long as nothing was published since
//!   the restart, though the restart may have lost what followed it.) From the start (no
//!   position, what the hub reads after a gap): the publications after the topic's last one of
//!   another life. Which publication starts the current life is not indexed: that read goes
//!   through the topic's whole history, at most `max_len` publications, keeping at most
//!   `limit` (a read from a position still reads at most `limit`).
//!
//! The price, as with Redis: a server restart that lost nothing is reported as a gap too
//! (the node cannot tell), and the publications of the previous life stay in the stream but
//! are no longer recoverable (a resume to them is a gap, then the new life). A publication
//! without the header, stored by an older version, keeps the epoch `<created>`: after an
//! upgrade, a resume from a position of the older version is a gap once, and while nodes of
//! both versions publish on a topic its subscribers see a gap at every change of form.
//!
//! **The window.** The header names the life the node's client records for its connection,
//! read after the round trip that proves the connection alive and right before the batch is
//! sent; a node that is not connected publishes nothing (the caller's retry takes it). If the
//! connection dies in between, the client may send the batch after it reconnected, to a
//! restarted server, with the previous life in its header. The node tells (the life its client
//! records differs once the batch is acknowledged; a reconnection that finds the same
//! `server_id`, its connect count alone changing, is the same server process, and the header is
//! right) and logs it; the positions it returns are those of the header's life, as every
//! reader sees them. Readers take such a publication as of an ended life: a live subscriber
//! gets a gap there, a history read that meets it after a position answers [`History::Lost`],
//! one from the start keeps only what follows it, and a resume from its position is a gap
//! (tests/nats.rs stores such publications, and ones without a header, between a node's). What
//! remains: such a publication is not recoverable from history by a reader of the current life
//! (it was delivered live); the current life's publications stored before it are not either (a
//! reader resuming from before it gets a gap, then what follows it); a live subscriber to which
//! it arrives together with later ones may get it after them, or one of them twice, each time
//! after a gap; and if the previous life lost its tail, it may take a sequence that
//! life gave to a publication it lost, so that one position of the ended life names both; a
//! resume from it is a gap all the same, and a node that delivered the lost one live reports a
//! gap at the other (the hub's check of a position given again). Gaps, never a silent miss.
//! The client records a new server's identity when it reconnects, before it sends anything on
//! the new connection: a batch sent there is acknowledged after that, which is what the check
//! relies on.
//!
//! **A stream that went back in a cluster** (no life is written there, below) keeps its epoch.
//! After a reconnect each topic's consumer checks that the last publication it delivered is
//! still at its sequence (same subject, same stored time); if not, it starts again from the
//! first publication stored after that one, so that the publications given the lost sequences
//! again are delivered, and the hub reports the gap (it sees a position it had already
//! received). This relies on the server's clock not going back across the restart. On a single
//! server the same check still picks where the consumer restarts; the new life reports the gap.
//!
//! **Without JetStream** (or without history): core NATS publish/subscribe, at most once.
//! Publications carry no position, [`Backplane::history`] answers `Lost`, and the hub reports a
//! [`Delivery::Gap`](crate::Delivery::Gap) to every subscriber after every outage: what was
//! published meanwhile is gone, and that is said, never hidden.
//!
//! # A NATS cluster
//!
//! List the cluster's servers, `nats://HOST:PORT,HOST:PORT,HOST:PORT`. The connection goes to
//! one of them (the client shuffles the list, and learns the others the cluster announces) and
//! fails over to another when it is lost: an outage as below, short. With JetStream, the stream
//! is replicated on as many servers as are listed, up to 3 (`num_replicas`; an existing stream
//! is updated to it): a publication is acknowledged once a majority stored it, so losing any one
//! of three servers loses nothing acknowledged, and nodes connected to the others see no gap
//! (tests/distributed.rs kills one of three during traffic from three nodes). A node whose
//! connection stays up but whose topic's consumer was on the lost server would wait for the
//! client's heartbeats to notice; instead a topic whose consumer delivered nothing for 3 s
//! (quiet, or failing every pull) checks that the stream holds nothing after what it delivered,
//! and if it does, if JetStream does not answer that twice in a row, or if the consumer ends,
//! every consumer is restored (an [`Event::Lost`], then [`Event::Restored`] once the cluster
//! has elected its new leaders, seconds, and the hub repairs every topic from history). A
//! reconnection is restored and reported the same way whether or not its disconnection was
//! seen (the client drops events when its event queue is full). The epoch is the
//! stream's creation time, which every server of the cluster reports alike. Listing one server
//! of a cluster works too, with a stream of one copy (its server's loss is an outage, and the
//! loss of its store a new epoch).
//!
//! **No server life in a cluster.** When the server the node is connected to is in a cluster
//! (its `INFO` names one), or the stream has more than one copy, publications carry no life:
//! the server a node is connected to is not the one storing (the stream's leader is), it
//! differs between nodes, and it changes at a failover, which loses nothing acknowledged. The
//! guarantee there is the quorum: an acknowledged publication is lost only if a majority of the
//! stream's copies lose it. What is detected: a lost store (the stream recreated: a new
//! epoch), and a stream that went back behind what a node had delivered (a gap on that node,
//! above). What is not: a client resuming from a lost position once the stream has grown past
//! it again is told `Recovered` and given the publications that took those sequences. With
//! three copies that takes a majority losing its tail at once (three servers crashing together,
//! with `sync_interval` writes not yet on disk); a stream of one copy in a cluster (one
//! server of a cluster listed) takes only its server's tail loss.
//!
//! # Outages
//!
//! The client reconnects by itself (sockeye's `Backoff`: 100 ms doubling to 2 s, equal jitter). Losing the server sends one
//! [`Event::Lost`]; once reconnected and every subscription (JetStream: the stream and every
//! consumer) is back, [`Event::Restored`].
//!
//! While disconnected, [`Backplane::publish`] fails at once with [`Error::Backplane`]. Otherwise
//! a publication is preceded by a round trip through the server (to a responder of the
//! backplane's own): a connection that died unnoticed would otherwise buffer the publication and
//! send it after the reconnect, when the call has failed. A publication not acknowledged
//! (JetStream) or written (core) within 2 s in all fails the same way. So a failed publication is
//! not sent later behind the caller's back, but for a connection lost in the instant between that
//! round trip and the write. The cost: one round trip more per publication, or per batch with
//! [`Backplane::publish_many`]: one check, then the whole batch, then its acknowledgements
//! awaited together (2 s for all of it).
//!
//! # Message format
//!
//! The NATS message body is an 18-byte header, then the payload:
//!
//! | bytes  | content                                             |
//! |--------|-----------------------------------------------------|
//! | 0      | format version, `1`                                 |
//! | 1      | kind: `1` text, `2` binary                          |
//! | 2..10  | [`Origin::node`](super::Origin), big-endian `u64`   |
//! | 10..18 | [`Origin::publisher`](super::Origin), big-endian `u64` |
//! | 18..   | the payload                                         |
//!
//! A message that does not decode (another version, a foreign publisher) is skipped with a
//! warning.

mod life;

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::{self, consumer, stream};
use bytes::{BufMut, Bytes, BytesMut};
use futures_util::StreamExt;
use sockeye::DataKind;
use sockeye::backoff::Backoff;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;

use super::api::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, partly_published};
use super::position::{Origin, Position, Publication};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::topic::Topic;

/// The JetStream stream holding every topic's history.
const STREAM: &str = "SOCKEYE";
/// Subjects of topics: this, then the topic's name in hex.
const SUBJECT_PREFIX: &str = "sockeye.t.";
/// How long connecting may take at start.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a publication may wait for its acknowledgement (JetStream) or flush (core), and a
/// JetStream request for its answer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// The client's reconnection backoff: 100 ms doubling to 2 s, each wait drawn in [d/2, d] so
/// that the nodes that lost one server do not all come back at the same instant.
const BACKOFF: Backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
/// How long reading a history may take.
const HISTORY_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a live consumer's pull request lasts: the client asks for a heartbeat every half of
/// it and recreates a consumer that missed two (its server died), so a topic whose consumer was
/// on a lost cluster server resumes within about this long. The cost: per subscribed topic, a
/// pull request this often and a heartbeat twice as often while it is quiet.
const ORDERED_EXPIRES: Duration = Duration::from_secs(4);
/// How long a topic's consumer may deliver nothing (quiet, or yielding errors) before the
/// backplane checks that the stream holds nothing it has not delivered (one request per quiet
/// topic this often). A consumer whose server left a cluster while this node's connection
/// stayed up is otherwise noticed only by the client's heartbeats, which did not recover it
/// within 40 s in tests/distributed.rs.
const STALL_CHECK: Duration = Duration::from_secs(3);
/// Publications fetched from history per pull request.
const HISTORY_BATCH: usize = 500;
/// The message header's length.
const HEADER_LEN: usize = 18;
/// The message format's version.
const VERSION: u8 = 1;

/// The NATS backplane; see the [module documentation](self) for its guarantees.
pub struct Nats {
    shared: Arc<Shared>,
    _supervisor: AbortOnDrop,
    _responder: AbortOnDrop,
}

impl fmt::Debug for Nats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Nats")
            .field("server", &self.shared.server)
            .field("jetstream", &self.shared.js.is_some())
            .finish_non_exhaustive()
    }
}

struct Shared {
    /// `nats://HOST:PORT`, for messages.
    server: String,
    /// The subject of this backplane's own responder, which proves the connection alive.
    ping: String,
    client: async_nats::Client,
    /// `None`: core NATS only.
    js: Option<Js>,
    events: EventSender,
    /// The topics subscribed to, each with the task delivering it.
    topics: Mutex<HashMap<Topic, Follow>>,
    /// A topic's task that found its consumer stalled sends the topic here, and ends; the
    /// supervisor then restores every consumer.
    stalls: mpsc::UnboundedSender<Topic>,
}

struct Js {
    context: jetstream::Context,
    config: stream::Config,
    /// The stream's creation time as last seen (at connect and after each reconnect), for the
    /// positions a publish returns.
    epoch: std::sync::Mutex<Arc<str>>,
    /// The stream's copies as last seen: more than one, and no life is written (a cluster).
    replicas: AtomicUsize,
}

/// One subscribed topic: the task forwarding its messages to the hub.
struct Follow {
    task: Option<JoinHandle<()>>,
    /// JetStream: the next stream sequence not yet delivered, and the creation time of the
    /// stream it belongs to (the first part of every epoch in it).
    next: Arc<AtomicU64>,
    epoch: String,
    /// JetStream: when the stream stored the last publication delivered (Unix nanoseconds):
    /// after a reconnect, the publication at `next - 1` must still be that one, or the stream
    /// went back (it lost its tail) and gives those sequences to new publications.
    stored: Arc<std::sync::Mutex<Option<i128>>>,
}

impl Follow {
    /// Stops the task and waits until it has stopped, so that `next` no longer moves.
    async fn stop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Follow {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Connects to the NATS server at `url` (`nats://HOST:PORT`; the port defaults to 4222), or to
/// one of a cluster's servers (`nats://HOST:PORT,HOST:PORT,…`: see "A NATS cluster" in the
/// [module documentation](self)), and starts the backplane, whose events go to `events`.
///
/// Uses JetStream for history when the server has it and `history.max_len > 0` (creating or
/// updating the stream `SOCKEYE`), core NATS otherwise. Fails with [`Error::InvalidUrl`] for a
/// URL it cannot use and with [`Error::Backplane`] when the server cannot be reached within 5
/// seconds (no retry at start: a wrong address should be told, not waited on).
pub async fn connect(url: &str, history: HistoryConfig, events: EventSender) -> Result<Nats, Error> {
    let addrs = parse_url(url)?;
    let server = format!("nats://{}", addrs.join(","));
    let servers = addrs
        .iter()
        .map(|a| format!("nats://{a}").parse::<async_nats::ServerAddr>())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::InvalidUrl(format!("{url:?}: {e}")))?;
    let (conn_tx, conn_rx) = mpsc::unbounded_channel();
    let (stalls, stalled) = mpsc::unbounded_channel();
    let options = async_nats::ConnectOptions::new()
        .connection_timeout(CONNECT_TIMEOUT)
        .request_timeout(Some(REQUEST_TIMEOUT))
        .reconnect_delay_callback(|attempts| {
            BACKOFF.random_delay(u32::try_from(attempts).unwrap_or(u32::MAX))
        })
        .event_callback(move |event| {
            let conn_tx = conn_tx.clone();
            async move {
                let _ = conn_tx.send(event);
            }
        });
    let client = match tokio::time::timeout(CONNECT_TIMEOUT, options.connect(servers)).await {
        Ok(Ok(client)) => client,
        Ok(Err(e)) => return Err(Error::backplane(format!("{server}: connect"), e)),
        Err(_) => {
            return Err(Error::Backplane {
                what: format!("{server}: connect: no answer within {CONNECT_TIMEOUT:?}"),
                source: None,
            });
        }
    };
    let js = if history.max_len > 0 {
        let mut context = jetstream::new(client.clone());
        context.set_timeout(REQUEST_TIMEOUT);
        let config = stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{SUBJECT_PREFIX}>")],
            max_messages_per_subject: i64::try_from(history.max_len).unwrap_or(i64::MAX),
            max_age: history.max_age,
            storage: stream::StorageType::File,
            discard: stream::DiscardPolicy::Old,
            // One copy per server listed, up to 3 (NATS's advice; a quorum of 2 survives the
            // loss of any one server): listing a cluster's servers replicates the history.
            num_replicas: addrs.len().clamp(1, 3),
            ..Default::default()
        };
        // Creating the stream is the probe: no responders (or a "not enabled" answer) means no
        // JetStream.
        match context.get_or_create_stream(config.clone()).await {
            Ok(_) => {
                let js = Js {
                    context,
                    config,
                    epoch: std::sync::Mutex::new("".into()),
                    replicas: AtomicUsize::new(1),
                };
                js.ensure_stream(&server).await?;
                Some(js)
            }
            Err(e) if jetstream_unavailable(&e) => {
                tracing::info!("{server}: JetStream not available ({e}): core NATS, no history");
                None
            }
            Err(e) => {
                return Err(Error::backplane(
                    format!("{server}: create JetStream stream {STREAM}"),
                    e,
                ));
            }
        }
    } else {
        None
    };
    let ping = format!("_SOCKEYE.ping.{:016x}", rand::random::<u64>());
    let mut pings = client
        .subscribe(ping.clone())
        .await
        .map_err(|e| Error::backplane(format!("{server}: subscribe"), e))?;
    let responder = tokio::spawn({
        let client = client.clone();
        async move {
            while let Some(m) = pings.next().await {
                if let Some(reply) = m.reply {
                    let _ = client.publish(reply, Bytes::new()).await;
                }
            }
        }
    });
    let shared = Arc::new(Shared {
        server,
        ping,
        client,
        js,
        events,
        topics: Mutex::default(),
        stalls,
    });
    let supervisor = tokio::spawn(supervise(Arc::downgrade(&shared), conn_rx, stalled));
    Ok(Nats {
        shared,
        _supervisor: AbortOnDrop(supervisor),
        _responder: AbortOnDrop(responder),
    })
}

/// Whether creating the stream failed for want of JetStream on the server.
fn jetstream_unavailable(e: &jetstream::context::CreateStreamError) -> bool {
    use jetstream::ErrorCode;
    use jetstream::context::CreateStreamErrorKind as Kind;
    match e.kind() {
        Kind::JetStreamUnavailable => true,
        Kind::JetStream(e) => matches!(
            e.error_code(),
            ErrorCode::JETSTREAM_NOT_ENABLED | ErrorCode::JETSTREAM_NOT_ENABLED_FOR_ACCOUNT
        ),
        _ => false,
    }
}

/// `nats://HOST[:PORT][,HOST[:PORT]…]` → each `HOST:PORT` (the servers of one cluster).
pub(crate) fn parse_url(url: &str) -> Result<Vec<String>, Error> {
    let accepted = "expected nats://HOST:PORT, or several servers of one cluster as \
                    nats://HOST:PORT,HOST:PORT,… (e.g. nats://127.0.0.1:4222)";
    super::url::host_list(url, "nats", 4222, accepted)
}

fn subject(topic: &Topic) -> String {
    format!("{SUBJECT_PREFIX}{}", topic.to_hex())
}

/// A stream's creation time, in nanoseconds, hex: the epoch of its publications without a life,
/// the first part of the others'.
fn epoch_of(info: &stream::Info) -> String {
    format!("{:x}", info.created.unix_timestamp_nanos())
}

/// The message body of a publication (see the module documentation).
fn encode(p: &Publication) -> Bytes {
    let mut b = BytesMut::with_capacity(HEADER_LEN + p.payload.len());
    b.put_u8(VERSION);
    b.put_u8(match p.kind {
        DataKind::Text => 1,
        DataKind::Binary => 2,
    });
    b.put_u64(p.origin.node);
    b.put_u64(p.origin.publisher);
    b.put_slice(&p.payload);
    b.freeze()
}

/// The publication in a message body, or why not.
fn decode(topic: &Topic, body: &Bytes, position: Option<Position>) -> Result<Publication, String> {
    if body.len() < HEADER_LEN {
        return Err(format!("{} bytes, shorter than the header", body.len()));
    }
    if body[0] != VERSION {
        return Err(format!("format version {}, expected {VERSION}", body[0]));
    }
    let kind = match body[1] {
        1 => DataKind::Text,
        2 => DataKind::Binary,
        k => return Err(format!("unknown kind {k}")),
    };
    let u64_at = |i: usize| {
        let mut a = [0u8; 8];
        a.copy_from_slice(&body[i..i + 8]);
        u64::from_be_bytes(a)
    };
    Ok(Publication {
        topic: topic.clone(),
        position,
        origin: Origin {
            node: u64_at(2),
            publisher: u64_at(10),
        },
        kind,
        payload: body.slice(HEADER_LEN..),
    })
}

impl Js {
    /// Creates the stream, or updates its limits if they differ; its info.
    async fn ensure_stream(&self, server: &str) -> Result<stream::Info, Error> {
        let mut stream = self
            .context
            .get_or_create_stream(self.config.clone())
            .await
            .map_err(|e| Error::backplane(format!("{server}: create JetStream stream {STREAM}"), e))?;
        let info = stream
            .info()
            .await
            .map_err(|e| Error::backplane(format!("{server}: JetStream stream {STREAM} info"), e))?
            .clone();
        *self
            .epoch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = epoch_of(&info).into();
        self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
        let c = &info.config;
        if c.subjects != self.config.subjects
            || c.max_messages_per_subject != self.config.max_messages_per_subject
            || c.max_age != self.config.max_age
            || c.num_replicas != self.config.num_replicas
        {
            let info = self
                .context
                .update_stream(self.config.clone())
                .await
                .map_err(|e| Error::backplane(format!("{server}: update JetStream stream {STREAM}"), e))?;
            self.replicas.store(info.config.num_replicas, Ordering::Relaxed);
            return Ok(info);
        }
        Ok(info)
    }
}

impl Shared {
    /// The life of the server this node is connected to, which the publications it stores now
    /// name (see [`life`]); `None` in a cluster (the server connected to is not the one
    /// storing, and changes between nodes: the replicas' quorum is the guarantee there) and
    /// while the server is not known.
    fn life(&self, js: &Js) -> Option<String> {
        let info = self.client.server_info();
        let clustered =
            info.cluster.as_deref().is_some_and(|c| !c.is_empty()) || js.replicas.load(Ordering::Relaxed) > 1;
        (!clustered && !info.server_id.is_empty()).then(|| life::of_server(&info.server_id))
    }

    fn failed(
        &self,
        what: impl fmt::Display,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Error {
        Error::backplane(format!("{}: {what}", self.server), e)
    }

    /// Starts delivering `topic`: JetStream from stream sequence `start` of `epoch` (or, with
    /// `after`, the first publication stored after that time, in Unix nanoseconds), core from now.
    async fn follow(
        &self,
        topic: &Topic,
        epoch: String,
        start: u64,
        after: Option<i128>,
    ) -> Result<Follow, Error> {
        let subject = subject(topic);
        let next = Arc::new(AtomicU64::new(if after.is_some() { 0 } else { start }));
        let stored = Arc::new(std::sync::Mutex::new(after));
        let events = self.events.clone();
        let task = match &self.js {
            None => {
                let sub = self
                    .client
                    .subscribe(subject)
                    .await
                    .map_err(|e| self.failed(format_args!("subscribe to {topic}"), e))?;
                // The server has the subscription once it answered a ping sent after it.
                tokio::time::timeout(REQUEST_TIMEOUT, self.client.flush())
                    .await
                    .map_err(|e| self.failed(format_args!("subscribe to {topic}"), e))?
                    .map_err(|e| self.failed(format_args!("subscribe to {topic}"), e))?;
                tokio::spawn(forward_core(topic.clone(), sub, events))
            }
            Some(js) => {
                let deliver_policy = match after {
                    Some(t) => consumer::DeliverPolicy::ByStartTime {
                        start_time: async_nats::datetime::from_nanos(t.saturating_add(1))
                            .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?,
                    },
                    None => consumer::DeliverPolicy::ByStartSequence {
                        start_sequence: start.max(1),
                    },
                };
                let config = consumer::pull::OrderedConfig {
                    filter_subject: subject,
                    deliver_policy,
                    // The client's pull requests last this long and ask the server for an idle
                    // heartbeat every half of it; two missed and the client recreates the
                    // consumer from the last sequence it delivered. Without a bound that is
                    // 30 s and 15 s: a node whose connection stayed up but whose consumer was
                    // on a cluster server that died got nothing on the topic for 30 s or more
                    // (tests/distributed.rs saw no recovery within 40 s).
                    max_expires: ORDERED_EXPIRES,
                    ..Default::default()
                };
                let consumer: consumer::Consumer<consumer::pull::OrderedConfig> = js
                    .context
                    .create_consumer_on_stream(config, STREAM)
                    .await
                    .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?;
                let messages = consumer
                    .messages()
                    .await
                    .map_err(|e| self.failed(format_args!("JetStream consumer for {topic}"), e))?;
                tokio::spawn(forward_js(
                    topic.clone(),
                    messages,
                    (js.context.clone(), self.stalls.clone()),
                    epoch.clone(),
                    Arc::clone(&next),
                    Arc::clone(&stored),
                    events,
                ))
            }
        };
        Ok(Follow {
            task: Some(task),
            next,
            epoch,
            stored,
        })
    }

    /// After a reconnect: the stream again (it may be new: another epoch), then every topic's
    /// consumer from its next unseen sequence (core NATS: the client resubscribed already).
    ///
    /// `done`: the topics an earlier attempt of the same restoration restored, in the epoch it
    /// names, left running; this attempt adds those it restores. A cluster that lost a server
    /// still places some new consumers on it for a while (their creation times out: about half
    /// of them in tests/distributed.rs), so an attempt that restarted every topic failed as long
    /// as any one of them did, and a node could retry for longer than the test's 15 s while
    /// its topics stayed undelivered.
    async fn restore(&self, done: &mut (String, HashSet<Topic>)) -> Result<(), Error> {
        let Some(js) = &self.js else { return Ok(()) };
        let info = js.ensure_stream(&self.server).await?;
        let epoch = epoch_of(&info);
        if done.0 != epoch {
            *done = (epoch.clone(), HashSet::new());
        }
        let mut topics = self.topics.lock().await;
        // Every topic is tried, each failure leaving the others restored; the first error ends
        // the attempt.
        let mut failed = None;
        for (topic, follow) in topics.iter_mut() {
            if done.1.contains(topic) {
                continue;
            }
            follow.stop().await;
            match self.restore_topic(js, &info, &epoch, topic, follow).await {
                Ok(()) => {
                    done.1.insert(topic.clone());
                }
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        failed.map_or(Ok(()), Err)
    }

    /// One topic's consumer again (its task stopped), from its next unseen sequence in `epoch`.
    async fn restore_topic(
        &self,
        js: &Js,
        info: &stream::Info,
        epoch: &str,
        topic: &Topic,
        follow: &mut Follow,
    ) -> Result<(), Error> {
        let (start, after) = if follow.epoch == epoch {
            let next = follow.next.load(Ordering::Acquire);
            let stored = *follow
                .stored
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if self.went_back(js, topic, info, next, stored).await? {
                // The stream lost its tail and gives those sequences again: what it stored
                // after the last publication delivered is new, whatever its sequence (the
                // hub reports the gap when it sees a position again).
                tracing::warn!(
                    "NATS: stream {STREAM} went back (it had given sequence {}, now stands at {}): \
                     it lost publications on {topic}",
                    next.saturating_sub(1),
                    info.state.last_sequence
                );
                match stored {
                    Some(t) => (0, Some(t)),
                    None => (info.state.last_sequence + 1, None),
                }
            } else {
                (next, None)
            }
        } else {
            // The stream was lost: everything in the new one is new.
            (1, None)
        };
        *follow = self.follow(topic, epoch.to_owned(), start, after).await?;
        Ok(())
    }

    /// Whether the stream went back behind what `topic` delivered: the last publication
    /// delivered (sequence `next - 1`, stored at `stored`) is beyond the stream's end, or that
    /// sequence now holds another publication. (One gone from a stream that still reaches past
    /// it was dropped by the limits: not a rollback.)
    async fn went_back(
        &self,
        js: &Js,
        topic: &Topic,
        info: &stream::Info,
        next: u64,
        stored: Option<i128>,
    ) -> Result<bool, Error> {
        let Some(seq) = next.checked_sub(1).filter(|s| *s >= 1) else {
            return Ok(false);
        };
        if seq > info.state.last_sequence {
            // Past the end read before this topic's consumer stopped, which may have delivered
            // newer publications since: ask again, now that it is stopped, before calling it a
            // rollback (a false one restarts the consumer by time).
            let mut stream = js
                .context
                .get_stream(STREAM)
                .await
                .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
            let last = stream
                .info()
                .await
                .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?
                .state
                .last_sequence;
            if seq > last {
                return Ok(true);
            }
        }
        let Some(stored) = stored else { return Ok(false) };
        let stream = js
            .context
            .get_stream(STREAM)
            .await
            .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
        match stream.get_raw_message(seq).await {
            Ok(m) => Ok(m.subject.as_str() != subject(topic) || m.time.unix_timestamp_nanos() != stored),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(false),
            Err(e) => Err(self.failed(format_args!("{topic}: publication {seq}"), e)),
        }
    }

    /// See [`Backplane::publish_many`] for [`Nats`].
    async fn publish_many(&self, batch: Vec<Publication>) -> Result<Vec<Position>, Error> {
        let n = batch.len();
        let Some(first) = batch.first() else {
            return Ok(Vec::new());
        };
        let what = if n == 1 {
            format!("publish on {}", first.topic)
        } else if batch.iter().all(|p| p.topic == first.topic) {
            format!("publish {n} publications on {}", first.topic)
        } else {
            format!("publish {n} publications")
        };
        if self.client.connection_state() != State::Connected {
            return Err(Error::Backplane {
                what: format!("{}: {what}: not connected (reconnecting)", self.server),
                source: None,
            });
        }
        let max = self.client.server_info().max_payload;
        let mut bodies = Vec::with_capacity(n);
        for p in &batch {
            let body = encode(p);
            if max > 0 && body.len() > max {
                return Err(Error::Backplane {
                    what: format!(
                        "{}: publish on {}: {} bytes with the header, over the server's max_payload of {max}",
                        self.server,
                        p.topic,
                        body.len()
                    ),
                    source: None,
                });
            }
            bodies.push((subject(&p.topic), body));
        }
        drop(batch);
        // How far the batch got: handed to the client (`sent`), acknowledged (`published`).
        let mut sent = 0;
        let mut published = 0;
        let run = async {
            // A round trip through the server first, once for the batch: a connection that died
            // before the client noticed would otherwise take the batch into its buffer and send
            // it after the reconnect, when this call has long failed.
            self.client
                .request(self.ping.clone(), Bytes::new())
                .await
                .map_err(|e| self.failed(format_args!("{what}: server check"), e))?;
            match &self.js {
                Some(js) => {
                    // The life of the server, read last before sending (after the check above):
                    // the batch names it. See "The window" in the module documentation.
                    let connects = || self.client.statistics().connects.load(Ordering::Relaxed);
                    let connects_before = connects();
                    let life = self.life(js);
                    let headers = life.as_deref().map(|l| {
                        let mut h = async_nats::HeaderMap::new();
                        h.insert(life::HEADER, l);
                        h
                    });
                    let mut acks = Vec::with_capacity(n);
                    for (subject, body) in bodies {
                        let ack = match &headers {
                            Some(h) => js.context.publish_with_headers(subject, h.clone(), body).await,
                            None => js.context.publish(subject, body).await,
                        }
                        .map_err(|e| self.failed(&what, e))?;
                        sent += 1;
                        acks.push(ack);
                    }
                    // In order: the first one not acknowledged ends what is known published.
                    let mut positions = Vec::with_capacity(n);
                    for ack in acks {
                        let ack = ack.await.map_err(|e| self.failed(&what, e))?;
                        published += 1;
                        positions.push(ack.sequence);
                    }
                    if self.life(js) != life {
                        // The client reconnected meanwhile to another life of the server (a
                        // restart: a new `server_id`), and may have sent the batch there, with
                        // the previous life in its header. Its positions are still those of the
                        // life in its header (what every reader sees), which readers no longer
                        // take as current: a live subscriber gets a gap there, a history read
                        // that meets them is `Lost`, a resume from them is a gap: nothing is
                        // silent.
                        tracing::warn!(
                            "{}: {what}: the server restarted while publishing; the publications \
                             may name its previous life (gaps for their readers, nothing silent)",
                            self.server
                        );
                    } else if connects() != connects_before {
                        // Reconnected to the same life (same `server_id`: the same process):
                        // the header names the server that stored the batch.
                        tracing::debug!(
                            "{}: {what}: reconnected to the same server while publishing",
                            self.server
                        );
                    }
                    let created = js
                        .epoch
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .clone();
                    let epoch = life::epoch(&created, life.as_deref());
                    Ok(positions
                        .into_iter()
                        .map(|offset| Position {
                            epoch: epoch.clone(),
                            offset,
                        })
                        .collect())
                }
                None => {
                    for (subject, body) in bodies {
                        self.client
                            .publish(subject, body)
                            .await
                            .map_err(|e| self.failed(&what, e))?;
                        sent += 1;
                    }
                    self.client.flush().await.map_err(|e| self.failed(&what, e))?;
                    published = sent;
                    // Core NATS gives no positions.
                    Ok(Vec::new())
                }
            }
        };
        let result = match tokio::time::timeout(REQUEST_TIMEOUT, run).await {
            Ok(r) => r,
            Err(_) => Err(Error::Backplane {
                what: format!("{}: {what}: no answer within {REQUEST_TIMEOUT:?}", self.server),
                source: None,
            }),
        };
        result.map_err(|e| partly_published(published, sent, e))
    }

    /// See [`Backplane::history`]; the epoch rules are in "A server's life is part of the
    /// epoch" in the module documentation.
    async fn history_js(
        &self,
        js: &Js,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> Result<History, Error> {
        let subject = subject(topic);
        let stream = js
            .context
            .get_stream(STREAM)
            .await
            .map_err(|e| self.failed(format_args!("JetStream stream {STREAM} info"), e))?;
        let info = stream.cached_info().clone();
        let created = epoch_of(&info);
        // Read once the server answered: the client records a new server's identity before it
        // sends anything on the new connection.
        let current = self.life(js);
        let current = current.as_deref();
        // The topic's newest publication, and whether it is of the current epoch.
        let newest = match stream.get_last_raw_message_by_subject(&subject).await {
            Ok(m) => Some((m.sequence, life::of_message(Some(&m.headers)) == current)),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => None,
            Err(e) => return Err(self.failed(format_args!("last publication of {topic}"), e)),
        };
        // `None`: nothing published in the current epoch (the newest is of an earlier life).
        let latest = newest.filter(|(_, ours)| *ours).map(|(offset, _)| Position {
            epoch: life::epoch(&created, current),
            offset,
        });
        let lost = || {
            Ok(History::Lost {
                latest: latest.clone(),
            })
        };
        let start = match since {
            None => 1,
            Some(p) => {
                // Of this stream and of the current life (a position of an earlier life may
                // name a publication that life lost with its tail, or be followed by some it
                // lost), still kept (not dropped by the limits, not given to another
                // publication by a stream that went back).
                let (p_created, p_life) = life::split(&p.epoch);
                if p_created != created
                    || p_life != current
                    || p.offset > info.state.last_sequence
                    || !self.still_kept(&stream, &subject, p, topic).await?
                {
                    return lost();
                }
                // A publication of another life after it: the batch of a publisher that
                // reconnected meanwhile (see "The window"): a gap rather than one skipped.
                if newest.is_some_and(|(seq, ours)| seq > p.offset && !ours) {
                    return lost();
                }
                p.offset + 1
            }
        };
        if limit == 0 || latest.as_ref().is_none_or(|l| l.offset < start) {
            return Ok(History::Complete(Vec::new()));
        }
        let consumer: consumer::PullConsumer = stream
            .create_consumer(consumer::pull::Config {
                filter_subject: subject.clone(),
                deliver_policy: consumer::DeliverPolicy::ByStartSequence {
                    start_sequence: start,
                },
                ack_policy: consumer::AckPolicy::None,
                inactive_threshold: Duration::from_secs(30),
                memory_storage: true,
                ..Default::default()
            })
            .await
            .map_err(|e| self.failed(format_args!("JetStream history consumer for {topic}"), e))?;
        let pending = usize::try_from(consumer.cached_info().num_pending).unwrap_or(usize::MAX);
        // From `since`: at most `limit`. From the start: the current epoch's first publication
        // is known only once every earlier one was read (lives are not indexed): the topic's
        // whole history, at most `max_len` publications (the stream's limit per topic).
        let want = if since.is_some() {
            pending.min(limit)
        } else {
            pending
        };
        let mut kept = Kept {
            epochs: life::Epochs::new(created),
            current,
            limit,
            publications: Vec::with_capacity(want.min(limit)),
            foreign: false,
        };
        let read = tokio::time::timeout(
            HISTORY_TIMEOUT,
            self.read_history(&consumer, topic, want, &mut kept),
        )
        .await;
        let _ = stream.delete_consumer(&consumer.cached_info().name).await;
        match read {
            Ok(r) => r?,
            Err(_) => {
                return Err(Error::Backplane {
                    what: format!("{}: reading the history of {topic}: timed out", self.server),
                    source: None,
                });
            }
        }
        if let Some(p) = since {
            // Limits drop a topic's oldest publications first: if the one at `since` is still
            // there, none after it was dropped before being read.
            if kept.foreign || !self.still_kept(&stream, &subject, p, topic).await? {
                return lost();
            }
        }
        Ok(History::Complete(kept.publications))
    }

    /// Whether the publication at `at` is still in the stream, on `subject`, of the life `at`
    /// names.
    async fn still_kept(
        &self,
        stream: &stream::Stream,
        subject: &str,
        at: &Position,
        topic: &Topic,
    ) -> Result<bool, Error> {
        match stream.get_raw_message(at.offset).await {
            Ok(m) => Ok(m.subject.as_str() == subject
                && life::of_message(Some(&m.headers)) == life::split(&at.epoch).1),
            Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Ok(false),
            Err(e) => Err(self.failed(format_args!("history of {topic}: publication {}", at.offset), e)),
        }
    }

    /// `want` messages from the history consumer, into `kept`.
    async fn read_history(
        &self,
        consumer: &consumer::PullConsumer,
        topic: &Topic,
        want: usize,
        kept: &mut Kept<'_>,
    ) -> Result<(), Error> {
        let mut seen = 0;
        while seen < want {
            let n = (want - seen).min(HISTORY_BATCH);
            let mut batch = consumer
                .batch()
                .max_messages(n)
                .expires(Duration::from_secs(5))
                .messages()
                .await
                .map_err(|e| self.failed(format_args!("history of {topic}"), e))?;
            let mut got = 0;
            while let Some(m) = batch.next().await {
                let m = m.map_err(|e| self.failed(format_args!("history of {topic}"), e))?;
                let seq = m
                    .info()
                    .map_err(|e| self.failed(format_args!("history of {topic}: message info"), e))?
                    .stream_sequence;
                got += 1;
                let life = life::of_message(m.message.headers.as_ref());
                if !kept.of_current(life) {
                    continue;
                }
                let position = Position {
                    epoch: kept.epochs.of(life),
                    offset: seq,
                };
                match decode(topic, &m.message.payload, Some(position)) {
                    Ok(p) => kept.push(p),
                    Err(why) => {
                        tracing::warn!("{}: skipped publication {seq} on {topic}: {why}", self.server)
                    }
                }
            }
            if got == 0 {
                return Err(Error::Backplane {
                    what: format!(
                        "{}: history of {topic}: {} of {want} publications read",
                        self.server, seen
                    ),
                    source: None,
                });
            }
            seen += got;
        }
        Ok(())
    }
}

/// What a history read keeps: the first `limit` publications of the current life after the
/// last publication of another (which sets `foreign`).
struct Kept<'a> {
    epochs: life::Epochs,
    current: Option<&'a str>,
    limit: usize,
    publications: Vec<Publication>,
    foreign: bool,
}

impl Kept<'_> {
    /// Whether a publication of `life` is of the current epoch; one that is not ends the run
    /// kept so far.
    fn of_current(&mut self, life: Option<&str>) -> bool {
        if life == self.current {
            return true;
        }
        self.foreign = true;
        self.publications.clear();
        false
    }

    fn push(&mut self, p: Publication) {
        if self.publications.len() < self.limit {
            self.publications.push(p);
        }
    }
}

/// Forwards a core subscription's messages to the hub.
async fn forward_core(topic: Topic, mut sub: async_nats::Subscriber, events: EventSender) {
    while let Some(m) = sub.next().await {
        match decode(&topic, &m.payload, None) {
            Ok(p) => {
                if events.send(Event::Publication(p)).await.is_err() {
                    return;
                }
            }
            Err(why) => tracing::warn!("NATS: skipped a message on {topic}: {why}"),
        }
    }
}

/// Forwards an ordered consumer's messages to the hub, each once (`next` skips what a recreated
/// consumer delivers again).
///
/// A consumer that has delivered nothing new for [`STALL_CHECK`] is checked against the stream
/// whether it was silent or not: errors and publications delivered again do not put the check
/// off (waiting for 3 s of silence never checked a consumer yielding either more often). One
/// that ends, that the check finds behind the stream, or about which JetStream does not answer
/// twice in a row, is handed to the supervisor, which reports [`Event::Lost`] and restores
/// every consumer: no path leaves a topic undelivered without a `Lost` and the hub's repair.
async fn forward_js(
    topic: Topic,
    mut messages: consumer::pull::Ordered,
    (context, stalls): (jetstream::Context, mpsc::UnboundedSender<Topic>),
    created: String,
    next: Arc<AtomicU64>,
    stored: Arc<std::sync::Mutex<Option<i128>>>,
    events: EventSender,
) {
    let mut epochs = life::Epochs::new(created);
    // When to check the stream unless a publication arrives first.
    let mut check_at = tokio::time::Instant::now() + STALL_CHECK;
    // Checks in a row that JetStream did not answer.
    let mut unanswered = 0;
    loop {
        let m = match tokio::time::timeout_at(check_at, messages.next()).await {
            Ok(Some(Ok(m))) => Some(m),
            Ok(Some(Err(e))) => {
                tracing::debug!("NATS: consumer of {topic}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                None
            }
            Ok(None) => {
                tracing::warn!("NATS: the consumer of {topic} ended: restarting the consumers");
                let _ = stalls.send(topic);
                return;
            }
            Err(_) => None,
        };
        let Some(m) = m else {
            if tokio::time::Instant::now() < check_at {
                continue;
            }
            let verdict = stalled(&context, &topic, next.load(Ordering::Acquire)).await;
            unanswered = if verdict.is_none() { unanswered + 1 } else { 0 };
            // Unknown twice in a row (JetStream does not answer for 6 s while the connection is
            // up): restored too, rather than trusted to be fine.
            if verdict == Some(true) || unanswered >= 2 {
                tracing::warn!(
                    "NATS: the consumer of {topic} delivers nothing while the stream holds \
                     publications after {} (or does not answer): restarting the consumers (a \
                     cluster server lost?)",
                    next.load(Ordering::Acquire).saturating_sub(1)
                );
                let _ = stalls.send(topic);
                return;
            }
            check_at = tokio::time::Instant::now() + STALL_CHECK;
            continue;
        };
        let (seq, time) = match m.info() {
            Ok(info) => (info.stream_sequence, info.published.unix_timestamp_nanos()),
            Err(e) => {
                tracing::warn!("NATS: skipped a message on {topic}: {e}");
                continue;
            }
        };
        if seq < next.load(Ordering::Acquire) {
            continue;
        }
        // Each publication with the epoch of the life it names: the hub sees a new life as a new
        // epoch, reports the gap and reads the new one from its start.
        let position = Position {
            epoch: epochs.of(life::of_message(m.message.headers.as_ref())),
            offset: seq,
        };
        match decode(&topic, &m.message.payload, Some(position)) {
            Ok(p) => {
                if events.send(Event::Publication(p)).await.is_err() {
                    return;
                }
            }
            Err(why) => tracing::warn!("NATS: skipped publication {seq} on {topic}: {why}"),
        }
        *stored.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(time);
        next.store(seq + 1, Ordering::Release);
        check_at = tokio::time::Instant::now() + STALL_CHECK;
    }
}

/// Whether the stream holds a publication on `topic` at or after `next`, which its consumer has
/// not delivered for [`STALL_CHECK`]; `None`: JetStream did not answer.
async fn stalled(context: &jetstream::Context, topic: &Topic, next: u64) -> Option<bool> {
    let stream = context.get_stream(STREAM).await.ok()?;
    match stream.get_last_raw_message_by_subject(&subject(topic)).await {
        Ok(m) => Some(m.sequence >= next),
        Err(e) if e.kind() == stream::LastRawMessageErrorKind::NoMessageFound => Some(false),
        Err(_) => None,
    }
}

/// Turns the client's connection events into [`Event::Lost`] and [`Event::Restored`], and
/// restores the consumers when one stalled (its server left the cluster while this node's
/// connection, to another server, stayed up).
async fn supervise(
    shared: Weak<Shared>,
    mut conn: mpsc::UnboundedReceiver<async_nats::Event>,
    mut stalls: mpsc::UnboundedReceiver<Topic>,
) {
    let mut lost = false;
    loop {
        let event = tokio::select! {
            event = conn.recv() => match event {
                Some(event) => event,
                None => return,
            },
            Some(topic) = stalls.recv() => {
                let Some(s) = shared.upgrade() else { return };
                if !lost {
                    lost = true;
                    let reason = format!("{}: the consumer of {topic} stalled; restoring", s.server);
                    if s.events.send(Event::Lost { reason }).await.is_err() {
                        return;
                    }
                }
                // Restored as after a reconnection.
                async_nats::Event::Connected
            }
        };
        let Some(s) = shared.upgrade() else { return };
        match event {
            async_nats::Event::Disconnected => {
                if !lost {
                    lost = true;
                    let reason = format!("disconnected from {}; reconnecting", s.server);
                    if s.events.send(Event::Lost { reason }).await.is_err() {
                        return;
                    }
                }
            }
            async_nats::Event::Connected => {
                // The client drops events its channel cannot take (it `try_send`s them), so a
                // reconnection may come without its disconnection: restored all the same, and
                // reported, so that the hub repairs every topic from its last position.
                // The first connection's own event (it may come late, after topics were
                // subscribed) is no reconnection: nothing was lost (before: a needless gap on
                // core NATS under load).
                let reconnected = s
                    .client
                    .statistics()
                    .connects
                    .load(std::sync::atomic::Ordering::Relaxed)
                    > 1;
                if !lost && reconnected && !s.topics.lock().await.is_empty() {
                    lost = true;
                    let reason = format!("reconnected to {}; restoring", s.server);
                    if s.events.send(Event::Lost { reason }).await.is_err() {
                        return;
                    }
                }
                if !lost {
                    continue;
                }
                // Retried while connected; a new disconnection ends this and the next connection
                // tries again.
                let mut restored = false;
                let mut done = (String::new(), HashSet::new());
                while s.client.connection_state() == State::Connected {
                    match s.restore(&mut done).await {
                        Ok(()) => {
                            restored = true;
                            break;
                        }
                        Err(e) => {
                            tracing::warn!("restoring the NATS subscriptions: {e}");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                        }
                    }
                }
                if restored {
                    lost = false;
                    if s.events.send(Event::Restored).await.is_err() {
                        return;
                    }
                }
            }
            other => tracing::debug!("{}: {other}", s.server),
        }
    }
}

impl Backplane for Nats {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: self.shared.js.is_some(),
            contiguous_offsets: false,
        }
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async move {
            // The batch's error for one publication is the same error (sent or not).
            self.shared
                .publish_many(vec![publication])
                .await
                .map(|positions| positions.into_iter().next())
                .map_err(|e| match e {
                    Error::PartlyPublished { source, .. } => *source,
                    e => e,
                })
        })
    }

    /// One server check (a round trip to the backplane's own responder) for the whole batch,
    /// then every publication without waiting, then (JetStream) every acknowledgement, awaited
    /// in order; core NATS: one flush. The request timeout (2 s) for the whole of it. A batch refused
    /// before anything was sent (not connected, the server check failed, a publication over the
    /// server's `max_payload`) fails with the plain [`Error::Backplane`]; later failures with
    /// [`Error::PartlyPublished`]: with JetStream, the publications acknowledged before the
    /// first that was not are known to be published.
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(self.shared.publish_many(publications))
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            let s = &self.shared;
            let mut topics = s.topics.lock().await;
            if topics.contains_key(&topic) {
                return Ok(());
            }
            let (epoch, start) = match &s.js {
                None => (String::new(), 0),
                Some(js) => {
                    let info = js.ensure_stream(&s.server).await?;
                    (epoch_of(&info), info.state.last_sequence + 1)
                }
            };
            let follow = s.follow(&topic, epoch, start, None).await?;
            topics.insert(topic, follow);
            Ok(())
        })
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            let removed = self.shared.topics.lock().await.remove(&topic);
            if let Some(mut follow) = removed {
                follow.stop().await;
            }
            Ok(())
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
        Box::pin(async move {
            let s = &self.shared;
            match &s.js {
                None => Ok(History::Lost { latest: None }),
                Some(js) => s.history_js(js, &topic, since.as_ref(), limit).await,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let one = |a: &str| Some(vec![a.to_owned()]);
        assert_eq!(parse_url("nats://127.0.0.1:4222").ok(), one("127.0.0.1:4222"));
        assert_eq!(parse_url("nats://localhost").ok(), one("localhost:4222"));
        assert_eq!(parse_url("nats://[::1]:5000/").ok(), one("[::1]:5000"));
        assert_eq!(
            parse_url("nats://a:1,b,[::1]:3").ok(),
            Some(vec!["a:1".into(), "b:4222".into(), "[::1]:3".into()])
        );
        for bad in [
            "redis://x:1",
            "nats://",
            "nats://:4222",
            "nats://h:0",
            "nats://h:99999",
            "nats://h:x",
            "nats://h:1/path",
            "nats://u@h:1",
            "127.0.0.1:4222",
            "nats://::1:4222",
            "nats://a:1,",
            "nats://a:1,,b:2",
            "nats://a:1,b:x",
        ] {
            assert!(matches!(parse_url(bad), Err(Error::InvalidUrl(_))), "{bad}");
        }
    }

    #[test]
    fn body_round_trips_and_bad_bodies_are_refused() {
        let topic = Topic::new("a.b").unwrap_or_else(|e| panic!("{e}"));
        let p = Publication {
            topic: topic.clone(),
            position: None,
            origin: Origin {
                node: 7,
                publisher: 9,
            },
            kind: DataKind::Text,
            payload: Bytes::from_static(b"hi"),
        };
        let body = encode(&p);
        assert_eq!(body.len(), HEADER_LEN + 2);
        assert_eq!(decode(&topic, &body, None).ok(), Some(p));
        assert!(decode(&topic, &Bytes::from_static(b"short"), None).is_err());
        let mut v = body.to_vec();
        v[0] = 2;
        assert!(decode(&topic, &Bytes::from(v.clone()), None).is_err());
        v[0] = 1;
        v[1] = 9;
        assert!(decode(&topic, &Bytes::from(v), None).is_err());
    }
}
