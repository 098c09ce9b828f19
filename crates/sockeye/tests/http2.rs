//! WebSockets over HTTP/2 (RFC 8441): Sockeye's client and server over h2c (prior knowledge) and
//! h2 (ALPN), shared connections, fall-back, refusals on one stream while the others go on, and
//! the closing handshake ending the stream but not the connection.
#![cfg(all(feature = "http2", feature = "tls"))]
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use futures_util::StreamExt;
use rcgen::{CertificateParams, KeyPair};
use sockeye::tls::{ClientTlsOptions, Roots, ServerTls};
use sockeye::{CloseCode, CloseFrame, Config, Error, HandshakeError, HttpVersion, Message, Server};

/// An echo server; counts connections that arrived over HTTP/2 and over HTTP/1.1.
struct Echo {
    addr: SocketAddr,
    http2: Arc<AtomicUsize>,
    http1: Arc<AtomicUsize>,
}

async fn echo_server(config: Config, tls: Option<&ServerTls>) -> Echo {
    let mut server = Server::bind("127.0.0.1:0", config).await.unwrap();
    if let Some(tls) = tls {
        server = server.with_tls(tls.acceptor());
    }
    let addr = server.local_addr().unwrap();
    let (http2, http1) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let counters = (Arc::clone(&http2), Arc::clone(&http1));
    tokio::spawn(server.serve_requests(move |mut ws, request, _| {
        let counter = if ws.get_ref().is_http2() {
            &counters.0
        } else {
            &counters.1
        };
        counter.fetch_add(1, Ordering::SeqCst);
        assert_eq!(
            ws.get_ref().is_http2(),
            request.version() == http::Version::HTTP_2
        );
        async move {
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        }
    }));
    Echo { addr, http2, http1 }
}

fn config(version: HttpVersion) -> Config {
    Config::builder().http_version(version).build()
}

/// Echoes text and binary messages of sizes around the frame-length boundaries, then closes 1000.
async fn exchange(ws: &mut sockeye::WebSocket<sockeye::TransportStream>) {
    for size in [0, 1, 125, 126, 65_535, 65_536, 1 << 20] {
        let text = Message::text("é".repeat(size / 2));
        ws.send(text.clone()).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), text);
        let binary = Message::Binary(Bytes::from(vec![size as u8; size]));
        ws.send(binary.clone()).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), binary);
    }
    let reply = ws
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    assert_eq!(reply.unwrap().code, CloseCode::NORMAL);
}

