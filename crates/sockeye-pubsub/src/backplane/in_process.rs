//! The backplane of a single node: nothing to run, history in memory, bounded.
//!
//! The history is bounded three ways, without a task per topic and without waiting for the next
//! publication: per topic by [`HistoryConfig::max_len`], in all by [`HistoryConfig::max_bytes`]
//! (the oldest publication of any topic goes first), and by age: one task per backplane sleeps
//! until the oldest publication of all is due (at most once a [`SWEEP_EVERY`]) and drops what
//! has expired, and every call sweeps too. An index of each topic's oldest publication, ordered
//! by time, finds the oldest of all without looking at every topic; it is corrected lazily (when
//! an entry comes first), so that trimming a topic to `max_len` on the path of every publication
//! does not touch it.
//!
//! A topic nobody subscribes to whose history is empty (expired, or none kept) is forgotten.
//! Its offsets are then given again when it is published to, so each life of a topic has an
//! epoch of its own: a position of a forgotten life is of another epoch, and resuming from it is
//! a gap, never a silent miss.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Mutex, Notify};
use tokio::time::Instant;

use super::api::{Backplane, BoxFuture, Capabilities, Event, EventSender, History};
use super::position::{Position, Publication};
use crate::config::HistoryConfig;
use crate::error::Error;
use crate::task::AbortOnDrop;
use crate::topic::Topic;

/// The timer's sweeps are at least this far apart: expiry may be that late, and a topic whose
/// oldest publication moves with every new one (trimmed by `max_len`) does not wake the timer
/// once per publication.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

/// What a kept publication is counted as against [`HistoryConfig::max_bytes`] beyond its
/// payload: the entry and its place in the index.
const ENTRY_COST: usize = std::mem::size_of::<Kept>() + 32;

/// One process's backplane: publications go straight back to its hub, numbered per topic, and
/// kept in memory for recovery within the bounds of a [`HistoryConfig`] (see the module's
/// documentation for how they are enforced).
#[derive(Debug)]
pub struct InProcess {
    shared: Arc<Shared>,
    events: EventSender,
    /// The task that sweeps expired history; stopped with the backplane.
    _sweeper: Option<AbortOnDrop>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    history: HistoryConfig,
    /// Told when the history goes from empty to not: the sweeper has something to wait for.
    wake: Notify,
    /// Random per instance: a position from another process's history is of another epoch.
    instance: u64,
}

#[derive(Debug, Default)]
struct State {
    topics: HashMap<Topic, TopicHistory>,
    subscribed: HashSet<Topic>,
    /// An entry per topic with something kept, at (or before) its oldest kept publication, by
    /// the time it was made and a sequence number (to tell two made at the same instant apart).
    oldest: BTreeMap<(Instant, u64), Topic>,
    /// Bytes kept in all topics, as counted against `max_bytes`.
    bytes: usize,
    /// Numbers every kept publication and every life of a topic.
    sequence: u64,
}

#[derive(Debug)]
struct TopicHistory {
    /// This life of the topic.
    epoch: Arc<str>,
    /// The last offset given; the next publication gets one more.
    offset: u64,
    /// The newest publications, oldest first.
    kept: VecDeque<Kept>,
    /// Its entry in `State::oldest`: at or before its oldest publication (see `State::sweep`).
    indexed: Option<(Instant, u64)>,
}

#[derive(Debug)]
struct Kept {
    at: Instant,
    sequence: u64,
    publication: Publication,
}

impl Kept {
    fn cost(&self) -> usize {
        ENTRY_COST + self.publication.payload.len()
    }
}

