//! A subscribed WebSocket, served: the loop between a socket and the hub, written once.
//!
//! A [`Session`] runs both directions of one connection until it ends, in one task:
//!
//! ```text
//!  socket ─► next_batch ─► Protocol::request ─► Publisher::publish_many ─► hub ─► every node
//!            (what the client already sent: one backplane round trip; retried per the policy below)
//!  socket ◄─ one flush ◄─ feed_prepared ×N ◄─ Protocol::outgoing ◄─ Subscriber queue ◄─ hub
//!            (up to write_batch deliveries, each encoded once for every subscriber)
//! ```
//!
//! What ends it, and how the client is told:
//!
//! | event | close | [`Ended`] |
//! | --- | --- | --- |
//! | the client closes, or the connection drops | (the client's) | [`Ended::Disconnected`] |
//! | the server shuts down gracefully ([`ShutdownHandle`](sockeye::ShutdownHandle)) | 1001, sent by the connection itself | [`Ended::Disconnected`] |
//! | its queue passed [`SubscriberConfig::max_queued_bytes`] ([`SlowPolicy::Close`](crate::SlowPolicy)) | 1008, at once: the backlog is not sent (the close follows what the socket already holds, [`SessionConfig::slow_drain`]) | [`Ended::TooSlow`] |
//! | a publication could not be published (see below) | [`Error::close_frame`]: 1013 for the backplane | [`Ended::NotPublished`] |
//! | publications were missed and cannot be recovered ([`Delivery::Gap`]), with [`OnGap::Close`] or a protocol that has nothing to send for it ([`Relay`]) | 1013, `gap on TOPIC: resume from OFFSET@EPOCH` ([`gap_close`]), after the protocol's own notice if it has one | [`Ended::Gap`] |
//! | the [`Protocol`] refuses what the client sent ([`Request::Close`]) | its frame | [`Ended::Refused`] |
//! | the hub stopped (its backplane ended) | 1013 | [`Ended::HubStopped`] |
//! | its credentials expired ([`Session::expires`]) without a refresh ([`Request::Refreshed`]) | the frame given to [`Session::expires`] (the web face's: 4002 `token_expired`) | [`Ended::Expired`] |
//!
//! # Publishing: nothing duplicated, nothing silently dropped
//!
//! What a client has already sent is published as one batch, in order, and the connection is
//! not read while a batch waits (a client that publishes faster than the backplane takes it is
//! slowed down by TCP, not buffered). A batch that fails is retried, with
//! [`SessionConfig::publish_retry`]'s backoff between attempts, for at most its patience
//! ([`PublishRetry`]), only when the error says that what is retried was not
//! published: the whole batch when nothing of it was sent (the backplane is not connected: the
//! usual outage), the rest of it when its start is known published and the rest known not. A
//! batch that may be partly published (sent, and the answer lost) is not retried, since that
//! could deliver some messages twice: the client is closed with 1013 and knows that its last
//! messages may not all have been delivered. Past the patience, the same.
//!
//! # Backplane lost
//!
//! While the backplane is down, publishing waits as above; subscriptions come back by
//! themselves, and what was missed meanwhile is recovered from history. What cannot be
//! recovered arrives as a [`Delivery::Gap`], and is never silent. The protocol's notice for it
//! ([`Protocol::outgoing`]: the JSON protocol's `gap` frame, with the position to resume from) is
//! written first; then [`SessionConfig::on_gap`] decides: close with 1013 ([`OnGap::Close`], the
//! default: the client reconnects and resumes), or keep going ([`OnGap::Deliver`]: for a
//! protocol that tells its clients). A protocol with nothing to send for a gap (the default
//! [`Relay`], whose messages are the publications themselves) is closed for it either way, with
//! the reason naming the topic and the position to resume from ([`gap_close`]).
//!
//! # Protocols, and many topics on one socket
//!
//! What a received message means and how a delivery is sent are a [`Protocol`]'s: [`Relay`], the
//! default, is one topic per socket, every text and binary message a publication on it, every
//! publication sent as it was published. A protocol with several topics on one socket (the JSON
//! protocol for web clients, [`JsonProtocol`](crate::json_protocol::JsonProtocol)) turns a
//! frame into a [`Request`]: a publication (answered with its position, or not), a subscribe or
//! an unsubscribe (carried out by the writing half, which owns the [`Subscriber`]), a reply of
//! its own (a refusal), or a close. Requests are carried out in the order they came, the
//! publications before a subscribe published first, and their answers (made by the protocol's
//! [`Answer`] once the outcome is known) sent in that order. At most
//! 32 requests wait for the writing half; past that the client is not read (TCP pushes back).
//! A protocol holds no per-connection state that changes (`&self`, `Sync`): what a connection
//! subscribed to is the subscriber's.
//!
//! # Example: a server that serves one topic per URL path
//!
//! ```
//! use futures_util::StreamExt;
//! use sockeye::{Message, Server};
//! use sockeye_pubsub::{Hub, Relay, Session, SessionConfig, Topic};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let hub = Hub::in_process();
//! let server = Server::bind("127.0.0.1:0", sockeye::Config::default()).await?;
//! let url = format!("ws://{}/news", server.local_addr()?);
//! # let node = hub.clone();
//! tokio::spawn(server.serve_requests(move |ws, request, _peer| {
//!     let hub = hub.clone();
//!     async move {
//!         let Ok(topic) = Topic::new(request.uri().path()) else { return };
//!         let mut session = Session::new(&hub, Relay::new(topic.clone()), SessionConfig::default());
//!         if let Err(e) = session.subscribe(&topic, None).await {
//!             let mut ws = ws;
//!             let _ = ws.close(Some(e.close_frame())).await; // 1013: try again later
//!             return;
//!         }
//!         let ended = session.run(ws).await;
//!         println!("{ended:?}");
//!     }
//! }));
//!
//! let (mut alice, _) = sockeye::connect(url.as_str()).await?;
//! let (mut bob, _) = sockeye::connect(url.as_str()).await?;
//! # // Both subscribed before alice speaks.
//! # while node.subscriber_count(&Topic::new("/news")?) < 2 {
//! #     tokio::time::sleep(std::time::Duration::from_millis(5)).await;
//! # }
//! alice.send("hello").await?;
//! assert_eq!(bob.next().await.transpose()?, Some(Message::text("hello")));
//! # Ok(())
//! # }
//! ```

