//! `ws broadcast_server` under load with a client that never reads.
//!
//! Three healthy clients send and receive at once (each split into a writer task and a reader
//! task) while a fourth client completes the handshake and then never reads. The relay must
//! deliver every message to every other healthy client, in order and intact, close none of them,
//! and drop the slow one with close 1008 "too slow".
//!
//! Why this catches a writer that hangs: the relay splits each connection into a reader loop and
//! a writer task over one shared socket. Now and then each healthy client stops reading until the
//! relay holds several megabytes for it (more than the loopback socket buffers take), so the
//! relay's writer to it must wait for the socket, while that client keeps sending and the relay's
//! reader for the same connection keeps flushing the shared queue. If such a flush could steal
//! the writer's wake-up, the writer would stall for good and its client would stop receiving
//! (caught by the idle timeout below).
//!
//! Senders are paced so that no healthy client is ever more than `2 * WINDOW` messages behind
//! (under 9 MiB), within the relay's 16 MiB bound per client: a healthy client is only dropped if
//! the relay itself stops making progress, while the slow one is sent about 40 MiB. Every eighth
//! message is large (32 to 64 KiB), the others a few hundred bytes to 2 KiB, so that a backlog of
//! a few hundred messages is megabytes.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sockeye::{CloseCode, CloseFrame, Config, Message, WebSocketReader, WebSocketWriter};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{Notify, mpsc};
use tokio::time::timeout;

/// Healthy clients; each sends `PER_SENDER` messages and receives the others' `2 * PER_SENDER`.
const HEALTHY: usize = 3;
const PER_SENDER: usize = 2000;
/// A sender starts message `k` only once every other healthy client has received its message
/// `k - WINDOW`, so the relay never holds more than `2 * WINDOW` messages for one healthy client.
const WINDOW: usize = 450;
/// Once, after message `PAUSE_AT + me * PAUSE_STAGGER`, healthy reader `me` stops reading until
/// the relay holds `PAUSE_UNTIL` messages (megabytes) for it, or `MAX_PAUSE` has passed. One at a
/// time: while two readers pause, the relay stops reading from both (its input backpressure,
/// with over 1 MiB queued for each), so neither backlog could grow to the target.
const PAUSE_AT: usize = 600;
const PAUSE_STAGGER: usize = 1100;
const PAUSE_UNTIL: usize = 2 * WINDOW - 50;
const MAX_PAUSE: Duration = Duration::from_secs(2);
/// Kernel receive buffers we ask for (Linux doubles them): small, so that what the relay holds
/// for a client that is not reading sits in the relay, not in the client's kernel.
const HEALTHY_RCVBUF: u32 = 16 << 10;
const SLOW_RCVBUF: u32 = 4 << 10;
/// The longest a healthy client may go without a message before the relay counts as stuck.
const IDLE: Duration = Duration::from_secs(8);
/// The exchange of messages, and the whole test.
const DEADLINE: Duration = Duration::from_secs(20);
const TOTAL: Duration = Duration::from_secs(28);
/// The relay's bound per client, in payload bytes (crates/sockeye-cli/src/relay.rs), and the
/// largest message below.
const RELAY_QUEUE_BYTES: usize = 16 << 20;
const LARGEST: usize = 64 << 10;
// A healthy backlog: every eighth message at most 64 KiB, the others at most 2 KiB.
const _: () = assert!(2 * WINDOW * LARGEST / 8 + 2 * WINDOW * 2048 < RELAY_QUEUE_BYTES);
// The slow client is sent the large messages alone (48 KiB on average) past twice the bound.
const _: () = assert!(HEALTHY * PER_SENDER / 8 * (LARGEST * 3 / 4) > 2 * RELAY_QUEUE_BYTES);

/// `ws broadcast_server` on a port the kernel picked; killed (by its handle) when dropped, even
/// when the test fails. Its stderr lines arrive on `lines`.
struct Relay {
    child: Child,
    addr: SocketAddr,
    lines: mpsc::UnboundedReceiver<String>,
    /// Every stderr line seen so far.
    log: Vec<String>,
}

