//! A peer that stops reading must not make the other side's memory grow: sends wait at the
//! write buffer's high-water mark, and input stops being read while output is stuck there.
//!
//! Heap use is measured with a counting allocator (stats_alloc) for the whole test process; each
//! test compares heap use early and late in its own run, so they tolerate running side by side.
#![allow(clippy::unwrap_used)]

mod raw_client;

use std::alloc::System;
use std::time::{Duration, Instant};

use sockeye::{Config, Message, ProtocolConfig, Server};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Bytes of heap in use by the whole test process. stats_alloc already counts a realloc's
/// growth in `bytes_allocated` (and its shrinking in `bytes_deallocated`); `bytes_reallocated` is
/// the same change again, not to be added.
fn heap_in_use() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

const HIGH_WATER: usize = 256 << 10;

fn config() -> Config {
    Config::builder()
        .write_buffer_high_water(HIGH_WATER)
        .protocol({
            let mut c = ProtocolConfig::default();
            c.deflate = None;
            c
        })
        .build()
}

/// Completes the opening handshake on a raw socket that will then misbehave.
async fn raw_upgraded(addr: std::net::SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    raw_client::upgrade(&mut tcp).await;
    tcp
}

/// Heap in use, sampled after `warm_up` and again after `run`; returns (early, late).
async fn heap_early_and_late(warm_up: Duration, run: Duration) -> (isize, isize) {
    tokio::time::sleep(warm_up).await;
    let early = heap_in_use();
    tokio::time::sleep(run).await;
    (early, heap_in_use())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_stops_reading_does_not_grow_the_server() {
    let server = Server::bind("127.0.0.1:0", config()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let (pushed_tx, pushed) = tokio::sync::watch::channel(0u64);
    tokio::spawn(server.serve(move |mut ws, _| {
        let pushed_tx = pushed_tx.clone();
        async move {
            let payload = sockeye::Bytes::from(vec![0x5a; 1024]);
            let deadline = Instant::now() + Duration::from_secs(3);
            let mut n = 0u64;
            // `feed` waits at the high-water mark, so this loop stalls instead of buffering.
            while Instant::now() < deadline {
                match tokio::time::timeout(
                    Duration::from_millis(100),
                    ws.feed(Message::Binary(payload.clone())),
                )
                .await
                {
                    Ok(Ok(())) => n += 1,
                    // The peer went away at the end of the test.
                    Ok(Err(_)) => break,
                    Err(_) => {}
                }
                let _ = pushed_tx.send(n);
            }
        }
    }));
    let stalled = raw_upgraded(addr).await;
    let (early, late) = heap_early_and_late(Duration::from_millis(700), Duration::from_millis(1500)).await;
    let pushed = *pushed.borrow();
    eprintln!("heap {early} → {late} bytes; {pushed} messages accepted before the stall");
    assert!(pushed > 0);
    assert!(
        late - early < (HIGH_WATER / 2) as isize,
        "heap grew from {early} to {late}"
    );
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_flood_from_a_peer_that_reads_no_pongs_does_not_grow_the_server() {
    let server = Server::bind("127.0.0.1:0", config()).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move { while ws.recv().await.is_some() {} }));
    let mut flood = raw_upgraded(addr).await;
    // Masked pings with 125-byte payloads, written until the socket stops taking them.
    let mut ping = vec![0x89, 0x80 | 125, 1, 2, 3, 4];
    ping.extend((0..125u8).map(|i| i ^ [1, 2, 3, 4][usize::from(i) % 4]));
    let batch: Vec<u8> = ping.iter().copied().cycle().take(ping.len() * 512).collect();
    let writer = tokio::spawn(async move {
        let deadline = Instant::now() + Duration::from_secs(3);
        let mut written = 0usize;
        while Instant::now() < deadline {
            if let Ok(Ok(())) =
                tokio::time::timeout(Duration::from_millis(100), flood.write_all(&batch)).await
            {
                written += batch.len();
            }
        }
        (written, flood)
    });
    let (early, late) = heap_early_and_late(Duration::from_millis(700), Duration::from_millis(1500)).await;
    let (written, flood) = writer.await.unwrap();
    eprintln!("heap {early} → {late} bytes; {written} bytes of pings written before the stall");
    assert!(
        late - early < (HIGH_WATER / 2) as isize,
        "heap grew from {early} to {late}"
    );
    drop(flood);
}
