//! wss:// on the loop server, on io_uring and on epoll: echo at every size through Sockeye's
//! tokio client, close_notify at the end, records dribbled a few bytes at a time, clients that
//! do not speak TLS or stall in its handshake, shutdown with 1001.

#![cfg(feature = "tls")]
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use sockeye::tls::rustls::pki_types::ServerName;
use sockeye::tls::rustls::{ClientConfig, ClientConnection, StreamOwned};
use sockeye::tls::{ClientTlsOptions, Roots, ServerTls};
use sockeye::{CloseCode, Message};
use sockeye_loop::{Closed, Handler, Listening, Runtime, Server, Socket};
use support::{rt, runtimes};

struct Echo {
    closed: mpsc::Sender<Closed>,
}

impl Handler for Echo {
    type Data = ();
    fn message(&mut self, socket: &mut Socket<'_, ()>, message: Message) {
        if message == Message::text("sni?") {
            let name = socket.sni_hostname().unwrap_or("none").to_owned();
            socket.send(Message::text(name));
            return;
        }
        socket.send(message);
    }
    fn close(&mut self, _: (), closed: Closed) {
        let _ = self.closed.send(closed);
    }
}

/// A CA and a certificate for 127.0.0.1 signed by it: the server's, and the client's trust.
struct Pki {
    server: ServerTls,
    client: Arc<ClientConfig>,
}

fn pki() -> Pki {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "Sockeye loop test CA");
    let ca_key = KeyPair::generate().unwrap();
    let ca_pem = params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(params, ca_key);
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &issuer).unwrap();
    let server = ServerTls::from_pem(cert.pem().as_bytes(), key.serialize_pem().as_bytes()).unwrap();
    let client = ClientTlsOptions {
        roots: Roots::Empty,
        ..Default::default()
    }
    .add_ca_pem(ca_pem.as_bytes())
    .unwrap()
    .build()
    .unwrap();
    Pki { server, client }
}

fn wss_server(runtime: Runtime, pki: &Pki, config: sockeye::Config) -> (Listening, mpsc::Receiver<Closed>) {
    let (tx, rx) = mpsc::channel();
    let server = Server::new(config)
        .threads(2)
        .runtime(runtime)
        .tls(&pki.server.acceptor())
        .listen("127.0.0.1:0", move || Echo { closed: tx.clone() })
        .expect("the server starts");
    (server, rx)
}

async fn connect(addr: SocketAddr, pki: &Pki) -> sockeye::WebSocket<sockeye::TransportStream> {
    connect_to("127.0.0.1", addr, pki).await
}

async fn connect_to(host: &str, addr: SocketAddr, pki: &Pki) -> sockeye::WebSocket<sockeye::TransportStream> {
    let config = sockeye::Config::builder()
        .tls_client(Some(pki.client.clone()))
        .build();
    sockeye::connect_with(format!("wss://{host}:{}/", addr.port()), &config)
        .await
        .expect("the wss handshake")
        .0
}

#[test]
fn the_handler_sees_the_server_name_the_client_asked_for() {
    let pki = pki();
    for runtime in runtimes() {
        let (server, _closed) = wss_server(runtime, &pki, sockeye::Config::default());
        rt().block_on(async {
            // A name is sent as SNI; an address never is (RFC 6066 §3).
            for (host, expected) in [("localhost", "localhost"), ("127.0.0.1", "none")] {
                let mut ws = connect_to(host, server.local_addr(), &pki).await;
                ws.send(Message::text("sni?")).await.unwrap();
                let back = ws.next().await.unwrap().unwrap();
                assert_eq!(back, Message::text(expected), "{runtime:?}: {host}");
            }
        });
    }
}

#[test]
fn wss_echoes_every_size_and_ends_with_close_notify() {
    let pki = pki();
    for runtime in runtimes() {
        let (server, closed) = wss_server(runtime, &pki, sockeye::Config::default());
        rt().block_on(async {
            let mut ws = connect(server.local_addr(), &pki).await;
            for size in [0, 1, 125, 126, 4095, 4096, 16_384, 65_536, 1 << 20, 16 << 20] {
                let payload: Vec<u8> = (0..size).map(|i| (i * 7 % 251) as u8).collect();
                ws.send(Message::binary(payload.clone())).await.unwrap();
                let back = ws.next().await.unwrap().unwrap();
                assert_eq!(back, Message::binary(payload), "{runtime:?}: {size} bytes");
            }
            for i in 0..1000 {
                ws.feed(Message::text(format!("m{i}"))).await.unwrap();
            }
            ws.flush().await.unwrap();
            for i in 0..1000 {
                assert_eq!(ws.next().await.unwrap().unwrap(), Message::text(format!("m{i}")));
            }
            ws.close(None).await.unwrap();
            // The server's close frame, then the end of the stream: a TLS stream ends cleanly
            // only after close_notify (without it the client reports a truncation).
            loop {
                match ws.next().await {
                    Some(Ok(Message::Close(_))) => {}
                    Some(Ok(other)) => panic!("{runtime:?}: unexpected {other:?}"),
                    Some(Err(e)) => panic!("{runtime:?}: the stream did not end cleanly: {e}"),
                    None => break,
                }
            }
        });
        let closed = closed
            .recv_timeout(Duration::from_secs(5))
            .expect("the handler is told");
        assert_eq!(closed.error, None, "{runtime:?}");
        server.shutdown().unwrap();
    }
}

