//! The engine's timers and transport rule on simulated time: two connections joined by a `Pair`
//! that carries bytes between them, and a clock that only moves when a test moves it. Nothing
//! here sleeps or reads a real clock, so every case is fast and deterministic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use sockeye_proto::frame::insecure_mask_keys_for_tests;
use sockeye_proto::{CloseCode, CloseFrame, CloseState, Config, Connection, Error, Message, Transport};

const INTERVAL: Duration = Duration::from_secs(30);
const ANSWER: Duration = Duration::from_secs(10);
const CLOSE: Duration = Duration::from_secs(2);

fn config(keepalive: bool) -> Config {
    let mut c = Config::default();
    c.keepalive_interval = keepalive.then_some(INTERVAL);
    c.keepalive_timeout = ANSWER;
    c.close_timeout = CLOSE;
    c
}

/// A client and a server on a simulated clock. `deliver` moves what each queued to the other;
/// `tick` advances the clock and fires whatever is due, the way an I/O layer would.
struct Pair {
    client: Connection,
    server: Connection,
    now: Instant,
    /// Messages each side received, in order.
    at_client: Vec<Message>,
    at_server: Vec<Message>,
}

impl Pair {
    fn new(client_keepalive: bool, server_keepalive: bool) -> Pair {
        let now = Instant::now();
        let mut client = Connection::client(config(client_keepalive), insecure_mask_keys_for_tests(7));
        let mut server = Connection::server(config(server_keepalive));
        client.handle_timeout(now);
        server.handle_timeout(now);
        Pair {
            client,
            server,
            now,
            at_client: Vec::new(),
            at_server: Vec::new(),
        }
    }

    /// Carries queued bytes both ways until neither side has anything to send.
    fn deliver(&mut self) {
        loop {
            let to_server = self.client.transmit_bytes();
            let to_client = self.server.transmit_bytes();
            if to_server.is_empty() && to_client.is_empty() {
                return;
            }
            if !to_server.is_empty() && self.server.transport() != Transport::Closed {
                self.server.receive(&to_server);
                while let Ok(Some(m)) = self.server.poll_message() {
                    self.at_server.push(m);
                }
            }
            if !to_client.is_empty() && self.client.transport() != Transport::Closed {
                self.client.receive(&to_client);
                while let Ok(Some(m)) = self.client.poll_message() {
                    self.at_client.push(m);
                }
            }
        }
    }

    /// Moves the clock forward by `by`, stopping at every deadline on the way (as a timer would)
    /// and delivering what each one queued when `deliver` is set.
    fn advance(&mut self, by: Duration, deliver: bool) {
        let end = self.now + by;
        loop {
            let next = [self.client.poll_timeout(), self.server.poll_timeout()]
                .into_iter()
                .flatten()
                .min();
            match next {
                Some(at) if at <= end => {
                    self.now = self.now.max(at);
                    self.client.handle_timeout(self.now);
                    self.server.handle_timeout(self.now);
                    if deliver {
                        self.deliver();
                    }
                }
                _ => break,
            }
        }
        self.now = end;
    }
}

fn pings(messages: &[Message]) -> usize {
    messages.iter().filter(|m| matches!(m, Message::Ping(_))).count()
}

#[test]
fn without_keepalive_an_open_connection_has_no_timer() {
    let p = Pair::new(false, false);
    assert_eq!(p.client.poll_timeout(), None);
    assert_eq!(p.server.poll_timeout(), None);
}

#[test]
fn an_idle_connection_is_pinged_once_per_interval_and_stays_open() {
    let mut p = Pair::new(false, true);
    // The first look finds no input since the start: a ping after one interval.
    assert_eq!(p.server.poll_timeout(), Some(p.now + INTERVAL));
    p.advance(INTERVAL * 10, true);
    // A live peer answers every ping (auto-pong); pings keep coming, one per one or two intervals.
    let sent = pings(&p.at_client);
    assert!((5..=10).contains(&sent), "{sent} pings in ten intervals");
    assert!(p.at_server.iter().all(|m| matches!(m, Message::Pong(_))));
    assert_eq!(p.server.close_state(), CloseState::Open);
    assert_eq!(p.server.transport(), Transport::Open);
}

#[test]
fn traffic_keeps_a_connection_from_being_pinged() {
    let mut p = Pair::new(false, true);
    for _ in 0..20 {
        p.client.send(Message::text("still here")).unwrap();
        p.deliver();
        p.advance(INTERVAL / 2, true);
    }
    assert_eq!(pings(&p.at_client), 0);
    assert_eq!(p.at_server.len(), 20);
}

