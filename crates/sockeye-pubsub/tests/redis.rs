//! The Redis backplane against a real `redis-server` (started per test on a free port, killed by
//! its PID). `redis-server` must be installed: `bash scripts/install-backplanes.sh`.

#![cfg(feature = "redis")]
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sockeye::Message;
use sockeye_pubsub::backplane::redis::Redis;
use sockeye_pubsub::backplane::{Backplane, EVENT_QUEUE, Event, History};
use sockeye_pubsub::{
    Delivery, Error, HistoryConfig, Hub, HubConfig, Origin, Position, Publication, Recovery, Subscriber,
    SubscriberConfig, Topic,
};
use tokio::sync::mpsc;
use tokio::time::timeout;

mod support;

use support::deliveries::{drain, texts};
use support::proxy::Proxy;
use support::servers::{BackplaneServer, Kind};

/// A node: a hub over its own connection to the server.
async fn node(server: &BackplaneServer, history: HistoryConfig) -> Hub {
    node_at(&server.url(), history).await
}

/// A node on the Redis at `url` (a server's, or a proxy's in front of it).
async fn node_at(url: &str, history: HistoryConfig) -> Hub {
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let redis = Redis::connect(url, history, tx).await.unwrap();
    Hub::start(HubConfig::default(), Box::new(redis), rx)
}

fn text(s: String) -> Message {
    Message::Text(s.into())
}

/// The next delivery, within 10 s.
async fn next(sub: &mut Subscriber) -> Delivery {
    match timeout(Duration::from_secs(10), sub.recv()).await {
        Ok(Some(Ok(d))) => d,
        Ok(other) => panic!("subscriber {}: {other:?}", sub.id()),
        Err(_) => panic!("subscriber {}: nothing delivered within 10 s", sub.id()),
    }
}

/// The next delivery, which must be a message: its text and position.
async fn next_text(sub: &mut Subscriber) -> (String, Position) {
    match next(sub).await {
        Delivery::Message(m) if matches!(m.message(), Message::Text(_)) && m.position().is_some() => (
            String::from_utf8(m.message().as_payload().to_vec()).unwrap(),
            m.position().unwrap().clone(),
        ),
        other => panic!("subscriber {}: expected a text message, got {other:?}", sub.id()),
    }
}

/// Nothing more arrives within `wait`.
async fn quiet(sub: &mut Subscriber, wait: Duration) {
    if let Ok(d) = timeout(wait, sub.recv()).await {
        panic!("subscriber {}: unexpected {d:?}", sub.id());
    }
}

