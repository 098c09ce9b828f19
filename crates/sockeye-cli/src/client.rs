//! Connecting as the client flags say (URL, `-H`, `--subprotocol`, TLS, proxy, `--timeout`,
//! `--ping_interval`), interruptible by Ctrl-C, and closing as cleanly as the user's patience
//! allows.

use std::time::Duration;

use futures_util::StreamExt;
use sockeye::{
    CloseCode, CloseFrame, IntoClientRequest, Message, TransportStream, WebSocket, WebSocketReader,
    WebSocketWriter,
};

use crate::failure::Failure;
use crate::interrupt::{CLOSE_GRACE, unless_interrupted};
use crate::opts::ClientOpts;
use crate::tls::client_config;

/// A connected client.
pub(crate) type Client = WebSocket<TransportStream>;

/// The handshake request for `url`: `-H` headers and `--subprotocol`s added.
pub(crate) fn request(opts: &ClientOpts, url: &str) -> Result<http::Request<()>, Failure> {
    let mut request = url
        .into_client_request()
        .map_err(|e| Failure::usage(e.to_string()))?;
    let headers = request.headers_mut();
    for header in &opts.headers {
        let Some((name, value)) = header.split_once(':') else {
            return Err(Failure::usage(format!("-H {header:?}: expected \"Name: value\"")));
        };
        let name = http::HeaderName::try_from(name.trim())
            .map_err(|e| Failure::usage(format!("-H {header:?}: {e}")))?;
        let value = http::HeaderValue::try_from(value.trim())
            .map_err(|e| Failure::usage(format!("-H {header:?}: {e}")))?;
        headers.append(name, value);
    }
    if !opts.subprotocols.is_empty() {
        let list = opts.subprotocols.join(", ");
        let value = http::HeaderValue::try_from(list.as_str())
            .map_err(|e| Failure::usage(format!("--subprotocol {list:?}: {e}")))?;
        headers.insert("sec-websocket-protocol", value);
    }
    Ok(request)
}

/// Connects to the URL of the flags.
pub(crate) async fn connect(opts: &ClientOpts) -> Result<(Client, http::Response<()>), Failure> {
    connect_to(opts, &opts.url).await
}

/// Connects to `url` with the flags' configuration; the whole set-up (DNS, TCP, proxy, TLS,
/// handshake) is bounded by `--timeout`, and Ctrl-C abandons it (exit 130).
pub(crate) async fn connect_to(
    opts: &ClientOpts,
    url: &str,
) -> Result<(Client, http::Response<()>), Failure> {
    connect_with_config(opts, url, &client_config(opts)?).await
}

/// [`connect_to`] with a configuration the caller adjusted (`receive` raises the message size).
pub(crate) async fn connect_with_config(
    opts: &ClientOpts,
    url: &str,
    config: &sockeye::Config,
) -> Result<(Client, http::Response<()>), Failure> {
    let request = request(opts, url)?;
    unless_interrupted(sockeye::connect_with(request, config))
        .await?
        .map_err(|e| connect_failure(opts, url, e))
}

/// Why connecting to `url` failed, in the user's terms (a timeout names the flag that sets it).
pub(crate) fn connect_failure(opts: &ClientOpts, url: &str, e: sockeye::Error) -> Failure {
    if e.timeout().is_some() {
        return Failure::new(format!(
            "{url}: no WebSocket handshake within {} s ({e}); --timeout sets the limit",
            opts.timeout
        ));
    }
    e.into()
}

/// The close a user's Ctrl-C sends: 1001 (going away), then the peer's reply is awaited for at
/// most [`CLOSE_GRACE`], messages still in flight discarded.
pub(crate) async fn close_interrupted(ws: &mut Client) {
    let frame = CloseFrame::new(CloseCode::GOING_AWAY, "");
    let _ = tokio::time::timeout(CLOSE_GRACE, ws.close(Some(frame))).await;
}

/// Runs `work` on the connection unless Ctrl-C comes first; then the connection is closed as
/// [`close_interrupted`] does and the result is [`Failure::interrupted`].
pub(crate) async fn interruptible<T>(
    ws: &mut Client,
    work: impl AsyncFnOnce(&mut Client) -> Result<T, Failure>,
) -> Result<T, Failure> {
    match unless_interrupted(work(&mut *ws)).await {
        Ok(done) => done,
        Err(interrupted) => {
            close_interrupted(ws).await;
            Err(interrupted)
        }
    }
}

/// The same for split halves: close with 1001 and give the peer [`CLOSE_GRACE`] to answer.
pub(crate) async fn going_away(
    writer: &mut WebSocketWriter<TransportStream>,
    reader: &mut WebSocketReader<TransportStream>,
) {
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        let _ = writer
            .send(Message::Close(Some(CloseFrame::new(CloseCode::GOING_AWAY, ""))))
            .await;
        drain_silently(reader).await;
    })
    .await;
}

/// Reads until the closing handshake ends (bounded by the library's close timeout).
pub(crate) async fn drain_silently(reader: &mut WebSocketReader<TransportStream>) {
    while let Some(Ok(_)) = reader.next().await {}
}

/// Closes normally (1000) and waits for the reply, bounded by the close timeout of the
/// library's configuration.
pub(crate) async fn close_normally(ws: &mut Client) -> Option<CloseFrame> {
    ws.close(Some(CloseFrame::new(CloseCode::NORMAL, "")))
        .await
        .ok()
        .flatten()
}

/// How long to wait for the first message where one is expected (`autoroute`, `autobahn`):
/// the same `--timeout`.
pub(crate) fn reply_timeout(opts: &ClientOpts) -> Duration {
    Duration::from_secs(opts.timeout)
}

/// A close from the peer that scripts should treat as failure: any code but 1000 and 1001.
pub(crate) fn abnormal_close(frame: Option<&CloseFrame>) -> Option<Failure> {
    match frame {
        Some(f) if f.code != CloseCode::NORMAL && f.code != CloseCode::GOING_AWAY => Some(Failure::new(
            format!("the server closed the connection with {} {}", f.code, f.reason),
        )),
        _ => None,
    }
}

/// A data message from a line the user typed or piped.
pub(crate) fn line_message(line: String, binary: bool) -> Message {
    if binary {
        Message::binary(line.into_bytes())
    } else {
        Message::text(line)
    }
}
