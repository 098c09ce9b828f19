//! A web face for a node, on one port (feature `web`): the JSON protocol's WebSocket, the
//! JavaScript client and its demo page, an HTTP API for backends, and metrics, as one
//! [axum](https://docs.rs/axum) [`Router`](axum::Router).
//!
//! | path | what |
//! |---|---|
//! | `/` | the JSON protocol (`docs/pubsub-protocol.md`) over a WebSocket, HTTP/1.1 or HTTP/2; a plain `GET` answers 426 |
//! | `/client.js` | the JavaScript client (`clients/js`), an ES module |
//! | `/demo` | a live notifications page using it |
//! | `POST /publish/<topic>` | publishes the JSON body on the topic (bearer token) |
//! | `POST /publish` | publishes a batch `{"publications":[{"topic":T,"data":D},…]}` (bearer token) |
//! | `GET /history/<topic>?since=offset@epoch&limit=N` | what the topic's history holds after `since` (bearer token) |
//! | `/metrics` | Prometheus text format |
//!
//! ```no_run
//! use sockeye_pubsub::Hub;
//! use sockeye_pubsub::web::{Web, WebConfig};
//!
//! # async fn run() -> std::io::Result<()> {
//! let hub = Hub::in_process();
//! let web = Web::new(hub, WebConfig::default().api_token("s3cret"));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8008").await?;
//! loop {
//!     let (tcp, _) = listener.accept().await?;
//!     tokio::spawn(sockeye_pubsub::web::serve_connection(
//!         hyper_util::rt::TokioIo::new(tcp),
//!         web.router(),
//!     ));
//! }
//! # }
//! ```
//!
//! Files: `auth` (who a client is), `socket` (the WebSocket at `/`), `api` (the backends' HTTP
//! API), `metrics`, `respond` (JSON answers). This file holds the configuration and the router.

mod api;
pub mod auth;
mod metrics;
mod respond;
mod socket;

use std::sync::Arc;
use std::time::Duration;

use axum::routing::{any, get, post};
use hyper_util::rt::TokioExecutor;
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use sockeye::ShutdownHandle;

use crate::{Hub, OnGap, SessionConfig};
use auth::{Authorize, Refused};
use metrics::Metrics;

pub use auth::Refused as AuthRefused;

/// The JavaScript client, served at `/client.js`. Read from the repository at build time:
/// packaging this crate on its own needs a copy of `clients/js/src/index.js` inside it.
const CLIENT_JS: &str = include_str!("../../../../clients/js/src/index.js");
/// The demo page, served at `/demo`; it imports `./client.js`, which resolves to `/client.js`.
const DEMO_HTML: &str = include_str!("../../../../clients/js/demo.html");

/// What a JSON frame may add around a publication's data: its type, topic, position and id.
const JSON_HEADROOM: usize = 4096;

/// The web face's settings.
#[derive(Clone)]
pub struct WebConfig {
    pub(crate) session: SessionConfig,
    pub(crate) api_token: Option<Arc<str>>,
    pub(crate) authorize: Option<Authorize>,
    pub(crate) history_limit: usize,
    pub(crate) socket: sockeye::Config,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("session", &self.session)
            .field("api_token", &self.api_token.as_ref().map(|_| "…"))
            .field("authorize", &self.authorize.is_some())
            .field("history_limit", &self.history_limit)
            .field("socket", &self.socket)
            .finish()
    }
}

impl Default for WebConfig {
    /// Sessions with [`OnGap::Deliver`] (the client is told of a gap with a `gap` frame), no
    /// API token (the HTTP API answers 403), no client authentication (every client may
    /// subscribe to and publish on every topic), at most 1,000 messages per history read,
    /// `sockeye::Config::default()` for the WebSockets.
    fn default() -> Self {
        WebConfig {
            session: SessionConfig::default().on_gap(OnGap::Deliver),
            api_token: None,
            authorize: None,
            history_limit: 1000,
            socket: sockeye::Config::default(),
        }
    }
}

impl WebConfig {
    /// The settings of each WebSocket's [`Session`](crate::Session). Default:
    /// `SessionConfig::default().on_gap(OnGap::Deliver)`.
    pub fn session(mut self, config: SessionConfig) -> Self {
        self.session = config;
        self
    }

    /// The bearer token backends send (`Authorization: Bearer TOKEN`) to use the HTTP API.
    /// Default: none, and the API answers every request with 403 saying how to turn it on.
    pub fn api_token(mut self, token: impl Into<String>) -> Self {
        self.api_token = Some(Arc::from(token.into()));
        self
    }

