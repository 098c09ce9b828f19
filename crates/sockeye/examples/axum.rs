//! axum: one server for a web page and its WebSocket, over HTTP/1.1 and HTTP/2 alike. The page
//! (at `/`) opens sockets to `/ws` (`?sockets=N`, default 1), echoes text and binary messages of
//! several sizes through each with permessage-deflate, and writes PASS or FAIL into the page —
//! the Chromium interop test loads it headless.
//!
//! ```sh
//! cargo run --example axum --features axum -- 127.0.0.1:8080                       # http://, h2c too
//! cargo run --example axum --features axum -- 127.0.0.1:8443 --tls cert.pem key.pem  # https:// (h2 by ALPN)
//! ```
//!
//! Over HTTP/2 a browser opens the page's sockets as extended CONNECT streams (RFC 8441) on the
//! page's own connection. Each request is logged to stderr with its connection's peer address,
//! so that is visible: `request: HTTP/2.0 CONNECT /ws protocol=websocket peer=127.0.0.1:40000`.

use std::net::SocketAddr;

use axum::extract::{Extension, Request};
use axum::middleware::{self, Next};
use axum::response::{Html, Response};
use axum::routing::{any, get};
use futures_util::StreamExt;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use sockeye::tls::{ServerTls, TlsAcceptor};
use sockeye::upgrade::{Upgrade, UpgradedWebSocket};

const PAGE: &str = include_str!("axum_page.html");

/// The handler: the extractor checked the request (an HTTP/1.1 upgrade or an HTTP/2 extended
/// CONNECT); the closure runs once the socket is switched.
async fn socket(upgrade: Upgrade) -> Response {
    upgrade.on_upgrade(echo)
}

async fn echo(mut ws: UpgradedWebSocket) {
    while let Some(Ok(message)) = ws.next().await {
        if message.is_data() && ws.feed(message).await.is_err() {
            break;
        }
    }
}

/// The connection a request came on.
#[derive(Clone, Copy)]
struct Peer(SocketAddr);

async fn log(Extension(Peer(peer)): Extension<Peer>, request: Request, next: Next) -> Response {
    let protocol = request
        .extensions()
        .get::<hyper::ext::Protocol>()
        .map(|p| format!(" protocol={}", p.as_str()))
        .unwrap_or_default();
    eprintln!(
        "request: {:?} {} {}{protocol} peer={peer}",
        request.version(),
        request.method(),
        request.uri().path()
    );
    next.run(request).await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (addr, tls) = match args.as_slice() {
        [] => ("127.0.0.1:8080", None),
        [addr] => (addr.as_str(), None),
        [addr, flag, cert, key] if flag == "--tls" => {
            let tls = ServerTls::from_pem_files(cert, key)?.with_alpn(&[b"h2", b"http/1.1"]);
            (addr.as_str(), Some(tls.acceptor()))
        }
        _ => return Err("usage: axum [ADDR] [--tls CERT_PEM KEY_PEM]".into()),
    };
    let app = axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        // `any`: over HTTP/2 the socket arrives as a CONNECT, not a GET.
        .route("/ws", any(socket));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("page on {scheme}://{}/", listener.local_addr()?);
    loop {
        let (tcp, peer) = listener.accept().await?;
        let app = app
            .clone()
            .layer(middleware::from_fn(log))
            .layer(Extension(Peer(peer)));
        let tls = tls.clone();
        tokio::spawn(async move {
            let _ = tcp.set_nodelay(true);
            match tls {
                Some(acceptor) => match TlsAcceptor::accept(&acceptor, tcp).await {
                    Ok(stream) => serve(TokioIo::new(stream), app).await,
                    Err(e) => eprintln!("TLS handshake with {peer} failed: {e}"),
                },
                None => serve(TokioIo::new(tcp), app).await,
            }
        });
    }
}

/// HTTP/1.1 and HTTP/2 on one connection, whichever the client speaks, with upgrades and
/// extended CONNECT allowed.
async fn serve<I>(io: I, app: axum::Router)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().enable_connect_protocol();
    let _ = builder
        .serve_connection_with_upgrades(io, TowerToHyperService::new(app))
        .await;
}
