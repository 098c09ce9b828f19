//! Accepting connections as a server (RFC 6455 §4.2).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use http::header::SEC_WEBSOCKET_EXTENSIONS;
use http::{HeaderValue, Request, Response};
use sockeye_proto::extension;
use sockeye_proto::handshake::{ClientHello, encode_response, parse_request, reject_response};
use sockeye_proto::{HandshakeError, Role};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, ToSocketAddrs};

use crate::config::Config;
use crate::error::Error;
use crate::stream::MaybeTlsStream;
use crate::websocket::{WebSocket, with_deadline};

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
pub async fn accept_with<S, F>(mut stream: S, config: &Config, decide: F) -> Result<WebSocket<S>, Error>
where
    S: AsyncRead + AsyncWrite + Unpin,
    F: FnOnce(&Request<()>, Response<()>) -> Result<Response<()>, Response<String>>,
{
    with_deadline(config.handshake_timeout, "handshake", async {
        let mut buf = BytesMut::with_capacity(1024);
        let (request, n) = loop {
            if stream.read_buf(&mut buf).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the client closed the connection during the handshake",
                )
                .into());
            }
            match parse_request(&buf, &config.protocol) {
                Ok(Some(parsed)) => break parsed,
                Ok(None) => {}
                Err(e) => return refuse(&mut stream, e).await,
            }
        };
        let hello = match ClientHello::from_request(&request) {
            Ok(hello) => hello,
            Err(e) => return refuse(&mut stream, e).await,
        };
        let mut response = hello.accept();
        let mut deflate = extension::server_accept(&config.protocol, &hello.extensions);
        if let Some((_, value)) = &deflate
            && let Ok(value) = HeaderValue::from_str(value)
        {
            response.headers_mut().insert(SEC_WEBSOCKET_EXTENSIONS, value);
        }
        match decide(&request, response) {
            Ok(response) => {
                // `decide` may have removed the extension to refuse compression for this client.
                let kept = response
                    .headers()
                    .get(SEC_WEBSOCKET_EXTENSIONS)
                    .and_then(|v| v.to_str().ok());
                if deflate.as_ref().map(|(_, value)| value.as_str()) != kept {
                    deflate = None;
                }
                stream.write_all(&encode_response(&response)).await?;
                stream.flush().await?;
                let deflate = deflate.map(|(state, _)| state);
                Ok(WebSocket::from_upgraded(
                    stream,
                    Role::Server,
                    config,
                    &buf[n..],
                    deflate,
                ))
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
    })
    .await
}

async fn refuse<S: AsyncWrite + Unpin, T>(stream: &mut S, error: HandshakeError) -> Result<T, Error> {
    send_and_close(stream, &encode_response(&reject_response(&error))).await;
    Err(error.into())
}

/// Sends an HTTP refusal and closes; errors are ignored, as the connection is being dropped anyway.
async fn send_and_close<S: AsyncWrite + Unpin>(stream: &mut S, bytes: &[u8]) {
    let _ = stream.write_all(bytes).await;
    let _ = stream.shutdown().await;
}

/// A TCP listener that accepts WebSocket connections and hands each to a handler in its own task.
///
/// ```no_run
/// use futures_util::{SinkExt, StreamExt};
/// # async fn run() -> std::io::Result<()> {
/// let server = sockeye::Server::bind("127.0.0.1:8008", sockeye::Config::default()).await?;
/// server
///     .serve(|mut ws, _peer| async move {
///         // Echo: `feed` queues; the queue is written when the input runs dry.
///         while let Some(Ok(message)) = ws.next().await {
///             if message.is_data() && ws.feed(message).await.is_err() {
///                 break;
///             }
///         }
///     })
///     .await
/// # }
/// ```
pub struct Server {
    listener: TcpListener,
    config: Arc<Config>,
    #[cfg(feature = "tls")]
    tls: Option<crate::tls::TlsAcceptor>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Server");
        d.field("listener", &self.listener).field("config", &self.config);
        #[cfg(feature = "tls")]
        d.field("tls", &self.tls.is_some());
        d.finish()
    }
}

impl Server {
    /// Binds a listener (IPv4 or IPv6 address, or a host name).
    pub async fn bind(addr: impl ToSocketAddrs, config: Config) -> std::io::Result<Server> {
        Ok(Self::from_listener(TcpListener::bind(addr).await?, config))
    }

    /// Wraps a listener you bound yourself.
    pub fn from_listener(listener: TcpListener, config: Config) -> Server {
        Server {
            listener,
            config: Arc::new(config),
            #[cfg(feature = "tls")]
            tls: None,
        }
    }

    /// Serves `wss://`: every connection negotiates TLS with `acceptor` first (within the
    /// handshake timeout). See [`ServerTls`](crate::tls::ServerTls), or bring your own acceptor.
    #[cfg(feature = "tls")]
    pub fn with_tls(mut self, acceptor: crate::tls::TlsAcceptor) -> Server {
        self.tls = Some(acceptor);
        self
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections forever, runs the handshake for each in a new task, and calls `handler`
    /// with each established connection. Failed handshakes are answered and dropped.
    pub async fn serve<H, Fut>(self, handler: H) -> std::io::Result<()>
    where
        H: Fn(WebSocket<MaybeTlsStream>, SocketAddr) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.serve_requests(move |ws, _request, peer| handler(ws, peer))
            .await
    }

    /// [`serve`](Self::serve), with the handshake request (path, query, headers) handed to the
    /// handler too, for decisions made after the upgrade.
    pub async fn serve_requests<H, Fut>(self, handler: H) -> std::io::Result<()>
    where
        H: Fn(WebSocket<MaybeTlsStream>, Request<()>, SocketAddr) -> Fut + Clone + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        loop {
            let (stream, peer) = match self.listener.accept().await {
                Ok(accepted) => accepted,
                // Out of file descriptors or a connection reset before accept: keep serving.
                Err(e) if is_transient_accept_error(&e) => {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let config = Arc::clone(&self.config);
            let handler = handler.clone();
            #[cfg(feature = "tls")]
            let tls = self.tls.clone();
            tokio::spawn(async move {
                if stream.set_nodelay(config.tcp_nodelay).is_err() {
                    return;
                }
                #[cfg(feature = "tls")]
                let stream = match tls {
                    Some(acceptor) => {
                        let handshake = async { acceptor.accept(stream).await.map_err(Error::from) };
                        match with_deadline(config.handshake_timeout, "handshake", handshake).await {
                            Ok(tls) => MaybeTlsStream::ServerTls(tls),
                            Err(_) => return,
                        }
                    }
                    None => MaybeTlsStream::Plain(stream),
                };
                #[cfg(not(feature = "tls"))]
                let stream = MaybeTlsStream::Plain(stream);
                let mut request = None;
                let accepted = accept_with(stream, &config, |req, response| {
                    request = Some(req.clone());
                    Ok(response)
                })
                .await;
                if let (Ok(ws), Some(request)) = (accepted, request) {
                    handler(ws, request, peer).await;
                }
            });
        }
    }
}

fn is_transient_accept_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::*;
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionReset | Interrupted | WouldBlock
    ) || matches!(e.raw_os_error(), Some(23 | 24)) // ENFILE, EMFILE
}
