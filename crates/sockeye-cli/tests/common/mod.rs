//! Helpers shared by signals.rs, terminal.rs and usage.rs: processes started by the tests, their
//! output captured by threads, every wait bounded, every process killed (by PID) when dropped.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::Read;
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The binary under test.
pub(crate) fn ws() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ws"))
}

/// The binary for a flooding server: a release build when `WS_FLOOD_BIN` names one.
pub(crate) fn flood_bin() -> String {
    std::env::var("WS_FLOOD_BIN")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_ws").to_string())
}

/// A free port on 127.0.0.1 (bound to port 0, then released).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Everything a pipe delivered so far, filled by a thread.
#[derive(Clone, Default)]
pub(crate) struct Captured(Arc<Mutex<Vec<u8>>>, Option<Arc<AtomicBool>>);

impl Captured {
    pub(crate) fn drain(mut from: impl Read + Send + 'static) -> Captured {
        let ended = Arc::new(AtomicBool::new(false));
        let captured = Captured(Arc::default(), Some(Arc::clone(&ended)));
        let sink = captured.clone();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                match from.read(&mut buf) {
                    Ok(0) | Err(_) => return ended.store(true, Ordering::Release),
                    Ok(n) => sink.0.lock().unwrap().extend_from_slice(&buf[..n]),
                }
            }
        });
        captured
    }

    /// Waits until the pipe's thread has read it to its end (at once for one filled by
    /// [`push`](Self::push)); false at the deadline.
    pub(crate) fn wait_end(&self, timeout: Duration) -> bool {
        let Some(ended) = &self.1 else { return true };
        let deadline = Instant::now() + timeout;
        while !ended.load(Ordering::Acquire) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        true
    }

    /// Appends bytes read elsewhere (a pseudo-terminal's master).
    pub(crate) fn push(&self, bytes: &[u8]) {
        self.0.lock().unwrap().extend_from_slice(bytes);
    }

    pub(crate) fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().clone()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    pub(crate) fn text(&self) -> String {
        text(&self.0.lock().unwrap())
    }

    pub(crate) fn count(&self, pattern: &str) -> usize {
        self.text().matches(pattern).count()
    }

    /// Waits until `pattern` occurs at least `times` times; false at the deadline.
    pub(crate) fn wait_for(&self, pattern: &str, times: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.count(pattern) >= times {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits until at least `n` bytes arrived; false at the deadline.
    pub(crate) fn wait_len(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.len() < n {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// A started process, its piped stdout and stderr captured; killed by PID when dropped.
pub(crate) struct Proc {
    pub(crate) child: Child,
    pub(crate) stdin: Option<ChildStdin>,
    pub(crate) out: Captured,
    pub(crate) err: Captured,
}

impl Proc {
    /// Spawns `cmd` as configured (stdio not set by the caller: stdin piped, stdout and stderr
    /// piped and captured).
    pub(crate) fn spawn(mut cmd: Command) -> Proc {
        Proc::spawn_with(&mut cmd)
    }

    pub(crate) fn spawn_with(cmd: &mut Command) -> Proc {
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let out = child.stdout.take().map(Captured::drain).unwrap_or_default();
        let err = child.stderr.take().map(Captured::drain).unwrap_or_default();
        Proc {
            child,
            stdin,
            out,
            err,
        }
    }

    /// A `ws` client: stdin piped (kept open), stdout and stderr captured.
    pub(crate) fn client(args: &[&str]) -> Proc {
        let mut cmd = ws();
        cmd.args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Proc::spawn_with(&mut cmd)
    }

    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for the exit; `None` at the deadline (the process is left running).
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Waits for the exit and for the output pipes to be read to their end (bounded).
    pub(crate) fn finish(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let status = self.wait_exit(timeout)?;
        // The reader threads get what is left in the pipes: their end comes once the process
        // and any child holding them have exited (bounded: a child could keep them open).
        self.out.wait_end(Duration::from_secs(5));
        self.err.wait_end(Duration::from_secs(5));
        Some(status)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends SIGINT to `pid` as a user's Ctrl-C would: with kill(2) itself, so no process is
/// started inside a timed window; once the process catches it (a `ws` just started may not have
/// installed its handler yet, and would die of the signal instead of closing).
pub(crate) fn sigint(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !catches_sigint(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    signal(pid, nix::sys::signal::Signal::SIGINT).unwrap_or_else(|e| panic!("kill -INT {pid}: {e}"));
}

/// Whether `pid` has a handler for SIGINT (signal 2: bit 1 of `SigCgt` in its
/// `/proc/PID/status`, proc(5)).
fn catches_sigint(pid: u32) -> bool {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return false;
    };
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigCgt:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & 0b10 != 0)
}

/// Sends SIGKILL to `pid` (gone already is fine).
pub(crate) fn sigkill(pid: u32) {
    let _ = signal(pid, nix::sys::signal::Signal::SIGKILL);
}

fn signal(pid: u32, signal: nix::sys::signal::Signal) -> nix::Result<()> {
    let pid = i32::try_from(pid).map_err(|_| nix::errno::Errno::ESRCH)?;
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal)
}

/// A server sub-command on a port; returned once it says it is listening.
pub(crate) struct Server {
    pub(crate) proc: Proc,
    pub(crate) port: u16,
}

impl Server {
    /// `ws ARGS --port P` on a free port.
    pub(crate) fn start(args: &[&str]) -> Server {
        Server::start_bin(env!("CARGO_BIN_EXE_ws"), args, free_port())
    }

    /// The flooding server's binary (`WS_FLOOD_BIN` or the one under test).
    pub(crate) fn start_flood(args: &[&str]) -> Server {
        Server::start_bin(&flood_bin(), args, free_port())
    }

    pub(crate) fn start_on(args: &[&str], port: u16) -> Server {
        Server::start_bin(env!("CARGO_BIN_EXE_ws"), args, port)
    }

    pub(crate) fn start_bin(bin: &str, args: &[&str], port: u16) -> Server {
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .args(["--port", &port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut proc = Proc::spawn_with(&mut cmd);
        let up = proc.err.wait_for("listening", 1, Duration::from_secs(10));
        if !up {
            let status = proc.child.try_wait().unwrap();
            panic!(
                "{args:?} on port {port} did not start ({status:?}): {}",
                proc.err.text()
            );
        }
        Server { proc, port }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("ws://127.0.0.1:{}{path}", self.port)
    }
}

/// Percentiles of durations, in milliseconds, for a report line.
pub(crate) fn distribution(times: &mut [Duration]) -> String {
    if times.is_empty() {
        return "no samples".into();
    }
    times.sort();
    let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize].as_secs_f64() * 1e3;
    format!(
        "n={} min={:.1} ms p50={:.1} ms p90={:.1} ms p99={:.1} ms max={:.1} ms",
        times.len(),
        at(0.0),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    )
}
