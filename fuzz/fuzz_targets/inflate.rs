//! permessage-deflate inflation (RFC 7692 §7.2.2) on arbitrary compressed payloads, through the
//! connection as a server receives them: corrupt streams, bombs against a small message limit,
//! RSV1 on the wrong frames. Never panics; a message never exceeds the limit; every error is a
//! protocol violation with a close code and leaves the connection closing.
#![no_main]

#[path = "common.rs"]
mod common;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use sockeye_proto::frame::{FrameHeader, MAX_HEADER_LEN, OpCode, apply_mask};
use sockeye_proto::{CloseState, Config, Connection, Error, Role};

#[derive(Arbitrary, Debug)]
struct Frame {
    fin: bool,
    rsv1: bool,
    /// 0 continuation, 1 text, 2 binary, anything else a ping.
    opcode: u8,
    payload: Vec<u8>,
}

#[derive(Arbitrary, Debug)]
struct Input {
    negotiated: common::Negotiated,
    frames: Vec<Frame>,
}

const LIMIT: usize = 64 << 10;

fuzz_target!(|input: Input| {
    let config = { let mut c = Config::default(); c.max_message_size = LIMIT; c.max_frame_size = LIMIT; c };
    let mut server = Connection::server(config);
    server.set_deflate(Some(input.negotiated.state(Role::Server)));
    for frame in input.frames {
        let opcode = match frame.opcode % 4 {
            0 => OpCode::Continuation,
            1 => OpCode::Text,
            2 => OpCode::Binary,
            _ => OpCode::Ping,
        };
        let mut payload = frame.payload;
        payload.truncate(if opcode.is_control() { 125 } else { LIMIT });
        let key = [0x37, 0xfa, 0x21, 0x3d];
        let header = FrameHeader {
            fin: frame.fin || opcode.is_control(),
            rsv: if frame.rsv1 { FrameHeader::RSV1 } else { 0 },
            opcode,
            mask: Some(key),
            payload_len: payload.len() as u64,
        };
        let mut head = [0u8; MAX_HEADER_LEN];
        let n = header.encode(&mut head);
        apply_mask(&mut payload, key, 0);
        server.receive(&head[..n]);
        server.receive(&payload);
        loop {
            match server.poll_message() {
                Ok(Some(message)) => assert!(message.as_payload().len() <= LIMIT),
                Ok(None) => break,
                Err(Error::Protocol(violation)) => {
                    let _ = violation.close_code();
                    assert_ne!(server.close_state(), CloseState::Open);
                }
                Err(e) => panic!("unexpected error kind: {e:?}"),
            }
        }
        let _ = server.transmit_bytes();
        if server.is_closed() {
            return;
        }
    }
});
