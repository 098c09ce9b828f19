//! `ws curl`, `ws httpd`, `ws dnslookup`, `ws gzip` and `ws gunzip`, run as a user would, against
//! each other, Python's http.server and the system's gzip. Loopback only.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{text, ws};

/// A fresh directory, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "ws-http-tools-{}-{}-{name}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(path)
    }

    fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write(&self, name: &str, content: &[u8]) -> PathBuf {
        let path = self.join(name);
        std::fs::write(&path, content).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Bytes that are not text: every byte value, then pseudo-random ones.
fn binary(len: usize) -> Vec<u8> {
    let mut x: u32 = 0x1234_5678;
    (0..len)
        .map(|i| {
            if i < 256 {
                i as u8
            } else {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            }
        })
        .collect()
}

/// A child process killed when dropped, and its port.
struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `ws httpd ARGS` on a port of its choosing (--port 0), once it says where it listens.
fn httpd(args: &[&str]) -> Server {
    let mut child = ws()
        .arg("httpd")
        .args(args)
        .args(["--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert!(line.starts_with("ws httpd: listening on http"), "{line}");
    let port = line.trim().rsplit(':').next().unwrap().parse().unwrap();
    Server(child, port)
}

/// A Python HTTP server (the script prints its port first), stderr silenced.
fn python(script: &str, args: &[&str]) -> Server {
    let mut child = Command::new("python3")
        .args(["-c", script])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("python3 is needed by these tests");
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("python said {line:?}"));
    Server(child, port)
}

/// `python3 -m http.server` serving `dir`, on a port it picks (0) and prints.
fn python_static(dir: &Path) -> Server {
    const SCRIPT: &str = "
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
print(server.server_address[1], flush=True)
server.serve_forever()
";
    python(SCRIPT, &[dir.to_str().unwrap()])
}

/// A Python server that answers every request with its method, path, Content-Type and body.
fn python_echo() -> Server {
    const SCRIPT: &str = "
import http.server
class Echo(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get('Content-Length', 0)))
        head = '%s %s\\n%s\\n%s\\n' % (self.command, self.path, self.headers.get('Content-Type', ''),
                                   self.headers.get('X-Extra', ''))
        out = head.encode() + body
        self.send_response(200)
        self.send_header('Content-Length', str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(('127.0.0.1', 0), Echo)
print(server.server_address[1], flush=True)
server.serve_forever()
";
    python(SCRIPT, &[])
}

/// Runs `ws ARGS` (in `dir` if given) with `input` on stdin, killed after 15 s.
fn run_in(dir: Option<&Path>, args: &[&str], input: &[u8]) -> Output {
    let mut command = ws();
    command
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    let mut child = command.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let output = bounded(child, &format!("ws {args:?}"));
    let _ = writer.join();
    output
}

fn run(args: &[&str]) -> Output {
    run_in(None, args, b"")
}

/// Waits for `child` at most 15 s, reading its output meanwhile.
fn bounded(mut child: Child, what: &str) -> Output {
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stdout.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = stderr.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within 15 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        text(&out.stderr)
    );
}

fn fails_with(out: &Output, code: i32, says: &str) {
    assert_eq!(out.status.code(), Some(code), "stderr: {}", text(&out.stderr));
    let stderr = text(&out.stderr);
    assert!(stderr.contains(says), "expected {says:?} in {stderr:?}");
}

#[test]
fn curl_against_python_http_server() {
    let dir = TempDir::new("python");
    let bin = binary(300_000);
    dir.write("page.txt", b"hello from python\n");
    dir.write("data.bin", &bin);
    let server = python_static(&dir.0);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", server.1);

    let out = run(&["curl", &url("/page.txt")]);
    ok(&out);
    assert_eq!(out.stdout, b"hello from python\n");

    let out = run(&["curl", &url("/data.bin")]);
    ok(&out);
    assert!(
        out.stdout == bin,
        "binary body differs ({} bytes)",
        out.stdout.len()
    );

    let out = run(&["curl", "-I", &url("/data.bin")]);
    ok(&out);
    let head = text(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.") && head.contains(" 200 ok"), "{head}");
    assert!(head.contains("content-length: 300000"), "{head}");

    let out = run(&["curl", &url("/missing.txt")]);
    fails_with(&out, 1, "404 Not Found");
    assert_eq!(text(&out.stderr).lines().count(), 1, "{}", text(&out.stderr));

    let saved = TempDir::new("saved");
    let target = saved.join("copy.bin");
    let out = run(&["curl", "-o", target.to_str().unwrap(), &url("/data.bin")]);
    ok(&out);
    assert!(out.stdout.is_empty());
    assert!(std::fs::read(&target).unwrap() == bin);

    // A failed status leaves no file behind.
    let target = saved.join("not-there.txt");
    let out = run(&["curl", "-o", target.to_str().unwrap(), &url("/nope")]);
    fails_with(&out, 1, "404");
    assert!(!target.exists());

    let out = run_in(Some(&saved.0), &["curl", "-O", &url("/data.bin")], b"");
    ok(&out);
    assert!(std::fs::read(saved.join("data.bin")).unwrap() == bin);
}

#[test]
fn curl_against_httpd() {
    let dir = TempDir::new("httpd");
    let bin = binary(200_000);
    let page = "<p>compress me</p>\n".repeat(2000);
    dir.write("data.bin", &bin);
    dir.write("page.html", page.as_bytes());
    dir.write("notes.txt", b"notes\n");
    std::fs::create_dir(dir.join("sub")).unwrap();
    dir.write("sub/index.html", b"<h1>sub index</h1>\n");
    std::fs::create_dir(dir.join("bare")).unwrap();
    dir.write("bare/x y.txt", b"x\n");
    // A secret next to the root, and a link from inside the root to it.
    let outside = TempDir::new("outside");
    outside.write("secret.txt", b"secret\n");
    let root = dir.join("root");
    std::fs::create_dir(&root).unwrap();
    for name in ["data.bin", "page.html", "notes.txt"] {
        std::fs::copy(dir.join(name), root.join(name)).unwrap();
    }
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::copy(dir.join("sub/index.html"), root.join("sub/index.html")).unwrap();
    std::fs::create_dir(root.join("bare")).unwrap();
    std::fs::copy(dir.join("bare/x y.txt"), root.join("bare/x y.txt")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root.join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(root.join("notes.txt"), root.join("inside.txt")).unwrap();

    let server = httpd(&["--root", root.to_str().unwrap()]);
    let url = |path: &str| format!("http://127.0.0.1:{}{path}", server.1);

    let out = run(&["curl", &url("/data.bin")]);
    ok(&out);
    assert!(
        out.stdout == bin,
        "binary body differs ({} bytes)",
        out.stdout.len()
    );
    let out = run(&["curl", &url("/page.html")]);
    ok(&out);
    assert_eq!(text(&out.stdout), page);

    // --compress: the server gzips (the header says so), curl decodes.
    let out = run(&["curl", "-v", "--compress", &url("/page.html")]);
    ok(&out);
    assert_eq!(text(&out.stdout), page);
    let verbose = text(&out.stderr).to_ascii_lowercase();
    assert!(verbose.contains("> accept-encoding: gzip"), "{verbose}");
    assert!(verbose.contains("< content-encoding: gzip"), "{verbose}");
    assert!(verbose.contains("< http/1.1 200 ok"), "{verbose}");
    let out = run(&["curl", "--compress", &url("/data.bin")]);
    ok(&out);
    assert!(out.stdout == bin);
    // Without --compress nothing is gzipped.
    let out = run(&["curl", "-v", &url("/page.html")]);
    assert!(
        !text(&out.stderr)
            .to_ascii_lowercase()
            .contains("content-encoding")
    );

    // HEAD: status, type and length, no body.
    let out = run(&["curl", "-I", &url("/page.html")]);
    ok(&out);
    let head = text(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200 ok"), "{head}");
    assert!(
        head.contains(&format!("content-length: {}", page.len())),
        "{head}"
    );
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(!head.contains("compress me"));
    let out = run(&["curl", "-I", &url("/data.bin")]);
    assert!(text(&out.stdout).contains("content-type: application/octet-stream"));

    // Directories: index.html, else a listing; a symlink inside the root is followed.
    let out = run(&["curl", "-L", &url("/sub")]);
    ok(&out);
    assert_eq!(text(&out.stdout), "<h1>sub index</h1>\n");
    let out = run(&["curl", &url("/bare/")]);
    ok(&out);
    assert!(
        text(&out.stdout).contains("<a href=\"x%20y.txt\">x y.txt</a>"),
        "{}",
        text(&out.stdout)
    );
    let out = run(&["curl", &url("/bare/x%20y.txt")]);
    assert_eq!(out.stdout, b"x\n");
    let out = run(&["curl", &url("/inside.txt")]);
    assert_eq!(out.stdout, b"notes\n");

    // Never outside the root: dot segments (plain, percent-encoded) and symlinks out.
    for path in [
        "/../outside/secret.txt",
        "/%2e%2e/%2e%2e/etc/passwd",
        "/sub/%2E%2E/%2E%2E/etc/passwd",
        "/..%2f..%2fetc%2fpasswd",
        "/escape.txt",
    ] {
        let out = run(&["curl", &url(path)]);
        fails_with(&out, 1, "403 Forbidden");
        assert!(!text(&out.stdout).contains("secret") && !text(&out.stdout).contains("root:"));
    }
    let out = run(&["curl", &url("/nothing-here")]);
    fails_with(&out, 1, "404 Not Found");
    let out = run(&["curl", "-d", "x=1", &url("/notes.txt")]);
    fails_with(&out, 1, "405 Method Not Allowed");

    // -L through `ws httpd -L --redirect_url` to this server.
    let target = url("/notes.txt");
    let redirector = httpd(&["-L", "--redirect_url", &target]);
    let from = format!("http://127.0.0.1:{}/anything", redirector.1);
    let out = run(&["curl", "-L", &from]);
    ok(&out);
    assert_eq!(out.stdout, b"notes\n");
    let out = run(&["curl", "-I", &from]);
    ok(&out);
    let head = text(&out.stdout).to_ascii_lowercase();
    assert!(head.contains("301 moved permanently") && head.contains(&format!("location: {target}")));
    let out = run(&["curl", "-L", "--max-redirects", "0", &from]);
    fails_with(&out, 1, "--max-redirects 0");
    assert!(out.stdout.is_empty());
}

#[test]
fn curl_posts_form_data_and_multipart() {
    let server = python_echo();
    let url = format!("http://127.0.0.1:{}/submit?x=1", server.1);

    let out = run(&["curl", "-d", "a=1", "-d", "b=two", "-H", "X-Extra: yes", &url]);
    ok(&out);
    assert_eq!(
        text(&out.stdout),
        "POST /submit?x=1\napplication/x-www-form-urlencoded\nyes\na=1&b=two"
    );
    let out = run(&["curl", "-d", "{}", "-H", "Content-Type: application/json", &url]);
    assert_eq!(text(&out.stdout), "POST /submit?x=1\napplication/json\n\n{}");

    // --data-binary: the file's bytes as they are; --compress_request gzips them on the way.
    let dir = TempDir::new("data-binary");
    let payload = binary(3000);
    let file = dir.write("payload.bin", &payload);
    let at_file = format!("@{}", file.display());
    let out = run(&["curl", "--data-binary", &at_file, &url]);
    ok(&out);
    let head = b"POST /submit?x=1\napplication/x-www-form-urlencoded\n\n";
    assert!(out.stdout.starts_with(head) && out.stdout[head.len()..] == payload[..]);
    let out = run(&["curl", "--data-binary", &at_file, "--compress_request", &url]);
    ok(&out);
    let mut unzipped = Vec::new();
    std::io::Read::read_to_end(
        &mut flate2::read::GzDecoder::new(&out.stdout[head.len()..]),
        &mut unzipped,
    )
    .unwrap();
    assert!(unzipped == payload, "the server got the gzip of the file");

    let dir = TempDir::new("form");
    let upload = dir.write("up load.bin", &binary(1000));
    let out = run(&[
        "curl",
        "-F",
        "name=value",
        "-F",
        &format!("file=@{}", upload.display()),
        &url,
    ]);
    ok(&out);
    let body = out.stdout;
    let head_end = body.iter().position(|&b| b == b'\n').unwrap() + 1;
    let rest = &body[head_end..];
    let type_end = rest.iter().position(|&b| b == b'\n').unwrap();
    let content_type = text(&rest[..type_end]);
    let boundary = content_type
        .strip_prefix("multipart/form-data; boundary=")
        .unwrap_or_else(|| panic!("{content_type}"));
    let mut expected = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"name\"\r\n\r\nvalue\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up load.bin\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    expected.extend_from_slice(&binary(1000));
    expected.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let sent = &rest[type_end + 2..]; // after the type line and the empty X-Extra line
    assert!(sent == expected.as_slice(), "multipart body:\n{}", text(sent));
}

#[test]
fn https_with_httpd_tls() {
    let dir = TempDir::new("tls");
    let cert =
        rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string(), "localhost".to_string()]).unwrap();
    let cert_file = dir.write("cert.pem", cert.cert.pem().as_bytes());
    let key_file = dir.write("key.pem", cert.signing_key.serialize_pem().as_bytes());
    let root = dir.join("www");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("hello.txt"), b"over tls\n").unwrap();
    let server = httpd(&[
        "--root",
        root.to_str().unwrap(),
        "--tls",
        "--cert-file",
        cert_file.to_str().unwrap(),
        "--key-file",
        key_file.to_str().unwrap(),
    ]);
    let url = format!("https://127.0.0.1:{}/hello.txt", server.1);
    let ca = cert_file.to_str().unwrap();

    let out = run(&["curl", "--ca-file", ca, &url]);
    ok(&out);
    assert_eq!(out.stdout, b"over tls\n");
    let out = run(&["curl", &url]);
    fails_with(&out, 1, "certificate");
    assert!(out.stdout.is_empty());
    let out = run(&["curl", "--verify_none", &url]);
    ok(&out);
    assert_eq!(out.stdout, b"over tls\n");
    let localhost = format!("https://localhost:{}/hello.txt", server.1);
    let out = run(&["curl", "--ca-file", ca, &localhost]);
    ok(&out);

    // --ciphers is honoured: a TLS 1.2 ECDSA suite works with this ECDSA key, an RSA one cannot.
    let out = run(&[
        "curl",
        "--ca-file",
        ca,
        "--ciphers",
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        &url,
    ]);
    ok(&out);
    let out = run(&[
        "curl",
        "--ca-file",
        ca,
        "--ciphers",
        "ECDHE-RSA-AES128-GCM-SHA256",
        &url,
    ]);
    fails_with(&out, 1, "TLS handshake");
    // Plain HTTP to the TLS port is no success either.
    let out = run(&["curl", &format!("http://127.0.0.1:{}/hello.txt", server.1)]);
    assert_ne!(out.status.code(), Some(0));
}

#[test]
fn gzip_and_gunzip_interoperate_with_the_system_gzip() {
    for tool in ["gzip", "gunzip"] {
        let found = Command::new(tool).arg("--version").output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "the system's {tool} is needed by this test: install it (apt-get install gzip)"
        );
    }
    let dir = TempDir::new("gzip");
    let mut data = "some text that compresses well\n".repeat(5000).into_bytes();
    data.extend_from_slice(&binary(100_000));
    let original = dir.write("data.bin", &data);
    let path = |p: &Path| p.to_str().unwrap().to_string();

    // ws gzip -> system gunzip.
    ok(&run(&["gzip", &path(&original)]));
    let gz = dir.join("data.bin.gz");
    assert!(std::fs::metadata(&gz).unwrap().len() < data.len() as u64);
    assert_eq!(std::fs::read(&original).unwrap(), data, "the input is kept");
    let system = Command::new("gunzip").arg("-c").arg(&gz).output().unwrap();
    assert!(system.status.success());
    assert!(system.stdout == data);
    // The system's gzip -l sees the stored name.
    let system = Command::new("gunzip")
        .args(["-N", "-l"])
        .arg(&gz)
        .output()
        .unwrap();
    assert!(
        text(&system.stdout).contains("data.bin"),
        "{}",
        text(&system.stdout)
    );

    // No overwriting without -f.
    let out = run(&["gzip", &path(&original)]);
    fails_with(&out, 1, "-f");
    ok(&run(&["gzip", "-f", &path(&original)]));

    // System gzip -> ws gunzip; the output exists until -f.
    let other = dir.write("other.txt", &data);
    let status = Command::new("gzip").arg("-k").arg(&other).status().unwrap();
    assert!(status.success());
    let out = run(&["gunzip", &path(&dir.join("other.txt.gz"))]);
    fails_with(&out, 1, "already exists");
    std::fs::remove_file(&other).unwrap();
    ok(&run(&["gunzip", &path(&dir.join("other.txt.gz"))]));
    assert!(std::fs::read(&other).unwrap() == data);

    // Streams: stdin to stdout both ways, several gzip members in one file.
    let out = run_in(None, &["gzip"], &data);
    ok(&out);
    let mut system = Command::new("gunzip")
        .arg("-c")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = system.stdin.take().unwrap();
    let compressed = out.stdout.clone();
    let writer = std::thread::spawn(move || stdin.write_all(&compressed));
    let decoded = system.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(decoded.stdout == data);
    let mut two = out.stdout.clone();
    two.extend_from_slice(&std::fs::read(dir.join("other.txt.gz")).unwrap());
    let out = run_in(None, &["gunzip", "-"], &two);
    ok(&out);
    assert_eq!(out.stdout.len(), 2 * data.len());
    let out = run(&["gunzip", "-c", &path(&gz)]);
    ok(&out);
    assert!(out.stdout == data);

    // Not gzip: exit 1, and no half-written output left.
    let junk = dir.write("junk.gz", b"this is not gzip data at all");
    let out = run(&["gunzip", &path(&junk)]);
    fails_with(&out, 1, "not gzip data");
    assert!(!dir.join("junk").exists());
}

