//! End-to-end behaviour over real loopback sockets.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use http::{Response, StatusCode};
use sockeye::{
    Bytes, CloseCode, CloseFrame, Config, DataKind, Error, HandshakeError, Message, ProtocolError,
    ProtocolViolation, Server,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Starts an echo server on `addr` and returns its address.
async fn echo_server(addr: &str) -> SocketAddr {
    let server = Server::bind(addr, Config::default()).await.unwrap();
    let local = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.feed(m).await.is_err() {
                break;
            }
        }
    }));
    local
}

async fn round_trips(addr: SocketAddr) {
    let url = match addr {
        SocketAddr::V4(a) => format!("ws://{a}/echo"),
        SocketAddr::V6(a) => format!("ws://[{}]:{}/echo", a.ip(), a.port()),
    };
    let (mut ws, response) = sockeye::connect(url.as_str()).await.unwrap();
    assert_eq!(response.status(), StatusCode::SWITCHING_PROTOCOLS);
    assert!(
        ws.get_ref().tcp().unwrap().nodelay().unwrap(),
        "TCP_NODELAY is on by default"
    );
    let big = Bytes::from((0..1 << 20).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    for m in [
        Message::text("héllo"),
        Message::binary(vec![0, 1, 2]),
        Message::text(""),
        Message::Binary(big),
    ] {
        ws.send(m.clone()).await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), m);
    }
    let reply = ws
        .close(Some(CloseFrame::new(CloseCode::NORMAL, "bye")))
        .await
        .unwrap();
    assert_eq!(reply.map(|f| f.code), Some(CloseCode::NORMAL));
    assert!(ws.recv().await.is_none());
}

#[tokio::test]
async fn echo_over_ipv4() {
    round_trips(echo_server("127.0.0.1:0").await).await;
}

#[tokio::test]
async fn echo_over_ipv6() {
    round_trips(echo_server("[::1]:0").await).await;
}

#[tokio::test]
async fn fragments_and_batches_arrive_in_order() {
    let addr = echo_server("127.0.0.1:0").await;
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    ws.send_fragment(DataKind::Text, "frag".into(), false)
        .await
        .unwrap();
    ws.send(Message::Ping("between".into())).await.unwrap();
    ws.send_fragment(DataKind::Text, "mented".into(), true)
        .await
        .unwrap();
    ws.flush().await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::Pong("between".into()));
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("fragmented"));
    // A thousand queued messages, one flush.
    for i in 0..1000u32 {
        ws.feed(Message::binary(i.to_be_bytes().to_vec())).await.unwrap();
    }
    ws.flush().await.unwrap();
    for i in 0..1000u32 {
        assert_eq!(
            ws.recv().await.unwrap().unwrap(),
            Message::binary(i.to_be_bytes().to_vec())
        );
    }
}

/// The `i`th message of a pushed burst: short and long (over 125 bytes, and over the zero-copy
/// threshold), text and binary, each carrying its number.
fn burst_message(i: u32) -> Message {
    let len = [0usize, 2, 125, 126, 1000, 70_000][i as usize % 6];
    let mut body = i.to_string().into_bytes();
    body.resize(body.len() + len, b'x');
    if i.is_multiple_of(2) {
        Message::text(String::from_utf8(body).unwrap())
    } else {
        Message::binary(body)
    }
}

#[tokio::test]
async fn send_batch_delivers_every_message_in_order_across_high_water_marks() {
    const COUNT: u32 = 3_000;
    // A small high-water mark: the batch is written out, and waits for the reader, many times.
    let config = Config::builder().write_buffer_high_water(4096).build();
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move {
        ws.send_batch((0..COUNT).map(burst_message)).await.unwrap();
        assert_eq!(ws.buffered_amount(), 0, "send_batch flushes at the end");
        ws.close(None).await.unwrap();
    }));
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    for i in 0..COUNT {
        assert_eq!(ws.recv().await.unwrap().unwrap(), burst_message(i), "message {i}");
    }
    assert!(matches!(ws.recv().await, Some(Ok(Message::Close(_)))));
}

