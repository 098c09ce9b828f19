//! `bench`: Sockeye against itself on loopback, in one process — push throughput, round-trip
//! latency and connection set-up, over ws:// and wss:// (a throwaway certificate made at start),
//! and with `--http2` over HTTP/2 too (RFC 8441: h2c and h2), where a new socket is a stream on
//! the connection a first socket keeps open.
//! Every loop is bounded by a count and by `--seconds`.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::tls::{ClientTlsOptions, Roots, ServerTls};
use sockeye::{CloseCode, CloseFrame, Config, Message, Server};

use crate::cli::BenchArgs;
use crate::failure::Failure;
use crate::output::outln;

/// One transport under test.
struct Target {
    name: &'static str,
    url: String,
    client: Config,
    http2: bool,
}

pub(crate) async fn run(args: BenchArgs) -> Result<(), Failure> {
    let deadline = Instant::now() + Duration::from_secs(args.seconds);
    let mut targets = vec![start(false, false, &args).await?];
    if !args.no_tls {
        targets.push(start(true, false, &args).await?);
    }
    if args.http2 {
        targets.push(start(false, true, &args).await?);
        if !args.no_tls {
            targets.push(start(true, true, &args).await?);
        }
    }
    outln!(
        "sockeye {} bench: {} messages of {} bytes, {} connection(s), deflate {}",
        env!("CARGO_PKG_VERSION"),
        args.count,
        args.size,
        args.connections,
        if args.deflate { "on" } else { "off" }
    )?;
    let mut connect_means = Vec::new();
    for t in &targets {
        let push = push(t, &args, deadline).await?;
        let rtt = round_trips(t, &args, deadline).await?;
        let setup = connects(t, &args, deadline).await?;
        connect_means.push((t.name, setup.0));
        outln!("{}:", t.name)?;
        outln!(
            "  push     {:>12.0} msgs/s  {:>8.1} MB/s  ({} messages in {:.3} s)",
            push.0 as f64 / push.1,
            push.0 as f64 * args.size as f64 / push.1 / 1e6,
            push.0,
            push.1
        )?;
        outln!(
            "  echo rtt  mean {:>7.1} us  p50 {:>7.1} us  p99 {:>7.1} us  ({} round trips)",
            rtt.0,
            rtt.1,
            rtt.2,
            rtt.3
        )?;
        outln!(
            "  connect   mean {:>7.1} us  p50 {:>7.1} us  p99 {:>7.1} us  ({} connects)",
            setup.0,
            setup.1,
            setup.2,
            setup.3
        )?;
    }
    let mean = |name: &str| connect_means.iter().find(|(n, _)| *n == name).map(|(_, m)| *m);
    for (h2, h1) in [("ws over h2c", "ws"), ("wss over h2", "wss")] {
        if let (Some(h2_mean), Some(h1_mean)) = (mean(h2), mean(h1))
            && h1_mean > 0.0
        {
            outln!(
                "a new socket on the open HTTP/2 connection ({h2}): {:.2} x the time of a new {h1} connection",
                h2_mean / h1_mean
            )?;
        }
    }
    Ok(())
}

/// Starts the server for one transport: `/push/N` pushes N messages, anything else echoes.
async fn start(tls: bool, http2: bool, args: &BenchArgs) -> Result<Target, Failure> {
    let mut server_config = Config::default();
    let mut client = Config::default();
    if http2 {
        client.http_version = sockeye::HttpVersion::Http2Only;
    }
    if !args.deflate {
        server_config.protocol.deflate = None;
        client.protocol.deflate = None;
    }
    let mut server = Server::bind("127.0.0.1:0", server_config).await?;
    if tls {
        let (cert, key) = throwaway_certificate()?;
        server = server.with_tls(ServerTls::from_pem(cert.as_bytes(), key.as_bytes())?.acceptor());
        let options = ClientTlsOptions {
            roots: Roots::Empty,
            ..Default::default()
        }
        .add_ca_pem(cert.as_bytes())?;
        client.tls_client = Some(options.build()?);
    }
    let port = server.local_addr()?.port();
    let payload = Message::binary(vec![b'x'; args.size]);
    tokio::spawn(server.serve_requests(move |mut ws, request, _| {
        let payload = payload.clone();
        async move {
            if let Some(n) = request
                .uri()
                .path()
                .strip_prefix("/push/")
                .and_then(|n| n.parse::<u64>().ok())
            {
                if ws
                    .send_batch(std::iter::repeat_n(payload, n as usize))
                    .await
                    .is_err()
                {
                    return;
                }
                let _ = ws.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                return;
            }
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        }
    }));
    let (name, scheme) = match (tls, http2) {
        (false, false) => ("ws", "ws"),
        (true, false) => ("wss", "wss"),
        (false, true) => ("ws over h2c", "ws"),
        (true, true) => ("wss over h2", "wss"),
    };
    Ok(Target {
        name,
        url: format!("{scheme}://localhost:{port}"),
        client,
        http2,
    })
}

