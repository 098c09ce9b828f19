//! One WebSocket server per system, single-threaded (unless `BENCH_RUNTIME` says otherwise), for the
//! side-by-side benchmarks.
//!
//! `bench-server SYSTEM MODE PORT [N]` — SYSTEM: sockeye, tungstenite, fastwebsockets,
//! tokio-websockets, raw
//! (TCP, no WebSocket: echoes bytes, or writes pre-encoded frames) or encoded (raw after a real
//! handshake: the push server for client-side figures); MODE: `echo`, `push` (N
//! two-byte text messages "yo" to each client, then a close frame), `stream` (Sockeye only: a
//! cut-through echo with `recv_chunk` and `send_fragment`, each piece forwarded as it arrives;
//! the raw server echoes each read as it comes in any mode), `connect` (the raw server only: echo,
//! and close after echoing a read that starts with a close frame, as a WebSocket server closes
//! first), `deflate` (Sockeye's echo
//! with permessage-deflate; the other modes turn it off, as the peers' defaults do) or
//! `deflate-push` (N ~1 KiB JSON messages, compressed). `BENCH_TLS=DIR` serves wss:// with
//! `DIR/cert.pem` and `DIR/key.pem` (`bench-server gen-cert DIR` writes them); `BENCH_NODELAY=0`
//! leaves Nagle's algorithm on; `BENCH_DEFLATE_POOL=0` gives each Sockeye connection dedicated
//! compression states instead of the default shared pool; `BENCH_DEFLATE_LINGER_MS=N` sets the
//! pooled states' linger (0: given back at every wait); `BENCH_KEEPALIVE=0` turns Sockeye's
//! keepalive (and so its timer, but for a deflate connection's linger) off; `BENCH_TIMER=1` keeps one tokio timer pending (an hour
//! away) for the whole run, as a server with any timeout has, so that a peer without keepalive
//! pays what tokio's time driver costs at every park with a timer pending, as Sockeye's keepalive
//! does; `BENCH_READ_CHUNK=BYTES` sets Sockeye's `read_chunk_size` (for experiments; `run.sh`
//! keeps the default); `BENCH_RUNTIME` picks how the server uses threads: `current` (the default, one
//! current-thread runtime), `multi:N` (tokio's work-stealing runtime, N workers, one listener) or
//! `reuseport:N` (N threads, each with a current-thread runtime and a listener of its own on the
//! same port, `SO_REUSEPORT`).
//! Each system is used the way its documentation shows.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use sockeye_bench::{encode_frame, nodelay_from_env, server_handshake};
use sockeye_proto::frame::FrameHeader;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [command, dir] = &args[..]
        && command == "gen-cert"
    {
        return gen_cert(dir);
    }
    let [system, mode, port, rest @ ..] = &args[..] else {
        return Err("usage: bench-server SYSTEM MODE PORT [N] | bench-server gen-cert DIR".into());
    };
    let n: u64 = rest.first().map_or(Ok(1_000_000), |s| s.parse())?;
    let tls = match std::env::var_os("BENCH_TLS") {
        Some(dir) => {
            let dir = std::path::Path::new(&dir);
            Some(sockeye::tls::ServerTls::from_pem_files(
                dir.join("cert.pem"),
                dir.join("key.pem"),
            )?)
        }
        None => None,
    };
    let nodelay = nodelay_from_env();
    if let Some(runtime) = system.strip_prefix("sockeye-loop") {
        return loop_server(runtime, mode, port.parse()?, n, nodelay, tls);
    }
    let (system, mode) = (system.clone(), mode.clone());
    Layout::from_env()?.run(port.parse()?, move |listener| {
        let accepting = accept_loop(listener, system.clone(), mode.clone(), n, tls.clone(), nodelay);
        async move { accepting.await.map_err(|e| e.to_string()) }
    })
}

