//! Receiving messages in pieces ([`Connection::poll_chunk`]): every split point of every input
//! gives the same messages as the whole-message path, compressed or not, with the limits and the
//! UTF-8 check as for whole messages and memory bounded whatever the message size.
#![allow(clippy::unwrap_used)]

mod common;

use bytes::Bytes;
use common::{client_frame, drain};
use proptest::prelude::*;
use sockeye_proto::frame::{FrameHeader, OpCode};
use sockeye_proto::{
    CloseCode, CloseFrame, Config, Connection, DataKind, Error, Incoming, Message, MessageChunk,
    ProtocolViolation,
};

/// What a receiver made of a byte stream, pieces put back together: whole messages in order.
#[derive(Debug, Default)]
struct Assembled {
    messages: Vec<Message>,
    /// The message being put together from pieces.
    partial: Option<(DataKind, Vec<u8>)>,
    pieces: usize,
    largest_piece: usize,
}

impl Assembled {
    /// Takes one piece, checking the order of `first` and `last` and that text stays UTF-8 up to
    /// a code point the next piece may finish.
    fn take(&mut self, incoming: Incoming) {
        match incoming {
            Incoming::Control(m) => {
                assert!(!m.is_data(), "data message {m:?} handed over whole by poll_chunk");
                self.messages.push(m);
            }
            Incoming::Chunk(MessageChunk {
                kind,
                data,
                first,
                last,
                ..
            }) => {
                self.pieces += 1;
                self.largest_piece = self.largest_piece.max(data.len());
                assert_eq!(first, self.partial.is_none(), "`first` out of order");
                let (k, bytes) = self.partial.get_or_insert_with(|| (kind, Vec::new()));
                assert_eq!(*k, kind, "kind changed within a message");
                bytes.extend_from_slice(&data);
                if kind == DataKind::Text
                    && let Err(e) = std::str::from_utf8(bytes)
                {
                    assert!(e.error_len().is_none(), "a text piece was handed over invalid");
                }
                if last {
                    let (kind, bytes) = self.partial.take().unwrap();
                    self.messages.push(match kind {
                        DataKind::Text => Message::text(String::from_utf8(bytes).unwrap()),
                        DataKind::Binary => Message::binary(bytes),
                    });
                }
            }
        }
    }

    /// Feeds `bytes` and takes every piece until the engine needs more, or the first error.
    fn feed(&mut self, conn: &mut Connection, bytes: &[u8]) -> Result<(), Error> {
        conn.receive(bytes);
        while let Some(incoming) = conn.poll_chunk()? {
            self.take(incoming);
        }
        Ok(())
    }
}

fn config() -> Config {
    Config::default()
}

fn client(config: Config) -> Connection {
    Connection::client(config, sockeye_proto::frame::insecure_mask_keys_for_tests(7))
}

/// A client and a server that agreed on permessage-deflate with `client` and `server`'s settings.
#[cfg(feature = "deflate")]
fn deflate_pair(config: Config) -> (Connection, Connection) {
    let (client_state, server_state) = common::negotiate(&config, &config);
    assert!(client_state.is_some() && server_state.is_some(), "deflate agreed");
    let mut c = client(config.clone());
    c.set_deflate(client_state);
    let mut s = Connection::server(config);
    s.set_deflate(server_state);
    (c, s)
}

/// A message, and how the client sends it: whole, or in fragments of `fragment` bytes, then, with
/// `empty_last`, an empty last fragment (what a streamed send does when its source ends after a
/// wait: with compression, the already flushed data must still end the message properly).
#[derive(Debug, Clone)]
struct Sent {
    message: Message,
    fragment: usize,
    empty_last: bool,
}

fn any_stream() -> impl Strategy<Value = Vec<Sent>> {
    let message = prop_oneof![
        "\\PC{0,60}".prop_map(Message::text),
        proptest::collection::vec(any::<u8>(), 0..400).prop_map(Message::binary),
        proptest::collection::vec(any::<u8>(), 0..125).prop_map(|p| Message::Ping(p.into())),
        proptest::collection::vec(any::<u8>(), 0..125).prop_map(|p| Message::Pong(p.into())),
    ];
    proptest::collection::vec(
        (message, 0usize..50, any::<bool>()).prop_map(|(message, fragment, empty_last)| Sent {
            message,
            fragment,
            empty_last,
        }),
        0..8,
    )
}

