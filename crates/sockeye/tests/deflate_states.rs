//! Issue 31: a connection keeps the permessage-deflate states it borrowed from a `DeflatePool`
//! only while it is busy, and gives them back when it waits — for input after a linger without
//! input (the tokio layer runs the engine's timer there), for the socket to take more output and
//! once its output is written with nothing left to read at once — so that no handler,
//! however it uses the connection, keeps ~340 KiB of zlib state while it does nothing. Each test
//! is one way a handler could go quiet without waiting for input; `DeflatePool::held` counts the
//! states out of the pool.
#![allow(clippy::unwrap_used)]

mod raw_client;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::proto::extension::deflate::{DeflateConfig, DeflatePool};
use sockeye::{Config, Message, Server, WebSocket};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

/// A server whose connections borrow from `pool` and run `handler`; its address.
async fn server_with<F, Fut>(pool: &DeflatePool, high_water: usize, handler: F) -> std::net::SocketAddr
where
    F: Fn(WebSocket<sockeye::TransportStream>) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let config = Config::builder()
        .deflate(Some(DeflateConfig::default().pool(Some(pool.clone()))))
        .write_buffer_high_water(high_water)
        .build();
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let addr = server.local_addr().unwrap();
    let handler = Arc::new(handler);
    tokio::spawn(server.serve(move |ws, _| handler(ws)));
    addr
}

/// A client that compresses with states of its own, so that the pool counts the server's alone.
async fn client(addr: std::net::SocketAddr) -> WebSocket<sockeye::TransportStream> {
    let config = Config::builder()
        .deflate(Some(DeflateConfig::default().pool(None)))
        .build();
    let (ws, _) = sockeye::connect_with(format!("ws://{addr}/"), &config)
        .await
        .unwrap();
    assert!(ws.connection().is_deflate_enabled());
    ws
}

/// Waits until the server's connections hold no state of `pool`, failing after `limit`: an idle
/// connection gives its states back after a linger without input.
async fn all_given_back_within(pool: &DeflatePool, limit: Duration) {
    let quiet = tokio::time::Instant::now();
    while pool.held() != (0, 0) {
        assert!(
            quiet.elapsed() < limit,
            "an idle connection still holds {:?}",
            pool.held()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// An echo handler that answers with `feed` (written when it next waits for input).
async fn echo(mut ws: WebSocket<sockeye::TransportStream>) {
    while let Some(Ok(m)) = ws.next().await {
        if m.is_data() && ws.feed(m).await.is_err() {
            break;
        }
    }
}

/// A busy connection keeps the compression states it borrowed from the pool from one wait for
/// input to the next (a burst of pipelined messages borrows once per wait, not once per message:
/// no pool round trip, reset or priming per message), and an idle one holds none.
#[tokio::test]
async fn a_busy_connection_keeps_its_deflate_states_until_it_waits() {
    const N: usize = 400;
    let pool = DeflatePool::new(8);
    let addr = server_with(&pool, 1 << 20, echo).await;
    let mut ws = client(addr).await;
    for i in 0..N {
        ws.feed(Message::text(text(i))).await.unwrap();
    }
    ws.flush().await.unwrap();
    for i in 0..N {
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text(i)));
    }
    let (compressors, decompressors) = pool.borrows();
    assert!(
        compressors < N as u64 / 4 && decompressors < N as u64 / 4,
        "{N} messages, {:?} borrows: one per wait, not per message",
        pool.borrows()
    );
    // Waiting for input: the server's connection gives its states back after a linger (50 ms
    // by default) without input, at most two lingers after its last input.
    all_given_back_within(&pool, Duration::from_secs(2)).await;
    assert_eq!(pool.idle(), (1, 1));
    // The next echo gets its own states back, context intact (checked by the echo itself).
    ws.send(Message::text(text(1))).await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text(1)));
    ws.close(None).await.unwrap();
}

/// uWebSockets' load test pattern: one message in flight, the next sent when the echo arrives,
/// so the server waits for input after every message. Before the linger each wait gave the
/// states back and the next message borrowed, reset and re-primed them (one borrow per message:
/// 0.76x of uWS at 100 connections); now a connection whose messages come within the linger
/// keeps them, with no deadline moved per message, and gives them back once quiet.
#[tokio::test]
async fn messages_a_few_milliseconds_apart_keep_their_states_through_the_waits() {
    const N: usize = 60;
    let pool = DeflatePool::new(8);
    let addr = server_with(&pool, 1 << 20, echo).await;
    let mut ws = client(addr).await;
    for i in 0..N {
        ws.send(Message::text(text(i))).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text(i)));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The borrows of the first message; a slow machine may let a linger pass between two
    // messages now and then, not at most of them.
    let (compressors, decompressors) = pool.borrows();
    assert!(
        compressors <= 3 && decompressors <= 3,
        "{N} echoes 2 ms apart, {:?} borrows: the states stay through the waits",
        pool.borrows()
    );
    all_given_back_within(&pool, Duration::from_secs(2)).await;
    ws.close(None).await.unwrap();
}

fn text(i: usize) -> String {
    format!("{{\"seq\":{i},\"body\":\"{}\"}}", "salmon run ".repeat(i % 5 + 3))
}

/// The handler's connection is kept open (not dropped, which would give everything back) until
/// the test has looked at the pool.
type Hold = oneshot::Sender<()>;

