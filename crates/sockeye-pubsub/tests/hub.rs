//! The hub over the in-process backplane: fan-out, the publisher left out, slow subscribers,
//! resuming from a position with no gap and no duplicate at the seam.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use sockeye::Message;
use sockeye_pubsub::backplane::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, InProcess};
use sockeye_pubsub::{
    Delivery, Error, HistoryConfig, Hub, HubConfig, Origin, Position, Publication, Recovery, SlowPolicy,
    Subscriber, SubscriberConfig, Topic,
};
use tokio::time::timeout;

const WAIT: Duration = Duration::from_secs(5);

async fn next(s: &mut Subscriber) -> Delivery {
    timeout(WAIT, s.recv())
        .await
        .expect("no delivery within 5 s")
        .unwrap()
        .unwrap()
}

/// The text and position of the next delivery, which must be a message.
async fn next_text(s: &mut Subscriber) -> (String, Position) {
    match next(s).await {
        Delivery::Message(m) => match m.message() {
            Message::Text(t) => (t.as_str().to_owned(), m.position().unwrap().clone()),
            other => panic!("not text: {other:?}"),
        },
        other => panic!("not a message: {other:?}"),
    }
}

async fn nothing_more(s: &mut Subscriber) {
    if let Ok(d) = timeout(Duration::from_millis(100), s.recv()).await {
        panic!("unexpected delivery: {d:?}");
    }
}

#[tokio::test]
async fn every_subscriber_gets_each_publication_once_but_the_publisher() {
    let hub = Hub::in_process();
    let topic = Topic::new("room").unwrap();
    let other = Topic::new("other room").unwrap();
    let mut subs = Vec::new();
    for _ in 0..3 {
        let mut s = hub.subscriber(SubscriberConfig::default());
        s.subscribe(&topic, None).await.unwrap();
        subs.push(s);
    }
    let mut elsewhere = hub.subscriber(SubscriberConfig::default());
    elsewhere.subscribe(&other, None).await.unwrap();
    assert_eq!(hub.subscriber_count(&topic), 3);
    assert_eq!(hub.topic_count(), 2);

    subs[0].publish(&topic, Message::text("from 0")).await.unwrap();
    hub.publish(&topic, Message::text("from the hub")).await.unwrap();
    for (i, s) in subs.iter_mut().enumerate() {
        if i != 0 {
            assert_eq!(next_text(s).await.0, "from 0");
        }
        let (text, position) = next_text(s).await;
        assert_eq!(text, "from the hub");
        assert_eq!(position.offset, 2, "offsets are per topic and contiguous");
        nothing_more(s).await;
    }
    nothing_more(&mut elsewhere).await;

    // Leaving unsubscribes; the last one to leave removes the topic.
    drop(subs);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(hub.subscriber_count(&topic), 0);
    assert_eq!(hub.topic_count(), 1);
}

#[tokio::test]
async fn publisher_order_is_kept_for_many_publishers() {
    let hub = Hub::in_process();
    let topic = Topic::new("t").unwrap();
    let mut reader = hub.subscriber(SubscriberConfig::default());
    reader.subscribe(&topic, None).await.unwrap();
    let mut tasks = Vec::new();
    for p in 0..4 {
        let hub = hub.clone();
        let topic = topic.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..500 {
                hub.publish(&topic, Message::text(format!("{p} {i}")))
                    .await
                    .unwrap();
            }
        }));
    }
    let mut next_from = [0; 4];
    let mut last_offset = 0;
    for _ in 0..2000 {
        let (text, position) = next_text(&mut reader).await;
        let mut parts = text.split(' ').map(|x| x.parse::<usize>().unwrap());
        let (p, i) = (parts.next().unwrap(), parts.next().unwrap());
        assert_eq!(i, next_from[p], "publisher {p} out of order");
        next_from[p] += 1;
        assert_eq!(position.offset, last_offset + 1);
        last_offset = position.offset;
    }
    for t in tasks {
        t.await.unwrap();
    }
}

#[tokio::test]
async fn a_slow_subscriber_is_closed_and_the_others_keep_everything() {
    let hub = Hub::in_process();
    let topic = Topic::new("t").unwrap();
    let mut fast = hub.subscriber(SubscriberConfig::default());
    fast.subscribe(&topic, None).await.unwrap();
    let mut slow = hub.subscriber(SubscriberConfig::new(10_000, SlowPolicy::Close));
    slow.subscribe(&topic, None).await.unwrap();
    let payload = vec![b'x'; 1000];
    for i in 0..50 {
        hub.publish(&topic, Message::binary(payload.clone()))
            .await
            .unwrap();
        // The fast one reads as it goes.
        match next(&mut fast).await {
            Delivery::Message(m) => assert_eq!(m.position().unwrap().offset, i + 1),
            other => panic!("{other:?}"),
        }
        assert!(
            slow.queued_bytes() <= 10_000,
            "the bound holds: {}",
            slow.queued_bytes()
        );
    }
    match timeout(WAIT, slow.recv()).await.unwrap() {
        Some(Err(Error::TooSlow { queued, max })) => {
            assert_eq!(max, 10_000);
            assert!(queued > max);
        }
        other => panic!("expected TooSlow, got {other:?}"),
    }
    // Nothing more after that, even when more is published.
    hub.publish(&topic, Message::binary(payload)).await.unwrap();
    nothing_more(&mut slow).await;
    assert!(matches!(next(&mut fast).await, Delivery::Message(_)));
}

