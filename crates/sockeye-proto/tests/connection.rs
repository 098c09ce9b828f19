#![allow(clippy::unwrap_used)]
//! The engine driven by byte slices: every behaviour of RFC 6455 §5–§7 the connection owns.

mod common;

use common::{client_frame, drain, frame};
use proptest::prelude::*;
use sockeye_proto::frame::{FrameHeader, OpCode, apply_mask};
use sockeye_proto::{
    CloseCode, CloseFrame, CloseState, Config, Connection, DataKind, Error, Incoming, Message,
    ProtocolViolation, Role, Transport,
};

fn server() -> Connection {
    Connection::server(Config::default())
}

/// Parses what the engine wants to send into (opcode, payload) pairs (server frames: unmasked).
fn sent_frames(conn: &mut Connection) -> Vec<(OpCode, Vec<u8>)> {
    let bytes = conn.transmit_bytes();
    let mut rest = &bytes[..];
    let mut out = Vec::new();
    while !rest.is_empty() {
        let (h, n) = FrameHeader::parse(rest).unwrap().unwrap();
        let end = n + h.payload_len as usize;
        let mut payload = rest[n..end].to_vec();
        if let Some(key) = h.mask {
            apply_mask(&mut payload, key, 0);
        }
        out.push((h.opcode, payload));
        rest = &rest[end..];
    }
    out
}

fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason.as_bytes());
    p
}

#[test]
fn reassembles_fragments_with_interleaved_control_frames() {
    let mut s = server();
    let mut bytes = client_frame(false, 0, OpCode::Text, "frag".as_bytes());
    bytes.extend(client_frame(true, 0, OpCode::Ping, b"p"));
    bytes.extend(client_frame(false, 0, OpCode::Continuation, "men".as_bytes()));
    bytes.extend(client_frame(true, 0, OpCode::Continuation, "ted €".as_bytes()));
    let got = drain(&mut s, &bytes).unwrap();
    assert_eq!(
        got,
        vec![Message::Ping("p".into()), Message::text("fragmented €")]
    );
    assert_eq!(sent_frames(&mut s), vec![(OpCode::Pong, b"p".to_vec())]);
}

#[test]
fn auto_pong_can_be_turned_off() {
    let mut s = Connection::server({
        let mut c = Config::default();
        c.auto_pong = false;
        c
    });
    let got = drain(&mut s, &client_frame(true, 0, OpCode::Ping, b"x")).unwrap();
    assert_eq!(got, vec![Message::Ping("x".into())]);
    assert!(s.transmit().is_empty());
}