#[tokio::test]
async fn split_halves_work_from_two_tasks() {
    let addr = echo_server("127.0.0.1:0").await;
    let (ws, _) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    let (mut sink, mut stream) = ws.split();
    let writer = tokio::spawn(async move {
        for i in 0..200 {
            sink.send(Message::text(format!("m{i}"))).await.unwrap();
        }
        // The Sink's close: 1000, flushed; the reader sees the reply.
        SinkExt::close(&mut sink).await.unwrap();
    });
    let mut got = Vec::new();
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            Message::Text(t) => got.push(t.to_string()),
            Message::Close(frame) => assert_eq!(frame.unwrap().code, CloseCode::NORMAL),
            other => panic!("unexpected {other:?}"),
        }
    }
    writer.await.unwrap();
    assert_eq!(got, (0..200).map(|i| format!("m{i}")).collect::<Vec<_>>());
}

#[tokio::test]
async fn server_decides_subprotocol_and_refusals() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let result = sockeye::accept_with(stream, &Config::default(), |req, mut resp| {
                    if req
                        .headers()
                        .get("origin")
                        .is_some_and(|o| o == "http://evil.example")
                    {
                        let mut refusal = Response::new("origin not allowed\n".to_string());
                        *refusal.status_mut() = StatusCode::FORBIDDEN;
                        return Err(refusal);
                    }
                    resp.headers_mut()
                        .insert("sec-websocket-protocol", "v2.chat".parse().unwrap());
                    Ok(resp)
                })
                .await;
                if let Ok(mut ws) = result {
                    while ws.recv().await.is_some() {}
                }
            });
        }
    });
    let request = http::Request::get(format!("ws://{addr}/"))
        .header("sec-websocket-protocol", "v1.chat, v2.chat")
        .body(())
        .unwrap();
    let (mut ws, response) = sockeye::connect(request).await.unwrap();
    assert_eq!(response.headers()["sec-websocket-protocol"], "v2.chat");
    ws.close(None).await.unwrap();

    let request = http::Request::get(format!("ws://{addr}/"))
        .header("origin", "http://evil.example")
        .body(())
        .unwrap();
    match sockeye::connect(request).await {
        Err(Error::WebSocket(sockeye::ProtocolError::Handshake(HandshakeError::Rejected {
            status: 403,
            ..
        }))) => {}
        other => panic!("expected a 403 refusal, got {other:?}"),
    }
}

/// Sends raw bytes to a fresh Sockeye server connection and returns everything the server sends
/// back until it closes the TCP connection, plus what its handler saw.
/// With `vanish`, the raw client sends FIN right after its bytes.
async fn raw_exchange(
    request: &[u8],
    config: Config,
    vanish: bool,
) -> (Vec<u8>, Vec<Result<Message, Error>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        match sockeye::accept_with(stream, &config, |_, r| Ok(r)).await {
            Ok(mut ws) => {
                while let Some(item) = ws.recv().await {
                    seen.push(item);
                }
            }
            Err(e) => seen.push(Err(e)),
        }
        seen
    });
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request).await.unwrap();
    if vanish {
        tcp.shutdown().await.unwrap();
    }
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), tcp.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    (out, server.await.unwrap())
}

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
    Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

#[tokio::test]
async fn wrong_version_gets_426_with_the_supported_version() {
    let (out, seen) = raw_exchange(
        UPGRADE.replace("Version: 13", "Version: 8").as_bytes(),
        Config::default(),
        false,
    )
    .await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 426 Upgrade Required\r\n"), "{text}");
    assert!(text.contains("sec-websocket-version: 13\r\n"));
    assert!(matches!(
        seen[..],
        [Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
            HandshakeError::UnsupportedVersion
        )))]
    ));
}