/// Sockeye's own loop (sockeye-loop): `sockeye-loop` on io_uring where allowed, else epoll;
/// `sockeye-loop-epoll` forced onto epoll; `sockeye-loop-broadcast` the fan-out server of uWS's
/// `broadcast_test` on the loop's topics (every client subscribed to "b", each message published
/// to all, the sender included, as `bench/peers/uws/broadcast.cpp` does with uWS topics;
/// permessage-deflate off, as there). One loop thread, or N with `BENCH_RUNTIME=reuseport:N`;
/// wss:// with `BENCH_TLS`.
fn loop_server(
    runtime: &str,
    mode: &str,
    port: u16,
    n: u64,
    nodelay: bool,
    tls: Option<sockeye::tls::ServerTls>,
) -> Result<(), Box<dyn std::error::Error>> {
    let (runtime, broadcast) = match runtime {
        "" => (sockeye_loop::Runtime::Auto, false),
        "-epoll" => (sockeye_loop::Runtime::Epoll, false),
        "-uring" => (sockeye_loop::Runtime::Uring, false),
        "-broadcast" => (sockeye_loop::Runtime::Auto, true),
        other => return Err(format!("unknown system sockeye-loop{other}").into()),
    };
    let threads = match Layout::from_env()? {
        Layout::Current => 1,
        Layout::PerCore(n) => n,
        Layout::Multi(_) => return Err("sockeye-loop has no work-stealing runtime: BENCH_RUNTIME=reuseport:N".into()),
    };
    let push = match mode {
        "echo" | "deflate" => None,
        "push" => Some(sockeye::Message::text("yo")),
        "deflate-push" => Some(sockeye::Message::text(sockeye_bench::json_document())),
        other => return Err(format!("sockeye-loop has no {other} mode").into()),
    };
    let mut config = sockeye_config(mode, nodelay);
    if broadcast {
        config.protocol.deflate = None;
    }
    let mut server = sockeye_loop::Server::new(config).threads(threads).runtime(runtime);
    if let Some(tls) = &tls {
        server = server.tls(&tls.acceptor());
    }
    let server = server.listen(("127.0.0.1", port), move || LoopBench {
        push: push.clone(),
        n,
        broadcast,
    })?;
    eprintln!("sockeye-loop on {:?}", server.runtime());
    println!("ready");
    server.wait()?;
    Ok(())
}

/// The loop's bench handler: echo, or push `n` copies of a message then close, as the tokio
/// server's modes do (sending again at each drain).
struct LoopBench {
    push: Option<sockeye::Message>,
    n: u64,
    /// Fan-out: subscribe each connection to "b", publish what it sends to all of them.
    broadcast: bool,
}

impl sockeye_loop::Handler for LoopBench {
    type Data = u64;

    fn open(&mut self, socket: &mut sockeye_loop::Socket<'_, u64>) {
        if self.broadcast {
            socket.subscribe("b");
        }
        if self.push.is_some() {
            *socket.data_mut() = self.n;
            self.drain(socket);
        }
    }

    fn message(&mut self, socket: &mut sockeye_loop::Socket<'_, u64>, message: sockeye::Message) {
        if self.broadcast {
            // To every subscriber, the sender included, encoded once (uWS's `app->publish`).
            let _ = socket.publish_to_all("b", message);
        } else if self.push.is_none() {
            socket.send(message);
        }
    }

    fn drain(&mut self, socket: &mut sockeye_loop::Socket<'_, u64>) {
        let Some(message) = &self.push else { return };
        while *socket.data() > 0 {
            *socket.data_mut() -= 1;
            if socket.send(message.clone()) != sockeye_loop::Sent::Queued {
                return;
            }
        }
        socket.close(None);
    }
}

/// How the server uses threads (`BENCH_RUNTIME`; the scaling comparison of issue 31 §4).
#[derive(Clone, Copy)]
enum Layout {
    /// `current` (the default): one current-thread runtime, as every other section runs.
    Current,
    /// `multi:N`: tokio's multi-thread runtime with N workers (work-stealing), one listener.
    Multi(usize),
    /// `reuseport:N`: N threads, each with its own current-thread runtime and its own listener on
    /// the same port (`SO_REUSEPORT`: the kernel spreads new connections over them by a hash of
    /// the addresses), as uWebSockets runs one event loop per core.
    PerCore(usize),
}