#[test]
fn dnslookup_resolves_localhost_and_fails_clearly() {
    let out = run(&["dnslookup", "localhost"]);
    ok(&out);
    let lines = text(&out.stdout);
    assert!(lines.lines().any(|l| l == "127.0.0.1" || l == "::1"), "{lines}");
    let out = run(&["dnslookup", "127.0.0.1"]);
    assert_eq!(text(&out.stdout), "127.0.0.1\n");
    // A name no resolver can encode (a label longer than 63 bytes): refused before any query.
    let bad = format!("{}.invalid", "x".repeat(70));
    let out = run(&["dnslookup", &bad]);
    fails_with(&out, 1, "cannot resolve");
    assert_eq!(text(&out.stderr).lines().count(), 1);
}

/// Sends SIGINT (what Ctrl-C sends) to a child of this test, once it listens for it.
fn interrupt(child: &Child) {
    common::sigint(child.id());
}

#[test]
fn httpd_writes_its_pidfile_and_ctrl_c_stops_it_with_0() {
    let dir = TempDir::new("pidfile");
    let pidfile = dir.join("httpd.pid");
    let mut server = httpd(&[
        "--root",
        dir.0.to_str().unwrap(),
        "--pidfile",
        pidfile.to_str().unwrap(),
    ]);
    let written = std::fs::read_to_string(&pidfile).unwrap();
    assert_eq!(written.trim(), server.0.id().to_string());
    interrupt(&server.0);
    let start = Instant::now();
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "httpd ignored Ctrl-C");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(0));
}

