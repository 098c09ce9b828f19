//! Traffic from several publishers across several nodes while something fails, and the check of
//! what every subscriber got (issue 29 §4): every publication once, in its publisher's order, or
//! a `Gap` before what was lost; never a silent miss, a duplicate or a reused position.
//!
//! One publisher per node publishes `i:k` (publisher `i`, its `k`th publication) to every topic
//! in turn, with a pause, and goes on through the failure (a publication that fails is not
//! retried: it may or may not have been published, and either is correct). Two subscribers per
//! node are subscribed to every topic before the traffic starts. The failure runs once
//! publisher 0 has made `fault_at` publications; the publishers go on until it is over and each
//! has made `after` more (so that the nodes see the engine again and anything lost shows), then
//! the subscribers are read until each has every acknowledged publication, or has been quiet
//! for a while.
//!
//! The check, per subscriber and per (publisher, topic): publications arrive in increasing `k`,
//! each once; a publication that was published (acknowledged to its publisher, or delivered to
//! any subscriber) and is missing must come after a `Gap` on its topic delivered since that
//! publisher's previous publication there; the same position is never given to two
//! publications.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sockeye::Message;
use sockeye_pubsub::{Delivery, Hub, Position, Published, SubscriberConfig, Topic};
use tokio::sync::Notify;
use tokio::time::{Instant, timeout};

/// The shape of the traffic.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    /// The topics every publisher publishes to, in turn, and every subscriber subscribes to.
    pub(crate) topics: Vec<Topic>,
    /// Publications per publisher (each to the next topic), at least.
    pub(crate) publications: usize,
    /// The pause between two publications of a publisher.
    pub(crate) pause: Duration,
    /// The failure starts once publisher 0 has made this many publications.
    pub(crate) fault_at: usize,
    /// Publications each publisher makes after the failure is over, at least.
    pub(crate) after: usize,
    /// How long the subscribers must be quiet, once the publishers are done, to be finished.
    pub(crate) quiet: Duration,
}

/// What happened, for the test's log (the check has passed when this is returned).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Publications acknowledged to their publishers.
    pub(crate) acknowledged: usize,
    /// Publications whose publish failed (not retried).
    pub(crate) failed: usize,
    /// Of those, delivered all the same (published before the failure was noticed).
    pub(crate) failed_but_delivered: usize,
    /// Messages delivered, over every subscriber.
    pub(crate) delivered: usize,
    /// Gaps delivered, over every subscriber.
    pub(crate) gaps: usize,
    /// The same, per topic (in the plan's order).
    pub(crate) gaps_by_topic: Vec<usize>,
    /// Published publications missing at a subscriber (each after a gap), over every subscriber.
    pub(crate) missed_after_a_gap: usize,
    /// The longest a publisher's publish failed in a row (how long the engine was unusable).
    pub(crate) longest_outage: Duration,
}

/// A publication: publisher, topic index, number.
type Id = (usize, usize, usize);

