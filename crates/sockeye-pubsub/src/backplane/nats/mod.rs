//! The NATS backplane (feature `nats`): subjects for fan-out, JetStream for history.
//!
//! Connect with [`connect`] to `nats://HOST:PORT` (or a cluster: below). Every topic is the subject
//! `sockeye.t.<topic-hex>` ([`Topic::to_hex`]: any topic name is one safe token).
//!
//! # Two modes, chosen at connect
//!
//! **With JetStream** (the server runs with `-js`) and a history ([`HistoryConfig::max_len`] >
//! 0): one stream, `SOCKEYE`, over `sockeye.t.>`, is created (or its limits raised) at connect
//! and after every reconnect. It keeps at most `max_len` publications per topic (per subject),
//! none older than `max_age` (zero: no age limit): that is the recovery window. In a cluster
//! it is stored on [`copies`](HistoryConfig::copies) servers ("A NATS cluster").
//! - Publications are published through JetStream, and [`Backplane::publish`] returns once the
//!   stream acknowledged (stored) them.
//! - Their [`Position`]: the offset is the stream sequence (increasing per topic, but not
//!   contiguous: the stream is shared by every topic); the epoch is the stream's creation time
//!   (which changes when the stream is lost and recreated: a server restarted on an empty
//!   store) and, on a single server, the life of the server that stored the publication
//!   (`<created>.<life>`; below).
//! - Live delivery is an ordered consumer per subscribed topic (filtered to its subject), which
//!   starts at the stream's next sequence when the topic is subscribed, detects gaps itself and
//!   is recreated from the next unseen sequence after a reconnect: nothing the stream still
//!   holds is skipped. What its limits dropped before the node delivered it (the node cut off,
//!   or behind, for longer than the topic's `max_len` publications or its `max_age`) a
//!   consumer skips without a sign; so whenever such a drop was possible (a consumer
//!   recreated, the topic near its limit as a publication was sent, the last delivery nearly
//!   `max_age` old) the last publication delivered is checked still in the stream before the
//!   next is handed on, and if it is gone the hub repairs the topic from history or reports
//!   the gap first (issue 39's checker found the skip: a burst of 12,000 missed in silence).
//! - [`Backplane::history`] reads the topic from a position with a consumer filtered to it,
//!   as many as were pending when the call began (the cost is the number returned). It answers
//!   [`History::Lost`] when the position is of another epoch, or when the publication at that
//!   position is no longer in the stream (dropped by the limits: later ones may be gone too;
//!   conservative, never silently incomplete). A read from the start has no such anchor: if
//!   the first publications it returns were dropped while it went on (the topic publishing
//!   faster than it is read), it may have skipped some after them, so it answers from the
//!   oldest one still kept (found by a binary search), which none after it was dropped before.
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
//!   `limit` (a read from a position still reads at most `limit`). A read is several requests:
//!   one during which the client reconnected (maybe to the next life) is read again, up to 3
//!   times, then fails, so that no answer mixes two lives.
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
//! (only a node still in the previous life delivers it, live); the current life's publications stored before it are not either (a
//! reader resuming from before it gets a gap, then what follows it); a node that has moved into
//! the new life (its repair's gap) drops it live, covered by that gap, and a subscriber that
//! resumed into the new life does not get it either (the hub: never under an epoch it left);
//! a node still in the previous life delivers it live before its gap; and if the previous life
//! lost its tail, it may take a sequence that life gave to a publication it lost, so that one position of the ended life names both; a
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
//! A core publish is acknowledged after a round trip through the server on the connection it
//! went out on; a connection lost and made again meanwhile fails it (what the old one held is
//! gone, and the client sends the rest on the new one): the caller hears that it may or may
//! not have been published, never that it was.
//! Publications carry no position, [`Backplane::history`] answers `Lost`, and the hub reports a
//! [`Delivery::Gap`](crate::Delivery::Gap) to every subscriber after every outage: what was
//! published meanwhile is gone, and that is said, never hidden. A topic's history is the
//! topic's, whichever node published: where nodes with history keep the `SOCKEYE` stream, it
//! stores the core publications of a node without history too (its subjects are every
//! topic's), so on a single server such a node names the server's life in the same header,
//! and its publications are of the current epoch for the nodes with history (before, each was
//! a gap to them, and missing from a resume across it).
//!
//! **A slow node.** Core NATS: each topic's task takes what the client receives as fast as it
//! comes and hands it to the hub without waiting; what the hub's event queue cannot take is
//! dropped and the topic reported ([`Event::Missed`], ahead of anything more of it), so the
//! gap sits where the loss is in the topic's order (as on Redis). Behind that, the client holds
//! at most 65,536 messages per subscription, drops what does not fit and only emits a
//! `SlowConsumer` event: should a task fall that far behind, the loss is reported as an outage
//! is ([`Event::Lost`], then [`Event::Restored`]: a gap on every topic, the dropped
//! subscription being unknown by name), once per burst; that gap may reach a subscriber before
//! publications received ahead of the loss. With JetStream the topics' ordered consumers notice the hole in their consumer sequence and
//! recreate themselves from the last publication delivered: nothing is skipped (what the
//! limits dropped meanwhile is checked for, above). Not covered: the client's own event queue
//! (128) dropping the event when full of others.
//!
//! **The server's version.** nats-server 2.10 or later. 2.9's JetStream consumers were seen to
//! skip a topic's publications still in the stream (issue 39's checker, on Debian 12's 2.9.10:
//! 25 publications well inside the topic's limit skipped by two nodes' consumers at once, once
//! in about thirty runs of a burst); a skip like that looks like another topic's publications
//! in between, so no check short of a request per delivery sees it. A node connecting to an
//! older server says so in a warning; the project's tests install 2.10 where the system's is
//! older (`scripts/install-backplanes.sh`).
//!
//! **One stream, many nodes.** The stream is shared by every node, so a node never lowers it:
//! at connect, after a reconnect and on a new topic, each of its limits (publications per topic,
//! age, copies) becomes the larger of the stream's and the node's. A node asking for more raises
//! the stream (and logs it); a node whose own are lower keeps the stream's and says so once, in
//! a warning naming both values and the command that would lower the stream to its own
//! (`nats stream edit SOCKEYE --replicas N`, with `--max-msgs-per-subject N` and `--max-age D`
//! for the window). Before, nodes configured differently, or listing a cluster's servers
//! differently, flipped the stream between their settings: one cut the others' history, and a
//! stream brought from 3 copies to 1 lost its quorum and wrote no server life. Lowering is an
//! operator's act.
//!
//! **The copies are configuration**: [`HistoryConfig::copies`] (`ws pubsub_server
//! --history-copies`), 1 to 5 (JetStream's limit; another value is refused at connect with
//! [`Error::InvalidConfig`]). Unset, a node takes one copy per server its URL lists, up to 3:
//! a default, with which nodes listing a cluster's servers differently still ask for different
//! copies (the stream keeps the most, and the others warn), so give every node of a cluster the
//! same value. It is a history setting rather than a part of the URL (`?copies=3`): the URL
//! names only the servers this node may connect to, as every backplane URL does, while the
//! copies, like the stream's other limits ([`HistoryConfig::max_len`], `max_age`), belong to the
//! history every node shares.
//!
//! **Complete histories.** Offsets are stream sequences, not contiguous per topic, so a hole
//! cannot be seen from the offsets as on Redis. A history from a position is complete because
//! JetStream drops a topic's publications oldest first (the limits), checked by the publication
//! at the position still being there after the read. Not detected: a publication deleted by
//! hand from the middle of a topic's history (`nats stream rmm`).
//!
//! # A NATS cluster
//!
//! List the cluster's servers, `nats://HOST:PORT,HOST:PORT,HOST:PORT`. The connection goes to one
//! of them (the client shuffles the list, and learns the others the cluster announces) and fails
//! over to another when it is lost: an outage as below, short. With JetStream, the stream is
//! replicated on [`HistoryConfig::copies`] servers (`num_replicas`; by default as many as are
//! listed, up to 3; an existing stream with fewer is raised to it, one with more is kept: see "One
//! stream, many nodes"): a publication is acknowledged once a majority stored it, so with 3 copies
//! losing any one of three servers loses nothing acknowledged, and nodes connected to the others
//! see no gap (tests/distributed.rs kills one of three during traffic from three nodes). A node
//! whose connection stays up but whose topic's consumer was on the lost server would wait for the
//! client's heartbeats to notice; instead a topic whose consumer delivered nothing for 3 s (quiet,
//! or failing every pull) checks that the stream holds nothing after what it delivered, and if it
//! does, if JetStream does not answer that twice in a row, or if the consumer ends, every consumer
//! is restored (an [`Event::Lost`], then [`Event::Restored`] once the cluster has elected its new
//! leaders, seconds, and the hub repairs every topic from history). A reconnection is restored and
//! reported the same way whether or not its disconnection was seen (the client drops events when
//! its event queue is full). The epoch is the stream's creation time, which every server of the
//! cluster reports alike. Listing one server of a cluster works too: by default with a stream of
//! one copy (its server's loss is an outage, and the loss of its store a new epoch), with
//! [`HistoryConfig::copies`] set as replicated as any (the servers that store are the cluster's,
//! whichever one the node connects to). More copies than the cluster has JetStream servers up, or
//! more than 1 on a server outside a cluster, are refused by the servers when the stream is created
//! or raised ([`Error::Backplane`], saying so).
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
//! with `sync_interval` writes not yet on disk); a stream of one copy in a cluster (copies 1, or
//! unset with one server of a cluster listed) takes only its server's tail loss.
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
//! (JetStream) or, on core NATS, not followed by a second round trip (the server has taken it:
//! it handles a connection's messages in order) within 2 s in all fails the same way. A core
//! subscription is subscribed once a round trip after it is answered, too: from then on, every
//! publication the server takes reaches it (a flush only writes to the socket; in a cluster,
//! the other servers learn of a subscription later still, which core NATS does not bound). So a failed publication is
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
//!
//! [`Event::Lost`]: crate::backplane::Event::Lost
//! [`Event::Restored`]: crate::backplane::Event::Restored
//! [`Event::Missed`]: crate::backplane::Event::Missed
//!
//! Files: `connection` (the state and the client's connection), `stream` (the JetStream
//! stream), `wire` (subjects and the message format), `life` (the server's life in an epoch),
//! `follow` (a topic's live delivery), `subscription` (following topics, restoring them after a
//! reconnection), `publish`, `history`.

