//! permessage-deflate through whole connections (RFC 7692 §6–§7): both roles, negotiated the way a
//! handshake would, driven by byte slices.
#![cfg(feature = "deflate")]
#![allow(clippy::unwrap_used)]

mod common;

use common::{client_frame, drain, negotiate, negotiated_pair};
use proptest::prelude::*;
use sockeye_proto::extension::deflate::DeflateConfig;
use sockeye_proto::frame::OpCode;
use sockeye_proto::{Config, Connection, Error, Message, ProtocolViolation};

/// A client and a server that negotiated `client` offer against `server` config.
fn negotiated(client: DeflateConfig, server: DeflateConfig) -> (Connection, Connection) {
    let cc = {
        let mut c = Config::default();
        c.deflate = Some(client);
        c
    };
    let sc = {
        let mut c = Config::default();
        c.deflate = Some(server);
        c
    };
    negotiated_pair(cc, sc)
}

/// Raw deflate of `data` with a sync flush and the tail removed, as a peer would send it.
fn deflated(data: &[u8]) -> Vec<u8> {
    let mut c = flate2::Compress::new(flate2::Compression::default(), false);
    let mut out = Vec::with_capacity(data.len() + 64);
    c.compress_vec(data, &mut out, flate2::FlushCompress::Sync)
        .unwrap();
    assert!(out.ends_with(&[0, 0, 0xff, 0xff]));
    out.truncate(out.len() - 4);
    out
}

#[test]
fn compressed_messages_are_smaller_on_the_wire_and_arrive_intact() {
    let (mut c, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let text = "the quick brown fox jumps over the lazy dog. ".repeat(100);
    c.send(Message::text(text.clone())).unwrap();
    let wire = c.transmit_bytes();
    assert!(
        wire.len() < text.len() / 5,
        "{} bytes on the wire for {}",
        wire.len(),
        text.len()
    );
    assert_eq!(wire[0] & 0x40, 0x40, "RSV1 marks the compressed message");
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(text.clone())]);
    // Short messages go uncompressed (below min_compress_size).
    c.send(Message::text("hi")).unwrap();
    let wire = c.transmit_bytes();
    assert_eq!(wire[0] & 0x40, 0);
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text("hi")]);
}

/// Found by the `connection` fuzzer: with `min_compress_size: 0` an empty message after a sync
/// flush compressed to nothing, and an empty payload with RSV1 is not a DEFLATE block (the peer
/// failed with "invalid stored block lengths"). Empty messages now go uncompressed.
#[test]
fn empty_messages_with_no_compression_threshold_stay_decodable() {
    let config = DeflateConfig::default().min_compress_size(0);
    let (mut c, mut s) = negotiated(config.clone(), config);
    for text in ["$\0", "", "", "J\0", "", "after"] {
        s.send(Message::text(text)).unwrap();
        s.send(Message::binary(text.as_bytes().to_vec())).unwrap();
        let wire = s.transmit_bytes();
        let want = vec![Message::text(text), Message::binary(text.as_bytes().to_vec())];
        assert_eq!(drain(&mut c, &wire).unwrap(), want);
    }
}

#[test]
fn a_fragmented_compressed_message_with_control_frames_between() {
    let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let z = deflated("Hello, fragmented and compressed world".as_bytes());
    let (a, b) = z.split_at(z.len() / 2);
    let mut bytes = client_frame(false, 0x4, OpCode::Text, a);
    bytes.extend(client_frame(true, 0, OpCode::Ping, b"p"));
    bytes.extend(client_frame(true, 0, OpCode::Continuation, b));
    let got = drain(&mut s, &bytes).unwrap();
    assert_eq!(
        got,
        vec![
            Message::Ping("p".into()),
            Message::text("Hello, fragmented and compressed world")
        ]
    );
}

