//! The checker: reads a history (`history.rs`) and proves, per subscriber and topic, pub/sub's
//! promise, or names each violation with the shortest prefix of the history that shows it.
//!
//! A publication is *published* when its publish was acknowledged, or when it was delivered to
//! anyone (a failed publish may have gone through). A subscriber *owes* a published publication
//! on a topic when one of its live subscribes (no position) to the topic had ended before the
//! publish was called, and it did not subscribe live again (dropping what it had) between the
//! publish and the point of judgement. The rules:
//!
//! - **lost**: an owed publication is not delivered, and no gap on its topic was delivered to the
//!   subscriber between the last publication of the same publisher it got before it and the
//!   next one it got after it (or the end); a failed publish (see reordered), missing at the
//!   end, when no gap came after it was called;
//! - **recovered-skipped**: the same, where the subscriber resumed from a position before the
//!   publication's, in the same epoch, after it was acknowledged, and was told `Recovered`;
//! - **duplicate**: a payload delivered twice to a subscriber;
//! - **reordered**: a publisher's publications delivered out of the order it made them; a failed
//!   publish is not ordered: it may take effect at any time after it was called (a node that
//!   still held it when its client timed out and went on, on another socket or node, publishes
//!   it when its backplane is back), so it is judged missing only at the end;
//! - **position-reused**: one position on a topic named two payloads (in acknowledgements or
//!   deliveries, anyone's);
//! - **phantom**: a payload delivered that nobody published;
//! - **stale-gap**: a gap whose `resume` is behind a position of the same epoch already delivered
//!   to that subscriber (a client that keeps `resume`, as `clients/js` does, gets again what it
//!   had); the publications delivered again after it are counted under this kind, not as
//!   duplicates;
//! - **epoch-went-back**: a delivery under an epoch the subscriber had already left for another
//!   one on that topic, or under one older than the subscriber's (epochs are aged by their first
//!   appearance in the history, in any acknowledgement or delivery): a position of the old epoch
//!   after positions of the new one; counted under this kind, not as reordered;
//! - **not-resumed**: a publication acknowledged after every fault healed, owed, not delivered
//!   by the end (a gap does not excuse it: nothing failed any more).
//!
//! A violation found at a delivery is shown by the history up to that delivery; one found only
//! at the end (a tail never delivered) by all of it. [`witness`] keeps, of that prefix, what
//! concerns the subscriber, the topic and the publisher involved.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;

use sockeye_pubsub::Position;

use super::history::{Began, Record, payloads};

/// What is wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    Lost,
    RecoveredSkipped,
    Duplicate,
    Reordered,
    PositionReused,
    Phantom,
    NotResumed,
    StaleGap,
    EpochWentBack,
}

/// One violation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) kind: Kind,
    pub(crate) subscriber: Option<usize>,
    pub(crate) topic: String,
    pub(crate) publisher: Option<usize>,
    /// Records `0..=prefix` show it.
    pub(crate) prefix: usize,
    /// Where its story begins: the publish missed, the first delivery of what came twice, the
    /// delivery of what it came after.
    pub(crate) start: usize,
    /// The publication it is about, if one (its publisher's seq).
    pub(crate) seq: Option<u64>,
    pub(crate) detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} on {} (subscriber {:?}, publisher {:?}), shown by records 0..={}: {}",
            self.kind, self.topic, self.subscriber, self.publisher, self.prefix, self.detail
        )
    }
}

/// Which publications of a range [`check`] judges.
#[derive(Clone, Copy)]
enum Which {
    Acked,
    Failed,
    All,
}

/// A publish, as the history tells it.
#[derive(Debug)]
struct Publish {
    topic: String,
    payload: String,
    invoked: usize,
    acked: Option<usize>,
    position: Option<Position>,
}

/// Where a subscriber stands on a topic while the history is read.
#[derive(Default)]
struct Stream {
    /// Per publisher: the last seq delivered, and the record of the last delivery of one it had
    /// acknowledged (a failed publish may take effect long after the publications that followed
    /// it, past a gap that covers them: its delivery does not move where their gap is looked
    /// for from).
    last: HashMap<usize, (u64, usize)>,
    /// Payloads delivered, with the record of their first delivery.
    payloads: HashMap<String, usize>,
    /// Records at which a gap was delivered.
    /// Records at which a gap was delivered, and whether it named where to resume (a gap
    /// into nothing, `resume` none, names no place: see `judge`).
    gaps: Vec<(usize, bool)>,
    /// The last position delivered.
    high: Option<(Position, usize)>,
    /// Stale gaps: the positions after `resume` up to what had been delivered (same epoch).
    stale: Vec<(Position, u64)>,
    /// The epochs delivered, in the order the subscriber moved to them.
    epochs: Vec<(std::sync::Arc<str>, usize)>,
    /// Records at which a live subscribe ended (subscribed) and at which one was called.
    live_done: Vec<usize>,
    live_called: Vec<usize>,
    /// Resumes told `Recovered`: (called at, from).
    recovered: Vec<(usize, Position)>,
    /// The resume called last, not yet answered: (called at, from).
    pending: Option<(usize, Option<Position>)>,
}