#[test]
fn a_peer_that_does_not_answer_is_declared_dead() {
    let mut p = Pair::new(false, true);
    // Deliver nothing: the client never sees the ping.
    p.advance(INTERVAL, false);
    let ping_at = p.now;
    assert!(!p.server.transmit_bytes().is_empty(), "the keepalive ping");
    assert_eq!(p.server.poll_timeout(), Some(ping_at + ANSWER));
    p.advance(ANSWER - Duration::from_millis(1), false);
    assert_eq!(p.server.transport(), Transport::Open, "not before the deadline");
    p.advance(Duration::from_millis(1), false);
    assert_eq!(p.server.transport(), Transport::Abort);
    assert_eq!(p.server.take_error(), Some(Error::Timeout("keepalive")));
    assert_eq!(p.server.poll_timeout(), None);
    p.server.transport_closed();
    assert_eq!(p.server.transport(), Transport::Closed);
}

#[test]
fn any_input_answers_a_keepalive_ping() {
    let mut p = Pair::new(false, true);
    p.advance(INTERVAL, false);
    let _ping = p.server.transmit_bytes();
    // Instead of a pong, a data message arrives before the deadline.
    p.advance(ANSWER / 2, false);
    p.client.send(Message::text("busy")).unwrap();
    p.deliver();
    p.advance(ANSWER, true);
    assert_eq!(p.server.transport(), Transport::Open);
    assert_eq!(p.server.take_error(), None);
}

#[test]
fn a_clean_close_started_by_the_client() {
    let mut p = Pair::new(true, true);
    p.client
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .unwrap();
    assert_eq!(p.client.close_state(), CloseState::Closing);
    p.deliver();
    // §7.1.1: the server closes the transport first, the client waits for it.
    assert_eq!(p.server.transport(), Transport::Finish);
    assert_eq!(p.client.transport(), Transport::Open);
    assert!(p.client.is_closed() && p.server.is_closed());
    p.server.transport_closed();
    assert_eq!(p.client.receive_eof(), None, "a finished handshake");
    assert_eq!(p.client.transport(), Transport::Finish);
    p.client.transport_closed();
    assert_eq!(p.client.take_error(), None);
    assert_eq!(p.server.take_error(), None);
}

#[test]
fn a_client_whose_server_never_closes_tcp_gives_up_without_error() {
    let mut p = Pair::new(false, false);
    p.server.close(None).unwrap();
    p.deliver();
    assert_eq!(
        p.client.transport(),
        Transport::Open,
        "waits for the server's FIN"
    );
    p.advance(CLOSE, false);
    assert_eq!(p.client.transport(), Transport::Abort);
    assert_eq!(p.client.take_error(), None, "the handshake itself finished");
}

#[test]
fn a_close_that_is_never_answered_times_out() {
    let mut p = Pair::new(false, false);
    p.client.close(None).unwrap();
    let _lost = p.client.transmit_bytes();
    p.advance(CLOSE - Duration::from_millis(1), false);
    assert_eq!(p.client.transport(), Transport::Open);
    p.advance(Duration::from_millis(1), false);
    assert_eq!(p.client.transport(), Transport::Abort);
    assert_eq!(p.client.take_error(), Some(Error::Timeout("close")));
}

#[test]
fn a_failed_connection_shuts_down_writing_then_waits_for_the_fin() {
    let mut p = Pair::new(false, false);
    // A masked frame from the server: the client fails the connection (§5.1, §7.1.7).
    p.client.receive(&[0x81, 0x81, 1, 2, 3, 4, b'x' ^ 1]);
    assert!(matches!(p.client.poll_message(), Err(Error::Protocol(_))));
    assert_eq!(p.client.transport(), Transport::ShutdownWrite);
    let close = p.client.transmit_bytes();
    assert_eq!(close[0], 0x88, "the close frame goes out first");
    p.client.write_shut_down();
    assert_eq!(p.client.transport(), Transport::Open);
    // Whatever still arrives is discarded.
    p.client.receive(&[0x81, 0x02, b'h', b'i']);
    assert_eq!(p.client.poll_message(), Ok(None));
    p.advance(CLOSE, false);
    assert_eq!(p.client.transport(), Transport::Abort);
    assert!(matches!(p.client.take_error(), Some(Error::Protocol(_))));
}

