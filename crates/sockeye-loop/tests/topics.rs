//! Topics on the loop server, on io_uring and on epoll, two loop threads: publications from a
//! handler reach every other subscriber on both threads; a `ServerHandle` publishes and sends
//! from outside the loop, in order; unsubscribing and closing end deliveries; a subscriber that
//! does not read is closed at the backlog limit while the others get everything.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::Message;
use sockeye_loop::{
    Closed, Handler, Listening, PublishError, Runtime, Server, ServerHandle, Socket, SocketId,
};
use support::{rt, runtimes};

/// A chat room: every connection subscribes to "room" and is told its thread; "pub:…" is
/// published to the room, "unsub" unsubscribes, "bad" tries what must fail.
struct Room {
    ids: mpsc::Sender<SocketId>,
    closed: mpsc::Sender<Closed>,
}

impl Handler for Room {
    type Data = ();
    fn open(&mut self, socket: &mut Socket<'_, ()>) {
        assert!(socket.subscribe("room"));
        assert!(!socket.subscribe("room"), "subscribed twice");
        let _ = self.ids.send(socket.id());
        socket.send(format!("thread {}", socket.id().thread()));
    }
    fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
        let Message::Text(text) = message else { return };
        if let Some(body) = text.strip_prefix("pub:") {
            socket.publish("room", body.to_string()).unwrap();
        } else if let Some(body) = text.strip_prefix("all:") {
            socket.publish_to_all("room", body.to_string()).unwrap();
        } else if text == "unsub" {
            assert!(socket.unsubscribe("room"));
            assert!(!socket.is_subscribed("room"));
            socket.send("unsubscribed");
        } else if text == "bad" {
            assert_eq!(socket.publish("", "x"), Err(PublishError::BadTopic));
            assert_eq!(
                socket.publish("room", Message::Ping(Default::default())),
                Err(PublishError::NotData)
            );
            assert!(!socket.subscribe(&"t".repeat(300)));
            socket.send("bad ok");
        }
    }
    fn close(&mut self, _: (), closed: Closed) {
        let _ = self.closed.send(closed);
    }
}

struct Running {
    server: Listening,
    ids: mpsc::Receiver<SocketId>,
    closed: mpsc::Receiver<Closed>,
}

fn room(runtime: Runtime, max_backlog: usize) -> Running {
    let (ids_tx, ids) = mpsc::channel();
    let (closed_tx, closed) = mpsc::channel();
    let server = Server::new(sockeye::Config::default())
        .threads(2)
        .runtime(runtime)
        .max_backlog(max_backlog)
        .listen("127.0.0.1:0", move || Room {
            ids: ids_tx.clone(),
            closed: closed_tx.clone(),
        })
        .unwrap();
    Running { server, ids, closed }
}

type Ws = sockeye::WebSocket<sockeye::TransportStream>;

async fn next_text(ws: &mut Ws) -> String {
    match tokio::time::timeout(Duration::from_secs(10), ws.next()).await {
        Ok(Some(Ok(Message::Text(t)))) => t.to_string(),
        other => panic!("expected a text message, got {other:?}"),
    }
}

/// Connects `n` clients; returns them and the threads they landed on.
async fn join(url: &str, n: usize) -> (Vec<Ws>, Vec<String>) {
    let mut clients = Vec::new();
    let mut threads = Vec::new();
    for _ in 0..n {
        let (mut ws, _) = sockeye::connect(url).await.unwrap();
        threads.push(next_text(&mut ws).await);
        clients.push(ws);
    }
    (clients, threads)
}