/// Checks `history`; every violation, in the order their prefixes end.
pub(crate) fn check(history: &[Record]) -> Vec<Violation> {
    let mut publishes: BTreeMap<(usize, u64), Publish> = BTreeMap::new();
    let mut by_payload: HashMap<&str, (usize, u64)> = HashMap::new();
    let mut delivered_anywhere: HashSet<(usize, u64)> = HashSet::new();
    let mut healed = None;
    // Where each epoch first appears: their ages.
    let mut first_seen: HashMap<std::sync::Arc<str>, usize> = HashMap::new();
    for (at, r) in history.iter().enumerate() {
        if let Record::Ack {
            position: Some(p), ..
        }
        | Record::Delivery {
            position: Some(p), ..
        } = r
        {
            first_seen.entry(p.epoch.clone()).or_insert(at);
        }
        match r {
            Record::Invoke {
                publisher,
                seq,
                topic,
                payload,
            } => {
                by_payload.insert(payload, (*publisher, *seq));
                publishes.insert(
                    (*publisher, *seq),
                    Publish {
                        topic: topic.clone(),
                        payload: payload.clone(),
                        invoked: at,
                        acked: None,
                        position: None,
                    },
                );
            }
            Record::Ack {
                publisher,
                seq,
                position,
            } => {
                if let Some(p) = publishes.get_mut(&(*publisher, *seq)) {
                    p.acked = Some(at);
                    p.position.clone_from(position);
                }
            }
            Record::Delivery { payload, .. } => {
                if let Some(id) = by_payload.get(payload.as_str()) {
                    delivered_anywhere.insert(*id);
                }
            }
            Record::Healed => healed = healed.or(Some(at)),
            _ => {}
        }
    }
    let published = |id: &(usize, u64)| {
        publishes.get(id).is_some_and(|p| p.acked.is_some()) || delivered_anywhere.contains(id)
    };

    let mut out = Vec::new();
    let mut positions: HashMap<(String, Position), (String, usize)> = HashMap::new();
    // Every position seen, with the payload it named first; a second payload is a violation.
    let mut named = |topic: &'_ str,
                     position: &'_ Option<Position>,
                     payload: &str,
                     at: usize,
                     out: &mut Vec<Violation>| {
        let Some(p) = position.as_ref() else { return };
        let (first, first_at) = positions
            .entry((topic.to_owned(), p.clone()))
            .or_insert_with(|| (payload.to_owned(), at));
        if first != payload {
            out.push(Violation {
                kind: Kind::PositionReused,
                subscriber: None,
                topic: topic.to_owned(),
                publisher: None,
                prefix: at,
                start: *first_at,
                seq: None,
                detail: format!("{p} names {first:?} and {payload:?}"),
            });
        }
    };
    let mut streams: BTreeMap<(usize, String), Stream> = BTreeMap::new();
    // Whether `id` is owed by `s` when judged at record `now`.
    // Owed: live since before it was published (a live subscribe answered, and none called
    // since that was not answered by then: one still pending takes effect at a moment the
    // client cannot know, after the connection it replaces was lost), and not subscribed live
    // again since (what came between is not owed).
    let owed = |s: &Stream, id: &(usize, u64), now: usize| {
        let Some(p) = publishes.get(id) else { return false };
        let last_call = s.live_called.iter().rev().find(|&&c| c < p.invoked);
        published(id)
            && s.live_done
                .iter()
                .any(|&d| d < p.invoked && last_call.is_none_or(|&c| d > c))
            && !s.live_called.iter().any(|&c| c > p.invoked && c <= now)
    };
    // The owed publications of `publisher` on `topic` with a seq in `range`, not delivered.
    // `which`: the acknowledged ones, the failed ones, or both.
    let missing =
        |s: &Stream, topic: &str, publisher: usize, range: std::ops::Range<u64>, now: usize, which: Which| {
            publishes
                .range((publisher, range.start)..(publisher, range.end))
                .filter(|(_, p)| match which {
                    Which::Acked => p.acked.is_some(),
                    Which::Failed => p.acked.is_none(),
                    Which::All => true,
                })
                .filter(|(id, p)| {
                    p.topic == topic && !s.payloads.contains_key(&p.payload) && owed(s, id, now)
                })
                .map(|(id, _)| *id)
                .collect::<Vec<_>>()
        };
    // Judges what `s` misses of `publisher` on `topic` in `range`, at record `now`.
    let judge = |s: &Stream,
                 sub: usize,
                 topic: &str,
                 publisher: usize,
                 range: std::ops::Range<u64>,
                 now: usize,
                 which: Which,
                 out: &mut Vec<Violation>| {
        let since = s.last.get(&publisher).map_or(0, |l| l.1);
        for id in missing(s, topic, publisher, range, now, which) {
            let p = &publishes[&id];
            // A gap reported since the publisher's last delivery (see `last`). One that named
            // where to resume covers what was published before it: after it come the
            // publications past that place, so one published later must come. A gap into
            // nothing (its node lost its place) covers all until the deliveries that follow it,
            // which begin wherever the history then is (an epoch that ended meanwhile is never
            // reached).
            let gap = s
                .gaps
                .iter()
                .any(|&(g, placed)| g > since && g <= now && (!placed || g > p.invoked));
            let after_heal = healed.is_some_and(|h| p.invoked > h) && p.acked.is_some();
            let skipped_by = p.position.as_ref().and_then(|pos| {
                s.recovered.iter().find(|(at, from)| {
                    from.epoch == pos.epoch
                        && from.offset < pos.offset
                        && p.acked.is_some_and(|a| a < *at)
                        && *at <= now
                })
            });
            let (kind, why) = if after_heal {
                (
                    Kind::NotResumed,
                    "acknowledged after every fault healed, never delivered".to_owned(),
                )
            } else if gap {
                continue;
            } else if p.acked.is_none() && s.gaps.iter().any(|&(g, _)| g > p.invoked && g <= now) {
                // A failed publish took effect at some time after it was called: any gap
                // since then may hold it.
                continue;
            } else if let Some((at, from)) = skipped_by {
                (
                    Kind::RecoveredSkipped,
                    format!("the resume from {from} (record {at}) was told Recovered without it"),
                )
            } else {
                (Kind::Lost, "not delivered, and no gap reported for it".to_owned())
            };
            out.push(Violation {
                kind,
                subscriber: Some(sub),
                topic: topic.to_owned(),
                publisher: Some(id.0),
                prefix: now,
                start: p.invoked,
                seq: Some(id.1),
                detail: format!(
                    "{:?} (#{} at {}): {why}",
                    p.payload,
                    id.1,
                    p.position
                        .as_ref()
                        .map_or_else(|| "-".to_owned(), ToString::to_string)
                ),
            });
        }
    };

    for (at, r) in history.iter().enumerate() {
        match r {
            Record::Ack {
                publisher,
                seq,
                position,
            } => {
                if let Some(p) = publishes.get(&(*publisher, *seq)) {
                    named(&p.topic, position, &p.payload, at, &mut out);
                }
            }
            Record::Subscribe {
                subscriber,
                topic,
                from,
            } => {
                let s = streams.entry((*subscriber, topic.clone())).or_default();
                if from.is_none() {
                    s.live_called.push(at);
                    // Live from now: a new stream of deliveries. With no position to resume
                    // from (core NATS), what was on its way to the new node may come again:
                    // the client cannot tell it, and asked for nothing before now.
                    s.payloads.clear();
                    s.last.clear();
                }
                s.pending = Some((at, from.clone()));
            }
            Record::Subscribed {
                subscriber,
                topic,
                began,
            } => {
                let s = streams.entry((*subscriber, topic.clone())).or_default();
                let pending = s.pending.take();
                match (began, pending) {
                    (Began::Live, _) => s.live_done.push(at),
                    (Began::Recovered(_), Some((called, Some(from)))) => s.recovered.push((called, from)),
                    _ => {}
                }
            }
            Record::Gap {
                subscriber,
                topic,
                resume,
            } => {
                let s = streams.entry((*subscriber, topic.clone())).or_default();
                s.gaps.push((at, resume.is_some()));
                if let (Some(r), Some((h, h_at))) = (resume, &s.high)
                    && r.epoch == h.epoch
                    && r.offset < h.offset
                {
                    out.push(Violation {
                        kind: Kind::StaleGap,
                        subscriber: Some(*subscriber),
                        topic: topic.clone(),
                        publisher: None,
                        prefix: at,
                        // From the first delivery of that epoch.
                        start: s
                            .epochs
                            .iter()
                            .rev()
                            .find(|e| e.0 == h.epoch)
                            .map_or(*h_at, |e| e.1),
                        seq: None,
                        detail: format!("a gap resuming from {r}, after {h} was delivered"),
                    });
                    s.stale.push((r.clone(), h.offset));
                }
            }
            Record::Delivery {
                subscriber,
                topic,
                payload,
                position,
            } => {
                named(topic, position, payload, at, &mut out);
                let Some(&(publisher, seq)) = by_payload.get(payload.as_str()) else {
                    out.push(Violation {
                        kind: Kind::Phantom,
                        subscriber: Some(*subscriber),
                        topic: topic.clone(),
                        publisher: None,
                        prefix: at,
                        start: at,
                        seq: None,
                        detail: format!("{payload:?} was never published"),
                    });
                    continue;
                };
                let s = streams.entry((*subscriber, topic.clone())).or_default();
                let violation = |kind, start, detail| Violation {
                    kind,
                    subscriber: Some(*subscriber),
                    topic: topic.clone(),
                    publisher: Some(publisher),
                    prefix: at,
                    start,
                    seq: Some(seq),
                    detail,
                };
                if let Some(&first) = s.payloads.get(payload) {
                    let after_stale = position.as_ref().is_some_and(|p| {
                        s.stale
                            .iter()
                            .any(|(r, h)| r.epoch == p.epoch && r.offset < p.offset && p.offset <= *h)
                    });
                    out.push(if after_stale {
                        violation(
                            Kind::StaleGap,
                            first,
                            format!("{payload:?} delivered again after a stale gap"),
                        )
                    } else {
                        violation(Kind::Duplicate, first, format!("{payload:?} delivered again"))
                    });
                    continue;
                }
                if let Some(p) = position {
                    if s.epochs.last().map(|e| &e.0) != Some(&p.epoch) {
                        let age = |e: &std::sync::Arc<str>| first_seen.get(e).copied().unwrap_or(0);
                        let older = s.epochs.last().is_some_and(|(now, _)| age(&p.epoch) < age(now));
                        if older || s.epochs.iter().any(|e| e.0 == p.epoch) {
                            let (now, since) = s.epochs.last().map_or(("", at), |e| (&*e.0, e.1));
                            out.push(violation(
                                Kind::EpochWentBack,
                                since,
                                format!("{payload:?} at {p}, after positions of epoch {now}"),
                            ));
                            s.payloads.insert(payload.clone(), at);
                            continue;
                        }
                        s.epochs.push((p.epoch.clone(), at));
                    }
                    s.high = Some((p.clone(), at));
                }
                let last = s.last.get(&publisher).copied();
                let failed = publishes
                    .get(&(publisher, seq))
                    .is_some_and(|p| p.acked.is_none());
                if failed && last.is_some_and(|(l, _)| l > seq) {
                    // A failed publish may take effect at any time after it was called (a
                    // node that still had it when its client gave up and moved on): not out
                    // of order.
                    s.payloads.insert(payload.clone(), at);
                    continue;
                }
                if let Some((l, l_at)) = last.filter(|(l, _)| *l > seq) {
                    out.push(violation(
                        Kind::Reordered,
                        l_at,
                        format!("{payload:?} (#{seq}) after #{l}"),
                    ));
                    s.payloads.insert(payload.clone(), at);
                    continue;
                }
                let from = last.map_or(0, |(l, _)| l + 1);
                // Failed publishes before it may still come: judged at the end.
                judge(
                    s,
                    *subscriber,
                    topic,
                    publisher,
                    from..seq,
                    at,
                    Which::Acked,
                    &mut out,
                );
                s.payloads.insert(payload.clone(), at);
                let since = if failed {
                    last.map_or(0, |(_, l_at)| l_at)
                } else {
                    at
                };
                s.last.insert(publisher, (seq, since));
            }
            _ => {}
        }
    }
    // The tails: what was never delivered after the last delivery of each publisher.
    let end = history.len().saturating_sub(1);
    let publishers: HashSet<usize> = publishes.keys().map(|k| k.0).collect();
    for ((sub, topic), s) in &streams {
        for &publisher in &publishers {
            let from = s.last.get(&publisher).map_or(0, |l| l.0 + 1);
            judge(
                s,
                *sub,
                topic,
                publisher,
                from..u64::MAX,
                end,
                Which::All,
                &mut out,
            );
            // Failed publishes passed by later deliveries, still not delivered.
            judge(s, *sub, topic, publisher, 0..from, end, Which::Failed, &mut out);
        }
    }
    out.sort_by_key(|v| (v.prefix, v.kind));
    out
}