/// The client's bytes for `stream`, then a close; a ping between the fragments of each
/// fragmented message (control frames may interleave, RFC 6455 §5.4).
fn encode(c: &mut Connection, stream: &[Sent]) -> Vec<u8> {
    for sent in stream {
        let (kind, bytes) = match &sent.message {
            Message::Text(t) => (DataKind::Text, t.clone().into_bytes()),
            Message::Binary(b) => (DataKind::Binary, b.clone()),
            control => {
                c.send(control.clone()).unwrap();
                continue;
            }
        };
        if sent.fragment == 0 || bytes.len() <= sent.fragment {
            c.send(sent.message.clone()).unwrap();
            continue;
        }
        let mut at = 0;
        while at < bytes.len() {
            let end = (at + sent.fragment).min(bytes.len());
            let fin = end == bytes.len() && !sent.empty_last;
            c.send_fragment(kind, bytes.slice(at..end), fin).unwrap();
            if at == 0 {
                c.send(Message::Ping("between".into())).unwrap();
            }
            at = end;
        }
        if sent.empty_last {
            c.send_fragment(kind, Bytes::new(), true).unwrap();
        }
    }
    c.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).unwrap();
    c.transmit_bytes()
}

/// What the client sent, as the server should deliver it.
fn expected(stream: &[Sent]) -> Vec<Message> {
    let mut out = Vec::new();
    for sent in stream {
        out.push(sent.message.clone());
        if sent.message.is_data() && sent.fragment > 0 && sent.message.as_payload().len() > sent.fragment {
            out.insert(out.len() - 1, Message::Ping("between".into()));
        }
    }
    out.push(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, ""))));
    out
}

/// Feeds `bytes` cut at `points` and assembles what `poll_chunk` hands over.
fn streamed(server: &mut Connection, bytes: &[u8], points: &[usize]) -> Assembled {
    let mut got = Assembled::default();
    let mut prev = 0;
    for &p in points.iter().chain([&bytes.len()]) {
        got.feed(server, &bytes[prev..p]).unwrap();
        prev = p;
    }
    assert!(got.partial.is_none(), "a message was left unfinished");
    got
}

fn cut_points(cuts: &[prop::sample::Index], len: usize) -> Vec<usize> {
    let mut points: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
    points.sort_unstable();
    points
}

proptest! {
    /// Random cuts: pieces add up to the messages the whole-message path gives.
    #[test]
    fn random_chunking_gives_the_same_messages(stream in any_stream(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12)) {
        let bytes = encode(&mut client(config()), &stream);
        prop_assert_eq!(drain(&mut Connection::server(config()), &bytes).unwrap(), expected(&stream));
        let got = streamed(&mut Connection::server(config()), &bytes, &cut_points(&cuts, bytes.len()));
        prop_assert_eq!(got.messages, expected(&stream));
    }

    /// The same with permessage-deflate: compressed messages inflate piece by piece.
    #[cfg(feature = "deflate")]
    #[test]
    fn random_chunking_of_compressed_messages(stream in any_stream(), cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12), takeover in any::<bool>()) {
        let mut cfg = config();
        let deflate = cfg.deflate.as_mut().unwrap();
        deflate.min_compress_size = 1;
        deflate.client_no_context_takeover = !takeover;
        let (mut c, mut s) = deflate_pair(cfg);
        let bytes = encode(&mut c, &stream);
        let got = streamed(&mut s, &bytes, &cut_points(&cuts, bytes.len()));
        prop_assert_eq!(got.messages, expected(&stream));
    }

    /// Mixing the two paths between messages, at random, gives the same messages.
    #[test]
    fn mixing_whole_and_pieces_between_messages(stream in any_stream(), picks in proptest::collection::vec(any::<bool>(), 64)) {
        let bytes = encode(&mut client(config()), &stream);
        let mut s = Connection::server(config());
        let mut got = Assembled::default();
        s.receive(&bytes);
        for pick in picks.iter().cycle().take(10_000) {
            let mid_message = got.partial.is_some();
            if *pick && !mid_message {
                match s.poll_message().unwrap() {
                    Some(m) => got.messages.push(m),
                    None => break,
                }
            } else {
                match s.poll_chunk().unwrap() {
                    Some(i) => got.take(i),
                    None => break,
                }
            }
        }
        prop_assert_eq!(got.messages, expected(&stream));
    }
}