/// Runs the plan across `hubs` (one publisher and two subscribers each), with `fault` (the
/// failure, and whatever restores service) run during the traffic; panics with every problem
/// found, returns what happened otherwise.
pub(crate) async fn run(hubs: &[Hub], plan: &Plan, fault: impl AsyncFnOnce()) -> Outcome {
    let topics = Arc::new(plan.topics.clone());
    let mut collectors = Vec::new();
    // Set once the publishers are done: what they had acknowledged.
    let done: Arc<std::sync::OnceLock<BTreeSet<Id>>> = Arc::default();
    for (n, hub) in hubs.iter().enumerate() {
        for s in 0..2 {
            let mut sub = hub.subscriber(SubscriberConfig::default());
            for t in topics.iter() {
                sub.subscribe(t, None).await.unwrap();
            }
            let (done, quiet, topics) = (Arc::clone(&done), plan.quiet, Arc::clone(&topics));
            collectors.push(tokio::spawn(async move {
                let mut got = Vec::new();
                let mut delivered = BTreeSet::new();
                let deadline = Instant::now() + Duration::from_secs(90);
                loop {
                    // Finished once it has every acknowledged publication, or has been quiet
                    // for `quiet` after the publishers are done.
                    let (wait, last) = match done.get() {
                        Some(acked) if acked.is_subset(&delivered) => break,
                        Some(_) => (quiet, true),
                        None => (Duration::from_millis(200), false),
                    };
                    match timeout(wait, sub.recv()).await {
                        Ok(Some(Ok(d))) => {
                            if let Delivery::Message(m) = &d {
                                delivered.insert(id_of(&topics, m));
                            }
                            got.push(d);
                        }
                        Ok(other) => panic!("subscriber {s} of node {n}: {other:?}"),
                        Err(_) if last => break,
                        Err(_) => {}
                    }
                    assert!(
                        Instant::now() < deadline,
                        "subscriber {s} of node {n}: still receiving after 90 s"
                    );
                }
                ((n, s), got)
            }));
        }
    }

    let fault_due = Arc::new(Notify::new());
    let fault_over = Arc::new(AtomicBool::new(false));
    let mut publishers = Vec::new();
    for (i, hub) in hubs.iter().enumerate() {
        let publisher = hub.subscriber(SubscriberConfig::default());
        let (topics, plan) = (Arc::clone(&topics), plan.clone());
        let (fault_due, fault_over) = (Arc::clone(&fault_due), Arc::clone(&fault_over));
        publishers.push(tokio::spawn(async move {
            let (mut acked, mut failed) = (BTreeSet::new(), BTreeSet::new());
            let (mut outage, mut longest) = (None::<Instant>, Duration::ZERO);
            let mut after_fault = 0;
            let mut k = 0;
            while k < plan.publications || after_fault < plan.after {
                let t = k % topics.len();
                let text = Message::Text(format!("{i}:{k}").into());
                match timeout(Duration::from_secs(5), publisher.publish(&topics[t], text)).await {
                    Ok(Ok(_)) => {
                        acked.insert((i, t, k));
                        if let Some(since) = outage.take() {
                            longest = longest.max(since.elapsed());
                        }
                    }
                    Ok(Err(_)) | Err(_) => {
                        failed.insert((i, t, k));
                        outage.get_or_insert_with(Instant::now);
                    }
                }
                k += 1;
                if i == 0 && k == plan.fault_at {
                    fault_due.notify_one();
                }
                if fault_over.load(Ordering::SeqCst) {
                    after_fault += 1;
                }
                tokio::time::sleep(plan.pause).await;
            }
            (acked, failed, longest)
        }));
    }
    fault_due.notified().await;
    fault().await;
    fault_over.store(true, Ordering::SeqCst);

    let mut outcome = Outcome::default();
    let (mut acked, mut failed) = (BTreeSet::new(), BTreeSet::new());
    for p in publishers {
        let (a, f, longest) = p.await.unwrap();
        acked.extend(a);
        failed.extend(f);
        outcome.longest_outage = outcome.longest_outage.max(longest);
    }
    let _ = done.set(acked.clone());
    let mut received = Vec::new();
    for c in collectors {
        received.push(c.await.unwrap());
    }
    outcome.acknowledged = acked.len();
    outcome.failed = failed.len();
    check(&topics, &acked, &failed, &received, &mut outcome);
    outcome
}

/// A delivered publication's publisher, topic and number.
fn id_of(topics: &[Topic], m: &Published) -> Id {
    let text = std::str::from_utf8(m.message().as_payload()).unwrap();
    let (i, k) = text.split_once(':').unwrap();
    let t = topics.iter().position(|x| x == m.topic()).unwrap();
    (i.parse().unwrap(), t, k.parse().unwrap())
}