#[test]
fn eof_without_a_close_frame_is_abnormal() {
    let mut p = Pair::new(true, true);
    assert_eq!(p.server.receive_eof(), Some(CloseCode::ABNORMAL));
    assert_eq!(p.server.transport(), Transport::Finish);
    assert_eq!(p.server.take_error(), Some(Error::AbnormalClosure));
    assert_eq!(p.server.send(Message::text("late")), Err(Error::Closed));
}

#[test]
fn a_timer_started_between_ticks_is_due_at_once() {
    let mut p = Pair::new(false, false);
    p.advance(Duration::from_secs(3600), false);
    // Closing an hour later: the deadline starts at the next tick, not an hour ago.
    p.client.close(None).unwrap();
    let due = p.client.poll_timeout().unwrap();
    assert!(due <= p.now, "due at once, so that the I/O layer passes the time");
    p.client.handle_timeout(p.now);
    assert_eq!(p.client.poll_timeout(), Some(p.now + CLOSE));
    assert_eq!(p.client.transport(), Transport::Open);
}

/// A pair whose server answers the client's close itself (`auto_close_reply: false`), as a
/// proxy does.
fn pair_with_held_reply() -> Pair {
    let mut p = Pair::new(false, false);
    // The client waits longer than the server holds, so that it hears the late answer.
    let mut patient = config(false);
    patient.close_timeout = CLOSE * 2;
    p.client = Connection::client(patient, insecure_mask_keys_for_tests(7));
    p.client.handle_timeout(p.now);
    let mut c = config(false);
    c.auto_close_reply = false;
    p.server = Connection::server(c);
    p.server.handle_timeout(p.now);
    p
}

#[test]
fn a_held_close_answer_lets_the_last_messages_through_first() {
    let mut p = pair_with_held_reply();
    p.client
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "done")))
        .unwrap();
    p.deliver();
    assert!(matches!(p.at_server.last(), Some(Message::Close(Some(f))) if f.code == CloseCode::NORMAL));
    assert_eq!(p.server.close_state(), CloseState::Closing);
    assert_eq!(
        p.server.transport(),
        Transport::Open,
        "nothing ends before the answer"
    );
    // What the server still had to say (a proxy: the upstream's last echoes) goes out first.
    p.server.send(Message::text("late 1")).unwrap();
    p.server.send(Message::binary(vec![7u8; 300])).unwrap();
    p.server
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "upstream done")))
        .unwrap();
    assert_eq!(p.server.send(Message::text("after")), Err(Error::Closed));
    p.deliver();
    let got: Vec<&Message> = p.at_client.iter().collect();
    assert!(
        matches!(got[0], Message::Text(t) if t.as_str() == "late 1"),
        "{got:?}"
    );
    assert!(matches!(got[1], Message::Binary(b) if b.len() == 300), "{got:?}");
    assert!(
        matches!(got[2], Message::Close(Some(f)) if f.reason == "upstream done"),
        "the application's own answer: {got:?}"
    );
    assert_eq!(
        p.server.transport(),
        Transport::Finish,
        "§7.1.1: the server closes TCP first"
    );
    assert!(p.client.is_closed() && p.server.is_closed());
    assert_eq!(p.server.take_error(), None);
    assert_eq!(p.client.take_error(), None);
}

#[test]
fn a_held_close_answer_is_sent_by_the_engine_when_the_application_takes_too_long() {
    let mut p = pair_with_held_reply();
    p.client
        .close(Some(CloseFrame::new(CloseCode(4000), "")))
        .unwrap();
    p.deliver();
    assert_eq!(p.server.transport(), Transport::Open);
    p.advance(CLOSE - Duration::from_millis(1), true);
    assert!(p.at_client.is_empty(), "held until the deadline");
    p.advance(Duration::from_millis(1), true);
    // The deadline answers with the echo of the client's code and ends the handshake cleanly.
    assert!(
        matches!(p.at_client.last(), Some(Message::Close(Some(f))) if f.code == CloseCode(4000)),
        "{:?}",
        p.at_client
    );
    assert_eq!(p.server.transport(), Transport::Finish);
    assert_eq!(p.server.take_error(), None);
    assert_eq!(p.client.take_error(), None);
}

#[test]
fn input_after_a_held_close_is_discarded_and_eof_is_no_error() {
    let mut p = pair_with_held_reply();
    p.client.close(None).unwrap();
    p.deliver();
    // A peer that breaks §5.5.1 by sending after its close is not heard.
    p.server.receive(&[0x81, 0x85, 1, 2, 3, 4, 0, 0, 0, 0, 0]);
    assert_eq!(p.server.poll_message(), Ok(None));
    // The client gives up and closes TCP before the answer: it did close first, cleanly.
    assert_eq!(p.server.receive_eof(), None);
    assert_eq!(p.server.take_error(), None);
}