/// Every split point of a stream with a long fragmented text message (multi-byte code points
/// cut anywhere), binary, an empty message and control frames in between.
#[test]
fn every_split_point_gives_the_same_messages() {
    let stream = vec![
        Sent {
            message: Message::text("héllo wörld ✓ 𝄞 ".repeat(6)),
            fragment: 7,
            empty_last: false,
        },
        Sent {
            message: Message::Ping("p".into()),
            fragment: 0,
            empty_last: false,
        },
        Sent {
            message: Message::binary(vec![0u8; 0]),
            fragment: 0,
            empty_last: false,
        },
        Sent {
            message: Message::binary((0..=255u8).collect::<Vec<_>>()),
            fragment: 100,
            empty_last: true,
        },
        Sent {
            message: Message::text("ok"),
            fragment: 0,
            empty_last: false,
        },
    ];
    let bytes = encode(&mut client(config()), &stream);
    for a in 0..=bytes.len() {
        let got = streamed(&mut Connection::server(config()), &bytes, &[a]);
        assert_eq!(got.messages, expected(&stream), "split at {a}");
    }
    for a in (0..=bytes.len()).step_by(13) {
        for b in a..=bytes.len() {
            let got = streamed(&mut Connection::server(config()), &bytes, &[a, b]);
            assert_eq!(got.messages, expected(&stream), "split at {a} and {b}");
        }
    }
    // One byte at a time: the pieces follow the arrival, not the frames.
    let points: Vec<usize> = (1..bytes.len()).collect();
    let got = streamed(&mut Connection::server(config()), &bytes, &points);
    assert_eq!(got.messages, expected(&stream));
    let data_bytes: usize = stream
        .iter()
        .filter(|s| s.message.is_data())
        .map(|s| s.message.as_payload().len())
        .sum();
    assert!(
        got.pieces >= data_bytes,
        "{} pieces for {data_bytes} bytes",
        got.pieces
    );
}

/// Fragments sent compressed (each sync-flushed as it is sent, the last one empty after a wait, or
/// not), with context takeover so that each message's end must leave the two windows in step:
/// every split point of the bytes gives the messages sent, whole or in pieces.
#[cfg(feature = "deflate")]
#[test]
fn compressed_fragments_sent_in_pieces_at_every_split_point() {
    let text = "naïve café — ✓ 𝄞 {\"id\": 42, \"ok\": true} ".repeat(8);
    let stream: Vec<Sent> = [(7, true), (0, false), (50, false), (33, true), (0, false)]
        .into_iter()
        .map(|(fragment, empty_last)| Sent {
            message: Message::text(text.clone()),
            fragment,
            empty_last,
        })
        .collect();
    let mut cfg = config();
    cfg.deflate.as_mut().unwrap().min_compress_size = 1;
    let (mut c, _) = deflate_pair(cfg.clone());
    let bytes = encode(&mut c, &stream);
    // The first frame: a text message's first fragment (FIN clear), compressed (RSV1).
    assert_eq!(bytes[0], 0x41, "first frame header {:#04x}", bytes[0]);
    let (_, mut whole) = deflate_pair(cfg.clone());
    assert_eq!(drain(&mut whole, &bytes).unwrap(), expected(&stream));
    for a in 0..=bytes.len() {
        let (_, mut s) = deflate_pair(cfg.clone());
        assert_eq!(
            streamed(&mut s, &bytes, &[a]).messages,
            expected(&stream),
            "split at {a}"
        );
    }
    let (_, mut s) = deflate_pair(cfg);
    let points: Vec<usize> = (1..bytes.len()).collect();
    assert_eq!(streamed(&mut s, &bytes, &points).messages, expected(&stream));
}

