//! The backplane's events delivered to this node's subscribers: each live publication fanned
//! out to the queues of its topic, a jump in contiguous offsets, a new epoch or a reconnection
//! repaired from history first, a rollback or what history cannot give reported as a
//! [`Delivery::Gap`] (see "No silent miss" in the [hub's documentation](super)).

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::state::Inner;
use crate::backplane::api::{Event, History};
use crate::backplane::position::{Position, Publication};
use crate::delivery::{Delivery, to_delivery};
use crate::queue::lock;
use crate::topic::Topic;

/// Reads the backplane's events and delivers them; ends when the hub is dropped or the backplane
/// stops.
pub(super) async fn fan_out(hub: std::sync::Weak<Inner>, mut events: mpsc::Receiver<Event>) {
    while let Some(event) = events.recv().await {
        let Some(inner) = hub.upgrade() else { return };
        match event {
            Event::Publication(p) => inner.deliver_live(p).await,
            Event::Lost { reason } => {
                inner.backplane_lost.store(true, Ordering::Relaxed);
                tracing::warn!(
                    "pub/sub backplane lost: {reason}; publications may be missed until it is back"
                );
            }
            Event::Restored => {
                inner.backplane_lost.store(false, Ordering::Relaxed);
                inner.repair_all().await
            }
        }
    }
    // The backplane ended: wake every subscriber so that it sees the end.
    if let Some(inner) = hub.upgrade() {
        inner.ended.store(true, Ordering::Release);
        for t in lock(&inner.topics).values() {
            for q in t.subscribers.values() {
                q.notify.notify_one();
            }
        }
    }
}

impl Inner {
    /// A live publication: reports a rollback, repairs a jump in contiguous offsets (or a new
    /// epoch) from history first, drops a duplicate, then fans out.
    async fn deliver_live(&self, p: Publication) {
        let (last, jumped) = {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(&p.topic) else { return };
            if let Some(pos) = &p.position {
                // A backplane hands each publication to a node live once, in order: a position
                // at or before one it handed live already, in the same epoch, names another
                // publication. The backplane lost what it gave after `pos - 1` and gives those
                // positions again: report it, and take what follows as new.
                if let Some(live) = &t.live
                    && live.epoch == pos.epoch
                    && pos.offset <= live.offset
                {
                    let before = Position {
                        epoch: pos.epoch.clone(),
                        offset: pos.offset.saturating_sub(1),
                    };
                    tracing::warn!(
                        "pub/sub topic {}: the backplane gave position {pos} again (it had reached {live}): \
                         it lost publications; reported as a gap",
                        p.topic
                    );
                    let gap = Delivery::Gap {
                        topic: p.topic.clone(),
                        resume: Some(before.clone()),
                    };
                    for q in t.subscribers.values() {
                        q.push(&gap);
                    }
                    t.last = Some(before);
                }
                t.live = Some(pos.clone());
            }
            match (&t.last, &p.position) {
                (Some(last), Some(pos)) if last.epoch == pos.epoch => {
                    if pos.offset <= last.offset {
                        return; // already delivered (recovered from history first)
                    }
                    let jumped =
                        pos.offset > last.offset + 1 && self.backplane.capabilities().contiguous_offsets;
                    (Some(last.clone()), jumped)
                }
                // A new epoch without an outage seen (the server's data was flushed, or an idle
                // topic's history expired): the end of the old one may have been missed.
                (Some(last), Some(_)) => (Some(last.clone()), self.backplane.capabilities().history),
                _ => (t.last.clone(), false),
            }
        };
        if jumped {
            self.repair(&p.topic, last).await;
        }
        self.fan(p);
    }

    /// Delivers one publication to every subscriber of its topic on this node.
    fn fan(&self, p: Publication) {
        let mut topics = lock(&self.topics);
        let Some(t) = topics.get_mut(&p.topic) else { return };
        if let (Some(last), Some(pos)) = (&t.last, &p.position)
            && last.epoch == pos.epoch
            && pos.offset <= last.offset
        {
            return;
        }
        if p.position.is_some() {
            t.last.clone_from(&p.position);
        }
        let skip = (p.origin.node == self.node).then_some(p.origin.publisher);
        let Some(d) = to_delivery(p) else { return };
        for (id, q) in &t.subscribers {
            if Some(*id) != skip {
                q.push(&d);
            }
        }
    }

    /// After the backplane came back: every topic with subscribers catches up from history or
    /// reports its gap.
    async fn repair_all(&self) {
        let topics: Vec<(Topic, Option<Position>)> = lock(&self.topics)
            .iter()
            .map(|(k, t)| (k.clone(), t.last.clone()))
            .collect();
        for (topic, last) in topics {
            self.repair(&topic, last).await;
        }
    }

    /// Fetches what `topic` missed after `last` and delivers it; or, when that cannot all be
    /// recovered, delivers a gap, then whatever the history still holds after it.
    async fn repair(&self, topic: &Topic, last: Option<Position>) {
        let max = self.config.max_recovered;
        if !self.backplane.capabilities().history {
            self.gap(topic, None, Vec::new(), false);
            return;
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
                    Ok(None) => return,
                    Ok(Some(latest)) => Some(Position {
                        epoch: latest.epoch,
                        offset: 0,
                    }),
                    Err(_) => {
                        self.gap(topic, None, Vec::new(), false);
                        return;
                    }
                }
            }
            last => last,
        };
        let (resume, after) = match self.backplane.history(topic, last.as_ref(), max).await {
            Ok(History::Complete(ps)) if ps.len() < max => {
                for p in ps {
                    self.fan(p);
                }
                return;
            }
            Ok(History::Lost { latest }) => self.after_gap(topic, last.as_ref(), latest).await,
            // Too much missed to deliver: from where the topic stands now.
            Ok(History::Complete(_)) => match self.latest_position(topic).await {
                Ok(latest) => (latest, Vec::new()),
                Err(_) => {
                    self.gap(topic, None, Vec::new(), false);
                    return;
                }
            },
            // Unknown: the next outage or jump tries again from the same place.
            Err(_) => {
                self.gap(topic, None, Vec::new(), false);
                return;
            }
        };
        self.gap(topic, resume, after, true);
    }

    /// Delivers a gap on `topic` to every subscriber of this node, then `after` (what the history
    /// holds after `resume`); with `moved`, deliveries go on after `resume` (`None`: from the
    /// first publication of the current epoch).
    fn gap(&self, topic: &Topic, resume: Option<Position>, after: Vec<Publication>, moved: bool) {
        tracing::warn!("pub/sub topic {topic}: publications were missed and cannot all be recovered");
        {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(topic) else { return };
            let gap = Delivery::Gap {
                topic: topic.clone(),
                resume: resume.clone(),
            };
            for q in t.subscribers.values() {
                q.push(&gap);
            }
            if moved {
                // A rollback seen in the history: positions up to `resume` may come live again
                // (covered by this gap), not as a second rollback.
                if let (Some(live), Some(r)) = (&t.live, &resume)
                    && live.epoch == r.epoch
                    && live.offset > r.offset
                {
                    t.live = None;
                }
                t.last = resume;
            }
        }
        for p in after {
            self.fan(p);
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
