//! Upgrading requests that hyper 1 serves — directly or under a framework such as axum — to
//! WebSocket connections. The request is checked and compression negotiated by the same code as
//! [`accept_with`](crate::accept_with); hyper keeps the HTTP connection and hands the socket over
//! after the `101` response.
//!
//! With hyper (serve the connection `.with_upgrades()`):
//!
//! ```no_run
//! use http_body_util::Full;
//! use hyper::{Request, Response, body::{Bytes, Incoming}};
//! use futures_util::StreamExt;
//!
//! async fn handle(mut request: Request<Incoming>) -> Result<Response<Full<Bytes>>, hyper::Error> {
//!     let upgrade = match sockeye::upgrade::Upgrade::from_request(&mut request) {
//!         Ok(upgrade) => upgrade,
//!         // Not a WebSocket request: 400, 405, 426 or 505, with a short body that says why.
//!         Err(refusal) => return Ok(refusal.map(Full::from)),
//!     };
//!     Ok(upgrade.on_upgrade(|mut ws| async move {
//!         while let Some(Ok(message)) = ws.next().await {
//!             if message.is_data() && ws.feed(message).await.is_err() {
//!                 break;
//!             }
//!         }
//!     }))
//! }
//! ```
//!
//! Over HTTP/2 (RFC 8441) the same code accepts an extended CONNECT and answers `200`: serve
//! the connection with hyper's `http2::Builder::enable_connect_protocol()` (hyper-util's `auto`
//! builder: `.http2().enable_connect_protocol()`), and route CONNECT as well as GET to the
//! handler (in axum, `any(...)` instead of `get(...)`).
//!
//! With axum (feature `axum`), [`Upgrade`] is an extractor: no glue code.
//!
//! ```no_run
//! # #[cfg(feature = "axum")]
//! # async fn run() -> std::io::Result<()> {
//! use axum::{Router, response::Response, routing::get};
//! use sockeye::upgrade::Upgrade;
//!
//! async fn socket(upgrade: Upgrade) -> Response {
//!     upgrade.select_protocol(["chat"]).on_upgrade(|mut ws| async move {
//!         let _ = ws.send("hello from axum").await;
//!     })
//! }
//!
//! let app = Router::new().route("/ws", get(socket));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```

use std::future::Future;

use http::header::SEC_WEBSOCKET_PROTOCOL;
use http::{Extensions, HeaderMap, HeaderValue, Method, Request, Response, StatusCode, Version};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use sockeye_proto::Role;
use sockeye_proto::handshake::{ClientHello, reject_response};

use crate::config::Config;
use crate::error::Error;
use crate::websocket::WebSocket;

/// A WebSocket connection over a socket that hyper upgraded.
pub type UpgradedWebSocket = WebSocket<TokioIo<Upgraded>>;

/// A checked WebSocket upgrade request, not yet answered.
///
/// Choose a subprotocol with [`select_protocol`](Self::select_protocol), set a [`Config`] with
/// [`config`](Self::config), then answer with [`on_upgrade`](Self::on_upgrade) (which runs your
/// handler in a task once the connection is switched) or [`into_response`](Self::into_response)
/// (which gives you the future of the connection instead).
pub struct Upgrade {
    hello: ClientHello,
    on_upgrade: OnUpgrade,
    config: Config,
    protocol: Option<HeaderValue>,
}

impl std::fmt::Debug for Upgrade {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upgrade")
            .field("hello", &self.hello)
            .field("protocol", &self.protocol)
            .finish_non_exhaustive()
    }
}

impl Upgrade {
    /// Checks that `request` is a WebSocket upgrade (RFC 6455 §4.2.1) — or, over HTTP/2, an
    /// extended CONNECT with `:protocol: websocket` (RFC 8441 §4) — and takes hyper's upgrade
    /// handle out of it. `Err` is the response to send instead: 400, 405, 426 (with
    /// `Sec-WebSocket-Version: 13`) or 505 for a request that is not a valid upgrade, 500 if the
    /// connection cannot be upgraded (hyper serving without `with_upgrades()`, or HTTP/2 without
    /// `enable_connect_protocol()`).
    pub fn from_request<B>(request: &mut Request<B>) -> Result<Upgrade, Response<String>> {
        let (method, version) = (request.method().clone(), request.version());
        // `Request` keeps headers and extensions apart; borrow them separately.
        let headers = std::mem::take(request.headers_mut());
        let upgrade = Self::from_head(&method, version, &headers, request.extensions_mut());
        *request.headers_mut() = headers;
        upgrade
    }