use std::pin::{Pin, pin};
use std::time::{Duration, SystemTime};

use futures_channel::mpsc;
use futures_util::{SinkExt, StreamExt};
use sockeye::{CloseFrame, Message, WebSocket, WebSocketReader, WebSocketWriter};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::backplane::position::{Position, Recovery};
use crate::batch::next_batch;
use crate::config::SubscriberConfig;
use crate::delivery::Delivery;
use crate::error::Error;
use crate::hub::{Hub, Publisher, Subscriber};
use crate::protocol::{Answer, Outgoing, Protocol, Relay, Request, gap_close};
use crate::retry::PublishRetry;
use crate::topic::Topic;

/// Requests the reader has handed the writer and not yet carried out, at most: past it the
/// reader waits, and so does the client (TCP), so that a client flooding subscribe requests
/// costs the node a bounded queue. The queue is `futures-channel`'s, which allocates per queued
/// request: tokio's allocates a block of 32 slots up front, ~2.6 KiB of every idle subscribed
/// connection's 8.8 (bench section 11), for requests most sessions never make.
const OPS_QUEUE: usize = 32;

/// What a [`Delivery::Gap`] does to a session (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnGap {
    /// Close the connection with 1013 (try again later), after the protocol's own notice of
    /// the gap if it has one ([`gap_close`]'s reason: the topic and the position to resume
    /// from): the client reconnects and resumes. The default.
    #[default]
    Close,
    /// Keep going after the protocol's notice of the gap ([`Protocol::outgoing`]). A protocol
    /// that sends nothing for a gap (the default [`Relay`]) is closed as with
    /// [`Close`](Self::Close): a gap is never silent.
    Deliver,
}

