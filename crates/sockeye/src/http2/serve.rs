//! Serving one HTTP/2 connection: each extended CONNECT stream becomes a WebSocket for the
//! handler; anything else is refused on its stream alone.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use h2::RecvStream;
use http::{Request, Response};
use sockeye_proto::Role;
use sockeye_proto::handshake::{ClientHello, reject_response};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use super::frame_guard::StreamErrorGuard;
use super::h2_stream::H2Stream;
use super::settings::server_builder;
use crate::config::Config;
use crate::error::{Error, TimeoutCause};
use crate::head::deadline_in;
use crate::shutdown::ShutdownSignal;
use crate::stats::ServerStats;
use crate::stream::TransportStream;
use crate::websocket::WebSocket;
use sockeye_proto::handshake::service_unavailable;

/// What every stream of a served HTTP/2 connection shares (cloned per stream: the handler need
/// not be `Sync`).
#[derive(Clone)]
pub(crate) struct ServeContext<H> {
    pub(crate) config: Arc<Config>,
    pub(crate) shutdown: ShutdownSignal,
    pub(crate) permits: Arc<Semaphore>,
    pub(crate) handler: H,
    pub(crate) peer: SocketAddr,
    pub(crate) stats: ServerStats,
}

/// Serves one HTTP/2 connection (its preface due by `deadline`): each extended CONNECT stream
/// becomes a [`WebSocket`] handed to the handler in its own task; anything else is answered with
/// an HTTP/2 error response on that stream alone. A server shutdown sends GOAWAY (no new streams) while the open WebSockets close
/// with 1001 by themselves; the connection ends when its last stream does.
pub(crate) async fn serve_connection<H, Fut>(
    stream: TransportStream,
    head: BytesMut,
    admitted: bool,
    deadline: tokio::time::Instant,
    context: ServeContext<H>,
) where
    H: Fn(WebSocket<TransportStream>, Request<()>, SocketAddr) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let config = &context.config;
    let tls = stream.is_tls();
    let handshake = server_builder(config).handshake::<_, Bytes>(StreamErrorGuard::new(
        stream,
        head,
        config.http2_max_concurrent_streams,
    ));
    let mut connection = match tokio::time::timeout_at(deadline, handshake).await {
        Ok(Ok(connection)) => connection,
        Ok(Err(e)) => {
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 connection preface", &e);
            return;
        }
        Err(_) => {
            let timeout = Error::timed_out(TimeoutCause::Handshake);
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 connection preface", &timeout);
            return;
        }
    };
    // Over the connection limit (cleartext only: over TLS such a connection is closed before the
    // TLS handshake): no new streams (GOAWAY); any already sent get 503 for want of a permit, and
    // the connection ends with them.
    let mut going_away = !admitted;
    if going_away {
        connection.graceful_shutdown();
    }
    // A connection that carries no WebSocket is a handshake not yet done: like an HTTP/1.1
    // client that sends no request, it is closed after the handshake timeout.
    let idle = tokio::time::sleep(config.handshake_timeout);
    tokio::pin!(idle);
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            _ = context.shutdown.token.cancelled(), if !going_away => {
                connection.graceful_shutdown();
                going_away = true;
            }
            _ = &mut idle, if streams.is_empty() && !going_away => {
                connection.graceful_shutdown();
                going_away = true;
            }
            Some(_) = streams.join_next(), if !streams.is_empty() => {
                if streams.is_empty() {
                    idle.as_mut().reset(deadline_in(config.handshake_timeout));
                }
            }
            next = connection.accept() => match next {
                Some(Ok((request, respond))) => {
                    if let Some((ws, request, permit)) = accept_stream(request, respond, tls, &context) {
                        let handler = context.handler.clone();
                        let peer = context.peer;
                        streams.spawn(async move {
                            handler(ws, request, peer).await;
                            drop(permit);
                        });
                    }
                }
                // A connection error (GOAWAY sent, socket failed) or the end.
                Some(Err(_)) | None => break,
            },
        }
    }
    // The streams' handlers run to their end, as over HTTP/1.1 (their sockets now fail); a
    // server's shutdown deadline still bounds them by aborting this task.
    while streams.join_next().await.is_some() {}
}

/// Answers one stream: a WebSocket, accepted with `200` (RFC 8441 §5) and ready for its handler,
/// or a refusal sent on that stream alone. Runs on the connection's task, so the response goes
/// out with the connection's next write, without waiting for a task of its own to be scheduled.
fn accept_stream<H>(
    request: Request<RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    tls: bool,
    context: &ServeContext<H>,
) -> Option<(
    WebSocket<TransportStream>,
    Request<()>,
    tokio::sync::OwnedSemaphorePermit,
)> {
    let (parts, recv) = request.into_parts();
    let protocol = parts.extensions.get::<h2::ext::Protocol>().map(|p| p.as_str());
    let hello = match ClientHello::from_extended_connect(&parts.method, protocol, &parts.headers) {
        Ok(hello) => hello,
        Err(e) => {
            refuse(&mut respond, reject_response(&e));
            let e = Error::from(e);
            context
                .stats
                .handshake_failed(context.peer, "HTTP/2 extended CONNECT", &e);
            return None;
        }
    };
    let Ok(permit) = Arc::clone(&context.permits).try_acquire_owned() else {
        refuse(&mut respond, service_unavailable());
        context.stats.refused_one();
        tracing::debug!(peer = %context.peer, "over max_connections: HTTP/2 stream refused");
        return None;
    };
    let config = &context.config;
    let (response, extensions) = hello.accept_with(&config.protocol);
    let deflate = extensions.kept_by(&response);
    let send = respond.send_response(response, false).ok()?;
    let stream = H2Stream::new(send, recv, tls, config.protocol.close_timeout, None);
    let mut ws = WebSocket::from_upgraded(TransportStream::Http2(stream), Role::Server, config, &[], deflate);
    ws.set_close_signal(context.shutdown.watch());
    Some((ws, Request::from_parts(parts, ()), permit))
}

/// Answers a refused stream with an HTTP/2 response carrying the refusal's status and text.
fn refuse(respond: &mut h2::server::SendResponse<Bytes>, refusal: Response<String>) {
    let (mut parts, body) = refusal.into_parts();
    parts.headers.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    if let Ok(mut send) = respond.send_response(Response::from_parts(parts, ()), body.is_empty()) {
        let _ = send.send_data(Bytes::from(body), true);
    }
}
