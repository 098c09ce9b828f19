//! `ws connect` and `ws chat` used by a person at a terminal: driven through a pseudo-terminal
//! (openpty from nix, already a dependency of the package on unix; no tmux or expect needed), keys typed as bytes, the screen read back.
#![allow(clippy::unwrap_used)]
#![cfg(unix)]

mod common;

use std::fs::File;
use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Captured, Proc, Server, free_port};
use nix::pty::{Winsize, openpty};
use nix::sys::termios::{LocalFlags, tcgetattr};

const CTRL_C: &[u8] = b"\x03";
const CTRL_D: &[u8] = b"\x04";

/// A process whose stdin, stdout and stderr are the slave side of a pseudo-terminal.
struct Pty {
    proc: Proc,
    master: Arc<Mutex<File>>,
    screen: Captured,
}

impl Pty {
    fn spawn(program: &str, args: &[&str]) -> Pty {
        let size = Winsize {
            ws_row: 40,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = openpty(Some(&size), None).unwrap();
        let slave = File::from(pty.slave);
        let mut cmd = Command::new(program);
        cmd.args(args)
            .env("TERM", "xterm")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        let child = cmd.spawn().unwrap();
        // `cmd` holds the parent's copies of the slave: close them, or the master never ends.
        drop(cmd);
        let master = File::from(pty.master);
        let mut reader = master.try_clone().unwrap();
        let master = Arc::new(Mutex::new(master));
        let screen = Captured::default();
        let (sink, answer) = (screen.clone(), master.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 16 << 10];
            loop {
                match reader.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        let chunk = &buf[..n];
                        // The line editor asks where the cursor is: answer as a terminal does.
                        if chunk.windows(4).any(|w| w == b"\x1b[6n") {
                            let _ = answer.lock().unwrap().write_all(b"\x1b[1;1R");
                        }
                        sink.push(chunk);
                    }
                }
            }
        });
        Pty {
            proc: Proc {
                child,
                stdin: None,
                out: Captured::default(),
                err: Captured::default(),
            },
            master,
            screen,
        }
    }

    fn ws(args: &[&str]) -> Pty {
        Pty::spawn(env!("CARGO_BIN_EXE_ws"), args)
    }

    fn type_keys(&self, keys: &[u8]) {
        self.master.lock().unwrap().write_all(keys).unwrap();
    }

    /// Types a line and Enter.
    fn type_line(&self, line: &str) {
        self.type_keys(format!("{line}\r").as_bytes());
    }

    /// Waits until `what` was shown `times` times; fails the test with the screen otherwise.
    fn expect(&self, what: &str, times: usize, timeout: Duration) {
        assert!(
            self.screen.wait_for(what, times, timeout),
            "{what:?} not shown {times} time(s) within {timeout:?}; screen:\n{}",
            self.tail()
        );
    }

    fn tail(&self) -> String {
        let s = self.screen.text();
        let start = s.len().saturating_sub(3000);
        let start = (start..s.len()).find(|&i| s.is_char_boundary(i)).unwrap_or(0);
        s[start..].to_string()
    }

    /// The local flags of the terminal now (the master reports the slave's settings).
    fn local_flags(&self) -> LocalFlags {
        tcgetattr(&*self.master.lock().unwrap()).unwrap().local_flags
    }

    /// Waits for the exit: the code and the time it took.
    fn exit(&mut self, timeout: Duration) -> (Option<i32>, Duration) {
        let started = Instant::now();
        let status = self.proc.wait_exit(timeout);
        let took = started.elapsed();
        let Some(status) = status else {
            panic!("still running after {timeout:?}; screen:\n{}", self.tail());
        };
        (status.code(), took)
    }
}