/// A session's settings. Build with the setters from the default.
///
/// ```
/// use std::time::Duration;
/// use sockeye_pubsub::{OnGap, PublishRetry, SessionConfig};
/// let config = SessionConfig::default()
///     .on_gap(OnGap::Deliver)
///     .publish_retry(PublishRetry::default().patience(Duration::from_secs(2)));
/// assert_eq!(config.write_batch, 256);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct SessionConfig {
    /// The subscriber's queue bound and slow policy (default: 16 MiB, then close with 1008).
    pub subscriber: SubscriberConfig,
    /// Messages the client has already sent that are published together, at most (one
    /// backplane round trip for all of them). Default 256.
    pub read_batch: usize,
    /// Their payload bytes at most: the batch ends at whichever comes first (one message of any
    /// size may always go). Default 1 MiB.
    pub read_batch_bytes: usize,
    /// Deliveries written to the socket at most before one flush. Default 256: a syscall per
    /// 256 small messages under load, and an idle connection holds no batch buffer.
    pub write_batch: usize,
    /// How a batch of publications waits out an unreachable backplane (the connection is not
    /// read meanwhile) before the client is closed with 1013. Default [`PublishRetry::default`]:
    /// 10 s in all, waits from 50 ms doubling to 1 s, equal jitter; a backplane restart of a few
    /// seconds loses nothing.
    pub publish_retry: PublishRetry,
    /// What an unrecoverable gap does. Default [`OnGap::Close`].
    pub on_gap: OnGap,
    /// How long the close frame of a session that closes (too slow, not published, gap) may
    /// take to go out (a client that does not read may never take it), and how long the
    /// writing half may finish after the client has gone. Default 1 s.
    pub close_grace: Duration,
    /// How long a client closed as too slow has to read what its socket already holds before
    /// the 1008 close is queued behind it; the close deadline of the connection
    /// ([`close_timeout`](sockeye::ProtocolConfig::close_timeout)) then runs for the client's
    /// answer. Default 30 s (a keepalive interval): a slow client still reading gets its 1008,
    /// one that does not read is dropped within this plus the close timeout.
    pub slow_drain: Duration,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig {
            subscriber: SubscriberConfig::default(),
            read_batch: 256,
            read_batch_bytes: 1 << 20,
            write_batch: 256,
            publish_retry: PublishRetry::default(),
            on_gap: OnGap::Close,
            close_grace: Duration::from_secs(1),
            slow_drain: Duration::from_secs(30),
        }
    }
}

impl SessionConfig {
    /// Sets [`subscriber`](Self::subscriber).
    #[must_use]
    pub fn subscriber(mut self, subscriber: SubscriberConfig) -> Self {
        self.subscriber = subscriber;
        self
    }

    /// Sets [`read_batch`](Self::read_batch) and [`read_batch_bytes`](Self::read_batch_bytes)
    /// (0 is taken as 1).
    #[must_use]
    pub fn read_batch(mut self, messages: usize, bytes: usize) -> Self {
        self.read_batch = messages.max(1);
        self.read_batch_bytes = bytes.max(1);
        self
    }

    /// Sets [`write_batch`](Self::write_batch) (0 is taken as 1).
    #[must_use]
    pub fn write_batch(mut self, deliveries: usize) -> Self {
        self.write_batch = deliveries.max(1);
        self
    }

    /// Sets [`publish_retry`](Self::publish_retry).
    #[must_use]
    pub fn publish_retry(mut self, retry: PublishRetry) -> Self {
        self.publish_retry = retry;
        self
    }

    /// Sets [`on_gap`](Self::on_gap).
    #[must_use]
    pub fn on_gap(mut self, on_gap: OnGap) -> Self {
        self.on_gap = on_gap;
        self
    }

    /// Sets [`close_grace`](Self::close_grace).
    #[must_use]
    pub fn close_grace(mut self, grace: Duration) -> Self {
        self.close_grace = grace;
        self
    }

    /// Sets [`slow_drain`](Self::slow_drain).
    #[must_use]
    pub fn slow_drain(mut self, grace: Duration) -> Self {
        self.slow_drain = grace;
        self
    }
}

/// How a session ended (see the table in the [module docs](self)).
#[derive(Debug)]
#[non_exhaustive]
pub enum Ended {
    /// The connection closed: by the client, by the server's graceful shutdown (1001), or it
    /// dropped.
    Disconnected,
    /// The client did not read fast enough: closed with 1008, its backlog not sent.
    TooSlow,
    /// A batch of its publications could not be published: closed with the error's
    /// [`close_frame`](Error::close_frame) (1013 for the backplane). The batch's messages may
    /// not all have been published.
    NotPublished(Error),
    /// Publications on `topic` were missed and cannot be recovered ([`OnGap::Close`]): closed
    /// with 1013.
    Gap {
        /// The topic.
        topic: Topic,
    },
    /// The protocol refused what the client sent ([`Request::Close`]): closed with this frame.
    Refused(CloseFrame),
    /// The hub stopped (its backplane ended): nothing more can be delivered; closed with 1013.
    HubStopped,
    /// The connection's credentials expired without a refresh ([`Session::expires`]): closed
    /// with the frame given there.
    Expired,
}

