//! The load generator: pre-encoded masked frames, large reads, every echo compared byte for byte,
//! one thread — so that server-side figures measure the server. Prints one JSON line per run.
//!
//! ```text
//! loadgen push ADDR N [--raw]                          msgs/s received from a pushing server
//! loadgen rtt ADDR COUNT SIZE text|binary [SECONDS] [--raw]
//!                                                      sequential echoes: mean/p50/p99 µs (at
//!                                                      most COUNT, and for at most SECONDS)
//! loadgen connect ADDR COUNT [--raw [--exchange]]      connect + handshake + close, sequentially
//! loadgen connect-parallel ADDR SECONDS CONCURRENCY [--raw [--exchange]]
//! loadgen echo-many ADDR CONNS INFLIGHT SIZE SECONDS [--raw] [--ready]
//!                                                      (--ready: "ready" on stderr once all
//!                                                      connections are up: the background load
//!                                                      of the round trips under load)
//! loadgen large ADDR SIZE REPS [--raw]                 one big binary echo at a time: MB/s
//! loadgen large-streamed ADDR SIZE REPS [--raw]        the same message, its echo checked as it
//!                                                      arrives, in one frame or in fragments
//! loadgen idle ADDR CONNS SECONDS                      hold idle connections (for memory)
//! ```
//! The connect scenarios, rtt, echo-many, large, large-streamed and `idle` read `BENCH_TLS=DIR`
//! (wss://); the connect scenarios, rtt and `idle` also `BENCH_NODELAY=0` and `BENCH_DEFLATE=1` (idle:
//! one compressed message per connection first) from the environment.
//! `--raw`: the server is the raw TCP baseline (no handshake; it echoes our masked bytes as they are;
//! for the connect scenarios, run it in `connect` mode, where it closes after echoing a close frame).
//! `--exchange` (connect, with `--raw`): one request and its echo before the close, as a WebSocket
//! connect has its upgrade: the floor of a connect that waits for the server twice.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::Poll;
use std::time::{Duration, Instant};

use sockeye_bench::{Io, Link, connect, encode_frame, json_document, stats};
use sockeye_proto::frame::FrameHeader;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let raw = args.iter().any(|a| a == "--raw");
    let ready = args.iter().any(|a| a == "--ready");
    let exchange = args.iter().any(|a| a == "--exchange");
    args.retain(|a| a != "--raw" && a != "--ready" && a != "--exchange");
    let connection = match (raw, exchange) {
        (false, _) => Connection::WebSocket,
        (true, false) => Connection::Raw,
        (true, true) => Connection::RawExchange,
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let a = |i: usize| args.get(i).cloned().ok_or("missing argument");
    let json = runtime.block_on(async {
        Ok::<_, Error>(match a(0)?.as_str() {
            "push" => push(&a(1)?, a(2)?.parse()?, raw).await?,
            "rtt" => {
                let seconds = args.get(5).map_or(Ok(f64::INFINITY), |s| s.parse())?;
                rtt(
                    &a(1)?,
                    a(2)?.parse()?,
                    a(3)?.parse()?,
                    a(4)? == "text",
                    seconds,
                    raw,
                )
                .await?
            }
            "connect" => connect_sequential(&a(1)?, a(2)?.parse()?, connection).await?,
            "connect-parallel" => {
                connect_parallel(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, connection).await?
            }
            "echo-many" => {
                echo_many(
                    &a(1)?,
                    a(2)?.parse()?,
                    a(3)?.parse()?,
                    a(4)?.parse()?,
                    a(5)?.parse()?,
                    raw,
                    ready,
                )
                .await?
            }
            "large" => large(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, raw, false).await?,
            "large-streamed" => large(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, raw, true).await?,
            "idle" => idle(&a(1)?, a(2)?.parse()?, a(3)?.parse()?).await?,
            other => return Err(format!("unknown scenario {other}").into()),
        })
    })?;
    println!("{json}");
    Ok(())
}

/// What an echo of `frame` looks like: the same bytes from the raw baseline, else the unmasked
/// server frame.
fn echo_of(opcode: u8, payload: &[u8], raw: bool) -> (Vec<u8>, Vec<u8>) {
    let sent = encode_frame(opcode, payload, true);
    let echo = if raw {
        sent.clone()
    } else {
        encode_frame(opcode, payload, false)
    };
    (sent, echo)
}