#[test]
fn rsv1_rules() {
    // RSV1 on a continuation frame, or on a control frame, is a protocol error (§6.1).
    let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let bytes = [
        client_frame(false, 0x4, OpCode::Text, &deflated(b"abc")),
        client_frame(true, 0x4, OpCode::Continuation, b""),
    ]
    .concat();
    assert_eq!(
        drain(&mut s, &bytes),
        Err(ProtocolViolation::ReservedBits(4).into())
    );
    let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    assert_eq!(
        drain(&mut s, &client_frame(true, 0x4, OpCode::Ping, b"")),
        Err(ProtocolViolation::ReservedBits(4).into())
    );
    // Without negotiation RSV1 is reserved.
    let mut plain = Connection::server(Config::default());
    assert_eq!(
        drain(
            &mut plain,
            &client_frame(true, 0x4, OpCode::Text, &deflated(b"abc"))
        ),
        Err(ProtocolViolation::ReservedBits(4).into())
    );
}

#[test]
fn a_deflate_bomb_is_refused_with_1009_and_garbage_with_1007() {
    let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let mut s_small = Connection::server({
        let mut c = Config::default();
        c.max_message_size = 1 << 20;
        c
    });
    let sc = {
        let mut c = Config::default();
        c.max_message_size = 1 << 20;
        c
    };
    let (_, state) = negotiate(&Config::default(), &sc);
    s_small.set_deflate(state);
    let bomb = deflated(&vec![b'a'; 16 << 20]);
    let err = drain(&mut s_small, &client_frame(true, 0x4, OpCode::Binary, &bomb)).unwrap_err();
    assert!(
        matches!(err, Error::Protocol(ProtocolViolation::MessageTooBig { .. })),
        "{err:?}"
    );
    assert_eq!(err.close_code().unwrap().0, 1009);
    let err = drain(&mut s, &client_frame(true, 0x4, OpCode::Binary, &[0xff; 40])).unwrap_err();
    assert_eq!(err.close_code().unwrap().0, 1007, "{err:?}");
    // Inflated text is still checked as UTF-8.
    let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let err = drain(
        &mut s,
        &client_frame(true, 0x4, OpCode::Text, &deflated(&[b'a', 0xff, b'b'])),
    )
    .unwrap_err();
    assert_eq!(err, Error::Protocol(ProtocolViolation::InvalidUtf8));
}

/// Regression (issue 13): `max_message_size: usize::MAX` ("no limit") made the inflater compute
/// `limit + 1`, a panic in debug builds (and one-byte buffer growth in release).
#[test]
fn compressed_messages_inflate_with_no_size_limit() {
    let config = {
        let mut c = Config::default();
        c.max_message_size = usize::MAX;
        c.max_frame_size = usize::MAX;
        c
    };
    let (_, state) = negotiate(&Config::default(), &config);
    let mut s = Connection::server(config);
    s.set_deflate(state);
    let text = "a message with no size limit, ".repeat(1 << 15);
    let z = deflated(text.as_bytes());
    let (a, b) = z.split_at(z.len() / 3);
    let mut bytes = client_frame(false, 0x4, OpCode::Text, a);
    bytes.extend(client_frame(true, 0, OpCode::Continuation, b));
    assert_eq!(drain(&mut s, &bytes).unwrap(), vec![Message::text(text)]);
}

#[test]
fn window_bits_8_is_accepted_and_messages_go_uncompressed() {
    let client = DeflateConfig::default().server_max_window_bits(8);
    let (mut c, mut s) = negotiated(client, DeflateConfig::default());
    let text = "abcabcabc".repeat(50);
    s.send(Message::text(text.clone())).unwrap();
    let wire = s.transmit_bytes();
    assert_eq!(
        wire[0] & 0x40,
        0,
        "no zlib raw stream with a 256-byte window exists; sent plain"
    );
    assert_eq!(drain(&mut c, &wire).unwrap(), vec![Message::text(text.clone())]);
    // The other direction still compresses.
    c.send(Message::text(text.clone())).unwrap();
    let wire = c.transmit_bytes();
    assert_eq!(wire[0] & 0x40, 0x40);
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(text)]);
}

fn any_config() -> impl Strategy<Value = DeflateConfig> {
    (any::<bool>(), any::<bool>(), 8u8..16, 8u8..16, 0usize..64).prop_map(|(snct, cnct, sb, cb, min)| {
        DeflateConfig::default()
            .server_no_context_takeover(snct)
            .client_no_context_takeover(cnct)
            .server_max_window_bits(sb)
            .client_max_window_bits(cb)
            .min_compress_size(min)
    })
}

