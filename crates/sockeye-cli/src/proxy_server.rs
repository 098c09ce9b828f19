//! `proxy_server`: a WebSocket reverse proxy.
//!
//! Each client accepted (HTTP/1.1 or HTTP/2, ws:// or wss://) is connected to an upstream: the
//! `--remote_host` base URL, or the one its `Host` header names in the `--config_path` file, with
//! the client's path and query appended. Messages are relayed both ways as they arrive, whole
//! (fragmented messages are reassembled by the library and sent on as one), with their kind and
//! payload unchanged. Each side's library answers its own pings; close frames are forwarded with
//! their code and reason. Backpressure is end to end: a message is read from one side only once
//! the previous one is queued below the other side's high-water mark.
//!
//! The client's handshake is answered before the upstream is reached (the server hands the
//! connection over after its `101`), so the client's subprotocol offer is forwarded upstream but
//! the upstream's choice cannot be named in the client's `101`.
//!
//! Closing is end to end too: both sides run with the library's `auto_close_reply` off, so a
//! close from one side is forwarded to the other and answered only with the other side's answer
//! — what the upstream still sends after a client's close (the echoes of its last messages)
//! reaches the client before the close, as from a direct server (RFC 6455 §5.5.1 lets an
//! endpoint finish what it is sending before it answers; the library answers by itself if the
//! other side takes longer than the close timeout). A side that breaks the protocol is failed at
//! once (§7.1.7), with what was still on its way to it lost: that is what failing means.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use futures_util::FutureExt;
use http::header::{self, HeaderName, HeaderValue};
use http::{Request, Uri};
use sockeye::tls::ClientTlsOptions;
use sockeye::{CloseCode, CloseFrame, Config, ErrorKind, Message, WebSocketReader, WebSocketWriter};
use tokio::io::{AsyncRead, AsyncWrite};

use crate::close::short_close;
use crate::failure::{Failure, usage_file};
use crate::interrupt::serve_until_stopped;
use crate::opts::{ServerOpts, websocket_url};
use crate::output::errln;
use crate::ready::Ready;
use crate::tls::bind;

/// 1014: the server, a gateway, got an invalid response from upstream (RFC 6455 §7.4, IANA).
const BAD_GATEWAY: CloseCode = CloseCode(1014);

/// Examples and exit codes, after `ws proxy_server --help`.
pub(crate) const AFTER_HELP: &str = "\
Examples:
  ws proxy_server --port 8008 --remote_host ws://127.0.0.1:9000
  ws proxy_server --config_path proxyConfig.json
      with proxyConfig.json: {\"remote_urls\": {\"echo.example.com\": \"ws://127.0.0.1:9000\",
                              \"chat.example.com:8008\": \"wss://10.0.0.2/chat\",
                              \"default\": \"ws://127.0.0.1:9001\"}}
  ws proxy_server --tls --cert-file cert.pem --key-file key.pem --remote_host wss://backend --ca-file ca.pem

A client whose Host has no route, or whose upstream cannot be reached, is closed with 1014 (bad
gateway) and a reason; an upstream lost mid-connection closes the client with 1011.

Exit codes: 0 stopped by Ctrl-C or SIGTERM, 1 failed (cannot listen, TLS files), 2 usage (no
--remote_host nor --config_path, unreadable or invalid config file), 130 interrupted again.";

/// `proxy_server`.
#[derive(Debug, Args)]
pub struct ProxyServerArgs {
    #[command(flatten)]
    pub server: ServerOpts,
    /// Upstream ws:// or wss:// base URL every client is forwarded to (the client's path and
    /// query are appended).
    #[arg(long = "remote_host", value_parser = websocket_url, conflicts_with = "config_path")]
    pub remote_host: Option<String>,
    /// JSON file routing by the client's Host header (with its port, then without, then
    /// "default"): {"remote_urls": {"HOST[:PORT]": "ws://…", "default": "ws://…"}}.
    #[arg(long = "config_path")]
    pub config_path: Option<PathBuf>,
    /// Trust the CA certificates in this PEM file for wss:// upstreams (besides the system's).
    #[arg(long = "ca-file")]
    pub ca_file: Option<PathBuf>,
    /// Accept any upstream certificate (testing only).
    #[arg(long = "verify_none")]
    pub verify_none: bool,
    /// The largest message relayed, in bytes, each way (larger ones close the sender with 1009).
    #[arg(long = "max-message-size", default_value_t = 64 << 20, value_parser = at_least_one)]
    pub max_message_size: usize,
}

fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(0) => Err("must be at least 1".into()),
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// Where clients go.
#[derive(Debug)]
enum Routes {
    /// `--remote_host`: everyone to one base URL.
    All(String),
    /// `--config_path`: by Host header, keys in lower case.
    ByHost(HashMap<String, String>),
}

impl Routes {
    fn from_args(args: &ProxyServerArgs) -> Result<Routes, Failure> {
        match (&args.remote_host, &args.config_path) {
            (Some(url), None) => Ok(Routes::All(url.clone())),
            (None, Some(path)) => load_config(path).map(Routes::ByHost),
            _ => Err(Failure::usage(
                "proxy_server needs --remote_host URL or --config_path FILE (see --help)",
            )),
        }
    }

    /// The upstream base URL for a client whose Host header (or HTTP/2 authority) is `host`:
    /// `host` as given, then without its port, then "default".
    fn upstream(&self, host: Option<&str>) -> Option<&str> {
        match self {
            Routes::All(url) => Some(url),
            Routes::ByHost(map) => {
                let host = host.map(|h| h.trim().to_ascii_lowercase());
                let exact = host.as_deref().and_then(|h| map.get(h));
                let bare = host.as_deref().map(without_port).and_then(|h| map.get(h));
                exact.or(bare).or_else(|| map.get("default")).map(String::as_str)
            }
        }
    }

    fn any_secure(&self) -> bool {
        let secure = |url: &String| url.get(..6).is_some_and(|s| s.eq_ignore_ascii_case("wss://"));
        match self {
            Routes::All(url) => secure(url),
            Routes::ByHost(map) => map.values().any(secure),
        }
    }
}

/// `host:port` → `host`; `[::1]:8008` → `[::1]`; anything else as is.
fn without_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((name, port))
            if !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
                && (!name.contains(':') || name.ends_with(']')) =>
        {
            name
        }
        _ => host,
    }
}

