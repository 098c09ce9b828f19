//! One subscriber's queue: its bound and [`SlowPolicy`], and the live deliveries held while a
//! subscription resumes (counted against the bound), released behind what history recovered.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::backplane::position::Position;
use crate::config::{SlowPolicy, SubscriberConfig};
use crate::delivery::{Delivery, Published};
use crate::error::Error;
use crate::lock::lock;
use crate::queue_budget::{QueueBudget, Shed};
use crate::topic::Topic;

/// One subscriber's deliveries.
#[derive(Debug)]
pub(crate) struct Queue {
    pub(crate) config: SubscriberConfig,
    pub(crate) state: Mutex<QueueState>,
    pub(crate) notify: Notify,
    /// Told when [`SlowPolicy::Close`] stops the queue.
    stop: Notify,
    /// The node's bound on all queues together, and this queue's name under it.
    budget: Option<(Arc<QueueBudget>, u64)>,
}

/// Why a queue was stopped, reported once.
#[derive(Debug, Clone, Copy)]
enum Stopped {
    /// Past its own bound ([`SlowPolicy::Close`]): `(queued, max)`.
    OwnBound(usize, usize),
    /// Among the largest when the node's queues passed their bound: `(queued, node max)`.
    NodeBound(usize, usize),
}

impl Stopped {
    fn error(self) -> Error {
        match self {
            Stopped::OwnBound(queued, max) => Error::TooSlow { queued, max },
            Stopped::NodeBound(queued, max) => Error::NodeQueuesFull { queued, max },
        }
    }
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
    /// Stopped, and why: reported once.
    too_slow: Option<Stopped>,
    pub(crate) stopped: bool,
    /// Only while a subscription resumes (boxed: an idle subscriber holds a pointer's worth).
    resuming: Option<Box<Resuming>>,
}

/// The state of subscriptions that resume from a position.
#[derive(Debug, Default)]
struct Resuming {
    /// Topics being recovered: their live deliveries wait here until the history is queued,
    /// with, in their place among them, the live publications dropped meanwhile.
    held: HashMap<Topic, Vec<Held>>,
    /// Topics recovered: where the recovery left the subscription (see [`Seam`]).
    seams: HashMap<Topic, Resumed>,
}

/// Where a recovery left a subscription ([`Seam`]), and the epochs it is past though its node
/// may not be: the one it left for the seam's, if it moved into another through a gap (issue
/// 39's checker, NATS JetStream, seed 33666, a gap back to the old life after the new one's
/// publications), and the one its node stood in when it joined, if the recovery took it past
/// the node into another (a subscriber failing over to a node still behind in the old life: the
/// stale gaps the checker's fixed seed 1 showed on NATS JetStream). A catch-up gap of the node's
/// resuming in one of those is stale: the node is behind, where the subscription has been. A
/// catch-up gap into any other epoch is the node moving on, and is told.
#[derive(Debug)]
struct Resumed {
    seam: Seam,
    behind: Vec<Arc<str>>,
}

impl Resumed {
    fn stale(&self, resume: Option<&Position>) -> bool {
        stale_for(&self.seam, &self.behind, resume)
    }
}

/// Whether `epoch` is one of `behind`, the epochs a subscription at `seam` is past, other than
/// the seam's own (see [`Resumed`]).
fn past(seam: &Seam, behind: &[Arc<str>], epoch: &Arc<str>) -> bool {
    *epoch != seam.position().epoch && behind.contains(epoch)
}

/// Whether the node's publication `p` is one a subscription at `seam`, past the epochs
/// `behind`, already has or left behind: the seam's own rule, or of a [`past`] epoch (a `Left`
/// seam takes any other epoch for new: not those).
fn drops(seam: &Seam, behind: &[Arc<str>], p: &Published) -> bool {
    seam.drops(p) || p.position().is_some_and(|pos| past(seam, behind, &pos.epoch))
}

/// Whether a catch-up gap resuming at `resume` is stale for a subscription at `seam` that is
/// past the epochs `behind`: stale at the seam, or resuming in a [`past`] epoch.
fn stale_for(seam: &Seam, behind: &[Arc<str>], resume: Option<&Position>) -> bool {
    seam.stale(resume) || resume.is_some_and(|r| past(seam, behind, &r.epoch))
}

