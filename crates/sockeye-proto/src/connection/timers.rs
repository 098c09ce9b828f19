//! The connection's clocks: the keepalive (a ping after a quiet interval, and the deadline for
//! the peer's answer), the close deadline (the closing handshake, then the transport, must end
//! by then) and the deflate linger (a connection waiting for input gives its pooled
//! permessage-deflate states back once it has had no input for a while).
//!
//! The engine never reads a clock: the time comes in through
//! [`Connection::handle_timeout`](crate::Connection::handle_timeout), and a deadline started
//! before the engine knows the time is [`Deadline::Unarmed`] until then. This room only keeps
//! the deadlines and says which one is due; what to do about it (send a ping, close, give up)
//! needs the sending and closing rooms, so the front decides that.

use std::time::{Duration, Instant};

use crate::config::Config;

/// A deadline that starts at the next [`Connection::handle_timeout`](crate::Connection::handle_timeout)
/// (the engine learns the time only there) or is set at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Deadline {
    Unarmed(Duration),
    At(Instant),
}

/// How far ahead "never" lies: a deadline that an `Instant` cannot hold (a configured
/// `Duration::MAX`; `Instant + Duration` panics on overflow) is set this far instead, as tokio
/// does for its own timers (about 30 years).
const NEVER: Duration = Duration::from_secs(86_400 * 365 * 30);

/// `now + after`, or [`NEVER`] from now where the sum would overflow.
fn after(now: Instant, after: Duration) -> Instant {
    now.checked_add(after)
        .or_else(|| now.checked_add(NEVER))
        .unwrap_or(now)
}

impl Deadline {
    fn arm(&mut self, now: Instant) {
        if let Deadline::Unarmed(wait) = *self {
            *self = Deadline::At(after(now, wait));
        }
    }

    /// When it is due; an unarmed deadline is due at once, so that the I/O layer passes the time.
    #[inline]
    fn instant(self, now: Option<Instant>) -> Option<Instant> {
        match self {
            Deadline::At(at) => Some(at),
            Deadline::Unarmed(_) => now,
        }
    }
}

/// "Was the connection quiet for a whole period?", looked at once a period: input only sets a
/// flag, so that a busy connection's deadline stays put while messages flow (moving the I/O
/// layer's timer at every message would cost more than the check saves), and a look that finds
/// input seen starts another period. The keepalive and the deflate linger both ask it.
#[derive(Debug)]
struct QuietCheck {
    period: Duration,
    /// When to look next.
    due: Deadline,
    /// Input arrived since the last look.
    input_seen: bool,
}

impl QuietCheck {
    /// A period from the next [`Connection::handle_timeout`](crate::Connection::handle_timeout)
    /// (the time is learnt there; the last time passed in may be a keepalive interval old).
    fn new(period: Duration) -> Self {
        QuietCheck {
            period,
            due: Deadline::Unarmed(period),
            input_seen: false,
        }
    }

    /// Passes the time: whether a whole period has passed without input. A look at the deadline
    /// that finds input seen starts another period from now.
    fn quiet(&mut self, now: Instant) -> bool {
        self.due.arm(now);
        if matches!(self.due, Deadline::At(at) if at > now) {
            return false;
        }
        if std::mem::take(&mut self.input_seen) {
            self.due = Deadline::At(after(now, self.period));
            return false;
        }
        true
    }
}

/// Keepalive (see [`Config::keepalive_interval`]): input of any kind proves the peer alive.
#[derive(Debug)]
struct Keepalive {
    /// Send a ping after a quiet interval.
    check: QuietCheck,
    timeout: Duration,
    /// A keepalive ping is out: the peer must send something by then.
    answer_due: Option<Instant>,
}

/// What the keepalive asks for at a [`Timers::keepalive_due`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeepaliveDue {
    /// Nothing to do now.
    Nothing,
    /// The connection was quiet for an interval: send a ping.
    Ping,
    /// The ping went unanswered: the peer is gone.
    Dead,
}

/// The connection's deadlines and the latest time the I/O layer passed in.
#[derive(Debug)]
pub(super) struct Timers {
    /// The latest time the I/O layer passed in.
    now: Option<Instant>,
    keepalive: Option<Keepalive>,
    /// Set when the closing handshake starts: the transport must be closed by then.
    close_deadline: Option<Deadline>,
    /// The deflate linger (see
    /// [`DeflateConfig::linger`](crate::extension::deflate::DeflateConfig::linger)): the
    /// states go back after a quiet linger.
    linger: Option<QuietCheck>,
}

