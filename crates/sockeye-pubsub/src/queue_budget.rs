//! The node's bound on what every subscriber's queue holds together
//! ([`HubConfig::max_queued_bytes_total`](crate::HubConfig::max_queued_bytes_total)).
//!
//! Each queue has its own bound ([`SubscriberConfig::max_queued_bytes`](crate::SubscriberConfig),
//! 16 MiB by default), which alone lets 1,000 slow readers of their own topics hold 16 GiB. Past
//! the node's bound the largest queues are stopped first, largest first, until the total is back
//! under nine tenths of the bound (so that one more delivery does not start it again): the
//! subscribers that fell furthest behind give way, the others keep their messages. A stopped
//! queue ends like one past its own bound under [`SlowPolicy::Close`](crate::SlowPolicy), with
//! [`Error::NodeQueuesFull`](crate::Error::NodeQueuesFull): its client reconnects and resumes
//! from history.
//!
//! Counted in steps of [`STEP`] bytes, as a queue's size crosses them: the busy path (a small
//! delivery queued and taken) touches the shared count only when it crosses a step, not once per
//! delivery on a cache line every core writes. A queue under one step is not counted: at most
//! `STEP` × the subscribers (10,000 connections: 160 MiB) outside the bound, in queues that are
//! small by definition.
//!
//! A queue is seen through [`Shed`], so that the queue module and this one do not import each
//! other.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::lock::lock;

/// The granularity of the count, a power of two.
pub(crate) const STEP: usize = 16 << 10;

/// What the budget needs of a queue.
pub(crate) trait Shed: Send + Sync {
    /// The bytes it holds now.
    fn queued(&self) -> usize;
    /// Stops it for the node's bound `max`: it gives its bytes back (through
    /// [`QueueBudget::moved`]) and its subscriber learns why.
    fn shed(&self, max: usize);
}

/// The node's count of queued bytes and the queues it may stop.
pub(crate) struct QueueBudget {
    max: usize,
    total: AtomicUsize,
    queues: Mutex<HashMap<u64, Weak<dyn Shed>>>,
    /// One shedding at a time: deliveries on other threads that find the node over its bound
    /// meanwhile leave it to the one under way.
    shedding: AtomicBool,
}

impl std::fmt::Debug for QueueBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueBudget")
            .field("max", &self.max)
            .field("total", &self.total.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl QueueBudget {
    /// A budget of `max` bytes for all queues together.
    pub(crate) fn new(max: usize) -> Arc<QueueBudget> {
        Arc::new(QueueBudget {
            max,
            total: AtomicUsize::new(0),
            queues: Mutex::default(),
            shedding: AtomicBool::new(false),
        })
    }

    /// The bytes counted now (in whole steps).
    pub(crate) fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// The queue `id` may be stopped for the bound.
    pub(crate) fn register(&self, id: u64, queue: Weak<dyn Shed>) {
        lock(&self.queues).insert(id, queue);
    }

    /// The queue `id` is gone (it gave its bytes back first).
    pub(crate) fn unregister(&self, id: u64) {
        lock(&self.queues).remove(&id);
    }

    /// A queue went from `before` to `after` bytes: counts the steps it crossed. Returns whether
    /// the node is now over its bound (for the caller to [`shed`](Self::shed), outside its own
    /// queue's lock).
    #[inline]
    pub(crate) fn moved(&self, before: usize, after: usize) -> bool {
        let (was, is) = (before / STEP, after / STEP);
        if is > was {
            let added = (is - was) * STEP;
            self.total.fetch_add(added, Ordering::Relaxed) + added > self.max
        } else {
            if is < was {
                self.total.fetch_sub((was - is) * STEP, Ordering::Relaxed);
            }
            false
        }
    }

    /// Stops the largest queues until the total is under nine tenths of the bound. Returns how
    /// many it stopped.
    pub(crate) fn shed(&self) -> usize {
        if self.shedding.swap(true, Ordering::Acquire) {
            return 0;
        }
        // The sizes are read once: a queue that grows meanwhile is seen at its next shedding.
        let mut queues: Vec<(usize, Arc<dyn Shed>)> = lock(&self.queues)
            .values()
            .filter_map(Weak::upgrade)
            .map(|q| (q.queued(), q))
            .collect();
        queues.sort_unstable_by_key(|q| std::cmp::Reverse(q.0));
        let target = self.max / 10 * 9;
        let mut stopped = 0;
        for (queued, queue) in queues {
            if self.total() <= target || queued < STEP {
                break;
            }
            queue.shed(self.max);
            stopped += 1;
        }
        self.shedding.store(false, Ordering::Release);
        stopped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A queue of a fixed size that gives it back when stopped.
    struct Fixed {
        budget: Arc<QueueBudget>,
        bytes: Mutex<usize>,
        stopped: AtomicBool,
    }

    impl Shed for Fixed {
        fn queued(&self) -> usize {
            *lock(&self.bytes)
        }
        fn shed(&self, _: usize) {
            let mut bytes = lock(&self.bytes);
            self.budget.moved(*bytes, 0);
            *bytes = 0;
            self.stopped.store(true, Ordering::Relaxed);
        }
    }

    #[test]
    fn counts_in_steps_and_stops_the_largest_first_down_to_nine_tenths() {
        let budget = QueueBudget::new(100 * STEP);
        // Under a step: not counted.
        assert!(!budget.moved(0, STEP - 1));
        assert_eq!(budget.total(), 0);
        assert!(!budget.moved(STEP - 1, 0));
        let queues: Vec<Arc<Fixed>> = [10, 50, 30, 20]
            .into_iter()
            .enumerate()
            .map(|(id, steps)| {
                let q = Arc::new(Fixed {
                    budget: budget.clone(),
                    bytes: Mutex::new(steps * STEP + 5),
                    stopped: AtomicBool::new(false),
                });
                let over = budget.moved(0, steps * STEP + 5);
                assert_eq!(over, id == 3, "over only with the fourth: 110 steps of 100");
                budget.register(id as u64, Arc::downgrade(&q) as Weak<dyn Shed>);
                q
            })
            .collect();
        assert_eq!(budget.total(), 110 * STEP);
        // 110 → 60 (the 50 stopped) is under 90: one queue, the largest.
        assert_eq!(budget.shed(), 1);
        let stopped: Vec<bool> = queues.iter().map(|q| q.stopped.load(Ordering::Relaxed)).collect();
        assert_eq!(stopped, [false, true, false, false]);
        assert_eq!(budget.total(), 60 * STEP);
        // A dropped queue is skipped; unregistered, it is forgotten.
        budget.unregister(0);
        assert_eq!(lock(&budget.queues).len(), 3);
    }
}
