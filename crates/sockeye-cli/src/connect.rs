//! `connect`: an interactive client on the library's reconnecting client
//! ([`sockeye::reconnect`]). Lines typed become messages; `/stop` closes the connection and
//! `/start` opens it again. A connection that drops is re-opened after a backoff (100 ms doubling
//! up to `--max_wait`, with equal jitter: each wait is drawn in [d/2, d]) that applies to every
//! reconnection, however the connection ended, and resets only after a connection that stayed
//! up 10 s; a refusal that would only repeat (an HTTP 4xx answer other than 408/429, a close with
//! 1002/1003/1007–1010 or an application code 4000–4999: the library's default final refusals)
//! stops with a message instead. Ctrl-C, Ctrl-D and `/stop` work at any moment: while connected,
//! while connecting and during a backoff; lines typed while disconnected are not sent later
//! (`Offline::Refuse`).

use std::io::Read;
use std::pin::pin;
use std::time::Duration;

use sockeye::reconnect::{Disconnect, Event, Offline, ReconnectConfig, ReconnectingClient, SendError};
use sockeye::{CloseCode, CloseFrame, Message};

use crate::cli::ConnectArgs;
use crate::client::{connect_failure, line_message, request};
use crate::console::Console;
use crate::failure::Failure;
use crate::interrupt::{self, CLOSE_GRACE};
use crate::output::escape;
use crate::tls::client_config;

/// The first wait before reconnecting; it doubles up to `--max_wait`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// A connection that stayed up this long was healthy: the next wait starts again from the first.
const HEALTHY: Duration = Duration::from_secs(10);

/// Where the session is, as the user sees it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connecting, or waiting to reconnect.
    Disconnected,
    /// A connection is open.
    Connected,
    /// `/stop` asked for a pause; waiting for the library to confirm it.
    Stopping,
    /// Stopped: waiting for `/start`.
    Stopped,
    /// Ctrl-D: closing, then exit 0.
    Leaving,
}

pub(crate) async fn run(args: ConnectArgs) -> Result<(), Failure> {
    let url = args.client.url.clone();
    // Checked before anything is opened: a bad header is a usage error, never retried.
    let request = request(&args.client, &url)?;
    let config = client_config(&args.client)?;
    let reconnect = ReconnectConfig::default()
        .first_delay(FIRST_BACKOFF)
        .max_delay(Duration::from_millis(args.max_wait).max(FIRST_BACKOFF))
        .healthy_after(HEALTHY)
        .offline(Offline::Refuse);
    let mut console = Console::start("ws> ");
    let mut client = ReconnectingClient::builder(request)
        .config(config)
        .reconnect(reconnect.clone())
        .start();
    let mut stop = pin!(interrupt::requested());
    let mut state = State::Disconnected;
    // Lines piped in before the first connection opens are sent once it does: input is left
    // waiting until the first attempt is over.
    let mut read_input = false;
    // `/stop` typed while disconnected: say so once stopped.
    let mut stop_note = false;
    // What the last disconnection was, for the reconnection note.
    let mut why = String::new();
    loop {
        let reading = read_input && matches!(state, State::Disconnected | State::Connected | State::Stopped);
        tokio::select! {
            biased;
            _ = &mut stop => {
                if state != State::Disconnected && state != State::Stopped {
                    going_away(&mut client).await;
                }
                return Err(Failure::interrupted());
            }
            event = client.next() => {
                let Some(event) = event else {
                    // Closed after Ctrl-D, or gave up (reported with the event before).
                    return Ok(());
                };
                match event {
                    Event::Connected { response, .. } => {
                        read_input = true;
                        show_response(&console, &response, crate::log::quiet())?;
                        if state == State::Disconnected {
                            state = State::Connected;
                        }
                    }
                    Event::Message(m) => show(&console, &m, args.gunzip)?,
                    // The reply to our close: 1000 as asked, or the server's own idea.
                    Event::Disconnected(Disconnect::ClosedByUs { reply: Some(frame), .. }) => {
                        let (code, reason) = (frame.code.0, escape(frame.reason.as_bytes()));
                        if code == 1000 {
                            console.print(format!("closed: {code} {reason}"))?;
                        } else {
                            console.print(format!("closed by the server: {code} {reason}"))?;
                        }
                    }
                    Event::Disconnected(Disconnect::ClosedByUs { reply: None, .. }) => {}
                    Event::Disconnected(disconnect) => {
                        read_input = true;
                        if state == State::Connected {
                            state = State::Disconnected;
                        }
                        match ended(&console, &args, &reconnect, &url, disconnect)? {
                            Some(reason) => why = reason,
                            None => return Ok(()),
                        }
                    }
                    // After a `/stop` the backoff is abandoned: do not announce it.
                    Event::Reconnecting { delay, .. } if state == State::Disconnected => {
                        console.note(format!(
                            "{why}; reconnecting in {} ms (Ctrl-C to stop)",
                            delay.as_millis()
                        ))?;
                    }
                    Event::Paused => {
                        if std::mem::take(&mut stop_note) {
                            console.note("stopped: type /start to connect again".into())?;
                        }
                        if state == State::Stopping {
                            state = State::Stopped;
                        }
                    }
                    Event::GaveUp(_) => return Err(Failure::new(why)),
                    _ => {}
                }
            }
            line = console.next_line(), if reading => match (state, line) {
                (State::Connected, None) => {
                    client.close(Some(CloseFrame::new(CloseCode::NORMAL, "")));
                    state = State::Leaving;
                }
                (_, None) => return Ok(()),
                (State::Stopped, Some(line)) if line.trim() == "/start" => {
                    client.resume();
                    state = State::Disconnected;
                }
                (State::Stopped, Some(_)) => {
                    console.note("stopped: type /start to connect again".into())?;
                }
                (State::Connected, Some(line)) if line.trim() == "/stop" => {
                    client.pause(Some(CloseFrame::new(CloseCode::NORMAL, "")));
                    state = State::Stopping;
                }
                (_, Some(line)) if line.trim() == "/stop" => {
                    client.pause(None);
                    stop_note = true;
                    state = State::Stopping;
                }
                (State::Connected, Some(line)) if line.trim() == "/start" => {
                    console.note("already connected".into())?;
                }
                (State::Connected, Some(line)) => {
                    match client.send(line_message(line, args.binary)).await {
                        Ok(()) => {}
                        Err(SendError::NotConnected(_)) => console.note("not connected: line not sent".into())?,
                        Err(e) => console.note(format!("{e}: line not sent"))?,
                    }
                }
                (_, Some(_)) => console.note("not connected: line not sent".into())?,
            },
        }
    }
}

