//! The server's answers to an opening handshake, over HTTP/1.1 and HTTP/2 alike: the accepting
//! response with the permessage-deflate negotiation in it, and the refusals (an invalid request,
//! the connection limit). Used by [`Server`](crate::Server), the HTTP/2 server and
//! `upgrade::Upgrade`.

use http::header::SEC_WEBSOCKET_EXTENSIONS;
use http::{HeaderValue, Response};
use sockeye_proto::HandshakeError;
use sockeye_proto::extension;
use sockeye_proto::extension::deflate::PerMessageDeflate;
use sockeye_proto::handshake::{ClientHello, encode_response, reject_response};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::Error;

/// The `101` response for a valid request, with the permessage-deflate answer in it if the
/// client offered something acceptable; the compression state travels beside it until the
/// response is final (see [`kept_deflate`]).
pub(crate) fn negotiate(
    hello: &ClientHello,
    config: &sockeye_proto::Config,
) -> (Response<()>, Option<(PerMessageDeflate, String)>) {
    let mut response = hello.accept();
    let deflate = extension::server_accept(config, &hello.extensions);
    if let Some((_, value)) = &deflate
        && let Ok(value) = HeaderValue::from_str(value)
    {
        response.headers_mut().insert(SEC_WEBSOCKET_EXTENSIONS, value);
    }
    (response, deflate)
}

/// The compression state to install, if the response about to be sent still carries our answer
/// (an application may have removed it to refuse compression for this client).
pub(crate) fn kept_deflate<B>(
    deflate: Option<(PerMessageDeflate, String)>,
    response: &Response<B>,
) -> Option<PerMessageDeflate> {
    let kept = response
        .headers()
        .get(SEC_WEBSOCKET_EXTENSIONS)
        .and_then(|v| v.to_str().ok());
    deflate
        .filter(|(_, value)| Some(value.as_str()) == kept)
        .map(|(state, _)| state)
}

/// Answers a request that is not a valid upgrade with its status (400, 405, 426, 431 or 505)
/// and closes; the error is returned for the caller to report.
pub(crate) async fn refuse<S: AsyncWrite + Unpin, T>(
    stream: &mut S,
    error: HandshakeError,
) -> Result<T, Error> {
    send_and_close(stream, &encode_response(&reject_response(&error))).await;
    Err(error.into())
}

/// Sends an HTTP refusal and closes; errors are ignored, as the connection is being dropped anyway.
pub(crate) async fn send_and_close<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
}

/// The answer to a client beyond [`Config::max_connections`](crate::Config::max_connections).
pub(crate) fn service_unavailable() -> Response<String> {
    let mut response = Response::new("server at its connection limit; retry later\n".to_string());
    *response.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    response
        .headers_mut()
        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}