/// The check (see the module documentation); panics with every problem found.
fn check(
    topics: &[Topic],
    acked: &BTreeSet<Id>,
    failed: &BTreeSet<Id>,
    received: &[((usize, usize), Vec<Delivery>)],
    outcome: &mut Outcome,
) {
    outcome.gaps_by_topic = vec![0; topics.len()];
    let topic_index = |t: &Topic| topics.iter().position(|x| x == t).unwrap();
    let parse = |m: &Published| id_of(topics, m);
    // Published: acknowledged, or delivered anywhere (a failed publish may have gone through).
    let mut published = acked.clone();
    let mut positions: HashMap<Position, Id> = HashMap::new();
    let mut problems = Vec::new();
    for (_, deliveries) in received {
        for d in deliveries {
            if let Delivery::Message(m) = d {
                let id = parse(m);
                published.insert(id);
                let Some(p) = m.position() else { continue };
                if let Some(other) = positions.insert(p.clone(), id)
                    && other != id
                {
                    problems.push(format!("position {p} given to {other:?} and to {id:?}"));
                }
            }
        }
    }
    outcome.failed_but_delivered = failed.intersection(&published).count();
    for ((node, s), deliveries) in received {
        let who = format!("node {node} subscriber {s}");
        // Per (publisher, topic): the last k delivered, and whether a gap on the topic came since.
        let mut last: HashMap<(usize, usize), (Option<usize>, bool)> = HashMap::new();
        let missing = |key: (usize, usize), from: usize, to: usize, gap: bool, problems: &mut Vec<String>| {
            let lost: Vec<usize> = (from..to)
                .filter(|&k| published.contains(&(key.0, key.1, k)))
                .collect();
            if lost.is_empty() {
                return 0;
            }
            if !gap {
                problems.push(format!(
                    "{who}: publisher {} on topic {}: {} published publications missed without a gap \
                     (k {:?}..={:?})",
                    key.0,
                    key.1,
                    lost.len(),
                    lost.first().unwrap(),
                    lost.last().unwrap()
                ));
                return 0;
            }
            lost.len()
        };
        for d in deliveries {
            match d {
                Delivery::Message(m) => {
                    outcome.delivered += 1;
                    let (i, t, k) = parse(m);
                    let entry = last.entry((i, t)).or_insert((None, false));
                    let from = entry.0.map_or(0, |l| l + 1);
                    if entry.0.is_some_and(|l| k <= l) {
                        problems.push(format!(
                            "{who}: publisher {i} on topic {t}: {k} after {} (a duplicate or out of order)",
                            entry.0.unwrap()
                        ));
                        continue;
                    }
                    let gap = entry.1;
                    *entry = (Some(k), false);
                    outcome.missed_after_a_gap += missing((i, t), from, k, gap, &mut problems);
                }
                Delivery::Gap { topic, .. } => {
                    outcome.gaps += 1;
                    let t = topic_index(topic);
                    outcome.gaps_by_topic[t] += 1;
                    for ((_, tt), e) in last.iter_mut() {
                        if *tt == t {
                            e.1 = true;
                        }
                    }
                    // A publisher not heard from yet on this topic: its gap flag is set too.
                    for i in 0..=published.iter().map(|p| p.0).max().unwrap_or(0) {
                        last.entry((i, t)).or_insert((None, true)).1 = true;
                    }
                }
                other => problems.push(format!("{who}: unexpected {other:?}")),
            }
        }
        // The tail: what was published after the last delivered one.
        let keys: BTreeSet<(usize, usize)> = published.iter().map(|p| (p.0, p.1)).collect();
        for key in keys {
            let (l, gap) = last.get(&key).copied().unwrap_or((None, false));
            let end = published
                .iter()
                .filter(|p| (p.0, p.1) == key)
                .map(|p| p.2 + 1)
                .max()
                .unwrap_or(0);
            outcome.missed_after_a_gap += missing(key, l.map_or(0, |l| l + 1), end, gap, &mut problems);
        }
    }
    assert!(
        problems.is_empty(),
        "{} problems ({outcome:?}):\n{}",
        problems.len(),
        problems.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
}