/// A handler that reads one message and then only sends (a feed of updates after a
/// subscription) never waits for input again. Before, its states stayed out of the pool for as
/// long as it lived: held (1, 1) after its burst. Now they go back once the burst is written and
/// nothing is left to read.
#[tokio::test]
async fn a_handler_that_reads_once_then_only_sends_gives_its_states_back_after_its_burst() {
    const N: usize = 50;
    let pool = DeflatePool::new(8);
    let (done_tx, done_rx) = oneshot::channel::<Hold>();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let addr = server_with(&pool, 1 << 20, move |mut ws| {
        let done = done_tx.lock().unwrap().take();
        async move {
            let first = ws.next().await.unwrap().unwrap();
            assert_eq!(first, Message::text(text(0)));
            for i in 1..=N {
                ws.send(Message::text(text(i))).await.unwrap();
            }
            let (hold, released) = oneshot::channel();
            done.unwrap().send(hold).unwrap();
            let _ = released.await;
            drop(ws);
        }
    })
    .await;
    let mut ws = client(addr).await;
    ws.send(Message::text(text(0))).await.unwrap();
    for i in 1..=N {
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text(i)));
    }
    let hold = done_rx.await.unwrap();
    assert_eq!(pool.borrows().1, 1, "the one message was inflated");
    assert_eq!(pool.held(), (0, 0), "a quiet sender holds no zlib state");
    drop(hold);
}

/// Bytes that arrive with the handshake (a client that sends its first message right behind its
/// request) reach the engine before the application reads anything. A handler that never reads
/// and only sends then counted as busy for life: its compressor stayed out of the pool (held
/// (1, 0) after its burst), bytes being buffered so that it never looked idle either. Now input
/// handed over with the handshake leaves the connection waiting: each message it pushes gives
/// its compressor back.
#[tokio::test]
async fn a_connection_with_bytes_left_over_from_the_handshake_holds_no_state_between_pushes() {
    const N: usize = 20;
    let pool = DeflatePool::new(8);
    let (done_tx, done_rx) = oneshot::channel::<(usize, Hold)>();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let addr = server_with(&pool, 1 << 20, move |mut ws| {
        let done = done_tx.lock().unwrap().take();
        async move {
            let leftover = ws.connection().buffered();
            for i in 0..N {
                ws.send(Message::text(text(i))).await.unwrap();
            }
            let (hold, released) = oneshot::channel();
            done.unwrap().send((leftover, hold)).unwrap();
            let _ = released.await;
            drop(ws);
        }
    })
    .await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    // The request and a masked, compressed "Hello" (RFC 7692 §7.2.3.1) in one write.
    let mut bytes = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Extensions: permessage-deflate\r\n\r\n"
        .to_vec();
    let payload = [0xf2, 0x48, 0xcd, 0xc9, 0xc9, 0x07, 0x00];
    let key = [0x37, 0xfa, 0x21, 0x3d];
    bytes.extend_from_slice(&[0xc1, 0x80 | payload.len() as u8]);
    bytes.extend_from_slice(&key);
    bytes.extend(payload.iter().zip(key.iter().cycle()).map(|(b, k)| b ^ k));
    tcp.write_all(&bytes).await.unwrap();
    let (leftover, hold) = tokio::time::timeout(Duration::from_secs(10), done_rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        leftover,
        2 + 4 + payload.len(),
        "the frame came with the handshake"
    );
    assert_eq!(
        pool.held(),
        (0, 0),
        "a connection that never read holds no zlib state"
    );
    assert_eq!(
        pool.borrows(),
        (N as u64, 0),
        "one borrow per push, nothing inflated"
    );
    drop(hold);
    // The server answered (101 and its messages): it is still there to read.
    let mut head = [0u8; 12];
    tcp.read_exact(&mut head).await.unwrap();
    assert_eq!(&head, b"HTTP/1.1 101");
}

/// An echo handler whose peer sends and never reads ends up waiting for the socket to take its
/// output (write-blocked), not for input. Before, it waited holding both states (1, 1) for as
/// long as the peer stalled; now a wait for the socket gives them back like a wait for input.
#[tokio::test]
async fn a_connection_blocked_on_write_holds_no_state_while_it_waits() {
    let pool = DeflatePool::new(8);
    let echoed = Arc::new(AtomicUsize::new(0));
    let counter = echoed.clone();
    let addr = server_with(&pool, 64 << 10, move |mut ws| {
        let echoed = counter.clone();
        async move {
            while let Some(Ok(m)) = ws.next().await {
                if ws.feed(m).await.is_err() {
                    break;
                }
                echoed.fetch_add(1, Ordering::Relaxed);
            }
        }
    })
    .await;
    let mut ws = client(addr).await;
    // Text that compresses a little (random letters): the sockets fill after some hundreds of
    // messages. The client stops on its own after 20,000 or 30 s, whichever comes first.
    let sender = tokio::spawn(async move {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let started = tokio::time::Instant::now();
        for _ in 0..20_000 {
            let body: String = (0..16 << 10)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    char::from(b'a' + (seed % 26) as u8)
                })
                .collect();
            let fed = tokio::time::timeout(Duration::from_secs(30), ws.feed(Message::text(body))).await;
            if fed.is_err() || started.elapsed() > Duration::from_secs(30) {
                break;
            }
        }
        ws
    });
    // Blocked: no echo for 500 ms while the client still has messages to send.
    let mut last = usize::MAX;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = echoed.load(Ordering::Relaxed);
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    assert!(
        !sender.is_finished(),
        "the client is still sending: the server is blocked"
    );
    assert!(pool.borrows().1 > 0, "the server inflated messages");
    assert_eq!(pool.held(), (0, 0), "blocked on write after {last} echoes");
    sender.abort();
}
