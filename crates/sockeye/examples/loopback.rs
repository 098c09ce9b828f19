//! The main job on an embedded default: an echo server and a client on loopback, in one process.
//! Prints pipelined echo throughput and sequential round-trip latency.
//!
//! `cargo run --release -p sockeye --example loopback [-- MESSAGES SIZE]` (defaults: 200000, 64).
//! Bounded: at most MESSAGES messages, and the run stops after 60 s whatever happens.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::{Config, Message, Server};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let messages: usize = args.next().map_or(Ok(200_000), |a| a.parse())?;
    let size: usize = args.next().map_or(Ok(64), |a| a.parse())?;
    tokio::time::timeout(Duration::from_secs(60), run(messages, size)).await??;
    Ok(())
}

async fn run(messages: usize, size: usize) -> Result<(), sockeye::Error> {
    let server = Server::bind("127.0.0.1:0", Config::default()).await?;
    let url = format!("ws://{}/", server.local_addr()?);
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.feed(m).await.is_err() {
                break;
            }
        }
    }));

    let started = Instant::now();
    let (mut ws, _) = sockeye::connect(url.as_str()).await?;
    let setup = started.elapsed();
    let payload = Message::binary(vec![b'x'; size]);

    // Pipelined: up to WINDOW messages in flight, topped up half a window at a time so that each
    // flush carries a batch; every echo is verified.
    const WINDOW: usize = 256;
    let started = Instant::now();
    let (mut sent, mut received) = (0, 0);
    while received < messages {
        if sent - received <= WINDOW / 2 {
            while sent < messages && sent - received < WINDOW {
                ws.feed(payload.clone()).await?;
                sent += 1;
            }
            ws.flush().await?;
        }
        match ws.recv().await {
            Some(Ok(m)) if m == payload => received += 1,
            Some(Ok(other)) => return Err(sockeye::ProtocolError::InvalidInput(unexpected(&other)).into()),
            Some(Err(e)) => return Err(e),
            None => return Err(sockeye::ProtocolError::AbnormalClosure.into()),
        }
    }
    let elapsed = started.elapsed().as_secs_f64();

    // Sequential: one message in flight, like Autobahn 9.7/9.8.
    let mut rtts = Vec::with_capacity(1000);
    for _ in 0..1000 {
        let t = Instant::now();
        ws.send(payload.clone()).await?;
        ws.recv()
            .await
            .ok_or(sockeye::Error::from(sockeye::ProtocolError::AbnormalClosure))??;
        rtts.push(t.elapsed());
    }
    rtts.sort();
    ws.close(None).await?;

    let rate = messages as f64 / elapsed;
    println!("sockeye loopback echo, {messages} messages of {size} bytes, {WINDOW} in flight");
    println!("  connect + handshake : {:>10.1} us", setup.as_secs_f64() * 1e6);
    println!(
        "  echo throughput     : {rate:>10.0} msgs/s  ({:.1} MB/s each way)",
        rate * size as f64 / 1e6
    );
    println!(
        "  round trip (1000)   : mean {:.1} us, p50 {:.1} us, p99 {:.1} us",
        rtts.iter().sum::<Duration>().as_secs_f64() * 1e6 / rtts.len() as f64,
        rtts[rtts.len() / 2].as_secs_f64() * 1e6,
        rtts[rtts.len() * 99 / 100].as_secs_f64() * 1e6,
    );
    Ok(())
}

fn unexpected(m: &Message) -> &'static str {
    match m {
        Message::Close(_) => "the server closed the connection",
        _ => "an echo differed from what was sent",
    }
}
