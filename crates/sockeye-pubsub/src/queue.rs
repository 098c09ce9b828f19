//! One subscriber's queue: its bound and [`SlowPolicy`], and the live deliveries held while a
//! subscription resumes (counted against the bound), released behind what history recovered.

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::backplane::position::Position;
use crate::config::{SlowPolicy, SubscriberConfig};
use crate::delivery::Delivery;
use crate::error::Error;
use crate::topic::Topic;

/// One subscriber's deliveries.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) config: SubscriberConfig,
    pub(crate) state: Mutex<QueueState>,
    pub(crate) notify: Notify,
    /// Told when [`SlowPolicy::Close`] stops the queue.
    stop: Notify,
}

#[derive(Debug, Default)]
pub(crate) struct QueueState {
    items: VecDeque<Delivery>,
    pub(crate) bytes: usize,
    /// Dropped since the last [`Delivery::Dropped`] was handed out, and in all.
    dropped: u64,
    pub(crate) dropped_total: u64,
    /// [`SlowPolicy::Drop`]: the topics with publications dropped and not yet told, each with
    /// the position of the last one dropped (the `resume` of the gap that tells it). Told as a
    /// [`Delivery::Gap`] before the topic's next delivery, or once the queue has drained; at
    /// most one per topic subscribed (a list: empty, unallocated, but for a subscriber that
    /// dropped).
    untold: Vec<(Topic, Option<Position>)>,
    /// [`SlowPolicy::Close`] fired: `(queued, max)`, reported once.
    too_slow: Option<(usize, usize)>,
    pub(crate) stopped: bool,
    /// Only while a subscription resumes (boxed: an idle subscriber holds a pointer's worth).
    resuming: Option<Box<Resuming>>,
}

/// The state of subscriptions that resume from a position.
#[derive(Debug, Default)]
struct Resuming {
    /// Topics being recovered: their live deliveries wait here until the history is queued.
    held: HashMap<Topic, Vec<Delivery>>,
    /// Topics recovered: the last position queued from history. A live publication at or before
    /// it that was still on its way from the backplane when the recovery ended is a duplicate.
    seams: HashMap<Topic, Position>,
}

impl QueueState {
    fn resuming(&mut self) -> &mut Resuming {
        self.resuming.get_or_insert_with(Box::default)
    }

    /// Frees the resuming state once nothing resumes.
    fn tidy(&mut self) {
        if self
            .resuming
            .as_ref()
            .is_some_and(|r| r.held.is_empty() && r.seams.is_empty())
        {
            self.resuming = None;
        }
    }
}

impl Queue {
    pub(crate) fn new(config: SubscriberConfig) -> Queue {
        Queue {
            config,
            state: Mutex::default(),
            notify: Notify::new(),
            stop: Notify::new(),
        }
    }

    pub(crate) fn push(&self, d: &Delivery) {
        let mut s = lock(&self.state);
        if s.stopped {
            return;
        }
        // Nothing to look up but while a subscription resumes: no hashing of the topic then.
        if let Some(r) = s.resuming.as_mut() {
            match d {
                Delivery::Message(p) => {
                    if r.held.contains_key(p.topic()) {
                        self.hold_one(&mut s, p.topic(), d);
                        return;
                    }
                    if let Some(seam) = r.seams.get(p.topic()) {
                        if p.not_after(seam) {
                            return;
                        }
                        r.seams.remove(p.topic());
                        s.tidy();
                    }
                }
                // A gap while the topic is recovered waits with its live deliveries, after the
                // history; a gap after it ends the seam: the backplane went back, and what
                // follows the gap may reuse positions at or before the seam (a rollback), which
                // are new publications, not duplicates.
                Delivery::Gap { topic, .. } => {
                    if r.held.contains_key(topic) {
                        self.hold_one(&mut s, topic, d);
                        return;
                    }
                    if r.seams.remove(topic).is_some() {
                        s.tidy();
                    }
                }
                Delivery::Dropped { .. } => {}
            }
        }
        self.push_locked(&mut s, d.clone());
    }