    /// Decides, from the `token` in a WebSocket's query string (`/?token=…`, what
    /// `clients/js` sends; `None` without one), what the connection may do, or refuses it
    /// (401 or 403, before the upgrade). Default: none, every client may do everything. See
    /// [`auth`] for a shared token and for JWTs.
    pub fn authorize(
        mut self,
        check: impl Fn(Option<&str>) -> Result<crate::access::Access, Refused> + Send + Sync + 'static,
    ) -> Self {
        self.authorize = Some(Arc::new(check));
        self
    }

    /// The WebSockets' settings (compression, timeouts, buffers). Its
    /// `protocol.max_message_size` is replaced by what fits the hub's largest publication in a
    /// frame (a larger frame is closed with 1009). Default: `sockeye::Config::default()`.
    pub fn socket(mut self, config: sockeye::Config) -> Self {
        self.socket = config;
        self
    }

    /// The most messages one `GET /history` returns (`limit` is capped to it). Default 1,000.
    pub fn history_limit(mut self, messages: usize) -> Self {
        self.history_limit = messages;
        self
    }
}

/// What every request of a node's web face shares.
pub(crate) struct Shared {
    pub(crate) hub: Hub,
    pub(crate) config: WebConfig,
    pub(crate) metrics: Metrics,
    pub(crate) shutdown: ShutdownHandle,
    /// The WebSocket's settings: a message may carry the largest publication and its frame.
    pub(crate) socket: sockeye::Config,
}

/// A node's web face: its [`router`](Self::router), and the graceful shutdown of its sockets.
#[derive(Clone)]
pub struct Web {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Web {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Web")
            .field("config", &self.shared.config)
            .finish_non_exhaustive()
    }
}

impl Web {
    /// The web face of `hub`.
    pub fn new(hub: Hub, config: WebConfig) -> Web {
        let mut socket = config.socket.clone();
        socket.protocol.max_message_size = hub.max_payload().saturating_add(JSON_HEADROOM);
        Web {
            shared: Arc::new(Shared {
                hub,
                config,
                metrics: Metrics::new(),
                shutdown: ShutdownHandle::new(),
                socket,
            }),
        }
    }

    /// The routes (see the [module docs](self)).
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            // `any`: over HTTP/2 the socket arrives as a CONNECT, not a GET.
            .route("/", any(socket::serve))
            .route(
                "/client.js",
                get(|| async { respond::text("text/javascript; charset=utf-8", CLIENT_JS) }),
            )
            .route(
                "/demo",
                get(|| async { respond::text("text/html; charset=utf-8", DEMO_HTML) }),
            )
            .route("/publish", post(api::publish_batch))
            // `/publish/` too: an empty topic is refused as one (400), not an unknown path.
            .route("/publish/", post(api::publish_one))
            .route("/publish/{*topic}", post(api::publish_one))
            .route("/history/{*topic}", get(api::history))
            .route("/metrics", get(metrics::scrape))
            .fallback(socket::elsewhere)
            .with_state(Arc::clone(&self.shared))
    }

    /// Begins the graceful shutdown: every WebSocket is sent close 1001 (going away) at its
    /// next receive or send, and new ones are closed as soon as they open. Stop accepting
    /// connections yourself; then [`closed`](Self::closed) waits for the sockets to finish.
    pub fn shutdown(&self) {
        self.shared.shutdown.shutdown();
    }

    /// The WebSockets open now.
    pub fn connections(&self) -> usize {
        self.shared.metrics.open_connections()
    }

    /// Waits until every WebSocket has closed, or `timeout` has passed; returns whether they
    /// all closed.
    pub async fn closed(&self, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        while self.connections() > 0 {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }
}

/// Serves one connection with `router`: HTTP/1.1 or HTTP/2 (by ALPN after TLS, or the h2c
/// preface), whichever the client speaks, with WebSocket upgrades and HTTP/2 extended CONNECT
/// (RFC 8441) allowed. Ends when the connection does.
pub async fn serve_connection<I>(io: I, router: axum::Router)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().enable_connect_protocol();
    if let Err(error) = builder
        .serve_connection_with_upgrades(io, TowerToHyperService::new(router))
        .await
    {
        tracing::debug!(%error, "HTTP connection ended with an error");
    }
}

/// The percent-decoded value of `name` in `uri`'s query string (`+` is a space, as forms send).
pub(crate) fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    uri.query()?.split('&').find_map(|pair| {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        (key == name).then(|| decode(&value.replace('+', " ")))
    })
}

/// Percent-decoded (RFC 3986 §2.1), invalid UTF-8 replaced.
pub(crate) fn decode(text: &str) -> String {
    percent_encoding::percent_decode_str(text)
        .decode_utf8_lossy()
        .into_owned()
}