#[test]
fn curl_transfer_timeout_and_ctrl_c() {
    // A server that accepts (the kernel does) and never answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://127.0.0.1:{}/", silent.local_addr().unwrap().port());
    let start = Instant::now();
    let out = run(&["curl", "--transfer-timeout", "1", &url]);
    fails_with(&out, 1, "--transfer-timeout");
    assert!(start.elapsed() < Duration::from_secs(5));

    let child = ws()
        .args(["curl", &url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    interrupt(&child);
    let out = bounded(child, "interrupted curl");
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
}

#[test]
fn bad_usage_exits_2() {
    let dir = TempDir::new("usage");
    let plain = dir.write("plain.txt", b"x");
    let plain = plain.to_str().unwrap();
    let cases: &[&[&str]] = &[
        &["curl"],
        &["curl", "ftp://127.0.0.1/x"],
        &["curl", "127.0.0.1/no-scheme"],
        &["curl", "--max-redirects", "many", "http://127.0.0.1:1/"],
        &["curl", "--connect-timeout", "0", "http://127.0.0.1:1/"],
        &["curl", "--ciphers", "RC4-MD5", "https://127.0.0.1:1/"],
        &["curl", "-d", "a=1", "-F", "b=2", "http://127.0.0.1:1/"],
        &["curl", "-I", "-d", "a=1", "http://127.0.0.1:1/"],
        &["curl", "-H", "no colon here", "http://127.0.0.1:1/"],
        &["curl", "-F", "novalue", "http://127.0.0.1:1/"],
        &["curl", "-F", "f=@/nonexistent/file", "http://127.0.0.1:1/"],
        &["curl", "--ca-file", "/nonexistent/ca.pem", "https://127.0.0.1:1/"],
        &["curl", "--cert-file", plain, "https://127.0.0.1:1/"],
        &["curl", "-O", "http://127.0.0.1:1/"],
        &["curl", "-O", "-o", "x", "http://127.0.0.1:1/a"],
        &["httpd", "--port", "http"],
        &["httpd", "--root", "/nonexistent/dir"],
        &["httpd", "--root", plain],
        &["httpd", "-L"],
        &["httpd", "--tls"],
        &[
            "httpd",
            "--tls",
            "--cert-file",
            "/nonexistent/c.pem",
            "--key-file",
            "/nonexistent/k.pem",
        ],
        &["dnslookup"],
        &["dnslookup", "--bogus", "localhost"],
        &["gzip", "/nonexistent/file"],
        &["gzip", "--bogus"],
        &["gunzip", plain],
        &["gunzip", "/nonexistent/file.gz"],
    ];
    for args in cases {
        let out = run(args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "ws {args:?}: stderr {}",
            text(&out.stderr)
        );
        assert!(!out.stderr.is_empty(), "ws {args:?} said nothing");
    }
}
