//! The session (`sockeye_pubsub::Session`) over real loopback sockets, on an in-process
//! backplane behind a switch the test controls: batched publications delivered once each in
//! order, a backplane outage waited out without a duplicate, a publication that may be partly
//! published or an outage past the patience closed with 1013, a client that does not read closed
//! with 1008, graceful shutdown 1001, an unrecoverable gap closed with 1013 or delivered, a
//! protocol of the application's, and the client's own close.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::backoff::Backoff;
use sockeye::{CloseCode, CloseFrame, Message, Server, ShutdownHandle, TransportStream, WebSocket};
use sockeye_pubsub::backplane::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, InProcess};
use sockeye_pubsub::{
    Delivery, Ended, Error, HistoryConfig, Hub, HubConfig, OnGap, Outgoing, Position, Protocol, Publication,
    PublishRetry, Relay, Request, Session, SessionConfig, SlowPolicy, SubscriberConfig, Topic,
};
use tokio::sync::mpsc;
use tokio::time::timeout;

/// The longest any one step may take.
const STEP: Duration = Duration::from_secs(10);

/// What the test does to the backplane: take it down, make the next batch fail part way, and
/// see the batches it was given.
#[derive(Default)]
struct Switch {
    down: AtomicBool,
    /// The next batch publishes its first `.0` publications, then fails saying `.1` were sent.
    partly: Mutex<Option<(usize, usize)>>,
    /// The size of every batch that reached the backplane while it was up.
    batches: Mutex<Vec<usize>>,
}

/// The in-process backplane behind a [`Switch`].
struct Switched {
    inner: InProcess,
    switch: Arc<Switch>,
}

impl Backplane for Switched {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async move { Ok(self.publish_many(vec![publication]).await?.pop()) })
    }

    fn publish_many(
        &self,
        mut publications: Vec<Publication>,
    ) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(async move {
            if self.switch.down.load(Ordering::SeqCst) {
                return Err(Error::Backplane {
                    what: "test: the backplane is down".into(),
                    source: None,
                });
            }
            self.switch.batches.lock().unwrap().push(publications.len());
            let partly = self.switch.partly.lock().unwrap().take();
            if let Some((published, sent)) = partly {
                publications.truncate(published);
                self.inner.publish_many(publications).await?;
                return Err(Error::PartlyPublished {
                    published,
                    sent,
                    source: Box::new(Error::Backplane {
                        what: "test: the connection dropped mid-batch".into(),
                        source: None,
                    }),
                });
            }
            self.inner.publish_many(publications).await
        })
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        self.inner.subscribe(topic)
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        self.inner.unsubscribe(topic)
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        self.inner.history(topic, since, limit)
    }
}

/// Waits of 10 ms doubling to 50 ms between publish tries: outages in these tests are short.
fn quick_retry() -> PublishRetry {
    PublishRetry::default().backoff(Backoff::new(Duration::from_millis(10), Duration::from_millis(50)))
}

/// A hub over a switched in-process backplane, the switch, and the sender of its events.
fn switched_hub(history: HistoryConfig) -> (Hub, Arc<Switch>, EventSender) {
    let switch = Arc::new(Switch::default());
    let mut events = None;
    let hub = Hub::with_backplane(HubConfig::default(), |tx| {
        events = Some(tx.clone());
        Switched {
            inner: InProcess::new(tx, history),
            switch: Arc::clone(&switch),
        }
    });
    (hub, switch, events.unwrap())
}

/// A server whose every connection is a session speaking `protocol`, subscribed to `topics`.
struct Node {
    url: String,
    ended: mpsc::UnboundedReceiver<Ended>,
    shutdown: ShutdownHandle,
}

impl Node {
    async fn start<P: Protocol + Clone + 'static>(
        hub: &Hub,
        config: SessionConfig,
        protocol: P,
        topics: &[&str],
    ) -> Node {
        let topics: Vec<Topic> = topics.iter().map(|t| Topic::new(t).unwrap()).collect();
        let server = Server::bind("127.0.0.1:0", sockeye::Config::default())
            .await
            .unwrap();
        let url = format!("ws://{}/", server.local_addr().unwrap());
        let shutdown = server.shutdown_handle();
        let (tx, ended) = mpsc::unbounded_channel();
        let hub = hub.clone();
        tokio::spawn(server.serve(move |ws, _| {
            let (hub, protocol, topics, tx) = (hub.clone(), protocol.clone(), topics.clone(), tx.clone());
            async move {
                let mut session = Session::new(&hub, protocol, config);
                for topic in &topics {
                    session.subscribe(topic, None).await.unwrap();
                }
                let _ = tx.send(session.run(ws).await);
            }
        }));
        Node { url, ended, shutdown }
    }

    async fn ended(&mut self) -> Ended {
        timeout(STEP, self.ended.recv())
            .await
            .expect("no session ended")
            .unwrap()
    }
}

