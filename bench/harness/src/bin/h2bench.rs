//! WebSockets over HTTP/2 (RFC 8441) against HTTP/1.1, with Sockeye's client and server on both
//! sides, so that the only difference is the transport.
//!
//! `h2bench SCENARIO h1|h2 ADDR ARGS…` prints one JSON line:
//! - `connect N`: open N sockets one after another (time to a usable socket; each is closed
//!   untimed). h1: a new TCP (+ TLS) connection and upgrade each; h2: a new stream on the HTTP/2
//!   connection a first socket keeps open.
//! - `rtt N SIZE`: N sequential binary echoes of SIZE bytes on one socket.
//! - `echo-many CONNS IN_FLIGHT SIZE SECONDS`: CONNS sockets (h2: streams of one connection), each
//!   keeping IN_FLIGHT binary echoes of SIZE bytes in flight, for SECONDS.
//! - `idle N SECONDS`: N sockets held open (h2: streams of one connection); prints `ready` once
//!   all are open, for run.sh to read the server's memory.
//!
//! `BENCH_TLS=DIR` makes it wss:// (trusting `DIR/cert.pem`), as for the other scenarios.

use std::time::{Duration, Instant};

use sockeye::{Config, HttpVersion, Message};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [scenario, version, addr, rest @ ..] = &args[..] else {
        return Err("usage: h2bench connect|rtt|echo-many|idle h1|h2 ADDR ARGS…".into());
    };
    let num = |i: usize| -> Result<u64> {
        Ok(rest
            .get(i)
            .ok_or("missing argument (see the usage in the source)")?
            .parse()?)
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client = Client::new(version, addr)?;
    let line = runtime.block_on(async {
        match scenario.as_str() {
            "connect" => connect(&client, num(0)?).await,
            "rtt" => rtt(&client, num(0)?, num(1)? as usize).await,
            "echo-many" => echo_many(&client, num(0)?, num(1)?, num(2)? as usize, num(3)?).await,
            "idle" => idle(&client, num(0)?, num(1)?).await,
            other => Err(format!("unknown scenario {other}").into()),
        }
    })?;
    println!("{line}");
    Ok(())
}

struct Client {
    url: String,
    config: Config,
}

impl Client {
    fn new(version: &str, addr: &str) -> Result<Client> {
        let mut config = Config::default();
        config.protocol.deflate = None;
        config.tcp_nodelay = sockeye_bench::nodelay_from_env();
        config.http_version = match version {
            "h1" => HttpVersion::Http1,
            "h2" => HttpVersion::Http2Only,
            other => return Err(format!("unknown version {other} (h1 or h2)").into()),
        };
        let port = addr.rsplit(':').next().unwrap_or("80");
        let url = match std::env::var_os("BENCH_TLS") {
            Some(dir) => {
                let tls = sockeye::tls::ClientTlsOptions::default()
                    .add_ca_file(std::path::Path::new(&dir).join("cert.pem"))?
                    .build()?;
                config.tls_client = Some(tls);
                format!("wss://localhost:{port}/")
            }
            None => format!("ws://{addr}/"),
        };
        Ok(Client { url, config })
    }

    async fn open(&self) -> Result<sockeye::WebSocket<sockeye::TransportStream>> {
        Ok(sockeye::connect_with(self.url.as_str(), &self.config).await?.0)
    }
}

fn latency_json(mut samples: Vec<Duration>) -> String {
    let (mean, p50, p99) = sockeye_bench::stats(&mut samples);
    format!(
        r#"{{"mean_us": {mean:.1}, "p50_us": {p50:.1}, "p99_us": {p99:.1}, "count": {}}}"#,
        samples.len()
    )
}

async fn connect(client: &Client, n: u64) -> Result<String> {
    // Over HTTP/2 this socket keeps the connection open; the timed ones are streams on it.
    let anchor = client.open().await?;
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        let mut ws = client.open().await?;
        samples.push(started.elapsed());
        ws.close(None).await?;
    }
    drop(anchor);
    Ok(latency_json(samples))
}

async fn rtt(client: &Client, n: u64, size: usize) -> Result<String> {
    let mut ws = client.open().await?;
    let payload = Message::binary(vec![7u8; size]);
    let mut samples = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let started = Instant::now();
        ws.send(payload.clone()).await?;
        match ws.recv().await {
            Some(Ok(reply)) if reply == payload => samples.push(started.elapsed()),
            other => return Err(format!("bad echo: {other:?}").into()),
        }
    }
    ws.close(None).await?;
    Ok(latency_json(samples))
}

async fn echo_many(client: &Client, conns: u64, in_flight: u64, size: usize, seconds: u64) -> Result<String> {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let payload = Message::binary(vec![7u8; size]);
    let mut sockets = Vec::with_capacity(conns as usize);
    for _ in 0..conns {
        sockets.push(client.open().await?);
    }
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut ws in sockets {
        let payload = payload.clone();
        tasks.spawn(async move {
            let mut echoed = 0u64;
            for _ in 0..in_flight {
                ws.feed(payload.clone()).await?;
            }
            ws.flush().await?;
            while let Some(reply) = ws.recv().await {
                if reply? != payload {
                    return Err(sockeye::Error::from(sockeye::ProtocolError::InvalidInput(
                        "the echo differs",
                    )));
                }
                echoed += 1;
                if Instant::now() >= deadline {
                    break;
                }
                ws.feed(payload.clone()).await?;
            }
            let _ = ws.close(None).await;
            Ok(echoed)
        });
    }
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done??;
    }
    let rate = total as f64 / started.elapsed().as_secs_f64();
    Ok(format!(r#"{{"msgs_per_s": {rate:.0}, "echoes": {total}}}"#))
}

async fn idle(client: &Client, n: u64, seconds: u64) -> Result<String> {
    let mut held = Vec::with_capacity(n as usize);
    for _ in 0..n {
        held.push(client.open().await?);
    }
    println!("ready");
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    Ok(format!(r#"{{"connections": {}}}"#, held.len()))
}