fn pattern(size: usize, text: bool) -> Vec<u8> {
    (0..size)
        .map(|i| {
            if text {
                b'a' + (i % 26) as u8
            } else {
                (i * 7 % 256) as u8
            }
        })
        .collect()
}

/// Reads into `buf` until it holds at least `want` bytes.
async fn read_at_least<S: AsyncRead + Unpin>(tcp: &mut S, buf: &mut Vec<u8>, want: usize) -> Result<()> {
    while buf.len() < want {
        if buf.capacity() - buf.len() < 64 << 10 {
            buf.reserve(256 << 10);
        }
        if tcp.read_buf(buf).await? == 0 {
            return Err("the server closed the connection".into());
        }
    }
    Ok(())
}

async fn push(addr: &str, n: u64, raw: bool) -> Result<String> {
    // The clock starts before connecting: the server pushes right after the handshake, and the
    // kernel may already hold megabytes of frames by the time we read.
    let started = Instant::now();
    let (mut tcp, mut buf) = connect(addr, raw).await?;
    let frame = encode_frame(1, b"yo", false);
    let want = frame.len() * n as usize;
    let mut seen = 0usize;
    buf.reserve(1 << 20);
    while seen < want {
        if buf.capacity() - buf.len() < 256 << 10 {
            buf.reserve(1 << 20);
        }
        if tcp.read_buf(&mut buf).await? == 0 {
            return Err(format!("closed after {} messages", seen / frame.len()).into());
        }
        // Every byte must be the next byte of "81 02 79 6f" repeated (the close frame follows).
        let take = buf.len().min(want - seen) / frame.len() * frame.len();
        for chunk in buf[..take].chunks_exact(frame.len()) {
            if chunk != frame {
                return Err("a pushed frame differs".into());
            }
        }
        seen += take;
        buf.drain(..take);
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(format!(
        r#"{{"msgs_per_s": {:.0}, "messages": {n}, "seconds": {secs:.3}}}"#,
        n as f64 / secs
    ))
}

async fn rtt(addr: &str, count: usize, size: usize, text: bool, seconds: f64, raw: bool) -> Result<String> {
    let (mut tcp, mut buf) = Link::from_env()?.open_buffered(addr, raw).await?;
    let (sent, echo) = echo_of(if text { 1 } else { 2 }, &pattern(size, text), raw);
    let mut samples = Vec::with_capacity(count);
    // No deadline without SECONDS (infinite).
    let deadline = Duration::try_from_secs_f64(seconds)
        .ok()
        .and_then(|d| Instant::now().checked_add(d));
    for _ in 0..count {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let t = Instant::now();
        tcp.write_all(&sent).await?;
        read_at_least(&mut tcp, &mut buf, echo.len()).await?;
        samples.push(t.elapsed());
        if buf[..echo.len()] != echo[..] {
            return Err("an echo differs".into());
        }
        buf.drain(..echo.len());
    }
    let n = samples.len();
    let (mean, p50, p99) = stats(&mut samples);
    Ok(format!(
        r#"{{"mean_us": {mean:.1}, "p50_us": {p50:.1}, "p99_us": {p99:.1}, "round_trips": {n}}}"#
    ))
}

/// What one connect of the connect scenarios does.
#[derive(Clone, Copy)]
enum Connection {
    /// Upgrade, then the closing handshake (the server closes TCP first).
    WebSocket,
    /// TCP connect and close (a close frame, echoed by the raw server, which closes first): the
    /// baseline.
    Raw,
    /// TCP connect, one 64-byte request and its echo from the raw server, then close: the same
    /// two waits for the server as a WebSocket connect (upgrade, close), without HTTP or frames.
    RawExchange,
}

/// One connection's life: connect, handshake (or raw exchange), close frame, wait for the
/// server's close/EOF.
async fn one_connection(link: &Link, addr: &str, connection: Connection) -> Result<()> {
    let mut stream = link
        .open(addr, !matches!(connection, Connection::WebSocket))
        .await?;
    if let Connection::RawExchange = connection {
        let request = [7u8; 64];
        stream.write_all(&request).await?;
        let mut echo = [0u8; 64];
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut echo)).await??;
        if echo != request {
            return Err("the raw server's echo differs from the request".into());
        }
    }
    // A close frame; the raw server in `connect` mode echoes it and closes first, as a WebSocket
    // server does (the side that closes first holds TIME_WAIT: a baseline whose client closed
    // first would run out of ephemeral ports in the parallel rows, not measure TCP).
    stream
        .write_all(&encode_frame(8, &1000u16.to_be_bytes(), true))
        .await?;
    let mut sink = [0u8; 256];
    // Until the server closes (it answers the close frame and closes TCP first, §7.1.1). Over TLS a
    // server may close without a close_notify alert: that is an end too.
    loop {
        match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut sink)).await? {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

async fn connect_sequential(addr: &str, count: usize, connection: Connection) -> Result<String> {
    let link = Link::from_env()?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        one_connection(&link, addr, connection).await?;
        samples.push(t.elapsed());
    }
    let (mean, p50, p99) = stats(&mut samples);
    Ok(format!(
        r#"{{"mean_us": {mean:.1}, "p50_us": {p50:.1}, "p99_us": {p99:.1}}}"#
    ))
}

