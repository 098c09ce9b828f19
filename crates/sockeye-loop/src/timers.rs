//! The deadlines of a loop's connections (handshake, keepalive, close): one heap per loop, one
//! entry per connection at most that is still current. A connection's deadline that moves later
//! (keepalive, at each input) leaves its entry in place: it fires early, finds nothing due, and is
//! put back at the new time. One push per connection per keepalive interval, not per message.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
}

impl Timers {
    /// Makes sure the connection `key` is woken by `deadline`: `armed` is the entry it has in the
    /// heap already, if any (kept by the connection).
    #[inline]
    pub(crate) fn arm(&mut self, key: usize, armed: &mut Option<Instant>, deadline: Option<Instant>) {
        if let Some(deadline) = deadline
            && armed.is_none_or(|at| deadline < at)
        {
            *armed = Some(deadline);
            self.heap.push(Reverse((deadline, key)));
        }
    }

    /// When the loop must wake next, if any deadline is set.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((at, _))| *at)
    }

    /// Takes the next entry due by `now`: its connection and the deadline it was armed for (an
    /// entry whose connection has armed another since is stale: the caller compares).
    pub(crate) fn pop_due(&mut self, now: Instant) -> Option<(usize, Instant)> {
        match self.heap.peek() {
            Some(Reverse((at, _))) if *at <= now => self.heap.pop().map(|Reverse((at, key))| (key, at)),
            _ => None,
        }
    }
}
