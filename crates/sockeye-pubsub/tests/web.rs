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
            tokio::spawn(sockeye_pubsub::web::serve_connection(
                hyper_util::rt::TokioIo::new(tcp),
                web.router(),
            ));
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
    tokio::spawn(async move {
        let _ = writer.write_all(&body).await;
        let _ = writer.shutdown().await;
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
    let rules = AccessRules::new().subscribe("*").unwrap().publish("*").unwrap();
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
