//! The backplane of a single node: nothing to run, history in memory.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use tokio::sync::Mutex;

use super::{Backplane, BoxFuture, Capabilities, Event, EventSender, History, Position, Publication};
use crate::{Error, HistoryConfig, Topic};

/// One process's backplane: publications go straight back to its hub, numbered per topic, and
/// the last [`HistoryConfig`] of them are kept in memory for recovery.
#[derive(Debug)]
pub struct InProcess {
    state: Mutex<State>,
    events: EventSender,
    history: HistoryConfig,
    /// Random per instance: a position from another process's history is of another epoch.
    epoch: std::sync::Arc<str>,
}

#[derive(Debug, Default)]
struct State {
    topics: HashMap<Topic, TopicHistory>,
    subscribed: HashSet<Topic>,
}

#[derive(Debug, Default)]
struct TopicHistory {
    /// The last offset given; the next publication gets one more.
    offset: u64,
    /// The newest publications with the time each was made, oldest first.
    kept: VecDeque<(Instant, Publication)>,
}

impl InProcess {
    /// A backplane whose events go to `events`.
    pub fn new(events: EventSender, history: HistoryConfig) -> InProcess {
        InProcess {
            state: Mutex::default(),
            events,
            history,
            epoch: format!("{:016x}", rand::random::<u64>()).into(),
        }
    }

    /// Numbers `publication`, keeps it, and hands it to the hub if subscribed.
    async fn publish_locked(&self, state: &mut State, mut publication: Publication) -> Result<(), Error> {
        let now = Instant::now();
        let h = state.topics.entry(publication.topic.clone()).or_default();
        h.offset += 1;
        publication.position = Some(Position {
            epoch: self.epoch.clone(),
            offset: h.offset,
        });
        if self.history.max_len > 0 {
            h.kept.push_back((now, publication.clone()));
        }
        self.trim(h, now);
        if state.subscribed.contains(&publication.topic) {
            self.events
                .send(Event::Publication(publication))
                .await
                .map_err(|_| Error::Closed)?;
        }
        Ok(())
    }

    fn trim(&self, h: &mut TopicHistory, now: Instant) {
        while h.kept.len() > self.history.max_len
            || h.kept
                .front()
                .is_some_and(|(t, _)| now.duration_since(*t) > self.history.max_age)
        {
            h.kept.pop_front();
        }
    }
}

impl Backplane for InProcess {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            history: self.history.max_len > 0,
            contiguous_offsets: true,
        }
    }

    fn publish(&self, publication: Publication) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            // Held across the send: two publications get their offsets and reach the hub in one
            // order.
            let mut state = self.state.lock().await;
            self.publish_locked(&mut state, publication).await
        })
    }

    /// Under one lock: the batch gets consecutive offsets, no other publication between them.
    /// Fails only with [`Error::Closed`]: the hub has stopped, nothing more is delivered anyway.
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let mut state = self.state.lock().await;
            for p in publications {
                self.publish_locked(&mut state, p).await?;
            }
            Ok(())
        })
    }

    fn subscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            self.state.lock().await.subscribed.insert(topic);
            Ok(())
        })
    }

    fn unsubscribe(&self, topic: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        let topic = topic.clone();
        Box::pin(async move {
            self.state.lock().await.subscribed.remove(&topic);
            Ok(())
        })
    }

    fn history(
        &self,
        topic: &Topic,
        since: Option<&Position>,
        limit: usize,
    ) -> BoxFuture<'_, Result<History, Error>> {
        let topic = topic.clone();
        let since = since.cloned();
        Box::pin(async move {
            let mut state = self.state.lock().await;
            let Some(h) = state.topics.get_mut(&topic) else {
                // Nothing published in this epoch: a position of another epoch cannot be
                // recovered; no position means "everything", which is nothing.
                return Ok(match since {
                    Some(p) if p.epoch != self.epoch || p.offset > 0 => History::Lost { latest: None },
                    _ => History::Complete(Vec::new()),
                });
            };
            self.trim(h, Instant::now());
            let latest = Some(Position {
                epoch: self.epoch.clone(),
                offset: h.offset,
            });
            let after = match &since {
                None => 0,
                Some(p) if p.epoch != self.epoch || p.offset > h.offset => {
                    return Ok(History::Lost { latest });
                }
                Some(p) => p.offset,
            };
            // Offsets are contiguous: the first kept is `h.offset - len + 1`.
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
                    .map(|(_, p)| p.clone())
                    .collect(),
            ))
        })
    }
}