async fn connect_parallel(
    addr: &str,
    seconds: u64,
    concurrency: usize,
    connection: Connection,
) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let link = Link::from_env()?;
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let addr = addr.to_string();
        let link = link.clone();
        set.spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                if one_connection(&link, &addr, connection).await.is_err() {
                    return Err(());
                }
                done += 1;
            }
            Ok(done)
        });
    }
    let (mut total, mut failed) = (0u64, 0u64);
    while let Some(r) = set.join_next().await {
        match r? {
            Ok(n) => total += n,
            Err(()) => failed += 1,
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(format!(
        r#"{{"conns_per_s": {:.0}, "connections": {total}, "failed_loops": {failed}}}"#,
        total as f64 / secs
    ))
}

async fn echo_many(
    addr: &str,
    conns: usize,
    inflight: usize,
    size: usize,
    seconds: u64,
    raw: bool,
    ready: bool,
) -> Result<String> {
    let link = Link::from_env()?;
    if link.is_tls() {
        let mut streams = Vec::with_capacity(conns);
        for _ in 0..conns {
            streams.push(link.open_buffered(addr, raw).await?);
        }
        echo_many_on(streams, inflight, size, seconds, raw, ready).await
    } else {
        let mut streams = Vec::with_capacity(conns);
        for _ in 0..conns {
            streams.push(connect(addr, raw).await?);
        }
        echo_many_on(streams, inflight, size, seconds, raw, ready).await
    }
}

async fn echo_many_on<S: Io + 'static>(
    streams: Vec<(S, Vec<u8>)>,
    inflight: usize,
    size: usize,
    seconds: u64,
    raw: bool,
    ready: bool,
) -> Result<String> {
    let (sent, echo) = echo_of(2, &pattern(size, false), raw);
    let mut set = tokio::task::JoinSet::new();
    if ready {
        eprintln!("ready");
    }
    // The clock starts once every connection is up.
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    for (mut tcp, mut buf) in streams {
        let (sent, echo) = (sent.clone(), echo.clone());
        set.spawn(async move {
            let mut out = Vec::with_capacity(sent.len() * inflight);
            let mut times = VecDeque::with_capacity(inflight);
            let mut samples = Vec::new();
            let mut done = 0u64;
            for _ in 0..inflight {
                out.extend_from_slice(&sent);
                times.push_back(Instant::now());
            }
            tcp.write_all(&out).await?;
            while Instant::now() < deadline {
                read_at_least(&mut tcp, &mut buf, echo.len()).await?;
                let whole = buf.len() / echo.len();
                out.clear();
                let now = Instant::now();
                for chunk in buf[..whole * echo.len()].chunks_exact(echo.len()) {
                    if chunk != echo {
                        return Err::<_, Error>("an echo differs".into());
                    }
                    if let Some(t) = times.pop_front() {
                        samples.push(now - t);
                    }
                    out.extend_from_slice(&sent);
                    times.push_back(now);
                }
                buf.drain(..whole * echo.len());
                done += whole as u64;
                tcp.write_all(&out).await?;
            }
            Ok((done, samples))
        });
    }
    let (mut total, mut all) = (0u64, Vec::new());
    while let Some(r) = set.join_next().await {
        let (done, samples) = r??;
        total += done;
        all.extend(samples);
    }
    let secs = started.elapsed().as_secs_f64();
    let (_, p50, p99) = stats(&mut all);
    Ok(format!(
        r#"{{"msgs_per_s": {:.0}, "messages": {total}, "p50_us": {p50:.1}, "p99_us": {p99:.1}}}"#,
        total as f64 / secs
    ))
}

