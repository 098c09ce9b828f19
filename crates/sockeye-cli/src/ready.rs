//! Taking what is ready: the messages a socket or a channel already holds, one at a time, up to
//! a bound, never waiting for more.
//!
//! "Ready" means: already received and decoded (or queued), so that one poll of the receive
//! future (`recv().now_or_never()`) or a `try_recv` hands it over at once. Whatever would need
//! the network, a wake-up or another task first counts as not ready and ends the batch (so may
//! tokio's cooperative budget, which can make a ready receive look pending). What is not taken
//! is not lost: the next wait takes it. That is why the take must be cancel-safe — a receive
//! future dropped while pending loses nothing (the library's `recv`/`next` and tokio's channels
//! are).
//!
//! Why: a loop that waits for each message pays a `select!` (or a flush, a clock look) per
//! message; taking what is ready first pays it once per batch. Why a bound: a peer that sends
//! without pause must not keep the loop from its other duties (the clock, Ctrl-C, stdin, a flush)
//! for ever; the bound says how long one batch may hold the loop.
//!
//! [`Ready`] is a counter, not an iterator: the loops that use it await, send, break and return
//! between two items while the source is borrowed for nothing but the take itself.

/// Counts what one batch has taken, and takes the next ready item while the bound allows.
#[derive(Debug)]
pub(crate) struct Ready {
    /// Items that may still be taken.
    left: usize,
}

impl Ready {
    /// A batch of at most `batch` items whose first was waited for (and counts as one): up to
    /// `batch - 1` more that are ready may be taken.
    pub(crate) const fn after_first(batch: usize) -> Ready {
        Ready {
            left: batch.saturating_sub(1),
        }
    }

    /// No bound: every item that is ready may be taken (for loops that stop anyway when nothing
    /// is ready, or whose other duties can wait).
    pub(crate) const fn all() -> Ready {
        Ready { left: usize::MAX }
    }

    /// The next item, when the bound allows one more and `take_now` has one ready; `None`
    /// otherwise (the bound reached, or nothing ready: `take_now` is then not called, or it
    /// returned `None`). Never waits: `take_now` must not either (`recv().now_or_never()`,
    /// `try_recv().ok()`).
    pub(crate) fn next<T>(&mut self, take_now: impl FnOnce() -> Option<T>) -> Option<T> {
        if self.left == 0 {
            return None;
        }
        let item = take_now()?;
        self.left -= 1;
        Some(item)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::Ready;

    #[test]
    fn a_batch_counts_its_first_item_and_stops_at_the_bound() {
        let mut queue: VecDeque<u32> = (2..=10).collect();
        let mut ready = Ready::after_first(4);
        let mut taken = vec![1];
        while let Some(n) = ready.next(|| queue.pop_front()) {
            taken.push(n);
        }
        assert_eq!(taken, [1, 2, 3, 4]);
        assert_eq!(queue.front(), Some(&5), "nothing is taken past the bound");
        let mut calls = 0;
        assert_eq!(
            ready.next(|| {
                calls += 1;
                Some(0)
            }),
            None
        );
        assert_eq!(calls, 0, "at the bound the source is not even asked");
    }

    #[test]
    fn a_batch_ends_when_nothing_is_ready() {
        let mut queue: VecDeque<u32> = (1..=3).collect();
        let mut ready = Ready::all();
        let mut taken = Vec::new();
        while let Some(n) = ready.next(|| queue.pop_front()) {
            taken.push(n);
        }
        assert_eq!(taken, [1, 2, 3]);
        queue.push_back(4);
        assert_eq!(
            ready.next(|| queue.pop_front()),
            Some(4),
            "a miss does not use up the bound"
        );
        assert_eq!(Ready::after_first(1).next(|| queue.pop_front().or(Some(5))), None);
    }
}