/// Each malformed input gives the documented violation, a close frame with the mapped code, and
/// no panic.
#[test]
fn violations_fail_the_connection_with_the_right_code() {
    let too_big = {
        let mut c = Config::default();
        c.max_message_size = 10;
        c
    };
    let cases: Vec<(Config, Vec<u8>, ProtocolViolation, u16)> = vec![
        (
            Config::default(),
            client_frame(true, 0x4, OpCode::Text, b"x"),
            ProtocolViolation::ReservedBits(4),
            1002,
        ),
        (
            Config::default(),
            vec![0x83, 0x80, 0, 0, 0, 0],
            ProtocolViolation::ReservedOpCode(3),
            1002,
        ),
        (
            Config::default(),
            frame(true, 0, OpCode::Text, None, b"x"),
            ProtocolViolation::UnmaskedFrame,
            1002,
        ),
        (
            Config::default(),
            client_frame(false, 0, OpCode::Ping, b""),
            ProtocolViolation::FragmentedControlFrame,
            1002,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Ping, &[0; 126]),
            ProtocolViolation::ControlFrameTooLong,
            1002,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Continuation, b"x"),
            ProtocolViolation::UnexpectedContinuation,
            1002,
        ),
        (
            Config::default(),
            [
                client_frame(false, 0, OpCode::Text, b"a"),
                client_frame(true, 0, OpCode::Text, b"b"),
            ]
            .concat(),
            ProtocolViolation::ExpectedContinuation,
            1002,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Text, &[0xff]),
            ProtocolViolation::InvalidUtf8,
            1007,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Text, &[0xe2, 0x82]),
            ProtocolViolation::InvalidUtf8,
            1007,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Close, &[3]),
            ProtocolViolation::CloseFrameTooShort,
            1002,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Close, &close_payload(1005, "")),
            ProtocolViolation::InvalidCloseCode(1005),
            1002,
        ),
        (
            Config::default(),
            client_frame(true, 0, OpCode::Close, &[3, 232, 0xff]),
            ProtocolViolation::InvalidUtf8,
            1007,
        ),
        (
            too_big.clone(),
            client_frame(true, 0, OpCode::Binary, &[0; 11]),
            ProtocolViolation::MessageTooBig { size: 11, limit: 10 },
            1009,
        ),
        (
            too_big,
            [
                client_frame(false, 0, OpCode::Binary, &[0; 6]),
                client_frame(true, 0, OpCode::Continuation, &[0; 6]),
            ]
            .concat(),
            ProtocolViolation::MessageTooBig { size: 12, limit: 10 },
            1009,
        ),
    ];
    for (config, bytes, violation, code) in cases {
        let mut s = Connection::server(config);
        let err = drain(&mut s, &bytes).unwrap_err();
        assert_eq!(err, Error::Protocol(violation.clone()), "{bytes:x?}");
        assert_eq!(err.close_code(), Some(CloseCode(code)));
        assert_eq!(
            sent_frames(&mut s),
            vec![(OpCode::Close, close_payload(code, ""))],
            "{violation:?}"
        );
        // §7.1.7: the connection has failed: nothing more is processed, writing is shut down
        // once the close frame is out, and the error is kept for the end.
        assert!(s.is_closed(), "{violation:?}");
        assert_eq!(s.transport(), Transport::ShutdownWrite, "{violation:?}");
        assert_eq!(s.send(Message::text("no")), Err(Error::Closed));
        // Whatever the peer still sends (its close reply, junk) is discarded unread.
        let reply = [
            client_frame(true, 0, OpCode::Binary, b"junk"),
            client_frame(true, 0, OpCode::Close, &close_payload(code, "")),
        ]
        .concat();
        assert_eq!(drain(&mut s, &reply), Ok(vec![]));
        assert_eq!(s.buffered(), 0, "discarded input is not kept");
        s.write_shut_down();
        assert_eq!(s.transport(), Transport::Open, "read until the peer's FIN");
        assert_eq!(s.receive_eof(), None);
        assert_eq!(s.transport(), Transport::Abort, "writing is shut down already");
        assert_eq!(s.take_error(), Some(Error::Protocol(violation.clone())));
        assert_eq!(s.take_error(), None);
    }
}

#[test]
fn a_client_rejects_masked_frames() {
    let mut c = Connection::client(
        Config::default(),
        sockeye_proto::frame::insecure_mask_keys_for_tests(1),
    );
    assert_eq!(
        drain(&mut c, &client_frame(true, 0, OpCode::Text, b"x")),
        Err(ProtocolViolation::MaskedFrame.into())
    );
}

/// Autobahn 6.4.3: invalid UTF-8 fails as soon as the bad byte arrives, in the middle of a frame,
/// and the rest of that frame is skipped so the peer's close reply is still found.
#[test]
fn invalid_utf8_fails_fast_inside_a_frame() {
    let mut s = server();
    let mut payload = "κόσμε".as_bytes().to_vec();
    payload.extend_from_slice(&[
        0xce, 0xba, 0xe1, 0xbd, 0xb9, 0xcf, 0x83, 0xce, 0xbc, 0xce, 0xb5, 0xf4, 0x90, 0x80, 0x80,
    ]);
    payload.extend_from_slice("edited".as_bytes());
    let bytes = client_frame(true, 0, OpCode::Text, &payload);
    let bad = bytes.len() - "edited".len() - 3; // the 0x90 after 0xf4: above U+10FFFF
    assert_eq!(
        drain(&mut s, &bytes[..bad]),
        Ok(vec![]),
        "0xf4 alone may still start a code point"
    );
    assert_eq!(
        drain(&mut s, &bytes[bad..=bad]),
        Err(ProtocolViolation::InvalidUtf8.into())
    );
    assert_eq!(drain(&mut s, &bytes[bad + 1..]), Ok(vec![]));
    assert_eq!(
        drain(
            &mut s,
            &client_frame(true, 0, OpCode::Close, &close_payload(1007, ""))
        ),
        Ok(vec![])
    );
    assert!(s.is_closed());
}