#[test]
fn a_publication_reaches_every_other_subscriber_on_every_thread() {
    for runtime in runtimes() {
        let running = room(runtime, sockeye_loop::DEFAULT_MAX_BACKLOG);
        let url = format!("ws://{}/", running.server.local_addr());
        rt().block_on(async {
            let (mut clients, threads) = join(&url, 24).await;
            // SO_REUSEPORT spreads connections by hash: both threads hold some (all 24 on one
            // would be a 1 in 8 million chance).
            assert!(
                threads.contains(&"thread 0".into()) && threads.contains(&"thread 1".into()),
                "{threads:?}"
            );
            for round in 0..3 {
                let sender = round * 5;
                clients[sender]
                    .send(Message::text(format!("pub:hello {round}")))
                    .await
                    .unwrap();
                for (n, ws) in clients.iter_mut().enumerate() {
                    if n != sender {
                        assert_eq!(
                            next_text(ws).await,
                            format!("hello {round}"),
                            "{runtime:?}: client {n}"
                        );
                    }
                }
            }
            // The publisher got none of its own: the next thing it hears is this answer.
            clients[0].send(Message::text("bad")).await.unwrap();
            assert_eq!(next_text(&mut clients[0]).await, "bad ok", "{runtime:?}");
            // Published to all: the sender too, once, before anything sent after it.
            clients[7].send(Message::text("all:everyone")).await.unwrap();
            clients[7].send(Message::text("bad")).await.unwrap();
            for (n, ws) in clients.iter_mut().enumerate() {
                assert_eq!(next_text(ws).await, "everyone", "{runtime:?}: client {n}");
            }
            assert_eq!(next_text(&mut clients[7]).await, "bad ok", "{runtime:?}");
        });
        running.server.shutdown().unwrap();
    }
}

