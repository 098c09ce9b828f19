//! What the harness binaries share: a hand-rolled client handshake and frame codec for the load
//! generator (so that it pays no library's costs), and statistics.

use std::time::Duration;

use base64::Engine as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects and performs the opening handshake by hand; returns the stream and any bytes read
/// past the response head. With `raw`, only connects (the raw TCP baseline has no handshake).
pub async fn connect(addr: &str, raw: bool) -> std::io::Result<(TcpStream, Vec<u8>)> {
    let mut tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    // Close with a reset: the closing handshake is over by then (or irrelevant), and tens of
    // thousands of TIME_WAIT sockets from the connect scenarios would slow every later run.
    #[allow(deprecated)] // A zero linger resets at once; only a non-zero one blocks on drop.
    tcp.set_linger(Some(Duration::ZERO))?;
    if raw {
        return Ok((tcp, Vec::new()));
    }
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if !buf.starts_with(b"HTTP/1.1 101") {
                return Err(std::io::Error::other(String::from_utf8_lossy(&buf).into_owned()));
            }
            return Ok((tcp, buf.split_off(end + 4)));
        }
    }
}

/// The `Sec-WebSocket-Accept` for a key (RFC 6455 §4.2.2), for servers whose library does not
/// do the handshake itself.
pub fn accept_key(key: &[u8]) -> String {
    let mut sha = sha1_smol::Sha1::new();
    sha.update(key);
    sha.update(b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11");
    base64::engine::general_purpose::STANDARD.encode(sha.digest().bytes())
}

/// Reads an HTTP request head and answers 101; for fastwebsockets, which leaves this to hyper.
pub async fn server_handshake(tcp: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let key = loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        if let Ok(httparse::Status::Complete(_)) = request.parse(&buf) {
            let key = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("sec-websocket-key"))
                .map(|h| h.value.to_vec())
                .ok_or_else(|| std::io::Error::other("no key"))?;
            break key;
        }
    };
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {}\r\n\r\n",
        accept_key(&key)
    );
    tcp.write_all(response.as_bytes()).await
}

/// A client frame (masked with a fixed key; masking cost is the server's concern, not ours).
pub fn masked_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    const KEY: [u8; 4] = [0x12, 0x34, 0x56, 0x78];
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n if n < 65536 => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(0x80 | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(&KEY);
    out.extend(payload.iter().enumerate().map(|(i, b)| b ^ KEY[i % 4]));
    out
}

/// An unmasked server frame.
pub fn server_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 10);
    out.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => out.push(n as u8),
        n if n < 65536 => {
            out.push(126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.extend_from_slice(payload);
    out
}

/// Parses one unmasked frame header at the start of `buf`: (opcode, header length, payload length).
pub fn parse_header(buf: &[u8]) -> Option<(u8, usize, usize)> {
    if buf.len() < 2 {
        return None;
    }
    let opcode = buf[0] & 0x0F;
    let masked = buf[1] & 0x80 != 0;
    let (len, mut header) = match buf[1] & 0x7F {
        126 => (u16::from_be_bytes(buf.get(2..4)?.try_into().ok()?) as usize, 4),
        127 => (u64::from_be_bytes(buf.get(2..10)?.try_into().ok()?) as usize, 10),
        n => (n as usize, 2),
    };
    if masked {
        header += 4;
    }
    (buf.len() >= header).then_some((opcode, header, len))
}

/// Latency statistics in microseconds: (mean, p50, p99).
pub fn stats(samples: &mut [Duration]) -> (f64, f64, f64) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0);
    }
    samples.sort_unstable();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64;
    let pick = |q: f64| us(samples[((samples.len() - 1) as f64 * q) as usize]);
    (mean, pick(0.5), pick(0.99))
}
