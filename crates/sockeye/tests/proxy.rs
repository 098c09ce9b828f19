//! Connecting through an HTTP CONNECT proxy, over real loopback sockets.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use futures_util::StreamExt;
use sockeye::proxy::{Proxy, ProxyConfig, ProxyError};
use sockeye::{Config, Error, Message, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo_server() -> SocketAddr {
    let server = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.feed(m).await.is_err() {
                break;
            }
        }
    }));
    addr
}

/// A one-connection HTTP proxy: reads the `CONNECT` head, answers `answer`, and if that is a
/// `200`, relays bytes to the requested authority. Returns the proxy's address and the head it got.
async fn connect_proxy(answer: &'static [u8]) -> (SocketAddr, tokio::sync::oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut client, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            client.read_exact(&mut byte).await.unwrap();
            head.push(byte[0]);
        }
        let head = String::from_utf8(head).unwrap();
        let authority = head.split(' ').nth(1).unwrap().to_string();
        let _ = tx.send(head);
        client.write_all(answer).await.unwrap();
        if answer.starts_with(b"HTTP/1.1 200")
            && let Ok(mut upstream) = TcpStream::connect(authority).await
        {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
    });
    (addr, rx)
}

fn through(proxy: SocketAddr) -> Config {
    Config::builder()
        .proxy(ProxyConfig::Url(
            Proxy::parse(&format!("http://user:pw@{proxy}")).unwrap(),
        ))
        .build()
}

#[tokio::test]
async fn a_connect_tunnel_carries_the_websocket() {
    let target = echo_server().await;
    let (proxy, head) = connect_proxy(b"HTTP/1.1 200 Connection established\r\n\r\n").await;
    let (mut ws, _) = sockeye::connect_with(format!("ws://{target}/"), &through(proxy))
        .await
        .unwrap();
    ws.send("through").await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("through"));
    ws.close(None).await.unwrap();
    let head = head.await.unwrap();
    assert!(
        head.starts_with(&format!("CONNECT {target} HTTP/1.1\r\n")),
        "{head}"
    );
    assert!(
        head.contains("Proxy-Authorization: Basic dXNlcjpwdw==\r\n"),
        "{head}"
    );
}

#[tokio::test]
async fn proxy_refusals_and_broken_answers_are_proxy_errors() {
    for (answer, expected) in [
        (
            &b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n"[..],
            ProxyError::Refused {
                status: 407,
                reason: "Proxy Authentication Required".into(),
            },
        ),
        (
            b"HTTP/1.1 200 OK\r\n\r\nsurprise",
            ProxyError::Malformed("data after the CONNECT response"),
        ),
        (
            b"SSH-2.0-OpenSSH\r\n\r\n",
            ProxyError::Malformed("unparsable CONNECT response"),
        ),
        (
            b"HTTP/1.1 200 OK\r\n",
            ProxyError::Malformed("closed before answering CONNECT"),
        ),
    ] {
        let (proxy, _) = connect_proxy(answer).await;
        match sockeye::connect_with("ws://127.0.0.1:9/", &through(proxy)).await {
            Err(Error::Proxy(e)) => assert_eq!(e, expected),
            other => panic!(
                "{:?}: expected {expected:?}, got {other:?}",
                String::from_utf8_lossy(answer)
            ),
        }
    }
}

#[tokio::test]
async fn connection_errors_name_the_proxy_and_the_destination() {
    // Bind and drop a listener to find a port nobody listens on.
    let closed = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    match sockeye::connect_with("ws://example.invalid:8080/", &through(closed)).await {
        Err(Error::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
            let message = e.to_string();
            assert!(message.contains(&format!("proxy {closed}")), "{message}");
            assert!(message.contains("example.invalid:8080"), "{message}");
        }
        other => panic!("expected connection refused, got {other:?}"),
    }
    // A proxy that accepts and never answers: the timeout names both too.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let config = (through(silent.local_addr().unwrap()))
        .to_builder()
        .handshake_timeout(std::time::Duration::from_millis(300))
        .build();
    match sockeye::connect_with("ws://example.invalid:8080/", &config).await {
        Err(Error::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
            let message = e.to_string();
            assert!(
                message.contains(&silent.local_addr().unwrap().to_string()),
                "{message}"
            );
            assert!(message.contains("example.invalid:8080"), "{message}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}