impl Layout {
    fn from_env() -> Result<Self, Box<dyn std::error::Error>> {
        let value = std::env::var("BENCH_RUNTIME").unwrap_or_else(|_| "current".into());
        let threads = |n: &str| match n.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "BENCH_RUNTIME={value}: the thread count must be a number ≥ 1"
            )),
        };
        Ok(match value.split_once(':') {
            None if value == "current" => Layout::Current,
            Some(("multi", n)) => Layout::Multi(threads(n)?),
            Some(("reuseport", n)) => Layout::PerCore(threads(n)?),
            _ => {
                return Err(
                    format!("BENCH_RUNTIME={value}: expected current, multi:N or reuseport:N").into(),
                );
            }
        })
    }

    /// Binds the listeners (one per runtime), prints "ready", and runs `serve` on each runtime:
    /// the first on the calling thread, any other on a thread of its own.
    fn run<F, Fut>(self, port: u16, serve: F) -> Result<(), Box<dyn std::error::Error>>
    where
        F: Fn(TcpListener) -> Fut + Send + Clone + 'static,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let current = || tokio::runtime::Builder::new_current_thread().enable_all().build();
        let runtimes = match self {
            Layout::Current => vec![current()?],
            Layout::Multi(workers) => vec![
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(workers)
                    .enable_all()
                    .build()?,
            ],
            Layout::PerCore(threads) => (0..threads).map(|_| current()).collect::<Result<_, _>>()?,
        };
        let mut bound = Vec::with_capacity(runtimes.len());
        for runtime in runtimes {
            // A listener registers with the runtime whose context is entered.
            let listener = {
                let _context = runtime.enter();
                self.bind(port)?
            };
            bound.push((runtime, listener));
        }
        println!("ready");
        let mut bound = bound.into_iter();
        let (first, listener) = bound.next().ok_or("no runtime")?;
        let others: Vec<_> = bound
            .map(|(runtime, listener)| {
                let serve = serve.clone();
                std::thread::spawn(move || runtime.block_on(serve(listener)))
            })
            .collect();
        first.block_on(serve(listener))?;
        for thread in others {
            thread.join().map_err(|_| "a server thread panicked")??;
        }
        Ok(())
    }

    /// A listener on 127.0.0.1:`port`, with `SO_REUSEPORT` when each thread has its own.
    fn bind(self, port: u16) -> std::io::Result<TcpListener> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        if let Layout::PerCore(_) = self {
            socket.set_reuseport(true)?;
        }
        socket.bind(([127, 0, 0, 1], port).into())?;
        socket.listen(1024)
    }
}

/// One accept loop on `listener`, on the runtime of the calling thread.
async fn accept_loop(
    listener: TcpListener,
    system: String,
    mode: String,
    n: u64,
    tls: Option<sockeye::tls::ServerTls>,
    nodelay: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("BENCH_TIMER").is_some_and(|v| v == "1") {
        tokio::spawn(tokio::time::sleep(Duration::from_secs(3600)));
    }
    if system == "sockeye" {
        return sockeye_server(listener, &mode, n, tls, nodelay).await;
    }
    if mode == "stream" && system != "raw" {
        return Err(format!("{system} has no streaming echo: it hands over whole frames").into());
    }
    if !matches!(
        system.as_str(),
        "tungstenite" | "fastwebsockets" | "tokio-websockets" | "raw" | "raw-sf" | "encoded"
    ) {
        return Err(format!("unknown system {system}").into());
    }
    let acceptor = tls.map(|t| t.acceptor());
    loop {
        let (tcp, _) = listener.accept().await?;
        tcp.set_nodelay(nodelay)?;
        let (system, mode, acceptor) = (system.clone(), mode.clone(), acceptor.clone());
        tokio::spawn(async move {
            match acceptor {
                Some(acceptor) => {
                    if let Ok(tls) = acceptor.accept(tcp).await {
                        serve_one(tls, &system, mode, n).await;
                    }
                }
                None => serve_one(tcp, &system, mode, n).await,
            }
        });
    }
}

