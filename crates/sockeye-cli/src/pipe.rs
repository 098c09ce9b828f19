//! `cat`, `listen` and `chat`: websocat-style pipes between stdin/stdout and connections.
//!
//! Text mode (the default): each stdin line is a text message (a line that is not UTF-8 is an
//! error that names `-b`); each message received is printed on one line, escaped so that a peer
//! cannot drive the terminal, or as it is with `--raw`. Binary mode (`-b`): stdin is read in
//! chunks, each sent as a binary message, and every message received is written to stdout byte
//! for byte with nothing added — `ws cat -b URL < file` through an echo server gives the file
//! back. At the end of stdin the connection is closed (1000) and what is still in flight is
//! printed until the peer's reply (`-n`: keep receiving; `-E`: exit at once).

use std::io::{BufWriter, Write};
use std::pin::pin;

use bytes::BytesMut;
use futures_util::{FutureExt, StreamExt};
use sockeye::{CloseCode, CloseFrame, Message, TransportStream, WebSocket, WebSocketWriter};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader, Stdin};
use tokio::sync::mpsc;

use crate::cli::{CatArgs, ChatArgs, ListenArgs};
use crate::client::{abnormal_close, connect, drain_silently, going_away};
use crate::console::Console;
use crate::failure::Failure;
use crate::interrupt::{self, CLOSE_GRACE};
use crate::opts::PipeOpts;
use crate::output::{errln, escape, stdout_error};
use crate::ready::Ready;
use crate::tls::bind;

type Ws = WebSocket<TransportStream>;

/// Messages taken from the socket before stdout is flushed and the other inputs looked at.
const BATCH: usize = 256;
/// Bytes read from stdin per binary message.
const CHUNK: usize = 64 << 10;
/// Clients `listen` keeps waiting for their turn; more are turned away with 1013.
const WAITING: usize = 16;

/// Connects to a URL and pipes.
pub(crate) async fn cat(args: CatArgs) -> Result<(), Failure> {
    let (ws, _) = connect(&args.client).await?;
    let mut input = Input::new(&args.pipe, "");
    let mut output = Output::new(&args.pipe);
    match pump(ws, &args.pipe, &mut input, &mut output).await? {
        Ended::Interrupted => Err(Failure::interrupted()),
        Ended::Failed(failure) => Err(failure),
        _ => Ok(()),
    }
}

/// A chat through a broadcast server: lines typed (with editing and a prompt on a terminal) go
/// out as "USER: line", and what others say is printed above the prompt.
pub(crate) async fn chat(args: ChatArgs) -> Result<(), Failure> {
    let (ws, _) = connect(&args.client).await?;
    let mut console = Console::start(&format!("{}> ", args.user));
    let (mut writer, mut reader) = ws.split();
    let mut stop = pin!(interrupt::requested());
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => {
                going_away(&mut writer, &mut reader).await;
                return Err(Failure::interrupted());
            }
            line = console.next_line() => match line {
                Some(line) => writer.send(Message::text(format!("{}: {line}", args.user))).await?,
                None => {
                    writer.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await?;
                    while let Some(Ok(m)) = reader.next().await {
                        if m.is_data() {
                            console.print(escape(m.as_payload()))?;
                        }
                    }
                    return Ok(());
                }
            },
            item = reader.next() => match item {
                Some(Ok(m)) if m.is_data() => console.print(escape(m.as_payload()))?,
                Some(Ok(Message::Close(frame))) => {
                    if let Some(failure) = abnormal_close(frame.as_ref()) {
                        return Err(failure);
                    }
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(e.into()),
                None => return Ok(()),
            },
        }
    }
}

/// Serves clients over HTTP/1.1 or HTTP/2, like every server sub-command: one at a time (the
/// others wait their turn, connected), all at once with `--broadcast`, or only the first with
/// `--oneshot`. Stdin goes to the client being served (to every client with `--broadcast`).
pub(crate) async fn listen(args: ListenArgs) -> Result<(), Failure> {
    let server = bind(&args.server, |_| {}, "listen").await?;
    let shutdown = server.shutdown_handle();
    let (tx, mut arrivals) = mpsc::channel::<(Ws, std::net::SocketAddr)>(WAITING);
    let serving = tokio::spawn(server.serve(move |mut ws, peer| {
        let tx = tx.clone();
        async move {
            if let Err(refused) = tx.try_send((ws, peer)) {
                (ws, _) = refused.into_inner();
                let busy = CloseFrame::new(CloseCode(1013), "ws listen is busy: try again later");
                let _ = ws.close(Some(busy)).await;
            }
        }
    }));
    let opts = &args.pipe;
    let mut input = Input::new(opts, "");
    let mut output = Output::new(opts);
    let result = if args.broadcast {
        broadcast(&mut arrivals, opts, &mut input, &mut output).await
    } else {
        one_at_a_time(&mut arrivals, &args, &mut input, &mut output).await
    };
    // Later clients find the channel closed and are turned away; those still waiting for their
    // turn are told the server is going away rather than left to find the socket closed.
    arrivals.close();
    let mut ready = Ready::all();
    while let Some((mut ws, _)) = ready.next(|| arrivals.try_recv().ok()) {
        let frame = CloseFrame::new(CloseCode::GOING_AWAY, "ws listen is done");
        let _ = tokio::time::timeout(CLOSE_GRACE, ws.close(Some(frame))).await;
    }
    // A graceful stop, not an abort: over HTTP/2 the connection's task still has the stream's
    // last frames (the close, END_STREAM) to write.
    shutdown.shutdown();
    let _ = serving.await;
    result
}