#[tokio::test]
async fn a_slow_subscriber_under_drop_is_told_how_many_it_missed() {
    let hub = Hub::in_process();
    let topic = Topic::new("t").unwrap();
    // Three 1,000-byte publications and what the queue holds for each (under 100 bytes).
    let mut slow = hub.subscriber(SubscriberConfig::new(3_300, SlowPolicy::Drop));
    slow.subscribe(&topic, None).await.unwrap();
    for _ in 0..10 {
        hub.publish(&topic, Message::binary(vec![0; 1000])).await.unwrap();
    }
    // Three fit, seven were dropped: the notice comes first, then what was kept, then a gap on
    // the topic whose resume is the last one dropped (issue 39 i: `Dropped` named no topic).
    assert_eq!(next(&mut slow).await, Delivery::Dropped { count: 7 });
    for offset in 1..=3 {
        match next(&mut slow).await {
            Delivery::Message(m) => assert_eq!(m.position().unwrap().offset, offset),
            other => panic!("{other:?}"),
        }
    }
    match next(&mut slow).await {
        Delivery::Gap { topic: t, resume } => {
            assert_eq!(t, topic);
            assert_eq!(resume.unwrap().offset, 10);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(slow.dropped(), 7);
    nothing_more(&mut slow).await;
    // What is published next follows the gap.
    hub.publish(&topic, Message::binary(vec![0; 1000])).await.unwrap();
    match next(&mut slow).await {
        Delivery::Message(m) => assert_eq!(m.position().unwrap().offset, 11),
        other => panic!("{other:?}"),
    }
}

/// Issue 39 (i): under `SlowPolicy::Drop` a full queue dropped a `Gap` like a publication, so a
/// subscriber learnt only that "something" was dropped. A gap is never dropped, and what is
/// dropped on a topic is told as a gap on that topic, before that topic's next delivery.
#[tokio::test]
async fn under_drop_a_gap_is_never_dropped_and_drops_become_gaps_on_their_topic() {
    let mut events = None;
    let hub = Hub::with_backplane(HubConfig::default(), |tx| {
        events = Some(tx.clone());
        InProcess::new(tx, HistoryConfig::none())
    });
    let events = events.unwrap();
    let (a, b) = (Topic::new("a").unwrap(), Topic::new("b").unwrap());
    let mut slow = hub.subscriber(SubscriberConfig::new(3_300, SlowPolicy::Drop));
    slow.subscribe(&a, None).await.unwrap();
    slow.subscribe(&b, None).await.unwrap();
    for topic in [&a, &a, &a, &b, &a] {
        hub.publish(topic, Message::binary(vec![0; 1000])).await.unwrap();
    }
    // Full: an outage without history is a gap on both topics, which must arrive.
    events
        .send(Event::Lost {
            reason: "test".into(),
        })
        .await
        .unwrap();
    events.send(Event::Restored).await.unwrap();
    let mut got = Vec::new();
    while let Ok(d) = timeout(Duration::from_millis(300), slow.recv()).await {
        got.push(match d.unwrap().unwrap() {
            Delivery::Message(m) => {
                format!("{}@{}", m.topic().as_str(), m.position().map_or(0, |p| p.offset))
            }
            Delivery::Gap { topic, .. } => format!("GAP {}", topic.as_str()),
            Delivery::Dropped { count } => format!("DROPPED {count}"),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(got[0], "DROPPED 2");
    assert_eq!(&got[1..4], ["a@1", "a@2", "a@3"]);
    let mut gaps: Vec<&String> = got[4..].iter().collect();
    gaps.sort();
    assert_eq!(gaps, ["GAP a", "GAP b"], "{got:?}");
}

#[tokio::test]
async fn resuming_gives_exactly_the_missed_publications_then_live_ones() {
    let hub = Hub::in_process();
    let topic = Topic::new("t").unwrap();
    let mut first = hub.subscriber(SubscriberConfig::default());
    first.subscribe(&topic, None).await.unwrap();
    for i in 0..5 {
        hub.publish(&topic, Message::text(format!("{i}"))).await.unwrap();
    }
    let mut seen = None;
    for _ in 0..3 {
        seen = Some(next_text(&mut first).await.1);
    }
    // The connection drops after the third; publishing goes on while a publisher keeps going
    // during the resubscription (the seam).
    drop(first);
    let publisher = {
        let hub = hub.clone();
        let topic = topic.clone();
        tokio::spawn(async move {
            for i in 5..400 {
                hub.publish(&topic, Message::text(format!("{i}"))).await.unwrap();
                if i % 50 == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };
    tokio::task::yield_now().await;
    let mut again = hub.subscriber(SubscriberConfig::default());
    let recovery = again.subscribe(&topic, seen).await.unwrap();
    assert!(
        matches!(recovery, Recovery::Recovered { count } if count >= 2),
        "{recovery:?}"
    );
    publisher.await.unwrap();
    for i in 3..400 {
        let (text, position) = next_text(&mut again).await;
        assert_eq!(text, i.to_string(), "no gap, no duplicate");
        assert_eq!(position.offset, i + 1);
    }
    nothing_more(&mut again).await;
}

#[tokio::test]
async fn resuming_from_another_epoch_or_too_far_back_reports_the_gap() {
    let hub = Hub::with_backplane(HubConfig::default(), |events| {
        InProcess::new(events, HistoryConfig::new(10, Duration::from_secs(60)))
    });
    let topic = Topic::new("t").unwrap();
    for i in 0..30 {
        hub.publish(&topic, Message::text(format!("{i}"))).await.unwrap();
    }
    // Find the epoch from a live delivery.
    let mut probe = hub.subscriber(SubscriberConfig::default());
    probe.subscribe(&topic, None).await.unwrap();
    hub.publish(&topic, Message::text("30")).await.unwrap();
    let (_, now) = next_text(&mut probe).await;
    assert_eq!(now.offset, 31);

    // Too far back: only the last 10 are kept.
    let mut late = hub.subscriber(SubscriberConfig::default());
    let old = Position {
        epoch: now.epoch.clone(),
        offset: 5,
    };
    assert_eq!(late.subscribe(&topic, Some(old)).await.unwrap(), Recovery::Lost);
    // Changed with issue 29: this said `resume` 31 (the newest) and nothing followed but live
    // publications, so the 10 the history still held were never delivered. Now the gap covers
    // what is gone (offsets 6..=21), `resume` is just before the first publication that follows
    // it, and what the history holds follows.
    match next(&mut late).await {
        Delivery::Gap { resume, .. } => assert_eq!(resume.unwrap().offset, 21),
        other => panic!("{other:?}"),
    }
    for i in 21..=30 {
        let (text, position) = next_text(&mut late).await;
        assert_eq!((text, position.offset), (i.to_string(), i + 1));
    }
    // Within the window: recovered.
    let mut recent = hub.subscriber(SubscriberConfig::default());
    let within = Position {
        epoch: now.epoch.clone(),
        offset: 25,
    };
    assert_eq!(
        recent.subscribe(&topic, Some(within)).await.unwrap(),
        Recovery::Recovered { count: 6 }
    );
    assert_eq!(next_text(&mut recent).await.0, "25");

    // Another epoch: the history it refers to is gone.
    let mut stranger = hub.subscriber(SubscriberConfig::default());
    let foreign = Position {
        epoch: "another".into(),
        offset: 30,
    };
    assert_eq!(
        stranger.subscribe(&topic, Some(foreign)).await.unwrap(),
        Recovery::Lost
    );
    // Changed with issue 29: this went from the gap straight to live publications. Now the gap
    // is followed by everything the current epoch's history holds, then live ones.
    match next(&mut stranger).await {
        Delivery::Gap { resume, .. } => assert_eq!(resume.unwrap().offset, 21),
        other => panic!("{other:?}"),
    }
    for i in 21..=30 {
        assert_eq!(next_text(&mut stranger).await.0, i.to_string());
    }
    hub.publish(&topic, Message::text("31")).await.unwrap();
    assert_eq!(next_text(&mut stranger).await.0, "31");
}

#[tokio::test]
async fn bad_input_is_a_clear_error() {
    let hub = Hub::with_backplane(HubConfig::default().max_payload(100), |events| {
        InProcess::new(events, HistoryConfig::default())
    });
    let topic = Topic::new("t").unwrap();
    let e = hub
        .publish(&topic, Message::binary(vec![0; 101]))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::PayloadTooLarge { len: 101, max: 100 }));
    assert!(e.is_caller_fault());
    assert!(e.to_string().contains("max_payload"), "{e}");
    let e = hub
        .publish(&topic, Message::Ping(Default::default()))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotData));
    assert!(Topic::new("").unwrap_err().to_string().contains("empty"));
    assert!(
        Topic::new(&"x".repeat(300))
            .unwrap_err()
            .to_string()
            .contains("at most 256")
    );
}

#[tokio::test]
async fn a_batch_arrives_in_order_and_a_bad_one_is_refused_whole() {
    let hub = Hub::with_backplane(HubConfig::default().max_payload(100), |events| {
        InProcess::new(events, HistoryConfig::default())
    });
    let topic = Topic::new("batch").unwrap();
    let mut reader = hub.subscriber(SubscriberConfig::default());
    reader.subscribe(&topic, None).await.unwrap();
    let mut writer = hub.subscriber(SubscriberConfig::default());
    writer.subscribe(&topic, None).await.unwrap();
    let publisher = writer.publisher();
    let mut sent = 0;
    for size in [1, 7, 100, 256, 136] {
        let batch = (sent..sent + size)
            .map(|i| Message::from(format!("m{i}")))
            .collect();
        publisher.publish_many(&topic, batch).await.unwrap();
        sent += size;
    }
    hub.publish_many(&topic, Vec::new()).await.unwrap();
    let mut last = 0;
    for i in 0..sent {
        let (t, p) = next_text(&mut reader).await;
        assert_eq!(t, format!("m{i}"));
        assert_eq!(p.offset, last + 1, "contiguous");
        last = p.offset;
    }
    nothing_more(&mut reader).await;
    // The publisher is left out, as with `publish`.
    nothing_more(&mut writer).await;

    // One message over the limit, or not data: nothing of the batch is published.
    let e = publisher
        .publish_many(
            &topic,
            vec!["ok".into(), Message::binary(vec![0; 101]), "ok".into()],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::PayloadTooLarge { len: 101, max: 100 }), "{e}");
    let e = hub
        .publish_many(&topic, vec!["ok".into(), Message::Ping(Default::default())])
        .await
        .unwrap_err();
    assert!(matches!(e, Error::NotData), "{e}");
    nothing_more(&mut reader).await;
}

#[tokio::test]
async fn a_subscriber_does_not_get_its_own_publications_back_when_it_resumes() {
    let hub = Hub::in_process();
    let topic = Topic::new("own").unwrap();
    let mut me = hub.subscriber(SubscriberConfig::default());
    let mut other = hub.subscriber(SubscriberConfig::default());
    me.subscribe(&topic, None).await.unwrap();
    other.subscribe(&topic, None).await.unwrap();
    hub.publish(&topic, Message::text("before")).await.unwrap();
    let (_, seen) = next_text(&mut me).await;
    assert_eq!(next_text(&mut other).await.0, "before");
    // Live: what `me` publishes goes to the others only.
    me.publish(&topic, Message::text("mine live")).await.unwrap();
    assert_eq!(next_text(&mut other).await.0, "mine live");
    nothing_more(&mut me).await;
    // Away for a while: more of its own and someone else's.
    me.unsubscribe(&topic).await.unwrap();
    me.publish(&topic, Message::text("mine while away"))
        .await
        .unwrap();
    hub.publish(&topic, Message::text("theirs")).await.unwrap();
    // Resuming: the same rule as live, its own are left out.
    let recovery = me.subscribe(&topic, Some(seen)).await.unwrap();
    let mut got = Vec::new();
    while let Ok(Some(Ok(d))) = timeout(Duration::from_millis(200), me.recv()).await {
        got.push(match d {
            Delivery::Message(m) => String::from_utf8_lossy(m.message().as_payload()).into_owned(),
            other => format!("{other:?}"),
        });
    }
    assert_eq!(
        (recovery, got),
        (Recovery::Recovered { count: 1 }, vec!["theirs".to_owned()]),
        "resuming gave the subscriber its own publications back"
    );
}

/// A backplane the test drives: its events are sent by the test, its history is what the test
/// puts there (one topic, epoch "E", contiguous offsets). A resume's history read (one with a
/// position and a limit) never answers while `stall` is set: a history server that hangs. Each
/// batch is recorded in `tries` and answered with the next of `answers` (then `Ok`), as if its
/// server took it: a backplane whose batches fail on cue; its `publish` says only that it failed,
/// not whether it was published (as a backplane's `publish` may).
#[derive(Clone, Default)]
struct Scripted {
    history: std::sync::Arc<std::sync::Mutex<Vec<Publication>>>,
    stall: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Held by a test: history reads wait until it lets go.
    paused: std::sync::Arc<tokio::sync::Mutex<()>>,
    answers: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<Result<(), Error>>>>,
    tries: std::sync::Arc<std::sync::Mutex<Vec<Vec<String>>>>,
}

impl Backplane for Scripted {
    fn capabilities(&self) -> Capabilities {
        let mut c = InProcess::new(tokio::sync::mpsc::channel(1).0, HistoryConfig::default()).capabilities();
        c.history = true;
        c.contiguous_offsets = true;
        c
    }

    fn publish(&self, p: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async move {
            match self.publish_many(vec![p]).await {
                Ok(mut positions) => Ok(positions.pop()),
                Err(Error::PartlyPublished { source, .. }) => Err(*source),
                Err(e) => Err(e),
            }
        })
    }

    fn publish_many(&self, batch: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        let mut tries = self.tries.lock().unwrap();
        tries.push(
            batch
                .iter()
                .map(|p| String::from_utf8_lossy(&p.payload).into_owned())
                .collect(),
        );
        // Numbered as if every batch tried had been published.
        let end = tries.iter().map(Vec::len).sum::<usize>() as u64;
        let start = end - batch.len() as u64;
        let answer = self.answers.lock().unwrap().pop_front().unwrap_or(Ok(()));
        let positions = (start + 1..=end)
            .map(|offset| Position {
                epoch: "E".into(),
                offset,
            })
            .collect();
        Box::pin(async move { answer.map(|()| positions) })
    }

    fn subscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn unsubscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn history(
        &self,
        _: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        if since.is_some() && limit > 0 && self.stall.load(std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        let history = std::sync::Arc::clone(&self.history);
        let paused = std::sync::Arc::clone(&self.paused);
        let since = since.cloned();
        Box::pin(async move {
            drop(paused.lock().await);
            let all = history.lock().unwrap().clone();
            let latest = all.last().and_then(|p| p.position.clone());
            Ok(match (since, &latest) {
                (None, _) => History::Complete(all.into_iter().take(limit).collect()),
                // Complete only when contiguous after `s` (a hole is `Lost`, as the trait says).
                (Some(s), Some(l))
                    if s.epoch == l.epoch
                        && s.offset <= l.offset
                        && all
                            .iter()
                            .filter_map(|p| p.position.as_ref())
                            .find(|p| p.offset > s.offset)
                            .is_none_or(|p| p.offset == s.offset + 1) =>
                {
                    History::Complete(
                        all.into_iter()
                            .filter(|p| p.position.as_ref().unwrap().offset > s.offset)
                            .take(limit)
                            .collect(),
                    )
                }
                (Some(_), _) => History::Lost { latest },
            })
        })
    }
}

/// A hub over `backplane` and the sender of its events.
fn scripted_hub(backplane: &Scripted) -> (Hub, EventSender) {
    let mut events = None;
    let hub = Hub::with_backplane(HubConfig::default(), |tx| {
        events = Some(tx);
        backplane.clone()
    });
    (hub, events.unwrap())
}

fn scripted(topic: &Topic, offset: u64, text: &str) -> Publication {
    Publication {
        topic: topic.clone(),
        position: Some(Position {
            epoch: "E".into(),
            offset,
        }),
        origin: Origin {
            node: 7,
            publisher: 0,
        },
        kind: sockeye::DataKind::Text,
        payload: text.to_owned().into(),
    }
}

/// A hub over a [`Scripted`] backplane, the sender of its events, its history, and a subscriber
/// of `topic` that received a1..a5 (offsets 1..5).
async fn after_five(
    topic: &Topic,
) -> (
    Hub,
    EventSender,
    std::sync::Arc<std::sync::Mutex<Vec<Publication>>>,
    Subscriber,
) {
    let backplane = Scripted::default();
    let history = backplane.history.clone();
    let (hub, events) = scripted_hub(&backplane);
    let mut s = hub.subscriber(SubscriberConfig::default());
    s.subscribe(topic, None).await.unwrap();
    for i in 1..=5 {
        let p = scripted(topic, i, &format!("a{i}"));
        history.lock().unwrap().push(p.clone());
        events.send(Event::Publication(p)).await.unwrap();
        assert_eq!(next_text(&mut s).await.0, format!("a{i}"));
    }
    (hub, events, history, s)
}

/// What arrives within 300 ms, as `text@offset` and `GAP(resume)`.
async fn shown(s: &mut Subscriber) -> Vec<String> {
    let mut out = Vec::new();
    while let Ok(Some(Ok(d))) = timeout(Duration::from_millis(300), s.recv()).await {
        out.push(match d {
            Delivery::Message(m) => format!(
                "{}@{}",
                String::from_utf8_lossy(m.message().as_payload()),
                m.position().unwrap().offset
            ),
            Delivery::Gap { resume, .. } => format!("GAP({})", resume.map_or(-1, |r| r.offset as i64)),
            other => format!("{other:?}"),
        });
    }
    out
}

#[tokio::test]
async fn a_backplane_that_gives_positions_again_live_is_a_gap_not_duplicates() {
    let topic = Topic::new("rolled back live").unwrap();
    let (_hub, events, history, mut s) = after_five(&topic).await;
    // The backplane went back to offset 2 without changing its epoch, and gives 3 and 4 again
    // to new publications.
    history.lock().unwrap().truncate(2);
    for (i, t) in [(3, "b3"), (4, "b4")] {
        let p = scripted(&topic, i, t);
        history.lock().unwrap().push(p.clone());
        events.send(Event::Publication(p)).await.unwrap();
    }
    assert_eq!(shown(&mut s).await, ["GAP(2)", "b3@3", "b4@4"]);
}

#[tokio::test]
async fn a_history_behind_what_was_delivered_is_a_gap_and_what_follows_is_delivered() {
    let topic = Topic::new("rolled back history").unwrap();
    let (_hub, events, history, mut s) = after_five(&topic).await;
    // An outage, after which the backplane stands at offset 2 in the same epoch.
    events
        .send(Event::Lost {
            reason: "test".into(),
        })
        .await
        .unwrap();
    history.lock().unwrap().truncate(2);
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut s).await, ["GAP(2)"]);
    // The next publication takes offset 3 again: delivered, not dropped as one seen already.
    let p = scripted(&topic, 3, "b3");
    history.lock().unwrap().push(p.clone());
    events.send(Event::Publication(p)).await.unwrap();
    assert_eq!(shown(&mut s).await, ["b3@3"]);
}

/// A subscriber that resumed keeps a seam (the last position recovered) to drop live duplicates
/// still on their way; a rollback right after gives positions at or before the seam to new
/// publications. The gap ends the seam: what follows it is delivered, not dropped as a duplicate.
#[tokio::test]
async fn a_rollback_right_after_a_resume_delivers_what_follows_the_gap() {
    let topic = Topic::new("rolled back after a resume").unwrap();
    let (hub, events, history, _first) = after_five(&topic).await;
    // Another client resumes from offset 2: a3..a5 come from history, the seam is at 5.
    let mut resumed = hub.subscriber(SubscriberConfig::default());
    let recovery = resumed
        .subscribe(
            &topic,
            Some(Position {
                epoch: "E".into(),
                offset: 2,
            }),
        )
        .await
        .unwrap();
    assert!(
        matches!(recovery, Recovery::Recovered { count: 3 }),
        "{recovery:?}"
    );
    assert_eq!(shown(&mut resumed).await, ["a3@3", "a4@4", "a5@5"]);
    // The backplane goes back to offset 3 and gives 4 and 5 again.
    history.lock().unwrap().truncate(3);
    for (i, t) in [(4, "b4"), (5, "b5"), (6, "b6")] {
        let p = scripted(&topic, i, t);
        history.lock().unwrap().push(p.clone());
        events.send(Event::Publication(p)).await.unwrap();
    }
    assert_eq!(shown(&mut resumed).await, ["GAP(3)", "b4@4", "b5@5", "b6@6"]);
}

/// `scripted(topic, offset, text)` in epoch `epoch`.
fn scripted_in(epoch: &str, topic: &Topic, offset: u64, text: &str) -> Publication {
    let mut p = scripted(topic, offset, text);
    p.position = Some(Position {
        epoch: epoch.into(),
        offset,
    });
    p
}

/// After [`after_five`], the backplane restarted into epoch "F" holding f1..f3; another
/// client resumes from 5@E (its own gap into F, then f1..f3) before the node has seen F.
async fn resumed_into_f(
    topic: &Topic,
) -> (
    EventSender,
    std::sync::Arc<std::sync::Mutex<Vec<Publication>>>,
    Subscriber,
    Subscriber,
    Hub,
) {
    let (hub, events, history, first) = after_five(topic).await;
    events
        .send(Event::Lost {
            reason: "test".into(),
        })
        .await
        .unwrap();
    *history.lock().unwrap() = (1..=3)
        .map(|i| scripted_in("F", topic, i, &format!("f{i}")))
        .collect();
    let mut resumed = hub.subscriber(SubscriberConfig::default());
    let from = Position {
        epoch: "E".into(),
        offset: 5,
    };
    let recovery = resumed.subscribe(topic, Some(from)).await.unwrap();
    assert!(matches!(recovery, Recovery::Lost), "{recovery:?}");
    assert_eq!(shown(&mut resumed).await, ["GAP(0)", "f1@1", "f2@2", "f3@3"]);
    (events, history, first, resumed, hub)
}

/// Issue 39, chaos `StaleGap` (Redis seed 461503): a subscriber resumed into a new epoch (its
/// own gap, then f1..f3); the node noticed the outage afterwards and told every subscriber its
/// own gap, resuming at 0@F, behind what that subscriber had: a client keeping `resume` got
/// f1..f3 again (this one did too, the gap having ended its seam). Only the node's live
/// subscriber is told; what follows is delivered once to both.
#[tokio::test]
async fn a_node_that_sees_a_new_epoch_late_does_not_take_a_resumed_subscriber_back() {
    let topic = Topic::new("stale gap").unwrap();
    let (events, history, mut first, mut resumed, _hub) = resumed_into_f(&topic).await;
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut first).await, ["GAP(0)", "f1@1", "f2@2", "f3@3"]);
    assert_eq!(shown(&mut resumed).await, Vec::<String>::new());
    let p = scripted_in("F", &topic, 4, "f4");
    history.lock().unwrap().push(p.clone());
    events.send(Event::Publication(p)).await.unwrap();
    assert_eq!(shown(&mut first).await, ["f4@4"]);
    assert_eq!(shown(&mut resumed).await, ["f4@4"]);
}

