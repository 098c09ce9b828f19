//! The web face (`sockeye_pubsub::web`) over real sockets: the page and client, the WebSocket
//! at `/` with and without tokens, the HTTP API (publish, batch, history, its token, bad
//! bodies, a 10 MB body), metrics that move, and the graceful shutdown's 1001.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};
use sockeye::{CloseCode, Message, WebSocket};
use sockeye_pubsub::access::{Access, AccessRules};
use sockeye_pubsub::backplane::{Backplane, BoxFuture, Capabilities, EventSender, History, Publication};
use sockeye_pubsub::web::{AuthRefused, Web, WebConfig, auth};
use sockeye_pubsub::{Error, Hub, HubConfig, Position, Topic};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const API: &str = "api-secret";
const JWT: &[u8] = b"jwt-secret";

/// Serves `web` on a loopback port.
async fn start(web: Web) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(web.serve_connection(hyper_util::rt::TokioIo::new(tcp), web.router()));
        }
    });
    addr
}

async fn node(config: WebConfig) -> (Web, SocketAddr) {
    let web = Web::new(Hub::in_process(), config);
    let addr = start(web.clone()).await;
    (web, addr)
}

struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

/// One HTTP/1.1 request on a new connection; the answer read as far as its Content-Length.
async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    tcp.write_all(head.as_bytes()).await.unwrap();
    let (mut reader, mut writer) = tcp.into_split();
    let body = body.to_vec();
    // The server may answer (413) before reading it all, and close: not an error of the test.
    // The writing half stays open meanwhile: hyper ends a connection whose client half-closed
    // before the request was served (a race on a multi-thread runtime).
    tokio::spawn(async move {
        let _ = writer.write_all(&body).await;
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let read = async {
        loop {
            if let Some(end) = find(&buf, b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if buf.len() >= end + 4 + len {
                    let status = head[9..12].parse().unwrap();
                    let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                    return Answer { status, head, body };
                }
            }
            let n = reader.read(&mut chunk).await.unwrap();
            assert!(
                n > 0,
                "connection closed before the whole answer: {}",
                String::from_utf8_lossy(&buf)
            );
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("an answer in 10 s")
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn post(addr: SocketAddr, path: &str, body: &str) -> Answer {
    let bearer = format!("Bearer {API}");
    http(
        addr,
        "POST",
        path,
        &[("Authorization", &bearer), ("Content-Type", "application/json")],
        body.as_bytes(),
    )
    .await
}

async fn get(addr: SocketAddr, path: &str) -> Answer {
    let bearer = format!("Bearer {API}");
    http(addr, "GET", path, &[("Authorization", &bearer)], b"").await
}

/// A WebSocket upgrade request; only the answer's status matters.
async fn upgrade_status(addr: SocketAddr, path: &str) -> Answer {
    let headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Sec-WebSocket-Version", "13"),
    ];
    http(addr, "GET", path, &headers, b"").await
}

type Client = WebSocket<sockeye::TransportStream>;

async fn client(addr: SocketAddr, query: &str) -> Client {
    let (ws, _) = sockeye::connect(format!("ws://{addr}/{query}").as_str())
        .await
        .unwrap();
    ws
}

async fn next_json(ws: &mut Client) -> Value {
    let message = tokio::time::timeout(Duration::from_secs(10), ws.recv())
        .await
        .expect("a frame in 10 s")
        .expect("the connection open")
        .unwrap();
    match message {
        Message::Text(text) => serde_json::from_str(text.as_str()).unwrap(),
        other => panic!("not a text frame: {other:?}"),
    }
}

async fn request(ws: &mut Client, frame: Value) -> Value {
    ws.send(Message::text(frame.to_string())).await.unwrap();
    next_json(ws).await
}

#[tokio::test]
async fn the_page_the_client_and_a_plain_get_at_the_root() {
    let (_, addr) = node(WebConfig::default()).await;
    let root = http(addr, "GET", "/", &[], b"").await;
    assert_eq!(root.status, 426, "{}", root.body);
    assert!(root.body.contains("/demo"), "{}", root.body);
    assert!(
        root.head.to_ascii_lowercase().contains("upgrade: websocket"),
        "{}",
        root.head
    );

    let js = http(addr, "GET", "/client.js", &[], b"").await;
    assert_eq!(js.status, 200);
    assert!(
        js.head
            .to_ascii_lowercase()
            .contains("content-type: text/javascript"),
        "{}",
        js.head
    );
    assert!(js.body.contains("export"), "an ES module");
    // A page of another site may import it (a CORS fetch of public code), by default.
    assert!(
        js.head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: *"),
        "{}",
        js.head
    );
    let (_, one) = node(
        WebConfig::default()
            .client_js_cors(Some("https://app.example"))
            .unwrap(),
    )
    .await;
    let js = http(one, "GET", "/client.js", &[], b"").await;
    assert!(
        js.head
            .to_ascii_lowercase()
            .contains("access-control-allow-origin: https://app.example"),
        "{}",
        js.head
    );
    let (_, none) = node(WebConfig::default().client_js_cors(None).unwrap()).await;
    let js = http(none, "GET", "/client.js", &[], b"").await;
    assert!(
        !js.head.to_ascii_lowercase().contains("access-control"),
        "{}",
        js.head
    );
    assert!(WebConfig::default().client_js_cors(Some("app.example")).is_err());

    let demo = http(addr, "GET", "/demo", &[], b"").await;
    assert_eq!(demo.status, 200);
    assert!(demo.head.to_ascii_lowercase().contains("text/html"));
    assert!(
        demo.body.contains("./client.js"),
        "the page imports the client next to it"
    );

    let missing = http(addr, "GET", "/nowhere", &[], b"").await;
    assert_eq!((missing.status, missing.code().as_str()), (404, "not_found"));
}

#[tokio::test]
async fn a_backend_publishes_to_a_socket_and_reads_the_history() {
    let (_, addr) = node(WebConfig::default().api_token(API)).await;
    let mut ws = client(addr, "").await;
    let subscribed = request(&mut ws, json!({"type":"subscribe","topic":"user/a b","id":1})).await;
    assert_eq!(subscribed["type"], "subscribed");

    // The topic is the rest of the path, percent-decoded, `/` included.
    let first = post(addr, "/publish/user/a%20b", r#"{"text":"hello"}"#).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(first["topic"], "user/a b");
    let message = next_json(&mut ws).await;
    assert_eq!(message["type"], "message");
    assert_eq!(message["data"], json!({"text":"hello"}));
    assert_eq!(message["offset"], first["offset"]);
    assert_eq!(message["epoch"], first["epoch"]);

    let batch = post(
        addr,
        "/publish",
        r#"{"publications":[{"topic":"user/a b","data":2},{"topic":"other","data":"x"},{"topic":"user/a b","data":[3]}]}"#,
    )
    .await;
    assert_eq!(batch.status, 200, "{}", batch.body);
    let positions = batch.json()["positions"].as_array().unwrap().clone();
    assert_eq!(positions.len(), 3);
    assert_eq!(positions[1]["topic"], "other");
    assert_eq!(next_json(&mut ws).await["data"], json!(2));
    assert_eq!(next_json(&mut ws).await["data"], json!([3]));

    let since = format!("{}@{}", first["offset"], first["epoch"].as_str().unwrap());
    let history = get(
        addr,
        &format!("/history/user/a%20b?since={}", since.replace(':', "%3A")),
    )
    .await;
    assert_eq!(history.status, 200, "{}", history.body);
    let history = history.json();
    assert_eq!(history["complete"], true);
    let data: Vec<Value> = history["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["data"].clone())
        .collect();
    assert_eq!(data, vec![json!(2), json!([3])]);

    let all = get(addr, "/history/user/a%20b?limit=1").await.json();
    assert_eq!(all["messages"].as_array().unwrap().len(), 1, "limit is kept");
    assert_eq!(
        all["messages"][0]["data"],
        json!({"text":"hello"}),
        "oldest first"
    );

    let lost = get(addr, "/history/user/a%20b?since=1@another-epoch")
        .await
        .json();
    assert_eq!(lost["complete"], false, "another epoch cannot be resumed");
    assert_eq!(
        lost["messages"].as_array().unwrap().len(),
        3,
        "what the history still holds"
    );
}

#[tokio::test]
async fn the_api_is_off_without_a_token_and_refuses_wrong_ones() {
    let (_, off) = node(WebConfig::default()).await;
    let answer = post(off, "/publish/t", "1").await;
    assert_eq!((answer.status, answer.code().as_str()), (403, "not_allowed"));
    assert!(answer.body.contains("--api-token"), "{}", answer.body);

    let (_, on) = node(WebConfig::default().api_token(API)).await;
    let none = http(on, "POST", "/publish/t", &[], b"1").await;
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    let wrong = http(on, "GET", "/history/t", &[("Authorization", "Bearer nope")], b"").await;
    assert_eq!((wrong.status, wrong.code().as_str()), (401, "unauthorized"));
}

#[tokio::test]
async fn bad_bodies_get_clear_errors_and_the_node_stays_healthy() {
    let (_, addr) = node(WebConfig::default().api_token(API)).await;
    let cases = [
        ("/publish/t", "{not json", 400, "bad_json"),
        ("/publish/t", "", 400, "bad_json"),
        ("/publish/t", "1 2", 400, "bad_json"),
        (
            "/publish",
            r#"{"publications":[{"topic":"t"}]}"#,
            400,
            "bad_request",
        ),
        ("/publish", r#"{"publications":"no"}"#, 400, "bad_request"),
        (
            "/publish",
            r#"{"publications":[{"topic":"","data":1}]}"#,
            400,
            "invalid_topic",
        ),
        ("/publish/", "1", 400, "invalid_topic"),
        // Valid to RFC 8259's grammar, read differently by every parser (I-JSON forbids it).
        ("/publish/t", r#"{"text":"\udddd"}"#, 400, "bad_json"),
        ("/publish/t", "[1e400]", 400, "bad_json"),
        (
            "/publish",
            r#"{"publications":[{"topic":"t","data":1},{"topic":"t","data":"\ud83d"}]}"#,
            400,
            "bad_json",
        ),
    ];
    for (path, body, status, code) in cases {
        let answer = post(addr, path, body).await;
        assert_eq!(
            (answer.status, answer.code()),
            (status, code.to_owned()),
            "{path} {body}: {}",
            answer.body
        );
    }
    let history = get(addr, "/history/t?since=garbage").await;
    assert_eq!((history.status, history.code().as_str()), (400, "bad_request"));
    let history = get(addr, "/history/t?limit=-1").await;
    assert_eq!((history.status, history.code().as_str()), (400, "bad_request"));

    let big = format!("\"{}\"", "x".repeat(10 << 20));
    let answer = post(addr, "/publish/t", &big).await;
    assert_eq!((answer.status, answer.code().as_str()), (413, "too_large"));

    let fine = post(addr, "/publish/t", "true").await;
    assert_eq!(fine.status, 200, "the node still serves: {}", fine.body);
    // Nothing of a refused batch was published: the history holds the one good publication.
    let history = get(addr, "/history/t").await;
    assert_eq!(history.status, 200, "{}", history.body);
    assert_eq!(history.body.matches("\"offset\"").count(), 1, "{}", history.body);
    let paired = post(addr, "/publish/t", r#""\ud83d\ude00""#).await;
    assert_eq!(paired.status, 200, "a surrogate pair is fine: {}", paired.body);
}

/// A backplane whose batches fail after their first publication was published.
struct HalfDown;

impl Backplane for HalfDown {
    fn capabilities(&self) -> Capabilities {
        sockeye_pubsub::backplane::InProcess::new(
            tokio::sync::mpsc::channel(1).0,
            sockeye_pubsub::HistoryConfig::none(),
        )
        .capabilities()
    }
    fn publish(&self, _: Publication) -> BoxFuture<'_, Result<Option<Position>, Error>> {
        Box::pin(async { Ok(None) })
    }
    fn publish_many(&self, publications: Vec<Publication>) -> BoxFuture<'_, Result<Vec<Position>, Error>> {
        Box::pin(async move {
            match publications.len() {
                1 => Ok(Vec::new()),
                _ => Err(Error::PartlyPublished {
                    published: 1,
                    sent: 2,
                    source: Box::new(Error::Closed),
                }),
            }
        })
    }
    fn subscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    fn unsubscribe(&self, _: &Topic) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async { Ok(()) })
    }
    fn history(&self, _: &Topic, _: Option<&Position>, _: usize) -> BoxFuture<'_, Result<History, Error>> {
        Box::pin(async { Ok(History::Lost { latest: None }) })
    }
}

#[tokio::test]
async fn a_batch_partly_published_says_what_was() {
    let hub = Hub::with_backplane(HubConfig::default(), |_: EventSender| HalfDown);
    let addr = start(Web::new(hub, WebConfig::default().api_token(API))).await;
    let answer = post(
        addr,
        "/publish",
        r#"{"publications":[{"topic":"a","data":1},{"topic":"b","data":2},{"topic":"b","data":3},{"topic":"b","data":4}]}"#,
    )
    .await;
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (503, "unavailable"),
        "{}",
        answer.body
    );
    let body = answer.json();
    // "a" (a batch of one) went through; of "b"'s three, one was published, one may have been.
    assert_eq!(body["published"], 2, "{body}");
    assert_eq!(body["uncertain"], 1, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("retry from publication 3"),
        "{body}"
    );
}

fn jwt(claims: Value, secret: &[u8]) -> String {
    use jsonwebtoken::{EncodingKey, Header, encode};
    encode(&Header::default(), &claims, &EncodingKey::from_secret(secret)).unwrap()
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs()
}

#[tokio::test]
async fn jwt_clients_get_their_own_topics_and_bad_tokens_get_401() {
    let rules = AccessRules::new()
        .subscribe("user/{sub}")
        .unwrap()
        .subscribe("global")
        .unwrap();
    let (_, addr) = node(WebConfig::default().authorize(auth::jwt_hs256(JWT, rules))).await;

    let none = upgrade_status(addr, "/").await;
    assert_eq!((none.status, none.code().as_str()), (401, "unauthorized"));
    let forged = jwt(json!({"sub":"alice","exp":now() + 600}), b"another secret");
    let forged = upgrade_status(addr, &format!("/?token={forged}")).await;
    assert_eq!(forged.status, 401, "a wrong signature: {}", forged.body);
    let expired = jwt(json!({"sub":"alice","exp":now() - 60}), JWT);
    let expired = upgrade_status(addr, &format!("/?token={expired}")).await;
    assert_eq!(expired.status, 401, "expired: {}", expired.body);
    assert!(expired.body.contains("xpired"), "{}", expired.body);
    let no_exp = jwt(json!({"sub":"alice"}), JWT);
    assert_eq!(
        upgrade_status(addr, &format!("/?token={no_exp}")).await.status,
        401,
        "exp is required"
    );

    let alice = jwt(json!({"sub":"alice","exp":now() + 600}), JWT);
    let mut ws = client(addr, &format!("?token={alice}")).await;
    let own = request(&mut ws, json!({"type":"subscribe","topic":"user/alice"})).await;
    assert_eq!(own["type"], "subscribed");
    let bobs = request(&mut ws, json!({"type":"subscribe","topic":"user/bob","id":2})).await;
    assert_eq!(
        (bobs["type"].as_str(), bobs["code"].as_str()),
        (Some("error"), Some("not_allowed"))
    );
    let publish = request(
        &mut ws,
        json!({"type":"publish","topic":"global","data":1,"id":3}),
    )
    .await;
    assert_eq!(publish["code"], "not_allowed", "no publish rule, no publishing");
    let global = request(&mut ws, json!({"type":"subscribe","topic":"global"})).await;
    assert_eq!(global["type"], "subscribed", "the connection stayed up");
}

#[tokio::test]
async fn a_shared_token_and_a_callback_that_forbids() {
    let rules = AccessRules::new().subscribe("**").unwrap().publish("**").unwrap();
    let (_, addr) = node(WebConfig::default().authorize(auth::shared_token("letmein", rules))).await;
    assert_eq!(upgrade_status(addr, "/").await.status, 401);
    assert_eq!(upgrade_status(addr, "/?token=nope").await.status, 401);
    let mut ws = client(addr, "?token=letmein").await;
    assert_eq!(
        request(&mut ws, json!({"type":"subscribe","topic":"x"})).await["type"],
        "subscribed"
    );

    let forbid = |token: Option<&str>| match token {
        Some("banned") => Err(AuthRefused::Forbidden("banned users may not connect".into())),
        _ => Ok(Access::everything()),
    };
    let (_, addr) = node(WebConfig::default().authorize(forbid)).await;
    let banned = upgrade_status(addr, "/?token=banned").await;
    assert_eq!((banned.status, banned.code().as_str()), (403, "not_allowed"));
    assert!(banned.body.contains("banned users"));
}

/// What a browser's socket (it sends `Origin`) is told: upgraded, then closed at once with the
/// refusal's code and `"<name>: <why>"`; a page sees nothing of an HTTP 401 but 1006.
async fn browser_refusal(addr: SocketAddr, query: &str) -> (u16, String) {
    let request = http::Request::builder()
        .uri(format!("ws://{addr}/{query}"))
        .header("origin", format!("http://{addr}"))
        .body(())
        .unwrap();
    let (mut ws, _) = sockeye::connect(request).await.expect("upgraded, to be told why");
    let closed = tokio::time::timeout(Duration::from_secs(10), ws.recv())
        .await
        .expect("closed within 10 s");
    match closed {
        Some(Ok(sockeye::Message::Close(Some(frame)))) => (frame.code.0, frame.reason.to_string()),
        other => panic!("a close frame: {other:?}"),
    }
}

#[tokio::test]
async fn a_browser_is_told_why_its_socket_is_refused() {
    let rules = AccessRules::new().subscribe("**").unwrap();
    let (_, addr) = node(WebConfig::default().authorize(auth::shared_token("letmein", rules))).await;
    let (code, reason) = browser_refusal(addr, "").await;
    assert_eq!(code, 4001, "{reason}");
    assert!(
        reason.starts_with("unauthorized: this node needs a token"),
        "{reason}"
    );
    let (code, reason) = browser_refusal(addr, "?token=nope").await;
    assert_eq!(
        (code, reason.starts_with("unauthorized: ")),
        (4001, true),
        "{reason}"
    );

    let forbid = |token: Option<&str>| match token {
        Some("banned") => Err(AuthRefused::Forbidden("banned users may not connect".into())),
        _ => Ok(Access::everything()),
    };
    let (_, addr) = node(WebConfig::default().authorize(forbid)).await;
    let (code, reason) = browser_refusal(addr, "?token=banned").await;
    assert_eq!(
        (code, reason.as_str()),
        (4003, "not_allowed: banned users may not connect")
    );
    // The same node keeps a good browser's socket open.
    let page = http::Request::builder()
        .uri(format!("ws://{addr}/?token=fine"))
        .header("origin", format!("http://{addr}"))
        .body(())
        .unwrap();
    let (mut ws, _) = sockeye::connect(page).await.unwrap();
    assert_eq!(
        request(&mut ws, json!({"type":"subscribe","topic":"x"})).await["type"],
        "subscribed"
    );
}

/// `name value` lines of the OpenMetrics text, for the samples named `name` (labels kept).
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let (key, value) = l.rsplit_once(' ')?;
            (key == name).then(|| value.parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
}

#[tokio::test]
async fn metrics_move_with_what_happens() {
    let (_, addr) = node(WebConfig::default().api_token(API)).await;
    let scrape = || async move {
        let answer = http(addr, "GET", "/metrics", &[], b"").await;
        assert_eq!(answer.status, 200);
        assert!(answer.body.ends_with("# EOF\n"), "OpenMetrics text");
        answer.body
    };
    let before = scrape().await;
    assert_eq!(sample(&before, "sockeye_pubsub_connections"), 0.0);
    assert_eq!(sample(&before, "sockeye_pubsub_backplane_up"), 1.0);

    let mut a = client(addr, "").await;
    let mut b = client(addr, "").await;
    request(&mut a, json!({"type":"subscribe","topic":"t"})).await;
    request(&mut a, json!({"type":"subscribe","topic":"t"})).await;
    request(&mut b, json!({"type":"subscribe","topic":"t"})).await;
    request(&mut b, json!({"type":"subscribe","topic":"u"})).await;
    assert_eq!(
        request(&mut b, json!({"type":"publish","topic":"t","data":1,"id":1})).await["type"],
        "published"
    );
    next_json(&mut a).await;
    assert_eq!(post(addr, "/publish/t", "2").await.status, 200);
    next_json(&mut a).await;
    next_json(&mut b).await;

    let during = scrape().await;
    assert_eq!(sample(&during, "sockeye_pubsub_connections"), 2.0);
    assert_eq!(
        sample(&during, "sockeye_pubsub_subscriptions"),
        3.0,
        "a topic subscribed twice counts once"
    );
    assert_eq!(sample(&during, "sockeye_pubsub_topics"), 2.0);
    assert_eq!(
        sample(&during, r#"sockeye_pubsub_publications_total{source="socket"}"#),
        1.0
    );
    assert_eq!(
        sample(&during, r#"sockeye_pubsub_publications_total{source="http"}"#),
        1.0
    );
    assert_eq!(sample(&during, "sockeye_pubsub_deliveries_total"), 3.0);
    assert!(sample(&during, "sockeye_pubsub_backplane_publish_round_trip_seconds") > 0.0);

    b.close(None).await.unwrap();
    while b.recv().await.is_some() {}
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let after = scrape().await;
        if sample(&after, "sockeye_pubsub_connections") == 1.0 {
            assert_eq!(
                sample(&after, "sockeye_pubsub_subscriptions"),
                1.0,
                "b's two are given back"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "b's leaving is counted:\n{after}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shutdown_closes_every_socket_with_1001() {
    let (web, addr) = node(WebConfig::default()).await;
    let mut a = client(addr, "").await;
    request(&mut a, json!({"type":"subscribe","topic":"t"})).await;
    assert_eq!(web.connections(), 1);
    web.shutdown();
    let close = tokio::time::timeout(Duration::from_secs(10), a.recv())
        .await
        .unwrap();
    let Some(Ok(Message::Close(Some(frame)))) = close else {
        panic!("{close:?}")
    };
    assert_eq!(frame.code, CloseCode::GOING_AWAY);
    assert!(web.closed(Duration::from_secs(10)).await, "the session ended");
}

/// A socket counts from the moment its upgrade is answered, before its task first runs, so a
/// shutdown that comes in between still sends it 1001 and `closed` waits for it. (A
/// `pubsub_server` on a loaded machine lost that race: it counted sockets from their first
/// run, found none, exited at once, and the client saw its connection drop without a close.)
/// A layer around the router notes the count as the `101` leaves the handler, when no socket
/// task can have run yet (the switch comes after the answer is written).
#[tokio::test]
async fn a_socket_counts_from_its_answer_and_a_shutdown_then_closes_it_with_1001() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};
    let web = Web::new(Hub::in_process(), WebConfig::default());
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    let counted_at_answer = Arc::new(Mutex::new(None));
    let noted = (web.clone(), Arc::clone(&counted_at_answer));
    let router = web.router().layer(axum::middleware::map_response(
        move |response: axum::response::Response| {
            let (web, counted) = noted.clone();
            async move {
                if response.status() == http::StatusCode::SWITCHING_PROTOCOLS {
                    *counted.lock().unwrap() = Some(web.connections());
                }
                response
            }
        },
    ));
    tokio::spawn(web.serve_connection(hyper_util::rt::TokioIo::new(server_io), router));
    let config = sockeye::Config::default();
    let (mut ws, response) = sockeye::client_handshake(client_io, "ws://node/", &config)
        .await
        .unwrap();
    assert_eq!(response.status(), http::StatusCode::SWITCHING_PROTOCOLS);
    assert_eq!(
        *counted_at_answer.lock().unwrap(),
        Some(1),
        "the socket is counted as its answer leaves the handler"
    );
    web.shutdown();
    let heard_1001 = Arc::new(AtomicBool::new(false));
    let heard = Arc::clone(&heard_1001);
    let client = tokio::spawn(async move {
        while let Some(message) = ws.recv().await {
            if let Ok(Message::Close(Some(frame))) = message {
                heard.store(frame.code == CloseCode::GOING_AWAY, Ordering::SeqCst);
            }
        }
    });
    assert!(web.closed(Duration::from_secs(10)).await, "the socket ended");
    assert!(
        heard_1001.load(Ordering::SeqCst),
        "the socket was closed with 1001 before `closed` returned"
    );
    assert_eq!(web.connections(), 0);
    tokio::time::timeout(Duration::from_secs(10), client)
        .await
        .unwrap()
        .unwrap();
}

/// A request in progress when the shutdown begins is answered, and `closed` waits for its
/// connection: a backend's publish is never cut off without an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_in_progress_at_shutdown_is_answered_before_closed_returns() {
    let web = Web::new(Hub::in_process(), WebConfig::default().api_token(API));
    // A layer says when the request has reached the router (its head read, its body not).
    let reached = std::sync::Arc::new(tokio::sync::Notify::new());
    let signal = std::sync::Arc::clone(&reached);
    let router = web.router().layer(axum::middleware::map_request(
        move |request: axum::extract::Request| {
            signal.notify_one();
            async move { request }
        },
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn({
        let web = web.clone();
        async move {
            while let Ok((tcp, _)) = listener.accept().await {
                tokio::spawn(web.serve_connection(hyper_util::rt::TokioIo::new(tcp), router.clone()));
            }
        }
    });
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    let body = br#"{"n":1}"#;
    // The head and half the body: the request is in progress.
    let head = format!(
        "POST /publish/t HTTP/1.1\r\nHost: node\r\nAuthorization: Bearer {API}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&body[..3]).await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), reached.notified())
        .await
        .expect("the request reaches the router");
    web.shutdown();
    let closed = tokio::spawn({
        let web = web.clone();
        async move { web.closed(Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!closed.is_finished(), "closed waits for the request in progress");
    tcp.write_all(&body[3..]).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Closed after its answer (no keep-alive during a shutdown).
    assert!(closed.await.unwrap(), "every connection ended");
}

/// Scrapes `/metrics` until `name` reaches `want` (the session counts as it goes), 20 s at most.
async fn await_sample(addr: SocketAddr, name: &str, want: f64) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let text = http(addr, "GET", "/metrics", &[], b"").await.body;
        let value = sample(&text, name);
        if value == want {
            return text;
        }
        assert!(
            value < want && tokio::time::Instant::now() < deadline,
            "{name} is {value}, expected {want}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client that completes the handshake and then reads nothing: what the node sends it piles
/// up in both sockets' buffers, then in its subscriber's queue.
async fn stalled_client(addr: SocketAddr, topic: &str) -> Client {
    let mut ws = client(addr, "").await;
    let answer = request(&mut ws, json!({"type":"subscribe","topic":topic})).await;
    assert_eq!(answer["type"], "subscribed", "{answer}");
    ws
}

/// Publishes `count` messages of 64 KiB on `topic` through the API, 8 per request (a body is at
/// most the node's largest publication, 1 MiB by default): 4 MiB per
/// 64, enough beyond loopback's socket buffers (a few MiB each way) to fill a 64 KiB queue.
async fn flood(addr: SocketAddr, topic: &str, count: usize) {
    let text = "x".repeat(64 << 10);
    for first in (0..count).step_by(8) {
        let batch: Vec<Value> = (first..(first + 8).min(count))
            .map(|i| json!({"topic": topic, "data": {"i": i, "pad": text}}))
            .collect();
        let answer = http(
            addr,
            "POST",
            "/publish",
            &[("Authorization", &format!("Bearer {API}"))],
            json!({ "publications": batch }).to_string().as_bytes(),
        )
        .await;
        assert_eq!(answer.status, 200, "{}", answer.body);
    }
}

/// The counters of what went wrong for clients move when it happens, by as much as the clients
/// saw: a gap notice per `gap` frame, the drops a `SlowPolicy::Drop` queue made (the same count
/// its `dropped` frames carry), and a 1008 per client closed for reading too slowly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gaps_drops_and_slow_closes_are_counted() {
    use sockeye_pubsub::{OnGap, SessionConfig, SlowPolicy, SubscriberConfig};
    let queue = |slow| {
        WebConfig::default().api_token(API).session(
            SessionConfig::default()
                .on_gap(OnGap::Deliver)
                .subscriber(SubscriberConfig::new(64 << 10, slow))
                .slow_drain(Duration::from_millis(200))
                .close_grace(Duration::from_secs(20)),
        )
    };

    // A gap: a resume from a position no history holds (an epoch this node never gave).
    let (_web, addr) = node(queue(SlowPolicy::Drop)).await;
    let before = http(addr, "GET", "/metrics", &[], b"").await.body;
    assert_eq!(sample(&before, "sockeye_pubsub_gaps_total"), 0.0);
    assert_eq!(sample(&before, "sockeye_pubsub_dropped_total"), 0.0);
    let mut resumed = client(addr, "").await;
    let answer = request(
        &mut resumed,
        json!({"type":"subscribe","topic":"g","since":{"offset":7,"epoch":"gone"}}),
    )
    .await;
    assert_eq!(
        (answer["type"].as_str(), answer["recovery"].as_str()),
        (Some("subscribed"), Some("lost")),
        "{answer}"
    );
    let gap = next_json(&mut resumed).await;
    assert_eq!(
        (gap["type"].as_str(), gap["topic"].as_str()),
        (Some("gap"), Some("g")),
        "{gap}"
    );
    await_sample(addr, "sockeye_pubsub_gaps_total", 1.0).await;

    // Drops: the stalled client then reads everything; what it missed is what was counted.
    let mut stalled = stalled_client(addr, "d").await;
    let published = 256;
    flood(addr, "d", published).await;
    // The client reads what the node held for it until nothing more comes; then its queue is
    // empty, and one more publication, which cannot be dropped, carries the drops not yet told
    // (they are told with the next delivery that fits).
    // (received, told dropped, "end" seen, gaps told on the topic: drops name their topic)
    let mut seen = (0u64, 0u64, false, 0u64);
    let count = |seen: &mut (u64, u64, bool, u64), frame: Value| match frame["type"].as_str() {
        Some("message") if frame["data"] == "end" => seen.2 = true,
        Some("message") => seen.0 += 1,
        Some("dropped") => seen.1 += frame["count"].as_u64().unwrap(),
        Some("gap") if frame["topic"] == "d" => seen.3 += 1,
        _ => panic!("unexpected {frame}"),
    };
    while let Ok(Some(Ok(Message::Text(text)))) =
        tokio::time::timeout(Duration::from_millis(500), stalled.recv()).await
    {
        count(&mut seen, serde_json::from_str(text.as_str()).unwrap());
    }
    assert_eq!(post(addr, "/publish/d", r#""end""#).await.status, 200);
    while !seen.2 {
        count(&mut seen, next_json(&mut stalled).await);
    }
    let (received, dropped_frames, _, gaps) = seen;
    assert!(gaps > 0, "the drops were told as a gap on their topic");
    assert_eq!(
        received + dropped_frames,
        published as u64,
        "every publication received or counted as dropped"
    );
    assert!(
        dropped_frames > 0,
        "a 64 KiB queue kept all of {published} × 64 KiB"
    );
    let text = await_sample(addr, "sockeye_pubsub_dropped_total", dropped_frames as f64).await;
    assert_eq!(
        sample(&text, "sockeye_pubsub_slow_closes_total"),
        0.0,
        "Drop closes no one"
    );

    // A slow close: the same with the default policy, and the client is closed with 1008 once
    // it reads again (its close may wait 20 s for the client to take the frames before it).
    let (_web, addr) = node(queue(SlowPolicy::Close)).await;
    let mut stalled = stalled_client(addr, "s").await;
    flood(addr, "s", published).await;
    let close = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match stalled.recv().await {
                Some(Ok(Message::Close(frame))) => return frame,
                Some(Ok(_)) => {}
                other => panic!("the connection ended without a close frame: {other:?}"),
            }
        }
    })
    .await
    .expect("the close in 20 s");
    assert_eq!(close.map(|f| f.code), Some(CloseCode::POLICY_VIOLATION));
    await_sample(addr, "sockeye_pubsub_slow_closes_total", 1.0).await;
    await_sample(addr, "sockeye_pubsub_connections", 0.0).await;
}

/// One HTTP/2 request on `client` (h2c): the status and the body.
async fn h2_request(
    client: &mut h2::client::SendRequest<bytes::Bytes>,
    method: &str,
    path: &str,
    body: &str,
) -> (u16, Value) {
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://localhost{path}"))
        .header("authorization", format!("Bearer {API}"))
        .body(())
        .unwrap();
    let (response, mut send) = client.send_request(request, body.is_empty()).unwrap();
    if !body.is_empty() {
        send.send_data(bytes::Bytes::from(body.to_owned()), true).unwrap();
    }
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("an answer in 10 s")
        .unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut bytes = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        bytes.extend_from_slice(&chunk);
    }
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// The router over HTTP/2 (h2c with prior knowledge, as `serve_connection` offers it beside
/// HTTP/1.1 on one port): WebSockets as RFC 8441 streams, two of them sharing one connection,
/// and the backends' API on another HTTP/2 connection, each seeing the other's publications.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_reach_the_socket_and_the_api() {
    use sockeye::{Config, HttpVersion};
    let (_web, addr) = node(WebConfig::default().api_token(API)).await;
    let config = Config::builder().http_version(HttpVersion::Http2Only).build();
    let mut sockets = Vec::new();
    for _ in 0..2 {
        let (mut ws, response) = sockeye::connect_with(format!("ws://{addr}/").as_str(), &config)
            .await
            .unwrap();
        assert_eq!(response.version(), http::Version::HTTP_2);
        let answer = request(&mut ws, json!({"type":"subscribe","topic":"h2"})).await;
        assert_eq!(answer["type"], "subscribed", "{answer}");
        sockets.push(ws);
    }
    assert_eq!(_web.connections(), 2);

    let tcp = TcpStream::connect(addr).await.unwrap();
    let (api, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut api = api.ready().await.unwrap();
    let (status, body) = h2_request(&mut api, "POST", "/publish/h2", r#"{"from":"api"}"#).await;
    assert_eq!(status, 200, "{body}");
    let position = body.clone();
    for ws in &mut sockets {
        let message = next_json(ws).await;
        assert_eq!(message["data"], json!({"from":"api"}), "{message}");
        assert_eq!(
            (&message["offset"], &message["epoch"]),
            (&position["offset"], &position["epoch"]),
            "{message} at {position}"
        );
    }

    // A socket's publication reaches the other socket (not itself) and the API's history.
    let answer = request(
        &mut sockets[0],
        json!({"type":"publish","topic":"h2","data":"from a socket","id":7}),
    )
    .await;
    assert_eq!(
        (answer["type"].as_str(), answer["id"].as_u64()),
        (Some("published"), Some(7)),
        "{answer}"
    );
    let message = next_json(&mut sockets[1]).await;
    assert_eq!(message["data"], "from a socket", "{message}");
    let (status, history) = h2_request(&mut api, "GET", "/history/h2", "").await;
    assert_eq!(status, 200, "{history}");
    let data: Vec<&Value> = history["messages"]
        .as_array()
        .unwrap_or_else(|| panic!("{history}"))
        .iter()
        .map(|m| &m["data"])
        .collect();
    assert_eq!(
        data,
        [&json!({"from":"api"}), &json!("from a socket")],
        "{history}"
    );

    // A refusal over HTTP/2 is the same JSON error as over HTTP/1.1.
    let (status, body) = h2_request(&mut api, "POST", "/publish/h2", "{not json").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("bad_json")),
        "{body}"
    );
}