/// One connection's subscriber, served over its WebSocket by [`run`](Self::run).
#[derive(Debug)]
pub struct Session<P = Relay> {
    subscriber: Subscriber,
    protocol: P,
    /// Boxed: `run`'s future holds the session twice (its argument and the moved value), and
    /// the configuration is most of it (~170 bytes), in every connection's task.
    config: Box<SessionConfig>,
    /// When the connection's credentials expire, and the close that says so: only sessions
    /// with expiring credentials carry it.
    expiry: Option<Box<Expiry>>,
}

/// [`Session::expires`]: when, and how the client is told.
#[derive(Debug)]
struct Expiry {
    at: Option<SystemTime>,
    close: CloseFrame,
}

impl<P: Protocol> Session<P> {
    /// A session on `hub` speaking `protocol`, subscribed to nothing yet.
    pub fn new(hub: &Hub, protocol: P, config: SessionConfig) -> Session<P> {
        Session {
            subscriber: hub.subscriber(config.subscriber),
            protocol,
            config: Box::new(config),
            expiry: None,
        }
    }

    /// Ends the session at `at` (wall-clock time: a token's `exp`), closing the connection
    /// with `close`, unless the protocol renews it first ([`Request::Refreshed`], which moves
    /// or removes the deadline). One timer per session, in its writing half: no task. Without
    /// this a session does not expire; a [`Request::Refreshed`] with an expiry then closes with
    /// 1008 when it passes.
    #[must_use]
    pub fn expires(mut self, at: SystemTime, close: CloseFrame) -> Self {
        self.expiry = Some(Box::new(Expiry { at: Some(at), close }));
        self
    }

    /// Subscribes to `topic`, from `resume` if given (see [`Subscriber::subscribe`]). On an
    /// error, close the WebSocket with [`Error::close_frame`].
    pub async fn subscribe(&mut self, topic: &Topic, resume: Option<Position>) -> Result<Recovery, Error> {
        self.subscriber.subscribe(topic, resume).await
    }

    /// Its subscriber.
    pub fn subscriber(&self) -> &Subscriber {
        &self.subscriber
    }

    /// Serves `ws` until the connection ends (see [`Ended`]): the client's messages to the hub,
    /// the subscriber's deliveries to the client. Dropping the future drops the connection and
    /// unsubscribes.
    pub async fn run<S>(mut self, ws: WebSocket<S>) -> Ended
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut sink, mut stream) = ws.split();
        let publisher = self.subscriber.publisher();
        // futures' bounded channel holds one request more per sender than its buffer.
        let (ops_tx, ops_rx) = mpsc::channel(OPS_QUEUE - 1);
        let mut reading = pin!(read(
            &mut stream,
            &publisher,
            &self.protocol,
            &self.config,
            ops_tx
        ));
        let mut writing = pin!(write(
            &mut sink,
            &mut self.subscriber,
            &self.protocol,
            &self.config,
            self.expiry.take(),
            ops_rx
        ));
        let (read_end, write_end) = tokio::select! {
            // The writer closed (too slow, a gap) or stopped: read on until the client's close
            // reply ends the stream, publishing what it sent before.
            w = &mut writing => (reading.await, Some(w)),
            // The client is gone (or refused): the writer finishes its close, or stops at once.
            // Boxed, as every await only an ending reaches: an idle session's task would carry
            // the timer otherwise.
            r = &mut reading => (r, Box::pin(tokio::time::timeout(self.config.close_grace, writing)).await.ok()),
        };
        match (write_end, read_end) {
            (Some(Stop::TooSlow), _) => Ended::TooSlow,
            (Some(Stop::Gap(topic, _)), _) => Ended::Gap { topic },
            (_, Stop::NotPublished(e)) => Ended::NotPublished(e),
            (_, Stop::Refused(frame)) => Ended::Refused(frame),
            (Some(Stop::HubStopped), _) => Ended::HubStopped,
            (Some(Stop::Expired), _) => Ended::Expired,
            _ => Ended::Disconnected,
        }
    }
}