#[test]
fn connect_prompts_sends_stops_starts_and_ctrl_d_exits_0() {
    let echo = Server::start(&["echo_server", "-q"]);
    let mut t = Pty::ws(&["connect", &echo.url("/")]);
    t.expect("ws> ", 1, Duration::from_secs(5));
    t.expect("connected: HTTP/1.1 101", 1, Duration::from_secs(5));
    assert!(
        !t.local_flags().contains(LocalFlags::ICANON),
        "the line editor has the terminal in raw mode"
    );
    t.type_line("hello there");
    t.expect("received: hello there", 1, Duration::from_secs(5));
    t.type_line("/stop");
    t.expect("closed: 1000", 1, Duration::from_secs(5));
    t.type_line("/start");
    t.expect("connected: HTTP/1.1 101", 2, Duration::from_secs(5));
    t.type_line("again");
    t.expect("received: again", 1, Duration::from_secs(5));
    t.type_keys(CTRL_D);
    let (code, took) = t.exit(Duration::from_secs(3));
    assert_eq!(code, Some(0), "Ctrl-D exits 0; screen:\n{}", t.tail());
    eprintln!("Ctrl-D: exit 0 after {took:?}");
}

#[test]
fn ctrl_c_exits_130_within_a_second_under_a_flood_and_in_backoff() {
    let push = Server::start_flood(&["push_server", "-q", "--send_msg", "yo"]);
    let mut t = Pty::ws(&["connect", "-q", &push.url("/")]);
    t.expect("received: yo", 200, Duration::from_secs(10));
    t.type_keys(CTRL_C);
    let (code, took) = t.exit(Duration::from_secs(5));
    eprintln!("Ctrl-C under a flood: exit {code:?} after {took:?}");
    assert_eq!(code, Some(130), "screen:\n{}", t.tail());
    assert!(
        took < Duration::from_secs(1),
        "Ctrl-C under a flood took {took:?}"
    );

    let nobody = format!("ws://127.0.0.1:{}/", free_port());
    let mut t = Pty::ws(&["connect", &nobody]);
    t.expect("reconnecting", 2, Duration::from_secs(5));
    t.type_keys(CTRL_C);
    let (code, took) = t.exit(Duration::from_secs(5));
    eprintln!("Ctrl-C in backoff: exit {code:?} after {took:?}");
    assert_eq!(code, Some(130), "screen:\n{}", t.tail());
    assert!(took < Duration::from_secs(1), "Ctrl-C in backoff took {took:?}");
}

#[test]
fn connect_reconnects_after_the_server_comes_back_and_drops_lines_typed_meanwhile() {
    let port = free_port();
    let echo = Server::start_on(&["echo_server", "-q"], port);
    let mut t = Pty::ws(&["connect", "-q", "--max_wait", "400", &echo.url("/")]);
    t.expect("connected: HTTP/1.1 101", 1, Duration::from_secs(5));
    t.type_line("first");
    t.expect("received: first", 1, Duration::from_secs(5));
    common::sigkill(echo.proc.pid());
    drop(echo);
    t.expect("reconnecting", 1, Duration::from_secs(5));
    t.type_line("typed while down");
    t.expect("not connected: line not sent", 1, Duration::from_secs(5));
    let echo = Server::start_on(&["echo_server", "-q"], port);
    t.expect("connected: HTTP/1.1 101", 2, Duration::from_secs(10));
    t.type_line("after");
    t.expect("received: after", 1, Duration::from_secs(5));
    // Give a wrongly kept line time to arrive.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !t.screen.text().contains("received: typed while down"),
        "a line typed while disconnected was sent later:\n{}",
        t.tail()
    );
    t.type_keys(CTRL_D);
    assert_eq!(t.exit(Duration::from_secs(3)).0, Some(0));
    drop(echo);
}

