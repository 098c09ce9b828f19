//! `ws pubsub_server`'s client authentication flags: secrets and tokens from files and the
//! environment (not only the command line, which `ps` shows), public keys, issuer and audience,
//! and the empty secret or token refused at start. Drives the real binary over loopback; every
//! process is killed (by PID) when dropped.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use common::{free_port, ws};
use jsonwebtoken::{Algorithm, EncodingKey, Header, encode};
use serde_json::json;

struct Node {
    child: Child,
    port: u16,
}

impl Node {
    fn start(args: &[&str], env: &[(&str, &str)]) -> Node {
        let port = free_port();
        let mut cmd = ws();
        cmd.arg("pubsub_server")
            .args(args)
            .args(["--port", &port.to_string()])
            .env_remove("SOCKEYE_JWT_SECRET")
            .env_remove("SOCKEYE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut line = String::new();
        let mut stderr = BufReader::new(child.stderr.take().unwrap());
        stderr.read_line(&mut line).unwrap();
        assert!(line.contains("listening"), "{args:?}: {line}");
        // The rest of the log (a refresh's warning, say) goes to the test's output.
        std::thread::spawn(move || {
            for line in stderr.lines() {
                eprintln!("node: {}", line.unwrap_or_default());
            }
        });
        Node { child, port }
    }

    /// Whether a client with `token` is let in.
    fn admits(&self, token: &str) -> bool {
        let url = format!("ws://127.0.0.1:{}/?token={token}", self.port);
        runtime().block_on(async {
            sockeye::connect(url.as_str())
                .await
                .map_err(|e| eprintln!("{e}"))
                .is_ok()
        })
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `ws pubsub_server ARGS` that must refuse to start: its exit code and stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = ws();
    cmd.arg("pubsub_server")
        .args(args)
        .args(["--port", &free_port().to_string()]);
    cmd.env_remove("SOCKEYE_JWT_SECRET").env_remove("SOCKEYE_TOKEN");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.stdin(Stdio::null()).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn jwt(alg: Algorithm, key: &EncodingKey, claims: serde_json::Value) -> String {
    encode(&Header::new(alg), &claims, key).unwrap()
}

fn claims() -> serde_json::Value {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    json!({"sub": "alice", "exp": now + 600, "iss": "https://auth.test"})
}

fn temp(name: &str, contents: &[u8]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("ws-pubsub-tokens-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    path
}

#[test]
fn an_empty_secret_or_token_is_refused_at_start() {
    let empty = temp("empty", b"\n");
    let empty = empty.to_str().unwrap();
    for (args, env, says) in [
        (vec!["--token", ""], vec![], "--token is empty"),
        (vec!["--token-file", empty], vec![], "--token-file is empty"),
        (vec!["--jwt-secret", ""], vec![], "secret is empty"),
        (vec!["--jwt-secret-file", empty], vec![], "secret is empty"),
        (
            vec![],
            vec![("SOCKEYE_JWT_SECRET", "")],
            "SOCKEYE_JWT_SECRET: the JWT secret is empty",
        ),
        (vec![], vec![("SOCKEYE_TOKEN", "")], "SOCKEYE_TOKEN is empty"),
        (
            vec!["--jwt-issuer", "x"],
            vec![],
            "--jwt-issuer and --jwt-audience apply to JWTs",
        ),
        (vec!["--jwt-public-key", empty], vec![], "not a PEM public key"),
        (
            vec!["--token", "a", "--jwt-secret", "b"],
            vec![],
            "cannot be used with",
        ),
    ] {
        let (code, stderr) = refused(&args, &env);
        assert_eq!(code, Some(2), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?} {env:?}: {stderr}");
    }
    let help = refused(&["--help"], &[]).1
        + &String::from_utf8_lossy(&ws().args(["pubsub_server", "--help"]).output().unwrap().stdout);
    assert!(
        help.contains("--jwt-secret-file") && help.contains("in `ps`"),
        "{help}"
    );
}

#[test]
fn secrets_and_tokens_come_from_files_and_the_environment() {
    let key = EncodingKey::from_secret(b"s3cret");
    let good = jwt(Algorithm::HS256, &key, claims());
    let with_newline = jwt(Algorithm::HS256, &EncodingKey::from_secret(b"s3cret\n"), claims());
    let file = temp("secret", b"s3cret\n");
    let node = Node::start(&["--jwt-secret-file", file.to_str().unwrap()], &[]);
    assert!(node.admits(&good));
    assert!(
        !node.admits(&with_newline),
        "the file's trailing newline is not part of the secret"
    );
    drop(node);

    let node = Node::start(&[], &[("SOCKEYE_JWT_SECRET", "s3cret")]);
    assert!(node.admits(&good));
    assert!(!node.admits("nope"));
    drop(node);

    let file = temp("token", b"shared-token\n");
    let node = Node::start(&["--token-file", file.to_str().unwrap()], &[]);
    assert!(node.admits("shared-token"));
    assert!(!node.admits(""));
    drop(node);
    let node = Node::start(&[], &[("SOCKEYE_TOKEN", "t0k")]);
    assert!(node.admits("t0k"));
    assert!(!node.admits("x"));
}

#[test]
fn a_public_key_with_issuer_and_audience() {
    let keys = KEYS;
    let private = EncodingKey::from_ed_pem(&std::fs::read(format!("{keys}ed25519.pem")).unwrap()).unwrap();
    let public = format!("{keys}ed25519.pub.pem");
    let node = Node::start(
        &[
            "--jwt-public-key",
            &public,
            "--jwt-issuer",
            "https://auth.test",
            "--jwt-audience",
            "chat",
        ],
        &[],
    );
    let mut with_aud = claims();
    with_aud["aud"] = json!("chat");
    assert!(node.admits(&jwt(Algorithm::EdDSA, &private, with_aud.clone())));
    assert!(!node.admits(&jwt(Algorithm::EdDSA, &private, claims())), "no aud");
    with_aud["iss"] = json!("https://evil.test");
    assert!(
        !node.admits(&jwt(Algorithm::EdDSA, &private, with_aud)),
        "another issuer"
    );
}

/// A key set server on loopback: answers every request with `status` and the current body,
/// counting them. Runs on its own thread until the test process ends.
struct KeyServer {
    port: u16,
    body: std::sync::Arc<std::sync::Mutex<(u16, Vec<u8>)>>,
    requests: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl KeyServer {
    fn start(status: u16, body: Vec<u8>) -> KeyServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = KeyServer {
            port,
            body: std::sync::Arc::new(std::sync::Mutex::new((status, body))),
            requests: std::sync::Arc::default(),
        };
        let (body, requests) = (server.body.clone(), server.requests.clone());
        std::thread::spawn(move || {
            runtime().block_on(async move {
                use tokio::io::{AsyncReadExt, AsyncWriteExt};
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let (mut tcp, _) = listener.accept().await.unwrap();
                    let (body, requests) = (body.clone(), requests.clone());
                    tokio::spawn(async move {
                        let mut head = Vec::new();
                        let mut buf = [0; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                            match tcp.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        requests.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let (status, body) = body.lock().unwrap().clone();
                        let answer = format!(
                            "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            body.len()
                        );
                        let _ = tcp.write_all(answer.as_bytes()).await;
                        let _ = tcp.write_all(&body).await;
                        let _ = tcp.shutdown().await;
                    });
                }
            });
        });
        server
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/jwks.json", self.port)
    }

    fn serve(&self, body: Vec<u8>) {
        self.body.lock().unwrap().1 = body;
    }

    fn requests(&self) -> usize {
        self.requests.load(std::sync::atomic::Ordering::SeqCst)
    }
}

const KEYS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../sockeye-pubsub/tests/keys/");

/// The P-256 key `file` (private, to sign with) and its public half as a key set under `kid`.
fn p256(file: &str, kid: &str) -> (EncodingKey, Vec<u8>) {
    use jsonwebtoken::jwk::{Jwk, JwkSet};
    let key = EncodingKey::from_ec_pem(&std::fs::read(format!("{KEYS}{file}")).unwrap()).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.into());
    let set = serde_json::to_vec(&JwkSet { keys: vec![jwk] }).unwrap();
    (key, set)
}

fn signed(key: &EncodingKey, kid: &str) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.into());
    encode(&header, &claims(), key).unwrap()
}

#[test]
fn keys_from_a_jwks_url_follow_a_rotation_without_hammering_the_server() {
    let (a, set_a) = p256("p256.pem", "a");
    let (b, set_b) = p256("other-p256.pem", "b");
    let server = KeyServer::start(200, set_a);
    let node = Node::start(&["--jwks-url", &server.url()], &[]);
    assert_eq!(server.requests(), 1, "fetched at start");
    assert!(node.admits(&signed(&a, "a")));
    assert!(!node.admits(&signed(&b, "a")), "another key under kid a");

    // The provider rotates its key: a token with the new kid makes the node refetch at once.
    server.serve(set_b);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
    while !node.admits(&signed(&b, "b")) {
        assert!(
            std::time::Instant::now() < deadline,
            "the new kid was never taken"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(server.requests(), 2);
    assert!(!node.admits(&signed(&a, "a")), "the old key is gone");

    // Forged kids: within the window (30 s by default), no more fetches.
    for i in 0..30 {
        assert!(!node.admits(&signed(&a, &format!("forged-{i}"))));
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(server.requests(), 2, "forged kids within the window");
    assert!(node.admits(&signed(&b, "b")), "the good set is kept");
    drop(node);

    // With a 1 s window, a flood of forged kids for ~2.5 s: one fetch per window at most.
    let node = Node::start(&["--jwks-url", &server.url(), "--jwks-min-refetch", "1"], &[]);
    let before = server.requests();
    let start = std::time::Instant::now();
    let mut i = 0;
    while start.elapsed() < std::time::Duration::from_millis(2500) {
        assert!(!node.admits(&signed(&b, &format!("forged-{i}"))));
        i += 1;
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let refetches = server.requests() - before;
    assert!(i > 20, "{i} tokens");
    assert!(
        (1..=4).contains(&refetches),
        "{refetches} refetches for {i} forged kids"
    );
}

#[test]
fn a_jwks_url_that_fails_at_start_is_refused() {
    let (_, set) = p256("p256.pem", "a");
    let unreachable = format!("http://127.0.0.1:{}/jwks.json", free_port());
    let big = KeyServer::start(200, vec![b' '; 2 << 20]);
    let missing = KeyServer::start(404, set.clone());
    let empty = KeyServer::start(200, br#"{"keys":[]}"#.to_vec());
    let moved = KeyServer::start(301, set);
    for (url, says) in [
        (unreachable, "cannot connect to 127.0.0.1"),
        (big.url(), "larger than 1024 KiB"),
        (missing.url(), "answered 404 Not Found, not 200"),
        (empty.url(), "holds no RSA, P-256 or Ed25519"),
        (moved.url(), "redirects are not followed"),
        ("ftp://127.0.0.1/".into(), "not HTTP"),
    ] {
        let (code, stderr) = refused(&["--jwks-url", &url], &[]);
        assert_eq!(code, Some(2), "{url}: {stderr}");
        assert!(
            stderr.contains(says) && stderr.contains("--jwks-url"),
            "{url}: {stderr}"
        );
    }
    let (code, stderr) = refused(&["--jwks-refresh", "60"], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    let help = String::from_utf8_lossy(&ws().args(["pubsub_server", "--help"]).output().unwrap().stdout)
        .into_owned();
    assert!(
        help.contains("--jwks-url") && help.contains("[default: 300]"),
        "{help}"
    );
}