#[tokio::test]
async fn h2c_prior_knowledge_carries_many_websockets_on_one_connection() {
    let server = echo_server(Config::default(), None).await;
    let url = format!("ws://{}/chat?room=1", server.addr);
    let config = config(HttpVersion::Http2Only);
    // The first socket opens the connection; nine more share it, all at once.
    let (mut first, response) = sockeye::connect_with(url.as_str(), &config).await.unwrap();
    assert_eq!(response.status(), 200);
    assert!(first.get_ref().is_http2());
    let others =
        futures_util::future::join_all((0..9).map(|_| sockeye::connect_with(url.as_str(), &config))).await;
    let mut others: Vec<_> = others.into_iter().map(|r| r.unwrap().0).collect();
    futures_util::future::join_all(others.iter_mut().map(exchange)).await;
    exchange(&mut first).await;
    assert_eq!(server.http2.load(Ordering::SeqCst), 10);
    assert_eq!(server.http1.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_closed_websocket_leaves_the_connection_to_the_others() {
    let server = echo_server(Config::default(), None).await;
    let url = format!("ws://{}/", server.addr);
    let config = config(HttpVersion::Http2Only);
    let (mut a, _) = sockeye::connect_with(url.as_str(), &config).await.unwrap();
    let (mut b, _) = sockeye::connect_with(url.as_str(), &config).await.unwrap();
    a.close(None).await.unwrap();
    assert!(a.recv().await.is_none());
    b.send("still here").await.unwrap();
    assert_eq!(b.recv().await.unwrap().unwrap(), Message::text("still here"));
    // A third socket opens on the same connection after the first one ended.
    let (mut c, _) = sockeye::connect_with(url.as_str(), &config).await.unwrap();
    exchange(&mut c).await;
    exchange(&mut b).await;
}

#[tokio::test]
async fn compression_is_negotiated_over_http2() {
    let server = echo_server(Config::default(), None).await;
    let (mut ws, response) =
        sockeye::connect_with(format!("ws://{}/", server.addr), &config(HttpVersion::Http2Only))
            .await
            .unwrap();
    let extensions = response.headers()["sec-websocket-extensions"].to_str().unwrap();
    assert!(extensions.starts_with("permessage-deflate"), "{extensions}");
    assert!(ws.connection().is_deflate_enabled());
    exchange(&mut ws).await;
}

fn certificate() -> (String, String) {
    let params = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let key = KeyPair::generate().unwrap();
    let ca = params.self_signed(&key).unwrap();
    (ca.pem(), key.serialize_pem())
}

fn trusting(cert: &str, version: HttpVersion) -> Config {
    let tls = ClientTlsOptions {
        roots: Roots::Empty,
        danger_skip_hostname_verification: false,
        ..Default::default()
    }
    .add_ca_pem(cert.as_bytes())
    .unwrap()
    .build()
    .unwrap();
    config(version).to_builder().tls_client(Some(tls)).build()
}

#[tokio::test]
async fn wss_uses_h2_by_alpn_and_falls_back_when_the_server_does_not() {
    let (cert, key) = certificate();
    let tls = ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).unwrap();
    let h2 = echo_server(Config::default(), Some(&tls)).await;
    let h1_only = echo_server(Config::builder().accept_http2(false).build(), Some(&tls)).await;
    for version in [HttpVersion::Http2Preferred, HttpVersion::Http2Only] {
        let url = format!("wss://localhost:{}/", h2.addr.port());
        let (mut ws, _) = sockeye::connect_with(url.as_str(), &trusting(&cert, version))
            .await
            .unwrap();
        assert!(ws.get_ref().is_http2() && ws.get_ref().is_tls());
        exchange(&mut ws).await;
    }
    assert_eq!(h2.http2.load(Ordering::SeqCst), 2);

    let url = format!("wss://localhost:{}/", h1_only.addr.port());
    let (mut ws, response) =
        sockeye::connect_with(url.as_str(), &trusting(&cert, HttpVersion::Http2Preferred))
            .await
            .unwrap();
    assert_eq!(response.status(), 101);
    assert!(!ws.get_ref().is_http2());
    exchange(&mut ws).await;
    let refused = sockeye::connect_with(url.as_str(), &trusting(&cert, HttpVersion::Http2Only)).await;
    assert!(
        matches!(
            refused,
            Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
                HandshakeError::Http2Unavailable(_)
            )))
        ),
        "{refused:?}"
    );
    // HTTP/1.1 clients are served on the same port as ever.
    let (mut ws, _) = sockeye::connect_with(
        format!("wss://localhost:{}/", h2.addr.port()),
        &trusting(&cert, HttpVersion::Http1),
    )
    .await
    .unwrap();
    assert!(!ws.get_ref().is_http2());
    exchange(&mut ws).await;
}

#[tokio::test]
async fn http1_clients_are_unaffected_and_http2_can_be_turned_off() {
    let server = echo_server(Config::default(), None).await;
    let (mut ws, _) = sockeye::connect(format!("ws://{}/", server.addr)).await.unwrap();
    exchange(&mut ws).await;
    let off = echo_server(Config::builder().accept_http2(false).build(), None).await;
    let refused = sockeye::connect_with(format!("ws://{}/", off.addr), &config(HttpVersion::Http2Only)).await;
    assert!(
        matches!(
            refused,
            Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
                HandshakeError::Http2Unavailable(_)
            )))
        ),
        "{refused:?}"
    );
}