    fn push_locked(&self, s: &mut QueueState, d: Delivery) {
        if !self.admit(s, &d) {
            return;
        }
        let was_empty = s.items.is_empty();
        s.items.push_back(d);
        if was_empty {
            self.notify.notify_one();
        }
    }

    /// Counts `d` against the bound (queued and held alike), or applies the [`SlowPolicy`] and
    /// says no. Under [`SlowPolicy::Drop`] a gap is never dropped (it is small, and what it
    /// tells cannot be told again), a publication dropped is remembered for its topic's gap,
    /// and a topic's untold drops are queued as a gap ahead of its next delivery.
    fn admit(&self, s: &mut QueueState, d: &Delivery) -> bool {
        let size = d.size();
        let over = s.bytes > 0 && s.bytes + size > self.config.max_queued_bytes;
        if self.config.slow == SlowPolicy::Drop {
            let topic = match d {
                Delivery::Message(p) => Some(p.topic()),
                Delivery::Gap { topic, .. } => Some(topic),
                Delivery::Dropped { .. } => None,
            };
            if over && let Delivery::Message(p) = d {
                s.dropped += 1;
                s.dropped_total += 1;
                let at = match s.untold.iter().position(|(t, _)| t == p.topic()) {
                    Some(at) => at,
                    None => {
                        s.untold.push((p.topic().clone(), None));
                        s.untold.len() - 1
                    }
                };
                if let Some(position) = p.position() {
                    s.untold[at].1 = Some(position.clone());
                }
                return false;
            }
            if let Some(topic) = topic
                && let Some(at) = s.untold.iter().position(|(t, _)| t == topic)
            {
                let (_, resume) = s.untold.swap_remove(at);
                if s.untold.is_empty() {
                    s.untold = Vec::new();
                }
                // A gap of the backplane's own says where to resume after both.
                if !matches!(d, Delivery::Gap { .. }) {
                    let gap = Delivery::Gap {
                        topic: topic.clone(),
                        resume,
                    };
                    s.bytes += gap.size();
                    s.items.push_back(gap);
                }
            }
            s.bytes += size;
            return true;
        }
        if over {
            match self.config.slow {
                SlowPolicy::Drop => {}
                SlowPolicy::Close => {
                    s.too_slow = Some((s.bytes + size, self.config.max_queued_bytes));
                    s.stopped = true;
                    s.items.clear();
                    s.bytes = 0;
                    s.resuming = None;
                    self.notify.notify_one();
                    self.stop.notify_waiters();
                }
            }
            return false;
        }
        s.bytes += size;
        true
    }

    /// Holds a live delivery for `topic`, being recovered, within the bound.
    fn hold_one(&self, s: &mut QueueState, topic: &Topic, d: &Delivery) {
        if !self.admit(s, d) {
            return;
        }
        if let Some(held) = s.resuming.as_mut().and_then(|r| r.held.get_mut(topic)) {
            held.push(d.clone());
        }
    }

    pub(crate) fn hold(&self, topic: &Topic) {
        let mut s = lock(&self.state);
        let r = s.resuming();
        r.seams.remove(topic);
        r.held.insert(topic.clone(), Vec::new());
    }

    /// Takes `topic`'s held deliveries out of the count (they are queued again or dropped).
    fn take_held(s: &mut QueueState, topic: &Topic) -> Vec<Delivery> {
        let held = s
            .resuming
            .as_mut()
            .and_then(|r| r.held.remove(topic))
            .unwrap_or_default();
        s.bytes -= held.iter().map(Delivery::size).sum::<usize>();
        held
    }