/// Splits `violations` into those the engine itself explains by losing publications it had
/// acknowledged, and the rest, for an engine whose offsets are one sequence across topics (a NATS
/// JetStream stream) and that writes no life to tell one run of its store from the next (a
/// cluster: see "No server life in a cluster" in the NATS backplane's docs).
///
/// The proof is in the history: the runner read back, after the engine's restart, the
/// publication acknowledged at the highest offset before it, and found it gone ("the engine lost
/// its tail"); and an offset of one epoch named two payloads (on any topics): the engine gave it
/// again. The first such offset is where the loss begins. What it explains: the `PositionReused` at such offsets (the evidence),
/// and a publication missed (`Lost`, `RecoveredSkipped`, `NotResumed`) that is either of the lost
/// tail (its position of that epoch at or past where the loss begins, recorded, acknowledged or
/// delivered, before the engine was last killed ahead of the first reuse) or at an offset given
/// twice (a subscriber that had the lost one there takes the new one for it: a position names
/// one publication, which the engine broke). Anything else stays a violation: a publication
/// acknowledged after the restart at an offset given once, one before the loss's offset, another
/// kind, or a history without a kill of the whole engine.
pub(crate) fn lost_by_engine(
    history: &[Record],
    violations: Vec<Violation>,
) -> (Vec<Violation>, Vec<Violation>) {
    // Where each (epoch, offset) was first named, and by which payload; the first record naming
    // one again with another payload, per epoch the lowest such offset.
    let payloads = payloads(history);
    let mut named: HashMap<(&str, u64), (&str, usize)> = HashMap::new();
    // Each payload's first record with a position, and that position: to place a missed
    // publication.
    let mut first_seen: HashMap<&str, (usize, (&str, u64))> = HashMap::new();
    let mut loss_from: HashMap<&str, u64> = HashMap::new();
    let mut reused_offsets: HashSet<(&str, u64)> = HashSet::new();
    let mut first_reuse: Option<usize> = None;
    for (at, r) in history.iter().enumerate() {
        let (payload, position) = match r {
            Record::Ack {
                publisher,
                seq,
                position: Some(p),
            } => match payloads.get(&(*publisher, *seq)) {
                Some(&payload) => (payload, p),
                None => continue,
            },
            Record::Delivery {
                payload,
                position: Some(p),
                ..
            } => (payload.as_str(), p),
            _ => continue,
        };
        let key = (&*position.epoch, position.offset);
        first_seen.entry(payload).or_insert((at, key));
        let (first, _) = *named.entry(key).or_insert((payload, at));
        if first != payload {
            reused_offsets.insert(key);
            let from = loss_from.entry(&position.epoch).or_insert(position.offset);
            *from = (*from).min(position.offset);
            first_reuse.get_or_insert(at);
        }
    }
    let Some(first_reuse) = first_reuse else {
        return (Vec::new(), violations);
    };
    // The engine's last kill before the first reuse: the lost tail was recorded before it. And
    // the proof that the engine lost it, read back from the engine after its restart (the
    // runner's `check_tail`): without it, the reuse is not the engine's to answer for.
    let Some(killed) = history[..first_reuse]
        .iter()
        .rposition(|r| matches!(r, Record::Nemesis(what) if what.starts_with("start EngineDown")))
    else {
        return (Vec::new(), violations);
    };
    let proven = history[killed..]
        .iter()
        .any(|r| matches!(r, Record::Nemesis(what) if what.starts_with("the engine lost its tail")));
    if !proven {
        return (Vec::new(), violations);
    }
    let lost_tail = |v: &Violation| {
        let (Some(publisher), Some(seq)) = (v.publisher, v.seq) else {
            return false;
        };
        let Some(&(recorded, (epoch, offset))) = payloads
            .get(&(publisher, seq))
            .and_then(|payload| first_seen.get(payload))
        else {
            return false;
        };
        reused_offsets.contains(&(epoch, offset))
            || (recorded < killed && loss_from.get(epoch).is_some_and(|&from| offset >= from))
    };
    violations.into_iter().partition(|v| match v.kind {
        Kind::PositionReused => reused_offsets
            .iter()
            .any(|&(epoch, offset)| v.detail.starts_with(&format!("{offset}@{epoch} names "))),
        Kind::Lost | Kind::RecoveredSkipped | Kind::NotResumed => lost_tail(v),
        _ => false,
    })
}