/// Writes a self-signed certificate for `localhost` and 127.0.0.1 (`cert.pem`, `key.pem`) for the
/// wss:// scenarios.
fn gen_cert(dir: &str) -> Result<(), Box<dyn std::error::Error>> {
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])?;
    std::fs::create_dir_all(dir)?;
    let dir = std::path::Path::new(dir);
    std::fs::write(dir.join("cert.pem"), cert.cert.pem())?;
    std::fs::write(dir.join("key.pem"), cert.signing_key.serialize_pem())?;
    Ok(())
}

async fn serve_one<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    stream: S,
    system: &str,
    mode: String,
    n: u64,
) {
    // Each system's future in a box of its own size: unboxed, every connection's task would be as
    // large as the largest of them (and copied whole at each spawn), whichever system it serves.
    match system {
        "tungstenite" => Box::pin(tungstenite(stream, mode, n)).await,
        "fastwebsockets" => Box::pin(fastws(stream, mode, n)).await,
        "tokio-websockets" => Box::pin(tokio_websockets(stream, mode, n)).await,
        "raw" => Box::pin(raw(stream, mode, n, false)).await,
        "raw-sf" => Box::pin(raw_store_and_forward(stream)).await,
        _ => Box::pin(raw(stream, mode, n, true)).await,
    }
}

/// Sockeye's configuration for a mode (the tokio server's and the loop's).
fn sockeye_config(mode: &str, nodelay: bool) -> sockeye::Config {
    let mut config = sockeye::Config::default();
    if !mode.starts_with("deflate") {
        config.protocol.deflate = None;
    } else if std::env::var_os("BENCH_DEFLATE_POOL").is_some_and(|v| v == "0") {
        config.protocol.deflate =
            Some(sockeye::proto::extension::deflate::DeflateConfig::default().pool(None));
    } else if let Some(ms) = std::env::var("BENCH_DEFLATE_LINGER_MS").ok().and_then(|v| v.parse().ok()) {
        // Pooled states given back after this many ms without input (0: at every wait, as
        // before issue 31's linger), for A/B runs.
        config.protocol.deflate = Some(
            sockeye::proto::extension::deflate::DeflateConfig::default()
                .linger(std::time::Duration::from_millis(ms)),
        );
    }
    config.max_connections = 100_000;
    // The HTTP/2 scenarios hold thousands of idle WebSockets on one connection.
    config.http2_max_concurrent_streams = 20_000;
    config.tcp_nodelay = nodelay;
    // For experiments only (run.sh never sets it): Sockeye's read size, 64 KiB by default.
    if let Some(bytes) = std::env::var("BENCH_READ_CHUNK")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        config.read_chunk_size = bytes;
    }
    // For the instructions row without a timer: `BENCH_KEEPALIVE=0` turns keepalive off (the
    // peers in the run have none), so the difference is what the engine's one timer costs.
    if std::env::var_os("BENCH_KEEPALIVE").is_some_and(|v| v == "0") {
        config.protocol.keepalive_interval = None;
    }
    config
}

async fn sockeye_server(
    listener: TcpListener,
    mode: &str,
    n: u64,
    tls: Option<sockeye::tls::ServerTls>,
    nodelay: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let config = sockeye_config(mode, nodelay);
    let push = match mode {
        "push" => Some(sockeye::Message::text("yo")),
        "deflate-push" => Some(sockeye::Message::text(sockeye_bench::json_document())),
        _ => None,
    };
    let stream = mode == "stream";
    let mut server = sockeye::Server::from_listener(listener, config);
    if let Some(tls) = tls {
        server = server.with_tls(tls.acceptor());
    }
    server
        .serve(move |mut ws, _| {
            let push = push.clone();
            async move {
                if let Some(message) = push {
                    if ws
                        .send_batch(std::iter::repeat_n(message, n as usize))
                        .await
                        .is_ok()
                    {
                        let _ = ws.close(None).await;
                    }
                    return;
                }
                if stream {
                    // Cut-through: each piece of a message goes back out as a fragment as soon
                    // as it arrives (queued here, written by the next receive).
                    while let Some(Ok(item)) = ws.recv_chunk().await {
                        if let sockeye::Incoming::Chunk(piece) = item
                            && ws
                                .send_fragment(piece.kind, piece.data, piece.last)
                                .await
                                .is_err()
                        {
                            break;
                        }
                    }
                    return;
                }
                while let Some(Ok(m)) = ws.next().await {
                    if m.is_data() && ws.feed(m).await.is_err() {
                        break;
                    }
                }
            }
        })
        .await?;
    Ok(())
}

