//! `connect`: an interactive client. Lines typed become messages; `/stop` closes the connection
//! and `/start` opens it again; dropped connections are re-opened with exponential backoff
//! (100 ms doubling up to `--max_wait`) unless `-d`. Line editing when stdin is a terminal.

use std::io::IsTerminal;
use std::time::Duration;

use futures_util::StreamExt;
use sockeye::proto::handshake::url_target;
use sockeye::{Bytes, CloseCode, CloseFrame, IntoClientRequest, Message};
use tokio::sync::mpsc;

use crate::Failure;
use crate::cli::ConnectArgs;
use crate::output::{errln, escape, outln};
use crate::tls::client_config;

/// How a session ended.
enum Ended {
    /// The user typed /stop.
    Stopped,
    /// Input ended (Ctrl-D, end of a pipe).
    InputClosed,
    /// The connection was lost.
    Dropped(String),
}

pub(crate) async fn run(args: ConnectArgs) -> Result<(), Failure> {
    let config = client_config(&args.client)?;
    let mut lines = input_lines();
    let max_wait = Duration::from_millis(args.max_wait.max(100));
    let mut backoff = Duration::from_millis(100);
    let mut started = true;
    loop {
        if !started {
            match lines.recv().await {
                Some(line) if line.trim() == "/start" => started = true,
                Some(_) => {
                    errln!("stopped: type /start to connect again");
                    continue;
                }
                None => return Ok(()),
            }
        }
        let request = request(&args)?;
        let (ws, response) = match sockeye::connect_with(request, &config).await {
            Ok(connected) => connected,
            Err(e) if args.no_reconnect => return Err(e.into()),
            Err(e) => {
                errln!("connection failed: {e}; retrying in {} ms", backoff.as_millis());
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(max_wait);
                continue;
            }
        };
        backoff = Duration::from_millis(100);
        outln!("connected: HTTP/1.1 {}", response.status())?;
        for (name, value) in response.headers() {
            outln!("  {name}: {}", escape(value.as_bytes()))?;
        }
        match session(ws, &mut lines, &args).await {
            Ended::Stopped => started = false,
            Ended::InputClosed => return Ok(()),
            Ended::Dropped(why) if args.no_reconnect => {
                return Err(Failure::new(format!("disconnected: {why}")));
            }
            Ended::Dropped(why) => errln!("disconnected: {why}; reconnecting"),
        }
    }
}

/// The handshake request: the URL, `-H` headers and `--subprotocol`. The URL is read as
/// `sockeye::connect` reads it, here, so that an invalid one fails at once instead of being
/// retried.
fn request(args: &ConnectArgs) -> Result<http::Request<()>, Failure> {
    let mut request = args.client.url.as_str().into_client_request()?;
    url_target(request.uri()).map_err(sockeye::Error::from)?;
    let headers = request.headers_mut();
    for header in &args.headers {
        let Some((name, value)) = header.split_once(':') else {
            return Err(Failure::new(format!("-H {header:?}: expected \"Name: value\"")));
        };
        let name = http::HeaderName::try_from(name.trim())
            .map_err(|e| Failure::new(format!("-H {header:?}: {e}")))?;
        let value = http::HeaderValue::try_from(value.trim())
            .map_err(|e| Failure::new(format!("-H {header:?}: {e}")))?;
        headers.append(name, value);
    }
    if let Some(p) = &args.subprotocol {
        let value = http::HeaderValue::try_from(p.as_str())
            .map_err(|e| Failure::new(format!("--subprotocol {p:?}: {e}")))?;
        headers.append("sec-websocket-protocol", value);
    }
    Ok(request)
}

async fn session(
    ws: sockeye::WebSocket<sockeye::MaybeTlsStream>,
    lines: &mut mpsc::Receiver<String>,
    args: &ConnectArgs,
) -> Ended {
    let (mut sink, mut stream) = ws.split();
    let period = Duration::from_secs(args.ping_interval.max(1));
    let mut pings = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    loop {
        tokio::select! {
            line = lines.recv() => match line {
                None => {
                    let _ = sink.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                    drain(&mut stream).await;
                    return Ended::InputClosed;
                }
                Some(line) if line.trim() == "/stop" => {
                    let _ = sink.send(Message::Close(Some(CloseFrame::new(CloseCode::NORMAL, "")))).await;
                    drain(&mut stream).await;
                    return Ended::Stopped;
                }
                Some(line) => {
                    let message = if args.binary { Message::binary(line.into_bytes()) } else { Message::text(line) };
                    if let Err(e) = sink.send(message).await {
                        return Ended::Dropped(e.to_string());
                    }
                }
            },
            item = stream.next() => match item {
                Some(Ok(m)) => { let _ = show(&m); }
                Some(Err(e)) => return Ended::Dropped(e.to_string()),
                None => return Ended::Dropped("the connection closed".into()),
            },
            _ = tokio::signal::ctrl_c() => {
                let _ = sink.send(Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "")))).await;
                drain(&mut stream).await;
                return Ended::InputClosed;
            }
            _ = pings.tick(), if args.ping_interval > 0 => {
                if let Err(e) = sink.send(Message::Ping(Bytes::from_static(b"ws"))).await {
                    return Ended::Dropped(e.to_string());
                }
            }
        }
    }
}

/// Reads until the closing handshake ends, still showing what was in flight (messages, and the
/// server's close frame, which may carry its own code if it closed at the same moment).
async fn drain(stream: &mut (impl StreamExt<Item = Result<Message, sockeye::Error>> + Unpin)) {
    while let Some(Ok(m)) = stream.next().await {
        let _ = show(&m);
    }
}

/// Prints a received message, control characters escaped.
fn show(m: &Message) -> Result<(), Failure> {
    match m {
        Message::Text(_) | Message::Binary(_) => outln!("received: {}", escape(m.as_payload()))?,
        Message::Pong(_) => outln!("pong")?,
        Message::Close(frame) => {
            let (code, reason) = frame
                .as_ref()
                .map_or((1005, ""), |f| (f.code.0, f.reason.as_str()));
            outln!("closed by the server: {code} {}", escape(reason.as_bytes()))?;
        }
        Message::Ping(_) => {}
    }
    Ok(())
}

/// Lines typed by the user, read on a thread of their own (line editing blocks): with history and
/// editing on a terminal, plain lines from a pipe. The channel closes at end of input.
fn input_lines() -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        if std::io::stdin().is_terminal()
            && let Ok(mut editor) = rustyline::DefaultEditor::new()
        {
            while let Ok(line) = editor.readline("ws> ") {
                let _ = editor.add_history_entry(line.as_str());
                if tx.blocking_send(line).is_err() {
                    return;
                }
            }
            return;
        }
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { return };
            if tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    rx
}