    /// [`from_request`](Self::from_request) for a request head in pieces (a framework's parts).
    pub fn from_head(
        method: &Method,
        version: Version,
        headers: &HeaderMap,
        extensions: &mut Extensions,
    ) -> Result<Upgrade, Response<String>> {
        let hello = if version >= Version::HTTP_2 {
            let protocol = extensions.get::<hyper::ext::Protocol>().map(|p| p.as_str());
            ClientHello::from_extended_connect(method, protocol, headers)
        } else {
            ClientHello::from_head(method, version, headers)
        };
        Self::with_upgrade(hello.map_err(|e| reject_response(&e))?, extensions)
    }

    /// Takes hyper's upgrade handle for a request that passed the checks.
    fn with_upgrade(hello: ClientHello, extensions: &mut Extensions) -> Result<Upgrade, Response<String>> {
        let Some(on_upgrade) = extensions.remove::<OnUpgrade>() else {
            let mut response = Response::new(
                "this connection cannot be upgraded: serve it with hyper's `with_upgrades()`\n".to_string(),
            );
            *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
            return Err(response);
        };
        Ok(Upgrade {
            hello,
            on_upgrade,
            config: Config::default(),
            protocol: None,
        })
    }

    /// The subprotocols the client offered, in its order of preference.
    pub fn offered_protocols(&self) -> &[String] {
        &self.hello.protocols
    }

    /// Picks the first of `supported` (your order of preference) that the client offered, and
    /// names it in the response. If none matches, no subprotocol is named (RFC 6455 §4.2.2).
    pub fn select_protocol<'a>(mut self, supported: impl IntoIterator<Item = &'a str>) -> Self {
        let supported: Vec<&str> = supported.into_iter().collect();
        self.protocol = self
            .hello
            .choose_subprotocol(&supported)
            .and_then(|p| HeaderValue::from_str(p).ok());
        self
    }

    /// The configuration of the connection (limits, timeouts, compression). Default:
    /// `Config::default()`.
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// The response to return now (`101`, or `200` over HTTP/2), and the connection, which is
    /// ready once hyper has sent the response and handed over the socket (or the HTTP/2 stream).
    pub fn into_response<B: Default>(
        self,
    ) -> (
        Response<B>,
        impl Future<Output = Result<UpgradedWebSocket, Error>> + Send + 'static,
    ) {
        let (mut response, extensions) = self.hello.accept_with(&self.config.protocol);
        if let Some(protocol) = self.protocol {
            response.headers_mut().insert(SEC_WEBSOCKET_PROTOCOL, protocol);
        }
        let deflate = extensions.kept_by(&response);
        let (on_upgrade, config) = (self.on_upgrade, self.config);
        let connection = async move {
            let upgraded = on_upgrade.await.map_err(std::io::Error::other)?;
            // hyper hands over any bytes it read past the request inside `Upgraded`.
            Ok(WebSocket::from_upgraded(
                TokioIo::new(upgraded),
                Role::Server,
                &config,
                &[],
                deflate,
            ))
        };
        (response.map(|()| B::default()), connection)
    }

    /// The response to return now (`101`, or `200` over HTTP/2); `handler` runs in a new task with
    /// the connection once hyper has switched it (if the switch fails, the handler is not called
    /// and the failure is logged at debug level, through `tracing`).
    pub fn on_upgrade<B, F, Fut>(self, handler: F) -> Response<B>
    where
        B: Default,
        F: FnOnce(UpgradedWebSocket) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (response, connection) = self.into_response();
        tokio::spawn(async move {
            match connection.await {
                Ok(ws) => handler(ws).await,
                Err(error) => tracing::debug!(%error, "WebSocket upgrade failed; the handler was not called"),
            }
        });
        response
    }
}

#[cfg(feature = "axum")]
impl<S: Send + Sync> axum_core::extract::FromRequestParts<S> for Upgrade {
    type Rejection = Response<String>;

    async fn from_request_parts(
        parts: &mut http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        Upgrade::from_head(
            &parts.method,
            parts.version,
            &parts.headers,
            &mut parts.extensions,
        )
    }
}
