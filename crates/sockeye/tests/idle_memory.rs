//! What connections waiting for input hold: a thread keeps a few read buffers (its pool and its
//! keepers, see `websocket/read_buffer.rs`), not one per connection, no connection keeps a
//! buffer that grew for a large message, and a connection's own state stays small.
//!
//! Heap use is counted by a counting allocator (stats_alloc) for the whole test binary; each test
//! holds a lock from before its runtime starts until after it is torn down, so that one's
//! allocations and frees do not land in the other's figures.
#![allow(clippy::unwrap_used)]

mod raw_client;

use std::alloc::System;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::proto::frame::{FrameHeader, MAX_HEADER_LEN, OpCode};
use sockeye::{Config, ProtocolConfig, Server};
use stats_alloc::{INSTRUMENTED_SYSTEM, StatsAlloc};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// One measuring test at a time.
static MEASURING: Mutex<()> = Mutex::new(());

/// Runs `test` on a runtime of its own (current-thread: every connection on one thread), holding
/// the lock until the runtime and everything it ran are gone.
fn measuring<F: std::future::Future<Output = ()>>(test: impl FnOnce() -> F) {
    let _measuring = MEASURING.lock().unwrap_or_else(|e| e.into_inner());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(test());
}

/// Bytes of heap in use by the whole test process. stats_alloc already counts a realloc's
/// growth in `bytes_allocated` (and its shrinking in `bytes_deallocated`); `bytes_reallocated` is
/// the same change again, not to be added.
fn heap_in_use() -> isize {
    let s = GLOBAL.stats();
    s.bytes_allocated as isize - s.bytes_deallocated as isize
}

/// The most heap a plain connection that has received nothing yet may hold, both ends.
const IDLE_LIMIT: isize = 3 << 10;

/// The read size the server uses (the default, 64 KiB, stated here so the bounds below follow).
const READ_CHUNK: usize = 64 << 10;

/// An echo server on this test's runtime, with keepalive pings every `keepalive` (or none).
async fn echo_server(keepalive: Option<Duration>) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let mut protocol = ProtocolConfig::default();
    protocol.deflate = None;
    protocol.max_message_size = 4 << 20;
    protocol.max_frame_size = 4 << 20;
    protocol.keepalive_interval = keepalive;
    let config = Config::builder()
        .read_chunk_size(READ_CHUNK)
        .protocol(protocol)
        .build();
    let server = Server::from_listener(listener, config);
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(message)) = ws.next().await {
            if message.is_data() && ws.send(message).await.is_err() {
                break;
            }
        }
    }));
    addr
}

/// Completes the opening handshake on a raw socket (no client library: its buffers would count).
async fn raw_upgraded(addr: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    raw_client::upgrade(&mut tcp).await;
    tcp
}

/// `count` connections, each upgraded on a raw socket.
async fn raw_clients(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut clients = Vec::with_capacity(count);
    for _ in 0..count {
        clients.push(raw_upgraded(addr).await);
    }
    clients
}

/// Sends one masked binary frame of `len` bytes (mask key 0: the payload goes as is) and reads
/// the unmasked echo back, checking it.
async fn echo_once(tcp: &mut TcpStream, len: usize) {
    let header = |mask| FrameHeader {
        fin: true,
        rsv: 0,
        opcode: OpCode::Binary,
        mask,
        payload_len: len as u64,
    };
    let mut encoded = [0; MAX_HEADER_LEN];
    let n = header(Some([0; 4])).encode(&mut encoded);
    let mut frame = encoded[..n].to_vec();
    frame.extend(std::iter::repeat_n(0x5A, len));
    tcp.write_all(&frame).await.unwrap();
    let m = header(None).encode(&mut encoded);
    let mut echo = vec![0; m + len];
    tcp.read_exact(&mut echo).await.unwrap();
    assert_eq!(echo[..m], encoded[..m], "the echo's header differs");
    assert!(echo[m..].iter().all(|&b| b == 0x5A), "the echo differs");
}

/// One 64-byte echo on each of `clients`, one after the other.
async fn echo_each(clients: &mut [TcpStream]) {
    for client in clients {
        echo_once(client, 64).await;
    }
}

