//! What a connection holds for topics: its subscriptions, and its backlog of publications.
//!
//! A publication goes straight into the connection's engine while the engine's queue is below
//! the high water mark; past it, publications wait here (encoded once, shared: a backlog entry is
//! a reference, its size counted as the message's), and are fed to the engine as it is written
//! down. What the connection's handler sends while publications wait joins the backlog too, so
//! that a connection receives everything in the order it was sent. A backlog over
//! `max_backlog` bytes is dropped and the connection closed with 1008 once its socket took what
//! the engine already held (as the tokio pub/sub session's `slow_drain`): a client that does not
//! read costs at most `max_backlog`, and one that reads again later still learns why it was cut.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sockeye_proto::{CloseCode, CloseFrame, Connection, Message, PreparedMessage};

/// How long a connection dropped as too slow has to take what its engine already holds before
/// its 1008 is queued; after that it is ended (the tokio session's `slow_drain` default).
pub(crate) const SLOW_DRAIN: Duration = Duration::from_secs(30);

/// The close reason of a connection dropped as too slow (the tokio session's, word for word).
pub(crate) const TOO_SLOW: &str = "too slow: messages were dropped";

#[derive(Debug, Default)]
pub(crate) struct Membership {
    /// The topics it is subscribed to (in its thread's table too).
    pub(crate) subscriptions: Vec<Arc<str>>,
    backlog: VecDeque<Item>,
    backlog_bytes: usize,
    slow: Slow,
}

/// Whether the connection was dropped as too slow.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Slow {
    #[default]
    No,
    /// Its 1008 is queued once the engine's queue is written, or it is ended at `until`.
    Draining { until: Instant },
    /// Its 1008 is queued.
    Closing,
}

#[derive(Debug)]
enum Item {
    Published(PreparedMessage),
    Sent(Message),
}

/// What became of a publication or a send offered to a connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offered {
    /// Into the engine, or into the backlog.
    Taken,
    /// Not: the connection was dropped as too slow (now, or before).
    Dropped,
}

impl Membership {
    /// Bytes waiting in the backlog.
    pub(crate) fn backlog_bytes(&self) -> usize {
        self.backlog_bytes
    }

    /// Everything queued for the connection and not yet written: the engine's queue and the
    /// backlog (what `Socket::buffered_amount` reports, and what backpressure and `drain` go by).
    pub(crate) fn queued(&self, engine: &Connection) -> usize {
        engine.transmit_len() + self.backlog_bytes
    }

    /// Whether the connection was dropped as too slow.
    pub(crate) fn is_dropped(&self) -> bool {
        self.slow != Slow::No
    }

    /// A publication for the connection: into the engine if nothing waits and its queue is below
    /// `high_water`, else into the backlog; past `max_backlog`, the backlog is dropped.
    pub(crate) fn publish(
        &mut self,
        engine: &mut Connection,
        message: &PreparedMessage,
        high_water: usize,
        max_backlog: usize,
    ) -> Offered {
        if self.is_dropped() {
            return Offered::Dropped;
        }
        if self.backlog.is_empty() && engine.transmit_len() <= high_water {
            let _ = engine.send_prepared(message);
            return Offered::Taken;
        }
        self.backlog_bytes += message.message().as_payload().len();
        self.backlog.push_back(Item::Published(message.clone()));
        self.check(max_backlog)
    }

    /// A message its handler (or a `ServerHandle`) sends: behind the backlog, if one waits.
    pub(crate) fn send(&mut self, engine: &mut Connection, message: Message, max_backlog: usize) -> Offered {
        if self.is_dropped() {
            return Offered::Dropped;
        }
        if self.backlog.is_empty() {
            return match engine.send(message) {
                Ok(()) => Offered::Taken,
                Err(_) => Offered::Dropped,
            };
        }
        self.backlog_bytes += message.as_payload().len();
        self.backlog.push_back(Item::Sent(message));
        self.check(max_backlog)
    }

    fn check(&mut self, max_backlog: usize) -> Offered {
        if self.backlog_bytes <= max_backlog {
            return Offered::Taken;
        }
        self.backlog = VecDeque::new();
        self.backlog_bytes = 0;
        self.slow = Slow::Draining {
            until: Instant::now() + SLOW_DRAIN,
        };
        Offered::Dropped
    }

    /// The engine's queue was written down: the backlog moves into it up to `high_water`; a
    /// connection dropped as too slow gets its 1008 once the queue is empty.
    pub(crate) fn feed(&mut self, engine: &mut Connection, high_water: usize) {
        if self.is_dropped() {
            if matches!(self.slow, Slow::Draining { .. }) && engine.transmit_len() == 0 {
                let frame = CloseFrame::new(CloseCode::POLICY_VIOLATION, TOO_SLOW);
                let _ = engine.close(Some(frame));
                self.slow = Slow::Closing;
            }
            return;
        }
        while engine.transmit_len() <= high_water
            && let Some(item) = self.backlog.pop_front()
        {
            let sent = match item {
                Item::Published(message) => {
                    self.backlog_bytes -= message.message().as_payload().len();
                    engine.send_prepared(&message)
                }
                Item::Sent(message) => {
                    self.backlog_bytes -= message.as_payload().len();
                    engine.send(message)
                }
            };
            if sent.is_err() {
                // Closing: nothing more goes out.
                self.backlog = VecDeque::new();
                self.backlog_bytes = 0;
                return;
            }
        }
    }

    /// When the connection dropped as too slow must be ended, if its 1008 is not queued yet.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match self.slow {
            Slow::Draining { until } => Some(until),
            _ => None,
        }
    }
}