/// Regression (issue 13): a second `Sec-WebSocket-Key` was accepted. RFC 6455 §11.3.1 allows one;
/// the 400 names the header. HTTP/1.0 is a 505.
#[tokio::test]
async fn a_repeated_key_gets_400_naming_it_and_http_1_0_gets_505() {
    let twice = UPGRADE.replace(
        "\r\n\r\n",
        "\r\nSec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n\r\n",
    );
    let (out, seen) = raw_exchange(twice.as_bytes(), Config::default(), false).await;
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert!(text.ends_with("duplicate Sec-WebSocket-Key header\n"), "{text}");
    assert!(
        matches!(&seen[..], [Err(Error::WebSocket(sockeye::ProtocolError::Handshake(HandshakeError::MalformedHttp(why))))] if why == "duplicate Sec-WebSocket-Key header"),
        "{seen:?}"
    );
    let (out, seen) = raw_exchange(
        UPGRADE.replace("HTTP/1.1", "HTTP/1.0").as_bytes(),
        Config::default(),
        false,
    )
    .await;
    let text = String::from_utf8_lossy(&out);
    assert!(
        text.starts_with("HTTP/1.1 505 HTTP Version Not Supported\r\n"),
        "{text}"
    );
    assert!(matches!(
        seen[..],
        [Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
            HandshakeError::UnsupportedHttpVersion
        )))]
    ));
}

#[tokio::test]
async fn bytes_after_the_handshake_are_kept_and_violations_close_with_1002() {
    // The upgrade request and, in the same write, a masked "hi" and then an unmasked frame.
    let mut bytes = UPGRADE.as_bytes().to_vec();
    bytes.extend_from_slice(&[0x81, 0x82, 1, 2, 3, 4, b'h' ^ 1, b'i' ^ 2]);
    bytes.extend_from_slice(&[0x81, 0x01, b'x']);
    let (out, seen) = raw_exchange(
        &bytes,
        Config::builder()
            .close_timeout(Duration::from_millis(300))
            .build(),
        false,
    )
    .await;
    let head_end = out.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // The server's close frame: 1002, protocol error.
    assert_eq!(&out[head_end..], &[0x88, 0x02, 0x03, 0xEA]);
    assert!(matches!(&seen[0], Ok(Message::Text(t)) if t == "hi"));
    assert!(
        matches!(
            &seen[1],
            Err(Error::WebSocket(ProtocolError::Protocol(
                ProtocolViolation::UnmaskedFrame
            )))
        ),
        "{seen:?}"
    );
    assert_eq!(seen.len(), 2);
}

#[tokio::test]
async fn a_peer_that_vanishes_is_an_abnormal_closure() {
    let (_, seen) = raw_exchange(UPGRADE.as_bytes(), Config::default(), true).await;
    assert!(
        matches!(seen[..], [Err(Error::WebSocket(ProtocolError::AbnormalClosure))]),
        "{seen:?}"
    );
}

#[tokio::test]
async fn handshake_and_close_timeouts() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = Config::builder()
        .handshake_timeout(Duration::from_millis(200))
        .close_timeout(Duration::from_millis(200))
        .build();
    let server = tokio::spawn(async move {
        // A slowloris: connects, sends half a request, then nothing.
        let (stream, _) = listener.accept().await.unwrap();
        let started = Instant::now();
        let err = sockeye::accept_with(stream, &config, |_, r| Ok(r))
            .await
            .unwrap_err();
        assert!(
            matches!(err.timeout(), Some(sockeye::TimeoutCause::Handshake)),
            "{err:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(2));
        // A peer that never answers our close frame.
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = sockeye::accept_with(stream, &config, |_, r| Ok(r)).await.unwrap();
        let started = Instant::now();
        assert_eq!(ws.close(None).await.unwrap(), None);
        assert!(started.elapsed() < Duration::from_secs(2));
    });
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut silent = TcpStream::connect(addr).await.unwrap();
    silent.write_all(UPGRADE.as_bytes()).await.unwrap();
    server.await.unwrap();
    drop((slow, silent));
}

/// A server's handshake timeout bounds the whole opening handshake, not each of its phases: a
/// client that starts like the HTTP/2 preface ("P", so that the server waits to tell the protocols
/// apart) and then dribbles an HTTP/1.1 request gets no more time than one that sends the request
/// alone. (Each phase used to have a timeout of its own: this client got a 405 after 600 ms from
/// a server whose limit was 400.)
#[tokio::test]
async fn a_server_handshake_timeout_covers_the_protocol_sniff_and_the_upgrade_together() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = Config::builder()
        .handshake_timeout(Duration::from_millis(400))
        .build();
    let server = tokio::spawn(sockeye::Server::from_listener(listener, config).serve(|_ws, _| async {}));
    let mut slow = TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"P").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Not the preface after all; the upgrade's request, in two parts 300 ms apart. Writes may
    // fail once the server has closed: what matters is what it answers.
    let _ = slow.write_all(b"UT / HTTP/1.1\r\nHost: x\r\n").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let _ = slow.write_all(b"\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), slow.read_to_end(&mut answer)).await;
    assert!(
        answer.is_empty(),
        "answered after the handshake timeout: {:?}",
        String::from_utf8_lossy(&answer)
    );
    server.abort();
}

