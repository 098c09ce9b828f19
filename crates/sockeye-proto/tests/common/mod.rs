//! Helpers the engine's integration tests share.
#![allow(dead_code, clippy::unwrap_used)]

use sockeye_proto::frame::{FrameHeader, MAX_HEADER_LEN, OpCode, apply_mask};
use sockeye_proto::{Connection, Error, Message};

/// Encodes one frame as a client would send it (masked with a fixed key).
pub(crate) fn client_frame(fin: bool, rsv: u8, opcode: OpCode, payload: &[u8]) -> Vec<u8> {
    frame(fin, rsv, opcode, Some([0x12, 0x34, 0x56, 0x78]), payload)
}

pub(crate) fn frame(fin: bool, rsv: u8, opcode: OpCode, mask: Option<[u8; 4]>, payload: &[u8]) -> Vec<u8> {
    let header = FrameHeader {
        fin,
        rsv,
        opcode,
        mask,
        payload_len: payload.len() as u64,
    };
    let mut buf = [0u8; MAX_HEADER_LEN];
    let n = header.encode(&mut buf);
    let mut out = buf[..n].to_vec();
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(key) = mask {
        apply_mask(&mut out[start..], key, 0);
    }
    out
}

/// Feeds `bytes` and collects every message until the engine needs more, or the first error.
pub(crate) fn drain(conn: &mut Connection, bytes: &[u8]) -> Result<Vec<Message>, Error> {
    conn.receive(bytes);
    let mut out = Vec::new();
    while let Some(m) = conn.poll_message()? {
        out.push(m);
    }
    Ok(out)
}
