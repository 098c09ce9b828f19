//! The web variant's third node: `ws pubsub_server` itself, a process of its own, as an
//! operator runs it (issue 39: the system under test is the shipped server beside library
//! hubs). It reaches the engine through the node's proxies like the others, keeps its port
//! across crashes (a crash is `kill -9`; the restart serves the same port), and is ready when
//! its `/readyz` answers 200 (its backplane connected). Only the web clients use it: it has no
//! hub in this process, so the Rust subscribers and publishers go to the other nodes.
//!
//! The binary: `CHAOS_WS` if set (the test command and `scripts/chaos.sh` set it to the
//! release build), else `ws` in the test binary's target directory, debug or release.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, sleep, timeout};

use super::web::API_TOKEN;

/// How long a start may take to answer on its port (the engine may be down: it then exits,
/// and the heal starts it again).
const START_BOUND: Duration = Duration::from_secs(10);

/// A `ws pubsub_server` node: its port, what it is started with, and the process while it is up.
pub(crate) struct Process {
    port: u16,
    args: Vec<String>,
    child: Mutex<Option<Child>>,
}

/// The `ws` binary to run.
fn binary() -> PathBuf {
    if let Some(path) = std::env::var_os("CHAOS_WS").filter(|p| !p.is_empty()) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    // target/debug/deps/chaos-… → target/debug/ws, or else target/release/ws.
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the target directory");
    let debug = profile.join("ws");
    let release = profile.with_file_name("release").join("ws");
    [&debug, &release]
        .into_iter()
        .find(|ws| ws.exists())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "the web variant runs `ws pubsub_server` as a node, and neither {} nor {} is \
                 built: run `cargo build -p sockeye-cli --bin ws` first, or set CHAOS_WS to a \
                 `ws` binary",
                debug.display(),
                release.display()
            )
        })
}

impl Process {
    /// A node on a free loopback port, served by `ws pubsub_server` over the backplane `url`
    /// with this history (`--history-len`, `--history-age`), not started yet.
    pub(crate) fn new(url: &str, history_len: usize, history_age: Duration) -> Process {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let args = [
            "pubsub_server",
            "--port",
            &port.to_string(),
            "--backplane",
            url,
            "--history-len",
            &history_len.to_string(),
            "--history-age",
            &history_age.as_secs().to_string(),
            "--api-token",
            API_TOKEN,
        ]
        .iter()
        .map(ToString::to_string)
        .collect();
        Process {
            port,
            args,
            child: Mutex::new(None),
        }
    }

    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Whether the process is running.
    pub(crate) fn running(&self) -> bool {
        let mut child = self.child.lock().unwrap();
        match child.as_mut().map(Child::try_wait) {
            Some(Ok(None)) => true,
            Some(_) => {
                *child = None;
                false
            }
            None => false,
        }
    }

    /// Starts it unless it runs; whether it runs and answers on its port (within
    /// [`START_BOUND`]; one that exited, the engine being down, is started again next time).
    pub(crate) async fn start(&self) -> bool {
        if !self.running() {
            let verbose = std::env::var("CHAOS_LOG").is_ok_and(|v| !v.is_empty());
            let spawned = Command::new(binary())
                .args(&self.args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(if verbose { Stdio::inherit() } else { Stdio::null() })
                .spawn();
            match spawned {
                Ok(child) => *self.child.lock().unwrap() = Some(child),
                Err(e) => panic!("ws pubsub_server does not start: {e}"),
            }
        }
        let until = Instant::now() + START_BOUND;
        while Instant::now() < until {
            if !self.running() {
                return false;
            }
            if get(self.port, "/healthz").await == Some(200) {
                return true;
            }
            sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Whether its backplane is connected (`/readyz` answers 200).
    pub(crate) async fn ready(&self) -> bool {
        self.running() && get(self.port, "/readyz").await == Some(200)
    }

    /// `kill -9`, and waited for (its port free for the restart).
    pub(crate) fn crash(&self) {
        if let Some(mut child) = self.child.lock().unwrap().take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.crash();
    }
}

/// The status of `GET path` on the loopback port, within a second; `None` when it does not
/// answer.
async fn get(port: u16, path: &str) -> Option<u16> {
    let ask = async {
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        tcp.write_all(request.as_bytes()).await.ok()?;
        let mut head = [0u8; 12];
        tcp.read_exact(&mut head).await.ok()?;
        // "HTTP/1.1 200"
        std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
    };
    timeout(Duration::from_secs(1), ask).await.ok().flatten()
}