/// Why one direction of a session stopped.
enum Stop {
    /// The connection ended (or failed).
    Disconnected,
    TooSlow,
    /// A gap the client was told of with this close.
    Gap(Topic, CloseFrame),
    NotPublished(Error),
    Refused(CloseFrame),
    HubStopped,
    /// The credentials expired.
    Expired,
}

/// What the reader hands the writer, which owns the sending half and the subscriber, in the
/// order the client's requests came.
enum Op {
    /// Send this frame.
    Send(Message),
    /// Subscribe, then send what `answer` makes of the outcome.
    Subscribe {
        topic: Topic,
        since: Option<Position>,
        answer: Answer<Recovery>,
    },
    /// Unsubscribe, then send what `answer` makes of the outcome.
    Unsubscribe { topic: Topic, answer: Answer<()> },
    /// Close with this frame (the reader's stop says why).
    Close(CloseFrame),
    /// Expire at this time from now on (`None`: never), then send the reply.
    Refreshed {
        expires: Option<SystemTime>,
        reply: Message,
    },
}

/// Consecutive publications on one topic, published with one `publish_many`, with the answers
/// owed for them.
#[derive(Default)]
struct Run {
    topic: Option<Topic>,
    messages: Vec<Message>,
    answers: Vec<Option<Answer<Option<Position>>>>,
}

impl Run {
    /// Publishes what it holds, in order, with the session's retry policy, and hands the
    /// answers to the writer. Empty afterwards. When the batch cannot be published, asks the
    /// writer to close and says why the reader stops.
    ///
    /// Boxed: the publication's future (the retry's timer, the backplane call, the answers) is
    /// ~1 KiB, which every idle session's task would carry if it were inline.
    async fn publish(
        &mut self,
        publisher: &Publisher,
        retry: &PublishRetry,
        ops: &mut mpsc::Sender<Op>,
    ) -> Result<(), Stop> {
        let Some(topic) = self.topic.take() else {
            return Ok(());
        };
        Box::pin(self.publish_on(topic, publisher, retry, ops)).await
    }

    async fn publish_on(
        &mut self,
        topic: Topic,
        publisher: &Publisher,
        retry: &PublishRetry,
        ops: &mut mpsc::Sender<Op>,
    ) -> Result<(), Stop> {
        let messages = std::mem::take(&mut self.messages);
        let answers = std::mem::take(&mut self.answers);
        let positions = match retry.publish_many(publisher, &topic, messages).await {
            Ok(positions) => positions,
            Err(e) => {
                let _ = ops.send(Op::Close(e.close_frame())).await;
                return Err(Stop::NotPublished(e));
            }
        };
        let positions = positions.into_iter().chain(std::iter::repeat(None));
        for (answer, position) in answers.into_iter().zip(positions) {
            if let Some(frame) = answer.and_then(|answer| answer(Ok(position))) {
                // The writer is gone only when the connection is: nothing left to answer.
                let _ = ops.send(Op::Send(frame)).await;
            }
        }
        Ok(())
    }
}

/// The client's messages to the hub, a batch at a time, publications on one topic together;
/// other requests are handed to the writer, in order, after the publications before them.
/// Asks the writer to close when a batch cannot be published or the protocol refuses a
/// message; stops the writer (by dropping `ops`) when the client has gone.
async fn read<S, P>(
    stream: &mut WebSocketReader<S>,
    publisher: &Publisher,
    protocol: &P,
    config: &SessionConfig,
    mut ops: mpsc::Sender<Op>,
) -> Stop
where
    S: AsyncRead + AsyncWrite + Unpin,
    P: Protocol,
{
    let mut received: Vec<Message> = Vec::new();
    let mut run = Run::default();
    let mut open = true;
    while open {
        open = next_batch(stream, &mut received, config.read_batch, config.read_batch_bytes).await;
        let mut refused = None;
        for message in received.drain(..) {
            let (topic, message, answer) = match protocol.request(message) {
                Request::Publish { topic, message } => (topic, message, None),
                Request::PublishAnswered {
                    topic,
                    message,
                    answer,
                } => (topic, message, Some(answer)),
                other => {
                    // What came before is published (and answered) before this is carried out.
                    if let Err(stop) = run.publish(publisher, &config.publish_retry, &mut ops).await {
                        return stop;
                    }
                    let op = match other {
                        Request::Subscribe { topic, since, answer } => Op::Subscribe { topic, since, answer },
                        Request::Unsubscribe { topic, answer } => Op::Unsubscribe { topic, answer },
                        Request::Reply(message) => Op::Send(message),
                        Request::Refreshed { expires, reply } => Op::Refreshed { expires, reply },
                        Request::Close(frame) => {
                            refused = Some(frame);
                            break;
                        }
                        _ => continue, // Ignore
                    };
                    if hand_over(&mut ops, op).await.is_err() {
                        return Stop::Disconnected;
                    }
                    continue;
                }
            };
            if run.topic.as_ref().is_some_and(|t| *t != topic)
                && let Err(stop) = run.publish(publisher, &config.publish_retry, &mut ops).await
            {
                return stop;
            }
            run.topic = Some(topic);
            run.messages.push(message);
            run.answers.push(answer);
        }
        received.clear();
        if let Err(stop) = run.publish(publisher, &config.publish_retry, &mut ops).await {
            return stop;
        }
        if let Some(frame) = refused {
            let _ = hand_over(&mut ops, Op::Close(frame.clone())).await;
            return Stop::Refused(frame);
        }
    }
    Stop::Disconnected
}

