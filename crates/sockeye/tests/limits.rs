//! Limits, timeouts, backpressure and graceful shutdown, over real loopback sockets.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::{CloseCode, Config, Error, HandshakeError, Message, ProtocolConfig, ProtocolViolation, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n";

/// Counts live handler tasks: incremented on creation, decremented on drop (also on abort).
#[derive(Clone, Default)]
struct Live(Arc<AtomicUsize>);

struct LiveGuard(Arc<AtomicUsize>);

impl Live {
    fn enter(&self) -> LiveGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        LiveGuard(Arc::clone(&self.0))
    }
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Drop for LiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An echo server; returns its URL, its shutdown handle, the live-handler counter and its task.
async fn echo_server(
    config: Config,
) -> (
    String,
    sockeye::ShutdownHandle,
    Live,
    tokio::task::JoinHandle<std::io::Result<()>>,
) {
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    let shutdown = server.shutdown_handle();
    let live = Live::default();
    let counter = live.clone();
    let task = tokio::spawn(server.serve(move |mut ws, _| {
        let guard = counter.enter();
        async move {
            let _guard = guard;
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        }
    }));
    (url, shutdown, live, task)
}

/// Waits until `check` holds, polling, for at most 5 s.
async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A raw TCP client that completes the opening handshake and returns the socket.
async fn raw_upgraded(url: &str) -> TcpStream {
    let addr = url.trim_start_matches("ws://").trim_end_matches('/');
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(format!("{UPGRADE}\r\n").as_bytes()).await.unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        tcp.read_exact(&mut byte).await.unwrap();
        head.push(byte[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 101"));
    tcp
}

#[tokio::test]
async fn keepalive_pings_an_idle_peer_and_drops_a_dead_one() {
    // A timeout generous for a loaded machine: a live client's pong may be late, never lost.
    let config = Config::builder()
        .keepalive(Some(Duration::from_millis(200)))
        .keepalive_timeout(Duration::from_secs(1))
        .build();
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    let (ended_tx, mut ended) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let ended_tx = ended_tx.clone();
        async move {
            let started = Instant::now();
            let mut last = None;
            while let Some(item) = ws.recv().await {
                last = Some(item);
            }
            let _ = ended_tx.send((started.elapsed(), last));
        }
    }));

    // A live client (keepalive off on its side) answers the server's pings and stays connected.
    let quiet = Config::builder().keepalive(None).build();
    let (mut client, _) = sockeye::connect_with(url.as_str(), &quiet).await.unwrap();
    let mut pings = 0;
    let until = Instant::now() + Duration::from_millis(1500);
    while let Ok(Some(Ok(message))) = tokio::time::timeout_at(until.into(), client.recv()).await {
        assert!(matches!(message, Message::Ping(_)), "{message:?}");
        pings += 1;
    }
    assert!(
        pings >= 3,
        "only {pings} keepalive pings in 1.5 s (one each 200 ms of quiet)"
    );
    assert!(ended.try_recv().is_err(), "the server dropped a live client");

    // A dead client: handshake, then silence. The server gives up after interval + timeout.
    let dead = raw_upgraded(&url).await;
    let (elapsed, last) = tokio::time::timeout(Duration::from_secs(10), ended.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&last, Some(Err(e)) if e.timeout() == Some(sockeye::TimeoutCause::Keepalive)),
        "{last:?}"
    );
    assert!(
        elapsed >= Duration::from_millis(1200) && elapsed < Duration::from_secs(6),
        "{elapsed:?}"
    );
    drop(dead);
    client.close(None).await.unwrap();
}