impl InProcess {
    /// A backplane whose events go to `events`. Inside a tokio runtime, a task sweeps expired
    /// history (outside one, history expires when the backplane is next used).
    pub fn new(events: EventSender, history: HistoryConfig) -> InProcess {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            history,
            wake: Notify::new(),
            instance: rand::random(),
        });
        let sweeper = tokio::runtime::Handle::try_current()
            .ok()
            .filter(|_| history.max_len > 0)
            .map(|rt| AbortOnDrop(rt.spawn(sweep_when_due(Arc::clone(&shared))).abort_handle()));
        InProcess {
            shared,
            events,
            _sweeper: sweeper,
        }
    }

    /// Bytes of history kept, in all topics, as counted against [`HistoryConfig::max_bytes`].
    pub async fn history_bytes(&self) -> usize {
        self.shared.state.lock().await.bytes
    }

    /// Topics it holds anything for: a history, a subscription or an offset to continue from.
    pub async fn topic_count(&self) -> usize {
        let state = self.shared.state.lock().await;
        state.topics.len()
    }

    /// See [`Backplane::history`]; the arguments owned, for the boxed future.
    async fn read_history(
        &self,
        topic: Topic,
        since: Option<Position>,
        limit: usize,
    ) -> Result<History, Error> {
        let mut state = self.shared.state.lock().await;
        state.sweep(Instant::now(), &self.shared.history);
        let Some(h) = state.topics.get(&topic) else {
            // Nothing published in this life of the topic: a position is of another life
            // (forgotten, or another process's) and cannot be recovered; no position means
            // "everything", which is nothing.
            return Ok(match since {
                Some(_) => History::Lost { latest: None },
                None => History::Complete(Vec::new()),
            });
        };
        let latest = Some(Position {
            epoch: h.epoch.clone(),
            offset: h.offset,
        });
        let after = match &since {
            None => 0,
            Some(p) if p.epoch != h.epoch || p.offset > h.offset => {
                return Ok(History::Lost { latest });
            }
            Some(p) => p.offset,
        };
        // Offsets are contiguous and only the oldest go: the first kept is
        // `h.offset - len + 1`.
        let first_kept = h.offset + 1 - h.kept.len() as u64;
        if after + 1 < first_kept && since.is_some() {
            return Ok(History::Lost { latest });
        }
        let skip = usize::try_from(after.saturating_sub(first_kept - 1)).unwrap_or(usize::MAX);
        Ok(History::Complete(
            h.kept
                .iter()
                .skip(skip)
                .take(limit)
                .map(|k| k.publication.clone())
                .collect(),
        ))
    }

    /// Numbers `publication`, keeps it, and hands it to the hub if subscribed; its position.
    async fn publish_locked(
        &self,
        state: &mut State,
        mut publication: Publication,
    ) -> Result<Position, Error> {
        let config = &self.shared.history;
        let instance = self.shared.instance;
        let State {
            topics,
            oldest,
            bytes,
            sequence,
            ..
        } = state;
        // One lookup of the topic for all that follows (this is the path of every publication).
        let h = topics.entry(publication.topic.clone()).or_insert_with(|| {
            *sequence += 1;
            TopicHistory {
                epoch: format!("{instance:016x}.{sequence:x}").into(),
                offset: 0,
                kept: VecDeque::new(),
                indexed: None,
            }
        });
        h.offset += 1;
        let position = Position {
            epoch: h.epoch.clone(),
            offset: h.offset,
        };
        publication.position = Some(position.clone());
        let now = Instant::now();
        if config.max_len > 0 {
            *sequence += 1;
            let kept = Kept {
                at: now,
                sequence: *sequence,
                publication: publication.clone(),
            };
            if h.indexed.is_none() {
                h.indexed = Some((kept.at, kept.sequence));
                oldest.insert((kept.at, kept.sequence), publication.topic.clone());
            }
            *bytes += kept.cost();
            h.kept.push_back(kept);
            // Not the index: it is corrected when this topic's entry comes first (`sweep`).
            while h.kept.len() > config.max_len {
                if let Some(gone) = h.kept.pop_front() {
                    *bytes -= gone.cost();
                }
            }
            // The new publication may be all that is over `max_bytes`: it goes too.
            state.sweep(now, config);
        }
        if state.subscribed.contains(&publication.topic) {
            self.events
                .send(Event::Publication(publication))
                .await
                .map_err(|_| Error::Closed)?;
        } else {
            state.forget_if_unused(&publication.topic);
        }
        Ok(position)
    }
}