/// Writes a few bytes per system call, so that the server receives TLS records in pieces.
struct Dribble(TcpStream);

impl Read for Dribble {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Dribble {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(7);
        self.0.write_all(&buf[..n])?;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[test]
fn records_that_arrive_in_pieces_are_joined() {
    let pki = pki();
    for runtime in runtimes() {
        let (server, _closed) = wss_server(runtime, &pki, sockeye::Config::default());
        let tcp = TcpStream::connect(server.local_addr()).unwrap();
        tcp.set_nodelay(true).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let name = ServerName::try_from("127.0.0.1").unwrap();
        let conn = ClientConnection::new(pki.client.clone(), name).unwrap();
        let mut tls = StreamOwned::new(conn, Dribble(tcp));
        tls.write_all(
            b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .unwrap();
        // A masked text frame "Hello" (RFC 6455 §5.7).
        tls.write_all(&[0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58])
            .unwrap();
        tls.flush().unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        let want_tail = [0x81, 0x05, b'H', b'e', b'l', b'l', b'o'];
        while !got.ends_with(&want_tail) {
            let n = tls
                .read(&mut buf)
                .unwrap_or_else(|e| panic!("{runtime:?}: {e} after {:?}", String::from_utf8_lossy(&got)));
            assert!(
                n > 0,
                "{runtime:?}: the server closed: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
        assert!(got.starts_with(b"HTTP/1.1 101"), "{runtime:?}");
        server.shutdown().unwrap();
    }
}

#[test]
fn clients_without_tls_or_stalled_in_its_handshake_are_cut_off() {
    let pki = pki();
    let config = sockeye::Config::builder()
        .handshake_timeout(Duration::from_millis(500))
        .build();
    for runtime in runtimes() {
        let (server, closed) = wss_server(runtime, &pki, config.clone());
        let addr = server.local_addr();
        // Plain HTTP to a TLS port: refused with an alert, then closed.
        let mut plain = TcpStream::connect(addr).unwrap();
        plain.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        plain
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        plain.read_to_end(&mut answer).unwrap();
        // A TLS alert record (content type 21), or nothing: never an HTTP response.
        assert!(answer.is_empty() || answer[0] == 21, "{runtime:?}: {answer:?}");
        // Half a ClientHello, then silence: cut off at the handshake timeout.
        let mut stalled = TcpStream::connect(addr).unwrap();
        stalled.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        stalled.write_all(&[22, 3, 1, 2, 0, 1, 0, 1, 252, 3, 3]).unwrap();
        let started = Instant::now();
        let mut rest = Vec::new();
        let _ = stalled.read_to_end(&mut rest);
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(400) && waited < Duration::from_secs(4),
            "{runtime:?}: cut off after {waited:?}"
        );
        // Neither was upgraded, so the handler heard of neither; the server still serves.
        assert!(closed.try_recv().is_err(), "{runtime:?}");
        rt().block_on(async {
            let mut ws = connect(addr, &pki).await;
            ws.send(Message::text("still here")).await.unwrap();
            assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("still here"));
        });
        server.shutdown().unwrap();
    }
}

#[test]
fn shutdown_closes_wss_connections_with_1001() {
    let pki = pki();
    for runtime in runtimes() {
        let (server, _closed) = wss_server(runtime, &pki, sockeye::Config::default());
        let rt = rt();
        let mut clients = Vec::new();
        for _ in 0..5 {
            clients.push(rt.block_on(connect(server.local_addr(), &pki)));
        }
        let stopper = std::thread::spawn(move || server.shutdown());
        rt.block_on(async {
            for mut ws in clients {
                match ws.next().await {
                    Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::GOING_AWAY),
                    other => panic!("{runtime:?}: expected a 1001 close, got {other:?}"),
                }
                while let Some(next) = ws.next().await {
                    next.unwrap_or_else(|e| panic!("{runtime:?}: not a clean end: {e}"));
                }
            }
        });
        stopper.join().unwrap().unwrap();
    }
}
