//! The broadcast example (examples/broadcast.rs) does what the README says: a client that does
//! not read is skipped, without slowing the others, which get every message.
#![allow(clippy::unwrap_used)]

mod raw_client;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::{Config, Message, Server};

#[allow(dead_code)] // the example's `main`
#[path = "../examples/broadcast.rs"]
mod broadcast;

const MESSAGES: usize = 1200;
const SIZE: usize = 8 << 10;
/// How far the sender may run ahead of the slowest healthy reader.
const WINDOW: usize = 32;

fn message(i: usize) -> Message {
    let mut text = format!("m{i} ");
    text.extend(std::iter::repeat_n('x', SIZE - text.len()));
    Message::text(text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_is_skipped_and_the_others_get_every_message() {
    let server = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let missed = Arc::new(broadcast::Missed::default());
    tokio::spawn(broadcast::serve(server, Arc::clone(&missed)));

    // The slow client: it completes the handshake, with a small receive buffer, and never reads
    // again. (It holds about 5 MiB at most: the server's socket buffer, at most 4 MiB here, and
    // the 1 MiB write buffer; nearly 10 MB are sent.)
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut slow = socket.connect(addr).await.unwrap();
    let head = raw_client::upgrade(&mut slow).await;
    assert!(head.starts_with(b"HTTP/1.1 101"));

    // Three healthy clients, one of which also sends; each checks it gets every message in order.
    let url = format!("ws://{addr}/");
    let received: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let warmed: Arc<Vec<AtomicUsize>> = Arc::new((0..3).map(|_| AtomicUsize::new(0)).collect());
    let mut sender = None;
    let mut readers = Vec::new();
    for n in 0..3 {
        let (ws, _) = sockeye::connect(url.as_str()).await.unwrap();
        let (sink, mut stream) = ws.split();
        if n == 0 {
            sender = Some(sink);
        }
        let (received, warmed) = (Arc::clone(&received), Arc::clone(&warmed));
        readers.push(tokio::spawn(async move {
            while received[n].load(Ordering::SeqCst) < MESSAGES {
                let text = match stream.next().await {
                    Some(Ok(Message::Text(text))) => text,
                    other => panic!("client {n}: {other:?}"),
                };
                if text.as_str() == "warm-up" {
                    warmed[n].fetch_add(1, Ordering::SeqCst);
                    continue;
                }
                let i = received[n].load(Ordering::SeqCst);
                assert!(
                    text.as_str().starts_with(&format!("m{i} ")),
                    "client {n} expected m{i}"
                );
                received[n].store(i + 1, Ordering::SeqCst);
            }
        }));
    }
    let mut sender = sender.unwrap();
    // Every client is subscribed to the hub once each has seen a warm-up message.
    while warmed.iter().any(|w| w.load(Ordering::SeqCst) == 0) {
        sender.send(Message::text("warm-up")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let slowest = || received.iter().map(|r| r.load(Ordering::SeqCst)).min().unwrap();
    for i in 0..MESSAGES {
        while slowest() + WINDOW < i {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        sender.send(message(i)).await.unwrap();
    }
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(60), reader)
            .await
            .expect("every healthy client gets every message")
            .unwrap();
    }
    assert!(
        missed.skipped.load(Ordering::Relaxed) > 0,
        "the client that never reads was skipped"
    );
    assert_eq!(
        missed.lagged.load(Ordering::Relaxed),
        0,
        "no task fell behind the hub"
    );
    drop(slow);
}
