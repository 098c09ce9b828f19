//! A new connection's handshakes, within one handshake timeout from the accept: TCP_NODELAY,
//! TLS, the HTTP/2 sniff (a cleartext preface, or ALPN `h2`), then the HTTP/1.1 upgrade.

use std::net::SocketAddr;
#[cfg(feature = "tls")]
use std::sync::Arc;

use bytes::BytesMut;
use http::{Request, Response};
use tokio::time::Instant;

use super::accept::accept_buffered;
use crate::config::Config;
use crate::error::{Error, TimeoutCause};
use crate::head::with_deadline_at;
use crate::stats::ServerStats;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// How a new connection's handshake ended. One per connection, returned once and matched at
/// once: boxing the WebSocket variant (clippy's advice without the `http2` feature, whose
/// variant is as large) would add an allocation per connection for nothing.
#[allow(clippy::large_enum_variant)]
pub(super) enum Established {
    /// An HTTP/1.1 upgrade: the WebSocket, and the request it came with.
    WebSocket(WebSocket<TransportStream>, Request<()>),
    /// The client speaks HTTP/2: the stream, what was read of it, and the handshake's deadline
    /// (the HTTP/2 connection preface must arrive by then).
    #[cfg(feature = "http2")]
    Http2(TransportStream, BytesMut, Instant),
    /// The handshake failed (counted in the stats and logged).
    Failed,
}

/// Waits, by `deadline`, until the client has sent its first bytes (a request line, a TLS
/// ClientHello or an HTTP/2 preface), before any of the handshake's state is made: a connection
/// that has said nothing yet holds its socket and its task, not the ~6 KiB of the handshake
/// (TLS, the HTTP/2 sniff, the upgrade). Clients that open many connections before sending on
/// any (Python's `websockets` under `asyncio.gather`, a slowloris) otherwise left that state's
/// allocations between each connection's lasting ones, where the allocator kept the holes:
/// 8.5 KiB of RSS per idle connection against 3.0 once waiting here (`bench/idle_python.py`,
/// 2,000 connections). `false` when the client closed, failed or ran out of time first
/// (counted in `stats`).
pub(super) async fn first_bytes(
    stream: &tokio::net::TcpStream,
    peer: SocketAddr,
    deadline: Instant,
    stats: &ServerStats,
) -> bool {
    // A peek leaves the bytes for the handshake to read. (`readable()` is no substitute: it can
    // report readiness before any byte has arrived.)
    let peek = async {
        match stream.peek(&mut [0u8; 1]).await {
            Ok(0) => Err(Error::Io(std::io::ErrorKind::UnexpectedEof.into())),
            Ok(_) => Ok(()),
            Err(e) => Err(Error::Io(e)),
        }
    };
    match with_deadline_at(deadline, TimeoutCause::Handshake, peek).await {
        Ok(()) => true,
        Err(e) => {
            stats.handshake_failed(peer, "waiting for the client's first bytes", &e);
            false
        }
    }
}

/// A new connection's handshakes: TCP_NODELAY, TLS, the HTTP/2 sniff, then the HTTP/1.1 upgrade,
/// all by `deadline`, one handshake timeout from the accept (each phase with a timeout of its
/// own would let a slow client take a multiple of it). Failures are counted in `stats`.
pub(super) async fn establish(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    deadline: Instant,
    config: &Config,
    stats: &ServerStats,
    #[cfg(feature = "tls")] tls: Option<Arc<rustls::ServerConfig>>,
) -> Established {
    if let Err(e) = stream.set_nodelay(config.tcp_nodelay) {
        stats.handshake_failed(peer, "TCP_NODELAY", &e);
        return Established::Failed;
    }
    #[cfg(feature = "tls")]
    let stream = match tls {
        Some(tls_config) => {
            let handshake = async {
                let mut tls = Box::new(
                    crate::tls::stream::connection::ServerTlsStream::server(stream, tls_config)
                        .map_err(|e| Error::Tls(crate::tls::error::TlsError::from_rustls(&e)))?,
                );
                tls.handshake().await?;
                Ok::<_, Error>(tls)
            };
            match with_deadline_at(deadline, TimeoutCause::Handshake, handshake).await {
                Ok(tls) => TransportStream::ServerTls(tls),
                Err(e) => {
                    stats.handshake_failed(peer, "TLS handshake", &e);
                    return Established::Failed;
                }
            }
        }
        None => TransportStream::Plain(stream),
    };
    #[cfg(not(feature = "tls"))]
    let stream = TransportStream::Plain(stream);
    match sniff_then_upgrade(stream, config, deadline, |_, response| Ok(response)).await {
        Ok(established) => established,
        Err(e) => {
            stats.handshake_failed(peer, "WebSocket handshake", &e);
            Established::Failed
        }
    }
}

/// The HTTP/2 sniff, then the HTTP/1.1 upgrade answered by `decide`, both by `deadline`: an
/// HTTP/2 client is handed back with what was read of it, never `Established::Failed`.
pub(super) async fn sniff_then_upgrade<F>(
    stream: TransportStream,
    config: &Config,
    deadline: Instant,
    decide: F,
) -> Result<Established, Error>
where
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    let upgrade = async {
        #[allow(unused_mut)]
        let mut stream = stream;
        // Cleartext HTTP/2 starts with its preface, HTTP/1.1 with a request line: the first
        // bytes read tell them apart and go on to whichever protocol it is.
        #[allow(unused_mut)]
        let mut head = BytesMut::with_capacity(1024);
        #[cfg(feature = "http2")]
        if config.accept_http2 && crate::http2::sniff::speaks_http2(&mut stream, &mut head).await {
            return Ok(Established::Http2(stream, head, deadline));
        }
        let (ws, request) = accept_buffered(stream, head, config, decide).await?;
        Ok(Established::WebSocket(ws, request))
    };
    with_deadline_at(deadline, TimeoutCause::Handshake, upgrade).await
}
