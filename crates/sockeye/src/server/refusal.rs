//! The server's refusals of an opening handshake: an invalid request (RFC 6455 §4.2.1, answered
//! with its status) and a client beyond the connection limit (503, the engine's
//! `service_unavailable`, shared with sockeye-loop's server). Used by
//! [`Server`](crate::Server) and the HTTP/2 server. (The accepting response, with the extensions
//! negotiated, is the engine's: `ClientHello::accept_with`.)

use sockeye_proto::HandshakeError;
use sockeye_proto::handshake::{encode_response, reject_response};
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::error::Error;

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
