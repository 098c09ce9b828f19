//! The web face as its operator sees it, over real loopback sockets: every HTTP error a JSON
//! error object (axum's own 405 and the WebSocket upgrade's refusals included), `/healthz` and
//! `/readyz` following the backplane, the backplane's loss logged once at warn and its return
//! at info, close reasons and refusals counted in `/metrics`, and one log line per session.
#![cfg(feature = "web")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sockeye_pubsub::backplane::{Event, EventSender, InProcess};
use sockeye_pubsub::web::{Web, WebConfig};
use sockeye_pubsub::{HistoryConfig, Hub, HubConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Serves `web` on a loopback port; each connection admitted from its address.
async fn start(web: Web) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, peer)) = listener.accept().await {
            let Ok(admitted) = web.admit(peer.ip()) else {
                continue;
            };
            let io = hyper_util::rt::TokioIo::new(tcp);
            tokio::spawn(web.serve_admitted(io, web.router(), admitted));
        }
    });
    addr
}

/// A request on a new connection (`Connection: close`): the status and the body.
async fn http(addr: SocketAddr, head: &str, body: &[u8]) -> (u16, String, String) {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let request = format!(
        "{head}Host: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    tcp.write_all(body).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .expect("an answer in 10 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    let status = head.split(' ').nth(1).unwrap_or("0").parse().unwrap();
    (status, head.to_ascii_lowercase(), body.to_owned())
}

/// The error object of a JSON error answer.
fn error_of(body: &str) -> Value {
    let json: Value = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: not JSON: {body:?}"));
    assert!(
        json["error"]["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{body}"
    );
    json["error"].clone()
}

#[tokio::test]
async fn every_http_error_has_a_json_body() {
    let web = Web::new(Hub::in_process(), WebConfig::default().api_token("k"));
    let addr = start(web).await;
    for (head, body, status, code) in [
        // axum's method routing: the docs promise JSON, it answered an empty body.
        ("GET /publish/x HTTP/1.1\r\n", &b""[..], 405, "method_not_allowed"),
        ("DELETE /history/x HTTP/1.1\r\n", b"", 405, "method_not_allowed"),
        ("POST /healthz HTTP/1.1\r\n", b"", 405, "method_not_allowed"),
        ("POST /metrics HTTP/1.1\r\n", b"", 405, "method_not_allowed"),
        ("GET /nowhere HTTP/1.1\r\n", b"", 404, "not_found"),
        // A WebSocket handshake without its key: the upgrade's own refusal.
        (
            "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n",
            b"",
            400,
            "bad_handshake",
        ),
        (
            "POST /publish/x HTTP/1.1\r\nAuthorization: Bearer k\r\n",
            b"{not json",
            400,
            "bad_json",
        ),
        (
            "POST /publish HTTP/1.1\r\nAuthorization: Bearer k\r\n",
            b"[1]",
            400,
            "bad_request",
        ),
    ] {
        let (got, head_seen, answer) = http(addr, head, body).await;
        assert_eq!(got, status, "{head}: {answer}");
        assert!(
            head_seen.contains("content-type: application/json"),
            "{head}: {head_seen}"
        );
        assert_eq!(error_of(&answer)["code"], code, "{head}: {answer}");
    }
    // A 405 keeps its Allow header.
    let (_, head_seen, _) = http(addr, "GET /publish/x HTTP/1.1\r\n", b"").await;
    assert!(head_seen.contains("allow: post"), "{head_seen}");
    // Past the largest publication: 413, JSON, naming the setting and the flag.
    let big = vec![b'1'; (1 << 20) + 1];
    let (got, _, answer) = http(
        addr,
        "POST /publish/x HTTP/1.1\r\nAuthorization: Bearer k\r\n",
        &big,
    )
    .await;
    assert_eq!(got, 413);
    let error = error_of(&answer);
    assert_eq!(error["code"], "too_large");
    assert!(
        error["message"].as_str().unwrap().contains("--max-message-size"),
        "{answer}"
    );
}

/// A hub on the in-process backplane, and a sender to tell it the backplane was lost or restored.
fn hub_with_events() -> (Hub, EventSender) {
    let (tx, rx) = std::sync::mpsc::channel();
    let hub = Hub::with_backplane(HubConfig::default(), move |events: EventSender| {
        tx.send(events.clone()).unwrap();
        InProcess::new(events, HistoryConfig::default())
    });
    (hub, rx.recv().unwrap())
}

/// What a `tracing` subscriber wrote, for this thread.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// Waits (10 s at most) until `pattern` was logged `times` times.
    async fn wait_for(&self, pattern: &str, times: usize) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let text = self.text();
            if text.matches(pattern).count() >= times || tokio::time::Instant::now() > deadline {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

fn capture() -> (Logged, tracing::subscriber::DefaultGuard) {
    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .finish();
    (logged, tracing::subscriber::set_default(subscriber))
}

// One thread: the hub's task and the sessions run where the subscriber is set.
#[tokio::test(flavor = "current_thread")]
async fn readyz_follows_the_backplane_and_its_loss_is_logged_once_and_its_return() {
    let (logged, _guard) = capture();
    let (hub, events) = hub_with_events();
    let addr = start(Web::new(hub, WebConfig::default())).await;
    let ready = || async move { http(addr, "GET /readyz HTTP/1.1\r\n", b"").await };
    assert_eq!(http(addr, "GET /healthz HTTP/1.1\r\n", b"").await.0, 200);
    assert_eq!(ready().await.0, 200, "the in-process backplane is up");

    for _ in 0..3 {
        let reason = "connection refused".to_owned();
        events.send(Event::Lost { reason }).await.unwrap();
    }
    let (status, _, body) = ready().await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(error_of(&body)["code"], "unavailable");
    assert_eq!(
        http(addr, "GET /healthz HTTP/1.1\r\n", b"").await.0,
        200,
        "alive all the same"
    );
    let log = logged.wait_for("backplane lost", 1).await;
    events.send(Event::Restored).await.unwrap();
    let log_after = logged.wait_for("backplane restored", 1).await;
    assert_eq!(ready().await.0, 200);
    assert!(log.contains("WARN"), "{log}");
    assert_eq!(
        log_after.matches("backplane lost").count(),
        1,
        "once per outage: {log_after}"
    );
    let restored = log_after
        .lines()
        .find(|l| l.contains("backplane restored"))
        .unwrap();
    assert!(restored.contains("INFO"), "{restored}");
    // Neither the probes nor the scrapes log a line of their own.
    assert_eq!(log_after.lines().count(), 2, "{log_after}");
}

fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == name).then(|| value.parse().unwrap())
        })
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "current_thread")]
async fn closes_and_refusals_are_counted_and_each_session_logs_one_line() {
    let (logged, _guard) = capture();
    let config = WebConfig::default().max_connections_per_address(2).session(
        sockeye_pubsub::SessionConfig::default()
            .subscriber(sockeye_pubsub::SubscriberConfig::default().max_subscriptions(1)),
    );
    let web = Web::new(Hub::in_process(), config);
    let addr = start(web.clone()).await;
    // A page of another site: refused for its origin (upgraded, then closed with 4004).
    let foreign = "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nOrigin: https://evil.example\r\n";
    assert_eq!(http(addr, foreign, b"").await.0, 101);
    // A client that subscribes twice (one over the bound) and closes.
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/").as_str()).await.unwrap();
    for topic in ["a", "b"] {
        let frame = format!(r#"{{"type":"subscribe","topic":"{topic}"}}"#);
        ws.send(sockeye::Message::text(frame)).await.unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(10), ws.recv())
            .await
            .unwrap();
        let answer = format!("{answer:?}");
        if topic == "b" {
            assert!(answer.contains("max_subscriptions"), "{answer}");
        }
    }
    ws.close(None).await.unwrap();
    while ws.recv().await.is_some() {}
    let log = logged.wait_for("WebSocket session ended", 1).await;
    // Then one the node closes with 1001 as it shuts down.
    let (mut ws, _) = sockeye::connect(format!("ws://{addr}/").as_str()).await.unwrap();
    let (_, _, before) = http(addr, "GET /metrics HTTP/1.1\r\n", b"").await;
    web.shutdown();
    while ws.recv().await.is_some() {}
    let log_after = logged.wait_for("WebSocket session ended", 2).await;

    let refusals = |kind: &str| {
        sample(
            &before,
            &format!(r#"sockeye_pubsub_refusals_total{{kind="{kind}"}}"#),
        )
    };
    assert_eq!(refusals("origin"), 1.0, "{before}");
    assert_eq!(refusals("subscriptions"), 1.0, "{before}");
    assert_eq!(
        sample(
            &before,
            r#"sockeye_pubsub_closes_total{reason="client",code="none"}"#
        ),
        1.0,
        "{before}"
    );
    // The shutdown's close is counted as it happens: read from the session's log line.
    let line = log
        .lines()
        .find(|l| l.contains("WebSocket session ended"))
        .unwrap();
    for field in [
        "peer=127.0.0.1",
        "reason=\"client\"",
        "close_code=none",
        "received=2",
        "duration_ms=",
    ] {
        assert!(line.contains(field), "{field}: {line}");
    }
    let last = log_after
        .lines()
        .filter(|l| l.contains("WebSocket session ended"))
        .nth(1)
        .unwrap();
    assert!(
        last.contains("close_code=1001") && last.contains("shutdown"),
        "{last}"
    );
    assert_eq!(
        log_after.lines().count(),
        2,
        "one line per session, none per request: {log_after}"
    );
}