async fn one_at_a_time(
    arrivals: &mut mpsc::Receiver<(Ws, std::net::SocketAddr)>,
    args: &ListenArgs,
    input: &mut Input,
    output: &mut Output,
) -> Result<(), Failure> {
    loop {
        let Some((ws, peer)) = interrupt::unless_interrupted(arrivals.recv())
            .await
            .or(Ok::<_, Failure>(None))?
        else {
            return Ok(());
        };
        errln!("ws listen: {peer} connected");
        if args.oneshot {
            // Those who come later are turned away at once (1013), not kept waiting.
            arrivals.close();
        }
        let ended = pump(ws, &args.pipe, input, output).await?;
        errln!("ws listen: {peer} left");
        match ended {
            Ended::Interrupted | Ended::MaxMessages => return Ok(()),
            _ if args.oneshot => return Ok(()),
            // Nothing more to send and nobody asked to keep listening.
            _ if input.ended && !args.pipe.no_close => return Ok(()),
            _ => {}
        }
    }
}

/// Every client at once: stdin to all, every client's messages to stdout.
async fn broadcast(
    arrivals: &mut mpsc::Receiver<(Ws, std::net::SocketAddr)>,
    opts: &PipeOpts,
    input: &mut Input,
    output: &mut Output,
) -> Result<(), Failure> {
    let (heard_tx, mut heard) = mpsc::channel::<Message>(256);
    let mut writers: Vec<(std::net::SocketAddr, WebSocketWriter<TransportStream>)> = Vec::new();
    let mut stop = pin!(interrupt::requested());
    let mut received = 0u64;
    let close_all = |writers: &mut Vec<(std::net::SocketAddr, WebSocketWriter<TransportStream>)>, code| {
        let writers = std::mem::take(writers);
        async move {
            for (_, mut w) in writers {
                let _ = tokio::time::timeout(CLOSE_GRACE, w.close(Some(CloseFrame::new(code, "")))).await;
            }
        }
    };
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => {
                close_all(&mut writers, CloseCode::GOING_AWAY).await;
                return Ok(());
            }
            arrival = arrivals.recv() => {
                let Some((ws, peer)) = arrival else { return Ok(()) };
                errln!("ws listen: {peer} connected ({} connected)", writers.len() + 1);
                let (writer, mut reader) = ws.split();
                writers.push((peer, writer));
                let heard_tx = heard_tx.clone();
                tokio::spawn(async move {
                    while let Some(Ok(m)) = reader.next().await {
                        if m.is_data() && heard_tx.send(m).await.is_err() {
                            break;
                        }
                    }
                    errln!("ws listen: {peer} left");
                });
            }
            message = input.next(), if !input.ended => match message? {
                Some(message) => {
                    let mut kept = Vec::with_capacity(writers.len());
                    for (peer, mut w) in writers.drain(..) {
                        if w.send(message.clone()).await.is_ok() {
                            kept.push((peer, w));
                        }
                    }
                    writers = kept;
                }
                None if opts.no_close => {}
                None => {
                    close_all(&mut writers, CloseCode::NORMAL).await;
                    return Ok(());
                }
            },
            Some(m) = heard.recv() => {
                output.message(&m)?;
                received += 1;
                let mut ready = Ready::all();
                while let Some(Some(m)) = ready.next(|| heard.recv().now_or_never()) {
                    if opts.max_messages.is_some_and(|n| received >= n) {
                        break;
                    }
                    output.message(&m)?;
                    received += 1;
                }
                output.flush()?;
                if opts.max_messages.is_some_and(|n| received >= n) {
                    close_all(&mut writers, CloseCode::NORMAL).await;
                    return Ok(());
                }
            }
        }
    }
}

/// How one connection's pipe ended.
enum Ended {
    /// The peer closed (or the closing handshake we started completed).
    Closed,
    /// `--max-messages` were printed.
    MaxMessages,
    /// Ctrl-C.
    Interrupted,
    /// The peer closed with an error code, or the connection failed.
    Failed(Failure),
}

