//! What both loops' turns share: how much one connection may read per turn, how many pieces one
//! vectored write takes, the shutdown's deadline, the wake-up and the deliveries of topics, and
//! the answer to a client over the limit.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::time::{Duration, Instant};

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
/// handlers after this turn's deliveries), else its connections' next deadline, the end of its
/// shutdown, or the moment a waiting connection is to give its buffers back.
pub(crate) fn next_wake(
    timers: &Timers,
    stopping: Option<&Stopping>,
    lingering: &Lingering,
) -> Option<Instant> {
    if topics::with(|t| t.has_queued()) {
        return Some(Instant::now());
    }
    [
        timers.next(),
        stopping.and_then(|s| s.deadline),
        lingering.next_due(),
    ]
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

/// How long a connection waits for input before it gives its idle buffers back (read buffer,
/// batch buffer, deflate states: `Conn::idle`). A connection under load gets input far more
/// often (100 connections sharing a million messages a second: one batch each per 1.6 ms) and
/// keeps them, where giving them back after a single turn without input (a fraction of a
/// millisecond under load) freed and grew the batch buffer again for most batches; an idle
/// connection lets them go 10 ms after its last input, the loop waking for it if nothing else
/// does.
pub(crate) const IDLE_AFTER: Duration = Duration::from_millis(10);

/// Connections waiting for input, in the order they began to (see [`IDLE_AFTER`]).
#[derive(Debug, Default)]
pub(crate) struct Lingering {
    /// Each: the connection's key, the turn and the time it began to wait. A connection may be
    /// here more than once (it waits again after each turn it had work in); an entry whose
    /// connection had input since is passed over.
    waiting: VecDeque<(usize, u64, Instant)>,
    turn: u64,
    now: Option<Instant>,
}

impl Lingering {
    /// A new turn, `turn`, began at `now`: what the next [`waits`](Self::waits) are stamped with.
    pub(crate) fn begin_turn(&mut self, turn: u64, now: Instant) {
        self.turn = turn;
        self.now = Some(now);
    }

    /// The connection `key` waits for input at the end of this turn.
    pub(crate) fn waits(&mut self, key: usize) {
        let now = *self.now.get_or_insert_with(Instant::now);
        self.waiting.push_back((key, self.turn, now));
    }

    /// When the oldest wait is due, for the loop's next wake-up.
    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.waiting.front().map(|&(_, _, since)| since + IDLE_AFTER)
    }

    /// At the end of a turn: `each` is called with each connection that began to wait
    /// [`IDLE_AFTER`] ago or more, and the turn it began in (it checks that the connection had
    /// no input since, and gives its buffers back then).
    pub(crate) fn end_turn(&mut self, now: Instant, mut each: impl FnMut(usize, u64)) {
        while let Some(&(key, turn, since)) = self.waiting.front() {
            if now < since + IDLE_AFTER {
                break;
            }
            self.waiting.pop_front();
            each(key, turn);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stopping(timeout: Duration) -> Stopping {
        let config = sockeye::Config::builder().shutdown_timeout(timeout).build();
        Stopping::new(&Shared::new(config, 0, Vec::new()))
    }

    #[test]
    fn a_waiting_connection_is_idled_only_after_idle_after() {
        let start = Instant::now();
        let mut lingering = Lingering::default();
        assert_eq!(lingering.next_due(), None);
        lingering.begin_turn(7, start);
        lingering.waits(1);
        lingering.waits(2);
        lingering.begin_turn(8, start + IDLE_AFTER / 2);
        lingering.waits(1);
        assert_eq!(lingering.next_due(), Some(start + IDLE_AFTER));
        let mut idled = Vec::new();
        lingering.end_turn(start + IDLE_AFTER / 2, |key, turn| idled.push((key, turn)));
        assert_eq!(idled, vec![], "not yet");
        lingering.end_turn(start + IDLE_AFTER, |key, turn| idled.push((key, turn)));
        assert_eq!(idled, vec![(1, 7), (2, 7)]);
        assert_eq!(lingering.next_due(), Some(start + IDLE_AFTER / 2 + IDLE_AFTER));
        lingering.end_turn(start + 2 * IDLE_AFTER, |key, turn| idled.push((key, turn)));
        assert_eq!(idled, vec![(1, 7), (2, 7), (1, 8)]);
        assert_eq!(lingering.next_due(), None);
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