impl State {
    /// Drops what is older than `max_age` (at `now`), then the oldest of all while the history
    /// is over `max_bytes`.
    ///
    /// The index is corrected here, as its entries come first: a topic's entry may stand before
    /// its oldest publication (trimmed by `max_len` since) or belong to a life of the topic that
    /// ended; it is moved to the right place or dropped. An entry never stands after its topic's
    /// oldest publication, so the first one that is right is the oldest of all.
    fn sweep(&mut self, now: Instant, config: &HistoryConfig) {
        while let Some((&key, topic)) = self.oldest.first_key_value() {
            let (at, _) = key;
            let expired = now.saturating_duration_since(at) >= config.max_age;
            if !expired && self.bytes <= config.max_bytes {
                return;
            }
            let topic = topic.clone();
            self.oldest.remove(&key);
            let Some(h) = self.topics.get_mut(&topic).filter(|h| h.indexed == Some(key)) else {
                continue; // of a life of the topic that ended
            };
            let front = h.kept.front().map(|k| (k.at, k.sequence));
            // Right: it is the oldest of all, and goes. Wrong: moved to its place, below.
            if front == Some(key)
                && let Some(gone) = h.kept.pop_front()
            {
                self.bytes -= gone.cost();
            }
            h.indexed = h.kept.front().map(|k| (k.at, k.sequence));
            match h.indexed {
                Some(next) => {
                    self.oldest.insert(next, topic);
                }
                None => self.forget_if_unused(&topic),
            }
        }
    }

    /// When the oldest publication kept expires (`None`: nothing kept, or never); possibly
    /// earlier (the index may stand before it), never later.
    fn next_expiry(&self, config: &HistoryConfig) -> Option<Instant> {
        let (&(at, _), _) = self.oldest.first_key_value()?;
        at.checked_add(config.max_age)
    }

    /// Forgets a topic nobody subscribes to with nothing kept: its next publication starts a
    /// new life, with a new epoch (see the module's documentation).
    fn forget_if_unused(&mut self, topic: &Topic) {
        let Some(h) = self.topics.get(topic) else { return };
        if h.kept.is_empty() && !self.subscribed.contains(topic) {
            if let Some(key) = h.indexed {
                self.oldest.remove(&key);
            }
            self.topics.remove(topic);
        }
    }
}

/// Sweeps expired history when the oldest publication is due, at most once a [`SWEEP_EVERY`];
/// waits for a publication while nothing is kept.
async fn sweep_when_due(shared: Arc<Shared>) {
    loop {
        let now = Instant::now();
        let due = {
            let mut state = shared.state.lock().await;
            state.sweep(now, &shared.history);
            state.next_expiry(&shared.history)
        };
        match due {
            Some(due) => tokio::time::sleep_until(due.max(now + SWEEP_EVERY)).await,
            // Nothing kept (or kept forever): until something is.
            None => shared.wake.notified().await,
        }
    }
}

