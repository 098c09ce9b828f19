//! Pub/sub fan-out servers for the side-by-side benchmarks, single-threaded: one topic; whatever
//! a connection sends goes to every other connection.
//!
//! `pubsub-server SYSTEM PORT [BACKPLANE]`
//!
//! - `sockeye`: a [`Hub`] on BACKPLANE (`memory:` by default, `redis://…`, `nats://…`) and a
//!   `sockeye::Server`; every connection is a [`Session`] with its defaults, what users get (and
//!   what `ws broadcast_server` runs): subscribed to the topic, its deliveries written in batches
//!   encoded once, what it sends published leaving itself out, what it has already sent in one
//!   batch (`publish_many`, one backplane round trip).
//! - `sockeye-nosub`: the same server, but connections neither subscribe nor run a session:
//!   the baseline of the memory scenario (an idle connection, no subscription).
//! - `sockeye-split`: connections are split into their reading and writing halves (what any
//!   server that writes from another task does) but do not subscribe: the memory scenario's
//!   second baseline.
//! - `raw`: the same sockets with no pub/sub layer at all (the ceiling): the handshake, then each
//!   received frame is encoded once as a server frame and its bytes go to every other connection
//!   through a `tokio::sync::broadcast` of `Bytes`; each connection's writer task copies what is
//!   waiting into one buffer and writes it.
//!
//! Prints `ready` once listening (and connected to the backplane).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use sockeye_bench::{encode_frame, server_handshake};
use sockeye_pubsub::{Ended, HistoryConfig, Hub, HubConfig, Relay, Session, SessionConfig, Topic};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::broadcast;

type Error = Box<dyn std::error::Error>;

/// Messages written to a socket at most before one write (the raw server).
const BATCH: usize = 256;
/// The topic every connection is on.
const TOPIC: &str = "bench";

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [system, port, rest @ ..] = &args[..] else {
        return Err("usage: pubsub-server sockeye|sockeye-nosub|sockeye-split|raw PORT [BACKPLANE]".into());
    };
    let backplane = rest.first().cloned().unwrap_or_else(|| "memory:".into());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let listener = TcpListener::bind(("127.0.0.1", port.parse::<u16>()?)).await?;
        match system.as_str() {
            "sockeye" => sockeye(listener, &backplane, true, false).await,
            "sockeye-nosub" => sockeye(listener, &backplane, false, false).await,
            "sockeye-split" => sockeye(listener, &backplane, true, true).await,
            "raw" => raw(listener).await,
            other => Err(format!("unknown system {other}").into()),
        }
    })
}

async fn sockeye(
    listener: TcpListener,
    backplane: &str,
    subscribe: bool,
    split_only: bool,
) -> Result<(), Error> {
    let hub = Hub::connect(backplane, HubConfig::default(), HistoryConfig::default()).await?;
    let topic = Topic::new(TOPIC)?;
    let mut config = sockeye::Config::default();
    config.protocol.deflate = None;
    config.max_connections = 100_000;
    let server = sockeye::Server::from_listener(listener, config);
    // Subscribers closed by the slow-subscriber policy, reported when the server stops.
    let too_slow = Arc::new(AtomicU64::new(0));
    println!("ready");
    // One handler per mode, each its own task type: in one closure with a branch per mode, every
    // connection's task was as large as the session's future, and the baselines of the memory
    // scenario counted it (5.8 KiB per idle connection not subscribed, against 3.3 before the
    // session grew).
    if !subscribe {
        server
            .serve(|mut ws, _| async move { while let Some(Ok(_)) = ws.next().await {} })
            .await?;
        return Ok(());
    }
    if split_only {
        server
            .serve(|ws, _| async move {
                let (mut sink, mut stream) = ws.split();
                let _keep = &mut sink;
                while let Some(Ok(_)) = stream.next().await {}
            })
            .await?;
        return Ok(());
    }
    let counter = Arc::clone(&too_slow);
    let serving = server.serve(move |ws, _| {
        let (hub, topic, too_slow) = (hub.clone(), topic.clone(), Arc::clone(&counter));
        async move {
            let mut session = Session::new(&hub, Relay::new(topic.clone()), SessionConfig::default());
            if let Err(e) = session.subscribe(&topic, None).await {
                eprintln!("cannot subscribe: {e}");
                let mut ws = ws;
                let _ = ws.close(Some(e.close_frame())).await;
                return;
            }
            match session.run(ws).await {
                Ended::TooSlow => {
                    let n = too_slow.fetch_add(1, Ordering::Relaxed) + 1;
                    eprintln!("a subscriber was too slow and is closed (1008); {n} so far");
                }
                Ended::NotPublished(e) => eprintln!("publish failed: {e}"),
                _ => {}
            }
        }
    });
    serving.await?;
    Ok(())
}

