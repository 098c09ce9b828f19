//! Faults in the byte stream under a connection: a read or write that fails at the Nth call,
//! short writes, one byte per read, resets in the middle of a frame or of the handshake, peers
//! that vanish, send after closing, or close at the same time. Every path ends in a defined
//! error or a clean close: no panic, no hang, and the socket is released.
#![allow(clippy::unwrap_used)]

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, Config, Error, Message, ProtocolError, Role, WebSocket};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

/// What a [`Faulty`] stream does wrong.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    /// The Nth read (0-based) fails with `ConnectionReset`.
    fail_read_at: Option<usize>,
    /// The Nth write fails with `BrokenPipe`.
    fail_write_at: Option<usize>,
    /// At most this many bytes per read (0: no limit).
    read_max: usize,
    /// At most this many bytes per write (0: no limit).
    write_max: usize,
}

/// A stream that injects [`Faults`] into an in-memory pipe.
struct Faulty {
    inner: DuplexStream,
    faults: Faults,
    reads: usize,
    writes: usize,
}

impl Faulty {
    fn new(inner: DuplexStream, faults: Faults) -> Faulty {
        Faulty {
            inner,
            faults,
            reads: 0,
            writes: 0,
        }
    }
}

/// `n`, or at most `max` of it when `max` is set (0: no limit).
fn capped(max: usize, n: usize) -> usize {
    if max == 0 { n } else { max.min(n) }
}

impl AsyncRead for Faulty {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.faults.fail_read_at == Some(this.reads) {
            return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
        }
        let limit = capped(this.faults.read_max, buf.remaining());
        let mut small = ReadBuf::new(&mut buf.initialize_unfilled()[..limit]);
        let result = Pin::new(&mut this.inner).poll_read(cx, &mut small);
        if result.is_ready() {
            this.reads += 1;
            let n = small.filled().len();
            buf.advance(n);
        }
        result
    }
}

impl AsyncWrite for Faulty {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.faults.fail_write_at == Some(this.writes) {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        }
        let limit = capped(this.faults.write_max, data.len());
        let result = Pin::new(&mut this.inner).poll_write(cx, &data[..limit]);
        if result.is_ready() {
            this.writes += 1;
        }
        result
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

fn messages() -> Vec<Message> {
    vec![
        Message::text("héllo wörld"),
        Message::binary(vec![0u8; 0]),
        Message::binary((0..70_000).map(|i| (i % 253) as u8).collect::<Vec<_>>()),
        Message::text("x".repeat(300)),
    ]
}

fn config() -> Config {
    Config::builder()
        .close_timeout(Duration::from_millis(300))
        .handshake_timeout(Duration::from_secs(2))
        .build()
}

/// An echo server on one end of a pipe; returns how its connection ended.
async fn echo_server(stream: Faulty) -> Result<(), Error> {
    let mut ws = sockeye::accept_with(stream, &config(), |_, r| Ok(r)).await?;
    while let Some(item) = ws.next().await {
        let m = item?;
        if m.is_data() {
            ws.feed(m).await?;
        }
    }
    Ok(())
}

/// A client that sends every message, expects each echoed, then closes.
async fn echo_client(stream: Faulty) -> Result<(), Error> {
    let (mut ws, _) = sockeye::client_handshake(stream, "ws://pipe/", &config()).await?;
    for m in messages() {
        ws.send(m.clone()).await?;
        match ws.recv().await {
            Some(Ok(got)) => assert_eq!(got, m, "a message changed in transit"),
            Some(Err(e)) => return Err(e),
            None => return Err(ProtocolError::Closed.into()),
        }
    }
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "done"))).await?;
    Ok(())
}

/// Runs client and server over a pipe with the given faults; both must finish within 10 s.
async fn run(client: Faults, server: Faults) -> (Result<(), Error>, Result<(), Error>) {
    let (a, b) = tokio::io::duplex(4096);
    let server = tokio::spawn(echo_server(Faulty::new(b, server)));
    let client = tokio::time::timeout(Duration::from_secs(10), echo_client(Faulty::new(a, client)))
        .await
        .expect("the client hung");
    let server = tokio::time::timeout(Duration::from_secs(10), server)
        .await
        .expect("the server hung")
        .expect("the server panicked");
    (client, server)
}

