//! The web face under the checker (`chaos_web_*`, `scripts/chaos.sh web-ENGINE`): each node
//! also serves `sockeye_pubsub::web::Web`, configured as `ws pubsub_server` configures it
//! ([`config`]), on a port of its own that it keeps across crashes, so that clients fail over
//! back to it. A crash shuts every TCP connection of the face down (no close frame, as a
//! `kill -9` would) and drops the server with the hub; the restart serves the same port again.
//!
//! Besides the runner's Rust subscribers and `Hub::publish` publishers:
//! - subscribers speaking the JSON protocol, in Node (`web_clients.mjs`): the project's own
//!   JavaScript client (`clients/js`, failing over with its own reconnect logic and positions)
//!   and a client that is not ours (the `ws` package's raw WebSocket, the protocol spoken by
//!   hand: it keeps its last position per topic and resumes with `since`);
//! - a publisher on the HTTP API (`POST /publish/<topic>` with the API token) and one on the
//!   socket (`publish` frames, answered `published` with the position).
//!
//! All record into the run's `Recorder` with the same records as the Rust clients.
#![allow(dead_code)]

use std::collections::HashMap;
use std::os::fd::AsFd;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use serde_json::{Value, json};
use sockeye::Message;
use sockeye_pubsub::web::{Web, WebConfig};
use sockeye_pubsub::{Hub, OnGap, Position, SessionConfig};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::{Instant, sleep, timeout};

use super::history::{Began, Record};

/// What the web clients share with the run: where they record, every node's port (a node keeps
/// its port across crashes), the topics, and when to stop or drop a connection.
pub(crate) struct Clients {
    pub(crate) record: Box<dyn Fn(Record) + Send + Sync>,
    pub(crate) ports: Vec<u16>,
    pub(crate) topics: Vec<String>,
    pub(crate) stop: watch::Receiver<bool>,
    /// Per subscriber (the runner's numbering), bumped when the nemesis drops its connection.
    pub(crate) reconnects: Vec<watch::Receiver<u64>>,
}

/// The HTTP API's token.
pub(crate) const API_TOKEN: &str = "chaos-api-token";
/// One publish, at most.
const CALL_BOUND: Duration = Duration::from_secs(3);

/// The web face's settings, as `ws pubsub_server` makes them from its defaults (`web_config` in
/// `sockeye-cli/src/pubsub.rs`): gaps delivered as `gap` frames on a socket that stays up.
pub(crate) fn config() -> WebConfig {
    let session = SessionConfig::default()
        .on_gap(OnGap::Deliver)
        .close_grace(Duration::from_millis(250));
    WebConfig::default()
        .session(session)
        .socket(sockeye_pubsub::web::socket_config())
        .api_token(API_TOKEN)
}

/// The TCP connections a face serves, each by a duplicate of its descriptor, to shut down at a
/// crash (the server's own handle stays where hyper keeps it, a WebSocket's for its life).
type Conns = Arc<Mutex<HashMap<u64, std::net::TcpStream>>>;

/// A node's web face: its port, and the server while the node is up.
pub(crate) struct Face {
    port: u16,
    /// The listener bound when the port was chosen, for the first start.
    first: Mutex<Option<TcpListener>>,
    serving: Mutex<Option<(JoinHandle<()>, Conns)>>,
}