/// Adds a data message to the batch; its payload bytes.
/// The ceiling: pre-encoded frame bytes written to every socket, no pub/sub layer.
async fn raw(listener: TcpListener) -> Result<(), Error> {
    // (sender id, the server frame's bytes); room for every message of a bounded run, so that a
    // receiver lags (and loses messages, which the load generator reports) only when far behind.
    let (tx, _) = broadcast::channel::<(u64, Bytes)>(1 << 16);
    let lagged = Arc::new(AtomicU64::new(0));
    println!("ready");
    let mut next_id = 0u64;
    loop {
        let (mut tcp, _) = listener.accept().await?;
        tcp.set_nodelay(true)?;
        next_id += 1;
        let id = next_id;
        let (tx, lagged) = (tx.clone(), Arc::clone(&lagged));
        tokio::spawn(async move {
            if server_handshake(&mut tcp).await.is_err() {
                return;
            }
            let mut rx = tx.subscribe();
            let (mut reader, mut writer) = tcp.into_split();
            let write_task = tokio::spawn(async move {
                let mut out: Vec<u8> = Vec::with_capacity(BATCH * 80);
                loop {
                    let take = |item: Result<(u64, Bytes), _>, out: &mut Vec<u8>| match item {
                        Ok((from, bytes)) => {
                            if from != id {
                                out.extend_from_slice(&bytes);
                            }
                            true
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            lagged.fetch_add(n, Ordering::Relaxed);
                            eprintln!("raw: a connection lagged by {n} messages");
                            true
                        }
                        Err(broadcast::error::RecvError::Closed) => false,
                    };
                    if !take(rx.recv().await, &mut out) {
                        return;
                    }
                    for _ in 1..BATCH {
                        match rx.try_recv() {
                            Ok(item) => {
                                take(Ok(item), &mut out);
                            }
                            Err(broadcast::error::TryRecvError::Lagged(n)) => {
                                take(Err(broadcast::error::RecvError::Lagged(n)), &mut out);
                            }
                            Err(_) => break,
                        }
                    }
                    if !out.is_empty() && writer.write_all(&out).await.is_err() {
                        return;
                    }
                    out.clear();
                }
            });
            // Reads the client's (masked) frames; each data frame is re-encoded once as a server
            // frame and broadcast.
            let mut buf: Vec<u8> = Vec::with_capacity(64 << 10);
            'read: loop {
                match reader.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
                let mut at = 0;
                while let Some((opcode, start, end)) = parse_masked(&buf[at..]) {
                    let (start, end) = (at + start, at + end);
                    let key: [u8; 4] = buf[start - 4..start].try_into().expect("4 bytes");
                    let payload: Vec<u8> = buf[start..end]
                        .iter()
                        .enumerate()
                        .map(|(i, b)| b ^ key[i % 4])
                        .collect();
                    at = end;
                    match opcode {
                        1 | 2 => {
                            let _ = tx.send((id, Bytes::from(encode_frame(opcode, &payload, false))));
                        }
                        8 => break 'read,
                        _ => {}
                    }
                }
                buf.drain(..at);
            }
            write_task.abort();
        });
    }
}

/// A complete masked frame at the start of `buf`: (opcode, payload start, payload end).
fn parse_masked(buf: &[u8]) -> Option<(u8, usize, usize)> {
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
    let start = head + 4;
    let end = start + usize::try_from(len).ok()?;
    (buf.len() >= end).then_some((opcode, start, end))
}