/// Issue 39, chaos `EpochWentBack` (NATS JetStream seed 1796546654): a subscriber resumed into
/// the backplane's new epoch; the node, which had not seen it yet, then handed it live a
/// publication under the old epoch (a NATS publication sent across a server restart names the
/// life it was sent to): a position of an epoch it had left, after the new one's. The node's
/// live subscriber gets it (it is still in that epoch); the resumed one left it with its gap.
#[tokio::test]
async fn a_node_behind_a_resumed_subscriber_does_not_take_it_back_to_an_old_epoch() {
    let topic = Topic::new("epoch went back").unwrap();
    let (events, history, mut first, mut resumed, _hub) = resumed_into_f(&topic).await;
    events
        .send(Event::Publication(scripted(&topic, 6, "a6")))
        .await
        .unwrap();
    assert_eq!(shown(&mut first).await, ["a6@6"]);
    assert_eq!(shown(&mut resumed).await, Vec::<String>::new());
    // The node sees F: its own gap, not told to the resumed subscriber again.
    let p = scripted_in("F", &topic, 4, "f4");
    history.lock().unwrap().push(p.clone());
    events.send(Event::Publication(p)).await.unwrap();
    assert_eq!(
        shown(&mut first).await,
        ["GAP(0)", "f1@1", "f2@2", "f3@3", "f4@4"]
    );
    assert_eq!(shown(&mut resumed).await, ["f4@4"]);
}