proptest! {
    /// Random messages both ways under random negotiated parameters, the wire split at random
    /// points: everything arrives intact.
    #[test]
    fn round_trips_under_any_negotiation(
        client in any_config(), server in any_config(),
        messages in proptest::collection::vec("[a-e ]{0,600}", 1..6),
        cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..4),
    ) {
        let (c, s) = negotiated(client, server);
        let mut ends = [c, s];
        for direction in [0, 1] {
            let [a, b] = &mut ends;
            let (from, to) = if direction == 0 { (a, b) } else { (b, a) };
            for m in &messages {
                from.send(Message::text(m.clone())).unwrap();
            }
            let wire = from.transmit_bytes();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(wire.len() + 1)).collect();
            points.sort();
            let mut got = Vec::new();
            let mut prev = 0;
            for p in points.into_iter().chain([wire.len()]) {
                got.extend(drain(to, &wire[prev..p]).unwrap());
                prev = p;
            }
            prop_assert_eq!(got, messages.iter().map(|m| Message::text(m.clone())).collect::<Vec<_>>());
        }
    }

    /// Truncated or corrupt compressed payloads end in a clean 1007 or 1002, never a panic.
    #[test]
    fn corrupt_compressed_payloads_close_cleanly(data in proptest::collection::vec(any::<u8>(), 0..300), text in any::<bool>()) {
        let (_, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
        let opcode = if text { OpCode::Text } else { OpCode::Binary };
        match drain(&mut s, &client_frame(true, 0x4, opcode, &data)) {
            Ok(_) => {}
            Err(e) => prop_assert!(matches!(e.close_code().map(|c| c.0), Some(1007 | 1002 | 1009)), "{:?}", e),
        }
    }
}

/// Fan-out: a prepared message is compressed once for every server connection without context
/// takeover (same level and window), and each connection's peer still reads it; a connection
/// that keeps context compresses for itself, and a prepared message interleaved with ordinary
/// ones leaves that context consistent.
#[test]
fn a_prepared_message_is_compressed_once_for_connections_without_context_takeover() {
    use sockeye_proto::PreparedMessage;
    let shared = DeflateConfig::default().server_no_context_takeover(true);
    let text = "a publication for every subscriber of the topic; ".repeat(40);
    let prepared = PreparedMessage::new(Message::text(text.clone())).unwrap();
    let mut first_wire = None;
    for _ in 0..3 {
        let (mut c, mut s) = negotiated(DeflateConfig::default(), shared.clone());
        s.send_prepared(&prepared).unwrap();
        let wire = s.transmit_bytes();
        assert_eq!(wire[0] & 0x40, 0x40, "compressed");
        assert!(wire.len() < text.len() / 5);
        // The same bytes on every connection: computed once.
        assert_eq!(first_wire.get_or_insert_with(|| wire.clone()), &wire);
        assert_eq!(drain(&mut c, &wire).unwrap(), vec![Message::text(text.clone())]);
        // Twice on one connection: still decodable (no context carried over).
        s.send_prepared(&prepared).unwrap();
        assert_eq!(
            drain(&mut c, &s.transmit_bytes()).unwrap(),
            vec![Message::text(text.clone())]
        );
    }
    assert_eq!(
        prepared.compressed_forms(),
        1,
        "one (level, window) seen: one compression"
    );

    // Context takeover: the connection compresses for itself, nothing is shared.
    let (mut c, mut s) = negotiated(DeflateConfig::default(), DeflateConfig::default());
    let private = PreparedMessage::new(Message::text(text.clone())).unwrap();
    for _ in 0..3 {
        s.send(Message::text(text.clone())).unwrap();
        s.send_prepared(&private).unwrap();
    }
    let got = drain(&mut c, &s.transmit_bytes()).unwrap();
    assert_eq!(got, vec![Message::text(text.clone()); 6]);
    assert_eq!(private.compressed_forms(), 0);

    // No compression negotiated: the shared payload, as `send` would.
    let mut plain = Connection::server(Config::default());
    let mut client = Connection::client(
        Config::default(),
        sockeye_proto::frame::insecure_mask_keys_for_tests(2),
    );
    plain.send_prepared(&prepared).unwrap();
    assert_eq!(
        drain(&mut client, &plain.transmit_bytes()).unwrap(),
        vec![Message::text(text)]
    );
    assert!(PreparedMessage::new(Message::Ping(Default::default())).is_none());
}

