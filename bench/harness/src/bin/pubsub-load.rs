//! The pub/sub load generator: N subscriber connections and one publisher, in one thread.
//!
//! ```text
//! pubsub-load fanout ws|socketio|json ADDRS SUBS MSGS RATE SECONDS
//! ```
//!
//! ADDRS is a comma-separated list of servers (nodes): subscribers are spread over them in turn,
//! the publisher connects to the first. The publisher sends MSGS 64-byte text messages, each
//! carrying its sequence number and its send time (nanoseconds since this process's start, read
//! by the receiving subscriber on the same clock). RATE: messages per second (paced every
//! millisecond), or 0 for as fast as the servers take them: at most [`WINDOW`] messages per
//! subscriber (and [`WINDOW_DELIVERIES`] in all) in flight on average, so that no system's queues
//! grow without bound. Sending stops
//! after MSGS or SECONDS, whichever comes first; then up to [`DRAIN`] for the rest to arrive.
//!
//! Before the measured messages, warm-up messages go out every 20 ms until every subscriber has
//! received one (every node has its subscription at the backplane by then).
//!
//! Prints one JSON line: deliveries/s (deliveries ÷ time from the first measured publish to the
//! last delivery), publish→deliver latency p50/p99/max in µs (every message at up to 1,000
//! subscribers, every message of 1,000 subscribers evenly spread beyond), and the counts: every
//! subscriber must get every message once, in order (`lost`, `duplicated`, `closed`: subscribers
//! the server closed).
//!
//! `ws`: plain WebSocket text frames. `socketio`: Engine.IO v4 / Socket.IO v5 over a WebSocket
//! (`/socket.io/?EIO=4&transport=websocket`): the open packet `0{…}` is answered with `40`, the
//! connect `40{…}` awaited, pings `2` answered with `3`; the publisher emits `42["pub","…"]` and
//! subscribers receive `42["msg","…"]`. `json`: Sockeye's pub/sub protocol for web clients
//! (docs/pubsub-protocol.md, `ws pubsub_server`): each subscriber sends
//! `{"type":"subscribe","topic":"bench"}` and waits for `subscribed`; the publisher (not
//! subscribed) sends `{"type":"publish","topic":"bench","data":"…"}` and subscribers receive
//! `{"type":"message",…,"data":"…"}` (the publisher's `published` answers are drained).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye_bench::{connect_path, encode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error>;
type Result<T> = std::result::Result<T, Error>;

/// Messages per subscriber in flight, on average, in the as-fast-as-possible runs...
const WINDOW: u64 = 128;
/// ... and deliveries in flight in all, at most: what the slowest system delivers within [`DRAIN`],
/// so that what is still on its way when sending stops arrives before the count.
const WINDOW_DELIVERIES: u64 = 200_000;
/// How long deliveries may still arrive after the last publish.
const DRAIN: Duration = Duration::from_secs(10);
/// Connections opened at once.
const CONNECT_CONCURRENCY: usize = 32;
/// Payload size.
const SIZE: usize = 64;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Proto {
    Ws,
    SocketIo,
    Json,
}

/// The topic of the `json` runs.
const JSON_TOPIC: &str = "bench";

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a = |i: usize| args.get(i).cloned().ok_or("missing argument");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    let json = local.block_on(&runtime, async {
        let proto = match a(1)?.as_str() {
            "ws" => Proto::Ws,
            "socketio" => Proto::SocketIo,
            "json" => Proto::Json,
            other => return Err::<String, Error>(format!("unknown protocol {other}").into()),
        };
        match a(0)?.as_str() {
            "fanout" => {
                let addrs: Vec<String> = a(2)?.split(',').map(String::from).collect();
                fanout(
                    proto,
                    &addrs,
                    a(3)?.parse()?,
                    a(4)?.parse()?,
                    a(5)?.parse()?,
                    a(6)?.parse()?,
                )
                .await
            }
            other => Err(format!("unknown scenario {other}").into()),
        }
    })?;
    println!("{json}");
    Ok(())
}