async fn large(addr: &str, size: usize, reps: usize, raw: bool, streamed: bool) -> Result<String> {
    let link = Link::from_env()?;
    if link.is_tls() {
        let (stream, buf) = link.open_buffered(addr, raw).await?;
        large_on(stream, buf, size, reps, raw, streamed).await
    } else {
        let (tcp, buf) = connect(addr, raw).await?;
        large_on(tcp, buf, size, reps, raw, streamed).await
    }
}

/// `reps` echoes of one `size`-byte binary message, one at a time, written in one frame while the
/// echo is read. Whole (`streamed` false): the echo is gathered and compared once complete, and
/// must be one frame. Streamed: each read is checked and dropped at once, and the echo may come in
/// fragments (the server forwards pieces as they arrive); what the raw baseline returns, our
/// own masked frame, is checked as it arrives all the same.
async fn large_on<S: AsyncRead + AsyncWrite + Unpin>(
    mut tcp: S,
    mut buf: Vec<u8>,
    size: usize,
    reps: usize,
    raw: bool,
    streamed: bool,
) -> Result<String> {
    let payload = pattern(size, false);
    let (sent, echo) = echo_of(2, &payload, raw);
    let started = Instant::now();
    let mut frames = 0usize;
    for _ in 0..reps {
        if streamed {
            let mut check = if raw {
                StreamCheck::Bytes {
                    expected: &sent,
                    at: 0,
                }
            } else {
                StreamCheck::Frames(FrameCheck::new(&payload))
            };
            write_while_reading(&sent, &mut tcp, &mut buf, |buf| check.consume(buf)).await?;
            if let StreamCheck::Frames(f) = &check {
                frames += f.frames;
            }
        } else {
            let want = echo.len();
            write_while_reading(&sent, &mut tcp, &mut buf, |buf| Ok(buf.len() >= want)).await?;
            if buf[..echo.len()] != echo[..] {
                return Err("an echo differs".into());
            }
            buf.drain(..echo.len());
        }
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(format!(
        r#"{{"mb_per_s": {:.1}, "frames_per_echo": {:.1}}}"#,
        (size * reps) as f64 / secs / 1e6,
        if streamed && !raw {
            frames as f64 / reps as f64
        } else {
            1.0
        }
    ))
}

/// Writes `data` while reading what comes back (a big echo would deadlock otherwise), handing
/// `buf` to `consume` after each read until it says the echo is complete.
async fn write_while_reading<S: AsyncRead + AsyncWrite + Unpin>(
    data: &[u8],
    tcp: &mut S,
    buf: &mut Vec<u8>,
    mut consume: impl FnMut(&mut Vec<u8>) -> Result<bool>,
) -> Result<()> {
    let (mut written, mut flushed, mut done) = (0, false, consume(buf)?);
    poll_fn(|cx| {
        while written < data.len() {
            match Pin::new(&mut *tcp).poll_write(cx, &data[written..]) {
                Poll::Ready(Ok(0)) => return Poll::Ready(Err("the server stopped reading".into())),
                Poll::Ready(Ok(n)) => written += n,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => break,
            }
        }
        // TLS: what was encrypted but not yet written.
        if written == data.len() && !flushed {
            match Pin::new(&mut *tcp).poll_flush(cx) {
                Poll::Ready(Ok(())) => flushed = true,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
        }
        while !done {
            if buf.capacity() - buf.len() < 256 << 10 {
                buf.reserve(1 << 20);
            }
            let mut read = ReadBuf::uninit(buf.spare_capacity_mut());
            match Pin::new(&mut *tcp).poll_read(cx, &mut read) {
                Poll::Ready(Ok(())) => {
                    let n = read.filled().len();
                    if n == 0 {
                        return Poll::Ready(Err("the server closed the connection".into()));
                    }
                    // SAFETY: `poll_read` initialised the first `n` bytes of the spare capacity.
                    unsafe { buf.set_len(buf.len() + n) };
                    match consume(buf) {
                        Ok(d) => done = d,
                        Err(e) => return Poll::Ready(Err(e)),
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => break,
            }
        }
        if done && flushed {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    })
    .await
}

/// Checks a streamed echo as it arrives, dropping what was checked.
enum StreamCheck<'a> {
    /// The raw baseline: our own bytes back.
    Bytes { expected: &'a [u8], at: usize },
    /// A WebSocket server: unmasked frames (one, or a binary fragment and continuations) whose
    /// payloads add up to `payload`.
    Frames(FrameCheck<'a>),
}

impl StreamCheck<'_> {
    /// Consumes what `buf` holds; whether the echo is complete.
    fn consume(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        match self {
            StreamCheck::Bytes { expected, at } => {
                let n = buf.len().min(expected.len() - *at);
                if buf[..n] != expected[*at..*at + n] {
                    return Err("an echo differs".into());
                }
                *at += n;
                buf.drain(..n);
                Ok(*at == expected.len())
            }
            StreamCheck::Frames(f) => f.consume(buf),
        }
    }
}

struct FrameCheck<'a> {
    payload: &'a [u8],
    /// Payload bytes checked so far.
    at: usize,
    /// Payload bytes left in the current frame; `None` between frames.
    left: Option<usize>,
    fin: bool,
    frames: usize,
}

impl<'a> FrameCheck<'a> {
    fn new(payload: &'a [u8]) -> Self {
        FrameCheck {
            payload,
            at: 0,
            left: None,
            fin: false,
            frames: 0,
        }
    }

    fn consume(&mut self, buf: &mut Vec<u8>) -> Result<bool> {
        let mut pos = 0;
        loop {
            match self.left {
                None if self.fin => break,
                None => {
                    let Some((header, len)) =
                        FrameHeader::parse(&buf[pos..]).map_err(|e| format!("{e:?}"))?
                    else {
                        break;
                    };
                    let opcode = header.opcode.as_u8();
                    let expected = if self.frames == 0 { 2 } else { 0 };
                    if opcode != expected || header.mask.is_some() || header.rsv != 0 {
                        return Err(
                            format!("unexpected frame: opcode {opcode}, fragment {}", self.frames).into(),
                        );
                    }
                    if self.at + header.payload_len as usize > self.payload.len() {
                        return Err("the echo is longer than the message".into());
                    }
                    pos += len;
                    self.frames += 1;
                    self.fin = header.fin;
                    self.left = Some(header.payload_len as usize);
                }
                Some(left) => {
                    let n = left.min(buf.len() - pos);
                    if buf[pos..pos + n] != self.payload[self.at..self.at + n] {
                        return Err("an echo differs".into());
                    }
                    pos += n;
                    self.at += n;
                    self.left = (left > n).then_some(left - n);
                    if left > n {
                        break;
                    }
                }
            }
        }
        buf.drain(..pos);
        let done = self.fin && self.left.is_none();
        if done && self.at != self.payload.len() {
            return Err("the echo is shorter than the message".into());
        }
        Ok(done)
    }
}

/// Opens `conns` connections and holds them idle for `seconds`. With `BENCH_DEFLATE=1` each
/// offers permessage-deflate and first exchanges one compressed message, so that the server's
/// compression state exists (libraries allocate it lazily).
async fn idle(addr: &str, conns: usize, seconds: u64) -> Result<String> {
    let link = Link::from_env()?;
    let deflate = std::env::var_os("BENCH_DEFLATE").is_some_and(|v| v == "1");
    let message = if deflate { Some(compressed_frame()) } else { None };
    let mut held = Vec::with_capacity(conns);
    for _ in 0..conns {
        let mut stream = link.open(addr, false).await?;
        if let Some(frame) = &message {
            stream.write_all(frame).await?;
            let mut reply = [0u8; 4096];
            if tokio::time::timeout(Duration::from_secs(5), stream.read(&mut reply)).await?? == 0 {
                return Err("the server closed instead of echoing".into());
            }
        }
        held.push(stream);
    }
    println!("ready");
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    Ok(format!(r#"{{"connections": {}}}"#, held.len()))
}

/// A masked text frame with RSV1 (RFC 7692 §6) holding the ~1.2 KiB JSON document of the compressed
/// scenarios (over Node ws's 1 KiB threshold, so both servers compress their reply), deflated with
/// a sync flush and without the trailing `00 00 FF FF` (§7.2.1).
fn compressed_frame() -> Vec<u8> {
    let doc = json_document();
    let mut deflater = flate2::Compress::new(flate2::Compression::default(), false);
    let mut out = Vec::with_capacity(doc.len() + 64);
    deflater
        .compress_vec(doc.as_bytes(), &mut out, flate2::FlushCompress::Sync)
        .expect("deflate");
    assert!(out.ends_with(&[0, 0, 0xFF, 0xFF]));
    out.truncate(out.len() - 4);
    let mut frame = encode_frame(1, &out, true);
    frame[0] |= 0x40;
    frame
}
