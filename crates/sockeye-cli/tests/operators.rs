//! `ws pubsub_server` as its operator sees it, driving the real binary over loopback: one log
//! line per WebSocket session and none per HTTP request (`/metrics` scrapes and probes
//! silent), no colour codes in a log that is not a terminal, `--log-format json`, `-q`, a
//! limit's error naming its flag, and (with a real Redis) the backplane's loss logged once at
//! warn, its return at info, with `/readyz` following it. Every wait is bounded; every process
//! is killed by its PID when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

#[path = "../../sockeye-pubsub/tests/support/servers.rs"]
mod servers;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Proc, Server, text};
use servers::{BackplaneServer, Kind};

const SESSION_LINE: &str = "WebSocket session ended";

/// `GET path` on a new connection: the status.
fn get(port: u16, path: &str) -> u16 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let answer = text(&answer);
    answer.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A `ws cat` session on the node: sends `lines`, reads `answers` frames, closes; its stdout.
fn session(node: &Server, lines: &str, answers: usize) -> String {
    let mut cat = Proc::client(&[
        "cat",
        "--no-close",
        "--max-messages",
        &answers.to_string(),
        &node.url("/"),
    ]);
    cat.stdin.as_mut().unwrap().write_all(lines.as_bytes()).unwrap();
    drop(cat.stdin.take());
    let status = cat.finish(Duration::from_secs(15));
    assert!(
        status.is_some_and(|s| s.success()),
        "{status:?}: {}",
        cat.err.text()
    );
    cat.out.text()
}

const SUBSCRIBE: &str = "{\"type\":\"subscribe\",\"topic\":\"t\",\"id\":1}\n";

#[test]
fn one_line_per_session_none_per_request_and_no_colour_in_a_pipe() {
    let node = Server::start(&["pubsub_server"]);
    for path in ["/metrics", "/healthz", "/readyz", "/metrics", "/client.js"] {
        assert_eq!(get(node.port, path), 200, "{path}");
    }
    session(&node, SUBSCRIBE, 1);
    assert!(
        node.proc.err.wait_for(SESSION_LINE, 1, Duration::from_secs(10)),
        "{}",
        node.proc.err.text()
    );
    // A scrape or a probe after the session would show up by now too.
    assert_eq!(get(node.port, "/metrics"), 200);
    std::thread::sleep(Duration::from_millis(300));
    let log = node.proc.err.text();
    assert_eq!(log.matches(SESSION_LINE).count(), 1, "{log}");
    let line = log.lines().find(|l| l.contains(SESSION_LINE)).unwrap();
    for field in [
        "INFO",
        "peer=127.0.0.1",
        "reason=\"client\"",
        "close_code=none",
        "received=1",
        "sent=0",
    ] {
        assert!(line.contains(field), "{field}: {line}");
    }
    // The first lines (listening, the no-auth warning), "serving", the session: nothing per request.
    assert_eq!(log.lines().count(), 4, "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a pipe: {log:?}");
}

#[test]
fn log_format_json_writes_one_object_a_line() {
    let node = Server::start(&["pubsub_server", "--log-format", "json"]);
    session(&node, SUBSCRIBE, 1);
    assert!(
        node.proc.err.wait_for(SESSION_LINE, 1, Duration::from_secs(10)),
        "{}",
        node.proc.err.text()
    );
    let log = node.proc.err.text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: not JSON: {l}")))
        .collect();
    assert!(lines.len() >= 3, "{log}");
    for line in &lines {
        assert!(line["ts"].as_str().is_some_and(|t| t.starts_with("20")), "{line}");
        assert!(
            line["level"].is_string() && line["msg"].is_string() && line["fields"].is_object(),
            "{line}"
        );
    }
    assert!(lines[0]["msg"].as_str().unwrap().contains("listening"), "{log}");
    assert_eq!(lines[1]["level"], "warn", "the no-auth warning: {log}");
    let ended = lines.iter().find(|l| l["msg"] == SESSION_LINE).unwrap();
    assert_eq!(ended["level"], "info");
    assert_eq!(ended["fields"]["peer"], "127.0.0.1");
    assert_eq!(ended["fields"]["close_code"], "none");
    assert_eq!(ended["fields"]["received"], 1);
}

#[test]
fn quiet_keeps_only_warnings_and_a_limit_error_names_its_flag() {
    let node = Server::start(&["pubsub_server", "-q", "--max-subscriptions", "1"]);
    let two = "{\"type\":\"subscribe\",\"topic\":\"a\",\"id\":1}\n{\"type\":\"subscribe\",\"topic\":\"b\",\"id\":2}\n";
    let answers = session(&node, two, 2);
    let refused = answers.lines().nth(1).unwrap_or_default();
    assert!(refused.contains("\"type\":\"error\""), "{answers}");
    assert!(
        refused.contains("--max-subscriptions"),
        "the flag that raises it: {refused}"
    );
    std::thread::sleep(Duration::from_millis(500));
    let log = node.proc.err.text();
    assert!(
        !log.contains(SESSION_LINE) && !log.contains("serving"),
        "-q: no info lines: {log}"
    );
    assert!(
        log.contains("warning: no --jwt-secret or --token"),
        "warnings stay: {log}"
    );
}