/// Raw h2 requests: refusals are HTTP/2 responses on their own stream, and a WebSocket opened
/// before them on the same connection keeps echoing.
#[tokio::test]
async fn bad_requests_are_refused_per_stream() {
    let server = echo_server(Config::default(), None).await;
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    // A healthy WebSocket, spoken by hand: a masked text frame "hi", its unmasked echo.
    let mut ok = http::Request::builder()
        .method("CONNECT")
        .uri(format!("http://{}/", server.addr))
        .header("sec-websocket-version", "13")
        .body(())
        .unwrap();
    ok.extensions_mut().insert(h2::ext::Protocol::from("websocket"));
    // Wait for the server's SETTINGS before using extended CONNECT.
    for _ in 0..100 {
        if client.is_extended_connect_protocol_enabled() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(client.is_extended_connect_protocol_enabled());
    let (response, mut healthy) = client.send_request(ok, false).unwrap();
    let mut healthy_body = response.await.unwrap().into_body();
    let echo = async |send: &mut h2::SendStream<Bytes>, recv: &mut h2::RecvStream| {
        send.send_data(Bytes::from_static(&[0x81, 0x82, 0, 0, 0, 0, b'h', b'i']), false)
            .unwrap();
        let data = recv.data().await.unwrap().unwrap();
        assert_eq!(&data[..], &[0x81, 0x02, b'h', b'i']);
    };
    echo(&mut healthy, &mut healthy_body).await;

    let cases: [(&str, Option<&str>, &str, u16); 3] = [
        ("CONNECT", Some("chat"), "13", 400),
        ("CONNECT", Some("websocket"), "8", 426),
        ("GET", None, "13", 405),
    ];
    for (method, protocol, version, status) in cases {
        let mut request = http::Request::builder()
            .method(method)
            .uri(format!("http://{}/", server.addr))
            .header("sec-websocket-version", version)
            .body(())
            .unwrap();
        if let Some(protocol) = protocol {
            request.extensions_mut().insert(h2::ext::Protocol::from(protocol));
        }
        let (response, _send) = client.send_request(request, method == "GET").unwrap();
        let response = response.await.unwrap();
        assert_eq!(
            response.status(),
            status,
            "{method} {protocol:?} version {version}"
        );
        echo(&mut healthy, &mut healthy_body).await;
    }
}

/// A server shutdown over HTTP/2: GOAWAY for new streams, close 1001 on each open WebSocket,
/// and `serve` returns once they have closed.
#[tokio::test]
async fn graceful_shutdown_closes_every_stream_with_1001() {
    let server = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let addr = server.local_addr().unwrap();
    let shutdown = server.shutdown_handle();
    let serving = tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.feed(m).await.is_err() {
                break;
            }
        }
    }));
    let config = config(HttpVersion::Http2Only);
    let url = format!("ws://{addr}/");
    let mut sockets = Vec::new();
    for _ in 0..3 {
        let (mut ws, _) = sockeye::connect_with(url.as_str(), &config).await.unwrap();
        ws.send("hi").await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("hi"));
        sockets.push(ws);
    }
    shutdown.shutdown();
    for ws in &mut sockets {
        match ws.recv().await {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::GOING_AWAY),
            other => panic!("expected close 1001, got {other:?}"),
        }
        assert!(ws.recv().await.is_none());
    }
    tokio::time::timeout(std::time::Duration::from_secs(5), serving)
        .await
        .expect("serve returns after the shutdown")
        .unwrap()
        .unwrap();
}

/// hyper's HTTP/2 server with extended CONNECT, and axum routing it: `Upgrade` takes the
/// request and answers 200; Sockeye's client reaches it over h2c.
#[tokio::test]
async fn hyper_and_axum_serve_websockets_over_http2() {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    async fn socket(upgrade: sockeye::upgrade::Upgrade) -> axum::response::Response {
        upgrade.select_protocol(["chat"]).on_upgrade(|mut ws| async move {
            while let Some(Ok(m)) = ws.next().await {
                if m.is_data() && ws.feed(m).await.is_err() {
                    break;
                }
            }
        })
    }
    let app = axum::Router::new().route("/ws", axum::routing::any(socket));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(async move {
                let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder.http2().enable_connect_protocol();
                let _ = builder
                    .serve_connection_with_upgrades(TokioIo::new(tcp), service)
                    .await;
            });
        }
    });
    let request = http::Request::get(format!("ws://{addr}/ws"))
        .header("sec-websocket-protocol", "chat")
        .body(())
        .unwrap();
    let (mut ws, response) = sockeye::connect_with(request, &config(HttpVersion::Http2Only))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["sec-websocket-protocol"], "chat");
    assert!(ws.get_ref().is_http2());
    exchange(&mut ws).await;
    // HTTP/1.1 upgrades reach the same route.
    let (mut ws, response) = sockeye::connect(format!("ws://{addr}/ws")).await.unwrap();
    assert_eq!(response.status(), 101);
    exchange(&mut ws).await;
}