#[test]
fn closing_handshake_initiated_by_the_peer() {
    let mut s = server();
    let got = drain(
        &mut s,
        &client_frame(true, 0, OpCode::Close, &close_payload(1000, "bye")),
    )
    .unwrap();
    assert_eq!(
        got,
        vec![Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))]
    );
    assert!(s.is_closed());
    // The reply echoes the code (§5.5.1); nothing is delivered after close.
    assert_eq!(
        sent_frames(&mut s),
        vec![(OpCode::Close, close_payload(1000, ""))]
    );
    assert_eq!(
        drain(&mut s, &client_frame(true, 0, OpCode::Text, b"late")),
        Ok(vec![])
    );
    assert_eq!(s.send(Message::text("late")), Err(Error::Closed));
    // An empty close frame is answered with an empty one.
    let mut s = server();
    assert_eq!(
        drain(&mut s, &client_frame(true, 0, OpCode::Close, b"")),
        Ok(vec![Message::Close(None)])
    );
    assert_eq!(sent_frames(&mut s), vec![(OpCode::Close, vec![])]);
}

#[test]
fn closing_handshake_initiated_locally() {
    let mut s = server();
    s.close(Some(CloseFrame::new(CloseCode(4000), "done"))).unwrap();
    assert_eq!(s.close_state(), CloseState::Closing);

    assert_eq!(
        sent_frames(&mut s),
        vec![(OpCode::Close, close_payload(4000, "done"))]
    );
    // Data still in flight from the peer is delivered; then its close ends the handshake.
    let bytes = [
        client_frame(true, 0, OpCode::Text, b"in flight"),
        client_frame(true, 0, OpCode::Close, &close_payload(4000, "")),
    ]
    .concat();
    let got = drain(&mut s, &bytes).unwrap();
    assert_eq!(
        got,
        vec![
            Message::text("in flight"),
            Message::Close(Some(CloseFrame::new(CloseCode(4000), "")))
        ]
    );
    assert!(s.is_closed());
    assert!(s.transmit().is_empty(), "no second close frame");
}

#[test]
fn refuses_what_the_protocol_cannot_carry() {
    let mut s = server();
    assert!(matches!(
        s.send(Message::Ping(vec![0; 126].into())),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        s.close(Some(CloseFrame::new(CloseCode(1005), ""))),
        Err(Error::InvalidInput(_))
    ));
    assert!(matches!(
        s.close(Some(CloseFrame::new(CloseCode::NORMAL, "x".repeat(124)))),
        Err(Error::InvalidInput(_))
    ));
    assert_eq!(s.close_state(), CloseState::Open);
}

#[test]
fn eof_before_close_is_abnormal() {
    let mut s = server();
    assert_eq!(s.receive_eof(), Some(CloseCode::ABNORMAL));
    assert!(s.is_closed());
    let mut s = server();
    drain(&mut s, &client_frame(true, 0, OpCode::Close, b"")).unwrap();
    assert_eq!(s.receive_eof(), None);
}

#[test]
fn sends_fragments_and_checks_their_order() {
    let mut c = Connection::client(
        Config::default(),
        sockeye_proto::frame::insecure_mask_keys_for_tests(1),
    );
    c.send_fragment(DataKind::Text, "ab".into(), false).unwrap();
    assert!(matches!(c.send(Message::text("x")), Err(Error::InvalidInput(_))));
    c.send(Message::Ping("between".into())).unwrap();
    assert!(matches!(
        c.send_fragment(DataKind::Binary, "x".into(), true),
        Err(Error::InvalidInput(_))
    ));
    c.send_fragment(DataKind::Text, "c".into(), true).unwrap();
    let mut s = server();
    let got = drain(&mut s, &c.transmit_bytes()).unwrap();
    assert_eq!(got, vec![Message::Ping("between".into()), Message::text("abc")]);
}

#[test]
fn server_frames_use_the_shortest_header_on_both_sides_of_125_bytes() {
    for len in [0usize, 1, 2, 124, 125, 126, 127, 65_535, 65_536] {
        for (message, opcode) in [
            (Message::text("a".repeat(len)), 0x81u8),
            (Message::binary(vec![7u8; len]), 0x82),
        ] {
            let mut s = server();
            s.send(message.clone()).unwrap();
            let bytes = s.transmit_bytes();
            let expected_header: Vec<u8> = match len {
                0..=125 => vec![opcode, len as u8],
                126..=65_535 => [vec![opcode, 126], (len as u16).to_be_bytes().to_vec()].concat(),
                _ => [vec![opcode, 127], (len as u64).to_be_bytes().to_vec()].concat(),
            };
            assert_eq!(
                &bytes[..expected_header.len()],
                &expected_header[..],
                "length {len}"
            );
            assert_eq!(
                &bytes[expected_header.len()..],
                message.as_payload(),
                "length {len}"
            );
        }
    }
}