#[tokio::test]
async fn bad_urls_and_refused_connections_are_clear_errors() {
    assert!(matches!(
        sockeye::connect("http//nope").await,
        Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
            HandshakeError::InvalidUrl(_)
        )))
    ));
    assert!(matches!(
        sockeye::connect("ftp://127.0.0.1/").await,
        Err(Error::WebSocket(sockeye::ProtocolError::Handshake(
            HandshakeError::InvalidUrl(_)
        )))
    ));
    // Bind and drop a listener to find a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    match sockeye::connect(format!("ws://127.0.0.1:{port}/")).await {
        Err(Error::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused);
            // The message says where.
            assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
        }
        other => panic!("expected connection refused, got {other:?}"),
    }
}

#[tokio::test]
async fn a_connection_timeout_names_the_address() {
    // A listener whose accept queue is full (backlog 0, one connection waiting, never accepted):
    // the kernel drops further SYNs, so a connection attempt hangs as one to a dead host does.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    while let Ok(Ok(tcp)) = tokio::time::timeout(Duration::from_millis(200), TcpStream::connect(addr)).await {
        queued.push(tcp);
        assert!(queued.len() < 16, "the accept queue never filled");
    }
    let config = Config::builder()
        .handshake_timeout(Duration::from_millis(300))
        .proxy(sockeye::proxy::ProxyConfig::Direct)
        .build();
    let started = Instant::now();
    match sockeye::connect_with(format!("ws://{addr}/"), &config).await {
        Err(Error::Io(e)) => {
            assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
            assert!(e.to_string().contains(&addr.to_string()), "{e}");
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(2));
    drop((listener, queued));
}

#[tokio::test]
async fn permessage_deflate_is_negotiated_by_default_and_can_be_refused() {
    let addr = echo_server("127.0.0.1:0").await;
    let (mut ws, response) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    assert_eq!(
        response.headers()["sec-websocket-extensions"],
        "permessage-deflate"
    );
    assert!(ws.connection().is_deflate_enabled());
    let text = "compressible ".repeat(10_000);
    ws.send(Message::text(text.clone())).await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text));
    ws.close(None).await.unwrap();

    // A client configured without it offers nothing.
    let config = Config::builder().deflate(None).build();
    let (ws, response) = sockeye::connect_with(format!("ws://{addr}/"), &config)
        .await
        .unwrap();
    assert!(response.headers().get("sec-websocket-extensions").is_none());
    assert!(!ws.connection().is_deflate_enabled());

    // A server's `decide` can strip the extension to refuse compression for one client.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (stream, _) = listener.accept().await.unwrap();
        let mut ws = sockeye::accept_with(stream, &Config::default(), |_, mut response| {
            response.headers_mut().remove("sec-websocket-extensions");
            Ok(response)
        })
        .await
        .unwrap();
        assert!(!ws.connection().is_deflate_enabled());
        while let Some(Ok(m)) = ws.recv().await {
            if m.is_data() {
                ws.send(m).await.unwrap();
            }
        }
    });
    let (mut ws, response) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    assert!(response.headers().get("sec-websocket-extensions").is_none());
    assert!(!ws.connection().is_deflate_enabled());
    ws.send("plain").await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("plain"));
}