/// The errors a transport fault may surface as.
fn is_transport_error(e: &Error) -> bool {
    matches!(
        e,
        Error::Io(_)
            | Error::Timeout(_)
            | Error::WebSocket(
                ProtocolError::AbnormalClosure | ProtocolError::Timeout(_) | ProtocolError::Closed
            )
    )
}

#[tokio::test]
async fn one_byte_reads_and_short_writes_change_nothing() {
    for (read_max, write_max) in [(1, 1), (1, 7), (3, 1), (0, 2)] {
        let faults = Faults {
            read_max,
            write_max,
            ..Faults::default()
        };
        let (client, server) = run(faults, faults).await;
        client.unwrap();
        server.unwrap();
    }
}

#[tokio::test]
async fn a_read_or_write_failing_at_any_point_ends_in_a_defined_error() {
    let mut failures_seen = 0;
    let none = Faults::default();
    let small = Faults {
        read_max: 5,
        write_max: 5,
        ..none
    };
    for n in 0..40 {
        let read = |base: Faults| Faults {
            fail_read_at: Some(n),
            ..base
        };
        let write = |base: Faults| Faults {
            fail_write_at: Some(n),
            ..base
        };
        // Small reads and writes too, so that failures land inside frames and inside the head.
        for (client, server) in [
            (read(none), none),
            (write(none), none),
            (none, read(none)),
            (none, write(none)),
            (read(small), none),
            (none, write(small)),
        ] {
            let (c, s) = run(client, server).await;
            for result in [&c, &s] {
                if let Err(e) = result {
                    failures_seen += 1;
                    assert!(
                        is_transport_error(e) || e.handshake_error().is_some(),
                        "fault {client:?}/{server:?} gave an unexpected error: {e:?}"
                    );
                }
            }
        }
    }
    assert!(
        failures_seen > 100,
        "faults did not reach the connection ({failures_seen})"
    );
}

/// The raw upgrade request a client would send.
const UPGRADE: &[u8] = b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

/// A server on a pipe and the raw other end.
async fn server_and_raw_peer() -> (tokio::task::JoinHandle<Vec<Result<Message, Error>>>, DuplexStream) {
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let mut seen = Vec::new();
        match sockeye::accept_with(b, &config(), |_, r| Ok(r)).await {
            Ok(mut ws) => {
                while let Some(item) = ws.recv().await {
                    seen.push(item);
                }
            }
            Err(e) => seen.push(Err(e)),
        }
        seen
    });
    (server, a)
}

/// Reads the server's response head.
async fn read_head(peer: &mut DuplexStream) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(peer.read_u8().await.unwrap());
    }
    assert!(head.starts_with(b"HTTP/1.1 101 "));
}

async fn finished(
    server: tokio::task::JoinHandle<Vec<Result<Message, Error>>>,
) -> Vec<Result<Message, Error>> {
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("server hung")
        .unwrap()
}

#[tokio::test]
async fn a_reset_mid_handshake_or_mid_frame_is_reported_and_releases_the_socket() {
    // Half a request head, then the peer is gone.
    let (server, mut peer) = server_and_raw_peer().await;
    peer.write_all(&UPGRADE[..40]).await.unwrap();
    drop(peer);
    let seen = finished(server).await;
    assert!(
        matches!(&seen[..], [Err(Error::Io(e))] if e.kind() == io::ErrorKind::UnexpectedEof),
        "{seen:?}"
    );

    // A whole message, then half of a 100-byte frame, then gone: the message is delivered, the
    // rest is an abnormal closure (1006).
    let (server, mut peer) = server_and_raw_peer().await;
    peer.write_all(UPGRADE).await.unwrap();
    read_head(&mut peer).await;
    peer.write_all(&[0x81, 0x82, 0, 0, 0, 0, b'o', b'k'])
        .await
        .unwrap();
    peer.write_all(&[0x82, 0x80 | 100, 0, 0, 0, 0]).await.unwrap();
    peer.write_all(&[9; 50]).await.unwrap();
    drop(peer);
    let seen = finished(server).await;
    assert!(
        matches!(&seen[..], [Ok(Message::Text(t)), Err(Error::WebSocket(ProtocolError::AbnormalClosure))] if t == "ok"),
        "{seen:?}"
    );
}

