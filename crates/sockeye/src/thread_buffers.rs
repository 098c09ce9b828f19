//! Per-thread stacks of reusable buffers (the engine's read buffers, TLS record buffers): a
//! connection gives its buffer back while it waits and takes one when bytes arrive, so memory
//! follows the busy connections, not every connection, and a buffer is made (zeroed, for TLS)
//! once, not at every take.
//!
//! `try_with`: a connection may be polled or dropped while the thread's locals are being torn
//! down (a runtime kept in a thread local); it then allocates, or frees.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's stack of buffers (a `thread_local!`).
pub(crate) type BufferStack<T> = LocalKey<RefCell<Vec<T>>>;

/// The buffer last pushed on this thread's `stack`, if any.
#[inline]
pub(crate) fn pop<T: 'static>(stack: &'static BufferStack<T>) -> Option<T> {
    stack.try_with(|stack| stack.borrow_mut().pop()).ok().flatten()
}

/// Keeps `buffer` on this thread's `stack` for the next pop, unless `max` are kept already.
#[inline]
pub(crate) fn push<T: 'static>(stack: &'static BufferStack<T>, buffer: T, max: usize) {
    let _ = stack.try_with(|stack| {
        let mut stack = stack.borrow_mut();
        if stack.len() < max {
            stack.push(buffer);
        }
    });
}