/// Where a recovery left a subscription, against which what its node delivers after is checked
/// until the node has caught up with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seam {
    /// The last position queued from history (or the one resumed from). A live publication at
    /// or before it that was still on its way from the backplane when the recovery ended is a
    /// duplicate; one of another epoch comes from a node that has not yet seen the epoch the
    /// subscription resumed into (it is behind the subscriber, which left that epoch with a
    /// gap); a catch-up gap (see [`Queue::push_catch_up`]) resuming at or before it in its epoch
    /// is stale. The first publication after it ends the seam.
    At(Position),
    /// The subscription, resuming from this position, was told with a gap that the history
    /// has nothing of the current epoch (a Redis replica promoted after a failover, before
    /// anyone published there; on NATS, also a topic whose newest publication is of another
    /// server life while this one goes on). What its node still delivers of this epoch at or
    /// before the position is a duplicate (before: delivered after the gap, the same
    /// publications again); anything else is new and ends the seam. A catch-up gap into
    /// nothing known, or at or before it, is stale.
    Left(Position),
}

impl Seam {
    fn position(&self) -> &Position {
        match self {
            Seam::At(p) | Seam::Left(p) => p,
        }
    }

    /// The seam behind a catch-up gap into nothing known: what the node still delivers at or
    /// before it in its epoch is what the subscription has, but the node is out of every epoch
    /// now, and one it delivers next is new (an `At` seam took any other epoch for one the node
    /// was behind in, and dropped the next epoch for good: issue 39's checker, web-redis-aof
    /// seed 416366, 270 publications after the heal never delivered).
    fn behind_nothing(self) -> Seam {
        match self {
            Seam::At(p) | Seam::Left(p) => Seam::Left(p),
        }
    }

    /// Whether the node's publication `p` is one the subscription already has or left behind.
    fn drops(&self, p: &Published) -> bool {
        match self {
            Seam::At(seam) => p.not_after(seam) || p.other_epoch(seam),
            Seam::Left(from) => p.not_after(from),
        }
    }

    /// Whether a catch-up gap of the node's resuming at `resume` tells the subscription nothing
    /// it was not told: it resumes at or before the seam in its epoch, or (a `Left` seam, told
    /// a gap into nothing already) into nothing known.
    fn stale(&self, resume: Option<&Position>) -> bool {
        match (self, resume) {
            (Seam::At(s) | Seam::Left(s), Some(r)) => r.epoch == s.epoch && r.offset <= s.offset,
            (Seam::At(_), None) => false,
            (Seam::Left(_), None) => true,
        }
    }
}

/// What is held for a topic being recovered.
#[derive(Debug)]
enum Held {
    /// A live delivery.
    Live(Delivery),
    /// A catch-up gap of the node's (see [`Queue::push_catch_up`]).
    CatchUp(Delivery),
    /// [`SlowPolicy::Drop`]: live publications dropped (the queue was full) after the held ones
    /// before it, and the position of the last one dropped. Told, in its place behind the
    /// recovered history, as a gap on the topic, unless the history recovered them all.
    Dropped(Option<Position>),
}

impl Held {
    fn size(&self) -> usize {
        match self {
            Held::Live(d) | Held::CatchUp(d) => d.size(),
            Held::Dropped(_) => GAP_SIZE,
        }
    }
}

/// What a gap counts against the bound.
const GAP_SIZE: usize = crate::delivery::QUEUE_ITEM_COST;