#[test]
fn server_payloads_above_the_threshold_are_not_copied() {
    let mut s = server();
    let big = sockeye_proto::Bytes::from(vec![7u8; 1 << 20]);
    s.send(Message::Binary(big.clone())).unwrap();
    let mut slices = [std::io::IoSlice::new(&[]); 4];
    let n = bytes::Buf::chunks_vectored(s.transmit(), &mut slices);
    assert_eq!(n, 2, "header and payload as separate slices");
    assert_eq!(
        slices[1].as_ptr(),
        big.as_ptr(),
        "the payload slice is the caller's buffer"
    );
}

/// A client-to-server stream of messages, for the property tests.
fn any_messages() -> impl Strategy<Value = Vec<Message>> {
    let message = prop_oneof![
        "\\PC{0,40}".prop_map(Message::text),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Message::binary),
        proptest::collection::vec(any::<u8>(), 0..125).prop_map(|p| Message::Ping(p.into())),
        proptest::collection::vec(any::<u8>(), 0..125).prop_map(|p| Message::Pong(p.into())),
    ];
    proptest::collection::vec(message, 0..8)
}

fn encode(messages: &[Message], fragment: usize) -> Vec<u8> {
    let mut c = Connection::client(
        Config::default(),
        sockeye_proto::frame::insecure_mask_keys_for_tests(1),
    );
    for m in messages {
        match m {
            Message::Text(t) if fragment > 0 && t.len() > fragment => {
                let b = t.clone().into_bytes();
                c.send_fragment(DataKind::Text, b.slice(..fragment), false)
                    .unwrap();
                c.send_fragment(DataKind::Text, b.slice(fragment..), true)
                    .unwrap();
            }
            m => c.send(m.clone()).unwrap(),
        }
    }
    c.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).unwrap();
    c.transmit_bytes()
}

proptest! {
    /// Every split of a valid stream yields the same messages as the whole.
    #[test]
    fn every_split_gives_the_same_messages(messages in any_messages(), fragment in 0usize..5, cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let bytes = encode(&messages, fragment);
        let whole = drain(&mut server(), &bytes).unwrap();
        let mut expected = messages.clone();
        expected.push(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))));
        prop_assert_eq!(&whole, &expected);

        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
        points.sort();
        let mut s = server();
        let mut got = Vec::new();
        let mut prev = 0;
        for p in points.into_iter().chain([bytes.len()]) {
            got.extend(drain(&mut s, &bytes[prev..p]).unwrap());
            prev = p;
        }
        prop_assert_eq!(got, whole);
    }

    /// One byte at a time, too.
    #[test]
    fn byte_at_a_time_gives_the_same_messages(messages in any_messages()) {
        let bytes = encode(&messages, 0);
        let whole = drain(&mut server(), &bytes).unwrap();
        let mut s = server();
        let mut got = Vec::new();
        for b in &bytes {
            got.extend(drain(&mut s, std::slice::from_ref(b)).unwrap());
        }
        prop_assert_eq!(got, whole);
    }

    /// Arbitrary bytes never panic, in either role, and errors always carry a close code.
    #[test]
    fn arbitrary_input_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..400), client in any::<bool>()) {
        let role = if client { Role::Client } else { Role::Server };
        let mut conn = match role {
            Role::Server => Connection::server({ let mut c = Config::default(); c.max_message_size = 200; c }),
            Role::Client => Connection::client({ let mut c = Config::default(); c.max_message_size = 200; c }, sockeye_proto::frame::insecure_mask_keys_for_tests(1)),
        };
        conn.receive(&bytes);
        for _ in 0..bytes.len() + 2 {
            match conn.poll_message() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => prop_assert!(e.close_code().is_some()),
            }
        }
    }
}

/// A frame header claiming 2^62 bytes, with every limit lifted, costs no more than a bounded
/// reservation: the length is the peer's claim, not something to allocate up front.
#[test]
fn a_huge_claimed_length_is_not_allocated_up_front() {
    let mut config = Config::default();
    config.max_frame_size = usize::MAX;
    config.max_message_size = usize::MAX;
    let mut s = Connection::server(config);
    let mut frame = vec![0x82, 0xFF];
    frame.extend_from_slice(&(1u64 << 62).to_be_bytes());
    frame.extend_from_slice(&[1, 2, 3, 4, 5]);
    s.receive(&frame);
    assert_eq!(s.poll_message(), Ok(None));
    assert!(
        s.read_buffer().capacity() <= 32 << 20,
        "{}",
        s.read_buffer().capacity()
    );
}