/// A compressed message sent in pieces holds a compressor from the pool until its last piece; one
/// that can never be finished — we closed, or the connection failed — gives it back at once
/// instead of keeping ~300 KiB of a shared pool until the connection is dropped.
#[test]
fn an_unfinished_streamed_message_gives_its_compressor_back() {
    let text = bytes::Bytes::from("a streamed piece of text, compressible. ".repeat(20));
    for end in ["our close", "a protocol error"] {
        let pool = sockeye_proto::extension::deflate::DeflatePool::new(8);
        let config = DeflateConfig::default().pool(Some(pool.clone()));
        let (mut c, _s) = negotiated(config.clone(), config);
        c.send_fragment(sockeye_proto::DataKind::Text, text.clone(), false)
            .unwrap();
        assert_eq!(pool.idle().0, 0, "held while the message is in progress");
        // Control frames in between leave it held.
        c.send(Message::Ping("p".into())).unwrap();
        assert_eq!(pool.idle().0, 0);
        match end {
            "our close" => c.close(None).unwrap(),
            _ => {
                // A server frame must not be masked (§5.1): the client fails the connection.
                c.receive(&client_frame(true, 0, OpCode::Text, b"masked"));
                assert!(c.poll_message().is_err());
            }
        }
        assert_eq!(pool.idle().0, 1, "after {end}");
        assert!(
            c.send_fragment(sockeye_proto::DataKind::Text, text.clone(), true)
                .is_err()
        );
    }
}

/// Issue 31: a connection starts waiting. One driven by an I/O layer that never calls
/// `release_idle_buffers` (nor `note_input`) and only sends — a sans-I/O push loop — kept the
/// compressor it borrowed for its first message for life (held (1, 0)); now each message it pushes
/// gives its compressor back, so it holds no zlib state between messages. Input makes it busy: it
/// then keeps its states until `release_idle_buffers`, the duty documented on `Connection`.
#[test]
fn a_connection_never_told_of_a_wait_holds_no_state_between_pushes() {
    let pool = sockeye_proto::extension::deflate::DeflatePool::new(8);
    let config = DeflateConfig::default().pool(Some(pool.clone()));
    let (mut c, mut s) = negotiated(DeflateConfig::default().pool(None), config);
    let text = "a pushed update, compressible enough. ".repeat(10);
    for i in 0..3 {
        s.send(Message::text(text.clone())).unwrap();
        assert_eq!(pool.held(), (0, 0), "after push {i}");
        let wire = s.transmit_bytes();
        assert_eq!(drain(&mut c, &wire).unwrap(), vec![Message::text(text.clone())]);
    }
    assert_eq!(pool.borrows(), (3, 0));
    // Input arrives: busy, the states stay out of the pool until the connection waits.
    c.send(Message::text(text.clone())).unwrap();
    let wire = c.transmit_bytes();
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(text.clone())]);
    s.send(Message::text(text.clone())).unwrap();
    assert_eq!(pool.held(), (1, 1));
    drop(s.release_idle_buffers(0));
    assert_eq!(pool.held(), (0, 0));
}

/// Sends `text` from `from` and checks that `to` receives exactly it.
fn deliver(from: &mut Connection, to: &mut Connection, text: impl Into<String>) {
    let text = text.into();
    from.send(Message::text(text.clone())).unwrap();
    let wire = from.transmit_bytes();
    assert_eq!(drain(to, &wire).unwrap(), vec![Message::text(text)]);
}

