//! What both loops' turns share: how much one connection may read per turn, how many pieces one
//! vectored write takes, the shutdown's deadline, the wake-up and the deliveries of topics, and
//! the answer to a client over the limit.

use std::io::{Read, Write};
use std::time::Instant;

use sockeye_proto::handshake::{encode_response, service_unavailable};

use crate::connection::Conn;
use crate::shared::Shared;
use crate::timers::Timers;
use crate::topics::{self, Mail};

/// Reads of one connection per loop turn before the others get theirs: a peer that floods
/// cannot starve the rest of its thread (its input waits in the socket, and TCP's window pushes
/// back on it).
pub(crate) const READS_PER_TURN: usize = 4;

/// Pieces of one vectored write (the handshake's response, batched frames, shared payloads).
pub(crate) const MAX_IOVECS: usize = 64;

/// A loop whose server is shutting down: its listener is closed, its connections were sent
/// 1001, and it waits for their closing handshakes until `deadline` (`None`: a
/// `shutdown_timeout` past what a clock can hold, `Duration::MAX` say: until every one closed).
#[derive(Debug)]
pub(crate) struct Stopping {
    pub(crate) deadline: Option<Instant>,
}

impl Stopping {
    pub(crate) fn new(shared: &Shared) -> Self {
        Stopping {
            deadline: Instant::now().checked_add(shared.config.shutdown_timeout),
        }
    }

    /// Whether the connections still open are to be dropped now.
    pub(crate) fn is_over(&self, now: Instant) -> bool {
        self.deadline.is_some_and(|at| now >= at)
    }
}

/// When a loop must wake at the latest: at once if publications wait to be delivered (made by
/// handlers after this turn's deliveries), else its connections' next deadline, or the end of
/// its shutdown.
pub(crate) fn next_wake(timers: &Timers, stopping: Option<&Stopping>) -> Option<Instant> {
    if topics::with(|t| t.has_queued()) {
        return Some(Instant::now());
    }
    [timers.next(), stopping.and_then(|s| s.deadline)]
        .into_iter()
        .flatten()
        .min()
}

/// The thread was woken (a stop, or mail in its inbox): the wake-up pipe (made non-blocking by
/// the server) is emptied, then the inbox taken, in that order (mail posted after the emptying
/// writes to the pipe again, so none waits unseen).
pub(crate) fn woken(wake: &mut std::io::PipeReader, shared: &Shared) {
    let mut sink = [0u8; 64];
    while matches!(wake.read(&mut sink), Ok(n) if n > 0) {}
    topics::with(|t| {
        if let Some(inbox) = shared.inboxes.get(t.thread() as usize) {
            t.collect(inbox);
        }
    });
}

/// Delivers the publications and sends queued for this thread's connections: `visit(key, f)`
/// calls `f` with the connection in slot `key`, if there is one, and marks it to be written.
pub(crate) fn deliver<D>(shared: &Shared, mut visit: impl FnMut(usize, &mut dyn FnMut(&mut Conn<D>))) {
    let (mut queue, mut keys) = topics::with(|t| t.take_queue());
    if queue.is_empty() {
        topics::with(|t| t.give_back(queue, keys));
        return;
    }
    // The table is not borrowed while connections take their mail: a handler may subscribe.
    for mail in queue.drain(..) {
        match mail {
            Mail::Publish {
                topic,
                message,
                except,
            } => {
                topics::with(|t| {
                    let skip = except.filter(|e| e.thread == t.thread()).map(|e| e.key);
                    keys.clear();
                    keys.extend(t.subscribers(&topic).filter(|k| Some(*k) != skip));
                });
                for &key in &keys {
                    visit(key as usize, &mut |conn| conn.publication(&message, shared));
                }
            }
            Mail::Send { to, message } => visit(to.key as usize, &mut |conn| {
                if conn.id() == to {
                    conn.send_from_outside(message.clone(), shared);
                }
            }),
        }
    }
    topics::with(|t| t.give_back(queue, keys));
}

/// Answers a client beyond `max_connections` with 503 and drops it, before it costs a
/// connection's state: one write into a fresh socket's empty buffer, never waited for.
pub(crate) fn refuse_busy(stream: &mut impl Write) {
    let _ = stream.write(&encode_response(&service_unavailable()));
}

/// Connections that wait for input give their idle buffers back (read buffer, batch buffer,
/// deflate states: `Conn::idle`) only once they waited through a whole turn: a connection with
/// input every turn (a load) keeps them instead of freeing and allocating them at every round
/// trip, an idle one lets them go one turn later.
#[derive(Debug, Default)]
pub(crate) struct Lingering {
    this_turn: Vec<usize>,
    last_turn: Vec<usize>,
}

impl Lingering {
    /// The connection `key` waits for input at the end of this turn.
    pub(crate) fn waits(&mut self, key: usize) {
        self.this_turn.push(key);
    }

    /// At the end of a turn: `each` is called with the connections that waited at the end of
    /// the turn before (it checks that they had no input since), each once or more.
    pub(crate) fn end_turn(&mut self, mut each: impl FnMut(usize)) {
        for key in self.last_turn.drain(..) {
            each(key);
        }
        std::mem::swap(&mut self.this_turn, &mut self.last_turn);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn stopping(timeout: Duration) -> Stopping {
        let config = sockeye::Config::builder().shutdown_timeout(timeout).build();
        Stopping::new(&Shared::new(config, 0, Vec::new()))
    }

    #[test]
    fn a_shutdown_timeout_past_any_clock_waits_for_every_connection() {
        let now = Instant::now();
        let forever = stopping(Duration::MAX);
        assert_eq!(forever.deadline, None);
        assert!(!forever.is_over(now + Duration::from_secs(100 * 365 * 24 * 3600)));
        let short = stopping(Duration::from_millis(10));
        assert!(!short.is_over(now));
        assert!(short.is_over(now + Duration::from_secs(1)));
    }
}