/// Issue 39, chaos `EpochWentBack` (NATS JetStream): the node itself moved into the new epoch
/// (its repair after the outage: a gap, then f1..f3), and only then its live delivery handed it
/// a publication of the old one (sent across the restart, it names the old life): delivered,
/// it took every subscriber back to an epoch it had left, then the node's next repair from
/// there gave them the gap and f1..f3 again. It is covered by the gap that left the epoch; so
/// is one of an epoch the node never saw ("D": a server life during which the node was cut off)
/// once the history has gone on from where the node stands.
#[tokio::test]
async fn a_publication_of_an_epoch_the_node_left_is_covered_by_its_gap() {
    let topic = Topic::new("straggler").unwrap();
    let (_hub, events, history, mut first) = after_five(&topic).await;
    events
        .send(Event::Lost {
            reason: "test".into(),
        })
        .await
        .unwrap();
    *history.lock().unwrap() = (1..=3)
        .map(|i| scripted_in("F", &topic, i, &format!("f{i}")))
        .collect();
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut first).await, ["GAP(0)", "f1@1", "f2@2", "f3@3"]);
    events
        .send(Event::Publication(scripted(&topic, 6, "a6")))
        .await
        .unwrap();
    events
        .send(Event::Publication(scripted_in("D", &topic, 1, "d1")))
        .await
        .unwrap();
    let p = scripted_in("F", &topic, 4, "f4");
    history.lock().unwrap().push(p.clone());
    events.send(Event::Publication(p)).await.unwrap();
    assert_eq!(shown(&mut first).await, ["f4@4"]);
    // Another restart ("G"), which the node learns of by the repair a past epoch's publication
    // started: the gap into G, not the publication after it.
    *history.lock().unwrap() = (1..=2)
        .map(|i| scripted_in("G", &topic, i, &format!("g{i}")))
        .collect();
    events
        .send(Event::Publication(scripted_in("C", &topic, 9, "c9")))
        .await
        .unwrap();
    assert_eq!(shown(&mut first).await, ["GAP(0)", "g1@1", "g2@2"]);
}

/// A hub over a [`Scripted`] backplane whose resumes stall, the sender of its events, and
/// position 1 of `topic` (m1) in its history.
fn stalled(topic: &Topic) -> (Hub, EventSender, Scripted, Position) {
    let backplane = Scripted::default();
    backplane.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    let m1 = scripted(topic, 1, "m1");
    backplane.history.lock().unwrap().push(m1.clone());
    let (hub, events) = scripted_hub(&backplane);
    (hub, events, backplane, m1.position.unwrap())
}

/// Publishes `scripted(topic, offset, _)` for each offset: kept in history, sent live.
async fn publish_scripted(
    backplane: &Scripted,
    events: &EventSender,
    topic: &Topic,
    offsets: std::ops::RangeInclusive<u64>,
) {
    for offset in offsets {
        let p = scripted(topic, offset, &"x".repeat(1000));
        backplane.history.lock().unwrap().push(p.clone());
        events.send(Event::Publication(p)).await.unwrap();
    }
}

#[tokio::test]
async fn a_cancelled_resume_leaves_nothing_and_a_retry_recovers() {
    let topic = Topic::new("t").unwrap();
    let (hub, events, backplane, seen) = stalled(&topic);
    let mut s = hub.subscriber(SubscriberConfig::default());
    let cancelled = timeout(
        Duration::from_millis(100),
        s.subscribe(&topic, Some(seen.clone())),
    )
    .await;
    assert!(
        cancelled.is_err(),
        "the history never answers: the subscribe must time out"
    );
    // Nothing left: not subscribed here, nor at the hub.
    assert_eq!(
        s.topics().count(),
        0,
        "a cancelled subscribe left the topic subscribed"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        hub.subscriber_count(&topic),
        0,
        "a cancelled subscribe left the subscriber at the hub"
    );
    assert_eq!(hub.topic_count(), 0);
    // Publications meanwhile are not held for it (they would pile up unbounded).
    publish_scripted(&backplane, &events, &topic, 2..=101).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        s.queued_bytes(),
        0,
        "publications pile up for a cancelled subscribe"
    );

    // A retry recovers what was published since `seen`, then live ones.
    backplane.stall.store(false, std::sync::atomic::Ordering::SeqCst);
    let recovery = s.subscribe(&topic, Some(seen)).await.unwrap();
    assert_eq!(
        recovery,
        Recovery::Recovered { count: 100 },
        "a retry after a cancel must recover"
    );
    publish_scripted(&backplane, &events, &topic, 102..=102).await;
    for offset in 2..=102 {
        match next(&mut s).await {
            Delivery::Message(m) => assert_eq!(m.position().unwrap().offset, offset),
            other => panic!("{other:?}"),
        }
    }
    nothing_more(&mut s).await;
}

#[tokio::test]
async fn live_publications_held_during_a_resume_count_against_the_bound() {
    let topic = Topic::new("t").unwrap();
    let (hub, events, backplane, seen) = stalled(&topic);
    // While its history does not answer, 50 × 1,000 bytes arrive live for a subscriber bound to
    // 10,000: held for it, they pass its bound, and it is stopped at once instead of holding
    // them all (before: held without a bound, and the subscribe waited on).
    let mut s = hub.subscriber(SubscriberConfig::new(10_000, SlowPolicy::Close));
    let publish = async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        publish_scripted(&backplane, &events, &topic, 2..=51).await;
    };
    let (subscribed, ()) = tokio::join!(timeout(WAIT, s.subscribe(&topic, Some(seen))), publish);
    match subscribed {
        Ok(Err(Error::TooSlow { queued, max })) => assert!(queued > max && max == 10_000),
        other => panic!("expected TooSlow while resuming, got {other:?}"),
    }
    assert_eq!(s.queued_bytes(), 0);
    assert_eq!(s.topics().count(), 0);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(hub.subscriber_count(&topic), 0);
}

#[tokio::test]
async fn a_subscriber_past_its_subscription_limit_is_refused_clearly() {
    let hub = Hub::in_process();
    let mut s = hub.subscriber(SubscriberConfig::default().max_subscriptions(3));
    for i in 0..3 {
        s.subscribe(&Topic::new(&format!("t{i}")).unwrap(), None)
            .await
            .unwrap();
    }
    let err = s.subscribe(&Topic::new("t3").unwrap(), None).await.unwrap_err();
    assert!(matches!(err, Error::TooManySubscriptions { max: 3 }), "{err:?}");
    assert!(err.is_caller_fault());
    assert_eq!(err.close_code(), sockeye::CloseCode::POLICY_VIOLATION);
    assert!(err.to_string().contains("max_subscriptions"), "{err}");
    assert_eq!(hub.topic_count(), 3, "the refused topic was not subscribed");
    // Subscribing again to one it has is not one more; after leaving one, another fits.
    s.subscribe(&Topic::new("t0").unwrap(), None).await.unwrap();
    s.unsubscribe(&Topic::new("t0").unwrap()).await.unwrap();
    s.subscribe(&Topic::new("t3").unwrap(), None).await.unwrap();
}

