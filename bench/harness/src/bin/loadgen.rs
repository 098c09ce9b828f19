//! The load generator: pre-encoded masked frames, large reads, every echo compared byte for byte,
//! one thread — so that server-side figures measure the server. Prints one JSON line per run.
//!
//! ```text
//! loadgen push ADDR N [--raw]                          msgs/s received from a pushing server
//! loadgen rtt ADDR COUNT SIZE text|binary [--raw]      sequential echoes: mean/p50/p99 µs
//! loadgen connect ADDR COUNT [--raw]                   connect + handshake + close, sequentially
//! loadgen connect-parallel ADDR SECONDS CONCURRENCY [--raw]
//! loadgen echo-many ADDR CONNS INFLIGHT SIZE SECONDS [--raw]
//! loadgen large ADDR SIZE REPS [--raw]                 one big binary echo at a time: MB/s
//! loadgen idle ADDR CONNS SECONDS                      hold idle connections (for memory)
//! ```
//! The connect scenarios and `idle` read `BENCH_TLS=DIR` (wss://), `BENCH_NODELAY=0` and
//! `BENCH_DEFLATE=1` (idle: one compressed message per connection first) from the environment.
//! `--raw`: the server is the raw TCP baseline (no handshake; it echoes our masked bytes as they are).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use sockeye_bench::{Link, connect, encode_frame, json_document, stats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

type Error = Box<dyn std::error::Error + Send + Sync>;
type Result<T> = std::result::Result<T, Error>;

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let raw = args.iter().any(|a| a == "--raw");
    args.retain(|a| a != "--raw");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let a = |i: usize| args.get(i).cloned().ok_or("missing argument");
    let json = runtime.block_on(async {
        Ok::<_, Error>(match a(0)?.as_str() {
            "push" => push(&a(1)?, a(2)?.parse()?, raw).await?,
            "rtt" => rtt(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, a(4)? == "text", raw).await?,
            "connect" => connect_sequential(&a(1)?, a(2)?.parse()?, raw).await?,
            "connect-parallel" => connect_parallel(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, raw).await?,
            "echo-many" => {
                echo_many(
                    &a(1)?,
                    a(2)?.parse()?,
                    a(3)?.parse()?,
                    a(4)?.parse()?,
                    a(5)?.parse()?,
                    raw,
                )
                .await?
            }
            "large" => large(&a(1)?, a(2)?.parse()?, a(3)?.parse()?, raw).await?,
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
async fn read_at_least(tcp: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> Result<()> {
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

async fn rtt(addr: &str, count: usize, size: usize, text: bool, raw: bool) -> Result<String> {
    let (mut tcp, mut buf) = connect(addr, raw).await?;
    let (sent, echo) = echo_of(if text { 1 } else { 2 }, &pattern(size, text), raw);
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        tcp.write_all(&sent).await?;
        read_at_least(&mut tcp, &mut buf, echo.len()).await?;
        samples.push(t.elapsed());
        if buf[..echo.len()] != echo[..] {
            return Err("an echo differs".into());
        }
        buf.drain(..echo.len());
    }
    let (mean, p50, p99) = stats(&mut samples);
    Ok(format!(
        r#"{{"mean_us": {mean:.1}, "p50_us": {p50:.1}, "p99_us": {p99:.1}}}"#
    ))
}

/// One connection's life: connect, handshake, close frame, wait for the server's close/EOF.
async fn one_connection(link: &Link, addr: &str, raw: bool) -> Result<()> {
    let mut stream = link.open(addr, raw).await?;
    if !raw {
        stream
            .write_all(&encode_frame(8, &1000u16.to_be_bytes(), true))
            .await?;
    } else {
        stream.shutdown().await?;
    }
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

async fn connect_sequential(addr: &str, count: usize, raw: bool) -> Result<String> {
    let link = Link::from_env()?;
    let mut samples = Vec::with_capacity(count);
    for _ in 0..count {
        let t = Instant::now();
        one_connection(&link, addr, raw).await?;
        samples.push(t.elapsed());
    }
    let (mean, p50, p99) = stats(&mut samples);
    Ok(format!(
        r#"{{"mean_us": {mean:.1}, "p50_us": {p50:.1}, "p99_us": {p99:.1}}}"#
    ))
}

async fn connect_parallel(addr: &str, seconds: u64, concurrency: usize, raw: bool) -> Result<String> {
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
                if one_connection(&link, &addr, raw).await.is_err() {
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
) -> Result<String> {
    let (sent, echo) = echo_of(2, &pattern(size, false), raw);
    let mut set = tokio::task::JoinSet::new();
    let mut streams = Vec::with_capacity(conns);
    for _ in 0..conns {
        streams.push(connect(addr, raw).await?);
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

async fn large(addr: &str, size: usize, reps: usize, raw: bool) -> Result<String> {
    let (mut tcp, mut buf) = connect(addr, raw).await?;
    let (sent, echo) = echo_of(2, &pattern(size, false), raw);
    let started = Instant::now();
    for _ in 0..reps {
        tcp_write(&sent, &mut tcp, &mut buf, echo.len()).await?;
        if buf[..echo.len()] != echo[..] {
            return Err("an echo differs".into());
        }
        buf.drain(..echo.len());
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(format!(
        r#"{{"mb_per_s": {:.1}}}"#,
        (size * reps) as f64 / secs / 1e6
    ))
}

/// Writes `data` while reading the echo as it comes (a big echo would deadlock otherwise).
async fn tcp_write(data: &[u8], tcp: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> Result<()> {
    let (mut reader, mut writer) = tcp.split();
    let write = async { writer.write_all(data).await };
    let read = async {
        while buf.len() < want {
            if buf.capacity() - buf.len() < 256 << 10 {
                buf.reserve(1 << 20);
            }
            if reader.read_buf(buf).await? == 0 {
                return Err(std::io::Error::other("closed"));
            }
        }
        Ok(())
    };
    let (w, r) = tokio::join!(write, read);
    w?;
    r?;
    Ok(())
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
