//! The web face (`sockeye_pubsub::web`) against hostile clients, over real loopback sockets:
//! half-sent requests and idle connections closed by their timeouts, sockets of pages from
//! other sites refused, and the connection caps per node and per address. Every wait is
//! bounded; the timeouts are short ones set by the tests' configs.
#![cfg(feature = "web")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/refusal.rs"]
mod refusal;

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use sockeye::{Message, WebSocket};
use sockeye_pubsub::backplane::InProcess;
use sockeye_pubsub::web::{Web, WebConfig};
use sockeye_pubsub::{Hub, HubConfig, OnGap, SessionConfig, SubscriberConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

/// Serves `config` on a loopback port, each connection admitted by the caps first.
async fn node(config: WebConfig) -> (Web, SocketAddr) {
    serve(Hub::in_process(), config).await
}

/// Serves `hub` with `config` on a loopback port, each connection admitted by the caps first.
async fn serve(hub: Hub, config: WebConfig) -> (Web, SocketAddr) {
    let web = Web::new(hub, config);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = web.clone();
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            let Ok(admitted) = serving.admit(peer.ip()) else {
                continue;
            };
            let io = hyper_util::rt::TokioIo::new(tcp);
            tokio::spawn(serving.serve_admitted(io, serving.router(), admitted));
        }
    });
    (web, addr)
}