#[test]
fn by_default_the_close_is_answered_at_once() {
    let mut p = Pair::new(false, false);
    p.client.close(None).unwrap();
    p.deliver();
    assert!(p.server.is_closed());
    assert_eq!(p.server.send(Message::text("late")), Err(Error::Closed));
    assert!(matches!(p.at_client.last(), Some(Message::Close(None))));
}

/// Any duration a user can configure, `Duration::MAX` included: a deadline past what an
/// `Instant` holds is "never", not a panic (`Instant + Duration` panics on overflow).
#[test]
fn durations_too_long_for_an_instant_mean_never() {
    let mut c = Config::default();
    c.keepalive_interval = Some(Duration::MAX);
    c.keepalive_timeout = Duration::MAX;
    c.close_timeout = Duration::MAX;
    let now = Instant::now();
    let mut client = Connection::client(c.clone(), insecure_mask_keys_for_tests(7));
    let mut server = Connection::server(c);
    client.handle_timeout(now);
    server.handle_timeout(now);
    // Deadlines exist and lie far ahead: nothing is due a year from now.
    let later = now + Duration::from_secs(365 * 86_400);
    for side in [&client, &server] {
        let due = side.poll_timeout().expect("the keepalive check is a deadline");
        assert!(due > later, "{due:?}");
    }
    client.handle_timeout(later);
    assert!(
        client.transmit_bytes().is_empty(),
        "no keepalive ping within a year"
    );
    // The closing handshake with a close deadline of Duration::MAX.
    client
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .unwrap();
    client.handle_timeout(later);
    server.receive(&client.transmit_bytes());
    assert!(matches!(server.poll_message(), Ok(Some(Message::Close(Some(_))))));
    server.handle_timeout(later);
    client.receive(&server.transmit_bytes());
    assert!(matches!(client.poll_message(), Ok(Some(Message::Close(Some(_))))));
    assert_eq!(client.close_state(), CloseState::Closed);
    assert_eq!(server.close_state(), CloseState::Closed);
}

/// One step of [`a_deadline_never_stays_due_once_handled`]'s runs.
#[derive(Debug, Clone)]
enum Step {
    Send {
        client: bool,
    },
    Close {
        client: bool,
    },
    Eof {
        client: bool,
    },
    Deliver,
    /// Moves the clock by this many milliseconds (up to two keepalive intervals).
    Wait(u64),
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    prop_oneof![
        any::<bool>().prop_map(|client| Step::Send { client }),
        any::<bool>().prop_map(|client| Step::Close { client }),
        any::<bool>().prop_map(|client| Step::Eof { client }),
        Just(Step::Deliver),
        (0u64..60_000).prop_map(Step::Wait),
    ]
}

proptest::proptest! {
    /// An I/O layer fires the timer, hands the engine the time, and looks again: a deadline
    /// still due after `handle_timeout(now)` would have it fire forever without waiting (the
    /// tokio layer's receive loop goes round once more after a timer fired). Whatever happened
    /// before (traffic, closes from either side, EOF, time passing), each handled deadline moves
    /// on or goes away.
    #[test]
    fn a_deadline_never_stays_due_once_handled(
        keepalive in proptest::prelude::any::<(bool, bool)>(),
        steps in proptest::collection::vec(step(), 1..40),
    ) {
        let mut p = Pair::new(keepalive.0, keepalive.1);
        for step in steps {
            match step {
                Step::Send { client } => {
                    let side = if client { &mut p.client } else { &mut p.server };
                    let _ = side.send(Message::text("x"));
                }
                Step::Close { client } => {
                    let side = if client { &mut p.client } else { &mut p.server };
                    let _ = side.close(None);
                }
                Step::Eof { client } => {
                    let side = if client { &mut p.client } else { &mut p.server };
                    side.receive_eof();
                }
                Step::Deliver => p.deliver(),
                Step::Wait(ms) => p.now += Duration::from_millis(ms),
            }
            for side in [&mut p.client, &mut p.server] {
                // One `handle_timeout` handles everything due by then.
                if side.poll_timeout().is_some_and(|due| due <= p.now) {
                    side.handle_timeout(p.now);
                }
                let due = side.poll_timeout();
                proptest::prop_assert!(
                    due.is_none_or(|due| due > p.now),
                    "still due at {:?} after handling it (transport {:?})",
                    due.map(|d| d.saturating_duration_since(p.now)),
                    side.transport()
                );
            }
        }
    }
}