/// Hands `op` to the writer; waits (boxed: only a client that piles up requests the writer has
/// not carried out yet waits here) when the queue is full. `Err`: the writer is gone.
async fn hand_over(ops: &mut mpsc::Sender<Op>, op: Op) -> Result<(), ()> {
    match ops.try_send(op) {
        Ok(()) => Ok(()),
        Err(e) if e.is_full() => Box::pin(ops.send(e.into_inner())).await.map_err(drop),
        Err(_) => Err(()),
    }
}

/// The subscriber's deliveries and the answers to the client's requests, to the client, a batch
/// and one flush at a time, until the subscriber is too slow or meets a gap it closes for, the
/// reader asks for a close or stops, or the hub stops.
async fn write<S, P>(
    sink: &mut WebSocketWriter<S>,
    subscriber: &mut Subscriber,
    protocol: &P,
    config: &SessionConfig,
    mut expiry: Option<Box<Expiry>>,
    mut ops: mpsc::Receiver<Op>,
) -> Stop
where
    S: AsyncRead + AsyncWrite + Unpin,
    P: Protocol,
{
    // Boxed, and only for a session whose credentials expire: an idle session's task carries
    // a pointer.
    let mut deadline = expiry.as_ref().and_then(|e| e.at).map(timer);
    let (stop, frame) = loop {
        let next = tokio::select! {
            op = ops.next() => Next::Op(op),
            d = subscriber.recv() => Next::Delivery(d),
            () = async {
                match deadline.as_mut() {
                    Some(sleep) => sleep.as_mut().await,
                    None => std::future::pending().await,
                }
            } => Next::Expired,
        };
        let first = match next {
            // The reader has stopped: its stop says why.
            Next::Op(None) => return Stop::Disconnected,
            Next::Op(Some(Op::Close(frame))) => break (Stop::Disconnected, frame),
            Next::Expired => {
                let frame = expiry.take().map_or_else(expired, |e| e.close);
                break (Stop::Expired, frame);
            }
            Next::Op(Some(op)) => {
                // Requests are boxed: their futures (a subscription's recovery, the reply's write)
                // would otherwise be carried by every idle session's task.
                let reply = match op {
                    Op::Send(message) => Some(message),
                    Op::Subscribe { topic, since, answer } => {
                        match Box::pin(subscriber.subscribe(&topic, since)).await {
                            Ok(recovery) => answer(Ok(recovery)),
                            Err(e) => answer(Err(&e)),
                        }
                    }
                    Op::Unsubscribe { topic, answer } => match Box::pin(subscriber.unsubscribe(&topic)).await
                    {
                        Ok(()) => answer(Ok(())),
                        Err(e) => answer(Err(&e)),
                    },
                    Op::Close(_) => None,
                    Op::Refreshed { expires, reply } => {
                        deadline = expires.map(timer);
                        match expiry.as_mut() {
                            Some(e) => e.at = expires,
                            None => {
                                expiry = expires.map(|at| {
                                    Box::new(Expiry {
                                        at: Some(at),
                                        close: expired(),
                                    })
                                });
                            }
                        }
                        Some(reply)
                    }
                };
                let Some(reply) = reply else { continue };
                let written = Box::pin(async {
                    tokio::select! {
                        biased;
                        () = subscriber.too_slow() => Ok(Some(Stop::TooSlow)),
                        r = async {
                            sink.feed(reply).await?;
                            sink.flush().await.map(|()| None)
                        } => r,
                    }
                })
                .await;
                match written {
                    Ok(None) => continue,
                    Ok(Some(stop)) => break (stop, too_slow()),
                    Err(_) => return Stop::Disconnected,
                }
            }
            // The hub stopped (its backplane ended): nothing more will come.
            Next::Delivery(None) => break (Stop::HubStopped, Error::Closed.close_frame()),
            Next::Delivery(Some(Err(e))) => break (Stop::TooSlow, e.close_frame()),
            Next::Delivery(Some(Ok(d))) => d,
        };
        // What is queued now goes out with one flush.
        let batch = async {
            let mut next = Some(first);
            let mut written = 0;
            while let Some(d) = next.take() {
                let told = match protocol.outgoing(&d) {
                    Outgoing::Prepared(m) => sink.feed_prepared(m).await.map(|()| true)?,
                    Outgoing::Message(m) => sink.feed(m).await.map(|()| true)?,
                    Outgoing::Nothing => false,
                };
                // A gap is never silent: the protocol's notice (written above) and, when it has
                // none or the session closes for gaps, a close that names it.
                if let Delivery::Gap { topic, resume } = &d
                    && (config.on_gap == OnGap::Close || !told)
                {
                    sink.flush().await?;
                    return Ok(Some(Stop::Gap(topic.clone(), gap_close(topic, resume.as_ref()))));
                }
                written += 1;
                if written < config.write_batch {
                    next = match subscriber.try_recv() {
                        Some(Ok(d)) => Some(d),
                        Some(Err(_)) => return Ok(Some(Stop::TooSlow)),
                        None => None,
                    };
                }
            }
            sink.flush().await.map(|()| None)
        };
        // A client that does not read blocks the write: give up on it as soon as its queue
        // passes the bound.
        let written = tokio::select! {
            biased;
            () = subscriber.too_slow() => Ok(Some(Stop::TooSlow)),
            r = batch => r,
        };
        match written {
            Ok(None) => {}
            Ok(Some(Stop::Gap(topic, frame))) => break (Stop::Gap(topic, frame.clone()), frame),
            Ok(Some(stop)) => break (stop, too_slow()),
            Err(_) => return Stop::Disconnected,
        }
    };
    // The backlog of a client too slow is not sent, but its socket still holds what was written
    // before: the close goes after that, once the client has read it (within `slow_drain`), so
    // that the engine's close deadline runs from when the close can reach it. The deadline starts
    // when the close is queued, whichever half queues it: queued behind a full socket, it would
    // end the connection before a client that reads again later could see its 1008 (it gets an
    // EOF; the relay's slow-client test). A client that does not read at all is ended after
    // `slow_drain`, then the close deadline.
    Box::pin(close(sink, &stop, frame, config)).await;
    stop
}

