//! The real `ws` binary, run as a user would.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{text, ws};

/// A server sub-command on a free port; returns it once it prints "listening".
struct Running(Child, u16);

impl Running {
    fn start(args: &[&str]) -> Running {
        Running::start_with(ws(), args)
    }

    /// [`start`](Self::start) with a command of one's own (`taskset … ws`).
    fn start_with(mut command: Command, args: &[&str]) -> Running {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut child = command
            .args(args)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stderr.as_mut().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains("listening") || line.contains("waiting"), "{line}");
        Running(child, port)
    }

    fn url(&self, path: &str) -> String {
        format!("ws://127.0.0.1:{}{path}", self.1)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs a client sub-command with `input` on stdin, bounded in time.
fn run(args: &[&str], input: &str) -> Output {
    let mut child = spawn_client(args);
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    wait_bounded(child)
}

#[test]
fn echo_server_and_cat_round_trip() {
    let server = Running::start(&["echo_server", "-q"]);
    let out = run(&["cat", &server.url("/")], "hello\nsecond line\n\u{1b}[31mred\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Control characters from the peer are escaped, one message per line.
    assert_eq!(text(&out.stdout), "hello\nsecond line\n\\x1b[31mred\n");
    let out = run(&["cat", "-b", "-x", &server.url("/")], "binary, uncompressed\n");
    assert_eq!(text(&out.stdout), "binary, uncompressed\n");
}

/// `ws echo_server --runtime`: the own loop, on each interface, behaves as the tokio server does
/// (echo, the greeting, 4001 for a wrong Authorization, wss:// with --tls).
#[test]
fn echo_server_on_the_own_loop_on_every_runtime() {
    for runtime in ["auto", "epoll", "uring"] {
        let server = Running::start(&["echo_server", "-q", "--runtime", runtime, "--threads", "2", "-g"]);
        let out = run(&["cat", &server.url("/")], "hello\nsecond line\n");
        assert!(out.status.success(), "{runtime}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "Welcome !\nhello\nsecond line\n", "{runtime}");
        let out = run(&["cat", "-b", "-x", &server.url("/")], "binary, uncompressed\n");
        // -b: messages are written as they are, without a line of their own.
        assert_eq!(text(&out.stdout), "Welcome !binary, uncompressed\n", "{runtime}");
        drop(server);
        let server = Running::start(&[
            "echo_server",
            "-q",
            "--runtime",
            runtime,
            "--http_authorization_header",
            "Bearer s3cret",
        ]);
        let out = run(&["cat", &server.url("/")], "");
        assert_eq!(out.status.code(), Some(1), "{runtime}");
        assert!(
            text(&out.stderr).contains("4001"),
            "{runtime}: {}",
            text(&out.stderr)
        );
    }
    // wss:// on the own loop: the tokio server's certificate options.
    let (cert_file, key_file) = self_signed("ws-cli-loop-tls");
    let (cert_path, key_path) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    for runtime in ["auto", "epoll"] {
        let server = Running::start(&[
            "echo_server",
            "-q",
            "--runtime",
            runtime,
            "--tls",
            "--cert-file",
            cert_path,
            "--key-file",
            key_path,
        ]);
        let url = server.url("/").replace("ws://", "wss://");
        let out = run(&["cat", "--ca-file", cert_path, &url], "over tls\n");
        assert!(out.status.success(), "{runtime}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "over tls\n", "{runtime}");
        // Without the CA the client refuses the certificate, and the loop goes on serving.
        let out = run(&["cat", &url], "x\n");
        assert_eq!(out.status.code(), Some(1), "{runtime}");
        let out = run(&["cat", "--ca-file", cert_path, &url], "still\n");
        assert_eq!(text(&out.stdout), "still\n", "{runtime}: {}", text(&out.stderr));
    }
}

#[test]
fn every_server_sub_command_serves_http2_clients_on_tokio() {
    // h2c with prior knowledge on the same port as HTTP/1.1.
    let server = Running::start(&["echo_server", "-q", "--runtime", "tokio"]);
    let out = run(&["cat", "--http2", &server.url("/")], "over h2\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "over h2\n");
    // The own loop (the default) serves HTTP/1.1 only, and tells an HTTP/2 client so.
    let own = Running::start(&["echo_server", "-q"]);
    let out = run(&["cat", "--http2", &own.url("/")], "over h2\n");
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("HTTP_1_1_REQUIRED"),
        "{}",
        text(&out.stderr)
    );
    let mut listen = Running::start(&["listen", "--max-messages", "1"]);
    let out = run(&["cat", "-n", "--http2", &listen.url("/")], "to listen\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(listen.0.wait().unwrap().success());
    let mut got = String::new();
    std::io::Read::read_to_string(listen.0.stdout.as_mut().unwrap(), &mut got).unwrap();
    assert_eq!(got, "to listen\n");
    let push = Running::start(&["push_server", "-q", "--send_msg", "yo", "--runtime", "tokio"]);
    let out = run(&["echo_client", "-m", "--http2", &push.url("/5000")], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("messages received: 5000 total in"));
}

#[test]
fn push_server_and_echo_client_count_every_message() {
    let server = Running::start(&["push_server", "-q", "--send_msg", "yo"]);
    let out = run(&["echo_client", "-m", &server.url("/50000")], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("messages received: 50000 total in"), "{stdout}");
}

#[test]
fn echo_client_round_trips_and_stops_at_msg_count() {
    let server = Running::start(&["echo_server", "-q"]);
    let out = run(
        &[
            "echo_client",
            "--send_msg",
            "ping",
            "--msg_count",
            "500",
            &server.url("/"),
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("messages received: 500 total in"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn authorization_is_enforced_with_close_4001() {
    let server = Running::start(&[
        "echo_server",
        "-q",
        "--http_authorization_header",
        "Bearer s3cret",
    ]);
    let out = run(&["cat", &server.url("/")], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("4001"), "{}", text(&out.stderr));
}

#[test]
fn listen_pipes_to_cat() {
    // Client to server: `listen` prints what arrives and closes after two messages.
    let mut server = Running::start(&["listen", "--max-messages", "2"]);
    let out = run(&["cat", "-n", &server.url("/")], "one\ntwo\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(server.0.wait().unwrap().success());
    let mut got = String::new();
    std::io::Read::read_to_string(server.0.stdout.as_mut().unwrap(), &mut got).unwrap();
    assert_eq!(got, "one\ntwo\n");
    // Server to client: `listen` sends its stdin, and closes at its end.
    let mut server = Running::start(&["listen"]);
    let mut stdin = server.0.stdin.take().unwrap();
    stdin.write_all(b"from the server\n").unwrap();
    drop(stdin);
    let out = run(&["cat", "-n", &server.url("/")], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "from the server\n");
}

#[test]
fn bad_input_gives_one_clear_line_and_exit_codes() {
    // A bad URL is a usage error (2), reported while parsing: the first line says what is wrong.
    let out = run(&["cat", "nope://x"], "");
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    let first = err.lines().next().unwrap_or_default();
    assert!(first.contains("invalid URL") && first.contains("nope"), "{err}");
    // Regression (issue 13): an invalid port fell back to 80 (`connect` retried it for ever).
    for args in [
        &["cat", "ws://127.0.0.1:99999/"][..],
        &["connect", "ws://127.0.0.1:99999/"],
    ] {
        let out = run(args, "");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = text(&out.stderr);
        assert!(
            err.contains("invalid URL") && err.contains("99999"),
            "{args:?}: {err}"
        );
    }

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(&["cat", &format!("ws://127.0.0.1:{port}/")], "");
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("refused"), "{}", text(&out.stderr));

    let out = run(&["cat"], "");
    assert_eq!(out.status.code(), Some(2), "usage errors exit 2");
    let out = run(&["echo_server", "--tls"], "");
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--cert-file"), "{}", text(&out.stderr));
    let out = run(&["--version"], "");
    assert!(out.status.success() && text(&out.stdout).starts_with("ws "));
}

#[test]
fn bench_runs_every_scenario_on_both_transports() {
    let out = run(
        &[
            "bench",
            "--count",
            "20000",
            "--round-trips",
            "50",
            "--connects",
            "5",
            "--seconds",
            "15",
        ],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for line in ["ws:", "wss:", "push", "echo rtt", "connect"] {
        assert!(stdout.contains(line), "missing {line:?} in {stdout}");
    }
    assert!(
        stdout.contains("(20000 messages in"),
        "every pushed message counted: {stdout}"
    );
}

/// Starts a client sub-command in the background (for the relay tests).
fn spawn_client(args: &[&str]) -> Child {
    ws().args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn wait_bounded(child: Child) -> Output {
    let mut child = child;
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "a client did not finish");
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

#[test]
fn send_and_receive_a_20_mib_file_byte_identical() {
    let relay = Running::start(&["transfer", "-q"]);
    let dir = std::env::temp_dir().join(format!("ws-transfer-{}", std::process::id()));
    let out_dir = dir.join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let file = dir.join("payload.bin");
    let data: Vec<u8> = (0..20u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    std::fs::write(&file, &data).unwrap();
    let mut receiver = spawn_client(&[
        "receive",
        "--output-dir",
        out_dir.to_str().unwrap(),
        &relay.url("/"),
    ]);
    // The receiver announces itself once connected.
    let mut line = String::new();
    BufReader::new(receiver.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.contains("waiting"), "{line}");
    let sent = run(&["send", &relay.url("/"), file.to_str().unwrap()], "");
    assert!(sent.status.success(), "{}", text(&sent.stderr));
    let received = wait_bounded(receiver);
    assert!(received.status.success(), "{}", text(&received.stderr));
    assert_eq!(
        std::fs::read(out_dir.join("payload.bin")).unwrap(),
        data,
        "byte-identical"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&out_dir).unwrap().collect();
    assert_eq!(leftovers.len(), 1, "no temporary files left");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn broadcast_reaches_every_other_client() {
    // Not quiet: it says when each client has joined (subscribed).
    let relay = common::Server::start(&["broadcast_server"]);
    let listeners: Vec<Child> = (0..3)
        .map(|_| spawn_client(&["cat", "-n", "--max-messages", "1", &relay.url("/")]))
        .collect();
    // The listeners have joined before anyone speaks.
    assert!(
        relay.proc.err.wait_for("joined (", 3, Duration::from_secs(30)),
        "{}",
        relay.proc.err.text()
    );
    // The speaker sends one line and closes at the end of its input.
    let speaker = run(&["cat", &relay.url("/")], "hello everyone\n");
    assert!(speaker.status.success(), "{}", text(&speaker.stderr));
    assert_eq!(text(&speaker.stdout), "", "a sender does not hear itself");
    for l in listeners {
        let out = wait_bounded(l);
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "hello everyone\n");
    }
}

#[test]
fn ping_and_autoroute() {
    let server = Running::start(&["echo_server", "-q"]);
    let out = run(
        &["ping", "--count", "3", "--interval_ms", "10", &server.url("/")],
        "",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).matches("pong from").count(),
        3,
        "{}",
        text(&out.stdout)
    );
    let push = Running::start(&["push_server", "-q"]);
    let out = run(&["autoroute", "--msg_count", "10000", &push.url("")], "");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stdout).contains("received 10000 of 10000 messages"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn connect_prints_the_handshake_sends_lines_and_stops() {
    let server = Running::start(&["echo_server", "-q", "--http_authorization_header", "Bearer k"]);
    let out = run(
        &["connect", "-H", "Authorization: Bearer k", &server.url("/")],
        "hello\n/stop\n",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.starts_with("connected: HTTP/1.1 101 Switching Protocols\n"),
        "{stdout}"
    );
    assert!(stdout.contains("sec-websocket-accept"), "{stdout}");
    assert!(stdout.contains("received: hello\n"), "{stdout}");
    // Without the header the server closes with 4001; with -d there is no retry.
    let out = run(&["connect", "-d", &server.url("/")], "");
    assert!(
        text(&out.stdout).contains("closed by the server: 4001"),
        "{}",
        text(&out.stdout)
    );
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let out = run(&["connect", "-d", &format!("ws://127.0.0.1:{port}/")], "");
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn pubsub_server_speaks_the_json_protocol_at_the_root() {
    let node = Running::start(&["pubsub_server", "-q"]);
    // One socket: a subscribe and a publish answered in order, then a refusal that leaves it up.
    let requests = concat!(
        r#"{"type":"subscribe","topic":"t","id":1}"#,
        "\n",
        r#"{"type":"publish","topic":"t","data":{"n":1},"id":2}"#,
        "\n",
        r#"{"type":"dance","id":3}"#,
        "\n",
    );
    // --no-close: the answers come after stdin ended; closing then would race them.
    let out = run(
        &["cat", "--no-close", "--max-messages", "3", &node.url("/")],
        requests,
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}{}", text(&out.stderr));
    assert_eq!(
        lines[0],
        r#"{"type":"subscribed","topic":"t","recovery":"live","recovered":0,"id":1}"#
    );
    assert!(
        lines[1].starts_with(r#"{"type":"published","topic":"t","offset":1,"epoch":"#),
        "{}",
        lines[1]
    );
    assert!(
        lines[2].starts_with(r#"{"type":"error","code":"unknown_type""#),
        "{}",
        lines[2]
    );
    // Anywhere but the root: closed with 1008, saying where.
    let elsewhere = run(&["cat", &node.url("/other")], "");
    assert!(
        text(&elsewhere.stderr).contains("served at /"),
        "{}",
        text(&elsewhere.stderr)
    );
}

#[test]
fn chat_signs_lines_with_the_user_name() {
    let relay = common::Server::start(&["broadcast_server"]);
    let listener = spawn_client(&["cat", "-n", "--max-messages", "1", &relay.url("/")]);
    assert!(
        relay.proc.err.wait_for("joined (", 1, Duration::from_secs(30)),
        "{}",
        relay.proc.err.text()
    );
    let out = run(&["chat", &relay.url("/"), "alice"], "hi all\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let heard = wait_bounded(listener);
    assert_eq!(text(&heard.stdout), "alice: hi all\n");
}

#[test]
fn ctrl_c_closes_every_connection_with_1001() {
    // A pushing server's close waits behind what it already queued: its client must read fast
    // (both release builds when the test command names one, as for the floods of signals.rs).
    let push = common::Server::start_flood(&["push_server", "--send_msg", "yo"]);
    let client = Command::new(common::flood_bin())
        .args(["echo_client", "-m", &push.url("/")])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupted once it pushes to the client, not before it has one.
    assert!(
        push.proc
            .err
            .wait_for("connected, pushing", 1, Duration::from_secs(30)),
        "{}",
        push.proc.err.text()
    );
    common::sigint(push.proc.pid());
    let out = wait_bounded(client);
    assert!(
        out.status.success(),
        "a 1001 close is a clean end: {}",
        text(&out.stderr)
    );
    for server_args in [
        &["echo_server", "-q"][..],
        &["broadcast_server", "-q"],
        &["pubsub_server", "-q"],
    ] {
        let mut server = Running::start(server_args);
        let mut client = spawn_client(&["connect", "-d", &server.url("/")]);
        let mut line = String::new();
        let mut stdout = BufReader::new(client.stdout.take().unwrap());
        stdout.read_line(&mut line).unwrap();
        assert!(line.starts_with("connected:"), "{line}");
        // Read the client's output as a terminal would, so that it keeps reading its socket.
        let reader = std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = std::io::Read::read_to_string(&mut stdout, &mut rest);
            rest
        });
        common::sigint(server.0.id());
        let deadline = Instant::now() + Duration::from_secs(5);
        let status = loop {
            if let Some(status) = server.0.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "{server_args:?} did not exit on SIGINT"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        assert!(status.success(), "{server_args:?}: {status:?}");
        let _ = wait_bounded(client);
        let rest = reader.join().unwrap();
        let tail: String = rest.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        assert!(
            rest.contains("closed by the server: 1001"),
            "{server_args:?}: ...{tail}"
        );
    }
}

/// A self-signed certificate for 127.0.0.1 and localhost, written as `cert.pem` and `key.pem`
/// into a directory of the temporary one named `name` and this process: their paths.
fn self_signed(name: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let (cert_file, key_file) = (dir.join("cert.pem"), dir.join("key.pem"));
    std::fs::write(&cert_file, cert.cert.pem()).unwrap();
    std::fs::write(&key_file, cert.signing_key.serialize_pem()).unwrap();
    (cert_file, key_file)
}

#[test]
fn wss_with_a_ca_file_insecure_mode_and_cipher_suites_on_both_sides() {
    let (cert_file, key_file) = self_signed("ws-cli-tls");
    let (cert_path, key_path) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    // The server allows one TLS 1.3 suite only.
    let server = Running::start(&[
        "echo_server",
        "-q",
        "--tls",
        "--cert-file",
        cert_path,
        "--key-file",
        key_path,
        "--ciphers",
        "TLS_AES_128_GCM_SHA256",
    ]);
    let url = server.url("/").replace("ws://", "wss://");
    let out = run(&["cat", "--ca-file", cert_path, &url], "over tls\n");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "over tls\n");
    // The same suite asked by the client: fine; another one only: no handshake.
    let out = run(
        &[
            "cat",
            "--ca-file",
            cert_path,
            "--ciphers",
            "TLS_AES_128_GCM_SHA256",
            &url,
        ],
        "again\n",
    );
    assert_eq!(text(&out.stdout), "again\n", "{}", text(&out.stderr));
    let out = run(
        &[
            "cat",
            "--ca-file",
            cert_path,
            "--ciphers",
            "TLS_AES_256_GCM_SHA384",
            &url,
        ],
        "never\n",
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).is_empty());
    // Without the CA the certificate is refused; -k accepts it.
    let out = run(&["cat", &url], "x\n");
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).to_lowercase().contains("certificate"),
        "{}",
        text(&out.stderr)
    );
    let out = run(&["cat", "-k", &url], "insecure\n");
    assert_eq!(text(&out.stdout), "insecure\n", "{}", text(&out.stderr));
    // A suite name nobody knows is a usage error.
    let out = run(&["cat", "--ciphers", "RC4-MD5", &url], "");
    assert_eq!(out.status.code(), Some(2));
    let _ = std::fs::remove_dir_all(cert_file.parent().unwrap());
}

/// One HTTP/1.1 request (the connection closed after it); the status and the body.
fn http(port: u16, request_line: &str, headers: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        tcp,
        "{request_line} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nContent-Length: {}\r\n{headers}\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let status = answer[9..12].parse().unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn pubsub_server_serves_the_api_the_page_and_tokens_on_one_port() {
    let node = Running::start(&[
        "pubsub_server",
        "-q",
        "--api-token",
        "api",
        "--token",
        "shared",
        "--allow-subscribe",
        "news/*",
    ]);
    let port = node.1;
    let (status, body) = http(port, "GET /demo", "", "");
    assert_eq!(status, 200);
    assert!(body.contains("./client.js"));
    let (status, body) = http(port, "GET /", "", "");
    assert_eq!(status, 426, "{body}");
    let (status, body) = http(port, "POST /publish/news/a", "", "1");
    assert_eq!(status, 401, "{body}");
    let (status, body) = http(
        port,
        "POST /publish/news/a",
        "Authorization: Bearer api\r\n",
        "{\"n\":1}",
    );
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with(r#"{"topic":"news/a","offset":1,"epoch":"#),
        "{body}"
    );
    let (status, body) = http(port, "GET /metrics", "", "");
    assert_eq!(status, 200);
    assert!(
        body.contains(r#"sockeye_pubsub_publications_total{source="http"} 1"#),
        "{body}"
    );

    // A client without the token is refused before the upgrade; with it, it may subscribe to
    // what --allow-subscribe grants and nothing else.
    let refused = run(&["cat", &node.url("/")], "");
    assert!(text(&refused.stderr).contains("401"), "{}", text(&refused.stderr));
    let requests = concat!(
        r#"{"type":"subscribe","topic":"news/a","id":1}"#,
        "\n",
        r#"{"type":"subscribe","topic":"user/x","id":2}"#,
        "\n",
    );
    let out = run(
        &[
            "cat",
            "--no-close",
            "--max-messages",
            "2",
            &node.url("/?token=shared"),
        ],
        requests,
    );
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}{}", text(&out.stderr));
    assert!(
        lines[0].starts_with(r#"{"type":"subscribed","topic":"news/a""#),
        "{}",
        lines[0]
    );
    assert!(
        lines[1].starts_with(r#"{"type":"error","code":"not_allowed""#),
        "{}",
        lines[1]
    );
}

#[test]
fn pubsub_server_over_tls_speaks_http1_and_http2() {
    let (cert_file, key_file) = self_signed("ws-cli-pubsub-tls");
    let (cert_path, key_path) = (cert_file.to_str().unwrap(), key_file.to_str().unwrap());
    let node = Running::start(&[
        "pubsub_server",
        "-q",
        "--tls",
        "--cert-file",
        cert_path,
        "--key-file",
        key_path,
    ]);
    let url = node.url("/").replace("ws://", "wss://");
    // The same requests over HTTP/1.1 and over HTTP/2 (ALPN h2, the socket an RFC 8441
    // stream; `--http2` fails rather than fall back): a subscription, then a publication on it
    // that the node confirms with its position.
    for (version, extra) in [("HTTP/1.1", None), ("HTTP/2", Some("--http2"))] {
        let requests = concat!(
            r#"{"type":"subscribe","topic":"t","id":1}"#,
            "\n",
            r#"{"type":"publish","topic":"t","data":{"n":1},"id":2}"#,
            "\n",
        );
        let mut args = vec!["cat", "--no-close", "--max-messages", "2", "--ca-file", cert_path];
        args.extend(extra);
        args.push(&url);
        let out = run(&args, requests);
        let stdout = text(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 2, "{version}: {stdout}{}", text(&out.stderr));
        assert!(
            lines[0].starts_with(r#"{"type":"subscribed","topic":"t""#),
            "{version}: {}",
            lines[0]
        );
        // The second run's publication is the topic's second.
        let offset = if extra.is_none() { 1 } else { 2 };
        let published = format!(r#"{{"type":"published","topic":"t","offset":{offset},"#);
        assert!(
            lines[1].starts_with(&published) && lines[1].ends_with(r#","id":2}"#),
            "{version}: {}",
            lines[1]
        );
    }
    let _ = std::fs::remove_dir_all(cert_file.parent().unwrap());
}

#[test]
fn pubsub_server_allow_rules_need_a_token_flag() {
    let out = run(&["pubsub_server", "--allow-publish", "x", "--port", "1"], "");
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--jwt-secret or --token"),
        "{}",
        text(&out.stderr)
    );
}

/// Given one CPU (`taskset -c 0`, a container of one CPU), the tool runs on one thread: a
/// current-thread runtime, without the work-stealing bookkeeping that could spread nothing
/// (bench/README.md "Every core"); given more, on tokio's multi-thread runtime. Both serve.
/// The own loop's servers run one loop thread per CPU they may use: one there.
#[test]
fn one_cpu_runs_the_tool_on_one_thread() {
    let Ok(status) = Command::new("taskset").args(["-c", "0", "true"]).status() else {
        panic!("taskset (util-linux) is needed by this test");
    };
    assert!(status.success());
    let threads = |server: &Running| -> usize {
        let status = std::fs::read_to_string(format!("/proc/{}/status", server.0.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Threads:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let loop_threads = |server: &Running| -> usize {
        std::fs::read_dir(format!("/proc/{}/task", server.0.id()))
            .unwrap()
            .filter(|task| {
                let comm = task.as_ref().unwrap().path().join("comm");
                std::fs::read_to_string(comm).is_ok_and(|name| name.starts_with("sockeye-loop"))
            })
            .count()
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pinned_ws = || {
        let mut pinned = Command::new("taskset");
        pinned.args(["-c", "0", env!("CARGO_BIN_EXE_ws")]);
        pinned
    };
    for (command, one_thread) in [(pinned_ws(), true), (ws(), false)] {
        let server = Running::start_with(command, &["echo_server", "-q", "--runtime", "tokio"]);
        let out = run(&["cat", &server.url("/")], "one\ntwo\n");
        assert_eq!(text(&out.stdout), "one\ntwo\n", "{}", text(&out.stderr));
        let n = threads(&server);
        if one_thread {
            assert_eq!(n, 1, "pinned to one CPU: one thread");
        } else if cpus > 1 {
            assert!(n > 1, "{n} thread(s) with several CPUs");
        }
    }
    for (command, expected) in [(pinned_ws(), 1), (ws(), cpus)] {
        let server = Running::start_with(command, &["echo_server", "-q"]);
        let out = run(&["cat", &server.url("/")], "one\ntwo\n");
        assert_eq!(text(&out.stdout), "one\ntwo\n", "{}", text(&out.stderr));
        assert_eq!(loop_threads(&server), expected, "own loop threads");
    }
}