impl Face {
    /// A face on a free loopback port, not serving yet.
    pub(crate) async fn new() -> Face {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Face {
            port: listener.local_addr().unwrap().port(),
            first: Mutex::new(Some(listener)),
            serving: Mutex::new(None),
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Serves `hub`'s web face on the port (bound again after a crash: tried for 5 s).
    pub(crate) async fn serve(&self, hub: Hub) {
        let first = self.first.lock().unwrap().take();
        let listener = match first {
            Some(l) => l,
            None => {
                let until = Instant::now() + Duration::from_secs(5);
                loop {
                    match TcpListener::bind(("127.0.0.1", self.port)).await {
                        Ok(l) => break l,
                        Err(e) if Instant::now() > until => panic!("port {} again: {e}", self.port),
                        Err(_) => sleep(Duration::from_millis(50)).await,
                    }
                }
            }
        };
        let conns = Conns::default();
        let task = tokio::spawn(accept(listener, Web::new(hub, config()), Arc::clone(&conns)));
        if let Some((old, _)) = self.serving.lock().unwrap().replace((task, conns)) {
            old.abort();
        }
    }

    /// A crash: every connection shut down, the server (and the hub it holds) dropped.
    pub(crate) fn crash(&self) {
        if let Some((task, conns)) = self.serving.lock().unwrap().take() {
            task.abort();
            for (_, tcp) in conns.lock().unwrap().drain() {
                let _ = tcp.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

impl Drop for Face {
    fn drop(&mut self) {
        self.crash();
    }
}

async fn accept(listener: TcpListener, web: Web, conns: Conns) {
    let router = web.router();
    let mut tasks = JoinSet::new();
    for id in 0u64.. {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let Ok(fd) = tcp.as_fd().try_clone_to_owned() else {
            continue;
        };
        conns.lock().unwrap().insert(id, std::net::TcpStream::from(fd));
        let io = Tracked {
            tcp,
            id,
            conns: Arc::clone(&conns),
        };
        tasks.spawn(web.serve_connection(hyper_util::rt::TokioIo::new(io), router.clone()));
        while tasks.try_join_next().is_some() {}
    }
}

/// A served connection, forgotten by its face when it is dropped.
struct Tracked {
    tcp: TcpStream,
    id: u64,
    conns: Conns,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.conns.lock().unwrap().remove(&self.id);
    }
}

impl AsyncRead for Tracked {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().tcp).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
}

/// A position from a frame's `offset` and `epoch` (`null`: none).
fn position(offset: &Value, epoch: &Value) -> Option<Position> {
    Some(Position {
        offset: offset.as_u64()?,
        epoch: epoch.as_str()?.into(),
    })
}

/// Whether publishing goes on: `publishing` true and the deadline not passed.
fn going(publishing: &watch::Receiver<bool>, deadline: Instant) -> bool {
    *publishing.borrow() && Instant::now() < deadline
}

/// A backend publishing `"p:k"` (a JSON string) on the HTTP API of its node (node `first` at
/// the start), each topic in turn, on one kept-alive connection; to the next node when the
/// connection fails.
pub(crate) async fn http_publisher(
    world: Arc<Clients>,
    (publisher, first): (usize, usize),
    pause: Duration,
    publishing: watch::Receiver<bool>,
    deadline: Instant,
) {
    let mut node = first % world.ports.len();
    let mut seq = 0u64;
    let mut conn: Option<BufReader<TcpStream>> = None;
    while going(&publishing, deadline) {
        let port = world.ports[node];
        if conn.is_none() {
            match timeout(CALL_BOUND, TcpStream::connect(("127.0.0.1", port))).await {
                Ok(Ok(tcp)) => conn = Some(BufReader::new(tcp)),
                _ => {
                    node = (node + 1) % world.ports.len();
                    sleep(pause).await;
                    continue;
                }
            }
        }
        let topic = &world.topics[usize::try_from(seq).unwrap() % world.topics.len()];
        let payload = format!("{publisher}:{seq}");
        (world.record)(Record::Invoke {
            publisher,
            seq,
            topic: topic.clone(),
            payload: payload.clone(),
        });
        let c = conn.as_mut().unwrap();
        let answer = timeout(CALL_BOUND, post(c, port, topic, &json!(payload))).await;
        let record = match answer {
            Ok(Ok((200, body))) => match serde_json::from_str::<Value>(&body) {
                Ok(v) => Record::Ack {
                    publisher,
                    seq,
                    position: position(&v["offset"], &v["epoch"]),
                },
                Err(_) => Record::Fail { publisher, seq },
            },
            Ok(Ok(_)) => Record::Fail { publisher, seq },
            _ => {
                conn = None;
                node = (node + 1) % world.ports.len();
                Record::Fail { publisher, seq }
            }
        };
        (world.record)(record);
        seq += 1;
        sleep(pause).await;
    }
}

/// `POST /publish/<topic>` on a kept-alive connection: the status and the body.
async fn post(
    conn: &mut BufReader<TcpStream>,
    port: u16,
    topic: &str,
    data: &Value,
) -> std::io::Result<(u16, String)> {
    let body = data.to_string();
    let request = format!(
        "POST /publish/{topic} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {API_TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    conn.get_mut().write_all(request.as_bytes()).await?;
    let mut status = String::new();
    if conn.read_line(&mut status).await? == 0 {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    let code: u16 = status.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if conn.read_line(&mut line).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap_or(0);
        }
    }
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await?;
    Ok((code, String::from_utf8_lossy(&body).into_owned()))
}

type Socket = sockeye::WebSocket<sockeye::TransportStream>;

/// A client publishing `"p:k"` (a JSON string) on the JSON protocol's socket, each topic in
/// turn, waiting for each answer (`published` with the position, or an `error`); to the next
/// node when the socket fails or an answer does not come.
pub(crate) async fn socket_publisher(
    world: Arc<Clients>,
    publisher: usize,
    pause: Duration,
    publishing: watch::Receiver<bool>,
    deadline: Instant,
) {
    let mut node = publisher % world.ports.len();
    let mut seq = 0u64;
    let mut socket: Option<Socket> = None;
    while going(&publishing, deadline) {
        let port = world.ports[node];
        if socket.is_none() {
            let url = format!("ws://127.0.0.1:{port}/");
            match timeout(CALL_BOUND, sockeye::connect(url.as_str())).await {
                Ok(Ok((ws, _))) => socket = Some(ws),
                _ => {
                    node = (node + 1) % world.ports.len();
                    sleep(pause).await;
                    continue;
                }
            }
        }
        let topic = &world.topics[usize::try_from(seq).unwrap() % world.topics.len()];
        let payload = format!("{publisher}:{seq}");
        (world.record)(Record::Invoke {
            publisher,
            seq,
            topic: topic.clone(),
            payload: payload.clone(),
        });
        let ws = socket.as_mut().unwrap();
        let frame = json!({"type": "publish", "topic": topic, "data": payload, "id": seq});
        let answer = timeout(CALL_BOUND, async {
            ws.send(Message::text(frame.to_string())).await.ok()?;
            loop {
                let Message::Text(text) = ws.recv().await?.ok()? else {
                    continue;
                };
                let v: Value = serde_json::from_str(text.as_str()).ok()?;
                if v["id"].as_u64() == Some(seq) {
                    return Some(v);
                }
            }
        })
        .await;
        let record = match answer {
            Ok(Some(v)) if v["type"] == "published" => Record::Ack {
                publisher,
                seq,
                position: position(&v["offset"], &v["epoch"]),
            },
            // Refused (the backplane down, say): the socket stays.
            Ok(Some(_)) => Record::Fail { publisher, seq },
            _ => {
                socket = None;
                node = (node + 1) % world.ports.len();
                Record::Fail { publisher, seq }
            }
        };
        (world.record)(record);
        seq += 1;
        sleep(pause).await;
    }
}

/// A subscriber in Node (`web_clients.mjs`): `kind` is `js` (the project's client) or `raw`
/// (the `ws` package, the protocol by hand). It is given every node's URL, the first being
/// node `first`'s, and every topic; its events are recorded as they come, and a reconnection
/// the nemesis forces is a `drop` line on its standard input.
pub(crate) async fn node_subscriber(
    world: Arc<Clients>,
    subscriber: usize,
    kind: &'static str,
    first: usize,
    deadline: Instant,
) {
    let n = world.ports.len();
    let urls: Vec<String> = (0..n)
        .map(|i| format!("ws://127.0.0.1:{}/", world.ports[(first + i) % n]))
        .collect();
    let topics = world.topics.clone();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/chaos/web_clients.mjs");
    let ws_package = concat!(env!("CARGO_MANIFEST_DIR"), "/../../interop/node/node_modules/ws");
    assert!(
        std::path::Path::new(ws_package).is_dir(),
        "the web variant's `raw` client needs Node's `ws` package: run `bash interop/install-node.sh` \
         (the test command does)"
    );
    let mut command = std::process::Command::new("node");
    if node_major() < 22 {
        // Node's own WebSocket (undici's) for the project's client; Node 22 has it by default.
        command.arg("--experimental-websocket");
    }
    let mut child = command
        .arg(script)
        .arg(kind)
        .arg(urls.join(","))
        .arg(topics.join(","))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("node (the web variant's subscribers run in Node)");
    let mut stdin = child.stdin.take().unwrap();
    // Its output read on threads of their own (tokio's `process` feature is not built here).
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stderr)).map_while(Result::ok) {
            eprintln!("[{kind} subscriber {subscriber}] {line}");
        }
    });
    let mut stop = world.stop.clone();
    let mut reconnect = world.reconnects[subscriber].clone();
    let verbose = std::env::var("CHAOS_LOG").is_ok_and(|v| !v.is_empty());
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                Some(line) => {
                    let v: Value = serde_json::from_str(&line)
                        .unwrap_or_else(|e| panic!("{kind} subscriber {subscriber}: {e}: {line}"));
                    match event(subscriber, &v) {
                        Some(record) => (world.record)(record),
                        None if verbose => eprintln!("[{kind} subscriber {subscriber}] {line}"),
                        None => {}
                    }
                }
                None => {
                    let status = child.try_wait();
                    panic!("{kind} subscriber {subscriber} ended before the run: {status:?}")
                }
            },
            _ = reconnect.changed() => {
                let _ = std::io::Write::write_all(&mut stdin, b"drop\n");
            }
            _ = stop.changed() => break,
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Node's major version.
fn node_major() -> u32 {
    static MAJOR: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MAJOR.get_or_init(|| {
        let out = std::process::Command::new("node")
            .arg("--version")
            .output()
            .expect("the web variant runs its clients in Node: install Node 20 or later");
        let text = String::from_utf8_lossy(&out.stdout);
        text.trim()
            .trim_start_matches('v')
            .split('.')
            .next()
            .and_then(|m| m.parse().ok())
            .unwrap_or(0)
    })
}