/// Reads IXWebSocket's routing file: `{"remote_urls": {"host[:port]": "ws://…", …}}`. Every
/// mistake is a usage error that names the file and the line or key.
fn load_config(path: &Path) -> Result<HashMap<String, String>, Failure> {
    let shown = path.display();
    let text =
        std::fs::read_to_string(path).map_err(|e| Failure::usage(format!("--config_path {shown}: {e}")))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        Failure::usage(format!(
            "--config_path {shown}: not valid JSON at line {}, column {}: {e}",
            e.line(),
            e.column()
        ))
    })?;
    let Some(urls) = value.get("remote_urls") else {
        return Err(Failure::usage(format!(
            "--config_path {shown}: no \"remote_urls\" object (expected {{\"remote_urls\": {{\"HOST\": \"ws://…\"}}}})"
        )));
    };
    let Some(urls) = urls.as_object() else {
        return Err(Failure::usage(format!(
            "--config_path {shown}: \"remote_urls\" must be an object mapping hosts to URLs"
        )));
    };
    if urls.is_empty() {
        return Err(Failure::usage(format!(
            "--config_path {shown}: \"remote_urls\" is empty: no client could be routed"
        )));
    }
    let mut routes = HashMap::with_capacity(urls.len());
    for (host, url) in urls {
        let Some(url) = url.as_str() else {
            return Err(Failure::usage(format!(
                "--config_path {shown}: remote_urls.{host:?}: expected a ws:// or wss:// URL string, found {url}"
            )));
        };
        let url = websocket_url(url).map_err(|e| {
            Failure::usage(format!(
                "--config_path {shown}: remote_urls.{host:?}: {url:?}: {e}"
            ))
        })?;
        routes.insert(host.trim().to_ascii_lowercase(), url);
    }
    Ok(routes)
}

/// The client configurations for upstreams: with and without permessage-deflate (offered
/// upstream only when the client offered it, so that compression is what the client chose).
#[derive(Debug)]
struct Upstream {
    deflate: Config,
    plain: Config,
}

impl Upstream {
    fn new(args: &ProxyServerArgs, routes: &Routes) -> Result<Upstream, Failure> {
        let mut config = Config::default();
        config.protocol.max_message_size = args.max_message_size;
        config.protocol.max_frame_size = args.max_message_size;
        // The upstream's close is answered with the client's answer (see the module's docs).
        config.protocol.auto_close_reply = false;
        // A reverse proxy reaches its upstreams directly, whatever http_proxy says.
        config.proxy = sockeye::proxy::ProxyConfig::Direct;
        if routes.any_secure() {
            let mut tls = ClientTlsOptions {
                danger_accept_invalid_certs: args.verify_none,
                ..Default::default()
            };
            if let Some(ca) = &args.ca_file {
                tls = tls.add_ca_file(ca).map_err(|e| usage_file("--ca-file", ca, e))?;
            }
            config.tls_client = Some(tls.build()?);
        }
        let mut plain = config.clone();
        plain.protocol.deflate = None;
        if args.server.no_deflate {
            config.protocol.deflate = None;
        }
        Ok(Upstream {
            deflate: config,
            plain,
        })
    }
}