async fn tungstenite<S: AsyncRead + AsyncWrite + Unpin>(stream: S, mode: String, n: u64) {
    use tokio_tungstenite::tungstenite::Message;
    if let Ok(ws) = tokio_tungstenite::accept_async(stream).await {
        let is_data = |m: &Message| m.is_text() || m.is_binary();
        sink_server(ws, &mode, n, Message::text("yo"), is_data).await;
    }
}

/// As tokio-websockets' README writes its echo server: `ServerBuilder::accept`, then `send` each
/// text or binary message back (its masking and UTF-8 validation pick SIMD at run time on x86-64).
/// One setting from its `examples/echo_server.rs`: no limit on outgoing frame size, so that a
/// 16 MiB echo goes out as one frame, as the other servers send it (by default it cuts messages
/// into 4 MiB frames, which the large scenario's whole-message check refuses).
async fn tokio_websockets<S: AsyncRead + AsyncWrite + Unpin>(stream: S, mode: String, n: u64) {
    use tokio_websockets::{Config, Message, ServerBuilder};
    let accepted = ServerBuilder::new()
        .config(Config::default().frame_size(usize::MAX))
        .accept(stream)
        .await;
    if let Ok((_request, ws)) = accepted {
        let is_data = |m: &Message| m.is_text() || m.is_binary();
        sink_server(ws, &mode, n, Message::text("yo"), is_data).await;
    }
}

/// The push and the echo of the libraries whose socket is a `Sink` and a `Stream` of messages
/// (tokio-tungstenite, tokio-websockets), written as their documentation shows. Push: `feed`
/// queues without flushing (the `Sink` way to batch), `close` flushes and sends the close frame.
/// Echo: each data message is `send` back.
async fn sink_server<W, M, E>(mut ws: W, mode: &str, n: u64, yo: M, is_data: impl Fn(&M) -> bool)
where
    W: futures_util::Sink<M> + futures_util::Stream<Item = Result<M, E>> + Unpin,
    M: Clone,
{
    if mode == "push" {
        for _ in 0..n {
            if ws.feed(yo.clone()).await.is_err() {
                return;
            }
        }
        let _ = ws.close().await;
        while let Some(Ok(_)) = ws.next().await {}
        return;
    }
    while let Some(Ok(m)) = ws.next().await {
        if is_data(&m) && ws.send(m).await.is_err() {
            break;
        }
    }
}

async fn fastws<S: AsyncRead + AsyncWrite + Unpin>(mut tcp: S, mode: String, n: u64) {
    use fastwebsockets::{Frame, OpCode, Payload, Role, WebSocket};
    if server_handshake(&mut tcp).await.is_err() {
        return;
    }
    let mut ws = WebSocket::after_handshake(tcp, Role::Server);
    ws.set_auto_close(true);
    ws.set_auto_pong(true);
    ws.set_max_message_size(64 << 20);
    if mode == "push" {
        for _ in 0..n {
            if ws
                .write_frame(Frame::text(Payload::Borrowed(b"yo")))
                .await
                .is_err()
            {
                return;
            }
        }
        let _ = ws.write_frame(Frame::close(1000, b"")).await;
        let _ = ws.flush().await;
        return;
    }
    while let Ok(frame) = ws.read_frame().await {
        match frame.opcode {
            OpCode::Close => break,
            OpCode::Text | OpCode::Binary => {
                // A read frame keeps its mask key; a server must send unmasked frames.
                let reply = Frame::new(true, frame.opcode, None, frame.payload);
                // Flushed, as fastwebsockets asks over a buffered stream (TLS): without it the
                // last records of an echo can wait in the TLS stream while both ends wait to
                // read (the 16 MiB wss rows hung that way now and then).
                if ws.write_frame(reply).await.is_err() || ws.flush().await.is_err() {
                    break;
                }
            }
            _ => {}
        }
    }
}