type Client = WebSocket<TransportStream>;

/// Waits until the number of `topic`'s subscribers on `hub` passes `check`; panics with `why`
/// after a step.
async fn subscribers_until(hub: &Hub, topic: &str, check: impl Fn(usize) -> bool, why: &str) {
    let topic = Topic::new(topic).unwrap();
    let waited = timeout(STEP, async {
        while !check(hub.subscriber_count(&topic)) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    waited.await.expect(why);
}

/// Connects `n` clients and waits until each is subscribed to `topic`.
async fn clients(node: &Node, hub: &Hub, topic: &str, n: usize) -> Vec<Client> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(sockeye::connect(node.url.as_str()).await.unwrap().0);
    }
    subscribers_until(
        hub,
        topic,
        |count| count >= n,
        "the clients were not all subscribed",
    )
    .await;
    out
}

/// A relay of topic `t` (the default protocol) on a switched hub, and `n` clients on it.
struct Relayed {
    hub: Hub,
    switch: Arc<Switch>,
    events: EventSender,
    node: Node,
    c: Vec<Client>,
}

async fn relayed(history: HistoryConfig, config: SessionConfig, n: usize) -> Relayed {
    let (hub, switch, events) = switched_hub(history);
    let node = Node::start(&hub, config, Relay::new(Topic::new("t").unwrap()), &["t"]).await;
    let c = clients(&node, &hub, "t", n).await;
    Relayed {
        hub,
        switch,
        events,
        node,
        c,
    }
}

/// Sends `count` messages of 64 KiB, flushed once.
async fn flood(client: &mut Client, count: usize) {
    let big = "x".repeat(64 << 10);
    for _ in 0..count {
        client.feed(big.as_str()).await.unwrap();
    }
    client.flush().await.unwrap();
}

/// The next data message's text, or the close frame's code and reason as `close CODE REASON`.
async fn next(ws: &mut Client) -> String {
    loop {
        match timeout(STEP, ws.next()).await.expect("nothing within the step") {
            Some(Ok(Message::Text(t))) => return t.as_str().to_owned(),
            Some(Ok(Message::Close(Some(f)))) => return format!("close {} {}", f.code.0, f.reason.as_str()),
            Some(Ok(m)) if !m.is_data() => {}
            other => panic!("unexpected: {other:?}"),
        }
    }
}

/// Nothing arrives for a while.
async fn quiet(ws: &mut Client) {
    if let Ok(m) = timeout(Duration::from_millis(200), ws.next()).await {
        panic!("unexpected: {m:?}");
    }
}

fn numbered(range: std::ops::Range<usize>) -> Vec<Message> {
    range.map(|i| Message::text(format!("m{i}"))).collect()
}

/// Receives `range` in order, once each.
async fn receives(ws: &mut Client, range: std::ops::Range<usize>) {
    for i in range {
        assert_eq!(next(ws).await, format!("m{i}"));
    }
}

#[tokio::test]
async fn what_a_client_sends_reaches_the_others_once_in_order_in_batches() {
    let Relayed {
        switch,
        node: _node,
        mut c,
        ..
    } = relayed(HistoryConfig::default(), SessionConfig::default(), 3).await;
    const N: usize = 2000;
    c[0].send_batch(numbered(0..N)).await.unwrap();
    let [a, b, d] = &mut c[..] else { unreachable!() };
    receives(b, 0..N).await;
    receives(d, 0..N).await;
    quiet(b).await;
    // The publisher is left out of its own publications.
    quiet(a).await;
    // Every message went to the backplane once, in batches of what had arrived together.
    let batches = switch.batches.lock().unwrap().clone();
    assert_eq!(batches.iter().sum::<usize>(), N, "{batches:?}");
    assert!(
        batches.len() < N / 4,
        "not batched: {} publish calls",
        batches.len()
    );
    assert!(batches.iter().all(|&n| n <= 256), "{batches:?}");
}