/// Runs `ws connect ARGS; stty -a` in a shell in the terminal, ends `ws` with `keys` (if any),
/// and returns stty's words.
fn stty_after(args: &[&str], keys: Option<&[u8]>, expected_code: i32) -> Vec<String> {
    let script = format!(
        "{} {}; echo \"ws exited $?\"; stty -a; echo end-of-stty",
        env!("CARGO_BIN_EXE_ws"),
        args.iter()
            .map(|a| format!("'{a}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut t = Pty::spawn("sh", &["-c", &script]);
    t.expect("ws> ", 1, Duration::from_secs(5));
    t.expect("connected: HTTP/1.1 101", 1, Duration::from_secs(5));
    if let Some(keys) = keys {
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !t.local_flags().contains(LocalFlags::ICANON),
            "raw mode while ws runs"
        );
        t.type_keys(keys);
    }
    t.expect(&format!("ws exited {expected_code}"), 1, Duration::from_secs(5));
    // Wait for a marker printed after stty: the shell can exit before the reader has taken
    // stty's last lines off the terminal, so "speed" alone showed a cut listing.
    t.expect("end-of-stty", 1, Duration::from_secs(5));
    assert_eq!(t.exit(Duration::from_secs(5)).0, Some(0));
    let screen = t.screen.text();
    let stty = &screen[screen.rfind("speed").unwrap()..screen.rfind("end-of-stty").unwrap()];
    stty.split(|c: char| c.is_whitespace() || c == ';')
        .map(String::from)
        .collect()
}

/// How `ws` ends: a name, its arguments, the keys typed (none: it ends by itself), the exit code.
type Case<'a> = (&'a str, Vec<&'a str>, Option<&'a [u8]>, i32);

#[test]
fn the_terminal_is_back_in_cooked_mode_after_connect_exits() {
    let echo = Server::start(&["echo_server", "-q"]);
    let refusing = Server::start(&["echo_server", "-q", "--http_authorization_header", "Bearer k"]);
    let (url, refused) = (echo.url("/"), refusing.url("/"));
    let cases: [Case<'_>; 3] = [
        ("Ctrl-D", vec!["connect", &url], Some(CTRL_D), 0),
        ("Ctrl-C", vec!["connect", &url], Some(CTRL_C), 130),
        // Ends by itself (refused: not reconnecting) while the editor waits for a line.
        ("refused", vec!["connect", &refused], None, 1),
    ];
    let mut failures = Vec::new();
    for (name, args, keys, code) in cases {
        let words = stty_after(&args, keys, code);
        for flag in ["icanon", "echo", "isig", "icrnl", "opost"] {
            if !words.iter().any(|w| w == flag) {
                let shown = words.iter().find(|w| w.trim_start_matches('-') == flag);
                failures.push(format!("after {name}: {flag} is off ({shown:?})"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn chat_prompts_with_the_user_name_and_shows_what_others_say() {
    // Not quiet: it says when each client has joined (subscribed).
    let relay = Server::start(&["broadcast_server"]);
    let listener = Proc::client(&["cat", "-n", &relay.url("/")]);
    let mut t = Pty::ws(&["chat", &relay.url("/"), "alice"]);
    t.expect("alice> ", 1, Duration::from_secs(5));
    // The listener and alice have joined before she speaks.
    assert!(
        relay.proc.err.wait_for("joined (", 2, Duration::from_secs(30)),
        "{}",
        relay.proc.err.text()
    );
    t.type_line("hi everyone");
    assert!(
        listener
            .out
            .wait_for("alice: hi everyone\n", 1, Duration::from_secs(5)),
        "the other client heard: {:?}",
        listener.out.text()
    );
    // Bob's line waits in his stdin until he is connected.
    let bob = Proc::client(&["cat", &relay.url("/")]);
    bob.stdin
        .as_ref()
        .unwrap()
        .write_all(b"bob: hello alice\n")
        .unwrap();
    t.expect("bob: hello alice", 1, Duration::from_secs(5));
    t.type_keys(CTRL_D);
    assert_eq!(t.exit(Duration::from_secs(3)).0, Some(0), "screen:\n{}", t.tail());
}