#[tokio::test]
async fn a_node_past_its_topic_limit_refuses_new_topics_clearly() {
    let hub = Hub::with_backplane(HubConfig::default().max_topics(2), |tx| {
        InProcess::new(tx, HistoryConfig::default())
    });
    let mut a = hub.subscriber(SubscriberConfig::default());
    let mut b = hub.subscriber(SubscriberConfig::default());
    a.subscribe(&Topic::new("t0").unwrap(), None).await.unwrap();
    a.subscribe(&Topic::new("t1").unwrap(), None).await.unwrap();
    let err = b.subscribe(&Topic::new("t2").unwrap(), None).await.unwrap_err();
    assert!(matches!(err, Error::TooManyTopics { max: 2 }), "{err:?}");
    assert!(
        !err.is_caller_fault(),
        "the node is full: not this client's fault"
    );
    assert_eq!(err.close_code(), sockeye::CloseCode::TRY_AGAIN_LATER);
    assert!(err.to_string().contains("max_topics"), "{err}");
    // A topic the node follows already is no new topic.
    b.subscribe(&Topic::new("t1").unwrap(), None).await.unwrap();
    // Once a topic is left by all, there is room again.
    a.unsubscribe(&Topic::new("t0").unwrap()).await.unwrap();
    b.subscribe(&Topic::new("t2").unwrap(), None).await.unwrap();
    assert_eq!(hub.topic_count(), 2);
}

/// A hub over the in-process backplane with `history`, and a position on `topic` published
/// before more was.
async fn resume_point(history: HistoryConfig, topic: &Topic) -> (Hub, Position) {
    let hub = Hub::with_backplane(HubConfig::default(), |tx| InProcess::new(tx, history));
    let mut s = hub.subscriber(SubscriberConfig::default());
    s.subscribe(topic, None).await.unwrap();
    hub.publish(topic, Message::binary(vec![0; 1000])).await.unwrap();
    let Delivery::Message(m) = next(&mut s).await else {
        panic!()
    };
    hub.publish(topic, Message::binary(vec![0; 1000])).await.unwrap();
    (hub, m.position().unwrap().clone())
}

/// The first delivery after resuming from `from` must be a gap.
async fn resumes_with_a_gap(hub: &Hub, topic: &Topic, from: Position) {
    let mut s = hub.subscriber(SubscriberConfig::default());
    assert_eq!(s.subscribe(topic, Some(from)).await.unwrap(), Recovery::Lost);
    assert!(matches!(next(&mut s).await, Delivery::Gap { .. }));
}

#[tokio::test(start_paused = true)]
async fn in_process_history_expires_by_age_and_a_resume_past_it_is_a_gap() {
    let topic = Topic::new("t").unwrap();
    let (hub, from) = resume_point(HistoryConfig::new(100, Duration::from_secs(60)), &topic).await;
    tokio::time::sleep(Duration::from_secs(62)).await;
    resumes_with_a_gap(&hub, &topic, from).await;
}

#[tokio::test]
async fn in_process_history_is_bounded_in_all_and_a_resume_past_it_is_a_gap() {
    let topic = Topic::new("t").unwrap();
    let (hub, from) = resume_point(HistoryConfig::default().max_bytes(20_000), &topic).await;
    // Other topics' publications push the oldest out, whatever their topic.
    for i in 0..40 {
        let other = Topic::new(&format!("other {i}")).unwrap();
        hub.publish(&other, Message::binary(vec![0; 1000])).await.unwrap();
    }
    resumes_with_a_gap(&hub, &topic, from).await;
}

#[tokio::test]
async fn a_publish_returns_the_position_it_got() {
    let hub = Hub::in_process();
    let topic = Topic::new("t").unwrap();
    let mut s = hub.subscriber(SubscriberConfig::default());
    s.subscribe(&topic, None).await.unwrap();
    let one = hub.publish(&topic, Message::text("one")).await.unwrap();
    let many = hub
        .publish_many(&topic, vec![Message::text("two"), Message::text("three")])
        .await
        .unwrap();
    let none = hub.publish_many(&topic, Vec::new()).await.unwrap();
    assert!(none.is_empty());
    let returned: Vec<Position> = one.into_iter().chain(many).collect();
    let mut delivered = Vec::new();
    for _ in 0..3 {
        delivered.push(next_text(&mut s).await.1);
    }
    assert_eq!(returned, delivered);
}

fn down() -> Error {
    Error::Backplane {
        what: "not connected".into(),
        source: None,
    }
}

fn partly(published: usize, sent: usize) -> Error {
    Error::PartlyPublished {
        published,
        sent,
        source: Box::new(down()),
    }
}

/// A hub over a [`Scripted`] backplane that answers batches with `answers`, a publisher on
/// it, and what the backplane was given.
fn failing_on_cue(answers: Vec<Result<(), Error>>) -> (Hub, sockeye_pubsub::Publisher, Scripted) {
    let backplane = Scripted::default();
    *backplane.answers.lock().unwrap() = answers.into();
    let (hub, _) = scripted_hub(&backplane);
    let publisher = hub.subscriber(SubscriberConfig::default()).publisher();
    (hub, publisher, backplane)
}

#[tokio::test]
async fn a_publish_error_says_whether_it_was_published_as_a_batch_error_does() {
    let topic = Topic::new("t").unwrap();
    let (hub, _, _) = failing_on_cue(vec![Err(partly(0, 1)), Err(partly(0, 1))]);
    let one = hub.publish(&topic, Message::text("one")).await.unwrap_err();
    let batch = hub
        .publish_many(&topic, vec![Message::text("one")])
        .await
        .unwrap_err();
    for e in [one, batch] {
        assert!(
            matches!(
                e,
                Error::PartlyPublished {
                    published: 0,
                    sent: 1,
                    ..
                }
            ),
            "sent and not answered must say so: {e:?}"
        );
        assert!(e.to_string().contains("may or may not"), "{e}");
    }
}

/// What `retry` does with a batch a, b, c given `answers`: its result and the batches tried.
async fn retried(
    retry: sockeye_pubsub::PublishRetry,
    answers: Vec<Result<(), Error>>,
) -> (Result<Vec<Option<Position>>, Error>, Vec<Vec<String>>) {
    let (_hub, publisher, backplane) = failing_on_cue(answers);
    let batch = vec!["a".into(), "b".into(), "c".into()];
    let result = retry
        .publish_many(&publisher, &Topic::new("t").unwrap(), batch)
        .await;
    let tries = backplane.tries.lock().unwrap().clone();
    (result, tries)
}

#[tokio::test(start_paused = true)]
async fn publish_retry_retries_only_what_was_not_published() {
    use sockeye_pubsub::PublishRetry;
    let abc = || vec!["a".to_owned(), "b".to_owned(), "c".to_owned()];
    // Down twice (nothing sent): the whole batch again, then its last position.
    let (r, tries) = retried(PublishRetry::default(), vec![Err(down()), Err(down()), Ok(())]).await;
    let positions = r.unwrap();
    assert_eq!(positions.len(), 3);
    assert!(positions.iter().all(Option::is_some), "{positions:?}");
    assert_eq!(positions[2].as_ref().unwrap().offset, 9);
    assert_eq!(tries, [abc(), abc(), abc()]);
    // The first known published, the rest known not: the rest only.
    let (r, tries) = retried(PublishRetry::default(), vec![Err(partly(1, 1)), Ok(())]).await;
    let positions = r.unwrap();
    // The first was published by the failed try, which said how many, not where.
    assert_eq!(positions.len(), 3);
    assert!(positions[0].is_none());
    assert_eq!(positions[2].as_ref().unwrap().offset, 5);
    assert_eq!(tries, [abc(), vec!["b".to_owned(), "c".to_owned()]]);
    // Maybe published: never retried (it could be delivered twice).
    let (r, tries) = retried(PublishRetry::default(), vec![Err(partly(0, 2))]).await;
    assert!(
        matches!(
            r,
            Err(Error::PartlyPublished {
                published: 0,
                sent: 2,
                ..
            })
        ),
        "{r:?}"
    );
    assert_eq!(tries.len(), 1);
    // Patience: 1 s of waits from 50 ms doubling (50, 100, 200, 400 ms), then the error.
    let started = tokio::time::Instant::now();
    let waits = sockeye::backoff::Backoff::new(Duration::from_millis(50), Duration::from_secs(1))
        .jitter(sockeye::backoff::Jitter::None);
    let policy = PublishRetry::default()
        .patience(Duration::from_secs(1))
        .backoff(waits);
    let (r, tries) = retried(policy, (0..100).map(|_| Err(down())).collect()).await;
    assert!(matches!(r, Err(Error::Backplane { .. })), "{r:?}");
    assert_eq!(tries.len(), 5);
    assert!(started.elapsed() < Duration::from_secs(1));
}