#[test]
fn a_lost_backplane_is_logged_once_at_warn_its_return_at_info_and_readyz_follows() {
    let mut redis = BackplaneServer::start(Kind::Redis { persistent: false });
    let node = Server::start(&["pubsub_server", "--backplane", &redis.url()]);
    let err = &node.proc.err;
    let ready = || get(node.port, "/readyz");
    assert_eq!(ready(), 200, "{}", err.text());
    // A subscription, so that the node holds a connection to Redis that sees it go.
    let mut cat = Proc::client(&["cat", "--no-close", &node.url("/")]);
    cat.stdin
        .as_mut()
        .unwrap()
        .write_all(SUBSCRIBE.as_bytes())
        .unwrap();
    assert!(
        cat.out.wait_for("subscribed", 1, Duration::from_secs(10)),
        "{}",
        cat.err.text()
    );

    redis.kill();
    assert!(
        err.wait_for("backplane lost", 1, Duration::from_secs(30)),
        "{}",
        err.text()
    );
    assert_eq!(ready(), 503, "{}", err.text());
    // It keeps failing to reconnect for a while: still one warning.
    std::thread::sleep(Duration::from_secs(2));
    redis.restart();
    assert!(
        err.wait_for("backplane restored", 1, Duration::from_secs(30)),
        "{}",
        err.text()
    );
    assert_eq!(ready(), 200);
    let log = err.text();
    assert_eq!(log.matches("backplane lost").count(), 1, "{log}");
    let lost = log.lines().find(|l| l.contains("backplane lost")).unwrap();
    let restored = log.lines().find(|l| l.contains("backplane restored")).unwrap();
    assert!(lost.contains("WARN") && restored.contains("INFO"), "{log}");
}

/// A node whose log reader went away (stderr a closed pipe: a service's log collector
/// restarted) keeps serving and still stops on SIGINT. tracing-subscriber reported its own
/// failed writes with `eprintln!`, which panicked on that same closed stderr in whatever task
/// logged: the signal listener's, so the shutdown was never asked for and the node ran on.
#[test]
fn a_node_whose_stderr_is_closed_serves_and_stops_on_a_signal() {
    let port = common::free_port();
    let mut cmd = common::ws();
    cmd.args(["pubsub_server", "--port", &port.to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    // The first line says it listens; then the reader goes away.
    let mut stderr = child.stderr.take().unwrap();
    let mut first = [0u8; 64];
    let n = stderr.read(&mut first).unwrap();
    assert!(text(&first[..n]).contains("listening"), "{}", text(&first[..n]));
    drop(stderr);
    // Sessions that end log a line each, into the closed pipe; the node goes on serving.
    for _ in 0..3 {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        tcp.write_all(
            b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        )
        .unwrap();
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).unwrap();
        assert_eq!(&head, b"HTTP/1.1 101");
    }
    assert_eq!(get(port, "/healthz"), 200);
    common::sigint(child.id());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            common::sigkill(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let status = status.expect("the node stops within 10 s of SIGINT");
    assert!(status.success(), "{status:?}");
}

/// `--max-connections` needs a descriptor per connection: the node raises its soft limit on
/// open files up to the hard one as far as it needs, and when even the hard one is too low it
/// says so at start, naming the flag and what to raise (before, the connections past the limit
/// failed to be accepted, "too many open files", with nothing said at start).
#[test]
fn the_node_makes_room_for_max_connections_or_says_why_it_cannot() {
    let ws = env!("CARGO_BIN_EXE_ws");
    let start = |limits: &str, connections: &str| {
        let port = common::free_port().to_string();
        let mut cmd = std::process::Command::new("prlimit");
        cmd.args([
            &format!("--nofile={limits}"),
            ws,
            "pubsub_server",
            "--port",
            &port,
            "--max-connections",
            connections,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        let node = Proc::spawn(cmd);
        assert!(
            node.err.wait_for("listening", 1, Duration::from_secs(20)),
            "{}",
            node.err.text()
        );
        node
    };
    let open_files = |pid: u32| -> (String, String) {
        let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
        let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap();
        let mut numbers = line.split_whitespace().skip(3);
        (
            numbers.next().unwrap().to_owned(),
            numbers.next().unwrap().to_owned(),
        )
    };
    // Room under the hard limit: raised as far as needed, nothing said.
    let node = start("1024:8192", "2000");
    assert_eq!(open_files(node.pid()), ("2064".to_owned(), "8192".to_owned()));
    assert!(!node.err.text().contains("open files"), "{}", node.err.text());
    drop(node);
    // No room: raised to the hard limit, and the warning says what to do.
    let node = start("512:1024", "2000");
    assert_eq!(open_files(node.pid()), ("1024".to_owned(), "1024".to_owned()));
    let log = node.err.text();
    assert!(
        log.contains("--max-connections 2000 needs 2064 open files")
            && log.contains("hard limit 1024")
            && log.contains("LimitNOFILE"),
        "{log}"
    );
}
