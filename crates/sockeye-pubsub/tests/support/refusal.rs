//! What a browser's refused socket is told: the node upgrades it, then closes it at once with a
//! close code and reason (docs/pubsub-protocol.md, "Refusals"). Shared by the web face's tests
//! here and `ws pubsub_server`'s (crates/sockeye-cli/tests, by `#[path]`).
#![allow(dead_code, clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The upgrade request a page of `origin` sends to `addr`.
pub(crate) fn browser_request(addr: SocketAddr, origin: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: {origin}\r\n\r\n"
    )
}

/// Sends `request` to `addr` and asserts a 101; then the close code and reason the node closed
/// the socket with, or `None` when nothing came within `within` (the socket was kept open).
pub(crate) async fn close_after_upgrade(
    addr: SocketAddr,
    request: &str,
    within: Duration,
) -> Option<(u16, String)> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            if let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&seen[..end]).into_owned();
                assert!(
                    head.starts_with("HTTP/1.1 101"),
                    "a browser's socket is upgraded: {head}"
                );
                // An unmasked server frame: FIN + close, a 7-bit length, the code, the reason.
                let frame = &seen[end + 4..];
                if frame.len() >= 2 && frame.len() >= 2 + usize::from(frame[1] & 0x7f) {
                    assert_eq!(frame[0], 0x88, "a close frame first: {frame:?}");
                    let payload = &frame[2..2 + usize::from(frame[1] & 0x7f)];
                    let code = u16::from_be_bytes([payload[0], payload[1]]);
                    return (code, String::from_utf8(payload[2..].to_vec()).unwrap());
                }
            }
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed without a close frame: {seen:?}");
            seen.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(within, read).await.ok()
}
