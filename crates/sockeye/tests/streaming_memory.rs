//! A 1 GiB message echoed through the streaming API in bounded memory: the client sends it from
//! a reader, the server forwards each piece as it arrives, the client checks each piece as it
//! comes back. The figure asserted is the process's peak resident memory (both ends live in this
//! process), not the time. This file holds one test, so that nothing else shares the process.
#![allow(clippy::unwrap_used)]

mod pattern;

use pattern::{Pattern, PatternCheck, streaming_echo};
use sockeye::{Config, DataKind, Incoming};

const MESSAGE: u64 = 1 << 30;
/// The bound for the streamed echo of 1 GiB.
const PEAK_RSS_LIMIT: u64 = 16 << 20;

/// A field of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(field)).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib << 10
}

#[test]
fn a_1_gib_message_streams_through_an_echo_in_bounded_memory() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let config = Config::builder().max_message_size(2 << 30).build();
    let (peak, before, received) = runtime.block_on(async move {
        let addr = streaming_echo(config.clone()).await;
        let (ws, _) = sockeye::connect_with(format!("ws://{addr}/").as_str(), &config)
            .await
            .unwrap();
        let before = status_bytes("VmRSS:");
        // Reset the peak ("VmHWM") to what is resident now (Linux 4.0+): from here on it is
        // the echo's peak.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let (mut writer, mut reader) = ws.split();
        let send = tokio::spawn(async move {
            writer
                .send_reader(DataKind::Binary, Pattern::new(MESSAGE))
                .await
                .unwrap();
            writer
        });
        let mut check = PatternCheck::default();
        loop {
            let Incoming::Chunk(piece) = reader.recv_chunk().await.unwrap().unwrap() else {
                continue;
            };
            check.feed(&piece.data);
            if piece.last {
                break;
            }
        }
        let peak = status_bytes("VmHWM:");
        let mut ws = reader.reunite(send.await.unwrap()).unwrap();
        ws.close(None).await.unwrap();
        (peak, before, check.len())
    });
    eprintln!(
        "1 GiB streamed echo: peak RSS {:.1} MiB (resident before: {:.1} MiB)",
        peak as f64 / 1048576.0,
        before as f64 / 1048576.0
    );
    assert_eq!(received, MESSAGE);
    assert!(
        peak <= PEAK_RSS_LIMIT,
        "peak RSS {peak} bytes while streaming 1 GiB (limit {PEAK_RSS_LIMIT})"
    );
}