mod connection;
mod follow;
mod history;
mod life;
mod publish;
mod stream;
mod subscription;
mod wire;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize};

use async_nats::jetstream;
use bytes::Bytes;
use futures_util::StreamExt;
use tokio::sync::{Mutex, mpsc};

use connection::{BACKOFF, CONNECT_TIMEOUT, PING_INTERVAL, REQUEST_TIMEOUT, Shared};
use follow::Start;
use stream::{Js, STREAM, epoch_of, jetstream_unavailable, stream_failed};
use subscription::supervise;
use wire::SUBJECT_PREFIX;

use crate::backplane::api::{Backplane, BoxFuture, Capabilities, EventSender, History};
use crate::backplane::position::{Position, Publication};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::task::AbortOnDrop;
use crate::topic::Topic;

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

/// Connects to the NATS server at `url` (`nats://HOST:PORT`; the port defaults to 4222), or to
/// one of a cluster's servers (`nats://HOST:PORT,HOST:PORT,…`: see "A NATS cluster" in the
/// [module documentation](self)), and starts the backplane, whose events go to `events`.
///
/// Uses JetStream for history when the server has it and `history.max_len > 0` (creating the
/// stream `SOCKEYE`, of [`HistoryConfig::copies`] copies, or raising it), core NATS otherwise.
/// Fails with [`Error::InvalidUrl`] for a URL it cannot use, with [`Error::InvalidConfig`] for
/// copies out of 1 to 5 (both before connecting), and with [`Error::Backplane`] when the server
/// cannot be reached within 5 seconds (no retry at start: a wrong address should be told, not
/// waited on) or refuses the stream.
pub async fn connect(url: &str, history: HistoryConfig, events: EventSender) -> Result<Nats, Error> {
    let addrs = parse_url(url)?;
    let copies = stream::copies(&history, addrs.len())?;
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
        .ping_interval(PING_INTERVAL)
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
        let config = jetstream::stream::Config {
            name: STREAM.into(),
            subjects: vec![format!("{SUBJECT_PREFIX}>")],
            max_messages_per_subject: i64::try_from(history.max_len).unwrap_or(i64::MAX),
            max_age: history.max_age,
            storage: jetstream::stream::StorageType::File,
            discard: jetstream::stream::DiscardPolicy::Old,
            // `HistoryConfig::copies`, or one per server listed, up to 3.
            num_replicas: copies,
            ..Default::default()
        };
        // Creating the stream is the probe: no responders (or a "not enabled" answer) means no
        // JetStream.
        match context.get_or_create_stream(config.clone()).await {
            Ok(_) => {
                let js = Js {
                    context,
                    config,
                    copies_set: history.copies.is_some(),
                    epoch: std::sync::Mutex::new("".into()),
                    replicas: AtomicUsize::new(1),
                    told: AtomicBool::new(false),
                };
                js.ensure_stream(&server).await?;
                let version = client.server_info().version;
                if stream::skips_publications(&version) {
                    tracing::warn!(
                        "{server}: nats-server {version}: JetStream consumers of this version \
                         were seen to skip publications still in the stream, which no subscriber \
                         would be told of; use nats-server 2.10 or later"
                    );
                }
                Some(js)
            }
            Err(e) if jetstream_unavailable(&e) => {
                tracing::info!("{server}: JetStream not available ({e}): core NATS, no history");
                None
            }
            Err(e) => return Err(stream_failed(&server, "create", copies, e)),
        }
    } else {
        None
    };
    let ping = format!("_SOCKEYE.ping.{:016x}", rand::random::<u64>());
    let mut pings = client
        .subscribe(ping.clone())
        .await
        .map_err(|e| Error::backplane(format!("{server}: subscribe"), e))?;
    let responder = crate::task::spawn({
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
        span: tracing::Span::current(),
    });
    let supervisor = crate::task::spawn(supervise(Arc::downgrade(&shared), conn_rx, stalled));
    Ok(Nats {
        shared,
        _supervisor: AbortOnDrop(supervisor.abort_handle()),
        _responder: AbortOnDrop(responder.abort_handle()),
    })
}

/// `nats://HOST[:PORT][,HOST[:PORT]…]` → each `HOST:PORT` (the servers of one cluster).
pub(crate) fn parse_url(url: &str) -> Result<Vec<String>, Error> {
    let accepted = "expected nats://HOST:PORT, or several servers of one cluster as \
                    nats://HOST:PORT,HOST:PORT,… (e.g. nats://127.0.0.1:4222)";
    crate::backplane::url::host_list(url, "nats", 4222, accepted)
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
            let follow = s
                .follow(
                    &topic,
                    epoch,
                    Start::Sequence {
                        sequence: start,
                        last: None,
                    },
                )
                .await?;
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
        Box::pin(self.shared.history(topic.clone(), since.cloned(), limit))
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
}