#[tokio::test]
async fn over_the_connection_limit_clients_get_503_until_a_slot_frees() {
    let (url, _shutdown, live, _task) = echo_server(Config::builder().max_connections(2).build()).await;
    let (mut a, _) = sockeye::connect(url.as_str()).await.unwrap();
    let (_b, _) = sockeye::connect(url.as_str()).await.unwrap();
    match sockeye::connect(url.as_str()).await {
        Err(Error::WebSocket(sockeye::ProtocolError::Handshake(HandshakeError::Rejected {
            status: 503,
            ..
        }))) => {}
        other => panic!("expected 503, got {other:?}"),
    }
    // The refused client did not take a slot; a closed one gives its slot back.
    a.close(None).await.unwrap();
    eventually("the closed connection's handler ends", || live.count() == 1).await;
    let (mut c, _) = sockeye::connect(url.as_str()).await.unwrap();
    c.send("still serving").await.unwrap();
    assert_eq!(c.recv().await.unwrap().unwrap(), Message::text("still serving"));
}

#[tokio::test]
async fn graceful_shutdown_closes_every_connection_with_1001_and_leaks_no_task() {
    let config = Config::builder()
        .shutdown_timeout(Duration::from_millis(500))
        .build();
    let (url, shutdown, live, task) = echo_server(config).await;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
        ws.send("hi").await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("hi"));
        clients.push(ws);
    }
    // One more peer that completes the handshake and then never reads or answers.
    let stuck = raw_upgraded(&url).await;
    eventually("four handlers run", || live.count() == 4).await;

    let started = Instant::now();
    shutdown.shutdown();
    for ws in &mut clients {
        match ws.recv().await {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::GOING_AWAY),
            other => panic!("expected close 1001, got {other:?}"),
        }
        assert!(ws.recv().await.is_none());
    }
    // `serve` returns once the stuck peer is dropped at the deadline; no handler is left.
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "the stuck peer was waited for"
    );
    assert_eq!(live.count(), 0);
    assert!(
        sockeye::connect(url.as_str()).await.is_err(),
        "the listener is closed"
    );
    drop(stuck);
}

#[tokio::test]
async fn try_send_reports_a_full_buffer_send_waits_and_nothing_is_lost() {
    let high_water = 64 << 10;
    // Uncompressed, so that the bytes queued are the bytes sent.
    let protocol = {
        let mut c = ProtocolConfig::default();
        c.deflate = None;
        c
    };
    let config = Config::builder()
        .write_buffer_high_water(high_water)
        .protocol(protocol)
        .build();
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    let (report_tx, report) = tokio::sync::oneshot::channel();
    let report_tx = Arc::new(std::sync::Mutex::new(Some(report_tx)));
    tokio::spawn(server.serve(move |mut ws, _| {
        let report_tx = Arc::clone(&report_tx);
        async move {
            let payload = vec![7u8; 1024];
            let mut queued = 0u32;
            let mut max_buffered = 0;
            // Fill the socket and then our buffer: try_send refuses at the high-water mark.
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                let mut message = payload.clone();
                message[..4].copy_from_slice(&queued.to_be_bytes());
                match ws.try_send(message) {
                    Ok(()) => queued += 1,
                    Err(Error::WriteBufferFull) => {
                        // Let the socket take what it can; stop once it takes nothing more.
                        let before = ws.buffered_amount();
                        let _ = tokio::time::timeout(Duration::from_millis(50), ws.flush()).await;
                        if ws.buffered_amount() >= before || Instant::now() > deadline {
                            break;
                        }
                    }
                    Err(e) => panic!("{e:?}"),
                }
                max_buffered = max_buffered.max(ws.buffered_amount());
            }
            // send waits while the peer does not read.
            let mut last = payload.clone();
            last[..4].copy_from_slice(&queued.to_be_bytes());
            let waited = tokio::time::timeout(Duration::from_millis(300), ws.send(last)).await;
            // The timed-out send had queued its message; it is written later, not lost.
            queued += 1;
            report_tx
                .lock()
                .unwrap()
                .take()
                .unwrap()
                .send((queued, max_buffered, waited.is_err()))
                .unwrap();
            ws.flush().await.unwrap();
            ws.close(None).await.unwrap();
        }
    }));
    let (mut client, _) = sockeye::connect(url.as_str()).await.unwrap();
    let (queued, max_buffered, waited) = report.await.unwrap();
    assert!(waited, "send returned while the peer was not reading");
    assert!(max_buffered < high_water + 1100, "buffer grew to {max_buffered}");
    assert!(queued as usize > high_water / 1024, "only {queued} messages fit");
    // Now read: every message arrives, in order.
    let mut next = 0u32;
    while let Some(item) = client.recv().await {
        match item.unwrap() {
            Message::Binary(b) => {
                assert_eq!(u32::from_be_bytes(b[..4].try_into().unwrap()), next);
                next += 1;
            }
            Message::Close(_) => {}
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(next, queued);
}

/// Sends `request` plus `extra` on a raw socket and returns all the server sent back.
async fn raw_reply(url: &str, request: &[u8]) -> Vec<u8> {
    let addr = url.trim_start_matches("ws://").trim_end_matches('/');
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let _ = tcp.write_all(request).await;
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out))
        .await
        .unwrap();
    out
}