impl Backplane for InProcess {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: self.shared.history.max_len > 0,
            contiguous_offsets: true,
        }
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async move {
            // Held across the send: two publications get their offsets and reach the hub in one
            // order.
            let mut state = self.shared.state.lock().await;
            let was_empty = state.oldest.is_empty();
            let result = self.publish_locked(&mut state, publication).await;
            if was_empty && !state.oldest.is_empty() {
                self.shared.wake.notify_one();
            }
            result.map(Some)
        })
    }

    /// Under one lock: the batch gets consecutive offsets, no other publication between them.
    /// Fails only with [`Error::Closed`]: the hub has stopped, nothing more is delivered anyway.
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(async move {
            let mut state = self.shared.state.lock().await;
            let was_empty = state.oldest.is_empty();
            let mut positions = Vec::with_capacity(publications.len());
            let mut result = Ok(());
            for p in publications {
                match self.publish_locked(&mut state, p).await {
                    Ok(position) => positions.push(position),
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            if was_empty && !state.oldest.is_empty() {
                self.shared.wake.notify_one();
            }
            result.map(|()| positions)
        })
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            self.shared.state.lock().await.subscribed.insert(topic);
            Ok(())
        })
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            let mut state = self.shared.state.lock().await;
            state.subscribed.remove(&topic);
            state.forget_if_unused(&topic);
            Ok(())
        })
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        Box::pin(self.read_history(topic.clone(), since.cloned(), limit))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::backplane::position::Origin;

    fn publication(topic: &Topic, bytes: usize) -> Publication {
        Publication {
            topic: topic.clone(),
            position: None,
            origin: Origin {
                node: 1,
                publisher: 0,
            },
            kind: sockeye::DataKind::Binary,
            payload: vec![0; bytes].into(),
        }
    }

    /// The positions `topic`'s history holds.
    async fn kept(b: &InProcess, topic: &Topic) -> Vec<Position> {
        match b.history(topic, None, usize::MAX).await.unwrap() {
            History::Complete(ps) => ps.into_iter().map(|p| p.position.unwrap()).collect(),
            History::Lost { .. } => panic!("history(None) is never lost"),
        }
    }

    fn backplane(history: HistoryConfig) -> (InProcess, tokio::sync::mpsc::Receiver<Event>) {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        (InProcess::new(tx, history), rx)
    }

    #[tokio::test(start_paused = true)]
    async fn history_expires_without_another_publication() {
        let (b, _rx) = backplane(HistoryConfig::new(10, Duration::from_secs(60)));
        let t = Topic::new("abandoned").unwrap();
        for _ in 0..3 {
            b.publish(publication(&t, 1000)).await.unwrap();
        }
        let first = kept(&b, &t).await[0].clone();
        assert!(b.history_bytes().await >= 3000);
        // Nothing more is published or read; the timer alone expires it.
        tokio::time::sleep(Duration::from_secs(59)).await;
        assert_eq!(
            b.history_bytes().await,
            3 * (1000 + ENTRY_COST),
            "expired too early"
        );
        tokio::time::sleep(Duration::from_secs(1) + SWEEP_EVERY).await;
        assert_eq!(b.history_bytes().await, 0, "expired history is still held");
        assert_eq!(
            b.topic_count().await,
            0,
            "an unsubscribed topic with nothing kept is still held"
        );
        // A resume that needed it is told.
        assert!(matches!(
            b.history(&t, Some(&first), 10).await.unwrap(),
            History::Lost { .. }
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscribed_topic_keeps_its_offsets_after_its_history_expired() {
        let (b, _rx) = backplane(HistoryConfig::new(10, Duration::from_secs(60)));
        let t = Topic::new("t").unwrap();
        b.subscribe(&t).await.unwrap();
        b.publish(publication(&t, 10)).await.unwrap();
        let first = kept(&b, &t).await[0].clone();
        tokio::time::sleep(Duration::from_secs(61) + SWEEP_EVERY).await;
        assert_eq!(b.history_bytes().await, 0);
        assert_eq!(b.topic_count().await, 1);
        b.publish(publication(&t, 10)).await.unwrap();
        let second = kept(&b, &t).await[0].clone();
        assert_eq!((second.epoch.clone(), second.offset), (first.epoch.clone(), 2));
        assert!(matches!(
            b.history(&t, Some(&Position { offset: 0, ..first }), 10).await.unwrap(),
            History::Lost { latest: Some(l) } if l == second
        ));
        // Unsubscribed with nothing kept: forgotten.
        tokio::time::sleep(Duration::from_secs(61) + SWEEP_EVERY).await;
        b.unsubscribe(&t).await.unwrap();
        assert_eq!(b.topic_count().await, 0);
    }

    #[tokio::test]
    async fn a_forgotten_topic_starts_a_new_epoch() {
        let (b, _rx) = backplane(HistoryConfig::new(1, Duration::from_secs(60)).max_bytes(0));
        let t = Topic::new("t").unwrap();
        // Over `max_bytes` at once: nothing kept, the topic forgotten after each publication.
        b.publish(publication(&t, 10)).await.unwrap();
        assert_eq!((b.history_bytes().await, b.topic_count().await), (0, 0));
        b.subscribe(&t).await.unwrap();
        let mut rx = _rx;
        b.publish(publication(&t, 10)).await.unwrap();
        let Some(Event::Publication(p)) = rx.recv().await else {
            panic!()
        };
        let position = p.position.unwrap();
        assert_eq!(position.offset, 1, "offsets of a forgotten topic start again");
        b.unsubscribe(&t).await.unwrap();
        b.subscribe(&t).await.unwrap();
        b.publish(publication(&t, 10)).await.unwrap();
        let Some(Event::Publication(p)) = rx.recv().await else {
            panic!()
        };
        let again = p.position.unwrap();
        assert_eq!(again.offset, 1);
        assert_ne!(
            again.epoch, position.epoch,
            "offset 1 given twice under one epoch"
        );
    }

    #[tokio::test]
    async fn the_total_is_bounded_and_the_oldest_go_first() {
        let entry = 1000 + ENTRY_COST;
        let (b, _rx) = backplane(HistoryConfig::default().max_bytes(10 * entry));
        let (a, c) = (Topic::new("a").unwrap(), Topic::new("c").unwrap());
        b.subscribe(&a).await.unwrap();
        for _ in 0..5 {
            b.publish(publication(&a, 1000)).await.unwrap();
        }
        let from_a = kept(&b, &a).await[0].clone();
        for _ in 0..8 {
            b.publish(publication(&c, 1000)).await.unwrap();
        }
        // 13 publications, room for 10: a's three oldest went.
        assert_eq!(b.history_bytes().await, 10 * entry);
        assert_eq!(
            kept(&b, &a).await.iter().map(|p| p.offset).collect::<Vec<_>>(),
            [4, 5]
        );
        assert_eq!(kept(&b, &c).await.len(), 8);
        // Resuming from a's first needs a's second, gone: lost, never a silent miss.
        assert!(matches!(
            b.history(&a, Some(&from_a), 100).await.unwrap(),
            History::Lost { .. }
        ));
        let third = Position { offset: 3, ..from_a };
        assert!(matches!(
            b.history(&a, Some(&third), 100).await.unwrap(),
            History::Complete(ps) if ps.len() == 2
        ));
    }

    #[tokio::test]
    async fn the_oldest_goes_first_after_a_topic_was_trimmed_to_max_len() {
        let entry = 1000 + ENTRY_COST;
        let (b, _rx) = backplane(HistoryConfig::new(2, Duration::from_secs(60)).max_bytes(3 * entry));
        let (a, c) = (Topic::new("a").unwrap(), Topic::new("c").unwrap());
        b.subscribe(&a).await.unwrap();
        // a1 trimmed by max_len: the index still stands at it.
        for _ in 0..3 {
            b.publish(publication(&a, 1000)).await.unwrap();
        }
        b.publish(publication(&c, 1000)).await.unwrap();
        assert_eq!(b.history_bytes().await, 3 * entry);
        // One over: the oldest kept (a2, not the trimmed a1) goes.
        b.publish(publication(&c, 1000)).await.unwrap();
        assert_eq!(b.history_bytes().await, 3 * entry);
        assert_eq!(
            kept(&b, &a).await.iter().map(|p| p.offset).collect::<Vec<_>>(),
            [3]
        );
        assert_eq!(kept(&b, &c).await.len(), 2);
    }
}