#[tokio::test]
async fn an_outage_is_waited_out_and_a_batch_cut_short_is_retried_from_where_it_stopped() {
    let config = SessionConfig::default().publish_retry(quick_retry());
    let Relayed {
        switch,
        node: _node,
        mut c,
        ..
    } = relayed(HistoryConfig::default(), config, 2).await;
    // Down: nothing of a batch is published, and it is tried again.
    switch.down.store(true, Ordering::SeqCst);
    c[0].send_batch(numbered(0..50)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    switch.down.store(false, Ordering::SeqCst);
    receives(&mut c[1], 0..50).await;
    // A batch whose first 3 were published and the rest not: the rest, not the 3 again.
    *switch.partly.lock().unwrap() = Some((3, 3));
    c[0].send_batch(numbered(50..60)).await.unwrap();
    receives(&mut c[1], 50..60).await;
    quiet(&mut c[1]).await;
    quiet(&mut c[0]).await;
}

/// `Duration::MAX` is a valid setting: it waited for ever, and panicked adding it to an instant.
#[tokio::test]
async fn the_longest_durations_are_valid_settings() {
    let config = SessionConfig::default()
        .close_grace(Duration::MAX)
        .slow_drain(Duration::MAX)
        .publish_retry(quick_retry().patience(Duration::MAX));
    let Relayed {
        switch,
        mut node,
        mut c,
        ..
    } = relayed(HistoryConfig::default(), config, 2).await;
    switch.down.store(true, Ordering::SeqCst);
    c[0].send_batch(numbered(0..5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    switch.down.store(false, Ordering::SeqCst);
    receives(&mut c[1], 0..5).await;
    c[0].close(None).await.unwrap();
    assert!(matches!(node.ended().await, Ended::Disconnected));
}

#[tokio::test]
async fn a_batch_that_may_be_partly_published_is_not_retried_and_closes_with_1013() {
    let Relayed {
        switch,
        mut node,
        mut c,
        ..
    } = relayed(HistoryConfig::default(), SessionConfig::default(), 2).await;
    // 2 published, the 3rd sent and not answered: retrying could publish it twice.
    *switch.partly.lock().unwrap() = Some((2, 3));
    c[0].send_batch(numbered(0..5)).await.unwrap();
    assert_eq!(next(&mut c[0]).await, "close 1013 pub/sub backplane unavailable");
    receives(&mut c[1], 0..2).await;
    quiet(&mut c[1]).await;
    assert!(matches!(
        node.ended().await,
        Ended::NotPublished(Error::PartlyPublished { .. })
    ));
}

#[tokio::test]
async fn an_outage_longer_than_the_patience_closes_with_1013() {
    let config = SessionConfig::default().publish_retry(quick_retry().patience(Duration::from_millis(300)));
    let Relayed {
        switch,
        mut node,
        mut c,
        ..
    } = relayed(HistoryConfig::default(), config, 1).await;
    switch.down.store(true, Ordering::SeqCst);
    let sent = tokio::time::Instant::now();
    c[0].send("lost").await.unwrap();
    assert_eq!(next(&mut c[0]).await, "close 1013 pub/sub backplane unavailable");
    let waited = sent.elapsed();
    assert!(waited >= Duration::from_millis(250), "gave up after {waited:?}");
    assert!(matches!(
        node.ended().await,
        Ended::NotPublished(Error::Backplane { .. })
    ));
}

#[tokio::test]
async fn a_client_that_does_not_read_is_closed_with_1008_and_its_backlog_dropped() {
    let config = SessionConfig::default().subscriber(SubscriberConfig::new(256 << 10, SlowPolicy::Close));
    let Relayed { mut node, mut c, .. } = relayed(HistoryConfig::none(), config, 2).await;
    // 32 MiB at a client that reads nothing: more than the sockets between them hold.
    const N: usize = 512;
    let mut slow = c.pop().unwrap();
    flood(&mut c[0], N).await;
    assert!(
        node.ended.try_recv().is_err(),
        "ended before the slow client read"
    );
    let mut got = 0;
    let close = loop {
        match next(&mut slow).await {
            m if m.starts_with("close ") => break m,
            _ => got += 1,
        }
    };
    assert_eq!(close, "close 1008 too slow: messages were dropped");
    assert!(got < N, "got all {got}: nothing was dropped");
    assert!(matches!(node.ended().await, Ended::TooSlow));
}

#[tokio::test]
async fn a_client_dropped_as_too_slow_that_never_reads_is_disconnected_after_the_drain_grace() {
    let config = SessionConfig::default()
        .subscriber(SubscriberConfig::new(256 << 10, SlowPolicy::Close))
        .slow_drain(Duration::from_millis(300));
    let Relayed { mut node, mut c, .. } = relayed(HistoryConfig::none(), config, 2).await;
    let _never_reads = c.pop().unwrap();
    flood(&mut c[0], 512).await;
    // Its connection is not held for ever: the drain grace, then the close deadline (1 s).
    assert!(matches!(node.ended().await, Ended::TooSlow));
}

#[tokio::test]
async fn graceful_shutdown_closes_with_1001() {
    let Relayed { mut node, mut c, .. } =
        relayed(HistoryConfig::default(), SessionConfig::default(), 1).await;
    node.shutdown.shutdown();
    assert_eq!(next(&mut c[0]).await, "close 1001 server shutting down");
    assert!(matches!(node.ended().await, Ended::Disconnected));
}

#[tokio::test]
async fn the_client_s_close_ends_the_session_and_its_subscription() {
    let Relayed {
        hub, mut node, mut c, ..
    } = relayed(HistoryConfig::default(), SessionConfig::default(), 1).await;
    let reply = c[0]
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    assert_eq!(reply.map(|f| f.code), Some(CloseCode::NORMAL));
    assert!(matches!(node.ended().await, Ended::Disconnected));
    subscribers_until(
        &hub,
        "t",
        |count| count == 0,
        "still subscribed after the client left",
    )
    .await;
}

#[tokio::test]
async fn an_unrecoverable_gap_closes_with_1013_by_default() {
    // No history: after the backplane comes back, what was missed is a gap.
    let Relayed {
        events,
        mut node,
        mut c,
        ..
    } = relayed(HistoryConfig::none(), SessionConfig::default(), 1).await;
    events.send(Event::Restored).await.unwrap();
    assert_eq!(
        next(&mut c[0]).await,
        "close 1013 gap on t: publications were missed"
    );
    assert!(matches!(node.ended().await, Ended::Gap { topic } if topic.as_str() == "t"));
}

/// Issue 39 (h): `ws broadcast_server --backplane` served `Relay` with `OnGap::Deliver`, and
/// `Relay` sends nothing for a gap: the client never heard of it. A protocol that has nothing
/// to send for a gap is closed for it whatever `on_gap` says.
#[tokio::test]
async fn a_protocol_that_cannot_say_gap_is_closed_for_one_even_with_on_gap_deliver() {
    let config = SessionConfig::default().on_gap(OnGap::Deliver);
    let Relayed {
        events,
        mut node,
        mut c,
        ..
    } = relayed(HistoryConfig::none(), config, 1).await;
    events.send(Event::Restored).await.unwrap();
    assert_eq!(
        next(&mut c[0]).await,
        "close 1013 gap on t: publications were missed"
    );
    assert!(matches!(node.ended().await, Ended::Gap { topic } if topic.as_str() == "t"));
}

/// Issue 39 (h): under `OnGap::Close` (the default) the JSON protocol was closed with 1013
/// before its `gap` frame was written, so its client resumed from its old position (of an old
/// epoch) and met the same gap on every reconnect. The protocol's own notice goes first.
#[tokio::test]
async fn a_gap_is_told_in_the_protocol_s_words_before_the_close() {
    use sockeye_pubsub::access::Access;
    use sockeye_pubsub::json_protocol::JsonProtocol;
    let (hub, _, events) = switched_hub(HistoryConfig::none());
    let protocol = JsonProtocol::new(Access::everything(), hub.max_payload());
    let mut node = Node::start(&hub, SessionConfig::default(), protocol, &["t"]).await;
    let mut c = clients(&node, &hub, "t", 1).await;
    events.send(Event::Restored).await.unwrap();
    let gap: serde_json::Value = serde_json::from_str(&next(&mut c[0]).await).unwrap();
    assert_eq!(
        (gap["type"].as_str(), gap["topic"].as_str()),
        (Some("gap"), Some("t")),
        "{gap}"
    );
    assert_eq!(
        next(&mut c[0]).await,
        "close 1013 gap on t: publications were missed"
    );
    assert!(matches!(node.ended().await, Ended::Gap { topic } if topic.as_str() == "t"));
}

/// An application's protocol: `TOPIC|TEXT` publishes TEXT on TOPIC, `quit` is refused with
/// 4000, binary is ignored; deliveries go out as `TOPIC|TEXT`, a gap as `gap|TOPIC`.
#[derive(Clone)]
struct Lines;

impl Protocol for Lines {
    fn request(&self, message: Message) -> Request {
        let Message::Text(text) = message else {
            return Request::Ignore;
        };
        match text.as_str().split_once('|') {
            Some((topic, body)) => Request::Publish {
                topic: Topic::new(topic).unwrap(),
                message: Message::text(body.to_owned()),
            },
            None => Request::Close(CloseFrame::new(CloseCode(4000), "say TOPIC|TEXT")),
        }
    }

    fn outgoing<'a>(&self, delivery: &'a Delivery) -> Outgoing<'a> {
        match delivery {
            Delivery::Message(m) => Outgoing::Message(Message::text(format!(
                "{}|{}",
                m.topic().as_str(),
                String::from_utf8_lossy(m.message().as_payload())
            ))),
            Delivery::Gap { topic, .. } => {
                Outgoing::Message(Message::text(format!("gap|{}", topic.as_str())))
            }
            _ => Outgoing::Nothing,
        }
    }
}

#[tokio::test]
async fn a_protocol_of_the_application_s_decides_what_messages_mean_and_how_deliveries_look() {
    let (hub, _, events) = switched_hub(HistoryConfig::none());
    let config = SessionConfig::default().on_gap(OnGap::Deliver);
    let mut node = Node::start(&hub, config, Lines, &["a", "b"]).await;
    let mut c = clients(&node, &hub, "b", 2).await;
    // Runs of publications on two topics, in one read: each reaches the other client in order.
    c[0].send(Message::binary(&b"ignored"[..])).await.unwrap();
    c[0].send_batch(["a|1", "a|2", "b|3", "a|4"]).await.unwrap();
    for expected in ["a|1", "a|2", "b|3", "a|4"] {
        assert_eq!(next(&mut c[1]).await, expected);
    }
    // A gap is the protocol's to tell, and the session goes on.
    events.send(Event::Restored).await.unwrap();
    for client in &mut c {
        let mut gaps = vec![next(client).await, next(client).await];
        gaps.sort();
        assert_eq!(gaps, ["gap|a", "gap|b"]);
    }
    c[0].send("b|after").await.unwrap();
    assert_eq!(next(&mut c[1]).await, "b|after");
    // What the protocol refuses closes with its frame, after what came before was published.
    c[0].send_batch(["a|last", "quit"]).await.unwrap();
    assert_eq!(next(&mut c[0]).await, "close 4000 say TOPIC|TEXT");
    assert_eq!(next(&mut c[1]).await, "a|last");
    assert!(matches!(node.ended().await, Ended::Refused(f) if f.code.0 == 4000));
}

/// What an idle connection's session costs is mostly its future, the task every connection
/// holds: the awaits that only requests reach (publishing, subscribing, the close) are boxed, so
/// that their futures are not carried by every idle session, and so is the configuration, which
/// the future holds twice. It was 2,800 bytes before that, 1,848 after (rustc 1.95); the bound
/// leaves room for compilers to differ, not for the cold paths to come back inline.
#[tokio::test]
async fn an_idle_session_s_future_stays_small() {
    let hub = Hub::in_process();
    let ws = WebSocket::from_upgraded(
        tokio::io::duplex(64).0,
        sockeye::Role::Server,
        &sockeye::Config::default(),
        &[],
        None,
    );
    let session = Session::new(
        &hub,
        Relay::new(Topic::new("t").unwrap()),
        SessionConfig::default(),
    );
    let size = std::mem::size_of_val(&session.run(ws));
    println!("Session::run's future: {size} bytes");
    assert!(size <= 2048, "Session::run's future is {size} bytes");
}