/// What [`Queue::admit`] decides for a delivery.
enum Admit {
    /// Counted against the bound: queue it, behind `gap` if there is one (counted too), the gap
    /// telling its topic's earlier drops.
    Yes { gap: Option<Delivery> },
    /// [`SlowPolicy::Drop`]: a publication that does not fit, dropped and counted as dropped;
    /// the caller remembers it for its topic's gap.
    Dropped,
    /// Not queued ([`SlowPolicy::Close`] stopped the queue).
    No,
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
            budget: None,
        }
    }

    /// A queue counted under the node's `budget` as `id` (its subscriber's id).
    pub(crate) fn counted(config: SubscriberConfig, budget: &Arc<QueueBudget>, id: u64) -> Arc<Queue> {
        let mut queue = Queue::new(config);
        queue.budget = Some((Arc::clone(budget), id));
        let queue = Arc::new(queue);
        let weak: std::sync::Weak<dyn Shed> = Arc::downgrade(&queue) as std::sync::Weak<dyn Shed>;
        budget.register(id, weak);
        queue
    }

    /// Ends a step that may have changed the queue's size from `before`: counts it under the
    /// node's budget, and past the node's bound stops the largest queues (this lock released:
    /// this queue may be one of them). Counted while the lock is held, so that the node's total
    /// moves in the order this queue did: counted after, a pop's decrement could land before
    /// the push it follows, taking the total below zero for a moment (it wrapped: any queue's
    /// next push saw the node far over its bound and shed the largest for nothing).
    #[inline]
    fn settle(&self, before: usize, s: MutexGuard<'_, QueueState>) {
        let over = self
            .budget
            .as_ref()
            .is_some_and(|(budget, _)| budget.moved(before, s.bytes));
        drop(s);
        if over && let Some((budget, _)) = &self.budget {
            budget.shed();
        }
    }

    pub(crate) fn push(&self, d: &Delivery) {
        let mut s = lock(&self.state);
        let before = s.bytes;
        self.push_unsettled(&mut s, d, false);
        self.settle(before, s);
    }

    /// Pushes a catch-up gap of the node's: what the node missed between where its fan-out
    /// stood and the gap's `resume` (an outage, a new epoch), not a rollback. A subscription that
    /// resumed at or past that `resume` in its epoch (its seam) already had its own gap and what
    /// follows: the gap is stale, dropped (a client keeping `resume` would get those
    /// publications again), and the seam stands, dropping what the node delivers behind it.
    pub(crate) fn push_catch_up(&self, gap: &Delivery) {
        let mut s = lock(&self.state);
        let before = s.bytes;
        self.push_unsettled(&mut s, gap, true);
        self.settle(before, s);
    }

    fn push_unsettled(&self, s: &mut MutexGuard<'_, QueueState>, d: &Delivery, catch_up: bool) {
        if s.stopped {
            return;
        }
        // Nothing to look up but while a subscription resumes: no hashing of the topic then.
        if let Some(r) = s.resuming.as_mut() {
            match d {
                Delivery::Message(p) => {
                    if r.held.contains_key(p.topic()) {
                        self.hold_one(s, p.topic(), d);
                        return;
                    }
                    if let Some(resumed) = r.seams.get(p.topic()) {
                        // A duplicate, or of an epoch the subscription left (see `Seam`).
                        if drops(&resumed.seam, &resumed.behind, p) {
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
                Delivery::Gap { topic, resume } => {
                    if r.held.contains_key(topic) {
                        if catch_up {
                            self.hold_catch_up(s, topic, d);
                        } else {
                            self.hold_one(s, topic, d);
                        }
                        return;
                    }
                    if catch_up
                        && r.seams
                            .get(topic)
                            .is_some_and(|resumed| resumed.stale(resume.as_ref()))
                    {
                        return;
                    }
                    // A catch-up gap into nothing known (`resume` `None`: a miss the node cannot
                    // place, or its epoch ended) leaves the seam standing: what the node still
                    // delivers behind it is what the subscription has (before, the seam went
                    // and that backlog came again); the next epoch is new (`behind_nothing`).
                    // Any other gap ends it: what follows may reuse positions at or before it
                    // (a rollback).
                    if catch_up && resume.is_none() {
                        if let Some(resumed) = r.seams.get_mut(topic) {
                            resumed.seam = resumed.seam.clone().behind_nothing();
                        }
                    } else if r.seams.remove(topic).is_some() {
                        s.tidy();
                    }
                }
                Delivery::Dropped { .. } => {}
            }
        }
        self.push_locked(s, d.clone());
    }

    fn push_locked(&self, s: &mut QueueState, d: Delivery) {
        // Before anything is queued (a gap may come first): the receiver waits on an empty queue.
        let was_empty = s.items.is_empty();
        match self.admit(s, &d) {
            Admit::Yes { gap } => {
                s.items.extend(gap);
                s.items.push_back(d);
                if was_empty {
                    self.notify.notify_one();
                }
            }
            Admit::Dropped => {
                if let Delivery::Message(p) = &d {
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
                }
            }
            Admit::No => {}
        }
    }

    /// Counts `d` against the bound (queued and held alike), or applies the [`SlowPolicy`].
    /// Under [`SlowPolicy::Drop`] a gap is never dropped (it is small, and what it tells cannot
    /// be told again), a publication dropped is for the caller to remember for its topic's gap,
    /// and a topic's untold drops come back as a gap to put ahead of `d` (never queued here: `d`
    /// may be held, or recovered history, which the gap must follow).
    fn admit(&self, s: &mut QueueState, d: &Delivery) -> Admit {
        let size = d.size();
        let over = s.bytes > 0 && s.bytes + size > self.config.max_queued_bytes;
        if self.config.slow == SlowPolicy::Drop {
            let topic = match d {
                Delivery::Message(p) => Some(p.topic()),
                Delivery::Gap { topic, .. } => Some(topic),
                Delivery::Dropped { .. } => None,
            };
            if over && matches!(d, Delivery::Message(_)) {
                s.dropped += 1;
                s.dropped_total += 1;
                return Admit::Dropped;
            }
            let mut gap = None;
            if let Some(topic) = topic
                && let Some(at) = s.untold.iter().position(|(t, _)| t == topic)
            {
                let (_, resume) = s.untold.swap_remove(at);
                if s.untold.is_empty() {
                    s.untold = Vec::new();
                }
                // A gap of the backplane's own says where to resume after both.
                if !matches!(d, Delivery::Gap { .. }) {
                    s.bytes += GAP_SIZE;
                    gap = Some(Delivery::Gap {
                        topic: topic.clone(),
                        resume,
                    });
                }
            }
            s.bytes += size;
            return Admit::Yes { gap };
        }
        if over {
            match self.config.slow {
                SlowPolicy::Drop => {}
                SlowPolicy::Close => {
                    s.too_slow = Some(Stopped::OwnBound(s.bytes + size, self.config.max_queued_bytes));
                    s.stopped = true;
                    s.items.clear();
                    s.bytes = 0;
                    s.resuming = None;
                    self.notify.notify_one();
                    self.stop.notify_waiters();
                }
            }
            return Admit::No;
        }
        s.bytes += size;
        Admit::Yes { gap: None }
    }

    /// Holds a live delivery for `topic`, being recovered, within the bound. What is dropped
    /// meanwhile is held too, in its place, to be told as a gap after what precedes it (the
    /// recovered history, the live deliveries held before it), never ahead of them.
    fn hold_one(&self, s: &mut QueueState, topic: &Topic, d: &Delivery) {
        let admitted = self.admit(s, d);
        let Some(held) = s.resuming.as_mut().and_then(|r| r.held.get_mut(topic)) else {
            return;
        };
        match admitted {
            Admit::Yes { gap } => {
                // No untold drops for a held topic (they are held): defensive only.
                if let Some(Delivery::Gap { resume, .. }) = gap {
                    held.push(Held::Dropped(resume));
                }
                held.push(Held::Live(d.clone()));
            }
            Admit::Dropped => {
                let position = match d {
                    Delivery::Message(p) => p.position().cloned(),
                    _ => None,
                };
                if let Some(Held::Dropped(last)) = held.last_mut() {
                    if position.is_some() {
                        *last = position;
                    }
                } else {
                    held.push(Held::Dropped(position));
                    s.bytes += GAP_SIZE;
                }
            }
            Admit::No => {}
        }
    }

    /// Holds a catch-up gap for `topic`, being recovered: judged stale or not at the release,
    /// against the seam the recovery leaves (a gap is never dropped for the bound).
    fn hold_catch_up(&self, s: &mut QueueState, topic: &Topic, d: &Delivery) {
        if !matches!(self.admit(s, d), Admit::Yes { .. }) {
            return;
        }
        if let Some(held) = s.resuming.as_mut().and_then(|r| r.held.get_mut(topic)) {
            held.push(Held::CatchUp(d.clone()));
        }
    }

    pub(crate) fn hold(&self, topic: &Topic) {
        let mut s = lock(&self.state);
        // Drops untold on the topic come before whatever is held from now.
        let untold = s
            .untold
            .iter()
            .position(|(t, _)| t == topic)
            .map(|at| s.untold.swap_remove(at).1);
        if s.untold.is_empty() {
            s.untold = Vec::new();
        }
        let mut held = Vec::new();
        if let Some(resume) = untold {
            held.push(Held::Dropped(resume));
        }
        let r = s.resuming();
        r.seams.remove(topic);
        r.held.insert(topic.clone(), held);
    }

    /// Takes `topic`'s held deliveries out of the count (they are queued again or dropped).
    fn take_held(s: &mut QueueState, topic: &Topic) -> Vec<Held> {
        let held = s
            .resuming
            .as_mut()
            .and_then(|r| r.held.remove(topic))
            .unwrap_or_default();
        s.bytes -= held.iter().map(Held::size).sum::<usize>();
        held
    }

    /// Forgets `topic` (unsubscribed, or its subscription cancelled): what is held for it is
    /// dropped, and its seam.
    pub(crate) fn forget(&self, topic: &Topic) {
        let mut s = lock(&self.state);
        let before = s.bytes;
        Self::take_held(&mut s, topic);
        s.untold.retain(|(t, _)| t != topic);
        if let Some(r) = s.resuming.as_mut() {
            r.seams.remove(topic);
        }
        s.tidy();
        self.settle(before, s);
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
        lock(&self.state)
            .too_slow
            .unwrap_or(Stopped::OwnBound(0, self.config.max_queued_bytes))
            .error()
    }

    /// Ends a recovery: queues `recovered`, then the live deliveries held meanwhile that come
    /// after both `since` and the last recovered one, and in their place among them the gaps
    /// for what was dropped meanwhile that the history did not recover. `behind`: the epochs the
    /// subscription is past though its node may not be (the one it resumed from, the one its
    /// node stood in; see [`Resumed`]).
    pub(crate) fn release(
        &self,
        topic: &Topic,
        recovered: Vec<Delivery>,
        since: Option<Seam>,
        behind: Vec<Arc<str>>,
    ) {
        let mut s = lock(&self.state);
        let before = s.bytes;
        self.release_unsettled(&mut s, topic, recovered, since, behind);
        self.settle(before, s);
    }

    fn release_unsettled(
        &self,
        s: &mut MutexGuard<'_, QueueState>,
        topic: &Topic,
        recovered: Vec<Delivery>,
        since: Option<Seam>,
        behind: Vec<Arc<str>>,
    ) {
        let held = Self::take_held(s, topic);
        s.tidy();
        if s.stopped {
            return;
        }
        let mut seam = since;
        for d in recovered {
            if let Delivery::Message(p) = &d
                && let Some(position) = p.position()
            {
                seam = Some(Seam::At(position.clone()));
            }
            self.push_locked(s, d);
        }
        for h in held {
            let (d, catch_up) = match h {
                Held::Live(d) => (d, false),
                Held::CatchUp(d) => {
                    let resume = match &d {
                        Delivery::Gap { resume, .. } => resume.as_ref(),
                        _ => None,
                    };
                    if seam.as_ref().is_some_and(|seam| stale_for(seam, &behind, resume)) {
                        continue;
                    }
                    (d, true)
                }
                Held::Dropped(resume) => {
                    // The history recovered all of it: nothing to tell (a gap behind the
                    // history would take the client's position back to the drop's).
                    let recovered = match (&resume, &seam) {
                        (Some(r), Some(Seam::At(seam))) => r.epoch == seam.epoch && r.offset <= seam.offset,
                        _ => false,
                    };
                    // Not a gap of the backplane's: the seam stands (what follows at or before
                    // it is still a duplicate).
                    if !recovered {
                        self.push_locked(
                            s,
                            Delivery::Gap {
                                topic: topic.clone(),
                                resume,
                            },
                        );
                    }
                    continue;
                }
            };
            let duplicate = match (&d, &seam) {
                // The first publication after the seam ends it, as when pushed (before, a held
                // one did not: a subscriber that resumed into nothing kept its `Left` seam
                // after the node's publications that followed, and the node's next gap into
                // nothing was judged stale; 141 publications missed with no gap, NATS
                // JetStream checker seed 263681).
                (Delivery::Message(p), Some(s)) => {
                    let duplicate = drops(s, &behind, p);
                    if !duplicate {
                        seam = None;
                    }
                    duplicate
                }
                // What follows a gap is new whatever its position (see `push`), but for a
                // catch-up gap into nothing known, behind which the seam stands (see
                // `push_unsettled`).
                (Delivery::Gap { resume, .. }, _) => {
                    seam = if catch_up && resume.is_none() {
                        seam.map(Seam::behind_nothing)
                    } else {
                        None
                    };
                    false
                }
                _ => false,
            };
            if !duplicate {
                self.push_locked(s, d);
            }
        }
        if let Some(seam) = seam {
            s.resuming().seams.insert(topic.clone(), Resumed { seam, behind });
        }
    }

    /// Once the queue has drained, the topics whose drops are untold get their gaps: nothing
    /// more of theirs may come to carry them. (A topic being recovered has none untold: its
    /// drops are held in their place, see [`hold_one`](Self::hold_one).)
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
        if let Some(stopped) = s.too_slow.take() {
            return Some(Err(stopped.error()));
        }
        if s.dropped > 0 {
            let count = std::mem::take(&mut s.dropped);
            return Some(Ok(Delivery::Dropped { count }));
        }
        let before = s.bytes;
        Self::tell_untold(&mut s);
        let d = s.items.pop_front();
        if let Some(d) = &d {
            s.bytes -= d.size();
        }
        self.settle(before, s);
        d.map(Ok)
    }

    pub(crate) fn pop_many(&self, out: &mut Vec<Delivery>, max: usize) -> Result<usize, Error> {
        let mut s = lock(&self.state);
        if let Some(stopped) = s.too_slow.take() {
            return Err(stopped.error());
        }
        let before = s.bytes;
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
        self.settle(before, s);
        Ok(n)
    }
}

/// The node's bound: a queue stopped for it ends like one past its own bound.
impl Shed for Queue {
    fn queued(&self) -> usize {
        lock(&self.state).bytes
    }

    fn shed(&self, max: usize) {
        let mut s = lock(&self.state);
        if s.stopped {
            return;
        }
        let queued = s.bytes;
        s.too_slow = Some(Stopped::NodeBound(queued, max));
        s.stopped = true;
        s.items.clear();
        s.bytes = 0;
        s.resuming = None;
        // Under the lock, as in `settle`.
        if let Some((budget, _)) = &self.budget {
            budget.moved(queued, 0);
        }
        drop(s);
        self.notify.notify_one();
        self.stop.notify_waiters();
    }
}

/// A queue gone gives back what it held to the node's count.
impl Drop for Queue {
    fn drop(&mut self) {
        if let Some((budget, id)) = &self.budget {
            let bytes = self
                .state
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .bytes;
            budget.moved(bytes, 0);
            budget.unregister(*id);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use sockeye::DataKind;

    use super::*;
    use crate::backplane::position::{Origin, Publication};
    use crate::delivery::{QUEUE_ITEM_COST, to_delivery};
    use crate::queue_budget::STEP;

    fn message(topic: &Topic, offset: u64, len: usize) -> Delivery {
        to_delivery(Publication {
            topic: topic.clone(),
            position: Some(Position {
                epoch: "E".into(),
                offset,
            }),
            origin: Origin {
                node: 7,
                publisher: 0,
            },
            kind: DataKind::Binary,
            payload: vec![0; len].into(),
        })
        .unwrap()
    }

    /// What the queue gives, as offsets and `GAP(resume)`.
    fn drain(q: &Queue) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Ok(d)) = q.pop() {
            out.push(match d {
                Delivery::Message(p) => p.position().unwrap().offset.to_string(),
                Delivery::Gap { resume, .. } => {
                    format!("GAP({})", resume.map_or(-1, |r| r.offset as i64))
                }
                Delivery::Dropped { count } => format!("DROPPED {count}"),
            });
        }
        out
    }

    fn offsets(range: std::ops::RangeInclusive<u64>) -> Vec<String> {
        range.map(|o| o.to_string()).collect()
    }

    /// A `Drop` queue resuming topic T from 50: live T:101..110 (1,000 bytes each) are held and
    /// fill it, T:111..120 are dropped.
    fn held_then_dropped(topic: &Topic) -> Queue {
        // Room left for small recovered ones and a gap, not for one more live one.
        let max = 10 * (1000 + QUEUE_ITEM_COST) + 900;
        let q = Queue::new(SubscriberConfig::new(max, SlowPolicy::Drop));
        q.hold(topic);
        for offset in 101..=120 {
            q.push(&message(topic, offset, 1000));
        }
        assert_eq!(lock(&q.state).dropped_total, 10);
        q
    }

    fn since() -> Option<Position> {
        Some(Position {
            epoch: "E".into(),
            offset: 50,
        })
    }

    /// Review B1: the gap for T:111..120, dropped while T was held, came out ahead of the history
    /// recovered (T:51..) and the held T:101..110: a client that takes the gap's `resume` (120) as
    /// its position then discarded all of them as seen already.
    /// The node's count follows each queue in the order its lock was taken: a push and a pop
    /// racing on one queue never take the node's total below zero for a moment (counted after
    /// the lock, the pop's decrement could land first: the total wrapped, the next count
    /// overflowed, and meanwhile any queue's push saw the node far over its bound and shed
    /// the largest queues for nothing).
    #[test]
    fn the_node_count_never_goes_below_zero_when_a_push_and_a_pop_race() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let budget = QueueBudget::new(1 << 40);
        let q = Queue::counted(SubscriberConfig::new(1 << 40, SlowPolicy::Close), &budget, 1);
        let topic = Topic::new("t").unwrap();
        let rounds: u64 = 20_000;
        let done = AtomicBool::new(false);
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        std::thread::scope(|scope| {
            let watcher = scope.spawn(|| {
                let mut highest = 0;
                while !done.load(Ordering::Relaxed) {
                    highest = highest.max(budget.total());
                    std::thread::yield_now();
                }
                highest
            });
            let pusher = scope.spawn(|| {
                // Each message alone crosses a step of the count.
                for offset in 1..=rounds {
                    q.push(&message(&topic, offset, STEP));
                }
            });
            let mut popped = 0;
            while popped < rounds && std::time::Instant::now() < deadline {
                match q.pop() {
                    Some(Ok(_)) => popped += 1,
                    Some(Err(e)) => panic!("{e}"),
                    None => std::thread::yield_now(),
                }
            }
            let pushed = pusher.join();
            done.store(true, Ordering::Relaxed);
            let highest = watcher.join().unwrap();
            assert!(pushed.is_ok(), "the push panicked (the count overflowed)");
            assert_eq!(popped, rounds);
            assert!(
                highest <= 2 * rounds as usize * STEP,
                "the node's count wrapped below zero: {highest}"
            );
        });
        assert_eq!(budget.total(), 0);
    }

    #[test]
    fn drops_while_a_topic_is_held_are_told_after_the_history_and_what_was_held_before() {
        let topic = Topic::new("T").unwrap();
        let q = held_then_dropped(&topic);
        let recovered = (51..=53).map(|o| message(&topic, o, 1)).collect();
        q.release(&topic, recovered, since().map(Seam::At), Vec::new());
        let mut want = vec!["DROPPED 10".to_owned()];
        want.extend(offsets(51..=53));
        want.extend(offsets(101..=110));
        want.push("GAP(120)".into());
        assert_eq!(drain(&q), want);
        // What is published next follows the gap.
        q.push(&message(&topic, 121, 1000));
        assert_eq!(drain(&q), ["121"]);
    }

    /// The history recovered what was dropped while held: no gap (it would take the client's
    /// position back from 120), and no duplicate of what was held.
    #[test]
    fn drops_while_held_that_the_history_recovered_are_no_gap() {
        let topic = Topic::new("T").unwrap();
        let q = held_then_dropped(&topic);
        let recovered = (51..=125).map(|o| message(&topic, o, 1)).collect();
        q.release(&topic, recovered, since().map(Seam::At), Vec::new());
        let mut want = vec!["DROPPED 10".to_owned()];
        want.extend(offsets(51..=125));
        assert_eq!(drain(&q), want);
        // The seam stands: live duplicates still on their way are dropped, what follows comes.
        q.push(&message(&topic, 125, 1));
        q.push(&message(&topic, 126, 1));
        assert_eq!(drain(&q), ["126"]);
    }

    /// Review R2: `push_locked` looked at whether the queue was empty after `admit` had queued
    /// a gap ahead of the delivery, so it did not wake a receiver waiting on the empty queue.
    #[tokio::test]
    async fn a_gap_queued_ahead_of_a_delivery_into_an_empty_queue_wakes_the_receiver() {
        let (a, b) = (Topic::new("A").unwrap(), Topic::new("B").unwrap());
        let q = Queue::new(SubscriberConfig::new(
            3 * (1000 + QUEUE_ITEM_COST),
            SlowPolicy::Drop,
        ));
        // A, being recovered, fills the bound with what is held for it: B:1 is dropped while the
        // queue itself is empty; then A is cancelled, and B:2 fits.
        q.hold(&a);
        for offset in 1..=3 {
            q.push(&message(&a, offset, 1000));
        }
        q.push(&message(&b, 1, 1000));
        q.forget(&a);
        // Whatever wake-up is stored so far is used up.
        let _ = tokio::time::timeout(Duration::from_millis(10), q.notify.notified()).await;
        q.push(&message(&b, 2, 1000));
        tokio::time::timeout(Duration::from_millis(100), q.notify.notified())
            .await
            .expect("the receiver was not woken");
        assert_eq!(drain(&q), ["DROPPED 1", "GAP(1)", "2"]);
    }
}