pub(crate) async fn server(args: ProxyServerArgs) -> Result<(), Failure> {
    let routes = Arc::new(Routes::from_args(&args)?);
    let upstream = Arc::new(Upstream::new(&args, &routes)?);
    let max = args.max_message_size;
    let server = bind(
        &args.server,
        |c| {
            c.protocol.max_message_size = max;
            c.protocol.max_frame_size = max;
            // The client's close is answered with the upstream's answer (see the module's docs).
            c.protocol.auto_close_reply = false;
        },
        "proxy_server",
    )
    .await?;
    let scheme = if args.server.tls { "https" } else { "http" };
    let quiet = crate::log::quiet();
    let shutdown = server.shutdown_handle();
    let serving = server.serve_requests(move |ws, request, peer| {
        let (routes, upstream) = (Arc::clone(&routes), Arc::clone(&upstream));
        async move {
            let Some(target) = upstream_request(&routes, &request, peer, scheme) else {
                let host = client_host(&request).unwrap_or("(none)").to_string();
                errln!("{peer}: no route for Host {host}");
                close_client(ws, BAD_GATEWAY, &format!("bad gateway: no route for host {host}")).await;
                return;
            };
            let shown = target.uri().to_string();
            let config = if offers_deflate(&request) {
                &upstream.deflate
            } else {
                &upstream.plain
            };
            let upstream_ws = match sockeye::connect_with(target, config).await {
                Ok((upstream_ws, response)) => {
                    if !quiet {
                        let protocol = response
                            .headers()
                            .get(header::SEC_WEBSOCKET_PROTOCOL)
                            .and_then(|v| v.to_str().ok())
                            .map(|p| format!(" (upstream chose subprotocol {p})"))
                            .unwrap_or_default();
                        errln!("{peer}: connected to {shown}{protocol}");
                    }
                    upstream_ws
                }
                Err(e) => {
                    errln!("{peer}: cannot reach {shown}: {e}");
                    close_client(ws, BAD_GATEWAY, &format!("bad gateway: {e}")).await;
                    return;
                }
            };
            let (mut client_tx, mut client_rx) = ws.split();
            let (mut upstream_tx, mut upstream_rx) = upstream_ws.split();
            // Both directions in this one task: when either ends, it closes the other side, and
            // the task ends when both have; nothing is left behind.
            let (from_client, from_upstream) = tokio::join!(
                relay(&mut client_rx, &mut upstream_tx, Direction::FromClient),
                relay(&mut upstream_rx, &mut client_tx, Direction::FromUpstream),
            );
            if !quiet {
                errln!("{peer}: closed (client: {from_client}; upstream: {from_upstream})");
            }
        }
    });
    serve_until_stopped(serving, shutdown).await
}

/// The client's Host header, or its HTTP/2 `:authority`.
fn client_host(request: &Request<()>) -> Option<&str> {
    request
        .headers()
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| request.uri().authority().map(|a| a.as_str()))
}

/// Whether the client offered permessage-deflate.
fn offers_deflate(request: &Request<()>) -> bool {
    request
        .headers()
        .get_all(header::SEC_WEBSOCKET_EXTENSIONS)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("permessage-deflate"))
}

/// Headers of the client's request that concern only the hop to the proxy: the handshake's own
/// (the upstream handshake makes new ones), `Host` (the upstream's is its own) and the HTTP/1.1
/// hop-by-hop headers (RFC 9110 §7.6.1).
const NOT_FORWARDED: [&str; 14] = [
    "host",
    "connection",
    "upgrade",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-extensions",
    "sec-websocket-accept",
    "content-length",
    "transfer-encoding",
    "keep-alive",
    "te",
    "trailer",
    "proxy-connection",
    "proxy-authorization",
];

/// The upstream handshake request for this client: the routed base URL with the client's path
/// and query appended; the client's headers (subprotocols, cookies, authorization, origin…) but
/// the hop's own; and `X-Forwarded-For`, `-Host` and `-Proto`. `None`: no route for its host.
fn upstream_request(
    routes: &Routes,
    request: &Request<()>,
    peer: SocketAddr,
    scheme: &str,
) -> Option<Request<()>> {
    let host = client_host(request);
    let base = routes.upstream(host)?;
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = format!(
        "{}{}",
        base.trim_end_matches('/'),
        if path.is_empty() { "/" } else { path }
    );
    let uri: Uri = url.parse().ok()?;
    let mut upstream = Request::new(());
    *upstream.uri_mut() = uri;
    let hop_by_hop: Vec<String> = request
        .headers()
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_ascii_lowercase())
        .collect();
    let headers = upstream.headers_mut();
    for (name, value) in request.headers() {
        let name_str = name.as_str();
        if NOT_FORWARDED.contains(&name_str) || hop_by_hop.iter().any(|h| h == name_str) {
            continue;
        }
        headers.append(name.clone(), value.clone());
    }
    let forwarded_for = match request
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
    {
        Some(earlier) => format!("{earlier}, {}", peer.ip()),
        None => peer.ip().to_string(),
    };
    let extra = [
        ("x-forwarded-for", Some(forwarded_for)),
        ("x-forwarded-proto", Some(scheme.to_string())),
        ("x-forwarded-host", host.map(str::to_string)),
    ];
    for (name, value) in extra {
        if let Some(value) = value.and_then(|v| HeaderValue::from_str(&v).ok()) {
            headers.insert(HeaderName::from_static(name), value);
        }
    }
    Some(upstream)
}

