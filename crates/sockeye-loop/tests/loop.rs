//! The loop server, on io_uring and on epoll, against Sockeye's tokio client and raw sockets:
//! echo at every size, the closing handshake, refusals, limits, slow readers, shutdown with 1001.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::{CloseCode, Message};
use sockeye_loop::{Closed, Handler, Listening, Runtime, Sent, Server, Socket};
use support::{rt, runtimes};

/// Echoes data messages; reports each close to the test.
struct Echo {
    closed: mpsc::Sender<Closed>,
}

impl Handler for Echo {
    type Data = ();
    fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
        socket.send(message);
    }
    fn close(&mut self, _: (), closed: Closed) {
        let _ = self.closed.send(closed);
    }
}

fn echo_server(runtime: Runtime, config: sockeye::Config) -> (Listening, mpsc::Receiver<Closed>) {
    let (tx, rx) = mpsc::channel();
    let server = Server::new(config)
        .threads(2)
        .runtime(runtime)
        .listen("127.0.0.1:0", move || Echo { closed: tx.clone() })
        .expect("the server starts");
    assert_eq!(server.runtime(), runtime);
    (server, rx)
}

#[test]
fn echoes_every_size_and_closes_cleanly() {
    for runtime in runtimes() {
        let (server, closed) = echo_server(runtime, sockeye::Config::default());
        let url = format!("ws://{}/", server.local_addr());
        rt().block_on(async {
            let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
            for size in [0, 1, 125, 126, 4095, 4096, 65535, 65536, 1 << 20, 16 << 20] {
                let payload: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
                ws.send(Message::binary(payload.clone())).await.unwrap();
                let back = ws.next().await.unwrap().unwrap();
                assert_eq!(back, Message::binary(payload), "{runtime:?}: {size} bytes");
            }
            // Many small messages in one batch: every one comes back, in order.
            for i in 0..1000 {
                ws.feed(Message::text(format!("m{i}"))).await.unwrap();
            }
            ws.flush().await.unwrap();
            for i in 0..1000 {
                assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(format!("m{i}")));
            }
            ws.close(Some(sockeye::CloseFrame::new(CloseCode::NORMAL, "done")))
                .await
                .unwrap();
            while ws.next().await.is_some() {}
        });
        let closed = closed
            .recv_timeout(Duration::from_secs(5))
            .expect("the handler is told");
        assert_eq!(
            closed.frame.map(|f| f.code),
            Some(CloseCode::NORMAL),
            "{runtime:?}"
        );
        assert!(closed.error.is_none(), "{runtime:?}: {:?}", closed.error);
        server.shutdown().unwrap();
    }
}

/// Keeps every data message it receives, and sends them all back when told "done".
#[derive(Default)]
struct Keeper;

impl Handler for Keeper {
    type Data = Vec<Message>;
    fn message(&mut self, socket: &mut Socket<'_, Vec<Message>>, message: Message) {
        if message == Message::text("done") {
            for kept in std::mem::take(socket.data_mut()) {
                socket.send(kept);
            }
        } else {
            socket.data_mut().push(message);
        }
    }
}