/// A frame received whole gets room for all of it once its header is in, and says how much is
/// missing: an I/O layer that reads into that room (never reserving more) receives the frame with
/// no reallocation, so no copy of what has arrived.
#[test]
fn a_frame_received_whole_says_what_is_missing_and_fits_its_room() {
    let payload: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let wire = client_frame(true, 0, OpCode::Binary, &payload);
    let mut s = server();
    assert_eq!(s.frame_bytes_missing(), 0, "between frames");
    let (first, mut rest) = wire.split_at(1000);
    s.read_buffer().extend_from_slice(first);
    s.note_input();
    assert_eq!(s.poll_message(), Ok(None));
    let header_len = wire.len() - payload.len();
    assert_eq!(s.frame_bytes_missing(), payload.len() - (1000 - header_len));
    let capacity = s.read_buffer().capacity();
    assert!(capacity - s.read_buffer().len() >= s.frame_bytes_missing());
    while !rest.is_empty() {
        // What a socket read does: fill part of the room.
        let n = rest.len().min(70_000);
        let buf = s.read_buffer();
        assert!(
            buf.capacity() - buf.len() >= n,
            "the room holds the rest of the frame"
        );
        buf.extend_from_slice(&rest[..n]);
        rest = &rest[n..];
        s.note_input();
        assert_eq!(
            s.read_buffer().capacity(),
            capacity,
            "no reallocation while the frame arrives"
        );
        if !rest.is_empty() {
            assert_eq!(s.poll_message(), Ok(None));
            assert_eq!(s.frame_bytes_missing(), rest.len());
        }
    }
    assert_eq!(s.poll_message(), Ok(Some(Message::binary(payload))));
    assert_eq!(s.frame_bytes_missing(), 0);
}

/// The engine's own pongs are counted apart from the application's output: an I/O layer stops
/// reading while its pongs pile up, never because the application's queue is full.
#[test]
fn queued_auto_replies_count_only_the_engines_pongs() {
    let mut s = server();
    s.send(Message::binary(vec![0u8; 100_000])).unwrap();
    assert_eq!(
        s.queued_auto_replies(),
        0,
        "the application's output is not counted"
    );
    let ping = client_frame(true, 0, OpCode::Ping, &[1u8; 100]);
    for _ in 0..10 {
        drain(&mut s, &ping).unwrap();
    }
    assert_eq!(s.queued_auto_replies(), 10 * 102);
    let _ = s.transmit_bytes();
    assert_eq!(s.queued_auto_replies(), 0, "written: nothing owed");
    drain(&mut s, &ping).unwrap();
    assert_eq!(s.queued_auto_replies(), 102);
}

/// `data_delivered` counts what an I/O layer hands the application as data: short messages,
/// fragmented and large ones, streamed pieces; not pings, pongs or closes.
#[test]
fn data_delivered_counts_data_messages_and_pieces_only() {
    let mut s = server();
    assert_eq!(s.data_delivered(), 0);
    let mut input = client_frame(true, 0, OpCode::Text, b"short");
    input.extend(client_frame(true, 0, OpCode::Ping, b"p"));
    input.extend(client_frame(true, 0, OpCode::Pong, b"q"));
    input.extend(client_frame(false, 0, OpCode::Binary, b"frag"));
    input.extend(client_frame(true, 0, OpCode::Continuation, b"mented"));
    input.extend(client_frame(true, 0, OpCode::Binary, &[7; 300]));
    s.receive(&input);
    let mut kinds = Vec::new();
    while let Some(m) = s.poll_message().unwrap() {
        kinds.push((m.is_data(), s.data_delivered()));
    }
    assert_eq!(
        kinds,
        [(true, 1), (false, 1), (false, 1), (true, 2), (true, 3)],
        "each data message moves the count by one, control frames not at all"
    );
    // Streamed: a message in two pieces counts two.
    s.receive(&client_frame(false, 0, OpCode::Text, b"one "));
    assert!(matches!(s.poll_chunk().unwrap(), Some(Incoming::Chunk(_))));
    s.receive(&client_frame(true, 0, OpCode::Continuation, b"two"));
    assert!(matches!(s.poll_chunk().unwrap(), Some(Incoming::Chunk(_))));
    assert_eq!(s.data_delivered(), 5);
    s.receive(&client_frame(true, 0, OpCode::Close, &close_payload(1000, "")));
    assert!(matches!(s.poll_message().unwrap(), Some(Message::Close(_))));
    assert_eq!(s.data_delivered(), 5);
}