/// Closes a client that cannot be proxied, and waits (bounded by the close timeout) for its reply.
async fn close_client<S: AsyncRead + AsyncWrite + Unpin>(
    mut ws: sockeye::WebSocket<S>,
    code: CloseCode,
    reason: &str,
) {
    let _ = ws.close(Some(short_close(code, reason))).await;
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    FromClient,
    FromUpstream,
}

/// How one side's connection ended, for the log.
#[derive(Debug)]
enum Ending {
    Closed(Option<CloseFrame>),
    /// Why, and whether the peer broke the protocol (or its compression) rather than went away.
    Failed(String, bool),
}

impl std::fmt::Display for Ending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ending::Closed(Some(frame)) if frame.reason.is_empty() => write!(f, "closed {}", frame.code),
            Ending::Closed(Some(frame)) => write!(f, "closed {} {}", frame.code, frame.reason),
            Ending::Closed(None) => f.write_str("closed without a code"),
            Ending::Failed(e, _) => write!(f, "failed: {e}"),
        }
    }
}

/// Relays `from`'s messages to `to` until `from` ends, then makes sure `to` is closed: with the
/// close frame `from` sent (code and reason as they were; no code stays no code), or, when `from`
/// failed, with a code that may be sent and says what happened.
async fn relay<R, W>(
    from: &mut WebSocketReader<R>,
    to: &mut WebSocketWriter<W>,
    direction: Direction,
) -> Ending
where
    R: AsyncRead + AsyncWrite + Unpin,
    W: AsyncRead + AsyncWrite + Unpin,
{
    // Once `to` refuses a message its connection is over (the other relay sees why and closes
    // ours); what still arrives here is read and dropped until `from` ends.
    let mut to_open = true;
    let mut close: Option<Option<CloseFrame>> = None;
    let mut ready = Ready::all();
    let ending = loop {
        // Messages already read are fed without a write each; the batch is written when
        // `from` has nothing more at hand.
        let next = match ready.next(|| from.recv().now_or_never()) {
            Some(next) => next,
            None => {
                if to_open && to.flush().await.is_err() {
                    to_open = false;
                }
                from.recv().await
            }
        };
        match next {
            Some(Ok(message)) if message.is_data() => {
                if to_open && to.feed(message).await.is_err() {
                    to_open = false;
                }
            }
            Some(Ok(Message::Close(frame))) => {
                // Forwarded at once. If `from` closed first, its answer is owed: `to`'s answer,
                // forwarded by the other relay, completes it; if this is `from`'s answer to a
                // close forwarded to it, it completes `to`'s handshake. `from` ends next.
                if to_open && close.is_none() {
                    let _ = to.close(frame.clone()).await;
                }
                close = Some(frame);
            }
            // Pings are answered by `from`'s own library; pongs answer pings of ours.
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let broken = matches!(e.kind(), ErrorKind::Protocol | ErrorKind::Compression);
                break Ending::Failed(e.to_string(), broken);
            }
            None => {
                break match close.take() {
                    Some(frame) => Ending::Closed(frame),
                    None => Ending::Failed("the connection ended without a close frame".into(), false),
                };
            }
        }
    };
    if let (true, Ending::Failed(why, broken)) = (to_open && close.is_none(), &ending) {
        let frame = match direction {
            // The upstream sees its client go away.
            Direction::FromClient => short_close(CloseCode::GOING_AWAY, &format!("client: {why}")),
            // The client learns that the upstream failed: 1006 on the wire is not allowed
            // (RFC 6455 §7.4.1); a broken upstream is 1014, a lost one 1011.
            Direction::FromUpstream => {
                let code = if *broken {
                    BAD_GATEWAY
                } else {
                    CloseCode::INTERNAL_ERROR
                };
                short_close(code, &format!("upstream: {why}"))
            }
        };
        let _ = to.close(Some(frame)).await;
    }
    ending
}