/// Issue 31: a wait for input through which the I/O layer runs the engine's timer
/// (`linger_deflate`) keeps the pooled states for `DeflateConfig::linger`, from the connection's
/// second busy spell on. Messages that come within it cost no pool round trip, reset or priming
/// (a second borrow, then none for the rest of the exchange), the
/// deadline does not move at every message, and a whole linger without input gives the states
/// back. A wait that gives them back at once (`release_idle_deflate`) ends the linger.
#[test]
fn a_wait_for_input_keeps_pooled_states_for_the_linger_then_gives_them_back() {
    use std::time::{Duration, Instant};
    let pool = sockeye_proto::extension::deflate::DeflatePool::new(8);
    let linger = Duration::from_millis(50);
    let config = DeflateConfig::default().pool(Some(pool.clone())).linger(linger);
    let (mut c, mut s) = negotiated(DeflateConfig::default().pool(None), config);
    let start = Instant::now();
    s.handle_timeout(start);
    let keepalive = s.poll_timeout();
    let mut now = start;
    // An echo, 2 ms between messages: the server waits for input after each.
    for i in 0..100 {
        let text = format!("message {i}: some text that compresses, some text that compresses");
        deliver(&mut c, &mut s, text.clone());
        deliver(&mut s, &mut c, text);
        s.linger_deflate();
        // The first wait gives them back (a connection lingers once it came back for them).
        let held = if i == 0 { (0, 0) } else { (1, 1) };
        assert_eq!(pool.held(), held, "through the wait after message {i}");
        // The I/O layer's timer: due at once while the linger waits for the time, then at a
        // deadline that stays put while messages flow.
        now += Duration::from_millis(2);
        if let Some(due) = s.poll_timeout()
            && due <= now
        {
            s.handle_timeout(now);
        }
    }
    assert_eq!(pool.borrows(), (2, 2), "two borrows each way for 100 messages");
    let due = s.poll_timeout().unwrap();
    assert!(
        due < keepalive.unwrap() && due <= now + linger,
        "the linger's deadline: {due:?}"
    );
    // No input from here: the deadline after the last message finds input seen and starts
    // another linger; the one after that gives the states back.
    let mut fired = 0;
    while pool.held() != (0, 0) {
        let due = s.poll_timeout().unwrap();
        assert!(
            due <= now + 2 * linger,
            "gives back within two lingers of the last input"
        );
        s.handle_timeout(due);
        fired += 1;
        assert!(fired <= 2, "two deadlines at most");
    }
    assert_eq!(s.poll_timeout(), keepalive, "only the keepalive is left");
    // Given back under the connection's name: its next message finds its context.
    let text = "after the linger: some text that compresses, some text that compresses";
    deliver(&mut c, &mut s, text);
    assert_eq!(pool.borrows(), (2, 3));
    // A wait that gives the states back at once ends the linger.
    s.linger_deflate();
    assert_eq!(pool.held(), (0, 1));
    s.release_idle_deflate();
    assert_eq!(pool.held(), (0, 0));
    assert_eq!(s.poll_timeout(), keepalive);
}

/// `linger(Duration::ZERO)` and dedicated states: a wait for input gives pooled states back at
/// once, as before the linger, and starts no deadline.
#[test]
fn without_a_linger_a_wait_for_input_gives_the_states_back_at_once() {
    let pool = sockeye_proto::extension::deflate::DeflatePool::new(8);
    let config = DeflateConfig::default()
        .pool(Some(pool.clone()))
        .linger(std::time::Duration::ZERO);
    let (mut c, mut s) = negotiated(DeflateConfig::default().pool(None), config);
    s.handle_timeout(std::time::Instant::now());
    let keepalive = s.poll_timeout();
    let text = "some text that compresses, some text that compresses";
    deliver(&mut c, &mut s, text);
    assert_eq!(pool.held(), (0, 1));
    s.linger_deflate();
    assert_eq!(pool.held(), (0, 0));
    assert_eq!(s.poll_timeout(), keepalive);
    // Dedicated states: nothing to give back, no deadline.
    let (mut c, mut s) = negotiated(
        DeflateConfig::default().pool(None),
        DeflateConfig::default().pool(None),
    );
    s.handle_timeout(std::time::Instant::now());
    let keepalive = s.poll_timeout();
    deliver(&mut c, &mut s, text);
    s.linger_deflate();
    assert_eq!(s.poll_timeout(), keepalive);
}