/// The shortest history that shows a violation: of the records up to its prefix, from where its
/// story begins, those that concern it (its subscriber's records on its topic, its publisher's
/// publishes there, the nemesis), with the subscriber's last subscribe before that and the
/// publication it is about; with their indices.
pub(crate) fn witness<'h>(history: &'h [Record], v: &Violation) -> Vec<(usize, &'h Record)> {
    let this_sub = |subscriber: &usize, topic: &String| {
        *topic == v.topic && v.subscriber.is_none_or(|s| s == *subscriber)
    };
    // The subscriber's last subscribe at or before the start: the connection the story is on.
    let from = history[..=v.start.min(history.len().saturating_sub(1))]
        .iter()
        .rposition(
            |r| matches!(r, Record::Subscribe { subscriber, topic, .. } if this_sub(subscriber, topic)),
        )
        .unwrap_or(v.start);
    let mut on_topic = HashSet::new();
    let mut out = Vec::new();
    for (at, r) in history.iter().enumerate().take(v.prefix + 1) {
        let publisher_ok = |p: &usize| v.publisher.is_none_or(|q| q == *p);
        let keep = match r {
            Record::Invoke {
                publisher,
                seq,
                topic,
                ..
            } => {
                if *topic == v.topic {
                    on_topic.insert((*publisher, *seq));
                }
                *topic == v.topic
                    && publisher_ok(publisher)
                    && (at >= v.start || (Some(*publisher), Some(*seq)) == (v.publisher, v.seq))
            }
            Record::Ack { publisher, seq, .. } | Record::Fail { publisher, seq } => {
                on_topic.contains(&(*publisher, *seq))
                    && publisher_ok(publisher)
                    && (at >= v.start || (Some(*publisher), Some(*seq)) == (v.publisher, v.seq))
            }
            Record::Subscribe {
                subscriber, topic, ..
            }
            | Record::Subscribed {
                subscriber, topic, ..
            } => at >= from && this_sub(subscriber, topic),
            Record::Delivery {
                subscriber, topic, ..
            }
            | Record::Gap {
                subscriber, topic, ..
            } => at >= v.start && this_sub(subscriber, topic),
            Record::Nemesis(_) | Record::Healed => at >= from,
        };
        if keep {
            out.push((at, r));
        }
    }
    out
}

