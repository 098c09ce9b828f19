//! What the threads of one server share: the configuration (and TLS's), each thread's inbox,
//! the count of connections against its limit, and whether the server is stopping.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::topics::Inbox;

/// Shared by every loop thread of a server (behind an `Arc`).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: sockeye::Config,
    /// Bytes queued for one connection past which a publication or an outside send closes it
    /// (1008) rather than queue more (`Server::max_backlog`).
    pub(crate) max_backlog: usize,
    /// Each loop thread's inbox (and wake-up pipe), by thread index.
    pub(crate) inboxes: Vec<Inbox>,
    /// `wss://`: the config every connection's TLS session is made with.
    #[cfg(feature = "tls")]
    pub(crate) tls: Option<std::sync::Arc<sockeye::tls::rustls::ServerConfig>>,
    connections: AtomicUsize,
    stopping: AtomicBool,
}

impl Shared {
    pub(crate) fn new(config: sockeye::Config, max_backlog: usize, inboxes: Vec<Inbox>) -> Self {
        Shared {
            config,
            max_backlog,
            inboxes,
            #[cfg(feature = "tls")]
            tls: None,
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

    /// Stops the server: every loop thread is woken to see it.
    pub(crate) fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        for inbox in &self.inboxes {
            inbox.wake();
        }
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }
}
