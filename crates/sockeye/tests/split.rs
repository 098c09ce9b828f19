//! Splitting a connection between a reader task and a writer task (issue 13 §1), and the cancel
//! safety that `WebSocket`'s docs promise, each claim with a test.
//!
//! The defect these guard against: the reader flushes the shared write queue while waiting for
//! input, and a stream keeps one write waker, so the reader's registration replaced the writer's
//! and a writer blocked on a full socket was never woken again.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use rand::{Rng, SeedableRng};
use sockeye::{Config, Message, Role, WebSocket};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::net::{TcpListener, TcpStream};

/// Uncompressed, so that what is sent is what fills the pipe, and without keepalive noise.
fn config() -> Config {
    Config::builder().deflate(None).keepalive(None).build()
}

/// A client WebSocket over one end of an in-memory pipe with a small buffer; the other end is raw.
fn duplex_client(buffer: usize) -> (WebSocket<DuplexStream>, DuplexStream) {
    let (ours, theirs) = tokio::io::duplex(buffer);
    (
        WebSocket::from_upgraded(ours, Role::Client, &config(), &[], None),
        theirs,
    )
}

/// A client WebSocket over loopback TCP; the server's end is raw. Small socket buffers on both
/// sides, so that 4 MiB cannot hide in the kernel while the peer does not read.
async fn tcp_client() -> (WebSocket<TcpStream>, TcpStream) {
    let server = tokio::net::TcpSocket::new_v4().unwrap();
    server.set_recv_buffer_size(64 << 10).unwrap();
    server.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener: TcpListener = server.listen(16).unwrap();
    let client = tokio::net::TcpSocket::new_v4().unwrap();
    client.set_send_buffer_size(64 << 10).unwrap();
    let connect = client.connect(listener.local_addr().unwrap());
    let (ours, (theirs, _)) = tokio::join!(connect, async { listener.accept().await.unwrap() });
    (
        WebSocket::from_upgraded(ours.unwrap(), Role::Client, &config(), &[], None),
        theirs,
    )
}

/// An unmasked server frame, as the raw peer sends it.
fn server_text(text: &str) -> Vec<u8> {
    assert!(text.len() <= 125);
    [&[0x81, text.len() as u8][..], text.as_bytes()].concat()
}

const TOTAL: usize = 4 << 20;
const CHUNK: usize = 64 << 10;

/// The reproduction: the writer sends 4 MiB while the peer reads nothing; the peer sends one
/// frame, which wakes the reader (whose next poll flushes the shared queue); then the peer drains
/// everything. The writer must finish.
async fn writer_finishes_after_the_reader_flushed<W, R, P>(mut writer: W, mut reader: R, mut peer: P)
where
    W: SinkLike + Send + 'static,
    R: futures_util::Stream<Item = Result<Message, sockeye::Error>> + Unpin + Send + 'static,
    P: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let writing = tokio::spawn(async move {
        for _ in 0..TOTAL / CHUNK {
            writer
                .send_message(Message::binary(vec![7u8; CHUNK]))
                .await
                .unwrap();
        }
    });
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(item) = reader.next().await {
            // The peer finally drops the connection without a close frame: 1006 at the end.
            got.push(item.map_err(|e| e.kind()));
        }
        got
    });
    // Let the writer fill the pipe and block.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !writing.is_finished(),
        "the writer should be blocked on a full pipe"
    );
    peer.write_all(&server_text("wake")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Now drain everything the client sent.
    let mut drained = 0usize;
    let mut buf = vec![0u8; 256 << 10];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while drained < TOTAL {
        let n = tokio::time::timeout_at(deadline, peer.read(&mut buf))
            .await
            .expect("the writer stopped sending: it was never woken")
            .unwrap();
        assert_ne!(n, 0);
        drained += n;
    }
    tokio::time::timeout(Duration::from_secs(10), writing)
        .await
        .expect("the writer's send never completed")
        .unwrap();
    drop(peer);
    let got = tokio::time::timeout(Duration::from_secs(10), reading)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.first(), Some(&Ok(Message::text("wake"))));
}

