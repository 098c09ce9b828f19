//! Connecting to a URL: the host resolved and tried address by address, or a tunnel through the
//! proxy; TLS for `wss://` (SNI and certificates checked against the URL's host); then the
//! handshake over HTTP/1.1, or over HTTP/2 on a pooled or new connection (RFC 8441), all within
//! the handshake timeout.

use http::Response;
// Named by the HTTP/2 path and by the TLS-less build's refusal of `wss://`.
#[cfg(any(feature = "http2", not(feature = "tls")))]
use sockeye_proto::HandshakeError;
use sockeye_proto::handshake::url_target;
use tokio::net::TcpStream;
use tokio::time::Instant;

use super::handshake::client_handshake;
use super::request::IntoClientRequest;
use crate::config::Config;
use crate::error::{Error, TimeoutCause};
use crate::head::{deadline_in, with_deadline};
use crate::proxy::config::{Proxy, ProxyConfig};
use crate::proxy::tunnel::{authority, with_context};
use crate::stream::TransportStream;
use crate::websocket::WebSocket;

/// Connects to a `ws://` URL with the default [`Config`].
///
/// URLs: `ws://` and `wss://`, schemes in any case (RFC 3986 §3.1). As in the WHATWG WebSocket
/// constructor (what browsers do), `http://` is taken as `ws://` and `https://` as `wss://`. Any
/// other scheme, no host, or a port that is not a number from 0 to 65535 is
/// [`HandshakeError::InvalidUrl`](sockeye_proto::HandshakeError::InvalidUrl) before any connection is attempted.
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
) -> Result<(WebSocket<TransportStream>, Response<()>), Error> {
    connect_with(request, &Config::default()).await
}

/// Connects with a [`Config`]: resolves the host, tries each address (IPv6 and IPv4) in turn —
/// or opens a tunnel through the proxy [`Config::proxy`] names —, sets `TCP_NODELAY` as
/// configured, negotiates TLS for `wss://` (SNI and certificate checks against the URL's host,
/// end to end through a proxy), and performs the handshake, all within `handshake_timeout`.
///
/// A connection that cannot be made — refused, unreachable, no answer within the timeout, a host
/// that does not resolve — is an [`Error::Io`] whose message names the address tried, and the
/// proxy when there was one (a timeout there has kind `TimedOut`; later in the handshake, it is
/// an error whose [`Error::timeout`] is `Some(TimeoutCause::Handshake)`).
pub async fn connect_with(
    request: impl IntoClientRequest,
    config: &Config,
) -> Result<(WebSocket<TransportStream>, Response<()>), Error> {
    let request = request.into_client_request()?;
    // Checked before anything is opened: scheme (any case), host, and a port that is a number.
    let target = url_target(request.uri())?;
    let (tls, port) = (target.secure, target.port());
    let host = target.host_name().to_string();
    // Taken before the overall deadline starts, so that the connection's own deadline (which
    // names the address) is never later than it.
    let deadline = deadline_in(config.handshake_timeout);
    with_deadline(config.handshake_timeout, TimeoutCause::Handshake, async {
        let proxy = match &config.proxy {
            ProxyConfig::Direct => None,
            ProxyConfig::Url(proxy) => Some(proxy.clone()),
            ProxyConfig::Environment => Proxy::from_env(tls, &host)?,
        };
        let target = Target {
            tls,
            host: &host,
            port,
            proxy: proxy.as_ref(),
            deadline,
        };
        #[cfg(feature = "http2")]
        if config.http_version != crate::config::HttpVersion::Http1 {
            return connect_http2(request, &target, config).await;
        }
        let stream = open_transport(&target, config, HTTP1_ALPN).await?;
        client_handshake(stream, request, config).await
    })
    .await
}

/// What an HTTP/1.1 upgrade offers by ALPN, whatever the TLS configuration offers otherwise (one
/// shared with an HTTP client may offer `h2`, which a server would then pick).
const HTTP1_ALPN: &[&[u8]] = &[b"http/1.1"];

/// Where a client connects: the URL's origin and the proxy on the way.
struct Target<'a> {
    tls: bool,
    host: &'a str,
    port: u16,
    proxy: Option<&'a Proxy>,
    /// When the connection (TCP, and the proxy's tunnel) must be up.
    deadline: Instant,
}

/// TCP (directly or through the proxy), `TCP_NODELAY`, and TLS for `wss://` offering `alpn`.
async fn open_transport(
    target: &Target<'_>,
    config: &Config,
    alpn: &[&[u8]],
) -> Result<TransportStream, Error> {
    let connecting = async {
        match target.proxy {
            Some(proxy) => proxy.connect(target.host, target.port).await,
            None => TcpStream::connect((target.host, target.port))
                .await
                .map_err(|e| with_context(e, format_args!("connecting to {}", target.authority())).into()),
        }
    };
    let tcp = match tokio::time::timeout_at(target.deadline, connecting).await {
        Ok(tcp) => tcp?,
        Err(_) => {
            let (to, within) = (target.authority(), config.handshake_timeout);
            let message = match target.proxy {
                Some(proxy) => format!(
                    "connecting to {to} through the proxy {}: no tunnel within {within:?}",
                    proxy.authority()
                ),
                None => format!("connecting to {to}: no answer within {within:?}"),
            };
            return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, message).into());
        }
    };
    tcp.set_nodelay(config.tcp_nodelay)?;
    if target.tls {
        wrap_tls(tcp, target.host, config, alpn).await
    } else {
        Ok(TransportStream::Plain(tcp))
    }
}

