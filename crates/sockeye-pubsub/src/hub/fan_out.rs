//! The backplane's events delivered to this node's subscribers: each live publication fanned
//! out to the queues of its topic, a jump in contiguous offsets, a new epoch or a reconnection
//! repaired from history first, a rollback or what history cannot give reported as a
//! [`Delivery::Gap`] (see "No silent miss" in the [hub's documentation](super)).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::repair::{Held, Outcome, Repairs};
use super::state::Inner;
use crate::backplane::api::Event;
use crate::backplane::position::{Position, Publication};
use crate::delivery::{Delivery, to_delivery};
use crate::lock::lock;
use crate::topic::Topic;

/// Reads the backplane's events and delivers them, with the repairs from history under way
/// beside them (`repair.rs`: a topic's live publications wait behind its repair, no other
/// topic's do); ends when the hub is dropped or the backplane stops.
pub(super) async fn fan_out(hub: std::sync::Weak<Inner>, mut events: mpsc::Receiver<Event>) {
    let mut repairs = Repairs::default();
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break };
                let Some(inner) = hub.upgrade() else { return };
                inner.handle(event, &mut repairs);
                repairs.start(&inner);
            }
            Some((topic, outcome)) = repairs.next(), if repairs.busy() => {
                let Some(inner) = hub.upgrade() else { return };
                inner.repaired(&topic, outcome, &mut repairs);
                repairs.start(&inner);
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
    fn handle(self: &Arc<Self>, event: Event, repairs: &mut Repairs) {
        match event {
            Event::Publication(p) => self.deliver_live(p, repairs),
            // Once per outage at warn (a backplane may report each failed reconnection), and
            // its end at info: an operator sees when it went and when it came back.
            Event::Lost { reason } => {
                if self.backplane_lost.swap(true, Ordering::Relaxed) {
                    tracing::debug!("pub/sub backplane still lost: {reason}");
                } else {
                    tracing::warn!(
                        "pub/sub backplane lost: {reason}; publications may be missed until it is back"
                    );
                }
            }
            // Every topic with subscribers catches up from history or reports its gap.
            Event::Restored => {
                if self.backplane_lost.swap(false, Ordering::Relaxed) {
                    tracing::info!("pub/sub backplane restored: recovering what was missed");
                }
                for topic in lock(&self.topics).keys() {
                    repairs.schedule(topic);
                }
            }
            Event::Missed { topics } => {
                let known = lock(&self.topics);
                for topic in topics.iter().filter(|t| known.contains_key(*t)) {
                    repairs.schedule(topic);
                }
            }
        }
    }

    /// Delivers what a repair of `topic` found, then what was held for it meanwhile, as if it
    /// arrived now (which may start another repair, behind which the rest waits again).
    fn repaired(&self, topic: &Topic, outcome: Outcome, repairs: &mut Repairs) {
        tracing::debug!(
            "pub/sub topic {topic}: repaired from {:?}: {}",
            self.latest(topic),
            match &outcome {
                Outcome::Nothing => "nothing missed".to_owned(),
                Outcome::Recovered(ps) => format!(
                    "recovered {} ({:?} to {:?})",
                    ps.len(),
                    ps.first().and_then(|p| p.position.as_ref()),
                    ps.last().and_then(|p| p.position.as_ref())
                ),
                Outcome::Gap {
                    resume,
                    after,
                    moved,
                    back,
                } => format!(
                    "a gap to {resume:?}, then {} (moved: {moved}, back: {back})",
                    after.len()
                ),
            }
        );
        // The history said which epoch is the backplane's current one: where the node stands
        // now (it went on from there, or the gap moved the node into it).
        let current = match &outcome {
            Outcome::Nothing | Outcome::Recovered(_) => true,
            Outcome::Gap { resume, moved, .. } => *moved && resume.is_some(),
        };
        // A gap into nothing from where the node stood: the epoch it stood in. A publication
        // held behind the repair for being of another epoch is not one the history knows as
        // current either (on NATS, one sent across a server restart, naming the previous life):
        // covered by that gap, not delivered after it under an epoch its subscribers may have
        // left (issue 39's checker, NATS JetStream, seed 942469: 139 of the old life after 138
        // of the new one).
        let into_nothing_from = match &outcome {
            Outcome::Gap {
                resume: None,
                moved: true,
                ..
            } => self.latest(topic).map(|p| p.epoch),
            _ => None,
        };
        match outcome {
            Outcome::Nothing => {}
            Outcome::Recovered(ps) => {
                for p in ps {
                    self.fan(p);
                }
            }
            Outcome::Gap {
                resume,
                after,
                moved,
                back,
            } => self.gap(topic, resume, after, moved, back),
        }
        for held in repairs.ended(topic) {
            if repairs.waiting(topic) {
                repairs.hold(topic, held);
                continue;
            }
            match held {
                Held::Live(p) => self.deliver_live(p, repairs),
                Held::Checked(p) if current && self.of_a_past_epoch(&p) => {}
                Held::Checked(p)
                    if into_nothing_from
                        .as_ref()
                        .zip(p.position.as_ref())
                        .is_some_and(|(from, pos)| pos.epoch != *from) =>
                {
                    tracing::debug!(
                        "pub/sub topic {topic}: {:?}, of another epoch than the node's, after a gap into nothing: covered by it",
                        p.position
                    );
                }
                Held::Checked(p) => self.fan(p),
                Held::Again => repairs.schedule(topic),
            }
        }
    }

    /// A live publication: held behind its topic's repair if one is under way; otherwise
    /// reports a rollback, repairs a jump in contiguous offsets (or a new epoch) from history
    /// first (holding it behind the repair), drops a duplicate, or fans out.
    fn deliver_live(&self, p: Publication, repairs: &mut Repairs) {
        if repairs.waiting(&p.topic) {
            let topic = p.topic.clone();
            repairs.hold(&topic, Held::Live(p));
            return;
        }
        let jumped = {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(&p.topic) else { return };
            if let Some(pos) = &p.position
                && t.past.contains(&pos.epoch)
            {
                tracing::debug!(
                    "pub/sub topic {}: position {pos} of a past epoch: covered by the gap into the current one",
                    p.topic
                );
                return;
            }
            // Continuing the backplane's live order in its epoch (not a rollback, checked next);
            // asked only while a gap into nothing bounds the epoch (`left`), not per publication.
            let continues_live = t.left.is_some()
                && match (&t.live, &p.position) {
                    (Some(live), Some(pos)) => live.epoch == pos.epoch && pos.offset > live.offset,
                    _ => false,
                };
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
                    t.left = None;
                }
                t.live = Some(pos.clone());
            }
            if let (Some(left), Some(pos)) = (&t.left, &p.position)
                && continues_live
                && t.last.is_none()
                && left.epoch == pos.epoch
                && pos.offset <= left.offset
            {
                tracing::debug!(
                    "pub/sub topic {}: {pos} not after {left}, where the node left its epoch: delivered already",
                    p.topic
                );
                return;
            }
            match (&t.last, &p.position) {
                (Some(last), Some(pos)) if last.epoch == pos.epoch => {
                    if pos.offset <= last.offset {
                        return; // already delivered (recovered from history first)
                    }
                    pos.offset > last.offset + 1 && self.backplane.capabilities().contiguous_offsets
                }
                // A new epoch without an outage seen (the server's data was flushed, or an idle
                // topic's history expired): the end of the old one may have been missed.
                (Some(_), Some(_)) => self.backplane.capabilities().history,
                // No seam in this epoch: the node followed the topic from nothing (its epoch had
                // nothing published when this node subscribed), or a gap into nothing took it
                // out of its epoch (`left`) and this is of another. Either way every publication
                // of the epoch is owed from offset 1, so a first one past 1 follows some that
                // never reached the node (issue 39's checker, redis-cluster seed 511958: a
                // subscription deaf to a new epoch after a failover, then 92 delivered with
                // nothing before it, 89 publications neither repaired nor reported). Repaired
                // from the epoch's start (`Inner::fetch`); at worst, a history read that finds
                // nothing missing. (One of `left`'s epoch continues the live order: above.)
                (None, Some(pos)) => {
                    pos.offset > 1
                        && t.left.as_ref().is_none_or(|left| left.epoch != pos.epoch)
                        && self.backplane.capabilities().contiguous_offsets
                }
                _ => false,
            }
        };
        if jumped {
            let topic = p.topic.clone();
            repairs.schedule(&topic);
            repairs.hold(&topic, Held::Checked(p));
            return;
        }
        self.fan(p);
    }

    /// Whether `p`, whose epoch differs from where the node stands, is of a past epoch, the
    /// history having just gone on from where the node stands (its epoch is current): a
    /// publication still on its way (NATS: one of a life the node has not seen, or sent across a
    /// server restart, which names the life it was sent to), covered by the gap through which the
    /// node, or each of its subscribers, came into the current epoch. Delivered, it would take
    /// them back to an epoch they left, and the node's next repair from there would give them
    /// the current epoch again.
    fn of_a_past_epoch(&self, p: &Publication) -> bool {
        let mut topics = lock(&self.topics);
        let Some(t) = topics.get_mut(&p.topic) else {
            return false;
        };
        let past = match (&t.last, &p.position) {
            (Some(last), Some(pos)) if last.epoch != pos.epoch => Some(Arc::clone(&pos.epoch)),
            _ => None,
        };
        if let Some(epoch) = &past {
            t.passed(epoch);
            tracing::debug!(
                "pub/sub topic {}: a publication of a past epoch, at {:?}, after {:?}: covered by its gap",
                p.topic,
                p.position,
                t.last
            );
        }
        past.is_some()
    }

    /// Delivers one publication to every subscriber of its topic on this node: never one of an
    /// epoch the node has left (whichever way it came: live, or held behind a repair).
    fn fan(&self, p: Publication) {
        let mut topics = lock(&self.topics);
        let Some(t) = topics.get_mut(&p.topic) else { return };
        if let Some(pos) = &p.position
            && t.past.contains(&pos.epoch)
        {
            return;
        }
        if let (Some(last), Some(pos)) = (&t.last, &p.position)
            && last.epoch == pos.epoch
            && pos.offset <= last.offset
        {
            tracing::debug!(
                "pub/sub topic {}: {pos} not after {last}: delivered already",
                p.topic
            );
            return;
        }
        if let Some(pos) = &p.position {
            // Moving into another epoch, however the node came to it (a gap with a resume, a gap
            // into nothing, a repair that went unanswered): the epoch it stood in, or had just
            // left, never comes back (an engine's epochs do not repeat), and what of it is still
            // on its way is inside the gap that left it. Remembered, so that a late publication
            // of it (a demoted primary let go runs a queued publish) is dropped above, not taken
            // for the next epoch (issue 39, web-redis-cluster seed 531182).
            let left = t.last.as_ref().or(t.left.as_ref());
            if let Some(from) = left
                .filter(|from| from.epoch != pos.epoch)
                .map(|from| Arc::clone(&from.epoch))
            {
                t.passed(&from);
            }
            t.last.clone_from(&p.position);
            t.left = None;
        }
        let skip = (p.origin.node == self.node).then_some(p.origin.publisher);
        let Some(d) = to_delivery(p) else { return };
        for (id, q) in &t.subscribers {
            if Some(*id) != skip {
                q.push(&d);
            }
        }
    }

    /// Delivers a gap on `topic` to every subscriber of this node, then `after` (what the history
    /// holds after `resume`); with `moved`, deliveries go on after `resume` (`None`: from the
    /// first publication of the current epoch). Unless `back` (a rollback, which every
    /// subscriber is told), the gap catches this node up: a subscriber that resumed at or past
    /// `resume` in its epoch already had its own gap and what follows, and is not told again
    /// ([`Queue::push_catch_up`](crate::queue::Queue::push_catch_up)).
    fn gap(&self, topic: &Topic, resume: Option<Position>, after: Vec<Publication>, moved: bool, back: bool) {
        tracing::warn!("pub/sub topic {topic}: publications were missed and cannot all be recovered");
        {
            let mut topics = lock(&self.topics);
            let Some(t) = topics.get_mut(topic) else { return };
            let gap = Delivery::Gap {
                topic: topic.clone(),
                resume: resume.clone(),
            };
            for q in t.subscribers.values() {
                if back {
                    q.push(&gap);
                } else {
                    q.push_catch_up(&gap);
                }
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
                if let (Some(last), Some(r)) = (&t.last, &resume)
                    && last.epoch != r.epoch
                {
                    let left = Arc::clone(&last.epoch);
                    t.passed(&left);
                }
                // Into nothing: where the node stood bounds what of the epoch it still takes
                // (a second gap into nothing keeps the first's bound).
                match (&resume, t.last.take()) {
                    (None, Some(last)) => t.left = Some(last),
                    (None, None) => {}
                    (Some(_), _) => t.left = None,
                }
                t.last = resume;
            }
        }
        for p in after {
            self.fan(p);
        }
    }
}