/// What every task shares (one thread: plain cells).
struct Shared {
    start: Instant,
    subs: u64,
    /// Measured messages received, by all subscribers.
    delivered: Cell<u64>,
    /// Subscribers that have seen a warm-up message.
    warm: Cell<u64>,
    /// When the last measured message arrived.
    last_delivery: Cell<Option<Instant>>,
    /// Latency histogram of the sampled subscribers.
    histogram: RefCell<Histogram>,
    /// The publisher waits here for room in its window.
    progress: tokio::sync::Notify,
    waiting: Cell<bool>,
}

/// A log-linear histogram of nanoseconds: 32 buckets per power of two (≈3%).
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    max: u64,
}

impl Histogram {
    fn new() -> Histogram {
        Histogram {
            buckets: vec![0; 64 * 64],
            count: 0,
            max: 0,
        }
    }
    fn index(v: u64) -> usize {
        if v < 64 {
            return v as usize;
        }
        let msb = 63 - v.leading_zeros() as usize; // ≥ 6
        let shift = msb - 5;
        ((msb - 5) * 32 + ((v >> shift) as usize & 31) + 32).min(64 * 64 - 1)
    }
    fn value(i: usize) -> u64 {
        if i < 64 {
            return i as u64;
        }
        let k = (i - 32) / 32;
        let mantissa = ((i - 32) % 32 + 32) as u64;
        // The middle of the bucket.
        (mantissa << k) + ((1u64 << k) >> 1)
    }
    fn record(&mut self, v: u64, n: u64) {
        self.buckets[Self::index(v)] += n;
        self.count += n;
        self.max = self.max.max(v);
    }
    fn quantile(&self, q: f64) -> u64 {
        if self.count == 0 {
            return 0;
        }
        let target = ((self.count as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= target {
                return Self::value(i);
            }
        }
        self.max
    }
}

/// The 64-byte payload: kind ('S' measured, 'W' warm-up), sequence number and send time in hex.
fn payload(kind: u8, seq: u64, nanos: u64) -> [u8; SIZE] {
    let mut p = [b'x'; SIZE];
    p[0] = kind;
    p[1..17].copy_from_slice(format!("{seq:016x}").as_bytes());
    p[17..33].copy_from_slice(format!("{nanos:016x}").as_bytes());
    p
}

fn hex(b: &[u8]) -> Option<u64> {
    u64::from_str_radix(std::str::from_utf8(b).ok()?, 16).ok()
}

/// The masked client frame the publisher sends for one message.
fn publish_frame(proto: Proto, p: &[u8; SIZE]) -> Vec<u8> {
    match proto {
        Proto::Ws => encode_frame(1, p, true),
        Proto::SocketIo => {
            let mut text = Vec::with_capacity(SIZE + 16);
            text.extend_from_slice(b"42[\"pub\",\"");
            text.extend_from_slice(p);
            text.extend_from_slice(b"\"]");
            encode_frame(1, &text, true)
        }
        Proto::Json => {
            let mut text = Vec::with_capacity(SIZE + 64);
            text.extend_from_slice(
                format!(r#"{{"type":"publish","topic":"{JSON_TOPIC}","data":""#).as_bytes(),
            );
            text.extend_from_slice(p);
            text.extend_from_slice(b"\"}");
            encode_frame(1, &text, true)
        }
    }
}

/// A complete unmasked server frame at the start of `buf`: (opcode, payload start, payload end).
fn parse_frame(buf: &[u8]) -> Option<(u8, usize, usize)> {
    if buf.len() < 2 {
        return None;
    }
    let opcode = buf[0] & 0x0F;
    let (len, head) = match buf[1] & 0x7F {
        126 if buf.len() >= 4 => (u64::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
        127 if buf.len() >= 10 => (u64::from_be_bytes(buf[2..10].try_into().ok()?), 10),
        126 | 127 => return None,
        n => (u64::from(n), 2),
    };
    let end = head + usize::try_from(len).ok()?;
    (buf.len() >= end).then_some((opcode, head, end))
}

/// Connects and, for Socket.IO, completes the Engine.IO/Socket.IO handshake, for the JSON
/// protocol a subscriber's subscription; returns the stream and the bytes read past it.
async fn open(proto: Proto, addr: &str, subscriber: bool) -> Result<(TcpStream, Vec<u8>)> {
    match proto {
        Proto::Ws => Ok(connect_path(addr, "/").await?),
        Proto::Json if !subscriber => Ok(connect_path(addr, "/").await?),
        Proto::Json => {
            let (mut tcp, mut buf) = connect_path(addr, "/").await?;
            let subscribe = format!(r#"{{"type":"subscribe","topic":"{JSON_TOPIC}"}}"#);
            tcp.write_all(&encode_frame(1, subscribe.as_bytes(), true))
                .await?;
            loop {
                if let Some((opcode, start, end)) = parse_frame(&buf) {
                    let text = buf[start..end].to_vec();
                    buf.drain(..end);
                    if opcode == 1 && text.starts_with(br#"{"type":"subscribed""#) {
                        return Ok((tcp, buf));
                    }
                    return Err(
                        format!("expected subscribed, got {:?}", String::from_utf8_lossy(&text)).into(),
                    );
                }
                let n = tokio::time::timeout(Duration::from_secs(10), tcp.read_buf(&mut buf)).await??;
                if n == 0 {
                    return Err("closed before subscribed".into());
                }
            }
        }
        Proto::SocketIo => {
            let (mut tcp, mut buf) = connect_path(addr, "/socket.io/?EIO=4&transport=websocket").await?;
            let mut opened = false;
            loop {
                while let Some((opcode, start, end)) = parse_frame(&buf) {
                    let text = buf[start..end].to_vec();
                    buf.drain(..end);
                    if opcode != 1 {
                        continue;
                    }
                    if text.starts_with(b"0{") && !opened {
                        // Engine.IO open: connect to the main namespace.
                        tcp.write_all(&encode_frame(1, b"40", true)).await?;
                        opened = true;
                    } else if text.starts_with(b"40") && opened {
                        return Ok((tcp, buf));
                    } else if text == b"2" {
                        tcp.write_all(&encode_frame(1, b"3", true)).await?;
                    } else {
                        return Err(format!(
                            "unexpected Socket.IO packet {:?}",
                            String::from_utf8_lossy(&text)
                        )
                        .into());
                    }
                }
                let n = tokio::time::timeout(Duration::from_secs(10), tcp.read_buf(&mut buf)).await??;
                if n == 0 {
                    return Err("closed during the Socket.IO handshake".into());
                }
            }
        }
    }
}

/// The 64-byte message inside a received text frame's payload.
fn message_of(proto: Proto, text: &[u8]) -> Option<&[u8]> {
    match proto {
        Proto::Ws => (text.len() == SIZE).then_some(text),
        Proto::SocketIo => {
            let rest = text.strip_prefix(b"42[\"msg\",\"")?;
            (rest.len() == SIZE + 2).then(|| &rest[..SIZE])
        }
        // `…,"data":"<64 bytes>"}`: the data is the frame's last field.
        Proto::Json => {
            let rest = text.strip_suffix(b"\"}")?;
            let start = rest.len().checked_sub(SIZE)?;
            rest[..start].ends_with(b"\"data\":\"").then(|| &rest[start..])
        }
    }
}

/// One subscriber's counts, read by the main task once the run is over.
#[derive(Default)]
struct Counts {
    /// The next measured sequence number expected.
    next: Cell<u64>,
    lost: Cell<u64>,
    duplicated: Cell<u64>,
    /// The server closed the connection.
    closed: Cell<bool>,
}

/// One subscriber: counts what it receives, checks the order, records latencies if `sampled`.
/// Runs until the server closes the connection or the main task aborts it.
async fn subscriber(
    proto: Proto,
    mut tcp: TcpStream,
    mut buf: Vec<u8>,
    shared: Rc<Shared>,
    counts: Rc<Counts>,
    sampled: bool,
) {
    let mut warm = false;
    let mut local: Vec<u64> = Vec::new(); // latencies of one read, recorded together
    buf.reserve(64 << 10);
    loop {
        let mut got = 0u64;
        let now = shared.start.elapsed().as_nanos() as u64;
        let mut next = counts.next.get();
        while let Some((opcode, start, end)) = parse_frame(&buf) {
            match opcode {
                1 => {
                    if proto == Proto::SocketIo && &buf[start..end] == b"2" {
                        let _ = tcp.write_all(&encode_frame(1, b"3", true)).await;
                    } else if let Some(m) = message_of(proto, &buf[start..end]) {
                        if m[0] == b'W' {
                            if !warm {
                                warm = true;
                                shared.warm.set(shared.warm.get() + 1);
                            }
                        } else if let (Some(seq), Some(sent)) = (hex(&m[1..17]), hex(&m[17..33])) {
                            if seq == next {
                                next += 1;
                            } else if seq > next {
                                counts.lost.set(counts.lost.get() + seq - next);
                                next = seq + 1;
                            } else {
                                counts.duplicated.set(counts.duplicated.get() + 1);
                            }
                            got += 1;
                            if sampled {
                                local.push(now.saturating_sub(sent));
                            }
                        }
                    }
                }
                8 => {
                    counts.closed.set(true);
                    return;
                }
                9 => {
                    let ping = buf[start..end].to_vec();
                    let _ = tcp.write_all(&encode_frame(10, &ping, true)).await;
                }
                _ => {}
            }
            buf.drain(..end);
        }
        counts.next.set(next);
        if got > 0 {
            shared.delivered.set(shared.delivered.get() + got);
            shared.last_delivery.set(Some(Instant::now()));
            if !local.is_empty() {
                let mut h = shared.histogram.borrow_mut();
                for v in local.drain(..) {
                    h.record(v, 1);
                }
            }
            if shared.waiting.get() {
                shared.progress.notify_one();
            }
        }
        if buf.capacity() - buf.len() < 16 << 10 {
            buf.reserve(64 << 10);
        }
        match tcp.read_buf(&mut buf).await {
            Ok(0) | Err(_) => {
                counts.closed.set(true);
                return;
            }
            Ok(_) => {}
        }
    }
}

async fn fanout(
    proto: Proto,
    addrs: &[String],
    subs: u64,
    msgs: u64,
    rate: u64,
    seconds: f64,
) -> Result<String> {
    let shared = Rc::new(Shared {
        start: Instant::now(),
        subs,
        delivered: Cell::new(0),
        warm: Cell::new(0),
        last_delivery: Cell::new(None),
        histogram: RefCell::new(Histogram::new()),
        progress: tokio::sync::Notify::new(),
        waiting: Cell::new(false),
    });
    // Connect every subscriber (a few at a time), spread over the nodes.
    let connect_started = Instant::now();
    let opened: Vec<Result<(TcpStream, Vec<u8>)>> = futures_util::stream::iter(0..subs)
        .map(|i| {
            let addr = addrs[i as usize % addrs.len()].clone();
            async move { open(proto, &addr, true).await }
        })
        .buffered(CONNECT_CONCURRENCY)
        .collect()
        .await;
    let step = (subs / 1000).max(1);
    let mut tasks = Vec::with_capacity(subs as usize);
    let mut counts: Vec<Rc<Counts>> = Vec::with_capacity(subs as usize);
    for (i, r) in opened.into_iter().enumerate() {
        let (tcp, buf) = r.map_err(|e| format!("subscriber {i}: {e}"))?;
        let sampled = (i as u64).is_multiple_of(step);
        let c = Rc::new(Counts::default());
        tasks.push(tokio::task::spawn_local(subscriber(
            proto,
            tcp,
            buf,
            Rc::clone(&shared),
            Rc::clone(&c),
            sampled,
        )));
        counts.push(c);
    }
    let connect_secs = connect_started.elapsed().as_secs_f64();
    let (tcp, leftover) = open(proto, &addrs[0], false).await?;
    let (mut reader, mut writer) = tcp.into_split();
    // The publisher's own socket: drained, and Socket.IO pings answered through `pong`.
    let pong = Rc::new(Cell::new(false));
    let drain = {
        let pong = Rc::clone(&pong);
        tokio::task::spawn_local(async move {
            let mut buf = leftover;
            loop {
                while let Some((opcode, start, end)) = parse_frame(&buf) {
                    if opcode == 1 && &buf[start..end] == b"2" {
                        pong.set(true);
                    }
                    buf.drain(..end);
                }
                buf.reserve(16 << 10);
                match reader.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
    };
    let pong_frame = encode_frame(1, b"3", true);

    // Warm-up: until every subscriber has seen a message.
    let warm_deadline = Instant::now() + Duration::from_secs(30);
    while shared.warm.get() < subs {
        if Instant::now() > warm_deadline {
            return Err(format!(
                "warm-up: only {} of {subs} subscribers receive anything",
                shared.warm.get()
            )
            .into());
        }
        writer
            .write_all(&publish_frame(proto, &payload(b'W', 0, 0)))
            .await?;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Let the last warm-up messages go through everywhere.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let window = WINDOW.min((WINDOW_DELIVERIES / subs).max(1));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(seconds);
    let mut sent = 0u64;
    let mut out = Vec::with_capacity(128 * 80);
    let mut ticker = tokio::time::interval(Duration::from_millis(1));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    while sent < msgs && Instant::now() < deadline {
        if pong.replace(false) {
            writer.write_all(&pong_frame).await?;
        }
        let allowed = if rate > 0 {
            ticker.tick().await;
            // Due by now at the target rate.
            ((started.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(msgs)
        } else {
            (shared.delivered.get() / shared.subs + window).min(msgs)
        };
        if allowed <= sent {
            if rate == 0 {
                shared.waiting.set(true);
                let _ = tokio::time::timeout(Duration::from_millis(5), shared.progress.notified()).await;
                shared.waiting.set(false);
            }
            continue;
        }
        // At most 64 messages per write, each with its own time of sending.
        let upto = allowed.min(sent + 64);
        out.clear();
        let nanos = shared.start.elapsed().as_nanos() as u64;
        for seq in sent..upto {
            out.extend_from_slice(&publish_frame(proto, &payload(b'S', seq, nanos)));
        }
        writer.write_all(&out).await?;
        sent = upto;
    }
    let send_secs = started.elapsed().as_secs_f64();
    let expected = sent * subs;
    // Until every subscriber has everything (or was closed), or the drain time is over.
    let drain_deadline = Instant::now() + DRAIN;
    while Instant::now() < drain_deadline && !counts.iter().all(|c| c.closed.get() || c.next.get() >= sent) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for t in &tasks {
        t.abort();
    }
    let (mut lost, mut duplicated, mut closed) = (0u64, 0u64, 0u64);
    for c in &counts {
        lost += c.lost.get() + sent.saturating_sub(c.next.get());
        duplicated += c.duplicated.get();
        closed += u64::from(c.closed.get());
    }
    drain.abort();
    let delivered = shared.delivered.get();
    let last = shared.last_delivery.get().unwrap_or(started);
    let secs = last.saturating_duration_since(started).as_secs_f64().max(1e-9);
    let h = shared.histogram.borrow();
    let us = |v: u64| v as f64 / 1000.0;
    Ok(format!(
        concat!(
            r#"{{"deliveries_per_s": {:.0}, "deliveries": {}, "expected": {}, "lost": {}, "duplicated": {}, "#,
            r#""closed": {}, "sent": {}, "publish_rate": {:.0}, "seconds": {:.3}, "p50_us": {:.1}, "#,
            r#""p99_us": {:.1}, "max_us": {:.1}, "samples": {}, "subscribers": {}, "connect_s": {:.2}}}"#
        ),
        delivered as f64 / secs,
        delivered,
        expected,
        lost,
        duplicated,
        closed,
        sent,
        sent as f64 / send_secs.max(1e-9),
        secs,
        us(h.quantile(0.5)),
        us(h.quantile(0.99)),
        us(h.max),
        h.count,
        subs,
        connect_secs,
    ))
}