/// Many connections of one server share a pool of one compression state each way: states are
/// lent from connection to connection between messages, and context takeover (each client's
/// messages and echoes refer back to the previous ones) survives, in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_sharing_a_small_deflate_pool_keep_their_context() {
    use sockeye::proto::extension::deflate::{DeflateConfig, DeflatePool};
    let pool = DeflatePool::new(1);
    let config = Config::builder()
        .deflate(Some(DeflateConfig::default().pool(Some(pool.clone()))))
        .build();
    let server = Server::bind("127.0.0.1:0", config).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(|mut ws, _| async move {
        while let Some(Ok(m)) = ws.next().await {
            if m.is_data() && ws.send(m).await.is_err() {
                break;
            }
        }
    }));
    let clients = (0..8).map(|c| {
        tokio::spawn(async move {
            let (mut ws, _) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
            assert!(ws.connection().is_deflate_enabled());
            for i in 0..40 {
                let text = format!(
                    "{{\"client\":{c},\"seq\":{i},\"body\":\"{}\"}}",
                    "salmon run ".repeat(i % 7 * 40 + 1)
                );
                ws.send(Message::text(text.clone())).await.unwrap();
                assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text(text));
                tokio::task::yield_now().await;
            }
            ws.close(None).await.unwrap();
        })
    });
    for client in clients.collect::<Vec<_>>() {
        client.await.unwrap();
    }
    let (compressors, decompressors) = pool.idle();
    assert!(compressors <= 1 && decompressors <= 1, "{:?}", pool.idle());
}

/// Regression (issue 13): a port that is not a number, or over 65535, fell back to port 80 and
/// a connection was opened. Now the URL is refused first: the "proxy" below, through which any
/// connection would go, sees none.
#[tokio::test]
async fn an_invalid_port_is_refused_before_any_connection() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = sockeye::proxy::Proxy::parse(&format!("http://{}", listener.local_addr().unwrap())).unwrap();
    let config = Config::builder()
        .proxy(sockeye::proxy::ProxyConfig::Url(proxy))
        .handshake_timeout(Duration::from_secs(2))
        .build();
    for (url, port) in [
        ("ws://127.0.0.1:99999/", "99999"),
        ("ws://127.0.0.1:8008x/", "8008x"),
        ("ws://127.0.0.1:abc/", "abc"),
        ("wss://localhost:65536/", "65536"),
    ] {
        let err = sockeye::connect_with(url, &config).await.unwrap_err();
        assert!(
            matches!(&err, Error::WebSocket(sockeye::ProtocolError::Handshake(HandshakeError::InvalidUrl(why))) if why.contains(port)),
            "{url}: {err:?}"
        );
        assert!(err.to_string().contains(port), "{err}");
        assert!(!err.is_peer_fault(), "a bad URL is the caller's mistake");
    }
    let err = sockeye::connect_with("ftp://127.0.0.1/", &config)
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("ws://, wss://, http:// or https://"),
        "{err}"
    );
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(accepted.is_err(), "a connection was opened: {accepted:?}");
}

/// Regression (issue 13): the client compared schemes with case (`WS://` was refused, RFC 3986
/// §3.1 says case-insensitive); `http://` is `ws://`, as in browsers' WebSocket constructor.
#[tokio::test]
async fn schemes_are_case_insensitive_and_http_means_ws() {
    let addr = echo_server("127.0.0.1:0").await;
    for scheme in ["WS", "Ws", "http", "HTTP"] {
        let (mut ws, _) = sockeye::connect(format!("{scheme}://{addr}/echo"))
            .await
            .unwrap_or_else(|e| panic!("{scheme}: {e}"));
        ws.send("hi").await.unwrap();
        assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("hi"));
        ws.close(None).await.unwrap();
    }
}

#[tokio::test]
async fn serve_takes_the_same_handlers_as_serve_requests() {
    // A handler that is `Send` and `Clone` but not `Sync` (a `Cell`): `serve_requests` always took
    // one, and `serve`, which only drops the request, takes one too.
    let calls = std::cell::Cell::new(0u32);
    let server = Server::bind("127.0.0.1:0", Config::default()).await.unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.serve(move |mut ws, _| {
        let calls = calls.clone();
        async move {
            calls.set(calls.get() + 1);
            let _ = ws.send(format!("call {}", calls.get())).await;
        }
    }));
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/")).await.unwrap();
    assert_eq!(ws.recv().await.unwrap().unwrap(), Message::text("call 1"));
}