/// The writer's last step (see the end of [`write`]); boxed there, as only an ending reaches it.
async fn close<S>(sink: &mut WebSocketWriter<S>, stop: &Stop, frame: CloseFrame, config: &SessionConfig)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    if matches!(stop, Stop::TooSlow) {
        let _ = tokio::time::timeout(config.slow_drain, sink.flush()).await;
    }
    let _ = tokio::time::timeout(config.close_grace, sink.close(Some(frame))).await;
}

/// What the writer waits for.
enum Next {
    Op(Option<Op>),
    Delivery(Option<Result<Delivery, Error>>),
    /// The credentials expired.
    Expired,
}

/// A timer for wall-clock time `at`, on tokio's clock (paused in tests): the time left until it,
/// from now (none if it passed).
fn timer(at: SystemTime) -> Pin<Box<tokio::time::Sleep>> {
    let left = at.duration_since(SystemTime::now()).unwrap_or_default();
    Box::pin(tokio::time::sleep(left))
}

/// The close of an expired session that was given no frame of its own.
fn expired() -> CloseFrame {
    CloseFrame::new(
        sockeye::CloseCode::POLICY_VIOLATION,
        "the connection's credentials expired",
    )
}

/// The close of a client too slow to read (the code and reason are [`Error::close_frame`]'s).
fn too_slow() -> CloseFrame {
    Error::TooSlow { queued: 0, max: 0 }.close_frame()
}
