//! What the threads of one server share: the configuration, the count of connections against
//! its limit, and whether the server is stopping.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Shared by every loop thread of a server (behind an `Arc`).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: sockeye::Config,
    connections: AtomicUsize,
    stopping: AtomicBool,
}

impl Shared {
    pub(crate) fn new(config: sockeye::Config) -> Self {
        Shared {
            config,
            connections: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        }
    }

    /// Counts a new connection, unless the server holds `max_connections` already.
    pub(crate) fn admit(&self) -> bool {
        let limit = self.config.max_connections;
        self.connections
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < limit).then_some(n + 1)
            })
            .is_ok()
    }

    /// A connection counted by [`admit`](Self::admit) is over.
    pub(crate) fn left(&self) {
        self.connections.fetch_sub(1, Ordering::Relaxed);
    }

    /// Connections open now, on every thread.
    pub(crate) fn connections(&self) -> usize {
        self.connections.load(Ordering::Relaxed)
    }

    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}
