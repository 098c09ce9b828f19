//! Repairs from history (after an outage, a jump in offsets, a report of missed publications),
//! run beside live delivery: the fan-out task starts at most [`IN_FLIGHT`] history reads at
//! once and goes on delivering every other topic meanwhile; the topics waiting their turn queue
//! up. A topic waiting for or under repair has its live publications held here, in order, and
//! released behind what the repair delivers, so that each topic's order, its seam (no duplicate,
//! no hole) and its rollback checks are what they would be had the repair taken no time.
//!
//! Bounds: at most [`IN_FLIGHT`] repairs read at once (each at most
//! [`HubConfig::max_recovered`](crate::HubConfig::max_recovered) publications); at most
//! [`HELD_BYTES`] of live publications held on the node. Past it a held topic's publication is
//! dropped, and a mark in its place has the topic repaired again from there once the repair
//! under way is delivered: recovered from history, or reported as a gap. A repair's read that
//! takes more than [`REPAIR_TIMEOUT`] is a gap.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;

use super::state::Inner;
use crate::backplane::api::{BoxFuture, History};
use crate::backplane::position::{Position, Publication};
use crate::delivery::QUEUE_ITEM_COST;
use crate::lock::lock;
use crate::topic::Topic;

/// History reads of repairs at once. 16: a node that follows 100,000 topics, on a backplane a
/// millisecond away, repairs them all in seconds (one at a time took 100 s, with no live
/// delivery meanwhile), while what the reads bring back at once stays at most 16 ×
/// `max_recovered` publications.
pub(super) const IN_FLIGHT: usize = 16;

/// Bytes of live publications (payload and a queue entry's overhead) held on the node for topics
/// waiting for or under repair. 64 MiB: a few seconds of a busy node's traffic, while each
/// subscriber's own queue is bounded at 16 MiB; past it, publications are dropped and repaired
/// from history afterwards (or reported as a gap).
pub(super) const HELD_BYTES: usize = 64 << 20;

/// How long a repair's history reads may take: past it, the topic gets a gap (a backplane's own
/// timeouts are shorter; this bounds a history that never answers).
pub(super) const REPAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// What is held for a topic waiting for or under repair.
pub(super) enum Held {
    /// A live publication not looked at yet: its checks (duplicate, rollback, jump) are made
    /// when it is released.
    Live(Publication),
    /// The live publication whose jump started the repair: checked already, delivered after it.
    Checked(Publication),
    /// Publications may be missing here (held ones dropped past [`HELD_BYTES`], or a loss
    /// reported while the repair's read was under way): another repair, from this point.
    Again,
}

impl Held {
    fn size(&self) -> usize {
        match self {
            Held::Live(p) | Held::Checked(p) => p.payload.len() + QUEUE_ITEM_COST,
            Held::Again => 0,
        }
    }
}

/// What a repair found, to be delivered by the fan-out task.
pub(super) enum Outcome {
    /// Nothing missed.
    Nothing,
    /// Every publication missed, in order.
    Recovered(Vec<Publication>),
    /// A gap, then what the history still holds after `resume`; with `moved`, deliveries go on
    /// after `resume` (see `Inner::gap`). With `back`, the backplane went back behind where the
    /// node stood in the same epoch (a rollback: told to every subscriber); without, the gap
    /// catches the node up, and a subscriber that resumed past `resume` is not told.
    Gap {
        resume: Option<Position>,
        after: Vec<Publication>,
        moved: bool,
        back: bool,
    },
}

impl Outcome {
    /// Unknown: a gap, with the topic's seam left where it was.
    fn unknown() -> Outcome {
        Outcome::Gap {
            resume: None,
            after: Vec::new(),
            moved: false,
            back: false,
        }
    }
}

/// A topic waiting for or under repair.
#[derive(Default)]
struct Waiting {
    held: VecDeque<Held>,
    /// Its read has started (a loss reported from now on needs another repair).
    started: bool,
}

/// The repairs of the fan-out task.
#[derive(Default)]
pub(super) struct Repairs {
    topics: HashMap<Topic, Waiting>,
    /// Topics waiting their turn, oldest first.
    queue: VecDeque<Topic>,
    running: FuturesUnordered<BoxFuture<'static, (Topic, Outcome)>>,
    held_bytes: usize,
}

impl Repairs {
    /// Whether `topic` waits for or is under repair: its live publications are then held.
    pub(super) fn waiting(&self, topic: &Topic) -> bool {
        self.topics.contains_key(topic)
    }

    /// Whether a repair's read is under way.
    pub(super) fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// Repairs `topic` from where it stands: queued, unless it waits already (its read will
    /// start from where it stands then); once its read has started, again after it.
    pub(super) fn schedule(&mut self, topic: &Topic) {
        match self.topics.get_mut(topic) {
            Some(w) if w.started => {
                if !matches!(w.held.back(), Some(Held::Again)) {
                    w.held.push_back(Held::Again);
                }
            }
            Some(_) => {}
            None => {
                self.topics.insert(topic.clone(), Waiting::default());
                self.queue.push_back(topic.clone());
            }
        }
    }

    /// Holds `held` for `topic`, which waits; past [`HELD_BYTES`] a publication is dropped for
    /// another repair in its place.
    pub(super) fn hold(&mut self, topic: &Topic, held: Held) {
        let Some(w) = self.topics.get_mut(topic) else {
            return;
        };
        let size = held.size();
        let held = if self.held_bytes + size > HELD_BYTES {
            Held::Again
        } else {
            held
        };
        match held {
            // Not yet started: its read starts from where the topic stands then.
            Held::Again if !w.started && w.held.is_empty() => {}
            Held::Again if matches!(w.held.back(), Some(Held::Again)) => {}
            held => {
                self.held_bytes += held.size();
                w.held.push_back(held);
            }
        }
    }