/// While a linger runs, a message pushed without input gives its compressor back when it ends
/// (only the answer to input keeps it); and a state held for a message in progress starts no
/// linger (the wait cannot give it back: a deadline would only wake the connection every
/// linger until the message ends).
#[test]
fn a_linger_keeps_no_push_state_and_never_runs_for_a_message_in_progress() {
    use std::time::{Duration, Instant};
    let pool = sockeye_proto::extension::deflate::DeflatePool::new(8);
    let config = DeflateConfig::default()
        .pool(Some(pool.clone()))
        .linger(Duration::from_millis(50));
    let (mut c, mut s) = negotiated(DeflateConfig::default().pool(None), config);
    s.handle_timeout(Instant::now());
    let keepalive = s.poll_timeout();
    let text = "some text that compresses, some text that compresses";
    // Two echoes: the first wait gives the states back, the second lingers.
    for _ in 0..2 {
        deliver(&mut c, &mut s, text);
        deliver(&mut s, &mut c, text);
        s.linger_deflate();
    }
    assert_eq!(pool.held(), (1, 1), "lingering");
    assert_ne!(s.poll_timeout(), keepalive, "the linger's deadline runs");
    deliver(&mut s, &mut c, text);
    assert_eq!(pool.held(), (0, 1), "the push gave its compressor back");
    s.release_idle_deflate();
    assert_eq!(s.poll_timeout(), keepalive);
    // The first piece of a compressed message, the rest to come: its decompressor is held
    // through the wait, with no linger.
    c.send_fragment(
        sockeye_proto::DataKind::Text,
        bytes::Bytes::from(text.repeat(20)),
        false,
    )
    .unwrap();
    let wire = c.transmit_bytes();
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![]);
    s.linger_deflate();
    assert_eq!(pool.held(), (0, 1), "held for the message in progress");
    assert_eq!(s.poll_timeout(), keepalive, "no linger for it");
    c.send_fragment(
        sockeye_proto::DataKind::Text,
        bytes::Bytes::from_static(b"end"),
        true,
    )
    .unwrap();
    let wire = c.transmit_bytes();
    let whole = format!("{}end", text.repeat(20));
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(whole)]);
}

/// A busy connection's small inflated messages leave in one buffer they share, not in an
/// allocation each: each message's bytes follow the last one's, but where the buffer runs out.
/// A message the application keeps is never overwritten by those after it, through many
/// refills of that buffer; messages past the copy threshold and fragmented ones arrive intact.
#[test]
fn small_inflated_messages_share_a_buffer_and_kept_ones_stay_intact() {
    let (mut c, mut s) = negotiated(
        DeflateConfig::default().pool(None),
        DeflateConfig::default().pool(None),
    );
    let (mut kept, mut last, mut following) = (Vec::new(), None::<bytes::Bytes>, 0);
    let count = 2000;
    for i in 0..count {
        let text = format!("message {i}: some text that compresses, some text that compresses");
        c.send(Message::text(text.clone())).unwrap();
        let wire = c.transmit_bytes();
        let [Message::Text(got)] = &drain(&mut s, &wire).unwrap()[..] else {
            panic!("one text message")
        };
        let got = got.clone().into_bytes();
        assert_eq!(&got[..], text.as_bytes());
        if let Some(before) = &last
            && before.as_ptr().wrapping_add(before.len()) == got.as_ptr()
        {
            following += 1;
        }
        if i % 97 == 0 {
            kept.push((text, got.clone()));
        }
        last = Some(got);
    }
    // ~70-byte messages, 4 KiB to a buffer: all but ~1 in 58 follow the one before.
    assert!(
        following > count * 9 / 10,
        "{following} of {count} followed the message before"
    );
    for (text, got) in &kept {
        assert_eq!(&got[..], text.as_bytes(), "a kept message was overwritten");
    }
    // Past the copy threshold (1 KiB), whole and fragmented.
    let big: String = (0..400).map(|i| format!("{i} ")).collect();
    c.send(Message::text(big.clone())).unwrap();
    let wire = c.transmit_bytes();
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(big.clone())]);
    let z = deflated(big.as_bytes());
    let (first, rest) = z.split_at(z.len() / 3);
    let mut wire = client_frame(false, 0x4, OpCode::Text, first);
    wire.extend(client_frame(true, 0, OpCode::Continuation, rest));
    assert_eq!(drain(&mut s, &wire).unwrap(), vec![Message::text(big)]);
    for (text, got) in &kept {
        assert_eq!(&got[..], text.as_bytes(), "a kept message was overwritten");
    }
}