/// Reads until the server closes the connection; what it sent, or `None` if it did not close
/// within `within`.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            match tcp.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(within, read).await.ok()?;
    Some(seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_within_the_header_read_timeout() {
    let timeout = Duration::from_millis(500);
    let (_web, addr) = node(
        WebConfig::default()
            .header_read_timeout(timeout)
            .idle_timeout(None),
    )
    .await;
    let mut connections = Vec::new();
    for _ in 0..64 {
        let mut tcp = TcpStream::connect(addr).await.unwrap();
        tcp.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: web")
            .await
            .unwrap();
        connections.push(tcp);
    }
    let sent = Instant::now();
    let mut waits = tokio::task::JoinSet::new();
    for mut tcp in connections {
        waits.spawn(async move { closed_within(&mut tcp, timeout + Duration::from_secs(3)).await });
    }
    let mut open = 0;
    while let Some(closed) = waits.join_next().await {
        open += usize::from(closed.unwrap().is_none());
    }
    assert_eq!(
        open,
        0,
        "{open} of 64 half-sent requests still open after {:?}",
        sent.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed() {
    let timeout = Duration::from_millis(500);
    let (_web, addr) = node(
        WebConfig::default()
            .header_read_timeout(timeout)
            .idle_timeout(None),
    )
    .await;
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /nowhere HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let seen = closed_within(&mut tcp, timeout + Duration::from_secs(3))
        .await
        .expect("the idle keep-alive connection closed");
    assert!(
        seen.starts_with(b"HTTP/1.1 404"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_http2_and_undecided_connections_are_closed() {
    let timeout = Duration::from_millis(400);
    let (_web, addr) = node(
        WebConfig::default()
            .header_read_timeout(None)
            .idle_timeout(timeout),
    )
    .await;
    // HTTP/2 with prior knowledge: the preface and an empty SETTINGS frame, then nothing.
    let mut h2 = TcpStream::connect(addr).await.unwrap();
    h2.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    // Half the preface: the node does not know yet which HTTP it speaks.
    let mut undecided = TcpStream::connect(addr).await.unwrap();
    undecided.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let within = timeout * 2 + Duration::from_secs(3);
    let seen = closed_within(&mut h2, within)
        .await
        .expect("the idle HTTP/2 connection closed");
    // Its frames: the node's SETTINGS, …, a GOAWAY (type 7) and the PING whose answer the
    // graceful close waits for (none comes: the connection is dropped).
    let mut at = 0;
    let mut types = Vec::new();
    while at + 9 <= seen.len() {
        let len = usize::from(seen[at]) << 16 | usize::from(seen[at + 1]) << 8 | usize::from(seen[at + 2]);
        types.push(seen[at + 3]);
        at += 9 + len;
    }
    assert!(types.contains(&7), "frame types {types:?}");
    assert!(closed_within(&mut undecided, within).await.is_some());
}

/// The status and body of a WebSocket upgrade request with `origin`.
async fn upgrade(addr: SocketAddr, origin: Option<&str>) -> (u16, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let origin = origin.map(|o| format!("Origin: {o}\r\n")).unwrap_or_default();
    let head = format!(
        "GET / HTTP/1.1\r\nHost: {addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{origin}\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut seen = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = async {
        loop {
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
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
                    return (head[9..12].parse().unwrap(), body[..length].to_owned());
                }
            }
            let n = tcp.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed before an answer: {text}");
            seen.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer in 10 s")
}

/// What a browser's socket gets: the close code and reason the node closed it with right after
/// the upgrade, or `None` when the node kept it open (nothing within 300 ms).
async fn browser_socket(addr: SocketAddr, origin: &str) -> Option<(u16, String)> {
    let request = refusal::browser_request(addr, origin);
    refusal::close_after_upgrade(addr, &request, Duration::from_millis(300)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_from_another_origin_is_refused_by_default_and_accepted_once_allowed() {
    let (_web, addr) = node(WebConfig::default()).await;
    // A browser is told why after the upgrade (an HTTP 403 shows the page only 1006).
    let (code, reason) = browser_socket(addr, "https://evil.example")
        .await
        .expect("closed at once");
    assert_eq!(code, 4004, "{reason}");
    assert!(
        reason.starts_with("origin_not_allowed: ")
            && reason.contains("--allowed-origin https://evil.example"),
        "{reason}"
    );
    // The node's own pages, and clients that are not browsers (no Origin).
    assert_eq!(browser_socket(addr, &format!("http://{addr}")).await, None);
    assert_eq!(upgrade(addr, Some(&format!("http://{addr}"))).await.0, 101);
    assert_eq!(upgrade(addr, None).await.0, 101);
    // A port of the same host is another origin.
    let other_port = format!("http://127.0.0.1:{}", addr.port() + 1);
    assert_eq!(browser_socket(addr, &other_port).await.map(|c| c.0), Some(4004));
    assert!(
        metrics("127.0.0.1", addr)
            .await
            .contains("sockeye_pubsub_refused_origins_total 2\n")
    );

    let allowed = WebConfig::default()
        .allowed_origin("https://evil.example")
        .unwrap();
    let (_web, addr) = node(allowed).await;
    assert_eq!(upgrade(addr, Some("https://evil.example")).await.0, 101);
    assert_eq!(browser_socket(addr, "https://evil.example").await, None);
    assert_eq!(
        browser_socket(addr, "https://evil.example:8443")
            .await
            .map(|c| c.0),
        Some(4004)
    );
    let (_web, addr) = node(WebConfig::default().allowed_origin("*").unwrap()).await;
    assert_eq!(upgrade(addr, Some("null")).await.0, 101);
    assert!(WebConfig::default().allowed_origin("evil.example").is_err());

    // Review R1: another scheme is another origin (RFC 6454). On a node served over TLS (as
    // `WebConfig::tls` says; cleartext here) a page of `http://` its host, which anyone on the
    // path may rewrite, is refused; one of `https://` is its own. And the reverse in cleartext.
    let (_web, tls) = node(WebConfig::default().tls(true)).await;
    assert_eq!(
        browser_socket(tls, &format!("http://{tls}")).await.map(|c| c.0),
        Some(4004)
    );
    assert_eq!(upgrade(tls, Some(&format!("https://{tls}"))).await.0, 101);
    let (_web, plain) = node(WebConfig::default()).await;
    assert_eq!(
        browser_socket(plain, &format!("https://{plain}"))
            .await
            .map(|c| c.0),
        Some(4004)
    );
}

/// The node's `/metrics` text, asked from `source`.
async fn metrics(source: &str, addr: SocketAddr) -> String {
    let mut tcp = connect_from(source, addr).await;
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let seen = closed_within(&mut tcp, Duration::from_secs(10)).await.unwrap();
    String::from_utf8(seen).unwrap()
}

/// A connection to `addr` from `source` (any loopback address).
async fn connect_from(source: &str, addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(source.parse::<IpAddr>().unwrap(), 0))
        .unwrap();
    socket.connect(addr).await.unwrap()
}

/// Whether `tcp` is served: a `GET /client.js` answered 200.
async fn served(tcp: &mut TcpStream) -> bool {
    if tcp
        .write_all(b"GET /client.js HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut head = [0u8; 12];
    let read = tokio::time::timeout(Duration::from_secs(10), tcp.read_exact(&mut head)).await;
    matches!(read, Ok(Ok(_))) && head.starts_with(b"HTTP/1.1 200")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_at_its_cap_does_not_lock_another_out() {
    let (_web, addr) = node(
        WebConfig::default()
            .max_connections_per_address(8)
            .max_connections(12),
    )
    .await;
    let mut held = Vec::new();
    for _ in 0..8 {
        let mut tcp = connect_from("127.0.0.1", addr).await;
        assert!(served(&mut tcp).await);
        held.push(tcp);
    }
    // A ninth from the same address is closed at once.
    let mut ninth = connect_from("127.0.0.1", addr).await;
    assert!(closed_within(&mut ninth, Duration::from_secs(5)).await.is_some());
    // Another address is served, until the node's cap.
    for _ in 0..4 {
        let mut tcp = connect_from("127.0.0.2", addr).await;
        assert!(served(&mut tcp).await);
        held.push(tcp);
    }
    let mut over = connect_from("127.0.0.3", addr).await;
    assert!(closed_within(&mut over, Duration::from_secs(5)).await.is_some());
    // The refusals are counted (read from a connection the caps let in).
    held.pop();
    let deadline = Instant::now() + Duration::from_secs(5);
    let counted = loop {
        let text = metrics("127.0.0.3", addr).await;
        if text.contains("HTTP/1.1 200") {
            break text;
        }
        assert!(Instant::now() < deadline, "no place for /metrics: {text}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Each at least once (a try at /metrics before the place was given back counts too).
    for cap in ["address", "node"] {
        let name = format!("sockeye_pubsub_capped_connections_total{{cap=\"{cap}\"}} ");
        let count: u64 = counted
            .lines()
            .find_map(|l| l.strip_prefix(&name)?.parse().ok())
            .unwrap_or(0);
        assert!(count >= 1, "{counted}");
    }
    // A connection that ends gives its place back.
    held.truncate(10);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut tcp = connect_from("127.0.0.3", addr).await;
        if served(&mut tcp).await {
            break;
        }
        assert!(Instant::now() < deadline, "the place was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A WebSocket client of the node at `addr`, connected from `source`; `None` if the node
/// closed the connection before the handshake ended.
async fn socket_from(source: &str, addr: SocketAddr) -> Option<WebSocket<TcpStream>> {
    let tcp = connect_from(source, addr).await;
    let (url, config) = (format!("ws://{addr}/"), sockeye::Config::default());
    let handshake = sockeye::client_handshake(tcp, url.as_str(), &config);
    let (ws, _) = tokio::time::timeout(Duration::from_secs(10), handshake)
        .await
        .unwrap()
        .ok()?;
    Some(ws)
}

/// Sends `frame` and returns the answer's JSON.
async fn ask(ws: &mut WebSocket<TcpStream>, frame: &str) -> serde_json::Value {
    ws.send(Message::text(frame.to_owned())).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), ws.recv())
        .await
        .expect("an answer in 10 s")
        .expect("the socket open")
        .unwrap();
    match answer {
        Message::Text(text) => serde_json::from_str(text.as_str()).unwrap(),
        other => panic!("not a text frame: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_flood_from_one_address_does_not_lock_another_out() {
    // A node of 30 topics, 5 per socket, 4 sockets per address: one address holds 20 at most.
    let hub = Hub::with_backplane(HubConfig::default().max_topics(30), |events| {
        InProcess::new(events, Default::default())
    });
    let session = SessionConfig::default()
        .on_gap(OnGap::Deliver)
        .subscriber(SubscriberConfig::default().max_subscriptions(5));
    let config = WebConfig::default()
        .session(session)
        .max_connections_per_address(4);
    let (_web, addr) = serve(hub, config).await;
    let mut flood = Vec::new();
    let mut refused = 0;
    for socket in 0..10 {
        let Some(mut ws) = socket_from("127.0.0.1", addr).await else {
            refused += 1;
            continue;
        };
        for topic in 0..5 {
            let frame = format!(r#"{{"type":"subscribe","topic":"flood/{socket}/{topic}","id":{topic}}}"#);
            ask(&mut ws, &frame).await;
        }
        flood.push(ws);
    }
    assert_eq!((flood.len(), refused), (4, 6));
    let mut other = socket_from("127.0.0.2", addr)
        .await
        .expect("another address connects");
    let answer = ask(&mut other, r#"{"type":"subscribe","topic":"mine","id":1}"#).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_socket_publishing_too_fast_or_on_too_many_topics_is_refused_and_stays_up() {
    let config = WebConfig::default().max_publish_rate(10).max_publish_topics(3);
    let (_web, addr) = node(config).await;
    let mut ws = socket_from("127.0.0.1", addr).await.unwrap();
    let publish =
        |topic: &str, id: u32| format!(r#"{{"type":"publish","topic":"{topic}","data":{id},"id":{id}}}"#);
    for (id, topic) in ["a", "b", "c"].into_iter().enumerate() {
        let answer = ask(&mut ws, &publish(topic, u32::try_from(id).unwrap())).await;
        assert_eq!(answer["type"], "published", "{answer}");
    }
    let answer = ask(&mut ws, &publish("d", 3)).await;
    assert_eq!(
        (&answer["code"], &answer["id"]),
        (&serde_json::json!("not_allowed"), &serde_json::json!(3)),
        "{answer}"
    );
    assert!(
        answer["message"]
            .as_str()
            .unwrap()
            .contains("--max-publish-topics"),
        "{answer}"
    );
    // 7 left in the bucket of 10, refilled at 10 a second: 20 at once cannot all pass.
    let started = Instant::now();
    let (mut published, mut refused) = (0, 0);
    for id in 10..30 {
        let answer = ask(&mut ws, &publish("a", id)).await;
        match answer["type"].as_str() {
            Some("published") => published += 1,
            _ => {
                assert_eq!(answer["code"], "rate_limited", "{answer}");
                assert!(
                    answer["message"].as_str().unwrap().contains("--max-publish-rate"),
                    "{answer}"
                );
                refused += 1;
            }
        }
    }
    let allowed = 7.0 + 10.0 * started.elapsed().as_secs_f64() + 1.0;
    assert!(
        refused > 0 && f64::from(published) <= allowed,
        "{published} published, {refused} refused"
    );
    // The socket is still up.
    let answer = ask(&mut ws, r#"{"type":"subscribe","topic":"a","id":99}"#).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
    assert!(metrics("127.0.0.1", addr).await.contains(&format!(
        "sockeye_pubsub_refused_publications_total {}\n",
        refused + 1
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_the_origin_is_compared_with_the_authority() {
    use sockeye::{Config, HttpVersion};
    let (_web, addr) = node(WebConfig::default()).await;
    let config = Config::builder().http_version(HttpVersion::Http2Only).build();
    let open = |origin: String| {
        let request = http::Request::builder()
            .uri(format!("ws://{addr}/"))
            .header("origin", origin)
            .body(())
            .unwrap();
        let config = config.clone();
        async move {
            let connect = sockeye::connect_with(request, &config);
            let (_, response) = tokio::time::timeout(Duration::from_secs(10), connect)
                .await
                .expect("an answer in 10 s")?;
            Ok::<_, sockeye::Error>(response)
        }
    };
    let response = open(format!("http://{addr}")).await.expect("the node's own page");
    assert_eq!(response.version(), http::Version::HTTP_2);
    // A browser's socket: opened, then closed with the reason (see the HTTP/1.1 test).
    let request = http::Request::builder()
        .uri(format!("ws://{addr}/"))
        .header("origin", "https://evil.example")
        .body(())
        .unwrap();
    let connect = sockeye::connect_with(request, &config);
    let (mut ws, response) = tokio::time::timeout(Duration::from_secs(10), connect)
        .await
        .expect("an answer in 10 s")
        .expect("upgraded, to be told why");
    assert_eq!(response.version(), http::Version::HTTP_2);
    let closed = tokio::time::timeout(Duration::from_secs(10), ws.recv())
        .await
        .expect("closed in 10 s");
    let Some(Ok(sockeye::Message::Close(Some(frame)))) = closed else {
        panic!("a close frame: {closed:?}")
    };
    assert_eq!(frame.code.0, 4004, "{frame:?}");
    assert!(frame.reason.starts_with("origin_not_allowed: "), "{frame:?}");
}

/// Review B2: the caps held one place per TCP connection, and a WebSocket over HTTP/2 is a
/// stream of one (hyper allowed 200 at once): one address could open 100 × 200 sockets against
/// a cap of 100. Each such socket now takes a place of its own, and over the cap is answered 503
/// before the upgrade, counted; another address still gets in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_one_address_cannot_open_sockets_past_its_cap() {
    use sockeye::{Config, HttpVersion};
    let (_web, addr) = node(WebConfig::default().max_connections_per_address(4)).await;
    // Every socket on the one pooled HTTP/2 connection from 127.0.0.1 (which holds a place
    // itself).
    let config = Config::builder().http_version(HttpVersion::Http2Only).build();
    let url = format!("ws://{addr}/");
    let mut open = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..10 {
        let connect = sockeye::connect_with(url.as_str(), &config);
        match tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .expect("an answer in 10 s")
        {
            Ok((ws, response)) => {
                assert_eq!(response.version(), http::Version::HTTP_2);
                open.push(ws);
            }
            Err(error) => refused.push(error.to_string()),
        }
    }
    assert_eq!(
        open.len(),
        3,
        "the connection and 3 sockets fill a cap of 4; refused: {refused:?}"
    );
    assert!(refused.iter().all(|e| e.contains("503")), "{refused:?}");
    // Another address still gets in, and the refusals were counted.
    let mut other = socket_from("127.0.0.2", addr)
        .await
        .expect("another address is not locked out");
    let answer = ask(&mut other, r#"{"type":"subscribe","topic":"t","id":1}"#).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
    let text = metrics("127.0.0.2", addr).await;
    let name = "sockeye_pubsub_capped_connections_total{cap=\"address\"} ";
    let count: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix(name)?.parse().ok())
        .unwrap_or(0);
    assert_eq!(count, 7, "{text}");
    // A socket that ends gives its place back.
    let mut closing = open.pop().unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(5), closing.close(None)).await;
    drop(closing);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let connect = sockeye::connect_with(url.as_str(), &config);
        if tokio::time::timeout(Duration::from_secs(10), connect)
            .await
            .unwrap()
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "the place was not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
