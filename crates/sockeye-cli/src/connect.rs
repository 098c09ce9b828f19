//! `connect`: an interactive client. Lines typed become messages; `/stop` closes the connection
//! and `/start` opens it again. A connection that drops is re-opened after a backoff (100 ms
//! doubling up to `--max_wait`) that applies to every reconnection, however the connection
//! ended, and resets only after a connection that stayed up; a refusal that would only repeat
//! (an HTTP 4xx answer, a close with 1002/1003/1007–1010 or an application code 4000–4999)
//! stops with a message instead. Ctrl-C, Ctrl-D and `/stop` work at any moment: while connected,
//! while connecting and during a backoff; lines typed while disconnected are not sent later.

use std::io::Read;
use std::pin::pin;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use sockeye::{CloseCode, CloseFrame, Message};

use crate::Failure;
use crate::cli::ConnectArgs;
use crate::client::{Client, connect, going_away, line_message};
use crate::console::Console;
use crate::interrupt;
use crate::output::escape;

/// The first wait before reconnecting; it doubles up to `--max_wait`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// A connection that stayed up this long was healthy: the next wait starts again from the first.
const HEALTHY: Duration = Duration::from_secs(10);

/// How a session ended.
enum Ended {
    /// The user typed /stop.
    Stopped,
    /// Input ended (Ctrl-D, end of a pipe).
    InputClosed,
    /// Ctrl-C.
    Interrupted,
    /// The server closed the connection with this frame (we did not ask).
    ClosedByServer(Option<CloseFrame>),
    /// The connection was lost.
    Dropped(String),
}

/// What the user did while no connection was open.
enum Waited<T> {
    /// The wait (backoff, connection attempt, `/start`) finished, with its result.
    Done(T),
    /// `/stop`.
    Stopped,
    /// Ctrl-D or the end of a pipe.
    InputClosed,
}

pub(crate) async fn run(args: ConnectArgs) -> Result<(), Failure> {
    let mut console = Console::start("ws> ");
    let max_wait = Duration::from_millis(args.max_wait).max(FIRST_BACKOFF);
    let mut backoff = FIRST_BACKOFF;
    let mut started = true;
    let mut first = true;
    loop {
        if !started {
            match wait_for_start(&mut console).await? {
                Waited::Done(()) => started = true,
                Waited::InputClosed => return Ok(()),
                Waited::Stopped => continue,
            }
        }
        let connecting = pin!(connect(&args.client));
        let attempt = match while_disconnected(&mut console, connecting, !first).await? {
            Waited::Done(attempt) => attempt,
            Waited::Stopped => {
                started = false;
                console.note("stopped: type /start to connect again".into())?;
                continue;
            }
            Waited::InputClosed => return Ok(()),
        };
        first = false;
        let why = match attempt {
            Ok((ws, response)) => {
                let since = Instant::now();
                show_response(&console, &response, args.quiet)?;
                match session(ws, &mut console, &args).await? {
                    Ended::Stopped => {
                        started = false;
                        continue;
                    }
                    Ended::InputClosed => return Ok(()),
                    Ended::Interrupted => return Err(Failure::interrupted()),
                    Ended::ClosedByServer(frame) => {
                        let code = frame.as_ref().map_or(1005, |f| f.code.0);
                        if final_close(code) {
                            return Err(Failure::new(format!(
                                "the server closed the connection with {code} {}; not reconnecting: it would refuse again",
                                frame
                                    .as_ref()
                                    .map_or(String::new(), |f| escape(f.reason.as_bytes()))
                            )));
                        }
                        if args.no_reconnect {
                            return if code == 1000 || code == 1001 {
                                Ok(())
                            } else {
                                Err(Failure::new(format!(
                                    "the server closed the connection with {code}"
                                )))
                            };
                        }
                        if since.elapsed() >= HEALTHY {
                            backoff = FIRST_BACKOFF;
                        }
                        format!("closed by the server ({code})")
                    }
                    Ended::Dropped(why) if args.no_reconnect => {
                        return Err(Failure::new(format!("disconnected: {why}")));
                    }
                    Ended::Dropped(why) => {
                        if since.elapsed() >= HEALTHY {
                            backoff = FIRST_BACKOFF;
                        }
                        why
                    }
                }
            }
            Err(failure) => {
                if args.no_reconnect || failure.exit_code != 1 || refused_for_good(&failure) {
                    return Err(failure);
                }
                format!("connection failed: {failure}")
            }
        };
        console.note(format!(
            "{why}; reconnecting in {} ms (Ctrl-C to stop)",
            backoff.as_millis()
        ))?;
        let sleep = pin!(tokio::time::sleep(backoff));
        match while_disconnected(&mut console, sleep, true).await? {
            Waited::Done(()) => {}
            Waited::Stopped => {
                started = false;
                console.note("stopped: type /start to connect again".into())?;
            }
            Waited::InputClosed => return Ok(()),
        }
        backoff = (backoff * 2).min(max_wait);
    }
}