/// A report of `violations` for a failing run: how many of each kind, then the first of each
/// kind with its witness, at most `lines` lines of it (the first and the last ones).
pub(crate) fn report(history: &[Record], violations: &[Violation], lines: usize) -> String {
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    for v in violations {
        *kinds.entry(v.kind).or_default() += 1;
    }
    let mut out = format!("by kind: {kinds:?}\n");
    for kind in kinds.keys() {
        let Some(v) = violations.iter().find(|v| v.kind == *kind) else {
            continue;
        };
        out.push_str(&format!("\n{v}\n"));
        let w = witness(history, v);
        let skip = w.len().saturating_sub(lines);
        for (i, (at, r)) in w.iter().enumerate() {
            if skip > 0 && i == lines / 4 {
                out.push_str(&format!("    … {skip} records …\n"));
            }
            if skip == 0 || i < lines / 4 || i >= lines / 4 + skip {
                out.push_str(&format!("  {at:>6} {r}\n"));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    //! Hand-made histories, one per kind of violation, and clean ones.
    use super::*;

    const T: &str = "t";

    fn at(offset: u64) -> Option<Position> {
        Some(Position {
            epoch: "e1".into(),
            offset,
        })
    }

    /// A history written by hand: publisher `p`'s `k`th payload is `"p:k"`.
    #[derive(Default)]
    struct H(Vec<Record>);

    impl H {
        fn live(self, s: usize) -> Self {
            self.subscribing(s, None).subscribed(s, Began::Live)
        }
        fn resume(self, s: usize, from: Option<Position>, began: Began) -> Self {
            self.subscribing(s, from).subscribed(s, began)
        }
        /// A subscribe called, not answered yet.
        fn subscribing(mut self, s: usize, from: Option<Position>) -> Self {
            self.0.push(Record::Subscribe {
                subscriber: s,
                topic: T.into(),
                from,
            });
            self
        }
        fn subscribed(mut self, s: usize, began: Began) -> Self {
            self.0.push(Record::Subscribed {
                subscriber: s,
                topic: T.into(),
                began,
            });
            self
        }
        fn publish(mut self, p: usize, k: u64, position: Option<Position>) -> Self {
            self.0.push(Record::Invoke {
                publisher: p,
                seq: k,
                topic: T.into(),
                payload: format!("{p}:{k}"),
            });
            self.0.push(Record::Ack {
                publisher: p,
                seq: k,
                position,
            });
            self
        }
        fn failed(mut self, p: usize, k: u64) -> Self {
            self.0.push(Record::Invoke {
                publisher: p,
                seq: k,
                topic: T.into(),
                payload: format!("{p}:{k}"),
            });
            self.0.push(Record::Fail { publisher: p, seq: k });
            self
        }
        fn got(mut self, s: usize, payload: &str, position: Option<Position>) -> Self {
            self.0.push(Record::Delivery {
                subscriber: s,
                topic: T.into(),
                payload: payload.into(),
                position,
            });
            self
        }
        fn gap(mut self, s: usize, resume: Option<Position>) -> Self {
            self.0.push(Record::Gap {
                subscriber: s,
                topic: T.into(),
                resume,
            });
            self
        }
        fn healed(mut self) -> Self {
            self.0.push(Record::Healed);
            self
        }
        fn kinds(&self) -> Vec<Kind> {
            check(&self.0).iter().map(|v| v.kind).collect()
        }
    }

    #[test]
    fn only_the_tail_an_engine_lost_and_gave_again_is_the_engines() {
        let kill = |h: H| {
            let mut h = h;
            h.0.push(Record::Nemesis("start EngineDown at 1s".into()));
            h.0.push(Record::Nemesis("end EngineDown at 2s".into()));
            h.0.push(Record::Nemesis(
                "the engine lost its tail: 3 is no longer stored".into(),
            ));
            h
        };
        // 0:0 at 1 delivered; 0:1 at 2 and 1:0 at 3 acknowledged, then the engine killed, and
        // its offsets 2 and 3 given to 2:0 and 2:1: the subscriber resumed from 1 and was told
        // Recovered without 0:1 and 1:0.
        let before = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .publish(0, 1, at(2))
            .publish(1, 0, at(3));
        let h = kill(before)
            .resume(1, at(1), Began::Recovered(2))
            .publish(2, 0, at(2))
            .publish(2, 1, at(3))
            .got(1, "2:0", at(2))
            .got(1, "2:1", at(3));
        let violations = check(&h.0);
        assert!(violations.iter().any(|v| v.kind == Kind::PositionReused));
        assert!(
            violations
                .iter()
                .any(|v| v.seq == Some(1) && v.publisher == Some(0))
        );
        let (engines, ours) = lost_by_engine(&h.0, violations);
        assert_eq!(ours, vec![], "{engines:?}");
        assert!(!engines.is_empty());

        // A publication acknowledged after the restart and missed is ours, reuse or not; so is
        // everything without a kill of the engine before the reuse.
        let h = kill(
            H::default()
                .live(1)
                .publish(0, 0, at(1))
                .got(1, "0:0", at(1))
                .publish(0, 1, at(2)),
        )
        .publish(2, 0, at(2))
        .publish(2, 1, at(3))
        .got(1, "2:0", at(2))
        .publish(2, 2, at(4))
        .got(1, "2:2", at(4));
        let (_, ours) = lost_by_engine(&h.0, check(&h.0));
        assert!(
            ours.iter()
                .any(|v| v.kind == Kind::Lost && v.publisher == Some(2) && v.seq == Some(1)),
            "{ours:?}"
        );
        // The new publication at an offset given again, missed by the subscriber that had the
        // lost one there (it resumed from that position): the engine's doing too.
        let h = kill(
            H::default()
                .live(1)
                .publish(0, 0, at(1))
                .got(1, "0:0", at(1))
                .publish(0, 1, at(2))
                .got(1, "0:1", at(2)),
        )
        .resume(1, at(2), Began::Recovered(1))
        .publish(2, 0, at(2))
        .publish(2, 1, at(3))
        .got(1, "2:1", at(3));
        let violations = check(&h.0);
        assert!(
            violations
                .iter()
                .any(|v| v.publisher == Some(2) && v.seq == Some(0)),
            "{violations:?}"
        );
        let (_, ours) = lost_by_engine(&h.0, violations);
        assert_eq!(ours, vec![]);
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(1, 0, at(1))
            .got(1, "0:0", at(1));
        let violations = check(&h.0);
        assert!(!violations.is_empty());
        assert_eq!(lost_by_engine(&h.0, violations.clone()).1, violations);
        // A kill, a reuse, but the engine found to have kept its tail: all ours.
        let mut h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .publish(0, 1, at(2));
        h.0.push(Record::Nemesis("start EngineDown at 1s".into()));
        h.0.push(Record::Nemesis("end EngineDown at 2s".into()));
        h.0.push(Record::Nemesis(
            "the engine kept its tail: 2 still holds \"0:1\"".into(),
        ));
        let h = h.publish(2, 0, at(2)).got(1, "2:0", at(2));
        let violations = check(&h.0);
        assert!(violations.iter().any(|v| v.kind == Kind::PositionReused));
        assert_eq!(lost_by_engine(&h.0, violations.clone()).1, violations);
    }

    #[test]
    fn a_clean_history_has_no_violation() {
        let h = H::default()
            .live(1)
            .live(2)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .publish(1, 0, at(2))
            .publish(0, 1, at(3))
            .got(1, "1:0", at(2))
            .got(2, "0:0", at(1))
            .got(1, "0:1", at(3))
            .got(2, "1:0", at(2))
            .got(2, "0:1", at(3))
            // A failed publish that went nowhere is owed to no one.
            .failed(0, 2);
        assert_eq!(check(&h.0), vec![]);
    }

    #[test]
    fn a_loss_inside_a_gap_and_a_recovery_are_clean() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .publish(0, 1, at(2))
            .gap(1, at(2))
            .publish(0, 2, at(3))
            .got(1, "0:2", at(3))
            .publish(0, 3, at(4))
            .resume(1, at(3), Began::Recovered(1))
            .got(1, "0:3", at(4));
        assert_eq!(check(&h.0), vec![]);
    }

    #[test]
    fn a_publication_lost_without_a_gap() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(0, 1, at(2))
            .publish(0, 2, at(3))
            .got(1, "0:0", at(1))
            .got(1, "0:2", at(3));
        let v = check(&h.0);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].kind, v[0].prefix), (Kind::Lost, h.0.len() - 1));
        assert!(v[0].detail.contains("\"0:1\""), "{}", v[0]);
        // The tail never delivered is lost too, judged at the end.
        let tail = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(1, 0, at(2))
            .got(1, "1:0", at(2));
        assert_eq!(tail.kinds(), vec![Kind::Lost]);
        // Published by a failed publish that someone else got: owed as well.
        let failed = H::default().live(1).live(2).failed(0, 0).got(2, "0:0", at(1));
        assert_eq!(failed.kinds(), vec![Kind::Lost]);
    }

    #[test]
    fn nothing_is_owed_from_before_a_live_subscribe() {
        let h = H::default()
            .publish(0, 0, at(1))
            .live(1)
            .publish(0, 1, at(2))
            .got(1, "0:1", at(2))
            // Dropped without a position and subscribed live again: what came between is not owed.
            .publish(0, 2, at(3))
            .live(1)
            .publish(0, 3, at(4))
            .got(1, "0:3", at(4));
        assert_eq!(check(&h.0), vec![]);
    }

    #[test]
    fn nothing_is_owed_while_a_live_subscribe_is_pending() {
        // Live, then its connection lost and a live subscribe again (core NATS: no position),
        // answered only after the engine came back (web-nats, seed 234757): what was published
        // before the answer may or may not reach it.
        let h = H::default()
            .live(1)
            .publish(0, 0, None)
            .got(1, "0:0", None)
            .subscribing(1, None)
            .publish(0, 1, None)
            .subscribed(1, Began::Live)
            .publish(0, 2, None)
            .got(1, "0:2", None);
        assert_eq!(check(&h.0), vec![]);
        // Once answered, what follows is owed again.
        let h = h.publish(0, 3, None).publish(0, 4, None).got(1, "0:4", None);
        assert_eq!(h.kinds(), vec![Kind::Lost]);
    }

    #[test]
    fn a_failed_publish_taking_effect_late_does_not_hide_a_gap() {
        // web-redis, seed 932023: the socket publisher gave up on #180 and went on; #182 and
        // later were lost by the JavaScript client inside a gap; #180 took effect after the
        // gap, then #244 came. The gap covers #182.
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .failed(0, 1)
            .publish(0, 2, at(2))
            .gap(1, at(3))
            .got(1, "0:1", at(4))
            .publish(0, 3, at(5))
            .got(1, "0:3", at(5));
        assert_eq!(check(&h.0), vec![]);
        // A gap reported before a publication was made does not cover it.
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .failed(0, 1)
            .gap(1, at(1))
            .publish(0, 2, at(2))
            .got(1, "0:1", at(3))
            .publish(0, 3, at(4))
            .got(1, "0:3", at(4));
        assert_eq!(h.kinds(), vec![Kind::Lost]);
    }

    #[test]
    fn a_gap_into_nothing_covers_an_epoch_its_subscriber_never_reached() {
        // web-redis-aof, seed 490858: a node cut off from Redis told its subscriber a gap into
        // nothing; meanwhile four publications were acknowledged in a new epoch, and Redis
        // restarted without them (its append-only file's tail lost): another epoch, which the
        // node reached first. The gap covers the four.
        let e2 = |o| {
            Some(Position {
                epoch: "e2".into(),
                offset: o,
            })
        };
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .gap(1, None)
            .publish(0, 1, at(2))
            .publish(0, 2, e2(1))
            .got(1, "0:2", e2(1));
        assert_eq!(check(&h.0), vec![]);
    }

    #[test]
    fn a_duplicate() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .got(1, "0:0", at(1));
        assert_eq!(h.kinds(), vec![Kind::Duplicate]);
        // Subscribed live again (no position: core NATS) on another node, what was on its way
        // there comes again: a new stream, no duplicate; twice within it is one.
        let again = H::default()
            .live(1)
            .publish(0, 0, None)
            .got(1, "0:0", None)
            .live(1)
            .got(1, "0:0", None);
        assert_eq!(check(&again.0), vec![]);
        assert_eq!(again.got(1, "0:0", None).kinds(), vec![Kind::Duplicate]);
    }

    #[test]
    fn reordered_per_publisher() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(0, 1, at(2))
            .got(1, "0:1", at(2))
            .got(1, "0:0", at(1));
        // 0:0 is missing when 0:1 arrives (lost at that point), then comes late.
        assert_eq!(h.kinds(), vec![Kind::Lost, Kind::Reordered]);
        let v = check(&h.0);
        assert_eq!(v[1].prefix, h.0.len() - 1);
    }

    #[test]
    fn a_failed_publish_may_take_effect_after_later_ones() {
        // The publisher gave up on 0:0 (a timeout) and went on; the node published it later.
        let h = H::default()
            .live(1)
            .failed(0, 0)
            .publish(0, 1, at(1))
            .got(1, "0:1", at(1))
            .got(1, "0:0", at(2));
        assert_eq!(h.kinds(), vec![]);
        // Delivered to another subscriber, never to this one: lost (judged at the end).
        let h = H::default()
            .live(1)
            .live(2)
            .failed(0, 0)
            .publish(0, 1, at(1))
            .got(1, "0:1", at(1))
            .got(2, "0:1", at(1))
            .got(2, "0:0", at(2));
        assert_eq!(h.kinds(), vec![Kind::Lost]);
        // Unless a gap came after it was called, before or after later deliveries.
        let h = H::default()
            .live(1)
            .live(2)
            .failed(0, 0)
            .gap(1, at(1))
            .publish(0, 1, at(2))
            .got(1, "0:1", at(2))
            .got(2, "0:0", at(1))
            .got(2, "0:1", at(2));
        assert_eq!(h.kinds(), vec![]);
    }

    #[test]
    fn one_position_naming_two_payloads() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .gap(1, None)
            .publish(1, 0, at(1));
        let v = check(&h.0);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].kind, v[0].prefix), (Kind::PositionReused, h.0.len() - 1));
        // Two topics may each have an offset 1 in the same epoch.
        let mut two = H::default().publish(0, 0, at(1)).0;
        two.push(Record::Invoke {
            publisher: 0,
            seq: 1,
            topic: "other".into(),
            payload: "0:1".into(),
        });
        two.push(Record::Ack {
            publisher: 0,
            seq: 1,
            position: at(1),
        });
        assert_eq!(check(&two), vec![]);
    }

    #[test]
    fn a_recovery_that_skipped_one() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .publish(0, 1, at(2))
            .publish(0, 2, at(3))
            .resume(1, at(1), Began::Recovered(1))
            .got(1, "0:2", at(3));
        let v = check(&h.0);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!((v[0].kind, v[0].prefix), (Kind::RecoveredSkipped, h.0.len() - 1));
        // From the subscribe, then from the publish it skipped: what came before is left out.
        let w: Vec<usize> = witness(&h.0, &v[0]).iter().map(|(i, _)| *i).collect();
        assert_eq!(w, vec![0, 1, 5, 6, 7, 8, 9, 10, 11]);
    }

    #[test]
    fn a_gap_that_goes_back_behind_what_was_delivered() {
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(0, 1, at(2))
            .got(1, "0:0", at(1))
            .got(1, "0:1", at(2))
            .gap(1, at(0))
            .got(1, "0:0", at(1))
            .got(1, "0:1", at(2));
        assert_eq!(h.kinds(), vec![Kind::StaleGap, Kind::StaleGap, Kind::StaleGap]);
        // A gap into another epoch, or at the last position, is not stale.
        let mut fine = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .gap(1, at(1));
        fine = fine.gap(
            1,
            Some(Position {
                epoch: "e2".into(),
                offset: 0,
            }),
        );
        assert_eq!(check(&fine.0), vec![]);
    }

    #[test]
    fn an_epoch_left_then_delivered_again() {
        let e2 = |offset| {
            Some(Position {
                epoch: "e2".into(),
                offset,
            })
        };
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .got(1, "0:0", at(1))
            .failed(0, 1)
            .publish(0, 2, e2(3))
            .gap(1, e2(1))
            .got(1, "0:2", e2(3))
            .got(1, "0:1", at(2));
        assert_eq!(h.kinds(), vec![Kind::EpochWentBack]);
        // An epoch older than the subscriber's, though it never had it: gone back all the same.
        let h = H::default()
            .live(1)
            .publish(0, 0, at(1))
            .publish(0, 1, e2(1))
            .gap(1, e2(0))
            .got(1, "0:1", e2(1))
            .got(1, "0:0", at(1));
        assert_eq!(h.kinds(), vec![Kind::EpochWentBack]);
    }

    #[test]
    fn a_payload_nobody_published() {
        let h = H::default().live(1).got(1, "9:9", at(1));
        assert_eq!(h.kinds(), vec![Kind::Phantom]);
    }

    #[test]
    fn after_the_faults_heal_a_gap_excuses_nothing() {
        let h = H::default()
            .live(1)
            .healed()
            .publish(0, 0, at(1))
            .gap(1, at(1))
            .publish(0, 1, at(2))
            .got(1, "0:1", at(2));
        assert_eq!(h.kinds(), vec![Kind::NotResumed]);
    }

    #[test]
    fn the_witness_keeps_what_concerns_the_violation() {
        let h = H::default()
            .live(1)
            .live(2)
            .publish(1, 0, at(1))
            .got(2, "1:0", at(1))
            .publish(0, 0, at(2))
            .got(2, "0:0", at(2))
            .publish(0, 1, at(3))
            .got(1, "1:0", at(1))
            .got(1, "0:1", at(3))
            .got(2, "0:1", at(3));
        let v = check(&h.0);
        assert_eq!(v.len(), 1, "{v:?}");
        let w: Vec<usize> = witness(&h.0, &v[0]).iter().map(|(i, _)| *i).collect();
        // Up to the delivery that shows it, subscriber 1's records and publisher 0's
        // publishes: not subscriber 2's records, not publisher 1's publishes.
        assert_eq!(w, vec![0, 1, 7, 8, 10, 11, 12, 13]);
        assert!(report(&h.0, &v, 40).contains("Lost on t"));
    }
}