/// Pipes one connection until it ends. Stdin is read only while a connection is served.
async fn pump(ws: Ws, opts: &PipeOpts, input: &mut Input, output: &mut Output) -> Result<Ended, Failure> {
    let (mut writer, mut reader) = ws.split();
    let mut stop = pin!(interrupt::requested());
    let mut received = 0u64;
    let mut closing = false;
    let mut failure = None;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => {
                output.flush()?;
                going_away(&mut writer, &mut reader).await;
                return Ok(Ended::Interrupted);
            }
            message = input.next(), if !closing && !input.ended => match message? {
                Some(message) => {
                    if let Err(e) = writer.send(message).await {
                        return Ok(Ended::Failed(e.into()));
                    }
                }
                None if opts.no_close => {}
                None if opts.exit_on_eof => {
                    let _ = tokio::time::timeout(CLOSE_GRACE, writer.close(Some(CloseFrame::new(CloseCode::NORMAL, "")))).await;
                    return Ok(Ended::Closed);
                }
                None => {
                    closing = true;
                    let _ = writer.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                }
            },
            item = reader.next() => {
                let mut item = item;
                let mut ready = Ready::after_first(BATCH);
                loop {
                    match item {
                        Some(Ok(m)) if m.is_data() => {
                            output.message(&m)?;
                            received += 1;
                            if opts.max_messages.is_some_and(|n| received >= n) {
                                output.flush()?;
                                let _ = writer.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                                // What is still in flight is not printed: exactly N messages.
                                drain_silently(&mut reader).await;
                                return Ok(Ended::MaxMessages);
                            }
                        }
                        Some(Ok(Message::Close(frame))) => failure = abnormal_close(frame.as_ref()),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            output.flush()?;
                            return Ok(Ended::Failed(e.into()));
                        }
                        None => {
                            output.flush()?;
                            return Ok(failure.map_or(Ended::Closed, Ended::Failed));
                        }
                    }
                    match ready.next(|| reader.next().now_or_never()) {
                        Some(next) => item = next,
                        None => break,
                    }
                }
                output.flush()?;
            }
        }
    }
}

/// Stdin as messages.
struct Input {
    stdin: BufReader<Stdin>,
    binary: bool,
    prefix: String,
    line: Vec<u8>,
    chunk: BytesMut,
    line_number: u64,
    ended: bool,
}

impl Input {
    fn new(opts: &PipeOpts, prefix: &str) -> Input {
        Input {
            stdin: BufReader::with_capacity(CHUNK, tokio::io::stdin()),
            binary: opts.binary,
            prefix: prefix.to_string(),
            line: Vec::new(),
            chunk: BytesMut::new(),
            line_number: 0,
            ended: false,
        }
    }

    /// The next message, `None` at the end of stdin. Cancel-safe: a partial line or chunk stays
    /// in the buffers and the next call goes on from there.
    async fn next(&mut self) -> Result<Option<Message>, Failure> {
        if self.binary {
            if self.chunk.capacity() < CHUNK {
                self.chunk.reserve(CHUNK);
            }
            let n = self
                .stdin
                .read_buf(&mut self.chunk)
                .await
                .map_err(|e| Failure::new(format!("cannot read stdin: {e}")))?;
            if n == 0 {
                self.ended = true;
                return Ok(None);
            }
            return Ok(Some(Message::binary(self.chunk.split().freeze())));
        }
        let n = self
            .stdin
            .read_until(b'\n', &mut self.line)
            .await
            .map_err(|e| Failure::new(format!("cannot read stdin: {e}")))?;
        if n == 0 && self.line.is_empty() {
            self.ended = true;
            return Ok(None);
        }
        self.line_number += 1;
        let mut line = std::mem::take(&mut self.line);
        if line.last() == Some(&b'\n') {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
        }
        let line = String::from_utf8(line).map_err(|_| {
            Failure::new(format!(
                "stdin line {} is not UTF-8 text: use -b to send bytes as binary messages",
                self.line_number
            ))
        })?;
        Ok(Some(Message::text(format!("{}{line}", self.prefix))))
    }
}

/// Messages to stdout, buffered and flushed whenever the socket has nothing more ready.
struct Output {
    out: BufWriter<std::io::Stdout>,
    binary: bool,
    raw: bool,
}

impl Output {
    fn new(opts: &PipeOpts) -> Output {
        Output {
            out: BufWriter::with_capacity(64 << 10, std::io::stdout()),
            binary: opts.binary,
            raw: opts.raw,
        }
    }

    fn message(&mut self, m: &Message) -> Result<(), Failure> {
        let payload = m.as_payload();
        let written = if self.binary {
            self.out.write_all(payload)
        } else if self.raw {
            self.out
                .write_all(payload)
                .and_then(|()| self.out.write_all(b"\n"))
        } else {
            self.out
                .write_all(escape(payload).as_bytes())
                .and_then(|()| self.out.write_all(b"\n"))
        };
        written.map_err(stdout_error)
    }

    fn flush(&mut self) -> Result<(), Failure> {
        self.out.flush().map_err(stdout_error)
    }
}
