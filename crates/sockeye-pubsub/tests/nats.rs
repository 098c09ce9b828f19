//! The NATS backplane against a real `nats-server` (installed by `scripts/install-backplanes.sh`),
//! with JetStream and without.

#![cfg(feature = "nats")]
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::net::TcpListener;
use std::time::{Duration, Instant};

use sockeye_pubsub::backplane::{Backplane, Capabilities, EVENT_QUEUE, History, nats};
use sockeye_pubsub::{
    Delivery, Error, HistoryConfig, Hub, HubConfig, Position, Recovery, Subscriber, SubscriberConfig, Topic,
};
use tokio::time::timeout;

mod support;

use support::clusters::NatsCluster;
use support::deliveries::{drain, texts};
use support::proxy::Proxy;
use support::servers::{BackplaneServer, Kind};

/// Every test ends within this.
const TEST_TIMEOUT: Duration = Duration::from_secs(90);
/// One delivery arrives within this.
const RECV_TIMEOUT: Duration = Duration::from_secs(10);

/// A node: a hub over the NATS backplane.
async fn node(url: &str, history: HistoryConfig) -> (Hub, Capabilities) {
    let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    let nats = nats::connect(url, history, tx).await.unwrap();
    let caps = nats.capabilities();
    (Hub::start(HubConfig::default(), Box::new(nats), rx), caps)
}

async fn recv(s: &mut Subscriber) -> Delivery {
    timeout(RECV_TIMEOUT, s.recv())
        .await
        .expect("no delivery in time")
        .expect("hub ended")
        .unwrap()
}

/// The next message's text and position; panics on anything else.
async fn recv_msg(s: &mut Subscriber) -> (String, Option<Position>) {
    match recv(s).await {
        Delivery::Message(m) => (
            String::from_utf8(m.message().as_payload().to_vec()).unwrap(),
            m.position().cloned(),
        ),
        other => panic!("expected a message, got {other:?}"),
    }
}

/// Nothing more arrives for a while.
async fn quiet(s: &mut Subscriber) {
    if let Ok(d) = timeout(Duration::from_millis(400), s.recv()).await {
        panic!("unexpected delivery: {d:?}");
    }
}

fn sub(hub: &Hub) -> Subscriber {
    hub.subscriber(SubscriberConfig::default())
}

