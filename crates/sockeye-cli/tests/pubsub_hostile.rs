//! `ws pubsub_server` against hostile clients, driving the real binary over loopback: half-sent
//! requests and stalled TLS handshakes closed by their timeouts, the per-address cap that does
//! not lock another address out, the Origin allow-list, the flags' defaults in `--help`, and
//! the warning of a node without client authentication. Every wait is bounded; every process
//! is killed (by PID) when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[path = "../../sockeye-pubsub/tests/support/refusal.rs"]
mod refusal;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Stdio};
use std::time::Duration;

use common::{Captured, free_port, text, ws};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// A running `ws pubsub_server`; what it wrote on stderr after its first line is captured.
struct Node {
    child: Child,
    addr: SocketAddr,
    stderr: Captured,
}

impl Node {
    fn start(args: &[&str]) -> Node {
        let port = free_port();
        let mut child = ws()
            .arg("pubsub_server")
            .args(args)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        stderr.read_line(&mut line).unwrap();
        assert!(line.contains("listening"), "{line}");
        Node {
            child,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            stderr: Captured::drain(stderr),
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The node's log once it holds `wanted`, or as it is after 5 s.
fn logged(node: &Node, wanted: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let log = text(&node.stderr.bytes());
        if log.contains(wanted) || std::time::Instant::now() > deadline {
            return log;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Whether the server closes `tcp` within `within` (reading and dropping what it sends).
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> bool {
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(within, read).await.is_ok()
}

/// A connection to `addr` from `source` (any loopback address).
async fn connect_from(source: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((source, 0))).unwrap();
    socket.connect(addr).await.unwrap()
}

/// The status line and body of `request` sent on a new connection from 127.0.0.1 (the body
/// as far as its Content-Length; none for a 101).
async fn ask(addr: SocketAddr, request: String) -> (String, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let all = text(&seen);
            if let Some((head, body)) = all.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .unwrap_or(0usize);
                if body.len() >= length {
                    let status = head.lines().next().unwrap_or_default().to_owned();
                    return (status, body[..length].to_owned());
                }
            }
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return (all.clone(), String::new()),
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer in 10 s")
}

fn socket_request(addr: SocketAddr, origin: &str) -> String {
    refusal::browser_request(addr, origin)
}

#[test]
fn pubsub_server_closes_half_sent_requests_within_the_header_read_timeout() {
    let node = Node::start(&["-q", "--header-read-timeout", "0.5"]);
    runtime().block_on(async {
        let mut connections = Vec::new();
        for _ in 0..64 {
            let mut tcp = TcpStream::connect(node.addr).await.unwrap();
            tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgr")
                .await
                .unwrap();
            connections.push(tcp);
        }
        let mut waits = tokio::task::JoinSet::new();
        for mut tcp in connections {
            waits.spawn(async move { closed_within(&mut tcp, Duration::from_millis(3500)).await });
        }
        let mut open = 0;
        while let Some(closed) = waits.join_next().await {
            open += usize::from(!closed.unwrap());
        }
        assert_eq!(
            open, 0,
            "{open} of 64 half-sent requests open 3.5 s after a 0.5 s timeout"
        );
    });
}

#[test]
fn pubsub_server_closes_a_stalled_tls_handshake() {
    let dir = std::env::temp_dir().join(format!("ws-cli-hostile-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    let node = Node::start(&[
        "--tls",
        "--cert-file",
        cert_file.to_str().unwrap(),
        "--key-file",
        key_file.to_str().unwrap(),
        "--tls-handshake-timeout",
        "0.5",
    ]);
    runtime().block_on(async {
        // Half a TLS record header, then nothing.
        let mut tcp = TcpStream::connect(node.addr).await.unwrap();
        tcp.write_all(b"\x16\x03").await.unwrap();
        assert!(closed_within(&mut tcp, Duration::from_millis(3500)).await);
    });
    let _ = std::fs::remove_dir_all(&dir);
    // Logged as the connection is dropped: read it within a bounded wait.
    let log = logged(&node, "(--tls-handshake-timeout)");
    assert!(log.contains("(--tls-handshake-timeout)"), "{log}");
}

#[test]
fn pubsub_server_caps_one_address_without_locking_another_out() {
    let node = Node::start(&["--max-connections-per-address", "4"]);
    runtime().block_on(async {
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(connect_from([127, 0, 0, 1], node.addr).await);
        }
        let mut fifth = connect_from([127, 0, 0, 1], node.addr).await;
        assert!(closed_within(&mut fifth, Duration::from_secs(5)).await);
        // Another address is served.
        let mut other = connect_from([127, 0, 0, 2], node.addr).await;
        other
            .write_all(b"GET /client.js HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut head = [0u8; 12];
        tokio::time::timeout(Duration::from_secs(10), other.read_exact(&mut head))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&head, b"HTTP/1.1 200");
    });
    let log = logged(&node, "(--max-connections-per-address)");
    assert!(
        log.contains("127.0.0.1") && log.contains("(--max-connections-per-address)"),
        "{log}"
    );
}

/// The close code and reason a node closes a socket with right after upgrading it.
async fn closed_with(addr: SocketAddr, request: String) -> (u16, String) {
    refusal::close_after_upgrade(addr, &request, Duration::from_secs(10))
        .await
        .expect("closed within 10 s")
}

#[test]
fn pubsub_server_refuses_pages_of_other_origins_unless_allowed() {
    let node = Node::start(&["-q", "--allowed-origin", "https://app.example"]);
    runtime().block_on(async {
        // A browser is told why: upgraded, then closed at once with 4004 and the reason.
        let (code, reason) = closed_with(node.addr, socket_request(node.addr, "https://evil.example")).await;
        assert_eq!(code, 4004, "{reason}");
        assert!(
            reason.starts_with("origin_not_allowed: --allowed-origin https://evil.example"),
            "{reason}"
        );
        let (status, _) = ask(node.addr, socket_request(node.addr, "https://app.example")).await;
        assert!(status.starts_with("HTTP/1.1 101"), "{status}");
        let own = format!("http://{}", node.addr);
        let (status, _) = ask(node.addr, socket_request(node.addr, &own)).await;
        assert!(status.starts_with("HTTP/1.1 101"), "{status}");
    });
    let out = ws()
        .args(["pubsub_server", "--allowed-origin", "app.example", "--port", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("scheme://host[:port]"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn pubsub_server_help_shows_the_bounds_and_a_node_without_auth_warns() {
    let out = ws().args(["pubsub_server", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for (flag, default) in [
        ("--header-read-timeout", "10"),
        ("--idle-timeout", "60"),
        ("--tls-handshake-timeout", "10"),
        ("--max-connections", "10000"),
        ("--max-connections-per-address", "100"),
        ("--max-publish-rate", "100"),
        ("--max-publish-topics", "100"),
        ("--max-subscriptions", "100"),
        ("--max-message-size", "1047552"),
        ("--max-queued-bytes", "16777216"),
        ("--max-queued-bytes-total", "1073741824"),
        ("--max-topics", "100000"),
        ("--history-len", "1000"),
        ("--history-age", "300"),
        ("--history-limit", "1000"),
        ("--client-js-cors", "*"),
    ] {
        let at = help
            .find(&format!("{flag} <"))
            .unwrap_or_else(|| panic!("{flag}: {help}"));
        let shown = format!("[default: {default}]");
        let next = help[at..].find("[default:").unwrap();
        assert!(help[at + next..].starts_with(&shown), "{flag}: {help}");
    }
    assert!(help.contains("--allowed-origin <ORIGIN>"), "{help}");
    // The warning comes before the accept loop: before its "serving" line.
    for (args, warns) in [(&[][..], true), (&["--token", "t"][..], false)] {
        let node = Node::start(args);
        let log = logged(&node, "serving");
        assert!(log.contains("serving"), "{log}");
        let warned = log.contains("warning: no --jwt-secret or --token");
        assert_eq!(warned, warns, "{args:?}: {log}");
    }
}
