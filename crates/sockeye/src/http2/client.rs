//! The client side: a WebSocket on a pooled HTTP/2 connection to its origin, or on a new one.

use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response};
use sockeye_proto::Role;
use sockeye_proto::handshake::{
    WEBSOCKET_PROTOCOL, check_extended_connect_response, extended_connect_request,
};

use super::h2_stream::{H2Stream, to_io};
use super::pool::{self, PoolKey, PooledConnection, StreamSlot};
use super::settings::client_builder;
use crate::config::{Config, HttpVersion};
use crate::error::Error;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// The ALPN protocols a client offers for `version`.
pub(crate) fn client_alpn(version: HttpVersion) -> &'static [&'static [u8]] {
    match version {
        HttpVersion::Http1 => &[b"http/1.1"],
        HttpVersion::Http2Preferred => &[b"h2", b"http/1.1"],
        HttpVersion::Http2Only => &[b"h2"],
    }
}

/// Opens a WebSocket on a pooled connection to the same origin, if there is one that is still
/// up. `Ok(None)`: open a new connection.
pub(crate) async fn connect_pooled(
    key: &PoolKey,
    request: &Request<()>,
    config: &Config,
) -> Result<Option<(WebSocket<TransportStream>, Response<()>)>, Error> {
    let Some(shared) = pool::pooled(key).filter(|c| c.has_room()) else {
        return Ok(None);
    };
    match open_stream(shared, request.clone(), config).await {
        Ok(connected) => Ok(Some(connected)),
        // The connection went away (GOAWAY, reset) between uses: start a new one.
        Err(Error::Io(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Starts HTTP/2 on a fresh transport, waits for the server's SETTINGS (which say whether it
/// takes extended CONNECT, RFC 8441 §3), pools the connection, and opens the WebSocket.
pub(crate) async fn connect_new(
    stream: TransportStream,
    key: PoolKey,
    request: Request<()>,
    config: &Config,
) -> Result<(WebSocket<TransportStream>, Response<()>), Error> {
    let tls = stream.is_tls();
    let builder = client_builder(config);
    // In cleartext nothing was negotiated: a server that does not answer the preface does not
    // speak h2c, which is what the caller needs to hear.
    let failed = |e: h2::Error| match tls {
        true => Error::Io(to_io(e)),
        // An HTTP/1.1-only server that says so (RFC 9113 §7), as Sockeye's own loop does.
        false if e.reason() == Some(h2::Reason::HTTP_1_1_REQUIRED) => {
            sockeye_proto::HandshakeError::Http2Unavailable(
                "the server answered the HTTP/2 preface with HTTP_1_1_REQUIRED: it serves HTTP/1.1 only",
            )
            .into()
        }
        false => sockeye_proto::HandshakeError::Http2Unavailable(
            "the server did not answer the HTTP/2 preface (h2c with prior knowledge)",
        )
        .into(),
    };
    let (requests, mut connection) = builder.handshake::<_, Bytes>(stream).await.map_err(failed)?;
    let ping_pong = connection.ping_pong();
    let (ended_tx, ended) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let _ = ended_tx.send(connection.await);
    });
    // The server's SETTINGS come first in its preface (RFC 9113 §3.4), so once a PING is
    // answered they have been applied.
    if let Some(mut ping_pong) = ping_pong
        && let Err(e) = ping_pong.ping(h2::Ping::opaque()).await
    {
        // The ping fails with the connection's end; why it ended (a GOAWAY's reason) is the
        // connection's own result, there at once.
        let why = match tokio::time::timeout(std::time::Duration::from_secs(1), ended).await {
            Ok(Ok(Err(ended))) if ended.reason().is_some() => ended,
            _ => e,
        };
        return Err(failed(why));
    }
    if !requests.is_extended_connect_protocol_enabled() {
        return Err(sockeye_proto::HandshakeError::Http2Unavailable(
            "the server speaks HTTP/2 but does not accept WebSockets over it (no SETTINGS_ENABLE_CONNECT_PROTOCOL, RFC 8441 §3)",
        )
        .into());
    }
    let shared = Arc::new(PooledConnection {
        requests,
        tls,
        open: Default::default(),
    });
    pool::insert(key, &shared);
    open_stream(shared, request, config).await
}

/// Sends the extended CONNECT on a connection and turns the stream into a WebSocket.
async fn open_stream(
    shared: Arc<PooledConnection>,
    request: Request<()>,
    config: &Config,
) -> Result<(WebSocket<TransportStream>, Response<()>), Error> {
    // With the extensions the protocol config offers; the check of the response installs them.
    let request = extended_connect_request(request, &config.protocol)?;
    let io = |e: h2::Error| Error::Io(to_io(e));
    let mut requests = shared.requests.clone().ready().await.map_err(io)?;
    let mut outgoing = request.clone();
    outgoing
        .extensions_mut()
        .insert(h2::ext::Protocol::from(WEBSOCKET_PROTOCOL));
    let (response, send) = requests.send_request(outgoing, false).map_err(io)?;
    let response = response.await.map_err(io)?;
    let (parts, recv) = response.into_parts();
    let response = Response::from_parts(parts, ());
    let deflate = check_extended_connect_response(&request, &response, &config.protocol)?;
    let tls = shared.tls;
    let stream = H2Stream::new(
        send,
        recv,
        tls,
        config.protocol.close_timeout,
        Some(StreamSlot::new(shared)),
    );
    let ws = WebSocket::from_upgraded(TransportStream::Http2(stream), Role::Client, config, &[], deflate);
    Ok((ws, response))
}
