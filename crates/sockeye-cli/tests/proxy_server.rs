//! `ws proxy_server` in front of real servers (the `ws` binary's and an in-process one), with
//! library clients: payloads, close frames, routing and failures as a client sees them.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sockeye::{CloseCode, CloseFrame, Config, DataKind, Message};

/// Everything here is loopback; nothing may take long.
const BOUND: Duration = Duration::from_secs(10);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A `ws` server sub-command on a free port, started once it prints "listening"; its stderr is
/// collected by a thread (a full pipe would block it). Killed by pid on drop.
struct Running {
    child: Child,
    port: u16,
    log: Arc<Mutex<String>>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let port = free_port();
        let mut child = Command::new(env!("CARGO_BIN_EXE_ws"))
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
        assert!(line.contains("listening on ws://"), "{args:?}: {line}");
        let log = Arc::new(Mutex::new(line));
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut rest = String::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = stderr.get_mut().read(&mut buf) {
                if n == 0 {
                    break;
                }
                rest.push_str(&String::from_utf8_lossy(&buf[..n]));
                sink.lock().unwrap().push_str(&rest);
                rest.clear();
            }
        });
        Running { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("ws://127.0.0.1:{}{path}", self.port)
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Whether the log shows `pattern` within 5 s. The server writes a line before it acts on
    /// it, but the line reaches `log` through a pipe and a thread: checking right after the
    /// client saw the action races with them (a CI run lost that race).
    fn logged(&self, pattern: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.log().contains(pattern) {
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `ws ARGS` to its end, bounded in time: (exit code, stderr).
fn run_to_end(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ws"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
            return (status.code(), err);
        }
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ws {args:?} did not exit within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

type Ws = sockeye::WebSocket<sockeye::TransportStream>;

async fn connect_with_host(url: &str, host: Option<&str>, config: &Config) -> Ws {
    let mut request = http::Request::get(url).body(()).unwrap();
    if let Some(host) = host {
        request.headers_mut().insert("host", host.parse().unwrap());
    }
    let connecting = sockeye::connect_with(request, config);
    tokio::time::timeout(BOUND, connecting).await.unwrap().unwrap().0
}

/// The next message, bounded in time.
async fn next(ws: &mut Ws) -> Option<Message> {
    tokio::time::timeout(BOUND, ws.recv())
        .await
        .expect("no message within the bound")
        .map(|r| r.unwrap())
}

/// The next data message or close frame (pings and pongs skipped).
async fn next_data(ws: &mut Ws) -> Message {
    loop {
        match next(ws).await {
            Some(Message::Ping(_) | Message::Pong(_)) => {}
            Some(m) => return m,
            None => panic!("the connection ended without a close frame"),
        }
    }
}

fn close_frame(m: Message) -> CloseFrame {
    match m {
        Message::Close(Some(frame)) => frame,
        other => panic!("expected a close frame with a code, got {other:?}"),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u32 * 31 + seed as u32) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relays_text_and_binary_byte_identical_both_with_and_without_compression() {
    let echo = Running::start(&["echo_server", "-q"]);
    let proxy = Running::start(&["proxy_server", "-q", "--remote_host", &echo.url("")]);
    let plain = {
        let mut c = Config::default();
        c.protocol.deflate = None;
        c
    };
    let big_text: String = "0123456789abcdef\u{e9}\u{2713}"
        .repeat((5 << 20) / 21)
        .chars()
        .collect();
    let messages = vec![
        Message::text("h\u{e9}llo w\u{f6}rld \u{2713}"),
        Message::binary((0..=255u8).collect::<Vec<u8>>()),
        Message::text(""),
        Message::binary(Vec::new()),
        Message::binary(pattern(5 << 20, 7)),
        Message::text(big_text),
    ];
    for config in [Config::default(), plain] {
        let mut ws = connect_with_host(&proxy.url("/any/path?q=1"), None, &config).await;
        for m in &messages {
            ws.send(m.clone()).await.unwrap();
            assert_eq!(&next_data(&mut ws).await, m);
        }
        // A fragmented message arrives reassembled, as one message of the same kind.
        ws.send_fragment(DataKind::Text, "frag".into(), false)
            .await
            .unwrap();
        ws.send_fragment(DataKind::Text, "ment".into(), false)
            .await
            .unwrap();
        ws.send_fragment(DataKind::Text, "ed \u{2713}".into(), true)
            .await
            .unwrap();
        assert_eq!(next_data(&mut ws).await, Message::text("fragmented \u{2713}"));
        // Many messages at once, in order.
        let burst: Vec<Message> = (0..2000)
            .map(|i| Message::binary(pattern(i % 700, i as u8)))
            .collect();
        ws.send_batch(burst.clone()).await.unwrap();
        for m in &burst {
            assert_eq!(&next_data(&mut ws).await, m);
        }
        let reply = tokio::time::timeout(BOUND, ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "done"))))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(reply.map(|f| f.code), Some(CloseCode::NORMAL));
    }
}

/// What the in-process upstream saw of one client.
#[derive(Debug)]
struct Seen {
    target: String,
    protocol: Option<String>,
    forwarded_for: Option<String>,
    authorization: Option<String>,
    close: Option<Option<CloseFrame>>,
}

/// An upstream that reports what each client sent, and closes `/close-me` itself with 4321.
async fn recording_upstream() -> (String, tokio::sync::mpsc::UnboundedReceiver<Seen>) {
    let server = sockeye::Server::bind("127.0.0.1:0", Config::default())
        .await
        .unwrap();
    let url = format!("ws://{}", server.local_addr().unwrap());
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(server.serve_requests(move |mut ws, request, _peer| {
        let tx = tx.clone();
        async move {
            let header = |name: &str| {
                request
                    .headers()
                    .get(name)
                    .map(|v| v.to_str().unwrap().to_string())
            };
            let mut seen = Seen {
                target: request.uri().to_string(),
                protocol: header("sec-websocket-protocol"),
                forwarded_for: header("x-forwarded-for"),
                authorization: header("authorization"),
                close: None,
            };
            if request.uri().path() == "/close-me" {
                let _ = ws
                    .close(Some(CloseFrame::new(CloseCode(4321), "from upstream")))
                    .await;
            } else {
                while let Some(Ok(m)) = ws.recv().await {
                    if let Message::Close(frame) = m {
                        seen.close = Some(frame);
                    }
                }
            }
            let _ = tx.send(seen);
        }
    }));
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_frames_path_query_and_headers_are_forwarded() {
    let (upstream, mut seen) = recording_upstream().await;
    let proxy = Running::start(&["proxy_server", "-q", "--remote_host", &upstream]);

    // Client -> upstream: code and reason as sent; the path, query and subprotocol offer too.
    let mut request = http::Request::get(proxy.url("/room/1?x=y")).body(()).unwrap();
    request
        .headers_mut()
        .insert("sec-websocket-protocol", "chat, superchat".parse().unwrap());
    request
        .headers_mut()
        .insert("authorization", "Bearer t0ken".parse().unwrap());
    let (mut ws, _) = sockeye::connect(request).await.unwrap();
    let reply = ws
        .close(Some(CloseFrame::new(CloseCode(4000), "bye from client")))
        .await
        .unwrap();
    assert_eq!(reply.map(|f| f.code), Some(CloseCode(4000)));
    let got = tokio::time::timeout(BOUND, seen.recv()).await.unwrap().unwrap();
    assert_eq!(got.target, "/room/1?x=y");
    assert_eq!(got.protocol.as_deref(), Some("chat, superchat"));
    assert_eq!(got.authorization.as_deref(), Some("Bearer t0ken"));
    assert_eq!(got.forwarded_for.as_deref(), Some("127.0.0.1"));
    assert_eq!(
        got.close,
        Some(Some(CloseFrame::new(CloseCode(4000), "bye from client")))
    );

    // A close without a code stays without a code.
    let mut ws = connect_with_host(&proxy.url("/"), None, &Config::default()).await;
    ws.close(None).await.unwrap();
    let got = tokio::time::timeout(BOUND, seen.recv()).await.unwrap().unwrap();
    assert_eq!(got.close, Some(None));

    // Upstream -> client.
    let mut ws = connect_with_host(&proxy.url("/close-me"), None, &Config::default()).await;
    let frame = close_frame(next_data(&mut ws).await);
    assert_eq!(frame, CloseFrame::new(CloseCode(4321), "from upstream"));
    assert!(next(&mut ws).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_host_header_with_and_without_port() {
    let echo = Running::start(&["echo_server", "-q"]);
    let push = Running::start(&["push_server", "-q", "--send_msg", "pushed"]);
    let dir = std::env::temp_dir().join(format!("sockeye-proxy-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("routes.json");
    std::fs::write(
        &config,
        format!(
            "{{\"remote_urls\": {{\"echo.local\": \"{}\", \"push.local:8080\": \"{}\"}}}}",
            echo.url(""),
            push.url("/")
        ),
    )
    .unwrap();
    let proxy = Running::start(&["proxy_server", "-q", "--config_path", config.to_str().unwrap()]);
    let url = proxy.url("/3");
    let config_default = Config::default();

    // echo.local (any port) -> echo_server.
    for host in ["echo.local", "ECHO.local:8008"] {
        let mut ws = connect_with_host(&url, Some(host), &config_default).await;
        ws.send("who are you?").await.unwrap();
        assert_eq!(next_data(&mut ws).await, Message::text("who are you?"));
        ws.close(None).await.unwrap();
    }
    // push.local:8080 -> push_server, which pushes 3 messages on /3 and closes with 1000.
    let mut ws = connect_with_host(&url, Some("push.local:8080"), &config_default).await;
    for _ in 0..3 {
        assert_eq!(next_data(&mut ws).await, Message::text("pushed"));
    }
    assert_eq!(close_frame(next_data(&mut ws).await).code, CloseCode::NORMAL);
    // push.local on another port: no route, and no default: a clear close, promptly.
    let mut ws = connect_with_host(&url, Some("push.local:9999"), &config_default).await;
    let frame = close_frame(next_data(&mut ws).await);
    assert_eq!(frame.code, CloseCode(1014));
    assert!(
        frame.reason.contains("no route for host push.local:9999"),
        "{frame:?}"
    );
    drop(proxy);

    // With a default, unknown hosts go there.
    std::fs::write(
        &config,
        format!("{{\"remote_urls\": {{\"default\": \"{}\"}}}}", echo.url("")),
    )
    .unwrap();
    let proxy = Running::start(&["proxy_server", "-q", "--config_path", config.to_str().unwrap()]);
    let mut ws = connect_with_host(&proxy.url("/"), Some("anything.example"), &config_default).await;
    ws.send("via default").await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("via default"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_down_or_lost_closes_the_client_clearly_and_promptly() {
    // Nothing listens on port 1 (a port picked free now could be taken by a parallel test's
    // server before the proxy tries it).
    let dead = "ws://127.0.0.1:1";
    let proxy = Running::start(&["proxy_server", "-q", "--remote_host", dead]);
    let started = Instant::now();
    let mut ws = connect_with_host(&proxy.url("/"), None, &Config::default()).await;
    let frame = close_frame(next_data(&mut ws).await);
    assert_eq!(frame.code, CloseCode(1014), "{frame:?}");
    assert!(frame.reason.starts_with("bad gateway"), "{frame:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(proxy.logged("cannot reach"), "{}", proxy.log());

    // The upstream goes away mid-connection: the client is closed with 1011.
    let echo = Running::start(&["echo_server", "-q"]);
    let proxy = Running::start(&["proxy_server", "-q", "--remote_host", &echo.url("")]);
    let mut ws = connect_with_host(&proxy.url("/"), None, &Config::default()).await;
    ws.send("still there?").await.unwrap();
    assert_eq!(next_data(&mut ws).await, Message::text("still there?"));
    drop(echo);
    let frame = close_frame(next_data(&mut ws).await);
    assert_eq!(frame.code, CloseCode::INTERNAL_ERROR, "{frame:?}");
    assert!(frame.reason.starts_with("upstream"), "{frame:?}");
}

#[test]
fn bad_usage_and_bad_config_files_exit_2_and_say_why() {
    let dir = std::env::temp_dir().join(format!("sockeye-proxy-usage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let port = free_port().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec![], "--remote_host"),
        (
            vec![
                "--config_path".into(),
                dir.join("missing.json").to_str().unwrap().into(),
            ],
            "missing.json",
        ),
        (
            vec![
                "--config_path".into(),
                file("syntax.json", "{\n  \"remote_urls\": {,}\n}"),
            ],
            "line 2",
        ),
        (
            vec!["--config_path".into(), file("nokey.json", "{\"urls\": {}}")],
            "remote_urls",
        ),
        (
            vec![
                "--config_path".into(),
                file("empty.json", "{\"remote_urls\": {}}"),
            ],
            "empty",
        ),
        (
            vec![
                "--config_path".into(),
                file("badurl.json", "{\"remote_urls\": {\"a.local\": \"ftp://x\"}}"),
            ],
            "\"a.local\"",
        ),
        (
            vec![
                "--config_path".into(),
                file("number.json", "{\"remote_urls\": {\"b.local\": 42}}"),
            ],
            "\"b.local\"",
        ),
        (vec!["--remote_host".into(), "not a url".into()], "remote_host"),
        (
            vec![
                "--remote_host".into(),
                "ws://127.0.0.1:1".into(),
                "--config_path".into(),
                file(
                    "ok.json",
                    "{\"remote_urls\": {\"default\": \"ws://127.0.0.1:1\"}}",
                ),
            ],
            "cannot be used with",
        ),
    ];
    for (extra, says) in cases {
        let mut args = vec!["proxy_server".to_string(), "--port".into(), port.clone()];
        args.extend(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stderr) = run_to_end(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} should say {says:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