/// Over the server's stream limit the client opens another connection instead of queueing the
/// socket behind the others until one ends.
#[tokio::test]
async fn a_full_connection_makes_the_client_open_another() {
    let server = echo_server(Config::builder().http2_max_concurrent_streams(3).build(), None).await;
    let url = format!("ws://{}/", server.addr);
    let config = config(HttpVersion::Http2Only)
        .to_builder()
        .handshake_timeout(std::time::Duration::from_secs(2))
        .build();
    let mut sockets = Vec::new();
    for _ in 0..7 {
        sockets.push(sockeye::connect_with(url.as_str(), &config).await.unwrap().0);
    }
    for ws in &mut sockets {
        ws.send("hi").await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("hi"));
    }
    assert_eq!(server.http2.load(Ordering::SeqCst), 7);
}

/// A raw HTTP/2 connection to `addr`, once the server's SETTINGS have arrived.
async fn raw_h2(addr: SocketAddr) -> (h2::client::SendRequest<Bytes>, tokio::task::JoinHandle<()>) {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (client, mut connection) = h2::client::handshake(tcp).await.unwrap();
    let mut ping = connection.ping_pong().unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    ping.ping(h2::Ping::opaque()).await.unwrap();
    (client, driver)
}

fn extended_connect(addr: SocketAddr) -> http::Request<()> {
    let mut request = http::Request::builder()
        .method("CONNECT")
        .uri(format!("http://{addr}/"))
        .header("sec-websocket-version", "13")
        .body(())
        .unwrap();
    request
        .extensions_mut()
        .insert(h2::ext::Protocol::from("websocket"));
    request
}

/// HTTP/2 connections count against `max_connections` like any other, and their WebSockets too:
/// a connection over the limit is sent away (GOAWAY) without a WebSocket, and closed.
#[tokio::test]
async fn http2_connections_and_streams_count_against_the_limit() {
    let server = echo_server(Config::builder().max_connections(2).build(), None).await;
    // One connection and its one WebSocket: both permits.
    let (mut first, _) =
        sockeye::connect_with(format!("ws://{}/", server.addr), &config(HttpVersion::Http2Only))
            .await
            .unwrap();
    let tcp = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    // Whatever the timing, no WebSocket: the request fails, is refused, or is answered 503.
    if let Ok(mut client) = client.ready().await
        && let Ok((response, _send)) = client.send_request(extended_connect(server.addr), false)
        && let Ok(response) = response.await
    {
        assert_eq!(response.status(), 503);
    }
    // The refused connection ends by itself.
    tokio::time::timeout(std::time::Duration::from_secs(5), driver)
        .await
        .expect("the over-limit connection is closed")
        .unwrap();
    first.send("still served").await.unwrap();
    assert_eq!(
        first.recv().await.unwrap().unwrap(),
        Message::text("still served")
    );
}

/// A connection that opens no WebSocket is closed after the handshake timeout, like an HTTP/1.1
/// client that never sends its request.
#[tokio::test]
async fn an_http2_connection_without_websockets_is_closed_after_the_handshake_timeout() {
    let server = echo_server(
        Config::builder()
            .handshake_timeout(std::time::Duration::from_millis(300))
            .build(),
        None,
    )
    .await;
    let (_client, driver) = raw_h2(server.addr).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), driver)
        .await
        .expect("the idle connection is closed")
        .unwrap();
}

/// Every duration a user can set, at `Duration::MAX`, over HTTP/1.1 and HTTP/2: "never", not a
/// panic (`Instant + Duration` overflows; the handshake deadlines were built that way).
#[tokio::test]
async fn durations_too_long_for_an_instant_mean_never() {
    let forever = std::time::Duration::MAX;
    for version in [HttpVersion::Http1, HttpVersion::Http2Only] {
        let config = Config::builder()
            .http_version(version)
            .handshake_timeout(forever)
            .close_timeout(forever)
            .keepalive(Some(forever))
            .keepalive_timeout(forever)
            .shutdown_timeout(forever)
            .build();
        let echo = echo_server(config.clone(), None).await;
        let (mut ws, _) = sockeye::connect_with(format!("ws://{}/", echo.addr), &config)
            .await
            .unwrap();
        exchange(&mut ws).await;
    }
}
