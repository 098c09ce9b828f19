//! Per-thread stacks of reusable buffers (the engine's read buffers, TLS record buffers): a
//! connection gives its buffer back while it waits and takes one when bytes arrive, so memory
//! follows the busy connections, not every connection, and a buffer is made (zeroed, for TLS)
//! once, not at every take.
//!
//! `try_with`: a connection may be polled or dropped while the thread's locals are being torn
//! down (a runtime kept in a thread local); it then allocates, or frees.

use std::cell::RefCell;
use std::thread::LocalKey;

/// A thread's stack of buffers.
pub(crate) type Pool<T> = LocalKey<RefCell<Vec<T>>>;

/// The buffer last given back on this thread, if any.
#[inline]
pub(crate) fn take<T: 'static>(pool: &'static Pool<T>) -> Option<T> {
    pool.try_with(|pool| pool.borrow_mut().pop()).ok().flatten()
}

/// Keeps `buffer` for the next take, unless `max` are kept already.
#[inline]
pub(crate) fn put<T: 'static>(pool: &'static Pool<T>, buffer: T, max: usize) {
    let _ = pool.try_with(|pool| {
        let mut pool = pool.borrow_mut();
        if pool.len() < max {
            pool.push(buffer);
        }
    });
}