/// Large receives are handed to the engine in the loop's own receive buffers (io_uring's
/// provided buffers, given away and replaced): a message the application keeps must stay as it
/// arrived while the loop receives on, whatever the sizes, and however the frames share reads.
#[test]
fn messages_kept_by_the_handler_stay_intact_while_more_arrive() {
    for runtime in runtimes() {
        let server = Server::new(sockeye::Config::default())
            .threads(1)
            .runtime(runtime)
            .listen("127.0.0.1:0", || Keeper)
            .expect("the server starts");
        let url = format!("ws://{}/", server.local_addr());
        // Around the loop's thresholds (a quarter of a 32 KiB receive buffer, the buffer
        // itself) and between them: frames alone in a read, several to a read, across reads.
        let sizes = [
            8 << 10,
            20,
            (8 << 10) - 1,
            32 << 10,
            16 << 10,
            1,
            40 << 10,
            9000,
            0,
            24 << 10,
        ];
        // Incompressible, so that permessage-deflate leaves the sizes as they are.
        let payload = |i: usize| noise(i as u64, sizes[i % sizes.len()]);
        rt().block_on(async {
            let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
            for i in 0..300 {
                ws.feed(Message::binary(payload(i))).await.unwrap();
                if i % 7 == 0 {
                    // Some alone, some batched.
                    ws.flush().await.unwrap();
                }
            }
            ws.send(Message::text("done")).await.unwrap();
            for i in 0..300 {
                let back = ws.next().await.unwrap().unwrap();
                assert!(
                    back == Message::binary(payload(i)),
                    "{runtime:?}: message {i} ({} bytes) changed while kept",
                    sizes[i % sizes.len()]
                );
            }
            ws.close(None).await.unwrap();
        });
        server.shutdown().unwrap();
    }
}

#[test]
fn many_clients_at_once_on_both_threads() {
    for runtime in runtimes() {
        let (server, _closed) = echo_server(runtime, sockeye::Config::default());
        let url = format!("ws://{}/", server.local_addr());
        rt().block_on(async {
            let clients = (0..50).map(|c| {
                let url = url.clone();
                async move {
                    let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
                    for i in 0..100 {
                        ws.send(Message::text(format!("{c}:{i}"))).await.unwrap();
                        assert_eq!(
                            ws.next().await.unwrap().unwrap(),
                            Message::text(format!("{c}:{i}"))
                        );
                    }
                    ws.close(None).await.unwrap();
                }
            });
            futures_util::future::join_all(clients).await;
        });
        server.shutdown().unwrap();
    }
}