/// Issue 41: each queue's own bound (here 1 MiB) let 1,000 slow readers of their own topics hold
/// 1,000 × that. The node's bound holds however many there are: the largest queues are stopped
/// (`NodeQueuesFull`, 1013: resume later), the others keep everything they were sent, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_bound_on_all_queues_holds_under_a_thousand_slow_readers() {
    const MAX: usize = 8 << 20;
    const READERS: usize = 1_000;
    let config = HubConfig::default().max_queued_bytes_total(MAX);
    let hub = Hub::with_backplane(config, |events| InProcess::new(events, HistoryConfig::default()));
    let mut readers = Vec::new();
    for i in 0..READERS {
        let mut s = hub.subscriber(SubscriberConfig::new(1 << 20, SlowPolicy::Close));
        s.subscribe(&Topic::new(&format!("user/{i}")).unwrap(), None)
            .await
            .unwrap();
        readers.push(s);
    }
    // A sentinel on a topic of its own, published last in each round: once it has its message
    // the fan-out has queued everything before it.
    let sentinel_topic = Topic::new("sentinel").unwrap();
    let mut sentinel = hub.subscriber(SubscriberConfig::default());
    sentinel.subscribe(&sentinel_topic, None).await.unwrap();
    let payload = Message::binary(vec![7u8; 40_000]);
    let mut most = 0;
    for _round in 0..3 {
        for i in 0..READERS {
            let topic = Topic::new(&format!("user/{i}")).unwrap();
            hub.publish(&topic, payload.clone()).await.unwrap();
        }
        hub.publish(&sentinel_topic, Message::text("end")).await.unwrap();
        assert!(matches!(next(&mut sentinel).await, Delivery::Message(_)));
        most = most.max(hub.queued_bytes());
        assert!(hub.queued_bytes() <= MAX, "{} over {MAX}", hub.queued_bytes());
    }
    // Without the node's bound: 1,000 × 3 × 40 KB = 120 MB queued.
    let held: usize = readers.iter().map(Subscriber::queued_bytes).sum();
    assert!(
        held <= MAX + READERS * 16 * 1024,
        "{held} bytes held in all (the count leaves out under 16 KiB a queue)"
    );
    let (mut stopped, mut whole) = (0, 0);
    for s in &mut readers {
        match s.try_recv() {
            Some(Err(Error::NodeQueuesFull { queued, max })) => {
                assert_eq!(max, MAX);
                assert!(queued >= 16 * 1024, "{queued}: only queues counted are stopped");
                assert!(s.try_recv().is_none(), "nothing after the stop");
                stopped += 1;
            }
            Some(Ok(Delivery::Message(first))) => {
                // Kept: all three, in order.
                let mut offsets = vec![first.position().unwrap().offset];
                while let Some(Ok(Delivery::Message(m))) = s.try_recv() {
                    offsets.push(m.position().unwrap().offset);
                }
                assert_eq!(offsets, [1, 2, 3]);
                whole += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(stopped + whole, READERS);
    assert!(
        stopped > 0 && whole > 0,
        "{stopped} stopped, {whole} kept everything"
    );
    assert!(most > MAX / 2, "the bound was approached: {most}");
}

/// A backplane the test drives whose history, one per topic (epoch "E", contiguous offsets),
/// answers each read `delay` late once `slow` is set: a history server far away.
#[derive(Clone, Default)]
struct SlowHistory {
    histories: std::sync::Arc<std::sync::Mutex<std::collections::HashMap<Topic, Vec<Publication>>>>,
    slow: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl SlowHistory {
    fn keep(&self, p: &Publication) {
        let mut h = self.histories.lock().unwrap();
        h.entry(p.topic.clone()).or_default().push(p.clone());
    }
}

impl Backplane for SlowHistory {
    fn capabilities(&self) -> Capabilities {
        Scripted::default().capabilities()
    }

    fn publish(&self, _: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async { Err(Error::Closed) })
    }

    fn subscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn unsubscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        let all = self
            .histories
            .lock()
            .unwrap()
            .get(topic)
            .cloned()
            .unwrap_or_default();
        let since = since.cloned();
        let slow = self.slow.load(std::sync::atomic::Ordering::SeqCst);
        Box::pin(async move {
            if slow {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let latest = all.last().and_then(|p| p.position.clone());
            Ok(match (since, &latest) {
                (None, _) => History::Complete(all.into_iter().take(limit).collect()),
                (Some(s), Some(l)) if s.epoch == l.epoch && s.offset <= l.offset => History::Complete(
                    all.into_iter()
                        .filter(|p| p.position.as_ref().unwrap().offset > s.offset)
                        .take(limit)
                        .collect(),
                ),
                (Some(_), _) => History::Lost { latest },
            })
        })
    }
}

/// Issue 39 1g: after an outage, 200 topics are repaired from a history that takes 50 ms a read.
/// A live publication on another topic meanwhile is delivered at once, not after the 10 s the
/// repairs take one after the other; and each repaired topic gets what it missed, then its live
/// publications, in order, none twice.
#[tokio::test]
async fn repairs_after_an_outage_do_not_hold_up_live_delivery() {
    let backplane = SlowHistory::default();
    let mut events = None;
    let hub = Hub::with_backplane(HubConfig::default(), |tx| {
        events = Some(tx);
        backplane.clone()
    });
    let events = events.unwrap();
    let mut s = hub.subscriber(SubscriberConfig::default().max_subscriptions(300));
    let topics: Vec<Topic> = (0..200).map(|i| Topic::new(&format!("t{i}")).unwrap()).collect();
    for t in &topics {
        s.subscribe(t, None).await.unwrap();
        let p = scripted(t, 1, &format!("{t}-1"));
        backplane.keep(&p);
        events.send(Event::Publication(p)).await.unwrap();
    }
    for _ in &topics {
        next_text(&mut s).await;
    }
    // The outage: every topic gets offset 2, not received live.
    backplane.slow.store(true, std::sync::atomic::Ordering::SeqCst);
    events
        .send(Event::Lost {
            reason: "test".into(),
        })
        .await
        .unwrap();
    for t in &topics {
        backplane.keep(&scripted(t, 2, &format!("{t}-2")));
    }
    events.send(Event::Restored).await.unwrap();
    // Live offset 3 on every repaired topic, while it is repaired (held behind its history).
    for t in &topics {
        let p = scripted(t, 3, &format!("{t}-3"));
        backplane.keep(&p);
        events.send(Event::Publication(p)).await.unwrap();
    }
    // Another topic, followed from now on: its live publication is not held up.
    let mut other = hub.subscriber(SubscriberConfig::default());
    let live = Topic::new("live").unwrap();
    other.subscribe(&live, None).await.unwrap();
    let started = std::time::Instant::now();
    events
        .send(Event::Publication(scripted(&live, 1, "now")))
        .await
        .unwrap();
    assert_eq!(next_text(&mut other).await.0, "now");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "a live publication waited {took:?} behind the repairs (200 × 50 ms one after the other)"
    );
    // Every topic: 2 (recovered), then 3 (live, held behind it), once each.
    let mut seen: std::collections::HashMap<String, Vec<String>> = std::collections::HashMap::new();
    for _ in 0..400 {
        let (text, _) = timeout(Duration::from_secs(20), next_text(&mut s)).await.unwrap();
        let topic = text.split('-').next().unwrap().to_owned();
        seen.entry(topic).or_default().push(text);
    }
    for t in &topics {
        assert_eq!(
            seen[&t.to_string()],
            [format!("{t}-2"), format!("{t}-3")],
            "topic {t}"
        );
    }
    nothing_more(&mut s).await;
}

/// History for `topic`: offsets `from..=to` of epoch E, kept without being sent live.
fn stored(backplane: &Scripted, topic: &Topic, offsets: std::ops::RangeInclusive<u64>) {
    let mut history = backplane.history.lock().unwrap();
    for i in offsets {
        history.push(scripted(topic, i, &format!("a{i}")));
    }
}

/// Sends `topic`'s offsets `offsets` (texts `a{i}`) live to the hub, not into its history.
async fn send_live(events: &EventSender, topic: &Topic, offsets: std::ops::RangeInclusive<u64>) {
    for i in offsets {
        events
            .send(Event::Publication(scripted(topic, i, &format!("a{i}"))))
            .await
            .unwrap();
    }
}

/// A hub over a [`Scripted`] backplane whose node follows `topic` from offset 3 (subscriber
/// `a`, live), and a subscriber `s` that resumed from 3 past the node through history (4..=10,
/// stored but never sent live): the backplane, the hub, its events' sender, `a` and `s`.
async fn resumed_past_the_node(topic: &Topic) -> (Scripted, Hub, EventSender, Subscriber, Subscriber) {
    let backplane = Scripted::default();
    let (hub, events) = scripted_hub(&backplane);
    stored(&backplane, topic, 1..=3);
    let mut a = hub.subscriber(SubscriberConfig::default());
    a.subscribe(topic, None).await.unwrap();
    stored(&backplane, topic, 4..=10);
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at3 = scripted(topic, 3, "a3").position.unwrap();
    assert_eq!(
        s.subscribe(topic, Some(at3)).await.unwrap(),
        Recovery::Recovered { count: 7 }
    );
    (backplane, hub, events, a, s)
}

/// Issue 39's checker, redis-replicated (seed 308949): after a failover to a Redis replica the
/// history has nothing of the current epoch (the promoted server starts a new one at the next
/// publication), so the node's repair reports a gap into nothing (`resume` `None`). That gap
/// ended the seam of a subscriber that had resumed past the node through history, and what
/// of the old epoch was still on its way to the node followed it: the same publications
/// again. The seam now stands behind such a gap.
#[tokio::test]
async fn a_gap_into_nothing_does_not_deliver_again_what_a_subscriber_resumed_past() {
    let topic = Topic::new("failed over").unwrap();
    let (backplane, _hub, events, mut a, mut s) = resumed_past_the_node(&topic).await;
    // The failover: the history has nothing of the current epoch; the node's backlog of the
    // old one arrives after.
    backplane.history.lock().unwrap().clear();
    events.send(Event::Restored).await.unwrap();
    send_live(&events, &topic, 5..=10).await;
    let mut want: Vec<String> = (4..=10).map(|i| format!("a{i}@{i}")).collect();
    want.push("GAP(-1)".into());
    assert_eq!(shown(&mut s).await, want);
    // The node's own subscriber had none of them: the gap, then what came.
    let mut want = vec!["GAP(-1)".to_owned()];
    want.extend((5..=10).map(|i| format!("a{i}@{i}")));
    assert_eq!(shown(&mut a).await, want);
}

/// A hub over a [`Scripted`] backplane whose node follows `topic` live from its start, with
/// subscriber `a` having had offsets 1 to 3 (live, not in the history): the backplane, the hub,
/// its events' sender and `a`.
async fn following_live(topic: &Topic) -> (Scripted, Hub, EventSender, Subscriber) {
    let backplane = Scripted::default();
    let (hub, events) = scripted_hub(&backplane);
    let mut a = hub.subscriber(SubscriberConfig::default());
    a.subscribe(topic, None).await.unwrap();
    send_live(&events, topic, 1..=3).await;
    assert_eq!(shown(&mut a).await, ["a1@1", "a2@2", "a3@3"]);
    (backplane, hub, events, a)
}

/// Issue 39's checker, redis-replicated (seed 502383): a node far behind its backplane (its
/// hub stalled) repaired ahead of its live backlog from history, then, after a failover, into
/// nothing (`resume` `None`). Its subscribers live since the start then got the rest of the
/// node's backlog of the old epoch after the gap: positions they had had from the repair
/// (`Reordered`: 7,980 after 22,176). What of the old epoch the backplane still hands on, in its
/// live order, at or before where the node stood when it left the epoch, is what it had; what
/// follows it is new.
#[tokio::test]
async fn a_node_gapped_into_nothing_does_not_deliver_its_backlog_again() {
    let topic = Topic::new("backlog").unwrap();
    let (backplane, _hub, events, mut a) = following_live(&topic).await;
    // The node lags: the history holds up to 20, and a loss reported repairs it to there.
    stored(&backplane, &topic, 1..=20);
    events.send(Event::Restored).await.unwrap();
    let want: Vec<String> = (4..=20).map(|i| format!("a{i}@{i}")).collect();
    assert_eq!(shown(&mut a).await, want);
    // The failover: nothing of the current epoch in the history; then the node's backlog.
    backplane.history.lock().unwrap().clear();
    events.send(Event::Restored).await.unwrap();
    send_live(&events, &topic, 4..=25).await;
    let mut want = vec!["GAP(-1)".to_owned()];
    want.extend((21..=25).map(|i| format!("a{i}@{i}")));
    assert_eq!(shown(&mut a).await, want);
}

/// Issue 39's checker, redis-cluster (seed 511958, `Lost`). A failover: the node's repair found
/// nothing of the new epoch yet and told a gap into nothing (no seam: `last` none). Its
/// subscription then stayed deaf to the new epoch (on the demoted primary, until a slot
/// migration made it subscribe again), and the first publication that reached it, 92, was
/// delivered with nothing before it, while subscribers that had resumed into the new epoch
/// through history had 1 and 2: 89 publications neither repaired nor reported. With contiguous
/// offsets, a node with no seam in an epoch owes its subscribers that epoch from offset 1: a
/// first publication past 1 is a jump, repaired from history first, as any other.
#[tokio::test]
async fn a_node_without_a_seam_repairs_a_jump_at_its_first_publication() {
    let topic = Topic::new("deaf after a failover").unwrap();
    let (backplane, hub, events, mut a) = following_live(&topic).await;
    // The failover: nothing of the new epoch in the history yet.
    backplane.history.lock().unwrap().clear();
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut a).await, ["GAP(-1)"]);
    // Another client resumes into the new epoch through history, and gets f1 and f2.
    let f = |i: u64| scripted_in("F", &topic, i, &format!("f{i}"));
    backplane.history.lock().unwrap().extend([f(1), f(2)]);
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at3 = scripted(&topic, 3, "a3").position.unwrap();
    assert_eq!(s.subscribe(&topic, Some(at3)).await.unwrap(), Recovery::Lost);
    assert_eq!(shown(&mut s).await, ["GAP(0)", "f1@1", "f2@2"]);
    // Published while the node was deaf; the last one reaches it.
    backplane.history.lock().unwrap().extend((3..=5).map(f));
    events.send(Event::Publication(f(5))).await.unwrap();
    assert_eq!(shown(&mut s).await, ["f3@3", "f4@4", "f5@5"]);
    let want: Vec<String> = (1..=5).map(|i| format!("f{i}@{i}")).collect();
    assert_eq!(shown(&mut a).await, want);
    // What follows comes as it is, once.
    backplane.history.lock().unwrap().push(f(6));
    events.send(Event::Publication(f(6))).await.unwrap();
    assert_eq!(shown(&mut s).await, ["f6@6"]);
    assert_eq!(shown(&mut a).await, ["f6@6"]);
}