/// The floor of any whole-message server in the large echo: raw TCP that reads each frame whole
/// (from its header's length) before writing it back unchanged, with no parsing beyond the header,
/// no unmasking and no copy but the read. What it loses against `raw` (which echoes each read as it
/// arrives) is what storing the message costs, whoever does it.
async fn raw_store_and_forward<S: AsyncRead + AsyncWrite + Unpin>(mut tcp: S) {
    let mut buf: Vec<u8> = Vec::with_capacity(256 << 10);
    loop {
        // A whole frame buffered? The engine's header parser gives its length (§5.2); a header it
        // refuses ends the connection, as any server would.
        let total = match FrameHeader::parse(&buf) {
            Ok(header) => header.map(|(h, header_len)| header_len + h.payload_len as usize),
            Err(_) => return,
        };
        if let Some(total) = total
            && buf.len() >= total
        {
            // Flushed, as `raw` is (TLS may hold the last records until a flush).
            if tcp.write_all(&buf[..total]).await.is_err() || tcp.flush().await.is_err() {
                return;
            }
            buf.drain(..total);
            continue;
        }
        if buf.capacity() - buf.len() < 64 << 10 {
            buf.reserve(total.map_or(256 << 10, |t| t - buf.len()));
        }
        match tcp.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Raw TCP; `handshake`: answer the opening handshake first ("encoded": the fastest possible
/// WebSocket push server, pre-encoded frames, for measuring clients).
async fn raw<S: AsyncRead + AsyncWrite + Unpin>(mut tcp: S, mode: String, n: u64, handshake: bool) {
    if handshake {
        if server_handshake(&mut tcp).await.is_err() {
            return;
        }
        // Let the client finish its handshake first: a client library that cannot take bytes
        // read past the 101 (fastwebsockets' `after_handshake`) would otherwise lose them.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if mode == "push" {
        // The same bytes a WebSocket server would send, encoded once.
        let frame = encode_frame(1, b"yo", false);
        let batch: Vec<u8> = frame.iter().copied().cycle().take(frame.len() * 16384).collect();
        let mut left = n as usize;
        while left > 0 {
            let count = left.min(16384);
            if tcp.write_all(&batch[..count * frame.len()]).await.is_err() {
                return;
            }
            left -= count;
        }
        let _ = tcp
            .write_all(&encode_frame(8, &1000u16.to_be_bytes(), false))
            .await;
        let _ = tcp.shutdown().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut [0u8; 64])).await;
        return;
    }
    // A small buffer first, the large one once a read fills it, neither zeroed (`read_buf` reads
    // into spare capacity): a connection that only connects, or echoes small messages, must not
    // pay for a large buffer (the baseline of the connect rows would otherwise do more work per
    // connection than any WebSocket server).
    let mut buf = Vec::with_capacity(4096);
    loop {
        buf.clear();
        match tcp.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(k) => {
                // Flushed: over TLS the last records written can wait in the stream's queue
                // until a flush (a no-op over TCP), and the client waits for them.
                if tcp.write_all(&buf[..k]).await.is_err() || tcp.flush().await.is_err() {
                    return;
                }
                if k == buf.capacity() && k < 256 << 10 {
                    buf.reserve_exact((256 << 10) - k);
                }
                if mode == "connect" && buf[0] == 0x88 {
                    // The client's close frame: close first, as a WebSocket server does.
                    let _ = tcp.shutdown().await;
                    return;
                }
            }
        }
    }
}