/// The sooner of two optional instants.
#[inline]
fn soonest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

impl Timers {
    pub(super) fn new(config: &Config) -> Self {
        let keepalive = config.keepalive_interval.map(|interval| Keepalive {
            check: QuietCheck::new(interval),
            timeout: config.keepalive_timeout,
            answer_due: None,
        });
        Timers {
            now: None,
            keepalive,
            close_deadline: None,
            linger: None,
        }
    }

    /// The transport is closed: no timer runs any more.
    pub(super) fn stop(&mut self) {
        self.close_deadline = None;
        self.keepalive = None;
        self.linger = None;
    }

    /// When the next timer is due (see [`Connection::poll_timeout`](crate::Connection::poll_timeout));
    /// the keepalive runs only while the connection is `open` (asked only when it runs).
    #[inline]
    pub(super) fn poll_timeout(&self, open: impl Fn() -> bool) -> Option<Instant> {
        let close = self.close_deadline.and_then(|d| d.instant(self.now));
        let keepalive = match &self.keepalive {
            Some(k) if open() => match k.answer_due {
                Some(due) => Some(due),
                None => k.check.due.instant(self.now),
            },
            _ => None,
        };
        // Every wait asks: a connection without a linger pays one test (a three-way `min` over
        // an array cost ~25 instructions of a 64-byte echo, callgrind).
        match &self.linger {
            None => soonest(close, keepalive),
            Some(linger) => soonest(soonest(close, keepalive), linger.due.instant(self.now)),
        }
    }

    /// Passes the time to the close deadline: arms it if it waited for the time, and says
    /// whether it has passed. Always the first step of a `handle_timeout`.
    pub(super) fn close_deadline_passed(&mut self, now: Instant) -> bool {
        self.now = Some(now);
        match &mut self.close_deadline {
            Some(deadline) => {
                deadline.arm(now);
                matches!(*deadline, Deadline::At(at) if at <= now)
            }
            None => false,
        }
    }

    /// Passes the time to the keepalive (while the connection is open): what it asks for now.
    pub(super) fn keepalive_due(&mut self, now: Instant) -> KeepaliveDue {
        let Some(k) = &mut self.keepalive else {
            return KeepaliveDue::Nothing;
        };
        if let Some(due) = k.answer_due {
            return if now >= due {
                KeepaliveDue::Dead
            } else {
                KeepaliveDue::Nothing
            };
        }
        if !k.check.quiet(now) {
            return KeepaliveDue::Nothing;
        }
        k.answer_due = Some(after(now, k.timeout));
        KeepaliveDue::Ping
    }

    /// Starts the deflate linger, unless it runs already (see [`QuietCheck::new`]).
    pub(super) fn start_linger(&mut self, linger: Duration) {
        self.linger.get_or_insert_with(|| QuietCheck::new(linger));
    }

    /// The states were given back: no linger runs.
    #[inline]
    pub(super) fn stop_linger(&mut self) {
        self.linger = None;
    }

    /// Passes the time to the deflate linger: whether it is over, a whole linger without input
    /// (the states are to go back now). With input seen it starts another.
    pub(super) fn linger_over(&mut self, now: Instant) -> bool {
        let Some(linger) = &mut self.linger else {
            return false;
        };
        if !linger.quiet(now) {
            return false;
        }
        self.linger = None;
        true
    }

    /// Input arrived: the peer is alive (see [`Connection::note_input`](crate::Connection::note_input)).
    #[inline]
    pub(super) fn note_input(&mut self) {
        if let Some(linger) = &mut self.linger {
            linger.input_seen = true;
        }
        if let Some(k) = &mut self.keepalive {
            if k.answer_due.take().is_some() {
                // Answered: start the next interval from now, at the next `handle_timeout`.
                k.check = QuietCheck::new(k.check.period);
            } else {
                k.check.input_seen = true;
            }
        }
    }

    /// Starts the close deadline, unless it runs already.
    pub(super) fn start_close_deadline(&mut self, timeout: Duration) {
        self.close_deadline.get_or_insert(Deadline::Unarmed(timeout));
    }

    /// Starts the close deadline afresh, whether or not it ran.
    pub(super) fn restart_close_deadline(&mut self, timeout: Duration) {
        self.close_deadline = Some(Deadline::Unarmed(timeout));
    }
}