/// A raw request, and the whole answer until the server closes.
fn raw_exchange(addr: std::net::SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn an_http2_client_is_told_http_1_1_is_required() {
    for runtime in runtimes() {
        let (server, _closed) = echo_server(runtime, sockeye::Config::default());
        let answer = raw_exchange(server.local_addr(), b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
        let answer = answer.as_bytes();
        // An empty SETTINGS frame, then GOAWAY (type 7) whose error code is HTTP_1_1_REQUIRED.
        assert_eq!(answer.len(), 26, "{runtime:?}: {answer:?}");
        assert_eq!(answer[3], 0x4, "{runtime:?}");
        assert_eq!(answer[12], 0x7, "{runtime:?}");
        assert_eq!(answer[22..26], [0, 0, 0, 0xd], "{runtime:?}");
        server.shutdown().unwrap();
    }
}

#[test]
fn invalid_upgrades_are_refused_with_their_status() {
    for runtime in runtimes() {
        let (server, _closed) = echo_server(runtime, sockeye::Config::default());
        let addr = server.local_addr();
        let answer = raw_exchange(addr, b"POST / HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(answer.starts_with("HTTP/1.1 405"), "{runtime:?}: {answer}");
        let answer = raw_exchange(
            addr,
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 426"), "{runtime:?}: {answer}");
        assert!(
            answer.to_ascii_lowercase().contains("sec-websocket-version: 13"),
            "{answer}"
        );
        let huge = format!("GET / HTTP/1.1\r\nX: {}\r\n", "a".repeat(20_000));
        let answer = raw_exchange(addr, huge.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 431"), "{runtime:?}: {answer}");
        server.shutdown().unwrap();
    }
}

/// Refuses every path but /chat, with 404.
struct OnlyChat;

impl Handler for OnlyChat {
    type Data = ();
    fn upgrade(
        &mut self,
        request: &http::Request<()>,
        response: http::Response<()>,
    ) -> Result<(http::Response<()>, ()), http::Response<String>> {
        if request.uri().path() == "/chat" {
            return Ok((response, ()));
        }
        let mut refusal = http::Response::new("no such endpoint\n".to_string());
        *refusal.status_mut() = http::StatusCode::NOT_FOUND;
        Err(refusal)
    }
    fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
        socket.send(message);
    }
}

#[test]
fn the_handler_decides_the_upgrade() {
    for runtime in runtimes() {
        let server = Server::new(sockeye::Config::default())
            .threads(1)
            .runtime(runtime)
            .listen("127.0.0.1:0", || OnlyChat)
            .unwrap();
        let addr = server.local_addr();
        rt().block_on(async {
            let refused = sockeye::connect(format!("ws://{addr}/other").as_str()).await;
            let error = refused.expect_err("refused").to_string();
            assert!(error.contains("404"), "{runtime:?}: {error}");
            let (mut ws, _) = sockeye::connect(format!("ws://{addr}/chat").as_str())
                .await
                .unwrap();
            ws.send("hi").await.unwrap();
            assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
        });
        server.shutdown().unwrap();
    }
}

#[test]
fn a_client_that_never_finishes_its_request_is_cut_off() {
    for runtime in runtimes() {
        let config = sockeye::Config::builder()
            .handshake_timeout(Duration::from_millis(300))
            .build();
        let (server, _closed) = echo_server(runtime, config);
        let started = std::time::Instant::now();
        let answer = raw_exchange(server.local_addr(), b"GET / HTTP/1.1\r\nHost: x\r\n");
        assert_eq!(answer, "", "{runtime:?}: closed unanswered");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{runtime:?}: {:?}",
            started.elapsed()
        );
        server.shutdown().unwrap();
    }
}

#[test]
fn beyond_the_connection_limit_clients_are_told_503() {
    for runtime in runtimes() {
        let config = sockeye::Config::builder().max_connections(2).build();
        let (server, _closed) = echo_server(runtime, config);
        let url = format!("ws://{}/", server.local_addr());
        rt().block_on(async {
            let (_a, _) = sockeye::connect(url.as_str()).await.unwrap();
            let (_b, _) = sockeye::connect(url.as_str()).await.unwrap();
            let third = sockeye::connect(url.as_str()).await;
            let error = third.expect_err("refused").to_string();
            assert!(error.contains("503"), "{runtime:?}: {error}");
        });
        server.shutdown().unwrap();
    }
}

#[test]
fn shutdown_closes_every_connection_with_1001() {
    for runtime in runtimes() {
        let (server, _closed) = echo_server(runtime, sockeye::Config::default());
        let url = format!("ws://{}/", server.local_addr());
        let rt = rt();
        let mut clients = Vec::new();
        for _ in 0..10 {
            clients.push(rt.block_on(sockeye::connect(url.as_str())).unwrap().0);
        }
        let stopper = std::thread::spawn(move || server.shutdown());
        rt.block_on(async {
            for mut ws in clients {
                match ws.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::GOING_AWAY),
                    other => panic!("{runtime:?}: expected a 1001 close, got {other:?}"),
                }
                while ws.next().await.is_some() {}
            }
        });
        stopper.join().unwrap().unwrap();
    }
}

/// Sends as fast as it can while the peer reads nothing; counts backpressure and drains.
#[derive(Default)]
struct Flood {
    report: Option<mpsc::Sender<(usize, usize)>>,
}

#[derive(Default)]
struct Sending {
    backpressured: usize,
}

impl Handler for Flood {
    type Data = Sending;
    fn open(&mut self, socket: &mut Socket<'_, Sending>) {
        self.fill(socket);
    }
    fn message(&mut self, _: &mut Socket<'_, Sending>, _: Message) {}
    fn drain(&mut self, socket: &mut Socket<'_, Sending>) {
        if let Some(report) = &self.report {
            let _ = report.send((socket.data().backpressured, socket.buffered_amount()));
        }
        self.fill(socket);
    }
}

/// `len` bytes permessage-deflate cannot shrink (xorshift noise from `seed`): the flood's
/// 1,000-byte messages are 1,000 bytes on the wire too, so what the client reads is what the
/// server's socket gives up. (Of
/// a run of one byte value, 8,000 messages were 112 KB on the wire: all already in the client's
/// receive buffer, which the kernel may let grow to 32 MiB, so reading them freed nothing on
/// the server's side and no drain came.)
fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15 ^ seed;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

impl Flood {
    fn fill(&mut self, socket: &mut Socket<'_, Sending>) {
        loop {
            match socket.send(Message::binary(noise(0, 1000))) {
                Sent::Queued => {}
                Sent::Backpressure => {
                    socket.data_mut().backpressured += 1;
                    return;
                }
                other => panic!("{other:?}"),
            }
        }
    }
}

#[test]
fn a_slow_reader_gets_backpressure_then_drain() {
    for runtime in runtimes() {
        let (tx, rx) = mpsc::channel();
        let config = sockeye::Config::builder()
            .write_buffer_high_water(64 << 10)
            .build();
        let server = Server::new(config)
            .threads(1)
            .runtime(runtime)
            .listen("127.0.0.1:0", move || Flood {
                report: Some(tx.clone()),
            })
            .unwrap();
        let url = format!("ws://{}/", server.local_addr());
        rt().block_on(async {
            let (mut ws, _) = sockeye::connect(url.as_str()).await.unwrap();
            // Nothing read: the server sends only as the kernel's socket buffers take bytes (on
            // loopback they keep taking a trickle, as the receiver's queue is collapsed), each
            // drain after one backpressure, with the queue below the high water mark again.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let mut drains = 0;
            while let Ok((backpressured, buffered)) = rx.try_recv() {
                drains += 1;
                assert!(
                    drains < 1000,
                    "{runtime:?}: 64 MiB sent to a client that reads nothing"
                );
                assert_eq!(backpressured, drains, "{runtime:?}");
                assert!(buffered <= 64 << 10, "{runtime:?}: {buffered}");
            }
            // Reading: drains come again, once the client has taken what the kernel holds
            // between the two (its receive buffer may grow to 32 MiB: at most 64 MiB read, 30 s).
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            let mut read = 0usize;
            let backpressured = loop {
                if let Ok((backpressured, _)) = rx.try_recv() {
                    break backpressured;
                }
                assert!(
                    read < 64 << 20 && std::time::Instant::now() < deadline,
                    "{runtime:?}: no drain after reading {read} bytes ({drains} drains before)"
                );
                match tokio::time::timeout(Duration::from_secs(5), ws.next()).await {
                    Ok(Some(Ok(m))) => read += m.as_payload().len(),
                    Ok(other) => panic!("{runtime:?}: {other:?}"),
                    // Nothing to read: the server's next write is what must come.
                    Err(_) => {}
                }
            };
            assert!(backpressured > drains, "{runtime:?}");
        });
        server.shutdown().unwrap();
    }
}

#[test]
fn a_peer_that_sends_but_never_reads_is_not_buffered_without_end() {
    for runtime in runtimes() {
        let config = sockeye::Config::builder()
            .write_buffer_high_water(64 << 10)
            .build();
        let (server, _closed) = echo_server(runtime, config);
        // A raw client: its echoes pile up unread; the server must stop reading it rather than
        // queue its echoes without end. Its writes then block: a bounded number get through.
        let mut stream = TcpStream::connect(server.local_addr()).unwrap();
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            .unwrap();
        stream
            .set_write_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        // A masked 16 KiB binary frame (mask key 0: the payload as is).
        let mut frame = vec![0x82, 0xfe, 0x40, 0x00, 0, 0, 0, 0];
        frame.extend(std::iter::repeat_n(7u8, 16 << 10));
        let mut sent = 0usize;
        while sent < (1 << 30) && stream.write_all(&frame).is_ok() {
            sent += frame.len();
        }
        assert!(
            sent < 256 << 20,
            "{runtime:?}: the server read {sent} bytes it could not echo"
        );
        server.shutdown().unwrap();
    }
}
