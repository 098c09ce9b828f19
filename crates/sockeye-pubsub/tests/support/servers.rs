//! Real Redis and NATS servers for the tests, one per test: started in a directory of their own
//! on a loopback port, stopped by their own PID when dropped (never by name), restartable on the
//! same port and directory (to test what survives a restart). `bash scripts/install-backplanes.sh`
//! installs both; a missing binary fails the test with that advice.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Which server, and how it keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// redis-server; `persistent`: an append-only file, so history survives a restart.
    Redis { persistent: bool },
    /// nats-server; `jetstream`: with JetStream (file storage in its directory).
    Nats { jetstream: bool },
}

/// A running (or stopped) server.
pub(crate) struct BackplaneServer {
    kind: Kind,
    /// 0 until the first start.
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// More command-line arguments (redis-server: after the defaults, so they override them).
    extra: Vec<String>,
}

static NEXT_DIR: AtomicU64 = AtomicU64::new(0);

/// The path of an installed server binary (or redis-cli); panics with the install advice.
/// `/usr/local/bin` first: `scripts/install-backplanes.sh` puts a nats-server there where the
/// system's is too old.
pub(crate) fn binary(name: &str) -> String {
    for dir in ["/usr/local/bin", "/usr/bin", "/usr/sbin"] {
        let p = format!("{dir}/{name}");
        if std::path::Path::new(&p).exists() {
            if name == "nats-server" {
                static CHECKED: std::sync::Once = std::sync::Once::new();
                CHECKED.call_once(|| check_nats_version(&p));
            }
            return p;
        }
    }
    panic!("{name} is not installed: these tests need a real one; run `bash scripts/install-backplanes.sh`");
}

/// Panics unless `path` is nats-server 2.10 or later: 2.9's JetStream consumers skip
/// publications still in the stream, which the checker would report as the backplane's.
fn check_nats_version(path: &str) {
    let out = Command::new(path).arg("--version").output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    // "nats-server: v2.10.27"
    let version: Vec<u32> = text
        .trim()
        .rsplit('v')
        .next()
        .unwrap_or("")
        .split('.')
        .map_while(|n| n.parse().ok())
        .collect();
    assert!(
        version.as_slice() >= [2, 10].as_slice(),
        "{path} is {:?}; these tests need nats-server 2.10 or later (2.9's JetStream consumers skip \
         publications): run `bash scripts/install-backplanes.sh` as root",
        text.trim()
    );
}

/// A new empty directory under the system's temporary one.
pub(crate) fn fresh_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sockeye-backplane-test-{}-{}-{:x}",
        std::process::id(),
        NEXT_DIR.fetch_add(1, Ordering::Relaxed),
        Instant::now().elapsed().as_nanos() ^ u128::from(std::process::id())
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

impl BackplaneServer {
    /// Starts one.
    pub(crate) fn start(kind: Kind) -> BackplaneServer {
        BackplaneServer::start_with(kind, &[])
    }

    /// Starts one with more command-line arguments (redis-server: `--appendfsync everysec`,
    /// `--replicaof 127.0.0.1 PORT`, `--cluster-enabled yes`; nats-server: `--cluster`,
    /// `--routes`; they override the defaults).
    pub(crate) fn start_with(kind: Kind, extra: &[&str]) -> BackplaneServer {
        let mut s = BackplaneServer {
            kind,
            port: 0,
            dir: fresh_dir(),
            child: None,
            extra: extra.iter().map(|a| (*a).to_owned()).collect(),
        };
        s.restart();
        s
    }

    /// Its data directory.
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Whether it runs (not killed).
    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Its port.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// The URL a backplane connects to.
    pub(crate) fn url(&self) -> String {
        match self.kind {
            Kind::Redis { .. } => format!("redis://127.0.0.1:{}", self.port),
            Kind::Nats { .. } => format!("nats://127.0.0.1:{}", self.port),
        }
    }

    /// Sends it a signal by its own PID (`STOP`: it hangs with its connections open; `CONT`).
    pub(crate) fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().unwrap().id().to_string();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{signal} {pid}");
    }

    /// Stops it: SIGKILL to its own PID (a crash, not a clean shutdown).
    pub(crate) fn kill(&mut self) {
        if self.child.is_some() {
            self.signal("CONT"); // a stopped process dies of SIGKILL all the same; be tidy
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again (or for the first time) on the same port and directory, and waits until
    /// it answers.
    pub(crate) fn restart(&mut self) {
        self.kill();
        match self.kind {
            Kind::Redis { persistent } => self.start_redis(persistent),
            Kind::Nats { jetstream } => self.start_nats(jetstream),
        }
    }

    /// Starts it again on the same port with an empty directory: its history is lost (a new
    /// epoch).
    pub(crate) fn restart_wiped(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
        self.dir = fresh_dir();
        self.restart();
    }

    fn start_redis(&mut self, persistent: bool) {
        // Redis cannot pick its own port: a free one is found here; another test's server may
        // take it first, so a first start that fails is tried again on another.
        for _ in 0..5 {
            let first = self.port == 0;
            let port = if first {
                // Held together, so that the two differ; a cluster node's bus port is picked
                // anew with each try too (the one taken may be it).
                let client = TcpListener::bind("127.0.0.1:0").unwrap();
                let bus = TcpListener::bind("127.0.0.1:0").unwrap();
                if let Some(i) = self.extra.iter().position(|a| a == "--cluster-port")
                    && let Some(value) = self.extra.get_mut(i + 1)
                {
                    *value = bus.local_addr().unwrap().port().to_string();
                }
                client.local_addr().unwrap().port()
            } else {
                self.port
            };
            let log = std::fs::File::create(self.dir.join("redis.log")).unwrap();
            let mut child = Command::new(binary("redis-server"))
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", ""])
                .args(["--appendonly", if persistent { "yes" } else { "no" }])
                .args(["--appendfsync", "always", "--dir"])
                .arg(&self.dir)
                .args(&self.extra)
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if pong(port) {
                    self.port = port;
                    self.child = Some(child);
                    return;
                }
                if let Some(status) = child.try_wait().unwrap() {
                    let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                    assert!(
                        first && log.contains("in use"),
                        "redis-server exited ({status}):\n{log}"
                    );
                    break; // the port was taken meanwhile: another one
                }
                if Instant::now() > deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("redis-server does not answer PING on {port}");
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server found no free port in 5 tries");
    }

    fn start_nats(&mut self, jetstream: bool) {
        // `-p -1`: the server picks a free port and says which in its log.
        let port = if self.port == 0 {
            "-1".to_owned()
        } else {
            self.port.to_string()
        };
        let mut cmd = Command::new(binary("nats-server"));
        cmd.args(["-a", "127.0.0.1", "-p", &port]);
        if jetstream {
            cmd.arg("-js").arg("-sd").arg(&self.dir);
        }
        cmd.args(&self.extra);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The log is read to its end, so that the server never blocks on it.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut log = Vec::new();
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some((_, addr)) = line.split_once("Listening for client connections on ") {
                    let _ = tx.send(Ok(addr
                        .trim()
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.parse::<u16>().ok())));
                }
                log.push(line);
            }
            let _ = tx.send(Err(log.join("\n")));
        });
        self.child = Some(child);
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(Ok(Some(port))) => {
                assert!(
                    self.port == 0 || self.port == port,
                    "restarted on {port}, not {}",
                    self.port
                );
                self.port = port;
            }
            other => panic!("nats-server did not start: {other:?}"),
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "nats-server does not listen on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Whether a Redis server answers PING on `port`.
fn pong(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let mut buf = [0; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

impl Drop for BackplaneServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
