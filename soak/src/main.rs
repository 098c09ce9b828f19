//! `sockeye-soak`: a bounded soak test of Sockeye over loopback.
//!
//! ```text
//! sockeye-soak server ADDR
//! sockeye-soak client URL CONNECTIONS SECONDS [SOURCES]
//! ```
//!
//! The server echoes every message after checking its checksum, and on SIGTERM or Ctrl-C shuts
//! down gracefully and prints its totals. The client keeps CONNECTIONS connections open for
//! SECONDS (spread over SOURCES loopback source addresses 127.0.0.1, 127.0.0.2, ...), each sending
//! messages of random sizes (some fragmented, some text, some binary), pings, and now and then
//! closing and reconnecting; every echo is compared with what was sent. A fifth of the
//! connections negotiate permessage-deflate. Both print one `key=value` line of totals; the
//! client exits non-zero if anything was lost, corrupted or failed.

use std::hash::{Hash, Hasher};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sockeye::proto::extension::deflate::DeflateConfig;
use sockeye::{CloseCode, CloseFrame, Config, DataKind, Error, Message, Server};
use tokio::net::TcpSocket;
use tokio::time::Instant;

/// A message is `connection sequence payload checksum`: the numbers as 16 hex digits each (ASCII,
/// so that text messages stay UTF-8), the checksum over everything before it.
const OVERHEAD: usize = 48;

fn checksum(bytes: &[u8]) -> u64 {
    // SipHash with fixed keys: the same in both processes.
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn verify(message: &[u8]) -> bool {
    message.len() >= OVERHEAD && {
        let (body, sum) = message.split_at(message.len() - 16);
        std::str::from_utf8(sum)
            .ok()
            .and_then(|hex| u64::from_str_radix(hex, 16).ok())
            == Some(checksum(body))
    }
}

#[derive(Default)]
struct Totals {
    connections: AtomicU64,
    messages: AtomicU64,
    bytes: AtomicU64,
    corrupted: AtomicU64,
    lost: AtomicU64,
    pings: AtomicU64,
    reconnects: AtomicU64,
    errors: AtomicU64,
}

impl Totals {
    fn line(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "connections={} messages={} bytes={} corrupted={} lost={} pings={} reconnects={} errors={}",
            g(&self.connections),
            g(&self.messages),
            g(&self.bytes),
            g(&self.corrupted),
            g(&self.lost),
            g(&self.pings),
            g(&self.reconnects),
            g(&self.errors)
        )
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["server", addr] => runtime.block_on(server(addr)),
        ["client", url, connections, seconds] => {
            runtime.block_on(client(url, connections.parse()?, seconds.parse()?, 1))
        }
        ["client", url, connections, seconds, sources] => runtime.block_on(client(
            url,
            connections.parse()?,
            seconds.parse()?,
            sources.parse()?,
        )),
        _ => Err("usage: sockeye-soak server ADDR | client URL CONNECTIONS SECONDS [SOURCES]".into()),
    }
}

/// Generous deadlines: the soak judges loss and corruption on a machine it loads fully, not
/// latency (a closing handshake can wait behind thousands of busy connections).
fn config() -> Config {
    Config::builder()
        .max_connections(100_000)
        .handshake_timeout(Duration::from_secs(30))
        .close_timeout(Duration::from_secs(15))
        .build()
}