/// The sending half, whichever split made it.
trait SinkLike {
    fn send_message(&mut self, m: Message) -> impl Future<Output = Result<(), sockeye::Error>> + Send;
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> SinkLike for sockeye::WebSocketWriter<S> {
    fn send_message(&mut self, m: Message) -> impl Future<Output = Result<(), sockeye::Error>> + Send {
        self.send(m)
    }
}

struct FuturesSink<S>(futures_util::stream::SplitSink<WebSocket<S>, Message>);

impl<S: AsyncRead + AsyncWrite + Unpin + Send> SinkLike for FuturesSink<S> {
    fn send_message(&mut self, m: Message) -> impl Future<Output = Result<(), sockeye::Error>> + Send {
        self.0.send(m)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_split_over_duplex() {
    let (ws, peer) = duplex_client(64 << 10);
    let (writer, reader) = ws.split();
    writer_finishes_after_the_reader_flushed(writer, reader, peer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_split_over_tcp() {
    let (ws, peer) = tcp_client().await;
    let (writer, reader) = ws.split();
    writer_finishes_after_the_reader_flushed(writer, reader, peer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_split_over_duplex() {
    let (ws, peer) = duplex_client(64 << 10);
    let (sink, stream) = StreamExt::split(ws);
    writer_finishes_after_the_reader_flushed(FuturesSink(sink), stream, peer).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn futures_split_over_tcp() {
    let (ws, peer) = tcp_client().await;
    let (sink, stream) = StreamExt::split(ws);
    writer_finishes_after_the_reader_flushed(FuturesSink(sink), stream, peer).await;
}

/// An echo peer (a server WebSocket) that alternately stalls and drains.
async fn stalling_echo(stream: DuplexStream, seed: u64) {
    let mut ws = WebSocket::from_upgraded(stream, Role::Server, &config(), &[], None);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    while let Some(Ok(m)) = ws.recv().await {
        if !m.is_data() {
            continue;
        }
        if rng.random_bool(0.2) {
            tokio::time::sleep(Duration::from_millis(rng.random_range(1..4))).await;
        }
        if ws.feed(m).await.is_err() {
            return;
        }
        if rng.random_bool(0.5) && ws.flush().await.is_err() {
            return;
        }
    }
}

/// Two tasks, random message sizes, a peer that stalls and drains: every message comes back, in
/// order, and neither half hangs. Many seeds, each short.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stress_two_tasks_random_sizes_stalling_peer() {
    const RUNS: u64 = 100;
    for seed in 0..RUNS {
        let (ours, theirs) = tokio::io::duplex(8 << 10);
        let peer = tokio::spawn(stalling_echo(theirs, seed));
        let ws = WebSocket::from_upgraded(ours, Role::Client, &config(), &[], None);
        let (mut writer, mut reader) = ws.split();
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed);
        let count = rng.random_range(20..80);
        let sizes: Vec<usize> = (0..count)
            .map(|_| match rng.random_range(0..10) {
                0..=5 => rng.random_range(0..126),
                6..=8 => rng.random_range(126..8_000),
                _ => rng.random_range(8_000..100_000),
            })
            .collect();
        let expected: Vec<Message> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| Message::binary(vec![i as u8; n]))
            .collect();
        let to_send = expected.clone();
        let writing = tokio::spawn(async move {
            for m in to_send {
                writer.send(m).await.unwrap();
            }
            writer
        });
        let reading = tokio::spawn(async move {
            let mut got = Vec::new();
            while got.len() < count {
                match reader.recv().await {
                    Some(Ok(m)) if m.is_data() => got.push(m),
                    Some(Ok(_)) => {}
                    other => panic!("seed {seed}: the reader ended early: {other:?}"),
                }
            }
            (reader, got)
        });
        let run = async {
            let writer = writing.await.unwrap();
            let (reader, got) = reading.await.unwrap();
            (writer, reader, got)
        };
        let (writer, reader, got) = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .unwrap_or_else(|_| panic!("seed {seed}: a half hung"));
        assert!(got == expected, "seed {seed}: messages differ");
        let mut ws = reader.reunite(writer).map_err(|_| ()).unwrap();
        ws.close(None).await.unwrap();
        peer.await.unwrap();
    }
}

/// Pings are answered and a close is replied to while only the reader is polled (the writer
/// half sits idle).
#[tokio::test]
async fn the_reader_alone_answers_pings_and_closes() {
    let (ws, mut peer) = duplex_client(64 << 10);
    let (_writer, mut reader) = ws.split();
    let reading = tokio::spawn(async move {
        let mut got = Vec::new();
        while let Some(item) = reader.recv().await {
            got.push(item.unwrap());
        }
        got
    });
    // A ping, then a close 1000 from the "server".
    peer.write_all(&[0x89, 0x02, b'h', b'i']).await.unwrap();
    peer.write_all(&[0x88, 0x02, 0x03, 0xE8]).await.unwrap();
    // The pong and the close reply arrive (masked client frames: 2 + 4 + payload bytes each).
    let mut head = [0u8; 8];
    peer.read_exact(&mut head).await.unwrap();
    assert_eq!(head[0], 0x8A, "a pong");
    let mut close = [0u8; 8];
    peer.read_exact(&mut close).await.unwrap();
    assert_eq!(close[0], 0x88, "the close reply");
    drop(peer);
    let got = tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 2, "{got:?}");
}

/// A sender waiting for room learns when the connection ends instead of waiting for ever.
#[tokio::test]
async fn a_blocked_writer_is_released_when_the_reader_sees_the_end() {
    let (ws, peer) = duplex_client(16 << 10);
    let (mut writer, mut reader) = ws.split();
    let writing = tokio::spawn(async move {
        loop {
            if let Err(e) = writer.send(Message::binary(vec![0u8; 64 << 10])).await {
                return e;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // The peer goes away without reading.
    drop(peer);
    while reader.recv().await.is_some() {}
    let err = tokio::time::timeout(Duration::from_secs(5), writing)
        .await
        .expect("the writer hung")
        .unwrap();
    assert!(
        matches!(err.kind(), sockeye::ErrorKind::Io | sockeye::ErrorKind::Closed),
        "{err:?}"
    );
}

// ------------------------------------------------------------------------------ cancel safety

/// `recv` dropped at an await point loses nothing: every message arrives, in order.
#[tokio::test]
async fn recv_is_cancel_safe() {
    let (mut ws, mut peer) = duplex_client(64 << 10);
    let sending = tokio::spawn(async move {
        for i in 0..200u32 {
            peer.write_all(&server_text(&i.to_string())).await.unwrap();
            if i % 7 == 0 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        }
        peer
    });
    let mut got = Vec::new();
    let mut cancelled = 0;
    while got.len() < 200 {
        tokio::select! {
            item = ws.recv() => got.push(item.unwrap().unwrap()),
            () = tokio::time::sleep(Duration::from_micros(200)) => cancelled += 1,
        }
    }
    let expected: Vec<Message> = (0..200u32).map(|i| Message::text(i.to_string())).collect();
    assert_eq!(got, expected);
    assert!(cancelled > 0, "the test never cancelled a recv");
    drop(sending.await.unwrap());
}

/// Fills the pipe and the write queue past the high-water mark of a client whose peer does not
/// read; returns the bytes the peer must later drain.
async fn fill_until_blocked(ws: &mut WebSocket<DuplexStream>) {
    let big = Message::binary(vec![1u8; 256 << 10]);
    while tokio::time::timeout(Duration::from_millis(20), ws.feed(big.clone()))
        .await
        .is_ok()
    {}
}

/// Reads client frames from the raw peer until `want` data messages (unfragmented, as this
/// client sends them) have arrived; returns their payloads.
async fn read_messages(peer: &mut DuplexStream, want: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    while out.len() < want {
        let mut head = [0u8; 2];
        peer.read_exact(&mut head).await.unwrap();
        let len = match head[1] & 0x7F {
            126 => usize::from(peer.read_u16().await.unwrap()),
            127 => peer.read_u64().await.unwrap() as usize,
            n => usize::from(n),
        };
        let mut key = [0u8; 4];
        peer.read_exact(&mut key).await.unwrap();
        let mut payload = vec![0u8; len];
        peer.read_exact(&mut payload).await.unwrap();
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= key[i % 4];
        }
        if head[0] & 0x0F != 0x8 {
            out.push(payload);
        }
    }
    out
}

/// `send` queues its message at the first poll: dropped while waiting for the socket, the
/// message stays queued whole and goes out with the next flush.
#[tokio::test]
async fn send_dropped_after_its_first_poll_leaves_the_message_queued() {
    let (mut ws, mut peer) = duplex_client(16 << 10);
    let message = Message::binary(vec![9u8; 100_000]);
    let cancelled = tokio::time::timeout(Duration::from_millis(20), ws.send(message.clone())).await;
    assert!(
        cancelled.is_err(),
        "the send should have been waiting on the full pipe"
    );
    assert!(ws.buffered_amount() > 0, "the message is still queued");
    let draining = tokio::spawn(async move { read_messages(&mut peer, 1).await });
    ws.flush().await.unwrap();
    assert_eq!(draining.await.unwrap(), vec![message.as_payload().to_vec()]);
}

/// `feed` waits for room first: dropped while waiting, the message was not queued.
#[tokio::test]
async fn feed_dropped_while_waiting_for_room_queues_nothing() {
    let (mut ws, mut peer) = duplex_client(16 << 10);
    fill_until_blocked(&mut ws).await;
    let before = ws.buffered_amount();
    let marker = Message::binary(Bytes::from_static(b"never sent"));
    let cancelled = tokio::time::timeout(Duration::from_millis(20), ws.feed(marker)).await;
    assert!(cancelled.is_err(), "feed should have been waiting for room");
    assert!(ws.buffered_amount() <= before, "nothing was added");
    // Everything queued arrives, and the marker is not among it.
    let queued = before.div_ceil(256 << 10) + 1;
    let draining = tokio::spawn(async move {
        let mut all = Vec::new();
        loop {
            let got = read_messages(&mut peer, 1).await.remove(0);
            let last = got == b"last";
            all.push(got);
            if last {
                return all;
            }
        }
    });
    ws.send(Message::binary(Bytes::from_static(b"last")))
        .await
        .unwrap();
    let all = tokio::time::timeout(Duration::from_secs(10), draining)
        .await
        .unwrap()
        .unwrap();

    assert!(all.iter().all(|m| m != b"never sent"));
    assert!(all.len() >= queued.min(2));
}

/// `flush` dropped at any point leaves the rest queued; a later flush writes it.
#[tokio::test]
async fn flush_dropped_midway_loses_nothing() {
    let (mut ws, mut peer) = duplex_client(16 << 10);
    let messages: Vec<Message> = (0..8u8).map(|i| Message::binary(vec![i; 40_000])).collect();
    for m in &messages {
        ws.feed(m.clone()).await.unwrap();
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(20), ws.flush())
            .await
            .is_err()
    );
    let draining = tokio::spawn(async move { read_messages(&mut peer, 8).await });
    ws.flush().await.unwrap();
    let got = draining.await.unwrap();
    let want: Vec<Vec<u8>> = messages.iter().map(|m| m.as_payload().to_vec()).collect();
    assert!(got == want);
}

/// `close` queues the close frame at its first poll; dropped later, the handshake goes on and
/// `recv` finishes it.
#[tokio::test]
async fn close_dropped_early_still_closes() {
    let (mut ws, mut peer) = duplex_client(64 << 10);
    let cancelled = tokio::time::timeout(Duration::from_millis(20), ws.close(None)).await;
    assert!(cancelled.is_err(), "close waits for the peer's reply");
    assert_eq!(ws.connection().close_state(), sockeye::proto::CloseState::Closing);
    // The peer sees our close and answers it, then closes TCP (as a server does).
    let mut frame = [0u8; 6];
    peer.read_exact(&mut frame).await.unwrap();
    assert_eq!(frame[0], 0x88);
    peer.write_all(&[0x88, 0x00]).await.unwrap();
    drop(peer);
    let mut rest = Vec::new();
    while let Some(item) = ws.recv().await {
        rest.push(item);
    }
    assert!(matches!(rest[..], [Ok(Message::Close(None))]), "{rest:?}");
}

/// With `auto_close_reply(false)`, a server that received the client's close still sends what it
/// had to say (a proxy: its upstream's last messages), then answers; the answer from the writing
/// half ends the connection at once, though the reading half was waiting for input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_close_answer_sends_the_last_messages_first() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let held = Config::builder()
            .deflate(None)
            .keepalive(None)
            .auto_close_reply(false)
            .close_timeout(Duration::from_secs(10))
            .build();
        let (mut writer, mut reader) = WebSocket::from_upgraded(tcp, Role::Server, &held, &[], None).split();
        let (closed_tx, closed_rx) = tokio::sync::oneshot::channel();
        // Both halves in one task, the reader polled first (as a proxy relays both ways): the
        // reader is parked on input when the writer's answer ends the handshake.
        let reading = async move {
            let mut closed_tx = Some(closed_tx);
            let mut got = Vec::new();
            while let Some(item) = reader.recv().await {
                let message = item.unwrap();
                if let Message::Close(frame) = &message {
                    let _ = closed_tx.take().unwrap().send(frame.clone());
                }
                got.push(message);
            }
            got
        };
        let writing = async move {
            let frame = closed_rx.await.unwrap();
            writer.send(Message::text("late 1")).await.unwrap();
            writer.send(Message::binary(vec![9u8; 1000])).await.unwrap();
            // The writer's close answers the peer's: it returns the peer's frame, as
            // `WebSocket::close` does.
            let peer_frame = writer.close(frame.clone()).await.unwrap();
            assert!(peer_frame.is_some());
            assert_eq!(peer_frame, frame);
            assert!(writer.send(Message::text("after the answer")).await.is_err());
        };
        let (got, ()) =
            tokio::time::timeout(Duration::from_secs(5), async { tokio::join!(reading, writing) })
                .await
                .unwrap();
        got
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    // A client that would wait 10 s for the server to close TCP: it must not have to.
    let patient = Config::builder()
        .deflate(None)
        .keepalive(None)
        .close_timeout(Duration::from_secs(10))
        .build();
    let mut client = WebSocket::from_upgraded(tcp, Role::Client, &patient, &[], None);
    client.send(Message::text("first")).await.unwrap();
    let started = std::time::Instant::now();
    client
        .send(Message::Close(Some(sockeye::CloseFrame::new(
            sockeye::CloseCode(4000),
            "bye",
        ))))
        .await
        .unwrap();
    let mut got = Vec::new();
    while let Some(item) = tokio::time::timeout(Duration::from_secs(5), client.recv())
        .await
        .unwrap()
    {
        got.push(item.unwrap());
    }
    let took = started.elapsed();
    assert!(
        matches!(&got[0], Message::Text(t) if t.as_str() == "late 1"),
        "{got:?}"
    );
    assert!(
        matches!(&got[1], Message::Binary(b) if b.len() == 1000),
        "{got:?}"
    );
    assert!(
        matches!(&got[2], Message::Close(Some(f)) if f.code == sockeye::CloseCode(4000)),
        "{got:?}"
    );
    assert_eq!(got.len(), 3);
    assert!(
        took < Duration::from_secs(2),
        "the server closed TCP at once: {took:?}"
    );
    let at_server = server.await.unwrap();
    assert!(matches!(&at_server[0], Message::Text(t) if t.as_str() == "first"));
    assert!(matches!(&at_server[1], Message::Close(Some(f)) if f.reason == "bye"));
}

/// `n` two-byte text frames ("yo"), unmasked, as a flooding server sends them.
fn flood(n: usize) -> Vec<u8> {
    server_text("yo").repeat(n)
}

/// A receive loop under a flood yields to the scheduler: each message takes a unit of tokio's
/// task budget, so another task runs after ~128 messages, not after the flood. The messages are
/// all buffered before the loop starts: no read ever waits, which is what a loop on a fast link
/// sees (one read brings thousands of small messages).
#[tokio::test(flavor = "current_thread")]
async fn a_receive_loop_under_a_flood_lets_other_tasks_run() {
    const N: usize = 100_000;
    let (mut ws, mut theirs) = duplex_client(N * 4 + 1024);
    theirs.write_all(&flood(N)).await.unwrap();
    let ran = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flag = ran.clone();
    tokio::spawn(async move { flag.store(true, std::sync::atomic::Ordering::SeqCst) });
    let mut seen_at = None;
    for i in 0..N {
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("yo"));
        if seen_at.is_none() && ran.load(std::sync::atomic::Ordering::SeqCst) {
            seen_at = Some(i);
        }
    }
    let seen_at = seen_at.expect("the other task never ran while 100,000 messages were received");
    assert!(seen_at <= 1_000, "the other task ran after {seen_at} messages");
}

/// What that is for: a `timeout` around draining a connection that floods (the `ws` tool's
/// Ctrl-C: close, then read until the peer's reply, 250 ms at most) ends at its deadline, not
/// when the flood runs out; with every message ready at every poll, the timer was never
/// polled before.
#[tokio::test(flavor = "current_thread")]
async fn a_timeout_around_a_flooded_receive_loop_fires() {
    const N: usize = 1_000_000;
    let (mut ws, mut theirs) = duplex_client(N * 4 + 1024);
    theirs.write_all(&flood(N)).await.unwrap();
    let mut received = 0;
    let drained = tokio::time::timeout(Duration::from_millis(1), async {
        while received < N {
            ws.recv().await.unwrap().unwrap();
            received += 1;
        }
    })
    .await;
    assert!(
        drained.is_err(),
        "all {N} messages were drained before a 1 ms timeout fired"
    );
    assert!(received < N);
    eprintln!("the 1 ms timeout fired after {received} of {N} messages");
}