/// The record of one of `web_clients.mjs`'s event lines (`None`: a line for the log).
fn event(subscriber: usize, v: &Value) -> Option<Record> {
    let topic = v["t"].as_str().unwrap_or_default().to_owned();
    let at = |p: &Value| position(&p["offset"], &p["epoch"]);
    Some(match v["e"].as_str()? {
        "subscribe" => Record::Subscribe {
            subscriber,
            topic,
            from: at(&v["since"]),
        },
        "subscribed" => Record::Subscribed {
            subscriber,
            topic,
            began: match v["recovery"].as_str() {
                Some("live") => Began::Live,
                Some("recovered") => {
                    Began::Recovered(usize::try_from(v["recovered"].as_u64().unwrap_or(0)).unwrap())
                }
                Some("lost") => Began::Lost,
                other => Began::Failed(format!("recovery {other:?}")),
            },
        },
        "failed" => Record::Subscribed {
            subscriber,
            topic,
            began: Began::Failed(v["why"].as_str().unwrap_or_default().to_owned()),
        },
        "message" => Record::Delivery {
            subscriber,
            topic,
            payload: match &v["data"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            },
            position: at(v),
        },
        "gap" => Record::Gap {
            subscriber,
            topic,
            resume: at(&v["resume"]),
        },
        _ => return None,
    })
}