/// Runs `work` (a connection attempt or a backoff sleep) while listening to the user: Ctrl-C
/// ends everything (exit 130), Ctrl-D ends it cleanly, `/stop` abandons the attempt, and a line
/// typed now is not kept for later (it would be sent to a connection the user did not see open).
///
/// Without `read_input` (the first connection), input is left waiting: lines piped in before
/// the connection opens are sent once it does.
async fn while_disconnected<T>(
    console: &mut Console,
    mut work: std::pin::Pin<&mut impl Future<Output = T>>,
    read_input: bool,
) -> Result<Waited<T>, Failure> {
    let mut stop = pin!(interrupt::requested());
    loop {
        tokio::select! {
            biased;
            _ = &mut stop => return Err(Failure::interrupted()),
            done = &mut work => return Ok(Waited::Done(done)),
            line = console.next_line(), if read_input => match line {
                None => return Ok(Waited::InputClosed),
                Some(line) if line.trim() == "/stop" => return Ok(Waited::Stopped),
                Some(_) => console.note("not connected: line not sent".into())?,
            },
        }
    }
}

/// After `/stop`: waits for `/start`.
async fn wait_for_start(console: &mut Console) -> Result<Waited<()>, Failure> {
    let mut stop = pin!(interrupt::requested());
    tokio::select! {
        biased;
        _ = &mut stop => Err(Failure::interrupted()),
        line = console.next_line() => match line {
            None => Ok(Waited::InputClosed),
            Some(line) if line.trim() == "/start" => Ok(Waited::Done(())),
            Some(_) => {
                console.note("stopped: type /start to connect again".into())?;
                Ok(Waited::Stopped)
            }
        },
    }
}

fn show_response(console: &Console, response: &http::Response<()>, quiet: bool) -> Result<(), Failure> {
    console.print(format!(
        "connected: {:?} {}",
        response.version(),
        response.status()
    ))?;
    if !quiet {
        for (name, value) in response.headers() {
            console.print(format!("  {name}: {}", escape(value.as_bytes())))?;
        }
    }
    Ok(())
}

/// A close code that says the server will not take this client as it is: reconnecting would
/// only be refused again. Protocol and policy errors, and the application range (RFC 6455
/// §7.4.2), where servers put their own refusals (4001 for a missing authorization in
/// IXWebSocket's servers, 4003 forbidden, …).
fn final_close(code: u16) -> bool {
    matches!(code, 1002 | 1003 | 1007 | 1008 | 1009 | 1010 | 4000..=4999)
}

/// A handshake answered with a 4xx status other than 408 (timeout) and 429 (too many requests):
/// the request itself is refused (unauthorized, forbidden, no such path) and will be again.
fn refused_for_good(failure: &Failure) -> bool {
    failure
        .refused_status
        .is_some_and(|s| (400..500).contains(&s) && s != 408 && s != 429)
}

async fn session(ws: Client, console: &mut Console, args: &ConnectArgs) -> Result<Ended, Failure> {
    let (mut writer, mut reader) = ws.split();
    let mut stop = pin!(interrupt::requested());
    // Set once we sent a close: the close that comes back is the reply, not the server's idea.
    let mut we_closed: Option<Ended> = None;
    let mut server_close: Option<Option<CloseFrame>> = None;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop, if we_closed.is_none() => {
                going_away(&mut writer, &mut reader).await;
                return Ok(Ended::Interrupted);
            }
            item = reader.next() => match item {
                Some(Ok(Message::Close(frame))) => {
                    let (code, reason) = frame.as_ref().map_or((1005, String::new()), |f| (f.code.0, escape(f.reason.as_bytes())));
                    if we_closed.is_some() && code == 1000 {
                        console.print(format!("closed: {code} {reason}"))?;
                    } else {
                        console.print(format!("closed by the server: {code} {reason}"))?;
                        server_close = Some(frame);
                    }
                }
                Some(Ok(m)) => show(console, &m, args.gunzip)?,
                Some(Err(e)) => {
                    return Ok(match (we_closed, server_close) {
                        (Some(ended), _) => ended,
                        (None, Some(frame)) => Ended::ClosedByServer(frame),
                        (None, None) => Ended::Dropped(e.to_string()),
                    });
                }
                None => {
                    return Ok(match (we_closed, server_close) {
                        (Some(ended), _) => ended,
                        (None, Some(frame)) => Ended::ClosedByServer(frame),
                        (None, None) => Ended::Dropped("the connection closed without a close frame".into()),
                    });
                }
            },
            line = console.next_line(), if we_closed.is_none() => match line {
                None => {
                    let _ = writer.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                    we_closed = Some(Ended::InputClosed);
                }
                Some(line) if line.trim() == "/stop" => {
                    let _ = writer.close(Some(CloseFrame::new(CloseCode::NORMAL, ""))).await;
                    we_closed = Some(Ended::Stopped);
                }
                Some(line) if line.trim() == "/start" => console.note("already connected".into())?,
                Some(line) => {
                    if let Err(e) = writer.send(line_message(line, args.binary)).await {
                        return Ok(Ended::Dropped(e.to_string()));
                    }
                }
            },
        }
    }
}

/// Prints a received message, control characters escaped; with `-g`, a gzip-compressed message
/// is shown decompressed.
fn show(console: &Console, m: &Message, gunzip: bool) -> Result<(), Failure> {
    match m {
        Message::Text(_) | Message::Binary(_) => {
            let payload = m.as_payload();
            if gunzip && payload.starts_with(&[0x1f, 0x8b]) {
                let mut plain = Vec::new();
                if flate2::read::MultiGzDecoder::new(payload)
                    .read_to_end(&mut plain)
                    .is_ok()
                {
                    return console.print(format!("received (gunzipped): {}", escape(&plain)));
                }
            }
            console.print(format!("received: {}", escape(payload)))
        }
        Message::Pong(_) => console.print("pong".into()),
        Message::Ping(_) | Message::Close(_) => Ok(()),
    }
}