async fn server(addr: &str) -> Result<(), Box<dyn std::error::Error>> {
    let server = Server::bind(addr, config()).await?;
    println!("listening on {}", server.local_addr()?);
    let shutdown = server.shutdown_handle();
    let totals = Arc::new(Totals::default());
    let counted = Arc::clone(&totals);
    let serving = tokio::spawn(server.serve(move |mut ws, _| {
        let totals = Arc::clone(&counted);
        async move {
            totals.connections.fetch_add(1, Ordering::Relaxed);
            while let Some(item) = ws.next().await {
                match item {
                    Ok(m) if m.is_data() => {
                        let ok = verify(m.as_payload());
                        let counter = if ok { &totals.messages } else { &totals.corrupted };
                        counter.fetch_add(1, Ordering::Relaxed);
                        totals
                            .bytes
                            .fetch_add(m.as_payload().len() as u64, Ordering::Relaxed);
                        if ws.feed(m).await.is_err() {
                            totals.errors.fetch_add(1, Ordering::Relaxed);
                            break;
                        }
                    }
                    Ok(Message::Ping(_)) => {
                        totals.pings.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(_) => {}
                    Err(_) => {
                        totals.errors.fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                }
            }
        }
    }));
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    shutdown.shutdown();
    serving.await??;
    println!("server {}", totals.line());
    Ok(())
}

async fn client(
    url: &str,
    connections: usize,
    seconds: u64,
    sources: u8,
) -> Result<(), Box<dyn std::error::Error>> {
    let target: SocketAddr = url.trim_start_matches("ws://").trim_end_matches('/').parse()?;
    let totals = Arc::new(Totals::default());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    // Connect gradually: at most this many handshakes at once.
    let connecting = Arc::new(tokio::sync::Semaphore::new(128));
    let mut tasks = tokio::task::JoinSet::new();
    for id in 0..connections as u64 {
        let totals = Arc::clone(&totals);
        let connecting = Arc::clone(&connecting);
        let source = IpAddr::V4(Ipv4Addr::new(
            127,
            0,
            0,
            1 + (id % u64::from(sources.max(1))) as u8,
        ));
        let url = url.to_string();
        tasks.spawn(async move {
            let compress = id % 5 == 0;
            let mut generation = 0u64;
            while Instant::now() < deadline {
                let permit = connecting.acquire().await;
                let ws = match connect(&url, target, source, compress).await {
                    Ok(ws) => ws,
                    Err(e) => {
                        eprintln!("connection {id}: connect failed: {e}");
                        totals.errors.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                };
                drop(permit);
                totals.connections.fetch_add(1, Ordering::Relaxed);
                if generation > 0 {
                    totals.reconnects.fetch_add(1, Ordering::Relaxed);
                }
                if let Err(e) = converse(ws, (id << 20) | generation, deadline, &totals).await {
                    eprintln!("connection {id}: {e}");
                    totals.errors.fetch_add(1, Ordering::Relaxed);
                }
                generation += 1;
            }
        });
    }
    let started = Instant::now();
    let mut report = tokio::time::interval(Duration::from_secs(30));
    report.tick().await;
    loop {
        tokio::select! {
            next = tasks.join_next() => {
                match next {
                    Some(Err(e)) => return Err(e.into()),
                    Some(Ok(())) => {}
                    None => break,
                }
            }
            _ = report.tick() => println!("t={}s client {}", started.elapsed().as_secs(), totals.line()),
        }
    }
    let line = totals.line();
    println!("client {line}");
    let bad = |a: &AtomicU64| a.load(Ordering::Relaxed) > 0;
    if bad(&totals.corrupted) || bad(&totals.lost) || bad(&totals.errors) {
        return Err(format!("soak failed: {line}").into());
    }
    Ok(())
}

async fn connect(
    url: &str,
    target: SocketAddr,
    source: IpAddr,
    compress: bool,
) -> Result<sockeye::WebSocket<tokio::net::TcpStream>, Error> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    let stream = socket.connect(target).await?;
    stream.set_nodelay(true)?;
    let deflate = compress.then(|| {
        DeflateConfig::default()
            .server_no_context_takeover(true)
            .client_no_context_takeover(true)
    });
    let config = config().to_builder().deflate(deflate).build();
    let (ws, _) = sockeye::client_handshake(stream, url, &config).await?;
    Ok(ws)
}

/// A random message for `stream`, number `seq`: mostly small, sometimes up to 64 KiB.
fn make_message(rng: &mut impl Rng, stream: u64, seq: u64) -> (bool, Bytes) {
    let size = match rng.random_range(0..100) {
        0..70 => rng.random_range(0..256),
        70..95 => rng.random_range(256..8192),
        _ => rng.random_range(8192..65536),
    };
    let text = rng.random_bool(0.5);
    let mut body = Vec::with_capacity(size + OVERHEAD);
    body.extend_from_slice(format!("{stream:016x}{seq:016x}").as_bytes());
    if text {
        // Compressible ASCII, so that deflate has work.
        body.extend((0..size).map(|i| b"sockeye soak "[i % 13] ^ (rng.random_bool(0.05) as u8)));
    } else {
        body.extend((0..size).map(|_| rng.random::<u8>()));
    }
    let sum = checksum(&body);
    body.extend_from_slice(format!("{sum:016x}").as_bytes());
    (text, Bytes::from(body))
}

/// One connection's life: rounds of 1–4 messages (sometimes fragmented) and an occasional ping,
/// every echo checked, until the deadline or a random goodbye.
async fn converse(
    mut ws: sockeye::WebSocket<tokio::net::TcpStream>,
    stream: u64,
    deadline: Instant,
    totals: &Totals,
) -> Result<(), Error> {
    let mut rng = StdRng::from_os_rng();
    let mut seq = 0u64;
    let mut in_flight = std::collections::VecDeque::new();
    while Instant::now() < deadline && !rng.random_bool(0.005) {
        for _ in 0..rng.random_range(1..=4) {
            let (text, body) = make_message(&mut rng, stream, seq);
            seq += 1;
            let kind = if text { DataKind::Text } else { DataKind::Binary };
            if rng.random_bool(0.1) && body.len() > 3 {
                // Fragmented at random points.
                let (a, b) = (rng.random_range(1..body.len()), rng.random_range(1..body.len()));
                let (a, b) = (a.min(b), a.max(b));
                ws.send_fragment(kind, body.slice(..a), false).await?;
                ws.send_fragment(kind, body.slice(a..b), false).await?;
                ws.send_fragment(kind, body.slice(b..), true).await?;
            } else if text {
                let message = Message::Text(
                    body.clone()
                        .try_into()
                        .map_err(|_| Error::from(sockeye::ProtocolError::InvalidInput("text")))?,
                );
                ws.feed(message).await?;
            } else {
                ws.feed(Message::Binary(body.clone())).await?;
            }
            in_flight.push_back(body);
        }
        if rng.random_bool(0.05) {
            ws.feed(Message::Ping(Bytes::from_static(b"soak"))).await?;
            totals.pings.fetch_add(1, Ordering::Relaxed);
        }
        ws.flush().await?;
        while !in_flight.is_empty() {
            match ws.recv().await {
                Some(Ok(m)) if m.is_data() => {
                    let want = in_flight.pop_front().unwrap_or_default();
                    // Byte-for-byte against what was sent (the server checked the checksum).
                    if m.as_payload() == &want[..] {
                        totals.messages.fetch_add(1, Ordering::Relaxed);
                        totals.bytes.fetch_add(want.len() as u64, Ordering::Relaxed);
                    } else {
                        totals.corrupted.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    totals.lost.fetch_add(in_flight.len() as u64, Ordering::Relaxed);
                    return Err(e);
                }
                None => {
                    totals.lost.fetch_add(in_flight.len() as u64, Ordering::Relaxed);
                    return Err(sockeye::ProtocolError::Closed.into());
                }
            }
        }
        // About one round per second per connection.
        let pause = Duration::from_millis(rng.random_range(500..1500));
        tokio::time::sleep(pause.min(deadline.saturating_duration_since(Instant::now()))).await;
    }
    match ws
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "soak done")))
        .await?
    {
        Some(reply) if reply.code == CloseCode::NORMAL => Ok(()),
        other => Err(Error::Io(std::io::Error::other(format!(
            "unexpected close reply {other:?}"
        )))),
    }
}
