//! Opening a connection as a client (RFC 6455 §4.1).

use bytes::BytesMut;
use http::header::SEC_WEBSOCKET_EXTENSIONS;
use http::{HeaderValue, Request, Response, Uri};
use sockeye_proto::Role;
use sockeye_proto::extension;
use sockeye_proto::handshake::ClientHandshake;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::config::Config;
use crate::error::Error;
use crate::proxy::{Proxy, ProxyConfig};
use crate::stream::MaybeTlsStream;
use crate::websocket::{WebSocket, with_deadline};
use sockeye_proto::HandshakeError;

/// Something that can become a handshake request: a URL (`&str`, `String`, [`Uri`]) or a full
/// [`http::Request`] with headers of your own (subprotocols, cookies, authorization, origin).
pub trait IntoClientRequest {
    /// The request.
    fn into_client_request(self) -> Result<Request<()>, Error>;
}

impl IntoClientRequest for &str {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        let uri: Uri = self
            .parse()
            .map_err(|e| HandshakeError::InvalidUrl(format!("{self:?}: {e}")))?;
        uri.into_client_request()
    }
}

impl IntoClientRequest for String {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for &String {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        self.as_str().into_client_request()
    }
}

impl IntoClientRequest for Uri {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        let mut request = Request::new(());
        *request.uri_mut() = self;
        Ok(request)
    }
}

impl IntoClientRequest for Request<()> {
    fn into_client_request(self) -> Result<Request<()>, Error> {
        Ok(self)
    }
}

/// Connects to a `ws://` URL with the default [`Config`].
///
/// ```no_run
/// # async fn run() -> Result<(), sockeye::Error> {
/// let (mut ws, _response) = sockeye::connect("ws://127.0.0.1:8008/").await?;
/// ws.send("hello").await?;
/// if let Some(Ok(reply)) = ws.recv().await {
///     println!("{reply:?}");
/// }
/// ws.close(None).await?;
/// # Ok(()) }
/// ```
pub async fn connect(
    request: impl IntoClientRequest,
) -> Result<(WebSocket<MaybeTlsStream>, Response<()>), Error> {
    connect_with(request, &Config::default()).await
}

/// Connects with a [`Config`]: resolves the host, tries each address (IPv6 and IPv4) in turn —
/// or opens a tunnel through the proxy [`Config::proxy`] names —, sets `TCP_NODELAY` as
/// configured, negotiates TLS for `wss://` (SNI and certificate checks against the URL's host,
/// end to end through a proxy), and performs the handshake, all within `handshake_timeout`.
pub async fn connect_with(
    request: impl IntoClientRequest,
    config: &Config,
) -> Result<(WebSocket<MaybeTlsStream>, Response<()>), Error> {
    let request = request.into_client_request()?;
    let uri = request.uri();
    let (tls, port) = match uri.scheme_str() {
        Some("ws" | "http") => (false, uri.port_u16().unwrap_or(80)),
        Some("wss" | "https") => (true, uri.port_u16().unwrap_or(443)),
        _ => return Err(HandshakeError::InvalidUrl(format!("{uri}: expected a ws:// or wss:// URL")).into()),
    };
    let host = uri
        .host()
        .ok_or_else(|| HandshakeError::InvalidUrl(format!("{uri}: no host")))?;
    // `Uri::host` keeps the brackets of an IPv6 literal.
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    with_deadline(config.handshake_timeout, "handshake", async {
        let proxy = match &config.proxy {
            ProxyConfig::Direct => None,
            ProxyConfig::Url(proxy) => Some(proxy.clone()),
            ProxyConfig::Environment => Proxy::from_env(tls, &host)?,
        };
        let tcp = match proxy {
            Some(proxy) => proxy.connect(&host, port).await?,
            None => TcpStream::connect((host.as_str(), port)).await?,
        };
        tcp.set_nodelay(config.tcp_nodelay)?;
        let stream = if tls {
            wrap_tls(tcp, &host, config).await?
        } else {
            MaybeTlsStream::Plain(tcp)
        };
        client_handshake(stream, request, config).await
    })
    .await
}

#[cfg(feature = "tls")]
async fn wrap_tls(tcp: TcpStream, host: &str, config: &Config) -> Result<MaybeTlsStream, Error> {
    let tls_config = match &config.tls_client {
        Some(c) => c.clone(),
        None => crate::tls::default_client_config()?,
    };
    let connector = crate::tls::TlsConnector::from(tls_config);
    let stream = connector
        .connect(crate::tls::server_name(host)?, tcp)
        .await
        .map_err(Error::from)?;
    Ok(MaybeTlsStream::ClientTls(stream))
}

#[cfg(not(feature = "tls"))]
async fn wrap_tls(_: TcpStream, _: &str, _: &Config) -> Result<MaybeTlsStream, Error> {
    Err(HandshakeError::InvalidUrl("wss:// needs the `tls` feature, which this build lacks".into()).into())
}

/// Performs the client handshake over a stream you connected yourself (through a proxy, over TLS,
/// over a Unix socket...). `request`'s URL supplies the path and the `Host` header.
pub async fn client_handshake<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: impl IntoClientRequest,
    config: &Config,
) -> Result<(WebSocket<S>, Response<()>), Error> {
    let mut request = request.into_client_request()?;
    let headers = request.headers_mut();
    if !headers.contains_key(SEC_WEBSOCKET_EXTENSIONS)
        && let Some(offer) = extension::client_offer(&config.protocol)
        && let Ok(value) = HeaderValue::from_str(&offer)
    {
        headers.insert(SEC_WEBSOCKET_EXTENSIONS, value);
    }
    let handshake = ClientHandshake::new(request, rand::random())?;
    stream.write_all(&handshake.encode_request()).await?;
    stream.flush().await?;
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the server closed the connection during the handshake",
            )
            .into());
        }
        if let Some((response, n)) = handshake.parse_response(&buf, &config.protocol)? {
            let deflate = extension::client_accept(&config.protocol, response.headers())?;
            let ws = WebSocket::from_upgraded(stream, Role::Client, config, &buf[n..], deflate);
            return Ok((ws, response));
        }
    }
}
