//! A client and a server engine driven by an arbitrary list of operations: sends, fragmented
//! sends, pings, closes, partial deliveries of each side's output to the other at arbitrary split
//! points, hostile bytes injected into either direction, and EOF.
//!
//! Checked, beyond "never panics, never loops": while a direction carries only what the other
//! engine produced, every data message arrives whole, in order and unchanged, and no error is
//! raised; once hostile bytes were injected, errors must be protocol violations that leave the
//! receiver closing. With permessage-deflate negotiated the same holds for compressed traffic.
#![no_main]

#[path = "common.rs"]
mod common;

use std::collections::VecDeque;

use arbitrary::Arbitrary;
use bytes::{Buf, Bytes};
use libfuzzer_sys::fuzz_target;
use sockeye_proto::{CloseCode, CloseFrame, CloseState, Config, Connection, DataKind, Error, Message, Role};

#[derive(Arbitrary, Debug)]
enum Op {
    Send { from_client: bool, text: bool, payload: Vec<u8> },
    /// A whole message sent as fragments cut at `cuts`, with a ping after the first fragment.
    Fragmented { from_client: bool, text: bool, payload: Vec<u8>, cuts: Vec<u16>, ping: bool },
    Ping { from_client: bool, payload: Vec<u8> },
    Close { from_client: bool, code: u16, reason: String },
    /// Moves up to `max` bytes of one side's output to the other and lets it process them.
    Deliver { to_client: bool, max: u16 },
    Inject { to_client: bool, bytes: Vec<u8> },
    Eof { to_client: bool },
}

#[derive(Arbitrary, Debug)]
struct Input {
    deflate: Option<common::Negotiated>,
    ops: Vec<Op>,
}

struct Side {
    conn: Connection,
    /// Data messages the other side queued for this one, not yet received.
    expected: VecDeque<Message>,
    /// Hostile bytes reached this side: its input is no longer the peer's output.
    tainted: bool,
    eof: bool,
}

impl Side {
    fn new(role: Role, input: &Input) -> Side {
        let config = { let mut c = Config::default(); c.max_message_size = 1 << 20; c };
        let mut conn = match role {
            Role::Server => Connection::server(config),
            Role::Client => Connection::client(config, sockeye_proto::frame::insecure_mask_keys_for_tests(1)),
        };
        conn.set_deflate(input.deflate.map(|n| n.state(role)));
        Side { conn, expected: VecDeque::new(), tainted: false, eof: false }
    }

    /// Processes everything buffered, checking each message against what was sent.
    fn drain(&mut self) {
        loop {
            match self.conn.poll_message() {
                Ok(Some(message)) if message.is_data() => {
                    if !self.tainted {
                        let want = self.expected.pop_front();
                        assert_eq!(Some(&message), want.as_ref(), "data message changed in transit");
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => return,
                Err(Error::Protocol(violation)) => {
                    assert!(self.tainted, "clean traffic raised {violation:?}");
                    assert_ne!(self.conn.close_state(), CloseState::Open);
                }
                Err(e) => panic!("poll_message returned a non-protocol error: {e:?}"),
            }
        }
    }
}

/// Cuts `payload` at the given offsets, as fragments of one message.
fn fragments(payload: &[u8], cuts: &[u16]) -> Vec<Bytes> {
    let mut points: Vec<usize> = cuts.iter().map(|&c| usize::from(c) % (payload.len() + 1)).collect();
    points.sort_unstable();
    points.dedup();
    let mut out = Vec::new();
    let mut start = 0;
    for p in points.into_iter().chain([payload.len()]) {
        out.push(Bytes::copy_from_slice(&payload[start..p]));
        start = p;
    }
    out
}

fn data(text: bool, payload: Vec<u8>) -> Message {
    if text {
        Message::text(String::from_utf8_lossy(&payload).into_owned())
    } else {
        Message::binary(payload)
    }
}

fuzz_target!(|input: Input| {
    let mut client = Side::new(Role::Client, &input);
    let mut server = Side::new(Role::Server, &input);
    for op in input.ops {
        match op {
            Op::Send { from_client, text, payload } => {
                let (from, to) = if from_client { (&mut client, &mut server) } else { (&mut server, &mut client) };
                let message = data(text, payload);
                if from.conn.send(message.clone()).is_ok() {
                    to.expected.push_back(message);
                }
            }
            Op::Fragmented { from_client, text, payload, cuts, ping } => {
                let (from, to) = if from_client { (&mut client, &mut server) } else { (&mut server, &mut client) };
                let message = data(text, payload);
                let kind = if text { DataKind::Text } else { DataKind::Binary };
                let pieces = fragments(message.as_payload(), &cuts);
                let last = pieces.len() - 1;
                let mut sent = true;
                for (i, piece) in pieces.into_iter().enumerate() {
                    sent &= from.conn.send_fragment(kind, piece, i == last).is_ok();
                    if i == 0 && ping {
                        let _ = from.conn.send(Message::Ping(Bytes::from_static(b"between")));
                    }
                }
                if sent {
                    to.expected.push_back(message);
                }
            }
            Op::Ping { from_client, mut payload } => {
                payload.truncate(125);
                let from = if from_client { &mut client } else { &mut server };
                let _ = from.conn.send(Message::Ping(payload.into()));
            }
            Op::Close { from_client, code, reason } => {
                let from = if from_client { &mut client } else { &mut server };
                let frame = CloseFrame::new(CloseCode(code), reason);
                // Unsendable codes and long reasons are refused without changing anything.
                let before = from.conn.close_state();
                if from.conn.close(Some(frame)).is_err() {
                    assert_eq!(from.conn.close_state(), before);
                }
            }
            Op::Deliver { to_client, max } => {
                let (from, to) = if to_client { (&mut server, &mut client) } else { (&mut client, &mut server) };
                let mut left = usize::from(max);
                let output = from.conn.transmit();
                while left > 0 && output.has_remaining() {
                    let chunk = output.chunk();
                    let n = chunk.len().min(left);
                    if !to.eof {
                        to.conn.receive(&chunk[..n]);
                    }
                    output.advance(n);
                    left -= n;
                }
                to.drain();
            }
            Op::Inject { to_client, bytes } => {
                let to = if to_client { &mut client } else { &mut server };
                if !to.eof {
                    to.tainted |= !bytes.is_empty();
                    to.conn.receive(&bytes);
                    to.drain();
                }
            }
            Op::Eof { to_client } => {
                let to = if to_client { &mut client } else { &mut server };
                to.drain();
                to.eof = true;
                let _ = to.conn.receive_eof();
            }
        }
    }
});