/// Publishes until the backplane takes it (after a restart), at most 20 s.
async fn publish_when_back(hub: &Hub, topic: &Topic, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match hub.publish(topic, text.to_owned().into()).await {
            Ok(_) => return,
            Err(e) => {
                assert!(matches!(e, Error::Backplane { .. }), "{e}");
                assert!(Instant::now() < deadline, "the backplane did not come back: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn three_nodes_fan_out(jetstream: bool) {
    const N: usize = 300;
    let server = BackplaneServer::start(Kind::Nats { jetstream });
    let topic = Topic::new("rooms.* >{lobby} é").unwrap();
    let mut hubs = Vec::new();
    for _ in 0..3 {
        let (hub, caps) = node(&server.url(), HistoryConfig::default()).await;
        assert_eq!(caps.history, jetstream);
        assert!(!caps.contiguous_offsets);
        hubs.push(hub);
    }
    // Two subscribers per node; the first of each publishes.
    let mut subs = Vec::new();
    for hub in &hubs {
        for _ in 0..2 {
            let mut s = sub(hub);
            assert_eq!(s.subscribe(&topic, None).await.unwrap(), Recovery::Live);
            subs.push(s);
        }
    }
    let publishers = [0, 2, 4];
    async fn publish_all(s: &Subscriber, topic: &Topic, name: usize) {
        for i in 0..N {
            s.publish(topic, format!("{name}:{i}").into()).await.unwrap();
        }
    }
    tokio::join!(
        publish_all(&subs[0], &topic, 0),
        publish_all(&subs[2], &topic, 2),
        publish_all(&subs[4], &topic, 4)
    );

    for (i, s) in subs.iter_mut().enumerate() {
        let expected = if publishers.contains(&i) { 2 * N } else { 3 * N };
        let mut next: HashMap<usize, usize> = HashMap::new();
        let mut last_offset = 0;
        for _ in 0..expected {
            let (text, position) = recv_msg(s).await;
            let (from, n) = text.split_once(':').unwrap();
            let (from, n): (usize, usize) = (from.parse().unwrap(), n.parse().unwrap());
            assert_ne!(from, i, "subscriber {i} received its own publication");
            let want = next.entry(from).or_default();
            assert_eq!(
                n, *want,
                "subscriber {i}: publisher {from} out of order or duplicated"
            );
            *want += 1;
            match position {
                Some(p) => {
                    assert!(jetstream);
                    assert!(p.offset > last_offset, "positions must increase");
                    last_offset = p.offset;
                }
                None => assert!(!jetstream),
            }
        }
        assert!(next.values().all(|&n| n == N), "subscriber {i}: {next:?}");
        quiet(s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_fan_out_with_jetstream() {
    timeout(TEST_TIMEOUT, three_nodes_fan_out(true)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_fan_out_core_nats() {
    timeout(TEST_TIMEOUT, three_nodes_fan_out(false)).await.unwrap();
}

/// 500 publications in batches reach another node once each, in order; a batch with a message
/// over `max_payload` is refused whole.
async fn batches_across_nodes(jetstream: bool) {
    let server = BackplaneServer::start(Kind::Nats { jetstream });
    let topic = Topic::new("batches").unwrap();
    let (a, _) = node(&server.url(), HistoryConfig::default()).await;
    let (b, _) = node(&server.url(), HistoryConfig::default()).await;
    let mut sub_b = sub(&b);
    sub_b.subscribe(&topic, None).await.unwrap();
    let publisher = sub(&a).publisher();
    let mut sent = 0;
    let mut returned = Vec::new();
    for size in [1, 7, 100, 256, 136] {
        let batch = (sent..sent + size).map(|i| format!("m{i}").into()).collect();
        returned.extend(publisher.publish_many(&topic, batch).await.unwrap());
        sent += size;
    }
    assert_eq!(sent, 500);
    // The positions a publish returns are those delivered (none without JetStream).
    assert_eq!(returned.len(), if jetstream { sent } else { 0 });
    let mut last = 0;
    for i in 0..sent {
        let (text, position) = recv_msg(&mut sub_b).await;
        assert_eq!(text, format!("m{i}"), "out of order, lost or duplicated");
        if jetstream {
            assert_eq!(position.as_ref(), returned.get(i), "m{i}: the position returned");
        }
        if let Some(p) = position {
            assert!(jetstream);
            assert!(p.offset > last, "positions must increase");
            last = p.offset;
        }
    }
    quiet(&mut sub_b).await;
    let max = HubConfig::default().max_payload;
    match publisher
        .publish_many(
            &topic,
            vec!["ok".into(), sockeye::Message::Binary(vec![0; max + 1].into())],
        )
        .await
    {
        Err(e @ Error::PayloadTooLarge { .. }) => assert!(e.to_string().contains("max_payload"), "{e}"),
        other => panic!("{other:?}"),
    }
    quiet(&mut sub_b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_across_nodes_with_jetstream() {
    timeout(TEST_TIMEOUT, batches_across_nodes(true)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_across_nodes_core_nats() {
    timeout(TEST_TIMEOUT, batches_across_nodes(false)).await.unwrap();
}

/// Publishing while the server is down fails promptly with `Error::Backplane`.
async fn publish_fails_promptly(hub: &Hub, topic: &Topic) {
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(5),
        hub.publish(topic, "during the outage".into()),
    )
    .await
    .expect("publish hung while the server was down");
    match r {
        Err(Error::Backplane { what, .. }) => assert!(what.contains("nats://127.0.0.1:"), "{what}"),
        other => panic!("expected Error::Backplane, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
    // A batch too, with the plain error: nothing of it was sent (the server check failed).
    let started = Instant::now();
    let batch = vec!["batch 1".into(), "batch 2".into(), "batch 3".into()];
    match timeout(Duration::from_secs(5), hub.publish_many(topic, batch))
        .await
        .expect("publish_many hung while the server was down")
    {
        Err(Error::Backplane { what, .. }) => assert!(what.contains("nats://127.0.0.1:"), "{what}"),
        other => panic!("expected Error::Backplane, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "{:?}",
        started.elapsed()
    );
}

/// Changed with issue 29 §1 (was `outage_with_jetstream_recovers_everything`): a restart of
/// the server, even one that lost nothing, is a new life of it, and so a new epoch (its
/// un-synced tail could have been lost): the live subscribers are told of a gap, then get every
/// later publication, each once; a resume from before the restart is a gap, then every
/// publication of the new epoch. (A connection lost without a restart is recovered with no
/// gap: tests/distributed.rs's partition.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_with_jetstream_server_restart_is_a_gap_then_every_later_publication() {
    timeout(TEST_TIMEOUT, async {
        let mut server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("outage").unwrap();
        let (hub1, _) = node(&server.url(), HistoryConfig::default()).await;
        let (hub2, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut a = sub(&hub1);
        let mut b = sub(&hub2);
        a.subscribe(&topic, None).await.unwrap();
        b.subscribe(&topic, None).await.unwrap();
        for i in 0..5 {
            hub1.publish(&topic, format!("before {i}").into()).await.unwrap();
        }
        let mut named = Named::default();
        let mut positions = Vec::new();
        for s in [&mut a, &mut b] {
            let got = drain(s, 5, Duration::from_millis(800), 1000).await;
            named.saw(&got);
            let want: Vec<String> = (0..5).map(|i| format!("before {i}")).collect();
            assert_eq!(texts(&got), want, "{}", show(&got));
            positions = got
                .iter()
                .filter_map(|d| match d {
                    Delivery::Message(m) => m.position().cloned(),
                    _ => None,
                })
                .collect();
        }

        server.kill();
        // Right after the kill (the client may not know yet) and once it does.
        publish_fails_promptly(&hub1, &topic).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish_fails_promptly(&hub2, &topic).await;
        server.restart();

        // The first publications after the restart may race the nodes' consumers coming back:
        // they are delivered all the same (live or from history), once.
        publish_when_back(&hub1, &topic, "after 0").await;
        for i in 1..10 {
            hub1.publish(&topic, format!("after {i}").into()).await.unwrap();
        }
        let after: Vec<String> = (0..10).map(|i| format!("after {i}")).collect();
        let mut problems = Vec::new();
        for (who, s) in [("a", &mut a), ("b", &mut b)] {
            let got = drain(s, 1 + after.len(), Duration::from_millis(800), 1000).await;
            named.saw(&got);
            problems.extend(gap_then(who, &got, &after));
        }
        // The current epoch's history is what the new life stored.
        match hub2.history(&topic, None, 100).await.unwrap() {
            History::Complete(ps) => {
                let got: Vec<String> = ps
                    .iter()
                    .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
                    .collect();
                if got != after {
                    problems.push(format!("the history from the start of the epoch: {got:?}"));
                }
                if ps
                    .iter()
                    .any(|p| p.position.as_ref().unwrap().epoch == positions[0].epoch)
                {
                    problems.push("the history of the new life has the old epoch".into());
                }
            }
            other => problems.push(format!("the history from the start of the epoch: {other:?}")),
        }
        // Subscribers resuming from before the restart (the last one before it, and one
        // before that, on both nodes) are told of the gap, then get what came after, once.
        let mut resumed = Vec::new();
        for (who, hub, since) in [
            ("resumed from before 4 on node 1", &hub1, positions[4].clone()),
            ("resumed from before 1 on node 2", &hub2, positions[1].clone()),
        ] {
            resumed.push(resume_lost(hub, &topic, who, since, &after, &mut named, &mut problems).await);
        }
        hub2.publish(&topic, "live".into()).await.unwrap();
        let all = resumed.iter_mut().chain([&mut a, &mut b]);
        then_live(all, "live", &mut named, &mut problems).await;
        problems.extend(named.1);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outage_core_nats_reports_the_gap() {
    timeout(TEST_TIMEOUT, async {
        let mut server = BackplaneServer::start(Kind::Nats { jetstream: false });
        let topic = Topic::new("outage").unwrap();
        let (hub1, caps) = node(&server.url(), HistoryConfig::default()).await;
        assert!(!caps.history);
        let (hub2, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut a = sub(&hub1);
        let mut b = sub(&hub2);
        a.subscribe(&topic, None).await.unwrap();
        b.subscribe(&topic, None).await.unwrap();
        hub1.publish(&topic, "before".into()).await.unwrap();
        assert_eq!(recv_msg(&mut a).await, ("before".into(), None));
        assert_eq!(recv_msg(&mut b).await, ("before".into(), None));

        server.kill();
        publish_fails_promptly(&hub2, &topic).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        publish_fails_promptly(&hub1, &topic).await;
        server.restart();

        // Both nodes come back by themselves and say that publications may have been missed.
        for s in [&mut a, &mut b] {
            match timeout(Duration::from_secs(20), s.recv())
                .await
                .unwrap()
                .unwrap()
                .unwrap()
            {
                Delivery::Gap { topic: t, resume } => {
                    assert_eq!(t, topic);
                    assert_eq!(resume, None);
                }
                other => panic!("expected a gap, got {other:?}"),
            }
        }
        for i in 0..20 {
            hub2.publish(&topic, format!("after {i}").into()).await.unwrap();
        }
        for s in [&mut a, &mut b] {
            for i in 0..20 {
                assert_eq!(recv_msg(s).await.0, format!("after {i}"));
            }
            quiet(s).await;
        }
        // Without history, resuming is honest about it.
        let mut c = sub(&hub2);
        let pos = Position {
            epoch: "x".into(),
            offset: 1,
        };
        assert_eq!(c.subscribe(&topic, Some(pos)).await.unwrap(), Recovery::Lost);
        assert!(matches!(recv(&mut c).await, Delivery::Gap { .. }));
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_a_position_without_gap_or_duplicate() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("resume").unwrap();
        let other = Topic::new("other").unwrap();
        let (hub1, _) = node(&server.url(), HistoryConfig::default()).await;
        let (hub2, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut first = sub(&hub2);
        first.subscribe(&topic, None).await.unwrap();
        for i in 0..5 {
            hub1.publish(&topic, format!("{i}").into()).await.unwrap();
            // Interleaved publications on another topic: offsets are not contiguous per topic.
            hub1.publish(&other, format!("other {i}").into()).await.unwrap();
        }
        let mut last = None;
        for i in 0..5 {
            let (text, pos) = recv_msg(&mut first).await;
            assert_eq!(text, format!("{i}"));
            last = pos;
        }
        drop(first);
        for i in 5..12 {
            hub1.publish(&topic, format!("{i}").into()).await.unwrap();
        }
        // Publications keep coming while the subscriber resumes: the seam must hold.
        let publisher = {
            let hub1 = hub1.clone();
            let topic = topic.clone();
            tokio::spawn(async move {
                for i in 12..60 {
                    hub1.publish(&topic, format!("{i}").into()).await.unwrap();
                }
            })
        };
        let mut again = sub(&hub2);
        match again.subscribe(&topic, last).await.unwrap() {
            Recovery::Recovered { count } => assert!(count >= 7, "{count}"),
            other => panic!("{other:?}"),
        }
        for i in 5..60 {
            assert_eq!(recv_msg(&mut again).await.0, format!("{i}"));
        }
        publisher.await.unwrap();
        quiet(&mut again).await;

        // A fresh node (topic unknown there) resumes the same way.
        let (hub3, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut third = sub(&hub3);
        let mut probe = sub(&hub2);
        probe.subscribe(&topic, None).await.unwrap();
        hub1.publish(&topic, "60".into()).await.unwrap();
        assert_eq!(recv_msg(&mut again).await.0, "60");
        let from = recv_msg(&mut probe).await.1;
        hub1.publish(&topic, "61".into()).await.unwrap();
        assert_eq!(
            third.subscribe(&topic, from).await.unwrap(),
            Recovery::Recovered { count: 1 }
        );
        assert_eq!(recv_msg(&mut third).await.0, "61");
        quiet(&mut third).await;
    })
    .await
    .unwrap();
}

/// Issue 39 (i): a gap's `resume` was the first publication's sequence − 1, another topic's
/// (sequences are the stream's), so resuming from it was another gap, forever. It is now a
/// position the history takes for this topic: resuming from it recovers everything after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_s_resume_is_taken_back_by_the_history_without_another_gap() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("resumed after a gap").unwrap();
        let other = Topic::new("in between").unwrap();
        let (hub, _) = node(&server.url(), HistoryConfig::default()).await;
        for i in 0..3 {
            hub.publish(&other, format!("other {i}").into()).await.unwrap();
            hub.publish(&topic, format!("{i}").into()).await.unwrap();
        }
        // A position of an epoch that never was: a gap, then the whole epoch.
        let mut s = sub(&hub);
        let since = Position {
            epoch: "gone".into(),
            offset: 1,
        };
        assert_eq!(s.subscribe(&topic, Some(since)).await.unwrap(), Recovery::Lost);
        let resume = match recv(&mut s).await {
            Delivery::Gap { resume, .. } => resume.expect("a position to resume from"),
            other => panic!("{other:?}"),
        };
        // A client that kept it and dropped right away resumes with no second gap.
        let mut again = sub(&hub);
        assert_eq!(
            again.subscribe(&topic, Some(resume)).await.unwrap(),
            Recovery::Recovered { count: 3 }
        );
        for i in 0..3 {
            assert_eq!(recv_msg(&mut again).await.0, format!("{i}"));
        }
        quiet(&mut again).await;
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_beyond_the_limits_is_lost_not_incomplete() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("short").unwrap();
        let history = HistoryConfig::new(5, Duration::from_secs(300));
        let (hub, _) = node(&server.url(), history).await;
        let mut s = sub(&hub);
        s.subscribe(&topic, None).await.unwrap();
        let mut positions = Vec::new();
        for i in 0..10 {
            hub.publish(&topic, format!("{i}").into()).await.unwrap();
        }
        for _ in 0..10 {
            positions.push(recv_msg(&mut s).await.1.unwrap());
        }
        // The 5 newest are kept: resuming from the 5th (index 4) is complete...
        let mut ok = sub(&hub);
        assert_eq!(
            ok.subscribe(&topic, Some(positions[5].clone())).await.unwrap(),
            Recovery::Recovered { count: 4 }
        );
        // ...from the 2nd is not.
        let mut lost = sub(&hub);
        assert_eq!(
            lost.subscribe(&topic, Some(positions[1].clone())).await.unwrap(),
            Recovery::Lost
        );
        // Changed with issue 29: `resume` was the newest position and the 5 publications the
        // history still held were never delivered. Now `resume` is just before the first
        // publication after the gap, and what the history holds follows.
        match recv(&mut lost).await {
            Delivery::Gap { resume, .. } => assert_eq!(resume, Some(positions[4].clone())),
            other => panic!("{other:?}"),
        }
        for (i, position) in positions.iter().enumerate().skip(5) {
            assert_eq!(
                recv_msg(&mut lost).await,
                (format!("{i}"), Some(position.clone()))
            );
        }
    })
    .await
    .unwrap();
}

/// Issue 39's checker (nats-jetstream, nats-cluster): a node cut off while the topic's limit
/// dropped the publications it missed, and the last one it had delivered. Its consumer, restored
/// from the next sequence, began at the oldest kept, and delivered it before the hub repaired
/// the topic from where that delivery had moved it: 20 publications skipped with no gap. Now
/// the gap comes first, then every publication the stream still holds, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_restored_past_what_the_limits_dropped_reports_the_gap() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let proxy = Proxy::start(server.port()).await;
        let history = HistoryConfig::new(10, Duration::ZERO);
        let (m, _) = node(&server.url(), history).await;
        let (n, _) = node(&proxy.url("nats"), history).await;
        let topic = Topic::new("limited").unwrap();
        let mut s = sub(&n);
        s.subscribe(&topic, None).await.unwrap();
        // Other topics, so that restoring them keeps the restoration going after this topic's
        // consumer is back and delivering.
        let mut others = sub(&n);
        for i in 0..20 {
            others
                .subscribe(&Topic::new(&format!("other {i}")).unwrap(), None)
                .await
                .unwrap();
        }
        m.publish(&topic, "p0".into()).await.unwrap();
        assert_eq!(recv_msg(&mut s).await.0, "p0");

        proxy.cut();
        for i in 1..=30 {
            m.publish(&topic, format!("p{i}").into()).await.unwrap();
        }
        proxy.reopen();
        // p0 and p1..p20 are gone from the stream (10 kept a topic): a gap, then p21..p30.
        let got = drain(&mut s, 11, Duration::from_millis(1500), 40).await;
        assert!(
            matches!(got.first(), Some(Delivery::Gap { .. })),
            "the first delivery after the outage must be the gap: {}",
            show(&got)
        );
        let want: Vec<String> = (21..=30).map(|i| format!("p{i}")).collect();
        assert_eq!(texts(&got), want, "{}", show(&got));
        // Live again.
        m.publish(&topic, "p31".into()).await.unwrap();
        assert_eq!(recv_msg(&mut s).await.0, "p31");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_epoch_after_the_store_is_lost() {
    timeout(TEST_TIMEOUT, async {
        let mut server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("epoch").unwrap();
        let (hub, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut a = sub(&hub);
        a.subscribe(&topic, None).await.unwrap();
        for i in 0..3 {
            hub.publish(&topic, format!("{i}").into()).await.unwrap();
        }
        let mut old = None;
        for _ in 0..3 {
            old = recv_msg(&mut a).await.1;
        }
        let old = old.unwrap();

        server.restart_wiped();
        // The node recreates the stream by itself: a new epoch; the live subscriber is told.
        match timeout(Duration::from_secs(20), a.recv())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            Delivery::Gap { .. } => {}
            other => panic!("expected a gap, got {other:?}"),
        }
        publish_when_back(&hub, &topic, "new 0").await;
        let (text, pos) = recv_msg(&mut a).await;
        assert_eq!(text, "new 0");
        assert_ne!(pos.unwrap().epoch, old.epoch);

        let mut b = sub(&hub);
        assert_eq!(b.subscribe(&topic, Some(old)).await.unwrap(), Recovery::Lost);
        assert!(matches!(recv(&mut b).await, Delivery::Gap { .. }));
        // Changed with issue 29: "new 0", which the new epoch holds, was not delivered after the
        // gap; it is now (as it was to `a`, which stayed subscribed).
        assert_eq!(recv_msg(&mut b).await.0, "new 0");
        hub.publish(&topic, "new 1".into()).await.unwrap();
        assert_eq!(recv_msg(&mut a).await.0, "new 1");
        assert_eq!(recv_msg(&mut b).await.0, "new 1");
    })
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_unreachable_servers() {
    let (tx, _rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
    for url in [
        "redis://127.0.0.1:6379",
        "nats://",
        "nats://127.0.0.1:port",
        "127.0.0.1:4222",
    ] {
        match nats::connect(url, HistoryConfig::default(), tx.clone()).await {
            Err(e @ Error::InvalidUrl(_)) => {
                assert!(e.is_caller_fault());
                assert!(e.to_string().contains("nats://HOST:PORT"), "{e}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let r = timeout(
        Duration::from_secs(8),
        nats::connect(&format!("nats://127.0.0.1:{port}"), HistoryConfig::default(), tx),
    )
    .await
    .expect("connecting to nothing must fail, not hang");
    match r {
        Err(e @ Error::Backplane { .. }) => {
            assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(6));
}

/// Copies a directory tree (the server's store), by `cp -a`.
fn copy_tree(from: &std::path::Path, to: &std::path::Path) {
    let _ = std::fs::remove_dir_all(to);
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}

/// Every position seen over a test, and the publication it named: a position names one
/// publication forever.
#[derive(Default)]
struct Named(HashMap<Position, String>, Vec<String>);

impl Named {
    fn saw(&mut self, ds: &[Delivery]) {
        for d in ds {
            if let Delivery::Message(m) = d
                && let Some(p) = m.position()
            {
                let text = String::from_utf8_lossy(m.message().as_payload()).into_owned();
                match self.0.insert(p.clone(), text.clone()) {
                    Some(before) if before != text => self
                        .1
                        .push(format!("position {p} named {before} and then {text}")),
                    _ => {}
                }
            }
        }
    }
}

/// Deliveries as text: `text@position` and `GAP(resume)`.
fn show(ds: &[Delivery]) -> String {
    ds.iter()
        .map(|d| match d {
            Delivery::Message(m) => format!(
                "{}@{}",
                String::from_utf8_lossy(m.message().as_payload()),
                m.position().map_or("-".into(), ToString::to_string)
            ),
            Delivery::Gap { resume, .. } => format!("GAP({resume:?})"),
            other => format!("{other:?}"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every delivery until none comes for `quiet`.
/// What a subscriber told of a new epoch must get: a gap first, then exactly `want` (each
/// once, in order: nothing of the old epoch); a problem otherwise.
fn gap_then(who: &str, got: &[Delivery], want: &[String]) -> Option<String> {
    (!matches!(got.first(), Some(Delivery::Gap { .. })) || texts(got) != want).then(|| {
        format!(
            "{who}: {} messages, expected a gap then {}..{}: {}",
            texts(got).len(),
            want.first().map_or("", String::as_str),
            want.last().map_or("", String::as_str),
            show(got)
        )
    })
}

/// Subscribes a new subscriber of `hub` resuming from `since`: it must be told `Lost`, then get
/// a gap and exactly `want`; a problem otherwise. Returns the subscriber.
async fn resume_lost(
    hub: &Hub,
    topic: &Topic,
    who: &str,
    since: Position,
    want: &[String],
    named: &mut Named,
    problems: &mut Vec<String>,
) -> Subscriber {
    let mut s = sub(hub);
    let recovery = s.subscribe(topic, Some(since.clone())).await.unwrap();
    let got = drain(&mut s, 1 + want.len(), Duration::from_millis(800), 1000).await;
    named.saw(&got);
    if recovery != Recovery::Lost {
        problems.push(format!("{who} (from {since}): {recovery:?}: {}", show(&got)));
    } else if let Some(p) = gap_then(&format!("{who} (from {since})"), &got, want) {
        problems.push(p);
    }
    s
}

/// Each of `subscribers` gets `text`, published live after the rest, and nothing else; a
/// problem otherwise.
async fn then_live(
    subscribers: impl Iterator<Item = &mut Subscriber>,
    text: &str,
    named: &mut Named,
    problems: &mut Vec<String>,
) {
    for s in subscribers {
        let got = drain(s, 1, Duration::from_millis(800), 1000).await;
        named.saw(&got);
        if texts(&got) != [text] {
            problems.push(format!("then live, {text}: {}", show(&got)));
        }
    }
}

/// A JetStream server, a node `a` to publish, a node `b` following `topic` with its subscriber
/// `live`.
async fn publisher_and_follower(topic: &Topic) -> (BackplaneServer, Hub, Hub, Subscriber) {
    let server = BackplaneServer::start(Kind::Nats { jetstream: true });
    let (a, _) = node(&server.url(), HistoryConfig::default()).await;
    let (b, _) = node(&server.url(), HistoryConfig::default()).await;
    let mut live = sub(&b);
    live.subscribe(topic, None).await.unwrap();
    (server, a, b, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_losing_its_tail_is_a_gap_then_every_new_publication() {
    timeout(TEST_TIMEOUT, async {
        let topic = Topic::new("rollback js").unwrap();
        let (mut server, a, b, mut live) = publisher_and_follower(&topic).await;
        let mut named = Named::default();
        let mut problems = Vec::new();
        let mut old = HashMap::new();
        for i in 1..=150 {
            if i == 101 {
                // What the store will come back to: m1..m100 (a copy taken with the server
                // stopped, so that it is consistent).
                server.kill();
                let store = server.dir().to_owned();
                copy_tree(&store, &store.with_extension("m100"));
                server.restart();
            }
            publish_when_back(&a, &topic, &format!("m{i}")).await;
            let mut got = vec![recv(&mut live).await];
            if i == 101 {
                // Changed with issue 29 §1: the restart lost nothing, but it is a new life of
                // the server, whose un-synced tail a crash could have lost: a new epoch, and a
                // gap (as a Redis restart), then m101.
                if !matches!(got[0], Delivery::Gap { .. }) {
                    problems.push(format!("live: no gap at the restart: {}", show(&got)));
                } else {
                    got.push(recv(&mut live).await);
                }
            }
            named.saw(&got);
            let (t, p) = match got.last() {
                Some(Delivery::Message(m)) => (
                    String::from_utf8_lossy(m.message().as_payload()).into_owned(),
                    m.position().cloned().unwrap(),
                ),
                other => panic!("m{i}: expected a message, got {other:?}"),
            };
            assert_eq!(t, format!("m{i}"));
            old.insert(t, p);
        }
        if old["m100"].epoch == old["m101"].epoch {
            problems.push(format!("the restart kept the epoch {}", old["m100"].epoch));
        }
        // The un-synced tail is lost: the store comes back as it was after m100.
        server.kill();
        let store = server.dir().to_owned();
        copy_tree(&store.with_extension("m100"), &store);
        let _ = std::fs::remove_dir_all(store.with_extension("m100"));
        server.restart();
        for i in 1..=60 {
            publish_when_back(&a, &topic, &format!("n{i}")).await;
        }
        let want: Vec<String> = (1..=60).map(|i| format!("n{i}")).collect();
        let got_live = drain(&mut live, 1 + want.len(), Duration::from_millis(800), 1000).await;
        named.saw(&got_live);
        problems.extend(gap_then("live", &got_live, &want));
        // Clients that saved a position before the tail was lost and resume once the stream has
        // grown past it again: m120 and m150 were lost (n20 and n50 took their sequences), m100
        // survived but its life ended (and the next one lost its tail); m150 + 1000 is beyond
        // the stream's end. Each is told of the gap, then gets every publication of the current
        // epoch, never an m-publication, never `Recovered`.
        let beyond = Position {
            epoch: old["m150"].epoch.clone(),
            offset: old["m150"].offset + 1000,
        };
        let mut resumed = Vec::new();
        for (who, since) in [
            ("resumed from m120", old["m120"].clone()),
            ("resumed from m150", old["m150"].clone()),
            ("resumed from m100", old["m100"].clone()),
            ("resumed beyond the end", beyond),
        ] {
            resumed.push(resume_lost(&b, &topic, who, since, &want, &mut named, &mut problems).await);
        }
        // Then live.
        a.publish(&topic, "n61".into()).await.unwrap();
        then_live(
            resumed.iter_mut().chain([&mut live]),
            "n61",
            &mut named,
            &mut problems,
        )
        .await;
        problems.extend(named.1);
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    })
    .await
    .unwrap();
}

/// After the stream went back, a node follows its topic from the first publication stored after
/// the last one it delivered (a time: the sequences are another publication's now). Until one
/// comes, nothing the stream held before is new: not when the client recreates the consumer
/// before its first message (it then starts from the stream's first: a NATS cluster in issue
/// 39's checker, seed 378722, "the backplane gave position 4 again"), nor when the quiet topic
/// is checked for a stalled consumer (its "next sequence" was 0: found stalled every 3 s, and
/// restored from sequence 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_followed_after_a_rollback_never_gets_its_start_again() {
    timeout(TEST_TIMEOUT, async {
        let topic = Topic::new("after a rollback").unwrap();
        let (mut server, a, _b, mut live) = publisher_and_follower(&topic).await;
        for i in 1..=10 {
            a.publish(&topic, format!("m{i}").into()).await.unwrap();
        }
        // What the store will come back to: m1..m10.
        server.kill();
        let store = server.dir().to_owned();
        copy_tree(&store, &store.with_extension("m10"));
        server.restart();
        for i in 11..=20 {
            publish_when_back(&a, &topic, &format!("m{i}")).await;
        }
        let got = drain(&mut live, 11, Duration::from_millis(800), 100).await;
        assert_eq!(
            texts(&got).last().map(String::as_str),
            Some("m20"),
            "{}",
            show(&got)
        );
        // The stream goes back to m10: node b follows the topic after m20's time.
        server.kill();
        copy_tree(&store.with_extension("m10"), &store);
        let _ = std::fs::remove_dir_all(store.with_extension("m10"));
        server.restart();
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Its consumer deleted before it delivers anything: the client recreates it.
        let client = async_nats::connect(server.url().trim_start_matches("nats://"))
            .await
            .unwrap();
        let js = async_nats::jetstream::new(client);
        let stream = js.get_stream("SOCKEYE").await.unwrap();
        let names: Vec<String> = futures_util::TryStreamExt::try_collect(stream.consumer_names())
            .await
            .unwrap();
        assert!(!names.is_empty(), "no consumer to delete");
        for name in names {
            let _ = stream.delete_consumer(&name).await;
        }
        // Quiet past two stall checks, then one new publication: only it, after the gap.
        tokio::time::sleep(Duration::from_secs(8)).await;
        a.publish(&topic, "n1".into()).await.unwrap();
        let got = drain(&mut live, 2, Duration::from_millis(1500), 100).await;
        assert_eq!(texts(&got), ["n1"], "{}", show(&got));
        assert!(
            matches!(got.first(), Some(Delivery::Gap { .. })),
            "{}",
            show(&got)
        );
    })
    .await
    .unwrap();
}

/// Stores a publication on `topic` as a node would, but with `life` in its header (`None`: no
/// header, as an older version stores).
async fn store_raw(url: &str, topic: &Topic, text: &str, life: Option<&str>) {
    let client = async_nats::connect(url.trim_start_matches("nats://"))
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    let mut body = vec![1u8, 1];
    body.extend_from_slice(&7u64.to_be_bytes());
    body.extend_from_slice(&0u64.to_be_bytes());
    body.extend_from_slice(text.as_bytes());
    let subject = format!("sockeye.t.{}", topic.to_hex());
    let ack = match life {
        Some(life) => {
            let mut headers = async_nats::HeaderMap::new();
            headers.insert("Sockeye-Life", life);
            js.publish_with_headers(subject, headers, body.into())
                .await
                .unwrap()
        }
        None => js.publish(subject, body.into()).await.unwrap(),
    };
    ack.await.unwrap();
}

/// Publications stored in the stream under another life than the server's current one (a
/// batch a node sent across a reconnection to the restarted server, with the previous life in
/// its header: "The window" in the NATS backplane's docs) or without one (a node of an older
/// version) are outside the current epoch: every reader is told of a gap around them, none
/// misses a publication silently.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publication_of_another_life_is_a_gap_never_a_silent_miss() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("foreign").unwrap();
        let (hub, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut live = sub(&hub);
        live.subscribe(&topic, None).await.unwrap();
        let p1 = hub.publish(&topic, "1".into()).await.unwrap().unwrap();
        store_raw(&server.url(), &topic, "stale", Some("0123456789abcdef")).await;
        hub.publish(&topic, "2".into()).await.unwrap();
        store_raw(&server.url(), &topic, "old version", None).await;
        hub.publish(&topic, "3".into()).await.unwrap();
        let order = ["1", "stale", "2", "old version", "3"];
        let mut named = Named::default();
        let got = drain(&mut live, 1, Duration::from_millis(1500), 1000).await;
        named.saw(&got);
        // No silent miss: a publication not delivered has a gap after everything before it
        // that was; one delivered again, a gap since its first delivery. (Out of order, after a
        // gap: the docs' "The window".)
        let at = |text: &str| got.iter().position(|d| texts(std::slice::from_ref(d)) == [text]);
        let gap_in = |r: std::ops::Range<usize>| got[r].iter().any(|d| matches!(d, Delivery::Gap { .. }));
        assert_eq!(at("1"), Some(0), "live: {}", show(&got));
        assert!(at("3").is_some(), "live: {}", show(&got));
        for (j, text) in order.iter().enumerate() {
            if at(text).is_none() {
                let before = order[..j].iter().filter_map(|t| at(t)).max().unwrap();
                assert!(
                    gap_in(before..got.len()),
                    "live: {text} missed silently: {}",
                    show(&got)
                );
            }
            let seen: Vec<usize> = (0..got.len())
                .filter(|&i| texts(&got[i..=i]) == [*text])
                .collect();
            if let [first, second, ..] = seen[..] {
                assert!(
                    gap_in(first..second),
                    "live: {text} twice without a gap: {}",
                    show(&got)
                );
            }
        }
        // The current epoch holds what follows the last publication of another life.
        match hub.history(&topic, None, 100).await.unwrap() {
            History::Complete(ps) => {
                assert_eq!(ps.len(), 1, "{ps:?}");
                assert_eq!(&ps[0].payload[..], b"3");
            }
            other => panic!("{other:?}"),
        }
        // A resume from before them: a gap, then the current epoch.
        let mut resumed = sub(&hub);
        assert_eq!(resumed.subscribe(&topic, Some(p1)).await.unwrap(), Recovery::Lost);
        let got = drain(&mut resumed, 1, Duration::from_millis(800), 1000).await;
        named.saw(&got);
        assert!(
            matches!(got.first(), Some(Delivery::Gap { .. })),
            "{}",
            show(&got)
        );
        assert_eq!(texts(&got), ["3"], "{}", show(&got));
        assert!(named.1.is_empty(), "{:?}", named.1);
    })
    .await
    .unwrap();
}

/// Issue 39's checker (web variant, NATS JetStream, seed 1: 40 `EpochWentBack`): a batch sent
/// before a server restart reached the server after it, still naming the life it was sent to,
/// and was stored after the new life's first publications. A node started after the restart
/// (it never saw the earlier life) held the first straggler for its other epoch and read the
/// history from its position in the new life; the history, whose newest publication was that
/// straggler, answered "lost, nothing known of the current epoch", the node took that as a gap
/// into nothing, and delivered the rest of the batch after it, under a life its subscribers had
/// never been in. The stragglers are covered by a gap; the subscribers stay in the new life and
/// get every later publication of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stragglers_of_the_previous_life_are_never_delivered_after_the_new_one() {
    timeout(TEST_TIMEOUT, async {
        let mut server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("straggler").unwrap();
        let (publisher, _) = node(&server.url(), HistoryConfig::default()).await;
        let before = publisher.publish(&topic, "before".into()).await.unwrap().unwrap();
        let old_life = before
            .epoch
            .split_once('.')
            .expect("a single server's epoch names its life")
            .1
            .to_owned();
        server.kill();
        server.restart();
        publish_when_back(&publisher, &topic, "after 0").await;

        // A node started in the new life, and its subscriber.
        let (hub, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut live = sub(&hub);
        live.subscribe(&topic, None).await.unwrap();
        publisher.publish(&topic, "after 1".into()).await.unwrap();
        let got = drain(&mut live, 1, Duration::from_millis(500), 100).await;
        assert_eq!(texts(&got), ["after 1"], "{}", show(&got));
        let new_epoch = match &got[0] {
            Delivery::Message(m) => m.position().unwrap().epoch.clone(),
            other => panic!("{other:?}"),
        };
        assert_ne!(new_epoch, before.epoch);

        // The stragglers, then the new life goes on.
        for i in 0..3 {
            store_raw(&server.url(), &topic, &format!("straggler {i}"), Some(&old_life)).await;
        }
        for i in 2..6 {
            publisher
                .publish(&topic, format!("after {i}").into())
                .await
                .unwrap();
        }
        let got = drain(&mut live, 4, Duration::from_millis(1500), 100).await;
        let mut named = Named::default();
        named.saw(&got);
        let mut problems = named.1;
        for d in &got {
            if let Delivery::Message(m) = d
                && m.position().unwrap().epoch != new_epoch
            {
                problems.push(format!(
                    "{:?} delivered under {}, after the new life {new_epoch}",
                    String::from_utf8_lossy(m.message().as_payload()),
                    m.position().unwrap().epoch
                ));
            }
        }
        // A gap (it covers the stragglers), then every later publication of the new life, in
        // order, once.
        let want: Vec<String> = (2..6).map(|i| format!("after {i}")).collect();
        problems.extend(gap_then("live", &got, &want));
        assert!(problems.is_empty(), "{}: {}", problems.join("; "), show(&got));
        // The node is still in the new life: what follows is live, with no gap.
        publisher.publish(&topic, "after 6".into()).await.unwrap();
        let got = drain(&mut live, 1, Duration::from_millis(800), 100).await;
        assert!(
            matches!(&got[..], [Delivery::Message(m)] if m.position().unwrap().epoch == new_epoch),
            "{}",
            show(&got)
        );
    })
    .await
    .unwrap();
}

/// Issue 39 (a) on NATS: a node without history publishes over core NATS; on a single server
/// the stream stored its publications without a server life, so to nodes with history they
/// were of another epoch: a live subscriber got a gap, m2 under another epoch, another gap, and
/// a client resuming from m0 was told `Lost` and not given m2. The topic's history is the
/// topic's: the node without history names the server's life too, and its publications are
/// recovered like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publisher_without_history_is_part_of_the_topics_history() {
    let server = BackplaneServer::start(Kind::Nats { jetstream: true });
    let url = server.url();
    let topic = Topic::new("mixed history").unwrap();
    let run = async {
        let (a, _) = node(&url, HistoryConfig::default()).await;
        let (backend, caps) = node(&url, HistoryConfig::none()).await;
        assert!(!caps.history);
        let mut live = sub(&a);
        live.subscribe(&topic, None).await.unwrap();
        let at0 = a.publish(&topic, "m0".to_owned().into()).await.unwrap();
        a.publish(&topic, "m1".to_owned().into()).await.unwrap();
        backend.publish(&topic, "m2".to_owned().into()).await.unwrap();
        a.publish(&topic, "m3".to_owned().into()).await.unwrap();
        let got = drain(&mut live, 4, Duration::from_millis(400), 10).await;
        assert_eq!(texts(&got), ["m0", "m1", "m2", "m3"], "live: {got:?}");
        assert_eq!(got.len(), 4, "live, no gap: {got:?}");
        let mut resumed = sub(&a);
        let recovery = resumed.subscribe(&topic, at0).await.unwrap();
        let got = drain(&mut resumed, 3, Duration::from_millis(400), 10).await;
        assert_eq!(
            (recovery, texts(&got)),
            (
                Recovery::Recovered { count: 3 },
                vec!["m1".into(), "m2".into(), "m3".into()]
            ),
            "resumed: {got:?}"
        );
    };
    timeout(TEST_TIMEOUT, run).await.expect("in time");
}

/// A node that forwards slower than core NATS sends loses publications (core NATS keeps
/// nothing): its subscribers must be told, with the gap where the loss is. (The client's own
/// buffer used to fill, 65,536 messages, and the client then dropped and only emitted a
/// `SlowConsumer` event; the gap reported for it reached subscribers ahead of publications
/// received before the loss, so the lost ones were in no gap: issue 39's checker, seed 1.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_nats_dropping_for_a_slow_consumer_is_reported_as_a_gap() {
    timeout(Duration::from_secs(180), async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: false });
        let topic = Topic::new("burst").unwrap();
        // The node's hub reads its backplane's events through a gate the test holds shut: the
        // backplane waits on a full event channel, as behind a busy hub.
        let (tx, mut held) = tokio::sync::mpsc::channel(16);
        let backplane = nats::connect(&server.url(), HistoryConfig::default(), tx)
            .await
            .unwrap();
        let (to_hub, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        let (open, opened) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            let _ = opened.await;
            while let Some(e) = held.recv().await {
                if to_hub.send(e).await.is_err() {
                    return;
                }
            }
        });
        let slow = Hub::start(HubConfig::default(), Box::new(backplane), rx);
        let mut s = slow.subscriber(SubscriberConfig::new(64 << 20, sockeye_pubsub::SlowPolicy::Close));
        s.subscribe(&topic, None).await.unwrap();
        let (publisher, _) = node(&server.url(), HistoryConfig::default()).await;
        const N: usize = 80_000;
        for batch in 0..N / 1000 {
            let messages = (0..1000)
                .map(|i| format!("{}", batch * 1000 + i).into())
                .collect();
            publisher.publish_many(&topic, messages).await.unwrap();
        }
        // Let the client read all of it (and drop what its channel cannot hold).
        tokio::time::sleep(Duration::from_secs(2)).await;
        let _ = open.send(());
        // Then ten more, after the loss: each missing one must lie in a gap before them.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let tail = (N..N + 10).map(|i| format!("{i}").into()).collect();
        publisher.publish_many(&topic, tail).await.unwrap();
        let got = drain(&mut s, 1, Duration::from_secs(3), N + 20).await;
        let messages = texts(&got);
        let gaps = got.iter().filter(|d| matches!(d, Delivery::Gap { .. })).count();
        assert!(
            messages.len() < N,
            "the test did not overflow the client's subscription ({} of {N} delivered)",
            messages.len()
        );
        assert!(
            gaps > 0,
            "{} of {N} publications delivered, the rest dropped by the client, and no gap",
            messages.len()
        );
        every_miss_in_a_gap(&got, &[N + 10]);
    })
    .await
    .unwrap();
}

/// A core NATS publication is acknowledged only if the server took it. The node's route to
/// the server stops forwarding once 1 MB of an 8 MB batch went through (the client's writes
/// back up behind it), then the connection is cut and comes straight back: what the old
/// connection held is gone, the rest of the batch and the round trip that ends it go out on
/// the new one, and that round trip used to acknowledge the whole batch (issue 39's checker,
/// web-nats seed 988831: 128 publications of a burst acknowledged, delivered to no one, and no
/// gap). A batch acknowledged reaches a subscriber on another node whole; this one fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_batch_cut_off_midway_is_never_acknowledged() {
    timeout(Duration::from_secs(150), async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: false });
        let proxy = Proxy::start(server.port()).await;
        let topic = Topic::new("cut").unwrap();
        let (a, _) = node(&proxy.url("nats"), HistoryConfig::none()).await;
        let (b, _) = node(&server.url(), HistoryConfig::none()).await;
        let mut s = sub(&b);
        s.subscribe(&topic, None).await.unwrap();
        let publisher = sub(&a).publisher();
        // Far more than the sockets between the client and the stalled route take, well under
        // the subscriber's bound.
        const N: usize = 2_000;
        let payload = "x".repeat(4 << 10);
        for round in 0..3 {
            let batch = (0..N).map(|i| format!("{round}:{i}:{payload}").into()).collect();
            let from = proxy.upstream();
            let publish = {
                let publisher = publisher.clone();
                let topic = topic.clone();
                tokio::spawn(async move { publisher.publish_many(&topic, batch).await })
            };
            let waited = Instant::now();
            while proxy.upstream() < from + (1 << 20) {
                assert!(
                    waited.elapsed() < Duration::from_secs(20),
                    "the batch did not go out"
                );
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            proxy.blackhole();
            tokio::time::sleep(Duration::from_millis(200)).await;
            proxy.cut();
            proxy.let_through();
            proxy.reopen();
            let result = publish.await.unwrap();
            let got = drain(&mut s, 0, Duration::from_millis(700), 2 * N).await;
            let prefix = format!("{round}:");
            let mine = texts(&got).into_iter().filter(|t| t.starts_with(&prefix)).count();
            match result {
                Ok(_) => panic!(
                    "round {round}: the batch was acknowledged, {mine} of its {N} publications \
                     arrived, {} gaps",
                    got.iter().filter(|d| matches!(d, Delivery::Gap { .. })).count()
                ),
                Err(e) => assert!(
                    matches!(e, Error::Backplane { .. } | Error::PartlyPublished { .. }),
                    "{e}"
                ),
            }
            publish_when_back(&a, &topic, "between rounds").await;
            drain(&mut s, 0, Duration::from_millis(300), 2 * N).await;
        }
    })
    .await
    .unwrap();
}

/// `got` holds the publications of one topic from `ends.len()` publishers, publisher `p`'s
/// `i`th being `"{i * ends.len() + p}"`, `ends[p]` of them: each publisher's in order, none
/// twice, and every one missing inside a gap (a gap between the publications of its publisher
/// delivered around it).
fn every_miss_in_a_gap(got: &[Delivery], ends: &[usize]) {
    let k = ends.len();
    let mut expected = vec![0; k];
    let mut gap_since = vec![false; k];
    for d in got {
        match d {
            Delivery::Gap { .. } => gap_since.iter_mut().for_each(|g| *g = true),
            Delivery::Message(m) => {
                let n: usize = String::from_utf8_lossy(m.message().as_payload()).parse().unwrap();
                let (p, i) = (n % k, n / k);
                assert!(
                    i >= expected[p],
                    "publisher {p}: {i} out of order or twice (expected {} or later)",
                    expected[p]
                );
                assert!(
                    i == expected[p] || gap_since[p],
                    "publisher {p}: {}..{i} missing with no gap before {i}",
                    expected[p]
                );
                expected[p] = i + 1;
                gap_since[p] = false;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        expected, ends,
        "the last publications, sent after the loss, not all delivered"
    );
}

/// A node's JetStream consumer that falls behind its topic's window (its hub busy) skips what
/// the stream's per-topic limit dropped meanwhile: a gap, never a silent skip. The node's
/// limit equals the stream's, so only the server's count of what is pending tells it a drop
/// was possible, and that count is an estimate that lags under a burst. (Issue 39's checker,
/// NATS JetStream, seed 268265: a node trusting it to the last publication skipped 10,000
/// with no gap, where nodes with a shorter configured history than the stream's checked.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_behind_the_window_of_its_topic_reports_the_gap() {
    timeout(Duration::from_secs(180), async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("burst").unwrap();
        let other = Topic::new("beside").unwrap();
        let history = HistoryConfig::new(1000, Duration::ZERO);
        // The node's hub reads its backplane's events slower than they are published, while
        // the test says so: a busy hub, whose consumer falls behind and keeps reading.
        let (tx, mut held) = tokio::sync::mpsc::channel(16);
        let backplane = nats::connect(&server.url(), history, tx).await.unwrap();
        let (to_hub, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        let (slow, slowed) = tokio::sync::watch::channel(true);
        tokio::spawn(async move {
            let mut n = 0u64;
            while let Some(e) = held.recv().await {
                n += 1;
                if *slowed.borrow() && n.is_multiple_of(8) {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                if to_hub.send(e).await.is_err() {
                    return;
                }
            }
        });
        let behind = Hub::start(HubConfig::default(), Box::new(backplane), rx);
        let mut s = behind.subscriber(SubscriberConfig::new(64 << 20, sockeye_pubsub::SlowPolicy::Close));
        s.subscribe(&topic, None).await.unwrap();
        let mut beside = behind.subscriber(SubscriberConfig::default());
        beside.subscribe(&other, None).await.unwrap();
        // Three publishers at once, as fast as they go, for 6 s, the other topic's
        // publications between (so that the topic's sequences jump anyway): the consumer falls
        // behind the topic's window and reads at its edge while the stream drops behind it.
        let until = Instant::now() + Duration::from_secs(6);
        let mut publishers = Vec::new();
        for p in 0..3usize {
            let (publisher, _) = node(&server.url(), history).await;
            let (topic, other) = (topic.clone(), other.clone());
            publishers.push(tokio::spawn(async move {
                let mut n = 0;
                while Instant::now() < until {
                    let messages = (n..n + 100).map(|i| format!("{}", i * 3 + p).into()).collect();
                    publisher.publish_many(&topic, messages).await.unwrap();
                    publisher.publish(&other, "x".into()).await.unwrap();
                    n += 100;
                }
                (publisher, n)
            }));
        }
        let mut sent = Vec::new();
        for p in publishers {
            sent.push(p.await.unwrap());
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        slow.send_replace(false);
        // Ten more each, after the loss.
        let mut ends = Vec::new();
        for (p, (publisher, n)) in sent.into_iter().enumerate() {
            let tail = (n..n + 10).map(|i| format!("{}", i * 3 + p).into()).collect();
            publisher.publish_many(&topic, tail).await.unwrap();
            ends.push(n + 10);
        }
        let total: usize = ends.iter().sum();
        let got = drain(&mut s, 1, Duration::from_secs(3), total + 100).await;
        let gaps = got.iter().filter(|d| matches!(d, Delivery::Gap { .. })).count();
        assert!(
            texts(&got).len() < total,
            "nothing was dropped: the test did not put the consumer behind the window"
        );
        assert!(gaps > 0, "publications dropped by the limit, and no gap");
        every_miss_in_a_gap(&got, &ends);
    })
    .await
    .unwrap();
}

/// The JetStream stream is shared by every node: a node configured with a shorter history than
/// the stream keeps (or connected to fewer servers) must not cut it for the others (issue 39
/// 1d: each node applied its own limits with `update_stream` at connect and on new topics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_shorter_history_never_shortens_the_shared_stream() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        let topic = Topic::new("kept").unwrap();
        let (long, _) = node(&server.url(), HistoryConfig::default()).await;
        let mut s = sub(&long);
        s.subscribe(&topic, None).await.unwrap();
        let mut positions = Vec::new();
        for i in 0..20 {
            long.publish(&topic, format!("{i}").into()).await.unwrap();
            positions.push(recv_msg(&mut s).await.1.unwrap());
        }
        // Another node, keeping 5, connects and subscribes to another topic.
        let (short, _) = node(&server.url(), HistoryConfig::new(5, Duration::from_secs(60))).await;
        sub(&short)
            .subscribe(&Topic::new("other").unwrap(), None)
            .await
            .unwrap();
        long.publish(&topic, "20".into()).await.unwrap();
        recv_msg(&mut s).await;
        // The long node's clients still resume from its whole window.
        assert_eq!(
            sub(&long)
                .subscribe(&topic, Some(positions[0].clone()))
                .await
                .unwrap(),
            Recovery::Recovered { count: 20 },
            "the shorter node's limits were applied to the shared stream"
        );
    })
    .await
    .unwrap();
}

/// A node on a cluster, retried while the cluster settles (JetStream electing the stream's
/// leader answers errors for a moment).
async fn cluster_node(url: &str, history: HistoryConfig) -> Hub {
    // Up to 60 s, as `tests/distributed.rs`'s nodes: a fresh cluster may not place a stream yet.
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (tx, rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
        match nats::connect(url, history, tx).await {
            Ok(nats) => return Hub::start(HubConfig::default(), Box::new(nats), rx),
            Err(e) if Instant::now() < until => {
                eprintln!("{url}: {e}; again");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => panic!("{url}: {e}"),
        }
    }
}

/// The `SOCKEYE` stream's copies, as the server at `url` (one server) reports them.
async fn stream_copies(url: &str) -> usize {
    let client = async_nats::connect(url.trim_start_matches("nats://"))
        .await
        .unwrap();
    let js = async_nats::jetstream::new(client);
    let mut stream = js.get_stream("SOCKEYE").await.unwrap();
    stream.info().await.unwrap().config.num_replicas
}

/// What a `tracing` subscriber wrote on this thread (where a current-thread test's future, and
/// every task it spawns, runs).
#[derive(Clone, Default)]
struct Logged(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture() -> (Logged, tracing::subscriber::DefaultGuard) {
    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (logged, tracing::subscriber::set_default(subscriber))
}

/// The stream's copies are explicit configuration (`HistoryConfig::copies`), and the stream is
/// shared: in a 3-server cluster, a node asking for 1 copy (or listing one server, whose default
/// is 1) connecting after one asking for 3 leaves the stream at 3, and says so, naming both and
/// the command that lowers it (issue 39 1d: the copies came from how many servers each node's
/// URL listed, and nodes listing differently flipped the stream between 3 copies and 1).
///
/// On one thread: the log is captured by a subscriber of this thread, and a node's later checks
/// (the one at subscribe) run in its hub's tasks. Right after the stream grew to 3 copies, the
/// connecting node's own check may still be answered "1 copy" (a CI saw no warning from it), and
/// the check at subscribe, in another worker's task, went uncaptured.
#[tokio::test]
async fn a_node_asking_for_fewer_copies_keeps_the_streams_and_says_so() {
    let (logged, _guard) = capture();
    timeout(TEST_TIMEOUT, async {
        let cluster = NatsCluster::start();
        let one = cluster.servers[1].url();
        // By default, one copy per server listed: a node listing one server makes 1 copy.
        let _default = cluster_node(&one, HistoryConfig::default()).await;
        assert_eq!(stream_copies(&one).await, 1, "the default for one server listed");
        // A node asking for 3 raises it.
        let three = cluster_node(&cluster.url(), HistoryConfig::default().copies(3)).await;
        assert_eq!(
            stream_copies(&one).await,
            3,
            "a node asking for more copies raises them"
        );
        assert!(
            logged.text().contains("raising copies from 1 to 3"),
            "{}",
            logged.text()
        );
        // A node asking for 1, connecting after, and subscribing (a new topic checks the
        // stream again), keeps it at 3 and says so once.
        let fewer = cluster_node(&one, HistoryConfig::default().copies(1)).await;
        let topic = Topic::new("copies").unwrap();
        let mut s = sub(&fewer);
        // The stream just grew to 3 copies: its new copies catch up and a leader is elected
        // (requests time out meanwhile, as after a failover), so retried.
        let mut tries = 0;
        while let Err(e) = s.subscribe(&topic, None).await {
            assert!(tries < 40, "subscribe: {e}");
            tries += 1;
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        publish_when_back(&three, &topic, "kept").await;
        assert_eq!(recv_msg(&mut s).await.0, "kept");
        for server in &cluster.servers {
            assert_eq!(
                stream_copies(&server.url()).await,
                3,
                "lowered by a node asking for 1"
            );
        }
        let log = logged.text();
        let warned: Vec<&str> = log
            .lines()
            .filter(|l| {
                l.contains("WARN") && l.contains("3 copies (this node: 1, its HistoryConfig::copies)")
            })
            .collect();
        assert_eq!(warned.len(), 1, "one warning, naming both: {log}");
        assert!(
            warned[0].contains("nats stream edit SOCKEYE --replicas 1"),
            "the warning says what lowers it: {log}"
        );
        // A node of the default listing one server, connecting now, is told too, and where its
        // 1 comes from.
        let _late = cluster_node(&one, HistoryConfig::default()).await;
        assert_eq!(stream_copies(&one).await, 3);
        let log = logged.text();
        assert!(
            log.contains("3 copies (this node: 1, by default, one per server its URL lists"),
            "a node of the default says where its 1 comes from: {log}"
        );
    })
    .await
    .unwrap();
}

/// An explicit number of copies holds whatever the URL lists: a node given only one server of a
/// 3-server cluster, with `copies(3)`, creates a stream of 3 copies (before, the copies were the
/// number of servers listed: 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_copies_replicate_the_stream_whatever_the_url_lists() {
    timeout(TEST_TIMEOUT, async {
        let cluster = NatsCluster::start();
        let one = cluster.servers[0].url();
        let hub = cluster_node(&one, HistoryConfig::default().copies(3)).await;
        for server in &cluster.servers {
            assert_eq!(stream_copies(&server.url()).await, 3);
        }
        // Replicated, so no server life in its positions: the stream's epoch alone.
        let topic = Topic::new("replicated").unwrap();
        let position = hub.publish(&topic, "one".into()).await.unwrap().unwrap();
        assert!(
            position.epoch.bytes().all(|b| b.is_ascii_hexdigit()),
            "{}",
            position.epoch
        );
    })
    .await
    .unwrap();
}

/// Copies out of JetStream's 1 to 5 are refused at connect, before anything is created, with an
/// error naming the setting and what to give.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_out_of_range_are_refused_naming_the_setting() {
    timeout(TEST_TIMEOUT, async {
        let server = BackplaneServer::start(Kind::Nats { jetstream: true });
        for copies in [0, 6, 100] {
            let history = HistoryConfig::default().copies(copies);
            let (tx, _rx) = tokio::sync::mpsc::channel(EVENT_QUEUE);
            match nats::connect(&server.url(), history, tx).await {
                Err(e @ Error::InvalidConfig(_)) => {
                    assert!(e.is_caller_fault());
                    let said = e.to_string();
                    for part in [&format!("HistoryConfig::copies is {copies}"), "give 1 to 5"] {
                        assert!(said.contains(part), "{said}");
                    }
                }
                other => panic!("copies {copies}: {other:?}"),
            }
            match Hub::connect(&server.url(), HubConfig::default(), history).await {
                Err(Error::InvalidConfig(_)) => {}
                other => panic!("copies {copies}, Hub::connect: {other:?}"),
            }
        }
        // Nothing was created: the stream does not exist.
        let client = async_nats::connect(server.url().trim_start_matches("nats://"))
            .await
            .unwrap();
        assert!(
            async_nats::jetstream::new(client)
                .get_stream("SOCKEYE")
                .await
                .is_err()
        );
        // 1 to 5 are taken (a single server keeps 1).
        let (hub, caps) = node(&server.url(), HistoryConfig::default().copies(1)).await;
        assert!(caps.history);
        drop(hub);
    })
    .await
    .unwrap();
}