#[tokio::test]
async fn handshake_size_and_header_count_limits_answer_431() {
    let protocol = {
        let mut c = ProtocolConfig::default();
        c.max_handshake_size = 2048;
        c.max_handshake_headers = 16;
        c
    };
    let (url, _shutdown, _live, _task) = echo_server(Config::builder().protocol(protocol).build()).await;
    let big = format!("{UPGRADE}X-Big: {}\r\n\r\n", "a".repeat(3000));
    let reply = raw_reply(&url, big.as_bytes()).await;
    assert!(
        reply.starts_with(b"HTTP/1.1 431 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let many: String = (0..20).map(|i| format!("X-{i}: 1\r\n")).collect();
    let reply = raw_reply(&url, format!("{UPGRADE}{many}\r\n").as_bytes()).await;
    assert!(
        reply.starts_with(b"HTTP/1.1 431 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    // Within the limits, the same server upgrades.
    drop(raw_upgraded(&url).await);
}

#[tokio::test]
async fn message_and_frame_limits_close_with_1009_before_the_memory_is_spent() {
    // Uncompressed, so that frame sizes on the wire are the sizes sent (inflated sizes are limited
    // the same way; see the engine's deflate tests).
    let protocol = {
        let mut c = ProtocolConfig::default();
        c.max_message_size = 1000;
        c.max_frame_size = 600;
        c.deflate = None;
        c
    };
    let server = Server::bind("127.0.0.1:0", Config::builder().protocol(protocol).build())
        .await
        .unwrap();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve(move |mut ws, _| {
        let seen_tx = seen_tx.clone();
        async move {
            while let Some(item) = ws.recv().await {
                let _ = seen_tx.send(item.map(|m| m.as_payload().len()));
            }
        }
    }));
    // One frame over the frame limit.
    let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
    ws.send(vec![0u8; 700]).await.unwrap();
    expect_too_big(&mut ws, &mut seen, 700, 600).await;
    // Fragments each within the frame limit, together over the message limit: refused at the
    // fragment that crosses it.
    let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
    let chunk = sockeye::Bytes::from(vec![1u8; 600]);
    ws.send_fragment(sockeye::DataKind::Binary, chunk.clone(), false)
        .await
        .unwrap();
    ws.send_fragment(sockeye::DataKind::Binary, chunk, true)
        .await
        .unwrap();
    ws.flush().await.unwrap();
    expect_too_big(&mut ws, &mut seen, 1200, 1000).await;
}

/// The client is closed with 1009 and the server's handler saw `MessageTooBig { size, limit }`.
async fn expect_too_big(
    ws: &mut sockeye::WebSocket<sockeye::TransportStream>,
    seen: &mut tokio::sync::mpsc::UnboundedReceiver<Result<usize, Error>>,
    size: u64,
    limit: usize,
) {
    let close = ws.recv().await;
    assert!(
        matches!(&close, Some(Ok(Message::Close(Some(f)))) if f.code == CloseCode::MESSAGE_TOO_BIG),
        "{close:?}"
    );
    let err = seen.recv().await.unwrap().unwrap_err();
    assert!(
        matches!(err.protocol_violation(), Some(&ProtocolViolation::MessageTooBig { size: s, limit: l }) if s == size && l == limit),
        "{err:?}"
    );
    // Our limit, not the peer's violation (issue 13).
    let text = err.to_string();
    assert!(
        text.starts_with(&format!(
            "message of {size} bytes exceeds this endpoint's limit of {limit} bytes"
        )) && text.contains("max_message_size"),
        "{text}"
    );
}

#[tokio::test]
async fn failed_handshakes_and_refusals_are_counted() {
    let server = Server::bind(
        "127.0.0.1:0",
        Config::builder()
            .max_connections(1)
            .handshake_timeout(Duration::from_millis(300))
            .build(),
    )
    .await
    .unwrap();
    let stats = server.stats();
    let url = format!("ws://{}/", server.local_addr().unwrap());
    tokio::spawn(server.serve(|mut ws, _| async move { while let Some(Ok(_)) = ws.next().await {} }));
    assert_eq!((stats.handshake_failures(), stats.refused()), (0, 0));

    // Not an upgrade: answered 400, and counted.
    let reply = raw_reply(&url, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(
        reply.starts_with(b"HTTP/1.1 400 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    eventually("the 400 is counted", || stats.handshake_failures() == 1).await;
    // A client that goes away in the middle of its request.
    let mut tcp = TcpStream::connect(url.trim_start_matches("ws://").trim_end_matches('/'))
        .await
        .unwrap();
    tcp.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    drop(tcp);
    eventually("the abandoned handshake is counted", || {
        stats.handshake_failures() == 2
    })
    .await;
    // A slowloris, cut off at the handshake timeout.
    let mut slow = TcpStream::connect(url.trim_start_matches("ws://").trim_end_matches('/'))
        .await
        .unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    eventually("the timed-out handshake is counted", || {
        stats.handshake_failures() == 3
    })
    .await;

    // A good client is not counted; one over the limit is refused, not failed.
    let (_held, _) = sockeye::connect(url.as_str()).await.unwrap();
    match sockeye::connect(url.as_str()).await {
        Err(Error::WebSocket(sockeye::ProtocolError::Handshake(HandshakeError::Rejected {
            status: 503,
            ..
        }))) => {}
        other => panic!("expected 503, got {other:?}"),
    }
    eventually("the refusal is counted", || stats.refused() == 1).await;
    assert_eq!(stats.handshake_failures(), 3);
    drop(slow);
}

/// Over the limit, cleartext clients are answered 503 by a bounded number of small tasks (64):
/// a flood of silent clients beyond that is closed at once, without a task each.
#[tokio::test]
async fn a_flood_over_the_limit_costs_a_bounded_number_of_tasks() {
    let (url, _shutdown, _live, _task) = echo_server(Config::builder().max_connections(1).build()).await;
    let addr = url.trim_start_matches("ws://").trim_end_matches('/').to_string();
    let (_held, _) = sockeye::connect(url.as_str()).await.unwrap();
    let tasks = || tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let before = tasks();
    // Silent clients: each refusal waits for a request that does not come.
    let mut silent = Vec::new();
    for _ in 0..64 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    eventually("64 refusals wait for their requests", || tasks() == before + 64).await;
    let mut one_more = TcpStream::connect(&addr).await.unwrap();
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(2), one_more.read(&mut byte))
        .await
        .expect("closed at once");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert_eq!(tasks(), before + 64);
    // A waiting refusal still answers 503 once its request arrives.
    silent[0]
        .write_all(format!("{UPGRADE}\r\n").as_bytes())
        .await
        .unwrap();
    let mut reply = Vec::new();
    silent[0].read_to_end(&mut reply).await.unwrap();
    assert!(
        reply.starts_with(b"HTTP/1.1 503 "),
        "{}",
        String::from_utf8_lossy(&reply)
    );
}