/// A self-signed certificate for `localhost`, made for this run only.
fn throwaway_certificate() -> Result<(String, String), Failure> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()])
        .map_err(|e| Failure::new(format!("cannot make a test certificate: {e}")))?;
    Ok((cert.cert.pem(), cert.signing_key.serialize_pem()))
}

/// Messages received per second, summed over `--connections` clients pushed to concurrently.
async fn push(t: &Target, args: &BenchArgs, deadline: Instant) -> Result<(u64, f64), Failure> {
    let per_connection = (args.count / args.connections as u64).max(1);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let (mut ws, _) =
            sockeye::connect_with(format!("{}/push/{per_connection}", t.url), &t.client).await?;
        tasks.push(tokio::spawn(async move {
            let mut got = 0u64;
            while let Some(item) = ws.recv().await {
                match item {
                    Ok(m) if m.is_data() => got += 1,
                    Ok(_) => {}
                    Err(e) => return Err(Failure::from(e)),
                }
                if Instant::now() > deadline {
                    break;
                }
            }
            Ok(got)
        }));
    }
    let mut total = 0;
    for task in tasks {
        total += task.await.map_err(|e| Failure::new(e.to_string()))??;
    }
    Ok((total, started.elapsed().as_secs_f64()))
}

/// Sequential echoes on one connection: (mean, p50, p99 in µs, count).
async fn round_trips(
    t: &Target,
    args: &BenchArgs,
    deadline: Instant,
) -> Result<(f64, f64, f64, usize), Failure> {
    let (mut ws, _) = sockeye::connect_with(format!("{}/echo", t.url), &t.client).await?;
    let payload = Message::binary(vec![b'x'; args.size]);
    let mut samples = Vec::with_capacity(args.round_trips);
    while samples.len() < args.round_trips && Instant::now() < deadline {
        let t0 = Instant::now();
        ws.send(payload.clone()).await?;
        match ws.recv().await {
            Some(Ok(_)) => samples.push(t0.elapsed()),
            Some(Err(e)) => return Err(e.into()),
            None => return Err(Failure::new("the bench server closed the connection")),
        }
    }
    ws.close(None).await?;
    Ok(summarise(samples))
}

/// TCP connect + (TLS +) handshake + close, sequentially.
async fn connects(
    t: &Target,
    args: &BenchArgs,
    deadline: Instant,
) -> Result<(f64, f64, f64, usize), Failure> {
    let mut samples = Vec::with_capacity(args.connects);
    // Over HTTP/2 the connection stays open while one socket uses it: each new socket is then a
    // stream on it, which is what RFC 8441 saves.
    let anchor = match t.http2 {
        true => Some(
            sockeye::connect_with(format!("{}/echo", t.url), &t.client)
                .await?
                .0,
        ),
        false => None,
    };
    while samples.len() < args.connects && Instant::now() < deadline {
        let t0 = Instant::now();
        let (mut ws, _) = sockeye::connect_with(format!("{}/echo", t.url), &t.client).await?;
        ws.close(None).await?;
        samples.push(t0.elapsed());
    }
    if let Some(mut anchor) = anchor {
        anchor.close(None).await?;
    }
    Ok(summarise(samples))
}

fn summarise(mut samples: Vec<Duration>) -> (f64, f64, f64, usize) {
    if samples.is_empty() {
        return (0.0, 0.0, 0.0, 0);
    }
    samples.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let mean = samples.iter().map(|d| us(*d)).sum::<f64>() / samples.len() as f64;
    (
        mean,
        us(samples[samples.len() / 2]),
        us(samples[samples.len() * 99 / 100]),
        samples.len(),
    )
}