/// Issue 39's checker, web-redis-cluster (seed 531182: `EpochWentBack`, then `StaleGap`). The
/// node entered a new epoch (a failover) through a gap into nothing, so the epoch it left was
/// remembered nowhere. Then the hung old primary, let go, ran a queued publish in the old epoch
/// while the new primary hung in turn (history unanswered): the node took it for a jump, its
/// repair went unanswered, and it delivered the old epoch's publication after the new one's. Its
/// next repair, from that dead position, told `GAP(0)` and gave the new epoch again. Epochs never
/// come back: an epoch the node's delivery moves out of, however it moves, is past.
#[tokio::test(start_paused = true)]
async fn a_late_publication_of_an_epoch_left_through_a_gap_into_nothing_is_dropped() {
    let topic = Topic::new("a demoted primary let go").unwrap();
    let (backplane, _hub, events, mut a) = following_live(&topic).await;
    // The failover: nothing of the new epoch in the history yet.
    backplane.history.lock().unwrap().clear();
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut a).await, ["GAP(-1)"]);
    let f = |i: u64| scripted_in("F", &topic, i, &format!("f{i}"));
    for i in 1..=2 {
        backplane.history.lock().unwrap().push(f(i));
        events.send(Event::Publication(f(i))).await.unwrap();
    }
    assert_eq!(shown(&mut a).await, ["f1@1", "f2@2"]);
    // The new primary hangs (history never answers); the old one publishes in the old epoch.
    backplane.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    events
        .send(Event::Publication(scripted(&topic, 4, "a4")))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(31)).await;
    assert_eq!(shown(&mut a).await, Vec::<String>::new());
    // The cluster is whole again: the new epoch goes on, once.
    backplane.stall.store(false, std::sync::atomic::Ordering::SeqCst);
    backplane.history.lock().unwrap().push(f(3));
    events.send(Event::Publication(f(3))).await.unwrap();
    assert_eq!(shown(&mut a).await, ["f3@3"]);
}

/// The same for a node that subscribed while the topic had nothing published (no seam either):
/// its first publication past 1 is repaired from history first.
#[tokio::test]
async fn a_node_that_followed_from_nothing_repairs_a_jump_at_its_first_publication() {
    let topic = Topic::new("deaf from the start").unwrap();
    let backplane = Scripted::default();
    let (hub, events) = scripted_hub(&backplane);
    let mut s = hub.subscriber(SubscriberConfig::default());
    s.subscribe(&topic, None).await.unwrap();
    stored(&backplane, &topic, 1..=5);
    send_live(&events, &topic, 5..=5).await;
    let want: Vec<String> = (1..=5).map(|i| format!("a{i}@{i}")).collect();
    assert_eq!(shown(&mut s).await, want);
}

/// Issue 39's checker, NATS JetStream (seed 942469): a publication of another epoch than the
/// node's, with no outage seen (on NATS, one sent across a server restart, naming the previous
/// life), is repaired first; the history knows nothing of a current epoch (the topic's newest
/// is of another life), so the repair is a gap into nothing. The publication held behind it was
/// then delivered after the gap, under an epoch the subscribers had left (139 of the old life
/// after 138 of the new). It is covered by the gap; what follows in the node's epoch comes.
#[tokio::test]
async fn a_publication_of_another_epoch_behind_a_gap_into_nothing_is_covered_by_it() {
    let topic = Topic::new("straggler").unwrap();
    let (_backplane, _hub, events, mut a) = following_live(&topic).await;
    // The straggler, of epoch F; the history knows no current epoch.
    events
        .send(Event::Publication(scripted_in("F", &topic, 4, "f4")))
        .await
        .unwrap();
    send_live(&events, &topic, 5..=6).await;
    assert_eq!(shown(&mut a).await, ["GAP(-1)", "a5@5", "a6@6"]);
}

/// Issue 39's checker, NATS JetStream (seed 33666): a subscriber resumed from the old epoch
/// into the current one through history, past its node, which was still behind in the old
/// epoch. The node's catch-up gap there (resuming in the old epoch) ended the subscriber's seam
/// as if it moved it on; the node's next gap, into the current epoch behind where the
/// subscriber stood, then reached it (a stale gap: a client keeping `resume` gets again what it
/// had), and what followed it again. A catch-up gap in the epoch the subscriber left is stale.
#[tokio::test]
async fn a_catch_up_gap_in_the_epoch_a_subscriber_left_does_not_end_its_seam() {
    let topic = Topic::new("left behind").unwrap();
    let (backplane, hub, events, mut a) = following_live(&topic).await;
    // The current epoch, F, in the history: a subscriber resuming from E:3 moves into it.
    let current: Vec<Publication> = (1..=5)
        .map(|i| scripted_in("F", &topic, i, &format!("f{i}")))
        .collect();
    *backplane.history.lock().unwrap() = current.clone();
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at3 = scripted(&topic, 3, "a3").position.unwrap();
    assert_eq!(s.subscribe(&topic, Some(at3)).await.unwrap(), Recovery::Lost);
    let got = shown(&mut s).await;
    assert_eq!(got.last().map(String::as_str), Some("f5@5"), "{got:?}");
    node_catches_up_behind(&backplane, &events, &topic, current, &mut a, &mut s).await;
}