/// Reports a disconnection the user did not ask for. Returns why it happened, for the note
/// that announces the reconnection; `None` to end the session cleanly (`-d`, closed with
/// 1000/1001); or the failure that ends it: a final refusal, or any other end with `-d`.
fn ended(
    console: &Console,
    args: &ConnectArgs,
    reconnect: &ReconnectConfig,
    url: &str,
    disconnect: Disconnect,
) -> Result<Option<String>, Failure> {
    let refused = reconnect.is_final(&disconnect);
    match disconnect {
        Disconnect::Closed { frame, .. } => {
            let code = frame.as_ref().map_or(1005, |f| f.code.0);
            let reason = frame
                .as_ref()
                .map_or(String::new(), |f| escape(f.reason.as_bytes()));
            console.print(format!("closed by the server: {code} {reason}"))?;
            if refused {
                return Err(Failure::new(format!(
                    "the server closed the connection with {code} {reason}; not reconnecting: it would refuse again"
                )));
            }
            if args.no_reconnect {
                return if code == 1000 || code == 1001 {
                    Ok(None)
                } else {
                    Err(Failure::new(format!(
                        "the server closed the connection with {code}"
                    )))
                };
            }
            Ok(Some(format!("closed by the server ({code})")))
        }
        Disconnect::Lost { error, .. } => {
            if args.no_reconnect {
                return Err(Failure::new(format!("disconnected: {error}")));
            }
            Ok(Some(error.to_string()))
        }
        Disconnect::Failed { error, .. } => {
            let failure = connect_failure(&args.client, url, error);
            if args.no_reconnect || refused {
                return Err(failure);
            }
            Ok(Some(format!("connection failed: {failure}")))
        }
        other => Ok(Some(other.to_string())),
    }
}

/// Ctrl-C with a connection open (or closing): close it with 1001 and give the peer
/// [`CLOSE_GRACE`] to answer, messages still arriving discarded.
async fn going_away(client: &mut ReconnectingClient) {
    client.close(Some(CloseFrame::new(CloseCode::GOING_AWAY, "")));
    let _ = tokio::time::timeout(CLOSE_GRACE, async { while client.next().await.is_some() {} }).await;
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
