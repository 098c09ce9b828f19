//! Real Redis and NATS servers for the tests: started on a free loopback port in a directory of
//! their own, stopped by their PID when dropped (never by name), restartable on the same port and
//! directory (to test what survives a restart). `bash scripts/install-backplanes.sh` installs
//! both; a missing binary fails the test with that advice.
#![allow(dead_code, clippy::unwrap_used)]

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which server, and how it keeps its data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// redis-server; `persistent`: append-only file, so history survives a restart.
    Redis { persistent: bool },
    /// nats-server; `jetstream`: with JetStream (file storage in its directory).
    Nats { jetstream: bool },
}

/// A running (or stopped) server.
pub(crate) struct BackplaneServer {
    kind: Kind,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

fn binary(name: &str) -> String {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = format!("{dir}/{name}");
        if std::path::Path::new(&p).exists() {
            return p;
        }
    }
    panic!(
        "{name} is not installed: run `bash scripts/install-backplanes.sh` (the README's test command does)"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl BackplaneServer {
    /// Starts one on a free port.
    pub(crate) fn start(kind: Kind) -> BackplaneServer {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "sockeye-backplane-{}-{port}-{:x}",
            std::process::id(),
            rand_suffix()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = BackplaneServer {
            kind,
            port,
            dir,
            child: None,
        };
        s.restart();
        s
    }

    /// The URL a backplane connects to.
    pub(crate) fn url(&self) -> String {
        match self.kind {
            Kind::Redis { .. } => format!("redis://127.0.0.1:{}", self.port),
            Kind::Nats { .. } => format!("nats://127.0.0.1:{}", self.port),
        }
    }

    /// Stops it (SIGKILL to its own PID: a crash, not a clean shutdown).
    pub(crate) fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again (or for the first time) on the same port and directory, and waits until
    /// it accepts connections.
    pub(crate) fn restart(&mut self) {
        self.kill();
        let mut cmd = match self.kind {
            Kind::Redis { persistent } => {
                let mut c = Command::new(binary("redis-server"));
                c.args([
                    "--port",
                    &self.port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                ])
                .args(["--appendonly", if persistent { "yes" } else { "no" }])
                .args(["--appendfsync", "always", "--dir"])
                .arg(&self.dir);
                c
            }
            Kind::Nats { jetstream } => {
                let mut c = Command::new(binary("nats-server"));
                c.args(["-a", "127.0.0.1", "-p", &self.port.to_string()]);
                if jetstream {
                    c.arg("-js").arg("-sd").arg(&self.dir);
                }
                c
            }
        };
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{:?} did not start on port {}",
                self.kind,
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        // Redis loads its append-only file before it answers; NATS starts JetStream just after
        // it listens: give both a moment.
        std::thread::sleep(Duration::from_millis(200));
    }

    /// Wipes its data directory (the next restart starts with no history: a new epoch).
    pub(crate) fn wipe(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
        std::fs::create_dir_all(&self.dir).unwrap();
    }
}

impl Drop for BackplaneServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish()
}