/// Publishes until Redis takes it (it is coming back), within 10 s.
async fn publish_when_back(sub: &Subscriber, topic: &Topic, s: String) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match timeout(Duration::from_secs(3), sub.publish(topic, text(s.clone()))).await {
            Ok(Ok(_)) => return,
            // Redis is down: nothing was published, whatever the error can tell (a write on a
            // dead connection is "sent, not answered" to the node).
            Ok(Err(Error::Backplane { .. } | Error::PartlyPublished { published: 0, .. }))
                if Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => panic!("publish {s:?}: {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_deliver_every_publication_once_in_order() {
    const N: usize = 300;
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("rooms/lobby {all} é").unwrap();
    let mut hubs = Vec::new();
    for _ in 0..3 {
        hubs.push(node(&server, HistoryConfig::default()).await);
    }
    // Two subscribers per node; the first of each publishes.
    let mut subs = Vec::new();
    for hub in &hubs {
        for _ in 0..2 {
            let mut s = hub.subscriber(SubscriberConfig::default());
            assert_eq!(s.subscribe(&topic, None).await.unwrap(), Recovery::Live);
            subs.push(s);
        }
    }
    let publishers: Vec<(usize, Origin)> = (0..3)
        .map(|n| {
            (
                n * 2,
                Origin {
                    node: hubs[n].node(),
                    publisher: subs[n * 2].id(),
                },
            )
        })
        .collect();
    let run = async {
        let mut tasks = Vec::new();
        for (i, mut s) in subs.into_iter().enumerate() {
            let topic = topic.clone();
            let publisher = publishers.iter().position(|(p, _)| *p == i);
            tasks.push(tokio::spawn(async move {
                let expected = if publisher.is_some() { 2 * N } else { 3 * N };
                // Publishing first is fine: the queues hold far more than 3 × N small messages.
                let mut published = 0;
                if let Some(p) = publisher {
                    for k in 0..N {
                        s.publish(&topic, text(format!("{p}:{k}"))).await.unwrap();
                        published += 1;
                    }
                }
                let mut next_seq: HashMap<Origin, usize> = HashMap::new();
                let mut last_offset = 0;
                let mut received = 0;
                while received < expected {
                    match next(&mut s).await {
                        Delivery::Message(m) if m.position().is_some() => {
                            let pos = m.position().unwrap();
                            let origin = m.origin();
                            let t = std::str::from_utf8(m.message().as_payload()).unwrap();
                            assert!(
                                pos.offset > last_offset,
                                "offsets go back: {pos} after {last_offset}"
                            );
                            last_offset = pos.offset;
                            let (p, k) = t.split_once(':').unwrap();
                            let k: usize = k.parse().unwrap();
                            let want = next_seq.entry(origin).or_default();
                            assert_eq!(k, *want, "publisher {p}: out of order or duplicated");
                            *want += 1;
                            received += 1;
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
                quiet(&mut s, Duration::from_millis(300)).await;
                (i, published, received, next_seq)
            }));
        }
        for t in tasks {
            let (i, published, received, seqs) = t.await.unwrap();
            let is_publisher = publishers.iter().any(|(p, _)| *p == i);
            assert_eq!(published, if is_publisher { N } else { 0 });
            assert_eq!(
                received,
                if is_publisher { 2 * N } else { 3 * N },
                "subscriber {i}"
            );
            assert!(seqs.values().all(|&n| n == N), "subscriber {i}: {seqs:?}");
            assert_eq!(seqs.len(), if is_publisher { 2 } else { 3 });
        }
    };
    timeout(Duration::from_secs(90), run)
        .await
        .expect("fan-out within 90 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_arrive_at_another_node_once_in_order() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("batches").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        let publisher = a.subscriber(SubscriberConfig::default()).publisher();
        // An empty script cache (a restarted Redis) must not fail a batch.
        let client = redis::Client::open(server.url()).unwrap();
        let mut raw = client.get_multiplexed_async_connection().await.unwrap();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut raw)
            .await
            .unwrap();
        // 500 in batches of several sizes (one of them a single publication), while another
        // publisher on the same node publishes one by one.
        let singles = {
            let (a, topic) = (a.clone(), topic.clone());
            tokio::spawn(async move {
                for i in 0..50 {
                    a.publish(&topic, text(format!("s{i}"))).await.unwrap();
                }
            })
        };
        let mut sent = 0;
        let mut returned = Vec::new();
        for size in [1, 7, 100, 256, 136] {
            let batch = (sent..sent + size).map(|i| text(format!("m{i}"))).collect();
            returned.extend(publisher.publish_many(&topic, batch).await.unwrap());
            sent += size;
        }
        assert_eq!(sent, 500);
        singles.await.unwrap();
        let (mut m, mut s) = (0, 0);
        let mut last: Option<Position> = None;
        while m + s < 550 {
            let (t, p) = next_text(&mut sub_b).await;
            if let Some(last) = &last {
                assert_eq!(p.offset, last.offset + 1, "contiguous, once each");
            }
            last = Some(p.clone());
            if let Some(k) = t.strip_prefix('m') {
                assert_eq!(k.parse::<usize>().unwrap(), m, "batches out of order");
                assert_eq!(returned.get(m), Some(&p), "m{m}: the position the batch returned");
                m += 1;
            } else {
                assert_eq!(t, format!("s{s}"));
                s += 1;
            }
        }
        quiet(&mut sub_b, Duration::from_millis(300)).await;

        // Refused whole, before anything is sent: one message over max_payload, or not data.
        let max = HubConfig::default().max_payload;
        match publisher
            .publish_many(
                &topic,
                vec![text("ok".into()), Message::Binary(vec![0; max + 1].into())],
            )
            .await
        {
            Err(e @ Error::PayloadTooLarge { .. }) => {
                assert!(e.is_caller_fault());
                assert!(e.to_string().contains("max_payload"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            a.publish_many(&topic, vec![Message::Pong(Default::default())])
                .await,
            Err(Error::NotData)
        ));
        quiet(&mut sub_b, Duration::from_millis(300)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_while_redis_is_down_fails_promptly_with_nothing_published() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: true });
    let topic = Topic::new("batch outage").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        a.publish_many(&topic, vec![text("before".into()), text("before 2".into())])
            .await
            .unwrap();
        assert_eq!(next_text(&mut sub_b).await.0, "before");
        assert_eq!(next_text(&mut sub_b).await.0, "before 2");
        server.kill();
        // Give the node a moment to see its connections close: then nothing is sent at all.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let started = Instant::now();
        let batch: Vec<Message> = (0..10).map(|i| text(format!("lost {i}"))).collect();
        match timeout(Duration::from_secs(5), a.publish_many(&topic, batch)).await {
            Ok(Err(Error::Backplane { what, .. })) => {
                assert!(what.contains(&format!("127.0.0.1:{}", server.port())), "{what}")
            }
            other => panic!("a batch while Redis is down: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{:?}",
            started.elapsed()
        );
        server.restart();
        // Retried whole once Redis is back: every message once, in order.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let batch: Vec<Message> = (0..10).map(|i| text(format!("after {i}"))).collect();
            match a.publish_many(&topic, batch).await {
                Ok(_) => break,
                Err(Error::Backplane { .. }) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                other => panic!("{other:?}"),
            }
        }
        // Changed with issue 29: a restarted Redis is a new epoch, even one with an append-only
        // file (the node cannot tell that it lost nothing), so a gap comes first.
        assert!(matches!(next(&mut sub_b).await, Delivery::Gap { .. }));
        for i in 0..10 {
            assert_eq!(next_text(&mut sub_b).await.0, format!("after {i}"));
        }
        quiet(&mut sub_b, Duration::from_millis(300)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_come_back_by_themselves_after_redis_restarts() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: true });
    let topic = Topic::new("restart").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let publisher = a.subscriber(SubscriberConfig::default());
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        for i in 0..10 {
            publisher
                .publish(&topic, text(format!("before {i}")))
                .await
                .unwrap();
        }
        let mut seen = None;
        for i in 0..10 {
            let (t, p) = next_text(&mut sub_b).await;
            assert_eq!(t, format!("before {i}"));
            seen = Some(p);
        }
        let seen = seen.unwrap();

        server.kill();
        // Publishing fails promptly while Redis is down: nothing is queued.
        for i in 0..3 {
            let started = Instant::now();
            match timeout(
                Duration::from_secs(5),
                publisher.publish(&topic, text(format!("lost {i}"))),
            )
            .await
            {
                // Refused (not connected), or written to the connection that just died and not
                // answered: either way the error names the server.
                Ok(Err(e @ (Error::Backplane { .. } | Error::PartlyPublished { published: 0, .. }))) => {
                    assert!(
                        e.to_string().contains(&format!("127.0.0.1:{}", server.port())),
                        "{e}"
                    )
                }
                other => panic!("publish while Redis is down: {other:?}"),
            }
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "took {:?}",
                started.elapsed()
            );
        }

        server.restart();
        // Published right away, likely before node B has subscribed again: B recovers these
        // from history when it is restored (or receives them live), once each, in order.
        for i in 0..20 {
            publish_when_back(&publisher, &topic, format!("after {i}")).await;
        }
        // Changed with issue 29: this said "appendonly kept the epoch" and no gap. A restarted
        // Redis is a new epoch now, whatever its persistence: the node cannot tell from the
        // server whether the restart lost acknowledged writes (`appendfsync everysec`, an older
        // snapshot), and positions of the old epoch may not be given again. So: a gap, then
        // every publication of the new epoch from its first, once each, in order.
        match next(&mut sub_b).await {
            Delivery::Gap { resume, .. } => {
                if let Some(r) = resume {
                    assert_eq!(r.offset, 0, "{r}");
                }
            }
            other => panic!("expected a gap, got {other:?}"),
        }
        let mut last: Option<Position> = None;
        for i in 0..20 {
            let (t, p) = next_text(&mut sub_b).await;
            assert_eq!(t, format!("after {i}"));
            assert_ne!(p.epoch, seen.epoch, "a restart is a new epoch");
            assert_eq!(p.offset, last.as_ref().map_or(1, |l| l.offset + 1));
            last = Some(p);
        }
        quiet(&mut sub_b, Duration::from_millis(500)).await;

        // A live publication after the restart reaches B's subscription (restored, not restarted).
        publisher.publish(&topic, text("live".into())).await.unwrap();
        assert_eq!(next_text(&mut sub_b).await.0, "live");

        // A subscriber resuming from before the outage: a gap (the old epoch may have lost
        // something after it), then everything the new epoch holds, as the one that stayed.
        let mut late = b.subscriber(SubscriberConfig::default());
        assert_eq!(
            late.subscribe(&topic, Some(seen.clone())).await.unwrap(),
            Recovery::Lost
        );
        match next(&mut late).await {
            Delivery::Gap { resume, .. } => {
                let resume = resume.unwrap();
                assert_eq!((resume.offset, &resume.epoch), (0, &last.unwrap().epoch));
            }
            other => panic!("expected a gap, got {other:?}"),
        }
        for i in 0..20 {
            assert_eq!(next_text(&mut late).await.0, format!("after {i}"));
        }
        assert_eq!(next_text(&mut late).await.0, "live");
        quiet(&mut late, Duration::from_millis(300)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_cut_off_recovers_what_it_missed_from_history() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let proxy = Proxy::start(server.port()).await;
    let topic = Topic::new("cut off").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node_at(&proxy.url("redis"), HistoryConfig::default()).await;
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        let publisher = a.subscriber(SubscriberConfig::default());
        publisher.publish(&topic, text("m0".into())).await.unwrap();
        let (_, first) = next_text(&mut sub_b).await;

        proxy.cut();
        // B cannot publish (promptly refused), A can; B misses A's publications live.
        let started = Instant::now();
        // (The write that fails on the cut connection may have left part of the command on the
        // wire: the error says it may or may not have been published.)
        match timeout(Duration::from_secs(5), b.publish(&topic, text("from b".into()))).await {
            Ok(Err(Error::Backplane { .. } | Error::PartlyPublished { published: 0, .. })) => {}
            other => panic!("publish while cut off: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "took {:?}",
            started.elapsed()
        );
        for i in 1..=30 {
            publisher.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        // Still cut off: nothing arrives.
        quiet(&mut sub_b, Duration::from_millis(300)).await;

        proxy.reopen();
        // B reconnects by itself and catches up from history: each once, in order, no gap.
        for i in 1..=30 {
            let (t, p) = next_text(&mut sub_b).await;
            assert_eq!(t, format!("m{i}"));
            assert_eq!(p.epoch, first.epoch);
            assert_eq!(p.offset, first.offset + i);
        }
        // Then live ones, over the restored subscription.
        publisher.publish(&topic, text("m31".into())).await.unwrap();
        assert_eq!(next_text(&mut sub_b).await.0, "m31");
        b.publish(&topic, text("from b again".into())).await.unwrap();
        assert_eq!(next_text(&mut sub_b).await.0, "from b again");
        quiet(&mut sub_b, Duration::from_millis(300)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_server_fails_publishes_promptly_and_is_noticed() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("hung").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        let returned = a.publish(&topic, text("m0".into())).await.unwrap();
        assert_eq!(next_text(&mut sub_b).await, ("m0".to_owned(), returned.unwrap()));

        // A backplane watched directly, to see what it says.
        let (tx, mut watch) = mpsc::channel(EVENT_QUEUE);
        let watched = Redis::connect(&server.url(), HistoryConfig::default(), tx)
            .await
            .unwrap();
        watched.subscribe(&topic).await.unwrap();

        server.signal("STOP");
        let started = Instant::now();
        // Sent, never answered: it may or may not have been published, and the error says so
        // (it said Error::Backplane, as for a publication never sent).
        match timeout(Duration::from_secs(10), a.publish(&topic, text("lost".into()))).await {
            Ok(Err(Error::PartlyPublished {
                published: 0,
                sent: 1,
                source,
            })) => assert!(matches!(*source, Error::Backplane { .. }), "{source:?}"),
            other => panic!("publish to a hung server: {other:?}"),
        }
        assert!(
            started.elapsed() < Duration::from_secs(4),
            "took {:?}",
            started.elapsed()
        );
        // The pub/sub connection's health check gives up on it (PING every 5 s, 2 s to answer).
        match timeout(Duration::from_secs(10), watch.recv()).await {
            Ok(Some(Event::Lost { reason })) => assert!(reason.contains("PING"), "{reason}"),
            other => panic!("expected Lost, got {other:?}"),
        }
        server.signal("CONT");
        match timeout(Duration::from_secs(10), watch.recv()).await {
            Ok(Some(Event::Restored)) => {}
            other => panic!("expected Restored, got {other:?}"),
        }
        publish_when_back(&a.subscriber(SubscriberConfig::default()), &topic, "m1".into()).await;
        // "lost" may or may not have reached Redis before it hung: if it did, it comes first.
        let (mut t, _) = next_text(&mut sub_b).await;
        if t == "lost" {
            t = next_text(&mut sub_b).await.0;
        }
        assert_eq!(t, "m1");
        quiet(&mut sub_b, Duration::from_millis(300)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_that_wipes_the_history_is_reported_as_a_gap() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("wiped").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let publisher = a.subscriber(SubscriberConfig::default());
        let mut sub_b = b.subscriber(SubscriberConfig::default());
        sub_b.subscribe(&topic, None).await.unwrap();
        for i in 0..5 {
            publisher.publish(&topic, text(format!("old {i}"))).await.unwrap();
        }
        let mut old = None;
        for i in 0..5 {
            let (t, p) = next_text(&mut sub_b).await;
            assert_eq!(t, format!("old {i}"));
            old = Some(p);
        }
        let old = old.unwrap();

        server.kill();
        server.restart();
        // B comes back and finds its position gone: a gap, not a silent miss.
        match next(&mut sub_b).await {
            Delivery::Gap { topic: t, resume } => {
                assert_eq!(t, topic);
                assert_eq!(resume, None, "nothing published in the new epoch yet");
            }
            other => panic!("expected a gap, got {other:?}"),
        }
        publish_when_back(&publisher, &topic, "new 0".into()).await;
        let (t, p) = next_text(&mut sub_b).await;
        assert_eq!(t, "new 0");
        assert_ne!(p.epoch, old.epoch, "a new epoch");
        assert_eq!(p.offset, 1);

        // Resuming from the old epoch: recovery is impossible, and said so.
        let mut late = b.subscriber(SubscriberConfig::default());
        assert_eq!(
            late.subscribe(&topic, Some(old.clone())).await.unwrap(),
            Recovery::Lost
        );
        // Changed with issue 29: the gap said `resume` = "new 0"'s position and "new 0" was never
        // delivered, though Redis held it. Now `resume` is just before the first publication
        // after the gap, and everything the new epoch holds follows.
        match next(&mut late).await {
            Delivery::Gap { resume, .. } => assert_eq!(
                resume,
                Some(Position {
                    epoch: p.epoch.clone(),
                    offset: 0
                })
            ),
            other => panic!("expected a gap, got {other:?}"),
        }
        assert_eq!(next_text(&mut late).await, ("new 0".into(), p.clone()));
        publisher.publish(&topic, text("new 1".into())).await.unwrap();
        assert_eq!(next_text(&mut late).await.0, "new 1");
        assert_eq!(next_text(&mut sub_b).await.0, "new 1");
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_gets_exactly_the_missed_then_live_publications() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("resume").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut first = b.subscriber(SubscriberConfig::default());
        first.subscribe(&topic, None).await.unwrap();
        for i in 1..=10 {
            a.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        let mut at4 = None;
        for i in 1..=10 {
            let (t, p) = next_text(&mut first).await;
            assert_eq!(t, format!("m{i}"));
            if i == 4 {
                at4 = Some(p);
            }
        }
        let at4 = at4.unwrap();
        drop(first);
        for i in 11..=20 {
            a.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        // Live publications keep coming while the subscriber resumes: the seam must hold.
        let publishing = {
            let a = a.clone();
            let topic = topic.clone();
            tokio::spawn(async move {
                for i in 21..=200 {
                    a.publish(&topic, text(format!("m{i}"))).await.unwrap();
                }
            })
        };
        let mut resumed = b.subscriber(SubscriberConfig::default());
        match resumed.subscribe(&topic, Some(at4.clone())).await.unwrap() {
            Recovery::Recovered { count } => assert!(count >= 16, "{count}"),
            other => panic!("{other:?}"),
        }
        for i in 5..=200 {
            let (t, p) = next_text(&mut resumed).await;
            assert_eq!(t, format!("m{i}"));
            assert_eq!(p.offset, i);
            assert_eq!(p.epoch, at4.epoch);
        }
        publishing.await.unwrap();
        quiet(&mut resumed, Duration::from_millis(300)).await;
        // Resuming from the newest position: nothing to recover.
        let mut up_to_date = a.subscriber(SubscriberConfig::default());
        let newest = Position {
            epoch: at4.epoch.clone(),
            offset: 200,
        };
        assert_eq!(
            up_to_date.subscribe(&topic, Some(newest)).await.unwrap(),
            Recovery::Recovered { count: 0 }
        );
        quiet(&mut up_to_date, Duration::from_millis(200)).await;
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_is_bounded_by_length_and_age_and_says_when_it_is_short() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let run = async {
        // Trimmed: 1,000 publications with max_len 10 (MAXLEN ~ keeps at least 10, about 100).
        let (tx, _rx) = mpsc::channel(EVENT_QUEUE);
        let redis = Redis::connect(
            &server.url(),
            HistoryConfig::new(10, Duration::from_secs(300)),
            tx,
        )
        .await
        .unwrap();
        let topic = Topic::new("trimmed").unwrap();
        for i in 0..1000u32 {
            redis.publish(publication(&topic, i)).await.unwrap();
        }
        let Ok(History::Complete(all)) = redis.history(&topic, None, 10_000).await else {
            panic!()
        };
        assert!(all.len() >= 10 && all.len() < 1000, "{}", all.len());
        let newest = all.last().unwrap().position.clone().unwrap();
        assert_eq!(newest.offset, 1000);
        let offsets: Vec<u64> = all.iter().map(|p| p.position.as_ref().unwrap().offset).collect();
        assert!(offsets.windows(2).all(|w| w[1] == w[0] + 1), "contiguous");
        let old = Position {
            epoch: newest.epoch.clone(),
            offset: 1,
        };
        match redis.history(&topic, Some(&old), 100).await.unwrap() {
            History::Lost { latest } => assert_eq!(latest, Some(newest.clone())),
            other => panic!("trimmed history must be lost: {other:?}"),
        }
        // Within what is kept: exactly the rest, limited.
        let recent = Position {
            epoch: newest.epoch.clone(),
            offset: 995,
        };
        let Ok(History::Complete(rest)) = redis.history(&topic, Some(&recent), 3).await else {
            panic!()
        };
        let offsets: Vec<u64> = rest.iter().map(|p| p.position.as_ref().unwrap().offset).collect();
        assert_eq!(offsets, [996, 997, 998]);
        assert_eq!(&rest[0].payload[..], b"995");
        let Ok(History::Complete(none)) = redis.history(&topic, Some(&newest), 3).await else {
            panic!()
        };
        assert!(none.is_empty());
        let other_epoch = Position {
            epoch: "elsewhere".into(),
            offset: 999,
        };
        assert!(matches!(
            redis.history(&topic, Some(&other_epoch), 3).await.unwrap(),
            History::Lost { .. }
        ));
        let never = Topic::new("never published").unwrap();
        assert!(matches!(
            redis.history(&never, None, 3).await.unwrap(),
            History::Complete(v) if v.is_empty()
        ));
        assert!(matches!(
            redis.history(&never, Some(&newest), 3).await.unwrap(),
            History::Lost { latest: None }
        ));

        // Expired: the Stream goes after max_age without publications, the offsets stay.
        let (tx, _rx2) = mpsc::channel(EVENT_QUEUE);
        let short = Redis::connect(
            &server.url(),
            HistoryConfig::new(100, Duration::from_millis(500)),
            tx,
        )
        .await
        .unwrap();
        let topic = Topic::new("expiring").unwrap();
        for i in 0..5 {
            short.publish(publication(&topic, i)).await.unwrap();
        }
        let Ok(History::Complete(kept)) = short.history(&topic, None, 100).await else {
            panic!()
        };
        assert_eq!(kept.len(), 5);
        let fifth = kept[4].position.clone().unwrap();
        let second = kept[1].position.clone().unwrap();
        tokio::time::sleep(Duration::from_millis(1200)).await;
        assert!(matches!(
            short.history(&topic, Some(&second), 100).await.unwrap(),
            History::Lost { latest: Some(p) } if p == fifth
        ));
        assert!(matches!(
            short.history(&topic, Some(&fifth), 100).await.unwrap(),
            History::Complete(v) if v.is_empty()
        ));
        short.publish(publication(&topic, 5)).await.unwrap();
        let Ok(History::Complete(after)) = short.history(&topic, Some(&fifth), 100).await else {
            panic!()
        };
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].position.as_ref().unwrap().offset, 6);
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

fn publication(topic: &Topic, i: u32) -> Publication {
    Publication {
        topic: topic.clone(),
        position: None,
        origin: Origin {
            node: 1,
            publisher: 2,
        },
        kind: sockeye::DataKind::Binary,
        payload: i.to_string().into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backplane_subscribes_once_and_skips_foreign_messages() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let run = async {
        let (tx, mut rx) = mpsc::channel(EVENT_QUEUE);
        let redis = Redis::connect(&server.url(), HistoryConfig::default(), tx)
            .await
            .unwrap();
        assert!(redis.capabilities().history && redis.capabilities().contiguous_offsets);
        let topic = Topic::new("twice").unwrap();
        redis.subscribe(&topic).await.unwrap();
        redis.subscribe(&topic).await.unwrap();
        // Garbage on the topic's channel, from another client: skipped, not fatal.
        let client = redis::Client::open(server.url()).unwrap();
        let mut raw = client.get_multiplexed_async_connection().await.unwrap();
        let channel = format!("sockeye:{{{}}}", topic.to_hex());
        for garbage in [
            &b""[..],
            b"\x01",
            b"\x01x\ny\n",
            b"\x02 future",
            b"\x01\x31\ne\n\0\0\0",
        ] {
            let _: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg(garbage)
                .query_async(&mut raw)
                .await
                .unwrap();
        }
        redis.publish(publication(&topic, 7)).await.unwrap();
        match timeout(Duration::from_secs(5), rx.recv()).await.unwrap().unwrap() {
            Event::Publication(p) => {
                assert_eq!(&p.payload[..], b"7");
                assert_eq!(
                    p.origin,
                    Origin {
                        node: 1,
                        publisher: 2
                    }
                );
                assert_eq!(p.position.unwrap().offset, 1);
            }
            other => panic!("{other:?}"),
        }
        // Once, though subscribed twice.
        assert!(timeout(Duration::from_millis(300), rx.recv()).await.is_err());
        redis.unsubscribe(&topic).await.unwrap();
        redis.publish(publication(&topic, 8)).await.unwrap();
        assert!(timeout(Duration::from_millis(300), rx.recv()).await.is_err());
    };
    timeout(Duration::from_secs(30), run).await.expect("within 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_clearly() {
    let (tx, _rx) = mpsc::channel(EVENT_QUEUE);
    for url in [
        "",
        "localhost:6379",
        "http://localhost:6379",
        "redis://",
        "redis://h:port",
        "redis://h/db",
    ] {
        match Redis::connect(url, HistoryConfig::default(), tx.clone()).await {
            Err(e @ Error::InvalidUrl(_)) => {
                assert!(e.is_caller_fault());
                assert!(e.to_string().contains("redis://"), "{e}");
            }
            other => panic!("{url:?}: {other:?}"),
        }
    }
    // Nothing listens there: a prompt, clear error.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = Instant::now();
    match timeout(
        Duration::from_secs(10),
        Redis::connect(
            &format!("redis://127.0.0.1:{port}"),
            HistoryConfig::default(),
            tx.clone(),
        ),
    )
    .await
    .expect("connect gives up within its timeout")
    {
        Err(e @ Error::Backplane { .. }) => {
            assert!(!e.is_caller_fault());
            assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(6));

    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let hub = node(&server, HistoryConfig::default()).await;
    let topic = Topic::new("big").unwrap();
    let max = HubConfig::default().max_payload;
    match hub
        .publish(&topic, Message::Binary(vec![0; max + 1].into()))
        .await
    {
        Err(Error::PayloadTooLarge { len, max: m }) => assert_eq!((len, m), (max + 1, max)),
        other => panic!("{other:?}"),
    }
    // The largest allowed one goes through.
    let mut sub = hub.subscriber(SubscriberConfig::default());
    sub.subscribe(&topic, None).await.unwrap();
    hub.publish(&topic, Message::Binary(vec![7; max].into()))
        .await
        .unwrap();
    match next(&mut sub).await {
        Delivery::Message(m) if matches!(m.message(), Message::Binary(_)) => {
            assert_eq!(m.message().as_payload().len(), max);
        }
        other => panic!("{other:?}"),
    }
}

/// Deliveries until none arrives for `quiet_for` (at most `max` of them, within 30 s).
/// A delivery as `text@offset@epoch` or `GAP(resume)`, for messages.
fn show(d: &Delivery) -> String {
    match d {
        Delivery::Message(m) => format!(
            "{}@{}",
            String::from_utf8_lossy(m.message().as_payload()),
            m.position().map_or("-".into(), ToString::to_string)
        ),
        Delivery::Gap { resume, .. } => {
            format!(
                "GAP({})",
                resume.as_ref().map_or("none".into(), ToString::to_string)
            )
        }
        other => format!("{other:?}"),
    }
}

/// A short summary of what a subscriber received: how many messages, gaps, and the first and
/// last few.
fn summary(ds: &[Delivery]) -> String {
    let shown: Vec<String> = ds.iter().map(show).collect();
    let gaps = ds.iter().filter(|d| matches!(d, Delivery::Gap { .. })).count();
    let head = shown.iter().take(4).cloned().collect::<Vec<_>>().join(" ");
    let tail = shown
        .iter()
        .rev()
        .take(3)
        .rev()
        .cloned()
        .collect::<Vec<_>>()
        .join(" ");
    format!("{} deliveries ({gaps} gaps): {head} ... {tail}", ds.len())
}

/// A raw command connection to the server, for SAVE, INFO, REPLICAOF.
async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// What must hold after a rollback of the server to the state after `m1..m100` (while nodes had
/// delivered up to `m150`), once `n1..n60` were published: `live` (a subscriber that stayed
/// connected) got a gap, then every `n`, each once, in order; `resumed` (a fresh one resuming
/// from `m120`'s position) was not told it recovered, got a gap, then every `n`; no `n` has the
/// position an `m` had. Returns the problems found.
fn rollback_problems(
    old: &HashMap<String, Position>,
    live: &[Delivery],
    recovery: &Recovery,
    resumed: &[Delivery],
) -> Vec<String> {
    let want: Vec<String> = (1..=60).map(|i| format!("n{i}")).collect();
    let mut problems = Vec::new();
    for (who, ds) in [("live subscriber", live), ("resumed subscriber", resumed)] {
        let got = texts(ds);
        let news = got.iter().filter(|t| t.starts_with('n')).count();
        if got != want {
            problems.push(format!(
                "{who}: {news} of the 60 new publications arrived ({} messages in all); {}",
                got.len(),
                summary(ds)
            ));
        }
        if !matches!(ds.first(), Some(Delivery::Gap { .. })) {
            problems.push(format!("{who}: no gap first; {}", summary(ds)));
        }
        for d in ds {
            if let Delivery::Message(m) = d
                && let Some(p) = m.position()
                && old.values().any(|o| o == p)
            {
                problems.push(format!(
                    "{who}: {} reuses the position of an older publication",
                    show(d)
                ));
                break;
            }
        }
    }
    if let Recovery::Recovered { count } = recovery {
        problems.push(format!(
            "resuming from m120's position was Recovered {{ count: {count} }}: {}",
            texts(resumed).join(",")
        ));
    }
    problems
}

/// The rollback scenario of issue 29 through `url`: m1..m150 published and delivered to a
/// subscriber on node B, `checkpoint` run after m100 (what the server will come back to), `crash`
/// after m150 (the server comes back at m100's position, or another one that has only m1..m100
/// takes over), then n1..n60 published; checked with [`rollback_problems`].
async fn rollback_scenario(
    url: String,
    topic: &str,
    checkpoint: impl AsyncFnOnce(),
    crash: impl AsyncFnOnce(),
) {
    let topic = Topic::new(topic).unwrap();
    let a = node_at(&url, HistoryConfig::default()).await;
    let b = node_at(&url, HistoryConfig::default()).await;
    let publisher = a.subscriber(SubscriberConfig::default());
    let mut live = b.subscriber(SubscriberConfig::default());
    live.subscribe(&topic, None).await.unwrap();
    let mut old = HashMap::new();
    let mut checkpoint = Some(checkpoint);
    for i in 1..=150 {
        if i == 101
            && let Some(checkpoint) = checkpoint.take()
        {
            checkpoint().await;
        }
        publisher.publish(&topic, text(format!("m{i}"))).await.unwrap();
        let (t, p) = next_text(&mut live).await;
        assert_eq!(t, format!("m{i}"));
        old.insert(t, p);
    }
    crash().await;
    for i in 1..=60 {
        publish_when_back(&publisher, &topic, format!("n{i}")).await;
    }
    let got_live = drain(&mut live, 1, Duration::from_millis(1500), 200).await;
    let mut resumed = b.subscriber(SubscriberConfig::default());
    let recovery = resumed
        .subscribe(&topic, Some(old["m120"].clone()))
        .await
        .unwrap();
    let got_resumed = drain(&mut resumed, 1, Duration::from_millis(800), 200).await;
    let problems = rollback_problems(&old, &got_live, &recovery, &got_resumed);
    assert!(
        problems.is_empty(),
        "after the rollback:\n{}",
        problems.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_from_an_older_snapshot_loses_nothing_silently() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: false });
    let url = server.url();
    let run = rollback_scenario(
        url.clone(),
        "rollback rdb",
        // The snapshot Redis will come back from: m1..m100.
        async || {
            let _: () = redis::cmd("SAVE")
                .query_async(&mut raw(&url).await)
                .await
                .unwrap();
        },
        // A crash: Redis comes back from the snapshot, at m100's position, in the same epoch.
        async || {
            server.kill();
            server.restart();
        },
    );
    timeout(Duration::from_secs(90), run).await.expect("within 90 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_only_file_that_lost_its_last_second_loses_nothing_silently() {
    let mut server =
        BackplaneServer::start_with(Kind::Redis { persistent: true }, &["--appendfsync", "everysec"]);
    let aof_dir = server.dir().join("appendonlydir");
    let synced: Arc<Mutex<Option<(std::path::PathBuf, u64)>>> = Arc::default();
    let run = rollback_scenario(
        server.url(),
        "rollback aof",
        // `everysec` has fsynced m1..m100 a second later: where the file stands then.
        async || {
            tokio::time::sleep(Duration::from_millis(1500)).await;
            let incr: Vec<_> = std::fs::read_dir(&aof_dir)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.to_string_lossy().ends_with(".incr.aof"))
                .collect();
            assert_eq!(incr.len(), 1, "{incr:?}");
            let len = std::fs::metadata(&incr[0]).unwrap().len();
            *synced.lock().unwrap() = Some((incr[0].clone(), len));
        },
        // kill -9 leaves what Redis wrote in the OS's cache, which keeps it: the loss of the
        // un-synced tail (a power cut, a kernel crash: up to a second or two with `everysec`) is
        // made by cutting the file back to what was synced.
        async || {
            server.kill();
            let (file, len) = synced.lock().unwrap().take().unwrap();
            let f = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
            assert!(f.metadata().unwrap().len() > len, "m101..m150 were appended");
            f.set_len(len).unwrap();
            drop(f);
            server.restart();
        },
    );
    timeout(Duration::from_secs(90), run).await.expect("within 90 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_promoted_while_behind_loses_nothing_silently() {
    let primary = BackplaneServer::start(Kind::Redis { persistent: false });
    let mut primary = Some(primary);
    let primary_port = primary.as_ref().unwrap().port();
    // The replica replicates through a proxy of its own, so that its link can be killed.
    let link = Proxy::start(primary_port).await;
    let replica = BackplaneServer::start_with(
        Kind::Redis { persistent: false },
        &["--replicaof", "127.0.0.1", &link.port().to_string()],
    );
    // The nodes reach the primary at an address that moves to the replica when it is promoted.
    let address = Proxy::start(primary_port).await;
    let mut to_replica = raw(&replica.url()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut to_replica)
            .await
            .unwrap();
        if info.contains("master_link_status:up") {
            break;
        }
        assert!(Instant::now() < deadline, "the replica does not sync: {info}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let primary_url = primary.as_ref().unwrap().url();
    let run = rollback_scenario(
        address.url("redis"),
        "rollback replica",
        // The replica has m1..m100, then its link dies: it stays behind.
        async || {
            let acked: i64 = redis::cmd("WAIT")
                .arg(1)
                .arg(5000)
                .query_async(&mut raw(&primary_url).await)
                .await
                .unwrap();
            assert_eq!(acked, 1, "the replica has m1..m100");
            link.cut();
        },
        // The primary dies; the replica, without m101..m150, is promoted and the address moves
        // to it.
        async || {
            drop(primary.take());
            let _: () = redis::cmd("REPLICAOF")
                .arg("NO")
                .arg("ONE")
                .query_async(&mut to_replica)
                .await
                .unwrap();
            address.retarget(replica.port());
        },
    );
    timeout(Duration::from_secs(90), run).await.expect("within 90 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_across_an_epoch_change_gets_what_the_new_epoch_holds() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("across epochs").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut stayed = b.subscriber(SubscriberConfig::default());
        stayed.subscribe(&topic, None).await.unwrap();
        a.publish(&topic, text("m1".into())).await.unwrap();
        let (_, kept) = next_text(&mut stayed).await;
        // Redis restarts without its data (a new epoch); m2 and m3 are published in it.
        server.kill();
        server.restart();
        let publisher = a.subscriber(SubscriberConfig::default());
        publish_when_back(&publisher, &topic, "m2".into()).await;
        publish_when_back(&publisher, &topic, "m3".into()).await;
        // A client that kept m1's position resumes (on another node, say).
        let c = node(&server, HistoryConfig::default()).await;
        let mut resumed = c.subscriber(SubscriberConfig::default());
        let recovery = resumed.subscribe(&topic, Some(kept.clone())).await.unwrap();
        a.publish(&topic, text("m4".into())).await.unwrap();
        let got_stayed = drain(&mut stayed, 4, Duration::from_millis(800), 20).await;
        let got_resumed = drain(&mut resumed, 4, Duration::from_millis(800), 20).await;
        let shown = |ds: &[Delivery]| ds.iter().map(show).collect::<Vec<_>>().join(" ");
        let (s, r) = (shown(&got_stayed), shown(&got_resumed));
        // A gap for what the old epoch may have lost, then everything the new one holds, then
        // live; the same for both.
        assert_eq!(recovery, Recovery::Lost, "resumed: {r}");
        assert_eq!(
            texts(&got_resumed),
            ["m2", "m3", "m4"],
            "resumed: {r}\nstayed: {s}"
        );
        assert_eq!(texts(&got_stayed), ["m2", "m3", "m4"], "stayed: {s}");
        assert!(matches!(got_resumed[0], Delivery::Gap { .. }), "resumed: {r}");
        assert!(matches!(got_stayed[0], Delivery::Gap { .. }), "stayed: {s}");
        assert_eq!(got_resumed.len(), 4, "resumed: {r}");
        assert_eq!(got_stayed.len(), 4, "stayed: {s}");
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_keeps_a_gaps_resume_and_drops_at_once_skips_nothing() {
    let mut server = BackplaneServer::start(Kind::Redis { persistent: false });
    let proxy = Proxy::start(server.port()).await;
    let topic = Topic::new("gap contract").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        // Node B reaches Redis through a proxy: cut off while Redis restarts and n1..n5 are
        // published in the new epoch; when B is back, it finds them.
        let b = node_at(&proxy.url("redis"), HistoryConfig::default()).await;
        let mut client = b.subscriber(SubscriberConfig::default());
        client.subscribe(&topic, None).await.unwrap();
        a.publish(&topic, text("old".into())).await.unwrap();
        assert_eq!(next_text(&mut client).await.0, "old");
        proxy.cut();
        server.kill();
        server.restart();
        let publisher = a.subscriber(SubscriberConfig::default());
        for i in 1..=5 {
            publish_when_back(&publisher, &topic, format!("n{i}")).await;
        }
        proxy.reopen();
        // The client keeps the gap's `resume` and drops right after it.
        let resume = match next(&mut client).await {
            Delivery::Gap { resume, .. } => resume,
            other => panic!("expected a gap, got {other:?}"),
        };
        drop(client);
        for i in 6..=8 {
            a.publish(&topic, text(format!("n{i}"))).await.unwrap();
        }
        let resume = resume.expect("the new epoch has publications: a position to resume from");
        let mut again = b.subscriber(SubscriberConfig::default());
        let recovery = again.subscribe(&topic, Some(resume.clone())).await.unwrap();
        let got = drain(&mut again, 8, Duration::from_millis(800), 20).await;
        let want: Vec<String> = (1..=8).map(|i| format!("n{i}")).collect();
        assert_eq!(
            (recovery, texts(&got)),
            (Recovery::Recovered { count: 8 }, want),
            "resuming from the gap's resume {resume}: {}",
            got.iter().map(show).collect::<Vec<_>>().join(" ")
        );
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_refuses_info_still_works() {
    // INFO renamed away (some hosted Redis do): the server's life is unknown, a restart is not
    // noticed by the script, and the hub's own checks remain; publishing and resuming work.
    let server = BackplaneServer::start_with(
        Kind::Redis { persistent: false },
        &["--rename-command", "INFO", ""],
    );
    let topic = Topic::new("no info").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node(&server, HistoryConfig::default()).await;
        let mut s = b.subscriber(SubscriberConfig::default());
        s.subscribe(&topic, None).await.unwrap();
        for i in 0..3 {
            a.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        let (_, first) = next_text(&mut s).await;
        assert_eq!(next_text(&mut s).await.0, "m1");
        assert_eq!(next_text(&mut s).await.0, "m2");
        let mut again = a.subscriber(SubscriberConfig::default());
        assert_eq!(
            again.subscribe(&topic, Some(first)).await.unwrap(),
            Recovery::Recovered { count: 2 }
        );
        assert_eq!(next_text(&mut again).await.0, "m1");
    };
    timeout(Duration::from_secs(30), run).await.expect("within 30 s");
}

/// Issue 39 (a): a node that keeps no history (a publish-only backend) consumed an offset and
/// skipped the Stream, and a history read checked only its first entry: a subscriber resuming
/// from before m1..m3 was told `Recovered` and given m1 and m3; m2 was gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_without_history_leaves_no_hole_in_the_topics_history() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("mixed history").unwrap();
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let backend = node(&server, HistoryConfig::none()).await;
        let mut first = a.subscriber(SubscriberConfig::default());
        first.subscribe(&topic, None).await.unwrap();
        a.publish(&topic, text("m0".into())).await.unwrap();
        let (_, at0) = next_text(&mut first).await;
        drop(first);
        a.publish(&topic, text("m1".into())).await.unwrap();
        backend.publish(&topic, text("m2".into())).await.unwrap();
        a.publish(&topic, text("m3".into())).await.unwrap();
        let mut resumed = a.subscriber(SubscriberConfig::default());
        let recovery = resumed.subscribe(&topic, Some(at0)).await.unwrap();
        let got = drain(&mut resumed, 3, Duration::from_millis(300), 10).await;
        assert_eq!(
            (recovery, texts(&got)),
            (
                Recovery::Recovered { count: 3 },
                vec!["m1".into(), "m2".into(), "m3".into()]
            ),
            "{}",
            got.iter().map(show).collect::<Vec<_>>().join(" ")
        );
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

/// Issue 39 (a), the class: a history with a hole (an entry gone from the middle of the Stream,
/// here deleted by hand) is not complete. Before, the read checked only its first entry: a
/// resume from m1 was `Recovered` with m2, m4, m5, and the hub's own repair after an outage
/// read it the same way. Now: a gap at m3, then what follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hole_in_the_history_is_a_gap_not_a_recovery() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let proxy = Proxy::start(server.port()).await;
    let topic = Topic::new("holed").unwrap();
    let stream = format!("sockeye:{{{}}}:stream", topic.to_hex());
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        // Node B is cut off while m2..m5 are published, then finds m3 gone.
        let b = node_at(&proxy.url("redis"), HistoryConfig::default()).await;
        let mut stayed = b.subscriber(SubscriberConfig::default());
        stayed.subscribe(&topic, None).await.unwrap();
        a.publish(&topic, text("m1".into())).await.unwrap();
        let (_, at1) = next_text(&mut stayed).await;
        proxy.cut();
        for i in 2..=5 {
            a.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        let mut conn = raw(&server.url()).await;
        let deleted: u64 = redis::cmd("XDEL")
            .arg(&stream)
            .arg("3-0")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, 1);
        let gap_at = |offset| Position {
            epoch: at1.epoch.clone(),
            offset,
        };
        match a.history(&topic, Some(&at1), 10).await.unwrap() {
            History::Lost { latest } => assert_eq!(latest, Some(gap_at(5))),
            other => panic!("from m1: {other:?}"),
        }
        // From the start: what follows the hole (it reaches the latest), no more.
        match a.history(&topic, None, 10).await.unwrap() {
            History::Complete(ps) => assert_eq!(
                ps.iter()
                    .map(|p| p.position.clone().unwrap().offset)
                    .collect::<Vec<_>>(),
                [4, 5]
            ),
            other => panic!("from the start: {other:?}"),
        }
        // From after the hole: complete.
        assert!(matches!(
            a.history(&topic, Some(&gap_at(3)), 10).await.unwrap(),
            History::Complete(ps) if ps.len() == 2
        ));
        let mut resumed = a.subscriber(SubscriberConfig::default());
        let recovery = resumed.subscribe(&topic, Some(at1.clone())).await.unwrap();
        let got = drain(&mut resumed, 3, Duration::from_millis(300), 10).await;
        let shown = got.iter().map(show).collect::<Vec<_>>().join(" ");
        assert_eq!(recovery, Recovery::Lost, "resumed: {shown}");
        assert!(
            matches!(&got[0], Delivery::Gap { resume: Some(r), .. } if *r == gap_at(3)),
            "resumed: {shown}"
        );
        assert_eq!(texts(&got), ["m4", "m5"], "resumed: {shown}");
        // The hub's repair after an outage: the same.
        proxy.reopen();
        let got = drain(&mut stayed, 3, Duration::from_millis(500), 10).await;
        let shown = got.iter().map(show).collect::<Vec<_>>().join(" ");
        assert!(
            matches!(&got[0], Delivery::Gap { resume: Some(r), .. } if *r == gap_at(3)),
            "stayed: {shown}"
        );
        assert_eq!(texts(&got), ["m4", "m5"], "stayed: {shown}");
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

/// Issue 39 (a), the hub's repair for a node that had delivered nothing yet: it read the
/// history from its start and delivered what was left as if complete. With m1 gone from the
/// Stream, a subscriber that stayed through the outage got m2 and m3 and no gap. Now: a gap
/// (resume at m1), then m2 and m3.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repair_from_the_start_of_a_history_that_lost_its_first_is_a_gap() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let proxy = Proxy::start(server.port()).await;
    let topic = Topic::new("lost first").unwrap();
    let stream = format!("sockeye:{{{}}}:stream", topic.to_hex());
    let run = async {
        let a = node(&server, HistoryConfig::default()).await;
        let b = node_at(&proxy.url("redis"), HistoryConfig::default()).await;
        let mut stayed = b.subscriber(SubscriberConfig::default());
        stayed.subscribe(&topic, None).await.unwrap();
        proxy.cut();
        let mut at = None;
        for i in 1..=3 {
            at = a.publish(&topic, text(format!("m{i}"))).await.unwrap();
        }
        let mut conn = raw(&server.url()).await;
        let deleted: u64 = redis::cmd("XDEL")
            .arg(&stream)
            .arg("1-0")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(deleted, 1);
        proxy.reopen();
        let got = drain(&mut stayed, 3, Duration::from_millis(500), 10).await;
        let shown = got.iter().map(show).collect::<Vec<_>>().join(" ");
        let epoch = at.unwrap().epoch;
        assert!(
            matches!(&got[0], Delivery::Gap { resume: Some(r), .. } if r.offset == 1 && r.epoch == epoch),
            "stayed: {shown}"
        );
        assert_eq!(texts(&got), ["m2", "m3"], "stayed: {shown}");
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

/// Issue 39 (a): a topic that only a node without history publishes on, followed by nodes with
/// history (a publish-only backend behind web nodes): its publications were never kept, and a
/// resume was a gap however short the outage. The subscribing node records its history setting
/// for the topic, and the backend writes the Stream with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_only_a_publisher_without_history_publishes_on_is_recovered() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("backend only").unwrap();
    let run = async {
        let web = node(&server, HistoryConfig::default()).await;
        let backend = node(&server, HistoryConfig::none()).await;
        let mut first = web.subscriber(SubscriberConfig::default());
        first.subscribe(&topic, None).await.unwrap();
        backend.publish(&topic, text("m1".into())).await.unwrap();
        let (_, at1) = next_text(&mut first).await;
        drop(first);
        backend.publish(&topic, text("m2".into())).await.unwrap();
        backend.publish(&topic, text("m3".into())).await.unwrap();
        let mut resumed = web.subscriber(SubscriberConfig::default());
        let recovery = resumed.subscribe(&topic, Some(at1)).await.unwrap();
        let got = drain(&mut resumed, 2, Duration::from_millis(300), 10).await;
        assert_eq!(
            (recovery, texts(&got)),
            (Recovery::Recovered { count: 2 }, vec!["m2".into(), "m3".into()]),
            "{}",
            got.iter().map(show).collect::<Vec<_>>().join(" ")
        );
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

/// Review of issue 39 (a)'s fix: a node without history writes the topic's Stream with the
/// topic's recorded lifetime, but it set the meta hash's lifetime from its own (the 24-hour
/// minimum), so a topic kept for 3 days lost its meta after 24 quiet hours while its Stream
/// lived on: a resume then read `Lost` inside the promised window, and the next publication
/// started a new epoch. The meta's lifetime is never shortened below the Stream's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_without_history_never_shortens_the_topics_meta_below_its_history() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    let topic = Topic::new("kept three days").unwrap();
    let meta = format!("sockeye:{{{}}}:meta", topic.to_hex());
    let stream = format!("sockeye:{{{}}}:stream", topic.to_hex());
    let three_days = Duration::from_secs(3 * 24 * 3600);
    let run = async {
        let a = node(&server, HistoryConfig::new(1000, three_days)).await;
        let backend = node(&server, HistoryConfig::none()).await;
        a.publish(&topic, text("m1".into())).await.unwrap();
        backend.publish(&topic, text("m2".into())).await.unwrap();
        let mut conn = raw(&server.url()).await;
        let meta_ttl: i64 = redis::cmd("PTTL")
            .arg(&meta)
            .query_async(&mut conn)
            .await
            .unwrap();
        let stream_ttl: i64 = redis::cmd("PTTL")
            .arg(&stream)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            stream_ttl > 2 * 24 * 3600 * 1000,
            "the Stream keeps the topic's 3 days: {stream_ttl} ms"
        );
        assert!(
            meta_ttl >= stream_ttl,
            "the meta ({meta_ttl} ms) must outlive the Stream ({stream_ttl} ms)"
        );
    };
    timeout(Duration::from_secs(60), run).await.expect("within 60 s");
}

/// Issue 39 1g: a hub that takes nothing for a while (behind, or busy) while a burst arrives.
/// What Redis sends meanwhile must not pile up in this process without bound (the Redis
/// client's push channel is unbounded): past the event queue, publications are dropped and the
/// topic is reported, for the hub to repair from history or report as a gap.
#[tokio::test]
async fn a_burst_the_hub_does_not_take_is_bounded_and_reported() {
    let server = BackplaneServer::start(Kind::Redis { persistent: false });
    const QUEUE: usize = 8;
    let (tx, mut rx) = mpsc::channel(QUEUE);
    let redis = Redis::connect(&server.url(), HistoryConfig::default(), tx)
        .await
        .unwrap();
    let topic = Topic::new("burst").unwrap();
    redis.subscribe(&topic).await.unwrap();
    let burst: Vec<Publication> = (0..2000).map(|i| publication(&topic, i)).collect();
    redis.publish_many(burst).await.unwrap();
    // Time for Redis to send it all while the hub takes nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut buffered = 0;
    let mut reported = false;
    while let Ok(Some(event)) = timeout(Duration::from_millis(300), rx.recv()).await {
        match event {
            Event::Publication(_) if !reported => buffered += 1,
            Event::Missed { topics } => {
                assert_eq!(topics, std::slice::from_ref(&topic));
                reported = true;
            }
            _ => {}
        }
    }
    assert!(
        buffered <= QUEUE,
        "{buffered} publications were held for a hub that took none (its queue holds {QUEUE})"
    );
    assert!(reported, "the publications dropped were not reported");
}
