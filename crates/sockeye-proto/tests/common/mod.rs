//! Helpers the engine's integration tests share.
#![allow(dead_code, clippy::unwrap_used)]

use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::frame::{FrameHeader, MAX_HEADER_LEN, OpCode, apply_mask};
use sockeye_proto::handshake::{ClientHandshake, ClientHello, encode_response};
use sockeye_proto::{Config, Connection, Error, Message};

/// What a client made with `client` and a server made with `server` agree on in the opening
/// handshake (RFC 6455 §4, §9.1), run in memory: the (client's, server's) permessage-deflate
/// state, `None` when nothing was offered or accepted.
pub(crate) fn negotiate(
    client: &Config,
    server: &Config,
) -> (Option<PerMessageDeflate>, Option<PerMessageDeflate>) {
    let request = http::Request::get("ws://example.com/").body(()).unwrap();
    let handshake = ClientHandshake::new(request, [7; 16], client).unwrap();
    let hello = ClientHello::from_request(handshake.request()).unwrap();
    let (response, extensions) = hello.accept_with(server);
    let (accepted, _) = handshake
        .parse_response(&encode_response(&response), client)
        .unwrap()
        .unwrap();
    (accepted.deflate, extensions.kept_by(&response))
}

/// A client made with `client` and a server made with `server`, with what they agreed on in the
/// opening handshake installed.
pub(crate) fn negotiated_pair(client: Config, server: Config) -> (Connection, Connection) {
    let (client_state, server_state) = negotiate(&client, &server);
    let mut c = Connection::client(client, sockeye_proto::frame::insecure_mask_keys_for_tests(1));
    c.set_deflate(client_state);
    let mut s = Connection::server(server);
    s.set_deflate(server_state);
    (c, s)
}

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
