//! The client's HTTP/1.1 handshake over a stream already open (RFC 6455 §4.1): the engine's
//! `ClientHandshake` writes the request, with the extensions the config offers, and checks the
//! response; the WebSocket starts with the state it negotiated.

use bytes::BytesMut;
use http::Response;
use sockeye_proto::handshake::{AcceptedResponse, ClientHandshake};
use sockeye_proto::{HandshakeError, Role};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::request::IntoClientRequest;
use crate::config::Config;
use crate::error::Error;
use crate::head::read_head;
use crate::websocket::WebSocket;

/// Performs the client handshake over a stream you connected yourself (through a proxy, over TLS,
/// over a Unix socket...). `request`'s URL supplies the path and the `Host` header.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: impl IntoClientRequest,
    config: &Config,
) -> Result<(WebSocket<S>, Response<()>), Error> {
    let request = request.into_client_request()?;
    // The handshake adds the extensions the protocol config offers, and checks the answer.
    let handshake = ClientHandshake::new(request, rand::random(), &config.protocol)?;
    stream.write_all(&handshake.encode_request()).await?;
    stream.flush().await?;
    let mut buf = BytesMut::with_capacity(1024);
    let limit = config.protocol.max_handshake_size;
    let read = read_head(&mut stream, &mut buf, limit, |buf| {
        // A TLS server answers the request, which it takes for a bad TLS record, with an alert
        // record (0x15), or a handshake record (0x16) — neither of which is HTTP.
        if let [0x15 | 0x16, rest @ ..] = buf
            && rest.first().is_none_or(|&major| major == 3)
        {
            return Err(HandshakeError::MalformedHttp(
                "the server answered with a TLS record: it speaks TLS on this port, so use wss:// \
                 (not ws://)"
                    .into(),
            ));
        }
        handshake.parse_response(buf, &config.protocol)
    })
    .await;
    let (
        AcceptedResponse {
            response, deflate, ..
        },
        leftover,
    ) = match read {
        Ok(read) => read,
        Err(e) => {
            return Err(e
                .into_handshake_error(limit, "server")
                .map_or_else(|e| e, Error::from));
        }
    };
    let ws = WebSocket::from_upgraded(stream, Role::Client, config, leftover, deflate);
    Ok((ws, response))
}
