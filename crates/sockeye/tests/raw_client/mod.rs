//! What the tests that speak to a server from a bare socket share: the opening handshake without
//! a client library (whose buffers or pacing the test would otherwise measure).
#![allow(dead_code)]

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends an opening handshake request on `tcp` and reads the response head, which it returns
/// (up to and including the blank line), byte by byte so that nothing after it is consumed.
pub(crate) async fn upgrade(tcp: &mut TcpStream) -> Vec<u8> {
    tcp.write_all(
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(tcp.read_u8().await.unwrap());
    }
    head
}
