//! The server's HTTP/1.1 upgrade on one stream (RFC 6455 §4.2): the request read and checked,
//! the application's decision, the engine's accepting response with the extensions negotiated.

use bytes::BytesMut;
use http::{Request, Response};
use sockeye_proto::handshake::{ClientHello, encode_response, parse_request};
use sockeye_proto::{HandshakeError, Role};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::refusal::{refuse, send_and_close};
use crate::config::Config;
use crate::error::{Error, TimeoutCause};
use crate::head::{read_head, with_deadline};
use crate::websocket::WebSocket;

/// Accepts a WebSocket connection on a stream, with the default [`Config`], whatever the path,
/// origin or subprotocols.
pub async fn accept<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> Result<WebSocket<S>, Error> {
    accept_with(stream, &Config::default(), |_, response| Ok(response)).await
}

/// Accepts a connection, letting `decide` look at the request (path, query, `Origin`, headers,
/// offered subprotocols) and either return the `101` response, with headers added, or refuse with
/// any HTTP response (status and body are sent as given).
///
/// Requests that are not valid WebSocket upgrades are refused before `decide` is called, with
/// 400, 405, 426 (and `Sec-WebSocket-Version: 13`), 431 or 505.
///
/// ```no_run
/// use http::{Response, StatusCode};
/// # async fn run(stream: tokio::net::TcpStream) -> Result<(), sockeye::Error> {
/// let ws = sockeye::accept_with(stream, &sockeye::Config::default(), |request, mut response| {
///     if request.uri().path() != "/chat" {
///         let mut refusal = Response::new("no such endpoint\n".to_string());
///         *refusal.status_mut() = StatusCode::NOT_FOUND;
///         return Err(refusal);
///     }
///     response.headers_mut().insert("sec-websocket-protocol", "chat".parse().unwrap());
///     Ok(response)
/// })
/// .await?;
/// # Ok(()) }
/// ```
pub async fn accept_with<S, F>(stream: S, config: &Config, decide: F) -> Result<WebSocket<S>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let upgrade = accept_buffered(stream, BytesMut::with_capacity(1024), config, decide);
    with_deadline(config.handshake_timeout, TimeoutCause::Handshake, upgrade)
        .await
        .map(|(ws, _request)| ws)
}

/// [`accept_with`] on a stream whose first bytes were already read into `buf`, without a
/// deadline of its own (the caller's covers it); the request is handed back with the connection
/// (moved, not copied).
pub(crate) async fn accept_buffered<S, F>(
    mut stream: S,
    mut buf: BytesMut,
    config: &Config,
    decide: F,
) -> Result<(WebSocket<S>, Request<()>), Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let limit = config.protocol.max_handshake_size;
    let read = read_head(&mut stream, &mut buf, limit, |buf| {
        parse_request(buf, &config.protocol)
    })
    .await;
    let (request, leftover) = match read {
        Ok(read) => read,
        Err(e) => match e.into_handshake_error(limit, "client") {
            Ok(refused) => return refuse(&mut stream, refused).await,
            Err(e) => return Err(e),
        },
    };
    let hello = match ClientHello::from_request(&request) {
        Ok(hello) => hello,
        Err(e) => return refuse(&mut stream, e).await,
    };
    let (response, extensions) = hello.accept_with(&config.protocol);
    match decide(&request, response) {
        Ok(response) => {
            let deflate = extensions.kept_by(&response);
            stream.write_all(&encode_response(&response)).await?;
            stream.flush().await?;
            let ws = WebSocket::from_upgraded(stream, Role::Server, config, leftover, deflate);
            Ok((ws, request))
        }
        Err(refusal) => {
            let status = refusal.status();
            send_and_close(&mut stream, &encode_response(&refusal)).await;
            let reason = status.canonical_reason().unwrap_or("").to_string();
            Err(HandshakeError::Rejected {
                status: status.as_u16(),
                reason,
            }
            .into())
        }
    }
}