impl Target<'_> {
    /// `host:port`, with an IPv6 address in brackets.
    fn authority(&self) -> String {
        authority(self.host, self.port)
    }
}

/// A WebSocket over HTTP/2 (RFC 8441): on a pooled connection to the origin if one is up, else
/// on a new one — falling back to HTTP/1.1 on that same connection when the server's ALPN says
/// so and [`HttpVersion::Http2Preferred`](crate::HttpVersion) allows it.
#[cfg(feature = "http2")]
async fn connect_http2(
    request: http::Request<()>,
    target: &Target<'_>,
    config: &Config,
) -> Result<(WebSocket<TransportStream>, Response<()>), Error> {
    use crate::config::HttpVersion;
    use crate::http2::client::{client_alpn, connect_new, connect_pooled};
    use crate::http2::pool::PoolKey;
    let only = config.http_version == HttpVersion::Http2Only;
    if !target.tls && !only {
        // Cleartext HTTP/2 needs prior knowledge, which only `Http2Only` asserts.
        let stream = open_transport(target, config, HTTP1_ALPN).await?;
        return client_handshake(stream, request, config).await;
    }
    let key = PoolKey {
        tls: target.tls,
        host: target.host.to_string(),
        port: target.port,
        proxy: target.proxy.map(|p| format!("{p:?}")).unwrap_or_default(),
        #[cfg(feature = "tls")]
        tls_config: config.tls_client.clone(),
    };
    if let Some(connected) = connect_pooled(&key, &request, config).await? {
        return Ok(connected);
    }
    let stream = match open_transport(target, config, client_alpn(config.http_version)).await {
        // A server that speaks no protocol we offered ends the TLS handshake with this alert.
        #[cfg(feature = "tls")]
        Err(Error::Tls(e))
            if only
                && matches!(&e.kind, crate::tls::error::TlsErrorKind::AlertReceived(a) if a == "NoApplicationProtocol") =>
        {
            return Err(HandshakeError::Http2Unavailable("the server did not choose h2 by ALPN").into());
        }
        result => result?,
    };
    if target.tls && !crate::http2::sniff::alpn_is_h2(&stream) {
        if only {
            return Err(HandshakeError::Http2Unavailable("the server did not choose h2 by ALPN").into());
        }
        return client_handshake(stream, request, config).await;
    }
    match connect_new(stream, key, request.clone(), config).await {
        Err(e) if !only && matches!(e.handshake_error(), Some(HandshakeError::Http2Unavailable(_))) => {
            // h2 without RFC 8441: a new connection that offers HTTP/1.1 alone.
            let stream = open_transport(target, config, client_alpn(HttpVersion::Http1)).await?;
            client_handshake(stream, request, config).await
        }
        result => result,
    }
}

#[cfg(feature = "tls")]
async fn wrap_tls(
    tcp: TcpStream,
    host: &str,
    config: &Config,
    alpn: &[&[u8]],
) -> Result<TransportStream, Error> {
    let tls_config = match &config.tls_client {
        Some(c) => c.clone(),
        None => crate::tls::client::default_client_config()?,
    };
    let tls_config = crate::tls::client::with_alpn(tls_config, alpn);
    let mut tls = Box::new(
        crate::tls::stream::connection::ClientTlsStream::client(
            tcp,
            tls_config,
            crate::tls::client::server_name(host)?,
        )
        .map_err(|e| Error::Tls(crate::tls::error::TlsError::from_rustls(&e)))?,
    );
    // The server's first bytes are looked at (peeked, left for rustls) before rustls reads them:
    // a plain HTTP server answers our ClientHello with an HTTP error, which rustls would only
    // call an invalid record.
    let mut first_bytes_seen = false;
    std::future::poll_fn(|cx| {
        if !first_bytes_seen {
            let mut first = [0u8; 5];
            let mut first = tokio::io::ReadBuf::new(&mut first);
            match tls.get_ref().poll_peek(cx, &mut first) {
                std::task::Poll::Ready(Ok(_)) => {
                    first_bytes_seen = true;
                    if crate::tls::client::looks_like_http(first.filled()) {
                        return std::task::Poll::Ready(Err(
                            crate::tls::error::TlsError::plain_http_server().into()
                        ));
                    }
                }
                std::task::Poll::Ready(Err(_)) => first_bytes_seen = true,
                std::task::Poll::Pending => {}
            }
        }
        tls.poll_handshake(cx).map_err(Error::from)
    })
    .await?;
    Ok(TransportStream::ClientTls(tls))
}

#[cfg(not(feature = "tls"))]
async fn wrap_tls(_: TcpStream, _: &str, _: &Config, _: &[&[u8]]) -> Result<TransportStream, Error> {
    Err(HandshakeError::InvalidUrl("wss:// needs the `tls` feature, which this build lacks".into()).into())
}