#[test]
fn a_server_handle_publishes_and_sends_from_outside_in_order() {
    for runtime in runtimes() {
        let running = room(runtime, sockeye_loop::DEFAULT_MAX_BACKLOG);
        let url = format!("ws://{}/", running.server.local_addr());
        let handle: ServerHandle = running.server.handle();
        rt().block_on(async {
            let (mut clients, _) = join(&url, 8).await;
            let ids: Vec<SocketId> = (0..8).map(|_| running.ids.recv().unwrap()).collect();
            // From a tokio task: 1,000 publications, each delivered to all 8, in order.
            let publisher = handle.clone();
            tokio::spawn(async move {
                for i in 0..1000 {
                    loop {
                        match publisher.publish("room", format!("n{i}")) {
                            Ok(()) => break,
                            Err(PublishError::Overloaded) => tokio::task::yield_now().await,
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            })
            .await
            .unwrap();
            for ws in clients.iter_mut() {
                for i in 0..1000 {
                    assert_eq!(next_text(ws).await, format!("n{i}"), "{runtime:?}");
                }
            }
            // A send reaches the one connection named. Which client holds which id is learnt by
            // sending to each in turn.
            for (n, id) in ids.iter().enumerate() {
                handle.send(*id, format!("to {n}")).unwrap();
            }
            let mut told: Vec<String> = Vec::new();
            for ws in clients.iter_mut() {
                told.push(next_text(ws).await);
            }
            told.sort();
            let mut expected: Vec<String> = (0..8).map(|n| format!("to {n}")).collect();
            expected.sort();
            assert_eq!(told, expected, "{runtime:?}");
            // Unsubscribed: publications stop (the next thing heard is a send).
            clients[0].send(Message::text("unsub")).await.unwrap();
            assert_eq!(next_text(&mut clients[0]).await, "unsubscribed");
            handle.publish("room", "after unsub").unwrap();
            for ws in clients.iter_mut().skip(1) {
                assert_eq!(next_text(ws).await, "after unsub");
            }
            // A closed connection's id reaches no one, not even a later connection in its slot.
            let mut gone = clients.pop().unwrap();
            gone.close(None).await.unwrap();
            while gone.next().await.is_some() {}
            running.closed.recv_timeout(Duration::from_secs(5)).unwrap();
            let (mut newcomer, _) = join(&url, 1).await;
            let newcomer_id = running.ids.recv().unwrap();
            assert_ne!(Some(newcomer_id), ids.last().copied());
            handle.send(ids[7], "to the departed").unwrap();
            handle.send(newcomer_id, "welcome").unwrap();
            assert_eq!(next_text(&mut newcomer[0]).await, "welcome");
            assert_eq!(handle.publish("", "x"), Err(PublishError::BadTopic));
            assert_eq!(
                handle.send(newcomer_id, Message::Ping(Default::default())),
                Err(PublishError::NotData)
            );
        });
        running.server.shutdown().unwrap();
        assert_eq!(handle.publish("room", "late"), Err(PublishError::Stopped));
    }
}

#[test]
fn a_subscriber_that_does_not_read_is_closed_at_the_backlog_limit() {
    for runtime in runtimes() {
        let running = room(runtime, 256 << 10);
        let addr = running.server.local_addr();
        // A raw client that upgrades (and so subscribes), then never reads.
        let mut stalled = TcpStream::connect(addr).unwrap();
        stalled
            .write_all(
                b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                  Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
            )
            .unwrap();
        let stalled_id = running.ids.recv_timeout(Duration::from_secs(5)).unwrap();
        let handle = running.server.handle();
        let url = format!("ws://{addr}/");
        rt().block_on(async {
            let (mut reader, _) = join(&url, 1).await;
            let _reader_id = running.ids.recv().unwrap();
            // 16 MiB published in 4 KiB messages: far past the stalled one's 256 KiB limit and
            // whatever the socket buffers hold; the reader reads along and gets every one.
            let payload = "x".repeat(4096);
            let total = 4096;
            let reading = async {
                for i in 0..total {
                    let text = next_text(&mut reader[0]).await;
                    assert_eq!(
                        text.len(),
                        4096 + format!("{i}").len(),
                        "{runtime:?}: message {i}"
                    );
                }
            };
            let publishing = async {
                for i in 0..total {
                    loop {
                        match handle.publish("room", format!("{i}{payload}")) {
                            Ok(()) => break,
                            Err(PublishError::Overloaded) => {
                                tokio::time::sleep(Duration::from_millis(1)).await
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            };
            tokio::join!(reading, publishing);
        });
        // Dropped: what its socket already held, then 1008 once it reads again (the backlog
        // itself is not sent: far less than the 16 MiB published arrives).
        stalled.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (mut bytes, mut buf) = (Vec::new(), vec![0u8; 1 << 16]);
        let close = loop {
            let n = stalled.read(&mut buf).unwrap();
            assert!(n > 0, "{runtime:?}: the stream ended without a close frame");
            bytes.extend_from_slice(&buf[..n]);
            if let Some(at) = find_close(&bytes) {
                break bytes[at..].to_vec();
            }
        };
        assert_eq!(&close[..2], [0x88, 2 + 31], "{runtime:?}: {close:?}");
        assert_eq!(u16::from_be_bytes([close[2], close[3]]), 1008);
        assert_eq!(&close[4..], b"too slow: messages were dropped");
        assert!(
            bytes.len() < 8 << 20,
            "{runtime:?}: {} bytes reached it",
            bytes.len()
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut errors = Vec::new();
        while !errors.iter().any(|e: &String| e.contains("max_backlog")) {
            let left = deadline.saturating_duration_since(Instant::now());
            let closed = running
                .closed
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("{runtime:?}: the handler was not told; closes seen: {errors:?}"));
            errors.push(closed.error.unwrap_or_default());
        }
        let _ = stalled_id;
        running.server.shutdown().unwrap();
    }
}

/// Where the server's close frame starts in `bytes` (the WebSocket frames after the 101
/// response), once it is whole.
fn find_close(bytes: &[u8]) -> Option<usize> {
    let mut at = bytes.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    loop {
        let rest = &bytes[at..];
        if rest.len() < 2 {
            return None;
        }
        let (len, header) = match rest[1] & 0x7f {
            126 if rest.len() >= 4 => (usize::from(u16::from_be_bytes([rest[2], rest[3]])), 4),
            127 if rest.len() >= 10 => (u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize, 10),
            126 | 127 => return None,
            n => (usize::from(n), 2),
        };
        if rest.len() < header + len {
            return None;
        }
        if rest[0] & 0x0f == 8 {
            return Some(at);
        }
        at += header + len;
    }
}
