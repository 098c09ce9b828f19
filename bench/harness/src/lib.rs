//! What the harness binaries share: a hand-rolled client handshake and pre-encoded frames for the
//! load generator (so that it pays no library's costs per message), and statistics.

use std::time::Duration;

use sockeye_proto::frame::{FrameHeader, MAX_HEADER_LEN, OpCode, apply_mask};
use sockeye_proto::handshake::{ClientHello, encode_response, parse_request};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// Connects and performs the opening handshake by hand; returns the stream and any bytes read
/// past the response head. With `raw`, only connects (the raw TCP baseline has no handshake).
pub async fn connect(addr: &str, raw: bool) -> std::io::Result<(TcpStream, Vec<u8>)> {
    let mut tcp = tcp_connect(addr, true).await?;
    let leftover = if raw {
        Vec::new()
    } else {
        client_handshake(&mut tcp, addr, "/").await?
    };
    Ok((tcp, leftover))
}

/// Connects and performs the opening handshake for the URL path `path` (with its query), e.g.
/// Socket.IO's `/socket.io/?EIO=4&transport=websocket`; returns the stream and any bytes read past
/// the response head.
pub async fn connect_path(addr: &str, path: &str) -> std::io::Result<(TcpStream, Vec<u8>)> {
    let mut tcp = tcp_connect(addr, true).await?;
    let leftover = client_handshake(&mut tcp, addr, path).await?;
    Ok((tcp, leftover))
}

async fn tcp_connect(addr: &str, nodelay: bool) -> std::io::Result<TcpStream> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(nodelay)?;
    // Close with a reset: the closing handshake is over by then (or irrelevant), and tens of
    // thousands of TIME_WAIT sockets from the connect scenarios would slow every later run.
    #[allow(deprecated)] // A zero linger resets at once; only a non-zero one blocks on drop.
    tcp.set_linger(Some(Duration::ZERO))?;
    Ok(tcp)
}

/// Sends the upgrade request and reads the 101; returns the bytes read past the response head.
async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    addr: &str,
    path: &str,
) -> std::io::Result<Vec<u8>> {
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{}\r\n",
        if deflate_offered() {
            "Sec-WebSocket-Extensions: permessage-deflate\r\n"
        } else {
            ""
        }
    );
    stream.write_all(request.as_bytes()).await?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 1024];
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            if !buf.starts_with(b"HTTP/1.1 101") {
                return Err(std::io::Error::other(String::from_utf8_lossy(&buf).into_owned()));
            }
            return Ok(buf.split_off(end + 4));
        }
    }
}

/// Whether the load generator offers permessage-deflate (`BENCH_DEFLATE=1`: the memory scenario
/// with compression).
fn deflate_offered() -> bool {
    std::env::var_os("BENCH_DEFLATE").is_some_and(|v| v == "1")
}

/// A byte stream of either kind.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How the connect and memory scenarios reach the server, from the environment that `run.sh`
/// sets for every system alike: `BENCH_TLS=DIR` (wss://, trusting `DIR/cert.pem`) and
/// `BENCH_NODELAY=0` (Nagle's algorithm left on).
#[derive(Clone)]
pub struct Link {
    tls: Option<sockeye::tls::TlsConnector>,
    nodelay: bool,
}

impl Link {
    /// Reads `BENCH_TLS` and `BENCH_NODELAY`.
    pub fn from_env() -> Result<Link, sockeye::Error> {
        let tls = match std::env::var_os("BENCH_TLS") {
            Some(dir) => {
                let config = sockeye::tls::ClientTlsOptions::default()
                    .add_ca_file(std::path::Path::new(&dir).join("cert.pem"))?
                    .build()?;
                Some(sockeye::tls::TlsConnector::from(config))
            }
            None => None,
        };
        Ok(Link {
            tls,
            nodelay: nodelay_from_env(),
        })
    }

    /// Connects (TLS when asked) and, unless `raw`, performs the opening handshake.
    pub async fn open(&self, addr: &str, raw: bool) -> std::io::Result<Box<dyn Io>> {
        Ok(self.open_buffered(addr, raw).await?.0)
    }

    /// Whether this link is wss:// (`BENCH_TLS` was set).
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// [`open`](Self::open), also returning any bytes read past the response head (as
    /// [`connect`] does).
    pub async fn open_buffered(&self, addr: &str, raw: bool) -> std::io::Result<(Box<dyn Io>, Vec<u8>)> {
        let tcp = tcp_connect(addr, self.nodelay).await?;
        let mut stream: Box<dyn Io> = match &self.tls {
            Some(connector) => {
                let name = sockeye::tls::rustls::pki_types::ServerName::try_from("localhost")
                    .map_err(std::io::Error::other)?;
                Box::new(connector.connect(name, tcp).await?)
            }
            None => Box::new(tcp),
        };
        let leftover = if raw {
            Vec::new()
        } else {
            client_handshake(&mut stream, addr, "/").await?
        };
        Ok((stream, leftover))
    }
}

/// `BENCH_NODELAY=0` turns TCP_NODELAY off; it is on otherwise, as every system here defaults.
pub fn nodelay_from_env() -> bool {
    std::env::var_os("BENCH_NODELAY").is_none_or(|v| v != "0")
}

/// Reads an HTTP request head and answers 101, with Sockeye's handshake code; for fastwebsockets,
/// which leaves the HTTP part to hyper.
pub async fn server_handshake<S: AsyncRead + AsyncWrite + Unpin>(tcp: &mut S) -> std::io::Result<()> {
    let config = sockeye_proto::Config::default();
    let mut buf = Vec::with_capacity(1024);
    let request = loop {
        let mut chunk = [0u8; 1024];
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::Error::other("closed during the handshake"));
        }
        buf.extend_from_slice(&chunk[..n]);
        match parse_request(&buf, &config) {
            Ok(Some((request, _))) => break request,
            Ok(None) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
    };
    let hello = ClientHello::from_request(&request).map_err(std::io::Error::other)?;
    tcp.write_all(&encode_response(&hello.accept())).await
}

/// A frame as the load generator and the raw servers send it, encoded by Sockeye's frame code:
/// masked with a fixed key for client frames (masking cost is the server's concern, not ours),
/// unmasked for server frames.
pub fn encode_frame(opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    const KEY: [u8; 4] = [0x12, 0x34, 0x56, 0x78];
    let header = FrameHeader {
        fin: true,
        rsv: 0,
        opcode: OpCode::from_u8(opcode).expect("a defined opcode"),
        mask: masked.then_some(KEY),
        payload_len: payload.len() as u64,
    };
    let mut head = [0u8; MAX_HEADER_LEN];
    let n = header.encode(&mut head);
    let mut out = Vec::with_capacity(n + payload.len());
    out.extend_from_slice(&head[..n]);
    out.extend_from_slice(payload);
    if masked {
        apply_mask(&mut out[n..], KEY, 0);
    }
    out
}

/// A ~1.2 KiB JSON document: what the compressed push and the deflate memory scenario send (Node
/// ws compresses messages of 1 KiB and more by default).
pub fn json_document() -> String {
    (0..24)
        .map(|i| {
            format!(
                r#"{{"id":{i},"name":"sensor-{i}","value":{}.25,"ok":true}},"#,
                i * 3
            )
        })
        .collect()
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