/// A piece is handed over as soon as any of its bytes have arrived: cut-through.
#[test]
fn pieces_come_as_the_bytes_arrive() {
    let mut c = client(config());
    c.send(Message::binary(vec![9u8; 100_000])).unwrap();
    let bytes = c.transmit_bytes();
    let mut s = Connection::server(config());
    s.receive(&bytes[..14 + 1000]);
    let Some(Incoming::Chunk(piece)) = s.poll_chunk().unwrap() else {
        panic!("no piece")
    };
    assert_eq!((piece.data.len(), piece.first, piece.last), (1000, true, false));
    assert_eq!(s.poll_chunk().unwrap(), None);
    // Whole messages are refused while a streamed one is unfinished.
    assert!(matches!(s.poll_message(), Err(Error::InvalidInput(_))));
    s.receive(&bytes[14 + 1000..]);
    let Some(Incoming::Chunk(rest)) = s.poll_chunk().unwrap() else {
        panic!("no piece")
    };
    assert_eq!((rest.data.len(), rest.first, rest.last), (99_000, false, true));
    assert!(rest.data.iter().all(|&b| b == 9));
    assert_eq!(s.poll_message(), Ok(None));
}

/// A message begun whole (its first fragments gathered by `poll_message`) continues in pieces,
/// the gathered part first.
#[test]
fn a_message_begun_whole_continues_in_pieces() {
    let mut bytes = client_frame(false, 0, OpCode::Binary, b"abc");
    bytes.extend(client_frame(false, 0, OpCode::Continuation, b"def"));
    let mut s = Connection::server(config());
    assert_eq!(drain(&mut s, &bytes).unwrap(), vec![]);
    let Some(Incoming::Chunk(gathered)) = s.poll_chunk().unwrap() else {
        panic!("nothing")
    };
    assert_eq!(
        (&gathered.data[..], gathered.first, gathered.last),
        (&b"abcdef"[..], true, false)
    );
    s.receive(&client_frame(true, 0, OpCode::Continuation, b"g"));
    let Some(Incoming::Chunk(last)) = s.poll_chunk().unwrap() else {
        panic!("nothing")
    };
    assert_eq!((&last.data[..], last.first, last.last), (&b"g"[..], false, true));
}

/// The message limit holds for streamed messages (1009 when the fragment that passes it is
/// announced), and invalid text fails the connection (1007) before the bad bytes are handed over.
#[test]
fn limits_and_utf8_hold_in_pieces() {
    let mut cfg = config();
    cfg.max_message_size = 10;
    let mut s = Connection::server(cfg);
    let mut bytes = client_frame(false, 0, OpCode::Binary, b"123456");
    bytes.extend(client_frame(true, 0, OpCode::Continuation, b"7890A"));
    let mut got = Assembled::default();
    let err = got.feed(&mut s, &bytes).unwrap_err();
    assert_eq!(err.close_code(), Some(CloseCode::MESSAGE_TOO_BIG));
    assert_eq!(got.pieces, 1);

    let mut s = Connection::server(config());
    let mut got = Assembled::default();
    let bytes = client_frame(true, 0, OpCode::Text, b"fine \xff then bad");
    got.feed(&mut s, &bytes[..6 + 5]).unwrap();
    assert_eq!(got.pieces, 1);
    let err = got.feed(&mut s, &bytes[6 + 5..]).unwrap_err();
    assert_eq!(err, Error::Protocol(ProtocolViolation::InvalidUtf8));
    assert_eq!(got.pieces, 1, "no piece after the invalid byte");
    assert!(s.is_closed());
}