    /// Forgets `topic` (unsubscribed, or its subscription cancelled): what is held for it is
    /// dropped, and its seam.
    pub(crate) fn forget(&self, topic: &Topic) {
        let mut s = lock(&self.state);
        Self::take_held(&mut s, topic);
        s.untold.retain(|(t, _)| t != topic);
        if let Some(r) = s.resuming.as_mut() {
            r.seams.remove(topic);
        }
        s.tidy();
    }

    /// Resolves once [`SlowPolicy::Close`] has stopped the queue.
    pub(crate) async fn stopped(&self) {
        loop {
            let stopped = self.stop.notified();
            tokio::pin!(stopped);
            stopped.as_mut().enable();
            if lock(&self.state).stopped {
                return;
            }
            stopped.await;
        }
    }

    /// The error of a stopped queue, without taking it from [`pop`](Self::pop).
    pub(crate) fn too_slow_error(&self) -> Error {
        let (queued, max) = lock(&self.state)
            .too_slow
            .unwrap_or((0, self.config.max_queued_bytes));
        Error::TooSlow { queued, max }
    }

    /// Ends a recovery: queues `recovered`, then the live deliveries held meanwhile that come
    /// after both `since` and the last recovered one.
    pub(crate) fn release(&self, topic: &Topic, recovered: Vec<Delivery>, since: Option<Position>) {
        let mut s = lock(&self.state);
        let held = Self::take_held(&mut s, topic);
        s.tidy();
        if s.stopped {
            return;
        }
        let mut seam = since;
        for d in recovered {
            if let Delivery::Message(p) = &d
                && let Some(position) = p.position()
            {
                seam = Some(position.clone());
            }
            self.push_locked(&mut s, d);
        }
        for d in held {
            let duplicate = match (&d, &seam) {
                (Delivery::Message(p), Some(seam)) => p.not_after(seam),
                // What follows a gap is new whatever its position (see `push`).
                (Delivery::Gap { .. }, _) => {
                    seam = None;
                    false
                }
                _ => false,
            };
            if !duplicate {
                self.push_locked(&mut s, d);
            }
        }
        if let Some(seam) = seam {
            s.resuming().seams.insert(topic.clone(), seam);
        }
    }

    /// Once the queue has drained, the topics whose drops are untold get their gaps: nothing
    /// more of theirs may come to carry them.
    fn tell_untold(s: &mut QueueState) {
        if !s.items.is_empty() {
            return;
        }
        for (topic, resume) in std::mem::take(&mut s.untold) {
            let gap = Delivery::Gap { topic, resume };
            s.bytes += gap.size();
            s.items.push_back(gap);
        }
    }

    pub(crate) fn pop(&self) -> Option<Result<Delivery, Error>> {
        let mut s = lock(&self.state);
        if let Some((queued, max)) = s.too_slow.take() {
            return Some(Err(Error::TooSlow { queued, max }));
        }
        if s.dropped > 0 {
            let count = std::mem::take(&mut s.dropped);
            return Some(Ok(Delivery::Dropped { count }));
        }
        Self::tell_untold(&mut s);
        let d = s.items.pop_front()?;
        s.bytes -= d.size();
        Some(Ok(d))
    }

    pub(crate) fn pop_many(&self, out: &mut Vec<Delivery>, max: usize) -> Result<usize, Error> {
        let mut s = lock(&self.state);
        if let Some((queued, max)) = s.too_slow.take() {
            return Err(Error::TooSlow { queued, max });
        }
        let mut n = 0;
        if s.dropped > 0 && n < max {
            let count = std::mem::take(&mut s.dropped);
            out.push(Delivery::Dropped { count });
            n += 1;
        }
        Self::tell_untold(&mut s);
        while n < max {
            let Some(d) = s.items.pop_front() else { break };
            s.bytes -= d.size();
            out.push(d);
            n += 1;
        }
        Ok(n)
    }
}

/// A lock whose holder cannot leave the data half-updated on panic (every critical section
/// above is a few pushes and removals), so a poisoned lock is still usable.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
