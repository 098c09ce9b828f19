//! Telling an HTTP/2 client from an HTTP/1.1 one on a new connection: ALPN over TLS, the
//! connection preface in cleartext.

use std::io;

use bytes::BytesMut;
use tokio::net::TcpStream;

use crate::stream::TransportStream;

/// The HTTP/2 connection preface a client with prior knowledge starts with (RFC 9113 §3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Reads the start of a cleartext connection into `head` until it is the HTTP/2 preface (prior
/// knowledge) or cannot be: an HTTP/1.1 request differs at its first byte, so this usually
/// decides on the first read, and the bytes stay in `head` for whichever protocol goes on.
async fn read_preface(tcp: &mut TcpStream, head: &mut BytesMut) -> io::Result<bool> {
    use tokio::io::AsyncReadExt;
    loop {
        let n = head.len().min(PREFACE.len());
        if head[..n] != PREFACE[..n] {
            return Ok(false);
        }
        if n == PREFACE.len() {
            return Ok(true);
        }
        if tcp.read_buf(head).await? == 0 {
            return Ok(false);
        }
    }
}

/// Whether ALPN chose `h2` on a TLS stream (server or client side).
pub(crate) fn alpn_is_h2(stream: &TransportStream) -> bool {
    match stream {
        #[cfg(feature = "tls")]
        TransportStream::ServerTls(s) => s.alpn_protocol() == Some(b"h2"),
        #[cfg(feature = "tls")]
        TransportStream::ClientTls(s) => s.alpn_protocol() == Some(b"h2"),
        _ => false,
    }
}

/// Whether a new connection speaks HTTP/2: ALPN `h2` over TLS; in cleartext, the connection
/// preface (RFC 9113 §3.4), read into `head` (the caller's deadline bounds the wait). What is
/// read stays in `head` for the protocol that goes on (an HTTP/1.1 request differs at its first
/// byte).
pub(crate) async fn speaks_http2(stream: &mut TransportStream, head: &mut BytesMut) -> bool {
    match stream {
        TransportStream::Plain(tcp) => matches!(read_preface(tcp, head).await, Ok(true)),
        other => alpn_is_h2(other),
    }
}