/// A compressed message inflates a bounded piece at a time: 64 MiB of zeros (about 64 KiB on the
/// wire) never costs more than one 64 KiB piece, and a compression bomb over the limit fails
/// with 1009 before its output is held.
#[cfg(feature = "deflate")]
#[test]
fn compressed_messages_inflate_in_bounded_pieces() {
    let mut cfg = config();
    cfg.max_message_size = 128 << 20;
    cfg.max_frame_size = 128 << 20;
    let (mut c, mut s) = deflate_pair(cfg.clone());
    c.send(Message::binary(vec![0u8; 64 << 20])).unwrap();
    let bytes = c.transmit_bytes();
    assert!(bytes.len() < 1 << 20, "{} bytes on the wire", bytes.len());
    let mut total = 0usize;
    let mut largest = 0usize;
    s.receive(&bytes);
    let mut last = false;
    while let Some(incoming) = s.poll_chunk().unwrap() {
        let Incoming::Chunk(piece) = incoming else {
            panic!("{incoming:?}")
        };
        assert!(piece.data.iter().all(|&b| b == 0));
        total += piece.data.len();
        largest = largest.max(piece.data.len());
        last = piece.last;
    }
    assert!(last);
    assert_eq!(total, 64 << 20);
    assert!(largest <= 64 << 10, "a piece of {largest} bytes");

    // A receiver whose limit (1 MiB) is lower than what the sender compresses (8 MiB).
    let (mut c, _) = deflate_pair(cfg.clone());
    cfg.max_message_size = 1 << 20;
    let (_, mut s) = deflate_pair(cfg);
    c.send(Message::binary(vec![0u8; 8 << 20])).unwrap();
    let mut got = Assembled::default();
    let err = got.feed(&mut s, &c.transmit_bytes()).unwrap_err();
    assert_eq!(err.close_code(), Some(CloseCode::MESSAGE_TOO_BIG));
    assert!(got.largest_piece <= 64 << 10);
}

/// A compressed message in several frames (RSV1 on the first only, RFC 7692 §6.1), streamed at
/// every split point: the same text, pieces valid UTF-8 prefixes.
#[cfg(feature = "deflate")]
#[test]
fn a_fragmented_compressed_message_at_every_split_point() {
    let text = "naïve café — ✓ 𝄞 ".repeat(40);
    let mut z = flate2::Compress::new(flate2::Compression::default(), false);
    let mut deflated = Vec::with_capacity(text.len() + 64);
    z.compress_vec(text.as_bytes(), &mut deflated, flate2::FlushCompress::Sync)
        .unwrap();
    deflated.truncate(deflated.len() - 4);
    let mut bytes = Vec::new();
    let pieces: Vec<&[u8]> = deflated.chunks(deflated.len() / 3 + 1).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let (opcode, rsv) = if i == 0 {
            (OpCode::Text, FrameHeader::RSV1)
        } else {
            (OpCode::Continuation, 0)
        };
        bytes.extend(client_frame(i + 1 == pieces.len(), rsv, opcode, piece));
        if i == 0 {
            bytes.extend(client_frame(true, 0, OpCode::Ping, b"mid"));
        }
    }
    let want = vec![Message::Ping("mid".into()), Message::text(text.clone())];
    let (_, server) = deflate_pair(config());
    let mut whole = server;
    assert_eq!(drain(&mut whole, &bytes).unwrap(), want);
    for a in 0..=bytes.len() {
        let (_, mut s) = deflate_pair(config());
        let got = streamed(&mut s, &bytes, &[a]);
        assert_eq!(got.messages, want, "split at {a}");
    }
    let (_, mut s) = deflate_pair(config());
    let points: Vec<usize> = (1..bytes.len()).collect();
    assert_eq!(streamed(&mut s, &bytes, &points).messages, want);
}

/// After a large message the read buffer is not kept at its size: once the application drops
/// the message, the connection holds no more than what follows it (tungstenite #500).
#[test]
fn the_read_buffer_shrinks_after_a_large_message() {
    let mut c = client(config());
    c.send(Message::binary(vec![1u8; 4 << 20])).unwrap();
    c.send(Message::text("next")).unwrap();
    let bytes = c.transmit_bytes();
    let mut s = Connection::server(config());
    // As an I/O layer reads: 64 KiB at a time.
    let mut messages = Vec::new();
    for piece in bytes.chunks(64 << 10) {
        messages.extend(drain(&mut s, piece).unwrap());
    }
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0].as_payload().len(), 4 << 20);
    drop(messages);
    assert!(
        s.read_buffer().capacity() < 64 << 10,
        "the read buffer kept {} bytes",
        s.read_buffer().capacity()
    );
}