/// The node of `a` (live in E, up to 3) repairs in E first (a gap resuming in E: its limits
/// dropped 4 to 9), then into F (`current`, f1..f5), while `s` had resumed into F up to f5: `s`
/// gets nothing again, then what is live in F, as `a` does.
async fn node_catches_up_behind(
    backplane: &Scripted,
    events: &EventSender,
    topic: &Topic,
    current: Vec<Publication>,
    a: &mut Subscriber,
    s: &mut Subscriber,
) {
    *backplane.history.lock().unwrap() = (10..=12).map(|i| scripted(topic, i, &format!("a{i}"))).collect();
    events.send(Event::Restored).await.unwrap();
    let node = shown(a).await;
    assert_eq!(node.first().map(String::as_str), Some("GAP(9)"), "{node:?}");
    *backplane.history.lock().unwrap() = current;
    events.send(Event::Restored).await.unwrap();
    let node = shown(a).await;
    assert_eq!(node.last().map(String::as_str), Some("f5@5"), "{node:?}");
    // The subscriber had all of it: nothing again.
    assert_eq!(shown(s).await, Vec::<String>::new());
    // Then live in F, to both.
    let f6 = scripted_in("F", topic, 6, "f6");
    events.send(Event::Publication(f6)).await.unwrap();
    assert_eq!(shown(s).await, ["f6@6"]);
    assert_eq!(shown(a).await, ["f6@6"]);
}

/// Issue 39's checker, NATS JetStream (the stale gaps `tests/chaos.rs` tolerated on its fixed
/// seed 1, caught with the nodes' debug log): a subscriber that was in the current epoch already
/// failed over to a node still behind in the old one (its consumer far behind after several
/// restarts) and resumed there through history: `Recovered`, no epoch left. The node's catch-up
/// gap in the old epoch ended its seam; the node's next gap, into the current epoch behind where
/// the subscriber stood, then reached it (a gap resuming from 7309 after 7359 was delivered). The
/// node's epoch when the subscriber joined, if not the one it resumed into, is behind it too.
#[tokio::test]
async fn a_catch_up_gap_in_the_epoch_its_node_stood_in_does_not_end_a_resumed_seam() {
    let topic = Topic::new("node behind").unwrap();
    let (backplane, hub, events, mut a) = following_live(&topic).await;
    // The current epoch, F, in the history; a subscriber already in it resumes from F:2.
    let current: Vec<Publication> = (1..=5)
        .map(|i| scripted_in("F", &topic, i, &format!("f{i}")))
        .collect();
    *backplane.history.lock().unwrap() = current.clone();
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at2 = current[1].position.clone().unwrap();
    assert_eq!(
        s.subscribe(&topic, Some(at2)).await.unwrap(),
        Recovery::Recovered { count: 3 }
    );
    assert_eq!(shown(&mut s).await, ["f3@3", "f4@4", "f5@5"]);
    node_catches_up_behind(&backplane, &events, &topic, current, &mut a, &mut s).await;
}

/// Issue 39's checker, web-redis-aof (seed 416366, `NotResumed`): a web client resumed into
/// the current epoch through its node's history (a gap to 0 of it) past its node, still
/// behind; the node's repair then found nothing of any current epoch (the AOF's tail was cut
/// and Redis restarted) and told a gap into nothing, which leaves a resumed subscription's seam
/// standing (what the node still delivers behind it, the subscription has). The seam dropped
/// every publication of another epoch than its own, and the node's next epoch is another: the
/// client got nothing more of the topic, for good (270 publications after the heal). Behind a
/// gap into nothing, the seam drops only what is at or before it in its epoch, and the epochs
/// the subscription is past; a new epoch is new.
#[tokio::test]
async fn a_resumed_seam_left_standing_by_a_gap_into_nothing_lets_a_new_epoch_through() {
    let topic = Topic::new("into nothing").unwrap();
    let (backplane, hub, events, mut a) = following_live(&topic).await;
    // The current epoch, F, holds f1; a subscriber resuming from E:3 moves into it past the
    // node, still in E.
    *backplane.history.lock().unwrap() = vec![scripted_in("F", &topic, 1, "f1")];
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at3 = scripted(&topic, 3, "a3").position.unwrap();
    assert_eq!(s.subscribe(&topic, Some(at3)).await.unwrap(), Recovery::Lost);
    assert_eq!(shown(&mut s).await, ["GAP(0)", "f1@1"]);
    // The engine loses everything and starts again: the node's repair finds nothing.
    backplane.history.lock().unwrap().clear();
    events.send(Event::Restored).await.unwrap();
    assert_eq!(shown(&mut a).await, ["GAP(-1)"]);
    assert_eq!(shown(&mut s).await, ["GAP(-1)"]);
    // The new epoch, G, live: to both.
    let g: Vec<Publication> = (1..=2)
        .map(|i| scripted_in("G", &topic, i, &format!("g{i}")))
        .collect();
    for p in &g {
        backplane.history.lock().unwrap().push(p.clone());
        events.send(Event::Publication(p.clone())).await.unwrap();
    }
    assert_eq!(shown(&mut a).await, ["g1@1", "g2@2"]);
    assert_eq!(shown(&mut s).await, ["g1@1", "g2@2"]);
}

/// Issue 39's checker, NATS JetStream (seed 263681): a subscriber resumed into nothing (its
/// seam `Left` at the position it resumed from) while its node delivered on; what the node
/// delivered after that position, held during the recovery, did not end the seam (a publication
/// pushed afterwards would have), so the node's next gap into nothing was judged stale for it:
/// 141 publications missed with no gap. The first publication after the seam ends it.
#[tokio::test]
async fn a_publication_held_during_a_resume_ends_the_seam_it_follows() {
    let topic = Topic::new("held").unwrap();
    let (backplane, hub, events, mut a) = following_live(&topic).await;
    // Nothing of a current epoch in the history; the subscriber's read waits while the node
    // delivers 4..10.
    let pause = backplane.paused.lock().await;
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at8 = scripted(&topic, 8, "a8").position.unwrap();
    let t = topic.clone();
    let resuming = tokio::spawn(async move {
        let r = s.subscribe(&t, Some(at8)).await.unwrap();
        (s, r)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    send_live(&events, &topic, 4..=10).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(pause);
    let (mut s, r) = resuming.await.unwrap();
    assert_eq!(r, Recovery::Lost);
    assert_eq!(shown(&mut s).await, ["GAP(-1)", "a9@9", "a10@10"]);
    // The node's own gap into nothing reaches it: what comes after 10 may be missing.
    events.send(Event::Restored).await.unwrap();
    let mut want: Vec<String> = (4..=10).map(|i| format!("a{i}@{i}")).collect();
    want.push("GAP(-1)".into());
    assert_eq!(shown(&mut a).await, want);
    assert_eq!(shown(&mut s).await, ["GAP(-1)"]);
}

/// The same seen from a subscriber resuming (from 8) on a node that has not yet noticed the
/// failover: it is told of a gap into nothing, and what its node still delivers up to its
/// position must not follow the gap (before: 4..10 after it, 4..8 again); what it did not
/// have comes, and the next epoch's first publication.
#[tokio::test]
async fn a_subscriber_resumed_into_nothing_gets_nothing_again() {
    let topic = Topic::new("left").unwrap();
    let backplane = Scripted::default();
    let (hub, events) = scripted_hub(&backplane);
    stored(&backplane, &topic, 1..=3);
    let mut a = hub.subscriber(SubscriberConfig::default());
    a.subscribe(&topic, None).await.unwrap();
    backplane.history.lock().unwrap().clear();
    let mut s = hub.subscriber(SubscriberConfig::default());
    let at8 = scripted(&topic, 8, "a8").position.unwrap();
    assert_eq!(s.subscribe(&topic, Some(at8)).await.unwrap(), Recovery::Lost);
    send_live(&events, &topic, 4..=10).await;
    assert_eq!(shown(&mut s).await, ["GAP(-1)", "a9@9", "a10@10"]);
    let want: Vec<String> = (4..=10).map(|i| format!("a{i}@{i}")).collect();
    assert_eq!(shown(&mut a).await, want);
    // The new epoch's first publication reaches both.
    let f1 = scripted_in("F", &topic, 1, "f1");
    backplane.history.lock().unwrap().push(f1.clone());
    events.send(Event::Publication(f1)).await.unwrap();
    let got = shown(&mut s).await;
    assert_eq!(got.last().map(String::as_str), Some("f1@1"), "{got:?}");
    assert!(got.iter().all(|d| !d.starts_with('a')), "{got:?}");
}

/// A repair whose history never answers is a gap into nothing known (`resume` `None`, the
/// node's seam kept): a subscriber that had resumed past the node through history keeps its
/// own seam behind it too, so the node's backlog is not delivered again (before, that gap
/// ended the subscriber's seam, and 5..10 came twice).
#[tokio::test(start_paused = true)]
async fn an_unanswered_repair_does_not_deliver_the_backlog_again() {
    let topic = Topic::new("unanswered").unwrap();
    let (backplane, _hub, events, _a, mut s) = resumed_past_the_node(&topic).await;
    backplane.stall.store(true, std::sync::atomic::Ordering::SeqCst);
    events.send(Event::Restored).await.unwrap();
    // Past the repair's timeout: a gap into nothing known.
    tokio::time::sleep(Duration::from_secs(31)).await;
    send_live(&events, &topic, 4..=10).await;
    let mut want: Vec<String> = (4..=10).map(|i| format!("a{i}@{i}")).collect();
    want.push("GAP(-1)".into());
    assert_eq!(shown(&mut s).await, want);
}