    /// Starts reads while fewer than [`IN_FLIGHT`] are under way.
    pub(super) fn start(&mut self, inner: &Arc<Inner>) {
        while self.running.len() < IN_FLIGHT {
            let Some(topic) = self.queue.pop_front() else {
                return;
            };
            let last = match lock(&inner.topics).get(&topic) {
                Some(t) => t.last.clone(),
                // Unsubscribed meanwhile: nothing to repair, nothing to deliver.
                None => {
                    self.ended(&topic);
                    continue;
                }
            };
            if let Some(w) = self.topics.get_mut(&topic) {
                w.started = true;
            }
            let inner = Arc::clone(inner);
            self.running.push(Box::pin(async move {
                let outcome = tokio::time::timeout(REPAIR_TIMEOUT, inner.fetch(&topic, last))
                    .await
                    .unwrap_or_else(|_| {
                        tracing::warn!(
                            "pub/sub topic {topic}: no answer from history within {REPAIR_TIMEOUT:?}"
                        );
                        Outcome::unknown()
                    });
                (topic, outcome)
            }));
        }
    }

    /// The next repair read to end (`None` when none is under way).
    pub(super) async fn next(&mut self) -> Option<(Topic, Outcome)> {
        self.running.next().await
    }

    /// `topic`'s repair is over: what was held for it, in order, to be released (it is no
    /// longer waiting).
    pub(super) fn ended(&mut self, topic: &Topic) -> VecDeque<Held> {
        let held = self.topics.remove(topic).map(|w| w.held).unwrap_or_default();
        self.held_bytes -= held.iter().map(Held::size).sum::<usize>();
        held
    }
}

impl Inner {
    /// Fetches what `topic` missed after `last`: every publication, or the gap and what the
    /// history still holds after it.
    async fn fetch(&self, topic: &Topic, last: Option<Position>) -> Outcome {
        let max = self.config.max_recovered;
        if !self.backplane.capabilities().history {
            return Outcome::unknown();
        }
        // `last` `None`: nothing published on the topic when this node started following it,
        // nor delivered since: everything the current epoch published is new to this node.
        // With contiguous offsets that is from offset 1, checked as from any position (a
        // history that lost its first publications, trimmed or expired, is a gap, not a
        // recovery of what is left).
        let last = match last {
            None if self.backplane.capabilities().contiguous_offsets => {
                match self.latest_position(topic).await {
                    // Nothing published in the current epoch: nothing to repair.
                    Ok(None) => return Outcome::Nothing,
                    Ok(Some(latest)) => Some(Position {
                        epoch: latest.epoch,
                        offset: 0,
                    }),
                    Err(_) => return Outcome::unknown(),
                }
            }
            last => last,
        };
        let (resume, after) = match self.backplane.history(topic, last.as_ref(), max).await {
            Ok(History::Complete(ps)) if ps.len() < max => return Outcome::Recovered(ps),
            Ok(History::Lost { latest }) => self.after_gap(topic, last.as_ref(), latest).await,
            // Too much missed to deliver: from where the topic stands now.
            Ok(History::Complete(_)) => match self.latest_position(topic).await {
                Ok(latest) => (latest, Vec::new()),
                Err(_) => return Outcome::unknown(),
            },
            // Unknown: the next outage or jump tries again from the same place.
            Err(_) => return Outcome::unknown(),
        };
        // Behind where the node stood, in its epoch: the backplane went back (a rollback).
        let back =
            matches!((&resume, &last), (Some(r), Some(l)) if r.epoch == l.epoch && r.offset < l.offset);
        Outcome::Gap {
            resume,
            after,
            moved: true,
            back,
        }
    }

    /// What follows a gap for a reader at `since` that the history answered
    /// [`History::Lost`] with `latest`: the position to resume from (just before the first
    /// publication returned) and the publications the history still holds after `since` (every
    /// one of the current epoch when `since` is of another; none when the backplane went back
    /// behind `since` in its epoch: a rollback).
    pub(super) async fn after_gap(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        latest: Option<Position>,
    ) -> (Option<Position>, Vec<Publication>) {
        // Nothing published in the current epoch yet: from its first publication.
        let Some(latest) = latest else {
            return (None, Vec::new());
        };
        if let Some(since) = since
            && since.epoch == latest.epoch
            && since.offset > latest.offset
        {
            // The backplane is behind a position it gave: it lost what followed `latest`, and
            // what it publishes next reuses those positions. From `latest` on.
            tracing::warn!(
                "pub/sub topic {topic}: the backplane went back from {since} to {latest}: it lost publications"
            );
            return (Some(latest), Vec::new());
        }
        let max = self.config.max_recovered;
        match self.backplane.history(topic, None, max).await {
            Ok(History::Complete(ps)) if ps.len() < max => {
                let ps: Vec<Publication> = ps
                    .into_iter()
                    .filter(|p| !since.is_some_and(|s| not_after(p, s)))
                    .collect();
                let resume = match ps.first().and_then(|p| p.position.as_ref()) {
                    Some(first) => Position {
                        epoch: first.epoch.clone(),
                        offset: first.offset.saturating_sub(1),
                    },
                    None => latest,
                };
                (Some(resume), ps)
            }
            _ => (Some(latest), Vec::new()),
        }
    }
}

/// Whether `p` is at or before `seam` in the same epoch.
fn not_after(p: &Publication, seam: &Position) -> bool {
    p.position
        .as_ref()
        .is_some_and(|pos| pos.epoch == seam.epoch && pos.offset <= seam.offset)
}