/// Lets the server's connection tasks reach their wait for input.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[test]
fn connections_hold_little_and_waiting_for_input_share_a_few_read_buffers_per_thread() {
    measuring(|| async {
        const CONNECTIONS: usize = 200;
        let addr = echo_server(None).await;
        settle().await;
        let before = heap_in_use();
        let mut clients = raw_clients(addr, CONNECTIONS).await;
        settle().await;
        let per_connection = (heap_in_use() - before) / CONNECTIONS as isize;
        eprintln!("heap per connection before its first message, both ends: {per_connection} bytes");
        // Both ends' socket registrations, the server's task and its `WebSocket`: with the
        // permessage-deflate state inline in every `Connection` (520 bytes, negotiated or not),
        // 3,360 bytes (a debug build; boxed, 2,848).
        assert!(
            per_connection < IDLE_LIMIT,
            "{per_connection} bytes per connection that has not received a message"
        );
        // Every connection reads a message and waits again: with a buffer kept by each, the heap
        // would grow by 64 KiB a connection.
        echo_each(&mut clients).await;
        settle().await;
        let per_connection = (heap_in_use() - before) / CONNECTIONS as isize;
        eprintln!("heap per waiting connection, both ends: {per_connection} bytes");
        // Both ends' sockets, the server's connection state, and at most eight 64 KiB buffers
        // (four pooled, four kept) shared by the 200: about 7 KiB a connection.
        assert!(
            per_connection < (READ_CHUNK / 4) as isize,
            "{per_connection} bytes per waiting connection: read buffers are kept per connection"
        );
        // Still connections that work.
        echo_each(&mut clients).await;
    });
}

#[test]
fn a_read_buffer_grown_for_a_large_message_is_let_go_when_the_connection_waits() {
    measuring(|| async {
        const LARGE: usize = 2 << 20;
        let addr = echo_server(None).await;
        let mut client = raw_upgraded(addr).await;
        echo_once(&mut client, 64).await;
        settle().await;
        let before = heap_in_use();
        echo_once(&mut client, LARGE).await;
        settle().await;
        let grown = heap_in_use() - before;
        eprintln!("heap after a {LARGE}-byte echo: {grown} bytes more");
        // The message, its frame on the way out and the buffer it was read into are all gone; at
        // most a read buffer of the usual size is kept (this connection is a keeper, so the large
        // frame grew its kept buffer rather than one taken from the pool: the grown buffer is the one
        // that must be let go).
        assert!(
            grown < (2 * READ_CHUNK) as isize,
            "{grown} bytes still held after a {LARGE}-byte message"
        );
        echo_once(&mut client, 64).await;
    });
}

/// Sends a masked ping (mask key 0) and reads the server's pong.
async fn ping(tcp: &mut TcpStream) {
    tcp.write_all(&[0x89, 0x84, 0, 0, 0, 0, b'p', b'i', b'n', b'g'])
        .await
        .unwrap();
    let mut pong = [0; 6];
    tcp.read_exact(&mut pong).await.unwrap();
    assert_eq!(pong, [0x8A, 4, b'p', b'i', b'n', b'g']);
}

#[test]
fn keepers_give_their_buffers_up_at_a_keepalive_check_and_not_back_for_a_ping() {
    measuring(|| async {
        const CONNECTIONS: usize = 16;
        const INTERVAL: Duration = Duration::from_secs(1);
        let addr = echo_server(Some(INTERVAL)).await;
        let mut clients = raw_clients(addr, CONNECTIONS).await;
        // The first four connections to receive data keep their buffers; the others pass one
        // pooled buffer along (each reads, echoes and waits before the next is polled): five
        // read buffers in all.
        echo_each(&mut clients).await;
        settle().await;
        let kept = heap_in_use();
        // The first keepalive check, an interval after the echo, finds input seen and sends no
        // ping; its timer wakes each connection, and the four keepers give their buffers up:
        // the pool takes three, the fourth is freed.
        tokio::time::sleep(INTERVAL + INTERVAL / 4).await;
        let after_check = heap_in_use();
        eprintln!(
            "heap after the keepalive check: {} bytes less",
            kept - after_check
        );
        assert!(
            kept - after_check >= (READ_CHUNK * 3 / 4) as isize,
            "{} bytes given up at the keepalive check: the keepers kept their buffers",
            kept - after_check
        );
        // Each client pings, before the next check: input, but no data message, so no keeper
        // again. (Four keepers again would take the four pooled buffers, and the connections
        // after them would allocate one more to pass along.)
        for client in &mut clients {
            ping(client).await;
        }
        settle().await;
        let after_pings = heap_in_use();
        eprintln!("heap after the pings: {} bytes more", after_pings - after_check);
        assert!(
            after_pings - after_check < (READ_CHUNK / 2) as isize,
            "{} bytes more after the pings: connections that only answered pings kept buffers",
            after_pings - after_check
        );
        // Data makes keepers again, and the connections still work.
        echo_each(&mut clients).await;
    });
}