#[tokio::test]
async fn data_after_the_peers_close_frame_is_ignored() {
    let (server, mut peer) = server_and_raw_peer().await;
    peer.write_all(UPGRADE).await.unwrap();
    // Close 1000, then (illegally) a text frame.
    peer.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x03, 0xE8])
        .await
        .unwrap();
    peer.write_all(&[0x81, 0x82, 0, 0, 0, 0, b'n', b'o'])
        .await
        .unwrap();
    let seen = finished(server).await;
    assert!(
        matches!(&seen[..], [Ok(Message::Close(Some(f)))] if f.code == CloseCode::NORMAL),
        "{seen:?}"
    );
    // The server answered the close and then closed the stream.
    let mut rest = Vec::new();
    peer.read_to_end(&mut rest).await.unwrap();
    assert!(rest.ends_with(&[0x88, 0x02, 0x03, 0xE8]), "{rest:?}");
}

#[tokio::test]
async fn both_sides_closing_at_once_complete_the_handshake() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let server = tokio::spawn(async move {
        let mut ws = sockeye::accept_with(b, &config(), |_, r| Ok(r)).await.unwrap();
        ws.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "server")))
            .await
    });
    let (mut client, _) = sockeye::client_handshake(a, "ws://pipe/", &config())
        .await
        .unwrap();
    let reply = client
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "client")))
        .await
        .unwrap();
    assert_eq!(reply.map(|f| f.code), Some(CloseCode::GOING_AWAY));
    let server_reply = server.await.unwrap().unwrap();
    assert_eq!(server_reply.map(|f| f.code), Some(CloseCode::NORMAL));
}

#[tokio::test]
async fn a_peer_that_vanishes_mid_conversation_is_1006_and_the_wrapper_role_is_kept() {
    let (a, b) = tokio::io::duplex(1 << 16);
    let mut server = WebSocket::from_upgraded(b, Role::Server, &config(), &[], None);
    let mut client = WebSocket::from_upgraded(a, Role::Client, &config(), &[], None);
    client.send("one").await.unwrap();
    assert_eq!(server.recv().await.unwrap().unwrap(), Message::text("one"));
    drop(client);
    let err = server.recv().await.unwrap().unwrap_err();
    assert!(
        matches!(err, Error::WebSocket(ProtocolError::AbnormalClosure)),
        "{err:?}"
    );
    assert_eq!(err.close_code(), Some(CloseCode::ABNORMAL));
    assert!(server.recv().await.is_none());
}

/// A peer that half-closed and reads nothing: every read is EOF, every write waits. Counts the
/// reads, and panics past a bound (the receive loop spinning on EOF inside one poll never
/// returns, so no timeout could end the test).
struct HalfClosedPeer {
    reads: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl AsyncRead for HalfClosedPeer {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let reads = self.reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        assert!(
            reads < 10_000,
            "read EOF {reads} times: the receive loop spins on it"
        );
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for HalfClosedPeer {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, _: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Pending
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Pending
    }
}

/// The peer's EOF while our writes wait (a pong owed, or the application's own messages): the
/// connection stops reading, waits for the socket or the close deadline, and ends 1006 at that
/// deadline. Before the fix the receive loop read EOF again and again inside one poll (found as
/// an HTTP/2 test that hung: hyper's stream after the client dropped it).
#[tokio::test]
async fn eof_while_writes_wait_ends_at_the_close_deadline_without_spinning() {
    let reads = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let peer = HalfClosedPeer { reads: reads.clone() };
    // A masked empty ping from the client: the server owes a pong it cannot write.
    let ping = [0x89, 0x80, 1, 2, 3, 4];
    let mut server = WebSocket::from_upgraded(peer, Role::Server, &config(), &ping, None);
    let started = tokio::time::Instant::now();
    let mut ended = None;
    for _ in 0..4 {
        match tokio::time::timeout(Duration::from_secs(5), server.recv()).await {
            Ok(Some(Ok(m))) => assert!(matches!(m, Message::Ping(_)), "{m:?}"),
            Ok(Some(Err(e))) => {
                ended = Some(e);
                break;
            }
            Ok(None) => panic!("ended without an error: the pong was never written"),
            Err(_) => panic!("still waiting after 5 s: the close deadline did not end it"),
        }
    }
    let err = ended.expect("an error within four receives");
    assert!(
        matches!(err, Error::WebSocket(ProtocolError::AbnormalClosure)),
        "{err:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "ended before the close deadline (300 ms): {:?}",
        started.elapsed()
    );
    let reads = reads.load(std::sync::atomic::Ordering::Relaxed);
    assert!(reads <= 2, "{reads} reads after EOF");
    assert!(server.recv().await.is_none());
}
