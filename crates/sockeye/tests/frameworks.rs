//! Upgrading from hyper 1 and from axum: the same handshake checks and compression negotiation as
//! `accept`, on a connection the framework owns until the 101.
#![allow(clippy::unwrap_used)]

use std::convert::Infallible;
use std::net::SocketAddr;

use futures_util::StreamExt;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use sockeye::upgrade::{Upgrade, UpgradedWebSocket};
use sockeye::{CloseCode, CloseFrame, Message};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

async fn echo(mut ws: UpgradedWebSocket) {
    while let Some(Ok(message)) = ws.next().await {
        if message.is_data() && ws.feed(message).await.is_err() {
            break;
        }
    }
}

async fn hyper_service(mut request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if request.uri().path() != "/ws" {
        return Ok(Response::new(Full::from("<!doctype html><p>not a socket</p>")));
    }
    match Upgrade::from_request(&mut request) {
        Ok(upgrade) => Ok(upgrade.select_protocol(["superchat", "chat"]).on_upgrade(echo)),
        Err(refusal) => Ok(refusal.map(Full::from)),
    }
}

async fn hyper_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(tcp);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, hyper::service::service_fn(hyper_service))
                    .with_upgrades()
                    .await;
            });
        }
    });
    addr
}

/// Echoes messages of several sizes through `url`, with a subprotocol offered and compression.
async fn echo_round_trips(url: &str) {
    let request = http::Request::get(url)
        .header("sec-websocket-protocol", "chat")
        .body(())
        .unwrap();
    let (mut ws, response) = sockeye::connect(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
    assert!(
        ws.connection().is_deflate_enabled(),
        "permessage-deflate negotiated"
    );
    for m in [
        Message::text("hello"),
        Message::binary(vec![1u8; 100_000]),
        Message::text("é".repeat(5000)),
        Message::binary(Vec::new()),
    ] {
        ws.send(m.clone()).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), m);
    }
    let reply = ws
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "")))
        .await
        .unwrap();
    assert_eq!(reply.map(|f| f.code), Some(CloseCode::NORMAL));
}

/// Sends a raw request and returns the response head's status line.
async fn status_line(addr: SocketAddr, request: &str) -> String {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tcp.read(&mut buf).await.unwrap();
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn hyper_upgrades_with_the_same_checks_as_accept() {
    let addr = hyper_server().await;
    echo_round_trips(&format!("ws://{addr}/ws")).await;
    // Plain HTTP on the same server still works.
    let page = status_line(addr, "GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(page, "HTTP/1.1 200 OK");
    // Not an upgrade, or the wrong version: refused with the handshake's statuses.
    let plain = status_line(addr, "GET /ws HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(plain, "HTTP/1.1 400 Bad Request");
    let v8 = status_line(
        addr,
        "GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n\r\n",
    )
    .await;
    assert_eq!(v8, "HTTP/1.1 426 Upgrade Required");
}

#[tokio::test]
async fn axum_extracts_an_upgrade_with_no_glue() {
    let app = axum::Router::new().route(
        "/ws",
        axum::routing::get(|upgrade: Upgrade| async move {
            let response: axum::response::Response = upgrade.select_protocol(["chat"]).on_upgrade(echo);
            response
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    echo_round_trips(&format!("ws://{addr}/ws")).await;
    let plain = status_line(addr, "GET /ws HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(plain, "HTTP/1.1 400 Bad Request");
}