impl Relay {
    fn start() -> Relay {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ws"))
            .args(["broadcast_server", "--host", "127.0.0.1", "--port", "0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        // From here on the guard owns the child: a panic below still kills it.
        let mut relay = Relay {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            lines: mpsc::unbounded_channel().1,
            log: Vec::new(),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        relay.lines = rx;
        // Ends at EOF, that is when the child exits or is killed.
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        relay
    }

    /// Waits (bounded) for a stderr line that satisfies `want`, and returns it.
    async fn wait_for(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, self.lines.recv()).await {
                Ok(Some(line)) => {
                    self.log.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Ok(None) => panic!("the relay exited before {what}; stderr: {:#?}", self.log),
                Err(_) => panic!("timed out waiting for {what}; stderr: {:#?}", self.log),
            }
        }
    }

    /// Every stderr line so far, without waiting.
    fn drain(&mut self) -> &[String] {
        while let Ok(line) = self.lines.try_recv() {
            self.log.push(line);
        }
        &self.log
    }

    fn url(&self) -> String {
        format!("ws://{}/", self.addr)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The size of message `seq` of healthy client `sender`: every eighth 32 to 64 KiB, the others
/// 256 bytes to 2 KiB.
fn payload_len(sender: usize, seq: usize) -> usize {
    let hash = seq * 7919 + sender * 104_729;
    if seq % 8 == 7 {
        (32 << 10) + hash % (32 << 10)
    } else {
        256 + hash % (2048 - 256 + 1)
    }
}

/// Message `seq` of healthy client `sender`: every byte determined by `(sender, seq)`, starting
/// with the sender and the sequence number.
fn payload(sender: usize, seq: usize) -> Bytes {
    let len = payload_len(sender, seq);
    let mut bytes = Vec::with_capacity(len);
    bytes.push(u8::try_from(sender).unwrap());
    bytes.extend_from_slice(&u32::try_from(seq).unwrap().to_be_bytes());
    bytes.extend((bytes.len()..len).map(|i| (i * 31 + seq * 17 + sender * 101) as u8));
    Bytes::from(bytes)
}

/// Who sent a message and its number, checking that it is exactly what that sender sent.
fn identify(bytes: &[u8]) -> Result<(usize, usize), String> {
    if bytes.len() < 5 || usize::from(bytes[0]) >= HEALTHY {
        return Err(format!(
            "a message that no healthy client sent ({} bytes)",
            bytes.len()
        ));
    }
    let sender = usize::from(bytes[0]);
    let seq = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
    if seq >= PER_SENDER || bytes != &payload(sender, seq)[..] {
        return Err(format!("message {seq} of client {sender} arrived corrupted"));
    }
    Ok((sender, seq))
}

/// The healthy clients' progress: `started[sender]` messages handed to the writer,
/// `received[receiver][sender]`, and for each sender a wake-up when its messages are received
/// (senders are paced by these counts).
#[derive(Default)]
struct Progress {
    started: [AtomicUsize; HEALTHY],
    received: [[AtomicUsize; HEALTHY]; HEALTHY],
    wake: [Notify; HEALTHY],
    /// Pauses that reached `PAUSE_UNTIL`, and the largest backlog a paused reader saw (bytes).
    full_pauses: AtomicUsize,
    max_backlog_bytes: AtomicUsize,
}

impl Progress {
    fn count(&self, receiver: usize, sender: usize) -> usize {
        self.received[receiver][sender].load(Ordering::Acquire)
    }

    /// Messages sent to `receiver` and not received yet: (count, bytes).
    fn backlog(&self, receiver: usize) -> (usize, usize) {
        let mut backlog = (0, 0);
        for sender in (0..HEALTHY).filter(|&s| s != receiver) {
            let started = self.started[sender].load(Ordering::Acquire);
            let received = self.count(receiver, sender);
            backlog.0 += started - received;
            backlog.1 += (received..started).map(|k| payload_len(sender, k)).sum::<usize>();
        }
        backlog
    }

    fn snapshot(&self) -> String {
        (0..HEALTHY)
            .map(|r| {
                let from: Vec<String> = (0..HEALTHY)
                    .filter(|&s| s != r)
                    .map(|s| format!("{} from {s}", self.count(r, s)))
                    .collect();
                format!("client {r} got {}", from.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
}

/// A loopback TCP connection with a small receive buffer.
async fn tcp(addr: SocketAddr, rcvbuf: u32) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(rcvbuf).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A healthy client: Sockeye's client handshake over our own socket (for the small receive
/// buffer), no compression (the payloads are not compressible; the test is about scheduling).
async fn healthy(relay: &Relay) -> (WebSocketWriter<TcpStream>, WebSocketReader<TcpStream>) {
    let stream = tcp(relay.addr, HEALTHY_RCVBUF).await;
    let config = Config::builder().deflate(None).build();
    let (ws, response) = sockeye::client_handshake(stream, relay.url(), &config)
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    ws.split()
}

async fn send_all(
    me: usize,
    mut writer: WebSocketWriter<TcpStream>,
    progress: Arc<Progress>,
) -> Result<WebSocketWriter<TcpStream>, String> {
    for seq in 0..PER_SENDER {
        // The window: wait until every other client has received our message `seq - WINDOW`.
        while (0..HEALTHY).any(|r| r != me && progress.count(r, me) + WINDOW <= seq) {
            progress.wake[me].notified().await;
        }
        progress.started[me].store(seq + 1, Ordering::Release);
        writer
            .send(Message::binary(payload(me, seq)))
            .await
            .map_err(|e| format!("client {me}: sending message {seq} failed: {e}"))?;
    }
    Ok(writer)
}

async fn receive_all(
    me: usize,
    mut reader: WebSocketReader<TcpStream>,
    progress: Arc<Progress>,
) -> Result<WebSocketReader<TcpStream>, String> {
    let mut next = [0usize; HEALTHY];
    for got in 0..(HEALTHY - 1) * PER_SENDER {
        let message = match timeout(IDLE, reader.recv()).await {
            Ok(Some(Ok(message))) => message,
            Ok(Some(Err(e))) => return Err(format!("client {me}: error after {got} messages: {e}")),
            Ok(None) => return Err(format!("client {me}: connection ended after {got} messages")),
            Err(_) => {
                return Err(format!(
                    "client {me}: nothing for {IDLE:?} after {got} messages (relay stuck?)"
                ));
            }
        };
        let Message::Binary(bytes) = message else {
            return Err(format!("client {me}: got {message:?} after {got} messages"));
        };
        let (sender, seq) = identify(&bytes).map_err(|e| format!("client {me}: {e}"))?;
        if sender == me {
            return Err(format!("client {me}: got its own message {seq} back"));
        }
        if seq != next[sender] {
            return Err(format!(
                "client {me}: from client {sender}, got message {seq} where {} was due",
                next[sender]
            ));
        }
        next[sender] += 1;
        progress.received[me][sender].store(next[sender], Ordering::Release);
        progress.wake[sender].notify_one();
        if got + 1 == PAUSE_AT + me * PAUSE_STAGGER {
            pause(me, &progress).await;
        }
    }
    Ok(reader)
}

/// Stops reading until the relay holds `PAUSE_UNTIL` messages for this client (bounded).
async fn pause(me: usize, progress: &Progress) {
    let start = Instant::now();
    loop {
        let (count, bytes) = progress.backlog(me);
        progress.max_backlog_bytes.fetch_max(bytes, Ordering::Relaxed);
        if count >= PAUSE_UNTIL {
            progress.full_pauses.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if start.elapsed() >= MAX_PAUSE {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// The client that never reads: a raw socket that completes the handshake and then waits.
async fn slow_client(relay: &Relay) -> (TcpStream, Vec<u8>) {
    let mut stream = tcp(relay.addr, SLOW_RCVBUF).await;
    let request = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        relay.addr
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 1024];
        let n = timeout(Duration::from_secs(5), stream.read(&mut chunk))
            .await
            .expect("handshake response timed out")
            .unwrap();
        assert!(n > 0, "EOF during the handshake");
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("s3pplmbitxaq9kygzzhzrbk+xoo="), "{head}");
    (stream, buf.split_off(end))
}

/// One frame from the server (unmasked), if `buf` holds a whole one: (fin, opcode, payload,
/// bytes used).
fn parse_frame(buf: &[u8]) -> Option<(bool, u8, Vec<u8>, usize)> {
    if buf.len() < 2 {
        return None;
    }
    assert_eq!(buf[1] & 0x80, 0, "a server frame must not be masked");
    let (len, header) = match buf[1] & 0x7f {
        126 if buf.len() >= 4 => (usize::from(u16::from_be_bytes([buf[2], buf[3]])), 4),
        127 if buf.len() >= 10 => (
            usize::try_from(u64::from_be_bytes(buf[2..10].try_into().unwrap())).unwrap(),
            10,
        ),
        126 | 127 => return None,
        n => (usize::from(n), 2),
    };
    if buf.len() < header + len {
        return None;
    }
    let payload = buf[header..header + len].to_vec();
    Some((buf[0] & 0x80 != 0, buf[0] & 0x0f, payload, header + len))
}

/// Reads the slow client's socket to the end: what the relay still had queued for it, then its
/// close frame. Returns (messages per sender, close code, reason).
async fn drain_slow(stream: &mut TcpStream, mut buf: Vec<u8>) -> ([usize; HEALTHY], u16, String) {
    let mut next = [0usize; HEALTHY];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        while let Some((fin, opcode, payload, used)) = parse_frame(&buf) {
            buf.drain(..used);
            assert!(fin, "the relay fragmented a message");
            match opcode {
                2 => {
                    let (sender, seq) = identify(&payload).unwrap();
                    // The slow client gets each sender's messages from the first, in order, until
                    // it is dropped.
                    assert_eq!(
                        seq, next[sender],
                        "slow client: out of order from client {sender}"
                    );
                    next[sender] += 1;
                }
                8 => {
                    assert!(payload.len() >= 2, "close frame without a code");
                    let code = u16::from_be_bytes([payload[0], payload[1]]);
                    let reason = String::from_utf8_lossy(&payload[2..]).into_owned();
                    assert!(buf.is_empty(), "bytes after the close frame");
                    return (next, code, reason);
                }
                other => panic!("slow client: unexpected opcode {other} after {next:?} messages"),
            }
        }
        let mut chunk = vec![0u8; 64 << 10];
        let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
            .await
            .unwrap_or_else(|_| panic!("slow client: no close frame after {next:?} messages"))
            .unwrap();
        assert!(
            n > 0,
            "slow client: EOF without a close frame after {next:?} messages"
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broadcast_delivers_everything_to_healthy_clients_and_drops_a_slow_one() {
    // On time out the future is dropped, and with it the relay's guard, which kills the relay.
    if timeout(TOTAL, relay_keeps_healthy_clients_and_drops_a_slow_one())
        .await
        .is_err()
    {
        panic!("the test took longer than {TOTAL:?}");
    }
}

async fn relay_keeps_healthy_clients_and_drops_a_slow_one() {
    let started = Instant::now();
    let mut relay = Relay::start();
    let line = relay
        .wait_for("listening", |l| l.contains("listening on ws://"))
        .await;
    relay.addr = line.rsplit("ws://").next().unwrap().trim().parse().unwrap();

    // The slow client joins first, alone, so that it is the relay's client 0.
    let (mut slow, leftover) = slow_client(&relay).await;
    relay
        .wait_for("the slow client to join", |l| l.contains("joined (1 connected)"))
        .await;
    let mut halves = Vec::new();
    for n in 2..=HEALTHY + 1 {
        halves.push(healthy(&relay).await);
        let joined = format!("joined ({n} connected)");
        relay.wait_for(&joined, |l| l.contains(&joined)).await;
    }

    let progress = Arc::new(Progress::default());
    let exchange = async {
        let mut tasks = Vec::new();
        for (me, (writer, reader)) in halves.into_iter().enumerate() {
            let sending = tokio::spawn(send_all(me, writer, Arc::clone(&progress)));
            let receiving = tokio::spawn(receive_all(me, reader, Arc::clone(&progress)));
            tasks.push((sending, receiving));
        }
        let mut clients = Vec::new();
        for (me, (sending, receiving)) in tasks.into_iter().enumerate() {
            // A reader that fails first explains more than the writer it starves.
            let reader = receiving.await.unwrap()?;
            let writer = sending.await.unwrap()?;
            clients.push((me, writer, reader));
        }
        Ok::<_, String>(clients)
    };
    let clients = match timeout(DEADLINE, exchange).await {
        Ok(Ok(clients)) => clients,
        Ok(Err(e)) => panic!(
            "{e}\nprogress: {}\nrelay stderr: {:#?}",
            progress.snapshot(),
            relay.drain()
        ),
        Err(_) => panic!(
            "timed out; progress: {}\nrelay stderr: {:#?}",
            progress.snapshot(),
            relay.drain()
        ),
    };
    let exchanged = started.elapsed();
    for r in 0..HEALTHY {
        for s in (0..HEALTHY).filter(|&s| s != r) {
            assert_eq!(progress.count(r, s), PER_SENDER, "client {r} from {s}");
        }
    }

    // Healthy clients are still open: each closes normally and gets the relay's reply.
    for (me, mut writer, mut reader) in clients {
        writer
            .close(Some(CloseFrame::new(CloseCode::NORMAL, "done")))
            .await
            .unwrap_or_else(|e| panic!("client {me}: close failed: {e}"));
        let reply = timeout(Duration::from_secs(5), reader.recv())
            .await
            .unwrap_or_else(|_| panic!("client {me}: no close reply"));
        match reply {
            Some(Ok(Message::Close(frame))) => {
                let code = frame.map(|f| f.code);
                assert_eq!(code, Some(CloseCode::NORMAL), "client {me}: close reply");
            }
            other => panic!("client {me}: expected the close reply, got {other:?}"),
        }
        let end = timeout(Duration::from_secs(5), reader.recv()).await;
        assert!(
            matches!(end, Ok(None)),
            "client {me}: after the close reply: {end:?}"
        );
    }

    // The slow client was dropped: its backlog is discarded and 1008 follows what the socket
    // already held.
    let slow_addr = slow.local_addr().unwrap();
    let (got, code, reason) = drain_slow(&mut slow, leftover).await;
    let total: usize = got.iter().sum();
    assert_eq!(
        code, 1008,
        "slow client closed with {code} {reason:?} after {got:?} messages"
    );
    assert_eq!(reason, "too slow: messages were dropped");
    assert!(
        total < HEALTHY * PER_SENDER,
        "slow client got {got:?} messages before 1008: everything, so nothing was dropped"
    );
    // Answer the close; the relay then closes the connection.
    let mut reply = vec![0x88, 0x82, 1, 2, 3, 4];
    reply.extend([0x03 ^ 1, 0xf0 ^ 2]); // 1008, masked
    slow.write_all(&reply).await.unwrap();
    let mut rest = [0u8; 64];
    let n = timeout(Duration::from_secs(5), slow.read(&mut rest))
        .await
        .expect("the relay kept the slow client's connection open after the closing handshake")
        .unwrap();
    assert_eq!(n, 0, "bytes after the closing handshake");

    // The relay's own account: it dropped client 0 (the slow one) and no one else, and every
    // connection left.
    let mut left = 0;
    while left < HEALTHY + 1 {
        relay
            .wait_for("every client to leave", |l| l.ends_with(": left"))
            .await;
        left += 1;
    }
    let log = relay.drain();
    let dropped: Vec<&String> = log.iter().filter(|l| l.contains("dropped")).collect();
    assert_eq!(
        dropped,
        [&format!(
            "{slow_addr}: dropped: it does not read fast enough (closed with 1008)"
        )],
        "relay stderr: {log:#?}"
    );
    // The test did what it says: at least once, a healthy client stopped reading until the relay
    // held megabytes for it (more than the socket buffers take) while the others kept sending.
    assert!(
        progress.full_pauses.load(Ordering::Relaxed) > 0,
        "no pause reached a backlog of {PAUSE_UNTIL} messages"
    );
    eprintln!(
        "exchange {exchanged:?}, total {:?}; slow client got {got:?} messages before 1008; \
         {} full pauses, largest backlog {} KiB",
        started.elapsed(),
        progress.full_pauses.load(Ordering::Relaxed),
        progress.max_backlog_bytes.load(Ordering::Relaxed) >> 10,
    );
}
